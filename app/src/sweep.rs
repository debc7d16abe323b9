//! A sweep's results as written and printed: the best configurations' rows and columns,
//! and every feasible configuration written to a CSV or JSON file.

use std::path::Path;

use anyhow::Result;
use ridgeline_model::predict::Outcome;
use ridgeline_model::sweep::{Candidate, SweepResult};
use ridgeline_model::units::Joules;
use serde::Serialize;

use crate::atomic;
use crate::columns::{Col, num, text};

/// A configuration as printed: the system by name, then the `predict` fields.
#[derive(Debug, Serialize)]
pub struct SweepRow<'a> {
    /// The system.
    pub system: &'a str,
    /// The software stack.
    pub stack: &'a str,
    #[serde(flatten)]
    /// The configuration and its outcome.
    pub candidate: &'a Candidate,
}

/// The sweep's rows: a configuration per candidate, its system named.
pub fn rows<'a>(result: &'a SweepResult, candidates: &'a [Candidate]) -> Vec<SweepRow<'a>> {
    candidates
        .iter()
        .map(|c| SweepRow {
            system: &result.systems[c.system_index],
            stack: &result.stacks[c.model_index],
            candidate: c,
        })
        .collect()
}

/// The columns of the best configurations.
pub fn cols<'a>() -> [Col<SweepRow<'a>>; 12] {
    [
        text("system", "system", |r, _| r.system.to_owned()),
        text("stack", "stack", |r, _| r.stack.to_owned()),
        text("precision", "precision", |r, _| {
            r.candidate.precision.to_string()
        }),
        num("nodes", "nodes", |r, s| {
            s.count(u64::from(r.candidate.outcome.nodes))
        }),
        num("batch", "local_batch", |r, s| {
            s.count(r.candidate.outcome.local_batch)
        }),
        num("global", "global_batch", |r, s| {
            s.count(r.candidate.outcome.global_batch)
        }),
        num("step", "step_time_s", |r, s| {
            s.seconds(r.candidate.outcome.step_time_s)
        }),
        text("bound", "bound", |r, _| {
            r.candidate.outcome.bound.name().to_owned()
        }),
        text("timed by", "compute_timed_by", |r, _| {
            r.candidate.outcome.compute_timed_by.short()
        }),
        num("time to solution", "time_to_solution_s", |r, s| {
            s.seconds(r.candidate.outcome.time_to_solution_s)
        }),
        num("energy kWh", "energy_j", |r, s| {
            s.number(r.candidate.outcome.energy_j.map(Joules::as_kwh), 1)
        }),
        num("cost", "cost", |r, s| s.number(r.candidate.outcome.cost, 2)),
    ]
}

/// The fields of every written row, in order.
const FIELDS: [&str; 24] = [
    "system",
    "stack",
    "precision",
    "nodes",
    "devices",
    "local_batch",
    "global_batch",
    "data_location",
    "compute_s",
    "compute_timed_by",
    "input_s",
    "allreduce_s",
    "collective",
    "step_time_s",
    "bound",
    "samples_per_s",
    "epochs",
    "epoch_time_s",
    "staging_s",
    "time_to_solution_s",
    "achieved_flops",
    "memory_per_device_bytes",
    "energy_j",
    "cost",
];

fn fields(system: &str, stack: &str, c: &Candidate) -> [String; 24] {
    let o: &Outcome = &c.outcome;
    let opt = |v: Option<f64>| v.map_or_else(String::new, |x| x.to_string());
    [
        system.to_owned(),
        stack.to_owned(),
        c.precision.to_string(),
        o.nodes.to_string(),
        o.devices.to_string(),
        o.local_batch.to_string(),
        o.global_batch.to_string(),
        o.data_location.to_string(),
        o.compute_s.to_string(),
        o.compute_timed_by.short(),
        o.input_s.to_string(),
        o.allreduce_s.to_string(),
        o.collective.to_string(),
        o.step_time_s.to_string(),
        o.bound.name().to_owned(),
        o.samples_per_s.value().to_string(),
        o.epochs.to_string(),
        o.epoch_time_s.to_string(),
        o.staging_s.to_string(),
        o.time_to_solution_s.to_string(),
        o.achieved_flops.to_string(),
        o.memory_per_device_bytes.to_string(),
        opt(o.energy_j.map(Joules::value)),
        opt(o.cost),
    ]
}

/// Whether `--out` names a JSON file (else CSV); another extension is an error, found
/// before the sweep runs.
pub fn out_is_json(path: &Path) -> Result<bool> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("json") => Ok(true),
        Some("csv") => Ok(false),
        _ => anyhow::bail!(
            "--out {}: the format follows the extension; name a .csv or a .json file",
            path.display()
        ),
    }
}

/// Writes every feasible configuration of `result` to `path`, whole or not at all: JSON if
/// it ends in `.json`, CSV if in `.csv`.
pub fn write_all(path: &Path, result: &SweepResult) -> Result<()> {
    let json = out_is_json(path)?;
    atomic::write_with(path, |out| {
        if json {
            serde_json::to_writer(&mut *out, &rows(result, &result.all))?;
        } else {
            let mut w = csv::Writer::from_writer(&mut *out);
            w.write_record(FIELDS)?;
            for c in &result.all {
                w.write_record(fields(
                    &result.systems[c.system_index],
                    &result.stacks[c.model_index],
                    c,
                ))?;
            }
            w.flush()?;
        }
        Ok(())
    })
}

/// A split of a transformer over devices, evaluated ([`splits`]).
#[derive(Debug, Clone, Serialize)]
pub struct SplitRow {
    /// The system.
    pub system: String,
    /// Nodes.
    pub nodes: u32,
    /// The precision.
    pub precision: ridgeline_model::precision::Precision,
    /// Sequences a step.
    pub global_batch: u64,
    /// Sequences per second.
    pub sequences_per_s: f64,
    /// The step, split.
    #[serde(flatten)]
    pub step: ridgeline_model::parallel::SplitStep,
}

/// What a split search covers: every combination of these is tried.
#[derive(Debug, Clone)]
pub struct SplitSearch<'a> {
    /// The model's name, configuration and sequence length.
    pub model: (
        &'a str,
        &'a ridgeline_model::workloads::transformer::Config,
        usize,
    ),
    /// Systems.
    pub systems: &'a [ridgeline_model::system::System],
    /// Node counts.
    pub nodes: &'a [u32],
    /// Sequences per data-parallel replica.
    pub batches: &'a [u64],
    /// Tensor-parallel degrees.
    pub tensor: &'a [u32],
    /// Pipeline depths.
    pub pipeline: &'a [u32],
    /// Micro-batch counts; empty: the pipeline depth, twice and four times it.
    pub micro_batches: &'a [u32],
    /// Virtual stages per pipeline rank (interleaved 1F1B; 1: none).
    pub virtual_stages: &'a [u32],
    /// Expert-parallel degrees (1: none).
    pub expert: &'a [u32],
    /// Precisions.
    pub precisions: &'a [ridgeline_model::precision::Precision],
    /// The optimizer.
    pub optimizer: ridgeline_model::memory::Optimizer,
    /// What times a GPU's layers without a calibrated profile.
    pub kernel_model: ridgeline_model::predict::KernelModel,
    /// The software stack.
    pub stack: &'a ridgeline_model::stack::Stack,
}

/// The most splits one search tries (`sweep --tensor-parallel/--pipeline-parallel`): at
/// the ~2 million a second a search over node counts runs on 2 cores, under a minute.
pub const MAX_SPLITS: u64 = 100_000_000;

/// Why a split was left out, as the search counts it: the argument it was invalid in.
fn left_out(e: &ridgeline_model::error::Error) -> String {
    match e {
        ridgeline_model::error::Error::Argument { name, .. } => format!("invalid {name}"),
        _ => "invalid".to_owned(),
    }
}

/// How many splits `search` would try: every combination of its lists (micro-batch counts
/// three a pipeline depth where none are given).
pub fn split_count(search: &SplitSearch<'_>) -> u64 {
    let n = |v: usize| v as u64;
    let micros = if search.micro_batches.is_empty() {
        3
    } else {
        n(search.micro_batches.len())
    };
    [
        n(search.systems.len()),
        n(search.precisions.len()),
        n(search.nodes.len()),
        n(search.tensor.len()),
        n(search.pipeline.len()),
        micros,
        n(search.virtual_stages.len()),
        n(search.expert.len()),
        n(search.batches.len()),
    ]
    .iter()
    .fold(1u64, |a, &b| a.saturating_mul(b))
}

/// What a split search found: the `keep` fastest splits that fit (fastest per sequence
/// first), how many fit, and how many were left out, by reason.
#[derive(Debug, Clone)]
pub struct SplitsFound {
    /// The fastest splits that fit.
    pub top: Vec<SplitRow>,
    /// Splits that fit.
    pub feasible: u64,
    /// Splits left out, by reason.
    pub rejected: std::collections::BTreeMap<String, u64>,
}

/// Every split of `search`, the `keep` fastest of those that fit its devices' memory kept.
/// Each tensor-parallel degree of each system and precision is prepared once
/// ([`ridgeline_model::parallel::prepare`], which also times each pipeline depth and
/// micro-batch size once for every node count); the combinations run on every core as they
/// are generated; `progress` is told of each batch of splits tried. More than
/// [`MAX_SPLITS`] is an error.
pub fn splits(
    search: &SplitSearch<'_>,
    keep: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> anyhow::Result<SplitsFound> {
    use rayon::prelude::*;
    use ridgeline_model::parallel::Split;
    use ridgeline_model::predict::Timing;
    use std::collections::BTreeMap;
    let total = split_count(search);
    if total > MAX_SPLITS {
        anyhow::bail!(
            "sweep: {total} splits to try (systems x precisions x nodes x tensor x pipeline x \
             micro-batches x virtual stages x expert x batches), more than {MAX_SPLITS}; narrow the \
             lists (a stride: --nodes 1..1536:64, --batch 1,2,4,8)"
        );
    }
    let timings: Vec<(usize, ridgeline_model::precision::Precision, Timing<'_>)> = search
        .systems
        .iter()
        .enumerate()
        .flat_map(|(i, system)| {
            search
                .precisions
                .iter()
                .map(move |&p| (i, p, Timing::of(system, p, search.kernel_model)))
        })
        .collect();
    // One preparation a system, precision, tensor- and expert-parallel degree.
    let keys: Vec<(usize, u32, u32)> = (0..timings.len())
        .flat_map(|t| {
            search
                .tensor
                .iter()
                .flat_map(move |&k| search.expert.iter().map(move |&e| (t, k, e)))
        })
        .collect();
    let prepared = prepare_all(search, &timings, &keys);
    // The outer combinations (system and precision, tensor degree, node count), each a task
    // that tries every pipeline depth, layout and batch.
    let outer: Vec<(usize, u32, u32, u32)> = keys
        .iter()
        .flat_map(|&(t, k, e)| search.nodes.iter().map(move |&n| (t, k, e, n)))
        .collect();
    let fastest = |a: &SplitRow, b: &SplitRow| b.sequences_per_s.total_cmp(&a.sequences_per_s);
    let merge = |(mut a, fa, mut ra): (Vec<SplitRow>, u64, BTreeMap<String, u64>),
                 (b, fb, rb): (Vec<SplitRow>, u64, BTreeMap<String, u64>)| {
        a.extend(b);
        a.sort_by(fastest);
        a.truncate(keep);
        for (k, v) in rb {
            *ra.entry(k).or_default() += v;
        }
        (a, fa + fb, ra)
    };
    let (top, feasible, rejected) = outer
        .par_iter()
        .map(|&(t, tensor, expert, nodes)| {
            let mut rows: Vec<SplitRow> = Vec::new();
            let mut feasible = 0u64;
            let mut rejected: BTreeMap<String, u64> = BTreeMap::new();
            let mut tried = 0u64;
            let mut reject = |why: &str, n: u64| *rejected.entry(why.to_owned()).or_default() += n;
            let system = &search.systems[timings[t].0];
            let precision = timings[t].1;
            let capacity = system
                .device
                .memory_capacity
                .as_ref()
                .map_or(f64::INFINITY, |m| m.value.value());
            let devices = u64::from(system.node.devices.value) * u64::from(nodes);
            for &pipeline in search.pipeline {
                let layouts = layouts(search, pipeline);
                let here = (layouts.len() * search.batches.len()) as u64;
                tried += here;
                let replica = u64::from(tensor) * u64::from(pipeline);
                let data = (replica > 0 && devices % replica == 0)
                    .then(|| u32::try_from(devices / replica).ok())
                    .flatten();
                let Some(data) = data else {
                    reject("devices do not split into replicas", here);
                    continue;
                };
                let prep = match &prepared[&(t, tensor, expert)] {
                    Ok(p) => p,
                    Err(why) => {
                        reject(why, here);
                        continue;
                    }
                };
                for (micro_batches, virtual_stages) in layouts {
                    for &batch in search.batches {
                        let split = Split {
                            tensor,
                            pipeline,
                            data,
                            micro_batches,
                            virtual_stages,
                            expert,
                        };
                        let global = batch * u64::from(data);
                        match prep.step(global, split) {
                            Ok(step) if step.memory_per_device_bytes > capacity => {
                                reject("does not fit a device's memory", 1);
                            }
                            Ok(step) => {
                                feasible += 1;
                                rows.push(SplitRow {
                                    system: system.name.clone(),
                                    nodes,
                                    precision,
                                    global_batch: global,
                                    sequences_per_s: global as f64 / step.step_s,
                                    step,
                                });
                                if rows.len() > 4 * keep.max(1) {
                                    rows.sort_by(fastest);
                                    rows.truncate(keep);
                                }
                            }
                            Err(e) => reject(&left_out(&e), 1),
                        }
                    }
                }
            }
            progress(tried);
            rows.sort_by(fastest);
            rows.truncate(keep);
            (rows, feasible, rejected)
        })
        .reduce(|| (Vec::new(), 0, BTreeMap::new()), merge);
    Ok(SplitsFound {
        top,
        feasible,
        rejected,
    })
}

/// One preparation a system and precision (`timings`), tensor- and expert-parallel degree
/// (`keys`), on every core; why it failed where it did.
#[allow(clippy::type_complexity)]
fn prepare_all<'s>(
    search: &'s SplitSearch<'_>,
    timings: &'s [(
        usize,
        ridgeline_model::precision::Precision,
        ridgeline_model::predict::Timing<'s>,
    )],
    keys: &[(usize, u32, u32)],
) -> std::collections::BTreeMap<
    (usize, u32, u32),
    Result<ridgeline_model::parallel::Prepared<'s>, String>,
> {
    use rayon::prelude::*;
    use ridgeline_model::parallel;
    let (name, config, seq) = search.model;
    keys.par_iter()
        .map(|&(t, tensor, expert)| {
            let (i, precision, timing) = &timings[t];
            let p = parallel::prepare(
                name,
                config,
                seq,
                parallel::Degrees { tensor, expert },
                &search.systems[*i],
                *precision,
                search.optimizer,
                search.stack,
                timing,
            )
            .map_err(|e| left_out(&e));
            ((t, tensor, expert), p)
        })
        .collect()
}

/// The pipeline layouts a depth of `pipeline` tries: each micro-batch count (the search's,
/// else 1, 2 and 4 a stage) with each number of virtual stages.
fn layouts(search: &SplitSearch<'_>, pipeline: u32) -> Vec<(u32, u32)> {
    let defaults = [pipeline, 2 * pipeline, 4 * pipeline];
    let micros = if search.micro_batches.is_empty() {
        &defaults[..]
    } else {
        search.micro_batches
    };
    micros
        .iter()
        .flat_map(|&m| search.virtual_stages.iter().map(move |&v| (m, v)))
        .collect()
}

/// The columns of the best splits.
pub fn split_cols() -> [Col<SplitRow>; 12] {
    [
        text("system", "system", |r, _| r.system.clone()),
        text("precision", "precision", |r, _| r.precision.to_string()),
        num("nodes", "nodes", |r, s| s.count(u64::from(r.nodes))),
        num("tensor", "tensor", |r, s| {
            s.count(u64::from(r.step.split.tensor))
        }),
        num("pipeline", "pipeline", |r, s| {
            s.count(u64::from(r.step.split.pipeline))
        }),
        num("data", "data", |r, s| s.count(u64::from(r.step.split.data))),
        num("expert", "expert", |r, s| {
            s.count(u64::from(r.step.split.expert))
        }),
        num("micro-batches", "micro_batches", |r, s| {
            s.count(u64::from(r.step.split.micro_batches))
        }),
        num("global", "global_batch", |r, s| s.count(r.global_batch)),
        num("step", "step_s", |r, s| {
            s.seconds(ridgeline_model::units::Seconds::new(r.step.step_s))
        }),
        num("sequences/s", "sequences_per_s", |r, s| {
            s.number(Some(r.sequences_per_s), 1)
        }),
        num("memory/device", "memory_per_device_bytes", |r, s| {
            s.bytes(ridgeline_model::units::Bytes::new(
                r.step.memory_per_device_bytes,
            ))
        }),
    ]
}

/// What `sweep` is asked: a data-parallel sweep, or a split search where `split` is given.
#[derive(Debug, Clone)]
pub struct SweepRequest {
    /// The workload.
    pub workload: crate::inputs::WorkloadSpec,
    /// The scenario; its `stack` may name several stacks (`A,B`) for a data-parallel sweep.
    pub scenario: crate::inputs::ScenarioSpec,
    /// Precisions.
    pub precisions: Vec<ridgeline_model::precision::Precision>,
    /// Systems (names, devices, `local` or files).
    pub systems: Vec<String>,
    /// Node counts.
    pub nodes: Vec<u32>,
    /// Batches (per device; per replica in a split search).
    pub batches: Vec<u64>,
    /// How many of the best to keep.
    pub top: usize,
    /// What "best" is.
    pub objective: ridgeline_model::sweep::Objective,
    /// Where to write every feasible configuration (JSON or CSV).
    pub out: Option<std::path::PathBuf>,
    /// The split search's lists, where any is given.
    pub split: Option<SplitLists>,
}

/// The lists of a split search the flags give (`None`: not given).
#[derive(Debug, Clone, Default)]
pub struct SplitLists {
    /// Tensor-parallel degrees.
    pub tensor: Option<Vec<u32>>,
    /// Pipeline depths.
    pub pipeline: Option<Vec<u32>>,
    /// Micro-batch counts.
    pub micro_batches: Option<Vec<u32>>,
    /// Virtual stages per pipeline rank.
    pub virtual_stages: Option<Vec<u32>>,
    /// Expert-parallel degrees.
    pub expert: Option<Vec<u32>>,
}

/// A sweep with its inputs resolved: how many configurations it tries ([`SweepPlan::total`])
/// is known before it runs ([`SweepPlan::run`]).
pub enum SweepPlan {
    /// Data-parallel configurations.
    Data(Box<DataPlan>),
    /// Splits of a transformer.
    Split(Box<SplitPlan>),
}

/// A data-parallel sweep, resolved.
pub struct DataPlan {
    request: SweepRequest,
    job: crate::inputs::Job,
    systems: Vec<ridgeline_model::system::System>,
    models: Vec<ridgeline_model::predict::StepModel>,
}

/// A split search, resolved.
pub struct SplitPlan {
    request: SweepRequest,
    name: String,
    config: ridgeline_model::workloads::transformer::Config,
    seq: usize,
    systems: Vec<ridgeline_model::system::System>,
    lists: [Vec<u32>; 5],
    stack: ridgeline_model::stack::Stack,
}

impl SweepPlan {
    /// Resolves `request`'s workload, systems, stacks and step models.
    pub fn new(request: &SweepRequest) -> Result<SweepPlan> {
        use crate::inputs;
        let systems = || {
            request
                .systems
                .iter()
                .map(|s| inputs::system(s))
                .collect::<Result<Vec<_>>>()
        };
        if let Some(lists) = &request.split {
            if request.out.is_some() {
                anyhow::bail!("--out is not written for a split search; use --format json");
            }
            let (name, config, seq) = inputs::transformer(&request.workload)?;
            let systems = systems()?;
            let list = |n: &Option<Vec<u32>>| n.clone().unwrap_or_else(|| vec![1]);
            let scenario = &request.scenario;
            if scenario.stack.as_deref().is_some_and(|s| s.contains(',')) {
                anyhow::bail!(
                    "--stack: a split search runs under one stack; give one (several are swept \
                     for data-parallel sweeps only)"
                );
            }
            let stack = inputs::stack(scenario.stack.as_deref())?;
            return Ok(SweepPlan::Split(Box::new(SplitPlan {
                request: request.clone(),
                name,
                config,
                seq,
                systems,
                lists: [
                    list(&lists.tensor),
                    list(&lists.pipeline),
                    lists.micro_batches.clone().unwrap_or_default(),
                    list(&lists.virtual_stages),
                    list(&lists.expert),
                ],
                stack,
            })));
        }
        if let Some(path) = &request.out {
            out_is_json(path)?;
        }
        // `--stack A,B`: every stack beside every precision.
        let mut scenario = request.scenario.clone();
        let names: Vec<String> = scenario
            .stack
            .as_deref()
            .map(|s| s.split(',').map(|n| n.trim().to_owned()).collect())
            .unwrap_or_default();
        scenario.stack = names.first().cloned();
        let first = *request
            .precisions
            .first()
            .ok_or_else(|| anyhow::anyhow!("--precisions: give at least one precision"))?;
        let job = inputs::Job::from_flags(&request.workload, &scenario, first, 1)?;
        let stacks = if names.len() > 1 {
            names
                .iter()
                .map(|n| inputs::stack(Some(n)))
                .collect::<Result<Vec<_>>>()?
        } else {
            vec![job.stack.clone()]
        };
        let systems = systems()?;
        let mut models = Vec::new();
        for stack in &stacks {
            for &p in &request.precisions {
                stack.check_precision(p)?;
                models.push(ridgeline_model::predict::StepModel::with_stack(
                    &job.graph,
                    p,
                    request.scenario.optimizer,
                    stack,
                ));
            }
        }
        Ok(SweepPlan::Data(Box::new(DataPlan {
            request: request.clone(),
            job,
            systems,
            models,
        })))
    }

    /// How many configurations (or splits) it tries.
    pub fn total(&self) -> u64 {
        match self {
            SweepPlan::Data(d) => {
                (d.systems.len() * d.models.len() * d.request.nodes.len() * d.request.batches.len())
                    as u64
            }
            SweepPlan::Split(s) => split_count(&s.search()),
        }
    }

    /// What it tries: `configurations` or `splits`.
    pub fn unit(&self) -> &'static str {
        match self {
            SweepPlan::Data(_) => "configurations",
            SweepPlan::Split(_) => "splits",
        }
    }

    /// Runs it, telling `progress` of each batch tried, and writes `--out`.
    pub fn run(&self, progress: &(dyn Fn(u64) + Sync)) -> Result<SweepView<'_>> {
        match self {
            SweepPlan::Data(d) => {
                let r = &d.request;
                let spec = ridgeline_model::sweep::SweepSpec {
                    systems: &d.systems,
                    models: &d.models,
                    dataset: &d.job.dataset,
                    reference_input_elements: d.job.reference_input_elements,
                    scenario: &d.job.scenario,
                    nodes: &r.nodes,
                    batches: &r.batches,
                    objective: r.objective,
                    top: r.top,
                    keep_all: r.out.is_some(),
                };
                let result = ridgeline_model::sweep::sweep(spec, progress)?;
                if let Some(path) = &r.out {
                    write_all(path, &result)?;
                }
                Ok(SweepView::Data {
                    workload: d.job.graph.name(),
                    top: r.top,
                    result,
                })
            }
            SweepPlan::Split(s) => {
                let start = std::time::Instant::now();
                let found = splits(&s.search(), s.request.top, progress)?;
                Ok(SweepView::Split {
                    workload: &s.name,
                    seq: s.seq,
                    found,
                    elapsed_s: start.elapsed().as_secs_f64(),
                })
            }
        }
    }
}

impl SplitPlan {
    fn search(&self) -> SplitSearch<'_> {
        let [tensor, pipeline, micro_batches, virtual_stages, expert] = &self.lists;
        SplitSearch {
            model: (&self.name, &self.config, self.seq),
            systems: &self.systems,
            nodes: &self.request.nodes,
            batches: &self.request.batches,
            tensor,
            pipeline,
            micro_batches,
            virtual_stages,
            expert,
            precisions: &self.request.precisions,
            optimizer: self.request.scenario.optimizer,
            kernel_model: self.request.scenario.kernel_model,
            stack: &self.stack,
        }
    }
}

/// What a sweep found.
pub enum SweepView<'a> {
    /// The best data-parallel configurations.
    Data {
        /// The workload's name.
        workload: &'a str,
        /// How many were asked for.
        top: usize,
        /// The sweep.
        result: SweepResult,
    },
    /// The fastest splits that fit.
    Split {
        /// The transformer's name.
        workload: &'a str,
        /// Its sequence length.
        seq: usize,
        /// What the search found.
        found: SplitsFound,
        /// How long it took, seconds.
        elapsed_s: f64,
    },
}

/// `sweep --format json` of a data-parallel sweep.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    workload: &'a str,
    evaluated: u64,
    feasible: u64,
    infeasible: u64,
    infeasible_by_reason: &'a std::collections::BTreeMap<&'static str, u64>,
    elapsed_s: f64,
    evaluations_per_s: f64,
    objective: String,
    top: Vec<SweepRow<'a>>,
}

/// `sweep --format json` of a split search.
#[derive(Serialize)]
struct Splits<'a> {
    workload: &'a str,
    seq: usize,
    feasible: u64,
    rejected: &'a std::collections::BTreeMap<String, u64>,
    elapsed_s: f64,
    top: &'a [SplitRow],
}

impl Serialize for SweepView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            SweepView::Data {
                workload, result, ..
            } => summary(workload, result).serialize(s),
            SweepView::Split {
                workload,
                seq,
                found,
                elapsed_s,
            } => Splits {
                workload,
                seq: *seq,
                feasible: found.feasible,
                rejected: &found.rejected,
                elapsed_s: *elapsed_s,
                top: &found.top,
            }
            .serialize(s),
        }
    }
}

fn summary<'a>(workload: &'a str, result: &'a SweepResult) -> Summary<'a> {
    Summary {
        workload,
        evaluated: result.evaluated,
        feasible: result.feasible,
        infeasible: result.infeasible,
        infeasible_by_reason: &result.infeasible_by_reason,
        elapsed_s: result.elapsed_s,
        evaluations_per_s: result.evaluations_per_s,
        objective: result.objective.to_string(),
        top: rows(result, &result.top),
    }
}

impl SweepView<'_> {
    /// The table form.
    pub fn document(&self, style: crate::columns::Style) -> ridgeline_reports::Document {
        use crate::columns::{Style, table};
        use ridgeline_model::units::Seconds;
        use ridgeline_reports::Document;
        match self {
            SweepView::Data {
                workload,
                top,
                result,
            } => {
                let summary = summary(workload, result);
                let s = Style::Human;
                let mut doc = Document::new(format!(
                    "Sweep: {} (best {top} by {})",
                    summary.workload, summary.objective
                ))
                .summary("evaluated", s.count(summary.evaluated))
                .summary("feasible", s.count(summary.feasible))
                .summary("infeasible", s.count(summary.infeasible));
                for (reason, n) in summary.infeasible_by_reason {
                    doc = doc.summary(format!("  {reason}"), s.count(*n));
                }
                doc.summary("elapsed", s.seconds(Seconds::new(summary.elapsed_s)))
                    .summary(
                        "evaluations per second",
                        format!("{:.0}", summary.evaluations_per_s),
                    )
                    .table(table(&summary.top, &cols(), style))
            }
            SweepView::Split {
                workload,
                seq,
                found,
                elapsed_s,
            } => {
                let mut d = Document::new(format!(
                    "Splits of {workload} ({seq} tokens): the {} fastest per sequence of {} that fit",
                    found.top.len(),
                    found.feasible
                ))
                .summary("searched in", Style::Human.seconds(Seconds::new(*elapsed_s)))
                .table(table(&found.top, &split_cols(), style));
                for (why, n) in &found.rejected {
                    d = d.note(format!("left out: {n} ({why})"));
                }
                d.note("--batch is per data-parallel replica; each split timed as predict --tensor-parallel/--pipeline-parallel times it.")
            }
        }
    }
}
