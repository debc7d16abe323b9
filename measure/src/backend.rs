//! The [`Backend`] trait every device implements, and the cases it measures.
//!
//! A backend runs kernels and returns raw timings; turning them into records (with FLOPs and
//! bytes as the model counts them) is [`crate::campaign`]'s job, shared by every backend.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use ridgeline_model::graph::Op;

use crate::error::{Error, Result};
use crate::protocol::Protocol;
use crate::record::{Device, Env};

/// Number formats a micro-kernel can run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// IEEE double.
    Fp64,
    /// IEEE single.
    Fp32,
    /// TensorFloat-32 (tensor cores).
    Tf32,
    /// IEEE half with FP32 accumulation.
    Fp16,
    /// bfloat16 with FP32 accumulation.
    Bf16,
}

impl Format {
    /// Name in records and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Format::Fp64 => "fp64",
            Format::Fp32 => "fp32",
            Format::Tf32 => "tf32",
            Format::Fp16 => "fp16",
            Format::Bf16 => "bf16",
        }
    }

    /// Bytes per element in memory.
    pub const fn bytes(self) -> u64 {
        match self {
            Format::Fp64 => 8,
            Format::Fp32 | Format::Tf32 => 4,
            Format::Fp16 | Format::Bf16 => 2,
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            Format::Fp64,
            Format::Fp32,
            Format::Tf32,
            Format::Fp16,
            Format::Bf16,
        ]
        .into_iter()
        .find(|f| f.name() == s)
        .ok_or_else(|| format!("unknown number format `{s}`; valid: fp64, fp32, tf32, fp16, bf16"))
    }
}

/// Where a convolution's channels sit in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Channels first: NCHW, NCDHW (the layer graph's and the CPU's layout).
    #[default]
    ChannelsFirst,
    /// Channels last: NHWC, NDHWC (what tensor cores read best; TensorFlow's default, and
    /// PyTorch's `channels_last` memory format).
    ChannelsLast,
}

impl Layout {
    /// Name in records and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::ChannelsFirst => "channels-first",
            Layout::ChannelsLast => "channels-last",
        }
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "channels-first" | "nchw" | "ncdhw" => Ok(Layout::ChannelsFirst),
            "channels-last" | "nhwc" | "ndhwc" => Ok(Layout::ChannelsLast),
            _ => Err(format!(
                "unknown layout `{s}`; valid: channels-first (nchw, ncdhw), channels-last (nhwc, ndhwc)"
            )),
        }
    }
}

/// A GEMM: `C (m x n) = A (m x k) x B (k x n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GemmCase {
    /// Rows of C.
    pub m: usize,
    /// Columns of C.
    pub n: usize,
    /// Inner dimension.
    pub k: usize,
    /// Number format.
    pub format: Format,
}

/// Which pass of a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConvPass {
    /// `y = conv(x, w)`.
    Forward,
    /// `dx` from `dy`.
    BackwardData,
    /// `dw` from `x` and `dy`.
    BackwardFilter,
    /// `dx` and `dw` in one call, as PyTorch's `convolution_backward` computes them: a pass
    /// of imported measurements (`ridgeline import torch-trace`); no backend runs it (the
    /// suite measures each gradient alone).
    Backward,
}

impl ConvPass {
    /// Every pass a backend runs.
    pub const ALL: [ConvPass; 3] = [
        ConvPass::Forward,
        ConvPass::BackwardData,
        ConvPass::BackwardFilter,
    ];

    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            ConvPass::Forward => "forward",
            ConvPass::BackwardData => "backward-data",
            ConvPass::BackwardFilter => "backward-filter",
            ConvPass::Backward => "backward",
        }
    }
}

impl ConvPass {
    /// The error a backend gives for [`ConvPass::Backward`], which it does not run.
    pub(crate) fn refused(what: &str) -> Error {
        Error::invalid(
            what,
            "the backward pass with both gradients in one call is imported from traces, not \
             measured; measure backward-data and backward-filter",
        )
    }
}

/// A convolution layer to measure: a one-layer model graph's conv op and its input.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConvCase {
    /// A label (e.g. the reference layer it comes from).
    pub label: String,
    /// Batch.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Input spatial size.
    pub input: Vec<usize>,
    /// Output channels.
    pub c_out: usize,
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
    /// Whether the layer adds a bias (forward) and sums its gradient (backward-filter).
    pub bias: bool,
    /// Number format: fp32 everywhere; on a GPU also tf32, and fp16 and bf16 with fp32
    /// accumulation (mixed precision's convolutions).
    pub format: Format,
    /// Memory layout of the input, output and filter: channels first everywhere; channels
    /// last on a GPU.
    pub layout: Layout,
}

/// A STREAM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKernel {
    /// `c = a`.
    Copy,
    /// `b = q c`.
    Scale,
    /// `c = a + b`.
    Add,
    /// `a = b + q c`.
    Triad,
}

impl StreamKernel {
    /// Every kernel.
    pub const ALL: [StreamKernel; 4] = [
        StreamKernel::Copy,
        StreamKernel::Scale,
        StreamKernel::Add,
        StreamKernel::Triad,
    ];

    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            StreamKernel::Copy => "copy",
            StreamKernel::Scale => "scale",
            StreamKernel::Add => "add",
            StreamKernel::Triad => "triad",
        }
    }

    /// Arrays read plus written per element.
    pub const fn arrays(self) -> u64 {
        match self {
            StreamKernel::Copy | StreamKernel::Scale => 2,
            StreamKernel::Add | StreamKernel::Triad => 3,
        }
    }

    /// FLOPs per element.
    pub const fn flops(self) -> u64 {
        match self {
            StreamKernel::Copy => 0,
            StreamKernel::Scale | StreamKernel::Add => 1,
            StreamKernel::Triad => 2,
        }
    }
}

/// Which way a host-device copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CopyDirection {
    /// Host to device.
    #[serde(rename = "h2d")]
    HostToDevice,
    /// Device to host.
    #[serde(rename = "d2h")]
    DeviceToHost,
}

impl CopyDirection {
    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            CopyDirection::HostToDevice => "h2d",
            CopyDirection::DeviceToHost => "d2h",
        }
    }
}

/// The host side of a host-device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostMemory {
    /// Page-locked memory: the copy engine reads or writes it directly (DMA).
    Pinned,
    /// Ordinary memory: the driver stages it through pinned buffers.
    Pageable,
}

impl HostMemory {
    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            HostMemory::Pinned => "pinned",
            HostMemory::Pageable => "pageable",
        }
    }
}

/// A host-device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CopyCase {
    /// Direction.
    pub direction: CopyDirection,
    /// Host memory kind.
    pub memory: HostMemory,
    /// Bytes copied.
    pub bytes: usize,
}

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Forward.
    Forward,
    /// Backward (data and parameter gradients).
    Backward,
}

impl Pass {
    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        }
    }
}

/// A non-GEMM op (pooling, normalisation, element-wise) on an input shape.
#[derive(Debug, Clone, PartialEq)]
pub struct OpCase {
    /// The op (two copies of the input feed `add` and `concat`).
    pub op: Op,
    /// Per-sample input shape, channels first.
    pub input: Vec<usize>,
    /// Batch.
    pub batch: usize,
    /// Number format of the tensors: fp32 on every device; fp16 and bf16 on a GPU, the
    /// activation storage of mixed precision (arithmetic in FP32, per-channel parameters
    /// and losses FP32).
    pub format: Format,
}

/// Per-layer timings of a full training step, over several steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadRun {
    /// For each layer (input first): name, forward and backward seconds per step.
    pub layers: Vec<LayerTimes>,
    /// Seconds of each whole step.
    pub step_s: Vec<f64>,
    /// Seconds of each SGD update.
    pub update_s: Vec<f64>,
    /// The loss scale of each step, under dynamic loss scaling (amp-fp16); empty otherwise.
    pub loss_scale: Vec<f64>,
    /// Steps whose gradients overflowed, their update skipped (dynamic loss scaling).
    pub skipped_updates: usize,
    /// The executor's memory high-water mark.
    pub peak_bytes: u64,
    /// The process's peak resident set during the run, when the OS reports it.
    pub peak_rss_bytes: Option<u64>,
}

/// One layer's timings over the measured steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerTimes {
    /// Layer name, as in the model.
    pub name: String,
    /// Forward seconds per step.
    pub forward_s: Vec<f64>,
    /// Backward seconds per step; empty when the layer has no backward pass (the input,
    /// layers no parameter depends on).
    pub backward_s: Vec<f64>,
    /// What the backend noted about the forward and the backward pass, written to the
    /// layer's records as their `extra` (on a GPU: the cuDNN algorithm each convolution pass
    /// ran and what re-timing find's candidates measured); empty where it noted nothing.
    #[serde(skip_serializing_if = "PassNotes::is_empty")]
    pub notes: PassNotes,
}

/// What a backend noted about one layer's passes, as a record's `extra` holds it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PassNotes {
    /// About the forward pass.
    pub forward: BTreeMap<String, serde_json::Value>,
    /// About the backward pass.
    pub backward: BTreeMap<String, serde_json::Value>,
}

impl PassNotes {
    /// Whether nothing was noted.
    pub fn is_empty(&self) -> bool {
        self.forward.is_empty() && self.backward.is_empty()
    }
}

/// A device that runs kernels.
pub trait Backend {
    /// The device name in records: `cpu`, `cuda:0`.
    fn device(&self) -> Device;

    /// Threads (CPU) or streams the kernels use.
    fn threads(&self) -> usize;

    /// The environment to stamp on records.
    fn env(&self) -> Env;

    /// Times a GEMM.
    fn gemm(&mut self, case: &GemmCase, protocol: &Protocol) -> Result<Vec<f64>>;

    /// Times one pass of a convolution.
    fn conv(&mut self, case: &ConvCase, pass: ConvPass, protocol: &Protocol) -> Result<Vec<f64>>;

    /// Times a STREAM kernel on arrays of `elements` `f64`.
    fn stream(
        &mut self,
        kernel: StreamKernel,
        elements: usize,
        protocol: &Protocol,
    ) -> Result<Vec<f64>>;

    /// Times one pass of an op.
    fn op(&mut self, case: &OpCase, pass: Pass, protocol: &Protocol) -> Result<Vec<f64>>;

    /// Times a host-device copy. Devices without their own memory cannot.
    fn copy(&mut self, case: &CopyCase, protocol: &Protocol) -> Result<Vec<f64>> {
        let _ = protocol;
        Err(crate::error::Error::invalid(
            format!("copy {} {}", case.direction.name(), case.memory.name()),
            format!(
                "device `{}` has no memory of its own to copy to; host-device copies need \
                 --device cuda",
                self.device()
            ),
        ))
    }

    /// What the backend chose for the last measurement, for the record's `extra` (e.g.
    /// cuDNN's algorithm); taken, so it is reported once.
    fn take_notes(&mut self) -> BTreeMap<String, serde_json::Value> {
        BTreeMap::new()
    }

    /// Runs a full training step of `graph` at `batch` in `precision` repeatedly, timing
    /// every layer. A backend that does not run `precision` says which device does.
    fn workload(
        &mut self,
        graph: &ridgeline_model::graph::Graph,
        batch: usize,
        precision: ridgeline_model::precision::Precision,
        protocol: &Protocol,
    ) -> Result<WorkloadRun>;
}
