//! # ridgeline-reports
//!
//! Presentation of ridgeline's results; this crate computes nothing.
//!
//! - **Command output.** A command builds a [`Document`] (a title, a short summary of
//!   key/value lines, and one [`Table`] of rows), and a [`Renderer`] turns it into text:
//!   [`Text`] for terminals (aligned columns) and [`Csv`] for spreadsheets (the table only).
//!   JSON output is not rendered here: commands serialise their typed result structs
//!   directly, which is the stable interface.
//! - **Plots.** A [`chart::Chart`] says what a plot shows ([`chart::XyChart`]: lines,
//!   sized points and stacked areas on linear or log axes; [`chart::BarChart`]: grouped or
//!   stacked bars with reference lines), and [`plot`] draws it with plotters as SVG or PNG,
//!   with a bundled font so that output does not depend on the machine's fonts.
//! - **Reports.** A [`Report`] has sections of prose, key facts, [`ReportTable`]s (human
//!   and raw cells from one column definition) and [`chart::Figure`]s; a [`ReportRenderer`]
//!   turns it into files ([`Artifact`]s), one renderer per format: [`Html`] (one
//!   self-contained page, plots inline, every string escaped), [`Markdown`] (plots as files
//!   beside it), [`CsvTables`] (every table) and [`Json`] (every table and figure as data).
//!
//! ```
//! use ridgeline_reports::{Align, Document, Renderer, Table, Text};
//!
//! let mut table = Table::new([("layer", Align::Left), ("params", Align::Right)]);
//! table.push(["conv1", "9,408"]);
//! let doc = Document::new("resnet50").summary("batch", "1").table(table);
//! let text = Text.render(&doc)?;
//! assert!(text.lines().any(|l| l.starts_with("conv1") && l.ends_with("9,408")));
//! # Ok::<(), ridgeline_reports::Error>(())
//! ```

pub mod chart;
mod csv;
mod error;
mod format;
mod html;
mod json;
mod markdown;
pub mod plot;
mod report;
mod table;
mod text;

pub use crate::csv::{Csv, CsvTables};
pub use error::Error;
pub use format::{count, fixed};
pub use html::Html;
pub use json::Json;
pub use markdown::Markdown;
pub use report::{Artifact, ImageFormat, Report, ReportRenderer, ReportTable, Section};
pub use table::{Align, Column, Document, Renderer, Table};
pub use text::Text;
