//! `ridgeline calibrate` and `ridgeline validate ...` flags.

use super::*;

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
        required_unless_present_any = ["self_check", "system"],
        conflicts_with_all = ["self_check", "system"]
    )]
    pub(crate) profile: Option<PathBuf>,
    /// Instead of a profile, a system or device with no calibration (catalog name or file):
    /// its GPUs timed by the transferred kernel model, as `predict` times a GPU nobody
    /// calibrated (e.g. the measured steps of `data/evidence/measured/`).
    #[arg(long, value_name = "SYSTEM", conflicts_with = "self_check")]
    pub(crate) system: Option<String>,
    /// Workload records (from `ridgeline measure workload --out`).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "self_check",
        conflicts_with = "self_check"
    )]
    pub(crate) measured: Option<PathBuf>,
    /// Measure the suite, calibrate, measure the three reference workloads and a small
    /// transformer (GPT-2 at 32 tokens) at three batch sizes each, predict and compare — all
    /// on this machine.
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
    /// The precision imported runs (`ridgeline import mlperf --out`) are predicted in
    /// (fp32, tf32, amp-fp16, amp-bf16 or fp8); needed for them, as their logs do not say.
    #[arg(long, value_parser = super::parse_precision, conflicts_with = "self_check")]
    pub(crate) precision: Option<ridgeline_model::precision::Precision>,
    /// The workload that predicts imported runs: `WORKLOAD` (a built-in name or a workload
    /// file) for every run, or `BENCHMARK=WORKLOAD` for one MLPerf benchmark (repeat, or
    /// comma-separate). Default: resnet=resnet50, bert=bert-large, cosmoflow, deepcam.
    #[arg(
        long = "workload",
        value_name = "[BENCHMARK=]WORKLOAD",
        value_delimiter = ','
    )]
    pub(crate) run_workloads: Vec<String>,
    /// Show this many of the worst layers.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// The software stack the measurements are predicted under (a built-in name or a stack
    /// file). Default: the one that ran them: pytorch-eager for steps imported from a
    /// PyTorch trace, ridgeline-executor for ridgeline's own, tuned for imported benchmark
    /// runs.
    #[arg(long, value_name = "NAME|FILE", conflicts_with = "self_check")]
    pub(crate) stack: Option<String>,
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
    /// reference implementation's layer table (`data/evidence/reference/`), and the per-sample
    /// figures of Table II of Ibrahim et al., PMBS 2021 (seed 004; V100, mixed precision) beside the model's.
    Published(FormatArg),
    /// The transferable kernel model, one GPU left out at a time: fitted on the kernels of
    /// the others, it predicts the held-out one from its device file alone.
    Transfer(ValidateTransferArgs),
    /// The step simulator against a measured data-parallel step: a PyTorch profiler trace of
    /// one rank of DistributedDataParallel, or the records of `measure comm ddp`; its
    /// measured parts (layers, other ops, each bucket's allreduce, the optimizer) put
    /// together as the simulator puts predictions together.
    DdpTrace(ValidateDdpTraceArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ValidateDdpTraceArgs {
    /// The trace (`.json` or `.json.gz`) of one rank, recorded with `record_shapes=True`;
    /// or records (`.jsonl`) of `ridgeline measure comm ddp`.
    pub(crate) trace: PathBuf,
    /// The workload the measurement trained (a built-in name or a workload file).
    #[arg(long)]
    pub(crate) workload: String,
    /// Width multiplier of --workload, as it ran (built-in workloads only).
    #[arg(long, value_name = "W")]
    pub(crate) width: Option<f64>,
    /// The gradient bucket, MiB (`bucket_cap_mb`). Default: what the records say they ran
    /// with, else DDP's 25.
    #[arg(long, value_name = "MIB", value_parser = super::model::positive_f64)]
    pub(crate) bucket_mib: Option<f64>,
    /// The first bucket, MiB. Default: what the records say they ran with, else DDP's 1.
    #[arg(long, value_name = "MIB", value_parser = super::model::positive_f64)]
    pub(crate) first_bucket_mib: Option<f64>,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
pub(crate) struct ValidateTransferArgs {
    /// A kernel set (`ridgeline import`).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "data/evidence/kernels/neusight"
    )]
    pub(crate) kernels: PathBuf,
    /// ridgeline's own GPU kernel records, one directory per GPU (`scripts/gpu-records.sh`):
    /// the model fitted on the set predicts them, tensor-core formats included, and their
    /// tensor-core kernels and FP32 convolutions outside `conv`'s kind are data of the
    /// scaled classes (skipped where the directory is missing).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "data/evidence/kernels/ridgeline"
    )]
    pub(crate) ours: PathBuf,
    /// Published GEMM and convolution kernels of other devices, one directory a set, comma
    /// separated (`scripts/import-deepbench.py`, `scripts/import-vidur.py`,
    /// `scripts/import-llmcompass.py`, and the H200's FP8 products from
    /// `scripts/fp8-gemm.py`). Of GPUs: the model fitted on the set predicts them, and their
    /// tensor-core kernels and FP32 convolutions outside `conv`'s kind are data of the scaled
    /// classes beside `--ours` (default: data/evidence/kernels/deepbench,
    /// data/evidence/kernels/vidur, data/evidence/kernels/llmcompass,
    /// data/evidence/kernels/fp8-h200). With --cpu, of CPUs: data of the CPU model beside
    /// `--ours` (default: data/evidence/kernels/deepbench-knl, DeepBench's Xeon Phi). A
    /// missing directory is skipped.
    #[arg(long, value_name = "DIR,...", value_delimiter = ',')]
    pub(crate) published: Option<Vec<PathBuf>>,
    /// Also fit the model on every GPU of the set and write it, with these figures, to FILE
    /// (`data/evidence/kernels/transfer.toml` is the one ridgeline ships).
    #[arg(long, value_name = "FILE")]
    pub(crate) write_model: Option<PathBuf>,
    /// The CPU kernel model instead: fit it on the CPU record sets under --ours (its `cpu-*`
    /// directories, `scripts/cpu-records.sh`) and the CPU kernels of the --published sets,
    /// leave each CPU out in turn, and with --write-model write it
    /// (`data/evidence/kernels/cpu-transfer.toml` is the one ridgeline ships). --kernels is a
    /// GPU set and is not read.
    #[arg(long)]
    pub(crate) cpu: bool,
    #[command(flatten)]
    pub(crate) format: FormatArg,
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
