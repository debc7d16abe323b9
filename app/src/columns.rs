//! Table columns written from one definition in two styles: human-readable cells (SI
//! prefixes, units, thousands separators) for text and reports, raw base-unit numbers under
//! machine-friendly headers for CSV.

use ridgeline_model::units::{ByteRate, Bytes, FlopRate, Flops, Seconds};
use ridgeline_reports::{Align, Table, count};

/// How cells are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// SI prefixes and units, thousands separators.
    Human,
    /// Plain numbers in base units.
    Raw,
}

impl Style {
    /// A count: thousands separators (human) or the plain integer.
    pub fn count(self, n: impl Into<u128>) -> String {
        let n = n.into();
        match self {
            Style::Human => count(n),
            Style::Raw => n.to_string(),
        }
    }

    /// FLOPs with an SI prefix (human) or in FLOP.
    pub fn flops(self, v: Flops) -> String {
        self.quantity(v.value(), || format!("{v:.2}"))
    }

    /// Bytes with a binary prefix (human) or in bytes.
    pub fn bytes(self, v: Bytes) -> String {
        self.quantity(v.value(), || format!("{v:.2}"))
    }

    /// A time with its unit (human) or in seconds.
    pub fn seconds(self, v: Seconds) -> String {
        self.quantity(v.value(), || format!("{v:.3}"))
    }

    /// FLOP/s with an SI prefix (human) or in FLOP/s.
    pub fn flop_rate(self, v: FlopRate) -> String {
        self.quantity(v.value(), || format!("{v:.2}"))
    }

    /// Bytes/s with an SI prefix (human) or in bytes/s.
    pub fn byte_rate(self, v: ByteRate) -> String {
        self.quantity(v.value(), || format!("{v:.1}"))
    }

    /// A number to `decimals` places (human) or as it is; empty when absent.
    pub fn number(self, v: Option<f64>, decimals: usize) -> String {
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
pub struct Col<R> {
    /// Header in human style.
    pub human: &'static str,
    /// Header in raw style (CSV): the field name, in base units.
    pub raw: &'static str,
    /// Alignment of the column.
    pub align: Align,
    /// Writes a row's cell in a style.
    pub cell: fn(&R, Style) -> String,
}

/// A column of numbers (right-aligned).
pub fn num<R>(human: &'static str, raw: &'static str, cell: fn(&R, Style) -> String) -> Col<R> {
    Col {
        human,
        raw,
        align: Align::Right,
        cell,
    }
}

/// A column of text (left-aligned).
pub fn text<R>(human: &'static str, raw: &'static str, cell: fn(&R, Style) -> String) -> Col<R> {
    Col {
        human,
        raw,
        align: Align::Left,
        cell,
    }
}

/// Builds a table of `rows` under `cols`.
pub fn table<'a, R: 'a>(
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
