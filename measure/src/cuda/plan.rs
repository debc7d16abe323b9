//! The GPU-independent half of the CUDA backend: which data and compute types a GEMM of each
//! number format uses, the STREAM kernels' CUDA C source, and their launch geometry. Plain
//! data, so it is checked in every build.

use ridgeline_model::graph::Op;

use crate::backend::{ConvCase, Format, Layout, Pass, StreamKernel};

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

/// cuDNN's math type (`cudnnMathType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConvMath {
    /// `CUDNN_FMA_MATH`: FMA kernels only (no TF32 on FP32 data).
    Fma,
    /// `CUDNN_DEFAULT_MATH`: tensor cores allowed, TF32 for FP32 data on Ampere and later.
    Default,
    /// `CUDNN_TENSOR_OP_MATH`: tensor cores for 16-bit data.
    TensorOp,
}

impl ConvMath {
    /// Name in records (`extra.cudnn_math`).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            ConvMath::Fma => "fma",
            ConvMath::Default => "default",
            ConvMath::TensorOp => "tensor-op",
        }
    }
}

/// How cuDNN runs a convolution in a number format: the tensors' data type, the
/// convolution's compute type and the math type. FP16 and BF16 keep tensors in 16 bits and
/// accumulate in FP32 ("pseudo-half", what mixed-precision training runs); TF32 is FP32
/// data with tensor-core math allowed; FP32 is restricted to FMA kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvPlan {
    /// Tensors and filters.
    pub(crate) data: Element,
    /// The convolution's accumulation.
    pub(crate) compute: Element,
    /// Math type.
    pub(crate) math: ConvMath,
}

impl ConvPlan {
    /// The plan of `format`, or why cuDNN does not run it here (fp64: the scaling factors
    /// of a double convolution are doubles, which the backend does not pass).
    pub(crate) fn of(format: Format) -> Result<ConvPlan, String> {
        let (data, math) = match format {
            Format::Fp32 => (Element::F32, ConvMath::Fma),
            Format::Tf32 => (Element::F32, ConvMath::Default),
            Format::Fp16 => (Element::F16, ConvMath::TensorOp),
            Format::Bf16 => (Element::Bf16, ConvMath::TensorOp),
            Format::Fp64 => {
                return Err(
                    "convolutions run in fp32, tf32, fp16 or bf16 on the GPU, not fp64".into(),
                );
            }
        };
        Ok(ConvPlan {
            data,
            compute: Element::F32,
            math,
        })
    }
}

/// What every kernel source but STREAM's is compiled after: the storage type `T` of
/// activation tensors and their gradients, and `acc(p, v)`, an atomic `*p += v`. `T` is
/// `float`, or a 16-bit struct (`h16`: IEEE half, `b16`: bfloat16) that reads as a float
/// and rounds to nearest even when a float is assigned to it; arithmetic is FP32 in every
/// storage, as in frameworks' mixed-precision kernels. Parameters, their gradients and the
/// losses stay `float`. No CUDA header is needed (NVRTC's own `cuda_fp16.h` is not
/// assumed): half conversions are the PTX `cvt` instructions, bfloat16's are bit shifts.
const STORAGE_PRELUDE: &str = r#"
struct h16 {
    unsigned short v;
    __device__ __forceinline__ operator float() const { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v)); return f; }
    __device__ __forceinline__ h16& operator=(float f) { asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f)); return *this; }
    __device__ __forceinline__ h16& operator+=(float f) { return *this = (float)*this + f; }
};
struct b16 {
    unsigned short v;
    __device__ __forceinline__ operator float() const { return __uint_as_float(((unsigned int)v) << 16); }
    __device__ __forceinline__ b16& operator=(float f) {
        unsigned int u = __float_as_uint(f);
        v = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u)
                                            : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        return *this;
    }
    __device__ __forceinline__ b16& operator+=(float f) { return *this = (float)*this + f; }
};
__device__ __forceinline__ void acc(float* p, float v) { atomicAdd(p, v); }
template <typename S> __device__ __forceinline__ void acc16(S* p, float v) {
    unsigned int* word = (unsigned int*)((unsigned long long)p & ~3ull);
    unsigned int shift = ((unsigned long long)p & 2ull) ? 16u : 0u;
    unsigned int old = *word, seen;
    do {
        seen = old;
        S now, next;
        now.v = (unsigned short)(seen >> shift);
        next = (float)now + v;
        old = atomicCAS(word, seen, (seen & ~(0xffffu << shift)) | ((unsigned int)next.v << shift));
    } while (old != seen);
}
__device__ __forceinline__ void acc(h16* p, float v) { acc16(p, v); }
__device__ __forceinline__ void acc(b16* p, float v) { acc16(p, v); }
"#;

/// `source` (one of the kernel sources but STREAM's) for activations stored as `storage`:
/// [`STORAGE_PRELUDE`], the type `T`, then the source. FP64 storage is not a kernel
/// storage (`None`).
pub(crate) fn typed_source(source: &str, storage: Element) -> Option<String> {
    let t = match storage {
        Element::F32 => "float",
        Element::F16 => "h16",
        Element::Bf16 => "b16",
        Element::F64 => return None,
    };
    Some(format!("{STORAGE_PRELUDE}typedef {t} T;\n{source}"))
}

/// The activation storage an op case's `format` runs in on the GPU, or why it does not run.
pub(crate) fn op_storage(format: Format) -> Result<Element, String> {
    match format {
        Format::Fp32 => Ok(Element::F32),
        Format::Fp16 => Ok(Element::F16),
        Format::Bf16 => Ok(Element::Bf16),
        Format::Tf32 | Format::Fp64 => Err(format!(
            "ops run in fp32, fp16 or bf16, not {} (tf32 is a matrix format of FP32 data)",
            format.name()
        )),
    }
}

/// Which of a shaped kernel's six pointers (`x, x2, dy, out, out2, out3`) are `float`
/// whatever the activation storage: the affine parameters and their gradients, the losses
/// and their gradients ([`SHAPED_SOURCE`]); the others are `T`.
pub(crate) fn shaped_float_pointers(kernel: &str) -> [bool; 6] {
    match kernel {
        "op_affine_fwd" => [false, true, true, false, true, true],
        "op_affine_bwd" => [false, true, false, false, true, true],
        "op_mse_fwd" | "op_softmax_ce_fwd" => [false, false, false, true, false, false],
        "op_mse_bwd" | "op_softmax_ce_bwd" => [false, false, true, false, false, false],
        _ => [false; 6],
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

/// The element-wise ops' kernels in CUDA C (NVRTC; compiled through [`typed_source`], every
/// tensor of activation storage `T`), forward and backward, every one with
/// the same parameters `(x, y, dy, out, out2, p, seed, n)`: inputs `x` (and a second input
/// or the forward output `y`), the output gradient `dy`, outputs `out` (and `out2`, the
/// second input's gradient of `add` and `mul`), the op's parameter `p` (leaky ReLU's slope,
/// the scale, the shift, the exponent, dropout's rate) and, for dropout, a `seed` for the
/// mask (a hash of the element index: no mask tensor). GELU is its tanh form, as the CPU
/// executor computes it. Grid-stride loops over `n`.
pub(crate) const OPS_SOURCE: &str = r#"
typedef unsigned long long u64;
#define LOOP for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
__device__ __forceinline__ float keep(u64 i, u64 seed, float rate) {
    u64 h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
    return ((h >> 40) * (1.0f / 16777216.0f)) >= rate ? 1.0f / (1.0f - rate) : 0.0f;
}
extern "C" __global__ void op_relu_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = x[i] > 0.0f ? x[i] : 0.0f; } }
extern "C" __global__ void op_relu_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = x[i] > 0.0f ? dy[i] : 0.0f; } }
extern "C" __global__ void op_leaky_relu_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = x[i] > 0.0f ? x[i] : p * x[i]; } }
extern "C" __global__ void op_leaky_relu_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = x[i] > 0.0f ? dy[i] : p * dy[i]; } }
extern "C" __global__ void op_tanh_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = tanhf(x[i]); } }
extern "C" __global__ void op_tanh_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = dy[i] * (1.0f - y[i] * y[i]); } }
extern "C" __global__ void op_scale_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = p * x[i]; } }
extern "C" __global__ void op_scale_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = p * dy[i]; } }
extern "C" __global__ void op_add_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = x[i] + y[i]; } }
extern "C" __global__ void op_add_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = dy[i]; out2[i] = dy[i]; } }
extern "C" __global__ void op_dropout_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = x[i] * keep(i, seed, p); } }
extern "C" __global__ void op_dropout_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = dy[i] * keep(i, seed, p); } }
#define GELU_C 0.7978845608f
extern "C" __global__ void op_gelu_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { float v = (float)x[i]; out[i] = 0.5f * v * (1.0f + tanhf(GELU_C * (v + 0.044715f * v * v * v))); } }
extern "C" __global__ void op_gelu_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) {
    LOOP {
        float v = (float)x[i];
        float t = tanhf(GELU_C * (v + 0.044715f * v * v * v));
        out[i] = (float)dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * 0.044715f * v * v));
    }
}
extern "C" __global__ void op_silu_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { float v = (float)x[i]; out[i] = v / (1.0f + expf(-v)); } }
extern "C" __global__ void op_silu_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { float v = (float)x[i]; float s = 1.0f / (1.0f + expf(-v)); out[i] = (float)dy[i] * s * (1.0f + v * (1.0f - s)); } }
extern "C" __global__ void op_shift_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = (float)x[i] + p; } }
extern "C" __global__ void op_shift_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = dy[i]; } }
extern "C" __global__ void op_pow_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = powf((float)x[i], p); } }
extern "C" __global__ void op_pow_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = (float)dy[i] * p * powf((float)x[i], p - 1.0f); } }
extern "C" __global__ void op_mul_fwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = (float)x[i] * (float)y[i]; } }
extern "C" __global__ void op_mul_bwd(const T* x, const T* y, const T* dy, T* out, T* out2, float p, u64 seed, u64 n) { LOOP { out[i] = (float)dy[i] * (float)y[i]; out2[i] = (float)dy[i] * (float)x[i]; } }
"#;

/// The shaped ops' kernels in CUDA C (NVRTC, through [`typed_source`]: activations and
/// their gradients `T`; the affine parameters, their gradients and the losses `float`): ops
/// whose elements relate through the layout
/// `[n, a, b]` (samples, channels or classes, positions). Every one has the parameters
/// `(x, x2, dy, out, out2, out3, a, b, n)`, `n` being the threads' index range:
///
/// - channel affine: forward `out = x * x2[c] + dy[c]` (scale in `x2`, bias in `dy`);
///   backward `out = dy * x2[c]`, `out2[c] += dy * x`, `out3[c] += dy` (atomics);
/// - concat of two inputs along channels (`a` channels each): forward writes `x` and `x2`
///   into `out`, backward splits `dy` into `out` and `out2`; `n` is one input's elements;
/// - flatten: a copy, both ways;
/// - mean squared error against the target `x2`: forward accumulates `(x - x2)^2 / (a b)`
///   per sample into `out[s]`, backward `out = 2 (x - x2) / (a b) dy[s]`;
/// - softmax cross-entropy over `a` classes (`b` = 1), label `s mod a`: one thread per
///   sample (`n` = samples); forward the loss into `out[s]`, backward
///   `out = dy[s] (softmax - onehot)`.
pub(crate) const SHAPED_SOURCE: &str = r#"
typedef unsigned long long u64;
#define LOOP for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
extern "C" __global__ void op_affine_fwd(const T* x, const float* x2, const float* dy, T* out, float* out2, float* out3, u64 a, u64 b, u64 n) { LOOP { u64 c = (i / b) % a; out[i] = x[i] * x2[c] + dy[c]; } }
extern "C" __global__ void op_affine_bwd(const T* x, const float* x2, const T* dy, T* out, float* out2, float* out3, u64 a, u64 b, u64 n) { LOOP { u64 c = (i / b) % a; out[i] = dy[i] * x2[c]; atomicAdd(&out2[c], dy[i] * x[i]); atomicAdd(&out3[c], dy[i]); } }
extern "C" __global__ void op_concat_fwd(const T* x, const T* x2, const T* dy, T* out, T* out2, T* out3, u64 a, u64 b, u64 n) { LOOP { u64 s = i / (a * b), j = i % (a * b); out[s * 2 * a * b + j] = x[i]; out[s * 2 * a * b + a * b + j] = x2[i]; } }
extern "C" __global__ void op_concat_bwd(const T* x, const T* x2, const T* dy, T* out, T* out2, T* out3, u64 a, u64 b, u64 n) { LOOP { u64 s = i / (a * b), j = i % (a * b); out[i] = dy[s * 2 * a * b + j]; out2[i] = dy[s * 2 * a * b + a * b + j]; } }
extern "C" __global__ void op_flatten_fwd(const T* x, const T* x2, const T* dy, T* out, T* out2, T* out3, u64 a, u64 b, u64 n) { LOOP { out[i] = x[i]; } }
extern "C" __global__ void op_flatten_bwd(const T* x, const T* x2, const T* dy, T* out, T* out2, T* out3, u64 a, u64 b, u64 n) { LOOP { out[i] = dy[i]; } }
extern "C" __global__ void op_mse_fwd(const T* x, const T* x2, const T* dy, float* out, T* out2, T* out3, u64 a, u64 b, u64 n) { LOOP { float d = x[i] - x2[i]; atomicAdd(&out[i / (a * b)], d * d / (float)(a * b)); } }
extern "C" __global__ void op_mse_bwd(const T* x, const T* x2, const float* dy, T* out, T* out2, T* out3, u64 a, u64 b, u64 n) { LOOP { out[i] = 2.0f * (x[i] - x2[i]) / (float)(a * b) * dy[i / (a * b)]; } }
extern "C" __global__ void op_softmax_ce_fwd(const T* x, const T* x2, const T* dy, float* out, T* out2, T* out3, u64 a, u64 b, u64 n) {
    LOOP {
        const T* row = x + i * a;
        float m = row[0];
        for (u64 k = 1; k < a; k++) m = fmaxf(m, row[k]);
        float sum = 0.0f;
        for (u64 k = 0; k < a; k++) sum += expf(row[k] - m);
        out[i] = logf(sum) + m - row[i % a];
    }
}
extern "C" __global__ void op_softmax_ce_bwd(const T* x, const T* x2, const float* dy, T* out, T* out2, T* out3, u64 a, u64 b, u64 n) {
    LOOP {
        const T* row = x + i * a;
        float m = row[0];
        for (u64 k = 1; k < a; k++) m = fmaxf(m, row[k]);
        float sum = 0.0f;
        for (u64 k = 0; k < a; k++) sum += expf(row[k] - m);
        for (u64 k = 0; k < a; k++) out[i * a + k] = dy[i] * (expf(row[k] - m) / sum - (k == i % a ? 1.0f : 0.0f));
    }
}
"#;

/// Tile and nearest-neighbour upsampling in CUDA C (NVRTC, through [`typed_source`], tensors
/// `T`): each output element of a
/// `[planes, o0, o1, o2]` output (planes = samples x channels, unused spatial dimensions 1)
/// reads the input element `[plane, i0, i1, i2]` at `o mod I` (tile, `k` = repeats) or
/// `o / k` (upsample, `k` = factors). Backward adds into each input element the gradients of
/// its copies, gathered (`copy_of`): a warp per input element for tile (a global feature
/// tiled over a whole image has tens of thousands of copies; the atomics an output thread
/// each took 890 ms for DeepCAM's bottleneck at batch 2 in fp16 on an H200), a thread per
/// input element for upsampling. Parameters `(x, dy, out, i0, i1, i2, k0, k1, k2, n)`, `n`
/// the output's elements; the launch covers [`SpatialLaunch::threads`].
pub(crate) const SPATIAL_SOURCE: &str = r#"
typedef unsigned long long u64;
#define LOOP for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
__device__ __forceinline__ u64 source(u64 i, u64 i0, u64 i1, u64 i2, u64 k0, u64 k1, u64 k2, bool tile) {
    u64 o0 = i0 * k0, o1 = i1 * k1, o2 = i2 * k2;
    u64 c2 = i % o2, c1 = (i / o2) % o1, c0 = (i / (o2 * o1)) % o0, plane = i / (o2 * o1 * o0);
    u64 s0 = tile ? c0 % i0 : c0 / k0, s1 = tile ? c1 % i1 : c1 / k1, s2 = tile ? c2 % i2 : c2 / k2;
    return ((plane * i0 + s0) * i1 + s1) * i2 + s2;
}
extern "C" __global__ void op_tile_fwd(const T* x, const T* dy, T* out, u64 i0, u64 i1, u64 i2, u64 k0, u64 k1, u64 k2, u64 n) { LOOP { out[i] = x[source(i, i0, i1, i2, k0, k1, k2, true)]; } }
extern "C" __global__ void op_upsample_fwd(const T* x, const T* dy, T* out, u64 i0, u64 i1, u64 i2, u64 k0, u64 k1, u64 k2, u64 n) { LOOP { out[i] = x[source(i, i0, i1, i2, k0, k1, k2, false)]; } }
__device__ __forceinline__ u64 copy_of(u64 j, u64 r, u64 i0, u64 i1, u64 i2, u64 k0, u64 k1, u64 k2, bool tile) {
    u64 s2 = j % i2, s1 = (j / i2) % i1, s0 = (j / (i2 * i1)) % i0, plane = j / (i2 * i1 * i0);
    u64 r2 = r % k2, r1 = (r / k2) % k1, r0 = r / (k2 * k1);
    u64 c0 = tile ? s0 + r0 * i0 : s0 * k0 + r0, c1 = tile ? s1 + r1 * i1 : s1 * k1 + r1, c2 = tile ? s2 + r2 * i2 : s2 * k2 + r2;
    return ((plane * i0 * k0 + c0) * i1 * k1 + c1) * i2 * k2 + c2;
}
__device__ __forceinline__ float warp_sum(float v) { for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s); return v; }
extern "C" __global__ void op_tile_bwd(const T* x, const T* dy, T* out, u64 i0, u64 i1, u64 i2, u64 k0, u64 k1, u64 k2, u64 n) {
    u64 reps = k0 * k1 * k2, inputs = n / reps;
    unsigned lane = threadIdx.x % 32;
    for (u64 j = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32; j < inputs; j += (u64)gridDim.x * blockDim.x / 32) {
        float s = 0.0f;
        for (u64 r = lane; r < reps; r += 32) s += (float)dy[copy_of(j, r, i0, i1, i2, k0, k1, k2, true)];
        s = warp_sum(s);
        if (lane == 0) out[j] += s;
    }
}
extern "C" __global__ void op_upsample_bwd(const T* x, const T* dy, T* out, u64 i0, u64 i1, u64 i2, u64 k0, u64 k1, u64 k2, u64 n) {
    u64 reps = k0 * k1 * k2, inputs = n / reps;
    for (u64 j = blockIdx.x * (u64)blockDim.x + threadIdx.x; j < inputs; j += (u64)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (u64 r = 0; r < reps; r++) s += (float)dy[copy_of(j, r, i0, i1, i2, k0, k1, k2, false)];
        out[j] += s;
    }
}
"#;

/// Every kernel name of [`SPATIAL_SOURCE`].
pub(crate) const SPATIAL_KERNELS: [&str; 4] = [
    "op_tile_fwd",
    "op_tile_bwd",
    "op_upsample_fwd",
    "op_upsample_bwd",
];

/// A tile or upsample launch: kernel, input spatial extents and repeats or factors (three
/// each, unused ones 1), the input's elements and the output's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SpatialLaunch {
    /// Kernel name in [`SPATIAL_SOURCE`].
    pub(crate) kernel: &'static str,
    /// Input extents.
    pub(crate) input: [u64; 3],
    /// Repeats (tile) or factors (upsample).
    pub(crate) k: [u64; 3],
    /// Input elements.
    pub(crate) in_elements: usize,
    /// Output elements.
    pub(crate) out_elements: usize,
}

impl SpatialLaunch {
    /// The threads to launch: one per output element forward; backward one per input
    /// element (upsample) or a warp per input element (tile).
    pub(crate) fn threads(&self) -> usize {
        match self.kernel {
            "op_tile_bwd" => 32 * self.in_elements,
            "op_upsample_bwd" => self.in_elements,
            _ => self.out_elements,
        }
    }
}

/// The tile or upsample kernel of `op`'s `pass` on a per-sample `input` `[c, spatial...]`
/// (up to three spatial dimensions) at `batch`.
pub(crate) fn spatial_kernel(
    op: &Op,
    pass: Pass,
    input: &[usize],
    batch: usize,
) -> Option<Result<SpatialLaunch, String>> {
    let fwd = pass == Pass::Forward;
    let (kernel, k) = match op {
        Op::Tile { repeats } => (if fwd { "op_tile_fwd" } else { "op_tile_bwd" }, repeats),
        Op::Upsample { factor } => (
            if fwd {
                "op_upsample_fwd"
            } else {
                "op_upsample_bwd"
            },
            factor,
        ),
        _ => return None,
    };
    let spatial = input.get(1..).unwrap_or_default();
    if spatial.len() > 3 || k.len() != spatial.len() || k.contains(&0) {
        return Some(Err(format!(
            "needs one repeat or factor of at least 1 per spatial dimension (at most 3), got {k:?} for {spatial:?}"
        )));
    }
    let mut ext = [1u64; 3];
    let mut ks = [1u64; 3];
    for (i, (&d, &f)) in spatial.iter().zip(k.iter()).enumerate() {
        ext[i] = d as u64;
        ks[i] = f as u64;
    }
    let planes = batch.max(1) * input.first().copied().unwrap_or(1);
    let in_elements = planes * spatial.iter().product::<usize>();
    let out_elements = in_elements * k.iter().product::<usize>();
    Some(Ok(SpatialLaunch {
        kernel,
        input: ext,
        k: ks,
        in_elements,
        out_elements,
    }))
}

/// Every kernel name of [`SHAPED_SOURCE`].
pub(crate) const SHAPED_KERNELS: [&str; 10] = [
    "op_affine_fwd",
    "op_affine_bwd",
    "op_concat_fwd",
    "op_concat_bwd",
    "op_flatten_fwd",
    "op_flatten_bwd",
    "op_mse_fwd",
    "op_mse_bwd",
    "op_softmax_ce_fwd",
    "op_softmax_ce_bwd",
];

/// A shaped op's launch: its kernel, the layout `[samples, a, b]` of its (first) input, and
/// the thread range `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShapedLaunch {
    /// Kernel name in [`SHAPED_SOURCE`].
    pub(crate) kernel: &'static str,
    /// Channels (classes).
    pub(crate) a: usize,
    /// Positions per channel.
    pub(crate) b: usize,
    /// Threads' index range.
    pub(crate) n: usize,
}

/// The shaped kernel of `op`'s `pass` on a per-sample `input` `[c, spatial...]` at `batch`.
pub(crate) fn shaped_kernel(
    op: &Op,
    pass: Pass,
    input: &[usize],
    batch: usize,
) -> Option<ShapedLaunch> {
    let a = input.first().copied().unwrap_or(1).max(1);
    let b: usize = input
        .get(1..)
        .unwrap_or_default()
        .iter()
        .product::<usize>()
        .max(1);
    let samples = batch.max(1);
    let fwd = pass == Pass::Forward;
    let (kernel, n) = match op {
        Op::ChannelAffine => (
            if fwd {
                "op_affine_fwd"
            } else {
                "op_affine_bwd"
            },
            samples * a * b,
        ),
        Op::Concat => (
            if fwd {
                "op_concat_fwd"
            } else {
                "op_concat_bwd"
            },
            samples * a * b,
        ),
        Op::Flatten => (
            if fwd {
                "op_flatten_fwd"
            } else {
                "op_flatten_bwd"
            },
            samples * a * b,
        ),
        Op::MseLoss => (
            if fwd { "op_mse_fwd" } else { "op_mse_bwd" },
            samples * a * b,
        ),
        Op::SoftmaxCrossEntropy => (
            if fwd {
                "op_softmax_ce_fwd"
            } else {
                "op_softmax_ce_bwd"
            },
            samples,
        ),
        _ => return None,
    };
    // Softmax runs over all of a sample's elements as its classes.
    let (a, b) = if matches!(op, Op::SoftmaxCrossEntropy) {
        (a * b, 1)
    } else {
        (a, b)
    };
    Some(ShapedLaunch { kernel, a, b, n })
}

/// The kernel of `op`'s `pass` in [`OPS_SOURCE`] and its parameter, when the GPU runs the op.
pub(crate) fn elementwise_kernel(op: &Op, pass: Pass) -> Option<(&'static str, f32)> {
    let (name, p) = match op {
        Op::Relu => ("relu", 0.0),
        Op::LeakyRelu { alpha } => ("leaky_relu", *alpha as f32),
        Op::Tanh => ("tanh", 0.0),
        Op::Scale { factor } => ("scale", *factor as f32),
        Op::Add => ("add", 0.0),
        Op::Dropout { rate } => ("dropout", *rate as f32),
        Op::Gelu => ("gelu", 0.0),
        Op::Silu => ("silu", 0.0),
        Op::Shift { offset } => ("shift", *offset as f32),
        Op::Pow { exponent } => ("pow", *exponent as f32),
        Op::Mul => ("mul", 0.0),
        _ => return None,
    };
    let f = match (name, pass) {
        ("relu", Pass::Forward) => "op_relu_fwd",
        ("relu", Pass::Backward) => "op_relu_bwd",
        ("leaky_relu", Pass::Forward) => "op_leaky_relu_fwd",
        ("leaky_relu", Pass::Backward) => "op_leaky_relu_bwd",
        ("tanh", Pass::Forward) => "op_tanh_fwd",
        ("tanh", Pass::Backward) => "op_tanh_bwd",
        ("scale", Pass::Forward) => "op_scale_fwd",
        ("scale", Pass::Backward) => "op_scale_bwd",
        ("add", Pass::Forward) => "op_add_fwd",
        ("add", Pass::Backward) => "op_add_bwd",
        ("dropout", Pass::Forward) => "op_dropout_fwd",
        ("dropout", Pass::Backward) => "op_dropout_bwd",
        ("gelu", Pass::Forward) => "op_gelu_fwd",
        ("gelu", Pass::Backward) => "op_gelu_bwd",
        ("silu", Pass::Forward) => "op_silu_fwd",
        ("silu", Pass::Backward) => "op_silu_bwd",
        ("shift", Pass::Forward) => "op_shift_fwd",
        ("shift", Pass::Backward) => "op_shift_bwd",
        ("pow", Pass::Forward) => "op_pow_fwd",
        ("pow", Pass::Backward) => "op_pow_bwd",
        ("mul", Pass::Forward) => "op_mul_fwd",
        _ => "op_mul_bwd",
    };
    Some((f, p))
}

/// Every kernel name of [`OPS_SOURCE`].
pub(crate) const OP_KERNELS: [&str; 22] = [
    "op_relu_fwd",
    "op_relu_bwd",
    "op_leaky_relu_fwd",
    "op_leaky_relu_bwd",
    "op_tanh_fwd",
    "op_tanh_bwd",
    "op_scale_fwd",
    "op_scale_bwd",
    "op_add_fwd",
    "op_add_bwd",
    "op_dropout_fwd",
    "op_dropout_bwd",
    "op_gelu_fwd",
    "op_gelu_bwd",
    "op_silu_fwd",
    "op_silu_bwd",
    "op_shift_fwd",
    "op_shift_bwd",
    "op_pow_fwd",
    "op_pow_bwd",
    "op_mul_fwd",
    "op_mul_bwd",
];

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

/// A convolution as cuDNN's N-d descriptors take it (NCHW / NCDHW, fully packed).
///
/// cuDNN pads symmetrically; where a layer pads unevenly (`[before, after]` differ, as
/// "same" padding with an even kernel or a stride does), the descriptors pad both sides by
/// the smaller amount and the input tensor carries the difference as extra rows, so the
/// output, and the work, are the layer's. Tensors have at least four dimensions: a 1-d
/// convolution gets a unit second spatial dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConvGeometry {
    /// Input `[n, c_in, spatial...]`, extra padding included.
    pub(crate) x: Vec<i32>,
    /// Filter `[c_out, c_in / groups, kernel...]`.
    pub(crate) w: Vec<i32>,
    /// Output `[n, c_out, spatial...]`.
    pub(crate) y: Vec<i32>,
    /// Bias `[1, c_out, 1, ...]`.
    pub(crate) bias: Vec<i32>,
    /// Symmetric padding per spatial dimension.
    pub(crate) pads: Vec<i32>,
    /// Strides.
    pub(crate) strides: Vec<i32>,
    /// Dilations.
    pub(crate) dilations: Vec<i32>,
    /// Groups.
    pub(crate) groups: i32,
    /// Whether the tensors and the filter are channels-last (NHWC, NDHWC; filters KRSC)
    /// rather than packed channels-first.
    pub(crate) channels_last: bool,
}

impl ConvGeometry {
    /// The descriptors of `case`, or what makes it impossible.
    pub(crate) fn of(case: &ConvCase) -> Result<ConvGeometry, String> {
        let d = case.input.len();
        let same = [
            case.kernel.len(),
            case.stride.len(),
            case.padding.len(),
            case.dilation.len(),
        ];
        if d == 0 || d > 3 || same.iter().any(|&l| l != d) {
            return Err(format!(
                "needs 1 to 3 spatial dimensions, the same number in input, kernel, stride, \
                 padding and dilation (got {d}, {same:?})"
            ));
        }
        if case.groups == 0
            || !case.c_in.is_multiple_of(case.groups)
            || !case.c_out.is_multiple_of(case.groups)
        {
            return Err(format!(
                "{} groups do not divide {} input and {} output channels",
                case.groups, case.c_in, case.c_out
            ));
        }
        let int = |v: usize, what: &str| {
            i32::try_from(v).map_err(|_| format!("{what} {v} is beyond cuDNN's 32-bit sizes"))
        };
        let (mut xs, mut ws, mut ys) = (vec![], vec![], vec![]);
        let (mut pads, mut strides, mut dilations) = (vec![], vec![], vec![]);
        for i in 0..d {
            let [before, after] = case.padding[i];
            let (k, s, dil) = (case.kernel[i], case.stride[i], case.dilation[i]);
            if k == 0 || s == 0 || dil == 0 {
                return Err("kernel, stride and dilation must be at least 1".into());
            }
            let padded = case.input[i] + before + after;
            let span = dil * (k - 1) + 1;
            if padded < span {
                return Err(format!(
                    "dimension {i}: the dilated kernel ({span}) is larger than the padded \
                     input ({padded})"
                ));
            }
            let pad = before.min(after);
            xs.push(int(case.input[i] + before.max(after) - pad, "input")?);
            ws.push(int(k, "kernel")?);
            ys.push(int((padded - span) / s + 1, "output")?);
            pads.push(int(pad, "padding")?);
            strides.push(int(s, "stride")?);
            dilations.push(int(dil, "dilation")?);
        }
        if d == 1 {
            for v in [&mut xs, &mut ws, &mut ys, &mut strides, &mut dilations] {
                v.push(1);
            }
            pads.push(0);
        }
        let n = int(case.batch.max(1), "batch")?;
        let (c_in, c_out) = (int(case.c_in, "channels")?, int(case.c_out, "channels")?);
        let groups = int(case.groups, "groups")?;
        let spatial = xs.len();
        Ok(ConvGeometry {
            x: [vec![n, c_in], xs].concat(),
            w: [vec![c_out, c_in / groups], ws].concat(),
            y: [vec![n, c_out], ys].concat(),
            bias: [vec![1, c_out], vec![1; spatial]].concat(),
            pads,
            strides,
            dilations,
            groups,
            channels_last: case.layout == Layout::ChannelsLast,
        })
    }

    /// Strides of a tensor of `dims` `[n, c, spatial...]` in this geometry's layout.
    pub(crate) fn strides(&self, dims: &[i32]) -> Vec<i32> {
        if self.channels_last {
            channels_last_strides(dims)
        } else {
            packed_strides(dims)
        }
    }
}

/// A pooling layer as cuDNN's N-d pooling descriptor takes it (uneven padding folded into
/// the input, as for convolutions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolGeometry {
    /// Max (else average, padding counted as the frameworks' default does).
    pub(crate) max: bool,
    /// Input `[n, c, spatial...]`.
    pub(crate) x: Vec<i32>,
    /// Output `[n, c, spatial...]`.
    pub(crate) y: Vec<i32>,
    /// Window per spatial dimension.
    pub(crate) window: Vec<i32>,
    /// Symmetric padding.
    pub(crate) pads: Vec<i32>,
    /// Strides.
    pub(crate) strides: Vec<i32>,
}

impl PoolGeometry {
    /// The pooling of `op` (with padding resolved, as in a graph) on a per-sample `input`
    /// `[c, spatial...]` giving `output`, at `batch`; `None` for ops that are not pooling.
    pub(crate) fn of(
        op: &Op,
        input: &[usize],
        output: &[usize],
        batch: usize,
    ) -> Option<Result<PoolGeometry, String>> {
        let int = |v: usize| i32::try_from(v).map_err(|_| format!("{v} is beyond 32 bits"));
        let spatial = input.get(1..).unwrap_or_default();
        let (max, window, strides, pads): (bool, Vec<usize>, Vec<usize>, Vec<[usize; 2]>) = match op
        {
            Op::MaxPool(p) | Op::AvgPool(p) => {
                let pads = match &p.padding {
                    ridgeline_model::graph::Padding::Explicit(pairs) => pairs.to_vec(),
                    _ => vec![[0, 0]; spatial.len()],
                };
                (
                    matches!(op, Op::MaxPool(_)),
                    p.kernel.to_vec(),
                    p.stride.to_vec(),
                    pads,
                )
            }
            Op::GlobalAvgPool => (
                false,
                spatial.to_vec(),
                spatial.to_vec(),
                vec![[0, 0]; spatial.len()],
            ),
            _ => return None,
        };
        Some((|| {
            if window.len() != spatial.len()
                || strides.len() != spatial.len()
                || pads.len() != spatial.len()
            {
                return Err(
                    "window, stride and padding need one entry per spatial dimension".into(),
                );
            }
            let mut x = vec![int(batch.max(1))?, int(input[0])?];
            for (i, &d) in spatial.iter().enumerate() {
                let [before, after] = pads[i];
                x.push(int(d + before.max(after) - before.min(after))?);
            }
            let mut y = vec![int(batch.max(1))?, int(output[0])?];
            for &d in output.get(1..).unwrap_or_default() {
                y.push(int(d)?);
            }
            Ok(PoolGeometry {
                max,
                x,
                y,
                window: window.iter().map(|&v| int(v)).collect::<Result<_, _>>()?,
                pads: pads
                    .iter()
                    .map(|p| int(p[0].min(p[1])))
                    .collect::<Result<_, _>>()?,
                strides: strides.iter().map(|&v| int(v)).collect::<Result<_, _>>()?,
            })
        })())
    }
}

/// Strides of a fully packed tensor of `dims` (last dimension contiguous).
pub(crate) fn packed_strides(dims: &[i32]) -> Vec<i32> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

/// Strides of a channels-last tensor of logical dims `[n, c, spatial...]` (NHWC, NDHWC):
/// channels contiguous, then the spatial dimensions, last fastest, then the samples.
pub(crate) fn channels_last_strides(dims: &[i32]) -> Vec<i32> {
    let mut strides = vec![1; dims.len()];
    if dims.len() < 3 {
        return packed_strides(dims);
    }
    let c = dims[1];
    let mut stride = c;
    for i in (2..dims.len()).rev() {
        strides[i] = stride;
        stride *= dims[i];
    }
    strides[0] = stride;
    strides
}

/// Elements of a tensor of `dims`.
pub(crate) fn elements(dims: &[i32]) -> usize {
    dims.iter().map(|&d| d.max(0) as usize).product()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The parameter declarations of kernel `name` in `source` (`const T* x`, `u64 n`),
    /// checking it is defined once.
    fn declarations<'s>(source: &'s str, name: &str) -> Vec<&'s str> {
        let decl = format!("__global__ void {name}(");
        assert_eq!(source.matches(&decl).count(), 1, "{name}");
        source
            .split(&decl)
            .nth(1)
            .and_then(|s| s.split(')').next())
            .unwrap()
            .split(',')
            .map(str::trim)
            .collect()
    }

    /// The parameter names of kernel `name` in `source`, checking it is defined once.
    pub(crate) fn parameters<'s>(source: &'s str, name: &str) -> Vec<&'s str> {
        declarations(source, name)
            .into_iter()
            .map(|a| a.rsplit([' ', '*']).next().unwrap())
            .collect()
    }

    fn case(input: Vec<usize>, kernel: Vec<usize>, stride: usize, padding: [usize; 2]) -> ConvCase {
        let d = input.len();
        ConvCase {
            label: "t".into(),
            batch: 2,
            c_in: 4,
            input,
            c_out: 8,
            kernel,
            stride: vec![stride; d],
            padding: vec![padding; d],
            dilation: vec![1; d],
            groups: 1,
            bias: true,
            format: Format::Fp32,
            layout: Layout::ChannelsFirst,
        }
    }

    #[test]
    fn convolution_formats_map_to_cudnn_types() {
        let plan = |f| ConvPlan::of(f).unwrap();
        assert_eq!(
            plan(Format::Fp32),
            ConvPlan {
                data: Element::F32,
                compute: Element::F32,
                math: ConvMath::Fma
            }
        );
        assert_eq!(plan(Format::Tf32).math, ConvMath::Default);
        for f in [Format::Fp16, Format::Bf16] {
            let p = plan(f);
            assert_eq!(
                (p.compute, p.math),
                (Element::F32, ConvMath::TensorOp),
                "{f:?}"
            );
            assert_eq!(p.data.bytes(), 2);
        }
        assert_eq!(plan(Format::Bf16).data, Element::Bf16);
        assert!(ConvPlan::of(Format::Fp64).unwrap_err().contains("not fp64"));
    }

    #[test]
    fn conv_geometry_of_a_3d_convolution() {
        let g = ConvGeometry::of(&case(vec![16, 16, 16], vec![3, 3, 3], 1, [1, 1])).unwrap();
        assert_eq!(g.x, [2, 4, 16, 16, 16]);
        assert_eq!(g.w, [8, 4, 3, 3, 3]);
        assert_eq!(g.y, [2, 8, 16, 16, 16]);
        assert_eq!(g.bias, [1, 8, 1, 1, 1]);
        assert_eq!(
            (g.pads, g.strides, g.dilations),
            (vec![1; 3], vec![1; 3], vec![1; 3])
        );
        assert_eq!(packed_strides(&g.x), [16384, 4096, 256, 16, 1]);
        assert_eq!(elements(&g.y), 2 * 8 * 4096);
    }

    #[test]
    fn uneven_padding_moves_into_the_input() {
        // A stride-2 "same" convolution of a 224 input with a 7x7 kernel pads [2, 3].
        let g = ConvGeometry::of(&case(vec![224, 224], vec![7, 7], 2, [2, 3])).unwrap();
        assert_eq!(g.pads, [2, 2]);
        assert_eq!(g.x, [2, 4, 225, 225]);
        // (224 + 5 - 7) / 2 + 1 = 112, as the layer's output.
        assert_eq!(g.y, [2, 8, 112, 112]);
        // cuDNN's own formula on the descriptors gives the same output.
        let out = (225 + 2 * 2 - 7) / 2 + 1;
        assert_eq!(out, 112);
    }

    #[test]
    fn grouped_dilated_and_1d_convolutions() {
        let mut c = case(vec![6, 9], vec![3, 3], 1, [18, 18]);
        c.dilation = vec![18, 18];
        c.groups = 4;
        let g = ConvGeometry::of(&c).unwrap();
        assert_eq!(g.w, [8, 1, 3, 3]);
        assert_eq!(g.y, [2, 8, 6, 9]);
        assert_eq!(g.groups, 4);
        let g = ConvGeometry::of(&case(vec![100], vec![5], 1, [2, 2])).unwrap();
        assert_eq!(
            (g.x.len(), g.w.len(), g.y.len(), g.pads.len()),
            (4, 4, 4, 2)
        );
        assert_eq!(g.y, [2, 8, 100, 1]);
        let mut bad = case(vec![8, 8], vec![3, 3], 1, [0, 0]);
        bad.groups = 3;
        assert!(ConvGeometry::of(&bad).unwrap_err().contains("groups"));
        let small = case(vec![2, 2], vec![5, 5], 1, [0, 0]);
        assert!(
            ConvGeometry::of(&small)
                .unwrap_err()
                .contains("larger than the padded")
        );
    }

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
            let names = parameters(STREAM_SOURCE, name);
            assert_eq!(names, ["a", "b", "c", "q", "n"], "{name}");
        }
        assert_eq!(
            STREAM_SOURCE.matches('{').count(),
            STREAM_SOURCE.matches('}').count()
        );
    }

    #[test]
    fn op_kernels_are_defined_once_with_the_common_parameters() {
        for name in OP_KERNELS {
            let names = parameters(OPS_SOURCE, name);
            assert_eq!(
                names,
                ["x", "y", "dy", "out", "out2", "p", "seed", "n"],
                "{name}"
            );
        }
        assert_eq!(
            OPS_SOURCE.matches('{').count(),
            OPS_SOURCE.matches('}').count()
        );
        // Every op the GPU runs maps to a defined kernel in both passes; the rest do not.
        for op in [
            Op::Relu,
            Op::LeakyRelu { alpha: 0.1 },
            Op::Tanh,
            Op::Scale { factor: 2.0 },
            Op::Add,
            Op::Dropout { rate: 0.5 },
            Op::Gelu,
            Op::Silu,
            Op::Shift { offset: 1.0 },
            Op::Pow { exponent: 3.0 },
            Op::Mul,
        ] {
            for pass in [Pass::Forward, Pass::Backward] {
                let (f, _) = elementwise_kernel(&op, pass).unwrap();
                assert!(OP_KERNELS.contains(&f), "{f}");
                assert!(f.ends_with(if pass == Pass::Forward { "fwd" } else { "bwd" }));
            }
        }
        assert_eq!(
            elementwise_kernel(&Op::Scale { factor: 0.5 }, Pass::Forward)
                .unwrap()
                .1,
            0.5
        );
        assert!(elementwise_kernel(&Op::BatchNorm, Pass::Forward).is_none());
    }

    #[test]
    fn pool_geometry_folds_uneven_padding_and_covers_global_pooling() {
        use ridgeline_model::graph::{Padding, Pool};
        let mut pool = Pool::new(&[3, 3]);
        pool.stride = [2, 2].as_slice().into();
        pool.padding = Padding::Explicit([[0, 1], [0, 1]].as_slice().into());
        let g = PoolGeometry::of(
            &Op::MaxPool(Box::new(pool)),
            &[64, 112, 112],
            &[64, 56, 56],
            8,
        )
        .unwrap()
        .unwrap();
        assert!(g.max);
        assert_eq!(g.x, [8, 64, 113, 113]);
        assert_eq!(g.y, [8, 64, 56, 56]);
        assert_eq!(
            (g.window, g.pads, g.strides),
            (vec![3, 3], vec![0, 0], vec![2, 2])
        );
        // cuDNN's output size on the folded input: (113 - 3) / 2 + 1 = 56.
        let g = PoolGeometry::of(&Op::GlobalAvgPool, &[2048, 7, 7], &[2048, 1, 1], 4)
            .unwrap()
            .unwrap();
        assert!(!g.max);
        assert_eq!((g.window, g.y), (vec![7, 7], vec![4, 2048, 1, 1]));
        assert!(PoolGeometry::of(&Op::Relu, &[1, 2, 2], &[1, 2, 2], 1).is_none());
    }

    /// The pointer types of kernel `name` in `source`: `float` or `T` (storage).
    fn pointer_types<'s>(source: &'s str, name: &str) -> Vec<&'s str> {
        declarations(source, name)
            .into_iter()
            .filter(|a| a.contains('*'))
            .map(|a| {
                a.trim_start_matches("const ")
                    .split(['*', ' '])
                    .next()
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn channels_last_strides_put_channels_innermost() {
        // NHWC: [n=2, c=3, h=4, w=5] lives as n, h, w, c.
        assert_eq!(channels_last_strides(&[2, 3, 4, 5]), [60, 1, 15, 3]);
        // NDHWC.
        assert_eq!(channels_last_strides(&[1, 4, 2, 3, 5]), [120, 1, 60, 20, 4]);
        assert_eq!(packed_strides(&[2, 3, 4, 5]), [60, 20, 5, 1]);
        // Every element has one offset, inside the tensor: the strides are a permutation of
        // a packed layout.
        let dims = [2, 3, 4, 5];
        let st = channels_last_strides(&dims);
        let mut seen = [false; 120];
        for n in 0..2 {
            for c in 0..3 {
                for h in 0..4 {
                    for w in 0..5 {
                        let o = (n * st[0] + c * st[1] + h * st[2] + w * st[3]) as usize;
                        assert!(!seen[o]);
                        seen[o] = true;
                    }
                }
            }
        }
        assert!(seen.iter().all(|&v| v));
        let mut c = case(vec![8, 8], vec![3, 3], 1, [1, 1]);
        assert!(!ConvGeometry::of(&c).unwrap().channels_last);
        c.layout = Layout::ChannelsLast;
        let g = ConvGeometry::of(&c).unwrap();
        assert!(g.channels_last);
        assert_eq!(g.strides(&g.x), channels_last_strides(&g.x));
        assert_eq!("ndhwc".parse::<Layout>(), Ok(Layout::ChannelsLast));
        assert!(
            "nwhc"
                .parse::<Layout>()
                .unwrap_err()
                .contains("channels-last")
        );
    }

    #[test]
    fn shaped_kernels_say_which_pointers_are_fp32_in_every_storage() {
        for name in SHAPED_KERNELS {
            let types = pointer_types(SHAPED_SOURCE, name);
            let float: Vec<bool> = types.iter().map(|t| *t == "float").collect();
            assert_eq!(float, shaped_float_pointers(name), "{name}: {types:?}");
            assert!(
                types.iter().all(|t| *t == "float" || *t == "T"),
                "{types:?}"
            );
        }
        for name in OP_KERNELS {
            assert!(
                pointer_types(OPS_SOURCE, name).iter().all(|t| *t == "T"),
                "{name}"
            );
        }
        for name in SPATIAL_KERNELS {
            assert!(
                pointer_types(SPATIAL_SOURCE, name)
                    .iter()
                    .all(|t| *t == "T"),
                "{name}"
            );
        }
        assert_eq!(op_storage(Format::Fp16), Ok(Element::F16));
        assert_eq!(op_storage(Format::Bf16), Ok(Element::Bf16));
        assert!(op_storage(Format::Tf32).unwrap_err().contains("tf32"));
        let source = typed_source(OPS_SOURCE, Element::Bf16).unwrap();
        assert!(source.contains("typedef b16 T;") && source.ends_with(OPS_SOURCE));
        assert!(typed_source(OPS_SOURCE, Element::F64).is_none());
    }

    #[test]
    fn shaped_kernels_are_defined_once_and_launched_over_the_right_range() {
        for name in SHAPED_KERNELS {
            let names = parameters(SHAPED_SOURCE, name);
            assert_eq!(
                names,
                ["x", "x2", "dy", "out", "out2", "out3", "a", "b", "n"],
                "{name}"
            );
        }
        assert_eq!(
            SHAPED_SOURCE.matches('{').count(),
            SHAPED_SOURCE.matches('}').count()
        );
        let l = shaped_kernel(&Op::ChannelAffine, Pass::Backward, &[64, 8, 8], 4).unwrap();
        assert_eq!(
            (l.kernel, l.a, l.b, l.n),
            ("op_affine_bwd", 64, 64, 4 * 64 * 64)
        );
        let l = shaped_kernel(&Op::SoftmaxCrossEntropy, Pass::Forward, &[1000], 32).unwrap();
        assert_eq!((l.a, l.b, l.n), (1000, 1, 32), "one thread per sample");
        for op in [
            Op::ChannelAffine,
            Op::Concat,
            Op::Flatten,
            Op::MseLoss,
            Op::SoftmaxCrossEntropy,
        ] {
            for pass in [Pass::Forward, Pass::Backward] {
                let l = shaped_kernel(&op, pass, &[3, 4], 2).unwrap();
                assert!(SHAPED_KERNELS.contains(&l.kernel), "{}", l.kernel);
            }
        }
        assert!(shaped_kernel(&Op::Relu, Pass::Forward, &[3], 1).is_none());
    }

    /// The CUDA index map, restated: tile reads `o mod I`, upsample `o / k`.
    /// `copy_of` of the source: output index of input `j`'s copy `r`.
    fn copy_of(j: u64, r: u64, l: &SpatialLaunch, tile: bool) -> u64 {
        let [i0, i1, i2] = l.input;
        let [k0, k1, k2] = l.k;
        let (s2, s1, s0, plane) = (
            j % i2,
            (j / i2) % i1,
            (j / (i2 * i1)) % i0,
            j / (i2 * i1 * i0),
        );
        let (r2, r1, r0) = (r % k2, (r / k2) % k1, r / (k2 * k1));
        let (c0, c1, c2) = if tile {
            (s0 + r0 * i0, s1 + r1 * i1, s2 + r2 * i2)
        } else {
            (s0 * k0 + r0, s1 * k1 + r1, s2 * k2 + r2)
        };
        ((plane * i0 * k0 + c0) * i1 * k1 + c1) * i2 * k2 + c2
    }

    fn source(i: u64, l: &SpatialLaunch, tile: bool) -> u64 {
        let [i0, i1, i2] = l.input;
        let [k0, k1, k2] = l.k;
        let (o0, o1, o2) = (i0 * k0, i1 * k1, i2 * k2);
        let (c2, c1, c0, plane) = (
            i % o2,
            (i / o2) % o1,
            (i / (o2 * o1)) % o0,
            i / (o2 * o1 * o0),
        );
        let (s0, s1, s2) = if tile {
            (c0 % i0, c1 % i1, c2 % i2)
        } else {
            (c0 / k0, c1 / k1, c2 / k2)
        };
        ((plane * i0 + s0) * i1 + s1) * i2 + s2
    }

    #[test]
    fn tile_and_upsample_index_every_input_element_evenly() {
        for name in SPATIAL_KERNELS {
            let names = parameters(SPATIAL_SOURCE, name);
            let want = ["x", "dy", "out", "i0", "i1", "i2", "k0", "k1", "k2", "n"];
            assert_eq!(names, want, "{name}");
        }
        let tile = Op::Tile {
            repeats: [2, 3].as_slice().into(),
        };
        let l = spatial_kernel(&tile, Pass::Forward, &[2, 3, 4], 2)
            .unwrap()
            .unwrap();
        assert_eq!((l.input, l.k), ([3, 4, 1], [2, 3, 1]));
        assert_eq!((l.in_elements, l.out_elements), (48, 288));
        let up = Op::Upsample {
            factor: [2, 2].as_slice().into(),
        };
        let u = spatial_kernel(&up, Pass::Backward, &[2, 3, 4], 2)
            .unwrap()
            .unwrap();
        assert_eq!(u.kernel, "op_upsample_bwd");
        for (l, tile) in [(&l, true), (&u, false)] {
            // Every input element is read by exactly (out / in) outputs, and in range.
            let mut hits = vec![0usize; l.in_elements];
            for i in 0..l.out_elements as u64 {
                hits[source(i, l, tile) as usize] += 1;
            }
            let each = l.out_elements / l.in_elements;
            assert!(hits.iter().all(|&h| h == each), "{hits:?}");
        }
        // Backward gathers: input j's copies r are the outputs whose source is j, each
        // output exactly once.
        let t = spatial_kernel(&tile, Pass::Backward, &[2, 3, 4], 2)
            .unwrap()
            .unwrap();
        for (l, tile) in [(&t, true), (&u, false)] {
            let reps = (l.out_elements / l.in_elements) as u64;
            let mut seen = vec![0usize; l.out_elements];
            for j in 0..l.in_elements as u64 {
                for r in 0..reps {
                    let o = copy_of(j, r, l, tile);
                    assert_eq!(source(o, l, tile), j, "{} j {j} r {r}", l.kernel);
                    seen[o as usize] += 1;
                }
            }
            assert!(seen.iter().all(|&h| h == 1), "{}", l.kernel);
        }
        assert_eq!((t.threads(), u.threads(), l.threads()), (32 * 48, 48, 288));
        assert!(SPATIAL_SOURCE.contains("__device__ __forceinline__ u64 copy_of("));
        // Upsampling by 2 maps output (0, 1) and (1, 0) of a plane to input (0, 0).
        assert_eq!(source(1, &u, false), 0);
        assert_eq!(source(8, &u, false), 0);
        assert!(spatial_kernel(&Op::Relu, Pass::Forward, &[1, 2], 1).is_none());
        let bad = Op::Tile {
            repeats: [2].as_slice().into(),
        };
        assert!(
            spatial_kernel(&bad, Pass::Forward, &[1, 2, 2], 1)
                .unwrap()
                .is_err()
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
