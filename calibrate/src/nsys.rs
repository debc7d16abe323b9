//! Nsight Systems reports, as `nsys export --type sqlite` writes them, read with rusqlite:
//! the GPU kernels (`CUPTI_ACTIVITY_KIND_KERNEL`, names in `StringIds`), the CUDA runtime
//! calls that launched them (`CUPTI_ACTIVITY_KIND_RUNTIME`, matched by `correlationId`) and
//! the NVTX ranges the program marked (`NVTX_EVENTS`: push/pop ranges on the launching
//! thread, start/end ranges anywhere).
//!
//! Each kernel belongs to the innermost NVTX range around its launch. Where the user marked
//! a workload's layers (ranges named `LAYER`, `LAYER forward` or `LAYER backward`) and its
//! steps (ranges whose name starts with `step`), the report becomes `workload-layer` and
//! `workload-step` records, as `ridgeline measure workload` writes them: a layer pass's time
//! is the time of the kernels it launched, a step's its range.

use std::collections::BTreeMap;
use std::path::Path;

use ridgeline_measure::record::StepShape;
use ridgeline_measure::{Device, Env, GpuEnv, Measured, Record};
use ridgeline_model::graph::Graph;
use ridgeline_model::precision::Precision;
use rusqlite::{Connection, OpenFlags};
use serde::Serialize;

use crate::error::{Error, Result};

/// NVTX event types of ranges (`NvtxPushPopRange`, `NvtxStartEndRange`).
const PUSH_POP: i64 = 59;
const START_END: i64 = 60;

/// One GPU kernel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kernel {
    /// Its short name.
    pub name: String,
    /// Start and end, nanoseconds.
    pub start_ns: i64,
    /// End, nanoseconds.
    pub end_ns: i64,
    /// The GPU.
    pub device: i64,
    /// The innermost NVTX range around its launch (an index of [`Report::ranges`]).
    pub range: Option<usize>,
}

/// One NVTX range.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Range {
    /// Its text.
    pub name: String,
    /// Start, nanoseconds.
    pub start_ns: i64,
    /// End, nanoseconds.
    pub end_ns: i64,
}

/// A report, read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The file.
    pub file: String,
    /// The first GPU's name (`TARGET_INFO_GPU`), where the report has it.
    pub gpu: Option<String>,
    /// The kernels, by start.
    pub kernels: Vec<Kernel>,
    /// The NVTX ranges, by start.
    pub ranges: Vec<Range>,
}

/// Kernels and their time under one NVTX range name (or under none).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RangeRow {
    /// The range's name; empty for kernels outside every range.
    pub range: String,
    /// The range's calls (0 for kernels outside every range).
    pub calls: usize,
    /// Kernels launched inside it.
    pub kernels: usize,
    /// Their time, seconds.
    pub kernel_s: f64,
    /// The distinct kernel names, most time first.
    pub kernel_names: Vec<String>,
}

/// A range name's calls, kernels, kernel seconds and seconds per kernel name.
type Tally<'a> = (usize, usize, f64, BTreeMap<&'a str, f64>);

impl Report {
    /// Reads the SQLite export at `path`. A file that is not SQLite, or an export without the
    /// kernel table (a report profiled without `--trace=cuda`), is an error naming the file.
    pub fn read(path: &Path) -> Result<Report> {
        let file = path.display().to_string();
        let db = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| Error::Input(format!("{file}: {e}")))?;
        let sql = |e: rusqlite::Error| {
            Error::Input(format!(
                "{file}: {e}; not an Nsight Systems SQLite export (`nsys export --type sqlite`)"
            ))
        };
        let has = |table: &str| -> Result<bool> {
            db.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(sql)
        };
        if !has("CUPTI_ACTIVITY_KIND_KERNEL")? {
            return Err(Error::Input(format!(
                "{file}: no CUPTI_ACTIVITY_KIND_KERNEL table: the report holds no GPU kernels \
                 (profile with `nsys profile --trace=cuda,nvtx`)"
            )));
        }
        let strings = has("StringIds")?;
        let name_join = if strings {
            "LEFT JOIN StringIds s ON s.id = k.shortName"
        } else {
            "LEFT JOIN (SELECT NULL AS id, NULL AS value) s ON 0"
        };
        let mut launches: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
        if has("CUPTI_ACTIVITY_KIND_RUNTIME")? {
            let mut q = db
                .prepare("SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME")
                .map_err(sql)?;
            let rows = q
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                    ))
                })
                .map_err(sql)?;
            for row in rows {
                let (c, start, tid) = row.map_err(sql)?;
                launches.insert(c, (start, tid));
            }
        }
        // Ranges with the thread that pushed them (push/pop ranges nest per thread).
        let mut ranges: Vec<(Range, Option<i64>)> = Vec::new();
        if has("NVTX_EVENTS")? {
            let text = if strings {
                "COALESCE(n.text, s.value, '') FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId"
            } else {
                "COALESCE(n.text, '') FROM NVTX_EVENTS n"
            };
            let mut q = db
                .prepare(&format!(
                    "SELECT n.start, n.end, n.eventType, n.globalTid, {text} \
                     WHERE n.end IS NOT NULL AND n.eventType IN ({PUSH_POP}, {START_END}) \
                     ORDER BY n.start"
                ))
                .map_err(sql)?;
            let rows = q
                .query_map([], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, i64>(2)?,
                        r.get::<_, Option<i64>>(3)?,
                        r.get::<_, String>(4)?,
                    ))
                })
                .map_err(sql)?;
            for row in rows {
                let (start, end, kind, tid, name) = row.map_err(sql)?;
                if end < start {
                    return Err(Error::Input(format!(
                        "{file}: NVTX range `{name}` ends at {end} ns, before it starts at \
                         {start} ns; the report is damaged"
                    )));
                }
                ranges.push((
                    Range {
                        name,
                        start_ns: start,
                        end_ns: end,
                    },
                    (kind == PUSH_POP).then_some(tid).flatten(),
                ));
            }
        }
        let mut q = db
            .prepare(&format!(
                "SELECT k.start, k.end, k.deviceId, k.correlationId, COALESCE(s.value, '') \
                 FROM CUPTI_ACTIVITY_KIND_KERNEL k {name_join} ORDER BY k.start"
            ))
            .map_err(sql)?;
        let rows = q
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, Option<i64>>(2)?.unwrap_or(0),
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, String>(4)?,
                ))
            })
            .map_err(sql)?;
        let mut kernels = Vec::new();
        for row in rows {
            let (start, end, device, correlation, name) = row.map_err(sql)?;
            if end < start {
                return Err(Error::Input(format!(
                    "{file}: kernel `{name}` ends at {end} ns, before it starts at {start} ns; \
                     the report is damaged"
                )));
            }
            // The innermost range around the launch: the shortest that holds it, on the
            // launching thread for a push/pop range.
            let launch = correlation.and_then(|c| launches.get(&c)).copied();
            let range = launch.and_then(|(at, tid)| {
                ranges
                    .iter()
                    .enumerate()
                    .filter(|(_, (r, t))| {
                        r.start_ns <= at && at <= r.end_ns && t.is_none_or(|t| t == tid)
                    })
                    .min_by_key(|(_, (r, _))| r.end_ns - r.start_ns)
                    .map(|(i, _)| i)
            });
            kernels.push(Kernel {
                name,
                start_ns: start,
                end_ns: end,
                device,
                range,
            });
        }
        let gpu = if has("TARGET_INFO_GPU")? {
            db.query_row("SELECT name FROM TARGET_INFO_GPU LIMIT 1", [], |r| {
                r.get::<_, Option<String>>(0)
            })
            .ok()
            .flatten()
        } else {
            None
        };
        Ok(Report {
            file,
            gpu,
            kernels,
            ranges: ranges.into_iter().map(|(r, _)| r).collect(),
        })
    }

    /// The kernels under each range name (and, with an empty name, outside every range),
    /// most kernel time first.
    pub fn by_range(&self) -> Vec<RangeRow> {
        let mut rows: BTreeMap<&str, Tally<'_>> = BTreeMap::new();
        for r in &self.ranges {
            rows.entry(r.name.as_str()).or_default().0 += 1;
        }
        for k in &self.kernels {
            let name = k.range.map_or("", |i| self.ranges[i].name.as_str());
            let row = rows.entry(name).or_default();
            let t = (k.end_ns - k.start_ns) as f64 / 1e9;
            row.1 += 1;
            row.2 += t;
            *row.3.entry(k.name.as_str()).or_default() += t;
        }
        let mut out: Vec<RangeRow> = rows
            .into_iter()
            .filter(|(_, (_, kernels, _, _))| *kernels > 0)
            .map(|(range, (calls, kernels, kernel_s, names))| {
                let mut names: Vec<(&str, f64)> = names.into_iter().collect();
                names.sort_by(|a, b| b.1.total_cmp(&a.1));
                RangeRow {
                    range: range.to_owned(),
                    calls,
                    kernels,
                    kernel_s,
                    kernel_names: names.into_iter().map(|(n, _)| n.to_owned()).collect(),
                }
            })
            .collect();
        out.sort_by(|a, b| b.kernel_s.total_cmp(&a.kernel_s));
        out
    }

    /// Kernel time inside each occurrence of the ranges named `name`, seconds, in order.
    fn per_call(&self, name: &str) -> Vec<f64> {
        let mut out = Vec::new();
        let mut index = BTreeMap::new();
        for (i, r) in self.ranges.iter().enumerate() {
            if r.name == name {
                index.insert(i, out.len());
                out.push(0.0);
            }
        }
        for k in &self.kernels {
            if let Some(j) = k.range.and_then(|i| index.get(&i)) {
                out[*j] += (k.end_ns - k.start_ns) as f64 / 1e9;
            }
        }
        out
    }

    /// The `workload-layer` and `workload-step` records of `graph` at `batch` in
    /// `precision`, from ranges named after its layers (`LAYER` or `LAYER forward` for the
    /// forward pass, `LAYER backward`) and its steps (names starting with `step`). Layers
    /// without a range get no record; a report with neither is refused.
    pub fn records(
        &self,
        graph: &Graph,
        batch: usize,
        precision: Precision,
    ) -> Result<Vec<Record>> {
        let steps: Vec<f64> = self
            .ranges
            .iter()
            .filter(|r| r.name.starts_with("step"))
            .map(|r| (r.end_ns - r.start_ns) as f64 / 1e9)
            .collect();
        if steps.is_empty() {
            return Err(Error::Input(format!(
                "{}: no NVTX range named `step...`: mark each training step (e.g. \
                 `torch.cuda.nvtx.range_push(\"step\")`) to import steps",
                self.file
            )));
        }
        let env = Env {
            host: format!("Nsight Systems report {}", self.file),
            cpu_model: "unknown (imported)".into(),
            cores: 1,
            simd: Vec::new(),
            gpu: self.gpu.as_ref().map(|name| GpuEnv {
                ordinal: 0,
                name: name.clone(),
                compute_capability: "unknown".into(),
                memory_bytes: 0,
                sm_clock_mhz: None,
                memory_clock_mhz: None,
                l2_bytes: None,
                driver_version: "unknown".into(),
                libraries: BTreeMap::new(),
            }),
            ridgeline_version: env!("CARGO_PKG_VERSION").to_owned(),
            git_commit: None,
            timestamp: String::new(),
            slurm: None,
            framework: None,
            blas: None,
        };
        let run = StepShape {
            workload: graph.name().to_owned(),
            input: graph.input_shape().dims().to_vec(),
            batch,
            ranks: None,
        };
        let cost = ridgeline_model::cost::cost(graph, batch as u64, precision);
        let source = crate::torch_trace::Source {
            name: format!("Nsight Systems report {}", self.file),
            device: Device::Cuda(0),
            threads: 1,
            env,
        };
        let make = |measured: Measured, samples: Vec<f64>, flops: f64, bytes: f64| {
            source.record(measured, precision.into(), samples, flops, bytes)
        };
        let mut out = Vec::new();
        for (layer, lc) in graph.layers().iter().zip(&cost.layers) {
            let name = layer.name.as_str();
            let forward = [name.to_owned(), format!("{name} forward")]
                .iter()
                .map(|n| self.per_call(n))
                .find(|v| !v.is_empty())
                .unwrap_or_default();
            let backward = self.per_call(&format!("{name} backward"));
            for (shape, samples, flops, bytes) in
                crate::torch_trace::layer_passes(&run, layer, lc, [&forward, &backward])
            {
                out.push(make(shape, samples, flops, bytes));
            }
        }
        out.push(make(
            Measured::WorkloadStep(run),
            steps,
            cost.flops_train.value(),
            cost.hbm_bytes_train.value(),
        ));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An export with the tables and columns the reader takes, as Nsight Systems names them.
    fn export(
        dir: &Path,
        kernels: &[(i64, i64, i64, &str)],
        ranges: &[(i64, i64, &str)],
    ) -> std::path::PathBuf {
        let path = dir.join("report.sqlite");
        let _ = std::fs::remove_file(&path);
        let db = Connection::open(&path).unwrap();
        db.execute_batch(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
             CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER,
                deviceId INTEGER, correlationId INTEGER, shortName INTEGER);
             CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER,
                globalTid INTEGER, correlationId INTEGER);
             CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER,
                globalTid INTEGER, text TEXT, textId INTEGER);",
        )
        .unwrap();
        for (i, &(start, end, launch, name)) in kernels.iter().enumerate() {
            let id = i as i64 + 1;
            db.execute("INSERT INTO StringIds VALUES (?1, ?2)", (100 + id, name))
                .unwrap();
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?1, ?2, 0, ?3, ?4)",
                (start, end, id, 100 + id),
            )
            .unwrap();
            db.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, 7, ?3)",
                (launch, launch + 1, id),
            )
            .unwrap();
        }
        for &(start, end, name) in ranges {
            db.execute(
                "INSERT INTO NVTX_EVENTS VALUES (?1, ?2, 59, 7, ?3, NULL)",
                (start, end, name),
            )
            .unwrap();
        }
        path
    }

    #[test]
    fn kernels_go_to_the_innermost_range_around_their_launch() {
        let dir = tempfile::tempdir().unwrap();
        let path = export(
            dir.path(),
            // Launched inside `fc forward`, inside `fc backward`, and outside any range.
            &[
                (1000, 1500, 110, "gemm"),
                (2000, 2600, 210, "gemm_bwd"),
                (9000, 9100, 900, "copy"),
            ],
            &[
                (0, 400, "step"),
                (100, 150, "fc forward"),
                (200, 260, "fc backward"),
            ],
        );
        let r = Report::read(&path).unwrap();
        assert_eq!(r.kernels.len(), 3);
        let rows = r.by_range();
        let row = |n: &str| rows.iter().find(|x| x.range == n).unwrap();
        assert_eq!(row("fc backward").kernels, 1);
        assert!((row("fc forward").kernel_s - 500e-9).abs() < 1e-15);
        assert_eq!(row("").kernel_names, vec!["copy"]);
        assert!(
            !rows.iter().any(|x| x.range == "step"),
            "no kernel directly in `step`"
        );
    }

    #[test]
    fn marked_layers_become_records() {
        let text = include_str!("../../tests/fixtures/tiny.toml");
        let g = ridgeline_model::file::parse_workload(text, "tiny.toml", None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = export(
            dir.path(),
            &[
                (1000, 1500, 110, "conv"),
                (2000, 2600, 210, "dconv"),
                (3000, 3100, 1110, "conv"),
            ],
            &[
                (0, 400, "step 1"),
                (100, 150, "conv"),
                (200, 260, "conv backward"),
                (1000, 1400, "step 2"),
                (1100, 1150, "conv"),
            ],
        );
        let records = Report::read(&path)
            .unwrap()
            .records(&g, 2, Precision::Fp32)
            .unwrap();
        let kinds: Vec<&str> = records.iter().map(|r| r.kind().name()).collect();
        assert_eq!(kinds, ["workload-layer", "workload-layer", "workload-step"]);
        assert_eq!(records[0].samples_s, vec![500e-9, 100e-9]);
        assert_eq!(records[1].samples_s, vec![600e-9]);
        assert_eq!(records[2].samples_s, vec![400e-9, 400e-9]);
        for r in &records {
            r.check().unwrap();
        }
        // Without step ranges there are no steps to import.
        let path = export(
            dir.path(),
            &[(1000, 1500, 110, "conv")],
            &[(100, 150, "conv")],
        );
        let e = Report::read(&path)
            .unwrap()
            .records(&g, 2, Precision::Fp32)
            .unwrap_err();
        assert!(
            e.to_string().contains("no NVTX range named `step...`"),
            "{e}"
        );
    }

    #[test]
    fn what_is_no_export_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.sqlite");
        std::fs::write(&text, "not a database, only text").unwrap();
        let e = Report::read(&text).unwrap_err().to_string();
        assert!(e.contains("notes.sqlite"), "{e}");
        let empty = dir.path().join("empty.sqlite");
        Connection::open(&empty)
            .unwrap()
            .execute_batch("CREATE TABLE x (a);")
            .unwrap();
        let e = Report::read(&empty).unwrap_err().to_string();
        assert!(e.contains("no CUPTI_ACTIVITY_KIND_KERNEL table"), "{e}");
    }
}
