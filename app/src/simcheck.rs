//! The step simulator ([`ridgeline_model::sim`]) against a measured data-parallel step: a
//! PyTorch profiler trace of one rank of DistributedDataParallel training, or ridgeline's
//! own data-parallel executor under MPI (`measure comm ddp`: the CPU executor with a
//! communication thread beside backward). The simulator is given what was measured of each
//! part (every layer's forward and backward, the time outside the layers, each gradient
//! bucket's allreduce, the optimizer) and puts them together as it puts predictions
//! together: buckets filled in backward's order as DDP fills them, each allreduced beside
//! backward as soon as it is full. Its step against the measured one says how the
//! simulator's overlap and bucketing hold on a real run, apart from how well each part is
//! predicted.

use std::path::Path;

use anyhow::{Result, bail};
use ridgeline_calibrate::torch_trace::Trace;
use ridgeline_measure::Pass;
use ridgeline_measure::StepRun;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::StepModel;
use ridgeline_model::sim::{self, DDP_BUCKET_BYTES, DDP_FIRST_BUCKET_BYTES, SimLayer, SimOptions};
use serde::Serialize;

use crate::inputs::{self, WorkloadSpec};

/// A traced data-parallel step against the simulator.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimCheck {
    /// The trace or records file.
    pub trace: String,
    /// The workload the measurement trained.
    pub workload: String,
    /// Data-parallel ranks of the traced run.
    pub ranks: Option<usize>,
    /// Measured steps.
    pub steps: usize,
    /// Whether the buckets were allreduced beside backward (else after it).
    pub overlap: bool,
    /// The mean step, seconds.
    pub measured_step_s: f64,
    /// The simulated step, seconds.
    pub simulated_step_s: f64,
    /// (simulated - measured) / measured.
    pub error: f64,
    /// The allreduces of a step (the median over the steps).
    pub buckets_measured: usize,
    /// The buckets the simulator filled.
    pub buckets_simulated: usize,
    /// The mean step's communication, seconds.
    pub measured_comm_s: f64,
    /// The mean step's communication after backward, seconds.
    pub measured_exposed_s: f64,
    /// The simulated step's communication after backward, seconds.
    pub simulated_exposed_s: f64,
}

/// The mean of `v` (0 for none): a step is the sum of its parts, and the mean of a sum is
/// the sum of the means, so the measured step and the simulator's parts are both means.
fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The median of `counts` (the lower middle one of an even number).
fn median_count(counts: &[usize]) -> usize {
    let mut c = counts.to_vec();
    c.sort_unstable();
    c.get(c.len().saturating_sub(1) / 2).copied().unwrap_or(0)
}

/// What a measured data-parallel step is made of, step by step.
struct Parts {
    /// Each step, seconds.
    steps: Vec<f64>,
    /// Each step's optimizer update.
    optimizer: Vec<f64>,
    /// Each step's communication.
    comm: Vec<f64>,
    /// Each step's communication after backward.
    exposed: Vec<f64>,
    /// Each step's allreduces in the order they started.
    collectives: Vec<Vec<f64>>,
    /// Each step's time outside the layers and the update.
    other: Vec<f64>,
    /// Per graph layer, forward and backward seconds per step.
    layers: Vec<[Vec<f64>; 2]>,
    /// Data-parallel ranks.
    ranks: Option<usize>,
    /// Whether buckets were allreduced beside backward (else after it).
    overlap: bool,
    /// The buckets' bytes (the first, every later one), where the measurement says.
    buckets: Option<(f64, f64)>,
}

/// Simulates the data-parallel step measured in `path` and compares it with the
/// measurement's mean step: a PyTorch profiler trace of one DDP rank (`.json` or
/// `.json.gz`) or the records of `ridgeline measure comm ddp` (`.jsonl`). `workload` is
/// built at the measurement's input; gradient buckets hold `bucket_mib` MiB after a first
/// of `first_bucket_mib` (default: the sizes the records say they ran with, else DDP's).
/// A measurement without collectives is refused.
pub fn ddp_trace(
    path: &Path,
    workload: &str,
    width: Option<f64>,
    bucket_mib: Option<f64>,
    first_bucket_mib: Option<f64>,
) -> Result<SimCheck> {
    let is_records = path.extension().is_some_and(|e| e == "jsonl");
    let (graph, parts) = if is_records {
        from_records(path, workload, width)?
    } else {
        from_trace(path, workload, width)?
    };
    const MIB: f64 = 1024.0 * 1024.0;
    let (first, later) = parts
        .buckets
        .unwrap_or((DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_BYTES));
    let buckets = (
        first_bucket_mib.map_or(first, |m| m * MIB),
        bucket_mib.map_or(later, |m| m * MIB),
    );
    simulate(path, &graph, &parts, buckets)
}

/// The parts of a traced DDP step.
fn from_trace(
    path: &Path,
    workload: &str,
    width: Option<f64>,
) -> Result<(ridgeline_model::graph::Graph, Parts)> {
    let t = Trace::read(path)?;
    let (_, input) = t.input()?;
    let graph = inputs::workload(&WorkloadSpec {
        name: workload.to_owned(),
        input_size: Some(input.get(1..).unwrap_or_default().to_vec()),
        width,
    })?;
    match t.ranks() {
        Some(0) => bail!(
            "{}: `distributedInfo.world_size` is 0; a data-parallel run has at least 2 ranks",
            path.display()
        ),
        Some(1) => bail!(
            "{}: `distributedInfo.world_size` is 1: a single process, no data parallelism to \
             validate; record one rank of a run of 2 or more",
            path.display()
        ),
        _ => {}
    }
    // The workload as it ran: the first convolution's channels (what --width changes).
    if let Some(traced) = t.first_conv_channels() {
        let built = graph.layers().iter().find_map(|l| match &l.op {
            ridgeline_model::graph::Op::Conv(c) => Some(c.out_channels),
            _ => None,
        });
        if let Some(built) = built.filter(|b| *b != traced) {
            bail!(
                "{}: its first convolution has {traced} output channels, --workload \
                 {workload}{} builds {built}: pass the workload (and --width) it trained",
                path.display(),
                width.map_or_else(String::new, |w| format!(" --width {w}"))
            );
        }
    }
    let m = t.map(&graph)?;
    if m.comm.is_empty() {
        bail!(
            "{}: the trace holds no collectives: record one rank of a data-parallel run \
             (DistributedDataParallel)",
            path.display()
        );
    }
    let parts = Parts {
        steps: m.steps,
        optimizer: m.optimizer,
        comm: m.comm,
        exposed: m.exposed_comm,
        collectives: m.collectives,
        other: m.other,
        layers: m.layers,
        ranks: t.ranks(),
        overlap: true,
        buckets: None,
    };
    Ok((graph, parts))
}

/// The parts of the data-parallel steps recorded in `path` by `measure comm ddp`.
fn from_records(
    path: &Path,
    workload: &str,
    width: Option<f64>,
) -> Result<(ridgeline_model::graph::Graph, Parts)> {
    let records = inputs::records(path, &crate::campaign::Silent)?;
    let runs = StepRun::from_records(&records);
    let Some(run) = runs.iter().find(|r| !r.step.extra.bucket_s.is_empty()) else {
        bail!(
            "{}: no data-parallel step (a `workload-step` record with `extra.bucket_s`): \
             record one with `mpirun -np 2 ridgeline measure comm ddp WORKLOAD --out {}`",
            path.display(),
            path.display()
        );
    };
    let mismatch = |builds: String| {
        anyhow::anyhow!(
            "{}: its data-parallel step trained `{}` at input {:?} ({:.4e} FLOPs a step), and \
             --workload {workload}{} {builds}: pass the workload (and --width) it trained",
            path.display(),
            run.run.workload,
            run.run.input,
            run.step.flops,
            width.map_or_else(String::new, |w| format!(" --width {w}")),
        )
    };
    let spec = WorkloadSpec {
        name: workload.to_owned(),
        input_size: None,
        width,
    };
    let name = inputs::workload(&spec)?.name().to_owned();
    if name != run.run.workload {
        return Err(mismatch(format!("is `{name}`")));
    }
    let graph = inputs::workload(&WorkloadSpec {
        input_size: Some(run.run.input.get(1..).unwrap_or_default().to_vec()),
        ..spec
    })?;
    // The same graph: its name, input and the step's FLOPs (which the width changes).
    let flops = ridgeline_model::cost::cost(&graph, run.run.batch as u64, Precision::Fp32)
        .flops_train
        .value();
    let step = run.step;
    if graph.input_shape().dims() != run.run.input
        || (flops - step.flops).abs() > 1e-9 * step.flops.abs().max(1.0)
    {
        return Err(mismatch(format!(
            "builds it at {:?} ({flops:.4e})",
            graph.input_shape().dims()
        )));
    }
    let samples = |name: &str, pass: Pass| -> Vec<f64> {
        run.layer(name, pass)
            .map(|r| r.samples_s.clone())
            .unwrap_or_default()
    };
    let layers = graph
        .layers()
        .iter()
        .map(|l| {
            [
                samples(&l.name, Pass::Forward),
                samples(&l.name, Pass::Backward),
            ]
        })
        .collect();
    let extra = &step.extra;
    let note = |key: &str| extra.notes.get(key).and_then(serde_json::Value::as_f64);
    Ok((
        graph,
        Parts {
            steps: step.samples_s.clone(),
            optimizer: extra.update_s.clone(),
            comm: extra.comm_s.clone(),
            exposed: extra.exposed_comm_s.clone(),
            collectives: extra.bucket_s.clone(),
            other: extra.other_s.clone(),
            layers,
            ranks: run.run.ranks.or(extra.ranks),
            overlap: extra
                .notes
                .get("overlap")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true),
            buckets: note("first_bucket_bytes").zip(note("bucket_bytes")),
        },
    ))
}

/// The simulator given `parts` of a measured step of `graph`, against the measured step.
fn simulate(
    path: &Path,
    graph: &ridgeline_model::graph::Graph,
    m: &Parts,
    (first_bucket_bytes, bucket_bytes): (f64, f64),
) -> Result<SimCheck> {
    let model = StepModel::new(graph, Precision::Fp32, Optimizer::Sgd);
    // Gradients travel in FP32, as DDP reduces its parameters' gradients.
    let grads: Vec<f64> = model.layer_params.iter().map(|&p| p as f64 * 4.0).collect();
    let total: f64 = grads.iter().sum();
    // The ops that are no layer (gradient accumulation, DDP's copies into its buckets) run
    // as backward hands each parameter its gradient: spread over the layers by their
    // gradients' bytes.
    let other = mean(&m.other);
    let layers: Vec<SimLayer> = graph
        .layers()
        .iter()
        .zip(&m.layers)
        .zip(&grads)
        .map(|((layer, [f, b]), &g)| SimLayer {
            name: layer.name.to_string(),
            forward_s: mean(f),
            backward_s: mean(b) + if total > 0.0 { other * g / total } else { 0.0 },
            gradient_bytes: g,
            exchange_s: [0.0; 2],
        })
        .collect();
    // Each bucket's allreduce as measured (the mean over the steps of the
    // k-th); buckets the trace lacks at its mean time per byte.
    let counts: Vec<usize> = m.collectives.iter().map(Vec::len).collect();
    let n = median_count(&counts);
    let measured: Vec<f64> = (0..n)
        .map(|k| {
            let v: Vec<f64> = m
                .collectives
                .iter()
                .filter_map(|c| c.get(k).copied())
                .collect();
            mean(&v)
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
            bucket_bytes,
            first_bucket_bytes,
            overlap: m.overlap,
            optimizer_s: mean(&m.optimizer),
            ..SimOptions::default()
        },
    );
    let measured_step = mean(&m.steps);
    Ok(SimCheck {
        trace: path.display().to_string(),
        workload: graph.name().to_owned(),
        ranks: m.ranks,
        steps: m.steps.len(),
        overlap: m.overlap,
        measured_step_s: measured_step,
        simulated_step_s: s.step_s,
        error: s.step_s / measured_step - 1.0,
        buckets_measured: n,
        buckets_simulated: s.buckets,
        measured_comm_s: mean(&m.comm),
        measured_exposed_s: mean(&m.exposed),
        simulated_exposed_s: s.exposed_comm_s,
    })
}
