//! Per-layer cost of a training step: parameters, multiply-accumulates, FLOPs forward and
//! backward (data gradient and weight gradient apart), HBM bytes forward and backward, and
//! the activation bytes kept for backward.
//!
//! # Counting rules
//! - **FLOPs** [002, Table 3; docs/ARCHITECTURE.md "Per-layer cost"]: convolution
//!   `2 N C_out prod(out_spatial) (C_in / groups) prod(kernel)`; transposed convolution the
//!   same for its adjoint, `2 N C_in prod(in_spatial) (C_out / groups) prod(kernel)`; dense
//!   `2 N in out`. Bias additions are not counted (as in the reference MAC counts). Pooling,
//!   normalisation, and global pooling count one FLOP per *input* element; element-wise ops
//!   (activations, add, scale, dropout, losses) one per *output* element (`(n - 1)` per
//!   element for an n-input add). Concat, flatten, tile and upsample move data only.
//! - **Backward** is computed per op, not as 3x forward [000, Eq. 1]: a matrix op's data
//!   gradient and weight gradient each cost its forward FLOPs; batch norm and channel affine
//!   have a weight gradient equal to their forward cost; element-wise ops, pooling and losses
//!   have a data gradient equal to their forward cost; tile and upsample sum their gradient
//!   back (one FLOP per output element). Gradients are only computed where they are needed,
//!   as frameworks do: a layer needs a data gradient only if one of its inputs depends on a
//!   trainable parameter, so the layer that consumes the input sample computes no data
//!   gradient, and nothing upstream of the first trainable layer runs backward at all.
//! - **HBM bytes, lower bound** [004, §V-A]: every layer reads its inputs and writes its
//!   output (no caching of activations between layers); weights are read once per pass
//!   (parameters stay in cache between layers). Backward reads the output gradient, the
//!   tensors saved for backward and (for a data gradient) the weights, and writes the input
//!   gradients and the weight gradient. Flatten is a view and moves nothing; dropout also
//!   writes (forward) and reads (backward) a one-byte mask per element.
//! - **Activations kept for backward** (docs/ARCHITECTURE.md "Memory per device"): conv, transposed
//!   conv and dense keep their input; ReLU and tanh their output; LeakyReLU, batch norm,
//!   channel affine, max pooling and MSE their input; dropout a one-byte mask; softmax
//!   cross-entropy its probabilities; add, scale, concat, flatten, tile, upsample, average
//!   pooling keep nothing. A tensor kept by several layers is stored once: each layer's
//!   `activation_bytes` counts only tensors no earlier layer already kept, so the column sums
//!   to the total. The input sample is not counted here (it is the input buffer). Batch-norm
//!   statistics are per channel, not per sample, and are counted as buffers in
//!   [`crate::memory`].

use serde::Serialize;
use smallvec::SmallVec;

use crate::graph::{Graph, Layer, NodeId, Op, Shape};
use crate::precision::Precision;
use crate::units::{Bytes, Flops};

/// Cost of one layer for one training step at a given batch and precision. Names and
/// shapes are borrowed from the graph.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerCost<'g> {
    /// Layer name.
    pub name: &'g str,
    /// Op kind (`conv`, `dense`, `relu`, ...).
    pub op: &'static str,
    /// Names of the layers this one reads.
    pub inputs: SmallVec<[&'g str; 2]>,
    /// Output shape of one sample, channels first.
    pub output_shape: &'g [usize],
    /// Trainable parameters.
    pub params: u64,
    /// Forward multiply-accumulates of matrix ops (conv, transposed conv, dense), for the
    /// whole batch; zero for other ops.
    pub macs_fwd: u64,
    /// Forward FLOPs for the batch.
    pub flops_fwd: Flops,
    /// Backward FLOPs for the data (input) gradient.
    pub flops_bwd_data: Flops,
    /// Backward FLOPs for the weight gradient.
    pub flops_bwd_weight: Flops,
    /// Backward FLOPs, data plus weight gradient.
    pub flops_bwd: Flops,
    /// HBM bytes moved forward (lower bound).
    pub hbm_bytes_fwd: Bytes,
    /// HBM bytes moved backward (lower bound).
    pub hbm_bytes_bwd: Bytes,
    /// (forward + backward FLOPs) / (forward + backward bytes); `None` when no bytes move.
    pub arithmetic_intensity: Option<f64>,
    /// Bytes of activations this layer keeps for backward that no earlier layer keeps.
    pub activation_bytes: Bytes,
    /// Whether this layer runs on matrix units (GEMM-like) rather than vector units.
    #[serde(skip)]
    pub matrix: bool,
}

/// Cost of a whole training step of a graph, with the per-layer rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GraphCost<'g> {
    /// Workload name.
    pub workload: &'g str,
    /// Per-device batch size.
    pub batch: u64,
    /// Precision.
    pub precision: Precision,
    /// Input sample shape, channels first.
    pub input_shape: &'g [usize],
    /// Trainable parameters.
    pub params: u64,
    /// Forward multiply-accumulates of matrix ops for the batch (128 bits: each layer's
    /// count fits 64 bits, their sum over a deep graph at a large batch may not).
    pub macs_fwd: u128,
    /// Forward FLOPs.
    pub flops_fwd: Flops,
    /// Backward FLOPs (data and weight gradients).
    pub flops_bwd: Flops,
    /// Forward plus backward FLOPs of one training step.
    pub flops_train: Flops,
    /// HBM bytes moved forward.
    pub hbm_bytes_fwd: Bytes,
    /// HBM bytes moved backward.
    pub hbm_bytes_bwd: Bytes,
    /// HBM bytes of one training step.
    pub hbm_bytes_train: Bytes,
    /// flops_train / hbm_bytes_train.
    pub arithmetic_intensity: f64,
    /// Activation bytes kept for backward (each tensor once).
    pub activation_bytes: Bytes,
    /// One row per layer, input first.
    pub layers: Vec<LayerCost<'g>>,
}

/// What a layer's backward pass reads besides the output gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Saved {
    /// Input `k` of the layer.
    Input(usize),
    /// The layer's own output.
    Output,
    /// A private tensor of the input's element count, in compute precision (softmax
    /// probabilities).
    PrivateLikeInput,
    /// A one-byte-per-element mask of the output's size.
    Mask,
}

/// Largest per-device batch size (2^20); see [`crate::graph::MAX_MACS`].
pub const MAX_BATCH: u64 = 1 << 20;

/// Per-sample element counts and exact integer FLOP counts of one layer, independent of
/// batch and precision.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) params: u64,
    pub(crate) macs: u64,
    pub(crate) flops_fwd: u64,
    /// Data-gradient FLOPs if a data gradient is computed.
    pub(crate) flops_bwd_data: u64,
    /// Weight-gradient FLOPs.
    pub(crate) flops_bwd_weight: u64,
}

/// Exact per-sample counts of one layer.
pub(crate) fn counts(graph: &Graph, layer: &Layer) -> Counts {
    let in_shape = |k: usize| &graph.layers()[layer.inputs[k]].output;
    let in_elems: u64 = layer
        .inputs
        .iter()
        .map(|&i| graph.layers()[i].output.elements())
        .sum();
    let out = &layer.output;
    let out_elems = out.elements();
    match &layer.op {
        Op::Input => Counts::default(),
        Op::Conv(c) | Op::ConvTranspose(c) => {
            let (weights, macs) = matrix_size(&layer.op, in_shape(0), out);
            matrix_counts(
                weights + if c.bias { c.out_channels as u64 } else { 0 },
                macs,
            )
        }
        Op::Dense { out_features, bias } => {
            let (weights, macs) = matrix_size(&layer.op, in_shape(0), out);
            matrix_counts(weights + if *bias { *out_features as u64 } else { 0 }, macs)
        }
        Op::BatchNorm | Op::ChannelAffine => Counts {
            params: 2 * in_shape(0).channels() as u64,
            macs: 0,
            flops_fwd: in_elems,
            flops_bwd_data: in_elems,
            flops_bwd_weight: in_elems,
        },
        Op::MaxPool(_) | Op::AvgPool(_) | Op::GlobalAvgPool => vector_counts(in_elems),
        Op::Relu | Op::LeakyRelu { .. } | Op::Tanh | Op::Scale { .. } | Op::Dropout { .. } => {
            vector_counts(out_elems)
        }
        Op::SoftmaxCrossEntropy | Op::MseLoss => vector_counts(in_elems),
        Op::Add => Counts {
            flops_fwd: (layer.inputs.len() as u64 - 1) * out_elems,
            ..Counts::default()
        },
        Op::Tile { .. } | Op::Upsample { .. } => Counts {
            flops_bwd_data: out_elems,
            ..Counts::default()
        },
        Op::Concat | Op::Flatten => Counts::default(),
    }
}

/// Weights and MACs of a matrix op; [`Graph::push`] has checked they fit.
fn matrix_size(op: &Op, input: &Shape, output: &Shape) -> (u64, u64) {
    op.matrix_size(input.dims(), output.dims())
        .unwrap_or((u64::MAX, u64::MAX))
}

fn matrix_counts(params: u64, macs: u64) -> Counts {
    Counts {
        params,
        macs,
        flops_fwd: 2 * macs,
        flops_bwd_data: 2 * macs,
        flops_bwd_weight: 2 * macs,
    }
}

fn vector_counts(flops: u64) -> Counts {
    Counts {
        params: 0,
        macs: 0,
        flops_fwd: flops,
        flops_bwd_data: flops,
        flops_bwd_weight: 0,
    }
}

/// What an op keeps from its forward pass for its backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keeps {
    /// Its first input.
    pub input: bool,
    /// Its output.
    pub output: bool,
    /// A one-byte mask per output element.
    pub mask: bool,
    /// A private tensor the size of its input (softmax probabilities).
    pub private: bool,
}

/// What `op` keeps for backward (the rules in this module's documentation).
pub fn keeps(op: &Op) -> Keeps {
    let s = saved(op);
    Keeps {
        input: s.contains(&Saved::Input(0)),
        output: s.contains(&Saved::Output),
        mask: s.contains(&Saved::Mask),
        private: s.contains(&Saved::PrivateLikeInput),
    }
}

/// Whether `graph`'s node `i` output depends on a trainable parameter, for every node: the
/// nodes whose gradient a training step computes.
pub fn requires_grad(graph: &Graph) -> Vec<bool> {
    let layers = graph.layers();
    let mut needs = vec![false; layers.len()];
    for (i, layer) in layers.iter().enumerate() {
        needs[i] = counts(graph, layer).params > 0 || layer.inputs.iter().any(|&j| needs[j]);
    }
    needs
}

/// What the backward pass of `op` reads besides the output gradient and weights.
fn saved(op: &Op) -> &'static [Saved] {
    match op {
        Op::Conv(_)
        | Op::ConvTranspose(_)
        | Op::Dense { .. }
        | Op::LeakyRelu { .. }
        | Op::BatchNorm
        | Op::ChannelAffine
        | Op::MaxPool(_)
        | Op::MseLoss => &[Saved::Input(0)],
        Op::Relu | Op::Tanh => &[Saved::Output],
        Op::Dropout { .. } => &[Saved::Mask],
        Op::SoftmaxCrossEntropy => &[Saved::PrivateLikeInput],
        Op::Input
        | Op::AvgPool(_)
        | Op::GlobalAvgPool
        | Op::Add
        | Op::Scale { .. }
        | Op::Concat
        | Op::Tile { .. }
        | Op::Upsample { .. }
        | Op::Flatten => &[],
    }
}

/// Costs every layer of `graph` for one training step at `batch` and `precision`.
///
/// `batch` must be at least 1; up to [`MAX_BATCH`] every count is exact (the CLI checks
/// both where it parses the batch).
pub fn cost(graph: &Graph, batch: u64, precision: Precision) -> GraphCost<'_> {
    let layers = graph.layers();
    // Per node: does its output depend on a trainable parameter (so its gradient must be
    // computed)? Filled in topological order as the layers are visited.
    let mut needs = vec![false; layers.len()];
    let act = Bytes::from_count(precision.compute_bytes());
    let b = batch as f64;
    // Elements of one sample of node `i`'s output, as f64 for byte arithmetic.
    let elems = |i: NodeId| layers[i].output.elements() as f64;
    let mut kept = vec![false; layers.len()];
    kept[0] = true; // the input sample lives in the input buffer
    let mut rows = Vec::with_capacity(layers.len());

    for (i, layer) in layers.iter().enumerate() {
        let c = counts(graph, layer);
        needs[i] = c.params > 0 || layer.inputs.iter().any(|&j| needs[j]);
        let view = matches!(layer.op, Op::Input | Op::Flatten);
        let data_grad = layer.inputs.iter().any(|&j| needs[j]);
        let backward = needs[i] && !view;
        let weights = Bytes::from_count(c.params * precision.compute_bytes());
        let in_elems: f64 = layer.inputs.iter().map(|&j| elems(j)).sum();
        let out_elems = elems(i);
        let mask = matches!(layer.op, Op::Dropout { .. });
        let mask_bytes = if mask {
            Bytes::new(out_elems * b)
        } else {
            Bytes::ZERO
        };

        let hbm_fwd = if view {
            Bytes::ZERO
        } else {
            act * ((in_elems + out_elems) * b) + weights + mask_bytes
        };

        let mut hbm_bwd = Bytes::ZERO;
        let mut activation = Bytes::ZERO;
        if backward {
            hbm_bwd += act * (out_elems * b); // output gradient
            for s in saved(&layer.op) {
                let (bytes, node) = match *s {
                    Saved::Input(k) => (act * (elems(layer.inputs[k]) * b), Some(layer.inputs[k])),
                    Saved::Output => (act * (out_elems * b), Some(i)),
                    Saved::PrivateLikeInput => (act * (in_elems * b), None),
                    Saved::Mask => (mask_bytes, None),
                };
                hbm_bwd += bytes;
                match node {
                    Some(n) if kept[n] => {}
                    Some(n) => {
                        kept[n] = true;
                        activation += bytes;
                    }
                    None => activation += bytes,
                }
            }
            if data_grad {
                hbm_bwd += weights;
                let grads: f64 = layer
                    .inputs
                    .iter()
                    .filter(|&&j| needs[j])
                    .map(|&j| elems(j))
                    .sum();
                hbm_bwd += act * (grads * b);
            }
            hbm_bwd += weights; // weight gradient, in compute precision (zero without params)
        }

        let flops_fwd = Flops::from_count(c.flops_fwd) * b;
        let flops_bwd_data = if backward && data_grad {
            Flops::from_count(c.flops_bwd_data) * b
        } else {
            Flops::ZERO
        };
        let flops_bwd_weight = if backward {
            Flops::from_count(c.flops_bwd_weight) * b
        } else {
            Flops::ZERO
        };
        let flops_bwd = flops_bwd_data + flops_bwd_weight;
        let bytes = hbm_fwd + hbm_bwd;
        rows.push(LayerCost {
            name: &layer.name,
            op: layer.op.kind(),
            inputs: layer
                .inputs
                .iter()
                .map(|&j| layers[j].name.as_str())
                .collect(),
            output_shape: layer.output.dims(),
            params: c.params,
            macs_fwd: c.macs.saturating_mul(batch),
            flops_fwd,
            flops_bwd_data,
            flops_bwd_weight,
            flops_bwd,
            hbm_bytes_fwd: hbm_fwd,
            hbm_bytes_bwd: hbm_bwd,
            arithmetic_intensity: (bytes.value() > 0.0).then(|| (flops_fwd + flops_bwd) / bytes),
            activation_bytes: activation,
            matrix: layer.op.is_matrix(),
        });
    }

    let sum_flops = |f: fn(&LayerCost<'_>) -> Flops| rows.iter().map(f).sum::<Flops>();
    let sum_bytes = |f: fn(&LayerCost<'_>) -> Bytes| rows.iter().map(f).sum::<Bytes>();
    let flops_fwd = sum_flops(|r| r.flops_fwd);
    let flops_bwd = sum_flops(|r| r.flops_bwd);
    let hbm_fwd = sum_bytes(|r| r.hbm_bytes_fwd);
    let hbm_bwd = sum_bytes(|r| r.hbm_bytes_bwd);
    GraphCost {
        workload: graph.name(),
        batch,
        precision,
        input_shape: graph.input_shape().dims(),
        params: rows.iter().map(|r| r.params).sum(),
        macs_fwd: rows.iter().map(|r| u128::from(r.macs_fwd)).sum(),
        flops_fwd,
        flops_bwd,
        flops_train: flops_fwd + flops_bwd,
        hbm_bytes_fwd: hbm_fwd,
        hbm_bytes_bwd: hbm_bwd,
        hbm_bytes_train: hbm_fwd + hbm_bwd,
        arithmetic_intensity: (flops_fwd + flops_bwd) / (hbm_fwd + hbm_bwd),
        activation_bytes: sum_bytes(|r| r.activation_bytes),
        layers: rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Conv;

    /// input -> conv -> relu -> conv -> relu -> flatten -> dense -> loss
    fn small() -> Graph {
        let mut g = Graph::new("small", vec![3, 8, 8]).unwrap();
        g.then("c1", Op::conv(Conv::new(4, &[3, 3]).pad(1)))
            .unwrap();
        g.then("r1", Op::Relu).unwrap();
        g.then("c2", Op::conv(Conv::new(4, &[3, 3]).pad(1).bias(false)))
            .unwrap();
        g.then("r2", Op::Relu).unwrap();
        g.then("flat", Op::Flatten).unwrap();
        g.then(
            "fc",
            Op::Dense {
                out_features: 10,
                bias: true,
            },
        )
        .unwrap();
        g.then("loss", Op::SoftmaxCrossEntropy).unwrap();
        g
    }

    fn row<'a, 'g>(c: &'a GraphCost<'g>, name: &str) -> &'a LayerCost<'g> {
        c.layers.iter().find(|r| r.name == name).unwrap()
    }

    #[test]
    fn conv_flops_follow_the_formula() {
        let g = small();
        let c = cost(&g, 2, Precision::Fp32);
        let c1 = row(&c, "c1");
        // 2 N C_out prod(out) (C_in / g) prod(k) = 2 * 2 * 4 * 64 * 3 * 9
        assert_eq!(c1.flops_fwd.value(), f64::from(2 * 2 * 4 * 64 * 3 * 9));
        assert_eq!(c1.params, 4 * 3 * 9 + 4);
        assert_eq!(c1.macs_fwd, 2 * 4 * 64 * 3 * 9);
    }

    #[test]
    fn first_layer_computes_no_data_gradient() {
        let g = small();
        let c = cost(&g, 1, Precision::Fp32);
        let c1 = row(&c, "c1");
        assert_eq!(c1.flops_bwd_data, Flops::ZERO);
        assert_eq!(c1.flops_bwd_weight, c1.flops_fwd);
        let c2 = row(&c, "c2");
        assert_eq!(c2.flops_bwd.value(), 2.0 * c2.flops_fwd.value());
    }

    #[test]
    fn flatten_is_a_view() {
        let g = small();
        let c = cost(&g, 4, Precision::Fp32);
        let f = row(&c, "flat");
        assert_eq!(f.hbm_bytes_fwd, Bytes::ZERO);
        assert_eq!(f.hbm_bytes_bwd, Bytes::ZERO);
        assert_eq!(f.arithmetic_intensity, None);
    }

    #[test]
    fn shared_tensors_are_kept_once() {
        // r1's output is kept by r1 (ReLU keeps its output) and by c2 (conv keeps its input).
        let g = small();
        let c = cost(&g, 1, Precision::Fp32);
        assert_eq!(row(&c, "r1").activation_bytes.value(), 4.0 * 256.0);
        assert_eq!(row(&c, "c2").activation_bytes, Bytes::ZERO);
        // c1 keeps the input sample, which is the input buffer, not an activation.
        assert_eq!(row(&c, "c1").activation_bytes, Bytes::ZERO);
        let total: f64 = c.layers.iter().map(|r| r.activation_bytes.value()).sum();
        assert_eq!(c.activation_bytes.value(), total);
    }

    #[test]
    fn relu_on_the_input_runs_no_backward() {
        let mut g = Graph::new("t", vec![3, 4, 4]).unwrap();
        g.then("r", Op::Relu).unwrap();
        g.then("c", Op::conv(Conv::new(2, &[1, 1]))).unwrap();
        let c = cost(&g, 1, Precision::Fp32);
        let r = row(&c, "r");
        assert_eq!(r.flops_bwd, Flops::ZERO);
        assert_eq!(r.hbm_bytes_bwd, Bytes::ZERO);
        assert_eq!(r.activation_bytes, Bytes::ZERO);
    }

    #[test]
    fn hbm_bytes_follow_the_lower_bound_rules() {
        let g = small();
        let c = cost(&g, 1, Precision::Fp32);
        let r2 = row(&c, "r2");
        // forward: read 256 + write 256 elements of 4 bytes.
        assert_eq!(r2.hbm_bytes_fwd.value(), 4.0 * 512.0);
        // backward: read out-grad 256 + saved output 256, write in-grad 256.
        assert_eq!(r2.hbm_bytes_bwd.value(), 4.0 * 768.0);
        let c2 = row(&c, "c2");
        let w = 4.0 * 144.0;
        assert_eq!(c2.hbm_bytes_fwd.value(), 4.0 * 512.0 + w);
        // out-grad + saved input + weights + in-grad + weight-grad
        assert_eq!(c2.hbm_bytes_bwd.value(), 4.0 * 768.0 + 2.0 * w);
    }

    #[test]
    fn mixed_precision_halves_activation_traffic() {
        let g = small();
        let fp32 = cost(&g, 8, Precision::Fp32);
        let g = small();
        let amp = cost(&g, 8, Precision::AmpFp16);
        assert_eq!(fp32.flops_train, amp.flops_train);
        assert!((amp.activation_bytes.value() * 2.0 - fp32.activation_bytes.value()).abs() < 1.0);
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use crate::graph::arbitrary;
        use crate::workloads::{self, BuildOptions};

        fn close(a: f64, b: f64) -> bool {
            (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
        }

        /// Backward of a matrix op is data gradient + weight gradient, each its forward
        /// cost, except that no data gradient is computed where no input needs one (the
        /// layer that consumes the input sample).
        fn check_matrix_backward(g: &Graph, c: &GraphCost<'_>) -> Result<(), TestCaseError> {
            let layers = g.layers();
            let mut needs = vec![false; layers.len()];
            for (i, (layer, row)) in layers.iter().zip(&c.layers).enumerate() {
                needs[i] = row.params > 0 || layer.inputs.iter().any(|&j| needs[j]);
                if !layer.op.is_matrix() {
                    continue;
                }
                let data = layer.inputs.iter().any(|&j| needs[j]);
                let expected = if data { 2.0 } else { 1.0 };
                prop_assert!(
                    close(row.flops_bwd.value(), expected * row.flops_fwd.value()),
                    "{}: bwd {} fwd {}",
                    row.name,
                    row.flops_bwd,
                    row.flops_fwd
                );
                prop_assert_eq!(data, row.flops_bwd_data.value() > 0.0);
                if layer.inputs[0] == 0 {
                    prop_assert!(!data, "{} reads the input sample", row.name);
                }
            }
            Ok(())
        }

        proptest! {
            #[test]
            fn flops_and_activations_are_linear_in_batch(g in arbitrary::graph(), b in 1u64..512) {
                let one = cost(&g, 1, Precision::AmpFp16);
                let many = cost(&g, b, Precision::AmpFp16);
                let n = b as f64;
                prop_assert!(close(many.flops_train.value(), n * one.flops_train.value()));
                prop_assert!(close(many.activation_bytes.value(), n * one.activation_bytes.value()));
                prop_assert_eq!(many.macs_fwd, u128::from(b) * one.macs_fwd);
            }

            #[test]
            fn matrix_backward_is_twice_forward_except_on_the_input(g in arbitrary::graph()) {
                let c = cost(&g, 4, Precision::Fp32);
                check_matrix_backward(&g, &c)?;
            }

            #[test]
            fn builtin_workloads_keep_the_same_laws(
                name in prop::sample::select(vec!["cosmoflow", "cosmoflow-v07", "deepcam", "resnet50"]),
                b in 1u64..300,
            ) {
                let g = workloads::build(name, &BuildOptions::default()).unwrap();
                let one = cost(&g, 1, Precision::Fp32);
                let many = cost(&g, b, Precision::Fp32);
                let n = b as f64;
                prop_assert!(close(many.flops_train.value(), n * one.flops_train.value()));
                prop_assert!(close(many.activation_bytes.value(), n * one.activation_bytes.value()));
                check_matrix_backward(&g, &many)?;
                // Training costs more than twice the forward pass (backward of matrix ops
                // alone is about 2x), but at most 3x (every op's backward is at most 2x).
                let ratio = many.flops_train.value() / many.flops_fwd.value();
                prop_assert!((2.5..=3.0).contains(&ratio), "{name}: {ratio}");
            }
        }
    }
}
