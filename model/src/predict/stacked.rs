//! A step model built under a software stack ([`StepModel::with_stack`]): the stack's
//! fusion groups merged into one entry each, each entry's matrix precision and host times,
//! and what each rule changed ([`StackEffects`]).

use serde::Serialize;

use super::StepModel;
use crate::cost::{self, GraphCost, param_tensors, requires_grad};
use crate::graph::{Graph, NodeId, Op};
use crate::kernels::{Kernel, KernelPass, step_kernels, vector_kernel};
use crate::memory::{Footprint, Optimizer, StackMemory, stack_memory};
use crate::precision::Precision;
use crate::stack::{Dispatch, FusionRule, Group, Recompute, Stack, fusion};
use crate::workloads::transformer::block_of;

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
    /// Linear layers multiplied in FP8 under FP8 training.
    pub fp8_layers: usize,
    /// HBM bytes per sample FP8's casts add, forward and backward: Transformer Engine's
    /// casts of each FP8 layer's input and output gradient.
    pub fp8_cast_bytes_per_sample: f64,
    /// What the backward pass recomputes.
    pub recompute: Recompute,
    /// FLOPs per sample the recomputation adds to a step.
    pub recomputed_flops_per_sample: f64,
    /// What the stack changed in the activations kept, one device without a split.
    pub memory: StackMemory,
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
        let fused = stack.fused_attention(graph);
        let g = fused.as_ref().unwrap_or(graph);
        let one = cost::cost(g, 1, precision);
        let two = cost::cost(g, 2, precision);
        let mut m = Self::from_costs(g, &one, &two, optimizer, stack);
        if let Some(f) = &fused {
            m.effects
                .fusion
                .insert(0, attention_effect(graph, f, precision));
            m.effects.memory.set_attention_saved(graph, &one);
        }
        m
    }

    /// The model of no entries yet: the workload's totals, its footprint under the stack's
    /// memory rules, the stack's constants and bands.
    fn empty(
        graph: &Graph,
        one: &GraphCost<'_>,
        two: &GraphCost<'_>,
        optimizer: Optimizer,
        stack: &Stack,
    ) -> StepModel {
        let precision = one.precision;
        let memory = stack_memory(graph, one, stack, None);
        StepModel {
            workload: graph.name().to_owned(),
            precision,
            matrix: Vec::new(),
            names: Vec::new(),
            kinds: Vec::new(),
            heads: Vec::new(),
            math: Vec::new(),
            recompute: Vec::new(),
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
            cpu_kernels: stack.host.cpu_kernels.as_ref().map(|s| s.value),
            update_bytes: 0.0,
            flops_per_sample: one.flops_train.value(),
            hbm_per_sample: two.hbm_bytes_train.value() - one.hbm_bytes_train.value(),
            hbm_fixed: 2.0 * one.hbm_bytes_train.value() - two.hbm_bytes_train.value(),
            params: one.params,
            input_elements: graph.input_shape().elements(),
            footprint: Footprint::under(graph, one, optimizer, &memory),
            effects: StackEffects {
                stack: stack.name.clone(),
                file: stack.file.clone(),
                dispatch: stack.host.dispatch.value,
                fusion: Vec::new(),
                tf32_layers: 0,
                fp8_layers: 0,
                fp8_cast_bytes_per_sample: 0.0,
                recompute: stack.recompute.value,
                recomputed_flops_per_sample: 0.0,
                memory: memory.clone(),
            },
            bands: super::step::Bands::of(stack),
        }
    }

    fn from_costs(
        graph: &Graph,
        one: &GraphCost<'_>,
        two: &GraphCost<'_>,
        optimizer: Optimizer,
        stack: &Stack,
    ) -> StepModel {
        let precision = one.precision;
        let mut m = StepModel::empty(graph, one, two, optimizer, stack);
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
        let entries = entries(layers.len(), &groups);
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
            let (mut ks1, mut launches) = merged(&e, &k1, saved_fwd, saved_bwd, 1.0);
            let (mut ks2, _) = merged(&e, &k2, saved_fwd, saved_bwd, 2.0);
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
            let in_block = block_of(&layers[head].name).is_some();
            let math = stack
                .precision
                .matrix_precision(head_op, in_block, precision);
            let kind = head_op.kind();
            let backward = e.members.iter().any(|&i| needs[i]);
            // FP8 scaling: per-tensor casts of the input and the weights forward and of the
            // output gradient backward ([`fp8_casts`]).
            let mut cast = Cast::default();
            if math == Precision::Fp8 {
                let l = &layers[head];
                let input = l.inputs.first().map_or(0, |&j| layers[j].output.elements());
                cast = fp8_casts(input, l.output.elements(), a[head].params, backward);
                for (ks, batch) in [(&mut ks1, 1.0), (&mut ks2, 2.0)] {
                    ks.extend(cast.kernels(batch));
                }
                launches[0] += 1;
                launches[1] += u32::from(backward);
                m.effects.fp8_layers += 1;
                m.effects.fp8_cast_bytes_per_sample += cast.forward + cast.backward;
            }
            // The host's time of each pass: its op's (a per-op dispatch's, or a kind a
            // per-kernel dispatch lists), else its kernels'.
            let hf = host_pass_s(host, &host.forward, kind, launches[0]);
            let hb = if backward {
                host_pass_s(host, &host.backward, kind, launches[1])
            } else {
                0.0
            };
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
            // Recomputation: a transformer layer's entries in full, an unfused attention
            // under selective; only where the entry runs backward.
            let recompute = backward
                && match stack.recompute.value {
                    Recompute::None => false,
                    Recompute::Selective => matches!(head_op, Op::Attention(a) if !a.fused),
                    Recompute::Full => in_block,
                };
            m.recompute.push(recompute);
            if recompute {
                m.effects.recomputed_flops_per_sample += sum(&|i| a[i].flops_fwd.value());
            }
            m.kinds.push(kind);
            m.heads.push(head);
            m.math.push(math);
            m.layer_params
                .push(e.members.iter().map(|&i| a[i].params).sum());
            m.kernels.push([ks1, ks2]);
            m.launches.push(launches);
            m.host_fwd.push(hf);
            m.host_bwd.push(
                hb + own_tensors as f64 * host.parameter.value.value()
                    + if recompute { hf } else { 0.0 },
            );
            m.flops_fwd.push(sum(&|i| a[i].flops_fwd.value()));
            m.flops_bwd.push(sum(&|i| a[i].flops_bwd.value()));
            m.act_fwd
                .push((f2 - f1 - saved_fwd).max(0.0) + cast.forward);
            m.weights_fwd.push(2.0 * f1 - f2 + cast.weights);
            m.act_bwd
                .push((g2 - g1 - saved_bwd).max(0.0) + cast.backward);
            m.weights_bwd.push(2.0 * g1 - g2);
        }
        m.effects.tf32_layers = m.math.iter().filter(|&&p| p == Precision::Tf32).count();
        m.host_update = tensors as f64 * host.optimizer_tensor.value.value();
        m.host_step = host.graph.as_ref().map_or(0.0, |g| g.value.value());
        m
    }
}

/// The step model's entries over `n` layers: each fused group where its last member ran,
/// each layer outside a group on its own.
fn entries(n: usize, groups: &[Group]) -> Vec<Entry<'_>> {
    let mut head_of: Vec<Option<usize>> = vec![None; n];
    for (gi, g) in groups.iter().enumerate() {
        for &i in &g.members {
            head_of[i] = Some(gi);
        }
    }
    // A group runs where its last member ran.
    (0..n)
        .filter_map(|i| match head_of[i] {
            Some(gi) if groups[gi].members.last() == Some(&i) => Some(Entry {
                members: groups[gi].members.clone(),
                group: Some(&groups[gi]),
            }),
            Some(_) => None,
            None => Some(Entry {
                members: vec![i],
                group: None,
            }),
        })
        .collect()
}

/// The host's time of a pass of an op of `kind` that launches `launches` kernels: none
/// under graph replay, else the op's time in the pass's `table` where the stack lists it,
/// else its kernels' dispatch.
fn host_pass_s(
    host: &crate::stack::Host,
    table: &Option<crate::stack::OpTimes>,
    kind: &str,
    launches: u32,
) -> f64 {
    let kernel = host.kernel.as_ref().map_or(0.0, |k| k.value.value());
    match (host.dispatch.value, table.as_ref().and_then(|t| t.of(kind))) {
        (Dispatch::Graph, _) => 0.0,
        (_, Some(t)) => t,
        (_, None) => kernel * f64::from(launches),
    }
}

/// The casts FP8 adds to one linear layer, bytes (per sample, and the weights' once a step).
#[derive(Debug, Clone, Copy, Default)]
struct Cast {
    forward: f64,
    weights: f64,
    backward: f64,
}

impl Cast {
    /// The cast kernels at `batch`: one forward (input and weights), one backward (the
    /// output gradient) where the layer runs backward.
    fn kernels(self, batch: f64) -> Vec<Kernel> {
        let elementwise = |pass, bytes: f64| {
            // Reading a 16-bit element and writing two one-byte copies: a scale and an
            // absolute maximum per element.
            vector_kernel("scale", pass, bytes / 2.0, bytes)
        };
        let mut out: Vec<Kernel> =
            elementwise(KernelPass::Forward, self.forward * batch + self.weights)
                .into_iter()
                .collect();
        if self.backward > 0.0 {
            out.extend(elementwise(KernelPass::Backward, self.backward * batch));
        }
        out
    }
}

/// What Transformer Engine's FP8 recipe adds to a linear layer of `input` and `output`
/// elements per sample and `params` weights (NVIDIA/TransformerEngine documentation, 'Using
/// FP8 with Transformer Engine'; Micikevicius et al., arXiv:2209.05433): each GEMM operand is
/// cast from BF16 to FP8 with its per-tensor scale, and Hopper's FP8 GEMMs take only the
/// `TN` layout, so the operands the weight gradient multiplies are cast transposed as well
/// (TE's `cast_transpose`). Forward: the input and the weights each read (2 bytes an
/// element) and written twice (1 byte each: the copy and its transpose), 4 bytes an element;
/// backward: the output gradient the same. The absolute maxima that set the next step's
/// scales are taken in the same pass.
fn fp8_casts(input: u64, output: u64, params: u64, backward: bool) -> Cast {
    const BYTES: f64 = 4.0;
    Cast {
        forward: BYTES * input as f64,
        weights: BYTES * params as f64,
        backward: if backward { BYTES * output as f64 } else { 0.0 },
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
