//! What the `measure` commands print.

use std::path::Path;

use ridgeline_measure::StepRun;
use ridgeline_model::graph::Graph;
use ridgeline_model::precision::Precision;
use ridgeline_reports::Document;

use ridgeline_measure::comm::{CommRun, DdpPlan, DdpRun};

use crate::campaign::Ran;
use crate::columns::{Style, table};
use crate::tables;

/// The records a campaign wrote: each case's median (`out`: the records file; `extra`:
/// summary lines of the command's own).
pub fn records(
    title: &str,
    out: Option<&Path>,
    ran: &Ran,
    extra: Vec<(String, String)>,
    style: Style,
) -> Document {
    let table_rows = tables::record_rows(&ran.records);
    let cols = tables::record_cols();
    let mut doc = Document::new(title.to_owned());
    if let Some(r) = ran.records.first() {
        doc = doc.summary(
            "device",
            format!("{} ({}, {} cores)", r.device, r.env.cpu_model, r.env.cores),
        );
    }
    for (k, v) in extra {
        doc = doc.summary(k, v);
    }
    if let Some(out) = out {
        doc = doc.summary(
            "records",
            format!("{} new in {}", ran.records.len(), out.display()),
        );
    }
    if ran.skipped > 0 {
        doc = doc.summary("skipped", format!("{} cases already recorded", ran.skipped));
    }
    if !ran.declined.is_empty() {
        doc = doc.summary(
            "not measured",
            format!(
                "{} cases the device runs no algorithm for",
                ran.declined.len()
            ),
        );
        for why in &ran.declined {
            doc = doc.note(format!("not measured: {why}"));
        }
    }
    doc.table(table(&table_rows, &cols, style))
        .note("median of each case's samples; FLOPs and bytes as the model counts them (bytes: the lower bound)")
}

/// Each measured training step of `ran` (a workload of `graph` at `batch` on `device`), its
/// `top` slowest layers (0: every layer, in order).
pub fn steps(
    graph: &Graph,
    ran: &Ran,
    device: &str,
    precision: Precision,
    top: usize,
) -> Vec<Document> {
    let mut out = Vec::new();
    for run in StepRun::from_records(&ran.records) {
        let batch = run.run.batch;
        let rows = tables::step_layer_rows(graph, &run, top);
        let mut doc = Document::new(format!(
            "Measured training step: {} batch {batch}, input {:?}, {} on {} ({} threads)",
            graph.name(),
            graph.input_shape().dims(),
            run.step.precision,
            device,
            run.step.threads
        ));
        for (k, v) in tables::step_summary(graph, &run, batch, precision) {
            doc = doc.summary(k, v);
        }
        doc = doc
            .table(table(&rows, &tables::step_layer_cols(), Style::Human))
            .note(if top > 0 {
                format!("the {} slowest layers; --top 0 lists every layer in order", rows.len())
            } else {
                "every layer in order".to_owned()
            })
            .note("the model's footprint counts a padded copy of one sample's input as convolution workspace; the executor's convolutions may lower several small samples together");
        out.push(doc);
    }
    out
}

/// An MPI benchmark's records, as rank 0 prints them (`out`: the records file).
pub fn comm(bench: &str, ran: &CommRun, out: Option<&Path>, style: Style) -> Document {
    let table_rows = tables::record_rows(&ran.records);
    let cols = tables::record_cols();
    let mut doc = Document::new(format!("MPI {bench}"));
    if let Some(r) = ran.records.first() {
        let extra = &r.extra;
        doc = doc.summary("job", job_line(ran.ranks, extra));
        if !extra.mpi_settings.is_empty() {
            let list: Vec<String> = extra
                .mpi_settings
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            doc = doc.summary("settings", list.join(" "));
        }
    }
    if let Some(out) = out {
        doc = doc.summary(
            "records",
            format!("{} new in {}", ran.records.len(), out.display()),
        );
    }
    if ran.skipped > 0 {
        doc = doc.summary("skipped", format!("{} already recorded", ran.skipped));
    }
    for note in &ran.notes {
        doc = doc.note(note.clone());
    }
    doc.table(table(&table_rows, &cols, style)).note(
        "median of each measurement's samples; a collective's sample is its slowest rank's time",
    )
}

/// A data-parallel training run under MPI, as rank 0 prints it (buckets in MiB as given).
pub fn ddp(
    plan: &DdpPlan,
    ran: &DdpRun,
    [bucket_mib, first_bucket_mib]: [f64; 2],
    out: Option<&Path>,
    style: Style,
) -> Document {
    let runs = StepRun::from_records(&ran.records);
    let mut doc = Document::new(format!(
        "Data-parallel training: {} batch {} per rank, {} ranks",
        plan.graph.name(),
        plan.batch,
        ran.ranks
    ));
    if ran.skipped {
        return doc.note("already in --out: --resume skipped the run");
    }
    let Some(run) = runs.first() else {
        return doc;
    };
    let extra = &run.step.extra;
    let ms = |v: &[f64]| format!("{:.1} ms", ridgeline_measure::protocol::median(v) * 1e3);
    doc = doc.summary("job", job_line(ran.ranks, extra));
    for (k, v) in tables::step_summary(&plan.graph, run, plan.batch, Precision::Fp32) {
        doc = doc.summary(k, v);
    }
    doc = doc
        .summary(
            "buckets",
            format!(
                "{} a step ({} MiB, the first {} MiB), allreduced {}",
                ran.buckets,
                bucket_mib,
                first_bucket_mib,
                if plan.overlap {
                    "beside backward"
                } else {
                    "after backward"
                }
            ),
        )
        .summary("allreduce", ms(&extra.comm_s))
        .summary("allreduce after backward", ms(&extra.exposed_comm_s))
        .summary("gradients into buckets", ms(&extra.other_s));
    if let Some(out) = out {
        doc = doc.summary(
            "records",
            format!("{} new in {}", ran.records.len(), out.display()),
        );
    }
    let rows = tables::step_layer_rows(&plan.graph, run, 10);
    doc.table(table(&rows, &tables::step_layer_cols(), style))
        .note("rank 0's steps, medians; the 10 slowest layers")
}

/// The MPI job a record ran in: ranks, nodes and library.
fn job_line(ranks: usize, extra: &ridgeline_measure::Extra) -> String {
    format!(
        "{ranks} ranks on {} node(s), {}",
        extra.nodes.map_or("?".to_owned(), |n| n.to_string()),
        extra.mpi_library.as_deref().unwrap_or("unknown MPI")
    )
}
