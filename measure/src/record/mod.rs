//! Measurement records: one JSON object per line (JSON Lines), appended and flushed one at a
//! time, so a campaign interrupted at any point loses no completed record.
//!
//! The schema (version 2) is documented in the crate docs and in `docs/ARCHITECTURE.md`.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

mod measured;

pub use measured::{
    AllreduceShape, AlltoallShape, ConvShape, CopyShape, ExchangeShape, Extra, GemmShape,
    LayerShape, Measured, OpShape, OpSpec, PrttShape, RecordKind, ReduceShape, StepShape,
    StreamShape,
};

/// The version of the record schema written by this build. Version 2 types each kind's
/// shape and the `extra` fields: it writes what version 1 wrote (shape fields in each
/// kind's order rather than sorted, empty `extra` fields left out), and a record whose
/// shape lacks a field its kind needs is refused on reading.
pub const SCHEMA_VERSION: u32 = 2;

/// The versions this build reads: version 1 files are read as written.
pub const READS_SCHEMA_VERSIONS: [u32; 2] = [1, 2];

/// One measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Schema version.
    pub schema_version: u32,
    /// Unique key of the measurement.
    pub id: String,
    /// What was measured, and its case: the `kind` and `shape` fields.
    #[serde(flatten)]
    pub measured: Measured,
    /// Number format or training precision.
    pub precision: RecordPrecision,
    /// Device.
    pub device: Device,
    /// Threads.
    pub threads: usize,
    /// Raw samples, seconds per run.
    pub samples_s: Vec<f64>,
    /// FLOPs per run.
    pub flops: f64,
    /// Bytes per run.
    pub bytes: f64,
    /// Where and when.
    pub env: Env,
    /// Kind-specific data.
    #[serde(default, skip_serializing_if = "Extra::is_empty")]
    pub extra: Extra,
}

/// Where a record was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Device {
    /// The CPU backend (`cpu`).
    Cpu,
    /// One GPU by ordinal (`cuda:N`).
    Cuda(u32),
    /// Every GPU of the node together, as NCCL runs a collective (`cuda`).
    Gpus,
    /// Ranks of an MPI job (`mpi`).
    Mpi,
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
            Device::Gpus => f.write_str("cuda"),
            Device::Mpi => f.write_str("mpi"),
        }
    }
}

impl std::str::FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Gpus),
            "mpi" => Ok(Device::Mpi),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| {
                    format!("device `{other}`: must be `cpu`, `cuda:N`, `cuda` (NCCL) or `mpi`")
                }),
        }
    }
}

impl TryFrom<String> for Device {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

/// The precision a record was measured in: a number format of a kernel, a training
/// precision of a workload step, or `bytes` for communication that moves untyped data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "&'static str")]
pub enum RecordPrecision {
    /// IEEE double.
    Fp64,
    /// IEEE single (kernels, and FP32 training).
    Fp32,
    /// TensorFloat-32 (kernels, and TF32 training).
    Tf32,
    /// IEEE half (kernels).
    Fp16,
    /// bfloat16 (kernels).
    Bf16,
    /// Mixed-precision training with FP16 activations.
    AmpFp16,
    /// Mixed-precision training with BF16 activations.
    AmpBf16,
    /// BF16 mixed-precision training with FP8 linear layers (imported runs; ridgeline's
    /// executors run no FP8).
    Fp8,
    /// Untyped bytes (communication).
    Bytes,
}

impl RecordPrecision {
    /// Every precision.
    pub const ALL: [RecordPrecision; 9] = [
        RecordPrecision::Fp64,
        RecordPrecision::Fp32,
        RecordPrecision::Tf32,
        RecordPrecision::Fp16,
        RecordPrecision::Bf16,
        RecordPrecision::AmpFp16,
        RecordPrecision::AmpBf16,
        RecordPrecision::Fp8,
        RecordPrecision::Bytes,
    ];

    /// The name records carry.
    pub const fn name(self) -> &'static str {
        match self {
            RecordPrecision::Fp64 => "fp64",
            RecordPrecision::Fp32 => "fp32",
            RecordPrecision::Tf32 => "tf32",
            RecordPrecision::Fp16 => "fp16",
            RecordPrecision::Bf16 => "bf16",
            RecordPrecision::AmpFp16 => "amp-fp16",
            RecordPrecision::AmpBf16 => "amp-bf16",
            RecordPrecision::Fp8 => "fp8",
            RecordPrecision::Bytes => "bytes",
        }
    }

    /// The training precision of a workload record, if this is one.
    pub const fn training(self) -> Option<ridgeline_model::precision::Precision> {
        use ridgeline_model::precision::Precision;
        match self {
            RecordPrecision::Fp32 => Some(Precision::Fp32),
            RecordPrecision::Tf32 => Some(Precision::Tf32),
            RecordPrecision::AmpFp16 => Some(Precision::AmpFp16),
            RecordPrecision::AmpBf16 => Some(Precision::AmpBf16),
            RecordPrecision::Fp8 => Some(Precision::Fp8),
            _ => None,
        }
    }
}

impl From<crate::kinds::Format> for RecordPrecision {
    fn from(f: crate::kinds::Format) -> Self {
        use crate::kinds::Format;
        match f {
            Format::Fp64 => RecordPrecision::Fp64,
            Format::Fp32 => RecordPrecision::Fp32,
            Format::Tf32 => RecordPrecision::Tf32,
            Format::Fp16 => RecordPrecision::Fp16,
            Format::Bf16 => RecordPrecision::Bf16,
        }
    }
}

impl From<ridgeline_model::precision::Precision> for RecordPrecision {
    fn from(p: ridgeline_model::precision::Precision) -> Self {
        use ridgeline_model::precision::Precision;
        match p {
            Precision::Fp32 => RecordPrecision::Fp32,
            Precision::Tf32 => RecordPrecision::Tf32,
            Precision::AmpFp16 => RecordPrecision::AmpFp16,
            Precision::AmpBf16 => RecordPrecision::AmpBf16,
            Precision::Fp8 => RecordPrecision::Fp8,
        }
    }
}

impl std::fmt::Display for RecordPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for RecordPrecision {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        RecordPrecision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = RecordPrecision::ALL.iter().map(|p| p.name()).collect();
                format!("precision `{s}`: must be one of {}", names.join(", "))
            })
    }
}

impl TryFrom<String> for RecordPrecision {
    type Error = String;

    fn try_from(s: String) -> std::result::Result<Self, String> {
        s.parse()
    }
}

impl From<RecordPrecision> for &'static str {
    fn from(p: RecordPrecision) -> &'static str {
        p.name()
    }
}

impl Record {
    /// A new record of this build's schema, its id made from what was measured.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        measured: Measured,
        precision: RecordPrecision,
        device: Device,
        threads: usize,
        samples_s: Vec<f64>,
        flops: f64,
        bytes: f64,
        env: Env,
    ) -> Record {
        Record {
            schema_version: SCHEMA_VERSION,
            id: record_id(&measured, precision, threads, device),
            measured,
            precision,
            device,
            threads,
            samples_s,
            flops,
            bytes,
            env,
            extra: Extra::default(),
        }
    }

    /// What was measured.
    pub fn kind(&self) -> RecordKind {
        self.measured.kind()
    }

    /// Checks what a record claims, field by field: a schema version this build reads,
    /// at least one thread, positive finite samples, finite non-negative FLOPs and bytes
    /// (positive FLOPs for the kinds that compute), positive GEMM dimensions, an allreduce
    /// over ranks or GPUs, and non-negative update times. (The kind, precision, device and
    /// the shape's fields are checked as the record is read.) The error names the field
    /// and what it must be.
    pub fn check(&self) -> std::result::Result<(), String> {
        if !READS_SCHEMA_VERSIONS.contains(&self.schema_version) {
            return Err(format!(
                "schema_version {}: this ridgeline reads version 1 and {SCHEMA_VERSION} \
                 records; measure again with this version",
                self.schema_version
            ));
        }
        if self.id.trim().is_empty() {
            return Err("id is empty".into());
        }
        if self.threads == 0 {
            return Err("threads 0: a measurement runs on at least one thread".into());
        }
        if self.samples_s.is_empty() {
            return Err("samples_s is empty".into());
        }
        if let Some(s) = self
            .samples_s
            .iter()
            .find(|s| !(s.is_finite() && **s > 0.0))
        {
            return Err(format!(
                "samples_s holds {s}: every sample is a positive time"
            ));
        }
        if !(self.flops.is_finite() && self.flops >= 0.0) {
            return Err(format!(
                "flops {}: must be a finite count, 0 or more",
                self.flops
            ));
        }
        if self.kind().computes() && self.flops <= 0.0 {
            return Err(format!(
                "flops {}: a {} record counts the FLOPs it ran, more than 0",
                self.flops,
                self.kind()
            ));
        }
        if !(self.bytes.is_finite() && self.bytes >= 0.0) {
            return Err(format!(
                "bytes {}: must be a finite count, 0 or more",
                self.bytes
            ));
        }
        match &self.measured {
            Measured::Gemm(g) => {
                for (dim, v) in [("m", g.m), ("n", g.n), ("k", g.k)] {
                    if v < 1 {
                        return Err(format!(
                            "shape.{dim} {v}: a GEMM dimension is a whole number, at least 1"
                        ));
                    }
                }
            }
            Measured::CommAllreduce(a) if a.ranks.is_some() == a.gpus.is_some() => {
                return Err(
                    "shape: an allreduce names its MPI `ranks` or its node's `gpus`, one of \
                     the two"
                        .into(),
                );
            }
            _ => {}
        }
        for (field, times) in [
            ("update_s", &self.extra.update_s),
            ("comm_s", &self.extra.comm_s),
            ("exposed_comm_s", &self.extra.exposed_comm_s),
        ] {
            if let Some(t) = times.iter().find(|t| !(t.is_finite() && **t >= 0.0)) {
                return Err(format!(
                    "extra.{field} holds {t}: must be a list of times, 0 or more"
                ));
            }
        }
        Ok(())
    }
}

/// The environment a record was measured in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Env {
    /// Host name.
    pub host: String,
    /// CPU model (`model name` of /proc/cpuinfo), or `unknown`.
    pub cpu_model: String,
    /// Logical CPUs available to the process.
    pub cores: usize,
    /// The SIMD extensions the CPU reports that matter for these kernels.
    pub simd: Vec<String>,
    /// Accelerator, when the device is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuEnv>,
    /// ridgeline version.
    pub ridgeline_version: String,
    /// Git commit ridgeline was built from, when known.
    pub git_commit: Option<String>,
    /// When the record was made (RFC 3339, UTC).
    pub timestamp: String,
    /// The Slurm job that made the record, when a Slurm job did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm: Option<SlurmEnv>,
    /// The framework whose kernels the samples time, where they are not ridgeline's own
    /// (`pytorch 2.15.0, oneDNN 3.13.3`: `scripts/cpu-kernels-torch.py` times ridgeline's
    /// cases in PyTorch and writes them as records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    /// The library the CPU executor's products ran on (the system's OpenBLAS, by its own
    /// description, or the `gemm` crate); absent in records made before it was recorded,
    /// when it was always the `gemm` crate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blas: Option<String>,
}

/// Where in a Slurm allocation a record was made, from the variables Slurm sets in a job's
/// environment (`SLURM_JOB_ID`, `SLURM_ARRAY_JOB_ID`, `SLURM_ARRAY_TASK_ID`,
/// `SLURMD_NODENAME`, `SLURM_JOB_PARTITION`), as Slurm wrote them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmEnv {
    /// The job's id (`SLURM_JOB_ID`); a job array's tasks each have their own.
    pub job_id: String,
    /// The job array's id, for a task of one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_job_id: Option<String>,
    /// The task's index in its job array.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task_id: Option<String>,
    /// The node the process ran on, by Slurm's name for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The partition the job ran in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

impl SlurmEnv {
    /// The job of a process whose environment `var` reads, or `None` outside a Slurm job.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<SlurmEnv> {
        let set = |name: &str| var(name).filter(|v| !v.is_empty());
        Some(SlurmEnv {
            job_id: set("SLURM_JOB_ID")?,
            array_job_id: set("SLURM_ARRAY_JOB_ID"),
            array_task_id: set("SLURM_ARRAY_TASK_ID"),
            node: set("SLURMD_NODENAME"),
            partition: set("SLURM_JOB_PARTITION"),
        })
    }
}

/// The GPU a record was measured on (CUDA backend).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuEnv {
    /// Device ordinal.
    pub ordinal: usize,
    /// Device name, as the driver reports it.
    pub name: String,
    /// Compute capability, `major.minor`.
    pub compute_capability: String,
    /// Device memory, bytes.
    pub memory_bytes: u64,
    /// Peak SM clock, MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Peak memory clock, MHz.
    pub memory_clock_mhz: Option<u32>,
    /// L2 cache, bytes.
    #[serde(default)]
    pub l2_bytes: Option<u64>,
    /// CUDA driver API version, `major.minor`.
    pub driver_version: String,
    /// Versions of the libraries the measurement used (cublas, cudnn, nvrtc, nccl).
    #[serde(default)]
    pub libraries: std::collections::BTreeMap<String, String>,
}

/// SIMD flags worth recording, as /proc/cpuinfo names them.
const SIMD_FLAGS: &[&str] = &[
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
    "sve2",
];

impl Env {
    /// The environment of this process now.
    pub fn capture() -> Env {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            cpuinfo.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == name).then(|| v.trim().to_owned())
            })
        };
        let flags: HashSet<String> = field("flags")
            .or_else(|| field("Features"))
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        Env {
            host: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "unknown".into()),
            cpu_model: field("model name").unwrap_or_else(|| "unknown".into()),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            simd: SIMD_FLAGS
                .iter()
                .filter(|f| flags.contains(**f))
                .map(|f| (*f).to_owned())
                .collect(),
            gpu: None,
            ridgeline_version: env!("CARGO_PKG_VERSION").to_owned(),
            git_commit: option_env!("RIDGELINE_GIT_COMMIT").map(str::to_owned),
            timestamp: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            slurm: SlurmEnv::from_vars(|name| std::env::var(name).ok()),
            framework: None,
            blas: None,
        }
    }
}

/// Appends records to a JSON Lines file, one `write` per record.
#[derive(Debug)]
pub struct RecordWriter {
    path: PathBuf,
    file: File,
    done: HashSet<String>,
    /// The complete records a resumed file already held.
    kept: Vec<Record>,
}

/// Where a campaign's records go: a file opened by [`RecordWriter::open`]'s one resume rule
/// (and what wraps it to report that rule's findings). Runners that cannot be written
/// against one backend, as the MPI campaign across ranks, take this.
pub trait Sink {
    /// The file.
    fn path(&self) -> &Path;
    /// Whether the file already holds the record `id`.
    fn has(&self, id: &str) -> bool;
    /// The complete records the file held when it was opened (none for a new one).
    fn kept(&self) -> &[Record];
    /// Appends one measurement's records, all of them or none.
    fn write(&mut self, records: &[Record]) -> Result<()>;
}

impl Sink for RecordWriter {
    fn path(&self) -> &Path {
        &self.path
    }

    fn has(&self, id: &str) -> bool {
        RecordWriter::has(self, id)
    }

    fn kept(&self) -> &[Record] {
        &self.kept
    }

    fn write(&mut self, records: &[Record]) -> Result<()> {
        RecordWriter::write(self, records)
    }
}

/// What opening a file for resumption found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resumed {
    /// Complete records already in the file.
    pub records: usize,
    /// A torn last line (an interrupted write) that was dropped: its 1-based line number.
    pub torn_line: Option<usize>,
    /// The records of a measurement cut short (a workload's layers without their step,
    /// which is written last) that were dropped so the measurement runs again whole: the
    /// first line and how many.
    pub partial: Option<(usize, usize)>,
}

impl RecordWriter {
    /// Opens `path` for a new campaign (it must not exist) or, with `resume`, continues the
    /// one in it: complete records are kept and their ids skipped; a torn last line and the
    /// records of a measurement cut short are reported and cut off.
    pub fn open(path: &Path, resume: bool) -> Result<(RecordWriter, Resumed)> {
        let io = |cause| Error::Io {
            path: path.to_owned(),
            cause,
        };
        let exists = path.exists();
        if exists && !path.is_file() {
            return Err(Error::invalid(
                path.display().to_string(),
                "not a regular file: --out takes a records file (JSON Lines), new or from an \
                 earlier campaign",
            ));
        }
        if exists && !resume {
            return Err(Error::invalid(
                path.display().to_string(),
                "the file exists: pass --resume to continue that campaign, or choose another \
                 --out",
            ));
        }
        let (kept, resumed, keep) = if exists {
            scan(path)?
        } else {
            (Vec::new(), Resumed::default(), 0)
        };
        let done = kept.iter().map(|r| r.id.clone()).collect();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(io)?;
        if exists {
            // Cut a torn tail so the next record starts on its own line.
            file.set_len(keep).map_err(io)?;
        }
        Ok((
            RecordWriter {
                path: path.to_owned(),
                file,
                done,
                kept,
            },
            resumed,
        ))
    }

    /// Whether a record with this id is already in the file.
    pub fn has(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// Appends records and flushes them, in one write: the records of one measurement (a
    /// workload's layers and then its step) land together or, if the process dies
    /// mid-write, as a tail that the next `--resume` cuts off.
    pub fn write(&mut self, records: &[Record]) -> Result<()> {
        let mut buf = String::new();
        for record in records {
            buf.push_str(
                &serde_json::to_string(record)
                    .map_err(|e| Error::invalid("record", e.to_string()))?,
            );
            buf.push('\n');
        }
        self.file
            .write_all(buf.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|cause| Error::Io {
                path: self.path.clone(),
                cause,
            })?;
        self.done.extend(records.iter().map(|r| r.id.clone()));
        Ok(())
    }
}

/// Reads every complete record of a file (gzip-compressed where its name ends in `.gz`); a
/// torn last line is reported, not fatal. A line that is not a valid record, or an id that
/// appears twice, is an error naming the line.
pub fn read_records(path: &Path) -> Result<(Vec<Record>, Option<usize>)> {
    let parsed = parse(path)?;
    Ok((parsed.records, parsed.torn))
}

/// The records of `path` that a resumed campaign would keep, and what it would drop: the
/// one resume rule applied to a file that is read, not continued (a Slurm array task's file
/// joined into its campaign's).
pub fn read_resumable(path: &Path) -> Result<(Vec<Record>, Resumed)> {
    let (kept, resumed, _) = scan(path)?;
    Ok((kept, resumed))
}

/// The records of `path` that a resumed campaign keeps, what was found, and the byte length
/// to keep.
fn scan(path: &Path) -> Result<(Vec<Record>, Resumed, u64)> {
    let parsed = parse(path)?;
    let complete = parsed.records.len() - parsed.partial.map_or(0, |(_, n)| n);
    let resumed = Resumed {
        records: complete,
        torn_line: parsed.torn,
        partial: parsed.partial,
    };
    let mut kept = parsed.records;
    kept.truncate(complete);
    Ok((kept, resumed, parsed.case_end))
}

/// What a records file holds.
struct Parsed {
    records: Vec<Record>,
    /// A torn last line: its number.
    torn: Option<usize>,
    /// Trailing workload-layer records with no step after them: first line and count.
    partial: Option<(usize, usize)>,
    /// Bytes up to the end of the last whole measurement.
    case_end: u64,
}

fn parse(path: &Path) -> Result<Parsed> {
    let io = |cause| Error::Io {
        path: path.to_owned(),
        cause,
    };
    if !path.is_file() {
        return Err(Error::invalid(
            path.display().to_string(),
            "not a regular file: give a records file (JSON Lines)",
        ));
    }
    let bad = |line: usize, message: String| Error::Record {
        path: path.to_owned(),
        line,
        message,
    };
    let file = File::open(path).map_err(io)?;
    // A gzip-compressed file (`.gz`, as the checked-in kernel sets are) reads the same.
    let mut reader: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(BufReader::new(flate2::read::GzDecoder::new(file)))
    } else {
        Box::new(BufReader::new(file))
    };
    let mut records = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let (mut keep, mut case_end) = (0u64, 0u64);
    let mut partial: Option<(usize, usize)> = None;
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(io)?;
        if n == 0 {
            return Ok(Parsed {
                records,
                torn: None,
                partial,
                case_end: if partial.is_some() { case_end } else { keep },
            });
        }
        number += 1;
        if !line.ends_with('\n') {
            // Only an interrupted write leaves a line without its end: the last one.
            return Ok(Parsed {
                records,
                torn: Some(number),
                partial,
                case_end: if partial.is_some() { case_end } else { keep },
            });
        }
        keep += n as u64;
        if line.trim().is_empty() {
            if partial.is_none() {
                case_end = keep;
            }
            continue;
        }
        let record = parse_record(line.trim_end()).map_err(|m| bad(number, m))?;
        record.check().map_err(|m| bad(number, m))?;
        if let Some(first) = seen.insert(record.id.clone(), number) {
            return Err(bad(
                number,
                format!(
                    "the id `{}` is already on line {first}: a measurement is recorded once; \
                     delete one of the two lines",
                    record.id
                ),
            ));
        }
        if record.kind() == RecordKind::WorkloadLayer {
            let (first, count) = partial.unwrap_or((number, 0));
            partial = Some((first, count + 1));
        } else {
            partial = None;
            case_end = keep;
        }
        records.push(record);
    }
}

/// One measured training run: a `workload-step` record and the `workload-layer` records of
/// the same run (the same workload, input, batch, precision, device and threads). The one
/// place layer records are matched to their step.
#[derive(Debug, Clone)]
pub struct StepRun<'a> {
    /// The step record.
    pub step: &'a Record,
    /// The run: workload, input and batch.
    pub run: &'a StepShape,
    /// Its layers' records with their shapes, in the file's order.
    pub layers: Vec<(&'a Record, &'a LayerShape)>,
}

impl<'a> StepRun<'a> {
    /// Every step of `records` with its layers, in the file's order.
    pub fn from_records(records: &'a [Record]) -> Vec<StepRun<'a>> {
        records
            .iter()
            .filter_map(|step| match &step.measured {
                Measured::WorkloadStep(run) => Some(StepRun {
                    step,
                    run,
                    layers: records
                        .iter()
                        .filter_map(|l| match &l.measured {
                            Measured::WorkloadLayer(layer)
                                if layer.run == *run
                                    && l.threads == step.threads
                                    && l.device == step.device
                                    && l.precision == step.precision =>
                            {
                                Some((l, layer))
                            }
                            _ => None,
                        })
                        .collect(),
                }),
                _ => None,
            })
            .collect()
    }

    /// The record of `layer`'s `pass`, if it was measured.
    pub fn layer(&self, layer: &str, pass: crate::kinds::Pass) -> Option<&'a Record> {
        self.layers
            .iter()
            .find(|(_, s)| s.layer == layer && s.pass == pass)
            .map(|(r, _)| *r)
    }
}

/// Reads one record from its JSON line; the error names the field that is wrong.
fn parse_record(line: &str) -> std::result::Result<Record, String> {
    let de = &mut serde_json::Deserializer::from_str(line);
    match serde_path_to_error::deserialize::<_, Record>(de) {
        Ok(r) => Ok(r),
        Err(e) => {
            let path = e.path().to_string();
            if path != "." {
                return Err(format!("{path}: {}", e.inner()));
            }
            // The kind and shape are read together (a flattened enum), which hides the
            // path: read them alone to name the shape's field.
            let de = &mut serde_json::Deserializer::from_str(line);
            match serde_path_to_error::deserialize::<_, Measured>(de) {
                Err(m) if m.path().to_string() != "." => {
                    Err(format!("{}: {}", m.path(), m.inner()))
                }
                _ => Err(e.inner().to_string()),
            }
        }
    }
}

/// The id of a measurement: its kind, shape (keys sorted), precision, threads and device.
pub fn record_id(
    measured: &Measured,
    precision: RecordPrecision,
    threads: usize,
    device: Device,
) -> String {
    format!(
        "{}|{}|{precision}|{threads}|{device}",
        measured.kind(),
        measured.shape_json()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slurm_job_is_read_from_the_variables_slurm_sets() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(SlurmEnv::from_vars(vars(&[])), None);
        assert_eq!(SlurmEnv::from_vars(vars(&[("SLURM_JOB_ID", "")])), None);
        let task = SlurmEnv::from_vars(vars(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_ARRAY_JOB_ID", "41"),
            ("SLURM_ARRAY_TASK_ID", "1"),
            ("SLURMD_NODENAME", "nid0007"),
            ("SLURM_JOB_PARTITION", "gpu"),
        ]))
        .unwrap();
        assert_eq!(task.job_id, "42");
        assert_eq!(task.array_job_id.as_deref(), Some("41"));
        assert_eq!(task.array_task_id.as_deref(), Some("1"));
        assert_eq!(task.node.as_deref(), Some("nid0007"));
        assert_eq!(task.partition.as_deref(), Some("gpu"));
        // Outside a job array the array's fields are left out of the record.
        let job = SlurmEnv::from_vars(vars(&[("SLURM_JOB_ID", "7")])).unwrap();
        let json = serde_json::to_string(&job).unwrap();
        assert_eq!(json, r#"{"job_id":"7"}"#);
    }

    fn record(n: usize) -> Record {
        let (m, b) = (n as u64, n as f64);
        with(Measured::Gemm(GemmShape { m, n: m, k: m }), 2.0 * b * b * b)
    }

    fn with(measured: Measured, flops: f64) -> Record {
        Record::new(
            measured,
            RecordPrecision::Fp32,
            Device::Cpu,
            1,
            vec![0.1, 0.2],
            flops,
            1024.0,
            Env::capture(),
        )
    }

    fn layer(workload: &str, batch: usize, name: &str) -> Measured {
        Measured::WorkloadLayer(LayerShape {
            run: StepShape {
                workload: workload.into(),
                input: vec![1, 8],
                batch,
                ranks: None,
            },
            layer: name.into(),
            op: "relu".into(),
            pass: crate::kinds::Pass::Forward,
        })
    }

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ridgeline-records-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        dir
    }

    #[test]
    fn records_round_trip_and_resume_skips_them() {
        let path = temp("roundtrip");
        let (mut w, found) = RecordWriter::open(&path, false).unwrap();
        assert_eq!(found, Resumed::default());
        let written = [record(8), record(16)];
        w.write(&written).unwrap();
        drop(w);
        let (w, found) = RecordWriter::open(&path, true).unwrap();
        assert_eq!(found.records, 2);
        assert!(w.has(&record(8).id) && !w.has(&record(32).id));
        let (records, torn) = read_records(&path).unwrap();
        assert_eq!(records, written);
        assert_eq!(torn, None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn gzip_compressed_records_read_the_same() {
        use std::io::Write as _;
        let path = temp("roundtrip-gz");
        let (mut w, _) = RecordWriter::open(&path, false).unwrap();
        let written = [record(8), record(16)];
        w.write(&written).unwrap();
        drop(w);
        let text = std::fs::read(&path).unwrap();
        let gz = path.with_extension("jsonl.gz");
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::default(),
        );
        e.write_all(&text).unwrap();
        e.finish().unwrap();
        let (records, torn) = read_records(&gz).unwrap();
        assert_eq!((records.as_slice(), torn), (written.as_slice(), None));
        // A plain file named .gz is not silently read as records.
        std::fs::copy(&path, &gz).unwrap();
        assert!(read_records(&gz).is_err());
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&gz).unwrap();
    }

    #[test]
    fn a_kind_reads_and_writes_its_one_name() {
        for k in RecordKind::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert_eq!(serde_json::from_str::<RecordKind>(&json).unwrap(), k);
        }
        let err = serde_json::from_str::<RecordKind>("\"gemv\"")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("kind `gemv`: must be one of gemm, conv"),
            "{err}"
        );
    }

    /// `tests/fixtures/records-v1.jsonl` was written by ridgeline at e5d66e8, before the
    /// record's kind, precision and device were typed: `measure gemm --size 16`, `measure
    /// stream --size 64K --kernel triad`, `measure conv` and `measure ops --op relu` on
    /// `--workload tests/fixtures/tiny.toml`, and `measure workload tests/fixtures/tiny.toml
    /// --steps 2`, each with `--out` (and `--resume`).
    #[test]
    fn a_committed_version_1_file_reads_and_writes_back_the_same() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/records-v1.jsonl");
        let (records, torn) = read_records(&path).unwrap();
        assert_eq!((records.len(), torn), (24, None));
        let kinds: HashSet<RecordKind> = records.iter().map(Record::kind).collect();
        for k in [
            RecordKind::Gemm,
            RecordKind::Stream,
            RecordKind::Conv,
            RecordKind::Op,
            RecordKind::WorkloadLayer,
            RecordKind::WorkloadStep,
        ] {
            assert!(kinds.contains(&k), "{k}");
        }
        let runs = StepRun::from_records(&records);
        assert_eq!(runs.len(), 1);
        assert!(!runs[0].layers.is_empty());
        // Version 2 makes the same ids, so a version 1 campaign resumes.
        for r in &records {
            assert_eq!(r.schema_version, 1);
            assert_eq!(
                record_id(&r.measured, r.precision, r.threads, r.device),
                r.id
            );
        }
        // Every field written back as read (samples to the last bit serde_json's float
        // parsing keeps).
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, r) in text.lines().zip(&records) {
            let mut read: serde_json::Value = serde_json::from_str(line).unwrap();
            let mut written = serde_json::to_value(r).unwrap();
            let samples = |v: &mut serde_json::Value| -> Vec<f64> {
                serde_json::from_value(v["samples_s"].take()).unwrap()
            };
            for (a, b) in samples(&mut read).iter().zip(samples(&mut written)) {
                assert!((a - b).abs() <= 1e-15 * a.abs(), "{a} {b}");
            }
            assert_eq!(read, written, "written back as read");
        }
    }

    #[test]
    fn a_precision_reads_and_writes_its_name_and_knows_training_ones() {
        use ridgeline_model::precision::Precision;
        for p in RecordPrecision::ALL {
            let json = serde_json::to_string(&p).unwrap();
            assert_eq!(json, format!("\"{}\"", p.name()));
            assert_eq!(serde_json::from_str::<RecordPrecision>(&json).unwrap(), p);
        }
        for t in [
            Precision::Fp32,
            Precision::Tf32,
            Precision::AmpFp16,
            Precision::AmpBf16,
        ] {
            assert_eq!(RecordPrecision::from(t).training(), Some(t));
            assert_eq!(RecordPrecision::from(t).name(), t.name());
        }
        assert_eq!(RecordPrecision::Bytes.training(), None);
        assert_eq!(
            RecordPrecision::Fp16.training(),
            None,
            "a kernel format, not a training one"
        );
        let err = "fp7".parse::<RecordPrecision>().unwrap_err();
        assert!(
            err.starts_with("precision `fp7`: must be one of fp64, fp32"),
            "{err}"
        );
    }

    #[test]
    fn a_device_reads_and_writes_its_name() {
        for (name, d) in [
            ("cpu", Device::Cpu),
            ("cuda:3", Device::Cuda(3)),
            ("cuda", Device::Gpus),
            ("mpi", Device::Mpi),
        ] {
            assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{name}\""));
            assert_eq!(
                serde_json::from_str::<Device>(&format!("\"{name}\"")).unwrap(),
                d
            );
        }
        for bad in ["gpu", "cuda:", "cuda:x", "CPU"] {
            let err = bad.parse::<Device>().unwrap_err();
            assert!(err.contains("must be `cpu`, `cuda:N`"), "{err}");
        }
    }

    #[test]
    fn a_step_takes_the_layers_of_its_own_run_only() {
        let run = |batch: usize, threads: usize, layers: &[&str]| {
            let mut out: Vec<Record> = layers
                .iter()
                .map(|l| Record {
                    threads,
                    ..with(layer("w", batch, l), 0.0)
                })
                .collect();
            let Measured::WorkloadLayer(l) = layer("w", batch, "") else {
                unreachable!()
            };
            out.push(Record {
                threads,
                ..with(Measured::WorkloadStep(l.run), 1.0)
            });
            out
        };
        let records: Vec<Record> =
            [run(1, 1, &["a", "b"]), run(2, 1, &["a"]), run(1, 2, &["c"])].concat();
        let runs = StepRun::from_records(&records);
        let layers: Vec<Vec<&str>> = runs
            .iter()
            .map(|r| r.layers.iter().map(|(_, l)| l.layer.as_str()).collect())
            .collect();
        assert_eq!(layers, [vec!["a", "b"], vec!["a"], vec!["c"]]);
    }

    #[test]
    fn a_device_is_not_a_records_file() {
        let err = RecordWriter::open(Path::new("/dev/null"), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn a_torn_last_line_is_reported_and_cut() {
        let path = temp("torn");
        let (mut w, _) = RecordWriter::open(&path, false).unwrap();
        w.write(&[record(8)]).unwrap();
        drop(w);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"schema_version\": 1, \"id\": \"gem")
            .unwrap();
        drop(f);
        let (_, torn) = read_records(&path).unwrap();
        assert_eq!(torn, Some(2));
        let (mut w, found) = RecordWriter::open(&path, true).unwrap();
        assert_eq!(
            found,
            Resumed {
                records: 1,
                torn_line: Some(2),
                partial: None,
            }
        );
        w.write(&[record(16)]).unwrap();
        let (records, torn) = read_records(&path).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(torn, None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn corruption_before_the_last_line_is_an_error() {
        let path = temp("corrupt");
        let line = serde_json::to_string(&record(8)).unwrap();
        std::fs::write(&path, format!("not json\n{line}\n")).unwrap();
        let err = read_records(&path).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_complete_line_that_is_not_a_record_is_an_error_not_a_torn_write() {
        let path = temp("complete-garbage");
        let line = serde_json::to_string(&record(8)).unwrap();
        std::fs::write(&path, format!("{line}\nnot json\n")).unwrap();
        let err = read_records(&path).unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(
            RecordWriter::open(&path, true).is_err(),
            "resume keeps the file as it is"
        );
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("not json\n")
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn records_that_claim_nonsense_are_refused_naming_the_field() {
        let path = temp("nonsense");
        for (edit, field) in [
            ("\"schema_version\":2", "\"schema_version\":99"),
            ("\"threads\":1", "\"threads\":0"),
            ("\"precision\":\"fp32\"", "\"precision\":\"fp7\""),
            ("\"device\":\"cpu\"", "\"device\":\"quantum\""),
            ("\"m\":8", "\"m\":0"),
            ("\"m\":8", "\"m\":-8"),
            ("\"m\":8,", ""),
            ("\"kind\":\"gemm\"", "\"kind\":\"gemv\""),
            ("\"samples_s\":[", "\"samples_s\":[\"x\","),
            (
                "\"bytes\":1024.0",
                "\"bytes\":1024.0,\"extra\":{\"peak_bytes\":-41}",
            ),
        ] {
            let line = serde_json::to_string(&record(8)).unwrap();
            assert!(line.contains(edit), "{line}");
            std::fs::write(&path, format!("{}\n", line.replace(edit, field))).unwrap();
            let err = read_records(&path).unwrap_err().to_string();
            let key = match field {
                "" => "shape: missing field `m`",
                f if f.contains("peak_bytes") => "extra.peak_bytes",
                f if f.contains("gemv") => "unknown variant `gemv`",
                f => f.split(':').next().unwrap().trim_matches('"'),
            };
            assert!(
                err.contains("line 1") && err.contains(key),
                "{field}: {err}"
            );
        }
        let mut r = record(8);
        r.flops = -1.0;
        assert!(r.check().unwrap_err().contains("flops"));
        r.flops = 0.0;
        assert!(r.check().unwrap_err().contains("more than 0"));
        let mut w = record(8);
        w.extra.update_s = vec![1.0, -1.0];
        assert!(w.check().unwrap_err().contains("extra.update_s holds -1"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_duplicate_id_is_an_error() {
        let path = temp("duplicate");
        let line = serde_json::to_string(&record(8)).unwrap();
        std::fs::write(&path, format!("{line}\n{line}\n")).unwrap();
        let err = read_records(&path).unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("already on line 1"),
            "{err}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn resume_drops_the_layers_of_a_measurement_cut_short() {
        let path = temp("partial");
        let mut step = with(layer("w", 1, "step"), 1.0);
        step.measured = Measured::WorkloadStep(step.measured.run().unwrap().clone());
        step.id = "step".into();
        let layer = |name: &str| with(layer("w", 1, name), 0.0);
        let (mut w, _) = RecordWriter::open(&path, false).unwrap();
        w.write(&[layer("a"), step]).unwrap();
        w.write(&[layer("b"), layer("c")]).unwrap();
        drop(w);
        let (w, found) = RecordWriter::open(&path, true).unwrap();
        assert_eq!(found.records, 2);
        assert_eq!(found.partial, Some((3, 2)));
        assert!(w.has("step") && !w.has(&layer("b").id));
        let (records, _) = read_records(&path).unwrap();
        assert_eq!(records.len(), 2, "the partial layers are cut from the file");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn an_existing_file_needs_resume() {
        let path = temp("exists");
        std::fs::write(&path, "").unwrap();
        let err = RecordWriter::open(&path, false).unwrap_err().to_string();
        assert!(err.contains("--resume"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn env_has_the_basics() {
        let e = Env::capture();
        assert!(e.cores >= 1);
        assert!(!e.timestamp.is_empty() && e.timestamp.ends_with('Z'));
        assert_eq!(e.ridgeline_version, env!("CARGO_PKG_VERSION"));
    }
}
