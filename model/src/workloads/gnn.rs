//! A graph isomorphism network (GIN; Xu, Hu, Leskovec and Jegelka, "How Powerful are Graph
//! Neural Networks?", ICLR 2019, Eq. 4.1 with epsilon = 0), sized as the Open Graph
//! Benchmark's molecule baselines run it (Hu et al., NeurIPS 2020: 5 layers, hidden 300):
//! a sample is one graph of `nodes` nodes with 16 input features each and `DEGREE` edges
//! per node; each layer gathers the source nodes' features onto the edges, sums them into
//! their destinations, adds each node's own features and applies a two-layer MLP with ReLU;
//! the readout sums the nodes and regresses one value (mean squared error, as an energy).

use super::naming::{Scale, dotted};
use crate::graph::{Graph, LayerError, Op};

const FEATURES: usize = 16;
const HIDDEN: usize = 300;
const LAYERS: usize = 5;
/// Edges per node.
pub(super) const DEGREE: usize = 8;

pub(super) fn check_input(spatial: &[usize]) -> Result<(), String> {
    if spatial[0] < 2 {
        return Err("a graph needs at least 2 nodes".into());
    }
    Ok(())
}

pub(super) fn build(spatial: &[usize], w: &Scale) -> Result<Graph, LayerError> {
    let nodes = spatial[0];
    let edges = DEGREE * nodes;
    let hidden = w.ch(HIDDEN);
    let linear = |out_features| Op::Linear {
        out_features,
        bias: true,
        tied: false,
    };
    let mut g = Graph::with_capacity("gin", vec![FEATURES, nodes], 8 * LAYERS + 8)?;
    let mut h = g.then("node_encoder", linear(hidden))?;
    for i in 0..LAYERS {
        let p = format!("layers.{i}");
        let messages = g.push(dotted(&p, "gather"), Op::Gather { edges }, &[h])?;
        let sums = g.push(
            dotted(&p, "scatter_add"),
            Op::ScatterAdd { nodes },
            &[messages],
        )?;
        let x = g.push(dotted(&p, "self"), Op::Add, &[h, sums])?;
        let x = g.push(dotted(&p, "mlp.0"), linear(hidden), &[x])?;
        let x = g.push(dotted(&p, "mlp.1"), Op::Relu, &[x])?;
        let x = g.push(dotted(&p, "mlp.2"), linear(hidden), &[x])?;
        h = g.push(dotted(&p, "relu"), Op::Relu, &[x])?;
    }
    g.then("readout", Op::SegmentSum { segments: 1 })?;
    g.then("head", linear(1))?;
    g.then("loss", Op::MseLoss)?;
    Ok(g)
}
