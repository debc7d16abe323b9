//! The workload file format: a TOML layer list a user can write by hand, and the exporter
//! that writes any graph in it. Loading an export gives back the identical graph.
//!
//! ```toml
//! name = "tiny"
//! input = [3, 32, 32]          # one sample, channels first
//!
//! [[layer]]
//! name = "conv1"
//! op = "conv"
//! out_channels = 16
//! kernel = 3                    # one value for every spatial dimension, or a list
//! padding = "same"              # "same", "valid", p, [p, p], or [[before, after], ...]
//!
//! [[layer]]
//! name = "relu1"
//! op = "relu"                   # reads the previous layer unless `inputs` names others
//!
//! [[layer]]
//! name = "skip"
//! op = "add"
//! inputs = ["relu1", "conv1"]
//! ```
//!
//! Ops and their fields (`*` required; defaults are the frameworks'): `conv` and
//! `conv-transpose` (`out_channels*`, `kernel*`, `stride` = 1, `padding` = "valid",
//! `dilation` = 1, `groups` = 1, `bias` = true, and `output_padding` = 0 for
//! `conv-transpose`); `dense` (`out_features*`, `bias` = true); `max-pool` and `avg-pool`
//! (`kernel*`, `stride` = kernel, `padding` = "valid"); `leaky-relu` (`alpha*`); `scale`
//! (`factor*`: times a constant); `shift` (`offset*`: plus a constant); `pow` (`exponent*`);
//! `dropout` (`rate*`); `tile` (`repeats*`); `upsample` (`scale_factor*`); `clip` (`min*`,
//! `max*`: ReLU6 is 0 and 6); `hard-sigmoid` (`alpha` = 1/6, `beta` = 1/2); `narrow`
//! (`start*`, `len*`: channels `start..start + len`); `channel-shuffle` (`groups*`);
//! `prepend-tokens` (`tokens*`: learned tokens before a sequence's positions, ViT's class
//! token); `flatten-positions` (a map `[C, H, W]` as a sequence `[C, H W]`);
//! `position-embedding` (a learned tensor of a sequence's shape added to it);
//! `patch-merge` (Swin's 2 x 2 blocks of a map stacked on its channels);
//! `linear` (`out_features*`, `bias` = true, `tied` = false: a linear layer at every
//! position of a sequence `[hidden, seq]`; `tied` for weights shared with an embedding); `embedding` (`num_embeddings*`, `embedding_dim*`: ids `[seq]` to
//! `[embedding_dim, seq]`); `attention` (`heads*`, `causal` = false, `rate` = 0 (dropout on
//! the weights), `fused` = false, and for unfused attention's kernels `mask` = "select"
//! where causal, else "none" ("none", "select": `where`, "add": an additive mask),
//! `clamp` = false (scores clamped at the type's minimum) and `scale_queries` = false (the
//! scale on the queries rather than the scores); one input `[3 H, S]` or three: queries,
//! keys, values; `kv_heads` = `heads`, fewer for grouped-query attention, whose keys and
//! values are `[H kv_heads / heads, S_kv]`; `window` = 0, above 0 Swin's window attention
//! over a map `[3 C, H, W]` in windows of `window x window` with a relative position bias,
//! `shift` = 0 its windows' roll); `rotary` (`heads*`, `theta` = 10000: rotary
//! position embedding of queries or keys `[H, S]`); `moe` (`experts*`, `top_k*`, `ffn*`,
//! `local` = `experts` (the experts one rank holds under expert parallelism), `gated` = true
//! (`w2(act(w1 x) * w3 x)`; false: `w2(act(w1 x))`), `activation` = "silu" ("silu",
//! "gelu", "relu"), `capacity_factor` absent for dropless routing: a mixture-of-experts
//! feed-forward layer on sequences `[H, S]`);
//! `gather` (`edges*`), `scatter-add` (`nodes*`) and `segment-sum` (`segments*`) on rows of
//! `[F, rows]`; and without fields `global-avg-pool`, `batch-norm`, `channel-affine`,
//! `channel-scale`, `relu`, `tanh`, `sigmoid`, `hard-swish`, `add`, `mul` (two inputs of one shape, element by
//! element, or the second of extent 1 where they differ: a channel gate), `concat`, `flatten`,
//! `softmax-cross-entropy`, `mse-loss`,
//! `matmul` (two inputs `[..., m, k]` and `[..., k, n]`), `layer-norm`, `rms-norm`,
//! `softmax` (over channels), `gelu` and `silu`.

use serde::{Deserialize, Serialize};
use toml::{Spanned, Value};

use crate::error::{Error, Result};
use smallvec::smallvec;

use crate::error::parse_toml;
use crate::graph::{
    Attention, Conv, Dims, ExpertActivation, Graph, INPUT_NAME, Layer, LayerError, Moe, NodeId, Op,
    PadPairs, Padding, Pool, ScoreMask,
};

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    input: Vec<usize>,
    #[serde(default)]
    layer: Vec<Spanned<RawLayer>>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RawLayer {
    name: String,
    op: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    inputs: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out_channels: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out_features: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kernel: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stride: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    padding: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dilation: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    groups: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bias: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_padding: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    alpha: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exponent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repeats: Option<Vec<usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_factor: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_embeddings: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    embedding_dim: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    heads: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kv_heads: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    theta: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    causal: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fused: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mask: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clamp: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    scale_queries: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    edges: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    segments: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tied: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    experts: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    local: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ffn: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    activation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    beta: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    len: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shift: Option<usize>,
}

/// Op names and the fields each takes; required fields end in `*`.
const OPS: &[(&str, &[&str])] = &[
    (
        "conv",
        &[
            "out_channels*",
            "kernel*",
            "stride",
            "padding",
            "dilation",
            "groups",
            "bias",
        ],
    ),
    (
        "conv-transpose",
        &[
            "out_channels*",
            "kernel*",
            "stride",
            "padding",
            "dilation",
            "groups",
            "bias",
            "output_padding",
        ],
    ),
    ("dense", &["out_features*", "bias"]),
    ("max-pool", &["kernel*", "stride", "padding"]),
    ("avg-pool", &["kernel*", "stride", "padding"]),
    ("global-avg-pool", &[]),
    ("batch-norm", &[]),
    ("channel-affine", &[]),
    ("channel-scale", &[]),
    ("relu", &[]),
    ("leaky-relu", &["alpha*"]),
    ("tanh", &[]),
    ("add", &[]),
    ("scale", &["factor*"]),
    ("shift", &["offset*"]),
    ("mul", &[]),
    ("sigmoid", &[]),
    ("clip", &["min*", "max*"]),
    ("hard-swish", &[]),
    ("hard-sigmoid", &["alpha", "beta"]),
    ("pow", &["exponent*"]),
    ("concat", &[]),
    ("narrow", &["start*", "len*"]),
    ("channel-shuffle", &["groups*"]),
    ("tile", &["repeats*"]),
    ("upsample", &["scale_factor*"]),
    ("dropout", &["rate*"]),
    ("flatten", &[]),
    ("flatten-positions", &[]),
    ("prepend-tokens", &["tokens*"]),
    ("position-embedding", &[]),
    ("patch-merge", &[]),
    ("softmax-cross-entropy", &[]),
    ("mse-loss", &[]),
    ("linear", &["out_features*", "bias", "tied"]),
    ("matmul", &[]),
    ("embedding", &["num_embeddings*", "embedding_dim*"]),
    ("layer-norm", &[]),
    ("rms-norm", &[]),
    ("softmax", &[]),
    ("gelu", &[]),
    ("silu", &[]),
    ("rotary", &["heads*", "theta"]),
    (
        "attention",
        &[
            "heads*",
            "kv_heads",
            "causal",
            "rate",
            "fused",
            "mask",
            "clamp",
            "scale_queries",
            "window",
            "shift",
        ],
    ),
    ("gather", &["edges*"]),
    ("scatter-add", &["nodes*"]),
    ("segment-sum", &["segments*"]),
    (
        "moe",
        &[
            "experts*",
            "top_k*",
            "ffn*",
            "local",
            "gated",
            "activation",
            "capacity_factor",
        ],
    ),
];

impl RawLayer {
    /// The op-specific fields that are set.
    fn present(&self) -> Vec<&'static str> {
        [
            ("out_channels", self.out_channels.is_some()),
            ("out_features", self.out_features.is_some()),
            ("kernel", self.kernel.is_some()),
            ("stride", self.stride.is_some()),
            ("padding", self.padding.is_some()),
            ("dilation", self.dilation.is_some()),
            ("groups", self.groups.is_some()),
            ("bias", self.bias.is_some()),
            ("output_padding", self.output_padding.is_some()),
            ("alpha", self.alpha.is_some()),
            ("factor", self.factor.is_some()),
            ("offset", self.offset.is_some()),
            ("exponent", self.exponent.is_some()),
            ("rate", self.rate.is_some()),
            ("repeats", self.repeats.is_some()),
            ("scale_factor", self.scale_factor.is_some()),
            ("num_embeddings", self.num_embeddings.is_some()),
            ("embedding_dim", self.embedding_dim.is_some()),
            ("heads", self.heads.is_some()),
            ("kv_heads", self.kv_heads.is_some()),
            ("theta", self.theta.is_some()),
            ("causal", self.causal.is_some()),
            ("fused", self.fused.is_some()),
            ("mask", self.mask.is_some()),
            ("clamp", self.clamp.is_some()),
            ("scale_queries", self.scale_queries.is_some()),
            ("edges", self.edges.is_some()),
            ("nodes", self.nodes.is_some()),
            ("segments", self.segments.is_some()),
            ("tied", self.tied.is_some()),
            ("experts", self.experts.is_some()),
            ("local", self.local.is_some()),
            ("top_k", self.top_k.is_some()),
            ("ffn", self.ffn.is_some()),
            ("gated", self.gated.is_some()),
            ("activation", self.activation.is_some()),
            ("capacity_factor", self.capacity_factor.is_some()),
            ("min", self.min.is_some()),
            ("max", self.max.is_some()),
            ("beta", self.beta.is_some()),
            ("start", self.start.is_some()),
            ("len", self.len.is_some()),
            ("tokens", self.tokens.is_some()),
            ("window", self.window.is_some()),
            ("shift", self.shift.is_some()),
        ]
        .into_iter()
        .filter_map(|(f, set)| set.then_some(f))
        .collect()
    }
}

/// Parses a workload file. `input_size`, if given, replaces the spatial dimensions of the
/// file's `input` (one value for all, or one per dimension).
pub fn parse_workload(text: &str, file: &str, input_size: Option<&[usize]>) -> Result<Graph> {
    let raw: RawWorkload = parse_toml(text, file)?;
    let mut input = raw.input.clone();
    if let Some(size) = input_size {
        let rank = input.len().saturating_sub(1);
        match size.len() {
            1 if rank > 0 => input[1..].fill(size[0]),
            n if n == rank && rank > 0 => input[1..].copy_from_slice(size),
            _ => {
                return Err(Error::argument(
                    "input-size",
                    format!("{size:?}"),
                    format!(
                        "the file's input {:?} has {rank} spatial dimensions",
                        raw.input
                    ),
                ));
            }
        }
    }
    let mut graph = Graph::new(raw.name.clone(), input)
        .map_err(|e| Error::invalid(file, "input", e.message))?;
    if raw.layer.is_empty() {
        return Err(Error::invalid(
            file,
            "layer",
            "the workload has no [[layer]] entries",
        ));
    }
    // Line numbers for messages, counted as the layers come (in file order): linear in the
    // file, where counting from the start for each layer was quadratic.
    let (mut counted_to, mut line) = (0, 1);
    for spanned in &raw.layer {
        let start = spanned.span().start.max(counted_to);
        line += text[counted_to..start].matches('\n').count();
        counted_to = start;
        let layer = spanned.get_ref();
        let fail = |message: String| Error::Layer {
            location: format!("{file}, line {line}"),
            layer: layer.name.clone(),
            message,
        };
        let inputs = resolve_inputs(&graph, layer).map_err(fail)?;
        let op = to_op(layer, graph.layers()[inputs[0]].output.spatial().len()).map_err(fail)?;
        graph
            .push(layer.name.clone(), op, &inputs)
            .map_err(|LayerError { message, .. }| fail(message))?;
    }
    Ok(graph)
}

fn resolve_inputs(graph: &Graph, layer: &RawLayer) -> Result<Vec<NodeId>, String> {
    let Some(names) = &layer.inputs else {
        return Ok(vec![graph.last()]);
    };
    if names.is_empty() {
        return Err("`inputs` is empty; leave it out to read the previous layer".into());
    }
    names
        .iter()
        .map(|n| {
            graph.find(n).ok_or_else(|| {
                format!(
                    "input `{n}` is not an earlier layer (layers are listed in order; \
                     `{INPUT_NAME}` is the sample)"
                )
            })
        })
        .collect()
}

/// The rotary embedding's base when a file gives none (Su et al. 2021; Hugging Face's
/// `rope_theta` default).
pub const ROPE_THETA: f64 = 10_000.0;

fn to_op(l: &RawLayer, rank: usize) -> Result<Op, String> {
    let Some((_, fields)) = OPS.iter().find(|(name, _)| *name == l.op) else {
        let valid: Vec<&str> = OPS.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "unknown op `{}`; valid ops: {}",
            l.op,
            valid.join(", ")
        ));
    };
    let present = l.present();
    if let Some(extra) = present
        .iter()
        .find(|f| !fields.iter().any(|g| g.trim_end_matches('*') == **f))
    {
        return Err(format!("field `{extra}` does not apply to op `{}`", l.op));
    }
    if let Some(missing) = fields
        .iter()
        .filter_map(|f| f.strip_suffix('*'))
        .find(|f| !present.contains(f))
    {
        return Err(format!("op `{}` needs field `{missing}`", l.op));
    }
    let dims_or = |field: &str, v: &Option<Value>, default: usize| match v {
        None => Ok(smallvec![default; rank]),
        Some(v) => dims(field, v, rank),
    };
    let conv = || -> Result<Conv, String> {
        let kernel = dims_or("kernel", &l.kernel, 1)?;
        let rank = kernel.len();
        Ok(Conv {
            out_channels: l.out_channels.unwrap_or(0),
            stride: dims_or("stride", &l.stride, 1)?,
            padding: padding(l.padding.as_ref(), rank)?,
            dilation: dims_or("dilation", &l.dilation, 1)?,
            groups: l.groups.unwrap_or(1),
            bias: l.bias.unwrap_or(true),
            output_padding: dims_or("output_padding", &l.output_padding, 0)?,
            kernel,
        })
    };
    let pool = || -> Result<Pool, String> {
        let kernel = dims_or("kernel", &l.kernel, 1)?;
        Ok(Pool {
            stride: match &l.stride {
                None => kernel.clone(),
                Some(v) => dims("stride", v, rank)?,
            },
            padding: padding(l.padding.as_ref(), kernel.len())?,
            kernel,
        })
    };
    let num = |v: Option<f64>| v.unwrap_or(f64::NAN);
    Ok(match l.op.as_str() {
        "conv" => Op::conv(conv()?),
        "conv-transpose" => Op::conv_transpose(conv()?),
        "dense" => Op::Dense {
            out_features: l.out_features.unwrap_or(0),
            bias: l.bias.unwrap_or(true),
        },
        "max-pool" => Op::max_pool(pool()?),
        "avg-pool" => Op::avg_pool(pool()?),
        "global-avg-pool" => Op::GlobalAvgPool,
        "batch-norm" => Op::BatchNorm,
        "channel-affine" => Op::ChannelAffine,
        "channel-scale" => Op::ChannelScale,
        "relu" => Op::Relu,
        "leaky-relu" => Op::LeakyRelu {
            alpha: num(l.alpha),
        },
        "tanh" => Op::Tanh,
        "add" => Op::Add,
        "scale" => Op::Scale {
            factor: num(l.factor),
        },
        "shift" => Op::Shift {
            offset: num(l.offset),
        },
        "mul" => Op::Mul,
        "sigmoid" => Op::Sigmoid,
        "clip" => Op::Clip {
            min: num(l.min),
            max: num(l.max),
        },
        "hard-swish" => Op::HardSwish,
        "hard-sigmoid" => Op::HardSigmoid {
            alpha: l.alpha.unwrap_or(1.0 / 6.0),
            beta: l.beta.unwrap_or(0.5),
        },
        "pow" => Op::Pow {
            exponent: num(l.exponent),
        },
        "concat" => Op::Concat,
        "narrow" => Op::Narrow {
            start: l.start.unwrap_or(0),
            len: l.len.unwrap_or(0),
        },
        "channel-shuffle" => Op::ChannelShuffle {
            groups: l.groups.unwrap_or(0),
        },
        "tile" => Op::Tile {
            repeats: l
                .repeats
                .as_deref()
                .map(Dims::from_slice)
                .unwrap_or_default(),
        },
        "upsample" => Op::Upsample {
            factor: dims_or("scale_factor", &l.scale_factor, 1)?,
        },
        "dropout" => Op::Dropout { rate: num(l.rate) },
        "flatten" => Op::Flatten,
        "flatten-positions" => Op::FlattenPositions,
        "prepend-tokens" => Op::PrependTokens {
            tokens: l.tokens.unwrap_or(0),
        },
        "position-embedding" => Op::PositionEmbedding,
        "patch-merge" => Op::PatchMerge,
        "softmax-cross-entropy" => Op::SoftmaxCrossEntropy,
        "mse-loss" => Op::MseLoss,
        "linear" => Op::Linear {
            out_features: l.out_features.unwrap_or(0),
            bias: l.bias.unwrap_or(true),
            tied: l.tied.unwrap_or(false),
        },
        "matmul" => Op::MatMul,
        "embedding" => Op::Embedding {
            num_embeddings: l.num_embeddings.unwrap_or(0),
            embedding_dim: l.embedding_dim.unwrap_or(0),
        },
        "layer-norm" => Op::LayerNorm,
        "rms-norm" => Op::RmsNorm,
        "softmax" => Op::Softmax,
        "gelu" => Op::Gelu,
        "silu" => Op::Silu,
        "rotary" => Op::Rotary {
            heads: l.heads.unwrap_or(0),
            theta: l.theta.unwrap_or(ROPE_THETA),
        },
        "attention" => Op::Attention(attention(l)?),
        "gather" => Op::Gather {
            edges: l.edges.unwrap_or(0),
        },
        "scatter-add" => Op::ScatterAdd {
            nodes: l.nodes.unwrap_or(0),
        },
        "segment-sum" => Op::SegmentSum {
            segments: l.segments.unwrap_or(0),
        },
        "moe" => Op::Moe(moe(l)?),
        other => return Err(format!("op `{other}` has no builder")),
    })
}

/// An attention layer's fields: heads, the mask's form, dropout and the kernel's form.
fn attention(l: &RawLayer) -> Result<Attention, String> {
    let causal = l.causal.unwrap_or(false);
    let mask = match l.mask.as_deref() {
        None => ScoreMask::default_for(causal),
        Some(m) => ScoreMask::ALL
            .into_iter()
            .find(|f| f.name() == m)
            .ok_or_else(|| {
                format!(
                    "mask = \"{m}\" is not a mask form; use {}",
                    ScoreMask::ALL.map(ScoreMask::name).join(", ")
                )
            })?,
    };
    let heads = l.heads.unwrap_or(0);
    Ok(Attention {
        heads,
        kv_heads: l.kv_heads.unwrap_or(heads),
        causal,
        dropout: l.rate.unwrap_or(0.0),
        fused: l.fused.unwrap_or(false),
        mask,
        clamp: l.clamp.unwrap_or(false),
        scale_queries: l.scale_queries.unwrap_or(false),
        window: l.window.unwrap_or(0),
        shift: l.shift.unwrap_or(0),
    })
}

/// A mixture of experts' fields: experts, routing, the experts' feed-forward and activation.
fn moe(l: &RawLayer) -> Result<Moe, String> {
    let experts = l.experts.unwrap_or(0);
    let activation = match l.activation.as_deref() {
        None => ExpertActivation::Silu,
        Some(a) => ExpertActivation::ALL
            .into_iter()
            .find(|f| f.name() == a)
            .ok_or_else(|| {
                format!(
                    "activation = \"{a}\" is not an expert activation; use {}",
                    ExpertActivation::ALL.map(ExpertActivation::name).join(", ")
                )
            })?,
    };
    Ok(Moe {
        experts,
        local: l.local.unwrap_or(experts),
        top_k: l.top_k.unwrap_or(0),
        ffn: l.ffn.unwrap_or(0),
        gated: l.gated.unwrap_or(true),
        activation,
        capacity_factor: l.capacity_factor,
    })
}

/// A non-negative integer, or a list of them; a single value applies to every dimension.
fn dims(field: &str, v: &Value, rank: usize) -> Result<Dims, String> {
    let one = |v: &Value| match v {
        Value::Integer(i) => usize::try_from(*i)
            .map_err(|_| format!("field `{field}`: {i} must be a non-negative integer")),
        other => Err(format!(
            "field `{field}`: expected an integer, found {}",
            other.type_str()
        )),
    };
    match v {
        Value::Array(items) => items.iter().map(one).collect(),
        single => Ok(smallvec![one(single)?; rank]),
    }
}

fn padding(v: Option<&Value>, rank: usize) -> Result<Padding, String> {
    let Some(v) = v else {
        return Ok(Padding::Valid);
    };
    let bad = || {
        format!(
            "field `padding`: expected \"same\", \"valid\", an integer, a list of integers or a \
             list of [before, after] pairs, found {v}"
        )
    };
    match v {
        Value::String(s) if s == "same" => Ok(Padding::Same),
        Value::String(s) if s == "valid" => Ok(Padding::Valid),
        Value::Array(items) if items.iter().all(Value::is_array) => items
            .iter()
            .map(|pair| {
                let p = dims("padding", pair, 2)?;
                <[usize; 2]>::try_from(p.as_slice()).map_err(|_| bad())
            })
            .collect::<Result<PadPairs, _>>()
            .map(Padding::Explicit),
        Value::Integer(_) | Value::Array(_) => {
            let p = dims("padding", v, rank)?;
            Ok(Padding::Explicit(p.into_iter().map(|x| [x, x]).collect()))
        }
        _ => Err(bad()),
    }
}

fn ints(v: &[usize]) -> Value {
    Value::Array(
        v.iter()
            .map(|&x| Value::Integer(i64::try_from(x).unwrap_or(i64::MAX)))
            .collect(),
    )
}

fn export_layer(graph: &Graph, id: NodeId, layer: &Layer) -> RawLayer {
    let names = || {
        layer
            .inputs
            .iter()
            .map(|&i| graph.layers()[i].name.to_string())
            .collect()
    };
    let mut raw = RawLayer {
        name: layer.name.to_string(),
        op: layer.op.kind().to_owned(),
        inputs: (layer.inputs.as_slice() != [id - 1]).then(names),
        ..RawLayer::default()
    };
    let pairs = |p: &Padding| Value::Array(p.pairs().iter().map(|pair| ints(pair)).collect());
    match &layer.op {
        Op::Conv(c) | Op::ConvTranspose(c) => {
            raw.out_channels = Some(c.out_channels);
            raw.kernel = Some(ints(&c.kernel));
            raw.stride = Some(ints(&c.stride));
            raw.padding = Some(pairs(&c.padding));
            raw.dilation = Some(ints(&c.dilation));
            raw.groups = Some(c.groups);
            raw.bias = Some(c.bias);
            if matches!(layer.op, Op::ConvTranspose(_)) {
                raw.output_padding = Some(ints(&c.output_padding));
            }
        }
        Op::Dense { out_features, bias } => {
            raw.out_features = Some(*out_features);
            raw.bias = Some(*bias);
        }
        Op::Linear {
            out_features,
            bias,
            tied,
        } => {
            raw.out_features = Some(*out_features);
            raw.bias = Some(*bias);
            raw.tied = Some(*tied);
        }
        Op::Embedding {
            num_embeddings,
            embedding_dim,
        } => {
            raw.num_embeddings = Some(*num_embeddings);
            raw.embedding_dim = Some(*embedding_dim);
        }
        Op::Attention(a) => {
            raw.heads = Some(a.heads);
            raw.kv_heads = (a.kv_heads != a.heads).then_some(a.kv_heads);
            raw.causal = Some(a.causal);
            raw.rate = Some(a.dropout);
            raw.fused = Some(a.fused);
            // The unfused kernels' forms only where they are not the defaults.
            raw.mask = (a.mask != ScoreMask::default_for(a.causal)).then(|| a.mask.name().into());
            raw.clamp = a.clamp.then_some(true);
            raw.scale_queries = a.scale_queries.then_some(true);
            raw.window = (a.window > 0).then_some(a.window);
            raw.shift = (a.shift > 0).then_some(a.shift);
        }
        Op::Rotary { heads, theta } => {
            raw.heads = Some(*heads);
            raw.theta = Some(*theta);
        }
        Op::Gather { edges } => raw.edges = Some(*edges),
        Op::ScatterAdd { nodes } => raw.nodes = Some(*nodes),
        Op::SegmentSum { segments } => raw.segments = Some(*segments),
        Op::Moe(m) => {
            raw.experts = Some(m.experts);
            raw.local = (m.local != m.experts).then_some(m.local);
            raw.top_k = Some(m.top_k);
            raw.ffn = Some(m.ffn);
            raw.gated = Some(m.gated);
            raw.activation = Some(m.activation.name().to_owned());
            raw.capacity_factor = m.capacity_factor;
        }
        Op::MaxPool(p) | Op::AvgPool(p) => {
            raw.kernel = Some(ints(&p.kernel));
            raw.stride = Some(ints(&p.stride));
            raw.padding = Some(pairs(&p.padding));
        }
        Op::LeakyRelu { alpha } => raw.alpha = Some(*alpha),
        Op::Narrow { start, len } => {
            raw.start = Some(*start);
            raw.len = Some(*len);
        }
        Op::ChannelShuffle { groups } => raw.groups = Some(*groups),
        Op::PrependTokens { tokens } => raw.tokens = Some(*tokens),
        Op::Clip { min, max } => {
            raw.min = Some(*min);
            raw.max = Some(*max);
        }
        Op::HardSigmoid { alpha, beta } => {
            raw.alpha = Some(*alpha);
            raw.beta = Some(*beta);
        }
        Op::Scale { factor } => raw.factor = Some(*factor),
        Op::Shift { offset } => raw.offset = Some(*offset),
        Op::Pow { exponent } => raw.exponent = Some(*exponent),
        Op::Dropout { rate } => raw.rate = Some(*rate),
        Op::Tile { repeats } => raw.repeats = Some(repeats.to_vec()),
        Op::Upsample { factor } => raw.scale_factor = Some(ints(factor)),
        Op::Input
        | Op::GlobalAvgPool
        | Op::BatchNorm
        | Op::ChannelAffine
        | Op::ChannelScale
        | Op::Relu
        | Op::Tanh
        | Op::Add
        | Op::Mul
        | Op::Sigmoid
        | Op::HardSwish
        | Op::Concat
        | Op::Flatten
        | Op::FlattenPositions
        | Op::PositionEmbedding
        | Op::PatchMerge
        | Op::SoftmaxCrossEntropy
        | Op::MseLoss
        | Op::MatMul
        | Op::LayerNorm
        | Op::RmsNorm
        | Op::Softmax
        | Op::Gelu
        | Op::Silu => {}
    }
    raw
}

/// Every op kind a workload file may name.
pub fn op_kinds() -> impl Iterator<Item = &'static str> {
    OPS.iter().map(|(kind, _)| *kind)
}

/// One layer as the workload file writes it (op kind and its parameters), for records that
/// describe a layer.
#[derive(Debug, Serialize)]
#[serde(transparent)]
pub struct LayerSpec(RawLayer);

/// Layer `id` of `graph` as the workload file writes it.
///
/// # Panics
/// If `id` is not a node of `graph`.
pub fn layer_spec(graph: &Graph, id: NodeId) -> LayerSpec {
    LayerSpec(export_layer(graph, id, &graph.layers()[id]))
}

/// Writes `graph` as a workload file.
pub fn export(graph: &Graph, description: Option<&str>) -> Result<String> {
    let raw = RawWorkload {
        name: graph.name().to_owned(),
        description: description.map(str::to_owned),
        input: graph.input_shape().dims().to_vec(),
        layer: graph
            .layers()
            .iter()
            .enumerate()
            .skip(1)
            .map(|(i, l)| Spanned::new(0..0, export_layer(graph, i, l)))
            .collect(),
    };
    let body = toml::to_string(&raw).map_err(|e| Error::Export {
        workload: graph.name().to_owned(),
        message: e.to_string(),
    })?;
    Ok(format!(
        "# ridgeline workload file (format: docs/guide/workloads.md, 'Workload files').\n\
         # Shapes are per sample, channels first; padding is [before, after] per dimension.\n\
         {body}"
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::workloads::{self, BuildOptions};

    const TINY: &str = r#"
name = "tiny"
input = [3, 32, 32]

[[layer]]
name = "conv1"
op = "conv"
out_channels = 16
kernel = 3
padding = "same"

[[layer]]
name = "relu1"
op = "relu"

[[layer]]
name = "conv2"
op = "conv"
out_channels = 16
kernel = [3, 3]
padding = 1

[[layer]]
name = "skip"
op = "add"
inputs = ["conv2", "conv1"]

[[layer]]
name = "pool"
op = "global-avg-pool"

[[layer]]
name = "fc"
op = "dense"
out_features = 10

[[layer]]
name = "loss"
op = "softmax-cross-entropy"
"#;

    #[test]
    fn hand_written_file_parses() {
        let g = parse_workload(TINY, "tiny.toml", None).unwrap();
        assert_eq!(g.layers().len(), 8);
        assert_eq!(
            g.layers()[g.find("skip").unwrap()].output.dims(),
            &[16, 32, 32]
        );
        assert_eq!(g.layers()[g.find("fc").unwrap()].output.dims(), &[10]);
    }

    #[test]
    fn input_size_override() {
        let g = parse_workload(TINY, "tiny.toml", Some(&[64])).unwrap();
        assert_eq!(g.input_shape().dims(), &[3, 64, 64]);
    }

    #[test]
    fn every_builtin_round_trips_through_export() {
        for name in workloads::names() {
            let g = workloads::build(&name, &BuildOptions::default()).unwrap();
            let text = export(&g, Some("round trip")).unwrap();
            let back = parse_workload(&text, "export.toml", None)
                .unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
            assert_eq!(back, g, "{name}");
        }
    }

    fn error_of(text: &str) -> String {
        parse_workload(text, "bad.toml", None)
            .unwrap_err()
            .to_string()
    }

    /// Attention's unfused kernels: the mask form defaults from `causal`, a form is written
    /// only where it differs, and an unknown one is named with the forms there are.
    #[test]
    fn attention_mask_forms_parse_export_and_refuse_unknown_ones() {
        let text = |fields: &str| {
            format!(
                "name = \"a\"\ninput = [24, 6]\n\n[[layer]]\nname = \"a\"\nop = \"attention\"\n\
                 heads = 2\n{fields}"
            )
        };
        let attention = |fields: &str| {
            let g = parse_workload(&text(fields), "a.toml", None).unwrap();
            match g.layers()[1].op {
                Op::Attention(a) => (g.clone(), a),
                ref op => panic!("{op:?}"),
            }
        };
        assert_eq!(attention("causal = true\n").1.mask, ScoreMask::Select);
        assert_eq!(attention("").1.mask, ScoreMask::None);
        let (g, a) =
            attention("causal = true\nmask = \"add\"\nclamp = true\nscale_queries = true\n");
        assert_eq!(
            (a.mask, a.clamp, a.scale_queries),
            (ScoreMask::Add, true, true)
        );
        let exported = export(&g, None).unwrap();
        assert!(exported.contains("mask = \"add\""), "{exported}");
        assert_eq!(parse_workload(&exported, "e.toml", None).unwrap(), g);
        let plain = export(&attention("causal = true\n").0, None).unwrap();
        assert!(
            !plain.contains("mask") && !plain.contains("clamp"),
            "{plain}"
        );
        let err = error_of(&text("mask = \"causal\"\n"));
        assert!(
            err.contains("layer `a`")
                && err.contains("mask = \"causal\"")
                && err.contains("none, select, add"),
            "{err}"
        );
    }

    /// Rotary embeddings and grouped-query attention in a workload file; what cannot be
    /// built is named.
    #[test]
    fn rotary_and_grouped_query_attention_in_files() {
        let file = |rotary: &str, kv: usize| {
            format!(
                "name = \"r\"\ninput = [16]\n\n[[layer]]\nname = \"e\"\nop = \"embedding\"\n\
                 num_embeddings = 10\nembedding_dim = 8\n\n[[layer]]\nname = \"q\"\n\
                 op = \"rotary\"\n{rotary}\n\n[[layer]]\nname = \"k\"\nop = \"linear\"\n\
                 inputs = [\"e\"]\nout_features = {}\n\n[[layer]]\nname = \"a\"\n\
                 op = \"attention\"\ninputs = [\"q\", \"k\", \"k\"]\nheads = 4\nkv_heads = {kv}\n",
                2 * kv
            )
        };
        let g = parse_workload(&file("heads = 4", 2), "r.toml", None).unwrap();
        let Op::Attention(a) = g.layers()[g.find("a").unwrap()].op else {
            panic!("no attention")
        };
        assert_eq!((a.heads, a.kv_heads), (4, 2));
        assert_eq!(
            g.layers()[g.find("q").unwrap()].op,
            Op::Rotary {
                heads: 4,
                theta: ROPE_THETA
            }
        );
        for (rotary, kv, want) in [
            ("heads = 4\ntheta = 0.5", 2, "theta = 0.5"),
            ("heads = 8", 2, "even size"),
            ("heads = 4", 3, "kv_heads = 3 does not divide"),
        ] {
            let e = error_of(&file(rotary, kv));
            assert!(e.contains("bad.toml") && e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn semantic_errors_name_file_line_and_layer() {
        let text = TINY.replace("kernel = [3, 3]", "kernel = [3, 3]\ngroups = 3");
        let err = error_of(&text);
        assert!(
            err.starts_with("bad.toml, line 16: layer `conv2`: "),
            "{err}"
        );
        assert!(err.contains("groups = 3 does not divide"), "{err}");
    }

    #[test]
    fn kernel_larger_than_padded_input() {
        let err = error_of(&TINY.replace("kernel = [3, 3]\npadding = 1", "kernel = 40"));
        assert!(err.contains("larger than its padded input"), "{err}");
    }

    #[test]
    fn shapes_that_do_not_connect() {
        let err = error_of(&TINY.replace("padding = 1", "padding = 0"));
        assert!(
            err.contains("layer `skip`") && err.contains("do not connect"),
            "{err}"
        );
    }

    #[test]
    fn unknown_op_field_and_input_are_refused() {
        let err = error_of(&TINY.replace("op = \"relu\"\n", ""));
        assert!(
            err.contains("line 12") && err.contains("missing field `op`"),
            "{err}"
        );
        let err = error_of(&TINY.replace("op = \"relu\"", "op = \"swish\""));
        assert!(err.contains("unknown op `swish`"), "{err}");
        let err = error_of(&TINY.replace("op = \"relu\"", "op = \"relu\"\nalpha = 0.1"));
        assert!(
            err.contains("field `alpha` does not apply to op `relu`"),
            "{err}"
        );
        let err = error_of(&TINY.replace("[\"conv2\", \"conv1\"]", "[\"conv2\", \"conv9\"]"));
        assert!(
            err.contains("input `conv9` is not an earlier layer"),
            "{err}"
        );
        let err = error_of(&TINY.replace("out_features = 10", ""));
        assert!(err.contains("needs field `out_features`"), "{err}");
    }

    #[test]
    fn malformed_toml_reports_line_and_key() {
        let err = error_of(&TINY.replace(
            "out_channels = 16\nkernel = 3",
            "out_channels = \"x\"\nkernel = 3",
        ));
        assert!(err.starts_with("bad.toml: "), "{err}");
        assert!(
            err.contains("line 8") && err.contains("expected usize"),
            "{err}"
        );
        let err = error_of(&TINY.replace("kernel = 3\n", "kernel = 3\nkernal = 3\n"));
        assert!(err.contains("kernal"), "{err}");
        let err = error_of("name = \"x\"\ninput = [3, 8\n");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn negative_values_are_refused() {
        let err = error_of(&TINY.replace("kernel = 3", "kernel = -3"));
        assert!(err.contains("must be a non-negative integer"), "{err}");
    }

    /// Fuzzing the parser: arbitrary text, mutated valid files, and valid structure with
    /// hostile values all give a result (usually an error), never a panic; whatever parses
    /// also costs without panicking.
    pub(crate) mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use crate::cost::cost;
        use crate::memory::{Footprint, Optimizer};
        use crate::precision::Precision;
        use crate::workloads::{self, BuildOptions};

        /// Applies `(position, kind, char)` edits at char boundaries: delete, insert, replace.
        pub(crate) fn mutate(text: &str, edits: &[(f64, u8, char)]) -> String {
            let mut chars: Vec<char> = text.chars().collect();
            for &(at, kind, ch) in edits {
                if chars.is_empty() {
                    chars.push(ch);
                    continue;
                }
                let i = ((at * chars.len() as f64) as usize).min(chars.len() - 1);
                match kind % 3 {
                    0 => {
                        chars.remove(i);
                    }
                    1 => chars.insert(i, ch),
                    _ => chars[i] = ch,
                }
            }
            chars.into_iter().collect()
        }

        pub(crate) fn edits() -> impl Strategy<Value = Vec<(f64, u8, char)>> {
            let ch = prop_oneof![
                prop::sample::select(vec![
                    '[', ']', '{', '}', '=', '"', '\n', ',', '-', '0', '9', '.', 'x'
                ]),
                any::<char>(),
            ];
            prop::collection::vec((0.0f64..1.0, any::<u8>(), ch), 1..10)
        }

        fn hostile_int() -> impl Strategy<Value = i64> {
            prop_oneof![
                0i64..6,
                -3i64..0,
                (1i64 << 20)..(1i64 << 42),
                Just(i64::MAX),
                any::<i64>()
            ]
        }

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                hostile_int().prop_map(|v| v.to_string()),
                prop::collection::vec(hostile_int(), 0..4).prop_map(|v| format!("{v:?}")),
                prop::collection::vec(prop::collection::vec(hostile_int(), 0..3), 0..3)
                    .prop_map(|v| format!("{v:?}")),
                Just("\"same\"".to_owned()),
                Just("\"valid\"".to_owned()),
                (-1e3f64..1e3).prop_map(|f| format!("{f:?}")),
                Just("nan".to_owned()),
                Just("inf".to_owned()),
            ]
        }

        fn field() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec![
                "out_channels",
                "out_features",
                "kernel",
                "stride",
                "padding",
                "dilation",
                "groups",
                "bias",
                "output_padding",
                "alpha",
                "factor",
                "offset",
                "exponent",
                "rate",
                "repeats",
                "scale_factor",
            ])
        }

        fn layer() -> impl Strategy<Value = String> {
            let op = prop::sample::select(OPS.iter().map(|(n, _)| *n).collect::<Vec<_>>());
            (op, prop::collection::vec((field(), value()), 0..6)).prop_map(|(op, fields)| {
                let mut s = format!("[[layer]]\nname = \"l\"\nop = \"{op}\"\n");
                let mut seen = std::collections::BTreeSet::new();
                for (f, v) in fields {
                    if seen.insert(f) {
                        s.push_str(&format!("{f} = {v}\n"));
                    }
                }
                s
            })
        }

        fn check(text: &str) {
            if let Ok(g) = parse_workload(text, "fuzz.toml", None) {
                for p in Precision::ALL {
                    let c = cost(&g, 1 << 20, p);
                    assert!(c.flops_train.value().is_finite());
                    let f = Footprint::of(&g, p, Optimizer::Lamb);
                    let _ = f.max_batch(crate::units::Bytes::from_gib(80.0));
                }
            }
        }

        proptest! {
            #[test]
            fn arbitrary_text_never_panics(text in ".{0,400}") {
                check(&text);
            }

            #[test]
            fn mutated_exports_never_panic(
                name in prop::sample::select(vec!["cosmoflow", "deepcam", "resnet50"]),
                edits in edits(),
            ) {
                let g = workloads::build(name, &BuildOptions::default()).unwrap();
                check(&mutate(&export(&g, None).unwrap(), &edits));
            }

            #[test]
            fn hostile_values_never_panic(
                input in prop::collection::vec(hostile_int(), 0..5),
                layers in prop::collection::vec(layer(), 1..4),
            ) {
                let mut text = format!("name = \"fuzz\"\ninput = {input:?}\n");
                for (i, l) in layers.iter().enumerate() {
                    text.push_str(&l.replace("name = \"l\"", &format!("name = \"l{i}\"")));
                }
                check(&text);
            }
        }
    }
}
