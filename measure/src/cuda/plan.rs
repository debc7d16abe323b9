//! The GPU-independent half of the CUDA backend: which data and compute types a GEMM of each
//! number format uses, the STREAM kernels' CUDA C source, and their launch geometry. Plain
//! data, so it is checked in every build.

use crate::backend::{Format, StreamKernel};

/// Element type of a GEMM operand in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Element {
    /// IEEE double (`CUDA_R_64F`).
    F64,
    /// IEEE single (`CUDA_R_32F`).
    F32,
    /// IEEE half (`CUDA_R_16F`).
    F16,
    /// bfloat16 (`CUDA_R_16BF`).
    Bf16,
}

impl Element {
    /// Bytes per element.
    pub(crate) const fn bytes(self) -> usize {
        match self {
            Element::F64 => 8,
            Element::F32 => 4,
            Element::F16 | Element::Bf16 => 2,
        }
    }
}

/// How cuBLAS accumulates (`cublasComputeType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Compute {
    /// `CUBLAS_COMPUTE_64F`.
    F64,
    /// `CUBLAS_COMPUTE_32F`: FP32 arithmetic (tensor cores for 16-bit inputs).
    F32,
    /// `CUBLAS_COMPUTE_32F_FAST_TF32`: FP32 storage, TF32 tensor-core arithmetic.
    F32FastTf32,
}

/// The `cublasGemmEx` types of a number format: A and B, C, and the accumulation. Mixed
/// precision keeps A, B and C in 16 bits and accumulates in FP32, as frameworks' fp16 and
/// bf16 training does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmPlan {
    /// A and B.
    pub(crate) inputs: Element,
    /// C.
    pub(crate) output: Element,
    /// Accumulation.
    pub(crate) compute: Compute,
}

impl GemmPlan {
    /// The plan of `format`.
    pub(crate) const fn of(format: Format) -> GemmPlan {
        match format {
            Format::Fp64 => GemmPlan {
                inputs: Element::F64,
                output: Element::F64,
                compute: Compute::F64,
            },
            Format::Fp32 => GemmPlan {
                inputs: Element::F32,
                output: Element::F32,
                compute: Compute::F32,
            },
            Format::Tf32 => GemmPlan {
                inputs: Element::F32,
                output: Element::F32,
                compute: Compute::F32FastTf32,
            },
            Format::Fp16 => GemmPlan {
                inputs: Element::F16,
                output: Element::F16,
                compute: Compute::F32,
            },
            Format::Bf16 => GemmPlan {
                inputs: Element::Bf16,
                output: Element::Bf16,
                compute: Compute::F32,
            },
        }
    }

    /// Device bytes of an `m x n x k` GEMM's three operands.
    pub(crate) const fn bytes(self, m: usize, n: usize, k: usize) -> usize {
        (m * k + k * n) * self.inputs.bytes() + m * n * self.output.bytes()
    }
}

/// The STREAM kernels in CUDA C, compiled at run time with NVRTC: grid-stride loops over
/// `double` arrays, named `stream_<kernel>`, arguments in the order the backend passes them
/// (`a`, `b`, `c`, `q`, `n`).
pub(crate) const STREAM_SOURCE: &str = r#"
extern "C" __global__ void stream_copy(const double* a, double* b, double* c, double q, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        c[i] = a[i];
    }
}
extern "C" __global__ void stream_scale(const double* a, double* b, double* c, double q, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        b[i] = q * c[i];
    }
}
extern "C" __global__ void stream_add(const double* a, double* b, double* c, double q, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        c[i] = a[i] + b[i];
    }
}
extern "C" __global__ void stream_triad(double* a, const double* b, const double* c, double q, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        a[i] = b[i] + q * c[i];
    }
}
"#;

/// The kernel's function name in [`STREAM_SOURCE`].
pub(crate) const fn stream_function(kernel: StreamKernel) -> &'static str {
    match kernel {
        StreamKernel::Copy => "stream_copy",
        StreamKernel::Scale => "stream_scale",
        StreamKernel::Add => "stream_add",
        StreamKernel::Triad => "stream_triad",
    }
}

/// Threads per block of the STREAM kernels.
pub(crate) const STREAM_BLOCK: u32 = 256;

/// Blocks per multiprocessor the STREAM grid is capped at (the loop strides over the rest).
pub(crate) const STREAM_BLOCKS_PER_SM: u32 = 32;

/// The STREAM launch grid for `elements` on a GPU of `sms` multiprocessors: one thread per
/// element up to `sms x STREAM_BLOCKS_PER_SM` blocks of [`STREAM_BLOCK`] threads.
pub(crate) fn stream_grid(elements: usize, sms: u32) -> u32 {
    let needed = elements.div_ceil(STREAM_BLOCK as usize);
    let cap = (sms.max(1) as usize) * STREAM_BLOCKS_PER_SM as usize;
    needed.clamp(1, cap) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_plans_accumulate_in_fp32_or_wider() {
        assert_eq!(GemmPlan::of(Format::Fp64).compute, Compute::F64);
        assert_eq!(GemmPlan::of(Format::Tf32).compute, Compute::F32FastTf32);
        for f in [Format::Fp32, Format::Fp16, Format::Bf16] {
            assert_eq!(GemmPlan::of(f).compute, Compute::F32, "{f:?}");
        }
        // Operand bytes match the format's element size.
        for f in [
            Format::Fp64,
            Format::Fp32,
            Format::Tf32,
            Format::Fp16,
            Format::Bf16,
        ] {
            let p = GemmPlan::of(f);
            assert_eq!(p.inputs.bytes() as u64, f.bytes(), "{f:?}");
            assert_eq!(p.bytes(2, 3, 4), (8 + 12 + 6) * p.inputs.bytes());
        }
    }

    #[test]
    fn stream_source_defines_every_kernel_with_the_arguments_passed() {
        for k in StreamKernel::ALL {
            let name = stream_function(k);
            let decl = format!("__global__ void {name}(");
            assert_eq!(STREAM_SOURCE.matches(&decl).count(), 1, "{name}");
            let args = STREAM_SOURCE
                .split(&decl)
                .nth(1)
                .and_then(|s| s.split(')').next())
                .unwrap();
            let names: Vec<&str> = args
                .split(',')
                .map(|a| a.trim().rsplit([' ', '*']).next().unwrap())
                .collect();
            assert_eq!(names, ["a", "b", "c", "q", "n"], "{name}");
        }
        assert_eq!(
            STREAM_SOURCE.matches('{').count(),
            STREAM_SOURCE.matches('}').count()
        );
    }

    #[test]
    fn stream_grid_covers_the_arrays_and_caps_at_the_machine() {
        assert_eq!(stream_grid(1, 132), 1);
        assert_eq!(stream_grid(256, 132), 1);
        assert_eq!(stream_grid(257, 132), 2);
        assert_eq!(stream_grid(1 << 30, 132), 132 * STREAM_BLOCKS_PER_SM);
        assert_eq!(stream_grid(0, 0), 1);
    }
}
