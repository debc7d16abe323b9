//! What the `report` commands print beside the reports they write.

use std::path::Path;

use ridgeline_model::procurement::{CandidateResult, Mix};
use ridgeline_model::sweep::Objective;
use ridgeline_reports::{Document, Report};
use serde::Serialize;

use crate::columns::{Style, table};
use crate::report::{self, Procurement, SoftwareRow};

/// What `report procurement --format json` prints (and writes as `procurement.json`).
#[derive(Debug, Serialize)]
pub struct ProcurementResult<'a> {
    mix: &'a Mix,
    budget: Option<f64>,
    objective: Objective,
    candidates: &'a [CandidateResult],
    software: &'a [SoftwareRow],
    /// Every file written, `procurement.json` included.
    pub files: Vec<String>,
}

/// Writes procurement report `p` (asked with `budget` and `objective`) into `dir` in every
/// format, with `procurement.json` (its result, listing every file written, itself
/// included) in the same directory swap; the result.
pub fn write_procurement<'a>(
    p: &'a Procurement,
    budget: Option<f64>,
    objective: Objective,
    dir: &Path,
    images: ridgeline_reports::ImageFormat,
) -> anyhow::Result<ProcurementResult<'a>> {
    let result = |files: Vec<String>| ProcurementResult {
        mix: &p.mix,
        budget,
        objective,
        candidates: &p.candidates,
        software: &p.software,
        files,
    };
    let typed = "procurement.json";
    let files = report::write_to(&p.report, dir, images, &|paths| {
        let mut files = paths.to_vec();
        files.push(dir.join(typed).display().to_string());
        let json = serde_json::to_string_pretty(&result(files))? + "\n";
        Ok(vec![(typed.to_owned(), json.into_bytes())])
    })?;
    Ok(result(files))
}

/// The ranking of procurement report `p`, its reasons, caveats and the software's effect;
/// with `written` (where the report went), the files of `result`.
pub fn procurement(
    p: &Procurement,
    result: &ProcurementResult<'_>,
    written: Option<&Path>,
    style: Style,
) -> Document {
    let cols = report::ranking_cols();
    let mut doc = Document::new(p.report.title.clone()).table(table(&p.candidates, &cols, style));
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
    if let Some(dir) = written {
        doc = doc.note(format!("report written to {}", dir.display()));
        for f in &result.files {
            doc = doc.note(format!("  {f}"));
        }
    }
    doc
}

/// A written report's JSON: its result with the files written.
#[derive(Serialize)]
pub struct Written<'a, T> {
    #[serde(flatten)]
    result: &'a T,
    files: &'a [String],
}

impl<'a, T> Written<'a, T> {
    /// `result`, written as `files`.
    pub fn new(result: &'a T, files: &'a [String]) -> Written<'a, T> {
        Written { result, files }
    }
}

/// A written report: its title and the files written.
pub fn written(report: &Report, files: &[String]) -> Document {
    let mut doc = Document::new(report.title.clone());
    doc = doc.note("files written:");
    for f in files {
        doc = doc.note(format!("  {f}"));
    }
    doc
}
