//! LogGP from MPI ping-pong records, by the Netgauge method (Hoefler, Lichei and Rehm,
//! *Low-Overhead LogGP Parameter Assessment for Modern Interconnection Networks*, IPDPS
//! 2007), and the measured costs the collective model adds to it.
//!
//! With `PRTT(n, d, s)` the round trip of `n` messages of `s` bytes sent `d` apart and one
//! answer (`ridgeline_measure::comm`), LogGP gives
//!
//! - `PRTT(1, 0, s) = 2 (L + 2o + (s-1) G)`,
//! - `PRTT(n, 0, s) = PRTT(1, 0, s) + (n-1)(g + (s-1) G)`: the train is paced by the gap,
//! - `PRTT(n, d, s) = PRTT(1, 0, s) + (n-1)(o + d)` for `d >= g + (s-1) G`: paced by the
//!   sender's overhead.
//!
//! So `g + (s-1) G` at each size comes from the trains, and a least-squares line over the
//! sizes gives `g` (intercept) and `G` (slope); `o(s)` comes from the delayed trains, and
//! LogGP's `o` is the intercept of its line (what grows with `s` is copying, LogGOP's `O`);
//! `L` is what the ping-pong line's intercept leaves after `2o`. Every line is fitted on
//! relative error with non-negative coefficients ([`crate::fit`]), so small messages count
//! as much as large ones, and comes with standard errors.
//!
//! A collective's step is an exchange — both ranks send and receive at once — which costs
//! more than a one-way message where the two directions share what moves the bytes (the
//! CPUs, for TCP over loopback and for shared memory). The measured exchange, and the
//! reduction kernel, are fitted as lines per size band ([`bands`]): breakpoints where MPI
//! changes protocol or copies fall out of a cache, chosen by the Bayesian information
//! criterion among segmentations with at least [`MIN_BAND_POINTS`] sizes per band.

use std::collections::BTreeMap;

use ridgeline_measure::record::{ExchangeShape, Extra, Measured, PrttShape, ReduceShape};
use ridgeline_model::collective::MAX_BANDS;
use ridgeline_model::profile::{BandFit, CommLevel, CommLevelName};

use crate::error::{Error, Result};
use crate::fit::fit_relative;
use crate::records::{RecordFile, record_error};
use crate::stats::Samples;

/// Fewest sizes in one band of a banded fit.
pub const MIN_BAND_POINTS: usize = 3;

/// Which level ping-pong records describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LevelChoice {
    /// By the hosts of the pair: one host is `node`, two are `network`.
    Auto,
    /// All of them are this level (e.g. TCP over loopback standing in for a network).
    Fixed(CommLevelName),
}

/// What one level's records hold, medians by size.
#[derive(Default)]
struct LevelPoints {
    /// `PRTT(1, 0, s)`.
    pingpong: BTreeMap<u64, f64>,
    /// `PRTT(n, 0, s)` and `n`.
    train: BTreeMap<u64, (f64, usize)>,
    /// `PRTT(n, d, s)`, `n` and `d`.
    delayed: BTreeMap<u64, (f64, usize, f64)>,
    exchange: Vec<(f64, f64)>,
    transport: String,
    hosts: Vec<String>,
}

/// The communication levels the records of `files` give (none without ping-pong records).
pub fn comm_levels(files: &[RecordFile], choice: LevelChoice) -> Result<Vec<CommLevel>> {
    let mut levels: BTreeMap<&'static str, (CommLevelName, LevelPoints)> = BTreeMap::new();
    let mut reduction = Vec::new();
    for f in files {
        for r in &f.records {
            let bytes = match &r.measured {
                Measured::CommPrtt(PrttShape { bytes, .. })
                | Measured::CommExchange(ExchangeShape { bytes, .. })
                | Measured::CommReduce(ReduceShape { bytes, .. }) => *bytes,
                _ => continue,
            };
            let t = Samples::new(r.samples_s.clone())
                .map_err(|e| record_error(&f.path, r, e.to_string()))?
                .median();
            if let Measured::CommReduce(_) = r.measured {
                reduction.push((bytes as f64, t));
                continue;
            }
            let extra = &r.extra;
            let level = match choice {
                LevelChoice::Fixed(l) => l,
                LevelChoice::Auto => match extra.same_host {
                    Some(true) => CommLevelName::Node,
                    Some(false) => CommLevelName::Network,
                    None => {
                        return Err(record_error(
                            &f.path,
                            r,
                            "has no `extra.same_host`: say which level it measured with \
                             --comm-level node or --comm-level network",
                        ));
                    }
                },
            };
            let (_, points) = levels
                .entry(level.name())
                .or_insert_with(|| (level, LevelPoints::default()));
            if points.transport.is_empty() {
                points.transport = transport(extra);
                points.hosts = extra.pair_hosts.clone();
            }
            let Measured::CommPrtt(PrttShape {
                messages: n,
                delayed,
                ..
            }) = r.measured
            else {
                points.exchange.push((bytes as f64, t));
                continue;
            };
            match (n, delayed) {
                (1, _) => {
                    points.pingpong.insert(bytes, t);
                }
                (_, false) => {
                    points.train.insert(bytes, (t, n));
                }
                (_, true) => {
                    let d = extra.delay_s.unwrap_or(0.0);
                    points.delayed.insert(bytes, (t, n, d));
                }
            }
        }
    }
    levels
        .into_values()
        .map(|(level, points)| fit_level(level, &points, &reduction))
        .collect()
}

/// "library; key=value ..." from a record's extra.
fn transport(extra: &Extra) -> String {
    let library = extra.mpi_library.as_deref().unwrap_or("unknown MPI");
    let settings: Vec<String> = extra
        .mpi_settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if settings.is_empty() {
        library.to_owned()
    } else {
        format!("{library}; {}", settings.join(" "))
    }
}

fn fit_level(level: CommLevelName, p: &LevelPoints, reduction: &[(f64, f64)]) -> Result<CommLevel> {
    let what = |m: &str| Error::Input(format!("{} level: {m}", level.name()));
    // g + (s-1) G from the trains.
    let mut x = Vec::new();
    let mut y = Vec::new();
    for (&s, &(tn, n)) in &p.train {
        if let Some(&t1) = p.pingpong.get(&s) {
            let per = (tn - t1) / (n as f64 - 1.0);
            if per > 0.0 {
                x.push(vec![1.0, s as f64 - 1.0]);
                y.push(per);
            }
        }
    }
    if y.len() < 2 {
        return Err(what(
            "needs message trains at 2 sizes or more (measure comm pingpong over a range of --sizes)",
        ));
    }
    let gap = fit_relative(&x, &y)?;
    // o(s) from the delayed trains.
    let mut x = Vec::new();
    let mut y = Vec::new();
    for (&s, &(td, n, d)) in &p.delayed {
        if let Some(&t1) = p.pingpong.get(&s) {
            let o = (td - t1) / (n as f64 - 1.0) - d;
            if o > 0.0 {
                x.push(vec![1.0, s as f64]);
                y.push(o);
            }
        }
    }
    let (o, o_se) = if y.len() >= 2 {
        let f = fit_relative(&x, &y)?;
        (f.coefficients[0], f.std_errors[0])
    } else {
        (0.0, f64::NAN)
    };
    // L + 2o from the ping-pong line, half a round trip.
    let x: Vec<Vec<f64>> = p
        .pingpong
        .keys()
        .map(|&s| vec![1.0, s as f64 - 1.0])
        .collect();
    let y: Vec<f64> = p.pingpong.values().map(|t| t / 2.0).collect();
    if y.len() < 2 {
        return Err(what("needs ping-pongs at 2 sizes or more"));
    }
    let pp = fit_relative(&x, &y)?;
    let latency = (pp.coefficients[0] - 2.0 * o).max(0.0);
    let latency_se = (pp.std_errors[0].powi(2) + 4.0 * o_se.powi(2)).sqrt();
    if p.exchange.len() < 2 {
        return Err(what("needs exchanges at 2 sizes or more"));
    }
    if reduction.len() < 2 {
        return Err(what(
            "needs the reduction kernel (comm-reduce records) at 2 sizes or more",
        ));
    }
    Ok(CommLevel {
        level,
        transport: p.transport.clone(),
        hosts: p.hosts.clone(),
        latency_s: latency,
        latency_se_s: latency_se,
        overhead_s: o,
        overhead_se_s: o_se,
        gap_s: gap.coefficients[0],
        gap_se_s: gap.std_errors[0],
        gap_per_byte_s: gap.coefficients[1],
        gap_per_byte_se_s: gap.std_errors[1],
        points: pp.points,
        max_abs_rel_error: pp.max_abs_rel_error,
        exchange: bands(&p.exchange)?,
        reduction: bands(reduction)?,
    })
}

/// Lines `t = a + b m` over bands of sizes: the segmentation of the sorted points into at
/// most [`MAX_BANDS`] bands of at least [`MIN_BAND_POINTS`] sizes (fewer points: one band)
/// that minimises the Bayesian information criterion `n ln(RSS / n) + 3 k ln(n)` (two
/// coefficients and a breakpoint per band), RSS on relative residuals. A band ends halfway
/// (geometrically) between its last size and the next band's first.
pub fn bands(points: &[(f64, f64)]) -> Result<Vec<BandFit>> {
    let mut pts = points.to_vec();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = pts.len();
    if n < 2 {
        return Err(Error::Fit(format!("{n} sizes: a line needs 2 or more")));
    }
    let fit = |i: usize, j: usize| -> Option<crate::fit::Fit> {
        let x: Vec<Vec<f64>> = pts[i..j].iter().map(|p| vec![1.0, p.0]).collect();
        let y: Vec<f64> = pts[i..j].iter().map(|p| p.1).collect();
        fit_relative(&x, &y).ok()
    };
    let rss = |f: &crate::fit::Fit| f.rms_rel_error.powi(2) * f.points as f64;
    let min = MIN_BAND_POINTS.min(n);
    // best[k][j]: least RSS of the first j points in k bands, and where the last starts.
    let mut best = vec![vec![(f64::INFINITY, 0usize); n + 1]; MAX_BANDS + 1];
    best[0][0] = (0.0, 0);
    for k in 1..=MAX_BANDS {
        for j in (k * min)..=n {
            for i in ((k - 1) * min)..=(j - min) {
                let (prev, _) = best[k - 1][i];
                if !prev.is_finite() {
                    continue;
                }
                if let Some(f) = fit(i, j) {
                    let total = prev + rss(&f);
                    if total < best[k][j].0 {
                        best[k][j] = (total, i);
                    }
                }
            }
        }
    }
    let nf = n as f64;
    let criterion = |k: usize| {
        let r = best[k][n].0;
        if r.is_finite() {
            nf * (r / nf).max(1e-12).ln() + 3.0 * k as f64 * nf.ln()
        } else {
            f64::INFINITY
        }
    };
    let k = (1..=MAX_BANDS)
        .filter(|&k| best[k][n].0.is_finite())
        .min_by(|&a, &b| criterion(a).total_cmp(&criterion(b)))
        .ok_or_else(|| Error::Fit("no line fits the sizes".into()))?;
    let mut cuts = vec![n];
    let mut j = n;
    for kk in (1..=k).rev() {
        j = best[kk][j].1;
        cuts.push(j);
    }
    cuts.reverse();
    let mut out = Vec::new();
    for (b, w) in cuts.windows(2).enumerate() {
        let f = fit(w[0], w[1]).ok_or_else(|| Error::Fit("a band does not fit".into()))?;
        let last = b + 1 == k;
        out.push(BandFit {
            max_bytes: (!last).then(|| (pts[w[1] - 1].0 * pts[w[1]].0).sqrt()),
            fixed_s: f.coefficients[0],
            per_byte_s: f.coefficients[1],
            fixed_se_s: f.std_errors[0],
            per_byte_se_s: f.std_errors[1],
            points: f.points,
            rms_rel_error: f.rms_rel_error,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_is_one_band_and_recovers_its_coefficients() {
        let pts: Vec<(f64, f64)> = (0..10)
            .map(|i| {
                let m = 4f64.powi(i);
                (m, 2e-6 + m * 1e-10)
            })
            .collect();
        let b = bands(&pts).unwrap();
        assert_eq!(b.len(), 1, "{b:?}");
        assert!((b[0].fixed_s - 2e-6).abs() < 1e-12);
        assert!((b[0].per_byte_s - 1e-10).abs() < 1e-16);
        assert_eq!(b[0].max_bytes, None);
    }

    #[test]
    fn a_protocol_switch_is_found() {
        // Eager below 64 KiB, a costlier rendezvous above it.
        let pts: Vec<(f64, f64)> = (0..14)
            .map(|i| {
                let m = 4f64.powi(i);
                let t = if m < 65536.0 {
                    1e-6 + m * 1e-10
                } else {
                    2e-5 + m * 3e-10
                };
                (m, t)
            })
            .collect();
        let b = bands(&pts).unwrap();
        assert_eq!(b.len(), 2, "{b:?}");
        let cut = b[0].max_bytes.unwrap();
        assert!(cut > 16384.0 && cut < 65536.0, "{cut}");
        assert!((b[1].per_byte_s - 3e-10).abs() < 1e-15);
    }

    #[test]
    fn netgauge_recovers_loggp() {
        // A synthetic machine: L = 3 us, o = 1 us, g = 2 us, G = 0.1 ns/B.
        let (l, o, g, gb) = (3e-6, 1e-6, 2e-6, 1e-10);
        let n = 8usize;
        let mut p = LevelPoints::default();
        for i in 0..10 {
            let s = 4u64.pow(i);
            let sf = s as f64;
            let t1 = 2.0 * (l + 2.0 * o + (sf - 1.0) * gb);
            p.pingpong.insert(s, t1);
            p.train
                .insert(s, (t1 + (n as f64 - 1.0) * (g + (sf - 1.0) * gb), n));
            p.delayed
                .insert(s, (t1 + (n as f64 - 1.0) * (o + t1), n, t1));
            p.exchange.push((sf, t1 / 2.0));
        }
        let reduction: Vec<(f64, f64)> = (0..5).map(|i| (4f64.powi(i), 1e-9)).collect();
        let c = fit_level(CommLevelName::Node, &p, &reduction).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-3 * b;
        assert!(close(c.latency_s, l), "L {}", c.latency_s);
        assert!(close(c.overhead_s, o), "o {}", c.overhead_s);
        assert!(close(c.gap_s, g), "g {}", c.gap_s);
        assert!(close(c.gap_per_byte_s, gb), "G {}", c.gap_per_byte_s);
    }
}
