//! `ridgeline roofline`.

use anyhow::Result;
use ridgeline_app::figures;
use ridgeline_app::inputs;
use ridgeline_app::views::model::{self as views, RooflineOut, StackRoofline};
use ridgeline_model::cost;
use ridgeline_model::memory::Optimizer;
use ridgeline_model::predict::{DeviceRates, StepModel, Timing};
use ridgeline_model::roofline::{self, Efficiency};

use crate::cli::RooflineArgs;
use crate::output;

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
    let out = RooflineOut {
        roofline: &r,
        stack: stack.as_ref(),
    };
    output::print(args.output.format.format, &out, |style| {
        views::roofline(&out, args.batch, style)
    })?;
    output::plots(&args.output.plot, || {
        Ok(vec![figures::roofline(
            &r,
            &figures::ceilings(&system, args.precision.precision),
            figures::datasheet_bandwidth(&system)?,
        )])
    })
}
