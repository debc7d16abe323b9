//! What the model's commands print: `roofline` and `memory`.

use ridgeline_model::cost::{self, GraphCost, LayerCost};
use ridgeline_model::graph::Shape;
use ridgeline_model::memory::MemoryReport;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict;
use ridgeline_model::roofline;
use ridgeline_model::scale::ScaleSeries;
use ridgeline_model::stack::Stack;
use ridgeline_model::units::{Bytes, Seconds};
use ridgeline_model::workloads::{BUILTINS, BuildOptions};
use ridgeline_reports::Document;
use serde::Serialize;

use crate::columns::{Col, Style, num, table, text};
use crate::tables;

/// The roofline, and the step under a stack where one is asked for.
#[derive(serde::Serialize)]
pub struct RooflineOut<'a> {
    /// The roofline.
    #[serde(flatten)]
    pub roofline: &'a roofline::Roofline<'a>,
    /// The step under the stack asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stack: Option<&'a StackRoofline>,
}

/// The step at the roofline under a stack's rules.
#[derive(serde::Serialize)]
pub struct StackRoofline {
    /// Forward and backward of every entry, every peak attained, seconds.
    pub step_time_s: f64,
    /// What the stack changed.
    pub effects: predict::StackEffects,
}

/// `roofline` at `batch`: the device's peaks, the step at the roofline and each layer's.
pub fn roofline(out: &RooflineOut<'_>, batch: u64, style: Style) -> Document {
    let (r, stack) = (out.roofline, &out.stack);
    let cols = tables::roofline_cols();
    let s = Style::Human;
    let share = |t: ridgeline_model::units::Seconds| 100.0 * t.value() / r.step_time.value();
    Document::new(format!(
        "Roofline: {} on {} ({}), batch {}, {}",
        r.workload, r.system, r.device, r.batch, r.precision
    ))
    .summary("matrix peak", format!("{} ({})", s.flop_rate(r.matrix_peak.rate), r.matrix_peak.name))
    .summary("vector peak", format!("{} ({})", s.flop_rate(r.vector_peak.rate), r.vector_peak.name))
    .summary(
        "memory bandwidth",
        r.memory_bandwidth
            .map_or_else(|| "unknown until measured".to_owned(), |b| s.byte_rate(b)),
    )
    .summary(
        "machine balance",
        r.machine_balance
            .map_or_else(|| "unknown".to_owned(), |m| format!("{m:.1} FLOP/B")),
    )
    .summary("step FLOPs / HBM bytes", format!("{} / {}", s.flops(r.flops), s.bytes(r.bytes)))
    .summary("step time", s.seconds(r.step_time))
    .summary(
        "bound by",
        format!(
            "compute {:.1}% of the time, memory {:.1}%",
            share(r.compute_bound_time),
            share(r.memory_bound_time)
        ),
    )
    .summary("attained", format!("{} ({:.1}% of matrix peak)", s.flop_rate(r.attained), 100.0 * r.fraction_of_peak))
    .summary("samples per second", format!("{:.1}", r.samples_per_second))
    .summary(
        "transferred kernel model",
        if r.layers.iter().any(|l| l.transferred.is_some()) {
            let t: ridgeline_model::units::Seconds =
                r.layers.iter().map(|l| l.transferred.unwrap_or(l.time)).sum();
            format!(
                "{} a step ({} of its layers; what `predict` counts), {:.1}x the roofline",
                s.seconds(t),
                r.layers.iter().filter(|l| l.transferred.is_some()).count(),
                t.value() / r.step_time.value()
            )
        } else {
            "none: the device is not a GPU with [compute] sms and boost clock, a peak for this precision and a memory bandwidth in its file".to_owned()
        },
    )
    .summary(
        "under the stack",
        stack.as_ref().map_or_else(
            || "not asked (--stack NAME)".to_owned(),
            |st| {
                format!(
                    "{} a step at the roofline under `{}` ({:.2}x): its fused groups and \
                     matrix formats",
                    s.seconds(Seconds::new(st.step_time_s)),
                    st.effects.stack,
                    st.step_time_s / r.step_time.value()
                )
            },
        ),
    )
    .table(table(&r.layers, &cols, style))
    .notes(stack.iter().flat_map(|st| {
        predict::rule_lines(&st.effects, batch as f64, batch as f64, 1.0)
    }))
    .note("Ideal efficiency (every peak attained): a lower bound on step time. Layers run one after another. The `transfer model` column times each layer by the kernel model fitted on measured GPU kernels (never below the roofline), as `predict` does.")
    .notes(r.assumptions.iter().map(|a| format!("assumed: {a}")))
}

/// `memory`: the footprint per device against batch under `stack`.
pub fn memory(r: &MemoryReport, stack: &Stack, style: Style) -> Document {
    let cols = tables::memory_cols();
    let s = Style::Human;
    let llc = r
        .llc
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), |l| s.bytes(l.value));
    Document::new(format!(
        "Memory per device: {} on {} ({})",
        r.workload, r.system, r.device
    ))
    .summary("precision", r.precision.name())
    .summary("software stack", stack.name.clone())
    .summary("optimizer", r.optimizer.name())
    .summary(
        "device memory",
        format!(
            "{} ({})",
            s.bytes(r.device_memory.value),
            r.device_memory.source
        ),
    )
    .summary("last-level cache", llc)
    .summary("stack keeps less", {
        let m = &r.stack_memory;
        let all = m.attention_saved + m.fused_saved + m.recompute_saved;
        if all > 0.0 {
            format!(
                "{} a sample (fused attention: {}; fused chains recompute their inner \
                 outputs: {}; recomputation `{}`: {})",
                s.bytes(Bytes::new(all)),
                s.bytes(Bytes::new(m.attention_saved)),
                s.bytes(Bytes::new(m.fused_saved)),
                stack.recompute.value,
                s.bytes(Bytes::new(m.recompute_saved))
            )
        } else {
            "nothing: every activation a layer needs is kept".to_owned()
        }
    })
    .summary("fixed", s.bytes(r.fixed_bytes))
    .summary("per sample", s.bytes(r.per_sample_bytes))
    .summary("max batch", s.count(r.max_batch))
    .summary(
        "max batch in cache",
        r.max_batch_llc
            .map_or_else(|| "unknown".to_owned(), |b| s.count(b)),
    )
    .table(table(&r.rows, &cols, style))
}

/// One row of `workload list`.
#[derive(Debug, Serialize)]
pub struct Listed {
    /// Its name.
    pub name: &'static str,
    /// What it is.
    pub description: &'static str,
    /// One sample's input.
    pub input_shape: Vec<usize>,
    /// Parameters.
    pub params: u64,
    /// Forward multiply-adds a sample.
    pub macs_fwd: u128,
}

/// Every built-in workload, built at its default size: the rows of `workload list`.
pub fn builtins() -> anyhow::Result<Vec<Listed>> {
    BUILTINS
        .iter()
        .map(|b| {
            let graph = b.build(&BuildOptions::default())?;
            let c = cost::cost(&graph, 1, ridgeline_model::precision::Precision::Fp32);
            Ok(Listed {
                name: b.name,
                description: b.description,
                input_shape: b.input.to_vec(),
                params: c.params,
                macs_fwd: c.macs_fwd,
            })
        })
        .collect()
}

/// `workload list`.
pub fn builtins_document(rows: &[Listed], style: Style) -> Document {
    let cols: [Col<Listed>; 5] = [
        text("workload", "name", |r, _| r.name.to_owned()),
        text("input", "input_shape", |r, _| {
            Shape::new(&r.input_shape).to_string()
        }),
        num("params", "params", |r, s| s.count(r.params)),
        num("GMAC/sample", "macs_fwd", |r, s| match s {
            Style::Human => format!("{:.3}", r.macs_fwd as f64 / 1e9),
            Style::Raw => r.macs_fwd.to_string(),
        }),
        text("description", "description", |r, _| {
            r.description.to_owned()
        }),
    ];
    Document::new("Built-in workloads").table(table(rows, &cols, style))
}

/// `workload show`: one training step's counts, layer by layer.
pub fn workload(c: &GraphCost<'_>, style: Style) -> Document {
    let cols: [Col<LayerCost>; 11] = [
        text("layer", "name", |r, _| r.name.to_owned()),
        text("op", "op", |r, _| r.op.to_owned()),
        text("output", "output_shape", |r, _| {
            Shape::new(r.output_shape).to_string()
        }),
        num("params", "params", |r, s| s.count(r.params)),
        num("fwd FLOP", "flops_fwd", |r, s| s.flops(r.flops_fwd)),
        num("bwd data", "flops_bwd_data", |r, s| {
            s.flops(r.flops_bwd_data)
        }),
        num("bwd weight", "flops_bwd_weight", |r, s| {
            s.flops(r.flops_bwd_weight)
        }),
        num("HBM fwd", "hbm_bytes_fwd", |r, s| s.bytes(r.hbm_bytes_fwd)),
        num("HBM bwd", "hbm_bytes_bwd", |r, s| s.bytes(r.hbm_bytes_bwd)),
        num("FLOP/B", "arithmetic_intensity", |r, s| {
            s.number(r.arithmetic_intensity, 1)
        }),
        num("kept", "activation_bytes", |r, s| {
            s.bytes(r.activation_bytes)
        }),
    ];
    let s = Style::Human;
    Document::new(format!("Workload {}: one training step", c.workload))
        .summary("batch", s.count(c.batch))
        .summary("precision", c.precision.name())
        .summary("input", Shape::new(c.input_shape).to_string())
        .summary("parameters", s.count(c.params))
        .summary("forward MACs", s.count(c.macs_fwd))
        .summary(
            "FLOPs",
            format!(
                "{} forward + {} backward = {}",
                s.flops(c.flops_fwd),
                s.flops(c.flops_bwd),
                s.flops(c.flops_train)
            ),
        )
        .summary(
            "HBM bytes (lower bound)",
            format!(
                "{} forward + {} backward = {}",
                s.bytes(c.hbm_bytes_fwd),
                s.bytes(c.hbm_bytes_bwd),
                s.bytes(c.hbm_bytes_train)
            ),
        )
        .summary(
            "arithmetic intensity",
            format!("{:.1} FLOP/B", c.arithmetic_intensity),
        )
        .summary("activations kept", s.bytes(c.activation_bytes))
        .table(table(&c.layers, &cols, style))
}

/// `scale`: a scaling series at `precision`, and why any row cannot run.
pub fn scale(series: &ScaleSeries, precision: Precision, style: Style) -> Document {
    let cols = tables::scale_cols();
    let mut doc = Document::new(format!(
        "{} scaling: {} on {}, {}",
        series.mode, series.workload, series.system, precision
    ))
    .table(table(&series.rows, &cols, style));
    for r in series.rows.iter().filter(|r| r.infeasible.is_some()) {
        doc = doc.note(format!(
            "nodes {} x {} models, batch {}: {}",
            r.nodes,
            r.models,
            r.local_batch,
            r.infeasible.as_deref().unwrap_or_default()
        ));
    }
    doc
}
