//! Resolving command-line names to workloads and systems: built-in and catalog names,
//! `local`, or files. This is the only place that reads input files.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ridgeline_model::graph::Graph;
use ridgeline_model::workloads::{self, BuildOptions};
use ridgeline_model::{Error, catalog, file, system::System};

use crate::cli::WorkloadArgs;

/// Whether a command-line argument names a file rather than a catalog entry.
fn is_file(arg: &str) -> bool {
    arg.ends_with(".toml") || arg.contains('/') || Path::new(arg).is_file()
}

fn read(path: &str, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {what} file `{path}`"))
}

/// The workload a command names, built or parsed with its scaling options.
pub(crate) fn workload(args: &WorkloadArgs) -> Result<Graph> {
    let name = args.workload.as_str();
    if workloads::find(name).is_ok() || !is_file(name) {
        let options = BuildOptions {
            input_size: args.input_size.as_ref().map(|s| s.0.clone()),
            width: args.width.unwrap_or(1.0),
        };
        return workloads::build(name, &options).map_err(|e| match e {
            Error::UnknownName { .. } => {
                anyhow::anyhow!("{e} (or give the path of a workload TOML file)")
            }
            other => other.into(),
        });
    }
    if args.width.is_some() {
        bail!("--width applies to built-in workloads only; edit the channel counts in `{name}`");
    }
    let text = read(name, "workload")?;
    Ok(file::parse_workload(
        &text,
        name,
        args.input_size.as_ref().map(|s| s.0.as_slice()),
    )?)
}

/// The system a command names: a catalog system or device, `local`, or a file.
pub(crate) fn system(arg: &str) -> Result<System> {
    if arg == catalog::LOCAL_NAME {
        let cpuinfo = read("/proc/cpuinfo", "CPU information")?;
        let meminfo = read("/proc/meminfo", "memory information")?;
        return Ok(catalog::local(&cpuinfo, &meminfo)?);
    }
    if is_file(arg) {
        let text = read(arg, "system")?;
        return Ok(catalog::system_from_file(&text, arg)?);
    }
    catalog::system(arg).map_err(|e| match e {
        Error::UnknownName { .. } => {
            anyhow::anyhow!("{e} (or give the path of a system TOML file)")
        }
        other => other.into(),
    })
}
