//! What `validate` prints: each check's document.

use std::path::{Path, PathBuf};

use ridgeline_calibrate::comm::CommValidation;
use ridgeline_calibrate::transfer::Holdout;
use ridgeline_calibrate::validate::{LayerPoint, StepPoint, Summary, Validation};
use ridgeline_model::profile::Profile;
use ridgeline_reports::Document;
use serde::Serialize;

use crate::columns::{Style, table};
use crate::runs::RunValidation;
use crate::simcheck::SimCheck;
use crate::tables;
use crate::validation::{self, Published, TransferCheck};

/// `validate comm`: the collective model against measured allreduce (`profile` read from
/// `path`).
pub fn comm(
    v: &CommValidation,
    profile: &Profile,
    path: &str,
    measured: &Path,
    style: Style,
) -> Document {
    let cols = tables::comm_cols();
    let mut d = Document::new("Allreduce: predicted from LogGP vs measured")
        .summary("profile", path.to_owned())
        .summary("measured", measured.display().to_string());
    for (k, val) in tables::comm_summary_lines(v, profile) {
        d = d.summary(k, val);
    }
    let mut d = d.table(table(&v.points, &cols, style)).note(
        "error = (predicted - measured) / measured; measured = median of the samples, each the slowest rank's time",
    );
    for n in &v.not_predicted {
        d = d.note(format!("not predicted: {n}"));
    }
    d
}

/// `validate transfer`: the transferable kernel model, leaving one GPU out at a time, with
/// the records and published sets it was checked on.
pub fn transfer(
    check: &TransferCheck,
    kernels: &Path,
    ours: &Path,
    published_sets: &[PathBuf],
    style: Style,
) -> Document {
    let published = published_sets
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let set = &check.set;
    let cols = tables::holdout_cols();
    let rows = holdout_rows(check);
    let mut d =
        Document::new("Transferable kernel model: each GPU predicted by a fit on the others")
            .summary("kernels", kernels.display().to_string())
            .summary(
                "source",
                format!("{} at {}", set.source.repository, set.source.commit),
            )
            .summary("devices", set.devices().join(", "))
            .table(table(&rows, &cols, style))
            .note("error = (predicted - measured) / measured; each held-out GPU's 90 % interval from the log ratios the other GPUs show when each is held out of a fit on the rest (split-conformal across devices). Fitted on kernel measurements only.")
            .note("`conv` rows: every convolution of the set (all 2-D 3 x 3 forward passes of stride 1, most run as Winograd kernels); `conv-gemm` rows: those cuDNN ran as implicit GEMMs (the set's kernel names say which), as that GEMM; `conv-gemm` times the convolutions outside `conv`'s kind (1 x 1, strided, other kernel sizes, 3-D, both gradients; not depthwise) and every one on tensor cores.");
    if !check.outside.is_empty() {
        let mut devices: Vec<&str> = check.outside.iter().map(|h| h.device.as_str()).collect();
        devices.dedup();
        d = d
            .summary(
                "kernels of",
                format!("{} (never fitted on)", devices.join(", ")),
            )
            .note("`outside` rows: the model fitted on every GPU above predicts kernels measured on their own, as the set's were, on GPUs outside it (NeuSight's test set: products and linear layers of the H100 and L4, the L4's vector ops); gemm = both products pooled. Intervals: each class's 90 % interval from leaving one GPU out above.");
    }
    if !check.labels.is_empty() {
        d = d
            .summary(
                "step labels of",
                format!("{} (never fitted on)", check.label_devices.join(", ")),
            )
            .note("`step` rows: the model fitted on every GPU above predicts each operator of whole FP32 training steps (BERT, GPT-2, GPT-3, OPT) measured in place on GPUs outside the fit (NeuSight's per-operator labels), forward and backward; gemm = linear layers and batched products, vector = softmax, layer norm, GELU, dropout and element-wise ops; all = every operator and pass. Intervals: each class's 90 % interval from leaving one GPU out above.");
    }
    if !check.ours.is_empty() {
        d = d
            .summary(
                "our records",
                format!(
                    "{} (never seen by the FP32 fit; its tensor-core kernels are the scaled classes' data)",
                    ours.display()
                ),
            )
            .note("`ours` rows: the model fitted on every GPU above predicts ridgeline's own kernel records of GPUs outside it (scripts/gpu-records.sh: cuBLAS GEMMs, and cuDNN convolutions forward, backward-data and backward-filter at the reference workloads' layers and, on the H200, the kernel sweep's 3-D, depthwise and grouped ones), per GPU, precision and the class that times them (`conv-gemm` for every convolution on tensor cores and those outside `conv`'s kind; `conv` for the depthwise convolutions, one product per channel, in rows of their own, `depthwise`, as no kernel of the FP32 fit is depthwise: the `conv-depthwise-` rows below time them; 3-D convolutions in rows of their own too, `3-d`, as no kernel of the fit is 3-D either); tf32, fp16 and bf16 run on tensor cores, timed at the device file's peak for that format with the FP32 fit's coefficients. Intervals: each class's 90 % interval from leaving one GPU out above.");
    }
    if !check.published.is_empty() {
        d = d
            .summary(
                "published kernels",
                format!(
                    "{} (never seen by the FP32 fit; its tensor-core kernels are the scaled classes' data)",
                    published
                ),
            )
            .note("`published` rows: the model fitted on every GPU above predicts the published kernels, DeepBench's (cuBLAS GEMMs, and cuDNN convolutions forward, backward-data and backward-filter; CUDA 10.1, cuDNN 7.6), Vidur's (FP16 products of transformer layers on the A100, H100 and A40, profiler kernel times), LLMCompass's (BF16 products on the A100 and MI210, host-timed calls of 200 us and more) and the H200's FP8 products (E4M3 through cuBLASLt, timed by PyTorch with events, 200 us and more, beside BF16 ones of the same shapes; one chip, timed at its FP8 peak), per GPU and precision, each at its work: fp32 as the fit times FP32 kernels, fp16 on tensor cores at the device file's FP16 tensor peak with the FP32 fit's coefficients. The V100 SXM2 is outside the fit; the T4 is in it, measured here by another benchmark, library and host. Convolutions come apart by kind: `3x3 s1 fwd`, the kind the `conv` class is fitted on (NeuSight's are all 2-D 3 x 3 forward passes of stride 1), and `other` (other kernel sizes and strides, and both gradients), timed by `conv-gemm` as are all on tensor cores. Intervals: each class's 90 % interval from leaving one GPU out above.");
    }
    if check.tensor.as_ref().is_some_and(|t| t.classes.is_empty()) {
        let gpus = validation::gpus_of(&check.tensor_points);
        d = d.note(format!(
            "No tensor-core class: one needs tensor-core kernels (ridgeline's own records of the GPU's own time, SOURCE.toml `timing = \"gpu\"`, or a published set, --published) of two GPUs at least, to leave one out; these are of {}. `predict` times tensor-core layers with the FP32 fit's coefficients at the format's tensor-core peak (the `ours` rows).",
            gpus.join(", ")
        ));
    }
    if check.tensor.as_ref().is_some_and(|t| !t.classes.is_empty()) {
        d = d
            .summary(
                "scaled classes' kernels",
                format!(
                    "{} and {} (tensor-core kernels)",
                    ours.display(),
                    published
                ),
            )
            .note("`-tensor-` rows: a tensor-core class (one per class and format: tf32, and 16 for fp16 and bf16) is the FP32 fit's class at that format's tensor-core peak, held to what the board's power sustains at its own energy per FLOP, with its work scaled by the median ratio of measured to predicted; the scale and the energy (none, or 0.5 to 4 pJ at 7 nm, the one whose scaled predictions fit best) are fitted on the tensor-core kernels of ridgeline's own records (the `ours` rows' tf32, fp16 and bf16) and the published sets (DeepBench's V100 and T4, Vidur's A100, H100 and A40, LLMCompass's A100 and MI210); each GPU left out in turn with every GPU of its chip (SMs and boost clock alike: the H200 goes with the H100 SXM5), its fit on the other chips' kernels (`all`: every held-out kernel pooled); a class needs kernels of two chips (tf32 has the GH100's alone). Adopted where that beats the FP32 class unscaled at the peak on the same held-out kernels; `predict` times tensor-core layers with the adopted ones.");
        for (class, plain) in &check.tensor_unscaled {
            let adopted = check.tensor_adopted.iter().any(|m| m.class == *class);
            d = d.note(format!(
                "{class}: {} (the FP32 class unscaled: median |error| {:.1}%)",
                if adopted { "adopted" } else { "not adopted" },
                100.0 * plain
            ));
        }
    }
    if check.depthwise.is_some() {
        let gpus = validation::gpus_of(&check.depthwise_points);
        let mut chips: Vec<[u32; 2]> = check.depthwise_points.iter().map(|p| p.chip).collect();
        chips.sort_unstable();
        chips.dedup();
        d = d.note(format!(
            "`conv-depthwise-` rows: a depthwise convolution (one product per channel) is a class of its own per pass and format, launch + a x its bytes at the memory bandwidth + b x its multiply-adds at one per SM per cycle, fitted on ridgeline's own depthwise records ({}: DeepCAM's and the kernel sweep's; fp32 channels-first, tf32, fp16 and bf16 channels-last, as measured); each GPU left out in turn, the fit on the other GPU predicting it, judged by the 90 % interval of the other GPU's held-out ratios. These rest on {} chip{} ({}): GPUs of one chip differ in bandwidth alone, so leaving one out tests the bandwidth term and not the SM term, and on another chip or library a class is an extrapolation. `predict` times depthwise layers with them.",
            ours.display(),
            chips.len(),
            if chips.len() == 1 { "" } else { "s" },
            gpus.join(", ")
        ));
    }
    if !check.steps.is_empty() {
        d = d.then_table(table(&check.steps, &tables::step_label_cols(), style));
        for s in &check.step_summary {
            d = d.summary(
                format!("whole steps, {}", s.device),
                format!(
                    "{} steps, median |error| {:.1}%, bias {:+.1}%, {:.0}% inside their 90 % interval",
                    s.steps,
                    100.0 * s.median_abs_rel_error,
                    100.0 * s.bias,
                    100.0 * s.interval_coverage
                ),
            );
        }
        d = d.note("Whole steps: each single-GPU FP32 training step NeuSight measured on a GPU outside the fit (forward and backward, no optimizer step), built from the model's own configuration (labels/models) as `workload show` builds a transformer and timed as `predict` times its compute: the transferred kernel model fitted on every GPU above, never below the ideal bound. dp4, tp4, pp4_1: the whole step with Adam on four GPUs of an NVLink node split by data, tensor or pipeline parallelism (one micro-batch), as `predict --tensor-parallel/--pipeline-parallel` times it; its forward column is the slowest stage's, one micro-batch. Each step's 90 % interval is the band of measured over predicted time of the other steps validated under the default stack (data/catalog/stacks/residuals.csv, the step's own left out).");
        for s in &check.steps_skipped {
            d = d.note(format!("not predicted: {s}"));
        }
    }
    d
}

/// The rows of `validate transfer`: each class over every held-out GPU (`all`) first, then
/// each GPU, then the kernels of GPUs outside the set, whole steps' labels, our records,
/// the published sets and the scaled and depthwise classes.
fn holdout_rows(check: &TransferCheck) -> Vec<Holdout> {
    let t = &check.held;
    // Each class over every held-out GPU (`all`) first, then each GPU, then the labels of
    // GPUs outside the set.
    t.classes
        .iter()
        .chain(&t.holdouts)
        .cloned()
        .chain(check.outside.iter().map(|h| Holdout {
            class: format!("outside {}", h.class),
            ..h.clone()
        }))
        .chain(check.labels.iter().map(|h| Holdout {
            class: format!("step {}", h.class),
            ..h.clone()
        }))
        .chain(check.ours.iter().map(|h| Holdout {
            class: format!("ours {}", h.class),
            ..h.clone()
        }))
        .chain(check.published.iter().map(|h| Holdout {
            class: format!("published {}", h.class),
            ..h.clone()
        }))
        .chain(
            check
                .tensor
                .iter()
                .chain(&check.depthwise)
                .flat_map(|t| t.classes.iter().chain(&t.holdouts))
                .cloned(),
        )
        .collect()
}

/// `validate transfer --cpu`: the CPU kernel model fitted on every CPU, and each CPU left out
/// where the data has two or more.
pub fn cpu_transfer(check: &crate::cpu_model::CpuCheck, style: Style) -> Document {
    let cols = tables::holdout_cols();
    let cpus = check
        .cpus
        .iter()
        .map(|(c, n)| format!("{c} ({n} kernels)"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut rows: Vec<Holdout> = Vec::new();
    if let Some(t) = &check.transfer {
        rows.extend(t.classes.iter().chain(&t.holdouts).cloned());
    }
    rows.extend(check.fitted.iter().map(|h| Holdout {
        device: "fitted on".into(),
        ..h.clone()
    }));
    rows.extend(check.steps.iter().cloned());
    let mut d = Document::new("CPU kernel model: each CPU predicted by a fit on the others")
        .summary("CPUs", cpus)
        .table(table(&rows, &cols, style))
        .note("class = whose kernels (ridgeline: its own; onednn: the libraries PyTorch calls, oneDNN and MKL, and the published sets' MKL and OpenBLAS), the kernel class and pass. error = (predicted - measured) / measured. Rows held out `all` pool every held-out CPU; a held-out CPU's 90 % interval comes from the log ratios the other CPUs show when each is held out of a fit on the rest. `fitted on` rows: the model fitted on every CPU, judged on its own kernels (its residuals, not a validation). `steps` rows: each CPU's whole training steps of ridgeline's CPU executor (the self-check's runs), predicted uncalibrated from the device file as `predict` times them, by the model fitted without that CPU where another CPU has the executor's kernels, else by the model fitted with it (`fitted on`). Fitted on kernel measurements only; steps are never fitted on.");
    if let Some(why) = &check.not_left_out {
        d = d.note(format!("no CPU left out: {why}"));
    }
    d
}

/// `validate published`: the model's counts against the reference layer tables and \[004\]
/// Table II.
pub fn published(v: &Published, style: Style) -> Document {
    let cols = tables::published_cols();
    let mut d = Document::new("The model against published figures");
    for (k, val) in tables::published_summary_lines(v, style) {
        d = d.summary(k, val);
    }
    let mut d = d.table(table(&v.table2, &cols, style)).note(
        "Published: [004] Table II and §IV-A, measured on V100 with TensorFlow 2.5 and automatic mixed precision (data/evidence/reference/ibrahim2021-table2.toml). Model: 16-bit activations, one sample; the published FLOPs and HBM bytes are profiler measurements, which count what the framework and cuDNN add to the layers' own work.",
    );
    for c in &v.layers {
        for m in &c.mismatches {
            d = d.note(format!("{}: {m}", c.workload));
        }
    }
    d
}

/// What `validate --format json` prints of validated steps: the steps, their summary and
/// the layer passes furthest off.
#[derive(Serialize)]
pub struct StepsReport<'a> {
    system: &'a str,
    device: &'a str,
    device_kind: ridgeline_model::system::DeviceKind,
    steps: &'a [StepPoint],
    summary: &'a Summary,
    worst_layers: &'a [LayerPoint],
    #[serde(skip_serializing_if = "Option::is_none")]
    artifacts: Option<&'a Path>,
}

impl<'a> StepsReport<'a> {
    /// Validation `v` with its `top` layer passes furthest off (`artifacts`: the
    /// self-check's directory).
    pub fn new(v: &'a Validation, top: usize, artifacts: Option<&'a Path>) -> StepsReport<'a> {
        StepsReport {
            system: &v.system,
            device: &v.device,
            device_kind: v.device_kind,
            steps: &v.steps,
            summary: &v.summary,
            worst_layers: &v.worst_layers[..top.min(v.worst_layers.len())],
            artifacts,
        }
    }

    /// The layer passes furthest off.
    pub fn worst(&self) -> &'a [LayerPoint] {
        self.worst_layers
    }
}

/// Validated steps: predicted against measured (`uncalibrated`: timed with no profile;
/// `artifacts`: the self-check's directory).
pub fn steps(
    v: &Validation,
    artifacts: Option<&Path>,
    uncalibrated: bool,
    style: Style,
) -> Document {
    let step_cols = tables::step_cols();
    let mut d = Document::new(format!(
        "Validation: predicted vs measured training steps on {}",
        v.system
    ));
    for (k, val) in tables::summary_lines(v) {
        d = d.summary(k, val);
    }
    if let Some(dir) = artifacts {
        d = d.summary(
            "artifacts",
            format!(
                "{} (workloads-before.jsonl, suite.jsonl, profile.toml, workloads-after.jsonl, workloads.jsonl, validation.json, report/)",
                dir.display()
            ),
        );
    }
    let how = if uncalibrated && v.device_kind == ridgeline_model::system::DeviceKind::Cpu {
        "Predictions with no calibration: a CPU's layers timed by the CPU kernel model from the device file (fitted on kernel measurements of the CPUs `ridgeline validate transfer --cpu` names; where this CPU is one of them, its own kernels are in the fit), as `predict` times them"
    } else if uncalibrated {
        "Predictions with no calibration: a GPU's layers timed by the transferred kernel model from the device file (fitted on kernel measurements of other GPUs; its tensor-core classes on ridgeline's own kernel records and published ones, those of this GPU among them), as `predict` times them"
    } else {
        "Predictions from the calibrated profile alone (micro-kernel records)"
    };
    d.table(table(&v.steps, &step_cols, style)).note(format!(
        "{how}; the workload measurements are never fitted. Error = (predicted - measured) / measured."
    ))
}

/// The worst layer passes of a validation, as a table of their own.
pub fn worst_layers(worst: &[LayerPoint], style: Style) -> Document {
    Document::new("Layer passes furthest off, in seconds").table(table(
        worst,
        &tables::layer_cols(),
        style,
    ))
}

/// `validate --measured runs.jsonl`: imported runs against `predict`.
pub fn runs(v: &RunValidation, measured: &Path, style: Style) -> Document {
    let cols = tables::run_check_cols();
    let mut d = Document::new(format!(
        "Validation: imported runs against predict on {} ({}), {}, stack {}",
        v.system, v.device, v.precision, v.stack
    ))
    .summary("measured", measured.display().to_string())
    .summary("layers timed by", v.timed_by.clone());
    for (k, val) in tables::run_summary_lines(v) {
        d = d.summary(k, val);
    }
    let mut d = d.table(table(&v.runs, &cols, style)).note(
        "Each run predicted on its nodes, with the system's node holding the run's accelerators, at its global batch, for its epochs, training samples and evaluations. curve = the epochs ridgeline's convergence data gives at that global batch (empty: it has none for the workload). Epoch = training only; time to train = run_start to run_stop (predicted: the run's epochs with their evaluations, and the staging where the run timed it). Nothing is fitted on the runs. Error = (predicted - measured) / measured.",
    );
    for s in &v.skipped {
        d = d.note(format!("not predicted: {s}"));
    }
    d
}

/// `validate ddp-trace`: the step simulator against a traced data-parallel step.
pub fn ddp_trace(c: &SimCheck, style: Style) -> Document {
    let s = |v: f64| style.seconds(ridgeline_model::units::Seconds::new(v));
    Document::new(format!(
        "The step simulator against a measured data-parallel step: {}",
        c.workload
    ))
    .summary("measured", c.trace.clone())
    .summary(
        "ranks",
        c.ranks.map_or_else(|| "not said".into(), |r| r.to_string()),
    )
    .summary(
        "step",
        format!(
            "measured {} (mean of {} steps), simulated {} ({:+.1}%)",
            s(c.measured_step_s),
            c.steps,
            s(c.simulated_step_s),
            100.0 * c.error
        ),
    )
    .summary(
        "buckets",
        format!(
            "{} allreduces a step measured, {} simulated ({} backward)",
            c.buckets_measured,
            c.buckets_simulated,
            if c.overlap { "beside" } else { "after" }
        ),
    )
    .summary(
        "communication",
        format!(
            "{} a step; after backward: measured {}, simulated {}",
            s(c.measured_comm_s),
            s(c.measured_exposed_s),
            s(c.simulated_exposed_s)
        ),
    )
    .note(
        "The simulator is given the measurement's own parts (each layer's forward and backward; the time outside the layers, the ops that are no layer or the copies into buckets, spread over backward by gradient bytes; each bucket's allreduce; the optimizer) and puts them together as it puts predictions together (DDP's buckets, each allreduced beside backward once full): this measures the overlap and bucketing, not the parts' prediction.",
    )
}
