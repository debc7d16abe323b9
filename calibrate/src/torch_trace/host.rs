//! The host's side of a GPU trace ([`HostTimes`]): how long the framework's host threads
//! took to issue each op kind, forward and backward, each parameter's gradient
//! accumulation, the optimizer per parameter tensor, one kernel launch, and the gap the GPU
//! left between kernels queued back to back. These are the figures a software stack's
//! `[host]` and `[device]` tables hold (`ridgeline_model::stack`), measured at the op level.
//!
//! An op kind's time is the median, over its layers and the profiled steps, of each layer
//! pass's time on its thread from the end of the previous layer op to the end of its own:
//! the interpreter between ops and the ops that are no layer (a batch norm's counter, views)
//! go to the layer after them, so the times add up to the thread's whole issuing time.

use serde::Serialize;

use ridgeline_model::cost::param_tensors;
use ridgeline_model::graph::Graph;

use super::trace::{BACKWARD, Trace};
use crate::stats::median;

/// What a GPU trace says of the host.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostTimes {
    /// Forward, by op kind.
    pub forward: Vec<KindTime>,
    /// Backward, by op kind.
    pub backward: Vec<KindTime>,
    /// Forward, every layer pass: the time of a kind the table does not list, seconds.
    pub forward_default_s: f64,
    /// Backward, every layer pass, seconds.
    pub backward_default_s: f64,
    /// A parameter's gradient accumulation (`AccumulateGrad`), seconds.
    pub parameter_s: Option<f64>,
    /// The optimizer's spans per step over the graph's parameter tensors, seconds.
    pub optimizer_tensor_s: Option<f64>,
    /// One kernel launch call (`cudaLaunchKernel` and its variants), seconds.
    pub launch_s: Option<f64>,
    /// The GPU's gap between two kernels of which the second was launched before the first
    /// ended, seconds.
    pub kernel_gap_s: Option<f64>,
}

/// An op kind's host time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindTime {
    /// The op kind (`conv`, `batch-norm`, ...).
    pub kind: &'static str,
    /// Layer passes measured (over the steps).
    pub passes: usize,
    /// Their median, seconds.
    pub median_s: f64,
}

/// A layer op of a step: the step, the op's index in the trace, and its layer (none for a
/// backward function of no layer).
pub(super) type Pass = (usize, usize, Option<usize>);

/// The host times of `trace` mapped onto `graph`: `forward` and `backward` are the layer
/// passes the mapping found, each top-level op with its step and layer. `None` for a trace
/// of a CPU, whose op spans hold their kernels' work.
pub(super) fn times(
    trace: &Trace,
    graph: &Graph,
    forward: &[Pass],
    backward: &[Pass],
) -> Option<HostTimes> {
    if !trace.on_gpu() {
        return None;
    }
    let layers = graph.layers();
    let nsteps = trace.steps.len().max(1);
    // Per step and layer: the pass's issuing time, microseconds.
    let mut fwd = vec![vec![0.0; layers.len()]; nsteps];
    let mut bwd = vec![vec![0.0; layers.len()]; nsteps];
    let mut parameter = Vec::new();
    for (passes, table, is_backward) in [(forward, &mut fwd, false), (backward, &mut bwd, true)] {
        let mut sorted: Vec<&Pass> = passes.iter().collect();
        sorted.sort_by(|a, b| trace.ops[a.1].ts.total_cmp(&trace.ops[b.1].ts));
        let mut prev: Option<(usize, f64)> = None;
        for &&(step, i, layer) in &sorted {
            let o = &trace.ops[i];
            let since = match prev {
                Some((s, end)) if s == step => Some(o.end() - end),
                _ => None,
            };
            let accumulate = is_backward
                && o.name.strip_prefix(BACKWARD) == Some("torch::autograd::AccumulateGrad");
            match (since, layer) {
                (Some(t), _) if accumulate => parameter.push(t),
                (Some(t), Some(l)) => table[step][l] += t,
                // A function of no layer: its time goes to the next.
                (_, None) if !accumulate => continue,
                _ => {}
            }
            prev = Some((step, o.end()));
        }
    }
    let by_kind = |table: &[Vec<f64>]| {
        let mut kinds: std::collections::BTreeMap<&'static str, Vec<f64>> = Default::default();
        for (l, layer) in layers.iter().enumerate() {
            let samples = table.iter().map(|s| s[l]).filter(|&t| t > 0.0);
            kinds.entry(layer.op.kind()).or_default().extend(samples);
        }
        kinds.retain(|_, v| !v.is_empty());
        let all: Vec<f64> = kinds.values().flatten().copied().collect();
        let default = if all.is_empty() {
            0.0
        } else {
            median(&all) / 1e6
        };
        let kinds = kinds
            .into_iter()
            .map(|(kind, v)| KindTime {
                kind,
                passes: v.len(),
                median_s: median(&v) / 1e6,
            })
            .collect::<Vec<_>>();
        (kinds, default)
    };
    let (forward, forward_default_s) = by_kind(&fwd);
    let (backward, backward_default_s) = by_kind(&bwd);
    let tensors: u64 = layers.iter().map(|l| param_tensors(&l.op)).sum();
    let optimizer: Vec<f64> = (0..nsteps)
        .map(|s| {
            trace
                .optimizer
                .iter()
                .filter(|o| trace.steps.get(s).is_none_or(|st| st.holds(o.ts)))
                .map(|o| o.dur)
                .sum::<f64>()
        })
        .filter(|&t| t > 0.0)
        .collect();
    let seconds = |v: &[f64]| (!v.is_empty()).then(|| median(v) / 1e6);
    Some(HostTimes {
        forward,
        backward,
        forward_default_s,
        backward_default_s,
        parameter_s: seconds(&parameter),
        optimizer_tensor_s: seconds(&optimizer)
            .filter(|_| tensors > 0)
            .map(|t| t / tensors as f64),
        launch_s: seconds(&trace.launches),
        kernel_gap_s: seconds(&trace.queued_gaps()),
    })
}

impl Trace {
    /// The gaps between consecutive kernels of which the second was launched before the
    /// first ended (the GPU had it queued), microseconds.
    fn queued_gaps(&self) -> Vec<f64> {
        let mut k = self.gpu_kernels.clone();
        k.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        k.windows(2)
            .filter(|w| w[1].launched.is_some_and(|l| l < w[0].ts + w[0].dur))
            .map(|w| w[1].ts - (w[0].ts + w[0].dur))
            .filter(|g| *g >= 0.0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use ridgeline_model::catalog;
    use ridgeline_model::system::Sourced;
    use ridgeline_model::units::Seconds;
    use ridgeline_model::workloads::{self, BuildOptions};

    use super::*;

    /// The built-in stacks' host and device figures are the committed H100 trace's, as the
    /// importer measures them, to the 0.1 us their files give.
    #[test]
    fn the_built_in_stacks_hold_the_h100_traces_host_times() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/torch/resnet50-h100.json.gz"
        );
        let trace = Trace::read(Path::new(path)).unwrap();
        let (_, input) = trace.input().unwrap();
        let options = BuildOptions {
            input_size: Some(input[1..].to_vec()),
            width: 1.0,
        };
        let graph = workloads::build("resnet50", &options).unwrap();
        let h = trace.map(&graph).unwrap().host.unwrap();
        let close = |file: &Sourced<Seconds>, measured: f64, what: &str| {
            let rounded = (measured * 1e7).round() / 10.0;
            let given = file.value.value() * 1e6;
            assert!(
                (given - rounded).abs() < 1e-6,
                "{what}: {given} us vs {rounded} us"
            );
        };
        let eager = catalog::stack("pytorch-eager").unwrap();
        let host = &eager.host;
        for (table, kinds, default) in [
            (
                host.forward.as_ref().unwrap(),
                &h.forward,
                h.forward_default_s,
            ),
            (
                host.backward.as_ref().unwrap(),
                &h.backward,
                h.backward_default_s,
            ),
        ] {
            close(table.default.as_ref().unwrap(), default, "default");
            assert_eq!(table.kinds.len(), kinds.len());
            for k in kinds {
                close(&table.kinds[k.kind], k.median_s, k.kind);
            }
        }
        close(&host.parameter, h.parameter_s.unwrap(), "parameter");
        close(
            &host.optimizer_tensor,
            h.optimizer_tensor_s.unwrap(),
            "optimizer",
        );
        let launch = h.launch_s.unwrap();
        for name in catalog::stack_names() {
            let s = catalog::stack(&name).unwrap();
            close(&s.kernel_gap, h.kernel_gap_s.unwrap(), "gap");
            for t in [&s.host.kernel, &s.host.graph].into_iter().flatten() {
                close(t, launch, &name);
            }
        }
    }
}
