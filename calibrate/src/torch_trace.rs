//! PyTorch profiler traces (the Chrome-trace JSON that `torch.profiler` exports through
//! Kineto) read as ridgeline records: each layer pass of each profiled training step, the
//! whole steps, and the kernels of those layers as micro-kernel records that calibration
//! fits, with the trace named as their source.
//!
//! A trace is mapped onto a workload's layer graph:
//! - each profiled step is a `ProfilerStep#N` span (the whole trace where there is none);
//!   the ops inside an `Optimizer.*` span are the optimizer's;
//! - a top-level CPU op (no op around it on its thread) of the forward pass is classified
//!   by its ATen name (`aten::conv2d` a convolution, `aten::batch_norm` a batch norm, ...)
//!   and matched, in order, to the workload's next layer, which must be of the same kind;
//! - a backward function (`autograd::engine::evaluate_function: ConvolutionBackward0`) is
//!   the layer whose forward ops carry its autograd sequence number;
//! - an op's time is its own span on the CPU, or the time of the GPU kernels it launched
//!   (matched by the `External id` Kineto gives both) where the trace has kernels;
//! - each step's gradient collectives (allreduce, reduce-scatter, all-gather: NCCL kernels
//!   on a GPU, the process group's `gloo:`/`nccl:`/`mpi:` spans on a CPU) are its
//!   communication, and what of it ran past the step's last backward function is exposed.
//!
//! Ops that are no layer (views, `aten::flatten`, the loss's gradient seed, gradient
//! accumulation) are listed by name with their count and time, never dropped silently; so is
//! a layer pass that launched no GPU kernel (a residual add's backward), which gets no record.
//! Kernels by `External id` are tested on a real trace of ResNet-50 on an H100; NCCL kernels
//! on a synthetic trace only (no multi-GPU trace has been recorded).

use std::collections::{BTreeMap, HashMap};

use ridgeline_measure::record::{LayerShape, StepShape};
use ridgeline_measure::{
    Case, ConvPass, Device, Env, Extra, Format, GemmCase, GpuEnv, Measured, OpCase, Pass, Record,
    RecordPrecision, conv_case,
};
use ridgeline_model::graph::{Graph, Op};
use ridgeline_model::precision::Precision;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Error, Result};

mod host;
mod trace;

pub use host::{HostTimes, KindTime};
pub use trace::Trace;
use trace::{BACKWARD, Span, TraceOp};

/// Ops that are no layer, by name: how many and how long.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unmapped {
    /// The op (a backward function by its name after `evaluate_function: `).
    pub name: String,
    /// Calls, over the profiled steps.
    pub count: usize,
    /// Their time, seconds.
    pub seconds: f64,
}

/// A GEMM the trace ran inside a layer: `(m, n, k)`.
type GemmKey = (usize, usize, usize);

/// What a trace measured of a workload's layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    /// Each profiled step's time, seconds.
    pub steps: Vec<f64>,
    /// Each step's optimizer time (its `Optimizer.*` spans), seconds.
    pub optimizer: Vec<f64>,
    /// Each step's collective communication, seconds (empty where the trace has none).
    pub comm: Vec<f64>,
    /// Each step's communication after its backward ended, seconds.
    pub exposed_comm: Vec<f64>,
    /// Each step's collectives, seconds each, in the order they started.
    pub collectives: Vec<Vec<f64>>,
    /// Each step's time in ops that are no layer (the unmapped ones), seconds.
    pub other: Vec<f64>,
    /// Per graph layer (in graph order): forward and backward seconds per step; empty for
    /// layers no op ran (the input).
    pub layers: Vec<[Vec<f64>; 2]>,
    /// The GEMMs run inside the layers (`aten::mm`, `aten::addmm`), each call's seconds.
    pub gemms: BTreeMap<GemmKey, Vec<f64>>,
    /// Ops that are no layer.
    pub unmapped: Vec<Unmapped>,
    /// The host's times, for a trace of a GPU.
    pub host: Option<HostTimes>,
}

impl Trace {
    /// Maps the profiled steps onto the layers of `graph` (see the module's documentation).
    pub fn map(&self, graph: &Graph) -> Result<Mapped> {
        let layers = graph.layers();
        let compute: Vec<usize> = (0..layers.len())
            .filter(|&i| !matches!(layers[i].op, Op::Input) && !layers[i].op.is_view())
            .collect();
        let nsteps = self.steps.len().max(1);
        let mut times: Vec<[Vec<f64>; 2]> =
            vec![[vec![0.0; nsteps], vec![0.0; nsteps]]; layers.len()];
        let mut measured = vec![[false; 2]; layers.len()];
        let mut unmapped: BTreeMap<String, (usize, f64)> = BTreeMap::new();
        let mut optimizer = vec![0.0; nsteps];
        let mut other = vec![0.0; nsteps];
        let mut gemms: BTreeMap<GemmKey, Vec<f64>> = BTreeMap::new();
        let top = self.top_level();
        let in_optimizer = |o: &TraceOp| self.optimizer.iter().any(|s| s.holds(o.ts));
        // The layer ops in order, for the host's times.
        let (mut forward_passes, mut backward_passes) = (Vec::new(), Vec::new());
        // Forward: each step's ops matched in order to the compute layers.
        let mut seq_layer: HashMap<(usize, i64), usize> = HashMap::new();
        for step in 0..nsteps {
            let mut next = 0;
            let mut nth = 0;
            for &(i, s) in top.iter().filter(|(_, s)| *s == step) {
                let o = &self.ops[i];
                if o.name.starts_with(BACKWARD) {
                    continue;
                }
                if in_optimizer(o) {
                    optimizer[s] += self.seconds(i);
                    continue;
                }
                let Some(kind) = kind_of(o) else {
                    let e = unmapped.entry(o.name.clone()).or_default();
                    e.0 += 1;
                    e.1 += self.seconds(i);
                    other[s] += self.seconds(i);
                    continue;
                };
                nth += 1;
                let Some(&l) = compute.get(next) else {
                    return Err(Error::Input(format!(
                        "{}: step {}: forward op `{}` (the {nth}th layer op) is a `{kind}` \
                         after the workload's last layer: the trace is not of workload `{}`",
                        self.file,
                        step + 1,
                        o.name,
                        graph.name()
                    )));
                };
                if layers[l].op.kind() != kind {
                    return Err(Error::Input(format!(
                        "{}: step {}: forward op `{}` (the {nth}th layer op) is a `{kind}`, \
                         but the workload's next layer `{}` is a `{}`: the trace is not of \
                         workload `{}` at this input, or runs its layers in another order",
                        self.file,
                        step + 1,
                        o.name,
                        layers[l].name,
                        layers[l].op.kind(),
                        graph.name()
                    )));
                }
                next += 1;
                forward_passes.push((s, i, Some(l)));
                times[l][0][s] += self.seconds(i);
                measured[l][0] = true;
                for j in self.subtree(i) {
                    if let Some(q) = self.ops[j].seq {
                        seq_layer.insert((s, q), l);
                    }
                    self.gemm(j, &mut gemms);
                }
            }
            if next < compute.len() {
                return Err(Error::Input(format!(
                    "{}: step {}: the trace's forward ran {next} of workload `{}`'s {} layers \
                     (it stops before `{}`): the trace is not of this workload, or its step \
                     was cut short",
                    self.file,
                    step + 1,
                    graph.name(),
                    compute.len(),
                    layers[compute[next]].name
                )));
            }
        }
        // Backward: each function to the layer whose forward carries its sequence number.
        for &(i, s) in &top {
            let o = &self.ops[i];
            let Some(function) = o.name.strip_prefix(BACKWARD) else {
                continue;
            };
            if in_optimizer(o) {
                optimizer[s] += self.seconds(i);
                continue;
            }
            let layer = o.seq.and_then(|q| seq_layer.get(&(s, q))).copied();
            backward_passes.push((s, i, layer));
            match layer {
                Some(l) => {
                    times[l][1][s] += self.seconds(i);
                    measured[l][1] = true;
                    for j in self.subtree(i) {
                        self.gemm(j, &mut gemms);
                    }
                }
                None => {
                    let e = unmapped.entry(function.to_owned()).or_default();
                    e.0 += 1;
                    e.1 += self.seconds(i);
                    other[s] += self.seconds(i);
                }
            }
        }
        let (comm, exposed, collectives) = self.comm_per_step(&top, nsteps);
        let has_comm = !self.comm.is_empty();
        let steps = if self.steps.is_empty() {
            let start = self.ops.iter().map(|o| o.ts).fold(f64::INFINITY, f64::min);
            let end = self.ops.iter().map(TraceOp::end).fold(0.0, f64::max);
            vec![(end - start) / 1e6]
        } else {
            self.steps.iter().map(|s| s.dur / 1e6).collect()
        };
        Ok(Mapped {
            steps,
            optimizer,
            comm: if has_comm { comm } else { Vec::new() },
            exposed_comm: if has_comm { exposed } else { Vec::new() },
            collectives,
            other,
            layers: times
                .into_iter()
                .zip(measured)
                .map(|([f, b], [mf, mb])| {
                    [
                        if mf { f } else { Vec::new() },
                        if mb { b } else { Vec::new() },
                    ]
                })
                .collect(),
            gemms,
            unmapped: unmapped
                .into_iter()
                .map(|(name, (count, seconds))| Unmapped {
                    name,
                    count,
                    seconds,
                })
                .collect(),
            host: host::times(self, graph, &forward_passes, &backward_passes),
        })
    }

    /// Communication per step, seconds: its total, how far it ran past the step's last
    /// backward function (the exposed part), and each collective's time in order. `top`
    /// holds the top-level ops with their steps.
    fn comm_per_step(
        &self,
        top: &[(usize, usize)],
        nsteps: usize,
    ) -> (Vec<f64>, Vec<f64>, Vec<Vec<f64>>) {
        let (mut comm, mut exposed) = (vec![0.0; nsteps], vec![0.0; nsteps]);
        let mut collectives = vec![Vec::new(); nsteps];
        for (step, (c, x)) in comm.iter_mut().zip(exposed.iter_mut()).enumerate() {
            let in_step = |t: f64| self.steps.get(step).is_none_or(|s| s.holds(t));
            let mut spans: Vec<&Span> = self.comm.iter().filter(|c| in_step(c.ts)).collect();
            spans.sort_by(|a, b| a.ts.total_cmp(&b.ts));
            collectives[step] = spans.iter().map(|s| s.dur / 1e6).collect();
            *c = spans.iter().map(|s| s.dur).sum::<f64>() / 1e6;
            let backward_end = top
                .iter()
                .filter(|(i, s)| *s == step && self.ops[*i].name.starts_with(BACKWARD))
                .map(|(i, _)| self.ops[*i].end())
                .fold(f64::NEG_INFINITY, f64::max);
            let comm_end = spans
                .iter()
                .map(|s| s.ts + s.dur)
                .fold(f64::NEG_INFINITY, f64::max);
            if comm_end.is_finite() && backward_end.is_finite() {
                *x = ((comm_end - backward_end) / 1e6).clamp(0.0, *c);
            }
        }
        (comm, exposed, collectives)
    }

    /// Adds op `j` to `gemms` where it is a 2-D product (`aten::mm`, or `aten::addmm`'s).
    fn gemm(&self, j: usize, gemms: &mut BTreeMap<GemmKey, Vec<f64>>) {
        let o = &self.ops[j];
        let (a, b) = match o.name.as_str() {
            "aten::mm" => (o.dims.first(), o.dims.get(1)),
            "aten::addmm" => (o.dims.get(1), o.dims.get(2)),
            _ => return,
        };
        if let (Some(a), Some(b)) = (a, b)
            && a.len() == 2
            && b.len() == 2
            && a[1] == b[0]
            && a.iter().chain(b).all(|&d| d > 0)
        {
            let key = (a[0] as usize, b[1] as usize, a[1] as usize);
            gemms.entry(key).or_default().push(self.seconds(j));
        }
    }

    /// The environment of the trace's records: the trace in place of a host, its GPU where
    /// it has one.
    fn env(&self, threads: usize) -> Env {
        // Kineto's times are microseconds after `baseTimeNanoseconds`.
        let first = self.ops.iter().map(|o| o.ts).fold(f64::INFINITY, f64::min);
        let timestamp = self
            .base_ns
            .filter(|_| first.is_finite() && first >= 0.0)
            .map(|ns| {
                let at = ns.saturating_add((first * 1e3) as u64);
                humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_nanos(at),
                )
                .to_string()
            })
            .unwrap_or_default();
        let gpu = self.on_gpu().then(|| {
            let g = self.gpu.clone().unwrap_or(Value::Null);
            let s = |k: &str| {
                g.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or("unknown")
                    .to_owned()
            };
            let n = |k: &str| g.get(k).and_then(Value::as_u64);
            GpuEnv {
                ordinal: n("id").unwrap_or(0) as usize,
                name: s("name"),
                compute_capability: format!(
                    "{}.{}",
                    n("computeMajor").unwrap_or(0),
                    n("computeMinor").unwrap_or(0)
                ),
                memory_bytes: n("totalGlobalMem").unwrap_or(0),
                sm_clock_mhz: None,
                memory_clock_mhz: None,
                l2_bytes: n("l2CacheSize"),
                driver_version: "unknown".into(),
                libraries: BTreeMap::new(),
            }
        });
        Env {
            host: format!("PyTorch profiler trace {}", self.file),
            cpu_model: "unknown (imported)".into(),
            cores: threads,
            simd: Vec::new(),
            gpu,
            ridgeline_version: env!("CARGO_PKG_VERSION").to_owned(),
            git_commit: None,
            timestamp,
            slurm: None,
            framework: None,
            blas: None,
        }
    }
}

/// The ridgeline op kind of a forward top-level op, by its ATen name; `None` for an op that
/// is no layer (views, copies, allocations).
fn kind_of(o: &TraceOp) -> Option<&'static str> {
    Some(match o.name.as_str() {
        "aten::conv1d" | "aten::conv2d" | "aten::conv3d" | "aten::convolution"
        | "aten::_convolution" => "conv",
        "aten::conv_transpose1d" | "aten::conv_transpose2d" | "aten::conv_transpose3d" => {
            "conv-transpose"
        }
        "aten::batch_norm" => "batch-norm",
        "aten::relu" | "aten::relu_" => "relu",
        "aten::leaky_relu" | "aten::leaky_relu_" => "leaky-relu",
        "aten::tanh" | "aten::tanh_" => "tanh",
        "aten::max_pool1d" | "aten::max_pool2d" | "aten::max_pool3d" => "max-pool",
        "aten::avg_pool1d" | "aten::avg_pool2d" | "aten::avg_pool3d" => "avg-pool",
        "aten::adaptive_avg_pool1d" | "aten::adaptive_avg_pool2d" | "aten::adaptive_avg_pool3d" => {
            "global-avg-pool"
        }
        // A residual add takes two tensors of one shape (not a tensor and a scalar).
        "aten::add" | "aten::add_"
            if o.dims.len() >= 2 && !o.dims[0].is_empty() && o.dims[0] == o.dims[1] =>
        {
            "add"
        }
        "aten::cat" | "aten::concat" => "concat",
        "aten::dropout" | "aten::dropout_" | "aten::feature_dropout" => "dropout",
        "aten::linear" | "aten::addmm" => "dense",
        "aten::cross_entropy_loss" => "softmax-cross-entropy",
        "aten::mse_loss" => "mse-loss",
        "aten::layer_norm" => "layer-norm",
        "aten::gelu" => "gelu",
        "aten::silu" | "aten::silu_" => "silu",
        "aten::softmax" | "aten::_softmax" => "softmax",
        "aten::embedding" => "embedding",
        "aten::upsample_nearest2d" | "aten::upsample_nearest3d" => "upsample",
        _ => return None,
    })
}

/// The `workload-layer` shapes of `layer` of `run`, one per pass that has samples
/// (`samples`: forward, backward), each with its samples and the pass's FLOPs and bytes
/// from `cost`.
pub(crate) fn layer_passes(
    run: &StepShape,
    layer: &ridgeline_model::graph::Layer,
    cost: &ridgeline_model::cost::LayerCost<'_>,
    samples: [&Vec<f64>; 2],
) -> Vec<(Measured, Vec<f64>, f64, f64)> {
    [
        (
            Pass::Forward,
            samples[0],
            cost.flops_fwd.value(),
            cost.hbm_bytes_fwd.value(),
        ),
        (
            Pass::Backward,
            samples[1],
            cost.flops_bwd.value(),
            cost.hbm_bytes_bwd.value(),
        ),
    ]
    .into_iter()
    .filter(|(_, s, _, _)| !s.is_empty())
    .map(|(pass, s, flops, bytes)| {
        let shape = Measured::WorkloadLayer(LayerShape {
            run: run.clone(),
            layer: layer.name.to_string(),
            op: layer.op.kind().to_owned(),
            pass,
        });
        (shape, s.clone(), flops, bytes)
    })
    .collect()
}

/// Where imported records come from: the file named in each record
/// (`extra.notes.imported_from`), the device and threads they ran on, and their environment.
pub(crate) struct Source {
    /// The source, in words (`PyTorch profiler trace FILE`).
    pub(crate) name: String,
    /// The device.
    pub(crate) device: Device,
    /// Threads.
    pub(crate) threads: usize,
    /// The environment.
    pub(crate) env: Env,
}

impl Source {
    /// A record of `measured` from this source.
    pub(crate) fn record(
        &self,
        measured: Measured,
        precision: RecordPrecision,
        samples: Vec<f64>,
        flops: f64,
        bytes: f64,
    ) -> Record {
        let mut r = Record::new(
            measured,
            precision,
            self.device,
            self.threads,
            samples,
            flops,
            bytes,
            self.env.clone(),
        );
        r.extra
            .notes
            .insert("imported_from".into(), Value::String(self.name.clone()));
        r
    }
}

/// What an import gives: the records, and what it could not map.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The records: layer passes and steps (for validation), GEMMs, convolutions and ops
    /// of the layers (micro-kernel records, for calibration).
    pub records: Vec<Record>,
    /// Profiled steps.
    pub steps: usize,
    /// Layers matched.
    pub layers: usize,
    /// Ops that are no layer.
    pub unmapped: Vec<Unmapped>,
    /// Layer passes (op kind and pass: `add backward`) that launched no GPU kernel, with
    /// their calls: no record is written of them.
    pub no_kernel: Vec<Unmapped>,
    /// The device the trace timed.
    pub device: Device,
    /// The training precision.
    pub precision: Precision,
    /// Data-parallel ranks, where the trace says.
    pub ranks: Option<usize>,
    /// Each step's collective communication and the part of it after backward, seconds
    /// (empty where the trace has none).
    pub comm: [Vec<f64>; 2],
    /// The host's times, for a trace of a GPU.
    pub host: Option<HostTimes>,
}

/// The records of `trace` mapped onto `graph` (built at the trace's input) at `batch`, as
/// measured on `threads` threads: a `workload-layer` record per layer pass and a
/// `workload-step` record (its `update_s` the optimizer's time), as `ridgeline measure
/// workload` writes them; and for calibration, the convolutions (forward; backward with both
/// gradients in one call, [`ConvPass::Backward`]), the other ops of the layers (forward and
/// backward) and the GEMMs inside them, one record per distinct shape with every call's
/// time as a sample.
pub fn import(trace: &Trace, graph: &Graph, batch: usize, threads: usize) -> Result<Imported> {
    let precision = trace.precision()?;
    let mapped = trace.map(graph)?;
    let device = if trace.on_gpu() {
        Device::Cuda(0)
    } else {
        Device::Cpu
    };
    let source = Source {
        name: format!("PyTorch profiler trace {}", trace.file),
        device,
        threads,
        env: trace.env(threads),
    };
    let make =
        |measured: Measured,
         record_precision: RecordPrecision,
         samples: Vec<f64>,
         flops: f64,
         bytes: f64| { source.record(measured, record_precision, samples, flops, bytes) };
    let run = StepShape {
        workload: graph.name().to_owned(),
        input: graph.input_shape().dims().to_vec(),
        batch,
        ranks: trace.ranks.filter(|&r| r > 1),
    };
    let cost = ridgeline_model::cost::cost(graph, batch as u64, precision);
    let layers = graph.layers();
    let mut records = Vec::new();
    // Micro-kernel records by shape: every call of one shape is a sample of one record.
    let mut kernels: Vec<(Case, Measured, Vec<f64>)> = Vec::new();
    let mut add = |case: Case, samples: &[f64]| -> Result<()> {
        let measured = case.measured().map_err(|e| Error::Input(e.to_string()))?;
        match kernels.iter_mut().find(|(_, m, _)| *m == measured) {
            Some((_, _, s)) => s.extend_from_slice(samples),
            None => kernels.push((case, measured, samples.to_vec())),
        }
        Ok(())
    };
    let format = match precision {
        Precision::AmpFp16 => Format::Fp16,
        Precision::AmpBf16 => Format::Bf16,
        _ => Format::Fp32,
    };
    let mut matched = 0;
    let mut no_kernel: Vec<Unmapped> = Vec::new();
    for (i, (layer, passes)) in layers.iter().zip(&mapped.layers).enumerate() {
        if passes.iter().all(|s| s.is_empty()) {
            continue;
        }
        matched += 1;
        // On a GPU a pass that launched no kernel (a residual add's backward hands its
        // gradient on) took no GPU time: it is listed, and no record of it is written.
        let [forward, backward] = [Pass::Forward, Pass::Backward].map(|pass| {
            let s = &passes[usize::from(pass == Pass::Backward)];
            let timed: Vec<f64> = s.iter().copied().filter(|t| *t > 0.0).collect();
            if timed.is_empty() && !s.is_empty() {
                let name = format!("{} {}", layer.op.kind(), pass.name());
                match no_kernel.iter_mut().find(|u| u.name == name) {
                    Some(u) => u.count += s.len(),
                    None => no_kernel.push(Unmapped {
                        name,
                        count: s.len(),
                        seconds: 0.0,
                    }),
                }
            }
            timed
        });
        let [forward, backward] = [&forward, &backward];
        for (shape, samples, flops, bytes) in
            layer_passes(&run, layer, &cost.layers[i], [forward, backward])
        {
            records.push(make(shape, precision.into(), samples, flops, bytes));
        }
        let input = layers[layer.inputs[0]].output.dims().to_vec();
        match &layer.op {
            Op::Conv(_) => {
                let Some(case) = conv_case(graph, i, batch, format, graph.name()) else {
                    continue;
                };
                if !forward.is_empty() {
                    add(Case::Conv(case.clone(), ConvPass::Forward), forward)?;
                }
                if !backward.is_empty() {
                    add(Case::Conv(case, ConvPass::Backward), backward)?;
                }
            }
            // Products are recorded by the GEMMs they ran.
            Op::Dense { .. } | Op::Linear { .. } | Op::MatMul | Op::ConvTranspose(_) => {}
            op => {
                let case = OpCase {
                    op: op.clone(),
                    input,
                    batch,
                    format,
                };
                for (pass, samples) in [(Pass::Forward, forward), (Pass::Backward, backward)] {
                    if !samples.is_empty() {
                        add(Case::Op(case.clone(), pass), samples)?;
                    }
                }
            }
        }
    }
    for (&(m, n, k), samples) in &mapped.gemms {
        add(Case::Gemm(GemmCase { m, n, k, format }), samples)?;
    }
    for (case, measured, samples) in kernels {
        let (flops, bytes) = case.counts().map_err(|e| Error::Input(e.to_string()))?;
        records.push(make(measured, case.precision(), samples, flops, bytes));
    }
    let mut step = make(
        Measured::WorkloadStep(run),
        precision.into(),
        mapped.steps.clone(),
        cost.flops_train.value(),
        cost.hbm_bytes_train.value(),
    );
    step.extra = Extra {
        update_s: mapped.optimizer.clone(),
        comm_s: mapped.comm.clone(),
        exposed_comm_s: mapped.exposed_comm.clone(),
        bucket_s: mapped.collectives.clone(),
        other_s: mapped.other.clone(),
        ranks: trace.ranks.filter(|&r| r > 1),
        notes: step.extra.notes,
        ..Extra::default()
    };
    records.push(step);
    Ok(Imported {
        records,
        steps: mapped.steps.len(),
        layers: matched,
        unmapped: mapped.unmapped,
        no_kernel,
        device,
        precision,
        ranks: trace.ranks,
        comm: [mapped.comm, mapped.exposed_comm],
        host: mapped.host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TINY: &str = include_str!("../../tests/fixtures/tiny.toml");

    fn tiny() -> Graph {
        ridgeline_model::file::parse_workload(TINY, "tiny.toml", None).unwrap()
    }

    /// A CPU op at `ts` for `dur` microseconds.
    fn op(name: &str, ts: f64, dur: f64, seq: Option<i64>, dims: Value, ext: i64) -> Value {
        let mut args = json!({"External id": ext, "Input Dims": dims, "Input type": ["float"]});
        if let Some(s) = seq {
            args["Sequence number"] = json!(s);
        }
        json!({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
               "dur": dur, "args": args})
    }

    fn annotation(name: &str, ts: f64, dur: f64) -> Value {
        json!({"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1,
               "ts": ts, "dur": dur, "args": {}})
    }

    /// One training step of `tiny` at batch 2 as PyTorch's profiler writes it: forward,
    /// backward (each function with its forward op's sequence number), the optimizer.
    fn events() -> Vec<Value> {
        let x = json!([[2, 3, 8, 8], [8, 3, 3, 3]]);
        let t = json!([[2, 8, 8, 8], [2, 8, 8, 8]]);
        let bw = |f: &str, ts: f64, dur: f64, seq: i64, ext: i64| {
            op(
                &format!("{BACKWARD}{f}"),
                ts,
                dur,
                Some(seq),
                json!([]),
                ext,
            )
        };
        vec![
            annotation("ProfilerStep#1", 0.0, 1000.0),
            op("aten::conv2d", 10.0, 100.0, Some(1), x.clone(), 1),
            op("aten::convolution", 11.0, 98.0, Some(1), x, 2),
            op(
                "aten::batch_norm",
                120.0,
                20.0,
                Some(2),
                json!([[2, 8, 8, 8]]),
                3,
            ),
            op("aten::relu_", 150.0, 5.0, Some(3), json!([[2, 8, 8, 8]]), 4),
            op("aten::add", 160.0, 6.0, Some(4), t, 5),
            op(
                "aten::max_pool2d",
                170.0,
                7.0,
                Some(5),
                json!([[2, 8, 8, 8]]),
                6,
            ),
            op("aten::flatten", 180.0, 1.0, None, json!([[2, 8, 4, 4]]), 7),
            op(
                "aten::linear",
                190.0,
                30.0,
                Some(7),
                json!([[2, 128], [10, 128], [10]]),
                8,
            ),
            op(
                "aten::addmm",
                191.0,
                28.0,
                Some(8),
                json!([[10], [2, 128], [128, 10]]),
                9,
            ),
            op(
                "aten::cross_entropy_loss",
                230.0,
                9.0,
                Some(9),
                json!([[2, 10], [2]]),
                10,
            ),
            op("aten::ones_like", 240.0, 1.0, None, json!([[]]), 11),
            bw("NllLossBackward0", 300.0, 4.0, 9, 12),
            bw("AddmmBackward0", 310.0, 40.0, 8, 13),
            op(
                "aten::mm",
                312.0,
                15.0,
                None,
                json!([[2, 10], [10, 128]]),
                14,
            ),
            op(
                "aten::mm",
                330.0,
                12.0,
                None,
                json!([[10, 2], [2, 128]]),
                15,
            ),
            bw("MaxPool2DWithIndicesBackward0", 360.0, 11.0, 5, 16),
            bw("AddBackward0", 380.0, 2.0, 4, 17),
            bw("ReluBackward0", 390.0, 8.0, 3, 18),
            bw("NativeBatchNormBackward0", 400.0, 25.0, 2, 19),
            bw("ConvolutionBackward0", 430.0, 200.0, 1, 20),
            bw("torch::autograd::AccumulateGrad", 640.0, 3.0, 99, 21),
            annotation("Optimizer.step#SGD.step", 700.0, 100.0),
            op(
                "aten::add_",
                710.0,
                50.0,
                None,
                json!([[8, 3, 3, 3], [8, 3, 3, 3]]),
                22,
            ),
        ]
    }

    fn trace(events: Vec<Value>) -> String {
        json!({"schemaVersion": 1, "deviceProperties": [], "traceEvents": events,
               "baseTimeNanoseconds": 1_700_000_000_000_000_000_u64})
        .to_string()
    }

    #[test]
    fn a_step_maps_onto_the_workload_layers() {
        let t = Trace::parse(&trace(events()), "t.json").unwrap();
        assert_eq!(t.input().unwrap(), (2, vec![3, 8, 8]));
        assert_eq!(t.precision().unwrap(), Precision::Fp32);
        let g = tiny();
        let m = t.map(&g).unwrap();
        let at = |name: &str| {
            let i = g.layers().iter().position(|l| l.name == name).unwrap();
            let [f, b] = &m.layers[i];
            (f.iter().sum::<f64>() * 1e6, b.iter().sum::<f64>() * 1e6)
        };
        let close = |a: (f64, f64), b: (f64, f64)| {
            assert!(
                (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9,
                "{a:?} {b:?}"
            )
        };
        close(at("conv"), (100.0, 200.0));
        close(at("bn"), (20.0, 25.0));
        close(at("relu"), (5.0, 8.0));
        close(at("skip"), (6.0, 2.0));
        close(at("pool"), (7.0, 11.0));
        // The product's backward function holds both of its GEMMs.
        close(at("fc"), (30.0, 40.0));
        close(at("loss"), (9.0, 4.0));
        assert_eq!(m.steps, vec![1000.0 / 1e6]);
        assert!((m.optimizer[0] - 50.0 / 1e6).abs() < 1e-15);
        // Forward addmm (m 2, n 10, k 128) and the backward mm's.
        let shapes: Vec<GemmKey> = m.gemms.keys().copied().collect();
        assert_eq!(shapes, vec![(2, 10, 128), (2, 128, 10), (10, 128, 2)]);
        let names: Vec<&str> = m.unmapped.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "aten::flatten",
                "aten::ones_like",
                "torch::autograd::AccumulateGrad"
            ]
        );
    }

    #[test]
    fn records_validate_and_calibrate() {
        let t = Trace::parse(&trace(events()), "t.json").unwrap();
        let imported = import(&t, &tiny(), 2, 1).unwrap();
        assert_eq!((imported.steps, imported.layers), (1, 7));
        let kinds = |k: ridgeline_measure::RecordKind| {
            imported.records.iter().filter(|r| r.kind() == k).count()
        };
        use ridgeline_measure::RecordKind as K;
        assert_eq!(kinds(K::WorkloadStep), 1);
        assert_eq!(kinds(K::WorkloadLayer), 14);
        assert_eq!(kinds(K::Conv), 2);
        assert_eq!(kinds(K::Gemm), 3);
        // bn, relu, skip, pool, loss: forward and backward.
        assert_eq!(kinds(K::Op), 10);
        for r in &imported.records {
            r.check().unwrap();
            assert_eq!(
                r.extra.notes["imported_from"],
                json!("PyTorch profiler trace t.json")
            );
        }
        // The convolution's backward call holds both gradients: each backward pass's fit
        // sees the sum of the two kernels' features.
        let backward = imported
            .records
            .iter()
            .find(|r| matches!(&r.measured, Measured::Conv(c) if c.pass == ConvPass::Backward))
            .unwrap();
        let Measured::Conv(shape) = &backward.measured else {
            unreachable!()
        };
        let ks = crate::records::conv_kernels("t", backward, shape).unwrap();
        assert_eq!(ks.len(), 2);
        assert_eq!(ks[0].x, ks[1].x);
        let data = crate::records::conv_kernels(
            "t",
            backward,
            &ridgeline_measure::record::ConvShape {
                pass: ConvPass::BackwardData,
                ..shape.clone()
            },
        )
        .unwrap();
        assert!(ks[0].x[1] > data[0].x[1]);
    }

    #[test]
    fn communication_is_counted_and_what_runs_past_backward_is_exposed() {
        let mut ev = events();
        // Two allreduces on the process group's thread: one beside backward, one ending
        // 60 us after the last backward function (it ends at 643 us).
        for (ts, dur) in [(400.0, 50.0), (600.0, 103.0)] {
            ev.push(
                json!({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce",
                           "pid": 1, "tid": 9, "ts": ts, "dur": dur, "args": {}}),
            );
        }
        let mut root: Value = serde_json::from_str(&trace(ev)).unwrap();
        root["distributedInfo"] = json!({"backend": "gloo", "rank": 0, "world_size": 2});
        let t = Trace::parse(&root.to_string(), "t.json").unwrap();
        let m = t.map(&tiny()).unwrap();
        assert!((m.comm[0] - 153e-6).abs() < 1e-12, "{:?}", m.comm);
        assert!(
            (m.exposed_comm[0] - 60e-6).abs() < 1e-12,
            "{:?}",
            m.exposed_comm
        );
        let imported = import(&t, &tiny(), 2, 1).unwrap();
        let step = imported.records.last().unwrap();
        assert_eq!(step.extra.ranks, Some(2));
        assert_eq!(step.extra.comm_s, m.comm);
        assert_eq!(step.extra.exposed_comm_s, m.exposed_comm);
        step.check().unwrap();
        // A trace without collectives records none.
        let plain = Trace::parse(&trace(events()), "t.json").unwrap();
        assert!(plain.map(&tiny()).unwrap().comm.is_empty());
    }

    #[test]
    fn gpu_ops_take_their_kernels_time() {
        let mut ev = events();
        // The forward convolution launches two kernels, its backward one.
        for (ext, dur) in [(2, 40.0), (2, 10.0), (20, 70.0)] {
            ev.push(
                json!({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,
                           "ts": 0.0, "dur": dur, "args": {"External id": ext}}),
            );
        }
        let t = Trace::parse(&trace(ev), "t.json").unwrap();
        assert!(t.on_gpu());
        let g = tiny();
        let m = t.map(&g).unwrap();
        assert!((m.layers[1][0][0] - 50e-6).abs() < 1e-15);
        assert!((m.layers[1][1][0] - 70e-6).abs() < 1e-15);
        // An op that launched nothing took no GPU time.
        assert_eq!(m.layers[2][0][0], 0.0);
    }

    #[test]
    fn bad_traces_are_refused_with_where() {
        let text = trace(events());
        let e = Trace::parse(&text[..text.len() / 2], "t.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.json: line 1 column"), "{e}");
        let e = Trace::parse("{\"x\": 1}", "t.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no `traceEvents`"), "{e}");
        let mut ev = events();
        ev[3].as_object_mut().unwrap().remove("ts");
        let e = Trace::parse(&trace(ev), "t.json").unwrap_err().to_string();
        assert!(e.contains("event 3") && e.contains("`ts`"), "{e}");
        // Layers in another order than the workload's.
        let mut ev = events();
        ev.swap(3, 4);
        let (a, b) = (ev[3]["ts"].clone(), ev[4]["ts"].clone());
        ev[3]["ts"] = b;
        ev[4]["ts"] = a;
        let t = Trace::parse(&trace(ev), "t.json").unwrap();
        let e = t.map(&tiny()).unwrap_err().to_string();
        assert!(
            e.contains("`aten::relu_`") && e.contains("next layer `bn` is a `batch-norm`"),
            "{e}"
        );
        // A step cut short.
        let ev: Vec<Value> = events().into_iter().take(6).collect();
        let e = Trace::parse(&trace(ev), "t.json")
            .unwrap()
            .map(&tiny())
            .unwrap_err()
            .to_string();
        assert!(e.contains("ran 4 of workload `tiny`'s 7 layers"), "{e}");
    }
}
