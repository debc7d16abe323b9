//! A measurement command line turned into one Slurm campaign per partition: what each task
//! runs, where each campaign writes, and what submitting, printing and waiting say.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use super::{ArrayCampaign, check_partitions, wait};

/// The flags of `ridgeline measure` that shape the Slurm job rather than what each task
/// measures, and whether each takes a value: a task runs the command line without them,
/// with its share, its own records file and `--resume` instead.
const JOB_FLAGS: [(&str, bool); 10] = [
    ("--slurm", false),
    ("--emit-slurm", false),
    ("--tasks", true),
    ("--partition", true),
    ("--time", true),
    ("--account", true),
    ("--calibrate", false),
    ("--wait", false),
    ("--out", true),
    ("--resume", false),
];

/// A measurement command line to run under Slurm.
#[derive(Debug, Clone)]
pub struct ArrayRequest {
    /// The measurement: `suite`, `gemm` ...
    pub name: String,
    /// The whole command line after the program's name, as given.
    pub argv: Vec<String>,
    /// The `ridgeline` binary the jobs run.
    pub ridgeline: PathBuf,
    /// Array tasks per campaign.
    pub tasks: u32,
    /// Partitions; Slurm's default where empty.
    pub partitions: Vec<String>,
    /// Each task's wall-clock limit.
    pub time: String,
    /// The account, if any.
    pub account: Option<String>,
    /// Calibrate a profile of each partition after its merge.
    pub calibrate: bool,
    /// The records file (absolute): one per partition where there are several.
    pub out: PathBuf,
}

impl ArrayRequest {
    /// One campaign per partition.
    pub fn campaigns(&self) -> Result<Vec<ArrayCampaign>> {
        let partitions: Vec<Option<String>> = if self.partitions.is_empty() {
            vec![None]
        } else {
            self.partitions.iter().cloned().map(Some).collect()
        };
        let several = partitions.len() > 1;
        let campaigns: Vec<ArrayCampaign> = partitions
            .into_iter()
            .map(|partition| ArrayCampaign {
                name: self.name.clone(),
                args: task_args(&self.argv),
                ridgeline: self.ridgeline.clone(),
                tasks: self.tasks,
                out: out_for(&self.out, partition.as_deref(), several),
                partition,
                time: self.time.clone(),
                account: self.account.clone(),
                calibrate: self.calibrate,
            })
            .collect();
        for c in &campaigns {
            c.check()?;
        }
        Ok(campaigns)
    }
}

/// The scripts of `campaigns`, each under a line that names its file.
pub fn scripts(campaigns: &[ArrayCampaign]) -> String {
    let mut text = String::new();
    for c in campaigns {
        let dir = c.dir();
        text += &format!("# ===== {} =====\n", dir.join("task.sh").display());
        text += &c.task_script();
        text += &format!(
            "# ===== {} (sbatch --dependency=afterany:<the array's job id>) =====\n",
            dir.join("merge.sh").display()
        );
        text += &c.merge_script();
    }
    text
}

/// Submits `campaigns` (after checking their partitions, and that an existing records file
/// is continued only with `resume`): what was submitted, in words, and the merge jobs.
pub fn submit(campaigns: &[ArrayCampaign], resume: bool) -> Result<(String, Vec<String>)> {
    let partitions: Vec<String> = campaigns
        .iter()
        .filter_map(|c| c.partition.clone())
        .collect();
    check_partitions(&partitions)?;
    for c in campaigns {
        if c.out.exists() && !resume {
            bail!(
                "{}: the file exists: pass --resume to continue that campaign (each task \
                 resumes its own file and the merge adds only what is new), or choose another \
                 --out",
                c.out.display()
            );
        }
    }
    let mut merges = Vec::new();
    let mut text = String::new();
    for c in campaigns {
        let job = c.submit()?;
        text += &format!(
            "Submitted to Slurm{}: job array {} ({} task(s)), then merge job {}\n",
            c.partition
                .as_ref()
                .map(|p| format!(", partition {p}"))
                .unwrap_or_default(),
            job.array,
            c.tasks,
            job.merge
        );
        text += &format!("  records   {}\n", c.out.display());
        text += &format!(
            "  tasks     {}/ (task-<i>.out, records-<i>.jsonl)\n",
            c.dir().display()
        );
        if c.calibrate {
            text += &format!("  profile   {}\n", c.profile().display());
        }
        merges.push(job.merge);
    }
    Ok((text, merges))
}

/// Waits for the merge jobs of `campaigns` and says what they made; fails where one failed.
pub fn finish(campaigns: &[ArrayCampaign], merges: &[String]) -> Result<String> {
    wait(merges)?;
    let mut text = String::new();
    for c in campaigns {
        c.outcome()?;
        let (records, _) = ridgeline_measure::read_records(&c.out)?;
        text += &format!("Merged: {} records in {}\n", records.len(), c.out.display());
        if c.calibrate {
            text += &format!("Calibrated: {}\n", c.profile().display());
        }
    }
    Ok(text)
}

/// `args` (the command line after the program) without the job's flags.
fn task_args(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        match JOB_FLAGS.iter().find(|(f, _)| *f == name) {
            Some((_, takes_value)) => skip_value = *takes_value && !a.contains('='),
            None => out.push(a.clone()),
        }
    }
    out
}

/// `out` for `partition` where the campaign spans several: `runs/suite.jsonl` ->
/// `runs/suite-gpu.jsonl`.
fn out_for(out: &Path, partition: Option<&str>, several: bool) -> PathBuf {
    match partition {
        Some(p) if several => {
            let stem = out
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
            let name = match out.extension() {
                Some(e) => format!("{stem}-{p}.{}", e.to_string_lossy()),
                None => format!("{stem}-{p}"),
            };
            out.with_file_name(name)
        }
        _ => out.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn a_task_runs_the_command_without_the_jobs_flags() {
        let argv = words(
            "measure suite --budget 5m --slurm --tasks 4 --partition=gpu --time 02:00:00 \
             --out runs/s.jsonl --resume --threads 1 --calibrate --wait",
        );
        assert_eq!(
            task_args(&argv),
            words("measure suite --budget 5m --threads 1")
        );
    }

    #[test]
    fn several_partitions_each_get_a_records_file() {
        let out = Path::new("/r/suite.jsonl");
        assert_eq!(
            out_for(out, Some("gpu"), true),
            Path::new("/r/suite-gpu.jsonl")
        );
        assert_eq!(out_for(out, Some("gpu"), false), out);
        assert_eq!(out_for(out, None, false), out);
    }
}
