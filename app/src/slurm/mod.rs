//! Measurement under Slurm, the way an HPC centre runs it. [`ArrayCampaign`] is a
//! micro-kernel or workload campaign as a job array: each task measures its share of the
//! cases (`--shard i/N`) into a records file of its own, and a merge job that waits for the
//! whole array joins the files into the campaign's by the one resume rule ([`merge()`]),
//! then, where asked, describes the partition ([`cluster`]) and calibrates a profile of it.
//! [`comm::CommJob`] is the MPI campaign as one multi-node job whose ranks `srun` starts over the
//! PMI the cluster's Slurm and Open MPI share, or `mpirun` inside the allocation.
//!
//! Every call into Slurm goes through [`client`], so a machine without Slurm, an unknown
//! partition and a refused submission each get one clear error.

pub mod cluster;
pub mod comm;
mod merge;
pub mod submit;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

pub use merge::{Merged, TaskFile, TaskStatus, exit_file, merge, task_file};

/// Runs the Slurm client command `cmd` with `args` and returns its standard output: an
/// error that says what to do where Slurm is not installed, and one with Slurm's own words
/// where the command fails.
pub fn client(cmd: &str, args: &[&str]) -> Result<String> {
    let out = match Command::new(cmd).args(args).output() {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "`{cmd}` is not on PATH: this machine has no Slurm client. Run on a login node of \
             a Slurm cluster; or write the batch scripts with --emit-slurm and submit them \
             there; or measure on this machine without --slurm"
        ),
        Err(e) => return Err(e).with_context(|| format!("running `{cmd}`")),
    };
    if !out.status.success() {
        bail!(
            "`{cmd} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The cluster's partitions, as `sinfo` lists them, and its default partition (`sinfo`
/// marks it with `*`).
pub fn partitions() -> Result<(Vec<String>, Option<String>)> {
    let text = client("sinfo", &["--noheader", "--format=%P"])?;
    let mut names = Vec::new();
    let mut default = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let name = line.trim_end_matches('*').to_owned();
        if line.ends_with('*') {
            default = Some(name.clone());
        }
        if !names.contains(&name) {
            names.push(name);
        }
    }
    Ok((names, default))
}

/// Checks that Slurm answers and has each partition of `wanted`: an unknown one is named
/// with the partitions there are.
pub fn check_partitions(wanted: &[String]) -> Result<()> {
    let (known, _) = partitions()?;
    for p in wanted {
        if !known.contains(p) {
            bail!(
                "--partition {p}: this cluster has no partition `{p}` (sinfo lists {}); give one \
                 of them",
                known.join(", ")
            );
        }
    }
    Ok(())
}

/// A micro-kernel or workload campaign as a Slurm job array and its merge job.
#[derive(Debug, Clone)]
pub struct ArrayCampaign {
    /// The measurement, for the job's name: `suite`, `gemm`, `workload` ...
    pub name: String,
    /// What each task runs: `ridgeline`'s arguments for the whole campaign, without its
    /// records file, `--resume` or the task's share; the task adds those.
    pub args: Vec<String>,
    /// The `ridgeline` binary the jobs run (the cluster shares its file system).
    pub ridgeline: PathBuf,
    /// Array tasks: the cases are split into this many shares.
    pub tasks: u32,
    /// The partition, or Slurm's default.
    pub partition: Option<String>,
    /// Each task's wall-time limit, as Slurm writes it.
    pub time: String,
    /// The account, if any.
    pub account: Option<String>,
    /// The campaign's records file: the tasks' files joined (an absolute path).
    pub out: PathBuf,
    /// After the merge, describe the partition and calibrate a profile of it.
    pub calibrate: bool,
}

/// What [`ArrayCampaign::submit`] submitted.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// The job array's id.
    pub array: String,
    /// The merge job's id.
    pub merge: String,
}

impl ArrayCampaign {
    /// The campaign's folder beside its records file (`runs/suite.jsonl` ->
    /// `runs/suite.slurm/`): the scripts, each task's records file and log, and the merge
    /// job's log.
    pub fn dir(&self) -> PathBuf {
        self.out.with_extension("slurm")
    }

    /// The profile the merge job calibrates (`runs/suite.jsonl` ->
    /// `runs/suite.profile.toml`).
    pub fn profile(&self) -> PathBuf {
        self.out.with_extension("profile.toml")
    }

    /// The system file the merge job writes of the partition, on one of its nodes.
    pub fn system_file(&self) -> PathBuf {
        self.dir().join("system.toml")
    }

    /// The `#SBATCH` lines every job of the campaign shares.
    fn header(&self, name: &str, log: &str) -> String {
        let mut s = String::from("#!/bin/bash\n");
        s += &format!("#SBATCH --job-name={name}\n");
        if let Some(p) = &self.partition {
            s += &format!("#SBATCH --partition={p}\n");
        }
        if let Some(a) = &self.account {
            s += &format!("#SBATCH --account={a}\n");
        }
        s += &format!("#SBATCH --output={}\n", self.dir().join(log).display());
        s
    }

    /// Checks that the campaign's folder can stand in an `#SBATCH` line, which no shell
    /// reads: no space, quote or `%` (Slurm's file-name patterns).
    pub fn check(&self) -> Result<()> {
        sbatch_path(&self.dir())
    }

    /// The array's batch script: task `i` measures share `i` of `tasks` on a node of its
    /// own into `records-i.jsonl`, resuming it, and writes its exit status and node.
    pub fn task_script(&self) -> String {
        let dir = self.dir();
        let mut s = self.header(&format!("ridgeline-{}", self.name), "task-%a.out");
        s += &format!("#SBATCH --array=0-{}\n", self.tasks - 1);
        s += "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --exclusive\n";
        s += &format!("#SBATCH --time={}\n", self.time);
        s += &format!(
            "#\n# ridgeline {}: `ridgeline {}` as a job array of {} task(s) on whole nodes.\n",
            env!("CARGO_PKG_VERSION"),
            self.args.join(" "),
            self.tasks
        );
        s += "# Task i measures every case whose place in the campaign is i modulo the tasks,\n";
        s += "# into records-i.jsonl beside this script, and resumes that file: submitted\n";
        s += "# again, a task skips what it recorded and drops a half-written last line.\n";
        s += "set -uo pipefail\n";
        s += &format!(
            "RIDGELINE=${{RIDGELINE:-{}}}\n",
            quote(&self.ridgeline.display().to_string())
        );
        s += &format!("DIR={}\n", quote(&dir.display().to_string()));
        s += "i=$SLURM_ARRAY_TASK_ID\n";
        s += "rm -f \"$DIR/task-$i.exit\"\n";
        let args: Vec<String> = self.args.iter().map(|a| quote(a)).collect();
        s += &format!(
            "\"$RIDGELINE\" {} --shard \"$i/{}\" --out \"$DIR/records-$i.jsonl\" --resume\n",
            args.join(" "),
            self.tasks
        );
        s += "status=$?\n";
        s += "echo \"exit=$status node=${SLURMD_NODENAME:-$(hostname -s)} job=$SLURM_JOB_ID\" > \"$DIR/task-$i.exit\"\n";
        s += "exit $status\n";
        s
    }

    /// The merge job's batch script: joins the tasks' files into the campaign's records
    /// file; with `calibrate`, then describes the partition from one of its nodes and
    /// calibrates the profile.
    pub fn merge_script(&self) -> String {
        let dir = self.dir();
        let mut s = self.header(&format!("ridgeline-{}-merge", self.name), "merge.out");
        s += "#SBATCH --nodes=1\n#SBATCH --ntasks=1\n#SBATCH --time=00:30:00\n";
        s += &format!(
            "#\n# ridgeline {}: runs after every task of the array has ended, however it ended.\n",
            env!("CARGO_PKG_VERSION")
        );
        s += "# Joins the tasks' records into the campaign's file by the resume rule (each\n";
        s += "# record once; a half-written line dropped) and fails, naming the task and node,\n";
        s += "# where a task did not finish: submit the campaign again with --resume.\n";
        s += "set -euo pipefail\n";
        s += &format!(
            "RIDGELINE=${{RIDGELINE:-{}}}\n",
            quote(&self.ridgeline.display().to_string())
        );
        s += &format!(
            "MERGE_EXIT={}\n",
            quote(&self.merge_exit().display().to_string())
        );
        s += "trap 'echo \"exit=$? node=${SLURMD_NODENAME:-$(hostname -s)}\" > \"$MERGE_EXIT\"' EXIT\n";
        s += &format!(
            "\"$RIDGELINE\" measure merge {} --tasks {} --out {}\n",
            quote(&dir.display().to_string()),
            self.tasks,
            quote(&self.out.display().to_string())
        );
        if self.calibrate {
            let partition = self
                .partition
                .as_ref()
                .map(|p| format!(" --partition {p}"))
                .unwrap_or_default();
            s += &format!(
                "\"$RIDGELINE\" system from-slurm{partition} --out {}\n",
                quote(&self.system_file().display().to_string())
            );
            s += &format!(
                "\"$RIDGELINE\" calibrate {} --system {} --out {}\n",
                quote(&self.out.display().to_string()),
                quote(&self.system_file().display().to_string()),
                quote(&self.profile().display().to_string())
            );
        }
        s
    }

    /// The merge job's exit file: its status, written as it ends.
    pub fn merge_exit(&self) -> PathBuf {
        self.dir().join("merge.exit")
    }

    /// Writes the scripts into [`dir`](Self::dir), clears the exit files of an earlier
    /// submission, and submits the array and then the merge job after it (`afterany`: the
    /// merge runs however the tasks end).
    pub fn submit(&self) -> Result<Submitted> {
        self.check()?;
        let dir = self.dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut stale: Vec<PathBuf> = (0..self.tasks).map(|i| exit_file(&dir, i)).collect();
        stale.push(self.merge_exit());
        for exit in stale.iter().filter(|p| p.exists()) {
            std::fs::remove_file(exit).with_context(|| format!("removing {}", exit.display()))?;
        }
        let task = dir.join("task.sh");
        let merge = dir.join("merge.sh");
        for (path, text) in [(&task, self.task_script()), (&merge, self.merge_script())] {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        let array = job_id(&client("sbatch", &["--parsable", &path_arg(&task)?])?);
        let merged = job_id(&client(
            "sbatch",
            &[
                "--parsable",
                &format!("--dependency=afterany:{array}"),
                &path_arg(&merge)?,
            ],
        )?);
        Ok(Submitted {
            array,
            merge: merged,
        })
    }

    /// After the merge job has ended: `Ok` where it succeeded, else an error with the end
    /// of its log (a task that did not finish, a file of another schema).
    pub fn outcome(&self) -> Result<()> {
        let log = self.dir().join("merge.out");
        let tail = || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        match std::fs::read_to_string(self.merge_exit()) {
            Ok(text) if text.split_whitespace().any(|w| w == "exit=0") => Ok(()),
            Ok(_) => bail!(
                "the merge job of {} failed; its log ({}) ends:\n{}",
                self.out.display(),
                log.display(),
                tail()
            ),
            Err(_) => bail!(
                "the merge job of {} did not run to its end (cancelled, or its node failed); \
                 its log is {}: submit the campaign again with --resume",
                self.out.display(),
                log.display()
            ),
        }
    }
}

/// Waits until none of `jobs` is pending or running (`squeue` lists none of them).
pub fn wait(jobs: &[String]) -> Result<()> {
    let list = jobs.join(",");
    loop {
        match client(
            "squeue",
            &["--noheader", "--format=%i", &format!("--jobs={list}")],
        ) {
            Ok(out) if !out.trim().is_empty() => {
                std::thread::sleep(std::time::Duration::from_secs(2));
            }
            // Gone: squeue lists none of them, or no longer knows them.
            _ => return Ok(()),
        }
    }
}

/// Checks that `path` can stand unquoted in an `#SBATCH` line.
fn sbatch_path(path: &Path) -> Result<()> {
    let text = path_arg(path)?;
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || matches!(c, '\'' | '"' | '%' | '\\'))
    {
        bail!(
            "{text}: a Slurm job's log path cannot hold `{c}` (its #SBATCH lines are not read \
             by a shell): choose a folder whose path has none"
        );
    }
    Ok(())
}

/// A path as one command-line argument (Slurm takes UTF-8 paths only).
fn path_arg(path: &Path) -> Result<String> {
    path.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{}: not UTF-8; Slurm takes UTF-8 paths", path.display()))
}

/// The job id `sbatch --parsable` prints (`id` or `id;cluster`).
fn job_id(out: &str) -> String {
    out.trim().split(';').next().unwrap_or_default().to_owned()
}

/// `s` quoted for a POSIX shell where it needs quoting.
pub fn quote(s: &str) -> String {
    shlex::try_quote(s).map_or_else(
        |_| format!("'{}'", s.replace('\'', "'\\''").replace('\0', "")),
        |q| q.into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn campaign(calibrate: bool) -> ArrayCampaign {
        ArrayCampaign {
            name: "suite".into(),
            args: vec![
                "measure".into(),
                "suite".into(),
                "--budget".into(),
                "5m".into(),
            ],
            ridgeline: "/opt/ridgeline bin/ridgeline".into(),
            tasks: 4,
            partition: Some("gpu".into()),
            time: "02:00:00".into(),
            account: None,
            out: "/scratch/runs/suite.jsonl".into(),
            calibrate,
        }
    }

    #[test]
    fn the_array_script_gives_each_task_its_share_and_file() {
        let c = campaign(false);
        assert_eq!(c.dir(), Path::new("/scratch/runs/suite.slurm"));
        assert_eq!(c.profile(), Path::new("/scratch/runs/suite.profile.toml"));
        let s = c.task_script();
        for line in [
            "#SBATCH --array=0-3",
            "#SBATCH --partition=gpu",
            "#SBATCH --exclusive",
            "#SBATCH --time=02:00:00",
            "#SBATCH --output=/scratch/runs/suite.slurm/task-%a.out",
            "RIDGELINE=${RIDGELINE:-'/opt/ridgeline bin/ridgeline'}",
            "\"$RIDGELINE\" measure suite --budget 5m --shard \"$i/4\" --out \"$DIR/records-$i.jsonl\" --resume",
        ] {
            assert!(s.contains(line), "missing `{line}` in\n{s}");
        }
        assert!(!s.contains("--account"));
        let m = c.merge_script();
        assert!(
            m.contains(
                "measure merge /scratch/runs/suite.slurm --tasks 4 --out /scratch/runs/suite.jsonl"
            ),
            "{m}"
        );
        assert!(!m.contains("calibrate"), "{m}");
        let m = campaign(true).merge_script();
        assert!(
            m.contains(
                "system from-slurm --partition gpu --out /scratch/runs/suite.slurm/system.toml"
            ),
            "{m}"
        );
        assert!(m.contains("calibrate /scratch/runs/suite.jsonl --system /scratch/runs/suite.slurm/system.toml --out /scratch/runs/suite.profile.toml"), "{m}");
    }

    #[test]
    fn a_folder_an_sbatch_line_cannot_hold_is_refused() {
        let mut c = campaign(false);
        assert!(c.check().is_ok());
        c.out = "/scratch/my runs/suite.jsonl".into();
        let e = c.check().unwrap_err().to_string();
        assert!(
            e.contains("my runs") && e.contains("cannot hold ` `"),
            "{e}"
        );
    }

    #[test]
    fn quoting_keeps_a_word_whole() {
        assert_eq!(quote("plain-word_1.0"), "plain-word_1.0");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "\"it's\"");
        assert_eq!(job_id("1234;cluster\n"), "1234");
    }
}
