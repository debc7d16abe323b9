//! `ridgeline report`: reports written to a directory in every format. The content comes
//! from `ridgeline_app::report`; this module turns flags into requests and says what it
//! wrote.

use anyhow::Result;
use ridgeline_app::report::{self, ProcurementRequest, WorkloadReportRequest};
use ridgeline_model::predict::KernelModel;
use ridgeline_model::procurement::{CandidateResult, Mix};
use ridgeline_model::sweep::Objective;
use ridgeline_reports::{Document, Report};
use serde::Serialize;

use crate::cli::{
    Format, ProcurementArgs, ReportOutArgs, ReportValidationArgs, ReportWorkloadArgs,
};
use crate::output::{self, Progress};

/// What `report procurement --format json` prints (and writes as `procurement.json`).
#[derive(Debug, Serialize)]
struct ProcurementResult<'a> {
    mix: &'a Mix,
    budget: Option<f64>,
    objective: Objective,
    candidates: &'a [CandidateResult],
    software: &'a [ridgeline_app::report::SoftwareRow],
    files: Vec<String>,
}

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
    // procurement.json, written with the report in one directory swap, lists every file,
    // itself included.
    let result = |files: Vec<String>| ProcurementResult {
        mix: &p.mix,
        budget: args.budget,
        objective: args.objective,
        candidates: &p.candidates,
        software: &p.software,
        files,
    };
    let typed = "procurement.json";
    let files = report::write_to(
        &p.report,
        &args.out.out,
        args.out.images.format(),
        &|paths| {
            let mut files = paths.to_vec();
            files.push(args.out.out.join(typed).display().to_string());
            let json = serde_json::to_string_pretty(&result(files))? + "\n";
            Ok(vec![(typed.to_owned(), json.into_bytes())])
        },
    )?;
    let result = result(files);

    let cols = report::ranking_cols();
    output::print(args.out.format.format, &result, |style| {
        let mut doc =
            Document::new(p.report.title.clone()).table(output::table(&p.candidates, &cols, style));
        for c in &p.candidates {
            for r in &c.reasons {
                doc = doc.note(format!("{}: {r}", c.name));
            }
        }
        for caveat in &p.caveats {
            doc = doc.note(caveat.clone());
        }
        for r in &p.software {
            doc = doc.note(match r.speedup {
                Some(x) => format!(
                    "{}: {} a mix under `{}`, {} under `{}` ({x:.2}x)",
                    r.candidate,
                    style.seconds(ridgeline_model::units::Seconds::new(
                        r.mix_time_s.unwrap_or_default()
                    )),
                    r.stack,
                    style.seconds(ridgeline_model::units::Seconds::new(
                        r.tuned_mix_time_s.unwrap_or_default()
                    )),
                    r.tuned
                ),
                None => format!(
                    "{}: the mix does not run whole under `{}` or `{}`",
                    r.candidate, r.stack, r.tuned
                ),
            });
        }
        if args.out.format.format == Format::Table {
            doc = doc.note(format!("report written to {}", args.out.out.display()));
            for f in &result.files {
                doc = doc.note(format!("  {f}"));
            }
        }
        doc
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
    #[derive(Serialize)]
    struct Written<'a, T> {
        #[serde(flatten)]
        result: &'a T,
        files: &'a [String],
    }
    output::print(
        format,
        &Written {
            result: value,
            files,
        },
        |_| {
            let mut doc = Document::new(report.title.clone());
            doc = doc.note("files written:");
            for f in files {
                doc = doc.note(format!("  {f}"));
            }
            doc
        },
    )
}
