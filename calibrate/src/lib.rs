//! # ridgeline-calibrate
//!
//! Calibration and validation. This crate will own (DESIGN.md "Calibration and
//! validation"): robust statistics on raw samples from `ridgeline-measure` (median, spread,
//! Tukey outlier labels, bootstrap intervals); fits of attained efficiency per op class and
//! precision versus problem shape, of sustained bandwidths and of LogGP parameters (least
//! squares with nalgebra, uncertainty with statrs); the calibrated profile that overlays a
//! datasheet system; and validation that compares predictions with measurements of full
//! workloads, per layer and per step.
//!
//! It is pure computation: it runs no kernels and renders nothing. Nothing is implemented
//! yet; it arrives with the calibration work, after the CPU measurement backend.
