//! The full-workload executor: runs a model layer graph forward and backward with real
//! kernels on synthetic data, then an SGD update, timing every layer.
//!
//! Buffers are allocated and freed on the [`Schedule`] every executor shares; every buffer
//! goes through a [`Tracker`], whose high-water mark is the executor's peak memory.

use std::time::Instant;

use rayon::prelude::*;
use ridgeline_model::graph::Graph;

use super::ops::Kernel;
use super::random::uniform;
use super::saved::Aux;
use crate::schedule::{LEARNING_RATE, Schedule, StepTimes, Tracker};

/// One layer's parameter tensors (or their gradients).
pub(crate) type LayerParams = Vec<Vec<f32>>;

/// A graph ready to train at a batch size.
#[derive(Debug)]
pub(crate) struct Executor<'g> {
    graph: &'g Graph,
    batch: usize,
    threads: usize,
    kernels: Vec<Kernel>,
    params: Vec<Vec<Vec<f32>>>,
    dparams: Vec<Vec<Vec<f32>>>,
    schedule: Schedule,
    tracker: Tracker,
    seed: u64,
    /// The synthetic input batch, generated once.
    input: Vec<f32>,
    /// What each layer's forward pass leaves for backward, kept between steps.
    aux: Vec<Aux>,
    pool: BufferPool,
}

/// Freed buffers by length, handed out again for the same length, as the frameworks'
/// caching allocators do: after the first step no kernel touches fresh pages, so no kernel
/// time is page faults. Buffers come back with stale contents; every kernel overwrites its
/// outputs.
#[derive(Debug, Default)]
struct BufferPool {
    free: std::collections::HashMap<usize, Vec<Vec<f32>>>,
}

impl BufferPool {
    fn take(&mut self, len: usize) -> Vec<f32> {
        self.free
            .get_mut(&len)
            .and_then(Vec::pop)
            .unwrap_or_else(|| vec![0.0; len])
    }

    fn give(&mut self, buf: Vec<f32>) {
        self.free.entry(buf.len()).or_default().push(buf);
    }
}

fn bytes(v: &[f32]) -> usize {
    4 * v.len()
}

impl<'g> Executor<'g> {
    /// Allocates parameters for `graph` at `batch` and initialises them deterministically.
    pub(crate) fn new(graph: &'g Graph, batch: usize, threads: usize) -> Executor<'g> {
        let layers = graph.layers();
        let kernels: Vec<Kernel> = layers
            .iter()
            .map(|l| Kernel::new(graph, l, batch))
            .collect();
        let params: Vec<Vec<Vec<f32>>> = kernels
            .iter()
            .enumerate()
            .map(|(i, k)| k.init_params(0xC0FFEE ^ i as u64))
            .collect();
        let dparams = params
            .iter()
            .map(|ps| ps.iter().map(|p| vec![0.0; p.len()]).collect())
            .collect();
        let seed = 0x5EED;
        let input = (0..(layers[0].output.elements() as usize * batch) as u64)
            .map(|i| uniform(seed, i))
            .collect();
        let aux = (0..layers.len()).map(|_| Aux::default()).collect();
        let mut tracker = Tracker::default();
        for ps in params.iter().chain(&dparams) {
            for p in ps {
                tracker.alloc(bytes(p));
            }
        }
        Executor {
            graph,
            batch,
            threads,
            kernels,
            params,
            dparams,
            schedule: Schedule::of(graph),
            tracker,
            seed,
            input,
            aux,
            pool: BufferPool::default(),
        }
    }

    /// Bytes of one sample of node `i`'s output, times the batch.
    fn len(&self, i: usize) -> usize {
        let dims = self.graph.layers()[i].output.dims();
        let per: usize = dims.iter().product();
        per * self.batch
    }

    /// Workspace a layer needs while it runs (a convolution's padded copy and tiles).
    fn workspace(&self, i: usize) -> usize {
        match &self.kernels[i] {
            Kernel::Conv { geom, .. } | Kernel::ConvTranspose { geom, .. } => {
                geom.workspace_bytes()
            }
            _ => 0,
        }
    }

    /// The memory high-water mark so far.
    pub(crate) fn peak_bytes(&self) -> usize {
        self.tracker.peak()
    }

    /// Runs one training step: forward, backward, SGD update.
    pub(crate) fn step(&mut self) -> StepTimes {
        let start = Instant::now();
        let mut times = self.forward_backward();
        let t = Instant::now();
        self.sgd();
        times.update = t.elapsed().as_secs_f64();
        times.total = start.elapsed().as_secs_f64();
        times
    }

    /// The SGD update from the gradients in `dparams`.
    pub(crate) fn sgd(&mut self) {
        for (ps, ds) in self.params.iter_mut().zip(&self.dparams) {
            for (p, d) in ps.iter_mut().zip(ds) {
                p.iter_mut()
                    .zip(d)
                    .for_each(|(w, g)| *w -= LEARNING_RATE * g);
            }
        }
    }

    /// Every layer's parameter tensors (in graph order).
    pub(crate) fn params(&self) -> &[Vec<Vec<f32>>] {
        &self.params
    }

    /// Every layer's parameter gradients, as the last backward pass left them.
    pub(crate) fn dparams_mut(&mut self) -> &mut [Vec<Vec<f32>>] {
        &mut self.dparams
    }

    /// Runs forward and backward, leaving the parameter gradients in `dparams`.
    fn forward_backward(&mut self) -> StepTimes {
        self.forward_backward_with(&mut |_, _| {})
    }

    /// Runs forward and backward as [`Executor::step`] does, calling `after(i, dparams)`
    /// for every layer `i` from the last to the input, as soon as its backward pass (where
    /// it has one) has written its parameter gradients. `after`'s time is not in any
    /// layer's: it is where a data-parallel step hands full gradient buckets to its
    /// communication thread.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn forward_backward_with(
        &mut self,
        after: &mut dyn FnMut(usize, &[LayerParams]),
    ) -> StepTimes {
        let n = self.graph.layers().len();
        let mut acts: Vec<Option<Vec<f32>>> = vec![None; n];
        let mut aux = std::mem::take(&mut self.aux);
        let mut forward = vec![0.0; n];
        let mut backward = vec![None; n];
        // The input batch is already in memory, as after a host-to-device copy.
        let input = std::mem::take(&mut self.input);
        self.tracker.alloc(bytes(&input));
        acts[0] = Some(input);
        let mut remaining = self.schedule.consumers.clone();

        for i in 1..n {
            let layer = &self.graph.layers()[i];
            let mut out = self.pool.take(self.len(i));
            self.tracker.alloc(bytes(&out));
            let ws = self.workspace(i);
            self.tracker.alloc(ws);
            let t = Instant::now();
            {
                let inputs: Vec<&[f32]> = layer
                    .inputs
                    .iter()
                    .map(|&j| acts[j].as_deref().unwrap_or(&[]))
                    .collect();
                self.kernels[i].forward(
                    &inputs,
                    &self.params[i],
                    &mut out,
                    &mut aux[i],
                    self.threads,
                    self.seed ^ i as u64,
                );
            }
            forward[i] = t.elapsed().as_secs_f64();
            self.tracker.free(ws);
            self.tracker.alloc(aux[i].bytes());
            acts[i] = Some(out);
            for &j in &layer.inputs {
                remaining[j] -= 1;
                if remaining[j] == 0
                    && !self.schedule.kept[j]
                    && let Some(buf) = acts[j].take()
                {
                    self.tracker.free(bytes(&buf));
                    self.pool.give(buf);
                }
            }
        }

        // Backward from every sink (the losses): d(mean over the batch) = 1 / N per sample.
        let mut grads: Vec<Option<Vec<f32>>> = vec![None; n];
        let mut loss = 0.0;
        for i in self.schedule.losses() {
            let out = acts[i].as_deref().unwrap_or(&[]);
            loss += out.iter().map(|&v| f64::from(v)).sum::<f64>() / self.batch as f64;
            let mut g = self.pool.take(self.len(i));
            g.fill(1.0 / self.batch as f32);
            self.tracker.alloc(bytes(&g));
            grads[i] = Some(g);
        }
        for i in (1..n).rev() {
            let layer = &self.graph.layers()[i];
            if let Some(dy) = grads[i].take() {
                let mut dx: Vec<Option<Vec<f32>>> = layer
                    .inputs
                    .iter()
                    .map(|&j| self.schedule.needs_grad[j].then(|| self.pool.take(self.len(j))))
                    .collect();
                for d in dx.iter().flatten() {
                    self.tracker.alloc(bytes(d));
                }
                let ws = self.workspace(i);
                self.tracker.alloc(ws);
                let t = Instant::now();
                {
                    let inputs: Vec<&[f32]> = layer
                        .inputs
                        .iter()
                        .map(|&j| acts[j].as_deref().unwrap_or(&[]))
                        .collect();
                    let out = acts[i].as_deref().unwrap_or(&[]);
                    let mut views: Vec<Option<&mut [f32]>> =
                        dx.iter_mut().map(|d| d.as_deref_mut()).collect();
                    self.kernels[i].backward(
                        &inputs,
                        out,
                        &dy,
                        &self.params[i],
                        &aux[i],
                        &mut views,
                        &mut self.dparams[i],
                        self.threads,
                        self.seed ^ i as u64,
                    );
                    // Accumulate into the inputs' gradients (a tensor read twice gets both).
                    for (&j, d) in layer.inputs.iter().zip(dx.iter_mut()) {
                        let Some(d) = d.take() else { continue };
                        match &mut grads[j] {
                            Some(g) => {
                                g.par_chunks_mut(1 << 14)
                                    .zip(d.par_chunks(1 << 14))
                                    .for_each(|(a, b)| {
                                        a.iter_mut().zip(b).for_each(|(a, b)| *a += b)
                                    });
                                self.tracker.free(bytes(&d));
                                self.pool.give(d);
                            }
                            slot @ None => *slot = Some(d),
                        }
                    }
                }
                backward[i] = Some(t.elapsed().as_secs_f64());
                self.tracker.free(ws);
                self.tracker.free(bytes(&dy));
                self.pool.give(dy);
            }
            // Outputs nobody reads backward (the losses) go now; kept ones after their
            // last reader.
            for j in self.schedule.after_backward(i) {
                if let Some(buf) = acts[j].take() {
                    self.tracker.free(bytes(&buf));
                    self.pool.give(buf);
                }
            }
            self.tracker.free(aux[i].bytes());
            after(i, &self.dparams);
        }
        after(0, &self.dparams);
        if let Some(g) = grads[0].take() {
            self.tracker.free(bytes(&g));
            self.pool.give(g);
        }
        if let Some(buf) = acts[0].take() {
            self.tracker.free(bytes(&buf));
            self.input = buf;
        }
        self.aux = aux;

        StepTimes {
            forward,
            backward,
            update: 0.0,
            loss,
            total: 0.0,
            loss_scale: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use ridgeline_model::graph::{Conv, Op, Pool};

    use super::*;

    /// A small network with every kind of joint: a residual add, a concat of two branches,
    /// a layer read twice, pooling, dense and two losses.
    fn network() -> Graph {
        let mut g = Graph::new("net", vec![2, 6, 6]).unwrap();
        let c1 = g
            .then("c1", Op::conv(Conv::new(3, &[3, 3]).pad(1)))
            .unwrap();
        let bn = g.then("bn", Op::BatchNorm).unwrap();
        let r = g.then("relu", Op::Tanh).unwrap();
        let c2 = g
            .push("c2", Op::conv(Conv::new(3, &[3, 3]).pad(1)), &[r])
            .unwrap();
        let add = g.push("add", Op::Add, &[c2, c1]).unwrap();
        let b = g
            .push("branch", Op::conv(Conv::new(2, &[1, 1])), &[bn])
            .unwrap();
        let cat = g.push("cat", Op::Concat, &[add, b]).unwrap();
        let sq = g.push("square", Op::Add, &[cat, cat]).unwrap();
        let p = g
            .push("pool", Op::avg_pool(Pool::new(&[2, 2])), &[sq])
            .unwrap();
        g.push("ce", Op::SoftmaxCrossEntropy, &[p]).unwrap();
        g.push("flat", Op::Flatten, &[p]).unwrap();
        g.then(
            "dense",
            Op::Dense {
                out_features: 3,
                bias: true,
            },
        )
        .unwrap();
        g.then("mse", Op::MseLoss).unwrap();
        g
    }

    #[test]
    fn network_gradients_match_finite_differences() {
        let g = network();
        let mut exec = Executor::new(&g, 2, 2);
        let loss = exec.forward_backward().loss;
        assert!(loss.is_finite() && loss > 0.0);
        let analytic = exec.dparams.clone();
        let h = 1e-2f32;
        let mut checked = 0;
        for (layer, tensors) in analytic.iter().enumerate() {
            for (k, tensor) in tensors.iter().enumerate() {
                // Every parameter of small tensors, a spread of them in larger ones.
                let len = tensor.len();
                for i in (0..len).step_by(len.div_ceil(12)) {
                    let v = exec.params[layer][k][i];
                    exec.params[layer][k][i] = v + h;
                    let up = exec.forward_backward().loss;
                    exec.params[layer][k][i] = v - h;
                    let down = exec.forward_backward().loss;
                    exec.params[layer][k][i] = v;
                    let numeric = (up - down) / (2.0 * f64::from(h));
                    let a = f64::from(tensor[i]);
                    assert!(
                        (numeric - a).abs() <= 2e-3 + 2e-2 * numeric.abs(),
                        "{}: param {k}[{i}]: analytic {a} vs finite difference {numeric}",
                        g.layers()[layer].name
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 40, "{checked}");
    }

    #[test]
    fn memory_is_all_returned_and_the_peak_is_plausible() {
        let g = network();
        let mut exec = Executor::new(&g, 2, 1);
        let params = exec.tracker.current();
        exec.step();
        assert_eq!(
            exec.tracker.current(),
            params,
            "every activation and gradient freed"
        );
        let acts: usize = g
            .layers()
            .iter()
            .map(|l| 4 * 2 * l.output.elements() as usize)
            .sum();
        let workspace = (0..g.layers().len())
            .map(|i| exec.workspace(i))
            .max()
            .unwrap();
        assert!(
            exec.peak_bytes() > params + acts / 4,
            "{} {params} {acts}",
            exec.peak_bytes()
        );
        assert!(
            exec.peak_bytes() <= params + 2 * acts + workspace,
            "{} {params} {acts}",
            exec.peak_bytes()
        );
    }

    /// One step of the built-in `name` at 16 tokens and width 0.016, batch 2: its loss, the
    /// executor's peak and the model's footprint, bytes.
    fn small_step_against_footprint(name: &str) -> (f64, f64, f64) {
        use ridgeline_model::memory::{Footprint, Optimizer};
        use ridgeline_model::precision::Precision;
        use ridgeline_model::units::Bytes;
        use ridgeline_model::workloads::{self, BuildOptions};
        let options = BuildOptions {
            input_size: Some(vec![16]),
            width: 0.016,
        };
        let g = workloads::build(name, &options).unwrap();
        let mut exec = Executor::new(&g, 2, 1);
        let loss = exec.step().loss;
        let f = Footprint::of(&g, Precision::Fp32, Optimizer::Sgd).at(2, Bytes::new(f64::INFINITY));
        (loss, exec.peak_bytes() as f64, f.total.value())
    }

    /// A small Llama (grouped-query attention over rotated queries and keys, the gated
    /// feed-forward): the executor's peak is the model's footprint, the copied keys and
    /// values included, within 0.1 %.
    #[test]
    fn a_llama_step_peaks_at_the_models_footprint() {
        let (_, peak, model) = small_step_against_footprint("llama3-8b");
        // 186,057,616 against 186,049,288 bytes when written.
        assert!((peak / model - 1.0).abs() < 1e-3, "{peak} vs {model}");
    }

    /// A small Mixtral (eight gated experts, two a token): the executor's peak is the
    /// model's footprint, the experts' routed tensors included, within 0.1 %.
    #[test]
    fn a_mixtral_step_peaks_at_the_models_footprint() {
        let (loss, peak, model) = small_step_against_footprint("mixtral-8x7b");
        assert!(loss.is_finite() && loss > 0.0, "{loss}");
        // 146,645,904 against 146,621,192 bytes when written.
        assert!((peak / model - 1.0).abs() < 1e-3, "{peak} vs {model}");
    }

    #[test]
    fn sgd_lowers_the_loss() {
        let g = network();
        let mut exec = Executor::new(&g, 2, 1);
        let before = exec.forward_backward().loss;
        for (ps, ds) in exec.params.iter_mut().zip(&exec.dparams) {
            for (p, d) in ps.iter_mut().zip(ds) {
                p.iter_mut().zip(d).for_each(|(w, g)| *w -= 0.05 * g);
            }
        }
        let after = exec.forward_backward().loss;
        assert!(after < before, "{after} < {before}");
    }
}
