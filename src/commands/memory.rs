//! `ridgeline memory`.

use anyhow::Result;
use ridgeline_app::figures;
use ridgeline_app::inputs;
use ridgeline_app::tables;
use ridgeline_model::memory::{self, BatchSweep};
use ridgeline_model::units::Bytes;
use ridgeline_reports::Document;

use crate::cli::MemoryArgs;
use crate::output::{self, Style};

pub(crate) fn run(args: &MemoryArgs) -> Result<()> {
    let graph = inputs::workload(&args.target.workload.spec())?;
    let stack = inputs::stack(args.stack.stack.as_deref())?;
    stack.check_precision(args.precision.precision)?;
    let system = inputs::system(&args.target.system.system)?;
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
        &stack,
        sweep,
    )?;
    let cols = tables::memory_cols();
    output::print(args.output.format.format, &r, |style| {
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
        .summary("software stack", stack.name.clone())
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
        .summary("stack keeps less", {
            let m = &r.stack_memory;
            let all = m.attention_saved + m.fused_saved + m.recompute_saved;
            if all > 0.0 {
                format!(
                    "{} a sample (fused attention: {}; fused chains recompute their inner \
                     outputs: {}; recomputation `{}`: {})",
                    s.bytes(Bytes::new(all)),
                    s.bytes(Bytes::new(m.attention_saved)),
                    s.bytes(Bytes::new(m.fused_saved)),
                    stack.recompute.value,
                    s.bytes(Bytes::new(m.recompute_saved))
                )
            } else {
                "nothing: every activation a layer needs is kept".to_owned()
            }
        })
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
    output::plots(&args.output.plot, || {
        Ok(vec![figures::memory(
            "memory",
            &r.workload,
            &r.rows,
            figures::capacities(&system),
        )])
    })
}
