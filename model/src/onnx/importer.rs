//! One node at a time: the importer's order of reading (a sequence's nodes, constants,
//! the shape of a layer, a map's channels moved last, a channel shuffle's nodes, then a
//! layer of its own), and the graph's outputs at the end.

use super::constants;
use super::layers;
use super::proto::NodeProto;
use super::sequence;
use super::state::State;
use super::value::{Node, Seq, Value, ints, unique, value_layer};
use crate::error::{Error, Result};
use crate::graph::{Graph, NodeId, Op};

/// Reads node `index` of the graph into `s`.
pub(super) fn node(s: &mut State<'_>, index: usize, node: &NodeProto) -> Result<()> {
    let op = node.op_type.clone().unwrap_or_default();
    // A product of a layer by a constant written constant first (ConvNeXt's layer
    // scale): the layer first, as the product commutes.
    let swapped;
    let node = match node.input.as_slice() {
        [c, x]
            if op == "Mul"
                && matches!(s.values.get(c), Some(Value::Constant { .. }))
                && matches!(s.values.get(x), Some(Value::Layer(_))) =>
        {
            let mut n = node.clone();
            n.input.swap(0, 1);
            swapped = n;
            &swapped
        }
        _ => node,
    };
    let label = node
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| node.output.first().cloned())
        .unwrap_or_else(|| format!("node{index}"));
    let n = Node {
        proto: node,
        op: op.clone(),
        label: label.clone(),
        location: format!("{}, node {index}", s.file),
    };
    let fail = |m: String| n.fail(m);
    let get = |i: usize| n.get(&s.values, i);
    if let Some(d) = node
        .domain
        .as_deref()
        .filter(|d| !d.is_empty() && *d != "ai.onnx")
    {
        return Err(fail(format!(
            "domain `{d}`: a custom operator, not one of ONNX's; export without custom \
             ops, or write the workload as a TOML layer list"
        )));
    }
    // Sequences (transformers): token and position embeddings, and every node that
    // reads a sequence.
    let reads_sequence = node
        .input
        .iter()
        .any(|n| matches!(s.values.get(n), Some(Value::Seq(_))));
    let table_lookup = op == "Gather"
        && matches!(get(0)?, Value::Constant { dims, ints: None, .. } if dims.len() == 2);
    if reads_sequence || table_lookup {
        let mut reader = sequence::Reader {
            g: &mut s.g,
            names: &mut s.names,
            tables: &mut s.tables,
            seq_first: &mut s.seq_first,
            windowed: &mut s.windowed,
            window_out: None,
        };
        let out = reader
            .node(node, &op, &label, &mut s.values)
            .map_err(fail)?;
        // Each output its value; a node of one value (Dropout's mask) binds it once.
        for (o, v) in node.output.iter().zip(&out) {
            s.values.insert(o.clone(), v.clone());
        }
        return Ok(());
    }
    // Constants stay constants (shapes only).
    let all_constant = node
        .input
        .iter()
        .filter(|n| !n.is_empty())
        .all(|n| matches!(s.values.get(n), Some(Value::Constant { .. })));
    if all_constant {
        let Some(out) = constants::fold(&n, &s.values)? else {
            return Err(fail(
                "computes a constant ridgeline cannot follow (only the shapes of weights are \
                 read: Constant, ConstantOfShape, Identity, Cast, Unsqueeze, Squeeze, \
                 Reshape, Flatten)"
                    .into(),
            ));
        };
        for o in &node.output {
            s.values.insert(o.clone(), out.clone());
        }
        return Ok(());
    }
    // The shape of a layer, batch 1 first: a constant.
    if op == "Shape"
        && let Value::Layer(id) = get(0)?
    {
        let mut shape = vec![1i64];
        shape.extend(s.g.layers()[*id].output.dims().iter().map(|&d| d as i64));
        let out = Value::Constant {
            dims: vec![shape.len() as i64],
            ints: Some(shape),
            scalar: None,
            origin: None,
        };
        for o in &node.output {
            s.values.insert(o.clone(), out.clone());
        }
        return Ok(());
    }
    // A feature map with its channels moved last (`[N, H, W, C]`, as ConvNeXt's and
    // Swin's layer norms and linear layers read it): a sequence of its positions.
    if op == "Transpose"
        && let Some(Value::Layer(id)) = node.input.first().and_then(|n| s.values.get(n))
    {
        let r = s.g.layers()[*id].output.rank() as i64 + 1;
        let last: Vec<i64> = std::iter::once(0).chain(2..r).chain([1]).collect();
        if r >= 3 && ints(node, "perm").is_some_and(|p| p == last) {
            let out = Value::Seq(Seq::Tokens(*id));
            for o in &node.output {
                s.values.insert(o.clone(), out.clone());
            }
            return Ok(());
        }
    }
    // A channel shuffle, in its three nodes.
    if let Some(&(id, groups, transposed)) = node.input.first().and_then(|i| s.shuffles.get(i)) {
        return shuffle_step(s, &n, id, groups, transposed);
    }
    let x = get(0)?.clone();
    let Some(xid) = value_layer(&x) else {
        return Err(fail(
            "its first input is a constant, not an activation".into(),
        ));
    };
    let Some((new_op, inputs)) = layers::layer(s, &n, xid)? else {
        return Ok(());
    };
    let name = unique(&s.g, &mut s.names, &label);
    let id =
        s.g.push(name, new_op, &inputs)
            .map_err(|e| fail(e.message))?;
    // Only the first output of a node carries data (Dropout's mask, BatchNormalization's
    // training statistics are not layers), and each gets the layer.
    for o in &node.output {
        s.values.insert(o.clone(), Value::Layer(id));
    }
    Ok(())
}

/// The next node of a channel shuffle of layer `id` in `groups` (the groups' axes already
/// `transposed` or not): the transposition, or the reshape back that makes the layer.
fn shuffle_step(
    s: &mut State<'_>,
    n: &Node<'_>,
    id: NodeId,
    groups: usize,
    transposed: bool,
) -> Result<()> {
    let (node, op, label) = (n.proto, n.op.as_str(), n.label.as_str());
    let fail = |m: String| n.fail(m);
    let get = |i: usize| n.get(&s.values, i);
    let c = s.g.layers()[id].output.channels();
    match op {
        "Transpose" if !transposed => {
            let perm = ints(node, "perm").unwrap_or_default();
            let rank = perm.len();
            let swapped = rank >= 3
                && perm[0] == 0
                && perm[1] == 2
                && perm[2] == 1
                && perm[3..]
                    .iter()
                    .enumerate()
                    .all(|(i, &p)| p == i as i64 + 3);
            if !swapped {
                return Err(fail(format!(
                    "perm {perm:?} of channels in groups: only their transposition \
                     (a channel shuffle) is imported"
                )));
            }
            for o in &node.output {
                s.shuffles.insert(o.clone(), (id, groups, true));
            }
            Ok(())
        }
        "Reshape" if transposed => {
            let back = match get(1)? {
                Value::Constant { ints: Some(s), .. } => s.clone(),
                _ => return Err(fail("its shape is not a constant".into())),
            };
            let mut want = vec![1i64];
            want.extend(s.g.layers()[id].output.dims().iter().map(|&d| d as i64));
            if back.len() != want.len() || back.iter().zip(&want).any(|(&b, &w)| b != w && b != -1)
            {
                return Err(fail(format!(
                    "to {back:?}: a channel shuffle reshapes back to {want:?}"
                )));
            }
            let name = unique(&s.g, &mut s.names, label);
            let new =
                s.g.push(name, Op::ChannelShuffle { groups }, &[id])
                    .map_err(|e| fail(e.message))?;
            for o in &node.output {
                s.values.insert(o.clone(), Value::Layer(new));
            }
            Ok(())
        }
        _ => Err(fail(format!(
            "reads {c} channels viewed as {groups} groups: only a channel shuffle \
                 (their transposition, reshaped back) is imported"
        ))),
    }
}

/// The graph once every node is read: its outputs settled, and a classifier's or language
/// model's logits given the training loss.
pub(super) fn finish(mut s: State<'_>) -> Result<Graph> {
    // Graph outputs waiting on a node after them (a product without bias) are added as
    // they are; a sequence's logits (a linear layer's output) and a classifier's (a dense
    // layer's) get the cross-entropy loss of a training step, as the built-in models have
    // it.
    for o in &s.outputs.clone() {
        let Some(v) = s.values.get(o).cloned() else {
            continue;
        };
        let settled = s
            .reader()
            .settle(&v)
            .map_err(|m| Error::invalid(s.file, format!("graph.output `{o}`"), m))?;
        // A classifier's logits (a dense layer's output, as torchvision's models end)
        // too.
        if let Value::Seq(Seq::Tokens(id)) | Value::Layer(id) = settled
            && matches!(s.g.layers()[id].op, Op::Linear { .. } | Op::Dense { .. })
        {
            let name = unique(&s.g, &mut s.names, &format!("{o}_loss"));
            s.g.push(name, Op::SoftmaxCrossEntropy, &[id])
                .map_err(|e| Error::invalid(s.file, format!("graph.output `{o}`"), e.message))?;
        }
    }
    if s.g.layers().len() <= 1 {
        return Err(Error::invalid(
            s.file,
            "graph.node",
            "no layer to time: the graph holds no operator ridgeline imports (an empty model \
         has no FLOPs and no intensity)",
        ));
    }
    Ok(s.g)
}
