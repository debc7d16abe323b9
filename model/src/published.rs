//! The model's counts against published figures (`ridgeline validate published`):
//!
//! - the reference implementations' layer tables (`data/evidence/reference/models_*.csv`, see
//!   [`crate::reference`]): every layer's output shape, parameters and forward MACs, and the
//!   totals;
//! - the per-sample figures of \[004\] Table II and §IV-A
//!   (`data/evidence/reference/ibrahim2021-table2.toml`), measured on V100s with automatic mixed
//!   precision: sample size, FLOPs, activation memory, the HBM "limit" (activations written
//!   once forward and read once backward), HBM bytes measured, and the FLOP:byte ratios.
//!
//! The published FLOPs and HBM bytes are profiler measurements of TensorFlow's kernels, not
//! counts of the network's arithmetic: they include what cuDNN's algorithms and the
//! framework add (padding, transposes, casts, the optimizer), so the model, which counts the
//! layers' own work, comes out below them. The comparison says by how much.

use serde::{Deserialize, Serialize};

use crate::cost::cost;
use crate::error::parse_toml;
use crate::error::{Error, Result};
use crate::precision::Precision;
use crate::reference;
use crate::system::RawSourced;
use crate::workloads::{self, BuildOptions};

const TABLE2_FILE: &str = "data/evidence/reference/ibrahim2021-table2.toml";
const TABLE2: &str = include_str!("../../data/evidence/reference/ibrahim2021-table2.toml");

/// Bytes in a GiB and FLOPs in a GiF.
const GI: f64 = (1u64 << 30) as f64;

/// A built-in workload against its reference layer table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerCheck {
    /// The built-in workload.
    pub workload: String,
    /// Layers of the model the table lists (the model's input and loss layers aside).
    pub layers: usize,
    /// Rows of the reference table.
    pub reference_layers: usize,
    /// Rows where name, output shape, parameters or forward MACs differ.
    pub mismatches: Vec<String>,
    /// Trainable parameters, model.
    pub params: u64,
    /// Trainable parameters, reference.
    pub reference_params: u64,
    /// Forward multiply-accumulates per sample, model.
    pub macs_fwd: u128,
    /// Forward multiply-accumulates per sample, reference.
    pub reference_macs_fwd: u128,
}

/// Graph layers that the reference tables do not list: the input, the loss, and
/// CosmoFlow's output `tanh` (part of the table's last dense row).
fn unlisted(workload: &str, name: &str) -> bool {
    name == "input" || name == "loss" || (workload.starts_with("cosmoflow") && name == "tanh")
}

/// Checks the built-in `workload` at its reference input against its reference table.
pub fn check_layers(workload: &str) -> Result<LayerCheck> {
    let graph = workloads::build(workload, &BuildOptions::default())?;
    let costs = cost(&graph, 1, Precision::Fp32);
    let table = reference::table(workload)?;
    let ours: Vec<_> = costs
        .layers
        .iter()
        .filter(|l| !unlisted(workload, l.name))
        .collect();
    let mut mismatches = Vec::new();
    for (i, (r, o)) in table.rows.iter().zip(&ours).enumerate() {
        let row = (
            r.name.as_str(),
            r.out_shape.as_slice(),
            r.params,
            r.macs_fwd,
        );
        let got = (o.name, o.output_shape, o.params, o.macs_fwd);
        if row != got {
            mismatches.push(format!("row {i}: reference {row:?}, model {got:?}"));
        }
    }
    Ok(LayerCheck {
        workload: workload.to_owned(),
        layers: ours.len(),
        reference_layers: table.rows.len(),
        mismatches,
        params: costs.params,
        reference_params: table.total_params(),
        macs_fwd: costs.macs_fwd,
        reference_macs_fwd: u128::from(table.total_macs()),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    sources: std::collections::BTreeMap<String, String>,
    workload: Vec<RawWorkload>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkload {
    paper: String,
    models: Vec<String>,
    sample_mib: RawSourced<f64>,
    flops_per_sample_gif: RawSourced<f64>,
    activations_gib: RawSourced<f64>,
    hbm_limit_gib: RawSourced<f64>,
    hbm_measured_gib: RawSourced<f64>,
    flop_per_sample_byte: RawSourced<f64>,
    flop_per_hbm_byte_limit: RawSourced<f64>,
}

/// One published figure beside the model's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figure {
    /// The workload as the paper names it.
    pub paper_workload: String,
    /// The built-in workload compared.
    pub workload: String,
    /// What is compared, e.g. `flops_per_sample`.
    pub quantity: &'static str,
    /// The unit of both values (base SI: FLOP, bytes, or a ratio).
    pub unit: &'static str,
    /// The published value.
    pub published: f64,
    /// Where it is published.
    pub source: String,
    /// The model's value.
    pub model: f64,
    /// `model / published`.
    pub ratio: f64,
    /// How the model's value is counted.
    pub model_counts: &'static str,
}

/// One quantity to compare: the published value (times `scale` to base units) and the
/// model's.
struct Compared<'a> {
    quantity: &'static str,
    unit: &'static str,
    published: &'a RawSourced<f64>,
    scale: f64,
    model: f64,
    counts: &'static str,
}

/// Every figure of \[004\] Table II (and the §IV-A activation asymptotes) beside the model's
/// count of the same quantity, under mixed precision (FP16 activations) as the paper ran.
pub fn table2() -> Result<Vec<Figure>> {
    let raw: RawTable = parse_toml(TABLE2, TABLE2_FILE)?;
    let mut out = Vec::new();
    for (k, w) in raw.workload.iter().enumerate() {
        let source = |field: &str, v: &RawSourced<f64>| -> Result<(f64, String)> {
            let text = raw.sources.get(&v.source).ok_or_else(|| {
                Error::invalid(
                    TABLE2_FILE,
                    format!("workload[{k}].{field}.source"),
                    format!("`{}` is not a key of [sources]", v.source),
                )
            })?;
            if !(v.value.is_finite() && v.value > 0.0) {
                return Err(Error::invalid(
                    TABLE2_FILE,
                    format!("workload[{k}].{field}.value"),
                    format!("{} is not a positive number", v.value),
                ));
            }
            Ok((v.value, text.clone()))
        };
        for name in &w.models {
            let graph = workloads::build(name, &BuildOptions::default())?;
            let c = cost(&graph, 1, Precision::AmpFp16);
            let data = crate::catalog::workload_data(name)?;
            let sample_bytes = data
                .and_then(|d| d.dataset)
                .map(|d| d.sample_bytes.value.value())
                .ok_or_else(|| {
                    Error::invalid(
                        name.as_str(),
                        "dataset.sample_bytes",
                        "the built-in workload has no data set to compare",
                    )
                })?;
            let flops = c.flops_train.value();
            let activations = c.activation_bytes.value();
            let limit = 2.0 * activations;
            let rows = [
                Compared {
                    quantity: "sample_bytes",
                    unit: "bytes",
                    published: &w.sample_mib,
                    scale: (1u64 << 20) as f64,
                    model: sample_bytes,
                    counts: "one stored sample, from the workload's data set",
                },
                Compared {
                    quantity: "flops_per_sample",
                    unit: "FLOP",
                    published: &w.flops_per_sample_gif,
                    scale: GI,
                    model: flops,
                    counts: "forward and backward FLOPs of every layer (2 per MAC), one sample",
                },
                Compared {
                    quantity: "activations_per_sample",
                    unit: "bytes",
                    published: &w.activations_gib,
                    scale: GI,
                    model: activations,
                    counts: "16-bit activations kept for backward, each tensor once",
                },
                Compared {
                    quantity: "hbm_limit_per_sample",
                    unit: "bytes",
                    published: &w.hbm_limit_gib,
                    scale: GI,
                    model: limit,
                    counts: "the activations written once forward and read once backward",
                },
                Compared {
                    quantity: "hbm_per_sample",
                    unit: "bytes",
                    published: &w.hbm_measured_gib,
                    scale: GI,
                    model: c.hbm_bytes_train.value(),
                    counts: "every layer's inputs, weights and outputs read or written once, forward and backward (published: measured)",
                },
                Compared {
                    quantity: "flop_per_sample_byte",
                    unit: "FLOP/byte",
                    published: &w.flop_per_sample_byte,
                    scale: 1.0,
                    model: flops / sample_bytes,
                    counts: "FLOPs per sample over the stored sample's bytes",
                },
                Compared {
                    quantity: "flop_per_hbm_byte_limit",
                    unit: "FLOP/byte",
                    published: &w.flop_per_hbm_byte_limit,
                    scale: 1.0,
                    model: flops / limit,
                    counts: "FLOPs per sample over the HBM limit",
                },
            ];
            for r in rows {
                let (value, source) = source(r.quantity, r.published)?;
                let published = value * r.scale;
                out.push(Figure {
                    paper_workload: w.paper.clone(),
                    workload: name.clone(),
                    quantity: r.quantity,
                    unit: r.unit,
                    published,
                    source,
                    model: r.model,
                    ratio: r.model / published,
                    model_counts: r.counts,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// PyTorch's own count (`torch.utils.flop_counter.FlopCounterMode`, matrix products
    /// only) of each built-in transformer's training step, made offline by
    /// `scripts/flopcounter.py` (`data/evidence/reference/flopcounter.toml`): the model's matrix
    /// kernels (linear layers, the language-model head, attention's QK^T and AV) count the
    /// same forward and backward FLOPs exactly (the target is 0.1 %), and the same parameters.
    #[test]
    fn transformers_count_the_matrix_flops_torch_counts() {
        use crate::kernels::{KernelClass, KernelPass, step_kernels};
        use crate::precision::Precision;
        use crate::workloads::{self, BuildOptions};
        #[derive(serde::Deserialize)]
        struct Figure {
            value: f64,
        }
        #[derive(serde::Deserialize)]
        struct Model {
            name: String,
            seq: usize,
            batch: u64,
            params: Figure,
            flops_fwd: Figure,
            flops_bwd: Figure,
        }
        #[derive(serde::Deserialize)]
        struct File {
            model: Vec<Model>,
        }
        let text = include_str!("../../data/evidence/reference/flopcounter.toml");
        let file: File = toml::from_str(text).unwrap();
        assert_eq!(file.model.len(), 6);
        for m in &file.model {
            let graph = workloads::build(
                &m.name,
                &BuildOptions {
                    input_size: Some(vec![m.seq]),
                    width: 1.0,
                },
            )
            .unwrap();
            let cost = crate::cost::cost(&graph, m.batch, Precision::Fp32);
            assert_eq!(cost.params as f64, m.params.value, "{}", m.name);
            let (mut fwd, mut bwd) = (0.0, 0.0);
            for k in step_kernels(&graph, &cost).iter().flatten() {
                if k.class == KernelClass::Gemm {
                    if k.pass == KernelPass::Forward {
                        fwd += k.x[1];
                    } else {
                        bwd += k.x[1];
                    }
                }
            }
            for (what, ours, torch) in [
                ("forward", fwd, m.flops_fwd.value),
                ("backward", bwd, m.flops_bwd.value),
            ] {
                let r = ours / torch - 1.0;
                assert!(
                    r.abs() < 1e-3,
                    "{} {what}: {ours:e} against torch's {torch:e} ({r:+e})",
                    m.name
                );
            }
        }
    }

    #[test]
    fn every_built_in_workload_matches_its_reference_table() {
        for w in reference::workloads() {
            let c = check_layers(w).unwrap();
            assert!(c.mismatches.is_empty(), "{w}: {:?}", c.mismatches);
            assert_eq!(c.layers, c.reference_layers, "{w}");
            assert_eq!(c.params, c.reference_params, "{w}");
            assert_eq!(c.macs_fwd, c.reference_macs_fwd, "{w}");
        }
    }

    #[test]
    fn table2_figures_are_the_papers_and_the_models_are_counted_as_stated() {
        let figures = table2().unwrap();
        // Three paper workloads, CosmoFlow against both variants: 4 x 7 figures.
        assert_eq!(figures.len(), 28);
        let get = |w: &str, q: &str| {
            figures
                .iter()
                .find(|f| f.workload == w && f.quantity == q)
                .unwrap()
        };
        // The published values, converted from GiF / GiB / MiB.
        assert_eq!(get("deepcam", "flops_per_sample").published, 2887.0 * GI);
        assert_eq!(
            get("resnet50", "hbm_limit_per_sample").published,
            0.084 * GI
        );
        assert_eq!(get("cosmoflow", "sample_bytes").published, 16.0 * 1048576.0);
        assert!(
            get("resnet50", "activations_per_sample")
                .source
                .contains("§IV-A")
        );
        // The paper's own ratio: FLOPs over the HBM limit (247 / 1.44 = 171).
        let paper = get("cosmoflow", "flops_per_sample").published
            / get("cosmoflow", "hbm_limit_per_sample").published;
        assert!((paper - 171.0).abs() < 1.0, "{paper}");
        for w in ["cosmoflow", "cosmoflow-v07", "deepcam", "resnet50"] {
            let g = workloads::build(w, &BuildOptions::default()).unwrap();
            let c = cost(&g, 1, Precision::AmpFp16);
            let limit = get(w, "hbm_limit_per_sample");
            assert_eq!(limit.model, 2.0 * c.activation_bytes.value());
            assert_eq!(get(w, "flops_per_sample").model, c.flops_train.value());
            let ratio = get(w, "flop_per_hbm_byte_limit");
            assert!((ratio.model - c.flops_train.value() / limit.model).abs() < 1e-9);
            for f in figures.iter().filter(|f| f.workload == w) {
                assert!((f.ratio - f.model / f.published).abs() < 1e-12, "{f:?}");
            }
        }
        // The stored sample is the shipped data set's.
        let data = crate::catalog::workload_data("resnet50").unwrap().unwrap();
        assert_eq!(
            get("resnet50", "sample_bytes").model,
            data.dataset.unwrap().sample_bytes.value.value()
        );
    }
}
