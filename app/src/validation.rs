//! Validation: predictions from a calibrated profile against measured training steps,
//! imported runs and published kernel sets. The self-check pipeline that runs the whole loop
//! is `crate::self_check`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ridgeline_calibrate::comm::{CommValidation, validate_comm};
use ridgeline_calibrate::dataset::{KernelSet, LabelSet, Timing};
use ridgeline_calibrate::loggp::LevelChoice;
use ridgeline_calibrate::transfer::{self, Transfer};
use ridgeline_calibrate::validate::{self, Validation};
use ridgeline_model::precision::Precision;
use ridgeline_model::profile::Profile;
use ridgeline_model::published::{Figure as PublishedFigure, LayerCheck, check_layers, table2};
use ridgeline_model::transfer::{Class, DeviceSpec};
use serde::Serialize;

use crate::campaign::Observer;
use crate::inputs;

/// The validation of the steps in `measured` against the calibrated `profile`.
pub fn validation(
    profile: &Path,
    measured: &Path,
    stack: Option<&str>,
    observer: &dyn Observer,
) -> Result<Validation> {
    let system = inputs::system(&profile.display().to_string())?;
    if system.calibration.is_none() {
        bail!(
            "{}: not a calibrated profile (no [provenance]); make one with `ridgeline calibrate`",
            profile.display()
        );
    }
    steps_against(&system, measured, stack, observer)
}

/// Measured training steps (`measured`) against the prediction on `system` (a catalog name
/// or file) with no calibration: a GPU's layers timed by the transferred kernel model, as
/// `predict` times a GPU nobody calibrated.
pub fn uncalibrated(
    system: &str,
    measured: &Path,
    stack: Option<&str>,
    observer: &dyn Observer,
) -> Result<Validation> {
    let system = inputs::system(system)?;
    if system.calibration.is_some() {
        bail!(
            "{}: a calibrated profile: give it as --profile",
            system.name
        );
    }
    steps_against(&system, measured, stack, observer)
}

/// The workload records of `measured` against their prediction on `system`, under `stack`
/// (else the stack that ran each step).
fn steps_against(
    system: &ridgeline_model::system::System,
    measured: &Path,
    stack: Option<&str>,
    observer: &dyn Observer,
) -> Result<Validation> {
    let records = inputs::records(measured, observer)?;
    let stack = stack.map(|s| inputs::stack(Some(s))).transpose()?;
    Ok(validate::validate(
        system,
        &records,
        &measured.display().to_string(),
        stack.as_ref(),
    )?)
}

/// The collective model of the calibrated profile at `profile` against the allreduce
/// records in `measured`, over the levels `level` chooses; returns it with the profile.
pub fn comm(
    profile: &Path,
    measured: &Path,
    level: LevelChoice,
    observer: &dyn Observer,
) -> Result<(CommValidation, Profile)> {
    let path = profile.display().to_string();
    let system = inputs::system(&path)?;
    let Some(profile) = system.calibration.as_deref() else {
        bail!(
            "{path}: not a calibrated profile (no [provenance]); make one with `ridgeline calibrate`"
        );
    };
    if profile.comm.is_empty() {
        bail!(
            "{path}: the profile has no communication levels; calibrate it from ping-pong \
             records (`mpirun -np 2 ridgeline measure comm pingpong --out FILE`)"
        );
    }
    let records = inputs::records(measured, observer)?;
    let v = validate_comm(profile, &records, &measured.display().to_string(), level)?;
    Ok((v, profile.clone()))
}

/// The model's counts against the reference layer tables and \[004\] Table II.
#[derive(Debug, Serialize)]
pub struct Published {
    /// Each built-in workload against its reference layer table.
    pub layers: Vec<LayerCheck>,
    /// \[004\] Table II's figures beside the model's.
    pub table2: Vec<PublishedFigure>,
}

/// What `ridgeline validate transfer` found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TransferCheck {
    /// The kernel set.
    #[serde(skip)]
    pub set: KernelSet,
    /// Its kernels as the fit sees them.
    #[serde(skip)]
    pub points: Vec<transfer::Point>,
    /// Each GPU of the set left out in turn.
    #[serde(flatten)]
    pub held: Transfer,
    /// The model fitted on every GPU of the set against the per-operator labels of whole
    /// training steps on GPUs outside it, where the set has them (`labels/`).
    pub labels: Vec<transfer::Holdout>,
    /// The devices of those labels.
    pub label_devices: Vec<String>,
    /// The model fitted on every GPU of the set against kernels of GPUs outside it, measured
    /// on their own (NeuSight's test set, `test/`, where the set has it): per GPU and class.
    pub outside: Vec<transfer::Holdout>,
    /// Whole training steps of those GPUs predicted as `predict` times them (the
    /// transferred model fitted on every GPU of the set), one GPU each.
    pub steps: Vec<StepCheck>,
    /// Per label GPU and over all of them (`all`): median |error| and bias of `steps`.
    pub step_summary: Vec<StepSummary>,
    /// Labels not predicted, and why (a model family ridgeline does not build, a split over
    /// several GPUs).
    pub steps_skipped: Vec<String>,
    /// The model fitted on every GPU of the set against ridgeline's own kernel records of
    /// GPUs outside it (`--ours`: GEMMs and convolution passes in FP32, TF32, FP16 and BF16),
    /// per GPU and precision (`h200-sxm-141gb tf32`) and class: the tensor-core formats
    /// timed at the device's peak for the format with the FP32 fit's coefficients.
    pub ours: Vec<transfer::Holdout>,
    /// The same for the published set's kernels (`--published`: DeepBench's GEMMs and
    /// convolution passes in FP32, and in FP16 on tensor cores), each at its work.
    pub published: Vec<transfer::Holdout>,
    /// The scaled classes ([`transfer::scaled_classes`]): the tensor-core classes
    /// (`gemm-tensor`, `conv-gemm-tensor`: the FP32 fit's class with its work scaled and its
    /// own power cap) on ridgeline's own tensor-core kernel records (TF32, FP16, BF16) and
    /// the published set's (FP16); each chip left out in turn: the fit on the other chips
    /// predicts it.
    pub tensor: Option<Transfer>,
    /// Those records as the scaled classes' fit sees them.
    #[serde(skip)]
    pub tensor_points: Vec<transfer::Point>,
    /// The scaled classes adopted: those whose held-out kernels come out better than the
    /// FP32 fit's class unscaled.
    #[serde(skip)]
    pub tensor_adopted: Vec<transfer::ClassModel>,
    /// The FP32 fit's classes unscaled (at the tensor-core peak for a tensor-core class) on
    /// the same held-out kernels: pooled median |error| by scaled class.
    pub tensor_unscaled: BTreeMap<Class, f64>,
    /// The depthwise convolution classes ([`transfer::depthwise`]: one per pass and format)
    /// on ridgeline's own depthwise records of the GPU's own time, each GPU left out in
    /// turn; `None` without such records.
    pub depthwise: Option<Transfer>,
    /// Those records as the depthwise classes' fit sees them.
    #[serde(skip)]
    pub depthwise_points: Vec<transfer::Point>,
    /// The depthwise classes fitted on every GPU of them.
    #[serde(skip)]
    pub depthwise_models: Vec<transfer::ClassModel>,
}

/// One measured training step against its prediction.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepCheck {
    /// The GPU.
    pub device: String,
    /// The model.
    pub model: String,
    /// Sequences per step.
    pub batch: u64,
    /// Tokens per sequence.
    pub seq: u64,
    /// Measured forward plus backward, seconds.
    pub measured_s: f64,
    /// Predicted forward plus backward, seconds.
    pub predicted_s: f64,
    /// Measured and predicted forward, seconds.
    pub forward_s: [f64; 2],
    /// Measured and predicted backward, seconds.
    pub backward_s: [f64; 2],
    /// (predicted - measured) / measured.
    pub error: f64,
    /// The split over several GPUs (`dp4`, `tp4`, `pp4_1`), empty on one GPU.
    pub parallel: String,
    /// The prediction's 90 % interval, seconds: the band of measured over predicted time of
    /// the other steps validated under the default stack.
    pub interval_s: [f64; 2],
    /// Whether the measured step lies in it.
    pub inside: bool,
}

/// How the step predictions of one GPU (or all) did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepSummary {
    /// The GPU, or `all`.
    pub device: String,
    /// Steps predicted.
    pub steps: usize,
    /// Median |predicted - measured| / measured.
    pub median_abs_rel_error: f64,
    /// Median (predicted - measured) / measured.
    pub bias: f64,
    /// The share of the steps whose measured time lies in their 90 % interval.
    pub interval_coverage: f64,
}

/// The figures a device needs for the transferred model, from its catalog file.
fn spec(name: &str, kernels: &Path) -> Result<DeviceSpec> {
    let device = ridgeline_model::catalog::device(name)
        .with_context(|| format!("{}: device `{name}`", kernels.display()))?;
    DeviceSpec::fp32(&device).with_context(|| {
        format!(
            "device `{name}` lacks {} in its file: the transferable model needs them",
            DeviceSpec::missing(&device).join(", ")
        )
    })
}

/// The figures of `devices` (of the set in `dir`) for the transferred model.
fn specs(devices: &[&str], dir: &Path) -> Result<BTreeMap<String, DeviceSpec>> {
    devices
        .iter()
        .map(|name| Ok(((*name).to_owned(), spec(name, dir)?)))
        .collect()
}

/// Leaves each GPU of the kernel set in `kernels` out in turn: the transferable kernel model
/// fitted on the others predicts it (`ridgeline_calibrate::transfer`); and predicts the
/// per-operator labels of GPUs outside the set (`kernels/labels`, where present) by the
/// model fitted on all of it; predicts ridgeline's own kernel records (`ours`) and the
/// published set (`public`) with it, and fits the scaled classes on their kernels
/// (tensor-core ones, and FP32 convolutions outside `conv`'s kind). Each device's figures
/// come from its catalog file.
pub fn transfer(kernels: &Path, ours: Option<&Path>, public: &[PathBuf]) -> Result<TransferCheck> {
    let set = KernelSet::read(kernels)?;
    // A missing directory is skipped (a checkout without the data); a file is a mistake.
    for (flag, p) in ours
        .map(|o| ("--ours", o))
        .into_iter()
        .chain(public.iter().map(|p| ("--published", p.as_path())))
    {
        if p.exists() && !p.is_dir() {
            bail!(
                "{flag} {}: a file, not a directory of kernel records; give the directory \
                 that holds it (with its SOURCE.toml)",
                p.display()
            );
        }
    }
    let ours = ours.filter(|d| d.is_dir());
    let public: Vec<&PathBuf> = public.iter().filter(|d| d.is_dir()).collect();
    // The published sets and the tensor-core data, read (and their errors given) before the
    // long fits.
    let (mut published, mut published_tensor) = (Vec::new(), Vec::new());
    for dir in &public {
        let (plain, tensor) = published_points(dir)?;
        published.extend(plain);
        published_tensor.extend(tensor);
    }
    let tensor_points = tensor_points(ours, &published_tensor)?;
    let points = transfer::points(&set, &specs(&set.devices(), kernels)?)?;
    let held = transfer::leave_one_out(&points)?;
    let dir = kernels.join(crate::import::LABELS);
    let mut check = TransferCheck {
        labels: Vec::new(),
        label_devices: Vec::new(),
        outside: Vec::new(),
        steps: Vec::new(),
        step_summary: Vec::new(),
        steps_skipped: Vec::new(),
        ours: Vec::new(),
        published: Vec::new(),
        tensor: None,
        tensor_points: Vec::new(),
        tensor_adopted: Vec::new(),
        tensor_unscaled: BTreeMap::new(),
        depthwise: None,
        depthwise_points: Vec::new(),
        depthwise_models: Vec::new(),
        set,
        points,
        held,
    };
    let test = kernels.join(crate::import::TEST);
    if !test.is_dir() && !dir.is_dir() && ours.is_none() && public.is_empty() {
        return Ok(check);
    }
    // The model fitted on every GPU of the set times the GPUs outside it.
    let all: Vec<&transfer::Point> = check.points.iter().collect();
    let models = transfer::fit(&all)?;
    if let Some(ours) = ours {
        let points = own_points(ours, false)?;
        check.ours = transfer::outside_in_step(&models, &check.held, &points.issued, true);
        check.ours.extend(transfer::outside_in_step(
            &models,
            &check.held,
            &points.gpu,
            false,
        ));
    }
    if let Some(ours) = ours {
        let points: Vec<transfer::Point> = own_points(ours, true)?
            .gpu
            .into_iter()
            .filter(|p| p.class.is_depthwise())
            .collect();
        if !points.is_empty() {
            let (fitted, held) = transfer::depthwise(&points)?;
            check.depthwise = Some(held);
            check.depthwise_models = fitted;
            check.depthwise_points = points;
        }
    }
    check.published = transfer::outside_in_step(&models, &check.held, &published, false);
    check.tensor_points = tensor_points;
    if !check.tensor_points.is_empty() {
        let (adopted, held, unscaled) = transfer::scaled_classes(&models, &check.tensor_points);
        check.tensor = Some(held);
        check.tensor_adopted = adopted;
        check.tensor_unscaled = unscaled;
    }
    if test.is_dir() {
        let t = KernelSet::read(&test)?;
        let specs = specs(&t.devices(), &test)?;
        check.outside = transfer::outside(&models, &check.held, &transfer::points(&t, &specs)?);
    }
    if dir.is_dir() {
        let l = LabelSet::read(&dir)?;
        let specs = specs(&l.devices(), &dir)?;
        check.labels = transfer::labels(&models, &check.held, &l, &specs)?;
        check.label_devices = l.devices().iter().map(|d| (*d).to_owned()).collect();
        let model = transfer::shipped(models, &check.points, &check.held, "", "");
        let (steps, skipped) = steps(&model, &l, &dir)?;
        check.step_summary = step_summary(&steps);
        check.steps = steps;
        check.steps_skipped = skipped;
    }
    Ok(check)
}

/// The GPUs of `points` (a point's device is its GPU and precision, `h200-sxm-141gb fp16`),
/// sorted, each once.
pub fn gpus_of(points: &[transfer::Point]) -> Vec<&str> {
    let mut gpus: Vec<&str> = points
        .iter()
        .filter_map(|p| p.device.split(' ').next())
        .collect();
    gpus.sort_unstable();
    gpus.dedup();
    gpus
}

/// The data of the scaled classes: ridgeline's own records of the GPU's own time under
/// `ours` ([`own_points`]) and the published set's kernels, `published`
/// ([`published_points`]), that run on tensor cores
/// ([`Class::is_tensor`]).
pub fn tensor_points(
    ours: Option<&Path>,
    published: &[transfer::Point],
) -> Result<Vec<transfer::Point>> {
    let tensor = |p: &transfer::Point| p.class.is_tensor();
    let mut out: Vec<transfer::Point> = match ours {
        Some(dir) => own_points(dir, true)?
            .gpu
            .into_iter()
            .filter(tensor)
            .collect(),
        None => Vec::new(),
    };
    out.extend(published.iter().filter(|p| tensor(p)).cloned());
    Ok(out)
}

/// The published GPU kernel sets `validate transfer` reads unless --published names others.
pub const GPU_PUBLISHED: &[&str] = &[
    "data/evidence/kernels/deepbench",
    "data/evidence/kernels/vidur",
    "data/evidence/kernels/llmcompass",
    "data/evidence/kernels/fp8-h200",
];

/// The published sets `given`, or `default`'s.
pub fn published_or(given: &Option<Vec<PathBuf>>, default: &[&str]) -> Vec<PathBuf> {
    given
        .clone()
        .unwrap_or_else(|| default.iter().map(PathBuf::from).collect())
}

/// What the FP32 `conv` class is fitted on: NeuSight's convolutions are all 2-D 3 x 3
/// forward passes of stride 1 (61-81 % of them run as Winograd kernels). The published
/// set's convolutions of that kind are judged apart from the rest ([`published_points`]).
pub const CONV_FITTED_KIND: &str = "3x3 s1 fwd";

/// The published kernel set in `dir` (`scripts/import-deepbench.py`) as points, each
/// device's figures from its catalog file, read once: every kernel of its class, and the
/// same with its kernels as points of their scaled classes where they have one
/// ([`transfer::published_points`]: tensor-core kernels, FP32 convolutions outside `conv`'s
/// kind). In the first, a convolution's device also says
/// whether it is of the kind the `conv` class is fitted on ([`CONV_FITTED_KIND`]) or of
/// another shape or pass (`other`): `v100-sxm2-16gb fp32 3x3 s1 fwd`.
pub fn published_points(dir: &Path) -> Result<(Vec<transfer::Point>, Vec<transfer::Point>)> {
    let mut set = ridgeline_calibrate::dataset::PublishedSet::read(dir)?;
    let mut devices = BTreeMap::new();
    for name in set.source.devices.values() {
        let device = ridgeline_model::catalog::device(name)
            .with_context(|| format!("{}: device `{name}`", dir.join("SOURCE.toml").display()))?;
        devices.insert(name.clone(), device);
    }
    // A CPU's kernels are the CPU model's (`crate::cpu_model::published_cpus`).
    set.retain_devices(|name| {
        devices
            .get(name)
            .is_none_or(|d| d.kind != ridgeline_model::system::DeviceKind::Cpu)
    });
    let spec = |name: &str, p: Precision| DeviceSpec::of(devices.get(name)?, p);
    let points = |scaled| {
        transfer::published_points(&set, &spec, scaled)
            .with_context(|| format!("{}: a published kernel set", dir.display()))
    };
    let mut plain = points(false)?;
    // One point per row, the products' first: the last `set.conv.len()` are the rows of
    // `conv.csv.gz` in order.
    let first = plain.len().saturating_sub(set.conv.len());
    for (p, c) in plain[first..].iter_mut().zip(&set.conv) {
        let fitted_kind = c.r == 3
            && c.s == 3
            && c.stride_h == 1
            && c.stride_w == 1
            && c.pass == ridgeline_measure::ConvPass::Forward;
        let kind = if fitted_kind {
            CONV_FITTED_KIND
        } else {
            "other"
        };
        p.device = format!("{} {kind}", p.device);
    }
    Ok((plain, points(true)?))
}

/// ridgeline's own GPU kernel records under `dir` as points of the transferred model: one
/// directory per GPU, each with a `SOURCE.toml` whose `devices` table maps the GPU's name
/// (as the driver reports it, the records' `env.gpu.name`) to a catalog device, and records
/// files (`*.jsonl` or `*.jsonl.gz`). Each record is timed at its precision's matrix peak of
/// that device's file.
/// With `scaled`, kernels on tensor cores are points of their tensor-core classes
/// ([`transfer::record_points`]). Points come apart by how their set was timed (the
/// `SOURCE.toml`'s `timing`).
pub fn own_points(dir: &Path, scaled: bool) -> Result<OwnPoints> {
    let mut points = OwnPoints::default();
    let mut sets: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: a directory of GPU kernel records", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        // CPU record sets (`cpu-*`) are the CPU model's (`crate::cpu_model`).
        .filter(|p| {
            p.is_dir()
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(crate::cpu_model::SET_PREFIX))
        })
        .collect();
    sets.sort();
    for set in sets {
        let source = ridgeline_calibrate::dataset::read_source(&set)?;
        let timing = source.timing.unwrap_or(Timing::Issued);
        let files = crate::cpu_model::records_files(&set)?;
        let mut devices = BTreeMap::new();
        for (gpu, name) in &source.devices {
            let device = ridgeline_model::catalog::device(name).with_context(|| {
                format!(
                    "{}: device `{name}` of `{gpu}`",
                    set.join("SOURCE.toml").display()
                )
            })?;
            devices.insert(gpu.clone(), (name.clone(), device));
        }
        for file in files {
            let (records, _) = ridgeline_measure::record::read_records(&file)?;
            let spec = |r: &ridgeline_measure::record::Record, p: Precision| {
                let gpu = r.env.gpu.as_ref()?;
                let (name, device) = devices.get(&gpu.name)?;
                Some((name.clone(), DeviceSpec::of(device, p)?))
            };
            let found =
                transfer::record_points(&file.display().to_string(), &records, &spec, scaled)?;
            if found.is_empty() && !records.is_empty() {
                bail!(
                    "{}: no record is a GEMM or convolution of a GPU that {} maps to a \
                     catalog device with the transferred model's figures",
                    file.display(),
                    set.join("SOURCE.toml").display()
                );
            }
            match timing {
                Timing::Issued => points.issued.extend(found),
                Timing::Gpu => points.gpu.extend(found),
            }
        }
    }
    Ok(points)
}

/// ridgeline's own GPU kernel records as points ([`own_points`]), by how they were timed.
#[derive(Debug, Clone, Default)]
pub struct OwnPoints {
    /// Calls back to back as the host issued them ([`Timing::Issued`]): judged at the time
    /// a kernel takes inside a step.
    pub issued: Vec<transfer::Point>,
    /// The GPU's own time ([`Timing::Gpu`]): judged at the kernel's work, and the data of
    /// the scaled classes.
    pub gpu: Vec<transfer::Point>,
}

/// The single-GPU training steps of `labels` (in `dir`) predicted with `model` as `predict`
/// times a step's compute (FP32, every layer by the transferred kernel model, never below
/// the ideal bound), forward and backward without the optimizer update (the labels time
/// none); and the labels left out, with why.
fn steps(
    model: &ridgeline_model::transfer::Model,
    labels: &LabelSet,
    dir: &Path,
) -> Result<(Vec<StepCheck>, Vec<String>)> {
    use ridgeline_model::memory::Optimizer;
    use ridgeline_model::predict::{DeviceRates, StepModel};
    use ridgeline_model::roofline::Efficiency;
    use ridgeline_model::system::DeviceKind;
    use ridgeline_model::workloads::transformer::{self, Config};
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for s in &labels.steps {
        let what = format!("{} {} batch {} on {}", s.model, s.seq, s.batch, s.device);
        let file = dir.join("models").join(format!("{}.json", s.model));
        let text = labels
            .models
            .get(&s.model)
            .with_context(|| format!("{}: missing", file.display()))?;
        let config = match Config::from_json(text, &file.display().to_string()) {
            Ok(c) => c,
            Err(e) => {
                skipped.push(format!("{what}: {e}"));
                continue;
            }
        };
        let seq = usize::try_from(s.seq)?;
        if !s.parallel.is_empty() {
            out.push(split_step(model, s, &config, seq)?);
            continue;
        }
        let graph = transformer::build(&s.model, &config, seq, 1.0)
            .map_err(|e| anyhow::anyhow!("{what}: layer `{}`: {}", e.layer, e.message))?;
        let system = ridgeline_model::catalog::system(&s.device)?;
        let spec = DeviceSpec::fp32(&system.device).with_context(|| {
            format!(
                "device `{}` lacks {}",
                s.device,
                DeviceSpec::missing(&system.device).join(", ")
            )
        })?;
        let mut step = StepModel::new(&graph, Precision::Fp32, Optimizer::Sgd);
        step.set_band(DeviceKind::Gpu, label_band(s, &s.model));
        let rates = DeviceRates::of(&system, Precision::Fp32, Efficiency::IDEAL)?;
        let timing = label_timing(model, spec);
        let layers = step.layer_times(s.batch as f64, &rates, &timing);
        let forward: f64 = layers.iter().map(|l| l.forward_s).sum();
        let backward: f64 = layers.iter().map(|l| l.backward_s).sum();
        let predicted = forward + backward;
        // The step's interval as `predict` gives it, relative to its point, at the label's
        // time (which has no optimizer step).
        let t = step.device_times(s.batch as f64, &rates, &timing);
        let interval_s = t.interval_90.map(|e| predicted * e / t.step);
        out.push(StepCheck {
            interval_s,
            inside: (interval_s[0]..=interval_s[1]).contains(&s.step_s),
            device: s.device.clone(),
            model: s.model.clone(),
            batch: s.batch,
            seq: s.seq,
            measured_s: s.step_s,
            predicted_s: predicted,
            forward_s: [s.forward_s, forward],
            backward_s: [s.backward_s, backward],
            error: predicted / s.step_s - 1.0,
            parallel: String::new(),
        });
    }
    Ok((out, skipped))
}

/// The band that gives a label's interval: the steps validated under the default stack
/// (which times the labels), the label's own residual (as `workload`) left out.
fn label_band(
    s: &ridgeline_calibrate::dataset::StepLabel,
    workload: &str,
) -> Option<ridgeline_model::stack::residuals::StepBand> {
    use ridgeline_model::stack::residuals::{self, StepKey};
    use ridgeline_model::system::DeviceKind;
    let key = StepKey {
        workload: workload.to_owned(),
        device: s.device.clone(),
        precision: Precision::Fp32.name().to_owned(),
        batch: s.batch,
    };
    residuals::band(
        ridgeline_model::catalog::default_stack(),
        DeviceKind::Gpu,
        Some(&key),
    )
}

/// How the label set's steps are timed: by `model` on `spec`, each kernel at least its
/// in-step floor and the layers' times added, with no host timeline: NeuSight timed each
/// operator of its steps in place, one at a time, so each label holds its operator's launch
/// (the floor) and no overlap of the host with the device. The stack's other rules
/// (`pytorch-eager`'s: none of fusion; FP32 products) apply as `predict` applies them.
fn label_timing(
    model: &ridgeline_model::transfer::Model,
    spec: DeviceSpec,
) -> ridgeline_model::predict::Timing<'_> {
    ridgeline_model::predict::Timing {
        profile: None,
        transfer: Some((model, spec)),
        cpu: None,
        tf32: None,
        fp8: None,
        host: false,
        gpu: true,
    }
}

/// A step label split over four GPUs (`dp4`, `tp4`, `pp4_1`), predicted as
/// [`ridgeline_model::parallel::step`] times it: the whole training step with Adam (as
/// Megatron-LM ran it), on four GPUs of a node of NVLink (a DGX H100's; a DGX A100's with the
/// 40 GB A100, whose NVLink is the same).
fn split_step(
    model: &ridgeline_model::transfer::Model,
    s: &ridgeline_calibrate::dataset::StepLabel,
    config: &ridgeline_model::workloads::transformer::Config,
    seq: usize,
) -> Result<StepCheck> {
    use ridgeline_model::memory::Optimizer;
    use ridgeline_model::parallel::{self, Split};
    let one = Split {
        tensor: 1,
        pipeline: 1,
        data: 1,
        micro_batches: 1,
        virtual_stages: 1,
        expert: 1,
    };
    let split = match s.parallel.as_str() {
        "dp4" => Split { data: 4, ..one },
        "tp4" => Split { tensor: 4, ..one },
        "pp4_1" => Split { pipeline: 4, ..one },
        other => bail!("split `{other}` is not one of dp4, tp4, pp4_1"),
    };
    let mut system = match s.device.as_str() {
        "h100-sxm5-80gb" => ridgeline_model::catalog::system("dgx-h100")?,
        "a100-sxm4-40gb" => ridgeline_model::catalog::system("dgx-a100")?,
        other => bail!("no catalog node with NVLink holds `{other}`"),
    };
    system.device = ridgeline_model::catalog::device(&s.device)?;
    let spec = DeviceSpec::fp32(&system.device)
        .with_context(|| format!("device `{}` lacks the kernel model's figures", s.device))?;
    let timing = label_timing(model, spec);
    let step = parallel::step(
        &s.model,
        config,
        seq,
        s.batch,
        split,
        &system,
        Precision::Fp32,
        Optimizer::Adam,
        ridgeline_model::catalog::default_stack(),
        &timing,
    )?;
    let slowest = step
        .stages
        .iter()
        .max_by(|a, b| (a.forward_s + a.backward_s).total_cmp(&(b.forward_s + b.backward_s)));
    let (f, b) = slowest.map_or((0.0, 0.0), |st| (st.forward_s, st.backward_s));
    let interval_s = label_band(s, &format!("{} {}", s.model, s.parallel))
        .map_or([step.step_s; 2], |band| band.around(step.step_s));
    Ok(StepCheck {
        interval_s,
        inside: (interval_s[0]..=interval_s[1]).contains(&s.step_s),
        device: s.device.clone(),
        model: s.model.clone(),
        batch: s.batch,
        seq: s.seq,
        measured_s: s.step_s,
        predicted_s: step.step_s,
        forward_s: [s.forward_s, f],
        backward_s: [s.backward_s, b],
        error: step.step_s / s.step_s - 1.0,
        parallel: s.parallel.clone(),
    })
}

/// Median |error| and bias of `steps` per GPU, then over all of them.
fn step_summary(steps: &[StepCheck]) -> Vec<StepSummary> {
    let median = |v: Vec<f64>| ridgeline_calibrate::stats::median(&v);
    let summary = |device: &str, rows: Vec<&StepCheck>| StepSummary {
        device: device.to_owned(),
        steps: rows.len(),
        median_abs_rel_error: median(rows.iter().map(|r| r.error.abs()).collect()),
        bias: median(rows.iter().map(|r| r.error).collect()),
        interval_coverage: rows.iter().filter(|r| r.inside).count() as f64 / rows.len() as f64,
    };
    let single: Vec<&StepCheck> = steps.iter().filter(|s| s.parallel.is_empty()).collect();
    let mut devices: Vec<&str> = single.iter().map(|s| s.device.as_str()).collect();
    devices.sort_unstable();
    devices.dedup();
    let mut out: Vec<StepSummary> = devices
        .iter()
        .map(|d| {
            summary(
                d,
                single.iter().filter(|s| s.device == *d).copied().collect(),
            )
        })
        .collect();
    if !single.is_empty() {
        out.push(summary("all", single));
    }
    let split: Vec<&StepCheck> = steps.iter().filter(|s| !s.parallel.is_empty()).collect();
    if !split.is_empty() {
        out.push(summary("4 GPUs (dp4, tp4, pp4)", split));
    }
    out
}

/// The kernel model fitted on every device of the kernel set in `kernels`, with the
/// leave-one-device-out figures of `held`, as the TOML of `data/evidence/kernels/transfer.toml`.
pub fn transfer_model(
    kernels: &Path,
    check: &TransferCheck,
    ours: &Path,
    public: &[PathBuf],
) -> Result<String> {
    let public = public
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (set, points, held) = (&check.set, &check.points, &check.held);
    let s = &set.source;
    let data = format!(
        "{} ({}, {} at {}, {}; {}), converted into {}",
        s.description,
        s.paths,
        s.repository,
        s.commit,
        s.licence,
        s.copyright,
        kernels.display()
    );
    let mut m = transfer::model(
        points,
        held,
        &data,
        &format!(
            "ridgeline validate transfer --kernels {} --ours {} --published {} --write-model",
            kernels.display(),
            ours.display(),
            public
        ),
    )?;
    // The scaled classes, fitted on ridgeline's own records and the published set's, with
    // the figures of leaving each chip out.
    if let Some(tensor) = check
        .tensor
        .as_ref()
        .filter(|_| !check.tensor_adopted.is_empty())
    {
        let mut devices: Vec<&str> = check
            .tensor_points
            .iter()
            .map(|p| p.device.as_str())
            .collect();
        devices.sort_unstable();
        devices.dedup();
        let t = transfer::shipped(
            check.tensor_adopted.clone(),
            &check.tensor_points,
            tensor,
            "",
            "",
        );
        m.classes.extend(t.classes);
        m.source.tensor = Some(format!(
            "kernels of ridgeline's own records ({}) and of the published sets {} ({}): the \
             tensor-core ones, and FP32 convolutions outside the kind `conv` is fitted on",
            ours.display(),
            public,
            devices.join(", ")
        ));
    }
    // The depthwise classes, fitted on ridgeline's own depthwise records, with the figures
    // of leaving each GPU out.
    if let Some(held) = check
        .depthwise
        .as_ref()
        .filter(|_| !check.depthwise_models.is_empty())
    {
        let gpus = gpus_of(&check.depthwise_points);
        let d = transfer::shipped(
            check.depthwise_models.clone(),
            &check.depthwise_points,
            held,
            "",
            "",
        );
        m.classes.extend(d.classes);
        m.source.depthwise = Some(format!(
            "depthwise convolutions of ridgeline's own records ({}: {}), one class per pass and \
             format, each GPU left out in turn",
            ours.display(),
            gpus.join(", ")
        ));
    }
    let body = toml::to_string(&m).context("writing the kernel model as TOML")?;
    Ok(format!(
        "# The device-transferable kernel model ridgeline times GPU layers with by default\n\
         # (docs/ARCHITECTURE.md \"A kernel model for GPUs you don't have\"). Written by the\n\
         # command under [source]; fitted on kernel measurements only. Do not edit: fit again.\n\n{body}"
    ))
}

/// Checks every built-in workload against its reference table and \[004\] Table II.
pub fn published() -> Result<Published> {
    let layers = ridgeline_model::reference::workloads()
        .into_iter()
        .map(check_layers)
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(Published {
        layers,
        table2: table2()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published set's convolutions say whether they are of the kind the `conv` class is
    /// fitted on, and those outside it are `conv-gemm`'s, as are all on tensor cores; its
    /// products and its tensor-core points keep the GPU and precision alone.
    #[test]
    fn published_convolutions_come_apart_by_the_kind_the_conv_class_is_fitted_on() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/deepbench");
        let (plain, tensor) = published_points(&dir).unwrap();
        let count = |pts: &[transfer::Point], class: &str, device: &str| {
            pts.iter()
                .filter(|p| p.class.name() == class && p.device == device)
                .count()
        };
        let fitted = format!("v100-sxm2-16gb fp32 {CONV_FITTED_KIND}");
        assert_eq!(count(&plain, "conv", &fitted), 32);
        assert_eq!(count(&plain, "conv-gemm", "v100-sxm2-16gb fp32 other"), 240);
        assert_eq!(count(&plain, "conv", "v100-sxm2-16gb fp32 other"), 0);
        assert_eq!(count(&plain, "conv", "v100-sxm2-16gb fp32"), 0);
        assert_eq!(count(&plain, "gemm", "v100-sxm2-16gb fp32"), 152);
        assert_eq!(
            count(&tensor, "conv-gemm-tensor-16", "v100-sxm2-16gb fp16"),
            245
        );
    }

    /// Vidur's set is products alone (no convolution table): FP16 tensor-core points of the
    /// A100, H100 and A40, every one a point of `gemm-tensor-16`.
    #[test]
    fn vidurs_products_read_as_fp16_tensor_core_points_of_three_gpus() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/vidur");
        let (plain, tensor) = published_points(&dir).unwrap();
        assert_eq!(plain.len(), 60_391);
        assert_eq!(tensor.len(), plain.len());
        for (device, n) in [
            ("a100-sxm4-80gb fp16", 25_959),
            ("h100-sxm5-80gb fp16", 16_626),
            ("a40 fp16", 17_806),
        ] {
            let of = |pts: &[transfer::Point], class: &str| {
                pts.iter()
                    .filter(|p| p.device == device && p.class.name() == class)
                    .count()
            };
            assert_eq!(of(&plain, "gemm"), n, "{device}");
            assert_eq!(of(&tensor, "gemm-tensor-16"), n, "{device}");
        }
    }

    /// LLMCompass's products: BF16 points of the A100 and the MI210 (matrix cores).
    #[test]
    fn llmcompass_products_read_as_bf16_points_of_the_a100_and_the_mi210() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/llmcompass");
        let (plain, tensor) = published_points(&dir).unwrap();
        let of = |pts: &[transfer::Point], device: &str, class: &str| {
            pts.iter()
                .filter(|p| p.device == device && p.class.name() == class)
                .count()
        };
        assert_eq!(of(&plain, "a100-sxm4-80gb bf16", "gemm"), 14);
        assert_eq!(of(&plain, "mi210 bf16", "gemm"), 16);
        assert_eq!(of(&tensor, "mi210 bf16", "gemm-tensor-16"), 16);
        assert_eq!(plain.len(), 30);
    }

    /// The H200's FP8 products: FP8 points at its FP8 peak (a class of their own when
    /// scaled, `gemm-tensor-fp8`), beside BF16 ones of the same shapes.
    #[test]
    fn fp8_products_read_as_fp8_points_of_the_h200() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/fp8-h200");
        let (plain, tensor) = published_points(&dir).unwrap();
        let of = |pts: &[transfer::Point], device: &str, class: &str| {
            pts.iter()
                .filter(|p| p.device == device && p.class.name() == class)
                .count()
        };
        assert_eq!(of(&plain, "h200-sxm-141gb fp8", "gemm"), 8);
        assert_eq!(of(&plain, "h200-sxm-141gb bf16", "gemm"), 8);
        assert_eq!(of(&tensor, "h200-sxm-141gb fp8", "gemm-tensor-fp8"), 8);
        assert_eq!(of(&tensor, "h200-sxm-141gb bf16", "gemm-tensor-16"), 8);
    }

    /// ridgeline's own H200 and H100 records read as points: every GEMM and convolution pass
    /// but FP64's, tensor-core ones as points of the tensor classes at their format's peak;
    /// both sets the GPU's own time.
    #[test]
    fn own_records_read_as_points_of_the_h200_and_h100() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/ridgeline");
        let plain = own_points(&dir, false).unwrap();
        let tensor = own_points(&dir, true).unwrap();
        assert!(plain.issued.is_empty() && tensor.issued.is_empty());
        assert_eq!(plain.gpu.len(), tensor.gpu.len());
        let count = |pts: &[transfer::Point], class: &str, device: &str| {
            pts.iter()
                .filter(|p| p.class.name() == class && p.device == device)
                .count()
        };
        // 33 GEMM shapes per format; 629 convolution passes in tf32, fp16 and bf16, all
        // implicit GEMMs but DeepCAM's 13 depthwise layers' (39 passes a format); the 210
        // in fp32 too, of which the 10 2-D 3 x 3 forward passes of stride 1 and the
        // depthwise ones are `conv`'s, the depthwise ones judged apart (`... depthwise`).
        // The H200's kernel sweep adds 93 passes a format: 54 implicit GEMMs (`conv-gemm`'s
        // in fp32 too: none is of `conv`'s kind, one group) and 39 depthwise.
        // Scaled, a depthwise pass is a point of its pass's and format's class.
        // Unscaled, the 3-D ones are judged apart (`... 3-d`): CosmoFlow's 15 passes a
        // format, and the H200's sweep's 45.
        for (gpu, gemms, fp32, three_d, depthwise) in [
            ("h200-sxm-141gb", 512 + 162, (161 + 54 - 60, 10), 60, 78),
            ("h100-sxm5-80gb", 512, (161 - 15, 10), 15, 39),
        ] {
            assert_eq!(count(&plain.gpu, "gemm", &format!("{gpu} fp32")), 33);
            assert_eq!(count(&tensor.gpu, "gemm", &format!("{gpu} fp32")), 33);
            assert_eq!(
                count(&tensor.gpu, "gemm-tensor-16", &format!("{gpu} bf16")),
                33
            );
            assert_eq!(
                count(&tensor.gpu, "gemm-tensor-tf32", &format!("{gpu} tf32")),
                33
            );
            let conv = |class: &str| -> usize {
                [("tf32", "tf32"), ("16", "fp16"), ("16", "bf16")]
                    .iter()
                    .map(|(c, f)| {
                        count(
                            &tensor.gpu,
                            &format!("{class}-tensor-{c}"),
                            &format!("{gpu} {f}"),
                        )
                    })
                    .sum()
            };
            assert_eq!((conv("conv-gemm"), conv("conv")), (gemms, 0), "{gpu}");
            let fp32s = format!("{gpu} fp32");
            assert_eq!(
                (
                    count(&plain.gpu, "conv-gemm", &fp32s),
                    count(&plain.gpu, "conv", &fp32s)
                ),
                fp32,
                "{gpu}"
            );
            for format in ["fp32", "tf32", "fp16", "bf16"] {
                let judged_apart = format!("{gpu} {format} 3-d");
                // cuDNN has no TF32 weight gradient for CosmoFlow's first layer.
                let declined = usize::from(format == "tf32");
                assert_eq!(
                    count(&plain.gpu, "conv-gemm", &judged_apart),
                    three_d - declined,
                    "{judged_apart}"
                );
            }
            for format in ["fp32", "tf32", "fp16", "bf16"] {
                let plain_dw = format!("{gpu} {format} depthwise");
                assert_eq!(
                    count(&plain.gpu, "conv", &plain_dw),
                    depthwise,
                    "{plain_dw}"
                );
                let scaled: usize = ["forward", "backward-data", "backward-filter"]
                    .iter()
                    .map(|pass| {
                        count(
                            &tensor.gpu,
                            &format!("conv-depthwise-{pass}-{format}"),
                            &format!("{gpu} {format}"),
                        )
                    })
                    .sum();
                assert_eq!(scaled, depthwise, "{gpu} {format}");
            }
        }
        // The two share one chip: left out together by the tensor-core classes.
        let chips: Vec<[u32; 2]> = tensor.gpu.iter().map(|p| p.chip).collect();
        assert!(chips.iter().all(|c| *c == [132, 1980]), "{chips:?}");
        let tensor: Vec<&transfer::Point> = tensor.gpu.iter().collect();
        assert!(tensor.iter().all(|p| p.y > 0.0 && p.y < 1.0));
        // A directory of records without a SOURCE.toml names what it lacks.
        let empty = std::env::temp_dir().join(format!("ridgeline-ours-{}", std::process::id()));
        std::fs::create_dir_all(empty.join("gpu")).unwrap();
        let err = format!("{:#}", own_points(&empty, false).unwrap_err());
        assert!(err.contains("SOURCE.toml"), "{err}");
        std::fs::remove_dir_all(&empty).unwrap();
    }

    /// DeepBench's Xeon Phi kernels are the CPU model's: the GPU model reads none of them.
    #[test]
    fn a_published_sets_cpu_kernels_are_left_to_the_cpu_model() {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/deepbench-knl");
        let (plain, scaled) = published_points(&dir).unwrap();
        assert!(plain.is_empty() && scaled.is_empty());
        let cpus = crate::cpu_model::published_cpus(&[dir]).unwrap();
        assert_eq!(cpus.len(), 1);
        let points = &cpus[0].points;
        assert_eq!(points.len(), 160 + 273);
        assert!(points.iter().all(|p| p.cpu == "xeon-phi-7250f"
            && p.threads == 66
            && p.software == ridgeline_model::transfer::cpu::Software::Onednn));
    }

    /// A kernel set on three catalog GPUs whose times follow one model exactly: leaving
    /// each GPU out, the model fitted on the other two predicts it from its device file.
    #[test]
    fn transfer_leaves_each_gpu_out_and_predicts_it_from_its_file() {
        use ridgeline_calibrate::dataset::{GemmSample, Source, VectorSample};
        use ridgeline_model::transfer;
        let devices = ["t4", "v100-pcie-32gb", "a100-pcie-40gb"];
        let mut set = KernelSet {
            source: Source {
                description: "synthetic".into(),
                repository: "none".into(),
                commit: "0000000".into(),
                paths: "none".into(),
                licence: "none".into(),
                copyright: "none".into(),
                measured_with: "a formula".into(),
                converted_by: "a test".into(),
                devices: devices
                    .iter()
                    .map(|d| (d.to_string(), d.to_string()))
                    .collect(),
                timing: None,
                threads: None,
            },
            gemm: Vec::new(),
            conv: Vec::new(),
            vector: Vec::new(),
        };
        for name in devices {
            let d = ridgeline_model::catalog::device(name).unwrap();
            let spec = DeviceSpec::fp32(&d).unwrap();
            for (m, n, k) in [
                (64, 64, 64),
                (512, 512, 512),
                (4096, 1024, 256),
                (27, 29, 15),
                (2048, 2048, 2048),
                (128 * 41, 128, 512),
                (1000, 3000, 200),
                (8192, 64, 64),
            ] {
                let x = transfer::gemm(2, m, n, k, 4, transfer::Tiles::Library, &spec);
                let t = 1e-5 + 1.3 * x[1] + 2e3 * x[2] + 1.1 * x[4];
                set.gemm.push(GemmSample {
                    device: name.into(),
                    op: ridgeline_model::transfer::Product::Bmm,
                    batch: 2,
                    m,
                    n,
                    k,
                    latency_s: t,
                });
            }
            for e in [1u64 << 10, 1 << 16, 1 << 20, 1 << 22, 1 << 24, 1 << 26] {
                let x = transfer::vector(e, 2, 4, &spec);
                set.vector.push(VectorSample {
                    device: name.into(),
                    op: ridgeline_model::transfer::VectorOp::Relu,
                    batch: 1,
                    h: e,
                    latency_s: 1e-5 + 1.2 * x[1] + 1.05 * x[2],
                });
            }
        }
        let dir = std::env::temp_dir().join(format!("ridgeline-transfer-{}", std::process::id()));
        set.write(&dir).unwrap();
        let t = transfer(&dir, None, &[]).unwrap().held;
        // `bmm`, the same pooled as `gemm` (the model that times every product), `relu`.
        let classes: Vec<&str> = t.classes.iter().map(|h| h.class.as_str()).collect();
        assert_eq!(classes, ["bmm", "gemm", "relu"]);
        for h in &t.holdouts {
            assert!(h.median_abs_rel_error < 1e-3, "{h:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// NeuSight's single-GPU training steps of the models ridgeline builds are predicted;
    /// the splits over four GPUs and the Switch Transformer are listed as not predicted.
    #[test]
    fn whole_step_labels_are_predicted_or_named() {
        let dir =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/neusight/labels");
        let labels = LabelSet::read(&dir).unwrap();
        let model = ridgeline_model::transfer::Model::builtin();
        let (checks, skipped) = steps(model, &labels, &dir).unwrap();
        // 20 on one GPU, 11 over four; the Switch Transformer's two are not built.
        assert_eq!(checks.len(), 31);
        assert_eq!(skipped.len(), 2);
        assert!(skipped.iter().all(|s| s.contains("switch_transformers")));
        assert_eq!(checks.iter().filter(|c| !c.parallel.is_empty()).count(), 11);
        for c in &checks {
            assert!(c.predicted_s > 0.0 && c.predicted_s.is_finite(), "{c:?}");
            if c.parallel.is_empty() {
                assert!((c.forward_s[1] + c.backward_s[1] - c.predicted_s).abs() < 1e-12);
            }
            assert!((c.error - (c.predicted_s / c.measured_s - 1.0)).abs() < 1e-12);
        }
        // Twice the batch, about twice the time.
        let gpt2 = |b| {
            checks
                .iter()
                .find(|c| {
                    c.device == "h100-sxm5-80gb"
                        && c.model == "gpt2_large"
                        && c.batch == b
                        && c.parallel.is_empty()
                })
                .unwrap()
                .predicted_s
        };
        let r = gpt2(4) / gpt2(1);
        assert!((3.0..4.2).contains(&r), "{r}");
        let summary = step_summary(&checks);
        let all = summary.iter().find(|s| s.device == "all").unwrap();
        assert_eq!(all.steps, 20);
        assert_eq!(summary.last().unwrap().steps, 11);
    }

    /// The coefficients ridgeline ships are what fitting the shipped kernel set gives
    /// (`ridgeline validate transfer --write-model data/evidence/kernels/transfer.toml`).
    #[test]
    fn the_shipped_kernel_model_is_the_fit_of_the_shipped_kernels() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/neusight");
        let set = KernelSet::read(&dir).unwrap();
        let mut specs = BTreeMap::new();
        for name in set.devices() {
            let d = ridgeline_model::catalog::device(name).unwrap();
            specs.insert(name.to_owned(), DeviceSpec::fp32(&d).unwrap());
        }
        let points = transfer::points(&set, &specs).unwrap();
        let all: Vec<&transfer::Point> = points.iter().collect();
        let mut fitted = transfer::fit(&all).unwrap();
        // With the tensor-core classes of ridgeline's own records and the published sets'.
        let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/ridgeline");
        // The published sets `validate transfer` reads by default.
        let mut published = Vec::new();
        for set in ["deepbench", "vidur", "llmcompass", "fp8-h200"] {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../data/evidence/kernels")
                .join(set);
            published.extend(published_points(&dir).unwrap().1);
        }
        let tensor = tensor_points(Some(&ours), &published).unwrap();
        let (adopted, _, _) = transfer::scaled_classes(&fitted, &tensor);
        fitted.extend(adopted);
        // And the depthwise classes of ridgeline's own records.
        let depthwise: Vec<transfer::Point> = own_points(&ours, true)
            .unwrap()
            .gpu
            .into_iter()
            .filter(|p| p.class.is_depthwise())
            .collect();
        fitted.extend(transfer::depthwise(&depthwise).unwrap().0);
        let shipped = ridgeline_model::transfer::Model::builtin();
        assert_eq!(shipped.classes.len(), fitted.len());
        for f in &fitted {
            let c = shipped.class(f.class).unwrap();
            assert_eq!(c.points, f.points, "{}", f.class);
            for (a, b) in c.coefficients.iter().zip(&f.coefficients) {
                assert!(
                    (a - b).abs() <= 1e-9 * b.abs().max(1e-12),
                    "{}: shipped {a} fitted {b}: fit the model again",
                    f.class
                );
            }
        }
        assert_eq!(shipped.source.devices, set.devices());
    }
}
