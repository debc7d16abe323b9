//! Training data: the data set a workload reads (how many samples, how many bytes each) and
//! its convergence curve (epochs to the target quality versus global batch size, \[003\]
//! Eq. 1-2, Table 6). Built-in workloads ship theirs in `data/catalog/workloads/*.toml`; users pass
//! their own file in the same format.
//!
//! ```toml
//! workload = "deepcam"            # optional
//! [sources]
//! t6 = "\[003\] Table 6"
//! [dataset]
//! train_samples = { value = 121266, source = "t6" }
//! eval_samples = { value = 15158, source = "t6" }
//! sample_bytes = { value = 64504779, source = "t6" }   # as stored, before compression
//! # tokens_per_sequence = { value = 256, source = "..." }  # transformers: mean tokens before padding
//! [[convergence]]
//! global_batch = 128
//! epochs = { value = 10.0, source = "t6" }
//! ```
//!
//! Between measured batch sizes the epochs are interpolated linearly in log(batch) -
//! log(epochs) (a power law between neighbours); outside the measured range the curve says
//! so instead of extrapolating.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::parse_toml;
use crate::error::{Error, Result};
use crate::system::{RawSourced, Sourced};
use crate::units::Bytes;

/// A data set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dataset {
    /// Training samples per epoch.
    pub train_samples: Sourced<u64>,
    /// Evaluation samples per evaluation pass.
    pub eval_samples: Sourced<u64>,
    /// Bytes of one sample as stored (uncompressed).
    pub sample_bytes: Sourced<Bytes>,
    /// For a transformer's data set, the tokens a sequence holds on average before padding:
    /// what a stack that packs sequences computes (`[data] packing`); `None` where every
    /// sequence is full.
    pub tokens_per_sequence: Option<Sourced<u64>>,
}

impl Dataset {
    /// Bytes of the training set.
    #[allow(clippy::cast_precision_loss)]
    pub fn train_bytes(&self) -> Bytes {
        self.sample_bytes.value * self.train_samples.value as f64
    }
}

/// Most epochs a run may train for (real runs train for tens to hundreds): keeps every
/// time to solution a finite number.
pub const MAX_EPOCHS: f64 = 1e6;

/// One measured point: epochs to converge at a global batch size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConvergencePoint {
    /// Global batch size.
    pub global_batch: u64,
    /// Epochs to the target quality.
    pub epochs: Sourced<f64>,
}

/// Epochs to converge versus global batch size, sorted by batch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Convergence {
    /// The measured points, ascending in batch size, each batch once.
    pub points: Vec<ConvergencePoint>,
}

impl Convergence {
    /// The smallest and largest measured batch.
    pub fn range(&self) -> (u64, u64) {
        let first = self.points.first().map_or(0, |p| p.global_batch);
        let last = self.points.last().map_or(0, |p| p.global_batch);
        (first, last)
    }

    /// Epochs at `global_batch`: exact at a measured point, log-log interpolated between
    /// two, `None` outside the measured range.
    #[allow(clippy::cast_precision_loss)]
    pub fn epochs(&self, global_batch: u64) -> Option<f64> {
        let i = self
            .points
            .partition_point(|p| p.global_batch < global_batch);
        let hi = self.points.get(i)?;
        if hi.global_batch == global_batch {
            return Some(hi.epochs.value);
        }
        let lo = self.points.get(i.checked_sub(1)?)?;
        let (b0, b1, b) = (
            lo.global_batch as f64,
            hi.global_batch as f64,
            global_batch as f64,
        );
        let t = (b.ln() - b0.ln()) / (b1.ln() - b0.ln());
        Some((lo.epochs.value.ln() + t * (hi.epochs.value.ln() - lo.epochs.value.ln())).exp())
    }

    /// A message for a batch outside the curve.
    pub fn out_of_range(&self, global_batch: u64) -> String {
        let (lo, hi) = self.range();
        format!(
            "global batch {global_batch} is outside the convergence data ({lo}..{hi}); \
             ridgeline does not extrapolate: pass --epochs or a --convergence file that covers it"
        )
    }
}

/// A workload's data set and convergence curve, either of which may be absent.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadData {
    /// The workload it belongs to, if the file says.
    pub workload: Option<String>,
    /// The data set.
    pub dataset: Option<Dataset>,
    /// The convergence curve.
    pub convergence: Option<Convergence>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    workload: Option<String>,
    #[serde(default)]
    sources: BTreeMap<String, String>,
    dataset: Option<RawDataset>,
    #[serde(default)]
    convergence: Vec<RawPoint>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDataset {
    train_samples: RawSourced<u64>,
    eval_samples: RawSourced<u64>,
    sample_bytes: RawSourced<f64>,
    tokens_per_sequence: Option<RawSourced<u64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoint {
    global_batch: u64,
    epochs: RawSourced<f64>,
}

/// Parses a data set / convergence file.
pub fn parse_workload_data(text: &str, file: &str) -> Result<WorkloadData> {
    let raw: RawData = parse_toml(text, file)?;
    let source = |field: &str, key: &str| {
        raw.sources.get(key).cloned().ok_or_else(|| {
            Error::invalid(
                file,
                format!("{field}.source"),
                format!("`{key}` is not a key of the [sources] table; add it with a citation"),
            )
        })
    };
    let dataset = match &raw.dataset {
        None => None,
        Some(d) => {
            // An evaluation set may be empty (language-model pre-training evaluates none).
            let count = |field: &str, v: &RawSourced<u64>| {
                if v.value == 0 && field != "dataset.eval_samples" {
                    return Err(Error::invalid(
                        file,
                        format!("{field}.value"),
                        "0: must be at least 1",
                    ));
                }
                Ok(Sourced {
                    value: v.value,
                    source: source(field, &v.source)?,
                })
            };
            let bytes = &d.sample_bytes;
            if !(bytes.value.is_finite() && bytes.value > 0.0) {
                return Err(Error::invalid(
                    file,
                    "dataset.sample_bytes.value",
                    format!("{} is not a positive number of bytes", bytes.value),
                ));
            }
            Some(Dataset {
                train_samples: count("dataset.train_samples", &d.train_samples)?,
                eval_samples: count("dataset.eval_samples", &d.eval_samples)?,
                sample_bytes: Sourced {
                    value: Bytes::new(bytes.value),
                    source: source("dataset.sample_bytes", &bytes.source)?,
                },
                tokens_per_sequence: d
                    .tokens_per_sequence
                    .as_ref()
                    .map(|t| count("dataset.tokens_per_sequence", t))
                    .transpose()?,
            })
        }
    };
    let convergence = if raw.convergence.is_empty() {
        None
    } else {
        let mut points = Vec::with_capacity(raw.convergence.len());
        for (i, p) in raw.convergence.iter().enumerate() {
            let field = format!("convergence[{i}]");
            if p.global_batch == 0 {
                return Err(Error::invalid(
                    file,
                    format!("{field}.global_batch"),
                    "0: must be at least 1",
                ));
            }
            if !(p.epochs.value > 0.0 && p.epochs.value <= MAX_EPOCHS) {
                return Err(Error::invalid(
                    file,
                    format!("{field}.epochs.value"),
                    format!(
                        "{} epochs: must be a positive number, at most {MAX_EPOCHS}",
                        p.epochs.value
                    ),
                ));
            }
            points.push(ConvergencePoint {
                global_batch: p.global_batch,
                epochs: Sourced {
                    value: p.epochs.value,
                    source: source(&format!("{field}.epochs"), &p.epochs.source)?,
                },
            });
        }
        points.sort_by_key(|p| p.global_batch);
        if let Some(w) = points
            .windows(2)
            .find(|w| w[0].global_batch == w[1].global_batch)
        {
            return Err(Error::invalid(
                file,
                "convergence",
                format!(
                    "global batch {} appears twice; keep one point per batch size",
                    w[0].global_batch
                ),
            ));
        }
        Some(Convergence { points })
    };
    Ok(WorkloadData {
        workload: raw.workload,
        dataset,
        convergence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn shipped_curves_reproduce_the_published_points() {
        let d = catalog::workload_data("deepcam").unwrap().unwrap();
        let c = d.convergence.unwrap();
        assert_eq!(c.epochs(128), Some(10.0));
        assert_eq!(c.epochs(2048), Some(24.0));
        let mid = c.epochs(512).unwrap();
        assert!(mid > 10.0 && mid < 24.0, "{mid}");
        assert_eq!(c.epochs(64), None);
        assert_eq!(c.epochs(4096), None);
        let cosmo = catalog::workload_data("cosmoflow-v07")
            .unwrap()
            .unwrap()
            .convergence
            .unwrap();
        assert_eq!(cosmo.epochs(128), Some(59.0));
        assert_eq!(cosmo.range(), (64, 512));
    }

    #[test]
    fn interpolation_is_a_power_law_between_points() {
        let d = catalog::workload_data("deepcam").unwrap().unwrap();
        let c = d.convergence.unwrap();
        // Geometric mean batch of 128 and 2048 is 512: epochs are the geometric mean.
        let e = c.epochs(512).unwrap();
        assert!((e - (10.0f64 * 24.0).sqrt()).abs() < 1e-9, "{e}");
    }

    #[test]
    fn dataset_bytes() {
        let d = catalog::workload_data("cosmoflow-v07")
            .unwrap()
            .unwrap()
            .dataset
            .unwrap();
        assert_eq!(d.train_bytes().value(), 262_144.0 * 16_777_216.0);
    }

    fn err(text: &str) -> String {
        parse_workload_data(text, "c.toml").unwrap_err().to_string()
    }

    #[test]
    fn a_data_sets_tokens_per_sequence_is_read_and_checked() {
        let bert = catalog::workload_data("bert-large").unwrap().unwrap();
        let t = bert.dataset.unwrap().tokens_per_sequence.unwrap();
        assert_eq!(t.value, 256);
        assert!(t.source.contains("2107.02027"));
        let text = "[sources]\ns = \"x\"\n[dataset]\ntrain_samples = { value = 10, source = \"s\" }\n\
                    eval_samples = { value = 0, source = \"s\" }\nsample_bytes = { value = 8.0, source = \"s\" }\n\
                    tokens_per_sequence = { value = 0, source = \"s\" }\n";
        let e = parse_workload_data(text, "d.toml").unwrap_err().to_string();
        assert!(
            e.contains("d.toml") && e.contains("dataset.tokens_per_sequence.value"),
            "{e}"
        );
    }

    #[test]
    fn bad_convergence_files_are_refused() {
        let base = "[sources]\ns = \"x\"\n[[convergence]]\nglobal_batch = 64\nepochs = { value = 10.0, source = \"s\" }\n";
        assert!(parse_workload_data(base, "c.toml").is_ok());
        assert!(err(&base.replace("10.0", "0.0")).contains("must be a positive number"));
        assert!(err(&base.replace("10.0", "-3.0")).contains("convergence[0].epochs.value"));
        let twice = format!("{base}{}", &base[base.find("[[").unwrap()..]);
        assert!(err(&twice).contains("appears twice"), "{}", err(&twice));
        assert!(err(&base.replace("source = \"s\" }", "source = \"t\" }")).contains("not a key"));
        assert!(err(&base.replace("global_batch = 64", "global_batch = 0")).contains("at least 1"));
        assert!(err(&base.replace("global_batch = 64", "global_batch = -4")).contains("line"));
    }
}
