//! `ridgeline import neusight`: public kernel measurements into a kernel set;
//! `ridgeline import mlperf`: MLPerf result logs into run records.

use anyhow::Result;
use ridgeline_app::{import, tables};
use ridgeline_reports::Document;

use crate::cli::{ImportMlperfArgs, ImportNeusightArgs};
use crate::output;

pub(crate) fn neusight(args: &ImportNeusightArgs) -> Result<()> {
    let done = import::neusight(&args.dir, args.commit.as_deref(), &args.out)?;
    output::print(args.format.format, &done, |_| {
        let mut d = Document::new("NeuSight kernels imported")
            .summary("written", done.out.clone())
            .summary("commit", done.commit.clone());
        for (family, device, n) in &done.counts {
            let what = match family.as_str() {
                "labels" => "operators of training steps (validation only)",
                "steps" => "training steps (validation only)",
                _ => "kernels",
            };
            d = d.summary(format!("{family} on {device}"), format!("{n} {what}"));
        }
        d.note("FP32, PyTorch 2.1, cuDNN 8.9; MIT licence; provenance in SOURCE.toml")
    })
}

pub(crate) fn mlperf(args: &ImportMlperfArgs) -> Result<()> {
    let runs = import::mlperf(&args.paths)?;
    if let Some(out) = &args.out {
        let mut text = String::new();
        for r in &runs {
            text.push_str(&serde_json::to_string(r)?);
            text.push('\n');
        }
        ridgeline_app::atomic::write(out, text.as_bytes())?;
        eprintln!("wrote {} runs to {}", runs.len(), out.display());
    }
    let cols = tables::mlperf_run_cols();
    output::print(args.format.format, &runs, |style| {
        Document::new("MLPerf runs")
            .table(output::table(&runs, &cols, style))
            .note(
                "init = init_start to run_start (not timed by MLPerf); epoch = the median \
                 epoch_start to epoch_stop; evaluations = every eval_start to eval_stop; \
                 samples/s = the median logged throughput; time to train = run_start to run_stop",
            )
    })
}
