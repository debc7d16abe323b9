//! Data-parallel training on the CPU executor, as PyTorch's DistributedDataParallel runs it:
//! every rank trains the same graph on a batch of its own; as backward produces the
//! gradients (last layer first), they are copied into buckets of DDP's sizes and order
//! ([`ridgeline_model::sim::buckets`]: a small first bucket, then `bucket_bytes` each), and
//! each full bucket goes to a communication thread that allreduces it while backward goes
//! on. After backward the step waits for the last bucket, takes the mean of the gradients and
//! runs the SGD update.
//!
//! The allreduce is the caller's (MPI, in `comm`), and runs on the thread that calls
//! [`train`]: forward and backward run on a thread of their own, so MPI is only ever called
//! from the thread that initialised it (`MPI_THREAD_FUNNELED`). Without overlap, the buckets
//! go to the communication thread only once backward has ended: the simulator's other limit.

use std::sync::mpsc;
use std::time::Instant;

use ridgeline_model::graph::Graph;
use ridgeline_model::sim::{self, SimLayer};

use ridgeline_model::precision::Precision;

use super::exec::Executor;
use crate::campaign::workload_records;
use crate::error::{Error, Result};
use crate::record::{Device, Env, Extra, Record, RecordPrecision, StepShape};
use crate::schedule::{StepTimes, workload_run};

/// How a data-parallel run trains.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct DdpOptions {
    /// Bytes of the first bucket (the last layers' gradients).
    pub(crate) first_bucket_bytes: f64,
    /// Bytes of every later bucket.
    pub(crate) bucket_bytes: f64,
    /// Whether buckets are allreduced beside backward (else after it).
    pub(crate) overlap: bool,
    /// Steps run before the measured ones.
    pub(crate) warmup: usize,
    /// Measured steps.
    pub(crate) steps: usize,
    /// Ranks the gradients are summed over (the mean divides by it).
    pub(crate) ranks: usize,
}

/// One bucket's allreduce in a step, seconds from the step's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BucketTimes {
    /// Its bytes.
    pub(crate) bytes: f64,
    /// When backward had filled it.
    pub(crate) ready_s: f64,
    /// When its allreduce started.
    pub(crate) start_s: f64,
    /// When its allreduce ended.
    pub(crate) end_s: f64,
}

/// One measured data-parallel step on this rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DdpStep {
    /// Each layer's forward and backward, the update (the mean of the gradients, copied
    /// out of their buckets, and SGD) and the whole step.
    pub(crate) times: StepTimes,
    /// Each bucket, in the order backward filled them.
    pub(crate) buckets: Vec<BucketTimes>,
    /// When backward ended, seconds from the step's start.
    pub(crate) backward_end_s: f64,
    /// When the last reduced bucket was back.
    pub(crate) comm_end_s: f64,
    /// Seconds handing gradients over: copying them into buckets and passing each full
    /// bucket to the communication thread.
    pub(crate) copy_s: f64,
}

impl DdpStep {
    /// Seconds of allreduce in the step.
    pub(crate) fn comm_s(&self) -> f64 {
        self.buckets.iter().map(|b| b.end_s - b.start_s).sum()
    }

    /// Seconds the step waited for communication after backward.
    pub(crate) fn exposed_comm_s(&self) -> f64 {
        (self.comm_end_s - self.backward_end_s).max(0.0)
    }
}

/// A data-parallel run on this rank.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DdpTrained {
    /// The measured steps.
    pub(crate) steps: Vec<DdpStep>,
    /// The executor's memory high-water mark, bytes (without the buckets).
    pub(crate) peak_bytes: usize,
}

impl DdpTrained {
    /// The run's records, as `measure workload` writes a run's (a `workload-layer` record
    /// per layer and pass, then the `workload-step` record), the step shape naming the
    /// `ranks` and the step's `extra` holding each step's communication, its part after
    /// backward, each bucket's allreduce and the hand-over of gradients into buckets, and
    /// how it ran (`overlap`, `bucket_bytes`, `first_bucket_bytes`), besides the job's `job`
    /// fields. Made on `threads` threads of the CPU.
    pub(crate) fn records(
        &self,
        graph: &Graph,
        batch: usize,
        threads: usize,
        o: &DdpOptions,
        job: Extra,
    ) -> Vec<Record> {
        let ranks = o.ranks;
        let times: Vec<StepTimes> = self.steps.iter().map(|s| s.times.clone()).collect();
        let run = workload_run(graph, &times, self.peak_bytes as u64, super::peak_rss());
        let shape = StepShape {
            workload: graph.name().to_owned(),
            input: graph.input_shape().dims().to_vec(),
            batch,
            ranks: Some(ranks),
        };
        let env = Env::capture();
        let mut records = workload_records(
            graph,
            batch,
            Precision::Fp32,
            &run,
            shape,
            &|measured, samples, flops, bytes| {
                Record::new(
                    measured,
                    RecordPrecision::Fp32,
                    Device::Cpu,
                    threads,
                    samples,
                    flops,
                    bytes,
                    env.clone(),
                )
            },
        );
        if let Some(step) = records.last_mut() {
            let of = |f: fn(&DdpStep) -> f64| self.steps.iter().map(f).collect::<Vec<f64>>();
            let executor = std::mem::take(&mut step.extra);
            step.extra = Extra {
                peak_bytes: executor.peak_bytes,
                peak_rss_bytes: executor.peak_rss_bytes,
                update_s: executor.update_s,
                comm_s: of(DdpStep::comm_s),
                exposed_comm_s: of(DdpStep::exposed_comm_s),
                bucket_s: self
                    .steps
                    .iter()
                    .map(|s| s.buckets.iter().map(|b| b.end_s - b.start_s).collect())
                    .collect(),
                other_s: of(|s| s.copy_s),
                ..job
            };
            for (key, value) in [
                ("overlap", serde_json::json!(o.overlap)),
                ("bucket_bytes", serde_json::json!(o.bucket_bytes)),
                (
                    "first_bucket_bytes",
                    serde_json::json!(o.first_bucket_bytes),
                ),
            ] {
                step.extra.notes.insert(key.into(), value);
            }
        }
        records
    }
}

/// Which layers' gradients go in which bucket.
#[derive(Debug, Clone, PartialEq)]
struct Buckets {
    /// For each layer, the bucket its backward completes.
    closes: Vec<Option<usize>>,
    /// Each bucket's layers (those with parameters), in backward's order.
    members: Vec<Vec<usize>>,
    /// Each bucket's bytes.
    bytes: Vec<f64>,
}

impl Buckets {
    /// DDP's buckets over layers with these parameter tensors.
    fn of(params: &[Vec<Vec<f32>>], first_bytes: f64, bucket_bytes: f64) -> Buckets {
        let layers: Vec<SimLayer> = params
            .iter()
            .map(|ps| SimLayer {
                name: String::new(),
                forward_s: 0.0,
                backward_s: 0.0,
                gradient_bytes: 4.0 * ps.iter().map(Vec::len).sum::<usize>() as f64,
                exchange_s: [0.0; 2],
            })
            .collect();
        let planned = sim::buckets(&layers, first_bytes, bucket_bytes);
        let mut closes = vec![None; params.len()];
        let mut members = Vec::with_capacity(planned.len());
        let mut above = params.len();
        for (k, &(first, _)) in planned.iter().enumerate() {
            closes[first] = Some(k);
            members.push(
                (first..above)
                    .rev()
                    .filter(|&i| !params[i].is_empty())
                    .collect(),
            );
            above = first;
        }
        Buckets {
            closes,
            members,
            bytes: planned.iter().map(|&(_, b)| b).collect(),
        }
    }
}

/// What the compute thread hands the communication thread.
enum ToComm {
    /// A full bucket.
    Bucket(usize, Vec<f32>),
    /// The step is over.
    Done(Box<DdpStep>),
}

/// A reduced bucket back from the communication thread, and its allreduce's start and end.
struct Reduced(usize, Vec<f32>, f64, f64);

/// Trains `graph` at `batch` per rank on `threads` threads by `o`: before each step
/// `barrier` (every rank starts together), and each bucket summed over the ranks by
/// `allreduce`, on the calling thread. Returns the measured steps, after the warm-up.
pub(crate) fn train(
    graph: &Graph,
    batch: usize,
    threads: usize,
    o: &DdpOptions,
    barrier: &mut dyn FnMut(),
    allreduce: &mut dyn FnMut(&mut Vec<f32>),
) -> Result<DdpTrained> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::invalid("threads", format!("no thread pool of {threads}: {e}")))?;
    std::thread::scope(|scope| {
        let (start_tx, start_rx) = mpsc::channel::<Instant>();
        let (to_comm, from_compute) = mpsc::channel::<ToComm>();
        let (to_compute, from_comm) = mpsc::channel::<Reduced>();
        let worker = scope.spawn(move || {
            pool.install(move || {
                let mut exec = Executor::new(graph, batch, threads);
                let buckets = Buckets::of(exec.params(), o.first_bucket_bytes, o.bucket_bytes);
                let mut buffers: Vec<Vec<f32>> = vec![Vec::new(); buckets.bytes.len()];
                while let Ok(t0) = start_rx.recv() {
                    let Some(step) = ddp_step(
                        &mut exec,
                        &buckets,
                        &mut buffers,
                        t0,
                        o,
                        &to_comm,
                        &from_comm,
                    ) else {
                        break;
                    };
                    if to_comm.send(ToComm::Done(Box::new(step))).is_err() {
                        break;
                    }
                }
                exec.peak_bytes()
            })
        });
        let mut steps = Vec::with_capacity(o.steps);
        'steps: for s in 0..o.warmup + o.steps {
            barrier();
            let t0 = Instant::now();
            if start_tx.send(t0).is_err() {
                break;
            }
            loop {
                match from_compute.recv() {
                    Ok(ToComm::Bucket(k, mut data)) => {
                        let start = t0.elapsed().as_secs_f64();
                        allreduce(&mut data);
                        let end = t0.elapsed().as_secs_f64();
                        if to_compute.send(Reduced(k, data, start, end)).is_err() {
                            break 'steps;
                        }
                    }
                    Ok(ToComm::Done(step)) => {
                        if s >= o.warmup {
                            steps.push(*step);
                        }
                        break;
                    }
                    Err(_) => break 'steps,
                }
            }
        }
        drop(start_tx);
        let peak_bytes = worker
            .join()
            .map_err(|_| Error::invalid("data-parallel step", "the compute thread panicked"))?;
        if steps.len() < o.steps {
            return Err(Error::invalid(
                "data-parallel step",
                "the compute thread stopped before the last step",
            ));
        }
        Ok(DdpTrained { steps, peak_bytes })
    })
}

/// One step on the compute thread: forward and backward handing each full bucket to the
/// communication thread (or every bucket after backward, without overlap), then the mean of
/// the reduced gradients and the update. `None` when the communication thread is gone.
fn ddp_step(
    exec: &mut Executor<'_>,
    buckets: &Buckets,
    buffers: &mut [Vec<f32>],
    t0: Instant,
    o: &DdpOptions,
    to_comm: &mpsc::Sender<ToComm>,
    from_comm: &mpsc::Receiver<Reduced>,
) -> Option<DdpStep> {
    let n = buckets.bytes.len();
    let mut copy_s = 0.0;
    let mut ready = vec![0.0; n];
    let mut held = Vec::new();
    let mut sent = true;
    let mut times = exec.forward_backward_with(&mut |i, dparams| {
        let Some(k) = buckets.closes[i] else { return };
        let t = Instant::now();
        let mut buf = std::mem::take(&mut buffers[k]);
        buf.clear();
        for &j in &buckets.members[k] {
            for d in &dparams[j] {
                buf.extend_from_slice(d);
            }
        }
        ready[k] = t0.elapsed().as_secs_f64();
        if o.overlap {
            sent &= to_comm.send(ToComm::Bucket(k, buf)).is_ok();
        } else {
            held.push((k, buf));
        }
        // Waking the communication thread is part of the hand-over: where it shares this
        // thread's core, the compute waits here while it starts the allreduce.
        copy_s += t.elapsed().as_secs_f64();
    });
    let backward_end_s = t0.elapsed().as_secs_f64();
    for (k, buf) in held {
        sent &= to_comm.send(ToComm::Bucket(k, buf)).is_ok();
    }
    if !sent {
        return None;
    }
    let mut spans = vec![(0.0, 0.0); n];
    for _ in 0..n {
        let Reduced(k, data, start, end) = from_comm.recv().ok()?;
        buffers[k] = data;
        spans[k] = (start, end);
    }
    let comm_end_s = t0.elapsed().as_secs_f64();
    // The mean of the ranks' gradients, back from the buckets into each layer's, then SGD.
    let t = Instant::now();
    let scale = 1.0 / o.ranks.max(1) as f32;
    let dparams = exec.dparams_mut();
    for (k, members) in buckets.members.iter().enumerate() {
        let mut at = 0;
        for &j in members {
            for d in &mut dparams[j] {
                let src = &buffers[k][at..at + d.len()];
                d.iter_mut().zip(src).for_each(|(g, s)| *g = s * scale);
                at += d.len();
            }
        }
    }
    exec.sgd();
    times.update = t.elapsed().as_secs_f64();
    times.total = t0.elapsed().as_secs_f64();
    Some(DdpStep {
        times,
        buckets: (0..n)
            .map(|k| BucketTimes {
                bytes: buckets.bytes[k],
                ready_s: ready[k],
                start_s: spans[k].0,
                end_s: spans[k].1,
            })
            .collect(),
        backward_end_s,
        comm_end_s,
        copy_s,
    })
}

#[cfg(test)]
mod tests {
    use ridgeline_model::graph::{Conv, Op};

    use super::*;

    fn network() -> Graph {
        let mut g = Graph::new("net", vec![2, 8, 8]).unwrap();
        g.then("c1", Op::conv(Conv::new(8, &[3, 3]).pad(1)))
            .unwrap();
        g.then("relu", Op::Relu).unwrap();
        g.then("c2", Op::conv(Conv::new(16, &[3, 3]).pad(1)))
            .unwrap();
        g.then("flat", Op::Flatten).unwrap();
        g.then(
            "dense",
            Op::Dense {
                out_features: 10,
                bias: true,
            },
        )
        .unwrap();
        g.then("ce", Op::SoftmaxCrossEntropy).unwrap();
        g
    }

    fn options(overlap: bool, ranks: usize) -> DdpOptions {
        DdpOptions {
            // Small buckets, so the network fills several.
            first_bucket_bytes: 2048.0,
            bucket_bytes: 4096.0,
            overlap,
            warmup: 1,
            steps: 2,
            ranks,
        }
    }

    #[test]
    fn buckets_follow_ddp_and_cover_every_parameter_once() {
        let g = network();
        let exec = Executor::new(&g, 1, 1);
        let b = Buckets::of(exec.params(), 2048.0, 4096.0);
        let mut seen: Vec<usize> = b.members.iter().flatten().copied().collect();
        seen.sort_unstable();
        let with_params: Vec<usize> = (0..g.layers().len())
            .filter(|&i| !exec.params()[i].is_empty())
            .collect();
        assert_eq!(seen, with_params);
        // dense (10 x 1024 + 10 floats) alone overflows the first bucket; then c2, then c1.
        assert_eq!(b.members, [vec![5], vec![3], vec![1]]);
        // Each closes at its earliest layer's backward; the last at the input, as backward
        // ends.
        let closing: Vec<usize> = (0..3)
            .map(|k| b.closes.iter().position(|&c| c == Some(k)).unwrap())
            .collect();
        assert_eq!(closing, [5, 3, 0]);
        for (k, m) in b.members.iter().enumerate() {
            let bytes: usize = m
                .iter()
                .map(|&j| 4 * exec.params()[j].iter().map(Vec::len).sum::<usize>())
                .sum();
            assert_eq!(b.bytes[k], bytes as f64);
        }
    }

    #[test]
    fn each_step_hands_over_every_bucket_in_backwards_order() {
        let g = network();
        let mut reduced = Vec::new();
        let run = train(
            &g,
            2,
            1,
            &options(true, 1),
            &mut || {},
            &mut |v: &mut Vec<f32>| reduced.push(v.len()),
        )
        .unwrap();
        // Three steps (one warm-up), three buckets each.
        assert_eq!(run.steps.len(), 2);
        assert_eq!(reduced.len(), 9);
        for s in &run.steps {
            assert_eq!(s.buckets.len(), 3);
            assert!(s.times.total > 0.0 && s.backward_end_s <= s.comm_end_s);
            assert!(s.comm_end_s <= s.times.total);
            for b in &s.buckets {
                assert!(b.ready_s <= b.start_s && b.start_s <= b.end_s, "{b:?}");
                assert!(b.end_s <= s.comm_end_s);
            }
            // Buckets are handed over as backward fills them, in its order.
            assert!(s.buckets.windows(2).all(|w| w[0].ready_s <= w[1].ready_s));
        }
    }

    #[test]
    fn the_mean_over_ranks_is_what_the_update_applies() {
        // Two "ranks" with the same data: the sum doubles each gradient, the mean halves it,
        // so the losses follow the plain executor's exactly.
        let g = network();
        let losses = |o: DdpOptions, double: bool| -> Vec<f64> {
            let run = train(&g, 2, 1, &o, &mut || {}, &mut |v: &mut Vec<f32>| {
                if double {
                    v.iter_mut().for_each(|x| *x *= 2.0);
                }
            })
            .unwrap();
            run.steps.iter().map(|s| s.times.loss).collect()
        };
        let o = DdpOptions {
            warmup: 0,
            steps: 3,
            ..options(true, 1)
        };
        let one = losses(o, false);
        let two = losses(DdpOptions { ranks: 2, ..o }, true);
        assert_eq!(one, two);
        let mut plain = Executor::new(&g, 2, 1);
        let plain: Vec<f64> = (0..3).map(|_| plain.step().loss).collect();
        assert_eq!(one, plain);
        // A wrong mean changes the second step's loss.
        let wrong = losses(DdpOptions { ranks: 1, ..o }, true);
        assert_ne!(wrong[1], plain[1]);
    }

    #[test]
    fn records_hold_every_layer_and_the_steps_communication() {
        let g = network();
        let o = options(true, 2);
        let run = train(&g, 2, 1, &o, &mut || {}, &mut |_| {}).unwrap();
        let job = Extra {
            mpi_library: Some("test".into()),
            ..Extra::default()
        };
        let records = run.records(&g, 2, 1, &o, job);
        let runs = crate::record::StepRun::from_records(&records);
        assert_eq!(runs.len(), 1);
        let r = &runs[0];
        assert_eq!(r.run.ranks, Some(2));
        assert_eq!(r.layers.len(), records.len() - 1);
        for (rec, _) in &r.layers {
            assert_eq!(rec.samples_s.len(), 2);
        }
        let e = &r.step.extra;
        assert_eq!(r.step.samples_s.len(), 2);
        assert_eq!((e.comm_s.len(), e.exposed_comm_s.len()), (2, 2));
        assert_eq!((e.other_s.len(), e.update_s.len()), (2, 2));
        assert!(e.bucket_s.iter().all(|b| b.len() == 3));
        for (i, s) in run.steps.iter().enumerate() {
            assert_eq!(e.comm_s[i], e.bucket_s[i].iter().sum::<f64>());
            assert!(e.exposed_comm_s[i] >= 0.0 && e.exposed_comm_s[i] <= s.times.total);
        }
        assert_eq!(e.mpi_library.as_deref(), Some("test"));
        assert_eq!(e.notes["overlap"], serde_json::json!(true));
        assert_eq!(e.notes["bucket_bytes"], serde_json::json!(4096.0));
        assert!(e.peak_bytes.is_some_and(|p| p > 0));
        // Records of another number of ranks are another measurement.
        let other = run.records(&g, 2, 1, &options(true, 4), Extra::default());
        assert_ne!(other.last().unwrap().id, records.last().unwrap().id);
    }

    #[test]
    fn without_overlap_every_bucket_waits_for_backward() {
        let g = network();
        let run = train(&g, 2, 1, &options(false, 1), &mut || {}, &mut |_| {}).unwrap();
        for s in &run.steps {
            for b in &s.buckets {
                assert!(b.start_s >= s.backward_end_s, "{b:?} {}", s.backward_end_s);
            }
        }
    }
}
