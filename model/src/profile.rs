//! The calibrated profile: what measurements say a machine attains, overlaid on its
//! datasheet system (docs/ARCHITECTURE.md "Calibration and validation").
//!
//! A profile holds, for one device at one thread count, fitted time models of each kernel
//! class and pass ([`crate::kernels`]), the sustained bandwidth of each memory level, the
//! measured GEMM and convolution ceilings per precision, and where all of it came from.
//! `ridgeline-calibrate` writes it; everything that takes a system takes it too: a system
//! with a profile times each layer pass by its class's fitted model where the profile has
//! one, and by the roofline with the measured memory bandwidth where it has none.
//!
//! The file is TOML, `schema_version = 1`.

use serde::{Deserialize, Serialize};

use crate::collective::{Band, Banded, Fabric, LinkCost};
use crate::error::{Error, Result};
use crate::kernels::{FEATURES, Kernel, KernelClass, KernelPass};
use crate::precision::Precision;
use crate::units::{FlopRate, Seconds};

/// Largest fitted cost per unit of work a profile may hold, seconds: a fixed cost of 1000 s
/// or a second per FLOP or byte is beyond any real kernel, and larger values overflow.
pub const MAX_COEFFICIENT: f64 = 1e3;

/// The profile schema this build reads and writes.
pub const PROFILE_SCHEMA_VERSION: u32 = 1;

/// A calibrated profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Schema version.
    pub schema_version: u32,
    /// The datasheet system the profile overlays (a catalog name, `local`, or a file).
    pub system: String,
    /// The measured device (`cpu`, `cuda:0`).
    pub device: String,
    /// Threads the measurements ran on.
    pub threads: usize,
    /// Where the numbers come from.
    pub provenance: Provenance,
    /// Sustained bandwidth per memory level, smallest working sets first.
    #[serde(default)]
    pub bandwidth: Vec<LevelBandwidth>,
    /// Measured compute ceilings.
    #[serde(default)]
    pub ceilings: Vec<Ceiling>,
    /// Fitted kernel time models.
    #[serde(default)]
    pub kernels: Vec<KernelFit>,
    /// LogGP per communication level, from MPI ping-pong records.
    #[serde(default)]
    pub comm: Vec<CommLevel>,
    /// The spread of the measured samples: the median, over the micro-kernel records the
    /// profile was fitted on, of each record's robust coefficient of variation (the MAD
    /// scaled to a standard deviation, over the median). The step simulator's per-rank,
    /// per-layer variability where none is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_cv: Option<f64>,
}

/// A communication level: between ranks of one node (`node`) or of different nodes
/// (`network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommLevelName {
    /// Ranks on one node (shared memory).
    Node,
    /// Ranks on different nodes.
    Network,
}

impl CommLevelName {
    /// Its name in profiles and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CommLevelName::Node => "node",
            CommLevelName::Network => "network",
        }
    }
}

/// LogGP of one level, fitted from ping-pong records by the Netgauge method, with the
/// measured exchange step and reduction kernel the collective model uses
/// ([`crate::collective`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommLevel {
    /// The level.
    pub level: CommLevelName,
    /// The MPI library and transport settings the records were measured with.
    pub transport: String,
    /// Hosts of the pair of ranks measured.
    pub hosts: Vec<String>,
    /// `L`, seconds.
    pub latency_s: f64,
    /// Standard error of `L`.
    pub latency_se_s: f64,
    /// `o` (per message, on each side), seconds.
    pub overhead_s: f64,
    /// Standard error of `o`.
    pub overhead_se_s: f64,
    /// `g`, seconds.
    pub gap_s: f64,
    /// Standard error of `g`.
    pub gap_se_s: f64,
    /// `G`, seconds per byte.
    pub gap_per_byte_s: f64,
    /// Standard error of `G`.
    pub gap_per_byte_se_s: f64,
    /// Message sizes the LogGP fit used.
    pub points: usize,
    /// Largest relative error of the fitted round trips.
    pub max_abs_rel_error: f64,
    /// One exchange step (both ranks send and receive `m` bytes), per size band.
    pub exchange: Vec<BandFit>,
    /// The reduction kernel (`a += b` on FP32), per size band.
    pub reduction: Vec<BandFit>,
}

/// A cost `fixed_s + m per_byte_s` fitted over one band of sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BandFit {
    /// Largest size of the band, bytes (absent for the last band).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<f64>,
    /// Seconds at any size.
    pub fixed_s: f64,
    /// Seconds per byte.
    pub per_byte_s: f64,
    /// Standard error of `fixed_s`.
    pub fixed_se_s: f64,
    /// Standard error of `per_byte_s`.
    pub per_byte_se_s: f64,
    /// Sizes fitted.
    pub points: usize,
    /// Root-mean-square relative error of the fitted times.
    pub rms_rel_error: f64,
}

impl CommLevel {
    /// `band` as the collective model's bands; `None` if there are none or they are not
    /// in increasing order.
    fn banded(bands: &[BandFit]) -> Option<Banded> {
        let b: Vec<Band> = bands
            .iter()
            .map(|f| Band {
                max_bytes: f.max_bytes.unwrap_or(f64::INFINITY),
                fixed_s: f.fixed_s,
                per_byte_s: f.per_byte_s,
            })
            .collect();
        Banded::new(&b)
    }

    /// The level as a link of the collective model: LogGP, with the measured exchange.
    pub fn link(&self) -> LinkCost {
        LinkCost {
            alpha: self.latency_s + 2.0 * self.overhead_s,
            beta: self.gap_per_byte_s,
            g: self.gap_s,
            exchange: Self::banded(&self.exchange),
        }
    }

    /// The collective model's fabric for `ranks` ranks that all talk over this level:
    /// one node of `ranks` devices (`node`), or `ranks` nodes of one device each
    /// (`network`), with the measured reduction.
    pub fn fabric(&self, ranks: u32) -> Fabric {
        let link = self.link();
        let (k, n) = match self.level {
            CommLevelName::Node => (ranks, 1),
            CommLevelName::Network => (1, ranks),
        };
        Fabric {
            k,
            n,
            intra: (self.level == CommLevelName::Node).then_some(link),
            nic: (self.level == CommLevelName::Network).then_some(link),
            nics: 1,
            gamma: self.reduction.last().map_or(0.0, |b| b.per_byte_s),
            reduction: Self::banded(&self.reduction),
            latencies_known: true,
            call_latency: 0.0,
        }
    }
}

/// Which measurements a profile was fitted from, where and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// When the profile was made (RFC 3339).
    pub created: String,
    /// ridgeline version that made it.
    pub ridgeline_version: String,
    /// Host the records were measured on.
    pub host: String,
    /// CPU (or GPU) model of that host.
    pub device_model: String,
    /// Record files, with the records used from each.
    pub files: Vec<SourceFile>,
    /// Earliest record timestamp.
    pub measured_from: String,
    /// Latest record timestamp.
    pub measured_to: String,
}

/// A record file a profile was fitted from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceFile {
    /// Path as given.
    pub path: String,
    /// Records used from it.
    pub records: usize,
}

/// The sustained bandwidth of one memory level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelBandwidth {
    /// `l1`, `l2`, `llc`, `dram`.
    pub level: String,
    /// Largest working set this level serves (absent for DRAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_working_set_bytes: Option<f64>,
    /// Sustained bandwidth, GB/s.
    pub bandwidth_gbs: f64,
    /// Its standard error, GB/s.
    pub std_error_gbs: f64,
    /// Measurements fitted.
    pub points: usize,
}

/// A measured compute ceiling: the best sustained rate of a kernel family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ceiling {
    /// `gemm` or `conv`.
    pub kind: String,
    /// Number format.
    pub precision: String,
    /// TFLOP/s.
    pub tflops: f64,
    /// The measurement it comes from.
    pub source: String,
}

/// A fitted time model of one kernel class and pass at one precision: one named term per
/// feature of the class. In the file the terms are three lists in the class's feature order
/// (`features`, `coefficients`, `std_errors`), as they have always been written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "KernelFitFile", into = "KernelFitFile")]
pub struct KernelFit {
    /// Class.
    pub class: KernelClass,
    /// Pass.
    pub pass: KernelPass,
    /// A single op kind of a vector class (`max-pool`), fitted on its own; absent for the
    /// fit of the whole class.
    pub op: Option<String>,
    /// Number format.
    pub precision: String,
    /// One term per feature of the class, in [`KernelClass::features`] order.
    pub terms: Vec<Term>,
    /// Coefficient of determination on the times.
    pub r_squared: f64,
    /// Root-mean-square relative error of the fitted times.
    pub rms_rel_error: f64,
    /// Largest relative error of a fitted time.
    pub max_abs_rel_error: f64,
    /// Measurements fitted.
    pub points: usize,
}

/// One term of a kernel fit: what a unit of a feature costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Term {
    /// The feature (`1`, `flops`, `bytes`, ...; [`KernelClass::features`]).
    pub feature: String,
    /// Seconds per unit of the feature; zero where the fit dropped it.
    pub seconds_per_unit: Seconds,
    /// Standard error of `seconds_per_unit`.
    pub std_error: Seconds,
}

impl Term {
    /// The terms of a fit of `class`: its features named, with the fitted seconds per unit
    /// and their standard errors in the class's feature order.
    pub fn for_class(class: KernelClass, coefficients: &[f64], std_errors: &[f64]) -> Vec<Term> {
        class
            .features()
            .iter()
            .zip(coefficients.iter().zip(std_errors))
            .map(|(f, (c, se))| Term {
                feature: (*f).to_owned(),
                seconds_per_unit: Seconds::new(*c),
                std_error: Seconds::new(*se),
            })
            .collect()
    }
}

impl KernelFit {
    /// The model's time for features `x` (in the class's feature order).
    pub fn time(&self, x: &[f64; FEATURES]) -> f64 {
        self.terms
            .iter()
            .zip(x)
            .map(|(t, v)| t.seconds_per_unit.value() * v)
            .sum()
    }

    /// The term of `feature`, if the class has it.
    pub fn term(&self, feature: &str) -> Option<&Term> {
        self.terms.iter().find(|t| t.feature == feature)
    }

    /// The fixed cost of a launch: the `1` term.
    pub fn fixed(&self) -> Seconds {
        self.term("1")
            .map_or(Seconds::new(0.0), |t| t.seconds_per_unit)
    }

    /// The rate the `flops` term tends to for large kernels; `None` where the fit dropped it.
    pub fn asymptotic_flop_rate(&self) -> Option<FlopRate> {
        self.term("flops")
            .map(|t| t.seconds_per_unit.value())
            .filter(|c| *c > 0.0)
            .map(|c| FlopRate::new(1.0 / c))
    }
}

/// The standard normal's 95th percentile: a 90 % interval's half-width in standard
/// deviations.
pub const NORMAL_90: f64 = 1.644_853_626_951_472_2;

/// A kernel fit as the profile file writes it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelFitFile {
    class: KernelClass,
    pass: KernelPass,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    op: Option<String>,
    precision: String,
    features: Vec<String>,
    coefficients: Vec<f64>,
    std_errors: Vec<f64>,
    r_squared: f64,
    rms_rel_error: f64,
    max_abs_rel_error: f64,
    points: usize,
}

impl TryFrom<KernelFitFile> for KernelFit {
    type Error = String;

    fn try_from(f: KernelFitFile) -> std::result::Result<Self, String> {
        let n = f.features.len();
        if f.coefficients.len() != n || f.std_errors.len() != n {
            return Err(format!(
                "a kernel fit has one coefficient and one std_error per feature: {n} features, \
                 {} coefficients, {} std_errors (re-run `ridgeline calibrate`)",
                f.coefficients.len(),
                f.std_errors.len()
            ));
        }
        let terms = f
            .features
            .into_iter()
            .zip(f.coefficients)
            .zip(f.std_errors)
            .map(|((feature, c), se)| Term {
                feature,
                seconds_per_unit: Seconds::new(c),
                std_error: Seconds::new(se),
            })
            .collect();
        Ok(KernelFit {
            class: f.class,
            pass: f.pass,
            op: f.op,
            precision: f.precision,
            terms,
            r_squared: f.r_squared,
            rms_rel_error: f.rms_rel_error,
            max_abs_rel_error: f.max_abs_rel_error,
            points: f.points,
        })
    }
}

impl From<KernelFit> for KernelFitFile {
    fn from(k: KernelFit) -> Self {
        KernelFitFile {
            class: k.class,
            pass: k.pass,
            op: k.op,
            precision: k.precision,
            features: k.terms.iter().map(|t| t.feature.clone()).collect(),
            coefficients: k.terms.iter().map(|t| t.seconds_per_unit.value()).collect(),
            std_errors: k.terms.iter().map(|t| t.std_error.value()).collect(),
            r_squared: k.r_squared,
            rms_rel_error: k.rms_rel_error,
            max_abs_rel_error: k.max_abs_rel_error,
            points: k.points,
        }
    }
}

/// The record precision name of a model precision's compute format.
pub fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::Fp32 => "fp32",
        Precision::Tf32 => "tf32",
        Precision::AmpFp16 => "fp16",
        Precision::AmpBf16 => "bf16",
        Precision::Fp8 => "fp8",
    }
}

impl Profile {
    /// Parses and checks a profile file.
    pub fn parse(text: &str, file: &str) -> Result<Profile> {
        let p: Profile = toml::from_str(text).map_err(|e| Error::Parse {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        p.check(file)?;
        Ok(p)
    }

    /// Checks the invariants a parsed profile must hold.
    pub fn check(&self, file: &str) -> Result<()> {
        let invalid = |field: String, message: String| Error::Invalid {
            file: file.to_owned(),
            field,
            message,
        };
        if self.schema_version != PROFILE_SCHEMA_VERSION {
            return Err(invalid(
                "schema_version".into(),
                format!(
                    "is {}; this build reads version {PROFILE_SCHEMA_VERSION} (re-run `ridgeline calibrate`)",
                    self.schema_version
                ),
            ));
        }
        if let Some(cv) = self.sample_cv
            && !(cv.is_finite() && cv >= 0.0)
        {
            return Err(invalid(
                "sample_cv".into(),
                format!(
                    "is {cv}: a coefficient of variation is 0 or more (re-run `ridgeline calibrate`)"
                ),
            ));
        }
        let cuda = self
            .device
            .strip_prefix("cuda:")
            .is_some_and(|n| n.parse::<u32>().is_ok());
        if !(cuda || self.device == "cpu" || self.device == "mpi") {
            return Err(invalid(
                "device".into(),
                format!(
                    "`{}`: a profile is of `cpu`, `cuda:N` or `mpi` records (re-run `ridgeline \
                     calibrate`)",
                    self.device
                ),
            ));
        }
        if self.threads == 0 {
            return Err(invalid(
                "threads".into(),
                "is 0; records run on at least one thread (re-run `ridgeline calibrate`)".into(),
            ));
        }
        for (i, b) in self.bandwidth.iter().enumerate() {
            if !(b.bandwidth_gbs.is_finite() && b.bandwidth_gbs > 0.0) {
                return Err(invalid(
                    format!("bandwidth[{i}].bandwidth_gbs"),
                    format!("is {}; a bandwidth must be positive", b.bandwidth_gbs),
                ));
            }
        }
        for (i, k) in self.kernels.iter().enumerate() {
            let field = |f: &str| format!("kernels[{i}].{f}");
            let names: Vec<&str> = k.terms.iter().map(|t| t.feature.as_str()).collect();
            if names != k.class.features() {
                return Err(invalid(
                    field("features"),
                    format!(
                        "are {names:?}; a {} fit has the features {:?}, in that order (re-run \
                         `ridgeline calibrate`)",
                        k.class.name(),
                        k.class.features()
                    ),
                ));
            }
            if let Some(c) = k
                .terms
                .iter()
                .map(|t| t.seconds_per_unit.value())
                .find(|c| !(c.is_finite() && *c >= 0.0 && *c <= MAX_COEFFICIENT))
            {
                return Err(invalid(
                    field("coefficients"),
                    format!(
                        "contains {c}; a cost per unit of work is finite, not negative and at \
                         most {MAX_COEFFICIENT} s (re-run `ridgeline calibrate`)"
                    ),
                ));
            }
            if k.terms.iter().all(|t| t.seconds_per_unit.value() == 0.0) {
                return Err(invalid(
                    field("coefficients"),
                    "are all zero: the model would predict no time".into(),
                ));
            }
        }
        for (i, c) in self.comm.iter().enumerate() {
            let field = |f: &str| format!("comm[{i}].{f}");
            for (name, v) in [
                ("latency_s", c.latency_s),
                ("overhead_s", c.overhead_s),
                ("gap_s", c.gap_s),
                ("gap_per_byte_s", c.gap_per_byte_s),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(invalid(
                        field(name),
                        format!("is {v}; LogGP parameters are finite and not negative"),
                    ));
                }
            }
            for (name, bands) in [("exchange", &c.exchange), ("reduction", &c.reduction)] {
                let bad = bands.iter().any(|b| {
                    !(b.fixed_s.is_finite()
                        && b.fixed_s >= 0.0
                        && b.per_byte_s.is_finite()
                        && b.per_byte_s >= 0.0)
                });
                if bad || CommLevel::banded(bands).is_none() {
                    return Err(invalid(
                        field(name),
                        format!(
                            "needs 1 to {} bands with costs that are finite and not negative, \
                             and max_bytes increasing (the last band has none)",
                            crate::collective::MAX_BANDS
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The 90 % interval of a collective's time from the communication fits, as multiples
    /// of it: `1 ± 1.645 x` the largest root-mean-square relative error of the levels'
    /// exchange and reduction fits (their residuals hold the measured sample spread too),
    /// never below a tenth; `[1, 1]` without fitted levels.
    pub fn comm_interval(&self) -> [f64; 2] {
        let rms = self
            .comm
            .iter()
            .flat_map(|c| c.exchange.iter().chain(&c.reduction))
            .map(|b| b.rms_rel_error)
            .filter(|e| e.is_finite())
            .fold(0.0, f64::max);
        [(1.0 - NORMAL_90 * rms).max(0.1), 1.0 + NORMAL_90 * rms]
    }

    /// The fitted level `level`, if the profile has it.
    pub fn comm_level(&self, level: CommLevelName) -> Option<&CommLevel> {
        self.comm.iter().find(|c| c.level == level)
    }

    /// The profile as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| unreachable!("a profile serialises: {e}"))
    }

    /// The fit of the whole of `class` and `pass` at `precision`, if the profile has one.
    pub fn fit(&self, class: KernelClass, pass: KernelPass, precision: &str) -> Option<&KernelFit> {
        self.kernels.iter().find(|k| {
            k.class == class && k.pass == pass && k.precision == precision && k.op.is_none()
        })
    }

    /// The fit for `kernel` at `precision`: its own op kind's where the profile has one, else
    /// its class's.
    pub fn kernel_fit(&self, kernel: &Kernel, precision: &str) -> Option<&KernelFit> {
        kernel
            .op
            .and_then(|op| {
                self.kernels.iter().find(|k| {
                    k.op.as_deref() == Some(op) && k.pass == kernel.pass && k.precision == precision
                })
            })
            .or_else(|| self.fit(kernel.class, kernel.pass, precision))
    }

    /// The index among the profile's kernel fits of the one that times `kernel` at
    /// `precision` ([`Profile::kernel_fit`]).
    pub fn fit_index(&self, kernel: &Kernel, precision: &str) -> Option<usize> {
        let f = self.kernel_fit(kernel, precision)?;
        self.kernels.iter().position(|k| std::ptr::eq(k, f))
    }

    /// The calibrated time of `kernel` at `precision`, if the profile has its class.
    pub fn time(&self, kernel: &Kernel, precision: &str) -> Option<f64> {
        self.kernel_fit(kernel, precision)
            .map(|f| f.time(&kernel.x))
    }

    /// Forward and backward time of a layer's `kernels` at `precision`, if the profile has a
    /// fit for every one of them.
    pub fn layer_times(&self, kernels: &[Kernel], precision: &str) -> Option<(f64, f64)> {
        let mut fwd = 0.0;
        let mut bwd = 0.0;
        for k in kernels {
            let t = self.time(k, precision)?;
            if k.pass.is_backward() {
                bwd += t;
            } else {
                fwd += t;
            }
        }
        Some((fwd, bwd))
    }

    /// The 90 % interval of a layer's `kernels` at `precision` (forward and backward
    /// together), from each kernel fit's residuals: a kernel takes its fitted time times
    /// `1 ± 1.645 x` its fit's root-mean-square relative error (the residuals taken as
    /// normal; they hold the measurements' own spread too), the layer's kernels off together,
    /// never below a tenth of the time. `None` where a kernel has no fit. (A step's interval
    /// takes layers of one fit as off together, different fits independently:
    /// [`crate::predict::StepTimes::interval_90`].)
    pub fn layer_interval(&self, kernels: &[Kernel], precision: &str) -> Option<[f64; 2]> {
        let mut out = [0.0; 2];
        for k in kernels {
            let f = self.kernel_fit(k, precision)?;
            let t = f.time(&k.x);
            let z = NORMAL_90 * f.rms_rel_error;
            out[0] += t * (1.0 - z).max(0.1);
            out[1] += t * (1.0 + z);
        }
        Some(out)
    }

    /// Sustained DRAM bandwidth, bytes/s.
    pub fn dram_bandwidth(&self) -> Option<f64> {
        self.bandwidth
            .iter()
            .find(|b| b.level == "dram")
            .map(|b| b.bandwidth_gbs * 1e9)
    }

    /// The ceiling of `kind` at `precision`, FLOP/s.
    pub fn ceiling(&self, kind: &str, precision: &str) -> Option<f64> {
        self.ceilings
            .iter()
            .find(|c| c.kind == kind && c.precision == precision)
            .map(|c| c.tflops * 1e12)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_collectives_interval_follows_the_communication_fits_residuals() {
        let mut p = sample();
        assert_eq!(p.comm_interval(), [1.0, 1.0]);
        let band = |rms: f64| BandFit {
            max_bytes: None,
            fixed_s: 1e-6,
            per_byte_s: 1e-10,
            fixed_se_s: 0.0,
            per_byte_se_s: 0.0,
            points: 8,
            rms_rel_error: rms,
        };
        p.comm.push(CommLevel {
            level: CommLevelName::Node,
            transport: "tcp".into(),
            hosts: vec!["a".into()],
            latency_s: 1e-6,
            latency_se_s: 0.0,
            overhead_s: 1e-7,
            overhead_se_s: 0.0,
            gap_s: 1e-7,
            gap_se_s: 0.0,
            gap_per_byte_s: 1e-10,
            gap_per_byte_se_s: 0.0,
            points: 8,
            max_abs_rel_error: 0.05,
            exchange: vec![band(0.04), band(0.1)],
            reduction: vec![band(0.02)],
        });
        let [lo, hi] = p.comm_interval();
        assert!((lo - (1.0 - NORMAL_90 * 0.1)).abs() < 1e-12);
        assert!((hi - (1.0 + NORMAL_90 * 0.1)).abs() < 1e-12);
        p.comm[0].exchange[1].rms_rel_error = 1.0;
        assert_eq!(p.comm_interval()[0], 0.1);
    }

    #[test]
    fn a_layers_interval_follows_its_fits_residuals() {
        let p = sample();
        let k = crate::kernels::gemm_kernel(
            KernelClass::ConvSpatial,
            KernelPass::Forward,
            512.0,
            512.0,
            512.0,
            1.0,
        );
        let t = p.time(&k, "fp32").unwrap();
        let rms = p.kernel_fit(&k, "fp32").unwrap().rms_rel_error;
        let [lo, hi] = p.layer_interval(&[k, k], "fp32").unwrap();
        assert!((lo - 2.0 * t * (1.0 - NORMAL_90 * rms).max(0.1)).abs() <= 1e-12 * t);
        assert!((hi - 2.0 * t * (1.0 + NORMAL_90 * rms)).abs() <= 1e-12 * t);
        assert!(lo < 2.0 * t && 2.0 * t < hi);
        assert!(p.layer_interval(&[k], "bf16").is_none());
    }

    pub(crate) fn sample() -> Profile {
        Profile {
            schema_version: PROFILE_SCHEMA_VERSION,
            system: "local".into(),
            device: "cpu".into(),
            threads: 2,
            provenance: Provenance {
                created: "2026-11-22T00:00:00Z".into(),
                ridgeline_version: "0.1.0".into(),
                host: "h".into(),
                device_model: "cpu".into(),
                files: vec![SourceFile {
                    path: "runs.jsonl".into(),
                    records: 3,
                }],
                measured_from: "2026-11-22T00:00:00Z".into(),
                measured_to: "2026-11-22T00:01:00Z".into(),
            },
            bandwidth: vec![LevelBandwidth {
                level: "dram".into(),
                max_working_set_bytes: None,
                bandwidth_gbs: 20.0,
                std_error_gbs: 0.5,
                points: 3,
            }],
            ceilings: vec![Ceiling {
                kind: "gemm".into(),
                precision: "fp32".into(),
                tflops: 0.2,
                source: "gemm 2048^3".into(),
            }],
            comm: Vec::new(),
            sample_cv: None,
            kernels: vec![KernelFit {
                class: KernelClass::ConvSpatial,
                pass: KernelPass::Forward,
                op: None,
                precision: "fp32".into(),
                terms: Term::for_class(
                    KernelClass::ConvSpatial,
                    &[1e-4, 1e-11, 1e-10, 0.0, 1e-10],
                    &[1e-5, 1e-12, 1e-11, 0.0, 1e-11],
                ),
                r_squared: 0.99,
                rms_rel_error: 0.1,
                max_abs_rel_error: 0.2,
                points: 10,
            }],
        }
    }

    #[test]
    fn round_trips_through_toml() {
        let p = sample();
        let back = Profile::parse(&p.to_toml(), "p.toml").unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn bad_profiles_name_the_field() {
        let mut p = sample();
        p.kernels[0].terms[1].seconds_per_unit = Seconds::new(-1.0);
        let err = Profile::parse(&p.to_toml(), "p.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("p.toml") && err.contains("kernels[0].coefficients"),
            "{err}"
        );
        let mut p = sample();
        p.schema_version = 9;
        let err = Profile::parse(&p.to_toml(), "p.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("schema_version"), "{err}");
        let err = Profile::parse("schema_version = 1\n", "p.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("p.toml") && err.contains("missing field"),
            "{err}"
        );
        // Terms are named: a file whose features are out of the class's order is refused,
        // and so is one whose lists differ in length.
        let mut p = sample();
        p.kernels[0].terms.swap(1, 2);
        let err = Profile::parse(&p.to_toml(), "p.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("kernels[0].features"), "{err}");
        let text = sample()
            .to_toml()
            .replace("std_errors = [0.00001, ", "std_errors = [");
        assert!(text.contains("std_errors = [0.000000000001"), "{text}");
        let err = Profile::parse(&text, "p.toml").unwrap_err().to_string();
        assert!(err.contains("5 coefficients, 4 std_errors"), "{err}");
    }

    #[test]
    fn overlay_sets_the_bandwidth_and_keeps_the_profile() {
        let s = crate::catalog::system("xeon-8480plus").unwrap();
        let o = sample().overlay(s, "p.toml").unwrap();
        let bw = o.device.memory_bandwidth.as_ref().unwrap();
        assert_eq!(bw.value.value(), 20e9);
        assert!(bw.source.contains("p.toml"));
        assert!(o.calibration.is_some());
    }

    /// Issue 17: CPU records cannot calibrate a GPU system, nor one GPU's another's.
    #[test]
    fn a_profile_of_another_device_is_refused() {
        let gpu = crate::catalog::system("perlmutter-gpu").unwrap();
        let err = sample()
            .overlay(gpu.clone(), "p.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("p.toml: field `device`"), "{err}");
        assert!(
            err.contains("`cpu`") && err.contains("`a100-sxm4-40gb`"),
            "{err}"
        );
        let mut h100 = sample();
        h100.device = "cuda:0".into();
        h100.provenance.device_model = "NVIDIA H100 80GB HBM3".into();
        assert!(h100.check_device(&gpu, "p.toml").is_err());
        let dgx = crate::catalog::system("dgx-h100").unwrap();
        h100.check_device(&dgx, "p.toml").unwrap();
        let cpu = crate::catalog::system("xeon-8480plus").unwrap();
        assert!(h100.check_device(&cpu, "p.toml").is_err());
    }
}
