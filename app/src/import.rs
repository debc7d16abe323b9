//! Importing public kernel measurements as a ridgeline kernel set
//! (`ridgeline_calibrate::dataset`).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use ridgeline_calibrate::dataset::{ConvAlgorithm, KernelSet};
use ridgeline_calibrate::{mlperf, neusight, nsys, torch_trace};
use ridgeline_model::precision::Precision;

/// The subdirectory of a NeuSight kernel set that holds its per-operator labels of whole
/// training steps ([`ridgeline_calibrate::dataset::LabelSet`]).
pub const LABELS: &str = "labels";

/// The subdirectory of a NeuSight kernel set that holds NeuSight's test set of kernels of
/// GPUs outside the set (a [`KernelSet`]), for validation only.
pub const TEST: &str = "test";

/// What an import wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Imported {
    /// The directory written.
    pub out: String,
    /// The commit converted.
    pub commit: String,
    /// Kernels per family and device: (family, device, count).
    pub counts: Vec<(String, String, usize)>,
}

/// Converts NeuSight's measured kernels in the checkout `dir` into a kernel set in `out`.
/// The commit is `commit`, else the checkout's own (`git rev-parse HEAD`).
pub fn neusight(dir: &Path, commit: Option<&str>, out: &Path) -> Result<Imported> {
    let commit = match commit {
        Some(c) => c.to_owned(),
        None => head_commit(dir).with_context(|| {
            format!(
                "{}: not a git checkout whose commit can be read; pass --commit SHA (the \
                 NeuSight commit the files come from)",
                dir.display()
            )
        })?,
    };
    if commit.len() < 7 || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
        bail!("--commit `{commit}`: a git commit is 7 to 40 hexadecimal digits");
    }
    if out.exists() && !out.is_dir() {
        bail!(
            "--out {}: an existing file; the kernel set is a directory (SOURCE.toml, \
             gemm.csv.gz, conv.csv.gz, vector.csv.gz, labels/, test/): name a directory",
            out.display()
        );
    }
    let set = neusight::convert(dir, &commit)?;
    set.write(out)?;
    let mut counts = counts(&set);
    // Kernels of GPUs outside the set, for validation only.
    if let Some(test) = neusight::convert_test(dir, &commit)? {
        test.write(&out.join(TEST))?;
        let tested: Vec<_> = self::counts(&test)
            .into_iter()
            .map(|(family, device, n)| (format!("test {family}"), device, n))
            .collect();
        counts.extend(tested);
    }
    // The per-operator labels of GPUs outside the set, for validation only.
    if let Some(labels) = neusight::convert_labels(dir, &commit)? {
        labels.write(&out.join(LABELS))?;
        for device in labels.devices() {
            let n = labels.ops.iter().filter(|o| o.device == device).count();
            counts.push(("labels".into(), device.to_owned(), n));
        }
        let mut step_devices: Vec<&str> = labels.steps.iter().map(|s| s.device.as_str()).collect();
        step_devices.dedup();
        for device in step_devices {
            let n = labels.steps.iter().filter(|s| s.device == device).count();
            counts.push(("steps".into(), device.to_owned(), n));
        }
    }
    Ok(Imported {
        out: out.display().to_string(),
        commit,
        counts,
    })
}

/// The commit of the checkout `dir`: only where `dir` is the top of its own repository (a
/// directory inside another repository is not a NeuSight checkout).
fn head_commit(dir: &Path) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--show-toplevel", "HEAD"])
        .output()?;
    if !out.status.success() {
        bail!("git rev-parse failed");
    }
    let text = String::from_utf8(out.stdout)?;
    let mut lines = text.lines();
    let (Some(top), Some(head)) = (lines.next(), lines.next()) else {
        bail!("git rev-parse gave no commit");
    };
    if Path::new(top).canonicalize()? != dir.canonicalize()? {
        bail!("the directory is inside the repository at {top}, not a checkout of its own");
    }
    Ok(head.trim().to_owned())
}

/// Kernels per family and device.
pub fn counts(set: &KernelSet) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for device in set.devices() {
        for (family, n) in [
            (
                "gemm",
                set.gemm.iter().filter(|s| s.device == device).count(),
            ),
            (
                "conv",
                set.conv.iter().filter(|s| s.device == device).count(),
            ),
            // The data of `conv-gemm`: the convolutions cuDNN ran as implicit GEMMs.
            (
                "conv implicit-gemm",
                set.conv
                    .iter()
                    .filter(|s| s.device == device && s.algorithm == ConvAlgorithm::ImplicitGemm)
                    .count(),
            ),
            (
                "vector",
                set.vector.iter().filter(|s| s.device == device).count(),
            ),
        ] {
            if n > 0 {
                out.push((family.to_owned(), device.to_owned(), n));
            }
        }
    }
    out
}

/// Reads MLPerf result logs as run records ([`ridgeline_calibrate::mlperf`]): each path a
/// `result_N.txt`, or a folder searched for them (a submission's `results/`, or the whole
/// repository). A log's system description is the submitter's
/// `systems/<system>.json`, two folders above the log's benchmark folder, where it exists.
/// Runs come in path order.
pub fn mlperf(paths: &[std::path::PathBuf]) -> Result<Vec<mlperf::RunRecord>> {
    let mut logs = Vec::new();
    for p in paths {
        if p.is_dir() {
            result_logs(p, &mut logs)
                .with_context(|| format!("{}: cannot read the folder", p.display()))?;
        } else if p.is_file() {
            logs.push(p.clone());
        } else {
            bail!(
                "{}: no such file or folder; give MLPerf result logs (`result_N.txt`) or a \
                 results folder",
                p.display()
            );
        }
    }
    if logs.is_empty() {
        bail!(
            "no MLPerf result logs (`result_*.txt`) under {}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    logs.sort();
    logs.dedup();
    logs.iter()
        .map(|log| {
            let name = log.display().to_string();
            let text = read_log(log).with_context(|| format!("{name}: cannot read"))?;
            let system = match system_description(log) {
                Some(json) => {
                    let file = json.display().to_string();
                    let text = std::fs::read_to_string(&json)
                        .with_context(|| format!("{file}: cannot read"))?;
                    Some(mlperf::SystemDescription::parse(&text, &file)?)
                }
                None => None,
            };
            Ok(mlperf::parse(&text, &name, system.as_ref())?)
        })
        .collect()
}

/// A result log's text: gzip-compressed where its name ends `.gz`.
fn read_log(path: &Path) -> std::io::Result<String> {
    if path.extension().is_some_and(|e| e == "gz") {
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(path)?),
            &mut text,
        )?;
        Ok(text)
    } else {
        std::fs::read_to_string(path)
    }
}

/// Every `result_*.txt` (or `result_*.txt.gz`) under `dir`.
fn result_logs(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            result_logs(&path, out)?;
        } else if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
            n.starts_with("result_") && (n.ends_with(".txt") || n.ends_with(".txt.gz"))
        }) {
            out.push(path);
        }
    }
    Ok(())
}

/// The system description of the log at `<submitter>/results/<system>/<benchmark>/result_N.txt`:
/// `<submitter>/systems/<system>.json`, where that file exists.
fn system_description(log: &Path) -> Option<std::path::PathBuf> {
    let benchmark = log.parent()?;
    let system = benchmark.parent()?;
    let results = system.parent()?;
    if results.file_name()? != "results" {
        return None;
    }
    let json = results
        .parent()?
        .join("systems")
        .join(format!("{}.json", system.file_name()?.to_str()?));
    json.is_file().then_some(json)
}

/// What `ridgeline import torch-trace` wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TraceImport {
    /// The records file written.
    pub out: String,
    /// The workload the trace was mapped onto.
    pub workload: String,
    /// The batch the trace ran.
    pub batch: usize,
    /// Its per-sample input.
    pub input: Vec<usize>,
    /// The device it timed (`cpu`, `cuda:0`).
    pub device: String,
    /// The training precision.
    pub precision: String,
    /// Profiled steps.
    pub steps: usize,
    /// The median step, seconds.
    pub step_s: f64,
    /// Layers matched.
    pub layers: usize,
    /// Data-parallel ranks of the traced run, where the trace says.
    pub ranks: Option<usize>,
    /// The median step's collective communication and the part of it after backward,
    /// seconds, where the trace has communication.
    pub comm_s: Option<[f64; 2]>,
    /// Records written.
    pub records: usize,
    /// Ops that are no layer: name, calls, seconds.
    pub unmapped: Vec<torch_trace::Unmapped>,
    /// Layer passes that launched no GPU kernel (op kind and pass, calls): no record is
    /// written of them.
    pub no_kernel: Vec<torch_trace::Unmapped>,
    /// The host's times (a GPU trace): what a stack's `[host]` and `[device]` tables hold.
    pub host: Option<ridgeline_calibrate::torch_trace::HostTimes>,
}

/// Imports the PyTorch profiler trace at `trace` as the workload `workload` (a built-in
/// name or a workload file, built at the trace's input size), measured on `threads`
/// threads, and writes its records to `out` ([`torch_trace::import`]).
pub fn torch_trace(
    trace: &Path,
    workload: &str,
    threads: usize,
    out: &Path,
) -> Result<TraceImport> {
    if threads == 0 {
        bail!("--threads 0: give the threads the run used (torch.get_num_threads())");
    }
    let t = torch_trace::Trace::read(trace)?;
    let (batch, input) = t.input()?;
    let graph = crate::inputs::workload(&crate::inputs::WorkloadSpec {
        name: workload.to_owned(),
        input_size: Some(input.get(1..).unwrap_or_default().to_vec()),
        width: None,
    })
    .with_context(|| {
        format!(
            "{}: the workload `{workload}` at the trace's input {input:?}",
            trace.display()
        )
    })?;
    let imported = torch_trace::import(&t, &graph, batch, threads)?;
    let mut text = String::new();
    for r in &imported.records {
        text.push_str(&serde_json::to_string(r)?);
        text.push('\n');
    }
    crate::atomic::write(out, text.as_bytes())?;
    let step = imported
        .records
        .iter()
        .rev()
        .find(|r| r.kind() == ridgeline_measure::RecordKind::WorkloadStep)
        .map(|r| ridgeline_calibrate::stats::median(&r.samples_s))
        .unwrap_or_default();
    Ok(TraceImport {
        out: out.display().to_string(),
        workload: graph.name().to_owned(),
        batch,
        input,
        device: imported.device.to_string(),
        precision: imported.precision.to_string(),
        steps: imported.steps,
        step_s: step,
        layers: imported.layers,
        ranks: imported.ranks,
        comm_s: (!imported.comm[0].is_empty()).then(|| {
            imported
                .comm
                .clone()
                .map(|v| ridgeline_calibrate::stats::median(&v))
        }),
        records: imported.records.len(),
        unmapped: imported.unmapped,
        no_kernel: imported.no_kernel,
        host: imported.host,
    })
}

/// What `ridgeline import nsys` read and wrote.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NsysImport {
    /// The report.
    pub report: String,
    /// Its GPU, where the report names it.
    pub gpu: Option<String>,
    /// Kernels in all.
    pub kernels: usize,
    /// NVTX ranges in all.
    pub ranges: usize,
    /// Kernels under each NVTX range name (empty name: outside every range).
    pub by_range: Vec<nsys::RangeRow>,
    /// The records file written, where a workload was given.
    pub out: Option<String>,
    /// Records written.
    pub records: usize,
}

/// Reads the Nsight Systems SQLite export at `report` (`.sqlite`, or `.sqlite.gz`), and
/// where `records` gives a workload (its spec, batch, precision and output file) writes the
/// records of the layers and steps its NVTX ranges mark ([`nsys::Report::records`]).
pub fn nsys(
    report: &Path,
    records: Option<(&crate::inputs::WorkloadSpec, usize, Precision, &Path)>,
) -> Result<NsysImport> {
    // SQLite reads a file: a compressed export is inflated beside the others first.
    let inflated;
    let path = if report.extension().is_some_and(|e| e == "gz") {
        let mut gz = flate2::read::GzDecoder::new(
            std::fs::File::open(report)
                .with_context(|| format!("{}: cannot read", report.display()))?,
        );
        let mut file = tempfile::NamedTempFile::new()?;
        std::io::copy(&mut gz, &mut file).with_context(|| {
            format!(
                "{}: the gzip stream is damaged or cut short",
                report.display()
            )
        })?;
        inflated = file;
        inflated.path()
    } else {
        report
    };
    // Errors name the report, not the file it was inflated into.
    let mut r = nsys::Report::read(path).map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.to_string()
                .replace(&path.display().to_string(), &report.display().to_string())
        )
    })?;
    r.file = report.display().to_string();
    let mut done = NsysImport {
        report: r.file.clone(),
        gpu: r.gpu.clone(),
        kernels: r.kernels.len(),
        ranges: r.ranges.len(),
        by_range: r.by_range(),
        out: None,
        records: 0,
    };
    if let Some((spec, batch, precision, out)) = records {
        let graph = crate::inputs::workload(spec)?;
        let written = r.records(&graph, batch, precision)?;
        let mut text = String::new();
        for rec in &written {
            text.push_str(&serde_json::to_string(rec)?);
            text.push('\n');
        }
        crate::atomic::write(out, text.as_bytes())?;
        done.out = Some(out.display().to_string());
        done.records = written.len();
    }
    Ok(done)
}
