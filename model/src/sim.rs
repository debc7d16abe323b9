//! A discrete-event simulator of one data-parallel training step on every rank
//! (docs/ARCHITECTURE.md "Inside a step"), between the analytical step's two limits
//! (`--overlap none`, the sum of compute, input and allreduce; `--overlap full`, their
//! maximum):
//!
//! - **compute**: each rank runs its layers' forward passes in order, then their backward
//!   passes in reverse, one after another on one stream, each at the time the model gives it
//!   (calibrated, transferred or ideal), scaled per rank and layer by a factor drawn from a
//!   normal distribution of the given coefficient of variation (seeded: the same seed gives
//!   the same step);
//! - **gradient buckets**, as PyTorch DDP fills them (`DDP_BUCKET_BYTES`, 25 MiB by default):
//!   in the order backward produces the gradients (last layer first), a bucket closes when it
//!   holds at least the bucket size, and the last one when backward ends; a bucket is ready
//!   when its last gradient is ready on every rank (an allreduce waits for the slowest rank);
//! - **communication**: with overlap, each ready bucket is allreduced on a communication
//!   stream beside backward, in order, each as soon as it is ready and the stream is free,
//!   at the collective model's time for its bytes; without, every bucket after backward;
//! - **the optimizer** after backward and the last allreduce;
//! - **the input pipeline**: with a prefetch depth of one step or more, the next step's input
//!   is read during this one, so a step takes at least the input's time; with none, the step
//!   reads its input first.
//!
//! The step ends when the slowest rank's optimizer does. [`Simulated::spans`] is that rank's
//! timeline (its compute and input, and the shared communication); [`chrome_trace`] writes it
//! in the Chrome trace event format that Perfetto and chrome://tracing open.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal};

/// PyTorch DDP's default gradient bucket, bytes (`bucket_cap_mb = 25`).
pub const DDP_BUCKET_BYTES: f64 = 25.0 * 1024.0 * 1024.0;

/// PyTorch DDP's first gradient bucket, bytes (`torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`,
/// 1 MiB): the last layers' gradients go out early in a small bucket of their own.
pub const DDP_FIRST_BUCKET_BYTES: f64 = 1024.0 * 1024.0;

/// The least a layer's time is scaled to by its variability draw.
const MIN_FACTOR: f64 = 0.05;

/// One layer as the simulator needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimLayer {
    /// Its name.
    pub name: String,
    /// Forward time on one rank, seconds.
    pub forward_s: f64,
    /// Backward time, seconds.
    pub backward_s: f64,
    /// Bytes of its gradients (parameters times the gradient's bytes per element).
    pub gradient_bytes: f64,
    /// A collective every rank runs inside the layer, forward and backward, seconds (a
    /// mixture of experts' all-to-alls under expert parallelism): it starts when the
    /// slowest rank reaches it, and every rank leaves it together. Zero: none.
    #[serde(default, skip_serializing_if = "no_exchange")]
    pub exchange_s: [f64; 2],
}

/// Whether a layer runs no collective of its own (serde leaves the field out).
fn no_exchange(e: &[f64; 2]) -> bool {
    e.iter().all(|&v| v <= 0.0)
}

/// How the step runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimOptions {
    /// Bytes a gradient bucket holds before it is allreduced ([`DDP_BUCKET_BYTES`];
    /// `f64::INFINITY`: one bucket, after backward).
    pub bucket_bytes: f64,
    /// Bytes the first bucket (the last layers' gradients) holds ([`DDP_FIRST_BUCKET_BYTES`];
    /// `f64::INFINITY` with an infinite `bucket_bytes`: one bucket).
    pub first_bucket_bytes: f64,
    /// Whether buckets are allreduced beside backward as they fill (else after it).
    pub overlap: bool,
    /// The time to read and prepare one step's input, seconds.
    pub input_s: f64,
    /// Steps of input read ahead (0: a step reads its own first).
    pub prefetch: u32,
    /// The optimizer update, seconds.
    pub optimizer_s: f64,
    /// Data-parallel ranks.
    pub ranks: u32,
    /// Per rank and layer, the coefficient of variation of a layer's time (0: every rank
    /// alike).
    pub cv: f64,
    /// The seed of the variability draws.
    pub seed: u64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            bucket_bytes: DDP_BUCKET_BYTES,
            first_bucket_bytes: DDP_FIRST_BUCKET_BYTES,
            overlap: true,
            input_s: 0.0,
            prefetch: 1,
            optimizer_s: 0.0,
            ranks: 1,
            cv: 0.0,
            seed: 0,
        }
    }
}

/// A stream of the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stream {
    /// The input pipeline (reading the next step's input where it prefetches).
    Input,
    /// Forward, backward and the optimizer.
    Compute,
    /// Gradient allreduces.
    Communication,
}

impl Stream {
    /// Its name in the trace.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Input => "input",
            Stream::Compute => "compute",
            Stream::Communication => "communication",
        }
    }
}

/// One span of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Span {
    /// Its stream.
    pub stream: Stream,
    /// What runs.
    pub name: String,
    /// Start from the step's start, seconds.
    pub start_s: f64,
    /// Duration, seconds.
    pub duration_s: f64,
}

/// A simulated step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simulated {
    /// The step, seconds: the slowest rank's optimizer end, and at least the input's time
    /// where the input is prefetched.
    pub step_s: f64,
    /// The slowest rank's forward and backward, seconds.
    pub compute_s: f64,
    /// Communication that runs after backward ends (the step waits on it), seconds.
    pub exposed_comm_s: f64,
    /// Gradient buckets allreduced.
    pub buckets: usize,
    /// The slowest rank's timeline.
    pub spans: Vec<Span>,
}

/// The gradient buckets of `layers` (in forward order) in the order backward fills them, as
/// DDP fills them: layers' gradients from the last layer back, the first bucket closed once
/// it holds `first_bytes`, each later one once it holds `bucket_bytes` (and the last at the
/// first layer). Each bucket is the index of its earliest layer, whose backward completes
/// it, and its bytes.
pub fn buckets(layers: &[SimLayer], first_bytes: f64, bucket_bytes: f64) -> Vec<(usize, f64)> {
    let mut out: Vec<(usize, f64)> = Vec::new();
    let mut held = 0.0;
    for i in (0..layers.len()).rev() {
        held += layers[i].gradient_bytes;
        let cap = if out.is_empty() {
            first_bytes
        } else {
            bucket_bytes
        };
        if held > 0.0 && (held >= cap || i == 0) {
            out.push((i, held));
            held = 0.0;
        }
    }
    out
}

/// Every rank's `(forward, backward)` time of each layer, each the layer's time times a
/// factor drawn from a normal distribution of spread `o.cv` (at least [`MIN_FACTOR`]),
/// rank by rank from the seeded stream; the layers' own times without a spread.
fn draw(layers: &[SimLayer], o: &SimOptions) -> Vec<Vec<(f64, f64)>> {
    let normal = Normal::new(0.0, 1.0).ok();
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut factor = || -> f64 {
        match (&normal, o.cv > 0.0) {
            (Some(z), true) => {
                let u: f64 = rng.random_range(f64::EPSILON..1.0);
                (1.0 + o.cv * z.inverse_cdf(u)).max(MIN_FACTOR)
            }
            _ => 1.0,
        }
    };
    (0..o.ranks.max(1))
        .map(|_| {
            layers
                .iter()
                .map(|l| (l.forward_s * factor(), l.backward_s * factor()))
                .collect()
        })
        .collect()
}

/// Simulates one step of `layers` (in forward order) with `allreduce` giving the time of an
/// allreduce of so many bytes across the ranks.
pub fn simulate(layers: &[SimLayer], allreduce: &dyn Fn(f64) -> f64, o: &SimOptions) -> Simulated {
    let n = layers.len();
    let ranks = o.ranks.max(1) as usize;
    let t0 = if o.prefetch == 0 { o.input_s } else { 0.0 };
    let buckets = buckets(layers, o.first_bucket_bytes, o.bucket_bytes);
    // Every rank's layer times, drawn rank by rank.
    let drawn = draw(layers, o);
    // The ranks run side by side; a layer's collective waits for the slowest of them.
    let mut clock = vec![t0; ranks];
    let sync = |clock: &mut [f64], d: f64| {
        if d > 0.0 {
            let start = clock.iter().copied().fold(f64::MIN, f64::max);
            clock.iter_mut().for_each(|c| *c = start + d);
        }
    };
    for (i, l) in layers.iter().enumerate() {
        for (c, times) in clock.iter_mut().zip(&drawn) {
            *c += times[i].0;
        }
        sync(&mut clock, l.exchange_s[0]);
    }
    // Per layer, the latest end of its backward over the ranks.
    let mut ready = vec![0.0f64; n];
    for i in (0..n).rev() {
        for (c, times) in clock.iter_mut().zip(&drawn) {
            *c += times[i].1;
        }
        sync(&mut clock, layers[i].exchange_s[1]);
        ready[i] = clock.iter().copied().fold(0.0, f64::max);
    }
    // The critical rank: the last to end its backward (the first of equals).
    let critical = (0..ranks).fold(None, |best: Option<usize>, r| match best {
        Some(b) if clock[b] >= clock[r] => Some(b),
        _ => Some(r),
    });
    let (backward_end, times) = match critical {
        Some(r) => (clock[r], drawn[r].clone()),
        None => (t0, Vec::new()),
    };
    let mut spans = Vec::new();
    if o.input_s > 0.0 {
        spans.push(Span {
            stream: Stream::Input,
            name: if o.prefetch == 0 {
                "input".into()
            } else {
                "input (next step)".into()
            },
            start_s: 0.0,
            duration_s: o.input_s,
        });
    }
    // The critical rank's compute, replayed with the collectives' waits: each starts when
    // the slowest rank arrives, which the ranks' clocks give.
    let mut t = t0;
    let mut others = vec![t0; ranks];
    let exchange =
        |t: &mut f64, others: &mut Vec<f64>, name: String, d: f64, spans: &mut Vec<Span>| {
            if d > 0.0 {
                let start = others.iter().copied().fold(*t, f64::max);
                spans.push(Span {
                    stream: Stream::Compute,
                    name,
                    start_s: start,
                    duration_s: d,
                });
                *t = start + d;
                others.iter_mut().for_each(|c| *c = start + d);
            }
        };
    for (i, (l, (f, _))) in layers.iter().zip(&times).enumerate() {
        spans.push(Span {
            stream: Stream::Compute,
            name: format!("{} forward", l.name),
            start_s: t,
            duration_s: *f,
        });
        t += f;
        for (c, d) in others.iter_mut().zip(&drawn) {
            *c += d[i].0;
        }
        exchange(
            &mut t,
            &mut others,
            format!("{} exchange forward", l.name),
            l.exchange_s[0],
            &mut spans,
        );
    }
    for (i, (l, (_, b))) in layers.iter().zip(&times).enumerate().rev() {
        spans.push(Span {
            stream: Stream::Compute,
            name: format!("{} backward", l.name),
            start_s: t,
            duration_s: *b,
        });
        t += b;
        for (c, d) in others.iter_mut().zip(&drawn) {
            *c += d[i].1;
        }
        exchange(
            &mut t,
            &mut others,
            format!("{} exchange backward", l.name),
            l.exchange_s[1],
            &mut spans,
        );
    }
    let mut comm_free = if o.overlap { 0.0 } else { backward_end };
    for (k, &(first, bytes)) in buckets.iter().enumerate() {
        let start = comm_free.max(if o.overlap { ready[first] } else { 0.0 });
        let d = allreduce(bytes);
        spans.push(Span {
            stream: Stream::Communication,
            name: format!("allreduce bucket {k} ({bytes:.0} B)"),
            start_s: start,
            duration_s: d,
        });
        comm_free = start + d;
    }
    let comm_end = if buckets.is_empty() { 0.0 } else { comm_free };
    let optimizer_start = backward_end.max(comm_end);
    if o.optimizer_s > 0.0 {
        spans.push(Span {
            stream: Stream::Compute,
            name: "optimizer".into(),
            start_s: optimizer_start,
            duration_s: o.optimizer_s,
        });
    }
    let end = optimizer_start + o.optimizer_s;
    Simulated {
        step_s: if o.prefetch == 0 {
            end
        } else {
            end.max(o.input_s)
        },
        compute_s: backward_end - t0,
        exposed_comm_s: optimizer_start - backward_end,
        buckets: buckets.len(),
        spans,
    }
}

/// `sim`'s timeline in the Chrome trace event format (complete events, microseconds, one
/// thread a stream under one process named `process`), which Perfetto and chrome://tracing
/// open.
pub fn chrome_trace(sim: &Simulated, process: &str) -> serde_json::Value {
    let tid = |s: Stream| match s {
        Stream::Input => 0,
        Stream::Compute => 1,
        Stream::Communication => 2,
    };
    let mut events = vec![serde_json::json!({
        "name": "process_name", "ph": "M", "pid": 0, "args": { "name": process }
    })];
    for s in [Stream::Input, Stream::Compute, Stream::Communication] {
        events.push(serde_json::json!({
            "name": "thread_name", "ph": "M", "pid": 0, "tid": tid(s),
            "args": { "name": s.name() }
        }));
    }
    for sp in &sim.spans {
        events.push(serde_json::json!({
            "name": sp.name,
            "cat": sp.stream.name(),
            "ph": "X",
            "pid": 0,
            "tid": tid(sp.stream),
            "ts": sp.start_s * 1e6,
            "dur": sp.duration_s * 1e6,
        }));
    }
    serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layers(times: &[(f64, f64, f64)]) -> Vec<SimLayer> {
        times
            .iter()
            .enumerate()
            .map(|(i, &(f, b, g))| SimLayer {
                name: format!("l{i}"),
                forward_s: f,
                backward_s: b,
                gradient_bytes: g,
                exchange_s: [0.0; 2],
            })
            .collect()
    }

    fn net(bytes: f64) -> f64 {
        1e-5 + bytes / 1e10
    }

    /// A layer's collective (an all-to-all) waits for the slowest rank: with every rank
    /// alike the step is compute plus the collectives; with ranks that vary, the step is at
    /// least the same simulation without the collectives plus their time, and the critical
    /// rank's timeline shows each collective after its layer.
    #[test]
    fn a_layers_collective_waits_for_every_rank() {
        let mut l = layers(&[(1e-3, 2e-3, 0.0), (1e-3, 2e-3, 0.0), (1e-3, 2e-3, 0.0)]);
        l[1].exchange_s = [4e-4, 5e-4];
        let none = |_: f64| 0.0;
        let alike = SimOptions {
            ranks: 8,
            ..SimOptions::default()
        };
        let s = simulate(&l, &none, &alike);
        assert!((s.step_s - (9e-3 + 9e-4)).abs() < 1e-12, "{}", s.step_s);
        let names: Vec<&str> = s.spans.iter().map(|p| p.name.as_str()).collect();
        let at = |n: &str| names.iter().position(|m| *m == n).unwrap();
        assert_eq!(at("l1 exchange forward"), at("l1 forward") + 1);
        assert_eq!(at("l1 exchange backward"), at("l1 backward") + 1);
        let varied = SimOptions {
            ranks: 8,
            cv: 0.2,
            seed: 3,
            ..SimOptions::default()
        };
        let with = simulate(&l, &none, &varied);
        let plain = simulate(&layers(&[(1e-3, 2e-3, 0.0); 3]), &none, &varied);
        assert!(with.step_s >= plain.step_s + 9e-4 - 1e-12);
        // The ranks wait at the collectives: later than the same ranks alone would end.
        assert!(with.step_s > 9e-3 + 9e-4);
    }

    #[test]
    fn buckets_fill_in_backward_order_and_overlap_backward() {
        // Three layers of 20 MB of gradients: a bucket closes once it holds 25 MiB, so the
        // first takes the last two layers (40 MB), the second the first layer.
        let l = layers(&[(1e-3, 2e-3, 2e7), (1e-3, 2e-3, 2e7), (1e-3, 2e-3, 2e7)]);
        let even = SimOptions {
            first_bucket_bytes: DDP_BUCKET_BYTES,
            ..SimOptions::default()
        };
        let s = simulate(&l, &net, &even);
        assert_eq!(s.buckets, 2);
        // DDP's small first bucket takes the last layer alone.
        assert_eq!(
            buckets(&l, DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_BYTES),
            [(2, 2e7), (0, 4e7)]
        );
        let comm: Vec<&Span> = s
            .spans
            .iter()
            .filter(|p| p.stream == Stream::Communication)
            .collect();
        // The first bucket is ready once l2 and l1 are done: 3 ms forward + 4 ms; the second
        // when backward ends (9 ms), but it waits for the first's allreduce to finish.
        assert!((comm[0].start_s - 7e-3).abs() < 1e-12, "{comm:?}");
        let first_end = 7e-3 + net(4e7);
        assert!((comm[1].start_s - first_end).abs() < 1e-12, "{comm:?}");
        assert!((s.compute_s - 9e-3).abs() < 1e-12);
        let end = first_end + net(2e7);
        assert!((s.exposed_comm_s - (end - 9e-3)).abs() < 1e-12, "{s:?}");
        assert!((s.step_s - end).abs() < 1e-12);
        // One bucket after backward: the whole 60 MB exposed.
        let after = simulate(
            &l,
            &net,
            &SimOptions {
                bucket_bytes: f64::INFINITY,
                first_bucket_bytes: f64::INFINITY,
                overlap: false,
                ..SimOptions::default()
            },
        );
        assert!((after.step_s - 9e-3 - net(6e7)).abs() < 1e-12);
        // A trace: metadata, then a complete event per span.
        let t = chrome_trace(&s, "resnet50 rank 0");
        let ev = t["traceEvents"].as_array().unwrap();
        assert_eq!(ev.len(), 4 + s.spans.len());
        assert!(ev.iter().any(|e| e["ph"] == "X" && e["tid"] == 2));
    }

    #[test]
    fn stragglers_stretch_the_step_and_the_seed_fixes_them() {
        let l = layers(&[(1e-3, 2e-3, 1e6); 20]);
        let one = SimOptions {
            cv: 0.1,
            ranks: 1,
            seed: 7,
            ..SimOptions::default()
        };
        let many = SimOptions { ranks: 1024, ..one };
        let (a, b) = (simulate(&l, &net, &one), simulate(&l, &net, &many));
        assert!(b.step_s > a.step_s, "{} {}", a.step_s, b.step_s);
        assert_eq!(simulate(&l, &net, &many), b);
        assert_ne!(
            simulate(&l, &net, &SimOptions { seed: 8, ..many }).step_s,
            b.step_s
        );
    }

    proptest! {
        /// One bucket after backward, nothing read ahead, every rank alike: the sum of
        /// input, compute, allreduce and update (`--overlap none`).
        #[test]
        fn one_bucket_without_overlap_is_the_sum(
            times in prop::collection::vec((1e-6..1e-2f64, 1e-6..2e-2f64, 0.0..1e8f64), 1..40),
            input in 0.0..1e-1f64,
            update in 0.0..1e-2f64,
        ) {
            let l = layers(&times);
            let s = simulate(&l, &net, &SimOptions {
                bucket_bytes: f64::INFINITY,
                first_bucket_bytes: f64::INFINITY,
                overlap: false,
                input_s: input,
                prefetch: 0,
                optimizer_s: update,
                ..SimOptions::default()
            });
            let compute: f64 = times.iter().map(|t| t.0 + t.1).sum();
            let bytes: f64 = times.iter().map(|t| t.2).sum();
            let comm = if bytes > 0.0 { net(bytes) } else { 0.0 };
            let sum = input + compute + comm + update;
            prop_assert!((s.step_s - sum).abs() <= 1e-9 * sum, "{} {}", s.step_s, sum);
        }

        /// Infinite bandwidth and the input read ahead: compute alone (`--overlap full`,
        /// compute-bound), whatever the buckets.
        #[test]
        fn infinite_bandwidth_is_compute_alone(
            times in prop::collection::vec((1e-6..1e-2f64, 1e-6..2e-2f64, 0.0..1e8f64), 1..40),
            bucket in 1e3..1e9f64,
            update in 0.0..1e-2f64,
        ) {
            let l = layers(&times);
            let s = simulate(&l, &|_| 0.0, &SimOptions {
                bucket_bytes: bucket,
                optimizer_s: update,
                ..SimOptions::default()
            });
            let compute: f64 = times.iter().map(|t| t.0 + t.1).sum::<f64>() + update;
            prop_assert!((s.step_s - compute).abs() <= 1e-9 * compute);
            prop_assert_eq!(s.exposed_comm_s, 0.0);
        }

        /// Overlapping buckets with backward is never slower than allreducing them after
        /// it, and a step never beats its compute or its input.
        #[test]
        fn overlap_lies_between_the_limits(
            times in prop::collection::vec((1e-6..1e-2f64, 1e-6..2e-2f64, 0.0..1e8f64), 1..40),
            bucket in 1e3..1e9f64,
            input in 0.0..1e-1f64,
        ) {
            let l = layers(&times);
            let o = SimOptions { bucket_bytes: bucket, input_s: input, ..SimOptions::default() };
            let over = simulate(&l, &net, &o);
            let after = simulate(&l, &net, &SimOptions { overlap: false, ..o });
            prop_assert!(over.step_s <= after.step_s + 1e-12);
            let compute: f64 = times.iter().map(|t| t.0 + t.1).sum();
            prop_assert!(over.step_s + 1e-12 >= compute.max(input));
        }
    }
}
