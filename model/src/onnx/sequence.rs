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

use super::{NodeProto, Table, Value, float, int, ints, unique, usizes};
use crate::graph::{Attention, Graph, NodeId, Op, ScoreMask};

/// Where a query, key or value comes from: part `index` of a fused projection split in
/// `parts`, or a layer of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Source {
    /// Part of a fused projection.
    Part {
        layer: NodeId,
        index: usize,
        parts: usize,
    },
    /// A projection of its own; `scaled` where a scalar multiplied it on the way (OPT's
    /// queries, scaled before the product).
    Whole { layer: NodeId, scaled: bool },
}

impl Source {
    /// The layer it reads.
    fn layer(self) -> NodeId {
        match self {
            Source::Part { layer, .. } | Source::Whole { layer, .. } => layer,
        }
    }
}

/// A sequence value, a stage of a chain that is one layer, or a layer not yet added
/// because the node after it may change it (a product's bias, GELU's first division).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seq {
    /// Layer `NodeId`'s output `[features, positions]`, as ONNX's `[positions, features]`.
    Tokens(NodeId),
    /// The same with batch and positions merged into rows (before and after a `Gemm`).
    Rows(NodeId),
    /// A product of layer `x` by a weight, not yet added: the `Add` of a bias after it
    /// makes it a linear layer with a bias.
    Product {
        x: NodeId,
        out: usize,
        tied: bool,
        name: String,
    },
    /// A constant table's rows at constant indices: `(rows, features)` and the node.
    Lookup {
        rows: usize,
        features: usize,
        name: String,
    },
    /// Layer `x` times a scalar, not yet added: GELU's first step where an `Erf` reads it
    /// (`x / sqrt 2`), the queries' scale where they are split into heads (OPT), else a
    /// scale layer.
    Scaled {
        x: NodeId,
        factor: f64,
        name: String,
    },
    /// GELU's steps after the division: `erf(x / sqrt 2)` (1), `+ 1` (2), `x *` (3).
    Gelu { x: NodeId, step: u8 },
    /// A part of a fused projection (query, key or value).
    Part(Source),
    /// A fused projection's features viewed as `parts` stacked (torch's
    /// `multi_head_attention_forward`: `unflatten` to `[positions, batch, parts, d]`), and
    /// with the parts moved first (`front`: `unsqueeze`, `transpose`, `squeeze` to
    /// `[parts, positions, batch, d]`), of which a `Gather` takes one.
    Packed {
        layer: NodeId,
        parts: usize,
        front: bool,
    },
    /// Query, key or value split into `heads`: `[positions, heads, d]`, then transposed
    /// to `[heads, positions, d]` (`transposed`), the key to `[heads, d, positions]`
    /// (`key_t`); `scaled` where a scalar multiplied it after (torch's
    /// `scaled_dot_product_attention` written out scales the query and the transposed key
    /// each by the scale's square root).
    Heads {
        source: Source,
        heads: usize,
        transposed: bool,
        key_t: bool,
        scaled: bool,
    },
    /// Attention's scores or weights `[heads, positions, positions]` of `query` and `key`,
    /// with what was done to them so far, before or after the softmax (`softmax`).
    Scores {
        query: Source,
        key: Source,
        heads: usize,
        how: How,
        softmax: bool,
    },
    /// The weights times the values, `[heads, positions, d]`, and transposed back to
    /// `[positions, heads, d]` (`transposed`).
    Context {
        sources: [Source; 3],
        heads: usize,
        how: How,
        transposed: bool,
    },
}

/// What unfused attention does to its scores ([`Attention`]'s fields).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct How {
    mask: ScoreMask,
    causal: bool,
    clamp: bool,
    dropout: f64,
    scale_queries: bool,
}

impl Default for How {
    fn default() -> How {
        How {
            mask: ScoreMask::None,
            causal: false,
            clamp: false,
            dropout: 0.0,
            scale_queries: false,
        }
    }
}

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
}

type Out = Result<Vec<Value>, String>;

fn one(s: Seq) -> Out {
    Ok(vec![Value::Seq(s)])
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
        for name in &node.input {
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
        let out = self.read(node, op, label, &a, b.as_ref(), first)?;
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

    /// What [`Reader::node`] reads `node` as, from its first two inputs `a` and `b`;
    /// `first` where an input is laid out `[positions, batch, features]`.
    fn read(
        &mut self,
        node: &NodeProto,
        op: &str,
        label: &str,
        a: &Value,
        b: Option<&Value>,
        first: bool,
    ) -> Out {
        let (a, b) = (a.clone(), b.cloned());
        let seq = |v: Option<&Value>| match v {
            Some(Value::Seq(s)) => Some(s.clone()),
            _ => None,
        };
        let dims = |v: Option<&Value>| match v {
            Some(Value::Constant { dims, .. }) => usizes(dims),
            _ => None,
        };
        match (op, seq(Some(&a)), seq(b.as_ref())) {
            // The shape of a sequence at batch 1, or of a query or key in heads: a constant
            // (torch computes attention's scale and its reshapes from it).
            ("Shape", Some(s), _) => {
                let shape: Vec<i64> = match s {
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
            // ViT's class token: learned tokens `[1, tokens, features]` before the positions.
            ("Concat", None, Some(Seq::Tokens(x))) => {
                let axis = int(node, "axis").unwrap_or(0);
                let tokens = match dims(Some(&a)).as_deref() {
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
                    dims(b.as_ref()).as_deref(),
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
                let index = match &b {
                    Some(Value::Constant {
                        ints: Some(i),
                        dims,
                        ..
                    }) if dims.is_empty() && int(node, "axis").unwrap_or(0) == 0 => {
                        usize::try_from(i[0]).ok().filter(|&i| i < parts)
                    }
                    _ => None,
                }
                .ok_or("takes something other than one of a projection's parts (axis 0)")?;
                one(Seq::Part(Source::Part {
                    layer,
                    index,
                    parts,
                }))
            }
            ("Gather", None, _) => self.lookup(&a, b.as_ref(), label),
            ("Gather", Some(Seq::Tokens(x)), None) => {
                // BERT's pooler reads the first position.
                let first = matches!(&b, Some(Value::Constant { ints: Some(i), dims, .. })
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
                    &a
                } else {
                    b.as_ref().unwrap_or(&a)
                };
                if dims(Some(bias)).as_deref() != Some(&[out][..]) {
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
            ("Mul" | "Div", Some(Seq::Tokens(x)), None) if scalar(b.as_ref()).is_some() => {
                let v = scalar(b.as_ref()).unwrap_or(1.0);
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
            ("Add", Some(Seq::Gelu { x, step: 1 }), None) if scalar(b.as_ref()) == Some(1.0) => {
                one(Seq::Gelu { x, step: 2 })
            }
            ("Mul", Some(Seq::Tokens(y)), Some(Seq::Gelu { x, step: 2 }))
            | ("Mul", Some(Seq::Gelu { x, step: 2 }), Some(Seq::Tokens(y)))
                if x == y =>
            {
                one(Seq::Gelu { x, step: 3 })
            }
            ("Mul", Some(Seq::Gelu { x, step: 3 }), None) if scalar(b.as_ref()) == Some(0.5) => {
                one(Seq::Tokens(self.push(Op::Gelu, &[x], label)?))
            }
            ("Add" | "Sub" | "Mul" | "Div" | "Pow", Some(Seq::Tokens(x)), None) => {
                let v = scalar(b.as_ref())
                    .ok_or("combines a sequence with a constant that is not a scalar")?;
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
            ("Identity" | "Cast", Some(s), _) => one(s),
            ("Reshape", Some(s), None) => {
                let shape = match &b {
                    Some(Value::Constant { ints: Some(s), .. }) => s.clone(),
                    _ => return Err("reshapes to a shape that is not a constant".into()),
                };
                self.reshape(s, &shape, label, first)
            }
            ("Gemm" | "MatMul", Some(Seq::Rows(x) | Seq::Tokens(x)), None) => self.product(
                node,
                op,
                x,
                matches!(seq(Some(&a)), Some(Seq::Rows(_))),
                b.as_ref(),
                label,
            ),
            // Attention.
            ("Split", Some(Seq::Tokens(x)), _) => {
                let axis = int(node, "axis").unwrap_or(0);
                if axis != 2 && axis != -1 {
                    return Err(format!("axis {axis}: only the features (-1) are split"));
                }
                let parts = node.output.len();
                let sizes = match &b {
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
            ("Transpose", Some(s), _) => {
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
            // The scale of the scores.
            ("Div" | "Mul", Some(s @ Seq::Scores { softmax: false, .. }), None)
                if scalar(b.as_ref()).is_some() =>
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
            ) if scalar(b.as_ref()).is_some() => one(Seq::Heads {
                source,
                heads,
                transposed: true,
                key_t,
                scaled: true,
            }),
            // Masks: a select against a constant mask, or the sum with a constant; causal
            // where the mask has a row per query (`[.., positions, positions]`), padding
            // where it is one row broadcast over the queries (BERT's).
            ("Where" | "Add", _, _) if scores(&a, b.as_ref()).is_some() => {
                let (mut s, mask) = scores(&a, b.as_ref()).ok_or("no scores")?;
                let rows = |v: &Value| match v {
                    Value::Constant { dims, .. } if dims.len() >= 2 => dims[dims.len() - 2] > 1,
                    _ => false,
                };
                let causal = if op == "Where" {
                    rows(&a)
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
            _ => Err(format!(
                "on a sequence ridgeline imports embeddings, layer norms, linear layers, \
                 unfused attention and element-wise ops (README.md, `workload import`); this \
                 `{op}` is none of them: write the workload as a TOML layer list, or open an \
                 issue for it"
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
        if heads < 1 || (p != positions && p != -1) || heads * d * parts != features {
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
    fn reshape(&mut self, s: Seq, shape: &[i64], label: &str, first: bool) -> Out {
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
                if first && *parts >= 2 && [*p, parts * d] == at(self, layer) =>
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
