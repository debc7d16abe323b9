//! MLPerf result logs (`:::MLLOG {json}` lines, the MLCommons logging library's format) read
//! as run records: what a training run was (benchmark, submitter's system and accelerators,
//! global batch, samples) and how long it took (initialisation, staging, each epoch, the
//! evaluations, run start to run stop, throughput where the log has it).
//!
//! A run record is one line of JSON ([`RunRecord`], tagged `"record": "mlperf_run"`), so a
//! folder of results becomes a `runs.jsonl` that `ridgeline validate --measured` compares
//! with `predict`. The submitter's system description (`systems/<system>.json` beside
//! `results/`) gives the nodes and accelerators; without it the log's
//! `submission_platform` does.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};

/// The tag of a run record's line.
pub const RUN_RECORD: &str = "mlperf_run";

/// The prefix of a logged line.
const PREFIX: &str = ":::MLLOG";

/// The earliest `time_ms` a log may give: 2000-01-01, milliseconds since the Unix epoch.
const EARLIEST_MS: f64 = 946_684_800_000.0;
/// The latest: 2100-01-01.
const LATEST_MS: f64 = 4_102_444_800_000.0;

/// The largest count a log may give (2^53: exact in its JSON numbers).
const MAX_COUNT: u64 = 1 << 53;

/// Benchmarks whose blocks and `epoch_count` count epochs of `train_samples` (those that
/// do not count samples trained, as BERT and GPT-3 do).
const EPOCH_BENCHMARKS: [&str; 9] = [
    "resnet",
    "ssd",
    "retinanet",
    "maskrcnn",
    "unet3d",
    "cosmoflow",
    "deepcam",
    "oc20",
    "rnnt",
];

/// One MLPerf run, as its result log and system description say.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// Always [`RUN_RECORD`]: what the line is.
    pub record: String,
    /// The result log, as given.
    pub file: String,
    /// `submission_benchmark` (`resnet`, `bert`, `cosmoflow`, ...).
    pub benchmark: String,
    /// `submission_org`.
    pub submitter: String,
    /// `submission_division` (`closed`, `open`).
    pub division: String,
    /// `submission_platform` (`1xNVIDIA DGX H100`).
    pub platform: String,
    /// The system description's `system_name`, where one was found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Nodes: the system description's `number_of_nodes`, else the count before the `x` of
    /// `submission_platform`.
    pub nodes: u32,
    /// Accelerators per node (the system description's `accelerators_per_node`), where
    /// known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerators_per_node: Option<u32>,
    /// The accelerator (`accelerator_model_name`), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<String>,
    /// The framework (`framework`), where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
    /// `global_batch_size`.
    pub global_batch: u64,
    /// `train_samples`: the samples of one epoch where the benchmark counts epochs
    /// (ResNet-50), the samples trained in the run where it logs them at the end (BERT,
    /// GPT-3); in sequences where the log counts tokens ([`RunRecord::sequence_length`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_samples: Option<u64>,
    /// `eval_samples`: samples in one evaluation (sequences, as `train_samples`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_samples: Option<u64>,
    /// Tokens a sequence (`max_sequence_length`), where the log counts its samples in tokens
    /// (GPT-3): its counts and throughput are divided by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_length: Option<u64>,
    /// Epochs trained: the `epoch_stop` events.
    pub epochs: u32,
    /// Evaluations: the `eval_stop` events.
    pub evals: u32,
    /// `init_start` to `run_start` (initialisation, not timed by MLPerf), seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_s: Option<f64>,
    /// `staging_start` to `staging_stop` (MLPerf HPC's data staging), seconds, where logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staging_s: Option<f64>,
    /// One epoch's training, seconds: from the blocks where the log has them
    /// ([`RunRecord::method`]), else the median `epoch_start` to `epoch_stop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch_s: Option<f64>,
    /// Every `eval_start` to `eval_stop`, summed, seconds.
    pub eval_s: f64,
    /// Samples a second of training: from the blocks where the log has them (the samples
    /// its blocks trained over their time less the evaluations inside them), else the
    /// median throughput the log reports (`tracked_stats`' `throughput` or `imgs_sec`, or
    /// a `throughput` event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<f64>,
    /// How [`RunRecord::throughput`] and [`RunRecord::epoch_s`] were derived: `blocks`
    /// (`block_start` to `block_stop` less the evaluations inside), or `logged` (the
    /// throughput the log reports, the epochs' own events). Epoch events can run out of step
    /// with the work at scale (25-30 ms "epochs" followed by long gaps), so blocks are
    /// preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The median throughput the log itself reports, samples per second, where it reports
    /// one (beside a block-derived [`RunRecord::throughput`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logged_throughput: Option<f64>,
    /// `run_start`, milliseconds since the Unix epoch.
    pub run_start_ms: u64,
    /// `run_stop`, milliseconds since the Unix epoch.
    pub run_stop_ms: u64,
    /// `run_stop`'s status (`success`, `aborted`).
    pub status: String,
    /// MLPerf's time to train: `run_start` to `run_stop`, seconds.
    pub time_to_train_s: f64,
    /// The last `eval_accuracy`, where logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
}

impl RunRecord {
    /// Whether the record's figures are a run's: times positive (evaluations and staging
    /// at least zero) and finite, counts at least one, the stop after the start. A message
    /// naming the field where not.
    fn check(&self) -> std::result::Result<(), String> {
        let positive = |field: &str, v: Option<f64>| match v {
            Some(v) if !(v.is_finite() && v > 0.0) => Err(format!(
                "field `{field}`: {v} is not a positive time or rate; a measured figure is \
                 greater than zero"
            )),
            _ => Ok(()),
        };
        positive("time_to_train_s", Some(self.time_to_train_s))?;
        positive("epoch_s", self.epoch_s)?;
        positive("throughput", self.throughput)?;
        positive("logged_throughput", self.logged_throughput)?;
        for (field, v) in [
            ("eval_s", Some(self.eval_s)),
            ("init_s", self.init_s),
            ("staging_s", self.staging_s),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err(format!("field `{field}`: {v} is not a time (at least 0)"));
            }
        }
        for (field, v) in [
            ("nodes", Some(u64::from(self.nodes))),
            (
                "accelerators_per_node",
                self.accelerators_per_node.map(u64::from),
            ),
            ("global_batch", Some(self.global_batch)),
            ("train_samples", self.train_samples),
            ("eval_samples", self.eval_samples),
            ("sequence_length", self.sequence_length),
        ] {
            if let Some(v) = v
                && !(1..=MAX_COUNT).contains(&v)
            {
                return Err(format!("field `{field}`: {v} is not a count (1 to 2^53)"));
            }
        }
        if self.run_stop_ms < self.run_start_ms {
            return Err(format!(
                "field `run_stop_ms`: {} is before `run_start_ms` {}",
                self.run_stop_ms, self.run_start_ms
            ));
        }
        Ok(())
    }
}

/// One `:::MLLOG` event.
#[derive(Debug, PartialEq, Deserialize)]
struct Event {
    time_ms: f64,
    key: String,
    #[serde(default)]
    value: Value,
    #[serde(default)]
    metadata: Value,
}

/// What a system description (`systems/<system>.json`) gives a run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SystemDescription {
    /// `system_name`.
    pub name: Option<String>,
    /// `number_of_nodes`.
    pub nodes: Option<u32>,
    /// `accelerators_per_node`.
    pub accelerators_per_node: Option<u32>,
    /// `accelerator_model_name`.
    pub accelerator: Option<String>,
    /// `framework`.
    pub framework: Option<String>,
}

impl SystemDescription {
    /// Reads a submitter's system description (`file` names it in errors). MLPerf writes its
    /// counts as strings (`"8"`); numbers are taken too.
    pub fn parse(text: &str, file: &str) -> Result<SystemDescription> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::Input(format!("{file}: not a JSON system description: {e}")))?;
        let Value::Object(map) = v else {
            return Err(Error::Input(format!(
                "{file}: a system description is a JSON object"
            )));
        };
        let text = |k: &str| {
            map.get(k)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let count = |k: &str| -> Result<Option<u32>> {
            match map.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
                Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| {
                    Error::Input(format!(
                        "{file}: field `{k}`: `{s}` is not a whole number; give the count \
                         (\"8\")"
                    ))
                }),
                Some(Value::Number(n)) => n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .map(Some)
                    .ok_or_else(|| {
                        Error::Input(format!("{file}: field `{k}`: {n} is not a whole number"))
                    }),
                Some(other) => Err(Error::Input(format!(
                    "{file}: field `{k}`: {other} is not a count"
                ))),
            }
        };
        let positive = |k: &str| -> Result<Option<u32>> {
            match count(k)? {
                Some(0) => Err(Error::Input(format!(
                    "{file}: field `{k}`: 0; a run has at least one (give the count, \"8\")"
                ))),
                n => Ok(n),
            }
        };
        let (nodes, per_node) = (
            positive("number_of_nodes")?,
            positive("accelerators_per_node")?,
        );
        Ok(SystemDescription {
            name: text("system_name"),
            nodes,
            accelerators_per_node: per_node,
            accelerator: text("accelerator_model_name"),
            framework: text("framework"),
        })
    }
}

/// Reads the result log `text` (`file` names it in records and errors) with the submitter's
/// system description where there is one.
///
/// A line that starts `:::MLLOG` but whose JSON does not parse is an error naming its line;
/// other lines (the framework's own output) are skipped, as MLPerf's checker skips them. A
/// log without `run_start` and `run_stop` (a run cut short, or a truncated file), without
/// `submission_benchmark` or `global_batch_size`, or whose events go back in time, is
/// refused.
pub fn parse(text: &str, file: &str, system: Option<&SystemDescription>) -> Result<RunRecord> {
    let err = |line: usize, what: String| Error::Input(format!("{file}: line {line}: {what}"));
    let events = events(text, file)?;
    let first = |key: &str| events.iter().find(|(_, e)| e.key == key);
    let last = |key: &str| events.iter().rev().find(|(_, e)| e.key == key);
    let missing = |key: &str, why: &str| {
        Error::Input(format!(
            "{file}: no `{key}` event: {why}; give a complete MLPerf result log"
        ))
    };
    let string = |key: &str| -> Result<String> {
        match first(key) {
            Some((l, e)) => e
                .value
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| err(*l, format!("`{key}` is {}, not text", e.value))),
            None => Err(missing(key, "the log does not say what it ran")),
        }
    };
    let count = |key: &str| -> Result<Option<u64>> {
        match last(key) {
            Some((l, e)) => e
                .value
                .as_u64()
                .or_else(|| {
                    e.value
                        .as_f64()
                        .filter(|v| v.fract() == 0.0 && *v >= 0.0)
                        .map(|v| v as u64)
                })
                .filter(|v| *v > 0 && *v <= MAX_COUNT)
                .map(Some)
                .ok_or_else(|| {
                    err(
                        *l,
                        format!(
                            "`{key}` is {}, not a positive count (at most 2^53)",
                            e.value
                        ),
                    )
                }),
            None => Ok(None),
        }
    };
    let benchmark = string("submission_benchmark")?;
    let platform = string("submission_platform").unwrap_or_default();
    let global_batch = count("global_batch_size")?
        .ok_or_else(|| missing("global_batch_size", "the run's batch is unknown"))?;
    let (start_line, start) = first("run_start")
        .map(|(l, e)| (*l, e.time_ms))
        .ok_or_else(|| missing("run_start", "the run never started"))?;
    let (stop_line, stop) = last("run_stop").map(|(l, e)| (*l, e)).ok_or_else(|| {
        missing(
            "run_stop",
            "the run did not finish or the file is cut short",
        )
    })?;
    if stop.time_ms < start {
        return Err(err(
            stop_line,
            format!(
                "`run_stop` at {} ms is before `run_start` (line {start_line}) at {start} ms",
                stop.time_ms
            ),
        ));
    }
    let status = stop
        .metadata
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let spans = |name: &str| spans(&events, name, file);
    let seconds = |v: &[(f64, f64, &Event)]| -> Vec<f64> {
        v.iter().map(|(a, b, _)| (b - a) / 1e3).collect()
    };
    let epochs = seconds(&spans("epoch")?);
    let eval_spans = spans("eval")?;
    let evals = seconds(&eval_spans);
    let staging = seconds(&spans("staging")?);
    let init_s = init_s(&events, (start_line, start), file)?;
    // Counts in tokens (GPT-3): sequences of `max_sequence_length` tokens.
    let sequence_length = if benchmark == "gpt3" {
        count("max_sequence_length")?
    } else {
        None
    };
    let per_sequence = sequence_length.map_or(1.0, |n| n as f64);
    let sequences = |n: Option<u64>| n.map(|n| ((n as f64 / per_sequence).round() as u64).max(1));
    let train_samples = sequences(count("train_samples")?);
    let eval_samples = sequences(count("eval_samples")?);
    let logged = logged(&events, per_sequence);
    let median = |v: &[f64]| (!v.is_empty()).then(|| crate::stats::median(v));
    let logged_throughput = median(&logged);
    let block_figures = blocks(
        &spans("block")?,
        &eval_spans,
        train_samples,
        epochs.len(),
        EPOCH_BENCHMARKS.contains(&benchmark.as_str()),
    );
    let (throughput, epoch_s, method) = match block_figures {
        Some((t, e)) => (Some(t), e.or(median(&epochs)), "blocks"),
        None => (logged_throughput, median(&epochs), "logged"),
    };
    let accuracy = last("eval_accuracy").and_then(|(_, e)| e.value.as_f64());
    // Nodes from the platform's `NxSYSTEM`, where no description gives them.
    let platform_nodes = platform
        .split_once('x')
        .and_then(|(n, _)| n.trim().parse::<u32>().ok());
    if platform_nodes == Some(0) && system.and_then(|s| s.nodes).is_none() {
        return Err(Error::Input(format!(
            "{file}: `submission_platform` `{platform}` names 0 nodes; give the system \
             description (`systems/<system>.json`) with `number_of_nodes`"
        )));
    }
    let nodes = system.and_then(|s| s.nodes).or(platform_nodes).unwrap_or(1);
    let as_u32 = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    Ok(RunRecord {
        record: RUN_RECORD.to_owned(),
        file: file.to_owned(),
        submitter: string("submission_org").unwrap_or_default(),
        division: string("submission_division").unwrap_or_default(),
        benchmark,
        platform,
        system: system.and_then(|s| s.name.clone()),
        nodes,
        accelerators_per_node: system.and_then(|s| s.accelerators_per_node),
        accelerator: system.and_then(|s| s.accelerator.clone()),
        framework: system.and_then(|s| s.framework.clone()),
        global_batch,
        train_samples,
        eval_samples,
        sequence_length,
        epochs: as_u32(epochs.len()),
        evals: as_u32(evals.len()),
        init_s,
        staging_s: (!staging.is_empty()).then(|| staging.iter().sum()),
        epoch_s,
        // From zero: an empty sum of floats is -0.0.
        eval_s: evals.iter().fold(0.0, |a, b| a + b),
        throughput,
        method: Some(method.to_owned()),
        logged_throughput: logged_throughput.filter(|_| method == "blocks"),
        run_start_ms: start as u64,
        run_stop_ms: stop.time_ms as u64,
        status,
        time_to_train_s: (stop.time_ms - start) / 1e3,
        accuracy,
    })
}

/// The MLLOG events of a log's lines, each with its line number, each once however many
/// ranks logged it; an error names the line of an event that does not read or whose time
/// is off, and a log with none.
fn events(text: &str, file: &str) -> Result<Vec<(usize, Event)>> {
    let err = |line: usize, what: String| Error::Input(format!("{file}: line {line}: {what}"));
    let mut events: Vec<(usize, Event)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // A launcher may put a rank before the event (`0: :::MLLOG`, `srun --label`).
        let Some(rest) = line.find(PREFIX).map(|at| &line[at + PREFIX.len()..]) else {
            continue;
        };
        let e: Event = serde_json::from_str(rest.trim()).map_err(|e| {
            err(
                i + 1,
                format!(
                    "a {PREFIX} line whose JSON does not parse ({e}); the file is damaged or \
                     cut short"
                ),
            )
        })?;
        if !(e.time_ms.is_finite() && (EARLIEST_MS..=LATEST_MS).contains(&e.time_ms)) {
            return Err(err(
                i + 1,
                format!(
                    "`time_ms` {} is not a time: MLPerf logs milliseconds since 1970, from \
                     {EARLIEST_MS} (2000) to {LATEST_MS} (2100)",
                    e.time_ms
                ),
            ));
        }
        events.push((i + 1, e));
    }
    // Ranks that log the same event: once.
    let mut kept: Vec<(usize, Event)> = Vec::with_capacity(events.len());
    for (l, e) in events {
        if !kept.iter().rev().take(64).any(|(_, k)| *k == e) {
            kept.push((l, e));
        }
    }
    if kept.is_empty() {
        return Err(Error::Input(format!(
            "{file}: no {PREFIX} lines; an MLPerf result log is the `result_N.txt` of a \
             submission's results folder"
        )));
    }
    Ok(kept)
}

/// The intervals of `name` among `events`: each `<name>_start` paired with the next
/// `<name>_stop`, as (start, stop, the start's event), milliseconds; a stop without a start
/// before it, or earlier than its start, is an error naming its line of `file`.
fn spans<'e>(
    events: &'e [(usize, Event)],
    name: &str,
    file: &str,
) -> Result<Vec<(f64, f64, &'e Event)>> {
    let err = |line: usize, what: String| Error::Input(format!("{file}: line {line}: {what}"));
    let (open, close) = (format!("{name}_start"), format!("{name}_stop"));
    let mut out = Vec::new();
    let mut at: Option<(usize, &Event)> = None;
    for (l, e) in events {
        if e.key == open {
            at = Some((*l, e));
        } else if e.key == close {
            let Some((from, s)) = at.take() else {
                return Err(err(*l, format!("`{close}` without a `{open}` before it")));
            };
            if e.time_ms < s.time_ms {
                return Err(err(
                    *l,
                    format!("`{close}` is earlier than its `{open}` (line {from})"),
                ));
            }
            out.push((s.time_ms, e.time_ms, s));
        }
    }
    Ok(out)
}

/// The training throughput of a run's blocks (`block_start` to `block_stop`, less the
/// evaluations `evals` inside them) and its time per epoch where the blocks say it: by the
/// epochs each block trained (`epoch_count` epochs of `train_samples`) where the benchmark
/// counts `by_epochs`, else the run's samples over its blocks (one epoch's training where
/// the run logged one, of `epochs`); `None` where the blocks cannot say.
fn blocks(
    blocks: &[(f64, f64, &Event)],
    evals: &[(f64, f64, &Event)],
    train_samples: Option<u64>,
    epochs: usize,
    by_epochs: bool,
) -> Option<(f64, Option<f64>)> {
    let training_ms: f64 = blocks
        .iter()
        .map(|(a, b, _)| {
            let inside: f64 = evals
                .iter()
                .filter(|(s, t, _)| s >= a && t <= b)
                .map(|(s, t, _)| t - s)
                .sum();
            (b - a - inside).max(0.0)
        })
        .sum();
    let counts: Vec<f64> = blocks
        .iter()
        .filter_map(|(_, _, e)| e.metadata.get("epoch_count").and_then(Value::as_f64))
        .filter(|c| c.is_finite() && *c > 0.0)
        .collect();
    match (train_samples, blocks.is_empty() || training_ms <= 0.0) {
        (Some(n), false) if by_epochs && counts.len() == blocks.len() => {
            let block_epochs: f64 = counts.iter().sum();
            let samples = block_epochs * n as f64;
            Some((
                samples / (training_ms / 1e3),
                Some(training_ms / 1e3 / block_epochs),
            ))
        }
        // The run's samples over its blocks: one epoch's training where it logged one.
        (Some(n), false) if !by_epochs => Some((
            n as f64 / (training_ms / 1e3),
            (epochs == 1).then_some(training_ms / 1e3),
        )),
        _ => None,
    }
}

/// The seconds from the first `init_start` (every rank may write one) to `run_start` (its
/// line and time, ms); `None` without one; an error where it comes after the run's start.
fn init_s(
    events: &[(usize, Event)],
    (start_line, start): (usize, f64),
    file: &str,
) -> Result<Option<f64>> {
    let err = |line: usize, what: String| Error::Input(format!("{file}: line {line}: {what}"));
    let init = events
        .iter()
        .filter(|(_, e)| e.key == "init_start")
        .map(|(l, e)| (*l, e.time_ms))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((l, t)) = init
        && t > start
    {
        return Err(err(
            l,
            format!(
                "`init_start` at {t} ms is after `run_start` (line {start_line}) at {start} ms"
            ),
        ));
    }
    Ok(init.map(|(_, t)| (start - t) / 1e3))
}

/// The throughputs a log reports, in sequences a second (`per_sequence` tokens each):
/// `tracked_stats`' `throughput` (v1.0 on) or `imgs_sec` (v2.0's MXNet ResNet-50), or a
/// `throughput` event of its own.
fn logged(events: &[(usize, Event)], per_sequence: f64) -> Vec<f64> {
    events
        .iter()
        .filter_map(|(_, e)| match e.key.as_str() {
            "tracked_stats" => e
                .value
                .get("throughput")
                .or_else(|| e.value.get("imgs_sec"))
                .and_then(Value::as_f64),
            "throughput" => e.value.as_f64(),
            _ => None,
        })
        .filter(|t| t.is_finite() && *t > 0.0)
        .map(|t| t / per_sequence)
        .collect()
}

/// Whether `text` (a records file) holds run records: its first line that is not blank
/// names [`RUN_RECORD`].
pub fn holds_runs(text: &str) -> bool {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<BTreeMap<String, Value>>(l).ok())
        .is_some_and(|m| m.get("record").and_then(Value::as_str) == Some(RUN_RECORD))
}

/// Reads run records, one JSON object a line (`file` names it in errors).
pub fn read_runs(text: &str, file: &str) -> Result<Vec<RunRecord>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let r: RunRecord = serde_json::from_str(line).map_err(|e| {
            Error::Input(format!(
                "{file}: line {}: not a run record ({e}); write run records with `ridgeline \
                 import mlperf --out`",
                i + 1
            ))
        })?;
        if r.record != RUN_RECORD {
            return Err(Error::Input(format!(
                "{file}: line {}: field `record` is `{}`, not `{RUN_RECORD}`",
                i + 1,
                r.record
            )));
        }
        r.check().map_err(|m| {
            Error::Input(format!(
                "{file}: line {}: {m}; import the log again (`ridgeline import mlperf --out`)",
                i + 1
            ))
        })?;
        out.push(r);
    }
    if out.is_empty() {
        return Err(Error::Input(format!("{file}: no run records")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event `t` ms after 2023-11-14 (MLPerf logs Unix milliseconds).
    fn line(t: u64, key: &str, value: &str, meta: &str) -> String {
        let t = T0 + t;
        format!(
            ":::MLLOG {{\"namespace\": \"\", \"time_ms\": {t}, \"event_type\": \"POINT_IN_TIME\", \
             \"key\": \"{key}\", \"value\": {value}, \"metadata\": {{{meta}}}}}"
        )
    }

    const T0: u64 = 1_700_000_000_000;

    /// A short log in the format MLPerf writes: two epochs, one evaluation.
    fn log() -> String {
        [
            line(1000, "submission_benchmark", "\"resnet\"", ""),
            line(1000, "submission_org", "\"Org\"", ""),
            line(1000, "submission_division", "\"closed\"", ""),
            line(1000, "submission_platform", "\"2xBox\"", ""),
            "framework noise that is not an event".into(),
            line(2000, "init_start", "null", ""),
            line(3000, "global_batch_size", "256", ""),
            line(5000, "init_stop", "null", ""),
            line(5000, "run_start", "null", ""),
            line(5000, "train_samples", "1000", ""),
            line(5000, "eval_samples", "100", ""),
            line(5000, "epoch_start", "null", ""),
            line(15000, "epoch_stop", "null", ""),
            line(15000, "tracked_stats", "{\"throughput\": 100.0}", ""),
            line(15000, "epoch_start", "null", ""),
            line(23000, "epoch_stop", "null", ""),
            line(23000, "tracked_stats", "{\"throughput\": 125.0}", ""),
            line(23000, "eval_start", "null", ""),
            line(24000, "eval_stop", "null", ""),
            line(24000, "eval_accuracy", "0.76", ""),
            line(24500, "run_stop", "null", "\"status\": \"success\""),
        ]
        .join("\n")
    }

    #[test]
    fn a_log_gives_its_run() {
        let r = parse(&log(), "result_0.txt", None).unwrap();
        assert_eq!(r.benchmark, "resnet");
        assert_eq!(r.nodes, 2);
        assert_eq!(r.global_batch, 256);
        assert_eq!((r.epochs, r.evals), (2, 1));
        assert_eq!(r.init_s, Some(3.0));
        assert_eq!(r.epoch_s, Some(9.0));
        assert_eq!(r.eval_s, 1.0);
        assert_eq!(r.throughput, Some(112.5));
        assert_eq!(r.time_to_train_s, 19.5);
        assert_eq!(r.status, "success");
        assert_eq!(r.accuracy, Some(0.76));
        assert_eq!((r.train_samples, r.eval_samples), (Some(1000), Some(100)));
    }

    #[test]
    fn a_system_description_gives_nodes_and_accelerators() {
        let d = SystemDescription::parse(
            r#"{"system_name": "Box", "number_of_nodes": "4", "accelerators_per_node": "8",
                "accelerator_model_name": "NVIDIA H100-SXM5-80GB", "framework": ""}"#,
            "box.json",
        )
        .unwrap();
        let r = parse(&log(), "result_0.txt", Some(&d)).unwrap();
        assert_eq!(r.nodes, 4);
        assert_eq!(r.accelerators_per_node, Some(8));
        assert_eq!(r.accelerator.as_deref(), Some("NVIDIA H100-SXM5-80GB"));
        assert_eq!(r.framework, None);
        let e = SystemDescription::parse(r#"{"number_of_nodes": "four"}"#, "box.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("box.json") && e.contains("number_of_nodes"),
            "{e}"
        );
    }

    #[test]
    fn records_round_trip_and_are_recognised() {
        let r = parse(&log(), "result_0.txt", None).unwrap();
        let text = format!("{}\n", serde_json::to_string(&r).unwrap());
        assert!(holds_runs(&text));
        assert!(!holds_runs("{\"id\": \"gemm\"}\n"));
        assert_eq!(read_runs(&text, "runs.jsonl").unwrap(), vec![r]);
        let e = read_runs("{\"record\": 3}\n", "runs.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("runs.jsonl: line 1"), "{e}");
    }

    #[test]
    fn damaged_logs_are_refused_with_their_line() {
        let cases: Vec<(String, &str)> = vec![
            // A line cut in the middle of its JSON.
            (
                log().replace(
                    "\"key\": \"epoch_stop\", \"value\": null, \"metadata\": {}}",
                    "\"ke",
                ),
                "line 13",
            ),
            // Truncated before the run stopped.
            (
                log().lines().take(15).collect::<Vec<_>>().join("\n"),
                "run_stop",
            ),
            (
                log().replace("submission_benchmark", "other"),
                "submission_benchmark",
            ),
            (
                log().replace(
                    "global_batch_size\", \"value\": 256",
                    "global_batch_size\", \"value\": -1",
                ),
                "line 7",
            ),
            (
                log().replace("global_batch_size", "batch"),
                "global_batch_size",
            ),
            (
                log().replace("\"time_ms\": 1700000024500", "\"time_ms\": 1700000000010"),
                "before `run_start`",
            ),
            (
                log().replace("\"key\": \"eval_start\"", "\"key\": \"x\""),
                "`eval_stop` without",
            ),
            (String::from("plain text\n"), "no :::MLLOG lines"),
            (String::new(), "no :::MLLOG lines"),
        ];
        for (text, want) in cases {
            let e = parse(&text, "result_0.txt", None).unwrap_err().to_string();
            assert!(e.starts_with("result_0.txt"), "{e}");
            assert!(e.contains(want), "want `{want}` in: {e}");
        }
    }
}
