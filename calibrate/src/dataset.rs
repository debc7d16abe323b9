//! Measured GPU kernels from other machines, the data a device-transferable kernel model is
//! fitted on (docs/ARCHITECTURE.md "Kernel data sets").
//!
//! A [`KernelSet`] is three tables, one per family of kernel, each row one kernel's shape,
//! the device it ran on (a ridgeline device name) and its time: GEMMs (batched and linear
//! layers), 2-D convolutions, and vector ops (element-wise, softmax, layer norm). On disk a
//! set is a directory of gzip-compressed CSV files (`gemm.csv.gz`, `conv.csv.gz`,
//! `vector.csv.gz`) and `SOURCE.toml`, which says where the measurements come from (the
//! repository, commit, paths and licence). Only what a model needs is kept: no kernel names,
//! launch grids or library versions beyond what `SOURCE.toml` records for the whole set;
//! of a convolution's kernels, only the algorithm they ran ([`ConvAlgorithm`]).

use std::io::{Read, Write};
use std::path::Path;

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use ridgeline_measure::ConvPass;
use ridgeline_measure::record::RecordPrecision;
use ridgeline_model::transfer::{Class, Product, VectorOp};

use crate::error::{Error, Result};

/// A GEMM: `batch` products of `m x k` by `k x n` (a linear layer is one product, its batch
/// folded into `m` by the source).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GemmSample {
    /// The ridgeline device name it ran on.
    pub device: String,
    /// The operator measured (`bmm`, `linear`).
    pub op: Product,
    /// Independent products.
    pub batch: u64,
    /// Rows of the output.
    pub m: u64,
    /// Columns of the output.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Seconds (written to 6 significant digits).
    #[serde(serialize_with = "six_digits")]
    pub latency_s: f64,
}

/// A 2-D convolution forward pass on square `size x size` inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConvSample {
    /// The ridgeline device name it ran on.
    pub device: String,
    /// The operator measured (`conv`).
    pub op: ConvOp,
    /// Batch.
    pub batch: u64,
    /// Input channels.
    pub c_in: u64,
    /// Output channels.
    pub c_out: u64,
    /// Input height and width.
    pub size: u64,
    /// Kernel height and width.
    pub kernel: u64,
    /// Stride.
    pub stride: u64,
    /// Padding on each side.
    pub padding: u64,
    /// The algorithm cuDNN ran it with (the kernels the source's profile names).
    pub algorithm: ConvAlgorithm,
    /// Seconds (written to 6 significant digits).
    #[serde(serialize_with = "six_digits")]
    pub latency_s: f64,
}

/// The operator a convolution table measures: a convolution (`conv`), the only one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConvOp {
    /// A convolution.
    Conv,
}

/// The algorithm cuDNN ran a convolution with, from the names of the kernels it launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConvAlgorithm {
    /// An implicit GEMM (`implicit_convolve_sgemm`, `scudnn_128x64_...`): the filters times
    /// the input's patches, gathered on the fly.
    ImplicitGemm,
    /// A Winograd kernel of small output tiles, fused (`scudnn_winograd_128x128_...`).
    Winograd,
    /// Winograd in separate kernels: the transforms and a batched GEMM between them
    /// (`winograd_nonfused::winogradforwarddata4x4`, ...).
    WinogradNonfused,
    /// FFT-based (`fft2d_...`).
    Fft,
    /// The input's patches unrolled into memory, then a GEMM (`im2col4d_kernel`,
    /// `explicit_convolve_sgemm`).
    Gemm,
}

impl ConvAlgorithm {
    /// The algorithm whose kernels `kernels` (the names of the kernels one call launched, in
    /// any separation) are; `None` where no name says.
    pub fn of_kernels(kernels: &str) -> Option<ConvAlgorithm> {
        let k = kernels.to_ascii_lowercase();
        Some(if k.contains("winograd_nonfused") {
            ConvAlgorithm::WinogradNonfused
        } else if k.contains("winograd") {
            ConvAlgorithm::Winograd
        } else if k.contains("fft") {
            ConvAlgorithm::Fft
        } else if k.contains("implicit_convolve") || k.contains("scudnn") {
            ConvAlgorithm::ImplicitGemm
        } else if k.contains("im2col") || k.contains("explicit_convolve") || k.contains("gemm") {
            ConvAlgorithm::Gemm
        } else {
            return None;
        })
    }
}

/// A vector op over `batch x h` elements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VectorSample {
    /// The ridgeline device name it ran on.
    pub device: String,
    /// The operator measured (`add`, `relu`, `softmax`, `ln`, ...).
    pub op: VectorOp,
    /// Rows.
    pub batch: u64,
    /// Elements per row.
    pub h: u64,
    /// Seconds (written to 6 significant digits).
    #[serde(serialize_with = "six_digits")]
    pub latency_s: f64,
}

/// One operator of a whole training step, measured in place: what it computes and its
/// forward and backward times (NeuSight's per-operator labels).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelOp {
    /// The ridgeline device name it ran on.
    pub device: String,
    /// The step it is part of (`bert_large-train-512-8`: model, phase, sequence, batch).
    pub step: String,
    /// The operator's node in the traced graph.
    pub node: String,
    /// Its class in the kernel set's terms: `linear`, `bmm` (then `batch`, `m`, `n`, `k`
    /// describe its product), or a vector op (`softmax`, `ln`, `gelu`, `add`, `mulu`, ...;
    /// then `m` is its elements and the rest 1).
    pub op: Class,
    /// Independent products.
    pub batch: u64,
    /// Rows of the output (a vector op: its elements).
    pub m: u64,
    /// Columns of the output.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Forward time, seconds (6 significant digits).
    #[serde(serialize_with = "six_digits")]
    pub forward_s: f64,
    /// Backward time, seconds (0 where the operator has no backward kernels).
    #[serde(serialize_with = "six_digits")]
    pub backward_s: f64,
}

/// One whole training step measured on one or more devices (NeuSight's step labels).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLabel {
    /// The ridgeline device name it ran on.
    pub device: String,
    /// The model (a configuration under `models/`: `bert_large`, `gpt2_large`, ...).
    pub model: String,
    /// Sequences per step (over every device of a data-parallel run).
    pub batch: u64,
    /// Tokens per sequence.
    pub seq: u64,
    /// How the step was split over devices: empty on one device, else `dp4`, `tp4` or
    /// `pp4_1` (4 devices; pipeline with 1 micro-batch).
    pub parallel: String,
    /// Forward time, seconds (0 where the run timed only the whole step).
    #[serde(serialize_with = "six_digits")]
    pub forward_s: f64,
    /// Backward time, seconds (0 where the run timed only the whole step).
    #[serde(serialize_with = "six_digits")]
    pub backward_s: f64,
    /// The step, seconds.
    #[serde(serialize_with = "six_digits")]
    pub step_s: f64,
}

/// Per-operator measurements of whole training steps on devices, the steps' own times and
/// the configurations of their models, with their source.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelSet {
    /// Where they come from.
    pub source: Source,
    /// The operators.
    pub ops: Vec<LabelOp>,
    /// The whole steps.
    pub steps: Vec<StepLabel>,
    /// The models' configurations (Hugging Face `config.json` text), by model name.
    pub models: std::collections::BTreeMap<String, String>,
}

const OPS: &str = "ops.csv.gz";
const STEPS: &str = "steps.csv.gz";
const MODELS: &str = "models";

impl LabelSet {
    /// Writes the set into `dir` (created if missing), replacing its files.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_source(dir, &self.source)?;
        write_table(&dir.join(OPS), &self.ops)?;
        write_table(&dir.join(STEPS), &self.steps)?;
        let models = dir.join(MODELS);
        let io = |p: &Path, e: std::io::Error| Error::Input(format!("{}: {e}", p.display()));
        std::fs::create_dir_all(&models).map_err(|e| io(&models, e))?;
        for (name, text) in &self.models {
            let path = models.join(format!("{name}.json"));
            std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        }
        Ok(())
    }

    /// Reads the set in `dir`; an error names the file, the row and the field. A set
    /// without steps (`steps.csv.gz`) or models (`models/`) has none.
    pub fn read(dir: &Path) -> Result<LabelSet> {
        let source = read_source(dir)?;
        let steps_path = dir.join(STEPS);
        let steps: Vec<StepLabel> = if steps_path.is_file() {
            read_table(&steps_path)?
        } else {
            Vec::new()
        };
        for (i, s) in steps.iter().enumerate() {
            let times = [s.forward_s, s.backward_s];
            let what = if !(s.step_s.is_finite() && s.step_s > 0.0) {
                format!("step_s {}: a time is positive", s.step_s)
            } else if times.iter().any(|t| !(t.is_finite() && *t >= 0.0)) {
                "forward_s and backward_s are not negative".to_owned()
            } else if s.batch == 0 || s.seq == 0 {
                "batch and seq are at least 1".to_owned()
            } else if !matches!(s.parallel.as_str(), "" | "dp4" | "tp4" | "pp4_1") {
                format!("parallel `{}`: one of \"\", dp4, tp4, pp4_1", s.parallel)
            } else {
                continue;
            };
            return Err(Error::Input(format!(
                "{}: row {}: {what}; convert the set again with `ridgeline import`",
                steps_path.display(),
                i + 1
            )));
        }
        let mut models = std::collections::BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(dir.join(MODELS)) {
            for e in entries.flatten() {
                let path = e.path();
                if path.extension().is_some_and(|x| x == "json")
                    && let Some(name) = path.file_stem().and_then(|n| n.to_str())
                {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
                    models.insert(name.to_owned(), text);
                }
            }
        }
        let set = LabelSet {
            ops: read_table(&dir.join(OPS))?,
            steps,
            models,
            source,
        };
        let path = dir.join(OPS);
        for (i, o) in set.ops.iter().enumerate() {
            let what = if !(o.forward_s.is_finite() && o.forward_s > 0.0) {
                format!("forward_s {}: a time is positive", o.forward_s)
            } else if !(o.backward_s.is_finite() && o.backward_s >= 0.0) {
                format!("backward_s {}: a time is not negative", o.backward_s)
            } else if [o.batch, o.m, o.n, o.k].contains(&0) {
                "a dimension is 0: every one is at least 1".to_owned()
            } else if !set.source.devices.values().any(|v| *v == o.device) {
                format!(
                    "device `{}` is not one SOURCE.toml's `devices` maps",
                    o.device
                )
            } else {
                continue;
            };
            return Err(Error::Input(format!(
                "{}: row {}: {what}; convert the set again with `ridgeline import`",
                path.display(),
                i + 1
            )));
        }
        Ok(set)
    }

    /// The ridgeline devices the set holds operators of.
    pub fn devices(&self) -> Vec<&str> {
        let mut d: Vec<&str> = self.ops.iter().map(|o| o.device.as_str()).collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

/// Creates `dir` (if missing) and writes `source` as its `SOURCE.toml`.
fn write_source(dir: &Path, source: &Source) -> Result<()> {
    let io = |p: &Path, e: std::io::Error| Error::Input(format!("{}: {e}", p.display()));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let text = toml::to_string(source).map_err(|e| Error::Input(format!("{SOURCE}: {e}")))?;
    let path = dir.join(SOURCE);
    std::fs::write(&path, text).map_err(|e| io(&path, e))
}

/// Reads `SOURCE.toml` of the set in `dir`.
/// The `SOURCE.toml` of a data set directory: where its measurements come from, and the
/// GPU names they were taken on mapped to catalog devices.
pub fn read_source(dir: &Path) -> Result<Source> {
    let path = dir.join(SOURCE);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Error::Input(format!(
            "{}: {e}; a kernel set is a directory written by `ridgeline import`",
            path.display()
        ))
    })?;
    toml::from_str(&text).map_err(|e| Error::Input(format!("{}: {e}", path.display())))
}

/// Where a kernel set comes from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// What the set is, in a sentence.
    pub description: String,
    /// The repository it was converted from.
    pub repository: String,
    /// The commit.
    pub commit: String,
    /// The files, as a pattern.
    pub paths: String,
    /// The licence the data is used under.
    pub licence: String,
    /// The copyright line of that licence.
    pub copyright: String,
    /// How the measurements were taken, as the source says.
    pub measured_with: String,
    /// The command that converted it.
    pub converted_by: String,
    /// Each source device name and the ridgeline device it is.
    pub devices: std::collections::BTreeMap<String, String>,
    /// How ridgeline's own GPU records were timed (absent: [`Timing::Issued`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<Timing>,
    /// The threads a published CPU set's kernels ran on (one a core); a set with kernels of
    /// a CPU needs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

/// How a set of ridgeline's own GPU kernel records was timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// Calls back to back as the host issues them, between two CUDA events: where the host
    /// takes longer to issue a call than the GPU to run it, the host's time (what a step
    /// issuing the same calls would take). ridgeline before 2026-11-26's spin-queued timer.
    Issued,
    /// Calls queued behind a spin kernel, so the events time the GPU's work alone.
    Gpu,
}

/// Measured kernels of several devices, with their source.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelSet {
    /// Where they come from.
    pub source: Source,
    /// GEMMs.
    pub gemm: Vec<GemmSample>,
    /// Convolutions.
    pub conv: Vec<ConvSample>,
    /// Vector ops.
    pub vector: Vec<VectorSample>,
}

const GEMM: &str = "gemm.csv.gz";
const CONV: &str = "conv.csv.gz";
const VECTOR: &str = "vector.csv.gz";
const SOURCE: &str = "SOURCE.toml";

impl KernelSet {
    /// Writes the set into `dir` (created if missing), replacing its files.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_source(dir, &self.source)?;
        write_table(&dir.join(GEMM), &self.gemm)?;
        write_table(&dir.join(CONV), &self.conv)?;
        write_table(&dir.join(VECTOR), &self.vector)
    }

    /// Reads the set in `dir`; an error names the file, the line and the field.
    pub fn read(dir: &Path) -> Result<KernelSet> {
        let source = read_source(dir)?;
        // A table of another version (a column missing or unknown) is the converter's to
        // write again.
        let again = |e: Error| match e {
            Error::Input(m) => Error::Input(format!(
                "{m}; convert the set again with `{}`",
                source.converted_by
            )),
            e => e,
        };
        let set = KernelSet {
            gemm: read_table(&dir.join(GEMM)).map_err(again)?,
            conv: read_table(&dir.join(CONV)).map_err(again)?,
            vector: read_table(&dir.join(VECTOR)).map_err(again)?,
            source,
        };
        set.check(dir)?;
        Ok(set)
    }

    /// Every time positive and finite, every dimension at least 1, every device one the
    /// source maps.
    fn check(&self, dir: &Path) -> Result<()> {
        let gemm = self
            .gemm
            .iter()
            .map(|s| (&s.device, s.latency_s, vec![s.batch, s.m, s.n, s.k]));
        let conv = self.conv.iter().map(|s| {
            let dims = vec![s.batch, s.c_in, s.c_out, s.size, s.kernel, s.stride];
            (&s.device, s.latency_s, dims)
        });
        let vector = self
            .vector
            .iter()
            .map(|s| (&s.device, s.latency_s, vec![s.batch, s.h]));
        let s = &self.source;
        let fix = "convert the set again with `ridgeline import`";
        check_rows(s, fix, &dir.join(GEMM), gemm)?;
        check_rows(s, fix, &dir.join(CONV), conv)?;
        check_rows(s, fix, &dir.join(VECTOR), vector)
    }

    /// The ridgeline devices the set holds kernels of.
    pub fn devices(&self) -> Vec<&str> {
        let mut d: Vec<&str> = self.source.devices.values().map(String::as_str).collect();
        d.sort_unstable();
        d.dedup();
        d
    }
}

/// Checks one table's rows of a set from `source`: (device, seconds, dimensions).
fn check_rows<'a>(
    source: &Source,
    fix: &str,
    path: &Path,
    rows: impl Iterator<Item = (&'a String, f64, Vec<u64>)>,
) -> Result<()> {
    for (i, (device, t, dims)) in rows.enumerate() {
        let what = if !(t.is_finite() && t > 0.0) {
            format!("latency_s {t}: a time is positive")
        } else if dims.contains(&0) {
            "a dimension is 0: every one is at least 1".to_owned()
        } else if !source.devices.values().any(|v| v == device) {
            format!("device `{device}` is not one SOURCE.toml's `devices` maps")
        } else {
            continue;
        };
        return Err(Error::Input(format!(
            "{}: row {}: {what}; {fix}",
            path.display(),
            i + 1
        )));
    }
    Ok(())
}

/// A GEMM of a published kernel set: `m x k` by `k x n` (column-major, as cuBLAS), with the
/// shape that ran (padded where the benchmark padded it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedGemm {
    /// The ridgeline device name it ran on.
    pub device: String,
    /// Its number format: `fp32`, or on tensor cores `fp16`, `bf16` or `tf32`.
    pub precision: RecordPrecision,
    /// Rows of the output.
    pub m: u64,
    /// Columns of the output.
    pub n: u64,
    /// Inner dimension.
    pub k: u64,
    /// Whether the first operand is transposed (1) or not (0).
    pub a_transpose: u8,
    /// Whether the second operand is transposed (1) or not (0).
    pub b_transpose: u8,
    /// Seconds.
    pub latency_s: f64,
    /// The threads a CPU's kernel ran on, where a set's rows differ (else the set's
    /// `SOURCE.toml` `threads`); empty for a GPU's.
    #[serde(default)]
    pub threads: Option<u32>,
}

/// One pass of a 2-D convolution of a published kernel set, with the shape that ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishedConv {
    /// The ridgeline device name it ran on.
    pub device: String,
    /// Its number format: `fp32`, or on tensor cores `fp16`, `bf16` or `tf32`.
    pub precision: RecordPrecision,
    /// `forward`, `backward-data` or `backward-filter`.
    pub pass: ConvPass,
    /// Batch.
    pub n: u64,
    /// Input channels.
    pub c_in: u64,
    /// Output channels.
    pub c_out: u64,
    /// Input height.
    pub h: u64,
    /// Input width.
    pub w: u64,
    /// Filter height.
    pub r: u64,
    /// Filter width.
    pub s: u64,
    /// Padding above and below.
    pub pad_h: u64,
    /// Padding left and right.
    pub pad_w: u64,
    /// Vertical stride.
    pub stride_h: u64,
    /// Horizontal stride.
    pub stride_w: u64,
    /// Seconds.
    pub latency_s: f64,
    /// The threads a CPU's kernel ran on, where a set's rows differ (else the set's
    /// `SOURCE.toml` `threads`); empty for a GPU's.
    #[serde(default)]
    pub threads: Option<u32>,
}

/// GEMMs and convolutions measured on other machines and published (DeepBench's, in FP32 and
/// in FP16 on tensor cores; Vidur's FP16 products of transformer layers): the tensor-core
/// kernels are data of the transferred model's tensor-core classes beside ridgeline's own
/// records, the FP32 ones a check of the FP32 fit on GPUs, libraries and hosts outside it. On
/// disk as a [`KernelSet`]: `gemm.csv.gz`, `conv.csv.gz` where the set has convolutions, and
/// `SOURCE.toml`.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedSet {
    /// Where they come from.
    pub source: Source,
    /// GEMMs.
    pub gemm: Vec<PublishedGemm>,
    /// Convolution passes.
    pub conv: Vec<PublishedConv>,
}

impl PublishedSet {
    /// Keeps the kernels of the devices `keep` takes (by ridgeline device name).
    pub fn retain_devices(&mut self, keep: impl Fn(&str) -> bool) {
        self.gemm.retain(|g| keep(&g.device));
        self.conv.retain(|c| keep(&c.device));
    }

    /// Reads the set in `dir`; an error names the file, the row and the field.
    pub fn read(dir: &Path) -> Result<PublishedSet> {
        let source = read_source(dir)?;
        // How the set is made again: the converter its SOURCE.toml names.
        let fix = format!("convert the set again: {}", source.converted_by);
        let set = PublishedSet {
            source,
            gemm: read_table(&dir.join(GEMM))?,
            // A set of products alone has no convolution table.
            conv: if dir.join(CONV).exists() {
                read_table(&dir.join(CONV))?
            } else {
                Vec::new()
            },
        };
        // FP8 products, but no FP8 convolutions (no library runs them).
        let formats = |path: &Path, p: &[RecordPrecision], fp8: bool| -> Result<()> {
            match p.iter().position(|p| {
                !(matches!(
                    p,
                    RecordPrecision::Fp32
                        | RecordPrecision::Fp16
                        | RecordPrecision::Bf16
                        | RecordPrecision::Tf32
                ) || (fp8 && *p == RecordPrecision::Fp8))
            }) {
                Some(i) => Err(Error::Input(format!(
                    "{}: row {}: precision `{}`: a published set holds fp32, fp16, bf16 or \
                     tf32 kernels (and fp8 products); {fix}",
                    path.display(),
                    i + 1,
                    p[i].name()
                ))),
                None => Ok(()),
            }
        };
        let gemm: Vec<RecordPrecision> = set.gemm.iter().map(|g| g.precision).collect();
        formats(&dir.join(GEMM), &gemm, true)?;
        let conv: Vec<RecordPrecision> = set.conv.iter().map(|c| c.precision).collect();
        formats(&dir.join(CONV), &conv, false)?;
        if let Some(i) = set.conv.iter().position(|c| c.pass == ConvPass::Backward) {
            return Err(Error::Input(format!(
                "{}: row {}: pass `backward`: one pass a row (forward, backward-data or \
                 backward-filter); {fix}",
                dir.join(CONV).display(),
                i + 1
            )));
        }
        let (s, fix) = (&set.source, fix.as_str());
        check_rows(
            s,
            fix,
            &dir.join(GEMM),
            set.gemm
                .iter()
                .map(|g| (&g.device, g.latency_s, vec![g.m, g.n, g.k])),
        )?;
        check_rows(
            s,
            fix,
            &dir.join(CONV),
            set.conv.iter().map(|c| {
                let dims = vec![
                    c.n, c.c_in, c.c_out, c.h, c.w, c.r, c.s, c.stride_h, c.stride_w,
                ];
                (&c.device, c.latency_s, dims)
            }),
        )?;
        Ok(set)
    }
}

/// Six significant digits: far below the run-to-run spread of a kernel's time.
fn six_digits<S: serde::Serializer>(v: &f64, s: S) -> std::result::Result<S::Ok, S::Error> {
    let text = format!("{v:.5e}");
    s.serialize_f64(text.parse().unwrap_or(*v))
}

fn write_table<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let err = |e: String| Error::Input(format!("{}: {e}", path.display()));
    let file = std::fs::File::create(path).map_err(|e| err(e.to_string()))?;
    let mut w = csv::Writer::from_writer(GzEncoder::new(file, Compression::best()));
    for r in rows {
        w.serialize(r).map_err(|e| err(e.to_string()))?;
    }
    let gz = w.into_inner().map_err(|e| err(e.to_string()))?;
    gz.finish()
        .and_then(|mut f| f.flush())
        .map_err(|e| err(e.to_string()))
}

fn read_table<T: DeserializeOwned>(path: &Path) -> Result<Vec<T>> {
    let err = |e: String| Error::Input(format!("{}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut text = String::new();
    GzDecoder::new(file)
        .read_to_string(&mut text)
        .map_err(|e| err(format!("{e} (a gzip-compressed CSV file)")))?;
    csv::Reader::from_reader(text.as_bytes())
        .deserialize()
        .collect::<std::result::Result<Vec<T>, _>>()
        .map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source {
        Source {
            description: "d".into(),
            repository: "r".into(),
            commit: "c".into(),
            paths: "p".into(),
            licence: "Apache-2.0".into(),
            copyright: "x".into(),
            measured_with: "m".into(),
            converted_by: "scripts/import-deepbench.py".into(),
            devices: [("NVIDIA T4".to_owned(), "t4".to_owned())].into(),
            timing: None,
            threads: None,
        }
    }

    fn gemm(precision: RecordPrecision, m: u64, latency_s: f64) -> PublishedGemm {
        PublishedGemm {
            device: "t4".into(),
            precision,
            m,
            n: 64,
            k: 64,
            a_transpose: 0,
            b_transpose: 1,
            latency_s,
            threads: None,
        }
    }

    fn conv(pass: ConvPass, device: &str) -> PublishedConv {
        PublishedConv {
            device: device.into(),
            precision: RecordPrecision::Fp16,
            pass,
            n: 8,
            c_in: 64,
            c_out: 64,
            h: 56,
            w: 56,
            r: 3,
            s: 3,
            pad_h: 1,
            pad_w: 1,
            stride_h: 1,
            stride_w: 1,
            latency_s: 1e-4,
            threads: None,
        }
    }

    /// Writes a tensor-core set and reads it back, or the error reading it gives.
    fn round_trip(gemms: &[PublishedGemm], convs: &[PublishedConv]) -> Result<PublishedSet> {
        let dir = tempfile::tempdir().unwrap();
        write_source(dir.path(), &source()).unwrap();
        write_table(&dir.path().join(GEMM), gemms).unwrap();
        write_table(&dir.path().join(CONV), convs).unwrap();
        PublishedSet::read(dir.path())
    }

    /// A kernel set's convolutions written before they kept cuDNN's algorithm are refused,
    /// naming the file, the column and the command that converts the set again.
    #[test]
    fn a_convolution_table_without_its_algorithm_names_the_converter() {
        let dir = tempfile::tempdir().unwrap();
        let mut source = source();
        source.converted_by = "ridgeline import neusight DIR --commit c".into();
        source.devices = [("Tesla T4".to_owned(), "t4".to_owned())].into();
        let set = KernelSet {
            source,
            gemm: Vec::new(),
            conv: vec![ConvSample {
                device: "t4".into(),
                op: ConvOp::Conv,
                batch: 2,
                c_in: 8,
                c_out: 8,
                size: 8,
                kernel: 3,
                stride: 1,
                padding: 1,
                algorithm: ConvAlgorithm::ImplicitGemm,
                latency_s: 1e-4,
            }],
            vector: Vec::new(),
        };
        set.write(dir.path()).unwrap();
        assert_eq!(KernelSet::read(dir.path()).unwrap().conv, set.conv);
        let old = "device,op,batch,c_in,c_out,size,kernel,stride,padding,latency_s\n\
                   t4,conv,2,8,8,8,3,1,1,0.0001\n";
        let mut gz = GzEncoder::new(Vec::new(), Compression::default());
        gz.write_all(old.as_bytes()).unwrap();
        std::fs::write(dir.path().join(CONV), gz.finish().unwrap()).unwrap();
        let e = KernelSet::read(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("conv.csv.gz")
                && e.contains("`algorithm`")
                && e.contains("convert the set again with `ridgeline import neusight"),
            "{e}"
        );
    }

    #[test]
    fn a_published_set_reads_back() {
        let g = [
            gemm(RecordPrecision::Fp16, 128, 2e-5),
            gemm(RecordPrecision::Fp32, 128, 5e-5),
            gemm(RecordPrecision::Fp8, 128, 1e-5),
        ];
        let c = [conv(ConvPass::BackwardFilter, "t4")];
        let set = round_trip(&g, &c).unwrap();
        assert_eq!((set.gemm, set.conv), (g.to_vec(), c.to_vec()));
    }

    #[test]
    fn bad_rows_of_a_published_set_name_the_file_the_row_and_the_field() {
        let fp16 = |m, t| gemm(RecordPrecision::Fp16, m, t);
        let fp8_conv = PublishedConv {
            precision: RecordPrecision::Fp8,
            ..conv(ConvPass::Forward, "t4")
        };
        let cases: [(Vec<PublishedGemm>, Vec<PublishedConv>, &str, &str); 6] = [
            (
                vec![fp16(8, 1e-5), gemm(RecordPrecision::Fp64, 8, 1e-5)],
                vec![],
                "gemm.csv.gz: row 2: precision `fp64`",
                "fp32, fp16, bf16 or tf32",
            ),
            (
                vec![fp16(0, 1e-5)],
                vec![],
                "gemm.csv.gz: row 1: a dimension is 0",
                "import-deepbench.py",
            ),
            (
                vec![fp16(8, -1.0)],
                vec![],
                "gemm.csv.gz: row 1: latency_s -1",
                "a time is positive",
            ),
            (
                vec![],
                vec![
                    conv(ConvPass::Forward, "t4"),
                    conv(ConvPass::Backward, "t4"),
                ],
                "conv.csv.gz: row 2: pass `backward`",
                "one pass a row",
            ),
            (
                vec![],
                vec![conv(ConvPass::Forward, "v100")],
                "conv.csv.gz: row 1: device `v100`",
                "SOURCE.toml's `devices`",
            ),
            (
                vec![gemm(RecordPrecision::Fp8, 8, 1e-5)],
                vec![fp8_conv],
                "conv.csv.gz: row 1: precision `fp8`",
                "and fp8 products",
            ),
        ];
        for (g, c, at, what) in cases {
            let e = round_trip(&g, &c).unwrap_err().to_string();
            assert!(e.contains(at) && e.contains(what), "{e}");
        }
    }
}
