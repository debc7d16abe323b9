//! # ridgeline-model
//!
//! ridgeline's analytical model of deep-learning training on HPC systems.
//!
//! Data flow: a workload is a [`graph::Graph`] (a layer DAG with concrete per-sample
//! shapes), either built in ([`workloads`]: CosmoFlow, DeepCAM, ResNet-50, the transformers
//! BERT-Large, GPT-2 Large, GPT-3 XL and 2.7B and OPT-1.3B from their Hugging Face
//! configurations ([`workloads::transformer`], which also reads a user's `config.json`), and a
//! graph network, scalable in input size or sequence length and width) or read from a TOML
//! layer list ([`mod@file`]) or an ONNX model ([`onnx`]: CNNs and transformers). [`cost::cost`] turns the graph,
//! a batch size and a [`precision::Precision`] into per-layer FLOPs (forward, backward data
//! and weight gradients), HBM bytes (the lower bound of \[004\] §V-A) and activation bytes.
//! [`memory::Footprint`] gives the per-device memory breakdown versus batch size and the
//! largest batch that fits; [`roofline::roofline`] places each layer on a device's roofline.
//! [`transfer`] times a GPU's kernels from its device file alone with a model fitted on
//! other GPUs' measured kernels ([`transfer::Model::builtin`]): by default [`predict`] times
//! GPU layers with it, never below the ideal roofline bound.
//! Systems ([`system::System`]: device, node, cluster) come from sourced TOML files in the
//! [`catalog`] or from the user, validated once on the way in; `local` is described from the
//! facts of the machine it runs on ([`system::HostFacts`], read by `ridgeline-measure`), its
//! peaks from cores, vector units and clock, with the reasoning in
//! [`system::System::assumptions`]. Quantities crossing the crate
//! boundary are typed ([`units`]). [`mod@reference`] holds the reference implementations' layer
//! tables the built-in workloads match, and [`published`] sets the model's counts beside
//! them and beside the per-sample figures of \[004\] Table II.
//!
//! Every prediction runs under a software [`stack`] (sourced TOML, `data/catalog/stacks/`): how the
//! framework issues kernels from the host, the device's gap between kernels, which layers
//! it fuses and what FP32 training runs matrix ops in; [`predict::StepModel::with_stack`]
//! applies it and runs the host and the device as two timelines.
//!
//! On a cluster, [`links`] prices bytes on every level of the hierarchy (LogGP),
//! [`collective`] times the gradient allreduce, [`dataset`] holds data sets and convergence
//! curves, and [`predict`] combines them into step, epoch and time-to-solution predictions
//! ([`predict::StepModel`] -> [`predict::Plan`] -> [`predict::Plan::evaluate`], split by what
//! each depends on so that [`sweep`] evaluates millions of configurations per second);
//! [`parallel`] splits a transformer over tensor, pipeline and data parallelism; [`sim`]
//! simulates a step event by event on every rank (gradient buckets beside backward, the
//! input read ahead, stragglers) and writes its timeline ([`predict::simulate`]);
//! [`scale`] builds strong, weak, ensemble and problem-size series, and [`procurement`]
//! compares candidate systems (offers with price and power) on a weighted workload mix. This crate does no I/O
//! beyond parsing text handed to it, and never prints.
//!
//! ```
//! use ridgeline_model::{catalog, cost, precision::Precision, roofline, workloads};
//!
//! let graph = workloads::build("resnet50", &workloads::BuildOptions::default())?;
//! let step = cost::cost(&graph, 256, Precision::AmpFp16);
//! assert_eq!(step.params, 25_557_032);
//!
//! let system = catalog::system("a100-sxm4-40gb")?;
//! let r = roofline::roofline(&graph, &step, &system, roofline::Efficiency::IDEAL)?;
//! assert!(r.step_time.value() > 0.0 && r.fraction_of_peak <= 1.0);
//! # Ok::<(), ridgeline_model::Error>(())
//! ```

pub mod catalog;
pub mod chakra;
pub mod collective;
pub mod cost;
pub mod dataset;
pub mod error;
pub mod file;
pub mod graph;
pub mod kernels;
pub mod links;
pub mod memory;
pub mod onnx;
pub mod parallel;
pub mod precision;
pub mod predict;
pub mod procurement;
pub mod profile;
pub mod published;
pub mod reference;
pub mod roofline;
pub mod scale;
pub mod sim;
pub mod stack;
pub mod sweep;
pub mod system;
pub mod transfer;
pub mod units;
pub mod workloads;

pub use error::{Error, Result};
