//! `ridgeline import neusight`: public kernel measurements into a kernel set;
//! `ridgeline import mlperf`: MLPerf result logs into run records;
//! `ridgeline import torch-trace`: a PyTorch profiler trace into records;
//! `ridgeline import nsys`: an Nsight Systems export's kernels by NVTX range, and records.

use anyhow::Result;
use ridgeline_app::{import, tables};
use ridgeline_reports::Document;

use crate::cli::{ImportMlperfArgs, ImportNeusightArgs, ImportNsysArgs, ImportTorchTraceArgs};
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
                "init = the first init_start to run_start (not timed by MLPerf); evaluations = \
                 every eval_start to eval_stop; from `blocks`: samples/s = the samples the \
                 blocks trained over block_start to block_stop less the evaluations inside, \
                 epoch = that time an epoch (epoch events can run out of step with the work at \
                 scale); from `logged`: samples/s = the median throughput the log reports, \
                 epoch = the median epoch_start to epoch_stop; counts in tokens (GPT-3) are \
                 divided by max_sequence_length; time to train = run_start to run_stop",
            )
    })
}

pub(crate) fn torch_trace(args: &ImportTorchTraceArgs) -> Result<()> {
    let done = import::torch_trace(&args.trace, &args.workload, args.threads, &args.out)?;
    output::print(args.format.format, &done, |style| {
        let mut d = Document::new("PyTorch profiler trace imported")
            .summary(
                "written",
                format!("{} ({} records)", done.out, done.records),
            )
            .summary(
                "workload",
                format!(
                    "{}, batch {}, input {}",
                    done.workload,
                    done.batch,
                    done.input
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join("x")
                ),
            )
            .summary("device", format!("{}, {}", done.device, done.precision))
            .summary(
                "steps",
                format!(
                    "{} profiled, median {}",
                    done.steps,
                    style.seconds(ridgeline_model::units::Seconds::new(done.step_s))
                ),
            )
            .summary("layers matched", done.layers.to_string());
        if let Some(r) = done.ranks {
            d = d.summary("ranks", format!("{r} (this trace is one of them)"));
        }
        if let Some([comm, exposed]) = done.comm_s {
            let s = |v: f64| style.seconds(ridgeline_model::units::Seconds::new(v));
            d = d.summary(
                "communication",
                format!(
                    "median {} a step, {} of it after backward",
                    s(comm),
                    s(exposed)
                ),
            );
        }
        for u in &done.unmapped {
            d = d.summary(
                format!("  not a layer: {}", u.name),
                format!(
                    "{} calls, {}",
                    u.count,
                    style.seconds(ridgeline_model::units::Seconds::new(u.seconds))
                ),
            );
        }
        for u in &done.no_kernel {
            d = d.summary(
                format!("  no GPU kernel: {}", u.name),
                format!("{} calls, no record", u.count),
            );
        }
        if let Some(h) = &done.host {
            d = host_lines(d, h);
        }
        d.note(
            "workload-layer and workload-step records for `validate`; the layers' convolutions (forward, and backward with both gradients in one call), ops and GEMMs as micro-kernel records for `calibrate`; every record names the trace (extra.notes.imported_from)",
        )
    })
}

/// The host's times of a GPU trace, as a stack file's `[host]` and `[device]` tables hold
/// them (microseconds).
fn host_lines(mut d: Document, h: &ridgeline_calibrate::torch_trace::HostTimes) -> Document {
    let us = |v: f64| format!("{:.1} us", v * 1e6);
    let opt = |v: Option<f64>| v.map_or_else(|| "not in the trace".to_owned(), us);
    for (pass, kinds, default) in [
        ("forward", &h.forward, h.forward_default_s),
        ("backward", &h.backward, h.backward_default_s),
    ] {
        d = d.summary(
            format!("host, {pass} per op"),
            format!("{} (every layer pass's median)", us(default)),
        );
        for k in kinds {
            d = d.summary(
                format!("  {}", k.kind),
                format!("{} ({} passes)", us(k.median_s), k.passes),
            );
        }
    }
    d.summary("host, per parameter tensor", opt(h.parameter_s))
        .summary("host, optimizer per tensor", opt(h.optimizer_tensor_s))
        .summary("host, kernel launch call", opt(h.launch_s))
        .summary("device, gap between queued kernels", opt(h.kernel_gap_s))
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
    let cols = tables::nsys_range_cols();
    output::print(args.format.format, &done, |style| {
        let mut d = Document::new("Nsight Systems report")
            .summary("report", done.report.clone())
            .summary(
                "gpu",
                done.gpu.clone().unwrap_or_else(|| "not named".into()),
            )
            .summary(
                "kernels",
                format!("{} under {} NVTX ranges", done.kernels, done.ranges),
            );
        if let Some(out) = &done.out {
            d = d.summary("written", format!("{out} ({} records)", done.records));
        }
        d.table(output::table(&done.by_range, &cols, style)).note(
            "Each kernel under the innermost NVTX range around its launch (the CUDA runtime call with its correlation id, on the launching thread for a push/pop range); (none): outside every range",
        )
    })
}
