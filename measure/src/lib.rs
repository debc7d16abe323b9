//! # ridgeline-measure
//!
//! Measurement of the same work the model predicts, on real hardware. This crate will own
//! (DESIGN.md "Measurement"): a `Backend` trait with a CPU backend (the default) and a CUDA
//! backend behind a cargo feature; micro-kernels (GEMM per precision and shape, N-d
//! convolution forward / backward-data / backward-filter, STREAM memory bandwidth,
//! host-device copies); the full-workload executor that runs a `ridgeline-model` layer graph
//! forward and backward with real kernels and times every layer; MPI communication
//! benchmarks; the run protocol (warm-up, repeated samples, timer resolution); and raw
//! measurement records written as JSON Lines with a `schema_version`.
//!
//! It writes raw samples only: statistics and fitting belong to `ridgeline-calibrate`.
//! Nothing is implemented yet; the first backend arrives with the CPU measurement work.
