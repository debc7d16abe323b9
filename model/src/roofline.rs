//! Per-layer device roofline (docs/ARCHITECTURE.md "Device roofline"; Williams, Waterman and Patterson,
//! *Roofline*, CACM 2009; \[004\] §V-A).
//!
//! Each pass of each layer takes `max(F / (peak x eff_compute), B / (BW x eff_memory))`,
//! with `peak` the device's matrix peak for conv, transposed conv and dense, and its vector
//! peak for everything else ([`crate::system::Device::matrix_peak`]). Layers run one after
//! another (bulk synchronous), so the step's compute time is the sum. Efficiencies default
//! to 1, the ideal bound. On a system with a calibrated profile
//! ([`crate::profile::Profile::overlay`]), each layer whose kernels the profile has fits for
//! takes their fitted times instead, and the others run at the measured memory bandwidth.

use serde::Serialize;

use crate::cost::GraphCost;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::kernels::step_kernels;
use crate::profile::precision_name;
use crate::system::{PeakUse, System};
use crate::units::{ByteRate, Bytes, FlopRate, Flops, Seconds};

/// Fractions of peak compute and bandwidth a device attains.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Efficiency {
    /// Fraction of the FLOP/s peak, in (0, 1].
    pub compute: f64,
    /// Fraction of the memory bandwidth, in (0, 1].
    pub memory: f64,
}

impl Efficiency {
    /// The ideal bound: every peak attained.
    pub const IDEAL: Efficiency = Efficiency {
        compute: 1.0,
        memory: 1.0,
    };

    /// Checks both fractions are in (0, 1].
    pub fn new(compute: f64, memory: f64) -> Result<Self> {
        for (name, v) in [
            ("compute efficiency", compute),
            ("memory efficiency", memory),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                return Err(Error::argument(
                    if name.starts_with('c') {
                        "compute-efficiency"
                    } else {
                        "memory-efficiency"
                    },
                    v,
                    "an efficiency is a fraction of peak in (0, 1]",
                ));
            }
        }
        Ok(Efficiency { compute, memory })
    }
}

impl Default for Efficiency {
    fn default() -> Self {
        Efficiency::IDEAL
    }
}

/// The resource that bounds a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Bound {
    /// FLOP/s.
    Compute,
    /// Memory bandwidth.
    Memory,
    /// The layer does no work (a view such as flatten, or the input).
    None,
}

/// Which of the device's peaks a layer runs at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeakClass {
    /// [`Roofline::matrix_peak`]: convolution, transposed convolution, dense.
    Matrix,
    /// [`Roofline::vector_peak`]: everything else.
    Vector,
}

/// One layer on the roofline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RooflineLayer<'g> {
    /// Layer name.
    pub name: &'g str,
    /// Op kind.
    pub op: &'static str,
    /// Which peak the layer runs at.
    pub peak: PeakClass,
    /// Forward plus backward FLOPs.
    pub flops: Flops,
    /// Forward plus backward HBM bytes.
    pub bytes: Bytes,
    /// FLOPs per byte; `None` when no bytes move.
    pub arithmetic_intensity: Option<f64>,
    /// Forward time.
    pub time_fwd: Seconds,
    /// Backward time.
    pub time_bwd: Seconds,
    /// Forward plus backward time.
    pub time: Seconds,
    /// Whether the layer's time is set by compute or memory: the larger of its total
    /// compute-limited and memory-limited times over both passes.
    pub bound: Bound,
    /// Attained FLOP/s over the layer's time.
    pub attained: FlopRate,
    /// Whether the times come from a calibrated profile's fitted kernel models.
    pub calibrated: bool,
    /// The layer's forward plus backward time by the transferred kernel model
    /// ([`crate::transfer::Model::builtin`], never below this roofline's time), where the
    /// device file gives its figures and no calibrated profile timed the layer: what
    /// `predict` counts for it.
    pub transferred: Option<Seconds>,
}

/// A workload's training step on one device's roofline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Roofline<'g> {
    /// Workload name.
    pub workload: &'g str,
    /// System name.
    pub system: String,
    /// Device name.
    pub device: String,
    /// Batch per device.
    pub batch: u64,
    /// Precision.
    pub precision: crate::precision::Precision,
    /// Efficiencies applied.
    pub efficiency: Efficiency,
    /// Peak for matrix ops.
    pub matrix_peak: PeakUse,
    /// Peak for vector ops.
    pub vector_peak: PeakUse,
    /// Memory bandwidth; `None` where it is unknown until measured (then layers are timed
    /// at their peak alone).
    pub memory_bandwidth: Option<ByteRate>,
    /// Matrix peak / bandwidth: the intensity above which a matrix op is compute-bound
    /// (`None` without a bandwidth).
    pub machine_balance: Option<f64>,
    /// Total FLOPs of the step.
    pub flops: Flops,
    /// Total HBM bytes of the step.
    pub bytes: Bytes,
    /// Step time: the sum of the layers' times.
    pub step_time: Seconds,
    /// Time of the compute-bound layers.
    pub compute_bound_time: Seconds,
    /// Time of the memory-bound layers.
    pub memory_bound_time: Seconds,
    /// FLOPs / step time.
    pub attained: FlopRate,
    /// attained / matrix peak.
    pub fraction_of_peak: f64,
    /// Samples per second on this device.
    pub samples_per_second: f64,
    /// Layers timed by a calibrated profile (0 without one).
    pub calibrated_layers: usize,
    /// Per-layer rows.
    pub layers: Vec<RooflineLayer<'g>>,
    /// How the system was described (`local`'s reasoning), printed under `assumed:`.
    pub assumptions: Vec<String>,
}

/// Places every layer of `cost` (the cost of `graph`) on the roofline of `system`'s device.
pub fn roofline<'g>(
    graph: &Graph,
    cost: &GraphCost<'g>,
    system: &System,
    efficiency: Efficiency,
) -> Result<Roofline<'g>> {
    let device = &system.device;
    let matrix_peak = device.matrix_peak(cost.precision)?;
    let vector_peak = device.vector_peak(cost.precision)?;
    let bw = device
        .memory_bandwidth
        .as_ref()
        .map(|b| b.value * efficiency.memory);
    let pass = |f: Flops, b: Bytes, peak: FlopRate| {
        let compute = f / (peak * efficiency.compute);
        let memory = bw.map_or(Seconds::ZERO, |bw| b / bw);
        (compute, memory)
    };
    let spec = crate::transfer::DeviceSpec::of(device, cost.precision);
    let all_kernels =
        (system.calibration.is_some() || spec.is_some()).then(|| step_kernels(graph, cost));
    let kernels = system.calibration.as_ref().zip(all_kernels.as_ref());
    let mut layers = Vec::with_capacity(cost.layers.len());
    for (i, l) in cost.layers.iter().enumerate() {
        let (class, peak) = if l.matrix {
            (PeakClass::Matrix, &matrix_peak)
        } else {
            (PeakClass::Vector, &vector_peak)
        };
        let (cf, mf) = pass(l.flops_fwd, l.hbm_bytes_fwd, peak.rate);
        let (cb, mb) = pass(l.flops_bwd, l.hbm_bytes_bwd, peak.rate);
        let fitted = kernels.as_ref().and_then(|(p, ks)| {
            (!ks[i].is_empty())
                .then(|| p.layer_times(&ks[i], precision_name(cost.precision)))
                .flatten()
        });
        let (time_fwd, time_bwd) = match fitted {
            Some((f, b)) => (Seconds::new(f), Seconds::new(b)),
            None => (cf.max(mf), cb.max(mb)),
        };
        let time = time_fwd + time_bwd;
        let transferred = match (&spec, &all_kernels) {
            (Some(spec), Some(ks)) if fitted.is_none() && !ks[i].is_empty() => {
                let model = crate::transfer::Model::builtin();
                let elem = cost.precision.compute_bytes();
                let (mut f, mut b) = (0.0, 0.0);
                let mut all = true;
                for k in &ks[i] {
                    match model.time(k, elem, spec) {
                        Some(t) if k.pass.is_backward() => b += t,
                        Some(t) => f += t,
                        None => all = false,
                    }
                }
                all.then(|| Seconds::new(f).max(time_fwd) + Seconds::new(b).max(time_bwd))
            }
            _ => None,
        };
        let (compute, memory) = (cf + cb, mf + mb);
        let bound = if time.value() == 0.0 {
            Bound::None
        } else if compute >= memory {
            Bound::Compute
        } else {
            Bound::Memory
        };
        let flops = l.flops_fwd + l.flops_bwd;
        let bytes = l.hbm_bytes_fwd + l.hbm_bytes_bwd;
        layers.push(RooflineLayer {
            name: l.name,
            op: l.op,
            peak: class,
            flops,
            bytes,
            arithmetic_intensity: l.arithmetic_intensity,
            time_fwd,
            time_bwd,
            time,
            bound,
            attained: if time.value() > 0.0 {
                flops / time
            } else {
                FlopRate::ZERO
            },
            calibrated: fitted.is_some(),
            transferred,
        });
    }
    let sum_time = |b: Option<Bound>| {
        layers
            .iter()
            .filter(|l| b.is_none_or(|b| l.bound == b))
            .map(|l| l.time)
            .sum::<Seconds>()
    };
    let step_time = sum_time(None);
    let attained = cost.flops_train / step_time;
    Ok(Roofline {
        workload: cost.workload,
        system: system.name.clone(),
        device: device.name.clone(),
        batch: cost.batch,
        precision: cost.precision,
        efficiency,
        machine_balance: device
            .memory_bandwidth
            .as_ref()
            .map(|b| matrix_peak.rate / b.value),
        memory_bandwidth: device.memory_bandwidth.as_ref().map(|b| b.value),
        assumptions: system.assumptions.clone(),
        flops: cost.flops_train,
        bytes: cost.hbm_bytes_train,
        step_time,
        compute_bound_time: sum_time(Some(Bound::Compute)),
        memory_bound_time: sum_time(Some(Bound::Memory)),
        attained,
        fraction_of_peak: attained / matrix_peak.rate,
        samples_per_second: cost.batch as f64 / step_time.value(),
        calibrated_layers: layers.iter().filter(|l| l.calibrated).count(),
        matrix_peak,
        vector_peak,
        layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::cost::cost;
    use crate::precision::Precision;
    use crate::workloads::{self, BuildOptions};

    fn run(
        workload: &str,
        system: &str,
        batch: u64,
        p: Precision,
        check: impl FnOnce(&Roofline<'_>),
    ) {
        let g = workloads::build(workload, &BuildOptions::default()).unwrap();
        let s = catalog::system(system).unwrap();
        check(&roofline(&g, &cost(&g, batch, p), &s, Efficiency::IDEAL).unwrap());
    }

    #[test]
    fn layer_time_is_at_least_each_bound() {
        run("resnet50", "v100-sxm2-16gb", 32, Precision::AmpFp16, |r| {
            for l in &r.layers {
                let peak = match l.peak {
                    PeakClass::Matrix => r.matrix_peak.rate,
                    PeakClass::Vector => r.vector_peak.rate,
                };
                let tolerance = 1.0 - 1e-12;
                assert!(
                    l.time.value() >= (l.bytes / r.memory_bandwidth.unwrap()).value() * tolerance
                );
                assert!(l.time.value() >= (l.flops / peak).value() * tolerance);
            }
            let sum: f64 = r.layers.iter().map(|l| l.time.value()).sum();
            assert!((sum - r.step_time.value()).abs() <= 1e-12 * sum);
        });
    }

    #[test]
    fn pointwise_relu_is_memory_bound_and_big_convs_compute_bound() {
        run("cosmoflow", "v100-sxm2-16gb", 8, Precision::Fp32, |r| {
            let find = |n: &str| r.layers.iter().find(|l| l.name == n).unwrap();
            assert_eq!(find("leaky_re_lu_0").bound, Bound::Memory);
            assert_eq!(find("conv3d_1").bound, Bound::Compute);
            assert_eq!(find("flatten").bound, Bound::None);
        });
    }

    #[test]
    fn halving_efficiency_doubles_time() {
        let g = workloads::build("resnet50", &BuildOptions::default()).unwrap();
        let s = catalog::system("a100-sxm4-40gb").unwrap();
        let c = cost(&g, 64, Precision::AmpBf16);
        let ideal = roofline(&g, &c, &s, Efficiency::IDEAL).unwrap();
        let half = roofline(&g, &c, &s, Efficiency::new(0.5, 0.5).unwrap()).unwrap();
        let ratio = half.step_time.value() / ideal.step_time.value();
        assert!((ratio - 2.0).abs() < 1e-9, "{ratio}");
        assert!(Efficiency::new(0.0, 1.0).is_err());
        assert!(Efficiency::new(1.0, 1.5).is_err());
    }

    #[test]
    fn unsupported_precision_is_an_error() {
        let g = workloads::build("resnet50", &BuildOptions::default()).unwrap();
        let s = catalog::system("cori-gpu").unwrap();
        let err =
            roofline(&g, &cost(&g, 8, Precision::AmpBf16), &s, Efficiency::IDEAL).unwrap_err();
        assert!(err.to_string().contains("v100-sxm2-16gb"), "{err}");
    }
}
