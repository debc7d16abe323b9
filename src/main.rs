//! `ridgeline`: the thin command-line front end. Each subcommand turns its flags into a
//! request, calls `ridgeline-app` (or a library crate) and renders the result; the map is
//! `docs/ARCHITECTURE.md`. Exit codes: 0 on success, 2 on bad input or any failure (clap's
//! usage errors are 2 as well).

mod cli;
mod commands;
mod output;

use std::process::ExitCode;

use clap::Parser;

/// mimalloc: sweeps build and cost thousands of graphs, and glibc's malloc spends more time
/// trimming and regrowing the heap in that pattern than the model spends computing (see
/// `model/benches/build_cost.rs`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = cli::Cli::parse_from(cli::join_negative_values(std::env::args_os()));
    match commands::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
