//! `ridgeline measure ... --slurm | --emit-slurm`, `ridgeline measure merge` and
//! `ridgeline system from-slurm`: campaigns as Slurm job arrays, their merge, and a system
//! file of a partition.

use anyhow::{Context, Result};
use ridgeline_app::slurm::submit::{self, ArrayRequest};
use ridgeline_app::slurm::{self, cluster};

use crate::cli::{MeasureArgs, MeasureMergeArgs, SystemFromSlurmArgs};
use crate::output;

/// `ridgeline measure <name> ... --slurm | --emit-slurm`.
pub(crate) fn campaign(name: &str, args: &MeasureArgs) -> Result<()> {
    let s = &args.slurm;
    let out = args
        .campaign
        .out
        .as_deref()
        .context("--slurm writes a campaign of records: give --out FILE")?;
    let campaigns = ArrayRequest {
        name: name.to_owned(),
        argv: std::env::args().skip(1).collect(),
        ridgeline: std::env::current_exe().context("finding this ridgeline binary")?,
        tasks: s.tasks,
        partitions: s.partition.clone(),
        time: s.time.clone(),
        account: s.account.clone(),
        calibrate: s.calibrate,
        // The jobs run elsewhere.
        out: std::env::current_dir()?.join(out),
    }
    .campaigns()?;
    if s.emit_slurm {
        return output::emit(&submit::scripts(&campaigns));
    }
    let (text, merges) = submit::submit(&campaigns, args.campaign.resume)?;
    if !s.wait {
        return output::emit(&format!(
            "{text}Follow with `squeue --me`; submit the same command with --resume to continue a campaign cut short.\n"
        ));
    }
    // Waiting, the submission is progress (stderr); what the jobs made is the result.
    output::say(text.trim_end());
    output::emit(&submit::finish(&campaigns, &merges)?)
}

/// `ridgeline measure merge DIR --tasks N --out FILE`.
pub(crate) fn merge(args: &MeasureMergeArgs) -> Result<()> {
    output::emit(&slurm::merge(&args.dir, args.tasks, &args.out)?.report(&args.dir)?)
}

/// `ridgeline system from-slurm`.
pub(crate) fn from_slurm(args: &SystemFromSlurmArgs) -> Result<()> {
    let d = cluster::describe_here(args.partition.as_deref(), args.gpu.as_deref())?;
    for a in &d.assumed {
        output::say(&format!("assumed: {a}"));
    }
    let Some(path) = &args.out else {
        return output::emit(&d.toml);
    };
    std::fs::write(path, &d.toml).with_context(|| format!("writing {}", path.display()))?;
    output::emit(&format!(
        "Wrote {}: system {}, {} node(s); check it with `ridgeline system show {}`\n",
        path.display(),
        d.name,
        d.nodes,
        path.display()
    ))
}
