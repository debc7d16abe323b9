//! Linear least squares on relative errors, with non-negative coefficients.
//!
//! Kernel time models are linear in their coefficients ([`ridgeline_model::kernels`]), and
//! times span five orders of magnitude, so the fit minimises the sum of squared *relative*
//! residuals: each row of the design matrix and the target are divided by the fitted time
//! (weighted least squares with weights `1 / f^2`, re-weighted until the fitted values
//! settle; see [`fit_relative`] for why not the measured time). A coefficient is a cost per unit of work
//! and cannot be negative; when the unconstrained solution has one, the most negative
//! feature is dropped and the fit repeated (an active-set method, Lawson and Hanson, *Solving
//! Least Squares Problems*, 1974, ch. 23), so every kept coefficient is positive. Columns
//! are scaled to unit maximum before the solve (SVD, nalgebra), which keeps features of
//! wildly different magnitudes (a constant and 10^12 FLOPs) well conditioned.
//!
//! Uncertainty: the standard error of each kept coefficient is
//! `sqrt(s^2 [(X^T W X)^-1]_ii)` with `s^2` the weighted residual variance on `n - p` degrees
//! of freedom; intervals use Student's t (statrs).

use nalgebra::{DMatrix, DVector};
use statrs::distribution::{ContinuousCDF, StudentsT};

use crate::error::{Error, Result};

/// Singular values below this fraction of the largest are treated as zero.
const SVD_EPS: f64 = 1e-12;

/// A fitted linear model.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    /// One coefficient per feature; zero for dropped features.
    pub coefficients: Vec<f64>,
    /// Standard errors; zero for dropped features, NaN without degrees of freedom.
    pub std_errors: Vec<f64>,
    /// Coefficient of determination of the fitted values on the measured ones.
    pub r_squared: f64,
    /// Root-mean-square relative residual.
    pub rms_rel_error: f64,
    /// Largest absolute relative residual.
    pub max_abs_rel_error: f64,
    /// Points fitted.
    pub points: usize,
    /// Residual degrees of freedom (`points - kept features`).
    pub dof: usize,
}

impl Fit {
    /// The model's value for `x`.
    pub fn predict(&self, x: &[f64]) -> f64 {
        self.coefficients.iter().zip(x).map(|(c, v)| c * v).sum()
    }

    /// Two-sided interval of coefficient `i` at `confidence` (Student's t on the residual
    /// degrees of freedom); `None` without degrees of freedom.
    pub fn interval(&self, i: usize, confidence: f64) -> Option<(f64, f64)> {
        if self.dof == 0 {
            return None;
        }
        let t = StudentsT::new(0.0, 1.0, self.dof as f64)
            .ok()?
            .inverse_cdf(0.5 + confidence / 2.0);
        let (c, se) = (self.coefficients[i], self.std_errors[i]);
        Some((c - t * se, c + t * se))
    }
}

/// Re-weighting rounds at most; the weights settle in a handful.
const MAX_ROUNDS: usize = 50;

/// The rounds stop when no fitted value moves by more than this fraction.
const SETTLED: f64 = 1e-9;

/// Fits `y ~ X c` (rows of `x`, all the same length) minimising relative residuals, with
/// `c >= 0`. Features that are zero in every row are left out (coefficient 0).
///
/// Residuals are taken relative to the *fitted* time, not the measured one: iteratively
/// re-weighted least squares with weights `1 / f^2`, starting from `1 / y^2` (the
/// quasi-likelihood of errors with a constant coefficient of variation: a Gamma GLM with
/// the identity link; McCullagh and Nelder, *Generalized Linear Models*, 2nd ed., 1989,
/// §8.3). Dividing by the measured time instead rewards fitting the fast samples: for a
/// constant it returns `sum(1/y) / sum(1/y^2)`, below the mean by about the squared
/// coefficient of variation (8 % at a 30 % spread), so every kernel would be predicted fast.
/// With weights from the fitted values the constant is the mean.
pub fn fit_relative(x: &[Vec<f64>], y: &[f64]) -> Result<Fit> {
    fit_scaled(x, y, MAX_ROUNDS)
}

/// Fits `y ~ X c` with `c >= 0` minimising residuals relative to the *measured* time,
/// `sum(((X c)_i - y_i) / y_i)^2`: [`fit_relative`]'s first round alone. It leans fast (see
/// there), and it is robust where a few kernels run far slower than the rest of their class
/// (a library's fallback for shapes its fast kernel does not take): a kernel predicted
/// faster than measured is off by at most -1 relative to its measured time, so those few do
/// not pull the fit, where residuals relative to the fitted time let them dominate it.
pub fn fit_relative_to_measured(x: &[Vec<f64>], y: &[f64]) -> Result<Fit> {
    fit_scaled(x, y, 0)
}

/// [`fit_relative`] with at most `rounds` re-weightings by the fitted times.
fn fit_scaled(x: &[Vec<f64>], y: &[f64], rounds: usize) -> Result<Fit> {
    let n = y.len();
    let p = x.first().map_or(0, Vec::len);
    if n == 0 || p == 0 || x.len() != n || x.iter().any(|r| r.len() != p) {
        return Err(Error::Fit(format!(
            "{n} times and {} feature rows of unequal length",
            x.len()
        )));
    }
    if let Some((i, v)) = y
        .iter()
        .enumerate()
        .find(|(_, v)| !(v.is_finite() && **v > 0.0))
    {
        return Err(Error::Fit(format!(
            "measured time {} of {n} is {v}, not a positive time: a record's samples run \
             out of range; measure it again",
            i + 1
        )));
    }
    let mut scale = y.to_vec();
    let mut solved = weighted(x, y, &scale)?;
    for _ in 0..rounds {
        let fitted = predict_all(x, &solved.coefficients);
        // A row fitted at zero (every feature it has was dropped) keeps its measured scale.
        let next: Vec<f64> = fitted
            .iter()
            .zip(y)
            .map(|(&f, &v)| if f > 0.0 { f } else { v })
            .collect();
        let moved = next
            .iter()
            .zip(&scale)
            .fold(0.0f64, |m, (a, b)| m.max((a / b - 1.0).abs()));
        scale = next;
        solved = weighted(x, y, &scale)?;
        if moved < SETTLED {
            break;
        }
    }
    let coefficients = solved.coefficients;
    let fitted = predict_all(x, &coefficients);
    let mean = y.iter().sum::<f64>() / n as f64;
    let ss_tot: f64 = y.iter().map(|v| (v - mean).powi(2)).sum();
    let ss_res: f64 = y.iter().zip(&fitted).map(|(v, f)| (v - f).powi(2)).sum();
    let rel: Vec<f64> = y.iter().zip(&fitted).map(|(v, f)| (f - v) / v).collect();
    Ok(Fit {
        coefficients,
        std_errors: solved.std_errors,
        r_squared: if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            1.0
        },
        rms_rel_error: (rel.iter().map(|r| r * r).sum::<f64>() / n as f64).sqrt(),
        max_abs_rel_error: rel.iter().fold(0.0, |m, r| m.max(r.abs())),
        points: n,
        dof: solved.dof,
    })
}

fn predict_all(x: &[Vec<f64>], coefficients: &[f64]) -> Vec<f64> {
    x.iter()
        .map(|r| r.iter().zip(coefficients).map(|(v, c)| v * c).sum())
        .collect()
}

/// One weighted solve: coefficients, their standard errors and the residual degrees of
/// freedom.
struct Solved {
    coefficients: Vec<f64>,
    std_errors: Vec<f64>,
    dof: usize,
}

/// Minimises `sum(((X c)_i - y_i) / s_i)^2` with `c >= 0` (active set).
fn weighted(x: &[Vec<f64>], y: &[f64], s: &[f64]) -> Result<Solved> {
    let n = y.len();
    let p = x[0].len();
    let mut active: Vec<usize> = (0..p).filter(|&j| x.iter().any(|r| r[j] != 0.0)).collect();
    loop {
        if active.is_empty() {
            return Err(Error::Fit("no feature has a positive coefficient".into()));
        }
        if n < active.len() {
            return Err(Error::Fit(format!(
                "{n} measurements for {} coefficients: measure more shapes",
                active.len()
            )));
        }
        let k = active.len();
        let mut a = DMatrix::<f64>::zeros(n, k);
        for (i, row) in x.iter().enumerate() {
            for (c, &j) in active.iter().enumerate() {
                a[(i, c)] = row[j] / s[i];
            }
        }
        let scale: Vec<f64> = (0..k)
            .map(|c| a.column(c).amax().max(f64::MIN_POSITIVE))
            .collect();
        for (c, s) in scale.iter().enumerate() {
            a.column_mut(c).scale_mut(1.0 / s);
        }
        let b = DVector::<f64>::from_iterator(n, y.iter().zip(s).map(|(v, s)| v / s));
        let svd = a.clone().svd(true, true);
        let max_sv = svd.singular_values.max();
        let sol = svd
            .solve(&b, SVD_EPS * max_sv)
            .map_err(|e| Error::Fit(e.to_owned()))?;
        let coef: Vec<f64> = (0..k).map(|c| sol[c] / scale[c]).collect();
        if let Some((worst, _)) = coef
            .iter()
            .enumerate()
            .filter(|(_, c)| **c <= 0.0)
            .min_by(|a, b| a.1.total_cmp(b.1))
        {
            active.remove(worst);
            continue;
        }
        let rss = (&b - &a * &sol).norm_squared();
        let dof = n - k;
        let mut std_errors = vec![0.0; p];
        let mut coefficients = vec![0.0; p];
        let inverse = (a.transpose() * &a).try_inverse();
        for (c, &j) in active.iter().enumerate() {
            coefficients[j] = coef[c];
            std_errors[j] = match (&inverse, dof) {
                (Some(inv), d) if d > 0 => (rss / d as f64 * inv[(c, c)]).sqrt() / scale[c],
                _ => f64::NAN,
            };
        }
        return Ok(Solved {
            coefficients,
            std_errors,
            dof,
        });
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    /// GEMM-shaped synthetic data: t = c0 + c1 F + c2 A + c3 B + c4 C, times (1 + noise).
    fn synthetic(truth: &[f64; 5], noise: f64, seed: u64) -> (Vec<Vec<f64>>, Vec<f64>) {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut x = Vec::new();
        let mut y = Vec::new();
        for _ in 0..80 {
            let m = f64::from(rng.random_range(8u32..4096));
            let n = f64::from(rng.random_range(8u32..4096));
            let k = f64::from(rng.random_range(8u32..4096));
            let row = vec![1.0, 2.0 * m * n * k, m * k, k * n, m * n];
            let t: f64 = row.iter().zip(truth).map(|(a, b)| a * b).sum();
            y.push(t * (1.0 + noise * (rng.random::<f64>() - 0.5) * 2.0));
            x.push(row);
        }
        (x, y)
    }

    #[test]
    fn recovers_known_parameters_without_noise() {
        let truth = [2e-5, 5e-12, 1e-10, 3e-10, 2e-10];
        let (x, y) = synthetic(&truth, 0.0, 1);
        let f = fit_relative(&x, &y).unwrap();
        for (c, t) in f.coefficients.iter().zip(&truth) {
            assert!((c - t).abs() < 1e-6 * t, "{c} vs {t}");
        }
        assert!(f.rms_rel_error < 1e-9 && f.r_squared > 1.0 - 1e-12);
    }

    #[test]
    fn recovers_known_parameters_within_their_intervals_under_noise() {
        let truth = [2e-5, 5e-12, 1e-10, 3e-10, 2e-10];
        let (x, y) = synthetic(&truth, 0.05, 2);
        let f = fit_relative(&x, &y).unwrap();
        // The FLOP rate, which dominates, to 2 %; every coefficient within its 99.9 % interval.
        assert!((f.coefficients[1] / truth[1] - 1.0).abs() < 0.02, "{f:?}");
        for (i, t) in truth.iter().enumerate() {
            let (lo, hi) = f.interval(i, 0.999).unwrap();
            assert!(
                lo <= *t && *t <= hi,
                "coefficient {i}: {t} not in [{lo}, {hi}]"
            );
        }
        assert!(f.rms_rel_error < 0.05 && f.dof == 75);
    }

    #[test]
    fn a_constant_is_fitted_at_the_mean_not_at_the_fast_samples() {
        // Weighting by the measured time would give sum(1/y) / sum(1/y^2) = 0.880 here.
        let y = [0.7, 1.0, 1.3];
        let x = vec![vec![1.0]; 3];
        let f = fit_relative(&x, &y).unwrap();
        assert!((f.coefficients[0] - 1.0).abs() < 1e-9, "{f:?}");
        // And a rate under 30 % multiplicative noise: unbiased within its interval, where
        // the measured-time weighting lands about 8 % low.
        let truth = [0.0, 5e-12, 0.0, 0.0, 0.0];
        let (x, y) = synthetic(&truth, 0.5, 4);
        let f = fit_relative(&x, &y).unwrap();
        let (lo, hi) = f.interval(1, 0.999).unwrap();
        assert!(lo <= truth[1] && truth[1] <= hi, "[{lo}, {hi}]");
        assert!((f.coefficients[1] / truth[1] - 1.0).abs() < 0.04, "{f:?}");
    }

    #[test]
    fn negative_costs_are_dropped() {
        // Data with no B cost, and a tiny negative pull on it from noise.
        let truth = [1e-5, 1e-11, 2e-10, 0.0, 1e-10];
        let (x, y) = synthetic(&truth, 0.02, 3);
        let f = fit_relative(&x, &y).unwrap();
        assert!(f.coefficients.iter().all(|c| *c >= 0.0), "{f:?}");
        assert!((f.coefficients[1] / truth[1] - 1.0).abs() < 0.02);
    }

    #[test]
    fn too_few_points_or_bad_times_are_errors() {
        let x = vec![vec![1.0, 2.0], vec![1.0, 3.0]];
        assert!(fit_relative(&x[..1], &[1.0]).is_err());
        assert!(fit_relative(&x, &[1.0, -1.0]).is_err());
        assert!(fit_relative(&x, &[1.0]).is_err());
        let f = fit_relative(&x, &[3.0, 4.0]).unwrap();
        assert!((f.coefficients[0] - 1.0).abs() < 1e-9 && (f.coefficients[1] - 1.0).abs() < 1e-9);
        assert!(f.interval(0, 0.95).is_none());
    }
}
