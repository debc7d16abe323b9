//! `ridgeline import neusight`: public kernel measurements into a kernel set;
//! `ridgeline import mlperf`: MLPerf result logs into run records;
//! `ridgeline import torch-trace`: a PyTorch profiler trace into records;
//! `ridgeline import nsys`: an Nsight Systems export's kernels by NVTX range, and records.

use anyhow::Result;
use ridgeline_app::import;
use ridgeline_app::views::import as views;

use crate::cli::{ImportMlperfArgs, ImportNeusightArgs, ImportNsysArgs, ImportTorchTraceArgs};
use crate::output;

pub(crate) fn neusight(args: &ImportNeusightArgs) -> Result<()> {
    let done = import::neusight(&args.dir, args.commit.as_deref(), &args.out)?;
    output::print(args.format.format, &done, |_| views::neusight(&done))
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
        output::say(&format!("wrote {} runs to {}", runs.len(), out.display()));
    }
    output::print(args.format.format, &runs, |style| {
        views::mlperf(&runs, style)
    })
}

pub(crate) fn torch_trace(args: &ImportTorchTraceArgs) -> Result<()> {
    let done = import::torch_trace(&args.trace, &args.workload, args.threads, &args.out)?;
    output::print(args.format.format, &done, |style| {
        views::torch_trace(&done, style)
    })
}

pub(crate) fn nsys(args: &ImportNsysArgs) -> Result<()> {
    let spec = args
        .workload
        .as_ref()
        .map(|w| ridgeline_app::inputs::WorkloadSpec {
            name: w.clone(),
            input_size: args.input_size.as_ref().map(|s| s.0.clone()),
            width: None,
        });
    let precision = args
        .precision
        .unwrap_or(ridgeline_model::precision::Precision::Fp32);
    let records = match (&spec, args.batch, &args.out) {
        (Some(s), Some(b), Some(out)) => Some((s, usize::try_from(b)?, precision, out.as_path())),
        _ => None,
    };
    if spec.is_some() && args.precision.is_none() {
        anyhow::bail!(
            "--workload needs --precision (fp32, tf32, amp-fp16, amp-bf16 or fp8): the report does \
             not say what the run trained in"
        );
    }
    let done = import::nsys(&args.report, records)?;
    output::print(args.format.format, &done, |style| views::nsys(&done, style))
}
