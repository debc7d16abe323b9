//! `predict`: one job's step, epoch and time to solution, or a transformer's split by
//! tensor, pipeline, expert and data parallelism; with a simulated timeline and a Chakra
//! execution trace where asked. [`predict()`] computes it and writes the files; the view it
//! returns is what the command prints (its JSON, [`PredictView::document`]) and plots.

use std::path::PathBuf;

use anyhow::Result;
use ridgeline_model::parallel::{self, Split};
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{self, Prediction, Timing};
use ridgeline_model::sim::Simulated;
use ridgeline_model::stack::Stack;
use ridgeline_model::system::System;
use ridgeline_model::units::{Bytes, FlopRate, Seconds};
use ridgeline_reports::Document;
use ridgeline_reports::chart::Figure;
use serde::Serialize;

use crate::campaign::Observer;
use crate::columns::{self, Style};
use crate::inputs::{self, ScenarioSpec, WorkloadSpec};
use crate::{figures, tables};

/// What `predict` is asked.
#[derive(Debug, Clone)]
pub struct PredictRequest {
    /// The workload.
    pub workload: WorkloadSpec,
    /// The scenario (data set, epochs, stack, efficiencies, ...).
    pub scenario: ScenarioSpec,
    /// The training precision.
    pub precision: Precision,
    /// Nodes.
    pub nodes: u32,
    /// The system: a catalog name, a device, `local` or a file.
    pub system: String,
    /// The batch per device (per replica, split).
    pub batch: Option<u64>,
    /// The global batch.
    pub global_batch: Option<u64>,
    /// The parallel split, where any degree is given.
    pub split: Option<SplitDegrees>,
    /// Per-rank variability of the simulated step (coefficient of variation).
    pub rank_cv: Option<f64>,
    /// Where to write the simulated step's timeline (Chrome trace JSON).
    pub timeline: Option<PathBuf>,
    /// The prefix of the Chakra execution trace's files.
    pub chakra: Option<PathBuf>,
    /// The gradient bucket of the simulated data-parallel step, MiB.
    pub bucket_mib: f64,
    /// Steps of input read ahead in the simulation.
    pub prefetch: u32,
    /// The simulation's random seed.
    pub seed: u64,
}

/// The degrees of a split the flags give (each `None` where not given).
#[derive(Debug, Clone, Copy, Default)]
pub struct SplitDegrees {
    /// Tensor-parallel ranks.
    pub tensor: Option<u32>,
    /// Pipeline stages.
    pub pipeline: Option<u32>,
    /// Micro-batches a step.
    pub micro_batches: Option<u32>,
    /// Virtual stages a device (interleaved schedule).
    pub virtual_stages: Option<u32>,
    /// Expert-parallel ranks.
    pub expert: Option<u32>,
}

/// What `predict` found: one job's prediction, or a split transformer's step.
pub enum PredictView {
    /// A data-parallel job.
    Single(Box<Single>),
    /// A transformer split by tensor, pipeline, expert and data parallelism.
    Split(Box<SplitView>),
}

/// A data-parallel job's prediction, and its simulated step where asked.
pub struct Single {
    job: inputs::Job,
    system: System,
    batch: u64,
    /// The prediction.
    pub prediction: Prediction,
    simulated: Option<(Simulated, PathBuf)>,
    rank_cv: f64,
    cv_source: &'static str,
}

/// A split transformer's step and, where its data set allows, its time to solution.
pub struct SplitView {
    name: String,
    seq: usize,
    system: System,
    nodes: u32,
    precision: Precision,
    stack: Stack,
    packing: Option<String>,
    split: Split,
    global: u64,
    /// The step.
    pub step: parallel::SplitStep,
    solution: Option<SplitSolution>,
    why_not: Option<String>,
    capacity: Option<f64>,
    simulated: Option<(Simulated, PathBuf)>,
}

/// Predicts `req`, writing its timeline and Chakra files where asked (and saying so to
/// `observer`).
pub fn predict(req: &PredictRequest, observer: &dyn Observer) -> Result<PredictView> {
    match &req.split {
        Some(degrees) => Ok(PredictView::Split(Box::new(split(req, degrees)?))),
        None => Ok(PredictView::Single(Box::new(single(req, observer)?))),
    }
}

impl Serialize for PredictView {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PredictView::Single(v) => v.prediction.serialize(s),
            PredictView::Split(v) => v.json().serialize(s),
        }
    }
}

impl PredictView {
    /// The table form.
    pub fn document(&self, style: Style) -> Document {
        match self {
            PredictView::Single(v) => v.document(style),
            PredictView::Split(v) => v.document(style),
        }
    }

    /// The figures `--plot` writes: a job's step across batches (none for a split).
    pub fn figures(&self) -> Vec<Figure> {
        match self {
            PredictView::Single(v) => figures::across_batches(
                v.job.inputs(&v.system),
                &v.job.scenario,
                v.batch,
                &v.prediction,
            ),
            PredictView::Split(_) => Vec::new(),
        }
    }
}

fn single(req: &PredictRequest, observer: &dyn Observer) -> Result<Single> {
    let job = inputs::Job::from_flags(&req.workload, &req.scenario, req.precision, req.nodes)?;
    let system = inputs::system(&req.system)?;
    let batch = match (req.batch, req.global_batch) {
        (Some(b), _) => b,
        (None, Some(g)) => {
            let k = u64::from(system.node.devices.value);
            let devices = k * u64::from(req.nodes);
            if g % devices != 0 {
                anyhow::bail!(
                    "--global-batch {g} does not divide over {devices} devices ({k} per node x {} \
                     nodes); choose a multiple of {devices}",
                    req.nodes
                );
            }
            g / devices
        }
        (None, None) => anyhow::bail!("give --batch or --global-batch"),
    };
    let mut p = predict::predict(job.inputs(&system), &job.scenario, batch)?;
    p.assumptions.extend(job.packing.clone());
    // Per-rank variability: as given, else the calibration's measured sample spread.
    let spread = system.calibration.as_ref().and_then(|p| p.sample_cv);
    let (rank_cv, cv_source) = match (req.rank_cv, spread) {
        (Some(cv), _) => (cv, "--rank-cv"),
        (None, Some(cv)) => (cv, "the profile's measured sample spread"),
        (None, None) => (0.0, "none given, and no profile's sample spread"),
    };
    // The timeline and the Chakra files must not be one file.
    if let (Some(t), Some(prefix)) = (&req.timeline, &req.chakra) {
        let prefix = chakra_prefix(prefix);
        let name = t.to_string_lossy();
        if let Some(rank) = name
            .strip_prefix(&format!("{}.", prefix.display()))
            .and_then(|r| r.strip_suffix(".et"))
            .filter(|r| r.parse::<u64>().is_ok())
        {
            anyhow::bail!(
                "--timeline {name} is rank {rank}'s file of --chakra {}: one would overwrite the \
                 other; give the timeline another name (a .json file)",
                prefix.display()
            );
        }
    }
    let simulated = match &req.timeline {
        Some(path) => {
            let sim = predict::simulate(
                job.inputs(&system),
                &job.scenario,
                batch,
                ridgeline_model::sim::SimOptions {
                    bucket_bytes: req.bucket_mib * 1024.0 * 1024.0,
                    prefetch: req.prefetch,
                    cv: rank_cv,
                    seed: req.seed,
                    ..Default::default()
                },
            )?;
            let trace = ridgeline_model::sim::chrome_trace(
                &sim,
                &format!("{} on {}, slowest rank", p.workload, p.system),
            );
            crate::atomic::write(path, format!("{trace}\n").as_bytes())?;
            Some((sim, path.clone()))
        }
        None => None,
    };
    if let Some(prefix) = &req.chakra {
        let files = chakra(&job, &p, batch, req.bucket_mib, req.precision, prefix)?;
        observer.notice(&format!(
            "wrote the Chakra execution trace of {files} ranks to {}.{{0..{}}}.et",
            chakra_prefix(prefix).display(),
            files - 1
        ));
    }
    Ok(Single {
        job,
        system,
        batch,
        prediction: p,
        simulated,
        rank_cv,
        cv_source,
    })
}

impl Single {
    fn document(&self, style: Style) -> Document {
        let Single {
            prediction: p,
            simulated,
            rank_cv,
            cv_source,
            ..
        } = self;
        let cols = tables::movement_cols();
        let s = Style::Human;
        let o = &p.outcome;
        let secs = |v: Seconds| s.seconds(v);
        // A 90 % interval after a figure, where it has width.
        let interval = |lo: Seconds, hi: Seconds| {
            if hi.value() > lo.value() {
                format!(", 90 %: {} to {}", secs(lo), secs(hi))
            } else {
                String::new()
            }
        };
        let bound = o.bound.name();
        let mut doc = Document::new(format!(
            "Prediction: {} on {} x {} nodes ({} x {}), batch {} per device ({} global), {}",
            p.workload,
            p.system,
            o.nodes,
            o.devices,
            p.device,
            o.local_batch,
            o.global_batch,
            p.precision
        ))
        .summary(
            "step time",
            format!(
                "{} ({bound}-bound){}",
                secs(o.step_time_s),
                interval(o.step_time_lo_s, o.step_time_hi_s)
            ),
        )
        .summary(
            "  compute / input / allreduce",
            format!(
                "{} / {} / {} ({})",
                secs(o.compute_s),
                secs(o.input_s),
                secs(o.allreduce_s),
                if o.devices > 1 {
                    o.collective.to_string()
                } else {
                    "one device: none".into()
                }
            ),
        )
        .summary("  compute timed by", o.compute_timed_by.describe())
        .summary("  software stack", stack_line(&p.stack, style))
        .summary(
            "  compute, 90 % interval",
            match o.compute_interval_90_s {
                [lo, hi] if lo != hi => format!(
                    "{} to {} ({})",
                    secs(lo),
                    secs(hi),
                    p.stack.band.as_ref().map_or_else(
                        || "the kernel models' held-out or fit residuals".to_owned(),
                        |b| b.describe()
                    )
                ),
                _ => "none: every layer at the ideal bound or timed by a model without a \
                      held-out interval"
                    .to_owned(),
            },
        )
        .summary(
            "throughput",
            format!(
                "{:.1} samples/s ({:.2} per device)",
                o.samples_per_s.value(),
                o.samples_per_s_per_device.value()
            ),
        )
        .summary("data location", o.data_location.to_string())
        .summary("epochs", format!("{:.2}", o.epochs))
        .summary(
            "epoch time",
            format!(
                "{} (evaluation {}){}",
                secs(o.epoch_time_s),
                secs(o.eval_time_s),
                interval(o.epoch_time_lo_s, o.epoch_time_hi_s)
            ),
        )
        .summary("staging", secs(o.staging_s))
        .summary(
            "time to solution",
            format!(
                "{}{}",
                secs(o.time_to_solution_s),
                interval(o.time_to_solution_lo_s, o.time_to_solution_hi_s)
            ),
        )
        .summary(
            "achieved",
            format!(
                "{} ({:.1}% of peak)",
                s.flop_rate(o.achieved_flops),
                100.0 * o.fraction_of_peak
            ),
        )
        .summary(
            "memory per device",
            format!(
                "{} of {} ({})",
                s.bytes(o.memory_per_device_bytes),
                s.bytes(Bytes::new(p.device_memory_bytes)),
                if o.fits { "fits" } else { "does NOT fit" }
            ),
        )
        .summary(
            "compute budget",
            format!("{:.1} device-hours", o.compute_budget_device_hours),
        );
        if let Some((sim, path)) = &simulated {
            doc = doc
                .summary("simulated step", tables::simulated_step(sim))
                .summary(
                    "  per-rank variability",
                    format!("cv {rank_cv:.3} ({cv_source})"),
                )
                .summary("timeline", path.display().to_string());
        }
        let doc = extras(doc, p);
        let doc = if p.data_movement.is_empty() {
            // Every level's bandwidth is unknown (an uncalibrated `local`): no table of blanks.
            doc.note(
                "Data movement per sample: no level of this system has a known bandwidth \
                 (calibrate a profile to measure them).",
            )
        } else {
            doc.table(columns::table(&p.data_movement, &cols, style)).note(
                "Data movement per sample (bytes x gap, [004] Fig. 4); shared levels count their sharing.",
            )
        };
        doc.notes(p.assumptions.iter().map(|a| format!("assumed: {a}")))
    }
}

/// A prediction's optional lines: valid FLOPS, energy, cost and the HPC-AI rooflines.
fn extras(mut doc: Document, p: &Prediction) -> Document {
    let (s, o) = (Style::Human, &p.outcome);
    if let Some(v) = p.valid_flops {
        doc = doc.summary("valid FLOPS", s.flop_rate(v));
    }
    if let Some(e) = o.energy_j {
        doc = doc.summary("energy", format!("{:.3} kWh", e.as_kwh()));
    }
    if let Some(c) = o.cost {
        doc = doc.summary("cost", format!("{c:.2}"));
    }
    for (name, r) in [
        ("single node", p.hpc_ai_roofline.single_node),
        ("distributed", p.hpc_ai_roofline.distributed),
    ] {
        if let Some(r) = r {
            doc = doc.summary(
                format!("HPC-AI roofline, {name}"),
                format!(
                    "COI {:.0} FLOP/B, attainable {} of {} peak ({}-bound)",
                    r.coi,
                    s.flop_rate(FlopRate::new(r.attainable_flops)),
                    s.flop_rate(FlopRate::new(r.peak_flops)),
                    r.bound
                ),
            );
        }
    }
    doc
}

/// The most ranks a Chakra trace is written for: one file each.
const CHAKRA_MAX_RANKS: u64 = 65_536;

/// `prefix` without a trailing `.et`.
fn chakra_prefix(prefix: &std::path::Path) -> std::path::PathBuf {
    match prefix.to_str().and_then(|p| p.strip_suffix(".et")) {
        Some(p) => p.into(),
        None => prefix.to_owned(),
    }
}

/// Writes prediction `p`'s step as a Chakra execution trace, one file a data-parallel rank
/// (`PREFIX.r.et`; every rank runs the same graph); returns the files written.
fn chakra(
    job: &inputs::Job,
    p: &predict::Prediction,
    batch: u64,
    bucket_mib: f64,
    precision: Precision,
    prefix: &std::path::Path,
) -> Result<u64> {
    use ridgeline_model::chakra;
    let ranks = p.outcome.devices;
    if ranks > CHAKRA_MAX_RANKS {
        anyhow::bail!(
            "--chakra: {ranks} ranks would be {ranks} files; write it for at most \
             {CHAKRA_MAX_RANKS} (fewer --nodes)"
        );
    }
    let cost = ridgeline_model::cost::cost(&job.graph, batch, precision);
    let per_param = job.scenario.gradient_bytes as f64;
    let layers: Vec<chakra::Layer> = p
        .layers
        .iter()
        .zip(&job.model.layer_params)
        .zip(&cost.layers)
        .map(|((l, &params), c)| chakra::Layer {
            sim: ridgeline_model::sim::SimLayer {
                name: l.layer.clone(),
                forward_s: l.forward_s,
                backward_s: l.backward_s,
                gradient_bytes: params as f64 * per_param,
                exchange_s: [0.0; 2],
            },
            flops: [c.flops_fwd.value(), c.flops_bwd.value()],
            bytes: [c.hbm_bytes_fwd.value(), c.hbm_bytes_bwd.value()],
        })
        .collect();
    let layer_sum: f64 = p.layers.iter().map(|l| l.forward_s + l.backward_s).sum();
    let optimizer_s = (p.outcome.compute_s.value() - layer_sum).max(0.0);
    let nodes = chakra::step_nodes(&layers, bucket_mib * 1024.0 * 1024.0, optimizer_s);
    let bytes = chakra::encode(&nodes);
    let prefix = chakra_prefix(prefix);
    for r in 0..ranks {
        let path = std::path::PathBuf::from(format!("{}.{r}.et", prefix.display()));
        crate::atomic::write(&path, &bytes)?;
    }
    Ok(ranks)
}

fn split(req: &PredictRequest, degrees: &SplitDegrees) -> Result<SplitView> {
    let (name, config, seq) = inputs::transformer(&req.workload)?;
    let system = inputs::system(&req.system)?;
    let scenario = req.scenario.clone();
    let precision = req.precision;
    let (tensor, pipeline) = (degrees.tensor.unwrap_or(1), degrees.pipeline.unwrap_or(1));
    let devices = u64::from(system.node.devices.value) * u64::from(req.nodes);
    let per_replica = u64::from(tensor) * u64::from(pipeline);
    if devices % per_replica != 0 {
        anyhow::bail!(
            "--tensor-parallel {tensor} x --pipeline-parallel {pipeline} = {per_replica} devices \
             a replica: {devices} devices ({} nodes of {}) do not split into replicas of {per_replica}",
            req.nodes,
            system.node.devices.value
        );
    }
    let data = u32::try_from(devices / per_replica)?;
    let micro_batches = degrees.micro_batches.unwrap_or(pipeline);
    let global = match (req.batch, req.global_batch) {
        (Some(b), _) => {
            if micro_batches > 0 && b % u64::from(micro_batches) != 0 {
                anyhow::bail!(
                    "--batch {b} (sequences per replica a step) does not split into \
                     {micro_batches} micro-batches{}; give a multiple of {micro_batches}",
                    if degrees.micro_batches.is_none() {
                        format!(" (one a pipeline stage: --pipeline-parallel {pipeline})")
                    } else {
                        String::new()
                    }
                );
            }
            b * u64::from(data)
        }
        (None, Some(g)) => g,
        (None, None) => anyhow::bail!("give --batch (per replica) or --global-batch"),
    };
    let split = Split {
        tensor,
        pipeline,
        data,
        micro_batches,
        virtual_stages: degrees.virtual_stages.unwrap_or(1),
        expert: degrees.expert.unwrap_or(1),
    };
    let timing = Timing::of(&system, precision, scenario.kernel_model);
    let stack = inputs::stack(scenario.stack.as_deref())?;
    // The job as a data-parallel run would load it: its data set's epochs, and where the
    // stack packs sequences, the tokens a sequence computes.
    let job = inputs::Job::from_flags(&req.workload, &scenario, precision, req.nodes);
    let packing = job.as_ref().ok().and_then(|j| j.packing.clone());
    let seq = match &job {
        Ok(j) if j.packing.is_some() => usize::try_from(j.graph.input_shape().elements())?,
        _ => seq,
    };
    let prepared = parallel::prepare(
        &name,
        &config,
        seq,
        parallel::Degrees {
            tensor: split.tensor,
            expert: split.expert,
        },
        &system,
        precision,
        scenario.optimizer,
        &stack,
        &timing,
    )?;
    let step = prepared.step(global, split)?;
    let simulated = match &req.timeline {
        Some(path) => {
            let spread = system.calibration.as_ref().and_then(|p| p.sample_cv);
            let sim = prepared.simulate(
                global,
                split,
                ridgeline_model::sim::SimOptions {
                    bucket_bytes: req.bucket_mib * 1024.0 * 1024.0,
                    prefetch: req.prefetch,
                    cv: req.rank_cv.or(spread).unwrap_or(0.0),
                    seed: req.seed,
                    ..Default::default()
                },
            )?;
            let trace = ridgeline_model::sim::chrome_trace(
                &sim,
                &format!("{name} on {}, slowest rank", system.name),
            );
            crate::atomic::write(path, format!("{trace}\n").as_bytes())?;
            Some((sim, path.clone()))
        }
        None => None,
    };
    let capacity = system
        .device
        .memory_capacity
        .as_ref()
        .map(|m| m.value.value());
    let (solution, why_not) = match split_solution(job, &scenario, global, &step)? {
        SplitTime::Solution(s) => (Some(s), None),
        SplitTime::Outside(why) => (None, Some(why)),
    };
    if let Some(c) = capacity.filter(|&c| step.memory_per_device_bytes > c) {
        let s = Style::Human;
        anyhow::bail!(
            "--tensor-parallel {tensor} --pipeline-parallel {pipeline}: one device needs {} at \
             this split (micro-batch {}) but has {}; split over more tensor-parallel ranks or \
             pipeline stages, give a smaller --batch or more --micro-batches, or choose a \
             device with more memory (`ridgeline sweep {name} --tensor-parallel ... \
             --pipeline-parallel ...` lists the splits that fit)",
            s.bytes(Bytes::new(step.memory_per_device_bytes)),
            step.micro_batch,
            s.bytes(Bytes::new(c))
        );
    }
    Ok(SplitView {
        name,
        seq,
        system,
        nodes: req.nodes,
        precision,
        stack,
        packing,
        split,
        global,
        step,
        solution,
        why_not,
        capacity,
        simulated,
    })
}

/// A split step as JSON.
#[derive(Serialize)]
struct SplitPrediction<'a> {
    stack: &'a str,
    /// What packing the data set's sequences changed, where the stack packs them.
    #[serde(skip_serializing_if = "Option::is_none")]
    packing: Option<&'a str>,
    #[serde(flatten)]
    step: &'a parallel::SplitStep,
    #[serde(flatten)]
    solution: Option<SplitSolution>,
    /// Why there is no time to solution, where there is none.
    #[serde(skip_serializing_if = "Option::is_none")]
    time_to_solution_not_computed: Option<&'a str>,
}

impl SplitView {
    fn json(&self) -> SplitPrediction<'_> {
        SplitPrediction {
            stack: &self.stack.name,
            packing: self.packing.as_deref(),
            step: &self.step,
            solution: self.solution,
            time_to_solution_not_computed: self.why_not.as_deref(),
        }
    }

    fn document(&self, style: Style) -> Document {
        let SplitView {
            name,
            seq,
            system,
            precision,
            stack,
            packing,
            split,
            global,
            step,
            solution,
            why_not,
            simulated,
            ..
        } = self;
        let (split, global, capacity) = (*split, *global, self.capacity);
        let (tensor, pipeline, data) = (split.tensor, split.pipeline, split.data);
        let s = Style::Human;
        let secs = |v: f64| s.seconds(Seconds::new(v));
        let fits = capacity.map_or_else(String::new, |c| {
            format!("of {} (fits)", s.bytes(Bytes::new(c)))
        });
        let mut doc = Document::new(format!(
            "Prediction: {name} ({seq} tokens) on {} x {} nodes, tensor {tensor} x pipeline {pipeline} x data {data}{}, {global} sequences a step in {} micro-batches of {}, {precision}",
            system.name,
            self.nodes,
            if split.expert > 1 {
                format!(" (experts over {} of them)", split.expert)
            } else {
                String::new()
            },
            split.micro_batches,
            step.micro_batch
        ))
        .summary(
            "step time",
            match (step.step_interval_90_s, &step.band) {
                (Some([lo, hi]), Some(b)) => format!(
                    "{}, 90 %: {} to {} ({})",
                    secs(step.step_s),
                    secs(lo),
                    secs(hi),
                    b.describe()
                ),
                _ => secs(step.step_s),
            },
        )
        .summary("  software stack", format!("{} ({} dispatch)", stack.name, stack.host.dispatch.value))
        .summary(
            "  pipeline / data allreduce / update",
            format!(
                "{} / {}{} / {}",
                secs(step.pipeline_s),
                secs(step.data_allreduce_s),
                if step.data_exposed_s <= 0.0 && step.data_allreduce_s > 0.0 {
                    " (hidden by the backward pass)".to_owned()
                } else if step.data_exposed_s < step.data_allreduce_s {
                    format!(" ({} not hidden by the backward pass)", secs(step.data_exposed_s))
                } else {
                    String::new()
                },
                secs(step.update_s)
            ),
        )
        .summary(
            "  pipeline schedule",
            format!(
                "{}{}{}{}{}",
                stack.parallel.schedule.value,
                if split.virtual_stages > 1 {
                    format!(", interleaved over {} virtual stages", split.virtual_stages)
                } else {
                    String::new()
                },
                if stack.parallel.distributed_optimizer.value {
                    "; distributed optimizer (state sharded over the data-parallel ranks)"
                } else {
                    ""
                },
                if stack.parallel.sequence_parallel.value && tensor > 1 {
                    "; sequence parallel"
                } else {
                    ""
                },
                if tensor > system.node.devices.value {
                    format!(
                        "; tensor parallelism across {} nodes (its collectives over the network)",
                        tensor / system.node.devices.value
                    )
                } else {
                    String::new()
                }
            ),
        )
        .summary("  pipeline bubble", format!("{:.1}%", 100.0 * step.bubble));
        if let Some((sim, path)) = &simulated {
            doc = doc
                .summary("simulated step", tables::simulated_step(sim))
                .summary("timeline", path.display().to_string());
        }
        doc = doc
            .summary(
                "throughput",
                format!("{:.1} sequences/s", global as f64 / step.step_s),
            )
            .summary(
                "memory per device",
                format!(
                    "{} {fits}",
                    s.bytes(Bytes::new(step.memory_per_device_bytes))
                ),
            );
        doc = match &solution {
            Some(t) => doc
                .summary("epochs", format!("{:.2}", t.epochs))
                .summary(
                    "epoch time",
                    format!(
                        "{} ({} steps; evaluation {})",
                        secs(t.epoch_time_s),
                        t.steps_per_epoch,
                        secs(t.eval_time_s)
                    ),
                )
                .summary("time to solution", secs(t.time_to_solution_s)),
            None => doc.summary(
                "time to solution",
                format!("not computed: {}", why_not.as_deref().unwrap_or_default()),
            ),
        };
        doc = doc
            .table(columns::table(&step.stages, &tables::stage_cols(), style))
            .notes(predict::rule_lines(
                &step.effects,
                (step.micro_batch * u64::from(split.micro_batches)) as f64,
                step.micro_batch as f64,
                1.0 / f64::from(pipeline),
            ))
            .notes(packing.clone());
        doc.note("Each stage's times are one micro-batch on one of its tensor-parallel ranks: forward and backward of its layers (timed as predict times layers), its tensor-parallel allreduces (four per transformer layer; `exposed`: what the products do not hide, where the stack overlaps them), its point-to-point sends and, under expert parallelism, its all-to-alls (four per mixture-of-experts layer, on the critical path; the experts' gradients reduce among the replicas that hold the same experts); the step is every stage once (the first micro-batch) plus (micro-batches - 1) x the slowest stage (1F1B), then the data-parallel gradient reduction (where the stack overlaps it, only what the largest stage's backward and forward passes do not hide) and the optimizer update. The FP8 and recomputation lines are one device's step, the memory lines one micro-batch on one device (a stage's share of the layers).")
    }
}

/// Epochs and time to solution of a split step.
#[derive(Debug, Clone, Copy, serde::Serialize)]
struct SplitSolution {
    epochs: f64,
    steps_per_epoch: u64,
    /// One epoch: its training steps and its evaluation.
    epoch_time_s: f64,
    /// The evaluation of one epoch: `eval_samples / global` forward-only steps.
    eval_time_s: f64,
    time_to_solution_s: f64,
}

/// The epochs and time to solution of split step `step` at `global` sequences, from the
/// workload's data set and epochs as `predict` takes them (`--epochs`, `--dataset`,
/// `--train-samples`, `--eval-samples`, the convergence curve), epochs timed as `predict`
/// times them: `ceil(train / global)` steps and `ceil(eval / global)` evaluation steps. Why
/// not, where the workload has no data set and none of those flags was given, or the curve
/// does not cover the global batch.
fn split_solution(
    job: Result<inputs::Job>,
    scenario: &ScenarioSpec,
    global: u64,
    step: &ridgeline_model::parallel::SplitStep,
) -> Result<SplitTime> {
    let solution = |epochs: f64, train: u64, eval: u64| {
        let steps_per_epoch = train.div_ceil(global);
        let eval_time_s = eval.div_ceil(global) as f64 * step.eval_step_s;
        let epoch_time_s = steps_per_epoch as f64 * step.step_s + eval_time_s;
        SplitTime::Solution(SplitSolution {
            epochs,
            steps_per_epoch,
            epoch_time_s,
            eval_time_s,
            time_to_solution_s: epochs * epoch_time_s,
        })
    };
    // Epochs and samples given: no data set needed.
    if let (Some(e), Some(n)) = (scenario.epochs, scenario.train_samples) {
        return Ok(solution(e, n, scenario.eval_samples.unwrap_or(0)));
    }
    let asked = scenario.epochs.is_some()
        || scenario.dataset.is_some()
        || scenario.train_samples.is_some()
        || scenario.eval_samples.is_some()
        || scenario.convergence.is_some();
    let job = match job {
        Ok(job) => job,
        Err(e) if asked => return Err(e),
        Err(_) => {
            return Ok(SplitTime::Outside(
                "the workload has no data set (pass --dataset, or --epochs with \
                 --train-samples)"
                    .into(),
            ));
        }
    };
    let epochs = match &job.scenario.epochs {
        predict::Epochs::Fixed(e) => *e,
        predict::Epochs::Curve(c) => match c.epochs(global) {
            Some(e) => e,
            None => {
                let (lo, hi) = c.range();
                return Ok(SplitTime::Outside(format!(
                    "global batch {global} is outside the convergence data ({lo}..{hi}), \
                     which ridgeline does not extrapolate: pass --epochs or a --convergence \
                     file that covers it"
                )));
            }
        },
    };
    Ok(solution(
        epochs,
        job.dataset.train_samples.value,
        job.dataset.eval_samples.value,
    ))
}

/// A split step's time to solution, or why there is none.
enum SplitTime {
    /// Computed.
    Solution(SplitSolution),
    /// Not computed, and why.
    Outside(String),
}

/// The stack, and how its host and the device shared the step, in one line.
fn stack_line(r: &predict::StackReport, style: Style) -> String {
    let host = match r.host_s {
        Some(h) => format!(
            "; host {} a step, device busy {}{}",
            style.seconds(Seconds::new(h)),
            style.seconds(Seconds::new(r.device_busy_s)),
            if r.device_idle_share > 0.05 {
                format!(
                    " (host-bound: the device waits {:.0}%)",
                    100.0 * r.device_idle_share
                )
            } else {
                String::new()
            }
        ),
        None => String::new(),
    };
    format!(
        "{} ({} dispatch{host})",
        r.effects.stack, r.effects.dispatch
    )
}
