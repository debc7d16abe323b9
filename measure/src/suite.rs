//! The standard micro-kernel campaign that calibration needs, planned to fit a time budget.
//!
//! [`standard`] lists the cases in priority order: what calibration cannot do without first
//! (FP32 GEMM efficiency against size, memory bandwidth from L1 to well past the last-level
//! cache, convolution forward at the reference workloads' shapes, all on every core), then
//! FP64 and non-square GEMM, the convolution backward passes, the other STREAM kernels, the
//! non-GEMM ops of the reference workloads, a convolution sweep (2-d and 3-d, grouped,
//! dilated, depthwise); and all of it again on one thread. [`plan`] estimates each
//! case's time from a quick probe of the machine ([`probe`]) and keeps, in that order, the
//! cases that fit the budget; the rest are listed as left out.

use std::time::Duration;

use ridgeline_model::graph::{Graph, Op, Pool};
use ridgeline_model::workloads::{self, BuildOptions};

use crate::backend::{
    Backend, ConvCase, ConvPass, CopyCase, CopyDirection, Format, GemmCase, HostMemory, Layout,
    OpCase, Pass, StreamKernel,
};
use crate::campaign::{Case, conv_cases};
use crate::error::{Error, Result};
use crate::host::Caches;
use crate::protocol::Protocol;

/// Default time budget of `measure suite`.
pub const DEFAULT_BUDGET: Duration = Duration::from_secs(5 * 60);

/// The suite's protocol: the default one, shortened so that a few minutes cover the shapes
/// calibration needs (5 samples and 0.2 s at least, 1 s at most).
pub const PROTOCOL: Protocol = Protocol {
    warmup: Duration::from_millis(100),
    min_samples: 5,
    min_time: Duration::from_millis(200),
    max_samples: 200,
    max_time: Duration::from_secs(1),
    cache: crate::protocol::CacheState::Step,
};

/// Most a suite stretches each case's sampling when every case fits its budget with time
/// to spare.
pub const MAX_SAMPLING_SCALE: f64 = 4.0;

/// The passes over the suite that sampling `scale` times longer is split into: the nearest
/// whole number, at least one, at most [`MAX_SAMPLING_SCALE`]; each pass then samples at
/// least three quarters of the suite's protocol.
pub fn passes(scale: f64) -> usize {
    (scale.round() as usize).clamp(1, MAX_SAMPLING_SCALE as usize)
}

/// Square GEMM sizes of the suite.
pub const GEMM_SIZES: [usize; 8] = [64, 128, 256, 512, 768, 1024, 1536, 2048];

/// Non-square GEMM shapes (m, n, k): skinny and fat products as dense and 1x1-conv layers make.
pub const GEMM_SHAPES: [(usize, usize, usize); 6] = [
    (64, 4096, 1024),
    (256, 3136, 64),
    (1024, 64, 4096),
    (4096, 4096, 64),
    (512, 12544, 147),
    (2048, 49, 512),
];

/// A reference workload and the batch and input the suite takes its convolutions and ops from.
#[derive(Debug, Clone, Copy)]
pub struct Source {
    /// Built-in workload.
    pub workload: &'static str,
    /// Input spatial size.
    pub input: &'static [usize],
    /// Batch.
    pub batch: usize,
}

/// The reference shapes: CosmoFlow at 128^3 batch 1, DeepCAM at a reduced 192x288 batch 1,
/// ResNet-50 at 224 batch 8 (the executor's sizes, so micro-kernels and full runs compare);
/// then each at a smaller problem — CosmoFlow 96^3 batch 2, DeepCAM 128x192 batch 2,
/// ResNet-50 160 batch 2 — so that calibration sees every layer shape at two sizes and can
/// tell how efficiency falls on small problems; and GPT-2 (124M) at 32 tokens batch 2 and 16
/// tokens batch 1, for the sequence ops (layer norm, GELU, softmax, embeddings).
pub const SOURCES: [Source; 8] = [
    Source {
        workload: "cosmoflow",
        input: &[128],
        batch: 1,
    },
    Source {
        workload: "deepcam",
        input: &[192, 288],
        batch: 1,
    },
    Source {
        workload: "resnet50",
        input: &[224],
        batch: 8,
    },
    Source {
        workload: "cosmoflow",
        input: &[96],
        batch: 2,
    },
    Source {
        workload: "deepcam",
        input: &[128, 192],
        batch: 2,
    },
    Source {
        workload: "resnet50",
        input: &[160],
        batch: 2,
    },
    Source {
        workload: "gpt2",
        input: &[32],
        batch: 2,
    },
    Source {
        workload: "gpt2",
        input: &[16],
        batch: 1,
    },
];

/// STREAM array lengths (`f64` elements): from a quarter of L1 (three arrays fit) to 8 times
/// the last-level cache, by factors of 4.
pub fn stream_sizes(caches: Caches) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut bytes = (caches.l1d / 4).max(1024);
    while bytes <= 8 * caches.llc {
        sizes.push(bytes / 8);
        bytes *= 4;
    }
    sizes.push(8 * caches.llc / 8);
    sizes.dedup();
    sizes
}

/// Shapes taken per op kind from each workload: the first, middle and last distinct input
/// shape (or parameters: a linear layer's width), so calibration sees each op at more than
/// one size.
pub const SHAPES_PER_OP: usize = 3;

/// The non-GEMM ops of `graph` at `batch`: for each op kind, up to [`SHAPES_PER_OP`] of its
/// layers with distinct first-input shapes or parameters (first, middle and last of them).
pub fn op_cases(graph: &Graph, batch: usize) -> Vec<OpCase> {
    let layers = graph.layers();
    let mut kinds: Vec<(&'static str, Vec<OpCase>)> = Vec::new();
    for layer in layers {
        if layer.op.is_view()
            || matches!(
                layer.op,
                Op::Input | Op::Conv(_) | Op::ConvTranspose(_) | Op::Dense { .. }
            )
        {
            continue;
        }
        let case = OpCase {
            op: layer.op.clone(),
            input: layers[layer.inputs[0]].output.dims().to_vec(),
            batch,
            format: Format::Fp32,
        };
        match kinds.iter_mut().find(|(k, _)| *k == layer.op.kind()) {
            Some((_, cases)) => {
                // Distinct by input and parameters: a linear layer's width is its work.
                if !cases
                    .iter()
                    .any(|c| c.input == case.input && c.op == case.op)
                {
                    cases.push(case);
                }
            }
            None => kinds.push((layer.op.kind(), vec![case])),
        }
    }
    let mut out = Vec::new();
    for (_, cases) in kinds {
        let n = cases.len();
        let mut picks = vec![0, n / 2, n - 1];
        picks.dedup();
        out.extend(
            picks
                .into_iter()
                .take(SHAPES_PER_OP)
                .map(|i| cases[i].clone()),
        );
    }
    out
}

/// Ops the reference workloads lack, on typical shapes: average pooling and nearest
/// upsampling.
pub fn extra_ops() -> Vec<OpCase> {
    vec![
        OpCase {
            op: Op::avg_pool(Pool::new(&[2, 2])),
            input: vec![64, 56, 56],
            batch: 8,
            format: Format::Fp32,
        },
        OpCase {
            op: Op::avg_pool(Pool::new(&[2, 2, 2])),
            input: vec![32, 64, 64, 64],
            batch: 1,
            format: Format::Fp32,
        },
        OpCase {
            op: Op::Upsample {
                factor: [4, 4].into_iter().collect(),
            },
            input: vec![256, 48, 72],
            batch: 1,
            format: Format::Fp32,
        },
    ]
}

/// A convolution sweep: the suite's, or the kernel campaign's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvSweep {
    /// [`conv_sweep`].
    Suite,
    /// [`conv_kernel_sweep`].
    Kernels,
}

impl ConvSweep {
    /// The sweep's convolutions.
    pub fn cases(self) -> Vec<ConvCase> {
        match self {
            ConvSweep::Suite => conv_sweep(),
            ConvSweep::Kernels => conv_kernel_sweep(),
        }
    }
}

/// A sweep's convolution: (batch, c_in, c_out, input, kernel, stride, dilation, groups), a
/// cubic (square) kernel padded to keep the size at stride 1.
type SweepShape<'a> = (usize, usize, usize, &'a [usize], usize, usize, usize, usize);

/// The FP32 channels-first case of a sweep's convolution, without bias.
fn sweep_case(label: String, shape: SweepShape<'_>) -> ConvCase {
    let (batch, c_in, c_out, input, k, stride, dilation, groups) = shape;
    let rank = input.len();
    ConvCase {
        label,
        batch,
        c_in,
        input: input.to_vec(),
        c_out,
        kernel: vec![k; rank],
        stride: vec![stride; rank],
        padding: vec![[dilation * (k / 2); 2]; rank],
        dilation: vec![dilation; rank],
        groups,
        bias: false,
        format: Format::Fp32,
        layout: Layout::ChannelsFirst,
    }
}

/// The convolution sweep: 2-d and 3-d, plain, grouped, dilated and depthwise, over channels.
pub fn conv_sweep() -> Vec<ConvCase> {
    let case = |label: &str,
                c_in: usize,
                c_out: usize,
                input: &[usize],
                k: usize,
                dilation: usize,
                groups: usize| {
        sweep_case(
            format!("sweep/{label}"),
            (1, c_in, c_out, input, k, 1, dilation, groups),
        )
    };
    let mut out = Vec::new();
    for c in [16, 64, 256] {
        out.push(case("2d", c, c, &[56, 56], 3, 1, 1));
        out.push(case("3d", c / 2, c, &[32, 32, 32], 3, 1, 1));
    }
    out.push(case("2d-1x1", 256, 64, &[56, 56], 1, 1, 1));
    out.push(case("2d-grouped", 128, 128, &[56, 56], 3, 1, 8));
    out.push(case("2d-dilated", 64, 64, &[56, 56], 3, 2, 1));
    out.push(case("2d-depthwise", 128, 128, &[56, 56], 3, 1, 128));
    out.push(case("3d-grouped", 64, 64, &[32, 32, 32], 3, 1, 4));
    out.push(case("3d-dilated", 32, 32, &[32, 32, 32], 3, 2, 1));
    out.push(case("3d-depthwise", 64, 64, &[32, 32, 32], 3, 1, 64));
    out
}

/// The kernel sweep, for the convolution kinds public kernel sets lack (a GPU campaign's,
/// `measure conv --sweep kernels`): 3-d convolutions from CosmoFlow's few-channel first
/// layer to 256 channels and 128^3 voxels, with strided, grouped and depthwise ones; 2-d
/// depthwise convolutions over DeepCAM's and the mobile networks' channels, sizes, strides,
/// dilations and 3 x 3 to 7 x 7 kernels; and ResNeXt's grouped convolutions. Each shape
/// varies one of reduction depth (channels per group times kernel volume), outputs per
/// filter and channels, so a class fitted on it can say what bounds such a kernel.
pub fn conv_kernel_sweep() -> Vec<ConvCase> {
    // (label, batch, c_in, c_out, input, kernel, stride, dilation, groups); padded to keep
    // the size.
    type Shape = (
        &'static str,
        usize,
        usize,
        usize,
        &'static [usize],
        usize,
        usize,
        usize,
        usize,
    );
    let shapes: &[Shape] = &[
        // 3-d, few input channels (CosmoFlow's first layer: 4 channels of 128^3 voxels).
        ("3d-first", 1, 4, 16, &[128, 128, 128], 3, 1, 1, 1),
        ("3d-first", 4, 4, 16, &[64, 64, 64], 3, 1, 1, 1),
        ("3d-first", 4, 4, 32, &[32, 32, 32], 3, 1, 1, 1),
        ("3d-first", 2, 1, 16, &[64, 64, 64], 3, 1, 1, 1),
        ("3d-first", 1, 8, 32, &[64, 64, 64], 3, 1, 1, 1),
        // 3-d, the channels grow as the volume shrinks.
        ("3d", 1, 16, 32, &[64, 64, 64], 3, 1, 1, 1),
        ("3d", 2, 32, 64, &[32, 32, 32], 3, 1, 1, 1),
        ("3d", 4, 64, 128, &[16, 16, 16], 3, 1, 1, 1),
        ("3d", 8, 128, 256, &[8, 8, 8], 3, 1, 1, 1),
        ("3d", 1, 64, 64, &[32, 32, 32], 3, 1, 1, 1),
        ("3d", 1, 256, 256, &[16, 16, 16], 3, 1, 1, 1),
        ("3d-k2", 2, 32, 64, &[32, 32, 32], 2, 1, 1, 1),
        ("3d-1x1", 2, 128, 64, &[32, 32, 32], 1, 1, 1, 1),
        ("3d-stride2", 2, 32, 64, &[64, 64, 64], 3, 2, 1, 1),
        ("3d-grouped", 2, 64, 64, &[32, 32, 32], 3, 1, 1, 8),
        ("3d-depthwise", 2, 32, 32, &[64, 64, 64], 3, 1, 1, 32),
        ("3d-depthwise", 2, 256, 256, &[16, 16, 16], 3, 1, 1, 256),
        // 2-d depthwise (DeepCAM's Xception encoder, MobileNet, EfficientNet, ConvNeXt).
        ("2d-depthwise", 1, 64, 64, &[192, 288], 3, 1, 1, 64),
        ("2d-depthwise", 2, 128, 128, &[96, 144], 3, 1, 1, 128),
        ("2d-depthwise", 2, 256, 256, &[96, 144], 3, 2, 1, 256),
        ("2d-depthwise", 2, 728, 728, &[48, 72], 3, 1, 1, 728),
        ("2d-depthwise", 2, 1024, 1024, &[24, 36], 3, 1, 2, 1024),
        ("2d-depthwise", 2, 2048, 2048, &[24, 36], 3, 1, 1, 2048),
        ("2d-depthwise", 8, 32, 32, &[112, 112], 3, 1, 1, 32),
        ("2d-depthwise", 8, 512, 512, &[14, 14], 3, 1, 1, 512),
        ("2d-depthwise-k5", 8, 240, 240, &[28, 28], 5, 1, 1, 240),
        ("2d-depthwise-k7", 8, 96, 96, &[56, 56], 7, 1, 1, 96),
        ("2d-depthwise-k7", 8, 768, 768, &[7, 7], 7, 1, 1, 768),
        // 2-d grouped (ResNeXt-50 32x4d's grouped 3 x 3 convolutions).
        ("2d-grouped", 8, 128, 128, &[56, 56], 3, 1, 1, 32),
        ("2d-grouped", 8, 512, 512, &[14, 14], 3, 1, 1, 32),
        ("2d-grouped", 8, 256, 256, &[28, 28], 3, 1, 1, 2),
    ];
    shapes
        .iter()
        .map(
            |&(label, batch, c_in, c_out, input, k, stride, dilation, groups)| {
                let size: Vec<String> = input.iter().map(usize::to_string).collect();
                sweep_case(
                    format!("kernels/{label}-c{c_in}-{}", size.join("x")),
                    (batch, c_in, c_out, input, k, stride, dilation, groups),
                )
            },
        )
        .collect()
}

/// The graphs of the suite's [`SOURCES`], each with its source.
fn source_graphs() -> Result<Vec<(&'static Source, Graph)>> {
    SOURCES
        .iter()
        .map(|s| {
            let options = BuildOptions {
                input_size: Some(s.input.to_vec()),
                width: 1.0,
            };
            workloads::build(s.workload, &options)
                .map(|g| (s, g))
                .map_err(|e| Error::invalid(s.workload, e.to_string()))
        })
        .collect()
}

/// Every suite case in priority order, with the threads it runs on: all of them on the
/// first thread count of `threads` (every core, by default), then all of them on each of the
/// others (1 thread, by default).
pub fn standard(threads: &[usize]) -> Result<Vec<(usize, Case)>> {
    let mut convs = Vec::new();
    let mut ops = Vec::new();
    for (s, g) in source_graphs()? {
        convs.extend(conv_cases(&g, s.batch, s.workload, &[]));
        ops.extend(op_cases(&g, s.batch));
    }
    ops.extend(extra_ops());
    let gemm = |n: usize, format| {
        Case::Gemm(GemmCase {
            m: n,
            n,
            k: n,
            format,
        })
    };
    let stream = stream_sizes(Caches::detect());
    let conv = |pass| convs.iter().map(move |c| Case::Conv(c.clone(), pass));

    let mut main: Vec<Case> = GEMM_SIZES.iter().map(|&n| gemm(n, Format::Fp32)).collect();
    main.extend(stream.iter().map(|&n| Case::Stream(StreamKernel::Triad, n)));
    main.extend(conv(ConvPass::Forward));

    let mut more: Vec<Case> = GEMM_SIZES.iter().map(|&n| gemm(n, Format::Fp64)).collect();
    more.extend(GEMM_SHAPES.iter().map(|&(m, n, k)| {
        Case::Gemm(GemmCase {
            m,
            n,
            k,
            format: Format::Fp32,
        })
    }));
    more.extend(conv(ConvPass::BackwardData));
    more.extend(conv(ConvPass::BackwardFilter));
    for k in [StreamKernel::Copy, StreamKernel::Scale, StreamKernel::Add] {
        more.extend(stream.iter().map(|&n| Case::Stream(k, n)));
    }
    for pass in [Pass::Forward, Pass::Backward] {
        more.extend(ops.iter().map(|o| Case::Op(o.clone(), pass)));
    }
    for pass in ConvPass::ALL {
        more.extend(conv_sweep().into_iter().map(|c| Case::Conv(c, pass)));
    }

    let mut out: Vec<(usize, Case)> = Vec::new();
    for &t in threads {
        out.extend(main.iter().cloned().map(|c| (t, c)));
        out.extend(more.iter().cloned().map(|c| (t, c)));
    }
    Ok(out)
}

/// Square GEMM sizes of the GPU suite (per number format).
pub const GPU_GEMM_SIZES: [usize; 7] = [256, 512, 1024, 2048, 4096, 6144, 8192];

/// Number formats of the GPU suite's GEMMs, in priority order.
pub const GPU_GEMM_FORMATS: [Format; 5] = [
    Format::Fp32,
    Format::Tf32,
    Format::Fp16,
    Format::Bf16,
    Format::Fp64,
];

/// Host-device copy sizes of the GPU suite, bytes.
pub const GPU_COPY_SIZES: [usize; 6] = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30];

/// STREAM array lengths (`f64` elements) on a GPU with `l2` bytes of L2: from a quarter of
/// L2 to 16 times it (past the cache, where the bandwidth is the memory's), by factors of 4.
pub fn gpu_stream_sizes(l2: usize) -> Vec<usize> {
    let l2 = l2.max(1 << 20);
    let mut sizes = Vec::new();
    let mut bytes = l2 / 4;
    while bytes <= 16 * l2 {
        sizes.push(bytes / 8);
        bytes *= 4;
    }
    sizes
}

/// The GPU suite in priority order, on one stream (threads 1): GEMM in every format,
/// convolution at the reference layer shapes in every pass, STREAM from L2 to device
/// memory, host-device copies, the ops (every one the CUDA backend runs), the convolution
/// sweep, and last mixed precision's kernels: the reference convolutions with FP16 tensors,
/// then the ops on FP16 activations.
pub fn standard_gpu(l2: usize) -> Result<Vec<(usize, Case)>> {
    let mut convs = Vec::new();
    let mut ops = Vec::new();
    for (s, g) in source_graphs()? {
        convs.extend(conv_cases(&g, s.batch, s.workload, &[]));
        ops.extend(
            op_cases(&g, s.batch)
                .into_iter()
                .filter(|o| crate::cuda::runs_op(&o.op)),
        );
    }
    let stream = gpu_stream_sizes(l2);
    let gemm = |format: Format| {
        GPU_GEMM_SIZES.iter().map(move |&n| {
            Case::Gemm(GemmCase {
                m: n,
                n,
                k: n,
                format,
            })
        })
    };
    let mut cases: Vec<Case> = gemm(Format::Fp32).collect();
    cases.extend(stream.iter().map(|&n| Case::Stream(StreamKernel::Triad, n)));
    cases.extend(
        convs
            .iter()
            .map(|c| Case::Conv(c.clone(), ConvPass::Forward)),
    );
    for f in &GPU_GEMM_FORMATS[1..] {
        cases.extend(gemm(*f));
    }
    cases.extend(GEMM_SHAPES.iter().map(|&(m, n, k)| {
        Case::Gemm(GemmCase {
            m,
            n,
            k,
            format: Format::Fp32,
        })
    }));
    for pass in [ConvPass::BackwardData, ConvPass::BackwardFilter] {
        cases.extend(convs.iter().map(|c| Case::Conv(c.clone(), pass)));
    }
    for direction in [CopyDirection::HostToDevice, CopyDirection::DeviceToHost] {
        for memory in [HostMemory::Pinned, HostMemory::Pageable] {
            cases.extend(GPU_COPY_SIZES.iter().map(|&bytes| {
                Case::Copy(CopyCase {
                    direction,
                    memory,
                    bytes,
                })
            }));
        }
    }
    for k in [StreamKernel::Copy, StreamKernel::Scale, StreamKernel::Add] {
        cases.extend(stream.iter().map(|&n| Case::Stream(k, n)));
    }
    for pass in [Pass::Forward, Pass::Backward] {
        cases.extend(ops.iter().map(|o| Case::Op(o.clone(), pass)));
    }
    for pass in ConvPass::ALL {
        cases.extend(conv_sweep().into_iter().map(|c| Case::Conv(c, pass)));
    }
    // Mixed precision's convolutions: the reference shapes with FP16 tensors and FP32
    // accumulation on tensor cores, every pass.
    for pass in ConvPass::ALL {
        cases.extend(convs.iter().map(|c| {
            Case::Conv(
                ConvCase {
                    format: Format::Fp16,
                    ..c.clone()
                },
                pass,
            )
        }));
    }
    for pass in [Pass::Forward, Pass::Backward] {
        cases.extend(ops.iter().map(|o| {
            Case::Op(
                OpCase {
                    format: Format::Fp16,
                    ..o.clone()
                },
                pass,
            )
        }));
    }
    Ok(cases.into_iter().map(|c| (1, c)).collect())
}

/// What the machine does, roughly, for estimating case times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// FP32 GEMM FLOP/s on every core.
    pub flops: f64,
    /// STREAM triad bytes/s on every core.
    pub bytes: f64,
    /// Cores.
    pub cores: usize,
}

/// Measures [`Rates`] in well under a second: a 512^3 FP32 GEMM and a 64 MiB triad on every
/// core of `backend`.
pub fn probe(backend: &mut dyn Backend) -> Result<Rates> {
    let quick = Protocol::quick();
    let n = 512;
    let gemm = backend.gemm(
        &GemmCase {
            m: n,
            n,
            k: n,
            format: Format::Fp32,
        },
        &quick,
    )?;
    let elements = 8 << 20;
    let triad = backend.stream(StreamKernel::Triad, elements, &quick)?;
    let best = |s: &[f64]| s.iter().copied().fold(f64::INFINITY, f64::min).max(1e-9);
    Ok(Rates {
        flops: 2.0 * (n * n * n) as f64 / best(&gemm),
        bytes: 24.0 * elements as f64 / best(&triad),
        cores: backend.threads(),
    })
}

/// One planned case.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Threads it runs on.
    pub threads: usize,
    /// The case.
    pub case: Case,
    /// Estimated seconds, set-up and protocol included.
    pub estimate_s: f64,
}

/// The cases that fit the budget, and those that do not.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// To run, in order.
    pub run: Vec<Planned>,
    /// Left out for lack of time.
    pub left_out: Vec<Planned>,
    /// Already recorded (a resumed campaign).
    pub already: usize,
}

/// Estimated seconds to measure `case` on `threads` threads by `protocol`: one run's time
/// from FLOPs and bytes at the probed rates (convolutions at half of them, ops at a third), plus
/// setting up the data, warm-up and sampling.
pub fn estimate(case: &Case, threads: usize, rates: &Rates, protocol: &Protocol) -> Result<f64> {
    let share = threads as f64 / rates.cores.max(1) as f64;
    let (flops, bytes, derate) = match case {
        Case::Gemm(g) => {
            let (m, n, k) = (g.m as f64, g.n as f64, g.k as f64);
            let slow = if g.format == Format::Fp64 { 2.0 } else { 1.0 };
            (
                2.0 * m * n * k * slow,
                (m * k + k * n + m * n) * g.format.bytes() as f64,
                1.0,
            )
        }
        Case::Stream(k, n) => (0.0, (k.arrays() * 8) as f64 * *n as f64, 1.0),
        // A host-device copy moves its bytes once (at roughly memory speed, an upper bound).
        Case::Copy(c) => (0.0, c.bytes as f64, 1.0),
        Case::Conv(c, _) => {
            let g = crate::cases::conv_graph(c)?;
            let cost = crate::cases::layer_cost(&g, c.batch, c.format);
            (
                cost.flops_fwd.value(),
                cost.hbm_bytes_fwd.value(),
                if c.groups > 1 { 10.0 } else { 2.0 },
            )
        }
        Case::Op(c, _) => {
            let g = crate::cases::op_graph(c)?;
            let cost = crate::cases::layer_cost(&g, c.batch, c.format);
            (cost.flops_fwd.value(), cost.hbm_bytes_fwd.value(), 3.0)
        }
        Case::Workload(g, batch, precision) => {
            let cost = ridgeline_model::cost::cost(g, *batch as u64, *precision);
            (cost.flops_train.value(), cost.hbm_bytes_train.value(), 3.0)
        }
    };
    let run = derate * (flops / (rates.flops * share) + bytes / (rates.bytes * share.sqrt()));
    // Synthetic data is written once at about 1 GB/s.
    let setup = bytes / 1e9;
    let warmup = protocol.warmup.as_secs_f64().max(run);
    let min = protocol
        .min_time
        .as_secs_f64()
        .max(protocol.min_samples as f64 * run);
    let sampling = min.min(
        protocol
            .max_time
            .as_secs_f64()
            .max(protocol.min_samples as f64 * run),
    );
    Ok(setup + warmup + sampling)
}

/// Keeps, in order, the `candidates` that fit `budget` (skipping those `done` says are
/// recorded already).
pub fn plan(
    candidates: Vec<(usize, Case)>,
    rates: &Rates,
    protocol: &Protocol,
    budget: Duration,
    done: impl Fn(usize, &Case) -> Result<bool>,
) -> Result<Plan> {
    let mut plan = Plan::default();
    let mut total = 0.0;
    for (threads, case) in candidates {
        if done(threads, &case)? {
            plan.already += 1;
            continue;
        }
        let estimate_s = estimate(&case, threads, rates, protocol)?;
        let planned = Planned {
            threads,
            case,
            estimate_s,
        };
        if total + estimate_s <= budget.as_secs_f64() {
            total += estimate_s;
            plan.run.push(planned);
        } else {
            plan.left_out.push(planned);
        }
    }
    Ok(plan)
}

impl Plan {
    /// Estimated seconds of the cases to run.
    pub fn estimate_s(&self) -> f64 {
        self.run.iter().map(|p| p.estimate_s).sum()
    }

    /// One line per group of cases to run: what, how many, on which threads.
    pub fn summary(&self) -> Vec<String> {
        summarise(&self.run)
    }

    /// The same for the cases left out.
    pub fn left_out_summary(&self) -> Vec<String> {
        summarise(&self.left_out)
    }
}

fn group(case: &Case) -> String {
    match case {
        Case::Gemm(g) => format!("GEMM {}", g.format.name()),
        Case::Conv(c, pass) => {
            let source = c.label.split('/').next().unwrap_or_default();
            format!("conv {} {}", pass.name(), source)
        }
        Case::Stream(k, _) => format!("STREAM {}", k.name()),
        Case::Op(_, pass) => format!("ops {}", pass.name()),
        Case::Workload(g, ..) => format!("workload {}", g.name()),
        Case::Copy(c) => format!("copy {} {}", c.direction.name(), c.memory.name()),
    }
}

fn summarise(cases: &[Planned]) -> Vec<String> {
    let mut groups: Vec<(String, usize, Vec<usize>)> = Vec::new();
    for p in cases {
        let name = group(&p.case);
        match groups.iter_mut().find(|g| g.0 == name) {
            Some(g) => {
                g.1 += 1;
                if !g.2.contains(&p.threads) {
                    g.2.push(p.threads);
                }
            }
            None => groups.push((name, 1, vec![p.threads])),
        }
    }
    groups
        .into_iter()
        .map(|(name, n, mut threads)| {
            threads.sort_unstable();
            let t: Vec<String> = threads.iter().map(usize::to_string).collect();
            format!(
                "{name}: {n} case{} on {} thread(s)",
                if n == 1 { "" } else { "s" },
                t.join(" and ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_sweep_holds_distinct_3d_depthwise_and_grouped_convolutions() {
        let sweep = ConvSweep::Kernels.cases();
        assert_eq!(sweep.len(), 31);
        let labels: std::collections::BTreeSet<&str> =
            sweep.iter().map(|c| c.label.as_str()).collect();
        assert_eq!(labels.len(), sweep.len(), "labels name the cases apart");
        let depthwise = |c: &&ConvCase| c.groups == c.c_in && c.c_in == c.c_out;
        assert_eq!(sweep.iter().filter(|c| c.input.len() == 3).count(), 17);
        assert_eq!(sweep.iter().filter(depthwise).count(), 13);
        for c in &sweep {
            let rank = c.input.len();
            assert!(rank == 2 || rank == 3, "{}", c.label);
            assert_eq!(c.c_in % c.groups, 0, "{}", c.label);
            assert_eq!(c.c_out % c.groups, 0, "{}", c.label);
            // Padded to keep the size: (k - 1) d / 2 a side.
            for d in 0..rank {
                let span = c.dilation[d] * (c.kernel[d] - 1);
                assert!(c.padding[d][0] * 2 <= span + 1, "{}", c.label);
            }
        }
        assert_eq!(ConvSweep::Suite.cases(), conv_sweep());
    }

    #[test]
    fn spare_time_is_split_into_whole_passes_of_three_quarters_at_least() {
        assert_eq!(passes(1.0), 1);
        assert_eq!(passes(1.4), 1);
        assert_eq!(passes(1.7), 2);
        assert_eq!(passes(2.0), 2);
        assert_eq!(passes(100.0), 4);
        for tenth in 10..=40 {
            let scale = f64::from(tenth) / 10.0;
            assert!(scale / passes(scale) as f64 >= 0.75, "{scale}");
        }
    }

    #[test]
    fn stream_sizes_span_l1_to_past_the_llc() {
        let c = Caches {
            l1d: 32 << 10,
            llc: 16 << 20,
        };
        let s = stream_sizes(c);
        assert_eq!(s[0] * 8, 8 << 10);
        assert_eq!(*s.last().unwrap() * 8, 128 << 20);
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_standard_suite_covers_every_kind_and_pass() {
        let cases = standard(&[2, 1]).unwrap();
        let has = |f: &dyn Fn(&Case) -> bool| cases.iter().any(|(_, c)| f(c));
        assert!(has(
            &|c| matches!(c, Case::Gemm(g) if g.format == Format::Fp64)
        ));
        for pass in ConvPass::ALL {
            assert!(has(
                &|c| matches!(c, Case::Conv(k, p) if *p == pass && k.input.len() == 3)
            ));
            assert!(has(
                &|c| matches!(c, Case::Conv(k, p) if *p == pass && k.input.len() == 2)
            ));
            assert!(has(
                &|c| matches!(c, Case::Conv(k, p) if *p == pass && k.groups > 1 && k.groups < k.c_in)
            ));
            assert!(has(
                &|c| matches!(c, Case::Conv(k, p) if *p == pass && k.groups == k.c_in && k.groups > 1)
            ));
            assert!(has(
                &|c| matches!(c, Case::Conv(k, p) if *p == pass && k.dilation.iter().any(|&d| d > 1))
            ));
        }
        let kinds = [
            "max-pool",
            "avg-pool",
            "global-avg-pool",
            "batch-norm",
            "channel-affine",
            "relu",
            "leaky-relu",
            "tanh",
            "add",
            "scale",
            "concat",
            "tile",
            "upsample",
            "dropout",
            "softmax-cross-entropy",
            "mse-loss",
        ];
        for kind in kinds {
            assert!(
                has(&|c| matches!(c, Case::Op(o, _) if o.op.kind() == kind)),
                "{kind}"
            );
        }
        assert!(cases.iter().any(|(t, _)| *t == 1) && cases.iter().any(|(t, _)| *t == 2));
    }

    #[test]
    fn the_gpu_suite_covers_every_format_convolutions_streams_copies_and_its_ops() {
        let l2 = 50 << 20;
        let cases = standard_gpu(l2).unwrap();
        assert!(cases.iter().all(|(t, _)| *t == 1));
        for f in GPU_GEMM_FORMATS {
            let n = cases
                .iter()
                .filter(|(_, c)| matches!(c, Case::Gemm(g) if g.format == f && g.m == g.n && g.n == g.k))
                .count();
            assert_eq!(n, GPU_GEMM_SIZES.len(), "{f:?}");
        }
        // FP32 GEMM, triad and forward convolutions first: a short budget still calibrates.
        assert!(matches!(cases[0].1, Case::Gemm(g) if g.format == Format::Fp32));
        let copies = cases
            .iter()
            .filter(|(_, c)| matches!(c, Case::Copy(_)))
            .count();
        assert_eq!(copies, 4 * GPU_COPY_SIZES.len());
        let ops: Vec<&OpCase> = cases
            .iter()
            .filter_map(|(_, c)| match c {
                Case::Op(o, _) => Some(o),
                _ => None,
            })
            .collect();
        assert!(ops.iter().any(|o| matches!(o.op, Op::Relu)), "relu is in");
        assert!(
            ops.iter().any(|o| matches!(o.op, Op::MaxPool(_))),
            "max pooling is in"
        );
        assert!(
            ops.iter().any(|o| matches!(o.op, Op::BatchNorm)),
            "batch norm is in"
        );
        assert!(
            ops.iter().all(|o| crate::cuda::runs_op(&o.op)),
            "only ops the GPU runs"
        );
        for pass in ConvPass::ALL {
            for format in [Format::Fp32, Format::Fp16] {
                assert!(
                    cases.iter().any(
                        |(_, c)| matches!(c, Case::Conv(k, p) if *p == pass && k.format == format)
                    ),
                    "{pass:?} {format:?}"
                );
            }
        }
        // Every reference convolution in FP16 as in FP32, in every pass.
        let count = |f: Format| {
            cases
                .iter()
                .filter(|(_, c)| matches!(c, Case::Conv(k, _) if k.format == f && !k.label.starts_with("sweep/")))
                .count()
        };
        assert_eq!(count(Format::Fp16), count(Format::Fp32));
        // And every op on FP16 activations as on FP32 ones.
        let ops_in = |f: Format| ops.iter().filter(|o| o.format == f).count();
        assert!(ops_in(Format::Fp32) > 0);
        assert_eq!(ops_in(Format::Fp16), ops_in(Format::Fp32));
        // STREAM runs from inside L2 to well past it.
        let sizes = gpu_stream_sizes(l2);
        assert!(
            sizes[0] * 8 <= l2 / 4 && *sizes.last().unwrap() * 8 >= 8 * l2,
            "{sizes:?}"
        );
    }

    #[test]
    fn plans_fit_the_budget_in_priority_order() {
        let rates = Rates {
            flops: 1e11,
            bytes: 1e10,
            cores: 2,
        };
        let all = standard(&[2, 1]).unwrap();
        let n = all.len();
        let small = plan(
            all.clone(),
            &rates,
            &PROTOCOL,
            Duration::from_secs(30),
            |_, _| Ok(false),
        )
        .unwrap();
        assert!(small.estimate_s() <= 30.0);
        assert_eq!(small.run.len() + small.left_out.len(), n);
        assert!(
            matches!(small.run[0].case, Case::Gemm(_)),
            "FP32 GEMM first"
        );
        let big = plan(
            all.clone(),
            &rates,
            &PROTOCOL,
            Duration::from_secs(100_000),
            |_, _| Ok(false),
        )
        .unwrap();
        assert_eq!(big.run.len(), n);
        assert!(big.left_out.is_empty() && !big.summary().is_empty());
        let resumed = plan(all, &rates, &PROTOCOL, Duration::from_secs(30), |t, c| {
            Ok(t == 2 && matches!(c, Case::Gemm(_)))
        })
        .unwrap();
        assert!(resumed.already > 0);
    }
}
