//! `ridgeline measure comm ...`: communication benchmarks under MPI (every rank runs this;
//! rank 0 writes and prints), and the Slurm script that runs them on a cluster.

use anyhow::{Result, bail};
use ridgeline_app::campaign;
use ridgeline_app::inputs;
use ridgeline_app::slurm::comm::CommJob;
use ridgeline_app::views::measure as views;
use ridgeline_measure::Protocol;
use ridgeline_measure::comm::{CommBench, CommPlan, DdpPlan, Pairs};

use crate::cli::{CommArgs, CommBenchCommand, CommDdpArgs, Format, MeasureCommArgs, PairsArg};
use crate::output::{self, Progress};

pub(crate) fn run(args: &MeasureCommArgs) -> Result<()> {
    if args.emit_slurm {
        return output::emit(&slurm_job(args)?.script());
    }
    if args.slurm {
        return output::emit(&slurm_job(args)?.submit(args.wait)?);
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
    output::print(common.campaign.format.format, &ran.records, |style| {
        views::comm(
            plan.bench.name(),
            &ran,
            common.campaign.out.as_deref(),
            style,
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
    output::print(args.format.format, &ran.records, |style| {
        views::ddp(
            &plan,
            &ran,
            [args.bucket_mib, args.first_bucket_mib],
            args.out.as_deref(),
            style,
        )
    })
}

/// The Slurm job the flags describe: a submitted one runs this binary and writes into
/// --dir (from the current folder).
fn slurm_job(args: &MeasureCommArgs) -> Result<CommJob> {
    let (ridgeline, dir) = match &args.dir {
        Some(d) if args.slurm => (
            Some(std::env::current_exe()?),
            Some(std::env::current_dir()?.join(d)),
        ),
        _ => (None, None),
    };
    Ok(CommJob {
        nodes: args.nodes,
        ranks_per_node: args.ranks_per_node,
        time: args.time.clone(),
        partition: args.partition.clone(),
        account: args.account.clone(),
        ridgeline,
        dir,
    })
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
