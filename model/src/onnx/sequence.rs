//! Transformers in ONNX: sequences `[batch, positions, features]` (the IR's `[features,
//! positions]`), and the chains of nodes that are one IR layer.
//!
//! - `Gather` of a weight table by the token ids is an embedding; by constant positions, a
//!   learned position embedding, added to the tokens' (`wpe`).
//! - `LayerNormalization` over the features is a layer norm.
//! - A linear layer is a `MatMul` of a sequence by a weight, or the exporter's
//!   `Reshape` to rows `[batch x positions, features]`, `Gemm`, and `Reshape` back. A
//!   product by the token table transposed is a head tied to it (no weights of its own).
//! - Element-wise ops on a sequence: `Mul`, `Div` and `Add` by a scalar (scale, shift),
//!   `Pow` by a scalar, `Tanh`, `Relu`, `Gelu`, `Softmax` over features, `Add` and `Mul` of
//!   two sequences; so GPT-2's GELU, written as its formula, is its eight kernels, as the
//!   built-in GPT-2 has them.
//! - Unfused attention: the fused projection `Split` into query, key and value, each
//!   `Reshape`d into heads and `Transpose`d (the key to `K^T`), `MatMul` of query and key, a
//!   scale (`Div` or `Mul` by a scalar), a mask (`Where` against a constant mask: causal,
//!   a select; or an `Add` of a constant: additive), `Softmax`, an optional `Dropout`,
//!   `MatMul` by the value, `Transpose` back and `Reshape` to the features: one attention
//!   layer reading the projection.
//!
//! Any other node on a sequence is refused with its operator, as the rest of the importer
//! refuses what it does not know.

use crate::graph::{Attention, NodeId, Op, ScoreMask};

/// A sequence value, or a stage of an attention chain.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Seq {
    /// Layer `NodeId`'s output `[features, positions]`, as ONNX's `[positions, features]`.
    Tokens(NodeId),
    /// The same with batch and positions merged into rows (before and after a `Gemm`).
    Rows(NodeId),
    /// A constant table's rows at constant positions: `(rows, features)` and the node.
    Positions {
        rows: usize,
        features: usize,
        name: String,
    },
    /// Part `index` of `parts` equal slices of layer `layer`'s features (query, key,
    /// value of a fused projection).
    Part {
        layer: NodeId,
        index: usize,
        parts: usize,
    },
    /// A part split into `heads`: `[positions, heads, d]`, then transposed to
    /// `[heads, positions, d]` (`transposed`), the key to `[heads, d, positions]`
    /// (`key_t`).
    Heads {
        layer: NodeId,
        index: usize,
        heads: usize,
        transposed: bool,
        key_t: bool,
    },
    /// Attention's scores or weights `[heads, positions, positions]` of the projection
    /// `layer`, with the mask applied so far, after the softmax (`softmax`), and the
    /// dropout on the weights.
    Scores {
        layer: NodeId,
        heads: usize,
        mask: ScoreMask,
        softmax: bool,
        dropout: f64,
    },
    /// The weights times the values, `[heads, positions, d]`, and transposed back to
    /// `[positions, heads, d]` (`transposed`).
    Context {
        layer: NodeId,
        heads: usize,
        mask: ScoreMask,
        dropout: f64,
        transposed: bool,
    },
}

impl Seq {
    /// The attention layer a finished chain is (`[positions, hidden]` again), reading the
    /// projection: unfused, causal where its mask is a select against a constant mask.
    pub(super) fn attention(&self) -> Option<(NodeId, Op)> {
        match *self {
            Seq::Context {
                layer,
                heads,
                mask,
                dropout,
                transposed: true,
            } => Some((
                layer,
                Op::Attention(Attention {
                    heads,
                    causal: mask == ScoreMask::Select,
                    dropout,
                    fused: false,
                    mask,
                    clamp: false,
                    scale_queries: false,
                }),
            )),
            _ => None,
        }
    }
}
