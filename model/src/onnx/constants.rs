//! Constants followed through the nodes that compute them: only the shapes of weights
//! matter, and the integers of shapes (what a reshape, slice or mask is computed from).
//! One function a kind of node ([`FOLDS`]); a node none of them follows is refused.

use super::value::{
    FLOAT, Node, Value, Values, attr, broadcast, constant, int, ints, reshape_constant,
    slice_constant, transpose_constant, value_dims as dims_of,
};
use crate::error::Result;

/// How a node on constants computes its value: `None` where ridgeline cannot follow it.
type Fold = fn(&Node<'_>, &Values) -> Result<Option<Value>>;

/// Each kind of node on constants, and how its value is followed.
const FOLDS: &[(&[&str], Fold)] = &[
    (&["Constant"], fold_constant),
    (&["ConstantOfShape"], fold_constant_of_shape),
    (&["Cast"], fold_cast),
    (&["Identity"], fold_identity),
    (&["Sqrt"], fold_sqrt),
    (&["Shape"], fold_shape),
    (&["Slice"], fold_slice),
    (&["Transpose"], fold_transpose),
    (&["Range"], fold_range),
    (&["ScatterND"], fold_scatter_n_d),
    (
        &[
            "Equal", "Where", "Not", "Less", "Greater", "And", "Or", "Neg", "CumSum", "Max", "Min",
        ],
        fold_equal,
    ),
    (&["Expand"], fold_expand),
    (&["Pow", "Add", "Sub", "Mul", "Div", "Mod"], fold_pow),
    (
        &["Unsqueeze", "Squeeze", "Reshape", "Flatten"],
        fold_unsqueeze,
    ),
    (&["Concat"], fold_concat),
    (&["Gather"], fold_gather),
];

/// The value node `n` computes from the constants in `values`; `None` where no entry of
/// [`FOLDS`] follows it.
pub(super) fn fold(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    match FOLDS.iter().find(|(ops, _)| ops.contains(&n.op.as_str())) {
        Some((_, f)) => f(n, values),
        None => Ok(None),
    }
}

fn fold_constant(n: &Node<'_>, _values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    Ok(attr(node, "value").and_then(|a| a.t.as_ref()).map(constant))
}

fn fold_constant_of_shape(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    let get = |i: usize| n.get(values, i);
    Ok(match get(0)? {
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
    })
}

/// An integer cast to a float (attention's scale computed from a shape
/// entry): the scalar it is.
/// Otherwise the value it casts.
fn fold_cast(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    let get = |i: usize| n.get(values, i);
    Ok(if int(node, "to") == Some(i64::from(FLOAT)) {
        match get(0)?.clone() {
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
        }
    } else {
        Some(get(0)?.clone())
    })
}

/// The value itself.
fn fold_identity(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let get = |i: usize| n.get(values, i);
    Ok(Some(get(0)?.clone()))
}

fn fold_sqrt(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let get = |i: usize| n.get(values, i);
    Ok(match get(0)?.clone() {
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
    })
}

/// The shape of a constant (the shape of a shape torch expands by).
fn fold_shape(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let get = |i: usize| n.get(values, i);
    Ok(dims_of(get(0)?).map(|d| Value::Constant {
        dims: vec![d.len() as i64],
        ints: Some(d),
        scalar: None,
        origin: None,
    }))
}

/// Entries of a shape.
/// Entries of a shape, or the shape of a slice of a constant (a mask's).
fn fold_slice(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    let get = |i: usize| n.get(values, i);
    Ok({
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
                slice_constant(dims, v.as_deref(), &s, &e, list(3), list(4)).map(|(dims, ints)| {
                    Value::Constant {
                        dims,
                        ints,
                        scalar: None,
                        origin: None,
                    }
                })
            }
            _ => None,
        }
    })
}

/// A transposed weight (a head tied to the token table reads it so), or
/// integers (a pad's pairs).
fn fold_transpose(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    let get = |i: usize| n.get(values, i);
    Ok(match get(0)? {
        Value::Constant {
            dims,
            origin,
            scalar,
            ints: v,
        } => {
            let perm = ints(node, "perm").unwrap_or_else(|| (0..dims.len() as i64).rev().collect());
            transpose_constant(dims, v.as_deref(), &perm).map(|(out, ints)| Value::Constant {
                dims: out,
                ints,
                scalar: *scalar,
                origin: origin.clone(),
            })
        }
        _ => None,
    })
}

/// Integers `start, start + delta, ...` below `limit` (a mask's indices).
fn fold_range(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let get = |i: usize| n.get(values, i);
    Ok(match (get(0)?, get(1)?, get(2)?) {
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
    })
}

/// A scatter into a constant (a mask's regions): its shape.
fn fold_scatter_n_d(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let get = |i: usize| n.get(values, i);
    Ok(dims_of(get(0)?).map(|dims| Value::Constant {
        dims,
        ints: None,
        scalar: None,
        origin: None,
    }))
}

/// A mask computed from constants (BERT's padding mask of an all-ones
/// attention mask, token types of zeros): its shape only.
fn fold_equal(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    let op = n.op.as_str();
    let get = |i: usize| n.get(values, i);
    Ok({
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
        let ints = match (op, known.as_slice()) {
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
    })
}

/// Its target shape where the graph gives it; where that is computed from
/// a mask (BERT's token types), the input's: such a constant is read as an
/// index of constants, whose shape no layer takes.
fn fold_expand(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let get = |i: usize| n.get(values, i);
    Ok(Some(Value::Constant {
        dims: match get(1)? {
            Value::Constant {
                ints: Some(shape), ..
            } => broadcast(&dims_of(get(0)?).unwrap_or_default(), shape),
            _ => dims_of(get(0)?).unwrap_or_default(),
        },
        ints: None,
        scalar: None,
        origin: None,
    }))
}

/// Arithmetic on scalars (attention's scale: `sqrt(d)` as a Pow).
fn fold_pow(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let op = n.op.as_str();
    let get = |i: usize| n.get(values, i);
    Ok({
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
                                match op {
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
                                    _ => u32::try_from(q).ok().and_then(|e| p.checked_pow(e)),
                                }
                            })
                            .collect()
                    }
                    _ => None,
                },
                scalar: match (sa, sb) {
                    (Some(a), Some(b)) => Some(match op {
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
                        if da.iter().product::<i64>() <= 1 && db.iter().product::<i64>() <= 1 =>
                    {
                        Some(*v)
                    }
                    _ => None,
                },
                origin: None,
            }),
            _ => None,
        }
    })
}

fn fold_unsqueeze(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    let op = n.op.as_str();
    let get = |i: usize| n.get(values, i);
    Ok({
        let dims = dims_of(get(0)?).unwrap_or_default();
        Some(Value::Constant {
            dims: reshape_constant(
                node,
                op,
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
    })
}

/// A shape put together from its entries.
/// Of other constants, the shape; of integers, the integers joined.
fn fold_concat(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let node = n.proto;
    let get = |i: usize| n.get(values, i);
    let fail = |m: String| n.fail(m);
    Ok(
        if (0..node.input.len()).any(|i| matches!(get(i), Ok(Value::Constant { ints: None, .. }))) {
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
        } else {
            {
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
        },
    )
}

/// An entry of a shape.
fn fold_gather(n: &Node<'_>, values: &Values) -> Result<Option<Value>> {
    let get = |i: usize| n.get(values, i);
    Ok(
        if matches!(
            (get(0)?, get(1)?),
            (
                Value::Constant { ints: Some(_), .. },
                Value::Constant { ints: Some(_), .. }
            )
        ) {
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
        } else {
            None
        },
    )
}
