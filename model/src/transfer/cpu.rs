//! A kernel model for CPUs you don't have: what a kernel's time on a CPU depends on, from
//! its shape and the CPU's datasheet figures alone, and the fitted model that times it
//! (docs/ARCHITECTURE.md "A kernel model for CPUs you don't have").
//!
//! Each feature is a time in seconds on the CPU at the thread count the kernel runs on, so
//! a fitted coefficient is a dimensionless inverse efficiency (the fixed terms are seconds),
//! shared by every CPU:
//! - **call** (`1`) and **threads** (`log2 t`): a library call's fixed cost and its fork and
//!   join across the threads it runs on, which grows with the depth of the tree the OpenMP
//!   runtimes wake and join threads by (Intel's and LLVM's hyper barrier), not with the threads
//!   one by one: a per-thread term fitted on a CPU of a few cores would charge a 66-thread
//!   Xeon Phi for every thread;
//! - **compute**: the FLOPs at the threads' peak, `t x clock x FLOP/cycle` (the all-core
//!   vector clock where the device file gives one, FLOP per cycle from its peak and the
//!   clock that peak is quoted at; a matrix kernel's from its precision's matrix peak, so
//!   AMX times BF16 products);
//! - **imbalance**: a matrix kernel's output in blocks of 64 x 64 shared among the threads,
//!   the fullest thread's extra share of the compute time, as the libraries split their
//!   output (BLIS's and oneDNN's outer loops);
//! - **operands** and **output**: a matrix kernel's elements packed (both operands) and
//!   written (its output), per thread-cycle;
//! - **cached** and **core-memory**: a kernel's bytes per thread-cycle, apart by whether its
//!   working set fits the last-level cache (a core's own load and store rate, or its share
//!   of the memory system when it streams from DRAM);
//! - **memory**: the bytes of a working set larger than the last-level cache at the
//!   device's memory bandwidth.
//!
//! The model is fitted per software (ridgeline's own kernels, or the library a framework
//! calls: oneDNN and MKL under PyTorch), kernel class and pass on the kernels of several
//! CPUs (`calibrate::cpu_transfer`), each CPU left out in turn for its validation.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kernels::{Kernel, KernelClass, KernelPass};
use crate::precision::Precision;
use crate::system::{Device, DeviceKind};

/// Feature names of matrix kernels (GEMMs and convolutions), in order.
pub const MATRIX_FEATURES: [&str; 7] = [
    "1",
    "threads",
    "compute",
    "imbalance",
    "operands",
    "output",
    "memory",
];

/// Feature names of vector kernels (element-wise, pooling, normalisation), in order.
pub const VECTOR_FEATURES: [&str; 6] =
    ["1", "threads", "compute", "cached", "core-memory", "memory"];

/// The side of the output blocks the threads share ([`features`]'s imbalance).
const BLOCK: f64 = 64.0;

/// What the features need of a CPU at a thread count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuSpec {
    /// Threads the kernels run on, one a core.
    pub threads: f64,
    /// The clock the cores run vector code at, Hz.
    pub clock_hz: f64,
    /// FLOP per cycle per core of matrix kernels at the precision.
    pub matrix_per_cycle: f64,
    /// FLOP per cycle per core of vector kernels at the precision.
    pub vector_per_cycle: f64,
    /// Last-level cache, bytes.
    pub llc_bytes: f64,
    /// Memory bandwidth of the whole device, bytes/s.
    pub bandwidth: f64,
}

impl CpuSpec {
    /// The spec of a CPU device file for kernels at `precision` on `threads` threads (at most
    /// its cores); `None` where the file lacks a figure it needs ([`CpuSpec::missing`]) or
    /// the device is not a CPU.
    pub fn of(device: &Device, threads: u32, precision: Precision) -> Option<CpuSpec> {
        if device.kind != DeviceKind::Cpu {
            return None;
        }
        let cores = device.cores.as_ref()?.value;
        let peak_clock = device.boost_clock_hz.as_ref()?.value;
        let clock = device
            .vector_clock_hz
            .as_ref()
            .map_or(peak_clock, |c| c.value);
        let per_cycle = |rate: f64| rate / (f64::from(cores) * peak_clock);
        Some(CpuSpec {
            threads: f64::from(threads.clamp(1, cores)),
            clock_hz: clock,
            matrix_per_cycle: per_cycle(device.matrix_peak(precision).ok()?.rate.value()),
            vector_per_cycle: per_cycle(device.vector_peak(precision).ok()?.rate.value()),
            llc_bytes: device.llc.as_ref()?.value.value(),
            bandwidth: device.memory_bandwidth.as_ref()?.value.value(),
        })
    }

    /// The figures missing from a CPU device file for a spec, by field name.
    pub fn missing(device: &Device) -> Vec<&'static str> {
        let mut out = Vec::new();
        if device.cores.is_none() {
            out.push("cores");
        }
        if device.boost_clock_hz.is_none() {
            out.push("compute.boost_clock_mhz");
        }
        if device.llc.is_none() {
            out.push("memory.llc_mib");
        }
        if device.memory_bandwidth.is_none() {
            out.push("memory.bandwidth_gbs");
        }
        out
    }

    /// Thread-cycles per second.
    fn cycles(&self) -> f64 {
        self.threads * self.clock_hz
    }
}

/// The features of `kernel` on `d` with `elem` bytes per element, in the order of
/// [`MATRIX_FEATURES`] or [`VECTOR_FEATURES`] by its class.
pub fn features(kernel: &Kernel, elem: u64, d: &CpuSpec) -> Vec<f64> {
    let e = elem as f64;
    let threads = d.threads.log2();
    if kernel.class.is_matrix() {
        let [_, flops, a, b, c] = kernel.x;
        // A convolution reads and writes its tensors once each, not the unrolled input.
        let elements = kernel.conv.map_or(a + b + c, |io| io.elements);
        let bytes = e * elements;
        let compute = flops / (d.cycles() * d.matrix_per_cycle);
        let blocks = (c / (BLOCK * BLOCK)).ceil().max(1.0);
        let fullest = (blocks / d.threads).ceil() * d.threads / blocks;
        vec![
            1.0,
            threads,
            compute,
            compute * (fullest - 1.0),
            (a + b) / d.cycles(),
            c / d.cycles(),
            beyond_llc(bytes, d) / d.bandwidth,
        ]
    } else {
        let [_, flops, bytes, _, _] = kernel.x;
        let dram = beyond_llc(bytes, d);
        vec![
            1.0,
            threads,
            flops / (d.cycles() * d.vector_per_cycle),
            (bytes - dram) / d.cycles(),
            dram / d.cycles(),
            dram / d.bandwidth,
        ]
    }
}

/// `bytes` where they overflow the last-level cache, else zero.
fn beyond_llc(bytes: f64, d: &CpuSpec) -> f64 {
    if bytes > d.llc_bytes { bytes } else { 0.0 }
}

/// The software whose kernels a class times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Software {
    /// ridgeline's own CPU kernels (the `ridgeline-executor` stack).
    Ridgeline,
    /// The libraries eager PyTorch calls on a CPU: oneDNN for convolutions, MKL or oneDNN
    /// for products, ATen's own loops for element-wise ops (the `pytorch-eager` stack).
    Onednn,
}

impl Software {
    /// Its name in model files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Software::Ridgeline => "ridgeline",
            Software::Onednn => "onednn",
        }
    }
}

/// A class of the CPU model: a kernel class and pass, as calibrated profiles split them, and
/// for a vector kernel its op where the class is one op's (`relu`, `dropout`, ...), as ops of
/// one class differ by far more than their bytes say (a dropout draws random numbers); a
/// vector class without an op times the ops that have no class of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CpuClass {
    /// The kernel class.
    pub class: KernelClass,
    /// The pass (a backward op's one pass is `backward`).
    pub pass: KernelPass,
    /// The op of a vector kernel's own class.
    pub op: Option<&'static str>,
}

impl CpuClass {
    /// The class of `kernel`'s own: with its op where it is a vector kernel.
    pub fn of(kernel: &Kernel) -> CpuClass {
        CpuClass {
            class: kernel.class,
            pass: kernel.pass,
            op: kernel.op.filter(|_| !kernel.class.is_matrix()),
        }
    }

    /// The class of every op of this one's kernel class and pass.
    pub fn pooled(self) -> CpuClass {
        CpuClass { op: None, ..self }
    }

    /// The feature names of the class.
    pub fn features(self) -> &'static [&'static str] {
        if self.class.is_matrix() {
            &MATRIX_FEATURES
        } else {
            &VECTOR_FEATURES
        }
    }
}

impl std::fmt::Display for CpuClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.class.name(), self.pass.name())?;
        match self.op {
            Some(op) => write!(f, " {op}"),
            None => Ok(()),
        }
    }
}

/// The fitted CPU kernel model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuModel {
    /// What it was fitted on and how.
    pub source: CpuModelSource,
    /// Per software, class and pass.
    #[serde(rename = "class")]
    pub classes: Vec<CpuCoefficients>,
}

/// What a fitted CPU model came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuModelSource {
    /// The record sets and their provenance.
    pub data: Vec<String>,
    /// The CPUs fitted on, by device name.
    pub cpus: Vec<String>,
    /// The command that fitted it.
    pub fitted_by: String,
}

/// One class's coefficients and what leaving each CPU out gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuCoefficients {
    /// Whose kernels.
    pub software: Software,
    /// The kernel class.
    pub class: KernelClass,
    /// The pass.
    pub pass: KernelPass,
    /// The op of a vector op's own class ([`CpuClass::op`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// Feature names, in order ([`MATRIX_FEATURES`] or [`VECTOR_FEATURES`]).
    pub features: Vec<String>,
    /// One per feature: the fixed terms in seconds, the others dimensionless.
    pub coefficients: Vec<f64>,
    /// Kernels fitted.
    pub points: usize,
    /// The CPUs whose kernels it was fitted on.
    pub cpus: usize,
    /// Leave one CPU out, pooled: median |predicted - measured| / measured; absent with
    /// kernels of fewer than two CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_median_abs_error: Option<f64>,
    /// Leave one CPU out: the 90 % interval of measured / predicted of a CPU outside the
    /// fit; absent with kernels of fewer than two CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holdout_interval_90: Option<[f64; 2]>,
}

impl CpuCoefficients {
    /// The class's time for features `x`, seconds.
    pub fn time(&self, x: &[f64]) -> f64 {
        self.coefficients.iter().zip(x).map(|(c, v)| c * v).sum()
    }
}

/// The fitted model ridgeline ships (`data/evidence/kernels/cpu-transfer.toml`).
const BUILTIN: &str = include_str!("../../../data/evidence/kernels/cpu-transfer.toml");

impl CpuModel {
    /// Reads a model file's text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<CpuModel> {
        let m: CpuModel = toml::from_str(text).map_err(|e| Error::Parse {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        for c in &m.classes {
            let key = format!(
                "class.{}.{}.{}{}",
                c.software.name(),
                c.class.name(),
                c.pass.name(),
                c.op.as_deref().map(|o| format!(".{o}")).unwrap_or_default()
            );
            let expected = CpuClass {
                class: c.class,
                pass: c.pass,
                op: None,
            }
            .features();
            if c.features != expected || c.coefficients.len() != expected.len() {
                return Err(Error::invalid(
                    file,
                    format!("{key}.features"),
                    format!("must be {expected:?}, with one coefficient each"),
                ));
            }
            if c.coefficients.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(Error::invalid(
                    file,
                    format!("{key}.coefficients"),
                    "must be finite and not negative: fit the model again",
                ));
            }
            if let Some([lo, hi]) = c.holdout_interval_90
                && !(lo > 0.0 && lo <= 1.0 && hi >= 1.0 && hi.is_finite())
            {
                return Err(Error::invalid(
                    file,
                    format!("{key}.holdout_interval_90"),
                    "must be [lo, hi] with 0 < lo <= 1 <= hi: fit the model again",
                ));
            }
        }
        Ok(m)
    }

    /// The model ridgeline ships.
    pub fn builtin() -> &'static CpuModel {
        static MODEL: OnceLock<CpuModel> = OnceLock::new();
        MODEL.get_or_init(|| {
            CpuModel::parse(BUILTIN, "data/evidence/kernels/cpu-transfer.toml").unwrap_or_else(
                |e| unreachable!("the built-in CPU kernel model is checked by a test: {e}"),
            )
        })
    }

    /// The coefficients that time `kernel` by `software`'s kernels: its op's class where the
    /// model has one, else its kernel class's; a GEMM's gradient, the GEMM class's.
    pub fn class_for(&self, kernel: &Kernel, software: Software) -> Option<&CpuCoefficients> {
        let own = CpuClass::of(kernel);
        let find = |op: Option<&str>| {
            self.classes.iter().find(|c| {
                c.software == software
                    && c.class == kernel.class
                    && c.pass == kernel.pass
                    && c.op.as_deref() == op
            })
        };
        own.op
            .and_then(|op| find(Some(op)))
            .or_else(|| find(None))
            .or_else(|| {
                // A product's gradients are products of the same sizes, operands transposed:
                // the GEMM class times them where it has no pass of their own.
                (kernel.class == KernelClass::Gemm).then_some(())?;
                self.classes.iter().find(|c| {
                    c.software == software
                        && c.class == KernelClass::Gemm
                        && c.pass == KernelPass::Forward
                        && c.op.is_none()
                })
            })
    }

    /// The time of `kernel` by `software` on `d` with `elem` bytes per element, seconds, with
    /// its class's 90 % interval as multiples of it where the fit has one; `None` where the
    /// model has no class for it.
    pub fn timed(
        &self,
        kernel: &Kernel,
        software: Software,
        elem: u64,
        d: &CpuSpec,
    ) -> Option<(f64, Option<[f64; 2]>)> {
        let c = self.class_for(kernel, software)?;
        Some((c.time(&features(kernel, elem, d)), c.holdout_interval_90))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::kernels::{ConvShape, gemm_kernel, vector_kernel};

    fn spec(threads: f64) -> CpuSpec {
        CpuSpec {
            threads,
            clock_hz: 2e9,
            matrix_per_cycle: 32.0,
            vector_per_cycle: 32.0,
            llc_bytes: 32.0 * 1024.0 * 1024.0,
            bandwidth: 100e9,
        }
    }

    #[test]
    fn a_gemm_is_its_flops_at_the_threads_peak_with_the_fullest_threads_share() {
        // 1024^3: 256 blocks of 64 x 64 on 3 threads: the fullest holds 86 of them.
        let k = gemm_kernel(
            KernelClass::Gemm,
            KernelPass::Forward,
            1024.0,
            1024.0,
            1024.0,
            1.0,
        );
        let x = features(&k, 4, &spec(3.0));
        let compute = 2.0 * 1024f64.powi(3) / (3.0 * 2e9 * 32.0);
        assert!((x[2] - compute).abs() < 1e-12 * compute);
        assert!((x[3] - compute * (86.0 * 3.0 / 256.0 - 1.0)).abs() < 1e-9 * compute);
        // Fork and join: the depth of a tree over 3 threads.
        assert_eq!(x[1], 3f64.log2());
        // 12 MiB of operands fit the 32 MiB LLC: no memory term.
        assert_eq!(x[6], 0.0);
        // One thread: no imbalance, no fork and join.
        let one = features(&k, 4, &spec(1.0));
        assert_eq!((one[1], one[3]), (0.0, 0.0));
    }

    #[test]
    fn bytes_past_the_last_level_cache_stream_at_the_memory_bandwidth() {
        let small = vector_kernel("relu", KernelPass::Forward, 1e6, 8e6).unwrap();
        let large = vector_kernel("relu", KernelPass::Forward, 1e8, 8e8).unwrap();
        let d = spec(2.0);
        let (s, l) = (features(&small, 4, &d), features(&large, 4, &d));
        assert_eq!((s[3], s[4], s[5]), (8e6 / 4e9, 0.0, 0.0));
        assert_eq!((l[3], l[4], l[5]), (0.0, 8e8 / 4e9, 8e8 / 100e9));
    }

    #[test]
    fn a_convolution_moves_its_tensors_not_its_unrolled_input() {
        let c = ConvShape {
            batch: 8,
            c_in: 256,
            c_out: 256,
            input: vec![64, 64],
            output: vec![64, 64],
            kernel: vec![3, 3],
            stride: vec![1, 1],
            padded: true,
            groups: 1,
        };
        let k = c.kernel(KernelPass::Forward);
        let x = features(&k, 4, &spec(1.0));
        let tensors = 4.0 * k.conv.unwrap().elements;
        assert!(tensors > 32.0 * 1024.0 * 1024.0);
        assert_eq!(x[6], tensors / 100e9);
    }

    #[test]
    fn the_catalog_cpus_have_the_models_figures() {
        for name in ["a64fx", "xeon-8480plus", "grace"] {
            let d = catalog::device(name).unwrap();
            assert!(CpuSpec::missing(&d).is_empty(), "{name}");
            let s = CpuSpec::of(&d, 1000, Precision::Fp32).unwrap();
            assert_eq!(
                s.threads,
                f64::from(d.cores.as_ref().unwrap().value),
                "{name}"
            );
        }
        // The A64FX's cores run at normal mode's 2.0 GHz; its peaks are at 2.2 GHz.
        let a64fx = CpuSpec::of(&catalog::device("a64fx").unwrap(), 48, Precision::Fp32).unwrap();
        assert_eq!(a64fx.clock_hz, 2.0e9);
        assert!((a64fx.matrix_per_cycle - 64.0).abs() < 1e-9);
        // Not a GPU.
        let h100 = catalog::device("h100-sxm5-80gb").unwrap();
        assert!(CpuSpec::of(&h100, 1, Precision::Fp32).is_none());
    }

    #[test]
    fn a_vector_op_takes_its_own_class_where_the_model_has_one() {
        let m = CpuModel::builtin();
        let relu = vector_kernel("relu", KernelPass::Forward, 1e6, 8e6).unwrap();
        let c = m.class_for(&relu, Software::Ridgeline).unwrap();
        assert_eq!(c.op.as_deref(), Some("relu"));
        // An op without a class of its own: its kernel class's.
        let sigmoid = vector_kernel("sigmoid", KernelPass::Forward, 1e6, 8e6).unwrap();
        let c = m.class_for(&sigmoid, Software::Ridgeline).unwrap();
        assert_eq!((c.class, c.op.as_deref()), (KernelClass::Elementwise, None));
    }

    #[test]
    fn a_model_file_with_wrong_features_or_negative_coefficients_is_refused() {
        let good = r#"
[source]
data = ["d"]
cpus = ["c"]
fitted_by = "f"
[[class]]
software = "ridgeline"
class = "gemm"
pass = "forward"
features = ["1", "threads", "compute", "imbalance", "operands", "output", "memory"]
coefficients = [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
points = 10
cpus = 1
"#;
        assert_eq!(CpuModel::parse(good, "m.toml").unwrap().classes.len(), 1);
        let e = CpuModel::parse(&good.replace("\"memory\"]", "\"bytes\"]"), "m.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("m.toml") && e.contains("class.ridgeline.gemm.forward.features"),
            "{e}"
        );
        let e = CpuModel::parse(&good.replace("1.0, 0.0, 1.0]", "1.0, 0.0, -1.0]"), "m.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("coefficients") && e.contains("fit the model again"),
            "{e}"
        );
        let e = CpuModel::parse(&good.replace("\"ridgeline\"", "\"mkl\""), "m.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.toml"), "{e}");
    }
}
