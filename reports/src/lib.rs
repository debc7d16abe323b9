//! # ridgeline-reports
//!
//! Presentation of ridgeline's results. A command builds a [`Document`] (a title, a short
//! summary of key/value lines, and one [`Table`] of rows), and a [`Renderer`] turns it into
//! text: [`Text`] for terminals (aligned columns) and [`Csv`] for spreadsheets (the table
//! only). JSON output is not rendered here: commands serialise their typed result structs
//! directly, which is the stable interface.
//!
//! This crate computes nothing; it will also own the plots (SVG/PNG) and the HTML and
//! Markdown report renderers.
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

mod csv;
mod error;
mod format;
mod table;
mod text;

pub use crate::csv::Csv;
pub use error::Error;
pub use format::{count, fixed};
pub use table::{Align, Column, Document, Table};
pub use text::Text;

/// Turns a [`Document`] into text in one format.
pub trait Renderer {
    /// Renders the document.
    fn render(&self, doc: &Document) -> Result<String, Error>;
}
