//! Model parallelism for transformers: tensor parallel (Megatron-LM's split; Shoeybi et al.,
//! arXiv:1909.08053), pipeline parallel (the 1F1B schedule of PipeDream-Flush; Narayanan et
//! al., SC 2021, section 2.2) and data parallel, combined.
//!
//! A step of a global batch `B` on `tensor x pipeline x data` devices, in `micro_batches`
//! micro-batches of `b = B / (data x micro_batches)` sequences:
//! - each device runs one tensor-parallel rank of one pipeline stage
//!   ([`crate::workloads::transformer::build_split`], the layers of its stage): its layers
//!   timed as `predict` times layers (a calibrated profile, else the transferred kernel model,
//!   else the ideal bound);
//! - tensor parallelism adds, per micro-batch, two allreduces of the `b x S x H` activations
//!   per transformer layer forward (after the attention's and the feed-forward's row-split
//!   layers) and two backward (at their column-split inputs), one after the vocabulary-split
//!   embeddings and one at the head's input gradient, among the `tensor` devices of a node;
//! - the pipeline splits the transformer layers evenly over its stages (the embeddings on the
//!   first, the head and loss on the last); each micro-batch sends its `b x S x H` activations
//!   to the next stage and their gradients back (point to point); 1F1B takes every stage's
//!   forward and backward of one micro-batch, then `m - 1` times the slowest stage's: with
//!   balanced stages `(m + p - 1)` stage times, a bubble of `(p - 1) / (m + p - 1)`; the
//!   stages with the embeddings and the head are heavier, and a micro-batch passes them once;
//! - data parallelism allreduces each device's gradients among its `data` replicas, after
//!   the pipeline (no overlap), then every device updates its parameters.
//!
//! Memory per device: its stage's share of the parameters, gradients and optimizer state, and
//! the activations of the micro-batches in flight (1F1B: at most `p` on the first stage).

use serde::Serialize;

use crate::collective::{self, Algorithm, Fabric};
use crate::cost::{self, GraphCost};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::memory::stack_memory;
use crate::memory::{Footprint, Optimizer};
use crate::precision::Precision;
use crate::predict::{DeviceRates, StackEffects, StepModel, TimedBy, Timing};
use crate::roofline::Efficiency;
use crate::stack::residuals::StepBand;
use crate::stack::{Schedule, Stack};
use crate::system::System;
use crate::workloads::transformer::{self, Config, block_of};

/// How a step is split over devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Split {
    /// Tensor-parallel ranks (inside a node).
    pub tensor: u32,
    /// Pipeline stages.
    pub pipeline: u32,
    /// Data-parallel replicas.
    pub data: u32,
    /// Micro-batches a replica's batch is cut into.
    pub micro_batches: u32,
    /// Virtual stages per pipeline rank (interleaved 1F1B; 1: none): each rank holds this
    /// many chunks of its stage's layers, round robin.
    pub virtual_stages: u32,
    /// Expert-parallel ranks (1: none): a mixture of experts' experts split over this many
    /// data-parallel replicas, which exchange their tokens by all-to-all (Megatron-Core's
    /// `--expert-model-parallel-size`, which divides the data-parallel replicas).
    pub expert: u32,
}

impl Split {
    /// Devices the split takes.
    pub fn devices(&self) -> u64 {
        u64::from(self.tensor) * u64::from(self.pipeline) * u64::from(self.data)
    }
}

/// One stage of the pipeline, as its slowest (every) tensor-parallel rank runs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    /// Transformer layers `[first, last)` of the stage.
    pub layers: [usize; 2],
    /// Forward of one micro-batch, seconds.
    pub forward_s: f64,
    /// Backward of one micro-batch, seconds.
    pub backward_s: f64,
    /// Its tensor-parallel allreduces for one micro-batch, forward and backward, seconds.
    pub tensor_allreduce_s: f64,
    /// The part of them the products do not hide (the stack's `overlap_tensor_parallel`:
    /// the excess over the stage's compute), seconds.
    pub tensor_exposed_s: f64,
    /// Sending one micro-batch's activations on and receiving their gradients, seconds.
    pub p2p_s: f64,
    /// Its expert-parallel all-to-alls for one micro-batch (four per mixture-of-experts
    /// layer: the tokens out to their experts and back, forward and backward), seconds.
    pub expert_alltoall_s: f64,
    /// Trainable parameters of one rank of the stage.
    pub params: u64,
    /// Of them, its experts' (mixture-of-experts layers; zero for a dense model).
    #[serde(skip_serializing_if = "crate::memory::is_zero")]
    pub expert_params: u64,
    /// Memory one device of the stage needs, bytes.
    pub memory_bytes: f64,
    /// Of it, the model states: parameters, gradients, FP32 master weights and optimizer
    /// state (Megatron-LM's `18` bytes a parameter with BF16 parameters and FP32 gradients
    /// under Adam, `6 + 12 / d` with the distributed optimizer), bytes.
    pub model_state_bytes: f64,
}

/// A training step split over devices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SplitStep {
    /// The split.
    pub split: Split,
    /// Sequences per micro-batch.
    pub micro_batch: u64,
    /// The pipeline's stages.
    pub stages: Vec<Stage>,
    /// The pipeline's idle share: `(p - 1) / (m + p - 1)` with balanced stages.
    pub bubble: f64,
    /// The pipeline, every micro-batch forward and backward, seconds.
    pub pipeline_s: f64,
    /// The data-parallel gradient allreduce, seconds.
    pub data_allreduce_s: f64,
    /// The part of it no compute hides (the stack's `overlap_gradients`), seconds.
    pub data_exposed_s: f64,
    /// The optimizer update of the largest stage, seconds.
    pub update_s: f64,
    /// The step, seconds.
    pub step_s: f64,
    /// An evaluation step at the same global batch, seconds: every micro-batch through the
    /// stages' forward passes (their forward tensor-parallel allreduces and activation
    /// sends), no backward pass, reduction or update.
    pub eval_step_s: f64,
    /// The most memory a device needs, bytes.
    pub memory_per_device_bytes: f64,
    /// What the stack's rules changed on one device (its memory figures with the split's
    /// sequence parallelism), per sample of a micro-batch.
    pub effects: StackEffects,
    /// The step's 90 % interval, seconds: the band of the steps validated under the stack
    /// where it speaks for this one (`StepModel::interval_band`: an uncalibrated GPU), else
    /// none.
    pub step_interval_90_s: Option<[f64; 2]>,
    /// That band.
    pub band: Option<StepBand>,
}

/// The stage of each layer of `graph` (in order) over `stages` stages of `blocks`
/// transformer layers: embeddings first, head last.
fn stage_of(graph: &Graph, blocks: usize, stages: usize) -> Vec<usize> {
    let mut seen_block = false;
    graph
        .layers()
        .iter()
        .map(|l| match block_of(&l.name) {
            Some(i) => {
                seen_block = true;
                (i * stages / blocks.max(1)).min(stages - 1)
            }
            None if seen_block => stages - 1,
            None => 0,
        })
        .collect()
}

/// A step of `config` (model `name`) at `seq` tokens and `global_batch` sequences, split by
/// `split` over devices of `system` at `precision` under software `stack`, timed by
/// `timing`: [`prepare`] at the split's tensor parallelism, then [`Prepared::step`].
#[allow(clippy::too_many_arguments)]
pub fn step(
    name: &str,
    config: &Config,
    seq: usize,
    global_batch: u64,
    split: Split,
    system: &System,
    precision: Precision,
    optimizer: Optimizer,
    stack: &Stack,
    timing: &Timing<'_>,
) -> Result<SplitStep> {
    prepare(
        name,
        config,
        seq,
        Degrees {
            tensor: split.tensor,
            expert: split.expert,
        },
        system,
        precision,
        optimizer,
        stack,
        timing,
    )?
    .step(global_batch, split)
}

/// Each stage's forward and backward seconds, by pipeline depth and micro-batch size.
type StageTimes = std::collections::HashMap<(u32, u64), Vec<[f64; 2]>>;

/// The degrees that shape one rank's graph: its tensor-parallel share of each layer and
/// its expert-parallel share of the experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Degrees {
    /// Tensor-parallel ranks.
    pub tensor: u32,
    /// Expert-parallel ranks.
    pub expert: u32,
}

/// What every split of one tensor- and expert-parallel degree shares: one rank's graph, its
/// step model and memory figures at batch 1. A search over splits prepares each degree once
/// ([`prepare`]) and times each split from it ([`Prepared::step`]).
pub struct Prepared<'a> {
    config: &'a Config,
    seq: usize,
    tensor: u32,
    expert: u32,
    system: &'a System,
    precision: Precision,
    stack: &'a Stack,
    timing: &'a Timing<'a>,
    /// One rank's graph, its attention fused where the stack fuses it.
    graph: Graph,
    model: StepModel,
    rates: DeviceRates,
    kept: crate::memory::StackMemory,
    footprint: Footprint,
    /// Each layer's trainable parameters (one rank).
    layer_params: Vec<u64>,
    /// Of them, its experts' (which the expert-parallel ranks split, and only the replicas
    /// holding the same experts reduce).
    layer_expert_params: Vec<u64>,
    /// Each layer's token slots a sample sends to experts (mixture-of-experts layers; else
    /// zero).
    layer_slots: Vec<u64>,
    /// All of them.
    params: u64,
    /// Each stage's forward and backward time by pipeline depth and micro-batch size: the
    /// same for every data-parallel width (a search over node counts times them once).
    stage_times: std::sync::Mutex<StageTimes>,
}

/// Prepares the splits of `config` at `degrees` (see [`step`]).
#[allow(clippy::too_many_arguments)]
pub fn prepare<'a>(
    name: &str,
    config: &'a Config,
    seq: usize,
    degrees: Degrees,
    system: &'a System,
    precision: Precision,
    optimizer: Optimizer,
    stack: &'a Stack,
    timing: &'a Timing<'a>,
) -> Result<Prepared<'a>> {
    stack.check_precision(precision)?;
    let Degrees { tensor, expert } = degrees;
    if expert == 0 {
        return Err(Error::argument(
            "expert-parallel",
            expert,
            "tensor, pipeline, data, expert, micro-batches and virtual stages are each at least 1",
        ));
    }
    if tensor == 0 {
        return Err(Error::argument(
            "tensor-parallel",
            tensor,
            "tensor, pipeline, data, micro-batches and virtual stages are each at least 1",
        ));
    }
    // Tensor parallelism across nodes, where asked for, takes whole nodes: its collectives
    // run over the network between them.
    let node = system.node.devices.value;
    if tensor > node && !tensor.is_multiple_of(node) {
        return Err(Error::argument(
            "tensor-parallel",
            tensor,
            format!(
                "{tensor} tensor-parallel ranks span nodes of {node} devices unevenly; give at \
                 most {node} (one node) or a multiple of {node} (whole nodes)"
            ),
        ));
    }
    let graph =
        transformer::build_parallel(name, config, seq, 1.0, tensor as usize, expert as usize)
            .map_err(|e| {
                let (flag, value) = if e.message.contains("expert") {
                    ("expert-parallel", expert)
                } else {
                    ("tensor-parallel", tensor)
                };
                Error::argument(flag, value, format!("layer `{}`: {}", e.layer, e.message))
            })?;
    let model = StepModel::with_stack(&graph, precision, optimizer, stack);
    let rates = DeviceRates::of(system, precision, Efficiency::IDEAL)?;
    // What a device keeps: the stack's fused attention, fusion, recomputation and sequence
    // parallelism ([`crate::memory::stack_memory`]).
    let fused = stack.fused_attention(&graph);
    let was_fused = fused.is_some();
    let unfused = graph;
    let graph = fused.unwrap_or_else(|| unfused.clone());
    let one: GraphCost<'_> = cost::cost(&graph, 1, precision);
    let width = seq as u64 * config.hidden_size as u64;
    let mut kept = stack_memory(
        &graph,
        &one,
        stack,
        stack
            .parallel
            .sequence_parallel
            .value
            .then_some((tensor, width)),
    );
    if was_fused {
        kept.set_attention_saved(&unfused, &one);
    }
    let footprint = Footprint::under(&graph, &one, optimizer, &kept);
    let layer_params = one.layers.iter().map(|l| l.params).collect();
    let moe = |l: &crate::graph::Layer| match &l.op {
        crate::graph::Op::Moe(m) => Some((
            *m,
            crate::graph::MoeShape::of(m, graph.layers()[l.inputs[0]].output.dims()),
        )),
        _ => None,
    };
    // A layer's experts: all its parameters but the router's.
    let layer_expert_params = graph
        .layers()
        .iter()
        .zip(&one.layers)
        .map(|(l, c)| moe(l).map_or(0, |(m, s)| c.params - s.hidden * m.experts as u64))
        .collect();
    let layer_slots = graph
        .layers()
        .iter()
        .map(|l| moe(l).map_or(0, |(_, s)| s.slots))
        .collect();
    let params = one.params;
    drop(one);
    Ok(Prepared {
        config,
        seq,
        tensor,
        expert,
        system,
        precision,
        stack,
        timing,
        graph,
        model,
        rates,
        kept,
        footprint,
        layer_params,
        layer_expert_params,
        layer_slots,
        params,
        stage_times: std::sync::Mutex::default(),
    })
}

impl Prepared<'_> {
    /// One expert-parallel all-to-all of a mixture-of-experts layer whose samples each send
    /// `slots` token slots, at `micro` sequences a micro-batch, seconds: among `split.expert`
    /// consecutive data-parallel replicas (as many a node as its replicas, one device of
    /// each per tensor x pipeline group, allow), each rank sending its tensor-parallel share
    /// of the slots (Megatron-Core's dispatcher splits the tokens over the tensor-parallel
    /// ranks), every device of a node exchanging at once in its own group. Zero without
    /// expert parallelism.
    fn exchange_s(&self, split: Split, micro: u64, slots: u64) -> Result<f64> {
        if split.expert <= 1 || slots == 0 {
            return Ok(0.0);
        }
        let node = self.system.node.devices.value;
        let f = self.replica_fabric(split, split.expert, 1)?;
        let act = self.precision.compute_bytes() as f64;
        let bytes = micro as f64 * slots as f64 * self.config.hidden_size as f64 * act
            / f64::from(split.tensor);
        Ok(collective::alltoall_time(&f, bytes, node))
    }

    /// The fabric among `ranks` data-parallel replicas of `split`, one in every `spacing`:
    /// one device of each replica's tensor x pipeline group, as many a node as the replicas
    /// on a node allow.
    fn replica_fabric(&self, split: Split, ranks: u32, spacing: u32) -> Result<Fabric> {
        let node = self.system.node.devices.value;
        let replicas_per_node = (node / (split.tensor * split.pipeline)).max(1);
        let nodes = u32::try_from(split.devices().div_ceil(u64::from(node))).unwrap_or(u32::MAX);
        let mut f = Fabric::of(self.system, nodes.max(1))?;
        f.k = (replicas_per_node / spacing).max(1).min(ranks);
        f.n = ranks.div_ceil(f.k);
        Ok(f)
    }

    /// One step of a data- and expert-parallel split (one stage, one micro-batch) through
    /// the discrete-event simulator ([`crate::sim`]): each layer of one rank as `predict`
    /// times it, a mixture-of-experts layer's all-to-alls ([`Prepared::step`]'s) as
    /// collectives that wait for every rank, forward and backward, and the gradients in
    /// buckets allreduced among the data-parallel replicas on the analytical step's fabric;
    /// the experts' gradients, which reduce among the replicas holding the same experts,
    /// count as the bytes the data-parallel ring reduces in the same time (their two rings'
    /// times at 1 GiB). `options` gives the buckets, overlap and variability; the ranks and
    /// the update are filled in.
    pub fn simulate(
        &self,
        global_batch: u64,
        split: Split,
        options: crate::sim::SimOptions,
    ) -> Result<crate::sim::Simulated> {
        if split.pipeline != 1 || split.micro_batches != 1 || split.tensor != 1 {
            return Err(Error::argument(
                "timeline",
                format!(
                    "tensor {} x pipeline {}, {} micro-batches",
                    split.tensor, split.pipeline, split.micro_batches
                ),
                "the simulator runs data- and expert-parallel steps: one tensor-parallel rank, \
                 one stage, one micro-batch (give --expert-parallel alone)",
            ));
        }
        let step = self.step(global_batch, split)?;
        let micro = step.micro_batch;
        let times = self
            .model
            .layer_times(micro as f64, &self.rates, self.timing);
        let gradient_element = if self.kept.fp32_gradients && self.precision.has_master_weights() {
            4.0
        } else {
            self.precision.compute_bytes() as f64
        };
        let fabric = self.replica_fabric(split, split.data, 1)?;
        let ring = |f: &Fabric, bytes: f64| {
            collective::allreduce_time(f, bytes, Algorithm::Ring).map_or(0.0, |a| a.time.value())
        };
        let experts = split.data / split.expert;
        let scale = if experts > 1 {
            const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
            let group = self.replica_fabric(split, experts, split.expert)?;
            ring(&group, GIB) / ring(&fabric, GIB).max(f64::MIN_POSITIVE)
        } else {
            0.0
        };
        let mut layers = Vec::with_capacity(times.len());
        for (t, &params) in times.iter().zip(&self.model.layer_params) {
            let id = self.graph.find(&t.layer);
            let slots = id.map_or(0, |id| self.layer_slots[id]);
            let expert = id.map_or(0, |id| self.layer_expert_params[id]);
            let each = 2.0 * self.exchange_s(split, micro, slots)?;
            let dense = params.saturating_sub(expert) as f64;
            layers.push(crate::sim::SimLayer {
                name: t.layer.clone(),
                forward_s: t.forward_s,
                backward_s: t.backward_s,
                gradient_bytes: (dense + expert as f64 * scale) * gradient_element,
                exchange_s: [each, each],
            });
        }
        let allreduce = |bytes: f64| ring(&fabric, bytes);
        Ok(crate::sim::simulate(
            &layers,
            &allreduce,
            &crate::sim::SimOptions {
                optimizer_s: step.update_s,
                ranks: split.data,
                ..options
            },
        ))
    }

    /// The bytes a rank of stage `s` of `stages` holds at its peak, with its model state
    /// apart: the parameters `[params, expert_params]` the stage holds, whole or sharded by
    /// the distributed optimizer, and the activations it keeps (`stage_kept` bytes a sample)
    /// for the micro-batches of `micro` samples in flight.
    fn stage_memory(
        &self,
        split: Split,
        micro: u64,
        (s, stages): (usize, usize),
        [params, expert_params]: [u64; 2],
        stage_kept: f64,
    ) -> (f64, f64) {
        let Split {
            data,
            micro_batches,
            virtual_stages,
            expert,
            ..
        } = split;
        let (precision, stack, footprint) = (self.precision, self.stack, &self.footprint);
        let schedule = stack.parallel.schedule.value;
        let total_params = self.params.max(1) as f64;
        // Micro-batches whose activations a stage holds at once: GPipe every one; 1F1B at
        // most the stages from this one on; interleaved, the first stage's `p` grow by
        // `(p - 1) / (p v)` (Narayanan et al., SC 2021, section 2.2.2).
        let in_flight = match schedule {
            Schedule::Gpipe => f64::from(micro_batches),
            Schedule::OneFOneB => {
                let plain = (stages - s).min(micro_batches as usize) as f64;
                let v = f64::from(virtual_stages);
                let p = stages as f64;
                plain * (1.0 + (p - 1.0) / (p * v) * f64::from(u8::from(virtual_stages > 1)))
            }
        };
        // Bytes a parameter keeps whole on every rank (its compute copy and gradient) and
        // those the distributed optimizer shards (FP32 master weights and optimizer
        // state): over the data-parallel replicas, and an expert's over the replicas that
        // hold the same experts.
        let master = if precision.has_master_weights() {
            4.0 * self.params as f64
        } else {
            0.0
        };
        let whole =
            (footprint.parameters.value() - master + footprint.gradients.value()) / total_params;
        let sharded = (footprint.optimizer_state.value() + master) / total_params;
        let dense = (params - expert_params) as f64;
        let experts = expert_params as f64;
        let (dense_shards, expert_shards) = if stack.parallel.distributed_optimizer.value {
            (f64::from(data), f64::from(data / expert))
        } else {
            (1.0, 1.0)
        };
        // The activations of the micro-batches in flight, plus one micro-batch's gradients
        // (and a recomputed layer's activations) at the peak of its backward pass.
        let model_state =
            dense * (whole + sharded / dense_shards) + experts * (whole + sharded / expert_shards);
        let memory = model_state
            + micro as f64
                * (in_flight * stage_kept + footprint.activation_gradients_per_sample.value())
            + footprint.workspace.value();
        (model_state, memory)
    }

    /// Whether `split` can run `global_batch` sequences on this preparation: its tensor and
    /// expert parallelism this preparation's, every count at least 1, virtual stages only
    /// where the stack interleaves a pipeline whose stages they divide, and the batch a
    /// whole number of micro-batches per replica.
    fn check(&self, global_batch: u64, split: Split) -> Result<()> {
        let Split {
            tensor,
            pipeline,
            data,
            micro_batches,
            virtual_stages,
            expert,
        } = split;
        let (config, stack) = (self.config, self.stack);
        if tensor != self.tensor {
            return Err(Error::argument(
                "tensor-parallel",
                tensor,
                format!(
                    "this preparation is of {} tensor-parallel ranks",
                    self.tensor
                ),
            ));
        }
        if expert != self.expert {
            return Err(Error::argument(
                "expert-parallel",
                expert,
                format!(
                    "this preparation is of {} expert-parallel ranks",
                    self.expert
                ),
            ));
        }
        if !data.is_multiple_of(expert) {
            return Err(Error::argument(
                "expert-parallel",
                expert,
                format!(
                    "{expert} expert-parallel ranks are carved out of the data-parallel \
                     replicas and must divide them; there are {data}"
                ),
            ));
        }
        if tensor == 0 || pipeline == 0 || data == 0 || micro_batches == 0 || virtual_stages == 0 {
            return Err(Error::argument(
                "split",
                format!(
                    "tensor {tensor} x pipeline {pipeline} x data {data}, {micro_batches} \
                     micro-batches, {virtual_stages} virtual stages"
                ),
                "tensor, pipeline, data, micro-batches and virtual stages are each at least 1",
            ));
        }
        let schedule = stack.parallel.schedule.value;
        let blocks = config.num_hidden_layers;
        if virtual_stages > 1 {
            let why = if schedule != Schedule::OneFOneB {
                Some(format!(
                    "stack `{}` runs the {schedule} schedule, which has no virtual stages; use a \
                     1f1b stack (`tuned`) or --virtual-stages 1",
                    stack.name
                ))
            } else if pipeline == 1 {
                Some(
                    "virtual stages interleave a pipeline: give --pipeline-parallel 2 or more"
                        .into(),
                )
            } else if !blocks.is_multiple_of(pipeline as usize * virtual_stages as usize) {
                Some(format!(
                    "{blocks} transformer layers do not split into {pipeline} stages of \
                     {virtual_stages} virtual stages each; give a virtual stage count that \
                     divides the {} layers a stage holds",
                    blocks / pipeline as usize
                ))
            } else if !micro_batches.is_multiple_of(pipeline) {
                Some(format!(
                    "the interleaved schedule runs micro-batches in groups of the {pipeline} \
                     stages: give --micro-batches a multiple of {pipeline}"
                ))
            } else {
                None
            };
            if let Some(message) = why {
                return Err(Error::argument("virtual-stages", virtual_stages, message));
            }
        }
        let per_step = u64::from(data) * u64::from(micro_batches);
        if global_batch == 0 || !global_batch.is_multiple_of(per_step) {
            return Err(Error::argument(
                "global-batch",
                global_batch,
                format!(
                    "{global_batch} sequences do not split into {data} replicas of \
                     {micro_batches} micro-batches; give a multiple of {per_step}"
                ),
            ));
        }
        if pipeline as usize > blocks {
            return Err(Error::argument(
                "pipeline-parallel",
                pipeline,
                format!(
                    "{pipeline} stages for {blocks} transformer layers: at most one stage each"
                ),
            ));
        }
        Ok(())
    }

    /// The step of `global_batch` sequences split by `split` (its tensor parallelism this
    /// preparation's).
    pub fn step(&self, global_batch: u64, split: Split) -> Result<SplitStep> {
        let Prepared {
            system,
            stack,
            timing,
            ..
        } = *self;
        self.check(global_batch, split)?;
        let per_step = u64::from(split.data) * u64::from(split.micro_batches);
        let micro = global_batch / per_step;
        let (model, kept) = (&self.model, &self.kept);
        let out = self.stages(split, micro)?;
        let stage_s: Vec<f64> = out
            .iter()
            .map(|s| {
                s.forward_s + s.backward_s + s.tensor_exposed_s + s.p2p_s + s.expert_alltoall_s
            })
            .collect();
        let slowest = stage_s.iter().copied().fold(0.0, f64::max);
        let through: f64 = stage_s.iter().sum();
        let m = f64::from(split.micro_batches);
        let v = f64::from(split.virtual_stages);
        // The first micro-batch passes every stage, forward and back; the others follow at the
        // slowest stage's pace. Balanced stages give `(m + p - 1)` stage times. Interleaved over
        // `v` virtual stages, the fill and drain are `v` times shorter: `m + (p - 1) / v`
        // (Narayanan et al., SC 2021, section 2.2.2). GPipe takes as long as 1F1B.
        let pipeline_s = m * slowest + (through - slowest) / v;
        // Evaluation runs the forward passes alone: half of a stage's tensor-parallel
        // allreduces (two of the four a layer) and its activation sends, at the same pace.
        let forward_s: Vec<f64> = out
            .iter()
            .map(|s| {
                let tensor = s.tensor_allreduce_s / 2.0;
                let exposed = if stack.parallel.overlap_tensor_parallel.value {
                    (tensor - s.forward_s).max(0.0)
                } else {
                    tensor
                };
                s.forward_s + exposed + s.p2p_s / 2.0 + s.expert_alltoall_s / 2.0
            })
            .collect();
        let slowest_forward = forward_s.iter().copied().fold(0.0, f64::max);
        let through_forward: f64 = forward_s.iter().sum();
        let eval_step_s = m * slowest_forward + (through_forward - slowest_forward) / v;
        let Some(largest) = out.iter().max_by_key(|s| s.params) else {
            return Err(Error::argument(
                "pipeline-parallel",
                split.pipeline,
                "no stage",
            ));
        };
        let (data_allreduce, data_exposed, update) = self.data_parallel(split, largest)?;
        let memory = out.iter().map(|s| s.memory_bytes).fold(0.0, f64::max);
        let step_s = pipeline_s + data_exposed + update;
        // What timed the stages' layers, as the band asks.
        let by = TimedBy {
            profile: usize::from(timing.profile.is_some()),
            transfer: usize::from(timing.transfer.is_some()),
            ideal: 0,
        };
        let band = model.interval_band(system.device.kind, &by).cloned();
        Ok(SplitStep {
            split,
            micro_batch: micro,
            bubble: if pipeline_s > 0.0 {
                1.0 - m * through / f64::from(split.pipeline) / pipeline_s
            } else {
                0.0
            },
            step_s,
            eval_step_s,
            step_interval_90_s: band.as_ref().map(|b| b.around(step_s)),
            band,
            stages: out,
            pipeline_s,
            data_allreduce_s: data_allreduce,
            data_exposed_s: data_exposed,
            update_s: update,
            memory_per_device_bytes: memory,
            effects: StackEffects {
                memory: kept.clone(),
                ..model.effects().clone()
            },
        })
    }

    /// The pipeline's stages at `micro` sequences a micro-batch: each stage's layers, its
    /// passes' times, its communication, parameters and memory.
    fn stages(&self, split: Split, micro: u64) -> Result<Vec<Stage>> {
        let Split {
            tensor,
            pipeline,
            virtual_stages,
            ..
        } = split;
        let blocks = self.config.num_hidden_layers;
        let stages = pipeline as usize;
        let of = stage_of(&self.graph, blocks, stages);
        let (tensor_allreduce, p2p) = self.tensor_and_p2p(split, micro)?;
        let overlap_tensor = self.stack.parallel.overlap_tensor_parallel.value;
        let mut out = Vec::with_capacity(stages);
        for (s, [forward, backward]) in self
            .passes_by_stage(pipeline, micro, &of)
            .into_iter()
            .enumerate()
        {
            let first = (0..blocks)
                .find(|i| (i * stages / blocks) == s)
                .unwrap_or(0);
            let last = (0..blocks)
                .rev()
                .find(|i| (i * stages / blocks) == s)
                .map_or(first, |i| i + 1);
            let params = stage_sum(&self.layer_params, &of, s);
            let expert_params = stage_sum(&self.layer_expert_params, &of, s);
            let stage_kept = stage_sum(&self.kept.per_layer, &of, s);
            // Four all-to-alls a mixture-of-experts layer: out and back, each way.
            let mut expert_alltoall = 0.0;
            for (&slots, _) in self.layer_slots.iter().zip(&of).filter(|(_, st)| **st == s) {
                expert_alltoall += 4.0 * self.exchange_s(split, micro, slots)?;
            }
            // Collectives of the stage: four per transformer layer, one after the embeddings
            // (first stage) and one at the head (last).
            let mut collectives = 4 * (last - first);
            if tensor > 1 {
                collectives += usize::from(s == 0) + usize::from(s == stages - 1);
            }
            let tensor_s = collectives as f64 * tensor_allreduce;
            let (model_state, memory) = self.stage_memory(
                split,
                micro,
                (s, stages),
                [params, expert_params],
                stage_kept,
            );
            out.push(Stage {
                layers: [first, last],
                forward_s: forward,
                backward_s: backward,
                tensor_allreduce_s: tensor_s,
                tensor_exposed_s: if overlap_tensor {
                    (tensor_s - forward - backward).max(0.0)
                } else {
                    tensor_s
                },
                // Interleaved, a micro-batch crosses `v` times as many stage boundaries.
                p2p_s: if stages > 1 {
                    p2p * f64::from(virtual_stages)
                } else {
                    0.0
                },
                expert_alltoall_s: expert_alltoall,
                params,
                expert_params,
                memory_bytes: memory,
                model_state_bytes: model_state,
            });
        }
        Ok(out)
    }

    /// One allreduce among the tensor-parallel ranks of a micro-batch's activations, on
    /// the node's device link (across nodes beyond one node's devices), and one send each
    /// way between neighbouring stages, seconds.
    fn tensor_and_p2p(&self, split: Split, micro: u64) -> Result<(f64, f64)> {
        let (system, config) = (self.system, self.config);
        let node = system.node.devices.value;
        let act = self.precision.compute_bytes() as f64;
        let activations = micro as f64 * self.seq as f64 * config.hidden_size as f64 * act;
        let node_fabric = Fabric::of(system, 1)?;
        let tensor_allreduce = if split.tensor > 1 {
            let ranks = if split.tensor > node {
                Fabric::of(system, split.tensor / node)?
            } else {
                Fabric {
                    k: split.tensor,
                    ..node_fabric
                }
            };
            collective::allreduce_time(&ranks, activations, Algorithm::Ring)
                .map_or(0.0, |a| a.time.value())
        } else {
            0.0
        };
        let p2p = match node_fabric.intra {
            Some(l) if split.pipeline > 1 => 2.0 * (l.alpha + activations * l.beta),
            _ => 0.0,
        };
        Ok((tensor_allreduce, p2p))
    }

    /// Each stage's forward and backward pass of a micro-batch of `micro` sequences, the
    /// layers on stage `s` those `of` puts there; kept per pipeline depth and micro-batch,
    /// as a sweep asks for the same ones often.
    fn passes_by_stage(&self, pipeline: u32, micro: u64, of: &[usize]) -> Vec<[f64; 2]> {
        let cached = self
            .stage_times
            .lock()
            .ok()
            .and_then(|c| c.get(&(pipeline, micro)).cloned());
        if let Some(t) = cached {
            return t;
        }
        let t: Vec<[f64; 2]> = (0..pipeline as usize)
            .map(|s| {
                self.model
                    .pass_times(micro as f64, &self.rates, self.timing, |id| {
                        of.get(id) == Some(&s)
                    })
            })
            .collect();
        if let Ok(mut c) = self.stage_times.lock() {
            c.insert((pipeline, micro), t.clone());
        }
        t
    }

    /// The data-parallel side of a step whose largest stage is `largest`: the gradients'
    /// allreduce, the part of it that shows past the overlap, and the optimizer's update,
    /// seconds.
    fn data_parallel(&self, split: Split, largest: &Stage) -> Result<(f64, f64, f64)> {
        let Split { data, expert, .. } = split;
        let (stack, kept) = (self.stack, &self.kept);
        let dense = largest.params - largest.expert_params;
        let experts = largest.expert_params;
        // Gradients reduce in the precision they are kept in (FP32 main gradients under a
        // stack that keeps them).
        let gradient_element = if kept.fp32_gradients && self.precision.has_master_weights() {
            4.0
        } else {
            self.precision.compute_bytes() as f64
        };
        // The dense parameters' gradients among the data-parallel replicas; the experts'
        // among the replicas that hold the same experts (one in every `expert`).
        let reduce = |ranks: u32, spacing: u32, params: u64| -> Result<f64> {
            if ranks <= 1 || params == 0 {
                return Ok(0.0);
            }
            let f = self.replica_fabric(split, ranks, spacing)?;
            Ok(
                collective::allreduce_time(&f, params as f64 * gradient_element, Algorithm::Ring)
                    .map_or(0.0, |a| a.time.value()),
            )
        };
        let data_allreduce = reduce(data, 1, dense)? + reduce(data / expert, expert, experts)?;
        // Overlapped, the gradients' reduction runs beside the last micro-batch's backward pass
        // on the largest stage and, under the distributed optimizer, the parameters' all-gather
        // (half the ring's bytes) beside the next step's first forward pass: only the excess
        // shows.
        let data_exposed = if stack.parallel.overlap_gradients.value {
            if stack.parallel.distributed_optimizer.value {
                (data_allreduce / 2.0 - largest.backward_s).max(0.0)
                    + (data_allreduce / 2.0 - largest.forward_s).max(0.0)
            } else {
                (data_allreduce - largest.backward_s).max(0.0)
            }
        } else {
            data_allreduce
        };
        // Each rank updates its shard under the distributed optimizer: of the dense
        // parameters over the data-parallel replicas, of the experts over the replicas that
        // hold them.
        let updated = if stack.parallel.distributed_optimizer.value {
            dense as f64 / f64::from(data) + experts as f64 / f64::from(data / expert)
        } else {
            (dense + experts) as f64
        };
        let total_params = self.params.max(1) as f64;
        let update = self.model.update_bytes * updated / total_params / self.rates.bandwidth;
        Ok((data_allreduce, data_exposed, update))
    }
}

/// The sum of `values`, one a layer, over the layers `of` puts on stage `s`.
fn stage_sum<T: Copy + std::iter::Sum<T>>(values: &[T], of: &[usize], s: usize) -> T {
    values
        .iter()
        .zip(of)
        .filter(|(_, st)| **st == s)
        .map(|(v, _)| *v)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use crate::transfer::{DeviceSpec, Model as TransferModel};
    use crate::workloads;

    fn gpt2() -> Config {
        workloads::find("gpt2-large")
            .unwrap()
            .transformer_config()
            .unwrap()
    }

    /// GPT-2 Large at 1,024 tokens on a DGX H100, FP32 with Adam.
    fn call(split: Split, batch: u64, timing: &Timing<'_>) -> Result<SplitStep> {
        let system = catalog::system("dgx-h100").unwrap();
        step(
            "gpt2-large",
            &gpt2(),
            1024,
            batch,
            split,
            &system,
            Precision::Fp32,
            Optimizer::Adam,
            crate::catalog::default_stack(),
            timing,
        )
    }

    /// The transferred kernel model on a DGX H100's GPU, with the host modelled.
    fn transfer() -> Timing<'static> {
        let system = catalog::system("dgx-h100").unwrap();
        Timing {
            profile: None,
            transfer: Some((
                TransferModel::builtin(),
                DeviceSpec::fp32(&system.device).unwrap(),
            )),
            cpu: None,
            tf32: None,
            fp8: None,
            host: true,
            gpu: true,
        }
    }

    fn run(split: Split, batch: u64) -> SplitStep {
        call(split, batch, &transfer()).unwrap()
    }

    const ONE: Split = Split {
        tensor: 1,
        pipeline: 1,
        data: 1,
        micro_batches: 1,
        virtual_stages: 1,
        expert: 1,
    };

    /// Activations one device keeps per transformer layer, against Korthikanti et al.
    /// (MLSys 2023, "Reducing Activation Recomputation in Large Transformer Models", Table 2)
    /// at 16-bit activations: GPT-3 175B as Megatron-LM trains it (the fused bias-GeLU,
    /// `activation_function = "gelu"`), under `megatron-te`, whose fused attention keeps
    /// what selective recomputation keeps: `34 s b h / t` bytes with sequence parallelism,
    /// `s b h (10 + 24 / t)` without, exactly, plus what the paper leaves out: fused
    /// attention's log-sum-exp and the layer norms' statistics (0.1 % of it).
    /// Activations one device keeps per transformer layer of `name` (configured by `edit`)
    /// at 2,048 tokens, tensor-parallel over `t`, under `megatron-te` with or without
    /// sequence parallelism.
    fn kept_per_layer(
        name: &str,
        edit: fn(&mut Config),
        t: u32,
        sequence_parallel: bool,
    ) -> (Config, f64) {
        let mut config = workloads::find(name).unwrap().transformer_config().unwrap();
        edit(&mut config);
        let system = catalog::system("dgx-h100").unwrap();
        let timing = transfer();
        let mut stack = catalog::stack("megatron-te").unwrap();
        stack.parallel.sequence_parallel.value = sequence_parallel;
        let p = prepare(
            name,
            &config,
            2048,
            Degrees {
                tensor: t,
                expert: 1,
            },
            &system,
            Precision::AmpBf16,
            Optimizer::Adam,
            &stack,
            &timing,
        )
        .unwrap();
        let kept = p
            .graph
            .layers()
            .iter()
            .zip(&p.kept.per_layer)
            .filter(|(l, _)| transformer::block_of(&l.name) == Some(1))
            .map(|(_, b)| b)
            .sum();
        (config, kept)
    }

    /// Activations one device keeps per transformer layer, against Korthikanti et al.
    /// (MLSys 2023, "Reducing Activation Recomputation in Large Transformer Models", Table 2)
    /// at 16-bit activations: GPT-3 175B as Megatron-LM trains it (the fused bias-GeLU,
    /// `activation_function = "gelu"`), under `megatron-te`, whose fused attention keeps
    /// what selective recomputation keeps: `34 s b h / t` bytes with sequence parallelism,
    /// `s b h (10 + 24 / t)` without, exactly, plus what the paper leaves out: fused
    /// attention's log-sum-exp and the layer norms' statistics (0.1 % of it).
    ///
    /// Llama 3 70B by the paper's method (its Table 2's rows are GPT's layers): the two RMS
    /// norms' inputs (`4 s b h`), the query, key and value projections' input and the
    /// gate and up projections' (`2 + 2`), fused attention's queries, keys, values and
    /// output (`4 + 4 kv / h`), and the gated feed-forward's gate, up and product (`6 f / h`,
    /// the SiLU's output recomputed by the fused SwiGLU): `s b h (12 + 4 kv / h + 6 f / h) / t`
    /// with sequence parallelism (33.5 / t), `s b h (8 + (4 + 4 kv / h + 6 f / h) / t)`
    /// without.
    #[test]
    fn activations_per_layer_are_megatrons_formula() {
        let seq = 2048.0;
        for sequence_parallel in [true, false] {
            for t in [1u32, 2, 4, 8] {
                let gelu = |c: &mut Config| c.hidden_act = Some("gelu".into());
                let (config, kept) = kept_per_layer("gpt3-175b", gelu, t, sequence_parallel);
                let sbh = seq * config.hidden_size as f64;
                let t = f64::from(t);
                let sp = if sequence_parallel { t } else { 1.0 };
                let formula = if sequence_parallel {
                    34.0 * sbh / t
                } else {
                    sbh * (10.0 + 24.0 / t)
                };
                // The log-sum-exp (FP32 per head and query) and two layer norms' mean and
                // inverse deviation (FP32 per position, split with the sequence).
                let heads = config.num_attention_heads as f64;
                let extra = 4.0 * heads * seq / t + 2.0 * 8.0 * seq / sp;
                assert!(
                    (kept - formula - extra).abs() < 1.0,
                    "GPT-3, sequence parallel {sequence_parallel}, t = {t}: {kept} vs {formula} + {extra}"
                );

                let (config, kept) =
                    kept_per_layer("llama3-70b", |_| {}, t as u32, sequence_parallel);
                let h = config.hidden_size as f64;
                let kv = (config.kv_heads() * config.head_size()) as f64 / h;
                let f = config.ffn() as f64 / h;
                let sbh = seq * h;
                let sharded = 4.0 + 4.0 * kv + 6.0 * f;
                let formula = if sequence_parallel {
                    sbh * (8.0 + sharded) / t
                } else {
                    sbh * (8.0 + sharded / t)
                };
                let heads = config.num_attention_heads as f64;
                let extra = 4.0 * heads * seq / t + 2.0 * 4.0 * seq / sp;
                assert!(
                    (kept - formula - extra).abs() < 1.0,
                    "Llama, sequence parallel {sequence_parallel}, t = {t}: {kept} vs {formula} + {extra}"
                );
            }
        }
    }

    /// Model states per device against Megatron's published bytes per parameter (Megatron
    /// Core developer guide, "Distributed Optimizer": BF16 parameters with FP32 gradients,
    /// 18 bytes without the distributed optimizer and `6 + 12 / d` with it) for Llama 3 70B
    /// split tensor 8 x pipeline 4 on DGX H100s under `megatron-te`, at 1, 2 and 8
    /// data-parallel replicas: each stage's model states are the formula times the stage's
    /// parameters, exactly; and the whole device's memory is those plus activations.
    #[test]
    fn model_states_are_megatrons_bytes_per_parameter() {
        let config = workloads::find("llama3-70b")
            .unwrap()
            .transformer_config()
            .unwrap();
        let system = catalog::system("dgx-h100").unwrap();
        let timing = transfer();
        for distributed in [true, false] {
            let mut stack = catalog::stack("megatron-te").unwrap();
            stack.parallel.distributed_optimizer.value = distributed;
            let p = prepare(
                "llama3-70b",
                &config,
                4096,
                Degrees {
                    tensor: 8,
                    expert: 1,
                },
                &system,
                Precision::AmpBf16,
                Optimizer::Adam,
                &stack,
                &timing,
            )
            .unwrap();
            for d in [1u32, 2, 8] {
                let split = Split {
                    tensor: 8,
                    pipeline: 4,
                    data: d,
                    micro_batches: 8,
                    virtual_stages: 1,
                    expert: 1,
                };
                let s = p.step(u64::from(8 * d), split).unwrap();
                let per_param = if distributed {
                    6.0 + 12.0 / f64::from(d)
                } else {
                    18.0
                };
                let mut total = 0;
                for st in &s.stages {
                    let want = per_param * st.params as f64;
                    assert!(
                        (st.model_state_bytes / want - 1.0).abs() < 1e-12,
                        "d = {d}, distributed {distributed}, layers {:?}: {} vs {want}",
                        st.layers,
                        st.model_state_bytes
                    );
                    assert!(st.memory_bytes > st.model_state_bytes);
                    total += st.params;
                }
                // The stages hold one tensor-parallel rank's share of the 70.6 billion.
                assert!((total as f64 * 8.0 / 70.55e9 - 1.0).abs() < 0.01, "{total}");
            }
        }
    }

    /// Mixtral 8x7B over eight expert-parallel ranks of 16 data-parallel replicas (tensor 1,
    /// two DGX H100 nodes) under `megatron-te`: each rank holds one expert of each layer; its
    /// all-to-alls are four a layer, each of its tokens' two slots of 4,096 channels, by the
    /// collective model on the node (eight replicas a node); its dense parameters' model
    /// states are Megatron's `6 + 12 / 16` bytes and its experts' `6 + 12 / 2` (their
    /// optimizer state sharded over the two replicas holding the same expert); and without
    /// expert parallelism there is no all-to-all.
    #[test]
    fn expert_parallelism_exchanges_tokens_and_shards_the_experts() {
        let config = workloads::find("mixtral-8x7b")
            .unwrap()
            .transformer_config()
            .unwrap();
        let system = catalog::system("dgx-h100").unwrap();
        let timing = transfer();
        let stack = catalog::stack("megatron-te").unwrap();
        let seq = 1024;
        let at = |expert: u32| {
            let split = Split {
                data: 16,
                micro_batches: 2,
                expert,
                ..ONE
            };
            step(
                "mixtral",
                &config,
                seq,
                64,
                split,
                &system,
                Precision::AmpBf16,
                Optimizer::Adam,
                &stack,
                &timing,
            )
            .unwrap()
        };
        let (one, eight) = (at(1), at(8));
        assert_eq!(one.stages[0].expert_alltoall_s, 0.0);
        let st = &eight.stages[0];
        let (h, f, layers) = (4096u64, 14336u64, 32u64);
        let experts_per_rank = layers * 3 * h * f;
        assert_eq!(st.expert_params, experts_per_rank);
        assert_eq!(one.stages[0].params - st.params, 7 * experts_per_rank);
        // Two micro-batch sequences, two slots a token, BF16.
        let bytes = 2.0 * (2 * seq) as f64 * h as f64 * 2.0;
        let mut node = Fabric::of(&system, 1).unwrap();
        node.k = 8;
        let each = collective::alltoall_time(&node, bytes, 8);
        let want = 4.0 * layers as f64 * each;
        assert!(
            (st.expert_alltoall_s / want - 1.0).abs() < 1e-12,
            "{} vs {want}",
            st.expert_alltoall_s
        );
        let dense = (st.params - st.expert_params) as f64;
        let states = dense * (6.0 + 12.0 / 16.0) + experts_per_rank as f64 * (6.0 + 12.0 / 2.0);
        assert!(
            (st.model_state_bytes / states - 1.0).abs() < 1e-12,
            "{} vs {states}",
            st.model_state_bytes
        );
        assert!(eight.memory_per_device_bytes < one.memory_per_device_bytes);
        assert!(eight.step_s > 0.0 && eight.step_s.is_finite());
        // Expert parallelism divides the replicas, and splits only a mixture of experts.
        let e = call(
            Split {
                data: 4,
                expert: 3,
                ..ONE
            },
            4,
            &timing,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("expert-parallel"), "{e}");
        let e = call(
            Split {
                data: 4,
                expert: 2,
                ..ONE
            },
            4,
            &timing,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("expert-parallel") && e.contains("has none"),
            "{e}"
        );
    }

    /// The simulated data- and expert-parallel step: with every rank alike, its compute is
    /// the analytical stage's forward and backward plus its all-to-alls (the same collective
    /// model), each all-to-all in the slowest rank's timeline; a tensor-parallel split is
    /// refused.
    #[test]
    fn a_simulated_expert_parallel_step_waits_at_the_all_to_alls() {
        let config = workloads::find("mixtral-8x7b")
            .unwrap()
            .transformer_config()
            .unwrap();
        let system = catalog::system("dgx-h100").unwrap();
        let timing = transfer();
        let stack = catalog::stack("megatron-te").unwrap();
        let p = prepare(
            "mixtral",
            &config,
            512,
            Degrees {
                tensor: 1,
                expert: 8,
            },
            &system,
            Precision::AmpBf16,
            Optimizer::Adam,
            &stack,
            &timing,
        )
        .unwrap();
        let split = Split {
            data: 16,
            expert: 8,
            ..ONE
        };
        let step = p.step(16, split).unwrap();
        let sim = p
            .simulate(16, split, crate::sim::SimOptions::default())
            .unwrap();
        let st = &step.stages[0];
        let want = st.forward_s + st.backward_s + st.expert_alltoall_s;
        // The stage's passes run on the host's timeline; the simulator's layers one after
        // another: within 10 %.
        assert!(
            (sim.compute_s / want - 1.0).abs() < 0.1,
            "{} vs {want}",
            sim.compute_s
        );
        let exchanges = sim
            .spans
            .iter()
            .filter(|s| s.name.contains("block_sparse_moe exchange"))
            .count();
        assert_eq!(exchanges, 2 * 32);
        let e = p
            .simulate(
                16,
                Split {
                    micro_batches: 2,
                    ..split
                },
                crate::sim::SimOptions::default(),
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("one micro-batch"), "{e}");
    }

    /// Unsplit, the step is `predict`'s compute on one device plus the update.
    #[test]
    fn unsplit_is_the_single_device_step() {
        let s = run(ONE, 4);
        let system = catalog::system("dgx-h100").unwrap();
        let g = workloads::build("gpt2-large", &workloads::BuildOptions::default()).unwrap();
        let model = StepModel::new(&g, Precision::Fp32, Optimizer::Adam);
        let rates = DeviceRates::of(&system, Precision::Fp32, Efficiency::IDEAL).unwrap();
        let spec = DeviceSpec::fp32(&system.device).unwrap();
        let timing = Timing {
            profile: None,
            transfer: Some((TransferModel::builtin(), spec)),
            cpu: None,
            tf32: None,
            fp8: None,
            host: true,
            gpu: true,
        };
        let whole = model.device_times(4.0, &rates, &timing).step;
        assert!(
            (s.step_s / whole - 1.0).abs() < 1e-9,
            "{} vs {whole}",
            s.step_s
        );
        assert_eq!(s.bubble, 0.0);
        assert_eq!(s.stages.len(), 1);
        assert_eq!(s.stages[0].params, 774_030_080);
        // Evaluation unsplit is the forward pass alone.
        assert_eq!(s.eval_step_s, s.stages[0].forward_s);
    }

    /// Evaluation on a split runs every micro-batch forward through the pipeline: more than
    /// the slowest stage's forward passes, less than the training step.
    #[test]
    fn evaluation_is_the_pipelines_forward_passes() {
        let s = run(
            Split {
                tensor: 2,
                pipeline: 4,
                micro_batches: 8,
                ..ONE
            },
            16,
        );
        let slowest = s.stages.iter().map(|t| t.forward_s).fold(0.0, f64::max);
        assert!(s.eval_step_s > 8.0 * slowest, "{s:?}");
        assert!(s.eval_step_s < s.step_s / 2.0, "{s:?}");
    }

    #[test]
    fn the_pipeline_bubble_and_the_tensor_split() {
        let pp = run(
            Split {
                pipeline: 4,
                micro_batches: 8,
                ..ONE
            },
            16,
        );
        // 1F1B: every stage once, then the slowest for the other seven micro-batches; the
        // idle share at least the balanced bubble, 3 / 11, the first and last stages
        // carrying the embeddings and the head.
        let total = |s: &Stage| s.forward_s + s.backward_s + s.tensor_allreduce_s + s.p2p_s;
        let slowest = pp.stages.iter().map(total).fold(0.0, f64::max);
        let through: f64 = pp.stages.iter().map(total).sum();
        assert!((pp.pipeline_s - (through + 7.0 * slowest)).abs() < 1e-12 * pp.pipeline_s);
        assert!(
            pp.bubble >= 3.0 / 11.0 - 1e-12 && pp.bubble < 0.5,
            "{}",
            pp.bubble
        );
        assert!(pp.pipeline_s <= 11.0 * slowest);
        assert_eq!(pp.stages.len(), 4);
        assert_eq!(pp.stages[0].layers, [0, 9]);
        assert_eq!(pp.stages[3].layers, [27, 36]);
        // Every parameter is on one stage.
        let params: u64 = pp.stages.iter().map(|s| s.params).sum();
        assert_eq!(params, 774_030_080);
        assert!(pp.stages.iter().all(|s| s.p2p_s > 0.0));
        // Four tensor-parallel ranks: a quarter of the projections' work each, plus the
        // allreduces; faster than one device, slower than a quarter of it.
        let one = run(ONE, 4);
        let tp = run(Split { tensor: 4, ..ONE }, 4);
        assert!(tp.stages[0].tensor_allreduce_s > 0.0);
        assert!(tp.step_s < one.step_s && tp.step_s > one.step_s / 4.0);
        assert!(tp.memory_per_device_bytes < one.memory_per_device_bytes);
        // Data parallel: each replica a quarter of the batch, and a gradient allreduce.
        let dp = run(Split { data: 4, ..ONE }, 16);
        assert_eq!(dp.micro_batch, 4);
        assert!(dp.data_allreduce_s > 0.0);
    }

    /// Interleaved 1F1B over `v` virtual stages: `m` slowest stage times plus the fill and
    /// drain `v` times shorter, a micro-batch crossing `v` times the stage boundaries.
    #[test]
    fn interleaving_shortens_the_fill_and_drain_by_the_virtual_stages() {
        let system = catalog::system("dgx-h100").unwrap();
        let timing = transfer();
        let tuned = catalog::stack("tuned").unwrap();
        let at = |v: u32| {
            let split = Split {
                pipeline: 4,
                micro_batches: 8,
                virtual_stages: v,
                ..ONE
            };
            step(
                "gpt2-large",
                &gpt2(),
                1024,
                16,
                split,
                &system,
                Precision::Fp32,
                Optimizer::Adam,
                &tuned,
                &timing,
            )
        };
        let (one, three) = (at(1).unwrap(), at(3).unwrap());
        let total = |s: &Stage| s.forward_s + s.backward_s + s.tensor_allreduce_s + s.p2p_s;
        let slowest = three.stages.iter().map(total).fold(0.0, f64::max);
        let through: f64 = three.stages.iter().map(total).sum();
        let expected = 8.0 * slowest + (through - slowest) / 3.0;
        assert!((three.pipeline_s - expected).abs() < 1e-12 * expected);
        assert!((three.stages[1].p2p_s - 3.0 * one.stages[1].p2p_s).abs() < 1e-15);
        assert!(three.bubble < one.bubble);
        // 36 layers over 4 stages are 9 a stage: 2 virtual stages do not divide them.
        let e = at(2).unwrap_err().to_string();
        assert!(e.contains("9 layers a stage holds"), "{e}");
    }

    #[test]
    fn splits_that_do_not_divide_are_refused() {
        let err = |split, batch| {
            call(split, batch, &Timing::default())
                .unwrap_err()
                .to_string()
        };
        assert!(err(Split { data: 3, ..ONE }, 4).contains("multiple of 3"));
        // Across nodes, whole nodes only.
        assert!(err(Split { tensor: 12, ..ONE }, 4).contains("a multiple of 8 (whole nodes)"));
        assert!(err(Split { tensor: 3, ..ONE }, 4).contains("divide the 20 heads"));
        assert!(
            err(
                Split {
                    pipeline: 40,
                    ..ONE
                },
                4
            )
            .contains("36 transformer layers")
        );
    }
}
