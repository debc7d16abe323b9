//! `ridgeline validate`: predictions against measured training steps, and the self-check
//! that runs the whole loop on this machine.

use std::path::Path;

use anyhow::{Result, bail};
use ridgeline_app::views::validate as views;
use ridgeline_app::{runs, self_check, validation};
use ridgeline_calibrate::validate::Validation;

use crate::cli::{
    Format, ValidateArgs, ValidateCommArgs, ValidateCommand, ValidateDdpTraceArgs,
    ValidateTransferArgs,
};
use crate::output::{self, Progress};

pub(crate) fn run(args: &ValidateArgs) -> Result<()> {
    match &args.what {
        Some(ValidateCommand::Comm(a)) => return comm(a),
        Some(ValidateCommand::Published(f)) => return published(f.format),
        Some(ValidateCommand::Transfer(a)) => return transfer(a),
        Some(ValidateCommand::DdpTrace(a)) => return ddp_trace(a),
        None => {}
    }
    if args.self_check {
        let v = self_check::self_check(&args.dir, args.budget, &Progress::new())?;
        return print(&v, args, Some(&args.dir));
    }
    let Some(measured) = &args.measured else {
        bail!("give --profile FILE (or --system S) and --measured FILE, or --self-check");
    };
    if runs::holds_runs(measured)? {
        return imported_runs(args, measured);
    }
    if !args.run_workloads.is_empty() {
        bail!(
            "{}: --workload names the workload of imported runs (`ridgeline import mlperf \
             --out`); measured steps carry their own",
            measured.display()
        );
    }
    let v = match (&args.profile, &args.system) {
        (Some(profile), _) => {
            validation::validation(profile, measured, args.stack.as_deref(), &Progress::new())?
        }
        (None, Some(system)) => {
            validation::uncalibrated(system, measured, args.stack.as_deref(), &Progress::new())?
        }
        (None, None) => {
            bail!("give --profile FILE (or --system S) and --measured FILE, or --self-check")
        }
    };
    print(&v, args, None)
}

/// `ridgeline validate comm`: the collective model against measured allreduce.
fn comm(args: &ValidateCommArgs) -> Result<()> {
    let path = args.profile.display().to_string();
    let (v, profile) = validation::comm(
        &args.profile,
        &args.measured,
        args.level.choice(),
        &Progress::new(),
    )?;
    if args.format.format == Format::Json {
        return output::emit(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    output::print(args.format.format, &v.points, |style| {
        views::comm(&v, &profile, &path, &args.measured, style)
    })
}

/// `validate transfer`: the transferable kernel model, leaving one GPU out at a time.
fn transfer(args: &ValidateTransferArgs) -> Result<()> {
    if args.cpu {
        return cpu_transfer(args);
    }
    let published = validation::published_or(&args.published, validation::GPU_PUBLISHED);
    let check = validation::transfer(&args.kernels, Some(&args.ours), &published)?;
    if let Some(out) = &args.write_model {
        let text = validation::transfer_model(&args.kernels, &check, &args.ours, &published)?;
        ridgeline_app::atomic::write(out, text.as_bytes())?;
        output::say(&format!("wrote the kernel model to {}", out.display()));
    }
    output::print(args.format.format, &check, |style| {
        views::transfer(&check, &args.kernels, &args.ours, &published, style)
    })
}

/// `validate transfer --cpu`: the CPU kernel model fitted, each CPU left out.
fn cpu_transfer(args: &ValidateTransferArgs) -> Result<()> {
    let published = validation::published_or(&args.published, ridgeline_app::cpu_model::PUBLISHED);
    let (check, points) = ridgeline_app::cpu_model::check(&args.ours, &published)?;
    if let Some(out) = &args.write_model {
        let text = ridgeline_app::cpu_model::model_text(&args.ours, &published, &check, &points)?;
        ridgeline_app::atomic::write(out, text.as_bytes())?;
        output::say(&format!("wrote the CPU kernel model to {}", out.display()));
    }
    output::print(args.format.format, &check, |style| {
        views::cpu_transfer(&check, style)
    })
}

/// `validate published`: the model's counts against the reference layer tables and \[004\]
/// Table II.
fn published(format: Format) -> Result<()> {
    let v = validation::published()?;
    output::print(format, &v, |style| views::published(&v, style))
}

fn print(v: &Validation, args: &ValidateArgs, artifacts: Option<&Path>) -> Result<()> {
    let report = views::StepsReport::new(v, args.top, artifacts);
    let uncalibrated = args.system.is_some();
    output::print(args.format.format, &report, |style| {
        views::steps(v, artifacts, uncalibrated, style)
    })?;
    if args.format.format == Format::Table {
        // The worst layers as a second table under the steps.
        output::print(args.format.format, &report, |style| {
            views::worst_layers(report.worst(), style)
        })?;
    }
    Ok(())
}

/// `validate --measured runs.jsonl`: imported runs (MLPerf) against `predict`.
fn imported_runs(args: &ValidateArgs, measured: &Path) -> Result<()> {
    // A calibrated profile is a system file with its calibration.
    let system = match (&args.system, &args.profile) {
        (Some(s), _) => s.clone(),
        (None, Some(p)) => p.display().to_string(),
        (None, None) => bail!(
            "{}: imported runs are predicted on a system: give --system S (a catalog system, \
             device or file) or --profile FILE",
            measured.display()
        ),
    };
    let Some(precision) = args.precision else {
        bail!(
            "{}: imported runs need --precision (fp32, tf32, amp-fp16, amp-bf16 or fp8): their logs \
             do not say what they trained in (MLPerf Training submissions use mixed precision)",
            measured.display()
        );
    };
    let v = runs::validate(
        &system,
        measured,
        precision,
        args.stack.as_deref(),
        &args.run_workloads,
    )?;
    output::print(args.format.format, &v, |style| {
        views::runs(&v, measured, style)
    })
}

/// `validate ddp-trace`: the step simulator against a traced data-parallel step.
fn ddp_trace(args: &ValidateDdpTraceArgs) -> Result<()> {
    let c = ridgeline_app::simcheck::ddp_trace(
        &args.trace,
        &args.workload,
        args.width,
        args.bucket_mib,
        args.first_bucket_mib,
    )?;
    output::print(args.format.format, &c, |style| views::ddp_trace(&c, style))
}
