//! The CUDA backend (STYLE.md rule 6), through cudarc with the CUDA libraries loaded at run
//! time: it builds without a CUDA toolkit, and where no driver, GPU or library is present
//! [`CudaBackend::open`] returns [`Error::BackendUnavailable`](crate::Error::BackendUnavailable)
//! naming what is missing. Without the `cuda` feature the disabled twin says the build lacks
//! the backend; call sites carry no `cfg` either way.
//!
//! What runs on a GPU so far: GEMM through cuBLAS (`cublasGemmEx`: fp64, fp32, tf32, and
//! fp16 / bf16 with fp32 accumulation), N-d convolution forward, backward-data and
//! backward-filter through cuDNN (FP32, the fastest algorithm by cuDNN's find API, recorded
//! in the record's `extra`), host-device copies (pinned and pageable) and the STREAM kernels
//! (compiled with NVRTC), each timed with
//! CUDA events under the run protocol, with the device, driver and library versions in
//! every record. The other ops and the full-workload executor are not implemented on the
//! GPU yet and say so. **None of it has been run on a
//! GPU yet**: the code is written against the CUDA APIs and checked here only where no GPU
//! is needed (type choices, kernel sources, launch geometry, the errors without a driver).

// Used by the enabled backend; built and tested in every build.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod plan;

#[cfg(not(feature = "cuda"))]
mod disabled;
#[cfg(not(feature = "cuda"))]
pub use disabled::CudaBackend;

#[cfg(feature = "cuda")]
mod cudnn;
#[cfg(feature = "cuda")]
mod enabled;
#[cfg(feature = "cuda")]
pub use enabled::CudaBackend;
