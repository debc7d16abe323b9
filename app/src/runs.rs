//! Imported training runs (MLPerf result logs, [`ridgeline_calibrate::mlperf`]) against
//! `predict`: each run's throughput, epoch time and time to train, predicted on a system
//! for the run's nodes, accelerators per node, global batch, epochs and samples.

use std::path::Path;

use anyhow::{Context, Result, bail};
use ridgeline_calibrate::mlperf::{self, RunRecord};
use ridgeline_model::precision::Precision;
use ridgeline_model::predict;
use ridgeline_model::system::Sourced;
use serde::Serialize;

use crate::inputs::{self, Job, ScenarioSpec, WorkloadSpec};

/// The built-in workload that predicts each MLPerf benchmark (`--workload` names others).
pub const BENCHMARKS: [(&str, &str); 5] = [
    ("resnet", "resnet50"),
    ("bert", "bert-large"),
    ("gpt3", "gpt3-175b"),
    ("cosmoflow", "cosmoflow"),
    ("deepcam", "deepcam"),
];

/// Benchmark names and the workloads that predict them.
type WorkloadMap = Vec<(String, String)>;

/// The workload of each benchmark: [`BENCHMARKS`] overridden by `--workload` arguments,
/// each `WORKLOAD` (every benchmark) or `BENCHMARK=WORKLOAD`; and the one workload for every
/// run, where one was given.
fn workload_map(given: &[String]) -> Result<(WorkloadMap, Option<String>)> {
    let mut map: Vec<(String, String)> = BENCHMARKS
        .iter()
        .map(|(b, w)| ((*b).to_owned(), (*w).to_owned()))
        .collect();
    let mut every = None;
    for g in given {
        match g.split_once('=') {
            Some((b, w)) if !b.trim().is_empty() && !w.trim().is_empty() => {
                let (b, w) = (b.trim().to_owned(), w.trim().to_owned());
                map.retain(|(k, _)| *k != b);
                map.push((b, w));
            }
            Some(_) => bail!(
                "--workload `{g}`: give BENCHMARK=WORKLOAD (bert=bert-large) or WORKLOAD alone"
            ),
            None if g.trim().is_empty() => bail!("--workload: empty; give a workload"),
            None => {
                if every.replace(g.trim().to_owned()).is_some() {
                    bail!(
                        "--workload: more than one workload for every run; give BENCHMARK=WORKLOAD"
                    );
                }
            }
        }
    }
    Ok((map, every))
}

/// A chip, memory size and form factor read from an accelerator's name (`NVIDIA
/// H200-SXM5-141GB`, `h200-sxm-141gb`, `NVIDIA A100-SXM-80GB CTS`), to match a log's
/// accelerator with a catalog device: `(h200, Some(141), Some(sxm))`.
fn chip_of(name: &str) -> Option<(String, Option<u32>, Option<&'static str>)> {
    let lower = name.to_lowercase();
    let tokens: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty() && *t != "nvidia" && *t != "amd" && *t != "intel")
        .collect();
    // The chip: letters then digits (a100, h200, gh200, mi250x).
    let chip = tokens.iter().find(|t| {
        let digits = t.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        digits.len() < t.len()
            && digits.starts_with(|c: char| c.is_ascii_digit())
            && !t.ends_with("gb")
            && !t.starts_with("sxm")
            && !t.starts_with("pcie")
    })?;
    let memory = tokens
        .iter()
        .find_map(|t| t.strip_suffix("gb").and_then(|n| n.parse::<u32>().ok()));
    let form = tokens.iter().find_map(|t| {
        if t.starts_with("sxm") {
            Some("sxm")
        } else if t.starts_with("pcie") {
            Some("pcie")
        } else if *t == "nvl" {
            Some("nvl")
        } else if *t == "oam" {
            Some("oam")
        } else {
            None
        }
    });
    Some(((*chip).to_owned(), memory, form))
}

/// Whether the log's `accelerator` is `device` (a catalog name or a device file's name and
/// model): the same chip, and the same memory size and form factor where both say.
pub fn same_accelerator(accelerator: &str, device: &ridgeline_model::system::Device) -> bool {
    let Some((chip, memory, form)) = chip_of(accelerator) else {
        return device_name(accelerator) == device.name;
    };
    [device.name.as_str(), device.model.as_str()]
        .iter()
        .filter_map(|n| chip_of(n))
        .any(|(c, m, f)| {
            c == chip
                && (m.is_none() || memory.is_none() || m == memory)
                && (f.is_none() || form.is_none() || f == form)
        })
}

/// One run against its prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCheck {
    /// The result log.
    pub file: String,
    /// The MLPerf benchmark.
    pub benchmark: String,
    /// The workload that predicted it.
    pub workload: String,
    /// The log's accelerator and the device it was matched with (`NVIDIA H200-SXM5-141GB
    /// = h200-sxm-141gb`), where the log names one.
    pub matched: Option<String>,
    /// The submitter's system (its `system_name`, else the platform).
    pub run_system: String,
    /// The run's accelerator, where its system description names it.
    pub accelerator: Option<String>,
    /// Nodes.
    pub nodes: u32,
    /// Devices in all.
    pub devices: u64,
    /// Global batch.
    pub global_batch: u64,
    /// Epochs trained.
    pub epochs: u32,
    /// Epochs the workload's convergence curve gives at the run's global batch, where
    /// ridgeline has one (the time to train is predicted for the run's own epochs).
    pub predicted_epochs: Option<f64>,
    /// Measured data staging (MLPerf HPC's `staging_start` to `staging_stop`), seconds,
    /// where logged.
    pub measured_staging_s: Option<f64>,
    /// Predicted staging, seconds.
    pub predicted_staging_s: f64,
    /// Measured samples per second (the log's median `throughput`), where logged.
    pub measured_throughput: Option<f64>,
    /// Predicted samples per second.
    pub predicted_throughput: f64,
    /// (predicted - measured) / measured throughput.
    pub throughput_error: Option<f64>,
    /// Measured median epoch (training only, `epoch_start` to `epoch_stop`), seconds.
    pub measured_epoch_s: Option<f64>,
    /// Predicted epoch, training only (without its evaluation), seconds.
    pub predicted_epoch_s: f64,
    /// (predicted - measured) / measured epoch.
    pub epoch_error: Option<f64>,
    /// Measured time to train (`run_start` to `run_stop`), seconds.
    pub measured_time_to_train_s: f64,
    /// Predicted time to train: the epochs with their evaluations, and the staging where the
    /// run logged staging inside its timed run (MLPerf HPC times it; MLPerf Training times
    /// neither initialisation nor staging), seconds.
    pub predicted_time_to_train_s: f64,
    /// The 90 % interval of the predicted time to train, seconds.
    pub predicted_time_to_train_lo_s: f64,
    /// The 90 % interval's upper end, seconds.
    pub predicted_time_to_train_hi_s: f64,
    /// (predicted - measured) / measured time to train.
    pub time_to_train_error: f64,
    /// Whether the measured time to train lies in the 90 % interval.
    pub inside_interval: bool,
}

/// Imported runs against `predict` on one system.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunValidation {
    /// The system predicted on.
    pub system: String,
    /// Its device.
    pub device: String,
    /// The precision predicted in.
    pub precision: Precision,
    /// The software stack predicted under.
    pub stack: String,
    /// What timed the device's layers.
    pub timed_by: String,
    /// Per run.
    pub runs: Vec<RunCheck>,
    /// Runs not predicted, each with why (aborted runs among them: MLPerf does not count
    /// them, nor do the statistics here).
    pub skipped: Vec<String>,
    /// Median |error| of the time to train.
    pub median_abs_error: f64,
    /// Median error of the time to train.
    pub bias: f64,
    /// Median |error| of the throughput, over the runs that log it.
    pub throughput_median_abs_error: Option<f64>,
    /// Runs whose measured time to train lies in its 90 % interval, of those predicted.
    pub interval_coverage: f64,
}

/// The stack imported benchmark runs are predicted under unless told otherwise: the
/// submissions' tuned stacks.
pub const RUN_STACK: &str = "tuned";

/// Whether the records file at `path` holds imported runs (not workload records, which
/// may be gzip-compressed: those are not runs).
pub fn holds_runs(path: &Path) -> Result<bool> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    Ok(mlperf::holds_runs(&String::from_utf8_lossy(&bytes)))
}

/// The runs in `measured` (from `ridgeline import mlperf --out`) against `predict` on
/// `system` (a catalog name, file or calibrated profile) at `precision`. Each run is
/// predicted on its own nodes with the system's node holding the run's accelerators per
/// node (where the run's system description gives them), at its global batch, for its
/// epochs, training samples, and evaluation samples as often as it evaluated; under
/// `stack`, else [`RUN_STACK`] (benchmark submissions run tuned stacks).
pub fn validate(
    system: &str,
    measured: &Path,
    precision: Precision,
    stack: Option<&str>,
    workloads: &[String],
) -> Result<RunValidation> {
    let stack = stack.unwrap_or(RUN_STACK).to_owned();
    let (map, every) = workload_map(workloads)?;
    let file = measured.display().to_string();
    let text = std::fs::read_to_string(measured).with_context(|| format!("{file}: cannot read"))?;
    let records = mlperf::read_runs(&text, &file)?;
    let base = inputs::system(system)?;
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    let mut timed_by = String::new();
    for r in &records {
        if r.status != "success" {
            skipped.push(format!(
                "{}: the run's status is `{}`, not `success`: MLPerf does not count it, nor do \
                 these statistics",
                r.file, r.status
            ));
            continue;
        }
        let Some(workload) = every.clone().or_else(|| {
            map.iter()
                .find(|(b, _)| *b == r.benchmark)
                .map(|(_, w)| w.clone())
        }) else {
            skipped.push(format!(
                "{}: benchmark `{}` has no built-in workload ({} have); name one with \
                 --workload {}=WORKLOAD (a built-in name or a workload file)",
                r.file,
                r.benchmark,
                map.iter()
                    .map(|(b, _)| b.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                r.benchmark
            ));
            continue;
        };
        if let Some(a) = r
            .accelerator
            .as_deref()
            .filter(|a| !same_accelerator(a, &base.device))
        {
            skipped.push(format!(
                "{}: its accelerator `{a}` is not {}'s `{}` (chip, memory and form factor \
                 differ); validate it with --system naming that device or a system of it",
                r.file, base.name, base.device.name
            ));
            continue;
        }
        match check(r, &workload, &base, precision, &stack) {
            Ok((c, by)) => {
                timed_by = by;
                runs.push(c);
            }
            Err(e) => skipped.push(format!("{}: {e:#}", r.file)),
        }
    }
    if runs.is_empty() {
        bail!("{file}: no run could be predicted: {}", skipped.join("; "));
    }
    let median = |v: Vec<f64>| ridgeline_calibrate::stats::median(&v);
    let errors: Vec<f64> = runs.iter().map(|r| r.time_to_train_error).collect();
    let throughput: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.throughput_error.map(f64::abs))
        .collect();
    Ok(RunValidation {
        system: base.name.clone(),
        device: base.device.name.clone(),
        precision,
        stack,
        timed_by,
        median_abs_error: median(errors.iter().map(|e| e.abs()).collect()),
        bias: median(errors),
        throughput_median_abs_error: (!throughput.is_empty()).then(|| median(throughput)),
        interval_coverage: runs.iter().filter(|r| r.inside_interval).count() as f64
            / runs.len() as f64,
        runs,
        skipped,
    })
}

/// The catalog name of an MLPerf system description's accelerator: `NVIDIA
/// H100-SXM5-80GB` is `h100-sxm5-80gb`.
pub fn device_name(accelerator: &str) -> String {
    let lower = accelerator.trim().to_lowercase();
    let bare = ["nvidia ", "amd "]
        .iter()
        .find_map(|p| lower.strip_prefix(p))
        .unwrap_or(&lower);
    bare.split_whitespace().collect::<Vec<_>>().join("-")
}

/// One run predicted on `base` as `workload`; with what timed its layers.
fn check(
    r: &RunRecord,
    workload: &str,
    base: &ridgeline_model::system::System,
    precision: Precision,
    stack: &str,
) -> Result<(RunCheck, String)> {
    let mut system = base.clone();
    if let Some(k) = r.accelerators_per_node {
        system.node.devices = Sourced {
            value: k,
            source: format!(
                "{}: accelerators_per_node of the run's system description",
                r.file
            ),
        };
    }
    let devices = u64::from(system.node.devices.value) * u64::from(r.nodes);
    if !r.global_batch.is_multiple_of(devices) {
        bail!(
            "global batch {} does not divide over {devices} devices",
            r.global_batch
        );
    }
    if r.epochs == 0 {
        bail!("the log has no epochs (`epoch_stop` events) to predict");
    }
    // Evaluation samples per epoch: as many evaluations as the run made, spread over its
    // epochs (MLPerf's ResNet-50 evaluates every fourth epoch).
    let eval_samples = r
        .eval_samples
        .map(|n| (n as f64 * f64::from(r.evals) / f64::from(r.epochs)).round() as u64);
    let spec = ScenarioSpec {
        epochs: Some(f64::from(r.epochs)),
        train_samples: r.train_samples,
        eval_samples,
        stack: Some(stack.to_owned()),
        ..ScenarioSpec::default()
    };
    let job = Job::from_flags(
        &WorkloadSpec {
            name: workload.to_owned(),
            ..WorkloadSpec::default()
        },
        &spec,
        precision,
        r.nodes,
    )?;
    let p = predict::predict(job.inputs(&system), &job.scenario, r.global_batch / devices)?;
    let o = &p.outcome;
    // The staging counts where the run timed it.
    let staging = o.staging_s.value();
    let untimed = if r.staging_s.is_some() { 0.0 } else { staging };
    let ttt = o.time_to_solution_s.value() - untimed;
    let (lo, hi) = (
        o.time_to_solution_lo_s.value() - untimed,
        o.time_to_solution_hi_s.value() - untimed,
    );
    // The epochs the convergence curve gives at this global batch, where there is one.
    let predicted_epochs = Job::from_flags(
        &WorkloadSpec {
            name: workload.to_owned(),
            ..WorkloadSpec::default()
        },
        &ScenarioSpec {
            epochs: None,
            ..spec.clone()
        },
        precision,
        r.nodes,
    )
    .ok()
    .and_then(|j| predict::predict(j.inputs(&system), &j.scenario, r.global_batch / devices).ok())
    .map(|p| p.outcome.epochs);
    let epoch = o.epoch_time_s.value() - o.eval_time_s.value();
    let throughput = o.samples_per_s.value();
    let error = |predicted: f64, measured: f64| predicted / measured - 1.0;
    Ok((
        RunCheck {
            file: r.file.clone(),
            benchmark: r.benchmark.clone(),
            workload: workload.to_owned(),
            matched: r
                .accelerator
                .as_ref()
                .map(|a| format!("{a} = {}", base.device.name)),
            run_system: r.system.clone().unwrap_or_else(|| r.platform.clone()),
            accelerator: r.accelerator.clone(),
            nodes: r.nodes,
            devices,
            global_batch: r.global_batch,
            epochs: r.epochs,
            predicted_epochs,
            measured_staging_s: r.staging_s,
            predicted_staging_s: staging,
            measured_throughput: r.throughput,
            predicted_throughput: throughput,
            throughput_error: r.throughput.map(|m| error(throughput, m)),
            measured_epoch_s: r.epoch_s,
            predicted_epoch_s: epoch,
            epoch_error: r.epoch_s.map(|m| error(epoch, m)),
            measured_time_to_train_s: r.time_to_train_s,
            predicted_time_to_train_s: ttt,
            predicted_time_to_train_lo_s: lo,
            predicted_time_to_train_hi_s: hi,
            time_to_train_error: error(ttt, r.time_to_train_s),
            inside_interval: (lo..=hi).contains(&r.time_to_train_s),
        },
        o.compute_timed_by.describe(),
    ))
}
