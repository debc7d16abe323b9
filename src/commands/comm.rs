//! `ridgeline measure comm ...`: communication benchmarks under MPI (every rank runs this;
//! rank 0 writes and prints), and the Slurm script that runs them on a cluster.

use anyhow::{Result, bail};
use ridgeline_app::campaign::{self, SlurmJob};
use ridgeline_app::{inputs, tables};
use ridgeline_measure::Protocol;
use ridgeline_measure::StepRun;
use ridgeline_measure::comm::{CommBench, CommPlan, DdpPlan, Pairs};
use ridgeline_model::precision::Precision;
use ridgeline_reports::Document;

use crate::cli::{CommArgs, CommBenchCommand, CommDdpArgs, Format, MeasureCommArgs, PairsArg};
use crate::output::{self, Progress};

pub(crate) fn run(args: &MeasureCommArgs) -> Result<()> {
    if args.emit_slurm {
        return output::emit(&campaign::slurm_script(&slurm_job(args)));
    }
    let Some(bench) = &args.bench else {
        bail!(
            "measure comm: name a benchmark (pingpong, allreduce, alltoall or ddp), or pass \
             --emit-slurm for a batch script"
        );
    };
    let (plan, common) = match bench {
        CommBenchCommand::Ddp(a) => return ddp(a),
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
            doc = doc.summary("job", job_line(ran.ranks, extra));
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

/// `measure comm ddp`: data-parallel training steps under MPI.
fn ddp(args: &CommDdpArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    const MIB: f64 = 1024.0 * 1024.0;
    let plan = DdpPlan {
        first_bucket_bytes: args.first_bucket_mib * MIB,
        bucket_bytes: args.bucket_mib * MIB,
        overlap: !args.after_backward,
        warmup: usize::try_from(args.warmup_steps)?,
        steps: usize::try_from(args.steps)?,
        ..DdpPlan::new(
            graph,
            usize::try_from(args.batch)?,
            usize::try_from(args.threads)?,
        )
    };
    let ran = campaign::ddp(&plan, args.out.as_deref(), args.resume, &Progress::new())?;
    if !ran.is_root() {
        return Ok(());
    }
    if args.format.format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let runs = StepRun::from_records(&ran.records);
    output::print(args.format.format, &ran.records, |style| {
        let mut doc = Document::new(format!(
            "Data-parallel training: {} batch {} per rank, {} ranks",
            plan.graph.name(),
            plan.batch,
            ran.ranks
        ));
        if ran.skipped {
            return doc.note("already in --out: --resume skipped the run");
        }
        let Some(run) = runs.first() else {
            return doc;
        };
        let extra = &run.step.extra;
        let ms = |v: &[f64]| format!("{:.1} ms", ridgeline_measure::protocol::median(v) * 1e3);
        doc = doc.summary("job", job_line(ran.ranks, extra));
        for (k, v) in tables::step_summary(&plan.graph, run, plan.batch, Precision::Fp32) {
            doc = doc.summary(k, v);
        }
        doc = doc
            .summary(
                "buckets",
                format!(
                    "{} a step ({} MiB, the first {} MiB), allreduced {}",
                    ran.buckets,
                    args.bucket_mib,
                    args.first_bucket_mib,
                    if plan.overlap {
                        "beside backward"
                    } else {
                        "after backward"
                    }
                ),
            )
            .summary("allreduce", ms(&extra.comm_s))
            .summary("allreduce after backward", ms(&extra.exposed_comm_s))
            .summary("gradients into buckets", ms(&extra.other_s));
        if let Some(out) = &args.out {
            doc = doc.summary(
                "records",
                format!("{} new in {}", ran.records.len(), out.display()),
            );
        }
        let rows = tables::step_layer_rows(&plan.graph, run, 10);
        doc.table(output::table(&rows, &tables::step_layer_cols(), style))
            .note("rank 0's steps, medians; the 10 slowest layers")
    })
}

/// The MPI job a record ran in: ranks, nodes and library.
fn job_line(ranks: usize, extra: &ridgeline_measure::Extra) -> String {
    format!(
        "{ranks} ranks on {} node(s), {}",
        extra.nodes.map_or("?".to_owned(), |n| n.to_string()),
        extra.mpi_library.as_deref().unwrap_or("unknown MPI")
    )
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
