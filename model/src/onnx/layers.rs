//! Operators on activations as layers: one function a kind of node ([`LAYERS`]), each
//! checking the node's attributes and weights against the IR's rules and returning the
//! layer's op (or binding the node's outputs to what it leaves unchanged).

use smallvec::smallvec;

use super::state::State;
use super::value::{
    Node, Value, float, int, ints, per_channel, text, unique, usizes, value_dims, value_layer,
};
use crate::error::Result;
use crate::graph::{Conv, Dims, NodeId, Op, PadPairs, Padding, Pool};

/// How a node on activations becomes a layer, reading `xid` (its first input) and the
/// layers in `inputs` (`[xid]` unless it sets them): its op, or `None` where it bound its
/// outputs itself.
type LayerFn = fn(&mut State<'_>, &Node<'_>, NodeId, &mut Vec<NodeId>) -> Result<Option<Op>>;

/// Each kind of node on activations, and how it becomes a layer.
const LAYERS: &[(&[&str], LayerFn)] = &[
    (&["Conv", "ConvTranspose"], layer_conv),
    (&["Gemm", "MatMul"], layer_gemm),
    (&["MaxPool", "AveragePool"], layer_max_pool),
    (&["ReduceMean"], layer_reduce_mean),
    (
        &[
            "GlobalAveragePool",
            "BatchNormalization",
            "Relu",
            "Tanh",
            "Sigmoid",
            "HardSwish",
            "Gelu",
        ],
        layer_plain,
    ),
    (&["LeakyRelu"], layer_leaky_relu),
    (&["HardSigmoid"], layer_hard_sigmoid),
    (&["Clip"], layer_clip),
    (&["Dropout"], layer_dropout),
    (&["Softmax"], layer_softmax),
    (&["Flatten"], layer_flatten),
    (&["Reshape"], layer_reshape),
    (&["Mul"], layer_mul),
    (&["Add", "Sum"], layer_add),
    (&["Slice"], layer_slice),
    (&["Concat"], layer_concat),
];

/// The layer node `n` makes of activation `xid`: its op and input layers, `None` where the
/// node bound its outputs itself (a reshape to the shape it has, a sum folded into the
/// affine before it, a channel shuffle's first node); an error where no entry of [`LAYERS`]
/// takes it, or it breaks one's rules.
pub(super) fn layer(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
) -> Result<Option<(Op, Vec<NodeId>)>> {
    if text(n.proto, "auto_pad").as_deref() == Some("SAME_LOWER") {
        return Err(n.fail("auto_pad SAME_LOWER is not modelled; give explicit pads".into()));
    }
    let Some((_, f)) = LAYERS.iter().find(|(ops, _)| ops.contains(&n.op.as_str())) else {
        return Err(n.fail(format!(
            "ridgeline's IR has no `{}`: write the workload as a TOML layer list, or open an \
             issue for the op",
            n.op
        )));
    };
    let mut inputs = vec![xid];
    Ok(f(s, n, xid, &mut inputs)?.map(|op| (op, inputs)))
}

/// A convolution's or pool's padding over `rank` spatial dimensions.
fn pads(n: &Node<'_>, rank: usize) -> Result<Padding> {
    let (node, fail) = (n.proto, |m: String| n.fail(m));
    match text(node, "auto_pad").as_deref() {
        Some("SAME_UPPER") => Ok(Padding::Same),
        Some("VALID") => Ok(Padding::Valid),
        _ => match ints(node, "pads") {
            None => Ok(Padding::Explicit(smallvec![[0, 0]; rank])),
            Some(p) if p.len() == 2 * rank && p.iter().all(|&v| v >= 0) => {
                let pairs: PadPairs = (0..rank)
                    .map(|i| [p[i] as usize, p[i + rank] as usize])
                    .collect();
                Ok(Padding::Explicit(pairs))
            }
            Some(p) => Err(fail(format!(
                "attribute `pads` {p:?}: give {} pads of at least 0 (begin and end of \
                 each of the {rank} spatial dimensions)",
                2 * rank
            ))),
        },
    }
}

/// A per-dimension attribute: absent, the default; present, one value of at least `min` a
/// spatial dimension.
fn per_dim(n: &Node<'_>, rank: usize, name: &str, default: usize, min: usize) -> Result<Dims> {
    let fail = |m: String| n.fail(m);
    match ints(n.proto, name) {
        None => Ok(smallvec![default; rank]),
        Some(v) => usizes(&v)
            .filter(|d| d.len() == rank && d.iter().all(|&x| x >= min))
            .ok_or_else(|| {
                fail(format!(
                    "attribute `{name}` {v:?}: give {rank} values of at least {min}, \
                     one a spatial dimension"
                ))
            }),
    }
}

/// An op with nothing to read but its input: a global average pool, a batch norm (its
/// statistics are the layer's own), and the activations without attributes.
fn layer_plain(
    _s: &mut State<'_>,
    n: &Node<'_>,
    _xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    Ok(Some(match n.op.as_str() {
        "GlobalAveragePool" => Op::GlobalAvgPool,
        "BatchNormalization" => Op::BatchNorm,
        "Relu" => Op::Relu,
        "Tanh" => Op::Tanh,
        "Sigmoid" => Op::Sigmoid,
        "HardSwish" => Op::HardSwish,
        "Gelu" => Op::Gelu,
        other => return Err(n.fail(format!("`{other}` is no op without attributes"))),
    }))
}

fn layer_conv(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let op = n.op.as_str();
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    let rank = s.g.layers()[xid].output.spatial().len();
    Ok(Some({
        let w = value_dims(get(1)?).ok_or_else(|| fail("its weight is not a constant".into()))?;
        let w = usizes(&w).filter(|w| w.len() == rank + 2).ok_or_else(|| {
            fail(format!(
                "its weight shape {w:?} is not [out, in / groups, kernel...]"
            ))
        })?;
        let groups = match int(node, "group") {
            None => 1,
            Some(g) if g >= 1 => usize::try_from(g).unwrap_or(usize::MAX),
            Some(g) => {
                return Err(fail(format!("attribute `group` {g}: at least 1")));
            }
        };
        let transposed = op == "ConvTranspose";
        if w.contains(&0) {
            return Err(fail(format!("its weight shape {w:?} has a dimension of 0")));
        }
        if let Some(k) = ints(node, "kernel_shape")
            && usizes(&k).as_deref() != Some(&w[2..])
        {
            return Err(fail(format!(
                "attribute `kernel_shape` {k:?} contradicts its weight's kernel {:?}",
                &w[2..]
            )));
        }
        // The weight against the input: [out, in / groups, ...] (transposed: [in,
        // out / groups, ...]).
        let in_channels = s.g.layers()[xid].output.channels();
        let (weight_in, per_group) = if transposed {
            (w[0], in_channels)
        } else {
            (w[1] * groups, w[0])
        };
        if weight_in != in_channels || per_group % groups != 0 {
            return Err(fail(format!(
                "its weight shape {w:?} with group {groups} contradicts its input of \
                 {in_channels} channels"
            )));
        }
        let out_channels = if transposed { w[1] * groups } else { w[0] };
        let mut c = Conv::new(out_channels, &w[2..])
            .padding(pads(n, rank)?)
            .groups(groups)
            .bias(node.input.get(2).is_some_and(|n| !n.is_empty()));
        c.stride = per_dim(n, rank, "strides", 1, 1)?;
        c.dilation = per_dim(n, rank, "dilations", 1, 1)?;
        if transposed {
            c.output_padding = per_dim(n, rank, "output_padding", 0, 0)?;
            Op::conv_transpose(c)
        } else {
            Op::conv(c)
        }
    }))
}

fn layer_gemm(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let op = n.op.as_str();
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some({
        let w = value_dims(get(1)?).ok_or_else(|| {
            fail("multiplies two activations; only a product by a weight is imported".into())
        })?;
        if s.g.layers()[xid].output.rank() != 1 || w.len() != 2 {
            return Err(fail(
                "only a product of a feature vector [batch, features] by a matrix is \
                 imported (sequence layouts are not yet)"
                    .into(),
            ));
        }
        let trans_b = op == "Gemm" && int(node, "transB").unwrap_or(0) != 0;
        if op == "Gemm" && int(node, "transA").unwrap_or(0) != 0 {
            return Err(fail("transA is not imported".into()));
        }
        let out = if trans_b { w[0] } else { w[1] };
        Op::Dense {
            out_features: usize::try_from(out).map_err(|_| fail(format!("{out} outputs")))?,
            bias: op == "Gemm" && node.input.get(2).is_some_and(|n| !n.is_empty()),
        }
    }))
}

fn layer_max_pool(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let op = n.op.as_str();
    let fail = |m: String| n.fail(m);
    let rank = s.g.layers()[xid].output.spatial().len();
    Ok(Some({
        if int(node, "ceil_mode").unwrap_or(0) != 0 {
            return Err(fail("ceil_mode 1 is not modelled".into()));
        }
        if ints(node, "kernel_shape").is_none() {
            return Err(fail("no attribute `kernel_shape`: a pool needs one".into()));
        }
        let kernel = per_dim(n, rank, "kernel_shape", 1, 1)?;
        let mut p = Pool::new(&kernel);
        p.stride = per_dim(n, rank, "strides", 1, 1)?;
        p.padding = pads(n, rank)?;
        if op == "MaxPool" {
            Op::max_pool(p)
        } else {
            Op::avg_pool(p)
        }
    }))
}

/// A mean over every spatial axis (ShuffleNetV2's `x.mean([2, 3])`): a global
/// average pool, whose `[C, 1, ...]` a dense layer reads as the vector it is.
fn layer_reduce_mean(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let label = n.label.as_str();
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some({
        let mut axes = match ints(node, "axes") {
            Some(a) => a,
            None => match node.input.get(1).filter(|n| !n.is_empty()) {
                Some(_) => match get(1)? {
                    Value::Constant { ints: Some(a), .. } => a.clone(),
                    _ => return Err(fail("its axes are not a constant".into())),
                },
                None => Vec::new(),
            },
        };
        let r = s.g.layers()[xid].output.rank() as i64 + 1;
        axes.iter_mut()
            .for_each(|a| *a = if *a < 0 { *a + r } else { *a });
        axes.sort_unstable();
        if r < 3 || axes != (2..r).collect::<Vec<_>>() {
            return Err(fail(format!(
                "axes {axes:?}: only a mean over every spatial axis (a global average \
                 pool) is imported"
            )));
        }
        if int(node, "keepdims").unwrap_or(1) == 0 {
            // The axes dropped: the pool's `[C, 1, ...]` as a feature vector.
            let name = unique(&s.g, &mut s.names, &format!("{label}_pool"));
            let pooled =
                s.g.push(name, Op::GlobalAvgPool, &[xid])
                    .map_err(|e| fail(e.message))?;
            *inputs = vec![pooled];
            Op::Flatten
        } else {
            Op::GlobalAvgPool
        }
    }))
}

fn layer_leaky_relu(
    _s: &mut State<'_>,
    n: &Node<'_>,
    _xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    Ok(Some(Op::LeakyRelu {
        alpha: f64::from(float(node, "alpha").unwrap_or(0.01)),
    }))
}

fn layer_hard_sigmoid(
    _s: &mut State<'_>,
    n: &Node<'_>,
    _xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    Ok(Some(Op::HardSigmoid {
        alpha: f64::from(float(node, "alpha").unwrap_or(0.2)),
        beta: f64::from(float(node, "beta").unwrap_or(0.5)),
    }))
}

fn layer_clip(
    s: &mut State<'_>,
    n: &Node<'_>,
    _xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some({
        // Opset 11 on: the bounds are inputs (absent or empty: unbounded); before,
        // attributes.
        let bound = |i: usize, name: &str| -> Result<Option<f64>> {
            if node.input.get(i).is_none_or(String::is_empty) {
                return Ok(float(node, name).map(f64::from));
            }
            match get(i)? {
                Value::Constant {
                    scalar: Some(v), ..
                } => Ok(Some(*v)),
                _ => Err(fail(format!("its {name} is not a constant scalar"))),
            }
        };
        match (bound(1, "min")?, bound(2, "max")?) {
            (Some(0.0), None) => Op::Relu,
            (Some(min), Some(max)) => Op::Clip { min, max },
            (min, max) => {
                return Err(fail(format!(
                    "bounds {min:?} and {max:?}: only a clip between two bounds (ReLU6), \
                     or from 0 up (a ReLU), is imported"
                )));
            }
        }
    }))
}

fn layer_dropout(
    _s: &mut State<'_>,
    n: &Node<'_>,
    _xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    Ok(Some(Op::Dropout {
        rate: f64::from(float(node, "ratio").unwrap_or(0.5)),
    }))
}

fn layer_softmax(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let fail = |m: String| n.fail(m);
    Ok(Some({
        let axis = int(node, "axis").unwrap_or(1);
        let r = s.g.layers()[xid].output.rank() as i64 + 1;
        if axis != 1 && axis != 1 - r {
            return Err(fail(format!(
                "axis {axis}: only the channel axis (1) is imported"
            )));
        }
        if node.output.iter().any(|o| s.outputs.contains(o)) {
            Op::SoftmaxCrossEntropy
        } else {
            Op::Softmax
        }
    }))
}

fn layer_flatten(
    _s: &mut State<'_>,
    n: &Node<'_>,
    _xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let fail = |m: String| n.fail(m);
    Ok(Some({
        if int(node, "axis").unwrap_or(1) != 1 {
            return Err(fail(
                "only axis 1 (a feature vector per sample) is imported".into(),
            ));
        }
        Op::Flatten
    }))
}

fn layer_reshape(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some({
        let shape = match get(1)? {
            Value::Constant { ints: Some(s), .. } => s.clone(),
            _ => return Err(fail("its shape is not a constant".into())),
        };
        let elements = s.g.layers()[xid].output.elements() as i64;
        let here: Vec<i64> = s.g.layers()[xid]
            .output
            .dims()
            .iter()
            .map(|&d| d as i64)
            .collect();
        let groups = shape.len() == here.len() + 2
            && shape[1] > 0
            && shape[2] > 0
            && shape[1].checked_mul(shape[2]) == Some(here[0])
            && shape[3..] == here[1..];
        if groups {
            // Channels viewed as groups: a channel shuffle begins.
            for o in &node.output {
                s.shuffles
                    .insert(o.clone(), (xid, shape[1] as usize, false));
            }
            return Ok(None);
        }
        let positions: i64 = here[1..].iter().product();
        if here.len() >= 3
            && shape.len() == 3
            && shape[1] == here[0]
            && (shape[2] == positions || shape[2] == -1)
        {
            // A map's positions as one sequence (ViT's patches), channels first.
            Op::FlattenPositions
        } else if shape.len() == here.len() + 1 && shape[1..] == here[..] {
            // A reshape to the shape it has: nothing to do.
            for o in &node.output {
                s.values.insert(o.clone(), Value::Layer(xid));
            }
            return Ok(None);
        } else if shape.len() == 2 && (shape[1] == -1 || shape[1] == elements) {
            Op::Flatten
        } else {
            return Err(fail(format!(
                "to {shape:?}: only a reshape to a feature vector per sample is imported"
            )));
        }
    }))
}

/// A product of two activations (a gate broadcast over a map goes second), or by a
/// per-channel constant: a channel affine where a shift follows, else a scale.
fn layer_mul(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some(if matches!(get(1)?, Value::Layer(_)) {
        {
            let other = value_layer(get(1)?).ok_or_else(|| fail("no input".into()))?;
            // A gate broadcast over a feature map goes second (the product commutes).
            let smaller = |a: NodeId, b: NodeId| {
                s.g.layers()[a].output.elements() < s.g.layers()[b].output.elements()
            };
            *inputs = if smaller(xid, other) {
                vec![other, xid]
            } else {
                vec![xid, other]
            };
            Op::Mul
        }
    } else {
        {
            let c = value_dims(get(1)?).ok_or_else(|| fail("multiplies by no constant".into()))?;
            if !per_channel(&c, s.g.layers()[xid].output.dims()) {
                return Err(fail(format!(
                    "multiplies by a constant of shape {c:?}; only a per-channel scale is \
                 imported"
                )));
            }
            // With a shift added after it, a channel affine (whose shift the `Add`
            // folds in); alone, a scale (ConvNeXt's layer scale).
            if node.output.iter().any(|o| s.shifted.contains(o)) {
                Op::ChannelAffine
            } else {
                Op::ChannelScale
            }
        }
    }))
}

fn layer_add(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some({
        let mut layers = Vec::new();
        for i in 0..node.input.len() {
            match get(i)? {
                Value::Layer(id) => layers.push(*id),
                Value::Constant { dims, .. } => {
                    // The shift of a channel affine (a per-channel Mul before it).
                    let after_affine =
                        matches!(s.g.layers()[xid].op, Op::ChannelAffine) && node.input.len() == 2;
                    if after_affine && per_channel(dims, s.g.layers()[xid].output.dims()) {
                        continue;
                    }
                    return Err(fail(format!(
                        "adds a constant of shape {dims:?}; only the per-channel shift \
                         after a per-channel Mul is imported"
                    )));
                }
                // Sequences are taken before this (`sequence_node`).
                Value::Seq(_) => return Err(fail("adds a sequence".into())),
            }
        }
        if layers.len() == 1 {
            // Folded into the channel affine before it.
            for o in &node.output {
                s.values.insert(o.clone(), Value::Layer(layers[0]));
            }
            return Ok(None);
        }
        *inputs = layers;
        Op::Add
    }))
}

fn layer_slice(
    s: &mut State<'_>,
    n: &Node<'_>,
    xid: NodeId,
    _inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some({
        let list = |i: usize| -> Result<Option<Vec<i64>>> {
            if node.input.get(i).is_none_or(String::is_empty) {
                return Ok(None);
            }
            match get(i)? {
                Value::Constant { ints: Some(v), .. } => Ok(Some(v.clone())),
                _ => Err(fail(format!("its input {i} is not a constant"))),
            }
        };
        let (starts, ends) = (list(1)?, list(2)?);
        let axes = list(3)?.unwrap_or_else(|| vec![0]);
        let steps = list(4)?.unwrap_or_else(|| vec![1]);
        let c = s.g.layers()[xid].output.channels() as i64;
        match (starts.as_deref(), ends.as_deref(), &axes[..], &steps[..]) {
            (Some(&[start]), Some(&[end]), &[1], &[1]) if start >= 0 && end > start => {
                let end = end.min(c);
                Op::Narrow {
                    start: start as usize,
                    len: (end - start).max(0) as usize,
                }
            }
            _ => {
                return Err(fail(format!(
                    "starts {starts:?}, ends {ends:?}, axes {axes:?}, steps {steps:?}: \
                     only a run of channels (axis 1, step 1) is imported"
                )));
            }
        }
    }))
}

fn layer_concat(
    s: &mut State<'_>,
    n: &Node<'_>,
    _xid: NodeId,
    inputs: &mut Vec<NodeId>,
) -> Result<Option<Op>> {
    let node = n.proto;
    let get = |i: usize| n.get(&s.values, i);
    let fail = |m: String| n.fail(m);
    Ok(Some({
        let axis = int(node, "axis").unwrap_or(1);
        if axis != 1 {
            return Err(fail(format!("axis {axis}: only channels (1) are joined")));
        }
        *inputs = (0..node.input.len())
            .map(|i| get(i).map(value_layer))
            .collect::<Result<Option<Vec<_>>>>()?
            .ok_or_else(|| fail("joins a constant".into()))?;
        if let [only] = inputs[..] {
            // A concatenation of one tensor is that tensor (DenseNet's first layer
            // of each block, `torch.cat([x], 1)`).
            for o in &node.output {
                s.values.insert(o.clone(), Value::Layer(only));
            }
            return Ok(None);
        }
        Op::Concat
    }))
}
