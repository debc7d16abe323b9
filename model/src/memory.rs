//! Memory footprint per device versus batch size, and the largest batch that fits
//! (\[004\] §IV, docs/ARCHITECTURE.md "Memory per device").
//!
//! Components, in bytes:
//! - fixed: **parameters** (compute-precision copy, plus an FP32 master copy under mixed
//!   precision), **gradients** (compute precision), **optimizer state** (FP32: none for
//!   SGD, one copy for SGD with momentum, two for Adam and LAMB), **buffers** (batch norm's
//!   running and saved per-channel statistics, FP32), and **workspace** (the largest
//!   per-layer lowering buffer: a zero-padded copy of one sample's input group, which an
//!   implicit-GEMM convolution lowers from — cuDNN's implicit-precomputed GEMM and
//!   ridgeline's CPU executor work so; a whole im2col matrix would be prod(kernel) times
//!   larger; 1x1 stride-1 unpadded convolutions need none);
//! - per sample: the **input** buffer (compute precision), the **activations** kept for
//!   backward ([`crate::cost`]), and the **activation gradients** in flight at the peak.
//!   Backward runs from the last layer to the first, and a saved tensor is freed once the
//!   backward pass of the earliest layer that keeps it is done (as frameworks free saved
//!   tensors), so while layer `i` runs backward the live memory is the activations kept by
//!   layers up to `i` plus `i`'s output gradient and input gradients. The peak is the
//!   largest of these and of the end of the forward pass (every activation kept); the
//!   gradient component is that peak less all the activations (zero when the end of the
//!   forward pass is the peak).
//!
//! Every component is affine in the batch size, so the largest batch that fits a capacity
//! has a closed form.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::cost::{self, GraphCost, MAX_BATCH};
use crate::error::{Error, Result};
use crate::graph::{Graph, Op};
use crate::precision::Precision;
use crate::stack::{Recompute, Stack, fusion};
use crate::system::{Sourced, System};
use crate::units::Bytes;
use crate::workloads::transformer::block_of;

/// Most rows one memory report lists.
pub const MAX_ROWS: usize = 10_000;

/// Bytes per FP32 value (master weights, optimizer state, statistics).
const FP32: u64 = 4;

/// The optimizer, which decides the optimizer state per parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one FP32 value per parameter.
    SgdMomentum,
    /// Adam: two FP32 moments per parameter.
    Adam,
    /// LAMB: two FP32 moments per parameter, like Adam.
    Lamb,
}

impl Optimizer {
    /// Every optimizer.
    pub const ALL: [Optimizer; 4] = [
        Optimizer::Sgd,
        Optimizer::SgdMomentum,
        Optimizer::Adam,
        Optimizer::Lamb,
    ];

    /// Name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Optimizer::Sgd => "sgd",
            Optimizer::SgdMomentum => "sgd-momentum",
            Optimizer::Adam => "adam",
            Optimizer::Lamb => "lamb",
        }
    }

    /// FP32 state values per parameter.
    pub const fn state_per_param(self) -> u64 {
        match self {
            Optimizer::Sgd => 0,
            Optimizer::SgdMomentum => 1,
            Optimizer::Adam | Optimizer::Lamb => 2,
        }
    }
}

impl fmt::Display for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Optimizer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Optimizer::ALL
            .into_iter()
            .find(|o| o.name() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = Optimizer::ALL.iter().map(|o| o.name()).collect();
                format!(
                    "unknown optimizer `{s}`; valid optimizers: {}",
                    valid.join(", ")
                )
            })
    }
}

/// The footprint of a workload as fixed bytes plus bytes per sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Footprint {
    /// Parameters: compute copy plus FP32 master under mixed precision.
    pub parameters: Bytes,
    /// Gradients, in compute precision.
    pub gradients: Bytes,
    /// Optimizer state, FP32.
    pub optimizer_state: Bytes,
    /// Batch-norm running and saved statistics, FP32.
    pub buffers: Bytes,
    /// Largest per-layer lowering buffer (a padded copy of one sample's input group).
    pub workspace: Bytes,
    /// Input buffer per sample.
    pub input_per_sample: Bytes,
    /// Activations kept for backward, per sample.
    pub activations_per_sample: Bytes,
    /// Activation gradients in flight at the peak, less the activations already freed by
    /// then, per sample (see the module docs).
    pub activation_gradients_per_sample: Bytes,
}

/// The footprint at one batch size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryRow {
    /// Batch size per device.
    pub batch: u64,
    /// Parameters.
    pub parameters: Bytes,
    /// Gradients.
    pub gradients: Bytes,
    /// Optimizer state.
    pub optimizer_state: Bytes,
    /// Statistics buffers.
    pub buffers: Bytes,
    /// Workspace.
    pub workspace: Bytes,
    /// Input batch.
    pub input: Bytes,
    /// Activations kept for backward.
    pub activations: Bytes,
    /// Activation gradients in flight.
    pub activation_gradients: Bytes,
    /// Sum of the above.
    pub total: Bytes,
    /// Whether it fits the device memory.
    pub fits: bool,
}

impl Footprint {
    /// The footprint of `graph` trained at `precision` with `optimizer`.
    pub fn of(graph: &Graph, precision: Precision, optimizer: Optimizer) -> Footprint {
        Self::from_cost(graph, &cost::cost(graph, 1, precision), optimizer)
    }

    /// The footprint from a batch-1 cost of `graph` (avoids costing twice).
    pub fn from_cost(graph: &Graph, one: &GraphCost, optimizer: Optimizer) -> Footprint {
        let kept: Vec<f64> = one
            .layers
            .iter()
            .map(|r| r.activation_bytes.value())
            .collect();
        Self::from_kept(graph, one, optimizer, &kept, 0.0, 0, false)
    }

    /// The footprint under a software stack's memory rules ([`StackMemory`]).
    pub fn under(
        graph: &Graph,
        one: &GraphCost,
        optimizer: Optimizer,
        memory: &StackMemory,
    ) -> Footprint {
        Self::from_kept(
            graph,
            one,
            optimizer,
            &memory.per_layer,
            memory.transient,
            memory.tied_copy_params,
            memory.fp32_gradients,
        )
    }

    /// The footprint with `kept` bytes per sample kept by each layer, `transient` bytes
    /// per sample live only while one recomputed transformer layer runs backward, and
    /// `copies` parameters kept twice (tied layers' copies), the gradients in FP32 where
    /// `fp32_gradients` and the precision is mixed.
    #[allow(clippy::fn_params_excessive_bools)]
    fn from_kept(
        graph: &Graph,
        one: &GraphCost,
        optimizer: Optimizer,
        kept: &[f64],
        transient: f64,
        copies: u64,
        fp32_gradients: bool,
    ) -> Footprint {
        let precision = one.precision;
        let act = precision.compute_bytes();
        let params = one.params + copies;
        let master = if precision.has_master_weights() {
            FP32
        } else {
            0
        };
        let layers = graph.layers();
        let mut buffers = 0u64;
        let mut workspace = 0u64;
        // Per layer: activations it keeps (first keeper) and its gradients in flight.
        let mut in_flight = Vec::with_capacity(layers.len());
        for ((layer, row), &kept) in layers.iter().zip(&one.layers).zip(kept) {
            if matches!(layer.op, Op::BatchNorm) {
                // running mean and variance, saved mean and inverse std: 4 per channel.
                buffers += 4 * FP32 * layer.output.channels() as u64;
            }
            workspace = workspace.max(lowering_elements(graph, layer) * act);
            if row.flops_bwd.value() > 0.0 || row.hbm_bytes_bwd.value() > 0.0 {
                let ins: u64 = layer
                    .inputs
                    .iter()
                    .map(|&i| layers[i].output.elements())
                    .sum();
                in_flight.push((kept, (layer.output.elements() + ins) * act));
            } else {
                in_flight.push((kept, 0));
            }
        }
        // Walk backward: activations kept by later layers are freed as their passes end.
        let total: f64 = in_flight.iter().map(|(a, _)| a).sum();
        let mut later = 0.0;
        let mut gradients_in_flight = 0.0f64;
        for &(kept, grads) in in_flight.iter().rev() {
            gradients_in_flight = gradients_in_flight.max(grads as f64 - later);
            later += kept;
        }
        debug_assert!((later - total).abs() <= 1e-6 * total.max(1.0));
        Footprint {
            parameters: Bytes::from_count(params * (act + master)),
            gradients: Bytes::from_count(
                params
                    * if fp32_gradients && precision.has_master_weights() {
                        FP32
                    } else {
                        act
                    },
            ),
            optimizer_state: Bytes::from_count(params * FP32 * optimizer.state_per_param()),
            buffers: Bytes::from_count(buffers),
            workspace: Bytes::from_count(workspace),
            input_per_sample: Bytes::from_count(graph.input_shape().elements() * act),
            activations_per_sample: Bytes::new(total),
            activation_gradients_per_sample: Bytes::new(gradients_in_flight + transient),
        }
    }

    /// Bytes that do not depend on the batch size.
    pub fn fixed(&self) -> Bytes {
        self.parameters + self.gradients + self.optimizer_state + self.buffers + self.workspace
    }

    /// Bytes added by each sample of the batch.
    pub fn per_sample(&self) -> Bytes {
        self.input_per_sample + self.activations_per_sample + self.activation_gradients_per_sample
    }

    /// The footprint at `batch`, and whether it fits `capacity`.
    pub fn at(&self, batch: u64, capacity: Bytes) -> MemoryRow {
        let b = batch as f64;
        let total = self.fixed() + self.per_sample() * b;
        MemoryRow {
            batch,
            parameters: self.parameters,
            gradients: self.gradients,
            optimizer_state: self.optimizer_state,
            buffers: self.buffers,
            workspace: self.workspace,
            input: self.input_per_sample * b,
            activations: self.activations_per_sample * b,
            activation_gradients: self.activation_gradients_per_sample * b,
            total,
            fits: total <= capacity,
        }
    }

    /// The largest batch whose footprint fits `capacity`; 0 when not even one sample fits.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn max_batch(&self, capacity: Bytes) -> u64 {
        let room = capacity.value() - self.fixed().value();
        let per = self.per_sample().value();
        if room < per || per <= 0.0 {
            return 0;
        }
        let mut b = (room / per).floor() as u64;
        // Guard the floor against rounding at the boundary.
        while b > 0 && !self.at(b, capacity).fits {
            b -= 1;
        }
        b
    }
}

/// What a software stack changes in the activations a step keeps for backward, per sample
/// (docs/ARCHITECTURE.md "Memory per device"):
/// - **fusion**: a fused group no longer keeps its inner element-wise outputs
///   ([`fusion::recomputed`]), nor a gated product its activation's output
///   ([`fusion::gated`]);
/// - **selective recomputation**: an unfused attention keeps what a fused one does (its
///   scores are recomputed in backward);
/// - **full recomputation**: a transformer layer keeps only its input; while it runs
///   backward its activations are live again (`transient`: the largest layer's);
/// - **sequence parallelism**, where a split asks for it: the tensors of the transformer
///   layers' residual stream (and their dropout masks and norms' statistics) kept `1/t` on
///   each tensor-parallel rank; the stream is what row-parallel linear layers write and
///   norms, dropout and residual sums carry, whatever its width.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackMemory {
    /// Bytes each layer of the graph keeps, after the rules (its first keeper's share).
    #[serde(skip)]
    pub per_layer: Vec<f64>,
    /// Bytes live only while one recomputed transformer layer runs backward.
    pub transient: f64,
    /// Bytes fused attention no longer keeps (the score matrices), where the stack fuses
    /// attention the workload runs unfused.
    pub attention_saved: f64,
    /// Bytes fused groups no longer keep.
    pub fused_saved: f64,
    /// Bytes recomputation no longer keeps (before the transient).
    pub recompute_saved: f64,
    /// Bytes sequence parallelism no longer keeps on a rank.
    pub sequence_parallel_saved: f64,
    /// Transformer layers recomputed in full.
    pub recomputed_layers: usize,
    /// Parameters a tied layer keeps a copy of (its shared weights), where the stack keeps
    /// tied copies ([`crate::stack::Stack::tied_copies`]): counted again as parameters,
    /// gradients and optimizer state. Left out of JSON where none.
    #[serde(skip_serializing_if = "is_zero")]
    pub tied_copy_params: u64,
    /// Whether the gradients are kept in FP32 under mixed precision (the stack's
    /// [`crate::stack::Stack::fp32_gradients`]). Left out of JSON where not.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub fp32_gradients: bool,
}

/// Whether a count is zero (a field serde leaves out).
#[allow(clippy::trivially_copy_pass_by_ref)]
pub(crate) fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl StackMemory {
    /// Records what fused attention keeps less than `unfused`, the graph before the stack
    /// fused its attention (`one`: the fused graph at batch 1).
    pub fn set_attention_saved(&mut self, unfused: &Graph, one: &GraphCost) {
        let before = cost::cost(unfused, 1, one.precision)
            .activation_bytes
            .value();
        self.attention_saved = (before - one.activation_bytes.value()).max(0.0);
    }
}

/// The activations `graph` (costed at batch 1 as `one`) keeps under `stack`; `sequence`:
/// the tensor-parallel ranks and the full width of a transformer layer's tensors (positions
/// times hidden size) where sequence parallelism splits them.
pub fn stack_memory(
    graph: &Graph,
    one: &GraphCost,
    stack: &Stack,
    sequence: Option<(u32, u64)>,
) -> StackMemory {
    let layers = graph.layers();
    let act = one.precision.compute_bytes() as f64;
    let mut kept: Vec<f64> = one
        .layers
        .iter()
        .map(|r| r.activation_bytes.value())
        .collect();
    // The layer that first keeps each tensor, as `cost` attributes them.
    let needs = cost::requires_grad(graph);
    let mut keeper: Vec<Option<usize>> = vec![None; layers.len()];
    for (i, l) in layers.iter().enumerate() {
        if !needs[i] || l.op.is_view() {
            continue;
        }
        let k = cost::keeps(&l.op);
        let mut held: Vec<usize> = Vec::new();
        if k.inputs {
            held.extend(&l.inputs);
        } else if k.input {
            held.extend(l.inputs.first());
        }
        if k.output {
            held.push(i);
        }
        for n in held.into_iter().filter(|&n| n > 0) {
            keeper[n].get_or_insert(i);
        }
    }
    let bytes = |n: usize| act * layers[n].output.elements() as f64;
    // The residual stream and what stays on it (norms, dropout, residual sums): a linear
    // layer reading the stream is column-parallel (its output a rank's shard), one reading a
    // shard row-parallel (its output the stream again, Megatron's split). Sequence
    // parallelism splits the stream's tensors, whatever their size.
    let mut stream = vec![false; layers.len()];
    for (i, l) in layers.iter().enumerate() {
        let reads_stream = l.inputs.iter().any(|&j| stream[j]);
        stream[i] = match l.op {
            Op::Input => false,
            Op::Embedding { .. } => true,
            Op::Linear { .. } => !reads_stream,
            _ => reads_stream,
        };
    }
    let mut out = StackMemory {
        per_layer: Vec::new(),
        transient: 0.0,
        attention_saved: 0.0,
        fused_saved: 0.0,
        recompute_saved: 0.0,
        sequence_parallel_saved: 0.0,
        recomputed_layers: 0,
        tied_copy_params: if stack.tied_copies.as_ref().is_some_and(|t| t.value) {
            layers.iter().map(|l| cost::counts(graph, l).shared).sum()
        } else {
            0
        },
        fp32_gradients: stack.fp32_gradients.as_ref().is_some_and(|t| t.value),
    };
    let groups = fusion::groups(graph, &stack.fusion.value);
    let mut recomputed = fusion::recomputed(graph, &groups);
    for n in fusion::gated(graph, &stack.fusion.value) {
        if !recomputed.contains(&n) {
            recomputed.push(n);
        }
    }
    for n in recomputed {
        if let Some(k) = keeper[n] {
            let b = bytes(n).min(kept[k]);
            kept[k] -= b;
            out.fused_saved += b;
        }
    }
    if stack.recompute.value == Recompute::Selective
        && let Some(fused) = fusion::fuse_attention(graph)
    {
        let f = cost::cost(&fused, 1, one.precision);
        for (i, l) in layers.iter().enumerate() {
            if matches!(l.op, Op::Attention(_)) {
                let now = f.layers[i].activation_bytes.value().min(kept[i]);
                out.recompute_saved += kept[i] - now;
                kept[i] = now;
            }
        }
    }
    if let Some((t, width)) = sequence.filter(|&(t, _)| t > 1) {
        let share = 1.0 - 1.0 / f64::from(t);
        for (n, l) in layers.iter().enumerate() {
            if block_of(&l.name).is_none() || !stream[n] {
                continue;
            }
            if let Some(k) = keeper[n] {
                let b = (bytes(n) * share).min(kept[k]);
                kept[k] -= b;
                out.sequence_parallel_saved += b;
            }
            if matches!(l.op, Op::Dropout { .. }) {
                let b = (width as f64 * share).min(kept[n]);
                kept[n] -= b;
                out.sequence_parallel_saved += b;
            }
            // A norm on the stream runs on the rank's positions: its FP32 statistics too.
            let stats = match l.op {
                Op::LayerNorm => 8.0,
                Op::RmsNorm => 4.0,
                _ => 0.0,
            };
            if stats > 0.0 {
                let b = (stats * l.output.spatial_elements() as f64 * share).min(kept[n]);
                kept[n] -= b;
                out.sequence_parallel_saved += b;
            }
        }
    }
    if stack.recompute.value == Recompute::Full {
        let mut blocks: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, l) in layers.iter().enumerate() {
            if let Some(b) = block_of(&l.name) {
                match blocks.last_mut() {
                    Some((last, members)) if *last == b => members.push(i),
                    _ => blocks.push((b, vec![i])),
                }
            }
        }
        for (_, members) in &blocks {
            let all: f64 = members.iter().map(|&i| kept[i]).sum();
            // The layer's input: the residual stream its first layer reads.
            let first = members[0];
            let input = layers[first].inputs.first().map_or(0.0, |&n| {
                let b = bytes(n);
                match sequence {
                    Some((t, _)) if t > 1 && stream[n] => b / f64::from(t),
                    _ => b,
                }
            });
            for &i in members {
                kept[i] = 0.0;
            }
            kept[first] = input.min(all);
            out.recompute_saved += all - kept[first];
            out.transient = out.transient.max(all);
        }
        out.recomputed_layers = blocks.len();
    }
    out.per_layer = kept;
    out
}

/// Which batch sizes a memory report lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSweep {
    /// `from`, `2 from`, `4 from`, ... up to `to`, and `to` itself.
    Doubling {
        /// First batch.
        from: u64,
        /// Last batch (inclusive).
        to: u64,
    },
    /// `from`, `from + step`, ... up to `to`, and `to` itself.
    Linear {
        /// First batch.
        from: u64,
        /// Last batch (inclusive).
        to: u64,
        /// Step.
        step: u64,
    },
}

impl BatchSweep {
    /// The batch sizes, at most [`MAX_ROWS`] of them.
    pub fn batches(self) -> Result<Vec<u64>> {
        let (from, to) = match self {
            BatchSweep::Doubling { from, to } | BatchSweep::Linear { from, to, .. } => (from, to),
        };
        if from == 0 || from > to || to > MAX_BATCH {
            return Err(Error::argument(
                "batch-range",
                format!("{from}..{to}"),
                format!("needs 1 <= A <= B <= {MAX_BATCH}"),
            ));
        }
        let mut out: Vec<u64> = match self {
            BatchSweep::Doubling { .. } => std::iter::successors(Some(from), |&b| b.checked_mul(2))
                .take_while(|&b| b <= to)
                .collect(),
            BatchSweep::Linear { step, .. } => {
                let rows = (to - from) / step.max(1) + 1;
                if rows > MAX_ROWS as u64 {
                    return Err(Error::argument(
                        "batch-step",
                        step,
                        format!("gives {rows} rows; the most is {MAX_ROWS}: use a larger step"),
                    ));
                }
                (from..=to)
                    .step_by(usize::try_from(step.max(1)).unwrap_or(usize::MAX))
                    .collect()
            }
        };
        if out.last() != Some(&to) {
            out.push(to);
        }
        Ok(out)
    }
}

/// The memory report of one workload on one system.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryReport {
    /// Workload name.
    pub workload: String,
    /// System name.
    pub system: String,
    /// Device name.
    pub device: String,
    /// Precision.
    pub precision: Precision,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// The memory one device trains in, with its source.
    pub device_memory: Sourced<Bytes>,
    /// The device's last-level cache, where known.
    pub llc: Option<Sourced<Bytes>>,
    /// The software stack's name.
    pub stack: String,
    /// What the stack changed in the activations kept.
    pub stack_memory: StackMemory,
    /// Fixed and per-sample components.
    pub footprint: Footprint,
    /// Bytes that do not depend on the batch.
    pub fixed_bytes: Bytes,
    /// Bytes added per sample.
    pub per_sample_bytes: Bytes,
    /// Largest batch that fits device memory (0: not even one sample).
    pub max_batch: u64,
    /// Largest batch that fits the last-level cache (`None` without a cache size).
    pub max_batch_llc: Option<u64>,
    /// The footprint at each requested batch.
    pub rows: Vec<MemoryRow>,
}

/// The memory report of `graph` on `system`. Without a sweep, batches double from 1 to the
/// first power of two above the largest batch that fits.
pub fn report(
    graph: &Graph,
    system: &System,
    precision: Precision,
    optimizer: Optimizer,
    stack: &Stack,
    sweep: Option<BatchSweep>,
) -> Result<MemoryReport> {
    let device_memory = system.device_memory().ok_or_else(|| {
        Error::argument(
            "system",
            &system.name,
            format!(
                "device `{}` has no memory capacity of its own and the system gives no host \
                 memory; use a system file with node.host_memory_gib (or `local`)",
                system.device.name
            ),
        )
    })?;
    // A stack that fuses attention keeps what fused attention keeps for backward.
    let fused = stack.fused_attention(graph);
    let g = fused.as_ref().unwrap_or(graph);
    let one = cost::cost(g, 1, precision);
    let mut stack_memory = stack_memory(g, &one, stack, None);
    if fused.is_some() {
        stack_memory.set_attention_saved(graph, &one);
    }
    let graph = g;
    let footprint = Footprint::under(graph, &one, optimizer, &stack_memory);
    let capacity = device_memory.value;
    let max_batch = footprint.max_batch(capacity);
    let sweep = sweep.unwrap_or(BatchSweep::Doubling {
        from: 1,
        to: (max_batch + 1).next_power_of_two().clamp(1, MAX_BATCH),
    });
    let rows = sweep
        .batches()?
        .into_iter()
        .map(|b| footprint.at(b, capacity))
        .collect();
    Ok(MemoryReport {
        workload: graph.name().to_owned(),
        system: system.name.clone(),
        device: system.device.name.clone(),
        precision,
        optimizer,
        max_batch_llc: system
            .device
            .llc
            .as_ref()
            .map(|l| footprint.max_batch(l.value)),
        llc: system.device.llc.clone(),
        fixed_bytes: footprint.fixed(),
        per_sample_bytes: footprint.per_sample(),
        max_batch,
        rows,
        footprint,
        device_memory,
        stack: stack.name.clone(),
        stack_memory,
    })
}

/// Elements of the lowering buffer of `layer`: a padded copy of one sample's input group
/// (0 if none is needed).
fn lowering_elements(graph: &Graph, layer: &crate::graph::Layer) -> u64 {
    // Implicit-GEMM convolution (cuDNN's implicit-precomputed GEMM, ridgeline's CPU
    // executor) lowers from a zero-padded copy of one sample's input group, not from a
    // whole im2col matrix (which is prod(kernel) times larger). A 1x1 unpadded convolution
    // is a plain GEMM on the activations: none at unit stride, a gather of the positions it
    // reads (the output's size) when strided.
    let lowering = |c: &crate::graph::Conv, channels: usize, input: &[usize], output: &[usize]| {
        let pads = c.padding.pairs();
        let per_group = (channels / c.groups.max(1)) as u64;
        let pointwise = c.kernel.iter().all(|&k| k == 1) && pads.iter().all(|&[a, b]| a + b == 0);
        if pointwise && c.stride.iter().all(|&s| s == 1) {
            0
        } else if pointwise {
            per_group * output.iter().map(|&d| d as u64).product::<u64>()
        } else {
            per_group
                * input
                    .iter()
                    .zip(pads)
                    .map(|(&d, &[a, b])| (d + a + b) as u64)
                    .product::<u64>()
        }
    };
    let input = &graph.layers()[layer.inputs.first().copied().unwrap_or(0)].output;
    match &layer.op {
        Op::Conv(c) => lowering(c, input.channels(), input.spatial(), layer.output.spatial()),
        // The adjoint convolution reads the transposed convolution's output.
        Op::ConvTranspose(c) => lowering(
            c,
            layer.output.channels(),
            layer.output.spatial(),
            input.spatial(),
        ),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{self, BuildOptions};

    fn resnet() -> Graph {
        workloads::build("resnet50", &BuildOptions::default()).unwrap()
    }

    #[test]
    fn parameters_gradients_and_adam_state() {
        let f = Footprint::of(&resnet(), Precision::Fp32, Optimizer::Adam);
        let p = 25_557_032.0;
        assert_eq!(f.parameters.value(), 4.0 * p);
        assert_eq!(f.gradients.value(), 4.0 * p);
        assert_eq!(f.optimizer_state.value(), 8.0 * p);
    }

    #[test]
    fn mixed_precision_keeps_fp32_master_weights() {
        let f = Footprint::of(&resnet(), Precision::AmpFp16, Optimizer::SgdMomentum);
        let p = 25_557_032.0;
        assert_eq!(f.parameters.value(), 6.0 * p);
        assert_eq!(f.gradients.value(), 2.0 * p);
        assert_eq!(f.optimizer_state.value(), 4.0 * p);
        assert_eq!(f.input_per_sample.value(), 2.0 * 3.0 * 224.0 * 224.0);
    }

    /// Freeing saved tensors as backward proceeds: the per-sample peak lies between the end
    /// of the forward pass (every activation kept) and the bound that keeps every activation
    /// while the largest gradients are in flight.
    #[test]
    fn the_backward_peak_frees_what_later_layers_kept() {
        for name in ["cosmoflow", "deepcam", "resnet50"] {
            let g = workloads::build(name, &BuildOptions::default()).unwrap();
            let one = cost::cost(&g, 1, Precision::Fp32);
            let f = Footprint::from_cost(&g, &one, Optimizer::Sgd);
            let largest_in_flight = g
                .layers()
                .iter()
                .zip(&one.layers)
                .filter(|(_, r)| r.flops_bwd.value() > 0.0 || r.hbm_bytes_bwd.value() > 0.0)
                .map(|(l, _)| {
                    let ins: u64 = l
                        .inputs
                        .iter()
                        .map(|&i| g.layers()[i].output.elements())
                        .sum();
                    ((l.output.elements() + ins) * 4) as f64
                })
                .fold(0.0, f64::max);
            let grads = f.activation_gradients_per_sample.value();
            assert!(
                grads >= 0.0 && grads <= largest_in_flight,
                "{name}: {grads}"
            );
        }
        // CosmoFlow's peak is the first max-pool's backward: the first convolution's output
        // (kept by the LeakyReLU) and the LeakyReLU's output (kept by the pool), 32 x 128^3
        // each, the pool's input gradient of that size and its output gradient of an eighth;
        // every later activation is gone by then.
        let g = workloads::build("cosmoflow", &BuildOptions::default()).unwrap();
        let f = Footprint::of(&g, Precision::Fp32, Optimizer::Sgd);
        let t = 32.0 * 128f64.powi(3) * 4.0;
        let live = f.activations_per_sample.value() + f.activation_gradients_per_sample.value();
        assert_eq!(live, 3.125 * t);
    }

    #[test]
    fn strided_3x3_has_the_largest_resnet_lowering_copy() {
        let f = Footprint::of(&resnet(), Precision::Fp32, Optimizer::Sgd);
        // layer2.0.conv2 (3x3, stride 2) copies its 128 x 56 x 56 input padded to 58 x 58:
        // 1.72 MB, above layer2.0.downsample.0 (1x1, stride 2: gathers 256 x 28 x 28), the
        // 64 x 58 x 58 of layer1's 3x3 convolutions and the 3 x 230 x 230 of the stem; 1x1
        // stride-1 convolutions need no copy.
        let conv2 = 128.0 * 58.0 * 58.0 * 4.0;
        assert_eq!(f.workspace.value(), conv2);
    }

    #[test]
    fn max_batch_is_the_largest_that_fits() {
        let f = Footprint::of(&resnet(), Precision::Fp32, Optimizer::SgdMomentum);
        let capacity = Bytes::from_gib(16.0);
        let b = f.max_batch(capacity);
        assert!(b > 0);
        assert!(f.at(b, capacity).fits);
        assert!(!f.at(b + 1, capacity).fits);
    }

    #[test]
    fn nothing_fits_a_tiny_device() {
        let f = Footprint::of(&resnet(), Precision::Fp32, Optimizer::Sgd);
        assert_eq!(f.max_batch(Bytes::from_mib(1.0)), 0);
    }

    #[test]
    fn doubling_and_linear_sweeps_include_the_end() {
        let d = BatchSweep::Doubling { from: 1, to: 20 }.batches().unwrap();
        assert_eq!(d, vec![1, 2, 4, 8, 16, 20]);
        let l = BatchSweep::Linear {
            from: 2,
            to: 9,
            step: 3,
        }
        .batches()
        .unwrap();
        assert_eq!(l, vec![2, 5, 8, 9]);
        assert!(
            BatchSweep::Linear {
                from: 1,
                to: 1 << 20,
                step: 1
            }
            .batches()
            .is_err()
        );
        assert!(BatchSweep::Doubling { from: 0, to: 4 }.batches().is_err());
    }

    /// A built-in stack with one field's value replaced.
    fn stack_with(name: &str, from: &str, to: &str) -> Stack {
        let text = std::fs::read_to_string(format!(
            "{}/../data/catalog/stacks/{name}.toml",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        assert!(text.contains(from), "{from}");
        crate::stack::parse(&text.replace(from, to), "t.toml").unwrap()
    }

    /// Issue 43, item 9: ridgeline's executors keep a tied head's own copy of the token
    /// embeddings (and of their gradient); a stack that says so counts GPT-2's 50257 x 768
    /// table twice, PyTorch's stacks once.
    #[test]
    fn a_stack_with_tied_copies_counts_the_shared_weights_again() {
        let g =
            crate::workloads::build("gpt2", &crate::workloads::BuildOptions::default()).unwrap();
        let one = cost::cost(&g, 1, Precision::Fp32);
        let eager = stack_memory(&g, &one, crate::catalog::default_stack(), None);
        assert_eq!(eager.tied_copy_params, 0);
        let executor = crate::catalog::stack("ridgeline-executor").unwrap();
        let copies = stack_memory(&g, &one, &executor, None);
        assert_eq!(copies.tied_copy_params, 50_257 * 768);
        let [a, b] = [eager, copies].map(|m| Footprint::under(&g, &one, Optimizer::Sgd, &m));
        let table = f64::from(50_257 * 768 * 4);
        assert_eq!(b.parameters.value() - a.parameters.value(), table);
        assert_eq!(b.gradients.value() - a.gradients.value(), table);
        // A CNN has nothing tied: the same footprint.
        let r = crate::workloads::build("resnet50", &crate::workloads::BuildOptions::default())
            .unwrap();
        let one = cost::cost(&r, 1, Precision::Fp32);
        assert_eq!(stack_memory(&r, &one, &executor, None).tied_copy_params, 0);
    }

    #[test]
    fn a_stack_keeps_fewer_activations_by_its_fusion_and_recomputation() {
        let g =
            crate::workloads::build("gpt3-xl", &crate::workloads::BuildOptions::default()).unwrap();
        let one = cost::cost(&g, 1, Precision::AmpBf16);
        let layers = g.layers();
        let eager = stack_memory(&g, &one, crate::catalog::default_stack(), None);
        let raw: f64 = one.layers.iter().map(|r| r.activation_bytes.value()).sum();
        assert_eq!(eager.per_layer.iter().sum::<f64>(), raw);
        assert_eq!(eager.fused_saved + eager.recompute_saved, 0.0);
        // The pointwise rule fuses GPT's tanh GELU as two chains (the halved input and the
        // product; the cube through one plus the tanh): the halved input (kept by the
        // product) and the tanh's output (kept by itself) are inner outputs, recomputed:
        // 2 x 4h x S x 2 bytes a transformer layer; one plus the tanh ends its chain and stays
        // kept. And the last residual sum, inner to the chain dropout-add-final layer norm
        // (nothing else reads it), which the layer norm kept: S x h x 2.
        let none = "recompute = { value = \"selective\"";
        let fused = stack_with("megatron-te", none, "recompute = { value = \"none\"");
        let m = stack_memory(&g, &one, &fused, None);
        let [s, h] = [2048.0, 2048.0];
        let blocks = 24.0;
        assert_eq!(
            m.fused_saved,
            blocks * 2.0 * 4.0 * h * s * 2.0 + s * h * 2.0
        );
        assert!((m.per_layer.iter().sum::<f64>() - (raw - m.fused_saved)).abs() < 1.0);
        // Full recomputation: each transformer layer keeps its input, S x h x 2 bytes; the
        // largest layer's activations are live again during its backward pass.
        let full = stack_with("megatron-te", none, "recompute = { value = \"full\"");
        let f = stack_memory(&g, &one, &full, None);
        assert_eq!(f.recomputed_layers, 24);
        let outside: f64 = layers
            .iter()
            .zip(&m.per_layer)
            .filter(|(l, _)| block_of(&l.name).is_none())
            .map(|(_, b)| b)
            .sum();
        let kept: f64 = f.per_layer.iter().sum();
        assert!(
            (kept - (outside + blocks * s * h * 2.0)).abs() < 1.0,
            "{kept}"
        );
        assert!(f.transient > 0.0 && f.transient < m.per_layer.iter().sum::<f64>() / blocks);
        let fp = Footprint::under(&g, &one, Optimizer::Adam, &f);
        assert!(fp.activation_gradients_per_sample.value() >= f.transient);
        // Sequence parallelism over 4 ranks keeps a quarter of the full-width tensors.
        let sp = stack_memory(&g, &one, &fused, Some((4, 2048 * 2048)));
        assert!(sp.sequence_parallel_saved > 0.0);
        assert!(
            (sp.per_layer.iter().sum::<f64>() + sp.sequence_parallel_saved
                - m.per_layer.iter().sum::<f64>())
            .abs()
                < 1.0
        );
    }

    #[test]
    fn report_on_v100_matches_footprint() {
        let s = crate::catalog::system("cori-gpu").unwrap();
        let r = report(
            &resnet(),
            &s,
            Precision::AmpFp16,
            Optimizer::SgdMomentum,
            crate::catalog::default_stack(),
            None,
        )
        .unwrap();
        assert_eq!(r.device_memory.value, Bytes::from_gib(16.0));
        assert!(r.max_batch > 0);
        let last = r.rows.last().unwrap();
        assert!(
            last.batch > r.max_batch && !last.fits,
            "default sweep crosses the limit"
        );
        assert_eq!(
            r.max_batch_llc,
            Some(0),
            "ResNet-50's weights alone exceed a 6 MiB L2"
        );
    }

    #[test]
    fn optimizer_names_round_trip() {
        for o in Optimizer::ALL {
            assert_eq!(o.name().parse::<Optimizer>(), Ok(o));
        }
        assert!(
            "rmsprop"
                .parse::<Optimizer>()
                .unwrap_err()
                .contains("sgd, sgd-momentum")
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use crate::graph::arbitrary;

        fn precision() -> impl Strategy<Value = Precision> {
            prop::sample::select(Precision::ALL.to_vec())
        }

        fn optimizer() -> impl Strategy<Value = Optimizer> {
            prop::sample::select(Optimizer::ALL.to_vec())
        }

        proptest! {
            #[test]
            fn footprint_is_monotone_in_batch(
                g in arbitrary::graph(),
                p in precision(),
                o in optimizer(),
                b in 1u64..10_000,
                extra in 1u64..1000,
            ) {
                let f = Footprint::of(&g, p, o);
                let cap = Bytes::from_gib(1.0);
                let small = f.at(b, cap);
                let large = f.at(b + extra, cap);
                prop_assert!(large.total > small.total);
                prop_assert!(large.activations >= small.activations);
                prop_assert_eq!(large.parameters, small.parameters);
            }

            #[test]
            fn max_batch_fits_and_one_more_does_not(
                g in arbitrary::graph(),
                p in precision(),
                mib in 1.0f64..4096.0,
            ) {
                let f = Footprint::of(&g, p, Optimizer::Adam);
                let cap = Bytes::from_mib(mib);
                let max = f.max_batch(cap);
                if max > 0 {
                    prop_assert!(f.at(max, cap).fits);
                }
                prop_assert!(!f.at(max + 1, cap).fits);
            }
        }
    }
}
