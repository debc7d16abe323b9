//! A step model built under a software stack ([`StepModel::with_stack`]): the stack's
//! fusion groups merged into one entry each, each entry's matrix precision and host times,
//! and what each rule changed ([`StackEffects`]).

use serde::Serialize;

use super::StepModel;
use crate::cost::{self, GraphCost, param_tensors, requires_grad};
use crate::graph::{Graph, NodeId, Op};
use crate::kernels::{Kernel, step_kernels};
use crate::memory::{Footprint, Optimizer};
use crate::precision::Precision;
use crate::stack::{Dispatch, FusionRule, Group, Stack, fusion};

/// What a stack's rules changed in a step, for a person to read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackEffects {
    /// The stack's name.
    pub stack: String,
    /// The file it came from.
    pub file: String,
    /// How its host issues kernels.
    pub dispatch: Dispatch,
    /// Each fusion rule that took something.
    pub fusion: Vec<RuleEffect>,
    /// Layers whose matrix kernels run in TF32 under FP32 training (where the device has
    /// TF32 tensor cores).
    pub tf32_layers: usize,
}

/// What one fusion rule changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuleEffect {
    /// The rule.
    pub rule: FusionRule,
    /// Groups (or attention layers) it fused.
    pub groups: usize,
    /// Kernel launches a step no longer makes.
    pub launches_saved: usize,
    /// HBM bytes a step no longer moves, per sample (forward and backward).
    pub bytes_saved_per_sample: f64,
}

/// One entry of the step model under construction: a layer, or a fused group.
struct Entry<'g> {
    members: Vec<NodeId>,
    group: Option<&'g Group>,
}

impl StepModel {
    /// The model of `graph` at `precision` under `stack`, with `optimizer` for the
    /// footprint: the stack's attention rule applied to the graph, its fusion groups as one
    /// entry each (the bytes they no longer move taken off, their kernels merged), each
    /// entry's matrix precision and host times.
    pub fn with_stack(
        graph: &Graph,
        precision: Precision,
        optimizer: Optimizer,
        stack: &Stack,
    ) -> StepModel {
        let fused = stack
            .fuses(FusionRule::Attention)
            .then(|| fusion::fuse_attention(graph))
            .flatten();
        let g = fused.as_ref().unwrap_or(graph);
        let one = cost::cost(g, 1, precision);
        let two = cost::cost(g, 2, precision);
        let mut m = Self::from_costs(g, &one, &two, optimizer, stack);
        if let Some(f) = &fused {
            m.effects
                .fusion
                .insert(0, attention_effect(graph, f, precision));
        }
        m
    }

    fn from_costs(
        graph: &Graph,
        one: &GraphCost<'_>,
        two: &GraphCost<'_>,
        optimizer: Optimizer,
        stack: &Stack,
    ) -> StepModel {
        let precision = one.precision;
        let mut m = StepModel {
            workload: graph.name().to_owned(),
            precision,
            matrix: Vec::new(),
            names: Vec::new(),
            kinds: Vec::new(),
            heads: Vec::new(),
            math: Vec::new(),
            layer_params: Vec::new(),
            flops_fwd: Vec::new(),
            flops_bwd: Vec::new(),
            act_fwd: Vec::new(),
            weights_fwd: Vec::new(),
            act_bwd: Vec::new(),
            weights_bwd: Vec::new(),
            kernels: Vec::new(),
            launches: Vec::new(),
            host_fwd: Vec::new(),
            host_bwd: Vec::new(),
            host_step: 0.0,
            host_update: 0.0,
            kernel_gap: stack.kernel_gap.value.value(),
            update_bytes: 0.0,
            flops_per_sample: one.flops_train.value(),
            hbm_per_sample: two.hbm_bytes_train.value() - one.hbm_bytes_train.value(),
            hbm_fixed: 2.0 * one.hbm_bytes_train.value() - two.hbm_bytes_train.value(),
            params: one.params,
            input_elements: graph.input_shape().elements(),
            footprint: Footprint::from_cost(graph, one, optimizer),
            effects: StackEffects {
                stack: stack.name.clone(),
                file: stack.file.clone(),
                dispatch: stack.host.dispatch.value,
                fusion: Vec::new(),
                tf32_layers: 0,
            },
        };
        let fp32 = 4.0 * one.params as f64;
        let compute_copy = if precision.compute_bytes() < 4 {
            one.params as f64 * precision.compute_bytes() as f64
        } else {
            0.0
        };
        m.update_bytes = 3.0 * fp32 + compute_copy + 2.0 * m.footprint.optimizer_state.value();
        let (k1, k2) = (step_kernels(graph, one), step_kernels(graph, two));
        let needs = requires_grad(graph);
        let layers = graph.layers();
        let groups = fusion::groups(graph, &stack.fusion.value);
        let mut head_of: Vec<Option<usize>> = vec![None; layers.len()];
        for (gi, g) in groups.iter().enumerate() {
            for &i in &g.members {
                head_of[i] = Some(gi);
            }
        }
        // A group runs where its last member ran.
        let entries = (0..layers.len()).filter_map(|i| match head_of[i] {
            Some(gi) if groups[gi].members.last() == Some(&i) => Some(Entry {
                members: groups[gi].members.clone(),
                group: Some(&groups[gi]),
            }),
            Some(_) => None,
            None => Some(Entry {
                members: vec![i],
                group: None,
            }),
        });
        let elem = precision.compute_bytes() as f64;
        let host = &stack.host;
        let mut tensors = 0u64;
        for e in entries {
            let (a, b) = (&one.layers, &two.layers);
            let sum = |f: &dyn Fn(usize) -> f64| e.members.iter().map(|&i| f(i)).sum::<f64>();
            let work = sum(&|i| a[i].flops_fwd.value() + a[i].flops_bwd.value());
            let bytes = sum(&|i| a[i].hbm_bytes_fwd.value() + a[i].hbm_bytes_bwd.value());
            if work == 0.0 && bytes == 0.0 {
                continue;
            }
            let head = e.members[0];
            let (saved_fwd, saved_bwd) = e.group.map_or((0.0, 0.0), |g| {
                (g.saved_forward * elem, g.saved_backward * elem)
            });
            // Bytes are affine in the batch: a b + w, from b = 1 and b = 2.
            let (f1, f2) = (
                sum(&|i| a[i].hbm_bytes_fwd.value()),
                sum(&|i| b[i].hbm_bytes_fwd.value()),
            );
            let (g1, g2) = (
                sum(&|i| a[i].hbm_bytes_bwd.value()),
                sum(&|i| b[i].hbm_bytes_bwd.value()),
            );
            let (ks1, launches) = merged(&e, &k1, saved_fwd, saved_bwd, 1.0);
            let (ks2, _) = merged(&e, &k2, saved_fwd, saved_bwd, 2.0);
            if let Some(g) = e.group {
                let unfused: usize = e.members.iter().map(|&i| k1[i].len()).sum();
                let fused = (launches[0] + launches[1]) as usize;
                effect(
                    &mut m.effects.fusion,
                    g.rule,
                    unfused.saturating_sub(fused),
                    saved_fwd + saved_bwd,
                );
            }
            let head_op = &layers[head].op;
            let math = stack.precision.matrix_precision(head_op, precision);
            let kind = head_op.kind();
            let backward = e.members.iter().any(|&i| needs[i]);
            // The host's time of each pass: its op's (a per-op dispatch's, or a kind a
            // per-kernel dispatch lists), else its kernels'.
            let kernel = host.kernel.as_ref().map_or(0.0, |k| k.value.value());
            let pass = |table: &Option<crate::stack::OpTimes>, launches: u32, runs: bool| {
                if !runs {
                    return 0.0;
                }
                match (host.dispatch.value, table.as_ref().and_then(|t| t.of(kind))) {
                    (Dispatch::Graph, _) => 0.0,
                    (_, Some(t)) => t,
                    (_, None) => kernel * f64::from(launches),
                }
            };
            let (hf, hb) = (
                pass(&host.forward, launches[0], true),
                pass(&host.backward, launches[1], backward),
            );
            let own_tensors: u64 = e
                .members
                .iter()
                .map(|&i| param_tensors(&layers[i].op))
                .sum();
            tensors += own_tensors;
            m.matrix.push(a[head].matrix);
            m.names.push(
                e.members
                    .iter()
                    .map(|&i| layers[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join("+"),
            );
            m.kinds.push(kind);
            m.heads.push(head);
            m.math.push(math);
            m.layer_params
                .push(e.members.iter().map(|&i| a[i].params).sum());
            m.kernels.push([ks1, ks2]);
            m.launches.push(launches);
            m.host_fwd.push(hf);
            m.host_bwd
                .push(hb + own_tensors as f64 * host.parameter.value.value());
            m.flops_fwd.push(sum(&|i| a[i].flops_fwd.value()));
            m.flops_bwd.push(sum(&|i| a[i].flops_bwd.value()));
            m.act_fwd.push((f2 - f1 - saved_fwd).max(0.0));
            m.weights_fwd.push(2.0 * f1 - f2);
            m.act_bwd.push((g2 - g1 - saved_bwd).max(0.0));
            m.weights_bwd.push(2.0 * g1 - g2);
        }
        m.effects.tf32_layers = m.math.iter().filter(|&&p| p != precision).count();
        m.host_update = tensors as f64 * host.optimizer_tensor.value.value();
        m.host_step = host.graph.as_ref().map_or(0.0, |g| g.value.value());
        m
    }
}

/// Adds `launches` and `bytes` (per sample) saved by one group of `rule`.
fn effect(effects: &mut Vec<RuleEffect>, rule: FusionRule, launches: usize, bytes: f64) {
    match effects.iter_mut().find(|e| e.rule == rule) {
        Some(e) => {
            e.groups += 1;
            e.launches_saved += launches;
            e.bytes_saved_per_sample += bytes;
        }
        None => effects.push(RuleEffect {
            rule,
            groups: 1,
            launches_saved: launches,
            bytes_saved_per_sample: bytes,
        }),
    }
}

/// What fusing attention changed: the unfused graph's attention layers against the fused
/// one's (kernels at batch 1, bytes per sample).
fn attention_effect(graph: &Graph, fused: &Graph, precision: Precision) -> RuleEffect {
    let attention = |g: &Graph| {
        let c = cost::cost(g, 1, precision);
        let ks = step_kernels(g, &c);
        g.layers()
            .iter()
            .zip(&c.layers)
            .zip(ks)
            .filter(|((l, _), _)| matches!(l.op, Op::Attention(_)))
            .fold((0usize, 0usize, 0.0f64), |(n, k, b), ((_, lc), ks)| {
                let bytes = lc.hbm_bytes_fwd.value() + lc.hbm_bytes_bwd.value();
                (n + 1, k + ks.len(), b + bytes)
            })
    };
    let (n, k0, b0) = attention(graph);
    let (_, k1, b1) = attention(fused);
    // Weights are read once a pass at any batch: per sample, the difference at batch 1
    // counts them once, as a step at batch 1 moves them.
    RuleEffect {
        rule: FusionRule::Attention,
        groups: n,
        launches_saved: k0.saturating_sub(k1),
        bytes_saved_per_sample: (b0 - b1).max(0.0),
    }
}

/// The kernels of entry `e` at batch `batch` (`ks`: every layer's kernels at that batch),
/// with `saved_fwd` and `saved_bwd` bytes per sample no longer moved, and the launches they
/// make forward and backward: a layer's own; for a group, the vector members' kernels of a
/// pass as one launch (none forward after a matrix head: its epilogue), each member's
/// kernel kept to be timed by its own class with its bytes cut by the pass's share saved.
fn merged(
    e: &Entry<'_>,
    ks: &[Vec<Kernel>],
    saved_fwd: f64,
    saved_bwd: f64,
    batch: f64,
) -> (Vec<Kernel>, [u32; 2]) {
    let head = e.members[0];
    let count = |k: &[Kernel], backward: bool| {
        k.iter()
            .filter(|k| k.pass.is_backward() == backward)
            .count() as u32
    };
    if e.group.is_none() {
        let k = ks[head].clone();
        let launches = [count(&k, false), count(&k, true)];
        return (k, launches);
    }
    let matrix_head = ks[head].first().is_some_and(|k| k.class.is_matrix());
    let mut out = if matrix_head {
        ks[head].clone()
    } else {
        Vec::new()
    };
    let mut launches = [count(&out, false), count(&out, true)];
    let vector: Vec<&Kernel> = e
        .members
        .iter()
        .skip(usize::from(matrix_head))
        .flat_map(|&i| &ks[i])
        .collect();
    for (p, saved) in [(0, saved_fwd), (1, saved_bwd)] {
        let backward = p == 1;
        if !backward && matrix_head {
            continue;
        }
        let of_pass: Vec<&&Kernel> = vector
            .iter()
            .filter(|k| k.pass.is_backward() == backward)
            .collect();
        let bytes: f64 = of_pass.iter().map(|k| k.x[2]).sum();
        if of_pass.is_empty() || bytes <= 0.0 {
            continue;
        }
        let keep = ((bytes - saved * batch) / bytes).clamp(0.0, 1.0);
        for k in of_pass {
            let mut k = **k;
            k.x[2] *= keep;
            out.push(k);
        }
        launches[p] += 1;
    }
    (out, launches)
}
