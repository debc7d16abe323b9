//! The features of a kernel model that transfers across GPUs: what a kernel's time depends
//! on, computed from its shape and the device file alone (docs/ARCHITECTURE.md "A kernel
//! model for GPUs you don't have").
//!
//! The features follow what is physically there, after the analytical GPU models that
//! NeuSight (Lee et al., ASPLOS 2025) and the roofline literature build on:
//! - **launch**: a constant per kernel (`1`);
//! - **tiling and wave quantization**: a GEMM runs as output tiles, one thread block each,
//!   in waves over the SMs; a wave takes as long as its fullest SM, so the time is the
//!   number of waves times one SM's share of a wave's work at the device's peak
//!   ([`gemm`]). The tiling is the fastest a library could pick: tiles of 32, 64 or 128
//!   rows and columns (small ones several to an SM, at a higher load per FLOP), and the
//!   inner dimension split across blocks (split-K) where that fills idle SMs, at the cost of
//!   reducing the partial tiles;
//! - **per-wave cost**: each wave loads and stores its tiles and synchronises, a fixed number
//!   of cycles: waves over the clock;
//! - **a power cap**: a board cannot draw more than its TDP, so a GEMM's FLOP rate is at most
//!   the TDP over the energy one FLOP takes; that energy falls with the process node
//!   (taken as proportional to its feature size: the switched capacitance shrinks with it
//!   while the supply voltage has stayed near 0.7-0.8 V since 16 nm). The energy per FLOP at
//!   7 nm is fitted per class ([`ClassCoefficients::energy_per_flop_7nm`]); the cap binds
//!   on the 70-75 W cards (P4, T4, L4) and on the 300 W AMD cards whose FP32 runs on matrix
//!   units, not on the 250-700 W NVIDIA data-centre parts;
//! - **a roofline over L2 and HBM**: the bytes a kernel must move at the HBM bandwidth, split
//!   by whether its working set fits the L2 (then it streams at the L2's much higher rate,
//!   which device files do not give: its coefficient is fitted);
//! - convolutions as implicit GEMM (`M = N*out`, `K = C_in*kernel`, `N = C_out`); a
//!   Winograd kernel also transforms its filters once per call, whatever the batch (the
//!   `filters` feature: 36 elements per 3 x 3 filter at the HBM bandwidth);
//! - vector ops: bytes over bandwidth by the same split, and elements per SM-cycle for the
//!   arithmetic (`pow`, `gelu`, `tanh`).
//!
//! Each feature is a time in seconds on the device, so a fitted coefficient is a
//! dimensionless inverse efficiency (the launch term is seconds), shared by every device:
//! that is what lets the model time a device it was not fitted on.
//!
//! Convolutions come in two classes: `conv`, 2-D 3 x 3 forward passes of stride 1 (the
//! kind NeuSight measured, most of it run as Winograd kernels), and `conv-gemm`, every
//! other convolution and every one on tensor cores, timed as the implicit GEMM cuDNN runs
//! ([`implicit_class`]). A tensor-core class ([`Class::Tensor`]) times a kernel on tensor
//! cores as its FP32 class ([`Class::base`]) with the work scaled by one fitted factor;
//! [`Model::class_for`] picks one where the model has it.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kernels::{Kernel, KernelClass, KernelPass};
use crate::precision::{NumberFormat, Precision};
use crate::system::{Device, DeviceKind};

mod class;
pub mod cpu;

pub use class::{
    Class, DEPTHWISE_FEATURES, GEMM_FEATURES, Matrix, Product, TensorRate, UnknownClass,
    VECTOR_FEATURES, VectorOp,
};

/// What the features need of a device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeviceSpec {
    /// Streaming multiprocessors.
    pub sms: f64,
    /// Boost clock, Hz.
    pub clock_hz: f64,
    /// Peak FLOP/s of the format the kernels run in.
    pub peak_flops: f64,
    /// HBM bandwidth, bytes/s.
    pub bandwidth: f64,
    /// L2 cache, bytes.
    pub l2_bytes: f64,
    /// The board's power and process node, where the file gives both. A class's power cap
    /// applies only to kernels of its own units: an FP32 class's to FP32 kernels, a
    /// tensor-core class's (fitted on tensor-core kernels, which take far less energy per
    /// FLOP) to its format's ([`Model::timed`]).
    pub power: Option<PowerSpec>,
    /// The format, where the matrix peak is a tensor-core peak of a format other than FP32
    /// (TF32, FP16, BF16 on NVIDIA's tensor cores or AMD's matrix cores): such kernels are
    /// timed by the model's tensor-core class of that format where it has one
    /// ([`Class::Tensor`]: `gemm-tensor-16`, `conv-gemm-tensor-tf32`).
    pub tensor: Option<NumberFormat>,
}

/// What the power cap needs of a device.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PowerSpec {
    /// Thermal design power (the board's power limit), W.
    pub tdp_w: f64,
    /// Process node, nm.
    pub process_nm: f64,
}

/// The process node the power cap's energy per FLOP is quoted at, nm.
pub const REFERENCE_NODE_NM: f64 = 7.0;

impl DeviceSpec {
    /// The FP32 spec of a GPU device file; `None` where the file lacks a figure it needs
    /// (SMs, boost clock, FP32 peak, bandwidth), or the device is not a GPU. Without an L2
    /// size (`memory.llc_mib`) every kernel's bytes count as HBM traffic.
    pub fn fp32(device: &Device) -> Option<DeviceSpec> {
        Self::of(device, Precision::Fp32)
    }

    /// The spec of a GPU device file for kernels at `precision`: its matrix peak is the
    /// device's peak for that precision's matrix format (the tensor-core peak where the
    /// file gives one, [`Device::matrix_peak`]; FP8's is [`DeviceSpec::fp8`]); `None` where a
    /// figure is missing.
    pub fn of(device: &Device, precision: Precision) -> Option<DeviceSpec> {
        if device.kind != DeviceKind::Gpu {
            return None;
        }
        if precision == Precision::Fp8 {
            return Self::fp8(device);
        }
        let peak = device.matrix_peak(precision).ok()?;
        let format = precision.matrix_format();
        Some(DeviceSpec {
            sms: f64::from(device.sms.as_ref()?.value),
            clock_hz: device.boost_clock_hz.as_ref()?.value,
            peak_flops: peak.rate.value(),
            tensor: (format != NumberFormat::Fp32 && peak.name.ends_with("_tensor"))
                .then_some(format),
            bandwidth: device.memory_bandwidth.as_ref()?.value.value(),
            // Without an L2 size every working set is timed as HBM traffic (`predict`
            // says so).
            l2_bytes: device.llc.as_ref().map_or(0.0, |l| l.value.value()),
            // FP32 kernels and tensor-core kernels have a fitted energy per FLOP; others
            // (FP16 on vector units) run uncapped.
            power: match (&device.tdp_w, &device.process_nm) {
                (Some(w), Some(nm))
                    if format == NumberFormat::Fp32 || peak.name.ends_with("_tensor") =>
                {
                    Some(PowerSpec {
                        tdp_w: w.value,
                        process_nm: nm.value,
                    })
                }
                _ => None,
            },
        })
    }

    /// The spec of FP8 products on a GPU device file: its BF16 spec at its FP8 peak, FP8 on
    /// tensor cores (timed by the FP32 classes, as BF16 products are, where the model has no
    /// `-tensor-fp8` class), with no power cap (no class's energy per FLOP is FP8's); `None`
    /// without an FP8 peak.
    pub fn fp8(device: &Device) -> Option<DeviceSpec> {
        let peak = device.peak.fp8_tensor.as_ref()?;
        let mut d = Self::of(device, Precision::AmpBf16)?;
        d.peak_flops = peak.value.value();
        d.tensor = Some(NumberFormat::Fp8);
        d.power = None;
        Some(d)
    }

    /// This spec with its peak held to what the board's power sustains: the TDP over the
    /// energy of a FLOP, `energy_per_flop_7nm` (J) scaled by the process node over 7 nm. The
    /// same spec where the class has no power figure or the device no TDP and node.
    pub fn capped(&self, energy_per_flop_7nm: Option<f64>) -> DeviceSpec {
        let mut d = *self;
        if let (Some(e), Some(p)) = (energy_per_flop_7nm, self.power) {
            let joules = e * p.process_nm / REFERENCE_NODE_NM;
            d.peak_flops = d.peak_flops.min(p.tdp_w / joules);
        }
        d
    }

    /// The figures missing from `device` for a spec, by field name.
    pub fn missing(device: &Device) -> Vec<&'static str> {
        let mut out = Vec::new();
        if device.sms.is_none() {
            out.push("compute.sms");
        }
        if device.boost_clock_hz.is_none() {
            out.push("compute.boost_clock_mhz");
        }
        if device.peak.fp32.is_none() {
            out.push("peak.tflops_fp32");
        }
        if device.memory_bandwidth.is_none() {
            out.push("memory.bandwidth_gbs");
        }
        out
    }
}

/// The features of a depthwise convolution `kernel` on `d` ([`DEPTHWISE_FEATURES`]), with
/// `elem` bytes per element.
pub fn depthwise_features(kernel: &Kernel, elem: u64, d: &DeviceSpec) -> [f64; 3] {
    let x = &kernel.x;
    let elements = kernel.conv.map_or(x[2] + x[3] + x[4], |c| c.elements);
    let macs = x[1] / 2.0;
    [
        1.0,
        elements * elem as f64 / d.bandwidth,
        macs / (d.sms * d.clock_hz),
    ]
}

/// The largest output tile a GEMM runs in, rows or columns.
const TILE_MAX: u64 = 128;
/// The tile sides an implicit-GEMM convolution may run in.
const TILES: [u64; 3] = [32, 64, TILE_MAX];
/// The tiles cuBLAS runs FP32 products in, rows by columns.
const GEMM_TILES: [(u64, u64); 2] = [(128, 64), (64, 128)];

/// The tiles a library runs a product in.
///
/// NeuSight's kernel set names the kernel each measurement ran: cuBLAS runs `torch.bmm` in
/// FP32 almost only in large tiles whatever the shape (`ampere_sgemm_128x128` for 99.6 % of
/// the A100's, `maxwell_sgemm_128x64` for 99.6 % of the P4's, `volta_sgemm_64x64`,
/// `32x128` and `128x32` on the V100; 128 x 64 on the T4 and P100, 128 x 128, 64 x 64 and
/// 256 x 128 on the H100 in its test set), without splitting the inner dimension, so a
/// product with a thin side wastes most of each tile. cuDNN's convolutions pick more freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tiles {
    /// cuBLAS's FP32 products (batched products and linear layers): 128 x 64 or 64 x 128
    /// output tiles, one block an SM a wave, no split-K.
    Library,
    /// The fastest tiling a library could pick: 32, 64 or 128 rows and columns, small
    /// tiles several to an SM, split-K where it fills idle SMs (convolutions).
    Any,
    /// [`Tiles::Any`] without split-K (a 3-D convolution's weight gradient:
    /// [`crate::kernels::ConvIo::unsplit`]).
    Unsplit,
}
/// How many more elements a Winograd kernel's transformed filters hold than the filters:
/// F(4x4, 3x3) transforms each 3 x 3 filter into a 6 x 6 tile, 36 elements for 9.
const WINOGRAD_FILTER_GROWTH: f64 = ((crate::kernels::WINOGRAD_TILE + 2).pow(2) as f64) / 9.0;
/// The least of the inner dimension one block of a split-K GEMM takes.
const SPLIT_K_MIN: f64 = 256.0;
/// The ways a GEMM may split its inner dimension.
const SPLITS: [f64; 7] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// The bytes a kernel moves, as an L2 or an HBM feature: the working set streamed at the
/// HBM bandwidth, in the L2 column when it fits the L2 and in the HBM column when not.
fn memory(bytes: f64, d: &DeviceSpec) -> (f64, f64) {
    let t = bytes / d.bandwidth;
    if bytes <= d.l2_bytes {
        (t, 0.0)
    } else {
        (0.0, t)
    }
}

/// How a GEMM runs: its tiling, split of the inner dimension, waves and their time.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tiling {
    waves: f64,
    seconds: f64,
}

/// The fastest way to run `batch` products of `m x k` by `k x n` over the SMs in `tiles`, as
/// a library picks its kernel. With [`Tiles::Any`]: output tiles of 32, 64 or 128 rows and
/// columns (small tiles run several to an SM, up to the work of one 128 x 128 tile, but load
/// more per FLOP: a tile of `tm x tn` takes `1 + 16 / tm + 16 / tn` times its ideal time,
/// 1.25 for 128 x 128 and 2 for 32 x 32), and the inner dimension may be split across blocks
/// (split-K, 1 to 64 ways, at least 256 of it per block), at the cost of reducing the partial
/// tiles through memory. With [`Tiles::Library`]: 128 x 64 or 64 x 128, one an SM, unsplit.
/// A wave of blocks takes as long as one SM's share.
fn tiling(batch: u64, m: u64, n: u64, k: u64, tiles: Tiles, d: &DeviceSpec) -> Tiling {
    let (shapes, splits): (Vec<(u64, u64)>, &[f64]) = match tiles {
        Tiles::Library => (GEMM_TILES.to_vec(), &SPLITS[..1]),
        Tiles::Any | Tiles::Unsplit => (
            TILES
                .iter()
                .flat_map(|&tm| TILES.iter().map(move |&tn| (tm, tn)))
                .collect(),
            if tiles == Tiles::Any {
                &SPLITS[..]
            } else {
                &SPLITS[..1]
            },
        ),
    };
    let mut best: Option<Tiling> = None;
    for (tm, tn) in shapes {
        let per_sm = match tiles {
            Tiles::Library => 1.0,
            Tiles::Any | Tiles::Unsplit => ((TILE_MAX * TILE_MAX) / (tm * tn)).clamp(1, 8) as f64,
        };
        let count = (batch * m.div_ceil(tm) * n.div_ceil(tn)) as f64;
        let slots = d.sms * per_sm;
        let load = 1.0 + 16.0 / tm as f64 + 16.0 / tn as f64;
        for &split in splits {
            if split > 1.0 && k as f64 / split < SPLIT_K_MIN {
                break;
            }
            let blocks = count * split;
            let waves = (blocks / slots).ceil();
            // The blocks an SM holds at once: a full wave's, or fewer when all of them fit
            // in one wave.
            let resident = per_sm.min((blocks / d.sms).ceil());
            let wave_s = resident * 2.0 * (tm * tn) as f64 * (k as f64 / split) * load
                / (d.peak_flops / d.sms);
            // Split-K writes each split's partial tile and reduces them: one read and one
            // write of FP32 partial sums per extra split.
            let reduce = (split - 1.0) * count * (tm * tn) as f64 * 8.0 / d.bandwidth;
            let t = Tiling {
                waves,
                seconds: waves * wave_s + reduce,
            };
            if best.is_none_or(|b| t.seconds < b.seconds) {
                best = Some(t);
            }
        }
    }
    best.unwrap_or(Tiling {
        waves: 1.0,
        seconds: 0.0,
    })
}

/// The features of `batch` products of `m x k` by `k x n` with `elem` bytes per element,
/// run in `tiles`.
pub fn gemm(
    batch: u64,
    m: u64,
    n: u64,
    k: u64,
    elem: u64,
    tiles: Tiles,
    d: &DeviceSpec,
) -> [f64; GEMM_FEATURES.len()] {
    let t = tiling(batch, m, n, k, tiles, d);
    let bytes = (elem * batch * (m * k + k * n + m * n)) as f64;
    let (l2, hbm) = memory(bytes, d);
    [1.0, t.seconds, t.waves / d.clock_hz, l2, hbm, 0.0]
}

/// The features of a 2-D or 3-D convolution forward pass as an implicit GEMM: `batch`
/// inputs of `c_in` channels and `input` spatial size, `c_out` filters of `kernel`, at
/// `stride` with `padding` each side. With `winograd`, a 2-D 3 x 3 convolution of stride 1
/// runs as Winograd tiles ([`crate::kernels::winograd_positions`]), as `conv` times them;
/// without, every convolution is the implicit GEMM `conv-gemm` times ([`Class::CONV_GEMM`]).
#[allow(clippy::too_many_arguments)]
pub fn conv(
    batch: u64,
    c_in: u64,
    c_out: u64,
    input: &[u64],
    kernel: &[u64],
    stride: &[u64],
    padding: &[u64],
    winograd: bool,
    elem: u64,
    d: &DeviceSpec,
) -> [f64; GEMM_FEATURES.len()] {
    let extents: Vec<usize> = input
        .iter()
        .zip(kernel)
        .zip(stride.iter().zip(padding))
        .map(|((&i, &k), (&s, &p))| (((i + 2 * p).saturating_sub(k)) / s.max(1) + 1) as usize)
        .collect();
    let out: u64 = extents.iter().map(|&o| o as u64).product();
    let k = c_in * kernel.iter().product::<u64>();
    let as_usize = |v: &[u64]| v.iter().map(|&x| x as usize).collect::<Vec<_>>();
    let positions =
        crate::kernels::winograd_positions(&extents, &as_usize(kernel), &as_usize(stride))
            .filter(|_| winograd);
    let rows = positions.map_or(batch * out, |p| batch * p as u64);
    let spatial: u64 = input.iter().product();
    let elements = (batch * c_in * spatial + c_out * k + batch * out * c_out) as f64;
    implicit_gemm(
        (1, rows, c_out, k),
        elements,
        positions.is_some(),
        Tiles::Any,
        elem,
        d,
    )
}

/// The features of a convolution's kernel: `calls` implicit GEMMs of `rows x k` by `k x n`
/// in the fastest tiling of `tiles`, moving `elements` (input, filters, output: not the
/// unrolled input).
///
/// A Winograd kernel (`winograd`: its rows are Winograd tiles) also transforms its filters
/// once per call, whatever the batch: the `filters` feature is the transformed filters'
/// bytes (36 elements for each 3 x 3 filter) at the HBM bandwidth. It is what a batch of
/// one pays as much as a batch of 64: fitted on NeuSight's 3 x 3 convolutions, the
/// features without it predicted small batches 5-6 % fast and batches of 54-64 14 % slow
/// on one GPU; leaving one GPU out, it takes `conv` from 18.2 to 16.8 % (bias +2.1 to
/// +0.2 %), and DeepBench's FP32 3 x 3 forward passes, never fitted, from 17.9 to 14.0 % on
/// the V100 and 19.5 to 12.8 % on the T4.
fn implicit_gemm(
    (calls, rows, n, k): (u64, u64, u64, u64),
    elements: f64,
    winograd: bool,
    tiles: Tiles,
    elem: u64,
    d: &DeviceSpec,
) -> [f64; GEMM_FEATURES.len()] {
    let mut f = gemm(calls, rows, n, k, elem, tiles, d);
    let (l2, hbm) = memory(elements * elem as f64, d);
    f[3] = l2;
    f[4] = hbm;
    if winograd {
        f[5] = WINOGRAD_FILTER_GROWTH * (calls * n * k * elem) as f64 / d.bandwidth;
    }
    f
}

/// The features of a vector op over `elements` elements that reads and writes `arrays`
/// arrays of `elem` bytes each.
pub fn vector(elements: u64, arrays: u64, elem: u64, d: &DeviceSpec) -> [f64; 4] {
    let bytes = (elements * arrays * elem) as f64;
    let (l2, hbm) = memory(bytes, d);
    [1.0, l2, hbm, elements as f64 / (d.sms * d.clock_hz)]
}

/// A vector op over `elements` elements that moves `bytes` in all: [`vector`] when the
/// bytes are known rather than the arrays.
pub fn vector_bytes(elements: f64, bytes: f64, d: &DeviceSpec) -> [f64; 4] {
    let (l2, hbm) = memory(bytes, d);
    [1.0, l2, hbm, elements / (d.sms * d.clock_hz)]
}

/// The kernel class of the data a ridgeline kernel is timed as: dense layers and products as
/// `gemm` (one model fitted on every product of the set, batched and linear layers,
/// [`Class::timed_by`]),
/// convolutions as `conv`, and each vector op as the measured op that does the same work
/// per element: unary ops that read one array and write one as `relu` (pooling, dropout,
/// copies, an embedding's and a gather's row copies too), `tanh`, `add` (scatter-add and
/// segment sum too), a scale as `mulu`, a shift as `addu`, a product as `mul`, a power as
/// `powu`, normalisations as `ln`, softmax and a loss over
/// classes as `softmax`, `gelu` and `silu` as `gelu`, a squared error as `mul`.
pub fn class_of(kernel: &Kernel) -> Class {
    let op = match kernel.class {
        KernelClass::Gemm => return Class::GEMM,
        KernelClass::ConvPointwise | KernelClass::ConvSpatial | KernelClass::ConvDepthwise => {
            return Class::CONV;
        }
        KernelClass::Norm => VectorOp::Ln,
        KernelClass::Pooling => VectorOp::Relu,
        KernelClass::Elementwise => match kernel.op.unwrap_or("relu") {
            "tanh" => VectorOp::Tanh,
            "add" | "scatter-add" | "segment-sum" => VectorOp::Add,
            "scale" => VectorOp::Mulu,
            "shift" => VectorOp::Addu,
            "mul" | "mse-loss" => VectorOp::Mul,
            "pow" => VectorOp::Powu,
            "softmax-cross-entropy" | "softmax" => VectorOp::Softmax,
            "gelu" | "silu" => VectorOp::Gelu,
            _ => VectorOp::Relu,
        },
    };
    Class::Vector(op)
}

/// The class that times a convolution as an implicit GEMM, where `conv` is not its class:
/// `conv-gemm` ([`Class::CONV_GEMM`]) for a convolution outside `conv`'s kind, and for every
/// convolution on tensor cores (`tensor`).
///
/// NeuSight's convolutions, `conv`'s data, are all 2-D 3 x 3 forward passes of stride 1,
/// and cuDNN ran 60-85 % of them as Winograd kernels, which take a quarter to a half of the
/// FLOPs: `conv`'s shape terms, fitted on them, time the work of an implicit GEMM 2.7 times
/// too fast. The other kinds (1 x 1, strided, other kernel sizes, 3-D, and both gradients)
/// run as implicit GEMMs, as do tensor-core convolutions; `conv-gemm` is fitted on the
/// convolutions of the set cuDNN ran as implicit GEMMs (its kernel names say which), with
/// no Winograd tiles. Depthwise convolutions, a product per channel, are neither: `None`,
/// as for every kernel but a convolution.
pub fn implicit_class(kernel: &Kernel, tensor: bool) -> Option<Class> {
    let convolution = matches!(
        kernel.class,
        KernelClass::ConvPointwise | KernelClass::ConvSpatial
    );
    (convolution && (tensor || !fitted_kind(kernel))).then_some(Class::CONV_GEMM)
}

/// Whether `kernel` is a convolution of the kind `conv` is fitted on: a 2-D 3 x 3 forward
/// pass of stride 1 of one group (one with Winograd rows). Off tensor cores cuDNN's
/// autotuner runs it as the faster of Winograd (`conv`) and the implicit GEMM (`conv-gemm`):
/// [`Model::timed`] takes the faster.
pub fn fitted_kind(kernel: &Kernel) -> bool {
    kernel.pass == KernelPass::Forward && kernel.conv.is_some_and(|c| c.winograd_rows.is_some())
}

/// The other class that could time `kernel` beside `conv`, where a library's autotuner runs
/// the faster of two algorithms: `conv-gemm` for a convolution of `conv`'s kind off tensor
/// cores ([`fitted_kind`]; `tensor`: on tensor cores).
pub fn faster_class(kernel: &Kernel, tensor: bool) -> Option<Class> {
    (!tensor && fitted_kind(kernel)).then_some(Class::CONV_GEMM)
}

/// The GEMM a matrix kernel's features describe: `calls` products of `m x k` by `k x n`,
/// recovered from `F = 2 m n k calls`, `|A| = m k calls`, `|B| = k n calls`,
/// `|C| = m n calls` ([`crate::kernels`]).
fn gemm_shape(x: &[f64; crate::kernels::FEATURES]) -> (u64, u64, u64, u64) {
    let half = x[1] / 2.0;
    let (a, b, c) = (x[2], x[3], x[4]);
    if half <= 0.0 || a <= 0.0 || b <= 0.0 || c <= 0.0 {
        return (1, 1, 1, 1);
    }
    let calls = (a * b * c / (half * half)).round().max(1.0);
    let int = |v: f64| v.round().max(1.0) as u64;
    (int(calls), int(half / b), int(half / a), int(half / c))
}

/// The features of a ridgeline kernel on a device, for its class ([`class_of`]), with
/// `elem` bytes per element.
pub fn features(kernel: &Kernel, elem: u64, d: &DeviceSpec) -> Vec<f64> {
    features_for(kernel, class_of(kernel), elem, d)
}

/// The features of a ridgeline kernel on a device as `class` times it (a convolution as
/// `conv-gemm` or its tensor-core class runs no Winograd tiles), with `elem` bytes per
/// element.
pub fn features_for(kernel: &Kernel, class: Class, elem: u64, d: &DeviceSpec) -> Vec<f64> {
    if class.is_depthwise() {
        return depthwise_features(kernel, elem, d).to_vec();
    }
    let winograd = class.base() != Class::CONV_GEMM;
    if kernel.class.is_matrix() {
        let (calls, m, n, k) = gemm_shape(&kernel.x);
        if kernel.class == KernelClass::Gemm {
            return gemm(calls, m, n, k, elem, Tiles::Library, d).to_vec();
        }
        // A convolution of one group lowers every call (one per sample for a pointwise
        // convolution) into one implicit GEMM, as cuDNN does; a depthwise one runs a
        // product per channel.
        let (calls, rows) = if calls > 1 && kernel.class != KernelClass::ConvDepthwise {
            (1, m * calls)
        } else {
            (calls, m)
        };
        match kernel.conv {
            Some(c) => {
                let tiles = c.winograd_rows.filter(|_| winograd);
                let rows = tiles.map_or(rows, |r| r.round() as u64);
                let split = if c.unsplit {
                    Tiles::Unsplit
                } else {
                    Tiles::Any
                };
                implicit_gemm(
                    (calls, rows, n, k),
                    c.elements,
                    tiles.is_some(),
                    split,
                    elem,
                    d,
                )
                .to_vec()
            }
            None => gemm(calls, rows, n, k, elem, Tiles::Any, d).to_vec(),
        }
    } else {
        let bytes = kernel.x[2];
        let arrays = class_of(kernel).vector().map_or(2, VectorOp::arrays) as f64;
        vector_bytes(bytes / (arrays * elem as f64), bytes, d).to_vec()
    }
}

/// The fitted kernel model: one coefficient per feature for each class of the data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    /// What it was fitted on and how, for the reports.
    pub source: ModelSource,
    /// Per class.
    #[serde(rename = "class")]
    pub classes: Vec<ClassCoefficients>,
}

/// What a fitted kernel model came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSource {
    /// The kernel set's provenance (repository, commit, licence).
    pub data: String,
    /// The devices fitted on.
    pub devices: Vec<String>,
    /// The command that fitted it.
    pub fitted_by: String,
    /// What the scaled classes (tensor-core ones, `gemm-tensor-16`, `conv-gemm-tensor-tf32`,
    /// ...) were fitted on, where the model has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// What the depthwise convolution classes ([`Class::Depthwise`]) were fitted on, where
    /// the model has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depthwise: Option<String>,
}

/// One class's coefficients and how they did when each device was held out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassCoefficients {
    /// The class: `gemm` (every product of the data, batched and linear layers), or an
    /// operator of the data (`conv`, `relu`, ...).
    pub name: Class,
    /// Feature names, in order ([`GEMM_FEATURES`] or [`VECTOR_FEATURES`]).
    pub features: Vec<String>,
    /// One per feature: the launch term in seconds, the others dimensionless.
    pub coefficients: Vec<f64>,
    /// The energy of one FLOP at 7 nm, joules, that caps a device's FLOP rate at its TDP
    /// ([`DeviceSpec::capped`]); absent for classes whose time is not FLOPs (vector ops) or
    /// where no cap fitted better.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_per_flop_7nm: Option<f64>,
    /// Kernels fitted.
    pub points: usize,
    /// Leave one device out, pooled: median |predicted - measured| / measured.
    pub holdout_median_abs_error: f64,
    /// Leave one device out, pooled: median (predicted - measured) / measured.
    pub holdout_bias: f64,
    /// Leave one device out: the 90 % interval of measured / predicted, so a kernel of a
    /// device outside the fit takes between these multiples of its prediction 90 % of the
    /// time (the central interval of the held-out devices' ratios at the level that covers
    /// 90 % of each device's kernels from the others': `calibrate::transfer::interval_90`).
    pub holdout_interval_90: [f64; 2],
}

impl ClassCoefficients {
    /// The time of a kernel with features `x` measured on its own, as the kernel set was:
    /// the launch term plus the work, seconds.
    pub fn alone(&self, x: &[f64]) -> f64 {
        self.coefficients.iter().zip(x).map(|(c, v)| c * v).sum()
    }

    /// The time of a kernel with features `x` inside a training step, seconds: the larger of
    /// the launch term and the work. Measured on its own, a kernel's time is its launch and
    /// synchronisation plus its work; in a step the framework launches the next kernel
    /// while the device runs this one, so a kernel costs its work, or the host's time per
    /// launch where the work is shorter.
    pub fn in_step(&self, x: &[f64]) -> f64 {
        in_step(&self.coefficients, x)
    }
}

/// A kernel's time inside a training step by `coefficients` (launch first) for features
/// `x`: the larger of the launch term and the work ([`ClassCoefficients::in_step`]).
pub fn in_step(coefficients: &[f64], x: &[f64]) -> f64 {
    coefficients
        .first()
        .copied()
        .unwrap_or(0.0)
        .max(work(coefficients, x))
}

/// A kernel's work by `coefficients` (launch first) for features `x`: every term but the
/// launch, seconds.
pub fn work(coefficients: &[f64], x: &[f64]) -> f64 {
    coefficients.iter().zip(x).skip(1).map(|(c, v)| c * v).sum()
}

/// The in-step floor of class `class` whose launch term is `own`, where the products'
/// (`gemm`) is `products` ([`Model::launch_floor`]): `own`, but no more than the products'
/// for the classes of the FP32 fit; a tensor-core class keeps its own.
pub fn floor(class: Class, own: f64, products: Option<f64>) -> f64 {
    match products {
        Some(p) if class != Class::GEMM && !class.is_tensor() => own.min(p),
        _ => own,
    }
}

/// The fitted model ridgeline ships (`data/evidence/kernels/transfer.toml`).
const BUILTIN: &str = include_str!("../../data/evidence/kernels/transfer.toml");

impl Model {
    /// Reads a model file's text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Model> {
        let m: Model = toml::from_str(text).map_err(|e| Error::Parse {
            file: file.to_owned(),
            message: e.to_string(),
        })?;
        for c in &m.classes {
            let expected = c.name.features();
            if c.features != expected || c.coefficients.len() != expected.len() {
                return Err(Error::invalid(
                    file,
                    format!("class.{}.features", c.name),
                    format!("must be {expected:?}, with one coefficient each"),
                ));
            }
            let [lo, hi] = c.holdout_interval_90;
            if !(lo > 0.0 && lo <= 1.0 && hi >= 1.0 && hi.is_finite()) {
                return Err(Error::invalid(
                    file,
                    format!("class.{}.holdout_interval_90", c.name),
                    "must be [lo, hi] with 0 < lo <= 1 <= hi: fit the model again",
                ));
            }
            if c.energy_per_flop_7nm
                .is_some_and(|e| !(e.is_finite() && e > 0.0 && e < 1e-9))
            {
                return Err(Error::invalid(
                    file,
                    format!("class.{}.energy_per_flop_7nm", c.name),
                    "must be a positive number of joules below 1e-9 (picojoules per FLOP), \
                     or absent for no power cap: fit the model again",
                ));
            }
            if c.coefficients.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
                return Err(Error::invalid(
                    file,
                    format!("class.{}.coefficients", c.name),
                    "must be finite and not negative: fit the model again",
                ));
            }
        }
        Ok(m)
    }

    /// The model ridgeline ships, fitted on the kernel set under `data/evidence/kernels/`.
    pub fn builtin() -> &'static Model {
        static MODEL: OnceLock<Model> = OnceLock::new();
        MODEL.get_or_init(|| {
            Model::parse(BUILTIN, "data/evidence/kernels/transfer.toml").unwrap_or_else(|e| {
                unreachable!("the built-in kernel model is checked by a test: {e}")
            })
        })
    }

    /// The coefficients of `class`.
    pub fn class(&self, class: Class) -> Option<&ClassCoefficients> {
        self.classes.iter().find(|c| c.name == class)
    }

    /// The class that times `kernel` on `d`: a convolution that runs as an implicit GEMM
    /// (outside `conv`'s kind, or on tensor cores: [`implicit_class`]) is `conv-gemm`'s where
    /// the model has it, any other kernel its class's ([`class_of`]); where `d` runs it on
    /// tensor cores, that class's tensor-core class of `d`'s format (`conv-gemm-tensor-16`,
    /// fitted on tensor-core kernel records) where the model has one. A depthwise
    /// convolution is its pass's and format's class ([`Class::Depthwise`]) where the model has
    /// one.
    pub fn class_for(&self, kernel: &Kernel, d: &DeviceSpec) -> Option<&ClassCoefficients> {
        if kernel.class == KernelClass::ConvDepthwise {
            let format = d.tensor.unwrap_or(NumberFormat::Fp32);
            if let Some(c) = self.class(Class::depthwise(kernel.pass, format)) {
                return Some(c);
            }
        }
        let name = implicit_class(kernel, d.tensor.is_some())
            .filter(|c| self.class(*c).is_some())
            .unwrap_or_else(|| class_of(kernel));
        d.tensor
            .filter(|_| kernel.class.is_matrix())
            .and_then(|f| name.on_tensor_cores(f))
            .and_then(|t| self.class(t))
            .or_else(|| self.class(name))
    }

    /// The time of `kernel` on `d` with `elem` bytes per element inside a training step,
    /// seconds ([`ClassCoefficients::in_step`]); `None` when the model has no class for it.
    pub fn time(&self, kernel: &Kernel, elem: u64, d: &DeviceSpec) -> Option<f64> {
        self.timed(kernel, elem, d).map(|(t, _)| t)
    }

    /// [`Model::time`] with its class's 90 % interval as multiples of it
    /// ([`ClassCoefficients::holdout_interval_90`]).
    ///
    /// A convolution of `conv`'s kind off tensor cores ([`fitted_kind`]) takes the faster of
    /// `conv` (Winograd) and `conv-gemm` where the model has both, as cuDNN's autotuner
    /// runs the faster algorithm; its interval is `conv`'s, whose held-out figures judge
    /// that choice.
    pub fn timed(&self, kernel: &Kernel, elem: u64, d: &DeviceSpec) -> Option<(f64, [f64; 2])> {
        self.timed_as(kernel, elem, d, true)
    }

    /// [`Model::timed`] without the in-step floor ([`Model::launch_floor`]): the kernel's
    /// work on the device alone, for a step whose host issuing is modelled apart (a
    /// software stack's host timeline, [`crate::stack`]). Never more than [`Model::timed`].
    pub fn work_timed(
        &self,
        kernel: &Kernel,
        elem: u64,
        d: &DeviceSpec,
    ) -> Option<(f64, [f64; 2])> {
        self.timed_as(kernel, elem, d, false)
    }

    fn timed_as(
        &self,
        kernel: &Kernel,
        elem: u64,
        d: &DeviceSpec,
        floor: bool,
    ) -> Option<(f64, [f64; 2])> {
        let c = self.class_for(kernel, d)?;
        let t = self.in_step_as(c, kernel, elem, d, floor);
        let gemm = faster_class(kernel, d.tensor.is_some())
            .filter(|_| c.name == Class::CONV)
            .and_then(|other| self.class(other));
        let t = gemm.map_or(t, |g| t.min(self.in_step_as(g, kernel, elem, d, floor)));
        Some((t, c.holdout_interval_90))
    }

    /// The time of `kernel` on `d` inside a step as class `c` times it, at least its floor
    /// where `floor` is set.
    fn in_step_as(
        &self,
        c: &ClassCoefficients,
        kernel: &Kernel,
        elem: u64,
        d: &DeviceSpec,
        floor: bool,
    ) -> f64 {
        // An FP32 class's energy per FLOP is not a tensor core's.
        let own = d.tensor.is_none() || c.name.is_tensor();
        let d = d.capped(c.energy_per_flop_7nm.filter(|_| own));
        let x = features_for(kernel, c.name, elem, &d);
        let work = work(&c.coefficients, &x);
        if floor {
            work.max(self.launch_floor(c))
        } else {
            work
        }
    }

    /// The least time a kernel of class `c` takes inside a step: the host's time per launch,
    /// its class's launch term. The classes fitted on one kernel set share its host, whose
    /// floor the products' (`gemm`) pin down, their set holding kernels of a few
    /// microseconds; so a class of that set takes no more than the products' floor. A class
    /// measured only on long kernels fits an intercept its data cannot pin down: NeuSight's
    /// convolutions (a tenth of them under 0.4 ms) give `conv` 0.3 ms, where cuDNN runs
    /// FP32 convolutions of a few MFLOP in 12 us on an H200 (ridgeline's own records). The
    /// tensor-core classes, fitted on ridgeline's own records of another host and API, keep
    /// their own.
    pub fn launch_floor(&self, c: &ClassCoefficients) -> f64 {
        let launch = |c: &ClassCoefficients| c.coefficients.first().copied().unwrap_or(0.0);
        floor(c.name, launch(c), self.class(Class::GEMM).map(launch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A100: DeviceSpec = DeviceSpec {
        sms: 108.0,
        clock_hz: 1.41e9,
        peak_flops: 19.5e12,
        bandwidth: 1.555e12,
        l2_bytes: 40.0 * 1024.0 * 1024.0,
        power: None,
        tensor: None,
    };

    /// The class named `name`.
    fn named(name: &str) -> Class {
        Class::parse(name).unwrap()
    }

    /// A model of `classes` alone.
    fn model(classes: Vec<ClassCoefficients>) -> Model {
        Model {
            source: ModelSource {
                data: String::new(),
                devices: Vec::new(),
                fitted_by: String::new(),
                tensor: None,
                depthwise: None,
            },
            classes,
        }
    }

    fn class(name: Class, launch: f64, tiled: f64) -> ClassCoefficients {
        ClassCoefficients {
            name,
            features: GEMM_FEATURES.iter().map(|f| (*f).to_owned()).collect(),
            coefficients: vec![launch, tiled, 0.0, 0.0, 0.0],
            energy_per_flop_7nm: None,
            points: 1,
            holdout_median_abs_error: 0.1,
            holdout_bias: 0.0,
            holdout_interval_90: [0.8, 1.2],
        }
    }

    /// A 2-D 3 x 3 convolution of stride 1 that keeps its `size x size` maps, `channels` in
    /// and out.
    fn same_3x3(batch: usize, channels: usize, size: usize) -> crate::kernels::ConvShape {
        crate::kernels::ConvShape {
            batch,
            c_in: channels,
            c_out: channels,
            input: vec![size, size],
            output: vec![size, size],
            kernel: vec![3, 3],
            stride: vec![1, 1],
            padded: true,
            groups: 1,
        }
    }

    #[test]
    fn a_3d_weight_gradient_runs_unsplit_and_others_may_split() {
        // CosmoFlow's first layer: 4 channels of 128^3 voxels into 16, batch 2. Its weight
        // gradient is a 16 x 108 product over 4.2 million positions: split 64 ways it would
        // fill the GPU; unsplit, a few SMs run it all.
        let first = crate::kernels::ConvShape {
            batch: 2,
            c_in: 4,
            c_out: 16,
            input: vec![128; 3],
            output: vec![128; 3],
            kernel: vec![3; 3],
            stride: vec![1; 3],
            padded: true,
            groups: 1,
        };
        let filter = first.kernel(KernelPass::BackwardFilter);
        assert!(filter.conv.unwrap().unsplit);
        for pass in [KernelPass::Forward, KernelPass::BackwardData] {
            assert!(!first.kernel(pass).conv.unwrap().unsplit, "{pass:?}");
        }
        let flat = same_3x3(2, 64, 56).kernel(KernelPass::BackwardFilter);
        assert!(
            !flat.conv.unwrap().unsplit,
            "a 2-D weight gradient may split"
        );
        let unsplit = features_for(&filter, Class::CONV_GEMM, 4, &A100);
        let split = features_for(
            &Kernel {
                conv: filter.conv.map(|c| crate::kernels::ConvIo {
                    unsplit: false,
                    ..c
                }),
                ..filter
            },
            Class::CONV_GEMM,
            4,
            &A100,
        );
        // The tiled time: ten times and more without the split.
        assert!(unsplit[1] > 10.0 * split[1], "{unsplit:?} {split:?}");
    }

    #[test]
    fn tensor_cores_take_the_tensor_classes_and_floors_follow_the_products() {
        let model = model(vec![
            class(Class::GEMM, 30e-6, 1.0),
            class(Class::CONV, 300e-6, 1.0),
            class(Class::CONV_GEMM, 300e-6, 1.0),
            class(named("conv-gemm-tensor-16"), 80e-6, 4.0),
        ]);
        let conv = same_3x3(1, 8, 8).kernel(KernelPass::Forward);
        let tensor = DeviceSpec {
            tensor: Some(NumberFormat::Bf16),
            ..A100
        };
        assert_eq!(model.class_for(&conv, &A100).unwrap().name, Class::CONV);
        assert_eq!(
            model.class_for(&conv, &tensor).unwrap().name,
            named("conv-gemm-tensor-16")
        );
        // TF32 has no class here: the FP32 implicit-GEMM class at the TF32 peak.
        let tf32 = DeviceSpec {
            tensor: Some(NumberFormat::Tf32),
            ..A100
        };
        assert_eq!(
            model.class_for(&conv, &tf32).unwrap().name,
            Class::CONV_GEMM
        );
        // A product has no tensor class here: its own class on tensor cores too.
        let gemm = crate::kernels::gemm_kernel(
            KernelClass::Gemm,
            crate::kernels::KernelPass::Forward,
            8.0,
            8.0,
            8.0,
            1.0,
        );
        assert_eq!(model.class_for(&gemm, &tensor).unwrap().name, Class::GEMM);
        // A tiny convolution takes its floor: the products' launch (30 us), not the FP32
        // class's 300 us intercept; the tensor class keeps its own (80 us).
        assert_eq!(model.time(&conv, 4, &A100), Some(30e-6));
        assert_eq!(model.time(&conv, 2, &tensor), Some(80e-6));
        assert_eq!(model.time(&gemm, 4, &A100), Some(30e-6));
    }

    /// `conv-gemm` times the convolutions outside `conv`'s kind (both gradients, 1 x 1 and
    /// strided ones) and every convolution on tensor cores, as implicit GEMMs without
    /// Winograd tiles; `conv` its kind in FP32 (2-D 3 x 3 forward of stride 1); depthwise
    /// ones stay `conv`'s. A model without `conv-gemm` times them all as `conv`.
    #[test]
    fn convolutions_outside_the_fitted_kind_and_on_tensor_cores_are_implicit_gemms() {
        let model = model(vec![
            class(Class::GEMM, 30e-6, 1.0),
            class(Class::CONV, 300e-6, 1.0),
            class(Class::CONV_GEMM, 30e-6, 2.0),
        ]);
        let shape = |kernel: usize, stride: usize, groups: usize| crate::kernels::ConvShape {
            batch: 4,
            c_in: 64,
            c_out: 64,
            input: vec![30, 30],
            output: vec![30 / stride, 30 / stride],
            kernel: vec![kernel, kernel],
            stride: vec![stride, stride],
            padded: kernel > 1,
            groups,
        };
        let name = |s: &crate::kernels::ConvShape, pass: KernelPass, d: &DeviceSpec| {
            model.class_for(&s.kernel(pass), d).unwrap().name
        };
        let fitted = shape(3, 1, 1);
        assert_eq!(name(&fitted, KernelPass::Forward, &A100), Class::CONV);
        for pass in [KernelPass::BackwardData, KernelPass::BackwardFilter] {
            assert_eq!(name(&fitted, pass, &A100), Class::CONV_GEMM);
        }
        assert_eq!(
            name(&shape(1, 1, 1), KernelPass::Forward, &A100),
            Class::CONV_GEMM
        );
        assert_eq!(
            name(&shape(3, 2, 1), KernelPass::Forward, &A100),
            Class::CONV_GEMM
        );
        assert_eq!(
            name(&shape(3, 1, 64), KernelPass::BackwardData, &A100),
            Class::CONV
        );
        let tensor = DeviceSpec {
            tensor: Some(NumberFormat::Fp16),
            ..A100
        };
        assert_eq!(
            name(&fitted, KernelPass::Forward, &tensor),
            Class::CONV_GEMM
        );
        // The implicit GEMM runs every output position: 30 x 30, where Winograd's 4 x 4
        // tiles run 32 x 32.
        let k = fitted.kernel(KernelPass::Forward);
        let tiles = |class: Class| features_for(&k, class, 4, &A100)[1];
        assert!(tiles(Class::CONV_GEMM) < tiles(Class::CONV));
        assert_eq!(
            features(&k, 4, &A100),
            features_for(&k, Class::CONV, 4, &A100)
        );
        let gemm = model.time(&k, 2, &tensor).unwrap();
        let expected = work(
            &model.class(Class::CONV_GEMM).unwrap().coefficients,
            &features_for(&k, Class::CONV_GEMM, 2, &tensor),
        );
        assert!((gemm / expected - 1.0).abs() < 1e-12, "{gemm} {expected}");
        // Without the class, `conv` times them.
        let old = self::model(vec![
            class(Class::GEMM, 30e-6, 1.0),
            class(Class::CONV, 300e-6, 1.0),
        ]);
        let k = fitted.kernel(KernelPass::BackwardData);
        assert_eq!(old.class_for(&k, &A100).unwrap().name, Class::CONV);
        assert_eq!(named("conv-gemm-tensor-16").base(), Class::CONV_GEMM);
        assert!(named("gemm-tensor-16").is_tensor() && !Class::CONV_GEMM.is_tensor());
    }

    /// A 3 x 3 forward convolution of stride 1 in FP32 takes the faster of `conv` (Winograd)
    /// and `conv-gemm`, as cuDNN's autotuner runs the faster algorithm, with `conv`'s
    /// interval; its gradients and the same convolution on tensor cores are `conv-gemm`'s.
    #[test]
    fn the_fitted_kind_takes_the_faster_of_winograd_and_the_implicit_gemm() {
        let shape = same_3x3(32, 256, 28);
        let k = shape.kernel(KernelPass::Forward);
        assert!(fitted_kind(&k) && !fitted_kind(&shape.kernel(KernelPass::BackwardData)));
        let conv = ClassCoefficients {
            holdout_interval_90: [0.5, 1.5],
            ..class(Class::CONV, 1e-6, 1.0)
        };
        let as_class = |c: &ClassCoefficients, class: Class| {
            work(&c.coefficients, &features_for(&k, class, 4, &A100))
        };
        for (slope, faster) in [(0.5, Class::CONV_GEMM), (4.0, Class::CONV)] {
            let gemm = class(Class::CONV_GEMM, 1e-6, slope);
            let m = model(vec![
                class(Class::GEMM, 1e-6, 1.0),
                conv.clone(),
                gemm.clone(),
            ]);
            let (t, interval) = m.timed(&k, 4, &A100).unwrap();
            let expected = if faster == Class::CONV {
                as_class(&conv, Class::CONV)
            } else {
                as_class(&gemm, Class::CONV_GEMM)
            };
            assert_eq!((t, interval), (expected, [0.5, 1.5]), "{faster}");
            assert!(t <= as_class(&conv, Class::CONV) && t <= as_class(&gemm, Class::CONV_GEMM));
        }
        // Without `conv-gemm`, `conv` alone.
        let m = model(vec![class(Class::GEMM, 1e-6, 1.0), conv.clone()]);
        assert_eq!(m.time(&k, 4, &A100), Some(as_class(&conv, Class::CONV)));
    }

    /// A class's power cap holds only its own units: the FP32 class's energy per FLOP caps
    /// FP32 GEMMs, not the same GEMMs on tensor cores, which a tensor-core class caps with
    /// its own.
    #[test]
    fn a_power_cap_holds_the_units_its_class_was_fitted_on() {
        let capped = |name: Class, e: f64| ClassCoefficients {
            energy_per_flop_7nm: Some(e),
            ..class(name, 1e-6, 1.0)
        };
        let board = Some(PowerSpec {
            tdp_w: 70.0,
            process_nm: 12.0,
        });
        let fp32 = DeviceSpec {
            power: board,
            ..A100
        };
        let fp16 = DeviceSpec {
            peak_flops: 65e12,
            tensor: Some(NumberFormat::Fp16),
            power: board,
            ..A100
        };
        let big = crate::kernels::gemm_kernel(
            KernelClass::Gemm,
            crate::kernels::KernelPass::Forward,
            8192.0,
            8192.0,
            8192.0,
            1.0,
        );
        let source = ModelSource {
            data: String::new(),
            devices: Vec::new(),
            fitted_by: String::new(),
            tensor: None,
            depthwise: None,
        };
        let plain = |e| Model {
            source: source.clone(),
            classes: vec![capped(Class::GEMM, e)],
        };
        // 10 pJ at 7 nm is 17 pJ at 12 nm: 70 W holds FP32 to 4.1 TFLOP/s.
        let slow = plain(10e-12).time(&big, 4, &fp32).unwrap();
        let fast = plain(1e-15).time(&big, 4, &fp32).unwrap();
        assert!(slow > 4.0 * fast, "{slow} {fast}");
        // On tensor cores the FP32 class's cap does not apply...
        let uncapped = plain(10e-12).time(&big, 2, &fp16).unwrap();
        assert_eq!(uncapped, plain(1e-15).time(&big, 2, &fp16).unwrap());
        // ...a tensor-core class's does: 1.5 pJ at 7 nm holds 65 TFLOP/s to 27.
        let tensor = Model {
            source,
            classes: vec![
                capped(Class::GEMM, 10e-12),
                capped(named("gemm-tensor-16"), 1.5e-12),
            ],
        };
        let held = tensor.time(&big, 2, &fp16).unwrap();
        assert!(held > 2.0 * uncapped, "{held} {uncapped}");
    }

    #[test]
    fn large_gemms_tend_to_the_peak_and_small_ones_to_one_wave() {
        let big = gemm(1, 8192, 8192, 8192, 4, Tiles::Any, &A100);
        let ideal = 2.0 * 8192f64.powi(3) / A100.peak_flops;
        // 4096 tiles of 128 x 128 in 38 waves of 108: the tile's load factor (1.25) over
        // the ideal, within 1 %.
        let r = big[1] / ideal / 1.25;
        assert!(r > 1.0 && r < 1.01, "{r}");
        let small = gemm(1, 27, 29, 15, 4, Tiles::Any, &A100);
        assert_eq!(small[2], 1.0 / A100.clock_hz, "one wave");
        // A 32 x 32 tile: one SM's share of one wave, far above the ideal time.
        assert!(small[1] > 100.0 * 2.0 * 27.0 * 29.0 * 15.0 / A100.peak_flops);
    }

    #[test]
    fn wave_quantization_steps_at_a_multiple_of_the_sms() {
        // 108 tiles fill one wave; 109 need a second, which no other tiling avoids (an inner
        // dimension of 256 cannot be split).
        let one = gemm(1, 128 * 108, 128, 256, 4, Tiles::Any, &A100);
        let two = gemm(1, 128 * 109, 128, 256, 4, Tiles::Any, &A100);
        assert!(two[1] / one[1] > 1.5, "{}", two[1] / one[1]);
        assert_eq!(two[2] / one[2], 2.0);
        // A long inner dimension on a few tiles is split across the SMs.
        let thin = gemm(1, 32, 32, 1 << 16, 4, Tiles::Any, &A100);
        let unsplit = 2.0 * 32.0 * 32.0 * 65536.0 * 2.0 / (A100.peak_flops / A100.sms);
        assert!(thin[1] < unsplit / 20.0, "{} vs {unsplit}", thin[1]);
    }

    /// The features of `batch` 3 x 3 convolutions of 64 channels into 128 over 56 x 56 maps
    /// at `stride`, padded to keep their size, as Winograd tiles where `winograd`.
    fn conv_56(batch: u64, stride: u64, winograd: bool) -> [f64; GEMM_FEATURES.len()] {
        conv(
            batch,
            64,
            128,
            &[56, 56],
            &[3, 3],
            &[stride, stride],
            &[1, 1],
            winograd,
            4,
            &A100,
        )
    }

    #[test]
    fn a_convolution_is_its_implicit_gemm_and_memory_splits_at_the_l2() {
        let c = conv_56(8, 1, true);
        let g = gemm(1, 8 * 56 * 56, 128, 64 * 9, 4, Tiles::Any, &A100);
        assert_eq!(c[1], g[1]);
        let v_small = vector(1 << 20, 3, 4, &A100);
        let v_big = vector(1 << 26, 3, 4, &A100);
        assert!(v_small[1] > 0.0 && v_small[2] == 0.0);
        assert!(v_big[1] == 0.0 && v_big[2] > 0.0);
        assert_eq!(VectorOp::Add.arrays(), 3);
        assert_eq!(VectorOp::Relu.arrays(), 2);
    }

    /// A Winograd kernel transforms its filters once, whatever the batch: 36 elements for
    /// each 3 x 3 filter at the HBM bandwidth; the implicit GEMM and products transform none.
    #[test]
    fn a_winograd_kernel_pays_for_its_transformed_filters_once_per_call() {
        let at = |batch: u64, winograd: bool| conv_56(batch, 1, winograd);
        let transformed = 36.0 * 64.0 * 128.0 * 4.0 / A100.bandwidth;
        assert!((at(1, true)[5] / transformed - 1.0).abs() < 1e-12);
        assert_eq!(at(64, true)[5], at(1, true)[5]);
        assert!(at(64, true)[1] > at(1, true)[1] * 32.0);
        assert_eq!(at(8, false)[5], 0.0);
        assert_eq!(gemm(1, 4096, 4096, 4096, 4, Tiles::Library, &A100)[5], 0.0);
        // A strided convolution runs no Winograd kernel.
        assert_eq!(conv_56(8, 2, true)[5], 0.0);
    }

    /// What `predict` times a convolution layer's kernels by is what the fit saw of the
    /// kernel set's convolutions: Winograd tiles for a 3 x 3 filter at stride 1 (a 7 x 7
    /// output counts as 8 x 8), the implicit GEMM's own rows otherwise, and the bytes of the
    /// input, filters and output, not of the unrolled input.
    #[test]
    fn a_convolution_layer_is_timed_as_the_fit_saw_its_kernels() {
        use crate::kernels::{ConvShape, KernelPass};
        let shape = |size: usize, stride: usize| ConvShape {
            batch: 8,
            c_in: 64,
            c_out: 128,
            input: vec![size, size],
            output: vec![(size - 1) / stride + 1; 2],
            kernel: vec![3, 3],
            stride: vec![stride; 2],
            padded: true,
            groups: 1,
        };
        for (size, stride) in [(7, 1), (56, 1), (14, 2)] {
            let k = shape(size, stride).kernel(KernelPass::Forward);
            let s = stride as u64;
            let fit = conv(
                8,
                64,
                128,
                &[size as u64; 2],
                &[3, 3],
                &[s, s],
                &[1, 1],
                true,
                4,
                &A100,
            );
            assert_eq!(features(&k, 4, &A100), fit.to_vec(), "{size} / {stride}");
        }
        let seven = shape(7, 1).kernel(KernelPass::Forward);
        assert_eq!(seven.conv.unwrap().winograd_rows, Some(8.0 * 64.0));
        let unrolled = gemm(1, 8 * 49, 128, 64 * 9, 4, Tiles::Any, &A100);
        let f = features(&seven, 4, &A100);
        assert!(f[1] > unrolled[1], "Winograd's rounded tiles take longer");
        let moved = 4.0 * (8.0 * 64.0 * 49.0 + 128.0 * 64.0 * 9.0 + 8.0 * 128.0 * 49.0);
        assert_eq!(f[3], moved / A100.bandwidth, "the bytes moved, in the L2");
        // A strided convolution's filter gradient runs no Winograd kernel.
        let filter = shape(14, 2).kernel(KernelPass::BackwardFilter);
        assert_eq!(filter.conv.unwrap().winograd_rows, None);
    }

    #[test]
    fn a_depthwise_convolution_is_its_pass_s_and_format_s_class_where_the_model_has_one() {
        use crate::kernels::gemm_kernel;
        // 64 channels, 3136 outputs each, 3 x 3 filters: a product per channel.
        let k = gemm_kernel(
            KernelClass::ConvDepthwise,
            KernelPass::BackwardData,
            3136.0,
            1.0,
            9.0,
            64.0,
        );
        let fp16 = DeviceSpec {
            tensor: Some(NumberFormat::Fp16),
            ..A100
        };
        let name = Class::depthwise(KernelPass::BackwardData, NumberFormat::Fp16);
        assert_eq!(name.name(), "conv-depthwise-backward-data-fp16");
        let with = model(vec![
            class(Class::CONV, 300e-6, 1.0),
            ClassCoefficients {
                features: DEPTHWISE_FEATURES.iter().map(|f| (*f).to_owned()).collect(),
                coefficients: vec![5e-6, 1.0, 0.5],
                ..class(name, 0.0, 0.0)
            },
        ]);
        assert_eq!(with.class_for(&k, &fp16).unwrap().name, name);
        // Another format or pass has no class of its own here: `conv` times it.
        assert_eq!(with.class_for(&k, &A100).unwrap().name, Class::CONV);
        let forward = KernelClass::ConvDepthwise;
        let f = gemm_kernel(forward, KernelPass::Forward, 3136.0, 1.0, 9.0, 64.0);
        assert_eq!(with.class_for(&f, &fp16).unwrap().name, Class::CONV);
        // Its features: the launch, its bytes at the bandwidth, its multiply-adds at one
        // per SM per cycle.
        let x = features_for(&k, name, 2, &fp16);
        let macs = 3136.0 * 9.0 * 64.0;
        assert_eq!(x[0], 1.0);
        assert!((x[2] - macs / (A100.sms * A100.clock_hz)).abs() < 1e-15);
        let bytes = 2.0 * (3136.0 * 9.0 * 64.0 + 9.0 * 64.0 + 3136.0 * 64.0);
        assert!((x[1] - bytes / A100.bandwidth).abs() / x[1] < 1e-12);
        // In a step: the larger of its launch and its work.
        let t = with.timed(&k, 2, &fp16).unwrap().0;
        assert!((t - (x[1] + 0.5 * x[2]).max(5e-6)).abs() < 1e-12);
        // The model file reads it back with its three features.
        let alone = model(with.classes[1..].to_vec());
        let text = toml::to_string(&alone).unwrap();
        assert_eq!(Model::parse(&text, "m.toml").unwrap(), alone);
    }

    #[test]
    fn a_kernel_s_gemm_is_recovered_from_its_features() {
        use crate::kernels::{KernelPass, gemm_kernel};
        let k = gemm_kernel(
            KernelClass::ConvDepthwise,
            KernelPass::Forward,
            3136.0,
            1.0,
            9.0,
            64.0,
        );
        assert_eq!(gemm_shape(&k.x), (64, 3136, 1, 9));
        let d = gemm_kernel(
            KernelClass::Gemm,
            KernelPass::BackwardFilter,
            2048.0,
            1000.0,
            256.0,
            1.0,
        );
        assert_eq!(gemm_shape(&d.x), (1, 2048, 1000, 256));
        // A pointwise convolution's calls (one per sample) lower into one implicit GEMM.
        let p = gemm_kernel(
            KernelClass::ConvPointwise,
            KernelPass::Forward,
            784.0,
            256.0,
            64.0,
            32.0,
        );
        assert_eq!(
            features(&p, 4, &A100),
            gemm(1, 784 * 32, 256, 64, 4, Tiles::Any, &A100).to_vec()
        );
    }

    #[test]
    fn the_shipped_model_parses_and_covers_every_class_ridgeline_times() {
        let m = Model::builtin();
        assert!(m.source.devices.len() >= 5, "{:?}", m.source.devices);
        for op in crate::file::op_kinds() {
            if let Some(k) =
                crate::kernels::vector_kernel(op, crate::kernels::KernelPass::Forward, 1e6, 8e6)
            {
                let t = m
                    .time(&k, 4, &A100)
                    .unwrap_or_else(|| panic!("no class for `{op}`"));
                assert!(t > 0.0 && t.is_finite(), "{op}: {t}");
            }
        }
        assert!(
            m.class(named("linear")).is_none() && m.class(named("bmm")).is_none(),
            "GEMMs are timed by `gemm`"
        );
        for class in [Class::GEMM, Class::CONV] {
            let c = m.class(class).unwrap();
            assert_eq!(c.features, GEMM_FEATURES);
            assert!(
                c.holdout_median_abs_error > 0.0,
                "{class}: the figures of the fit are kept"
            );
        }
    }

    #[test]
    fn a_model_file_that_is_off_names_the_field() {
        let good = include_str!("../../data/evidence/kernels/transfer.toml");
        assert!(Model::parse(good, "m.toml").is_ok());
        let unknown = good.replacen("points =", "pionts =", 1);
        let e = Model::parse(&unknown, "m.toml").unwrap_err().to_string();
        assert!(e.starts_with("m.toml") && e.contains("pionts"), "{e}");
        let interval: String = good
            .lines()
            .map(|l| {
                if l.starts_with("holdout_interval_90") {
                    "holdout_interval_90 = [2.0, 3.0]\n".to_owned()
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        let e = Model::parse(&interval, "m.toml").unwrap_err().to_string();
        assert!(e.contains(".holdout_interval_90"), "{e}");
        let negative = good.replacen("coefficients = [", "coefficients = [-", 1);
        let e = Model::parse(&negative, "m.toml").unwrap_err().to_string();
        assert!(
            e.contains(".coefficients") && e.contains("not negative"),
            "{e}"
        );
        let energy = good.replacen("energy_per_flop_7nm = ", "energy_per_flop_7nm = -", 1);
        let e = Model::parse(&energy, "m.toml").unwrap_err().to_string();
        assert!(e.contains(".energy_per_flop_7nm"), "{e}");
        let short = good.replacen("\"launch\", ", "", 1);
        let e = Model::parse(&short, "m.toml").unwrap_err().to_string();
        assert!(e.contains(".features"), "{e}");
        let unknown = good.replacen("name = \"gemm\"", "name = \"gemmm\"", 1);
        let e = Model::parse(&unknown, "m.toml").unwrap_err().to_string();
        assert!(
            e.starts_with("m.toml") && e.contains("`gemmm` is no kernel class"),
            "{e}"
        );
    }
}
