//! Fitting a calibrated profile from micro-kernel records.
//!
//! Only micro-kernel records are used — `gemm`, `conv`, `op` and `stream` — never the
//! `workload-*` records of full training steps: those are what validation checks the
//! profile against. Each record becomes one point, its time the median of its samples
//! ([`crate::stats`]). Records are taken at one thread count (the largest present unless
//! another is asked for) and one device.
//!
//! - GEMM records fit the `gemm` class, which times every pass of dense layers.
//! - Convolution records fit the pointwise, spatial and depthwise classes per pass, with the
//!   class the backend dispatches each shape to ([`ridgeline_model::kernels::ConvShape`]).
//! - Op records fit the pooling, norm and element-wise classes per pass, from the FLOPs and
//!   bytes the records carry (the model's counts) — each class as a whole, for ops the
//!   records lack, and each op kind on its own (`t = c0 + c2 bytes`; within one kind FLOPs
//!   are proportional to bytes), which a layer of that kind uses first.
//! - STREAM records give the sustained bandwidth of each memory level: records whose working
//!   set fits L1, fits the last-level cache, or is more than twice its size, each fitted as
//!   `t = t0 + bytes / bandwidth`. The cache sizes are this machine's (sysfs), so calibrate
//!   on the machine that measured.
//! - Ceilings: the fastest GEMM and the fastest convolution per precision.

use std::collections::BTreeMap;

use ridgeline_measure::host::Caches;
use ridgeline_measure::record::{self, Measured};
use ridgeline_measure::{Pass, Record, RecordKind};
use ridgeline_model::kernels::{Kernel, KernelClass, KernelPass, linear_kernels, vector_kernel};
use ridgeline_model::profile::{
    Ceiling, KernelFit, LevelBandwidth, PROFILE_SCHEMA_VERSION, Profile, Provenance, SourceFile,
    Term,
};

use crate::error::{Error, Result};
use crate::fit::{Fit, fit_relative};
use crate::records::{RecordFile, both_gradients, conv_kernels, record_error, record_kernel};
use crate::stats::Samples;

/// What to calibrate.
#[derive(Debug, Clone)]
pub struct Options {
    /// The datasheet system the profile overlays.
    pub system: String,
    /// Thread count to take records at; the largest present when `None`.
    pub threads: Option<usize>,
    /// When the profile is made (RFC 3339).
    pub created: String,
    /// Which level MPI ping-pong records describe.
    pub comm_level: crate::loggp::LevelChoice,
}

/// One fitted class, before it becomes a profile's [`KernelFit`].
struct ClassFit {
    class: KernelClass,
    pass: KernelPass,
    op: Option<String>,
    precision: String,
    fit: Fit,
}

/// A profile and what went into it.
#[derive(Debug, Clone)]
pub struct Calibration {
    /// The profile: its `kernels` are the fits, each feature's term named.
    pub profile: Profile,
    /// Classes with too few points to fit, and why.
    pub skipped: Vec<String>,
}

/// The kernels of an op record: a vector op's one kernel; a linear layer's GEMMs (its
/// backward call, both gradients, as a convolution's: each gradient's fit gets the sum of the
/// two kernels' features); none for other matrix ops.
fn op_kernels(file: &str, r: &Record, s: &record::OpShape) -> Result<Vec<Kernel>> {
    if s.op.op == "linear" {
        let Some(out) =
            s.op.params
                .get("out_features")
                .and_then(serde_json::Value::as_u64)
                .filter(|&o| o > 0)
        else {
            return Err(record_error(
                file,
                r,
                "a linear op without a positive `out_features`",
            ));
        };
        let out = usize::try_from(out).unwrap_or(usize::MAX);
        let batch = s.batch as f64;
        return Ok(match s.pass {
            Pass::Forward => linear_kernels(&s.input, out, batch, false, false),
            Pass::Backward => {
                let mut k = linear_kernels(&s.input, out, batch, true, true);
                let filter = k.pop().unwrap_or_else(|| unreachable!("three kernels"));
                let data = k.pop().unwrap_or_else(|| unreachable!("three kernels"));
                both_gradients(data, filter)
            }
        });
    }
    let pass = match s.pass {
        Pass::Forward => KernelPass::Forward,
        Pass::Backward => KernelPass::Backward,
    };
    Ok(vector_kernel(&s.op.op, pass, r.flops, r.bytes)
        .into_iter()
        .collect())
}

/// Feature rows and measured times of one fit.
type Points = (Vec<Vec<f64>>, Vec<f64>);

/// What one fit covers: class, pass, precision, and a single op kind or the whole class.
type FitKey = (KernelClass, KernelPass, String, Option<&'static str>);

/// Fits a profile from `files` (micro-kernel records; workload records are ignored).
pub fn calibrate(files: &[RecordFile], options: &Options) -> Result<Calibration> {
    let micro = |r: &&Record| r.kind().is_micro_kernel();
    let all: Vec<(&str, &Record)> = files
        .iter()
        .flat_map(|f| f.records.iter().filter(micro).map(|r| (f.path.as_str(), r)))
        .collect();
    let comm = crate::loggp::comm_levels(files, options.comm_level)?;
    let comm_used: Vec<(&str, &Record)> = files
        .iter()
        .flat_map(|f| {
            f.records
                .iter()
                .filter(|r| r.kind().is_comm())
                .map(|r| (f.path.as_str(), r))
        })
        .collect();
    if all.is_empty() && !comm.is_empty() {
        // Communication alone: LogGP per level, no kernels.
        let device = comm_used[0].1.device.to_string();
        let profile = Profile {
            schema_version: PROFILE_SCHEMA_VERSION,
            system: options.system.clone(),
            device,
            threads: 1,
            provenance: provenance(files, &comm_used, options),
            bandwidth: Vec::new(),
            ceilings: Vec::new(),
            kernels: Vec::new(),
            comm,
            sample_cv: None,
        };
        profile.check("calibrated profile")?;
        return Ok(Calibration {
            profile,
            skipped: Vec::new(),
        });
    }
    if all.is_empty() {
        return Err(Error::Input(format!(
            "no micro-kernel records (gemm, conv, op, stream) and no MPI ping-pong records in {}; run `ridgeline measure suite --out FILE` or `mpirun -np 2 ridgeline measure comm pingpong --out FILE` first",
            files
                .iter()
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let device = all[0].1.device;
    if let Some((file, r)) = all.iter().find(|(_, r)| r.device != device) {
        return Err(record_error(
            file,
            r,
            format!(
                "device `{}` differs from `{device}`: calibrate one device at a time",
                r.device
            ),
        ));
    }
    let threads = options
        .threads
        .unwrap_or_else(|| all.iter().map(|(_, r)| r.threads).max().unwrap_or(1));
    let used: Vec<(&str, &Record)> = all
        .into_iter()
        .filter(|(_, r)| r.threads == threads)
        .collect();
    if used.is_empty() {
        return Err(Error::Input(format!(
            "no micro-kernel records at {threads} threads"
        )));
    }

    let Gathered {
        points,
        stream,
        ceilings,
    } = gather(&used)?;
    let (fits, mut skipped) = fit_all(points);

    // GPU records carry the GPU (and its L2); CPU records are from this kind of machine.
    let gpu = used.iter().find_map(|(_, r)| r.env.gpu.as_ref());
    let levels = match gpu.and_then(|g| g.l2_bytes) {
        Some(l2) => vec![
            ("l2", Some(l2 as f64), (0.0, l2 as f64)),
            ("dram", None, (2.0 * l2 as f64, f64::INFINITY)),
        ],
        None => cpu_levels(Caches::detect()),
    };
    let (bandwidth, level_notes) = level_bandwidths(&stream, &levels)?;
    skipped.extend(level_notes);
    let sample_cv = sample_spread(&used);
    let mut used = used;
    used.extend(comm_used);
    let profile = Profile {
        schema_version: PROFILE_SCHEMA_VERSION,
        system: options.system.clone(),
        device: device.to_string(),
        threads,
        provenance: provenance(files, &used, options),
        comm,
        sample_cv,
        bandwidth,
        ceilings: ceilings
            .into_iter()
            .map(|((kind, precision), (rate, source))| Ceiling {
                kind,
                precision,
                tflops: rate / 1e12,
                source,
            })
            .collect(),
        kernels: fits
            .iter()
            .map(|f| KernelFit {
                class: f.class,
                pass: f.pass,
                op: f.op.clone(),
                precision: f.precision.clone(),
                terms: Term::for_class(f.class, &f.fit.coefficients, &f.fit.std_errors),
                r_squared: f.fit.r_squared,
                rms_rel_error: f.fit.rms_rel_error,
                max_abs_rel_error: f.fit.max_abs_rel_error,
                points: f.fit.points,
            })
            .collect(),
    };
    profile.check("calibrated profile")?;
    Ok(Calibration { profile, skipped })
}

/// What the micro-kernel records give a fit: points per (class, pass, precision, single op
/// kind or the whole class), the STREAM-like records' `(bytes, seconds)`, and the fastest
/// GEMM and convolution rate per precision with the record it came from.
struct Gathered {
    points: BTreeMap<FitKey, Points>,
    stream: Vec<(f64, f64)>,
    ceilings: BTreeMap<(String, String), (f64, String)>,
}

/// The points, bandwidth samples and ceilings of the `used` micro-kernel records.
fn gather(used: &[(&str, &Record)]) -> Result<Gathered> {
    let mut points: BTreeMap<FitKey, Points> = BTreeMap::new();
    let mut stream: Vec<(f64, f64)> = Vec::new();
    let mut ceilings: BTreeMap<(String, String), (f64, String)> = BTreeMap::new();
    for (file, r) in used {
        let t = Samples::new(r.samples_s.clone())
            .map_err(|e| record_error(file, r, e.to_string()))?
            .median();
        let kernels: Vec<Kernel> = match &r.measured {
            Measured::Gemm(_) => {
                let Some(k) = record_kernel(file, r)? else {
                    continue;
                };
                // A GEMM micro-kernel calibrates every pass of dense layers.
                [
                    KernelPass::Forward,
                    KernelPass::BackwardData,
                    KernelPass::BackwardFilter,
                ]
                .into_iter()
                .map(|pass| Kernel {
                    class: k.class,
                    pass,
                    op: None,
                    x: k.x,
                    conv: None,
                })
                .collect()
            }
            Measured::Conv(c) => conv_kernels(file, r, c)?,
            Measured::Op(o) => op_kernels(file, r, o)?,
            _ => {
                stream.push((r.bytes, t));
                continue;
            }
        };
        if matches!(r.kind(), RecordKind::Gemm | RecordKind::Conv) && r.flops > 0.0 {
            let rate = r.flops / t;
            let entry = ceilings
                .entry((r.kind().name().to_owned(), r.precision.to_string()))
                .or_insert((0.0, String::new()));
            if rate > entry.0 {
                *entry = (rate, format!("{file}: record `{}`", r.id));
            }
        }
        for k in kernels {
            // A matrix op's own kernels (a linear layer's) fit its op alone: the class's fit
            // stays the GEMM micro-kernels'.
            let class_fit = (!k.class.is_matrix() || k.op.is_none()).then_some(None);
            for op in class_fit.into_iter().chain(k.op.map(Some)) {
                let e = points
                    .entry((k.class, k.pass, r.precision.to_string(), op))
                    .or_default();
                e.0.push(k.x.to_vec());
                e.1.push(t);
            }
        }
    }

    Ok(Gathered {
        points,
        stream,
        ceilings,
    })
}

/// Every fit of `points`, and a note for each that could not be fitted.
fn fit_all(points: BTreeMap<FitKey, Points>) -> (Vec<ClassFit>, Vec<String>) {
    let mut fits = Vec::new();
    let mut skipped = Vec::new();
    for ((class, pass, precision, op), (mut x, y)) in points {
        if op.is_some() {
            // Within one vector op kind FLOPs are proportional to bytes: fit a fixed cost and
            // the bytes (the bytes alone from a single shape). A linear layer runs one
            // product per sample, each streaming the weights: a fixed cost, the FLOPs and
            // the weights read per product (the FLOPs alone from fewer than three points).
            let keep: &[usize] = match (class.is_matrix(), y.len()) {
                (true, n) if n >= 3 => &[0, 1, 3],
                (true, _) => &[1],
                (false, n) if n >= 2 => &[0, 2],
                (false, _) => &[2],
            };
            for row in &mut x {
                for (j, v) in row.iter_mut().enumerate() {
                    if !keep.contains(&j) {
                        *v = 0.0;
                    }
                }
            }
        }
        let name = op.unwrap_or(class.name());
        match fit_relative(&x, &y) {
            Ok(fit) => fits.push(ClassFit {
                class,
                pass,
                op: op.map(str::to_owned),
                precision,
                fit,
            }),
            Err(e) => skipped.push(format!("{name} {} {precision}: {e}", pass.name())),
        }
    }

    (fits, skipped)
}

/// The median, over `records` with at least three samples, of each record's robust
/// coefficient of variation: its samples' MAD scaled to a standard deviation, over their
/// median. `None` without such records.
fn sample_spread(records: &[(&str, &Record)]) -> Option<f64> {
    let cvs: Vec<f64> = records
        .iter()
        .filter(|(_, r)| r.samples_s.len() >= 3)
        .filter_map(|(_, r)| Samples::new(r.samples_s.clone()).ok())
        .filter(|s| s.median() > 0.0)
        .map(|s| crate::stats::MAD_TO_SIGMA * s.mad() / s.median())
        .filter(|cv| cv.is_finite())
        .collect();
    (!cvs.is_empty()).then(|| crate::stats::median(&cvs))
}

/// Where the `used` records of `files` come from.
fn provenance(files: &[RecordFile], used: &[(&str, &Record)], options: &Options) -> Provenance {
    let env = &used[0].1.env;
    let mut stamps: Vec<&str> = used.iter().map(|(_, r)| r.env.timestamp.as_str()).collect();
    stamps.sort_unstable();
    Provenance {
        created: options.created.clone(),
        ridgeline_version: env!("CARGO_PKG_VERSION").to_owned(),
        host: env.host.clone(),
        device_model: env
            .gpu
            .as_ref()
            .map_or_else(|| env.cpu_model.clone(), |g| g.name.clone()),
        files: files
            .iter()
            .map(|f| SourceFile {
                path: f.path.clone(),
                records: used.iter().filter(|(p, _)| *p == f.path).count(),
            })
            .collect(),
        measured_from: stamps.first().map_or_else(String::new, |s| (*s).to_owned()),
        measured_to: stamps.last().map_or_else(String::new, |s| (*s).to_owned()),
    }
}

/// A memory level: its name, the largest working set it serves, and the working sets
/// fitted to it (above, at most).
type Level = (&'static str, Option<f64>, (f64, f64));

/// A CPU's levels: L1, last-level cache, DRAM (past twice the last level).
fn cpu_levels(caches: Caches) -> Vec<Level> {
    let (l1, llc) = (caches.l1d as f64, caches.llc as f64);
    vec![
        ("l1", Some(l1), (0.0, l1)),
        ("llc", Some(llc), (l1, llc)),
        ("dram", None, (2.0 * llc, f64::INFINITY)),
    ]
}

/// Sustained bandwidth per level from STREAM `(bytes, seconds)` points, and a line for each
/// level left without one.
///
/// Each level fits `t = c0 + bytes / bandwidth`. Where the points do not grow with their
/// bytes (a machine busy with other work while they ran) the fixed cost takes the whole time
/// and the level would have no bandwidth: it is then fitted through the origin, `t = bytes /
/// bandwidth`, and the line says so.
fn level_bandwidths(
    points: &[(f64, f64)],
    levels: &[Level],
) -> Result<(Vec<LevelBandwidth>, Vec<String>)> {
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for &(level, max, (low, high)) in levels {
        let (x, y): (Vec<Vec<f64>>, Vec<f64>) = points
            .iter()
            .filter(|(b, _)| *b > low && *b <= high)
            .map(|&(b, t)| (vec![1.0, b], t))
            .unzip();
        if x.len() < 3 {
            if !points.is_empty() {
                let range = if high.is_finite() {
                    format!("from {} to {}", kib(low), kib(high))
                } else {
                    format!("above {}", kib(low))
                };
                notes.push(format!(
                    "{level} bandwidth: {} STREAM points with a working set {range}, 3 needed; \
                     measure stream at sizes in that range",
                    x.len(),
                ));
            }
            continue;
        }
        let fit = fit_relative(&x, &y)?;
        let (per_byte, std_error) = if fit.coefficients[1] > 0.0 {
            (fit.coefficients[1], fit.std_errors[1])
        } else {
            let bytes: Vec<Vec<f64>> = x.iter().map(|r| vec![r[1]]).collect();
            let origin = fit_relative(&bytes, &y)?;
            notes.push(format!(
                "{level} bandwidth: its {} STREAM times do not grow with their bytes (a busy \
                 machine?), so it is fitted through the origin, without a fixed cost; measure \
                 stream again on a quiet machine",
                y.len()
            ));
            (origin.coefficients[0], origin.std_errors[0])
        };
        out.push(LevelBandwidth {
            level: level.to_owned(),
            max_working_set_bytes: max,
            bandwidth_gbs: 1.0 / per_byte / 1e9,
            std_error_gbs: std_error / (per_byte * per_byte) / 1e9,
            points: fit.points,
        });
    }
    Ok((out, notes))
}

/// `bytes` in KiB, as a working set is named in a message.
fn kib(bytes: f64) -> String {
    format!("{:.0} KiB", bytes / 1024.0)
}

#[cfg(test)]
mod tests {
    use ridgeline_measure::Env;
    use serde_json::json;

    use super::*;
    use ridgeline_model::kernels::gemm_kernel;

    fn record(kind: &str, shape: serde_json::Value, t: f64, flops: f64, bytes: f64) -> Record {
        Record::new(
            serde_json::from_value(json!({ "kind": kind, "shape": shape })).unwrap(),
            ridgeline_measure::RecordPrecision::Fp32,
            ridgeline_measure::Device::Cpu,
            2,
            vec![t * 1.01, t, t * 0.99, t, t * 1.2],
            flops,
            bytes,
            Env::capture(),
        )
    }

    /// A triad over three arrays of `bytes` in all.
    fn triad(bytes: f64) -> serde_json::Value {
        let elements = (bytes / 24.0) as u64;
        json!({ "kernel": "triad", "elements": elements, "array_bytes": elements * 8 })
    }

    /// The profile `calibrate` fits from `records` (one file) over `system`.
    fn calibrated(path: &str, system: &str, records: Vec<Record>) -> Profile {
        calibrate(
            &[RecordFile {
                path: path.into(),
                records,
            }],
            &Options {
                system: system.into(),
                threads: None,
                created: "now".into(),
                comm_level: crate::loggp::LevelChoice::Auto,
            },
        )
        .unwrap()
        .profile
    }

    /// Linear-layer op records fit the `linear` op alone (fixed, FLOPs, weights per
    /// product), which then times a step's linear layers; the GEMM class keeps its own fit.
    #[test]
    fn linear_layers_are_timed_by_their_own_measurements() {
        let truth = [2e-4, 5e-12, 0.0, 4e-10, 0.0];
        let time = |x: &[f64; 5]| truth.iter().zip(x).map(|(c, v)| c * v).sum::<f64>();
        let mut records = Vec::new();
        let gemms = [
            (64, 64, 64),
            (512, 512, 512),
            (64, 4096, 1024),
            (4096, 64, 256),
            (2048, 2048, 64),
            (256, 3136, 64),
        ];
        for (m, n, k) in gemms {
            let f = 2.0 * f64::from(m) * f64::from(n) * f64::from(k);
            records.push(record(
                "gemm",
                json!({"m": m, "n": n, "k": k}),
                1e-6 + f / 100e9,
                f,
                0.0,
            ));
        }
        let shapes = [(768, 16, 2304, 1), (3072, 32, 768, 2), (768, 32, 50257, 2)];
        for &(c, positions, out, batch) in &shapes {
            for pass in ["forward", "backward"] {
                let kernels = linear_kernels(
                    &[c, positions],
                    out,
                    f64::from(batch),
                    pass == "backward",
                    pass == "backward",
                );
                // The backward call runs both gradients (the kernels after the forward).
                let passes = if pass == "backward" {
                    &kernels[1..]
                } else {
                    &kernels[..]
                };
                let t: f64 = passes.iter().map(|k| time(&k.x)).sum();
                let shape = json!({
                    "op": {"op": "linear", "out_features": out, "bias": true, "tied": false},
                    "input": [c, positions], "batch": batch, "pass": pass,
                });
                records.push(record("op", shape, t, 1.0, 1.0));
            }
        }
        let p = calibrated("runs.jsonl", "local", records);
        let linear = |pass| {
            p.kernels
                .iter()
                .find(|k| k.op.as_deref() == Some("linear") && k.pass == pass)
                .unwrap_or_else(|| panic!("a linear {pass:?} fit"))
        };
        assert_eq!(linear(KernelPass::Forward).points, 3);
        assert_eq!(linear(KernelPass::BackwardFilter).points, 3);
        // A shape the records do not have, at another batch: its GEMMs are the op's.
        let layer = linear_kernels(&[3072, 32], 768, 4.0, true, true);
        for k in &layer {
            let got = p.time(k, "fp32").unwrap();
            assert!((got / time(&k.x) - 1.0).abs() < 1e-3, "{:?}: {got}", k.pass);
            assert!(std::ptr::eq(
                p.kernel_fit(k, "fp32").unwrap(),
                linear(k.pass)
            ));
        }
        // The GEMM class is fitted on the GEMM records alone.
        let gemm = p
            .fit(KernelClass::Gemm, KernelPass::Forward, "fp32")
            .unwrap();
        assert_eq!(gemm.points, 6);
    }

    /// STREAM times that shrink as the arrays grow (a busy machine) still give the level a
    /// bandwidth, fitted through the origin and said; a level without points is named.
    #[test]
    fn a_level_whose_times_do_not_grow_is_fitted_through_the_origin() {
        let levels: Vec<Level> = vec![
            ("l2", Some(1e6), (0.0, 1e6)),
            ("dram", None, (2e6, f64::INFINITY)),
        ];
        // 2 GB, 3 GB, 4 GB at 0.30, 0.28, 0.26 s: an affine fit puts it all in the fixed cost.
        let busy = [(2e9, 0.30), (3e9, 0.28), (4e9, 0.26)];
        let (bw, notes) = level_bandwidths(&busy, &levels).unwrap();
        assert_eq!(bw.len(), 1);
        assert_eq!(bw[0].level, "dram");
        // Through the origin, relative: between the slowest (6.7) and fastest (15.4 GB/s).
        let gbs = bw[0].bandwidth_gbs;
        assert!(gbs > 6.7 && gbs < 15.4, "{gbs}");
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with("l2 bandwidth: 0 STREAM points"),
            "{}",
            notes[0]
        );
        assert!(notes[0].contains("from 0 KiB to 977 KiB"), "{}", notes[0]);
        assert!(
            notes[1].contains("fitted through the origin"),
            "{}",
            notes[1]
        );
        // Times that grow keep the affine fit and no note.
        let quiet = [(2e9, 0.11), (3e9, 0.16), (4e9, 0.21)];
        let (bw, notes) = level_bandwidths(&quiet, &levels[1..]).unwrap();
        assert!((bw[0].bandwidth_gbs / 20.0 - 1.0).abs() < 1e-6, "{bw:?}");
        assert!(notes.is_empty(), "{notes:?}");
    }

    /// Records generated by a known GEMM model and bandwidth; the profile recovers both.
    #[test]
    fn recovers_a_synthetic_machine() {
        let truth = [3e-6, 1e-11, 2e-10, 1e-10, 3e-10];
        let mut records = Vec::new();
        for &(m, n, k) in &[
            (64, 64, 64),
            (128, 128, 128),
            (512, 512, 512),
            (1024, 1024, 1024),
            (64, 4096, 1024),
            (4096, 64, 256),
            (2048, 2048, 64),
            (256, 3136, 64),
        ] {
            let x = gemm_kernel(
                KernelClass::Gemm,
                KernelPass::Forward,
                f64::from(m),
                f64::from(n),
                f64::from(k),
                1.0,
            )
            .x;
            let t: f64 = x.iter().zip(&truth).map(|(a, b)| a * b).sum();
            records.push(record(
                "gemm",
                json!({"m": m, "n": n, "k": k}),
                t,
                x[1],
                0.0,
            ));
        }
        let caches = Caches::detect();
        for mult in [4.0, 8.0, 16.0] {
            let bytes = caches.llc as f64 * mult;
            records.push(record(
                "stream",
                triad(bytes),
                1e-5 + bytes / 20e9,
                0.0,
                bytes,
            ));
        }
        let c = calibrate(
            &[RecordFile {
                path: "runs.jsonl".into(),
                records,
            }],
            &Options {
                system: "local".into(),
                threads: None,
                created: "now".into(),
                comm_level: crate::loggp::LevelChoice::Auto,
            },
        )
        .unwrap();
        let gemm = c
            .profile
            .fit(KernelClass::Gemm, KernelPass::BackwardFilter, "fp32")
            .unwrap();
        for (term, want) in gemm.terms.iter().zip(&truth) {
            let got = term.seconds_per_unit.value();
            assert!((got / want - 1.0).abs() < 1e-6, "{got} vs {want}");
        }
        let dram = c.profile.dram_bandwidth().unwrap();
        assert!((dram / 20e9 - 1.0).abs() < 1e-6, "{dram}");
        assert_eq!(c.profile.provenance.files[0].records, 11);
        assert!(c.profile.ceiling("gemm", "fp32").unwrap() > 0.0);
    }

    /// GPU records (the CUDA backend's suite): levels split at the GPU's L2, the GPU named,
    /// every GEMM format fitted and its ceiling kept.
    #[test]
    fn gpu_records_calibrate_at_the_gpus_l2() {
        let l2: u64 = 50 << 20;
        let gpu = ridgeline_measure::GpuEnv {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            compute_capability: "9.0".into(),
            memory_bytes: 80 << 30,
            sm_clock_mhz: Some(1980),
            memory_clock_mhz: Some(2619),
            l2_bytes: Some(l2),
            driver_version: "13.0".into(),
            libraries: BTreeMap::new(),
        };
        let on_gpu = |mut r: Record, precision: &str| {
            r.device = ridgeline_measure::Device::Cuda(0);
            r.threads = 1;
            r.precision = precision.parse().unwrap();
            r.id = format!("{}|{precision}", r.id);
            r.env.gpu = Some(gpu.clone());
            r
        };
        let mut records = Vec::new();
        for (precision, rate) in [("fp32", 50e12), ("tf32", 400e12), ("fp16", 800e12)] {
            for n in [512u32, 1024, 2048, 4096, 8192] {
                let f = 2.0 * f64::from(n).powi(3);
                let shape = json!({"m": n, "n": n, "k": n});
                records.push(on_gpu(
                    record("gemm", shape, 5e-6 + f / rate, f, 0.0),
                    precision,
                ));
            }
        }
        // STREAM inside L2 at 10 TB/s, in HBM at 3 TB/s.
        for (bytes, bw) in [
            (4e6, 10e12),
            (8e6, 10e12),
            (16e6, 10e12),
            (2e8, 3e12),
            (4e8, 3e12),
            (8e8, 3e12),
        ] {
            let shape = triad(bytes);
            records.push(on_gpu(
                record("stream", shape, 2e-6 + bytes / bw, 0.0, bytes),
                "fp64",
            ));
        }
        let p = &calibrated("gpu.jsonl", "h100-sxm5-80gb", records);
        assert_eq!(p.device, "cuda:0");
        assert_eq!(p.threads, 1);
        assert_eq!(p.provenance.device_model, "NVIDIA H100 80GB HBM3");
        let levels: Vec<&str> = p.bandwidth.iter().map(|b| b.level.as_str()).collect();
        assert_eq!(levels, ["l2", "dram"]);
        let dram = p.dram_bandwidth().unwrap();
        assert!((dram / 3e12 - 1.0).abs() < 0.01, "{dram}");
        for (precision, rate) in [("fp32", 50e12), ("tf32", 400e12), ("fp16", 800e12)] {
            let ceiling = p.ceiling("gemm", precision).unwrap();
            assert!(
                ceiling < rate && ceiling > 0.9 * rate,
                "{precision}: {ceiling}"
            );
            assert!(
                p.fit(KernelClass::Gemm, KernelPass::Forward, precision)
                    .is_some()
            );
        }
    }

    /// GPU convolutions in fp32 and fp16 (mixed precision's, 4x the rate): each precision
    /// gets its own convolution fit, which `amp-fp16` predictions use.
    #[test]
    fn convolutions_are_fitted_per_precision() {
        let mut records = Vec::new();
        for (precision, rate) in [("fp32", 40e12), ("fp16", 160e12)] {
            for (n, c, size) in [
                (1, 16, 56),
                (2, 32, 56),
                (4, 64, 28),
                (8, 64, 56),
                (1, 256, 14),
                (16, 128, 28),
                (32, 64, 56),
                (2, 512, 7),
            ] {
                let shape = json!({
                    "source": "t", "n": n, "c_in": c, "c_out": c, "input": [size, size],
                    "kernel": [3, 3], "stride": [1, 1], "padding": [[1, 1], [1, 1]],
                    "dilation": [1, 1], "groups": 1, "bias": false, "pass": "forward"
                });
                let f = 2.0 * 9.0 * f64::from(n) * f64::from(c * c) * f64::from(size * size);
                let mut r = record("conv", shape, 4e-6 + f / rate, f, 0.0);
                r.precision = precision.parse().unwrap();
                r.id = format!("{}|{precision}", r.id);
                records.push(r);
            }
        }
        let p = &calibrated("conv.jsonl", "local", records);
        let rate = |precision: &str| {
            let f = p
                .fit(KernelClass::ConvSpatial, KernelPass::Forward, precision)
                .unwrap_or_else(|| panic!("no {precision} conv fit"));
            f.asymptotic_flop_rate().unwrap().value()
        };
        let (fp32, fp16) = (rate("fp32"), rate("fp16"));
        assert!((fp32 / 40e12 - 1.0).abs() < 0.05, "{fp32}");
        assert!((fp16 / 160e12 - 1.0).abs() < 0.05, "{fp16}");
        assert!(p.ceiling("conv", "fp16").unwrap() > 3.0 * p.ceiling("conv", "fp32").unwrap());
    }

    /// Two op kinds of one class at very different rates: each gets its own fit, which
    /// layers of that kind use, and the class a fit of both for kinds not measured.
    #[test]
    fn op_kinds_are_fitted_on_their_own() {
        let mut records = Vec::new();
        for (kind, per_byte) in [("max-pool", 1e-9), ("avg-pool", 1e-10)] {
            for mib in [1.0, 4.0, 16.0] {
                let bytes = mib * 1048576.0;
                records.push(record(
                    "op",
                    json!({"op": {"op": kind}, "input": [mib as usize], "batch": 1, "pass": "backward"}),
                    2e-6 + bytes * per_byte,
                    bytes / 8.0,
                    bytes,
                ));
            }
        }
        let p = &calibrated("ops.jsonl", "local", records);
        let class = p
            .fit(KernelClass::Pooling, KernelPass::Backward, "fp32")
            .unwrap();
        assert_eq!((class.points, class.op.as_deref()), (6, None));
        let bytes = 8.0 * 1048576.0;
        for (kind, per_byte) in [("max-pool", 1e-9), ("avg-pool", 1e-10)] {
            let k = vector_kernel(kind, KernelPass::Backward, bytes / 8.0, bytes).unwrap();
            let fit = p.kernel_fit(&k, "fp32").unwrap();
            assert_eq!((fit.op.as_deref(), fit.points), (Some(kind), 3));
            let want = 2e-6 + bytes * per_byte;
            let got = p.time(&k, "fp32").unwrap();
            assert!((got / want - 1.0).abs() < 1e-6, "{kind}: {got} vs {want}");
        }
        // A kind the records lack falls back to the class.
        let k = vector_kernel("global-avg-pool", KernelPass::Backward, 1.0, bytes).unwrap();
        assert!(p.kernel_fit(&k, "fp32").unwrap().op.is_none());
    }

    /// GPU ops on 16-bit activations (the GPU suite's mixed-precision ops) are fitted as
    /// `fp16`, apart from FP32 ones: the fits `amp-fp16` predictions read.
    #[test]
    fn op_records_are_fitted_per_precision() {
        let mut records = Vec::new();
        for (precision, per_byte) in [("fp32", 1e-9), ("fp16", 1e-9)] {
            for mib in [1.0, 4.0, 16.0] {
                // fp16 moves half the bytes of the same op: the same rate per byte.
                let bytes = mib * 1048576.0 * if precision == "fp16" { 0.5 } else { 1.0 };
                let mut r = record(
                    "op",
                    json!({"op": {"op": "relu"}, "input": [mib as usize], "batch": 1, "pass": "forward"}),
                    2e-6 + bytes * per_byte,
                    bytes / 8.0,
                    bytes,
                );
                r.precision = precision.parse().unwrap();
                r.id = format!("{}|{precision}", r.id);
                records.push(r);
            }
        }
        let p = &calibrated("ops.jsonl", "local", records);
        for precision in ["fp32", "fp16"] {
            let f = p
                .fit(KernelClass::Elementwise, KernelPass::Forward, precision)
                .unwrap_or_else(|| panic!("no {precision} element-wise fit"));
            assert_eq!(f.points, 3, "{precision}");
        }
        let k = vector_kernel("relu", KernelPass::Forward, 1.0, 1048576.0).unwrap();
        let (fp32, fp16) = (p.time(&k, "fp32").unwrap(), p.time(&k, "fp16").unwrap());
        assert!(
            (fp32 / (2e-6 + 1048576.0 * 1e-9) - 1.0).abs() < 1e-3,
            "{fp32}"
        );
        assert!((fp16 / fp32 - 1.0).abs() < 1e-3, "{fp16} vs {fp32}");
        assert!(p.time(&k, "bf16").is_none(), "no bf16 records, no bf16 fit");
    }

    #[test]
    fn no_micro_kernel_records_is_an_error() {
        let err = calibrate(
            &[RecordFile {
                path: "w.jsonl".into(),
                records: vec![],
            }],
            &Options {
                system: "local".into(),
                threads: None,
                created: "now".into(),
                comm_level: crate::loggp::LevelChoice::Auto,
            },
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("w.jsonl") && err.contains("measure suite"),
            "{err}"
        );
    }
}
