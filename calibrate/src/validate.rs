//! Validation: predictions of measured full-workload steps, layer by layer and step by step.
//!
//! For every `workload-step` record, the workload is rebuilt at the measured input size and
//! batch, each layer's forward and backward time is predicted on the calibrated system
//! ([`ridgeline_model::roofline`] with the profile's kernel fits), the step as `predict`
//! times it ([`ridgeline_model::predict::StepModel`]: the same layer times plus the optimizer
//! update at the calibrated memory bandwidth), and the memory as the model's
//! footprint with plain SGD (what the executor runs). Each is compared with the median of
//! the measured samples and with the executor's peak memory.

use ridgeline_measure::{Pass, Record, StepRun};
use ridgeline_model::memory::{Footprint, Optimizer};
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{DeviceRates, KernelModel, StepModel, Timing};
use ridgeline_model::roofline::{self, Efficiency, PeakClass};
use ridgeline_model::stack::Stack;
use ridgeline_model::stack::residuals::{self, StepBand, StepKey};
use ridgeline_model::system::{DeviceKind, System};
use ridgeline_model::transfer::cpu::CpuModel;
use ridgeline_model::units::Bytes;
use ridgeline_model::workloads::{self, BuildOptions};
use ridgeline_model::{catalog, cost};
use serde::Serialize;
use statrs::statistics::{Data, OrderStatistics};

use crate::error::{Error, Result};
use crate::stats::Samples;

/// One layer pass, predicted and measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerPoint {
    /// Workload.
    pub workload: String,
    /// Batch.
    pub batch: usize,
    /// Layer name.
    pub layer: String,
    /// Op kind.
    pub op: String,
    /// `forward` or `backward`.
    pub pass: String,
    /// Predicted seconds.
    pub predicted_s: f64,
    /// Measured seconds (median).
    pub measured_s: f64,
    /// (predicted - measured) / measured.
    pub rel_error: f64,
    /// Whether the prediction comes from a fitted kernel model.
    pub calibrated: bool,
    /// FLOPs of the pass (backward: data and weight gradients).
    pub flops: f64,
    /// Measured hardware efficiency: FLOP/s attained over the device's peak for the
    /// layer's op class (matrix or vector).
    pub efficiency: f64,
}

/// One training step, predicted and measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepPoint {
    /// Workload.
    pub workload: String,
    /// The training precision it ran in (`fp32`, `tf32`, `amp-fp16`, `amp-bf16`), and the
    /// prediction is for.
    pub precision: String,
    /// Input shape of one sample.
    pub input: Vec<usize>,
    /// Batch.
    pub batch: usize,
    /// Predicted seconds per step.
    pub predicted_s: f64,
    /// The prediction's 90 % interval, seconds: the band of measured over predicted time of
    /// the other steps validated under its stack (`band`); where there are too few, or the
    /// band does not speak for the step (a calibrated GPU), from each layer's kernel model
    /// (a calibrated fit's residuals, the transferred model's held-out errors); equal ends
    /// where every layer is at the ideal bound.
    pub predicted_lo_s: f64,
    /// Its upper end.
    pub predicted_hi_s: f64,
    /// Measured seconds per step (median).
    pub measured_s: f64,
    /// (predicted - measured) / measured.
    pub rel_error: f64,
    /// Predicted peak memory.
    pub predicted_memory_bytes: f64,
    /// Measured peak memory (the executor's allocation high-water mark; an imported trace's
    /// peak allocated bytes), where the records hold it.
    pub measured_memory_bytes: Option<f64>,
    /// (predicted - measured) / measured memory, where measured.
    pub memory_rel_error: Option<f64>,
    /// Layers of the step timed by fitted kernel models, and in all.
    pub calibrated_layers: usize,
    /// Layers with work.
    pub layers: usize,
    /// The stack it was predicted under.
    pub stack: String,
    /// The band of measured over predicted step time that gave its interval, where one did:
    /// the steps validated under its stack, this one's own residual left out
    /// ([`ridgeline_model::stack::residuals`]).
    pub band: Option<StepBand>,
}

/// Error statistics of a set of relative errors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ErrorStats {
    /// Points.
    pub n: usize,
    /// Median of |error|.
    pub median_abs_rel_error: f64,
    /// Mean of |error|.
    pub mean_abs_rel_error: f64,
    /// 90th percentile of |error|.
    pub p90_abs_rel_error: f64,
    /// Max of |error|.
    pub max_abs_rel_error: f64,
    /// Mean signed error: positive when predictions run high.
    pub bias: f64,
}

impl ErrorStats {
    /// The statistics of `errors` (empty gives zeros).
    pub fn of(errors: &[f64]) -> ErrorStats {
        if errors.is_empty() {
            return ErrorStats {
                n: 0,
                median_abs_rel_error: 0.0,
                mean_abs_rel_error: 0.0,
                p90_abs_rel_error: 0.0,
                max_abs_rel_error: 0.0,
                bias: 0.0,
            };
        }
        let n = errors.len() as f64;
        let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
        let mut d = Data::new(abs.clone());
        ErrorStats {
            n: errors.len(),
            median_abs_rel_error: d.median(),
            mean_abs_rel_error: abs.iter().sum::<f64>() / n,
            p90_abs_rel_error: d.quantile(0.9),
            max_abs_rel_error: abs.iter().fold(0.0, |m, v| m.max(*v)),
            bias: errors.iter().sum::<f64>() / n,
        }
    }
}

/// The summary of a validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Per-step time: median |error|.
    pub median_abs_rel_error: f64,
    /// Per-step time: max |error|.
    pub max_abs_rel_error: f64,
    /// Per-step memory: median |error|.
    pub memory_median_abs_rel_error: f64,
    /// Per-step memory: max |error|.
    pub memory_max_abs_rel_error: f64,
    /// Step time statistics.
    pub steps: ErrorStats,
    /// Layer time statistics (every layer pass of every step).
    pub layers: ErrorStats,
    /// Memory statistics.
    pub memory: ErrorStats,
    /// Steps whose prediction has an interval of some width, and the share of them whose
    /// measured time falls inside it.
    pub interval_steps: usize,
    /// That share (NaN where no step has an interval).
    pub interval_coverage: f64,
}

/// A validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Validation {
    /// System (calibrated).
    pub system: String,
    /// Its device.
    pub device: String,
    /// The device's kind.
    pub device_kind: DeviceKind,
    /// Steps.
    pub steps: Vec<StepPoint>,
    /// The summary.
    pub summary: Summary,
    /// Every layer pass, the furthest off in seconds first.
    pub worst_layers: Vec<LayerPoint>,
    /// Every layer pass.
    pub layers: Vec<LayerPoint>,
}

/// The built-in stack a measured step ran under: PyTorch's eager mode for one imported from
/// a profiler trace, ridgeline's executor for one it measured.
pub fn ran_under(step: &Record) -> &'static str {
    if step.extra.notes.contains_key("imported_from") {
        "pytorch-eager"
    } else {
        "ridgeline-executor"
    }
}

fn median(file: &str, r: &Record) -> Result<f64> {
    Samples::new(r.samples_s.clone())
        .map(|s| s.median())
        .map_err(|e| Error::Record {
            file: file.to_owned(),
            id: r.id.clone(),
            message: e.to_string(),
        })
}

/// Compares the `workload-step` and `workload-layer` records of `file` with predictions on
/// `system` (a calibrated system; without a profile it validates the datasheet model),
/// each step under `stack`, or else under the stack that ran it: `pytorch-eager` for steps
/// imported from a PyTorch trace (`extra.notes.imported_from`), `ridgeline-executor` for
/// ridgeline's own.
pub fn validate(
    system: &System,
    records: &[Record],
    file: &str,
    stack: Option<&Stack>,
) -> Result<Validation> {
    validate_with(system, records, file, stack, None)
}

/// [`validate`], a CPU's layers timed by `cpu` in place of the CPU kernel model ridgeline
/// ships where the system would take that model (a fit that left this CPU out:
/// `ridgeline validate transfer --cpu`).
pub fn validate_with(
    system: &System,
    records: &[Record],
    file: &str,
    stack: Option<&Stack>,
    cpu: Option<&CpuModel>,
) -> Result<Validation> {
    let runs = StepRun::from_records(records);
    if runs.is_empty() {
        return Err(Error::Input(format!(
            "{file}: no workload-step records; run `ridgeline measure workload W --out {file}`"
        )));
    }
    let mut steps = Vec::new();
    let mut layers = Vec::new();
    for run in &runs {
        steps.push(validate_run(system, run, file, stack, cpu, &mut layers)?);
    }
    Ok(summarise(system, steps, layers))
}

/// One measured step against its prediction, its layers' points added to `layers`.
fn validate_run(
    system: &System,
    measured_run: &StepRun,
    file: &str,
    stack: Option<&Stack>,
    cpu: Option<&CpuModel>,
    layers: &mut Vec<LayerPoint>,
) -> Result<StepPoint> {
    let (step, shape) = (measured_run.step, measured_run.run);
    let bad = |message: String| Error::Record {
        file: file.to_owned(),
        id: step.id.clone(),
        message,
    };
    if let Some(p) = &system.calibration
        && p.threads != step.threads
    {
        return Err(bad(format!(
            "measured on {} threads, but the profile is calibrated on {}; calibrate at the same thread count",
            step.threads, p.threads
        )));
    }
    let (name, batch) = (shape.workload.as_str(), shape.batch);
    let (graph, precision) = rebuild(measured_run, &bad)?;
    let c = cost::cost(&graph, batch as u64, precision);
    let (rebuilt, recorded) = (c.flops_train.value(), step.flops);
    if (rebuilt - recorded).abs() > 1e-6 * recorded.max(1.0) {
        return Err(bad(format!(
            "the record counts {recorded:e} FLOPs per step, the rebuilt `{name}` {rebuilt:e}: it was measured at another width or from a workload file, which validation cannot rebuild; measure the built-in workload at width 1"
        )));
    }
    let r = roofline::roofline(&graph, &c, system, Efficiency::IDEAL)?;
    // The step as `predict` times it: the same per-layer models plus the update.
    let own = match stack {
        Some(_) => None,
        None => Some(catalog::stack(ran_under(step))?),
    };
    let stack = stack
        .or(own.as_ref())
        .unwrap_or_else(|| catalog::default_stack());
    stack
        .check_precision(precision)
        .map_err(|e| bad(e.to_string()))?;
    let mut model = StepModel::with_stack(&graph, precision, Optimizer::Sgd, stack);
    // Each step is judged by the band of the other steps validated under its stack.
    let key = StepKey {
        workload: name.to_owned(),
        device: system.device.name.clone(),
        precision: precision.name().to_owned(),
        batch: batch as u64,
    };
    let kind = system.device.kind;
    model.set_band(kind, residuals::band(stack, kind, Some(&key)));
    let rates = DeviceRates::of(system, precision, Efficiency::IDEAL)?;
    let mut timing = Timing::of(system, precision, KernelModel::Transfer);
    if let (Some(m), Some((_, spec))) = (cpu, timing.cpu) {
        timing.cpu = Some((m, spec));
    }
    let times = model.device_times(batch as f64, &rates, &timing);
    let (predicted, [predicted_lo, predicted_hi]) = (times.step, times.interval_90);
    // The band where it gave the interval (not for a calibrated GPU).
    let band = model.interval_band(kind, &times.timed_by).cloned();
    // Without a profile, each layer as `predict` times it (the transferred kernel model
    // on a GPU); with one, the calibrated roofline's layer times.
    let uncalibrated: Option<Vec<_>> = system
        .calibration
        .is_none()
        .then(|| model.layer_times(batch as f64, &rates, &timing));
    check_layer_names(measured_run, &r, file)?;
    for (l, lc) in r.layers.iter().zip(&c.layers) {
        let peak = match l.peak {
            PeakClass::Matrix => r.matrix_peak.rate.value(),
            PeakClass::Vector => r.vector_peak.rate.value(),
        };
        let timed = uncalibrated
            .as_ref()
            .and_then(|t| t.iter().find(|t| t.layer == l.name));
        let (fwd, bwd) = timed.map_or((l.time_fwd.value(), l.time_bwd.value()), |t| {
            (t.forward_s, t.backward_s)
        });
        for (pass, predicted, flops) in [
            (Pass::Forward, fwd, lc.flops_fwd.value()),
            (Pass::Backward, bwd, lc.flops_bwd.value()),
        ] {
            let Some(m) = measured_run.layer(l.name, pass) else {
                continue;
            };
            let measured = median(file, m)?;
            layers.push(LayerPoint {
                workload: name.to_owned(),
                batch,
                layer: l.name.to_owned(),
                op: l.op.to_owned(),
                pass: pass.name().to_owned(),
                predicted_s: predicted,
                measured_s: measured,
                rel_error: (predicted - measured) / measured,
                calibrated: l.calibrated,
                flops,
                efficiency: flops / measured / peak,
            });
        }
    }
    let measured = median(file, step)?;
    // The footprint under the stack's memory rules, as `predict` gives it (a stack
    // that keeps tied copies counts them).
    let one = ridgeline_model::cost::cost(&graph, 1, precision);
    let kept = ridgeline_model::memory::stack_memory(&graph, &one, stack, None);
    let predicted_memory = Footprint::under(&graph, &one, Optimizer::Sgd, &kept)
        .at(batch as u64, Bytes::new(f64::INFINITY))
        .total
        .value();
    // The executor always records its peak; an imported trace where it profiled memory.
    let measured_memory = step.extra.peak_bytes.map(|b| b as f64);
    Ok(StepPoint {
        workload: name.to_owned(),
        precision: precision.name().to_owned(),
        input: shape.input.clone(),
        batch,
        predicted_s: predicted,
        predicted_lo_s: predicted_lo.min(predicted),
        predicted_hi_s: predicted_hi.max(predicted),
        measured_s: measured,
        rel_error: (predicted - measured) / measured,
        predicted_memory_bytes: predicted_memory,
        measured_memory_bytes: measured_memory,
        memory_rel_error: measured_memory.map(|m| (predicted_memory - m) / m),
        calibrated_layers: r.calibrated_layers,
        layers: r.layers.iter().filter(|l| l.time.value() > 0.0).count(),
        stack: stack.name.clone(),
        band,
    })
}

/// The built-in workload a step ran, rebuilt at its input size, and its training
/// precision.
fn rebuild(
    measured_run: &StepRun,
    bad: &dyn Fn(String) -> Error,
) -> Result<(ridgeline_model::graph::Graph, Precision)> {
    let (step, shape) = (measured_run.step, measured_run.run);
    let (name, input) = (shape.workload.as_str(), &shape.input);
    // A sequence's input size is its whole shape (`[seq]`), a feature map's its spatial
    // extent.
    let sequence = workloads::find(name).is_ok_and(|b| b.sequence);
    let size = if sequence {
        input.clone()
    } else {
        input.get(1..).unwrap_or_default().to_vec()
    };
    let graph = workloads::build(
        name,
        &BuildOptions {
            input_size: Some(size),
            width: 1.0,
        },
    )
    .map_err(|e| bad(format!("{e} (validation rebuilds built-in workloads only)")))?;
    let precision: Precision = step.precision.training().ok_or_else(|| {
        bad(format!(
            "precision: `{}` is not a training precision (fp32, tf32, amp-fp16, \
             amp-bf16); workload records are written by `ridgeline measure workload`",
            step.precision
        ))
    })?;
    Ok((graph, precision))
}

/// Every layer record of a run must be a layer of the rebuilt workload: a renamed or
/// edited record would silently drop out of the comparison.
fn check_layer_names(measured_run: &StepRun, r: &roofline::Roofline, file: &str) -> Result<()> {
    let name = &measured_run.run.workload;
    match measured_run
        .layers
        .iter()
        .find(|(_, m)| !r.layers.iter().any(|l| m.layer == l.name))
    {
        Some((stray, layer)) => Err(Error::Record {
            file: file.to_owned(),
            id: stray.id.clone(),
            message: format!(
                "layer `{}` is not a layer of `{name}` as ridgeline builds it (`ridgeline \
                 workload show {name}` lists them); layer records are matched by name, so \
                 a renamed or edited record cannot be compared",
                layer.layer
            ),
        }),
        None => Ok(()),
    }
}

/// The validation of `steps` and `layers`: error statistics, the 90% intervals' coverage
/// and the layers by absolute error.
fn summarise(system: &System, steps: Vec<StepPoint>, layers: Vec<LayerPoint>) -> Validation {
    let step_errors: Vec<f64> = steps.iter().map(|s| s.rel_error).collect();
    let memory_errors: Vec<f64> = steps.iter().filter_map(|s| s.memory_rel_error).collect();
    let layer_errors: Vec<f64> = layers.iter().map(|l| l.rel_error).collect();
    let step_stats = ErrorStats::of(&step_errors);
    let memory = ErrorStats::of(&memory_errors);
    let judged: Vec<&StepPoint> = steps
        .iter()
        .filter(|s| s.predicted_hi_s > s.predicted_lo_s)
        .collect();
    let inside = judged
        .iter()
        .filter(|s| (s.predicted_lo_s..=s.predicted_hi_s).contains(&s.measured_s))
        .count();
    let mut worst = layers.clone();
    worst.sort_by(|a, b| {
        let d = |l: &LayerPoint| (l.predicted_s - l.measured_s).abs();
        d(b).total_cmp(&d(a))
    });
    Validation {
        system: system.name.clone(),
        device: system.device.name.clone(),
        device_kind: system.device.kind,
        summary: Summary {
            median_abs_rel_error: step_stats.median_abs_rel_error,
            max_abs_rel_error: step_stats.max_abs_rel_error,
            memory_median_abs_rel_error: memory.median_abs_rel_error,
            memory_max_abs_rel_error: memory.max_abs_rel_error,
            steps: step_stats,
            layers: ErrorStats::of(&layer_errors),
            memory,
            interval_steps: judged.len(),
            interval_coverage: if judged.is_empty() {
                f64::NAN
            } else {
                inside as f64 / judged.len() as f64
            },
        },
        steps,
        worst_layers: worst,
        layers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_statistics_match_hand_values() {
        let s = ErrorStats::of(&[0.1, -0.2, 0.05, -0.05, 0.3]);
        assert_eq!(s.n, 5);
        assert!((s.median_abs_rel_error - 0.1).abs() < 1e-12);
        assert!((s.mean_abs_rel_error - 0.14).abs() < 1e-12);
        assert!((s.max_abs_rel_error - 0.3).abs() < 1e-12);
        assert!((s.bias - 0.04).abs() < 1e-12);
        // Type 8, n = 5, tau = 0.9: h = 5.3333 -> beyond n, the maximum.
        assert!((s.p90_abs_rel_error - 0.3).abs() < 1e-12);
        assert_eq!(ErrorStats::of(&[]).n, 0);
    }
}
