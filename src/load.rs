//! Resolving command-line names to workloads and systems: built-in and catalog names,
//! `local`, or files. This is the only place that reads input files.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ridgeline_model::dataset::{self, Dataset};
use ridgeline_model::graph::Graph;
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{Epochs, Inputs, Scenario, StepModel};
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
            return Ok(profile.overlay(base, arg));
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
        let cpuinfo = read("/proc/cpuinfo", "CPU information")?;
        let meminfo = read("/proc/meminfo", "memory information")?;
        return Ok(catalog::local(&cpuinfo, &meminfo)?);
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
        (Some(e), _) if !(e.is_finite() && e > 0.0) => {
            bail!("--epochs {e}: must be a positive number")
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
