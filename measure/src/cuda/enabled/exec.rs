//! The full-workload executor on a GPU: the layer graph forward and backward with cuDNN
//! (convolutions, pooling, batch norm), cuBLAS (dense layers) and NVRTC kernels (the
//! element-wise and shaped ops, losses, bias, gradient accumulation and the SGD update), on
//! synthetic data generated on the device. Each layer pass is bracketed by CUDA events,
//! and buffers follow the [`Schedule`] the CPU executor uses, tracked by a [`Tracker`]
//! whose high-water mark (cuDNN workspace included) is the peak device memory reported.
//!
//! Every training precision of the model runs ([`ExecPrecision`]): FP32; TF32 (FP32 data,
//! tensor-core convolutions and GEMMs); and mixed precision, FP16 or BF16: activations and
//! their gradients in 16 bits (the NVRTC kernels compiled for that storage, cuDNN and
//! cuBLAS on 16-bit tensors with FP32 accumulation), conv and dense weights used through a
//! 16-bit copy of an FP32 master, batch-norm, affine and bias parameters FP32, the losses
//! FP32. Under FP16 the loss gradient is scaled ([`LossScaler`]); the update checks the
//! gradients for overflow on the device, unscales them into the FP32 masters (skipping
//! the step on overflow) and rewrites the 16-bit copies.
//!
//! Differences from the CPU executor, each where cuDNN or the GPU asks for it: a max
//! pooling's backward pass recomputes the pooled output cuDNN reads (a temporary); an
//! unevenly padded convolution or pooling copies its input into the padded tensor cuDNN
//! takes, forward and again backward; softmax cross-entropy keeps a copy of its input (the
//! CPU keeps the probabilities, the same size); dropout's mask is a hash of the element
//! index, so no mask is stored; a convolution's bias is added by a kernel after cuDNN.
//!
//! Each op's forward and backward sit side by side in a module of what runs them
//! ([`conv`] cuDNN, [`matrix`] cuBLAS, [`pointwise`] and [`normalize`] NVRTC kernels,
//! [`attention`]); [`pass`] resolves a layer's device addresses once and dispatches on its
//! plan. What has run on a GPU: the `cuda` module docs.

mod attention;
mod conv;
mod matrix;
mod normalize;
mod pass;
mod pointwise;

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublas;
use cudarc::driver::{
    self, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use ridgeline_model::graph::Graph;
use ridgeline_model::precision::Precision;

use super::device::{CudaBackend, Timer, call, chosen_notes, fastest_algorithm};
use crate::backend::{ConvPass, PassNotes};
use crate::cuda::cudnn::{
    Buffers, CudnnFailure, Handle, Layer as CudnnLayer, OpBuffers, Pass as CudnnPass,
    WORKSPACE_LIMIT,
};
use crate::cuda::layers::{Embed, ExecPrecision, LayerPlan, LossScaler};
use crate::cuda::plan::{
    ConvPlan, Element, STREAM_BLOCK, ShapedLaunch, SpatialLaunch, elements, stream_grid,
};
use crate::error::{Error, Result};
use crate::schedule::{LEARNING_RATE, Schedule, StepTimes, Tracker};

/// Scale of the synthetic input and of the initial weights (times `1 / sqrt(fan-in)`).
const DATA_SCALE: f32 = 1.0;

/// Device memory of any element type, in bytes.
type Buf = CudaSlice<u8>;

/// A kernel argument: a device pointer, a float or an integer.
#[derive(Debug, Clone, Copy)]
enum Arg {
    Ptr(u64),
    F32(f32),
    U64(u64),
}

/// The cuDNN passes of one convolution layer (of its adjoint, for a transposed one).
struct ConvPasses {
    forward: CudnnPass,
    backward_data: Option<CudnnPass>,
    backward_filter: CudnnPass,
    /// Workspace each needs, bytes (forward, backward-data, backward-filter).
    workspace: [usize; 3],
    /// The algorithm each pass runs and what choosing it measured, for the layer's records.
    notes: PassNotes,
}

/// What a layer keeps on the device besides its parameters.
enum Device {
    None,
    Conv(Box<ConvPasses>),
    Cudnn(CudnnLayer),
}

/// A training step of a graph on the GPU.
pub(super) struct GpuExecutor<'g> {
    graph: &'g Graph,
    batch: usize,
    precision: ExecPrecision,
    schedule: Schedule,
    plans: Vec<LayerPlan>,
    device: Vec<Device>,
    /// The FP32 master of every parameter (the only copy outside mixed precision).
    params: Vec<Vec<CudaSlice<f32>>>,
    /// Mixed precision: the 16-bit copy conv and dense weights are used through.
    copies: Vec<Vec<Option<Buf>>>,
    /// Every parameter's gradient (16-bit for a weight with a copy, else FP32).
    dparams: Vec<Vec<Buf>>,
    /// Batch norm's running mean and variance, saved mean and inverse variance (FP32); a
    /// loss's regression target (activation storage).
    state: Vec<Vec<Buf>>,
    input: Option<Buf>,
    /// Freed buffers by size in bytes.
    pool: HashMap<usize, Vec<Buf>>,
    tracker: Tracker,
    workspace: CudaSlice<u8>,
    workspace_bytes: usize,
    /// Per layer: forward start and end, backward start and end.
    events: Vec<[CudaEvent; 4]>,
    /// Step start, update start, step end.
    step_events: [CudaEvent; 3],
    /// Set on the device when a gradient is not finite (loss scaling); zero otherwise.
    overflow: CudaSlice<f32>,
    /// Dynamic loss scaling, under FP16.
    scaler: Option<LossScaler>,
    stream: Arc<CudaStream>,
    ordinal: usize,
    sms: u32,
    /// Kernels with their activation storage and name.
    kernels: Vec<(Element, &'static str, CudaFunction)>,
}

fn ptr<T>(s: &CudaSlice<T>, stream: &Arc<CudaStream>) -> u64 {
    s.device_ptr(stream).0
}

/// A cuDNN failure as this crate's error.
fn device_error(ordinal: usize, f: CudnnFailure) -> Error {
    Error::Device {
        device: format!("cuda:{ordinal}"),
        call: f.call.into(),
        message: f.message,
    }
}

impl<'g> GpuExecutor<'g> {
    /// Plans `graph` at `batch` in `precision` on `backend`'s GPU: parameters initialised
    /// on the device, cuDNN's algorithms found for every convolution pass, the input batch
    /// generated.
    pub(super) fn new(
        backend: &mut CudaBackend,
        graph: &'g Graph,
        batch: usize,
        precision: Precision,
    ) -> Result<GpuExecutor<'g>> {
        let what = format!(
            "workload `{}` at batch {batch} in {}",
            graph.name(),
            precision.name()
        );
        let plans = graph
            .layers()
            .iter()
            .map(|l| {
                LayerPlan::of(graph, l, batch)
                    .map_err(|m| Error::invalid(format!("{what}: layer `{}`", l.name), m))
            })
            .collect::<Result<Vec<_>>>()?;
        let exec_precision = ExecPrecision::of(precision).ok_or_else(|| {
            Error::invalid(
                what.clone(),
                "ridgeline's CUDA executor runs no FP8 (no FP8 GEMMs, no Transformer Engine \
                 scaling); measure amp-bf16 and predict fp8"
                    .to_owned(),
            )
        })?;
        let schedule = Schedule::of(graph);
        if exec_precision.weight_copies() {
            // The loss gradient is seeded in FP32 (and scaled): every sink must be a loss.
            if let Some(i) = schedule.losses().find(|&i| !plans[i].is_loss()) {
                return Err(Error::invalid(
                    format!("{what}: layer `{}`", graph.layers()[i].name),
                    "under mixed precision every output must be a loss (mse or softmax \
                     cross-entropy); run fp32 or tf32, or end the graph with a loss",
                ));
            }
        }
        let kernels = kernels(backend, exec_precision.storage)?;
        backend.cudnn()?;
        backend.blas()?;
        let stream = backend.stream.clone();
        let (free, _) = backend.call("cuMemGetInfo", backend.ctx.mem_get_info())?;
        let workspace_bytes = WORKSPACE_LIMIT.min(free / 4);
        let workspace: CudaSlice<u8> = backend.zeros(workspace_bytes)?;
        let overflow: CudaSlice<f32> = backend.zeros(1)?;
        let new_event = || {
            backend.call(
                "cuEventCreate",
                backend
                    .ctx
                    .new_event(Some(driver::sys::CUevent_flags::CU_EVENT_DEFAULT)),
            )
        };
        let mut events = Vec::with_capacity(plans.len());
        for _ in &plans {
            events.push([new_event()?, new_event()?, new_event()?, new_event()?]);
        }
        let step_events = [new_event()?, new_event()?, new_event()?];
        let mut exec = GpuExecutor {
            graph,
            batch,
            precision: exec_precision,
            schedule,
            plans,
            device: Vec::new(),
            params: Vec::new(),
            copies: Vec::new(),
            dparams: Vec::new(),
            state: Vec::new(),
            input: None,
            pool: HashMap::new(),
            tracker: Tracker::default(),
            workspace,
            workspace_bytes,
            events,
            step_events,
            overflow,
            scaler: exec_precision.loss_scaling.then(LossScaler::new),
            stream,
            ordinal: backend.ordinal,
            sms: backend.multiprocessors(),
            kernels,
        };
        // Parameters (master, gradient, copy) and the two largest activations.
        let footprint: usize = (0..exec.plans.len())
            .map(|i| {
                exec.plans[i]
                    .parameters()
                    .iter()
                    .enumerate()
                    .map(|(k, len)| len * exec.param_bytes_per_element(i, k))
                    .sum::<usize>()
            })
            .sum::<usize>()
            + 2 * (0..exec.plans.len())
                .map(|i| exec.bytes(i))
                .max()
                .unwrap_or(0);
        backend.check_memory(&what, footprint)?;
        exec.allocate(backend)?;
        let storage = exec.precision.storage;
        let n0 = exec.len(0);
        let input = backend.zeros::<u8>(n0 * storage.bytes())?;
        exec.uniform(ptr(&input, &exec.stream), n0, storage, 0x5EED, DATA_SCALE)?;
        exec.input = Some(input);
        let timer = backend.timer()?;
        exec.find_algorithms(backend, &timer)?;
        call(
            exec.ordinal,
            "cuStreamSynchronize",
            exec.stream.synchronize(),
        )?;
        Ok(exec)
    }

    /// Every layer's parameters (the FP32 master, initialised on the device; its gradient;
    /// the 16-bit copy under mixed precision, written from the master) and its state (batch
    /// norm's statistics, a norm's per-position statistics, a regression loss's target).
    fn allocate(&mut self, backend: &CudaBackend) -> Result<()> {
        let storage = self.precision.storage;
        for i in 0..self.plans.len() {
            let lens = self.plans[i].parameters();
            let fan_in = match &self.plans[i] {
                LayerPlan::Conv { geometry, .. } => elements(&geometry.w[1..]),
                LayerPlan::Dense { input, .. } => *input,
                LayerPlan::Linear { c, .. } => *c,
                _ => 1,
            };
            let (mut ps, mut cs, mut ds) = (Vec::new(), Vec::new(), Vec::new());
            for (k, &len) in lens.iter().enumerate() {
                let p = backend.zeros::<f32>(len)?;
                let pp = ptr(&p, &self.stream);
                // Weights uniform in +-1/sqrt(fan-in); biases and shifts zero; batch-norm
                // and affine scales one.
                let scale_param = matches!(
                    self.plans[i],
                    LayerPlan::BatchNorm { .. } | LayerPlan::Shaped { .. } | LayerPlan::Norm { .. }
                ) && k == 0;
                if scale_param {
                    self.fill(pp, len, Element::F32, 1.0)?;
                } else if k == 0 {
                    let s = DATA_SCALE / (fan_in as f32).sqrt();
                    self.uniform(pp, len, Element::F32, 0xC0FFEE ^ i as u64, s)?;
                }
                let grad = self.param_element(i, k);
                self.tracker.alloc(4 * len + grad.bytes() * len);
                ds.push(backend.zeros::<u8>(grad.bytes() * len)?);
                cs.push(if grad == Element::F32 {
                    None
                } else {
                    self.tracker.alloc(grad.bytes() * len);
                    Some(backend.zeros::<u8>(grad.bytes() * len)?)
                });
                ps.push(p);
            }
            self.params.push(ps);
            self.copies.push(cs);
            self.dparams.push(ds);
            let mut state = Vec::new();
            match &self.plans[i] {
                LayerPlan::BatchNorm { dims } => {
                    for _ in 0..4 {
                        state.push(backend.zeros::<u8>(4 * dims[1] as usize)?);
                    }
                    self.tracker.alloc(16 * dims[1] as usize);
                }
                LayerPlan::Norm { vol, .. } => {
                    // The mean and inverse deviation per position (FP32).
                    let bytes = 8 * self.batch * vol;
                    state.push(backend.zeros::<u8>(bytes)?);
                    self.tracker.alloc(bytes);
                }
                LayerPlan::Shaped { forward, .. } if forward.kernel == "op_mse_fwd" => {
                    let n = self.len(self.graph.layers()[i].inputs[0]);
                    let t = backend.zeros::<u8>(n * storage.bytes())?;
                    self.uniform(
                        ptr(&t, &self.stream),
                        n,
                        storage,
                        0x7A5 ^ i as u64,
                        DATA_SCALE,
                    )?;
                    self.tracker.alloc(t.len());
                    state.push(t);
                }
                _ => {}
            }
            self.state.push(state);
        }
        // The 16-bit copies from the masters: the update at learning rate 0.
        for i in 0..self.plans.len() {
            for k in 0..self.params[i].len() {
                if self.copies[i][k].is_some() {
                    self.update(i, k, 0.0, 1.0)?;
                }
            }
        }
        Ok(())
    }

    /// Lets cuDNN rank every convolution pass's algorithms on buffers of the layer's sizes,
    /// keeps the fastest of its first few by `timer` ([`super::device::fastest_algorithm`]), and
    /// builds the pooling and batch-norm descriptors.
    fn find_algorithms(&mut self, backend: &CudaBackend, timer: &Timer) -> Result<()> {
        let ordinal = self.ordinal;
        let failed = move |f: CudnnFailure| device_error(ordinal, f);
        let handle = backend
            .cudnn
            .as_ref()
            .ok_or_else(|| Error::invalid("cuDNN", "handle missing"))?;
        let needs_grad = self.schedule.needs_grad.clone();
        let conv_plan =
            ConvPlan::of(self.precision.matrix).map_err(|m| Error::invalid("GPU executor", m))?;
        let storage = self.precision.storage;
        let data = conv_plan.data.bytes();
        for i in 0..self.plans.len() {
            let plan = self.plans[i].clone();
            let device = match &plan {
                LayerPlan::Conv {
                    geometry,
                    transposed,
                    ..
                } => {
                    let x = self.take(elements(&geometry.x) * data)?;
                    let y = self.take(elements(&geometry.y) * data)?;
                    let scratch_w = self.take(elements(&geometry.w) * data)?;
                    let w = self.param(i, 0);
                    let buffers = |w: u64| Buffers {
                        x: ptr(&x, &self.stream) as *mut c_void,
                        w: w as *mut c_void,
                        y: ptr(&y, &self.stream) as *mut c_void,
                        bias: std::ptr::null_mut(),
                        workspace: self.workspace.device_ptr(&self.stream).0 as *mut c_void,
                        workspace_bytes: self.workspace_bytes,
                    };
                    let input_grad = self.graph.layers()[i]
                        .inputs
                        .first()
                        .is_some_and(|&j| needs_grad[j]);
                    let g = geometry.clone();
                    // The bias is added by a kernel (FP32 bias on any activation storage).
                    let (mut forward, _) = CudnnPass::find(
                        handle,
                        &g,
                        ConvPass::Forward,
                        false,
                        conv_plan,
                        buffers(w),
                    )
                    .map_err(&failed)?;
                    // What each cuDNN pass runs, for the records of the layer pass it serves.
                    let [mut forward_notes, mut data_notes, mut filter_notes] =
                        [(); 3].map(|_| std::collections::BTreeMap::new());
                    let retimed =
                        fastest_algorithm(timer, handle, &mut forward, buffers(w), failed)?;
                    chosen_notes("cudnn_forward_", &forward, &retimed, &mut forward_notes);
                    let f_ws = forward.workspace_bytes();
                    // A transposed layer's forward pass is the adjoint's backward-data.
                    let (backward_data, d_ws) = if input_grad || *transposed {
                        let (mut p, _) = CudnnPass::find(
                            handle,
                            &g,
                            ConvPass::BackwardData,
                            false,
                            conv_plan,
                            buffers(w),
                        )
                        .map_err(&failed)?;
                        let retimed = fastest_algorithm(timer, handle, &mut p, buffers(w), failed)?;
                        chosen_notes("cudnn_backward_data_", &p, &retimed, &mut data_notes);
                        let ws = p.workspace_bytes();
                        (Some(p), ws)
                    } else {
                        (None, 0)
                    };
                    let sw = ptr(&scratch_w, &self.stream);
                    let (mut backward_filter, _) = CudnnPass::find(
                        handle,
                        &g,
                        ConvPass::BackwardFilter,
                        false,
                        conv_plan,
                        buffers(sw),
                    )
                    .map_err(&failed)?;
                    let retimed = fastest_algorithm(
                        timer,
                        handle,
                        &mut backward_filter,
                        buffers(sw),
                        failed,
                    )?;
                    chosen_notes(
                        "cudnn_backward_filter_",
                        &backward_filter,
                        &retimed,
                        &mut filter_notes,
                    );
                    // A transposed layer's forward runs the adjoint's backward-data and its
                    // backward the adjoint's forward; the weight gradient is the backward's.
                    if *transposed {
                        std::mem::swap(&mut forward_notes, &mut data_notes);
                    }
                    data_notes.extend(filter_notes);
                    let notes = PassNotes {
                        forward: forward_notes,
                        backward: data_notes,
                    };
                    let w_ws = backward_filter.workspace_bytes();
                    for b in [x, y, scratch_w] {
                        self.give(b);
                    }
                    Device::Conv(Box::new(ConvPasses {
                        forward,
                        backward_data,
                        backward_filter,
                        workspace: [f_ws, d_ws, w_ws],
                        notes,
                    }))
                }
                LayerPlan::Pool { geometry, .. } => {
                    Device::Cudnn(CudnnLayer::pool(geometry, storage).map_err(&failed)?)
                }
                LayerPlan::BatchNorm { dims } => {
                    Device::Cudnn(CudnnLayer::batch_norm(dims, storage).map_err(&failed)?)
                }
                _ => Device::None,
            };
            self.device.push(device);
        }
        Ok(())
    }

    /// What each layer's passes ran, in the graph's order (the algorithms of a
    /// convolution's passes; nothing for other layers).
    pub(super) fn notes(&self) -> Vec<PassNotes> {
        self.device
            .iter()
            .map(|d| match d {
                Device::Conv(p) => p.notes.clone(),
                _ => PassNotes::default(),
            })
            .collect()
    }

    /// The peak of tracked device memory so far.
    pub(super) fn peak_bytes(&self) -> usize {
        self.tracker.peak()
    }

    /// Elements of node `i`'s output for the batch.
    fn len(&self, i: usize) -> usize {
        self.graph.layers()[i].output.elements() as usize * self.batch
    }

    /// The element type of node `i`'s output and its gradient: FP32 for a loss, the
    /// activation storage otherwise.
    fn element(&self, i: usize) -> Element {
        if self.plans[i].is_loss() {
            Element::F32
        } else {
            self.precision.storage
        }
    }

    /// Bytes of node `i`'s output (or its gradient) for the batch.
    fn bytes(&self, i: usize) -> usize {
        self.len(i) * self.element(i).bytes()
    }

    /// Bytes of `len` activation elements.
    fn act(&self, len: usize) -> usize {
        len * self.precision.storage.bytes()
    }

    /// The element type of parameter `k` of layer `i`'s gradient and compute copy: 16-bit
    /// for conv and dense weights under mixed precision, else FP32 (and no copy).
    fn param_element(&self, i: usize, k: usize) -> Element {
        if self.precision.weight_copies() && self.plans[i].is_matrix_weight(k) {
            self.precision.storage
        } else {
            Element::F32
        }
    }

    /// Device bytes per element of parameter `k` of layer `i`: master, gradient and copy.
    fn param_bytes_per_element(&self, i: usize, k: usize) -> usize {
        match self.param_element(i, k) {
            Element::F32 => 8,
            e => 4 + 2 * e.bytes(),
        }
    }

    /// A device buffer of `bytes`, reused from freed ones of that size when there is one
    /// (as the frameworks' caching allocators do); contents are stale.
    fn take(&mut self, bytes: usize) -> Result<Buf> {
        if let Some(b) = self.pool.get_mut(&bytes).and_then(Vec::pop) {
            return Ok(b);
        }
        // SAFETY: the buffer is written by a kernel or library call before anything reads
        // it (every kernel overwrites its outputs; accumulating ones are zeroed first).
        call(self.ordinal, "cuMemAllocAsync", unsafe {
            self.stream.alloc::<u8>(bytes.max(4))
        })
    }

    /// [`Self::take`], counted by the tracker (return it with [`Self::release`]).
    fn tracked(&mut self, bytes: usize) -> Result<Buf> {
        let b = self.take(bytes)?;
        self.tracker.alloc(b.len());
        Ok(b)
    }

    fn give(&mut self, b: Buf) {
        self.pool.entry(b.len()).or_default().push(b);
    }

    /// Launches kernel `name` of activation storage `storage` over `threads` with `args`.
    fn launch(&self, name: &str, storage: Element, threads: usize, args: &[Arg]) -> Result<()> {
        let f = self
            .kernels
            .iter()
            .find(|(s, k, _)| *s == storage && *k == name)
            .map(|(_, _, f)| f)
            .ok_or_else(|| {
                Error::invalid(
                    "GPU executor",
                    format!("kernel {name} ({storage:?}) missing"),
                )
            })?;
        let cfg = LaunchConfig {
            grid_dim: (stream_grid(threads.max(1), self.sms), 1, 1),
            block_dim: (STREAM_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut l = self.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(v) | Arg::U64(v) => l.arg(v),
                Arg::F32(v) => l.arg(v),
            };
        }
        // SAFETY: every kernel's parameters are pointers, floats and 64-bit integers in the
        // order `args` gives them (each call site follows the kernel's signature in its
        // source, which the plan's tests check); every pointer is a live device allocation
        // of at least the elements the kernel indexes for `threads` (the layer's sizes), of
        // the element type the kernel's storage `T` (or `float`) says.
        call(self.ordinal, "cuLaunchKernel", unsafe { l.launch(cfg) }).map(drop)
    }

    /// Launches the activation-storage kernel `name`.
    fn run(&self, name: &str, threads: usize, args: &[Arg]) -> Result<()> {
        self.launch(name, self.precision.storage, threads, args)
    }

    /// Synthetic data: `n` elements of `storage` at `p`, uniform in `[-scale, scale)`.
    fn uniform(&self, p: u64, n: usize, storage: Element, seed: u64, scale: f32) -> Result<()> {
        self.launch(
            "ex_uniform",
            storage,
            n,
            &[
                Arg::Ptr(p),
                Arg::U64(seed),
                Arg::F32(scale),
                Arg::U64(n as u64),
            ],
        )
    }

    /// Sets `n` elements of `storage` at `p` to `v`.
    fn fill(&self, p: u64, n: usize, storage: Element, v: f32) -> Result<()> {
        self.launch(
            "ex_fill",
            storage,
            n,
            &[Arg::Ptr(p), Arg::F32(v), Arg::U64(n as u64)],
        )
    }

    /// Zeroes `n` FP32 elements (parameter gradients, losses) at `p`.
    fn zero(&self, p: u64, n: usize) -> Result<()> {
        self.fill(p, n, Element::F32, 0.0)
    }

    /// The SGD update of parameter `k` of layer `i` at learning rate `lr`, its gradient
    /// times `unscale`, skipped where the overflow flag is set; rewrites its copy.
    fn update(&self, i: usize, k: usize, lr: f32, unscale: f32) -> Result<()> {
        let n = self.params[i][k].len();
        let copy = self.copies[i][k]
            .as_ref()
            .map_or(0, |c| ptr(c, &self.stream));
        self.launch(
            "ex_sgd",
            self.param_element(i, k),
            n,
            &[
                Arg::Ptr(ptr(&self.params[i][k], &self.stream)),
                Arg::Ptr(ptr(&self.dparams[i][k], &self.stream)),
                Arg::Ptr(copy),
                Arg::Ptr(ptr(&self.overflow, &self.stream)),
                Arg::F32(lr),
                Arg::F32(unscale),
                Arg::U64(n as u64),
            ],
        )
    }

    fn record(&self, e: &CudaEvent) -> Result<()> {
        call(self.ordinal, "cuEventRecord", e.record(&self.stream))
    }

    fn seconds(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f64> {
        let ms = call(self.ordinal, "cuEventElapsedTime", start.elapsed_ms(end))?;
        Ok(f64::from(ms) / 1e3)
    }

    /// Copies an unevenly padded input into the tensor cuDNN takes (tracked, freed by the
    /// caller).
    fn embed(&mut self, e: &Embed, x: u64) -> Result<Buf> {
        let n = e.padded_elements();
        let padded = self.tracked(self.act(n as usize))?;
        let p = ptr(&padded, &self.stream);
        self.run("ex_embed", n as usize, &embed_args(e, x, p, n))?;
        Ok(padded)
    }

    /// [`Self::embed`] where the layer pads unevenly.
    fn embed_opt(&mut self, e: Option<&Embed>, x: u64) -> Result<Option<Buf>> {
        e.map(|e| self.embed(e, x)).transpose()
    }

    /// Adds layer `i`'s FP32 bias over `c` channels to its output `y` of `n` elements.
    fn bias_add(&self, i: usize, y: u64, c: usize, n: usize) -> Result<()> {
        self.run(
            "ex_bias_add",
            n,
            &[
                Arg::Ptr(y),
                Arg::Ptr(self.param(i, 1)),
                Arg::U64(c as u64),
                Arg::U64((n / (self.batch * c)) as u64),
                Arg::U64(n as u64),
            ],
        )
    }

    /// Layer `i`'s bias gradient over `c` channels from its output gradient `dy` of `n`
    /// elements.
    fn bias_grad(&self, i: usize, dy: u64, c: usize, n: usize) -> Result<()> {
        let db = self.dparam(i, 1);
        self.zero(db, c)?;
        let inner = n / (self.batch * c);
        self.run(
            "ex_bias_grad",
            crate::cuda::layers::bias_grad_threads(c, inner, n),
            &[
                Arg::Ptr(dy),
                Arg::Ptr(db),
                Arg::U64(c as u64),
                Arg::U64(inner as u64),
                Arg::U64(n as u64),
            ],
        )
    }

    /// Runs one training step: forward, backward, SGD update, and reads back the event
    /// times (one synchronisation, at the end).
    pub(super) fn step(&mut self, handle: &Handle, blas: &cublas::CudaBlas) -> Result<StepTimes> {
        let graph = self.graph;
        let n = self.plans.len();
        let mut acts: Vec<Option<Buf>> = (0..n).map(|_| None).collect();
        let mut aux: Vec<Option<Buf>> = (0..n).map(|_| None).collect();
        self.record(&self.step_events[0])?;
        let input = self
            .input
            .take()
            .ok_or_else(|| Error::invalid("GPU executor", "input missing"))?;
        self.tracker.alloc(input.len());
        acts[0] = Some(input);
        let mut remaining = self.schedule.consumers.clone();
        for i in 1..n {
            let out = self.tracked(self.bytes(i))?;
            self.record(&self.events[i][0])?;
            let saved = self.forward(i, &acts, &out, handle, blas)?;
            self.record(&self.events[i][1])?;
            if let Some(s) = saved {
                aux[i] = Some(s);
            }
            acts[i] = Some(out);
            for &j in &graph.layers()[i].inputs {
                remaining[j] -= 1;
                if remaining[j] == 0
                    && !self.schedule.kept[j]
                    && let Some(b) = acts[j].take()
                {
                    self.release(Some(b));
                }
            }
        }
        // The loss gradient, 1 / batch (each loss is a mean over the batch), times the loss
        // scale.
        let scale = self.scaler.map_or(1.0, |s| s.scale);
        let mut grads: Vec<Option<Buf>> = (0..n).map(|_| None).collect();
        let losses: Vec<usize> = self.schedule.losses().collect();
        for &i in &losses {
            let g = self.tracked(self.bytes(i))?;
            let p = ptr(&g, &self.stream);
            self.fill(p, self.len(i), self.element(i), scale / self.batch as f32)?;
            grads[i] = Some(g);
        }
        // The losses' outputs stay out of the pool until read after the step.
        let mut loss_outputs = Vec::new();
        let mut ran_backward = vec![false; n];
        for i in (1..n).rev() {
            if let Some(dy) = grads[i].take() {
                let inputs = graph.layers()[i].inputs.clone();
                let mut dx: Vec<Option<Buf>> = Vec::new();
                for &j in &inputs {
                    dx.push(if self.schedule.needs_grad[j] {
                        Some(self.tracked(self.bytes(j))?)
                    } else {
                        None
                    });
                }
                self.record(&self.events[i][2])?;
                self.backward(i, &acts, aux[i].as_ref(), &dy, &dx, handle, blas)?;
                self.add_gradients(&inputs, dx, &mut grads)?;
                self.record(&self.events[i][3])?;
                ran_backward[i] = true;
                self.release(Some(dy));
            }
            let release: Vec<usize> = self.schedule.after_backward(i).collect();
            for j in release {
                if let Some(b) = acts[j].take() {
                    if losses.contains(&j) {
                        self.tracker.free(b.len());
                        loss_outputs.push(b);
                    } else {
                        self.release(Some(b));
                    }
                }
            }
            let a = aux[i].take();
            self.release(a);
        }
        let g0 = grads[0].take();
        self.release(g0);
        self.record(&self.step_events[1])?;
        self.sgd_update(scale)?;
        self.record(&self.step_events[2])?;
        call(
            self.ordinal,
            "cuEventSynchronize",
            self.step_events[2].synchronize(),
        )?;
        if let Some(b) = acts[0].take() {
            self.tracker.free(b.len());
            self.input = Some(b);
        }
        for b in acts.into_iter().flatten() {
            self.release(Some(b));
        }
        let mut forward = vec![0.0; n];
        let mut backward = vec![None; n];
        for i in 1..n {
            let e = &self.events[i];
            forward[i] = self.seconds(&e[0], &e[1])?;
            if ran_backward[i] {
                backward[i] = Some(self.seconds(&e[2], &e[3])?);
            }
        }
        let mut loss = 0.0;
        for b in loss_outputs {
            let bytes = call(self.ordinal, "cuMemcpyDtoH", self.stream.clone_dtoh(&b))?;
            loss += f32s(&bytes).map(f64::from).sum::<f64>() / self.batch as f64;
            self.give(b);
        }
        let loss_scale = match &mut self.scaler {
            Some(s) => {
                let flag = call(
                    self.ordinal,
                    "cuMemcpyDtoH",
                    self.stream.clone_dtoh(&self.overflow),
                )?;
                let overflow = flag.first().is_some_and(|&f| f != 0.0);
                s.update(overflow);
                Some((f64::from(scale), overflow))
            }
            None => None,
        };
        Ok(StepTimes {
            forward,
            backward,
            update: self.seconds(&self.step_events[1], &self.step_events[2])?,
            loss,
            total: self.seconds(&self.step_events[0], &self.step_events[2])?,
            loss_scale,
        })
    }

    /// Each input's new gradient `dx` into `grads`: its first, or added to the one the
    /// input has (and freed).
    fn add_gradients(
        &mut self,
        inputs: &[usize],
        dx: Vec<Option<Buf>>,
        grads: &mut [Option<Buf>],
    ) -> Result<()> {
        for (&j, d) in inputs.iter().zip(dx) {
            let Some(d) = d else { continue };
            match &grads[j] {
                Some(g) => {
                    let (gp, dp) = (ptr(g, &self.stream), ptr(&d, &self.stream));
                    let len = self.len(j);
                    self.launch(
                        "ex_accumulate",
                        self.element(j),
                        len,
                        &[Arg::Ptr(gp), Arg::Ptr(dp), Arg::U64(len as u64)],
                    )?;
                    self.release(Some(d));
                }
                None => grads[j] = Some(d),
            }
        }
        Ok(())
    }

    /// The SGD update of every parameter from its gradient times `1 / scale`; under loss
    /// scaling, first the check that every gradient is finite (the update is skipped on the
    /// device where one is not).
    fn sgd_update(&mut self, scale: f32) -> Result<()> {
        if self.scaler.is_some() {
            // Any infinity or NaN in the scaled gradients skips the update.
            self.zero(ptr(&self.overflow, &self.stream), 1)?;
            let overflow = ptr(&self.overflow, &self.stream);
            for i in 0..self.plans.len() {
                for (k, d) in self.dparams[i].iter().enumerate() {
                    let len = self.params[i][k].len();
                    self.launch(
                        "ex_check_finite",
                        self.param_element(i, k),
                        len,
                        &[
                            Arg::Ptr(ptr(d, &self.stream)),
                            Arg::Ptr(overflow),
                            Arg::U64(len as u64),
                        ],
                    )?;
                }
            }
        }
        for i in 0..self.plans.len() {
            for k in 0..self.params[i].len() {
                self.update(i, k, LEARNING_RATE, 1.0 / scale)?;
            }
        }
        Ok(())
    }

    /// The address `elements` activation-storage elements past `p`.
    fn at(&self, p: u64, elements: usize) -> u64 {
        p + (elements * self.precision.storage.bytes()) as u64
    }

    /// A tracked scratch buffer of `bytes` where `p` is null (a gradient nobody needs but
    /// the kernel writes).
    fn scratch_if_null(&mut self, p: u64, bytes: usize) -> Result<Option<Buf>> {
        if p != 0 {
            return Ok(None);
        }
        Ok(Some(self.tracked(bytes)?))
    }

    /// Frees a tracked buffer.
    fn release(&mut self, b: Option<Buf>) {
        if let Some(b) = b {
            self.tracker.free(b.len());
            self.give(b);
        }
    }

    /// Parameter `k` of layer `i` as the layer reads it: its 16-bit copy where it has one,
    /// else the FP32 master.
    fn param(&self, i: usize, k: usize) -> u64 {
        match self.copies[i].get(k) {
            Some(Some(c)) => ptr(c, &self.stream),
            _ => self.params[i].get(k).map_or(0, |p| ptr(p, &self.stream)),
        }
    }

    fn dparam(&self, i: usize, k: usize) -> u64 {
        self.dparams[i].get(k).map_or(0, |p| ptr(p, &self.stream))
    }

    /// Batch norm's eight channel buffers in the order [`CudnnLayer::run`] takes them.
    fn bn_channels(&self, i: usize) -> [u64; 8] {
        let st = |k: usize| self.state[i].get(k).map_or(0, |p| ptr(p, &self.stream));
        [
            self.param(i, 0),
            self.param(i, 1),
            st(0),
            st(1),
            st(2),
            st(3),
            self.dparam(i, 0),
            self.dparam(i, 1),
        ]
    }

    fn buffers(&self, x: u64, w: u64, y: u64) -> Buffers {
        Buffers {
            x: x as *mut c_void,
            w: w as *mut c_void,
            y: y as *mut c_void,
            bias: std::ptr::null_mut(),
            workspace: self.workspace.device_ptr(&self.stream).0 as *mut c_void,
            workspace_bytes: self.workspace_bytes,
        }
    }

    fn missing(&self, i: usize) -> Error {
        Error::invalid(
            format!("GPU executor: layer `{}`", self.graph.layers()[i].name),
            "its cuDNN descriptors were not built",
        )
    }
}

/// Every kernel the executor launches, compiled for FP32 and for the activation storage.
fn kernels(
    backend: &mut CudaBackend,
    storage: Element,
) -> Result<Vec<(Element, &'static str, CudaFunction)>> {
    let mut kernels = Vec::new();
    let mut storages = vec![Element::F32];
    if storage != Element::F32 {
        storages.push(storage);
    }
    for storage in storages {
        for name in crate::cuda::layers::EXEC_KERNELS
            .iter()
            .chain(&crate::cuda::plan::OP_KERNELS)
            .chain(&crate::cuda::plan::SHAPED_KERNELS)
            .chain(&crate::cuda::plan::SPATIAL_KERNELS)
        {
            kernels.push((storage, *name, backend.kernel(name, storage)?));
        }
    }
    Ok(kernels)
}

/// The FP32 values of bytes read back from the device.
fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
}

/// A gather's or scatter's index: features, rows of the input, rows of the output,
/// whether hashed, and the hash's salt.
type RowIndex = (usize, usize, usize, bool, u64);

/// The arguments of `ex_gather` and `ex_scatter`: `x`, `out`, the [`RowIndex`] and the
/// threads.
fn rows_args(x: u64, out: u64, index: RowIndex, n: usize) -> [Arg; 8] {
    let (f, rx, rout, hashed, salt) = index;
    [
        Arg::Ptr(x),
        Arg::Ptr(out),
        Arg::U64(f as u64),
        Arg::U64(rx as u64),
        Arg::U64(rout as u64),
        Arg::U64(u64::from(hashed)),
        Arg::U64(salt),
        Arg::U64(n as u64),
    ]
}

/// The dropout seed of layer `i` (the same forward and backward).
fn seed(i: usize) -> u64 {
    0x5EED ^ i as u64
}

fn op_buffers(x: u64, dx: u64, y: u64, dy: u64, channel: [u64; 8]) -> OpBuffers {
    OpBuffers {
        x: x as *mut c_void,
        dx: dx as *mut c_void,
        y: y as *mut c_void,
        dy: dy as *mut c_void,
        channel: channel.map(|p| p as *mut c_void),
    }
}

/// `(x, y, dy, out, out2, p, seed, n)` of the element-wise kernels.
#[allow(clippy::too_many_arguments)]
fn op_args(x: u64, y: u64, dy: u64, out: u64, out2: u64, p: f32, seed: u64, n: usize) -> [Arg; 8] {
    [
        Arg::Ptr(x),
        Arg::Ptr(y),
        Arg::Ptr(dy),
        Arg::Ptr(out),
        Arg::Ptr(out2),
        Arg::F32(p),
        Arg::U64(seed),
        Arg::U64(n as u64),
    ]
}

/// `(x, x2, dy, out, out2, out3, a, b, n)` of the shaped kernels.
fn shaped_args(l: &ShapedLaunch, inputs: [u64; 3], outputs: [u64; 3]) -> [Arg; 9] {
    [
        Arg::Ptr(inputs[0]),
        Arg::Ptr(inputs[1]),
        Arg::Ptr(inputs[2]),
        Arg::Ptr(outputs[0]),
        Arg::Ptr(outputs[1]),
        Arg::Ptr(outputs[2]),
        Arg::U64(l.a as u64),
        Arg::U64(l.b as u64),
        Arg::U64(l.n as u64),
    ]
}

/// `(x, dy, out, i0, i1, i2, k0, k1, k2, n)` of tile and upsample.
fn spatial_args(l: &SpatialLaunch, x: u64, dy: u64, out: u64) -> [Arg; 10] {
    let ([i0, i1, i2], [k0, k1, k2]) = (l.input, l.k);
    [
        Arg::Ptr(x),
        Arg::Ptr(dy),
        Arg::Ptr(out),
        Arg::U64(i0),
        Arg::U64(i1),
        Arg::U64(i2),
        Arg::U64(k0),
        Arg::U64(k1),
        Arg::U64(k2),
        Arg::U64(l.out_elements as u64),
    ]
}

/// `(x, out, a, total, offset, b, n)` of the concatenation kernels.
fn concat_args(
    x: u64,
    out: u64,
    a: usize,
    total: usize,
    offset: usize,
    b: usize,
    n: usize,
) -> [Arg; 7] {
    [
        Arg::Ptr(x),
        Arg::Ptr(out),
        Arg::U64(a as u64),
        Arg::U64(total as u64),
        Arg::U64(offset as u64),
        Arg::U64(b as u64),
        Arg::U64(n as u64),
    ]
}

/// `(x, out, i0, i1, i2, p0, p1, p2, o0, o1, o2, n)` of embed and crop.
fn embed_args(e: &Embed, x: u64, out: u64, n: u64) -> [Arg; 12] {
    let ([i0, i1, i2], [p0, p1, p2], [o0, o1, o2]) = (e.input, e.padded, e.offset);
    [
        Arg::Ptr(x),
        Arg::Ptr(out),
        Arg::U64(i0),
        Arg::U64(i1),
        Arg::U64(i2),
        Arg::U64(p0),
        Arg::U64(p1),
        Arg::U64(p2),
        Arg::U64(o0),
        Arg::U64(o1),
        Arg::U64(o2),
        Arg::U64(n),
    ]
}
