//! The MPI communication campaign as one Slurm job over several nodes.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{client, job_id, path_arg, quote};

/// A Slurm job's shape for the communication campaign.
#[derive(Debug, Clone)]
pub struct CommJob {
    /// Nodes.
    pub nodes: u32,
    /// MPI ranks per node.
    pub ranks_per_node: u32,
    /// Wall-time limit, as Slurm writes it.
    pub time: String,
    /// Partition, if any.
    pub partition: Option<String>,
    /// Account, if any.
    pub account: Option<String>,
    /// The `ridgeline` binary (a build with `--features mpi`); `ridgeline` on PATH if none.
    pub ridgeline: Option<PathBuf>,
    /// The campaign's folder; `ridgeline-comm-<job id>` in the submission folder if none.
    pub dir: Option<PathBuf>,
}

impl CommJob {
    /// A batch script that runs the campaign on `nodes` nodes, calibrates LogGP from the
    /// ping-pong and validates the allreduce model against the measured allreduce. Its
    /// ranks start under `srun` over PMIx or PMI-2, whichever this cluster's Slurm and the
    /// MPI library share (Open MPI's `ompi_info` says which it was built with), or under
    /// `mpirun` inside the allocation where they share none.
    pub fn script(&self) -> String {
        let mut s = String::from("#!/bin/bash\n");
        s += "#SBATCH --job-name=ridgeline-comm\n";
        s += &format!("#SBATCH --nodes={}\n", self.nodes);
        s += &format!("#SBATCH --ntasks-per-node={}\n", self.ranks_per_node);
        s += &format!("#SBATCH --time={}\n", self.time);
        if let Some(p) = &self.partition {
            s += &format!("#SBATCH --partition={p}\n");
        }
        if let Some(a) = &self.account {
            s += &format!("#SBATCH --account={a}\n");
        }
        s += "#SBATCH --exclusive\n";
        match &self.dir {
            Some(d) => s += &format!("#SBATCH --output={}\n", d.join("comm-%j.out").display()),
            None => s += "#SBATCH --output=ridgeline-comm-%j.out\n",
        }
        s += &format!(
            "#\n# ridgeline {} communication campaign: {} node(s) x {} rank(s).\n",
            env!("CARGO_PKG_VERSION"),
            self.nodes,
            self.ranks_per_node
        );
        s += "# 1. ping-pong between rank 0 and one rank per level (same node, other node):\n";
        s +=
            "#    the Netgauge round trips LogGP is fitted from, and the local reduction kernel;\n";
        s += "# 2. allreduce (MPI_Allreduce, ring, rhd, rd) and all-to-all over every rank;\n";
        s += "# 3. calibrate LogGP from the ping-pong alone, and validate the allreduce model.\n";
        s += "# Submit with `sbatch`. Re-submitting resumes: measured sizes are skipped.\n";
        s += "# RIDGELINE must be a build with `--features mpi` against this cluster's MPI.\n";
        s += "# The ranks start under srun with the PMI this Slurm and the MPI library share\n";
        s += "# (PMIx, else PMI-2), else under mpirun inside the allocation; LAUNCH overrides.\n";
        s += "# RIDGELINE_COMM_FLAGS adds flags to every benchmark (e.g. --sizes 1K,1M).\n";
        s += "set -euo pipefail\n";
        let ridgeline = self.ridgeline.as_ref().map_or_else(
            || "ridgeline".to_owned(),
            |p| quote(&p.display().to_string()),
        );
        s += &format!("RIDGELINE=${{RIDGELINE:-{ridgeline}}}\n");
        s += LAUNCHER;
        match &self.dir {
            Some(d) => s += &format!("DIR={}\n", quote(&d.display().to_string())),
            None => s += "DIR=${RIDGELINE_COMM_DIR:-ridgeline-comm-${SLURM_JOB_ID}}\n",
        }
        s += "mkdir -p \"$DIR\"\n";
        for bench in ["pingpong", "allreduce", "alltoall"] {
            s += &format!(
                "$LAUNCH \"$RIDGELINE\" measure comm {bench} ${{RIDGELINE_COMM_FLAGS:-}} --out \"$DIR/{bench}.jsonl\" --resume\n"
            );
        }
        s += "\"$RIDGELINE\" calibrate \"$DIR/pingpong.jsonl\" --out \"$DIR/profile.toml\"\n";
        s += "\"$RIDGELINE\" validate comm --profile \"$DIR/profile.toml\" --measured \"$DIR/allreduce.jsonl\" | tee \"$DIR/validation.txt\"\n";
        s
    }

    /// Checks the partition, writes the script into the campaign's folder and submits it;
    /// with `wait`, returns when the job has ended and fails where it failed. What was
    /// submitted, in words.
    pub fn submit(&self, wait: bool) -> Result<String> {
        let dir = self
            .dir
            .as_ref()
            .context("a submitted campaign needs its folder")?;
        super::sbatch_path(dir)?;
        if let Some(p) = &self.partition {
            super::check_partitions(std::slice::from_ref(p))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let script = dir.join("comm.sh");
        std::fs::write(&script, self.script())
            .with_context(|| format!("writing {}", script.display()))?;
        let script = path_arg(&script)?;
        let mut args = vec!["--parsable"];
        if wait {
            args.push("--wait");
        }
        args.push(&script);
        let id = job_id(&client("sbatch", &args).with_context(|| {
            format!(
                "the communication campaign in {} (its log: comm-<job id>.out there)",
                dir.display()
            )
        })?);
        Ok(format!(
            "{} communication campaign, Slurm job {id}: {} node(s) x {} rank(s)\n  folder  {}\n  log     {}\n",
            if wait { "Ran the" } else { "Submitted the" },
            self.nodes,
            self.ranks_per_node,
            dir.display(),
            dir.join(format!("comm-{id}.out")).display()
        ))
    }
}

/// Picks how the job's ranks start, at run time on the first node: `srun --mpi=pmix` where
/// Slurm lists PMIx and Open MPI was built with a PMIx component, `srun --mpi=pmi2` where
/// both have PMI-2 (Open MPI's `s2`), either where the MPI is not Open MPI (MPICH and its
/// kin speak both), and `mpirun` otherwise (it starts the ranks through Slurm itself).
const LAUNCHER: &str = r#"if [ -z "${LAUNCH:-}" ]; then
    plugins=$(srun --mpi=list 2>&1 || true)
    if command -v ompi_info >/dev/null; then
        ompi=$(ompi_info --parsable 2>/dev/null || true)
        pmix=$(grep -c '^mca:pmix:\(ext\|pmix\)' <<<"$ompi" || true)
        pmi2=$(grep -c '^mca:pmix:s2:' <<<"$ompi" || true)
    else
        pmix=1
        pmi2=1
    fi
    if grep -qw pmix <<<"$plugins" && [ "$pmix" -gt 0 ]; then
        LAUNCH="srun --mpi=pmix"
    elif grep -qw pmi2 <<<"$plugins" && [ "$pmi2" -gt 0 ]; then
        LAUNCH="srun --mpi=pmi2"
    else
        LAUNCH="mpirun"
    fi
fi
echo "ridgeline: ranks start with: $LAUNCH"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_names_the_job_shape_and_picks_a_launcher() {
        let job = CommJob {
            nodes: 4,
            ranks_per_node: 8,
            time: "01:00:00".into(),
            partition: Some("gpu".into()),
            account: None,
            ridgeline: None,
            dir: None,
        };
        let s = job.script();
        assert!(s.starts_with("#!/bin/bash\n"));
        for line in [
            "#SBATCH --nodes=4",
            "#SBATCH --ntasks-per-node=8",
            "#SBATCH --partition=gpu",
            "LAUNCH=\"srun --mpi=pmix\"",
            "LAUNCH=\"mpirun\"",
            "$LAUNCH \"$RIDGELINE\" measure comm pingpong",
            "measure comm allreduce",
            "validate comm",
        ] {
            assert!(s.contains(line), "missing `{line}` in\n{s}");
        }
        assert!(!s.contains("--account"));
    }
}
