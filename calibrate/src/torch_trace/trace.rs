//! A PyTorch profiler trace, parsed: its CPU ops, steps, optimizer spans, GPU kernels,
//! launches and collectives, and what it says of the run (input, precision, ranks).

use std::collections::HashMap;

use ridgeline_model::precision::Precision;
use serde_json::Value;

use crate::error::{Error, Result};

/// The longest op or kernel a trace may give, microseconds (one hour).
pub(super) const MAX_DUR_US: f64 = 3.6e9;
/// The largest `ts` (microseconds since the Unix epoch: year 33,658).
pub(super) const MAX_TS_US: f64 = 1e18;
/// The largest batch a trace's first input may give.
pub(super) const MAX_BATCH: usize = 1 << 20;
/// The largest size of one dimension of the first input.
pub(super) const MAX_DIM: usize = 1 << 24;

/// The prefix of a backward function's span.
pub(super) const BACKWARD: &str = "autograd::engine::evaluate_function: ";

/// One CPU op of the trace.
#[derive(Debug, Clone)]
pub(super) struct TraceOp {
    pub(super) name: String,
    pub(super) tid: String,
    /// Start, microseconds.
    pub(super) ts: f64,
    /// Duration, microseconds.
    pub(super) dur: f64,
    pub(super) seq: Option<i64>,
    pub(super) external: Option<i64>,
    pub(super) dims: Vec<Vec<i64>>,
    pub(super) types: Vec<String>,
    /// The op around it on its thread.
    pub(super) parent: Option<usize>,
}

impl TraceOp {
    /// A `cpu_op` event `e` named `name` with its `args`, at `ts` for `dur` microseconds.
    fn of(name: &str, e: &Value, args: &Value, ts: f64, dur: f64) -> TraceOp {
        let dims = args
            .get("Input Dims")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|d| {
                        d.as_array()
                            .map(|d| d.iter().filter_map(Value::as_i64).collect())
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        let types = args
            .get("Input type")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|t| t.as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        TraceOp {
            name: name.to_owned(),
            tid: e.get("tid").map(Value::to_string).unwrap_or_default(),
            ts,
            dur,
            seq: args.get("Sequence number").and_then(Value::as_i64),
            external: args.get("External id").and_then(Value::as_i64),
            dims,
            types,
            parent: None,
        }
    }

    pub(super) fn end(&self) -> f64 {
        self.ts + self.dur
    }
}

/// A GPU kernel: its start and duration, and when the call that launched it returned
/// (microseconds).
#[derive(Debug, Clone, Copy)]
pub(super) struct GpuKernel {
    pub(super) ts: f64,
    pub(super) dur: f64,
    pub(super) launched: Option<f64>,
}

/// The CUDA runtime calls that launch a kernel.
pub(super) const LAUNCHES: [&str; 4] = [
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
];

/// A `user_annotation` span.
#[derive(Debug, Clone)]
pub(super) struct Span {
    pub(super) ts: f64,
    pub(super) dur: f64,
}

impl Span {
    pub(super) fn holds(&self, t: f64) -> bool {
        t >= self.ts && t <= self.ts + self.dur
    }
}

/// A profiler trace, parsed.
#[derive(Debug, Clone)]
pub struct Trace {
    pub(super) file: String,
    pub(super) ops: Vec<TraceOp>,
    pub(super) steps: Vec<Span>,
    pub(super) optimizer: Vec<Span>,
    /// GPU kernel time per `External id`, microseconds, where the trace has kernels.
    pub(super) kernels: Option<HashMap<i64, f64>>,
    /// Every GPU kernel, for the gaps between them.
    pub(super) gpu_kernels: Vec<GpuKernel>,
    /// Each kernel launch call's duration, microseconds.
    pub(super) launches: Vec<f64>,
    /// Collective communication: its spans (NCCL kernels on a GPU; the `gloo:`, `nccl:` and
    /// `mpi:` annotations the process group's threads record on a CPU).
    pub(super) comm: Vec<Span>,
    /// Data-parallel ranks (`distributedInfo.world_size`), where the trace says.
    pub(super) ranks: Option<usize>,
    /// The first GPU of `deviceProperties`.
    pub(super) gpu: Option<Value>,
    /// `baseTimeNanoseconds`: when the trace was taken.
    pub(super) base_ns: Option<u64>,
}

pub(super) fn number(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

impl Trace {
    /// Reads the trace at `path`: its JSON, or gzip-compressed JSON where the name ends in
    /// `.gz`.
    pub fn read(path: &std::path::Path) -> Result<Trace> {
        use std::io::Read;
        let file = path.display().to_string();
        let io = |e: std::io::Error| Error::Input(format!("{file}: {e}"));
        let mut text = String::new();
        let f = std::fs::File::open(path).map_err(io)?;
        if path.extension().is_some_and(|e| e == "gz") {
            flate2::read::GzDecoder::new(f)
                .read_to_string(&mut text)
                .map_err(|e| {
                    Error::Input(format!(
                        "{file}: {e}; the gzip stream is damaged or cut short"
                    ))
                })?;
        } else {
            std::io::BufReader::new(f)
                .read_to_string(&mut text)
                .map_err(io)?;
        }
        Trace::parse(&text, &file)
    }

    /// Reads the trace `text` (`file` names it in errors). JSON that does not parse is an
    /// error naming its line and column; an event without the fields its kind needs is an
    /// error naming the event.
    pub fn parse(text: &str, file: &str) -> Result<Trace> {
        let root: Value = serde_json::from_str(text).map_err(|e| {
            Error::Input(format!(
                "{file}: line {} column {}: {e}; the trace is damaged or cut short (export \
                 it again with `prof.export_chrome_trace`)",
                e.line(),
                e.column()
            ))
        })?;
        let events = root
            .get("traceEvents")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                Error::Input(format!(
                    "{file}: no `traceEvents` list: not a PyTorch profiler trace"
                ))
            })?;
        let mut ops = Vec::new();
        let mut steps = Vec::new();
        let mut optimizer = Vec::new();
        let mut kernels: Option<HashMap<i64, f64>> = None;
        let (mut comm_kernels, mut comm_annotations) = (Vec::new(), Vec::new());
        // Kernels with their correlation id, and when each runtime call returned.
        let mut launched_kernels: Vec<(GpuKernel, Option<i64>)> = Vec::new();
        let mut returned: HashMap<i64, f64> = HashMap::new();
        let mut launches = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if e.get("ph").and_then(Value::as_str) != Some("X") {
                continue;
            }
            let bad = |what: &str| {
                Error::Input(format!(
                    "{file}: event {i} (`traceEvents[{i}]`): {what}; the trace is damaged"
                ))
            };
            let (name, ts, dur) = span_of(e, &bad)?;
            let args = e.get("args").cloned().unwrap_or(Value::Null);
            let arg_i64 = |k: &str| args.get(k).and_then(Value::as_i64);
            match e.get("cat").and_then(Value::as_str) {
                Some("cpu_op") => ops.push(TraceOp::of(name, e, &args, ts, dur)),
                Some("user_annotation") => {
                    let span = Span { ts, dur };
                    if name.starts_with("ProfilerStep#") {
                        steps.push(span);
                    } else if name.starts_with("Optimizer.") {
                        optimizer.push(span);
                    } else if ["gloo:", "nccl:", "mpi:"]
                        .iter()
                        .any(|p| name.starts_with(p))
                        && gradient_collective(name)
                    {
                        comm_annotations.push(span);
                    }
                }
                Some("cuda_runtime") => {
                    if let Some(c) = arg_i64("correlation") {
                        returned.insert(c, ts + dur);
                    }
                    if LAUNCHES.contains(&name) {
                        launches.push(dur);
                    }
                }
                Some("kernel") => {
                    launched_kernels.push((
                        GpuKernel {
                            ts,
                            dur,
                            launched: None,
                        },
                        arg_i64("correlation"),
                    ));
                    let id = arg_i64("External id")
                        .ok_or_else(|| bad("a kernel without its `External id`"))?;
                    *kernels
                        .get_or_insert_with(HashMap::new)
                        .entry(id)
                        .or_default() += dur;
                    if name.to_lowercase().contains("nccl") && gradient_collective(name) {
                        comm_kernels.push(Span { ts, dur });
                    }
                }
                _ => {}
            }
        }
        if ops.is_empty() {
            return Err(Error::Input(format!(
                "{file}: no CPU ops (`cpu_op` events); profile with \
                 `activities=[ProfilerActivity.CPU, ...]`"
            )));
        }
        nest(&mut ops);
        steps.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        Ok(Trace {
            file: file.to_owned(),
            ops,
            steps,
            optimizer,
            // On a GPU the collectives' time is their kernels'; the CPU-side annotations
            // only enqueue them.
            comm: if kernels.is_some() {
                comm_kernels
            } else {
                comm_annotations
            },
            ranks: root
                .pointer("/distributedInfo/world_size")
                .and_then(Value::as_u64)
                .and_then(|n| usize::try_from(n).ok()),
            kernels,
            gpu_kernels: launched_kernels
                .into_iter()
                .map(|(k, c)| GpuKernel {
                    launched: c.and_then(|c| returned.get(&c).copied()),
                    ..k
                })
                .collect(),
            launches,
            gpu: root
                .get("deviceProperties")
                .and_then(Value::as_array)
                .and_then(|d| d.first())
                .cloned(),
            base_ns: root.get("baseTimeNanoseconds").and_then(Value::as_u64),
        })
    }

    /// Data-parallel ranks of the traced run (`distributedInfo.world_size`), where it says.
    pub fn ranks(&self) -> Option<usize> {
        self.ranks
    }

    /// The output channels of the trace's first convolution (its weight's first
    /// dimension, `aten::convolution`'s second input), where it has one and recorded shapes.
    pub fn first_conv_channels(&self) -> Option<usize> {
        self.ops
            .iter()
            .find(|o| o.name == "aten::convolution" && o.dims.get(1).is_some_and(|w| w.len() >= 3))
            .and_then(|o| usize::try_from(o.dims[1][0]).ok())
    }

    /// Whether the trace times GPU kernels (op times are their kernels').
    pub fn on_gpu(&self) -> bool {
        self.kernels.is_some()
    }

    /// The top-level ops of the profiled steps, in order, each with its step.
    pub(super) fn top_level(&self) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = self
            .ops
            .iter()
            .enumerate()
            .filter(|(_, o)| o.parent.is_none())
            .filter_map(|(i, o)| {
                if self.steps.is_empty() {
                    return Some((i, 0));
                }
                self.steps
                    .iter()
                    .position(|s| s.holds(o.ts))
                    .map(|s| (i, s))
            })
            .collect();
        out.sort_by(|a, b| self.ops[a.0].ts.total_cmp(&self.ops[b.0].ts));
        out
    }

    /// The ops nested in op `i`, itself included.
    pub(super) fn subtree(&self, i: usize) -> Vec<usize> {
        let mut out = vec![i];
        let mut k = 0;
        while k < out.len() {
            let p = out[k];
            out.extend(
                self.ops
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.parent == Some(p))
                    .map(|(j, _)| j),
            );
            k += 1;
        }
        out
    }

    /// Op `i`'s time, seconds: its span, or its kernels' where the trace has kernels.
    pub(super) fn seconds(&self, i: usize) -> f64 {
        match &self.kernels {
            None => self.ops[i].dur / 1e6,
            Some(k) => {
                self.subtree(i)
                    .iter()
                    .filter_map(|&j| self.ops[j].external.and_then(|e| k.get(&e)))
                    .sum::<f64>()
                    / 1e6
            }
        }
    }

    /// The first forward op's first input: the batch and the per-sample shape the trace
    /// was taken at.
    pub fn input(&self) -> Result<(usize, Vec<usize>)> {
        self.top_level()
            .into_iter()
            .map(|(i, _)| &self.ops[i])
            .find(|o| !o.name.starts_with(BACKWARD) && o.dims.first().is_some_and(|d| d.len() >= 2))
            .map(|o| (o, &o.dims[0]))
            .ok_or_else(|| {
                Error::Input(format!(
                    "{}: no op with input shapes; profile with `record_shapes=True`",
                    self.file
                ))
            })
            .and_then(|(o, d)| {
                let bad = |what: String| {
                    Error::Input(format!(
                        "{}: op `{}`: `Input Dims` {d:?}: {what}; the trace is damaged",
                        self.file, o.name
                    ))
                };
                let dims: Vec<usize> = d
                    .iter()
                    .map(|&v| {
                        usize::try_from(v)
                            .ok()
                            .filter(|v| (1..=MAX_DIM).contains(v))
                            .ok_or_else(|| bad(format!("{v} is not a size from 1 to {MAX_DIM}")))
                    })
                    .collect::<Result<_>>()?;
                if dims[0] > MAX_BATCH {
                    return Err(bad(format!(
                        "a batch of {} is beyond any profiled step (at most {MAX_BATCH})",
                        dims[0]
                    )));
                }
                Ok((dims[0], dims[1..].to_vec()))
            })
    }

    /// The training precision: FP32 where the first convolution or product takes `float`;
    /// mixed precision where it takes 16-bit floats.
    pub fn precision(&self) -> Result<Precision> {
        let first = self.ops.iter().find(|o| {
            matches!(
                o.name.as_str(),
                "aten::convolution" | "aten::mm" | "aten::addmm" | "aten::bmm"
            )
        });
        match first.and_then(|o| o.types.first()).map(String::as_str) {
            Some("float") | None => Ok(Precision::Fp32),
            Some("c10::Half") => Ok(Precision::AmpFp16),
            Some("c10::BFloat16") => Ok(Precision::AmpBf16),
            Some(other) => Err(Error::Input(format!(
                "{}: the first convolution or product takes `{other}`, not a training \
                 precision ridgeline models (float, c10::Half, c10::BFloat16)",
                self.file
            ))),
        }
    }
}

/// Whether a collective's span or kernel is one that reduces or gathers gradients (an
/// allreduce, reduce-scatter or all-gather: `gloo:all_reduce`,
/// `ncclDevKernel_AllReduce_Sum_f32_RING_LL`), not a broadcast of buffers or a barrier.
pub(super) fn gradient_collective(name: &str) -> bool {
    let n: String = name.to_lowercase().chars().filter(|c| *c != '_').collect();
    ["allreduce", "reducescatter", "allgather"]
        .iter()
        .any(|k| n.contains(k))
}

/// A complete event's name, start and duration (microseconds), checked to be a span of a
/// profiled step; `bad` words the error.
fn span_of<'e>(e: &'e Value, bad: &dyn Fn(&str) -> Error) -> Result<(&'e str, f64, f64)> {
    let name = e
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("no `name`"))?;
    let ts = e.get("ts").and_then(number).ok_or_else(|| bad("no `ts`"))?;
    let dur = e
        .get("dur")
        .and_then(number)
        .ok_or_else(|| bad("no `dur`"))?;
    if !(ts.is_finite() && dur.is_finite() && dur >= 0.0) {
        return Err(bad(&format!("`ts` {ts} or `dur` {dur} is not a span")));
    }
    // A profiled op or kernel of over an hour is no step's (the profiler writes
    // microseconds).
    if dur > MAX_DUR_US || ts.abs() > MAX_TS_US {
        return Err(bad(&format!(
            "`dur` {dur} us or `ts` {ts} us is beyond any profiled step (an op at most \
             {MAX_DUR_US:e} us, one hour; times since the epoch at most {MAX_TS_US:e} \
             us)"
        )));
    }
    Ok((name, ts, dur))
}

/// Sets each op's parent: the op around it on its thread (the longest first where two
/// start together).
fn nest(ops: &mut [TraceOp]) {
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by(|&a, &b| {
        (ops[a].tid.as_str(), ops[a].ts)
            .partial_cmp(&(ops[b].tid.as_str(), ops[b].ts))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(ops[b].dur.total_cmp(&ops[a].dur))
    });
    let mut stack: Vec<usize> = Vec::new();
    for i in order {
        while let Some(&top) = stack.last() {
            let t = &ops[top];
            if t.tid == ops[i].tid && ops[i].ts >= t.ts && ops[i].end() <= t.end() + 1e-3 {
                break;
            }
            stack.pop();
        }
        ops[i].parent = stack.last().copied();
        stack.push(i);
    }
}
