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

use crate::graph::{
    Attention, AttentionShape, Graph, Layer, Moe, MoeShape, NodeId, Op, ScoreMask, Shape,
};
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
    /// Every input of the layer.
    Inputs,
    /// The layer's own output.
    Output,
    /// A private tensor of the input's element count, in compute precision (softmax
    /// probabilities).
    PrivateLikeInput,
    /// A one-byte-per-element mask of the output's size.
    Mask,
    /// Attention's weights, `heads x S x S_kv` in compute precision.
    Scores,
    /// A one-byte mask per attention weight (dropout on the weights).
    ScoresMask,
    /// Grouped-query attention's keys and values copied to every head (`2 x H x S_kv` in
    /// compute precision), which its products save in place of the layer's inputs.
    RepeatedKv,
    /// FP32 statistics per row ([`stats_elements`]): a norm's mean and inverse deviation
    /// per position, fused attention's log-sum-exp per head and query.
    Stats,
    /// What a mixture-of-experts layer's inner kernels keep ([`moe_saved_bytes`]).
    Experts,
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
    /// Weights the layer reads and whose gradient it adds to but does not own (a tied
    /// head's).
    pub(crate) shared: u64,
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
            let (weights, macs) = matrix_size(graph, layer);
            matrix_counts(
                weights + if c.bias { c.out_channels as u64 } else { 0 },
                macs,
            )
        }
        Op::Dense { out_features, bias } => {
            let (weights, macs) = matrix_size(graph, layer);
            matrix_counts(weights + if *bias { *out_features as u64 } else { 0 }, macs)
        }
        Op::ChannelScale => Counts {
            params: in_shape(0).channels() as u64,
            flops_fwd: in_elems,
            flops_bwd_data: in_elems,
            flops_bwd_weight: in_elems,
            ..Counts::default()
        },
        Op::BatchNorm | Op::ChannelAffine => Counts {
            params: 2 * in_shape(0).channels() as u64,
            flops_fwd: in_elems,
            flops_bwd_data: in_elems,
            flops_bwd_weight: in_elems,
            ..Counts::default()
        },
        Op::MaxPool(_) | Op::AvgPool(_) | Op::GlobalAvgPool => vector_counts(in_elems),
        Op::Relu
        | Op::LeakyRelu { .. }
        | Op::Tanh
        | Op::Scale { .. }
        | Op::Shift { .. }
        | Op::Pow { .. }
        | Op::Dropout { .. }
        | Op::Sigmoid
        | Op::Clip { .. }
        | Op::HardSwish
        | Op::HardSigmoid { .. } => vector_counts(out_elems),
        // One product forward; backward one per input (each input's gradient is the other
        // input times the output gradient).
        Op::Mul => Counts {
            flops_fwd: out_elems,
            flops_bwd_data: 2 * out_elems,
            ..Counts::default()
        },
        Op::SoftmaxCrossEntropy | Op::MseLoss => vector_counts(in_elems),
        Op::Add => Counts {
            flops_fwd: (layer.inputs.len() as u64 - 1) * out_elems,
            ..Counts::default()
        },
        Op::Tile { .. } | Op::Upsample { .. } => Counts {
            flops_bwd_data: out_elems,
            ..Counts::default()
        },
        Op::Concat
        | Op::Flatten
        | Op::FlattenPositions
        | Op::Narrow { .. }
        | Op::ChannelShuffle { .. }
        | Op::PatchMerge => Counts::default(),
        // A copy forward; backward the tokens' gradient summed over the batch.
        Op::PrependTokens { tokens } => {
            let params = (*tokens * in_shape(0).channels()) as u64;
            Counts {
                params,
                flops_bwd_weight: params,
                ..Counts::default()
            }
        }
        // One sum forward; backward the output's gradient is the input's, and summed
        // over the batch the table's.
        Op::PositionEmbedding => Counts {
            params: in_elems,
            flops_fwd: in_elems,
            flops_bwd_weight: in_elems,
            ..Counts::default()
        },
        Op::Linear {
            out_features,
            bias,
            tied,
        } => linear_counts(graph, layer, *out_features, *bias, *tied),
        // Both inputs' gradients; `cost` keeps those an input needs.
        Op::MatMul => {
            let (_, macs) = matrix_size(graph, layer);
            Counts {
                macs,
                flops_fwd: 2 * macs,
                flops_bwd_data: 4 * macs,
                ..Counts::default()
            }
        }
        // A lookup: no arithmetic; backward adds each looked-up row's gradient into the
        // table's.
        Op::Embedding {
            num_embeddings,
            embedding_dim,
        } => Counts {
            params: (*num_embeddings as u64) * (*embedding_dim as u64),
            flops_bwd_weight: out_elems,
            ..Counts::default()
        },
        Op::LayerNorm | Op::RmsNorm => Counts {
            params: norm_params(&layer.op, in_shape(0)),
            flops_fwd: in_elems,
            flops_bwd_data: in_elems,
            flops_bwd_weight: in_elems,
            ..Counts::default()
        },
        Op::Softmax | Op::Gelu | Op::Silu => vector_counts(out_elems),
        // `x cos + rotate_half(x) sin`: two products and a sum per element each way.
        Op::Rotary { .. } => vector_counts(3 * out_elems),
        Op::Attention(a) => attention_counts(a, &attention_shape(graph, layer, a)),
        // Backward scatters the gradient rows back: one add per row element.
        Op::Gather { .. } => Counts {
            flops_bwd_data: out_elems,
            ..Counts::default()
        },
        // One add per input element; backward gathers the gradient rows.
        Op::ScatterAdd { .. } | Op::SegmentSum { .. } => Counts {
            flops_fwd: in_elems,
            ..Counts::default()
        },
        Op::Moe(m) => moe_counts(graph, layer, m),
    }
}

/// A linear layer's counts: its weights (shared, not owned, where tied to another layer's)
/// and its bias.
fn linear_counts(
    graph: &Graph,
    layer: &Layer,
    out_features: usize,
    bias: bool,
    tied: bool,
) -> Counts {
    let (weights, macs) = matrix_size(graph, layer);
    let bias = if bias { out_features as u64 } else { 0 };
    if tied {
        Counts {
            shared: weights,
            ..matrix_counts(bias, macs)
        }
    } else {
        matrix_counts(weights + bias, macs)
    }
}

/// A mixture of experts' counts: the router's and the experts' products, and its
/// element-wise kernels' FLOPs.
fn moe_counts(graph: &Graph, layer: &Layer, m: &crate::graph::Moe) -> Counts {
    let (weights, macs) = matrix_size(graph, layer);
    let s = MoeShape::of(m, graph.layers()[layer.inputs[0]].output.dims());
    // Its element-wise kernels' FLOPs are whole numbers of elements.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let vector = |backward| {
        moe_passes(m, &s, 2.0, backward)
            .iter()
            .map(|p| p.flops)
            .sum::<f64>() as u64
    };
    Counts {
        params: weights,
        macs,
        flops_fwd: 2 * macs + vector(false),
        flops_bwd_data: 2 * macs + vector(true),
        flops_bwd_weight: 2 * macs,
        shared: 0,
    }
}

/// One element-wise kernel of a mixture-of-experts layer, per sample: the op kind it is
/// timed as ([`crate::kernels::vector_kernel`]), its FLOPs and the bytes it reads and
/// writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoePass {
    /// The op kind it is timed as.
    pub op: &'static str,
    /// FLOPs.
    pub flops: f64,
    /// Bytes read and written.
    pub bytes: f64,
}

/// The element-wise kernels of mixture-of-experts layer `m` of shape `s` at `act` bytes per
/// element, forward or backward, in order, as Hugging Face's `MixtralSparseMoeBlock` runs
/// them in eager PyTorch (`T` slots, `S` tokens, `E` experts, `k` of them a token, `H`
/// channels, `F` an expert's inner size):
/// - forward: the router's softmax in FP32 (`S E`), the top-k choice and the weights'
///   renormalisation (a row op timed as a softmax: `S E`, writing `S k` FP32 weights and
///   8-byte indices), the
///   tokens gathered to their experts' slots (`gather`: `T H` read and written), the
///   activation (`T F`), the gate's product (`mul`, gated experts), the routing weights'
///   product (`mul`: `T H`) and the sum into each token's output (`scatter-add`: `T H`);
/// - backward: the output gradient's rows gathered to the slots, the routing weights'
///   product's two gradients (`2 T H`), the gate's (`2 T F`) and the activation's (`T F`),
///   the two projections' input gradients summed (`add`, gated), the slots' gradients summed
///   into the tokens' (`scatter-add`), and the top-k and softmax gradients to the router
///   (`S E` each).
///
/// The layer's own input read and output write, and its GEMMs' operands, are counted
/// elsewhere ([`moe_gemm_bytes`]).
pub fn moe_passes(m: &Moe, s: &MoeShape, act: f64, backward: bool) -> Vec<MoePass> {
    const FP32: f64 = 4.0;
    const INDEX: f64 = 8.0;
    let pass = |op, flops, bytes| MoePass { op, flops, bytes };
    let (t, seq, h) = (s.slots as f64, s.seq as f64, s.hidden as f64);
    let (e, k, f) = (m.experts as f64, m.top_k as f64, m.ffn as f64);
    let act_kind = m.activation.name();
    let mut out = Vec::new();
    if backward {
        out.push(pass("gather", 0.0, 2.0 * act * t * h + INDEX * t));
        out.push(pass("mul", 2.0 * t * h, act * (3.0 * t * h + 2.0 * t)));
        if m.gated {
            out.push(pass("mul", 2.0 * t * f, 5.0 * act * t * f));
        }
        out.push(pass(act_kind, t * f, 3.0 * act * t * f));
        if m.gated {
            out.push(pass("add", t * h, 3.0 * act * t * h));
        }
        out.push(pass("scatter-add", t * h, act * t * h + INDEX * t));
        out.push(pass(
            "softmax",
            seq * e,
            FP32 * (seq * e + seq * k) + INDEX * seq * k,
        ));
        out.push(pass("softmax", seq * e, 3.0 * FP32 * seq * e));
    } else {
        out.push(pass("softmax", seq * e, 2.0 * FP32 * seq * e));
        out.push(pass(
            "softmax",
            seq * e,
            FP32 * seq * e + (FP32 + INDEX) * seq * k,
        ));
        out.push(pass("gather", 0.0, 2.0 * act * t * h + INDEX * t));
        out.push(pass(act_kind, t * f, 2.0 * act * t * f));
        if m.gated {
            out.push(pass("mul", t * f, 3.0 * act * t * f));
        }
        out.push(pass("mul", t * h, act * (2.0 * t * h + t)));
        out.push(pass("scatter-add", t * h, act * t * h + INDEX * t));
    }
    out
}

/// Bytes per sample a mixture-of-experts layer's GEMMs move beyond the layer's input and
/// output and its weights, forward and backward: the router writes its logits (`S E`);
/// each projection reads its `T x H` or `T x F` operand and writes the other; backward,
/// each projection's data gradient reads its output's gradient and writes its input's, and
/// its weight gradient reads both, and the router's gradients read the logits' gradient
/// (twice) and the tokens (once; the input gradient's write is the layer's own).
pub fn moe_gemm_bytes(m: &Moe, s: &MoeShape, act: f64) -> (f64, f64) {
    let (t, seq, h) = (s.slots as f64, s.seq as f64, s.hidden as f64);
    let (e, f, p) = (m.experts as f64, m.ffn as f64, s.projections as f64);
    let operands = p * (t * h + t * f);
    (
        act * (seq * e + operands),
        act * (2.0 * operands + 2.0 * seq * e + seq * h),
    )
}

/// Bytes per sample a mixture-of-experts layer keeps for backward beyond its input: the
/// tokens gathered to the slots, each projection's output and the activation's (gated:
/// `w1`'s, `w3`'s, the activation's and the gate's product, `4 T F`; plain `2 T F`), the
/// experts' outputs before their weights (`T H`) and the weights (`T`), in compute
/// precision; the router's probabilities (FP32, `S E`) and the chosen experts' indices
/// (8 bytes, `S k`).
pub fn moe_saved_bytes(m: &Moe, s: &MoeShape, act: f64) -> f64 {
    let (t, seq, h) = (s.slots as f64, s.seq as f64, s.hidden as f64);
    let (e, k, f) = (m.experts as f64, m.top_k as f64, m.ffn as f64);
    let inner = if m.gated { 4.0 } else { 2.0 };
    act * (2.0 * t * h + inner * t * f + t) + 4.0 * seq * e + 8.0 * seq * k
}

/// Trainable parameters of a norm over `input`'s channels: a scale and a shift per
/// channel (layer norm), a scale (RMS norm).
fn norm_params(op: &Op, input: &Shape) -> u64 {
    let c = input.channels() as u64;
    if matches!(op, Op::RmsNorm) { c } else { 2 * c }
}

/// The parameter tensors a layer of `op` owns (weights and bias; a norm's scale and
/// shift): each is a gradient to accumulate and a tensor for the optimizer to update.
pub fn param_tensors(op: &Op) -> u64 {
    let bias = |b: bool| u64::from(b);
    match op {
        Op::Conv(c) | Op::ConvTranspose(c) => 1 + bias(c.bias),
        Op::Dense { bias: b, .. } => 1 + bias(*b),
        Op::Linear { bias: b, tied, .. } => u64::from(!*tied) + bias(*b),
        Op::Attention(a) if a.window > 0 => 1,
        Op::Embedding { .. }
        | Op::RmsNorm
        | Op::ChannelScale
        | Op::PrependTokens { .. }
        | Op::PositionEmbedding => 1,
        // The router's weights and each local expert's projections.
        Op::Moe(m) => 1 + m.local as u64 * if m.gated { 3 } else { 2 },
        Op::BatchNorm | Op::ChannelAffine | Op::LayerNorm => 2,
        _ => 0,
    }
}

/// The sizes attention layer `layer` works on.
fn attention_shape(graph: &Graph, layer: &Layer, a: &Attention) -> AttentionShape {
    let inputs: SmallVec<[&[usize]; 3]> = layer
        .inputs
        .iter()
        .map(|&i| graph.layers()[i].output.dims())
        .collect();
    // Checked when the layer was added.
    AttentionShape::of(a, &inputs).unwrap_or(AttentionShape {
        hidden: 0,
        kv_hidden: 0,
        seq: 0,
        seq_kv: 0,
        heads: 1,
        pairs: 0,
        scores: 0,
    })
}

/// One element-wise kernel of unfused attention over its weights (`heads x S x S_kv` per
/// sample): the op it is timed as ([`crate::kernels::vector_kernel`]), and the arrays of
/// the weights' size (in compute precision) and one-byte arrays (masks, comparisons) it
/// reads and writes. Each does one FLOP per weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScorePass {
    /// The op kind it is timed as.
    pub op: &'static str,
    /// Arrays of the weights' size it reads and writes.
    pub arrays: f64,
    /// One-byte arrays of the weights' size it reads and writes.
    pub byte_arrays: f64,
}

/// The element-wise kernels unfused attention `a` runs over its weights, forward or
/// backward, in order, as eager PyTorch runs them:
/// - forward: the scale (unless the queries carry it), the mask ([`ScoreMask`]), the clamp,
///   softmax and dropout;
/// - backward: dropout's, softmax's (reading its output and the gradient), the clamp's (the
///   gradient of `torch.maximum` against a constant: `where(x == c, g / 2, g)`, then the
///   entries below `c` zeroed, five kernels: `eq`, the halving, `where`, `lt` and
///   `masked_fill_`; PyTorch's `derivatives.yaml`), the select mask's (an additive mask
///   passes the gradient through), and the scale's.
///
/// Fused attention runs none: its scale, mask and softmax are inside its kernel.
pub fn score_passes(a: &Attention, backward: bool) -> Vec<ScorePass> {
    let pass = |op, arrays, byte_arrays| ScorePass {
        op,
        arrays,
        byte_arrays,
    };
    let mut out = Vec::new();
    if a.fused {
        return out;
    }
    let scale = !a.scale_queries;
    let dropout = a.dropout > 0.0;
    if backward {
        if dropout {
            out.push(pass("dropout", 2.0, 1.0));
        }
        out.push(pass("softmax", 3.0, 0.0));
        if a.clamp {
            out.extend([
                pass("relu", 1.0, 1.0),
                pass("scale", 2.0, 0.0),
                pass("relu", 3.0, 1.0),
                pass("relu", 1.0, 1.0),
                pass("relu", 2.0, 1.0),
            ]);
        }
        if a.mask == ScoreMask::Select {
            out.push(pass("scale", 2.0, 0.0));
        }
        if scale {
            out.push(pass("scale", 2.0, 0.0));
        }
        // The bias table's gradient: the scores' gradients summed into its entries.
        if a.window > 0 {
            out.push(pass("add", 1.0, 0.0));
        }
    } else {
        if scale {
            out.push(pass("scale", 2.0, 0.0));
        }
        // Window attention's relative position bias, and the shifted windows' mask.
        if a.window > 0 {
            out.push(pass("add", 2.0, 0.0));
        }
        if a.shift > 0 {
            out.push(pass("add", 2.0, 0.0));
        }
        match a.mask {
            ScoreMask::None => {}
            ScoreMask::Select => out.push(pass("scale", 2.0, 0.0)),
            ScoreMask::Add => out.push(pass("add", 2.0, 0.0)),
        }
        if a.clamp {
            out.push(pass("relu", 2.0, 0.0));
        }
        out.push(pass("softmax", 2.0, 0.0));
        if dropout {
            out.push(pass("dropout", 2.0, 1.0));
        }
    }
    out
}

/// Attention's counts per sample. Products: `QK^T` and `AV`, `2 x pairs x H` FLOPs each
/// forward (pairs per head, `H` channels over all heads); backward `dV = P^T dO`,
/// `dP = dO V^T`, `dS K` and `dS^T Q`, twice forward, and fused attention also recomputes
/// `QK^T`. Vector ops: unfused, one FLOP per weight for each of [`score_passes`] and one
/// per query channel where the queries carry the scale; fused, scale and softmax on each
/// pair it computes, and dropout, each way.
fn attention_counts(a: &Attention, s: &AttentionShape) -> Counts {
    let macs = 2 * s.pairs * s.hidden;
    let (fwd, bwd) = if a.fused {
        let v = s.heads * s.pairs * (2 + u64::from(a.dropout > 0.0));
        (v, v)
    } else {
        let per = |backward| s.heads * s.scores * score_passes(a, backward).len() as u64;
        let queries = if a.scale_queries { s.hidden * s.seq } else { 0 };
        (per(false) + queries, per(true) + queries)
    };
    let recompute = if a.fused { s.pairs * s.hidden } else { 0 };
    // Unfused grouped-query attention sums the copied keys' and values' gradients back
    // into their heads.
    let regroup = if repeats_kv(a, s) {
        2 * (s.hidden - s.kv_hidden) * s.seq_kv
    } else {
        0
    };
    Counts {
        params: a.bias_params(),
        macs,
        flops_fwd: 2 * macs + fwd,
        flops_bwd_data: 4 * macs + 2 * recompute + bwd + regroup,
        ..Counts::default()
    }
}

/// Whether attention `a` of shape `s` copies its keys and values to every head before its
/// products, as eager frameworks run grouped-query attention (Hugging Face's `repeat_kv`);
/// fused kernels read the shared heads in place.
fn repeats_kv(a: &Attention, s: &AttentionShape) -> bool {
    !a.fused && s.grouped()
}

/// FP32 values per sample of a layer's [`Saved::Stats`]: two per position of a layer norm
/// (mean and inverse deviation), one of an RMS norm, one per head and query of fused
/// attention (the log-sum-exp).
fn stats_elements(graph: &Graph, layer: &Layer) -> u64 {
    let positions = |s: &Shape| s.spatial_elements();
    match &layer.op {
        Op::LayerNorm => 2 * positions(&layer.output),
        Op::RmsNorm => positions(&layer.output),
        Op::Attention(a) => {
            let s = attention_shape(graph, layer, a);
            s.heads * s.seq
        }
        _ => 0,
    }
}

/// Per-sample bytes a layer moves beyond reading its inputs and writing its output, forward
/// and backward (when backward runs), at `act` bytes per element:
/// - an embedding reads its looked-up rows (and not its whole table, [`reads_weights`]),
///   and its ids are 8-byte integers; backward reads and writes the rows of the table's
///   gradient it adds into;
/// - gather and scatter-add read an 8-byte index entry per row, segment sum an offset per
///   segment and one more;
/// - unfused attention's element-wise kernels each read and write its weights or their
///   gradient ([`score_passes`]: scale, mask, clamp, softmax, dropout and its one-byte mask,
///   and their backward), and where the queries carry the scale, that kernel reads and
///   writes the queries each way (the products' reads and writes of the weights are their
///   GEMMs' operands, and the saved weights and mask are counted as saved tensors);
/// - fused attention writes its log-sum-exp per row, and backward writes and reads
///   `rowsum(dO o O)` per row (FP32);
/// - unfused grouped-query attention copies its keys and values to every head (reading
///   each and writing the copies) and backward sums the copies' gradients back (reading
///   them and writing each head's);
/// - a rotary embedding runs as Hugging Face's `apply_rotary_pos_emb` in eager PyTorch:
///   forward `x * cos`, the negated half, the concatenation, `* sin` and the sum, ten
///   passes over the tensor (two of them the op's own read and write); backward both
///   products' gradients, the negation's, the two slices' (each a zeroed tensor with its
///   half copied in) and the sums, fourteen (two the op's own).
fn extra_bytes(graph: &Graph, layer: &Layer, act: f64) -> (f64, f64) {
    const INDEX: f64 = 8.0;
    match &layer.op {
        Op::Embedding { embedding_dim, .. } => {
            let ids = graph.layers()[layer.inputs[0]].output.elements() as f64;
            let rows = ids * *embedding_dim as f64 * act;
            (rows + ids * (INDEX - act), 2.0 * rows + ids * (INDEX - act))
        }
        Op::Gather { edges } => (INDEX * *edges as f64, INDEX * *edges as f64),
        Op::ScatterAdd { .. } => {
            let rows = graph.layers()[layer.inputs[0]].output.dims()[1] as f64;
            (INDEX * rows, INDEX * rows)
        }
        Op::SegmentSum { segments } => {
            let offsets = INDEX * (*segments as f64 + 1.0);
            (offsets, offsets)
        }
        Op::Attention(a) => {
            let s = attention_shape(graph, layer, a);
            if a.fused {
                let rows = (4 * s.heads * s.seq) as f64;
                (rows, 2.0 * rows)
            } else {
                let weights = (s.heads * s.scores) as f64;
                let traffic = |backward| {
                    score_passes(a, backward)
                        .iter()
                        .map(|p| weights * (act * p.arrays + p.byte_arrays))
                        .sum::<f64>()
                };
                let queries = if a.scale_queries {
                    2.0 * act * (s.hidden * s.seq) as f64
                } else {
                    0.0
                };
                let copies = if repeats_kv(a, &s) {
                    2.0 * act * ((s.kv_hidden + s.hidden) * s.seq_kv) as f64
                } else {
                    0.0
                };
                (
                    traffic(false) + queries + copies,
                    traffic(true) + queries + copies,
                )
            }
        }
        Op::Rotary { .. } => {
            let x = layer.output.elements() as f64 * act;
            (8.0 * x, 12.0 * x)
        }
        Op::Moe(m) => {
            let s = MoeShape::of(m, graph.layers()[layer.inputs[0]].output.dims());
            let traffic = |backward| {
                moe_passes(m, &s, act, backward)
                    .iter()
                    .map(|p| p.bytes)
                    .sum::<f64>()
            };
            let (gemm_fwd, gemm_bwd) = moe_gemm_bytes(m, &s, act);
            (traffic(false) + gemm_fwd, traffic(true) + gemm_bwd)
        }
        _ => (0.0, 0.0),
    }
}

/// Whether a layer reads all its weights in each pass: all do but an embedding, which
/// reads only the rows it looks up ([`extra_bytes`]).
fn reads_weights(op: &Op) -> bool {
    !matches!(op, Op::Embedding { .. })
}

/// Weights and MACs of a matrix layer; [`Graph::push`] has checked they fit.
fn matrix_size(graph: &Graph, layer: &Layer) -> (u64, u64) {
    let inputs: SmallVec<[&[usize]; 3]> = layer
        .inputs
        .iter()
        .map(|&i| graph.layers()[i].output.dims())
        .collect();
    layer
        .op
        .matrix_size(&inputs, layer.output.dims())
        .unwrap_or((u64::MAX, u64::MAX))
}

fn matrix_counts(params: u64, macs: u64) -> Counts {
    Counts {
        params,
        macs,
        flops_fwd: 2 * macs,
        flops_bwd_data: 2 * macs,
        flops_bwd_weight: 2 * macs,
        shared: 0,
    }
}

fn vector_counts(flops: u64) -> Counts {
    Counts {
        flops_fwd: flops,
        flops_bwd_data: flops,
        ..Counts::default()
    }
}

/// What an op keeps from its forward pass for its backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keeps {
    /// Its first input.
    pub input: bool,
    /// Every input (a product of activations, attention).
    pub inputs: bool,
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
        input: s.contains(&Saved::Input(0)) || s.contains(&Saved::Inputs),
        inputs: s.contains(&Saved::Inputs),
        output: s.contains(&Saved::Output),
        mask: s.contains(&Saved::Mask) || s.contains(&Saved::ScoresMask),
        private: s.contains(&Saved::PrivateLikeInput)
            || s.contains(&Saved::Scores)
            || s.contains(&Saved::RepeatedKv)
            || s.contains(&Saved::Stats)
            || s.contains(&Saved::Experts),
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
        | Op::ChannelScale
        | Op::MaxPool(_)
        | Op::MseLoss
        | Op::Pow { .. } => &[Saved::Input(0)],
        Op::Relu | Op::Tanh | Op::Softmax | Op::Sigmoid => &[Saved::Output],
        Op::Clip { .. } | Op::HardSwish | Op::HardSigmoid { .. } => &[Saved::Input(0)],
        Op::Dropout { .. } => &[Saved::Mask],
        Op::SoftmaxCrossEntropy => &[Saved::PrivateLikeInput],
        Op::Linear { .. } | Op::Embedding { .. } | Op::Gelu | Op::Silu => &[Saved::Input(0)],
        Op::LayerNorm | Op::RmsNorm => &[Saved::Input(0), Saved::Stats],
        Op::MatMul | Op::Mul => &[Saved::Inputs],
        Op::Moe(_) => &[Saved::Input(0), Saved::Experts],
        // Unfused: the weights after softmax, and after dropout with its mask.
        // Grouped: the keys and values as copied to every head, with the queries.
        Op::Attention(a) if !a.fused && a.kv_heads < a.heads && a.dropout > 0.0 => &[
            Saved::Input(0),
            Saved::RepeatedKv,
            Saved::Scores,
            Saved::Scores,
            Saved::ScoresMask,
        ],
        Op::Attention(a) if !a.fused && a.kv_heads < a.heads => {
            &[Saved::Input(0), Saved::RepeatedKv, Saved::Scores]
        }
        Op::Attention(a) if !a.fused && a.dropout > 0.0 => &[
            Saved::Inputs,
            Saved::Scores,
            Saved::Scores,
            Saved::ScoresMask,
        ],
        Op::Attention(a) if !a.fused => &[Saved::Inputs, Saved::Scores],
        Op::Attention(_) => &[Saved::Inputs, Saved::Output, Saved::Stats],
        Op::Input
        | Op::AvgPool(_)
        | Op::GlobalAvgPool
        | Op::Add
        | Op::Scale { .. }
        | Op::Shift { .. }
        | Op::Concat
        | Op::Narrow { .. }
        | Op::ChannelShuffle { .. }
        | Op::Tile { .. }
        | Op::Upsample { .. }
        | Op::Flatten
        | Op::FlattenPositions
        | Op::PrependTokens { .. }
        | Op::PositionEmbedding
        | Op::PatchMerge
        | Op::Gather { .. }
        | Op::ScatterAdd { .. }
        | Op::SegmentSum { .. }
        // Its cosine and sine tables are constants of the positions.
        | Op::Rotary { .. } => &[],
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
        let view = matches!(layer.op, Op::Input) || layer.op.is_view();
        let data_grad = layer.inputs.iter().any(|&j| needs[j]);
        let backward = needs[i] && !view;
        let weights = Bytes::from_count((c.params + c.shared) * precision.compute_bytes());
        let weights_read = if reads_weights(&layer.op) {
            weights
        } else {
            Bytes::ZERO
        };
        let (extra_fwd, extra_bwd) = extra_bytes(graph, layer, act.value());
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
            act * ((in_elems + out_elems) * b)
                + weights_read
                + mask_bytes
                + Bytes::new(extra_fwd * b)
        };

        let mut hbm_bwd = Bytes::ZERO;
        let mut activation = Bytes::ZERO;
        if backward {
            hbm_bwd += act * (out_elems * b); // output gradient
            hbm_bwd += Bytes::new(extra_bwd * b);
            let tensors = saved_tensors(graph, i, act, b, mask_bytes);
            for (bytes, node) in tensors {
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
                hbm_bwd += weights_read;
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
            // A product of activations computes the gradient of each input that needs one.
            let share = if matches!(layer.op, Op::MatMul | Op::Mul) {
                let n = layer.inputs.iter().filter(|&&j| needs[j]).count();
                n as f64 / layer.inputs.len() as f64
            } else {
                1.0
            };
            Flops::from_count(c.flops_bwd_data) * b * share
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

/// What node `i`'s backward pass reads of what its forward kept ([`saved`]), bytes at batch
/// `b` with activations of `act` bytes and a dropout mask of `mask_bytes`: each with the
/// node whose output it is, where it is one (kept once however many read it).
fn saved_tensors(
    graph: &Graph,
    i: NodeId,
    act: Bytes,
    b: f64,
    mask_bytes: Bytes,
) -> SmallVec<[(Bytes, Option<NodeId>); 4]> {
    let layers = graph.layers();
    let layer = &layers[i];
    let elems = |j: NodeId| layers[j].output.elements() as f64;
    let in_elems: f64 = layer.inputs.iter().map(|&j| elems(j)).sum();
    let out_elems = elems(i);
    let (weights_of_attention, repeated_kv) = match &layer.op {
        Op::Attention(a) => {
            let s = attention_shape(graph, layer, a);
            (
                (s.heads * s.scores) as f64,
                (2 * s.hidden * s.seq_kv) as f64,
            )
        }
        _ => (0.0, 0.0),
    };
    let mut tensors: SmallVec<[(Bytes, Option<NodeId>); 4]> = SmallVec::new();
    for s in saved(&layer.op) {
        match *s {
            Saved::Input(k) => {
                tensors.push((act * (elems(layer.inputs[k]) * b), Some(layer.inputs[k])))
            }
            Saved::Inputs => {
                for &j in &layer.inputs {
                    tensors.push((act * (elems(j) * b), Some(j)));
                }
            }
            Saved::Output => tensors.push((act * (out_elems * b), Some(i))),
            Saved::PrivateLikeInput => tensors.push((act * (in_elems * b), None)),
            Saved::Mask => tensors.push((mask_bytes, None)),
            Saved::Scores => tensors.push((act * (weights_of_attention * b), None)),
            Saved::ScoresMask => tensors.push((Bytes::new(weights_of_attention * b), None)),
            Saved::RepeatedKv => tensors.push((act * (repeated_kv * b), None)),
            Saved::Stats => tensors.push((
                Bytes::new(4.0 * stats_elements(graph, layer) as f64 * b),
                None,
            )),
            Saved::Experts => {
                if let Op::Moe(m) = &layer.op {
                    let s = MoeShape::of(m, layers[layer.inputs[0]].output.dims());
                    tensors.push((Bytes::new(moe_saved_bytes(m, &s, act.value()) * b), None));
                }
            }
        }
    }
    tensors
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

    #[test]
    fn linear_matmul_and_embedding_by_hand() {
        // ids [5] -> embedding 7 x 8 -> [8, 5] -> linear 8 -> 4 at 5 positions.
        let mut g = Graph::new("t", vec![5]).unwrap();
        g.then(
            "e",
            Op::Embedding {
                num_embeddings: 7,
                embedding_dim: 8,
            },
        )
        .unwrap();
        g.then(
            "l",
            Op::Linear {
                out_features: 4,
                bias: true,
                tied: false,
            },
        )
        .unwrap();
        let c = cost(&g, 2, Precision::Fp32);
        let e = row(&c, "e");
        assert_eq!(e.params, 56);
        assert_eq!(e.flops_fwd, Flops::ZERO);
        // Backward adds each looked-up row: 8 x 5 per sample.
        assert_eq!(e.flops_bwd_weight.value(), 2.0 * 40.0);
        assert_eq!(e.flops_bwd_data, Flops::ZERO);
        // Forward: 8-byte ids, the 5 rows read and the output written (4-byte floats); not
        // the whole table.
        assert_eq!(
            e.hbm_bytes_fwd.value(),
            2.0 * (8.0 * 5.0 + 4.0 * 40.0 * 2.0)
        );
        let l = row(&c, "l");
        assert_eq!(l.params, 8 * 4 + 4);
        assert_eq!(l.flops_fwd.value(), 2.0 * 2.0 * 8.0 * 4.0 * 5.0);
        assert_eq!(l.flops_bwd.value(), 2.0 * l.flops_fwd.value());
        assert_eq!(l.macs_fwd, 2 * 8 * 4 * 5);

        // A tied head owns none of its weights but reads them; products must connect.
        let mut g = Graph::new("t", vec![2, 3, 4]).unwrap();
        let r = g.then("r", Op::Relu).unwrap();
        let err = g.push("bad", Op::MatMul, &[0, r]).unwrap_err();
        assert!(err.message.contains("do not connect"), "{}", err.message);
        let tied = g
            .then(
                "head",
                Op::Linear {
                    out_features: 6,
                    bias: false,
                    tied: true,
                },
            )
            .unwrap();
        let c = cost(&g, 1, Precision::Fp32);
        let h = &c.layers[tied];
        assert_eq!(h.params, 0);
        assert_eq!(h.flops_fwd.value(), 2.0 * 2.0 * 6.0 * 12.0);
        // Reads input and weights, writes output.
        assert_eq!(h.hbm_bytes_fwd.value(), 4.0 * (24.0 + 12.0 + 72.0));
    }

    #[test]
    fn a_product_of_activations_and_its_gradients() {
        let mut g = Graph::new("t", vec![2, 4, 4]).unwrap();
        let a = g.then("a", Op::ChannelAffine).unwrap();
        g.push("both", Op::MatMul, &[a, a]).unwrap();
        g.push("one", Op::MatMul, &[a, 0]).unwrap();
        let c = cost(&g, 1, Precision::Fp32);
        let macs = 2.0 * 4.0 * 4.0 * 4.0;
        assert_eq!(row(&c, "both").flops_fwd.value(), 2.0 * macs);
        assert_eq!(row(&c, "both").flops_bwd.value(), 4.0 * macs);
        // The input sample needs no gradient: one product backward.
        assert_eq!(row(&c, "one").flops_bwd.value(), 2.0 * macs);
    }

    #[test]
    fn attention_by_hand() {
        use crate::graph::Attention;
        // Stacked [3 x 8, 4]: H = 8 in 2 heads of 4, S = 4.
        let build = |causal, dropout, fused| {
            let mut g = Graph::new("t", vec![24, 4]).unwrap();
            g.then("affine", Op::ChannelAffine).unwrap();
            g.then(
                "a",
                Op::Attention(Attention::new(2, causal, dropout, fused)),
            )
            .unwrap();
            g
        };
        let g = build(true, 0.5, false);
        let c = cost(&g, 1, Precision::Fp32);
        let a = row(&c, "a");
        assert_eq!(a.output_shape, &[8, 4]);
        // QK^T and AV: 4 x 4 x 8 multiply-accumulates each.
        assert_eq!(a.macs_fwd, 256);
        // 512 product FLOPs; scale, mask, softmax and dropout on 2 x 16 weights.
        assert_eq!(a.flops_fwd.value(), 512.0 + 4.0 * 32.0);
        assert_eq!(a.flops_bwd.value(), 1024.0 + 4.0 * 32.0);
        // Kept: softmax's and dropout's weights (2 x 32 floats) and the one-byte mask; the
        // input is the affine layer's output, kept by neither (affine keeps its input).
        assert_eq!(
            a.activation_bytes.value(),
            4.0 * 96.0 + 2.0 * 4.0 * 32.0 + 32.0
        );

        // Fused and causal: 10 of the 16 pairs per head; backward recomputes QK^T; it keeps
        // its output and a log-sum-exp per head and query, not the weights.
        let g = build(true, 0.0, true);
        let c = cost(&g, 1, Precision::Fp32);
        let a = row(&c, "a");
        assert_eq!(a.macs_fwd, 2 * 10 * 8);
        assert_eq!(a.flops_fwd.value(), 320.0 + 2.0 * 2.0 * 10.0);
        assert_eq!(a.flops_bwd.value(), 640.0 + 160.0 + 2.0 * 2.0 * 10.0);
        assert_eq!(
            a.activation_bytes.value(),
            4.0 * 96.0 + 4.0 * 32.0 + 4.0 * 8.0
        );
        // Fused attention never writes the weights: fewer bytes than unfused.
        let unfused_graph = build(true, 0.0, false);
        let unfused = cost(&unfused_graph, 1, Precision::Fp32);
        assert!(a.hbm_bytes_fwd < row(&unfused, "a").hbm_bytes_fwd);
    }

    #[test]
    fn norms_and_row_ops_by_hand() {
        let mut g = Graph::new("t", vec![6, 10]).unwrap();
        g.then("ln", Op::LayerNorm).unwrap();
        g.then("rms", Op::RmsNorm).unwrap();
        g.then("g", Op::Gather { edges: 30 }).unwrap();
        g.then("s", Op::ScatterAdd { nodes: 10 }).unwrap();
        g.then("seg", Op::SegmentSum { segments: 2 }).unwrap();
        let c = cost(&g, 1, Precision::Fp32);
        assert_eq!(row(&c, "ln").params, 12);
        assert_eq!(row(&c, "rms").params, 6);
        // Layer norm keeps mean and inverse deviation per position (FP32): its input is
        // the sample.
        assert_eq!(row(&c, "ln").activation_bytes.value(), 4.0 * 2.0 * 10.0);
        let gather = row(&c, "g");
        assert_eq!(gather.output_shape, &[6, 30]);
        assert_eq!(gather.flops_fwd, Flops::ZERO);
        assert_eq!(gather.flops_bwd.value(), 180.0);
        // Reads the input and an 8-byte index per edge, writes the edges' rows.
        assert_eq!(
            gather.hbm_bytes_fwd.value(),
            4.0 * (60.0 + 180.0) + 8.0 * 30.0
        );
        let scatter = row(&c, "s");
        assert_eq!(scatter.output_shape, &[6, 10]);
        assert_eq!(scatter.flops_fwd.value(), 180.0);
        assert_eq!(row(&c, "seg").output_shape, &[6, 2]);
        assert_eq!(row(&c, "seg").flops_fwd.value(), 60.0);
        let mut g = Graph::new("t", vec![6, 10]).unwrap();
        let err = g.then("seg", Op::SegmentSum { segments: 11 }).unwrap_err();
        assert!(err.message.contains("segments = 11"), "{}", err.message);
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
