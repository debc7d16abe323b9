//! The plan: a step model on a system at a local batch ([`Plan`]), evaluated per node count
//! into an [`Outcome`], or an [`Infeasible`] reason.

use std::fmt;

use serde::Serialize;

use crate::collective::{self, Algorithm, Fabric};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::links::node_network;
use crate::system::System;
use crate::units::{Bytes, FlopRate, Joules, SampleRate, Seconds, Watts};

use super::*;

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

/// A workload on one system at one local batch: everything except the node count.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    pub(super) model: &'a StepModel,
    pub(super) system: &'a System,
    pub(super) dataset: &'a Dataset,
    pub(super) scenario: &'a Scenario,
    /// Local batch per device.
    pub batch: u64,
    /// Devices per node.
    pub devices_per_node: u32,
    /// Compute time of a training step on one device.
    pub compute: Seconds,
    /// Forward time of one evaluation step on one device.
    pub eval_compute: Seconds,
    /// How many layers each model timed.
    pub timed_by: TimedBy,
    /// The compute time's 90 % interval, seconds.
    pub(super) compute_interval: [f64; 2],
    /// The host's time to issue a step on one device, seconds (0 on a CPU).
    pub(super) host: f64,
    /// The device's busy time in a step, seconds.
    pub(super) busy: f64,
    /// Memory one device needs.
    pub memory: Bytes,
    /// Memory one device has.
    pub capacity: Bytes,
    /// Matrix peak of one device (for the fraction of peak).
    pub peak: FlopRate,
    /// The largest local batch that fits, where this one does not.
    pub(super) max_batch: Option<u64>,
    /// Bytes per sample as stored (after compression), scaled to this workload's input.
    pub(super) stored_sample: Bytes,
    /// Bytes per sample on the device (the input tensor).
    pub(super) device_sample: Bytes,
    /// Bytes of the gradients one step reduces.
    pub(super) gradient_bytes: Bytes,
    /// Power of one node (its own figure, else its devices' TDP).
    pub(super) node_power: Option<Watts>,
    pub(super) price: Option<f64>,
    pub(super) gaps: Gaps,
}

/// Seconds per byte of each level for one device, by node count where it matters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gaps {
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
    pub compute_s: Seconds,
    /// How many layers each model timed (calibrated profile, transferred kernel model,
    /// ideal bound).
    pub compute_timed_by: TimedBy,
    /// The 90 % interval of the compute time, seconds: equal ends where every layer is at
    /// the ideal bound ([`StepTimes::interval_90`]).
    pub compute_interval_90_s: [Seconds; 2],
    /// Input movement (and preprocessing) time of a step.
    pub input_s: Seconds,
    /// Allreduce time of a step.
    pub allreduce_s: Seconds,
    /// The allreduce algorithm used.
    pub collective: Algorithm,
    /// Step time.
    pub step_time_s: Seconds,
    /// The 90 % interval of the step time: the step at the ends of the compute time's
    /// interval (input and allreduce at their point figures).
    pub step_time_lo_s: Seconds,
    /// Its upper end.
    pub step_time_hi_s: Seconds,
    /// What bounds the step.
    pub bound: StepBound,
    /// Global samples per second.
    pub samples_per_s: SampleRate,
    /// Samples per second per device.
    pub samples_per_s_per_device: SampleRate,
    /// Epochs to solution.
    pub epochs: f64,
    /// Time of one epoch (training and evaluation) with the data at its steady location.
    pub epoch_time_s: Seconds,
    /// The 90 % interval of the epoch time, as the step's.
    pub epoch_time_lo_s: Seconds,
    /// Its upper end.
    pub epoch_time_hi_s: Seconds,
    /// Evaluation time per epoch.
    pub eval_time_s: Seconds,
    /// Staging time before training.
    pub staging_s: Seconds,
    /// Time to solution: staging + epochs x epoch.
    pub time_to_solution_s: Seconds,
    /// The 90 % interval of the time to solution, as the step's.
    pub time_to_solution_lo_s: Seconds,
    /// Its upper end.
    pub time_to_solution_hi_s: Seconds,
    /// Achieved FLOP/s of the job.
    pub achieved_flops: FlopRate,
    /// Achieved / aggregate matrix peak.
    pub fraction_of_peak: f64,
    /// Memory one device needs.
    pub memory_per_device_bytes: Bytes,
    /// Whether it fits the device.
    pub fits: bool,
    /// Device-hours to solution (the compute budget of \[003\] Table 6).
    pub compute_budget_device_hours: f64,
    /// Energy to solution, when the system gives power.
    pub energy_j: Option<Joules>,
    /// Price to solution, when the system gives a price per node-hour.
    pub cost: Option<f64>,
}

impl Outcome {
    /// Every figure finite, and the step longer than zero: a non-finite input (an absurd
    /// figure or fit) must not print as `inf`, `NaN` or a zero step.
    fn check_finite(&self) -> std::result::Result<(), Infeasible> {
        let figures = [
            ("compute time", self.compute_s.value()),
            ("input time", self.input_s.value()),
            ("allreduce time", self.allreduce_s.value()),
            ("step time", self.step_time_s.value()),
            ("throughput", self.samples_per_s.value()),
            ("epochs", self.epochs),
            ("epoch time", self.epoch_time_s.value()),
            ("evaluation time", self.eval_time_s.value()),
            ("staging time", self.staging_s.value()),
            ("time to solution", self.time_to_solution_s.value()),
            ("achieved FLOP/s", self.achieved_flops.value()),
            ("fraction of peak", self.fraction_of_peak),
            ("memory per device", self.memory_per_device_bytes.value()),
            ("compute budget", self.compute_budget_device_hours),
            ("energy", self.energy_j.map_or(0.0, Joules::value)),
            ("cost", self.cost.unwrap_or(0.0)),
        ];
        match figures.iter().find(|(_, v)| !v.is_finite()) {
            Some((field, _)) => Err(Infeasible::NotFinite { field }),
            None if self.step_time_s.value() <= 0.0 => {
                Err(Infeasible::NotFinite { field: "step time" })
            }
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
        let times = model.device_times(b, &rates, &timing(system, model, scenario));
        let (eval_compute, compute) = (times.forward, times.step);
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
            .or_else(|| system.device.tdp_w.as_ref().map(|t| t.value * f64::from(k)))
            .map(Watts::new);
        Ok(Plan {
            model,
            system,
            dataset,
            scenario,
            batch,
            devices_per_node: k,
            compute: Seconds::new(compute),
            timed_by: times.timed_by,
            compute_interval: times.interval_90,
            host: times.host,
            busy: times.busy,
            eval_compute: Seconds::new(eval_compute),
            memory,
            capacity,
            // The peak the matrix kernels run at: TF32's where the stack runs them so.
            peak: FlopRate::new(
                rates
                    .tf32
                    .filter(|_| model.effects.tf32_layers > 0)
                    .unwrap_or(rates.matrix)
                    / scenario.efficiency.compute,
            ),
            max_batch,
            stored_sample: Bytes::new(
                dataset.sample_bytes.value.value() * scale / scenario.compression,
            ),
            device_sample: Bytes::from_count(
                model.input_elements * model.precision.compute_bytes(),
            ),
            gradient_bytes: Bytes::from_count(model.params * scenario.gradient_bytes),
            node_power,
            price: system.cluster.price_per_node_hour.as_ref().map(|p| p.value),
            gaps,
        })
    }

    /// Each layer's time on one device, and the model that timed it.
    pub fn layer_times(&self) -> Result<Vec<LayerTime>> {
        let rates = DeviceRates::of(self.system, self.model.precision, self.scenario.efficiency)?;
        Ok(self.model.layer_times(
            self.batch as f64,
            &rates,
            &timing(self.system, self.model, self.scenario),
        ))
    }

    /// Where the data lives at `nodes` nodes, and the bytes of a node's share.
    #[allow(clippy::cast_precision_loss)]
    fn locate(&self, nodes: u32) -> std::result::Result<(DataLocation, f64), Infeasible> {
        let share =
            self.stored_sample.value() * self.dataset.train_samples.value as f64 / f64::from(nodes);
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
        let host_link = self.device_sample.value() * g.pcie.unwrap_or(g.hbm);
        let stored = self.stored_sample.value();
        let storage = match location {
            DataLocation::Ddr | DataLocation::Auto => stored * g.host.unwrap_or(0.0),
            DataLocation::Nvme => stored * g.nvme.unwrap_or(0.0),
            DataLocation::BurstBuffer => stored * self.bb_gap(nodes).unwrap_or(0.0),
            DataLocation::Pfs => stored * self.pfs_gap(nodes).unwrap_or(0.0),
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
        let ar = collective::allreduce_time(
            fabric,
            self.gradient_bytes.value(),
            self.scenario.collective,
        )
        .ok_or(Infeasible::Collective { devices })?;
        let allreduce = ar.time.value();
        // The allreduce's 90 % interval from a calibrated profile's communication fits.
        let comm = self
            .system
            .calibration
            .as_ref()
            .map_or([1.0, 1.0], |p| p.comm_interval())
            .map(|f| allreduce * f);
        let combine = |parts: &[f64]| match self.scenario.overlap {
            Overlap::Full => parts.iter().copied().fold(0.0, f64::max),
            Overlap::None => parts.iter().sum(),
        };
        let compute = self.compute.value();
        let step = combine(&[compute, input, allreduce]);
        // The figures at a compute time of `c` and an allreduce of `a` (the evaluation's
        // compute scaled alike).
        let train = self.dataset.train_samples.value as f64;
        let eval = self.dataset.eval_samples.value as f64;
        let g = global as f64;
        let at = |c: f64, a: f64| {
            let step = combine(&[c, input, a]);
            let scale = if compute > 0.0 { c / compute } else { 1.0 };
            let eval_step = combine(&[self.eval_compute.value() * scale, input]);
            let epoch = (train / g).ceil() * step + (eval / g).ceil() * eval_step;
            [step, epoch]
        };
        let [lo, hi] = [0, 1].map(|i| at(self.compute_interval[i], comm[i]));
        let bound = if compute >= input && compute >= allreduce {
            StepBound::Compute
        } else if input >= allreduce {
            StepBound::Input
        } else {
            StepBound::Allreduce
        };
        let eval_step = combine(&[self.eval_compute.value(), input]);
        let eval_time = (eval / g).ceil() * eval_step;
        let epoch = (train / g).ceil() * step + eval_time;
        let staging = self.staging(location, share, total_nodes);
        let tts = staging + epochs * epoch;
        let achieved = FlopRate::new(self.model.flops_per_sample * g / step);
        let tts_s = Seconds::new(tts);
        let hours = tts / 3600.0;
        let outcome = Outcome {
            nodes,
            devices,
            local_batch: self.batch,
            global_batch: global,
            data_location: location,
            compute_s: self.compute,
            compute_timed_by: self.timed_by,
            compute_interval_90_s: self.compute_interval.map(Seconds::new),
            input_s: Seconds::new(input),
            allreduce_s: Seconds::new(allreduce),
            collective: ar.algorithm,
            step_time_s: Seconds::new(step),
            step_time_lo_s: Seconds::new(lo[0].min(step)),
            step_time_hi_s: Seconds::new(hi[0].max(step)),
            bound,
            samples_per_s: SampleRate::new(g / step),
            samples_per_s_per_device: SampleRate::new(b / step),
            epochs,
            epoch_time_s: Seconds::new(epoch),
            epoch_time_lo_s: Seconds::new(lo[1].min(epoch)),
            epoch_time_hi_s: Seconds::new(hi[1].max(epoch)),
            eval_time_s: Seconds::new(eval_time),
            staging_s: Seconds::new(staging),
            time_to_solution_s: tts_s,
            time_to_solution_lo_s: Seconds::new((staging + epochs * lo[1]).min(tts)),
            time_to_solution_hi_s: Seconds::new((staging + epochs * hi[1]).max(tts)),
            achieved_flops: achieved,
            fraction_of_peak: achieved / (self.peak * devices as f64),
            memory_per_device_bytes: self.memory,
            fits: self.memory <= self.capacity,
            compute_budget_device_hours: hours * devices as f64,
            energy_j: self.node_power.map(|w| w * f64::from(nodes) * tts_s),
            cost: self.price.map(|p| p * f64::from(nodes) * hours),
        };
        outcome.check_finite()?;
        Ok(outcome)
    }
}

/// What times `model`'s layers on `system` under `scenario`.
fn timing<'a>(system: &'a System, model: &StepModel, scenario: &Scenario) -> Timing<'a> {
    Timing::of(system, model.precision, scenario.kernel_model)
}
