//! CSV rendering: the document's table, with a header row. Title, summary and notes are
//! left out so the output loads directly into spreadsheets and data frames.

use crate::table::Document;
use crate::{Error, Renderer};

/// Renders a document's table as RFC 4180 CSV.
#[derive(Debug, Clone, Copy, Default)]
pub struct Csv;

impl Renderer for Csv {
    fn render(&self, doc: &Document) -> Result<String, Error> {
        let mut writer = csv::Writer::from_writer(Vec::new());
        let err = |e: csv::Error| Error::Csv(e.to_string());
        writer
            .write_record(doc.table.columns.iter().map(|c| c.header.as_str()))
            .map_err(err)?;
        for row in &doc.table.rows {
            writer.write_record(row).map_err(err)?;
        }
        let bytes = writer.into_inner().map_err(|e| Error::Csv(e.to_string()))?;
        String::from_utf8(bytes).map_err(|e| Error::Csv(e.to_string()))
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
}
