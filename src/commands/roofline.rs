//! `ridgeline roofline`.

use anyhow::Result;
use ridgeline_model::cost;
use ridgeline_model::roofline::{self, Bound, Efficiency, PeakClass, RooflineLayer};
use ridgeline_reports::Document;

use crate::cli::RooflineArgs;
use crate::load;
use crate::output::{self, Col, Style, num, text};
use crate::plots;

pub(crate) fn run(args: &RooflineArgs) -> Result<()> {
    let graph = load::workload(&args.workload)?;
    let system = load::system(&args.system.system)?;
    let c = cost::cost(&graph, args.batch, args.precision.precision);
    let r = roofline::roofline(&graph, &c, &system, Efficiency::IDEAL)?;
    let cols = cols();
    output::print(args.format.format, &r, |style| {
        let s = Style::Human;
        let share = |t: ridgeline_model::units::Seconds| 100.0 * t.value() / r.step_time.value();
        Document::new(format!(
            "Roofline: {} on {} ({}), batch {}, {}",
            r.workload, r.system, r.device, r.batch, r.precision
        ))
        .summary("matrix peak", format!("{} ({})", s.flop_rate(r.matrix_peak.rate), r.matrix_peak.name))
        .summary("vector peak", format!("{} ({})", s.flop_rate(r.vector_peak.rate), r.vector_peak.name))
        .summary(
            "memory bandwidth",
            r.memory_bandwidth
                .map_or_else(|| "unknown until measured".to_owned(), |b| s.byte_rate(b)),
        )
        .summary(
            "machine balance",
            r.machine_balance
                .map_or_else(|| "unknown".to_owned(), |m| format!("{m:.1} FLOP/B")),
        )
        .summary("step FLOPs / HBM bytes", format!("{} / {}", s.flops(r.flops), s.bytes(r.bytes)))
        .summary("step time", s.seconds(r.step_time))
        .summary(
            "bound by",
            format!(
                "compute {:.1}% of the time, memory {:.1}%",
                share(r.compute_bound_time),
                share(r.memory_bound_time)
            ),
        )
        .summary("attained", format!("{} ({:.1}% of matrix peak)", s.flop_rate(r.attained), 100.0 * r.fraction_of_peak))
        .summary("samples per second", format!("{:.1}", r.samples_per_second))
        .table(output::table(&r.layers, &cols, style))
        .note("Ideal efficiency (every peak attained): a lower bound on step time. Layers run one after another.")
        .notes(r.assumptions.iter().map(|a| format!("assumed: {a}")))
    })?;
    plots::emit(&args.plot, || {
        vec![plots::roofline(
            &r,
            &plots::ceilings(&system, args.precision.precision),
            plots::datasheet_bandwidth(&system),
        )]
    })
}

/// The table's columns (also used by `report`).
pub(crate) fn cols<'g>() -> [Col<RooflineLayer<'g>>; 9] {
    [
        text("layer", "name", |r, _| r.name.to_owned()),
        text("op", "op", |r, _| r.op.to_owned()),
        text("peak", "peak", |r, _| match r.peak {
            PeakClass::Matrix => "matrix".to_owned(),
            PeakClass::Vector => "vector".to_owned(),
        }),
        num("FLOP", "flops", |r, s| s.flops(r.flops)),
        num("HBM bytes", "bytes", |r, s| s.bytes(r.bytes)),
        num("FLOP/B", "arithmetic_intensity", |r, s| {
            s.number(r.arithmetic_intensity, 1)
        }),
        num("time", "time", |r, s| s.seconds(r.time)),
        text("bound", "bound", |r, _| {
            match r.bound {
                Bound::Compute => "compute",
                Bound::Memory => "memory",
                Bound::None => "-",
            }
            .to_owned()
        }),
        num("attained", "attained", |r, s| s.flop_rate(r.attained)),
    ]
}
