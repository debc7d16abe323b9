//! ONNX models into the layer-graph IR: the protobuf decoded by prost with ONNX's own schema
//! (`onnx/proto.rs`, generated from `onnx.proto`), shapes inferred by the IR's rules as each
//! layer is added.
//!
//! A model's one data input (the graph input that no initializer fills) is the sample; its
//! first dimension is the batch. Weights are initializers or computed from them
//! (`ConstantOfShape`, `Constant`, `Unsqueeze`, `Squeeze`, `Reshape`, `Identity` of
//! constants, as weight-less graphs hold them): only their shapes are read. Each operator on
//! activations becomes a layer, named after its node:
//! `Conv`, `ConvTranspose` (`auto_pad` `NOTSET`, `VALID` or `SAME_UPPER`), `Gemm` and a
//! `MatMul` of a feature vector by a weight (dense), `MaxPool` and `AveragePool`
//! (`ceil_mode` 0), `GlobalAveragePool`, `BatchNormalization`, a `Mul` by a per-channel
//! constant and the `Add` of a per-channel constant after it (channel affine), a `Mul` of
//! two activations, `Relu`,
//! `LeakyRelu`, `Tanh`, `Gelu`, `Softmax` over channels (a graph output's becomes the
//! training loss, softmax cross-entropy), `Add` and `Sum` of activations, `Concat` on
//! channels, `Dropout`, `Flatten` and a `Reshape` to a feature vector. Transformers'
//! sequences and the node chains that are one layer of theirs (embeddings, linear layers
//! over rows, unfused attention) are read by its `sequence` module; logits over a token table's
//! vocabulary get the language-model loss. Anything else is refused with the node and its
//! operator: nothing is guessed.

#[allow(
    missing_docs,
    unreachable_pub,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]
mod proto;
mod sequence;
mod value;

use std::collections::{HashMap, HashSet};

use prost::Message;
use smallvec::smallvec;

use crate::error::{Error, Result};
use crate::graph::{Conv, Dims, Graph, NodeId, Op, PadPairs, Padding, Pool};
use proto::tensor_shape_proto::dimension::Value as Dim;
use proto::type_proto::Value as TypeValue;
use proto::{ModelProto, NodeProto};
use value::{
    FLOAT, Seq, Table, Value, attr, broadcast, constant, float, int, ints, per_channel,
    reshape_constant, shifted_products, slice_constant, text, transpose_constant, unique, usizes,
};

/// Reads an ONNX model (`bytes` of the file `file`) into a graph named `name`.
pub fn import(bytes: &[u8], file: &str, name: &str) -> Result<Graph> {
    let model = ModelProto::decode(bytes).map_err(|e| Error::Parse {
        file: file.to_owned(),
        message: format!("not an ONNX model: {e}"),
    })?;
    let graph = model.graph.ok_or_else(|| Error::Parse {
        file: file.to_owned(),
        message: "the model has no graph".into(),
    })?;
    let mut values: HashMap<String, Value> = HashMap::new();
    for t in &graph.initializer {
        values.insert(t.name.clone().unwrap_or_default(), constant(t));
    }
    let data: Vec<_> = graph
        .input
        .iter()
        .filter(|i| !values.contains_key(i.name.as_deref().unwrap_or_default()))
        .collect();
    let [input] = data.as_slice() else {
        let names: Vec<&str> = data
            .iter()
            .map(|i| i.name.as_deref().unwrap_or("?"))
            .collect();
        return Err(Error::invalid(
            file,
            "graph.input",
            format!(
                "ridgeline takes one input sample, and the graph has {} data inputs ({})",
                names.len(),
                names.join(", ")
            ),
        ));
    };
    let input_name = input.name.clone().unwrap_or_default();
    let dims = match input.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(TypeValue::TensorType(t)) => t
            .shape
            .as_ref()
            .map(|s| s.dim.iter().map(|d| d.value.clone()).collect::<Vec<_>>())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    // The first dimension is the batch (named or not); the others must be numbers.
    let sample: Option<Vec<usize>> = dims
        .iter()
        .skip(1)
        .map(|d| match d {
            Some(Dim::DimValue(v)) => usize::try_from(*v).ok().filter(|v| *v > 0),
            _ => None,
        })
        .collect();
    let sample = match sample {
        Some(s) if !s.is_empty() => s,
        _ => {
            return Err(Error::invalid(
                file,
                format!("graph.input `{input_name}`"),
                "its shape must be [batch, ...] with every dimension after the batch a number",
            ));
        }
    };
    let mut g = Graph::with_capacity(name, sample, graph.node.len())
        .map_err(|e| Error::invalid(file, format!("graph.input `{input_name}`"), e.message))?;
    values.insert(input_name, Value::Layer(0));
    let outputs: Vec<String> = graph.output.iter().filter_map(|o| o.name.clone()).collect();
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut tables: Vec<Table> = Vec::new();
    let mut seq_first: HashSet<String> = HashSet::new();
    let mut windowed: HashMap<String, (usize, usize)> = HashMap::new();
    // A channel shuffle on its way (`Reshape` to `[1, g, C / g, ...]`, `Transpose` of the
    // two group axes, `Reshape` back): the layer, its groups, and whether it is transposed.
    let mut shuffles: HashMap<String, (NodeId, usize, bool)> = HashMap::new();
    let shifted = shifted_products(&graph);
    for (index, node) in graph.node.iter().enumerate() {
        let op = node.op_type.clone().unwrap_or_default();
        // A product of a layer by a constant written constant first (ConvNeXt's layer
        // scale): the layer first, as the product commutes.
        let swapped;
        let node = match node.input.as_slice() {
            [c, x]
                if op == "Mul"
                    && matches!(values.get(c), Some(Value::Constant { .. }))
                    && matches!(values.get(x), Some(Value::Layer(_))) =>
            {
                let mut n = node.clone();
                n.input.swap(0, 1);
                swapped = n;
                &swapped
            }
            _ => node,
        };
        let label = node
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .or_else(|| node.output.first().cloned())
            .unwrap_or_else(|| format!("node{index}"));
        let fail = |message: String| Error::Layer {
            location: format!("{file}, node {index}"),
            layer: label.clone(),
            message: format!("op `{op}`: {message}"),
        };
        let get = |i: usize| -> Result<&Value> {
            let name = node.input.get(i).map(String::as_str).unwrap_or_default();
            values
                .get(name)
                .ok_or_else(|| fail(format!("input `{name}` is not produced before this node")))
        };
        if let Some(d) = node
            .domain
            .as_deref()
            .filter(|d| !d.is_empty() && *d != "ai.onnx")
        {
            return Err(fail(format!(
                "domain `{d}`: a custom operator, not one of ONNX's; export without custom \
                 ops, or write the workload as a TOML layer list"
            )));
        }
        let layer = |v: &Value| match v {
            Value::Layer(id) => Some(*id),
            _ => None,
        };
        let dims_of = |v: &Value| match v {
            Value::Constant { dims, .. } => Some(dims.clone()),
            _ => None,
        };
        // Sequences (transformers): token and position embeddings, and every node that
        // reads a sequence.
        let reads_sequence = node
            .input
            .iter()
            .any(|n| matches!(values.get(n), Some(Value::Seq(_))));
        let table_lookup = op == "Gather"
            && matches!(get(0)?, Value::Constant { dims, ints: None, .. } if dims.len() == 2);
        if reads_sequence || table_lookup {
            let mut reader = sequence::Reader {
                g: &mut g,
                names: &mut names,
                tables: &mut tables,
                seq_first: &mut seq_first,
                windowed: &mut windowed,
                window_out: None,
            };
            let out = reader.node(node, &op, &label, &mut values).map_err(fail)?;
            // Each output its value; a node of one value (Dropout's mask) binds it once.
            for (o, v) in node.output.iter().zip(&out) {
                values.insert(o.clone(), v.clone());
            }
            continue;
        }
        // Constants stay constants (shapes only).
        let all_constant = node
            .input
            .iter()
            .filter(|n| !n.is_empty())
            .all(|n| matches!(values.get(n), Some(Value::Constant { .. })));
        if all_constant {
            let out = match op.as_str() {
                "Constant" => attr(node, "value").and_then(|a| a.t.as_ref()).map(constant),
                "ConstantOfShape" => match get(0)? {
                    Value::Constant {
                        ints: Some(shape), ..
                    } => Some(Value::Constant {
                        dims: shape.clone(),
                        // Integers (a pad's zeros) keep their values.
                        ints: attr(node, "value")
                            .and_then(|a| a.t.as_ref())
                            .map(constant)
                            .and_then(|c| match c {
                                Value::Constant { ints: Some(v), .. } if v.len() == 1 => {
                                    let n = shape.iter().product::<i64>();
                                    (0..=1 << 20).contains(&n).then(|| vec![v[0]; n as usize])
                                }
                                _ => None,
                            }),
                        scalar: None,
                        origin: node.output.first().cloned(),
                    }),
                    _ => None,
                },
                // An integer cast to a float (attention's scale computed from a shape
                // entry): the scalar it is.
                "Cast" if int(node, "to") == Some(i64::from(FLOAT)) => match get(0)?.clone() {
                    Value::Constant {
                        dims,
                        ints: Some(v),
                        ..
                    } if v.len() == 1 => Some(Value::Constant {
                        dims,
                        ints: None,
                        #[allow(clippy::cast_precision_loss)]
                        scalar: Some(v[0] as f64),
                        origin: None,
                    }),
                    other => Some(other),
                },
                "Identity" | "Cast" => Some(get(0)?.clone()),
                "Sqrt" => match get(0)?.clone() {
                    Value::Constant {
                        dims,
                        scalar: Some(v),
                        ..
                    } => Some(Value::Constant {
                        dims,
                        ints: None,
                        scalar: Some(v.sqrt()),
                        origin: None,
                    }),
                    _ => None,
                },
                // The shape of a constant (the shape of a shape torch expands by).
                "Shape" => dims_of(get(0)?).map(|d| Value::Constant {
                    dims: vec![d.len() as i64],
                    ints: Some(d),
                    scalar: None,
                    origin: None,
                }),
                // Entries of a shape.
                // Entries of a shape, or the shape of a slice of a constant (a mask's).
                "Slice" => {
                    let list = |i: usize| -> Option<Vec<i64>> {
                        match node.input.get(i).filter(|n| !n.is_empty()) {
                            None => None,
                            Some(n) => match values.get(n) {
                                Some(Value::Constant { ints: Some(v), .. }) => Some(v.clone()),
                                _ => Some(Vec::new()),
                            },
                        }
                    };
                    match (get(0)?, list(1), list(2)) {
                        (Value::Constant { dims, ints: v, .. }, Some(s), Some(e)) => {
                            slice_constant(dims, v.as_deref(), &s, &e, list(3), list(4)).map(
                                |(dims, ints)| Value::Constant {
                                    dims,
                                    ints,
                                    scalar: None,
                                    origin: None,
                                },
                            )
                        }
                        _ => None,
                    }
                }
                // A transposed weight (a head tied to the token table reads it so), or
                // integers (a pad's pairs).
                "Transpose" => match get(0)? {
                    Value::Constant {
                        dims,
                        origin,
                        scalar,
                        ints: v,
                    } => {
                        let perm = ints(node, "perm")
                            .unwrap_or_else(|| (0..dims.len() as i64).rev().collect());
                        transpose_constant(dims, v.as_deref(), &perm).map(|(out, ints)| {
                            Value::Constant {
                                dims: out,
                                ints,
                                scalar: *scalar,
                                origin: origin.clone(),
                            }
                        })
                    }
                    _ => None,
                },
                // Integers `start, start + delta, ...` below `limit` (a mask's indices).
                "Range" => match (get(0)?, get(1)?, get(2)?) {
                    (
                        Value::Constant { ints: Some(s), .. },
                        Value::Constant { ints: Some(l), .. },
                        Value::Constant { ints: Some(d), .. },
                    ) if s.len() == 1 && l.len() == 1 && d.len() == 1 && d[0] != 0 => {
                        let (s, l, d) = (i128::from(s[0]), i128::from(l[0]), i128::from(d[0]));
                        // At most 2^20 entries: a longer range is no index ridgeline reads.
                        let n = ((l - s) as f64 / d as f64).ceil().clamp(0.0, 1_048_576.0) as i128;
                        let v: Vec<i64> = (0..n)
                            .map_while(|i| i64::try_from(s + i * d).ok())
                            .collect();
                        Some(Value::Constant {
                            dims: vec![v.len() as i64],
                            ints: Some(v),
                            scalar: None,
                            origin: None,
                        })
                    }
                    _ => None,
                },
                // A scatter into a constant (a mask's regions): its shape.
                "ScatterND" => dims_of(get(0)?).map(|dims| Value::Constant {
                    dims,
                    ints: None,
                    scalar: None,
                    origin: None,
                }),
                // A mask computed from constants (BERT's padding mask of an all-ones
                // attention mask, token types of zeros): its shape only.
                "Equal" | "Where" | "Not" | "Less" | "Greater" | "And" | "Or" | "Neg"
                | "CumSum" | "Max" | "Min" => {
                    let mut dims: Vec<i64> = Vec::new();
                    let mut known: Vec<&[i64]> = Vec::new();
                    for i in 0..node.input.len() {
                        dims = broadcast(&dims, &dims_of(get(i)?).unwrap_or_default());
                        if let Value::Constant { ints: Some(v), .. } = get(i)? {
                            known.push(v);
                        }
                    }
                    // On integers of one vector (a shape's entries), their values.
                    let n = known.iter().map(|v| v.len()).max().unwrap_or(0);
                    let same = known.len() == node.input.len()
                        && dims.len() <= 1
                        && known.iter().all(|v| v.len() == n || v.len() == 1);
                    let at = |v: &[i64], i: usize| v[i.min(v.len() - 1)];
                    let ints = match (op.as_str(), known.as_slice()) {
                        ("Equal", [x, y]) if same => {
                            Some((0..n).map(|i| i64::from(at(x, i) == at(y, i))).collect())
                        }
                        ("Where", [c, x, y]) if same => Some(
                            (0..n)
                                .map(|i| if at(c, i) != 0 { at(x, i) } else { at(y, i) })
                                .collect(),
                        ),
                        _ => None,
                    };
                    Some(Value::Constant {
                        dims,
                        ints,
                        scalar: None,
                        origin: None,
                    })
                }
                // Its target shape where the graph gives it; where that is computed from
                // a mask (BERT's token types), the input's: such a constant is read as an
                // index of constants, whose shape no layer takes.
                "Expand" => Some(Value::Constant {
                    dims: match get(1)? {
                        Value::Constant {
                            ints: Some(shape), ..
                        } => broadcast(&dims_of(get(0)?).unwrap_or_default(), shape),
                        _ => dims_of(get(0)?).unwrap_or_default(),
                    },
                    ints: None,
                    scalar: None,
                    origin: None,
                }),
                // Arithmetic on scalars (attention's scale: `sqrt(d)` as a Pow).
                "Pow" | "Add" | "Sub" | "Mul" | "Div" | "Mod" => {
                    let (a, b) = (get(0)?, get(1)?);
                    match (a, b) {
                        (
                            Value::Constant {
                                dims: da,
                                scalar: sa,
                                ..
                            },
                            Value::Constant {
                                dims: db,
                                scalar: sb,
                                ..
                            },
                        ) => Some(Value::Constant {
                            dims: if da.len() >= db.len() {
                                da.clone()
                            } else {
                                db.clone()
                            },
                            // Integers (a shape computed from another): element by element,
                            // a single value broadcast.
                            ints: match (a, b) {
                                (
                                    Value::Constant { ints: Some(x), .. },
                                    Value::Constant { ints: Some(y), .. },
                                ) if !x.is_empty()
                                    && !y.is_empty()
                                    && (x.len() == y.len() || x.len() == 1 || y.len() == 1) =>
                                {
                                    let n = x.len().max(y.len());
                                    let at = |v: &[i64], i: usize| v[i.min(v.len() - 1)];
                                    // An overflow leaves the shape unknown (refused where
                                    // a layer needs it).
                                    (0..n)
                                        .map(|i| {
                                            let (p, q) = (at(x, i), at(y, i));
                                            match op.as_str() {
                                                "Add" => p.checked_add(q),
                                                "Sub" => p.checked_sub(q),
                                                "Mul" => p.checked_mul(q),
                                                "Div" => p.checked_div(q),
                                                // ONNX's integer `Mod`: the divisor's sign.
                                                "Mod" => p.checked_rem(q).map(|r| {
                                                    if r != 0 && (r < 0) != (q < 0) {
                                                        r + q
                                                    } else {
                                                        r
                                                    }
                                                }),
                                                _ => u32::try_from(q)
                                                    .ok()
                                                    .and_then(|e| p.checked_pow(e)),
                                            }
                                        })
                                        .collect()
                                }
                                _ => None,
                            },
                            scalar: match (sa, sb) {
                                (Some(a), Some(b)) => Some(match op.as_str() {
                                    "Pow" => a.powf(*b),
                                    "Add" => a + b,
                                    "Sub" => a - b,
                                    "Mul" => a * b,
                                    "Mod" => a % b,
                                    _ => a / b,
                                }),
                                // A scalar plus an empty tensor of zeros (ConstantOfShape
                                // of []) stays the scalar.
                                (Some(v), None) | (None, Some(v))
                                    if da.iter().product::<i64>() <= 1
                                        && db.iter().product::<i64>() <= 1 =>
                                {
                                    Some(*v)
                                }
                                _ => None,
                            },
                            origin: None,
                        }),
                        _ => None,
                    }
                }
                "Unsqueeze" | "Squeeze" | "Reshape" | "Flatten" => {
                    let dims = dims_of(get(0)?).unwrap_or_default();
                    Some(Value::Constant {
                        dims: reshape_constant(
                            node,
                            &op,
                            &dims,
                            node.input.get(1).and_then(|n| values.get(n)),
                        ),
                        // The values stay (a shape's entries as a 1-d tensor).
                        ints: match get(0)? {
                            Value::Constant { ints, .. } => ints.clone(),
                            _ => None,
                        },
                        scalar: None,
                        origin: None,
                    })
                }
                // A shape put together from its entries.
                "Concat"
                    if (0..node.input.len())
                        .any(|i| matches!(get(i), Ok(Value::Constant { ints: None, .. }))) =>
                {
                    // Of other constants (a mask's), the shape.
                    let mut dims: Option<Vec<i64>> = None;
                    let axis = int(node, "axis").unwrap_or(0);
                    for i in 0..node.input.len() {
                        let d = dims_of(get(i)?).unwrap_or_default();
                        let a = if axis < 0 {
                            axis + d.len() as i64
                        } else {
                            axis
                        };
                        let a = usize::try_from(a).ok().filter(|&a| a < d.len());
                        dims = match (dims, a) {
                            (None, Some(_)) => Some(d),
                            (Some(mut acc), Some(a)) if acc.len() == d.len() => {
                                acc[a] += d[a];
                                Some(acc)
                            }
                            _ => return Err(fail("joins constants of other ranks".into())),
                        };
                    }
                    dims.map(|dims| Value::Constant {
                        dims,
                        ints: None,
                        scalar: None,
                        origin: None,
                    })
                }
                "Concat" => {
                    let mut joined = Vec::new();
                    for i in 0..node.input.len() {
                        match get(i)? {
                            Value::Constant { ints: Some(v), .. } => joined.extend(v),
                            _ => return Err(fail("joins constants that are no integers".into())),
                        }
                    }
                    Some(Value::Constant {
                        dims: vec![joined.len() as i64],
                        ints: Some(joined),
                        scalar: None,
                        origin: None,
                    })
                }
                // An entry of a shape.
                "Gather"
                    if matches!(
                        (get(0)?, get(1)?),
                        (
                            Value::Constant { ints: Some(_), .. },
                            Value::Constant { ints: Some(_), .. }
                        )
                    ) =>
                {
                    match (get(0)?, get(1)?) {
                        (
                            Value::Constant { ints: Some(v), .. },
                            Value::Constant {
                                ints: Some(idx),
                                dims,
                                ..
                            },
                        ) => {
                            let picked: Option<Vec<i64>> = idx
                                .iter()
                                .map(|&i| {
                                    let i = if i < 0 { i + v.len() as i64 } else { i };
                                    usize::try_from(i).ok().and_then(|i| v.get(i).copied())
                                })
                                .collect();
                            picked.map(|p| Value::Constant {
                                dims: dims.clone(),
                                ints: Some(p),
                                scalar: None,
                                origin: None,
                            })
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            let Some(out) = out else {
                return Err(fail(
                    "computes a constant ridgeline cannot follow (only the shapes of weights are \
                     read: Constant, ConstantOfShape, Identity, Cast, Unsqueeze, Squeeze, \
                     Reshape, Flatten)"
                        .into(),
                ));
            };
            for o in &node.output {
                values.insert(o.clone(), out.clone());
            }
            continue;
        }
        // The shape of a layer, batch 1 first: a constant.
        if op == "Shape"
            && let Value::Layer(id) = get(0)?
        {
            let mut shape = vec![1i64];
            shape.extend(g.layers()[*id].output.dims().iter().map(|&d| d as i64));
            let out = Value::Constant {
                dims: vec![shape.len() as i64],
                ints: Some(shape),
                scalar: None,
                origin: None,
            };
            for o in &node.output {
                values.insert(o.clone(), out.clone());
            }
            continue;
        }
        // A feature map with its channels moved last (`[N, H, W, C]`, as ConvNeXt's and
        // Swin's layer norms and linear layers read it): a sequence of its positions.
        if op == "Transpose"
            && let Some(Value::Layer(id)) = node.input.first().and_then(|n| values.get(n))
        {
            let r = g.layers()[*id].output.rank() as i64 + 1;
            let last: Vec<i64> = std::iter::once(0).chain(2..r).chain([1]).collect();
            if r >= 3 && ints(node, "perm").is_some_and(|p| p == last) {
                let out = Value::Seq(Seq::Tokens(*id));
                for o in &node.output {
                    values.insert(o.clone(), out.clone());
                }
                continue;
            }
        }
        // A channel shuffle, in its three nodes.
        if let Some(&(id, groups, transposed)) = node.input.first().and_then(|i| shuffles.get(i)) {
            let c = g.layers()[id].output.channels();
            match op.as_str() {
                "Transpose" if !transposed => {
                    let perm = ints(node, "perm").unwrap_or_default();
                    let rank = perm.len();
                    let swapped = rank >= 3
                        && perm[0] == 0
                        && perm[1] == 2
                        && perm[2] == 1
                        && perm[3..]
                            .iter()
                            .enumerate()
                            .all(|(i, &p)| p == i as i64 + 3);
                    if !swapped {
                        return Err(fail(format!(
                            "perm {perm:?} of channels in groups: only their transposition \
                             (a channel shuffle) is imported"
                        )));
                    }
                    for o in &node.output {
                        shuffles.insert(o.clone(), (id, groups, true));
                    }
                    continue;
                }
                "Reshape" if transposed => {
                    let back = match get(1)? {
                        Value::Constant { ints: Some(s), .. } => s.clone(),
                        _ => return Err(fail("its shape is not a constant".into())),
                    };
                    let mut want = vec![1i64];
                    want.extend(g.layers()[id].output.dims().iter().map(|&d| d as i64));
                    if back.len() != want.len()
                        || back.iter().zip(&want).any(|(&b, &w)| b != w && b != -1)
                    {
                        return Err(fail(format!(
                            "to {back:?}: a channel shuffle reshapes back to {want:?}"
                        )));
                    }
                    let name = unique(&g, &mut names, &label);
                    let new = g
                        .push(name, Op::ChannelShuffle { groups }, &[id])
                        .map_err(|e| fail(e.message))?;
                    for o in &node.output {
                        values.insert(o.clone(), Value::Layer(new));
                    }
                    continue;
                }
                _ => {
                    return Err(fail(format!(
                        "reads {c} channels viewed as {groups} groups: only a channel shuffle \
                         (their transposition, reshaped back) is imported"
                    )));
                }
            }
        }
        let x = get(0)?.clone();
        let Some(xid) = layer(&x) else {
            return Err(fail(
                "its first input is a constant, not an activation".into(),
            ));
        };
        let rank = g.layers()[xid].output.spatial().len();
        let pads = |node: &NodeProto| -> Result<Padding> {
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
        };
        // A per-dimension attribute: absent, the default; present, one value of at least
        // `min` a spatial dimension.
        let per_dim = |node: &NodeProto, name: &str, default: usize, min: usize| -> Result<Dims> {
            match ints(node, name) {
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
        };
        if text(node, "auto_pad").as_deref() == Some("SAME_LOWER") {
            return Err(fail(
                "auto_pad SAME_LOWER is not modelled; give explicit pads".into(),
            ));
        }
        let mut inputs = vec![xid];
        let new_op = match op.as_str() {
            "Conv" | "ConvTranspose" => {
                let w =
                    dims_of(get(1)?).ok_or_else(|| fail("its weight is not a constant".into()))?;
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
                let in_channels = g.layers()[xid].output.channels();
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
                    .padding(pads(node)?)
                    .groups(groups)
                    .bias(node.input.get(2).is_some_and(|n| !n.is_empty()));
                c.stride = per_dim(node, "strides", 1, 1)?;
                c.dilation = per_dim(node, "dilations", 1, 1)?;
                if transposed {
                    c.output_padding = per_dim(node, "output_padding", 0, 0)?;
                    Op::conv_transpose(c)
                } else {
                    Op::conv(c)
                }
            }
            "Gemm" | "MatMul" => {
                let w = dims_of(get(1)?).ok_or_else(|| {
                    fail(
                        "multiplies two activations; only a product by a weight is imported".into(),
                    )
                })?;
                if g.layers()[xid].output.rank() != 1 || w.len() != 2 {
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
                    out_features: usize::try_from(out)
                        .map_err(|_| fail(format!("{out} outputs")))?,
                    bias: op == "Gemm" && node.input.get(2).is_some_and(|n| !n.is_empty()),
                }
            }
            "MaxPool" | "AveragePool" => {
                if int(node, "ceil_mode").unwrap_or(0) != 0 {
                    return Err(fail("ceil_mode 1 is not modelled".into()));
                }
                if ints(node, "kernel_shape").is_none() {
                    return Err(fail("no attribute `kernel_shape`: a pool needs one".into()));
                }
                let kernel = per_dim(node, "kernel_shape", 1, 1)?;
                let mut p = Pool::new(&kernel);
                p.stride = per_dim(node, "strides", 1, 1)?;
                p.padding = pads(node)?;
                if op == "MaxPool" {
                    Op::max_pool(p)
                } else {
                    Op::avg_pool(p)
                }
            }
            "GlobalAveragePool" => Op::GlobalAvgPool,
            // A mean over every spatial axis (ShuffleNetV2's `x.mean([2, 3])`): a global
            // average pool, whose `[C, 1, ...]` a dense layer reads as the vector it is.
            "ReduceMean" => {
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
                let r = g.layers()[xid].output.rank() as i64 + 1;
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
                    let name = unique(&g, &mut names, &format!("{label}_pool"));
                    let pooled = g
                        .push(name, Op::GlobalAvgPool, &[xid])
                        .map_err(|e| fail(e.message))?;
                    inputs = vec![pooled];
                    Op::Flatten
                } else {
                    Op::GlobalAvgPool
                }
            }
            "BatchNormalization" => Op::BatchNorm,
            "Relu" => Op::Relu,
            "LeakyRelu" => Op::LeakyRelu {
                alpha: f64::from(float(node, "alpha").unwrap_or(0.01)),
            },
            "Tanh" => Op::Tanh,
            "Sigmoid" => Op::Sigmoid,
            "HardSwish" => Op::HardSwish,
            "HardSigmoid" => Op::HardSigmoid {
                alpha: f64::from(float(node, "alpha").unwrap_or(0.2)),
                beta: f64::from(float(node, "beta").unwrap_or(0.5)),
            },
            "Clip" => {
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
            }
            "Gelu" => Op::Gelu,
            "Dropout" => Op::Dropout {
                rate: f64::from(float(node, "ratio").unwrap_or(0.5)),
            },
            "Softmax" => {
                let axis = int(node, "axis").unwrap_or(1);
                let r = g.layers()[xid].output.rank() as i64 + 1;
                if axis != 1 && axis != 1 - r {
                    return Err(fail(format!(
                        "axis {axis}: only the channel axis (1) is imported"
                    )));
                }
                if node.output.iter().any(|o| outputs.contains(o)) {
                    Op::SoftmaxCrossEntropy
                } else {
                    Op::Softmax
                }
            }
            "Flatten" => {
                if int(node, "axis").unwrap_or(1) != 1 {
                    return Err(fail(
                        "only axis 1 (a feature vector per sample) is imported".into(),
                    ));
                }
                Op::Flatten
            }
            "Reshape" => {
                let shape = match get(1)? {
                    Value::Constant { ints: Some(s), .. } => s.clone(),
                    _ => return Err(fail("its shape is not a constant".into())),
                };
                let elements = g.layers()[xid].output.elements() as i64;
                let here: Vec<i64> = g.layers()[xid]
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
                        shuffles.insert(o.clone(), (xid, shape[1] as usize, false));
                    }
                    continue;
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
                        values.insert(o.clone(), Value::Layer(xid));
                    }
                    continue;
                } else if shape.len() == 2 && (shape[1] == -1 || shape[1] == elements) {
                    Op::Flatten
                } else {
                    return Err(fail(format!(
                        "to {shape:?}: only a reshape to a feature vector per sample is imported"
                    )));
                }
            }
            "Mul" if matches!(get(1)?, Value::Layer(_)) => {
                let other = layer(get(1)?).ok_or_else(|| fail("no input".into()))?;
                // A gate broadcast over a feature map goes second (the product commutes).
                let smaller = |a: NodeId, b: NodeId| {
                    g.layers()[a].output.elements() < g.layers()[b].output.elements()
                };
                inputs = if smaller(xid, other) {
                    vec![other, xid]
                } else {
                    vec![xid, other]
                };
                Op::Mul
            }
            "Mul" => {
                let c = dims_of(get(1)?).ok_or_else(|| fail("multiplies by no constant".into()))?;
                if !per_channel(&c, g.layers()[xid].output.dims()) {
                    return Err(fail(format!(
                        "multiplies by a constant of shape {c:?}; only a per-channel scale is \
                         imported"
                    )));
                }
                // With a shift added after it, a channel affine (whose shift the `Add`
                // folds in); alone, a scale (ConvNeXt's layer scale).
                if node.output.iter().any(|o| shifted.contains(o)) {
                    Op::ChannelAffine
                } else {
                    Op::ChannelScale
                }
            }
            "Add" | "Sum" => {
                let mut layers = Vec::new();
                for i in 0..node.input.len() {
                    match get(i)? {
                        Value::Layer(id) => layers.push(*id),
                        Value::Constant { dims, .. } => {
                            // The shift of a channel affine (a per-channel Mul before it).
                            let after_affine = matches!(g.layers()[xid].op, Op::ChannelAffine)
                                && node.input.len() == 2;
                            if after_affine && per_channel(dims, g.layers()[xid].output.dims()) {
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
                        values.insert(o.clone(), Value::Layer(layers[0]));
                    }
                    continue;
                }
                inputs = layers;
                Op::Add
            }
            "Slice" => {
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
                let c = g.layers()[xid].output.channels() as i64;
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
            }
            "Concat" => {
                let axis = int(node, "axis").unwrap_or(1);
                if axis != 1 {
                    return Err(fail(format!("axis {axis}: only channels (1) are joined")));
                }
                inputs = (0..node.input.len())
                    .map(|i| get(i).map(&layer))
                    .collect::<Result<Option<Vec<_>>>>()?
                    .ok_or_else(|| fail("joins a constant".into()))?;
                if let [only] = inputs[..] {
                    // A concatenation of one tensor is that tensor (DenseNet's first layer
                    // of each block, `torch.cat([x], 1)`).
                    for o in &node.output {
                        values.insert(o.clone(), Value::Layer(only));
                    }
                    continue;
                }
                Op::Concat
            }
            _ => {
                return Err(fail(format!(
                    "ridgeline's IR has no `{op}`: write the workload as a TOML layer list, or \
                     open an issue for the op"
                )));
            }
        };
        let name = unique(&g, &mut names, &label);
        let id = g.push(name, new_op, &inputs).map_err(|e| fail(e.message))?;
        for o in &node.output {
            values.insert(o.clone(), Value::Layer(id));
        }
        // Only the first output of a node carries data (Dropout's mask, BatchNormalization's
        // training statistics are not layers).
    }
    // Graph outputs waiting on a node after them (a product without bias) are added as
    // they are; a sequence's logits (a linear layer's output) and a classifier's (a dense
    // layer's) get the cross-entropy loss of a training step, as the built-in models have
    // it.
    for o in &outputs {
        let Some(v) = values.get(o).cloned() else {
            continue;
        };
        let mut reader = sequence::Reader {
            g: &mut g,
            names: &mut names,
            tables: &mut tables,
            seq_first: &mut seq_first,
            windowed: &mut windowed,
            window_out: None,
        };
        let settled = reader
            .settle(&v)
            .map_err(|m| Error::invalid(file, format!("graph.output `{o}`"), m))?;
        // A classifier's logits (a dense layer's output, as torchvision's models end)
        // too.
        if let Value::Seq(Seq::Tokens(id)) | Value::Layer(id) = settled
            && matches!(g.layers()[id].op, Op::Linear { .. } | Op::Dense { .. })
        {
            let name = unique(&g, &mut names, &format!("{o}_loss"));
            g.push(name, Op::SoftmaxCrossEntropy, &[id])
                .map_err(|e| Error::invalid(file, format!("graph.output `{o}`"), e.message))?;
        }
    }
    if g.layers().len() <= 1 {
        return Err(Error::invalid(
            file,
            "graph.node",
            "no layer to time: the graph holds no operator ridgeline imports (an empty model \
             has no FLOPs and no intensity)",
        ));
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::proto::AttributeProto;
    use super::value::slice_axis;
    use super::*;
    use crate::cost::cost;
    use crate::graph::ScoreMask;
    use crate::precision::Precision;
    use crate::workloads::{self, BuildOptions};

    /// A model of the ONNX backend tests' weight-less zoo (`tests/fixtures/onnx/`).
    fn load(name: &str) -> Result<Graph> {
        let path = format!(
            "{}/../tests/fixtures/onnx/light_{name}.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        import(&bytes, &format!("light_{name}.onnx"), name)
    }

    fn counts(g: &Graph) -> (u64, u128) {
        let c = cost(g, 1, Precision::Fp32);
        (c.params, c.macs_fwd)
    }

    /// ResNet-50 as ONNX has the built-in ResNet-50's parameters and multiply-accumulates.
    #[test]
    fn resnet50_is_the_built_in_one() {
        let g = load("resnet50").unwrap();
        let builtin = workloads::build("resnet50", &BuildOptions::default()).unwrap();
        assert_eq!(counts(&g), counts(&builtin));
        assert_eq!(g.input_shape().dims(), &[3, 224, 224]);
        assert!(matches!(
            g.layers().last().unwrap().op,
            Op::SoftmaxCrossEntropy
        ));
    }

    /// VGG-19: 143,667,240 parameters (Simonyan and Zisserman 2015, Table 2: 144M;
    /// torchvision's `vgg19` to the unit) and 19.6 billion multiply-adds (He et al. 2016,
    /// section 3.3: "VGG-19 (19.6 billion FLOPs)", FLOPs there being multiply-adds);
    /// SqueezeNet 1.1: 1,235,496
    /// parameters and 0.35 GFLOPs (torchvision's model table, multiply-adds).
    #[test]
    fn vgg19_and_squeezenet_match_published_counts() {
        let (params, macs) = counts(&load("vgg19").unwrap());
        assert_eq!(params, 143_667_240);
        assert!((macs as f64 / 19.6e9 - 1.0).abs() < 0.005, "{macs}");
        let (params, macs) = counts(&load("squeezenet").unwrap());
        assert_eq!(params, 1_235_496);
        assert!((macs as f64 / 0.35e9 - 1.0).abs() < 0.01, "{macs}");
    }

    /// DenseNet-121's 1,746 nodes (its batch norms followed by a per-channel scale and shift,
    /// as Caffe2 wrote it) import.
    #[test]
    fn a_graph_of_1746_nodes_imports() {
        let g = load("densenet121").unwrap();
        assert_eq!(g.layers().len(), 548);
        let affine = g
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::ChannelAffine))
            .count();
        assert_eq!(affine, 121);
    }

    /// The exporter's GPT-2 (`scripts/export-onnx.py`: Hugging Face's 124M configuration,
    /// 64 tokens, weights stripped).
    fn gpt2_bytes() -> Vec<u8> {
        fixture("gpt2-seq64")
    }

    /// The bytes of the exporter's fixture `name` (`tests/fixtures/onnx/NAME.onnx`).
    fn fixture(name: &str) -> Vec<u8> {
        let path = format!(
            "{}/../tests/fixtures/onnx/{name}.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// The ONNX model `bytes` imported, and the built-in workload `name` at its 64
    /// tokens; their parameters and multiply-accumulates checked equal.
    fn with_builtin(bytes: &[u8], name: &str) -> (Graph, Graph) {
        let g = import(bytes, &format!("{name}.onnx"), name).unwrap();
        let options = BuildOptions {
            input_size: Some(vec![64]),
            ..BuildOptions::default()
        };
        let builtin = workloads::build(name, &options).unwrap();
        assert_eq!(counts(&g), counts(&builtin), "{name}");
        (g, builtin)
    }

    /// Layers of op `kind` in `g`.
    fn ops(g: &Graph, kind: &str) -> usize {
        g.layers().iter().filter(|l| l.op.kind() == kind).count()
    }

    /// GPT-2 as ONNX is the built-in GPT-2: the same parameters (the head tied to the token
    /// table) and multiply-accumulates, twelve unfused causal attention layers of twelve
    /// heads, and GELU as its eight kernels.
    #[test]
    fn gpt2_is_the_built_in_one() {
        let (g, builtin) = with_builtin(&gpt2_bytes(), "gpt2");
        assert_eq!(counts(&g).0, 124_439_808);
        for kind in [
            "embedding",
            "layer-norm",
            "linear",
            "attention",
            "scale",
            "pow",
            "tanh",
            "shift",
            "mul",
            "add",
            "softmax-cross-entropy",
        ] {
            assert_eq!(ops(&g, kind), ops(&builtin, kind), "{kind}");
        }
        let attention: Vec<_> = g
            .layers()
            .iter()
            .filter_map(|l| match &l.op {
                Op::Attention(a) => Some(*a),
                _ => None,
            })
            .collect();
        assert_eq!(attention.len(), 12);
        assert!(
            attention
                .iter()
                .all(|a| a.heads == 12 && a.causal && !a.fused && a.mask == ScoreMask::Select)
        );
        let head = &g.layers()[g.last() - 1];
        assert!(
            matches!(
                head.op,
                Op::Linear {
                    out_features: 50257,
                    tied: true,
                    ..
                }
            ),
            "{:?}",
            head.op
        );
        // Without the tie (a head of its own) it would own the table's 38.6M parameters.
        assert_eq!(g.input_shape().dims(), [64]);
    }

    /// BERT-Large as ONNX (`BertForPreTraining`, 64 tokens) is the built-in BERT-Large:
    /// three projections per attention layer with BERT's additive mask, the exact GELU as
    /// one layer, the pooler and both heads with their losses, the masked-LM decoder tied.
    #[test]
    fn bert_large_is_the_built_in_one() {
        let (g, builtin) = with_builtin(&fixture("bert-large-seq64"), "bert-large");
        assert_eq!(counts(&g).0, 336_226_108);
        for kind in [
            "embedding",
            "layer-norm",
            "linear",
            "attention",
            "gelu",
            "gather",
            "tanh",
            "softmax-cross-entropy",
        ] {
            assert_eq!(ops(&g, kind), ops(&builtin, kind), "{kind}");
        }
        for l in g.layers() {
            if let Op::Attention(a) = &l.op {
                assert_eq!((a.heads, a.causal, a.mask), (16, false, ScoreMask::Add));
                assert_eq!(l.inputs.len(), 3, "query, key and value");
            }
        }
        assert!(g.layers().iter().any(|l| matches!(
            l.op,
            Op::Linear {
                out_features: 30522,
                bias: true,
                tied: true
            }
        )));
    }

    /// torchvision's Swin-T as ONNX is the built-in `swin-t`: the same layers in the same
    /// order (the ONNX head reads the pool through a `Flatten`), each window attention of
    /// the same heads, window, roll and scaled queries.
    #[test]
    fn swin_t_is_the_built_in_one() {
        let g = import(&fixture("tv-swin_t"), "tv-swin_t.onnx", "swin").unwrap();
        let builtin = workloads::build("swin-t", &BuildOptions::default()).unwrap();
        assert_eq!(counts(&g), counts(&builtin));
        let layers = |g: &Graph| -> Vec<Op> {
            g.layers()
                .iter()
                .map(|l| l.op.clone())
                .filter(|op| !op.is_view())
                .collect()
        };
        assert_eq!(layers(&g), layers(&builtin));
        let windows: Vec<(usize, usize, usize)> = g
            .layers()
            .iter()
            .filter_map(|l| match &l.op {
                Op::Attention(a) => Some((a.heads, a.window, a.shift)),
                _ => None,
            })
            .collect();
        assert_eq!(windows.len(), 12);
        assert_eq!(windows[1], (3, 7, 3));
        assert_eq!(windows[11], (24, 7, 0));
    }

    /// Constant slices and transposes follow ONNX's rules: a pad's pairs reversed and
    /// transposed as torch writes them, a shape of any size followed without listing it.
    #[test]
    fn constant_slices_and_transposes_follow_onnx() {
        // [[1, 2], [3, 4], [5, 6]] with the rows reversed, then transposed.
        let (dims, v) = slice_constant(
            &[3, 2],
            Some(&[1, 2, 3, 4, 5, 6]),
            &[-1],
            &[i64::MIN + 1],
            Some(vec![0]),
            Some(vec![-1]),
        )
        .unwrap();
        assert_eq!(
            (dims.as_slice(), v.as_deref()),
            ([3, 2].as_slice(), Some([5, 6, 3, 4, 1, 2].as_slice()))
        );
        let (dims, v) = transpose_constant(&[3, 2], v.as_deref(), &[1, 0]).unwrap();
        assert_eq!(
            (dims.as_slice(), v.as_deref()),
            ([2, 3].as_slice(), Some([5, 3, 1, 6, 4, 2].as_slice()))
        );
        // Every second entry from 1, of an axis of 2^62: a shape, nothing listed.
        let (dims, v) =
            slice_constant(&[1 << 62], None, &[1], &[i64::MAX], None, Some(vec![2])).unwrap();
        assert_eq!((dims, v), (vec![1 << 61], None));
        assert_eq!(slice_axis(5, 0, 3, 0), None);
    }

    /// A Swin or ViT export changed where the importer reads its windows, roll, patch
    /// merging or class token is refused, naming the node and the op.
    #[test]
    fn windows_and_tokens_that_are_not_swins_or_vits_are_refused_with_their_node() {
        type Edit = fn(&mut NodeProto);
        let cases: [(&str, &str, Edit, &str); 4] = [
            (
                "tv-swin_t",
                "/features/features.1/features.1.0/attn/Transpose_2",
                |n| n.attribute[0].ints = vec![0, 3, 1, 2, 4, 5],
                "op `Transpose`",
            ),
            (
                "tv-swin_t",
                "/features/features.1/features.1.1/attn/Concat_3",
                |n| n.attribute[0].i = Some(2),
                "roll's halves",
            ),
            (
                "tv-swin_t",
                "/features/features.2/Concat_3",
                |n| n.input.swap(1, 2),
                "patch merging",
            ),
            (
                "tv-vit_tiny",
                "/Concat_2",
                |n| n.attribute[0].i = Some(2),
                "learned tokens",
            ),
        ];
        for (file, at, edit, want) in cases {
            let mut model = ModelProto::decode(fixture(file).as_slice()).unwrap();
            let graph = model.graph.as_mut().unwrap();
            let (index, node) = graph
                .node
                .iter_mut()
                .enumerate()
                .find(|(_, n)| n.name.as_deref() == Some(at))
                .unwrap_or_else(|| panic!("{at}"));
            edit(node);
            let e = import(&model.encode_to_vec(), "m.onnx", "m")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("m.onnx, node {index}")) && e.contains(want),
                "{at}: {e}"
            );
        }
    }

    /// OPT-1.3B as ONNX (`OPTForCausalLM`, 64 tokens) is the built-in OPT-1.3B: its
    /// queries scaled before the product, the causal mask added and the scores clamped,
    /// products of batch and heads merged (`bmm`), the feed-forward over rows.
    #[test]
    fn opt_is_the_built_in_one() {
        let (g, builtin) = with_builtin(&fixture("opt-1.3b-seq64"), "opt-1.3b");
        assert_eq!(counts(&g).0, 1_315_758_080);
        for kind in [
            "embedding",
            "layer-norm",
            "linear",
            "attention",
            "relu",
            "add",
        ] {
            assert_eq!(ops(&g, kind), ops(&builtin, kind), "{kind}");
        }
        let attention = |g: &Graph| -> Vec<crate::graph::Attention> {
            g.layers()
                .iter()
                .filter_map(|l| match &l.op {
                    Op::Attention(a) => Some(*a),
                    _ => None,
                })
                .collect()
        };
        // The same flags, but the dropout (an eval export has none).
        for (a, b) in attention(&g).iter().zip(attention(&builtin)) {
            assert_eq!(*a, crate::graph::Attention { dropout: 0.0, ..b });
        }
    }

    /// An op on a sequence that is none of the importer's is refused with its node.
    #[test]
    fn an_unknown_op_on_a_sequence_is_refused_with_its_node() {
        let mut model = ModelProto::decode(gpt2_bytes().as_slice()).unwrap();
        let graph = model.graph.as_mut().unwrap();
        let (index, node) = graph
            .node
            .iter_mut()
            .enumerate()
            .find(|(_, n)| n.op_type.as_deref() == Some("Tanh"))
            .unwrap();
        node.op_type = Some("Erf".into());
        let name = node.name.clone().unwrap();
        let e = import(&model.encode_to_vec(), "g.onnx", "g")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("g.onnx, node {index}"))
                && e.contains(&name)
                && e.contains("op `Erf`"),
            "{e}"
        );
    }

    /// Issue 43, item 16: attributes that contradict the node or the ONNX specification,
    /// custom-domain ops and an empty graph are refused, naming the node.
    #[test]
    fn contradictions_are_refused_with_their_node() {
        let path = format!(
            "{}/../tests/fixtures/onnx/light_resnet50.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).unwrap();
        let first_conv = |model: &mut ModelProto| -> usize {
            model
                .graph
                .as_ref()
                .unwrap()
                .node
                .iter()
                .position(|n| n.op_type.as_deref() == Some("Conv"))
                .unwrap()
        };
        let set = |name: &str, ints: Vec<i64>, i: Option<i64>| {
            let name = name.to_owned();
            move |node: &mut NodeProto| {
                node.attribute.retain(|a| a.name.as_deref() != Some(&name));
                node.attribute.push(AttributeProto {
                    name: Some(name.clone()),
                    ints: ints.clone(),
                    i,
                    ..AttributeProto::default()
                });
            }
        };
        type Edit = Box<dyn Fn(&mut NodeProto)>;
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(set("kernel_shape", vec![0, 0], None)),
                "kernel_shape",
            ),
            (
                Box::new(set("kernel_shape", vec![3, 3], None)),
                "contradicts its weight",
            ),
            (Box::new(set("group", vec![], Some(0))), "`group` 0"),
            (
                Box::new(set("group", vec![], Some(2))),
                "contradicts its input",
            ),
            (Box::new(set("pads", vec![-1, 3, 3, 3], None)), "`pads`"),
            (Box::new(set("strides", vec![0, 2], None)), "`strides`"),
            (
                Box::new(|n: &mut NodeProto| n.domain = Some("com.example".into())),
                "domain `com.example`",
            ),
        ];
        for (edit, want) in cases {
            let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
            let at = first_conv(&mut model);
            edit(&mut model.graph.as_mut().unwrap().node[at]);
            let e = import(&model.encode_to_vec(), "r.onnx", "r")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("r.onnx, node {at}")) && e.contains(want),
                "want {want}: {e}"
            );
        }
        // No node at all: nothing to time (was 0 FLOPs and a NaN intensity).
        let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
        model.graph.as_mut().unwrap().node.clear();
        let e = import(&model.encode_to_vec(), "r.onnx", "r")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("r.onnx") && e.contains("no layer to time"),
            "{e}"
        );
    }

    /// torchvision's classification zoo as `scripts/export-torchvision.py` exports it:
    /// against `data/reference/torchvision.toml` (PyTorch's own counts), each model that
    /// imports has its parameters and its matrix FLOPs forward (convolutions, linear layers,
    /// products) exactly; the others are refused naming their node and op. Imported:
    /// ResNet-50, MobileNetV2 (ReLU6 as `clip`), MobileNetV3 (hard swish, hard sigmoid gates),
    /// EfficientNet-B0 and RegNetY (sigmoid gates broadcast over the feature map),
    /// DenseNet-121 (a one-input `Concat` is its input), ShuffleNetV2 (its chunks as
    /// `narrow`, its shuffle's reshape, transpose and reshape as one `channel-shuffle`, the
    /// shape computed from the layer's, the mean over the map a global average pool),
    /// ConvNeXt-T (its channels-last layer norms and linear layers as a sequence of the
    /// map's positions, its layer scale a `channel-scale`).
    #[test]
    fn torchvision_models_have_torchs_parameters_and_flops() {
        let reference: toml::Table =
            toml::from_str(include_str!("../../data/reference/torchvision.toml")).unwrap();
        let imported = [
            "resnet50",
            "mobilenet_v2",
            "mobilenet_v3_large",
            "efficientnet_b0",
            "regnet_y_400mf",
            "densenet121",
            "shufflenet_v2_x1_0",
            "convnext_tiny",
            "vit_b_16",
            "vit_tiny",
            "swin_t",
        ];
        assert_eq!(imported.len(), reference.len());
        let read = |name: &str| {
            let file = format!("tv-{name}.onnx");
            let path = format!(
                "{}/../tests/fixtures/onnx/{file}",
                env!("CARGO_MANIFEST_DIR")
            );
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            import(&bytes, &file, name)
        };
        for name in imported {
            let g = read(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            let c = cost(&g, 1, Precision::Fp32);
            // torch counts the products (`2 m n k`), as ridgeline's MACs; attention's
            // softmax and scale are FLOPs of ridgeline's attention layer it does not count.
            let matrix = 2.0 * c.macs_fwd as f64;
            let want = &reference[name];
            assert_eq!(
                c.params,
                want["params"].as_integer().unwrap() as u64,
                "{name}"
            );
            assert_eq!(
                matrix,
                want["forward_flops"].as_integer().unwrap() as f64,
                "{name}"
            );
        }
    }

    #[test]
    fn an_op_the_ir_lacks_is_refused_with_its_node() {
        let e = load("bvlc_alexnet").unwrap_err().to_string();
        assert!(
            e.contains("light_bvlc_alexnet.onnx, node 18") && e.contains("op `LRN`"),
            "{e}"
        );
        // The model zoo's ShuffleNet (v1, Caffe2): its 16 channel shuffles, each a 5-d
        // `Reshape`, a `Transpose` and a `Reshape` back, are one layer each.
        let g = load("shufflenet").unwrap();
        let shuffles = g
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::ChannelShuffle { groups: 4 }))
            .count();
        assert_eq!(shuffles, 16);
    }

    #[test]
    fn bytes_that_are_not_a_model_name_the_file() {
        let path = format!(
            "{}/../tests/fixtures/onnx/light_vgg19.onnx",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(path).unwrap();
        let e = import(&bytes[..bytes.len() / 3], "cut.onnx", "cut")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cut.onnx") && e.contains("not an ONNX model"),
            "{e}"
        );
        let e = import(b"not a model at all", "text.onnx", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("text.onnx"), "{e}");
    }
}
