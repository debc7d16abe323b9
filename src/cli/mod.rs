//! Command-line definitions (clap derive). Parsing only: values are checked here as far as
//! their type allows, and the library validates the rest. The top-level command, the flag
//! groups several commands share and the value parsers are here; each command group's flags
//! are in a module of their own, re-exported.

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ridgeline_app::campaign::{CampaignSpec, ProtocolOverrides, Shard, ThreadCount};
use ridgeline_app::inputs::{ScenarioSpec, WorkloadSpec};
use ridgeline_model::collective::Algorithm;
use ridgeline_model::cost::MAX_BATCH;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::precision::{GradientPrecision, Precision};
use ridgeline_model::predict::{DataLocation, KernelModel, Overlap, Quality};
use ridgeline_model::sweep::Objective;
use ridgeline_model::system::MAX_NODES;

mod measure;
mod model;
mod report;
mod validate;

pub(crate) use measure::*;
pub(crate) use model::*;
pub(crate) use report::*;
pub(crate) use validate::*;

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
    /// The software stacks predictions run under (framework, fusion, precision, host).
    #[command(subcommand)]
    Stack(StackCommand),
    /// Predict step time, epoch time and time to solution on N nodes.
    Predict(PredictArgs),
    /// A scaling series: strong, weak, ensemble or problem size.
    Scale(ScaleArgs),
    /// Evaluate every combination of systems, nodes, batches and precisions; keep the best.
    Sweep(SweepArgs),
    /// Measure kernels and full training steps on this machine; write raw records.
    #[command(subcommand)]
    Measure(MeasureCommand),
    /// Fit a calibrated profile of this machine from micro-kernel records.
    Calibrate(CalibrateArgs),
    /// Compare predictions with measured training steps or imported runs; or run the whole loop here
    /// (--self-check).
    Validate(ValidateArgs),
    /// Write reports (self-contained HTML, Markdown, CSV and JSON, with plots).
    #[command(subcommand)]
    Report(ReportCommand),
    /// Import measurements made elsewhere: public GPU kernel sets (NeuSight), MLPerf result
    /// logs, PyTorch profiler traces and Nsight Systems exports.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Write this command line's reference: a man page per command and one Markdown page.
    Manual(ManualArgs),
}

/// `ridgeline manual`.
#[derive(Debug, Args)]
pub(crate) struct ManualArgs {
    /// The directory to write into: `cli.md` and `man1/ridgeline*.1` (a MANPATH entry).
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
}

/// `ridgeline import ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
    /// NeuSight's measured GPU kernels (github.com/trsharm25/NeuSight, MIT licence).
    Neusight(ImportNeusightArgs),
    /// MLPerf result logs (`:::MLLOG` lines) as run records: benchmark, system,
    /// accelerators, global batch, epochs, initialisation, throughput and time to train.
    Mlperf(ImportMlperfArgs),
    /// A PyTorch profiler trace (Chrome-trace JSON from `torch.profiler`) mapped onto a
    /// workload's layers: layer-pass and step records for `validate`, and the layers'
    /// convolutions, ops and GEMMs as micro-kernel records for `calibrate`.
    TorchTrace(ImportTorchTraceArgs),
    /// An Nsight Systems report (`nsys export --type sqlite`): its kernels under the NVTX
    /// ranges around their launches; with --workload, the layer and step records of the
    /// ranges that name its layers (`LAYER`, `LAYER forward`, `LAYER backward`) and steps
    /// (`step...`).
    Nsys(ImportNsysArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ImportNsysArgs {
    /// The SQLite export (`.sqlite`, or `.sqlite.gz`).
    pub(crate) report: PathBuf,
    /// The workload whose layers the NVTX ranges name: a built-in name or a workload file.
    #[arg(long, requires_all = ["batch", "out"])]
    pub(crate) workload: Option<String>,
    /// Input spatial size of the workload (as `predict --input-size`).
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "workload")]
    pub(crate) input_size: Option<InputSize>,
    /// The batch per GPU the report ran.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), requires = "workload")]
    pub(crate) batch: Option<u64>,
    /// The training precision the report ran in (fp32, tf32, amp-fp16, amp-bf16, fp8).
    #[arg(long, value_parser = parse_precision, requires = "workload")]
    pub(crate) precision: Option<Precision>,
    /// Where to write the records (JSON Lines; written whole, or not at all).
    #[arg(long, value_name = "FILE", requires = "workload")]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct ImportTorchTraceArgs {
    /// The trace (`prof.export_chrome_trace(...)`; `.json`, or `.json.gz`), recorded with
    /// `record_shapes=True`.
    pub(crate) trace: PathBuf,
    /// The workload the trace ran: a built-in name or a workload file (built at the
    /// trace's input size); its layers must run in the trace's order.
    #[arg(long)]
    pub(crate) workload: String,
    /// The CPU threads the traced run used (`torch.get_num_threads()`; 1 for a GPU trace).
    #[arg(long)]
    pub(crate) threads: usize,
    /// Where to write the records (JSON Lines; written whole, or not at all).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct ImportMlperfArgs {
    /// Result logs (`result_N.txt`), or folders searched for them; a log's system
    /// description is read from the submission's `systems/<system>.json` where it exists.
    #[arg(required = true, value_name = "PATH")]
    pub(crate) paths: Vec<PathBuf>,
    /// Also write the runs to FILE, one JSON record a line, for `ridgeline validate
    /// --measured FILE --system S` (written whole, or not at all).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct ImportNeusightArgs {
    /// A checkout of the NeuSight repository.
    pub(crate) dir: PathBuf,
    /// The NeuSight commit the files come from (read from the checkout when omitted).
    #[arg(long)]
    pub(crate) commit: Option<String>,
    /// Where to write the kernel set.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "data/evidence/kernels/neusight"
    )]
    pub(crate) out: PathBuf,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

/// Image format of plot files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ImageArg {
    /// Scalable vector graphics.
    Svg,
    /// Portable network graphics.
    Png,
}

impl ImageArg {
    pub(crate) fn format(self) -> ridgeline_reports::ImageFormat {
        match self {
            ImageArg::Svg => ridgeline_reports::ImageFormat::Svg,
            ImageArg::Png => ridgeline_reports::ImageFormat::Png,
        }
    }
}

/// `--plot DIR`: write the command's plots too.
#[derive(Debug, Args)]
pub(crate) struct PlotArgs {
    /// Also write this command's plots into DIR (created if missing).
    #[arg(long, value_name = "DIR")]
    pub(crate) plot: Option<PathBuf>,
    /// Image format of the plots.
    #[arg(long, value_enum, default_value_t = ImageArg::Svg, requires = "plot")]
    pub(crate) plot_format: ImageArg,
}

/// Most threads one may ask for.
const MAX_THREADS: usize = 4096;

fn parse_threads(s: &str) -> Result<Threads, String> {
    s.split(',')
        .map(|t| match t.trim() {
            "all" => Ok(ThreadCount::All),
            n => match n.parse::<usize>() {
                Ok(v) if (1..=MAX_THREADS).contains(&v) => Ok(ThreadCount::N(v)),
                _ => Err(format!(
                    "`{n}` is not a thread count: give numbers from 1 to {MAX_THREADS}, or `all`"
                )),
            },
        })
        .collect::<Result<_, _>>()
        .map(Threads)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration ({e}); write e.g. 500ms, 90s, 5m"))
}

/// The least budget of `measure suite` (a zero budget would plan nothing).
const MIN_SUITE_BUDGET: Duration = Duration::from_secs(1);

/// The least budget of the self-check: its suite needs a few minutes to cover every kernel
/// class the reference workloads use (calibration refuses a profile without them).
const MIN_SELF_CHECK_BUDGET: Duration = Duration::from_secs(120);

fn parse_budget(s: &str, least: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < least {
        return Err(format!(
            "`{s}` is below the least budget of {}; give at least that",
            humantime::format_duration(least)
        ));
    }
    Ok(d)
}

fn parse_suite_budget(s: &str) -> Result<Duration, String> {
    parse_budget(s, MIN_SUITE_BUDGET)
}

fn parse_self_check_budget(s: &str) -> Result<Duration, String> {
    parse_budget(s, MIN_SELF_CHECK_BUDGET)
}

fn parse_gemm_shape(s: &str) -> Result<[usize; 3], String> {
    let bad = || {
        format!(
            "`{s}` is not a GEMM shape: write MxNxK with integers from 1 to {MAX_GEMM}, e.g. 2048x2048x2048"
        )
    };
    let dims: Vec<usize> = s
        .split('x')
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .ok()
                .filter(|&v| (1..=MAX_GEMM).contains(&v))
        })
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    <[usize; 3]>::try_from(dims).map_err(|_| bad())
}

/// Largest GEMM extent accepted (so that three operands stay addressable).
const MAX_GEMM: usize = 1 << 20;

fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    match byte_size(t) {
        Err(unit) => Err(format!(
            "`{s}`: unknown unit `{unit}`; write e.g. 16K, 1M, 2G"
        )),
        Ok(Some(bytes)) if bytes > 0 && bytes <= 64 << 30 => {
            if bytes < 8 {
                Err(format!("`{s}`: an array needs at least one 8-byte element"))
            } else {
                usize::try_from(bytes).map_err(|_| format!("`{s}` is too large here"))
            }
        }
        Ok(_) => Err(format!(
            "`{s}` is not a size: give a positive number up to 64G, e.g. 16K, 1M, 2G"
        )),
    }
}

/// The one byte-size syntax: a whole number with an optional binary unit (`B`, `K` or
/// `KiB`, `M` or `MiB`, `G` or `GiB`). `Ok(None)`: no number (or past `u64`); `Err`: the
/// unit it does not know.
fn byte_size(v: &str) -> Result<Option<u64>, &str> {
    let (digits, unit) = v.split_at(v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len()));
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        other => return Err(other),
    };
    Ok(digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift)))
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
    /// Precision: fp32, tf32, amp-fp16, amp-bf16 or fp8 (BF16 with the stack's FP8 linear
    /// layers; `--stack megatron-te` or `tuned`).
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
    /// (`384x576`); for a transformer, the sequence length (`--seq-len`).
    #[arg(long, visible_alias = "seq-len", value_name = "SIZE", value_parser = parse_size)]
    pub(crate) input_size: Option<InputSize>,
    /// Multiplier on inner channel counts (built-in workloads only).
    #[arg(long, value_name = "W")]
    pub(crate) width: Option<f64>,
}

impl WorkloadArgs {
    /// The workload these flags name.
    pub(crate) fn spec(&self) -> WorkloadSpec {
        WorkloadSpec {
            name: self.workload.clone(),
            input_size: self.input_size.as_ref().map(|s| s.0.clone()),
            width: self.width,
        }
    }
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
    /// Where each node's share of the data set lives: auto, ddr, nvme, burst-buffer or pfs.
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
    #[arg(long, default_value = "fp32", value_parser = parse_from_str::<GradientPrecision>)]
    pub(crate) gradient_precision: GradientPrecision,
    /// What times a GPU's layers without a calibrated profile: `transfer`, the kernel model
    /// fitted on measured GPU kernels (from the device file; never faster than the ideal
    /// bound), or `ideal`, every layer at the datasheet peak and bandwidth (an upper bound).
    #[arg(long, default_value = "transfer", value_name = "MODEL", value_parser = parse_from_str::<KernelModel>)]
    pub(crate) efficiency: KernelModel,
    /// Attained fraction of peak FLOP/s for the ideal bound, in (0, 1].
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
    #[command(flatten)]
    pub(crate) stack: StackArg,
}

/// The software stack a prediction runs under.
#[derive(Debug, Args)]
pub(crate) struct StackArg {
    /// The software stack: a built-in one (pytorch-eager, the default; pytorch-compiled;
    /// megatron-te; tuned; ridgeline-executor; `ridgeline stack list`) or a stack file.
    /// `sweep` takes several, comma-separated, and sweeps them.
    #[arg(long, value_name = "NAME|FILE")]
    pub(crate) stack: Option<String>,
}

impl ScenarioArgs {
    /// The scenario these flags give.
    pub(crate) fn spec(&self) -> ScenarioSpec {
        ScenarioSpec {
            collective: self.collective,
            overlap: self.overlap,
            data_location: self.data_location,
            epochs: self.epochs,
            convergence: self.convergence.clone(),
            dataset: self.dataset.clone(),
            train_samples: self.train_samples,
            eval_samples: self.eval_samples,
            gradient_precision: self.gradient_precision,
            kernel_model: self.efficiency,
            compute_efficiency: self.compute_efficiency,
            memory_efficiency: self.memory_efficiency,
            preprocess_rate: self.preprocess_rate,
            compression: self.compression,
            quality: self.quality,
            optimizer: self.optimizer,
            stack: self.stack.stack.clone(),
        }
    }
}

/// A list of numbers given as values and ranges. (A newtype, so clap takes it as one
/// value.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Numbers<T>(pub(crate) Vec<T>);

/// Most values one list may expand to.
const MAX_LIST: u64 = 1 << 20;

/// `1,2,4`, `1..64` (every value), `1..64:x2` (geometric), `8..64:+8` (steps), mixed.
fn parse_list(s: &str, max: u64) -> Result<Vec<u64>, String> {
    parse_list_with(s, max, |v| v.parse().ok())
}

/// Byte sizes in `parse_list`'s syntax, each in [`byte_size`]'s.
fn parse_byte_list(s: &str) -> Result<Numbers<u64>, String> {
    parse_list_with(s, 1 << 40, |v| byte_size(v).ok().flatten()).map(Numbers)
}

fn parse_list_with(
    s: &str,
    max: u64,
    parse: impl Fn(&str) -> Option<u64>,
) -> Result<Vec<u64>, String> {
    let bad = |part: &str, why: &str| format!("`{part}` in `{s}`: {why}");
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let number = |v: &str| -> Result<u64, String> {
            let n: u64 = parse(v.trim()).ok_or_else(|| bad(part, "not a whole number"))?;
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
        // Count before expanding: `1..4294967295` must fail here, not allocate.
        let stride = match step {
            Some(st) if !st.starts_with('x') => number(st.strip_prefix('+').unwrap_or(st))?,
            _ => 1,
        };
        if step.is_none_or(|st| !st.starts_with('x'))
            && (b - a) / stride + 1 + out.len() as u64 > MAX_LIST
        {
            return Err(bad(
                part,
                &format!("expands to more than {MAX_LIST} values"),
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

/// Node counts: 1 to [`MAX_NODES`].
fn nodes_parser() -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(MAX_NODES))
}

fn parse_u32_list(s: &str) -> Result<Numbers<u32>, String> {
    parse_list(s, u64::from(MAX_NODES)).map(|v| {
        Numbers(
            v.into_iter()
                .map(|x| u32::try_from(x).unwrap_or(u32::MAX))
                .collect(),
        )
    })
}

/// The command-line arguments, with every value that starts with a hyphen and a digit
/// (`-3`, `-1..4`, `-2s`) joined to the long flag before it (`--epochs=-3`): clap then hands
/// it to the flag's parser, whose error names the flag and the valid range, instead of
/// calling `-3` an unexpected argument.
pub(crate) fn join_negative_values(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for arg in args {
        let negative = arg
            .to_str()
            .and_then(|a| a.strip_prefix('-'))
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit() || c == '.'));
        if let Some(flag) = out.last_mut().filter(|_| negative)
            && let Some(name) = flag.to_str()
            && name.starts_with("--")
            && !name.contains('=')
            && name.len() > 2
        {
            let joined = format!("{name}={}", arg.to_string_lossy());
            *flag = joined.into();
            continue;
        }
        out.push(arg);
    }
    out
}

fn parse_from_str<T: FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}

/// `--efficiency`.
pub(crate) fn parse_kernel_model(s: &str) -> Result<KernelModel, String> {
    s.parse()
}

/// A Slurm time limit: digits, `:` and `-` only (`01:00:00`, `1-00:00:00`).
fn parse_slurm_time(s: &str) -> Result<String, String> {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_digit() || c == ':' || c == '-')
    {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "`{s}` is not a Slurm time limit; write e.g. 01:00:00 or 1-00:00:00"
        ))
    }
}

/// A Slurm partition or account name, safe to write into a shell script.
fn parse_slurm_word(s: &str) -> Result<String, String> {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        Ok(s.to_owned())
    } else {
        Err(format!("`{s}`: use letters, digits, `_`, `-` and `.` only"))
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

/// A positive finite number.
fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

pub(crate) fn parse_precision(s: &str) -> Result<Precision, String> {
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
    fn measure_values_parse() {
        assert_eq!(
            parse_threads("1,all"),
            Ok(Threads(vec![ThreadCount::N(1), ThreadCount::All]))
        );
        assert!(parse_threads("0").is_err() && parse_threads("x").is_err());
        assert_eq!(parse_gemm_shape("64x32x16"), Ok([64, 32, 16]));
        assert!(parse_gemm_shape("64x32").is_err() && parse_gemm_shape("0x1x1").is_err());
        assert_eq!(parse_bytes("16K"), Ok(16 << 10));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert!(
            parse_bytes("4").is_err() && parse_bytes("1T").is_err() && parse_bytes("-1M").is_err()
        );
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(
            parse_byte_list("4..1M:x4").map(|n| n.0.len()),
            Ok(10),
            "4 B to 1 MiB in factors of 4"
        );
        assert_eq!(
            parse_byte_list("1K,2MiB"),
            Ok(Numbers(vec![1 << 10, 2 << 20]))
        );
        assert!(parse_byte_list("1T").is_err());
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert!(parse_duration("soon").is_err());
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
