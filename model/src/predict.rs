//! Step, epoch and time-to-solution prediction for a workload on a system
//! (docs/ARCHITECTURE.md "Node and cluster prediction"; \[004\] §V-C, §VI; \[003\] Eq.
//! 1-2; \[001\] §6).
//!
//! The work is split by what it depends on, so sweeps evaluate millions of configurations:
//! - [`StepModel`]: workload x precision. Per-layer FLOPs and HBM bytes as affine functions
//!   of the batch (flat arrays), the memory footprint, the input tensor size.
//! - [`Plan`]: x system x local batch. Compute time of a step on one device from the
//!   per-layer roofline with efficiencies (1 = the ideal bound), forward time for
//!   evaluation, whether it fits in memory.
//! - [`Plan::evaluate`]: x nodes. Input movement (where the node's share of the data set
//!   lives), allreduce (LogGP collectives), step time under full (max, the lower bound of
//!   \[004\]) or no overlap (sum), epoch, staging, time to solution, energy and cost. Plain
//!   arithmetic, no allocation.
//!
//! [`predict`] runs all three and adds the explanations a person reads: the data movement
//! per sample by source (bytes x gap, \[004\] Fig. 4), the HPC-AI roofline (\[001\] §6) and the
//! assumptions made.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use crate::collective::{self, Algorithm, Fabric};
use crate::cost::{self, GraphCost};
use crate::dataset::{Convergence, Dataset};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::kernels::{Kernel, step_kernels};
use crate::links::{Hierarchy, Level, node_network};
use crate::memory::{Footprint, Optimizer};
use crate::precision::Precision;
use crate::profile::{Profile, precision_name};
use crate::roofline::Efficiency;
use crate::system::{Sourced, System};
use crate::units::Bytes;

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

/// What bounds a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepBound {
    /// Per-layer compute (FLOP/s or HBM bandwidth on the device).
    Compute,
    /// Moving input samples to the device (and preprocessing them).
    Input,
    /// The gradient allreduce.
    Allreduce,
}

impl StepBound {
    /// Name in tables and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            StepBound::Compute => "compute",
            StepBound::Input => "input",
            StepBound::Allreduce => "allreduce",
        }
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
    /// Attained fractions of peak.
    pub efficiency: Efficiency,
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
    /// automatic data location, FP32 gradients, ideal efficiency, no preprocessing limit,
    /// uncompressed data.
    pub fn new(nodes: u32, epochs: Epochs) -> Scenario {
        Scenario {
            nodes,
            collective: Algorithm::Best,
            overlap: Overlap::Full,
            location: DataLocation::Auto,
            gradient_bytes: 4,
            efficiency: Efficiency::IDEAL,
            preprocess_rate: None,
            compression: 1.0,
            epochs,
            quality: None,
        }
    }
}

/// Per-layer costs of a workload at a precision as affine functions of the batch size:
/// FLOPs `f x b`, bytes `a x b + w`. Flat arrays, one entry per layer that does any work.
#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    workload: String,
    precision: Precision,
    matrix: Vec<bool>,
    flops_fwd: Vec<f64>,
    flops_bwd: Vec<f64>,
    act_fwd: Vec<f64>,
    weights_fwd: Vec<f64>,
    act_bwd: Vec<f64>,
    weights_bwd: Vec<f64>,
    /// Each layer's kernels at batch 1 and at batch 2 (their features are affine in the
    /// batch, so any batch follows), for calibrated profiles.
    kernels: Vec<[Vec<Kernel>; 2]>,
    /// Bytes the optimizer update moves: read the gradient, read and write the FP32 weights
    /// (and the compute copy under mixed precision), read and write the optimizer state.
    pub update_bytes: f64,
    /// Training FLOPs per sample.
    pub flops_per_sample: f64,
    /// HBM bytes of a step: per sample and fixed.
    pub hbm_per_sample: f64,
    /// HBM bytes of a step that do not depend on the batch (weights).
    pub hbm_fixed: f64,
    /// Trainable parameters.
    pub params: u64,
    /// Elements of one input sample.
    pub input_elements: u64,
    /// The memory footprint (SGD with momentum unless built otherwise).
    pub footprint: Footprint,
}

impl StepModel {
    /// The model of `graph` at `precision`, with `optimizer` for the footprint.
    pub fn new(graph: &Graph, precision: Precision, optimizer: Optimizer) -> StepModel {
        let one = cost::cost(graph, 1, precision);
        let two = cost::cost(graph, 2, precision);
        Self::from_costs(graph, &one, &two, optimizer)
    }

    fn from_costs(
        graph: &Graph,
        one: &GraphCost<'_>,
        two: &GraphCost<'_>,
        optimizer: Optimizer,
    ) -> StepModel {
        let mut m = StepModel {
            workload: graph.name().to_owned(),
            precision: one.precision,
            matrix: Vec::new(),
            flops_fwd: Vec::new(),
            flops_bwd: Vec::new(),
            act_fwd: Vec::new(),
            weights_fwd: Vec::new(),
            act_bwd: Vec::new(),
            weights_bwd: Vec::new(),
            kernels: Vec::new(),
            update_bytes: 0.0,
            flops_per_sample: one.flops_train.value(),
            hbm_per_sample: two.hbm_bytes_train.value() - one.hbm_bytes_train.value(),
            hbm_fixed: 2.0 * one.hbm_bytes_train.value() - two.hbm_bytes_train.value(),
            params: one.params,
            input_elements: graph.input_shape().elements(),
            footprint: Footprint::from_cost(graph, one, optimizer),
        };
        let fp32 = 4.0 * one.params as f64;
        let compute_copy = if one.precision.compute_bytes() < 4 {
            one.params as f64 * one.precision.compute_bytes() as f64
        } else {
            0.0
        };
        m.update_bytes = 3.0 * fp32 + compute_copy + 2.0 * m.footprint.optimizer_state.value();
        let (k1, k2) = (step_kernels(graph, one), step_kernels(graph, two));
        for (((a, b), k1), k2) in one.layers.iter().zip(&two.layers).zip(k1).zip(k2) {
            let work = a.flops_fwd.value() + a.flops_bwd.value();
            let bytes = a.hbm_bytes_fwd.value() + a.hbm_bytes_bwd.value();
            if work == 0.0 && bytes == 0.0 {
                continue;
            }
            // Bytes are affine in the batch: a b + w, from b = 1 and b = 2.
            let (f1, f2) = (a.hbm_bytes_fwd.value(), b.hbm_bytes_fwd.value());
            let (g1, g2) = (a.hbm_bytes_bwd.value(), b.hbm_bytes_bwd.value());
            m.matrix.push(a.matrix);
            m.kernels.push([k1, k2]);
            m.flops_fwd.push(a.flops_fwd.value());
            m.flops_bwd.push(a.flops_bwd.value());
            m.act_fwd.push(f2 - f1);
            m.weights_fwd.push(2.0 * f1 - f2);
            m.act_bwd.push(g2 - g1);
            m.weights_bwd.push(2.0 * g1 - g2);
        }
        m
    }

    /// The precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The workload's name.
    pub fn workload(&self) -> &str {
        &self.workload
    }

    /// Forward time and training-step time of one device at local batch `b`: the sum over
    /// layers and passes of `max(F / (peak x eff), B / (BW x eff))` — or, for layers a
    /// calibrated `profile` has fits for, their fitted kernel times — plus the optimizer
    /// update at the memory bandwidth.
    pub fn device_times(
        &self,
        b: f64,
        rates: &DeviceRates,
        profile: Option<&Profile>,
    ) -> (f64, f64) {
        let mut fwd = 0.0;
        let mut bwd = self.update_bytes / rates.bandwidth;
        let precision = precision_name(self.precision);
        for i in 0..self.matrix.len() {
            if let Some(p) = profile {
                let [k1, k2] = &self.kernels[i];
                let fitted = (!k1.is_empty())
                    .then(|| Some((p.layer_times(k1, precision)?, p.layer_times(k2, precision)?)))
                    .flatten();
                if let Some(((f1, b1), (f2, b2))) = fitted {
                    fwd += f1 + (f2 - f1) * (b - 1.0);
                    bwd += b1 + (b2 - b1) * (b - 1.0);
                    continue;
                }
            }
            let peak = if self.matrix[i] {
                rates.matrix
            } else {
                rates.vector
            };
            fwd += (b * self.flops_fwd[i] / peak)
                .max((b * self.act_fwd[i] + self.weights_fwd[i]) / rates.bandwidth);
            bwd += (b * self.flops_bwd[i] / peak)
                .max((b * self.act_bwd[i] + self.weights_bwd[i]) / rates.bandwidth);
        }
        (fwd, fwd + bwd)
    }
}

/// A device's attained rates: matrix and vector FLOP/s and memory bytes/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeviceRates {
    /// FLOP/s of matrix ops.
    pub matrix: f64,
    /// FLOP/s of vector ops.
    pub vector: f64,
    /// Bytes/s of device memory.
    pub bandwidth: f64,
}

impl DeviceRates {
    /// The rates of `system`'s device at `precision` with `efficiency`.
    pub fn of(system: &System, precision: Precision, efficiency: Efficiency) -> Result<Self> {
        let d = &system.device;
        Ok(DeviceRates {
            matrix: d.matrix_peak(precision)?.rate.value() * efficiency.compute,
            vector: d.vector_peak(precision)?.rate.value() * efficiency.compute,
            // Unknown until measured (`local`): memory time is not counted, and the
            // prediction says so (a lower bound on time).
            bandwidth: d
                .memory_bandwidth
                .as_ref()
                .map_or(f64::INFINITY, |b| b.value.value() * efficiency.memory),
        })
    }
}

/// A workload on one system at one local batch: everything except the node count.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    model: &'a StepModel,
    system: &'a System,
    dataset: &'a Dataset,
    scenario: &'a Scenario,
    /// Local batch per device.
    pub batch: u64,
    /// Devices per node.
    pub devices_per_node: u32,
    /// Compute time of a training step on one device.
    pub compute: f64,
    /// Forward time of one evaluation step on one device.
    pub eval_compute: f64,
    /// Memory one device needs.
    pub memory: Bytes,
    /// Memory one device has.
    pub capacity: Bytes,
    /// Matrix peak of one device (for the fraction of peak).
    pub peak: f64,
    /// The largest local batch that fits, where this one does not.
    max_batch: Option<u64>,
    /// Bytes per sample as stored (after compression), scaled to this workload's input.
    stored_sample: f64,
    /// Bytes per sample on the device (the input tensor).
    device_sample: f64,
    gradient_bytes: f64,
    /// Watts of one node (its own figure, else its devices' TDP).
    node_power: Option<f64>,
    price: Option<f64>,
    gaps: Gaps,
}

/// Seconds per byte of each level for one device, by node count where it matters.
#[derive(Debug, Clone, Copy)]
struct Gaps {
    pcie: Option<f64>,
    host: Option<f64>,
    hbm: f64,
    nvme: Option<f64>,
    nvme_write: Option<f64>,
    /// The PFS aggregate bandwidth, and the node's network and PFS client bandwidths that
    /// cap its share.
    pfs_total: Option<f64>,
    node_network: Option<f64>,
    pfs_client: Option<f64>,
    host_capacity: Option<f64>,
    nvme_capacity: Option<f64>,
    /// The burst buffer's aggregate bandwidth and capacity.
    bb_total: Option<f64>,
    bb_capacity: Option<f64>,
}

/// The numbers of one configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Outcome {
    /// Nodes.
    pub nodes: u32,
    /// Devices.
    pub devices: u64,
    /// Local batch per device.
    pub local_batch: u64,
    /// Global batch.
    pub global_batch: u64,
    /// Where the data lives.
    pub data_location: DataLocation,
    /// Compute time of a step.
    pub compute_s: f64,
    /// Input movement (and preprocessing) time of a step.
    pub input_s: f64,
    /// Allreduce time of a step.
    pub allreduce_s: f64,
    /// The allreduce algorithm used.
    pub collective: Algorithm,
    /// Step time.
    pub step_time_s: f64,
    /// What bounds the step.
    pub bound: StepBound,
    /// Global samples per second.
    pub samples_per_s: f64,
    /// Samples per second per device.
    pub samples_per_s_per_device: f64,
    /// Epochs to solution.
    pub epochs: f64,
    /// Time of one epoch (training and evaluation) with the data at its steady location.
    pub epoch_time_s: f64,
    /// Evaluation time per epoch.
    pub eval_time_s: f64,
    /// Staging time before training.
    pub staging_s: f64,
    /// Time to solution: staging + epochs x epoch.
    pub time_to_solution_s: f64,
    /// Achieved FLOP/s of the job.
    pub achieved_flops: f64,
    /// Achieved / aggregate matrix peak.
    pub fraction_of_peak: f64,
    /// Memory one device needs.
    pub memory_per_device_bytes: f64,
    /// Whether it fits the device.
    pub fits: bool,
    /// Device-hours to solution (the compute budget of \[003\] Table 6).
    pub compute_budget_device_hours: f64,
    /// Joules to solution, when the system gives power.
    pub energy_j: Option<f64>,
    /// Price to solution, when the system gives a price per node-hour.
    pub cost: Option<f64>,
}

impl Outcome {
    /// Every figure finite, and the step longer than zero: a non-finite input (an absurd
    /// figure or fit) must not print as `inf`, `NaN` or a zero step.
    fn check_finite(&self) -> std::result::Result<(), Infeasible> {
        let figures = [
            ("compute time", self.compute_s),
            ("input time", self.input_s),
            ("allreduce time", self.allreduce_s),
            ("step time", self.step_time_s),
            ("throughput", self.samples_per_s),
            ("epochs", self.epochs),
            ("epoch time", self.epoch_time_s),
            ("evaluation time", self.eval_time_s),
            ("staging time", self.staging_s),
            ("time to solution", self.time_to_solution_s),
            ("achieved FLOP/s", self.achieved_flops),
            ("fraction of peak", self.fraction_of_peak),
            ("memory per device", self.memory_per_device_bytes),
            ("compute budget", self.compute_budget_device_hours),
            ("energy", self.energy_j.unwrap_or(0.0)),
            ("cost", self.cost.unwrap_or(0.0)),
        ];
        match figures.iter().find(|(_, v)| !v.is_finite()) {
            Some((field, _)) => Err(Infeasible::NotFinite { field }),
            None if self.step_time_s <= 0.0 => Err(Infeasible::NotFinite { field: "step time" }),
            None => Ok(()),
        }
    }
}

/// Which storage figures a system gives, for saying which is missing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StorageKeys {
    /// `node.host_memory_gib`, bytes.
    pub host: Option<f64>,
    /// `node.nvme_capacity_gb`, bytes.
    pub nvme: Option<f64>,
    /// Whether `node.nvme_read_gbs` is given (or the NVMe is `local`'s disk).
    pub nvme_read: bool,
    /// `cluster.burst_buffer_capacity_tb`, bytes.
    pub burst_buffer: Option<f64>,
    /// Whether `cluster.pfs_bandwidth_gbs` is given.
    pub pfs: bool,
}

impl StorageKeys {
    /// What to add to the system file for a share of `share` bytes to have a place.
    fn missing(&self, share: f64) -> String {
        let gb = |v: f64| format!("{:.1} GB", v / 1e9);
        let mut parts = Vec::new();
        match self.host {
            Some(h) => parts.push(format!("host memory holds {}", gb(h))),
            None => parts.push("the system gives no host memory (node.host_memory_gib)".into()),
        }
        match (self.nvme, self.nvme_read) {
            (Some(c), false) if share <= c => parts.push(format!(
                "the NVMe holds it ({}) but the system gives no NVMe read bandwidth: add \
                 node.nvme_read_gbs",
                gb(c)
            )),
            (Some(c), _) => parts.push(format!("the NVMe holds {}", gb(c))),
            (None, _) => parts.push(
                "the system gives no node-local NVMe (node.nvme_capacity_gb and \
                 node.nvme_read_gbs)"
                    .into(),
            ),
        }
        if let Some(b) = self.burst_buffer {
            parts.push(format!("the burst buffer holds {} for all nodes", gb(b)));
        }
        if !self.pfs {
            parts.push(
                "the system gives no parallel file system (cluster.pfs_bandwidth_gbs)".into(),
            );
        }
        parts.join("; ")
    }
}

/// Why a configuration cannot be evaluated (counted by sweeps, an error for `predict`).
/// Plain data, so sweeps that meet millions of them allocate nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Infeasible {
    /// More nodes than the system has.
    TooManyNodes {
        /// Nodes asked for.
        nodes: u32,
        /// Nodes the system has.
        available: u32,
    },
    /// A node's share of the data set does not fit where it was asked to live.
    DataTooLarge {
        /// Where.
        location: DataLocation,
        /// Bytes of a node's share.
        share: f64,
        /// Bytes available there.
        capacity: f64,
    },
    /// The system lacks the data location asked for (or any, for `auto`).
    NoDataLocation {
        /// Where.
        location: DataLocation,
        /// Bytes of a node's share.
        share: f64,
        /// What the system gives: host memory and NVMe capacity (bytes), and whether it
        /// gives the NVMe's read bandwidth and a parallel file system.
        storage: StorageKeys,
    },
    /// The footprint at this batch does not fit the device's memory.
    DoesNotFit {
        /// Bytes one device needs.
        needed: f64,
        /// Bytes one device has.
        capacity: f64,
        /// The largest local batch that fits (0: not even one sample).
        max_batch: u64,
    },
    /// No epochs for this global batch.
    Convergence {
        /// The global batch.
        global_batch: u64,
        /// Smallest measured batch.
        lo: u64,
        /// Largest measured batch.
        hi: u64,
    },
    /// A figure of the outcome is not a finite number (inputs beyond any real run).
    NotFinite {
        /// The outcome field.
        field: &'static str,
    },
    /// Recursive halving-doubling at a device count that is not a power of two.
    Collective {
        /// Devices.
        devices: u64,
    },
}

impl Infeasible {
    /// The command-line option the problem is about.
    pub fn option(&self) -> &'static str {
        match self {
            Infeasible::TooManyNodes { .. } => "nodes",
            Infeasible::DoesNotFit { .. } => "batch",
            Infeasible::DataTooLarge { .. } | Infeasible::NoDataLocation { .. } => "data-location",
            Infeasible::Convergence { .. } => "batch",
            Infeasible::Collective { .. } => "collective",
            Infeasible::NotFinite { .. } => "epochs",
        }
    }

    /// A short label for counting in sweeps.
    pub fn kind(&self) -> &'static str {
        match self {
            Infeasible::TooManyNodes { .. } => "more nodes than the system has",
            Infeasible::DoesNotFit { .. } => "does not fit in device memory",
            Infeasible::DataTooLarge { .. } => "data set share too large for its location",
            Infeasible::NoDataLocation { .. } => "data location missing on the system",
            Infeasible::Convergence { .. } => "global batch outside the convergence data",
            Infeasible::Collective { .. } => "collective not applicable",
            Infeasible::NotFinite { .. } => "a figure is not a finite number",
        }
    }
}

impl fmt::Display for Infeasible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let gb = |v: f64| format!("{:.1} GB", v / 1e9);
        match *self {
            Infeasible::TooManyNodes { nodes, available } => write!(
                f,
                "the system lists {available} nodes, not {nodes}; `ridgeline predict` goes past \
                 the listed size with a warning, and elsewhere a copy of the system file with a \
                 larger `cluster.nodes` does"
            ),
            Infeasible::DoesNotFit {
                needed,
                capacity,
                max_batch,
            } => {
                let gib = |v: f64| format!("{:.2} GiB", v / f64::from(1u32 << 30));
                write!(
                    f,
                    "one device needs {} at this batch but has {}; ",
                    gib(needed),
                    gib(capacity)
                )?;
                if max_batch == 0 {
                    f.write_str("not even one sample fits (`ridgeline memory` breaks it down)")
                } else {
                    write!(
                        f,
                        "the largest batch per device that fits is {max_batch} \
                         (`ridgeline memory` breaks it down)"
                    )
                }
            }
            Infeasible::DataTooLarge {
                location,
                share,
                capacity,
            } => write!(
                f,
                "a node's share of the data set ({}) exceeds its {} ({}); use more nodes or \
                 another --data-location",
                gb(share),
                match location {
                    DataLocation::Ddr => "host memory",
                    DataLocation::BurstBuffer => "burst buffer (the whole data set)",
                    _ => "NVMe",
                },
                gb(capacity)
            ),
            Infeasible::NoDataLocation {
                location: DataLocation::Auto,
                share,
                storage,
            } => write!(
                f,
                "a node's share of the data set ({}) has no place to live: {}",
                gb(share),
                storage.missing(share)
            ),
            Infeasible::NoDataLocation {
                location, storage, ..
            } => f.write_str(match location {
                DataLocation::Ddr => "the system gives no host memory (node.host_memory_gib)",
                DataLocation::Nvme if storage.nvme.is_some() => {
                    "the system gives no NVMe read bandwidth: add node.nvme_read_gbs"
                }
                DataLocation::Nvme => {
                    "the system gives no node-local NVMe (node.nvme_capacity_gb and \
                     node.nvme_read_gbs)"
                }
                DataLocation::BurstBuffer => {
                    "the system gives no burst buffer (cluster.burst_buffer_capacity_tb and \
                     cluster.burst_buffer_gbs)"
                }
                _ => "the system gives no parallel file system (cluster.pfs_bandwidth_gbs)",
            }),
            Infeasible::Convergence {
                global_batch,
                lo,
                hi,
            } => write!(
                f,
                "global batch {global_batch} is outside the convergence data ({lo}..{hi}); \
                 ridgeline does not extrapolate: pass --epochs or a --convergence file that \
                 covers it"
            ),
            Infeasible::NotFinite { field } => write!(
                f,
                "the {field} of this configuration is not a finite number: an input (the \
                 epochs, the data set's size, a system figure) is beyond any real run"
            ),
            Infeasible::Collective { devices } => write!(
                f,
                "recursive halving-doubling needs a power-of-two device count, not {devices}; \
                 choose ring, tree, hier or best"
            ),
        }
    }
}

impl<'a> Plan<'a> {
    /// Plans `model` on `system` at local batch `batch`.
    pub fn new(
        model: &'a StepModel,
        system: &'a System,
        dataset: &'a Dataset,
        reference_input_elements: u64,
        scenario: &'a Scenario,
        batch: u64,
    ) -> Result<Plan<'a>> {
        if batch == 0 {
            return Err(Error::argument(
                "batch",
                0,
                "the batch per device must be at least 1",
            ));
        }
        if !(scenario.compression.is_finite() && scenario.compression >= 1.0) {
            return Err(Error::argument(
                "compression",
                scenario.compression,
                "the compression ratio (raw / stored size) must be at least 1",
            ));
        }
        if let Some(r) = scenario.preprocess_rate
            && !(r.is_finite() && r > 0.0)
        {
            return Err(Error::argument(
                "preprocess-rate",
                r,
                "must be a positive number of samples per second",
            ));
        }
        let rates = DeviceRates::of(system, model.precision, scenario.efficiency)?;
        let b = batch as f64;
        let (eval_compute, compute) = model.device_times(b, &rates, system.calibration.as_deref());
        let capacity = system.device_memory().map(|m| m.value).ok_or_else(|| {
            let profile = system.calibration.as_ref().map_or_else(String::new, |p| {
                format!(
                    "; the calibrated profile overlays `{}`, a bare device: point the profile's \
                     `system` field at a system file",
                    p.system
                )
            });
            Error::argument(
                "system",
                &system.name,
                format!(
                    "nowhere to train: device `{}` has no memory of its own \
                     (memory.capacity_gib) and the system gives no host memory \
                     (node.host_memory_gib){profile}; give a system file with \
                     node.host_memory_gib, or `local` for this machine",
                    system.device.name
                ),
            )
        })?;
        let memory = model.footprint.at(batch, capacity).total;
        let max_batch = (memory > capacity).then(|| model.footprint.max_batch(capacity));
        let node = &system.node;
        let k = node.devices.value;
        let gap = |bw: Option<f64>, shared: u32| bw.map(|v| f64::from(shared) / v);
        let network = node_network(system).map(|(bw, _)| bw.value());
        let gaps = Gaps {
            pcie: gap(node.pcie.as_ref().map(|p| p.value.value()), 1),
            host: gap(
                node.host_memory_bandwidth.as_ref().map(|h| h.value.value()),
                k,
            ),
            hbm: system
                .device
                .memory_bandwidth
                .as_ref()
                .map_or(0.0, |b| 1.0 / b.value.value()),
            // Storage of unknown bandwidth (`local`'s disk) is read at no cost, said so.
            nvme: gap(node.nvme_read.as_ref().map(|n| n.value.value()), k)
                .or(node.nvme_read_unknown.then_some(0.0)),
            nvme_write: node.nvme_write.as_ref().map(|n| 1.0 / n.value.value()),
            pfs_total: system
                .cluster
                .pfs_bandwidth
                .as_ref()
                .map(|p| p.value.value()),
            node_network: network,
            pfs_client: node.pfs_client.as_ref().map(|c| c.value.value()),
            host_capacity: node.host_memory.as_ref().map(|h| h.value.value()),
            nvme_capacity: node.nvme_capacity.as_ref().map(|n| n.value.value()),
            bb_total: system
                .cluster
                .burst_buffer_bandwidth
                .as_ref()
                .map(|b| b.value.value()),
            bb_capacity: system
                .cluster
                .burst_buffer_capacity
                .as_ref()
                .map(|b| b.value.value()),
        };
        let scale = model.input_elements as f64 / reference_input_elements.max(1) as f64;
        let node_power = node
            .power_w
            .as_ref()
            .map(|p| p.value)
            .or_else(|| system.device.tdp_w.as_ref().map(|t| t.value * f64::from(k)));
        Ok(Plan {
            model,
            system,
            dataset,
            scenario,
            batch,
            devices_per_node: k,
            compute,
            eval_compute,
            memory,
            capacity,
            peak: rates.matrix / scenario.efficiency.compute,
            max_batch,
            stored_sample: dataset.sample_bytes.value.value() * scale / scenario.compression,
            device_sample: (model.input_elements * model.precision.compute_bytes()) as f64,
            gradient_bytes: (model.params * scenario.gradient_bytes) as f64,
            node_power,
            price: system.cluster.price_per_node_hour.as_ref().map(|p| p.value),
            gaps,
        })
    }

    /// Where the data lives at `nodes` nodes, and the bytes of a node's share.
    #[allow(clippy::cast_precision_loss)]
    fn locate(&self, nodes: u32) -> std::result::Result<(DataLocation, f64), Infeasible> {
        let share = self.stored_sample * self.dataset.train_samples.value as f64 / f64::from(nodes);
        let g = &self.gaps;
        let storage = StorageKeys {
            host: g.host_capacity,
            nvme: g.nvme_capacity,
            nvme_read: g.nvme.is_some(),
            burst_buffer: g.bb_capacity,
            pfs: g.pfs_total.is_some(),
        };
        let missing = |location| Infeasible::NoDataLocation {
            location,
            share,
            storage,
        };
        let fits = |cap: Option<f64>| cap.is_some_and(|c| share <= c);
        let check = |location, capacity: Option<f64>, present: bool| match capacity {
            Some(c) if present && share > c => Err(Infeasible::DataTooLarge {
                location,
                share,
                capacity: c,
            }),
            Some(_) if present => Ok((location, share)),
            _ => Err(missing(location)),
        };
        // The burst buffer is shared: the whole data set (every node's share) must fit.
        let whole = share * f64::from(nodes);
        let bb_fits = g.bb_capacity.is_some_and(|c| whole <= c);
        match self.scenario.location {
            DataLocation::Auto if fits(g.host_capacity) => Ok((DataLocation::Ddr, share)),
            DataLocation::Auto if g.nvme.is_some() && fits(g.nvme_capacity) => {
                Ok((DataLocation::Nvme, share))
            }
            DataLocation::Auto if bb_fits => Ok((DataLocation::BurstBuffer, share)),
            DataLocation::Auto if g.pfs_total.is_some() => Ok((DataLocation::Pfs, share)),
            DataLocation::Ddr => check(DataLocation::Ddr, g.host_capacity, true),
            DataLocation::Nvme => check(DataLocation::Nvme, g.nvme_capacity, g.nvme.is_some()),
            DataLocation::BurstBuffer => match g.bb_capacity {
                Some(c) if whole > c => Err(Infeasible::DataTooLarge {
                    location: DataLocation::BurstBuffer,
                    share: whole,
                    capacity: c,
                }),
                Some(_) => Ok((DataLocation::BurstBuffer, share)),
                None => Err(missing(DataLocation::BurstBuffer)),
            },
            DataLocation::Pfs if g.pfs_total.is_some() => Ok((DataLocation::Pfs, share)),
            location => Err(missing(location)),
        }
    }

    /// Bytes per second one node reads from the PFS when `nodes` nodes read it at once:
    /// its share of the aggregate, capped by its network and its PFS client.
    fn pfs_per_node(&self, nodes: u32) -> Option<f64> {
        let g = &self.gaps;
        let per_node = g.pfs_total? / f64::from(nodes);
        let per_node = g.node_network.map_or(per_node, |n| per_node.min(n));
        Some(g.pfs_client.map_or(per_node, |c| per_node.min(c)))
    }

    /// Seconds per stored byte from the PFS for one device at `nodes` nodes.
    fn pfs_gap(&self, nodes: u32) -> Option<f64> {
        self.pfs_per_node(nodes)
            .map(|per_node| f64::from(self.devices_per_node) / per_node)
    }

    /// Seconds per stored byte from the burst buffer for one device at `nodes` nodes: the
    /// node's share of its aggregate, capped by the node's network.
    fn bb_gap(&self, nodes: u32) -> Option<f64> {
        let g = &self.gaps;
        let per_node = g.bb_total? / f64::from(nodes);
        let per_node = g.node_network.map_or(per_node, |n| per_node.min(n));
        Some(f64::from(self.devices_per_node) / per_node)
    }

    /// Seconds to stage the data set before training (\[003\] §3.1.2: MLPerf HPC's timer
    /// starts when the data set, resting on the parallel file system, is first touched, so
    /// staging into node-local storage counts). Each of `nodes` nodes copies its `share`
    /// from the PFS at its share of the PFS (capped by its network and client) into host
    /// memory, or into NVMe (capped by the NVMe's write bandwidth); the burst buffer takes
    /// the whole data set at the smaller of the two file systems' aggregates. Without a
    /// PFS the data set is taken to start where it is read (the prediction says so).
    fn staging(&self, location: DataLocation, share: f64, nodes: u32) -> f64 {
        let g = &self.gaps;
        let seconds = |bytes: f64, rate: f64| if rate.is_finite() { bytes / rate } else { 0.0 };
        match location {
            DataLocation::Ddr | DataLocation::Nvme => {
                let Some(pfs) = self.pfs_per_node(nodes) else {
                    return 0.0;
                };
                let write = match location {
                    DataLocation::Nvme => g.nvme_write.map_or(f64::INFINITY, |w| 1.0 / w),
                    _ => f64::INFINITY,
                };
                seconds(share, pfs.min(write))
            }
            DataLocation::BurstBuffer => match (g.pfs_total, g.bb_total) {
                (Some(pfs), Some(bb)) => seconds(share * f64::from(nodes), pfs.min(bb)),
                _ => 0.0,
            },
            DataLocation::Pfs | DataLocation::Auto => 0.0,
        }
    }

    /// Input seconds per sample for one device with the data at `location`.
    fn input_per_sample(&self, location: DataLocation, nodes: u32) -> f64 {
        let g = &self.gaps;
        // Host to device: the PCIe link, or for a device without one (a CPU) its memory.
        let host_link = self.device_sample * g.pcie.unwrap_or(g.hbm);
        let storage = match location {
            DataLocation::Ddr | DataLocation::Auto => self.stored_sample * g.host.unwrap_or(0.0),
            DataLocation::Nvme => self.stored_sample * g.nvme.unwrap_or(0.0),
            DataLocation::BurstBuffer => self.stored_sample * self.bb_gap(nodes).unwrap_or(0.0),
            DataLocation::Pfs => self.stored_sample * self.pfs_gap(nodes).unwrap_or(0.0),
        };
        let preprocess = self
            .scenario
            .preprocess_rate
            .map_or(0.0, |r| f64::from(self.devices_per_node) / r);
        host_link.max(storage) + preprocess
    }

    /// Evaluates the configuration on `nodes` nodes.
    #[allow(clippy::cast_precision_loss)]
    pub fn evaluate(
        &self,
        nodes: u32,
        fabric: &Fabric,
    ) -> std::result::Result<Outcome, Infeasible> {
        self.evaluate_sharing(nodes, nodes, fabric)
    }

    /// Evaluates one job on `nodes` nodes while `total_nodes` nodes (this job and others
    /// like it, as in an ensemble) share the parallel file system.
    #[allow(clippy::cast_precision_loss)]
    pub fn evaluate_sharing(
        &self,
        nodes: u32,
        total_nodes: u32,
        fabric: &Fabric,
    ) -> std::result::Result<Outcome, Infeasible> {
        let available = self.system.cluster.nodes.value;
        if total_nodes > available || nodes == 0 || total_nodes < nodes {
            return Err(Infeasible::TooManyNodes {
                nodes: total_nodes,
                available,
            });
        }
        if let Some(max_batch) = self.max_batch {
            return Err(Infeasible::DoesNotFit {
                needed: self.memory.value(),
                capacity: self.capacity.value(),
                max_batch,
            });
        }
        let devices = u64::from(self.devices_per_node) * u64::from(nodes);
        let global = self.batch * devices;
        let epochs = match &self.scenario.epochs {
            Epochs::Fixed(e) => *e,
            Epochs::Curve(c) => c.epochs(global).ok_or_else(|| {
                let (lo, hi) = c.range();
                Infeasible::Convergence {
                    global_batch: global,
                    lo,
                    hi,
                }
            })?,
        };
        let (location, share) = self.locate(nodes)?;
        let b = self.batch as f64;
        let input = b * self.input_per_sample(location, total_nodes);
        let ar = collective::allreduce_time(fabric, self.gradient_bytes, self.scenario.collective)
            .ok_or(Infeasible::Collective { devices })?;
        let allreduce = ar.time.value();
        let combine = |parts: &[f64]| match self.scenario.overlap {
            Overlap::Full => parts.iter().copied().fold(0.0, f64::max),
            Overlap::None => parts.iter().sum(),
        };
        let step = combine(&[self.compute, input, allreduce]);
        let bound = if self.compute >= input && self.compute >= allreduce {
            StepBound::Compute
        } else if input >= allreduce {
            StepBound::Input
        } else {
            StepBound::Allreduce
        };
        let train = self.dataset.train_samples.value as f64;
        let eval = self.dataset.eval_samples.value as f64;
        let g = global as f64;
        let eval_step = combine(&[self.eval_compute, input]);
        let eval_time = (eval / g).ceil() * eval_step;
        let epoch = (train / g).ceil() * step + eval_time;
        let staging = self.staging(location, share, total_nodes);
        let tts = staging + epochs * epoch;
        let achieved = self.model.flops_per_sample * g / step;
        let hours = tts / 3600.0;
        let outcome = Outcome {
            nodes,
            devices,
            local_batch: self.batch,
            global_batch: global,
            data_location: location,
            compute_s: self.compute,
            input_s: input,
            allreduce_s: allreduce,
            collective: ar.algorithm,
            step_time_s: step,
            bound,
            samples_per_s: g / step,
            samples_per_s_per_device: b / step,
            epochs,
            epoch_time_s: epoch,
            eval_time_s: eval_time,
            staging_s: staging,
            time_to_solution_s: tts,
            achieved_flops: achieved,
            fraction_of_peak: achieved / (self.peak * devices as f64),
            memory_per_device_bytes: self.memory.value(),
            fits: self.memory <= self.capacity,
            compute_budget_device_hours: hours * devices as f64,
            energy_j: self.node_power.map(|w| w * f64::from(nodes) * tts),
            cost: self.price.map(|p| p * f64::from(nodes) * hours),
        };
        outcome.check_finite()?;
        Ok(outcome)
    }
}

/// One source of data movement per sample, priced as bytes x gap (\[004\] Fig. 4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Movement {
    /// `model+activations`, `input samples` or `gradients`.
    pub source: &'static str,
    /// The level that limits it.
    pub level: Level,
    /// Bytes per sample across that level.
    pub bytes_per_sample: f64,
    /// Seconds per byte for one device (shared levels count their sharing).
    pub gap_s_per_byte: f64,
    /// The gap relative to device memory's.
    pub relative_cost: f64,
    /// bytes x gap: seconds per sample.
    pub cost_per_sample_s: f64,
}

/// One side of the HPC-AI roofline (\[001\] §6).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CommRoofline {
    /// Aggregate peak FLOP/s.
    pub peak_flops: f64,
    /// Communication bandwidth ceiling, bytes/s.
    pub bandwidth: f64,
    /// FLOPs per byte communicated.
    pub coi: f64,
    /// min(peak, bandwidth x COI).
    pub attainable_flops: f64,
    /// `compute` or `communication`.
    pub bound: &'static str,
}

/// The HPC-AI roofline of a step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HpcAiRoofline {
    /// One node: its devices' peak against the on-node fabric.
    pub single_node: Option<CommRoofline>,
    /// The job: all devices' peak against the network.
    pub distributed: Option<CommRoofline>,
    /// Measured ceilings of one device at the step's precision, from a calibrated profile
    /// (GEMM and convolution): lower horizontal lines under the datasheet peak.
    pub measured_ceilings: Vec<MeasuredCeiling>,
}

/// A measured compute ceiling of one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredCeiling {
    /// `gemm` or `conv`.
    pub kind: String,
    /// FLOP/s of one device.
    pub flops: f64,
    /// Fraction of the device's datasheet matrix peak.
    pub fraction_of_peak: f64,
}

/// A full prediction: the numbers and their explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    /// Workload.
    pub workload: String,
    /// System.
    pub system: String,
    /// Device.
    pub device: String,
    /// Precision.
    pub precision: Precision,
    /// Overlap model.
    pub overlap: Overlap,
    /// The numbers.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Memory one device has.
    pub device_memory_bytes: f64,
    /// Valid FLOPS, when a quality was given.
    pub valid_flops: Option<f64>,
    /// Data movement per sample by source.
    pub data_movement: Vec<Movement>,
    /// The HPC-AI roofline.
    pub hpc_ai_roofline: HpcAiRoofline,
    /// What the prediction assumed.
    pub assumptions: Vec<String>,
}

/// Everything a prediction needs besides the scenario.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The workload's step model.
    pub model: &'a StepModel,
    /// The system.
    pub system: &'a System,
    /// The data set.
    pub dataset: &'a Dataset,
    /// Input elements of the workload the data set describes (to scale sample bytes when
    /// the input size changes).
    pub reference_input_elements: u64,
}

/// Predicts one configuration at local batch `batch`. Anything that makes it impossible is
/// an error naming the cause.
pub fn predict(inputs: Inputs<'_>, scenario: &Scenario, batch: u64) -> Result<Prediction> {
    let Inputs {
        model,
        system,
        dataset,
        reference_input_elements,
    } = inputs;
    // A scenario may go past the nodes a system file lists (a catalog SuperPOD lists one
    // scalable unit; real ones have many): the same nodes, network and file system, said.
    let listed = system.cluster.nodes.value;
    let grown;
    let system = if scenario.nodes > listed {
        let mut s = system.clone();
        s.cluster.nodes = Sourced {
            value: scenario.nodes,
            source: format!(
                "{} nodes asked for; the system lists {listed} ({})",
                scenario.nodes, system.cluster.nodes.source
            ),
        };
        grown = s;
        &grown
    } else {
        system
    };
    let plan = Plan::new(
        model,
        system,
        dataset,
        reference_input_elements,
        scenario,
        batch,
    )?;
    let fabric = Fabric::of(system, scenario.nodes)?;
    let outcome = plan.evaluate(scenario.nodes, &fabric).map_err(|e| {
        let value = match e {
            Infeasible::TooManyNodes { nodes, .. } => nodes.to_string(),
            Infeasible::DoesNotFit { .. } => batch.to_string(),
            Infeasible::DataTooLarge { location, .. }
            | Infeasible::NoDataLocation { location, .. } => location.to_string(),
            Infeasible::Convergence { global_batch, .. } => {
                format!("{batch} (global {global_batch})")
            }
            Infeasible::Collective { .. } => scenario.collective.to_string(),
            Infeasible::NotFinite { field } => field.to_owned(),
        };
        Error::Argument {
            name: e.option(),
            value,
            message: format!("system `{}`: {e}", system.name),
        }
    })?;
    let h = Hierarchy::of(system, scenario.nodes);
    let b = batch as f64;
    let mut movement = Vec::new();
    let mut add = |source, level: Level, bytes: f64| {
        if let (Some(link), Some(rel)) = (h.get(level), h.relative_cost(level)) {
            let gap = link.gap();
            movement.push(Movement {
                source,
                level,
                bytes_per_sample: bytes,
                gap_s_per_byte: gap,
                relative_cost: rel,
                cost_per_sample_s: bytes * gap,
            });
        }
    };
    add(
        "model+activations",
        Level::Hbm,
        model.hbm_per_sample + model.hbm_fixed / b,
    );
    add("input samples", Level::Pcie, plan.device_sample);
    let storage = match outcome.data_location {
        DataLocation::Nvme => Some(Level::Nvme),
        DataLocation::BurstBuffer => Some(Level::BurstBuffer),
        DataLocation::Pfs => Some(Level::Pfs),
        DataLocation::Ddr | DataLocation::Auto => system
            .node
            .host_memory_bandwidth
            .as_ref()
            .map(|_| Level::HostMemory),
    };
    if let Some(level) = storage {
        add("input samples", level, plan.stored_sample);
    }
    let p = outcome.devices as f64;
    let ring_traffic = 2.0 * (p - 1.0) / p * plan.gradient_bytes;
    if outcome.devices > 1 {
        let level = if scenario.nodes > 1 {
            Level::Network
        } else {
            Level::Nvlink
        };
        add("gradients", level, ring_traffic / b);
    }

    let flops_node = model.flops_per_sample * b * f64::from(plan.devices_per_node);
    let k = f64::from(plan.devices_per_node);
    let comm = |peak: f64, bandwidth: f64, flops: f64, bytes: f64| {
        let coi = flops / bytes;
        let attainable = peak.min(bandwidth * coi);
        CommRoofline {
            peak_flops: peak,
            bandwidth,
            coi,
            attainable_flops: attainable,
            bound: if attainable < peak {
                "communication"
            } else {
                "compute"
            },
        }
    };
    let single_node = system
        .node
        .nvlink
        .as_ref()
        .filter(|_| plan.devices_per_node > 1)
        .map(|l| {
            comm(
                plan.peak * k,
                l.value.value() * k,
                flops_node,
                k * 2.0 * (k - 1.0) / k * plan.gradient_bytes,
            )
        });
    let n = f64::from(scenario.nodes);
    let distributed = node_network(system)
        .filter(|_| scenario.nodes > 1)
        .map(|(bw, _)| {
            comm(
                plan.peak * p,
                bw.value() * n,
                flops_node * n,
                n * 2.0 * (n - 1.0) / n * plan.gradient_bytes,
            )
        });

    let mut assumptions = system.assumptions.clone();
    if scenario.nodes > listed {
        assumptions.push(format!(
            "{} nodes, past the {listed} the system lists: more of the same nodes on the same \
             network, sharing the same parallel file system",
            scenario.nodes
        ));
    }
    assumptions.push(format!(
        "ideal device efficiency (compute {}, memory {}) unless calibrated",
        scenario.efficiency.compute, scenario.efficiency.memory
    ));
    if outcome.devices > 1 && !fabric.latencies_known {
        assumptions.push(
            "a link latency is not in the system file: those allreduce start-up terms are zero"
                .into(),
        );
    }
    if let Epochs::Curve(c) = &scenario.epochs
        && !c
            .points
            .iter()
            .any(|pt| pt.global_batch == outcome.global_batch)
    {
        assumptions.push(format!(
            "epochs interpolated (power law) between measured batches {:?}",
            c.points
                .iter()
                .map(|pt| pt.global_batch)
                .collect::<Vec<_>>()
        ));
    }
    if system.node.power_w.is_none() && outcome.energy_j.is_some() {
        assumptions
            .push("energy counts the devices' TDP only (no node power in the system file)".into());
    }
    if system.cluster.pfs_bandwidth.is_none() && outcome.data_location != DataLocation::Pfs {
        assumptions.push(format!(
            "no staging: the data set starts where it is read ({}), as the system has no \
             parallel file system to stage it from",
            outcome.data_location
        ));
    }
    if scenario.preprocess_rate.is_none() {
        assumptions.push("no CPU preprocessing limit (pass --preprocess-rate)".into());
    }
    let valid_flops = scenario
        .quality
        .map(|q| outcome.achieved_flops * (q.achieved / q.target).powf(q.exponent));
    Ok(Prediction {
        workload: model.workload.clone(),
        system: system.name.clone(),
        device: system.device.name.clone(),
        precision: model.precision,
        overlap: scenario.overlap,
        device_memory_bytes: plan.capacity.value(),
        valid_flops,
        data_movement: movement,
        hpc_ai_roofline: HpcAiRoofline {
            single_node,
            distributed,
            measured_ceilings: system
                .calibration
                .as_ref()
                .map(|p| {
                    p.ceilings
                        .iter()
                        .filter(|c| c.precision == precision_name(model.precision))
                        .map(|c| MeasuredCeiling {
                            kind: c.kind.clone(),
                            flops: c.tflops * 1e12,
                            fraction_of_peak: c.tflops * 1e12 / plan.peak,
                        })
                        .collect()
                })
                .unwrap_or_default(),
        },
        assumptions,
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::dataset::WorkloadData;
    use crate::graph::Graph;
    use crate::units::ByteRate;
    use crate::workloads::{self, BuildOptions};

    struct Setup {
        graph: Graph,
        data: WorkloadData,
    }

    fn setup(name: &str) -> Setup {
        Setup {
            graph: workloads::build(name, &BuildOptions::default()).unwrap(),
            data: catalog::workload_data(name).unwrap().unwrap(),
        }
    }

    fn run(
        s: &Setup,
        system: &System,
        p: Precision,
        scenario: &Scenario,
        batch: u64,
    ) -> Result<Prediction> {
        let model = StepModel::new(&s.graph, p, Optimizer::SgdMomentum);
        let inputs = Inputs {
            model: &model,
            system,
            dataset: s.data.dataset.as_ref().unwrap(),
            reference_input_elements: s.graph.input_shape().elements(),
        };
        predict(inputs, scenario, batch)
    }

    fn dominant(p: &Prediction) -> (&'static str, Level) {
        let m = p
            .data_movement
            .iter()
            .max_by(|a, b| a.cost_per_sample_s.total_cmp(&b.cost_per_sample_s))
            .unwrap();
        (m.source, m.level)
    }

    fn testbed() -> System {
        catalog::system_from_file(
            include_str!("../../tests/fixtures/hpcai500-testbed.toml"),
            "hpcai500-testbed.toml",
        )
        .unwrap()
    }

    /// \[004\] §V-C: "CosmoFlow data flow is bound by streaming input samples" from NVMe or
    /// Lustre on Cori GPU: staged on NVMe at the 8 nodes MLPerf HPC used, and streamed from
    /// Lustre when the whole 18-node partition shares its 700 GB/s (the system file gives
    /// no per-node client limit, so a smaller job is granted a larger, optimistic share).
    #[test]
    fn cosmoflow_on_cori_gpu_is_bound_by_input_streaming() {
        let s = setup("cosmoflow-v07");
        let cori = catalog::system("cori-gpu").unwrap();
        for (location, nodes) in [(DataLocation::Nvme, 8), (DataLocation::Pfs, 18)] {
            let mut sc = Scenario::new(nodes, Epochs::Fixed(50.0));
            sc.location = location;
            let p = run(&s, &cori, Precision::AmpFp16, &sc, 8).unwrap();
            assert_eq!(p.outcome.bound, StepBound::Input, "{location}");
            let (source, level) = dominant(&p);
            assert_eq!(source, "input samples");
            assert_eq!(
                level,
                if location == DataLocation::Nvme {
                    Level::Nvme
                } else {
                    Level::Pfs
                }
            );
        }
    }

    /// \[004\] §V-C: for DeepCAM "for samples fitting in memory, the model+activation
    /// activities dominate data movement cost" (batch at most 4 on a V100).
    #[test]
    fn deepcam_with_data_in_memory_is_bound_by_model_and_activations() {
        let mut s = setup("deepcam");
        // A training set that fits Cori GPU's host memory, as [004] §V-D limits it.
        s.data.dataset.as_mut().unwrap().train_samples.value = 4096;
        let cori = catalog::system("cori-gpu").unwrap();
        let mut sc = Scenario::new(8, Epochs::Fixed(10.0));
        sc.location = DataLocation::Ddr;
        for batch in [3, 4] {
            let p = run(&s, &cori, Precision::AmpFp16, &sc, batch).unwrap();
            assert_eq!(
                dominant(&p),
                ("model+activations", Level::Hbm),
                "batch {batch}"
            );
        }
    }

    /// \[004\] §V-C: ResNet-50 is bound by allreduce at small local batch; "as we increase
    /// the local batch size, the allreduce cost yields its dominance to the
    /// model+activation cost".
    #[test]
    fn resnet50_allreduce_dominates_data_movement_only_at_small_batch() {
        let s = setup("resnet50");
        let cori = catalog::system("cori-gpu").unwrap();
        let sc = Scenario::new(8, Epochs::Fixed(40.0));
        let small = run(&s, &cori, Precision::AmpFp16, &sc, 16).unwrap();
        assert_eq!(dominant(&small), ("gradients", Level::Network));
        let large = run(&s, &cori, Precision::AmpFp16, &sc, 256).unwrap();
        assert_eq!(dominant(&large), ("model+activations", Level::Hbm));
    }

    /// \[004\] Fig. 4 caption: relative per-byte costs on Cori GPU.
    #[test]
    fn cori_gpu_data_movement_uses_the_fig4_byte_costs() {
        let s = setup("cosmoflow-v07");
        let mut sc = Scenario::new(8, Epochs::Fixed(50.0));
        sc.location = DataLocation::Nvme;
        let p = run(
            &s,
            &catalog::system("cori-gpu").unwrap(),
            Precision::AmpFp16,
            &sc,
            8,
        )
        .unwrap();
        let rel = |level| {
            p.data_movement
                .iter()
                .find(|m| m.level == level)
                .unwrap()
                .relative_cost
        };
        assert_eq!(rel(Level::Hbm), 1.0);
        assert!((rel(Level::Network) - 72.0).abs() < 0.5);
        assert!((rel(Level::Pcie) - 56.0).abs() < 0.5);
        assert!((rel(Level::Nvme) - 2250.0).abs() < 1.0);
    }

    /// \[001\] §7.4: with 10 Gb/s Ethernet between 8-GPU NVLink nodes, Image Classification
    /// (ResNet-50) is compute-bound up to 32 GPUs and communication-bound at 64. Mixed
    /// precision with the batch doubled to 256 per GPU, as \[001\] §7.3 ran it.
    #[test]
    fn resnet50_on_10gbe_turns_communication_bound_between_32_and_64_gpus() {
        let s = setup("resnet50");
        let tb = testbed();
        let bound = |nodes| {
            let sc = Scenario::new(nodes, Epochs::Fixed(40.0));
            run(&s, &tb, Precision::AmpFp16, &sc, 256)
                .unwrap()
                .outcome
                .bound
        };
        assert_eq!(bound(2), StepBound::Compute, "16 GPUs");
        assert_eq!(bound(4), StepBound::Compute, "32 GPUs");
        assert_eq!(bound(8), StepBound::Allreduce, "64 GPUs");
        // FP16 gradient compression ([001] §7.5) halves the traffic: compute-bound again.
        let mut sc = Scenario::new(8, Epochs::Fixed(40.0));
        sc.gradient_bytes = 2;
        assert_eq!(
            run(&s, &tb, Precision::AmpFp16, &sc, 256)
                .unwrap()
                .outcome
                .bound,
            StepBound::Compute
        );
    }

    /// Issue 17: staging counts for every location the data set is copied to before
    /// training ([003] §3.1.2): host memory and NVMe at each node's share of the PFS (the
    /// NVMe also at its write bandwidth), the burst buffer at the smaller aggregate; the PFS
    /// itself is read in place.
    #[test]
    fn staging_counts_for_every_location() {
        let s = setup("cosmoflow-v07");
        let mut cori = catalog::system("cori-gpu").unwrap();
        let pfs = cori.cluster.pfs_bandwidth.as_ref().unwrap().value.value();
        let nic = 4.0 * 25e9;
        let at = |system: &System, location, nodes: u32| {
            let mut sc = Scenario::new(nodes, Epochs::Fixed(10.0));
            sc.location = location;
            run(&s, system, Precision::AmpFp16, &sc, 4).unwrap().outcome
        };
        let share = |nodes: u32| 262_144.0 * 16_777_216.0 / f64::from(nodes);
        let ddr = at(&cori, DataLocation::Ddr, 16);
        let per_node = (pfs / 16.0).min(nic);
        assert!(
            (ddr.staging_s - share(16) / per_node).abs() < 1e-6 * ddr.staging_s,
            "{ddr:?}"
        );
        let nvme = at(&cori, DataLocation::Nvme, 8);
        assert!(nvme.staging_s > 0.0);
        assert_eq!(at(&cori, DataLocation::Pfs, 8).staging_s, 0.0);
        // A burst buffer of 1.7 TB/s and 1.8 PB (Cori's DataWarp, for the test).
        cori.cluster.burst_buffer_bandwidth = Some(Sourced {
            value: ByteRate::from_gbs(1700.0),
            source: "test".into(),
        });
        cori.cluster.burst_buffer_capacity = Some(Sourced {
            value: Bytes::from_tb(1800.0),
            source: "test".into(),
        });
        let bb = at(&cori, DataLocation::BurstBuffer, 4);
        assert_eq!(bb.data_location, DataLocation::BurstBuffer);
        let whole = 262_144.0 * 16_777_216.0;
        assert!(
            (bb.staging_s - whole / pfs).abs() < 1e-6 * bb.staging_s,
            "PFS-bound"
        );
        // Auto prefers node-local NVMe where the share fits, and the burst buffer over the
        // PFS where it does not.
        assert_eq!(
            at(&cori, DataLocation::Auto, 8).data_location,
            DataLocation::Nvme
        );
        cori.node.nvme_capacity = None;
        cori.node.nvme_read = None;
        assert_eq!(
            at(&cori, DataLocation::Auto, 4).data_location,
            DataLocation::BurstBuffer
        );
    }

    #[test]
    fn ddr_caching_gives_the_superlinear_step_of_strong_scaling() {
        // [004] §VI, [003] §4: once a node's share of the data set fits in memory, input
        // stops coming from storage and the time drops by more than the node ratio.
        let s = setup("cosmoflow-v07");
        let cori = catalog::system("cori-gpu").unwrap();
        let sc = |n| Scenario::new(n, Epochs::Fixed(50.0));
        let outcome = |n: u32| {
            run(
                &s,
                &cori,
                Precision::AmpFp16,
                &sc(n),
                512 / (8 * u64::from(n)),
            )
            .unwrap()
            .outcome
        };
        let (small, large) = (outcome(8), outcome(16));
        assert_eq!(small.data_location, DataLocation::Nvme);
        assert_eq!(large.data_location, DataLocation::Ddr);
        assert!(
            small.time_to_solution_s / large.time_to_solution_s > 2.0,
            "superlinear"
        );
    }

    #[test]
    fn infeasible_configurations_are_errors_that_say_why() {
        let s = setup("deepcam");
        let cori = catalog::system("cori-gpu").unwrap();
        let err = |sc: &Scenario, b| {
            run(&s, &cori, Precision::AmpFp16, sc, b)
                .unwrap_err()
                .to_string()
        };
        // Past the listed 18 nodes: predicted, and said.
        let grown = run(
            &s,
            &cori,
            Precision::AmpFp16,
            &Scenario::new(19, Epochs::Fixed(1.0)),
            2,
        )
        .unwrap();
        assert_eq!(grown.outcome.nodes, 19);
        assert!(grown.assumptions[0].contains("past the 18 the system lists"));
        // A batch that does not fit the V100's 16 GiB names the largest that does.
        let e = err(&Scenario::new(1, Epochs::Fixed(1.0)), 64);
        assert!(e.contains("one device needs"), "{e}");
        assert!(e.contains("largest batch per device that fits is 6"), "{e}");
        let mut sc = Scenario::new(2, Epochs::Fixed(1.0));
        sc.location = DataLocation::Ddr;
        assert!(err(&sc, 2).contains("exceeds its host memory"));
        let curve = s.data.convergence.clone().unwrap();
        let e = err(&Scenario::new(1, Epochs::Curve(curve)), 2);
        assert!(e.contains("does not extrapolate"), "{e}");
        let mut sc = Scenario::new(3, Epochs::Fixed(1.0));
        sc.collective = Algorithm::Rhd;
        assert!(err(&sc, 2).contains("power-of-two"));
        let h100 = catalog::system("h100-sxm5-80gb").unwrap();
        let e = run(
            &s,
            &h100,
            Precision::AmpFp16,
            &Scenario::new(1, Epochs::Fixed(1.0)),
            1,
        )
        .unwrap_err();
        assert!(e.to_string().contains("node.host_memory_gib"), "{e}");
    }

    #[test]
    fn outcome_fields_are_consistent() {
        let s = setup("deepcam");
        let p = run(
            &s,
            &catalog::system("perlmutter-gpu").unwrap(),
            Precision::AmpBf16,
            &Scenario::new(64, Epochs::Fixed(20.0)),
            2,
        )
        .unwrap();
        let o = p.outcome;
        assert_eq!(o.devices, 256);
        assert_eq!(o.global_batch, 512);
        assert!((o.samples_per_s - 512.0 / o.step_time_s).abs() < 1e-6 * o.samples_per_s);
        let steps = (121_266.0f64 / 512.0).ceil();
        assert!((o.epoch_time_s - steps * o.step_time_s - o.eval_time_s).abs() < 1e-9);
        assert!((o.time_to_solution_s - o.staging_s - 20.0 * o.epoch_time_s).abs() < 1e-6);
        assert!(o.fraction_of_peak > 0.0 && o.fraction_of_peak <= 1.0);
        assert!(o.fits);
        // A100 TDP 400 W x 4 per node, 64 nodes.
        assert!(
            (o.energy_j.unwrap() - 1600.0 * 64.0 * o.time_to_solution_s).abs()
                < 1e-6 * o.energy_j.unwrap()
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// A system with every bandwidth multiplied by `f` and latencies divided by it.
        fn faster(system: &System, f: f64) -> System {
            let mut s = system.clone();
            let bw = |v: &mut Option<crate::system::Sourced<crate::units::ByteRate>>| {
                if let Some(v) = v.as_mut() {
                    v.value = v.value * f;
                }
            };
            bw(&mut s.device.memory_bandwidth);
            bw(&mut s.node.pcie);
            bw(&mut s.node.nvlink);
            bw(&mut s.node.nic_bandwidth);
            bw(&mut s.node.nvme_read);
            bw(&mut s.node.host_memory_bandwidth);
            bw(&mut s.cluster.pfs_bandwidth);
            if let Some(l) = s.node.nic_loggp.latency.as_mut() {
                l.value = crate::units::Seconds::new(l.value.value() / f);
            }
            s
        }

        fn workload() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["cosmoflow-v07", "deepcam", "resnet50"])
        }

        fn system() -> impl Strategy<Value = &'static str> {
            prop::sample::select(vec!["cori-gpu", "perlmutter-gpu", "dgx-h100"])
        }

        fn collective() -> impl Strategy<Value = Algorithm> {
            prop::sample::select(vec![
                Algorithm::Ring,
                Algorithm::Tree,
                Algorithm::Hier,
                Algorithm::Best,
            ])
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            #[test]
            fn more_bandwidth_or_less_latency_is_never_slower(
                w in workload(),
                sys in system(),
                nodes in 1u32..16,
                batch in 1u64..8,
                f in 1.0f64..8.0,
                alg in collective(),
            ) {
                let s = setup(w);
                let base = catalog::system(sys).unwrap();
                let mut sc = Scenario::new(nodes, Epochs::Fixed(10.0));
                sc.collective = alg;
                let (Ok(slow), Ok(fast)) = (
                    run(&s, &base, Precision::AmpFp16, &sc, batch),
                    run(&s, &faster(&base, f), Precision::AmpFp16, &sc, batch),
                ) else { return Ok(()) };
                let tol = 1.0 + 1e-12;
                prop_assert!(fast.outcome.step_time_s <= slow.outcome.step_time_s * tol);
                prop_assert!(fast.outcome.allreduce_s <= slow.outcome.allreduce_s * tol);
                prop_assert!(fast.outcome.time_to_solution_s <= slow.outcome.time_to_solution_s * tol);
            }

            #[test]
            fn full_overlap_is_never_slower_than_none(
                w in workload(),
                sys in system(),
                nodes in 1u32..16,
                batch in 1u64..8,
            ) {
                let s = setup(w);
                let system = catalog::system(sys).unwrap();
                let full = Scenario::new(nodes, Epochs::Fixed(10.0));
                let mut none = full.clone();
                none.overlap = Overlap::None;
                let (Ok(a), Ok(b)) = (
                    run(&s, &system, Precision::AmpFp16, &full, batch),
                    run(&s, &system, Precision::AmpFp16, &none, batch),
                ) else { return Ok(()) };
                prop_assert!(a.outcome.step_time_s <= b.outcome.step_time_s);
                prop_assert!(a.outcome.time_to_solution_s <= b.outcome.time_to_solution_s);
                let sum = b.outcome.compute_s + b.outcome.input_s + b.outcome.allreduce_s;
                prop_assert!((b.outcome.step_time_s - sum).abs() <= 1e-12 * sum);
            }

            #[test]
            fn energy_and_cost_are_positive_and_proportional_to_time(
                w in workload(),
                nodes in 1u32..8,
                batch in 1u64..8,
                price in 0.1f64..100.0,
            ) {
                let s = setup(w);
                let mut system = testbed();
                system.cluster.price_per_node_hour =
                    Some(crate::system::Sourced { value: price, source: "test".into() });
                let Ok(p) = run(&s, &system, Precision::AmpFp16, &Scenario::new(nodes, Epochs::Fixed(5.0)), batch)
                else { return Ok(()) };
                let o = p.outcome;
                let (energy, cost) = (o.energy_j.unwrap(), o.cost.unwrap());
                prop_assert!(energy > 0.0 && cost > 0.0);
                let n = f64::from(nodes);
                prop_assert!((energy / o.time_to_solution_s - 300.0 * 8.0 * n).abs() < 1e-6 * energy);
                prop_assert!((cost / (o.time_to_solution_s / 3600.0) - price * n).abs() < 1e-9 * cost.max(1.0));
            }

            /// Strong scaling: while the step stays compute-bound, more nodes never take
            /// longer to solution.
            #[test]
            fn time_to_solution_decreases_with_nodes_while_compute_bound(
                w in workload(),
                sys in system(),
                exp in 0u32..5,
            ) {
                let s = setup(w);
                let system = catalog::system(sys).unwrap();
                let k = u64::from(system.node.devices.value);
                let global = 1024;
                let nodes = [1u32 << exp, 2u32 << exp];
                let mut results = Vec::new();
                for n in nodes {
                    let devices = k * u64::from(n);
                    if global % devices != 0 { return Ok(()); }
                    match run(&s, &system, Precision::AmpFp16, &Scenario::new(n, Epochs::Fixed(10.0)), global / devices) {
                        Ok(p) => results.push(p.outcome),
                        Err(_) => return Ok(()),
                    }
                }
                if results[1].bound == StepBound::Compute {
                    prop_assert!(results[1].time_to_solution_s <= results[0].time_to_solution_s);
                }
            }
        }

        /// And once communication dominates it stops helping: on 10 Gb/s Ethernet,
        /// doubling the nodes of a ResNet-50 job at a fixed global batch beyond the point
        /// where allreduce dominates gains less than 30 %.
        #[test]
        fn strong_scaling_stalls_once_communication_dominates() {
            let s = setup("resnet50");
            let tb = testbed();
            let tts = |n: u32| {
                let p = run(
                    &s,
                    &tb,
                    Precision::AmpFp16,
                    &Scenario::new(n, Epochs::Fixed(40.0)),
                    1024 / (8 * u64::from(n)),
                )
                .unwrap();
                (p.outcome.time_to_solution_s, p.outcome.bound)
            };
            let (t1, b1) = tts(1);
            let (t2, b2) = tts(2);
            let (t8, b8) = tts(8);
            assert_eq!(b1, StepBound::Compute);
            assert_eq!(b2, StepBound::Allreduce);
            assert_eq!(b8, StepBound::Allreduce);
            assert!(
                t2 > t1 * 0.7,
                "going from 8 to 16 GPUs over 10 GbE barely helps: {t1} -> {t2}"
            );
            assert!(t8 > t2 * 0.7, "{t2} -> {t8}");
        }
    }
}
