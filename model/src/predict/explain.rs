//! What a person reads beside the outcome: data movement per sample by source, the HPC-AI
//! roofline, the assumptions made; [`predict`] runs every stage.

use serde::Serialize;

use crate::collective::Fabric;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::kernels::KernelClass;
use crate::links::{Hierarchy, Level, node_network};
use crate::precision::Precision;
use crate::profile::precision_name;
use crate::system::{Sourced, System};
use crate::transfer::{Class, Matrix, TensorRate};
use crate::units::FlopRate;

use super::*;

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
    pub valid_flops: Option<FlopRate>,
    /// Data movement per sample by source.
    pub data_movement: Vec<Movement>,
    /// The HPC-AI roofline.
    pub hpc_ai_roofline: HpcAiRoofline,
    /// Each layer's time on one device and the model that timed it.
    pub layers: Vec<LayerTime>,
    /// The depthwise convolutions the transferred model timed, where there are any: its
    /// depthwise classes rest on one chip and library ([`DEPTHWISE_EVIDENCE`]), so their
    /// share of the time is validated there alone.
    pub depthwise: Option<DepthwiseShare>,
    /// The software stack the step ran under and what it changed.
    pub stack: StackReport,
    /// What the prediction assumed.
    pub assumptions: Vec<String>,
}

/// The software stack of a prediction ([`Prediction::stack`]): which ran, what its rules
/// changed, and how the host and the device shared one device's step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StackReport {
    /// What the stack changed in the step model: its name and file, dispatch, fusion
    /// rules' effects, TF32 layers.
    #[serde(flatten)]
    pub effects: StackEffects,
    /// The host's time to issue one device's step, seconds; `None` where the host runs the
    /// kernels itself (a CPU) or the step is timed at the ideal bound.
    pub host_s: Option<f64>,
    /// The device's busy time in the step (kernels, gaps, update), seconds.
    pub device_busy_s: f64,
    /// The share of the compute time the device waits on the host, 0 to 1.
    pub device_idle_share: f64,
    /// The band of measured over predicted step time of the steps validated under the
    /// stack, which is the compute's 90 % interval; `None` where there is none or it does
    /// not speak for this step (a calibrated GPU, the ideal bound: the interval is then the
    /// kernels').
    pub band: Option<crate::stack::residuals::StepBand>,
}

/// What ridgeline has measured of depthwise convolutions against the transferred model, in
/// words: the only evidence behind a depthwise layer's time ([`DepthwiseShare`]).
pub const DEPTHWISE_EVIDENCE: &str = "depthwise convolutions are timed by classes of \
    their own per pass and format, fitted on cuDNN 9's depthwise kernels measured on one chip, \
    the GH100 (an H100 SXM5 and an H200: DeepCAM's layers and a sweep; fp32 channels-first, \
    tf32, fp16 and bf16 channels-last), each GPU left out in turn within a median 1-46 % per \
    pass and format, with shapes cuDNN runs on a fallback up to 200 times slower; on another \
    chip, library or layout they are an extrapolation: `ridgeline validate transfer`, the \
    `conv-depthwise-` rows";

/// The depthwise convolution layers the transferred model timed and their share of the
/// layers' time ([`Prediction::depthwise`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DepthwiseShare {
    /// Layers.
    pub layers: usize,
    /// Their forward and backward time over every layer's, 0 to 1.
    pub share_of_layer_time: f64,
}

impl DepthwiseShare {
    /// Of the layer times `layers` of `plan`'s model: those the transferred model timed
    /// whose kernels are depthwise convolutions. `None` where there are none.
    fn of(plan: &Plan<'_>, layers: &[LayerTime]) -> Option<DepthwiseShare> {
        let time = |l: &LayerTime| l.forward_s + l.backward_s;
        let total: f64 = layers.iter().map(time).sum();
        let (count, depthwise) = layers
            .iter()
            .zip(&plan.model.kernels)
            .filter(|(l, [kernels, _])| {
                l.timed_by == TimedByModel::Transfer
                    && kernels
                        .iter()
                        .any(|k| k.class == KernelClass::ConvDepthwise)
            })
            .fold((0_usize, 0.0), |(n, t), (l, _)| (n + 1, t + time(l)));
        (count > 0 && total > 0.0).then(|| DepthwiseShare {
            layers: count,
            share_of_layer_time: depthwise / total,
        })
    }

    /// In words, for the assumptions: what their time rests on.
    fn caveat(&self) -> String {
        format!(
            "{} depthwise convolution layer{} ({:.0}% of the layers' time), validated on one \
             chip alone: {DEPTHWISE_EVIDENCE}",
            self.layers,
            if self.layers == 1 { "" } else { "s" },
            100.0 * self.share_of_layer_time,
        )
    }
}

/// Where the transferred model holds the device's GEMMs or convolutions to what its board
/// power sustains, in words; or that it cannot, for want of the file's figures.
fn power_cap(
    m: &crate::transfer::Model,
    device: &crate::system::Device,
    precision: Precision,
) -> Option<String> {
    let spec = crate::transfer::DeviceSpec::of(device, precision)?;
    if precision.matrix_format() != crate::precision::NumberFormat::Fp32 {
        return None;
    }
    let Some(power) = spec.power else {
        return Some(
            "the device file lacks power.tdp_w or compute.process_nm: the transferred model \
             cannot hold its FP32 GEMMs to what the board's power sustains"
                .to_owned(),
        );
    };
    let capped: Vec<String> = [Class::GEMM, Class::CONV]
        .iter()
        .filter_map(|class| {
            let e = m.class(*class)?.energy_per_flop_7nm?;
            let rate = spec.capped(Some(e)).peak_flops;
            (rate < spec.peak_flops).then(|| {
                format!(
                    "{} at {:.1} TFLOP/s ({:.1} pJ per FLOP at {} nm)",
                    if *class == Class::GEMM {
                        "GEMMs"
                    } else {
                        "convolutions"
                    },
                    rate / 1e12,
                    e * 1e12 * power.process_nm / crate::transfer::REFERENCE_NODE_NM,
                    power.process_nm
                )
            })
        })
        .collect();
    (!capped.is_empty()).then(|| {
        format!(
            "power cap: the board's {:.0} W sustains {} of the {:.1} TFLOP/s peak (energy per \
             FLOP fitted on the kernel set's GPUs, scaled by the process node)",
            power.tdp_w,
            capped.join(" and "),
            spec.peak_flops / 1e12
        )
    })
}

/// What timing `layers` layers by the CPU kernel model rests on, in words: whose kernels,
/// the CPUs it was fitted on and how a CPU left out fared.
fn cpu_model_line(layers: usize, kernels: Option<crate::transfer::cpu::Software>) -> String {
    use crate::transfer::cpu::{CpuModel, Software};
    let m = CpuModel::builtin();
    let software = kernels.unwrap_or(Software::Onednn);
    let whose = match (kernels, software) {
        (None, _) => {
            "oneDNN's and MKL's kernels (the stack names no CPU kernels: those PyTorch calls)"
        }
        (Some(_), Software::Onednn) => "oneDNN's and MKL's kernels, as PyTorch calls them",
        (Some(_), Software::Ridgeline) => "ridgeline's own kernels, as its executor runs them",
    };
    let held: Vec<f64> = m
        .classes
        .iter()
        .filter(|c| c.software == software && c.op.is_none())
        .filter_map(|c| c.holdout_median_abs_error)
        .collect();
    let validation = if held.is_empty() {
        format!(
            "fitted on {} CPU{} and not yet checked on a CPU left out of the fit: how it carries \
             over to this CPU is not measured",
            m.source.cpus.len(),
            if m.source.cpus.len() == 1 { "" } else { "s" }
        )
    } else {
        let (lo, hi) = held
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(*v), b.max(*v)));
        format!(
            "a CPU left out of the fit is predicted within a median {:.0}-{:.0}% per class",
            100.0 * lo,
            100.0 * hi
        )
    };
    format!(
        "{layers} layers timed by the CPU kernel model from the device file (cores, clock, FLOP \
         per cycle, last-level cache, memory bandwidth), as {whose}, fitted on measured \
         kernels of {} ({validation}), never faster than the ideal bound",
        m.source.cpus.join(", ")
    )
}

/// What the timing of the layers assumed, in words.
fn timing_assumptions(
    plan: &Plan<'_>,
    depthwise: Option<&DepthwiseShare>,
    system: &System,
    precision: Precision,
    scenario: &Scenario,
) -> Vec<String> {
    let mut out = Vec::new();
    let t = plan.timed_by;
    if t.profile > 0 {
        out.push(format!(
            "{} layers timed by the calibrated profile's fitted kernel times",
            t.profile
        ));
    }
    if t.transfer > 0 && system.device.kind == crate::system::DeviceKind::Cpu {
        out.push(cpu_model_line(t.transfer, plan.model.cpu_kernels));
    } else if t.transfer > 0 {
        let m = crate::transfer::Model::builtin();
        let err = |class: Class| {
            m.class(class).map_or_else(
                || "-".to_owned(),
                |c| format!("{:.0}%", 100.0 * c.holdout_median_abs_error),
            )
        };
        out.push(format!(
            "{} layers timed by the transferred kernel model from the device file (fitted on \
             measured FP32 kernels of {}; a GPU left out of the fit is predicted within a \
             median {} for GEMMs, {} for 3 x 3 stride-1 forward convolutions, each the faster \
             of Winograd and the implicit GEMM as cuDNN's autotuner runs), never faster than \
             the ideal bound",
            t.transfer,
            m.source.devices.join(", "),
            err(Class::GEMM),
            err(Class::CONV),
        ));
        if system.device.llc.is_none() {
            out.push(
                "the device file gives no L2 size (memory.llc_mib): the transferred model \
                 times every kernel's bytes as HBM traffic"
                    .to_owned(),
            );
        }
        out.extend(power_cap(m, &system.device, precision));
        if let Some(c) = m.class(Class::CONV_GEMM) {
            out.push(format!(
                "convolutions of other kinds (1 x 1, strided, 3-D, both gradients; not \
                 depthwise), and every convolution on tensor cores, timed by `{}`: the \
                 implicit GEMM cuDNN runs, fitted on the measured FP32 convolutions cuDNN ran \
                 that way; a GPU left out of the fit is predicted within a median {:.0}%",
                c.name,
                100.0 * c.holdout_median_abs_error,
            ));
        }
        out.extend(depthwise.map(DepthwiseShare::caveat));
        // FP8 training's layers outside FP8 run in BF16 (its FP8 layers: `rule_lines`).
        let precision = precision.base();
        if precision != Precision::Fp32 {
            let peak = system
                .device
                .matrix_peak(precision)
                .map_or_else(|_| "matrix".to_owned(), |p| p.name);
            let tensor = crate::transfer::DeviceSpec::of(&system.device, precision)
                .is_some_and(|d| d.tensor.is_some());
            let format = precision.matrix_format();
            let classes = [Matrix::Gemm, Matrix::ConvGemm]
                .map(|c| m.class(Class::Tensor(c, TensorRate::of(format))));
            match (&m.source.tensor, tensor, classes) {
                (Some(source), true, [Some(g), Some(c)]) => out.push(format!(
                    "{precision}: GEMMs and convolutions on the device's {peak} peak are timed \
                     by the tensor-core classes, fitted on {source}; one precision left out \
                     is predicted within a median {:.0}% for GEMMs, {:.0}% for convolutions, \
                     and how they carry over to another GPU's tensor cores is not measured",
                    100.0 * g.holdout_median_abs_error,
                    100.0 * c.holdout_median_abs_error,
                )),
                _ => out.push(format!(
                    "{precision}: the transferred model's matrix terms run at the device's \
                     {peak} peak with coefficients fitted on FP32 kernels (`ridgeline validate \
                     transfer` measures that on an H200's and an H100's tensor-core kernels: its `ours` rows)"
                )),
            }
        }
    }
    if t.ideal > 0 {
        let why = match scenario.kernel_model {
            KernelModel::Ideal => "as asked (--efficiency ideal)".to_owned(),
            KernelModel::Transfer => {
                let missing = crate::transfer::DeviceSpec::missing(&system.device);
                let cpu_missing = crate::transfer::cpu::CpuSpec::missing(&system.device);
                if system.device.kind != crate::system::DeviceKind::Gpu {
                    if cpu_missing.is_empty() {
                        "the CPU kernel model has no class for them".to_owned()
                    } else {
                        format!(
                            "the device file lacks {} for the CPU kernel model",
                            cpu_missing.join(", ")
                        )
                    }
                } else if !missing.is_empty() {
                    format!(
                        "the device file lacks {} for the transferred kernel model",
                        missing.join(", ")
                    )
                } else {
                    "the transferred kernel model has no class for them".to_owned()
                }
            }
        };
        out.push(format!(
            "{} layers at the ideal bound, device efficiency compute {} and memory {} ({why}): \
             an upper bound on speed",
            t.ideal, scenario.efficiency.compute, scenario.efficiency.memory
        ));
    }
    out
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

/// One step of `inputs` at `batch` per device on `scenario.nodes` nodes through the
/// discrete-event simulator ([`crate::sim`]): each layer as `predict` times it, its gradients
/// (parameters times the scenario's gradient bytes) in buckets allreduced by the scenario's
/// collective model, and the input per step and the optimizer update as `predict` counts
/// them. `options` gives the buckets, overlap, prefetch and variability; its input,
/// optimizer and rank figures are filled in here.
pub fn simulate(
    inputs: Inputs<'_>,
    scenario: &Scenario,
    batch: u64,
    options: crate::sim::SimOptions,
) -> Result<crate::sim::Simulated> {
    let p = predict(inputs, scenario, batch)?;
    let fabric = Fabric::of(inputs.system, scenario.nodes)?;
    let per_param = scenario.gradient_bytes as f64;
    let layers: Vec<crate::sim::SimLayer> = p
        .layers
        .iter()
        .zip(&inputs.model.layer_params)
        .map(|(l, &params)| crate::sim::SimLayer {
            name: l.layer.clone(),
            forward_s: l.forward_s,
            backward_s: l.backward_s,
            gradient_bytes: params as f64 * per_param,
            exchange_s: [0.0; 2],
        })
        .collect();
    let layer_sum: f64 = layers.iter().map(|l| l.forward_s + l.backward_s).sum();
    let o = &p.outcome;
    let collective = scenario.collective;
    let allreduce = |bytes: f64| {
        crate::collective::allreduce_time(&fabric, bytes, collective)
            .map_or(0.0, |a| a.time.value())
    };
    Ok(crate::sim::simulate(
        &layers,
        &allreduce,
        &crate::sim::SimOptions {
            input_s: o.input_s.value(),
            // The optimizer, and on an accelerator the time the device waits on the host
            // (the stack's host timeline), taken together after backward: the simulated step
            // keeps the analytical compute, though its waits are not placed where they fall.
            optimizer_s: (o.compute_s.value() - layer_sum).max(0.0),
            ranks: u32::try_from(o.devices).unwrap_or(u32::MAX),
            ..options
        },
    ))
}

/// What moves per sample, level by level: the model and its activations in HBM, the input
/// samples over PCIe and from where they are stored, and the gradients' ring traffic over
/// NVLink or the network where more than one device trains.
fn movement(
    system: &System,
    scenario: &Scenario,
    model: &StepModel,
    plan: &Plan<'_>,
    outcome: &Outcome,
    b: f64,
) -> Vec<Movement> {
    let h = Hierarchy::of(system, scenario.nodes);
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
    add("input samples", Level::Pcie, plan.device_sample.value());
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
        add("input samples", level, plan.stored_sample.value());
    }
    let p = outcome.devices as f64;
    let ring_traffic = 2.0 * (p - 1.0) / p * plan.gradient_bytes.value();
    if outcome.devices > 1 {
        let level = if scenario.nodes > 1 {
            Level::Network
        } else {
            Level::Nvlink
        };
        add("gradients", level, ring_traffic / b);
    }
    movement
}

/// What a prediction assumed about its run, in words, beyond the system's and the
/// timing's: link latencies the system file lacks, epochs interpolated between measured
/// batches, energy without node power, no staging, and no preprocessing limit.
fn run_caveats(
    system: &System,
    scenario: &Scenario,
    outcome: &Outcome,
    fabric: &Fabric,
) -> Vec<String> {
    let mut assumptions = Vec::new();
    if outcome.devices > 1 && !fabric.latencies_known {
        assumptions.push(
            "a link latency is not in the system file: each collective call starts in NCCL's \
             tuning model's time, 6.6 us, and each of its steps over the link in its hardware \
             latency (NVLink 0.6 us, PCIe 1.0 us, network 2.7 us a ring step; NVIDIA/nccl \
             src/graph/tuning.cc, Ring/LL, v2.30.7-1)"
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
    assumptions
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
    let outcome = plan
        .evaluate(scenario.nodes, &fabric)
        .map_err(|e| infeasible(&e, batch, scenario, system))?;
    let b = batch as f64;
    let movement = movement(system, scenario, model, &plan, &outcome, b);

    let hpc_ai_roofline = hpc_ai_roofline(system, scenario, model, &plan, outcome.devices, b);

    let mut assumptions = system.assumptions.clone();
    if scenario.nodes > listed {
        assumptions.push(format!(
            "{} nodes, past the {listed} the system lists: more of the same nodes on the same \
             network, sharing the same parallel file system",
            scenario.nodes
        ));
    }
    let layers = plan.layer_times()?;
    let depthwise = DepthwiseShare::of(&plan, &layers);
    let stack = StackReport {
        effects: model.effects().clone(),
        host_s: (plan.host > 0.0).then_some(plan.host),
        device_busy_s: plan.busy,
        device_idle_share: (1.0 - plan.busy / plan.compute.value()).clamp(0.0, 1.0),
        band: model
            .interval_band(system.device.kind, &outcome.compute_timed_by)
            .cloned(),
    };
    assumptions.extend(stack_assumptions(&stack, model, b, system, scenario));
    assumptions.extend(timing_assumptions(
        &plan,
        depthwise.as_ref(),
        system,
        model.precision,
        scenario,
    ));
    assumptions.extend(run_caveats(system, scenario, &outcome, &fabric));
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
        hpc_ai_roofline,
        layers,
        depthwise,
        stack,
        assumptions,
        outcome,
    })
}

/// Why the plan cannot run, as an error naming the option that makes it so and its value.
fn infeasible(e: &Infeasible, batch: u64, scenario: &Scenario, system: &System) -> Error {
    let value = match e {
        Infeasible::TooManyNodes { nodes, .. } => nodes.to_string(),
        Infeasible::DoesNotFit { .. } => batch.to_string(),
        Infeasible::DataTooLarge { location, .. } | Infeasible::NoDataLocation { location, .. } => {
            location.to_string()
        }
        Infeasible::Convergence { global_batch, .. } => {
            format!("{batch} (global {global_batch})")
        }
        Infeasible::Collective { .. } => scenario.collective.to_string(),
        Infeasible::NotFinite { field } => (*field).to_owned(),
    };
    Error::Argument {
        name: e.option(),
        value,
        message: format!("system `{}`: {e}", system.name),
    }
}

/// The HPC-AI roofline of the step ([001] HPC AI500 v2, section 6): the FLOPs a node and the
/// machine can feed across their links at the gradients' communication intensity, and the
/// profile's measured ceilings where the system is calibrated; `devices` in the run, `b`
/// samples a device.
fn hpc_ai_roofline(
    system: &System,
    scenario: &Scenario,
    model: &StepModel,
    plan: &Plan<'_>,
    devices: u64,
    b: f64,
) -> HpcAiRoofline {
    let p = devices as f64;
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
                plan.peak.value() * k,
                l.value.value() * k,
                flops_node,
                k * 2.0 * (k - 1.0) / k * plan.gradient_bytes.value(),
            )
        });
    let n = f64::from(scenario.nodes);
    let distributed = node_network(system)
        .filter(|_| scenario.nodes > 1)
        .map(|(bw, _)| {
            comm(
                plan.peak.value() * p,
                bw.value() * n,
                flops_node * n,
                n * 2.0 * (n - 1.0) / n * plan.gradient_bytes.value(),
            )
        });

    HpcAiRoofline {
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
                        fraction_of_peak: c.tflops * 1e12 / plan.peak.value(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// What the stack did to the step, in words: which stack, how the host and the device
/// shared the step, what its rules fused and what ran in TF32.
fn stack_assumptions(
    r: &StackReport,
    model: &StepModel,
    batch: f64,
    system: &System,
    scenario: &Scenario,
) -> Vec<String> {
    let e = &r.effects;
    let ms = |s: f64| format!("{:.3} ms", s * 1e3);
    let mut out = vec![match r.host_s {
        Some(host) => format!(
            "software stack `{}` ({}): its host issues one device's step in {} ({} \
             dispatch), the device is busy {} of the {} compute{}",
            e.stack,
            e.file,
            ms(host),
            e.dispatch,
            ms(r.device_busy_s),
            ms(r.device_busy_s / (1.0 - r.device_idle_share).max(f64::MIN_POSITIVE)),
            if r.device_idle_share > 0.05 {
                format!(
                    ": host-bound, the device waits {:.0}% of it",
                    100.0 * r.device_idle_share
                )
            } else {
                String::new()
            }
        ),
        None if system.device.kind == crate::system::DeviceKind::Gpu => format!(
            "software stack `{}` ({}): its fusion and precision rules apply; its host \
             times do not, as the layers are timed at the ideal bound (--efficiency {})",
            e.stack,
            e.file,
            match scenario.kernel_model {
                KernelModel::Ideal => "ideal",
                KernelModel::Transfer => "transfer",
            }
        ),
        None => format!(
            "software stack `{}` ({}): its fusion and precision rules apply; on a CPU the \
             host runs the kernels itself, so the layers' times add with no host timeline \
             of their own",
            e.stack, e.file
        ),
    }];
    for f in &e.fusion {
        out.push(format!(
            "fusion `{}` ({}): {} groups, {} kernel launches fewer a step and {:.2} GiB less HBM \
             traffic",
            f.rule,
            e.stack,
            f.groups,
            f.launches_saved,
            f.bytes_saved_per_sample * batch / f64::from(1u32 << 30)
        ));
    }
    out.extend(rule_lines(e, batch, batch, 1.0));
    if e.tf32_layers > 0 && model.precision == Precision::Fp32 {
        out.push(if system.device.peak.tf32_tensor.is_some() {
            format!(
                "{} layers' FP32 matrix kernels run in TF32 on tensor cores, as stack `{}` \
                 says (`ridgeline stack show {}`); the transferred model has no TF32 class, \
                 so they run at the TF32 peak with the FP32 classes' coefficients, which \
                 timed the TF32 convolutions of the committed H100 trace of ResNet-50 2.7 \
                 times too fast (docs/STACKS.md)",
                e.tf32_layers, e.stack, e.stack
            )
        } else {
            format!(
                "stack `{}` runs {} layers' FP32 matrix kernels in TF32, but device `{}` \
                 has no TF32 tensor peak: they run in FP32",
                e.stack, e.tf32_layers, system.device.name
            )
        });
    }
    out
}

/// What a stack's FP8, recomputation and memory rules changed on one device, one line each
/// where they changed something: a step of `step` samples and the activations of `kept`
/// samples, on a device that runs `share` of the model's layers (a pipeline stage's).
pub fn rule_lines(e: &StackEffects, step: f64, kept: f64, share: f64) -> Vec<String> {
    let gib = |bytes: f64, samples: f64| {
        format!("{:.2} GiB", bytes * samples * share / f64::from(1u32 << 30))
    };
    let mut out = Vec::new();
    if e.fp8_layers > 0 {
        out.push(format!(
            "fp8 (stack `{}`): {} linear layers multiply in FP8, timed by the kernel classes \
             that time the BF16 layers at the device's FP8 peak, with no power cap (no FP8 \
             kernel is in the fit); Transformer Engine's casts add {} of HBM traffic a step",
            e.stack,
            (e.fp8_layers as f64 * share).round(),
            gib(e.fp8_cast_bytes_per_sample, step)
        ));
    }
    if e.recomputed_flops_per_sample > 0.0 {
        out.push(format!(
            "recomputation `{}` (stack `{}`): {:.2} TFLOP a step run again in backward",
            e.recompute,
            e.stack,
            e.recomputed_flops_per_sample * step * share / 1e12
        ));
    }
    let m = &e.memory;
    for (what, saved) in [
        ("fused attention keeps no scores", m.attention_saved),
        (
            "fused groups recompute their inner element-wise outputs",
            m.fused_saved,
        ),
        ("recomputation", m.recompute_saved),
        ("sequence parallelism", m.sequence_parallel_saved),
    ] {
        if saved > 0.0 {
            out.push(format!(
                "memory (stack `{}`): {what}: {} fewer activations kept{}",
                e.stack,
                gib(saved, kept),
                if what == "recomputation" && m.transient > 0.0 {
                    format!(
                        " ({} live again while the largest of {} transformer layers runs \
                         backward)",
                        gib(m.transient, kept / share),
                        m.recomputed_layers
                    )
                } else {
                    String::new()
                }
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 72 W L4 is held below its 30.3 TFLOP/s FP32 peak, the 700 W H100 is not; tensor
    /// formats run uncapped; a file without the figures says what it lacks.
    #[test]
    fn the_power_cap_is_said_where_it_binds() {
        let m = crate::transfer::Model::builtin();
        let l4 = crate::catalog::device("l4").unwrap();
        let said = power_cap(m, &l4, Precision::Fp32).unwrap();
        assert!(
            said.starts_with("power cap: the board's 72 W sustains GEMMs at ")
                && said.contains("of the 30.3 TFLOP/s peak"),
            "{said}"
        );
        let h100 = crate::catalog::device("h100-sxm5-80gb").unwrap();
        assert_eq!(power_cap(m, &h100, Precision::Fp32), None);
        assert_eq!(power_cap(m, &l4, Precision::AmpFp16), None);
        let mut bare = l4.clone();
        bare.process_nm = None;
        let said = power_cap(m, &bare, Precision::Fp32).unwrap();
        assert!(said.contains("compute.process_nm"), "{said}");
    }
}
