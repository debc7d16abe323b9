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
    if args.tensor_parallel.is_some()
        || args.pipeline_parallel.is_some()
        || args.virtual_stages.is_some()
        || args.expert_parallel.is_some()
    {
        return splits(args);
    }
    if let Some(path) = &args.out {
        ridgeline_app::sweep::out_is_json(path)?;
    }
    // `--stack A,B`: every stack beside every precision.
    let mut scenario = args.scenario.spec();
    let names: Vec<String> = scenario
        .stack
        .as_deref()
        .map(|s| s.split(',').map(|n| n.trim().to_owned()).collect())
        .unwrap_or_default();
    scenario.stack = names.first().cloned();
    let job = inputs::Job::from_flags(
        &args.workload.spec(),
        &scenario,
        *args
            .precisions
            .first()
            .context("--precisions: give at least one precision")?,
        1,
    )?;
    let stacks = if names.len() > 1 {
        names
            .iter()
            .map(|n| inputs::stack(Some(n)))
            .collect::<Result<Vec<_>>>()?
    } else {
        vec![job.stack.clone()]
    };
    let systems = args
        .systems
        .iter()
        .map(|s| inputs::system(s))
        .collect::<Result<Vec<_>>>()?;
    let mut models: Vec<StepModel> = Vec::new();
    for stack in &stacks {
        for &p in &args.precisions {
            stack.check_precision(p)?;
            models.push(StepModel::with_stack(
                &job.graph,
                p,
                args.scenario.optimizer,
                stack,
            ));
        }
    }
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

/// `sweep` over splits of a transformer: tensor, pipeline and data parallelism and
/// micro-batches.
fn splits(args: &SweepArgs) -> Result<()> {
    use ridgeline_app::sweep::{SplitSearch, split_cols, splits};
    if args.out.is_some() {
        anyhow::bail!("--out is not written for a split search; use --format json");
    }
    let (name, config, seq) = inputs::transformer(&args.workload.spec())?;
    let systems = args
        .systems
        .iter()
        .map(|s| inputs::system(s))
        .collect::<Result<Vec<_>>>()?;
    let scenario = args.scenario.spec();
    let list =
        |n: &Option<crate::cli::Numbers<u32>>| n.as_ref().map_or_else(|| vec![1], |v| v.0.clone());
    let (tensor, pipeline) = (list(&args.tensor_parallel), list(&args.pipeline_parallel));
    let micro = args
        .micro_batches
        .as_ref()
        .map(|m| m.0.clone())
        .unwrap_or_default();
    let virtual_stages = list(&args.virtual_stages);
    let expert = list(&args.expert_parallel);
    if scenario.stack.as_deref().is_some_and(|s| s.contains(',')) {
        anyhow::bail!(
            "--stack: a split search runs under one stack; give one (several are swept for \
             data-parallel sweeps only)"
        );
    }
    let stack = inputs::stack(scenario.stack.as_deref())?;
    let start = std::time::Instant::now();
    let search = SplitSearch {
        model: (&name, &config, seq),
        systems: &systems,
        nodes: &args.nodes.0,
        batches: &args.batch.0,
        tensor: &tensor,
        pipeline: &pipeline,
        micro_batches: &micro,
        virtual_stages: &virtual_stages,
        expert: &expert,
        precisions: &args.precisions,
        optimizer: scenario.optimizer,
        kernel_model: scenario.kernel_model,
        stack: &stack,
    };
    let total = ridgeline_app::sweep::split_count(&search);
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} splits ({per_sec}, eta {eta})")
            .context("progress bar template")?,
    );
    let found = splits(&search, args.top, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    let elapsed = start.elapsed().as_secs_f64();
    let (top, rejected) = (found.top, found.rejected);
    #[derive(Serialize)]
    struct Splits<'a> {
        workload: &'a str,
        seq: usize,
        feasible: u64,
        rejected: &'a std::collections::BTreeMap<String, u64>,
        elapsed_s: f64,
        top: &'a [ridgeline_app::sweep::SplitRow],
    }
    let summary = Splits {
        workload: &name,
        seq,
        feasible: found.feasible,
        rejected: &rejected,
        elapsed_s: elapsed,
        top: &top,
    };
    output::print(args.format.format, &summary, |style| {
        let mut d = Document::new(format!(
            "Splits of {name} ({seq} tokens): the {} fastest per sequence of {} that fit",
            top.len(),
            found.feasible
        ))
        .summary("searched in", Style::Human.seconds(Seconds::new(elapsed)))
        .table(output::table(&top, &split_cols(), style));
        for (why, n) in &rejected {
            d = d.note(format!("left out: {n} ({why})"));
        }
        d.note("--batch is per data-parallel replica; each split timed as predict --tensor-parallel/--pipeline-parallel times it.")
    })
}
