//! `ridgeline memory`.

use anyhow::Result;
use ridgeline_app::figures;
use ridgeline_app::inputs;
use ridgeline_app::views::model as views;
use ridgeline_model::memory::{self, BatchSweep};

use crate::cli::MemoryArgs;
use crate::output;

pub(crate) fn run(args: &MemoryArgs) -> Result<()> {
    let graph = inputs::workload(&args.target.workload.spec())?;
    let stack = inputs::stack(args.stack.stack.as_deref())?;
    stack.check_precision(args.precision.precision)?;
    let system = inputs::system(&args.target.system.system)?;
    let sweep = args.batch_range.map(|(from, to)| match args.batch_step {
        Some(step) => BatchSweep::Linear { from, to, step },
        None => BatchSweep::Doubling { from, to },
    });
    if args.batch_step.is_some() && sweep.is_none() {
        anyhow::bail!("--batch-step needs --batch-range A..B");
    }
    let r = memory::report(
        &graph,
        &system,
        args.precision.precision,
        args.optimizer,
        &stack,
        sweep,
    )?;
    output::print(args.output.format.format, &r, |style| {
        views::memory(&r, &stack, style)
    })?;
    output::plots(&args.output.plot, || {
        Ok(vec![figures::memory(
            "memory",
            &r.workload,
            &r.rows,
            figures::capacities(&system),
        )])
    })
}
