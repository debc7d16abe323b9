//! `ridgeline sweep`.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use ridgeline_app::inputs;
use ridgeline_app::sweep::SweepRow;
use ridgeline_model::predict::StepModel;
use ridgeline_model::sweep::{self, SweepSpec};
use ridgeline_model::units::Seconds;
use ridgeline_reports::Document;
use serde::Serialize;

use crate::cli::SweepArgs;
use crate::output::{self, Style};

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
    top: Vec<SweepRow<'a>>,
}

pub(crate) fn run(args: &SweepArgs) -> Result<()> {
    if let Some(path) = &args.out {
        ridgeline_app::sweep::out_is_json(path)?;
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
        ridgeline_app::sweep::write_all(path, &result)?;
    }
    let rows = ridgeline_app::sweep::rows(&result, &result.top);
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
    let cols = ridgeline_app::sweep::cols();
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
