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

use ridgeline_model::graph::{Graph, Layer, Op};

use super::conv::{self, ConvGeom, add_channel_bias, channel_sums, three};
use super::random::uniform;
use super::saved::Aux;
use super::{moe, seq, window};

mod channel;
mod dense;
mod elementwise;
mod layout;
mod loss;
mod pool;

use self::channel::scale_channels;
use self::elementwise::Unary;
use self::layout::{Broadcast, map_tile, map_upsample};
use self::pool::PoolGeom;

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
    /// A unary element-wise op.
    Unary(Unary),
    /// Sum of inputs.
    Add,
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
            Op::Relu => Kernel::Unary(Unary::Relu),
            #[allow(clippy::cast_possible_truncation)]
            Op::LeakyRelu { alpha } => Kernel::Unary(Unary::LeakyRelu(*alpha as f32)),
            Op::Tanh => Kernel::Unary(Unary::Tanh),
            Op::Add => Kernel::Add,
            #[allow(clippy::cast_possible_truncation)]
            Op::Scale { factor } => Kernel::Unary(Unary::Scale(*factor as f32)),
            #[allow(clippy::cast_possible_truncation)]
            Op::Shift { offset } => Kernel::Unary(Unary::Shift(*offset as f32)),
            Op::Mul if input(1) != input(0) => Kernel::Gate {
                n,
                a: input(0).to_vec(),
                b: input(1).to_vec(),
            },
            Op::Mul => Kernel::Mul,
            Op::Sigmoid => Kernel::Unary(Unary::Sigmoid),
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
            Op::Clip { min, max } => Kernel::Unary(Unary::Clip(*min as f32, *max as f32)),
            Op::HardSwish => Kernel::Unary(Unary::HardSwish),
            #[allow(clippy::cast_possible_truncation)]
            Op::HardSigmoid { alpha, beta } => {
                Kernel::Unary(Unary::HardSigmoid(*alpha as f32, *beta as f32))
            }
            #[allow(clippy::cast_possible_truncation)]
            Op::Pow { exponent } => Kernel::Unary(Unary::Pow(*exponent as f32)),
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
            Op::Gelu => Kernel::Unary(Unary::Gelu),
            Op::Silu => Kernel::Unary(Unary::Silu),
            Op::Rotary { heads, theta } => Kernel::Rotary(seq::Rotary {
                n,
                heads: *heads,
                hidden: out[0],
                seq: out[1],
                theta: *theta,
            }),
            Op::Attention(a) => Kernel::attention(graph, layer, a, n),
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
            Op::Moe(m) => Kernel::moe(m, input(0), out, n),
        }
    }

    /// Attention of the form `a` at batch `n`: shifted windows on a map, else over a
    /// sequence (one stacked input, or queries, keys and values).
    fn attention(
        graph: &Graph,
        layer: &Layer,
        a: &ridgeline_model::graph::Attention,
        n: usize,
    ) -> Kernel {
        let out = layer.output.dims();
        if a.window > 0 {
            return Kernel::Window(window::Window {
                n,
                c: out[0],
                h: out[1],
                w: out[2],
                heads: a.heads,
                window: a.window,
                shift: a.shift,
            });
        }
        let input = |k: usize| graph.layers()[layer.inputs[k]].output.dims();
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

    /// A mixture of experts `m` on one sample's `input` (`[hidden, seq]`) at batch `n`,
    /// each expert's capacity in slots where the layer caps it.
    fn moe(m: &ridgeline_model::graph::Moe, input: &[usize], out: &[usize], n: usize) -> Kernel {
        let shape = ridgeline_model::graph::MoeShape::of(m, input);
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
            Kernel::Unary(u) => u.forward(x, out),
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
            } => dense::forward((*n, *input, *output, *bias), x, params, out, threads),
            Kernel::MaxPool(g) => g.max_forward(x, out),
            Kernel::AvgPool(g) => g.avg_forward(x, out),
            Kernel::GlobalAvgPool { vol, .. } => pool::global_avg_forward(*vol, x, out),
            Kernel::BatchNorm { n, c, vol } => {
                channel::batch_norm_forward((*n, *c, *vol), x, params, out, aux);
            }
            Kernel::ChannelAffine { c, vol, .. } => {
                channel::affine_forward((*c, *vol), x, params, out);
            }
            Kernel::ChannelScale { c, vol, .. } => scale_channels(out, x, &params[0], *c, *vol),
            Kernel::Narrow {
                n,
                c,
                start,
                len,
                vol,
            } => layout::narrow_forward((*n, *c, *start, *len, *vol), x, out),
            Kernel::Prepend { n, c, s, tokens } => {
                layout::prepend_forward((*n, *c, *s, *tokens), x, &params[0], out);
            }
            Kernel::PatchMerge { n, c, h, w } => layout::merge_forward((*n, *c, *h, *w), x, out),
            Kernel::Positions { elems, .. } => layout::positions_forward(*elems, x, params, out),
            Kernel::Shuffle { n, c, groups, vol } => {
                layout::shuffle_forward((*n, *c, *groups, *vol), x, out);
            }
            Kernel::Gate { n, a, b } => Broadcast::new(a, b).forward(*n, x, inputs[1], out),
            Kernel::Mul => elementwise::mul_forward(x, inputs[1], out),
            Kernel::Add => elementwise::add_forward(inputs, out),
            Kernel::Concat { n, channels, vol } => {
                layout::concat_forward(*n, channels, *vol, inputs, out);
            }
            Kernel::Tile { input, output, .. } => {
                layout::gather_forward(input, output, |p| map_tile(p, input, output), x, out);
            }
            Kernel::Upsample { input, factor, .. } => {
                let output = std::array::from_fn::<usize, 3, _>(|i| input[i] * factor[i]);
                let from = |p| map_upsample(p, input, &output, factor);
                layout::gather_forward(input, &output, from, x, out);
            }
            Kernel::Dropout { rate } => elementwise::dropout_forward(*rate, x, out, aux, seed),
            Kernel::Flatten => out.copy_from_slice(x),
            Kernel::SoftmaxCrossEntropy { n, c, vol } => {
                loss::softmax_cross_entropy_forward((*n, *c, *vol), x, out, aux, seed);
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
            Kernel::Rotary(r) => r.apply(x, out, false),
            Kernel::Attention(a) => a.forward(inputs, out, aux, threads, seed),
            Kernel::Window(w) => w.forward(x, params, out, aux, threads, seed),
            Kernel::Moe(m) => m.forward(x, params, out, &mut aux.moe, threads),
            Kernel::Rows(r) => r.forward(x, out),
            Kernel::Mse { n, elems } => loss::mse_forward(*n, *elems, x, out, seed),
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
            Kernel::Unary(u) => u.backward(x, out, dy, dx),
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
            } => dense::backward(
                (*n, *input, *output, *bias),
                x,
                dy,
                params,
                dx[0].as_deref_mut(),
                dparams,
                threads,
            ),
            Kernel::BatchNorm { n, c, vol } => {
                let d = dx[0].as_deref_mut();
                channel::batch_norm_backward((*n, *c, *vol), x, dy, params, aux, d, dparams);
            }
            Kernel::ChannelScale { n, c, vol } => {
                let d = dx[0].as_deref_mut();
                channel::scale_backward((*n, *c, *vol), x, dy, params, d, dparams);
            }
            Kernel::ChannelAffine { n, c, vol } => {
                let d = dx[0].as_deref_mut();
                channel::affine_backward((*n, *c, *vol), x, dy, params, d, dparams);
            }
            Kernel::Prepend { n, c, s, tokens } => {
                let d = dx[0].as_deref_mut();
                layout::prepend_backward((*n, *c, *s, *tokens), dy, &mut dparams[0], d);
            }
            Kernel::Positions { elems, .. } => {
                layout::positions_backward(*elems, dy, dx[0].as_deref_mut(), dparams);
            }
            Kernel::Gate { n, a, b } => Broadcast::new(a, b).backward(*n, x, inputs[1], dy, dx),
            Kernel::Mul => elementwise::mul_backward(x, inputs[1], dy, dx),
            Kernel::Add => elementwise::add_backward(dy, dx),
            Kernel::Concat { n, channels, vol } => {
                layout::concat_backward(*n, channels, *vol, dy, dx);
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
            // The kernels whose backward is the first input's gradient alone.
            _ => {
                if let Some(d) = dx[0].as_deref_mut() {
                    self.input_gradient(x, out, dy, aux, d, seed);
                }
            }
        }
    }

    /// The backward pass of a kernel with one input and no parameters: the input's
    /// gradient `d` from the output gradient `dy` (and what forward kept). The others run
    /// in [`Kernel::backward`].
    fn input_gradient(
        &self,
        x: &[f32],
        out: &[f32],
        dy: &[f32],
        aux: &Aux,
        d: &mut [f32],
        seed: u64,
    ) {
        match self {
            Kernel::MaxPool(g) => {
                g.max_backward(x, dy, d);
            }
            Kernel::AvgPool(g) => {
                g.avg_backward(dy, d);
            }
            Kernel::GlobalAvgPool { vol, .. } => {
                pool::global_avg_backward(*vol, dy, d);
            }
            Kernel::Narrow {
                n,
                c,
                start,
                len,
                vol,
            } => {
                layout::narrow_backward((*n, *c, *start, *len, *vol), dy, d);
            }
            Kernel::PatchMerge { n, c, h, w } => {
                layout::merge_backward((*n, *c, *h, *w), dy, d);
            }
            Kernel::Shuffle { n, c, groups, vol } => {
                layout::shuffle_backward((*n, *c, *groups, *vol), dy, d);
            }
            Kernel::Tile { input, output, .. } => {
                layout::gather_backward(input, output, |p| map_tile(p, input, output), dy, d);
            }
            Kernel::Upsample { input, factor, .. } => {
                let output = std::array::from_fn::<usize, 3, _>(|i| input[i] * factor[i]);
                let from = |p| map_upsample(p, input, &output, factor);
                layout::gather_backward(input, &output, from, dy, d);
            }
            Kernel::Dropout { rate } => {
                elementwise::dropout_backward(*rate, dy, aux, d);
            }
            Kernel::Flatten => {
                d.copy_from_slice(dy);
            }
            Kernel::SoftmaxCrossEntropy { n, c, vol } => {
                loss::softmax_cross_entropy_backward((*n, *c, *vol), dy, aux, d, seed);
            }
            Kernel::Softmax(g) => {
                g.backward(out, dy, d);
            }
            // The rotation's adjoint: the same rotation backwards.
            Kernel::Rotary(r) => {
                r.apply(dy, d, true);
            }
            Kernel::Rows(r) => {
                r.backward(dy, d);
            }
            Kernel::Mse { n, elems } => {
                loss::mse_backward(*n, *elems, x, dy, d, seed);
            }
            Kernel::Input
            | Kernel::Conv { .. }
            | Kernel::ConvTranspose { .. }
            | Kernel::Dense { .. }
            | Kernel::BatchNorm { .. }
            | Kernel::ChannelAffine { .. }
            | Kernel::ChannelScale { .. }
            | Kernel::Unary(_)
            | Kernel::Add
            | Kernel::Mul
            | Kernel::Gate { .. }
            | Kernel::Prepend { .. }
            | Kernel::Positions { .. }
            | Kernel::Concat { .. }
            | Kernel::Linear { .. }
            | Kernel::MatMul(_)
            | Kernel::Embedding(_)
            | Kernel::Norm(_)
            | Kernel::Attention(_)
            | Kernel::Window(_)
            | Kernel::Moe(_) => {}
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

/// Forward passes against textbook definitions on tiny shapes (the backward passes are
/// checked against these forward passes by finite differences in `gradcheck`).
#[cfg(test)]
mod tests {
    use ridgeline_model::graph::{Conv, Padding, Pool};

    use super::channel::BN_EPS;
    use super::loss::{label, target};
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
