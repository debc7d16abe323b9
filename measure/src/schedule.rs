//! What every full-workload executor (CPU and GPU) does with a layer graph's buffers, and
//! when: which layers run backward, which outputs a backward pass reads (kept after the
//! forward pass), and after which backward pass each kept output is freed. Device-free
//! bookkeeping, so both executors free memory at the same points and their peaks compare.
//!
//! Memory follows what frameworks do and what the model counts: a layer's output is freed
//! as soon as every consumer has run, unless a backward pass needs it (the op's own or a
//! consumer's, per `ridgeline_model::cost::keeps`); gradients live from their first
//! contribution until their layer's backward has run.

use ridgeline_model::cost::{keeps, requires_grad};
use ridgeline_model::graph::{Graph, Op};

use crate::backend::{LayerTimes, PassNotes, WorkloadRun};

/// SGD learning rate of every executor's update step (small: the data is synthetic).
pub(crate) const LEARNING_RATE: f32 = 1e-4;

/// Counts live bytes and their high-water mark.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tracker {
    current: usize,
    peak: usize,
}

impl Tracker {
    /// `bytes` more are live.
    pub(crate) fn alloc(&mut self, bytes: usize) {
        self.current += bytes;
        self.peak = self.peak.max(self.current);
    }

    /// `bytes` fewer are live.
    pub(crate) fn free(&mut self, bytes: usize) {
        self.current = self.current.saturating_sub(bytes);
    }

    /// Bytes live now.
    #[cfg(test)]
    pub(crate) fn current(&self) -> usize {
        self.current
    }

    /// The high-water mark.
    pub(crate) fn peak(&self) -> usize {
        self.peak
    }
}

/// Times of one training step.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepTimes {
    /// Forward seconds per layer (0 for the input).
    pub(crate) forward: Vec<f64>,
    /// Backward seconds per layer (`None` where no backward runs).
    pub(crate) backward: Vec<Option<f64>>,
    /// SGD update seconds.
    pub(crate) update: f64,
    /// The loss: the sum over loss layers of their mean over the batch.
    pub(crate) loss: f64,
    /// The whole step.
    pub(crate) total: f64,
    /// Under dynamic loss scaling: the scale the step ran with, and whether its gradients
    /// overflowed (the update was skipped).
    pub(crate) loss_scale: Option<(f64, bool)>,
}

/// The run of `graph` from its measured steps.
pub(crate) fn workload_run(
    graph: &Graph,
    steps: &[StepTimes],
    peak_bytes: u64,
    peak_rss_bytes: Option<u64>,
) -> WorkloadRun {
    let layers = graph
        .layers()
        .iter()
        .enumerate()
        .map(|(i, l)| LayerTimes {
            name: l.name.to_string(),
            forward_s: steps.iter().map(|s| s.forward[i]).collect(),
            backward_s: steps
                .iter()
                .map(|s| s.backward[i])
                .collect::<Option<Vec<f64>>>()
                .unwrap_or_default(),
            notes: PassNotes::default(),
        })
        .collect();
    WorkloadRun {
        layers,
        step_s: steps.iter().map(|s| s.total).collect(),
        update_s: steps.iter().map(|s| s.update).collect(),
        loss_scale: steps
            .iter()
            .filter_map(|s| s.loss_scale)
            .map(|s| s.0)
            .collect(),
        skipped_updates: steps
            .iter()
            .filter(|s| s.loss_scale.is_some_and(|s| s.1))
            .count(),
        peak_bytes,
        peak_rss_bytes,
    }
}

/// A graph's buffer schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Schedule {
    /// Whether node i's output depends on a parameter (its gradient is computed).
    pub(crate) needs_grad: Vec<bool>,
    /// Whether some backward pass reads node i's output.
    pub(crate) kept: Vec<bool>,
    /// The outputs each layer's backward pass is the last to read (backward runs from the
    /// last layer to the first, so the earliest reader): freed right after it, as
    /// frameworks free saved tensors. The input sample is never released (it is reused
    /// every step).
    pub(crate) releases: Vec<Vec<usize>>,
    /// How many layers read node i's output.
    pub(crate) consumers: Vec<usize>,
}

impl Schedule {
    /// The schedule of `graph`.
    pub(crate) fn of(graph: &Graph) -> Schedule {
        let layers = graph.layers();
        let needs_grad = requires_grad(graph);
        let mut kept = vec![false; layers.len()];
        let mut last_reader: Vec<Option<usize>> = vec![None; layers.len()];
        let mut consumers = vec![0usize; layers.len()];
        for (i, l) in layers.iter().enumerate() {
            let backward = needs_grad[i] && !matches!(l.op, Op::Input) && !l.op.is_view();
            let k = keeps(&l.op);
            let mut read = |j: usize| {
                kept[j] = true;
                last_reader[j] = Some(last_reader[j].map_or(i, |r| r.min(i)));
            };
            if backward && k.output {
                read(i);
            }
            for &j in &l.inputs {
                consumers[j] += 1;
            }
            if backward && k.inputs {
                for &j in &l.inputs {
                    read(j);
                }
            } else if backward && k.input {
                read(l.inputs[0]);
            }
        }
        let mut releases = vec![Vec::new(); layers.len()];
        for (j, r) in last_reader.iter().enumerate().skip(1) {
            if let Some(r) = r {
                releases[*r].push(j);
            }
        }
        Schedule {
            needs_grad,
            kept,
            releases,
            consumers,
        }
    }

    /// The sinks whose gradient seeds backward (the losses): layers nobody reads that
    /// depend on a parameter.
    pub(crate) fn losses(&self) -> impl Iterator<Item = usize> + '_ {
        (1..self.consumers.len()).filter(|&i| self.consumers[i] == 0 && self.needs_grad[i])
    }

    /// What to free after layer `i`'s backward pass (or its turn, where it has none): the
    /// outputs it was the last to read, and its own output when no backward pass reads it.
    pub(crate) fn after_backward(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        self.releases[i]
            .iter()
            .copied()
            .chain((!self.kept[i]).then_some(i))
    }
}

#[cfg(test)]
mod tests {
    use ridgeline_model::graph::{Conv, Op};

    use super::*;

    #[test]
    fn saved_outputs_are_released_after_their_earliest_backward_reader() {
        // input -> conv -> relu -> conv2 -> mse; relu keeps its output, conv2 its input
        // (the same tensor), conv its input (the sample, never released).
        let mut g = Graph::new("net", vec![2, 6, 6]).unwrap();
        g.then("conv", Op::conv(Conv::new(3, &[3, 3]).pad(1)))
            .unwrap();
        g.then("relu", Op::Relu).unwrap();
        g.then("conv2", Op::conv(Conv::new(2, &[1, 1]))).unwrap();
        g.then("mse", Op::MseLoss).unwrap();
        let s = Schedule::of(&g);
        assert_eq!(s.needs_grad, [false, true, true, true, true]);
        assert_eq!(s.kept, [true, false, true, true, false]);
        assert_eq!(s.consumers, [1, 1, 1, 1, 0]);
        // relu's output is read by conv2's backward (3) and relu's own (2): freed after 2.
        // conv2's output is read by the loss's backward only.
        assert_eq!(s.releases, [vec![], vec![], vec![2], vec![], vec![3]]);
        assert_eq!(s.losses().collect::<Vec<_>>(), [4]);
        assert_eq!(s.after_backward(1).collect::<Vec<_>>(), [1]);
        assert_eq!(s.after_backward(4).collect::<Vec<_>>(), [3, 4]);
        let mut t = Tracker::default();
        t.alloc(10);
        t.alloc(5);
        t.free(12);
        t.alloc(1);
        assert_eq!((t.current(), t.peak()), (4, 15));
    }
}
