//! `ridgeline roofline`.

use anyhow::Result;
use ridgeline_app::figures;
use ridgeline_app::inputs;
use ridgeline_app::tables;
use ridgeline_model::cost;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::predict::{self, DeviceRates, StepModel, Timing};
use ridgeline_model::roofline::{self, Efficiency};
use ridgeline_model::units::Seconds;
use ridgeline_reports::Document;

use crate::cli::RooflineArgs;
use crate::output::{self, Style};

/// The roofline, and the step under a stack where one is asked for.
#[derive(serde::Serialize)]
struct Out<'a> {
    #[serde(flatten)]
    roofline: &'a roofline::Roofline<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stack: Option<&'a StackRoofline>,
}

/// The step at the roofline under a stack's rules.
#[derive(serde::Serialize)]
struct StackRoofline {
    /// Forward and backward of every entry, every peak attained, seconds.
    step_time_s: f64,
    /// What the stack changed.
    effects: predict::StackEffects,
}

pub(crate) fn run(args: &RooflineArgs) -> Result<()> {
    let graph = inputs::workload(&args.target.workload.spec())?;
    let system = inputs::system(&args.target.system.system)?;
    let c = cost::cost(&graph, args.batch, args.precision.precision);
    let r = roofline::roofline(&graph, &c, &system, Efficiency::IDEAL)?;
    let precision = args.precision.precision;
    // Under a stack: its fused groups and its matrix formats, every peak attained.
    let stack = match &args.stack {
        Some(name) => {
            let stack = inputs::stack(Some(name))?;
            stack.check_precision(precision)?;
            let model = StepModel::with_stack(&graph, precision, Optimizer::SgdMomentum, &stack);
            let rates = DeviceRates::of(&system, precision, Efficiency::IDEAL)?;
            let step_time_s: f64 = model
                .layer_times(args.batch as f64, &rates, &Timing::default())
                .iter()
                .map(|l| l.forward_s + l.backward_s)
                .sum();
            Some(StackRoofline {
                step_time_s,
                effects: model.effects().clone(),
            })
        }
        None => None,
    };
    let out = Out {
        roofline: &r,
        stack: stack.as_ref(),
    };
    let cols = tables::roofline_cols();
    output::print(args.output.format.format, &out, |style| {
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
        .summary(
            "transferred kernel model",
            if r.layers.iter().any(|l| l.transferred.is_some()) {
                let t: ridgeline_model::units::Seconds =
                    r.layers.iter().map(|l| l.transferred.unwrap_or(l.time)).sum();
                format!(
                    "{} a step ({} of its layers; what `predict` counts), {:.1}x the roofline",
                    s.seconds(t),
                    r.layers.iter().filter(|l| l.transferred.is_some()).count(),
                    t.value() / r.step_time.value()
                )
            } else {
                "none: the device is not a GPU with [compute] sms and boost clock, a peak for this precision and a memory bandwidth in its file".to_owned()
            },
        )
        .summary(
            "under the stack",
            stack.as_ref().map_or_else(
                || "not asked (--stack NAME)".to_owned(),
                |st| {
                    format!(
                        "{} a step at the roofline under `{}` ({:.2}x): its fused groups and \
                         matrix formats",
                        s.seconds(Seconds::new(st.step_time_s)),
                        st.effects.stack,
                        st.step_time_s / r.step_time.value()
                    )
                },
            ),
        )
        .table(output::table(&r.layers, &cols, style))
        .notes(stack.iter().flat_map(|st| {
            predict::rule_lines(&st.effects, args.batch as f64, args.batch as f64, 1.0)
        }))
        .note("Ideal efficiency (every peak attained): a lower bound on step time. Layers run one after another. The `transfer model` column times each layer by the kernel model fitted on measured GPU kernels (never below the roofline), as `predict` does.")
        .notes(r.assumptions.iter().map(|a| format!("assumed: {a}")))
    })?;
    output::plots(&args.output.plot, || {
        Ok(vec![figures::roofline(
            &r,
            &figures::ceilings(&system, args.precision.precision),
            figures::datasheet_bandwidth(&system)?,
        )])
    })
}
