//! Raw serde structs that mirror a stack file exactly (`data/catalog/stacks/*.toml`, the format in
//! `data/README.md`). Unknown keys are refused. Validation lives in the parent module.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::system::raw::RawSourced;

/// A stack file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStack {
    pub(crate) name: String,
    pub(crate) description: String,
    #[serde(default)]
    pub(crate) sources: BTreeMap<String, String>,
    pub(crate) host: RawHost,
    pub(crate) device: RawDevice,
    pub(crate) fusion: RawFusion,
    pub(crate) precision: RawPrecision,
    pub(crate) memory: RawMemory,
    pub(crate) data: RawData,
    pub(crate) parallel: RawParallel,
}

/// `[data]`: what the step computes of the data set's sequences.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawData {
    pub(crate) packing: RawSourced<bool>,
}

/// `[memory]`: what the backward pass keeps and what it recomputes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMemory {
    pub(crate) recompute: RawSourced<String>,
    /// Whether a tied layer (a language model's head) keeps its own copy of the weights it
    /// shares, and of their gradient; absent: no (PyTorch shares them).
    #[serde(default)]
    pub(crate) tied_copies: Option<RawSourced<bool>>,
    /// Whether gradients are accumulated and reduced in FP32 under mixed precision;
    /// absent: no (in the compute precision).
    #[serde(default)]
    pub(crate) fp32_gradients: Option<RawSourced<bool>>,
}

/// `[parallel]`: how a split model's pipeline and optimizer run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawParallel {
    pub(crate) schedule: RawSourced<String>,
    pub(crate) distributed_optimizer: RawSourced<bool>,
    pub(crate) sequence_parallel: RawSourced<bool>,
    pub(crate) overlap_gradients: RawSourced<bool>,
    pub(crate) overlap_tensor_parallel: RawSourced<bool>,
}

/// `[host]`: how the framework issues the step's kernels.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHost {
    pub(crate) dispatch: RawSourced<String>,
    pub(crate) kernel_us: Option<RawSourced<f64>>,
    pub(crate) graph_us: Option<RawSourced<f64>>,
    pub(crate) parameter_us: RawSourced<f64>,
    pub(crate) optimizer_tensor_us: RawSourced<f64>,
    pub(crate) forward_us: Option<BTreeMap<String, RawSourced<f64>>>,
    pub(crate) backward_us: Option<BTreeMap<String, RawSourced<f64>>>,
    pub(crate) cpu_kernels: Option<RawSourced<String>>,
}

/// `[device]`: what the device adds per kernel.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDevice {
    pub(crate) kernel_gap_us: RawSourced<f64>,
}

/// `[fusion]`: the rewrites of the layer graph before it is costed.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFusion {
    pub(crate) rules: RawSourced<Vec<String>>,
}

/// `[precision]`: what FP32 training runs matrix ops in.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrecision {
    pub(crate) fp32_convolutions: RawSourced<String>,
    pub(crate) fp32_matmuls: RawSourced<String>,
    pub(crate) fp8: RawSourced<String>,
}
