//! The CUDA backend through cudarc (feature `cuda`).
//!
//! Every library is probed before its first call (cudarc's dynamic loading panics on a call
//! into a library it cannot load): the driver in [`CudaBackend::open`], cuBLAS before the
//! first GEMM, cuDNN before the first convolution, NVRTC before the first STREAM kernel. A missing one is
//! [`Error::BackendUnavailable`] naming it. Every other CUDA call's result is mapped to
//! [`Error::Device`] naming the call. Device memory is owned by `CudaSlice`s, freed when they
//! drop on every path, errors included.
//!
//! Micro-kernels are timed by CUDA events around calls queued behind a spin kernel
//! ([`Timer`]), so a sample is the GPU's time for them, not the host's time to issue them.

// The cuBLAS GEMM and the kernel launches are foreign calls; each `unsafe` block says why
// it is sound.
#![allow(unsafe_code)]

mod device;
mod exec;

pub use device::CudaBackend;
use device::*;

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Duration;

use cudarc::cublas::{self};
use cudarc::driver::{
    self, CudaContext, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use serde_json::Value;

use super::cudnn::{Buffers, CudnnFailure, NO_ALGORITHM, Pass as CudnnPass, WORKSPACE_LIMIT};
use super::plan::{
    Compute, ConvGeometry, ConvPlan, Element, GemmPlan, STREAM_BLOCK, elements, elementwise_kernel,
    op_storage, shaped_kernel, spatial_kernel, stream_function, stream_grid,
};
use crate::backend::{
    Backend, ConvCase, ConvPass, CopyCase, CopyDirection, GemmCase, HostMemory, OpCase, Pass,
    StreamKernel, WorkloadRun,
};
use crate::error::{Error, Result};
use crate::protocol::Protocol;
use crate::record::{Env, GpuEnv};

impl Backend for CudaBackend {
    fn device(&self) -> crate::record::Device {
        crate::record::Device::Cuda(self.ordinal as u32)
    }

    fn threads(&self) -> usize {
        1
    }

    fn env(&self) -> Env {
        let mut env = Env::capture();
        env.gpu = Some(self.gpu.clone());
        env
    }

    fn gemm(&mut self, case: &GemmCase, protocol: &Protocol) -> Result<Vec<f64>> {
        let plan = GemmPlan::of(case.format);
        let (m, n, k) = (case.m, case.n, case.k);
        let dims = [m, n, k].map(|d| i32::try_from(d).ok().filter(|&d| d > 0));
        let [Some(mi), Some(ni), Some(ki)] = dims else {
            return Err(Error::invalid(
                format!("gemm {m}x{n}x{k}"),
                "cuBLAS takes dimensions from 1 to 2^31 - 1",
            ));
        };
        self.check_memory("gemm", plan.bytes(m, n, k))?;
        let ops = match plan.inputs {
            Element::F64 => {
                Operands::F64(self.zeros(m * k)?, self.zeros(k * n)?, self.zeros(m * n)?)
            }
            Element::F32 => {
                Operands::F32(self.zeros(m * k)?, self.zeros(k * n)?, self.zeros(m * n)?)
            }
            Element::F16 | Element::Bf16 => {
                Operands::Half(self.zeros(m * k)?, self.zeros(k * n)?, self.zeros(m * n)?)
            }
        };
        // Random A and B: zeros can run faster than real data (they toggle fewer bits).
        match &ops {
            Operands::F64(a, b, _) => {
                self.randomize(a, plan.inputs, m * k, 1)?;
                self.randomize(b, plan.inputs, k * n, 2)?;
            }
            Operands::F32(a, b, _) => {
                self.randomize(a, plan.inputs, m * k, 1)?;
                self.randomize(b, plan.inputs, k * n, 2)?;
            }
            Operands::Half(a, b, _) => {
                self.randomize(a, plan.inputs, m * k, 1)?;
                self.randomize(b, plan.inputs, k * n, 2)?;
            }
        }
        let (a_type, c_type) = (data_type(plan.inputs), data_type(plan.output));
        let compute = compute_type(plan.compute);
        let (alpha64, beta64) = (1.0f64, 0.0f64);
        let (alpha32, beta32) = (1.0f32, 0.0f32);
        let timer = self.timer()?;
        let ordinal = self.ordinal;
        let stream = self.stream.clone();
        let blas = self.blas()?;
        let handle = *blas.handle();
        let mut ops = ops;
        protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            let (a, b, c) = match &mut ops {
                Operands::F64(a, b, c) => (
                    a.device_ptr(&stream).0,
                    b.device_ptr(&stream).0,
                    c.device_ptr_mut(&stream).0,
                ),
                Operands::F32(a, b, c) => (
                    a.device_ptr(&stream).0,
                    b.device_ptr(&stream).0,
                    c.device_ptr_mut(&stream).0,
                ),
                Operands::Half(a, b, c) => (
                    a.device_ptr(&stream).0,
                    b.device_ptr(&stream).0,
                    c.device_ptr_mut(&stream).0,
                ),
            };
            let (alpha, beta): (*const c_void, *const c_void) = match plan.compute {
                Compute::F64 => ((&raw const alpha64).cast(), (&raw const beta64).cast()),
                Compute::F32 | Compute::F32FastTf32 => {
                    ((&raw const alpha32).cast(), (&raw const beta32).cast())
                }
            };
            timer.time(batch, || {
                // SAFETY: `a`, `b` and `c` point to live device allocations of m*k, k*n and
                // m*n elements of the types passed (owned by `ops`, alive for the call and
                // synchronised below); leading dimensions are those of column-major m x k,
                // k x n and m x n; alpha and beta point to host scalars of the compute type.
                let r = unsafe {
                    cublas::result::gemm_ex(
                        handle,
                        cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                        cublas::sys::cublasOperation_t::CUBLAS_OP_N,
                        mi,
                        ni,
                        ki,
                        alpha,
                        a as *const c_void,
                        a_type,
                        mi,
                        b as *const c_void,
                        a_type,
                        ki,
                        beta,
                        c as *mut c_void,
                        c_type,
                        mi,
                        compute,
                        cublas::sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                };
                call(ordinal, "cublasGemmEx", r)
            })
        })
    }

    fn conv(&mut self, case: &ConvCase, pass: ConvPass, protocol: &Protocol) -> Result<Vec<f64>> {
        let what = format!("conv {} {} {}", pass.name(), case.format.name(), case.label);
        if pass == ConvPass::Backward {
            return Err(ConvPass::refused(&what));
        }
        let g = ConvGeometry::of(case).map_err(|m| Error::invalid(&what, m))?;
        let plan = ConvPlan::of(case.format).map_err(|m| Error::invalid(&what, m))?;
        // Buffers in bytes of the plan's element (zero bits are zero in every format).
        let lens = [&g.x, &g.w, &g.y, &g.bias].map(|d| elements(d) * plan.data.bytes());
        let data = lens.iter().sum::<usize>();
        self.check_memory(&what, data)?;
        let (free, _) = self.call("cuMemGetInfo", self.ctx.mem_get_info())?;
        let workspace_bytes = WORKSPACE_LIMIT.min(free.saturating_sub(data) / 2);
        self.cudnn()?;
        // Random operands (zeros can run faster than real data), dy in `y` for backward.
        let mut x: CudaSlice<u8> = self.zeros(lens[0])?;
        let mut w: CudaSlice<u8> = self.zeros(lens[1])?;
        let mut y: CudaSlice<u8> = self.zeros(lens[2])?;
        for (buffer, len, seed) in [(&x, lens[0], 1), (&w, lens[1], 2), (&y, lens[2], 3)] {
            self.randomize(buffer, plan.data, len / plan.data.bytes(), seed)?;
        }
        let mut bias: CudaSlice<u8> = self.zeros(lens[3])?;
        // The bias gradient in FP32, as the executor keeps it; its kernel reduces dy over
        // `[samples, c_out, spatial]`, or `[samples x spatial, c_out]` channels-last.
        let c_out = g.y[1] as usize;
        let y_elements = elements(&g.y);
        let inner = if g.channels_last {
            1
        } else {
            y_elements / (c_out * g.y[0] as usize).max(1)
        };
        let db: CudaSlice<f32> = self.zeros(c_out)?;
        let bias_grad = if case.bias && pass == ConvPass::BackwardFilter {
            let f = self.kernel("ex_bias_grad", plan.data)?;
            let threads = super::layers::bias_grad_threads(c_out, inner, y_elements);
            let cfg = LaunchConfig {
                grid_dim: (stream_grid(threads.max(1), self.multiprocessors()), 1, 1),
                block_dim: (STREAM_BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            Some((f, cfg))
        } else {
            None
        };
        let mut workspace: CudaSlice<u8> = self.zeros(workspace_bytes)?;
        let stream = self.stream.clone();
        let ptr = |p: driver::sys::CUdeviceptr| p as *mut c_void;
        let buffers = Buffers {
            x: ptr(x.device_ptr_mut(&stream).0),
            w: ptr(w.device_ptr_mut(&stream).0),
            y: ptr(y.device_ptr_mut(&stream).0),
            bias: ptr(bias.device_ptr_mut(&stream).0),
            workspace: ptr(workspace.device_ptr_mut(&stream).0),
            workspace_bytes,
        };
        let ordinal = self.ordinal;
        let failed = |f: CudnnFailure| {
            if f.call == NO_ALGORITHM {
                Error::Declined {
                    device: format!("cuda:{ordinal}"),
                    message: f.message,
                }
            } else {
                Error::Device {
                    device: format!("cuda:{ordinal}"),
                    call: f.call.into(),
                    message: f.message,
                }
            }
        };
        let timer = self.timer()?;
        let handle = self
            .cudnn
            .as_ref()
            .ok_or_else(|| unavailable(ordinal, "cuDNN handle missing"))?;
        let (mut run, mut notes) =
            CudnnPass::find(handle, &g, pass, case.bias, plan, buffers).map_err(failed)?;
        let retimed = fastest_algorithm(&timer, handle, &mut run, buffers, failed)?;
        chosen_notes("cudnn_", &run, &retimed, &mut notes);
        debug_assert_eq!(run.bias_gradient(), bias_grad.is_some());
        let (a, b, n) = (c_out as u64, inner as u64, y_elements as u64);
        let samples = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || {
                run.run(handle, buffers).map_err(failed)?;
                if let Some((f, cfg)) = &bias_grad {
                    let mut l = stream.launch_builder(f);
                    l.arg(&y).arg(&db).arg(&a).arg(&b).arg(&n);
                    // SAFETY: `ex_bias_grad(const T* dy, float* db, u64 a, u64 b, u64 n)` of
                    // the plan's storage; `y` holds the `n` elements of dy in that storage,
                    // `db` the `a` FP32 sums, and the kernel indexes below both.
                    call(ordinal, "cuLaunchKernel", unsafe { l.launch(*cfg) })?;
                }
                Ok(())
            })
        })?;
        // The buffers stay alive until every launch above has completed.
        call(ordinal, "cuStreamSynchronize", stream.synchronize())?;
        drop((x, w, y, bias, db, workspace));
        self.notes = notes;
        Ok(samples)
    }

    fn take_notes(&mut self) -> std::collections::BTreeMap<String, Value> {
        std::mem::take(&mut self.notes)
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
        self.check_memory("stream", 3 * 8 * elements)?;
        let f = self.kernel(stream_function(kernel), Element::F32)?;
        let mut a: CudaSlice<f64> = self.zeros(elements)?;
        let mut b: CudaSlice<f64> = self.zeros(elements)?;
        let mut c: CudaSlice<f64> = self.zeros(elements)?;
        let sms = self.multiprocessors();
        let cfg = LaunchConfig {
            grid_dim: (stream_grid(elements, sms), 1, 1),
            block_dim: (STREAM_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let n = elements as u64;
        let timer = self.timer()?;
        let (ordinal, stream) = (self.ordinal, self.stream.clone());
        protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || {
                let mut launch = stream.launch_builder(&f);
                launch
                    .arg(&mut a)
                    .arg(&mut b)
                    .arg(&mut c)
                    .arg(&STREAM_Q)
                    .arg(&n);
                // SAFETY: the kernel's parameters are (double*, double*, double*, double,
                // unsigned long long), matching the arguments pushed; each array holds `n`
                // doubles and the kernel indexes below `n`.
                call(ordinal, "cuLaunchKernel", unsafe { launch.launch(cfg) }).map(drop)
            })
        })
    }

    fn copy(&mut self, case: &CopyCase, protocol: &Protocol) -> Result<Vec<f64>> {
        let n = case.bytes.max(1);
        self.check_memory("copy", n)?;
        let (ordinal, stream) = (self.ordinal, self.stream.clone());
        let mut device: CudaSlice<u8> = self.zeros(n)?;
        let timer = self.timer()?;
        let mut pinned = match case.memory {
            // SAFETY: the pinned buffer is written below before anything reads it.
            HostMemory::Pinned => Some(self.call("cuMemHostAlloc", unsafe {
                self.ctx.alloc_pinned_with_flags::<u8>(n, 0)
            })?),
            HostMemory::Pageable => None,
        };
        let mut pageable = match case.memory {
            HostMemory::Pinned => Vec::new(),
            HostMemory::Pageable => vec![1u8; n],
        };
        if let Some(p) = &mut pinned {
            self.call("cuMemHostAlloc", p.as_mut_slice())?.fill(1);
        }
        let direction = case.direction;
        let samples = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || {
                let r = match (direction, &mut pinned) {
                    (CopyDirection::HostToDevice, Some(p)) => stream.memcpy_htod(p, &mut device),
                    (CopyDirection::HostToDevice, None) => {
                        stream.memcpy_htod(&pageable, &mut device)
                    }
                    (CopyDirection::DeviceToHost, Some(p)) => stream.memcpy_dtoh(&device, p),
                    (CopyDirection::DeviceToHost, None) => {
                        stream.memcpy_dtoh(&device, &mut pageable)
                    }
                };
                call(ordinal, "cuMemcpyAsync", r)
            })
        })?;
        // Host and device buffers stay alive until the copies above have completed.
        call(ordinal, "cuStreamSynchronize", stream.synchronize())?;
        drop((device, pinned, pageable));
        Ok(samples)
    }

    fn op(&mut self, case: &OpCase, pass: Pass, protocol: &Protocol) -> Result<Vec<f64>> {
        let what = format!(
            "op {} {} {}",
            case.op.kind(),
            pass.name(),
            case.format.name()
        );
        let storage = op_storage(case.format).map_err(|m| Error::invalid(&what, m))?;
        if let Some(launch) = shaped_kernel(&case.op, pass, &case.input, case.batch) {
            return self.shaped_op(launch, case, protocol, &what);
        }
        if let Some(launch) = spatial_kernel(&case.op, pass, &case.input, case.batch) {
            let launch = launch.map_err(|m| Error::invalid(&what, m))?;
            return self.spatial_op(&launch, storage, protocol, &what);
        }
        let Some((name, param)) = elementwise_kernel(&case.op, pass) else {
            return self.cudnn_op(case, pass, protocol, &what);
        };
        let n = case.batch.max(1) * case.input.iter().product::<usize>();
        if n == 0 {
            return Err(Error::invalid(what, "the input has no elements"));
        }
        self.check_memory(&what, 5 * storage.bytes() * n)?;
        let f = self.kernel(name, storage)?;
        // Inputs of ones (tanh's backward reads its forward output as `y`).
        let x = self.filled(storage, n, 1.0)?;
        let y = self.filled(storage, n, 1.0)?;
        let dy = self.filled(storage, n, 1.0)?;
        let mut out = self.filled(storage, n, 0.0)?;
        let mut out2 = self.filled(storage, n, 0.0)?;
        let sms = self.multiprocessors();
        let cfg = LaunchConfig {
            grid_dim: (stream_grid(n, sms), 1, 1),
            block_dim: (STREAM_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let (seed, len) = (0x5EED_u64, n as u64);
        let timer = self.timer()?;
        let (ordinal, stream) = (self.ordinal, self.stream.clone());
        let samples = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || {
                let mut launch = stream.launch_builder(&f);
                launch
                    .arg(&x)
                    .arg(&y)
                    .arg(&dy)
                    .arg(&mut out)
                    .arg(&mut out2)
                    .arg(&param)
                    .arg(&seed)
                    .arg(&len);
                // SAFETY: every op kernel takes (const T*, const T*, const T*, T*, T*, float,
                // unsigned long long, unsigned long long), matching the arguments pushed; all
                // five arrays hold `n` elements of the storage `T` the kernel was compiled
                // for, and the kernels index below `n`.
                call(ordinal, "cuLaunchKernel", unsafe { launch.launch(cfg) }).map(drop)
            })
        })?;
        call(ordinal, "cuStreamSynchronize", stream.synchronize())?;
        drop((x, y, dy, out, out2));
        Ok(samples)
    }

    fn workload(
        &mut self,
        graph: &ridgeline_model::graph::Graph,
        batch: usize,
        precision: ridgeline_model::precision::Precision,
        protocol: &Protocol,
    ) -> Result<WorkloadRun> {
        if batch == 0 {
            return Err(Error::invalid("batch", "must be at least 1"));
        }
        let mut exec = exec::GpuExecutor::new(self, graph, batch, precision)?;
        let ordinal = self.ordinal;
        let handle = self
            .cudnn
            .as_ref()
            .ok_or_else(|| unavailable(ordinal, "cuDNN handle missing"))?;
        let blas = self
            .blas
            .as_ref()
            .ok_or_else(|| unavailable(ordinal, "cuBLAS handle missing"))?;
        let steps = protocol.try_steps(|| {
            let t = exec.step(handle, blas)?;
            Ok::<_, Error>((t.total, t))
        })?;
        let mut run = crate::schedule::workload_run(graph, &steps, exec.peak_bytes() as u64, None);
        for (layer, notes) in run.layers.iter_mut().zip(exec.notes()) {
            layer.notes = notes;
        }
        Ok(run)
    }
}

/// Fails, naming the library, when the driver or NCCL cannot be loaded (for GPU `ordinal`).
fn nccl_present(ordinal: usize) -> Result<()> {
    // SAFETY: dlopen probes only.
    if !unsafe { driver::sys::is_culib_present() } {
        return Err(unavailable(
            ordinal,
            "the CUDA driver library (libcuda.so) cannot be loaded: no NVIDIA driver is \
             installed here",
        ));
    }
    // SAFETY: as above.
    if !unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Err(unavailable(
            ordinal,
            "NCCL (libnccl.so) cannot be loaded: install NCCL for CUDA 13 (e.g. the \
             nvidia-nccl-cu13 wheel) and put it, or a libnccl.so link to it, on LD_LIBRARY_PATH",
        ));
    }
    Ok(())
}

/// NCCL's version, `major.minor.patch` (NCCL loaded).
fn nccl_version() -> Result<String> {
    let mut version = 0;
    // SAFETY: NCCL is loaded (probed by the callers); `version` is one int.
    let status = unsafe { cudarc::nccl::sys::ncclGetVersion(&mut version) };
    call(0, "ncclGetVersion", status.result())?;
    Ok(format!(
        "{}.{}.{}",
        version / 10_000,
        (version / 100) % 100,
        version % 100
    ))
}

/// One MPI rank's GPU in an NCCL allreduce across ranks, and across nodes: the
/// communicator is bootstrapped through MPI (rank 0's [`NcclRank::unique_id`] broadcast
/// to every rank, each then [`NcclRank::join`]s), as nccl-tests do under `mpirun`.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) struct NcclRank {
    ordinal: usize,
    stream: Arc<CudaStream>,
    gpu: GpuEnv,
    comm: Option<cudarc::nccl::Comm>,
    send: Option<CudaSlice<f32>>,
    recv: Option<CudaSlice<f32>>,
}

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
impl NcclRank {
    /// Opens GPU `ordinal` (this rank's index among the ranks of its host) for NCCL.
    pub(crate) fn open(ordinal: usize) -> Result<NcclRank> {
        nccl_present(ordinal)?;
        let count = call(ordinal, "cuDeviceGetCount", CudaContext::device_count())?.max(0);
        if ordinal >= count as usize {
            return Err(unavailable(
                ordinal,
                format!(
                    "this rank wants GPU {ordinal} (one GPU per rank on a host), the driver sees \
                     {count}: launch at most {count} ranks per host"
                ),
            ));
        }
        let ctx = call(ordinal, "cuCtxCreate", CudaContext::new(ordinal))?;
        let gpu = gpu_env(ordinal, &ctx)?;
        let stream = call(ordinal, "cuStreamCreate", ctx.new_stream())?;
        Ok(NcclRank {
            ordinal,
            stream,
            gpu,
            comm: None,
            send: None,
            recv: None,
        })
    }

    /// The unique id of a new NCCL communicator, as bytes to broadcast.
    pub(crate) fn unique_id() -> Result<[u8; 128]> {
        nccl_present(0)?;
        let id = call(0, "ncclGetUniqueId", cudarc::nccl::Id::new())?;
        Ok(id.internal().map(|c| c as u8))
    }

    /// Joins the communicator of `id` as `rank` of `ranks` (every rank calls it together).
    pub(crate) fn join(&mut self, rank: usize, ranks: usize, id: &[u8; 128]) -> Result<()> {
        let id = cudarc::nccl::Id::uninit(id.map(|b| b as std::ffi::c_char));
        let comm = call(
            self.ordinal,
            "ncclCommInitRank",
            cudarc::nccl::Comm::from_rank(self.stream.clone(), rank, ranks, id),
        )?;
        self.comm = Some(comm);
        Ok(())
    }

    /// Device buffers for allreduces of up to `count` floats.
    pub(crate) fn reserve(&mut self, count: usize) -> Result<()> {
        let s = &self.stream;
        self.send = Some(call(
            self.ordinal,
            "cuMemAllocAsync",
            s.alloc_zeros(count.max(1)),
        )?);
        self.recv = Some(call(
            self.ordinal,
            "cuMemAllocAsync",
            s.alloc_zeros(count.max(1)),
        )?);
        Ok(())
    }

    /// One allreduce (sum) of `values` across the ranks; returns the result.
    pub(crate) fn reduce(&mut self, values: &[f32]) -> Result<Vec<f32>> {
        let n = values.len();
        let ordinal = self.ordinal;
        let send = self
            .send
            .as_mut()
            .filter(|s| s.len() >= n)
            .ok_or_else(|| Error::invalid("nccl", format!("{n} floats: more than reserved")))?;
        let mut head = send.slice_mut(..n);
        call(
            ordinal,
            "cuMemcpyHtoDAsync",
            self.stream.memcpy_htod(values, &mut head),
        )?;
        self.allreduce(n)?;
        let mut back = vec![0.0f32; n];
        let recv = self
            .recv
            .as_ref()
            .ok_or_else(|| Error::invalid("nccl", "buffers not reserved"))?;
        call(
            ordinal,
            "cuMemcpyDtoHAsync",
            self.stream.memcpy_dtoh(&recv.slice(..n), &mut back),
        )?;
        call(ordinal, "cuStreamSynchronize", self.stream.synchronize())?;
        Ok(back)
    }

    /// One allreduce (sum) of the first `count` floats of the buffers, waited for.
    pub(crate) fn allreduce(&mut self, count: usize) -> Result<()> {
        let ordinal = self.ordinal;
        let (Some(comm), Some(send), Some(recv)) =
            (self.comm.as_ref(), self.send.as_ref(), self.recv.as_mut())
        else {
            return Err(Error::invalid(
                "nccl",
                "the communicator or buffers are missing",
            ));
        };
        if count > send.len().min(recv.len()) {
            return Err(Error::invalid(
                "nccl",
                format!("{count} floats: more than reserved"),
            ));
        }
        call(
            ordinal,
            "ncclAllReduce",
            comm.all_reduce(
                &send.slice(..count),
                &mut recv.slice_mut(..count),
                &cudarc::nccl::ReduceOp::Sum,
            ),
        )?;
        call(ordinal, "cuStreamSynchronize", self.stream.synchronize())
    }

    /// The GPU, for records.
    pub(crate) fn gpu(&self) -> GpuEnv {
        self.gpu.clone()
    }

    /// NCCL's version.
    pub(crate) fn nccl_version(&self) -> Result<String> {
        nccl_version()
    }
}

/// NCCL allreduce across the first GPUs of this machine (see [`super::nccl_allreduce`]).
pub(super) fn nccl_allreduce(
    cases: &[super::nccl::NcclAllreduce],
    protocol: &Protocol,
    skip: &dyn Fn(&str) -> bool,
    sink: &mut dyn FnMut(crate::record::Record) -> Result<()>,
) -> Result<()> {
    use cudarc::nccl::{Comm, ReduceOp};
    let gpus = cases.iter().map(|c| c.gpus).max().unwrap_or(0);
    if gpus == 0 {
        return Ok(());
    }
    nccl_present(0)?;
    let count = call(0, "cuDeviceGetCount", CudaContext::device_count())?.max(0) as usize;
    if count < gpus {
        return Err(unavailable(
            0,
            format!("{gpus} GPUs asked for, the driver sees {count}"),
        ));
    }
    let mut streams = Vec::new();
    let mut envs = Vec::new();
    for g in 0..gpus {
        let ctx = call(g, "cuCtxCreate", CudaContext::new(g))?;
        envs.push(gpu_env(g, &ctx)?);
        streams.push(call(g, "cuStreamCreate", ctx.new_stream())?);
    }
    let comms = call(0, "ncclCommInitAll", Comm::from_devices(streams.clone()))?;
    let nccl_version = nccl_version()?;
    for case in cases.iter().filter(|c| !skip(&c.id())) {
        let comms = &comms[..case.gpus];
        let n = case.bytes / 4;
        let mut send = Vec::new();
        let mut recv = Vec::new();
        let mut events = Vec::new();
        for (g, s) in streams[..case.gpus].iter().enumerate() {
            send.push(call(
                g,
                "cuMemcpyHtoDAsync",
                s.clone_htod(&vec![1.0f32; n]),
            )?);
            recv.push(call(g, "cuMemAllocAsync", s.alloc_zeros::<f32>(n))?);
            let flags = Some(driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
            let ctx = s.context();
            events.push((
                call(g, "cuEventCreate", ctx.new_event(flags))?,
                call(g, "cuEventCreate", ctx.new_event(flags))?,
            ));
        }
        let samples = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            for (g, (start, _)) in events.iter().enumerate() {
                call(g, "cuEventRecord", start.record(&streams[g]))?;
            }
            for _ in 0..batch {
                call(0, "ncclGroupStart", cudarc::nccl::result::group_start())?;
                for (g, comm) in comms.iter().enumerate() {
                    call(
                        g,
                        "ncclAllReduce",
                        comm.all_reduce(&send[g], &mut recv[g], &ReduceOp::Sum),
                    )?;
                }
                call(0, "ncclGroupEnd", cudarc::nccl::result::group_end())?;
            }
            let mut slowest = Duration::ZERO;
            for (g, (start, end)) in events.iter().enumerate() {
                call(g, "cuEventRecord", end.record(&streams[g]))?;
                call(g, "cuEventSynchronize", end.synchronize())?;
                let ms = call(g, "cuEventElapsedTime", start.elapsed_ms(end))?;
                slowest = slowest.max(Duration::from_secs_f64(f64::from(ms) / 1e3));
            }
            Ok(slowest)
        })?;
        // The sum is checked: every GPU contributed ones.
        let mut back = vec![0.0f32; n.min(16)];
        let head = recv[0].slice(..back.len());
        call(
            0,
            "cuMemcpyDtoHAsync",
            streams[0].memcpy_dtoh(&head, &mut back),
        )?;
        call(0, "cuStreamSynchronize", streams[0].synchronize())?;
        if back.iter().any(|&v| v != case.gpus as f32) {
            return Err(Error::invalid(
                format!("nccl allreduce of {} bytes", case.bytes),
                format!(
                    "the sum is wrong: {:?} where {} was expected",
                    back, case.gpus
                ),
            ));
        }
        for s in &streams[..case.gpus] {
            call(0, "cuStreamSynchronize", s.synchronize())?;
        }
        let mut env = Env::capture();
        env.gpu = envs.first().cloned();
        sink(case.record(samples, env, &nccl_version))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::nvrtc;

    #[test]
    fn without_a_driver_open_names_the_missing_library() {
        // SAFETY: a dlopen probe only.
        if unsafe { driver::sys::is_culib_present() } {
            return; // a GPU machine: scripts/gpu-check.sh exercises `open` there
        }
        let err = CudaBackend::open(0)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("cuda:0") && err.contains("libcuda.so") && err.contains("--device cpu"),
            "{err}"
        );
    }

    #[test]
    fn version_numbers_read_as_cuda_writes_them() {
        assert_eq!(version_string(13000), "13.0");
        assert_eq!(version_string(12040), "12.4");
        assert_eq!(version_string(120405), "12.4.5");
        assert_eq!(version_string(130100), "13.1.0");
    }

    #[test]
    fn gemm_types_map_to_cublas() {
        use crate::backend::Format;
        let p = GemmPlan::of(Format::Bf16);
        assert_eq!(data_type(p.inputs), cublas::sys::cudaDataType::CUDA_R_16BF);
        assert_eq!(
            compute_type(GemmPlan::of(Format::Tf32).compute),
            cublas::sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
        );
    }

    /// Every kernel source in every storage through NVRTC and ptxas (which NVRTC runs for a
    /// real architecture) for the GPUs the catalog lists, A100 (sm_80) and H100 (sm_90):
    /// C++ and inline PTX are checked without a GPU, and every kernel the backend looks up
    /// is in the module. Needs only libnvrtc (`scripts/test` installs the
    /// nvidia-cuda-nvrtc wheel); skipped without it unless `RIDGELINE_REQUIRE_NVRTC` is set.
    #[test]
    fn every_kernel_source_compiles_with_nvrtc_and_ptxas() {
        // SAFETY: a dlopen probe only.
        if !unsafe { nvrtc::sys::is_culib_present() } {
            assert!(
                std::env::var_os("RIDGELINE_REQUIRE_NVRTC").is_none(),
                "RIDGELINE_REQUIRE_NVRTC is set but libnvrtc.so.13 cannot be loaded: \
                 scripts/test installs it and puts it on LD_LIBRARY_PATH"
            );
            eprintln!("skipped: libnvrtc.so.13 is not on the library path");
            return;
        }
        let stream_names = StreamKernel::ALL.map(stream_function);
        for storage in [Element::F32, Element::F16, Element::Bf16] {
            for (source, names) in kernel_sources(storage, &stream_names) {
                for arch in ["sm_80", "sm_90"] {
                    let opts = nvrtc::CompileOptions {
                        arch: Some(arch),
                        ..Default::default()
                    };
                    let ptx = nvrtc::compile_ptx_with_opts(&source, opts).unwrap_or_else(|e| {
                        panic!("{storage:?} {arch} {}: {e:?}", names[0]);
                    });
                    let text = ptx.to_src();
                    for name in names {
                        assert!(
                            text.contains(&format!(".entry {name}(")),
                            "{storage:?} {arch}: {name} missing"
                        );
                    }
                }
            }
        }
        assert!(kernel_sources(Element::F64, &stream_names).is_empty());
        for arch in ["sm_80", "sm_90"] {
            let opts = nvrtc::CompileOptions {
                arch: Some(arch),
                ..Default::default()
            };
            let ptx = nvrtc::compile_ptx_with_opts(SPIN_SOURCE, opts).unwrap();
            assert!(ptx.to_src().contains(&format!(".entry {SPIN_KERNEL}(")));
        }
    }
}
