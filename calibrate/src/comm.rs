//! Validation of the collective model against measured allreduce: for every
//! `comm-allreduce` record, the allreduce time predicted from a profile's LogGP levels
//! ([`ridgeline_model::collective`], on the fabric the job ran on) against the median of
//! the measured samples.
//!
//! The algorithm is the one measured: ring, recursive halving-doubling, recursive
//! doubling and the double binary tree are known; `MPI_Allreduce` is predicted only where the record says which
//! algorithm the library was told to use (Open MPI's `coll_tuned_allreduce_algorithm`: 3
//! recursive doubling, 4 and 5 ring, 6 recursive halving-doubling), and otherwise listed as
//! not predicted.

use ridgeline_measure::Record;
use ridgeline_measure::record::{AllreduceShape, Measured};
use ridgeline_model::collective::{self, Algorithm, Fabric};
use ridgeline_model::profile::{CommLevelName, Profile};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::loggp::LevelChoice;
use crate::records::record_error;
use crate::stats::Samples;

/// One measured allreduce and its prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommPoint {
    /// Algorithm measured.
    pub algorithm: String,
    /// The model's algorithm it is predicted with.
    pub model_algorithm: String,
    /// Ranks.
    pub ranks: u32,
    /// Bytes reduced.
    pub bytes: u64,
    /// Predicted seconds.
    pub predicted_s: f64,
    /// Median measured seconds.
    pub measured_s: f64,
    /// `(predicted - measured) / measured`.
    pub rel_error: f64,
}

/// Error statistics over a set of points.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommSummary {
    /// Points.
    pub points: usize,
    /// Geometric mean of `|rel_error|`.
    pub geomean_abs_rel_error: f64,
    /// Median of `|rel_error|`.
    pub median_abs_rel_error: f64,
    /// Largest `|rel_error|`.
    pub max_abs_rel_error: f64,
    /// Mean of `rel_error` (signed).
    pub bias: f64,
}

impl CommSummary {
    fn of(points: &[&CommPoint]) -> Option<CommSummary> {
        if points.is_empty() {
            return None;
        }
        let n = points.len() as f64;
        // An exact prediction would make the logarithm infinite: floor at 1e-6.
        let abs: Vec<f64> = points.iter().map(|p| p.rel_error.abs().max(1e-6)).collect();
        let mut sorted = abs.clone();
        sorted.sort_by(f64::total_cmp);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            0.5 * (sorted[mid - 1] + sorted[mid])
        };
        Some(CommSummary {
            points: points.len(),
            geomean_abs_rel_error: (abs.iter().map(|e| e.ln()).sum::<f64>() / n).exp(),
            median_abs_rel_error: median,
            max_abs_rel_error: sorted[sorted.len() - 1],
            bias: points.iter().map(|p| p.rel_error).sum::<f64>() / n,
        })
    }
}

/// A summary per algorithm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlgorithmSummary {
    /// Algorithm measured.
    pub algorithm: String,
    /// Its errors.
    #[serde(flatten)]
    pub summary: CommSummary,
}

/// The validation of a profile's collective model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommValidation {
    /// Every predicted point, in record order.
    pub points: Vec<CommPoint>,
    /// Over every point.
    pub summary: CommSummary,
    /// Per algorithm.
    pub algorithms: Vec<AlgorithmSummary>,
    /// Records not predicted, and why.
    pub not_predicted: Vec<String>,
}

/// The model's algorithm for a measured one.
fn model_algorithm(r: &Record, name: &str) -> std::result::Result<Algorithm, String> {
    match name {
        "ring" => Ok(Algorithm::Ring),
        "rhd" => Ok(Algorithm::Rhd),
        "rd" => Ok(Algorithm::Rd),
        "tree" => Ok(Algorithm::Tree),
        "mpi" => {
            let chosen = r
                .extra
                .mpi_settings
                .get("coll_tuned_allreduce_algorithm")
                .map(String::as_str);
            match chosen {
                Some("3") => Ok(Algorithm::Rd),
                Some("4" | "5") => Ok(Algorithm::Ring),
                Some("6") => Ok(Algorithm::Rhd),
                Some(other) => Err(format!(
                    "MPI_Allreduce ran Open MPI's algorithm {other}, which the model lacks"
                )),
                None => Err(
                    "MPI_Allreduce chose its own algorithm; pin one with `mpirun --mca \
                     coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4` \
                     to predict it"
                        .into(),
                ),
            }
        }
        "nccl" => Err(
            "NCCL reduces GPU buffers over the GPUs' own links (NVLink, PCIe, GPUDirect RDMA), \
             which the LogGP profile, fitted from host MPI messages, does not describe"
                .into(),
        ),
        other => Err(format!("unknown algorithm `{other}`")),
    }
}

/// The fabric of a job: its ranks over the profile's levels.
fn fabric(
    profile: &Profile,
    choice: LevelChoice,
    ranks: u32,
    per_node: u32,
    nodes: u32,
) -> std::result::Result<Fabric, String> {
    let level = |l: CommLevelName| {
        profile.comm_level(l).ok_or_else(|| {
            format!(
                "the profile has no `{}` level: calibrate it from ping-pong records of that level",
                l.name()
            )
        })
    };
    match choice {
        LevelChoice::Fixed(l) => Ok(level(l)?.fabric(ranks)),
        LevelChoice::Auto if nodes <= 1 => Ok(level(CommLevelName::Node)?.fabric(ranks)),
        LevelChoice::Auto => {
            let net = level(CommLevelName::Network)?;
            let mut f = net.fabric(nodes);
            f.k = per_node;
            if per_node > 1 {
                f.intra = Some(level(CommLevelName::Node)?.link());
            }
            Ok(f)
        }
    }
}

/// Predicts every allreduce record of `file` with `profile`.
pub fn validate_comm(
    profile: &Profile,
    records: &[Record],
    file: &str,
    choice: LevelChoice,
) -> Result<CommValidation> {
    let mut points = Vec::new();
    let mut not_predicted = Vec::new();
    for r in records {
        let Measured::CommAllreduce(AllreduceShape {
            bytes,
            algorithm: name,
            ranks,
            ..
        }) = &r.measured
        else {
            continue;
        };
        let bad = |m: &str| record_error(file, r, m.to_owned());
        let need = |v: Option<usize>, name: &str| {
            v.map(|v| v as u64)
                .ok_or_else(|| bad(&format!("has no whole-number `{name}`")))
        };
        let (bytes, name) = (*bytes, name.as_str());
        let ranks = need(*ranks, "ranks")?;
        let extra = &r.extra;
        let per_node = need(extra.ranks_per_node, "ranks_per_node")?;
        let nodes = need(extra.nodes, "nodes")?;
        let hosts = extra.hosts.len() as u64;
        if ranks < 2
            || extra.ranks.map(|v| v as u64) != Some(ranks)
            || hosts != ranks
            || per_node * nodes < ranks
        {
            return Err(bad(&format!(
                "its shape says {ranks} ranks, but its job (extra.ranks, hosts, nodes x ranks \
                 per node) disagrees: the file mixes jobs or was edited; measure it again"
            )));
        }
        let algorithm = match model_algorithm(r, name) {
            Ok(a) => a,
            Err(why) => {
                let note = format!("{name} on {ranks} ranks: {why}");
                if !not_predicted.contains(&note) {
                    not_predicted.push(note);
                }
                continue;
            }
        };
        let u = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        let f = fabric(profile, choice, u(ranks), u(per_node), u(nodes))
            .map_err(|m| Error::Input(format!("{file}: {m}")))?;
        let Some(predicted) = collective::allreduce_time(&f, bytes as f64, algorithm) else {
            not_predicted.push(format!(
                "{name} {bytes} B on {ranks} ranks: the model's {algorithm} does not apply"
            ));
            continue;
        };
        let measured = Samples::new(r.samples_s.clone())
            .map_err(|e| bad(&e.to_string()))?
            .median();
        let predicted = predicted.time.value();
        points.push(CommPoint {
            algorithm: name.to_owned(),
            model_algorithm: algorithm.name().to_owned(),
            ranks: u(ranks),
            bytes,
            predicted_s: predicted,
            measured_s: measured,
            rel_error: (predicted - measured) / measured,
        });
    }
    let all: Vec<&CommPoint> = points.iter().collect();
    let summary = CommSummary::of(&all).ok_or_else(|| {
        Error::Input(format!(
            "{file}: no allreduce record could be predicted ({}); measure them with \
             `mpirun -np 2 ridgeline measure comm allreduce --out FILE`",
            if not_predicted.is_empty() {
                "it has none".to_owned()
            } else {
                not_predicted.join("; ")
            }
        ))
    })?;
    let mut names: Vec<&str> = points.iter().map(|p| p.algorithm.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let algorithms = names
        .into_iter()
        .filter_map(|n| {
            let these: Vec<&CommPoint> = points.iter().filter(|p| p.algorithm == n).collect();
            CommSummary::of(&these).map(|summary| AlgorithmSummary {
                algorithm: n.to_owned(),
                summary,
            })
        })
        .collect();
    Ok(CommValidation {
        points,
        summary,
        algorithms,
        not_predicted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(e: f64) -> CommPoint {
        CommPoint {
            algorithm: "ring".into(),
            model_algorithm: "ring".into(),
            ranks: 2,
            bytes: 1024,
            predicted_s: 1.0 + e,
            measured_s: 1.0,
            rel_error: e,
        }
    }

    #[test]
    fn measured_algorithms_map_to_the_models_or_say_why_not() {
        let mut r = Record::new(
            Measured::CommAllreduce(AllreduceShape {
                bytes: 4096,
                algorithm: "mpi".into(),
                ranks: Some(2),
                gpus: None,
            }),
            ridgeline_measure::RecordPrecision::Fp32,
            ridgeline_measure::Device::Mpi,
            1,
            vec![1e-3],
            0.0,
            4096.0,
            ridgeline_measure::record::Env::capture(),
        );
        assert_eq!(model_algorithm(&r, "ring"), Ok(Algorithm::Ring));
        assert!(
            model_algorithm(&r, "mpi")
                .unwrap_err()
                .contains("coll_tuned")
        );
        r.extra
            .mpi_settings
            .insert("coll_tuned_allreduce_algorithm".into(), "6".into());
        assert_eq!(model_algorithm(&r, "mpi"), Ok(Algorithm::Rhd));
        let why = model_algorithm(&r, "nccl").unwrap_err();
        assert!(why.contains("GPU") && why.contains("LogGP"), "{why}");
        assert!(model_algorithm(&r, "hier").unwrap_err().contains("unknown"));
    }

    #[test]
    fn the_summary_takes_the_geometric_mean_of_absolute_errors() {
        let p = [point(0.1), point(-0.4)];
        let s = CommSummary::of(&p.iter().collect::<Vec<_>>()).unwrap();
        assert!((s.geomean_abs_rel_error - 0.2).abs() < 1e-12);
        assert!((s.max_abs_rel_error - 0.4).abs() < 1e-12);
        assert!((s.bias + 0.15).abs() < 1e-12);
        assert!(CommSummary::of(&[]).is_none());
    }
}
