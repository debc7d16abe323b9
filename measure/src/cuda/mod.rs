//! The CUDA backend, through cudarc with the CUDA libraries loaded at run
//! time: it builds without a CUDA toolkit, and where no driver, GPU or library is present
//! [`CudaBackend::open`] returns [`Error::BackendUnavailable`](crate::Error::BackendUnavailable)
//! naming what is missing. Without the `cuda` feature the disabled twin says the build lacks
//! the backend; call sites carry no `cfg` either way.
//!
//! What the backend runs: GEMM through cuBLAS (`cublasGemmEx`: fp64, fp32, tf32, and
//! fp16 / bf16 with fp32 accumulation), N-d convolution forward, backward-data and
//! backward-filter through cuDNN (fp32, tf32, and fp16 / bf16 tensors with fp32
//! accumulation; the algorithm the fastest of cuDNN's find API's first candidates timed again
//! on the GPU, recorded in the record's `extra`), host-device copies (pinned and pageable) and the STREAM kernels
//! (compiled with NVRTC), and [`nccl_allreduce`] across the GPUs of a machine, each timed with
//! CUDA events under the run protocol, with the device, driver and library versions in
//! every record, the element-wise ops (relu, leaky relu, tanh, scale, add, dropout), channel
//! affine, concat, flatten, tile, upsample and the losses (NVRTC kernels), and pooling and
//! batch norm (cuDNN), on FP32 or 16-bit (fp16, bf16) activations, and the full-workload
//! executor in fp32, tf32 and mixed precision (`enabled::exec`, on the layer plans and
//! precision plans of [`layers`]; the kernels compiled per activation storage,
//! [`plan::typed_source`]). GEMM and convolution operands are random (uniform in [-1, 1)):
//! zeros can run faster than real data.
//!
//! **What has run on a GPU** (an NVIDIA H200, driver 580.159, CUDA 13.0, cuBLAS 13.1,
//! cuDNN 9 from PyTorch's wheels, 2026-11-26, `scripts/gpu-check.sh` and
//! `scripts/gpu-records.sh`): cuBLAS GEMM in fp64, fp32, tf32, fp16 and bf16; cuDNN
//! convolutions in every pass in fp32 channels-first and tf32, fp16 and bf16 channels-last
//! (2-D and 3-D); the suite (GEMM, convolutions, STREAM, copies, ops); the executor's
//! training steps of CosmoFlow, DeepCAM, ResNet-50, GPT-2 and GIN in fp32 and amp-fp16.
//! That run found and fixed the bias gradient (one atomic add per element: 221 ms for
//! CosmoFlow's first layer; cuDNN's `cudnnConvolutionBackwardBias` refused bf16
//! channels-last and took 28 ms in fp16; now 1.8 ms with cuDNN's weight gradient) and the
//! cross-entropy of a language model's vocabulary (a thread per position: 38 ms of GPT-2's
//! 90 ms step; now 3.3 ms of 48 ms), both measured again after the fix. Tile's backward
//! (16-bit atomics from every output: 890 ms for DeepCAM's bottleneck in fp16) now gathers
//! each input's copies; it ran in fp32, but DeepCAM in amp-fp16 did not finish within its
//! 40 s limit on the run after the fix.
//!
//! **The H100** (SXM5, same driver and libraries, 2026-11-26): `gpu-check.sh` passed every
//! step, DeepCAM in amp-fp16 included (100.7 ms a step at batch 2), and `gpu-records.sh`
//! measured the tensor-core kernel set. It showed that cuDNN's legacy API takes longer to
//! issue a convolution than the GPU takes to run it (ResNet-50's 1 x 1 convolutions at batch
//! 32 in fp16: 111-250 us timed back to back, 15-27 us in PyTorch on the same GPU), so the
//! micro-kernel timer now queues each sample's calls behind a spin kernel (`enabled::Timer`):
//! 9-30 us, tf32 within a few per cent of PyTorch's. A case cuDNN finds no algorithm for is
//! now declined ([`crate::Error::Declined`]) and the others run.
//!
//! **The H200 again** (same driver and libraries, 2026-11-26): `gpu-records.sh` and
//! `gpu-check.sh` with the spin-queued timer, every step passing, the declined case (CosmoFlow's
//! first layer's tf32 weight gradient channels-last) listed and the others measured. Its
//! records showed cuDNN's find API choosing by the host's clock too: for ResNet-50's 1 x 1
//! convolutions in fp16 it ranked the implicit GEMM (about 220 us on the GPU) over the
//! precomputed implicit GEMM (9 us), which the H100 had happened to pick. `measure conv` now
//! times find's first distinct candidates again behind the spin ([`cudnn::RETIMED`], within
//! [`cudnn::RETIME_SPAN`] of find's first) and keeps the fastest (`enabled::fastest_algorithm`;
//! `cudnn_retimed` in the record's `extra`): on the H200, 54 of 506 tensor-core cases changed
//! algorithm, 25 of them 3-41 times faster. That ran on the H200 without the span (which
//! bounds what the re-timing costs: backward-data's `ALGO_0` took 0.3 s where `ALGO_1` took
//! 0.25 ms).
//!
//! **The H100 again** (same driver and libraries, 2026-11-26, commit 00819bd): the span and
//! the executor's re-timing ran. `gpu-records.sh` measured all 1,004 cases (fp32
//! convolutions included) in 221 s; 48 of 629 tensor-core passes changed algorithm against
//! the H100's find-only records, 17 of them 2.6-22 times faster, none slower.
//! `gpu-check.sh` passed every step (238 s); with the re-timing DeepCAM's amp-fp16 step at
//! batch 2 took 67.7-71.6 ms where find's choice took 100.7 ms (its pointwise convolutions'
//! backward passes 45 us where they took 630-660 us). Unexplained: ResNet-50's fp32 step at
//! batch 16 took 34.4 ms in the first of two runs and 24.4 ms in the second (25.9 ms before
//! the re-timing); in the first its 1 x 1 convolutions' forward passes took 330-340 us where
//! they had taken 84 us. The layer records did not say which algorithm ran; the executor now
//! writes each convolution pass's algorithm and re-timing into them (`cudnn_*_algorithm`,
//! `cudnn_*_retimed`), which has not run on a GPU.
//!
//! **Since the last GPU run** (2026-11-28): the executor's layer passes were moved from
//! one forward and one backward function into a module per kind of op with each op's two
//! directions side by side (`enabled::exec::{conv, matrix, pointwise, normalize,
//! attention}`). No library call, kernel launch or argument changed; one thing did: a
//! backward pass now resolves every kept input's device address once, up front, and
//! cudarc records a stream event for each address resolved, so a concatenation's or a
//! sum's further inputs cost an event each inside the timed pass and attention one fewer.
//! It compiles and passes clippy with `--features cuda`; it has not run on a GPU since.
//!
//! Checked only where no GPU is needed: the numerical results of the GPU executor
//! against the CPU's (the CPU executor is gradient-checked; the GPU's is not), NCCL across
//! several GPUs, and everything on a GPU other than the H200 and H100. Without a GPU the tests check type choices,
//! every kernel source through NVRTC and ptxas for sm_80 and sm_90 in every storage, their
//! argument lists, launch geometry and index maps, every layer's plan of the workloads,
//! loss scaling and the errors without a driver.

mod nccl;

pub use nccl::NcclAllreduce;

use crate::protocol::Protocol;
use crate::record::Record;

/// Whether the CUDA backend runs `op`: the element-wise ops of [`plan::OPS_SOURCE`], the
/// shaped ones of [`plan::SHAPED_SOURCE`], tile and upsample ([`plan::SPATIAL_SOURCE`]),
/// and pooling and batch norm through cuDNN: every op of the IR but the convolutions and
/// dense layers, which run as convolution and GEMM cases.
pub(crate) fn runs_op(op: &ridgeline_model::graph::Op) -> bool {
    use ridgeline_model::graph::Op;
    plan::elementwise_kernel(op, crate::backend::Pass::Forward).is_some()
        || plan::shaped_kernel(op, crate::backend::Pass::Forward, &[1], 1).is_some()
        || matches!(op, Op::Tile { .. } | Op::Upsample { .. })
        || matches!(
            op,
            Op::MaxPool(_) | Op::AvgPool(_) | Op::GlobalAvgPool | Op::BatchNorm
        )
}

/// Measures `cases` (each by `protocol`) and hands each record to `sink` as it is made;
/// `skip` says which ids are already recorded.
pub fn nccl_allreduce(
    cases: &[NcclAllreduce],
    protocol: &Protocol,
    skip: &dyn Fn(&str) -> bool,
    sink: &mut dyn FnMut(Record) -> crate::error::Result<()>,
) -> crate::error::Result<()> {
    for c in cases {
        c.check()?;
    }
    #[cfg(feature = "cuda")]
    return enabled::nccl_allreduce(cases, protocol, skip, sink);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (protocol, skip, sink);
        disabled::nccl_unavailable()
    }
}

// Used by the enabled backend; built and tested in every build.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod layers;
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod plan;

#[cfg(not(feature = "cuda"))]
mod disabled;
#[cfg(not(feature = "cuda"))]
pub use disabled::CudaBackend;
#[cfg(all(not(feature = "cuda"), feature = "mpi"))]
pub(crate) use disabled::NcclRank;

#[cfg(feature = "cuda")]
mod cudnn;
#[cfg(feature = "cuda")]
mod enabled;
#[cfg(feature = "cuda")]
pub use enabled::CudaBackend;
#[cfg(all(feature = "cuda", feature = "mpi"))]
pub(crate) use enabled::NcclRank;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Env;

    #[test]
    fn nccl_cases_are_checked_and_recorded_like_mpi_allreduce() {
        let ok = NcclAllreduce {
            gpus: 4,
            bytes: 1 << 20,
        };
        assert!(ok.check().is_ok());
        let e = NcclAllreduce { gpus: 1, bytes: 4 }
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 2"), "{e}");
        let e = NcclAllreduce { gpus: 2, bytes: 6 }
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains("multiple of 4"), "{e}");
        let r = ok.record(vec![1e-3], Env::capture(), "2.27.3");
        assert_eq!(r.kind(), crate::record::RecordKind::CommAllreduce);
        assert_eq!(r.bytes, 1_048_576.0);
        assert_eq!(r.extra.ranks, Some(4));
        assert!(r.id.contains(r#"{"algorithm":"nccl","bytes":1048576,"gpus":4}"#));
        assert_eq!(r.id, ok.id());
        r.check().expect("an NCCL record reads back");
        assert_ne!(ok.id(), NcclAllreduce { gpus: 2, ..ok }.id());
    }

    #[test]
    fn without_a_gpu_nccl_says_what_is_missing() {
        let case = NcclAllreduce {
            gpus: 2,
            bytes: 1024,
        };
        let e = nccl_allreduce(&[case], &Protocol::quick(), &|_| false, &mut |_| Ok(()))
            .unwrap_err()
            .to_string();
        if cfg!(feature = "cuda") {
            if std::path::Path::new("/proc/driver/nvidia/version").exists() {
                return; // a GPU machine: scripts/gpu-check.sh covers it
            }
            assert!(e.contains("libcuda.so"), "{e}");
        } else {
            assert!(e.contains("--features"), "{e}");
        }
    }
}
