//! The kernels a training step runs, by class, with the features a calibrated time model
//! is a linear function of (docs/ARCHITECTURE.md "Calibration and validation").
//!
//! # Classes
//! A layer's passes run kernels of a few classes, and one class shares one time model:
//! GEMM (dense layers, and every GEMM micro-kernel), pointwise convolution (1x1, no
//! padding: a plain GEMM on channels-first activations, after a gather when strided),
//! spatial convolution
//! (every other dense or grouped convolution), depthwise convolution (one channel per group),
//! pooling, normalisation (batch norm, channel affine) and element-wise ops (activations,
//! add, scale, concat, tile, upsample, dropout, losses). Convolutions run three passes
//! (forward, backward-data, backward-filter), GEMMs too; the other classes a forward and a
//! backward pass. A transposed convolution runs its adjoint convolution's passes:
//! its forward pass is that convolution's backward-data pass, and the reverse.
//!
//! # Features and the model form
//! A matrix kernel is described as the GEMM calls it makes, `C (M x N) = A (M x K) B (K x N)`
//! per group: forward `M = P`, `N = C_out/g`, `K = C_in/g prod(kernel)`; backward-data
//! `M = P`, `N = C_in/g prod(kernel)`, `K = C_out/g`; backward-filter `M = C_out/g`,
//! `N = C_in/g prod(kernel)`, `K = P`, where `P` is the output positions of the whole batch
//! (convolutions lower the batch together) — except for pointwise convolutions, which run one
//! call per sample and group, so `P` is one sample's positions and the weights are read once
//! per sample. Its time is
//!
//! `t = c0 + c1 F + c2 |A| + c3 |B| + c4 |C|`, with `F = 2 M N K calls` and `|X|` the
//! elements of operand X over all calls.
//!
//! This is the cost model of a blocked (Goto) GEMM: the multiply-adds at the kernel's
//! asymptotic rate (`1 / c1`), plus the traffic of each operand, which a blocked GEMM packs
//! and streams through the cache hierarchy once per block of the other dimension — so its
//! per-FLOP overhead falls as `1/N`, `1/M` and `1/K` for A, B and C respectively: small
//! and skinny problems are inefficient, large ones approach the asymptote — plus a fixed
//! cost per call (`c0`: thread start-up, dispatch). Layout copies of a convolution (im2col,
//! padding, channels-last) are proportional to its A or C operand and fold into `c2`, `c4`.
//! The attained fraction of peak follows: `F / (t x peak)`.
//!
//! A vector kernel's time is `t = c0 + c1 F + c2 bytes`, with the model's FLOPs and its
//! lower-bound bytes of the pass ([`crate::cost`]): a fixed cost, arithmetic (e.g. `tanh`),
//! and memory traffic at the attained bandwidth `1 / c2`.
//!
//! Every feature is affine in the batch size, so a layer's calibrated time is too.

use serde::{Deserialize, Serialize};

use crate::cost::{GraphCost, moe_passes, requires_grad, score_passes};
use crate::graph::{Attention, AttentionShape, Graph, Layer, Moe, MoeShape, Op};

/// Number of features of every kernel (the constant first).
pub const FEATURES: usize = 5;

/// Feature names of matrix kernels, in order.
pub const MATRIX_FEATURES: [&str; FEATURES] = ["1", "flops", "a", "b", "c"];
/// Feature names of vector kernels, in order (the last two are always zero).
pub const VECTOR_FEATURES: [&str; FEATURES] = ["1", "flops", "bytes", "-", "-"];

/// A class of kernels that shares one time model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelClass {
    /// Dense layers and GEMM micro-kernels.
    Gemm,
    /// 1x1 unpadded convolution (any stride).
    ConvPointwise,
    /// Any other non-depthwise convolution.
    ConvSpatial,
    /// Depthwise convolution.
    ConvDepthwise,
    /// Max, average and global average pooling.
    Pooling,
    /// Batch norm and channel affine.
    Norm,
    /// Activations, add, scale, concat, tile, upsample, dropout, losses.
    Elementwise,
}

impl KernelClass {
    /// Every class.
    pub const ALL: [KernelClass; 7] = [
        KernelClass::Gemm,
        KernelClass::ConvPointwise,
        KernelClass::ConvSpatial,
        KernelClass::ConvDepthwise,
        KernelClass::Pooling,
        KernelClass::Norm,
        KernelClass::Elementwise,
    ];

    /// Its name in profiles and reports.
    pub fn name(self) -> &'static str {
        match self {
            KernelClass::Gemm => "gemm",
            KernelClass::ConvPointwise => "conv-pointwise",
            KernelClass::ConvSpatial => "conv-spatial",
            KernelClass::ConvDepthwise => "conv-depthwise",
            KernelClass::Pooling => "pooling",
            KernelClass::Norm => "norm",
            KernelClass::Elementwise => "elementwise",
        }
    }

    /// Whether the class is a matrix class (GEMM features).
    pub fn is_matrix(self) -> bool {
        matches!(
            self,
            KernelClass::Gemm
                | KernelClass::ConvPointwise
                | KernelClass::ConvSpatial
                | KernelClass::ConvDepthwise
        )
    }

    /// The feature names of the class.
    pub fn features(self) -> [&'static str; FEATURES] {
        if self.is_matrix() {
            MATRIX_FEATURES
        } else {
            VECTOR_FEATURES
        }
    }

    /// The class of a vector op by its kind (`relu`, `max-pool`, ...); `None` for matrix
    /// ops, the input and flatten (a view).
    pub fn of_vector_op(kind: &str) -> Option<KernelClass> {
        match kind {
            "max-pool" | "avg-pool" | "global-avg-pool" => Some(KernelClass::Pooling),
            "batch-norm" | "channel-affine" | "channel-scale" | "layer-norm" | "rms-norm" => {
                Some(KernelClass::Norm)
            }
            "input" | "flatten" | "flatten-positions" | "conv" | "conv-transpose" | "dense"
            | "linear" | "matmul" | "attention" | "moe" => None,
            _ => Some(KernelClass::Elementwise),
        }
    }
}

/// A pass of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelPass {
    /// Forward.
    Forward,
    /// Gradient with respect to the input (matrix kernels).
    BackwardData,
    /// Gradient with respect to the weights (matrix kernels).
    BackwardFilter,
    /// The whole backward pass (vector kernels).
    Backward,
}

impl KernelPass {
    /// Its name in records, profiles and reports.
    pub fn name(self) -> &'static str {
        match self {
            KernelPass::Forward => "forward",
            KernelPass::BackwardData => "backward-data",
            KernelPass::BackwardFilter => "backward-filter",
            KernelPass::Backward => "backward",
        }
    }

    /// The pass named `name`.
    pub fn parse(name: &str) -> Option<KernelPass> {
        [
            KernelPass::Forward,
            KernelPass::BackwardData,
            KernelPass::BackwardFilter,
            KernelPass::Backward,
        ]
        .into_iter()
        .find(|p| p.name() == name)
    }

    /// Whether the pass belongs to the backward half of a step.
    pub fn is_backward(self) -> bool {
        self != KernelPass::Forward
    }
}

/// One kernel: its class, its pass and its features.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Kernel {
    /// Class.
    pub class: KernelClass,
    /// Pass.
    pub pass: KernelPass,
    /// The op kind of a vector kernel (`max-pool`, `relu`, ...) or of a linear layer's GEMMs
    /// (`linear`), for profiles that fit single ops; `None` for other matrix kernels.
    pub op: Option<&'static str>,
    /// Features, in the order of [`KernelClass::features`].
    pub x: [f64; FEATURES],
    /// How a convolution's kernel runs beyond its implicit GEMM's shape; `None` for other
    /// kernels.
    pub conv: Option<ConvIo>,
}

/// What a convolution's kernel moves and how it tiles, beyond its implicit GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ConvIo {
    /// The rows of the implicit GEMM as a Winograd kernel tiles them: a 2-D 3 x 3
    /// convolution of stride 1 computes its output in 4 x 4 tiles (F(4x4, 3x3)), so each
    /// output side counts rounded up to a multiple of 4 ([`winograd_positions`]). `None`
    /// where the GEMM's own rows are tiled.
    pub winograd_rows: Option<f64>,
    /// The elements the kernel reads and writes: the input (or its gradient), the filters
    /// (or theirs) and the output (or its gradient), once each; not the unrolled input the
    /// implicit GEMM's `m x k` operand describes.
    pub elements: f64,
    /// Whether the library runs the implicit GEMM's inner dimension unsplit: a 3-D
    /// convolution's weight gradient, whose inner dimension is every output position of the
    /// batch. cuDNN 9 on the GH100 runs those as if unsplit in every format (their times over
    /// the tiling model's, spread as the median absolute deviation of the log ratio: 0.27-0.34
    /// unsplit against 0.71-1.84 split up to 64 ways, the few-channel layers of CosmoFlow 70
    /// times slower than a split would run; `docs/TRANSFER.md`).
    pub unsplit: bool,
}

/// The output tile side of the Winograd convolutions libraries run for 3 x 3 filters at
/// stride 1 (F(4x4, 3x3)).
pub const WINOGRAD_TILE: usize = 4;

/// The output positions a Winograd kernel computes for a convolution of `kernel` and
/// `stride` with `output` extents: each side rounded up to [`WINOGRAD_TILE`]; `None` where no
/// Winograd kernel applies (not 2-D, not 3 x 3, or strided).
pub fn winograd_positions(output: &[usize], kernel: &[usize], stride: &[usize]) -> Option<f64> {
    (output.len() == 2 && kernel.iter().all(|&k| k == 3) && stride.iter().all(|&s| s == 1)).then(
        || {
            output
                .iter()
                .map(|&o| o.div_ceil(WINOGRAD_TILE) * WINOGRAD_TILE)
                .product::<usize>() as f64
        },
    )
}

/// The shape of a convolution, per sample channels-first, as the features need it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvShape {
    /// Batch.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Input spatial extents.
    pub input: Vec<usize>,
    /// Output spatial extents.
    pub output: Vec<usize>,
    /// Kernel extents.
    pub kernel: Vec<usize>,
    /// Strides.
    pub stride: Vec<usize>,
    /// Whether any padding is applied.
    pub padded: bool,
    /// Groups.
    pub groups: usize,
}

impl ConvShape {
    /// The class the backend dispatches this convolution to.
    pub fn class(&self) -> KernelClass {
        let (cin_g, cout_g) = (self.c_in / self.groups, self.c_out / self.groups);
        if cin_g == 1 && cout_g == 1 && self.groups > 1 {
            KernelClass::ConvDepthwise
        } else if self.kernel.iter().all(|&k| k == 1) && !self.padded {
            KernelClass::ConvPointwise
        } else {
            KernelClass::ConvSpatial
        }
    }

    /// The kernel of `pass` (forward, backward-data or backward-filter).
    pub fn kernel(&self, pass: KernelPass) -> Kernel {
        let product = |d: &[usize]| d.iter().map(|&v| v as f64).product::<f64>();
        let g = self.groups as f64;
        let taps = product(&self.kernel);
        let (cin_g, cout_g) = (self.c_in as f64 / g, self.c_out as f64 / g);
        let class = self.class();
        // A pointwise convolution is one GEMM per sample and group (channels-first
        // activations are matrices already); the others lower the batch together.
        let (positions, calls) = if class == KernelClass::ConvPointwise {
            (product(&self.output), self.batch as f64 * g)
        } else {
            (self.batch as f64 * product(&self.output), g)
        };
        let (m, n, k) = match pass {
            KernelPass::Forward | KernelPass::Backward => (positions, cout_g, cin_g * taps),
            KernelPass::BackwardData => (positions, cin_g * taps, cout_g),
            KernelPass::BackwardFilter => (cout_g, cin_g * taps, positions),
        };
        // The output (forward) and input (backward-data) gradients of a 3 x 3 convolution
        // of stride 1 run as Winograd kernels, which tile the positions.
        let winograd = match pass {
            KernelPass::BackwardFilter => None,
            _ if class != KernelClass::ConvSpatial || self.groups != 1 => None,
            _ => winograd_positions(&self.output, &self.kernel, &self.stride)
                .map(|p| p * self.batch as f64),
        };
        let elements = self.batch as f64 * self.c_in as f64 * product(&self.input)
            + cout_g * cin_g * taps * g
            + self.batch as f64 * self.c_out as f64 * product(&self.output);
        Kernel {
            conv: Some(ConvIo {
                winograd_rows: winograd,
                elements,
                unsplit: pass == KernelPass::BackwardFilter && self.input.len() == 3,
            }),
            ..gemm_kernel(class, pass, m, n, k, calls)
        }
    }
}

/// A GEMM-like kernel of `calls` products of `m x k` by `k x n` (one per group, or per
/// sample and group).
pub fn gemm_kernel(
    class: KernelClass,
    pass: KernelPass,
    m: f64,
    n: f64,
    k: f64,
    groups: f64,
) -> Kernel {
    Kernel {
        class,
        pass,
        op: None,
        x: [
            1.0,
            2.0 * m * n * k * groups,
            m * k * groups,
            k * n * groups,
            m * n * groups,
        ],
        conv: None,
    }
}

/// The GEMM kernels of a `linear` layer of `out_features` on a per-sample `input` (channels
/// first) at `batch`: forward, and the data and weight gradients where the step needs them.
/// One product per sample of its positions, as on channels-first activations (a sample's
/// `[C, positions]` is a matrix already; as a pointwise convolution runs). Each kernel is
/// marked with the op kind `linear`, so that a profile that measured linear layers times
/// them by its own fit.
pub fn linear_kernels(
    input: &[usize],
    out_features: usize,
    batch: f64,
    data: bool,
    filter: bool,
) -> Vec<Kernel> {
    let positions: f64 = input.iter().skip(1).map(|&d| d as f64).product();
    let c = input.first().map_or(0.0, |&d| d as f64);
    let o = out_features as f64;
    let linear = |pass, m, n, k| Kernel {
        op: Some("linear"),
        ..gemm_kernel(KernelClass::Gemm, pass, m, n, k, batch)
    };
    let mut out = vec![linear(KernelPass::Forward, positions, o, c)];
    if data {
        out.push(linear(KernelPass::BackwardData, positions, c, o));
    }
    if filter {
        out.push(linear(KernelPass::BackwardFilter, c, o, positions));
    }
    out
}

/// A vector kernel of op kind `op` (its class follows) with `flops` and `bytes`; `None` for
/// kinds that run no kernel (the input, flatten, matrix ops).
pub fn vector_kernel(op: &str, pass: KernelPass, flops: f64, bytes: f64) -> Option<Kernel> {
    let class = KernelClass::of_vector_op(op)?;
    Some(Kernel {
        class,
        pass,
        op: crate::file::op_kinds().find(|k| *k == op),
        x: [1.0, flops, bytes, 0.0, 0.0],
        conv: None,
    })
}

/// The kernels of an attention layer at `batch` with `act` bytes per element, forward
/// and, if `backward`, backward; batched GEMMs run one product per sample and head.
///
/// Unfused (as eager frameworks run it): forward `QK^T`, the element-wise kernels of
/// [`score_passes`] (scale, mask, clamp, softmax, dropout) and `AV`; backward
/// `dV = P^T dO`, `dP = dO V^T`, their backward kernels, `dQ = dS K` and `dK = dS^T Q`;
/// where the queries carry the scale, a kernel over them before `QK^T` and after `dQ`;
/// grouped-query attention copies its keys and values to every head first and sums their
/// gradients back last.
///
/// Fused (flash attention): one kernel each way, timed as the batched GEMM of its
/// products: `S x pairs/S x 2d` forward (`QK^T` and `AV`), `S x pairs/S x 5d` backward (the
/// four products and the recomputed `QK^T`). Its scale and softmax run inside it: their
/// FLOPs are in the layer's count ([`crate::cost`]) but add no kernel.
pub fn attention_kernels(
    a: &Attention,
    s: &AttentionShape,
    batch: f64,
    act: f64,
    backward: bool,
) -> Vec<Kernel> {
    let calls = batch * s.heads as f64;
    let (q, kv, d) = (s.seq as f64, s.seq_kv as f64, s.head_dim() as f64);
    let gemm = KernelClass::Gemm;
    let mut out = Vec::new();
    if a.fused {
        let n = s.pairs as f64 / q.max(1.0);
        out.push(gemm_kernel(gemm, KernelPass::Forward, q, n, 2.0 * d, calls));
        if backward {
            out.push(gemm_kernel(
                gemm,
                KernelPass::BackwardData,
                q,
                n,
                5.0 * d,
                calls,
            ));
        }
        return out;
    }
    let weights = calls * q * kv;
    let passes = |pass: KernelPass| {
        score_passes(a, pass.is_backward())
            .into_iter()
            .filter_map(move |p| {
                let bytes = weights * (act * p.arrays + p.byte_arrays);
                vector_kernel(p.op, pass, weights, bytes)
            })
    };
    // The scale on the queries (`batch x H x S` elements), where they carry it.
    let queries = batch * (s.hidden * s.seq) as f64;
    let query_scale = |pass| {
        vector_kernel("scale", pass, queries, 2.0 * act * queries).filter(|_| a.scale_queries)
    };
    // Grouped-query attention's keys and values copied to every head (`repeat_kv`), one
    // copy each forward, their gradients summed back each backward.
    let copied = batch * (s.hidden * s.seq_kv) as f64;
    let shared = batch * (s.kv_hidden * s.seq_kv) as f64;
    let regroup = |pass, op, flops| {
        vector_kernel(op, pass, flops, act * (copied + shared)).filter(|_| s.grouped())
    };
    for _ in 0..2 {
        out.extend(regroup(KernelPass::Forward, "concat", 0.0));
    }
    out.extend(query_scale(KernelPass::Forward));
    out.push(gemm_kernel(gemm, KernelPass::Forward, q, kv, d, calls));
    out.extend(passes(KernelPass::Forward));
    out.push(gemm_kernel(gemm, KernelPass::Forward, q, d, kv, calls));
    if backward {
        let data = KernelPass::BackwardData;
        out.push(gemm_kernel(gemm, data, kv, d, q, calls));
        out.push(gemm_kernel(gemm, data, q, kv, d, calls));
        out.extend(passes(KernelPass::Backward));
        out.push(gemm_kernel(gemm, data, q, d, kv, calls));
        out.push(gemm_kernel(gemm, data, kv, d, q, calls));
        out.extend(query_scale(KernelPass::Backward));
        for _ in 0..2 {
            out.extend(regroup(KernelPass::Backward, "add", copied - shared));
        }
    }
    out
}

/// The kernels of a mixture-of-experts layer at `batch` with `act` bytes per element: its
/// router's GEMMs (a linear layer of `experts` outputs on the tokens), its element-wise
/// kernels ([`moe_passes`]), and each projection as one GEMM per local expert on that
/// expert's even share of the slots (Hugging Face's loop over the experts, Megatron-Core's
/// sequential experts), marked `linear`; forward, and where `data` and `filter` its
/// gradients (the element-wise kernels' backward with the data gradient).
pub fn moe_kernels(
    m: &Moe,
    s: &MoeShape,
    batch: f64,
    act: f64,
    data: bool,
    filter: bool,
) -> Vec<Kernel> {
    let tokens = [s.hidden as usize, s.seq as usize];
    let router = linear_kernels(&tokens, m.experts, batch, data, filter);
    let rows = s.rows_per_expert(m.local) * batch;
    let (h, f, calls) = (s.hidden as f64, m.ffn as f64, m.local as f64);
    let expert = |pass, mm, n, k| Kernel {
        op: Some("linear"),
        ..gemm_kernel(KernelClass::Gemm, pass, mm, n, k, calls)
    };
    let vector = |pass: KernelPass| {
        moe_passes(m, s, act, pass.is_backward())
            .into_iter()
            .filter_map(move |p| vector_kernel(p.op, pass, p.flops * batch, p.bytes * batch))
    };
    // The projections into the experts (`w1`, and `w3` where gated) and out (`w2`).
    let into = s.projections as usize - 1;
    let mut out = vec![router[0]];
    let mut fwd = vector(KernelPass::Forward);
    // The softmax, the choice and the gather before the experts; the rest after.
    out.extend(fwd.by_ref().take(3));
    for _ in 0..into {
        out.push(expert(KernelPass::Forward, rows, f, h));
    }
    out.extend(fwd.by_ref().take(usize::from(m.gated) + 1));
    out.push(expert(KernelPass::Forward, rows, h, f));
    out.extend(fwd);
    if data {
        let data_pass = KernelPass::BackwardData;
        out.extend(vector(KernelPass::Backward));
        out.push(expert(data_pass, rows, f, h));
        for _ in 0..into {
            out.push(expert(data_pass, rows, h, f));
        }
    }
    if filter {
        // `dW = X^T dY`: `w2`'s `F x H` from the slots' `F` and `H`, the others' `H x F`.
        let pass = KernelPass::BackwardFilter;
        out.push(expert(pass, f, h, rows));
        for _ in 0..into {
            out.push(expert(pass, h, f, rows));
        }
    }
    out.extend(router.into_iter().skip(1));
    out
}

fn conv_shape(graph: &Graph, layer: &Layer, batch: u64) -> Option<ConvShape> {
    let input = graph.layers()[*layer.inputs.first()?].output.dims();
    let output = layer.output.dims();
    let (c, conv_in, conv_out) = match &layer.op {
        Op::Conv(c) => (c, input, output),
        // The adjoint convolution reads the transposed convolution's output.
        Op::ConvTranspose(c) => (c, output, input),
        _ => return None,
    };
    Some(ConvShape {
        batch: batch as usize,
        c_in: conv_in[0],
        c_out: conv_out[0],
        input: conv_in[1..].to_vec(),
        output: conv_out[1..].to_vec(),
        kernel: c.kernel.to_vec(),
        stride: c.stride.to_vec(),
        padded: c.padding.pairs().iter().any(|p| p[0] > 0 || p[1] > 0),
        groups: c.groups,
    })
}

/// The kernels of every layer of `cost` (built from `graph`), forward and backward, one list
/// per layer (empty for the input and views). A pass the step does not run (a data gradient
/// nobody needs) has no kernel.
pub fn step_kernels(graph: &Graph, cost: &GraphCost<'_>) -> Vec<Vec<Kernel>> {
    let needs = requires_grad(graph);
    graph
        .layers()
        .iter()
        .zip(&cost.layers)
        .enumerate()
        .map(|(i, (layer, lc))| {
            let mut out = Vec::new();
            let backward = needs[i];
            match &layer.op {
                Op::Conv(_) | Op::ConvTranspose(_) => {
                    let Some(shape) = conv_shape(graph, layer, cost.batch) else {
                        return out;
                    };
                    let transposed = matches!(layer.op, Op::ConvTranspose(_));
                    let (fwd, data) = if transposed {
                        (KernelPass::BackwardData, KernelPass::Forward)
                    } else {
                        (KernelPass::Forward, KernelPass::BackwardData)
                    };
                    out.push(Kernel {
                        pass: KernelPass::Forward,
                        ..shape.kernel(fwd)
                    });
                    if lc.flops_bwd_data.value() > 0.0 {
                        out.push(Kernel {
                            pass: KernelPass::BackwardData,
                            ..shape.kernel(data)
                        });
                    }
                    if lc.flops_bwd_weight.value() > 0.0 {
                        out.push(shape.kernel(KernelPass::BackwardFilter));
                    }
                }
                Op::Dense { out_features, .. } => {
                    let input = graph.layers()[layer.inputs[0]].output.elements() as f64;
                    let (b, o) = (cost.batch as f64, *out_features as f64);
                    let gemm = KernelClass::Gemm;
                    out.push(gemm_kernel(gemm, KernelPass::Forward, b, o, input, 1.0));
                    if lc.flops_bwd_data.value() > 0.0 {
                        out.push(gemm_kernel(
                            gemm,
                            KernelPass::BackwardData,
                            b,
                            input,
                            o,
                            1.0,
                        ));
                    }
                    if lc.flops_bwd_weight.value() > 0.0 {
                        out.push(gemm_kernel(
                            gemm,
                            KernelPass::BackwardFilter,
                            input,
                            o,
                            b,
                            1.0,
                        ));
                    }
                }
                Op::Linear { out_features, .. } => {
                    let input = graph.layers()[layer.inputs[0]].output.dims();
                    out.extend(linear_kernels(
                        input,
                        *out_features,
                        cost.batch as f64,
                        lc.flops_bwd_data.value() > 0.0,
                        lc.flops_bwd_weight.value() > 0.0,
                    ));
                }
                Op::MatMul => {
                    let a = graph.layers()[layer.inputs[0]].output.dims();
                    let r = a.len();
                    let leading: f64 = a[..r - 2].iter().map(|&d| d as f64).product();
                    let calls = cost.batch as f64 * leading;
                    let (m, k, n) = (
                        a[r - 2] as f64,
                        a[r - 1] as f64,
                        *layer.output.dims().last().unwrap_or(&1) as f64,
                    );
                    let gemm = KernelClass::Gemm;
                    out.push(gemm_kernel(gemm, KernelPass::Forward, m, n, k, calls));
                    if backward && needs[layer.inputs[0]] {
                        out.push(gemm_kernel(gemm, KernelPass::BackwardData, m, k, n, calls));
                    }
                    if backward && needs[layer.inputs[1]] {
                        out.push(gemm_kernel(gemm, KernelPass::BackwardData, k, n, m, calls));
                    }
                }
                Op::Attention(a) => {
                    let inputs: Vec<&[usize]> = layer
                        .inputs
                        .iter()
                        .map(|&j| graph.layers()[j].output.dims())
                        .collect();
                    if let Some(s) = AttentionShape::of(a, &inputs) {
                        let act = cost.precision.compute_bytes() as f64;
                        // Window attention's copies of its `C x H x W` activations: the
                        // roll and the split into windows before, their reverse after,
                        // each way (torch's `roll`, `permute` and `reshape`).
                        let copies = if a.window > 0 { 4 } else { 0 };
                        let moved = cost.batch as f64 * layer.output.elements() as f64;
                        let copy = |pass| vector_kernel("concat", pass, 0.0, 2.0 * act * moved);
                        for _ in 0..copies {
                            out.extend(copy(KernelPass::Forward));
                        }
                        out.extend(attention_kernels(a, &s, cost.batch as f64, act, backward));
                        for _ in 0..copies {
                            out.extend(copy(KernelPass::Backward).filter(|_| backward));
                        }
                    }
                }
                Op::Moe(m) => {
                    let input = graph.layers()[layer.inputs[0]].output.dims();
                    out.extend(moe_kernels(
                        m,
                        &MoeShape::of(m, input),
                        cost.batch as f64,
                        cost.precision.compute_bytes() as f64,
                        lc.flops_bwd_data.value() > 0.0,
                        lc.flops_bwd_weight.value() > 0.0,
                    ));
                }
                op => {
                    let kind = op.kind();
                    out.extend(vector_kernel(
                        kind,
                        KernelPass::Forward,
                        lc.flops_fwd.value(),
                        lc.hbm_bytes_fwd.value(),
                    ));
                    if backward && lc.hbm_bytes_bwd.value() > 0.0 {
                        out.extend(vector_kernel(
                            kind,
                            KernelPass::Backward,
                            lc.flops_bwd.value(),
                            lc.hbm_bytes_bwd.value(),
                        ));
                    }
                }
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn winograd_tiles_round_each_output_side_of_a_3x3_stride_1_convolution_to_4() {
        assert_eq!(
            winograd_positions(&[56, 56], &[3, 3], &[1, 1]),
            Some(3136.0)
        );
        assert_eq!(winograd_positions(&[7, 5], &[3, 3], &[1, 1]), Some(64.0));
        assert_eq!(winograd_positions(&[56, 56], &[3, 3], &[2, 2]), None);
        assert_eq!(winograd_positions(&[56, 56], &[5, 5], &[1, 1]), None);
        assert_eq!(winograd_positions(&[8, 8, 8], &[3, 3, 3], &[1, 1, 1]), None);
    }
    use crate::cost::cost;
    use crate::precision::Precision;
    use crate::workloads::{self, BuildOptions};

    #[test]
    fn matrix_kernel_flops_are_the_models() {
        for name in [
            "cosmoflow",
            "deepcam",
            "resnet50",
            "gpt2",
            "bert-large",
            "opt-1.3b",
            "mixtral-8x7b",
            "gin",
        ] {
            let options = BuildOptions {
                input_size: workloads::find(name)
                    .ok()
                    .filter(|b| b.sequence)
                    .map(|_| vec![64]),
                width: 1.0,
            };
            let g = workloads::build(name, &options).unwrap();
            let c = cost(&g, 2, Precision::Fp32);
            let kernels = step_kernels(&g, &c);
            for (ks, lc) in kernels.iter().zip(&c.layers) {
                let flops = |pred: &dyn Fn(&Kernel) -> bool| {
                    ks.iter().filter(|k| pred(k)).map(|k| k.x[1]).sum::<f64>()
                };
                let fwd = flops(&|k| k.pass == KernelPass::Forward);
                let bwd = flops(&|k| k.pass.is_backward());
                let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.max(1.0);
                assert!(close(fwd, lc.flops_fwd.value()), "{name} {}", lc.name);
                assert!(close(bwd, lc.flops_bwd.value()), "{name} {}", lc.name);
            }
        }
    }

    #[test]
    fn classes_follow_the_geometry() {
        let g = workloads::build("deepcam", &BuildOptions::default()).unwrap();
        let c = cost(&g, 1, Precision::Fp32);
        let kernels = step_kernels(&g, &c);
        let class_of = |name: &str| kernels[g.find(name).unwrap()][0].class;
        assert_eq!(
            class_of("xception.block1.rep0.sepconv.conv1"),
            KernelClass::ConvDepthwise
        );
        assert_eq!(
            class_of("xception.block1.rep0.sepconv.pointwise"),
            KernelClass::ConvPointwise
        );
        assert_eq!(class_of("xception.conv1"), KernelClass::ConvSpatial);
        // The first convolution reads the input sample: no data gradient.
        let first = &kernels[g.find("xception.conv1").unwrap()];
        assert_eq!(first.len(), 2);
        assert_eq!(first[1].pass, KernelPass::BackwardFilter);
    }

    #[test]
    fn features_are_affine_in_the_batch() {
        let g = workloads::build("resnet50", &BuildOptions::default()).unwrap();
        let at = |b| step_kernels(&g, &cost(&g, b, Precision::Fp32));
        let (one, two, five) = (at(1), at(2), at(5));
        for ((a, b), c) in one.iter().zip(&two).zip(&five) {
            for ((a, b), c) in a.iter().zip(b).zip(c) {
                for f in 0..FEATURES {
                    let line = a.x[f] + 4.0 * (b.x[f] - a.x[f]);
                    assert!((line - c.x[f]).abs() <= 1e-9 * c.x[f].abs().max(1.0));
                }
            }
        }
    }
}
