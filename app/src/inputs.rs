//! Resolving names to workloads, systems, mixes and candidates (built-in and catalog names,
//! `local`, or files) and loading a [`Job`]: one workload with everything a prediction on
//! it needs besides the system. The command line and mix files go through the same
//! resolver ([`Job::load`] with a [`WorkloadSource`]); only their messages differ, each
//! naming what to fix where the user wrote it. This is the only place that reads input files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ridgeline_model::dataset::{self, Dataset};
use ridgeline_model::graph::Graph;
use ridgeline_model::precision::{GradientPrecision, Precision};
use ridgeline_model::predict::{
    DataLocation, Epochs, Inputs, KernelModel, Overlap, Quality, Scenario, StepModel,
};
use ridgeline_model::procurement::{self, Mix, Offer};
use ridgeline_model::profile::Profile;
use ridgeline_model::roofline::Efficiency;
use ridgeline_model::stack::{self, Stack};
use ridgeline_model::system::Sourced;
use ridgeline_model::workloads::{self, BuildOptions};
use ridgeline_model::{Error, catalog, file, system::System};

use ridgeline_model::collective::Algorithm;
use ridgeline_model::memory::Optimizer;

use crate::campaign::Observer;

/// What names a workload: a built-in name or the path of a workload file, with the scaling
/// options of the command line.
#[derive(Debug, Clone, Default)]
pub struct WorkloadSpec {
    /// A built-in workload name or the path of a workload TOML file.
    pub name: String,
    /// Input spatial size: one value for every dimension or one per dimension.
    pub input_size: Option<Vec<usize>>,
    /// Multiplier on inner channel counts (built-in workloads only).
    pub width: Option<f64>,
}

/// What a prediction assumes besides workload, system, nodes and batch, as the command
/// line gives it.
#[derive(Debug, Clone)]
pub struct ScenarioSpec {
    /// Allreduce algorithm.
    pub collective: Algorithm,
    /// Overlap of compute, input and allreduce.
    pub overlap: Overlap,
    /// Where each node's share of the data set lives.
    pub data_location: DataLocation,
    /// Epochs instead of the convergence curve.
    pub epochs: Option<f64>,
    /// A convergence curve file.
    pub convergence: Option<String>,
    /// A data set file.
    pub dataset: Option<String>,
    /// Training samples per epoch instead of the whole data set.
    pub train_samples: Option<u64>,
    /// Evaluation samples per epoch instead of the whole evaluation set.
    pub eval_samples: Option<u64>,
    /// The format gradients travel in.
    pub gradient_precision: GradientPrecision,
    /// What times a GPU's layers without a calibrated profile.
    pub kernel_model: KernelModel,
    /// Attained fraction of peak FLOP/s.
    pub compute_efficiency: f64,
    /// Attained fraction of memory bandwidth.
    pub memory_efficiency: f64,
    /// CPU preprocessing throughput per node, samples per second.
    pub preprocess_rate: Option<f64>,
    /// Raw / stored size of the data set.
    pub compression: f64,
    /// Achieved quality, target quality and exponent for Valid FLOPS.
    pub quality: Option<Quality>,
    /// Optimizer, for the memory footprint.
    pub optimizer: Optimizer,
    /// The software stack: a built-in stack's name or a stack file (`None`: the default).
    pub stack: Option<String>,
}

impl Default for ScenarioSpec {
    /// The command line's defaults: the best collective, full overlap, the data where it
    /// fits, the shipped convergence data, FP32 gradients, the datasheet's rates, no
    /// compression, SGD with momentum.
    fn default() -> Self {
        ScenarioSpec {
            collective: Algorithm::Best,
            overlap: Overlap::Full,
            data_location: DataLocation::Auto,
            epochs: None,
            convergence: None,
            dataset: None,
            train_samples: None,
            eval_samples: None,
            gradient_precision: GradientPrecision::Fp32,
            kernel_model: KernelModel::Transfer,
            compute_efficiency: 1.0,
            memory_efficiency: 1.0,
            preprocess_rate: None,
            compression: 1.0,
            quality: None,
            optimizer: Optimizer::SgdMomentum,
            stack: None,
        }
    }
}

/// A software stack: a built-in stack's name or a stack file; the default stack
/// ([`catalog::DEFAULT_STACK`]) for `None`.
pub fn stack(arg: Option<&str>) -> Result<Stack> {
    let Some(arg) = arg else {
        return Ok(catalog::default_stack().clone());
    };
    if is_file(arg) {
        return Ok(stack::parse(&read(arg, "stack")?, arg)?);
    }
    catalog::stack(arg).map_err(|e| match e {
        Error::UnknownName { .. } => anyhow::anyhow!("{e} (or give the path of a stack TOML file)"),
        other => other.into(),
    })
}

/// Whether a command-line argument names a file rather than a catalog entry.
fn is_file(arg: &str) -> bool {
    arg.ends_with(".toml") || arg.contains('/') || Path::new(arg).is_file()
}

fn read(path: &str, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {what} file `{path}`"))
}

/// The workload a command names, built or parsed with its scaling options.
pub fn workload(args: &WorkloadSpec) -> Result<Graph> {
    let name = args.name.as_str();
    if workloads::find(name).is_ok() || !is_file(name) {
        let options = BuildOptions {
            input_size: args.input_size.clone(),
            width: args.width.unwrap_or(1.0),
        };
        return workloads::build(name, &options).map_err(|e| match e {
            Error::UnknownName { .. } => {
                anyhow::anyhow!("{e} (or give the path of a workload TOML file)")
            }
            other => other.into(),
        });
    }
    if name.ends_with(".json") {
        return config_json(name, args);
    }
    if name.ends_with(".onnx") {
        if args.input_size.is_some() || args.width.is_some() {
            bail!("--input-size and --width do not apply to an ONNX model: its shapes are its own");
        }
        let bytes =
            std::fs::read(name).with_context(|| format!("cannot read ONNX model `{name}`"))?;
        let stem = Path::new(name)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("model");
        return Ok(ridgeline_model::onnx::import(&bytes, name, stem)?);
    }
    if args.width.is_some() {
        bail!("--width applies to built-in workloads only; edit the channel counts in `{name}`");
    }
    let text = read(name, "workload")?;
    Ok(file::parse_workload(
        &text,
        name,
        args.input_size.as_deref(),
    )?)
}

/// A transformer a command names, for splitting it over devices
/// ([`ridgeline_model::parallel`]): its name, configuration and sequence length (a built-in
/// transformer's reference length, or the model's positions, unless `--seq-len`).
pub fn transformer(args: &WorkloadSpec) -> Result<(String, workloads::transformer::Config, usize)> {
    let name = args.name.as_str();
    let config = if name.ends_with(".json") {
        workloads::transformer::Config::from_json(&read(name, "model configuration")?, name)?
    } else if is_file(name) {
        // A transformer's configuration in TOML (as `data/catalog/transformers/`), or a
        // workload file of layers, which no split applies to.
        let text = read(name, "workload")?;
        let is_config = text
            .parse::<toml::Table>()
            .is_ok_and(|t| t.contains_key("model_type"));
        if !is_config {
            bail!(
                "{name}: a workload file of layers cannot be split: tensor and pipeline \
                 parallelism split transformers built from their configuration; give a \
                 built-in transformer, a Hugging Face config.json, or a configuration TOML \
                 with `model_type` (as data/catalog/transformers/), or drop \
                 --tensor-parallel/--pipeline-parallel"
            );
        }
        workloads::transformer::Config::from_toml(&text, name)?
    } else {
        let b = workloads::find(name)?;
        b.transformer_config().with_context(|| {
            format!(
                "`{name}` is not a transformer: tensor and pipeline parallelism split the \
                 built-in transformers (bert-large, gpt2-large, gpt3-xl, gpt3-2.7b, gpt3-175b, opt-1.3b) \
                 or a Hugging Face config.json"
            )
        })?
    };
    if args.width.is_some_and(|w| w != 1.0) {
        bail!("--width does not apply to a split model; give a config.json of the size");
    }
    let reference = workloads::find(name).map_or(config.max_position_embeddings, |b| b.input[0]);
    let seq = match args.input_size.as_deref() {
        None => reference,
        Some([s]) if *s > 0 && *s <= config.max_position_embeddings => *s,
        Some(s) => bail!(
            "--seq-len {s:?}: `{name}` takes one sequence length from 1 to its {} positions",
            config.max_position_embeddings
        ),
    };
    let stem = if name.ends_with(".json") || is_file(name) {
        Path::new(name)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or(name)
    } else {
        name
    };
    Ok((stem.to_owned(), config, seq))
}

/// A transformer from a Hugging Face `config.json`, for sequences of `--seq-len` tokens
/// (the model's positions by default).
fn config_json(name: &str, args: &WorkloadSpec) -> Result<Graph> {
    let text = read(name, "model configuration")?;
    let config = workloads::transformer::Config::from_json(&text, name)?;
    let seq = match args.input_size.as_deref() {
        None => config.max_position_embeddings,
        Some([s]) if *s > 0 && *s <= config.max_position_embeddings => *s,
        Some(s) => bail!(
            "--seq-len {s:?}: `{name}` takes one sequence length from 1 to its {} positions",
            config.max_position_embeddings
        ),
    };
    let width = args.width.unwrap_or(1.0);
    if !(width > 0.0 && width <= workloads::MAX_WIDTH) {
        bail!(
            "--width {width}: the width multiplier must be greater than 0 and at most {}",
            workloads::MAX_WIDTH
        );
    }
    let stem = Path::new(name)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("model");
    workloads::transformer::build(stem, &config, seq, width)
        .map_err(|e| anyhow::anyhow!("{name}: layer `{}`: {}", e.layer, e.message))
}

/// The system a command names: a catalog system or device, `local`, a system file, or a
/// calibrated profile (which names its datasheet system and overlays it).
///
/// A user's file of a GPU that lacks a figure the transferred kernel model needs gets a
/// warning on stderr naming the file and the fields, every time it is read: its layers are
/// then timed at the ideal bound, which runs fast ([`untransferable`]).
pub fn system(arg: &str) -> Result<System> {
    let system = if is_file(arg) {
        let text = read(arg, "system")?;
        if is_profile(&text) {
            let profile = Profile::parse(&text, arg)?;
            let base = datasheet_system(&profile.system).with_context(|| {
                format!("{arg}: field `system`: the profile's datasheet system")
            })?;
            profile.overlay(base, arg)?
        } else {
            catalog::system_from_file(&text, arg)?
        }
    } else {
        return datasheet_system(arg);
    };
    if let Some(w) = untransferable(&system, arg) {
        eprintln!("warning: {w}");
    }
    Ok(system)
}

/// Why the transferred kernel model cannot time the GPU of `system` (read from `file`), as
/// a warning: the fields the device file lacks; `None` for a CPU or a complete file.
pub fn untransferable(system: &System, file: &str) -> Option<String> {
    use ridgeline_model::system::DeviceKind;
    use ridgeline_model::transfer::DeviceSpec;
    if system.device.kind != DeviceKind::Gpu {
        return None;
    }
    let missing = DeviceSpec::missing(&system.device);
    (!missing.is_empty()).then(|| {
        format!(
            "{file}: the device lacks {}, which the transferred kernel model needs: every \
             layer is timed at the ideal bound (peak and bandwidth), faster than the GPU runs; \
             add {} from the datasheet",
            missing
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", "),
            if missing.len() == 1 { "it" } else { "them" }
        )
    })
}

/// Whether a TOML text is a calibrated profile rather than a system or device file.
fn is_profile(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("provenance") && t.contains_key("schema_version"))
}

/// A catalog system or device, `local`, or a system file.
fn datasheet_system(arg: &str) -> Result<System> {
    if arg == catalog::LOCAL_NAME {
        return Ok(catalog::local(&ridgeline_measure::host::facts()?)?);
    }
    if is_file(arg) {
        let text = read(arg, "system")?;
        return Ok(catalog::system_from_file(&text, arg)?);
    }
    catalog::system(arg).map_err(|e| match e {
        Error::UnknownName { .. } => {
            anyhow::anyhow!("{e} (or give the path of a system TOML file)")
        }
        other => other.into(),
    })
}

/// Where a workload and its data come from: the command line or an entry of a mix file.
/// Only the messages differ: each names what to fix where the user wrote it.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// Command-line flags (`--dataset`, `--epochs`, `--convergence`).
    Flags,
    /// Entry `index` of mix file `file`, its relative paths from `dir`.
    Mix {
        /// The mix file, as named.
        file: &'a str,
        /// The entry's index.
        index: usize,
        /// The directory relative paths start from.
        dir: Option<&'a Path>,
    },
}

impl Origin<'_> {
    /// `path` as the user means it: relative to a mix file's directory.
    fn path(&self, path: &str) -> String {
        match self {
            Origin::Flags => path.to_owned(),
            Origin::Mix { dir, .. } => relative(*dir, path),
        }
    }

    fn field(&self, f: &str) -> String {
        match self {
            Origin::Flags => String::new(),
            Origin::Mix { file, index, .. } => format!("{file}: field `workload[{index}].{f}`: "),
        }
    }
}

/// A workload to load: what names it and its data, and where the names come from.
#[derive(Debug, Clone)]
pub struct WorkloadSource<'a> {
    /// The workload.
    pub workload: WorkloadSpec,
    /// A data set file replacing a built-in's (required for workload files).
    pub dataset: Option<String>,
    /// A convergence file (epochs versus global batch).
    pub convergence: Option<String>,
    /// Epochs instead of the convergence curve.
    pub epochs: Option<f64>,
    /// Where these names come from.
    pub origin: Origin<'a>,
}

/// A workload loaded with everything a prediction on it needs besides the system: its
/// graph, step model, data set and scenario. Commands with one workload and every entry of
/// a mix load the same `Job`.
#[derive(Debug, Clone)]
pub struct Job {
    /// The workload's layer graph.
    pub graph: Graph,
    /// Its step model at the job's precision.
    pub model: StepModel,
    /// The data set it trains on.
    pub dataset: Dataset,
    /// The scenario (nodes, epochs or convergence, and the rest).
    pub scenario: Scenario,
    /// Input elements of the workload the data set's sample size refers to.
    pub reference_input_elements: u64,
    /// The software stack its step model was built under.
    pub stack: Stack,
    /// What packing the data set's sequences changed, for the prediction's assumptions.
    pub packing: Option<String>,
}

impl Job {
    /// Loads the workload `source` names, its data set and convergence, at `precision`
    /// with `optimizer` under `stack`, on `nodes` nodes with the scenario's defaults.
    pub fn load(
        source: &WorkloadSource<'_>,
        precision: Precision,
        optimizer: Optimizer,
        nodes: u32,
        stack: &Stack,
    ) -> Result<Job> {
        stack.check_precision(precision)?;
        let name = source.workload.name.as_str();
        let builtin = workloads::find(name).ok();
        let graph = match (source.origin, builtin) {
            (Origin::Flags, _) => workload(&source.workload)?,
            (Origin::Mix { .. }, Some(b)) => workloads::build(b.name, &BuildOptions::default())?,
            (origin @ Origin::Mix { .. }, None) => {
                let path = origin.path(name);
                if !Path::new(&path).is_file() {
                    bail!(
                        "{}`{name}` is neither a built-in workload ({}) nor a workload file (no \
                         file `{path}`)",
                        origin.field("name"),
                        workloads::names().join(", ")
                    );
                }
                file::parse_workload(&read(&path, "workload")?, &path, None)?
            }
        };
        let user_data = source
            .dataset
            .as_deref()
            .map(|p| {
                let path = source.origin.path(p);
                Ok::<_, anyhow::Error>(dataset::parse_workload_data(
                    &read(&path, "data set")?,
                    &path,
                )?)
            })
            .transpose()?;
        let shipped = match builtin {
            Some(b) => catalog::workload_data(b.name)?,
            None => None,
        };
        let data = user_data.as_ref().or(shipped.as_ref());
        let dataset = match (source.origin, data) {
            (Origin::Flags, Some(d)) => {
                d.dataset.clone().with_context(|| match &source.dataset {
                    Some(path) => format!("data set file `{path}` has no [dataset] table"),
                    None => format!("no data set for `{name}`"),
                })?
            }
            (Origin::Flags, None) => bail!(
                "workload `{name}` has no data set: pass --dataset FILE (format: docs/guide/workloads.md, 'Data \
                 sets and convergence')"
            ),
            (origin @ Origin::Mix { .. }, d) => {
                d.and_then(|d| d.dataset.clone()).with_context(|| {
                    format!(
                        "{}`{name}` has no data set; give a data set file",
                        origin.field("data")
                    )
                })?
            }
        };
        let epochs = match (source.epochs, &source.convergence) {
            (Some(e), _) if !(e > 0.0 && e <= dataset::MAX_EPOCHS) => match source.origin {
                Origin::Flags => bail!(
                    "--epochs {e:?}: must be a positive number, at most {}",
                    dataset::MAX_EPOCHS
                ),
                origin => bail!(
                    "{}{e:?}: must be a positive number, at most {}",
                    origin.field("epochs"),
                    dataset::MAX_EPOCHS
                ),
            },
            (Some(e), _) => Epochs::Fixed(e),
            (None, Some(p)) => {
                let path = source.origin.path(p);
                let data = dataset::parse_workload_data(&read(&path, "convergence")?, &path)?;
                Epochs::Curve(data.convergence.with_context(|| {
                    format!("convergence file `{path}` has no [[convergence]] points")
                })?)
            }
            // The data file's curve, else the built-in's.
            (None, None) => match (
                [&user_data, &shipped]
                    .into_iter()
                    .find_map(|d| d.as_ref().and_then(|d| d.convergence.clone())),
                source.origin,
            ) {
                (Some(c), _) => Epochs::Curve(c),
                (None, Origin::Flags) => bail!(
                    "no convergence data for `{name}` in ridgeline's sources: pass --epochs E or \
                     --convergence FILE"
                ),
                (None, origin) => bail!(
                    "{}`{name}` has no convergence curve in ridgeline's sources; give epochs = \
                     {{ value = E, source = \"...\" }} or a data file with [[convergence]] points",
                    origin.field("epochs")
                ),
            },
        };
        // A stack that packs sequences computes the tokens a transformer's sequence holds
        // on average, not the padded length (unless the user gave a length).
        let mut packing = None;
        let graph = match (&dataset.tokens_per_sequence, builtin) {
            (Some(t), Some(b))
                if stack.packing.value
                    && b.transformer_config().is_some()
                    && source.workload.input_size.is_none()
                    && b.input
                        .last()
                        .is_some_and(|&full| (t.value as usize) < full) =>
            {
                let full = b.input.last().copied().unwrap_or_default();
                packing = Some(format!(
                    "packing (stack `{}`): each sequence computes its data set's mean {} tokens \
                     ({}), not the padded {full}; attention is timed at that length, as the \
                     packed sequences' own masks run it",
                    stack.name, t.value, t.source
                ));
                workloads::build(
                    b.name,
                    &BuildOptions {
                        input_size: Some(vec![t.value as usize]),
                        width: source.workload.width.unwrap_or(1.0),
                    },
                )?
            }
            _ => graph,
        };
        let reference_input_elements = match builtin {
            Some(b) if user_data.is_none() => b.input.iter().map(|&d| d as u64).product(),
            _ => graph.input_shape().elements(),
        };
        let model = StepModel::with_stack(&graph, precision, optimizer, stack);
        Ok(Job {
            graph,
            model,
            packing,
            dataset,
            scenario: Scenario::new(nodes, epochs),
            reference_input_elements,
            stack: stack.clone(),
        })
    }

    /// Loads the workload and the scenario the command line gives.
    pub fn from_flags(
        workload: &WorkloadSpec,
        s: &ScenarioSpec,
        precision: Precision,
        nodes: u32,
    ) -> Result<Job> {
        let source = WorkloadSource {
            workload: workload.clone(),
            dataset: s.dataset.clone(),
            convergence: s.convergence.clone(),
            epochs: s.epochs,
            origin: Origin::Flags,
        };
        let stack = stack(s.stack.as_deref())?;
        let mut job = Job::load(&source, precision, s.optimizer, nodes, &stack)?;
        if let Some(n) = s.train_samples {
            job.dataset.train_samples = Sourced {
                value: n,
                source: "--train-samples".into(),
            };
        }
        if let Some(n) = s.eval_samples {
            job.dataset.eval_samples = Sourced {
                value: n,
                source: "--eval-samples".into(),
            };
        }
        job.scenario = Scenario {
            collective: s.collective,
            overlap: s.overlap,
            location: s.data_location,
            gradient_bytes: s.gradient_precision.bytes(),
            efficiency: Efficiency::new(s.compute_efficiency, s.memory_efficiency)?,
            kernel_model: s.kernel_model,
            preprocess_rate: s.preprocess_rate,
            compression: s.compression,
            quality: s.quality,
            ..job.scenario
        };
        Ok(job)
    }

    /// The borrowed view predictions on `system` take.
    pub fn inputs<'a>(&'a self, system: &'a System) -> Inputs<'a> {
        Inputs {
            model: &self.model,
            system,
            dataset: &self.dataset,
            reference_input_elements: self.reference_input_elements,
        }
    }
}

/// A workload mix: a shipped name or a mix file, with the directory its relative paths
/// start from.
pub fn mix(arg: &str) -> Result<(Mix, Option<PathBuf>)> {
    if is_file(arg) {
        let text = read(arg, "mix")?;
        let dir = Path::new(arg).parent().map(Path::to_path_buf);
        return Ok((procurement::parse_mix(&text, arg)?, dir));
    }
    catalog::mix(arg).map(|m| (m, None)).map_err(|e| match e {
        Error::UnknownName { .. } => anyhow::anyhow!("{e} (or give the path of a mix TOML file)"),
        other => other.into(),
    })
}

/// `path` as written, or relative to `dir` when it is relative and a directory is given.
fn relative(dir: Option<&Path>, path: &str) -> String {
    match dir {
        Some(d) if Path::new(path).is_relative() => d.join(path).display().to_string(),
        _ => path.to_owned(),
    }
}

/// A candidate: a shipped candidate, a candidate file, or any system (at its own node
/// count, without price). Returns the offer and its datasheet system.
pub fn offer(arg: &str) -> Result<(Offer, System)> {
    let (offer, dir) = if let Some(o) = catalog::candidate(arg)? {
        (Some(o), None)
    } else if is_file(arg) {
        let text = read(arg, "candidate")?;
        let is_offer = text.parse::<toml::Table>().is_ok_and(|t| {
            t.get("system").is_some_and(toml::Value::is_str) && t.contains_key("nodes")
        });
        if is_offer {
            let dir = Path::new(arg).parent().map(Path::to_path_buf);
            (Some(procurement::parse_offer(&text, arg)?), dir)
        } else {
            (None, None)
        }
    } else {
        (None, None)
    };
    match offer {
        Some(o) => {
            let path = if is_file(&o.system) {
                relative(dir.as_deref(), &o.system)
            } else {
                o.system.clone()
            };
            let sys =
                system(&path).with_context(|| format!("candidate `{}`: field `system`", o.name))?;
            Ok((o, sys))
        }
        None => {
            let sys = system(arg)?;
            let o = Offer {
                name: sys.name.clone(),
                description: sys.description.clone(),
                system: arg.to_owned(),
                nodes: sys.cluster.nodes.clone(),
                price_per_node: None,
                node_power_w: None,
                lifetime_years: None,
                electricity_per_kwh: None,
                pfs_bandwidth: None,
            };
            Ok((o, sys))
        }
    }
}

/// Every workload of `mix` loaded under `stack`: the same resolver as the command line's,
/// relative paths from `dir`, errors naming the entry's field in `file`.
pub fn mix_jobs(mix: &Mix, file: &str, dir: Option<&Path>, stack: &Stack) -> Result<Vec<Job>> {
    mix.workloads
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let source = WorkloadSource {
                workload: WorkloadSpec {
                    name: entry.workload.clone(),
                    ..WorkloadSpec::default()
                },
                dataset: entry.data.clone(),
                convergence: None,
                epochs: entry.epochs.as_ref().map(|e| e.value),
                origin: Origin::Mix { file, index, dir },
            };
            Job::load(&source, entry.precision, entry.optimizer, 1, stack)
        })
        .collect()
}

/// The records of a JSON Lines file; a torn last line (an interrupted write) is said to
/// `observer` and skipped.
pub fn records(path: &Path, observer: &dyn Observer) -> Result<Vec<ridgeline_measure::Record>> {
    let (records, torn) = ridgeline_measure::read_records(path)?;
    if let Some(line) = torn {
        observer.notice(&format!(
            "warning: {}: line {line} is an interrupted write and is ignored",
            path.display()
        ));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command line's defaults (`ridgeline predict --help`), with `epochs`.
    fn flags(epochs: Option<f64>) -> ScenarioSpec {
        ScenarioSpec {
            epochs,
            ..ScenarioSpec::default()
        }
    }

    fn named(name: &str) -> WorkloadSpec {
        WorkloadSpec {
            name: name.into(),
            ..WorkloadSpec::default()
        }
    }

    #[test]
    fn sample_counts_from_flags_replace_the_data_sets() {
        let mut s = flags(None);
        s.train_samples = Some(1000);
        s.eval_samples = Some(100);
        let job = Job::from_flags(&named("deepcam"), &s, Precision::Fp32, 2).unwrap();
        assert_eq!(job.dataset.train_samples.value, 1000);
        assert_eq!(job.dataset.eval_samples.value, 100);
        assert_eq!(job.dataset.eval_samples.source, "--eval-samples");
        assert_eq!(job.scenario.nodes, 2);
        let full = Job::from_flags(&named("deepcam"), &flags(None), Precision::Fp32, 2).unwrap();
        assert!(full.dataset.eval_samples.value > 100);
    }

    #[test]
    fn a_mix_entry_and_the_flags_load_the_same_job() {
        let mix = catalog::mix("mlperf-hpc").unwrap();
        let jobs = mix_jobs(&mix, "mlperf-hpc.toml", None, catalog::default_stack()).unwrap();
        for (entry, job) in mix.workloads.iter().zip(&jobs) {
            let mut s = flags(entry.epochs.as_ref().map(|e| e.value));
            s.optimizer = entry.optimizer;
            let flagged = Job::from_flags(&named(&entry.workload), &s, entry.precision, 1).unwrap();
            assert_eq!(job.model.params, flagged.model.params, "{}", entry.workload);
            assert_eq!(job.dataset, flagged.dataset, "{}", entry.workload);
            assert_eq!(job.scenario.epochs, flagged.scenario.epochs);
            assert_eq!(
                job.reference_input_elements,
                flagged.reference_input_elements
            );
        }
    }

    #[test]
    fn a_missing_curve_names_the_flag_or_the_mix_field() {
        let err = Job::from_flags(&named("resnet50"), &flags(None), Precision::Fp32, 1)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pass --epochs E or --convergence FILE"),
            "{err}"
        );
        let source = WorkloadSource {
            workload: named("resnet50"),
            dataset: None,
            convergence: None,
            epochs: None,
            origin: Origin::Mix {
                file: "m.toml",
                index: 3,
                dir: None,
            },
        };
        let err = Job::load(
            &source,
            Precision::Fp32,
            Optimizer::SgdMomentum,
            1,
            catalog::default_stack(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("m.toml: field `workload[3].epochs`"),
            "{err}"
        );
        let err = Job::from_flags(&named("resnet50"), &flags(Some(-1.0)), Precision::Fp32, 1)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--epochs -1.0"), "{err}");
    }

    #[test]
    fn a_data_file_brings_its_own_curve_else_the_builtins() {
        let dir = tempfile::tempdir().unwrap();
        let shipped = catalog::workload_data("deepcam").unwrap().unwrap();
        let set = shipped.dataset.clone().unwrap();
        let data = format!(
            "[sources]\nt = \"test\"\n[dataset]\ntrain_samples = {{ value = {}, source = \"t\" }}\n\
             eval_samples = {{ value = 10, source = \"t\" }}\n\
             sample_bytes = {{ value = {}, source = \"t\" }}\n",
            set.train_samples.value,
            set.sample_bytes.value.value()
        );
        let path = dir.path().join("data.toml");
        std::fs::write(&path, &data).unwrap();
        let mut s = flags(None);
        s.dataset = Some(path.display().to_string());
        let job = Job::from_flags(&named("deepcam"), &s, Precision::Fp32, 1).unwrap();
        assert_eq!(job.dataset.eval_samples.value, 10);
        assert_eq!(
            job.scenario.epochs,
            Epochs::Curve(shipped.convergence.unwrap())
        );
    }
}
