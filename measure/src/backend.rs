//! The [`Backend`] trait every device implements, and the cases it measures.
//!
//! A backend runs kernels and returns raw timings; turning them into records (with FLOPs and
//! bytes as the model counts them) is [`crate::campaign`]'s job, shared by every backend.

use std::collections::BTreeMap;

use serde::Serialize;

use ridgeline_model::graph::Op;

use crate::error::Result;
use crate::protocol::Protocol;
use crate::record::{Device, Env};

pub use crate::kinds::{ConvPass, CopyDirection, Format, HostMemory, Layout, Pass, StreamKernel};

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
