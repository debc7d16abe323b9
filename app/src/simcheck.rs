//! The step simulator ([`ridgeline_model::sim`]) against a measured data-parallel step: a
//! PyTorch profiler trace of one rank of DistributedDataParallel training. The simulator is
//! given what the trace measured of each part (every layer's forward and backward, the ops
//! that are no layer, each gradient bucket's allreduce, the optimizer) and puts them
//! together as it puts predictions together: buckets filled in backward's order as DDP fills
//! them, each allreduced beside backward as soon as it is full. Its step against the
//! trace's measures how the simulator's overlap and bucketing hold on a real framework,
//! apart from how well each part is predicted.

use std::path::Path;

use anyhow::{Result, bail};
use ridgeline_calibrate::stats::median;
use ridgeline_calibrate::torch_trace::Trace;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::predict::StepModel;
use ridgeline_model::sim::{self, SimLayer, SimOptions};
use serde::Serialize;

use crate::inputs::{self, WorkloadSpec};

/// A traced data-parallel step against the simulator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimCheck {
    /// The trace.
    pub trace: String,
    /// The workload its ops were mapped onto.
    pub workload: String,
    /// Data-parallel ranks of the traced run.
    pub ranks: Option<usize>,
    /// Profiled steps.
    pub steps: usize,
    /// The median step, seconds.
    pub measured_step_s: f64,
    /// The simulated step, seconds.
    pub simulated_step_s: f64,
    /// (simulated - measured) / measured.
    pub error: f64,
    /// The allreduces of a step in the trace (its median step's count).
    pub buckets_measured: usize,
    /// The buckets the simulator filled.
    pub buckets_simulated: usize,
    /// The median step's communication, seconds.
    pub measured_comm_s: f64,
    /// The median step's communication after backward, seconds.
    pub measured_exposed_s: f64,
    /// The simulated step's communication after backward, seconds.
    pub simulated_exposed_s: f64,
}

/// Simulates the step traced in `trace` (the workload `workload`, built at the trace's
/// input) with gradient buckets of `bucket_mib` MiB after DDP's 1 MiB first, and compares it
/// with the trace's median step. A trace without collectives is refused.
pub fn ddp_trace(trace: &Path, workload: &str, bucket_mib: f64) -> Result<SimCheck> {
    let t = Trace::read(trace)?;
    let (_, input) = t.input()?;
    let graph = inputs::workload(&WorkloadSpec {
        name: workload.to_owned(),
        input_size: Some(input.get(1..).unwrap_or_default().to_vec()),
        width: None,
    })?;
    let m = t.map(&graph)?;
    if m.comm.is_empty() {
        bail!(
            "{}: the trace holds no collectives: record one rank of a data-parallel run \
             (DistributedDataParallel)",
            trace.display()
        );
    }
    let precision = t.precision()?;
    let model = StepModel::new(&graph, precision, Optimizer::Sgd);
    // Gradients travel in FP32, as DDP reduces its parameters' gradients.
    let grads: Vec<f64> = model.layer_params.iter().map(|&p| p as f64 * 4.0).collect();
    let total: f64 = grads.iter().sum();
    // The ops that are no layer (gradient accumulation, DDP's copies into its buckets) run
    // as backward hands each parameter its gradient: spread over the layers by their
    // gradients' bytes.
    let other = median(&m.other);
    let layers: Vec<SimLayer> = graph
        .layers()
        .iter()
        .zip(&m.layers)
        .zip(&grads)
        .map(|((layer, [f, b]), &g)| SimLayer {
            name: layer.name.to_string(),
            forward_s: if f.is_empty() { 0.0 } else { median(f) },
            backward_s: if b.is_empty() { 0.0 } else { median(b) }
                + if total > 0.0 { other * g / total } else { 0.0 },
            gradient_bytes: g,
        })
        .collect();
    // Each bucket's allreduce as the trace measured it (the median over the steps of the
    // k-th); buckets the trace lacks at its mean time per byte.
    let counts: Vec<usize> = m.collectives.iter().map(Vec::len).collect();
    let n = median(&counts.iter().map(|&c| c as f64).collect::<Vec<_>>()).round() as usize;
    let measured: Vec<f64> = (0..n)
        .map(|k| {
            let v: Vec<f64> = m
                .collectives
                .iter()
                .filter_map(|c| c.get(k).copied())
                .collect();
            median(&v)
        })
        .collect();
    let per_byte = measured.iter().sum::<f64>() / total.max(1.0);
    let calls = std::cell::Cell::new(0usize);
    let allreduce = |bytes: f64| {
        let k = calls.get();
        calls.set(k + 1);
        measured.get(k).copied().unwrap_or(bytes * per_byte)
    };
    let s = sim::simulate(
        &layers,
        &allreduce,
        &SimOptions {
            bucket_bytes: bucket_mib * 1024.0 * 1024.0,
            optimizer_s: median(&m.optimizer),
            ..SimOptions::default()
        },
    );
    let measured_step = median(&m.steps);
    Ok(SimCheck {
        trace: trace.display().to_string(),
        workload: graph.name().to_owned(),
        ranks: t.ranks(),
        steps: m.steps.len(),
        measured_step_s: measured_step,
        simulated_step_s: s.step_s,
        error: s.step_s / measured_step - 1.0,
        buckets_measured: n,
        buckets_simulated: s.buckets,
        measured_comm_s: median(&m.comm),
        measured_exposed_s: median(&m.exposed_comm),
        simulated_exposed_s: s.exposed_comm_s,
    })
}
