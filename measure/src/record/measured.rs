//! What a record measured, typed: its kind and the case it ran (the `kind` and `shape`
//! fields of a record, one serde-tagged enum), and the kind-specific `extra` data.
//!
//! Each kind's shape is a struct here, so a record that lacks a field its kind needs, or
//! holds one of the wrong type, is refused when the file is read, with the field's path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::kinds::{ConvPass, CopyDirection, HostMemory, Layout, Pass, StreamKernel};

/// A record's kind with its shape: written as `"kind": "...", "shape": {...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "shape", rename_all = "kebab-case")]
pub enum Measured {
    /// A GEMM micro-kernel.
    Gemm(GemmShape),
    /// One pass of a convolution.
    Conv(ConvShape),
    /// A STREAM kernel.
    Stream(StreamShape),
    /// One pass of a non-GEMM op.
    Op(OpShape),
    /// A host-device copy.
    Copy(CopyShape),
    /// One layer pass of a measured training step.
    WorkloadLayer(LayerShape),
    /// A whole training step.
    WorkloadStep(StepShape),
    /// A parametrised round trip between two ranks (MPI).
    CommPrtt(PrttShape),
    /// A simultaneous exchange between two ranks (MPI).
    CommExchange(ExchangeShape),
    /// The local reduction kernel of a collective.
    CommReduce(ReduceShape),
    /// An allreduce (MPI or NCCL).
    CommAllreduce(AllreduceShape),
    /// An all-to-all (MPI).
    CommAlltoall(AlltoallShape),
}

impl Measured {
    /// The record kind.
    pub fn kind(&self) -> RecordKind {
        match self {
            Measured::Gemm(_) => RecordKind::Gemm,
            Measured::Conv(_) => RecordKind::Conv,
            Measured::Stream(_) => RecordKind::Stream,
            Measured::Op(_) => RecordKind::Op,
            Measured::Copy(_) => RecordKind::Copy,
            Measured::WorkloadLayer(_) => RecordKind::WorkloadLayer,
            Measured::WorkloadStep(_) => RecordKind::WorkloadStep,
            Measured::CommPrtt(_) => RecordKind::CommPrtt,
            Measured::CommExchange(_) => RecordKind::CommExchange,
            Measured::CommReduce(_) => RecordKind::CommReduce,
            Measured::CommAllreduce(_) => RecordKind::CommAllreduce,
            Measured::CommAlltoall(_) => RecordKind::CommAlltoall,
        }
    }

    /// The shape as a JSON object with its keys sorted: the form record ids are made of
    /// (the form version 1 wrote, so ids stay the same across versions).
    pub fn shape_json(&self) -> serde_json::Value {
        let tagged = serde_json::to_value(self).unwrap_or_default();
        tagged.get("shape").cloned().unwrap_or_default()
    }

    /// The training run a workload record belongs to: its step's shape.
    pub fn run(&self) -> Option<&StepShape> {
        match self {
            Measured::WorkloadStep(s) => Some(s),
            Measured::WorkloadLayer(l) => Some(&l.run),
            _ => None,
        }
    }

    /// The message or buffer size of a communication record, bytes.
    pub fn comm_bytes(&self) -> Option<u64> {
        match self {
            Measured::CommPrtt(s) => Some(s.bytes),
            Measured::CommExchange(s) => Some(s.bytes),
            Measured::CommReduce(s) => Some(s.bytes),
            Measured::CommAllreduce(s) => Some(s.bytes),
            Measured::CommAlltoall(s) => Some(s.bytes),
            _ => None,
        }
    }
}

/// `C (m x n) = A (m x k) x B (k x n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GemmShape {
    /// Rows of C.
    pub m: u64,
    /// Columns of C.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
}

/// One pass of a convolution layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvShape {
    /// Where the shape comes from: `workload/layer`.
    pub source: String,
    /// Batch.
    pub n: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Input spatial size.
    pub input: Vec<usize>,
    /// Kernel per spatial dimension.
    pub kernel: Vec<usize>,
    /// Stride per spatial dimension.
    pub stride: Vec<usize>,
    /// Padding `[before, after]` per spatial dimension.
    pub padding: Vec<[usize; 2]>,
    /// Dilation per spatial dimension.
    pub dilation: Vec<usize>,
    /// Groups.
    pub groups: usize,
    /// Whether the layer adds a bias.
    pub bias: bool,
    /// Which pass.
    pub pass: ConvPass,
    /// Memory layout; channels-first records leave it out (as they always have, so their
    /// ids stay the same).
    #[serde(default, skip_serializing_if = "Layout::is_channels_first")]
    pub layout: Layout,
}

/// A STREAM kernel over arrays of `f64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamShape {
    /// Which kernel.
    pub kernel: StreamKernel,
    /// Elements per array.
    pub elements: u64,
    /// Bytes per array.
    pub array_bytes: u64,
}

/// One pass of a non-GEMM op on a batch of inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpShape {
    /// The op as a workload file's layer gives it, without its name and inputs.
    pub op: OpSpec,
    /// Per-sample input shape, channels first.
    pub input: Vec<usize>,
    /// Batch.
    pub batch: usize,
    /// Which pass.
    pub pass: Pass,
}

/// An op in the workload file's syntax: its kind and its parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSpec {
    /// The op's kind (`max-pool`, `relu`, ...).
    pub op: String,
    /// Its parameters, as the workload file writes them.
    #[serde(flatten)]
    pub params: BTreeMap<String, serde_json::Value>,
}

/// A host-device copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyShape {
    /// `h2d` or `d2h`.
    pub direction: CopyDirection,
    /// `pinned` or `pageable` host memory.
    pub memory: HostMemory,
    /// Bytes copied.
    pub bytes: u64,
}

/// A measured training run: the workload, its per-sample input and the batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepShape {
    /// The workload's name.
    pub workload: String,
    /// Per-sample input shape.
    pub input: Vec<usize>,
    /// Batch (per rank, where `ranks` is given).
    pub batch: usize,
    /// Data-parallel ranks, each training on `batch` samples and allreducing the gradients
    /// (ridgeline's own data-parallel executor, `measure comm ddp`); left out for one
    /// process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
}

/// One layer pass of a measured training run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerShape {
    /// The run.
    #[serde(flatten)]
    pub run: StepShape,
    /// The layer's name in the workload.
    pub layer: String,
    /// The layer's op kind.
    pub op: String,
    /// Which pass.
    pub pass: Pass,
}

/// A train of messages between rank 0 and a partner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrttShape {
    /// Message size.
    pub bytes: u64,
    /// Messages in the train (1: a ping-pong).
    pub messages: usize,
    /// Whether the sender waits between messages.
    pub delayed: bool,
    /// The two ranks.
    pub pair: [usize; 2],
}

/// Rank 0 and a partner sending to each other at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExchangeShape {
    /// Message size.
    pub bytes: u64,
    /// The two ranks.
    pub pair: [usize; 2],
}

/// The reduction kernel of a collective (`a += b` on FP32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReduceShape {
    /// Bytes of each operand.
    pub bytes: u64,
    /// Ranks of the job.
    pub ranks: usize,
}

/// An allreduce of FP32 data: over MPI ranks, or over one node's GPUs with NCCL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllreduceShape {
    /// Bytes reduced.
    pub bytes: u64,
    /// The algorithm (`ring`, `rhd`, `rd`, `tree`, `mpi`, `nccl`).
    pub algorithm: String,
    /// MPI ranks, for an MPI job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// GPUs of the node, for an in-node NCCL allreduce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<usize>,
}

/// An all-to-all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlltoallShape {
    /// Bytes each rank sends to each other rank.
    pub bytes: u64,
    /// Ranks.
    pub ranks: usize,
}

/// Kind-specific data: what a workload step measured besides its time, the job a
/// communication record ran in, and what a backend noted. Empty fields are left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Extra {
    /// Peak memory the step's tensors held (workload step), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<u64>,
    /// Peak resident set of the process (workload step on the CPU), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_rss_bytes: Option<u64>,
    /// Seconds of each optimizer update (workload step).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub update_s: Vec<f64>,
    /// The loss scale after each step (mixed-precision workload step).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loss_scale: Vec<f64>,
    /// Seconds of gradient communication in each step (imported traces: the collectives'
    /// spans in the step).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comm_s: Vec<f64>,
    /// Seconds of each step that communication ran past the end of backward (imported
    /// traces): the communication the step waited for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exposed_comm_s: Vec<f64>,
    /// Each step's gradient allreduces (one per bucket), seconds each, in the order they
    /// started (data-parallel steps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bucket_s: Vec<Vec<f64>>,
    /// Seconds of each step outside every layer and the update (data-parallel steps: the
    /// copies of gradients into buckets; imported traces: the ops that are no layer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_s: Vec<f64>,
    /// Updates skipped on overflow (mixed-precision workload step).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_updates: Option<u64>,
    /// Ranks of the communication job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<usize>,
    /// Ranks per node of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks_per_node: Option<usize>,
    /// Nodes of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<usize>,
    /// The host of each rank.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
    /// Whether a pair's two ranks share a host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_host: Option<bool>,
    /// The hosts of a pair's two ranks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pair_hosts: Vec<String>,
    /// The wait between messages of a delayed train, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_s: Option<f64>,
    /// The collective's algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// The MPI library and version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi_library: Option<String>,
    /// The MPI settings in force (Open MPI's MCA parameters).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mpi_settings: BTreeMap<String, String>,
    /// The collective library (`nccl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// NCCL's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl_version: Option<String>,
    /// The `NCCL_*` settings in force.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nccl_settings: BTreeMap<String, String>,
    /// What the backend noted (cuDNN's algorithm search on a GPU), as it wrote it.
    #[serde(flatten)]
    pub notes: BTreeMap<String, serde_json::Value>,
}

impl Extra {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        *self == Extra::default()
    }
}

impl Layout {
    /// Whether this is the default layout (left out of a conv record's shape).
    pub fn is_channels_first(&self) -> bool {
        *self == Layout::ChannelsFirst
    }
}

/// What a record measured: the record kinds this build writes and reads, each named once
/// (its name is the `kind` field of the JSON line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum RecordKind {
    /// A GEMM micro-kernel.
    Gemm,
    /// One pass of a convolution.
    Conv,
    /// A STREAM kernel.
    Stream,
    /// One pass of a non-GEMM op.
    Op,
    /// A host-device copy.
    Copy,
    /// One layer pass of a measured training step (written before its step).
    WorkloadLayer,
    /// A whole training step.
    WorkloadStep,
    /// A parametrised round trip between two ranks (MPI).
    CommPrtt,
    /// A simultaneous exchange between two ranks (MPI).
    CommExchange,
    /// The local reduction kernel of a collective.
    CommReduce,
    /// An allreduce (MPI or NCCL).
    CommAllreduce,
    /// An all-to-all (MPI).
    CommAlltoall,
}

impl RecordKind {
    /// Every kind.
    pub const ALL: [RecordKind; 12] = [
        RecordKind::Gemm,
        RecordKind::Conv,
        RecordKind::Stream,
        RecordKind::Op,
        RecordKind::Copy,
        RecordKind::WorkloadLayer,
        RecordKind::WorkloadStep,
        RecordKind::CommPrtt,
        RecordKind::CommExchange,
        RecordKind::CommReduce,
        RecordKind::CommAllreduce,
        RecordKind::CommAlltoall,
    ];

    /// The name records carry.
    pub const fn name(self) -> &'static str {
        match self {
            RecordKind::Gemm => "gemm",
            RecordKind::Conv => "conv",
            RecordKind::Stream => "stream",
            RecordKind::Op => "op",
            RecordKind::Copy => "copy",
            RecordKind::WorkloadLayer => "workload-layer",
            RecordKind::WorkloadStep => "workload-step",
            RecordKind::CommPrtt => "comm-prtt",
            RecordKind::CommExchange => "comm-exchange",
            RecordKind::CommReduce => "comm-reduce",
            RecordKind::CommAllreduce => "comm-allreduce",
            RecordKind::CommAlltoall => "comm-alltoall",
        }
    }

    /// Whether a record of this kind counts the FLOPs it ran (more than 0).
    pub const fn computes(self) -> bool {
        matches!(
            self,
            RecordKind::Gemm | RecordKind::Conv | RecordKind::WorkloadStep
        )
    }

    /// A micro-kernel that calibration fits a device from.
    pub const fn is_micro_kernel(self) -> bool {
        matches!(
            self,
            RecordKind::Gemm | RecordKind::Conv | RecordKind::Op | RecordKind::Stream
        )
    }

    /// A communication measurement.
    pub const fn is_comm(self) -> bool {
        matches!(
            self,
            RecordKind::CommPrtt
                | RecordKind::CommExchange
                | RecordKind::CommReduce
                | RecordKind::CommAllreduce
                | RecordKind::CommAlltoall
        )
    }
}

impl std::fmt::Display for RecordKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RecordKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        RecordKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = RecordKind::ALL.iter().map(|k| k.name()).collect();
                format!("kind `{s}`: must be one of {}", names.join(", "))
            })
    }
}

impl TryFrom<String> for RecordKind {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

impl From<RecordKind> for &'static str {
    fn from(k: RecordKind) -> &'static str {
        k.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_written_with_its_one_name() {
        let step = StepShape {
            workload: "w".into(),
            input: vec![1],
            batch: 1,
            ranks: None,
        };
        let all = [
            Measured::Gemm(GemmShape { m: 1, n: 1, k: 1 }),
            Measured::Conv(ConvShape {
                source: "w/c".into(),
                n: 1,
                c_in: 1,
                c_out: 1,
                input: vec![4],
                kernel: vec![3],
                stride: vec![1],
                padding: vec![[1, 1]],
                dilation: vec![1],
                groups: 1,
                bias: false,
                pass: ConvPass::Forward,
                layout: Layout::ChannelsFirst,
            }),
            Measured::Stream(StreamShape {
                kernel: StreamKernel::Triad,
                elements: 8,
                array_bytes: 64,
            }),
            Measured::Op(OpShape {
                op: OpSpec {
                    op: "relu".into(),
                    params: BTreeMap::new(),
                },
                input: vec![1],
                batch: 1,
                pass: Pass::Forward,
            }),
            Measured::Copy(CopyShape {
                direction: CopyDirection::HostToDevice,
                memory: HostMemory::Pinned,
                bytes: 8,
            }),
            Measured::WorkloadLayer(LayerShape {
                run: step.clone(),
                layer: "l".into(),
                op: "relu".into(),
                pass: Pass::Backward,
            }),
            Measured::WorkloadStep(step),
            Measured::CommPrtt(PrttShape {
                bytes: 1,
                messages: 1,
                delayed: false,
                pair: [0, 1],
            }),
            Measured::CommExchange(ExchangeShape {
                bytes: 1,
                pair: [0, 1],
            }),
            Measured::CommReduce(ReduceShape { bytes: 4, ranks: 2 }),
            Measured::CommAllreduce(AllreduceShape {
                bytes: 4,
                algorithm: "ring".into(),
                ranks: Some(2),
                gpus: None,
            }),
            Measured::CommAlltoall(AlltoallShape { bytes: 1, ranks: 2 }),
        ];
        let kinds: Vec<RecordKind> = all.iter().map(Measured::kind).collect();
        assert_eq!(kinds, RecordKind::ALL);
        for m in all {
            let json = serde_json::to_value(&m).unwrap();
            assert_eq!(json["kind"], m.kind().name());
            assert_eq!(serde_json::from_value::<Measured>(json).unwrap(), m);
        }
    }

    #[test]
    fn ids_are_made_of_the_shape_with_sorted_keys() {
        let m = Measured::WorkloadLayer(LayerShape {
            run: StepShape {
                workload: "tiny".into(),
                input: vec![3, 8, 8],
                batch: 1,
                ranks: None,
            },
            layer: "conv".into(),
            op: "conv".into(),
            pass: Pass::Forward,
        });
        assert_eq!(
            m.shape_json().to_string(),
            r#"{"batch":1,"input":[3,8,8],"layer":"conv","op":"conv","pass":"forward","workload":"tiny"}"#
        );
    }
}
