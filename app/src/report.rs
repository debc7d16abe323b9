//! Report content: the procurement, workload and validation reports as
//! [`ridgeline_reports::Report`] models (what to say, which tables and figures), and
//! [`write_to`], which renders a report in every format into a directory, whole or not at
//! all. Building a report prints nothing; the command line renders and says where it went.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use ridgeline_calibrate::validate::{LayerPoint, Validation};
use ridgeline_model::memory::{self, MemoryRow};
use ridgeline_model::precision::Precision;
use ridgeline_model::predict::{self, KernelModel, Prediction};
use ridgeline_model::procurement::{self, CandidateResult, Mix, Offer, WorkloadOutcome};
use ridgeline_model::roofline::Efficiency;
use ridgeline_model::sweep::Objective;
use ridgeline_model::system::System;
use ridgeline_model::units::{Bytes, Joules, Seconds};
use ridgeline_model::{cost, roofline, scale};
use ridgeline_reports::chart::{Axis, BarChart, BarSeries, Chart, Figure, Level};
use ridgeline_reports::{
    CsvTables, Html, ImageFormat, Json, Markdown, Report, ReportRenderer, ReportTable, Section,
};

use crate::atomic;
use crate::columns::{self, Col, Style, num, text};
use crate::figures;
use crate::inputs::{self, Job, ScenarioSpec, WorkloadSpec};
use crate::runs::RunValidation;
use crate::tables;

/// Extra files of a report directory, made from the paths of the report's own files.
pub type Extra<'a> = &'a dyn Fn(&[String]) -> Result<Vec<(String, Vec<u8>)>>;

/// Renders `report` in every format into `dir` (Markdown figures as `images`), with the
/// files `extra` makes from the report's paths beside it; returns every file's path. The
/// directory is replaced whole ([`atomic::directory`]).
pub fn write_to(
    report: &Report,
    dir: &Path,
    images: ImageFormat,
    extra: Extra<'_>,
) -> Result<Vec<String>> {
    let renderers: [&dyn ReportRenderer; 4] = [&Html, &Markdown { images }, &CsvTables, &Json];
    let mut artifacts = Vec::new();
    for r in renderers {
        artifacts.extend(r.render(report)?.into_iter().map(|a| (a.name, a.bytes)));
    }
    let paths: Vec<String> = artifacts
        .iter()
        .map(|(name, _)| dir.join(name).display().to_string())
        .collect();
    artifacts.extend(extra(&paths)?);
    atomic::directory(dir, |fresh| {
        for (name, bytes) in &artifacts {
            let path = fresh.join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).with_context(|| {
                    format!("cannot create report directory `{}`", parent.display())
                })?;
            }
            std::fs::write(&path, bytes)
                .with_context(|| format!("cannot write `{}`", dir.join(name).display()))?;
        }
        Ok(())
    })?;
    Ok(artifacts
        .iter()
        .map(|(name, _)| dir.join(name).display().to_string())
        .collect())
}

/// A report table from one column definition: human cells and raw cells.
fn table<R>(id: &str, caption: &str, rows: &[R], cols: &[Col<R>]) -> ReportTable {
    ReportTable {
        id: id.to_owned(),
        caption: caption.to_owned(),
        human: columns::table(rows, cols, Style::Human),
        raw: columns::table(rows, cols, Style::Raw),
    }
}

/// One row per (workload, candidate).
struct Row<'a> {
    candidate: &'a CandidateResult,
    w: &'a WorkloadOutcome,
}

fn opt_num(v: Option<f64>, s: Style, decimals: usize) -> String {
    match (v, s) {
        (None, Style::Human) => "-".into(),
        (v, s) => s.number(v, decimals),
    }
}

/// An amount of money: whole units with thousands separators.
fn money(v: Option<f64>, s: Style) -> String {
    match (v, s) {
        (Some(v), Style::Human) if v >= 0.0 => s.count(v.round() as u64),
        (v, s) => opt_num(v, s, 0),
    }
}

/// A unit for times around `max` seconds: its name and its length in seconds.
fn time_unit(max: f64) -> (&'static str, f64) {
    match max {
        m if m >= 2.0 * 86_400.0 => ("days", 86_400.0),
        m if m >= 2.0 * 3600.0 => ("hours", 3600.0),
        m if m >= 120.0 => ("minutes", 60.0),
        _ => ("seconds", 1.0),
    }
}

fn opt_seconds(v: Option<f64>, s: Style) -> String {
    v.map_or_else(
        || {
            if s == Style::Human {
                "-".into()
            } else {
                String::new()
            }
        },
        |v| s.seconds(Seconds::new(v)),
    )
}

fn gbs(v: Option<f64>, s: Style) -> String {
    match s {
        Style::Human => v.map_or_else(|| "-".into(), |v| format!("{:.1}", v / 1e9)),
        Style::Raw => s.number(v, 0),
    }
}

/// What a procurement report compares: candidate systems on a workload mix.
#[derive(Debug, Clone)]
pub struct ProcurementRequest {
    /// A shipped mix name or a mix file.
    pub mix: String,
    /// Candidates: shipped candidates, candidate files or any system.
    pub systems: Vec<String>,
    /// Budget per candidate (buys its nodes), in the candidates' currency.
    pub budget: Option<f64>,
    /// What the ranking minimises.
    pub objective: Objective,
    /// What times the candidates' GPU layers.
    pub kernel_model: KernelModel,
    /// Attained fraction of peak FLOP/s.
    pub compute_efficiency: f64,
    /// Attained fraction of memory bandwidth.
    pub memory_efficiency: f64,
    /// The software stack: a built-in stack's name or a stack file (`None`: the default).
    pub stack: Option<String>,
    /// The command that made the report, for its provenance line.
    pub provenance: String,
}

/// A procurement comparison: the mix, the ranked candidates and the report on them.
#[derive(Debug)]
pub struct Procurement {
    /// The workload mix.
    pub mix: Mix,
    /// Candidates, ranked.
    pub candidates: Vec<CandidateResult>,
    /// What the ranking rests on that nothing measured validates, in words (the report's
    /// ranking says it too).
    pub caveats: Vec<String>,
    /// Each candidate's time per mix under the stack asked for and under `tuned`, where the
    /// stack asked for is another: the software work the machine rewards.
    pub software: Vec<SoftwareRow>,
    /// The report.
    pub report: Report,
}

/// One candidate under two software stacks ([`Procurement::software`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SoftwareRow {
    /// The candidate.
    pub candidate: String,
    /// The stack asked for (the default: what users run without tuning).
    pub stack: String,
    /// Its time per mix under that stack, where every workload runs.
    pub mix_time_s: Option<f64>,
    /// The tuned stack's name.
    pub tuned: String,
    /// Its time per mix under the tuned stack.
    pub tuned_mix_time_s: Option<f64>,
    /// How many times faster the mix runs tuned.
    pub speedup: Option<f64>,
}

/// The stack procurement sets beside the one asked for.
pub const TUNED_STACK: &str = "tuned";

/// Compares the candidates of `req` on its mix: each workload at its fastest configuration
/// on each candidate, ranked ([`procurement::compare`]), with the report on them.
pub fn procurement(req: &ProcurementRequest) -> Result<Procurement> {
    let (mix, dir) = inputs::mix(&req.mix)?;
    let mix_file = if dir.is_some() {
        req.mix.clone()
    } else {
        format!("data/catalog/mixes/{}.toml", req.mix)
    };
    let efficiency = Efficiency::new(req.compute_efficiency, req.memory_efficiency)?;
    let stack = inputs::stack(req.stack.as_deref())?;
    let mut jobs = inputs::mix_jobs(&mix, &mix_file, dir.as_deref(), &stack)?;
    for j in &mut jobs {
        j.scenario.efficiency = efficiency;
        j.scenario.kernel_model = req.kernel_model;
    }
    let mut names = BTreeSet::new();
    let mut offers = Vec::new();
    for arg in &req.systems {
        let (offer, base) = inputs::offer(arg)?;
        if !names.insert(offer.name.clone()) {
            bail!("--systems: candidate `{}` is given twice", offer.name);
        }
        offers.push((offer, base));
    }
    let run = |offers: Vec<(Offer, System)>, jobs: &[Job]| {
        procurement::compare(offers, req.budget, req.objective, |system| {
            mix.workloads
                .iter()
                .zip(jobs)
                .map(|(entry, j)| procurement::evaluate(j.inputs(system), &j.scenario, entry))
                .collect()
        })
    };
    let tuned_stack = inputs::stack(Some(TUNED_STACK))?;
    let tuned_offers = (stack.name != tuned_stack.name).then(|| offers.clone());
    let compared = run(offers, &jobs)?;
    // The same candidates under the tuned stack, where another was asked for.
    let software = match tuned_offers {
        None => Vec::new(),
        Some(offers) => {
            let mut tuned = inputs::mix_jobs(&mix, &mix_file, dir.as_deref(), &tuned_stack)?;
            for j in &mut tuned {
                j.scenario.efficiency = efficiency;
                j.scenario.kernel_model = req.kernel_model;
            }
            let other = run(offers, &tuned)?;
            compared
                .candidates
                .iter()
                .zip(&other.candidates)
                .map(|(a, b)| SoftwareRow {
                    candidate: a.name.clone(),
                    stack: stack.name.clone(),
                    mix_time_s: a.mix_time_s,
                    tuned: tuned_stack.name.clone(),
                    tuned_mix_time_s: b.mix_time_s,
                    speedup: a.mix_time_s.zip(b.mix_time_s).map(|(x, y)| x / y),
                })
                .collect()
        }
    };
    let caveats = depthwise_caveats(&mix, &compared.candidates);
    let report = procurement_report(
        req,
        &mix,
        &jobs,
        &compared.offers,
        &compared.candidates,
        &caveats,
        &software,
    );
    Ok(Procurement {
        mix,
        candidates: compared.candidates,
        caveats,
        software,
        report,
    })
}

/// The ranking's columns (the command prints them too).
pub fn ranking_cols() -> [Col<CandidateResult>; 11] {
    [
        num("rank", "rank", |c, s| {
            c.rank.map_or_else(|| "-".into(), |r| s.count(r as u64))
        }),
        text("candidate", "candidate", |c, _| c.name.clone()),
        text("device", "device", |c, _| c.device.clone()),
        num("nodes", "nodes", |c, s| s.count(u64::from(c.nodes))),
        num("devices", "devices", |c, s| s.count(c.devices)),
        num("price", "purchase_price", |c, s| money(c.purchase_price, s)),
        num("power (kW)", "power_w", |c, s| match s {
            Style::Human => opt_num(c.power_w.map(|w| w / 1e3), s, 1),
            Style::Raw => s.number(c.power_w, 0),
        }),
        num("mixes/day", "mixes_per_day", |c, s| {
            opt_num(c.mixes_per_day, s, 2)
        }),
        num("time/mix", "mix_time_s", |c, s| {
            opt_seconds(c.mix_time_s, s)
        }),
        num("cost/mix", "cost_per_mix", |c, s| money(c.cost_per_mix, s)),
        num("energy/mix (kWh)", "energy_per_mix_j", |c, s| match s {
            Style::Human => opt_num(c.energy_per_mix_j.map(|j| j / 3.6e6), s, 0),
            Style::Raw => s.number(c.energy_per_mix_j, 0),
        }),
    ]
}

fn workload_cols<'a>() -> [Col<Row<'a>>; 15] {
    [
        text("workload", "workload", |r, _| r.w.workload.clone()),
        text("candidate", "candidate", |r, _| r.candidate.name.clone()),
        num("nodes", "nodes", |r, s| {
            r.w.best
                .as_ref()
                .map_or_else(|| "-".into(), |p| s.count(u64::from(p.outcome.nodes)))
        }),
        num("batch", "local_batch", |r, s| {
            r.w.best
                .as_ref()
                .map_or_else(|| "-".into(), |p| s.count(p.outcome.local_batch))
        }),
        num("global", "global_batch", |r, s| {
            r.w.best
                .as_ref()
                .map_or_else(|| "-".into(), |p| s.count(p.outcome.global_batch))
        }),
        num("step", "step_time_s", |r, s| {
            opt_seconds(r.w.best.as_ref().map(|p| p.outcome.step_time_s.value()), s)
        }),
        text("bound", "bound", |r, _| {
            r.w.best
                .as_ref()
                .map_or("does not run", |p| p.outcome.bound.name())
                .to_owned()
        }),
        num("epochs", "epochs", |r, s| {
            opt_num(r.w.best.as_ref().map(|p| p.outcome.epochs), s, 1)
        }),
        num("time to solution", "time_to_solution_s", |r, s| {
            opt_seconds(
                r.w.best
                    .as_ref()
                    .map(|p| p.outcome.time_to_solution_s.value()),
                s,
            )
        }),
        num("90 % lo", "time_to_solution_lo_s", |r, s| {
            opt_seconds(
                r.w.best
                    .as_ref()
                    .map(|p| p.outcome.time_to_solution_lo_s.value()),
                s,
            )
        }),
        num("90 % hi", "time_to_solution_hi_s", |r, s| {
            opt_seconds(
                r.w.best
                    .as_ref()
                    .map(|p| p.outcome.time_to_solution_hi_s.value()),
                s,
            )
        }),
        num("samples/s", "samples_per_s", |r, s| {
            opt_num(
                r.w.best.as_ref().map(|p| p.outcome.samples_per_s.value()),
                s,
                0,
            )
        }),
        num("cost", "cost", |r, s| {
            money(r.w.best.as_ref().and_then(|p| p.outcome.cost), s)
        }),
        num("energy (kWh)", "energy_j", |r, s| match s {
            Style::Human => opt_num(
                r.w.best
                    .as_ref()
                    .and_then(|p| p.outcome.energy_j)
                    .map(Joules::as_kwh),
                s,
                0,
            ),
            Style::Raw => s.number(
                r.w.best
                    .as_ref()
                    .and_then(|p| p.outcome.energy_j)
                    .map(Joules::value),
                0,
            ),
        }),
        num("largest batch", "largest_batch", |r, s| {
            s.count(r.w.largest_batch)
        }),
    ]
}

fn bandwidth_cols<'a>() -> [Col<Row<'a>>; 7] {
    [
        text("workload", "workload", |r, _| r.w.workload.clone()),
        text("candidate", "candidate", |r, _| r.candidate.name.clone()),
        text("data from", "data_location", |r, _| {
            r.w.best
                .as_ref()
                .map_or_else(|| "-".into(), |p| p.outcome.data_location.to_string())
        }),
        num(
            "input needed (GB/s)",
            "storage_needed_bytes_per_s",
            |r, s| gbs(r.w.storage_needed_bytes_per_s, s),
        ),
        num(
            "file system (GB/s)",
            "storage_available_bytes_per_s",
            |r, s| gbs(r.w.storage_available_bytes_per_s, s),
        ),
        num(
            "network needed/node (GB/s)",
            "network_needed_bytes_per_s",
            |r, s| gbs(r.w.network_needed_bytes_per_s, s),
        ),
        num(
            "node network (GB/s)",
            "network_available_bytes_per_s",
            |r, s| gbs(r.w.network_available_bytes_per_s, s),
        ),
    ]
}

/// Cuts a name to the identifier alphabet (lowercase letters, digits, `-`).
fn slug(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_owned();
    if s.is_empty() { "x".into() } else { s }
}

/// Per workload of `mix` whose best configuration on some candidate has depthwise
/// convolutions timed by the transferred model ([`predict::DepthwiseShare`]), how much of its
/// layers' time they take across the candidates, in words: a ranking that turns on that
/// workload rests on a share no measured depthwise kernel validates.
fn depthwise_caveats(mix: &Mix, candidates: &[CandidateResult]) -> Vec<String> {
    mix.workloads
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| {
            // A candidate's outcomes follow the mix's entries.
            let shares: Vec<predict::DepthwiseShare> = candidates
                .iter()
                .filter_map(|c| c.workloads.get(i)?.best.as_ref()?.depthwise)
                .collect();
            let (lo, hi) = shares.iter().fold((f64::INFINITY, 0.0_f64), |(lo, hi), d| {
                (lo.min(d.share_of_layer_time), hi.max(d.share_of_layer_time))
            });
            let layers = shares.iter().map(|d| d.layers).max()?;
            let range = if (100.0 * hi).round() == (100.0 * lo).round() {
                format!("{:.0} %", 100.0 * hi)
            } else {
                format!("{:.0}-{:.0} %", 100.0 * lo, 100.0 * hi)
            };
            Some(format!(
                "Depthwise convolutions: {layers} layers of `{}` ({}) take {range} of its \
                 layers' time on {} of the {} candidates, timed by the transferred model, \
                 and figures and rankings that turn on it rest on that share: {}.",
                entry.workload,
                entry.precision,
                shares.len(),
                candidates.len(),
                predict::DEPTHWISE_EVIDENCE,
            ))
        })
        .collect()
}

fn procurement_report(
    args: &ProcurementRequest,
    mix: &Mix,
    jobs: &[Job],
    offers: &[(Offer, System)],
    candidates: &[CandidateResult],
    caveats: &[String],
    software: &[SoftwareRow],
) -> Report {
    let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
    let ranking = ranking_section(args.objective, mix, candidates, caveats);
    let [per_workload, bandwidth, memory] = workload_sections(mix, jobs, offers, candidates);
    let mut sections = vec![ranking];
    if !software.is_empty() {
        sections.push(software_section(software, jobs));
    }
    sections.extend([per_workload, bandwidth, memory, inputs_section(mix, offers)]);
    Report {
        title: format!("Procurement: mix `{}` on {}", mix.name, names.join(", ")),
        intro: procurement_intro(args, mix),
        sections,
        provenance: args.provenance.clone(),
    }
}

/// What a mix is ranked by, in words.
fn objective_words(objective: Objective) -> &'static str {
    match objective {
        Objective::Time => "time per mix",
        Objective::Cost => "cost per mix",
        Objective::Energy => "energy per mix",
    }
}

/// The procurement report's opening paragraphs: the mix, how it runs and is ranked, and
/// what times its layers.
fn procurement_intro(args: &ProcurementRequest, mix: &Mix) -> Vec<String> {
    let objective = objective_words(args.objective);
    let mut intro = vec![format!(
        "Workload mix `{}`{}: {}.",
        mix.name,
        mix.description
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
        mix.workloads
            .iter()
            .map(|w| format!("{} x{} ({})", w.workload, w.weight, w.precision))
            .collect::<Vec<_>>()
            .join(", ")
    )];
    intro.push(format!(
        "Each workload runs at its fastest configuration on each candidate: every batch size \
         the mix allows, on every power-of-two node count up to the whole machine. A mix runs \
         its workloads one after another, each as many times as its weight. Candidates are \
         ranked by {objective}{}.",
        args.budget
            .map(|b| format!(
                ", each at the nodes a budget of {} buys",
                ridgeline_reports::count(b.round() as u64)
            ))
            .unwrap_or_default()
    ));
    let ideal = args.compute_efficiency >= 1.0 && args.memory_efficiency >= 1.0;
    let at = if ideal {
        "ideal efficiency".to_owned()
    } else {
        format!(
            "{:.0} % compute and {:.0} % memory efficiency",
            100.0 * args.compute_efficiency,
            100.0 * args.memory_efficiency
        )
    };
    let timing = match args.kernel_model {
        KernelModel::Transfer => format!(
            "Layers on GPUs are timed by the transferred kernel model: fitted on measured FP32 \
             kernels of other GPUs ({}), it times each candidate from its device file alone, \
             never faster than the datasheet peaks at {at}. A calibrated profile overrides it, \
             and devices without its figures run at the datasheet peaks (each candidate's \
             `compute_timed_by` in procurement.json says which).",
            ridgeline_model::transfer::Model::builtin()
                .source
                .devices
                .join(", ")
        ),
        KernelModel::Ideal => format!(
            "Layers are timed at the systems' datasheet peaks at {at} (--efficiency ideal) \
             unless a candidate's system is a calibrated profile{}.",
            if ideal {
                ", so absolute times are lower bounds"
            } else {
                ""
            }
        ),
    };
    intro.push(format!(
        "{timing} Compare candidates by their ratios. Cost is the total cost of \
         ownership: the purchase price spread over the lifetime plus electricity at the node's \
         power. Prices, power and site figures are the candidate files' own, each with its \
         source (see the inputs below and procurement.json)."
    ));
    intro
}

/// The ranking: the candidates' table, why each ranks where it does, the caveats, and each
/// candidate's time per mix by workload.
fn ranking_section(
    objective: Objective,
    mix: &Mix,
    candidates: &[CandidateResult],
    caveats: &[String],
) -> Section {
    let objective = objective_words(objective);
    let mut ranking = Section::new("Ranking").table(table(
        "ranking",
        &format!("Candidates ranked by {objective}"),
        candidates,
        &ranking_cols(),
    ));
    for c in candidates {
        let place = c
            .rank
            .map_or_else(|| "not ranked".into(), |r| format!("#{r}"));
        ranking = ranking.paragraph(format!("{place} {}: {}.", c.name, c.reasons.join("; ")));
    }
    for caveat in caveats {
        ranking = ranking.paragraph(caveat.clone());
    }
    let ranked: Vec<&CandidateResult> = candidates
        .iter()
        .filter(|c| c.mix_time_s.is_some())
        .collect();
    if !ranked.is_empty() {
        let longest = ranked
            .iter()
            .filter_map(|c| c.mix_time_s)
            .fold(0.0, f64::max);
        let (unit, length) = time_unit(longest);
        ranking = ranking.figure(Figure {
            id: "mix-time".into(),
            chart: Chart::Bar(BarChart {
                title: format!("Time per mix `{}`, by workload", mix.name),
                x_label: "candidate".into(),
                y: Axis::linear(format!("time per mix ({unit})")),
                categories: ranked.iter().map(|c| c.name.clone()).collect(),
                series: mix
                    .workloads
                    .iter()
                    .enumerate()
                    .map(|(i, w)| BarSeries {
                        name: format!("{} x{}", w.workload, w.weight),
                        values: ranked
                            .iter()
                            .map(|c| {
                                c.workloads[i].best.as_ref().map_or(0.0, |p| {
                                    p.outcome.time_to_solution_s.value() * w.weight / length
                                })
                            })
                            .collect(),
                    })
                    .collect(),
                stacked: true,
                levels: Vec::new(),
            }),
            caption: "Weighted time to solution of each workload at its best configuration, \
                      stacked: the mix's time on each candidate."
                .into(),
        });
    }
    ranking
}

/// Per workload: the best configuration on each candidate with its scaling and step
/// breakdown, the bandwidth it needs, and its memory against batch.
fn workload_sections(
    mix: &Mix,
    jobs: &[Job],
    offers: &[(Offer, System)],
    candidates: &[CandidateResult],
) -> [Section; 3] {
    let rows: Vec<Row<'_>> = (0..mix.workloads.len())
        .flat_map(|i| {
            candidates.iter().map(move |c| Row {
                candidate: c,
                w: &c.workloads[i],
            })
        })
        .collect();
    let mut per_workload = Section::new("Time to solution per workload").table(table(
        "workloads",
        "Best configuration of each workload on each candidate",
        &rows,
        &workload_cols(),
    ));
    let mut bandwidth = Section::new("Bottlenecks and the bandwidth each workload needs")
        .paragraph(
            "To stay compute-bound a workload must read its input samples as fast as its \
             devices consume them (input bytes per step over the step's compute time, all \
             nodes together) and, across nodes, move its gradients within the compute time \
             (a ring allreduce sends 2(n-1)/n of the gradient bytes per node per step). Where \
             the needed figure exceeds what the system has, the workload is input- or \
             allreduce-bound.",
        )
        .table(table(
            "bandwidth",
            "Bandwidth needed at the best configuration against what the system has",
            &rows,
            &bandwidth_cols(),
        ));
    let mut memory = Section::new("Memory: the largest batch per device");
    for (i, w) in mix.workloads.iter().enumerate() {
        for c in candidates {
            if let Some(why) = &c.workloads[i].infeasible {
                bandwidth = bandwidth
                    .paragraph(format!("{} on {}: does not run: {why}", w.workload, c.name));
            }
        }
        let longest = candidates
            .iter()
            .flat_map(|c| c.workloads[i].scaling.iter().map(|p| p.time_to_solution_s))
            .fold(0.0, f64::max);
        let (unit, length) = time_unit(longest);
        let curves: Vec<(String, Vec<(f64, f64)>)> = candidates
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    c.workloads[i]
                        .scaling
                        .iter()
                        .map(|p| (f64::from(p.nodes), p.time_to_solution_s / length))
                        .collect(),
                )
            })
            .filter(|(_, p): &(String, Vec<(f64, f64)>)| !p.is_empty())
            .collect();
        let id = slug(&w.workload);
        if !curves.is_empty() {
            let mut f = figures::scaling(
                &format!("{id}-scaling"),
                format!("Time to solution: {} ({})", w.workload, w.precision),
                "nodes",
                &format!("time to solution ({unit})"),
                curves,
                None,
            );
            f.caption = "Fastest time to solution at each node count (over the mix's batch \
                         sizes); it stops falling where the convergence curve makes larger \
                         global batches cost more epochs than the nodes save."
                .into();
            per_workload = per_workload.figure(f);
        }
        let best: Vec<(String, ridgeline_model::predict::Outcome)> = candidates
            .iter()
            .filter_map(|c| {
                c.workloads[i]
                    .best
                    .as_ref()
                    .map(|p| (c.name.clone(), p.outcome))
            })
            .collect();
        if !best.is_empty() {
            let mut f = figures::breakdown(
                format!("Step time at the best configuration: {}", w.workload),
                "candidate",
                &best,
            );
            f.id = format!("{id}-breakdown");
            per_workload = per_workload.figure(f);
        }
        memory = memory.figure(memory_figure(&id, w, &jobs[i], offers, candidates, i));
    }
    [per_workload, bandwidth, memory]
}

/// Workload `i` (`w`, run as `job`) against batch on each candidate device's memory.
fn memory_figure(
    id: &str,
    w: &procurement::MixEntry,
    job: &Job,
    offers: &[(Offer, System)],
    candidates: &[CandidateResult],
    i: usize,
) -> Figure {
    let mut devices = BTreeSet::new();
    let mut levels = Vec::new();
    for (_, sys) in offers {
        if let Some(m) = sys.device_memory()
            && devices.insert(sys.device.name.clone())
        {
            // Devices of the same capacity share one line.
            let value = m.value.value();
            match levels.iter_mut().find(|l: &&mut Level| l.value == value) {
                Some(l) => {
                    l.name = l
                        .name
                        .replace(" memory", &format!(", {} memory", sys.device.name))
                }
                None => levels.push(Level {
                    name: format!("{} memory", sys.device.name),
                    value,
                }),
            }
        }
    }
    let largest = candidates
        .iter()
        .map(|c| c.workloads[i].largest_batch)
        .max()
        .unwrap_or(1);
    let batches: Vec<u64> = std::iter::successors(Some(1u64), |b| b.checked_mul(2))
        .take_while(|&b| b <= largest.max(1) * 2)
        .collect();
    let rows: Vec<MemoryRow> = batches
        .iter()
        .map(|&b| job.model.footprint.at(b, Bytes::new(f64::INFINITY)))
        .collect();
    let mut f = figures::memory(&format!("{id}-memory"), &w.workload, &rows, levels);
    f.caption = format!(
        "{} ({}): per-device footprint by component against batch size, with each \
         candidate device's memory. Largest batch: {}.",
        w.workload,
        job.graph.name(),
        candidates
            .iter()
            .map(|c| format!("{} {}", c.name, c.workloads[i].largest_batch))
            .collect::<Vec<_>>()
            .join(", ")
    );
    f
}

/// The inputs and their sources: the candidates' offers and the mix.
fn inputs_section(mix: &Mix, offers: &[(Offer, System)]) -> Section {
    let inputs_cols: [Col<(procurement::Offer, ridgeline_model::system::System)>; 8] = [
        text("candidate", "candidate", |(o, _), _| o.name.clone()),
        text("system", "system", |(o, _), _| o.system.clone()),
        num("nodes", "nodes", |(_, s), st| {
            st.count(u64::from(s.cluster.nodes.value))
        }),
        num("price/node", "price_per_node", |(o, _), s| {
            money(o.price_per_node.as_ref().map(|p| p.value), s)
        }),
        num("node power (W)", "node_power_w", |(o, sys), s| {
            opt_num(o.node_power(sys), s, 0)
        }),
        num("lifetime (years)", "lifetime_years", |(o, _), s| {
            opt_num(o.lifetime_years.as_ref().map(|p| p.value), s, 1)
        }),
        num("electricity/kWh", "electricity_per_kwh", |(o, _), s| {
            opt_num(o.electricity_per_kwh.as_ref().map(|p| p.value), s, 2)
        }),
        text("sources", "sources", |(o, _), _| {
            let mut v: Vec<String> = [
                Some(format!("nodes: {}", o.nodes.source)),
                o.price_per_node
                    .as_ref()
                    .map(|p| format!("price: {}", p.source)),
                o.node_power_w
                    .as_ref()
                    .map(|p| format!("power: {}", p.source)),
                o.lifetime_years
                    .as_ref()
                    .map(|p| format!("lifetime, electricity: {}", p.source)),
                o.pfs_bandwidth
                    .as_ref()
                    .map(|p| format!("file system: {}", p.source)),
            ]
            .into_iter()
            .flatten()
            .collect();
            v.dedup();
            v.join("; ")
        }),
    ];
    let workloads_cols: [Col<procurement::MixEntry>; 5] = [
        text("workload", "workload", |w, _| w.workload.clone()),
        num("weight", "weight", |w, s| s.number(Some(w.weight), 1)),
        text("precision", "precision", |w, _| w.precision.to_string()),
        text("batches", "batches", |w, _| {
            w.batches
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        }),
        text("epochs", "epochs", |w, _| match &w.epochs {
            Some(e) => format!("{} ({})", e.value, e.source),
            None => "convergence curve (ridgeline's data set file)".into(),
        }),
    ];
    Section::new("Inputs")
        .table(table("candidates", "Candidates", offers, &inputs_cols))
        .table(table(
            "mix",
            "Workload mix",
            &mix.workloads,
            &workloads_cols,
        ))
}

/// The workload report's prediction: its configuration, step, epochs, time to solution,
/// memory and energy, its assumptions and the data movement per sample (`devices`: a node's).
fn prediction_section(p: &Prediction, devices: u32) -> Section {
    let (s, o) = (Style::Human, &p.outcome);
    let secs = |v: Seconds| s.seconds(v);
    // A 90 % interval after a figure, where it has width (as `predict` prints it).
    let interval = |lo: Seconds, hi: Seconds| {
        if hi.value() > lo.value() {
            format!(" (90 %: {} to {})", secs(lo), secs(hi))
        } else {
            String::new()
        }
    };
    let mut prediction = Section::new("Prediction")
        .fact(
            "configuration",
            format!(
                "{} nodes x {} devices ({}), batch {} per device ({} global), {}",
                o.nodes, devices, p.device, o.local_batch, o.global_batch, p.precision
            ),
        )
        .fact(
            "step time",
            format!(
                "{}{} ({}-bound): compute {}, input {}, allreduce {}",
                secs(o.step_time_s),
                interval(o.step_time_lo_s, o.step_time_hi_s),
                o.bound.name(),
                secs(o.compute_s),
                secs(o.input_s),
                secs(o.allreduce_s)
            ),
        )
        .fact(
            "throughput",
            format!("{:.1} samples/s", o.samples_per_s.value()),
        )
        .fact("epochs", format!("{:.2}", o.epochs))
        .fact(
            "epoch time",
            format!(
                "{}{}",
                secs(o.epoch_time_s),
                interval(o.epoch_time_lo_s, o.epoch_time_hi_s)
            ),
        )
        .fact(
            "time to solution",
            format!(
                "{}{}",
                secs(o.time_to_solution_s),
                interval(o.time_to_solution_lo_s, o.time_to_solution_hi_s)
            ),
        )
        .fact(
            "memory per device",
            format!(
                "{} of {}",
                s.bytes(o.memory_per_device_bytes),
                s.bytes(Bytes::new(p.device_memory_bytes))
            ),
        );
    if let Some(e) = o.energy_j {
        prediction = prediction.fact("energy", format!("{:.1} kWh", e.as_kwh()));
    }
    for a in &p.assumptions {
        prediction = prediction.paragraph(format!("Assumed: {a}."));
    }
    prediction.table(table(
        "data-movement",
        "Data movement per sample ([004] Fig. 4): bytes x gap of the level each source crosses",
        &p.data_movement,
        &tables::movement_cols(),
    ))
}

/// The software section of the procurement report: each candidate's time per mix under the
/// stack the mix ran under and under the tuned stack.
fn software_section(rows: &[SoftwareRow], jobs: &[Job]) -> Section {
    let cols: [Col<SoftwareRow>; 4] = [
        text("candidate", "candidate", |r, _| r.candidate.clone()),
        num("time/mix", "mix_time_s", |r, s| {
            opt_seconds(r.mix_time_s, s)
        }),
        num("time/mix, tuned", "tuned_mix_time_s", |r, s| {
            opt_seconds(r.tuned_mix_time_s, s)
        }),
        num("speed-up", "speedup", |r, s| match s {
            Style::Human => r.speedup.map_or_else(String::new, |v| format!("{v:.2}x")),
            Style::Raw => s.number(r.speedup, 4),
        }),
    ];
    let stack = rows.first().map_or("", |r| r.stack.as_str());
    let ups: Vec<f64> = rows.iter().filter_map(|r| r.speedup).collect();
    let range = match (
        ups.iter().copied().reduce(f64::min),
        ups.iter().copied().reduce(f64::max),
    ) {
        (Some(lo), Some(hi)) => format!("{lo:.2}-{hi:.2} times"),
        _ => "not comparable".into(),
    };
    let stack_file = jobs
        .first()
        .map_or_else(String::new, |j| j.stack.file.clone());
    Section::new("Software: the same candidates under a tuned stack")
        .paragraph(format!(
            "The ranking above runs every workload under the software stack `{stack}` \
             ({stack_file}): what users run without tuning. Under `{TUNED_STACK}` (what \
             vendors' benchmark submissions run: the step replayed from a CUDA graph, batch \
             norm and its activation fused, fused attention) the mix runs {range} faster on \
             these candidates: the software work a centre can fund on each machine. \
             `ridgeline stack show NAME` lists each stack's figures and sources."
        ))
        .table(table(
            "software",
            "Time per mix under each stack",
            rows,
            &cols,
        ))
}

/// The validation report: summary, steps, layers, hardware efficiency.
pub fn validation_report(v: &Validation, provenance: String) -> Report {
    let mut summary = Section::new("Summary").paragraph(
        "Predictions come from the calibrated profile alone (micro-kernel records); the \
         workload measurements are never fitted. Error = (predicted - measured) / measured.",
    );
    for (k, val) in tables::summary_lines(v) {
        summary = summary.fact(k, val);
    }
    let steps = Section::new("Training steps").table(table(
        "steps",
        "Predicted and measured step time and peak memory",
        &v.steps,
        &tables::step_cols(),
    ));
    let worst = &v.worst_layers[..v.worst_layers.len().min(20)];
    let layers = Section::new("Layers")
        .figure(figures::predicted_vs_measured(
            format!("Predicted vs measured layer time on {}", v.system),
            &v.layers,
            0.25,
        ))
        .figure(figures::error_distribution(&v.layers))
        .table(table(
            "worst-layers",
            "Layer passes furthest off, in seconds",
            worst,
            &tables::layer_cols(),
        ));
    // Hardware efficiency per workload at its largest measured batch.
    let mut efficiency = Section::new("Kernel hardware efficiency").paragraph(
        "Measured per-layer FLOP/s over the device's peak for the layer's op class (matrix or \
         vector) on the profile's datasheet system; [004] Fig. 3.",
    );
    let mut workloads: Vec<(&str, usize)> = Vec::new();
    for s in &v.steps {
        match workloads.iter_mut().find(|(w, _)| *w == s.workload) {
            Some((_, b)) => *b = (*b).max(s.batch),
            None => workloads.push((&s.workload, s.batch)),
        }
    }
    for (w, b) in workloads {
        let of: Vec<LayerPoint> = v
            .layers
            .iter()
            .filter(|l| l.workload == w && l.batch == b)
            .cloned()
            .collect();
        if of.iter().any(|l| l.flops > 0.0) {
            efficiency = efficiency.figure(figures::efficiency_histogram(
                &format!("efficiency-{}", slug(w)),
                format!("Hardware efficiency: {w}, batch {b}"),
                &of,
            ));
        }
    }
    Report {
        title: format!("Validation on {}", v.system),
        intro: vec![format!(
            "{} measured training steps and {} layer passes compared with ridgeline's \
             predictions.",
            v.steps.len(),
            v.layers.len()
        )],
        sections: vec![summary, steps, layers, efficiency],
        provenance,
    }
}

/// The validation report of imported runs (`ridgeline import mlperf`) against `predict`:
/// the summary, each run's throughput, epoch and time to train, and predicted against
/// measured time to train. `measured` names the runs file.
pub fn runs_report(v: &RunValidation, measured: &str, provenance: String) -> Report {
    let mut summary = Section::new("Summary")
        .paragraph(
            "Each run is predicted on its nodes, the system's node holding the run's \
             accelerators, at its global batch, for its epochs, training samples and \
             evaluations; curve = the epochs ridgeline's convergence data gives at that \
             global batch, where it has some. Nothing is fitted on the runs. Error = \
             (predicted - measured) / measured.",
        )
        .fact("measured", measured.to_owned())
        .fact(
            "system",
            format!("{} ({}), {}", v.system, v.device, v.precision),
        )
        .fact("layers timed by", v.timed_by.clone());
    for (k, val) in tables::run_summary_lines(v) {
        summary = summary.fact(k, val);
    }
    for s in &v.skipped {
        summary = summary.paragraph(format!("Not predicted: {s}"));
    }
    let runs = Section::new("Runs")
        .table(table(
            "runs",
            "Throughput, epoch and time to train: measured and predicted",
            &v.runs,
            &tables::run_check_cols(),
        ))
        .figure(figures::runs_predicted_vs_measured(
            format!("Predicted vs measured time to train on {}", v.system),
            &v.runs,
            0.25,
        ));
    Report {
        title: format!("Validation of imported runs on {}", v.system),
        intro: vec![format!(
            "{} published training runs compared with ridgeline's predictions.",
            v.runs.len()
        )],
        sections: vec![summary, runs],
        provenance,
    }
}

/// What a workload report covers: one workload on one system.
#[derive(Debug, Clone)]
pub struct WorkloadReportRequest {
    /// The workload.
    pub workload: WorkloadSpec,
    /// The system (catalog name, `local`, system file or calibrated profile).
    pub system: String,
    /// The scenario.
    pub scenario: ScenarioSpec,
    /// Training precision.
    pub precision: Precision,
    /// Nodes.
    pub nodes: u32,
    /// Batch size per device.
    pub batch: u64,
    /// The command that made the report, for its provenance line.
    pub provenance: String,
}

/// The workload report of `args`: prediction, the simulated step's timeline, memory,
/// roofline, batch sizes and scaling;
/// returns it with the prediction it is built on.
pub fn workload(args: &WorkloadReportRequest) -> Result<(Report, Prediction)> {
    let job = Job::from_flags(&args.workload, &args.scenario, args.precision, args.nodes)?;
    let system = &inputs::system(&args.system)?;
    let graph = &job.graph;
    let sc = &job.scenario;
    let p = predict::predict(job.inputs(system), sc, args.batch)?;
    let s = Style::Human;
    let prediction = prediction_section(&p, system.node.devices.value);

    // Inside the step: the simulated timeline.
    let sim = predict::simulate(
        job.inputs(system),
        sc,
        args.batch,
        ridgeline_model::sim::SimOptions::default(),
    )?;
    let step_section = Section::new("Inside a step")
        .fact("simulated step", tables::simulated_step(&sim))
        .figure(figures::timeline(
            &sim,
            format!("{} on {}: one step, simulated", p.workload, p.system),
        ));

    // Across batch sizes: data movement and the step's parts.
    let mut batch_section = Section::new("Across batch sizes");
    for f in figures::across_batches(job.inputs(system), sc, args.batch, &p) {
        batch_section = batch_section.figure(f);
    }

    // Memory.
    let mem = memory::report(
        graph,
        system,
        args.precision,
        args.scenario.optimizer,
        &job.stack,
        None,
    )?;
    let memory_section = Section::new("Memory")
        .fact("largest batch per device", s.count(mem.max_batch))
        .figure(figures::memory(
            "memory",
            &mem.workload,
            &mem.rows,
            figures::capacities(system),
        ))
        .table(table(
            "memory",
            "Memory per device by component",
            &mem.rows,
            &tables::memory_cols(),
        ));

    let roofline_section = roofline_section(graph, system, args, sc)?;

    let scaling_section = scaling_section(&job, system, args, &p)?;

    let report = Report {
        title: format!("Workload report: {} on {}", p.workload, p.system),
        intro: vec![format!(
            "{} ({} parameters) on {} ({}), {}. Predicted with {}.",
            p.workload,
            s.count(job.model.params),
            p.system,
            p.device,
            p.precision,
            timed_by(&p, sc)
        )],
        sections: vec![
            prediction,
            step_section,
            memory_section,
            roofline_section,
            batch_section,
            scaling_section,
        ],
        provenance: args.provenance.clone(),
    };
    Ok((report, p))
}

/// The roofline section: the step on one device against the datasheet's ceilings, and
/// the 15 longest layers.
fn roofline_section(
    graph: &ridgeline_model::graph::Graph,
    system: &System,
    args: &WorkloadReportRequest,
    sc: &predict::Scenario,
) -> Result<Section> {
    let s = Style::Human;
    let secs = |v: Seconds| s.seconds(v);
    let c = cost::cost(graph, args.batch, args.precision);
    let r = roofline::roofline(graph, &c, system, sc.efficiency)?;
    let mut longest: Vec<roofline::RooflineLayer<'_>> = r.layers.clone();
    longest.sort_by(|a, b| b.time.value().total_cmp(&a.time.value()));
    longest.truncate(15);
    Ok(Section::new("Roofline")
        .fact(
            "step on one device",
            format!(
                "{} ({:.1} % of peak); compute-bound layers {}, memory-bound {}",
                secs(r.step_time),
                100.0 * r.fraction_of_peak,
                secs(r.compute_bound_time),
                secs(r.memory_bound_time)
            ),
        )
        .figure(figures::roofline(
            &r,
            &figures::ceilings(system, args.precision),
            figures::datasheet_bandwidth(system)?,
        ))
        .table(table(
            "roofline",
            "The 15 longest layers",
            &longest,
            &tables::roofline_cols(),
        )))
}

/// The scaling section: weak scaling (a fixed batch per device) over powers of two up to
/// the machine, with why a count cannot run.
fn scaling_section(
    job: &Job,
    system: &System,
    args: &WorkloadReportRequest,
    p: &Prediction,
) -> Result<Section> {
    let sc = &job.scenario;
    let nodes = procurement::node_counts(system.cluster.nodes.value);
    let weak = scale::weak(job.inputs(system), sc, args.batch, &nodes)?;
    let points: Vec<(f64, f64)> = weak
        .rows
        .iter()
        .filter_map(|r| Some((f64::from(r.nodes), r.throughput?)))
        .filter(|&(_, t)| t > 0.0)
        .collect();
    let mut scaling_section = Section::new("Scaling").table(table(
        "weak-scaling",
        &format!("Weak scaling at batch {} per device", args.batch),
        &weak.rows,
        &tables::scale_cols(),
    ));
    if !points.is_empty() {
        scaling_section = scaling_section.figure(figures::scaling(
            "weak-scaling",
            format!(
                "Weak scaling: {} on {}, batch {}",
                p.workload, p.system, args.batch
            ),
            "nodes",
            "samples per second",
            vec![("predicted".into(), points)],
            Some(1.0),
        ));
    }
    for r in weak.rows.iter().filter(|r| r.infeasible.is_some()) {
        scaling_section = scaling_section.paragraph(format!(
            "{} nodes: {}",
            r.nodes,
            r.infeasible.as_deref().unwrap_or_default()
        ));
    }
    Ok(scaling_section)
}

/// What timed the prediction's layers, in words: the calibrated profile's, the transferred
/// or the datasheet's models, each with its layers.
fn timed_by(p: &Prediction, sc: &predict::Scenario) -> String {
    let t = p.outcome.compute_timed_by;
    let ideal = format!(
        "the datasheet peaks at {:.0} % compute and {:.0} % memory efficiency",
        100.0 * sc.efficiency.compute,
        100.0 * sc.efficiency.memory
    );
    format!(
        "{}{}{}",
        if t.profile > 0 {
            format!("the calibrated profile's kernel models ({} layers) ", t.profile)
        } else {
            String::new()
        },
        if t.transfer > 0 {
            format!(
                "the transferred kernel model, fitted on measured GPU kernels of other devices ({} layers) ",
                t.transfer
            )
        } else {
            String::new()
        },
        if t.ideal > 0 {
            format!("{ideal} ({} layers)", t.ideal)
        } else {
            String::new()
        }
    )
    .trim_end()
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::ScenarioSpec;

    /// What a report says, without its numbers: headings, fact labels, tables (id,
    /// caption, raw headers, row count) and figures (id).
    fn outline(r: &Report) -> String {
        let mut s = format!("# {}\n{} intro paragraphs\n", r.title, r.intro.len());
        for sec in &r.sections {
            s += &format!("## {}\n", sec.heading);
            for (k, _) in &sec.facts {
                s += &format!("- fact: {k}\n");
            }
            for t in &sec.tables {
                let headers: Vec<&str> = t.raw.columns.iter().map(|c| c.header.as_str()).collect();
                s += &format!(
                    "- table {} ({} rows): {}\n  {}\n",
                    t.id,
                    t.raw.rows.len(),
                    t.caption,
                    headers.join(",")
                );
            }
            for f in &sec.figures {
                s += &format!("- figure {}\n", f.id);
            }
        }
        s + &format!("provenance: {}\n", r.provenance)
    }

    #[test]
    fn the_procurement_report_ranks_and_explains_every_candidate() {
        let p = procurement(&ProcurementRequest {
            stack: None,
            mix: "mlperf-hpc".into(),
            systems: vec!["dgx-a100".into(), "dgx-h100".into()],
            budget: None,
            objective: Objective::Time,
            kernel_model: KernelModel::Transfer,
            compute_efficiency: 1.0,
            memory_efficiency: 1.0,
            provenance: "test".into(),
        })
        .unwrap();
        let ranks: Vec<Option<usize>> = p.candidates.iter().map(|c| c.rank).collect();
        assert_eq!(ranks, [Some(1), Some(2)]);
        assert_eq!(
            p.candidates[0].name, "dgx-h100",
            "the newer machine is faster"
        );
        let ranking = &p.report.sections[0];
        assert_eq!(ranking.tables[0].raw.rows.len(), 2);
        assert!(
            ranking
                .paragraphs
                .iter()
                .any(|t| t.starts_with("#1 dgx-h100"))
        );
        // Issue 41: each candidate under the default stack and the tuned one, side by side;
        // the tuned stack's mix is the faster.
        assert_eq!(p.software.len(), 2);
        for r in &p.software {
            assert_eq!(
                (r.stack.as_str(), r.tuned.as_str()),
                ("pytorch-eager", "tuned")
            );
            let (a, b) = (r.mix_time_s.unwrap(), r.tuned_mix_time_s.unwrap());
            assert!(b < a, "{r:?}");
            assert!((r.speedup.unwrap() - a / b).abs() < 1e-12);
        }
        let at = |name: &str| p.candidates.iter().find(|c| c.name == name).unwrap();
        assert_eq!(
            p.software[0].mix_time_s,
            at(&p.software[0].candidate).mix_time_s
        );
        assert_eq!(
            p.report.sections[1].heading,
            "Software: the same candidates under a tuned stack"
        );
        insta::assert_snapshot!(outline(&p.report));
    }

    #[test]
    fn a_candidate_given_twice_is_an_error() {
        let err = procurement(&ProcurementRequest {
            stack: None,
            mix: "mlperf-hpc".into(),
            systems: vec!["dgx-a100".into(), "dgx-a100".into()],
            budget: None,
            objective: Objective::Time,
            kernel_model: KernelModel::Ideal,
            compute_efficiency: 1.0,
            memory_efficiency: 1.0,
            provenance: "test".into(),
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("candidate `dgx-a100` is given twice"), "{err}");
    }

    #[test]
    fn the_workload_report_covers_prediction_memory_roofline_batches_and_scaling() {
        let (report, p) = workload(&WorkloadReportRequest {
            workload: WorkloadSpec {
                name: "cosmoflow".into(),
                ..WorkloadSpec::default()
            },
            system: "dgx-a100".into(),
            scenario: ScenarioSpec {
                kernel_model: KernelModel::Ideal,
                compute_efficiency: 0.5,
                memory_efficiency: 0.5,
                ..ScenarioSpec::default()
            },
            precision: Precision::AmpFp16,
            nodes: 4,
            batch: 8,
            provenance: "test".into(),
        })
        .unwrap();
        assert_eq!((p.outcome.nodes, p.outcome.local_batch), (4, 8));
        assert!(
            report.intro[0].contains("50 % compute"),
            "{}",
            report.intro[0]
        );
        insta::assert_snapshot!(outline(&report));
    }
}
