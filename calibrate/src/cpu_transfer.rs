//! Fitting and validating the CPU kernel model ([`ridgeline_model::transfer::cpu`]) on
//! measured kernels of several CPUs.
//!
//! One non-negative linear model per software, kernel class and pass, fitted on errors
//! relative to the time ([`crate::fit::fit_relative`]) over every kernel of every CPU given.
//! Each feature is a time on its CPU, so the coefficients are shared by all CPUs and a CPU
//! outside the fit is timed from its device file alone. [`leave_one_out`] holds out each CPU
//! in turn, fits on the others and predicts it; a held-out CPU's kernels are judged against
//! the 90 % interval the other held-out CPUs give ([`crate::transfer::interval_90`], the CPU
//! as the exchangeable unit), as the GPU model's are.

use std::collections::{BTreeMap, BTreeSet};

use ridgeline_measure::Pass;
use ridgeline_measure::record::{Measured, Record, RecordPrecision};
use ridgeline_model::kernels::{Kernel, KernelPass, vector_kernel};
use ridgeline_model::precision::Precision;
use ridgeline_model::transfer::cpu::{
    self, CpuClass, CpuCoefficients, CpuModel, CpuModelSource, CpuSpec, Software,
};
use serde::Serialize;
use statrs::statistics::{Data, OrderStatistics};

use crate::dataset::PublishedSet;
use crate::error::{Error, Result};
use crate::fit::{fit_relative, fit_relative_to_measured};
use crate::records::record_kernel;
use crate::transfer::{Holdout, interval_90};

/// One measured kernel of one CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuPoint {
    /// The CPU, by device name.
    pub cpu: String,
    /// Whose kernel.
    pub software: Software,
    /// Its class and pass.
    pub class: CpuClass,
    /// Threads it ran on.
    pub threads: u32,
    /// Features on the CPU ([`cpu::features`]).
    pub x: Vec<f64>,
    /// Measured seconds (the median of its samples).
    pub y: f64,
}

/// The kernel a GEMM, convolution or op record measured; `None` for other records and for
/// ops that are no vector kernel (a linear layer's products).
pub fn record_kernel_any(file: &str, r: &Record) -> Result<Option<Kernel>> {
    Ok(match &r.measured {
        Measured::Op(o) => {
            let pass = match o.pass {
                Pass::Forward => KernelPass::Forward,
                Pass::Backward => KernelPass::Backward,
            };
            vector_kernel(&o.op.op, pass, r.flops, r.bytes)
        }
        _ => record_kernel(file, r)?,
    })
}

/// The bytes per element and the precision of a record's kernels: FP32, the one format CPU
/// training runs in here; `None` for the others.
fn record_precision(p: RecordPrecision) -> Option<(Precision, u64)> {
    (p == RecordPrecision::Fp32).then_some((Precision::Fp32, 4))
}

/// The records of `file`, kernels of `software` on the CPU named `cpu`, as points; `spec`
/// gives the CPU's figures at a thread count and precision. Records of a GPU, of another
/// kind than a kernel's, or without a positive time are left out.
pub fn record_points(
    file: &str,
    records: &[Record],
    cpu: &str,
    software: Software,
    spec: &dyn Fn(u32, Precision) -> Option<CpuSpec>,
) -> Result<Vec<CpuPoint>> {
    let mut out = Vec::new();
    for r in records {
        if r.device != ridgeline_measure::Device::Cpu {
            continue;
        }
        let (Some(kernel), Some((precision, elem))) =
            (record_kernel_any(file, r)?, record_precision(r.precision))
        else {
            continue;
        };
        let threads = u32::try_from(r.threads).unwrap_or(u32::MAX);
        let Some(d) = spec(threads, precision) else {
            continue;
        };
        let y = ridgeline_measure::protocol::median(&r.samples_s);
        if !(y.is_finite() && y > 0.0) {
            continue;
        }
        out.push(CpuPoint {
            cpu: cpu.to_owned(),
            software,
            class: CpuClass::of(&kernel),
            threads,
            x: cpu::features(&kernel, elem, &d),
            y,
        });
    }
    Ok(out)
}

/// The kernels of the CPUs of a published set ([`PublishedSet`]: DeepBench's Xeon Phi, BLIS's
/// graphs) as points, each of the software the libraries a framework calls on CPUs are
/// ([`Software::Onednn`]: MKL's or OpenBLAS's products, MKL's and oneDNN's convolutions), on
/// the CPU named by its device, at the threads its row gives, else the set's `SOURCE.toml`.
/// `spec` gives a device's figures at a thread count and precision, `None` where the device is
/// no CPU: its kernels are the GPU model's and are left out. A CPU kernel without threads is an
/// error naming the row and the field.
pub fn published_points(
    set: &PublishedSet,
    spec: &dyn Fn(&str, u32, Precision) -> Option<CpuSpec>,
) -> Result<Vec<CpuPoint>> {
    let mut out = Vec::new();
    for k in crate::transfer::published_kernels(set)? {
        let given = k.threads.or(set.source.threads);
        let threads = given.unwrap_or(1);
        let Some(d) = spec(k.device, threads, Precision::Fp32) else {
            continue;
        };
        let Some((_, elem)) = record_precision(k.precision) else {
            return Err(Error::Input(format!(
                "{}: precision `{}`: the CPU model takes FP32 kernels of a CPU (`{}`)",
                k.row,
                k.precision.name(),
                k.device
            )));
        };
        if given.is_none() {
            return Err(Error::Input(format!(
                "{}: `threads` is missing: the kernels of CPU `{}` need the threads they ran \
                 on, in a `threads` column or as SOURCE.toml's `threads = N` (one a core)",
                k.row, k.device
            )));
        }
        if threads == 0 {
            return Err(Error::Input(format!(
                "{}: `threads` is 0: a kernel of CPU `{}` runs on one thread at least",
                k.row, k.device
            )));
        }
        if !(k.latency_s.is_finite() && k.latency_s > 0.0) {
            continue;
        }
        out.push(CpuPoint {
            cpu: k.device.to_owned(),
            software: Software::Onednn,
            class: CpuClass::of(&k.kernel),
            threads,
            x: cpu::features(&k.kernel, elem, &d),
            y: k.latency_s,
        });
    }
    Ok(out)
}

/// One fitted class.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuFit {
    /// Whose kernels.
    pub software: Software,
    /// The class and pass.
    pub class: CpuClass,
    /// One per feature.
    pub coefficients: Vec<f64>,
    /// Kernels fitted.
    pub points: usize,
    /// CPUs fitted on.
    pub cpus: usize,
}

impl CpuFit {
    fn time(&self, x: &[f64]) -> f64 {
        self.coefficients.iter().zip(x).map(|(c, v)| c * v).sum()
    }
}

/// The fewest kernels a class is fitted on.
pub const MIN_POINTS: usize = 8;

type Key = (Software, CpuClass);

/// The points of each class: a vector op's in its op's class and in its kernel class's.
fn groups<'a>(points: &[&'a CpuPoint]) -> BTreeMap<Key, Vec<&'a CpuPoint>> {
    let mut out: BTreeMap<Key, Vec<&CpuPoint>> = BTreeMap::new();
    for p in points {
        out.entry((p.software, p.class.pooled()))
            .or_default()
            .push(p);
        if p.class.op.is_some() {
            out.entry((p.software, p.class)).or_default().push(p);
        }
    }
    out
}

/// The largest median relative error a fit may leave on its own kernels before the fit
/// relative to the measured times replaces it ([`fit`]).
pub const MAX_OWN_BIAS: f64 = 0.2;

/// Fits every class of `points` with at least [`MIN_POINTS`] kernels relative to the fitted
/// times ([`crate::fit::fit_relative`]), the right fit where the features say what a kernel
/// costs. Where a few kernels run far slower than their features say (a library's fallback
/// for shapes its fast kernel does not take, a class of ops some of which draw random
/// numbers), that fit lets them push every other kernel's prediction up, and most of the
/// class's own kernels come out slower than measured: where their median error passes
/// [`MAX_OWN_BIAS`], the class is fitted relative to the measured times instead
/// ([`crate::fit::fit_relative_to_measured`]), which those few cannot pull.
pub fn fit(points: &[&CpuPoint]) -> Result<Vec<CpuFit>> {
    let mut out = Vec::new();
    for ((software, class), rows) in groups(points) {
        if rows.len() < MIN_POINTS {
            continue;
        }
        let x: Vec<Vec<f64>> = rows.iter().map(|p| p.x.clone()).collect();
        let y: Vec<f64> = rows.iter().map(|p| p.y).collect();
        let what = |e: Error| Error::Fit(format!("{} {class}: {e}", software.name()));
        let bias = |c: &[f64]| {
            let e: Vec<f64> = x
                .iter()
                .zip(&y)
                .map(|(r, y)| r.iter().zip(c).map(|(a, b)| a * b).sum::<f64>() / y - 1.0)
                .collect();
            quantile(&e, 0.5)
        };
        let on_fitted = fit_relative(&x, &y).map_err(what)?;
        let f = if bias(&on_fitted.coefficients).abs() > MAX_OWN_BIAS {
            fit_relative_to_measured(&x, &y).map_err(what)?
        } else {
            on_fitted
        };
        let cpus: BTreeSet<&str> = rows.iter().map(|p| p.cpu.as_str()).collect();
        out.push(CpuFit {
            software,
            class,
            coefficients: f.coefficients,
            points: rows.len(),
            cpus: cpus.len(),
        });
    }
    Ok(out)
}

/// What leaving each CPU out gave.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuTransfer {
    /// The CPUs of the data, by name.
    pub cpus: Vec<String>,
    /// Per held-out CPU and class.
    pub holdouts: Vec<Holdout>,
    /// Per class, every held-out kernel pooled.
    pub classes: Vec<Holdout>,
    /// Per class, the 90 % interval of predicted / measured (log) of a CPU outside the fit;
    /// keyed by the class's name ([`class_name`]) in JSON.
    #[serde(serialize_with = "by_class_name")]
    pub intervals: BTreeMap<Key, (f64, f64)>,
}

/// `intervals` keyed by the classes' names, as JSON keys are strings.
fn by_class_name<S: serde::Serializer>(
    intervals: &BTreeMap<Key, (f64, f64)>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    s.collect_map(intervals.iter().map(|(k, v)| (class_name(*k), v)))
}

/// A class's name in reports: its software, class and pass (`onednn conv-spatial forward`).
pub fn class_name(key: Key) -> String {
    format!("{} {}", key.0.name(), key.1)
}

fn quantile(values: &[f64], tau: f64) -> f64 {
    Data::new(values.to_vec()).quantile(tau)
}

/// The fit that times `p`: its op's class where fitted, else its kernel class's.
fn timing<'a>(fits: &'a [CpuFit], p: &CpuPoint) -> Option<&'a CpuFit> {
    let find = |class: CpuClass| {
        fits.iter()
            .find(|f| f.software == p.software && f.class == class)
    };
    find(p.class).or_else(|| find(p.class.pooled()))
}

/// Relative errors of `fits` on `points`, by software and kernel class (ops pooled).
fn errors(fits: &[CpuFit], points: &[&CpuPoint]) -> BTreeMap<Key, Vec<f64>> {
    let mut out: BTreeMap<Key, Vec<f64>> = BTreeMap::new();
    for p in points {
        if let Some(f) = timing(fits, p) {
            let t = f.time(&p.x);
            if t > 0.0 {
                out.entry((p.software, p.class.pooled()))
                    .or_default()
                    .push(t / p.y - 1.0);
            }
        }
    }
    out
}

/// Relative errors `errors` of `what` on `cpu` as a row: median and 90th percentile of their
/// size, their median, no interval.
pub fn errors_row(cpu: &str, what: String, errors: &[f64]) -> Holdout {
    let abs: Vec<f64> = errors.iter().map(|r| r.abs()).collect();
    Holdout {
        device: cpu.to_owned(),
        class: what,
        points: errors.len(),
        median_abs_rel_error: quantile(&abs, 0.5),
        p90_abs_rel_error: quantile(&abs, 0.9),
        bias: quantile(errors, 0.5),
        coverage_90: f64::NAN,
    }
}

fn holdout(cpu: &str, key: Key, errors: &[f64], interval: Option<(f64, f64)>) -> Holdout {
    let abs: Vec<f64> = errors.iter().map(|r| r.abs()).collect();
    Holdout {
        device: cpu.to_owned(),
        class: class_name(key),
        points: errors.len(),
        median_abs_rel_error: quantile(&abs, 0.5),
        p90_abs_rel_error: quantile(&abs, 0.9),
        bias: quantile(errors, 0.5),
        coverage_90: interval.map_or(f64::NAN, |(lo, hi)| {
            let inside = errors
                .iter()
                .filter(|r| (lo..=hi).contains(&(1.0 + **r).ln()))
                .count();
            inside as f64 / errors.len() as f64
        }),
    }
}

/// The fits' residuals on `points`, per software and class (CPU `all`): how well the model
/// fits the kernels it was fitted on, not how it transfers.
pub fn residuals(fits: &[CpuFit], points: &[&CpuPoint]) -> Vec<Holdout> {
    errors(fits, points)
        .into_iter()
        .map(|(key, e)| holdout("all", key, &e, None))
        .collect()
}

/// A class's held-out kernels over every CPU: each CPU's log ratios, every error, and the
/// kernels inside and judged against an interval.
type Pooled = (Vec<Vec<f64>>, Vec<f64>, usize, usize);

/// The CPUs of `points`, by name, sorted, each once.
fn cpus_of(points: &[CpuPoint]) -> Vec<String> {
    points
        .iter()
        .map(|p| p.cpu.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Leave one CPU out: for each CPU, fit on the others and predict it, class by class where
/// the others have the class. Needs kernels of at least two CPUs.
pub fn leave_one_out(points: &[CpuPoint]) -> Result<CpuTransfer> {
    let cpus = cpus_of(points);
    if cpus.len() < 2 {
        return Err(Error::Input(format!(
            "leaving one CPU out needs kernels of at least 2 CPUs, not {}",
            cpus.len()
        )));
    }
    let on = |keep: &dyn Fn(&str) -> bool| -> Vec<&CpuPoint> {
        points.iter().filter(|p| keep(&p.cpu)).collect()
    };
    let mut holdouts = Vec::new();
    let mut pooled: BTreeMap<Key, Pooled> = BTreeMap::new();
    for held in &cpus {
        let fits = fit(&on(&|c| c != held))?;
        // Nested: the log ratios the training CPUs show when each is held out in turn.
        let mut calibration: BTreeMap<Key, Vec<Vec<f64>>> = BTreeMap::new();
        for inner in cpus.iter().filter(|c| *c != held) {
            let inner_fits = fit(&on(&|c| c != held && c != inner))?;
            for (key, e) in errors(&inner_fits, &on(&|c| c == inner)) {
                calibration
                    .entry(key)
                    .or_default()
                    .push(e.iter().map(|r| (1.0 + r).ln()).collect());
            }
        }
        for (key, e) in errors(&fits, &on(&|c| c == held)) {
            let interval = calibration.get(&key).and_then(|c| interval_90(c));
            let h = holdout(held, key, &e, interval);
            let all = pooled.entry(key).or_default();
            all.0.push(e.iter().map(|r| (1.0 + r).ln()).collect());
            all.1.extend(&e);
            if interval.is_some() {
                all.2 += (h.coverage_90 * e.len() as f64).round() as usize;
                all.3 += e.len();
            }
            holdouts.push(h);
        }
    }
    let mut classes = Vec::new();
    let mut intervals = BTreeMap::new();
    for (key, (by_cpu, errors, inside, judged)) in &pooled {
        let mut h = holdout("all", *key, errors, None);
        h.coverage_90 = if *judged > 0 {
            *inside as f64 / *judged as f64
        } else {
            f64::NAN
        };
        classes.push(h);
        if by_cpu.len() >= 2
            && let Some(i) = interval_90(by_cpu)
        {
            intervals.insert(*key, i);
        }
    }
    Ok(CpuTransfer {
        cpus,
        holdouts,
        classes,
        intervals,
    })
}

/// The model fitted on every CPU of `points`, with each class's held-out figures from
/// `held` where leaving CPUs out judged it.
pub fn model(
    points: &[CpuPoint],
    held: Option<&CpuTransfer>,
    data: Vec<String>,
    fitted_by: &str,
) -> Result<CpuModel> {
    let all: Vec<&CpuPoint> = points.iter().collect();
    let cpus = cpus_of(points);
    let classes = fit(&all)?
        .into_iter()
        .map(|f| {
            let key = (f.software, f.class);
            let pooled = held.and_then(|h| {
                h.classes
                    .iter()
                    .find(|c| c.class == class_name((f.software, f.class.pooled())))
            });
            CpuCoefficients {
                software: f.software,
                class: f.class.class,
                pass: f.class.pass,
                op: f.class.op.map(str::to_owned),
                features: f.class.features().iter().map(|s| (*s).to_owned()).collect(),
                coefficients: f.coefficients,
                points: f.points,
                cpus: f.cpus,
                holdout_median_abs_error: pooled.map(|c| c.median_abs_rel_error),
                holdout_interval_90: held
                    .and_then(|h| h.intervals.get(&(key.0, key.1.pooled())))
                    .map(|(lo, hi)| [(-hi).exp(), (-lo).exp()]),
            }
        })
        .collect();
    Ok(CpuModel {
        source: CpuModelSource {
            data,
            cpus,
            fitted_by: fitted_by.to_owned(),
        },
        classes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ridgeline_model::kernels::{KernelClass, gemm_kernel};

    /// Three CPUs whose GEMMs take exactly `c . x` of the features on each: leaving any one
    /// out predicts it exactly, as the features carry every difference between them.
    fn points(c: &[f64]) -> Vec<CpuPoint> {
        let cpus = [
            ("a", 2e9, 16.0, 8.0, 50e9),
            ("b", 3e9, 32.0, 32.0, 200e9),
            ("c", 2.5e9, 64.0, 96.0, 300e9),
        ];
        let mut out = Vec::new();
        for (name, clock, per_cycle, llc_mib, bw) in cpus {
            for threads in [1.0, 4.0, 16.0] {
                let d = CpuSpec {
                    threads,
                    clock_hz: clock,
                    matrix_per_cycle: per_cycle,
                    vector_per_cycle: per_cycle,
                    llc_bytes: llc_mib * 1048576.0,
                    bandwidth: bw,
                };
                for n in [64.0, 256.0, 1024.0, 4096.0] {
                    for k in [64.0, 1024.0] {
                        let kernel =
                            gemm_kernel(KernelClass::Gemm, KernelPass::Forward, n, n, k, 1.0);
                        let x = cpu::features(&kernel, 4, &d);
                        let y = c.iter().zip(&x).map(|(a, b)| a * b).sum();
                        out.push(CpuPoint {
                            cpu: name.into(),
                            software: Software::Ridgeline,
                            class: CpuClass::of(&kernel),
                            threads: threads as u32,
                            x,
                            y,
                        });
                    }
                }
            }
        }
        out
    }

    #[test]
    fn leaving_a_cpu_out_predicts_it_from_its_figures_alone() {
        let truth = [2e-6, 1e-6, 1.5, 0.8, 0.5, 0.0, 1.2];
        let p = points(&truth);
        let t = leave_one_out(&p).unwrap();
        assert_eq!(t.cpus, ["a", "b", "c"]);
        let all = &t.classes[0];
        assert_eq!(all.class, "ridgeline gemm forward");
        assert!(all.median_abs_rel_error < 1e-6, "{all:?}");
        let m = model(&p, Some(&t), vec!["synthetic".into()], "test").unwrap();
        let c = &m.classes[0];
        for (a, b) in c.coefficients.iter().zip(truth) {
            assert!((a - b).abs() <= 1e-6 * b + 1e-12, "{:?}", c.coefficients);
        }
        assert_eq!((c.points, c.cpus), (p.len(), 3));
        assert!(c.holdout_median_abs_error.unwrap() < 1e-6);
    }

    #[test]
    fn a_published_sets_cpu_kernels_are_points_at_its_threads_and_its_gpus_are_not() {
        use crate::dataset::{PublishedGemm, Source};
        let gemm = |device: &str, m: u64| PublishedGemm {
            device: device.into(),
            precision: RecordPrecision::Fp32,
            m,
            n: 64,
            k: 64,
            a_transpose: 0,
            b_transpose: 0,
            latency_s: 1e-4,
            threads: None,
        };
        let mut set = PublishedSet {
            source: Source {
                threads: Some(8),
                ..Source::default()
            },
            gemm: vec![gemm("some-cpu", 64), gemm("some-gpu", 128)],
            conv: Vec::new(),
        };
        let d = CpuSpec {
            threads: 1.0,
            clock_hz: 2e9,
            matrix_per_cycle: 32.0,
            vector_per_cycle: 32.0,
            llc_bytes: 1e6,
            bandwidth: 1e11,
        };
        let spec = |name: &str, threads: u32, _: Precision| {
            (name == "some-cpu").then_some(CpuSpec {
                threads: f64::from(threads),
                ..d
            })
        };
        let points = published_points(&set, &spec).unwrap();
        assert_eq!(points.len(), 1);
        let p = &points[0];
        assert_eq!(
            (p.cpu.as_str(), p.threads, p.software),
            ("some-cpu", 8, Software::Onednn)
        );
        assert_eq!(p.y, 1e-4);
        assert_eq!(p.x[1], 3.0, "log2 of 8 threads");
        // A row's own threads come before the set's.
        set.gemm[0].threads = Some(2);
        assert_eq!(published_points(&set, &spec).unwrap()[0].threads, 2);
        // Without the threads, a CPU's kernels cannot be placed: the row and field are named.
        set.gemm[0].threads = None;
        set.source.threads = None;
        let e = published_points(&set, &spec).unwrap_err().to_string();
        assert!(
            e.contains("`threads` is missing") && e.contains("some-cpu"),
            "{e}"
        );
        // No thread at all is refused too.
        set.source.threads = Some(0);
        let e = published_points(&set, &spec).unwrap_err().to_string();
        assert!(e.contains("gemm.csv.gz: row 1: `threads` is 0"), "{e}");
        // A CPU's kernel in another format than FP32 is refused by row.
        set.source.threads = Some(8);
        set.gemm[0].precision = RecordPrecision::Fp16;
        let e = published_points(&set, &spec).unwrap_err().to_string();
        assert!(e.contains("gemm.csv.gz: row 1: precision `fp16`"), "{e}");
        // A set of GPUs alone needs none.
        set.gemm.retain(|g| g.device == "some-gpu");
        assert!(published_points(&set, &spec).unwrap().is_empty());
    }

    #[test]
    fn one_cpu_is_not_left_out() {
        let p: Vec<CpuPoint> = points(&[1e-6, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0])
            .into_iter()
            .filter(|p| p.cpu == "a")
            .collect();
        let e = leave_one_out(&p).unwrap_err().to_string();
        assert!(e.contains("at least 2 CPUs, not 1"), "{e}");
        // It still fits, without held-out figures.
        let m = model(&p, None, vec![], "test").unwrap();
        assert_eq!(m.classes[0].holdout_interval_90, None);
    }
}
