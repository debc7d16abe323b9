//! Reference architecture tables (`data/evidence/reference/models_*.csv`, see the README there):
//! layer-by-layer output shapes, parameter counts and forward MACs of CosmoFlow (v1.0+ and
//! v0.7), DeepCAM and ResNet-50 from their public reference implementations. They are the
//! ground truth the built-in workloads are tested against, and the published figures that
//! validation compares the model's counts with.

use serde::Deserialize;

use crate::error::{Error, Result};

/// One row of a reference table, with the shape converted to ridgeline's channels-first
/// convention and the name stripped of the table's parenthetical annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceLayer {
    /// Layer name, e.g. `xception.block1.rep0.sepconv.conv1`.
    pub name: String,
    /// The table's op description, e.g. `Conv2d`.
    pub op: String,
    /// Output shape of one sample, channels first.
    pub out_shape: Vec<usize>,
    /// Trainable parameters.
    pub params: u64,
    /// Forward multiply-accumulates per sample (conv, transposed conv, dense only).
    pub macs_fwd: u64,
}

/// A workload's reference table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceTable {
    /// The built-in workload it describes.
    pub workload: &'static str,
    /// Where it comes from.
    pub source: &'static str,
    /// Rows in the table's order.
    pub rows: Vec<ReferenceLayer>,
}

impl ReferenceTable {
    /// Sum of parameters.
    pub fn total_params(&self) -> u64 {
        self.rows.iter().map(|r| r.params).sum()
    }

    /// Sum of forward MACs per sample.
    pub fn total_macs(&self) -> u64 {
        self.rows.iter().map(|r| r.macs_fwd).sum()
    }
}

#[derive(Debug, Deserialize)]
struct Row {
    layer: String,
    op: String,
    out_shape: String,
    params: u64,
    macs_fwd: u64,
    variant: String,
}

struct Spec {
    workload: &'static str,
    path: &'static str,
    text: &'static str,
    /// Only rows whose `variant` starts with this.
    variant_prefix: &'static str,
    /// Keras tables list shapes channels-last.
    channels_last: bool,
    source: &'static str,
}

const COSMOFLOW_CSV: &str = include_str!("../../data/evidence/reference/models_cosmoflow.csv");
const COSMOFLOW_SOURCE: &str = "mlcommons/hpc cosmoflow/models/cosmoflow.py + configs/cosmo.yaml";

const SPECS: &[Spec] = &[
    Spec {
        workload: "cosmoflow",
        path: "data/evidence/reference/models_cosmoflow.csv",
        text: COSMOFLOW_CSV,
        variant_prefix: "v1.0+",
        channels_last: true,
        source: COSMOFLOW_SOURCE,
    },
    Spec {
        workload: "cosmoflow-v07",
        path: "data/evidence/reference/models_cosmoflow.csv",
        text: COSMOFLOW_CSV,
        variant_prefix: "v0.7",
        channels_last: true,
        source: COSMOFLOW_SOURCE,
    },
    Spec {
        workload: "deepcam",
        path: "data/evidence/reference/models_deepcam.csv",
        text: include_str!("../../data/evidence/reference/models_deepcam.csv"),
        variant_prefix: "",
        channels_last: false,
        source: "mlcommons/hpc deepcam/src/deepCam/architecture/deeplab_xception.py",
    },
    Spec {
        workload: "resnet50",
        path: "data/evidence/reference/models_resnet50.csv",
        text: include_str!("../../data/evidence/reference/models_resnet50.csv"),
        variant_prefix: "",
        channels_last: false,
        source: "torchvision models/resnet.py (ResNet-50 v1.5)",
    },
];

/// Names of the workloads that have a reference table.
pub fn workloads() -> Vec<&'static str> {
    SPECS.iter().map(|s| s.workload).collect()
}

/// The reference table of a built-in workload.
pub fn table(workload: &str) -> Result<ReferenceTable> {
    let spec = SPECS
        .iter()
        .find(|s| s.workload == workload)
        .ok_or_else(|| Error::UnknownName {
            kind: "reference table",
            name: workload.to_owned(),
            valid: workloads().into_iter().map(str::to_owned).collect(),
        })?;
    let mut reader = csv::Reader::from_reader(spec.text.as_bytes());
    let mut rows = Vec::new();
    for (i, record) in reader.deserialize::<Row>().enumerate() {
        let row = record.map_err(|e| Error::Parse {
            file: spec.path.into(),
            message: e.to_string(),
        })?;
        if !row.variant.starts_with(spec.variant_prefix) {
            continue;
        }
        let field = format!("row {} out_shape", i + 2);
        let mut shape = row
            .out_shape
            .split('x')
            .map(|d| d.trim().parse::<usize>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| {
                Error::invalid(
                    spec.path,
                    field,
                    format!("`{}` is not a shape", row.out_shape),
                )
            })?;
        if spec.channels_last && shape.len() > 1 {
            shape.rotate_right(1);
        }
        rows.push(ReferenceLayer {
            name: strip_annotations(&row.layer),
            op: row.op,
            out_shape: shape,
            params: row.params,
            macs_fwd: row.macs_fwd,
        });
    }
    Ok(ReferenceTable {
        workload: spec.workload,
        source: spec.source,
        rows,
    })
}

/// Removes parenthetical notes from a table's layer name: `conv2 (low-level 1x1)` ->
/// `conv2`, `...sepconv.conv1(depthwise)` -> `...sepconv.conv1`.
fn strip_annotations(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut depth = 0usize;
    for ch in name.chars() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(ch),
            _ => {}
        }
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn annotations_are_stripped() {
        assert_eq!(strip_annotations("conv2 (low-level 1x1)"), "conv2");
        assert_eq!(
            strip_annotations("a.sepconv.conv1(depthwise)"),
            "a.sepconv.conv1"
        );
        assert_eq!(
            strip_annotations("xception.relu_after_block1 (in-place; see NOTES)"),
            "xception.relu_after_block1"
        );
    }

    #[test]
    fn tables_have_the_published_totals() {
        // data/evidence/reference/README.md
        assert_eq!(table("cosmoflow").unwrap().total_params(), 8_907_556);
        assert_eq!(table("cosmoflow-v07").unwrap().total_params(), 5_597_604);
        assert_eq!(table("deepcam").unwrap().total_params(), 56_454_720);
        assert_eq!(table("resnet50").unwrap().total_params(), 25_557_032);
    }

    #[test]
    fn channels_last_shapes_are_rotated() {
        let t = table("cosmoflow").unwrap();
        assert_eq!(t.rows[0].out_shape, vec![32, 128, 128, 128]);
        assert_eq!(
            t.rows
                .iter()
                .find(|r| r.name == "flatten")
                .unwrap()
                .out_shape,
            vec![32768]
        );
    }
}
