//! Measurement records: one JSON object per line (JSON Lines), appended and flushed one at a
//! time, so a campaign interrupted at any point loses no completed record.
//!
//! The schema (version 1) is documented in the crate docs.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The version of the record schema written by this build.
pub const SCHEMA_VERSION: u32 = 1;

/// One measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Schema version.
    pub schema_version: u32,
    /// Unique key of the measurement.
    pub id: String,
    /// What was measured.
    pub kind: String,
    /// The case, as an object.
    pub shape: serde_json::Value,
    /// Number format.
    pub precision: String,
    /// Device.
    pub device: String,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<serde_json::Value>,
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
        }
    }
}

/// Appends records to a JSON Lines file, one `write` per record.
#[derive(Debug)]
pub struct RecordWriter {
    path: PathBuf,
    file: File,
    done: HashSet<String>,
}

/// What opening a file for resumption found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Resumed {
    /// Complete records already in the file.
    pub records: usize,
    /// A torn last line (an interrupted write) that was dropped: its 1-based line number.
    pub torn_line: Option<usize>,
}

impl RecordWriter {
    /// Opens `path` for a new campaign (it must not exist) or, with `resume`, continues the
    /// one in it: complete records are kept and their ids skipped, a torn last line is
    /// reported and cut off.
    pub fn open(path: &Path, resume: bool) -> Result<(RecordWriter, Resumed)> {
        let io = |source| Error::Io {
            path: path.to_owned(),
            source,
        };
        let exists = path.exists();
        if exists && !resume {
            return Err(Error::invalid(
                path.display().to_string(),
                "the file exists: pass --resume to continue that campaign, or choose another \
                 --out",
            ));
        }
        let (done, resumed, keep) = if exists {
            scan(path)?
        } else {
            (HashSet::new(), Resumed::default(), 0)
        };
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
            },
            resumed,
        ))
    }

    /// Whether a record with this id is already in the file.
    pub fn has(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// Appends records and flushes them, in one write: the records of one measurement (a
    /// workload's layers and step) land together or, if the process dies mid-write, as a
    /// torn tail that the next `--resume` cuts off.
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
            .map_err(|source| Error::Io {
                path: self.path.clone(),
                source,
            })?;
        self.done.extend(records.iter().map(|r| r.id.clone()));
        Ok(())
    }
}

/// Reads every complete record of a file; a torn last line is reported, not fatal.
pub fn read_records(path: &Path) -> Result<(Vec<Record>, Option<usize>)> {
    let (records, torn, _) = parse(path)?;
    Ok((records, torn))
}

/// The ids in `path`, what was found, and the byte length of its complete lines.
fn scan(path: &Path) -> Result<(HashSet<String>, Resumed, u64)> {
    let (records, torn, keep) = parse(path)?;
    let resumed = Resumed {
        records: records.len(),
        torn_line: torn,
    };
    Ok((records.into_iter().map(|r| r.id).collect(), resumed, keep))
}

fn parse(path: &Path) -> Result<(Vec<Record>, Option<usize>, u64)> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let mut reader = BufReader::new(File::open(path).map_err(io)?);
    let mut records = Vec::new();
    let mut keep = 0u64;
    let mut line = String::new();
    let mut number = 0;
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(io)?;
        if n == 0 {
            return Ok((records, None, keep));
        }
        number += 1;
        let complete = line.ends_with('\n');
        match serde_json::from_str::<Record>(line.trim_end()) {
            Ok(r) if complete => {
                records.push(r);
                keep += n as u64;
            }
            Ok(_) | Err(_) if line.trim().is_empty() && complete => keep += n as u64,
            result => {
                // Anything wrong with the very last line is a torn write; earlier, it is not.
                let mut rest = String::new();
                let more = reader.read_line(&mut rest).map_err(io)? > 0;
                if !more {
                    return Ok((records, Some(number), keep));
                }
                let message = match result {
                    Err(e) => e.to_string(),
                    Ok(_) => "line not terminated".into(),
                };
                return Err(Error::Record {
                    path: path.to_owned(),
                    line: number,
                    message,
                });
            }
        }
    }
}

/// The id of a measurement: its kind, shape, precision, threads and device.
pub fn record_id(
    kind: &str,
    shape: &serde_json::Value,
    precision: &str,
    threads: usize,
    device: &str,
) -> String {
    format!("{kind}|{shape}|{precision}|{threads}|{device}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: usize) -> Record {
        let shape = serde_json::json!({ "m": n, "n": n, "k": n });
        Record {
            schema_version: SCHEMA_VERSION,
            id: record_id("gemm", &shape, "fp32", 1, "cpu"),
            kind: "gemm".into(),
            shape,
            precision: "fp32".into(),
            device: "cpu".into(),
            threads: 1,
            samples_s: vec![0.1, 0.2],
            flops: 2.0 * (n * n * n) as f64,
            bytes: 12.0 * (n * n) as f64,
            env: Env::capture(),
            extra: None,
        }
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
                torn_line: Some(2)
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
