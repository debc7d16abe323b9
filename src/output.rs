//! Printing results: JSON straight from the typed result, tables through
//! `ridgeline-reports`. Table cells are human-readable in `table` format and raw base-unit
//! numbers under machine-friendly headers in `csv` format, from one column definition.

use std::io::{self, IsTerminal, Write};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ridgeline_app::campaign::Observer;
pub(crate) use ridgeline_app::columns::{Style, table};
use ridgeline_reports::{Csv, Document, Renderer, Text};
use serde::Serialize;

use ridgeline_reports::chart::Figure;

use crate::cli::{Format, PlotArgs};

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

/// Says `line` on standard error (standard output stays the command's result): a file
/// written beside the result.
pub(crate) fn say(line: &str) {
    eprintln!("{line}");
}

/// Writes a command's figures where `--plot` asks, and says so on standard error (standard
/// output stays the command's result).
pub(crate) fn plots(args: &PlotArgs, figures: impl FnOnce() -> Result<Vec<Figure>>) -> Result<()> {
    let Some(dir) = &args.plot else {
        return Ok(());
    };
    for path in ridgeline_app::figures::write(dir, args.plot_format.format(), &figures()?)? {
        eprintln!("plot written: {path}");
    }
    Ok(())
}

/// A campaign's progress on standard error: a bar on a terminal (nothing otherwise), and
/// its notices as lines.
pub(crate) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub(crate) fn new() -> Progress {
        Progress {
            bar: ProgressBar::hidden(),
        }
    }
}

impl Observer for Progress {
    fn notice(&self, line: &str) {
        self.bar.suspend(|| eprintln!("{line}"));
    }

    fn begin(&self, total: u64) {
        if std::io::stderr().is_terminal() {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
        self.bar.set_length(total);
        self.bar.set_position(0);
        self.bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise} < {eta}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
    }

    fn step(&self, what: &str) {
        self.bar.set_message(what.to_owned());
    }

    fn advance(&self) {
        self.bar.inc(1);
    }

    fn end(&self) {
        self.bar.finish_and_clear();
        self.bar.set_draw_target(ProgressDrawTarget::hidden());
    }
}
