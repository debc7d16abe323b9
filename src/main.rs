//! `ridgeline`: the thin command-line front end. Each subcommand parses its arguments,
//! loads what they name, calls one library function and renders the result. Exit codes:
//! 0 on success, 2 on bad input or any failure (clap's usage errors are 2 as well).

mod cli;
mod commands;
mod load;
mod output;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
