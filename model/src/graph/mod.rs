//! The layer-graph IR: a directed acyclic graph of layers with concrete per-sample shapes.
//!
//! A [`Graph`] is built layer by layer with [`Graph::push`], which checks each op against
//! its inputs' shapes and infers its output shape, so a graph that exists is always
//! consistent. Node 0 is the input sample; every other node refers only to earlier nodes,
//! so the layer order is a topological order. Batch size and precision are not part of the
//! graph: costs take them as arguments ([`crate::cost`]).

mod op;
mod shape;

use std::hash::BuildHasher;

use compact_str::CompactString;
pub use op::{
    Attention, AttentionShape, Conv, ExpertActivation, MAX_WINDOW, Moe, MoeShape, Op, PadPairs,
    Padding, Pool, ScoreMask,
};
use rustc_hash::{FxBuildHasher, FxHashMap};
pub use shape::{Dims, Shape};
use smallvec::SmallVec;

/// Index of a layer in its graph.
pub type NodeId = usize;

/// One layer: a named op applied to earlier layers' outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Unique name within the graph (stored inline up to 24 bytes).
    pub name: CompactString,
    /// What the layer computes (padding resolved to explicit pairs).
    pub op: Op,
    /// The layers whose outputs this layer reads, in order.
    pub inputs: SmallVec<[NodeId; 2]>,
    /// Output shape of one sample.
    pub output: Shape,
}

/// A layer that could not be added, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerError {
    /// The layer's name.
    pub layer: String,
    /// What is wrong, naming the field.
    pub message: String,
}

/// A workload's layer graph.
#[derive(Debug, Clone)]
pub struct Graph {
    name: String,
    layers: Vec<Layer>,
    /// Hash of each layer name -> the first layer with that hash, for O(1) lookups. A
    /// 64-bit collision between different names falls back to a linear scan. (FxHash: fast,
    /// not flooding-resistant, which layer names read from local files do not need.)
    index: FxHashMap<u64, NodeId>,
}

fn name_hash(name: &str) -> u64 {
    FxBuildHasher.hash_one(name)
}

/// Graphs are equal when their names and layers are; the index is derived from them.
impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.layers == other.layers
    }
}

/// The name of node 0.
pub const INPUT_NAME: &str = "input";

/// Largest tensor of one sample, in elements (2^40): keeps every count exact in `u64`.
pub const MAX_ELEMENTS: u64 = 1 << 40;
/// Largest per-sample multiply-accumulate count of one layer (2^43): with batches up to
/// [`crate::cost::MAX_BATCH`] (2^20) a step's count still fits `u64`.
pub const MAX_MACS: u64 = 1 << 43;
/// Most layers of one graph: far beyond any real network (GPT-3 has a few thousand), and
/// small enough that building and costing one stays well under a second.
pub const MAX_LAYERS: usize = 100_000;

impl Graph {
    /// A graph whose input sample has `input` shape (channels first, no batch).
    pub fn new(name: impl Into<String>, input: Vec<usize>) -> Result<Self, LayerError> {
        Self::with_capacity(name, input, 64)
    }

    /// Like [`Graph::new`], with room for `layers` layers before reallocating.
    pub fn with_capacity(
        name: impl Into<String>,
        input: Vec<usize>,
        layers: usize,
    ) -> Result<Self, LayerError> {
        let elements = input
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        if input.is_empty() || input.contains(&0) || elements.is_none_or(|e| e > MAX_ELEMENTS) {
            return Err(LayerError {
                layer: INPUT_NAME.into(),
                message: format!(
                    "input shape {input:?} must have at least one dimension, all at least 1, \
                     and at most 2^40 elements"
                ),
            });
        }
        let input_layer = Layer {
            name: INPUT_NAME.into(),
            op: Op::Input,
            inputs: SmallVec::new(),
            output: Shape::new(&input),
        };
        let mut graph = Graph {
            name: name.into(),
            layers: Vec::with_capacity(layers),
            index: FxHashMap::with_capacity_and_hasher(layers, FxBuildHasher),
        };
        graph.index.insert(name_hash(INPUT_NAME), 0);
        graph.layers.push(input_layer);
        Ok(graph)
    }

    /// The workload's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All layers in topological order; `layers()[0]` is the input.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// The input sample's shape.
    pub fn input_shape(&self) -> &Shape {
        &self.layers[0].output
    }

    /// The most recently added layer.
    pub fn last(&self) -> NodeId {
        self.layers.len() - 1
    }

    /// The id of the layer called `name`.
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.find_hashed(name, name_hash(name))
    }

    fn find_hashed(&self, name: &str, hash: u64) -> Option<NodeId> {
        match self.index.get(&hash) {
            None => None,
            Some(&id) if self.layers[id].name == name => Some(id),
            Some(_) => self.layers.iter().position(|l| l.name == name),
        }
    }

    /// Adds a layer reading `inputs`; checks the op against their shapes, resolves its
    /// padding and infers its output shape.
    pub fn push(
        &mut self,
        name: impl Into<CompactString>,
        mut op: Op,
        inputs: &[NodeId],
    ) -> Result<NodeId, LayerError> {
        let name = name.into();
        let fail = |message: String| LayerError {
            layer: name.to_string(),
            message,
        };
        if name.trim().is_empty() {
            return Err(fail(
                "the layer name is empty; give every layer a name".into(),
            ));
        }
        if self.layers.len() >= MAX_LAYERS {
            return Err(fail(format!(
                "the workload has more than {MAX_LAYERS} layers, the most ridgeline builds"
            )));
        }
        let hash = name_hash(&name);
        if self.find_hashed(&name, hash).is_some() {
            return Err(fail(
                "a layer with this name already exists; names must be unique".into(),
            ));
        }
        if let Some(&bad) = inputs.iter().find(|&&i| i >= self.layers.len()) {
            return Err(fail(format!(
                "input {bad} does not refer to an earlier layer"
            )));
        }
        if let Some(&loss) = inputs.iter().find(|&&i| self.layers[i].op.is_loss()) {
            return Err(fail(format!(
                "input `{}` is a loss; a loss must be the last layer of its branch",
                self.layers[loss].name
            )));
        }
        let shapes: Vec<&[usize]> = inputs
            .iter()
            .map(|&i| self.layers[i].output.dims())
            .collect();
        let output = op.resolve(&shapes).map_err(fail)?;
        if output.contains(&0) {
            return Err(fail(format!(
                "output shape {output:?} has an empty dimension"
            )));
        }
        let elements = output
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        if elements.is_none_or(|e| e > MAX_ELEMENTS) {
            return Err(fail(format!(
                "output shape {output:?} has more than 2^40 elements per sample; this is \
                 beyond what ridgeline models"
            )));
        }
        if op.is_matrix()
            && op
                .matrix_size(&shapes, &output)
                .is_none_or(|(_, m)| m > MAX_MACS)
        {
            return Err(fail(
                "more than 2^43 multiply-accumulates per sample; this is beyond what ridgeline \
                 models"
                    .into(),
            ));
        }
        let id = self.layers.len();
        self.index.entry(hash).or_insert(id);
        self.layers.push(Layer {
            name,
            op,
            inputs: SmallVec::from_slice(inputs),
            output: Shape::new(&output),
        });
        Ok(id)
    }

    /// Adds a layer reading the most recently added one.
    pub fn then(&mut self, name: impl Into<CompactString>, op: Op) -> Result<NodeId, LayerError> {
        let last = self.last();
        self.push(name, op, &[last])
    }
}

/// Random graphs for property tests: chains of ops with random parameters, each layer kept
/// only if it is valid for its input (so every generated graph is consistent).
#[cfg(test)]
pub(crate) mod arbitrary {
    use proptest::prelude::*;

    use super::{Conv, Graph, Op, Padding, Pool};

    /// One step of a random chain: an op, and for `add`/`concat` which earlier layer joins.
    fn op() -> impl Strategy<Value = (Op, usize)> {
        let conv = (
            1usize..12,
            1usize..4,
            1usize..3,
            0usize..2,
            1usize..3,
            prop::bool::ANY,
        )
            .prop_map(|(c, k, s, p, d, bias)| {
                Op::conv(
                    Conv::new(c, &[k, k])
                        .stride(s)
                        .pad(p)
                        .dilation(d)
                        .bias(bias),
                )
            });
        let depthwise = (1usize..4).prop_map(|k| Op::conv(Conv::new(0, &[k, k])));
        let tconv = (1usize..8, 1usize..4, 1usize..3).prop_map(|(c, k, s)| {
            Op::conv_transpose(Conv::new(c, &[k, k]).stride(s).output_padding(s - 1))
        });
        let pool = (1usize..3).prop_map(|k| Op::max_pool(Pool::new(&[k, k])));
        let mut avg = Pool::new(&[3, 3]);
        avg.stride = super::Dims::from_slice(&[1, 1]);
        avg.padding = Padding::symmetric(1, 2);
        prop_oneof![
            conv.prop_map(|o| (o, 0)),
            depthwise.prop_map(|o| (o, 1)),
            tconv.prop_map(|o| (o, 0)),
            pool.prop_map(|o| (o, 0)),
            Just((Op::avg_pool(avg), 0)),
            Just((Op::BatchNorm, 0)),
            Just((Op::Relu, 0)),
            Just((Op::LeakyRelu { alpha: 0.3 }, 0)),
            Just((Op::Tanh, 0)),
            Just((Op::Dropout { rate: 0.5 }, 0)),
            Just((Op::Scale { factor: 2.0 }, 0)),
            Just((Op::Shift { offset: -0.5 }, 0)),
            Just((Op::Pow { exponent: 3.0 }, 0)),
            (1usize..6).prop_map(|back| (Op::Add, back)),
            (1usize..6).prop_map(|back| (Op::Mul, back)),
            (1usize..6).prop_map(|back| (Op::Concat, back)),
            Just((
                Op::Upsample {
                    factor: super::Dims::from_slice(&[2, 2])
                },
                0
            )),
        ]
    }

    /// A random valid graph with a 2-d input, ending in global pooling, dense and a loss.
    pub(crate) fn graph() -> impl Strategy<Value = Graph> {
        (1usize..5, 4usize..12, prop::collection::vec(op(), 1..14)).prop_map(|(c, hw, ops)| {
            let mut g = Graph::new("random", vec![c, hw, hw]).expect("valid input");
            for (i, (mut op, back)) in ops.into_iter().enumerate() {
                let last = g.last();
                // Depthwise: as many groups and outputs as input channels.
                if let (Op::Conv(conv), 1) = (&mut op, back) {
                    let ch = g.layers()[last].output.channels();
                    conv.out_channels = ch;
                    conv.groups = ch;
                }
                let inputs = match op {
                    Op::Add | Op::Mul | Op::Concat => vec![last, last.saturating_sub(back)],
                    _ => vec![last],
                };
                // Invalid combinations are simply not added.
                let _ = g.push(format!("l{i}"), op, &inputs);
            }
            g.then("gap", Op::GlobalAvgPool).expect("feature map");
            g.then(
                "fc",
                Op::Dense {
                    out_features: 3,
                    bias: true,
                },
            )
            .expect("dense");
            g.then("loss", Op::SoftmaxCrossEntropy).expect("loss");
            g
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_infers_shapes_and_chains() {
        let mut g = Graph::new("t", vec![3, 8, 8]).unwrap();
        g.then("c", Op::conv(Conv::new(4, &[3, 3]).pad(1))).unwrap();
        let r = g.then("r", Op::Relu).unwrap();
        assert_eq!(g.layers()[r].output.dims(), &[4, 8, 8]);
        assert_eq!(g.layers()[r].inputs.as_slice(), &[1]);
        assert_eq!(g.find("c"), Some(1));
    }

    #[test]
    fn duplicate_names_are_refused() {
        let mut g = Graph::new("t", vec![3, 8, 8]).unwrap();
        g.then("a", Op::Relu).unwrap();
        let err = g.then("a", Op::Relu).unwrap_err();
        assert_eq!(err.layer, "a");
        assert!(err.message.contains("already exists"));
    }

    #[test]
    fn forward_references_are_refused() {
        let mut g = Graph::new("t", vec![3, 8, 8]).unwrap();
        let err = g.push("a", Op::Relu, &[5]).unwrap_err();
        assert!(err.message.contains("earlier layer"));
    }

    #[test]
    fn nothing_may_consume_a_loss() {
        let mut g = Graph::new("t", vec![10]).unwrap();
        g.then("loss", Op::MseLoss).unwrap();
        let err = g.then("after", Op::Relu).unwrap_err();
        assert!(err.message.contains("is a loss"));
    }

    #[test]
    fn counts_beyond_u64_are_refused_not_wrapped() {
        assert!(Graph::new("t", vec![3, 1 << 21, 1 << 21]).is_err());
        let mut g = Graph::new("t", vec![4096, 4096, 4096]).unwrap();
        let err = g
            .then("c", Op::conv(Conv::new(4096, &[3, 3]).pad(1)))
            .unwrap_err();
        assert!(err.message.contains("2^43"), "{}", err.message);
    }

    #[test]
    fn empty_input_dimension_is_refused() {
        assert!(Graph::new("t", vec![3, 0]).is_err());
        assert!(Graph::new("t", vec![]).is_err());
    }
}
