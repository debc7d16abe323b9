//! `calibrate`: a profile of a machine fitted on its micro-kernel records.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{Context, Result};
use ridgeline_calibrate::loggp::LevelChoice;
use ridgeline_calibrate::profile::{self, Calibration, Options};
use ridgeline_calibrate::records::RecordFile;

use crate::campaign::Observer;
use crate::{atomic, inputs};

/// Fits a profile of datasheet system `system` on the records files `records` (at
/// `threads`, the most present where `None`; MPI ping-pong records describe `comm_level`),
/// checks that it calibrates that system's device, and writes it to `out`.
pub fn calibrate(
    records: &[PathBuf],
    system: &str,
    threads: Option<usize>,
    comm_level: LevelChoice,
    out: &Path,
    observer: &dyn Observer,
) -> Result<Calibration> {
    // The datasheet system must exist before anything is fitted against it.
    let datasheet = inputs::system(system)?;
    let files = records
        .iter()
        .map(|p| {
            Ok(RecordFile {
                path: p.display().to_string(),
                records: inputs::records(p, observer)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let c = profile::calibrate(
        &files,
        &Options {
            system: system.to_owned(),
            threads,
            created: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            comm_level,
        },
    )
    .with_context(|| {
        format!(
            "calibrating from {}",
            records
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let named: Vec<String> = records.iter().map(|p| p.display().to_string()).collect();
    c.profile
        .check_device(&datasheet, &named.join(", "))
        .context("--system: the profile would overlay another device")?;
    atomic::write(out, c.profile.to_toml())?;
    Ok(c)
}
