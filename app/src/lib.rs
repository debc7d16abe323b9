//! # ridgeline-app
//!
//! ridgeline's use cases, between the command line and the library crates: what spans
//! crates lives here, with no command-line parsing and no printing, so that every use case
//! can be tested in process. The map of the crates is `docs/ARCHITECTURE.md`.
//!
//! - [`inputs`]: names resolved to workloads, systems, mixes and candidates, and one
//!   [`inputs::Job`] (a workload with its data set and scenario) from the command line or a
//!   mix entry, through one resolver.
//! - [`catalog`]: the shipped systems and devices as commands list them.
//! - [`cases`]: what each measurement command measures, from the shapes a user names.
//! - [`campaign`]: the runner of measurement campaigns (resume, passes, deadline), the
//!   micro-kernel suite, and an [`campaign::Observer`] for progress.
//! - [`validation`]: validating measured steps against a profile, and the self-check
//!   pipeline.
//! - [`import`]: public measurements converted for ridgeline: NeuSight's GPU kernels as a
//!   kernel set, MLPerf result logs as run records.
//! - [`runs`]: imported runs (MLPerf) against `predict`: throughput, epoch time and time to
//!   train.
//! - [`simcheck`]: the step simulator against a traced data-parallel step (PyTorch DDP).
//! - [`columns`] and [`tables`]: table columns written from one definition in a human and a
//!   raw style, and the column sets that commands print and reports carry.
//! - [`figures`]: the plots, as [`ridgeline_reports::chart::Figure`] models.
//! - [`report`]: the procurement, workload and validation reports' content, and
//!   [`report::write_to`], which renders one into a directory.
//! - [`sweep`]: a sweep's rows, columns and files.
//! - [`atomic`]: outputs written whole or not at all.
//!
//! Errors are [`anyhow::Error`]s carrying the library crates' typed errors with context
//! (which file, which field, which flag): this layer reports to a user, it does not recover.

pub mod atomic;
pub mod calibration;
pub mod campaign;
pub mod cases;
pub mod catalog;
pub mod columns;
pub mod cpu_model;
pub mod figures;
pub mod import;
pub mod inputs;
pub mod predict;
pub mod report;
pub mod runs;
pub mod self_check;
pub mod simcheck;
pub mod slurm;
pub mod sweep;
pub mod tables;
pub mod validation;
pub mod views;
