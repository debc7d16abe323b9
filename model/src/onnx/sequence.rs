//! Transformers in ONNX: sequences `[batch, positions, features]` (the IR's `[features,
//! positions]`), and the chains of nodes that are one IR layer.
//!
//! - `Gather` of a weight table by the token ids is an embedding; by constant indices
//!   (positions, BERT's token types), an embedding of the input added to the tokens'.
//! - `LayerNormalization` over the features is a layer norm.
//! - A linear layer is a `MatMul` of a sequence by a weight, with the `Add` of a bias
//!   vector after it where there is one, or the exporter's `Reshape` to rows
//!   `[batch x positions, features]`, `Gemm`, and `Reshape` back. A product by the token
//!   table transposed is a head tied to it (no weights of its own). `Gather` of the first
//!   position and a `Gemm` on it are BERT's pooler.
//! - Element-wise ops on a sequence or its rows: `Mul`, `Div` and `Add` by a scalar (scale, shift),
//!   `Pow` by a scalar, `Tanh`, `Relu`, `Gelu`, `Softmax` over features, `Add` and `Mul` of
//!   two sequences; so GPT-2's GELU, written as its tanh formula, is its eight kernels, as
//!   the built-in GPT-2 has them. The exact GELU as PyTorch exports it (`x / sqrt 2`, `Erf`,
//!   `+ 1`, `x *`, `* 0.5`) is one `gelu`, as the built-in BERT has it.
//! - Unfused attention: query, key and value (three linear layers, or a fused projection
//!   `Split` into three), each `Reshape`d into heads and `Transpose`d (the key to `K^T`),
//!   `MatMul` of query and key, a scale (`Div` or `Mul` by a scalar, of the scores or, as
//!   OPT does, of the queries before), a mask (`Where` against a constant mask, a select, or
//!   an `Add` of a constant; causal where the mask has a row per query, padding where one
//!   row is broadcast, as BERT's), a `Max` clamp (OPT), `Softmax`, an optional `Dropout`,
//!   `MatMul` by the values, `Transpose` back and `Reshape` to the features: one attention
//!   layer reading the projections. Batch and heads may be merged for the products (OPT's
//!   `bmm`: `Reshape` to `[batch x heads, positions, d]` and back).
//!
//! Any other node on a sequence is refused with its operator, as the rest of the importer
//! refuses what it does not know.

use std::collections::{HashMap, HashSet};

use super::proto::NodeProto;
use super::value::{How, Seq, Source, Table, Value, float, int, ints, unique, usizes};
use crate::graph::{Attention, Dims, Graph, NodeId, Op, ScoreMask};

/// The scores among `a` and `b` (a mask's operands), and the other operand.
fn scores<'v>(a: &'v Value, b: Option<&'v Value>) -> Option<(Seq, Option<&'v Value>)> {
    let unmasked = |v: &Value| match v {
        Value::Seq(s @ Seq::Scores { softmax: false, .. }) => Some(s.clone()),
        _ => None,
    };
    match (unmasked(a), b.and_then(unmasked)) {
        (Some(s), None) => Some((s, b)),
        (None, Some(s)) => Some((s, Some(a))),
        _ => None,
    }
}

/// The layers a transformer's nodes add to the graph, and what they looked up.
pub(super) struct Reader<'a> {
    pub(super) g: &'a mut Graph,
    pub(super) names: &'a mut HashMap<String, usize>,
    pub(super) tables: &'a mut Vec<Table>,
    /// The values that are sequences laid out `[positions, batch, features]` (torch's
    /// attention transposes its input so): their `Shape` and `Reshape`s read so.
    pub(super) seq_first: &'a mut HashSet<String>,
    /// The values that are a map's positions in windows `[windows, window^2, C]`, with
    /// the window and the roll they were taken after (Swin's).
    pub(super) windowed: &'a mut HashMap<String, (usize, usize)>,
    /// The windows a reshape's output is in, set by the reshape.
    pub(super) window_out: Option<(usize, usize)>,
}

/// How a node's inputs are laid out.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    /// An input is laid out `[positions, batch, features]`.
    first: bool,
    /// An input is a map in windows: the window and the roll.
    window: Option<(usize, usize)>,
}

type Out = Result<Vec<Value>, String>;

/// A node as the parts of [`Reader::read`] read it: the node, its operator and label, its
/// inputs' values and their layout.
#[derive(Clone, Copy)]
struct Read<'n> {
    node: &'n NodeProto,
    op: &'n str,
    label: &'n str,
    all: &'n [Value],
    layout: Layout,
    /// Its first input's value, and its second's where it has one.
    a: &'n Value,
    b: Option<&'n Value>,
}

/// What a part of [`Reader::read`] makes of a node: its outputs, or `None` where the part
/// has no arm for it.
type Part = Result<Option<Vec<Value>>, String>;

/// The sequence `v` is, if it is one.
fn seq_of(v: Option<&Value>) -> Option<Seq> {
    match v {
        Some(Value::Seq(s)) => Some(s.clone()),
        _ => None,
    }
}

/// The dimensions of constant `v`, if it is one of non-negative dimensions.
fn dims_of(v: Option<&Value>) -> Option<Dims> {
    match v {
        Some(Value::Constant { dims, .. }) => usizes(dims),
        _ => None,
    }
}

fn one(s: Seq) -> Out {
    Ok(vec![Value::Seq(s)])
}

/// The part a `Gather` of a fused projection's `parts` (moved first) takes: a scalar
/// index below `parts` on axis 0.
fn part_index(node: &NodeProto, index: Option<&Value>, parts: usize) -> Result<usize, String> {
    match index {
        Some(Value::Constant {
            ints: Some(i),
            dims,
            ..
        }) if dims.is_empty() && int(node, "axis").unwrap_or(0) == 0 => {
            usize::try_from(i[0]).ok().filter(|&i| i < parts)
        }
        _ => None,
    }
    .ok_or_else(|| {
        format!("takes something other than one of a projection's {parts} parts (a scalar index on axis 0)")
    })
}

/// Whether `v` is a scalar constant, and its value.
fn scalar(v: Option<&Value>) -> Option<f64> {
    match v {
        Some(Value::Constant { scalar, .. }) => *scalar,
        _ => None,
    }
}

impl Reader<'_> {
    fn push(&mut self, op: Op, inputs: &[NodeId], at: &str) -> Result<NodeId, String> {
        let name = unique(self.g, self.names, at);
        self.g.push(name, op, inputs).map_err(|e| e.message)
    }

    fn features(&self, id: NodeId) -> usize {
        self.g.layers()[id]
            .output
            .dims()
            .first()
            .copied()
            .unwrap_or(0)
    }

    fn positions(&self, id: NodeId) -> usize {
        self.g.layers()[id]
            .output
            .dims()
            .get(1)
            .copied()
            .unwrap_or(1)
    }

    /// `v` with a layer not yet added (a product, a division) added as it stands.
    pub(super) fn settle(&mut self, v: &Value) -> Result<Value, String> {
        Ok(match v {
            Value::Seq(Seq::Product { x, out, tied, name }) => {
                let op = Op::Linear {
                    out_features: *out,
                    bias: false,
                    tied: *tied,
                };
                Value::Seq(Seq::Tokens(self.push(op, &[*x], name)?))
            }
            Value::Seq(Seq::Scaled { x, factor, name }) => {
                let op = Op::Scale { factor: *factor };
                Value::Seq(Seq::Tokens(self.push(op, &[*x], name)?))
            }
            Value::Seq(Seq::Gelu { .. }) => {
                return Err(
                    "reads a step of `x * (erf(x / sqrt 2) + 1) / 2` that is not the exact \
                     GELU's next"
                        .into(),
                );
            }
            other => other.clone(),
        })
    }

    /// The values of `node`'s outputs (several for a `Split`), adding the layers it is; or
    /// what it is not, in words. Inputs waiting on this node (a product's bias, GELU's
    /// division) are taken as they are, other waiting inputs are added first.
    pub(super) fn node(
        &mut self,
        node: &NodeProto,
        op: &str,
        label: &str,
        values: &mut HashMap<String, Value>,
    ) -> Out {
        let mut inputs = Vec::new();
        // An optional input left out at the end (a `Pad`'s value) has no name.
        let given = node.input.len() - node.input.iter().rev().take_while(|n| n.is_empty()).count();
        for name in &node.input[..given] {
            let v = values
                .get(name)
                .ok_or_else(|| format!("input `{name}` is not produced before this node"))?
                .clone();
            inputs.push((name.clone(), v));
        }
        let waits = |v: &Value| {
            matches!(
                v,
                Value::Seq(Seq::Product { .. } | Seq::Scaled { .. } | Seq::Gelu { .. })
            )
        };
        let bias_add = op == "Add"
            && inputs.len() == 2
            && inputs
                .iter()
                .any(|(_, v)| matches!(v, Value::Seq(Seq::Product { .. })))
            && inputs
                .iter()
                .any(|(_, v)| matches!(v, Value::Constant { dims, .. } if dims.len() == 1));
        let scaled_heads = op == "Reshape"
            && matches!(
                inputs.first().map(|i| &i.1),
                Some(Value::Seq(Seq::Scaled { .. }))
            )
            && matches!(inputs.get(1).map(|i| &i.1), Some(Value::Constant { ints: Some(s), .. }) if s.len() == 4);
        let gelu_step = matches!(
            (op, inputs.first().map(|i| &i.1)),
            ("Erf", Some(Value::Seq(Seq::Scaled { .. })))
                | ("Add", Some(Value::Seq(Seq::Gelu { step: 1, .. })))
        ) || (op == "Mul"
            && inputs
                .iter()
                .any(|(_, v)| matches!(v, Value::Seq(Seq::Gelu { step: 2 | 3, .. }))));
        if !bias_add && !gelu_step && !scaled_heads {
            for (name, v) in &mut inputs {
                if waits(v) {
                    *v = self.settle(v)?;
                    values.insert(name.clone(), v.clone());
                }
            }
        }
        let a = inputs[0].1.clone();
        let b = inputs.get(1).map(|i| i.1.clone());
        let first = node.input.iter().any(|n| self.seq_first.contains(n));
        let window = node
            .input
            .iter()
            .find_map(|n| self.windowed.get(n).copied());
        let all: Vec<Value> = inputs.iter().map(|i| i.1.clone()).collect();
        let out = self.read(node, op, label, &all, Layout { first, window })?;
        // Windows stay windows through what they flow into, until a reshape takes them
        // back to the map.
        let window_out = match (op, out.first()) {
            (
                "Reshape",
                Some(Value::Seq(Seq::Tokens(_) | Seq::Rolled { .. } | Seq::Windows { .. })),
            ) => self.window_out.take(),
            _ => self.window_out.take().or(window),
        };
        for o in &node.output {
            match window_out {
                Some(w) => self.windowed.insert(o.clone(), w),
                None => self.windowed.remove(o),
            };
        }
        // A sequence stays `[positions, batch, features]` through what it flows into,
        // until a transposition swaps them back or a reshape says otherwise.
        let swapped = op == "Transpose"
            && ints(node, "perm").as_deref() == Some(&[1, 0, 2][..])
            && matches!(a, Value::Seq(Seq::Tokens(_)));
        let first_out = match (op, &b) {
            ("Reshape", Some(Value::Constant { ints: Some(s), .. })) => {
                matches!(s.as_slice(), [p, 1, _] if *p > 1)
            }
            _ => first != swapped,
        };
        for o in &node.output {
            if first_out {
                self.seq_first.insert(o.clone());
            } else {
                self.seq_first.remove(o);
            }
        }
        Ok(out)
    }

    /// What [`Reader::node`] reads `node` as, from its inputs' values `all` laid out as
    /// `layout` says: the first of the parts that has an arm for it, in order (an op can
    /// mean one thing on one kind of sequence and another on the next).
    fn read(
        &mut self,
        node: &NodeProto,
        op: &str,
        label: &str,
        all: &[Value],
        layout: Layout,
    ) -> Out {
        let r = Read {
            node,
            op,
            label,
            all,
            layout,
            a: &all[0],
            b: all.get(1),
        };
        let parts: [fn(&mut Self, Read<'_>) -> Part; 5] = [
            Self::shapes,
            Self::embeddings,
            Self::elementwise,
            Self::products,
            Self::attention_scores,
        ];
        for part in parts {
            if let Some(out) = part(self, r)? {
                return Ok(out);
            }
        }
        Err(format!(
            "on a sequence ridgeline imports embeddings, layer norms, linear layers, \
             unfused attention and element-wise ops (docs/guide/workloads.md, `workload import`); this \
             `{op}` is none of them: write the workload as a TOML layer list, or open an \
             issue for it"
        ))
    }

    /// The shapes, pads, slices and concatenations of sequences (Swin's windows among them),
    /// and the attention bias's moves and sum.
    fn shapes(&mut self, r: Read<'_>) -> Part {
        let Read {
            node,
            op,
            label,
            all,
            layout,
            a,
            b,
        } = r;
        let first = layout.first;
        let out = match (op, seq_of(Some(a)), seq_of(b)) {
            // The shape of a sequence at batch 1, or of a query or key in heads: a constant
            // (torch computes attention's scale and its reshapes from it).
            ("Shape", Some(s), _) => {
                let shape: Vec<i64> = match s {
                    // A map's positions in windows: `[windows, window^2, C]`.
                    Seq::Tokens(x) if layout.window.is_some() => {
                        let (w, _) = layout.window.unwrap_or((1, 0));
                        let d = self.g.layers()[x].output.dims();
                        let positions: usize = d[1..].iter().product();
                        vec![(positions / (w * w)) as i64, (w * w) as i64, d[0] as i64]
                    }
                    // A map channels last, rolled or not: `[1, H, W, C]`.
                    Seq::Tokens(x) | Seq::Rolled { x, .. }
                        if self.g.layers()[x].output.rank() == 3 =>
                    {
                        let d = self.g.layers()[x].output.dims();
                        vec![1, d[1] as i64, d[2] as i64, d[0] as i64]
                    }
                    Seq::Tokens(x) => {
                        let (p, f) = (self.positions(x) as i64, self.features(x) as i64);
                        if first { vec![p, 1, f] } else { vec![1, p, f] }
                    }
                    Seq::Heads {
                        source,
                        heads,
                        transposed: true,
                        key_t: false,
                        ..
                    } => {
                        let parts = match source {
                            Source::Part { parts, .. } => parts,
                            Source::Whole { .. } => 1,
                        };
                        let layer = source.layer();
                        let d = self.features(layer) / parts / heads;
                        vec![1, heads as i64, self.positions(layer) as i64, d as i64]
                    }
                    _ => return Err("the shape of a partial attention value".into()),
                };
                Ok(vec![Value::Constant {
                    dims: vec![shape.len() as i64],
                    ints: Some(shape),
                    scalar: None,
                    origin: None,
                }])
            }
            // Swin's windows: a pad of zeros, the roll's and the merging's slices, the
            // bias.
            ("Pad", Some(s @ (Seq::Tokens(_) | Seq::Rolled { .. })), None) => match b {
                Some(Value::Constant { ints: Some(p), .. }) if p.iter().all(|&v| v == 0) => one(s),
                _ => Err(
                    "pads a map with other than zeros (windows of a map they do not \
                          tile are not modelled)"
                        .into(),
                ),
            },
            ("Slice", Some(s), None) => self.slice(s, all),
            ("Concat", Some(Seq::Slab { .. }), Some(Seq::Slab { .. })) => self.roll(node, all),
            ("Concat", Some(Seq::Strided { .. }), Some(Seq::Strided { .. })) => {
                self.merge(node, all, label)
            }
            ("Unsqueeze", Some(Seq::Bias), _) => one(Seq::Bias),
            ("Transpose", Some(Seq::Bias), _)
                if ints(node, "perm").as_deref() == Some(&[2, 0, 1][..]) =>
            {
                one(Seq::Bias)
            }
            ("Add", Some(s @ Seq::Scores { softmax: false, .. }), Some(Seq::Bias))
            | ("Add", Some(Seq::Bias), Some(s @ Seq::Scores { softmax: false, .. }))
                if layout.window.is_some() =>
            {
                one(s)
            }
            (
                "Gather",
                Some(Seq::WindowParts {
                    layer,
                    heads,
                    front: true,
                }),
                None,
            ) => {
                let index = part_index(node, b, 3)?;
                one(Seq::Heads {
                    source: Source::Part {
                        layer,
                        index,
                        parts: 3,
                    },
                    heads,
                    transposed: true,
                    key_t: false,
                    scaled: false,
                })
            }
            _ => return Ok(None),
        };
        out.map(Some)
    }

    /// Embeddings and what builds them: ViT's class token, learned positions, token and
    /// constant-index lookups, a fused projection's parts, and a product's bias.
    fn embeddings(&mut self, r: Read<'_>) -> Part {
        let Read {
            node,
            op,
            label,
            a,
            b,
            ..
        } = r;
        let out = match (op, seq_of(Some(a)), seq_of(b)) {
            // ViT's class token: learned tokens `[1, tokens, features]` before the positions.
            ("Concat", None, Some(Seq::Tokens(x))) => {
                let axis = int(node, "axis").unwrap_or(0);
                let tokens = match dims_of(Some(a)).as_deref() {
                    Some(&[1, t, f]) if f == self.features(x) && (axis == 1 || axis == -2) => t,
                    _ => {
                        return Err(
                        "joins a sequence with a constant that is not learned tokens                              [1, tokens, features] before its positions (axis 1)"
                            .into(),
                    );
                    }
                };
                if node.input.len() != 2 {
                    return Err("joins more than learned tokens and a sequence".into());
                }
                one(Seq::Tokens(self.push(
                    Op::PrependTokens { tokens },
                    &[x],
                    label,
                )?))
            }
            // A learned position embedding: a constant of the sequence's shape added.
            ("Add", Some(Seq::Tokens(x)), None)
                if matches!(
                    dims_of(b).as_deref(),
                    Some(&[1, p, f]) | Some(&[p, f])
                        if p == self.positions(x) && f == self.features(x) && p > 1
                ) =>
            {
                one(Seq::Tokens(self.push(
                    Op::PositionEmbedding,
                    &[x],
                    label,
                )?))
            }
            // A fused projection's parts: moved first (no data moves at batch 1) and taken.
            ("Unsqueeze" | "Squeeze", Some(s @ Seq::Packed { .. }), _) => one(s),
            (
                "Gather",
                Some(Seq::Packed {
                    layer,
                    parts,
                    front: true,
                }),
                None,
            ) => {
                let index = part_index(node, b, parts)?;
                one(Seq::Part(Source::Part {
                    layer,
                    index,
                    parts,
                }))
            }
            ("Gather", None, _) => self.lookup(a, b, label),
            ("Gather", Some(Seq::Tokens(x)), None) => {
                // BERT's pooler reads the first position.
                let first = matches!(b, Some(Value::Constant { ints: Some(i), dims, .. })
                if dims.is_empty() && i.as_slice() == [0]);
                if int(node, "axis") != Some(1) || !first {
                    return Err("only the first position of a sequence is gathered".into());
                }
                one(Seq::Tokens(self.push(
                    Op::Gather { edges: 1 },
                    &[x],
                    label,
                )?))
            }
            // Embeddings of the input at constant indices, added to the tokens'.
            (
                "Add",
                Some(Seq::Tokens(x)),
                Some(Seq::Lookup {
                    rows,
                    features,
                    name,
                }),
            )
            | (
                "Add",
                Some(Seq::Lookup {
                    rows,
                    features,
                    name,
                }),
                Some(Seq::Tokens(x)),
            ) => {
                let table = Op::Embedding {
                    num_embeddings: rows,
                    embedding_dim: features,
                };
                let e = self.push(table, &[0], &name)?;
                one(Seq::Tokens(self.push(Op::Add, &[x, e], label)?))
            }
            // A product's bias.
            ("Add", Some(Seq::Product { x, out, tied, name }), None)
            | ("Add", None, Some(Seq::Product { x, out, tied, name })) => {
                let bias = if matches!(a, Value::Constant { .. }) {
                    a
                } else {
                    b.unwrap_or(a)
                };
                if dims_of(Some(bias)).as_deref() != Some(&[out][..]) {
                    return Err(format!(
                        "adds a constant that is not a bias of the product's {out} features"
                    ));
                }
                let op = Op::Linear {
                    out_features: out,
                    bias: true,
                    tied,
                };
                // Named after its product, the layer's weight.
                one(Seq::Tokens(self.push(op, &[x], &name)?))
            }
            _ => return Ok(None),
        };
        out.map(Some)
    }

    /// Element-wise ops on sequences and rows: sums, products, scales, the exact GELU's chain
    /// and the ops with a scalar.
    fn elementwise(&mut self, r: Read<'_>) -> Part {
        let Read {
            node,
            op,
            label,
            a,
            b,
            ..
        } = r;
        let out = match (op, seq_of(Some(a)), seq_of(b)) {
            ("Add" | "Sum", Some(Seq::Tokens(x)), Some(Seq::Tokens(y))) => {
                one(Seq::Tokens(self.push(Op::Add, &[x, y], label)?))
            }
            ("Add" | "Sum", Some(Seq::Rows(x)), Some(Seq::Rows(y))) => {
                one(Seq::Rows(self.push(Op::Add, &[x, y], label)?))
            }
            ("Mul", Some(Seq::Tokens(x)), Some(Seq::Tokens(y))) => {
                one(Seq::Tokens(self.push(Op::Mul, &[x, y], label)?))
            }
            // A scale waits for what reads it (GELU's erf, heads of scaled queries).
            ("Mul" | "Div", Some(Seq::Tokens(x)), None) if scalar(b).is_some() => {
                let v = scalar(b).unwrap_or(1.0);
                one(Seq::Scaled {
                    x,
                    factor: if op == "Div" { 1.0 / v } else { v },
                    name: label.to_owned(),
                })
            }
            // The exact GELU.
            ("Erf", Some(Seq::Scaled { x, factor, .. }), _)
                if (factor - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-4 =>
            {
                one(Seq::Gelu { x, step: 1 })
            }
            ("Add", Some(Seq::Gelu { x, step: 1 }), None) if scalar(b) == Some(1.0) => {
                one(Seq::Gelu { x, step: 2 })
            }
            ("Mul", Some(Seq::Tokens(y)), Some(Seq::Gelu { x, step: 2 }))
            | ("Mul", Some(Seq::Gelu { x, step: 2 }), Some(Seq::Tokens(y)))
                if x == y =>
            {
                one(Seq::Gelu { x, step: 3 })
            }
            ("Mul", Some(Seq::Gelu { x, step: 3 }), None) if scalar(b) == Some(0.5) => {
                one(Seq::Tokens(self.push(Op::Gelu, &[x], label)?))
            }
            ("Add" | "Sub" | "Mul" | "Div" | "Pow", Some(Seq::Tokens(x)), None) => {
                let v =
                    scalar(b).ok_or("combines a sequence with a constant that is not a scalar")?;
                let op = match op {
                    "Add" => Op::Shift { offset: v },
                    "Sub" => Op::Shift { offset: -v },
                    "Mul" => Op::Scale { factor: v },
                    "Div" => Op::Scale { factor: 1.0 / v },
                    _ => Op::Pow { exponent: v },
                };
                one(Seq::Tokens(self.push(op, &[x], label)?))
            }
            (
                "Tanh" | "Relu" | "Gelu" | "LayerNormalization" | "Softmax" | "Dropout",
                Some(s @ (Seq::Tokens(_) | Seq::Rows(_))),
                _,
            ) => {
                // The features: the last axis, of a sequence or of its rows.
                let rows = matches!(s, Seq::Rows(_));
                if !int(node, "axis").is_none_or(|a| a == -1 || a == 2 || (rows && a == 1)) {
                    return Err("normalises over an axis other than the features (-1)".into());
                }
                let op = match op {
                    "Tanh" => Op::Tanh,
                    "Relu" => Op::Relu,
                    "Gelu" => Op::Gelu,
                    "Softmax" => Op::Softmax,
                    "Dropout" => Op::Dropout {
                        rate: f64::from(float(node, "ratio").unwrap_or(0.5)),
                    },
                    _ => Op::LayerNorm,
                };
                // Rows stay rows (OPT's feed-forward between its Reshapes).
                match s {
                    Seq::Rows(x) => one(Seq::Rows(self.push(op, &[x], label)?)),
                    Seq::Tokens(x) => one(Seq::Tokens(self.push(op, &[x], label)?)),
                    _ => Err("not a sequence".into()),
                }
            }
            _ => return Ok(None),
        };
        out.map(Some)
    }

    /// Identities, reshapes, linear layers, the split of a fused projection, transpositions
    /// ([`Reader::transpose`]) and attention's two products.
    fn products(&mut self, r: Read<'_>) -> Part {
        let Read {
            node,
            op,
            label,
            layout,
            a,
            b,
            ..
        } = r;
        let out = match (op, seq_of(Some(a)), seq_of(b)) {
            ("Identity" | "Cast", Some(s), _) => one(s),
            ("Reshape", Some(s), None) => {
                let shape = match b {
                    Some(Value::Constant { ints: Some(s), .. }) => s.clone(),
                    _ => return Err("reshapes to a shape that is not a constant".into()),
                };
                self.reshape(s, &shape, label, layout)
            }
            ("Gemm" | "MatMul", Some(Seq::Rows(x) | Seq::Tokens(x)), None) => self.product(
                node,
                op,
                x,
                matches!(seq_of(Some(a)), Some(Seq::Rows(_))),
                b,
                label,
            ),
            // Attention.
            ("Split", Some(Seq::Tokens(x)), _) => {
                let axis = int(node, "axis").unwrap_or(0);
                if axis != 2 && axis != -1 {
                    return Err(format!("axis {axis}: only the features (-1) are split"));
                }
                let parts = node.output.len();
                let sizes = match b {
                    Some(Value::Constant { ints: Some(s), .. }) => s.clone(),
                    _ => ints(node, "split").unwrap_or_default(),
                };
                if sizes.windows(2).any(|w| w[0] != w[1]) {
                    return Err(format!("{sizes:?}: only equal parts are imported"));
                }
                Ok((0..parts)
                    .map(|index| {
                        Value::Seq(Seq::Part(Source::Part {
                            layer: x,
                            index,
                            parts,
                        }))
                    })
                    .collect())
            }
            ("Transpose", Some(s), _) => self.transpose(node, s),
            (
                "MatMul",
                Some(Seq::Heads {
                    source: query,
                    heads,
                    transposed: true,
                    key_t: false,
                    scaled,
                }),
                Some(Seq::Heads {
                    source: key,
                    heads: hk,
                    transposed: true,
                    key_t: true,
                    ..
                }),
            ) if hk == heads => one(Seq::Scores {
                query,
                key,
                heads,
                how: How {
                    scale_queries: scaled || matches!(query, Source::Whole { scaled: true, .. }),
                    ..How::default()
                },
                softmax: false,
            }),
            (
                "MatMul",
                Some(Seq::Scores {
                    query,
                    key,
                    heads,
                    how,
                    softmax: true,
                }),
                Some(Seq::Heads {
                    source: value,
                    heads: hv,
                    transposed: true,
                    key_t: false,
                    scaled: false,
                }),
            ) if hv == heads => one(Seq::Context {
                sources: [query, key, value],
                heads,
                how,
                transposed: false,
            }),
            _ => return Ok(None),
        };
        out.map(Some)
    }

    /// What attention does to its scores: the scale, the masks, OPT's clamp, softmax and
    /// dropout.
    fn attention_scores(&mut self, r: Read<'_>) -> Part {
        let Read { node, op, a, b, .. } = r;
        let out = match (op, seq_of(Some(a)), seq_of(b)) {
            // The scale of the scores.
            ("Div" | "Mul", Some(s @ Seq::Scores { softmax: false, .. }), None)
                if scalar(b).is_some() =>
            {
                one(s)
            }
            // The scale's square root on the query and on the transposed key.
            (
                "Mul",
                Some(Seq::Heads {
                    source,
                    heads,
                    transposed: true,
                    key_t,
                    scaled: false,
                }),
                None,
            ) if scalar(b).is_some() => one(Seq::Heads {
                source,
                heads,
                transposed: true,
                key_t,
                scaled: true,
            }),
            // Masks: a select against a constant mask, or the sum with a constant; causal
            // where the mask has a row per query (`[.., positions, positions]`), padding
            // where it is one row broadcast over the queries (BERT's).
            ("Where" | "Add", _, _) if scores(a, b).is_some() => {
                let (mut s, mask) = scores(a, b).ok_or("no scores")?;
                let rows = |v: &Value| match v {
                    Value::Constant { dims, .. } if dims.len() >= 2 => dims[dims.len() - 2] > 1,
                    _ => false,
                };
                let causal = if op == "Where" {
                    rows(a)
                } else {
                    mask.is_some_and(rows)
                };
                if let Seq::Scores { how, .. } = &mut s {
                    how.mask = if op == "Where" {
                        ScoreMask::Select
                    } else {
                        ScoreMask::Add
                    };
                    how.causal = causal;
                }
                one(s)
            }
            // The clamp at the type's minimum (OPT's `torch.max`).
            (
                "Max",
                Some(Seq::Scores {
                    query,
                    key,
                    heads,
                    mut how,
                    softmax: false,
                }),
                None,
            ) => {
                how.clamp = true;
                one(Seq::Scores {
                    query,
                    key,
                    heads,
                    how,
                    softmax: false,
                })
            }
            (
                "Softmax",
                Some(Seq::Scores {
                    query,
                    key,
                    heads,
                    how,
                    softmax: false,
                }),
                _,
            ) => one(Seq::Scores {
                query,
                key,
                heads,
                how,
                softmax: true,
            }),
            (
                "Dropout",
                Some(Seq::Scores {
                    query,
                    key,
                    heads,
                    mut how,
                    softmax: true,
                }),
                _,
            ) => {
                how.dropout = f64::from(float(node, "ratio").unwrap_or(0.5));
                one(Seq::Scores {
                    query,
                    key,
                    heads,
                    how,
                    softmax: true,
                })
            }
            _ => return Ok(None),
        };
        out.map(Some)
    }

    /// A `Transpose` of sequence `s`: a feature map's positions back to the map, batch and
    /// positions swapped at batch 1, attention's split into heads and back, Swin's windows,
    /// and a fused projection's parts moved first.
    fn transpose(&mut self, node: &NodeProto, s: Seq) -> Out {
        let perm = ints(node, "perm").unwrap_or_default();
        // A feature map's positions with their channels moved back first: the map.
        if let Seq::Tokens(x) = s {
            let r = self.g.layers()[x].output.rank() as i64 + 1;
            let first: Vec<i64> = [0, r - 1].into_iter().chain(1..r - 1).collect();
            if r >= 4 && perm == first {
                return Ok(vec![Value::Layer(x)]);
            }
        }
        match (s, perm.as_slice()) {
            // Batch and positions swapped at batch 1 (torch's attention works on
            // `[positions, batch, features]`): the same sequence.
            (s @ Seq::Tokens(_), [1, 0, 2]) => one(s),
            // Into heads `[heads, positions, d]`, the key to `[heads, d, positions]`;
            // with batch and heads merged, `[positions, batch x heads, d]` to
            // `[batch x heads, positions, d]`.
            (
                Seq::Heads {
                    source,
                    heads,
                    transposed: false,
                    scaled,
                    ..
                },
                [0, 2, 1, 3] | [0, 2, 3, 1] | [1, 0, 2],
            ) => one(Seq::Heads {
                source,
                heads,
                transposed: true,
                key_t: perm.get(2) == Some(&3),
                scaled,
            }),
            // The key transposed after batch and heads merged (OPT's `bmm`), or
            // apart again (torch's `k.transpose(-2, -1)`).
            (
                Seq::Heads {
                    source,
                    heads,
                    transposed: true,
                    key_t: false,
                    scaled,
                },
                [0, 2, 1] | [0, 1, 3, 2],
            ) => one(Seq::Heads {
                source,
                heads,
                transposed: true,
                key_t: true,
                scaled,
            }),
            // Windows' axes swapped, to windows and back.
            (
                Seq::Windows {
                    x,
                    window,
                    roll,
                    reverse,
                    transposed: false,
                },
                [0, 1, 3, 2, 4, 5],
            ) => one(Seq::Windows {
                x,
                window,
                roll,
                reverse,
                transposed: true,
            }),
            (
                Seq::WindowParts {
                    layer,
                    heads,
                    front: false,
                },
                [2, 0, 3, 1, 4],
            ) => one(Seq::WindowParts {
                layer,
                heads,
                front: true,
            }),
            // The parts of a fused projection moved first.
            (
                Seq::Packed {
                    layer,
                    parts,
                    front: false,
                },
                [3, 1, 2, 0, 4],
            ) => one(Seq::Packed {
                layer,
                parts,
                front: true,
            }),
            (
                Seq::Context {
                    sources,
                    heads,
                    how,
                    transposed: false,
                },
                [0, 2, 1, 3] | [2, 0, 1, 3],
            ) => one(Seq::Context {
                sources,
                heads,
                how,
                transposed: true,
            }),
            _ => Err(format!(
                "perm {perm:?}: only attention's split into heads and back is imported"
            )),
        }
    }

    /// A `Gather` of a constant table: by the token ids an embedding, by constant indices
    /// a lookup that the `Add` after it makes an embedding of the input.
    fn lookup(&mut self, table: &Value, by: Option<&Value>, label: &str) -> Out {
        let (shape, origin) = match table {
            Value::Constant { dims, origin, .. } => (usizes(dims), origin.clone()),
            _ => (None, None),
        };
        let t = shape
            .filter(|d| d.len() == 2)
            .ok_or("looks up a table that is not a constant matrix [rows, features]")?;
        match by {
            Some(Value::Layer(ids)) => {
                let op = Op::Embedding {
                    num_embeddings: t[0],
                    embedding_dim: t[1],
                };
                let id = self.push(op, &[*ids], label)?;
                self.tables.push(Table {
                    origin,
                    rows: t[0],
                    features: t[1],
                });
                one(Seq::Tokens(id))
            }
            Some(Value::Constant { .. }) => one(Seq::Lookup {
                rows: t[0],
                features: t[1],
                name: label.to_owned(),
            }),
            _ => Err("looks up a table by something that is not token ids".into()),
        }
    }

    /// A `Gemm` or `MatMul` of layer `x` (as rows where `rows`) by a weight: a linear
    /// layer (a `MatMul`'s waits for its bias), tied to a token table it reads.
    fn product(
        &mut self,
        node: &NodeProto,
        op: &str,
        x: NodeId,
        rows: bool,
        weight: Option<&Value>,
        label: &str,
    ) -> Out {
        let (shape, origin) = match weight {
            Some(Value::Constant { dims, origin, .. }) => (usizes(dims), origin.clone()),
            _ => (None, None),
        };
        let w = shape
            .filter(|w| w.len() == 2)
            .ok_or("multiplies by a weight that is not a constant matrix")?;
        let gemm = op == "Gemm";
        let trans_b = gemm && int(node, "transB").unwrap_or(0) != 0;
        if gemm && int(node, "transA").unwrap_or(0) != 0 {
            return Err("transA is not imported".into());
        }
        // A Gemm reads rows, or one position (BERT's pooler).
        if gemm && !rows && self.positions(x) != 1 {
            return Err("a Gemm of a whole sequence: only of its rows is imported".into());
        }
        let (inner, out) = if trans_b { (w[1], w[0]) } else { (w[0], w[1]) };
        if inner != self.features(x) {
            return Err(format!(
                "multiplies {} features by a weight of {inner} rows",
                self.features(x)
            ));
        }
        let tied = !trans_b
            && origin.is_some()
            && self
                .tables
                .iter()
                .any(|t| t.origin == origin && t.rows == out && t.features == inner);
        if !gemm {
            return one(Seq::Product {
                x,
                out,
                tied,
                name: label.to_owned(),
            });
        }
        let op = Op::Linear {
            out_features: out,
            bias: node.input.get(2).is_some_and(|n| !n.is_empty()),
            tied,
        };
        let id = self.push(op, &[x], label)?;
        one(if rows { Seq::Rows(id) } else { Seq::Tokens(id) })
    }

    /// Query, key or value reshaped to `[positions, heads, d]`.
    fn heads(&self, source: Source, [p, heads, d]: [i64; 3]) -> Out {
        let parts = match source {
            Source::Part { parts, .. } => parts as i64,
            Source::Whole { .. } => 1,
        };
        let layer = source.layer();
        let (positions, features) = (self.positions(layer) as i64, self.features(layer) as i64);
        let channels = heads.checked_mul(d).and_then(|v| v.checked_mul(parts));
        if heads < 1 || (p != positions && p != -1) || channels != Some(features) {
            return Err(format!(
                "[batch, {p}, {heads}, {d}]: {} features at {positions} positions do not split \
                 into these heads",
                features / parts
            ));
        }
        one(Seq::Heads {
            source,
            heads: heads as usize,
            transposed: false,
            key_t: false,
            scaled: false,
        })
    }

    /// A `Reshape` of a sequence value to `shape` (batch first).
    fn reshape(&mut self, s: Seq, shape: &[i64], label: &str, layout: Layout) -> Out {
        let first = layout.first;
        if let Some(out) = self.window_reshape(&s, shape, layout) {
            return out;
        }
        let at = |r: &Self, id: NodeId| [r.positions(id) as i64, r.features(id) as i64];
        match (s, shape) {
            // To rows [batch x positions, features] and back.
            (Seq::Tokens(id), [_, f]) if *f == at(self, id)[1] => one(Seq::Rows(id)),
            (Seq::Rows(id) | Seq::Tokens(id), [_, p, f] | [p, 1, f])
                if [*p, *f] == at(self, id) =>
            {
                one(Seq::Tokens(id))
            }
            // A fused projection of a sequence laid out `[positions, batch, features]`
            // viewed as its parts (torch's attention).
            (Seq::Tokens(layer), [p, 1, parts, d])
                if first
                    && *parts >= 2
                    && [Some(*p), parts.checked_mul(*d)] == at(self, layer).map(Some) =>
            {
                one(Seq::Packed {
                    layer,
                    parts: *parts as usize,
                    front: false,
                })
            }
            // Query, key or value into heads; at batch 1, `[positions, batch x heads, d]`.
            (Seq::Part(source), [_, p, heads, d] | [p, heads, d]) => {
                self.heads(source, [*p, *heads, *d])
            }
            (Seq::Tokens(layer), [_, p, heads, d]) => self.heads(
                Source::Whole {
                    layer,
                    scaled: false,
                },
                [*p, *heads, *d],
            ),
            (Seq::Scaled { x, .. }, [_, p, heads, d]) => self.heads(
                Source::Whole {
                    layer: x,
                    scaled: true,
                },
                [*p, *heads, *d],
            ),
            // Batch and heads merged into one dimension and apart again (OPT's `bmm`).
            (
                s @ Seq::Heads {
                    transposed: true, ..
                },
                [_, _, _],
            ) => one(s),
            (
                s @ Seq::Heads {
                    transposed: true,
                    key_t: false,
                    heads,
                    ..
                },
                [1, h, _, _],
            ) if *h == heads as i64 => one(s),
            (s @ Seq::Scores { .. }, [_, _, _] | [_, _, _, _]) => one(s),
            (
                s @ Seq::Context {
                    transposed: false, ..
                },
                [_, _, _] | [_, _, _, _],
            ) => one(s),
            // Attention's output back to the features: the attention layer; to rows
            // `[positions x batch, features]` (torch's, at batch 1) where 2-d.
            (
                Seq::Context {
                    sources,
                    heads,
                    how,
                    transposed: true,
                },
                [_, p, f] | [p, f],
            ) => {
                if let Some(window) = layout.window {
                    return self.window_attention(sources, heads, how, *f, window, label);
                }
                let inputs: Vec<NodeId> = match sources {
                    [
                        Source::Part {
                            layer,
                            index: 0,
                            parts: 3,
                        },
                        Source::Part {
                            layer: k, index: 1, ..
                        },
                        Source::Part {
                            layer: v, index: 2, ..
                        },
                    ] if k == layer && v == layer => vec![layer],
                    [
                        Source::Whole { layer: q, .. },
                        Source::Whole {
                            layer: k,
                            scaled: false,
                        },
                        Source::Whole {
                            layer: v,
                            scaled: false,
                        },
                    ] => vec![q, k, v],
                    _ => {
                        return Err(
                            "attention whose query, key and value are neither three parts of \
                             one projection nor three projections"
                                .into(),
                        );
                    }
                };
                let hidden = match sources[2] {
                    Source::Part { layer, parts, .. } => self.features(layer) / parts,
                    Source::Whole { layer, .. } => self.features(layer),
                };
                if *p != at(self, sources[0].layer())[0] || *f != hidden as i64 {
                    return Err(format!(
                        "{shape:?}: attention over {hidden} features per position gives \
                         [batch, positions, {hidden}]"
                    ));
                }
                let op = Op::Attention(Attention {
                    heads,
                    kv_heads: heads,
                    causal: how.causal,
                    dropout: how.dropout,
                    fused: false,
                    mask: how.mask,
                    clamp: how.clamp,
                    scale_queries: how.scale_queries,
                    window: 0,
                    shift: 0,
                });
                let id = self.push(op, &inputs, label)?;
                one(if shape.len() == 2 {
                    Seq::Rows(id)
                } else {
                    Seq::Tokens(id)
                })
            }
            (_, shape) => Err(format!(
                "to {shape:?}: only reshapes to rows and back, and attention's into heads and \
                 back, are imported"
            )),
        }
    }
}

/// Swin's layers: the roll, the windows and their attention, patch merging.
impl Reader<'_> {
    /// `[C, H, W]` of map `x`.
    fn map(&self, x: NodeId) -> Option<[usize; 3]> {
        match self.g.layers()[x].output.dims() {
            &[c, h, w] => Some([c, h, w]),
            _ => None,
        }
    }

    /// A `Slice` of a map (`all`: the node's inputs): along its rows or columns, the
    /// whole of it (a pad undone), half of a roll, or every second position.
    fn slice(&mut self, s: Seq, all: &[Value]) -> Out {
        let list = |i: usize| match all.get(i) {
            Some(Value::Constant { ints: Some(v), .. }) if v.len() == 1 => Some(v[0]),
            None => None,
            _ => Some(i64::MIN),
        };
        let (x, roll) = match s {
            Seq::Tokens(x) => (x, [0, 0]),
            Seq::Rolled { x, roll } => (x, roll),
            Seq::Strided { x, .. } => (x, [0, 0]),
            _ => return Err("slices a sequence: only a map's rows and columns are sliced".into()),
        };
        let [_, h, w] = self
            .map(x)
            .ok_or("slices a sequence: only a map's rows and columns are sliced")?;
        let (start, end) = (list(1).unwrap_or(0), list(2).unwrap_or(i64::MAX));
        let axis = match list(3).unwrap_or(0) {
            1 | -3 => 0,
            2 | -2 => 1,
            a => {
                return Err(format!(
                    "axis {a}: only a map's rows (1) and columns (2) are sliced"
                ));
            }
        };
        let step = list(4).unwrap_or(1);
        let n = [h, w][axis] as i64;
        let at = |i: i64| (if i < 0 { i + n } else { i }).clamp(0, n) as usize;
        let (start, end) = (at(start), at(end));
        match (s, step) {
            (s, 1) if start == 0 && end == n as usize => one(s),
            (Seq::Tokens(_) | Seq::Rolled { .. }, 1) => one(Seq::Slab {
                x,
                roll,
                axis,
                start,
                end,
            }),
            (Seq::Tokens(_), 2) if start < 2 && end == n as usize => one(Seq::Strided {
                x,
                rows: (axis == 0).then_some(start),
                cols: (axis == 1).then_some(start),
            }),
            (Seq::Strided { rows, cols, .. }, 2) if start < 2 && end == n as usize => {
                one(Seq::Strided {
                    x,
                    rows: if axis == 0 { Some(start) } else { rows },
                    cols: if axis == 1 { Some(start) } else { cols },
                })
            }
            _ => Err(format!(
                "positions {start}..{end} by {step}: only a roll's halves and every second \
                 position of a map are sliced"
            )),
        }
    }

    /// The `Concat` of a roll's two halves: the map rolled.
    fn roll(&mut self, node: &NodeProto, all: &[Value]) -> Out {
        let (
            Value::Seq(Seq::Slab {
                x,
                roll,
                axis,
                start,
                end,
            }),
            Value::Seq(Seq::Slab {
                x: x2,
                roll: roll2,
                axis: axis2,
                start: start2,
                end: end2,
            }),
        ) = (&all[0], &all[1])
        else {
            return Err("no halves".into());
        };
        let [_, h, w] = self.map(*x).ok_or("not a map")?;
        let n = [h, w][*axis];
        let along = match int(node, "axis") {
            Some(1 | -3) => 0,
            Some(2 | -2) => 1,
            _ => usize::MAX,
        };
        if all.len() != 2
            || x != x2
            || roll != roll2
            || axis != axis2
            || along != *axis
            || *end != n
            || *start2 != 0
            || *end2 != *start
        {
            return Err("joins slices of a map that are not a roll's halves".into());
        }
        let mut roll = *roll;
        roll[*axis] = (roll[*axis] + start) % n;
        one(if roll == [0, 0] {
            Seq::Tokens(*x)
        } else {
            Seq::Rolled { x: *x, roll }
        })
    }

    /// The `Concat` on the channels of a map's four strided quarters in torchvision's
    /// order: patch merging.
    fn merge(&mut self, node: &NodeProto, all: &[Value], label: &str) -> Out {
        let order = [(0, 0), (1, 0), (0, 1), (1, 1)];
        let mut map = None;
        let ok = all.len() == 4
            && matches!(int(node, "axis"), Some(-1 | 3))
            && all.iter().zip(order).all(|(v, (r, c))| match v {
                Value::Seq(Seq::Strided {
                    x,
                    rows: Some(rows),
                    cols: Some(cols),
                }) => {
                    let same = map.is_none_or(|m| m == *x);
                    map = Some(*x);
                    same && (*rows, *cols) == (r, c)
                }
                _ => false,
            });
        let (true, Some(x)) = (ok, map) else {
            return Err(
                "joins a map's strided quarters other than as Swin's patch merging \
                        ((0, 0), (1, 0), (0, 1), (1, 1) on the channels)"
                    .into(),
            );
        };
        one(Seq::Tokens(self.push(Op::PatchMerge, &[x], label)?))
    }

    /// A `Reshape` into or out of windows, of the windows' fused projection into heads, or
    /// of the bias table's lookup; `None` for other reshapes.
    fn window_reshape(&mut self, s: &Seq, shape: &[i64], layout: Layout) -> Option<Out> {
        Some(match (s, shape, layout.window) {
            // The map (rolled) into windows.
            (Seq::Tokens(x) | Seq::Rolled { x, .. }, &[1, a, w, b, w2, c], None) => {
                let [ch, h, wd] = self.map(*x)?;
                let roll = match s {
                    Seq::Rolled { roll, .. } => *roll,
                    _ => [0, 0],
                };
                if w != w2
                    || w < 1
                    || a.checked_mul(w) != Some(h as i64)
                    || b.checked_mul(w) != Some(wd as i64)
                    || c != ch as i64
                {
                    return None;
                }
                one(Seq::Windows {
                    x: *x,
                    window: w as usize,
                    roll,
                    reverse: false,
                    transposed: false,
                })
            }
            (
                Seq::Windows {
                    x,
                    window,
                    roll,
                    reverse: false,
                    transposed: true,
                },
                &[_, s2, c],
                None,
            ) => {
                let [ch, ..] = self.map(*x)?;
                if s2 != (window * window) as i64 || c != ch as i64 || roll[0] != roll[1] {
                    return Some(Err(format!(
                        "windows of {window} rolled by {roll:?} as {shape:?}: only square \
                         windows rolled alike along both axes are imported"
                    )));
                }
                self.window_out = Some((*window, roll[0]));
                one(Seq::Tokens(*x))
            }
            // The windows' fused projection into heads.
            (Seq::Tokens(layer), &[_, s2, 3, heads, d], Some((window, _))) => {
                let [c3, ..] = self.map(*layer)?;
                let channels = heads.checked_mul(d).and_then(|v| v.checked_mul(3));
                if s2 != (window * window) as i64 || channels != Some(c3 as i64) || heads < 1 {
                    return None;
                }
                one(Seq::WindowParts {
                    layer: *layer,
                    heads: heads as usize,
                    front: false,
                })
            }
            // Windows back into the map, in torch's frame still rolled.
            (Seq::Tokens(x), &[1, a, b, w, w2, c], Some((window, shift))) => {
                let [ch, h, wd] = self.map(*x)?;
                if w != w2
                    || w != window as i64
                    || a.checked_mul(w) != Some(h as i64)
                    || b.checked_mul(w) != Some(wd as i64)
                    || c != ch as i64
                {
                    return None;
                }
                one(Seq::Windows {
                    x: *x,
                    window,
                    roll: [shift, shift],
                    reverse: true,
                    transposed: false,
                })
            }
            (
                Seq::Windows {
                    x,
                    roll,
                    reverse: true,
                    transposed: true,
                    ..
                },
                &[1, h, w, c],
                _,
            ) => {
                let [ch, mh, mw] = self.map(*x)?;
                if [c, h, w] != [ch as i64, mh as i64, mw as i64] {
                    return None;
                }
                one(if *roll == [0, 0] {
                    Seq::Tokens(*x)
                } else {
                    Seq::Rolled { x: *x, roll: *roll }
                })
            }
            // The bias table's lookup as `[window^2, window^2, heads]`.
            (Seq::Lookup { features, .. }, &[s1, s2, h], _)
                if s1 == s2 && (h == -1 || h == *features as i64) =>
            {
                one(Seq::Bias)
            }
            // The scores per window `[batch, windows, heads, S, S]` for the shift's mask.
            (s @ Seq::Scores { .. }, &[_, _, _, _, _], Some(_)) => one(s.clone()),
            _ => return None,
        })
    }

    /// Windows' attention, from its query, key and value `sources` in `heads`: one
    /// shifted-window attention layer reading the fused projection's map.
    fn window_attention(
        &mut self,
        sources: [Source; 3],
        heads: usize,
        how: How,
        features: i64,
        (window, shift): (usize, usize),
        label: &str,
    ) -> Out {
        let layer = match sources {
            [
                Source::Part {
                    layer,
                    index: 0,
                    parts: 3,
                },
                Source::Part {
                    layer: k, index: 1, ..
                },
                Source::Part {
                    layer: v, index: 2, ..
                },
            ] if k == layer && v == layer => layer,
            _ => {
                return Err(
                    "window attention whose query, key and value are not three parts \
                             of one projection"
                        .into(),
                );
            }
        };
        let [c3, ..] = self.map(layer).ok_or("window attention of no map")?;
        if features != (c3 / 3) as i64 {
            return Err(format!(
                "window attention over {} channels gives [windows, positions, {}]",
                c3 / 3,
                c3 / 3
            ));
        }
        let mut a = Attention::new(heads, false, how.dropout, false);
        a.window = window;
        a.shift = shift;
        a.scale_queries = how.scale_queries;
        self.window_out = Some((window, shift));
        one(Seq::Tokens(self.push(Op::Attention(a), &[layer], label)?))
    }
}
