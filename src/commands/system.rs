//! `ridgeline system list|show`.

use anyhow::Result;
use ridgeline_app::{catalog, inputs};
use ridgeline_reports::Document;

use crate::cli::{FormatArg, SystemShowArgs};
use crate::output;

pub(crate) fn list(args: &FormatArg) -> Result<()> {
    let rows = catalog::listing()?;
    let cols = catalog::listing_cols();
    output::print(args.format, &rows, |style| {
        Document::new("Systems and devices (any device name also works as a one-device system)")
            .table(output::table(&rows, &cols, style))
    })
}

pub(crate) fn show(args: &SystemShowArgs) -> Result<()> {
    let system = inputs::system(&args.system)?;
    let rows = catalog::figures(&system);
    let cols = catalog::figure_cols();
    output::print(args.format.format, &system, |style| {
        let mut doc = Document::new(format!("System {}", system.name));
        if let Some(d) = &system.description {
            doc = doc.summary("description", d.clone());
        }
        doc.table(output::table(&rows, &cols, style))
            .notes(system.assumptions.iter().map(|a| format!("assumed: {a}")))
    })
}
