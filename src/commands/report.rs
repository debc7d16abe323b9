//! `ridgeline report`: reports written to a directory in every format. The content comes
//! from `ridgeline_app::report`; this module turns flags into requests and says what it
//! wrote.

use anyhow::Result;
use ridgeline_app::report::{self, ProcurementRequest, WorkloadReportRequest};
use ridgeline_app::views::report as views;
use ridgeline_model::predict::KernelModel;
use ridgeline_reports::Report;
use serde::Serialize;

use crate::cli::{
    Format, ProcurementArgs, ReportOutArgs, ReportValidationArgs, ReportWorkloadArgs,
};
use crate::output::{self, Progress};

/// Renders `report` in every format into `out.out`; returns the files written.
fn write(report: &Report, out: &ReportOutArgs) -> Result<Vec<String>> {
    report::write_to(report, &out.out, out.images.format(), &|_| Ok(Vec::new()))
}

pub(crate) fn procurement(args: &ProcurementArgs) -> Result<()> {
    let ideal = args.compute_efficiency >= 1.0 && args.memory_efficiency >= 1.0;
    let provenance = format!(
        "ridgeline {} report procurement --systems {} --mix {}{} --objective {}",
        env!("CARGO_PKG_VERSION"),
        args.systems.join(","),
        args.mix,
        args.budget
            .map(|b| format!(" --budget {b}"))
            .unwrap_or_default(),
        args.objective
    ) + if args.efficiency == KernelModel::Ideal {
        " --efficiency ideal"
    } else {
        ""
    } + &if ideal {
        String::new()
    } else {
        format!(
            " --compute-efficiency {} --memory-efficiency {}",
            args.compute_efficiency, args.memory_efficiency
        )
    } + &args
        .stack
        .stack
        .as_ref()
        .map(|s| format!(" --stack {s}"))
        .unwrap_or_default();
    let p = report::procurement(&ProcurementRequest {
        mix: args.mix.clone(),
        systems: args.systems.clone(),
        budget: args.budget,
        objective: args.objective,
        kernel_model: args.efficiency,
        compute_efficiency: args.compute_efficiency,
        memory_efficiency: args.memory_efficiency,
        stack: args.stack.stack.clone(),
        provenance,
    })?;
    let result = views::write_procurement(
        &p,
        args.budget,
        args.objective,
        &args.out.out,
        args.out.images.format(),
    )?;
    let written = (args.out.format.format == Format::Table).then_some(args.out.out.as_path());
    output::print(args.out.format.format, &result, |style| {
        views::procurement(&p, &result, written, style)
    })
}

/// `report validation`: the validation of measured steps against a calibrated profile.
pub(crate) fn validation(args: &ReportValidationArgs) -> Result<()> {
    if ridgeline_app::runs::holds_runs(&args.measured)? {
        return runs(args);
    }
    if !args.run_workloads.is_empty() {
        anyhow::bail!(
            "{}: --workload names the workload of imported runs (`ridgeline import mlperf \
             --out`); measured steps carry their own",
            args.measured.display()
        );
    }
    let Some(profile) = &args.profile else {
        anyhow::bail!(
            "{}: measured steps are validated against a calibrated profile: give --profile FILE",
            args.measured.display()
        );
    };
    let v = ridgeline_app::validation::validation(
        profile,
        &args.measured,
        args.stack.as_deref(),
        &Progress::new(),
    )?;
    let provenance = format!(
        "ridgeline {} report validation --profile {} --measured {}",
        env!("CARGO_PKG_VERSION"),
        profile.display(),
        args.measured.display()
    );
    let report = report::validation_report(&v, provenance);
    let files = write(&report, &args.out)?;
    print_files(&report, &v, &files, args.out.format.format)
}

/// `report validation --measured runs.jsonl`: imported runs against `predict`.
fn runs(args: &ReportValidationArgs) -> Result<()> {
    let system = match (&args.system, &args.profile) {
        (Some(s), _) => s.clone(),
        (None, Some(p)) => p.display().to_string(),
        (None, None) => anyhow::bail!(
            "{}: imported runs are predicted on a system: give --system S",
            args.measured.display()
        ),
    };
    let Some(precision) = args.precision else {
        anyhow::bail!(
            "{}: imported runs need --precision (fp32, tf32, amp-fp16, amp-bf16 or fp8): their logs \
             do not say what they trained in",
            args.measured.display()
        );
    };
    let v = ridgeline_app::runs::validate(
        &system,
        &args.measured,
        precision,
        args.stack.as_deref(),
        &args.run_workloads,
    )?;
    let provenance = format!(
        "ridgeline {} report validation --system {system} --measured {} --precision {precision}",
        env!("CARGO_PKG_VERSION"),
        args.measured.display()
    );
    let report = report::runs_report(&v, &args.measured.display().to_string(), provenance);
    let files = write(&report, &args.out)?;
    print_files(&report, &v, &files, args.out.format.format)
}

/// `report workload`: one workload on one system.
pub(crate) fn workload(args: &ReportWorkloadArgs) -> Result<()> {
    let (report, p) = report::workload(&WorkloadReportRequest {
        workload: args.target.workload.spec(),
        system: args.target.system.system.clone(),
        scenario: args.scenario.spec(),
        precision: args.precision.precision,
        nodes: args.nodes,
        batch: args.batch,
        provenance: format!(
            "ridgeline {} report workload {} --system {} --nodes {} --batch {}",
            env!("CARGO_PKG_VERSION"),
            args.target.workload.workload,
            args.target.system.system,
            args.nodes,
            args.batch
        ),
    })?;
    let files = write(&report, &args.out)?;
    print_files(&report, &p, &files, args.out.format.format)
}

/// Prints a written report: the JSON result (with the files), or the title and files.
fn print_files<T: Serialize>(
    report: &Report,
    value: &T,
    files: &[String],
    format: Format,
) -> Result<()> {
    output::print(format, &views::Written::new(value, files), |_| {
        views::written(report, files)
    })
}
