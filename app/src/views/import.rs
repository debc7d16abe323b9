//! What the `import` commands print.

use ridgeline_calibrate::mlperf::RunRecord;
use ridgeline_calibrate::torch_trace::HostTimes;
use ridgeline_reports::Document;

use crate::columns::{Style, table};
use crate::import::{Imported, NsysImport, TraceImport};
use crate::tables;

/// `import neusight`: what was written, by family and device.
pub fn neusight(done: &Imported) -> Document {
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
}

/// `import mlperf`: the runs read.
pub fn mlperf(runs: &[RunRecord], style: Style) -> Document {
    let cols = tables::mlperf_run_cols();
    Document::new("MLPerf runs")
        .table(table(runs, &cols, style))
        .note(
            "init = the first init_start to run_start (not timed by MLPerf); evaluations = \
             every eval_start to eval_stop; from `blocks`: samples/s = the samples the \
             blocks trained over block_start to block_stop less the evaluations inside, \
             epoch = that time an epoch (epoch events can run out of step with the work at \
             scale); from `logged`: samples/s = the median throughput the log reports, \
             epoch = the median epoch_start to epoch_stop; counts in tokens (GPT-3) are \
             divided by max_sequence_length; time to train = run_start to run_stop",
        )
}

/// `import torch-trace`: what the trace gave, and the records written.
pub fn torch_trace(done: &TraceImport, style: Style) -> Document {
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
}

/// The host's times of a GPU trace, as a stack file's `[host]` and `[device]` tables hold
/// them (microseconds).
fn host_lines(mut d: Document, h: &HostTimes) -> Document {
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

/// `import nsys`: kernels by NVTX range, and the records written.
pub fn nsys(done: &NsysImport, style: Style) -> Document {
    let cols = tables::nsys_range_cols();
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
    d.table(table(&done.by_range, &cols, style)).note(
        "Each kernel under the innermost NVTX range around its launch (the CUDA runtime call with its correlation id, on the launching thread for a push/pop range); (none): outside every range",
    )
}
