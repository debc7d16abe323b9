//! Markdown (CommonMark with GitHub tables): the report as `report.md`, with each plot as a
//! file beside it in `figures/` (SVG, or PNG on request), linked as an image.

use std::fmt::Write as _;

use crate::Error;
use crate::report::{Artifact, ImageFormat, Report, ReportRenderer};
use crate::table::Align;

/// Renders a report as `report.md` plus `figures/<id>.svg|png`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Markdown {
    /// Format of the plot files.
    pub images: ImageFormat,
}

/// Escapes the characters Markdown would read as markup (and `|`, which ends a table
/// cell), so names print as themselves.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        if matches!(
            ch,
            '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|' | '#' | '!'
        ) {
            out.push('\\');
        }
        if ch == '\n' {
            out.push(' ');
        } else {
            out.push(ch);
        }
    }
    out
}

impl ReportRenderer for Markdown {
    fn render(&self, report: &Report) -> Result<Vec<Artifact>, Error> {
        report.check()?;
        let mut files = Vec::new();
        let mut out = String::new();
        let _ = writeln!(out, "# {}\n", escape(&report.title));
        for p in &report.intro {
            let _ = writeln!(out, "{}\n", escape(p));
        }
        for s in &report.sections {
            let _ = writeln!(out, "## {}\n", escape(&s.heading));
            for p in &s.paragraphs {
                let _ = writeln!(out, "{}\n", escape(p));
            }
            for (k, v) in &s.facts {
                let _ = writeln!(out, "- **{}**: {}", escape(k), escape(v));
            }
            if !s.facts.is_empty() {
                out.push('\n');
            }
            for t in &s.tables {
                let _ = writeln!(out, "**{}**\n", escape(&t.caption));
                let cols = &t.human.columns;
                out.push('|');
                for c in cols {
                    let _ = write!(out, " {} |", escape(&c.header));
                }
                out.push_str("\n|");
                for c in cols {
                    out.push_str(match c.align {
                        Align::Left => " --- |",
                        Align::Right => " ---: |",
                    });
                }
                out.push('\n');
                for row in &t.human.rows {
                    out.push('|');
                    for cell in row {
                        let _ = write!(out, " {} |", escape(cell));
                    }
                    out.push('\n');
                }
                out.push('\n');
            }
            for f in &s.figures {
                let name = format!("figures/{}.{}", f.id, self.images.extension());
                files.push(Artifact {
                    name: name.clone(),
                    bytes: self.images.draw(&f.chart)?,
                });
                let _ = writeln!(
                    out,
                    "![{}]({name})\n\n*{}*\n",
                    escape(f.chart.title()),
                    escape(&f.caption)
                );
            }
        }
        let _ = writeln!(out, "---\n\n{}", escape(&report.provenance));
        files.insert(0, Artifact::text("report.md", out));
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixture;

    #[test]
    fn markdown_snapshot_and_figure_files() {
        let files = Markdown::default().render(&fixture::report()).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["report.md", "figures/time.svg"]);
        assert!(String::from_utf8_lossy(&files[1].bytes).starts_with("<svg"));
        insta::assert_snapshot!(String::from_utf8(files[0].bytes.clone()).unwrap());
    }

    #[test]
    fn png_figures_on_request() {
        let md = Markdown {
            images: ImageFormat::Png,
        };
        let files = md.render(&fixture::report()).unwrap();
        assert_eq!(files[1].name, "figures/time.png");
        assert_eq!(&files[1].bytes[1..4], b"PNG");
    }
}
