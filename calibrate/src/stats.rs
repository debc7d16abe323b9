//! Robust statistics on raw timing samples.
//!
//! Timings on a shared machine have a floor (the kernel's own time) and a long upper tail
//! (interrupts, other tenants, frequency changes), so the location used everywhere is the
//! median, the spread is the median absolute deviation and the interquartile range, and
//! outliers are labelled, not dropped, by Tukey's fences (Tukey, *Exploratory Data
//! Analysis*, 1977). The uncertainty of the median is a percentile bootstrap interval (Efron
//! and Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13). Quantiles are statrs's
//! (the median-unbiased definition, Hyndman and Fan 1996 type 8).

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use statrs::statistics::{Data, OrderStatistics, Statistics};

use crate::error::{Error, Result};

/// The median of timings that are not yet checked [`Samples`] (a record's samples as
/// printed or compared): the one median, defined where samples are taken.
pub use ridgeline_measure::protocol::median;

/// Tukey's inner-fence factor: beyond `k x IQR` outside the quartiles a sample is a mild
/// outlier.
pub const TUKEY_INNER: f64 = 1.5;
/// Tukey's outer-fence factor: beyond `3 x IQR` a sample is a severe outlier.
pub const TUKEY_OUTER: f64 = 3.0;
/// Bootstrap resamples for the confidence interval of the median. 2000 keeps the Monte Carlo
/// error of a 95 % percentile interval's end points well below the interval's width
/// (Efron and Tibshirani recommend at least 1000 for percentile intervals).
pub const BOOTSTRAP_RESAMPLES: usize = 2000;
/// Confidence level of intervals.
pub const CONFIDENCE: f64 = 0.95;
/// Seed of the bootstrap's generator: the same samples always give the same interval.
pub const BOOTSTRAP_SEED: u64 = 0x005E_ED0F_B007;
/// Scales the median absolute deviation to estimate a normal distribution's standard
/// deviation (1 / Phi^-1(3/4)).
pub const MAD_TO_SIGMA: f64 = 1.482_602_218_505_602;

/// Timing samples: at least one, each finite and positive (seconds per run).
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    values: Vec<f64>,
}

/// Where a sample lies relative to Tukey's fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Label {
    /// Within the inner fences.
    Inlier,
    /// Between the inner and outer fences, below.
    MildLow,
    /// Between the inner and outer fences, above.
    MildHigh,
    /// Beyond the lower outer fence.
    SevereLow,
    /// Beyond the upper outer fence.
    SevereHigh,
}

/// A two-sided interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// Confidence level.
    pub confidence: f64,
}

/// What a set of samples says, in one value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Median absolute deviation (unscaled).
    pub mad: f64,
    /// Interquartile range.
    pub iqr: f64,
    /// Smallest sample.
    pub min: f64,
    /// Bootstrap interval of the median.
    pub median_ci: Interval,
    /// Samples beyond the inner fences (mild or severe, either side).
    pub outliers: usize,
}

impl Samples {
    /// Checks the values: at least one, all finite and positive.
    pub fn new(values: Vec<f64>) -> Result<Samples> {
        if values.is_empty() {
            return Err(Error::Samples("no samples".into()));
        }
        if let Some((i, v)) = values
            .iter()
            .enumerate()
            .find(|(_, v)| !(v.is_finite() && **v > 0.0))
        {
            return Err(Error::Samples(format!(
                "sample {} is {v}; a time must be finite and positive",
                i + 1
            )));
        }
        Ok(Samples { values })
    }

    /// The values, in the order given.
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Always false: a sample set holds at least one value.
    pub fn is_empty(&self) -> bool {
        false
    }

    fn data(&self) -> Data<Vec<f64>> {
        Data::new(self.values.clone())
    }

    /// The median.
    pub fn median(&self) -> f64 {
        median(&self.values)
    }

    /// The smallest sample.
    pub fn min(&self) -> f64 {
        self.values.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// The arithmetic mean.
    pub fn mean(&self) -> f64 {
        self.values.as_slice().mean()
    }

    /// The quantile `tau` in [0, 1] (type 8).
    pub fn quantile(&self, tau: f64) -> f64 {
        self.data().quantile(tau)
    }

    /// The interquartile range.
    pub fn iqr(&self) -> f64 {
        self.data().interquartile_range()
    }

    /// The median absolute deviation from the median (unscaled; multiply by
    /// [`MAD_TO_SIGMA`] for a standard-deviation estimate).
    pub fn mad(&self) -> f64 {
        let m = self.median();
        Data::new(
            self.values
                .iter()
                .map(|v| (v - m).abs())
                .collect::<Vec<_>>(),
        )
        .median()
    }

    /// Tukey's fences: `(inner low, inner high, outer low, outer high)`.
    pub fn fences(&self) -> [f64; 4] {
        let mut d = self.data();
        let (q1, q3) = (d.lower_quartile(), d.upper_quartile());
        let iqr = q3 - q1;
        [
            q1 - TUKEY_INNER * iqr,
            q3 + TUKEY_INNER * iqr,
            q1 - TUKEY_OUTER * iqr,
            q3 + TUKEY_OUTER * iqr,
        ]
    }

    /// Each sample's label, in the order given.
    pub fn labels(&self) -> Vec<Label> {
        let [il, ih, ol, oh] = self.fences();
        self.values
            .iter()
            .map(|&v| {
                if v < ol {
                    Label::SevereLow
                } else if v < il {
                    Label::MildLow
                } else if v > oh {
                    Label::SevereHigh
                } else if v > ih {
                    Label::MildHigh
                } else {
                    Label::Inlier
                }
            })
            .collect()
    }

    /// Percentile bootstrap interval of the median at `confidence`, from `resamples`
    /// resamples drawn with a generator seeded by `seed`.
    pub fn median_interval(&self, resamples: usize, confidence: f64, seed: u64) -> Interval {
        let n = self.values.len();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut buf = vec![0.0; n];
        let medians: Vec<f64> = (0..resamples.max(1))
            .map(|_| {
                for b in &mut buf {
                    *b = self.values[rng.random_range(0..n)];
                }
                Data::new(buf.as_mut_slice()).median()
            })
            .collect();
        let mut d = Data::new(medians);
        let tail = (1.0 - confidence) / 2.0;
        Interval {
            low: d.quantile(tail),
            high: d.quantile(1.0 - tail),
            confidence,
        }
    }

    /// The summary with the default constants.
    pub fn summary(&self) -> Summary {
        Summary {
            n: self.len(),
            median: self.median(),
            mad: self.mad(),
            iqr: self.iqr(),
            min: self.min(),
            median_ci: self.median_interval(BOOTSTRAP_RESAMPLES, CONFIDENCE, BOOTSTRAP_SEED),
            outliers: self
                .labels()
                .iter()
                .filter(|l| **l != Label::Inlier)
                .count(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_raw_values_takes_the_middle_or_the_mean_of_two() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn invariants_are_checked() {
        assert!(Samples::new(vec![]).is_err());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let err = Samples::new(vec![1.0, bad]).unwrap_err().to_string();
            assert!(err.contains("sample 2"), "{err}");
        }
    }

    #[test]
    fn location_and_spread_match_hand_values() {
        let s = Samples::new(vec![3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]).unwrap();
        // Sorted: 1 1 2 3 4 5 6 9.
        assert_eq!(s.median(), 3.5);
        assert_eq!(s.mean(), 31.0 / 8.0);
        assert_eq!(s.min(), 1.0);
        // |x - 3.5|: 0.5 2.5 0.5 2.5 1.5 5.5 1.5 2.5 -> sorted 0.5 0.5 1.5 1.5 2.5 2.5 2.5 5.5.
        assert_eq!(s.mad(), 2.0);
        // Type 8, n = 8: h = (8 + 1/3) tau + 1/3. tau = 1/4: h = 2.41667, x2 + 0.41667 (x3 - x2)
        // = 1 + 0.41667 = 1.41667; tau = 3/4: h = 6.58333, x6 + 0.58333 (x7 - x6) = 5.58333.
        let q1 = 1.0 + 5.0 / 12.0;
        let q3 = 5.0 + 7.0 / 12.0;
        assert!((s.quantile(0.25) - q1).abs() < 1e-12);
        assert!((s.iqr() - (q3 - q1)).abs() < 1e-12);
    }

    #[test]
    fn tukey_labels() {
        // 1..=9, 15, 40 (type 8, n = 11): quartiles 3.1667 and 8.8333, IQR 5.6667; upper
        // fences 17.3333 (inner) and 25.8333 (outer).
        let mut v: Vec<f64> = (1..=9).map(f64::from).collect();
        v.push(15.0);
        v.push(40.0);
        let s = Samples::new(v).unwrap();
        let labels = s.labels();
        assert!(labels[..9].iter().all(|l| *l == Label::Inlier));
        assert_eq!(
            labels[9],
            Label::Inlier,
            "15 within the inner fence of this set"
        );
        assert_eq!(labels[10], Label::SevereHigh);
        let s = Samples::new(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 17.0]).unwrap();
        // Quartiles 2.9167 and 8.0833, IQR 5.1667: upper fences 15.8333 and 23.5833.
        assert_eq!(*s.labels().last().unwrap(), Label::MildHigh);
        assert_eq!(s.summary().outliers, 1);
    }

    #[test]
    fn bootstrap_interval_brackets_the_median_and_is_reproducible() {
        let v: Vec<f64> = (0..50).map(|i| 1.0 + 0.01 * f64::from(i % 7)).collect();
        let s = Samples::new(v).unwrap();
        let a = s.median_interval(BOOTSTRAP_RESAMPLES, CONFIDENCE, 7);
        let b = s.median_interval(BOOTSTRAP_RESAMPLES, CONFIDENCE, 7);
        assert_eq!(a, b);
        assert!(a.low <= s.median() && s.median() <= a.high, "{a:?}");
        assert!(a.high - a.low < 0.07);
        let one = Samples::new(vec![2.0]).unwrap().summary();
        assert_eq!((one.median_ci.low, one.median_ci.high), (2.0, 2.0));
    }
}
