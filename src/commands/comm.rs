//! `ridgeline measure comm ...`: communication benchmarks under MPI (every rank runs this;
//! rank 0 writes and prints), and the Slurm script that runs them on a cluster.

use anyhow::{Result, bail};
use ridgeline_app::campaign::{self, SlurmJob};
use ridgeline_app::tables;
use ridgeline_measure::Protocol;
use ridgeline_measure::comm::{CommBench, CommPlan, Pairs};
use ridgeline_reports::Document;

use crate::cli::{CommArgs, CommBenchCommand, Format, MeasureCommArgs, PairsArg};
use crate::output::{self, Progress};

pub(crate) fn run(args: &MeasureCommArgs) -> Result<()> {
    if args.emit_slurm {
        return output::emit(&campaign::slurm_script(&slurm_job(args)));
    }
    let Some(bench) = &args.bench else {
        bail!(
            "measure comm: name a benchmark (pingpong, allreduce or alltoall), or pass \
             --emit-slurm for a batch script"
        );
    };
    let (plan, common) = match bench {
        CommBenchCommand::Pingpong(a) => {
            let mut plan = CommPlan::new(CommBench::PingPong);
            plan.pairs = match a.pairs {
                PairsArg::Levels => Pairs::Levels,
                PairsArg::All => Pairs::All,
            };
            plan.train = usize::try_from(a.train).unwrap_or(usize::MAX);
            (plan, &a.comm)
        }
        CommBenchCommand::Allreduce(a) => {
            let mut plan = CommPlan::new(CommBench::Allreduce);
            plan.algorithms.clone_from(&a.algorithm);
            (plan, &a.comm)
        }
        CommBenchCommand::Alltoall(a) => (CommPlan::new(CommBench::Alltoall), &a.comm),
    };
    let plan = with_common(plan, common);
    let ran = campaign::comm(
        &plan,
        common.campaign.out.as_deref(),
        common.campaign.resume,
        &Progress::new(),
    )?;
    if !ran.is_root() {
        return Ok(());
    }
    if common.campaign.format.format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let table_rows = tables::record_rows(&ran.records);
    let cols = tables::record_cols();
    output::print(common.campaign.format.format, &ran.records, |style| {
        let mut doc = Document::new(format!("MPI {}", plan.bench.name()));
        if let Some(r) = ran.records.first() {
            let extra = &r.extra;
            doc = doc.summary(
                "job",
                format!(
                    "{} ranks on {} node(s), {}",
                    ran.ranks,
                    extra.nodes.map_or("?".to_owned(), |n| n.to_string()),
                    extra.mpi_library.as_deref().unwrap_or("unknown MPI")
                ),
            );
            if !extra.mpi_settings.is_empty() {
                let list: Vec<String> = extra
                    .mpi_settings
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                doc = doc.summary("settings", list.join(" "));
            }
        }
        if let Some(out) = &common.campaign.out {
            doc = doc.summary(
                "records",
                format!("{} new in {}", ran.records.len(), out.display()),
            );
        }
        if ran.skipped > 0 {
            doc = doc.summary("skipped", format!("{} already recorded", ran.skipped));
        }
        for note in &ran.notes {
            doc = doc.note(note.clone());
        }
        doc.table(output::table(&table_rows, &cols, style)).note(
            "median of each measurement's samples; a collective's sample is its slowest rank's time",
        )
    })
}

/// The Slurm job the flags describe.
fn slurm_job(args: &MeasureCommArgs) -> SlurmJob {
    SlurmJob {
        nodes: args.nodes,
        ranks_per_node: args.ranks_per_node,
        time: args.time.clone(),
        partition: args.partition.clone(),
        account: args.account.clone(),
    }
}

/// The plan with the sizes and protocol the command line gives.
fn with_common(mut plan: CommPlan, common: &CommArgs) -> CommPlan {
    if let Some(sizes) = &common.sizes {
        plan.sizes.clone_from(&sizes.0);
    }
    plan.protocol = common
        .campaign
        .protocol
        .overrides()
        .apply(Protocol::default());
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::Parser;

    #[test]
    fn the_slurm_script_names_the_job_shape() {
        let cli = Cli::parse_from([
            "ridgeline",
            "measure",
            "comm",
            "--emit-slurm",
            "--nodes",
            "4",
            "--ranks-per-node",
            "8",
            "--partition",
            "gpu",
        ]);
        let crate::cli::Command::Measure(crate::cli::MeasureCommand::Comm(args)) = cli.command
        else {
            panic!("not measure comm");
        };
        let s = campaign::slurm_script(&slurm_job(&args));
        assert!(s.starts_with("#!/bin/bash\n"));
        for line in [
            "#SBATCH --nodes=4",
            "#SBATCH --ntasks-per-node=8",
            "#SBATCH --partition=gpu",
            "measure comm pingpong",
            "measure comm allreduce",
            "validate comm",
        ] {
            assert!(s.contains(line), "missing `{line}` in\n{s}");
        }
        assert!(!s.contains("--account"));
    }
}
