//! Procurement: candidate systems ([`Offer`]s) compared on a workload [`Mix`].
//!
//! An offer is a datasheet system bought at some node count, with a purchase price per
//! node, the node's power, the machine's lifetime and the price of electricity. It becomes a
//! [`System`] whose hourly price per node is its total cost of ownership
//! (`price / lifetime hours + power x electricity price`), so that the prediction's cost to
//! solution is what the solution costs the buyer. With a budget, the node count is what the
//! budget buys.
//!
//! For each workload of the mix, [`evaluate`] tries every batch size the mix allows on
//! every power-of-two node count up to the whole machine (and the whole machine), keeps the
//! fastest time to solution that fits, and reports its bottleneck, the largest batch per
//! device, and the storage and network bandwidth the workload needs to stay compute-bound
//! (input bytes per step and the ring allreduce's bytes per node over the step's compute
//! time) against what the system has. [`rank`] weighs the workloads (weight = training
//! runs per mix, run one after another on the machine) and orders the candidates by time,
//! cost or energy per mix, with the reasons.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::parse_toml;
use crate::error::{Error, Result};
use crate::memory::Optimizer;
use crate::precision::Precision;
use crate::predict::{self, Inputs, Prediction, Scenario, StepBound};
use crate::sweep::Objective;
use crate::system::{RawSourced, Sourced, System};
use crate::units::{ByteRate, Joules};

/// Hours in a year (365.25 days).
pub const HOURS_PER_YEAR: f64 = 8766.0;

/// One workload of a mix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MixEntry {
    /// Built-in workload name or workload file (relative to the mix file).
    pub workload: String,
    /// Training runs of this workload per mix.
    pub weight: f64,
    /// Precision it trains in.
    pub precision: Precision,
    /// Local batch sizes per device to consider.
    pub batches: Vec<u64>,
    /// Optimizer (its state counts in memory and update time).
    pub optimizer: Optimizer,
    /// Fixed epochs to solution, with a source (else the convergence curve).
    pub epochs: Option<Sourced<f64>>,
    /// Data set / convergence file (relative to the mix file), else the shipped one.
    pub data: Option<String>,
}

/// A workload mix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mix {
    /// Name.
    pub name: String,
    /// What it represents.
    pub description: Option<String>,
    /// Workloads.
    pub workloads: Vec<MixEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMix {
    name: String,
    description: Option<String>,
    #[serde(default)]
    sources: BTreeMap<String, String>,
    #[serde(default)]
    workload: Vec<RawEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    name: String,
    weight: f64,
    precision: String,
    batches: Vec<u64>,
    optimizer: Option<String>,
    epochs: Option<RawSourced<f64>>,
    data: Option<String>,
}

/// Resolves a `source` key against a file's `[sources]` table.
fn cite(sources: &BTreeMap<String, String>, file: &str, field: &str, key: &str) -> Result<String> {
    sources.get(key).cloned().ok_or_else(|| {
        Error::invalid(
            file,
            format!("{field}.source"),
            format!("`{key}` is not a key of the [sources] table; add it with a citation"),
        )
    })
}

fn positive(file: &str, field: &str, v: f64, what: &str) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            file,
            field,
            format!("{v}: {what} must be a positive number"),
        ))
    }
}

/// Parses a mix file.
pub fn parse_mix(text: &str, file: &str) -> Result<Mix> {
    let raw: RawMix = parse_toml(text, file)?;
    if raw.workload.is_empty() {
        return Err(Error::invalid(
            file,
            "workload",
            "no [[workload]] entries; add one per workload of the mix",
        ));
    }
    let mut workloads = Vec::with_capacity(raw.workload.len());
    for (i, w) in raw.workload.iter().enumerate() {
        let field = |f: &str| format!("workload[{i}].{f}");
        positive(
            file,
            &field("weight"),
            w.weight,
            "the weight (runs per mix)",
        )?;
        let precision = w
            .precision
            .parse::<Precision>()
            .map_err(|e| Error::invalid(file, field("precision"), e.to_string()))?;
        if w.batches.is_empty() || w.batches.contains(&0) {
            return Err(Error::invalid(
                file,
                field("batches"),
                "give one or more local batch sizes of at least 1, e.g. [1, 2, 4, 8]",
            ));
        }
        let epochs = match &w.epochs {
            None => None,
            Some(e) => {
                positive(file, &field("epochs.value"), e.value, "epochs")?;
                Some(Sourced {
                    value: e.value,
                    source: cite(&raw.sources, file, &field("epochs"), &e.source)?,
                })
            }
        };
        let optimizer = match &w.optimizer {
            None => Optimizer::SgdMomentum,
            Some(o) => o
                .parse::<Optimizer>()
                .map_err(|e| Error::invalid(file, field("optimizer"), e))?,
        };
        let mut batches = w.batches.clone();
        batches.sort_unstable();
        batches.dedup();
        workloads.push(MixEntry {
            workload: w.name.clone(),
            weight: w.weight,
            precision,
            batches,
            optimizer,
            epochs,
            data: w.data.clone(),
        });
    }
    Ok(Mix {
        name: raw.name,
        description: raw.description,
        workloads,
    })
}

/// A candidate system: a datasheet system at a node count, with its price and power.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Offer {
    /// Name.
    pub name: String,
    /// What it is.
    pub description: Option<String>,
    /// The datasheet system (catalog name or file relative to the offer file).
    pub system: String,
    /// Nodes offered.
    pub nodes: Sourced<u32>,
    /// Purchase price of one node (any currency, the same for every offer compared).
    pub price_per_node: Option<Sourced<f64>>,
    /// Power of one node under load, watts (else the system's node power or device TDP).
    pub node_power_w: Option<Sourced<f64>>,
    /// Years the machine is used (amortises the price).
    pub lifetime_years: Option<Sourced<f64>>,
    /// Price of a kilowatt-hour.
    pub electricity_per_kwh: Option<Sourced<f64>>,
    /// Bandwidth of the parallel file system the machine reads its data from (a site's
    /// existing one, or one in the offer), bytes/s; replaces the system's.
    pub pfs_bandwidth: Option<Sourced<ByteRate>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOffer {
    name: String,
    description: Option<String>,
    #[serde(default)]
    sources: BTreeMap<String, String>,
    system: String,
    nodes: RawSourced<u32>,
    price_per_node: Option<RawSourced<f64>>,
    node_power_w: Option<RawSourced<f64>>,
    lifetime_years: Option<RawSourced<f64>>,
    electricity_per_kwh: Option<RawSourced<f64>>,
    pfs_bandwidth_gbs: Option<RawSourced<f64>>,
}

/// Parses an offer (candidate system) file.
pub fn parse_offer(text: &str, file: &str) -> Result<Offer> {
    let raw: RawOffer = parse_toml(text, file)?;
    let number = |field: &str, v: &Option<RawSourced<f64>>, what: &str| -> Result<_> {
        match v {
            None => Ok(None),
            Some(v) => {
                positive(file, &format!("{field}.value"), v.value, what)?;
                Ok(Some(Sourced {
                    value: v.value,
                    source: cite(&raw.sources, file, field, &v.source)?,
                }))
            }
        }
    };
    if raw.nodes.value == 0 {
        return Err(Error::invalid(file, "nodes.value", "0: must be at least 1"));
    }
    let offer = Offer {
        name: raw.name.clone(),
        description: raw.description.clone(),
        system: raw.system.clone(),
        nodes: Sourced {
            value: raw.nodes.value,
            source: cite(&raw.sources, file, "nodes", &raw.nodes.source)?,
        },
        price_per_node: number("price_per_node", &raw.price_per_node, "the price")?,
        node_power_w: number("node_power_w", &raw.node_power_w, "the power")?,
        lifetime_years: number("lifetime_years", &raw.lifetime_years, "the lifetime")?,
        electricity_per_kwh: number(
            "electricity_per_kwh",
            &raw.electricity_per_kwh,
            "the electricity price",
        )?,
        pfs_bandwidth: number("pfs_bandwidth_gbs", &raw.pfs_bandwidth_gbs, "the bandwidth")?.map(
            |b| Sourced {
                value: ByteRate::from_gbs(b.value),
                source: b.source,
            },
        ),
    };
    if offer.price_per_node.is_some() && offer.lifetime_years.is_none() {
        return Err(Error::invalid(
            file,
            "lifetime_years",
            "missing: a price needs the years it is amortised over, e.g. \
             lifetime_years = { value = 5.0, source = \"...\" }",
        ));
    }
    Ok(offer)
}

impl Offer {
    /// The nodes bought: the offer's count, or what `budget` buys at the node price.
    pub fn nodes_for(&self, budget: Option<f64>) -> Result<u32> {
        let Some(budget) = budget else {
            return Ok(self.nodes.value);
        };
        let price = self
            .price_per_node
            .as_ref()
            .ok_or_else(|| Error::Argument {
                name: "--budget",
                value: budget.to_string(),
                message: format!(
                    "candidate `{}` has no price_per_node; add one to compare at a budget",
                    self.name
                ),
            })?;
        let nodes = (budget / price.value).floor();
        if nodes < 1.0 {
            return Err(Error::Argument {
                name: "--budget",
                value: budget.to_string(),
                message: format!(
                    "buys no node of `{}` (one costs {})",
                    self.name, price.value
                ),
            });
        }
        Ok(nodes.min(f64::from(u32::MAX)) as u32)
    }

    /// Node power: the offer's, else the system's, else the devices' TDP.
    pub fn node_power(&self, system: &System) -> Option<f64> {
        self.node_power_w
            .as_ref()
            .or(system.node.power_w.as_ref())
            .map(|p| p.value)
            .or_else(|| {
                let k = f64::from(system.node.devices.value);
                system.device.tdp_w.as_ref().map(|t| t.value * k)
            })
    }

    /// Total cost of ownership of one node-hour: the price spread over the lifetime plus
    /// the electricity the node draws (when the offer gives its price).
    pub fn price_per_node_hour(&self, system: &System) -> Option<f64> {
        let capital = self
            .price_per_node
            .as_ref()
            .zip(self.lifetime_years.as_ref())
            .map(|(p, y)| p.value / (y.value * HOURS_PER_YEAR))?;
        let energy = match (&self.electricity_per_kwh, self.node_power(system)) {
            (Some(e), Some(w)) => e.value * w / 1000.0,
            _ => 0.0,
        };
        Some(capital + energy)
    }

    /// The datasheet system as this offer: renamed, at `nodes`, with the offer's power and
    /// its total cost of ownership as the price per node-hour.
    pub fn apply(&self, mut system: System, nodes: u32) -> System {
        let source = format!("candidate `{}`", self.name);
        let price = self.price_per_node_hour(&system);
        if let Some(p) = &self.node_power_w {
            system.node.power_w = Some(p.clone());
        }
        if let Some(b) = &self.pfs_bandwidth {
            system.cluster.pfs_bandwidth = Some(b.clone());
        }
        system.cluster.price_per_node_hour = price.map(|value| Sourced {
            value,
            source: format!("{source}: price / lifetime + power x electricity"),
        });
        system.cluster.nodes = Sourced {
            value: nodes,
            source,
        };
        system.name = self.name.clone();
        system
    }
}

/// The best configuration at one node count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScalePoint {
    /// Nodes.
    pub nodes: u32,
    /// Local batch of the fastest configuration.
    pub local_batch: u64,
    /// Its time to solution.
    pub time_to_solution_s: f64,
}

/// How one workload fares on one candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadOutcome {
    /// Workload.
    pub workload: String,
    /// Runs per mix.
    pub weight: f64,
    /// The fastest configuration that fits, if any.
    pub best: Option<Prediction>,
    /// Why none runs, when none does.
    pub infeasible: Option<String>,
    /// The largest local batch that fits one device's memory.
    pub largest_batch: u64,
    /// The fastest time to solution per node count.
    pub scaling: Vec<ScalePoint>,
    /// Input bandwidth the best configuration needs to stay compute-bound, bytes/s (all
    /// nodes together).
    pub storage_needed_bytes_per_s: Option<f64>,
    /// The parallel file system's bandwidth, bytes/s.
    pub storage_available_bytes_per_s: Option<f64>,
    /// Network bandwidth per node the allreduce needs to fit in the compute time, bytes/s.
    pub network_needed_bytes_per_s: Option<f64>,
    /// The node's network bandwidth (all NICs), bytes/s.
    pub network_available_bytes_per_s: Option<f64>,
}

/// Node counts tried on a machine of `max` nodes: powers of two, and `max`.
pub fn node_counts(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = std::iter::successors(Some(1u32), |n| n.checked_mul(2))
        .take_while(|&n| n <= max)
        .collect();
    if v.last() != Some(&max) {
        v.push(max);
    }
    v
}

/// Evaluates mix entry `entry` (its batches, weight and name) on the (offer-applied)
/// system of `inputs`, at every node count up to the whole machine, in `scenario`.
pub fn evaluate(inputs: Inputs<'_>, scenario: &Scenario, entry: &MixEntry) -> WorkloadOutcome {
    let system = inputs.system;
    let mut best: Option<Prediction> = None;
    let mut last_error: Option<String> = None;
    let mut scaling = Vec::new();
    for nodes in node_counts(system.cluster.nodes.value) {
        let scenario = Scenario {
            nodes,
            ..scenario.clone()
        };
        let mut at_nodes: Option<ScalePoint> = None;
        for &batch in &entry.batches {
            match predict::predict(inputs, &scenario, batch) {
                Ok(p) if p.outcome.fits => {
                    let t = p.outcome.time_to_solution_s;
                    if at_nodes.is_none_or(|a| t.value() < a.time_to_solution_s) {
                        at_nodes = Some(ScalePoint {
                            nodes,
                            local_batch: batch,
                            time_to_solution_s: t.value(),
                        });
                    }
                    if best
                        .as_ref()
                        .is_none_or(|b| t < b.outcome.time_to_solution_s)
                    {
                        best = Some(p);
                    }
                }
                Ok(p) => {
                    last_error = Some(format!(
                        "on {nodes} nodes, batch {batch} needs {:.1} GB per device, which has \
                         {:.1} GB",
                        p.outcome.memory_per_device_bytes.value() / 1e9,
                        p.device_memory_bytes / 1e9
                    ));
                }
                Err(e) => last_error = Some(format!("on {nodes} nodes, {e}")),
            }
        }
        scaling.extend(at_nodes);
    }
    let largest_batch = system
        .device_memory()
        .map_or(0, |c| inputs.model.footprint.max_batch(c.value));
    let node_net = system
        .node
        .nic_bandwidth
        .as_ref()
        .map(|b| b.value.value() * f64::from(system.node.nics.as_ref().map_or(1, |n| n.value)));
    let (storage_needed, network_needed) = match &best {
        Some(p) => {
            let o = &p.outcome;
            let sample = p
                .data_movement
                .iter()
                .find(|m| m.source == "input samples")
                .map(|m| m.bytes_per_sample);
            let storage = sample.map(|s| s * o.global_batch as f64 / o.compute_s.value());
            let n = f64::from(o.nodes);
            let gradients = inputs.model.params as f64 * scenario.gradient_bytes as f64;
            let network =
                (o.nodes > 1).then(|| 2.0 * (n - 1.0) / n * gradients / o.compute_s.value());
            (storage, network)
        }
        None => (None, None),
    };
    WorkloadOutcome {
        workload: entry.workload.clone(),
        weight: entry.weight,
        infeasible: best
            .is_none()
            .then(|| last_error.unwrap_or_else(|| "no configuration was evaluated".to_owned())),
        best,
        largest_batch,
        scaling,
        storage_needed_bytes_per_s: storage_needed,
        storage_available_bytes_per_s: system
            .cluster
            .pfs_bandwidth
            .as_ref()
            .map(|b| b.value.value()),
        network_needed_bytes_per_s: network_needed,
        network_available_bytes_per_s: node_net,
    }
}

/// One candidate's results on the mix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateResult {
    /// Offer name.
    pub name: String,
    /// Datasheet system.
    pub system: String,
    /// Device.
    pub device: String,
    /// Nodes bought.
    pub nodes: u32,
    /// Devices bought.
    pub devices: u64,
    /// Purchase price of all nodes, when priced.
    pub purchase_price: Option<f64>,
    /// Total cost of ownership per node-hour, when priced.
    pub price_per_node_hour: Option<f64>,
    /// Power of the machine, watts.
    pub power_w: Option<f64>,
    /// Per workload.
    pub workloads: Vec<WorkloadOutcome>,
    /// Time to run the mix once (each workload `weight` times), when every workload runs.
    pub mix_time_s: Option<f64>,
    /// Mixes per day: the weighted throughput.
    pub mixes_per_day: Option<f64>,
    /// Cost of one mix, when priced.
    pub cost_per_mix: Option<f64>,
    /// Energy of one mix, joules.
    pub energy_per_mix_j: Option<f64>,
    /// Place in the ranking (1 = best), when ranked.
    pub rank: Option<usize>,
    /// Why it ranks where it does.
    pub reasons: Vec<String>,
}

impl CandidateResult {
    /// Builds the candidate's totals from its workload outcomes.
    pub fn new(offer: &Offer, system: &System, workloads: Vec<WorkloadOutcome>) -> Self {
        let nodes = system.cluster.nodes.value;
        let weighted = |f: &dyn Fn(&Prediction) -> Option<f64>| -> Option<f64> {
            workloads
                .iter()
                .map(|w| w.best.as_ref().and_then(f).map(|v| v * w.weight))
                .sum::<Option<f64>>()
        };
        let mix_time = weighted(&|p| Some(p.outcome.time_to_solution_s.value()));
        CandidateResult {
            name: offer.name.clone(),
            system: offer.system.clone(),
            device: system.device.name.clone(),
            nodes,
            devices: u64::from(nodes) * u64::from(system.node.devices.value),
            purchase_price: offer
                .price_per_node
                .as_ref()
                .map(|p| p.value * f64::from(nodes)),
            price_per_node_hour: system.cluster.price_per_node_hour.as_ref().map(|p| p.value),
            power_w: offer.node_power(system).map(|w| w * f64::from(nodes)),
            mix_time_s: mix_time,
            mixes_per_day: mix_time.map(|t| 86_400.0 / t),
            cost_per_mix: weighted(&|p| p.outcome.cost),
            energy_per_mix_j: weighted(&|p| p.outcome.energy_j.map(Joules::value)),
            workloads,
            rank: None,
            reasons: Vec::new(),
        }
    }

    fn objective(&self, objective: Objective) -> Option<f64> {
        match objective {
            Objective::Time => self.mix_time_s,
            Objective::Cost => self.cost_per_mix,
            Objective::Energy => self.energy_per_mix_j,
        }
    }
}

/// Candidates compared on a mix: each offer at the nodes `budget` buys (its own node count
/// without one), every workload evaluated on it by `evaluate`, ranked by `objective`.
pub fn compare(
    offers: Vec<(Offer, System)>,
    budget: Option<f64>,
    objective: Objective,
    evaluate: impl Fn(&System) -> Vec<WorkloadOutcome>,
) -> Result<Comparison> {
    let mut applied = Vec::with_capacity(offers.len());
    let mut candidates = Vec::with_capacity(offers.len());
    for (offer, base) in offers {
        let nodes = offer.nodes_for(budget)?;
        let system = offer.apply(base, nodes);
        candidates.push(CandidateResult::new(&offer, &system, evaluate(&system)));
        applied.push((offer, system));
    }
    rank(&mut candidates, objective);
    Ok(Comparison {
        offers: applied,
        candidates,
    })
}

/// Candidates compared on a mix ([`compare`]).
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Each offer with its system at the nodes it was compared at, in the offers' order.
    pub offers: Vec<(Offer, System)>,
    /// The candidates' results, ranked.
    pub candidates: Vec<CandidateResult>,
}

/// Orders candidates by `objective` per mix (best first; candidates that cannot run the
/// whole mix, or lack the objective's figure, last) and writes each one's reasons.
pub fn rank(candidates: &mut [CandidateResult], objective: Objective) {
    candidates.sort_by(
        |a, b| match (a.objective(objective), b.objective(objective)) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.name.cmp(&b.name),
        },
    );
    let unit = match objective {
        Objective::Time => "time per mix",
        Objective::Cost => "cost per mix",
        Objective::Energy => "energy per mix",
    };
    let values: Vec<Option<f64>> = candidates.iter().map(|c| c.objective(objective)).collect();
    let names: Vec<String> = candidates.iter().map(|c| c.name.clone()).collect();
    let best_mixes = candidates
        .iter()
        .filter_map(|c| c.mixes_per_day)
        .reduce(f64::max);
    let cheapest = candidates
        .iter()
        .filter_map(|c| c.cost_per_mix)
        .reduce(f64::min);
    let leanest = candidates
        .iter()
        .filter_map(|c| c.energy_per_mix_j)
        .reduce(f64::min);
    for (i, c) in candidates.iter_mut().enumerate() {
        c.rank = values[i].map(|_| i + 1);
        let mut reasons = Vec::new();
        match values[i] {
            None => {
                let missing: Vec<&str> = c
                    .workloads
                    .iter()
                    .filter(|w| w.best.is_none())
                    .map(|w| w.workload.as_str())
                    .collect();
                if missing.is_empty() {
                    reasons.push(format!(
                        "not ranked: no {unit} (the offer lacks price or power)"
                    ));
                } else {
                    reasons.push(format!("not ranked: cannot run {}", missing.join(", ")));
                }
            }
            Some(v) => {
                if let Some(next) = values.get(i + 1).copied().flatten() {
                    reasons.push(format!(
                        "{unit} {:.2}x lower than #{} `{}`",
                        next / v,
                        i + 2,
                        names[i + 1]
                    ));
                }
                if i > 0
                    && let Some(prev) = values[i - 1]
                {
                    reasons.push(format!(
                        "{unit} {:.2}x that of #{} `{}`",
                        v / prev,
                        i,
                        names[i - 1]
                    ));
                }
            }
        }
        if let (Some(m), Some(best)) = (c.mixes_per_day, best_mixes) {
            reasons.push(format!(
                "{m:.2} mixes per day ({:.0} % of the fastest candidate)",
                100.0 * m / best
            ));
        }
        if let (Some(v), Some(low)) = (c.cost_per_mix, cheapest) {
            reasons.push(format!(
                "cost per mix {v:.2} ({:.0} % of the cheapest)",
                100.0 * v / low
            ));
        }
        if let (Some(v), Some(low)) = (c.energy_per_mix_j, leanest) {
            reasons.push(format!(
                "energy per mix {:.1} kWh ({:.0} % of the least)",
                v / 3.6e6,
                100.0 * v / low
            ));
        }
        for w in &c.workloads {
            let Some(p) = &w.best else {
                if let Some(why) = &w.infeasible {
                    reasons.push(format!("{} does not run: {why}", w.workload));
                }
                continue;
            };
            let o = &p.outcome;
            match o.bound {
                StepBound::Compute => {}
                StepBound::Input => reasons.push(format!(
                    "{} is input-bound at its best configuration ({} nodes, batch {}): it needs \
                     {:.0} GB/s of input{}",
                    w.workload,
                    o.nodes,
                    o.local_batch,
                    w.storage_needed_bytes_per_s.unwrap_or(0.0) / 1e9,
                    w.storage_available_bytes_per_s
                        .map(|a| format!(", the file system gives {:.0} GB/s", a / 1e9))
                        .unwrap_or_default()
                )),
                StepBound::Allreduce => reasons.push(format!(
                    "{} is {}-bound at its best configuration ({} nodes): it needs {:.1} GB/s \
                     per node{}",
                    w.workload,
                    o.bound.name(),
                    o.nodes,
                    w.network_needed_bytes_per_s.unwrap_or(0.0) / 1e9,
                    w.network_available_bytes_per_s
                        .map(|a| format!(", the node has {:.1} GB/s", a / 1e9))
                        .unwrap_or_default()
                )),
            }
            if o.nodes < c.nodes {
                reasons.push(format!(
                    "{} is fastest on {} of {} nodes (its convergence curve penalises larger \
                     global batches, or more nodes do not pay off)",
                    w.workload, o.nodes, c.nodes
                ));
            }
        }
        c.reasons = reasons;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::predict::{Epochs, StepModel};
    use crate::workloads::{self, BuildOptions};

    const OFFER: &str = r#"
name = "h100-pod"
system = "dgx-h100"
nodes = { value = 16, source = "q" }
price_per_node = { value = 400000.0, source = "q" }
node_power_w = { value = 10000.0, source = "q" }
lifetime_years = { value = 5.0, source = "q" }
electricity_per_kwh = { value = 0.2, source = "q" }
pfs_bandwidth_gbs = { value = 1000.0, source = "q" }
[sources]
q = "test quote"
"#;

    #[test]
    fn offer_prices_a_node_hour_as_total_cost_of_ownership() {
        let offer = parse_offer(OFFER, "o.toml").unwrap();
        let system = catalog::system("dgx-h100").unwrap();
        let hourly = offer.price_per_node_hour(&system).unwrap();
        let want = 400_000.0 / (5.0 * HOURS_PER_YEAR) + 10.0 * 0.2;
        assert!((hourly - want).abs() < 1e-9, "{hourly} vs {want}");
        let applied = offer.apply(system, 12);
        assert_eq!(applied.cluster.nodes.value, 12);
        assert_eq!(applied.name, "h100-pod");
        assert_eq!(applied.node.power_w.as_ref().unwrap().value, 10_000.0);
        assert_eq!(offer.nodes_for(None).unwrap(), 16);
        assert_eq!(offer.nodes_for(Some(1_000_000.0)).unwrap(), 2);
        assert!(
            offer
                .nodes_for(Some(100.0))
                .unwrap_err()
                .to_string()
                .contains("buys no node")
        );
    }

    #[test]
    fn bad_offers_and_mixes_name_the_field() {
        let err = |t: &str| parse_offer(t, "o.toml").unwrap_err().to_string();
        assert!(err(&OFFER.replace("value = 16", "value = 0")).contains("nodes.value"));
        assert!(err(&OFFER.replace("400000.0", "-1.0")).contains("price_per_node.value"));
        let no_life = OFFER.replace("lifetime_years = { value = 5.0, source = \"q\" }\n", "");
        assert!(err(&no_life).contains("lifetime_years"));
        assert!(
            err(&OFFER.replace("source = \"q\" }\nprice", "source = \"z\" }\nprice"))
                .contains("not a key")
        );
        assert!(err(&format!("colour = 1\n{OFFER}")).contains("colour"));

        let mix = "name = \"m\"\n[[workload]]\nname = \"deepcam\"\nweight = 1.0\nprecision = \"amp-fp16\"\nbatches = [1, 2]\n";
        assert!(parse_mix(mix, "m.toml").is_ok());
        let err = |t: &str| parse_mix(t, "m.toml").unwrap_err().to_string();
        assert!(err(&mix.replace("weight = 1.0", "weight = 0.0")).contains("workload[0].weight"));
        assert!(err(&mix.replace("amp-fp16", "fp4")).contains("workload[0].precision"));
        assert!(err(&mix.replace("[1, 2]", "[]")).contains("workload[0].batches"));
        assert!(err(&mix.replace("[1, 2]", "[0, 2]")).contains("workload[0].batches"));
        assert!(err("name = \"m\"\n").contains("no [[workload]]"));
        let epochs = format!("{mix}epochs = {{ value = 90.0, source = \"t\" }}\n");
        assert!(err(&epochs).contains("workload[0].epochs.source"));
    }

    #[test]
    fn node_counts_are_powers_of_two_and_the_whole_machine() {
        assert_eq!(node_counts(1), [1]);
        assert_eq!(node_counts(8), [1, 2, 4, 8]);
        assert_eq!(node_counts(12), [1, 2, 4, 8, 12]);
    }

    /// DeepCAM on 16 DGX H100s: the best configuration is the fastest of all evaluated,
    /// it fits, and ranking puts the faster of two offers first.
    #[test]
    fn evaluation_keeps_the_fastest_fitting_configuration() {
        let graph = workloads::build("deepcam", &BuildOptions::default()).unwrap();
        let model = StepModel::new(&graph, Precision::AmpFp16, Optimizer::SgdMomentum);
        let data = catalog::workload_data("deepcam").unwrap().unwrap();
        let dataset = data.dataset.unwrap();
        let scenario = Scenario::new(1, Epochs::Curve(data.convergence.unwrap()));
        let entry = MixEntry {
            workload: "deepcam".into(),
            weight: 2.0,
            precision: Precision::AmpFp16,
            batches: vec![1, 2, 4, 8],
            optimizer: Optimizer::SgdMomentum,
            epochs: None,
            data: None,
        };
        let inputs = |system| Inputs {
            model: &model,
            system,
            dataset: &dataset,
            reference_input_elements: graph.input_shape().elements(),
        };
        let offer = parse_offer(OFFER, "o.toml").unwrap();
        let big = offer.apply(catalog::system("dgx-h100").unwrap(), 16);
        let small = offer.apply(catalog::system("dgx-h100").unwrap(), 2);
        let w = evaluate(inputs(&big), &scenario, &entry);
        let best = w.best.clone().expect("deepcam runs on 16 DGX H100");
        assert!(best.outcome.fits);
        for s in &w.scaling {
            assert!(best.outcome.time_to_solution_s.value() <= s.time_to_solution_s + 1e-9);
        }
        // One node (8 devices x at most batch 8) is below the convergence curve's smallest
        // global batch (128), so it is not in the scaling series.
        let counts: Vec<u32> = w.scaling.iter().map(|s| s.nodes).collect();
        assert!(!counts.contains(&1) && counts.contains(&16), "{counts:?}");
        assert!(counts.contains(&best.outcome.nodes));
        assert!(w.largest_batch >= 8);
        let needed = w.storage_needed_bytes_per_s.unwrap();
        let o = &best.outcome;
        assert!(needed > 0.0 && needed.is_finite());
        // Input bandwidth needed x compute time = the step's input bytes.
        let sample = best
            .data_movement
            .iter()
            .find(|m| m.source == "input samples")
            .unwrap();
        let step_bytes = sample.bytes_per_sample * o.global_batch as f64;
        assert!((needed * o.compute_s.value() - step_bytes).abs() / step_bytes < 1e-9);

        let mut ranked = vec![
            CandidateResult::new(
                &offer,
                &small,
                vec![evaluate(inputs(&small), &scenario, &entry)],
            ),
            CandidateResult::new(&offer, &big, vec![w]),
        ];
        ranked[0].name = "small".into();
        rank(&mut ranked, Objective::Time);
        assert_eq!(ranked[0].nodes, 16);
        assert_eq!(ranked[0].rank, Some(1));
        let t = ranked[0].mix_time_s.unwrap();
        assert!(
            (t - 2.0 * o.time_to_solution_s.value()).abs() < 1e-6 * t,
            "weight 2 counts twice"
        );
        assert!(
            ranked[0].reasons[0].contains("lower than #2 `small`"),
            "{:?} {:?}",
            ranked[0].reasons,
            ranked[1].reasons
        );
        assert!(ranked[1].mix_time_s.unwrap() > t);

        // `compare` buys each offer's nodes with the budget and ranks: a budget of two
        // nodes' price runs the mix on two nodes, slower than the offer's sixteen.
        let base = || catalog::system("dgx-h100").unwrap();
        let mut cheap = offer.clone();
        cheap.name = "budget".into();
        let price = offer.price_per_node.as_ref().unwrap().value;
        let evaluated = |system: &System| {
            let inputs = Inputs {
                model: &model,
                system,
                dataset: &dataset,
                reference_input_elements: graph.input_shape().elements(),
            };
            vec![evaluate(inputs, &scenario, &entry)]
        };
        let c = compare(
            vec![(offer.clone(), base()), (cheap, base())],
            None,
            Objective::Time,
            evaluated,
        )
        .unwrap();
        assert_eq!(c.candidates[0].nodes, 16);
        assert_eq!(
            c.offers[1].1.cluster.nodes.value, 16,
            "offers keep their order"
        );
        let c = compare(
            vec![(offer.clone(), base())],
            Some(2.0 * price),
            Objective::Time,
            evaluated,
        )
        .unwrap();
        assert_eq!(c.candidates[0].nodes, 2);
        assert_eq!(c.offers[0].1.cluster.nodes.value, 2);
        assert!(c.candidates[0].mix_time_s.unwrap() > t);
    }
}
