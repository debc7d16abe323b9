//! Fusion: the rewrites a stack makes of the layer graph before it is costed
//! (docs/ARCHITECTURE.md "Software stacks").
//!
//! A rule fuses a chain of layers, each reading the one before, into one kernel per pass
//! (a matrix layer's epilogue into its own kernels). Inside a group an intermediate tensor
//! is no longer read back from HBM; it is not written either where nothing outside the
//! group reads it and the next member does not keep it for its backward pass
//! ([`crate::cost::keeps`]). In backward, the gradient of an intermediate between two
//! members that run backward kernels is not read back; it is not written either where the
//! intermediate had one reader. A residual `add` hands its gradient on without a kernel, and
//! that gradient is still written for the other branch. Between a matrix layer and its
//! epilogue nothing is saved in backward: the products read the gradient from HBM.
//!
//! The patterns are those of the libraries that run them: cuDNN's and MXNet's batch norm
//! with ReLU and with the residual add (`--fuse-bn-relu`, `--fuse-bn-add-relu` of NVIDIA's
//! ResNet-50 submissions), cuBLASLt's and cuDNN's bias-activation epilogues, Apex's and
//! Transformer Engine's dropout-residual-layer-norm, and TorchInductor's fusion of any chain
//! of element-wise and normalisation ops.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::graph::{Graph, Layer, NodeId, Op};

/// A fusion rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FusionRule {
    /// A normalisation followed by its activation (batch norm + ReLU).
    NormActivation,
    /// A normalisation, the residual add and the activation (batch norm + add + ReLU).
    NormAddActivation,
    /// A convolution's or linear layer's activation in its kernel's epilogue (bias and
    /// activation: the bias is part of the layer here).
    MatrixEpilogue,
    /// Dropout, the residual add and the normalisation after it.
    DropoutAddNorm,
    /// Any chain of element-wise and normalisation ops (a compiler's pointwise fusion).
    Elementwise,
    /// Attention as one fused (flash) kernel each way, where the workload runs it unfused.
    Attention,
}

impl FusionRule {
    /// Every rule, in the order they are listed.
    pub const ALL: [FusionRule; 6] = [
        FusionRule::NormActivation,
        FusionRule::NormAddActivation,
        FusionRule::MatrixEpilogue,
        FusionRule::DropoutAddNorm,
        FusionRule::Elementwise,
        FusionRule::Attention,
    ];

    /// Its name in stack files and outputs.
    pub const fn name(self) -> &'static str {
        match self {
            FusionRule::NormActivation => "norm-activation",
            FusionRule::NormAddActivation => "norm-add-activation",
            FusionRule::MatrixEpilogue => "matrix-epilogue",
            FusionRule::DropoutAddNorm => "dropout-add-norm",
            FusionRule::Elementwise => "elementwise",
            FusionRule::Attention => "attention",
        }
    }

    /// The chain of roles the rule fuses; `None` for the rules that are no chain (pointwise
    /// chains of any length, attention).
    fn pattern(self) -> Option<&'static [Role]> {
        match self {
            FusionRule::NormActivation => Some(&[Role::Norm, Role::Activation]),
            FusionRule::NormAddActivation => Some(&[Role::Norm, Role::Add, Role::Activation]),
            FusionRule::MatrixEpilogue => Some(&[Role::Matrix, Role::Activation]),
            FusionRule::DropoutAddNorm => Some(&[Role::Dropout, Role::Add, Role::Norm]),
            FusionRule::Elementwise | FusionRule::Attention => None,
        }
    }
}

impl fmt::Display for FusionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FusionRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FusionRule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = FusionRule::ALL.iter().map(|r| r.name()).collect();
                format!("unknown fusion rule `{s}`; valid: {}", valid.join(", "))
            })
    }
}

/// What a layer is to the fusion patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Norm,
    Activation,
    Add,
    Dropout,
    Matrix,
    /// Another element-wise op (scale, shift, mul, pow, softmax, a rotary embedding).
    Pointwise,
    /// Anything no rule fuses (pooling, losses, concatenation, attention, the input).
    Other,
}

fn role(op: &Op) -> Role {
    match op {
        Op::BatchNorm | Op::ChannelAffine | Op::ChannelScale | Op::LayerNorm | Op::RmsNorm => {
            Role::Norm
        }
        Op::Relu
        | Op::LeakyRelu { .. }
        | Op::Tanh
        | Op::Gelu
        | Op::Silu
        | Op::Sigmoid
        | Op::Clip { .. }
        | Op::HardSwish
        | Op::HardSigmoid { .. } => Role::Activation,
        Op::Add => Role::Add,
        Op::Dropout { .. } => Role::Dropout,
        Op::Conv(_) | Op::ConvTranspose(_) | Op::Dense { .. } | Op::Linear { .. } => Role::Matrix,
        Op::Scale { .. }
        | Op::Shift { .. }
        | Op::Mul
        | Op::Pow { .. }
        | Op::Softmax
        | Op::PositionEmbedding
        | Op::Rotary { .. } => Role::Pointwise,
        _ => Role::Other,
    }
}

/// Whether a chain of `roles` is a prefix of a pattern of `rules` (`complete`: the whole
/// pattern).
fn matches(rules: &[FusionRule], roles: &[Role], complete: bool) -> bool {
    matching(rules, roles, complete).is_some()
}

/// The first of `rules` whose pattern `roles` begins (`complete`: is).
fn matching(rules: &[FusionRule], roles: &[Role], complete: bool) -> Option<FusionRule> {
    rules.iter().copied().find(|r| match r.pattern() {
        Some(p) if complete => p == roles,
        Some(p) => p.starts_with(roles),
        None if *r == FusionRule::Elementwise => {
            roles.iter().all(|x| {
                matches!(
                    x,
                    Role::Norm | Role::Activation | Role::Add | Role::Dropout | Role::Pointwise
                )
            }) && (!complete || roles.len() >= 2)
        }
        None => false,
    })
}

/// A group of fused layers: a chain, each member reading the one before.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The rule that fused it.
    pub rule: FusionRule,
    /// The members in order; the first is the head.
    pub members: Vec<NodeId>,
    /// Elements per sample no longer read or written by the group's forward pass.
    pub saved_forward: f64,
    /// Elements per sample of gradients no longer read or written by its backward pass.
    pub saved_backward: f64,
}

/// The chains `rules` fuse in `graph`, in topological order of their heads; each layer is
/// in at most one group, and a group runs where its last member ran (no layer in between
/// reads a member). Attention is not a chain ([`fuse_attention`]).
pub fn groups(graph: &Graph, rules: &[FusionRule]) -> Vec<Group> {
    let layers = graph.layers();
    let mut readers = vec![0usize; layers.len()];
    for l in layers {
        for &i in &l.inputs {
            readers[i] += 1;
        }
    }
    // Each layer's sole reader, where it has exactly one.
    let mut next_of = vec![None; layers.len()];
    for (j, l) in layers.iter().enumerate() {
        for &i in &l.inputs {
            if readers[i] == 1 {
                next_of[i] = Some(j);
            }
        }
    }
    let mut taken = vec![false; layers.len()];
    let mut out = Vec::new();
    for head in 1..layers.len() {
        if taken[head] || !matches(rules, &[role(&layers[head].op)], false) {
            continue;
        }
        let mut chain = vec![head];
        let mut roles = vec![role(&layers[head].op)];
        loop {
            let last = chain[chain.len() - 1];
            // The next member: the sole reader of the last one, or (for a residual stream
            // read by more than one layer) any later layer of the same shape that reads it
            // and extends a pattern, the first such.
            let candidate = next_of[last].or_else(|| {
                (last + 1..layers.len()).find(|&j| {
                    layers[j].inputs.contains(&last)
                        && !taken[j]
                        && matches(rules, &[&roles[..], &[role(&layers[j].op)]].concat(), false)
                })
            });
            let Some(c) = candidate else { break };
            let r = role(&layers[c].op);
            let same_shape = layers[c].output.elements() == layers[last].output.elements();
            // The group runs where its last member ran: no layer between may read a member
            // (it would need the member's output before the group writes it).
            let reads_member = |j: usize| layers[j].inputs.iter().any(|i| chain.contains(i));
            let in_order = !(last + 1..c).any(reads_member);
            roles.push(r);
            if taken[c] || !same_shape || !in_order || !matches(rules, &roles, false) {
                roles.pop();
                break;
            }
            chain.push(c);
        }
        // Back to the longest complete pattern.
        while chain.len() > 1 && !matches(rules, &roles, true) {
            chain.pop();
            roles.pop();
        }
        let Some(rule) = matching(rules, &roles, true).filter(|_| chain.len() >= 2) else {
            continue;
        };
        for &m in &chain {
            taken[m] = true;
        }
        out.push(group(graph, &readers, rule, chain));
    }
    out
}

/// The group of `chain` with the elements it saves (the module's rules).
fn group(graph: &Graph, readers: &[usize], rule: FusionRule, chain: Vec<NodeId>) -> Group {
    let layers = graph.layers();
    let elements = |i: NodeId| layers[i].output.elements() as f64;
    let runs_backward = |l: &Layer| !matches!(l.op, Op::Add);
    let mut saved_forward = 0.0;
    let mut saved_backward = 0.0;
    for w in chain.windows(2) {
        let (producer, consumer) = (&layers[w[0]], &layers[w[1]]);
        let y = elements(w[0]);
        let sole = readers[w[0]] == 1;
        // Forward: the read always; the write where no one else reads it and the consumer
        // does not keep it.
        saved_forward += y;
        if sole && !crate::cost::keeps(&consumer.op).input {
            saved_forward += y;
        }
        // Backward: between vector members that both run a backward kernel (an add hands
        // its gradient on: look through it to the member after).
        if role(&producer.op) == Role::Matrix {
            continue;
        }
        let reader_runs = runs_backward(producer);
        let writer = chain
            .iter()
            .skip_while(|&&m| m != w[1])
            .find(|&&m| runs_backward(&layers[m]));
        if reader_runs && writer.is_some() {
            saved_backward += y;
            if sole && runs_backward(consumer) {
                saved_backward += y;
            }
        }
    }
    Group {
        rule,
        members: chain,
        saved_forward,
        saved_backward,
    }
}

/// The tensors a fused group no longer keeps for backward: the outputs of its element-wise
/// members before the last that nothing outside the group reads. The fused backward kernel
/// recomputes them from the group's inputs, as TorchInductor's partitioner recomputes
/// pointwise ops and Megatron's fused bias-GELU keeps only its input; the outputs of matrix
/// and normalisation members, and the group's own output, stay kept.
pub fn recomputed(graph: &Graph, groups: &[Group]) -> Vec<NodeId> {
    let layers = graph.layers();
    let mut out = Vec::new();
    for g in groups {
        let (_, inner) = g.members.split_last().unwrap_or((&0, &[]));
        for &m in inner {
            let elementwise =
                !matches!(role(&layers[m].op), Role::Matrix | Role::Norm | Role::Other);
            let inside = layers
                .iter()
                .enumerate()
                .filter(|(_, l)| l.inputs.contains(&m))
                .all(|(j, _)| g.members.contains(&j));
            if elementwise && inside {
                out.push(m);
            }
        }
    }
    out
}

/// The activations of gated products (SwiGLU's `act(gate) * up`) a stack that fuses
/// element-wise chains no longer keeps: an activation whose only reader is a product. The
/// fused kernel keeps the activation's input and recomputes its output in backward, as
/// Megatron's fused bias-SwiGLU and TorchInductor's partitioner do; eager frameworks keep it.
pub fn gated(graph: &Graph, rules: &[FusionRule]) -> Vec<NodeId> {
    if !rules.contains(&FusionRule::Elementwise) {
        return Vec::new();
    }
    let layers = graph.layers();
    let mut readers: Vec<Vec<NodeId>> = vec![Vec::new(); layers.len()];
    for (j, l) in layers.iter().enumerate() {
        for &i in &l.inputs {
            readers[i].push(j);
        }
    }
    (0..layers.len())
        .filter(|&i| {
            role(&layers[i].op) == Role::Activation
                && matches!(readers[i].as_slice(), [m] if matches!(layers[*m].op, Op::Mul))
        })
        .collect()
}

/// `graph` with every unfused attention layer fused (flash attention); `None` where it has
/// none.
pub fn fuse_attention(graph: &Graph) -> Option<Graph> {
    let unfused = |l: &Layer| matches!(&l.op, Op::Attention(a) if !a.fused);
    if !graph.layers().iter().any(unfused) {
        return None;
    }
    let input = graph.input_shape().dims().to_vec();
    let mut g = Graph::with_capacity(graph.name(), input, graph.layers().len()).ok()?;
    for l in &graph.layers()[1..] {
        let mut op = l.op.clone();
        if let Op::Attention(a) = &mut op {
            a.fused = true;
        }
        g.push(l.name.clone(), op, &l.inputs).ok()?;
    }
    Some(g)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workloads::{self, BuildOptions};

    fn resnet() -> Graph {
        workloads::build("resnet50", &BuildOptions::default()).unwrap()
    }

    fn names(g: &Graph, group: &Group) -> Vec<String> {
        group
            .members
            .iter()
            .map(|&i| g.layers()[i].name.to_string())
            .collect()
    }

    #[test]
    fn batch_norm_relu_and_the_residual_add_fuse_as_the_submissions_do() {
        let g = resnet();
        let groups = groups(
            &g,
            &[FusionRule::NormActivation, FusionRule::NormAddActivation],
        );
        let find = |head: &str| {
            groups
                .iter()
                .find(|x| g.layers()[x.members[0]].name == head)
                .map(|x| names(&g, x))
        };
        assert_eq!(find("bn1").unwrap(), ["bn1", "relu"]);
        assert_eq!(
            find("layer1.0.bn3").unwrap(),
            ["layer1.0.bn3", "layer1.0.add", "layer1.0.relu3"]
        );
        // The downsample's batch norm feeds the add another fused group took.
        assert!(find("layer1.0.downsample.1").is_none());
        // 16 blocks: 16 bn-add-relu groups and 2 x 16 + 1 bn-relu groups.
        assert_eq!(groups.len(), 16 + 33);
        // bn1 -> relu: relu does not keep its input, so the write and read of bn1's
        // output go forward; backward, relu's gradient write and bn's read of it.
        let bn1 = groups.iter().find(|x| x.members.len() == 2).unwrap();
        let y = g.layers()[bn1.members[0]].output.elements() as f64;
        assert_eq!(bn1.saved_forward, 2.0 * y);
        assert_eq!(bn1.saved_backward, 2.0 * y);
        // bn3 -> add -> relu: add's output has one reader (relu) and the add keeps nothing;
        // backward the add hands its gradient on, still written for the shortcut.
        let block = groups.iter().find(|x| x.members.len() == 3).unwrap();
        let y = g.layers()[block.members[0]].output.elements() as f64;
        assert_eq!(block.saved_forward, 4.0 * y);
        assert_eq!(block.saved_backward, y);
    }

    #[test]
    fn no_rules_fuse_nothing_and_a_rule_that_does_not_match_leaves_the_graph() {
        let g = resnet();
        assert!(groups(&g, &[]).is_empty());
        assert!(groups(&g, &[FusionRule::DropoutAddNorm]).is_empty());
        assert!(fuse_attention(&g).is_none());
    }

    #[test]
    fn epilogues_take_the_activation_after_a_matrix_layer() {
        let g = resnet();
        // ResNet's convolutions feed batch norm, not an activation.
        assert!(groups(&g, &[FusionRule::MatrixEpilogue]).is_empty());
        let mut g = Graph::new("mlp", vec![64]).unwrap();
        g.then(
            "fc1",
            Op::Dense {
                out_features: 128,
                bias: true,
            },
        )
        .unwrap();
        g.then("act", Op::Relu).unwrap();
        let gs = groups(&g, &[FusionRule::MatrixEpilogue]);
        assert_eq!(gs.len(), 1);
        assert_eq!(names(&g, &gs[0]), ["fc1", "act"]);
        // Forward: the dense output is neither written nor read; backward: nothing.
        assert_eq!(gs[0].saved_forward, 256.0);
        assert_eq!(gs[0].saved_backward, 0.0);
    }

    #[test]
    fn pointwise_fusion_takes_whole_chains() {
        let g = resnet();
        let gs = groups(&g, &[FusionRule::Elementwise]);
        let names: Vec<Vec<String>> = gs.iter().map(|x| names(&g, x)).collect();
        assert!(names.contains(&vec!["bn1".to_owned(), "relu".to_owned()]));
        assert!(names.contains(&vec![
            "layer1.0.bn3".to_owned(),
            "layer1.0.add".to_owned(),
            "layer1.0.relu3".to_owned()
        ]));
    }

    #[test]
    fn unfused_attention_becomes_fused() {
        let g = workloads::build(
            "gpt2",
            &BuildOptions {
                input_size: Some(vec![64]),
                width: 1.0,
            },
        )
        .unwrap();
        let fused = fuse_attention(&g).unwrap();
        assert_eq!(fused.layers().len(), g.layers().len());
        assert!(
            fused
                .layers()
                .iter()
                .all(|l| !matches!(&l.op, Op::Attention(a) if !a.fused))
        );
        assert!(fuse_attention(&fused).is_none());
    }

    #[test]
    fn rules_parse_by_name_and_refuse_others_listing_the_valid() {
        for r in FusionRule::ALL {
            assert_eq!(r.name().parse::<FusionRule>().unwrap(), r);
        }
        let e = "bn-relu".parse::<FusionRule>().unwrap_err();
        assert!(e.contains("norm-activation"), "{e}");
    }
}
