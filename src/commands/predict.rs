//! `ridgeline predict`.

use anyhow::Result;
use ridgeline_app::figures;
use ridgeline_app::inputs;
use ridgeline_app::tables;
use ridgeline_model::predict::{self};
use ridgeline_model::units::{Bytes, FlopRate, Seconds};
use ridgeline_reports::Document;

use crate::cli::PredictArgs;
use crate::output::{self, Style};

pub(crate) fn run(args: &PredictArgs) -> Result<()> {
    if args.tensor_parallel.is_some()
        || args.pipeline_parallel.is_some()
        || args.micro_batches.is_some()
        || args.virtual_stages.is_some()
        || args.expert_parallel.is_some()
    {
        return split(args);
    }
    let job = inputs::Job::from_flags(
        &args.target.workload.spec(),
        &args.scenario.spec(),
        args.precision.precision,
        args.nodes,
    )?;
    let system = &inputs::system(&args.target.system.system)?;
    let batch = match (args.batch, args.global_batch) {
        (Some(b), _) => b,
        (None, Some(g)) => {
            let k = u64::from(system.node.devices.value);
            let devices = k * u64::from(args.nodes);
            if g % devices != 0 {
                anyhow::bail!(
                    "--global-batch {g} does not divide over {devices} devices ({k} per node x {} \
                     nodes); choose a multiple of {devices}",
                    args.nodes
                );
            }
            g / devices
        }
        (None, None) => anyhow::bail!("give --batch or --global-batch"),
    };
    let mut p = predict::predict(job.inputs(system), &job.scenario, batch)?;
    p.assumptions.extend(job.packing.clone());
    // Per-rank variability: as given, else the calibration's measured sample spread.
    let spread = system.calibration.as_ref().and_then(|p| p.sample_cv);
    let (rank_cv, cv_source) = match (args.rank_cv, spread) {
        (Some(cv), _) => (cv, "--rank-cv"),
        (None, Some(cv)) => (cv, "the profile's measured sample spread"),
        (None, None) => (0.0, "none given, and no profile's sample spread"),
    };
    // The timeline and the Chakra files must not be one file.
    if let (Some(t), Some(prefix)) = (&args.timeline, &args.chakra) {
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
    let simulated = match &args.timeline {
        Some(path) => {
            let sim = predict::simulate(
                job.inputs(system),
                &job.scenario,
                batch,
                ridgeline_model::sim::SimOptions {
                    bucket_bytes: args.bucket_mib * 1024.0 * 1024.0,
                    prefetch: args.prefetch,
                    cv: rank_cv,
                    seed: args.seed,
                    ..Default::default()
                },
            )?;
            let trace = ridgeline_model::sim::chrome_trace(
                &sim,
                &format!("{} on {}, slowest rank", p.workload, p.system),
            );
            ridgeline_app::atomic::write(path, format!("{trace}\n").as_bytes())?;
            Some((sim, path))
        }
        None => None,
    };
    if let Some(prefix) = &args.chakra {
        let files = chakra(&job, &p, batch, args, prefix)?;
        eprintln!(
            "wrote the Chakra execution trace of {files} ranks to {}.{{0..{}}}.et",
            chakra_prefix(prefix).display(),
            files - 1
        );
    }
    let cols = tables::movement_cols();
    output::print(args.output.format.format, &p, |style| {
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
                _ => "none: every layer at the ideal bound".to_owned(),
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
        let doc = if p.data_movement.is_empty() {
            // Every level's bandwidth is unknown (an uncalibrated `local`): no table of blanks.
            doc.note(
                "Data movement per sample: no level of this system has a known bandwidth \
                 (calibrate a profile to measure them).",
            )
        } else {
            doc.table(output::table(&p.data_movement, &cols, style)).note(
                "Data movement per sample (bytes x gap, [004] Fig. 4); shared levels count their sharing.",
            )
        };
        doc.notes(p.assumptions.iter().map(|a| format!("assumed: {a}")))
    })?;
    output::plots(&args.output.plot, || {
        Ok(figures::across_batches(
            job.inputs(system),
            &job.scenario,
            batch,
            &p,
        ))
    })
}

/// `predict` of a transformer split by tensor, pipeline and data parallelism.
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
    args: &PredictArgs,
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
    let cost = ridgeline_model::cost::cost(&job.graph, batch, args.precision.precision);
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
    let nodes = chakra::step_nodes(&layers, args.bucket_mib * 1024.0 * 1024.0, optimizer_s);
    let bytes = chakra::encode(&nodes);
    let prefix = chakra_prefix(prefix);
    for r in 0..ranks {
        let path = std::path::PathBuf::from(format!("{}.{r}.et", prefix.display()));
        ridgeline_app::atomic::write(&path, &bytes)?;
    }
    Ok(ranks)
}

fn split(args: &PredictArgs) -> Result<()> {
    use ridgeline_model::parallel::{self, Split};
    use ridgeline_model::predict::Timing;
    let (name, config, seq) = inputs::transformer(&args.target.workload.spec())?;
    let system = &inputs::system(&args.target.system.system)?;
    let scenario = args.scenario.spec();
    let precision = args.precision.precision;
    let (tensor, pipeline) = (
        args.tensor_parallel.unwrap_or(1),
        args.pipeline_parallel.unwrap_or(1),
    );
    let devices = u64::from(system.node.devices.value) * u64::from(args.nodes);
    let per_replica = u64::from(tensor) * u64::from(pipeline);
    if devices % per_replica != 0 {
        anyhow::bail!(
            "--tensor-parallel {tensor} x --pipeline-parallel {pipeline} = {per_replica} devices \
             a replica: {devices} devices ({} nodes of {}) do not split into replicas of {per_replica}",
            args.nodes,
            system.node.devices.value
        );
    }
    let data = u32::try_from(devices / per_replica)?;
    let micro_batches = args.micro_batches.unwrap_or(pipeline);
    let global = match (args.batch, args.global_batch) {
        (Some(b), _) => {
            if micro_batches > 0 && b % u64::from(micro_batches) != 0 {
                anyhow::bail!(
                    "--batch {b} (sequences per replica a step) does not split into \
                     {micro_batches} micro-batches{}; give a multiple of {micro_batches}",
                    if args.micro_batches.is_none() {
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
        virtual_stages: args.virtual_stages.unwrap_or(1),
        expert: args.expert_parallel.unwrap_or(1),
    };
    let timing = Timing::of(system, precision, scenario.kernel_model);
    let stack = inputs::stack(scenario.stack.as_deref())?;
    // The job as a data-parallel run would load it: its data set's epochs, and where the
    // stack packs sequences, the tokens a sequence computes.
    let job = inputs::Job::from_flags(
        &args.target.workload.spec(),
        &scenario,
        precision,
        args.nodes,
    );
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
        system,
        precision,
        scenario.optimizer,
        &stack,
        &timing,
    )?;
    let step = prepared.step(global, split)?;
    let simulated = match &args.timeline {
        Some(path) => {
            let spread = system.calibration.as_ref().and_then(|p| p.sample_cv);
            let sim = prepared.simulate(
                global,
                split,
                ridgeline_model::sim::SimOptions {
                    bucket_bytes: args.bucket_mib * 1024.0 * 1024.0,
                    prefetch: args.prefetch,
                    cv: args.rank_cv.or(spread).unwrap_or(0.0),
                    seed: args.seed,
                    ..Default::default()
                },
            )?;
            let trace = ridgeline_model::sim::chrome_trace(
                &sim,
                &format!("{name} on {}, slowest rank", system.name),
            );
            ridgeline_app::atomic::write(path, format!("{trace}\n").as_bytes())?;
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
    #[derive(serde::Serialize)]
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
    let json = SplitPrediction {
        stack: &stack.name,
        packing: packing.as_deref(),
        step: &step,
        solution,
        time_to_solution_not_computed: why_not.as_deref(),
    };
    output::print(args.output.format.format, &json, |style| {
        let s = Style::Human;
        let secs = |v: f64| s.seconds(Seconds::new(v));
        let fits = capacity.map_or_else(String::new, |c| {
            format!("of {} (fits)", s.bytes(Bytes::new(c)))
        });
        let mut doc = Document::new(format!(
            "Prediction: {name} ({seq} tokens) on {} x {} nodes, tensor {tensor} x pipeline {pipeline} x data {data}{}, {global} sequences a step in {} micro-batches of {}, {precision}",
            system.name,
            args.nodes,
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
            .table(output::table(&step.stages, &tables::stage_cols(), style))
            .notes(predict::rule_lines(
                &step.effects,
                (step.micro_batch * u64::from(split.micro_batches)) as f64,
                step.micro_batch as f64,
                1.0 / f64::from(pipeline),
            ))
            .notes(packing.clone());
        doc.note("Each stage's times are one micro-batch on one of its tensor-parallel ranks: forward and backward of its layers (timed as predict times layers), its tensor-parallel allreduces (four per transformer layer; `exposed`: what the products do not hide, where the stack overlaps them), its point-to-point sends and, under expert parallelism, its all-to-alls (four per mixture-of-experts layer, on the critical path; the experts' gradients reduce among the replicas that hold the same experts); the step is every stage once (the first micro-batch) plus (micro-batches - 1) x the slowest stage (1F1B), then the data-parallel gradient reduction (where the stack overlaps it, only what the largest stage's backward and forward passes do not hide) and the optimizer update. The FP8 and recomputation lines are one device's step, the memory lines one micro-batch on one device (a stage's share of the layers).")
    })
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
    scenario: &ridgeline_app::inputs::ScenarioSpec,
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
