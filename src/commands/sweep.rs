//! `ridgeline sweep`.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use ridgeline_app::inputs;
use ridgeline_model::predict::{Outcome, StepModel};
use ridgeline_model::sweep::{self, Candidate, SweepResult, SweepSpec};
use ridgeline_model::units::Seconds;
use ridgeline_reports::Document;
use serde::Serialize;

use crate::cli::SweepArgs;
use crate::output::{self, Col, Style, num, text};

/// A configuration as printed: the system by name, then the `predict` fields.
#[derive(Debug, Serialize)]
struct Row<'a> {
    system: &'a str,
    #[serde(flatten)]
    candidate: &'a Candidate,
}

/// `sweep --format json`.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    workload: &'a str,
    evaluated: u64,
    feasible: u64,
    infeasible: u64,
    infeasible_by_reason: &'a std::collections::BTreeMap<&'static str, u64>,
    elapsed_s: f64,
    evaluations_per_s: f64,
    objective: String,
    top: Vec<Row<'a>>,
}

pub(crate) fn run(args: &SweepArgs) -> Result<()> {
    if let Some(path) = &args.out {
        out_is_json(path)?;
    }
    let job = inputs::Job::from_flags(
        &args.workload.spec(),
        &args.scenario.spec(),
        *args
            .precisions
            .first()
            .context("--precisions: give at least one precision")?,
        1,
    )?;
    let systems = args
        .systems
        .iter()
        .map(|s| inputs::system(s))
        .collect::<Result<Vec<_>>>()?;
    let models: Vec<StepModel> = args
        .precisions
        .iter()
        .map(|&p| StepModel::new(&job.graph, p, args.scenario.optimizer))
        .collect();
    let spec = SweepSpec {
        systems: &systems,
        models: &models,
        dataset: &job.dataset,
        reference_input_elements: job.reference_input_elements,
        scenario: &job.scenario,
        nodes: &args.nodes.0,
        batches: &args.batch.0,
        objective: args.objective,
        top: args.top,
        keep_all: args.out.is_some(),
    };
    let total = (systems.len() * models.len() * args.nodes.0.len() * args.batch.0.len()) as u64;
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} configurations ({per_sec}, eta {eta})")
            .context("progress bar template")?,
    );
    let result = sweep::sweep(spec, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    if let Some(path) = &args.out {
        write_all(path, &result)?;
    }
    let rows: Vec<Row<'_>> = result
        .top
        .iter()
        .map(|c| Row {
            system: &result.systems[c.system_index],
            candidate: c,
        })
        .collect();
    let summary = Summary {
        workload: job.graph.name(),
        evaluated: result.evaluated,
        feasible: result.feasible,
        infeasible: result.infeasible,
        infeasible_by_reason: &result.infeasible_by_reason,
        elapsed_s: result.elapsed_s,
        evaluations_per_s: result.evaluations_per_s,
        objective: result.objective.to_string(),
        top: rows,
    };
    let cols: [Col<Row<'_>>; 10] = [
        text("system", "system", |r, _| r.system.to_owned()),
        text("precision", "precision", |r, _| {
            r.candidate.precision.to_string()
        }),
        num("nodes", "nodes", |r, s| {
            s.count(u64::from(r.candidate.outcome.nodes))
        }),
        num("batch", "local_batch", |r, s| {
            s.count(r.candidate.outcome.local_batch)
        }),
        num("global", "global_batch", |r, s| {
            s.count(r.candidate.outcome.global_batch)
        }),
        num("step", "step_time_s", |r, s| {
            s.seconds(Seconds::new(r.candidate.outcome.step_time_s))
        }),
        text("bound", "bound", |r, _| {
            r.candidate.outcome.bound.name().to_owned()
        }),
        num("time to solution", "time_to_solution_s", |r, s| {
            s.seconds(Seconds::new(r.candidate.outcome.time_to_solution_s))
        }),
        num("energy kWh", "energy_j", |r, s| {
            s.number(r.candidate.outcome.energy_j.map(|e| e / 3.6e6), 1)
        }),
        num("cost", "cost", |r, s| s.number(r.candidate.outcome.cost, 2)),
    ];
    output::print(args.format.format, &summary, |style| {
        let s = Style::Human;
        let mut doc = Document::new(format!(
            "Sweep: {} (best {} by {})",
            summary.workload, args.top, summary.objective
        ))
        .summary("evaluated", s.count(summary.evaluated))
        .summary("feasible", s.count(summary.feasible))
        .summary("infeasible", s.count(summary.infeasible));
        for (reason, n) in summary.infeasible_by_reason {
            doc = doc.summary(format!("  {reason}"), s.count(*n));
        }
        doc.summary("elapsed", s.seconds(Seconds::new(summary.elapsed_s)))
            .summary(
                "evaluations per second",
                format!("{:.0}", summary.evaluations_per_s),
            )
            .table(output::table(&summary.top, &cols, style))
    })
}

/// The fields of every written row, in order.
const FIELDS: [&str; 22] = [
    "system",
    "precision",
    "nodes",
    "devices",
    "local_batch",
    "global_batch",
    "data_location",
    "compute_s",
    "input_s",
    "allreduce_s",
    "collective",
    "step_time_s",
    "bound",
    "samples_per_s",
    "epochs",
    "epoch_time_s",
    "staging_s",
    "time_to_solution_s",
    "achieved_flops",
    "memory_per_device_bytes",
    "energy_j",
    "cost",
];

fn fields(system: &str, c: &Candidate) -> [String; 22] {
    let o: &Outcome = &c.outcome;
    let opt = |v: Option<f64>| v.map_or_else(String::new, |x| x.to_string());
    [
        system.to_owned(),
        c.precision.to_string(),
        o.nodes.to_string(),
        o.devices.to_string(),
        o.local_batch.to_string(),
        o.global_batch.to_string(),
        o.data_location.to_string(),
        o.compute_s.to_string(),
        o.input_s.to_string(),
        o.allreduce_s.to_string(),
        o.collective.to_string(),
        o.step_time_s.to_string(),
        o.bound.name().to_owned(),
        o.samples_per_s.to_string(),
        o.epochs.to_string(),
        o.epoch_time_s.to_string(),
        o.staging_s.to_string(),
        o.time_to_solution_s.to_string(),
        o.achieved_flops.to_string(),
        o.memory_per_device_bytes.to_string(),
        opt(o.energy_j),
        opt(o.cost),
    ]
}

/// Writes every feasible configuration: JSON if the file ends in `.json`, else CSV.
/// Whether `--out` names a JSON file (else CSV); another extension is an error, found
/// before the sweep runs.
fn out_is_json(path: &std::path::Path) -> Result<bool> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Ok(true),
        Some("csv") => Ok(false),
        _ => anyhow::bail!(
            "--out {}: the format follows the extension; name a .csv or a .json file",
            path.display()
        ),
    }
}

fn write_all(path: &std::path::Path, result: &SweepResult) -> Result<()> {
    let json = out_is_json(path)?;
    ridgeline_app::atomic::write_with(path, |out| {
        if json {
            let rows: Vec<Row<'_>> = result
                .all
                .iter()
                .map(|c| Row {
                    system: &result.systems[c.system_index],
                    candidate: c,
                })
                .collect();
            serde_json::to_writer(&mut *out, &rows)?;
        } else {
            let mut w = csv::Writer::from_writer(&mut *out);
            w.write_record(FIELDS)?;
            for c in &result.all {
                w.write_record(fields(&result.systems[c.system_index], c))?;
            }
            w.flush()?;
        }
        Ok(())
    })
}
