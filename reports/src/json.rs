//! JSON: the whole report as data — every table with its raw base-unit cells (one object
//! per row, keyed by the raw headers) and every figure with the series it plots.

use serde::Serialize;

use crate::Error;
use crate::chart::Figure;
use crate::report::{Artifact, Report, ReportRenderer, ReportTable};

/// Renders a report as `report.json`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

#[derive(Serialize)]
struct JsonReport<'a> {
    title: &'a str,
    intro: &'a [String],
    sections: Vec<JsonSection<'a>>,
    provenance: &'a str,
}

#[derive(Serialize)]
struct JsonSection<'a> {
    heading: &'a str,
    paragraphs: &'a [String],
    facts: serde_json::Map<String, serde_json::Value>,
    tables: Vec<JsonTable<'a>>,
    figures: &'a [Figure],
}

#[derive(Serialize)]
struct JsonTable<'a> {
    id: &'a str,
    caption: &'a str,
    columns: Vec<&'a str>,
    rows: Vec<serde_json::Map<String, serde_json::Value>>,
}

/// A raw cell as JSON: a number when it parses as one, else the text.
fn value(cell: &str) -> serde_json::Value {
    match cell.parse::<f64>() {
        Ok(v) if v.is_finite() => serde_json::json!(v),
        _ if cell.is_empty() => serde_json::Value::Null,
        _ => serde_json::Value::String(cell.to_owned()),
    }
}

fn table(t: &ReportTable) -> JsonTable<'_> {
    let columns: Vec<&str> = t.raw.columns.iter().map(|c| c.header.as_str()).collect();
    let rows = t
        .raw
        .rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .zip(row)
                .map(|(c, cell)| ((*c).to_owned(), value(cell)))
                .collect()
        })
        .collect();
    JsonTable {
        id: &t.id,
        caption: &t.caption,
        columns,
        rows,
    }
}

impl ReportRenderer for Json {
    fn render(&self, report: &Report) -> Result<Vec<Artifact>, Error> {
        report.check()?;
        let doc = JsonReport {
            title: &report.title,
            intro: &report.intro,
            sections: report
                .sections
                .iter()
                .map(|s| JsonSection {
                    heading: &s.heading,
                    paragraphs: &s.paragraphs,
                    facts: s
                        .facts
                        .iter()
                        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                        .collect(),
                    tables: s.tables.iter().map(table).collect(),
                    figures: &s.figures,
                })
                .collect(),
            provenance: &report.provenance,
        };
        let text = serde_json::to_string_pretty(&doc).map_err(|e| Error::Report(e.to_string()))?;
        Ok(vec![Artifact::text("report.json", text + "\n")])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn json_snapshot() {
        let files = Json.render(&fixture::report()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&files[0].bytes).unwrap();
        insta::assert_json_snapshot!(v);
    }
}
