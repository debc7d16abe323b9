//! Scaling series: strong and weak scaling over node counts (\[003\] §4, \[004\] §VI),
//! ensembles of independent base models (\[002\]: system scale = M models x P devices), and
//! problem-size scaling over input size and width (\[000\]).
//!
//! Every row is a full [`Outcome`]; a configuration that cannot run (a global batch the
//! devices cannot divide, more nodes than the system has, a batch outside the convergence
//! data) is a row with its reason, not an error, so a series shows where it stops.

use serde::Serialize;

use crate::collective::Fabric;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::memory::Optimizer;
use crate::predict::{Inputs, Outcome, Plan, Scenario, StepModel};
use crate::workloads::BuildOptions;

/// One point of a series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleRow {
    /// Nodes per job (per base model for ensembles).
    pub nodes: u32,
    /// Base models (ensembles), 1 otherwise.
    pub models: u32,
    /// Local batch per device.
    pub local_batch: u64,
    /// Input spatial size (problem-size series).
    pub input_size: Option<Vec<usize>>,
    /// Width multiplier (problem-size series).
    pub width: Option<f64>,
    /// Parameters of the model (problem-size series).
    pub params: Option<u64>,
    /// Training FLOPs per sample (problem-size series).
    pub flops_per_sample: Option<f64>,
    /// The prediction, when the configuration can run.
    pub outcome: Option<Outcome>,
    /// Why it cannot run.
    pub infeasible: Option<String>,
    /// Samples per second of the whole row (all base models of an ensemble).
    pub throughput: Option<f64>,
    /// Relative to the first row that runs: time-to-solution ratio (strong), throughput
    /// ratio (weak, ensemble).
    pub speedup: Option<f64>,
    /// Speedup per unit of added resources.
    pub efficiency: Option<f64>,
}

/// A series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScaleSeries {
    /// `strong`, `weak`, `ensemble` or `problem-size`.
    pub mode: &'static str,
    /// Workload.
    pub workload: String,
    /// System.
    pub system: String,
    /// The rows.
    pub rows: Vec<ScaleRow>,
}

fn row(nodes: u32, models: u32, local_batch: u64) -> ScaleRow {
    ScaleRow {
        nodes,
        models,
        local_batch,
        input_size: None,
        width: None,
        params: None,
        flops_per_sample: None,
        outcome: None,
        infeasible: None,
        throughput: None,
        speedup: None,
        efficiency: None,
    }
}

/// Evaluates one job of `nodes` nodes at `batch`, `total_nodes` sharing storage.
fn run(
    inputs: Inputs<'_>,
    scenario: &Scenario,
    nodes: u32,
    total_nodes: u32,
    batch: u64,
) -> Result<std::result::Result<Outcome, String>> {
    let mut s = scenario.clone();
    s.nodes = nodes;
    let plan = Plan::new(
        inputs.model,
        inputs.system,
        inputs.dataset,
        inputs.reference_input_elements,
        &s,
        batch,
    )?;
    let fabric = match Fabric::of(inputs.system, nodes) {
        Ok(f) => f,
        Err(e) => return Ok(Err(e.to_string())),
    };
    Ok(plan
        .evaluate_sharing(nodes, total_nodes, &fabric)
        .map_err(|e| e.to_string()))
}

/// Fills speedup and efficiency from `metric` (bigger is better) and `resources`.
fn relate(
    rows: &mut [ScaleRow],
    metric: impl Fn(&ScaleRow) -> Option<f64>,
    resources: impl Fn(&ScaleRow) -> f64,
) {
    let Some(reference) = rows.iter().find(|r| r.outcome.is_some()) else {
        return;
    };
    let (m0, r0) = (metric(reference), resources(reference));
    for r in rows.iter_mut() {
        if let (Some(m), Some(m0)) = (metric(r), m0) {
            let speedup = m / m0;
            r.speedup = Some(speedup);
            r.efficiency = Some(speedup * r0 / resources(r));
        }
    }
}

fn check_nodes(nodes: &[u32]) -> Result<()> {
    if nodes.is_empty() || nodes.contains(&0) {
        return Err(Error::argument(
            "nodes",
            format!("{nodes:?}"),
            "give one or more node counts, each at least 1",
        ));
    }
    Ok(())
}

/// Strong scaling: a fixed global batch split over more nodes.
pub fn strong(
    inputs: Inputs<'_>,
    scenario: &Scenario,
    global_batch: u64,
    nodes: &[u32],
) -> Result<ScaleSeries> {
    check_nodes(nodes)?;
    let k = u64::from(inputs.system.node.devices.value);
    let mut rows = Vec::new();
    for &n in nodes {
        let devices = k * u64::from(n);
        let mut r = row(n, 1, global_batch / devices);
        if !global_batch.is_multiple_of(devices) || global_batch < devices {
            r.infeasible = Some(format!(
                "global batch {global_batch} does not divide over {devices} devices"
            ));
        } else {
            match run(inputs, scenario, n, n, global_batch / devices)? {
                Ok(o) => {
                    r.throughput = Some(o.samples_per_s.value());
                    r.outcome = Some(o);
                }
                Err(e) => r.infeasible = Some(e),
            }
        }
        rows.push(r);
    }
    relate(
        &mut rows,
        |r| r.outcome.map(|o| 1.0 / o.time_to_solution_s.value()),
        |r| f64::from(r.nodes),
    );
    Ok(ScaleSeries {
        mode: "strong",
        workload: inputs.model.workload().to_owned(),
        system: inputs.system.name.clone(),
        rows,
    })
}

/// Weak scaling: a fixed local batch on more nodes (the global batch, and so the epochs,
/// grow with them).
pub fn weak(
    inputs: Inputs<'_>,
    scenario: &Scenario,
    local_batch: u64,
    nodes: &[u32],
) -> Result<ScaleSeries> {
    check_nodes(nodes)?;
    let mut rows = Vec::new();
    for &n in nodes {
        let mut r = row(n, 1, local_batch);
        match run(inputs, scenario, n, n, local_batch)? {
            Ok(o) => {
                r.throughput = Some(o.samples_per_s.value());
                r.outcome = Some(o);
            }
            Err(e) => r.infeasible = Some(e),
        }
        rows.push(r);
    }
    relate(&mut rows, |r| r.throughput, |r| f64::from(r.nodes));
    Ok(ScaleSeries {
        mode: "weak",
        workload: inputs.model.workload().to_owned(),
        system: inputs.system.name.clone(),
        rows,
    })
}

/// Ensembles (\[002\]): `models` base models of `nodes_per_model` nodes each, trained
/// independently (no synchronisation between them) and sharing the parallel file system.
pub fn ensemble(
    inputs: Inputs<'_>,
    scenario: &Scenario,
    local_batch: u64,
    nodes_per_model: u32,
    models: &[u32],
) -> Result<ScaleSeries> {
    check_nodes(&[nodes_per_model])?;
    if models.is_empty() || models.contains(&0) {
        return Err(Error::argument(
            "models",
            format!("{models:?}"),
            "give one or more model counts, each at least 1",
        ));
    }
    let mut rows = Vec::new();
    for &m in models {
        let mut r = row(nodes_per_model, m, local_batch);
        let total = nodes_per_model.saturating_mul(m);
        match run(inputs, scenario, nodes_per_model, total, local_batch)? {
            Ok(o) => {
                r.throughput = Some(o.samples_per_s.value() * f64::from(m));
                r.outcome = Some(o);
            }
            Err(e) => r.infeasible = Some(e),
        }
        rows.push(r);
    }
    relate(&mut rows, |r| r.throughput, |r| f64::from(r.models));
    Ok(ScaleSeries {
        mode: "ensemble",
        workload: inputs.model.workload().to_owned(),
        system: inputs.system.name.clone(),
        rows,
    })
}

/// Problem-size scaling (\[000\]): the workload rebuilt at each input size and width, at a
/// fixed local batch and node count, under software `stack`. `build` makes the graph for
/// given options.
#[allow(clippy::too_many_arguments)]
pub fn problem_size(
    build: &dyn Fn(&BuildOptions) -> Result<Graph>,
    inputs: Inputs<'_>,
    scenario: &Scenario,
    optimizer: Optimizer,
    stack: &crate::stack::Stack,
    sizes: &[Option<Vec<usize>>],
    widths: &[f64],
    local_batch: u64,
) -> Result<ScaleSeries> {
    let mut rows = Vec::new();
    for size in sizes {
        for &width in widths {
            let options = BuildOptions {
                input_size: size.clone(),
                width,
            };
            let graph = build(&options)?;
            let model = StepModel::with_stack(&graph, inputs.model.precision(), optimizer, stack);
            let scaled = Inputs {
                model: &model,
                ..inputs
            };
            let mut r = row(scenario.nodes, 1, local_batch);
            r.input_size = Some(graph.input_shape().spatial().to_vec());
            r.width = Some(width);
            r.params = Some(model.params);
            r.flops_per_sample = Some(model.flops_per_sample);
            match run(
                scaled,
                scenario,
                scenario.nodes,
                scenario.nodes,
                local_batch,
            )? {
                Ok(o) => {
                    r.throughput = Some(o.samples_per_s.value());
                    r.outcome = Some(o);
                }
                Err(e) => r.infeasible = Some(e),
            }
            rows.push(r);
        }
    }
    Ok(ScaleSeries {
        mode: "problem-size",
        workload: inputs.model.workload().to_owned(),
        system: inputs.system.name.clone(),
        rows,
    })
}
