//! The column sets commands print and reports carry: one definition per table, so that a
//! command's output and the report built from the same result never disagree.

use ridgeline_calibrate::comm::{CommPoint, CommValidation};
use ridgeline_calibrate::stats::median;
use ridgeline_calibrate::transfer::Holdout;
use ridgeline_calibrate::validate::{LayerPoint, StepPoint, Validation};
use ridgeline_measure::{Measured, Pass, Record, StepRun};
use ridgeline_model::graph::{Graph, Shape};
use ridgeline_model::memory::{Footprint, MemoryRow, Optimizer};
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::Movement;
use ridgeline_model::profile::Profile;
use ridgeline_model::published::Figure as PublishedFigure;
use ridgeline_model::roofline::{Bound, PeakClass, RooflineLayer};
use ridgeline_model::scale::ScaleRow;
use ridgeline_model::units::{ByteRate, Bytes, FlopRate, Seconds};
use serde::Serialize;

use crate::columns::{Col, Style, num, text};
use crate::validation::Published;

/// Data movement per sample: each source, the level it crosses, bytes and cost (\[004\] Fig. 4).
pub fn movement_cols() -> [Col<Movement>; 6] {
    [
        text("source", "source", |r, _| r.source.to_owned()),
        text("level", "level", |r, _| r.level.to_string()),
        num("bytes/sample", "bytes_per_sample", |r, s| {
            s.bytes(Bytes::new(r.bytes_per_sample))
        }),
        num("gap (s/B)", "gap_s_per_byte", |r, _| {
            format!("{:.3e}", r.gap_s_per_byte)
        }),
        num("rel. cost", "relative_cost", |r, s| {
            s.number(Some(r.relative_cost), 1)
        }),
        num("cost/sample", "cost_per_sample_s", |r, s| {
            s.seconds(Seconds::new(r.cost_per_sample_s))
        }),
    ]
}

/// Memory per device by component, one row per batch size.
pub fn memory_cols() -> [Col<MemoryRow>; 11] {
    [
        num("batch", "batch", |r, s| s.count(r.batch)),
        num("params", "parameters", |r, s| s.bytes(r.parameters)),
        num("grads", "gradients", |r, s| s.bytes(r.gradients)),
        num("optimizer", "optimizer_state", |r, s| {
            s.bytes(r.optimizer_state)
        }),
        num("buffers", "buffers", |r, s| s.bytes(r.buffers)),
        num("workspace", "workspace", |r, s| s.bytes(r.workspace)),
        num("input", "input", |r, s| s.bytes(r.input)),
        num("activations", "activations", |r, s| s.bytes(r.activations)),
        num("act. grads", "activation_gradients", |r, s| {
            s.bytes(r.activation_gradients)
        }),
        num("total", "total", |r, s| s.bytes(r.total)),
        num("fits", "fits", |r, _| {
            if r.fits { "yes" } else { "no" }.to_owned()
        }),
    ]
}

/// A roofline's layers: FLOPs, bytes, intensity, time and bound.
pub fn roofline_cols<'g>() -> [Col<RooflineLayer<'g>>; 10] {
    [
        text("layer", "name", |r, _| r.name.to_owned()),
        text("op", "op", |r, _| r.op.to_owned()),
        text("peak", "peak", |r, _| match r.peak {
            PeakClass::Matrix => "matrix".to_owned(),
            PeakClass::Vector => "vector".to_owned(),
        }),
        num("FLOP", "flops", |r, s| s.flops(r.flops)),
        num("HBM bytes", "bytes", |r, s| s.bytes(r.bytes)),
        num("FLOP/B", "arithmetic_intensity", |r, s| {
            s.number(r.arithmetic_intensity, 1)
        }),
        num("time", "time", |r, s| s.seconds(r.time)),
        text("bound", "bound", |r, _| {
            match r.bound {
                Bound::Compute => "compute",
                Bound::Memory => "memory",
                Bound::None => "-",
            }
            .to_owned()
        }),
        num("attained", "attained", |r, s| s.flop_rate(r.attained)),
        num("transfer model", "transferred", |r, s| {
            r.transferred.map_or_else(String::new, |t| s.seconds(t))
        }),
    ]
}

/// A scaling series: one row per node count.
pub fn scale_cols() -> [Col<ScaleRow>; 15] {
    [
        num("nodes", "nodes", |r, s| s.count(u64::from(r.nodes))),
        num("models", "models", |r, s| s.count(u64::from(r.models))),
        num("batch", "local_batch", |r, s| s.count(r.local_batch)),
        text("input", "input_size", |r, _| {
            r.input_size
                .as_ref()
                .map_or_else(String::new, |d| Shape::new(d).to_string())
        }),
        num("width", "width", |r, s| s.number(r.width, 2)),
        num("global", "global_batch", |r, s| {
            r.outcome
                .map_or_else(String::new, |o| s.count(o.global_batch))
        }),
        num("step", "step_time_s", |r, s| {
            r.outcome
                .map_or_else(String::new, |o| s.seconds(o.step_time_s))
        }),
        num("90 % lo", "step_time_lo_s", |r, s| {
            r.outcome
                .map_or_else(String::new, |o| s.seconds(o.step_time_lo_s))
        }),
        num("90 % hi", "step_time_hi_s", |r, s| {
            r.outcome
                .map_or_else(String::new, |o| s.seconds(o.step_time_hi_s))
        }),
        text("bound", "bound", |r, _| {
            r.outcome
                .map_or_else(String::new, |o| o.bound.name().to_owned())
        }),
        text("timed by", "compute_timed_by", |r, _| {
            r.outcome
                .map_or_else(String::new, |o| o.compute_timed_by.short())
        }),
        num("samples/s", "throughput", |r, s| s.number(r.throughput, 1)),
        num("time to solution", "time_to_solution_s", |r, s| {
            r.outcome
                .map_or_else(String::new, |o| s.seconds(o.time_to_solution_s))
        }),
        num("speedup", "speedup", |r, s| s.number(r.speedup, 2)),
        num("efficiency", "efficiency", |r, s| s.number(r.efficiency, 2)),
    ]
}

/// Predicted against measured training steps: time and peak memory.
pub fn step_cols() -> [Col<StepPoint>; 9] {
    [
        text("workload", "workload", |r, _| {
            if r.precision == Precision::Fp32.name() {
                r.workload.clone()
            } else {
                format!("{} {}", r.workload, r.precision)
            }
        }),
        text("input", "input", |r, _| {
            r.input
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join("x")
        }),
        num("batch", "batch", |r, _| r.batch.to_string()),
        num("predicted", "predicted_s", |r, s| {
            s.seconds(Seconds::new(r.predicted_s))
        }),
        num("measured", "measured_s", |r, s| {
            s.seconds(Seconds::new(r.measured_s))
        }),
        num("error", "rel_error", |r, s| signed_percent(r.rel_error, s)),
        num("memory (model)", "predicted_memory_bytes", |r, s| {
            s.bytes(Bytes::new(r.predicted_memory_bytes))
        }),
        num("memory (measured)", "measured_memory_bytes", |r, s| {
            r.measured_memory_bytes
                .map(|b| s.bytes(Bytes::new(b)))
                .unwrap_or_default()
        }),
        num("memory error", "memory_rel_error", |r, s| {
            r.memory_rel_error
                .map(|e| signed_percent(e, s))
                .unwrap_or_default()
        }),
    ]
}

/// Predicted against measured layer passes.
pub fn layer_cols() -> [Col<LayerPoint>; 7] {
    [
        text("workload", "workload", |r, _| {
            format!("{} b{}", r.workload, r.batch)
        }),
        text("layer", "layer", |r, _| r.layer.clone()),
        text("op", "op", |r, _| r.op.clone()),
        text("pass", "pass", |r, _| r.pass.clone()),
        num("predicted", "predicted_s", |r, s| {
            s.seconds(Seconds::new(r.predicted_s))
        }),
        num("measured", "measured_s", |r, s| {
            s.seconds(Seconds::new(r.measured_s))
        }),
        num("error", "rel_error", |r, s| signed_percent(r.rel_error, s)),
    ]
}

/// The summary lines of a collective validation: all points, then each algorithm, then
/// the transport of each LogGP level of `profile`.
pub fn comm_summary_lines(v: &CommValidation, profile: &Profile) -> Vec<(String, String)> {
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let mut lines = vec![(
        "all".to_owned(),
        format!(
            "geometric mean |error| {}, median {}, max {}, bias {:+.1}% over {} points",
            pct(v.summary.geomean_abs_rel_error),
            pct(v.summary.median_abs_rel_error),
            pct(v.summary.max_abs_rel_error),
            100.0 * v.summary.bias,
            v.summary.points
        ),
    )];
    for a in &v.algorithms {
        lines.push((
            a.algorithm.clone(),
            format!(
                "geometric mean |error| {}, max {} over {} points",
                pct(a.summary.geomean_abs_rel_error),
                pct(a.summary.max_abs_rel_error),
                a.summary.points
            ),
        ));
    }
    for l in &profile.comm {
        lines.push((format!("level {}", l.level.name()), l.transport.clone()));
    }
    lines
}

/// One summary line per built-in workload checked against its reference layer table.
pub fn published_summary_lines(v: &Published, style: Style) -> Vec<(String, String)> {
    v.layers
        .iter()
        .map(|c| {
            (
                c.workload.clone(),
                format!(
                    "{} of {} layers as data/evidence/reference/ lists them ({} mismatched); {} parameters (reference {}), {:.3} GMAC/sample (reference {:.3})",
                    c.layers - c.mismatches.len().min(c.layers),
                    c.reference_layers,
                    c.mismatches.len(),
                    style.count(c.params),
                    style.count(c.reference_params),
                    c.macs_fwd as f64 / 1e9,
                    c.reference_macs_fwd as f64 / 1e9
                ),
            )
        })
        .collect()
}

/// The simulated step in words: its time, buckets and exposed communication (`predict
/// --timeline` and the workload report).
pub fn simulated_step(sim: &ridgeline_model::sim::Simulated) -> String {
    let s = Style::Human;
    format!(
        "{} ({} gradient buckets; communication exposed after backward {})",
        s.seconds(ridgeline_model::units::Seconds::new(sim.step_s)),
        sim.buckets,
        s.seconds(ridgeline_model::units::Seconds::new(sim.exposed_comm_s))
    )
}

/// The summary lines of a validation: step, layer and memory error statistics.
pub fn summary_lines(v: &Validation) -> Vec<(String, String)> {
    let s = &v.summary;
    let pct = |x: f64| signed_percent(x, Style::Human);
    let mut lines = vec![
        (
            "step time |error|".into(),
            format!(
                "median {:.1}%, mean {:.1}%, 90th percentile {:.1}%, max {:.1}% over {} steps (bias {})",
                100.0 * s.steps.median_abs_rel_error,
                100.0 * s.steps.mean_abs_rel_error,
                100.0 * s.steps.p90_abs_rel_error,
                100.0 * s.steps.max_abs_rel_error,
                s.steps.n,
                pct(s.steps.bias)
            ),
        ),
        (
            "layer time |error|".into(),
            format!(
                "median {:.1}%, 90th percentile {:.1}% over {} layer passes (bias {})",
                100.0 * s.layers.median_abs_rel_error,
                100.0 * s.layers.p90_abs_rel_error,
                s.layers.n,
                pct(s.layers.bias)
            ),
        ),
    ];
    // Imported traces record memory only where they profiled it.
    if s.memory.n > 0 {
        lines.push((
            "peak memory |error|".into(),
            format!(
                "median {:.1}%, max {:.1}% (bias {})",
                100.0 * s.memory.median_abs_rel_error,
                100.0 * s.memory.max_abs_rel_error,
                pct(s.memory.bias)
            ),
        ));
    }
    if s.interval_steps > 0 {
        lines.push((
            "step 90 % interval".into(),
            format!(
                "{:.0}% of {} measured steps inside their predicted interval{}",
                100.0 * s.interval_coverage,
                s.interval_steps,
                band_note(&v.steps)
            ),
        ));
    }
    lines
}

/// Where the steps' intervals come from: the stacks whose validated steps gave them.
fn band_note(steps: &[ridgeline_calibrate::validate::StepPoint]) -> String {
    let mut from: Vec<String> = steps
        .iter()
        .filter_map(|s| s.band.as_ref())
        .map(|b| b.source())
        .collect();
    from.sort();
    from.dedup();
    if from.is_empty() {
        return String::new();
    }
    format!(
        " (the band of measured over predicted time of the steps validated {}, each step's own left out)",
        from.join(" and ")
    )
}

/// A relative error as a signed percentage (raw: the fraction).
pub fn signed_percent(x: f64, style: Style) -> String {
    match style {
        Style::Human => format!("{:+.1}%", 100.0 * x),
        Style::Raw => x.to_string(),
    }
}

/// A measurement record as printed: its case described, the median of its samples and
/// the rates.
#[derive(Debug, Serialize)]
pub struct RecordRow {
    kind: String,
    case: String,
    precision: String,
    threads: usize,
    samples: usize,
    median_s: f64,
    flop_rate: f64,
    byte_rate: f64,
}

fn describe(r: &Record) -> String {
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join("x");
    match &r.measured {
        Measured::Gemm(g) => format!("{}x{}x{}", g.m, g.n, g.k),
        Measured::Conv(c) => format!(
            "{} {} n{} {}->{} {} k{}{}{}",
            c.pass.name(),
            c.source,
            c.n,
            c.c_in,
            c.c_out,
            list(&c.input),
            list(&c.kernel),
            if c.groups == 1 {
                String::new()
            } else {
                format!(" g{}", c.groups)
            },
            if c.dilation.iter().any(|&d| d != 1) {
                format!(" d{}", list(&c.dilation))
            } else {
                String::new()
            },
        ),
        Measured::Stream(k) => format!("{} {} KiB", k.kernel.name(), k.array_bytes / 1024),
        Measured::Op(o) => format!(
            "{} {} n{} {}",
            o.op.op,
            o.pass.name(),
            o.batch,
            list(&o.input)
        ),
        Measured::CommPrtt(p) => format!(
            "PRTT(n={}{}) {} B, ranks {}-{}",
            p.messages,
            if p.delayed { ", delayed" } else { "" },
            p.bytes,
            p.pair[0],
            p.pair[1],
        ),
        Measured::CommExchange(e) => {
            format!("exchange {} B, ranks {}-{}", e.bytes, e.pair[0], e.pair[1])
        }
        Measured::CommReduce(c) => format!("a += b, {} B", c.bytes),
        Measured::CommAllreduce(a) => format!(
            "{} {} B, {}",
            a.algorithm,
            a.bytes,
            match (a.ranks, a.gpus) {
                (Some(n), _) => format!("{n} ranks"),
                (None, Some(n)) => format!("{n} GPUs"),
                (None, None) => "ranks not recorded".to_owned(),
            }
        ),
        Measured::CommAlltoall(a) => format!("{} B per pair, {} ranks", a.bytes, a.ranks),
        Measured::Copy(_) | Measured::WorkloadLayer(_) | Measured::WorkloadStep(_) => {
            r.measured.shape_json().to_string()
        }
    }
}

/// One row per record.
pub fn record_rows(records: &[Record]) -> Vec<RecordRow> {
    records
        .iter()
        .map(|r| {
            let t = median(&r.samples_s);
            RecordRow {
                kind: r.kind().name().to_owned(),
                case: describe(r),
                precision: r.precision.to_string(),
                threads: r.threads,
                samples: r.samples_s.len(),
                median_s: t,
                flop_rate: r.flops / t,
                byte_rate: r.bytes / t,
            }
        })
        .collect()
}

/// The columns of measured records.
pub fn record_cols() -> [Col<RecordRow>; 7] {
    [
        text("kind", "kind", |r, _| r.kind.clone()),
        text("case", "case", |r, _| r.case.clone()),
        text("precision", "precision", |r, _| r.precision.clone()),
        num("threads", "threads", |r, s| s.count(r.threads as u64)),
        num("median", "median_s", |r, s| {
            s.seconds(Seconds::new(r.median_s))
        }),
        num("FLOP/s", "flop_rate", |r, s| {
            s.flop_rate(FlopRate::new(r.flop_rate))
        }),
        num("bytes/s", "byte_rate", |r, s| {
            s.byte_rate(ByteRate::new(r.byte_rate))
        }),
    ]
}

/// One layer's row of a measured training step: its forward and backward medians, its
/// share of the step and its FLOP rate.
#[derive(Debug, Serialize)]
pub struct LayerRow {
    layer: String,
    op: String,
    forward_s: f64,
    backward_s: f64,
    share: f64,
    flop_rate: f64,
}

/// The layers of `graph` as `run` measured them, in order; with `top` above 0, only the
/// `top` slowest, slowest first.
pub fn step_layer_rows(graph: &Graph, run: &StepRun<'_>, top: usize) -> Vec<LayerRow> {
    let step_s = median(&run.step.samples_s);
    let mut rows: Vec<LayerRow> = graph
        .layers()
        .iter()
        .skip(1)
        .map(|l| {
            let (f, b) = (
                run.layer(&l.name, Pass::Forward),
                run.layer(&l.name, Pass::Backward),
            );
            let t = |r: Option<&Record>| r.map_or(0.0, |r| median(&r.samples_s));
            let flops = f.map_or(0.0, |r| r.flops) + b.map_or(0.0, |r| r.flops);
            let time = t(f) + t(b);
            LayerRow {
                layer: l.name.to_string(),
                op: l.op.kind().to_owned(),
                forward_s: t(f),
                backward_s: t(b),
                share: time / step_s,
                flop_rate: if time > 0.0 { flops / time } else { 0.0 },
            }
        })
        .collect();
    if top > 0 {
        rows.sort_by(|a, b| (b.forward_s + b.backward_s).total_cmp(&(a.forward_s + a.backward_s)));
        rows.truncate(top);
    }
    rows
}

/// The columns of a measured step's layers.
pub fn step_layer_cols() -> [Col<LayerRow>; 6] {
    [
        text("layer", "layer", |r, _| r.layer.clone()),
        text("op", "op", |r, _| r.op.clone()),
        num("forward", "forward_s", |r, s| {
            s.seconds(Seconds::new(r.forward_s))
        }),
        num("backward", "backward_s", |r, s| {
            s.seconds(Seconds::new(r.backward_s))
        }),
        num("share", "share", |r, s| match s {
            Style::Human => format!("{:.1}%", 100.0 * r.share),
            Style::Raw => r.share.to_string(),
        }),
        num("FLOP/s", "flop_rate", |r, s| {
            s.flop_rate(FlopRate::new(r.flop_rate))
        }),
    ]
}

/// Predicted against measured allreduce.
pub fn comm_cols() -> [Col<CommPoint>; 6] {
    [
        text("algorithm", "algorithm", |p, _| p.algorithm.clone()),
        num("ranks", "ranks", |p, s| s.count(u64::from(p.ranks))),
        num("bytes", "bytes", |p, s| s.bytes(Bytes::new(p.bytes as f64))),
        num("predicted", "predicted_s", |p, s| {
            s.seconds(Seconds::new(p.predicted_s))
        }),
        num("measured", "measured_s", |p, s| {
            s.seconds(Seconds::new(p.measured_s))
        }),
        num("error", "rel_error", |p, s| signed_percent(p.rel_error, s)),
    ]
}

/// Leave-one-GPU-out errors of the transferable kernel model.
pub fn holdout_cols() -> [Col<Holdout>; 7] {
    fn pct(v: f64, s: Style) -> String {
        match s {
            Style::Raw => v.to_string(),
            // No interval: a row of the fit's own residuals, or whole steps.
            Style::Human if v.is_nan() => "-".to_owned(),
            Style::Human => format!("{:.1}%", 100.0 * v),
        }
    }
    [
        text("class", "class", |h, _| h.class.clone()),
        text("held out", "device", |h, _| h.device.clone()),
        num("kernels", "points", |h, s| s.count(h.points as u64)),
        num("median |error|", "median_abs_rel_error", |h, s| {
            pct(h.median_abs_rel_error, s)
        }),
        num("90th pct", "p90_abs_rel_error", |h, s| {
            pct(h.p90_abs_rel_error, s)
        }),
        num("bias", "bias", |h, s| signed_percent(h.bias, s)),
        num("90% interval coverage", "coverage_90", |h, s| {
            pct(h.coverage_90, s)
        }),
    ]
}

/// A pipeline's stages, one micro-batch each ([`ridgeline_model::parallel::Stage`]).
pub fn stage_cols() -> [Col<ridgeline_model::parallel::Stage>; 10] {
    fn t(v: f64, s: Style) -> String {
        s.seconds(Seconds::new(v))
    }
    [
        text("transformer layers", "layers", |st, _| {
            format!("{}..{}", st.layers[0], st.layers[1])
        }),
        num("forward", "forward_s", |st, s| t(st.forward_s, s)),
        num("backward", "backward_s", |st, s| t(st.backward_s, s)),
        num("tensor allreduce", "tensor_allreduce_s", |st, s| {
            t(st.tensor_allreduce_s, s)
        }),
        num("exposed", "tensor_exposed_s", |st, s| {
            t(st.tensor_exposed_s, s)
        }),
        num("point to point", "p2p_s", |st, s| t(st.p2p_s, s)),
        num("all-to-all", "expert_alltoall_s", |st, s| {
            t(st.expert_alltoall_s, s)
        }),
        num("params", "params", |st, s| s.count(st.params)),
        num("model states", "model_state_bytes", |st, s| {
            s.bytes(ridgeline_model::units::Bytes::new(st.model_state_bytes))
        }),
        num("memory", "memory_bytes", |st, s| {
            s.bytes(ridgeline_model::units::Bytes::new(st.memory_bytes))
        }),
    ]
}

/// Whole training steps of GPUs outside the kernel model's fit, measured and predicted.
pub fn step_label_cols() -> [Col<crate::validation::StepCheck>; 9] {
    [
        text("GPU", "device", |c, _| c.device.clone()),
        text("model", "model", |c, _| {
            if c.parallel.is_empty() {
                c.model.clone()
            } else {
                format!("{} {}", c.model, c.parallel)
            }
        }),
        num("batch", "batch", |c, s| s.count(c.batch)),
        num("tokens", "seq", |c, s| s.count(c.seq)),
        num("measured", "measured_s", |c, s| {
            s.seconds(Seconds::new(c.measured_s))
        }),
        num("predicted", "predicted_s", |c, s| {
            s.seconds(Seconds::new(c.predicted_s))
        }),
        num("forward meas. / pred.", "forward_s", |c, s| match s {
            Style::Raw => format!("{}/{}", c.forward_s[0], c.forward_s[1]),
            Style::Human => format!(
                "{} / {}",
                s.seconds(Seconds::new(c.forward_s[0])),
                s.seconds(Seconds::new(c.forward_s[1]))
            ),
        }),
        num("error", "error", |c, s| signed_percent(c.error, s)),
        num("90 % interval", "interval_s", |c, s| match s {
            Style::Raw => format!("{}/{}", c.interval_s[0], c.interval_s[1]),
            Style::Human => format!(
                "{} to {}{}",
                s.seconds(Seconds::new(c.interval_s[0])),
                s.seconds(Seconds::new(c.interval_s[1])),
                if c.inside { "" } else { " (out)" }
            ),
        }),
    ]
}

/// The model's counts beside published figures.
pub fn published_cols() -> [Col<PublishedFigure>; 6] {
    [
        text("workload", "workload", |f, _| {
            if f.paper_workload.eq_ignore_ascii_case(&f.workload) {
                f.workload.clone()
            } else {
                format!("{} ({})", f.workload, f.paper_workload)
            }
        }),
        text("quantity", "quantity", |f, _| f.quantity.to_owned()),
        num("published", "published", |f, s| figure(f, f.published, s)),
        num("model", "model", |f, s| figure(f, f.model, s)),
        num("model / published", "ratio", |f, s| match s {
            Style::Raw => f.ratio.to_string(),
            Style::Human => format!("{:.2}", f.ratio),
        }),
        text("unit", "unit", |f, _| f.unit.to_owned()),
    ]
}

/// A published or modelled figure in its unit.
fn figure(f: &PublishedFigure, x: f64, s: Style) -> String {
    match (f.unit, s) {
        (_, Style::Raw) => x.to_string(),
        ("bytes", _) => s.bytes(Bytes::new(x)),
        ("FLOP", _) => format!("{:.1} GFLOP", x / 1e9),
        _ => format!("{x:.0}"),
    }
}

/// What a measured step says beside its layers: the device, the step's median, FLOP rate
/// and update, samples per second, peak memory (the executor's and the process's), dynamic
/// loss scaling, and the model's footprint at `precision` for comparison.
pub fn step_summary(
    graph: &Graph,
    run: &StepRun<'_>,
    batch: usize,
    precision: Precision,
) -> Vec<(String, String)> {
    let step = run.step;
    let s = Style::Human;
    let step_s = median(&step.samples_s);
    let extra = &step.extra;
    let peak = extra.peak_bytes.unwrap_or(0) as f64;
    let update = if extra.update_s.is_empty() {
        0.0
    } else {
        median(&extra.update_s)
    };
    let mut lines = vec![
        (
            "device".to_owned(),
            match &step.env.gpu {
                Some(g) => format!("{} (compute capability {})", g.name, g.compute_capability),
                None => format!("{} ({} cores)", step.env.cpu_model, step.env.cores),
            },
        ),
        (
            "step".to_owned(),
            format!(
                "{} median of {} steps ({}), SGD update {}",
                s.seconds(Seconds::new(step_s)),
                step.samples_s.len(),
                s.flop_rate(FlopRate::new(step.flops / step_s)),
                s.seconds(Seconds::new(update))
            ),
        ),
        (
            "samples per second".to_owned(),
            format!("{:.2}", batch as f64 / step_s),
        ),
        (
            "peak memory (executor)".to_owned(),
            s.bytes(Bytes::new(peak)),
        ),
    ];
    if let Some(rss) = extra.peak_rss_bytes {
        lines.push((
            "peak resident set (process)".to_owned(),
            s.bytes(Bytes::new(rss as f64)),
        ));
    }
    if let Some(&last) = extra.loss_scale.last() {
        let scales = &extra.loss_scale;
        lines.push((
            "loss scale (dynamic)".to_owned(),
            format!(
                "{last} at the last step; {} of {} updates skipped on overflow",
                extra.skipped_updates.unwrap_or(0),
                scales.len()
            ),
        ));
    }
    let footprint =
        Footprint::of(graph, precision, Optimizer::Sgd).at(batch as u64, Bytes::new(f64::INFINITY));
    lines.push((
        format!("model footprint (SGD, {})", precision.name()),
        s.bytes(footprint.total),
    ));
    lines
}

/// MLPerf runs as `ridgeline import mlperf` lists them.
pub fn mlperf_run_cols() -> [Col<ridgeline_calibrate::mlperf::RunRecord>; 12] {
    use ridgeline_calibrate::mlperf::RunRecord;
    fn secs(v: Option<f64>, s: Style) -> String {
        v.map(|v| s.seconds(Seconds::new(v))).unwrap_or_default()
    }
    fn short(r: &RunRecord) -> String {
        // The log's folder names the system; keep the last three parts of its path.
        let parts: Vec<&str> = r.file.rsplit(['/', '\\']).take(3).collect();
        parts.into_iter().rev().collect::<Vec<_>>().join("/")
    }
    [
        text("run", "file", |r: &RunRecord, _| short(r)),
        text("benchmark", "benchmark", |r, _| r.benchmark.clone()),
        text("accelerators", "accelerators", |r, _| {
            match (&r.accelerators_per_node, &r.accelerator) {
                (Some(k), Some(a)) => format!("{} x {k} x {a}", r.nodes),
                _ => r.platform.clone(),
            }
        }),
        num("global batch", "global_batch", |r, s| {
            s.count(r.global_batch)
        }),
        num("epochs", "epochs", |r, s| s.count(u64::from(r.epochs))),
        num("init", "init_s", |r, s| secs(r.init_s, s)),
        num("epoch", "epoch_s", |r, s| secs(r.epoch_s, s)),
        num("evaluations", "eval_s", |r, s| {
            s.seconds(Seconds::new(r.eval_s))
        }),
        num("samples/s", "throughput", |r, s| s.number(r.throughput, 0)),
        text("from", "method", |r, _| {
            r.method.clone().unwrap_or_default()
        }),
        num("time to train", "time_to_train_s", |r, s| {
            s.seconds(Seconds::new(r.time_to_train_s))
        }),
        text("status", "status", |r, _| r.status.clone()),
    ]
}

/// Imported runs against their prediction (`ridgeline validate --measured runs.jsonl`).
pub fn run_check_cols() -> [Col<crate::runs::RunCheck>; 13] {
    use crate::runs::RunCheck;
    fn pct(v: Option<f64>, s: Style) -> String {
        v.map(|v| signed_percent(v, s)).unwrap_or_default()
    }
    [
        text("run system", "run_system", |r: &RunCheck, _| {
            r.run_system.clone()
        }),
        num("devices", "devices", |r, s| s.count(r.devices)),
        num("global batch", "global_batch", |r, s| {
            s.count(r.global_batch)
        }),
        num("epochs", "epochs", |r, s| s.count(u64::from(r.epochs))),
        num("curve", "predicted_epochs", |r, s| {
            s.number(r.predicted_epochs, 1)
        }),
        num("samples/s meas.", "measured_throughput", |r, s| {
            s.number(r.measured_throughput, 0)
        }),
        num("pred.", "predicted_throughput", |r, s| {
            s.number(Some(r.predicted_throughput), 0)
        }),
        num("error", "throughput_error", |r, s| {
            pct(r.throughput_error, s)
        }),
        num("epoch meas.", "measured_epoch_s", |r, s| {
            r.measured_epoch_s
                .map(|v| s.seconds(Seconds::new(v)))
                .unwrap_or_default()
        }),
        num("pred.", "predicted_epoch_s", |r, s| {
            s.seconds(Seconds::new(r.predicted_epoch_s))
        }),
        num("time to train meas.", "measured_time_to_train_s", |r, s| {
            s.seconds(Seconds::new(r.measured_time_to_train_s))
        }),
        num("pred.", "predicted_time_to_train_s", |r, s| {
            s.seconds(Seconds::new(r.predicted_time_to_train_s))
        }),
        num("error", "time_to_train_error", |r, s| {
            signed_percent(r.time_to_train_error, s)
        }),
    ]
}

/// Kernels by NVTX range of an Nsight Systems report (`ridgeline import nsys`).
pub fn nsys_range_cols() -> [Col<ridgeline_calibrate::nsys::RangeRow>; 5] {
    use ridgeline_calibrate::nsys::RangeRow;
    [
        text("NVTX range", "range", |r: &RangeRow, _| {
            if r.range.is_empty() {
                "(none)".into()
            } else {
                r.range.clone()
            }
        }),
        num("calls", "calls", |r, s| s.count(r.calls as u64)),
        num("kernels", "kernels", |r, s| s.count(r.kernels as u64)),
        num("kernel time", "kernel_s", |r, s| {
            s.seconds(Seconds::new(r.kernel_s))
        }),
        text("kernels, most time first", "kernel_names", |r, _| {
            let mut names = r
                .kernel_names
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ");
            if r.kernel_names.len() > 3 {
                names.push_str(", ...");
            }
            names
        }),
    ]
}

/// The summary lines of imported runs against `predict`: the time to train's error and
/// interval coverage, and the throughput's error where the runs log it.
pub fn run_summary_lines(v: &crate::runs::RunValidation) -> Vec<(String, String)> {
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let mut lines = vec![(
        "time to train".to_owned(),
        format!(
            "{} runs, median |error| {}, bias {:+.1}%, {:.0}% inside the 90 % interval",
            v.runs.len(),
            pct(v.median_abs_error),
            100.0 * v.bias,
            100.0 * v.interval_coverage
        ),
    )];
    if let Some(t) = v.throughput_median_abs_error {
        lines.push((
            "throughput".to_owned(),
            format!("median |error| {}", pct(t)),
        ));
    }
    lines
}
