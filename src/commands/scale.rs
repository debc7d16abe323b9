//! `ridgeline scale`.

use anyhow::{Context, Result, bail};
use ridgeline_app::figures;
use ridgeline_app::inputs;
use ridgeline_app::views::model as views;
use ridgeline_model::scale::{self};
use ridgeline_model::workloads::{self, BuildOptions};

use crate::cli::{ScaleArgs, ScaleMode};
use crate::output::{self};

pub(crate) fn run(args: &ScaleArgs) -> Result<()> {
    let nodes = args.nodes.as_ref().map(|n| n.0.clone());
    let first_nodes = nodes.as_ref().and_then(|n| n.first().copied()).unwrap_or(1);
    let job = inputs::Job::from_flags(
        &args.target.workload.spec(),
        &args.scenario.spec(),
        args.precision.precision,
        first_nodes,
    )?;
    let system = &inputs::system(&args.target.system.system)?;
    let inputs = job.inputs(system);
    let sc = &job.scenario;
    let need = |what: &str, mode: &str| format!("--mode {mode} needs {what}");
    let series = match args.mode {
        ScaleMode::Strong => {
            let global = args
                .global_batch
                .with_context(|| need("--global-batch G", "strong"))?;
            scale::strong(
                inputs,
                sc,
                global,
                &nodes.with_context(|| need("--nodes", "strong"))?,
            )?
        }
        ScaleMode::Weak => {
            let b = args.batch.with_context(|| need("--batch B", "weak"))?;
            scale::weak(
                inputs,
                sc,
                b,
                &nodes.with_context(|| need("--nodes", "weak"))?,
            )?
        }
        ScaleMode::Ensemble => {
            let b = args.batch.with_context(|| need("--batch B", "ensemble"))?;
            let p = args
                .nodes_per_model
                .with_context(|| need("--nodes-per-model P", "ensemble"))?;
            let m = args
                .models
                .as_ref()
                .with_context(|| need("--models M1,M2,...", "ensemble"))?;
            scale::ensemble(inputs, sc, b, p, &m.0)?
        }
        ScaleMode::ProblemSize => {
            let b = args
                .batch
                .with_context(|| need("--batch B", "problem-size"))?;
            let builtin = workloads::find(&args.target.workload.workload).map_err(|_| {
                anyhow::anyhow!(
                    "--mode problem-size rebuilds a built-in workload; `{}` is not one",
                    args.target.workload.workload
                )
            })?;
            if args.input_sizes.is_empty() && args.widths.is_empty() {
                bail!("--mode problem-size needs --input-sizes and/or --widths");
            }
            let sizes: Vec<Option<Vec<usize>>> = if args.input_sizes.is_empty() {
                vec![
                    args.target
                        .workload
                        .input_size
                        .as_ref()
                        .map(|s| s.0.clone()),
                ]
            } else {
                args.input_sizes.iter().map(|s| Some(s.0.clone())).collect()
            };
            let widths = if args.widths.is_empty() {
                vec![args.target.workload.width.unwrap_or(1.0)]
            } else {
                args.widths.clone()
            };
            let build = |o: &BuildOptions| builtin.build(o);
            scale::problem_size(
                &build,
                inputs,
                sc,
                args.scenario.optimizer,
                &job.stack,
                &sizes,
                &widths,
                b,
            )?
        }
    };
    output::print(args.output.format.format, &series, |style| {
        views::scale(&series, args.precision.precision, style)
    })?;
    output::plots(&args.output.plot, || {
        Ok(figures::scale(&series, args.precision.precision))
    })
}
