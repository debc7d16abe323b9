//! # ridgeline-measure
//!
//! Measurement of the same work the model predicts, on real hardware
//! (docs/ARCHITECTURE.md "Measurement"):
//!
//! - [`Backend`]: the trait every device implements. [`CpuBackend`] is real and the default:
//!   GEMM through the `gemm` crate (f32 and f64), N-d convolution forward / backward-data /
//!   backward-filter lowered to GEMM (direct for depthwise), STREAM, every op of the layer-graph
//!   IR, on a rayon pool of a chosen number of threads. [`CudaBackend`] (feature `cuda`,
//!   cudarc with run-time loading) runs GEMM through cuBLAS (fp64, fp32, tf32, fp16 and bf16
//!   with fp32 accumulation), convolution through cuDNN (fp32, tf32, and fp16 / bf16 with
//!   fp32 accumulation; algorithm by its find API),
//!   host-device copies (pinned and pageable), STREAM and the element-wise ops through
//!   NVRTC (every op; pooling and batch norm through cuDNN), timed with CUDA events, and
//!   [`nccl_allreduce`] across the GPUs of a machine, and the full-workload executor in
//!   fp32, tf32 and mixed precision (16-bit activations, FP32 master weights, dynamic loss
//!   scaling for fp16; cuDNN, cuBLAS and NVRTC kernels, per-layer CUDA events); its kernel
//!   sources are compiled by NVRTC and ptxas in the tests, and it has run on an NVIDIA H200
//!   and an H100 (`cuda` module docs say what ran and what did not). The CPU executor trains in fp32.
//!   Without a driver, a GPU or a library it says which; without the feature, a disabled twin
//!   says how to build it.
//! - The full-workload executor ([`Backend::workload`]): runs any `ridgeline-model` layer graph
//!   forward and backward with real kernels on synthetic data, then an SGD update, timing every
//!   layer (names as in the model, so results join 1:1) and tracking peak memory; the CPU and
//!   GPU executors allocate and free buffers on one schedule (what each backward pass reads,
//!   freed after its last reader).
//! - [`protocol`]: warm-up, repeated samples until a minimum count and time, timer-resolution
//!   check, and the cache state each run starts in ([`protocol::CacheState`]: by default as
//!   inside a training step, the cold operands rotated through copies); every default a
//!   named constant.
//! - [`host`]: what this machine reports about itself (CPU, affinity, cgroup limits, caches,
//!   memory, a measured clock) for the `local` system.
//! - [`Case`]: one measurement, with its record id; [`Case::run`] turns a backend's raw timings
//!   into [`Record`]s with FLOPs and bytes counted by the model.
//! - [`suite`]: the standard micro-kernel campaign calibration needs, planned to a time budget.
//! - [`record`]: JSON Lines records, appended and flushed one at a time, resumable.
//! - [`comm`]: communication benchmarks under MPI (ping-pong by the Netgauge method,
//!   exchanges, allreduce algorithms, all-to-all) and data-parallel training on the CPU
//!   executor ([`comm::ddp`]: DDP's gradient buckets allreduced on a communication thread
//!   beside backward), behind the `mpi` cargo feature; without it, a disabled twin that
//!   says how to build with it.
//!
//! It writes raw samples only: statistics and fitting belong to `ridgeline-calibrate`.
//!
//! # Record schema (version 2)
//!
//! One JSON object per line. In code a record's `kind` and `shape` are one enum,
//! [`Measured`] (each kind's shape a struct of [`record`]), and `extra` is [`Extra`]; a
//! line whose shape lacks a field its kind needs, or holds one of the wrong type, is refused
//! with the field's path. Version 2 writes what version 1 wrote, with shape fields in each
//! kind's order and empty `extra` fields left out; version 1 files are read as they are, and
//! a record's id is the same in both (made of the shape with its keys sorted), so a version 1
//! campaign resumes.
//!
//! | field | meaning |
//! |---|---|
//! | `schema_version` | 2 (1 is read) |
//! | `id` | unique key of the measurement (kind, shape, precision, threads, device); `--resume` skips ids already recorded |
//! | `kind` | ([`RecordKind`]) `gemm`, `conv`, `stream`, `op`, `workload-layer`, `workload-step`, `copy` (host-device, GPU only); under MPI `comm-prtt`, `comm-exchange`, `comm-reduce`, `comm-allreduce`, `comm-alltoall` |
//! | `shape` | an object: GEMM `m`, `n`, `k`; conv `source`, `n`, `c_in`, `c_out`, `input`, `kernel`, `stride`, `padding` (`[before, after]` per dimension), `dilation`, `groups`, `bias`, `pass`, and `layout` = `channels-last` where it is (GPU; channels-first records have none); STREAM `kernel`, `elements`, `array_bytes`; copy `direction` (`h2d`, `d2h`), `memory` (`pinned`, `pageable`), `bytes`; op `op` (the layer as a workload file writes it), `input`, `batch`, `pass`; workload `workload`, `input`, `batch`, `ranks` (data-parallel runs), and for layers `layer`, `op`, `pass`; communication `bytes` and prtt `messages`, `delayed`, `pair`, exchange `pair`, reduce and all-to-all `ranks`, allreduce `algorithm` and `ranks` (MPI) or `gpus` (NCCL in one node) |
//! | `precision` | ([`RecordPrecision`]) `fp32`, `fp64`; on a GPU also `tf32`, `fp16`, `bf16`; workload records the training precision, `fp32` (on a GPU also `tf32`, `amp-fp16`, `amp-bf16`); `bytes` for untyped communication |
//! | `device` | ([`Device`]) `cpu`, `cuda:N`; `cuda` for NCCL across a node's GPUs; `mpi` for communication |
//! | `threads` | threads the kernel ran on |
//! | `samples_s` | every raw sample: seconds of one run (of one training step for workloads) |
//! | `flops` | FLOPs of one run, as the model counts them |
//! | `bytes` | bytes of one run, as the model counts them (a lower bound on memory traffic) |
//! | `env` | `host`, `cpu_model`, `cores`, `simd`, `ridgeline_version`, `git_commit`, `timestamp`; on the CPU backend `blas` (the library its products ran on: the system's OpenBLAS by its own description, or the `gemm` crate); ridgeline's records of PyTorch's kernels `framework`; on a GPU `gpu` (`ordinal`, `name`, `compute_capability`, `memory_bytes`, `sm_clock_mhz`, `memory_clock_mhz`, `driver_version`, `libraries`) |
//! | `extra` | communication: `ranks`, `ranks_per_node`, `nodes`, `hosts` (every rank's), `mpi_library`, `mpi_settings` (transport and collective settings), ping-pong `same_host`, `pair_hosts`, `delay_s`, allreduce `algorithm`, NCCL `library`, `nccl_version`, `nccl_settings`; conv on a GPU: `cudnn_algorithm`, `cudnn_find_time_s`, `cudnn_workspace_bytes`, `cudnn_math`, `cudnn_candidates`; workload steps: `peak_bytes` (executor accounting), `peak_rss_bytes` (the process, from `VmHWM`), `update_s` (SGD update per step), under dynamic loss scaling (amp-fp16) `loss_scale` (per step) and `skipped_updates`; data-parallel steps (`comm ddp`, imported DDP traces): `comm_s`, `exposed_comm_s` (per step), `bucket_s` (each step's allreduces), `other_s` (time outside the layers), and from `comm ddp` `overlap`, `bucket_bytes`, `first_bucket_bytes` |

mod backend;
mod campaign;
mod cases;
pub mod comm;
mod cpu;
mod cuda;
mod error;
pub mod host;
pub mod kinds;
pub mod protocol;
pub mod record;
mod schedule;
pub mod suite;

pub use backend::{
    Backend, ConvCase, ConvPass, CopyCase, CopyDirection, Format, GemmCase, HostMemory, LayerTimes,
    Layout, OpCase, Pass, PassNotes, StreamKernel, WorkloadRun,
};
pub use campaign::{Case, conv_case, conv_cases, open_backend};
pub use cpu::CpuBackend;
pub use cuda::{CudaBackend, NcclAllreduce, nccl_allreduce};
pub use error::{Error, Result};
pub use protocol::Protocol;
pub use record::{
    Device, Env, Extra, GpuEnv, Measured, Record, RecordKind, RecordPrecision, RecordWriter,
    Resumed, SCHEMA_VERSION, SlurmEnv, StepRun, read_records, read_resumable,
};
