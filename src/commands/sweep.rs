//! `ridgeline sweep`.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use ridgeline_app::sweep::SweepPlan;

use crate::cli::SweepArgs;
use crate::output;

pub(crate) fn run(args: &SweepArgs) -> Result<()> {
    let plan = SweepPlan::new(&args.request())?;
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(plan.total())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:40}} {{pos}}/{{len}} {} ({{per_sec}}, eta {{eta}})",
            plan.unit()
        ))
        .context("progress bar template")?,
    );
    let view = plan.run(&|n| bar.inc(n))?;
    bar.finish_and_clear();
    output::print(args.format.format, &view, |style| view.document(style))
}
