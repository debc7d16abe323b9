//! DeepCAM, after the MLPerf HPC reference (`mlcommons/hpc`,
//! `deepcam/src/deepCam/architecture/deeplab_xception.py`): DeepLabv3+ with an aligned
//! Xception backbone at output stride 16, ASPP with dilations 6/12/18 plus image pooling,
//! and a decoder of transposed convolutions that joins low-level features from the first
//! entry block; 3 output classes per pixel, softmax cross-entropy.
//!
//! Separable convolutions are a depthwise 3x3 (`groups = C_in`) and a pointwise 1x1, both
//! without bias. Xception's in-place ReLU at the start of blocks 2-20 is modelled as a ReLU
//! after the previous block (as the reference table does), so the skip path and the
//! low-level features read the activated tensor, as they do in PyTorch.

use super::naming::{Scale, dotted};
use crate::graph::{Conv, Dims, Graph, LayerError, NodeId, Op};

const IN_CHANNELS: usize = 16;
const CLASSES: usize = 3;
const MIDDLE_BLOCKS: std::ops::RangeInclusive<usize> = 4..=19;
const ASPP_DILATIONS: [usize; 3] = [6, 12, 18];

pub(super) fn check_input(spatial: &[usize]) -> Result<(), String> {
    // Output stride 16, and the decoder must meet the stride-4 low-level features exactly.
    match spatial.iter().find(|&&d| d % 16 != 0) {
        Some(d) => Err(format!(
            "extent {d} is not a multiple of 16 (DeepCAM's output stride); the decoder could \
             not meet the low-level features"
        )),
        None => Ok(()),
    }
}

fn conv(c_out: usize, k: usize) -> Conv {
    Conv::new(c_out, &[k, k]).bias(false)
}

/// A separable convolution of `x`: depthwise `{p}.conv1` then pointwise `{p}.pointwise`.
fn sep(
    g: &mut Graph,
    p: &str,
    x: NodeId,
    c_out: usize,
    stride: usize,
    dilation: usize,
) -> Result<NodeId, LayerError> {
    let c_in = g.layers()[x].output.channels();
    let dw = conv(c_in, 3)
        .stride(stride)
        .pad(dilation)
        .dilation(dilation)
        .groups(c_in);
    g.push(dotted(p, "conv1"), Op::conv(dw), &[x])?;
    g.then(dotted(p, "pointwise"), Op::conv(conv(c_out, 1)))
}

pub(super) fn build(spatial: &[usize], w: &Scale) -> Result<Graph, LayerError> {
    let mut input = vec![IN_CHANNELS];
    input.extend_from_slice(spatial);
    let mut g = Graph::with_capacity("deepcam", input, 330)?;
    let x = "xception";

    // Entry flow.
    g.then(
        dotted(x, "conv1"),
        Op::conv(conv(w.ch(32), 3).stride(2).pad(1)),
    )?;
    g.then(dotted(x, "bn1"), Op::BatchNorm)?;
    g.then(dotted(x, "relu1"), Op::Relu)?;
    g.then(dotted(x, "conv2"), Op::conv(conv(w.ch(64), 3).pad(1)))?;
    g.then(dotted(x, "bn2"), Op::BatchNorm)?;
    let mut h = g.then(dotted(x, "relu2"), Op::Relu)?;
    let mut low_level = h;
    for (i, c) in [(1, 128), (2, 256), (3, 728)] {
        let p = format!("{x}.block{i}");
        strided_block(&mut g, &p, h, w.ch(c))?;
        let relu = if i == 1 {
            dotted(x, "relu_after_block1")
        } else {
            dotted(&p, "relu")
        };
        h = g.then(relu, Op::Relu)?;
        if i == 1 {
            low_level = h;
        }
    }

    // Middle flow: 16 blocks of three separable convs with identity skips.
    let c = w.ch(728);
    for i in MIDDLE_BLOCKS {
        let p = format!("{x}.block{i}");
        sep_next(&mut g, &dotted(&p, "rep0.sepconv"), c, 1, 1)?;
        g.then(dotted(&p, "rep1.bn"), Op::BatchNorm)?;
        g.then(dotted(&p, "rep2.relu"), Op::Relu)?;
        sep_next(&mut g, &dotted(&p, "rep3.sepconv"), c, 1, 1)?;
        g.then(dotted(&p, "rep4.bn"), Op::BatchNorm)?;
        g.then(dotted(&p, "rep5.relu"), Op::Relu)?;
        sep_next(&mut g, &dotted(&p, "rep6.sepconv"), c, 1, 1)?;
        let bn = g.then(dotted(&p, "rep7.bn"), Op::BatchNorm)?;
        g.push(dotted(&p, "add"), Op::Add, &[bn, h])?;
        h = g.then(dotted(&p, "relu"), Op::Relu)?;
    }

    // Exit flow: block 20 (stride 1 at output stride 16), then three dilated separable convs.
    let p = dotted(x, "block20");
    let c_exit = w.ch(1024);
    sep_next(&mut g, &dotted(&p, "rep0.sepconv"), c, 1, 1)?;
    g.then(dotted(&p, "rep1.bn"), Op::BatchNorm)?;
    g.then(dotted(&p, "rep2.relu"), Op::Relu)?;
    sep_next(&mut g, &dotted(&p, "rep3.sepconv"), c_exit, 1, 1)?;
    g.then(dotted(&p, "rep4.bn"), Op::BatchNorm)?;
    let main = sep_next(&mut g, &dotted(&p, "rep5.sepconv"), c_exit, 1, 1)?;
    g.push(dotted(&p, "skip"), Op::conv(conv(c_exit, 1)), &[h])?;
    let skip = g.then(dotted(&p, "skipbn"), Op::BatchNorm)?;
    g.push(dotted(&p, "add"), Op::Add, &[main, skip])?;
    for (i, c) in [(3, 1536), (4, 1536), (5, 2048)] {
        sep_next(&mut g, &format!("{x}.conv{i}"), w.ch(c), 1, 2)?;
        g.then(format!("{x}.bn{i}"), Op::BatchNorm)?;
        h = g.then(format!("{x}.relu{i}"), Op::Relu)?;
    }

    // ASPP: a 1x1 branch, three dilated 3x3 branches, and image pooling tiled back.
    let b = "bottleneck";
    let c_aspp = w.ch(256);
    let mut branches = Vec::new();
    for (i, d) in [(1, 1)].into_iter().chain((2..).zip(ASPP_DILATIONS)) {
        let p = format!("{b}.aspp{i}");
        let k = if d == 1 { 1 } else { 3 };
        let pad = if d == 1 { 0 } else { d };
        g.push(
            dotted(&p, "atrous_convolution"),
            Op::conv(conv(c_aspp, k).pad(pad).dilation(d)),
            &[h],
        )?;
        g.then(dotted(&p, "bn"), Op::BatchNorm)?;
        branches.push(g.then(dotted(&p, "relu"), Op::Relu)?);
    }
    let p = dotted(b, "global_avg_pool");
    g.push(dotted(&p, "pool"), Op::GlobalAvgPool, &[h])?;
    g.then(dotted(&p, "conv"), Op::conv(conv(c_aspp, 1)))?;
    g.then(dotted(&p, "affine"), Op::ChannelAffine)?;
    g.then(dotted(&p, "relu"), Op::Relu)?;
    let repeats = Dims::from_slice(g.layers()[h].output.spatial());
    branches.push(g.then(dotted(b, "tile"), Op::Tile { repeats })?);
    g.push(dotted(b, "concat"), Op::Concat, &branches)?;
    g.then(dotted(b, "conv"), Op::conv(conv(c_aspp, 1)))?;
    g.then(dotted(b, "bn"), Op::BatchNorm)?;
    let aspp = g.then(dotted(b, "relu"), Op::Relu)?;

    // Decoder.
    g.push("conv2", Op::conv(conv(w.ch(48), 1)), &[low_level])?;
    g.then("bn2", Op::BatchNorm)?;
    let low = g.then("relu", Op::Relu)?;
    let c_dec = w.ch(256);
    let up = |c: usize| Op::conv_transpose(conv(c, 3).stride(2).pad(1).output_padding(1));
    g.push("upsample.deconv1.0", up(c_dec), &[aspp])?;
    g.then("upsample.deconv1.1", Op::BatchNorm)?;
    g.then("upsample.deconv1.2", Op::Relu)?;
    g.then("upsample.deconv1.3", up(c_dec))?;
    g.then("upsample.deconv1.4", Op::BatchNorm)?;
    let dec = g.then("upsample.deconv1.5", Op::Relu)?;
    g.push("upsample.concat", Op::Concat, &[dec, low])?;
    g.then("upsample.conv1.0", Op::conv(conv(c_dec, 3).pad(1)))?;
    g.then("upsample.conv1.1", Op::BatchNorm)?;
    g.then("upsample.conv1.2", Op::Relu)?;
    g.then("upsample.conv1.3", Op::conv(conv(c_dec, 3).pad(1)))?;
    g.then("upsample.conv1.4", Op::BatchNorm)?;
    g.then("upsample.conv1.5", Op::Relu)?;
    g.then("upsample.conv1.6", Op::conv(conv(c_dec, 1).bias(true)))?;
    g.then("upsample.deconv2.0", up(c_dec))?;
    g.then("upsample.deconv2.1", Op::BatchNorm)?;
    g.then("upsample.deconv2.2", Op::Relu)?;
    g.then("upsample.last_deconv.0", up(CLASSES))?;
    g.then("loss", Op::SoftmaxCrossEntropy)?;
    Ok(g)
}

/// A separable convolution of the most recent layer.
fn sep_next(
    g: &mut Graph,
    p: &str,
    c_out: usize,
    stride: usize,
    dilation: usize,
) -> Result<NodeId, LayerError> {
    let x = g.last();
    sep(g, p, x, c_out, stride, dilation)
}

/// Entry-flow block: separable convs at `c_out` (the third with stride 2), batch norms
/// after the first two, a strided 1x1 skip of `x` with batch norm, and the residual add.
fn strided_block(g: &mut Graph, p: &str, x: NodeId, c_out: usize) -> Result<NodeId, LayerError> {
    sep(g, &dotted(p, "rep0.sepconv"), x, c_out, 1, 1)?;
    g.then(dotted(p, "rep1.bn"), Op::BatchNorm)?;
    g.then(dotted(p, "rep2.relu"), Op::Relu)?;
    sep_next(g, &dotted(p, "rep3.sepconv"), c_out, 1, 1)?;
    g.then(dotted(p, "rep4.bn"), Op::BatchNorm)?;
    let main = sep_next(g, &dotted(p, "rep5.sepconv"), c_out, 2, 1)?;
    g.push(dotted(p, "skip"), Op::conv(conv(c_out, 1).stride(2)), &[x])?;
    let skip = g.then(dotted(p, "skipbn"), Op::BatchNorm)?;
    g.push(dotted(p, "add"), Op::Add, &[main, skip])
}
