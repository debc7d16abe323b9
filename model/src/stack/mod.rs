//! The software stack a training step runs under (docs/ARCHITECTURE.md "Software
//! stacks"): how the framework issues kernels from the host, what the device adds per
//! kernel, which layers it fuses, and what FP32 training runs matrix ops in.
//!
//! A step is hardware times software: the same network on the same GPU runs two to three
//! times apart between eager PyTorch and a tuned stack. A [`Stack`] makes the software an
//! input, read from a sourced TOML file (`data/catalog/stacks/*.toml`, or the user's) in two
//! stages like a system file: `raw` mirrors the file, [`parse`] checks it once and
//! returns an error naming the file, the field and the fix.
//!
//! - **Host** ([`Host`]): the time the framework's host thread takes to issue work. An
//!   eager framework issues one op at a time ([`Dispatch::PerOp`]: a time per op kind, its
//!   launches included, forward and backward), compiled code issues its generated kernels
//!   ([`Dispatch::PerKernel`]), a captured CUDA graph replays the whole step from one
//!   launch ([`Dispatch::Graph`]). Besides, each parameter tensor costs the backward pass
//!   its gradient accumulation and the optimizer its update. The step model runs the host
//!   and the device as two timelines ([`crate::predict::StepModel`]), so a step of many
//!   small kernels comes out host-bound, as it is.
//! - **Device**: the gap the GPU leaves between two kernels queued back to back.
//! - **Fusion** ([`FusionRule`], [`fusion::groups`]): rewrites of the layer graph before it
//!   is costed.
//! - **Precision** ([`PrecisionPolicy`]): what FP32 training runs convolutions and products
//!   in (PyTorch runs cuDNN's convolutions in TF32 by default on devices that have it), and
//!   which layers FP8 training multiplies in FP8 ([`Fp8Layers`]).
//! - **Memory** ([`Recompute`]): which activations the backward pass recomputes rather
//!   than keeps.
//! - **Data** ([`Stack::packing`]): whether sequences are packed, so a transformer computes
//!   its data set's mean tokens a sequence rather than the padded length.
//! - **Parallel** ([`Parallel`]): the pipeline schedule, the distributed optimizer and
//!   sequence parallelism of a split model.
//! - **Intervals** ([`residuals`]): how far steps predicted under each built-in stack have
//!   come out from their measurements, which is a prediction's 90 % interval.

pub mod fusion;
pub(crate) mod raw;
pub mod residuals;

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

pub use fusion::{FusionRule, Group};

use crate::error::parse_toml;
use crate::error::{Error, Result};
use crate::graph::Op;
use crate::precision::Precision;
use crate::system::{Ctx, Sourced};
use crate::transfer::cpu::Software;
use crate::units::Seconds;

/// How the framework issues the step's kernels from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dispatch {
    /// One op at a time, each at its kind's host time (its launches included): eager
    /// frameworks.
    PerOp,
    /// Each kernel at one host time: compiled code launching its generated kernels.
    PerKernel,
    /// The whole step replayed from one launch of a captured CUDA graph.
    Graph,
}

impl Dispatch {
    const ALL: [Dispatch; 3] = [Dispatch::PerOp, Dispatch::PerKernel, Dispatch::Graph];

    /// Its name in stack files and outputs.
    pub const fn name(self) -> &'static str {
        match self {
            Dispatch::PerOp => "per-op",
            Dispatch::PerKernel => "per-kernel",
            Dispatch::Graph => "graph",
        }
    }
}

impl fmt::Display for Dispatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The host's time to issue one op, by op kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpTimes {
    /// For kinds without their own figure (per-op dispatch only: per kernel, those cost
    /// their kernels).
    pub default: Option<Sourced<Seconds>>,
    /// By op kind (`conv`, `batch-norm`, ...).
    pub kinds: BTreeMap<&'static str, Sourced<Seconds>>,
}

impl OpTimes {
    /// The time of an op of `kind`, seconds: its own figure, else the default.
    pub fn of(&self, kind: &str) -> Option<f64> {
        self.kinds
            .get(kind)
            .or(self.default.as_ref())
            .map(|s| s.value.value())
    }
}

/// The host side of a stack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Host {
    /// How kernels are issued.
    pub dispatch: Sourced<Dispatch>,
    /// Per kernel, where dispatch is per kernel.
    pub kernel: Option<Sourced<Seconds>>,
    /// Per step, where dispatch is a graph.
    pub graph: Option<Sourced<Seconds>>,
    /// Per parameter tensor, in the backward pass (gradient accumulation).
    pub parameter: Sourced<Seconds>,
    /// Per parameter tensor, in the optimizer's step (and zeroing the gradients).
    pub optimizer_tensor: Sourced<Seconds>,
    /// Per forward op by kind: every op's time where dispatch is per op; where it is per
    /// kernel, the time of the kinds it lists (the others cost their kernels').
    pub forward: Option<OpTimes>,
    /// Per backward op by kind, as `forward`.
    pub backward: Option<OpTimes>,
    /// Whose kernels run a step on a CPU (`host.cpu_kernels`): ridgeline's own
    /// (`ridgeline-executor`) or the libraries a framework calls (oneDNN and MKL under
    /// PyTorch), what the CPU kernel model times them as ([`crate::transfer::cpu`]); `None`
    /// where the file does not say (then oneDNN's, and the prediction says so).
    pub cpu_kernels: Option<Sourced<Software>>,
}

/// What FP32 training runs a class of matrix ops in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MathMode {
    /// FP32 units.
    Fp32,
    /// TF32 tensor cores, where the device has them.
    Tf32,
}

impl MathMode {
    /// Its name in stack files.
    pub const fn name(self) -> &'static str {
        match self {
            MathMode::Fp32 => "fp32",
            MathMode::Tf32 => "tf32",
        }
    }
}

/// Which layers FP8 training ([`Precision::Fp8`]) multiplies in FP8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fp8Layers {
    /// None: the stack has no FP8 recipe, and FP8 training is refused under it.
    None,
    /// The linear layers of the transformer layers (Transformer Engine's `Linear`,
    /// `LayerNormLinear` and `LayerNormMLP`); the embeddings, the output head, attention's
    /// products and convolutions stay BF16.
    Linear,
}

impl Fp8Layers {
    /// Its name in stack files.
    pub const fn name(self) -> &'static str {
        match self {
            Fp8Layers::None => "none",
            Fp8Layers::Linear => "linear",
        }
    }
}

/// What FP32 training runs matrix ops in, and FP8 training which layers in FP8.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PrecisionPolicy {
    /// Convolutions (cuDNN's `allow_tf32`).
    pub convolutions: Sourced<MathMode>,
    /// Products: dense and linear layers, batched products, attention (cuBLAS's).
    pub matmuls: Sourced<MathMode>,
    /// The layers FP8 training multiplies in FP8.
    pub fp8: Sourced<Fp8Layers>,
}

impl PrecisionPolicy {
    /// The precision a layer of `op` runs its matrix kernels in when the step trains in
    /// `precision`: TF32 for FP32 training where the policy says so; under FP8 training,
    /// FP8 for the linear layers of a transformer layer (`in_block`) where the policy runs
    /// them so, BF16 for the others; else `precision`.
    pub fn matrix_precision(&self, op: &Op, in_block: bool, precision: Precision) -> Precision {
        if precision == Precision::Fp8 {
            let linear = matches!(op, Op::Linear { .. } | Op::Dense { .. });
            return if linear && in_block && self.fp8.value == Fp8Layers::Linear {
                Precision::Fp8
            } else {
                precision.base()
            };
        }
        if precision != Precision::Fp32 || !op.is_matrix() {
            return precision;
        }
        let mode = match op {
            Op::Conv(_) | Op::ConvTranspose(_) => self.convolutions.value,
            _ => self.matmuls.value,
        };
        match mode {
            MathMode::Tf32 => Precision::Tf32,
            MathMode::Fp32 => precision,
        }
    }
}

/// The pipeline schedule a stack's framework runs a split model with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// GPipe (Huang et al., NeurIPS 2019): every micro-batch forward, then every one
    /// backward; each stage keeps every micro-batch's activations.
    Gpipe,
    /// 1F1B (PipeDream-Flush; Narayanan et al., SC 2021, section 2.2): one forward, one
    /// backward; a stage keeps at most as many micro-batches as stages after it; with
    /// virtual stages, interleaved (section 2.2.2).
    #[serde(rename = "1f1b")]
    OneFOneB,
}

impl Schedule {
    /// Its name in stack files.
    pub const fn name(self) -> &'static str {
        match self {
            Schedule::Gpipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which activations the backward pass recomputes rather than keeps (Korthikanti et al.,
/// *Reducing Activation Recomputation in Large Transformer Models*, MLSys 2023).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recompute {
    /// Every activation a layer needs is kept.
    None,
    /// Attention's scores (softmax and dropout) are recomputed from the queries and keys
    /// in backward (section 4.2); a fused attention kernel does so already.
    Selective,
    /// Each transformer layer keeps only its input, and its forward pass runs again in
    /// backward (section 4.1, Megatron-LM's `--recompute-granularity full`).
    Full,
}

impl Recompute {
    const ALL: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];

    /// Its name in stack files.
    pub const fn name(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
        }
    }
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a split model's pipeline and optimizer run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parallel {
    /// The pipeline schedule.
    pub schedule: Sourced<Schedule>,
    /// Whether the optimizer's state and the FP32 master weights are sharded over the
    /// data-parallel ranks (ZeRO stage 1; Megatron-LM's distributed optimizer): each rank
    /// updates its shard, and the gradients are reduce-scattered and the parameters
    /// all-gathered instead of allreduced (the same bytes on a ring).
    pub distributed_optimizer: Sourced<bool>,
    /// Sequence parallelism (Korthikanti et al., MLSys 2023, section 4.2.2): with tensor
    /// parallelism, the layers it leaves whole (layer norms, dropout, residual adds) split
    /// their positions over the tensor-parallel ranks, so each keeps `1/t` of their
    /// activations; the allreduces become a reduce-scatter and an all-gather (the same bytes
    /// on a ring).
    pub sequence_parallel: Sourced<bool>,
    /// Whether a split's data-parallel gradient reduction runs beside the last
    /// micro-batch's backward pass (and, with the distributed optimizer, the parameters'
    /// all-gather beside the next step's first forward pass): PyTorch DDP's buckets,
    /// Megatron-LM's `--overlap-grad-reduce` and `--overlap-param-gather`.
    pub overlap_gradients: Sourced<bool>,
    /// Whether tensor-parallel collectives run beside the products that produce and
    /// consume them (Transformer Engine's userbuffer overlap, `--tp-comm-overlap`).
    pub overlap_tensor_parallel: Sourced<bool>,
}

/// A software stack.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stack {
    /// Its name.
    pub name: String,
    /// What it describes.
    pub description: String,
    /// The file it was read from (`data/catalog/stacks/NAME.toml` for a built-in one).
    pub file: String,
    /// The host side.
    pub host: Host,
    /// The gap the device leaves between two kernels queued back to back.
    pub kernel_gap: Sourced<Seconds>,
    /// The fusion rules, in the order listed.
    pub fusion: Sourced<Vec<FusionRule>>,
    /// What FP32 training runs matrix ops in, and FP8 training which layers in FP8.
    pub precision: PrecisionPolicy,
    /// Which activations the backward pass recomputes.
    pub recompute: Sourced<Recompute>,
    /// Whether a tied layer (a language model's head tied to the token embeddings) keeps
    /// its own copy of the shared weights and of their gradient (ridgeline's executors do;
    /// PyTorch shares one tensor). `None`: not said, no copy.
    pub tied_copies: Option<Sourced<bool>>,
    /// Whether gradients are accumulated and reduced in FP32 under mixed precision
    /// (Megatron-LM's `main_grad` buffers, which it keeps in FP32 for BF16 training:
    /// `accumulate_allreduce_grads_in_fp32`). `None`: not said, the compute precision.
    pub fp32_gradients: Option<Sourced<bool>>,
    /// Whether sequences are packed (or run unpadded): a transformer then computes the
    /// tokens a data set's sequence holds on average (`tokens_per_sequence`), not the padded
    /// length (Krell et al., arXiv:2107.02027).
    pub packing: Sourced<bool>,
    /// How a split model's pipeline and optimizer run.
    pub parallel: Parallel,
}

impl Stack {
    /// Whether the stack fuses with `rule`.
    pub fn fuses(&self, rule: FusionRule) -> bool {
        self.fusion.value.contains(&rule)
    }

    /// `graph` with its attention fused where this stack fuses attention the graph runs
    /// unfused ([`fusion::fuse_attention`]); `None` where nothing changes.
    pub fn fused_attention(&self, graph: &crate::graph::Graph) -> Option<crate::graph::Graph> {
        self.fuses(FusionRule::Attention)
            .then(|| fusion::fuse_attention(graph))
            .flatten()
    }

    /// Whether the stack can train at `precision`: FP8 needs a stack with an FP8 recipe
    /// (`[precision] fp8`); an error naming the field and the fix where it has none.
    pub fn check_precision(&self, precision: Precision) -> Result<()> {
        if precision == Precision::Fp8 && self.precision.fp8.value == Fp8Layers::None {
            return Err(Error::Invalid {
                file: self.file.clone(),
                field: "precision.fp8".into(),
                message: format!(
                    "stack `{}` has no FP8 recipe (\"none\"), so it cannot train in fp8; \
                     use a stack that runs FP8 linear layers (`megatron-te`, `tuned`), or set \
                     fp8 = {{ value = \"linear\", source = \"...\" }} in a stack file",
                    self.name
                ),
            });
        }
        Ok(())
    }
}

/// The most microseconds a host or device time may be (a second: beyond any real
/// dispatch).
const MAX_US: f64 = 1e6;

/// Parses and checks a stack file's `text`; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Stack> {
    let raw: raw::RawStack = parse_toml(text, file)?;
    let ctx = Ctx {
        file,
        prefix: "",
        sources: &raw.sources,
    };
    if raw.name.trim().is_empty() {
        return Err(ctx.invalid("name", "is empty; name the stack"));
    }
    let us = |field: &str, r: &crate::system::raw::RawSourced<f64>| micros(&ctx, field, r);
    let host = host(&ctx, &raw.host)?;
    let mut rules = Vec::new();
    for (i, name) in raw.fusion.rules.value.iter().enumerate() {
        let rule: FusionRule = name
            .parse()
            .map_err(|e: String| ctx.invalid(&format!("fusion.rules.value[{i}]"), e))?;
        if rules.contains(&rule) {
            return Err(ctx.invalid(
                &format!("fusion.rules.value[{i}]"),
                format!("`{rule}` is listed twice; list each rule once"),
            ));
        }
        rules.push(rule);
    }
    let math = |field: &str, r: &crate::system::raw::RawSourced<String>| -> Result<_> {
        let value = [MathMode::Fp32, MathMode::Tf32]
            .into_iter()
            .find(|m| m.name() == r.value)
            .ok_or_else(|| {
                ctx.invalid(
                    &format!("precision.{field}.value"),
                    format!("`{}`: must be \"fp32\" or \"tf32\"", r.value),
                )
            })?;
        Ok(Sourced {
            value,
            source: ctx.source(&format!("precision.{field}"), &r.source)?,
        })
    };
    let fp8 = [Fp8Layers::None, Fp8Layers::Linear]
        .into_iter()
        .find(|f| f.name() == raw.precision.fp8.value)
        .ok_or_else(|| {
            ctx.invalid(
                "precision.fp8.value",
                format!(
                    "`{}`: must be \"none\" (no FP8 recipe) or \"linear\" (the transformer \
                     layers' linear layers, Transformer Engine's)",
                    raw.precision.fp8.value
                ),
            )
        })?;
    let recompute = Recompute::ALL
        .into_iter()
        .find(|r| r.name() == raw.memory.recompute.value)
        .ok_or_else(|| {
            ctx.invalid(
                "memory.recompute.value",
                format!(
                    "`{}`: must be \"none\", \"selective\" (attention's scores) or \"full\" \
                     (each transformer layer from its input)",
                    raw.memory.recompute.value
                ),
            )
        })?;
    let flag = |field: &str, r: &crate::system::raw::RawSourced<bool>| -> Result<Sourced<bool>> {
        Ok(Sourced {
            value: r.value,
            source: ctx.source(field, &r.source)?,
        })
    };
    Ok(Stack {
        name: raw.name,
        description: raw.description,
        file: file.to_owned(),
        host,
        kernel_gap: us("device.kernel_gap_us", &raw.device.kernel_gap_us)?,
        fusion: Sourced {
            value: rules,
            source: ctx.source("fusion.rules", &raw.fusion.rules.source)?,
        },
        precision: PrecisionPolicy {
            convolutions: math("fp32_convolutions", &raw.precision.fp32_convolutions)?,
            matmuls: math("fp32_matmuls", &raw.precision.fp32_matmuls)?,
            fp8: Sourced {
                value: fp8,
                source: ctx.source("precision.fp8", &raw.precision.fp8.source)?,
            },
        },
        recompute: Sourced {
            value: recompute,
            source: ctx.source("memory.recompute", &raw.memory.recompute.source)?,
        },
        tied_copies: raw
            .memory
            .tied_copies
            .as_ref()
            .map(|r| flag("memory.tied_copies", r))
            .transpose()?,
        fp32_gradients: raw
            .memory
            .fp32_gradients
            .as_ref()
            .map(|r| flag("memory.fp32_gradients", r))
            .transpose()?,
        packing: flag("data.packing", &raw.data.packing)?,
        parallel: Parallel {
            schedule: Sourced {
                value: [Schedule::Gpipe, Schedule::OneFOneB]
                    .into_iter()
                    .find(|s| s.name() == raw.parallel.schedule.value)
                    .ok_or_else(|| {
                        ctx.invalid(
                            "parallel.schedule.value",
                            format!(
                                "`{}`: must be \"gpipe\" or \"1f1b\" (interleaved 1F1B is \
                                 1f1b with --virtual-stages)",
                                raw.parallel.schedule.value
                            ),
                        )
                    })?,
                source: ctx.source("parallel.schedule", &raw.parallel.schedule.source)?,
            },
            distributed_optimizer: flag(
                "parallel.distributed_optimizer",
                &raw.parallel.distributed_optimizer,
            )?,
            sequence_parallel: flag(
                "parallel.sequence_parallel",
                &raw.parallel.sequence_parallel,
            )?,
            overlap_gradients: flag(
                "parallel.overlap_gradients",
                &raw.parallel.overlap_gradients,
            )?,
            overlap_tensor_parallel: flag(
                "parallel.overlap_tensor_parallel",
                &raw.parallel.overlap_tensor_parallel,
            )?,
        },
    })
}

/// The stack's host timeline (`[host]`): how it dispatches, its times per launch, per
/// parameter and per optimizer tensor, and its op tables, each checked against the
/// dispatch.
fn host(ctx: &Ctx<'_>, h: &raw::RawHost) -> Result<Host> {
    let us = |field: &str, r: &crate::system::raw::RawSourced<f64>| micros(ctx, field, r);
    let dispatch = Dispatch::ALL
        .into_iter()
        .find(|d| d.name() == h.dispatch.value)
        .ok_or_else(|| {
            ctx.invalid(
                "host.dispatch.value",
                format!(
                    "`{}`: must be \"per-op\" (eager frameworks), \"per-kernel\" (compiled \
                     code) or \"graph\" (a captured CUDA graph)",
                    h.dispatch.value
                ),
            )
        })?;
    let needs = |field: &str, present: bool, wanted: bool| -> Result<()> {
        match (present, wanted) {
            (false, true) => Err(ctx.invalid(
                &format!("host.{field}"),
                format!(
                    "missing: dispatch `{dispatch}` needs it; add it with its source, or \
                     choose another host.dispatch"
                ),
            )),
            (true, false) => Err(ctx.invalid(
                &format!("host.{field}"),
                format!(
                    "does not apply to dispatch `{dispatch}`; remove it, or choose the \
                     dispatch it belongs to"
                ),
            )),
            _ => Ok(()),
        }
    };
    needs(
        "kernel_us",
        h.kernel_us.is_some(),
        dispatch == Dispatch::PerKernel,
    )?;
    needs(
        "graph_us",
        h.graph_us.is_some(),
        dispatch == Dispatch::Graph,
    )?;
    // Per op the tables give every op's time; per kernel they may list op kinds whose host
    // time is their own rather than their kernels'; a graph issues no op.
    for (field, present) in [
        ("forward_us", h.forward_us.is_some()),
        ("backward_us", h.backward_us.is_some()),
    ] {
        match dispatch {
            Dispatch::PerOp => needs(field, present, true)?,
            Dispatch::Graph => needs(field, present, false)?,
            Dispatch::PerKernel => {}
        }
    }
    let op_times = |field: &str, table: &Option<BTreeMap<String, _>>| -> Result<Option<OpTimes>> {
        let Some(table) = table else { return Ok(None) };
        let default = match (table.get("default"), dispatch) {
            (Some(d), Dispatch::PerOp) => Some(us(&format!("host.{field}.default"), d)?),
            (None, Dispatch::PerOp) => {
                return Err(ctx.invalid(
                    &format!("host.{field}.default"),
                    "missing: give the time of an op of a kind the table does not list",
                ));
            }
            (Some(_), _) => {
                return Err(ctx.invalid(
                    &format!("host.{field}.default"),
                    format!(
                        "does not apply to dispatch `{dispatch}`: an op of a kind the table \
                         does not list costs its kernels (host.kernel_us each); remove it"
                    ),
                ));
            }
            (None, _) => None,
        };
        let mut kinds = BTreeMap::new();
        for (kind, r) in table.iter().filter(|(k, _)| *k != "default") {
            let known = crate::file::op_kinds().find(|k| k == kind).ok_or_else(|| {
                ctx.invalid(
                    &format!("host.{field}.{kind}"),
                    format!(
                        "`{kind}` is not an op kind; valid: default, {}",
                        crate::file::op_kinds().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            kinds.insert(known, us(&format!("host.{field}.{kind}"), r)?);
        }
        Ok(Some(OpTimes { default, kinds }))
    };
    Ok(Host {
        dispatch: Sourced {
            value: dispatch,
            source: ctx.source("host.dispatch", &h.dispatch.source)?,
        },
        kernel: h
            .kernel_us
            .as_ref()
            .map(|r| us("host.kernel_us", r))
            .transpose()?,
        graph: h
            .graph_us
            .as_ref()
            .map(|r| us("host.graph_us", r))
            .transpose()?,
        parameter: us("host.parameter_us", &h.parameter_us)?,
        optimizer_tensor: us("host.optimizer_tensor_us", &h.optimizer_tensor_us)?,
        forward: op_times("forward_us", &h.forward_us)?,
        backward: op_times("backward_us", &h.backward_us)?,
        cpu_kernels: h
            .cpu_kernels
            .as_ref()
            .map(|r| -> Result<Sourced<Software>> {
                let value = [Software::Ridgeline, Software::Onednn]
                    .into_iter()
                    .find(|s| s.name() == r.value)
                    .ok_or_else(|| {
                        ctx.invalid(
                            "host.cpu_kernels.value",
                            format!(
                                "`{}`: must be \"ridgeline\" (ridgeline's own CPU kernels) or \
                                 \"onednn\" (the libraries PyTorch calls: oneDNN, MKL)",
                                r.value
                            ),
                        )
                    })?;
                Ok(Sourced {
                    value,
                    source: ctx.source("host.cpu_kernels", &r.source)?,
                })
            })
            .transpose()?,
    })
}

/// A time in microseconds (`field`'s value, from 0 to [`MAX_US`]) with its source.
fn micros(
    ctx: &Ctx<'_>,
    field: &str,
    r: &crate::system::raw::RawSourced<f64>,
) -> Result<Sourced<Seconds>> {
    if !(r.value.is_finite() && (0.0..=MAX_US).contains(&r.value)) {
        return Err(ctx.invalid(
            &format!("{field}.value"),
            format!(
                "{}: must be a number of microseconds from 0 to {MAX_US}",
                r.value
            ),
        ));
    }
    Ok(Sourced {
        value: Seconds::new(r.value * 1e-6),
        source: ctx.source(field, &r.source)?,
    })
}

/// An error for a stack name that is neither built in nor a file.
pub(crate) fn unknown(name: &str, valid: Vec<String>) -> Error {
    Error::UnknownName {
        kind: "stack",
        name: name.to_owned(),
        valid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    #[test]
    fn every_built_in_stack_parses_and_names_its_file() {
        for name in catalog::stack_names() {
            let s = catalog::stack(&name).unwrap();
            assert_eq!(s.name, name);
            assert_eq!(s.file, format!("data/catalog/stacks/{name}.toml"));
            assert!(!s.host.dispatch.source.is_empty());
        }
        let e = catalog::stack("pytorch").unwrap_err().to_string();
        assert!(e.contains("unknown stack `pytorch`"), "{e}");
        assert!(e.contains("pytorch-eager"), "{e}");
    }

    /// A valid stack file to break one field at a time.
    const GOOD: &str = r#"
name = "t"
description = "test"
[sources]
s = "a source"
[host]
dispatch = { value = "per-kernel", source = "s" }
kernel_us = { value = 5.0, source = "s" }
parameter_us = { value = 1.0, source = "s" }
optimizer_tensor_us = { value = 1.0, source = "s" }
[device]
kernel_gap_us = { value = 1.0, source = "s" }
[fusion]
rules = { value = ["norm-activation"], source = "s" }
[precision]
fp32_convolutions = { value = "tf32", source = "s" }
fp32_matmuls = { value = "fp32", source = "s" }
fp8 = { value = "none", source = "s" }
[memory]
recompute = { value = "none", source = "s" }
[data]
packing = { value = false, source = "s" }
[parallel]
schedule = { value = "1f1b", source = "s" }
distributed_optimizer = { value = false, source = "s" }
sequence_parallel = { value = false, source = "s" }
overlap_gradients = { value = true, source = "s" }
overlap_tensor_parallel = { value = false, source = "s" }
"#;

    fn error(from: &str, to: &str) -> String {
        assert!(GOOD.contains(from), "{from}");
        parse(&GOOD.replace(from, to), "t.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn bad_stack_files_name_the_file_the_field_and_the_fix() {
        let s = parse(GOOD, "t.toml").unwrap();
        assert_eq!(s.host.dispatch.value, Dispatch::PerKernel);
        assert!(s.fuses(FusionRule::NormActivation));
        let cases = [
            (
                "\"norm-activation\"",
                "\"bn-relu\"",
                "fusion.rules.value[0]",
            ),
            (
                "\"norm-activation\"",
                "\"norm-activation\", \"norm-activation\"",
                "listed twice",
            ),
            ("\"per-kernel\"", "\"lazy\"", "host.dispatch.value"),
            (
                "kernel_us = { value = 5.0",
                "kernel_us = { value = -5.0",
                "host.kernel_us.value",
            ),
            (
                "kernel_us = { value = 5.0, source = \"s\" }",
                "",
                "host.kernel_us`: missing",
            ),
            (
                "\"per-kernel\"",
                "\"graph\"",
                "host.kernel_us`: does not apply to dispatch `graph`",
            ),
            (
                "value = \"tf32\"",
                "value = \"fp8\"",
                "precision.fp32_convolutions.value",
            ),
            (
                "kernel_gap_us = { value = 1.0, source = \"s\" }",
                "kernel_gap_us = { value = 1.0, source = \"t\" }",
                "device.kernel_gap_us.source",
            ),
            (
                "kernel_gap_us = { value = 1.0, source = \"s\" }",
                "kernel_gap_us = 1.0",
                "every figure carries its source",
            ),
            ("[device]", "[device]\nspeed = 1", "unknown field `speed`"),
            (
                "value = \"1f1b\"",
                "value = \"interleaved\"",
                "parallel.schedule.value",
            ),
            (
                "distributed_optimizer = { value = false",
                "distributed_optimizer = { value = \"no\"",
                "distributed_optimizer = { value = \"no\"",
            ),
            (
                "fp8 = { value = \"none\"",
                "fp8 = { value = \"all\"",
                "precision.fp8.value",
            ),
            (
                "recompute = { value = \"none\"",
                "recompute = { value = \"some\"",
                "memory.recompute.value",
            ),
            (
                "recompute = { value = \"none\", source = \"s\" }",
                "",
                "missing field `recompute`",
            ),
            (
                "sequence_parallel = { value = false, source = \"s\" }",
                "sequence_parallel = { value = false, source = \"x\" }",
                "parallel.sequence_parallel.source",
            ),
        ];
        for (from, to, expect) in cases {
            let e = error(from, to);
            assert!(e.starts_with("t.toml"), "{e}");
            assert!(e.contains(expect), "{from} -> {to}: {e}");
        }
        // Per op: the tables, with op kinds as keys.
        let per_op = GOOD
            .replace("\"per-kernel\"", "\"per-op\"")
            .replace("kernel_us = { value = 5.0, source = \"s\" }\n", "");
        let e = parse(&per_op, "t.toml").unwrap_err().to_string();
        assert!(e.contains("host.forward_us`: missing"), "{e}");
        let tables = format!(
            "{per_op}[host.forward_us]\ndefault = {{ value = 30.0, source = \"s\" }}\n\
             conv2d = {{ value = 80.0, source = \"s\" }}\n[host.backward_us]\n\
             default = {{ value = 30.0, source = \"s\" }}\n"
        );
        let e = parse(&tables, "t.toml").unwrap_err().to_string();
        assert!(e.contains("host.forward_us.conv2d"), "{e}");
        assert!(e.contains("not an op kind; valid: default, "), "{e}");
        let s = parse(&tables.replace("conv2d =", "conv ="), "t.toml").unwrap();
        let f = s.host.forward.unwrap();
        assert!((f.of("conv").unwrap() - 80e-6).abs() < 1e-15);
        assert!((f.of("relu").unwrap() - 30e-6).abs() < 1e-15);
        // Per kernel, a table lists kinds of their own and takes no default.
        let kernel =
            format!("{GOOD}[host.backward_us]\nconv = {{ value = 300.0, source = \"s\" }}\n");
        let s = parse(&kernel, "t.toml").unwrap();
        let b = s.host.backward.unwrap();
        assert!(b.of("relu").is_none());
        assert!(b.of("conv").is_some());
        let e = parse(&kernel.replace("conv = ", "default = "), "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("host.backward_us.default") && e.contains("does not apply"),
            "{e}"
        );
    }

    #[test]
    fn fp32_training_runs_convolutions_in_tf32_where_the_policy_says() {
        let s = parse(GOOD, "t.toml").unwrap();
        let conv = Op::conv(crate::graph::Conv::new(8, &[3, 3]));
        let dense = Op::Dense {
            out_features: 8,
            bias: true,
        };
        let p = &s.precision;
        assert_eq!(
            p.matrix_precision(&conv, false, Precision::Fp32),
            Precision::Tf32
        );
        assert_eq!(
            p.matrix_precision(&dense, false, Precision::Fp32),
            Precision::Fp32
        );
        assert_eq!(
            p.matrix_precision(&Op::Relu, false, Precision::Fp32),
            Precision::Fp32
        );
        assert_eq!(
            p.matrix_precision(&conv, false, Precision::AmpFp16),
            Precision::AmpFp16
        );
    }

    #[test]
    fn fp8_training_runs_the_transformer_layers_linear_layers_in_fp8_where_the_stack_can() {
        let dense = Op::Dense {
            out_features: 8,
            bias: true,
        };
        let conv = Op::conv(crate::graph::Conv::new(8, &[3, 3]));
        let te = catalog::stack("megatron-te").unwrap();
        let p = &te.precision;
        assert_eq!(p.fp8.value, Fp8Layers::Linear);
        assert_eq!(
            p.matrix_precision(&dense, true, Precision::Fp8),
            Precision::Fp8
        );
        // The head and the embeddings, and every other matrix op, stay BF16.
        assert_eq!(
            p.matrix_precision(&dense, false, Precision::Fp8),
            Precision::AmpBf16
        );
        assert_eq!(
            p.matrix_precision(&conv, true, Precision::Fp8),
            Precision::AmpBf16
        );
        assert!(te.check_precision(Precision::Fp8).is_ok());
        // A stack without an FP8 recipe refuses FP8 training, naming the field and the fix.
        let eager = catalog::default_stack();
        let e = eager
            .check_precision(Precision::Fp8)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("data/catalog/stacks/pytorch-eager.toml") && e.contains("precision.fp8"),
            "{e}"
        );
        assert!(e.contains("megatron-te"), "{e}");
        assert!(eager.check_precision(Precision::AmpBf16).is_ok());
    }
}
