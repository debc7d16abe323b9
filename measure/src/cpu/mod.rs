//! The CPU backend: GEMM through the system's OpenBLAS where installed and the `gemm` crate
//! otherwise ([`blas`]), convolutions as GEMMs on a padded
//! channels-last copy of the input (direct for depthwise), STREAM, every op of the IR, and
//! the full-workload executor, all in `f32` (GEMM also `f64`) on a rayon pool of the
//! requested number of threads. Requests whose buffers would not fit the memory available
//! are refused up front.

mod activation;
mod blas;
mod conv;
// Driven by `measure comm ddp` under MPI; built (and unit-tested) without it too.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) mod ddp;
pub(crate) mod exec;
mod gemm;
#[cfg(test)]
mod gradcheck;
mod moe;
pub(crate) mod ops;
mod random;
mod saved;
mod seq;
mod stream;
mod window;

use std::hint::black_box;

use ridgeline_model::graph::Graph;
use ridgeline_model::memory::{Footprint, Optimizer};
use ridgeline_model::precision::Precision;
use ridgeline_model::units::Bytes;

use crate::backend::{
    Backend, ConvCase, ConvPass, Format, GemmCase, Layout, OpCase, Pass, StreamKernel, WorkloadRun,
};
use crate::cases;
use crate::error::{Error, Result};
use crate::protocol::{CacheState, Protocol, rotations};
use crate::record::{Device, Env};

use self::gemm::{Element, View, ViewMut, matmul};
use self::ops::Kernel;
use self::random::uniform;
use self::saved::Aux;

/// The CPU backend on a fixed number of threads.
#[derive(Debug)]
pub struct CpuBackend {
    threads: usize,
    pool: rayon::ThreadPool,
}

impl CpuBackend {
    /// A backend on `threads` threads (0: every core available to the process).
    pub fn new(threads: usize) -> Result<CpuBackend> {
        let threads = if threads == 0 {
            std::thread::available_parallelism().map_or(1, usize::from)
        } else {
            threads
        };
        blas::choose()?;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| {
                Error::invalid("threads", format!("cannot start {threads} threads: {e}"))
            })?;
        Ok(CpuBackend { threads, pool })
    }
}

fn data<T: From<f32>>(len: usize, seed: u64) -> Vec<T> {
    (0..len as u64).map(|i| T::from(uniform(seed, i))).collect()
}

/// `n` buffers of `len` elements each, filled from `seed` on.
fn copies<T: From<f32>>(n: usize, len: usize, seed: u64) -> Vec<Vec<T>> {
    (0..n as u64).map(|i| data(len, seed + 1000 * i)).collect()
}

/// The next copy of a rotation: runs cycle through the copies in order.
struct Cycle {
    next: usize,
    len: usize,
}

impl Cycle {
    fn new(len: usize) -> Cycle {
        Cycle { next: 0, len }
    }

    fn step(&mut self) -> usize {
        let i = self.next;
        self.next = (self.next + 1) % self.len.max(1);
        i
    }
}

fn time_gemm<T: Element + From<f32>>(
    case: &GemmCase,
    threads: usize,
    protocol: &Protocol,
) -> Vec<f64> {
    let (m, n, k) = (case.m, case.n, case.k);
    // In a step A is the activations (or their gradient) the previous kernel just wrote,
    // and C a buffer of the executor's pool, recently used: one buffer each. B (the
    // weights) is cold: rotated.
    let r = rotations(protocol.cache, size_of::<T>() * k * n);
    let a: Vec<T> = data(m * k, 1);
    let b: Vec<Vec<T>> = copies(r, k * n, 2);
    let mut c: Vec<T> = vec![T::ZERO; m * n];
    let mut cycle = Cycle::new(r);
    protocol.measure(|| {
        let i = cycle.step();
        matmul(
            ViewMut::rows(&mut c, m, n, n),
            View::rows(&a, m, k),
            View::rows(&b[i], k, n),
            false,
            threads,
        );
        black_box(&c);
    })
}

/// The kernel of a one-layer case graph at `batch`, with its input and parameters.
fn case_kernel(graph: &Graph, batch: usize) -> (Kernel, Vec<usize>, Vec<Vec<f32>>) {
    let layer = graph
        .layers()
        .last()
        .unwrap_or_else(|| unreachable!("case graphs have a layer"));
    let kernel = Kernel::new(graph, layer, batch);
    let params = kernel.init_params(7);
    let input_lens = layer
        .inputs
        .iter()
        .map(|&i| graph.layers()[i].output.elements() as usize * batch)
        .collect();
    (kernel, input_lens, params)
}

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn env(&self) -> Env {
        Env {
            blas: Some(blas::describe()),
            ..Env::capture()
        }
    }

    fn gemm(&mut self, case: &GemmCase, protocol: &Protocol) -> Result<Vec<f64>> {
        let threads = self.threads;
        let (m, n, k) = (case.m as f64, case.n as f64, case.k as f64);
        let bytes = usize::try_from(case.format.bytes()).unwrap_or(8);
        let r = rotations(protocol.cache, bytes * case.k * case.n);
        check_memory(
            "gemm",
            (m * k + m * n + r as f64 * k * n) * case.format.bytes() as f64,
        )?;
        match case.format {
            Format::Fp32 => Ok(self
                .pool
                .install(|| time_gemm::<f32>(case, threads, protocol))),
            Format::Fp64 => Ok(self
                .pool
                .install(|| time_gemm::<f64>(case, threads, protocol))),
            other => Err(Error::invalid(
                format!("gemm {}", other.name()),
                "the CPU backend runs fp32 and fp64 GEMM; tf32, fp16 and bf16 need the CUDA backend",
            )),
        }
    }

    fn conv(&mut self, case: &ConvCase, pass: ConvPass, protocol: &Protocol) -> Result<Vec<f64>> {
        if pass == ConvPass::Backward {
            return Err(ConvPass::refused(&format!("conv case `{}`", case.label)));
        }
        if case.layout != Layout::ChannelsFirst {
            return Err(Error::invalid(
                format!("conv case `{}`", case.label),
                "the CPU backend takes convolutions channels-first (it packs channels-last \
                 tiles itself); measure channels-last on a GPU (--device cuda)",
            ));
        }
        if case.format != Format::Fp32 {
            return Err(Error::invalid(
                format!("conv case `{}`", case.label),
                format!(
                    "the CPU backend runs convolutions in fp32, not {}; measure other formats \
                     on a GPU (--device cuda)",
                    case.format.name()
                ),
            ));
        }
        let graph = cases::conv_graph(case)?;
        let (kernel, lens, params) = case_kernel(&graph, case.batch);
        let Kernel::Conv { geom, bias } = &kernel else {
            unreachable!("conv cases build a conv kernel")
        };
        let threads = self.threads;
        let out_len = geom.n * geom.c_out * geom.out_vol();
        // In a step the input (forward) or the output gradient (backward) was just written
        // by the neighbouring layer, and the buffer written comes from the executor's pool,
        // recently used: one buffer each. The weights, the saved input (backward-filter)
        // and the weight gradient (written once a step) are cold: rotated.
        let (warm_len, cold_len) = match pass {
            ConvPass::Forward => (lens[0] + out_len, geom.weights()),
            ConvPass::BackwardData => (out_len + lens[0], geom.weights()),
            ConvPass::BackwardFilter => (out_len + geom.weights(), lens[0] + geom.weights()),
            ConvPass::Backward => unreachable!("refused at the top of `conv`"),
        };
        let r = rotations(protocol.cache, 4 * cold_len);
        check_memory(
            &format!("conv case `{}`", case.label),
            4.0 * (warm_len + r * cold_len) as f64 + geom.workspace_bytes() as f64,
        )?;
        // Backward-filter reads no weights: it writes their gradient, rotated below.
        let weight_copies = match pass {
            ConvPass::BackwardFilter => 1,
            _ => r,
        };
        let weights: Vec<Vec<Vec<f32>>> = std::iter::once(params)
            .chain((1..weight_copies).map(|i| kernel.init_params(7 + i as u64)))
            .collect();
        let mut cycle = Cycle::new(r);
        Ok(self.pool.install(|| match pass {
            ConvPass::Forward => {
                let x: Vec<f32> = data(lens[0], 3);
                let mut y = vec![0.0; out_len];
                protocol.measure(|| {
                    let i = cycle.step();
                    let b = bias.then(|| weights[i][1].as_slice());
                    conv::forward(geom, &x, &weights[i][0], b, &mut y, threads);
                    black_box(&y);
                })
            }
            ConvPass::BackwardData => {
                let dy: Vec<f32> = data(out_len, 4);
                let mut dx = vec![0.0; lens[0]];
                protocol.measure(|| {
                    let i = cycle.step();
                    conv::backward_data(geom, &dy, &weights[i][0], &mut dx, threads);
                    black_box(&dx);
                })
            }
            ConvPass::BackwardFilter => {
                let dy: Vec<f32> = data(out_len, 4);
                let x: Vec<Vec<f32>> = copies(r, lens[0], 3);
                let mut dw: Vec<Vec<f32>> =
                    (0..r).map(|_| vec![0.0; weights[0][0].len()]).collect();
                let mut db = vec![0.0; geom.c_out];
                protocol.measure(|| {
                    let i = cycle.step();
                    let b = bias.then_some(db.as_mut_slice());
                    conv::backward_filter(geom, &x[i], &dy, &mut dw[i], b, threads);
                    black_box((&dw[i], &db));
                })
            }
            ConvPass::Backward => unreachable!("refused at the top of `conv`"),
        }))
    }

    fn stream(
        &mut self,
        kernel: StreamKernel,
        elements: usize,
        protocol: &Protocol,
    ) -> Result<Vec<f64>> {
        if elements == 0 {
            return Err(Error::invalid(
                "stream",
                "the arrays need at least one element",
            ));
        }
        check_memory("stream", 24.0 * elements as f64)?;
        Ok(self.pool.install(|| {
            // STREAM measures each level of the hierarchy by its working set: warm.
            let warm = Protocol {
                cache: CacheState::Warm,
                ..*protocol
            };
            let mut arrays = stream::Arrays::new(elements);
            warm.measure(|| arrays.run(kernel))
        }))
    }

    fn op(&mut self, case: &OpCase, pass: Pass, protocol: &Protocol) -> Result<Vec<f64>> {
        if case.format != Format::Fp32 {
            return Err(Error::invalid(
                format!("op {} {}", case.op.kind(), case.format.name()),
                format!(
                    "the CPU backend runs ops in fp32, not {}; measure other formats on a GPU \
                     (--device cuda)",
                    case.format.name()
                ),
            ));
        }
        let graph = cases::op_graph(case)?;
        let (kernel, lens, params) = case_kernel(&graph, case.batch);
        let layer = graph
            .layers()
            .last()
            .unwrap_or_else(|| unreachable!("case graphs have a layer"));
        let out_len = layer.output.elements() as usize * case.batch;
        let threads = self.threads;
        let params_len: usize = params.iter().map(Vec::len).sum();
        let inputs_len: usize = lens.iter().sum();
        // In a step the (first) input was just written by the layer before (forward), the
        // output gradient by the layer after (backward), and the buffers written come from
        // the executor's pool, recently used: one buffer each. The other inputs, the
        // parameters and their gradients, and the saved tensors are cold: rotated.
        let (warm_len, cold_len) = match pass {
            Pass::Forward => (lens[0] + out_len, inputs_len - lens[0] + params_len),
            Pass::Backward => (out_len + inputs_len, inputs_len + out_len + 2 * params_len),
        };
        let r = rotations(protocol.cache, 4 * cold_len);
        check_memory(
            &format!("op case `{}`", case.op.kind()),
            4.0 * (warm_len + r * cold_len) as f64,
        )?;
        let inputs: Vec<Vec<Vec<f32>>> = (0..r)
            .map(|c| {
                lens.iter()
                    .enumerate()
                    .map(|(i, &l)| match (pass, i, c) {
                        // Forward reads one first input, whatever the copy.
                        (Pass::Forward, 0, 1..) => Vec::new(),
                        _ => data(l, 5 + i as u64 + 1000 * c as u64),
                    })
                    .collect()
            })
            .collect();
        let views: Vec<Vec<&[f32]>> = inputs
            .iter()
            .map(|copy| {
                copy.iter()
                    .enumerate()
                    .map(|(i, v)| match (pass, i) {
                        (Pass::Forward, 0) => inputs[0][0].as_slice(),
                        _ => v.as_slice(),
                    })
                    .collect()
            })
            .collect();
        let weights: Vec<Vec<Vec<f32>>> = std::iter::once(params)
            .chain((1..r).map(|c| kernel.init_params(7 + c as u64)))
            .collect();
        let mut cycle = Cycle::new(r);
        Ok(self.pool.install(|| {
            // Backward reads the output its forward saved, one per copy; forward writes one.
            let saved = match pass {
                Pass::Forward => 1,
                Pass::Backward => r,
            };
            let mut outs: Vec<Vec<f32>> = (0..saved).map(|_| vec![0.0; out_len]).collect();
            let mut aux = Aux::default();
            for (c, out) in outs.iter_mut().enumerate() {
                kernel.forward(&views[c], &weights[c], out, &mut aux, threads, 11);
            }
            match pass {
                Pass::Forward => {
                    let out = &mut outs[0];
                    protocol.measure(|| {
                        let c = cycle.step();
                        kernel.forward(&views[c], &weights[c], out, &mut aux, threads, 11);
                        black_box(&out);
                    })
                }
                Pass::Backward => {
                    let dy: Vec<f32> = data(out_len, 6);
                    let mut dx: Vec<Vec<f32>> = lens.iter().map(|&l| vec![0.0; l]).collect();
                    let mut dparams: Vec<Vec<Vec<f32>>> = (0..r)
                        .map(|_| weights[0].iter().map(|p| vec![0.0; p.len()]).collect())
                        .collect();
                    protocol.measure(|| {
                        let c = cycle.step();
                        let mut d: Vec<Option<&mut [f32]>> =
                            dx.iter_mut().map(|v| Some(v.as_mut_slice())).collect();
                        kernel.backward(
                            &views[c],
                            &outs[c],
                            &dy,
                            &weights[c],
                            &aux,
                            &mut d,
                            &mut dparams[c],
                            threads,
                            11,
                        );
                        black_box(&d);
                    })
                }
            }
        }))
    }

    fn workload(
        &mut self,
        graph: &Graph,
        batch: usize,
        precision: Precision,
        protocol: &Protocol,
    ) -> Result<WorkloadRun> {
        if batch == 0 {
            return Err(Error::invalid("batch", "must be at least 1"));
        }
        if precision != Precision::Fp32 {
            return Err(Error::invalid(
                format!("workload `{}` in {}", graph.name(), precision.name()),
                "the CPU executor trains in fp32 only; tf32, amp-fp16 and amp-bf16 run on a GPU \
                 (--device cuda)",
            ));
        }
        // One expert-parallel rank's layer sends most of its tokens to experts it does not
        // hold: the executor runs whole models on one device.
        for layer in graph.layers() {
            if let ridgeline_model::graph::Op::Moe(m) = &layer.op
                && m.local < m.experts
            {
                return Err(Error::invalid(
                    format!("workload `{}`, layer `{}`", graph.name(), layer.name),
                    format!(
                        "holds {} of its {} experts (one expert-parallel rank); the executor \
                         runs a whole model on one device: give local = experts",
                        m.local, m.experts
                    ),
                ));
            }
        }
        let footprint = Footprint::of(graph, Precision::Fp32, Optimizer::Sgd)
            .at(batch as u64, Bytes::new(f64::INFINITY));
        check_memory(
            &format!("workload `{}` at batch {batch}", graph.name()),
            footprint.total.value() - footprint.workspace.value(),
        )?;
        let threads = self.threads;
        reset_peak_rss();
        let (steps, peak) = self.pool.install(|| {
            let mut exec = exec::Executor::new(graph, batch, threads);
            let steps = protocol.steps(|| {
                let t = exec.step();
                (t.total, t)
            });
            (steps, exec.peak_bytes())
        });
        Ok(crate::schedule::workload_run(
            graph,
            &steps,
            peak as u64,
            peak_rss(),
        ))
    }
}

/// Refuses work whose buffers would not fit in the memory available now (Linux
/// `MemAvailable`; no check where it is unknown), rather than dying half-way.
fn check_memory(what: &str, bytes: f64) -> Result<()> {
    let Some(available) = available_memory() else {
        return Ok(());
    };
    if bytes <= available as f64 {
        return Ok(());
    }
    let gib = |b: f64| b / f64::from(1u32 << 30);
    Err(Error::invalid(
        what,
        format!(
            "needs about {:.1} GiB of memory and {:.1} GiB is available; choose a smaller shape or batch",
            gib(bytes),
            gib(available as f64)
        ),
    ))
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// Resets the kernel's peak-RSS counter of this process (Linux `clear_refs`; ignored where
/// unsupported).
pub(crate) fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The peak resident set of this process since the last reset (Linux `VmHWM`).
pub(crate) fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ridgeline_model::workloads::{self, BuildOptions};

    #[test]
    fn work_beyond_memory_is_refused() {
        let mut b = CpuBackend::new(1).unwrap();
        let case = GemmCase {
            m: 1 << 20,
            n: 1 << 20,
            k: 1 << 20,
            format: Format::Fp32,
        };
        let err = b.gemm(&case, &Protocol::quick()).unwrap_err().to_string();
        assert!(err.contains("GiB is available"), "{err}");
        let err = b
            .stream(StreamKernel::Triad, 1 << 50, &Protocol::quick())
            .unwrap_err()
            .to_string();
        assert!(err.contains("choose a smaller"), "{err}");
    }

    #[test]
    fn gemm_formats() {
        let mut b = CpuBackend::new(1).unwrap();
        let case = GemmCase {
            m: 64,
            n: 64,
            k: 64,
            format: Format::Fp64,
        };
        assert_eq!(b.gemm(&case, &Protocol::quick()).unwrap().len(), 3);
        let err = b
            .gemm(
                &GemmCase {
                    format: Format::Bf16,
                    ..case
                },
                &Protocol::quick(),
            )
            .unwrap_err();
        assert!(err.to_string().contains("CUDA"), "{err}");
    }

    #[test]
    fn workload_runs_every_layer_of_a_small_cosmoflow() {
        let g = workloads::build(
            "cosmoflow",
            &BuildOptions {
                input_size: Some(vec![32]),
                width: 0.25,
            },
        )
        .unwrap();
        let mut b = CpuBackend::new(2).unwrap();
        let p = Protocol {
            min_samples: 2,
            max_samples: 2,
            ..Protocol::quick()
        };
        let run = b.workload(&g, 2, Precision::Fp32, &p).unwrap();
        assert_eq!(run.layers.len(), g.layers().len());
        assert_eq!(run.step_s.len(), 2);
        assert!(run.loss_scale.is_empty() && run.skipped_updates == 0);
        // Mixed precision runs on a GPU only, and says so.
        let e = b
            .workload(&g, 2, Precision::AmpFp16, &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("amp-fp16") && e.contains("--device cuda"), "{e}");
        let conv = run.layers.iter().find(|l| l.name == "conv3d_1").unwrap();
        assert!(
            conv.forward_s.iter().all(|&t| t > 0.0) && conv.backward_s.iter().all(|&t| t > 0.0)
        );
        assert!(run.peak_bytes > 0);
    }
}
