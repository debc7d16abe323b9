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
//! Not yet run on a GPU (see the crate docs).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublas;
use cudarc::driver::{
    self, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use ridgeline_model::graph::{Graph, ScoreMask};
use ridgeline_model::precision::Precision;

use super::device::{
    CudaBackend, Timer, call, chosen_notes, compute_type, data_type, fastest_algorithm,
};
use crate::backend::{ConvPass, PassNotes};
use crate::cuda::cudnn::{
    Buffers, CudnnFailure, Handle, Layer as CudnnLayer, OpBuffers, Pass as CudnnPass,
    WORKSPACE_LIMIT,
};
use crate::cuda::layers::{AttentionPlan, Embed, ExecPrecision, LayerPlan, LossScaler};
use crate::cuda::plan::{
    ConvPlan, Element, GemmPlan, STREAM_BLOCK, ShapedLaunch, SpatialLaunch, elements, stream_grid,
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
        let mut kernels = Vec::new();
        let mut storages = vec![Element::F32];
        if exec_precision.storage != Element::F32 {
            storages.push(exec_precision.storage);
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
        let storage = exec.precision.storage;
        for i in 0..exec.plans.len() {
            let lens = exec.plans[i].parameters();
            let fan_in = match &exec.plans[i] {
                LayerPlan::Conv { geometry, .. } => elements(&geometry.w[1..]),
                LayerPlan::Dense { input, .. } => *input,
                LayerPlan::Linear { c, .. } => *c,
                _ => 1,
            };
            let (mut ps, mut cs, mut ds) = (Vec::new(), Vec::new(), Vec::new());
            for (k, &len) in lens.iter().enumerate() {
                let p = backend.zeros::<f32>(len)?;
                let pp = ptr(&p, &exec.stream);
                // Weights uniform in +-1/sqrt(fan-in); biases and shifts zero; batch-norm
                // and affine scales one.
                let scale_param = matches!(
                    exec.plans[i],
                    LayerPlan::BatchNorm { .. } | LayerPlan::Shaped { .. } | LayerPlan::Norm { .. }
                ) && k == 0;
                if scale_param {
                    exec.fill(pp, len, Element::F32, 1.0)?;
                } else if k == 0 {
                    let s = DATA_SCALE / (fan_in as f32).sqrt();
                    exec.uniform(pp, len, Element::F32, 0xC0FFEE ^ i as u64, s)?;
                }
                let grad = exec.param_element(i, k);
                exec.tracker.alloc(4 * len + grad.bytes() * len);
                ds.push(backend.zeros::<u8>(grad.bytes() * len)?);
                cs.push(if grad == Element::F32 {
                    None
                } else {
                    exec.tracker.alloc(grad.bytes() * len);
                    Some(backend.zeros::<u8>(grad.bytes() * len)?)
                });
                ps.push(p);
            }
            exec.params.push(ps);
            exec.copies.push(cs);
            exec.dparams.push(ds);
            let mut state = Vec::new();
            match &exec.plans[i] {
                LayerPlan::BatchNorm { dims } => {
                    for _ in 0..4 {
                        state.push(backend.zeros::<u8>(4 * dims[1] as usize)?);
                    }
                    exec.tracker.alloc(16 * dims[1] as usize);
                }
                LayerPlan::Norm { vol, .. } => {
                    // The mean and inverse deviation per position (FP32).
                    let bytes = 8 * exec.batch * vol;
                    state.push(backend.zeros::<u8>(bytes)?);
                    exec.tracker.alloc(bytes);
                }
                LayerPlan::Shaped { forward, .. } if forward.kernel == "op_mse_fwd" => {
                    let n = exec.len(exec.graph.layers()[i].inputs[0]);
                    let t = backend.zeros::<u8>(n * storage.bytes())?;
                    exec.uniform(
                        ptr(&t, &exec.stream),
                        n,
                        storage,
                        0x7A5 ^ i as u64,
                        DATA_SCALE,
                    )?;
                    exec.tracker.alloc(t.len());
                    state.push(t);
                }
                _ => {}
            }
            exec.state.push(state);
        }
        // The 16-bit copies from the masters: the update at learning rate 0.
        for i in 0..exec.plans.len() {
            for k in 0..exec.params[i].len() {
                if exec.copies[i][k].is_some() {
                    exec.update(i, k, 0.0, 1.0)?;
                }
            }
        }
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
        if self.scaler.is_some() {
            // Any infinity or NaN in the scaled gradients skips the update.
            self.zero(ptr(&self.overflow, &self.stream), 1)?;
            let overflow = ptr(&self.overflow, &self.stream);
            for i in 0..n {
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
        for i in 0..n {
            for k in 0..self.params[i].len() {
                self.update(i, k, LEARNING_RATE, 1.0 / scale)?;
            }
        }
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

    /// Layer `i`'s forward pass into `out`; returns what it keeps for backward beyond the
    /// schedule's tensors (softmax cross-entropy's copy of its input).
    fn forward(
        &mut self,
        i: usize,
        acts: &[Option<Buf>],
        out: &Buf,
        handle: &Handle,
        blas: &cublas::CudaBlas,
    ) -> Result<Option<Buf>> {
        let s = self.stream.clone();
        let inputs: Vec<u64> = self.graph.layers()[i]
            .inputs
            .iter()
            .map(|&j| acts[j].as_ref().map_or(0, |a| ptr(a, &s)))
            .collect();
        let x = inputs.first().copied().unwrap_or(0);
        let y = ptr(out, &s);
        let n_out = self.len(i);
        let plan = self.plans[i].clone();
        let ordinal = self.ordinal;
        let failed = move |f: CudnnFailure| device_error(ordinal, f);
        match &plan {
            LayerPlan::Input => {}
            LayerPlan::Conv {
                transposed: false,
                embed,
                geometry,
                bias,
            } => {
                let padded = self.embed_opt(embed.as_ref(), x)?;
                let xp = padded.as_ref().map_or(x, |p| ptr(p, &s));
                let Device::Conv(c) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                self.tracker.alloc(c.workspace[0]);
                let b = self.buffers(xp, self.param(i, 0), y);
                c.forward.run(handle, b).map_err(failed)?;
                self.tracker.free(c.workspace[0]);
                self.release(padded);
                if *bias {
                    self.bias_add(i, y, geometry.y[1] as usize, n_out)?;
                }
            }
            LayerPlan::Conv {
                transposed: true,
                embed,
                geometry,
                bias,
            } => {
                // The adjoint's backward-data: its dx is this layer's output (padded where
                // the adjoint pads unevenly), its dy this layer's input.
                let padded = embed
                    .map(|e| self.tracked(self.act(e.padded_elements() as usize)))
                    .transpose()?;
                let target = padded.as_ref().map_or(y, |p| ptr(p, &s));
                let Device::Conv(c) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                let ws = c.workspace[1];
                self.tracker.alloc(ws);
                let Some(pass) = c.backward_data.as_ref() else {
                    return Err(self.missing(i));
                };
                let b = self.buffers(target, self.param(i, 0), x);
                pass.run(handle, b).map_err(failed)?;
                self.tracker.free(ws);
                if let (Some(e), Some(p)) = (embed, &padded) {
                    self.run(
                        "ex_crop",
                        n_out,
                        &embed_args(e, ptr(p, &s), y, e.input_elements()),
                    )?;
                }
                self.release(padded);
                if *bias {
                    self.bias_add(i, y, geometry.x[1] as usize, n_out)?;
                }
            }
            LayerPlan::Dense {
                n,
                input,
                output,
                bias,
            } => {
                // Row-major y [n x out] = x [n x in] W^T, W [out x in]: column-major
                // y^T (out x n) = W^T' (out x in) x^T (in x n).
                self.gemm(
                    blas,
                    (true, false),
                    (*output, *n, *input),
                    (self.param(i, 0), *input),
                    (x, *input),
                    (y, *output),
                )?;
                if *bias {
                    self.bias_add(i, y, *output, n_out)?;
                }
            }
            LayerPlan::Pool { embed, .. } => {
                let padded = self.embed_opt(embed.as_ref(), x)?;
                let xp = padded.as_ref().map_or(x, |p| ptr(p, &s));
                let Device::Cudnn(l) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                l.run(handle, true, op_buffers(xp, 0, y, 0, [0; 8]))
                    .map_err(failed)?;
                self.release(padded);
            }
            LayerPlan::BatchNorm { .. } => {
                let Device::Cudnn(l) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                l.run(handle, true, op_buffers(x, 0, y, 0, self.bn_channels(i)))
                    .map_err(failed)?;
            }
            LayerPlan::Elementwise { forward, param, .. } => {
                let x2 = inputs.get(1).copied().unwrap_or(0);
                self.run(
                    forward,
                    n_out,
                    &op_args(x, x2, 0, y, 0, *param, seed(i), n_out),
                )?;
                for &extra in inputs.iter().skip(2) {
                    self.run(
                        "ex_accumulate",
                        n_out,
                        &[Arg::Ptr(y), Arg::Ptr(extra), Arg::U64(n_out as u64)],
                    )?;
                }
            }
            LayerPlan::Shaped { forward, .. } => {
                let (x2, third, loss) = if forward.kernel == "op_mse_fwd" {
                    (ptr(&self.state[i][0], &s), 0, true)
                } else {
                    (self.param(i, 0), self.param(i, 1), false)
                };
                if loss {
                    self.zero(y, n_out)?;
                }
                self.run(
                    forward.kernel,
                    forward.n,
                    &shaped_args(forward, [x, x2, third], [y, 0, 0]),
                )?;
            }
            LayerPlan::Concat { channels, vol } => {
                let total: usize = channels.iter().sum();
                let mut offset = 0;
                for (&xk, &ck) in inputs.iter().zip(channels) {
                    let n = self.batch * ck * vol;
                    self.run(
                        "ex_concat_fwd",
                        n,
                        &concat_args(xk, y, ck, total, offset, *vol, n),
                    )?;
                    offset += ck;
                }
            }
            LayerPlan::Flatten => {
                self.run(
                    "op_scale_fwd",
                    n_out,
                    &op_args(x, 0, 0, y, 0, 1.0, 0, n_out),
                )?;
            }
            LayerPlan::Spatial { forward, .. } => {
                self.run(
                    forward.kernel,
                    forward.threads(),
                    &spatial_args(forward, x, 0, y),
                )?;
            }
            LayerPlan::Linear {
                n,
                c,
                out,
                vol,
                bias,
            } => {
                // y [out x vol] = W [out x c] x [c x vol], per sample.
                self.gemm_rows(
                    blas,
                    (false, false),
                    (*out, *vol, *c),
                    Mat::new(self.param(i, 0), *c, 0),
                    Mat::new(x, *vol, c * vol),
                    Mat::new(y, *vol, out * vol),
                    *n,
                    false,
                )?;
                if *bias {
                    self.bias_add(i, y, *out, n_out)?;
                }
            }
            LayerPlan::MatMul { calls, m, k, p } => {
                let x2 = inputs.get(1).copied().unwrap_or(0);
                self.gemm_rows(
                    blas,
                    (false, false),
                    (*m, *p, *k),
                    Mat::new(x, *k, m * k),
                    Mat::new(x2, *p, k * p),
                    Mat::new(y, *p, m * p),
                    *calls,
                    false,
                )?;
            }
            LayerPlan::Embedding {
                vocab,
                dim,
                positions,
            } => {
                self.run(
                    "ex_lookup_fwd",
                    n_out,
                    &[
                        Arg::Ptr(x),
                        Arg::Ptr(self.param(i, 0)),
                        Arg::Ptr(y),
                        Arg::U64(*vocab as u64),
                        Arg::U64(*dim as u64),
                        Arg::U64(*positions as u64),
                        Arg::U64(n_out as u64),
                    ],
                )?;
            }
            LayerPlan::Norm { c, vol, rms } => {
                let rows = self.batch * vol;
                let beta = if *rms { 0 } else { self.param(i, 1) };
                self.run(
                    "ex_norm_fwd",
                    rows,
                    &[
                        Arg::Ptr(x),
                        Arg::Ptr(y),
                        Arg::Ptr(self.param(i, 0)),
                        Arg::Ptr(beta),
                        Arg::Ptr(ptr(&self.state[i][0], &s)),
                        Arg::U64(*c as u64),
                        Arg::U64(*vol as u64),
                        Arg::U64(u64::from(*rms)),
                        Arg::U64(rows as u64),
                    ],
                )?;
            }
            LayerPlan::Softmax { c, vol } => {
                let rows = self.batch * vol;
                self.run(
                    "ex_softmax_fwd",
                    rows,
                    &[
                        Arg::Ptr(x),
                        Arg::Ptr(y),
                        Arg::U64(*c as u64),
                        Arg::U64(*vol as u64),
                        Arg::U64(rows as u64),
                    ],
                )?;
            }
            LayerPlan::Rows {
                f,
                rows_in,
                rows_out,
                hashed,
                salt,
                gather,
            } => {
                let index = (*f, *rows_in, *rows_out, *hashed, *salt);
                if *gather {
                    self.run("ex_gather", n_out, &rows_args(x, y, index, n_out))?;
                } else {
                    self.fill(y, n_out, self.precision.storage, 0.0)?;
                    let n_in = self.batch * f * rows_in;
                    self.run("ex_scatter", n_in, &rows_args(x, y, index, n_in))?;
                }
            }
            LayerPlan::Attention(a) => return self.attention_forward(i, a, &inputs, y, blas),
            LayerPlan::SoftmaxCe { c, vol } => {
                self.zero(y, n_out)?;
                let rows = self.batch * vol;
                self.run(
                    "ex_softmax_ce_fwd",
                    crate::cuda::layers::softmax_ce_threads(*c, rows),
                    &[
                        Arg::Ptr(x),
                        Arg::Ptr(y),
                        Arg::U64(*c as u64),
                        Arg::U64(*vol as u64),
                        Arg::U64(seed(i)),
                        Arg::U64(rows as u64),
                    ],
                )?;
                // Backward reads the logits; keep a copy (the CPU keeps the probabilities).
                let n_in = self.batch * c * vol;
                let keep = self.tracked(self.act(n_in))?;
                self.run(
                    "op_scale_fwd",
                    n_in,
                    &op_args(x, 0, 0, ptr(&keep, &s), 0, 1.0, 0, n_in),
                )?;
                return Ok(Some(keep));
            }
        }
        Ok(None)
    }

    /// Layer `i`'s backward pass: input gradients into `dx` (one per input, `None` where
    /// none is needed), parameter gradients into its `dparams`.
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &mut self,
        i: usize,
        acts: &[Option<Buf>],
        aux: Option<&Buf>,
        dy: &Buf,
        dx: &[Option<Buf>],
        handle: &Handle,
        blas: &cublas::CudaBlas,
    ) -> Result<()> {
        let s = self.stream.clone();
        let graph = self.graph;
        let layer = &graph.layers()[i];
        let x = layer
            .inputs
            .first()
            .and_then(|&j| acts[j].as_ref())
            .map_or(0, |a| ptr(a, &s));
        let own = acts[i].as_ref().map_or(0, |a| ptr(a, &s));
        let dyp = ptr(dy, &s);
        let n_out = self.len(i);
        let dxs: Vec<u64> = dx
            .iter()
            .map(|d| d.as_ref().map_or(0, |d| ptr(d, &s)))
            .collect();
        let dx0 = dxs.first().copied().unwrap_or(0);
        let n_in = layer.inputs.first().map_or(0, |&j| self.len(j));
        let plan = self.plans[i].clone();
        let ordinal = self.ordinal;
        let failed = move |f: CudnnFailure| device_error(ordinal, f);
        match &plan {
            LayerPlan::Input => {}
            LayerPlan::Conv {
                transposed: false,
                embed,
                geometry,
                bias,
            } => {
                let padded = self.embed_opt(embed.as_ref(), x)?;
                let xp = padded.as_ref().map_or(x, |p| ptr(p, &s));
                let Device::Conv(c) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                let ws = c.workspace[1].max(c.workspace[2]);
                self.tracker.alloc(ws);
                if let Some(pass) = &c.backward_data
                    && dx0 != 0
                {
                    // dx into the padded tensor, then cropped.
                    let target = padded.as_ref().map_or(dx0, |p| ptr(p, &s));
                    pass.run(handle, self.buffers(target, self.param(i, 0), dyp))
                        .map_err(failed)?;
                    if let Some(e) = embed {
                        // The padded input's copy was overwritten by dx; crop it.
                        self.run(
                            "ex_crop",
                            n_in,
                            &embed_args(e, target, dx0, e.input_elements()),
                        )?;
                        // The filter gradient needs the input again.
                        self.run(
                            "ex_embed",
                            e.padded_elements() as usize,
                            &embed_args(e, x, target, e.padded_elements()),
                        )?;
                    }
                }
                c.backward_filter
                    .run(handle, self.buffers(xp, self.dparam(i, 0), dyp))
                    .map_err(failed)?;
                self.tracker.free(ws);
                self.release(padded);
                if *bias {
                    self.bias_grad(i, dyp, geometry.y[1] as usize, n_out)?;
                }
            }
            LayerPlan::Conv {
                transposed: true,
                embed,
                geometry,
                bias,
            } => {
                // The adjoint's forward gives dx from dy (padded where the adjoint pads
                // unevenly); its backward-filter takes dy as x and this layer's input as dy.
                let padded = self.embed_opt(embed.as_ref(), dyp)?;
                let dp = padded.as_ref().map_or(dyp, |p| ptr(p, &s));
                let Device::Conv(c) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                let ws = c.workspace[0].max(c.workspace[2]);
                self.tracker.alloc(ws);
                if dx0 != 0 {
                    c.forward
                        .run(handle, self.buffers(dp, self.param(i, 0), dx0))
                        .map_err(failed)?;
                }
                c.backward_filter
                    .run(handle, self.buffers(dp, self.dparam(i, 0), x))
                    .map_err(failed)?;
                self.tracker.free(ws);
                self.release(padded);
                if *bias {
                    self.bias_grad(i, dyp, geometry.x[1] as usize, n_out)?;
                }
            }
            LayerPlan::Dense {
                n,
                input,
                output,
                bias,
            } => {
                if dx0 != 0 {
                    // dx^T (in x n) = W^T (in x out, column-major W) dy^T (out x n).
                    self.gemm(
                        blas,
                        (false, false),
                        (*input, *n, *output),
                        (self.param(i, 0), *input),
                        (dyp, *output),
                        (dx0, *input),
                    )?;
                }
                // dW^T (in x out) = x^T (in x n) dy (n x out).
                self.gemm(
                    blas,
                    (false, true),
                    (*input, *output, *n),
                    (x, *input),
                    (dyp, *output),
                    (self.dparam(i, 0), *input),
                )?;
                if *bias {
                    self.bias_grad(i, dyp, *output, n_out)?;
                }
            }
            LayerPlan::Pool { embed, geometry } => {
                let nx = self.act(elements(&geometry.x));
                // cuDNN's input: the (padded) input where the schedule keeps it (max
                // pooling), else a stand-in of its size (average pooling reads none of it).
                let padded = match (embed, x != 0) {
                    (Some(e), true) => Some(self.embed(e, x)?),
                    _ => None,
                };
                let stand_in = if x == 0 {
                    Some(self.tracked(nx)?)
                } else {
                    None
                };
                let xp = padded
                    .as_ref()
                    .or(stand_in.as_ref())
                    .map_or(x, |p| ptr(p, &s));
                // dx straight into the input's gradient, or into a padded buffer cropped
                // after.
                let grad = if embed.is_none() && dx0 != 0 {
                    None
                } else {
                    Some(self.tracked(nx)?)
                };
                let target = grad.as_ref().map_or(dx0, |b| ptr(b, &s));
                // cuDNN reads the pooled output: recomputed for max pooling (the schedule
                // keeps the input only, as the frameworks keep max-pool indices).
                let y = self.tracked(self.act(n_out))?;
                let yp = ptr(&y, &s);
                let Device::Cudnn(l) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                if geometry.max {
                    l.run(handle, true, op_buffers(xp, 0, yp, 0, [0; 8]))
                        .map_err(failed)?;
                }
                l.run(handle, false, op_buffers(xp, target, yp, dyp, [0; 8]))
                    .map_err(failed)?;
                if let (Some(e), true) = (embed, dx0 != 0) {
                    self.run(
                        "ex_crop",
                        n_in,
                        &embed_args(e, target, dx0, e.input_elements()),
                    )?;
                }
                for b in [Some(y), padded, stand_in, grad] {
                    self.release(b);
                }
            }
            LayerPlan::BatchNorm { .. } => {
                let scratch = self.scratch_if_null(dx0, self.act(n_in))?;
                let target = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
                let Device::Cudnn(l) = &self.device[i] else {
                    return Err(self.missing(i));
                };
                l.run(
                    handle,
                    false,
                    op_buffers(x, target, 0, dyp, self.bn_channels(i)),
                )
                .map_err(failed)?;
                self.release(scratch);
            }
            LayerPlan::Elementwise {
                backward,
                param,
                forward,
            } => {
                // relu and tanh read their output; the others their input.
                let reads_output = matches!(*forward, "op_relu_fwd" | "op_tanh_fwd");
                let (xa, ya) = if reads_output { (own, own) } else { (x, 0) };
                if matches!(*forward, "op_add_fwd" | "op_mul_fwd") {
                    let scratch = self.scratch_if_null(dx0, self.act(n_out))?;
                    let first = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
                    let second = dxs.get(1).copied().unwrap_or(0);
                    let scratch2 = self.scratch_if_null(second, self.act(n_out))?;
                    let second = scratch2.as_ref().map_or(second, |b| ptr(b, &s));
                    // A product's gradients read both inputs (kept by the schedule).
                    let x2 = layer
                        .inputs
                        .get(1)
                        .and_then(|&j| acts[j].as_ref())
                        .map_or(0, |a| ptr(a, &s));
                    self.run(
                        backward,
                        n_out,
                        &op_args(x, x2, dyp, first, second, 0.0, 0, n_out),
                    )?;
                    for &extra in dxs.iter().skip(2).filter(|&&p| p != 0) {
                        self.run(
                            "op_scale_bwd",
                            n_out,
                            &op_args(0, 0, dyp, extra, 0, 1.0, 0, n_out),
                        )?;
                    }
                    self.release(scratch);
                    self.release(scratch2);
                } else if dx0 != 0 {
                    self.run(
                        backward,
                        n_out,
                        &op_args(xa, ya, dyp, dx0, 0, *param, seed(i), n_out),
                    )?;
                }
            }
            LayerPlan::Shaped { backward, .. } => {
                let scratch = self.scratch_if_null(dx0, self.act(n_in))?;
                let target = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
                if backward.kernel == "op_mse_bwd" {
                    let t = ptr(&self.state[i][0], &s);
                    self.run(
                        backward.kernel,
                        backward.n,
                        &shaped_args(backward, [x, t, dyp], [target, 0, 0]),
                    )?;
                } else {
                    let (ds, db) = (self.dparam(i, 0), self.dparam(i, 1));
                    self.zero(ds, backward.a)?;
                    self.zero(db, backward.a)?;
                    self.run(
                        backward.kernel,
                        backward.n,
                        &shaped_args(backward, [x, self.param(i, 0), dyp], [target, ds, db]),
                    )?;
                }
                self.release(scratch);
            }
            LayerPlan::Concat { channels, vol } => {
                let total: usize = channels.iter().sum();
                let mut offset = 0;
                for (&dk, &ck) in dxs.iter().zip(channels) {
                    let n = self.batch * ck * vol;
                    if dk != 0 {
                        self.run(
                            "ex_concat_bwd",
                            n,
                            &concat_args(dyp, dk, ck, total, offset, *vol, n),
                        )?;
                    }
                    offset += ck;
                }
            }
            LayerPlan::Flatten => {
                if dx0 != 0 {
                    self.run(
                        "op_scale_bwd",
                        n_out,
                        &op_args(0, 0, dyp, dx0, 0, 1.0, 0, n_out),
                    )?;
                }
            }
            LayerPlan::Spatial { backward, .. } => {
                if dx0 != 0 {
                    self.fill(dx0, n_in, self.precision.storage, 0.0)?;
                    self.run(
                        backward.kernel,
                        backward.threads(),
                        &spatial_args(backward, 0, dyp, dx0),
                    )?;
                }
            }
            LayerPlan::Linear {
                n,
                c,
                out,
                vol,
                bias,
            } => {
                let w = self.param(i, 0);
                if dx0 != 0 {
                    // dx [c x vol] = W^T dy, per sample.
                    self.gemm_rows(
                        blas,
                        (true, false),
                        (*c, *vol, *out),
                        Mat::new(w, *c, 0),
                        Mat::new(dyp, *vol, out * vol),
                        Mat::new(dx0, *vol, c * vol),
                        *n,
                        false,
                    )?;
                }
                // dW [out x c] = sum over samples of dy x^T.
                let dw = self.dparam(i, 0);
                for b in 0..*n {
                    self.gemm_rows(
                        blas,
                        (false, true),
                        (*out, *c, *vol),
                        Mat::new(self.at(dyp, b * out * vol), *vol, 0),
                        Mat::new(self.at(x, b * c * vol), *vol, 0),
                        Mat::new(dw, *c, 0),
                        1,
                        b > 0,
                    )?;
                }
                if *bias {
                    self.bias_grad(i, dyp, *out, n_out)?;
                }
            }
            LayerPlan::MatMul { calls, m, k, p } => {
                let x2 = layer
                    .inputs
                    .get(1)
                    .and_then(|&j| acts[j].as_ref())
                    .map_or(0, |a| ptr(a, &s));
                if dx0 != 0 {
                    // dA [m x k] = dC B^T.
                    self.gemm_rows(
                        blas,
                        (false, true),
                        (*m, *k, *p),
                        Mat::new(dyp, *p, m * p),
                        Mat::new(x2, *p, k * p),
                        Mat::new(dx0, *k, m * k),
                        *calls,
                        false,
                    )?;
                }
                if let Some(&db) = dxs.get(1).filter(|&&d| d != 0) {
                    // dB [k x p] = A^T dC.
                    self.gemm_rows(
                        blas,
                        (true, false),
                        (*k, *p, *m),
                        Mat::new(x, *k, m * k),
                        Mat::new(dyp, *p, m * p),
                        Mat::new(db, *p, k * p),
                        *calls,
                        false,
                    )?;
                }
            }
            LayerPlan::Embedding {
                vocab,
                dim,
                positions,
            } => {
                let table = self.dparam(i, 0);
                self.zero(table, vocab * dim)?;
                self.run(
                    "ex_lookup_bwd",
                    n_out,
                    &[
                        Arg::Ptr(x),
                        Arg::Ptr(dyp),
                        Arg::Ptr(table),
                        Arg::U64(*vocab as u64),
                        Arg::U64(*dim as u64),
                        Arg::U64(*positions as u64),
                        Arg::U64(n_out as u64),
                    ],
                )?;
                // Ids have no gradient.
                if dx0 != 0 {
                    self.fill(dx0, n_in, self.precision.storage, 0.0)?;
                }
            }
            LayerPlan::Norm { c, vol, rms } => {
                let rows = self.batch * vol;
                let stats = ptr(&self.state[i][0], &s);
                if dx0 != 0 {
                    self.run(
                        "ex_norm_bwd",
                        rows,
                        &[
                            Arg::Ptr(x),
                            Arg::Ptr(dyp),
                            Arg::Ptr(dx0),
                            Arg::Ptr(self.param(i, 0)),
                            Arg::Ptr(stats),
                            Arg::U64(*c as u64),
                            Arg::U64(*vol as u64),
                            Arg::U64(u64::from(*rms)),
                            Arg::U64(rows as u64),
                        ],
                    )?;
                }
                let dbeta = if *rms { 0 } else { self.dparam(i, 1) };
                // A block per channel.
                self.run(
                    "ex_norm_param_grad",
                    c * STREAM_BLOCK as usize,
                    &[
                        Arg::Ptr(x),
                        Arg::Ptr(dyp),
                        Arg::Ptr(stats),
                        Arg::Ptr(self.dparam(i, 0)),
                        Arg::Ptr(dbeta),
                        Arg::U64(*c as u64),
                        Arg::U64(*vol as u64),
                        Arg::U64(self.batch as u64),
                    ],
                )?;
            }
            LayerPlan::Softmax { c, vol } => {
                if dx0 != 0 {
                    let rows = self.batch * vol;
                    self.run(
                        "ex_softmax_bwd",
                        rows,
                        &[
                            Arg::Ptr(own),
                            Arg::Ptr(dyp),
                            Arg::Ptr(dx0),
                            Arg::U64(*c as u64),
                            Arg::U64(*vol as u64),
                            Arg::U64(rows as u64),
                        ],
                    )?;
                }
            }
            LayerPlan::Rows {
                f,
                rows_in,
                rows_out,
                hashed,
                salt,
                gather,
            } => {
                // The adjoint: gather's gradient scatters, the sums' gradients gather.
                let index = (*f, *rows_out, *rows_in, *hashed, *salt);
                if dx0 != 0 {
                    if *gather {
                        self.fill(dx0, n_in, self.precision.storage, 0.0)?;
                        self.run("ex_scatter", n_out, &rows_args(dyp, dx0, index, n_out))?;
                    } else {
                        self.run("ex_gather", n_in, &rows_args(dyp, dx0, index, n_in))?;
                    }
                }
            }
            LayerPlan::Attention(a) => {
                let inputs: Vec<u64> = layer
                    .inputs
                    .iter()
                    .map(|&j| acts[j].as_ref().map_or(0, |b| ptr(b, &s)))
                    .collect();
                self.attention_backward(i, a, &inputs, aux, dyp, &dxs, blas)?;
            }
            LayerPlan::SoftmaxCe { c, vol } => {
                let logits = aux.map_or(x, |a| ptr(a, &s));
                let scratch = self.scratch_if_null(dx0, self.act(n_in))?;
                let target = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
                let rows = self.batch * vol;
                self.run(
                    "ex_softmax_ce_bwd",
                    crate::cuda::layers::softmax_ce_threads(*c, rows),
                    &[
                        Arg::Ptr(logits),
                        Arg::Ptr(dyp),
                        Arg::Ptr(target),
                        Arg::U64(*c as u64),
                        Arg::U64(*vol as u64),
                        Arg::U64(seed(i)),
                        Arg::U64(rows as u64),
                    ],
                )?;
                self.release(scratch);
            }
        }
        Ok(())
    }

    /// The address `elements` activation-storage elements past `p`.
    fn at(&self, p: u64, elements: usize) -> u64 {
        p + (elements * self.precision.storage.bytes()) as u64
    }

    /// Row-major `C = op(A) op(B)` (`m x n`, inner dimension `k`; `op` transposes where
    /// asked) for `batch` products at the operands' strides, through cuBLAS's column-major
    /// strided batched GEMM on the transposes (`C^T = op(B)^T op(A)^T`), in the precision's
    /// matrix format with FP32 accumulation; `accumulate` adds into `C`.
    #[allow(clippy::too_many_arguments)]
    fn gemm_rows(
        &self,
        blas: &cublas::CudaBlas,
        (transpose_a, transpose_b): (bool, bool),
        (m, n, k): (usize, usize, usize),
        a: Mat,
        b: Mat,
        c: Mat,
        batch: usize,
        accumulate: bool,
    ) -> Result<()> {
        let plan = GemmPlan::of(self.precision.matrix);
        let int = |v: usize| {
            i32::try_from(v)
                .map_err(|_| Error::invalid("GEMM", format!("{v} is beyond cuBLAS's 32-bit sizes")))
        };
        let long = |v: usize| {
            i64::try_from(v)
                .map_err(|_| Error::invalid("GEMM", format!("stride {v} is beyond 64 bits")))
        };
        let op = |t: bool| {
            if t {
                cublas::sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                cublas::sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let one = 1.0f32;
        let beta = if accumulate { 1.0f32 } else { 0.0 };
        let (alpha, beta): (*const c_void, *const c_void) =
            ((&raw const one).cast(), (&raw const beta).cast());
        // SAFETY: `a`, `b` and `c` are live device allocations of the layer's operands
        // (activations, weights and their gradients in the plan's element types: activation
        // storage, the 16-bit weight copies and gradients under mixed precision), each
        // holding `batch` row-major matrices of the shapes the call site passes at its
        // stride (0 for weights every product shares); alpha and beta point to host floats
        // (FP32 compute) alive for the call.
        let r = unsafe {
            cublas::result::gemm_strided_batched_ex(
                *blas.handle(),
                op(transpose_b),
                op(transpose_a),
                int(n)?,
                int(m)?,
                int(k)?,
                alpha,
                b.ptr as *const c_void,
                data_type(plan.inputs),
                int(b.ld)?,
                long(b.stride)?,
                a.ptr as *const c_void,
                data_type(plan.inputs),
                int(a.ld)?,
                long(a.stride)?,
                beta,
                c.ptr as *mut c_void,
                data_type(plan.output),
                int(c.ld)?,
                long(c.stride)?,
                int(batch)?,
                compute_type(plan.compute),
                cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        call(self.ordinal, "cublasGemmStridedBatchedEx", r)
    }

    /// Attention's weights for every sample and head into `p` (after the scale, mask,
    /// clamp and softmax of the layer's form) and, with dropout, into `dropped`: each
    /// sample's `QK^T` as one GEMM batched over heads, then the element-wise kernels over
    /// all the weights. `q(b)` and `k(b)` are sample `b`'s queries and keys (`[H, S]`,
    /// `[H, S_kv]` row blocks).
    #[allow(clippy::too_many_arguments, clippy::cast_precision_loss)]
    fn attention_weights(
        &self,
        a: &AttentionPlan,
        q: &dyn Fn(usize) -> u64,
        k: &dyn Fn(usize) -> u64,
        p: u64,
        dropped: u64,
        seed: u64,
        blas: &cublas::CudaBlas,
    ) -> Result<()> {
        let (h, d, sq, t) = (a.heads, a.d, a.seq, a.seq_kv);
        let per = a.weights();
        for b in 0..a.n {
            // P [S x S_kv] = Q^T K, per head.
            self.gemm_rows(
                blas,
                (true, false),
                (sq, t, d),
                Mat::new(q(b), sq, d * sq),
                Mat::new(k(b), t, d * t),
                Mat::new(self.at(p, b * per), t, sq * t),
                h,
                false,
            )?;
        }
        let w = a.n * per;
        let f = a.form;
        if !f.scale_queries {
            let scale = 1.0 / (d as f32).sqrt();
            self.run("op_scale_fwd", w, &op_args(p, 0, 0, p, 0, scale, 0, w))?;
        }
        if f.causal || f.mask != ScoreMask::None {
            self.run(
                "ex_attn_mask",
                w,
                &[
                    Arg::Ptr(p),
                    Arg::U64(sq as u64),
                    Arg::U64(t as u64),
                    Arg::U64(u64::from(f.causal)),
                    Arg::U64(w as u64),
                ],
            )?;
        }
        if f.clamp {
            self.run(
                "ex_clamp_min",
                w,
                &[Arg::Ptr(p), Arg::F32(f32::MIN), Arg::U64(w as u64)],
            )?;
        }
        let rows = w / t.max(1);
        self.run(
            "ex_softmax_rows_fwd",
            32 * rows,
            &[
                Arg::Ptr(p),
                Arg::Ptr(p),
                Arg::U64(t as u64),
                Arg::U64(rows as u64),
            ],
        )?;
        if f.dropout > 0.0 {
            #[allow(clippy::cast_possible_truncation)]
            let rate = f.dropout as f32;
            self.run(
                "op_dropout_fwd",
                w,
                &op_args(p, 0, 0, dropped, 0, rate, seed, w),
            )?;
        }
        Ok(())
    }

    /// Sample `b`'s queries, keys or values (`which` 0, 1, 2) in the attention's inputs.
    fn attention_input(&self, a: &AttentionPlan, inputs: &[u64], b: usize, which: usize) -> u64 {
        let base = if a.stacked {
            inputs.first()
        } else {
            inputs.get(which)
        };
        base.map_or(0, |&p| self.at(p, a.offsets(b)[which]))
    }

    /// Attention's forward pass into `y`; returns what backward reads besides the inputs:
    /// unfused, the weights after softmax (and after dropout); with the scale on the
    /// queries, the scaled queries.
    #[allow(clippy::cast_precision_loss)]
    fn attention_forward(
        &mut self,
        i: usize,
        a: &AttentionPlan,
        inputs: &[u64],
        y: u64,
        blas: &cublas::CudaBlas,
    ) -> Result<Option<Buf>> {
        let s = self.stream.clone();
        let (h, d, sq, t) = (a.heads, a.d, a.seq, a.seq_kv);
        let (hidden, per) = (a.hidden(), a.weights());
        let w = a.n * per;
        let dropout = a.form.dropout > 0.0;
        let weights_len = a.weight_arrays() * w;
        let queries = if a.form.scale_queries {
            a.n * hidden * sq
        } else {
            0
        };
        let kept_len = if a.form.fused { 0 } else { weights_len } + queries;
        let kept = if kept_len > 0 {
            Some(self.tracked(self.act(kept_len))?)
        } else {
            None
        };
        let scratch = if a.form.fused {
            Some(self.tracked(self.act(weights_len))?)
        } else {
            None
        };
        let kb = kept.as_ref().map_or(0, |b| ptr(b, &s));
        let p = scratch.as_ref().map_or(kb, |b| ptr(b, &s));
        let dropped = if dropout { self.at(p, w) } else { p };
        let qs = self.at(kb, kept_len - queries);
        if a.form.scale_queries {
            let scale = 1.0 / (d as f32).sqrt();
            let len = hidden * sq;
            for b in 0..a.n {
                let q = self.attention_input(a, inputs, b, 0);
                let out = self.at(qs, b * len);
                self.run(
                    "op_scale_fwd",
                    len,
                    &op_args(q, 0, 0, out, 0, scale, 0, len),
                )?;
            }
        }
        let q = |b: usize| {
            if a.form.scale_queries {
                self.at(qs, b * hidden * sq)
            } else {
                self.attention_input(a, inputs, b, 0)
            }
        };
        let k = |b: usize| self.attention_input(a, inputs, b, 1);
        self.attention_weights(a, &q, &k, p, dropped, seed(i), blas)?;
        for b in 0..a.n {
            // O [d x S] = V [d x S_kv] P'^T, per head.
            self.gemm_rows(
                blas,
                (false, true),
                (d, sq, t),
                Mat::new(self.attention_input(a, inputs, b, 2), t, d * t),
                Mat::new(self.at(dropped, b * per), t, sq * t),
                Mat::new(self.at(y, b * hidden * sq), sq, d * sq),
                h,
                false,
            )?;
        }
        self.release(scratch);
        Ok(kept)
    }

    /// Attention's backward pass from `dy` into the input gradients `dxs` (one stacked,
    /// or queries, keys and values; null where none is needed): `dV = dO P'`, `dP' = dO^T
    /// V`, dropout's, softmax's and the scale's backward, `dQ = K dS^T`, `dK = Q dS`; fused
    /// attention first recomputes its weights.
    #[allow(clippy::too_many_arguments, clippy::cast_precision_loss)]
    fn attention_backward(
        &mut self,
        i: usize,
        a: &AttentionPlan,
        inputs: &[u64],
        aux: Option<&Buf>,
        dy: u64,
        dxs: &[u64],
        blas: &cublas::CudaBlas,
    ) -> Result<()> {
        let s = self.stream.clone();
        let (h, d, sq, t) = (a.heads, a.d, a.seq, a.seq_kv);
        let (hidden, per) = (a.hidden(), a.weights());
        let w = a.n * per;
        let dropout = a.form.dropout > 0.0;
        let weights_len = a.weight_arrays() * w;
        let scale = 1.0 / (d as f32).sqrt();
        let kb = aux.map_or(0, |b| ptr(b, &s));
        let scratch = if a.form.fused {
            Some(self.tracked(self.act(weights_len))?)
        } else {
            None
        };
        let ds_buf = self.tracked(self.act(w))?;
        let ds = ptr(&ds_buf, &s);
        let p = scratch.as_ref().map_or(kb, |b| ptr(b, &s));
        let dropped = if dropout { self.at(p, w) } else { p };
        let qs = self.at(kb, if a.form.fused { 0 } else { weights_len });
        let q = |b: usize| {
            if a.form.scale_queries {
                self.at(qs, b * hidden * sq)
            } else {
                self.attention_input(a, inputs, b, 0)
            }
        };
        let k = |b: usize| self.attention_input(a, inputs, b, 1);
        let v = |b: usize| self.attention_input(a, inputs, b, 2);
        // Sample `b`'s gradient of queries, keys or values, where one is needed.
        let target = |b: usize, which: usize| {
            let base = if a.stacked {
                dxs.first()
            } else {
                dxs.get(which)
            };
            base.filter(|&&p| p != 0)
                .map(|&p| self.at(p, a.offsets(b)[which]))
        };
        if a.form.fused {
            self.attention_weights(a, &q, &k, p, dropped, seed(i), blas)?;
        }
        for b in 0..a.n {
            let go = self.at(dy, b * hidden * sq);
            if let Some(dv) = target(b, 2) {
                // dV [d x S_kv] = dO [d x S] P'.
                self.gemm_rows(
                    blas,
                    (false, false),
                    (d, t, sq),
                    Mat::new(go, sq, d * sq),
                    Mat::new(self.at(dropped, b * per), t, sq * t),
                    Mat::new(dv, t, d * t),
                    h,
                    false,
                )?;
            }
            // dP' [S x S_kv] = dO^T V.
            self.gemm_rows(
                blas,
                (true, false),
                (sq, t, d),
                Mat::new(go, sq, d * sq),
                Mat::new(v(b), t, d * t),
                Mat::new(self.at(ds, b * per), t, sq * t),
                h,
                false,
            )?;
        }
        if dropout {
            #[allow(clippy::cast_possible_truncation)]
            let rate = a.form.dropout as f32;
            self.run(
                "op_dropout_bwd",
                w,
                &op_args(0, 0, ds, ds, 0, rate, seed(i), w),
            )?;
        }
        // Softmax's backward (masked and clamped weights are zero), then the scale's.
        let rows = w / t.max(1);
        self.run(
            "ex_softmax_rows_bwd",
            32 * rows,
            &[
                Arg::Ptr(p),
                Arg::Ptr(ds),
                Arg::Ptr(ds),
                Arg::U64(t as u64),
                Arg::U64(rows as u64),
            ],
        )?;
        if !a.form.scale_queries {
            self.run("op_scale_bwd", w, &op_args(0, 0, ds, ds, 0, scale, 0, w))?;
        }
        for b in 0..a.n {
            let dsb = self.at(ds, b * per);
            if let Some(dq) = target(b, 0) {
                // dQ [d x S] = K dS^T.
                self.gemm_rows(
                    blas,
                    (false, true),
                    (d, sq, t),
                    Mat::new(k(b), t, d * t),
                    Mat::new(dsb, t, sq * t),
                    Mat::new(dq, sq, d * sq),
                    h,
                    false,
                )?;
                if a.form.scale_queries {
                    let len = hidden * sq;
                    self.run(
                        "op_scale_bwd",
                        len,
                        &op_args(0, 0, dq, dq, 0, scale, 0, len),
                    )?;
                }
            }
            if let Some(dk) = target(b, 1) {
                // dK [d x S_kv] = Q dS.
                self.gemm_rows(
                    blas,
                    (false, false),
                    (d, t, sq),
                    Mat::new(q(b), sq, d * sq),
                    Mat::new(dsb, t, sq * t),
                    Mat::new(dk, t, d * t),
                    h,
                    false,
                )?;
            }
        }
        self.release(Some(ds_buf));
        self.release(scratch);
        Ok(())
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

    /// A column-major GEMM `C (m x n) = op(A) op(B)` through `cublasGemmEx` in the
    /// precision's matrix format: operands of its input and output types, FP32
    /// accumulation (TF32 tensor cores under tf32). Each operand is `(pointer, leading
    /// dimension)`.
    fn gemm(
        &self,
        blas: &cublas::CudaBlas,
        (transpose_a, transpose_b): (bool, bool),
        (m, n, k): (usize, usize, usize),
        (a, lda): (u64, usize),
        (b, ldb): (u64, usize),
        (c, ldc): (u64, usize),
    ) -> Result<()> {
        let plan = GemmPlan::of(self.precision.matrix);
        let int = |v: usize| {
            i32::try_from(v).map_err(|_| {
                Error::invalid(
                    "dense layer",
                    format!("{v} is beyond cuBLAS's 32-bit sizes"),
                )
            })
        };
        let op = |t: bool| {
            if t {
                cublas::sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                cublas::sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let (one, zero) = (1.0f32, 0.0f32);
        let (alpha, beta): (*const c_void, *const c_void) =
            ((&raw const one).cast(), (&raw const zero).cast());
        // SAFETY: `a`, `b` and `c` are live device allocations of the dense layer's operands
        // (weights [out x in], activations [n x in], outputs [n x out] and their gradients)
        // in the plan's element types (the 16-bit copy and gradient of the weights under
        // mixed precision), each at least `ld * columns` elements for the shapes passed;
        // alpha and beta point to host floats (FP32 compute) alive for the call.
        let r = unsafe {
            cublas::result::gemm_ex(
                *blas.handle(),
                op(transpose_a),
                op(transpose_b),
                int(m)?,
                int(n)?,
                int(k)?,
                alpha,
                a as *const c_void,
                data_type(plan.inputs),
                int(lda)?,
                b as *const c_void,
                data_type(plan.inputs),
                int(ldb)?,
                beta,
                c as *mut c_void,
                data_type(plan.output),
                int(ldc)?,
                compute_type(plan.compute),
                cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        };
        call(self.ordinal, "cublasGemmEx", r)
    }
}

/// The FP32 values of bytes read back from the device.
fn f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
}

/// The dropout seed of layer `i` (the same forward and backward).
/// One operand of [`GpuExecutor::gemm_rows`]: a device pointer, the row-major leading
/// dimension, and the elements between consecutive products.
#[derive(Debug, Clone, Copy)]
struct Mat {
    ptr: u64,
    ld: usize,
    stride: usize,
}

impl Mat {
    fn new(ptr: u64, ld: usize, stride: usize) -> Mat {
        Mat { ptr, ld, stride }
    }
}

/// The arguments of `ex_gather` and `ex_scatter`: `x`, `out`, the index `(features, rows of
/// x, rows of out, hashed, salt)` and the threads.
fn rows_args(x: u64, out: u64, index: (usize, usize, usize, bool, u64), n: usize) -> [Arg; 8] {
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
