//! Layer operations, their parameters, and shape inference with validation.
//!
//! Output-size rules are the frameworks' (PyTorch `Conv*d`/`ConvTranspose*d`/`*Pool*d`
//! documentation; TensorFlow's `'same'` padding rule, which pads `total / 2` before and the
//! rest after, so an even kernel pads 0 before and 1 after as the CosmoFlow reference notes).

use smallvec::{SmallVec, smallvec};

use super::shape::Dims;

/// `[before, after]` padding pairs, one per spatial dimension, stored inline.
pub type PadPairs = SmallVec<[[usize; 2]; 4]>;

/// Padding of a convolution or pooling window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Padding {
    /// TensorFlow `'same'`: output size `ceil(in / stride)`, padding split `total / 2`
    /// before and the rest after.
    Same,
    /// No padding.
    Valid,
    /// Explicit `[before, after]` per spatial dimension.
    Explicit(PadPairs),
}

impl Padding {
    /// Symmetric padding `p` on each of `rank` spatial dimensions (PyTorch's `padding=p`).
    pub fn symmetric(p: usize, rank: usize) -> Self {
        Padding::Explicit(smallvec![[p, p]; rank])
    }

    /// The explicit `[before, after]` pairs once resolved (empty for unresolved forms).
    pub fn pairs(&self) -> &[[usize; 2]] {
        match self {
            Padding::Explicit(p) => p,
            Padding::Same | Padding::Valid => &[],
        }
    }
}

/// Parameters of an N-d convolution or transposed convolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Conv {
    /// Output channels.
    pub out_channels: usize,
    /// Kernel extent per spatial dimension; its length is the spatial rank (1, 2 or 3).
    pub kernel: Dims,
    /// Stride per spatial dimension.
    pub stride: Dims,
    /// Padding; resolved to [`Padding::Explicit`] once the layer is in a graph.
    pub padding: Padding,
    /// Dilation per spatial dimension.
    pub dilation: Dims,
    /// Groups: 1 for a dense convolution, `C_in` for depthwise.
    pub groups: usize,
    /// Whether the layer has a bias vector.
    pub bias: bool,
    /// Transposed convolution only: extra size added to one side of the output.
    pub output_padding: Dims,
}

impl Conv {
    /// A convolution with `out_channels` and `kernel`, stride 1, no padding, dilation 1,
    /// one group, with bias (the frameworks' defaults).
    pub fn new(out_channels: usize, kernel: &[usize]) -> Self {
        let rank = kernel.len();
        Conv {
            out_channels,
            kernel: Dims::from_slice(kernel),
            stride: smallvec![1; rank],
            padding: Padding::Valid,
            dilation: smallvec![1; rank],
            groups: 1,
            bias: true,
            output_padding: smallvec![0; rank],
        }
    }

    /// Sets the same stride on every dimension.
    pub fn stride(mut self, s: usize) -> Self {
        self.stride = smallvec![s; self.kernel.len()];
        self
    }

    /// Sets the padding.
    pub fn padding(mut self, p: Padding) -> Self {
        self.padding = p;
        self
    }

    /// Sets symmetric padding `p` on every dimension.
    pub fn pad(self, p: usize) -> Self {
        let rank = self.kernel.len();
        self.padding(Padding::symmetric(p, rank))
    }

    /// Sets the same dilation on every dimension.
    pub fn dilation(mut self, d: usize) -> Self {
        self.dilation = smallvec![d; self.kernel.len()];
        self
    }

    /// Sets the group count.
    pub fn groups(mut self, g: usize) -> Self {
        self.groups = g;
        self
    }

    /// Sets whether the layer has a bias.
    pub fn bias(mut self, b: bool) -> Self {
        self.bias = b;
        self
    }

    /// Sets the same output padding on every dimension (transposed convolution).
    pub fn output_padding(mut self, p: usize) -> Self {
        self.output_padding = smallvec![p; self.kernel.len()];
        self
    }
}

/// Parameters of a max or average pooling window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    /// Window extent per spatial dimension.
    pub kernel: Dims,
    /// Stride per spatial dimension (the frameworks default it to the kernel).
    pub stride: Dims,
    /// Padding; resolved to [`Padding::Explicit`] once the layer is in a graph.
    pub padding: Padding,
}

impl Pool {
    /// A window of `kernel` with stride equal to the kernel and no padding.
    pub fn new(kernel: &[usize]) -> Self {
        let kernel = Dims::from_slice(kernel);
        Pool {
            stride: kernel.clone(),
            kernel,
            padding: Padding::Valid,
        }
    }
}

/// What a layer computes.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// The input sample (always node 0 of a graph).
    Input,
    /// N-d convolution (1-, 2- or 3-d), incl. strided, padded, dilated, grouped, depthwise.
    /// (Boxed: it is by far the largest variant, and layers are moved around often.)
    Conv(Box<Conv>),
    /// N-d transposed convolution (the adjoint of [`Op::Conv`]).
    ConvTranspose(Box<Conv>),
    /// Fully connected layer on the flattened input.
    Dense {
        /// Output features.
        out_features: usize,
        /// Whether the layer has a bias vector.
        bias: bool,
    },
    /// Max pooling.
    MaxPool(Box<Pool>),
    /// Average pooling.
    AvgPool(Box<Pool>),
    /// Global average pooling to `[C, 1, ..., 1]`.
    GlobalAvgPool,
    /// Batch normalisation over the channel dimension (trainable scale and shift).
    BatchNorm,
    /// Per-channel trainable scale and shift without statistics (DeepCAM's `TrainableAffine`).
    ChannelAffine,
    /// A per-channel trainable scale (ConvNeXt's layer scale).
    ChannelScale,
    /// Rectified linear unit.
    Relu,
    /// Leaky ReLU with negative slope `alpha`.
    LeakyRelu {
        /// Negative slope.
        alpha: f64,
    },
    /// Hyperbolic tangent.
    Tanh,
    /// Element-wise sum of two or more inputs of the same shape.
    Add,
    /// Multiplication by a constant.
    Scale {
        /// The constant.
        factor: f64,
    },
    /// Addition of a constant.
    Shift {
        /// The constant.
        offset: f64,
    },
    /// Element-wise product of two inputs: of the same shape, or the second broadcast
    /// along the dimensions where it has extent 1 (a squeeze-and-excitation gate `[C, 1, 1]`
    /// on a feature map `[C, H, W]`).
    Mul,
    /// The logistic sigmoid.
    Sigmoid,
    /// The input clamped to `[min, max]` (ONNX `Clip`; ReLU6 is `[0, 6]`).
    Clip {
        /// Lower bound.
        min: f64,
        /// Upper bound.
        max: f64,
    },
    /// Hard swish, `x relu6(x + 3) / 6` (Howard et al. 2019, MobileNetV3).
    HardSwish,
    /// Hard sigmoid, `max(0, min(1, alpha x + beta))` (ONNX `HardSigmoid`; PyTorch's
    /// `Hardsigmoid` is `alpha = 1/6`, `beta = 1/2`).
    HardSigmoid {
        /// Slope.
        alpha: f64,
        /// Offset.
        beta: f64,
    },
    /// Element-wise power with a constant exponent.
    Pow {
        /// The exponent.
        exponent: f64,
    },
    /// Concatenation of two or more inputs along channels.
    Concat,
    /// Channels `start .. start + len` of the input (a chunk of it, ShuffleNetV2's split).
    Narrow {
        /// First channel.
        start: usize,
        /// Channels kept.
        len: usize,
    },
    /// The channel shuffle of ShuffleNet (Zhang et al. 2018): channels seen as `groups` rows
    /// of `C / groups`, transposed, so that channel `i C / groups + j` moves to `j groups + i`.
    ChannelShuffle {
        /// Groups.
        groups: usize,
    },
    /// Repetition of the input along each spatial dimension.
    Tile {
        /// Repeats per spatial dimension.
        repeats: Dims,
    },
    /// Nearest-neighbour upsampling by an integer factor per spatial dimension.
    Upsample {
        /// Factor per spatial dimension.
        factor: Dims,
    },
    /// Dropout with drop probability `rate`.
    Dropout {
        /// Drop probability in [0, 1).
        rate: f64,
    },
    /// Flattening to a feature vector (a view: no data moves).
    Flatten,
    /// A feature map's positions as one sequence, `[C, P1, P2, ...] -> [C, P1 x P2 x ...]`
    /// in row-major order (a view: no data moves; ViT's patches, Dosovitskiy et al. 2021).
    FlattenPositions,
    /// Learned tokens put before a sequence's positions, `[H, S] -> [H, tokens + S]`, with
    /// `tokens x H` parameters (ViT's and BERT's class token).
    PrependTokens {
        /// Tokens put first.
        tokens: usize,
    },
    /// Swin's patch merging before its layer norm and linear layer: each 2 x 2 block of a
    /// map's positions stacked on the channels, `[C, H, W] -> [4 C, H / 2, W / 2]`, in
    /// torchvision's order (the block's `(0, 0)`, `(1, 0)`, `(0, 1)`, `(1, 1)` positions,
    /// row then column); a copy.
    PatchMerge,
    /// A learned tensor of the input's shape added to it, `[H, S] -> [H, S]`, with `H x S`
    /// parameters (ViT's learned absolute position embedding).
    PositionEmbedding,
    /// Softmax over channels followed by cross-entropy (per position for segmentation).
    SoftmaxCrossEntropy,
    /// Mean squared error against a target of the input's shape.
    MseLoss,
    /// A linear layer applied at every position: `[C, P...] -> [out_features, P...]` (a
    /// transformer's projections over a sequence `[hidden, seq]`; on a feature vector, a
    /// dense layer).
    Linear {
        /// Output features.
        out_features: usize,
        /// Whether the layer has a bias vector.
        bias: bool,
        /// Whether its weights are another layer's (a language model's head tied to its
        /// token embeddings): it reads them and adds to their gradient, but owns none.
        tied: bool,
    },
    /// Batched product of two activations: `[B..., m, k] x [B..., k, n] -> [B..., m, n]`,
    /// with the same leading dimensions (no broadcasting).
    MatMul,
    /// A table of `num_embeddings` rows of `embedding_dim` looked up by index:
    /// `[P...]` ids -> `[embedding_dim, P...]`. Its gradient is sparse: the looked-up rows,
    /// accumulated into the table's gradient.
    Embedding {
        /// Rows of the table (the vocabulary).
        num_embeddings: usize,
        /// Features per row.
        embedding_dim: usize,
    },
    /// Layer normalisation over the channels at every position, with a trainable scale
    /// and shift per channel.
    LayerNorm,
    /// Root-mean-square normalisation over the channels at every position, with a
    /// trainable scale per channel.
    RmsNorm,
    /// Softmax over the channels at every position.
    Softmax,
    /// Gaussian error linear unit.
    Gelu,
    /// Sigmoid linear unit (swish).
    Silu,
    /// Rotary position embedding (Su et al. 2021) of queries or keys `[H, S]` split into
    /// `heads` of `H / heads` channels: each head's channel `i` and `i + d / 2` rotated by
    /// the angle `s theta^(-2i / d)` at position `s` (Hugging Face's `rotate_half` form).
    /// No parameters.
    Rotary {
        /// Heads the channels split into.
        heads: usize,
        /// The base of the rotation frequencies (`rope_theta`).
        theta: f64,
    },
    /// Multi-head scaled dot-product attention over sequences: one input `[3 H, S]` (the
    /// query, key and value projections stacked on channels) or three, `[H, S]`,
    /// `[H, S_kv]`, `[H, S_kv]`; output `[H, S]`. `H` splits into `heads` of `H / heads`.
    Attention(Attention),
    /// Rows of the input picked by an index of `edges` entries: node features `[F, N]` to
    /// edge features `[F, E]` (a graph network's messages from their source nodes).
    Gather {
        /// Entries of the index (edges).
        edges: usize,
    },
    /// Rows summed into `nodes` destinations by an index: edge features `[F, E]` to node
    /// features `[F, N]`.
    ScatterAdd {
        /// Rows of the output (nodes).
        nodes: usize,
    },
    /// Sums of `segments` contiguous runs of rows (a sorted index): `[F, E] -> [F, S]` (a
    /// graph network's readout per graph).
    SegmentSum {
        /// Runs (segments).
        segments: usize,
    },
    /// A mixture-of-experts feed-forward layer over sequences `[H, S] -> [H, S]` (Shazeer et
    /// al. 2017; Mixtral's `MixtralSparseMoeBlock`): a router (a linear layer of `experts`
    /// outputs, no bias) scores every token, each token goes to its `top_k` experts with
    /// the softmax weights renormalised over them, each expert is a feed-forward network
    /// (`w2(act(w1 x) * w3 x)` gated, `w2(act(w1 x))` plain, no biases), and each token's
    /// output is its experts' outputs weighted and summed.
    Moe(Moe),
}

/// The parameters of a mixture-of-experts layer ([`Op::Moe`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Moe {
    /// Experts of the layer: the router's outputs.
    pub experts: usize,
    /// Experts this rank holds: `experts`, or its share under expert parallelism (the
    /// tokens routed to the others leave by an all-to-all the graph does not hold, and as
    /// many come in).
    pub local: usize,
    /// Experts each token goes to.
    pub top_k: usize,
    /// Inner size of each expert's feed-forward network (this rank's share under tensor
    /// parallelism).
    pub ffn: usize,
    /// Gated (SwiGLU-style, three projections) or plain (two).
    pub gated: bool,
    /// The experts' activation.
    pub activation: ExpertActivation,
    /// The most tokens an expert takes, as a multiple of its even share
    /// (`capacity_factor x S x top_k / experts`, rounded up); the experts compute every
    /// slot of their capacity, padded (GShard's and Switch's dispatch), and the tokens
    /// beyond it are dropped. `None`: dropless (Mixtral, MegaBlocks): every token's
    /// `top_k` experts compute it.
    pub capacity_factor: Option<f64>,
}

/// The activation inside a mixture-of-experts layer's experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertActivation {
    /// SiLU (Mixtral's SwiGLU).
    Silu,
    /// GELU (the erf form).
    Gelu,
    /// ReLU (Switch Transformer).
    Relu,
}

impl ExpertActivation {
    /// Every activation, in the order its file spellings are listed.
    pub const ALL: [ExpertActivation; 3] = [
        ExpertActivation::Silu,
        ExpertActivation::Gelu,
        ExpertActivation::Relu,
    ];

    /// Its spelling in workload files, which is also the op kind it runs as.
    pub fn name(self) -> &'static str {
        match self {
            ExpertActivation::Silu => "silu",
            ExpertActivation::Gelu => "gelu",
            ExpertActivation::Relu => "relu",
        }
    }
}

/// The sizes a mixture-of-experts layer works on, per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeShape {
    /// Channels of the tokens.
    pub hidden: u64,
    /// Tokens.
    pub seq: u64,
    /// Token slots the rank's experts compute: `seq x top_k` dropless, `experts x
    /// capacity` with a capacity factor (under expert parallelism a rank sends its tokens'
    /// slots out and takes as many in, so the count is the same).
    pub slots: u64,
    /// Projections per expert: 3 gated, 2 plain.
    pub projections: u64,
}

impl MoeShape {
    /// The sizes of `m` reading `input` (`[H, S]`).
    pub fn of(m: &Moe, input: &[usize]) -> MoeShape {
        let (hidden, seq) = match input {
            [h, s] => (*h as u64, *s as u64),
            _ => (0, 0),
        };
        let routed = seq * m.top_k as u64;
        let slots = match m.capacity_factor {
            None => routed,
            Some(cf) => {
                let experts = m.experts.max(1) as u64;
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                let capacity = (cf * routed as f64 / experts as f64).ceil() as u64;
                experts * capacity
            }
        };
        MoeShape {
            hidden,
            seq,
            slots,
            projections: if m.gated { 3 } else { 2 },
        }
    }

    /// Rows each of the rank's `local` experts computes (an even share of the slots).
    pub fn rows_per_expert(&self, local: usize) -> f64 {
        self.slots as f64 / local.max(1) as f64
    }
}

/// The parameters of an attention layer ([`Op::Attention`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    /// Heads.
    pub heads: usize,
    /// Heads of the keys and values: `heads` (multi-head attention), or fewer that groups
    /// of query heads share (grouped-query attention, Ainslie et al. 2023; one is
    /// multi-query). Eager frameworks copy each to its group's heads before the products
    /// (Hugging Face's `repeat_kv`).
    pub kv_heads: usize,
    /// Whether each query attends only to keys at or before its position.
    pub causal: bool,
    /// Dropout probability on the attention weights, in [0, 1).
    pub dropout: f64,
    /// Fused (flash) attention: one kernel that never writes the score matrix, saves only
    /// the output and a log-sum-exp per row, and recomputes the scores in backward.
    /// Unfused: `QK^T`, scale, mask, softmax, dropout and `AV` as separate kernels, as
    /// frameworks' eager attention runs them.
    pub fused: bool,
    /// How unfused attention masks its scores (a kernel over the whole score matrix each);
    /// fused attention masks inside its kernel.
    pub mask: ScoreMask,
    /// Whether unfused attention clamps its masked scores at the type's minimum
    /// (`torch.max(scores, finfo.min)`, as Hugging Face's OPT does), a kernel forward and
    /// the five of `maximum`'s gradient backward.
    pub clamp: bool,
    /// Whether the `1 / sqrt(d)` scale multiplies the queries before `QK^T` (OPT) rather
    /// than the scores after it: a kernel over the queries, not over the score matrix.
    pub scale_queries: bool,
    /// Shifted-window attention (Swin, Liu et al. 2021) where above 0: the one stacked
    /// input is a map `[3 C, H, W]`, rolled by `-shift` positions along both axes, split
    /// into windows of `window x window` positions that each attend within themselves,
    /// with a learned relative position bias (`(2 window - 1)^2 x heads` parameters) added
    /// to the scores and, where shifted, the scores of positions the roll brought together
    /// masked; the output `[C, H, W]` is rolled back. 0: attention over the whole sequence.
    pub window: usize,
    /// The shifted windows' roll, in positions along each axis (below `window`).
    pub shift: usize,
}

/// How unfused attention applies its mask to the scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreMask {
    /// No mask kernel (a model without padding or causal mask).
    None,
    /// A select against a boolean mask (`torch.where(mask, scores, min)`, GPT-2's causal
    /// mask): a kernel forward and one backward.
    Select,
    /// The sum with an additive mask of zeros and the type's minimum, broadcast over heads
    /// (BERT's padding mask, OPT's causal mask): a kernel forward; backward passes the
    /// gradient through.
    Add,
}

impl ScoreMask {
    /// Every form, in the order its file spellings are listed.
    pub const ALL: [ScoreMask; 3] = [ScoreMask::None, ScoreMask::Select, ScoreMask::Add];

    /// Its spelling in workload files.
    pub fn name(self) -> &'static str {
        match self {
            ScoreMask::None => "none",
            ScoreMask::Select => "select",
            ScoreMask::Add => "add",
        }
    }

    /// The form a causal or non-causal attention has unless a file says otherwise.
    pub fn default_for(causal: bool) -> ScoreMask {
        if causal {
            ScoreMask::Select
        } else {
            ScoreMask::None
        }
    }
}

impl Attention {
    /// Attention with the mask its causality implies (a select where causal), no clamp,
    /// and the scale on the scores.
    pub fn new(heads: usize, causal: bool, dropout: f64, fused: bool) -> Attention {
        Attention {
            heads,
            kv_heads: heads,
            causal,
            dropout,
            fused,
            mask: ScoreMask::default_for(causal),
            clamp: false,
            scale_queries: false,
            window: 0,
            shift: 0,
        }
    }

    /// Windows per sample of a shifted-window attention reading a map `[3 C, H, W]`
    /// (1 for attention over a sequence).
    pub fn windows(&self, input: &[usize]) -> usize {
        match input {
            [_, h, w] if self.window > 0 => (h / self.window) * (w / self.window),
            _ => 1,
        }
    }

    /// The relative position bias table's parameters (0 without windows).
    pub fn bias_params(&self) -> u64 {
        if self.window == 0 {
            return 0;
        }
        let side = 2 * self.window as u64 - 1;
        side * side * self.heads as u64
    }
}

/// The sizes an attention layer works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    /// Channels of queries (and of keys and values once copied to every head):
    /// `heads x head_dim`.
    pub hidden: u64,
    /// Channels of the keys and values as the layer reads them (`kv_heads x head_dim`).
    pub kv_hidden: u64,
    /// Query positions.
    pub seq: u64,
    /// Key and value positions.
    pub seq_kv: u64,
    /// Heads.
    pub heads: u64,
    /// Query-key pairs whose score is computed, per head: all `seq x seq_kv` unless the
    /// attention is fused and causal, which skips the pairs a query may not see.
    pub pairs: u64,
    /// Query-key pairs of the whole score matrix, per head (`seq x seq_kv`).
    pub scores: u64,
}

impl AttentionShape {
    /// The sizes of attention `a` reading `inputs` (their per-sample dims); `None` if the
    /// inputs are not those of an attention layer (checked when the layer was added).
    pub fn of(a: &Attention, inputs: &[&[usize]]) -> Option<AttentionShape> {
        let (hidden, kv_hidden, seq, seq_kv) = match inputs {
            // Each window's heads are heads of their own over its positions.
            [map] if map.len() == 3 && a.window > 0 => {
                let hidden = map[0] / 3 * a.windows(map);
                let s = a.window * a.window;
                return Some(AttentionShape {
                    hidden: hidden as u64,
                    kv_hidden: hidden as u64,
                    seq: s as u64,
                    seq_kv: s as u64,
                    heads: (a.heads * a.windows(map)) as u64,
                    pairs: (s * s) as u64,
                    scores: (s * s) as u64,
                });
            }
            [qkv] if qkv.len() == 2 => (qkv[0] / 3, qkv[0] / 3, qkv[1], qkv[1]),
            [q, k, _] if q.len() == 2 && k.len() == 2 => (q[0], k[0], q[1], k[1]),
            _ => return None,
        };
        let (seq, seq_kv) = (seq as u64, seq_kv as u64);
        let scores = seq * seq_kv;
        // A causal query i (of seq) sees the keys up to i + (seq_kv - seq).
        let pairs = if a.causal && a.fused {
            (0..seq)
                .map(|i| (i + 1 + seq_kv.saturating_sub(seq)).min(seq_kv))
                .sum()
        } else {
            scores
        };
        Some(AttentionShape {
            hidden: hidden as u64,
            kv_hidden: kv_hidden as u64,
            seq,
            seq_kv,
            heads: a.heads as u64,
            pairs,
            scores,
        })
    }

    /// Channels per head.
    pub fn head_dim(&self) -> u64 {
        self.hidden / self.heads.max(1)
    }

    /// Whether the keys and values have fewer heads than the queries (grouped-query
    /// attention), so that an eager framework copies them to every head first.
    pub fn grouped(&self) -> bool {
        self.kv_hidden < self.hidden
    }
}

impl Op {
    /// A convolution.
    pub fn conv(c: Conv) -> Op {
        Op::Conv(Box::new(c))
    }

    /// A transposed convolution.
    pub fn conv_transpose(c: Conv) -> Op {
        Op::ConvTranspose(Box::new(c))
    }

    /// Max pooling.
    pub fn max_pool(p: Pool) -> Op {
        Op::MaxPool(Box::new(p))
    }

    /// Average pooling.
    pub fn avg_pool(p: Pool) -> Op {
        Op::AvgPool(Box::new(p))
    }

    /// The op's name in workload files and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Input => "input",
            Op::Conv(_) => "conv",
            Op::ConvTranspose(_) => "conv-transpose",
            Op::Dense { .. } => "dense",
            Op::MaxPool(_) => "max-pool",
            Op::AvgPool(_) => "avg-pool",
            Op::GlobalAvgPool => "global-avg-pool",
            Op::BatchNorm => "batch-norm",
            Op::ChannelAffine => "channel-affine",
            Op::ChannelScale => "channel-scale",
            Op::Relu => "relu",
            Op::LeakyRelu { .. } => "leaky-relu",
            Op::Tanh => "tanh",
            Op::Add => "add",
            Op::Scale { .. } => "scale",
            Op::Shift { .. } => "shift",
            Op::Mul => "mul",
            Op::Sigmoid => "sigmoid",
            Op::Clip { .. } => "clip",
            Op::HardSwish => "hard-swish",
            Op::HardSigmoid { .. } => "hard-sigmoid",
            Op::Pow { .. } => "pow",
            Op::Concat => "concat",
            Op::Narrow { .. } => "narrow",
            Op::ChannelShuffle { .. } => "channel-shuffle",
            Op::Tile { .. } => "tile",
            Op::Upsample { .. } => "upsample",
            Op::Dropout { .. } => "dropout",
            Op::Flatten => "flatten",
            Op::FlattenPositions => "flatten-positions",
            Op::PrependTokens { .. } => "prepend-tokens",
            Op::PositionEmbedding => "position-embedding",
            Op::PatchMerge => "patch-merge",
            Op::SoftmaxCrossEntropy => "softmax-cross-entropy",
            Op::MseLoss => "mse-loss",
            Op::Linear { .. } => "linear",
            Op::MatMul => "matmul",
            Op::Embedding { .. } => "embedding",
            Op::LayerNorm => "layer-norm",
            Op::RmsNorm => "rms-norm",
            Op::Softmax => "softmax",
            Op::Gelu => "gelu",
            Op::Silu => "silu",
            Op::Rotary { .. } => "rotary",
            Op::Attention(_) => "attention",
            Op::Gather { .. } => "gather",
            Op::ScatterAdd { .. } => "scatter-add",
            Op::SegmentSum { .. } => "segment-sum",
            Op::Moe(_) => "moe",
        }
    }

    /// Whether the op is a matrix op (runs on GEMM / tensor units) rather than a vector op.
    /// Attention counts as one: its products are nearly all its FLOPs.
    pub fn is_matrix(&self) -> bool {
        matches!(
            self,
            Op::Conv(_)
                | Op::ConvTranspose(_)
                | Op::Dense { .. }
                | Op::Linear { .. }
                | Op::MatMul
                | Op::Attention(_)
                | Op::Moe(_)
        )
    }

    /// Whether the op is a view of its input (no data moves, no kernel runs, no gradient
    /// is computed of its own: its output's gradient is its input's).
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Flatten | Op::FlattenPositions)
    }

    /// Whether the op is a loss.
    pub fn is_loss(&self) -> bool {
        matches!(self, Op::SoftmaxCrossEntropy | Op::MseLoss)
    }

    /// Weights (without bias) and multiply-accumulates per sample of a matrix op reading
    /// `inputs` and producing `output`; `None` for other ops or if a count overflows `u64`.
    ///
    /// A convolution applies its `C_out (C_in / g) prod(k)` weights at every output
    /// position; a transposed convolution its `C_in (C_out / g) prod(k)` weights at every
    /// input position (its adjoint); a dense layer its `in x out` weights once; a linear
    /// layer its `C x out` weights at every position; a product of activations has no
    /// weights and `prod(a) x n` multiply-accumulates; attention `2 x S x S_kv x H` (`QK^T`
    /// and `AV`, whether or not a fused kernel skips the pairs a causal mask hides).
    pub fn matrix_size(&self, inputs: &[&[usize]], output: &[usize]) -> Option<(u64, u64)> {
        let product = |d: &[usize]| d.iter().try_fold(1u64, |acc, &x| acc.checked_mul(x as u64));
        let input = *inputs.first()?;
        let (weights, positions) = match self {
            Op::Conv(c) => {
                let per_out = (input[0] / c.groups) as u64;
                let w = product(&c.kernel)?
                    .checked_mul(per_out)?
                    .checked_mul(c.out_channels as u64)?;
                (w, product(&output[1..])?)
            }
            Op::ConvTranspose(c) => {
                let per_in = (c.out_channels / c.groups) as u64;
                let w = product(&c.kernel)?
                    .checked_mul(per_in)?
                    .checked_mul(input[0] as u64)?;
                (w, product(&input[1..])?)
            }
            Op::Dense { out_features, .. } => {
                (product(input)?.checked_mul(*out_features as u64)?, 1)
            }
            Op::Linear { out_features, .. } => (
                (input[0] as u64).checked_mul(*out_features as u64)?,
                product(&input[1..])?,
            ),
            Op::MatMul => {
                return Some((0, product(input)?.checked_mul(*output.last()? as u64)?));
            }
            Op::Attention(a) => {
                let s = AttentionShape::of(a, inputs)?;
                return Some((0, s.scores.checked_mul(s.hidden)?.checked_mul(2)?));
            }
            // The router's `H x E` weights at every token, and each expert's projections
            // (`H x F` each) at the slots routed to it.
            Op::Moe(m) => {
                let s = MoeShape::of(m, input);
                let expert = s
                    .projections
                    .checked_mul(s.hidden)?
                    .checked_mul(m.ffn as u64)?;
                let router = s.hidden.checked_mul(m.experts as u64)?;
                let weights = expert.checked_mul(m.local as u64)?.checked_add(router)?;
                let macs = router
                    .checked_mul(s.seq)?
                    .checked_add(expert.checked_mul(s.slots)?)?;
                return Some((weights, macs));
            }
            _ => return None,
        };
        Some((weights, weights.checked_mul(positions)?))
    }

    /// Checks that the op has as many inputs as it takes (the input layer takes none: it is
    /// implicit).
    fn check_arity(&self, inputs: &[&[usize]]) -> Result<(), String> {
        let arity = match self {
            Op::Input => return Err(INPUT_IS_IMPLICIT.into()),
            Op::Add | Op::Concat => None,
            Op::MatMul | Op::Mul => Some(2),
            Op::Attention(_) if inputs.len() == 3 => Some(3),
            _ => Some(1),
        };
        match arity {
            Some(n) if inputs.len() != n => {
                return Err(format!(
                    "op `{}` takes exactly {n} input, got {}",
                    self.kind(),
                    inputs.len()
                ));
            }
            None if inputs.len() < 2 => {
                return Err(format!(
                    "op `{}` takes two or more inputs, got {}",
                    self.kind(),
                    inputs.len()
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks the op against its input shapes, resolves `Same`/`Valid` padding to explicit
    /// pairs, and returns the output shape. The error message names the offending field.
    pub(crate) fn resolve(&mut self, inputs: &[&[usize]]) -> Result<Dims, String> {
        self.check_arity(inputs)?;
        let x = inputs[0];
        match self {
            Op::Input => Err(INPUT_IS_IMPLICIT.into()),
            Op::Conv(c) => conv_output(c, x, false),
            Op::ConvTranspose(c) => conv_output(c, x, true),
            Op::Dense { out_features, .. } => {
                positive("out_features", *out_features)?;
                Ok(smallvec![*out_features])
            }
            Op::MaxPool(p) | Op::AvgPool(p) => pool_output(p, x),
            Op::GlobalAvgPool => {
                let rank = feature_map("global-avg-pool", x)?;
                let mut out: Dims = smallvec![1; rank + 1];
                out[0] = x[0];
                Ok(out)
            }
            Op::BatchNorm
            | Op::ChannelAffine
            | Op::ChannelScale
            | Op::Relu
            | Op::Tanh
            | Op::SoftmaxCrossEntropy
            | Op::MseLoss => {
                if self.is_loss() {
                    Ok(smallvec![1])
                } else {
                    Ok(Dims::from_slice(x))
                }
            }
            Op::LeakyRelu { alpha } => {
                finite("alpha", *alpha)?;
                Ok(Dims::from_slice(x))
            }
            Op::Scale { factor } => {
                finite("factor", *factor)?;
                Ok(Dims::from_slice(x))
            }
            Op::Shift { offset } => {
                finite("offset", *offset)?;
                Ok(Dims::from_slice(x))
            }
            Op::Pow { exponent } => {
                finite("exponent", *exponent)?;
                Ok(Dims::from_slice(x))
            }
            Op::Mul => mul_output(x, inputs[1]),
            Op::Sigmoid | Op::HardSwish => Ok(Dims::from_slice(x)),
            Op::Clip { min, max } => {
                finite("min", *min)?;
                finite("max", *max)?;
                if min >= max {
                    return Err(format!("min = {min} must be below max = {max}"));
                }
                Ok(Dims::from_slice(x))
            }
            Op::HardSigmoid { alpha, beta } => {
                finite("alpha", *alpha)?;
                finite("beta", *beta)?;
                if *alpha == 0.0 {
                    return Err("alpha = 0: the hard sigmoid would be a constant".into());
                }
                Ok(Dims::from_slice(x))
            }
            Op::Dropout { rate } => {
                if !(0.0..1.0).contains(rate) {
                    return Err(format!("rate = {rate}: must be in [0, 1)"));
                }
                Ok(Dims::from_slice(x))
            }
            Op::Add => add_output(inputs),
            Op::Concat => concat_output(inputs),
            Op::Narrow { start, len } => {
                positive("len", *len)?;
                let c = x.first().copied().unwrap_or(0);
                let end = *start + *len;
                if end > c {
                    return Err(format!(
                        "channels {start}..{end} are beyond the input's {c}"
                    ));
                }
                let mut out = Dims::from_slice(x);
                out[0] = *len;
                Ok(out)
            }
            Op::ChannelShuffle { groups } => {
                positive("groups", *groups)?;
                let c = x.first().copied().unwrap_or(0);
                if !c.is_multiple_of(*groups) {
                    return Err(format!(
                        "groups = {groups} does not divide the {c} channels"
                    ));
                }
                Ok(Dims::from_slice(x))
            }
            Op::Tile { repeats } => scale_spatial("repeats", repeats, x),
            Op::Upsample { factor } => scale_spatial("factor", factor, x),
            Op::Flatten => Ok(smallvec![x.iter().product()]),
            Op::FlattenPositions => {
                feature_map("flatten-positions", x)?;
                Ok(smallvec![x[0], x[1..].iter().product()])
            }
            Op::PrependTokens { tokens } => {
                positive("tokens", *tokens)?;
                sequence("prepend-tokens", x)?;
                Ok(smallvec![x[0], x[1] + *tokens])
            }
            Op::PositionEmbedding => {
                sequence("position-embedding", x)?;
                Ok(Dims::from_slice(x))
            }
            Op::PatchMerge => match x {
                &[c, h, w] if h.is_multiple_of(2) && w.is_multiple_of(2) => {
                    Ok(smallvec![4 * c, h / 2, w / 2])
                }
                _ => Err(format!(
                    "`patch-merge` reads a map [C, H, W] of even H and W, but its input is {}",
                    fmt_dims(x)
                )),
            },
            Op::Linear { out_features, .. } => {
                positive("out_features", *out_features)?;
                let mut out = Dims::from_slice(x);
                out[0] = *out_features;
                Ok(out)
            }
            Op::MatMul => matmul_output(x, inputs[1]),
            Op::Embedding {
                num_embeddings,
                embedding_dim,
            } => {
                positive("num_embeddings", *num_embeddings)?;
                positive("embedding_dim", *embedding_dim)?;
                let mut out: Dims = smallvec![*embedding_dim];
                out.extend_from_slice(x);
                Ok(out)
            }
            Op::LayerNorm | Op::RmsNorm | Op::Softmax | Op::Gelu | Op::Silu => {
                Ok(Dims::from_slice(x))
            }
            Op::Rotary { heads, theta } => rotary_output(*heads, *theta, x),
            Op::Attention(a) => attention_output(a, inputs),
            Op::Moe(m) => moe_output(m, x),
            Op::Gather { edges } => rows("gather", "edges", *edges, x),
            Op::ScatterAdd { nodes } => rows("scatter-add", "nodes", *nodes, x),
            Op::SegmentSum { segments } => {
                let out = rows("segment-sum", "segments", *segments, x)?;
                if *segments > x[1] {
                    return Err(format!(
                        "segments = {segments} is more than the {} rows it sums; use at most \
                         {}",
                        x[1], x[1]
                    ));
                }
                Ok(out)
            }
        }
    }
}

/// `mul`: equal shapes, or a second input of extent 1 where they differ (a gate).
fn mul_output(x: &[usize], b: &[usize]) -> Result<Dims, String> {
    let broadcasts = b.len() == x.len() && b.iter().zip(x).all(|(&b, &a)| b == a || b == 1);
    if !broadcasts {
        return Err(format!(
            "inputs do not connect: `mul` needs equal shapes, or a second input of \
             extent 1 where they differ; input 0 is {} but input 1 is {}",
            fmt_dims(x),
            fmt_dims(b)
        ));
    }
    Ok(Dims::from_slice(x))
}

/// `add`: inputs of one shape.
fn add_output(inputs: &[&[usize]]) -> Result<Dims, String> {
    let x = inputs[0];
    for (i, other) in inputs.iter().enumerate().skip(1) {
        if *other != x {
            return Err(format!(
                "inputs do not connect: `add` needs equal shapes, input 0 is {} \
                 but input {i} is {}",
                fmt_dims(x),
                fmt_dims(other)
            ));
        }
    }
    Ok(Dims::from_slice(x))
}

/// `concat`: inputs of one spatial shape, their channels joined.
fn concat_output(inputs: &[&[usize]]) -> Result<Dims, String> {
    let x = inputs[0];
    let mut channels = 0;
    for (i, other) in inputs.iter().enumerate() {
        if other.len() != x.len() || other[1..] != x[1..] {
            return Err(format!(
                "inputs do not connect: `concat` joins channels and needs equal \
                 spatial shapes, input 0 is {} but input {i} is {}",
                fmt_dims(x),
                fmt_dims(other)
            ));
        }
        channels += other[0];
    }
    let mut out = Dims::from_slice(x);
    out[0] = channels;
    Ok(out)
}

/// Rotary embeddings: a sequence whose channels split into `heads` heads of an even size,
/// a finite base `theta` above 1.
fn rotary_output(heads: usize, theta: f64, x: &[usize]) -> Result<Dims, String> {
    positive("heads", heads)?;
    if !(theta.is_finite() && theta > 1.0) {
        return Err(format!("theta = {theta}: must be a finite base above 1"));
    }
    sequence("rotary", x)?;
    if !x[0].is_multiple_of(heads) || !(x[0] / heads).is_multiple_of(2) {
        return Err(format!(
            "heads = {heads} must split the {} channels into heads of an even size",
            x[0]
        ));
    }
    Ok(Dims::from_slice(x))
}

/// `[B..., m, k] x [B..., k, n] -> [B..., m, n]`.
fn matmul_output(a: &[usize], b: &[usize]) -> Result<Dims, String> {
    if a.len() < 2 || a.len() != b.len() {
        return Err(format!(
            "`matmul` multiplies [..., m, k] by [..., k, n] with the same leading dimensions \
             and at least two dimensions each; its inputs are {} and {}",
            fmt_dims(a),
            fmt_dims(b)
        ));
    }
    let r = a.len();
    if a[..r - 2] != b[..r - 2] || a[r - 1] != b[r - 2] {
        return Err(format!(
            "inputs do not connect: `matmul` needs [..., m, k] x [..., k, n] with the same \
             leading dimensions, got {} and {}",
            fmt_dims(a),
            fmt_dims(b)
        ));
    }
    let mut out = Dims::from_slice(a);
    out[r - 1] = b[r - 1];
    Ok(out)
}

/// Shifted-window attention's output `[C, H, W]`, after checking its input and window.
fn window_output(a: &Attention, inputs: &[&[usize]]) -> Result<Dims, String> {
    let [map] = inputs else {
        return Err(format!(
            "window attention takes one input (queries, keys and values stacked on a map's \
             channels), got {}",
            inputs.len()
        ));
    };
    let &[c3, h, w] = &map[..] else {
        return Err(format!(
            "window attention reads a map [3 C, H, W], but its input is {}",
            fmt_dims(map)
        ));
    };
    if a.causal || a.fused || a.kv_heads != a.heads {
        return Err(
            "window attention is neither causal, fused nor grouped (kv_heads = heads)".into(),
        );
    }
    if !c3.is_multiple_of(3) || !(c3 / 3).is_multiple_of(a.heads) {
        return Err(format!(
            "the input's {c3} channels must be queries, keys and values of channels that \
             heads = {} divides",
            a.heads
        ));
    }
    if a.window > MAX_WINDOW || !h.is_multiple_of(a.window) || !w.is_multiple_of(a.window) {
        return Err(format!(
            "window = {} must divide the map's {h} x {w} positions (pad the map first)",
            a.window
        ));
    }
    if a.shift >= a.window {
        return Err(format!(
            "shift = {} must be below the window ({})",
            a.shift, a.window
        ));
    }
    Ok(smallvec![c3 / 3, h, w])
}

/// Attention's output `[H, S]`, after checking its inputs and heads.
fn attention_output(a: &Attention, inputs: &[&[usize]]) -> Result<Dims, String> {
    if !(0.0..1.0).contains(&a.dropout) {
        return Err(format!("dropout = {}: must be in [0, 1)", a.dropout));
    }
    positive("heads", a.heads)?;
    positive("kv_heads", a.kv_heads)?;
    if !a.heads.is_multiple_of(a.kv_heads) {
        return Err(format!(
            "kv_heads = {} does not divide the {} heads: each key and value head serves an \
             equal group of query heads",
            a.kv_heads, a.heads
        ));
    }
    if a.window > 0 {
        return window_output(a, inputs);
    }
    if a.shift > 0 {
        return Err(format!(
            "shift = {}: only shifted-window attention (a window above 0) shifts",
            a.shift
        ));
    }
    if let Some(bad) = inputs.iter().find(|d| d.len() != 2) {
        return Err(format!(
            "`attention` reads sequences [channels, positions], but an input is {}",
            fmt_dims(bad)
        ));
    }
    let (hidden, seq) = match inputs {
        [qkv] => {
            if !qkv[0].is_multiple_of(3) {
                return Err(format!(
                    "one input holds queries, keys and values stacked on channels, so its {} \
                     channels must be a multiple of 3; or give three inputs",
                    qkv[0]
                ));
            }
            if a.kv_heads != a.heads {
                return Err(format!(
                    "kv_heads = {} with one stacked input: stacked queries, keys and values \
                     have the same heads; give three inputs for grouped-query attention",
                    a.kv_heads
                ));
            }
            (qkv[0] / 3, qkv[1])
        }
        [q, k, v] => {
            // Keys and values of `kv_heads` heads of the queries' head size.
            let kv = (q[0] / a.heads.max(1)) * a.kv_heads;
            if k != v || k[0] != kv || !q[0].is_multiple_of(a.heads) {
                return Err(format!(
                    "inputs do not connect: `attention` of {} heads ({} of keys and values) \
                     needs queries [H, S], keys and values [H {} / {}, S_kv], got {}, {} and {}",
                    a.heads,
                    a.kv_heads,
                    a.kv_heads,
                    a.heads,
                    fmt_dims(q),
                    fmt_dims(k),
                    fmt_dims(v)
                ));
            }
            (q[0], q[1])
        }
        _ => {
            return Err(format!(
                "op `attention` takes 1 input (queries, keys and values stacked) or 3, got {}",
                inputs.len()
            ));
        }
    };
    if !hidden.is_multiple_of(a.heads) {
        return Err(format!(
            "heads = {} does not divide the {hidden} channels of the queries; use a divisor",
            a.heads
        ));
    }
    Ok(smallvec![hidden, seq])
}

/// A mixture-of-experts layer's output (its input's shape), after checking its fields.
fn moe_output(m: &Moe, x: &[usize]) -> Result<Dims, String> {
    positive("experts", m.experts)?;
    positive("top_k", m.top_k)?;
    positive("ffn", m.ffn)?;
    positive("local", m.local)?;
    if m.top_k > m.experts {
        return Err(format!(
            "top_k = {} is more than the {} experts; use at most {}",
            m.top_k, m.experts, m.experts
        ));
    }
    if !m.experts.is_multiple_of(m.local) {
        return Err(format!(
            "local = {} does not divide the {} experts: expert parallelism gives each rank \
             an equal share",
            m.local, m.experts
        ));
    }
    if let Some(cf) = m.capacity_factor
        && !(cf.is_finite() && cf > 0.0 && cf <= m.experts as f64)
    {
        return Err(format!(
            "capacity_factor = {cf}: must be above 0 and at most the {} experts (at that \
             factor every expert takes every token); leave it out for dropless routing",
            m.experts
        ));
    }
    if x.len() != 2 {
        return Err(format!(
            "`moe` reads sequences [channels, positions], but its input is {}",
            fmt_dims(x)
        ));
    }
    Ok(Dims::from_slice(x))
}

/// A row op's output `[F, rows]` from its input `[F, R]`.
fn rows(op: &str, field: &str, rows: usize, x: &[usize]) -> Result<Dims, String> {
    positive(field, rows)?;
    if x.len() != 2 {
        return Err(format!(
            "`{op}` reads rows of features [F, rows], but its input is {}",
            fmt_dims(x)
        ));
    }
    Ok(smallvec![x[0], rows])
}

/// Checks that `x` is a sequence `[channels, positions]`.
fn sequence(op: &str, x: &[usize]) -> Result<(), String> {
    if x.len() != 2 {
        return Err(format!(
            "`{op}` reads sequences [channels, positions], but its input is {}",
            fmt_dims(x)
        ));
    }
    Ok(())
}

const INPUT_IS_IMPLICIT: &str = "`input` is implicit: it is node 0 of every graph";

fn fmt_dims(d: &[usize]) -> String {
    let parts: Vec<String> = d.iter().map(usize::to_string).collect();
    parts.join("x")
}

fn positive(field: &str, v: usize) -> Result<(), String> {
    if v == 0 {
        Err(format!("{field} = 0: must be at least 1"))
    } else {
        Ok(())
    }
}

fn finite(field: &str, v: f64) -> Result<(), String> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(format!("{field} = {v}: must be a finite number"))
    }
}

/// Requires a feature map (channels plus at least one spatial dimension); returns the
/// spatial rank.
fn feature_map(op: &str, x: &[usize]) -> Result<usize, String> {
    if x.len() < 2 {
        return Err(format!(
            "`{op}` needs a feature map [C, spatial...], but its input is a feature vector {}",
            fmt_dims(x)
        ));
    }
    Ok(x.len() - 1)
}

/// Largest kernel, stride, dilation, padding, repeat or scale factor along one dimension
/// (2^20). With tensors of at most 2^40 elements, no shape arithmetic can overflow.
pub const MAX_WINDOW: usize = 1 << 20;

fn per_dim(field: &str, values: &[usize], rank: usize, min: usize) -> Result<(), String> {
    if values.len() != rank {
        return Err(format!(
            "{field} has {} values but the input has {rank} spatial dimensions",
            values.len()
        ));
    }
    if let Some(v) = values.iter().find(|&&v| v < min) {
        return Err(format!("{field} value {v} must be at least {min}"));
    }
    if let Some(v) = values.iter().find(|&&v| v > MAX_WINDOW) {
        return Err(format!("{field} value {v} must be at most {MAX_WINDOW}"));
    }
    Ok(())
}

/// Resolves `Same`/`Valid` to explicit pairs for a window of `extent` per dimension.
fn resolve_padding(
    padding: &mut Padding,
    input: &[usize],
    extent: &[usize],
    stride: &[usize],
) -> Result<(), String> {
    let rank = input.len();
    let pairs = match padding {
        Padding::Valid => smallvec![[0, 0]; rank],
        Padding::Same => (0..rank)
            .map(|i| {
                let out = input[i].div_ceil(stride[i]);
                let needed = (out - 1) * stride[i] + extent[i];
                let total = needed.saturating_sub(input[i]);
                [total / 2, total - total / 2]
            })
            .collect(),
        Padding::Explicit(p) => {
            if p.len() != rank {
                return Err(format!(
                    "padding has {} entries but the input has {rank} spatial dimensions",
                    p.len()
                ));
            }
            if let Some(v) = p.iter().flatten().find(|&&v| v > MAX_WINDOW) {
                return Err(format!("padding value {v} must be at most {MAX_WINDOW}"));
            }
            p.clone()
        }
    };
    *padding = Padding::Explicit(pairs);
    Ok(())
}

fn conv_output(c: &mut Conv, x: &[usize], transposed: bool) -> Result<Dims, String> {
    let rank = feature_map(if transposed { "conv-transpose" } else { "conv" }, x)?;
    let (c_in, spatial) = (x[0], &x[1..]);
    positive("out_channels", c.out_channels)?;
    per_dim("kernel", &c.kernel, rank, 1)?;
    per_dim("stride", &c.stride, rank, 1)?;
    per_dim("dilation", &c.dilation, rank, 1)?;
    per_dim("output_padding", &c.output_padding, rank, 0)?;
    positive("groups", c.groups)?;
    if !c_in.is_multiple_of(c.groups) {
        return Err(format!(
            "groups = {} does not divide the {c_in} input channels; use a divisor of {c_in}",
            c.groups
        ));
    }
    if !c.out_channels.is_multiple_of(c.groups) {
        return Err(format!(
            "groups = {} does not divide out_channels = {}; use a common divisor",
            c.groups, c.out_channels
        ));
    }
    // Dilated kernel extent: d (k - 1) + 1.
    let extent: Dims = (0..rank)
        .map(|i| c.dilation[i] * (c.kernel[i] - 1) + 1)
        .collect();
    if transposed {
        if c.padding == Padding::Same {
            return Err(
                "padding \"same\" is not defined for conv-transpose; give explicit \
                        padding"
                    .into(),
            );
        }
        resolve_padding(&mut c.padding, spatial, &extent, &c.stride)?;
        let mut out: Dims = smallvec![c.out_channels];
        for i in 0..rank {
            let [before, after] = c.padding.pairs()[i];
            if c.output_padding[i] >= c.stride[i].max(c.dilation[i]) {
                return Err(format!(
                    "output_padding {} must be smaller than stride or dilation along spatial \
                     dimension {i}",
                    c.output_padding[i]
                ));
            }
            // PyTorch ConvTranspose: (in - 1) s - p_before - p_after + d (k - 1) + op + 1.
            let full = (spatial[i] - 1) * c.stride[i] + extent[i] + c.output_padding[i];
            if full <= before + after {
                return Err(format!(
                    "padding {before}+{after} removes the whole output along spatial dimension \
                     {i} (size before cropping {full})"
                ));
            }
            out.push(full - before - after);
        }
        Ok(out)
    } else {
        if c.output_padding.iter().any(|&p| p != 0) {
            return Err("output_padding applies only to conv-transpose".into());
        }
        resolve_padding(&mut c.padding, spatial, &extent, &c.stride)?;
        let mut out: Dims = smallvec![c.out_channels];
        for i in 0..rank {
            let [before, after] = c.padding.pairs()[i];
            let padded = spatial[i] + before + after;
            if padded < extent[i] {
                return Err(format!(
                    "kernel {} (dilated extent {}) is larger than its padded input {padded} \
                     along spatial dimension {i}; use a smaller kernel or dilation, more \
                     padding, or a larger input",
                    c.kernel[i], extent[i]
                ));
            }
            out.push((padded - extent[i]) / c.stride[i] + 1);
        }
        Ok(out)
    }
}

fn pool_output(p: &mut Pool, x: &[usize]) -> Result<Dims, String> {
    let rank = feature_map("pool", x)?;
    per_dim("kernel", &p.kernel, rank, 1)?;
    per_dim("stride", &p.stride, rank, 1)?;
    let spatial = &x[1..];
    resolve_padding(&mut p.padding, spatial, &p.kernel, &p.stride)?;
    let mut out: Dims = smallvec![x[0]];
    let dims = spatial
        .iter()
        .zip(&p.kernel)
        .zip(&p.stride)
        .zip(p.padding.pairs());
    for (i, (((&n, &k), &s), &[before, after])) in dims.enumerate() {
        if before.max(after) > k / 2 {
            return Err(format!(
                "padding {before}/{after} exceeds half the kernel {k} along spatial dimension \
                 {i} (a window would see only padding)"
            ));
        }
        let padded = n + before + after;
        if padded < k {
            return Err(format!(
                "kernel {k} is larger than its padded input {padded} along spatial dimension \
                 {i}; use a smaller kernel or a larger input"
            ));
        }
        out.push((padded - k) / s + 1);
    }
    Ok(out)
}

fn scale_spatial(field: &str, factor: &[usize], x: &[usize]) -> Result<Dims, String> {
    let rank = feature_map(field, x)?;
    per_dim(field, factor, rank, 1)?;
    let mut out: Dims = smallvec![x[0]];
    out.extend(x[1..].iter().zip(factor).map(|(d, f)| d * f));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smallvec::smallvec;

    fn out(mut op: Op, input: &[usize]) -> Result<Vec<usize>, String> {
        op.resolve(&[input]).map(|d| d.to_vec())
    }

    #[test]
    fn tf_same_padding_with_even_kernel_pads_after() {
        let mut op = Op::conv(Conv::new(32, &[2, 2, 2]).padding(Padding::Same));
        assert_eq!(
            op.resolve(&[&[4, 128, 128, 128]]).unwrap(),
            Dims::from_slice(&[32, 128, 128, 128])
        );
        let Op::Conv(c) = op else { unreachable!() };
        assert_eq!(c.padding, Padding::Explicit(smallvec![[0, 1]; 3]));
    }

    #[test]
    fn one_dimensional_conv_and_pool() {
        let op = Op::conv(Conv::new(8, &[5]).stride(2).pad(2));
        assert_eq!(out(op, &[4, 100]).unwrap(), vec![8, 50]);
        let op = Op::avg_pool(Pool::new(&[4]));
        assert_eq!(out(op, &[8, 50]).unwrap(), vec![8, 12]);
    }

    #[test]
    fn strided_dilated_conv_output_size() {
        // ASPP branch: 3x3, dilation 6, padding 6 keeps 48x72.
        let op = Op::conv(Conv::new(256, &[3, 3]).pad(6).dilation(6));
        assert_eq!(out(op, &[2048, 48, 72]).unwrap(), vec![256, 48, 72]);
        // ResNet stem: 7x7 stride 2 padding 3: 224 -> 112.
        let op = Op::conv(Conv::new(64, &[7, 7]).stride(2).pad(3));
        assert_eq!(out(op, &[3, 224, 224]).unwrap(), vec![64, 112, 112]);
    }

    #[test]
    fn transposed_conv_doubles_with_output_padding() {
        let op = Op::conv_transpose(Conv::new(256, &[3, 3]).stride(2).pad(1).output_padding(1));
        assert_eq!(out(op, &[256, 48, 72]).unwrap(), vec![256, 96, 144]);
    }

    #[test]
    fn kernel_larger_than_padded_input_is_refused() {
        let op = Op::conv(Conv::new(8, &[5, 5]));
        let err = out(op, &[3, 4, 4]).unwrap_err();
        assert!(err.contains("larger than its padded input"), "{err}");
    }

    #[test]
    fn groups_must_divide_channels() {
        let op = Op::conv(Conv::new(32, &[3, 3]).groups(3));
        let err = out(op, &[32, 8, 8]).unwrap_err();
        assert!(
            err.contains("does not divide the 32 input channels"),
            "{err}"
        );
    }

    #[test]
    fn add_refuses_mismatched_shapes() {
        let err = Op::Add.resolve(&[&[8, 4, 4], &[8, 2, 2]]).unwrap_err();
        assert!(err.contains("do not connect"), "{err}");
    }

    #[test]
    fn concat_sums_channels() {
        assert_eq!(
            Op::Concat.resolve(&[&[256, 4, 4], &[48, 4, 4]]).unwrap(),
            Dims::from_slice(&[304, 4, 4])
        );
    }

    #[test]
    fn maxpool_with_padding_matches_resnet_stem() {
        let mut pool = Pool::new(&[3, 3]);
        pool.stride = smallvec![2, 2];
        pool.padding = Padding::symmetric(1, 2);
        assert_eq!(
            out(Op::max_pool(pool), &[64, 112, 112]).unwrap(),
            vec![64, 56, 56]
        );
    }

    #[test]
    fn conv_on_feature_vector_is_refused() {
        let err = out(Op::conv(Conv::new(8, &[3])), &[128]).unwrap_err();
        assert!(err.contains("feature vector"), "{err}");
    }
}
