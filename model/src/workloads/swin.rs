//! Swin-T (Liu et al., ICCV 2021) in torchvision's layout (`torchvision/models/swin_transformer.py`,
//! `swin_t`): a 4 x 4 patch convolution to 96 channels and a layer norm, four stages of 2,
//! 2, 6 and 2 blocks of 3, 6, 12 and 24 heads, patch merging between them (2 x 2 blocks on
//! the channels, a layer norm, a linear layer without bias halving them), a layer norm, the
//! global average pool and a 1000-way head.
//!
//! A block is `x + attn(norm1(x))` then `x + mlp(norm2(x))`: the attention is the `qkv`
//! projection at every position, shifted-window attention (windows of 7; every second
//! block's rolled by 3, except where the window covers the whole map, as torchvision sets
//! it) and the `proj` projection; the MLP is a linear layer to 4 times the channels, GELU
//! and a linear layer back. The map stays `[C, H, W]`, so torchvision's permutes to
//! channels last and back are no layers. Left out: stochastic depth's per-sample scale of
//! each residual branch (0.1 at most per block in `swin_t`'s linear ramp to 0.2; no matrix
//! work) and dropout, which `swin_t` sets to 0.

use super::naming::{Scale, dotted};
use crate::graph::{Attention, Conv, Graph, LayerError, NodeId, Op};

const STAGES: [(usize, usize); 4] = [(2, 3), (2, 6), (6, 12), (2, 24)];
const EMBED: usize = 96;
const PATCH: usize = 4;
const WINDOW: usize = 7;
const CLASSES: usize = 1000;

pub(super) fn check_input(spatial: &[usize]) -> Result<(), String> {
    match spatial {
        [h, w] if h == w && h % (32 * WINDOW) == 0 => Ok(()),
        _ => Err(format!(
            "{spatial:?}: Swin-T's windows of 7 need a square input of a multiple of 224 (every \
             stage's map a multiple of 7; torchvision pads other sizes, which ridgeline does \
             not model)"
        )),
    }
}

fn linear(out_features: usize, bias: bool) -> Op {
    Op::Linear {
        out_features,
        bias,
        tied: false,
    }
}

pub(super) fn build(spatial: &[usize], w: &Scale) -> Result<Graph, LayerError> {
    let mut input = vec![3];
    input.extend_from_slice(spatial);
    let mut g = Graph::with_capacity("swin-t", input, 260)?;
    let embed = w.ch(EMBED);
    g.then(
        "features.0.0",
        Op::conv(Conv::new(embed, &[PATCH, PATCH]).stride(PATCH)),
    )?;
    let mut x = g.then("features.0.2", Op::LayerNorm)?;
    let mut size = spatial[0] / PATCH;
    for (stage, &(blocks, heads)) in STAGES.iter().enumerate() {
        let dim = embed << stage;
        let at = 2 * stage + 1;
        if stage > 0 {
            let p = format!("features.{}", at - 1);
            g.push(dotted(&p, "merge"), Op::PatchMerge, &[x])?;
            g.then(dotted(&p, "norm"), Op::LayerNorm)?;
            x = g.then(dotted(&p, "reduction"), linear(dim, false))?;
            size /= 2;
        }
        for block in 0..blocks {
            // torchvision rolls every second block's windows by half a window, unless one
            // window covers the map.
            let shift = if block % 2 == 1 && size > WINDOW {
                WINDOW / 2
            } else {
                0
            };
            let p = format!("features.{at}.{block}");
            x = swin_block(&mut g, &p, x, dim, heads, shift)?;
        }
    }
    g.then("norm", Op::LayerNorm)?;
    g.then("avgpool", Op::GlobalAvgPool)?;
    g.then(
        "head",
        Op::Dense {
            out_features: CLASSES,
            bias: true,
        },
    )?;
    g.then("loss", Op::SoftmaxCrossEntropy)?;
    Ok(g)
}

fn swin_block(
    g: &mut Graph,
    p: &str,
    x: NodeId,
    dim: usize,
    heads: usize,
    shift: usize,
) -> Result<NodeId, LayerError> {
    let mut attention = Attention::new(heads, false, 0.0, false);
    attention.window = WINDOW;
    attention.shift = shift;
    // torchvision scales the queries (`q * head_dim ** -0.5`).
    attention.scale_queries = true;
    g.push(dotted(p, "norm1"), Op::LayerNorm, &[x])?;
    g.then(dotted(p, "attn.qkv"), linear(3 * dim, true))?;
    g.then(dotted(p, "attn"), Op::Attention(attention))?;
    let a = g.then(dotted(p, "attn.proj"), linear(dim, true))?;
    let x = g.push(dotted(p, "add1"), Op::Add, &[x, a])?;
    g.then(dotted(p, "norm2"), Op::LayerNorm)?;
    g.then(dotted(p, "mlp.0"), linear(4 * dim, true))?;
    g.then(dotted(p, "mlp.1"), Op::Gelu)?;
    let m = g.then(dotted(p, "mlp.3"), linear(dim, true))?;
    g.push(dotted(p, "add2"), Op::Add, &[x, m])
}
