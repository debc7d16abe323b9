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

mod exec;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::{
    self, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut,
    LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc;
use ridgeline_model::graph::Op;
use serde_json::{Value, json};

use super::cudnn::{
    Buffers, CudnnFailure, Handle, Layer as CudnnLayer, NO_ALGORITHM, OpBuffers, Pass as CudnnPass,
    WORKSPACE_LIMIT,
};
use super::layers::{EXEC_KERNELS, EXEC_SOURCE};
use super::plan::{
    Compute, ConvGeometry, ConvPlan, Element, GemmPlan, OP_KERNELS, OPS_SOURCE, PoolGeometry,
    SHAPED_KERNELS, SHAPED_SOURCE, SPATIAL_KERNELS, SPATIAL_SOURCE, STREAM_BLOCK, STREAM_SOURCE,
    ShapedLaunch, SpatialLaunch, elements, elementwise_kernel, op_storage, shaped_float_pointers,
    shaped_kernel, spatial_kernel, stream_function, stream_grid, typed_source,
};
use crate::backend::{
    Backend, ConvCase, ConvPass, CopyCase, CopyDirection, GemmCase, HostMemory, OpCase, Pass,
    StreamKernel, WorkloadRun,
};
use crate::error::{Error, Result};
use crate::protocol::{Protocol, median};
use crate::record::{Env, GpuEnv};

/// Resolution assumed for CUDA events (the driver documents about half a microsecond).
const EVENT_RESOLUTION: Duration = Duration::from_nanos(500);

/// A kernel of one thread that spins for `ns` nanoseconds of the GPU's global timer: the
/// calls a [`Timer`] times queue behind it.
const SPIN_SOURCE: &str = r#"
extern "C" __global__ void ridgeline_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"#;

/// The spin kernel's name.
const SPIN_KERNEL: &str = "ridgeline_spin";

/// The shortest and longest spins a [`Timer`] queues its calls behind.
const SPIN_RANGE: (Duration, Duration) = (Duration::from_micros(20), Duration::from_millis(200));

/// The scalar of STREAM's scale and triad.
const STREAM_Q: f64 = 3.0;

/// A GPU, its stream, and the libraries loaded so far.
///
/// Fields drop in order: the library handles before the stream they were bound to.
pub struct CudaBackend {
    ordinal: usize,
    gpu: GpuEnv,
    cudnn: Option<Handle>,
    blas: Option<CudaBlas>,
    kernels: Vec<(Element, &'static str, CudaFunction)>,
    spin: Option<CudaFunction>,
    notes: std::collections::BTreeMap<String, Value>,
    stream: Arc<CudaStream>,
    ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ordinal)
            .field("gpu", &self.gpu)
            .finish_non_exhaustive()
    }
}

fn unavailable(ordinal: usize, reason: impl Into<String>) -> Error {
    Error::BackendUnavailable {
        backend: format!("cuda:{ordinal}"),
        reason: reason.into(),
    }
}

/// Maps a failed CUDA call to an error naming it.
fn call<T, E: std::fmt::Debug>(device: usize, name: &str, r: Result<T, E>) -> Result<T> {
    r.map_err(|e| Error::Device {
        device: format!("cuda:{device}"),
        call: name.to_owned(),
        message: format!("{e:?}"),
    })
}

impl CudaBackend {
    /// Opens GPU `ordinal`: checks that the driver library loads and the GPU exists, creates
    /// a context and a stream, and records the device, its clocks and the driver version.
    pub fn open(ordinal: usize) -> Result<Box<dyn Backend>> {
        // SAFETY: `is_culib_present` only tries to open the driver library by its candidate
        // names (dlopen) and closes it; it calls nothing in it.
        if !unsafe { driver::sys::is_culib_present() } {
            return Err(unavailable(
                ordinal,
                "the CUDA driver library (libcuda.so) cannot be loaded: no NVIDIA driver is \
                 installed here; measure on the CPU with --device cpu",
            ));
        }
        let count = call(ordinal, "cuDeviceGetCount", CudaContext::device_count())?;
        if count <= 0 {
            return Err(unavailable(
                ordinal,
                "the NVIDIA driver sees no GPU (check nvidia-smi and CUDA_VISIBLE_DEVICES)",
            ));
        }
        if ordinal >= count as usize {
            return Err(unavailable(
                ordinal,
                format!(
                    "there is no GPU {ordinal}: the driver sees {count} (cuda:0 to cuda:{})",
                    count - 1
                ),
            ));
        }
        let ctx = call(ordinal, "cuCtxCreate", CudaContext::new(ordinal))?;
        let stream = call(ordinal, "cuStreamCreate", ctx.new_stream())?;
        let gpu = gpu_env(ordinal, &ctx)?;
        Ok(Box::new(CudaBackend {
            ordinal,
            gpu,
            cudnn: None,
            blas: None,
            kernels: Vec::new(),
            spin: None,
            notes: std::collections::BTreeMap::new(),
            stream,
            ctx,
        }))
    }

    fn call<T, E: std::fmt::Debug>(&self, name: &str, r: Result<T, E>) -> Result<T> {
        call(self.ordinal, name, r)
    }

    /// cuBLAS on this backend's stream, loaded on first use.
    fn blas(&mut self) -> Result<&CudaBlas> {
        if self.blas.is_none() {
            // SAFETY: as for the driver: a dlopen probe of libcublas, no call into it.
            if !unsafe { cublas::sys::is_culib_present() } {
                return Err(unavailable(
                    self.ordinal,
                    "cuBLAS (libcublas.so.13) cannot be loaded: install the CUDA 13 math \
                     libraries (e.g. the nvidia-cublas-cu13 wheel or the CUDA toolkit) and put \
                     them on LD_LIBRARY_PATH",
                ));
            }
            let blas = self.call("cublasCreate", CudaBlas::new(self.stream.clone()))?;
            let mut version = 0;
            // SAFETY: the handle is live (owned by `blas`) and `version` is a valid place for
            // the library to write one int.
            let status = unsafe { cublas::sys::cublasGetVersion_v2(*blas.handle(), &mut version) };
            self.call("cublasGetVersion", status.result())?;
            self.gpu
                .libraries
                .insert("cublas".into(), version_string(version));
            self.blas = Some(blas);
        }
        self.blas
            .as_ref()
            .ok_or_else(|| unavailable(self.ordinal, "cuBLAS handle missing"))
    }

    /// cuDNN on this backend's stream, loaded on first use.
    fn cudnn(&mut self) -> Result<&Handle> {
        if self.cudnn.is_none() {
            // SAFETY: a dlopen probe of libcudnn, no call into it.
            if !unsafe { cudarc::cudnn::sys::is_culib_present() } {
                return Err(unavailable(
                    self.ordinal,
                    "cuDNN (libcudnn.so.9) cannot be loaded: install cuDNN 9 for CUDA 13 (e.g. \
                     the nvidia-cudnn-cu13 wheel) and put it on LD_LIBRARY_PATH",
                ));
            }
            let handle = Handle::new(self.stream.cu_stream() as _).map_err(|f| Error::Device {
                device: format!("cuda:{}", self.ordinal),
                call: f.call.into(),
                message: f.message,
            })?;
            let v = cudarc::cudnn::result::get_version();
            self.gpu.libraries.insert(
                "cudnn".into(),
                format!("{}.{}.{}", v / 10_000, (v / 100) % 100, v % 100),
            );
            self.cudnn = Some(handle);
        }
        self.cudnn
            .as_ref()
            .ok_or_else(|| unavailable(self.ordinal, "cuDNN handle missing"))
    }

    /// An NVRTC kernel by name, its activations stored as `storage` (FP32 for every
    /// micro-kernel; the executor's 16-bit storages for mixed precision). The sources of a
    /// storage (STREAM's with FP32) are compiled and loaded on first use, and NVRTC's
    /// version recorded.
    fn kernel(&mut self, name: &str, storage: Element) -> Result<CudaFunction> {
        if !self.kernels.iter().any(|(s, _, _)| *s == storage) {
            self.nvrtc_present()?;
            let stream_names = StreamKernel::ALL.map(stream_function);
            for (source, names) in kernel_sources(storage, &stream_names) {
                let ptx = self.call("nvrtcCompileProgram", nvrtc::compile_ptx(source))?;
                let module = self.call("cuModuleLoadData", self.ctx.load_module(ptx))?;
                for &k in names {
                    let f = self.call("cuModuleGetFunction", module.load_function(k))?;
                    self.kernels.push((storage, k, f));
                }
            }
            let (mut major, mut minor) = (0, 0);
            // SAFETY: NVRTC is loaded (probed above, and programs were compiled with it);
            // both pointers are valid places for one int.
            let status = unsafe { nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
            self.call("nvrtcVersion", status.result())?;
            self.gpu
                .libraries
                .insert("nvrtc".into(), format!("{major}.{minor}"));
        }
        self.kernels
            .iter()
            .find(|(s, k, _)| *s == storage && *k == name)
            .map(|(_, _, f)| f.clone())
            .ok_or_else(|| unavailable(self.ordinal, format!("kernel {name} missing")))
    }

    /// The shaped ops (channel affine, concat, flatten, the losses) as NVRTC kernels.
    fn shaped_op(
        &mut self,
        launch: ShapedLaunch,
        case: &OpCase,
        protocol: &Protocol,
        what: &str,
    ) -> Result<Vec<f64>> {
        let samples = case.batch.max(1);
        let elements = samples * launch.a * launch.b;
        // Room for every role: concat's doubled output and gradient, per-channel and
        // per-sample vectors; each role FP32 or of the storage, as the kernel declares it.
        let big = 2 * elements;
        let small = elements.max(launch.a).max(samples);
        let storage = op_storage(case.format).map_err(|m| Error::invalid(what, m))?;
        let float = shaped_float_pointers(launch.kernel);
        let element = |k: usize| if float[k] { Element::F32 } else { storage };
        let lens = [small, small, big, big, small, launch.a];
        let bytes: usize = (0..6).map(|k| lens[k] * element(k).bytes()).sum();
        self.check_memory(what, bytes)?;
        let f = self.kernel(launch.kernel, storage)?;
        let stream = self.stream.clone();
        let x = self.filled(element(0), small, 1.0)?;
        let x2 = self.filled(element(1), small, 0.5)?;
        let dy = self.filled(element(2), big, 1.0)?;
        let mut out = self.filled(element(3), big, 0.0)?;
        let mut out2 = self.filled(element(4), small, 0.0)?;
        let mut out3 = self.filled(element(5), launch.a, 0.0)?;
        let cfg = LaunchConfig {
            grid_dim: (stream_grid(launch.n, self.multiprocessors()), 1, 1),
            block_dim: (STREAM_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let (a, b, n) = (launch.a as u64, launch.b as u64, launch.n as u64);
        let timer = self.timer()?;
        let ordinal = self.ordinal;
        let samples_s = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || {
                let mut l = stream.launch_builder(&f);
                l.arg(&x)
                    .arg(&x2)
                    .arg(&dy)
                    .arg(&mut out)
                    .arg(&mut out2)
                    .arg(&mut out3)
                    .arg(&a)
                    .arg(&b)
                    .arg(&n);
                // SAFETY: every shaped kernel takes six pointers (three const) and three
                // unsigned long long, matching the arguments pushed; each buffer holds
                // elements of the type the kernel declares for it (`float`, or the storage
                // `T` it was compiled for, per `shaped_float_pointers`), sized for the
                // largest index any kernel reaches (2 x the input's elements for concat, the
                // channels or samples for the per-channel and per-sample ones).
                call(ordinal, "cuLaunchKernel", unsafe { l.launch(cfg) }).map(drop)
            })
        })?;
        call(ordinal, "cuStreamSynchronize", stream.synchronize())?;
        drop((x, x2, dy, out, out2, out3));
        Ok(samples_s)
    }

    /// Tile and upsample as NVRTC kernels.
    fn spatial_op(
        &mut self,
        launch: &SpatialLaunch,
        storage: Element,
        protocol: &Protocol,
        what: &str,
    ) -> Result<Vec<f64>> {
        let (n_in, n_out) = (launch.in_elements.max(1), launch.out_elements.max(1));
        self.check_memory(what, storage.bytes() * (n_in + 2 * n_out))?;
        let f = self.kernel(launch.kernel, storage)?;
        let stream = self.stream.clone();
        let x = self.filled(storage, n_in, 1.0)?;
        let dy = self.filled(storage, n_out, 1.0)?;
        let mut out = self.filled(storage, n_out.max(n_in), 0.0)?;
        let cfg = LaunchConfig {
            grid_dim: (
                stream_grid(launch.threads().max(1), self.multiprocessors()),
                1,
                1,
            ),
            block_dim: (STREAM_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let ([i0, i1, i2], [k0, k1, k2], n) = (launch.input, launch.k, n_out as u64);
        let timer = self.timer()?;
        let ordinal = self.ordinal;
        let samples = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || {
                let mut l = stream.launch_builder(&f);
                l.arg(&x)
                    .arg(&dy)
                    .arg(&mut out)
                    .arg(&i0)
                    .arg(&i1)
                    .arg(&i2)
                    .arg(&k0)
                    .arg(&k1)
                    .arg(&k2)
                    .arg(&n);
                // SAFETY: the tile and upsample kernels take (const T*, const T*, T*, and seven
                // unsigned long long), matching the arguments pushed, `T` the storage the
                // buffers hold; `x` holds the input's elements, `dy` and `out` the output's
                // (the index map stays below each, as the plan's tests check).
                call(ordinal, "cuLaunchKernel", unsafe { l.launch(cfg) }).map(drop)
            })
        })?;
        call(ordinal, "cuStreamSynchronize", stream.synchronize())?;
        drop((x, dy, out));
        Ok(samples)
    }

    /// Pooling and batch norm through cuDNN (the ops that are neither element-wise nor a
    /// convolution); anything else is a clear error.
    fn cudnn_op(
        &mut self,
        case: &OpCase,
        pass: Pass,
        protocol: &Protocol,
        what: &str,
    ) -> Result<Vec<f64>> {
        let graph = crate::cases::op_graph(case)?;
        let layer = graph
            .layers()
            .last()
            .ok_or_else(|| Error::invalid(what, "the op graph is empty"))?;
        let out = layer.output.dims().to_vec();
        let x_dims: Vec<i32> = std::iter::once(case.batch.max(1))
            .chain(case.input.iter().copied())
            .map(|d| i32::try_from(d).unwrap_or(i32::MAX))
            .collect();
        let (geometry, x_dims, y_dims) =
            match PoolGeometry::of(&layer.op, &case.input, &out, case.batch) {
                Some(g) => {
                    let g = g.map_err(|m| Error::invalid(what, m))?;
                    let (x, y) = (g.x.clone(), g.y.clone());
                    (Some(g), x, y)
                }
                None if matches!(layer.op, Op::BatchNorm) && x_dims.len() >= 3 => {
                    (None, x_dims.clone(), x_dims)
                }
                None => {
                    return Err(Error::invalid(
                        what,
                        "tile and upsample do not run on the CUDA backend yet; measure them with \
                     --device cpu",
                    ));
                }
            };
        let (nx, ny, c) = (
            elements(&x_dims),
            elements(&y_dims),
            x_dims[1].max(1) as usize,
        );
        let storage = op_storage(case.format).map_err(|m| Error::invalid(what, m))?;
        self.check_memory(what, storage.bytes() * (2 * nx + 2 * ny) + 4 * 8 * c)?;
        self.cudnn()?;
        let ordinal = self.ordinal;
        let failed = |f: CudnnFailure| Error::Device {
            device: format!("cuda:{ordinal}"),
            call: f.call.into(),
            message: f.message,
        };
        let layer = match &geometry {
            Some(g) => CudnnLayer::pool(g, storage),
            None => CudnnLayer::batch_norm(&x_dims, storage),
        }
        .map_err(failed)?;
        let ones = |n: usize| vec![1.0f32; n];
        let stream = self.stream.clone();
        let mut x = self.filled(storage, nx, 1.0)?;
        let mut dx = self.filled(storage, nx, 0.0)?;
        let mut y = self.filled(storage, ny, 0.0)?;
        let mut dy = self.filled(storage, ny, 1.0)?;
        let mut channel = Vec::new();
        for _ in 0..8 {
            channel.push(self.call("cuMemcpyHtoDAsync", stream.clone_htod(&ones(c)))?);
        }
        let ptr = |p: driver::sys::CUdeviceptr| p as *mut c_void;
        let mut channel_ptrs = [std::ptr::null_mut(); 8];
        for (slot, buf) in channel_ptrs.iter_mut().zip(channel.iter_mut()) {
            *slot = ptr(buf.device_ptr_mut(&stream).0);
        }
        let buffers = OpBuffers {
            x: ptr(x.device_ptr_mut(&stream).0),
            dx: ptr(dx.device_ptr_mut(&stream).0),
            y: ptr(y.device_ptr_mut(&stream).0),
            dy: ptr(dy.device_ptr_mut(&stream).0),
            channel: channel_ptrs,
        };
        let timer = self.timer()?;
        let handle = self
            .cudnn
            .as_ref()
            .ok_or_else(|| unavailable(ordinal, "cuDNN handle missing"))?;
        let forward = pass == Pass::Forward;
        if !forward {
            // Backward reads what forward leaves (max positions, saved statistics).
            layer.run(handle, true, buffers).map_err(failed)?;
        }
        let samples = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || {
                layer.run(handle, forward, buffers).map_err(failed)
            })
        })?;
        call(ordinal, "cuStreamSynchronize", stream.synchronize())?;
        drop((x, dx, y, dy, channel));
        Ok(samples)
    }

    /// The GPU's multiprocessors (1 if the driver does not say).
    fn multiprocessors(&self) -> u32 {
        self.ctx
            .attribute(driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(1, |v| v.max(1) as u32)
    }

    /// Fails, naming the library, when NVRTC cannot be loaded.
    fn nvrtc_present(&self) -> Result<()> {
        // SAFETY: a dlopen probe of libnvrtc, no call into it.
        if unsafe { nvrtc::sys::is_culib_present() } {
            Ok(())
        } else {
            Err(unavailable(
                self.ordinal,
                "NVRTC (libnvrtc.so.13) cannot be loaded: install the CUDA 13 runtime \
                 compiler (e.g. the nvidia-cuda-nvrtc-cu13 wheel or the CUDA toolkit) and \
                 put it on LD_LIBRARY_PATH",
            ))
        }
    }

    /// A timer on this backend's stream (the spin kernel compiled on first use).
    fn timer(&mut self) -> Result<Timer> {
        let spin = match &self.spin {
            Some(f) => f.clone(),
            None => {
                self.nvrtc_present()?;
                let ptx = self.call("nvrtcCompileProgram", nvrtc::compile_ptx(SPIN_SOURCE))?;
                let module = self.call("cuModuleLoadData", self.ctx.load_module(ptx))?;
                let f = self.call("cuModuleGetFunction", module.load_function(SPIN_KERNEL))?;
                self.spin = Some(f.clone());
                f
            }
        };
        let flags = Some(driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(Timer {
            ordinal: self.ordinal,
            stream: self.stream.clone(),
            start: self.call("cuEventCreate", self.ctx.new_event(flags))?,
            end: self.call("cuEventCreate", self.ctx.new_event(flags))?,
            spin,
            issue: Cell::new(Duration::ZERO),
        })
    }

    /// Device memory of `len` elements of `T`, zeroed, after checking it fits.
    fn zeros<T: driver::DeviceRepr + driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        self.call("cuMemAllocAsync", self.stream.alloc_zeros::<T>(len.max(1)))
    }

    /// Fails with a clear message when `bytes` exceed the GPU's free memory.
    /// Fills `n` elements of `storage` in `buffer` with data uniform in [-1, 1) (a hash of
    /// the index and `seed`; `ex_uniform`, or `ex_uniform_f64` for FP64).
    fn randomize<T>(
        &mut self,
        buffer: &CudaSlice<T>,
        storage: Element,
        n: usize,
        seed: u64,
    ) -> Result<()> {
        let f = match storage {
            Element::F64 => self.kernel("ex_uniform_f64", Element::F32)?,
            _ => self.kernel("ex_uniform", storage)?,
        };
        let cfg = LaunchConfig {
            grid_dim: (stream_grid(n.max(1), self.multiprocessors()), 1, 1),
            block_dim: (STREAM_BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let (len, scale) = (n as u64, 1.0f32);
        let mut l = self.stream.launch_builder(&f);
        l.arg(buffer).arg(&seed).arg(&scale).arg(&len);
        // SAFETY: `ex_uniform(T* out, u64 seed, float scale, u64 n)` of this storage's build
        // (`double*` for FP64), and `buffer` holds at least `n` elements of that storage.
        self.call("cuLaunchKernel", unsafe { l.launch(cfg) })?;
        Ok(())
    }

    /// `n` elements of `storage` set to `v` on the device (zeroed, then `ex_fill` of that
    /// storage where `v` is not 0).
    fn filled(&mut self, storage: Element, n: usize, v: f32) -> Result<CudaSlice<u8>> {
        let buffer: CudaSlice<u8> = self.zeros(n.max(1) * storage.bytes())?;
        if v != 0.0 {
            let f = self.kernel("ex_fill", storage)?;
            let cfg = LaunchConfig {
                grid_dim: (stream_grid(n.max(1), self.multiprocessors()), 1, 1),
                block_dim: (STREAM_BLOCK, 1, 1),
                shared_mem_bytes: 0,
            };
            let len = n as u64;
            let mut l = self.stream.launch_builder(&f);
            l.arg(&buffer).arg(&v).arg(&len);
            // SAFETY: `ex_fill(T* out, float v, unsigned long long n)` of this storage's
            // build, and `buffer` holds `n` elements of that storage.
            self.call("cuLaunchKernel", unsafe { l.launch(cfg) })?;
        }
        Ok(buffer)
    }

    fn check_memory(&self, what: &str, bytes: usize) -> Result<()> {
        let (free, _) = self.call("cuMemGetInfo", self.ctx.mem_get_info())?;
        if bytes > free {
            return Err(Error::invalid(
                what,
                format!(
                    "needs {:.2} GB of device memory; cuda:{} has {:.2} GB free",
                    bytes as f64 / 1e9,
                    self.ordinal,
                    free as f64 / 1e9
                ),
            ));
        }
        Ok(())
    }
}

/// A CUDA version number as text: the driver API's `major * 1000 + minor * 10`, or
/// cuBLAS's `major * 10000 + minor * 100 + patch` (six digits since cuBLAS 11).
fn version_string(v: i32) -> String {
    if v >= 100_000 {
        format!("{}.{}.{}", v / 10_000, (v / 100) % 100, v % 100)
    } else {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    }
}

fn gpu_env(ordinal: usize, ctx: &Arc<CudaContext>) -> Result<GpuEnv> {
    use driver::sys::CUdevice_attribute as A;
    let name = call(ordinal, "cuDeviceGetName", ctx.name())?;
    let (major, minor) = call(ordinal, "cuDeviceGetAttribute", ctx.compute_capability())?;
    let memory = call(ordinal, "cuDeviceTotalMem", ctx.total_mem())?;
    let khz = |a: A| {
        ctx.attribute(a)
            .ok()
            .filter(|&v| v > 0)
            .map(|v| (v / 1000) as u32)
    };
    let mut driver_version = 0;
    // SAFETY: the driver library is loaded (probed in `open`) and initialised (the context
    // exists); `driver_version` is a valid place for one int.
    let status = unsafe { driver::sys::cuDriverGetVersion(&mut driver_version) };
    call(ordinal, "cuDriverGetVersion", status.result())?;
    Ok(GpuEnv {
        ordinal,
        name,
        compute_capability: format!("{major}.{minor}"),
        memory_bytes: memory as u64,
        sm_clock_mhz: khz(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
        memory_clock_mhz: khz(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
        l2_bytes: ctx
            .attribute(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)
            .ok()
            .filter(|&v| v > 0)
            .map(|v| v as u64),
        driver_version: version_string(driver_version),
        libraries: BTreeMap::new(),
    })
}

/// Two CUDA events around work issued on a stream: the device's own clock.
///
/// The events and the calls between them queue behind a spin kernel that holds the GPU
/// longer than the host takes to issue them, so the GPU runs them back to back and the
/// events time the GPU's work alone. Without it a library call whose host side takes
/// longer than its kernels (cuDNN's legacy convolution API on an H100: 40-200 us a call
/// where PyTorch's runs the same convolution in 16-30 us) measures the host.
struct Timer {
    ordinal: usize,
    stream: Arc<CudaStream>,
    start: CudaEvent,
    end: CudaEvent,
    spin: CudaFunction,
    /// The longest the host took to issue one call so far.
    issue: Cell<Duration>,
}

impl Timer {
    /// Issues `run` `batch` times between the events and waits: the GPU time it took. A
    /// sample whose calls took the host longer to issue than the spin held the GPU is taken
    /// again behind a longer spin (twice the issue time; at most 200 ms).
    fn time(&self, batch: u32, mut run: impl FnMut() -> Result<()>) -> Result<Duration> {
        let o = self.ordinal;
        loop {
            let spin = (2 * self.issue.get() * batch).clamp(SPIN_RANGE.0, SPIN_RANGE.1);
            let ns = spin.as_nanos() as u64;
            let mut l = self.stream.launch_builder(&self.spin);
            l.arg(&ns);
            // SAFETY: `ridgeline_spin` takes one unsigned long long, the argument pushed; it
            // touches no memory.
            call(o, "cuLaunchKernel", unsafe {
                l.launch(LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (1, 1, 1),
                    shared_mem_bytes: 0,
                })
            })?;
            let issued = Instant::now();
            call(o, "cuEventRecord", self.start.record(&self.stream))?;
            for _ in 0..batch {
                run()?;
            }
            call(o, "cuEventRecord", self.end.record(&self.stream))?;
            let took = issued.elapsed();
            self.issue.set(self.issue.get().max(took / batch.max(1)));
            call(o, "cuEventSynchronize", self.end.synchronize())?;
            if took < spin || spin >= SPIN_RANGE.1 {
                let ms = call(o, "cuEventElapsedTime", self.start.elapsed_ms(&self.end))?;
                return Ok(Duration::from_secs_f64(f64::from(ms) / 1e3));
            }
        }
    }
}

/// Times each algorithm cuDNN's find kept for `pass` ([`CudnnPass::candidates`]) behind
/// `timer`'s spin and selects the fastest. Find ranks by its own clock, which reads the host
/// when a call takes longer to issue than to run: on an H200 it ranked cuDNN's implicit GEMM
/// (220 us) over the precomputed one (9 us) for ResNet-50's 1 x 1 convolutions in fp16,
/// 2026-11-26. Returns each candidate's median seconds in find's order (`INFINITY` for one
/// that failed to run), empty where find kept one; fails only when none ran.
fn fastest_algorithm(
    timer: &Timer,
    handle: &Handle,
    pass: &mut CudnnPass,
    buffers: Buffers,
    failed: impl Fn(CudnnFailure) -> Error,
) -> Result<Vec<(String, f64)>> {
    let n = pass.candidates();
    if n < 2 {
        return Ok(Vec::new());
    }
    // One warm-up call, then two samples of at least half a millisecond each.
    let protocol = Protocol {
        min_samples: 2,
        max_samples: 2,
        ..Protocol::quick()
    };
    let mut times = Vec::with_capacity(n);
    let mut failure = None;
    for i in 0..n {
        pass.select(i);
        let p = &*pass;
        let timed = protocol.measure_timed(EVENT_RESOLUTION, |batch| {
            timer.time(batch, || p.run(handle, buffers).map_err(&failed))
        });
        let seconds = match timed {
            Ok(samples) => median(&samples),
            Err(e) => {
                failure = Some(e);
                f64::INFINITY
            }
        };
        times.push((pass.algorithm().to_owned(), seconds));
    }
    let best = (0..n).min_by(|&a, &b| times[a].1.total_cmp(&times[b].1));
    match (best, failure) {
        (Some(b), _) if times[b].1.is_finite() => {
            pass.select(b);
            Ok(times)
        }
        (_, Some(e)) => Err(e),
        _ => Ok(times),
    }
}

/// What a convolution pass runs, into a record's `extra` as `{prefix}algorithm` and
/// `{prefix}workspace_bytes`, and, where find's candidates were timed again
/// ([`fastest_algorithm`]), what each took as `{prefix}retimed`.
fn chosen_notes(
    prefix: &str,
    run: &CudnnPass,
    retimed: &[(String, f64)],
    notes: &mut std::collections::BTreeMap<String, Value>,
) {
    notes.insert(format!("{prefix}algorithm"), json!(run.algorithm()));
    notes.insert(
        format!("{prefix}workspace_bytes"),
        json!(run.workspace_bytes()),
    );
    if !retimed.is_empty() {
        notes.insert(
            format!("{prefix}retimed"),
            retimed
                .iter()
                .map(|(name, s)| json!({"algorithm": name, "time_s": s}))
                .collect(),
        );
    }
}

/// The kernel sources of activation storage `storage` with their kernels' names: FP32
/// adds STREAM's (FP64 arrays) to the element-wise, shaped, spatial and executor sources.
fn kernel_sources<'a>(
    storage: Element,
    stream_names: &'a [&'static str],
) -> Vec<(String, &'a [&'static str])> {
    let typed = [
        (OPS_SOURCE, OP_KERNELS.as_slice()),
        (SHAPED_SOURCE, SHAPED_KERNELS.as_slice()),
        (SPATIAL_SOURCE, SPATIAL_KERNELS.as_slice()),
        (EXEC_SOURCE, EXEC_KERNELS.as_slice()),
    ];
    let mut out: Vec<(String, &[&'static str])> = typed
        .into_iter()
        .filter_map(|(source, names)| Some((typed_source(source, storage)?, names)))
        .collect();
    if storage == Element::F32 {
        out.push((STREAM_SOURCE.to_owned(), stream_names));
    }
    out
}

/// Three GEMM operands in device memory, typed by the plan's elements.
enum Operands {
    F64(CudaSlice<f64>, CudaSlice<f64>, CudaSlice<f64>),
    F32(CudaSlice<f32>, CudaSlice<f32>, CudaSlice<f32>),
    Half(CudaSlice<u16>, CudaSlice<u16>, CudaSlice<u16>),
}

fn data_type(e: Element) -> cublas::sys::cudaDataType {
    use cublas::sys::cudaDataType as T;
    match e {
        Element::F64 => T::CUDA_R_64F,
        Element::F32 => T::CUDA_R_32F,
        Element::F16 => T::CUDA_R_16F,
        Element::Bf16 => T::CUDA_R_16BF,
    }
}

fn compute_type(c: Compute) -> cublas::sys::cublasComputeType_t {
    use cublas::sys::cublasComputeType_t as C;
    match c {
        Compute::F64 => C::CUBLAS_COMPUTE_64F,
        Compute::F32 => C::CUBLAS_COMPUTE_32F,
        Compute::F32FastTf32 => C::CUBLAS_COMPUTE_32F_FAST_TF32,
    }
}

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
    cases: &[super::NcclAllreduce],
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
