//! Fitting and validating the device-transferable kernel model
//! ([`ridgeline_model::transfer`]) on measured kernels of several GPUs.
//!
//! One linear model per kernel class (an operator of the data: `bmm`, `linear`, `conv`,
//! each vector op), non-negative coefficients fitted on errors relative to the time
//! ([`crate::fit::fit_relative`]) over every kernel of every device given, each device with
//! its own launch term ([`fit`]). Because each
//! feature is a time on its device, the coefficients are shared by all devices, and a device
//! outside the fit is timed from its file alone. A class whose time is FLOPs (GEMMs,
//! convolutions) also gets the power cap that fits its kernels best ([`ENERGIES`]): the
//! energy of one FLOP at 7 nm, which holds a board's FLOP rate to its TDP.
//!
//! [`leave_one_out`] holds out each device in turn: fit on the others, predict the held-out
//! one. Its 90 % intervals are split-conformal across devices: a central interval of the log
//! ratios predicted / measured that the training devices show when each of them is in turn
//! held out of a fit on the rest (nested, so the held-out device never informs its own
//! interval), at the level that covers 90 % of each training device's kernels from the
//! others' ratios ([`interval_90`]: the device, not the kernel, is the exchangeable unit).

use std::collections::BTreeMap;
use std::fmt;

use rayon::prelude::*;
use ridgeline_measure::record::{Measured, Record, RecordPrecision};
use ridgeline_model::kernels::{Kernel, KernelClass};
use ridgeline_model::precision::{NumberFormat, Precision};
use ridgeline_model::transfer::{
    self, Class, ClassCoefficients, DeviceSpec, Model, ModelSource, Product, Tiles, VectorOp,
};
use serde::Serialize;
use statrs::statistics::{Data, OrderStatistics};

use crate::dataset::{ConvAlgorithm, KernelSet, LabelSet, PublishedSet};
use crate::error::{Error, Result};
use crate::fit::{fit_relative, fit_relative_to_measured};
use crate::records::{product_kernel, record_kernel};

/// The energies of one FLOP at 7 nm (J) a class's power cap may take in the fit, after none
/// (`ridgeline_model::transfer::DeviceSpec::capped`): 4 to 16 pJ, around what the kernel
/// set's 70-75 W cards sustain (a T4 at 12 nm draws its 70 W at about 3 TFLOP/s of large
/// GEMMs).
pub const ENERGIES: [Option<f64>; 12] = [
    None,
    Some(4e-12),
    Some(5e-12),
    Some(6e-12),
    Some(7e-12),
    Some(8e-12),
    Some(9e-12),
    Some(10e-12),
    Some(11e-12),
    Some(12e-12),
    Some(14e-12),
    Some(16e-12),
];

/// One measured kernel as the fit sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The kernel class (its operator).
    pub class: Class,
    /// The device it ran on.
    pub device: String,
    /// Its features on that device: for a kernel whose time is FLOPs (GEMMs, convolutions),
    /// one row per power cap of [`ENERGIES`]; for a vector op, one row.
    pub x: Vec<Vec<f64>>,
    /// Its measured time, seconds.
    pub y: f64,
    /// Its device's SM count and boost clock, MHz ([`chip`]): GPUs alike in both share a
    /// chip and its configuration (the H100 SXM5 and the H200) and are left out together.
    pub chip: [u32; 2],
    /// Another class that could time it and its features (one row per power cap, as `x`):
    /// a library that times its algorithms and runs the fastest (cuDNN's autotuner) takes the
    /// faster of the two ([`predict`]); `conv-gemm`'s for a convolution of `conv`'s kind.
    pub or: Option<(Class, Vec<Vec<f64>>)>,
}

/// The SM count and boost clock (MHz) of `d`: what tells one GPU chip configuration from
/// another ([`Point::chip`]).
pub fn chip(d: &DeviceSpec) -> [u32; 2] {
    [d.sms.round() as u32, (d.clock_hz / 1e6).round() as u32]
}

/// The row of `rows` (one per power cap) for cap `energy`; the last where there are fewer
/// (a kernel timed without a cap has one row for every cap).
fn under_cap<T>(rows: &[T], energy: usize) -> &T {
    &rows[energy.min(rows.len() - 1)]
}

impl Point {
    /// Its features under the power cap [`ENERGIES`]`[energy]`.
    pub fn at(&self, energy: usize) -> &[f64] {
        under_cap::<Vec<f64>>(&self.x, energy)
    }

    /// A point with one way to run.
    pub fn new(class: Class, device: String, x: Vec<Vec<f64>>, y: f64, chip: [u32; 2]) -> Point {
        Point {
            class,
            device,
            x,
            y,
            chip,
            or: None,
        }
    }
}

/// What `f` gives for a point under its class's model and, where the point has another
/// class that could time it and `models` has that class, under that one (each with its
/// features under its own power cap); the smaller of the two: a library's autotuner runs
/// the faster algorithm. `None` where `models` has no model of the point's class.
fn faster(models: &[ClassModel], p: &Point, f: impl Fn(&ClassModel, &[f64]) -> f64) -> Option<f64> {
    let m = models.iter().find(|m| m.class == p.class.timed_by())?;
    let own = f(m, p.at(m.energy));
    let other = p.or.as_ref().and_then(|(class, x)| {
        let o = models.iter().find(|m| m.class == *class)?;
        Some(f(o, under_cap::<Vec<f64>>(x, o.energy)))
    });
    Some(other.map_or(own, |t| own.min(t)))
}

/// The predicted time of a measured kernel on its own (launch plus work): its class's, or
/// the faster of its class's and the other class's that could time it ([`Point::or`]).
pub fn predict(models: &[ClassModel], p: &Point) -> Option<f64> {
    faster(models, p, |m, x| m.predict(x))
}

/// One row of features per power cap of [`ENERGIES`].
fn capped(
    d: &DeviceSpec,
    features: impl Fn(&DeviceSpec) -> [f64; transfer::GEMM_FEATURES.len()],
) -> Vec<Vec<f64>> {
    ENERGIES
        .iter()
        .map(|e| features(&d.capped(*e)).to_vec())
        .collect()
}

/// The points of `set` on the devices `specs` describes (FP32, as the data is).
pub fn points(set: &KernelSet, specs: &BTreeMap<String, DeviceSpec>) -> Result<Vec<Point>> {
    let spec = |device: &str| {
        specs.get(device).ok_or_else(|| {
            Error::Input(format!(
                "device `{device}` of the kernel set has no device file with SMs, boost \
                 clock, FP32 peak, bandwidth and L2"
            ))
        })
    };
    let mut out = Vec::with_capacity(set.gemm.len() + set.conv.len() + set.vector.len());
    for s in &set.gemm {
        let d = spec(&s.device)?;
        // A linear layer is one product of batch x m rows.
        let (b, m) = if s.op == Product::Linear {
            (1, s.batch * s.m)
        } else {
            (s.batch, s.m)
        };
        out.push(Point::new(
            Class::Product(s.op),
            s.device.clone(),
            capped(d, |d| transfer::gemm(b, m, s.n, s.k, 4, Tiles::Library, d)),
            s.latency_s,
            chip(d),
        ));
    }
    for s in &set.conv {
        let d = spec(&s.device)?;
        let conv = |winograd: bool| {
            capped(d, |d| {
                transfer::conv(
                    s.batch,
                    s.c_in,
                    s.c_out,
                    &[s.size, s.size],
                    &[s.kernel, s.kernel],
                    &[s.stride, s.stride],
                    &[s.padding, s.padding],
                    winograd,
                    4,
                    d,
                )
            })
        };
        // Every convolution of the set is of `conv`'s kind (2-D 3 x 3 forward passes of
        // stride 1), which cuDNN's autotuner runs as the faster of Winograd and the implicit
        // GEMM: `conv`, fitted on all of them, predicts each as the faster of itself and
        // `conv-gemm`.
        out.push(Point {
            or: Some((Class::CONV_GEMM, conv(false))),
            ..Point::new(
                Class::CONV,
                s.device.clone(),
                conv(true),
                s.latency_s,
                chip(d),
            )
        });
        // A convolution cuDNN ran as an implicit GEMM is also a point of the class that
        // times convolutions so (`conv-gemm`), as that GEMM.
        if s.algorithm == ConvAlgorithm::ImplicitGemm {
            out.push(Point::new(
                Class::CONV_GEMM,
                s.device.clone(),
                conv(false),
                s.latency_s,
                chip(d),
            ));
        }
    }
    for s in &set.vector {
        let d = spec(&s.device)?;
        out.push(Point::new(
            Class::Vector(s.op),
            s.device.clone(),
            vec![transfer::vector(s.batch * s.h, s.op.arrays(), 4, d).to_vec()],
            s.latency_s,
            chip(d),
        ));
    }
    Ok(out)
}

/// A fitted class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassModel {
    /// The class.
    pub class: Class,
    /// One coefficient per feature (the launch term in seconds, the others inverse
    /// efficiencies).
    pub coefficients: Vec<f64>,
    /// The power cap's energy per FLOP at 7 nm, J (`None`: no cap).
    pub energy_per_flop_7nm: Option<f64>,
    /// Its index in [`ENERGIES`]: which row of a [`Point`]'s features the model reads.
    #[serde(skip)]
    pub energy: usize,
    /// Kernels fitted.
    pub points: usize,
}

impl ClassModel {
    /// The predicted time for features `x` of a kernel measured on its own: launch plus
    /// work.
    pub fn predict(&self, x: &[f64]) -> f64 {
        self.coefficients.iter().zip(x).map(|(c, v)| c * v).sum()
    }

    /// The predicted time of a measured kernel: [`ClassModel::predict`] of its features
    /// under this class's power cap.
    pub fn predict_point(&self, p: &Point) -> f64 {
        self.predict(p.at(self.energy))
    }

    /// The predicted time for features `x` of a kernel inside a training step: the larger
    /// of launch and work ([`ridgeline_model::transfer::ClassCoefficients::in_step`]).
    pub fn in_step(&self, x: &[f64]) -> f64 {
        transfer::in_step(&self.coefficients, x)
    }
}

/// Fits one model per class on `points` (not for the classes another class's model times,
/// [`Class::timed_by`]). The launch term is each device's own in the fit: the smallest kernels
/// measure the host and framework that timed them (24 to 31 us on these machines) as much
/// as the GPU, so a shared launch term would let one slow host bias every device; the other
/// coefficients are shared. The model's launch term is the median of the devices' (a device
/// outside the fit runs on a host nobody measured).
///
/// A class whose time is FLOPs is fitted under each power cap of [`ENERGIES`], and keeps the
/// one whose fit has the smallest median relative error on the points it was fitted on.
pub fn fit(points: &[&Point]) -> Result<Vec<ClassModel>> {
    fit_with(points, |_| None)
}

/// [`fit`], each class under the power cap `energy` gives it (an index of [`ENERGIES`]), or
/// the best of them where it gives none.
fn fit_with(points: &[&Point], energy: impl Fn(Class) -> Option<usize>) -> Result<Vec<ClassModel>> {
    let mut by_class: BTreeMap<Class, Vec<&Point>> = BTreeMap::new();
    for p in points {
        by_class.entry(p.class.timed_by()).or_default().push(p);
    }
    by_class
        .into_iter()
        .map(|(class, rows)| {
            let caps = rows.iter().map(|p| p.x.len()).min().unwrap_or(1);
            let tried: Vec<usize> = match energy(class) {
                Some(e) => vec![e],
                None => (0..caps).collect(),
            };
            // The caps are fitted in parallel; the first of equal medians is kept.
            let fits: Vec<(f64, ClassModel)> = tried
                .into_par_iter()
                .map(|e| {
                    let m = fit_class(class, &rows, e)?;
                    let mut abs: Vec<f64> = rows
                        .iter()
                        .map(|p| (m.predict_point(p) / p.y - 1.0).abs())
                        .collect();
                    Ok((quantile_mut(&mut abs, 0.5), m))
                })
                .collect::<Result<_>>()?;
            fits.into_iter()
                .reduce(|best, next| if next.0 < best.0 { next } else { best })
                .map(|(_, m)| m)
                .ok_or_else(|| Error::Fit(format!("class `{class}`: no kernels")))
        })
        .collect()
}

/// The median (`tau` 0.5) or another quantile of `values`, reordering them.
fn quantile_mut(values: &mut [f64], tau: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let i = ((values.len() - 1) as f64 * tau).round() as usize;
    *values.select_nth_unstable_by(i, f64::total_cmp).1
}

/// One class fitted on `rows` under the power cap [`ENERGIES`]`[energy]`.
fn fit_class(class: Class, rows: &[&Point], energy: usize) -> Result<ClassModel> {
    // The launch term is each device's own (its host's floor); the rest are shared.
    let mut names: Vec<&str> = rows.iter().map(|p| p.device.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let d = names.len();
    let x: Vec<Vec<f64>> = rows
        .iter()
        .map(|p| {
            let row = p.at(energy);
            let mut r = vec![0.0; d];
            let j = names.binary_search(&p.device.as_str()).unwrap_or(0);
            r[j] = row[0];
            r.extend_from_slice(&row[1..]);
            r
        })
        .collect();
    let y: Vec<f64> = rows.iter().map(|p| p.y).collect();
    // A depthwise class holds shapes cuDNN runs with a fallback 6 to 200 times slower than
    // its depthwise kernels (no fast kernel for that shape): fitted relative to the measured
    // times, they do not pull the class off the kernels the rest run.
    let f = if class.is_depthwise() {
        fit_relative_to_measured(&x, &y)
    } else {
        fit_relative(&x, &y)
    }
    .map_err(|e| Error::Fit(format!("class `{class}`: {e}")))?;
    let mut launches: Vec<f64> = f.coefficients[..d].to_vec();
    launches.sort_by(f64::total_cmp);
    let launch = if d % 2 == 1 {
        launches[d / 2]
    } else {
        (launches[d / 2 - 1] + launches[d / 2]) / 2.0
    };
    let mut coefficients = vec![launch];
    coefficients.extend_from_slice(&f.coefficients[d..]);
    Ok(ClassModel {
        class,
        coefficients,
        energy_per_flop_7nm: if rows.iter().all(|p| p.x.len() > 1) {
            ENERGIES[energy]
        } else {
            None
        },
        energy,
        points: y.len(),
    })
}

/// How the model did on one held-out device and class.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Holdout {
    /// The device held out.
    pub device: String,
    /// The class.
    pub class: String,
    /// Kernels predicted.
    pub points: usize,
    /// Median |predicted - measured| / measured.
    pub median_abs_rel_error: f64,
    /// Its 90th percentile.
    pub p90_abs_rel_error: f64,
    /// Median (predicted - measured) / measured.
    pub bias: f64,
    /// Share of measured times inside the 90 % interval.
    pub coverage_90: f64,
}

/// Relative errors of `models` on `points`, by class, and pooled under the class of the
/// model that times them where that is another ([`Class::timed_by`]: `bmm` and `linear` as
/// `gemm` too).
fn errors(models: &[ClassModel], points: &[&Point]) -> BTreeMap<Class, Vec<f64>> {
    let mut out: BTreeMap<Class, Vec<f64>> = BTreeMap::new();
    for p in points {
        let class = p.class.timed_by();
        if let Some(t) = predict(models, p) {
            let r = t / p.y - 1.0;
            out.entry(p.class).or_default().push(r);
            if class != p.class {
                out.entry(class).or_default().push(r);
            }
        }
    }
    out
}

fn quantile(values: &[f64], tau: f64) -> f64 {
    Data::new(values.to_vec()).quantile(tau)
}

/// The central coverages [`interval_90`] chooses among, in steps of a point.
pub const LEVELS: [f64; 20] = [
    0.80, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86, 0.87, 0.88, 0.89, 0.90, 0.91, 0.92, 0.93, 0.94, 0.95,
    0.96, 0.97, 0.98, 0.99,
];

/// The 90 % interval of log(predicted / measured) for a device outside the fit, from the log
/// ratios of held-out devices `by_device` (one list per device, each from a fit without it);
/// `None` without any.
///
/// The interval is the central `c` of every device's log ratios pooled, `c` the level of
/// [`LEVELS`] at which, leaving each of those devices out of the interval in turn, the
/// interval from the others covers nearest 90 % of its kernels pooled (the widest of equals;
/// 90 % with one device). The unit that is exchangeable across devices is the device, not the
/// kernel: a device's kernels share its error, so a pooled 90 % interval covers fewer than 90 %
/// of a new device's kernels; the level that covers 90 % of one device from the others is
/// learned on these devices, never on the one the interval is for.
pub fn interval_90(by_device: &[Vec<f64>]) -> Option<(f64, f64)> {
    let central = |logs: &[f64], c: f64| {
        (
            quantile(logs, (1.0 - c) / 2.0),
            quantile(logs, (1.0 + c) / 2.0),
        )
    };
    let all: Vec<f64> = by_device.iter().flatten().copied().collect();
    if all.is_empty() {
        return None;
    }
    let kept: Vec<&Vec<f64>> = by_device.iter().filter(|d| !d.is_empty()).collect();
    if kept.len() < 2 {
        return Some(central(&all, 0.9));
    }
    // Each device's log ratios and the others'.
    let splits: Vec<(&Vec<f64>, Vec<f64>)> = kept
        .iter()
        .enumerate()
        .map(|(i, own)| {
            let others: Vec<f64> = kept
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .flat_map(|(_, d)| d.iter().copied())
                .collect();
            (*own, others)
        })
        .collect();
    let coverage = |c: f64| {
        let (inside, total) = splits
            .iter()
            .fold((0, 0), |(inside, total), (own, others)| {
                let (lo, hi) = central(others, c);
                let hits = own.iter().filter(|v| (lo..=hi).contains(*v)).count();
                (inside + hits, total + own.len())
            });
        inside as f64 / total as f64
    };
    let level = LEVELS
        .iter()
        .copied()
        .map(|c| (c, (coverage(c) - 0.9).abs()))
        .reduce(|best, next| if next.1 <= best.1 { next } else { best })
        .map_or(0.9, |(c, _)| c);
    Some(central(&all, level))
}

/// Errors and interval hits of held-out kernels, pooled.
#[derive(Default)]
struct Pool {
    /// Log ratios, one list per held-out device.
    devices: Vec<Vec<f64>>,
    errors: Vec<f64>,
    inside: usize,
    judged: usize,
}

impl Pool {
    /// The relative errors `errors`, each judged against the 90 % interval of log ratios
    /// `interval` where there is one.
    fn judged(errors: Vec<f64>, interval: Option<(f64, f64)>) -> Pool {
        let (judged, inside) = interval.map_or((0, 0), |(lo, hi)| {
            let inside = errors
                .iter()
                .filter(|r| (lo..=hi).contains(&log_ratio(**r)))
                .count();
            (errors.len(), inside)
        });
        Pool {
            devices: Vec::new(),
            errors,
            inside,
            judged,
        }
    }

    fn holdout(&self, device: &str, class: impl fmt::Display) -> Holdout {
        let abs: Vec<f64> = self.errors.iter().map(|r| r.abs()).collect();
        Holdout {
            device: device.to_owned(),
            class: class.to_string(),
            points: self.errors.len(),
            median_abs_rel_error: quantile(&abs, 0.5),
            p90_abs_rel_error: quantile(&abs, 0.9),
            bias: quantile(&self.errors, 0.5),
            coverage_90: if self.judged > 0 {
                self.inside as f64 / self.judged as f64
            } else {
                f64::NAN
            },
        }
    }
}

/// What leaving each device out gave: per held-out device and class, and per class over
/// every held-out device (device `all`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transfer {
    /// Per held-out device and class.
    pub holdouts: Vec<Holdout>,
    /// Per class, every held-out kernel pooled.
    pub classes: Vec<Holdout>,
    /// Per class, the 90 % interval of log(predicted / measured) of a device outside the fit:
    /// [`interval_90`] of every held-out device's log ratios.
    pub intervals: BTreeMap<Class, (f64, f64)>,
}

/// Leave one device out: for each device, fit on the others and predict it.
pub fn leave_one_out(points: &[Point]) -> Result<Transfer> {
    let mut devices: Vec<&str> = points.iter().map(|p| p.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    if devices.len() < 3 {
        return Err(Error::Input(format!(
            "leaving one device out needs kernels of at least 3 devices, not {}",
            devices.len()
        )));
    }
    let on = |keep: &dyn Fn(&str) -> bool| -> Vec<&Point> {
        points.iter().filter(|p| keep(&p.device)).collect()
    };
    let mut holdouts = Vec::new();
    let mut pooled: BTreeMap<Class, Pool> = BTreeMap::new();
    for held in &devices {
        let train = on(&|d| d != *held);
        let models = fit(&train)?;
        // Nested: the log ratios the training devices show when each is held out in turn,
        // each fit under the power cap chosen without the held-out device.
        let cap = |class: Class| models.iter().find(|m| m.class == class).map(|m| m.energy);
        let mut calibration: BTreeMap<Class, Vec<Vec<f64>>> = BTreeMap::new();
        for inner in devices.iter().filter(|d| *d != held) {
            let fit_on = on(&|d| d != *held && d != *inner);
            let inner_models = fit_with(&fit_on, cap)?;
            for (class, e) in errors(&inner_models, &on(&|d| d == *inner)) {
                calibration
                    .entry(class)
                    .or_default()
                    .push(e.iter().map(|r| log_ratio(*r)).collect());
            }
        }
        for (class, e) in errors(&models, &on(&|d| d == *held)) {
            let interval = calibration.get(&class).and_then(|c| interval_90(c));
            let pool = Pool::judged(e, interval);
            holdouts.push(pool.holdout(held, class));
            let all = pooled.entry(class).or_default();
            all.devices
                .push(pool.errors.iter().map(|r| log_ratio(*r)).collect());
            all.errors.extend(&pool.errors);
            all.inside += pool.inside;
            all.judged += pool.judged;
        }
    }
    let classes = pooled
        .iter()
        .map(|(class, pool)| pool.holdout("all", class))
        .collect();
    let intervals = pooled
        .iter()
        .filter_map(|(class, pool)| Some((*class, interval_90(&pool.devices)?)))
        .collect();
    Ok(Transfer {
        holdouts,
        classes,
        intervals,
    })
}

/// The depthwise convolution classes ([`depthwise_point`]'s points): each fitted on every
/// device of `points`, and each device left out in turn (fitted on the others, where a class
/// has points of another device). A held-out device is judged by the 90 % interval of the
/// other held-out devices' log ratios, and the shipped interval is [`interval_90`] of them
/// all. The devices are GPUs with a format (`h100-sxm5-80gb fp16`), and each class is one
/// format's, so leaving a device out leaves its GPU out of the class. GPUs of one chip (the
/// H100 SXM5 and the H200: SMs and clock alike) test the bandwidth term alone.
pub fn depthwise(points: &[Point]) -> Result<(Vec<ClassModel>, Transfer)> {
    let all: Vec<&Point> = points.iter().collect();
    let models = fit(&all)?;
    let mut devices: Vec<&str> = points.iter().map(|p| p.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    // Per class, each held-out device's relative errors.
    let mut held: BTreeMap<Class, Vec<(&str, Vec<f64>)>> = BTreeMap::new();
    for device in &devices {
        let classes: Vec<Class> = points
            .iter()
            .filter(|p| p.device == *device)
            .map(|p| p.class)
            .collect();
        let train: Vec<&Point> = points
            .iter()
            .filter(|p| p.device != *device && classes.contains(&p.class))
            .collect();
        if train.is_empty() {
            continue;
        }
        let test: Vec<&Point> = points.iter().filter(|p| p.device == *device).collect();
        for (class, e) in errors(&fit(&train)?, &test) {
            held.entry(class).or_default().push((device, e));
        }
    }
    let mut holdouts = Vec::new();
    let mut classes = Vec::new();
    let mut intervals = BTreeMap::new();
    for (class, by_device) in held {
        let logs: Vec<Vec<f64>> = by_device
            .iter()
            .map(|(_, e)| e.iter().map(|r| log_ratio(*r)).collect())
            .collect();
        let mut pooled = Pool::default();
        for (i, (device, e)) in by_device.iter().enumerate() {
            let others: Vec<Vec<f64>> = logs
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, l)| l.clone())
                .collect();
            let pool = Pool::judged(e.clone(), interval_90(&others));
            holdouts.push(pool.holdout(device, class));
            pooled.errors.extend(&pool.errors);
            pooled.inside += pool.inside;
            pooled.judged += pool.judged;
        }
        classes.push(pooled.holdout("all", class));
        if let Some(i) = interval_90(&logs) {
            intervals.insert(class, i);
        }
    }
    Ok((
        models,
        Transfer {
            holdouts,
            classes,
            intervals,
        },
    ))
}

/// The model ridgeline ships: every class fitted on every device of `points`, with the
/// pooled leave-one-device-out figures of `held` beside its coefficients.
pub fn model(points: &[Point], held: &Transfer, data: &str, fitted_by: &str) -> Result<Model> {
    let all: Vec<&Point> = points.iter().collect();
    Ok(shipped(fit(&all)?, points, held, data, fitted_by))
}

/// [`model`] of classes already fitted on every device of `points`.
pub fn shipped(
    fitted: Vec<ClassModel>,
    points: &[Point],
    held: &Transfer,
    data: &str,
    fitted_by: &str,
) -> Model {
    let mut devices: Vec<String> = points.iter().map(|p| p.device.clone()).collect();
    devices.sort_unstable();
    devices.dedup();
    let classes = fitted
        .into_iter()
        .map(|c| {
            let pooled = held.classes.iter().find(|h| h.class == c.class.name());
            let interval = held
                .intervals
                .get(&c.class)
                .map_or([f64::NAN; 2], |(lo, hi)| [(-hi).exp(), (-lo).exp()]);
            ClassCoefficients {
                name: c.class,
                features: c.class.features().iter().map(|f| (*f).to_owned()).collect(),
                coefficients: c.coefficients,
                energy_per_flop_7nm: c.energy_per_flop_7nm,
                points: c.points,
                holdout_median_abs_error: pooled.map_or(f64::NAN, |h| h.median_abs_rel_error),
                holdout_bias: pooled.map_or(f64::NAN, |h| h.bias),
                holdout_interval_90: interval,
            }
        })
        .collect();
    Model {
        source: ModelSource {
            data: data.to_owned(),
            devices,
            fitted_by: fitted_by.to_owned(),
            tensor: None,
            depthwise: None,
        },
        classes,
    }
}

/// How the model fitted on every device of the kernel set (`models`) predicts the
/// per-operator labels of whole training steps on other devices (`set`), forward and
/// backward: per device, GEMMs (`linear`, `bmm`) and vector ops, each pass, and all pooled
/// (class `all`). Each kernel at its in-step time (the operators were timed inside the
/// step). A GEMM's backward pass is its two products (the data gradient `m x k` over `n`,
/// the weight gradient `k x n` over `m`); a vector op's are autograd's (none for a sum, whose
/// backward pass is then not compared), at its class's coefficients.
/// Operators whose class the models lack are left out. The 90 % intervals are those of
/// leaving one device out of the kernel set (`held`): each class's [`Transfer::intervals`].
pub fn labels(
    models: &[ClassModel],
    heldout: &Transfer,
    set: &LabelSet,
    specs: &BTreeMap<String, DeviceSpec>,
) -> Result<Vec<Holdout>> {
    let mut pools: BTreeMap<(String, String), Pool> = BTreeMap::new();
    for o in &set.ops {
        let d = specs.get(&o.device).ok_or_else(|| {
            Error::Input(format!(
                "device `{}` of the labels has no device file with SMs, boost clock, FP32 \
                 peak and bandwidth",
                o.device
            ))
        })?;
        let Some(m) = models.iter().find(|m| m.class == o.op.timed_by()) else {
            continue;
        };
        let interval = heldout.intervals.get(&o.op).copied();
        let vector = o.op.vector();
        let d = &d.capped(m.energy_per_flop_7nm);
        // Measured in place, inside the step: each kernel at its in-step time.
        let t = |x: &[f64]| m.in_step(x);
        let (fwd, bwd) = if let Some(op) = vector {
            // Autograd's kernels: a sum passes its gradient on (none); a scaling scales it
            // (one kernel, two arrays); a product of two tensors makes each input's gradient
            // (two kernels of three arrays); any other op reads its input or output and the
            // gradient and writes the input's gradient (three arrays).
            let backward = match op {
                VectorOp::Add | VectorOp::Addu => 0.0,
                VectorOp::Mulu | VectorOp::Divu => t(&transfer::vector(o.m, 2, 4, d)),
                VectorOp::Mul | VectorOp::Div => 2.0 * t(&transfer::vector(o.m, 3, 4, d)),
                _ => t(&transfer::vector(o.m, 3, 4, d)),
            };
            (t(&transfer::vector(o.m, op.arrays(), 4, d)), backward)
        } else {
            let g = |m, n, k| t(&transfer::gemm(o.batch, m, n, k, 4, Tiles::Library, d));
            let f = g(o.m, o.n, o.k);
            let b = g(o.m, o.k, o.n) + g(o.k, o.n, o.m);
            (f, b)
        };
        let family = if vector.is_some() { "vector" } else { "gemm" };
        let mut add = |pass: &str, predicted: f64, measured: f64| {
            // A pass that runs no kernel (no backward, or a sum's) is not compared.
            if measured <= 0.0 || predicted <= 0.0 {
                return;
            }
            let r = predicted / measured - 1.0;
            let inside = interval.is_some_and(|(lo, hi)| (lo..=hi).contains(&log_ratio(r)));
            for class in [format!("{family} {pass}"), "all".to_owned()] {
                let p = pools.entry((o.device.clone(), class)).or_default();
                p.errors.push(r);
                p.judged += usize::from(interval.is_some());
                p.inside += usize::from(inside);
            }
        };
        add("forward", fwd, o.forward_s);
        add("backward", bwd, o.backward_s);
    }
    Ok(pools
        .iter()
        .map(|((device, class), p)| p.holdout(device, class))
        .collect())
}

/// How the model fitted on every device of the kernel set (`models`) predicts kernels of
/// other devices measured on their own as the set's were (`points`: NeuSight's test set):
/// per device and class, with each class's 90 % interval from leaving one device out of the
/// set (`heldout`).
pub fn outside(models: &[ClassModel], heldout: &Transfer, points: &[Point]) -> Vec<Holdout> {
    let mut devices: Vec<&str> = points.iter().map(|p| p.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    let mut out = Vec::new();
    for device in devices {
        let on: Vec<&Point> = points.iter().filter(|p| p.device == device).collect();
        for (class, e) in errors(models, &on) {
            let pool = Pool::judged(e, heldout.intervals.get(&class).copied());
            out.push(pool.holdout(device, class));
        }
    }
    out
}

/// The model's precision of a GEMM or convolution record and its bytes per element: FP32,
/// TF32 (FP32 data), FP16 and BF16 (mixed precision's matrix formats), and FP8 (a published
/// set's products); `None` for FP64, which no training precision runs.
pub fn record_precision(p: RecordPrecision) -> Option<(Precision, u64)> {
    match p {
        RecordPrecision::Fp32 => Some((Precision::Fp32, 4)),
        RecordPrecision::Tf32 => Some((Precision::Tf32, 4)),
        RecordPrecision::Fp16 | RecordPrecision::AmpFp16 => Some((Precision::AmpFp16, 2)),
        RecordPrecision::Bf16 | RecordPrecision::AmpBf16 => Some((Precision::AmpBf16, 2)),
        // FP8 products (a published set's, E4M3 operands): one byte an element.
        RecordPrecision::Fp8 => Some((Precision::Fp8, 1)),
        RecordPrecision::Fp64 | RecordPrecision::Bytes => None,
    }
}

/// What [`record_points`] asks of a record at a precision: its device's name and figures.
pub type RecordSpec<'a> = dyn Fn(&Record, Precision) -> Option<(String, DeviceSpec)> + 'a;

/// Kernel records of ridgeline's own GPU backend (GEMMs and convolution passes, in every
/// precision but FP64) as points of the transferred model, each at its median time. `spec`
/// names a record's device and gives its figures at a precision (the matrix peak of that
/// precision's format); a record it gives none for is left out. A point's device is the
/// device's name and the precision (`h200-sxm-141gb tf32`), so the model is judged per
/// format.
///
/// A kernel is a point of the class that times it (`conv-gemm` for a convolution outside
/// `conv`'s kind or on tensor cores, [`transfer::implicit_class`]); with `scaled`, a kernel
/// that runs on tensor cores (the spec's `tensor`) is a point of that class's tensor-core
/// class of its format (`gemm-tensor-16`, `conv-gemm-tensor-tf32`), the data of the scaled
/// classes; without, of the FP32 class, as the FP32 fit would time it, and a depthwise
/// convolution's device also says so (`h100-sxm5-80gb fp16 depthwise`): no kernel of the fit
/// is depthwise, so those are judged apart, and so are 3-D convolutions (`... 3-d`), which
/// none of the fit is either. With `scaled`, a depthwise convolution is a point of its pass's
/// and format's depthwise class ([`depthwise_point`]).
pub fn record_points(
    file: &str,
    records: &[Record],
    spec: &RecordSpec<'_>,
    scaled: bool,
) -> Result<Vec<Point>> {
    let mut out = Vec::new();
    for r in records {
        let (Some(kernel), Some((precision, elem))) =
            (record_kernel(file, r)?, record_precision(r.precision))
        else {
            continue;
        };
        let Some((device, d)) = spec(r, precision) else {
            continue;
        };
        let y = ridgeline_measure::protocol::median(&r.samples_s);
        if !(y.is_finite() && y > 0.0) {
            continue;
        }
        if scaled && kernel.class == KernelClass::ConvDepthwise {
            let device = format!("{device} {}", r.precision.name());
            out.push(depthwise_point(&kernel, elem, device, &d, y));
            continue;
        }
        // Unscaled, depthwise and 3-D convolutions are judged apart: no kernel of the FP32
        // fit is either.
        let kind = match &r.measured {
            _ if kernel.class == KernelClass::ConvDepthwise => " depthwise",
            Measured::Conv(c) if !scaled && c.input.len() == 3 => " 3-d",
            _ => "",
        };
        out.push(kernel_point(
            &kernel,
            elem,
            format!("{device} {}{kind}", r.precision.name()),
            &d,
            y,
            scaled,
        ));
    }
    Ok(out)
}

/// A depthwise convolution's pass measured on `d` as a point of its depthwise class
/// ([`Class::Depthwise`]: its pass and format, FP32 off tensor cores), `device`
/// naming the GPU and precision.
pub fn depthwise_point(
    kernel: &Kernel,
    elem: u64,
    device: String,
    d: &DeviceSpec,
    y: f64,
) -> Point {
    let format = d.tensor.unwrap_or(NumberFormat::Fp32);
    Point::new(
        Class::depthwise(kernel.pass, format),
        device,
        vec![transfer::depthwise_features(kernel, elem, d).to_vec()],
        y,
        chip(d),
    )
}

/// A measured kernel as a point: of the class that times it, or with `scaled` where the spec
/// `d` runs it on tensor cores, of that class's tensor-core class; `device` names the GPU
/// and precision.
fn kernel_point(
    kernel: &Kernel,
    elem: u64,
    device: String,
    d: &DeviceSpec,
    y: f64,
    scaled: bool,
) -> Point {
    let class = transfer::implicit_class(kernel, d.tensor.is_some())
        .unwrap_or_else(|| transfer::class_of(kernel));
    let tensor = d.tensor.filter(|_| scaled);
    // A power cap where the device has one, at the energies of the units the kernel runs
    // on: FP32's, or a tensor-core class's; none for a tensor-core kernel timed by an FP32
    // class.
    let rows = |class: Class| {
        let features = |d: &DeviceSpec| {
            let f = transfer::features_for(kernel, class, elem, d);
            std::array::from_fn(|i| f.get(i).copied().unwrap_or(0.0))
        };
        match (d.power, d.tensor, tensor) {
            (Some(_), None, _) => capped(d, features),
            (Some(_), Some(_), Some(_)) => TENSOR_ENERGIES
                .iter()
                .map(|e| features(&d.capped(*e)).to_vec())
                .collect(),
            _ => vec![features(d).to_vec()],
        }
    };
    Point {
        // A convolution of `conv`'s kind off tensor cores runs as the faster of Winograd
        // (`conv`) and the implicit GEMM (`conv-gemm`).
        or: transfer::faster_class(kernel, d.tensor.is_some()).map(|other| (other, rows(other))),
        ..Point::new(
            tensor
                .and_then(|format| class.on_tensor_cores(format))
                .unwrap_or(class),
            device,
            rows(class),
            y,
            chip(d),
        )
    }
}

/// The energies of one FLOP at 7 nm (J) a tensor-core class's power cap may take, after none:
/// 0.5 to 4 pJ, a tenth or so of FP32's ([`ENERGIES`]). A T4 (70 W, 12 nm) that ran its
/// 65 TFLOP/s FP16 peak would spend 0.6 pJ a FLOP at 7 nm, less than its tensor cores take.
pub const TENSOR_ENERGIES: [Option<f64>; 10] = [
    None,
    Some(0.5e-12),
    Some(0.75e-12),
    Some(1.0e-12),
    Some(1.25e-12),
    Some(1.5e-12),
    Some(2.0e-12),
    Some(2.5e-12),
    Some(3.0e-12),
    Some(4.0e-12),
];

/// One kernel of a published set ([`PublishedSet`]): the row it came from, its device, format
/// and measured time.
#[derive(Debug, Clone)]
pub struct PublishedKernel<'a> {
    /// `gemm.csv.gz: row 3`, for errors.
    pub row: String,
    /// The ridgeline device name it ran on.
    pub device: &'a str,
    /// Its number format.
    pub precision: RecordPrecision,
    /// What it computes.
    pub kernel: Kernel,
    /// Seconds.
    pub latency_s: f64,
    /// The threads it ran on, where its row says.
    pub threads: Option<u32>,
}

/// Every kernel of a published set, the products first, then the rows of `conv.csv.gz` in
/// order.
pub fn published_kernels(set: &PublishedSet) -> Result<Vec<PublishedKernel<'_>>> {
    let mut out = Vec::with_capacity(set.gemm.len() + set.conv.len());
    for (i, g) in set.gemm.iter().enumerate() {
        out.push(PublishedKernel {
            row: format!("gemm.csv.gz: row {}", i + 1),
            device: &g.device,
            precision: g.precision,
            kernel: product_kernel(g.m, g.n, g.k),
            latency_s: g.latency_s,
            threads: g.threads,
        });
    }
    for (i, c) in set.conv.iter().enumerate() {
        let row = format!("conv.csv.gz: row {}", i + 1);
        let size = |v: u64| v as usize;
        let shape = ridgeline_measure::record::ConvShape {
            source: set.source.repository.clone(),
            n: size(c.n),
            c_in: size(c.c_in),
            c_out: size(c.c_out),
            input: vec![size(c.h), size(c.w)],
            kernel: vec![size(c.r), size(c.s)],
            stride: vec![size(c.stride_h), size(c.stride_w)],
            padding: vec![[size(c.pad_h); 2], [size(c.pad_w); 2]],
            dilation: vec![1, 1],
            groups: 1,
            bias: false,
            pass: c.pass,
            layout: ridgeline_measure::Layout::ChannelsLast,
        };
        let kernel = crate::records::conv_shape_kernels(&shape)
            .map_err(|e| Error::Input(format!("{row}: {e}")))?
            .pop()
            .ok_or_else(|| Error::Input(format!("{row}: a convolution pass with no kernel")))?;
        out.push(PublishedKernel {
            row,
            device: &c.device,
            precision: c.precision,
            kernel,
            latency_s: c.latency_s,
            threads: c.threads,
        });
    }
    Ok(out)
}

/// The kernels of a published set ([`PublishedSet`]) as points, as [`record_points`] makes
/// ridgeline's own records: each at its time, its device the GPU and precision (`t4 fp16`);
/// with `scaled`, a kernel is a point of its scaled class, as [`record_points`] makes it. `spec`
/// gives a device's figures at a precision (the matrix peak of its format); a kernel of a
/// device it gives none for is an error naming the row and the device.
pub fn published_points(
    set: &PublishedSet,
    spec: &dyn Fn(&str, Precision) -> Option<DeviceSpec>,
    scaled: bool,
) -> Result<Vec<Point>> {
    published_kernels(set)?
        .into_iter()
        .map(|k| {
            let p = k.precision;
            let (precision, elem) = record_precision(p)
                .ok_or_else(|| Error::Input(format!("{}: precision `{}`", k.row, p.name())))?;
            let d = spec(k.device, precision).ok_or_else(|| {
                Error::Input(format!(
                    "{}: device `{}`: its file gives no {} peak, SMs, boost clock or \
                 bandwidth; add them, sourced",
                    k.row,
                    k.device,
                    p.name()
                ))
            })?;
            Ok(kernel_point(
                &k.kernel,
                elem,
                format!("{} {}", k.device, p.name()),
                &d,
                k.latency_s,
                scaled,
            ))
        })
        .collect()
}

/// [`outside`] for ridgeline's own records. With `floors`, records timed as inside a step
/// (each the mean of back-to-back calls as the host issued them, so a kernel shorter than
/// the host's time per call measures that time): each kernel at its work, or at its floor
/// where the work is shorter, the floor being its class's launch term but no more than the
/// products' (`gemm`), as `predict` times it
/// ([`ridgeline_model::transfer::Model::launch_floor`]). Without, records of the GPU's own
/// time (calls queued behind a spin kernel): each kernel at its work.
pub fn outside_in_step(
    models: &[ClassModel],
    heldout: &Transfer,
    points: &[Point],
    floors: bool,
) -> Vec<Holdout> {
    let launch = |m: &ClassModel| m.coefficients.first().copied().unwrap_or(0.0);
    let host = models.iter().find(|m| m.class == Class::GEMM).map(launch);
    let mut by: BTreeMap<(&str, Class), Vec<f64>> = BTreeMap::new();
    for p in points {
        let class = p.class.timed_by();
        let timed = faster(models, p, |m, x| {
            let floor = if floors {
                transfer::floor(m.class, launch(m), host)
            } else {
                0.0
            };
            transfer::work(&m.coefficients, x).max(floor)
        });
        if let Some(t) = timed {
            by.entry((p.device.as_str(), class))
                .or_default()
                .push(t / p.y - 1.0);
        }
    }
    by.into_iter()
        .map(|((device, class), e)| {
            Pool::judged(e, heldout.intervals.get(&class).copied()).holdout(device, class)
        })
        .collect()
}

/// The scaled classes as one scale on the FP32 fit's work. A tensor-core class
/// (`conv-gemm-tensor-16`, `gemm-tensor-tf32`: one per class and tensor-core format, FP16
/// and BF16 together; from ridgeline's own tensor-core records, [`record_points`], and the
/// published set's) times a kernel as its base class (`conv-gemm`) at the device's
/// tensor-core peak of that format under a power cap of its own, and multiplies the work
/// terms by `s`, the median ratio of measured time to the base class's predicted work over
/// the class's records, and keeps the base class's in-step floor (its launch term, at most
/// the products') inside a step. One parameter per class and format, fitted on kernels:
/// records of the GPU's own time ([`crate::dataset::Timing::Gpu`]) and published kernel
/// times, each judged at its work.
///
/// Each GPU is left out in turn, every precision of it, with every GPU of its chip
/// ([`Point::chip`]: the H200 goes with the H100 SXM5): `s` from the other chips' records
/// predicts it (the `Transfer`'s rows per GPU and precision, pooled as `all`, with
/// split-conformal intervals from the pooled log ratios). A class needs records of two
/// chips at least. It is adopted (returned among the models) only where that beats the base class
/// unscaled (at the tensor-core peak, with no cap, for a tensor-core class) on the same held-out kernels, by pooled median |error|;
/// the second value holds every class's rows, adopted or not, and the third the unscaled
/// pooled medians, by class.
pub fn scaled_classes(
    models: &[ClassModel],
    points: &[Point],
) -> (Vec<ClassModel>, Transfer, BTreeMap<Class, f64>) {
    let launch = |m: &ClassModel| m.coefficients.first().copied().unwrap_or(0.0);
    let host = models.iter().find(|m| m.class == Class::GEMM).map(launch);
    let mut classes: Vec<Class> = points.iter().map(|p| p.class).collect();
    classes.sort_unstable();
    classes.dedup();
    let mut adopted = Vec::new();
    let mut out = Transfer {
        holdouts: Vec::new(),
        classes: Vec::new(),
        intervals: BTreeMap::new(),
    };
    let mut unscaled_medians = BTreeMap::new();
    for class in classes.into_iter().filter(|c| c.is_tensor()) {
        let Some(base) = models.iter().find(|m| m.class == class.base()) else {
            continue;
        };
        let floor = transfer::floor(base.class, launch(base), host);
        // Each point: its chip, its device (GPU and precision, `h100-sxm5-80gb fp16`),
        // measured time, and the base class's work on it under each power cap of
        // `TENSOR_ENERGIES` (one where the device has no power figures).
        let rows: Vec<([u32; 2], &str, f64, Vec<f64>)> = points
            .iter()
            .filter(|p| p.class == class)
            .map(|p| {
                let work = (0..p.x.len())
                    .map(|e| transfer::work(&base.coefficients, p.at(e)))
                    .collect();
                (p.chip, p.device.as_str(), p.y, work)
            })
            .filter(|(_, _, y, w): &([u32; 2], &str, f64, Vec<f64>)| *y > 0.0 && w[0] > 0.0)
            .collect();
        let work = |w: &[f64], e: usize| *under_cap(w, e);
        // The scale and power cap fitted on the chips `keep` passes: under each cap, the
        // median ratio of measured to predicted work; the cap whose scaled predictions have
        // the smallest median |error| on those chips.
        let fit_on = |keep: &dyn Fn([u32; 2]) -> bool| -> Option<(f64, usize)> {
            let on: Vec<_> = rows.iter().filter(|r| keep(r.0)).collect();
            (0..TENSOR_ENERGIES.len())
                .filter_map(|e| {
                    let ratios: Vec<f64> = on.iter().map(|r| r.2 / work(&r.3, e)).collect();
                    if ratios.is_empty() {
                        return None;
                    }
                    let s = quantile(&ratios, 0.5);
                    let errors: Vec<f64> = on
                        .iter()
                        .map(|r| (s * work(&r.3, e) / r.2 - 1.0).abs())
                        .collect();
                    Some((quantile(&errors, 0.5), s, e))
                })
                .reduce(|best, next| if next.0 < best.0 { next } else { best })
                .map(|(_, s, e)| (s, e))
        };
        let mut chips: Vec<[u32; 2]> = rows.iter().map(|r| r.0).collect();
        chips.sort_unstable();
        chips.dedup();
        if chips.len() < 2 {
            continue;
        }
        let mut devices: Vec<(&str, [u32; 2])> = rows.iter().map(|r| (r.1, r.0)).collect();
        devices.sort_unstable();
        devices.dedup();
        let (mut pooled, mut unscaled) = (Pool::default(), Vec::new());
        let mut per_device = Vec::new();
        for &(held, held_chip) in &devices {
            let Some((s, e)) = fit_on(&|c| c != held_chip) else {
                continue;
            };
            let on: Vec<_> = rows.iter().filter(|r| r.1 == held).collect();
            let errors: Vec<f64> = on.iter().map(|r| s * work(&r.3, e) / r.2 - 1.0).collect();
            unscaled.extend(on.iter().map(|r| r.3[0] / r.2 - 1.0));
            pooled.errors.extend(&errors);
            pooled
                .devices
                .push(errors.iter().map(|r| log_ratio(*r)).collect());
            per_device.push((held, errors));
        }
        let Some(interval) = interval_90(&pooled.devices) else {
            continue;
        };
        for (held, e) in per_device {
            out.holdouts
                .push(Pool::judged(e, Some(interval)).holdout(held, class));
        }
        let all = Pool::judged(pooled.errors, Some(interval)).holdout("all", class);
        let plain: Vec<f64> = unscaled.iter().map(|r| r.abs()).collect();
        let plain = quantile(&plain, 0.5);
        unscaled_medians.insert(class, plain);
        if all.median_abs_rel_error < plain
            && let Some((s, e)) = fit_on(&|_| true)
        {
            let mut coefficients = vec![floor];
            coefficients.extend(base.coefficients.iter().skip(1).map(|c| c * s));
            adopted.push(ClassModel {
                class,
                coefficients,
                energy_per_flop_7nm: TENSOR_ENERGIES[e],
                energy: e,
                points: rows.len(),
            });
        }
        out.intervals.insert(class, interval);
        out.classes.push(all);
    }
    (adopted, out, unscaled_medians)
}

/// `ln(predicted / measured)` of a relative error.
fn log_ratio(r: f64) -> f64 {
    (1.0 + r).max(1e-9).ln()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ridgeline_model::kernels::KernelPass;

    #[test]
    fn depthwise_classes_are_fitted_per_class_and_judged_leaving_each_gpu_out() {
        // Two GPUs of one chip, 2.0 and 3.0 TB/s, whose depthwise forward passes take 4 us
        // plus 1.5 times their bytes at the bandwidth plus 0.2 times their multiply-adds at
        // one per SM per cycle; a fallback shape runs ten times slower on each.
        let class = Class::depthwise(KernelPass::Forward, NumberFormat::Fp16);
        let mut points = Vec::new();
        for (gpu, bandwidth) in [("a", 2.0e12), ("b", 3.0e12)] {
            for i in 1..=12 {
                let bytes = 1e6 * f64::from(i);
                let cycles = 1e-6 * f64::from(13 - i);
                let hbm = bytes / bandwidth;
                let fallback = if i == 7 { 10.0 } else { 1.0 };
                let y = fallback * (4e-6 + 1.5 * hbm + 0.2 * cycles);
                points.push(Point::new(
                    class,
                    format!("{gpu} fp16"),
                    vec![vec![1.0, hbm, cycles]],
                    y,
                    [132, 1980],
                ));
            }
        }
        let (models, held) = depthwise(&points).unwrap();
        assert_eq!(models.len(), 1);
        let c = &models[0].coefficients;
        // The fallback does not pull the fit off the rest.
        for (got, want) in c.iter().zip([4e-6, 1.5, 0.2]) {
            assert!((got / want - 1.0).abs() < 0.05, "{c:?}");
        }
        assert_eq!(held.holdouts.len(), 2);
        assert!(
            held.holdouts
                .iter()
                .all(|h| h.class == class.name() && h.points == 12)
        );
        let all = &held.classes[0];
        assert_eq!((all.device.as_str(), all.points), ("all", 24));
        assert!(all.median_abs_rel_error < 0.05, "{all:?}");
        assert!(held.intervals.contains_key(&class));
    }
    use ridgeline_measure::ConvPass;
    const CONV_GEMM: Class = Class::CONV_GEMM;

    /// The class named `name`.
    fn named(name: &str) -> Class {
        Class::parse(name).unwrap()
    }

    fn gpu_record(measured: Measured, precision: RecordPrecision, seconds: f64) -> Record {
        use ridgeline_measure::record::{Device, Env};
        Record::new(
            measured,
            precision,
            Device::Cuda(0),
            1,
            vec![seconds; 5],
            1.0,
            1.0,
            Env::capture(),
        )
    }

    fn conv3x3(pass: ConvPass, dilation: usize) -> Measured {
        Measured::Conv(ridgeline_measure::record::ConvShape {
            source: "resnet50/layer1.0.conv2".into(),
            n: 32,
            c_in: 64,
            c_out: 64,
            input: vec![56, 56],
            kernel: vec![3, 3],
            stride: vec![1, 1],
            padding: vec![[dilation, dilation]; 2],
            dilation: vec![dilation; 2],
            groups: 1,
            bias: false,
            pass,
            layout: ridgeline_measure::Layout::ChannelsLast,
        })
    }

    #[test]
    fn records_become_the_kernels_predict_describes() {
        // ResNet-50's 3x3 convolution: padding 1 keeps 56 x 56, as a dilation of 2 with
        // padding 2 does; the weight gradient is a GEMM of c_out x (c_in 9) over the batch's
        // positions.
        for dilation in [1, 2] {
            let r = gpu_record(
                conv3x3(ConvPass::BackwardFilter, dilation),
                RecordPrecision::Fp16,
                1e-4,
            );
            let k = record_kernel("f", &r).unwrap().unwrap();
            assert_eq!(
                (k.class, k.pass),
                (KernelClass::ConvSpatial, KernelPass::BackwardFilter)
            );
            let positions = 32.0 * 56.0 * 56.0;
            assert_eq!(k.x[1], 2.0 * 64.0 * 576.0 * positions);
        }
        let g = gpu_record(
            Measured::Gemm(ridgeline_measure::record::GemmShape {
                m: 64,
                n: 128,
                k: 256,
            }),
            RecordPrecision::Bf16,
            1e-5,
        );
        let k = record_kernel("f", &g).unwrap().unwrap();
        assert_eq!(
            (k.class, k.x[1]),
            (KernelClass::Gemm, 2.0 * 64.0 * 128.0 * 256.0)
        );
        assert_eq!(
            record_precision(RecordPrecision::Fp16),
            Some((Precision::AmpFp16, 2))
        );
        assert_eq!(
            record_precision(RecordPrecision::Tf32),
            Some((Precision::Tf32, 4))
        );
        assert_eq!(record_precision(RecordPrecision::Fp64), None);
        assert_eq!(
            record_precision(RecordPrecision::Fp8),
            Some((Precision::Fp8, 1))
        );
    }

    #[test]
    fn tensor_core_records_are_points_of_the_tensor_classes_at_the_formats_peak() {
        let fp32 = DeviceSpec {
            power: Some(transfer::PowerSpec {
                tdp_w: 700.0,
                process_nm: 4.0,
            }),
            ..spec(132.0, 1.98, 67.0, 4.8, 60.0)
        };
        let fp16 = DeviceSpec {
            peak_flops: 989e12,
            tensor: Some(ridgeline_model::precision::NumberFormat::Fp16),
            ..spec(132.0, 1.98, 67.0, 4.8, 60.0)
        };
        let records = [
            gpu_record(conv3x3(ConvPass::Forward, 1), RecordPrecision::Fp16, 5e-5),
            gpu_record(conv3x3(ConvPass::Forward, 1), RecordPrecision::Fp32, 4e-4),
            gpu_record(conv3x3(ConvPass::Forward, 1), RecordPrecision::Fp64, 1e-3),
        ];
        let spec = |_: &Record, p: Precision| {
            Some((
                "h200".to_owned(),
                if p == Precision::Fp32 { fp32 } else { fp16 },
            ))
        };
        let plain = record_points("f", &records, &spec, false).unwrap();
        let tensor = record_points("f", &records, &spec, true).unwrap();
        // FP64 is no training precision: left out.
        assert_eq!((plain.len(), tensor.len()), (2, 2));
        // On tensor cores every convolution is an implicit GEMM.
        assert_eq!(plain[0].class, CONV_GEMM);
        assert_eq!(
            (tensor[0].class.name(), tensor[0].device.as_str()),
            ("conv-gemm-tensor-16", "h200 fp16")
        );
        // The FP32 point keeps its class and a row per power cap; the tensor-core one has
        // one row (no cap), its compute term at the fp16 peak.
        assert_eq!(tensor[1].class, Class::CONV);
        assert_eq!((tensor[0].x.len(), tensor[1].x.len()), (1, ENERGIES.len()));
        assert!(tensor[0].x[0][1] < tensor[1].x[0][1] / 10.0);
        assert_eq!(tensor[0].y, 5e-5);
    }

    /// FP32 convolution records whose passes are outside `conv`'s kind (both gradients) are
    /// points of `conv-gemm`, timed as implicit GEMMs, and no scaled class's data: no scale
    /// is fitted on them. The forward passes (`conv`'s kind) stay points of `conv`.
    #[test]
    fn fp32_convolutions_outside_convs_kind_are_points_of_the_implicit_gemm_class() {
        let d = DeviceSpec {
            power: Some(transfer::PowerSpec {
                tdp_w: 300.0,
                process_nm: 7.0,
            }),
            ..spec(108.0, 1.5, 19.5, 1.5, 40.0)
        };
        let records: Vec<Record> = [
            ConvPass::Forward,
            ConvPass::BackwardData,
            ConvPass::BackwardFilter,
        ]
        .into_iter()
        .flat_map(|pass| [1, 2].map(|d| gpu_record(conv3x3(pass, d), RecordPrecision::Fp32, 1.0)))
        .collect();
        let spec = |_: &Record, _: Precision| Some(("a".to_owned(), d));
        let points = record_points("f", &records, &spec, true).unwrap();
        let classes: Vec<&str> = points.iter().map(|p| p.class.name()).collect();
        assert_eq!(
            classes,
            [
                "conv",
                "conv",
                "conv-gemm",
                "conv-gemm",
                "conv-gemm",
                "conv-gemm"
            ]
        );
        // A row per power cap, as the FP32 fit's.
        assert!(points.iter().all(|p| p.x.len() == ENERGIES.len()));
        let base = ClassModel {
            class: CONV_GEMM,
            coefficients: vec![1e-5, 1.0, 0.0, 0.0, 0.0],
            energy_per_flop_7nm: None,
            energy: 0,
            points: 1,
        };
        let (adopted, held, _) = scaled_classes(std::slice::from_ref(&base), &points);
        assert!(adopted.is_empty() && held.classes.is_empty(), "{held:?}");
    }

    /// A kernel two classes could time (a 3 x 3 forward convolution: Winograd's `conv` or
    /// `conv-gemm`) is predicted by the faster, each class on its own features under its own
    /// power cap; without the other class's model, by its own; and NeuSight's and FP32
    /// records of `conv`'s kind carry `conv-gemm`'s features, tensor-core ones do not.
    #[test]
    fn a_kernel_two_classes_could_time_is_predicted_by_the_faster() {
        let model = |class: Class, slope: f64, energy: usize| ClassModel {
            class,
            coefficients: vec![1e-5, slope, 0.0, 0.0, 0.0],
            energy_per_flop_7nm: ENERGIES[energy],
            energy,
            points: 1,
        };
        let rows = |t: f64| {
            (0..ENERGIES.len())
                .map(|e| vec![1.0, t + e as f64, 0.0, 0.0, 0.0])
                .collect()
        };
        let p = Point {
            or: Some((CONV_GEMM, rows(10.0))),
            ..Point::new(Class::CONV, "a".into(), rows(20.0), 1.0, [1, 1])
        };
        let conv = model(Class::CONV, 1.0, 2);
        let fast = [conv.clone(), model(CONV_GEMM, 1.0, 1)];
        assert_eq!(predict(&fast, &p), Some(1e-5 + 11.0));
        let slow = [conv.clone(), model(CONV_GEMM, 3.0, 1)];
        assert_eq!(predict(&slow, &p), Some(1e-5 + 22.0));
        assert_eq!(predict(std::slice::from_ref(&conv), &p), Some(1e-5 + 22.0));
        assert_eq!(predict(&fast[1..], &p), None);
        let r = gpu_record(conv3x3(ConvPass::Forward, 1), RecordPrecision::Fp32, 1e-3);
        let fp32 = spec(108.0, 1.5, 19.5, 1.5, 40.0);
        let spec_of = |_: &Record, _: Precision| Some(("a".to_owned(), fp32));
        let points = record_points("f", std::slice::from_ref(&r), &spec_of, false).unwrap();
        let (class, x) = points[0].or.as_ref().unwrap();
        assert_eq!(
            (points[0].class.name(), class.name()),
            ("conv", "conv-gemm")
        );
        let k = record_kernel("f", &r).unwrap().unwrap();
        let gemm = transfer::features_for(&k, CONV_GEMM, 4, &fp32);
        assert_eq!((x.len(), &x[0]), (points[0].x.len(), &gemm));
        let fp16 = DeviceSpec {
            peak_flops: 312e12,
            tensor: Some(ridgeline_model::precision::NumberFormat::Fp16),
            ..fp32
        };
        let spec_of = |_: &Record, _: Precision| Some(("a".to_owned(), fp16));
        let r = gpu_record(conv3x3(ConvPass::Forward, 1), RecordPrecision::Fp16, 1e-3);
        let points = record_points("f", &[r], &spec_of, false).unwrap();
        assert!(points[0].or.is_none() && points[0].class == CONV_GEMM);
    }

    /// A published set of three FP16 GEMMs on each device of `specs`, each of 1 s.
    fn fp16_gemms(specs: &BTreeMap<&str, DeviceSpec>) -> crate::dataset::PublishedSet {
        let gemm = specs
            .keys()
            .flat_map(|device| {
                [(4096, 4096, 4096), (1760, 128, 1760), (512, 48000, 2048)].map(|(m, n, k)| {
                    crate::dataset::PublishedGemm {
                        device: (*device).to_owned(),
                        precision: RecordPrecision::Fp16,
                        m,
                        n,
                        k,
                        a_transpose: 0,
                        b_transpose: 0,
                        latency_s: 1.0,
                        threads: None,
                    }
                })
            })
            .collect();
        crate::dataset::PublishedSet {
            source: crate::dataset::Source::default(),
            gemm,
            conv: Vec::new(),
        }
    }

    /// A `gemm` class whose work is its FLOP term alone, after a 10 us launch.
    fn unit_gemm() -> ClassModel {
        ClassModel {
            class: Class::GEMM,
            coefficients: vec![1e-5, 1.0, 0.0, 0.0, 0.0],
            energy_per_flop_7nm: None,
            energy: 0,
            points: 1,
        }
    }

    /// A published tensor-core set's GEMMs on three GPUs, two of whose boards cannot feed
    /// their tensor cores at the peak, each timed as 1.3 times the FP32 class's work under a
    /// cap of 1.5 pJ a FLOP at 7 nm: leaving each GPU out recovers the scale and the cap.
    #[test]
    fn published_tensor_kernels_fit_a_tensor_class_with_its_own_power_cap() {
        let fp16 = |sms: f64, tflops: f64, tdp_w: f64, process_nm: f64| DeviceSpec {
            peak_flops: tflops * 1e12,
            tensor: Some(ridgeline_model::precision::NumberFormat::Fp16),
            power: Some(transfer::PowerSpec { tdp_w, process_nm }),
            ..spec(sms, 1.5, 15.0, 0.9, 6.0)
        };
        let specs: BTreeMap<&str, DeviceSpec> = [
            ("t", fp16(40.0, 65.0, 70.0, 12.0)),
            ("v", fp16(80.0, 125.0, 300.0, 12.0)),
            ("p", fp16(56.0, 120.0, 250.0, 16.0)),
        ]
        .into();
        let mut set = fp16_gemms(&specs);
        let spec_of = |name: &str, p: Precision| {
            assert_eq!(p, Precision::AmpFp16);
            specs.get(name).copied()
        };
        let mut points = published_points(&set, &spec_of, true).unwrap();
        assert_eq!(points.len(), 9);
        assert_eq!(
            (points[0].class.name(), points[0].device.as_str()),
            ("gemm-tensor-16", "p fp16")
        );
        assert_eq!(points[0].x.len(), TENSOR_ENERGIES.len());
        let base = unit_gemm();
        let cap = TENSOR_ENERGIES
            .iter()
            .position(|e| *e == Some(1.5e-12))
            .unwrap();
        for p in &mut points {
            p.y = 1.3 * transfer::work(&base.coefficients, p.at(cap));
        }
        let (adopted, held, unscaled) = scaled_classes(std::slice::from_ref(&base), &points);
        assert_eq!(adopted.len(), 1);
        let a = &adopted[0];
        assert_eq!(a.energy_per_flop_7nm, Some(1.5e-12));
        assert!((a.coefficients[1] - 1.3).abs() < 1e-9, "{a:?}");
        let all = held
            .classes
            .iter()
            .find(|h| h.class == "gemm-tensor-16")
            .unwrap();
        assert!(all.median_abs_rel_error < 1e-9, "{all:?}");
        assert!(unscaled[&named("gemm-tensor-16")] > 0.2);
        // A device the spec does not know is an error naming the row.
        set.gemm[0].device = "x".into();
        let e = published_points(&set, &spec_of, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemm.csv.gz: row 1: device `x`"), "{e}");
    }

    /// GPUs of one chip (SMs and clock alike: the H100 SXM5 and the H200) are left out
    /// together: each is predicted from the other chips alone, and two of one chip make no
    /// tensor-core class.
    #[test]
    fn gpus_of_one_chip_are_left_out_together() {
        let fp16 = |sms: f64, ghz: f64, tbs: f64| DeviceSpec {
            tensor: Some(ridgeline_model::precision::NumberFormat::Fp16),
            ..spec(sms, ghz, 990.0, tbs, 50.0)
        };
        let specs: BTreeMap<&str, DeviceSpec> = [
            ("h", fp16(132.0, 1.98, 3.35)),
            ("g", fp16(132.0, 1.98, 4.8)),
            ("v", fp16(80.0, 1.53, 0.9)),
        ]
        .into();
        assert_eq!(chip(&specs["h"]), chip(&specs["g"]));
        assert_ne!(chip(&specs["h"]), chip(&specs["v"]));
        let set = fp16_gemms(&specs);
        let spec_of = |name: &str, _: Precision| specs.get(name).copied();
        let mut points = published_points(&set, &spec_of, true).unwrap();
        let base = unit_gemm();
        // The GH100-like pair runs at twice the base class's work, the other at it.
        for p in &mut points {
            let scale = if p.device.starts_with('v') { 1.0 } else { 2.0 };
            p.y = scale * transfer::work(&base.coefficients, p.at(0));
        }
        let (_, held, _) = scaled_classes(std::slice::from_ref(&base), &points);
        let row = |device: &str| {
            held.holdouts
                .iter()
                .find(|h| h.device == device)
                .unwrap_or_else(|| panic!("{device}: {:?}", held.holdouts))
        };
        // Left out with its twin, `h` is predicted at `v`'s scale: half its time.
        assert!(
            (row("h fp16").bias + 0.5).abs() < 1e-9,
            "{:?}",
            row("h fp16")
        );
        assert!(
            (row("g fp16").bias + 0.5).abs() < 1e-9,
            "{:?}",
            row("g fp16")
        );
        assert!(
            (row("v fp16").bias - 1.0).abs() < 1e-9,
            "{:?}",
            row("v fp16")
        );
        // The pair alone is one chip: no class.
        points.retain(|p| !p.device.starts_with('v'));
        let (adopted, held, _) = scaled_classes(std::slice::from_ref(&base), &points);
        assert!(adopted.is_empty() && held.holdouts.is_empty(), "{held:?}");
    }

    fn spec(sms: f64, ghz: f64, tflops: f64, tbs: f64, l2_mib: f64) -> DeviceSpec {
        DeviceSpec {
            sms,
            clock_hz: ghz * 1e9,
            peak_flops: tflops * 1e12,
            bandwidth: tbs * 1e12,
            l2_bytes: l2_mib * 1048576.0,
            power: None,
            tensor: None,
        }
    }

    /// `bmm` kernels of 14 shapes on each `(device, spec, floor)`, each measured as its
    /// device's floor plus the work `slopes` give its features after the launch, under the
    /// power cap [`ENERGIES`]`[cap]`.
    fn synthetic(devices: &[(&str, DeviceSpec, f64)], slopes: &[f64], cap: usize) -> Vec<Point> {
        let mut pts = Vec::new();
        for (device, d, floor) in devices {
            for &(m, n, k) in &[
                (64u64, 64u64, 64u64),
                (512, 512, 512),
                (2048, 1024, 4096),
                (27, 29, 15),
                (4096, 4096, 256),
                (128 * 109, 128, 512),
                (1000, 3000, 200),
            ] {
                for batch in [1u64, 8] {
                    let x = capped(d, |d| transfer::gemm(batch, m, n, k, 4, Tiles::Library, d));
                    // The truth is the features under `cap`.
                    let work: f64 = x[cap][1..].iter().zip(slopes).map(|(a, b)| a * b).sum();
                    pts.push(Point::new(
                        Class::Product(Product::Bmm),
                        (*device).into(),
                        x,
                        floor + work,
                        chip(d),
                    ));
                }
            }
        }
        pts
    }

    /// Each device's host has its own floor: the shared coefficients are recovered exactly,
    /// and the model's launch term is the median floor.
    #[test]
    fn each_device_has_its_own_launch_term_and_the_model_the_median() {
        let slopes = [0.9, 2e-5 * 1e9, 1.2, 1.1];
        let pts = synthetic(
            &[
                ("a", spec(40.0, 1.5, 8.0, 0.3, 4.0), 10e-6),
                ("b", spec(80.0, 1.4, 14.0, 0.9, 6.0), 20e-6),
                ("c", spec(108.0, 1.4, 19.5, 1.6, 40.0), 40e-6),
            ],
            &slopes,
            0,
        );
        let all: Vec<&Point> = pts.iter().collect();
        let m = &fit(&all).unwrap()[0];
        assert_eq!(m.energy_per_flop_7nm, None, "no device has a power figure");
        assert!(
            (m.coefficients[0] / 20e-6 - 1.0).abs() < 1e-6,
            "{:?}",
            m.coefficients
        );
        for (c, t) in m.coefficients[1..].iter().zip(&slopes) {
            assert!((c / t - 1.0).abs() < 1e-6, "{:?}", m.coefficients);
        }
    }

    /// Devices whose boards cap their FLOP rate (a 70 W card, a 300 W one at 16 nm) and one
    /// that runs uncapped: the fit finds the energy per FLOP the kernels were made with, and
    /// the coefficients under it.
    #[test]
    fn the_power_cap_the_kernels_ran_under_is_found() {
        let with = |mut d: DeviceSpec, tdp_w: f64, process_nm: f64| {
            d.power = Some(transfer::PowerSpec { tdp_w, process_nm });
            d
        };
        let slopes = [0.9, 2e-5 * 1e9, 1.2, 1.1];
        let cap = ENERGIES.iter().position(|e| *e == Some(8e-12)).unwrap();
        let devices = [
            (
                "lowpower",
                with(spec(40.0, 1.6, 8.1, 0.3, 4.0), 70.0, 12.0),
                20e-6,
            ),
            (
                "big",
                with(spec(56.0, 1.3, 9.3, 0.7, 4.0), 250.0, 16.0),
                20e-6,
            ),
            (
                "uncapped",
                with(spec(108.0, 1.4, 19.5, 1.6, 40.0), 400.0, 7.0),
                20e-6,
            ),
        ];
        // The 70 W card at 12 nm sustains 70 / (8 pJ x 12 / 7) = 5.1 of its 8.1 TFLOP/s.
        let capped_peak = devices[0].1.capped(ENERGIES[cap]).peak_flops;
        assert!((capped_peak / 5.104e12 - 1.0).abs() < 1e-3, "{capped_peak}");
        assert_eq!(devices[2].1.capped(ENERGIES[cap]).peak_flops, 19.5e12);
        let pts = synthetic(&devices, &slopes, cap);
        let all: Vec<&Point> = pts.iter().collect();
        let m = &fit(&all).unwrap()[0];
        assert_eq!(m.energy_per_flop_7nm, Some(8e-12));
        for (c, t) in m.coefficients[1..].iter().zip(&slopes) {
            assert!((c / t - 1.0).abs() < 1e-6, "{:?}", m.coefficients);
        }
    }

    /// Four synthetic devices whose kernels follow known coefficients exactly: every
    /// held-out device is predicted within rounding, by the coefficients of the others.
    /// Log ratios of devices whose kernels scatter alike around each device's own shift.
    fn shifted(shifts: &[f64]) -> Vec<Vec<f64>> {
        shifts
            .iter()
            .map(|s| {
                (0..200)
                    .map(|i| s + (f64::from(i) / 199.0 - 0.5) * 0.1)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn devices_alike_get_the_pooled_90_percent_interval() {
        let devices = shifted(&[0.0; 5]);
        let all: Vec<f64> = devices.iter().flatten().copied().collect();
        let (lo, hi) = interval_90(&devices).unwrap();
        assert!((lo - quantile(&all, 0.05)).abs() < 2e-3, "{lo}");
        assert!((hi - quantile(&all, 0.95)).abs() < 2e-3, "{hi}");
        // One device: its own central 90 %.
        let one = interval_90(&devices[..1]).unwrap();
        assert!((one.0 - quantile(&devices[0], 0.05)).abs() < 1e-12);
        assert!(interval_90(&[]).is_none());
    }

    #[test]
    fn devices_apart_widen_the_interval_until_it_covers_a_device_from_the_others() {
        let devices = shifted(&[-0.2, -0.1, 0.0, 0.1, 0.2]);
        let all: Vec<f64> = devices.iter().flatten().copied().collect();
        let (lo, hi) = interval_90(&devices).unwrap();
        // Pooled, the central 90 % would leave most of the outer devices' kernels out of an
        // interval built without them; the level is raised until they are covered.
        assert!(lo < quantile(&all, 0.05) - 0.01, "{lo}");
        assert!(hi > quantile(&all, 0.95) + 0.01, "{hi}");
        let inside = all.iter().filter(|v| (lo..=hi).contains(*v)).count();
        assert!(inside as f64 / all.len() as f64 > 0.95);
    }

    #[test]
    fn a_device_left_out_is_predicted_from_the_others() {
        let truth = [8e-6, 1.3, 2e-5 * 1e9, 0.5, 1.1];
        let e = spec(60.0, 1.6, 30.0, 2.0, 32.0);
        let pts = synthetic(
            &[
                ("a", spec(40.0, 1.5, 8.0, 0.3, 4.0), truth[0]),
                ("b", spec(80.0, 1.4, 14.0, 0.9, 6.0), truth[0]),
                ("c", spec(108.0, 1.4, 19.5, 1.6, 40.0), truth[0]),
                ("d", spec(132.0, 1.9, 60.0, 3.3, 50.0), truth[0]),
            ],
            &truth[1..],
            0,
        );
        let held = leave_one_out(&pts).unwrap();
        // Each device's `bmm` kernels, and the same pooled as `gemm`, the model that times
        // them.
        assert_eq!(held.holdouts.len(), 8);
        let classes: Vec<(&str, usize)> = held
            .classes
            .iter()
            .map(|h| (h.class.as_str(), h.points))
            .collect();
        assert_eq!(classes, [("bmm", 56), ("gemm", 56)]);
        for h in &held.holdouts {
            assert!(h.median_abs_rel_error < 1e-6, "{h:?}");
            assert!(h.p90_abs_rel_error < 1e-6, "{h:?}");
            assert_eq!(h.points, 14);
        }
        // Operators of a step on a fifth device, timed in place as the truth's in-step
        // times: a product's forward and its two backward products, a scaling's one
        // kernel, a sum's none (not compared). Linear layers are timed by `bmm`.
        let truth_in_step = |x: &[f64]| {
            let work: f64 = x.iter().zip(&truth).skip(1).map(|(a, b)| a * b).sum();
            work.max(truth[0])
        };
        let g = |m, n, k| truth_in_step(&transfer::gemm(1, m, n, k, 4, Tiles::Library, &e));
        let op = |op: &str, m: u64, n: u64, k: u64, f: f64, b: f64| crate::dataset::LabelOp {
            device: "e".into(),
            step: "toy-train-1".into(),
            node: op.into(),
            op: named(op),
            batch: 1,
            m,
            n,
            k,
            forward_s: f,
            backward_s: b,
        };
        let set = LabelSet {
            source: crate::dataset::Source {
                devices: [("E".to_owned(), "e".to_owned())].into(),
                ..Default::default()
            },
            steps: Vec::new(),
            models: BTreeMap::new(),
            ops: vec![
                op(
                    "linear",
                    2048,
                    1024,
                    512,
                    g(2048, 1024, 512),
                    g(2048, 512, 1024) + g(512, 1024, 2048),
                ),
                op(
                    "bmm",
                    300,
                    200,
                    100,
                    g(300, 200, 100),
                    g(300, 100, 200) + g(100, 200, 300),
                ),
                // No model for `relu` here: left out.
                op("relu", 1000, 1, 1, 1e-5, 1e-5),
            ],
        };
        let all: Vec<&Point> = pts.iter().collect();
        let models = fit(&all).unwrap();
        let specs = [("e".to_owned(), e)].into();
        let rows = labels(&models, &held, &set, &specs).unwrap();
        let pooled = rows.iter().find(|h| h.class == "all").unwrap();
        assert_eq!(pooled.points, 4, "{rows:?}");
        assert!(pooled.median_abs_rel_error < 1e-6, "{rows:?}");
        assert!(
            rows.iter()
                .any(|h| h.class == "gemm backward" && h.points == 2)
        );
        // Kernels of the fifth device measured on their own, as the set's were.
        let fifth = synthetic(&[("e", e, truth[0])], &truth[1..], 0);
        let rows = outside(&models, &held, &fifth);
        let classes: Vec<(&str, &str, usize)> = rows
            .iter()
            .map(|h| (h.device.as_str(), h.class.as_str(), h.points))
            .collect();
        assert_eq!(classes, [("e", "bmm", 14), ("e", "gemm", 14)]);
        assert!(
            rows.iter().all(|h| h.median_abs_rel_error < 1e-6),
            "{rows:?}"
        );
        let missing = BTreeMap::new();
        assert!(
            labels(&models, &held, &set, &missing)
                .unwrap_err()
                .to_string()
                .contains("`e`")
        );

        let few: Vec<Point> = pts
            .into_iter()
            .filter(|p| p.device != "d" && p.device != "c")
            .collect();
        assert!(
            leave_one_out(&few)
                .unwrap_err()
                .to_string()
                .contains("at least 3")
        );
    }
}
