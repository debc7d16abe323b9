//! Command-line definitions (clap derive). Parsing only: values are checked here as far as
//! their type allows, and the library validates the rest.

use std::path::PathBuf;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ridgeline_model::collective::Algorithm;
use ridgeline_model::cost::MAX_BATCH;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{DataLocation, Overlap, Quality};
use ridgeline_model::sweep::Objective;

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
    /// Predict step time, epoch time and time to solution on N nodes.
    Predict(PredictArgs),
    /// A scaling series: strong, weak, ensemble or problem size.
    Scale(ScaleArgs),
    /// Evaluate every combination of systems, nodes, batches and precisions; keep the best.
    Sweep(SweepArgs),
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

/// What a prediction assumes besides workload, system, nodes and batch.
#[derive(Debug, Args)]
pub(crate) struct ScenarioArgs {
    /// Allreduce algorithm: ring, tree, rhd, hier or best.
    #[arg(long, default_value = "best", value_parser = parse_from_str::<Algorithm>)]
    pub(crate) collective: Algorithm,
    /// Overlap of compute, input and allreduce: full (max, the lower bound) or none (sum).
    #[arg(long, default_value = "full", value_parser = parse_from_str::<Overlap>)]
    pub(crate) overlap: Overlap,
    /// Where each node's share of the data set lives: auto, ddr, nvme or pfs.
    #[arg(long, default_value = "auto", value_parser = parse_from_str::<DataLocation>)]
    pub(crate) data_location: DataLocation,
    /// Train for this many epochs instead of the convergence curve.
    #[arg(long, value_name = "E", conflicts_with = "convergence")]
    pub(crate) epochs: Option<f64>,
    /// A convergence curve file (epochs versus global batch).
    #[arg(long, value_name = "FILE")]
    pub(crate) convergence: Option<String>,
    /// A data set file (required for workload files; replaces a built-in's data set).
    #[arg(long, value_name = "FILE")]
    pub(crate) dataset: Option<String>,
    /// Train on this many samples per epoch instead of the whole data set.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) train_samples: Option<u64>,
    /// Evaluate on this many samples per epoch instead of the whole evaluation set.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) eval_samples: Option<u64>,
    /// Gradient precision on the wire: fp32, or fp16 (compression).
    #[arg(long, default_value = "fp32", value_parser = parse_gradient)]
    pub(crate) gradient_precision: u64,
    /// Attained fraction of peak FLOP/s, in (0, 1].
    #[arg(long, default_value_t = 1.0, value_name = "F")]
    pub(crate) compute_efficiency: f64,
    /// Attained fraction of memory bandwidth, in (0, 1].
    #[arg(long, default_value_t = 1.0, value_name = "F")]
    pub(crate) memory_efficiency: f64,
    /// CPU preprocessing throughput per node, samples per second.
    #[arg(long, value_name = "R")]
    pub(crate) preprocess_rate: Option<f64>,
    /// Raw / stored size of the data set (1 = uncompressed).
    #[arg(long, default_value_t = 1.0, value_name = "R")]
    pub(crate) compression: f64,
    /// Achieved quality, target quality and exponent n for Valid FLOPS, e.g. 0.75,0.763,5.
    #[arg(long, value_name = "A,T,N", value_parser = parse_quality)]
    pub(crate) quality: Option<Quality>,
    /// Optimizer, for the memory footprint: sgd, sgd-momentum, adam or lamb.
    #[arg(long, default_value = "sgd-momentum", value_parser = parse_optimizer)]
    pub(crate) optimizer: Optimizer,
}

#[derive(Debug, Args)]
pub(crate) struct PredictArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) system: SystemArg,
    /// Nodes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) nodes: u32,
    /// Batch size per device.
    #[arg(long, value_parser = batch_parser(), required_unless_present = "global_batch")]
    pub(crate) batch: Option<u64>,
    /// Global batch size, split evenly over the devices (instead of --batch).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "batch")]
    pub(crate) global_batch: Option<u64>,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

/// A scaling series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ScaleMode {
    /// Fixed global batch over more nodes (--global-batch, --nodes).
    Strong,
    /// Fixed local batch over more nodes (--batch, --nodes).
    Weak,
    /// M independent base models of P nodes each (--batch, --nodes-per-model, --models).
    Ensemble,
    /// The workload rebuilt over input sizes and widths (--batch, --nodes, --input-sizes,
    /// --widths).
    ProblemSize,
}

#[derive(Debug, Args)]
pub(crate) struct ScaleArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) system: SystemArg,
    /// The series.
    #[arg(long, value_enum)]
    pub(crate) mode: ScaleMode,
    /// Node counts: a list (1,2,4) and ranges (1..64 every value, 1..64:x2 doubling,
    /// 8..64:+8 in steps). Problem-size series use the first.
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) nodes: Option<Numbers<u32>>,
    /// Batch per device (weak, ensemble, problem-size).
    #[arg(long, value_parser = batch_parser())]
    pub(crate) batch: Option<u64>,
    /// Global batch (strong).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) global_batch: Option<u64>,
    /// Nodes per base model (ensemble).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) nodes_per_model: Option<u32>,
    /// Base-model counts (ensemble), as a list or ranges.
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) models: Option<Numbers<u32>>,
    /// Input sizes (problem-size): `64,96,128` or `384x576,768x1152`.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub(crate) input_sizes: Vec<InputSize>,
    /// Width multipliers (problem-size): `0.5,1,2`.
    #[arg(long, value_delimiter = ',')]
    pub(crate) widths: Vec<f64>,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Candidate systems, comma-separated (names or files).
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) systems: Vec<String>,
    /// Node counts: a list and ranges (1..1024 is every value; 1..1024:x2 doubles).
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) nodes: Numbers<u32>,
    /// Batch sizes per device, as a list and ranges.
    #[arg(long, value_parser = parse_u64_list)]
    pub(crate) batch: Numbers<u64>,
    /// Precisions to try, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "fp32", value_parser = parse_precision)]
    pub(crate) precisions: Vec<Precision>,
    /// How many of the best to print.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// Rank by time to solution, cost or energy.
    #[arg(long, default_value = "time", value_parser = parse_from_str::<Objective>)]
    pub(crate) objective: Objective,
    /// Write every feasible configuration to this file (.csv or .json).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

/// A list of numbers given as values and ranges. (A newtype, so clap takes it as one
/// value.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Numbers<T>(pub(crate) Vec<T>);

/// Most values one list may expand to.
const MAX_LIST: u64 = 1 << 20;

/// `1,2,4`, `1..64` (every value), `1..64:x2` (geometric), `8..64:+8` (steps), mixed.
fn parse_list(s: &str, max: u64) -> Result<Vec<u64>, String> {
    let bad = |part: &str, why: &str| format!("`{part}` in `{s}`: {why}");
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let number = |v: &str| -> Result<u64, String> {
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| bad(part, "not a whole number"))?;
            if n == 0 || n > max {
                return Err(bad(part, &format!("values must be between 1 and {max}")));
            }
            Ok(n)
        };
        let Some((a, rest)) = part.split_once("..") else {
            out.push(number(part)?);
            continue;
        };
        let (b, step) = match rest.split_once(':') {
            Some((b, step)) => (b, Some(step)),
            None => (rest, None),
        };
        let (a, b) = (number(a)?, number(b)?);
        if a > b {
            return Err(bad(
                part,
                "the range is written backwards; write A..B with A <= B",
            ));
        }
        match step {
            None => out.extend(a..=b),
            Some(st) if st.starts_with('x') => {
                let f = number(&st[1..])?;
                if f < 2 {
                    return Err(bad(part, "a geometric step needs a factor of at least 2"));
                }
                out.extend(
                    std::iter::successors(Some(a), |&v| v.checked_mul(f)).take_while(|&v| v <= b),
                );
            }
            Some(st) => {
                let d = number(st.strip_prefix('+').unwrap_or(st))?;
                out.extend((a..=b).step_by(usize::try_from(d).unwrap_or(usize::MAX)));
            }
        }
        if out.len() as u64 > MAX_LIST {
            return Err(bad(
                part,
                &format!("expands to more than {MAX_LIST} values"),
            ));
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn parse_u64_list(s: &str) -> Result<Numbers<u64>, String> {
    parse_list(s, MAX_BATCH).map(Numbers)
}

fn parse_u32_list(s: &str) -> Result<Numbers<u32>, String> {
    parse_list(s, u64::from(u32::MAX)).map(|v| {
        Numbers(
            v.into_iter()
                .map(|x| u32::try_from(x).unwrap_or(u32::MAX))
                .collect(),
        )
    })
}

fn parse_from_str<T: FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}

fn parse_gradient(s: &str) -> Result<u64, String> {
    match s {
        "fp32" => Ok(4),
        "fp16" => Ok(2),
        _ => Err(format!(
            "unknown gradient precision `{s}`; valid: fp32, fp16"
        )),
    }
}

fn parse_quality(s: &str) -> Result<Quality, String> {
    let parts: Vec<&str> = s.split(',').collect();
    let bad =
        || format!("`{s}` is not a quality: write achieved,target,exponent (e.g. 0.75,0.763,5)");
    let [a, t, n] = parts.as_slice() else {
        return Err(bad());
    };
    let num = |v: &str| {
        v.trim()
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && *x > 0.0)
    };
    match (num(a), num(t), num(n)) {
        (Some(achieved), Some(target), Some(exponent)) => Ok(Quality {
            achieved,
            target,
            exponent,
        }),
        _ => Err(bad()),
    }
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
    fn lists_and_ranges_expand() {
        assert_eq!(parse_list("1,2,4", 100), Ok(vec![1, 2, 4]));
        assert_eq!(parse_list("1..4", 100), Ok(vec![1, 2, 3, 4]));
        assert_eq!(parse_list("1..20:x2", 100), Ok(vec![1, 2, 4, 8, 16]));
        assert_eq!(parse_list("8..30:+8", 100), Ok(vec![8, 16, 24]));
        assert_eq!(parse_list("4,1..2,4", 100), Ok(vec![1, 2, 4]));
        assert!(parse_list("8..4", 100).unwrap_err().contains("backwards"));
        assert!(parse_list("0..4", 100).is_err());
        assert!(parse_list("1..200", 100).is_err());
        assert!(parse_list("1..8:x1", 100).is_err());
        assert!(parse_list("a", 100).is_err());
    }

    #[test]
    fn quality_parses() {
        assert_eq!(parse_quality("0.75,0.763,5").unwrap().exponent, 5.0);
        assert!(parse_quality("0.75,0.763").is_err());
        assert!(parse_quality("0.75,0,5").is_err());
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
