//! Printing results: JSON straight from the typed result, tables through
//! `ridgeline-reports`. Table cells are human-readable in `table` format and raw base-unit
//! numbers under machine-friendly headers in `csv` format, from one column definition.

use std::io::{self, Write};

use anyhow::Result;
use ridgeline_model::units::{ByteRate, Bytes, FlopRate, Flops, Seconds};
use ridgeline_reports::{Align, Csv, Document, Renderer, Table, Text, count};
use serde::Serialize;

use crate::cli::Format;

/// How cells are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// SI prefixes and units, thousands separators.
    Human,
    /// Plain numbers in base units.
    Raw,
}

impl Style {
    pub(crate) fn count(self, n: impl Into<u128>) -> String {
        let n = n.into();
        match self {
            Style::Human => count(n),
            Style::Raw => n.to_string(),
        }
    }

    pub(crate) fn flops(self, v: Flops) -> String {
        self.quantity(v.value(), || format!("{v:.2}"))
    }

    pub(crate) fn bytes(self, v: Bytes) -> String {
        self.quantity(v.value(), || format!("{v:.2}"))
    }

    pub(crate) fn seconds(self, v: Seconds) -> String {
        self.quantity(v.value(), || format!("{v:.3}"))
    }

    pub(crate) fn flop_rate(self, v: FlopRate) -> String {
        self.quantity(v.value(), || format!("{v:.2}"))
    }

    pub(crate) fn byte_rate(self, v: ByteRate) -> String {
        self.quantity(v.value(), || format!("{v:.1}"))
    }

    pub(crate) fn number(self, v: Option<f64>, decimals: usize) -> String {
        match (self, v) {
            (_, None) => String::new(),
            (Style::Raw, Some(v)) => v.to_string(),
            (Style::Human, Some(v)) => format!("{v:.decimals$}"),
        }
    }

    /// Exact zeros print as `0` in human style, so rows of views and inputs stay quiet.
    fn quantity(self, raw: f64, human: impl FnOnce() -> String) -> String {
        match self {
            Style::Human if raw == 0.0 => "0".to_owned(),
            Style::Human => human(),
            Style::Raw => raw.to_string(),
        }
    }
}

/// One column: its text and CSV headers, alignment, and how to write a row's cell.
pub(crate) struct Col<R> {
    pub(crate) human: &'static str,
    pub(crate) raw: &'static str,
    pub(crate) align: Align,
    pub(crate) cell: fn(&R, Style) -> String,
}

/// A column of numbers (right-aligned).
pub(crate) fn num<R>(
    human: &'static str,
    raw: &'static str,
    cell: fn(&R, Style) -> String,
) -> Col<R> {
    Col {
        human,
        raw,
        align: Align::Right,
        cell,
    }
}

/// A column of text (left-aligned).
pub(crate) fn text<R>(
    human: &'static str,
    raw: &'static str,
    cell: fn(&R, Style) -> String,
) -> Col<R> {
    Col {
        human,
        raw,
        align: Align::Left,
        cell,
    }
}

/// Builds a table of `rows` under `cols`.
pub(crate) fn table<'a, R: 'a>(
    rows: impl IntoIterator<Item = &'a R>,
    cols: &[Col<R>],
    style: Style,
) -> Table {
    let mut t = Table::new(cols.iter().map(|c| {
        (
            if style == Style::Human {
                c.human
            } else {
                c.raw
            },
            c.align,
        )
    }));
    for r in rows {
        t.push(cols.iter().map(|c| (c.cell)(r, style)));
    }
    t
}

/// Prints `value` as JSON, or the document `doc` builds (given the cell style) as a table
/// or CSV.
pub(crate) fn print<T: Serialize>(
    format: Format,
    value: &T,
    doc: impl FnOnce(Style) -> Document,
) -> Result<()> {
    let text = match format {
        Format::Json => format!("{}\n", serde_json::to_string_pretty(value)?),
        Format::Table => Text.render(&doc(Style::Human))?,
        Format::Csv => Csv.render(&doc(Style::Raw))?,
    };
    emit(&text)
}

/// Writes to standard output; a closed pipe (`| head`) is not an error.
pub(crate) fn emit(text: &str) -> Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::anyhow!(
            "cannot write the result to standard output: {e}; redirect it to a file system \
             with room (or use --out where the command has it)"
        )),
        Ok(()) => Ok(()),
    }
}
