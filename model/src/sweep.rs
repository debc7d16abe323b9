//! Sweeps: every combination of systems, precisions, local batch sizes and node counts,
//! evaluated in parallel (rayon), the best K kept by an objective, infeasible
//! configurations counted by reason.
//!
//! What does not depend on the node count is computed once per (system, precision, batch)
//! ([`Plan`]: the per-layer roofline over flat arrays); the node loop is plain arithmetic
//! ([`Plan::evaluate`]). That is what makes millions of evaluations per second possible.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use rayon::prelude::*;
use serde::Serialize;

use crate::collective::Fabric;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::precision::Precision;
use crate::predict::{Outcome, Plan, Scenario, StepModel};
use crate::system::System;
use crate::units::Joules;

/// What a sweep ranks by (smaller is better).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    /// Time to solution.
    Time,
    /// Price to solution (needs `cluster.price_per_node_hour`).
    Cost,
    /// Energy to solution (needs node power or device TDP).
    Energy,
}

impl FromStr for Objective {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "time" => Ok(Objective::Time),
            "cost" => Ok(Objective::Cost),
            "energy" => Ok(Objective::Energy),
            _ => Err(format!(
                "unknown objective `{s}`; valid: time, cost, energy"
            )),
        }
    }
}

impl fmt::Display for Objective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Objective::Time => "time",
            Objective::Cost => "cost",
            Objective::Energy => "energy",
        })
    }
}

impl Objective {
    /// The value to minimise, if the outcome has it.
    pub fn value(self, o: &Outcome) -> Option<f64> {
        match self {
            Objective::Time => Some(o.time_to_solution_s.value()),
            Objective::Cost => o.cost,
            Objective::Energy => o.energy_j.map(Joules::value),
        }
    }
}

/// What to sweep.
#[derive(Debug, Clone, Copy)]
pub struct SweepSpec<'a> {
    /// Candidate systems.
    pub systems: &'a [System],
    /// The workload's step model at each precision (and software stack) to try.
    pub models: &'a [StepModel],
    /// The data set.
    pub dataset: &'a Dataset,
    /// Input elements the data set's sample size refers to.
    pub reference_input_elements: u64,
    /// Everything else (its node count is ignored).
    pub scenario: &'a Scenario,
    /// Node counts.
    pub nodes: &'a [u32],
    /// Local batch sizes.
    pub batches: &'a [u64],
    /// Ranking.
    pub objective: Objective,
    /// How many of the best to keep.
    pub top: usize,
    /// Whether to keep every feasible configuration (for writing the full table).
    pub keep_all: bool,
}

/// One evaluated configuration.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Candidate {
    /// Index into the sweep's systems.
    #[serde(skip)]
    pub system_index: usize,
    /// Precision.
    pub precision: Precision,
    /// Index into the sweep's step models (its stack: [`SweepResult::stacks`]).
    #[serde(skip)]
    pub model_index: usize,
    /// The prediction.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// A sweep's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepResult {
    /// Configurations evaluated (feasible or not).
    pub evaluated: u64,
    /// Configurations that can run and fit.
    pub feasible: u64,
    /// Configurations that cannot.
    pub infeasible: u64,
    /// Infeasible configurations by reason.
    pub infeasible_by_reason: BTreeMap<&'static str, u64>,
    /// Wall time of the sweep.
    pub elapsed_s: f64,
    /// evaluated / elapsed.
    pub evaluations_per_s: f64,
    /// The objective.
    pub objective: Objective,
    /// Names of the systems, for `Candidate::system_index`.
    pub systems: Vec<String>,
    /// The software stack of each step model, for `Candidate::model_index`.
    pub stacks: Vec<String>,
    /// The best, best first.
    pub top: Vec<Candidate>,
    /// Every feasible configuration, when asked for.
    #[serde(skip)]
    pub all: Vec<Candidate>,
}

/// Counts and best candidates of part of a sweep.
#[derive(Debug, Default)]
struct Partial {
    evaluated: u64,
    feasible: u64,
    infeasible: BTreeMap<&'static str, u64>,
    top: Vec<(f64, Candidate)>,
    all: Vec<Candidate>,
}

impl Partial {
    fn reject(&mut self, reason: &'static str, count: u64) {
        self.evaluated += count;
        *self.infeasible.entry(reason).or_insert(0) += count;
    }

    fn merge(mut self, other: Partial, k: usize) -> Partial {
        self.evaluated += other.evaluated;
        self.feasible += other.feasible;
        for (reason, n) in other.infeasible {
            *self.infeasible.entry(reason).or_insert(0) += n;
        }
        self.top.extend(other.top);
        keep_best(&mut self.top, k);
        self.all.extend(other.all);
        self
    }
}

fn keep_best(top: &mut Vec<(f64, Candidate)>, k: usize) {
    top.sort_by(|a, b| a.0.total_cmp(&b.0));
    top.truncate(k);
}

/// Runs a sweep. `progress` is called with the number of configurations each finished
/// task evaluated.
pub fn sweep(spec: SweepSpec<'_>, progress: &(dyn Fn(u64) + Sync)) -> Result<SweepResult> {
    if spec.systems.is_empty()
        || spec.models.is_empty()
        || spec.nodes.is_empty()
        || spec.batches.is_empty()
    {
        return Err(Error::argument(
            "sweep",
            "",
            "give at least one system, precision, node count and batch",
        ));
    }
    for s in spec.systems {
        let missing = match spec.objective {
            Objective::Time => None,
            Objective::Cost => s
                .cluster
                .price_per_node_hour
                .is_none()
                .then_some("cluster.price_per_node_hour"),
            Objective::Energy => (s.node.power_w.is_none() && s.device.tdp_w.is_none())
                .then_some("node.power_w (or the device's power.tdp_w)"),
        };
        if let Some(field) = missing {
            return Err(Error::argument(
                "objective",
                spec.objective,
                format!(
                    "system `{}` has no {field}, so it cannot be ranked by {}",
                    s.name, spec.objective
                ),
            ));
        }
    }
    let start = Instant::now();
    // The collective fabric per system and node count, built once.
    let fabrics: Vec<Vec<Option<Fabric>>> = spec
        .systems
        .iter()
        .map(|s| spec.nodes.iter().map(|&n| Fabric::of(s, n).ok()).collect())
        .collect();
    let tasks: Vec<(usize, usize, u64)> = (0..spec.systems.len())
        .flat_map(|s| {
            (0..spec.models.len()).flat_map(move |m| spec.batches.iter().map(move |&b| (s, m, b)))
        })
        .collect();
    let per_task = spec.nodes.len() as u64;
    let k = spec.top.max(1);
    let total = tasks
        .par_iter()
        .map(|&(s, m, batch)| {
            let mut part = Partial::default();
            let system = &spec.systems[s];
            let model = &spec.models[m];
            match Plan::new(
                model,
                system,
                spec.dataset,
                spec.reference_input_elements,
                spec.scenario,
                batch,
            ) {
                Err(Error::UnsupportedPrecision { .. }) => {
                    part.reject("precision not supported by the device", per_task)
                }
                Err(_) => part.reject("cannot plan on this system", per_task),
                Ok(plan) if plan.memory > plan.capacity => {
                    part.reject("does not fit in device memory", per_task)
                }
                Ok(plan) => {
                    for (i, &n) in spec.nodes.iter().enumerate() {
                        let Some(fabric) = &fabrics[s][i] else {
                            part.reject("no network for several nodes", 1);
                            continue;
                        };
                        match plan.evaluate(n, fabric) {
                            Err(e) => part.reject(e.kind(), 1),
                            Ok(outcome) => {
                                part.evaluated += 1;
                                part.feasible += 1;
                                let candidate = Candidate {
                                    system_index: s,
                                    precision: model.precision(),
                                    model_index: m,
                                    outcome,
                                };
                                if let Some(v) = spec.objective.value(&outcome)
                                    && (part.top.len() < k
                                        || v < part.top.last().map_or(f64::INFINITY, |t| t.0))
                                {
                                    part.top.push((v, candidate));
                                    keep_best(&mut part.top, k);
                                }
                                if spec.keep_all {
                                    part.all.push(candidate);
                                }
                            }
                        }
                    }
                }
            }
            progress(per_task);
            part
        })
        .reduce(Partial::default, |a, b| a.merge(b, k));
    let elapsed = start.elapsed().as_secs_f64();
    Ok(SweepResult {
        evaluated: total.evaluated,
        feasible: total.feasible,
        infeasible: total.evaluated - total.feasible,
        infeasible_by_reason: total.infeasible,
        elapsed_s: elapsed,
        evaluations_per_s: total.evaluated as f64 / elapsed.max(1e-9),
        objective: spec.objective,
        systems: spec.systems.iter().map(|s| s.name.clone()).collect(),
        stacks: spec
            .models
            .iter()
            .map(|m| m.effects().stack.clone())
            .collect(),
        top: total.top.into_iter().map(|(_, c)| c).collect(),
        all: total.all,
    })
}
