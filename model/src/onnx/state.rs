//! The importer's state: the graph so far, every value by name, and what chains of nodes
//! that are one layer (a transformer's sequences, a channel shuffle) have read so far.

use std::collections::{HashMap, HashSet};

use super::proto::GraphProto;
use super::proto::tensor_shape_proto::dimension::Value as Dim;
use super::proto::type_proto::Value as TypeValue;
use super::sequence;
use super::value::{Table, Value, Values, constant, shifted_products};
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId};

/// What the importer holds between nodes.
pub(super) struct State<'f> {
    /// The file, for errors.
    pub(super) file: &'f str,
    /// The layer graph so far.
    pub(super) g: Graph,
    /// Every value by name: layers' outputs, constants, sequences.
    pub(super) values: Values,
    /// Layer names given so far, for unique names.
    pub(super) names: HashMap<String, usize>,
    /// Token tables (embeddings) read so far.
    pub(super) tables: Vec<Table>,
    /// Values whose sequence is positions first (`[positions, batch, features]`).
    pub(super) seq_first: HashSet<String>,
    /// Values that are windows of a map: the map's windows and window size.
    pub(super) windowed: HashMap<String, (usize, usize)>,
    /// A channel shuffle on its way (`Reshape` to `[1, g, C / g, ...]`, `Transpose` of the
    /// two group axes, `Reshape` back): the layer, its groups, and whether it is transposed.
    pub(super) shuffles: HashMap<String, (NodeId, usize, bool)>,
    /// The graph's outputs.
    pub(super) outputs: Vec<String>,
    /// Per-channel products a constant shift follows (a channel affine's two nodes).
    pub(super) shifted: HashSet<String>,
}

impl<'f> State<'f> {
    /// The state before `graph`'s first node: its initializers as constants and its one
    /// data input as the graph's input layer (of a graph named `name`).
    pub(super) fn new(graph: &GraphProto, file: &'f str, name: &str) -> Result<State<'f>> {
        let mut values: Values = HashMap::new();
        for t in &graph.initializer {
            values.insert(t.name.clone().unwrap_or_default(), constant(t));
        }
        let data: Vec<_> = graph
            .input
            .iter()
            .filter(|i| !values.contains_key(i.name.as_deref().unwrap_or_default()))
            .collect();
        let [input] = data.as_slice() else {
            let names: Vec<&str> = data
                .iter()
                .map(|i| i.name.as_deref().unwrap_or("?"))
                .collect();
            return Err(Error::invalid(
                file,
                "graph.input",
                format!(
                    "ridgeline takes one input sample, and the graph has {} data inputs ({})",
                    names.len(),
                    names.join(", ")
                ),
            ));
        };
        let input_name = input.name.clone().unwrap_or_default();
        let dims = match input.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(TypeValue::TensorType(t)) => t
                .shape
                .as_ref()
                .map(|s| s.dim.iter().map(|d| d.value.clone()).collect::<Vec<_>>())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        // The first dimension is the batch (named or not); the others must be numbers.
        let sample: Option<Vec<usize>> = dims
            .iter()
            .skip(1)
            .map(|d| match d {
                Some(Dim::DimValue(v)) => usize::try_from(*v).ok().filter(|v| *v > 0),
                _ => None,
            })
            .collect();
        let sample = match sample {
            Some(s) if !s.is_empty() => s,
            _ => {
                return Err(Error::invalid(
                    file,
                    format!("graph.input `{input_name}`"),
                    "its shape must be [batch, ...] with every dimension after the batch a number",
                ));
            }
        };
        let g = Graph::with_capacity(name, sample, graph.node.len())
            .map_err(|e| Error::invalid(file, format!("graph.input `{input_name}`"), e.message))?;
        values.insert(input_name, Value::Layer(0));
        let outputs: Vec<String> = graph.output.iter().filter_map(|o| o.name.clone()).collect();
        let names: HashMap<String, usize> = HashMap::new();
        let tables: Vec<Table> = Vec::new();
        let seq_first: HashSet<String> = HashSet::new();
        let windowed: HashMap<String, (usize, usize)> = HashMap::new();
        // A channel shuffle on its way (`Reshape` to `[1, g, C / g, ...]`, `Transpose` of the
        // two group axes, `Reshape` back): the layer, its groups, and whether it is transposed.
        let shuffles: HashMap<String, (NodeId, usize, bool)> = HashMap::new();

        Ok(State {
            file,
            g,
            values,
            names,
            tables,
            seq_first,
            windowed,
            shuffles,
            outputs,
            shifted: shifted_products(graph),
        })
    }

    /// The sequence reader over this state.
    pub(super) fn reader(&mut self) -> sequence::Reader<'_> {
        sequence::Reader {
            g: &mut self.g,
            names: &mut self.names,
            tables: &mut self.tables,
            seq_first: &mut self.seq_first,
            windowed: &mut self.windowed,
            window_out: None,
        }
    }
}
