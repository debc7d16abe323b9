//! What the importer reads a graph into: its values (a layer's output, a constant of known
//! shape, a sequence), the attributes of a node, and the arithmetic on constants' shapes and
//! integers that ONNX exporters compute shapes with.

use std::collections::{HashMap, HashSet};

use super::proto::{AttributeProto, GraphProto, NodeProto, TensorProto};
use crate::error::{Error, Result};
use crate::graph::{Dims, Graph, NodeId, ScoreMask};

/// A value of the graph: a layer's output, or a constant of known shape (and, for
/// integer tensors, known values).
#[derive(Debug, Clone)]
pub(super) enum Value {
    /// The output of layer `NodeId`.
    Layer(NodeId),
    /// A constant.
    Constant {
        dims: Vec<i64>,
        ints: Option<Vec<i64>>,
        /// The value of a floating-point scalar (a scale, an exponent, a shift).
        scalar: Option<f64>,
        /// The initializer it is (`Identity`, `Cast` and `Transpose` keep it): a head that
        /// reads the token table is tied to it.
        origin: Option<String>,
    },
    /// Sequences, the tensors of a transformer ([`sequence`]).
    Seq(Seq),
}

/// ONNX's data types of 32-bit floats and 64-bit integers.
pub(super) const FLOAT: i32 = 1;
pub(super) const INT64: i32 = 7;

pub(super) fn constant(t: &TensorProto) -> Value {
    let ints = (t.data_type == Some(INT64)).then(|| {
        if t.int64_data.is_empty() {
            t.raw_data
                .as_deref()
                .unwrap_or_default()
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
                .collect()
        } else {
            t.int64_data.clone()
        }
    });
    let elements: i64 = t.dims.iter().product();
    let scalar = (t.data_type == Some(FLOAT) && elements == 1)
        .then(|| {
            t.float_data.first().copied().or_else(|| {
                let b = t.raw_data.as_deref()?.get(..4)?;
                Some(f32::from_le_bytes(b.try_into().ok()?))
            })
        })
        .flatten()
        .map(f64::from);
    Value::Constant {
        dims: t.dims.clone(),
        ints,
        scalar,
        origin: t.name.clone().filter(|n| !n.is_empty()),
    }
}

pub(super) fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute
        .iter()
        .find(|a| a.name.as_deref() == Some(name))
}

pub(super) fn ints(node: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(node, name).map(|a| a.ints.clone())
}

pub(super) fn int(node: &NodeProto, name: &str) -> Option<i64> {
    attr(node, name).and_then(|a| a.i)
}

pub(super) fn float(node: &NodeProto, name: &str) -> Option<f32> {
    attr(node, name).and_then(|a| a.f)
}

pub(super) fn text(node: &NodeProto, name: &str) -> Option<String> {
    attr(node, name).and_then(|a| {
        a.s.as_ref()
            .map(|s| String::from_utf8_lossy(s).into_owned())
    })
}

pub(super) fn usizes(v: &[i64]) -> Option<Dims> {
    v.iter().map(|&x| usize::try_from(x).ok()).collect()
}

/// The entries one axis of `n` keeps under ONNX `Slice`'s rules: the first, the step and
/// how many (nothing is listed, so a constant's shape of any size is followed).
pub(super) fn slice_axis(n: i64, start: i64, end: i64, step: i64) -> Option<(i64, i64, i64)> {
    if step == 0 || n < 0 {
        return None;
    }
    let at = |i: i64| if i < 0 { i.saturating_add(n) } else { i };
    let (first, end) = if step > 0 {
        (at(start).clamp(0, n), at(end).clamp(0, n))
    } else {
        (at(start).clamp(0, n - 1), at(end).clamp(-1, n - 1))
    };
    let span = i128::from(if step > 0 { end - first } else { first - end });
    let stride = i128::from(step.unsigned_abs());
    let count = if span <= 0 {
        0
    } else {
        (span - 1) / stride + 1
    };
    Some((first, step, i64::try_from(count).ok()?))
}

/// The number of entries of a tensor of `dims`, where it fits.
pub(super) fn entries(dims: &[i64]) -> Option<i64> {
    dims.iter()
        .try_fold(1i64, |acc, &d| acc.checked_mul(d).filter(|_| d >= 0))
}

/// ONNX `Slice` of a constant of `dims` (and its integer values, where known).
pub(super) fn slice_constant(
    dims: &[i64],
    ints: Option<&[i64]>,
    starts: &[i64],
    ends: &[i64],
    axes: Option<Vec<i64>>,
    steps: Option<Vec<i64>>,
) -> Option<(Vec<i64>, Option<Vec<i64>>)> {
    let rank = dims.len() as i64;
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
    if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return None;
    }
    let mut kept: Vec<(i64, i64, i64)> = dims.iter().map(|&n| (0, 1, n)).collect();
    for (k, &a) in axes.iter().enumerate() {
        let a = usize::try_from(if a < 0 { a + rank } else { a }).ok()?;
        kept[a] = slice_axis(*dims.get(a)?, starts[k], ends[k], steps[k])?;
    }
    let out: Vec<i64> = kept.iter().map(|k| k.2).collect();
    // Values only of a tensor that holds them (its entries are in memory already).
    let values = ints
        .filter(|v| entries(dims) == Some(v.len() as i64))
        .map(|v| {
            let picked: Vec<Vec<i64>> = kept
                .iter()
                .map(|&(first, step, count)| (0..count).map(|i| first + i * step).collect())
                .collect();
            gather_ints(dims, v, &picked)
        });
    Some((out, values))
}

/// The entries of `v` (of shape `dims`, row-major) at every combination of `picked`'s
/// indices per axis, row-major.
pub(super) fn gather_ints(dims: &[i64], v: &[i64], picked: &[Vec<i64>]) -> Vec<i64> {
    let mut out = vec![0usize];
    for (axis, p) in picked.iter().enumerate() {
        let stride: i64 = dims[axis + 1..].iter().product();
        out = out
            .iter()
            .flat_map(|&base| p.iter().map(move |&i| base + (i * stride) as usize))
            .collect();
    }
    out.into_iter().map(|i| v[i]).collect()
}

/// ONNX `Transpose` of a constant of `dims` by `perm` (and its integer values, where known).
pub(super) fn transpose_constant(
    dims: &[i64],
    ints: Option<&[i64]>,
    perm: &[i64],
) -> Option<(Vec<i64>, Option<Vec<i64>>)> {
    let perm: Vec<usize> = perm
        .iter()
        .map(|&p| usize::try_from(p).ok())
        .collect::<Option<_>>()?;
    let out: Vec<i64> = perm
        .iter()
        .map(|&p| dims.get(p).copied().unwrap_or(1))
        .collect();
    let values = ints
        .filter(|v| v.len() as i64 == dims.iter().product::<i64>() && perm.len() == dims.len())
        .map(|v| {
            let strides: Vec<i64> = (0..dims.len())
                .map(|a| dims[a + 1..].iter().product())
                .collect();
            let mut idx = vec![0usize];
            for &p in &perm {
                let (n, stride) = (dims[p], strides[p]);
                idx = idx
                    .iter()
                    .flat_map(|&base| (0..n).map(move |i| base + (i * stride) as usize))
                    .collect();
            }
            idx.into_iter().map(|i| v[i]).collect()
        });
    Some((out, values))
}

/// A token table a `Gather` looked up: its initializer, rows (vocabulary) and features.
#[derive(Debug, Clone)]
pub(super) struct Table {
    pub(super) origin: Option<String>,
    pub(super) rows: usize,
    pub(super) features: usize,
}

/// The shape two shapes broadcast to (numpy's rule: aligned on the right, each dimension
/// the larger).
pub(super) fn broadcast(a: &[i64], b: &[i64]) -> Vec<i64> {
    let n = a.len().max(b.len());
    let at = |d: &[i64], i: usize| {
        (i + d.len())
            .checked_sub(n)
            .and_then(|j| d.get(j))
            .copied()
            .unwrap_or(1)
    };
    (0..n).map(|i| at(a, i).max(at(b, i))).collect()
}

/// `label`, or `label#n` where a layer has it.
pub(super) fn unique(g: &Graph, names: &mut HashMap<String, usize>, label: &str) -> String {
    let n = names.entry(label.to_owned()).or_insert(0);
    let name = if *n > 0 || g.find(label).is_some() {
        format!("{label}#{n}")
    } else {
        label.to_owned()
    };
    *n += 1;
    name
}

/// Whether a constant of shape `c` holds one value per channel of an activation of
/// per-sample shape `x` (`[C, 1, ...]` or `[1, C, 1, ...]`, as broadcasting reads it).
pub(super) fn per_channel(c: &[i64], x: &[usize]) -> bool {
    let channels = x.first().copied().unwrap_or(0) as i64;
    let trimmed: Vec<i64> = c
        .iter()
        .copied()
        .skip_while(|&d| d == 1 && c.len() > x.len())
        .collect();
    match trimmed.as_slice() {
        [first, rest @ ..] => {
            *first == channels && rest.iter().all(|&d| d == 1) && rest.len() < x.len()
        }
        [] => false,
    }
}

/// The dims of a shape operation on a constant of `dims`.
/// The outputs of `Mul` nodes that an `Add` of a constant reads (a per-channel scale with a
/// shift after it: a channel affine, as Caffe2 writes a batch norm folded for inference).
pub(super) fn shifted_products(graph: &GraphProto) -> HashSet<String> {
    let mut constant: std::collections::HashSet<&str> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    let mut products = std::collections::HashSet::new();
    for n in &graph.node {
        let op = n.op_type.as_deref().unwrap_or_default();
        let all_constant = n.input.iter().all(|i| constant.contains(i.as_str()));
        if matches!(op, "Constant" | "ConstantOfShape") || all_constant {
            constant.extend(n.output.iter().map(String::as_str));
        }
        if op == "Mul" {
            products.extend(n.output.iter().map(String::as_str));
        }
    }
    let mut out = std::collections::HashSet::new();
    for n in &graph.node {
        if n.op_type.as_deref() == Some("Add") && n.input.len() == 2 {
            let (a, b) = (n.input[0].as_str(), n.input[1].as_str());
            for (x, c) in [(a, b), (b, a)] {
                if products.contains(x) && constant.contains(c) {
                    out.insert(x.to_owned());
                }
            }
        }
    }
    out
}

pub(super) fn reshape_constant(
    node: &NodeProto,
    op: &str,
    dims: &[i64],
    second: Option<&Value>,
) -> Vec<i64> {
    let axes = ints(node, "axes").or_else(|| match second {
        Some(Value::Constant { ints: Some(a), .. }) => Some(a.clone()),
        _ => None,
    });
    match op {
        "Unsqueeze" => {
            let mut out = dims.to_vec();
            let mut axes = axes.unwrap_or_default();
            let rank = (dims.len() + axes.len()) as i64;
            for a in &mut axes {
                if *a < 0 {
                    *a += rank;
                }
            }
            axes.sort_unstable();
            for a in axes {
                let at = usize::try_from(a).unwrap_or(0).min(out.len());
                out.insert(at, 1);
            }
            out
        }
        "Squeeze" => dims.iter().copied().filter(|&d| d != 1).collect(),
        "Flatten" => vec![dims.iter().product()],
        // Reshape: the target shape where it is known.
        _ => match second {
            Some(Value::Constant { ints: Some(s), .. }) => {
                let total: i64 = dims.iter().product();
                let known: i64 = s.iter().filter(|&&d| d > 0).product();
                s.iter()
                    .map(|&d| if d == -1 { total / known.max(1) } else { d })
                    .collect()
            }
            _ => dims.to_vec(),
        },
    }
}

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
    pub(super) fn layer(self) -> NodeId {
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
    /// A map `x` rolled (torch's `roll` by `-roll` along its rows and columns, written out
    /// as slices and their concatenation): position `i` holds the map's `i + roll`.
    Rolled { x: NodeId, roll: [usize; 2] },
    /// Positions `start..end` along the rows (`axis` 0) or columns (1) of map `x` rolled
    /// by `roll`: half of a roll.
    Slab {
        x: NodeId,
        roll: [usize; 2],
        axis: usize,
        start: usize,
        end: usize,
    },
    /// Map `x` (rolled by `roll`) viewed as windows of `window x window` positions
    /// (`[1, H / w, w, W / w, w, C]`, `transposed` to `[1, H / w, W / w, w, w, C]`), or
    /// (`reverse`) windows viewed back as the map.
    Windows {
        x: NodeId,
        window: usize,
        roll: [usize; 2],
        reverse: bool,
        transposed: bool,
    },
    /// Windows' fused projection `[windows, window^2, 3, heads, d]`, and `front` with the
    /// parts first and the heads before the positions (`[3, windows, heads, window^2, d]`).
    WindowParts {
        layer: NodeId,
        heads: usize,
        front: bool,
    },
    /// Swin's relative position bias: a table of one column a head looked up by constant
    /// indices, as the scores' shape `[heads, window^2, window^2]`.
    Bias,
    /// Map `x` at every second row (from `rows`) and column (from `cols`) where set: a
    /// quarter of Swin's patch merging.
    Strided {
        x: NodeId,
        rows: Option<usize>,
        cols: Option<usize>,
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
    pub(super) mask: ScoreMask,
    pub(super) causal: bool,
    pub(super) clamp: bool,
    pub(super) dropout: f64,
    pub(super) scale_queries: bool,
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

/// The graph's values so far, by name.
pub(super) type Values = HashMap<String, Value>;

/// The layer whose output `v` is, if it is one.
pub(super) fn value_layer(v: &Value) -> Option<NodeId> {
    match v {
        Value::Layer(id) => Some(*id),
        _ => None,
    }
}

/// The shape of constant `v`, if it is one.
pub(super) fn value_dims(v: &Value) -> Option<Vec<i64>> {
    match v {
        Value::Constant { dims, .. } => Some(dims.clone()),
        _ => None,
    }
}

/// The node being imported: its proto, operator and label, and where it is in the file.
pub(super) struct Node<'a> {
    /// The node (inputs in the order the importer reads them).
    pub(super) proto: &'a NodeProto,
    /// Its operator.
    pub(super) op: String,
    /// Its name, or its first output's where it has none.
    pub(super) label: String,
    /// `FILE, node INDEX`.
    pub(super) location: String,
}

impl Node<'_> {
    /// The error of this node: `message` after its operator.
    pub(super) fn fail(&self, message: String) -> Error {
        Error::Layer {
            location: self.location.clone(),
            layer: self.label.clone(),
            message: format!("op `{}`: {message}", self.op),
        }
    }

    /// Input `i`'s value among `values`; an error naming it where no node before produced it.
    pub(super) fn get<'v>(&self, values: &'v Values, i: usize) -> Result<&'v Value> {
        let name = self
            .proto
            .input
            .get(i)
            .map(String::as_str)
            .unwrap_or_default();
        values
            .get(name)
            .ok_or_else(|| self.fail(format!("input `{name}` is not produced before this node")))
    }
}
