//! The converter of NeuSight's measured kernels (Lee, Phanishayee, Mahajan, ASPLOS 2025;
//! <https://github.com/trsharm25/NeuSight>, MIT licence) into a [`KernelSet`].
//!
//! NeuSight's `scripts/asplos/data/dataset/train/collect/<op>/p2.1.0/<GPU>.csv` hold one row
//! per measured operator: its latency in milliseconds (the mean of the fastest of repeated
//! runs, timed with CUDA events; `neusight/Dataset/collect.py`) and its shape, in FP32 with
//! PyTorch 2.1 and cuDNN 8.9. The shapes follow `collect.py`:
//! - `bmm`: `B, M, N, K` multiply `B x M x N` by `B x N x K`: `batch` products with `m = M`
//!   rows, inner dimension `k = N` and `n = K` columns;
//! - `linear`: `torch.nn.Linear(N, K)` (with bias) on a `B x M x N` input: one product of
//!   `B x M` rows (kept as `batch = B`, `m = M`), inner `N`, `K` columns;
//! - `conv`: `torch.nn.Conv2d(Input_Channel, Output_Channel, Kernel_Szie, Stride, Padding)`
//!   without bias on `B x Input_Channel x Input_Size x Input_Size`, with the algorithm
//!   cuDNN ran it with, from the kernels its profile names (`Kernels`:
//!   [`ConvAlgorithm::of_kernels`]);
//! - the vector ops (`add`, `mul`, `div`, `pow` and their scalar forms `addu`, ..., `relu`,
//!   `gelu`, `tanh`, `softmax`, `ln` for layer norm) on `B x H`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use ridgeline_model::transfer::{Class, Product, VectorOp};

use crate::dataset::{
    ConvAlgorithm, ConvOp, ConvSample, GemmSample, KernelSet, LabelOp, LabelSet, Source, StepLabel,
    VectorSample,
};
use crate::error::{Error, Result};

/// Where the kernels are in a checkout of the repository.
pub const COLLECT: &str = "scripts/asplos/data/dataset/train/collect";

/// The PyTorch directory of the measurements converted.
pub const TORCH: &str = "p2.1.0";

/// NeuSight's device names and the ridgeline devices they are.
pub const DEVICES: [(&str, &str); 6] = [
    ("Tesla P4", "p4"),
    ("Tesla T4", "t4"),
    ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
];

/// Where the per-operator measurements of whole training steps are in a checkout.
pub const LABELS: &str = "scripts/asplos/label";

/// Where NeuSight's test set of kernels is in a checkout: kernels of the training GPUs at
/// other shapes, and of GPUs outside the training set.
pub const TEST: &str = "scripts/asplos/data/dataset/test";

/// The GPUs of the test set whose kernels the set was not measured on, and the ridgeline
/// devices they are: only their kernels are converted (the others' are GPUs the model is
/// fitted on).
pub const TEST_DEVICES: [(&str, &str); 2] = [
    ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"),
    ("NVIDIA L4", "l4"),
];

/// The test set's files and their operator (`None`: each row's `OPName`); `vec.csv` repeats
/// the others' rows and `habitat.csv` is another tool's.
const TEST_FILES: [(&str, Option<&str>); 5] = [
    ("bmm.csv", Some("bmm")),
    ("linear.csv", Some("linear")),
    ("elem.csv", None),
    ("ln.csv", Some("ln")),
    ("softmax.csv", Some("softmax")),
];

/// NeuSight's label directories of GPUs whose kernels the set was not measured on, and the
/// ridgeline devices they are. (The MI250's labels are of one of its two GCDs, which no
/// device file describes; the PCIe A100 and V100 labels are of GPUs the model is fitted on.)
pub const LABEL_DEVICES: [(&str, &str); 5] = [
    ("NVIDIA_H100_80GB_HBM3", "h100-sxm5-80gb"),
    ("NVIDIA_L4", "l4"),
    ("NVIDIA_A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("AMD_Instinct_MI100", "mi100"),
    ("AMD_Instinct_MI210", "mi210"),
];

#[derive(Deserialize)]
struct LabelRow {
    op: String,
    target: String,
    meta: String,
    input_shapes: String,
    output_shape: String,
    fw_latency: Option<f64>,
    bw_latency: Option<f64>,
    #[serde(rename = "Name")]
    name: String,
}

/// A shape as the labels write it: `[[4, 1024], [1]]` (a list of shapes) or `(4, 1024)`.
fn shapes(text: &str) -> Option<Vec<Vec<u64>>> {
    let json = text.replace('(', "[").replace(')', "]").replace(",]", "]");
    let v: serde_json::Value = serde_json::from_str(&json).ok()?;
    let one = |v: &serde_json::Value| -> Option<Vec<u64>> {
        v.as_array()?
            .iter()
            .map(serde_json::Value::as_u64)
            .collect()
    };
    match v.as_array()?.first() {
        Some(serde_json::Value::Array(_)) => v.as_array()?.iter().map(one).collect(),
        _ => Some(vec![one(&v)?]),
    }
}

/// What a label row computes, in the kernel set's terms: `(op, batch, m, n, k)`; `None`
/// for the rows that run no kernel of a class the set has (views, sizes, copies,
/// embeddings).
fn label_op(r: &LabelRow) -> Option<(Class, u64, u64, u64, u64)> {
    let module = if r.op == "call_module" {
        r.meta.rsplit("<class '").next()?.split('\'').next()?
    } else {
        ""
    };
    let ins = shapes(&r.input_shapes)?;
    let out = shapes(&r.output_shape)?.into_iter().next()?;
    let elements: u64 = out.iter().product();
    let vector = |op: VectorOp| Some((Class::Vector(op), 1, elements, 1, 1));
    let big = |s: &Vec<u64>| s.iter().product::<u64>() == elements;
    // A binary op between two tensors of the output's size, or with a scalar.
    let binary = |two: VectorOp, one: VectorOp| {
        let full = ins.iter().filter(|s| big(s)).count();
        vector(if full >= 2 { two } else { one })
    };
    let target = r.target.as_str();
    match (r.op.as_str(), module) {
        (_, "torch.nn.modules.linear.Linear") => {
            let k = *ins.first()?.last()?;
            let n = *out.last()?;
            Some((Class::Product(Product::Linear), 1, elements / n, n, k))
        }
        (_, "torch.nn.modules.normalization.LayerNorm") => vector(VectorOp::Ln),
        (_, "torch.nn.modules.dropout.Dropout") => vector(VectorOp::Relu),
        (_, "torch.nn.modules.activation.ReLU") => vector(VectorOp::Relu),
        (_, "torch.nn.modules.activation.Tanh") => vector(VectorOp::Tanh),
        ("call_module", _) => None,
        ("call_function", _) if elements < 2 => None,
        ("call_function", _) if target.contains("addmm") => {
            let (a, b) = (ins.get(1)?, ins.get(2)?);
            Some((Class::Product(Product::Linear), 1, a[0], b[1], a[1]))
        }
        ("call_function", _) if target.contains("matmul") || target.contains("bmm") => {
            let (a, b) = (ins.first()?, ins.get(1)?);
            let (m, k, n) = (a[a.len() - 2], a[a.len() - 1], b[b.len() - 1]);
            let batch: u64 = a[..a.len() - 2].iter().product();
            Some((Class::Product(Product::Bmm), batch.max(1), m, n, k))
        }
        ("call_function", _) if target.contains("softmax") => vector(VectorOp::Softmax),
        ("call_function", _) if target.contains("layer_norm") => vector(VectorOp::Ln),
        ("call_function", _) if target.contains("gelu") => vector(VectorOp::Gelu),
        ("call_function", _) if target.contains("tanh") => vector(VectorOp::Tanh),
        ("call_function", _) if target.contains("dropout") => vector(VectorOp::Relu),
        ("call_function", _) if target.contains("pow") => vector(VectorOp::Powu),
        ("call_function", _) if target.contains("where") => vector(VectorOp::Add),
        ("call_function", _) if target.ends_with("function add>") => {
            binary(VectorOp::Add, VectorOp::Addu)
        }
        ("call_function", _) if target.ends_with("function sub>") => {
            binary(VectorOp::Add, VectorOp::Addu)
        }
        ("call_function", _) if target.ends_with("function mul>") => {
            binary(VectorOp::Mul, VectorOp::Mulu)
        }
        ("call_function", _) if target.ends_with("function truediv>") => {
            binary(VectorOp::Div, VectorOp::Divu)
        }
        _ => None,
    }
}

/// Converts NeuSight's per-operator measurements of training steps under `dir` (a checkout
/// at `commit`) on the GPUs of [`LABEL_DEVICES`]; `None` when the checkout has none.
pub fn convert_labels(dir: &Path, commit: &str) -> Result<Option<LabelSet>> {
    let root = dir.join(LABELS);
    if !root.is_dir() {
        return Ok(None);
    }
    let mut set = LabelSet {
        source: Source {
            description: "per-operator forward and backward times of whole FP32 training \
                          steps (BERT, GPT-2, GPT-3, OPT, Switch) measured by NeuSight on \
                          GPUs outside the kernel set"
                .into(),
            repository: "https://github.com/trsharm25/NeuSight".into(),
            commit: commit.to_owned(),
            paths: format!(
                "{LABELS}/<GPU>/<model>-train-<sequence>-<batch>.csv (operators) and \
                 <model>-train-<sequence>-<batch>[-<split>].json (steps); \
                 {MODEL_CONFIGS}/<model>.json (models)"
            ),
            licence: "MIT".into(),
            copyright: "Copyright (c) 2025 Georgia Institute of Technology and Microsoft \
                        Corporation"
                .into(),
            measured_with: "PyTorch 2.1, Hugging Face transformers 4.38.1, FP32 (TF32 off), \
                            eager attention, dropout on; each operator of a torch.fx trace \
                            timed in place with CUDA events, forward and backward \
                            (fw_latency, bw_latency, milliseconds converted to seconds); rows \
                            that run no kernel of a class the kernel set has (views, copies, \
                            embeddings) are left out. Steps: forward and backward of the whole \
                            model (no optimizer step) on one GPU, the mean of the 5 fastest of \
                            25 iterations; on 4 GPUs (Megatron-LM, dp4, tp4, pp4 with one \
                            micro-batch) the whole training step with Adam"
                .into(),
            converted_by: format!("ridgeline import neusight DIR --commit {commit}"),
            devices: BTreeMap::new(),
            timing: None,
            threads: None,
        },
        ops: Vec::new(),
        steps: Vec::new(),
        models: BTreeMap::new(),
    };
    for (gpu, device) in LABEL_DEVICES {
        for step in step_labels(&root.join(gpu), device)? {
            set.source.devices.insert(gpu.to_owned(), device.to_owned());
            if !set.models.contains_key(&step.model) {
                let path = dir.join(MODEL_CONFIGS).join(format!("{}.json", step.model));
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
                set.models.insert(step.model.clone(), text);
            }
            set.steps.push(step);
        }
    }
    for (gpu, device) in LABEL_DEVICES {
        let Ok(entries) = std::fs::read_dir(root.join(gpu)) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension().is_some_and(|x| x == "csv")
                    && p.file_name()
                        .is_some_and(|n| n.to_string_lossy().contains("-train-"))
            })
            .collect();
        files.sort();
        for path in files {
            let step = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut reader = csv::Reader::from_path(&path)
                .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
            for (i, row) in reader.deserialize::<LabelRow>().enumerate() {
                let r = row.map_err(|e| {
                    Error::Input(format!("{}: line {}: {e}", path.display(), i + 2))
                })?;
                for (col, v) in [("fw_latency", r.fw_latency), ("bw_latency", r.bw_latency)] {
                    if let Some(v) = v
                        && !(v.is_finite() && (0.0..3.6e6).contains(&v))
                    {
                        return Err(Error::Input(format!(
                            "{}: line {}: column `{col}` is {v} ms, not an op's time (at \
                             least 0, under an hour); the file is damaged",
                            path.display(),
                            i + 2
                        )));
                    }
                }
                let forward_s = r.fw_latency.unwrap_or(0.0) * 1e-3;
                let Some((op, batch, m, n, k)) = label_op(&r) else {
                    continue;
                };
                if forward_s.is_nan() || forward_s <= 0.0 || [batch, m, n, k].contains(&0) {
                    continue;
                }
                set.source.devices.insert(gpu.to_owned(), device.to_owned());
                set.ops.push(LabelOp {
                    device: device.to_owned(),
                    step: step.clone(),
                    node: r.name,
                    op,
                    batch,
                    m,
                    n,
                    k,
                    forward_s,
                    backward_s: r.bw_latency.unwrap_or(0.0).max(0.0) * 1e-3,
                });
            }
        }
    }
    Ok(Some(set))
}

/// Where the models' configurations are in a checkout.
pub const MODEL_CONFIGS: &str = "scripts/asplos/data/DLmodel_configs";

/// A whole step's times as NeuSight writes them (milliseconds).
#[derive(Deserialize)]
struct StepJson {
    e2e_latency: f64,
    #[serde(default)]
    fw_latency: Option<f64>,
    #[serde(default)]
    bwall_latency: Option<f64>,
}

/// The training steps measured in `dir` (one GPU's label directory) as `device`: files
/// `<model>-train-<seq>-<batch>[-<split>].json`.
fn step_labels(dir: &Path, device: &str) -> Result<Vec<StepLabel>> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for path in files {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parts: Vec<&str> = stem.split('-').collect();
        let (model, phase, seq, batch, parallel) = match parts.as_slice() {
            [m, p, s, b] => (*m, *p, *s, *b, ""),
            [m, p, s, b, x] => (*m, *p, *s, *b, *x),
            _ => continue,
        };
        if phase != "train" {
            continue;
        }
        let bad = |what: &str| Error::Input(format!("{}: {what}", path.display()));
        let (Ok(seq), Ok(batch)) = (seq.parse::<u64>(), batch.parse::<u64>()) else {
            return Err(bad(
                "the name is not <model>-train-<seq>-<batch>[-<split>].json",
            ));
        };
        let text = std::fs::read_to_string(&path).map_err(|e| bad(&e.to_string()))?;
        let j: StepJson = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
        let ms = |v: Option<f64>| v.unwrap_or(0.0).max(0.0) * 1e-3;
        out.push(StepLabel {
            device: device.to_owned(),
            model: model.to_owned(),
            batch,
            seq,
            parallel: parallel.to_owned(),
            forward_s: ms(j.fw_latency),
            backward_s: ms(j.bwall_latency),
            step_s: j.e2e_latency * 1e-3,
        });
    }
    Ok(out)
}

#[derive(Deserialize)]
struct Row {
    #[serde(rename = "OPName", default)]
    op: Option<String>,
    #[serde(rename = "Latency")]
    latency_ms: f64,
    #[serde(rename = "Device")]
    device: String,
    #[serde(rename = "B")]
    b: u64,
    #[serde(rename = "M", default)]
    m: Option<u64>,
    #[serde(rename = "N", default)]
    n: Option<u64>,
    #[serde(rename = "K", default)]
    k: Option<u64>,
    #[serde(rename = "H", default)]
    h: Option<u64>,
    #[serde(rename = "Input_Channel", default)]
    c_in: Option<u64>,
    #[serde(rename = "Output_Channel", default)]
    c_out: Option<u64>,
    #[serde(rename = "Kernel_Szie", default)]
    kernel: Option<u64>,
    #[serde(rename = "Input_Size", default)]
    size: Option<u64>,
    #[serde(rename = "Stride", default)]
    stride: Option<u64>,
    #[serde(rename = "Padding", default)]
    padding: Option<u64>,
    #[serde(rename = "Kernels", default)]
    kernels: Option<String>,
}

/// An empty kernel set of NeuSight's files at `paths` of `commit`, described as
/// `description`, with the provenance every NeuSight set shares.
fn empty(description: &str, paths: String, commit: &str) -> KernelSet {
    KernelSet {
        source: Source {
            description: description.to_owned(),
            repository: "https://github.com/trsharm25/NeuSight".into(),
            commit: commit.to_owned(),
            paths,
            licence: "MIT".into(),
            copyright: "Copyright (c) 2025 Georgia Institute of Technology and Microsoft \
                        Corporation"
                .into(),
            measured_with: "PyTorch 2.1, CUDA 12.1, cuDNN 8.9; FP32; milliseconds converted \
                            to seconds; the mean of the fastest of repeated runs timed with \
                            CUDA events (neusight/Dataset/collect.py)"
                .into(),
            converted_by: format!("ridgeline import neusight DIR --commit {commit}"),
            devices: BTreeMap::new(),
            timing: None,
            threads: None,
        },
        gemm: Vec::new(),
        conv: Vec::new(),
        vector: Vec::new(),
    }
}

/// Converts the test set's kernels of GPUs outside the training set ([`TEST_DEVICES`]) under
/// `dir` (a checkout of NeuSight at `commit`); `None` where the checkout has no test set.
/// They validate, never fit.
pub fn convert_test(dir: &Path, commit: &str) -> Result<Option<KernelSet>> {
    let test = dir.join(TEST);
    if !test.is_dir() {
        return Ok(None);
    }
    let mut set = empty(
        "FP32 operator latencies of NeuSight's test set on GPUs outside its training set \
         (validation only)",
        format!("{TEST}/{{bmm,linear,elem,ln,softmax}}.csv"),
        commit,
    );
    for (file, op) in TEST_FILES {
        let path = test.join(file);
        if path.is_file() {
            convert_file(&path, op, &TEST_DEVICES, &mut set)?;
        }
    }
    Ok((!(set.gemm.is_empty() && set.vector.is_empty())).then_some(set))
}

/// Converts the measurements under `dir` (a checkout of NeuSight at `commit`).
pub fn convert(dir: &Path, commit: &str) -> Result<KernelSet> {
    let collect = dir.join(COLLECT);
    let ops = std::fs::read_dir(&collect).map_err(|e| {
        Error::Input(format!(
            "{}: {e}; give the directory of a NeuSight checkout (git clone \
             https://github.com/trsharm25/NeuSight)",
            collect.display()
        ))
    })?;
    let mut ops: Vec<String> = ops
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(TORCH).is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ops.sort();
    let mut set = empty(
        "FP32 operator latencies measured by NeuSight on five NVIDIA GPUs",
        format!("{COLLECT}/<op>/{TORCH}/<GPU>.csv"),
        commit,
    );
    for op in &ops {
        let mut files: Vec<_> = std::fs::read_dir(collect.join(op).join(TORCH))
            .map_err(|e| Error::Input(format!("{}: {e}", collect.join(op).display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "csv"))
            .collect();
        files.sort();
        for path in files {
            convert_file(&path, Some(op), &DEVICES, &mut set)?;
        }
    }
    if set.gemm.is_empty() && set.conv.is_empty() && set.vector.is_empty() {
        return Err(Error::Input(format!(
            "{}: no measurements under <op>/{TORCH}/",
            collect.display()
        )));
    }
    Ok(set)
}

/// Converts `path`'s rows of `op` (each row's own `OPName` where `None`) on `devices` into
/// `set`. With the training devices ([`DEVICES`]) a row of another device is an error; with
/// the test set's ([`TEST_DEVICES`]) it is a GPU the model is fitted on, and skipped.
fn convert_file(
    path: &Path,
    op: Option<&str>,
    devices: &[(&str, &str)],
    set: &mut KernelSet,
) -> Result<()> {
    let at = |line: usize, what: String| {
        Error::Input(format!("{}: line {line}: {what}", path.display()))
    };
    let test = devices == TEST_DEVICES;
    let mut reader = csv::Reader::from_path(path)
        .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    for (i, row) in reader.deserialize::<Row>().enumerate() {
        let line = i + 2;
        let r = row.map_err(|e| at(line, e.to_string()))?;
        let known = devices
            .iter()
            .find(|(name, _)| *name == r.device)
            .map(|(_, id)| (*id).to_owned());
        let device = match known {
            Some(d) => d,
            None if test => continue,
            None => {
                return Err(at(
                    line,
                    format!(
                        "device `{}` is not one ridgeline knows; add it to \
                         calibrate::neusight::DEVICES with its device file",
                        r.device
                    ),
                ));
            }
        };
        let op = match (op, r.op.as_deref()) {
            (Some(op), _) | (None, Some(op)) => op.to_owned(),
            (None, None) => return Err(at(line, "column `OPName` is missing".into())),
        };
        let op = op.as_str();
        let class = Class::parse(op)
            .filter(|c| matches!(c, Class::Product(_) | Class::Vector(_)) || *c == Class::CONV)
            .ok_or_else(|| {
                at(
                    line,
                    format!(
                        "op `{op}` is none the kernel model has a class for (`bmm`, \
                         `linear`, `conv` or a vector op: {}); add it to \
                         ridgeline_model::transfer::Class",
                        VectorOp::ALL.map(VectorOp::name).join(", ")
                    ),
                )
            })?;
        set.source.devices.insert(r.device.clone(), device.clone());
        let need = |v: Option<u64>, col: &str| {
            v.ok_or_else(|| at(line, format!("column `{col}` is missing for `{op}`")))
        };
        if !(r.latency_ms.is_finite() && r.latency_ms > 0.0 && r.latency_ms < 3.6e6) {
            return Err(at(
                line,
                format!(
                    "column `Latency` is {} ms, not a kernel's time (positive, under an \
                     hour); the file is damaged",
                    r.latency_ms
                ),
            ));
        }
        if r.b == 0 {
            return Err(at(line, "column `B` is 0; a batch is at least 1".into()));
        }
        let latency_s = r.latency_ms * 1e-3;
        match class {
            Class::Product(op) => set.gemm.push(GemmSample {
                device,
                op,
                batch: r.b,
                m: need(r.m, "M")?,
                n: need(r.k, "K")?,
                k: need(r.n, "N")?,
                latency_s,
            }),
            Class::Vector(op) => set.vector.push(VectorSample {
                device,
                op,
                batch: r.b,
                h: need(r.h, "H")?,
                latency_s,
            }),
            _ => set.conv.push(ConvSample {
                device,
                op: ConvOp::Conv,
                batch: r.b,
                c_in: need(r.c_in, "Input_Channel")?,
                c_out: need(r.c_out, "Output_Channel")?,
                size: need(r.size, "Input_Size")?,
                kernel: need(r.kernel, "Kernel_Szie")?,
                stride: need(r.stride, "Stride")?,
                padding: need(r.padding, "Padding")?,
                algorithm: {
                    let kernels = r
                        .kernels
                        .as_deref()
                        .ok_or_else(|| at(line, "column `Kernels` is missing for `conv`".into()))?;
                    ConvAlgorithm::of_kernels(kernels).ok_or_else(|| {
                        at(
                            line,
                            format!(
                                "column `Kernels`: `{kernels}` names no cuDNN algorithm \
                                 ridgeline knows (implicit GEMM, Winograd, FFT or GEMM); \
                                 add its kernel's name to dataset::ConvAlgorithm::of_kernels"
                            ),
                        )
                    })?
                },
                latency_s,
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/neusight")
    }

    /// A directory of its own, removed when dropped: tests run in parallel.
    fn temp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn converts_each_family_in_ridgeline_terms() {
        let set = convert(&fixture(), "db1fdc9").unwrap();
        assert_eq!(
            (set.gemm.len(), set.conv.len(), set.vector.len()),
            (3, 3, 3)
        );
        // bmm 13,27,15,29 on a T4 multiplies 13 x (27 x 15) by (15 x 29): k is N.
        let g = &set.gemm[0];
        assert_eq!((g.device.as_str(), g.op), ("t4", Product::Bmm));
        assert_eq!((g.batch, g.m, g.n, g.k), (13, 27, 29, 15));
        let c = &set.conv[0];
        assert_eq!(
            (
                c.batch, c.c_in, c.c_out, c.kernel, c.size, c.stride, c.padding
            ),
            (38, 893, 326, 3, 5, 1, 1)
        );
        assert!((c.latency_s - 2.7097493012746177e-3).abs() < 1e-12);
        assert_eq!(set.vector[0].op, VectorOp::Relu);
        assert_eq!(set.source.devices["Tesla T4"], "t4");
        assert_eq!(set.source.commit, "db1fdc9");
    }

    #[test]
    fn a_set_reads_back_as_written_to_six_digits() {
        let set = convert(&fixture(), "db1fdc9").unwrap();
        let dir_tmp = temp();
        let dir = dir_tmp.path();
        set.write(dir).unwrap();
        let back = KernelSet::read(dir).unwrap();
        assert_eq!(back.source, set.source);
        assert_eq!(back.gemm.len(), 3);
        for (a, b) in back.conv.iter().zip(&set.conv) {
            assert!((a.latency_s / b.latency_s - 1.0).abs() < 1e-5);
            assert_eq!((a.batch, a.c_in, a.size), (b.batch, b.c_in, b.size));
        }
    }

    /// A convolution keeps the algorithm cuDNN ran it with, from its kernels' names; a row
    /// without them, or naming none ridgeline knows, is an error naming the file and line.
    #[test]
    fn convolutions_keep_cudnns_algorithm_and_a_row_without_one_is_refused() {
        let set = convert(&fixture(), "db1fdc9").unwrap();
        let algorithms: Vec<ConvAlgorithm> = set.conv.iter().map(|c| c.algorithm).collect();
        assert_eq!(
            algorithms,
            [
                ConvAlgorithm::WinogradNonfused,
                ConvAlgorithm::ImplicitGemm,
                ConvAlgorithm::WinogradNonfused
            ]
        );
        for (kernels, algorithm) in [
            (
                "cudnn_infer_ampere_scudnn_winograd_128x128_ldg1_ldg4",
                ConvAlgorithm::Winograd,
            ),
            (
                "void implicit_convolve_sgemm<float, float>",
                ConvAlgorithm::ImplicitGemm,
            ),
            ("void fft2d_r2c_32x32<float>;fft2d_c2r", ConvAlgorithm::Fft),
            (
                "cudnn::cnn::im2col4d_kernel;maxwell_sgemm_128x64_nn",
                ConvAlgorithm::Gemm,
            ),
        ] {
            assert_eq!(
                ConvAlgorithm::of_kernels(kernels),
                Some(algorithm),
                "{kernels}"
            );
        }
        let head = "OPName,Latency,Device,B,Input_Channel,Output_Channel,Kernel_Szie,\
                    Input_Size,Stride,Padding";
        for (row, says) in [
            (
                format!("{head}\nconv,1.0,Tesla T4,2,8,8,3,8,1,1\n"),
                "`Kernels`",
            ),
            (
                format!("{head},Kernels\nconv,1.0,Tesla T4,2,8,8,3,8,1,1,;my_conv_kernel\n"),
                "my_conv_kernel",
            ),
        ] {
            let dir_tmp = temp();
            let dir = dir_tmp.path();
            let ops = dir.join(COLLECT).join("conv").join(TORCH);
            std::fs::create_dir_all(&ops).unwrap();
            std::fs::write(ops.join("z.csv"), row).unwrap();
            let e = convert(dir, "db1fdc9").unwrap_err().to_string();
            assert!(e.contains("z.csv: line 2") && e.contains(says), "{e}");
        }
    }

    #[test]
    fn bad_sources_and_sets_name_the_file_line_and_fix() {
        // An unknown device.
        let dir_tmp = temp();
        let dir = dir_tmp.path();
        let ops = dir.join(COLLECT).join("relu").join(TORCH);
        std::fs::create_dir_all(&ops).unwrap();
        std::fs::write(
            ops.join("x.csv"),
            "OPName,Latency,Device,B,H\nrelu,0.04,Radeon 9000,1,8\n",
        )
        .unwrap();
        let e = convert(dir, "db1fdc9").unwrap_err().to_string();
        assert!(
            e.contains("x.csv: line 2") && e.contains("Radeon 9000"),
            "{e}"
        );
        // A GEMM row without its K.
        let ops = dir.join(COLLECT).join("bmm").join(TORCH);
        std::fs::create_dir_all(&ops).unwrap();
        std::fs::write(
            ops.join("y.csv"),
            "OPName,Latency,Device,B,M,N\nbmm,0.04,Tesla T4,1,8,8\n",
        )
        .unwrap();
        let e = convert(dir, "db1fdc9").unwrap_err().to_string();
        assert!(e.contains("y.csv: line 2") && e.contains("`K`"), "{e}");
        // An operator the kernel model has no class for.
        let fresh_tmp = temp();
        let ops = fresh_tmp.path().join(COLLECT).join("lstm").join(TORCH);
        std::fs::create_dir_all(&ops).unwrap();
        std::fs::write(
            ops.join("w.csv"),
            "OPName,Latency,Device,B,H\nlstm,0.04,Tesla T4,1,8\n",
        )
        .unwrap();
        let e = convert(fresh_tmp.path(), "db1fdc9")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("w.csv: line 2") && e.contains("op `lstm`") && e.contains("transfer::Class"),
            "{e}"
        );
        // Not a checkout at all.
        let e = convert(&dir.join("nothing"), "db1fdc9")
            .unwrap_err()
            .to_string();
        assert!(e.contains("NeuSight checkout"), "{e}");
        // A written set with a zero time is refused on reading, naming the row.
        let mut set = convert(&fixture(), "db1fdc9").unwrap();
        set.vector[1].latency_s = 0.0;
        let out_tmp = temp();
        let out = out_tmp.path();
        set.write(out).unwrap();
        let e = KernelSet::read(out).unwrap_err().to_string();
        assert!(
            e.contains("vector.csv.gz: row 2") && e.contains("latency_s 0"),
            "{e}"
        );
        // A written set whose vector op is none the model has a class for.
        let mut set = convert(&fixture(), "db1fdc9").unwrap();
        set.vector.truncate(1);
        set.write(out).unwrap();
        let path = out.join("vector.csv.gz");
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()),
            &mut text,
        )
        .unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, text.replace(",relu,", ",swish,").as_bytes()).unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let e = KernelSet::read(out).unwrap_err().to_string();
        assert!(e.contains("vector.csv.gz") && e.contains("swish"), "{e}");
    }

    #[test]
    fn labels_convert_to_products_and_vector_ops_and_skip_what_runs_no_kernel() {
        let set = convert_labels(&fixture(), "db1fdc9").unwrap().unwrap();
        let ops: Vec<(&str, u64, u64, u64, u64)> = set
            .ops
            .iter()
            .map(|o| (o.op.name(), o.batch, o.m, o.n, o.k))
            .collect();
        // addmm of 4096 x 1280 by 1280 x 3840; matmul of 4 x 20 products 1024 x 64 by
        // 64 x 1024; softmax over 4 x 20 x 1024 x 1024; 0.5 * x; Linear(1280, 50257) on
        // 4 x 1024 rows. The `size` call runs no kernel.
        assert_eq!(
            ops,
            [
                ("linear", 1, 4096, 3840, 1280),
                ("bmm", 80, 1024, 1024, 64),
                ("softmax", 1, 4 * 20 * 1024 * 1024, 1, 1),
                ("mulu", 1, 4 * 1024 * 5120, 1, 1),
                ("linear", 1, 4096, 50257, 1280),
            ]
        );
        let first = &set.ops[0];
        assert_eq!(first.device, "h100-sxm5-80gb");
        assert_eq!(first.step, "gpt2_large-train-1024-4");
        assert!((first.forward_s - 0.8972607970237731e-3).abs() < 1e-12);
        assert!((first.backward_s - 1.7588672161102294e-3).abs() < 1e-12);
        assert_eq!(
            set.source.devices["NVIDIA_H100_80GB_HBM3"],
            "h100-sxm5-80gb"
        );
        // Written and read back; a bad row is refused naming the row and field.
        let dir_tmp = temp();
        let dir = dir_tmp.path();
        set.write(dir).unwrap();
        assert_eq!(LabelSet::read(dir).unwrap().ops.len(), 5);
        let mut bad = set.clone();
        bad.ops[2].backward_s = -1.0;
        bad.write(dir).unwrap();
        let e = LabelSet::read(dir).unwrap_err().to_string();
        assert!(
            e.contains("ops.csv.gz: row 3") && e.contains("backward_s"),
            "{e}"
        );
        // A checkout without labels has none.
        assert!(
            convert_labels(&fixture().join("scripts"), "db1fdc9")
                .unwrap()
                .is_none()
        );
    }

    /// The checked-in set (data/evidence/kernels/neusight) reads and holds what the README says.
    /// The test set keeps the kernels of GPUs outside the training set (the H100's and
    /// L4's), each op from its file or its row, and skips the training GPUs' rows.
    #[test]
    fn the_test_set_keeps_the_gpus_outside_the_fit() {
        let set = convert_test(&fixture(), "db1fdc9").unwrap().unwrap();
        assert_eq!(set.devices(), ["h100-sxm5-80gb", "l4"]);
        let g: Vec<(&str, u64, u64, u64, u64)> = set
            .gemm
            .iter()
            .map(|s| (s.device.as_str(), s.batch, s.m, s.n, s.k))
            .collect();
        // `B, M, N, K` multiply `B x M x N` by `B x N x K`: inner `N`, `K` columns.
        assert_eq!(
            g,
            [
                ("h100-sxm5-80gb", 1280, 2048, 256, 2048),
                ("h100-sxm5-80gb", 2560, 2048, 2048, 96),
                ("l4", 192, 96, 196, 196)
            ]
        );
        assert!((set.gemm[0].latency_s / 50.2186e-3 - 1.0).abs() < 1e-6);
        let v: Vec<(&str, &str)> = set
            .vector
            .iter()
            .map(|s| (s.device.as_str(), s.op.name()))
            .collect();
        assert_eq!(v, [("l4", "add"), ("l4", "relu")]);
        assert!(set.source.paths.starts_with(TEST));
        // A checkout without a test set has none.
        assert!(
            convert_test(&fixture().join("scripts"), "db1fdc9")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_checked_in_set_reads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/neusight");
        let set = KernelSet::read(&dir).unwrap();
        assert_eq!(
            set.devices(),
            [
                "a100-pcie-40gb",
                "a100-pcie-80gb",
                "p100-pcie-16gb",
                "p4",
                "t4",
                "v100-pcie-32gb"
            ]
        );
        assert!(set.gemm.len() > 100_000 && set.conv.len() > 20_000 && set.vector.len() > 100_000);
        assert_eq!(set.source.licence, "MIT");
        let labels = LabelSet::read(&dir.join("labels")).unwrap();
        assert_eq!(labels.devices(), ["h100-sxm5-80gb", "l4", "mi100", "mi210"]);
        // Never a device the kernels were measured on.
        assert!(labels.devices().iter().all(|d| !set.devices().contains(d)));
        let test = KernelSet::read(&dir.join("test")).unwrap();
        assert_eq!(test.devices(), ["h100-sxm5-80gb", "l4"]);
        assert!(test.gemm.len() > 6_000 && test.vector.len() > 800);
    }
}
