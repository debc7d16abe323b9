//! The step model: a workload at a precision as per-layer affine costs of the batch
//! ([`StepModel`]), and a device's attained rates.

use serde::Serialize;

use super::KernelModel;
use super::StackEffects;
use crate::error::Result;
use crate::graph::{Graph, NodeId};
use crate::kernels::Kernel;
use crate::memory::{Footprint, Optimizer};
use crate::precision::Precision;
use crate::profile::{Profile, precision_name};
use crate::roofline::Efficiency;
use crate::stack::residuals::StepBand;
use crate::system::{DeviceKind, System};
use crate::transfer::cpu::{CpuModel, CpuSpec, Software};
use crate::transfer::{DeviceSpec, Model as TransferModel};

/// Per-layer costs of a workload at a precision as affine functions of the batch size:
/// FLOPs `f x b`, bytes `a x b + w`. Flat arrays, one entry per layer that does any work, or
/// per group of layers its software stack fuses ([`StepModel::with_stack`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    pub(super) workload: String,
    pub(super) precision: Precision,
    pub(super) matrix: Vec<bool>,
    /// Each entry's name (a fused group's members joined by `+`).
    pub(super) names: Vec<String>,
    /// Each entry's op kind (its first member's).
    pub(super) kinds: Vec<&'static str>,
    /// Each entry's first layer in the graph.
    pub(super) heads: Vec<NodeId>,
    /// The precision each entry's matrix kernels run in (TF32 for FP32 training where the
    /// stack says so).
    pub(super) math: Vec<Precision>,
    /// Whether each entry's forward pass runs again in backward (the stack's
    /// recomputation).
    pub(super) recompute: Vec<bool>,
    /// Each layer's trainable parameters (its gradient's elements).
    pub layer_params: Vec<u64>,
    pub(super) flops_fwd: Vec<f64>,
    pub(super) flops_bwd: Vec<f64>,
    pub(super) act_fwd: Vec<f64>,
    pub(super) weights_fwd: Vec<f64>,
    pub(super) act_bwd: Vec<f64>,
    pub(super) weights_bwd: Vec<f64>,
    /// Each layer's kernels at batch 1 and at batch 2 (their features are affine in the
    /// batch, so any batch follows), for calibrated profiles.
    pub(super) kernels: Vec<[Vec<Kernel>; 2]>,
    /// Each entry's kernel launches forward and backward (a fused group's kernels of a pass
    /// are one).
    pub(super) launches: Vec<[u32; 2]>,
    /// The host's time to issue each entry's forward pass, seconds.
    pub(super) host_fwd: Vec<f64>,
    /// The host's time to issue each entry's backward pass (its gradients' accumulation
    /// included), seconds.
    pub(super) host_bwd: Vec<f64>,
    /// The host's time once a step (a captured graph's launch), seconds.
    pub(super) host_step: f64,
    /// The host's time for the optimizer's step, seconds.
    pub(super) host_update: f64,
    /// The device's gap between two kernels, seconds.
    pub(super) kernel_gap: f64,
    /// Whose kernels run the step on a CPU, as the stack says (`host.cpu_kernels`); `None`
    /// where it does not (then [`Software::Onednn`]'s).
    pub(super) cpu_kernels: Option<Software>,
    /// What the stack changed.
    pub(super) effects: StackEffects,
    /// The 90 % band of measured over predicted step time under the stack on a GPU and on a
    /// CPU, from the steps validated under it ([`crate::stack::residuals`]); `None` where
    /// there are too few.
    pub(super) bands: Bands,
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
    /// The model of `graph` at `precision`, with `optimizer` for the footprint, under the
    /// default stack ([`crate::catalog::DEFAULT_STACK`]).
    pub fn new(graph: &Graph, precision: Precision, optimizer: Optimizer) -> StepModel {
        Self::with_stack(graph, precision, optimizer, crate::catalog::default_stack())
    }

    /// The precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The workload's name.
    pub fn workload(&self) -> &str {
        &self.workload
    }

    /// What the stack changed in this model.
    pub fn effects(&self) -> &StackEffects {
        &self.effects
    }

    /// The band of measured over predicted step time that is the step's 90 % interval on a
    /// device of `kind`.
    pub fn band(&self, kind: DeviceKind) -> Option<&StepBand> {
        match kind {
            DeviceKind::Gpu => self.bands.gpu.as_ref(),
            DeviceKind::Cpu => self.bands.cpu.as_ref(),
        }
    }

    /// The band that is the 90 % interval of a step on a device of `kind` whose layers were
    /// timed `by` these models: the stack's band, where it speaks for steps timed so
    /// (`Bands::applies`).
    pub fn interval_band(&self, kind: DeviceKind, by: &TimedBy) -> Option<&StepBand> {
        self.band(kind).filter(|_| Bands::applies(kind, by))
    }

    /// Replaces that band on devices of `kind`: a validation judges each measured step by a
    /// band without its own residual ([`crate::stack::residuals::band`] with `leave_out`).
    pub fn set_band(&mut self, kind: DeviceKind, band: Option<StepBand>) {
        match kind {
            DeviceKind::Gpu => self.bands.gpu = band,
            DeviceKind::Cpu => self.bands.cpu = band,
        }
    }

    /// Forward time and training-step time of one device at local batch `b` (see
    /// [`StepModel::layer_times`]), plus the optimizer update at the memory bandwidth, and
    /// how many layers each model timed.
    ///
    /// On an accelerator the host and the device run as two timelines: the host issues each
    /// pass in its time (the stack's), forward in layer order and backward in reverse; the
    /// device runs a pass once it is free and, at the latest, ends it its last kernel after
    /// the host issued the pass (`Timeline::issue`). A step of many short kernels thus comes out
    /// host-bound. On a CPU the host runs the kernels itself: the times add.
    pub fn device_times(&self, b: f64, rates: &DeviceRates, timing: &Timing<'_>) -> StepTimes {
        let update = self.update_bytes / rates.bandwidth;
        let n = self.matrix.len();
        let mut groups = Groups::new();
        let mut passes = Vec::with_capacity(n);
        let mut timed_by = TimedBy::default();
        let (mut forward, mut busy) = (0.0, update);
        for i in 0..n {
            let l = self.time_layer(i, b, rates, timing);
            let t = l.forward_s + l.backward_s;
            forward += l.forward_s;
            busy += t;
            timed_by.count(l.by);
            if let Some([lo, hi]) = l.interval_90_s {
                groups.add(l.group.unwrap_or(UNGROUPED), t - lo, hi - t);
            }
            passes.push((l.forward_s, l.backward_s, l.kernels));
        }
        let (step, eval, host) = if timing.host {
            let mut fwd = Timeline::new(self.host_step);
            for (i, &(f, _, [kf, _])) in passes.iter().enumerate() {
                fwd.issue(self.host_fwd[i], f, kf);
            }
            let eval = fwd.end();
            let mut all = fwd;
            for (i, &(_, bw, [_, kb])) in passes.iter().enumerate().rev() {
                all.issue(self.host_bwd[i], bw, kb);
            }
            all.issue(self.host_update, update, 1);
            (all.end(), eval, all.host)
        } else {
            (busy, forward, 0.0)
        };
        let [lo, hi] = groups.total();
        // A modelled step is as far off as the steps validated under its stack have been,
        // kernels and all, where it is timed as they were (`Bands::applies`); else as far as
        // its kernels' fits say.
        let kind = if timing.gpu {
            DeviceKind::Gpu
        } else {
            DeviceKind::Cpu
        };
        let interval_90 = match self.interval_band(kind, &timed_by) {
            Some(band) => band.around(step),
            None => [step - lo, step + hi],
        };
        StepTimes {
            forward: eval,
            step,
            timed_by,
            interval_90,
            host,
            busy,
        }
    }

    /// The forward and the backward time of the entries whose first layer `keep` takes (a
    /// pipeline stage's), one device at local batch `b`: on an accelerator through the two
    /// timelines of [`StepModel::device_times`], without the update; else their sums.
    pub fn pass_times(
        &self,
        b: f64,
        rates: &DeviceRates,
        timing: &Timing<'_>,
        keep: impl Fn(NodeId) -> bool,
    ) -> [f64; 2] {
        let passes: Vec<(usize, Timed)> = (0..self.matrix.len())
            .filter(|&i| keep(self.heads[i]))
            .map(|i| (i, self.time_layer(i, b, rates, timing)))
            .collect();
        if !timing.host {
            return [
                passes.iter().map(|(_, l)| l.forward_s).sum(),
                passes.iter().map(|(_, l)| l.backward_s).sum(),
            ];
        }
        let mut t = Timeline::new(0.0);
        for (i, l) in &passes {
            t.issue(self.host_fwd[*i], l.forward_s, l.kernels[0]);
        }
        let forward = t.end();
        for (i, l) in passes.iter().rev() {
            t.issue(self.host_bwd[*i], l.backward_s, l.kernels[1]);
        }
        [forward, t.end() - forward]
    }

    /// Each layer's forward and backward time on one device at local batch `b`, and the
    /// model that timed it: the fitted kernel times of a calibrated `profile` where it has
    /// fits for the layer's kernels; else the transferred kernel model
    /// ([`crate::transfer::Model`]) where the device has the figures it needs, never below
    /// the ideal bound; else the ideal bound `max(F / (peak x eff), B / (BW x eff))`. On an
    /// accelerator the transferred model and the ideal bound time a kernel's work on the
    /// device plus the stack's gap between kernels, the host's issuing being the step's
    /// ([`StepModel::device_times`]); without it, the transferred model keeps its in-step
    /// floor.
    pub fn layer_times(&self, b: f64, rates: &DeviceRates, timing: &Timing<'_>) -> Vec<LayerTime> {
        (0..self.matrix.len())
            .map(|i| {
                let l = self.time_layer(i, b, rates, timing);
                LayerTime {
                    layer: self.names[i].clone(),
                    timed_by: l.by,
                    forward_s: l.forward_s,
                    backward_s: l.backward_s,
                    interval_90_s: l.interval_90_s,
                }
            })
            .collect()
    }

    /// Layer `i`'s times ([`StepModel::layer_times`]), without its name: the sweep's path.
    /// An entry the stack recomputes runs its forward pass again in backward.
    fn time_layer(&self, i: usize, b: f64, rates: &DeviceRates, timing: &Timing<'_>) -> Timed {
        let mut l = self.time_layer_once(i, b, rates, timing);
        if self.recompute[i] {
            let once = l.forward_s + l.backward_s;
            l.backward_s += l.forward_s;
            l.kernels[1] += l.kernels[0];
            let grow = (once + l.forward_s) / once.max(f64::MIN_POSITIVE);
            l.interval_90_s = l.interval_90_s.map(|[lo, hi]| [lo * grow, hi * grow]);
        }
        l
    }

    fn time_layer_once(&self, i: usize, b: f64, rates: &DeviceRates, timing: &Timing<'_>) -> Timed {
        // TF32 where the stack runs this layer's FP32 matrix kernels so and the device has
        // TF32 tensor cores.
        // TF32 where the stack runs this layer's FP32 matrix kernels so and the device has
        // TF32 tensor cores; FP8 where it runs them so under FP8 training (the device's FP8
        // peak, checked with the rates).
        let fast = match self.math[i] {
            Precision::Tf32 => rates.tf32.map(|r| (Precision::Tf32, r, timing.tf32)),
            Precision::Fp8 => rates.fp8.map(|r| (Precision::Fp8, r, timing.fp8)),
            _ => None,
        };
        let base = self.precision.base();
        let (precision, peak) = match (fast, self.matrix[i]) {
            (Some((p, r, _)), _) => (p, r),
            (None, true) => (base, rates.matrix),
            (None, false) => (base, rates.vector),
        };
        let name = precision_name(precision);
        // FP8 products read one-byte operands.
        let elem = if precision == Precision::Fp8 {
            1
        } else {
            self.precision.compute_bytes()
        };
        let [k1, k2] = &self.kernels[i];
        let count = |backward: bool| {
            k1.iter()
                .filter(|k| k.pass.is_backward() == backward)
                .count() as u32
        };
        let kernels = if k1.is_empty() {
            [
                1,
                u32::from(self.flops_bwd[i] > 0.0 || self.act_bwd[i] > 0.0),
            ]
        } else {
            [count(false), count(true)]
        };
        // The device's gap between kernels, where the host is modelled apart.
        let gap = |pass: usize| {
            if timing.host {
                self.kernel_gap * f64::from(kernels[pass])
            } else {
                0.0
            }
        };
        let ideal_fwd = (b * self.flops_fwd[i] / peak)
            .max((b * self.act_fwd[i] + self.weights_fwd[i]) / rates.bandwidth)
            + gap(0);
        let ideal_bwd = (b * self.flops_bwd[i] / peak)
            .max((b * self.act_bwd[i] + self.weights_bwd[i]) / rates.bandwidth)
            + gap(1);
        let at = |t1: f64, t2: f64| t1 + (t2 - t1) * (b - 1.0);
        let layer = |by, forward_s, backward_s| Timed {
            by,
            forward_s,
            backward_s,
            interval_90_s: None,
            group: None,
            kernels,
        };
        if let Some(p) = timing.profile
            && !k1.is_empty()
            && let (Some((f1, b1)), Some((f2, b2))) =
                (p.layer_times(k1, name), p.layer_times(k2, name))
        {
            let mut l = layer(TimedByModel::Profile, at(f1, f2), at(b1, b2));
            l.interval_90_s = p
                .layer_interval(k1, name)
                .zip(p.layer_interval(k2, name))
                .map(|(a, c)| [at(a[0], c[0]), at(a[1], c[1])]);
            l.group = p
                .fit_index(&k1[0], name)
                .and_then(|i| u32::try_from(i).ok());
            return l;
        }
        if let Some((model, spec)) = &timing.cpu
            && !k1.is_empty()
        {
            let software = self.cpu_kernels.unwrap_or(Software::Onednn);
            // Per pass: the time and its interval's ends.
            let mut fwd = [0.0; 3];
            let mut bwd = [0.0; 3];
            for (a, c) in k1.iter().zip(k2) {
                let mut kernel = at_batch(a, c, &at);
                if let Some(io) = kernel.conv.as_mut()
                    && let (Some(i1), Some(i2)) = (a.conv, c.conv)
                {
                    io.elements = at(i1.elements, i2.elements);
                }
                let Some((t, interval)) = model.timed(&kernel, software, elem, spec) else {
                    return layer(TimedByModel::Ideal, ideal_fwd, ideal_bwd);
                };
                let [lo, hi] = interval.unwrap_or([1.0, 1.0]);
                let pass = if a.pass.is_backward() {
                    &mut bwd
                } else {
                    &mut fwd
                };
                pass[0] += t;
                pass[1] += t * lo;
                pass[2] += t * hi;
            }
            // Never below the ideal bound, the interval's ends included.
            let floor = |p: [f64; 3], ideal: f64| p.map(|v| v.max(ideal));
            let (f, b) = (floor(fwd, ideal_fwd), floor(bwd, ideal_bwd));
            let mut l = layer(TimedByModel::Transfer, f[0], b[0]);
            l.interval_90_s = Some([f[1] + b[1], f[2] + b[2]]);
            l.group = Some(TRANSFER_GROUPS + k1[0].class as u32);
            return l;
        }
        let spec = match fast {
            Some((_, _, spec)) => spec,
            None => timing.transfer.map(|(_, s)| s),
        };
        if let (Some((model, _)), Some(spec)) = (&timing.transfer, spec)
            && !k1.is_empty()
        {
            // Per pass: the time and its interval's ends.
            let mut fwd = [0.0; 3];
            let mut bwd = [0.0; 3];
            for (a, c) in k1.iter().zip(k2) {
                let kernel = at_batch(a, c, &at);
                let timed = if timing.host {
                    model.work_timed(&kernel, elem, &spec)
                } else {
                    model.timed(&kernel, elem, &spec)
                };
                let Some((t, [lo, hi])) = timed else {
                    return layer(TimedByModel::Ideal, ideal_fwd, ideal_bwd);
                };
                let pass = if a.pass.is_backward() {
                    &mut bwd
                } else {
                    &mut fwd
                };
                pass[0] += t;
                pass[1] += t * lo;
                pass[2] += t * hi;
            }
            // Never below the ideal bound, the interval's ends included. The layer's kernels
            // are taken as off together, so the ends add (over the step, by class:
            // `StepTimes::interval_90`).
            let floor = |p: [f64; 3], ideal: f64, gap: f64| p.map(|v| (v + gap).max(ideal));
            let (f, b) = (floor(fwd, ideal_fwd, gap(0)), floor(bwd, ideal_bwd, gap(1)));
            let mut l = layer(TimedByModel::Transfer, f[0], b[0]);
            l.interval_90_s = Some([f[1] + b[1], f[2] + b[2]]);
            l.group = Some(TRANSFER_GROUPS + k1[0].class as u32);
            return l;
        }
        layer(TimedByModel::Ideal, ideal_fwd, ideal_bwd)
    }
}

/// The kernel `a` (at batch 1) with its features at the batch `at` takes them to from `a`'s
/// and `c`'s (at batch 2); its convolution I/O stays `a`'s.
fn at_batch(a: &Kernel, c: &Kernel, at: &dyn Fn(f64, f64) -> f64) -> Kernel {
    let mut kernel = *a;
    for (x, (x1, x2)) in kernel.x.iter_mut().zip(a.x.iter().zip(&c.x)) {
        *x = at(*x1, *x2);
    }
    kernel
}

/// The host and the device as two timelines: the host issues passes one after another, the
/// device runs each once it is free, and ends it no sooner than its last kernel after the
/// host issued it (kernels taken as of equal length).
struct Timeline {
    host: f64,
    device: f64,
}

impl Timeline {
    /// Both start once the host has spent `start` (a captured graph's launch).
    fn new(start: f64) -> Timeline {
        Timeline {
            host: start,
            device: start,
        }
    }

    /// The host issues a pass of `kernels` kernels in `host` seconds that runs `device`
    /// seconds on the device.
    fn issue(&mut self, host: f64, device: f64, kernels: u32) {
        self.host += host;
        let last = device / f64::from(kernels.max(1));
        self.device = (self.device + device).max(self.host + last);
    }

    /// When both are done.
    fn end(&self) -> f64 {
        self.device.max(self.host)
    }
}

/// A layer's times, as [`LayerTime`] without its name.
struct Timed {
    by: TimedByModel,
    forward_s: f64,
    backward_s: f64,
    interval_90_s: Option<[f64; 2]>,
    /// The fit whose residuals give the interval (a profile's kernel fit by its index, or a
    /// transferred class at [`TRANSFER_GROUPS`] on), by the layer's first kernel.
    group: Option<u32>,
    /// Its kernels forward and backward (one a pass where it has none listed).
    kernels: [u32; 2],
}

/// Where the transferred model's classes start among the groups of [`Timed::group`].
const TRANSFER_GROUPS: u32 = 1 << 20;
/// The group of layers with an interval but no fit named (none today; kept together).
const UNGROUPED: u32 = u32::MAX;

/// Each group's deviations of a step from its point figure, summed over the group's layers:
/// a step's layers of one fit are off together, different fits independently. Fixed size
/// (the sweep's path allocates nothing); past its size, groups share the last slot, which
/// only takes them as off together.
struct Groups {
    keys: [u32; 32],
    dev: [[f64; 2]; 32],
    len: usize,
}

impl Groups {
    fn new() -> Groups {
        Groups {
            keys: [0; 32],
            dev: [[0.0; 2]; 32],
            len: 0,
        }
    }

    /// Adds `lo` below and `hi` above the point figure to `key`'s group.
    fn add(&mut self, key: u32, lo: f64, hi: f64) {
        let slot = match self.keys[..self.len].iter().position(|&k| k == key) {
            Some(i) => i,
            None if self.len < self.keys.len() => {
                self.keys[self.len] = key;
                self.len += 1;
                self.len - 1
            }
            None => self.keys.len() - 1,
        };
        self.dev[slot][0] += lo.max(0.0);
        self.dev[slot][1] += hi.max(0.0);
    }

    /// The step's deviations below and above: the groups' root sum of squares.
    fn total(&self) -> [f64; 2] {
        [0, 1].map(|e| {
            self.dev[..self.len]
                .iter()
                .map(|d| d[e] * d[e])
                .sum::<f64>()
                .sqrt()
        })
    }
}

/// A stack's bands of validated steps, by the kind of device they ran on.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Bands {
    pub(super) gpu: Option<StepBand>,
    pub(super) cpu: Option<StepBand>,
}

impl Bands {
    /// Whether the band of `kind` speaks for a step timed `by` these models: the GPU steps
    /// of `data/catalog/stacks/residuals.csv` were predicted uncalibrated, by the transferred kernel
    /// model, so a GPU's band is for uncalibrated predictions (a calibrated GPU keeps its
    /// fits' interval); the CPU steps were calibrated. Never at the ideal bound.
    pub(super) fn applies(kind: DeviceKind, by: &TimedBy) -> bool {
        match kind {
            DeviceKind::Gpu => by.transfer > 0 && by.profile == 0,
            DeviceKind::Cpu => by.profile > 0,
        }
    }

    /// `stack`'s bands ([`crate::stack::residuals::band`]).
    pub(super) fn of(stack: &crate::stack::Stack) -> Bands {
        use crate::stack::residuals::band;
        Bands {
            gpu: band(stack, DeviceKind::Gpu, None),
            cpu: band(stack, DeviceKind::Cpu, None),
        }
    }
}

/// What times a step's layers: a calibrated profile where it covers them, else the
/// transferred kernel model where given, else the ideal bound.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timing<'a> {
    /// A calibrated profile of the device.
    pub profile: Option<&'a Profile>,
    /// The transferred kernel model and the device's figures for it.
    pub transfer: Option<(&'a TransferModel, DeviceSpec)>,
    /// The CPU kernel model and the CPU's figures for it, on a CPU whose file gives them and
    /// that has no calibrated profile.
    pub cpu: Option<(&'a CpuModel, CpuSpec)>,
    /// The device's figures for TF32 kernels, where it has TF32 tensor cores and the step
    /// trains in FP32 (for the layers the stack runs in TF32).
    pub tf32: Option<DeviceSpec>,
    /// The device's figures for FP8 products, where the step trains in FP8 (for the layers
    /// the stack runs in FP8): the BF16 layers' classes at the FP8 peak
    /// ([`DeviceSpec::fp8`]).
    pub fp8: Option<DeviceSpec>,
    /// Whether the host issues the device's kernels (an accelerator): the host and the
    /// device run as two timelines, the stack's host times on one and the kernels' work
    /// plus the stack's gaps on the other.
    pub host: bool,
    /// Whether the device is an accelerator: the band of steps validated on GPUs, not on
    /// CPUs, gives the step's interval ([`StepModel::band`]).
    pub gpu: bool,
}

impl<'a> Timing<'a> {
    /// What times layers on `system` at `precision`: its calibrated profile where it has
    /// one, and the transferred kernel model (where `kernel_model` asks for it and the
    /// device file gives its figures).
    pub fn of(system: &'a System, precision: Precision, kernel_model: KernelModel) -> Timing<'a> {
        let transfer = match kernel_model {
            // FP8 training times its layers outside FP8 as BF16 ones.
            KernelModel::Transfer => DeviceSpec::of(&system.device, precision.base())
                .map(|spec| (TransferModel::builtin(), spec)),
            KernelModel::Ideal => None,
        };
        let has_tf32 = system.device.peak.tf32_tensor.is_some();
        let cores = system.device.cores.as_ref().map_or(1, |c| c.value);
        Timing {
            // A calibrated CPU keeps its profile's fits, and the ideal bound at its measured
            // ceilings for the layers they lack: it was measured, not transferred to.
            cpu: match kernel_model {
                KernelModel::Transfer if system.calibration.is_none() => {
                    CpuSpec::of(&system.device, cores, precision.base())
                        .map(|spec| (CpuModel::builtin(), spec))
                }
                _ => None,
            },
            fp8: transfer
                .filter(|_| precision == Precision::Fp8)
                .and_then(|_| DeviceSpec::fp8(&system.device)),
            profile: system.calibration.as_deref(),
            tf32: transfer
                .filter(|_| precision == Precision::Fp32 && has_tf32)
                .and_then(|_| DeviceSpec::of(&system.device, Precision::Tf32)),
            transfer,
            // The ideal bound is the hardware's: no host, no gaps between kernels.
            host: system.device.kind == DeviceKind::Gpu && kernel_model == KernelModel::Transfer,
            gpu: system.device.kind == DeviceKind::Gpu,
        }
    }
}

/// The model that timed a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimedByModel {
    /// Fitted kernel times of a calibrated profile of the device.
    Profile,
    /// The device-transferable kernel model, from the device file.
    Transfer,
    /// The ideal bound: datasheet peak and bandwidth times the efficiencies.
    Ideal,
}

impl TimedByModel {
    /// Its name in outputs.
    pub fn name(self) -> &'static str {
        match self {
            TimedByModel::Profile => "profile",
            TimedByModel::Transfer => "transfer",
            TimedByModel::Ideal => "ideal",
        }
    }
}

/// How many layers each model timed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct TimedBy {
    /// By a calibrated profile.
    pub profile: usize,
    /// By the transferred kernel model.
    pub transfer: usize,
    /// By the ideal bound.
    pub ideal: usize,
}

impl TimedBy {
    fn count(&mut self, m: TimedByModel) {
        match m {
            TimedByModel::Profile => self.profile += 1,
            TimedByModel::Transfer => self.transfer += 1,
            TimedByModel::Ideal => self.ideal += 1,
        }
    }

    /// In one word where one model timed every layer (`transfer`), else each with its
    /// count (`transfer 24, ideal 2`), for table columns.
    pub fn short(&self) -> String {
        let parts: Vec<(&str, usize)> = [
            ("profile", self.profile),
            ("transfer", self.transfer),
            ("ideal", self.ideal),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect();
        match parts.as_slice() {
            [(m, _)] => (*m).to_owned(),
            _ => parts
                .iter()
                .map(|(m, n)| format!("{m} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// In words: `transferred kernel model (24 layers), ideal bound (2 layers)`.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = [
            ("calibrated profile", self.profile),
            ("transferred kernel model", self.transfer),
            ("ideal bound", self.ideal),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(m, n)| format!("{m} ({n} layer{})", if *n == 1 { "" } else { "s" }))
        .collect();
        parts.join(", ")
    }
}

/// One device's times of a step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTimes {
    /// Forward pass, seconds.
    pub forward: f64,
    /// Training step (forward, backward, update), seconds.
    pub step: f64,
    /// How many layers each model timed.
    pub timed_by: TimedBy,
    /// The host's time to issue the step, seconds (0 where the host runs the kernels
    /// itself, a CPU).
    pub host: f64,
    /// The device's busy time: its kernels' work and gaps and the update, seconds.
    pub busy: f64,
    /// The step's 90 % interval, seconds: where the stack has a band of validated steps
    /// ([`StepModel::band`]), the step times that band; else from its layers' intervals (a
    /// calibrated profile's kernel fits' residuals, the transferred model's held-out ones):
    /// the layers of one fit off together, different fits independently (the deviations'
    /// root sum of squares over the fits). Layers at the ideal bound add no width (the
    /// bound is a floor, and nothing measured says how far above it they run), so a step at
    /// the bound throughout has equal ends.
    pub interval_90: [f64; 2],
}

/// One layer's times on one device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LayerTime {
    /// The layer's name.
    pub layer: String,
    /// The model that timed it.
    pub timed_by: TimedByModel,
    /// Forward pass, seconds.
    pub forward_s: f64,
    /// Backward pass, seconds.
    pub backward_s: f64,
    /// Where the transferred model timed it, the 90 % interval of forward plus backward,
    /// seconds, from its kernels' classes' held-out intervals (never below the ideal bound).
    pub interval_90_s: Option<[f64; 2]>,
}

/// A device's attained rates: matrix and vector FLOP/s and memory bytes/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeviceRates {
    /// FLOP/s of matrix ops.
    pub matrix: f64,
    /// FLOP/s of TF32 matrix ops, where the device has TF32 tensor cores and the step
    /// trains in FP32.
    pub tf32: Option<f64>,
    /// FLOP/s of FP8 products, where the step trains in FP8.
    pub fp8: Option<f64>,
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
            // FP8 training runs its other matrix layers in BF16 (a device without an FP8
            // peak is refused here, naming the figure it lacks).
            fp8: if precision == Precision::Fp8 {
                Some(d.matrix_peak(precision)?.rate.value() * efficiency.compute)
            } else {
                None
            },
            matrix: d.matrix_peak(precision.base())?.rate.value() * efficiency.compute,
            tf32: d
                .peak
                .tf32_tensor
                .as_ref()
                .filter(|_| precision == Precision::Fp32)
                .map(|p| p.value.value() * efficiency.compute),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Conv, Op};
    use crate::kernels::{KernelClass, KernelPass};

    /// A profile with every pass of spatial and pointwise convolutions fitted (the sample's
    /// forward fit copied), each class at its own residual spread; nothing else.
    fn profile() -> Profile {
        let mut p = crate::profile::tests::sample();
        let fit = p.kernels[0].clone();
        p.kernels.clear();
        for (class, rms) in [
            (KernelClass::ConvSpatial, 0.1),
            (KernelClass::ConvPointwise, 0.2),
        ] {
            for pass in [
                KernelPass::Forward,
                KernelPass::BackwardData,
                KernelPass::BackwardFilter,
            ] {
                let mut f = fit.clone();
                f.class = class;
                f.pass = pass;
                f.rms_rel_error = rms;
                f.terms = crate::profile::Term::for_class(
                    class,
                    &[1e-5, 1e-11, 1e-10, 0.0, 1e-10],
                    &[0.0; 5],
                );
                p.kernels.push(f);
            }
        }
        p
    }

    fn rates() -> DeviceRates {
        DeviceRates {
            matrix: 1e12,
            tf32: None,
            fp8: None,
            vector: 1e11,
            bandwidth: 1e11,
        }
    }

    /// The deviations of the step's interval from its point figure.
    fn spread(g: &Graph, p: &Profile) -> ([f64; 2], Vec<LayerTime>) {
        // The kernels' interval alone: no band of validated steps.
        let mut m = StepModel::new(g, Precision::Fp32, Optimizer::Sgd);
        m.set_band(DeviceKind::Cpu, None);
        let timing = Timing {
            profile: Some(p),
            ..Timing::default()
        };
        let t = m.device_times(2.0, &rates(), &timing);
        let layers = m.layer_times(2.0, &rates(), &timing);
        (
            [t.step - t.interval_90[0], t.interval_90[1] - t.step],
            layers,
        )
    }

    /// The layers a profile timed (those with an interval); two in these tests.
    fn with_interval(layers: &[LayerTime]) -> Vec<&LayerTime> {
        let v: Vec<&LayerTime> = layers
            .iter()
            .filter(|l| l.interval_90_s.is_some())
            .collect();
        assert_eq!(v.len(), 2);
        v
    }

    fn dev(l: &LayerTime) -> [f64; 2] {
        let t = l.forward_s + l.backward_s;
        let [lo, hi] = l.interval_90_s.unwrap();
        [t - lo, hi - t]
    }

    #[test]
    fn layers_of_one_fit_are_off_together_and_different_fits_independently() {
        // Two 3x3 convolutions: one fit (per pass), so their deviations add.
        let mut g = Graph::new("net", vec![4, 16, 16]).unwrap();
        g.then("a", Op::conv(Conv::new(8, &[3, 3]).pad(1))).unwrap();
        g.then("b", Op::conv(Conv::new(8, &[3, 3]).pad(1))).unwrap();
        let p = profile();
        let (d, layers) = spread(&g, &p);
        let convs = with_interval(&layers);
        for e in 0..2 {
            let sum = dev(convs[0])[e] + dev(convs[1])[e];
            assert!((d[e] - sum).abs() <= 1e-12 * sum, "{d:?} {sum}");
        }
        // A 3x3 and a 1x1: two fits, so the root sum of squares, below the sum.
        let mut g = Graph::new("net", vec![4, 16, 16]).unwrap();
        g.then("a", Op::conv(Conv::new(8, &[3, 3]).pad(1))).unwrap();
        g.then("b", Op::conv(Conv::new(8, &[1, 1]))).unwrap();
        let (d, layers) = spread(&g, &p);
        let convs = with_interval(&layers);
        for e in 0..2 {
            let (x, y) = (dev(convs[0])[e], dev(convs[1])[e]);
            let rss = x.hypot(y);
            assert!((d[e] - rss).abs() <= 1e-12 * rss, "{d:?} {rss}");
            assert!(d[e] < x + y);
        }
    }

    #[test]
    fn layers_left_at_the_bound_add_no_width() {
        let mut g = Graph::new("net", vec![4, 16, 16]).unwrap();
        g.then("a", Op::conv(Conv::new(8, &[3, 3]).pad(1))).unwrap();
        let p = profile();
        let (alone, _) = spread(&g, &p);
        // A ReLU: no fit in the profile, so the ideal bound times it.
        g.then("relu", Op::Relu).unwrap();
        let (d, layers) = spread(&g, &p);
        let relu = layers.iter().find(|l| l.layer == "relu").unwrap();
        assert_eq!(relu.timed_by, TimedByModel::Ideal);
        for e in 0..2 {
            assert!(
                (d[e] - alone[e]).abs() <= 1e-12 * alone[e],
                "{d:?} {alone:?}"
            );
        }
        // At the ideal bound throughout, the ends are equal, band or none.
        let m = StepModel::new(&g, Precision::Fp32, Optimizer::Sgd);
        assert!(m.band(DeviceKind::Gpu).is_some());
        let t = m.device_times(2.0, &rates(), &Timing::default());
        assert_eq!(t.interval_90, [t.step, t.step]);
    }

    #[test]
    fn a_stack_with_a_band_of_validated_steps_gives_the_step_that_band() {
        let mut g = Graph::new("net", vec![4, 16, 16]).unwrap();
        g.then("a", Op::conv(Conv::new(8, &[3, 3]).pad(1))).unwrap();
        let p = profile();
        // A calibrated CPU step: the CPU's band (its steps were calibrated too).
        let timing = Timing {
            profile: Some(&p),
            ..Timing::default()
        };
        let mut m = StepModel::new(&g, Precision::Fp32, Optimizer::Sgd);
        let band = StepBand {
            lo: 0.5,
            hi: 3.0,
            steps: 20,
            stack: "pytorch-eager".to_owned(),
            pooled: false,
            kind: DeviceKind::Cpu,
        };
        m.set_band(DeviceKind::Cpu, Some(band.clone()));
        let t = m.device_times(2.0, &rates(), &timing);
        assert_eq!(t.interval_90, [0.5 * t.step, 3.0 * t.step]);
        // On a calibrated GPU the GPU's band, which is for uncalibrated steps, does not
        // speak: the kernels' interval.
        m.set_band(DeviceKind::Gpu, Some(band));
        let gpu = Timing {
            gpu: true,
            ..timing
        };
        let t = m.device_times(2.0, &rates(), &gpu);
        assert!(t.interval_90[1] < 3.0 * t.step && t.interval_90[0] > 0.5 * t.step);
        assert!(Bands::applies(
            DeviceKind::Gpu,
            &TimedBy {
                transfer: 3,
                ..TimedBy::default()
            }
        ));
        assert!(!Bands::applies(DeviceKind::Gpu, &TimedBy::default()));
        // The shipped bands of the default stack are the ones a model gets.
        let m = StepModel::new(&g, Precision::Fp32, Optimizer::Sgd);
        for kind in [DeviceKind::Gpu, DeviceKind::Cpu] {
            let shipped =
                crate::stack::residuals::band(crate::catalog::default_stack(), kind, None);
            assert_eq!(m.band(kind), shipped.as_ref());
        }
    }
}
