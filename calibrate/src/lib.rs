//! # ridgeline-calibrate
//!
//! Calibration and validation (docs/ARCHITECTURE.md "Calibration and validation"):
//!
//! - [`stats`]: robust statistics on raw timing samples — median, MAD, interquartile range,
//!   Tukey outlier labels, bootstrap intervals of the median (statrs, rand).
//! - [`fit`]: linear least squares on errors relative to the fitted time (re-weighted until
//!   it settles: a Gamma GLM, unbiased where weighting by the measured time predicts low)
//!   with non-negative coefficients, standard errors, R² and Student-t intervals (nalgebra,
//!   statrs).
//! - [`profile`]: fits a calibrated profile ([`ridgeline_model::profile::Profile`]) from
//!   micro-kernel records alone — a time model per kernel class, pass and precision
//!   ([`ridgeline_model::kernels`] explains and justifies the model form), sustained bandwidth
//!   per memory level from STREAM (L1, last-level cache and DRAM on a CPU; L2 and device
//!   memory for GPU records, split at the L2 the records carry), and GEMM/convolution
//!   ceilings per number format.
//! - [`loggp`]: LogGP per communication level from MPI ping-pong records (the Netgauge
//!   method), with the measured exchange step and reduction kernel, fitted per size band.
//! - [`validate`]: predicts measured full-workload steps with a profile, layer by layer and
//!   step by step, and reports the errors, each layer pass's measured hardware efficiency and
//!   the memory footprint against the measured peak.
//!
//! - [`dataset`]: measured GPU kernels from other machines (GEMM, convolution, vector ops),
//!   stored compact with their source, a test set of GPUs outside the fit, and per-operator
//!   labels of whole training steps, and a published set of GEMMs and convolution passes
//!   in FP32 and on tensor cores (`PublishedSet`: DeepBench's);
//!   [`neusight`] converts NeuSight's public measurements.
//! - [`transfer`]: fits the device-transferable kernel model on several GPUs' kernels (each
//!   product and convolution class under the power cap that fits it best; `conv-gemm` on
//!   the convolutions cuDNN ran as implicit GEMMs), leaves each GPU
//!   out to validate it, and predicts kernels and labels of GPUs outside the fit; turns
//!   ridgeline's own GEMM and convolution records into the model's kernels at their
//!   precision's peak (and the published set's, `published_points`), and builds and judges
//!   the scaled classes from the GPU-timed and published kernels, leaving a chip out, GPUs
//!   of one chip together (`scaled_classes`: the tensor-core correction per class and
//!   tensor-core format, with its own power cap; `chip`).
//! - [`mlperf`]: reads MLPerf result logs (`:::MLLOG` lines) and the submitters' system
//!   descriptions as run records (benchmark, system, accelerators, global batch, epochs,
//!   initialisation and staging, throughput, time to train) for validation.
//! - [`torch_trace`]: reads PyTorch profiler traces and maps their ops onto a workload's
//!   layers: layer-pass and step records for validation, and the layers' convolutions, ops
//!   and GEMMs as micro-kernel records for calibration, each naming the trace.
//! - [`nsys`]: reads Nsight Systems SQLite exports (rusqlite): kernels under the NVTX ranges
//!   around their launches, and layer and step records where the ranges name a workload's
//!   layers and steps.
//! - [`comm`]: predicts measured MPI allreduce with a profile's LogGP levels and reports
//!   the error per size, per algorithm and overall (geometric mean).
//!
//! It runs no kernels and renders nothing.

pub mod comm;
pub mod cpu_transfer;
pub mod dataset;
pub mod error;
pub mod fit;
pub mod loggp;
pub mod mlperf;
pub mod neusight;
pub mod nsys;
pub mod profile;
pub mod records;
pub mod stats;
pub mod torch_trace;
pub mod transfer;
pub mod validate;

pub use error::{Error, Result};
