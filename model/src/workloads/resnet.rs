//! ResNet-50 v1.5 in torchvision's layout (`torchvision/models/resnet.py`): a 7x7/2 stem,
//! 3x3/2 max pool, four stages of 3, 4, 6, 3 bottleneck blocks (1x1, 3x3, 1x1 with
//! expansion 4; v1.5 puts the stride on the 3x3 conv), global average pool, a 1000-way
//! fully connected layer and softmax cross-entropy. Convolutions have no bias.

use super::naming::{Scale, dotted};
use crate::graph::{Conv, Dims, Graph, LayerError, NodeId, Op, Padding, Pool};

const STAGES: [(usize, usize); 4] = [(64, 3), (128, 4), (256, 6), (512, 3)];
const EXPANSION: usize = 4;
const CLASSES: usize = 1000;

pub(super) fn check_input(spatial: &[usize]) -> Result<(), String> {
    // Five stride-2 steps: the stem conv, the max pool and stages 2-4.
    match spatial.iter().find(|&&d| d < 32) {
        Some(d) => Err(format!(
            "extent {d} is too small: five stride-2 steps need at least 32"
        )),
        None => Ok(()),
    }
}

fn conv(c_out: usize, k: usize, stride: usize) -> Op {
    Op::conv(
        Conv::new(c_out, &[k, k])
            .stride(stride)
            .pad(k / 2)
            .bias(false),
    )
}

pub(super) fn build(spatial: &[usize], w: &Scale) -> Result<Graph, LayerError> {
    let mut input = vec![3];
    input.extend_from_slice(spatial);
    let mut g = Graph::with_capacity("resnet50", input, 180)?;
    g.then("conv1", conv(w.ch(64), 7, 2))?;
    g.then("bn1", Op::BatchNorm)?;
    g.then("relu", Op::Relu)?;
    let mut pool = Pool::new(&[3, 3]);
    pool.stride = Dims::from_slice(&[2, 2]);
    pool.padding = Padding::symmetric(1, 2);
    let mut x = g.then("maxpool", Op::max_pool(pool))?;
    let mut c_in = w.ch(64);
    for (stage, &(planes, blocks)) in STAGES.iter().enumerate() {
        let planes = w.ch(planes);
        for block in 0..blocks {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            let p = format!("layer{}.{block}", stage + 1);
            x = bottleneck(&mut g, &p, x, c_in, planes, stride)?;
            c_in = planes * EXPANSION;
        }
    }
    g.then("avgpool", Op::GlobalAvgPool)?;
    g.then(
        "fc",
        Op::Dense {
            out_features: CLASSES,
            bias: true,
        },
    )?;
    g.then("loss", Op::SoftmaxCrossEntropy)?;
    Ok(g)
}

fn bottleneck(
    g: &mut Graph,
    p: &str,
    x: NodeId,
    c_in: usize,
    planes: usize,
    stride: usize,
) -> Result<NodeId, LayerError> {
    let c_out = planes * EXPANSION;
    g.push(dotted(p, "conv1"), conv(planes, 1, 1), &[x])?;
    g.then(dotted(p, "bn1"), Op::BatchNorm)?;
    g.then(dotted(p, "relu1"), Op::Relu)?;
    g.then(dotted(p, "conv2"), conv(planes, 3, stride))?;
    g.then(dotted(p, "bn2"), Op::BatchNorm)?;
    g.then(dotted(p, "relu2"), Op::Relu)?;
    g.then(dotted(p, "conv3"), conv(c_out, 1, 1))?;
    let main = g.then(dotted(p, "bn3"), Op::BatchNorm)?;
    let skip = if stride != 1 || c_in != c_out {
        g.push(dotted(p, "downsample.0"), conv(c_out, 1, stride), &[x])?;
        g.then(dotted(p, "downsample.1"), Op::BatchNorm)?
    } else {
        x
    };
    g.push(dotted(p, "add"), Op::Add, &[main, skip])?;
    g.then(dotted(p, "relu3"), Op::Relu)
}
