//! `ridgeline measure ...` flags: the campaign, its protocol, and each benchmark's cases.

use super::*;

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
    /// Join the records files of a Slurm campaign's array tasks into its records file, by
    /// the resume rule; what its merge job runs.
    Merge(MeasureMergeArgs),
}

impl MeasureCommand {
    /// The flags every case-by-case campaign shares, and its name; `None` for the
    /// campaigns that run otherwise (NCCL, MPI) and for `merge`.
    pub(crate) fn campaign(&self) -> Option<(&'static str, &MeasureArgs)> {
        match self {
            Self::Gemm(a) => Some(("gemm", &a.measure)),
            Self::Conv(a) => Some(("conv", &a.measure)),
            Self::Stream(a) => Some(("stream", &a.measure)),
            Self::Copy(a) => Some(("copy", &a.measure)),
            Self::Ops(a) => Some(("ops", &a.measure)),
            Self::Workload(a) => Some(("workload", &a.measure)),
            Self::Suite(a) => Some(("suite", &a.measure)),
            Self::Nccl(_) | Self::Comm(_) | Self::Merge(_) => None,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct MeasureMergeArgs {
    /// The campaign's folder (its records file's name with `.slurm`): `records-<task>.jsonl`
    /// and `task-<task>.exit` of each task.
    pub(crate) dir: PathBuf,
    /// The job array's tasks.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) tasks: u32,
    /// The campaign's records file: created, or continued by the resume rule.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: PathBuf,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

/// Running a campaign as a Slurm job array, or one task's share of it.
#[derive(Debug, Args, Default)]
#[command(group = clap::ArgGroup::new("slurm_mode").args(["slurm", "emit_slurm"]))]
pub(crate) struct SlurmArrayArgs {
    /// Submit the campaign to Slurm as a job array: each task measures a share of the cases
    /// on a whole node into a records file of its own, and a merge job after them joins
    /// the files into --out by the resume rule.
    #[arg(long, requires = "out", help_heading = "Slurm")]
    pub(crate) slurm: bool,
    /// Print the batch scripts --slurm would submit, instead of submitting.
    #[arg(long, requires = "out", help_heading = "Slurm")]
    pub(crate) emit_slurm: bool,
    /// Array tasks: the cases are split into this many shares.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000), requires = "slurm_mode", help_heading = "Slurm")]
    pub(crate) tasks: u32,
    /// Partitions, comma-separated (Slurm's default if none): one job array, records file
    /// and profile per partition, each named with `-PARTITION` after --out's stem where
    /// there are several.
    #[arg(long, value_delimiter = ',', value_parser = parse_slurm_word, requires = "slurm_mode", help_heading = "Slurm")]
    pub(crate) partition: Vec<String>,
    /// Each task's wall-clock limit (Slurm's format, e.g. 01:00:00).
    #[arg(long, default_value = "01:00:00", value_parser = parse_slurm_time, requires = "slurm_mode", help_heading = "Slurm")]
    pub(crate) time: String,
    /// Slurm account.
    #[arg(long, value_parser = parse_slurm_word, requires = "slurm_mode", help_heading = "Slurm")]
    pub(crate) account: Option<String>,
    /// After the merge, describe each partition from one of its nodes (`system
    /// from-slurm`) and calibrate a profile of it beside --out (`.profile.toml`).
    #[arg(long, requires = "slurm_mode", help_heading = "Slurm")]
    pub(crate) calibrate: bool,
    /// Wait until every merge job has ended, and fail where one failed.
    #[arg(long, requires = "slurm", help_heading = "Slurm")]
    pub(crate) wait: bool,
    /// Measure only share I of N (from 0): every case whose place in the campaign is I
    /// modulo N. What each task of a --slurm array runs.
    #[arg(long, value_name = "I/N", value_parser = parse_shard, conflicts_with = "slurm_mode", help_heading = "Slurm")]
    pub(crate) shard: Option<Shard>,
}

/// `I/N`: share I of N, I below N.
fn parse_shard(s: &str) -> Result<Shard, String> {
    let bad = || format!("`{s}` is not a share: write I/N with I from 0 to N-1, e.g. 0/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
#[command(group = clap::ArgGroup::new("comm_slurm").args(["slurm", "emit_slurm"]).multiple(false))]
pub(crate) struct MeasureCommArgs {
    #[command(subcommand)]
    pub(crate) bench: Option<CommBenchCommand>,
    /// Print a Slurm batch script that runs the whole campaign (ping-pong, allreduce,
    /// all-to-all) on --nodes nodes, instead of measuring.
    #[arg(long, conflicts_with = "slurm")]
    pub(crate) emit_slurm: bool,
    /// Submit that script to Slurm: its ranks start under `srun` over the PMI the cluster
    /// and its MPI share, or `mpirun` inside the allocation; records go to --dir.
    #[arg(long, requires = "dir")]
    pub(crate) slurm: bool,
    /// The campaign's folder (--slurm): the script, its log, the records and the profile.
    #[arg(long, value_name = "DIR", requires = "slurm")]
    pub(crate) dir: Option<PathBuf>,
    /// Wait until the job has ended, and fail where it failed (--slurm).
    #[arg(long, requires = "slurm")]
    pub(crate) wait: bool,
    /// Nodes of the Slurm job.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=100_000), requires = "comm_slurm")]
    pub(crate) nodes: u32,
    /// MPI ranks per node of the Slurm job.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096), requires = "comm_slurm")]
    pub(crate) ranks_per_node: u32,
    /// Wall-clock limit of the Slurm job (Slurm's format, e.g. 01:00:00).
    #[arg(long, default_value = "01:00:00", value_parser = parse_slurm_time, requires = "comm_slurm")]
    pub(crate) time: String,
    /// Slurm partition.
    #[arg(long, value_parser = parse_slurm_word, requires = "comm_slurm")]
    pub(crate) partition: Option<String>,
    /// Slurm account.
    #[arg(long, value_parser = parse_slurm_word, requires = "comm_slurm")]
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
    /// Data-parallel training steps of a workload: every rank trains on the CPU with a
    /// batch of its own, and allreduces the gradients in DDP's buckets on a communication
    /// thread beside backward. `ridgeline validate ddp-trace` compares them with the
    /// simulator.
    Ddp(CommDdpArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CommDdpArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    /// Samples per rank.
    #[arg(long, default_value_t = 1, value_parser = batch_parser())]
    pub(crate) batch: u64,
    /// Compute threads per rank (the communication thread is one more).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub(crate) threads: u64,
    /// Measured steps.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) steps: u64,
    /// Unmeasured steps first.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub(crate) warmup_steps: u64,
    /// Gradient bucket size in MiB (PyTorch DDP's `bucket_cap_mb`).
    #[arg(long, default_value_t = 25.0, value_parser = super::model::positive_f64)]
    pub(crate) bucket_mib: f64,
    /// The first bucket's size in MiB (DDP's 1 MiB: the last layers' gradients go early).
    #[arg(long, default_value_t = 1.0, value_parser = super::model::positive_f64)]
    pub(crate) first_bucket_mib: f64,
    /// Allreduce every bucket after backward instead of beside it.
    #[arg(long)]
    pub(crate) after_backward: bool,
    /// Append records to this JSON Lines file (rank 0 writes it).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// Skip the run if --out already has it.
    #[arg(long, requires = "out")]
    pub(crate) resume: bool,
    #[command(flatten)]
    pub(crate) format: FormatArg,
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

/// Where a campaign writes, how it samples, and how it prints: what every measurement
/// command shares.
#[derive(Debug, Args)]
pub(crate) struct CampaignArgs {
    /// Append records to this JSON Lines file (under MPI, rank 0 writes it).
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

/// What every communication benchmark shares.
#[derive(Debug, Args)]
pub(crate) struct CommArgs {
    /// Sizes in bytes, as a list and ranges with K, M, G suffixes (binary):
    /// `1K,64K,1M`, `4..256M:x4`. Default: powers of 4 over the benchmark's range.
    #[arg(long, value_parser = parse_byte_list)]
    pub(crate) sizes: Option<Numbers<u64>>,
    #[command(flatten)]
    pub(crate) campaign: CampaignArgs,
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
    #[command(flatten)]
    pub(crate) campaign: CampaignArgs,
    #[command(flatten)]
    pub(crate) slurm: SlurmArrayArgs,
}

impl MeasureArgs {
    /// The campaign these flags describe.
    pub(crate) fn spec(&self) -> CampaignSpec {
        CampaignSpec {
            device: self.device.clone(),
            threads: self.threads.as_ref().map(|t| t.0.clone()),
            out: self.campaign.out.clone(),
            resume: self.campaign.resume,
            protocol: self.campaign.protocol.overrides(),
            shard: self.slurm.shard,
            open: ridgeline_measure::open_backend,
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
    /// Input spatial size of --workload (a transformer's sequence length: `--seq-len`).
    #[arg(long, visible_alias = "seq-len", value_name = "SIZE", value_parser = parse_size, requires = "workload")]
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
    /// A convolution sweep instead of workload shapes: `suite` (the default; the calibration
    /// suite's 15 shapes, 2-d and 3-d, plain, 1x1, grouped, dilated, depthwise) or `kernels`
    /// (a GPU campaign's 31: 3-d from 1 to 256 channels, depthwise 2-d and 3-d over channels,
    /// sizes, strides, dilations and 3 x 3 to 7 x 7 kernels, grouped).
    #[arg(
        long,
        value_enum,
        num_args = 0..=1,
        default_missing_value = "suite",
        value_name = "SET",
        conflicts_with = "workload"
    )]
    pub(crate) sweep: Option<ConvSweepArg>,
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

/// A convolution sweep of `measure conv --sweep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ConvSweepArg {
    /// The calibration suite's sweep.
    Suite,
    /// The kernel campaign's sweep (the convolution kinds public kernel sets lack).
    Kernels,
}

impl From<ConvSweepArg> for ridgeline_measure::suite::ConvSweep {
    fn from(s: ConvSweepArg) -> Self {
        match s {
            ConvSweepArg::Suite => Self::Suite,
            ConvSweepArg::Kernels => Self::Kernels,
        }
    }
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
    #[command(flatten)]
    pub(crate) campaign: CampaignArgs,
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
    /// Batch sizes, comma-separated: one training run each.
    #[arg(long, value_delimiter = ',', default_value = "1", value_parser = batch_parser())]
    pub(crate) batch: Vec<u64>,
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

impl ShapesFrom {
    /// Where these flags take shapes from.
    pub(crate) fn shapes(&self) -> ridgeline_app::cases::Shapes {
        ridgeline_app::cases::Shapes {
            workload: self.workload.as_ref().map(|name| WorkloadSpec {
                name: name.clone(),
                input_size: self.input_size.as_ref().map(|s| s.0.clone()),
                width: self.width,
            }),
            batch: self.batch,
            layers: self.layer.clone(),
        }
    }
}

impl From<ConvPassArg> for ridgeline_measure::ConvPass {
    fn from(p: ConvPassArg) -> Self {
        match p {
            ConvPassArg::Forward => Self::Forward,
            ConvPassArg::BackwardData => Self::BackwardData,
            ConvPassArg::BackwardFilter => Self::BackwardFilter,
        }
    }
}

impl From<PassArg> for ridgeline_measure::Pass {
    fn from(p: PassArg) -> Self {
        match p {
            PassArg::Forward => Self::Forward,
            PassArg::Backward => Self::Backward,
        }
    }
}

impl From<StreamArg> for ridgeline_measure::StreamKernel {
    fn from(k: StreamArg) -> Self {
        match k {
            StreamArg::Copy => Self::Copy,
            StreamArg::Scale => Self::Scale,
            StreamArg::Add => Self::Add,
            StreamArg::Triad => Self::Triad,
        }
    }
}

impl From<CopyDirectionArg> for ridgeline_measure::CopyDirection {
    fn from(d: CopyDirectionArg) -> Self {
        match d {
            CopyDirectionArg::H2d => Self::HostToDevice,
            CopyDirectionArg::D2h => Self::DeviceToHost,
        }
    }
}

impl From<HostMemoryArg> for ridgeline_measure::HostMemory {
    fn from(m: HostMemoryArg) -> Self {
        match m {
            HostMemoryArg::Pinned => Self::Pinned,
            HostMemoryArg::Pageable => Self::Pageable,
        }
    }
}
