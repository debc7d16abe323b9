//! The CUDA device as the backend holds it: its context, stream, libraries and kernels,
//! the event timer, and the helpers its micro-kernels and the executor share.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::{
    self, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};
use cudarc::nvrtc;
use ridgeline_model::graph::Op;
use serde_json::{Value, json};

use super::super::cudnn::{
    Buffers, CudnnFailure, Handle, Layer as CudnnLayer, OpBuffers, Pass as CudnnPass,
};
use super::super::layers::{EXEC_KERNELS, EXEC_SOURCE};
use super::super::plan::{
    Compute, Element, OP_KERNELS, OPS_SOURCE, PoolGeometry, SHAPED_KERNELS, SHAPED_SOURCE,
    SPATIAL_KERNELS, SPATIAL_SOURCE, STREAM_BLOCK, STREAM_SOURCE, ShapedLaunch, SpatialLaunch,
    elements, op_storage, shaped_float_pointers, stream_function, stream_grid, typed_source,
};
use crate::backend::{Backend, OpCase, Pass, StreamKernel};
use crate::error::{Error, Result};
use crate::protocol::{Protocol, median};
use crate::record::GpuEnv;

/// Resolution assumed for CUDA events (the driver documents about half a microsecond).
pub(super) const EVENT_RESOLUTION: Duration = Duration::from_nanos(500);

/// A kernel of one thread that spins for `ns` nanoseconds of the GPU's global timer: the
/// calls a [`Timer`] times queue behind it.
pub(super) const SPIN_SOURCE: &str = r#"
extern "C" __global__ void ridgeline_spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
"#;

/// The spin kernel's name.
pub(super) const SPIN_KERNEL: &str = "ridgeline_spin";

/// The shortest and longest spins a [`Timer`] queues its calls behind.
pub(super) const SPIN_RANGE: (Duration, Duration) =
    (Duration::from_micros(20), Duration::from_millis(200));

/// The scalar of STREAM's scale and triad.
pub(super) const STREAM_Q: f64 = 3.0;

/// A GPU, its stream, and the libraries loaded so far.
///
/// Fields drop in order: the library handles before the stream they were bound to.
pub struct CudaBackend {
    pub(super) ordinal: usize,
    pub(super) gpu: GpuEnv,
    pub(super) cudnn: Option<Handle>,
    pub(super) blas: Option<CudaBlas>,
    pub(super) kernels: Vec<(Element, &'static str, CudaFunction)>,
    pub(super) spin: Option<CudaFunction>,
    pub(super) notes: std::collections::BTreeMap<String, Value>,
    pub(super) stream: Arc<CudaStream>,
    pub(super) ctx: Arc<CudaContext>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ordinal)
            .field("gpu", &self.gpu)
            .finish_non_exhaustive()
    }
}

pub(super) fn unavailable(ordinal: usize, reason: impl Into<String>) -> Error {
    Error::BackendUnavailable {
        backend: format!("cuda:{ordinal}"),
        reason: reason.into(),
    }
}

/// Maps a failed CUDA call to an error naming it.
pub(super) fn call<T, E: std::fmt::Debug>(device: usize, name: &str, r: Result<T, E>) -> Result<T> {
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

    pub(super) fn call<T, E: std::fmt::Debug>(&self, name: &str, r: Result<T, E>) -> Result<T> {
        call(self.ordinal, name, r)
    }

    /// cuBLAS on this backend's stream, loaded on first use.
    pub(super) fn blas(&mut self) -> Result<&CudaBlas> {
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
    pub(super) fn cudnn(&mut self) -> Result<&Handle> {
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
    pub(super) fn kernel(&mut self, name: &str, storage: Element) -> Result<CudaFunction> {
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
    pub(super) fn shaped_op(
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
    pub(super) fn spatial_op(
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
    pub(super) fn cudnn_op(
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
    pub(super) fn multiprocessors(&self) -> u32 {
        self.ctx
            .attribute(driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(1, |v| v.max(1) as u32)
    }

    /// Fails, naming the library, when NVRTC cannot be loaded.
    pub(super) fn nvrtc_present(&self) -> Result<()> {
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
    pub(super) fn timer(&mut self) -> Result<Timer> {
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
    pub(super) fn zeros<T: driver::DeviceRepr + driver::ValidAsZeroBits>(
        &self,
        len: usize,
    ) -> Result<CudaSlice<T>> {
        self.call("cuMemAllocAsync", self.stream.alloc_zeros::<T>(len.max(1)))
    }

    /// Fails with a clear message when `bytes` exceed the GPU's free memory.
    /// Fills `n` elements of `storage` in `buffer` with data uniform in [-1, 1) (a hash of
    /// the index and `seed`; `ex_uniform`, or `ex_uniform_f64` for FP64).
    pub(super) fn randomize<T>(
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
    pub(super) fn filled(&mut self, storage: Element, n: usize, v: f32) -> Result<CudaSlice<u8>> {
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

    pub(super) fn check_memory(&self, what: &str, bytes: usize) -> Result<()> {
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
pub(super) fn version_string(v: i32) -> String {
    if v >= 100_000 {
        format!("{}.{}.{}", v / 10_000, (v / 100) % 100, v % 100)
    } else {
        format!("{}.{}", v / 1000, (v % 1000) / 10)
    }
}

pub(super) fn gpu_env(ordinal: usize, ctx: &Arc<CudaContext>) -> Result<GpuEnv> {
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
pub(super) struct Timer {
    pub(super) ordinal: usize,
    pub(super) stream: Arc<CudaStream>,
    pub(super) start: CudaEvent,
    pub(super) end: CudaEvent,
    pub(super) spin: CudaFunction,
    /// The longest the host took to issue one call so far.
    pub(super) issue: Cell<Duration>,
}

impl Timer {
    /// Issues `run` `batch` times between the events and waits: the GPU time it took. A
    /// sample whose calls took the host longer to issue than the spin held the GPU is taken
    /// again behind a longer spin (twice the issue time; at most 200 ms).
    pub(super) fn time(&self, batch: u32, mut run: impl FnMut() -> Result<()>) -> Result<Duration> {
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
pub(super) fn fastest_algorithm(
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
pub(super) fn chosen_notes(
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
pub(super) fn kernel_sources<'a>(
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
pub(super) enum Operands {
    F64(CudaSlice<f64>, CudaSlice<f64>, CudaSlice<f64>),
    F32(CudaSlice<f32>, CudaSlice<f32>, CudaSlice<f32>),
    Half(CudaSlice<u16>, CudaSlice<u16>, CudaSlice<u16>),
}

pub(super) fn data_type(e: Element) -> cublas::sys::cudaDataType {
    use cublas::sys::cudaDataType as T;
    match e {
        Element::F64 => T::CUDA_R_64F,
        Element::F32 => T::CUDA_R_32F,
        Element::F16 => T::CUDA_R_16F,
        Element::Bf16 => T::CUDA_R_16BF,
    }
}

pub(super) fn compute_type(c: Compute) -> cublas::sys::cublasComputeType_t {
    use cublas::sys::cublasComputeType_t as C;
    match c {
        Compute::F64 => C::CUBLAS_COMPUTE_64F,
        Compute::F32 => C::CUBLAS_COMPUTE_32F,
        Compute::F32FastTf32 => C::CUBLAS_COMPUTE_32F_FAST_TF32,
    }
}
