//! Resolving command-line names to workloads and systems: built-in and catalog names,
//! `local`, or files. This is the only place that reads input files.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ridgeline_model::dataset::{self, Dataset};
use ridgeline_model::graph::Graph;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{Epochs, Inputs, Scenario, StepModel};
use ridgeline_model::procurement::{self, Mix, MixEntry, Offer};
use ridgeline_model::profile::Profile;
use ridgeline_model::roofline::Efficiency;
use ridgeline_model::system::Sourced;
use ridgeline_model::workloads::{self, BuildOptions};
use ridgeline_model::{Error, catalog, file, system::System};

use crate::cli::{ScenarioArgs, WorkloadArgs};

/// Whether a command-line argument names a file rather than a catalog entry.
fn is_file(arg: &str) -> bool {
    arg.ends_with(".toml") || arg.contains('/') || Path::new(arg).is_file()
}

fn read(path: &str, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {what} file `{path}`"))
}

/// The workload a command names, built or parsed with its scaling options.
pub(crate) fn workload(args: &WorkloadArgs) -> Result<Graph> {
    let name = args.workload.as_str();
    if workloads::find(name).is_ok() || !is_file(name) {
        let options = BuildOptions {
            input_size: args.input_size.as_ref().map(|s| s.0.clone()),
            width: args.width.unwrap_or(1.0),
        };
        return workloads::build(name, &options).map_err(|e| match e {
            Error::UnknownName { .. } => {
                anyhow::anyhow!("{e} (or give the path of a workload TOML file)")
            }
            other => other.into(),
        });
    }
    if args.width.is_some() {
        bail!("--width applies to built-in workloads only; edit the channel counts in `{name}`");
    }
    let text = read(name, "workload")?;
    Ok(file::parse_workload(
        &text,
        name,
        args.input_size.as_ref().map(|s| s.0.as_slice()),
    )?)
}

/// The system a command names: a catalog system or device, `local`, a system file, or a
/// calibrated profile (which names its datasheet system and overlays it).
pub(crate) fn system(arg: &str) -> Result<System> {
    if is_file(arg) {
        let text = read(arg, "system")?;
        if is_profile(&text) {
            let profile = Profile::parse(&text, arg)?;
            let base = datasheet_system(&profile.system).with_context(|| {
                format!("{arg}: field `system`: the profile's datasheet system")
            })?;
            return Ok(profile.overlay(base, arg)?);
        }
        return Ok(catalog::system_from_file(&text, arg)?);
    }
    datasheet_system(arg)
}

/// Whether a TOML text is a calibrated profile rather than a system or device file.
fn is_profile(text: &str) -> bool {
    text.parse::<toml::Table>()
        .is_ok_and(|t| t.contains_key("provenance") && t.contains_key("schema_version"))
}

/// The records of a JSON Lines file; a torn last line is reported on stderr and skipped.
pub(crate) fn records(path: &Path) -> Result<Vec<ridgeline_measure::Record>> {
    let (records, torn) = ridgeline_measure::read_records(path)?;
    if let Some(line) = torn {
        eprintln!(
            "warning: {}: line {line} is an interrupted write and is ignored",
            path.display()
        );
    }
    Ok(records)
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

/// The data set, epochs and scenario a prediction runs with.
pub(crate) struct Training {
    pub(crate) dataset: Dataset,
    pub(crate) scenario: Scenario,
    /// Input elements of the workload the data set's sample size refers to.
    pub(crate) reference_input_elements: u64,
}

/// The data set, convergence and scenario for `graph` (named by `arg`) from the command
/// line and the catalog.
pub(crate) fn training(
    arg: &WorkloadArgs,
    graph: &Graph,
    s: &ScenarioArgs,
    nodes: u32,
) -> Result<Training> {
    let builtin = workloads::find(&arg.workload).ok();
    let shipped = match builtin {
        Some(b) => catalog::workload_data(b.name)?,
        None => None,
    };
    let user_data = s
        .dataset
        .as_deref()
        .map(|path| {
            Ok::<_, anyhow::Error>(dataset::parse_workload_data(
                &read(path, "data set")?,
                path,
            )?)
        })
        .transpose()?;
    let mut set = match (&user_data, &shipped) {
        (Some(d), _) => d.dataset.clone().with_context(|| {
            format!(
                "data set file `{}` has no [dataset] table",
                s.dataset.as_deref().unwrap_or("")
            )
        })?,
        (None, Some(d)) => d
            .dataset
            .clone()
            .with_context(|| format!("no data set for `{}`", arg.workload))?,
        (None, None) => bail!(
            "workload `{}` has no data set: pass --dataset FILE (format: README.md, 'Data sets and convergence')",
            arg.workload
        ),
    };
    if let Some(n) = s.train_samples {
        set.train_samples = Sourced {
            value: n,
            source: "--train-samples".into(),
        };
    }
    let epochs = match (s.epochs, &s.convergence) {
        (Some(e), _) if !(e > 0.0 && e <= dataset::MAX_EPOCHS) => {
            bail!(
                "--epochs {e:?}: must be a positive number, at most {}",
                dataset::MAX_EPOCHS
            )
        }
        (Some(e), _) => Epochs::Fixed(e),
        (None, Some(path)) => {
            let data = dataset::parse_workload_data(&read(path, "convergence")?, path)?;
            Epochs::Curve(data.convergence.with_context(|| {
                format!("convergence file `{path}` has no [[convergence]] points")
            })?)
        }
        (None, None) => match shipped.as_ref().and_then(|d| d.convergence.clone()) {
            Some(c) => Epochs::Curve(c),
            None => bail!(
                "no convergence data for `{}` in ridgeline's sources: pass --epochs E or \
                 --convergence FILE",
                arg.workload
            ),
        },
    };
    let efficiency = Efficiency::new(s.compute_efficiency, s.memory_efficiency)?;
    let scenario = Scenario {
        nodes,
        collective: s.collective,
        overlap: s.overlap,
        location: s.data_location,
        gradient_bytes: s.gradient_precision,
        efficiency,
        preprocess_rate: s.preprocess_rate,
        compression: s.compression,
        epochs,
        quality: s.quality,
    };
    let reference_input_elements = match builtin {
        Some(b) if user_data.is_none() => b.input.iter().map(|&d| d as u64).product(),
        _ => graph.input_shape().elements(),
    };
    Ok(Training {
        dataset: set,
        scenario,
        reference_input_elements,
    })
}

/// A workload, a system and everything a prediction on them needs, loaded together.
pub(crate) struct Job {
    pub(crate) system: System,
    pub(crate) training: Training,
    pub(crate) model: StepModel,
}

impl Job {
    /// Loads the workload, the system, the data set and convergence, and the step model.
    pub(crate) fn load(
        workload: &WorkloadArgs,
        system: &str,
        scenario: &ScenarioArgs,
        precision: Precision,
        nodes: u32,
    ) -> Result<Job> {
        let graph = self::workload(workload)?;
        let system = self::system(system)?;
        let training = training(workload, &graph, scenario, nodes)?;
        let model = StepModel::new(&graph, precision, scenario.optimizer);
        Ok(Job {
            system,
            training,
            model,
        })
    }

    /// The borrowed view predictions take.
    pub(crate) fn inputs(&self) -> Inputs<'_> {
        Inputs {
            model: &self.model,
            system: &self.system,
            dataset: &self.training.dataset,
            reference_input_elements: self.training.reference_input_elements,
        }
    }
}

/// A workload mix: a shipped name or a mix file, with the directory its relative paths
/// start from.
pub(crate) fn mix(arg: &str) -> Result<(Mix, Option<PathBuf>)> {
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
pub(crate) fn offer(arg: &str) -> Result<(Offer, System)> {
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

/// One workload of a mix, loaded: its graph, step model, data set and scenario.
pub(crate) struct MixJob {
    pub(crate) graph: Graph,
    pub(crate) model: StepModel,
    pub(crate) dataset: Dataset,
    pub(crate) scenario: Scenario,
    pub(crate) reference_input_elements: u64,
}

/// Loads mix entry `i` (paths relative to `dir`); `file` names the mix in errors.
pub(crate) fn mix_job(
    entry: &MixEntry,
    i: usize,
    file: &str,
    dir: Option<&Path>,
) -> Result<MixJob> {
    let builtin = workloads::find(&entry.workload).ok();
    let graph = match builtin {
        Some(b) => workloads::build(b.name, &BuildOptions::default())?,
        None => {
            let path = relative(dir, &entry.workload);
            if !Path::new(&path).is_file() {
                bail!(
                    "{file}: field `workload[{i}].name`: `{}` is neither a built-in workload ({}) \
                     nor a workload file (no file `{path}`)",
                    entry.workload,
                    workloads::names().join(", ")
                );
            }
            file::parse_workload(&read(&path, "workload")?, &path, None)?
        }
    };
    let data = match &entry.data {
        Some(p) => {
            let path = relative(dir, p);
            Some(dataset::parse_workload_data(
                &read(&path, "data set")?,
                &path,
            )?)
        }
        None => match builtin {
            Some(b) => catalog::workload_data(b.name)?,
            None => None,
        },
    };
    let field = |f: &str| format!("{file}: field `workload[{i}].{f}`");
    let set = data
        .as_ref()
        .and_then(|d| d.dataset.clone())
        .with_context(|| {
            format!(
                "{}: `{}` has no data set; give a data set file",
                field("data"),
                entry.workload
            )
        })?;
    let epochs = match (&entry.epochs, data.and_then(|d| d.convergence)) {
        (Some(e), _) => Epochs::Fixed(e.value),
        (None, Some(c)) => Epochs::Curve(c),
        (None, None) => bail!(
            "{}: `{}` has no convergence curve in ridgeline's sources; give epochs = {{ value = \
             E, source = \"...\" }} or a data file with [[convergence]] points",
            field("epochs"),
            entry.workload
        ),
    };
    let reference_input_elements = match builtin {
        Some(b) if entry.data.is_none() => b.input.iter().map(|&d| d as u64).product(),
        _ => graph.input_shape().elements(),
    };
    let model = StepModel::new(&graph, entry.precision, entry.optimizer);
    Ok(MixJob {
        graph,
        model,
        dataset: set,
        scenario: Scenario::new(1, epochs),
        reference_input_elements,
    })
}
