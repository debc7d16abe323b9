//! The model commands' flags: workload, system, memory, roofline, predict, scale and sweep.

use ridgeline_app::predict::{PredictRequest, SplitDegrees};
use ridgeline_app::sweep::{SplitLists, SweepRequest};

use super::*;

#[derive(Debug, Subcommand)]
pub(crate) enum WorkloadCommand {
    /// List the built-in workloads.
    List(FormatArg),
    /// Per-layer parameters, FLOPs, HBM bytes and activations of one training step.
    Show(ShowArgs),
    /// Write a workload as a TOML layer file that `ridgeline` reads back.
    Export(ExportArgs),
    /// Import an ONNX model as a TOML layer file (shapes inferred; an op the IR lacks is
    /// refused with its node).
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The ONNX model (`.onnx`; weights are not read and may be absent).
    pub(crate) model: PathBuf,
    /// Write to this file instead of standard output (written whole, or not at all).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum SystemCommand {
    /// List the catalog systems and devices.
    List(FormatArg),
    /// Show every figure of a system, with its source.
    Show(SystemShowArgs),
    /// Write a system file of a Slurm partition: its nodes, cores, memory and GPUs from
    /// `scontrol`, the processor from this machine's own description, every figure Slurm
    /// cannot know marked as assumed. Run it on a node of the partition (`srun`).
    FromSlurm(SystemFromSlurmArgs),
}

#[derive(Debug, Args)]
pub(crate) struct SystemFromSlurmArgs {
    /// The partition (Slurm's default if none).
    #[arg(long)]
    pub(crate) partition: Option<String>,
    /// The catalog device of the partition's GPUs, where Slurm's GRES type does not single
    /// one out (`ridgeline system list`).
    #[arg(long, value_name = "NAME")]
    pub(crate) gpu: Option<String>,
    /// Write the system file here (else print it).
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
}

/// `ridgeline stack ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum StackCommand {
    /// List the built-in software stacks.
    List(FormatArg),
    /// Show every figure and rule of a stack, with its source.
    Show(StackShowArgs),
}

#[derive(Debug, Args)]
pub(crate) struct StackShowArgs {
    /// A built-in stack's name or a stack TOML file.
    pub(crate) stack: String,
    #[command(flatten)]
    pub(crate) format: FormatArg,
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
    pub(crate) target: TargetArgs,
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
    pub(crate) stack: StackArg,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

#[derive(Debug, Args)]
pub(crate) struct RooflineArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Batch size per device.
    #[arg(long, value_parser = batch_parser())]
    pub(crate) batch: u64,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    /// Also the step at the roofline under this software stack's fusion and precision
    /// rules (a built-in stack or a stack file); the layer table stays the hardware's.
    #[arg(long, value_name = "NAME|FILE")]
    pub(crate) stack: Option<String>,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SystemShowArgs {
    /// A system name, device name, `local`, or system/device TOML file.
    pub(crate) system: String,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("events").multiple(true))]
pub(crate) struct PredictArgs {
    #[command(flatten)]
    pub(crate) target: TargetArgs,
    /// Nodes.
    #[arg(long, value_parser = nodes_parser())]
    pub(crate) nodes: u32,
    /// Batch size per device.
    #[arg(long, value_parser = batch_parser(), required_unless_present = "global_batch")]
    pub(crate) batch: Option<u64>,
    /// Global batch size, split evenly over the devices (instead of --batch).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..), conflicts_with = "batch")]
    pub(crate) global_batch: Option<u64>,
    /// Tensor-parallel ranks of each model replica, inside a node (transformers; Megatron's
    /// split). With --tensor-parallel or --pipeline-parallel, --batch is per data-parallel
    /// replica.
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) tensor_parallel: Option<u32>,
    /// Pipeline stages of each model replica (transformers; the 1F1B schedule).
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) pipeline_parallel: Option<u32>,
    /// Micro-batches each replica's batch is cut into (default: the pipeline stages).
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) micro_batches: Option<u32>,
    /// Virtual stages per pipeline rank: interleaved 1F1B (Megatron-LM's virtual pipeline),
    /// under a stack whose schedule is 1f1b (default 1: none).
    #[arg(long, value_name = "V", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) virtual_stages: Option<u32>,
    /// Expert-parallel ranks of a mixture of experts (Megatron's
    /// --expert-model-parallel-size): each holds 1/E of every layer's experts and exchanges
    /// its tokens with the others by all-to-all; E divides the data-parallel replicas
    /// (default 1: none).
    #[arg(long, value_name = "E", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) expert_parallel: Option<u32>,
    /// Also simulate the step event by event (gradient buckets allreduced beside backward,
    /// the input read ahead, the slowest of the ranks) and write its timeline to FILE in the
    /// Chrome trace format (Perfetto, chrome://tracing). Data-parallel steps, and with
    /// --expert-parallel data- and expert-parallel ones (the all-to-alls waiting for every
    /// rank).
    #[arg(long, value_name = "FILE", group = "events",
          conflicts_with_all = ["tensor_parallel", "pipeline_parallel", "micro_batches", "virtual_stages"])]
    pub(crate) timeline: Option<PathBuf>,
    /// Also write the predicted step as a Chakra execution trace (the format ASTRA-sim
    /// reads), one file per data-parallel rank: PREFIX.0.et, PREFIX.1.et, ... (a trailing
    /// `.et` is taken off PREFIX). Each layer's forward and backward is a compute node with
    /// its predicted time, FLOPs and bytes; each gradient bucket an allreduce.
    #[arg(long, value_name = "PREFIX", group = "events",
          conflicts_with_all = ["tensor_parallel", "pipeline_parallel", "micro_batches", "virtual_stages", "expert_parallel"])]
    pub(crate) chakra: Option<PathBuf>,
    /// The gradient bucket of the simulator and of the Chakra trace, MiB (PyTorch DDP's
    /// default).
    #[arg(long, value_name = "MIB", default_value_t = 25.0, requires = "events",
          value_parser = positive_f64)]
    pub(crate) bucket_mib: f64,
    /// Steps of input the simulator reads ahead (0: each step reads its own first).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "timeline")]
    pub(crate) prefetch: u32,
    /// The simulator's per-rank, per-layer coefficient of variation of layer times (0: every
    /// rank alike); the step waits for the slowest rank. Default: a calibrated profile's
    /// measured sample spread (`sample_cv`), else 0.
    #[arg(long, value_name = "CV", requires = "timeline", value_parser = non_negative_f64)]
    pub(crate) rank_cv: Option<f64>,
    /// The seed of the simulator's variability draws.
    #[arg(long, value_name = "N", default_value_t = 0, requires = "timeline")]
    pub(crate) seed: u64,
    #[command(flatten)]
    pub(crate) precision: PrecisionArg,
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

impl PredictArgs {
    /// The request these flags make.
    pub(crate) fn request(&self) -> PredictRequest {
        let degrees = SplitDegrees {
            tensor: self.tensor_parallel,
            pipeline: self.pipeline_parallel,
            micro_batches: self.micro_batches,
            virtual_stages: self.virtual_stages,
            expert: self.expert_parallel,
        };
        let split = degrees.tensor.is_some()
            || degrees.pipeline.is_some()
            || degrees.micro_batches.is_some()
            || degrees.virtual_stages.is_some()
            || degrees.expert.is_some();
        PredictRequest {
            workload: self.target.workload.spec(),
            scenario: self.scenario.spec(),
            precision: self.precision.precision,
            nodes: self.nodes,
            system: self.target.system.system.clone(),
            batch: self.batch,
            global_batch: self.global_batch,
            split: split.then_some(degrees),
            rank_cv: self.rank_cv,
            timeline: self.timeline.clone(),
            chakra: self.chakra.clone(),
            bucket_mib: self.bucket_mib,
            prefetch: self.prefetch,
            seed: self.seed,
        }
    }
}

/// A positive finite number.
pub(crate) fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("`{s}`: give a positive number")),
    }
}

/// A finite number of at least 0.
fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}`: give a number of at least 0")),
    }
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
    pub(crate) target: TargetArgs,
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
    pub(crate) output: OutputArgs,
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
    /// Search splits of a transformer: tensor-parallel degrees, as a list and ranges
    /// (1,2,4,8). With --tensor-parallel or --pipeline-parallel, --batch is per data-parallel
    /// replica and every split is tried.
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) tensor_parallel: Option<Numbers<u32>>,
    /// Search splits of a transformer: pipeline depths, as a list and ranges.
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) pipeline_parallel: Option<Numbers<u32>>,
    /// Micro-batch counts to try with each pipeline depth P (default: P, 2P and 4P).
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) micro_batches: Option<Numbers<u32>>,
    /// Virtual stages per pipeline rank to try (interleaved 1F1B; default 1).
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) virtual_stages: Option<Numbers<u32>>,
    /// Expert-parallel degrees to try (a mixture of experts; default 1).
    #[arg(long, value_parser = parse_u32_list)]
    pub(crate) expert_parallel: Option<Numbers<u32>>,
    #[command(flatten)]
    pub(crate) scenario: ScenarioArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}

impl SweepArgs {
    /// The request these flags make.
    pub(crate) fn request(&self) -> SweepRequest {
        let list = |n: &Option<Numbers<u32>>| n.as_ref().map(|v| v.0.clone());
        let lists = SplitLists {
            tensor: list(&self.tensor_parallel),
            pipeline: list(&self.pipeline_parallel),
            micro_batches: list(&self.micro_batches),
            virtual_stages: list(&self.virtual_stages),
            expert: list(&self.expert_parallel),
        };
        // Micro-batches alone split nothing: a data-parallel sweep ignores them.
        let split = lists.tensor.is_some()
            || lists.pipeline.is_some()
            || lists.virtual_stages.is_some()
            || lists.expert.is_some();
        SweepRequest {
            workload: self.workload.spec(),
            scenario: self.scenario.spec(),
            precisions: self.precisions.clone(),
            systems: self.systems.clone(),
            nodes: self.nodes.0.clone(),
            batches: self.batch.0.clone(),
            top: self.top,
            objective: self.objective,
            out: self.out.clone(),
            split: split.then_some(lists),
        }
    }
}

/// The workload and the system a model command runs on.
#[derive(Debug, Args)]
pub(crate) struct TargetArgs {
    #[command(flatten)]
    pub(crate) workload: WorkloadArgs,
    #[command(flatten)]
    pub(crate) system: SystemArg,
}

/// How a model command prints, and where it draws its plots.
#[derive(Debug, Args)]
pub(crate) struct OutputArgs {
    #[command(flatten)]
    pub(crate) plot: PlotArgs,
    #[command(flatten)]
    pub(crate) format: FormatArg,
}
