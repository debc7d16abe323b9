//! What a prediction assumes besides workload, system and batch: overlap, where the data lives,
//! epochs, quality, and the [`Scenario`] that holds them.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::collective::Algorithm;
use crate::dataset::Convergence;
use crate::roofline::Efficiency;

/// How communication and input movement overlap with compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Perfect overlap: the step takes the longest of compute, input and allreduce (the
    /// lower bound of \[004\] §V-C).
    Full,
    /// No overlap: the step takes their sum.
    None,
}

impl FromStr for Overlap {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "full" => Ok(Overlap::Full),
            "none" => Ok(Overlap::None),
            _ => Err(format!("unknown overlap `{s}`; valid: full, none")),
        }
    }
}

/// Where a node's share of the training set lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataLocation {
    /// Choose by capacity: host memory if the share fits, else node-local NVMe, else the
    /// burst buffer, else the PFS.
    Auto,
    /// Staged into host memory before training (from the PFS, where there is one).
    Ddr,
    /// Staged to node-local NVMe before training.
    Nvme,
    /// Staged to the shared burst buffer before training.
    #[serde(rename = "burst-buffer")]
    BurstBuffer,
    /// Streamed from the parallel file system every epoch.
    Pfs,
}

impl DataLocation {
    /// Name on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            DataLocation::Auto => "auto",
            DataLocation::Ddr => "ddr",
            DataLocation::Nvme => "nvme",
            DataLocation::BurstBuffer => "burst-buffer",
            DataLocation::Pfs => "pfs",
        }
    }
}

impl fmt::Display for DataLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DataLocation {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            DataLocation::Auto,
            DataLocation::Ddr,
            DataLocation::Nvme,
            DataLocation::BurstBuffer,
            DataLocation::Pfs,
        ]
        .into_iter()
        .find(|l| l.name() == s)
        .ok_or_else(|| {
            format!("unknown data location `{s}`; valid: auto, ddr, nvme, burst-buffer, pfs")
        })
    }
}

/// How many epochs to train.
#[derive(Debug, Clone, PartialEq)]
pub enum Epochs {
    /// A fixed number.
    Fixed(f64),
    /// From a convergence curve at the global batch.
    Curve(Convergence),
}

/// Valid FLOPS (\[001\] Eq. 1-2): FLOPS x (achieved / target quality)^n.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Quality {
    /// Quality the run achieves.
    pub achieved: f64,
    /// Target quality.
    pub target: f64,
    /// Sensitivity n: 5 for image classification, 10 for weather analytics \[001\].
    pub exponent: f64,
}

/// What times a device's layers where no calibrated profile does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelModel {
    /// The device-transferable kernel model fitted on measured GPU kernels
    /// ([`crate::transfer::Model::builtin`]), for GPUs whose device file gives its figures;
    /// the ideal bound for other devices. Never faster than the ideal bound.
    #[default]
    Transfer,
    /// The ideal bound: every layer at the datasheet peak and bandwidth (times the
    /// efficiencies), an upper bound on speed.
    Ideal,
}

impl FromStr for KernelModel {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "transfer" => Ok(KernelModel::Transfer),
            "ideal" => Ok(KernelModel::Ideal),
            _ => Err(format!(
                "unknown kernel model `{s}`; valid: transfer, ideal"
            )),
        }
    }
}

/// The configuration of one prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Nodes.
    pub nodes: u32,
    /// Allreduce algorithm.
    pub collective: Algorithm,
    /// Overlap of compute, input and communication.
    pub overlap: Overlap,
    /// Where the data set lives.
    pub location: DataLocation,
    /// Bytes per gradient element on the wire: 4 (FP32, default) or 2 (FP16 compression,
    /// \[001\] §7.5).
    pub gradient_bytes: u64,
    /// Attained fractions of peak, for the ideal bound.
    pub efficiency: Efficiency,
    /// What times a GPU's layers where no calibrated profile does.
    pub kernel_model: KernelModel,
    /// CPU preprocessing throughput per node, samples per second.
    pub preprocess_rate: Option<f64>,
    /// Raw / stored size of the data set (1 = uncompressed).
    pub compression: f64,
    /// Epochs to train.
    pub epochs: Epochs,
    /// Quality reached, for Valid FLOPS.
    pub quality: Option<Quality>,
}

impl Scenario {
    /// A scenario on `nodes` nodes with the defaults: best collective, full overlap,
    /// automatic data location, FP32 gradients, the transferred kernel model over the ideal
    /// bound at full efficiency, no preprocessing limit,
    /// uncompressed data.
    pub fn new(nodes: u32, epochs: Epochs) -> Scenario {
        Scenario {
            nodes,
            collective: Algorithm::Best,
            overlap: Overlap::Full,
            location: DataLocation::Auto,
            gradient_bytes: 4,
            efficiency: Efficiency::IDEAL,
            kernel_model: KernelModel::Transfer,
            preprocess_rate: None,
            compression: 1.0,
            epochs,
            quality: None,
        }
    }
}
