//! Forward and backward kernels of every op kind of the layer-graph IR on the CPU, in
//! `f32`, batch first (`[N][C][spatial...]`).
//!
//! Each [`Kernel`] is built once from a model layer (its geometry resolved) and then runs
//! `forward` and `backward` on plain slices. Backward reads only what the model says the op
//! keeps for backward (`ridgeline_model::cost`): conv, dense, LeakyReLU, batch norm,
//! channel affine, max pooling and MSE their input; ReLU and tanh their output; dropout its
//! mask; softmax cross-entropy its probabilities. The sequence and graph ops (linear,
//! matmul, embedding, norms, softmax, GELU, SiLU, attention, gather, scatter-add, segment
//! sum) run in [`super::seq`].

use rayon::prelude::*;
use ridgeline_model::graph::{Graph, Layer, Op, Pool};

use super::conv::{self, ConvGeom, add_channel_bias, channel_sums, three};
use super::gemm::{View, ViewMut, matmul};
use super::random::{splitmix, uniform};
use super::saved::Aux;
use super::{activation, moe, seq, window};

/// Batch-norm epsilon (PyTorch's and Keras' default order of magnitude).
pub(crate) const BN_EPS: f32 = 1e-5;

/// A pooling window normalised to three spatial dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolGeom {
    pub(crate) nc: usize,
    pub(crate) input: [usize; 3],
    pub(crate) output: [usize; 3],
    pub(crate) kernel: [usize; 3],
    pub(crate) stride: [usize; 3],
    pub(crate) pad: [usize; 3],
}

impl PoolGeom {
    fn new(p: &Pool, nc: usize, input: &[usize], output: &[usize]) -> Self {
        PoolGeom {
            nc,
            input: three(input, 1),
            output: three(output, 1),
            kernel: three(&p.kernel, 1),
            stride: three(&p.stride, 1),
            pad: three(
                &p.padding
                    .pairs()
                    .iter()
                    .map(|pair| pair[0])
                    .collect::<Vec<_>>(),
                0,
            ),
        }
    }

    /// The input span `[lo, hi)` along dimension `d` of output coordinate `o` (padding
    /// clipped off).
    #[inline]
    fn span(&self, d: usize, o: usize) -> (usize, usize) {
        let start = o * self.stride[d];
        let hi = (start + self.kernel[d])
            .saturating_sub(self.pad[d])
            .min(self.input[d]);
        (start.saturating_sub(self.pad[d]).min(hi), hi)
    }

    fn in_vol(&self) -> usize {
        self.input.iter().product()
    }

    fn out_vol(&self) -> usize {
        self.output.iter().product()
    }
}

/// Max pooling of one plane: the window's rows are first reduced element-wise across depth
/// and height (vectorised), then along width.
fn max_pool_plane(g: &PoolGeom, x: &[f32], out: &mut [f32], row: &mut Vec<f32>) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            row.clear();
            row.resize(wi, f32::NEG_INFINITY);
            for id in d0..d1 {
                for ih in h0..h1 {
                    let src = &x[(id * hi + ih) * wi..][..wi];
                    row.iter_mut().zip(src).for_each(|(m, &v)| *m = m.max(v));
                }
            }
            let dst = &mut out[(od * ho + oh) * wo..][..wo];
            for (ow, o) in dst.iter_mut().enumerate() {
                let (w0, w1) = g.span(2, ow);
                *o = row[w0..w1].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            }
        }
    }
}

/// Average pooling of one plane (padding counts towards the divisor, PyTorch's default).
fn avg_pool_plane(g: &PoolGeom, x: &[f32], out: &mut [f32], row: &mut Vec<f32>) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    #[allow(clippy::cast_precision_loss)]
    let k = g.kernel.iter().product::<usize>() as f32;
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            row.clear();
            row.resize(wi, 0.0);
            for id in d0..d1 {
                for ih in h0..h1 {
                    let src = &x[(id * hi + ih) * wi..][..wi];
                    row.iter_mut().zip(src).for_each(|(m, &v)| *m += v);
                }
            }
            let dst = &mut out[(od * ho + oh) * wo..][..wo];
            for (ow, o) in dst.iter_mut().enumerate() {
                let (w0, w1) = g.span(2, ow);
                *o = row[w0..w1].iter().sum::<f32>() / k;
            }
        }
    }
}

/// The gradient of max pooling for one plane: each output's gradient goes to the first
/// maximum of its window (overwrites `dx`). The arg-max is kept with selects rather than
/// branches: which element wins is unpredictable.
fn max_pool_plane_backward(g: &PoolGeom, x: &[f32], dy: &[f32], dx: &mut [f32]) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    dx.fill(0.0);
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            for ow in 0..wo {
                let (w0, w1) = g.span(2, ow);
                if d0 == d1 || h0 == h1 || w0 == w1 {
                    continue;
                }
                let first = (d0 * hi + h0) * wi + w0;
                let (mut best, mut arg) = (x[first], first);
                for id in d0..d1 {
                    for ih in h0..h1 {
                        let base = (id * hi + ih) * wi;
                        for (iw, &v) in x[base + w0..base + w1].iter().enumerate() {
                            let better = v > best;
                            best = if better { v } else { best };
                            arg = if better { base + w0 + iw } else { arg };
                        }
                    }
                }
                dx[arg] += dy[(od * ho + oh) * wo + ow];
            }
        }
    }
}

/// The gradient of average pooling for one plane (overwrites `dx`).
fn avg_pool_plane_backward(g: &PoolGeom, dy: &[f32], dx: &mut [f32]) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    #[allow(clippy::cast_precision_loss)]
    let k = g.kernel.iter().product::<usize>() as f32;
    dx.fill(0.0);
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            for ow in 0..wo {
                let (w0, w1) = g.span(2, ow);
                let v = dy[(od * ho + oh) * wo + ow] / k;
                for id in d0..d1 {
                    for ih in h0..h1 {
                        let base = (id * hi + ih) * wi;
                        dx[base + w0..base + w1].iter_mut().for_each(|d| *d += v);
                    }
                }
            }
        }
    }
}

/// One layer, ready to run at a batch size.
#[derive(Debug, Clone)]
pub(crate) enum Kernel {
    /// Nothing to compute (the input).
    Input,
    /// Convolution.
    Conv { geom: ConvGeom, bias: bool },
    /// Transposed convolution: `geom` is the convolution it is the adjoint of.
    ConvTranspose {
        geom: ConvGeom,
        bias: bool,
        out_channels: usize,
        out_vol: usize,
    },
    /// Dense: `[N x in] -> [N x out]`.
    Dense {
        n: usize,
        input: usize,
        output: usize,
        bias: bool,
    },
    /// Max pooling.
    MaxPool(PoolGeom),
    /// Average pooling (padding counts towards the divisor, as PyTorch's default).
    AvgPool(PoolGeom),
    /// Global average pooling over `vol` positions.
    GlobalAvgPool { vol: usize },
    /// Batch normalisation over `n x vol` values per channel.
    BatchNorm { n: usize, c: usize, vol: usize },
    /// Per-channel scale and shift.
    ChannelAffine { n: usize, c: usize, vol: usize },
    /// Per-channel scale.
    ChannelScale { n: usize, c: usize, vol: usize },
    /// ReLU.
    Relu,
    /// Leaky ReLU.
    LeakyRelu(f32),
    /// Tanh.
    Tanh,
    /// Sum of inputs.
    Add,
    /// Multiplication by a constant.
    Scale(f32),
    /// Addition of a constant.
    Shift(f32),
    /// Element-wise product of two inputs.
    Mul,
    /// The product of a sample's `a` dims by a second input broadcast from its `b` dims
    /// (extent 1 where they differ: a channel gate).
    Gate {
        n: usize,
        a: Vec<usize>,
        b: Vec<usize>,
    },
    /// Channels `start .. start + len` of `c` at `vol` positions.
    Narrow {
        n: usize,
        c: usize,
        start: usize,
        len: usize,
        vol: usize,
    },
    /// `tokens` learned tokens put before each of `n` sequences of `c` channels at `s`
    /// positions.
    Prepend {
        n: usize,
        c: usize,
        s: usize,
        tokens: usize,
    },
    /// Swin's patch merging of `n` maps of `c` channels at `h x w` positions.
    PatchMerge {
        n: usize,
        c: usize,
        h: usize,
        w: usize,
    },
    /// A learned tensor of one sample's `elems` values added to each of `n` samples.
    Positions { elems: usize },
    /// The channel shuffle of `c` channels in `groups` at `vol` positions.
    Shuffle {
        n: usize,
        c: usize,
        groups: usize,
        vol: usize,
    },
    /// The logistic sigmoid.
    Sigmoid,
    /// Clamping to `[min, max]`.
    Clip(f32, f32),
    /// Hard swish.
    HardSwish,
    /// Hard sigmoid `max(0, min(1, alpha x + beta))`.
    HardSigmoid(f32, f32),
    /// Power with a constant exponent.
    Pow(f32),
    /// Concatenation along channels: channel counts of the inputs, and the volume.
    Concat {
        n: usize,
        channels: Vec<usize>,
        vol: usize,
    },
    /// Tiling of spatial dims.
    Tile {
        input: [usize; 3],
        output: [usize; 3],
    },
    /// Nearest upsampling.
    Upsample {
        input: [usize; 3],
        factor: [usize; 3],
    },
    /// Dropout with keep scale `1 / (1 - rate)`.
    Dropout { rate: f32 },
    /// A view.
    Flatten,
    /// Softmax over channels then cross-entropy, per position, mean per sample.
    SoftmaxCrossEntropy { n: usize, c: usize, vol: usize },
    /// Mean squared error against a synthetic target, mean per sample.
    Mse { n: usize, elems: usize },
    /// A linear layer at every position.
    Linear { geom: seq::Linear, bias: bool },
    /// Products of two activations.
    MatMul(seq::Products),
    /// An embedding lookup.
    Embedding(seq::Embedding),
    /// Layer or RMS norm.
    Norm(seq::Norm),
    /// Softmax over channels.
    Softmax(seq::Softmax),
    /// GELU (tanh approximation).
    Gelu,
    /// SiLU.
    Silu,
    /// Rotary position embedding.
    Rotary(seq::Rotary),
    /// Multi-head attention.
    Attention(seq::Attention),
    /// Shifted-window attention over maps.
    Window(window::Window),
    /// Gather, scatter-add or segment sum.
    Rows(seq::Rows),
    /// A mixture of experts.
    Moe(moe::Moe),
}

fn vol(dims: &[usize]) -> usize {
    dims.iter().skip(1).product::<usize>().max(1)
}

impl Kernel {
    /// The kernel of `layer` of `graph` at batch `n`.
    pub(crate) fn new(graph: &Graph, layer: &Layer, n: usize) -> Kernel {
        let input = |k: usize| graph.layers()[layer.inputs[k]].output.dims();
        let out = layer.output.dims();
        match &layer.op {
            Op::Input => Kernel::Input,
            Op::Conv(c) => {
                let x = input(0);
                Kernel::Conv {
                    geom: conv_geom(c, n, x[0], out[0], &x[1..], &out[1..]),
                    bias: c.bias,
                }
            }
            Op::ConvTranspose(c) => {
                let x = input(0);
                // The adjoint convolution maps this layer's output back to its input.
                let adjoint = conv_geom(c, n, out[0], x[0], &out[1..], &x[1..]);
                Kernel::ConvTranspose {
                    geom: adjoint,
                    bias: c.bias,
                    out_channels: out[0],
                    out_vol: vol(out),
                }
            }
            Op::Dense { out_features, bias } => Kernel::Dense {
                n,
                input: input(0).iter().product(),
                output: *out_features,
                bias: *bias,
            },
            Op::MaxPool(p) => {
                Kernel::MaxPool(PoolGeom::new(p, n * input(0)[0], &input(0)[1..], &out[1..]))
            }
            Op::AvgPool(p) => {
                Kernel::AvgPool(PoolGeom::new(p, n * input(0)[0], &input(0)[1..], &out[1..]))
            }
            Op::GlobalAvgPool => Kernel::GlobalAvgPool { vol: vol(input(0)) },
            Op::BatchNorm => Kernel::BatchNorm {
                n,
                c: input(0)[0],
                vol: vol(input(0)),
            },
            Op::ChannelScale => Kernel::ChannelScale {
                n,
                c: input(0)[0],
                vol: vol(input(0)),
            },
            Op::ChannelAffine => Kernel::ChannelAffine {
                n,
                c: input(0)[0],
                vol: vol(input(0)),
            },
            Op::Relu => Kernel::Relu,
            #[allow(clippy::cast_possible_truncation)]
            Op::LeakyRelu { alpha } => Kernel::LeakyRelu(*alpha as f32),
            Op::Tanh => Kernel::Tanh,
            Op::Add => Kernel::Add,
            #[allow(clippy::cast_possible_truncation)]
            Op::Scale { factor } => Kernel::Scale(*factor as f32),
            #[allow(clippy::cast_possible_truncation)]
            Op::Shift { offset } => Kernel::Shift(*offset as f32),
            Op::Mul if input(1) != input(0) => Kernel::Gate {
                n,
                a: input(0).to_vec(),
                b: input(1).to_vec(),
            },
            Op::Mul => Kernel::Mul,
            Op::Sigmoid => Kernel::Sigmoid,
            Op::Narrow { start, len } => Kernel::Narrow {
                n,
                c: input(0)[0],
                start: *start,
                len: *len,
                vol: vol(input(0)),
            },
            Op::PrependTokens { tokens } => Kernel::Prepend {
                n,
                c: input(0)[0],
                s: input(0)[1],
                tokens: *tokens,
            },
            Op::PatchMerge => Kernel::PatchMerge {
                n,
                c: input(0)[0],
                h: input(0)[1],
                w: input(0)[2],
            },
            Op::PositionEmbedding => Kernel::Positions {
                elems: input(0).iter().product(),
            },
            Op::ChannelShuffle { groups } => Kernel::Shuffle {
                n,
                c: input(0)[0],
                groups: *groups,
                vol: vol(input(0)),
            },
            #[allow(clippy::cast_possible_truncation)]
            Op::Clip { min, max } => Kernel::Clip(*min as f32, *max as f32),
            Op::HardSwish => Kernel::HardSwish,
            #[allow(clippy::cast_possible_truncation)]
            Op::HardSigmoid { alpha, beta } => Kernel::HardSigmoid(*alpha as f32, *beta as f32),
            #[allow(clippy::cast_possible_truncation)]
            Op::Pow { exponent } => Kernel::Pow(*exponent as f32),
            Op::Concat => Kernel::Concat {
                n,
                channels: layer
                    .inputs
                    .iter()
                    .map(|&i| graph.layers()[i].output.channels())
                    .collect(),
                vol: vol(out),
            },
            Op::Tile { .. } => Kernel::Tile {
                input: three(&input(0)[1..], 1),
                output: three(&out[1..], 1),
            },
            Op::Upsample { factor } => Kernel::Upsample {
                input: three(&input(0)[1..], 1),
                factor: three(factor, 1),
            },
            #[allow(clippy::cast_possible_truncation)]
            Op::Dropout { rate } => Kernel::Dropout { rate: *rate as f32 },
            Op::Flatten | Op::FlattenPositions => Kernel::Flatten,
            Op::SoftmaxCrossEntropy => Kernel::SoftmaxCrossEntropy {
                n,
                c: input(0)[0],
                vol: vol(input(0)),
            },
            Op::MseLoss => Kernel::Mse {
                n,
                elems: input(0).iter().product(),
            },
            // On a feature vector, a dense layer.
            // A tied layer keeps its own copy of the weights here (the same work).
            Op::Linear {
                out_features, bias, ..
            } if input(0).len() == 1 => Kernel::Dense {
                n,
                input: input(0)[0],
                output: *out_features,
                bias: *bias,
            },
            Op::Linear {
                out_features, bias, ..
            } => Kernel::Linear {
                geom: seq::Linear {
                    n,
                    c: input(0)[0],
                    out: *out_features,
                    vol: vol(input(0)),
                },
                bias: *bias,
            },
            Op::MatMul => {
                let a = input(0);
                let r = a.len();
                Kernel::MatMul(seq::Products {
                    calls: n * a[..r - 2].iter().product::<usize>(),
                    m: a[r - 2],
                    k: a[r - 1],
                    p: out[r - 1],
                })
            }
            Op::Embedding {
                num_embeddings,
                embedding_dim,
            } => Kernel::Embedding(seq::Embedding {
                n,
                positions: input(0).iter().product(),
                vocab: *num_embeddings,
                dim: *embedding_dim,
            }),
            Op::LayerNorm | Op::RmsNorm => Kernel::Norm(seq::Norm {
                n,
                c: input(0)[0],
                vol: vol(input(0)),
                rms: matches!(layer.op, Op::RmsNorm),
            }),
            Op::Softmax => Kernel::Softmax(seq::Softmax {
                c: input(0)[0],
                vol: vol(input(0)),
            }),
            Op::Gelu => Kernel::Gelu,
            Op::Silu => Kernel::Silu,
            Op::Rotary { heads, theta } => Kernel::Rotary(seq::Rotary {
                n,
                heads: *heads,
                hidden: out[0],
                seq: out[1],
                theta: *theta,
            }),
            Op::Attention(a) if a.window > 0 => Kernel::Window(window::Window {
                n,
                c: out[0],
                h: out[1],
                w: out[2],
                heads: a.heads,
                window: a.window,
                shift: a.shift,
            }),
            Op::Attention(a) => {
                let stacked = layer.inputs.len() == 1;
                let (q, k) = (input(0), input(if stacked { 0 } else { 1 }));
                #[allow(clippy::cast_possible_truncation)]
                Kernel::Attention(seq::Attention {
                    n,
                    heads: a.heads,
                    kv_heads: a.kv_heads,
                    hidden: out[0],
                    seq: q[1],
                    seq_kv: k[1],
                    causal: a.causal,
                    dropout: a.dropout as f32,
                    fused: a.fused,
                    stacked,
                })
            }
            Op::Gather { edges } => Kernel::Rows(seq::Rows::Gather {
                f: out[0],
                nodes: input(0)[1],
                edges: *edges,
            }),
            Op::ScatterAdd { nodes } => Kernel::Rows(seq::Rows::ScatterAdd {
                f: out[0],
                edges: input(0)[1],
                nodes: *nodes,
            }),
            Op::SegmentSum { segments } => Kernel::Rows(seq::Rows::SegmentSum {
                f: out[0],
                rows: input(0)[1],
                segments: *segments,
            }),
            Op::Moe(m) => {
                let shape = ridgeline_model::graph::MoeShape::of(m, input(0));
                Kernel::Moe(moe::Moe {
                    n,
                    hidden: out[0],
                    seq: out[1],
                    experts: m.experts,
                    top_k: m.top_k,
                    ffn: m.ffn,
                    gated: m.gated,
                    act: m.activation,
                    #[allow(clippy::cast_possible_truncation)]
                    capacity: m
                        .capacity_factor
                        .map(|_| (shape.slots / m.experts.max(1) as u64) as usize),
                })
            }
        }
    }

    /// Elements of each parameter tensor (weights first, then bias or shift).
    pub(crate) fn param_sizes(&self) -> Vec<usize> {
        match self {
            Kernel::Conv { geom, bias } => {
                let mut v = vec![geom.weights()];
                if *bias {
                    v.push(geom.c_out);
                }
                v
            }
            Kernel::ConvTranspose {
                geom,
                bias,
                out_channels,
                ..
            } => {
                let mut v = vec![geom.weights()];
                if *bias {
                    v.push(*out_channels);
                }
                v
            }
            Kernel::Dense {
                input,
                output,
                bias,
                ..
            } => {
                let mut v = vec![input * output];
                if *bias {
                    v.push(*output);
                }
                v
            }
            Kernel::BatchNorm { c, .. } | Kernel::ChannelAffine { c, .. } => vec![*c, *c],
            Kernel::ChannelScale { c, .. } => vec![*c],
            Kernel::Prepend { c, tokens, .. } => vec![c * tokens],
            Kernel::Positions { elems, .. } => vec![*elems],
            Kernel::Linear { geom, bias } => {
                let mut v = vec![geom.c * geom.out];
                if *bias {
                    v.push(geom.out);
                }
                v
            }
            Kernel::Embedding(e) => vec![e.vocab * e.dim],
            Kernel::Norm(g) if g.rms => vec![g.c],
            Kernel::Norm(g) => vec![g.c, g.c],
            Kernel::Moe(m) => m.param_sizes(),
            Kernel::Window(w) => w.param_sizes(),
            _ => vec![],
        }
    }

    /// Initial parameters: weights uniform in `±sqrt(3 / fan_in)`, biases and shifts zero,
    /// scales one.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn init_params(&self, seed: u64) -> Vec<Vec<f32>> {
        // Every tensor of a mixture of experts is a weight matrix, each drawn apart.
        if let Kernel::Moe(m) = self {
            return m
                .param_sizes()
                .into_iter()
                .zip(m.fan_ins())
                .enumerate()
                .map(|(i, (len, fan_in))| {
                    let scale = (3.0 / fan_in as f32).sqrt();
                    let stream = seed.wrapping_add(0x9E37_79B9 * i as u64);
                    (0..len as u64)
                        .map(|j| scale * uniform(stream, j))
                        .collect()
                })
                .collect();
        }
        let fan_in = match self {
            Kernel::Conv { geom, .. } => geom.k_rows(),
            Kernel::ConvTranspose { geom, .. } => geom.cout_g() * geom.kvol(),
            Kernel::Dense { input, .. } => *input,
            Kernel::Linear { geom, .. } => geom.c,
            _ => 1,
        } as f32;
        let scale = (3.0 / fan_in).sqrt();
        self.param_sizes()
            .into_iter()
            .enumerate()
            .map(|(i, len)| match (self, i) {
                (
                    Kernel::BatchNorm { .. }
                    | Kernel::ChannelAffine { .. }
                    | Kernel::ChannelScale { .. }
                    | Kernel::Norm(_),
                    0,
                ) => {
                    vec![1.0; len]
                }
                (_, 0) => (0..len as u64).map(|j| scale * uniform(seed, j)).collect(),
                _ => vec![0.0; len],
            })
            .collect()
    }

    /// Runs forward: `out` from `inputs` and `params`, filling `aux`.
    pub(crate) fn forward(
        &self,
        inputs: &[&[f32]],
        params: &[Vec<f32>],
        out: &mut [f32],
        aux: &mut Aux,
        threads: usize,
        seed: u64,
    ) {
        let x = inputs.first().copied().unwrap_or(&[]);
        match self {
            Kernel::Input => {}
            Kernel::Conv { geom, bias } => {
                conv::forward(
                    geom,
                    x,
                    &params[0],
                    bias.then(|| params[1].as_slice()),
                    out,
                    threads,
                );
            }
            Kernel::ConvTranspose {
                geom,
                bias,
                out_channels,
                out_vol,
            } => {
                conv::backward_data(geom, x, &params[0], out, threads);
                if *bias {
                    add_channel_bias(out, &params[1], *out_channels, *out_vol);
                }
            }
            Kernel::Dense {
                n,
                input,
                output,
                bias,
            } => {
                matmul(
                    ViewMut::rows(out, *n, *output, *output),
                    View::rows(x, *n, *input),
                    View::rows(&params[0], *output, *input).t(),
                    false,
                    threads,
                );
                if *bias {
                    add_channel_bias(out, &params[1], *output, 1);
                }
            }
            Kernel::MaxPool(g) => {
                let (iv, ov) = (g.in_vol(), g.out_vol());
                out.par_chunks_mut(ov)
                    .zip(x.par_chunks(iv))
                    .for_each_init(Vec::new, |row, (o, xi)| max_pool_plane(g, xi, o, row));
            }
            Kernel::AvgPool(g) => {
                let (iv, ov) = (g.in_vol(), g.out_vol());
                out.par_chunks_mut(ov)
                    .zip(x.par_chunks(iv))
                    .for_each_init(Vec::new, |row, (o, xi)| avg_pool_plane(g, xi, o, row));
            }
            Kernel::GlobalAvgPool { vol, .. } => {
                #[allow(clippy::cast_precision_loss)]
                let v = *vol as f32;
                out.par_iter_mut()
                    .zip(x.par_chunks(*vol))
                    .for_each(|(o, xi)| *o = xi.iter().sum::<f32>() / v);
            }
            Kernel::BatchNorm { n, c, vol } => {
                aux.stats.resize(2 * c, 0.0);
                let m = (n * vol) as f64;
                let (mean, inv) = aux.stats.split_at_mut(*c);
                mean.par_iter_mut()
                    .zip(inv.par_iter_mut())
                    .enumerate()
                    .for_each(|(ch, (mu, is))| {
                        let (mut s, mut s2) = (0.0f64, 0.0f64);
                        for b in 0..*n {
                            for &v in &x[(b * c + ch) * vol..][..*vol] {
                                s += f64::from(v);
                                s2 += f64::from(v) * f64::from(v);
                            }
                        }
                        let mean = s / m;
                        let var = (s2 / m - mean * mean).max(0.0);
                        #[allow(clippy::cast_possible_truncation)]
                        {
                            *mu = mean as f32;
                            *is = 1.0 / (var as f32 + BN_EPS).sqrt();
                        }
                    });
                let (gamma, beta) = (&params[0], &params[1]);
                let (mean, inv) = aux.stats.split_at(*c);
                out.par_chunks_mut(*vol)
                    .zip(x.par_chunks(*vol))
                    .enumerate()
                    .for_each(|(i, (o, xi))| {
                        let ch = i % c;
                        let (a, b) = (
                            gamma[ch] * inv[ch],
                            beta[ch] - gamma[ch] * inv[ch] * mean[ch],
                        );
                        o.iter_mut().zip(xi).for_each(|(o, &v)| *o = a * v + b);
                    });
            }
            Kernel::ChannelAffine { c, vol, .. } => {
                let (gamma, beta) = (&params[0], &params[1]);
                out.par_chunks_mut(*vol)
                    .zip(x.par_chunks(*vol))
                    .enumerate()
                    .for_each(|(i, (o, xi))| {
                        let ch = i % c;
                        o.iter_mut()
                            .zip(xi)
                            .for_each(|(o, &v)| *o = gamma[ch] * v + beta[ch]);
                    });
            }
            Kernel::ChannelScale { c, vol, .. } => scale_channels(out, x, &params[0], *c, *vol),
            Kernel::Relu => map(out, x, |v| v.max(0.0)),
            // Branch-free, so it vectorises (the signs of activations are unpredictable).
            Kernel::LeakyRelu(a) => map(out, x, |v| v.max(0.0) + a * v.min(0.0)),
            Kernel::Tanh => map(out, x, f32::tanh),
            Kernel::Sigmoid => map(out, x, |v| 1.0 / (1.0 + (-v).exp())),
            Kernel::Narrow {
                n,
                c,
                start,
                len,
                vol,
            } => {
                for b in 0..*n {
                    out[b * len * vol..][..len * vol]
                        .copy_from_slice(&x[(b * c + start) * vol..][..len * vol]);
                }
            }
            Kernel::Prepend { n, c, s, tokens } => {
                let t = *tokens;
                for (row, o) in out.chunks_mut(s + t).take(n * c).enumerate() {
                    let ch = row % c;
                    o[..t].copy_from_slice(&params[0][ch * t..][..t]);
                    o[t..].copy_from_slice(&x[row * s..][..*s]);
                }
            }
            Kernel::PatchMerge { n, c, h, w } => {
                for (o, i) in merged(*n, *c, *h, *w).enumerate() {
                    out[o] = x[i];
                }
            }
            Kernel::Positions { elems, .. } => {
                out.par_chunks_mut(*elems)
                    .zip(x.par_chunks(*elems))
                    .for_each(|(o, xi)| {
                        for ((o, v), p) in o.iter_mut().zip(xi).zip(&params[0]) {
                            *o = v + p;
                        }
                    });
            }
            Kernel::Shuffle { n, c, groups, vol } => {
                for b in 0..*n {
                    for ch in 0..*c {
                        let to = shuffled(ch, *c, *groups);
                        out[(b * c + to) * vol..][..*vol]
                            .copy_from_slice(&x[(b * c + ch) * vol..][..*vol]);
                    }
                }
            }
            Kernel::Clip(lo, hi) => map(out, x, |v| v.clamp(*lo, *hi)),
            Kernel::HardSwish => map(out, x, |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0),
            Kernel::HardSigmoid(a, b) => map(out, x, |v| (a * v + b).clamp(0.0, 1.0)),
            Kernel::Gate { n, a, b } => {
                let map = Broadcast::new(a, b);
                let (va, vb) = (map.a_len, map.b_len);
                for s in 0..*n {
                    let (xa, xb) = (&x[s * va..][..va], &inputs[1][s * vb..][..vb]);
                    for (i, o) in out[s * va..][..va].iter_mut().enumerate() {
                        *o = xa[i] * xb[map.b_index(i)];
                    }
                }
            }
            Kernel::Scale(f) => map(out, x, |v| f * v),
            Kernel::Shift(c) => map(out, x, |v| v + c),
            Kernel::Pow(e) => map(out, x, |v| v.powf(*e)),
            Kernel::Mul => {
                out.par_chunks_mut(CHUNK)
                    .zip(x.par_chunks(CHUNK))
                    .zip(inputs[1].par_chunks(CHUNK))
                    .for_each(|((o, a), b)| {
                        o.iter_mut()
                            .zip(a)
                            .zip(b)
                            .for_each(|((o, a), b)| *o = a * b);
                    });
            }
            Kernel::Add => {
                out.copy_from_slice(x);
                for other in &inputs[1..] {
                    out.par_chunks_mut(CHUNK)
                        .zip(other.par_chunks(CHUNK))
                        .for_each(|(o, v)| o.iter_mut().zip(v).for_each(|(o, v)| *o += v));
                }
            }
            Kernel::Concat { n, channels, vol } => {
                let total: usize = channels.iter().sum();
                for b in 0..*n {
                    let mut offset = 0;
                    for (k, &ch) in channels.iter().enumerate() {
                        out[(b * total + offset) * vol..][..ch * vol]
                            .copy_from_slice(&inputs[k][b * ch * vol..][..ch * vol]);
                        offset += ch;
                    }
                }
            }
            Kernel::Tile { input, output, .. } => {
                let (iv, ov) = (
                    input.iter().product::<usize>(),
                    output.iter().product::<usize>(),
                );
                out.par_chunks_mut(ov)
                    .zip(x.par_chunks(iv))
                    .for_each(|(o, xi)| {
                        for (p, v) in o.iter_mut().enumerate() {
                            *v = xi[map_tile(p, input, output)];
                        }
                    });
            }
            Kernel::Upsample { input, factor, .. } => {
                let iv = input.iter().product::<usize>();
                let output = std::array::from_fn::<usize, 3, _>(|i| input[i] * factor[i]);
                let ov = output.iter().product::<usize>();
                out.par_chunks_mut(ov)
                    .zip(x.par_chunks(iv))
                    .for_each(|(o, xi)| {
                        for (p, v) in o.iter_mut().enumerate() {
                            *v = xi[map_upsample(p, input, &output, factor)];
                        }
                    });
            }
            Kernel::Dropout { rate } => {
                aux.mask.resize(x.len(), 0);
                let keep = 1.0 / (1.0 - rate);
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let threshold = (f64::from(*rate) * f64::from(u32::MAX)) as u32;
                aux.mask
                    .par_chunks_mut(CHUNK)
                    .enumerate()
                    .for_each(|(c, ms)| {
                        for (i, m) in ms.iter_mut().enumerate() {
                            #[allow(clippy::cast_possible_truncation)]
                            let r = (splitmix(seed, (c * CHUNK + i) as u64) >> 32) as u32;
                            *m = u8::from(r >= threshold);
                        }
                    });
                out.par_chunks_mut(CHUNK)
                    .zip(x.par_chunks(CHUNK))
                    .zip(aux.mask.par_chunks(CHUNK))
                    .for_each(|((o, v), m)| {
                        for ((o, v), m) in o.iter_mut().zip(v).zip(m) {
                            *o = if *m == 1 { v * keep } else { 0.0 };
                        }
                    });
            }
            Kernel::Flatten => out.copy_from_slice(x),
            Kernel::SoftmaxCrossEntropy { n, c, vol } => {
                // Over the channel rows in parallel, each read contiguously, so that a
                // batch of one uses every thread as a larger batch does.
                let (n, c, vol) = (*n, *c, *vol);
                aux.probs.resize(x.len(), 0.0);
                let mut stats = Vec::with_capacity(2 * n * vol);
                for b in 0..n {
                    let xb = &x[b * c * vol..][..c * vol];
                    let max = seq::max_rows(xb, vol);
                    let sum = seq::sum_rows(xb, vol, |acc, _, row| {
                        for ((a, v), m) in acc.iter_mut().zip(row).zip(&max) {
                            *a += (v - m).exp();
                        }
                    });
                    stats.extend(max.into_iter().zip(sum));
                }
                aux.probs
                    .par_chunks_mut(vol)
                    .zip(x.par_chunks(vol))
                    .enumerate()
                    .for_each(|(row, (p, xr))| {
                        let st = &stats[(row / c) * vol..][..vol];
                        for ((p, v), (max, sum)) in p.iter_mut().zip(xr).zip(st) {
                            *p = (v - max).exp() / sum;
                        }
                    });
                for (b, o) in out.iter_mut().enumerate().take(n) {
                    let p = &aux.probs[b * c * vol..][..c * vol];
                    #[allow(clippy::cast_precision_loss)]
                    let loss: f32 = (0..vol)
                        .map(|pos| -(p[label(seed, b, pos, c) * vol + pos].max(1e-30)).ln())
                        .sum::<f32>()
                        / vol as f32;
                    *o = loss;
                }
            }
            Kernel::Linear { geom, bias } => {
                geom.forward(x, &params[0], out, threads);
                if *bias {
                    add_channel_bias(out, &params[1], geom.out, geom.vol);
                }
            }
            Kernel::MatMul(p) => p.forward(x, inputs[1], out, threads),
            Kernel::Embedding(e) => e.forward(x, &params[0], out),
            Kernel::Norm(g) => g.forward(x, params, out, aux),
            Kernel::Softmax(g) => g.forward(x, out),
            Kernel::Gelu => map(out, x, activation::gelu),
            Kernel::Silu => map(out, x, activation::silu),
            Kernel::Rotary(r) => r.apply(x, out, false),
            Kernel::Attention(a) => a.forward(inputs, out, aux, threads, seed),
            Kernel::Window(w) => w.forward(x, params, out, aux, threads, seed),
            Kernel::Moe(m) => m.forward(x, params, out, &mut aux.moe, threads),
            Kernel::Rows(r) => r.forward(x, out),
            Kernel::Mse { n, elems } => {
                for b in 0..*n {
                    let xi = &x[b * elems..][..*elems];
                    #[allow(clippy::cast_precision_loss)]
                    let loss = xi
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (v - target(seed, b, i)).powi(2))
                        .sum::<f32>()
                        / *elems as f32;
                    out[b] = loss;
                }
            }
        }
    }

    /// Runs backward: input gradients (for the inputs marked in `want`, overwritten) and
    /// parameter gradients (overwritten) from the output gradient `dy`. `inputs` and `out`
    /// are the forward tensors; a kernel reads only the ones it keeps for backward.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward(
        &self,
        inputs: &[&[f32]],
        out: &[f32],
        dy: &[f32],
        params: &[Vec<f32>],
        aux: &Aux,
        dx: &mut [Option<&mut [f32]>],
        dparams: &mut [Vec<f32>],
        threads: usize,
        seed: u64,
    ) {
        let x = inputs.first().copied().unwrap_or(&[]);
        match self {
            Kernel::Input => {}
            Kernel::Conv { geom, bias } => {
                let (dw, rest) = dparams.split_at_mut(1);
                conv::backward_filter(
                    geom,
                    x,
                    dy,
                    &mut dw[0],
                    bias.then(|| rest[0].as_mut_slice()),
                    threads,
                );
                if let Some(d) = dx[0].as_deref_mut() {
                    conv::backward_data(geom, dy, &params[0], d, threads);
                }
            }
            Kernel::ConvTranspose {
                geom,
                bias,
                out_channels,
                out_vol,
            } => {
                // Forward was backward_data(geom): its filter gradient swaps x and dy.
                conv::backward_filter(geom, dy, x, &mut dparams[0], None, threads);
                if *bias {
                    channel_sums(dy, &mut dparams[1], *out_channels, *out_vol);
                }
                if let Some(d) = dx[0].as_deref_mut() {
                    conv::forward(geom, dy, &params[0], None, d, threads);
                }
            }
            Kernel::Dense {
                n,
                input,
                output,
                bias,
            } => {
                matmul(
                    ViewMut::rows(&mut dparams[0], *output, *input, *input),
                    View::rows(dy, *n, *output).t(),
                    View::rows(x, *n, *input),
                    false,
                    threads,
                );
                if *bias {
                    channel_sums(dy, &mut dparams[1], *output, 1);
                }
                if let Some(d) = dx[0].as_deref_mut() {
                    matmul(
                        ViewMut::rows(d, *n, *input, *input),
                        View::rows(dy, *n, *output),
                        View::rows(&params[0], *output, *input),
                        false,
                        threads,
                    );
                }
            }
            Kernel::MaxPool(g) => {
                let Some(d) = dx[0].as_deref_mut() else {
                    return;
                };
                let (iv, ov) = (g.in_vol(), g.out_vol());
                d.par_chunks_mut(iv)
                    .zip(x.par_chunks(iv))
                    .zip(dy.par_chunks(ov))
                    .for_each(|((di, xi), dyi)| max_pool_plane_backward(g, xi, dyi, di));
            }
            Kernel::AvgPool(g) => {
                let Some(d) = dx[0].as_deref_mut() else {
                    return;
                };
                let (iv, ov) = (g.in_vol(), g.out_vol());
                d.par_chunks_mut(iv)
                    .zip(dy.par_chunks(ov))
                    .for_each(|(di, dyi)| avg_pool_plane_backward(g, dyi, di));
            }
            Kernel::GlobalAvgPool { vol, .. } => {
                let Some(d) = dx[0].as_deref_mut() else {
                    return;
                };
                #[allow(clippy::cast_precision_loss)]
                let v = *vol as f32;
                d.par_chunks_mut(*vol)
                    .zip(dy.par_iter())
                    .for_each(|(di, g)| di.fill(g / v));
            }
            Kernel::BatchNorm { n, c, vol } => {
                let (mean, inv) = aux.stats.split_at(*c);
                let gamma = &params[0];
                #[allow(clippy::cast_precision_loss)]
                let m = (n * vol) as f32;
                // Per channel: sum(dy) and sum(dy * xhat).
                let sums: Vec<(f32, f32)> = (0..*c)
                    .into_par_iter()
                    .map(|ch| {
                        let (mut s, mut sx) = (0.0f64, 0.0f64);
                        for b in 0..*n {
                            let off = (b * c + ch) * vol;
                            for (g, v) in dy[off..][..*vol].iter().zip(&x[off..][..*vol]) {
                                s += f64::from(*g);
                                sx += f64::from(*g) * f64::from((v - mean[ch]) * inv[ch]);
                            }
                        }
                        #[allow(clippy::cast_possible_truncation)]
                        (s as f32, sx as f32)
                    })
                    .collect();
                for (ch, &(s, sx)) in sums.iter().enumerate() {
                    dparams[0][ch] = sx;
                    dparams[1][ch] = s;
                }
                if let Some(d) = dx[0].as_deref_mut() {
                    d.par_chunks_mut(*vol).enumerate().for_each(|(i, di)| {
                        let ch = i % c;
                        let (s, sx) = sums[ch];
                        let off = i * vol;
                        for (j, o) in di.iter_mut().enumerate() {
                            let xhat = (x[off + j] - mean[ch]) * inv[ch];
                            *o = gamma[ch] * inv[ch] / m * (m * dy[off + j] - s - xhat * sx);
                        }
                    });
                }
            }
            Kernel::ChannelScale { n, c, vol } => {
                for (ds, (_, sx)) in dparams[0]
                    .iter_mut()
                    .zip(gradient_sums(dy, x, *n, *c, *vol))
                {
                    *ds = sx;
                }
                if let Some(d) = dx[0].as_deref_mut() {
                    scale_channels(d, dy, &params[0], *c, *vol);
                }
            }
            Kernel::ChannelAffine { n, c, vol } => {
                let sums = gradient_sums(dy, x, *n, *c, *vol);
                let (scale, shift) = dparams.split_at_mut(1);
                for ((ds, dt), (s, sx)) in scale[0].iter_mut().zip(shift[0].iter_mut()).zip(sums) {
                    *ds = sx;
                    *dt = s;
                }
                if let Some(d) = dx[0].as_deref_mut() {
                    scale_channels(d, dy, &params[0], *c, *vol);
                }
            }
            Kernel::Relu => zip_map(dx, dy, out, |g, y| if y > 0.0 { g } else { 0.0 }),
            Kernel::LeakyRelu(a) => {
                let a = *a;
                zip_map(dx, dy, x, |g, v| {
                    g * (a + (1.0 - a) * f32::from(u8::from(v > 0.0)))
                });
            }
            Kernel::Tanh => zip_map(dx, dy, out, |g, y| g * (1.0 - y * y)),
            Kernel::Sigmoid => zip_map(dx, dy, out, |g, y| g * y * (1.0 - y)),
            Kernel::Narrow {
                n,
                c,
                start,
                len,
                vol,
            } => {
                if let Some(d) = dx[0].as_deref_mut() {
                    d.fill(0.0);
                    for b in 0..*n {
                        d[(b * c + start) * vol..][..len * vol]
                            .copy_from_slice(&dy[b * len * vol..][..len * vol]);
                    }
                }
            }
            // The tokens' gradient summed over the batch; the rest is the input's.
            Kernel::Prepend { n, c, s, tokens } => {
                let t = *tokens;
                dparams[0].fill(0.0);
                for (row, g) in dy.chunks(s + t).take(n * c).enumerate() {
                    let ch = row % c;
                    for (d, v) in dparams[0][ch * t..][..t].iter_mut().zip(&g[..t]) {
                        *d += v;
                    }
                }
                if let Some(d) = dx[0].as_deref_mut() {
                    for (row, g) in dy.chunks(s + t).take(n * c).enumerate() {
                        d[row * s..][..*s].copy_from_slice(&g[t..]);
                    }
                }
            }
            Kernel::PatchMerge { n, c, h, w } => {
                if let Some(d) = dx[0].as_deref_mut() {
                    for (o, i) in merged(*n, *c, *h, *w).enumerate() {
                        d[i] = dy[o];
                    }
                }
            }
            Kernel::Positions { elems, .. } => {
                dparams[0].fill(0.0);
                for g in dy.chunks(*elems) {
                    for (d, v) in dparams[0].iter_mut().zip(g) {
                        *d += v;
                    }
                }
                if let Some(d) = dx[0].as_deref_mut() {
                    d.copy_from_slice(dy);
                }
            }
            Kernel::Shuffle { n, c, groups, vol } => {
                if let Some(d) = dx[0].as_deref_mut() {
                    for b in 0..*n {
                        for ch in 0..*c {
                            let from = shuffled(ch, *c, *groups);
                            d[(b * c + ch) * vol..][..*vol]
                                .copy_from_slice(&dy[(b * c + from) * vol..][..*vol]);
                        }
                    }
                }
            }
            Kernel::Clip(lo, hi) => zip_map(dx, dy, x, |g, v| {
                g * f32::from(u8::from(v > *lo && v < *hi))
            }),
            Kernel::HardSwish => zip_map(dx, dy, x, |g, v| {
                if v <= -3.0 {
                    0.0
                } else if v >= 3.0 {
                    g
                } else {
                    g * (2.0 * v + 3.0) / 6.0
                }
            }),
            Kernel::HardSigmoid(a, b) => zip_map(dx, dy, x, |g, v| {
                let z = a * v + b;
                g * a * f32::from(u8::from(z > 0.0 && z < 1.0))
            }),
            Kernel::Gate { n, a, b } => {
                let map = Broadcast::new(a, b);
                let (va, vb) = (map.a_len, map.b_len);
                let (da, db) = dx.split_at_mut(1);
                if let Some(d) = da[0].as_deref_mut() {
                    for s in 0..*n {
                        let xb = &inputs[1][s * vb..][..vb];
                        let g = &dy[s * va..][..va];
                        for (i, o) in d[s * va..][..va].iter_mut().enumerate() {
                            *o = g[i] * xb[map.b_index(i)];
                        }
                    }
                }
                if let Some(d) = db[0].as_deref_mut() {
                    d.fill(0.0);
                    for s in 0..*n {
                        let xa = &x[s * va..][..va];
                        let g = &dy[s * va..][..va];
                        let ds = &mut d[s * vb..][..vb];
                        for i in 0..va {
                            ds[map.b_index(i)] += g[i] * xa[i];
                        }
                    }
                }
            }
            Kernel::Scale(f) => zip_map(dx, dy, dy, |g, _| f * g),
            Kernel::Shift(_) => zip_map(dx, dy, dy, |g, _| g),
            Kernel::Pow(e) => zip_map(dx, dy, x, |g, v| g * e * v.powf(e - 1.0)),
            Kernel::Mul => {
                // Each input's gradient is the output gradient times the other input.
                let (da, db) = dx.split_at_mut(1);
                zip_map(da, dy, inputs[1], |g, b| g * b);
                zip_map(db, dy, x, |g, a| g * a);
            }
            Kernel::Add => {
                for d in dx.iter_mut().flatten() {
                    d.copy_from_slice(dy);
                }
            }
            Kernel::Concat { n, channels, vol } => {
                let total: usize = channels.iter().sum();
                let mut offset = 0;
                for (k, &ch) in channels.iter().enumerate() {
                    if let Some(d) = dx[k].as_deref_mut() {
                        for b in 0..*n {
                            d[b * ch * vol..][..ch * vol]
                                .copy_from_slice(&dy[(b * total + offset) * vol..][..ch * vol]);
                        }
                    }
                    offset += ch;
                }
            }
            Kernel::Tile { input, output, .. } => {
                let Some(d) = dx[0].as_deref_mut() else {
                    return;
                };
                let (iv, ov) = (
                    input.iter().product::<usize>(),
                    output.iter().product::<usize>(),
                );
                d.par_chunks_mut(iv)
                    .zip(dy.par_chunks(ov))
                    .for_each(|(di, g)| {
                        di.fill(0.0);
                        for (p, v) in g.iter().enumerate() {
                            di[map_tile(p, input, output)] += v;
                        }
                    });
            }
            Kernel::Upsample { input, factor, .. } => {
                let Some(d) = dx[0].as_deref_mut() else {
                    return;
                };
                let iv = input.iter().product::<usize>();
                let output = std::array::from_fn::<usize, 3, _>(|i| input[i] * factor[i]);
                let ov = output.iter().product::<usize>();
                d.par_chunks_mut(iv)
                    .zip(dy.par_chunks(ov))
                    .for_each(|(di, g)| {
                        di.fill(0.0);
                        for (p, v) in g.iter().enumerate() {
                            di[map_upsample(p, input, &output, factor)] += v;
                        }
                    });
            }
            Kernel::Dropout { rate } => {
                let keep = 1.0 / (1.0 - rate);
                if let Some(d) = dx[0].as_deref_mut() {
                    d.par_chunks_mut(CHUNK)
                        .zip(dy.par_chunks(CHUNK))
                        .zip(aux.mask.par_chunks(CHUNK))
                        .for_each(|((o, g), m)| {
                            for ((o, g), m) in o.iter_mut().zip(g).zip(m) {
                                *o = if *m == 1 { g * keep } else { 0.0 };
                            }
                        });
                }
            }
            Kernel::Flatten => {
                if let Some(d) = dx[0].as_deref_mut() {
                    d.copy_from_slice(dy);
                }
            }
            Kernel::SoftmaxCrossEntropy { n, c, vol } => {
                let Some(d) = dx[0].as_deref_mut() else {
                    return;
                };
                let (n, c, vol) = (*n, *c, *vol);
                let labels: Vec<usize> = (0..n * vol)
                    .map(|i| label(seed, i / vol, i % vol, c))
                    .collect();
                #[allow(clippy::cast_precision_loss)]
                let v = vol as f32;
                d.par_chunks_mut(vol)
                    .zip(aux.probs.par_chunks(vol))
                    .enumerate()
                    .for_each(|(row, (di, p))| {
                        let (b, k) = (row / c, row % c);
                        let scale = dy[b] / v;
                        let l = &labels[b * vol..][..vol];
                        for ((d, p), l) in di.iter_mut().zip(p).zip(l) {
                            let onehot = if *l == k { 1.0 } else { 0.0 };
                            *d = scale * (p - onehot);
                        }
                    });
            }
            Kernel::Linear { geom, bias } => {
                let (dw, rest) = dparams.split_at_mut(1);
                geom.backward(x, &params[0], dy, &mut dw[0], dx[0].as_deref_mut(), threads);
                if *bias {
                    channel_sums(dy, &mut rest[0], geom.out, geom.vol);
                }
            }
            Kernel::MatMul(p) => {
                let (da, db) = dx.split_at_mut(1);
                p.backward(
                    x,
                    inputs[1],
                    dy,
                    da[0].as_deref_mut(),
                    db[0].as_deref_mut(),
                    threads,
                );
            }
            Kernel::Embedding(e) => {
                e.backward(x, dy, &mut dparams[0]);
                // Ids have no gradient.
                if let Some(d) = dx[0].as_deref_mut() {
                    d.fill(0.0);
                }
            }
            Kernel::Norm(g) => g.backward(x, dy, params, aux, dx[0].as_deref_mut(), dparams),
            Kernel::Softmax(g) => {
                if let Some(d) = dx[0].as_deref_mut() {
                    g.backward(out, dy, d);
                }
            }
            Kernel::Gelu => zip_map(dx, dy, x, |g, v| g * activation::gelu_grad(v)),
            Kernel::Silu => zip_map(dx, dy, x, |g, v| g * activation::silu_grad(v)),
            // The rotation's adjoint: the same rotation backwards.
            Kernel::Rotary(r) => {
                if let Some(d) = dx[0].as_deref_mut() {
                    r.apply(dy, d, true);
                }
            }
            Kernel::Attention(a) => a.backward(inputs, dy, aux, dx, threads, seed),
            Kernel::Window(w) => w.backward(
                x,
                dy,
                params,
                aux,
                dx[0].as_deref_mut(),
                dparams,
                threads,
                seed,
            ),
            Kernel::Moe(m) => m.backward(
                x,
                params,
                dy,
                &aux.moe,
                dparams,
                dx[0].as_deref_mut(),
                threads,
            ),
            Kernel::Rows(r) => {
                if let Some(d) = dx[0].as_deref_mut() {
                    r.backward(dy, d);
                }
            }
            Kernel::Mse { n, elems } => {
                let Some(d) = dx[0].as_deref_mut() else {
                    return;
                };
                #[allow(clippy::cast_precision_loss)]
                let e = *elems as f32;
                for b in 0..*n {
                    for i in 0..*elems {
                        d[b * elems + i] =
                            dy[b] * 2.0 * (x[b * elems + i] - target(seed, b, i)) / e;
                    }
                }
            }
        }
    }
}

fn conv_geom(
    c: &ridgeline_model::graph::Conv,
    n: usize,
    c_in: usize,
    c_out: usize,
    input: &[usize],
    output: &[usize],
) -> ConvGeom {
    ConvGeom {
        n,
        c_in,
        c_out,
        groups: c.groups,
        input: three(input, 1),
        output: three(output, 1),
        kernel: three(&c.kernel, 1),
        stride: three(&c.stride, 1),
        pad: three(
            &c.padding.pairs().iter().map(|p| p[0]).collect::<Vec<_>>(),
            0,
        ),
        dilation: three(&c.dilation, 1),
    }
}

/// `out` = `x` times `gamma` per channel (`c` channels of `vol` positions, samples after one
/// another): a channel scale's output, and its input gradient (and a channel affine's).
fn scale_channels(out: &mut [f32], x: &[f32], gamma: &[f32], c: usize, vol: usize) {
    out.par_chunks_mut(vol)
        .zip(x.par_chunks(vol))
        .enumerate()
        .for_each(|(i, (o, xi))| {
            let ch = i % c;
            o.iter_mut().zip(xi).for_each(|(o, &v)| *o = gamma[ch] * v);
        });
}

/// Per channel, `sum(dy)` (a shift's gradient) and `sum(dy x)` (a scale's), over `n`
/// samples of `c` channels of `vol` positions.
/// For each element of patch merging's output in order, the input element it copies
/// ([`Op::PatchMerge`]: part `p` of channel `c` is the block's position `(p % 2, p / 2)`).
fn merged(n: usize, c: usize, h: usize, w: usize) -> impl Iterator<Item = usize> {
    let (oh, ow) = (h / 2, w / 2);
    (0..n).flat_map(move |b| {
        (0..4 * c).flat_map(move |oc| {
            let (part, ch) = (oc / c, oc % c);
            let (dy, dx) = (part % 2, part / 2);
            (0..oh * ow).map(move |p| {
                let (y, x) = (2 * (p / ow) + dy, 2 * (p % ow) + dx);
                ((b * c + ch) * h + y) * w + x
            })
        })
    })
}

fn gradient_sums(dy: &[f32], x: &[f32], n: usize, c: usize, vol: usize) -> Vec<(f32, f32)> {
    (0..c)
        .into_par_iter()
        .map(|ch| {
            let (mut s, mut sx) = (0.0f64, 0.0f64);
            for b in 0..n {
                let off = (b * c + ch) * vol;
                for (g, v) in dy[off..][..vol].iter().zip(&x[off..][..vol]) {
                    s += f64::from(*g);
                    sx += f64::from(*g) * f64::from(*v);
                }
            }
            #[allow(clippy::cast_possible_truncation)]
            (s as f32, sx as f32)
        })
        .collect()
}

/// Where the channel shuffle of `c` channels in `groups` moves channel `ch`: channel
/// `i c / groups + j` to `j groups + i`.
fn shuffled(ch: usize, c: usize, groups: usize) -> usize {
    let per = c / groups;
    (ch % per) * groups + ch / per
}

/// Where each element of a sample of `a` dims finds its factor in a second input of `b` dims
/// broadcast to it (extent 1 where they differ).
struct Broadcast {
    a_len: usize,
    b_len: usize,
    /// Per dimension, from the last: `a`'s extent, and `b`'s stride (zero where broadcast).
    dims: Vec<(usize, usize)>,
}

impl Broadcast {
    fn new(a: &[usize], b: &[usize]) -> Broadcast {
        let mut dims = Vec::with_capacity(a.len());
        let mut stride = 1;
        for (&ea, &eb) in a.iter().zip(b).rev() {
            dims.push((ea, if eb == 1 { 0 } else { stride }));
            stride *= eb;
        }
        Broadcast {
            a_len: a.iter().product(),
            b_len: b.iter().product(),
            dims,
        }
    }

    fn b_index(&self, mut i: usize) -> usize {
        let mut j = 0;
        for &(extent, stride) in &self.dims {
            j += (i % extent) * stride;
            i /= extent;
        }
        j
    }
}

/// Elements per rayon task of element-wise kernels: large enough that scheduling is
/// negligible, small enough to balance.
const CHUNK: usize = 1 << 14;

fn map(out: &mut [f32], x: &[f32], f: impl Fn(f32) -> f32 + Sync) {
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| o.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)));
}

fn zip_map(
    dx: &mut [Option<&mut [f32]>],
    dy: &[f32],
    other: &[f32],
    f: impl Fn(f32, f32) -> f32 + Sync,
) {
    if let Some(d) = dx.first_mut().and_then(|d| d.as_deref_mut()) {
        d.par_chunks_mut(CHUNK)
            .zip(dy.par_chunks(CHUNK))
            .zip(other.par_chunks(CHUNK))
            .for_each(|((o, g), v)| {
                o.iter_mut()
                    .zip(g)
                    .zip(v)
                    .for_each(|((o, &g), &v)| *o = f(g, v))
            });
    }
}

/// The input position a tiled output position reads.
fn map_tile(p: usize, input: &[usize; 3], output: &[usize; 3]) -> usize {
    let (od, oh, ow) = (
        p / (output[1] * output[2]),
        (p / output[2]) % output[1],
        p % output[2],
    );
    ((od % input[0]) * input[1] + oh % input[1]) * input[2] + ow % input[2]
}

/// The input position a nearest-upsampled output position reads.
fn map_upsample(p: usize, input: &[usize; 3], output: &[usize; 3], factor: &[usize; 3]) -> usize {
    let (od, oh, ow) = (
        p / (output[1] * output[2]),
        (p / output[2]) % output[1],
        p % output[2],
    );
    ((od / factor[0]) * input[1] + oh / factor[1]) * input[2] + ow / factor[2]
}

/// The synthetic class of a position.
#[allow(clippy::cast_possible_truncation)]
fn label(seed: u64, b: usize, pos: usize, classes: usize) -> usize {
    (splitmix(seed ^ 0x5EED, (b as u64) << 32 | pos as u64) % classes as u64) as usize
}

/// The synthetic regression target of an element.
fn target(seed: u64, b: usize, i: usize) -> f32 {
    uniform(seed ^ 0x7A26, (b as u64) << 32 | i as u64)
}

/// Forward passes against textbook definitions on tiny shapes (the backward passes are
/// checked against these forward passes by finite differences in `gradcheck`).
#[cfg(test)]
mod tests {
    use ridgeline_model::graph::{Conv, Padding, Pool};

    use super::*;

    /// What [`run`] returns: the graph, the kernel, its inputs, its parameters, its output.
    type Ran = (Graph, Kernel, Vec<Vec<f32>>, Vec<Vec<f32>>, Vec<f32>);

    /// Runs layer `op` of a graph on `input` (one tensor per graph input, batch `n`).
    fn run(input: &[usize], n: usize, op: Op, inputs: &[usize]) -> Ran {
        let mut g = Graph::new("t", input.to_vec()).unwrap();
        g.push("op", op, inputs).unwrap();
        let layer = g.layers().last().unwrap().clone();
        let kernel = Kernel::new(&g, &layer, n);
        let params: Vec<Vec<f32>> = kernel
            .init_params(5)
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                p.iter()
                    .enumerate()
                    .map(|(j, v)| v + 0.25 * uniform(60 + i as u64, j as u64))
                    .collect()
            })
            .collect();
        let len = g.input_shape().elements() as usize * n;
        let xs: Vec<Vec<f32>> = (0..inputs.len())
            .map(|k| (0..len as u64).map(|i| uniform(70 + k as u64, i)).collect())
            .collect();
        let views: Vec<&[f32]> = xs.iter().map(Vec::as_slice).collect();
        let mut out = vec![f32::NAN; layer.output.elements() as usize * n];
        kernel.forward(&views, &params, &mut out, &mut Aux::default(), 2, 9);
        (g, kernel, xs, params, out)
    }

    fn close(a: &[f32], b: &[f32], what: &str) {
        assert_eq!(a.len(), b.len(), "{what}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    }

    #[test]
    fn element_wise_ops() {
        let (_, _, x, _, y) = run(&[2, 3, 3], 2, Op::Relu, &[0]);
        close(
            &y,
            &x[0].iter().map(|v| v.max(0.0)).collect::<Vec<_>>(),
            "relu",
        );
        let (_, _, x, _, y) = run(&[2, 3, 3], 2, Op::LeakyRelu { alpha: 0.2 }, &[0]);
        close(
            &y,
            &x[0]
                .iter()
                .map(|&v| if v > 0.0 { v } else { 0.2 * v })
                .collect::<Vec<_>>(),
            "leaky-relu",
        );
        let (_, _, x, _, y) = run(&[2, 3, 3], 2, Op::Tanh, &[0]);
        close(
            &y,
            &x[0].iter().map(|v| v.tanh()).collect::<Vec<_>>(),
            "tanh",
        );
        let (_, _, x, _, y) = run(&[2, 3, 3], 2, Op::Scale { factor: 0.5 }, &[0]);
        close(
            &y,
            &x[0].iter().map(|v| 0.5 * v).collect::<Vec<_>>(),
            "scale",
        );
        let (_, _, x, _, y) = run(&[2, 3, 3], 2, Op::Add, &[0, 0]);
        close(
            &y,
            &x[0]
                .iter()
                .zip(&x[1])
                .map(|(a, b)| a + b)
                .collect::<Vec<_>>(),
            "add",
        );
        let (_, _, x, _, y) = run(&[2, 3], 2, Op::Flatten, &[0]);
        close(&y, &x[0], "flatten");
    }

    #[test]
    fn concat_stacks_channels_per_sample() {
        let (_, _, x, _, y) = run(&[2, 3], 2, Op::Concat, &[0, 0]);
        let mut expected = Vec::new();
        for b in 0..2 {
            expected.extend_from_slice(&x[0][b * 6..][..6]);
            expected.extend_from_slice(&x[1][b * 6..][..6]);
        }
        close(&y, &expected, "concat");
    }

    #[test]
    fn dense_is_a_matrix_product_plus_bias() {
        let (_, _, x, p, y) = run(
            &[5],
            3,
            Op::Dense {
                out_features: 4,
                bias: true,
            },
            &[0],
        );
        let mut expected = vec![0.0f32; 12];
        for b in 0..3 {
            for o in 0..4 {
                expected[b * 4 + o] = p[1][o]
                    + (0..5)
                        .map(|i| x[0][b * 5 + i] * p[0][o * 5 + i])
                        .sum::<f32>();
            }
        }
        close(&y, &expected, "dense");
    }

    /// Pooling by its definition: windows clipped to the input; average over the full
    /// window (padding counts, PyTorch's default).
    #[test]
    fn pooling_by_definition() {
        let mut p = Pool::new(&[3, 2]);
        p.stride = [2, 2].into_iter().collect();
        p.padding = Padding::Explicit([[1, 1], [0, 1]].into_iter().collect());
        for max in [true, false] {
            let op = if max {
                Op::max_pool(p.clone())
            } else {
                Op::avg_pool(p.clone())
            };
            let (g, _, x, _, y) = run(&[2, 5, 4], 2, op, &[0]);
            let out = g.layers()[1].output.dims().to_vec();
            let (ho, wo) = (out[1], out[2]);
            let mut expected = Vec::new();
            for plane in 0..4 {
                for oh in 0..ho {
                    for ow in 0..wo {
                        let mut vals = Vec::new();
                        for a in 0..3 {
                            for b in 0..2 {
                                let (h, w) = ((oh * 2 + a) as isize - 1, (ow * 2 + b) as isize);
                                if (0..5).contains(&h) && (0..4).contains(&w) {
                                    vals.push(x[0][plane * 20 + h as usize * 4 + w as usize]);
                                }
                            }
                        }
                        expected.push(if max {
                            vals.iter().copied().fold(f32::NEG_INFINITY, f32::max)
                        } else {
                            vals.iter().sum::<f32>() / 6.0
                        });
                    }
                }
            }
            close(&y, &expected, if max { "max-pool" } else { "avg-pool" });
        }
        let (_, _, x, _, y) = run(&[3, 2, 2], 2, Op::GlobalAvgPool, &[0]);
        close(
            &y,
            &x[0]
                .chunks(4)
                .map(|c| c.iter().sum::<f32>() / 4.0)
                .collect::<Vec<_>>(),
            "global-avg-pool",
        );
    }

    #[test]
    fn batch_norm_normalises_each_channel_over_the_batch() {
        let (_, _, x, p, y) = run(&[2, 3, 3], 4, Op::BatchNorm, &[0]);
        for (c, (gamma, beta)) in p[0].iter().zip(&p[1]).enumerate() {
            let idx: Vec<usize> = (0..4)
                .flat_map(|b| (0..9).map(move |i| (b * 2 + c) * 9 + i))
                .collect();
            let mean = idx.iter().map(|&i| f64::from(x[0][i])).sum::<f64>() / 36.0;
            let var = idx
                .iter()
                .map(|&i| (f64::from(x[0][i]) - mean).powi(2))
                .sum::<f64>()
                / 36.0;
            for &i in &idx {
                let expected = f64::from(*gamma) * (f64::from(x[0][i]) - mean)
                    / (var + f64::from(BN_EPS)).sqrt()
                    + f64::from(*beta);
                assert!(
                    (f64::from(y[i]) - expected).abs() < 1e-4,
                    "batch-norm {i}: {} vs {expected}",
                    y[i]
                );
            }
        }
        let (_, _, x, p, y) = run(&[2, 3], 2, Op::ChannelAffine, &[0]);
        let expected: Vec<f32> = (0..12)
            .map(|i| p[0][(i / 3) % 2] * x[0][i] + p[1][(i / 3) % 2])
            .collect();
        close(&y, &expected, "channel-affine");
    }

    #[test]
    fn tile_and_upsample_repeat_elements() {
        let (_, _, x, _, y) = run(
            &[1, 2, 3],
            1,
            Op::Tile {
                repeats: [2, 2].into_iter().collect(),
            },
            &[0],
        );
        let expected: Vec<f32> = (0..4)
            .flat_map(|h| (0..6).map(move |w| (h % 2) * 3 + w % 3))
            .map(|i| x[0][i])
            .collect();
        close(&y, &expected, "tile");
        let (_, _, x, _, y) = run(
            &[1, 2, 3],
            1,
            Op::Upsample {
                factor: [2, 3].into_iter().collect(),
            },
            &[0],
        );
        let expected: Vec<f32> = (0..4)
            .flat_map(|h| (0..9).map(move |w| (h / 2) * 3 + w / 3))
            .map(|i| x[0][i])
            .collect();
        close(&y, &expected, "upsample");
    }

    #[test]
    fn dropout_keeps_about_one_minus_rate_and_rescales() {
        let (_, _, x, _, y) = run(&[100, 100], 1, Op::Dropout { rate: 0.3 }, &[0]);
        let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / y.len() as f64;
        assert!((kept - 0.7).abs() < 0.02, "{kept}");
        for (a, b) in y.iter().zip(&x[0]) {
            assert!(*a == 0.0 || (a - b / 0.7).abs() < 1e-5);
        }
    }

    #[test]
    fn losses_by_definition() {
        let (_, _, x, _, y) = run(&[3, 2], 2, Op::SoftmaxCrossEntropy, &[0]);
        for b in 0..2 {
            let mut loss = 0.0f64;
            for pos in 0..2 {
                let logits: Vec<f64> = (0..3)
                    .map(|c| f64::from(x[0][b * 6 + c * 2 + pos]))
                    .collect();
                let z: f64 = logits.iter().map(|v| v.exp()).sum();
                loss -= (logits[label(9, b, pos, 3)].exp() / z).ln();
            }
            assert!(
                (f64::from(y[b]) - loss / 2.0).abs() < 1e-5,
                "cross-entropy {b}"
            );
        }
        let (_, _, x, _, y) = run(&[4], 2, Op::MseLoss, &[0]);
        for b in 0..2 {
            let loss: f32 = (0..4)
                .map(|i| (x[0][b * 4 + i] - target(9, b, i)).powi(2))
                .sum::<f32>()
                / 4.0;
            assert!((y[b] - loss).abs() < 1e-6, "mse {b}");
        }
    }

    /// Layer and RMS norms by their definitions, per sample and position over the
    /// channels (the rows the kernel reduces in parallel), with a row count past one
    /// parallel task's.
    #[test]
    fn norms_by_definition() {
        for (op, rms) in [(Op::LayerNorm, false), (Op::RmsNorm, true)] {
            let (c, vol, n) = (3000, 5, 2);
            let (_, _, x, p, y) = run(&[c, vol], n, op.clone(), &[0]);
            let mut expected = vec![0.0f32; n * c * vol];
            for b in 0..n {
                for pos in 0..vol {
                    let v: Vec<f64> = (0..c)
                        .map(|k| f64::from(x[0][(b * c + k) * vol + pos]))
                        .collect();
                    #[allow(clippy::cast_precision_loss)]
                    let cf = c as f64;
                    let mean = if rms { 0.0 } else { v.iter().sum::<f64>() / cf };
                    let var = v.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / cf;
                    let inv = 1.0 / (var + f64::from(seq::NORM_EPS)).sqrt();
                    for k in 0..c {
                        let shift = if rms { 0.0 } else { f64::from(p[1][k]) };
                        #[allow(clippy::cast_possible_truncation)]
                        {
                            expected[(b * c + k) * vol + pos] =
                                ((v[k] - mean) * inv * f64::from(p[0][k]) + shift) as f32;
                        }
                    }
                }
            }
            for (i, (a, e)) in y.iter().zip(&expected).enumerate() {
                assert!(
                    (a - e).abs() <= 1e-4 * (1.0 + e.abs()),
                    "{op:?} {i}: {a} {e}"
                );
            }
        }
    }

    /// A transposed convolution by its definition: each input element scatters
    /// `x * w[ci][co]` to output `i * stride - pad + k` (PyTorch's `ConvTranspose2d`).
    #[test]
    fn transposed_convolution_by_definition() {
        let op = Op::conv_transpose(
            Conv::new(2, &[3, 3])
                .stride(2)
                .pad(1)
                .output_padding(1)
                .bias(true),
        );
        let (g, _, x, p, y) = run(&[3, 3, 4], 1, op, &[0]);
        let out = g.layers()[1].output.dims().to_vec();
        assert_eq!(out, [2, 6, 8]);
        let mut expected = vec![0.0f32; 2 * 48];
        for co in 0..2 {
            expected[co * 48..][..48].fill(p[1][co]);
            for ci in 0..3 {
                for ih in 0..3 {
                    for iw in 0..4 {
                        for a in 0..3 {
                            for b in 0..3 {
                                let (h, w) = ((ih * 2 + a) as isize - 1, (iw * 2 + b) as isize - 1);
                                if (0..6).contains(&h) && (0..8).contains(&w) {
                                    expected[co * 48 + h as usize * 8 + w as usize] += x[0]
                                        [ci * 12 + ih * 4 + iw]
                                        * p[0][(ci * 2 + co) * 9 + a * 3 + b];
                                }
                            }
                        }
                    }
                }
            }
        }
        close(&y, &expected, "conv-transpose");
    }
}
