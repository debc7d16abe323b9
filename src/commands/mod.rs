//! One module per subcommand.

mod calibrate;
mod comm;
mod import;
mod manual;
mod measure;
mod memory;
mod predict;
mod report;
mod roofline;
mod scale;
mod slurm;
mod stack;
mod sweep;
mod system;
mod validate;
mod workload;

use anyhow::Result;

use crate::cli::{
    Cli, Command, ImportCommand, MeasureCommand, ReportCommand, StackCommand, SystemCommand,
    WorkloadCommand,
};

/// Runs the parsed command line.
pub(crate) fn run(cli: Cli) -> Result<()> {
    if let Command::Measure(m) = &cli.command
        && let Some((name, args)) = m.campaign()
        && (args.slurm.slurm || args.slurm.emit_slurm)
    {
        return slurm::campaign(name, args);
    }
    match cli.command {
        Command::Workload(WorkloadCommand::List(args)) => workload::list(&args),
        Command::Workload(WorkloadCommand::Show(args)) => workload::show(&args),
        Command::Workload(WorkloadCommand::Export(args)) => workload::export(&args),
        Command::Workload(WorkloadCommand::Import(args)) => workload::import(&args),
        Command::Memory(args) => memory::run(&args),
        Command::Roofline(args) => roofline::run(&args),
        Command::System(SystemCommand::List(args)) => system::list(&args),
        Command::System(SystemCommand::Show(args)) => system::show(&args),
        Command::System(SystemCommand::FromSlurm(args)) => slurm::from_slurm(&args),
        Command::Stack(StackCommand::List(args)) => stack::list(&args),
        Command::Stack(StackCommand::Show(args)) => stack::show(&args),
        Command::Predict(args) => predict::run(&args),
        Command::Scale(args) => scale::run(&args),
        Command::Sweep(args) => sweep::run(&args),
        Command::Measure(MeasureCommand::Gemm(args)) => measure::gemm(&args),
        Command::Measure(MeasureCommand::Conv(args)) => measure::conv(&args),
        Command::Measure(MeasureCommand::Stream(args)) => measure::stream(&args),
        Command::Measure(MeasureCommand::Copy(args)) => measure::copy(&args),
        Command::Measure(MeasureCommand::Nccl(args)) => measure::nccl(&args),
        Command::Measure(MeasureCommand::Ops(args)) => measure::ops(&args),
        Command::Measure(MeasureCommand::Workload(args)) => measure::workload(&args),
        Command::Measure(MeasureCommand::Suite(args)) => measure::suite(&args),
        Command::Measure(MeasureCommand::Comm(args)) => comm::run(&args),
        Command::Measure(MeasureCommand::Merge(args)) => slurm::merge(&args),
        Command::Calibrate(args) => calibrate::run(&args),
        Command::Validate(args) => validate::run(&args),
        Command::Report(ReportCommand::Procurement(args)) => report::procurement(&args),
        Command::Report(ReportCommand::Workload(args)) => report::workload(&args),
        Command::Report(ReportCommand::Validation(args)) => report::validation(&args),
        Command::Import(ImportCommand::Neusight(args)) => import::neusight(&args),
        Command::Import(ImportCommand::Mlperf(args)) => import::mlperf(&args),
        Command::Import(ImportCommand::TorchTrace(args)) => import::torch_trace(&args),
        Command::Import(ImportCommand::Nsys(args)) => import::nsys(&args),
        Command::Manual(args) => manual::run(&args),
    }
}
