//! CSV rendering: the document's table, with a header row. Title, summary and notes are
//! left out so the output loads directly into spreadsheets and data frames. For reports,
//! [`CsvTables`] writes every table's raw cells to a file of its own.

use crate::report::{Artifact, Report, ReportRenderer};
use crate::table::{Document, Table};
use crate::{Error, Renderer};

/// Renders a document's table as RFC 4180 CSV.
#[derive(Debug, Clone, Copy, Default)]
pub struct Csv;

fn write(table: &Table) -> Result<String, Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    let err = |e: csv::Error| Error::Csv(e.to_string());
    writer
        .write_record(table.columns.iter().map(|c| c.header.as_str()))
        .map_err(err)?;
    for row in &table.rows {
        writer.write_record(row).map_err(err)?;
    }
    let bytes = writer.into_inner().map_err(|e| Error::Csv(e.to_string()))?;
    String::from_utf8(bytes).map_err(|e| Error::Csv(e.to_string()))
}

impl Renderer for Csv {
    fn render(&self, doc: &Document) -> Result<String, Error> {
        write(&doc.table)
    }
}

/// Renders every table of a report as `tables/<id>.csv` (raw base-unit cells).
#[derive(Debug, Clone, Copy, Default)]
pub struct CsvTables;

impl ReportRenderer for CsvTables {
    fn render(&self, report: &Report) -> Result<Vec<Artifact>, Error> {
        report.check()?;
        report
            .tables()
            .map(|t| {
                Ok(Artifact::text(
                    format!("tables/{}.csv", t.id),
                    write(&t.raw)?,
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Align, Table};

    #[test]
    fn csv_snapshot_quotes_commas() {
        let mut t = Table::new([("name", Align::Left), ("shape", Align::Left)]);
        t.push(["conv, 1", "4x4"]);
        let doc = Document::new("ignored").summary("also", "ignored").table(t);
        insta::assert_snapshot!(Csv.render(&doc).unwrap(), @r#"
        name,shape
        "conv, 1",4x4
        "#);
    }

    #[test]
    fn report_tables_as_raw_csv_files() {
        let files = CsvTables.render(&crate::report::fixture::report()).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].name, "tables/ranking.csv");
        insta::assert_snapshot!(String::from_utf8(files[0].bytes.clone()).unwrap(), @r#"
        system,time_s
        <b>fast</b> & co,5400
        a|b,10800
        "#);
    }
}
