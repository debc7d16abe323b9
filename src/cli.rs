//! Command-line definitions (clap derive). Parsing only: values are checked here as far as
//! their type allows, and the library validates the rest.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ridgeline_model::cost::MAX_BATCH;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::precision::Precision;

/// Predict how deep-learning training performs on HPC systems.
///
/// Workloads are built-in (`ridgeline workload list`) or TOML layer files; systems are
/// catalog names (`ridgeline system list`), a device name, `local` (this machine), or a
/// TOML system file. All commands print a table by default; `--format json` is the stable
/// interface (quantities in base SI units: FLOP, bytes, seconds, FLOP/s, bytes/s).
#[derive(Debug, Parser)]
#[command(name = "ridgeline", version, about, long_about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// List, show and export workloads.
    #[command(subcommand)]
    Workload(WorkloadCommand),
    /// Memory footprint per device versus batch size, and the largest batch that fits.
    Memory(MemoryArgs),
    /// Per-layer device roofline of one training step (ideal efficiency).
    Roofline(RooflineArgs),
    /// List and show systems and devices.
    #[command(subcommand)]
    System(SystemCommand),
}

#[derive(Debug, Subcommand)]
pub(crate) enum WorkloadCommand {
    /// List the built-in workloads.
    List(FormatArg),
    /// Per-layer parameters, FLOPs, HBM bytes and activations of one training step.
    Show(ShowArgs),
    /// Write a workload as a TOML layer file that `ridgeline` reads back.
    Export(ExportArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum SystemCommand {
    /// List the catalog systems and devices.
    List(FormatArg),
    /// Show every figure of a system, with its source.
    Show(SystemShowArgs),
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// Aligned text for terminals.
    Table,
    /// JSON, the stable interface.
    Json,
    /// CSV of the table, numbers in base units.
    Csv,
}

#[derive(Debug, Args)]
pub(crate) struct PrecisionArg {
    /// Precision: fp32, tf32, amp-fp16 or amp-bf16.
    #[arg(long, default_value = "fp32", value_parser = parse_precision)]
    pub(crate) precision: Precision,
}

#[derive(Debug, Args)]
pub(crate) struct SystemArg {
    /// A system name, device name, `local`, or system/device TOML file.
    #[arg(long)]
    pub(crate) system: String,
}

#[derive(Debug, Args)]
pub(crate) struct FormatArg {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(crate) format: Format,
}

/// Which workload, and how to scale it.
#[derive(Debug, Args)]
pub(crate) struct WorkloadArgs {
    /// A built-in workload name or the path of a workload TOML file.
    pub(crate) workload: String,
    /// Input spatial size: one value for every dimension (`64`) or one per dimension
    /// (`384x576`).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(crate) input_size: Option<InputSize>,
    /// Multiplier on inner channel counts (built-in workloads only).
    #[arg(long, value_name = "W")]
    pub(crate) width: Option<f64>,
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Batch size per device.
    #[arg(long, default_value_t = 1, value_parser = batch_parser())]
    pub(crate) batch: u64,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct MemoryArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) system: SystemArg,
    /// Batch sizes `A..B` (inclusive): A, 2A, 4A, ... and B; with --batch-step, every
    /// step-th batch. Default: 1 up to the first power of two above the largest batch that
    /// fits.
    #[arg(long, value_name = "A..B", value_parser = parse_range)]
    pub(crate) batch_range: Option<(u64, u64)>,
    /// Linear step through --batch-range instead of doubling.
    #[arg(long, value_name = "N", value_parser = batch_parser())]
    pub(crate) batch_step: Option<u64>,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    /// Optimizer: sgd, sgd-momentum, adam or lamb.
    #[arg(long, default_value = "sgd-momentum", value_parser = parse_optimizer)]
    pub(crate) optimizer: Optimizer,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct RooflineArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) system: SystemArg,
    /// Batch size per device.
    #[arg(long, value_parser = batch_parser())]
    pub(crate) batch: u64,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct SystemShowArgs {
    /// A system name, device name, `local`, or system/device TOML file.
    pub(crate) system: String,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

fn batch_parser() -> clap::builder::RangedU64ValueParser<u64> {
    clap::value_parser!(u64).range(1..=MAX_BATCH)
}

fn parse_precision(s: &str) -> Result<Precision, String> {
    s.parse()
        .map_err(|e: ridgeline_model::precision::UnknownPrecision| e.to_string())
}

fn parse_optimizer(s: &str) -> Result<Optimizer, String> {
    s.parse()
}

/// An input spatial size: one extent, or one per dimension. (A newtype, so clap takes it
/// as one value rather than a list of occurrences.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InputSize(pub(crate) Vec<usize>);

/// `64` or `384x576`.
fn parse_size(s: &str) -> Result<InputSize, String> {
    s.split('x')
        .map(|d| match d.trim().parse::<usize>() {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(format!(
                "`{s}` is not a size: give positive integers like 64 or 384x576"
            )),
        })
        .collect::<Result<_, _>>()
        .map(InputSize)
}

/// `A..B` with 1 <= A <= B <= MAX_BATCH.
fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("`{s}` is not a batch range: write A..B with 1 <= A <= B <= {MAX_BATCH}");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b): (u64, u64) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a == 0 || a > b || b > MAX_BATCH {
        return Err(bad());
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64"), Ok(InputSize(vec![64])));
        assert_eq!(parse_size("384x576"), Ok(InputSize(vec![384, 576])));
        assert!(parse_size("0").is_err());
        assert!(parse_size("4x").is_err());
    }

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("1..64"), Ok((1, 64)));
        assert!(parse_range("0..4").is_err());
        assert!(parse_range("8..4").is_err());
        assert!(parse_range("8").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// Regression: an `Option<Vec<_>>` field made clap panic when --input-size was given.
    #[test]
    fn input_size_parses_through_clap() {
        let cli = Cli::try_parse_from([
            "ridgeline",
            "workload",
            "show",
            "deepcam",
            "--input-size",
            "384x576",
        ])
        .unwrap();
        let Command::Workload(WorkloadCommand::Show(args)) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(args.workload.input_size, Some(InputSize(vec![384, 576])));
    }
}
