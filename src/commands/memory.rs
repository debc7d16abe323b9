//! `ridgeline memory`.

use anyhow::Result;
use ridgeline_model::memory::{self, BatchSweep, MemoryRow};
use ridgeline_reports::Document;

use crate::cli::MemoryArgs;
use crate::load;
use crate::output::{self, Col, Style, num};
use crate::plots;

pub(crate) fn run(args: &MemoryArgs) -> Result<()> {
    let graph = load::workload(&args.workload)?;
    let system = load::system(&args.system.system)?;
    let sweep = args.batch_range.map(|(from, to)| match args.batch_step {
        Some(step) => BatchSweep::Linear { from, to, step },
        None => BatchSweep::Doubling { from, to },
    });
    if args.batch_step.is_some() && sweep.is_none() {
        anyhow::bail!("--batch-step needs --batch-range A..B");
    }
    let r = memory::report(
        &graph,
        &system,
        args.precision.precision,
        args.optimizer,
        sweep,
    )?;
    let cols = cols();
    output::print(args.format.format, &r, |style| {
        let s = Style::Human;
        let llc = r
            .llc
            .as_ref()
            .map_or_else(|| "unknown".to_owned(), |l| s.bytes(l.value));
        Document::new(format!(
            "Memory per device: {} on {} ({})",
            r.workload, r.system, r.device
        ))
        .summary("precision", r.precision.name())
        .summary("optimizer", r.optimizer.name())
        .summary(
            "device memory",
            format!(
                "{} ({})",
                s.bytes(r.device_memory.value),
                r.device_memory.source
            ),
        )
        .summary("last-level cache", llc)
        .summary("fixed", s.bytes(r.fixed_bytes))
        .summary("per sample", s.bytes(r.per_sample_bytes))
        .summary("max batch", s.count(r.max_batch))
        .summary(
            "max batch in cache",
            r.max_batch_llc
                .map_or_else(|| "unknown".to_owned(), |b| s.count(b)),
        )
        .table(output::table(&r.rows, &cols, style))
    })?;
    plots::emit(&args.plot, || {
        vec![plots::memory(
            "memory",
            &r.workload,
            &r.rows,
            plots::capacities(&system),
        )]
    })
}

/// The table's columns (also used by `report`).
pub(crate) fn cols() -> [Col<MemoryRow>; 11] {
    [
        num("batch", "batch", |r, s| s.count(r.batch)),
        num("params", "parameters", |r, s| s.bytes(r.parameters)),
        num("grads", "gradients", |r, s| s.bytes(r.gradients)),
        num("optimizer", "optimizer_state", |r, s| {
            s.bytes(r.optimizer_state)
        }),
        num("buffers", "buffers", |r, s| s.bytes(r.buffers)),
        num("workspace", "workspace", |r, s| s.bytes(r.workspace)),
        num("input", "input", |r, s| s.bytes(r.input)),
        num("activations", "activations", |r, s| s.bytes(r.activations)),
        num("act. grads", "activation_gradients", |r, s| {
            s.bytes(r.activation_gradients)
        }),
        num("total", "total", |r, s| s.bytes(r.total)),
        num("fits", "fits", |r, _| {
            if r.fits { "yes" } else { "no" }.to_owned()
        }),
    ]
}
