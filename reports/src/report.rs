//! The multi-section report every report renderer shares: a title, an introduction, and
//! sections of paragraphs, key facts, tables and figures. A [`ReportRenderer`] turns it into
//! [`Artifact`]s (named files); the command decides where they go.

use crate::Error;
use crate::chart::Figure;
use crate::table::Table;

/// A table in a report: human-readable cells for HTML and Markdown, raw base-unit numbers
/// under machine-friendly headers for CSV and JSON (built from one column definition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportTable {
    /// File stem of its CSV and anchor in HTML: lowercase letters, digits and `-`.
    pub id: String,
    /// What the table shows.
    pub caption: String,
    /// Cells as people read them.
    pub human: Table,
    /// Cells as programs read them (same rows).
    pub raw: Table,
}

/// One section of a report.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Section {
    /// Heading.
    pub heading: String,
    /// Paragraphs of prose, before everything else.
    pub paragraphs: Vec<String>,
    /// Key facts (label, value).
    pub facts: Vec<(String, String)>,
    /// Tables.
    pub tables: Vec<ReportTable>,
    /// Figures.
    pub figures: Vec<Figure>,
}

impl Section {
    /// An empty section.
    pub fn new(heading: impl Into<String>) -> Self {
        Section {
            heading: heading.into(),
            ..Section::default()
        }
    }

    /// Adds a paragraph.
    #[must_use]
    pub fn paragraph(mut self, text: impl Into<String>) -> Self {
        self.paragraphs.push(text.into());
        self
    }

    /// Adds a key fact.
    #[must_use]
    pub fn fact(mut self, label: impl Into<String>, value: impl Into<String>) -> Self {
        self.facts.push((label.into(), value.into()));
        self
    }

    /// Adds a table.
    #[must_use]
    pub fn table(mut self, table: ReportTable) -> Self {
        self.tables.push(table);
        self
    }

    /// Adds a figure.
    #[must_use]
    pub fn figure(mut self, figure: Figure) -> Self {
        self.figures.push(figure);
        self
    }
}

/// A report: title, introduction and sections.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Report {
    /// Title.
    pub title: String,
    /// Introductory paragraphs.
    pub intro: Vec<String>,
    /// Sections, in order.
    pub sections: Vec<Section>,
    /// A line naming the tool, version and inputs (shown at the foot).
    pub provenance: String,
}

impl Report {
    /// Every table, in order.
    pub fn tables(&self) -> impl Iterator<Item = &ReportTable> {
        self.sections.iter().flat_map(|s| s.tables.iter())
    }

    /// Every figure, in order.
    pub fn figures(&self) -> impl Iterator<Item = &Figure> {
        self.sections.iter().flat_map(|s| s.figures.iter())
    }

    /// Checks that table and figure identifiers are usable as file names and unique
    /// (tables and figures apart: they go to different folders and anchors).
    pub fn check(&self) -> Result<(), Error> {
        let tables = self.tables().map(|t| t.id.as_str());
        let figures = self.figures().map(|f| f.id.as_str());
        for (kind, ids) in [
            ("table", tables.collect::<Vec<_>>()),
            ("figure", figures.collect()),
        ] {
            let mut seen = std::collections::BTreeSet::new();
            for id in ids {
                let valid = !id.is_empty()
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
                if !valid {
                    return Err(Error::Report(format!(
                        "{kind} identifier `{id}` must be lowercase letters, digits and `-`"
                    )));
                }
                if !seen.insert(id) {
                    return Err(Error::Report(format!(
                        "{kind} identifier `{id}` is used twice"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// A file a renderer produces: its name (relative to the output directory) and contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Relative path, `/`-separated.
    pub name: String,
    /// Contents.
    pub bytes: Vec<u8>,
}

impl Artifact {
    /// A text file.
    pub fn text(name: impl Into<String>, text: String) -> Self {
        Artifact {
            name: name.into(),
            bytes: text.into_bytes(),
        }
    }
}

/// Turns a [`Report`] into files.
pub trait ReportRenderer {
    /// Renders the report.
    fn render(&self, report: &Report) -> Result<Vec<Artifact>, Error>;
}

/// Image format of plot files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ImageFormat {
    /// Scalable vector graphics (text stays text).
    #[default]
    Svg,
    /// Portable network graphics.
    Png,
}

impl ImageFormat {
    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            ImageFormat::Svg => "svg",
            ImageFormat::Png => "png",
        }
    }

    /// The chart as a file's bytes in this format.
    pub fn draw(self, chart: &crate::chart::Chart) -> Result<Vec<u8>, Error> {
        match self {
            ImageFormat::Svg => Ok(crate::plot::svg(chart)?.into_bytes()),
            ImageFormat::Png => crate::plot::png(chart),
        }
    }
}

/// Test fixtures shared by the renderers' snapshot tests.
#[cfg(test)]
pub(crate) mod fixture {
    use super::*;
    use crate::chart::{Axis, Chart, Mark, Series, XyChart};
    use crate::table::Align;

    /// A small report with user-supplied strings that need escaping.
    pub(crate) fn report() -> Report {
        let mut human = Table::new([("system", Align::Left), ("time", Align::Right)]);
        human.push(["<b>fast</b> & co", "1.50 h"]);
        human.push(["a|b", "3.00 h"]);
        let mut raw = Table::new([("system", Align::Left), ("time_s", Align::Right)]);
        raw.push(["<b>fast</b> & co", "5400"]);
        raw.push(["a|b", "10800"]);
        Report {
            title: "Procurement: mix <1>".into(),
            intro: vec!["Two candidates & one mix.".into()],
            sections: vec![
                Section::new("Ranking")
                    .paragraph("`<b>fast</b> & co` ranks first.")
                    .fact("mix", "mlperf-hpc")
                    .table(ReportTable {
                        id: "ranking".into(),
                        caption: "Time to solution".into(),
                        human,
                        raw,
                    })
                    .figure(Figure {
                        id: "time".into(),
                        chart: Chart::Xy(XyChart {
                            title: "Scaling of <b>fast</b>".into(),
                            x: Axis::log("nodes"),
                            y: Axis::log("time (s)"),
                            series: vec![Series::new(
                                "predicted",
                                Mark::Line,
                                0,
                                vec![(1.0, 100.0), (2.0, 52.0), (4.0, 27.0)],
                            )],
                        }),
                        caption: "Strong scaling.".into(),
                    }),
            ],
            provenance: "ridgeline 0.1.0".into(),
        }
    }
}
