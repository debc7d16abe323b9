//! The layer-graph IR: a directed acyclic graph of layers with concrete per-sample shapes.
//!
//! A [`Graph`] is built layer by layer with [`Graph::push`], which checks each op against
//! its inputs' shapes and infers its output shape, so a graph that exists is always
//! consistent. Node 0 is the input sample; every other node refers only to earlier nodes,
//! so the layer order is a topological order. Batch size and precision are not part of the
//! graph: costs take them as arguments ([`crate::cost`]).

mod op;
mod shape;

pub use op::{Conv, Op, Padding, Pool};
pub use shape::Shape;

/// Index of a layer in its graph.
pub type NodeId = usize;

/// One layer: a named op applied to earlier layers' outputs.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    /// Unique name within the graph.
    pub name: String,
    /// What the layer computes (padding resolved to explicit pairs).
    pub op: Op,
    /// The layers whose outputs this layer reads, in order.
    pub inputs: Vec<NodeId>,
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
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    name: String,
    layers: Vec<Layer>,
}

/// The name of node 0.
pub const INPUT_NAME: &str = "input";

/// Largest tensor of one sample, in elements (2^40): keeps every count exact in `u64`.
pub const MAX_ELEMENTS: u64 = 1 << 40;
/// Largest per-sample multiply-accumulate count of one layer (2^43): with batches up to
/// [`crate::cost::MAX_BATCH`] (2^20) a step's count still fits `u64`.
pub const MAX_MACS: u64 = 1 << 43;

impl Graph {
    /// A graph whose input sample has `input` shape (channels first, no batch).
    pub fn new(name: impl Into<String>, input: Vec<usize>) -> Result<Self, LayerError> {
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
            inputs: vec![],
            output: Shape::new(input),
        };
        Ok(Graph {
            name: name.into(),
            layers: vec![input_layer],
        })
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
        self.layers.iter().position(|l| l.name == name)
    }

    /// Adds a layer reading `inputs`; checks the op against their shapes, resolves its
    /// padding and infers its output shape.
    pub fn push(
        &mut self,
        name: impl Into<String>,
        mut op: Op,
        inputs: &[NodeId],
    ) -> Result<NodeId, LayerError> {
        let name = name.into();
        let fail = |message: String| LayerError {
            layer: name.clone(),
            message,
        };
        if self.layers.iter().any(|l| l.name == name) {
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
                .matrix_size(shapes[0], &output)
                .is_none_or(|(_, m)| m > MAX_MACS)
        {
            return Err(fail(
                "more than 2^43 multiply-accumulates per sample; this is beyond what ridgeline \
                 models"
                    .into(),
            ));
        }
        self.layers.push(Layer {
            name,
            op,
            inputs: inputs.to_vec(),
            output: Shape::new(output),
        });
        Ok(self.last())
    }

    /// Adds a layer reading the most recently added one.
    pub fn then(&mut self, name: impl Into<String>, op: Op) -> Result<NodeId, LayerError> {
        let last = self.last();
        self.push(name, op, &[last])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_infers_shapes_and_chains() {
        let mut g = Graph::new("t", vec![3, 8, 8]).unwrap();
        g.then("c", Op::Conv(Conv::new(4, vec![3, 3]).pad(1)))
            .unwrap();
        let r = g.then("r", Op::Relu).unwrap();
        assert_eq!(g.layers()[r].output.dims(), &[4, 8, 8]);
        assert_eq!(g.layers()[r].inputs, vec![1]);
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
            .then("c", Op::Conv(Conv::new(4096, vec![3, 3]).pad(1)))
            .unwrap_err();
        assert!(err.message.contains("2^43"), "{}", err.message);
    }

    #[test]
    fn empty_input_dimension_is_refused() {
        assert!(Graph::new("t", vec![3, 0]).is_err());
        assert!(Graph::new("t", vec![]).is_err());
    }
}
