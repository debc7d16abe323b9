//! Command-line definitions (clap derive). Parsing only: values are checked here as far as
//! their type allows, and the library validates the rest.

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use ridgeline_app::campaign::{CampaignSpec, ProtocolOverrides, ThreadCount};
use ridgeline_app::inputs::{ScenarioSpec, WorkloadSpec};
use ridgeline_model::collective::Algorithm;
use ridgeline_model::cost::MAX_BATCH;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{DataLocation, Overlap, Quality};
use ridgeline_model::sweep::Objective;
use ridgeline_model::system::MAX_NODES;

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
    /// Measure kernels and full training steps on this machine; write raw records.
    #[command(subcommand)]
    Measure(MeasureCommand),
    /// Fit a calibrated profile of this machine from micro-kernel records.
    Calibrate(CalibrateArgs),
    /// Compare predictions with measured training steps; or run the whole loop here
    /// (--self-check).
    Validate(ValidateArgs),
    /// Write reports (self-contained HTML, Markdown, CSV and JSON, with plots).
    #[command(subcommand)]
    Report(ReportCommand),
}

/// `ridgeline report ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ReportCommand {
    /// Compare candidate systems on a workload mix: time to solution, throughput, cost and
    /// energy per solution, largest batch, bottlenecks, bandwidth needed, and a ranking.
    Procurement(ProcurementArgs),
    /// One workload on one system: prediction, memory, roofline, data movement, step-time
    /// breakdown and scaling.
    Workload(Box<ReportWorkloadArgs>),
    /// Predictions against measured training steps: error tables, prediction-vs-measurement
    /// and error-distribution plots, and kernel hardware efficiency.
    Validation(ReportValidationArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ReportWorkloadArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) system: SystemArg,
    /// Nodes.
    #[arg(long, default_value_t = 1, value_parser = nodes_parser())]
    pub(crate) nodes: u32,
    /// Batch size per device.
    #[arg(long, value_parser = batch_parser())]
    pub(crate) batch: u64,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) out: ReportOutArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReportValidationArgs {
    /// The calibrated profile (from `ridgeline calibrate`).
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: PathBuf,
    /// Measured workload steps (from `ridgeline measure workload`).
    #[arg(long, value_name = "FILE")]
    pub(crate) measured: PathBuf,
    #[command(flatten)]
    pub(crate) out: ReportOutArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ProcurementArgs {
    /// Candidate systems, comma-separated: shipped candidates (dgx-a100, dgx-h100,
    /// dgx-h200), candidate files, or any system (at its node count, without a price).
    #[arg(long, value_delimiter = ',', required = true, value_name = "A,B,...")]
    pub(crate) systems: Vec<String>,
    /// The workload mix: a shipped mix (mlperf-hpc) or a mix file.
    #[arg(long, default_value = "mlperf-hpc", value_name = "MIX")]
    pub(crate) mix: String,
    /// Compare what this purchase budget buys of each candidate (the currency of their
    /// prices) instead of their offered node counts.
    #[arg(long, value_parser = parse_positive)]
    pub(crate) budget: Option<f64>,
    /// Rank by time, cost or energy per mix.
    #[arg(long, default_value = "time", value_parser = parse_from_str::<Objective>)]
    pub(crate) objective: Objective,
    /// Fraction of the devices' peak FLOP/s the layers attain, for every candidate alike
    /// (1 = ideal: times are lower bounds).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) compute_efficiency: f64,
    /// Fraction of the devices' memory bandwidth the layers attain.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) memory_efficiency: f64,
    #[command(flatten)]
    pub(crate) out: ReportOutArgs,
}

/// Where and how a report is written.
#[derive(Debug, Args)]
pub(crate) struct ReportOutArgs {
    /// Directory for the report (created if missing): report.html, report.md with
    /// figures/, tables/*.csv and report.json.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
    /// Image format of the Markdown report's figure files.
    #[arg(long, value_enum, default_value_t = ImageArg::Svg)]
    pub(crate) images: ImageArg,
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

#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Record files (JSON Lines) from `ridgeline measure suite` or the micro-kernel commands.
    #[arg(required = true, value_name = "RECORDS")]
    pub(crate) records: Vec<PathBuf>,
    /// The datasheet system the profile overlays (a name, `local`, or a system file).
    #[arg(long, default_value = "local")]
    pub(crate) system: String,
    /// Which level MPI ping-pong records describe: by the hosts of each pair (auto), or
    /// all one level (e.g. `network` for TCP over loopback standing in for a network).
    #[arg(long, value_enum, default_value_t = CommLevelArg::Auto)]
    pub(crate) comm_level: CommLevelArg,
    /// Take the records measured on this many threads (default: the most in the files).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) threads: Option<u64>,
    /// Write the profile (TOML) here.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct ValidateArgs {
    #[command(subcommand)]
    pub(crate) what: Option<ValidateCommand>,
    /// The calibrated profile (from `ridgeline calibrate`).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "self_check",
        conflicts_with = "self_check"
    )]
    pub(crate) profile: Option<PathBuf>,
    /// Workload records (from `ridgeline measure workload --out`).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "self_check",
        conflicts_with = "self_check"
    )]
    pub(crate) measured: Option<PathBuf>,
    /// Measure the suite, calibrate, measure the three reference workloads at three batch
    /// sizes each, predict and compare — all on this machine.
    #[arg(long)]
    pub(crate) self_check: bool,
    /// Time budget of the self-check: 80 % for the micro-kernel suite (which stops early
    /// when it has measured everything); the workloads, measured before and after it, take
    /// about 3 minutes more.
    #[arg(long, default_value = "10m", value_parser = parse_self_check_budget, requires = "self_check")]
    pub(crate) budget: Duration,
    /// Directory for the self-check's records, profile and validation (created; an
    /// existing one is resumed).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "ridgeline-self-check",
        requires = "self_check"
    )]
    pub(crate) dir: PathBuf,
    /// Show this many of the worst layers.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

/// What else `validate` checks.
#[derive(Debug, Subcommand)]
pub(crate) enum ValidateCommand {
    /// The collective model against measured MPI allreduce: each measured size and rank
    /// count predicted from a profile's LogGP (`ridgeline calibrate` of ping-pong records).
    Comm(ValidateCommArgs),
    /// The model's counts against published figures: every built-in workload against its
    /// reference implementation's layer table (`data/reference/`), and the per-sample
    /// figures of Table II of Ibrahim et al., PMBS 2021 (seed 004; V100, mixed precision) beside the model's.
    Published(FormatArg),
}

#[derive(Debug, Args)]
pub(crate) struct ValidateCommArgs {
    /// The calibrated profile with communication levels.
    #[arg(long, value_name = "FILE")]
    pub(crate) profile: PathBuf,
    /// Allreduce records (from `ridgeline measure comm allreduce --out`).
    #[arg(long, value_name = "FILE")]
    pub(crate) measured: PathBuf,
    /// Which level the ranks talked over: by their hosts (auto), or all over one level
    /// (e.g. `network` for TCP over loopback standing in for a network).
    #[arg(long, value_enum, default_value_t = CommLevelArg::Auto)]
    pub(crate) level: CommLevelArg,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

/// A communication level, or by the hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CommLevelArg {
    /// One host: node; several: network between them, node within.
    Auto,
    /// Between ranks of one node.
    Node,
    /// Between nodes.
    Network,
}

#[derive(Debug, Subcommand)]
pub(crate) enum MeasureCommand {
    /// GEMM over shapes, FP32 and FP64.
    Gemm(MeasureGemmArgs),
    /// Convolution forward, backward-data and backward-filter at a workload's layer shapes
    /// (the reference workloads by default) or over a sweep.
    Conv(MeasureConvArgs),
    /// Memory bandwidth: STREAM copy, scale, add and triad from L1 to past the last-level
    /// cache.
    Stream(MeasureStreamArgs),
    /// Host-device copies, pinned and pageable, both directions (needs --device cuda).
    Copy(MeasureCopyArgs),
    /// FP32 allreduce across the GPUs of this machine through NCCL (needs a CUDA build).
    Nccl(MeasureNcclArgs),
    /// Pooling, normalisation and element-wise ops at a workload's layer shapes.
    Ops(MeasureOpsArgs),
    /// Full training steps of a workload, every layer forward and backward, with peak memory.
    Workload(MeasureWorkloadArgs),
    /// The standard micro-kernel campaign calibration needs, within a time budget.
    Suite(MeasureSuiteArgs),
    /// Communication under MPI: ping-pong for LogGP, allreduce, all-to-all. Launch it with
    /// `mpirun -np P` or `srun`; needs a build with `--features mpi`.
    Comm(MeasureCommArgs),
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct MeasureCommArgs {
    #[command(subcommand)]
    pub(crate) bench: Option<CommBenchCommand>,
    /// Print a Slurm batch script that runs the whole campaign (ping-pong, allreduce,
    /// all-to-all) on --nodes nodes, instead of measuring.
    #[arg(long)]
    pub(crate) emit_slurm: bool,
    /// Nodes of the Slurm job.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100_000), requires = "emit_slurm")]
    pub(crate) nodes: u32,
    /// MPI ranks per node of the Slurm job.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096), requires = "emit_slurm")]
    pub(crate) ranks_per_node: u32,
    /// Wall-clock limit of the Slurm job (Slurm's format, e.g. 01:00:00).
    #[arg(long, default_value = "01:00:00", value_parser = parse_slurm_time, requires = "emit_slurm")]
    pub(crate) time: String,
    /// Slurm partition.
    #[arg(long, value_parser = parse_slurm_word, requires = "emit_slurm")]
    pub(crate) partition: Option<String>,
    /// Slurm account.
    #[arg(long, value_parser = parse_slurm_word, requires = "emit_slurm")]
    pub(crate) account: Option<String>,
}

/// A communication benchmark.
#[derive(Debug, Subcommand)]
pub(crate) enum CommBenchCommand {
    /// Parametrised round trips between pairs of ranks (the Netgauge method) and the local
    /// reduction kernel: what `ridgeline calibrate` fits LogGP from.
    Pingpong(CommPingpongArgs),
    /// FP32 allreduce by MPI_Allreduce and by ring, recursive halving-doubling, recursive
    /// doubling and the double binary tree over point-to-point.
    Allreduce(CommAllreduceArgs),
    /// MPI_Alltoall, the size given per pair of ranks.
    Alltoall(CommAlltoallArgs),
}

/// The run protocol's settings a command line may override.
#[derive(Debug, Args, Default)]
pub(crate) struct ProtocolArgs {
    /// Warm-up time per measurement, e.g. 200ms.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub(crate) warmup: Option<Duration>,
    /// Fewest samples per measurement.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) min_samples: Option<u64>,
    /// Least sampling time per measurement, e.g. 500ms.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub(crate) min_time: Option<Duration>,
    /// What the caches hold when each timed run starts (CPU): `step` (as inside a training
    /// step: the input the previous kernel wrote stays warm, weights and saved tensors
    /// cycle through copies larger than the last-level cache; the default), `cold` (evicted
    /// before every run) or `warm` (the previous run's operands).
    #[arg(long, value_name = "STATE", value_parser = parse_from_str::<ridgeline_measure::protocol::CacheState>)]
    pub(crate) cache: Option<ridgeline_measure::protocol::CacheState>,
}

impl ProtocolArgs {
    /// The overrides given.
    pub(crate) fn overrides(&self) -> ProtocolOverrides {
        ProtocolOverrides {
            warmup: self.warmup,
            min_samples: self
                .min_samples
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
            min_time: self.min_time,
            cache: self.cache,
        }
    }
}

/// What every communication benchmark shares.
#[derive(Debug, Args)]
pub(crate) struct CommArgs {
    /// Sizes in bytes, as a list and ranges with K, M, G suffixes (binary):
    /// `1K,64K,1M`, `4..256M:x4`. Default: powers of 4 over the benchmark's range.
    #[arg(long, value_parser = parse_byte_list)]
    pub(crate) sizes: Option<Numbers<u64>>,
    /// Append records to this JSON Lines file (rank 0 writes it).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Continue the campaign in --out: keep its records and skip what they cover.
    #[arg(long, requires = "out")]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) protocol: ProtocolArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct CommPingpongArgs {
    /// Pairs of ranks: `levels` (rank 0 with the first rank on its host and the first on
    /// another host) or `all` (rank 0 with every rank).
    #[arg(long, value_enum, default_value_t = PairsArg::Levels)]
    pub(crate) pairs: PairsArg,
    /// Messages per train.
    #[arg(long, default_value_t = ridgeline_measure::comm::DEFAULT_TRAIN as u64, value_parser = clap::value_parser!(u64).range(2..=1000))]
    pub(crate) train: u64,
    #[command(flatten)]
    pub(crate) comm: CommArgs,
}

/// Which pairs of ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PairsArg {
    /// One pair per level: within rank 0's node and across nodes.
    Levels,
    /// Rank 0 with every other rank.
    All,
}

#[derive(Debug, Args)]
pub(crate) struct CommAllreduceArgs {
    /// Algorithms, comma-separated: mpi (the library's MPI_Allreduce), ring, rhd, rd, tree;
    /// and nccl (ncclAllReduce on one GPU per rank, bootstrapped through MPI; needs the
    /// cuda feature).
    #[arg(long, value_delimiter = ',', default_value = "mpi,ring,rhd,rd,tree", value_parser = parse_from_str::<ridgeline_measure::comm::AllreduceAlgorithm>)]
    pub(crate) algorithm: Vec<ridgeline_measure::comm::AllreduceAlgorithm>,
    #[command(flatten)]
    pub(crate) comm: CommArgs,
}

#[derive(Debug, Args)]
pub(crate) struct CommAlltoallArgs {
    #[command(flatten)]
    pub(crate) comm: CommArgs,
}

/// What every `measure` command shares: where, on how many threads, into which file, and
/// the run protocol.
#[derive(Debug, Args)]
pub(crate) struct MeasureArgs {
    /// Device: cpu, or cuda / cuda:N (needs a CUDA build and a GPU).
    #[arg(long, default_value = "cpu")]
    pub(crate) device: String,
    /// Thread counts: numbers and `all` (every core available), e.g. `1,all`. Default: all
    /// (suite: all,1).
    #[arg(long, value_name = "LIST", value_parser = parse_threads)]
    pub(crate) threads: Option<Threads>,
    /// Append records to this JSON Lines file.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Continue the campaign in --out: keep its records and skip what they cover.
    #[arg(long, requires = "out")]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) protocol: ProtocolArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

impl MeasureArgs {
    /// The campaign these flags describe.
    pub(crate) fn spec(&self) -> CampaignSpec {
        CampaignSpec {
            device: self.device.clone(),
            threads: self.threads.as_ref().map(|t| t.0.clone()),
            out: self.out.clone(),
            resume: self.resume,
            protocol: self.protocol.overrides(),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct MeasureGemmArgs {
    /// Square sizes (m = n = k), as a list and ranges: `256,1024`, `64..2048:x2`.
    #[arg(long, value_parser = parse_u64_list, conflicts_with = "shape")]
    pub(crate) size: Option<Numbers<u64>>,
    /// Shapes MxNxK, comma-separated: `64x4096x1024,2048x2048x2048`.
    #[arg(long, value_delimiter = ',', value_parser = parse_gemm_shape)]
    pub(crate) shape: Vec<[usize; 3]>,
    /// Number formats, comma-separated: fp32, fp64.
    #[arg(long, value_delimiter = ',', default_value = "fp32", value_parser = parse_from_str::<ridgeline_measure::Format>)]
    pub(crate) precision: Vec<ridgeline_measure::Format>,
    #[command(flatten)]
    pub(crate) measure: MeasureArgs,
}

/// Which passes of a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ConvPassArg {
    /// y = conv(x, w).
    Forward,
    /// The input gradient.
    BackwardData,
    /// The weight gradient.
    BackwardFilter,
}

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum PassArg {
    /// Forward.
    Forward,
    /// Backward (input and parameter gradients).
    Backward,
}

/// A workload to take layer shapes from (optional: the reference workloads otherwise).
#[derive(Debug, Args)]
pub(crate) struct ShapesFrom {
    /// Take the shapes from this workload (built-in name or TOML file) instead of the
    /// reference workloads (cosmoflow 128^3 batch 1 and 96^3 batch 2, deepcam 192x288 batch 1
    /// and 128x192 batch 2, resnet50 224 batch 8 and 160 batch 2).
    #[arg(long)]
    pub(crate) workload: Option<String>,
    /// Input spatial size of --workload.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "workload")]
    pub(crate) input_size: Option<InputSize>,
    /// Width multiplier of --workload (built-in workloads only).
    #[arg(long, value_name = "W", requires = "workload")]
    pub(crate) width: Option<f64>,
    /// Batch of --workload.
    #[arg(long, default_value_t = 1, value_parser = batch_parser(), requires = "workload")]
    pub(crate) batch: u64,
    /// Only these layers of --workload, comma-separated.
    #[arg(long, value_delimiter = ',', requires = "workload")]
    pub(crate) layer: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureConvArgs {
    #[command(flatten)]
    pub(crate) shapes: ShapesFrom,
    /// The convolution sweep (2-d and 3-d; plain, 1x1, grouped, dilated, depthwise) instead
    /// of workload shapes.
    #[arg(long, conflicts_with = "workload")]
    pub(crate) sweep: bool,
    /// Passes, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "forward,backward-data,backward-filter"
    )]
    pub(crate) pass: Vec<ConvPassArg>,
    /// Number formats, comma-separated: fp32; on a GPU also tf32 (tensor-core math on FP32
    /// data), and fp16 and bf16 (16-bit tensors, FP32 accumulation: mixed precision's
    /// convolutions).
    #[arg(long, value_delimiter = ',', default_value = "fp32", value_parser = parse_from_str::<ridgeline_measure::Format>)]
    pub(crate) precision: Vec<ridgeline_measure::Format>,
    /// Memory layouts, comma-separated: channels-first (NCHW, NCDHW); on a GPU also
    /// channels-last (NHWC, NDHWC; filters KRSC), what tensor cores read best.
    #[arg(long, value_delimiter = ',', default_value = "channels-first", value_parser = parse_from_str::<ridgeline_measure::Layout>)]
    pub(crate) layout: Vec<ridgeline_measure::Layout>,
    #[command(flatten)]
    pub(crate) measure: MeasureArgs,
}

/// A STREAM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum StreamArg {
    /// c = a.
    Copy,
    /// b = q c.
    Scale,
    /// c = a + b.
    Add,
    /// a = b + q c.
    Triad,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureStreamArgs {
    /// Kernels, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "copy,scale,add,triad"
    )]
    pub(crate) kernel: Vec<StreamArg>,
    /// Bytes per array, comma-separated, with K, M or G suffixes (binary): `16K,1M,512M`.
    /// Default: a quarter of L1 to 8 times the last-level cache, by factors of 4.
    #[arg(long, value_delimiter = ',', value_parser = parse_bytes)]
    pub(crate) size: Vec<usize>,
    #[command(flatten)]
    pub(crate) measure: MeasureArgs,
}

/// Which way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CopyDirectionArg {
    /// Host to device.
    H2d,
    /// Device to host.
    D2h,
}

/// The host memory of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum HostMemoryArg {
    /// Page-locked.
    Pinned,
    /// Ordinary.
    Pageable,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureNcclArgs {
    /// GPUs taking part: cuda:0 to cuda:N-1.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..=1024))]
    pub(crate) gpus: u64,
    /// Sizes in bytes (multiples of 4), as a list and ranges with K, M, G suffixes.
    #[arg(long, value_parser = parse_byte_list, default_value = "4..256M:x4")]
    pub(crate) sizes: Numbers<u64>,
    /// Append records to this JSON Lines file.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Continue the campaign in --out: keep its records and skip what they cover.
    #[arg(long, requires = "out")]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) protocol: ProtocolArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureCopyArgs {
    /// Directions, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "h2d,d2h")]
    pub(crate) direction: Vec<CopyDirectionArg>,
    /// Host memory, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "pinned,pageable"
    )]
    pub(crate) memory: Vec<HostMemoryArg>,
    /// Bytes per copy, comma-separated, with K, M or G suffixes (binary).
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = parse_bytes,
        default_value = "4K,64K,1M,16M,256M,1G"
    )]
    pub(crate) size: Vec<usize>,
    #[command(flatten)]
    pub(crate) measure: MeasureArgs,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureOpsArgs {
    #[command(flatten)]
    pub(crate) shapes: ShapesFrom,
    /// Only these op kinds, comma-separated (e.g. relu,batch-norm,max-pool).
    #[arg(long, value_delimiter = ',')]
    pub(crate) op: Vec<String>,
    /// Passes, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "forward,backward"
    )]
    pub(crate) pass: Vec<PassArg>,
    /// Tensor formats, comma-separated: fp32; on a GPU also fp16 and bf16 (mixed precision's
    /// 16-bit activations, arithmetic in FP32).
    #[arg(long, value_delimiter = ',', default_value = "fp32", value_parser = parse_from_str::<ridgeline_measure::Format>)]
    pub(crate) precision: Vec<ridgeline_measure::Format>,
    #[command(flatten)]
    pub(crate) measure: MeasureArgs,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureWorkloadArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Batch size.
    #[arg(long, default_value_t = 1, value_parser = batch_parser())]
    pub(crate) batch: u64,
    /// Measured training steps (after one warm-up step).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) steps: u64,
    /// Training precision: fp32 (every device); tf32, amp-fp16 or amp-bf16 (--device cuda:
    /// 16-bit activations and weight copies of FP32 master weights, with dynamic loss scaling
    /// for amp-fp16).
    #[arg(long, default_value = "fp32", value_parser = parse_precision)]
    pub(crate) precision: Precision,
    /// Show this many layers, the slowest first (0: every layer, in order).
    #[arg(long, default_value_t = 15)]
    pub(crate) top: usize,
    #[command(flatten)]
    pub(crate) measure: MeasureArgs,
}

#[derive(Debug, Args)]
pub(crate) struct MeasureSuiteArgs {
    /// Time budget, e.g. 90s, 5m, 1h.
    #[arg(long, default_value = "5m", value_parser = parse_suite_budget)]
    pub(crate) budget: Duration,
    #[command(flatten)]
    pub(crate) measure: MeasureArgs,
}

/// Thread counts. (A newtype, so clap takes it as one value.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Threads(pub(crate) Vec<ThreadCount>);

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
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => {
            return Err(format!(
                "`{s}`: unknown unit `{unit}`; write e.g. 16K, 1M, 2G"
            ));
        }
    };
    match digits.parse::<usize>() {
        Ok(n) if n > 0 && n <= (64usize << 30) >> shift => {
            let bytes = n << shift;
            if bytes < 8 {
                Err(format!("`{s}`: an array needs at least one 8-byte element"))
            } else {
                Ok(bytes)
            }
        }
        _ => Err(format!(
            "`{s}` is not a size: give a positive number up to 64G, e.g. 16K, 1M, 2G"
        )),
    }
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
    pub(crate) plot: PlotArgs,
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
    pub(crate) plot: PlotArgs,
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
            gradient_bytes: self.gradient_precision,
            compute_efficiency: self.compute_efficiency,
            memory_efficiency: self.memory_efficiency,
            preprocess_rate: self.preprocess_rate,
            compression: self.compression,
            quality: self.quality,
            optimizer: self.optimizer,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct PredictArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) system: SystemArg,
    /// Nodes.
    #[arg(long, value_parser = nodes_parser())]
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
    pub(crate) plot: PlotArgs,
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
    #[arg(long, value_parser = nodes_parser())]
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
    pub(crate) plot: PlotArgs,
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
    parse_list_with(s, max, |v| v.parse().ok())
}

/// Byte sizes in `parse_list`'s syntax, each with an optional K, M or G suffix (binary).
fn parse_byte_list(s: &str) -> Result<Numbers<u64>, String> {
    parse_list_with(s, 1 << 40, |v| {
        let (digits, shift) = match v.char_indices().last() {
            Some((i, 'K')) => (&v[..i], 10),
            Some((i, 'M')) => (&v[..i], 20),
            Some((i, 'G')) => (&v[..i], 30),
            _ => (v, 0),
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1 << shift))
    })
    .map(Numbers)
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

/// A positive finite number.
fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a positive number")),
    }
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

impl CommLevelArg {
    /// The calibration crate's choice.
    pub(crate) fn choice(self) -> ridgeline_calibrate::loggp::LevelChoice {
        use ridgeline_calibrate::loggp::LevelChoice;
        use ridgeline_model::profile::CommLevelName;
        match self {
            CommLevelArg::Auto => LevelChoice::Auto,
            CommLevelArg::Node => LevelChoice::Fixed(CommLevelName::Node),
            CommLevelArg::Network => LevelChoice::Fixed(CommLevelName::Network),
        }
    }
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
