//! The plots ridgeline draws, built from the model's and calibration's results as
//! [`Figure`]s (what to draw; `ridgeline-reports` draws them), and [`write()`], which puts
//! them in a directory.

use std::path::Path;

use anyhow::{Context, Result};
use ridgeline_calibrate::validate::LayerPoint;
use ridgeline_model::graph::Shape;
use ridgeline_model::memory::MemoryRow;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{self, Inputs, Movement, Outcome, Prediction, Scenario};
use ridgeline_model::profile::precision_name;
use ridgeline_model::roofline::Roofline;
use ridgeline_model::scale::{ScaleRow, ScaleSeries};
use ridgeline_model::system::System;
use ridgeline_reports::ImageFormat;
use ridgeline_reports::chart::{
    Axis, BarChart, BarSeries, Chart, Figure, Level, Mark, Series, XyChart,
};

/// The measured compute ceilings of a calibrated system at `precision`, FLOP/s.
pub fn ceilings(system: &System, precision: Precision) -> Vec<(String, f64)> {
    system
        .calibration
        .as_ref()
        .map(|p| {
            p.ceilings
                .iter()
                .filter(|c| c.precision == precision_name(precision))
                .map(|c| (c.kind.clone(), c.tflops * 1e12))
                .collect()
        })
        .unwrap_or_default()
}

/// The datasheet memory bandwidth behind a calibrated system, bytes/s (`None` for a
/// datasheet system, or one whose bandwidth is unknown). The profile's datasheet system
/// loaded when the profile was; an error loading it now is said, not dropped.
pub fn datasheet_bandwidth(system: &System) -> Result<Option<f64>> {
    let Some(profile) = system.calibration.as_ref() else {
        return Ok(None);
    };
    let base = crate::inputs::system(&profile.system)
        .with_context(|| format!("the datasheet system `{}` of a profile", profile.system))?;
    Ok(base.device.memory_bandwidth.map(|b| b.value.value()))
}

/// The device memory and last-level cache of `system` as capacity lines.
pub fn capacities(system: &System) -> Vec<Level> {
    let mut levels = Vec::new();
    if let Some(m) = system.device_memory() {
        levels.push(Level {
            name: format!("{} memory", system.device.name),
            value: m.value.value(),
        });
    }
    if let Some(l) = &system.device.llc {
        levels.push(Level {
            name: "last-level cache".into(),
            value: l.value.value(),
        });
    }
    levels
}

/// Writes figures into `dir` (created if missing) as `<id>.svg|png`; returns the paths.
pub fn write(dir: &Path, format: ImageFormat, figures: &[Figure]) -> Result<Vec<String>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create plot directory `{}`", dir.display()))?;
    figures
        .iter()
        .map(|f| {
            let path = dir.join(format!("{}.{}", f.id, format.extension()));
            crate::atomic::write(&path, format.draw(&f.chart)?)?;
            Ok(path.display().to_string())
        })
        .collect()
}

/// Memory per device against batch size, stacked by component, with capacity lines
/// (\[004\] Fig. 1).
pub fn memory(id: &str, workload: &str, rows: &[MemoryRow], capacities: Vec<Level>) -> Figure {
    let component = |name: &str, f: fn(&MemoryRow) -> f64| BarSeries {
        name: name.to_owned(),
        values: rows.iter().map(f).collect(),
    };
    let chart = BarChart {
        title: format!("Memory per device: {workload}"),
        x_label: "batch size per device".into(),
        y: Axis::linear("memory (bytes)"),
        categories: rows.iter().map(|r| r.batch.to_string()).collect(),
        series: vec![
            component("parameters", |r| r.parameters.value()),
            component("gradients", |r| r.gradients.value()),
            component("optimizer state", |r| r.optimizer_state.value()),
            component("buffers + workspace", |r| {
                r.buffers.value() + r.workspace.value()
            }),
            component("input", |r| r.input.value()),
            component("activations", |r| r.activations.value()),
            component("activation gradients", |r| r.activation_gradients.value()),
        ],
        stacked: true,
        levels: capacities,
    };
    Figure {
        id: id.to_owned(),
        chart: Chart::Bar(chart),
        caption: "Per-device footprint by component (model: ridgeline memory); dashed lines: \
                  device memory and last-level cache."
            .into(),
    }
}

/// The device roofline with each layer as a point sized by its time and coloured by op,
/// plus measured ceilings where a profile gives them.
///
/// With a calibrated profile, `datasheet_bandwidth` is the datasheet's memory bandwidth:
/// the datasheet roof is drawn with it and the measured bandwidth as a dashed roof.
pub fn roofline(
    r: &Roofline<'_>,
    ceilings: &[(String, f64)],
    datasheet_bandwidth: Option<f64>,
) -> Figure {
    // Without a bandwidth (unknown until measured) the roofs are flat: only the peaks bound.
    let bw = r.memory_bandwidth.map_or(f64::INFINITY, |b| b.value());
    let roof_bw = datasheet_bandwidth.unwrap_or(bw);
    let layers: Vec<_> = r
        .layers
        .iter()
        .filter(|l| l.arithmetic_intensity.is_some_and(|a| a > 0.0) && l.attained.value() > 0.0)
        .collect();
    let (lo, hi) = layers
        .iter()
        .filter_map(|l| l.arithmetic_intensity)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), a| {
            (lo.min(a), hi.max(a))
        });
    let (lo, hi) = if lo.is_finite() {
        (
            lo.min(1.0) / 2.0,
            (hi * 2.0).max(2.0 * r.machine_balance.unwrap_or(0.0)),
        )
    } else {
        (0.1, 1000.0)
    };
    let ceiling = |peak: f64, bw: f64| {
        let knee = peak / bw;
        let mut pts = vec![(lo, (bw * lo).min(peak))];
        if knee > lo && knee < hi {
            pts.push((knee, peak));
        }
        pts.push((hi, (bw * hi).min(peak)));
        pts
    };
    let matrix = r.matrix_peak.rate.value();
    let mut series = vec![Series::new(
        if roof_bw.is_finite() {
            format!(
                "{} peak {:.1} TFLOP/s, {:.0} GB/s",
                r.matrix_peak.name,
                matrix / 1e12,
                roof_bw / 1e9
            )
        } else {
            format!(
                "{} peak {:.1} TFLOP/s, bandwidth unknown until measured",
                r.matrix_peak.name,
                matrix / 1e12
            )
        },
        Mark::Line,
        0,
        ceiling(matrix, roof_bw),
    )];
    if r.vector_peak.rate.value() < matrix {
        series.push(Series::new(
            format!(
                "{} peak {:.1} TFLOP/s",
                r.vector_peak.name,
                r.vector_peak.rate.value() / 1e12
            ),
            Mark::Line,
            7,
            ceiling(r.vector_peak.rate.value(), roof_bw),
        ));
    }
    if datasheet_bandwidth.is_some_and(|d| (d - bw).abs() > 1e-9 * d) {
        series.push(Series::new(
            format!("measured bandwidth {:.1} GB/s", bw / 1e9),
            Mark::Dashed,
            7,
            ceiling(matrix, bw),
        ));
    }
    for (kind, flops) in ceilings {
        series.push(Series::new(
            format!("measured {kind} {:.2} TFLOP/s", flops / 1e12),
            Mark::Dashed,
            0,
            ceiling(*flops, bw),
        ));
    }
    let mut ops: Vec<&str> = layers.iter().map(|l| l.op).collect();
    ops.sort_unstable();
    ops.dedup();
    for (i, op) in ops.into_iter().enumerate() {
        let of: Vec<_> = layers.iter().filter(|l| l.op == op).collect();
        series.push(
            Series::new(
                op,
                Mark::Points,
                i + 1,
                of.iter()
                    .map(|l| (l.arithmetic_intensity.unwrap_or(1.0), l.attained.value()))
                    .collect(),
            )
            .sized(of.iter().map(|l| l.time.value()).collect()),
        );
    }
    let skipped = r.layers.len() - layers.len();
    Figure {
        id: "roofline".into(),
        chart: Chart::Xy(XyChart {
            title: format!(
                "Roofline: {} on {} ({}), batch {}, {}",
                r.workload, r.system, r.device, r.batch, r.precision
            ),
            x: Axis::log("arithmetic intensity (FLOP/byte)"),
            y: Axis::log("attained (FLOP/s)"),
            series,
        }),
        caption: format!(
            "Each layer (forward + backward) at its predicted FLOP/s, marker area proportional \
             to its time; memory bandwidth {:.1} GB/s{}.{}",
            bw / 1e9,
            if r.calibrated_layers > 0 {
                " (measured)"
            } else {
                ""
            },
            if skipped > 0 {
                format!(" {skipped} layers without FLOPs or memory traffic are not shown.")
            } else {
                String::new()
            }
        ),
    }
}

/// Data-movement cost per sample by source across batch sizes (\[004\] Fig. 4).
fn movement_chart(workload: &str, system: &str, rows: &[(u64, Vec<Movement>)]) -> Figure {
    let mut sources: Vec<&str> = rows
        .iter()
        .flat_map(|(_, m)| m.iter().map(|m| m.source))
        .collect();
    sources.dedup();
    sources.sort_unstable();
    sources.dedup();
    let series = sources
        .iter()
        .map(|src| BarSeries {
            name: (*src).to_owned(),
            values: rows
                .iter()
                .map(|(_, m)| {
                    m.iter()
                        .filter(|m| m.source == *src)
                        .map(|m| m.cost_per_sample_s)
                        .sum()
                })
                .collect(),
        })
        .collect();
    Figure {
        id: "data-movement".into(),
        chart: Chart::Bar(BarChart {
            title: format!("Data movement per sample: {workload} on {system}"),
            x_label: "batch size per device".into(),
            y: Axis::log("cost per sample (s): bytes x gap"),
            categories: rows.iter().map(|(b, _)| b.to_string()).collect(),
            series,
            stacked: false,
            levels: Vec::new(),
        }),
        caption: "Bytes per sample times the gap (seconds per byte) of the level each source \
                  crosses; shared levels count their sharing."
            .into(),
    }
}

/// Data movement per sample and the step-time breakdown of `p`'s configuration across
/// batch sizes 1, 2, 4, ... up to `batch` (the sizes that cannot run are left out).
pub fn across_batches(
    inputs: Inputs<'_>,
    scenario: &Scenario,
    batch: u64,
    p: &Prediction,
) -> Vec<Figure> {
    let mut batches: Vec<u64> = std::iter::successors(Some(1u64), |b| b.checked_mul(2))
        .take_while(|&b| b < batch)
        .collect();
    batches.push(batch);
    let runs: Vec<(u64, Prediction)> = batches
        .iter()
        .filter_map(|&b| predict::predict(inputs, scenario, b).ok().map(|q| (b, q)))
        .collect();
    let movement: Vec<(u64, Vec<Movement>)> = runs
        .iter()
        .map(|(b, q)| (*b, q.data_movement.clone()))
        .collect();
    let steps: Vec<(String, Outcome)> = runs
        .iter()
        .map(|(b, q)| (b.to_string(), q.outcome))
        .collect();
    vec![
        movement_chart(&p.workload, &p.system, &movement),
        breakdown(
            format!(
                "Step time: {} on {} x {} nodes",
                p.workload, p.system, p.outcome.nodes
            ),
            "batch size per device",
            &steps,
        ),
    ]
}

/// Step-time breakdown (compute / input / allreduce, and the step) per configuration.
pub fn breakdown(title: String, x_label: &str, rows: &[(String, Outcome)]) -> Figure {
    let part = |name: &str, f: fn(&Outcome) -> f64| BarSeries {
        name: name.to_owned(),
        values: rows.iter().map(|(_, o)| f(o)).collect(),
    };
    Figure {
        id: "step-breakdown".into(),
        chart: Chart::Bar(BarChart {
            title,
            x_label: x_label.to_owned(),
            y: Axis::linear("time per step (s)"),
            categories: rows.iter().map(|(c, _)| c.clone()).collect(),
            series: vec![
                part("compute", |o| o.compute_s.value()),
                part("input", |o| o.input_s.value()),
                part("allreduce", |o| o.allreduce_s.value()),
                part("step", |o| o.step_time_s.value()),
            ],
            stacked: false,
            levels: Vec::new(),
        }),
        caption: "The step's parts side by side with the step itself: with overlap, the step \
                  is set by the slowest part, not their sum."
            .into(),
    }
}

/// Curves against node counts on log-log axes, each with its ideal line (dashed) from its
/// first point: `ideal_exponent` -1 for time under strong scaling, 1 for throughput.
pub fn scaling(
    id: &str,
    title: String,
    x_label: &str,
    y_label: &str,
    curves: Vec<(String, Vec<(f64, f64)>)>,
    ideal_exponent: Option<f64>,
) -> Figure {
    let mut series = Vec::new();
    for (i, (name, pts)) in curves.into_iter().enumerate() {
        if let (Some(k), Some(&(x0, y0)), Some(&(x1, _))) =
            (ideal_exponent, pts.first(), pts.last())
            && x1 > x0
        {
            series.push(Series::new(
                format!("{name}: ideal"),
                Mark::Dashed,
                i,
                vec![(x0, y0), (x1, y0 * (x1 / x0).powf(k))],
            ));
        }
        series.push(Series::new(name, Mark::Line, i, pts.clone()));
        series.push(Series::new(String::new(), Mark::Points, i, pts));
    }
    series.retain(|s| !s.points.is_empty());
    Figure {
        id: id.to_owned(),
        chart: Chart::Xy(XyChart {
            title,
            x: Axis::log(x_label),
            y: Axis::log(y_label),
            series,
        }),
        caption: "Predicted; dashed: ideal scaling from the first point.".into(),
    }
}

/// The simulated step's timeline ([`ridgeline_model::sim`]): one track per stream (input,
/// compute, communication), raised while the stream is busy, against time in milliseconds.
pub fn timeline(sim: &ridgeline_model::sim::Simulated, title: String) -> Figure {
    use ridgeline_model::sim::Stream;
    let streams = [Stream::Input, Stream::Compute, Stream::Communication];
    let series = streams
        .iter()
        .enumerate()
        .filter_map(|(i, &stream)| {
            let base = i as f64;
            // The stream's busy time, back-to-back spans merged into one.
            let mut busy: Vec<(f64, f64)> = Vec::new();
            for sp in sim.spans.iter().filter(|sp| sp.stream == stream) {
                let (a, b) = (1e3 * sp.start_s, 1e3 * (sp.start_s + sp.duration_s));
                match busy.last_mut() {
                    Some(last) if a <= last.1 + 1e-9 => last.1 = last.1.max(b),
                    _ => busy.push((a, b)),
                }
            }
            let mut pts = vec![(0.0, base)];
            for (a, b) in busy {
                pts.extend([(a, base), (a, base + 0.8), (b, base + 0.8), (b, base)]);
            }
            pts.push((1e3 * sim.step_s, base));
            (pts.len() > 2).then(|| Series::new(stream.name(), Mark::Line, i, pts))
        })
        .collect();
    Figure {
        id: "timeline".into(),
        chart: Chart::Xy(XyChart {
            title,
            x: Axis::linear("time in the step (ms)"),
            y: Axis::linear("stream: 0 input, 1 compute, 2 communication"),
            series,
        }),
        caption: "The step simulated event by event on every rank (the slowest rank's \
            streams): layers one after another, gradient buckets (25 MiB) allreduced beside \
            backward as they fill, the optimizer after both, the next step's input read \
            meanwhile; a track is raised while its stream is busy."
            .into(),
    }
}

/// Per-layer prediction against measurement, log-log, with y = x and a ±`band` error band
/// (dashed), one colour per op kind.
pub fn predicted_vs_measured(title: String, layers: &[LayerPoint], band: f64) -> Figure {
    let points: Vec<(&str, f64, f64)> = layers
        .iter()
        .map(|l| (l.op.as_str(), l.measured_s, l.predicted_s))
        .collect();
    against(
        "predicted-vs-measured",
        title,
        &points,
        band,
        format!(
            "Every layer pass (forward and backward) of every measured step: predicted from the \
             calibrated profile against the executor's median. Points above y = x are predicted \
             slow; dashed: ±{:.0} %.",
            band * 100.0
        ),
    )
}

/// Each imported run's predicted time to train against its measured one, log-log, with
/// y = x and a ±`band` band, one colour per run's system.
pub fn runs_predicted_vs_measured(
    title: String,
    runs: &[crate::runs::RunCheck],
    band: f64,
) -> Figure {
    let points: Vec<(&str, f64, f64)> = runs
        .iter()
        .map(|r| {
            (
                r.run_system.as_str(),
                r.measured_time_to_train_s,
                r.predicted_time_to_train_s,
            )
        })
        .collect();
    against(
        "runs-predicted-vs-measured",
        title,
        &points,
        band,
        format!(
            "Each imported run's time to train (run_start to run_stop): predicted against \
             measured. Points above y = x are predicted slow; dashed: ±{:.0} %.",
            band * 100.0
        ),
    )
}

/// `(group, measured, predicted)` points, log-log, with y = x, a ±`band` band (dashed) and
/// one colour per group; points that are not both positive are left out.
fn against(
    id: &str,
    title: String,
    points: &[(&str, f64, f64)],
    band: f64,
    caption: String,
) -> Figure {
    let points: Vec<&(&str, f64, f64)> = points
        .iter()
        .filter(|(_, m, p)| *p > 0.0 && *m > 0.0)
        .collect();
    let (lo, hi) = points
        .iter()
        .flat_map(|(_, m, p)| [*p, *m])
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    let (lo, hi) = if lo.is_finite() {
        (lo, hi)
    } else {
        (1e-6, 1.0)
    };
    let mut series = vec![
        Series::new("y = x", Mark::Line, 7, vec![(lo, lo), (hi, hi)]),
        Series::new(
            format!("±{:.0} %", band * 100.0),
            Mark::Dashed,
            7,
            vec![(lo, lo * (1.0 + band)), (hi, hi * (1.0 + band))],
        ),
        Series::new(
            String::new(),
            Mark::Dashed,
            7,
            vec![(lo, lo * (1.0 - band)), (hi, hi * (1.0 - band))],
        ),
    ];
    let mut groups: Vec<&str> = points.iter().map(|(g, _, _)| *g).collect();
    groups.sort_unstable();
    groups.dedup();
    for (i, group) in groups.into_iter().enumerate() {
        series.push(Series::new(
            group,
            Mark::Points,
            i + 1,
            points
                .iter()
                .filter(|(g, _, _)| *g == group)
                .map(|(_, m, p)| (*m, *p))
                .collect(),
        ));
    }
    Figure {
        id: id.into(),
        chart: Chart::Xy(XyChart {
            title,
            x: Axis::log("measured (s)"),
            y: Axis::log("predicted (s)"),
            series,
        }),
        caption,
    }
}

/// Edges of the signed relative-error bins, in fractions.
const ERROR_BINS: [f64; 9] = [-1.0, -0.5, -0.25, -0.1, 0.0, 0.1, 0.25, 0.5, 1.0];

/// The distribution of signed per-layer errors: share of layer passes and of measured time
/// per bin.
pub fn error_distribution(layers: &[LayerPoint]) -> Figure {
    let n = ERROR_BINS.len();
    let bin = |e: f64| {
        ERROR_BINS[1..n - 1]
            .iter()
            .take_while(|&&edge| e >= edge)
            .count()
    };
    let mut count = vec![0.0; n - 1];
    let mut time = vec![0.0; n - 1];
    for l in layers {
        let b = bin(l.rel_error);
        count[b] += 1.0;
        time[b] += l.measured_s;
    }
    let (total_n, total_t) = (count.iter().sum::<f64>().max(1.0), time.iter().sum::<f64>());
    let label = |i: usize| {
        let pct = |v: f64| format!("{:+.0}%", 100.0 * v);
        match i {
            0 => format!("< {}", pct(ERROR_BINS[1])),
            i if i == n - 2 => format!(">= {}", pct(ERROR_BINS[n - 2])),
            i => format!("{}..{}", pct(ERROR_BINS[i]), pct(ERROR_BINS[i + 1])),
        }
    };
    Figure {
        id: "error-distribution".into(),
        chart: Chart::Bar(BarChart {
            title: "Per-layer error distribution".into(),
            x_label: "(predicted - measured) / measured".into(),
            y: Axis::linear("share (%)"),
            categories: (0..n - 1).map(label).collect(),
            series: vec![
                BarSeries {
                    name: "layer passes".into(),
                    values: count.iter().map(|c| 100.0 * c / total_n).collect(),
                },
                BarSeries {
                    name: "measured time".into(),
                    values: time
                        .iter()
                        .map(|t| {
                            if total_t > 0.0 {
                                100.0 * t / total_t
                            } else {
                                0.0
                            }
                        })
                        .collect(),
                },
            ],
            stacked: false,
            levels: Vec::new(),
        }),
        caption: "Share of layer passes, and of their measured time, in each band of signed \
                  relative error."
            .into(),
    }
}

/// Kernel hardware efficiency (\[004\] Fig. 3): measured run time per efficiency bin, and
/// the time the same work would take at full efficiency.
pub fn efficiency_histogram(id: &str, title: String, layers: &[LayerPoint]) -> Figure {
    const BINS: usize = 10;
    let mut time = [0.0; BINS];
    let mut ideal = [0.0; BINS];
    for l in layers
        .iter()
        .filter(|l| l.flops > 0.0 && l.efficiency > 0.0)
    {
        let b = ((l.efficiency * BINS as f64).floor() as usize).min(BINS - 1);
        time[b] += l.measured_s;
        ideal[b] += l.measured_s * l.efficiency;
    }
    Figure {
        id: id.to_owned(),
        chart: Chart::Bar(BarChart {
            title,
            x_label: "hardware efficiency (attained / peak FLOP/s)".into(),
            y: Axis::linear("time per step (s)"),
            categories: (0..BINS)
                .map(|i| format!("{}-{}%", i * 100 / BINS, (i + 1) * 100 / BINS))
                .collect(),
            series: vec![
                BarSeries {
                    name: "measured run time".into(),
                    values: time.to_vec(),
                },
                BarSeries {
                    name: "at full efficiency".into(),
                    values: ideal.to_vec(),
                },
            ],
            stacked: false,
            levels: Vec::new(),
        }),
        caption: "Layer passes that do floating-point work, binned by measured efficiency \
                  against the device peak of their op class; the gap between the bars is the \
                  time full efficiency would save (the last bin holds anything above 90 %)."
            .into(),
    }
}

/// Where a row goes on the scaling plot.
type Point = fn(&ScaleRow, &Outcome) -> (f64, f64);

/// The scaling curve (with its ideal line) and the step-time breakdown of each row.
pub fn scale(series: &ScaleSeries, precision: Precision) -> Vec<Figure> {
    let runs: Vec<(&ScaleRow, Outcome)> = series
        .rows
        .iter()
        .filter_map(|r| r.outcome.map(|o| (r, o)))
        .collect();
    let label = |r: &ScaleRow| match series.mode {
        "problem-size" => {
            let size = r
                .input_size
                .as_ref()
                .map_or_else(String::new, |d| Shape::new(d).to_string());
            match r.width {
                Some(w) if (w - 1.0).abs() > 1e-12 => format!("{size} w{w}"),
                _ => size,
            }
        }
        "ensemble" => format!("{}x{}", r.models, r.nodes),
        _ => r.nodes.to_string(),
    };
    let (x_label, y_label, ideal, point): (&str, &str, Option<f64>, Point) = match series.mode {
        "strong" => ("nodes", "time to solution (s)", Some(-1.0), |r, o| {
            (f64::from(r.nodes), o.time_to_solution_s.value())
        }),
        "problem-size" => (
            "training FLOPs per sample",
            "step time (s)",
            None,
            |r, o| (r.flops_per_sample.unwrap_or(1.0), o.step_time_s.value()),
        ),
        "ensemble" => (
            "nodes (all models)",
            "samples per second",
            Some(1.0),
            |r, _| {
                (
                    f64::from(r.nodes) * f64::from(r.models),
                    r.throughput.unwrap_or(0.0),
                )
            },
        ),
        _ => ("nodes", "samples per second", Some(1.0), |r, _| {
            (f64::from(r.nodes), r.throughput.unwrap_or(0.0))
        }),
    };
    let points: Vec<(f64, f64)> = runs
        .iter()
        .map(|(r, o)| point(r, o))
        .filter(|&(x, y)| x > 0.0 && y > 0.0)
        .collect();
    let title = format!(
        "{} scaling: {} on {}, {}",
        series.mode, series.workload, series.system, precision
    );
    let mut figures = Vec::new();
    if !points.is_empty() {
        figures.push(scaling(
            "scaling",
            title.clone(),
            x_label,
            y_label,
            vec![("predicted".into(), points)],
            ideal,
        ));
    }
    if !runs.is_empty() {
        let steps: Vec<(String, Outcome)> = runs.iter().map(|(r, o)| (label(r), *o)).collect();
        let x = match series.mode {
            "problem-size" => "input size and width",
            "ensemble" => "models x nodes per model",
            _ => "nodes",
        };
        figures.push(breakdown(format!("Step time, {title}"), x, &steps));
    }
    figures
}
