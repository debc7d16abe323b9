//! Plain-text rendering for terminals: title, aligned summary, aligned table, notes.

use crate::table::{Align, Document};
use crate::{Error, Renderer};

/// Renders a document as aligned plain text.
#[derive(Debug, Clone, Copy, Default)]
pub struct Text;

impl Renderer for Text {
    fn render(&self, doc: &Document) -> Result<String, Error> {
        let mut out = String::new();
        if !doc.title.is_empty() {
            out.push_str(&doc.title);
            out.push('\n');
        }
        let key_width = doc
            .summary
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        for (key, value) in &doc.summary {
            out.push_str(&format!("  {key:<key_width$}  {value}\n"));
        }
        for table in std::iter::once(&doc.table).chain(&doc.more) {
            if table.columns.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push('\n');
            }
            let widths: Vec<usize> = table
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let cells = table.rows.iter().map(|r| r[i].chars().count());
                    cells.chain([c.header.chars().count()]).max().unwrap_or(0)
                })
                .collect();
            let line = |cells: Vec<&str>| {
                let padded: Vec<String> = cells
                    .iter()
                    .zip(&table.columns)
                    .zip(&widths)
                    .map(|((cell, col), &w)| match col.align {
                        Align::Left => format!("{cell:<w$}"),
                        Align::Right => format!("{cell:>w$}"),
                    })
                    .collect();
                format!("{}\n", padded.join("  ").trim_end())
            };
            out.push_str(&line(
                table.columns.iter().map(|c| c.header.as_str()).collect(),
            ));
            let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
            out.push_str(&format!("{}\n", rule.join("  ")));
            for row in &table.rows {
                out.push_str(&line(row.iter().map(String::as_str).collect()));
            }
        }
        for note in &doc.notes {
            out.push_str(&format!("\n{note}"));
        }
        if !doc.notes.is_empty() {
            out.push('\n');
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Table;

    fn doc() -> Document {
        let mut t = Table::new([("name", Align::Left), ("value", Align::Right)]);
        t.push(["a", "1"]);
        t.push(["longer", "1,000"]);
        Document::new("Title")
            .summary("k", "v")
            .summary("key", "value")
            .table(t)
            .note("note")
    }

    #[test]
    fn text_snapshot() {
        insta::assert_snapshot!(Text.render(&doc()).unwrap(), @r"
        Title
          k    v
          key  value

        name    value
        ------  -----
        a           1
        longer  1,000

        note
        ");
    }

    #[test]
    fn further_tables_follow_the_first() {
        let mut t = Table::new([("step", Align::Left)]);
        t.push(["second"]);
        let text = Text.render(&doc().then_table(t)).unwrap();
        let (first, second) = (text.find("longer").unwrap(), text.find("second").unwrap());
        assert!(
            first < second && second < text.find("note").unwrap(),
            "{text}"
        );
        assert!(text.contains("step\n----"), "{text}");
    }
}
