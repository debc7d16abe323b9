//! `ridgeline report ...`: the procurement, workload and validation reports' flags.

use super::*;

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
    pub(crate) target: TargetArgs,
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
    #[arg(long, value_name = "FILE", required_unless_present = "system")]
    pub(crate) profile: Option<PathBuf>,
    /// Instead of a profile, the system imported runs are predicted on (catalog name or
    /// file).
    #[arg(long, value_name = "SYSTEM", conflicts_with = "profile")]
    pub(crate) system: Option<String>,
    /// Measured workload steps (from `ridgeline measure workload`), or imported runs (from
    /// `ridgeline import mlperf --out`).
    #[arg(long, value_name = "FILE")]
    pub(crate) measured: PathBuf,
    /// The precision imported runs are predicted in (fp32, tf32, amp-fp16, amp-bf16 or fp8);
    /// needed for them, as their logs do not say.
    #[arg(long, value_parser = super::parse_precision)]
    pub(crate) precision: Option<ridgeline_model::precision::Precision>,
    /// The software stack the measurements are predicted under (default: the one that ran
    /// them, as `validate` chooses).
    #[arg(long, value_name = "NAME|FILE")]
    pub(crate) stack: Option<String>,
    /// The workload that predicts imported runs: `WORKLOAD` (a built-in name or a workload
    /// file) for every run, or `BENCHMARK=WORKLOAD` for one MLPerf benchmark (repeat, or
    /// comma-separate). Default: resnet=resnet50, bert=bert-large, cosmoflow, deepcam.
    #[arg(
        long = "workload",
        value_name = "[BENCHMARK=]WORKLOAD",
        value_delimiter = ','
    )]
    pub(crate) run_workloads: Vec<String>,
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
    /// What times the candidates' GPU layers: `transfer`, the kernel model fitted on
    /// measured GPU kernels, from each device file; or `ideal`, the datasheet peak.
    #[arg(long, default_value = "transfer", value_name = "MODEL", value_parser = crate::cli::parse_kernel_model)]
    pub(crate) efficiency: KernelModel,
    /// Fraction of the devices' peak FLOP/s the layers attain in the ideal bound, for every
    /// candidate alike (1 = ideal: times are lower bounds).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) compute_efficiency: f64,
    /// Fraction of the devices' memory bandwidth the layers attain.
    #[arg(long, default_value_t = 1.0)]
    pub(crate) memory_efficiency: f64,
    #[command(flatten)]
    pub(crate) stack: StackArg,
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
