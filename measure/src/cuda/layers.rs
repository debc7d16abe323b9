//! The GPU executor's plan of a layer graph: what each layer runs on the GPU, forward and
//! backward, with which geometry and parameters, and the executor's own NVRTC kernels
//! (padding copies, concatenation parts, bias, per-position softmax cross-entropy,
//! gradient accumulation, the SGD update). Plain data, checked in every build; the
//! executor that runs it is `exec` (feature `cuda`).

use ridgeline_model::graph::{Attention, AttentionShape, Graph, Layer, Op};

use ridgeline_model::precision::Precision;

use super::plan::{
    ConvGeometry, Element, PoolGeometry, ShapedLaunch, SpatialLaunch, elementwise_kernel,
    shaped_kernel, spatial_kernel,
};
use crate::backend::{ConvCase, Format, Pass};

/// The executor's kernels in CUDA C (NVRTC), grid-stride loops over `n`, compiled once per
/// activation storage `T` ([`super::plan::typed_source`]); parameters, their FP32
/// gradients and the losses are `float`:
///
/// - `ex_fill(out, v, n)`: `out = v`; `ex_uniform(out, seed, scale, n)`: synthetic data
///   uniform in `[-scale, scale)` from a hash of the index (`ex_uniform_f64` the same into
///   FP64, for the micro-kernels' FP64 operands);
/// - `ex_accumulate(out, x, n)`: `out += x` (a tensor read by several layers);
/// - `ex_sgd(w, dw, copy, overflow, lr, unscale, n)`: `w -= lr unscale dw` on the FP32
///   master `w` unless `overflow[0]` is set (or `lr` is 0), then `copy = w` where `copy`
///   is not null (the 16-bit weights of mixed precision); `ex_check_finite(x, overflow,
///   n)` sets `overflow[0]` where an element of `x` is infinite or NaN;
/// - `ex_bias_add(y, bias, a, b, n)` and `ex_bias_grad(dy, db, a, b, n)`: a per-channel bias
///   on the layout `[outer, a, b]` and its gradient, reduced in chunks (a warp per channel
///   and run of 8,192 elements, or where `b` is 1, channels-last, a thread per channel and
///   256 rows, neighbouring threads on neighbouring channels), one atomic add per chunk;
///   launched over [`bias_grad_threads`];
/// - `ex_concat_fwd(x, out, a, total, offset, b, n)`: one input of `a` channels into
///   channels `offset..offset + a` of an output of `total`; `ex_concat_bwd` the reverse,
///   from the output gradient `x` into the input's `out`; `n` the input's elements;
/// - `ex_embed(x, out, i0, i1, i2, p0, p1, p2, o0, o1, o2, n)`: an input of extents `i`
///   into a zeroed-around tensor of extents `p` at offsets `o` (the extra rows of uneven
///   padding), `n` the padded elements; `ex_crop` the reverse, `n` the input's elements;
/// - `ex_softmax_ce_fwd(x, out, c, vol, seed, rows)`: softmax over `c` channels at each of
///   `vol` positions, cross-entropy against a hashed label, the mean over positions added
///   into `out[sample]`, a warp per position from 32 channels (a language model's vocabulary
///   is tens of thousands), a thread per position below (DeepCAM's 3 classes); `rows` =
///   samples x positions, launched over [`softmax_ce_threads`]; `ex_softmax_ce_bwd(x, dy,
///   dx, c, vol, seed, rows)` its gradient;
/// - `ex_softmax_fwd(x, out, c, vol, n)` and `ex_softmax_bwd(y, dy, dx, c, vol, n)`: softmax
///   over `c` channels at each position of `[samples, c, vol]`, a thread per position
///   (neighbouring threads read neighbouring positions); `ex_softmax_rows_fwd(x, out, c,
///   rows)` and `ex_softmax_rows_bwd(y, dy, dx, c, rows)` over contiguous rows of `c` (the
///   attention weights), a warp per row with shuffle reductions;
/// - `ex_norm_fwd(x, out, gamma, beta, stats, c, vol, rms, n)`: layer norm (`rms` = 0) or RMS
///   norm over the `c` channels at each position, FP32 scale and shift (`beta` null for RMS),
///   the mean and inverse deviation per position into `stats`; `ex_norm_bwd(x, dy, dx,
///   gamma, stats, c, vol, rms, n)` the input's gradient; `ex_norm_param_grad(x, dy, stats,
///   dgamma, dbeta, c, vol, samples)` the parameters' (a block per channel, a shared-memory
///   reduction over samples and positions);
/// - `ex_lookup_fwd(ids, table, out, vocab, dim, positions, n)`: an embedding of an FP32
///   table `[vocab, dim]` into `[samples, dim, positions]`, each id read from the synthetic
///   input in `[-1, 1)` as the CPU executor reads it; `ex_lookup_bwd(ids, dy, dtable, ...)`
///   adds the rows' gradients into the table's (atomics);
/// - `ex_gather(x, out, f, rx, rout, hashed, salt, n)`: `out[s, k, e] = x[s, k, row(e)]` and
///   `ex_scatter(...)`: `out[s, k, row(r)] += x[s, k, r]` (atomics), the row a hash of the
///   index and `salt` modulo the rows (`hashed`), or contiguous segments;
/// - `ex_attn_mask(x, seq, seq_kv, causal, n)`: attention's mask on its weights, in place
///   (the type's lowest value where a causal query may not see a key); `ex_clamp_min(x, lo,
///   n)`: `x = max(x, lo)`, in place.
pub(crate) const EXEC_SOURCE: &str = r#"
typedef unsigned long long u64;
#define LOOP for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
__device__ __forceinline__ float warp_max(float v) { for (int s = 16; s > 0; s >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s)); return v; }
__device__ __forceinline__ float warp_sum(float v) { for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s); return v; }
#define ROWS for (u64 r = (blockIdx.x * (u64)blockDim.x + threadIdx.x) / 32; r < rows; r += (u64)gridDim.x * blockDim.x / 32)
#define LOWEST -3.402823466e38f
__device__ __forceinline__ u64 mix(u64 h) { h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33; return h; }
extern "C" __global__ void ex_fill(T* out, float v, u64 n) { LOOP { out[i] = v; } }
extern "C" __global__ void ex_uniform(T* out, u64 seed, float scale, u64 n) { LOOP { out[i] = scale * (2.0f * ((mix(i ^ seed) >> 40) * (1.0f / 16777216.0f)) - 1.0f); } }
extern "C" __global__ void ex_uniform_f64(double* out, u64 seed, float scale, u64 n) { LOOP { out[i] = scale * (2.0 * ((mix(i ^ seed) >> 40) * (1.0 / 16777216.0)) - 1.0); } }
extern "C" __global__ void ex_accumulate(T* out, const T* x, u64 n) { LOOP { out[i] += x[i]; } }
extern "C" __global__ void ex_sgd(float* w, const T* dw, T* copy, const float* overflow, float lr, float unscale, u64 n) {
    LOOP {
        if (lr != 0.0f && overflow[0] == 0.0f) w[i] -= lr * (unscale * (float)dw[i]);
        if (copy) copy[i] = w[i];
    }
}
extern "C" __global__ void ex_check_finite(const T* x, float* overflow, u64 n) { LOOP { if (!(fabsf((float)x[i]) <= 3.402823466e38f)) overflow[0] = 1.0f; } }
extern "C" __global__ void ex_bias_add(T* y, const float* bias, u64 a, u64 b, u64 n) { LOOP { y[i] += bias[(i / b) % a]; } }
#define CE_WARP_CLASSES 32
#define BIAS_ROWS 256
#define BIAS_RUN 8192
extern "C" __global__ void ex_bias_grad(const T* dy, float* db, u64 a, u64 b, u64 n) {
    u64 per = n / a, tid = blockIdx.x * (u64)blockDim.x + threadIdx.x, stride = (u64)gridDim.x * blockDim.x;
    if (b == 1) {
        u64 chunks = (per + BIAS_ROWS - 1) / BIAS_ROWS;
        for (u64 u = tid; u < a * chunks; u += stride) {
            u64 c = u % a, r0 = (u / a) * BIAS_ROWS, r1 = min(per, r0 + BIAS_ROWS);
            float s = 0.0f;
            for (u64 r = r0; r < r1; r++) s += (float)dy[r * a + c];
            atomicAdd(&db[c], s);
        }
    } else {
        u64 chunks = (per + BIAS_RUN - 1) / BIAS_RUN;
        unsigned lane = threadIdx.x % 32;
        for (u64 w = tid / 32; w < a * chunks; w += stride / 32) {
            u64 c = w / chunks, e0 = (w % chunks) * BIAS_RUN, e1 = min(per, e0 + BIAS_RUN);
            float s = 0.0f;
            for (u64 e = e0 + lane; e < e1; e += 32) s += (float)dy[((e / b) * a + c) * b + e % b];
            s = warp_sum(s);
            if (lane == 0) atomicAdd(&db[c], s);
        }
    }
}
extern "C" __global__ void ex_concat_fwd(const T* x, T* out, u64 a, u64 total, u64 offset, u64 b, u64 n) { LOOP { u64 s = i / (a * b), j = i % (a * b); out[(s * total + offset) * b + j] = x[i]; } }
extern "C" __global__ void ex_concat_bwd(const T* x, T* out, u64 a, u64 total, u64 offset, u64 b, u64 n) { LOOP { u64 s = i / (a * b), j = i % (a * b); out[i] = x[(s * total + offset) * b + j]; } }
extern "C" __global__ void ex_embed(const T* x, T* out, u64 i0, u64 i1, u64 i2, u64 p0, u64 p1, u64 p2, u64 o0, u64 o1, u64 o2, u64 n) {
    LOOP {
        u64 c2 = i % p2, c1 = (i / p2) % p1, c0 = (i / (p2 * p1)) % p0, plane = i / (p2 * p1 * p0);
        bool inside = c0 >= o0 && c0 - o0 < i0 && c1 >= o1 && c1 - o1 < i1 && c2 >= o2 && c2 - o2 < i2;
        out[i] = inside ? x[((plane * i0 + (c0 - o0)) * i1 + (c1 - o1)) * i2 + (c2 - o2)] : 0.0f;
    }
}
extern "C" __global__ void ex_crop(const T* x, T* out, u64 i0, u64 i1, u64 i2, u64 p0, u64 p1, u64 p2, u64 o0, u64 o1, u64 o2, u64 n) {
    LOOP {
        u64 c2 = i % i2, c1 = (i / i2) % i1, c0 = (i / (i2 * i1)) % i0, plane = i / (i2 * i1 * i0);
        out[i] = x[((plane * p0 + c0 + o0) * p1 + c1 + o1) * p2 + c2 + o2];
    }
}
#define SERIAL_ROWS for (u64 r = blockIdx.x * (u64)blockDim.x + threadIdx.x; r < rows; r += (u64)gridDim.x * blockDim.x)
extern "C" __global__ void ex_softmax_ce_fwd(const T* x, float* out, u64 c, u64 vol, u64 seed, u64 rows) {
    if (c < CE_WARP_CLASSES) {
        SERIAL_ROWS {
            u64 s = r / vol;
            const T* v = x + s * c * vol + r % vol;
            float m = LOWEST;
            for (u64 k = 0; k < c; k++) m = fmaxf(m, (float)v[k * vol]);
            float sum = 0.0f;
            for (u64 k = 0; k < c; k++) sum += expf((float)v[k * vol] - m);
            atomicAdd(&out[s], (logf(sum) + m - (float)v[(mix(r ^ seed) % c) * vol]) / (float)vol);
        }
        return;
    }
    unsigned lane = threadIdx.x % 32;
    ROWS {
        u64 s = r / vol;
        const T* v = x + s * c * vol + r % vol;
        float m = LOWEST;
        for (u64 k = lane; k < c; k += 32) m = fmaxf(m, (float)v[k * vol]);
        m = warp_max(m);
        float sum = 0.0f;
        for (u64 k = lane; k < c; k += 32) sum += expf((float)v[k * vol] - m);
        sum = warp_sum(sum);
        if (lane == 0) atomicAdd(&out[s], (logf(sum) + m - (float)v[(mix(r ^ seed) % c) * vol]) / (float)vol);
    }
}
extern "C" __global__ void ex_softmax_ce_bwd(const T* x, const float* dy, T* dx, u64 c, u64 vol, u64 seed, u64 rows) {
    if (c < CE_WARP_CLASSES) {
        SERIAL_ROWS {
            u64 s = r / vol, base = s * c * vol + r % vol;
            const T* v = x + base;
            float m = LOWEST;
            for (u64 k = 0; k < c; k++) m = fmaxf(m, (float)v[k * vol]);
            float sum = 0.0f;
            for (u64 k = 0; k < c; k++) sum += expf((float)v[k * vol] - m);
            u64 label = mix(r ^ seed) % c;
            float g = dy[s] / (float)vol;
            for (u64 k = 0; k < c; k++) dx[base + k * vol] = g * (expf((float)v[k * vol] - m) / sum - (k == label ? 1.0f : 0.0f));
        }
        return;
    }
    unsigned lane = threadIdx.x % 32;
    ROWS {
        u64 s = r / vol, base = s * c * vol + r % vol;
        const T* v = x + base;
        float m = LOWEST;
        for (u64 k = lane; k < c; k += 32) m = fmaxf(m, (float)v[k * vol]);
        m = warp_max(m);
        float sum = 0.0f;
        for (u64 k = lane; k < c; k += 32) sum += expf((float)v[k * vol] - m);
        sum = warp_sum(sum);
        u64 label = mix(r ^ seed) % c;
        float g = dy[s] / (float)vol;
        for (u64 k = lane; k < c; k += 32) dx[base + k * vol] = g * (expf((float)v[k * vol] - m) / sum - (k == label ? 1.0f : 0.0f));
    }
}
extern "C" __global__ void ex_softmax_fwd(const T* x, T* out, u64 c, u64 vol, u64 n) {
    LOOP {
        u64 base = (i / vol) * c * vol + i % vol;
        float m = LOWEST;
        for (u64 k = 0; k < c; k++) m = fmaxf(m, (float)x[base + k * vol]);
        float sum = 0.0f;
        for (u64 k = 0; k < c; k++) sum += expf((float)x[base + k * vol] - m);
        for (u64 k = 0; k < c; k++) out[base + k * vol] = expf((float)x[base + k * vol] - m) / sum;
    }
}
extern "C" __global__ void ex_softmax_bwd(const T* y, const T* dy, T* dx, u64 c, u64 vol, u64 n) {
    LOOP {
        u64 base = (i / vol) * c * vol + i % vol;
        float dot = 0.0f;
        for (u64 k = 0; k < c; k++) dot += (float)y[base + k * vol] * (float)dy[base + k * vol];
        for (u64 k = 0; k < c; k++) dx[base + k * vol] = (float)y[base + k * vol] * ((float)dy[base + k * vol] - dot);
    }
}
extern "C" __global__ void ex_softmax_rows_fwd(const T* x, T* out, u64 c, u64 rows) {
    unsigned lane = threadIdx.x % 32;
    ROWS {
        const T* v = x + r * c;
        T* o = out + r * c;
        float m = LOWEST;
        for (u64 k = lane; k < c; k += 32) m = fmaxf(m, (float)v[k]);
        m = warp_max(m);
        float sum = 0.0f;
        for (u64 k = lane; k < c; k += 32) sum += expf((float)v[k] - m);
        sum = warp_sum(sum);
        for (u64 k = lane; k < c; k += 32) o[k] = expf((float)v[k] - m) / sum;
    }
}
extern "C" __global__ void ex_softmax_rows_bwd(const T* y, const T* dy, T* dx, u64 c, u64 rows) {
    unsigned lane = threadIdx.x % 32;
    ROWS {
        float dot = 0.0f;
        for (u64 k = lane; k < c; k += 32) dot += (float)y[r * c + k] * (float)dy[r * c + k];
        dot = warp_sum(dot);
        for (u64 k = lane; k < c; k += 32) dx[r * c + k] = (float)y[r * c + k] * ((float)dy[r * c + k] - dot);
    }
}
extern "C" __global__ void ex_norm_fwd(const T* x, T* out, const float* gamma, const float* beta, float* stats, u64 c, u64 vol, u64 rms, u64 n) {
    LOOP {
        u64 base = (i / vol) * c * vol + i % vol;
        float mean = 0.0f;
        if (!rms) { for (u64 k = 0; k < c; k++) mean += (float)x[base + k * vol]; mean /= (float)c; }
        float var = 0.0f;
        for (u64 k = 0; k < c; k++) { float d = (float)x[base + k * vol] - mean; var += d * d; }
        float r = rsqrtf(var / (float)c + 1e-5f);
        stats[2 * i] = mean;
        stats[2 * i + 1] = r;
        for (u64 k = 0; k < c; k++) out[base + k * vol] = gamma[k] * ((float)x[base + k * vol] - mean) * r + (beta ? beta[k] : 0.0f);
    }
}
extern "C" __global__ void ex_norm_bwd(const T* x, const T* dy, T* dx, const float* gamma, const float* stats, u64 c, u64 vol, u64 rms, u64 n) {
    LOOP {
        u64 base = (i / vol) * c * vol + i % vol;
        float mean = stats[2 * i], r = stats[2 * i + 1];
        float sg = 0.0f, sgx = 0.0f;
        for (u64 k = 0; k < c; k++) {
            float g = (float)dy[base + k * vol] * gamma[k];
            sg += g;
            sgx += g * ((float)x[base + k * vol] - mean) * r;
        }
        float mg = rms ? 0.0f : sg / (float)c;
        for (u64 k = 0; k < c; k++) {
            float xh = ((float)x[base + k * vol] - mean) * r;
            dx[base + k * vol] = r * ((float)dy[base + k * vol] * gamma[k] - mg - xh * sgx / (float)c);
        }
    }
}
extern "C" __global__ void ex_norm_param_grad(const T* x, const T* dy, const float* stats, float* dgamma, float* dbeta, u64 c, u64 vol, u64 samples) {
    __shared__ float a[256], b[256];
    for (u64 ch = blockIdx.x; ch < c; ch += gridDim.x) {
        float sg = 0.0f, sb = 0.0f;
        for (u64 j = threadIdx.x; j < samples * vol; j += blockDim.x) {
            u64 s = j / vol, p = j % vol, idx = (s * c + ch) * vol + p;
            sg += (float)dy[idx] * ((float)x[idx] - stats[2 * j]) * stats[2 * j + 1];
            sb += (float)dy[idx];
        }
        a[threadIdx.x] = sg;
        b[threadIdx.x] = sb;
        __syncthreads();
        for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) { a[threadIdx.x] += a[threadIdx.x + s]; b[threadIdx.x] += b[threadIdx.x + s]; }
            __syncthreads();
        }
        if (threadIdx.x == 0) { dgamma[ch] = a[0]; if (dbeta) dbeta[ch] = b[0]; }
        __syncthreads();
    }
}
__device__ __forceinline__ u64 lookup_id(float v, u64 vocab) {
    float u = fminf(fmaxf((v + 1.0f) * 0.5f, 0.0f), 1.0f);
    u64 k = (u64)(u * (float)vocab);
    return k < vocab ? k : vocab - 1;
}
extern "C" __global__ void ex_lookup_fwd(const T* ids, const float* table, T* out, u64 vocab, u64 dim, u64 positions, u64 n) {
    LOOP {
        u64 p = i % positions, d = (i / positions) % dim, s = i / (positions * dim);
        out[i] = table[lookup_id((float)ids[s * positions + p], vocab) * dim + d];
    }
}
extern "C" __global__ void ex_lookup_bwd(const T* ids, const T* dy, float* dtable, u64 vocab, u64 dim, u64 positions, u64 n) {
    LOOP {
        u64 p = i % positions, d = (i / positions) % dim, s = i / (positions * dim);
        atomicAdd(&dtable[lookup_id((float)ids[s * positions + p], vocab) * dim + d], (float)dy[i]);
    }
}
__device__ __forceinline__ u64 row_of(u64 e, u64 from, u64 to, u64 hashed, u64 salt) { return hashed ? mix(e ^ salt) % to : e * to / from; }
extern "C" __global__ void ex_gather(const T* x, T* out, u64 f, u64 rx, u64 rout, u64 hashed, u64 salt, u64 n) {
    LOOP {
        u64 e = i % rout, k = (i / rout) % f, s = i / (rout * f);
        out[i] = x[(s * f + k) * rx + row_of(e, rout, rx, hashed, salt)];
    }
}
extern "C" __global__ void ex_scatter(const T* x, T* out, u64 f, u64 rx, u64 rout, u64 hashed, u64 salt, u64 n) {
    LOOP {
        u64 r = i % rx, k = (i / rx) % f, s = i / (rx * f);
        acc(&out[(s * f + k) * rout + row_of(r, rx, rout, hashed, salt)], (float)x[i]);
    }
}
extern "C" __global__ void ex_attn_mask(T* x, u64 seq, u64 seq_kv, u64 causal, u64 n) {
    LOOP {
        u64 t = i % seq_kv, q = (i / seq_kv) % seq;
        bool hidden = causal && t > q + (seq_kv > seq ? seq_kv - seq : 0);
        x[i] = hidden ? LOWEST : (float)x[i] + 0.0f;
    }
}
extern "C" __global__ void ex_clamp_min(T* x, float lo, u64 n) { LOOP { x[i] = fmaxf((float)x[i], lo); } }
"#;

/// Every kernel name of [`EXEC_SOURCE`].
pub(crate) const EXEC_KERNELS: [&str; 27] = [
    "ex_fill",
    "ex_uniform",
    "ex_uniform_f64",
    "ex_accumulate",
    "ex_sgd",
    "ex_check_finite",
    "ex_bias_add",
    "ex_bias_grad",
    "ex_concat_fwd",
    "ex_concat_bwd",
    "ex_embed",
    "ex_crop",
    "ex_softmax_ce_fwd",
    "ex_softmax_ce_bwd",
    "ex_softmax_fwd",
    "ex_softmax_bwd",
    "ex_softmax_rows_fwd",
    "ex_softmax_rows_bwd",
    "ex_norm_fwd",
    "ex_norm_bwd",
    "ex_norm_param_grad",
    "ex_lookup_fwd",
    "ex_lookup_bwd",
    "ex_gather",
    "ex_scatter",
    "ex_attn_mask",
    "ex_clamp_min",
];

/// Threads to launch `ex_softmax_ce_fwd` and `_bwd` with over `rows` positions of `c`
/// channels: a warp per position from `CE_WARP_CLASSES` (32) channels, else a thread.
pub(crate) fn softmax_ce_threads(c: usize, rows: usize) -> usize {
    if c < 32 { rows } else { 32 * rows }
}

/// Threads to launch `ex_bias_grad` with over `n` elements of `a` channels and inner extent
/// `b`: a warp per channel and run of 8,192 elements (`BIAS_RUN`), or where `b` is 1 a
/// thread per channel and 256 rows (`BIAS_ROWS`).
pub(crate) fn bias_grad_threads(a: usize, b: usize, n: usize) -> usize {
    let per = n / a.max(1);
    if b == 1 {
        a * per.div_ceil(256)
    } else {
        32 * a * per.div_ceil(8192)
    }
}

/// How the executor runs a training precision (the recipe of Micikevicius et al., *Mixed
/// Precision Training*, ICLR 2018, as frameworks' automatic mixed precision applies it):
/// activations and their gradients stored in `storage`; convolutions and dense layers in
/// `matrix` (cuDNN and cuBLAS with FP32 accumulation); under mixed precision, conv and
/// dense weights used through a 16-bit copy of an FP32 master that the update writes,
/// their gradients 16-bit, every other parameter FP32; FP16 with dynamic loss scaling
/// ([`LossScaler`]), BF16 without (its range is FP32's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExecPrecision {
    /// Activations and activation gradients.
    pub(crate) storage: Element,
    /// Convolutions and dense layers.
    pub(crate) matrix: Format,
    /// Whether the loss is scaled (and overflowing steps skipped).
    pub(crate) loss_scaling: bool,
}

impl ExecPrecision {
    /// The executor's plan of `precision`; `None` for FP8, which the executor does not
    /// run (it has no FP8 GEMMs nor Transformer Engine's scaling).
    pub(crate) const fn of(precision: Precision) -> Option<ExecPrecision> {
        let (storage, matrix, loss_scaling) = match precision {
            Precision::Fp32 => (Element::F32, Format::Fp32, false),
            Precision::Tf32 => (Element::F32, Format::Tf32, false),
            Precision::AmpFp16 => (Element::F16, Format::Fp16, true),
            Precision::AmpBf16 => (Element::Bf16, Format::Bf16, false),
            Precision::Fp8 => return None,
        };
        Some(ExecPrecision {
            storage,
            matrix,
            loss_scaling,
        })
    }

    /// Whether conv and dense weights have a 16-bit copy (mixed precision).
    pub(crate) const fn weight_copies(self) -> bool {
        !matches!(self.storage, Element::F32)
    }
}

/// Dynamic loss scaling with the defaults of PyTorch's `GradScaler` (Micikevicius et al.
/// 2018, section 3.2): the loss gradient is multiplied by `scale` so small FP16 gradients
/// do not flush to zero; a step whose gradients hold an infinity or NaN skips its update
/// and halves the scale; `GROWTH_INTERVAL` clean steps in a row double it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LossScaler {
    /// The scale of the next step.
    pub(crate) scale: f32,
    /// Clean steps since the last change.
    clean: u32,
}

impl LossScaler {
    /// The first step's scale, 2^16.
    pub(crate) const INITIAL: f32 = 65536.0;
    /// Clean steps before the scale doubles.
    pub(crate) const GROWTH_INTERVAL: u32 = 2000;

    /// A scaler at [`Self::INITIAL`].
    pub(crate) const fn new() -> LossScaler {
        LossScaler {
            scale: Self::INITIAL,
            clean: 0,
        }
    }

    /// After a step: `overflow` when its gradients were not all finite.
    pub(crate) fn update(&mut self, overflow: bool) {
        if overflow {
            self.scale *= 0.5;
            self.clean = 0;
        } else {
            self.clean += 1;
            if self.clean == Self::GROWTH_INTERVAL {
                self.scale *= 2.0;
                self.clean = 0;
            }
        }
    }
}

/// Where a layer's input sits inside the tensor cuDNN is given when the layer pads
/// unevenly: extents of the input and of the padded tensor (three spatial dimensions,
/// unused ones 1), the offsets of the input in it, and the planes (samples x channels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Embed {
    /// Input extents.
    pub(crate) input: [u64; 3],
    /// Padded extents.
    pub(crate) padded: [u64; 3],
    /// Offsets of the input in the padded tensor.
    pub(crate) offset: [u64; 3],
    /// Samples x channels.
    pub(crate) planes: u64,
}

impl Embed {
    /// The embedding of a per-sample input `[c, spatial...]` at `batch` in the padded
    /// `x` dims `[n, c, spatial...]` cuDNN takes, padding `[before, after]` per dimension;
    /// `None` when the padding is even (cuDNN reads the input itself).
    pub(crate) fn of(
        input: &[usize],
        batch: usize,
        x: &[i32],
        pads: &[[usize; 2]],
    ) -> Option<Embed> {
        if pads.iter().all(|[b, a]| b == a) {
            return None;
        }
        let mut e = Embed {
            input: [1; 3],
            padded: [1; 3],
            offset: [0; 3],
            planes: (batch.max(1) * input.first().copied().unwrap_or(1)) as u64,
        };
        for (d, &extent) in input.iter().skip(1).enumerate().take(3) {
            let [before, after] = pads.get(d).copied().unwrap_or([0, 0]);
            e.input[d] = extent as u64;
            e.padded[d] = x.get(2 + d).map_or(extent as u64, |&v| v.max(0) as u64);
            e.offset[d] = (before - before.min(after)) as u64;
        }
        Some(e)
    }

    /// Elements of the input.
    pub(crate) fn input_elements(&self) -> u64 {
        self.planes * self.input.iter().product::<u64>()
    }

    /// Elements of the padded tensor.
    pub(crate) fn padded_elements(&self) -> u64 {
        self.planes * self.padded.iter().product::<u64>()
    }
}

/// What one layer runs on the GPU.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LayerPlan {
    /// The input sample (generated once on the device).
    Input,
    /// A convolution through cuDNN; a transposed one runs the adjoint's passes swapped
    /// (forward = backward-data, backward-data = forward). `embed` copies an unevenly
    /// padded input (the layer's, or for a transposed one its output gradient) into the
    /// tensor cuDNN reads.
    Conv {
        /// The (adjoint, for a transposed layer) convolution's descriptors.
        geometry: ConvGeometry,
        /// Whether the layer is a transposed convolution.
        transposed: bool,
        /// Whether the layer has a bias.
        bias: bool,
        /// The padded input, where the padding is uneven.
        embed: Option<Embed>,
    },
    /// A dense layer: `[n x input] -> [n x output]` through cuBLAS, weights `[output x
    /// input]` row-major.
    Dense {
        /// Samples.
        n: usize,
        /// Input features.
        input: usize,
        /// Output features.
        output: usize,
        /// Whether the layer has a bias.
        bias: bool,
    },
    /// Pooling through cuDNN.
    Pool {
        /// Descriptors.
        geometry: PoolGeometry,
        /// The padded input, where the padding is uneven.
        embed: Option<Embed>,
    },
    /// Batch normalisation through cuDNN on `[n, c, spatial...]`.
    BatchNorm {
        /// The input's dims.
        dims: Vec<i32>,
    },
    /// An element-wise op of [`super::plan::OPS_SOURCE`]: kernels and parameter.
    Elementwise {
        /// Forward kernel.
        forward: &'static str,
        /// Backward kernel.
        backward: &'static str,
        /// The op's parameter.
        param: f32,
    },
    /// Channel affine or mean squared error ([`super::plan::SHAPED_SOURCE`]).
    Shaped {
        /// Forward launch.
        forward: ShapedLaunch,
        /// Backward launch.
        backward: ShapedLaunch,
    },
    /// Concatenation along channels: the inputs' channels and the positions per channel.
    Concat {
        /// Channels of each input.
        channels: Vec<usize>,
        /// Positions per channel.
        vol: usize,
    },
    /// Flatten: a copy.
    Flatten,
    /// Tile or upsample ([`super::plan::SPATIAL_SOURCE`]).
    Spatial {
        /// Forward launch.
        forward: SpatialLaunch,
        /// Backward launch.
        backward: SpatialLaunch,
    },
    /// Softmax cross-entropy over channels, per position.
    SoftmaxCe {
        /// Channels (classes).
        c: usize,
        /// Positions per sample.
        vol: usize,
    },
    /// A linear layer at every position through cuBLAS: per sample `y [out x vol] =
    /// W [out x c] x [c x vol]`, weights row-major (one strided batched GEMM over samples).
    Linear {
        /// Samples.
        n: usize,
        /// Input channels.
        c: usize,
        /// Output channels.
        out: usize,
        /// Positions per sample.
        vol: usize,
        /// Whether the layer has a bias.
        bias: bool,
    },
    /// `calls` products `[m x k] x [k x p]` of two activations (one strided batched GEMM).
    MatMul {
        /// Products (samples x leading dimensions).
        calls: usize,
        /// Rows of the first.
        m: usize,
        /// The inner dimension.
        k: usize,
        /// Columns of the second.
        p: usize,
    },
    /// An embedding lookup of `positions` ids per sample in an FP32 table.
    Embedding {
        /// Rows of the table.
        vocab: usize,
        /// Features per row.
        dim: usize,
        /// Ids per sample.
        positions: usize,
    },
    /// Layer norm (`rms` false) or RMS norm over `c` channels at each of `vol` positions.
    Norm {
        /// Channels.
        c: usize,
        /// Positions per sample.
        vol: usize,
        /// RMS norm: no mean, no shift.
        rms: bool,
    },
    /// Softmax over `c` channels at each of `vol` positions.
    Softmax {
        /// Channels.
        c: usize,
        /// Positions per sample.
        vol: usize,
    },
    /// Multi-head attention ([`AttentionPlan`]).
    Attention(AttentionPlan),
    /// Gather, scatter-add or segment sum over rows of `[f, rows]` per sample.
    Rows {
        /// Features per row.
        f: usize,
        /// Input rows.
        rows_in: usize,
        /// Output rows.
        rows_out: usize,
        /// Whether the index is a hash (gather, scatter-add) or contiguous segments.
        hashed: bool,
        /// The hash's salt.
        salt: u64,
        /// Gather (forward reads rows) rather than scatter-add or segment sum (forward adds
        /// into rows).
        gather: bool,
    },
}

/// Attention as the executor runs it: per sample, the heads' products as one strided
/// batched GEMM each, the element-wise kernels over the weights `[heads, seq, seq_kv]`, and
/// the weights kept for backward (recomputed there where the layer is fused).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AttentionPlan {
    /// Samples.
    pub(crate) n: usize,
    /// Heads.
    pub(crate) heads: usize,
    /// Channels per head.
    pub(crate) d: usize,
    /// Query positions.
    pub(crate) seq: usize,
    /// Key and value positions.
    pub(crate) seq_kv: usize,
    /// Queries, keys and values stacked in one input `[3 H, S]`.
    pub(crate) stacked: bool,
    /// The layer's form.
    pub(crate) form: Attention,
}

impl AttentionPlan {
    /// Channels of queries (and of keys and values).
    pub(crate) fn hidden(&self) -> usize {
        self.heads * self.d
    }

    /// Weights per sample.
    pub(crate) fn weights(&self) -> usize {
        self.heads * self.seq * self.seq_kv
    }

    /// Element offsets of one sample's queries, keys and values in their inputs (one
    /// stacked input, or three), and each input's sample stride.
    pub(crate) fn offsets(&self, b: usize) -> [usize; 3] {
        let (h, s, t) = (self.hidden(), self.seq, self.seq_kv);
        if self.stacked {
            let base = b * 3 * h * s;
            [base, base + h * s, base + 2 * h * s]
        } else {
            [b * h * s, b * h * t, b * h * t]
        }
    }

    /// Arrays of the weights' size the executor computes: the weights after softmax and,
    /// with dropout, after it (kept for backward unless the layer is fused, whose backward
    /// recomputes them).
    pub(crate) fn weight_arrays(&self) -> usize {
        if self.form.dropout > 0.0 { 2 } else { 1 }
    }
}

/// The hash salts of gather and scatter-add's synthetic indices.
pub(crate) const GATHER_SALT: u64 = 0x6A7E_5EED;
/// See [`GATHER_SALT`].
pub(crate) const SCATTER_SALT: u64 = 0x5CA7_7E12;

impl LayerPlan {
    /// The plan of `layer` of `graph` at `batch`, or why the GPU cannot run it.
    pub(crate) fn of(graph: &Graph, layer: &Layer, batch: usize) -> Result<LayerPlan, String> {
        let layers = graph.layers();
        let input = |k: usize| -> &[usize] {
            layer
                .inputs
                .get(k)
                .map_or(&[], |&j| layers[j].output.dims())
        };
        let out = layer.output.dims();
        let vol = |d: &[usize]| d.get(1..).unwrap_or_default().iter().product::<usize>();
        let n = batch.max(1);
        Ok(match &layer.op {
            Op::Input => LayerPlan::Input,
            Op::Conv(c) | Op::ConvTranspose(c) => LayerPlan::conv(layer, c, input(0), n)?,
            Op::Dense { out_features, bias } => LayerPlan::Dense {
                n,
                input: input(0).iter().product(),
                output: *out_features,
                bias: *bias,
            },
            // On a feature vector, a dense layer. A tied layer keeps its own copy of the
            // weights here, as on the CPU (the same work).
            Op::Linear {
                out_features, bias, ..
            } if input(0).len() == 1 => LayerPlan::Dense {
                n,
                input: input(0)[0],
                output: *out_features,
                bias: *bias,
            },
            Op::Linear {
                out_features, bias, ..
            } => LayerPlan::Linear {
                n,
                c: input(0)[0],
                out: *out_features,
                vol: vol(input(0)),
                bias: *bias,
            },
            Op::MatMul => {
                let a = input(0);
                let r = a.len();
                LayerPlan::MatMul {
                    calls: n * a[..r - 2].iter().product::<usize>(),
                    m: a[r - 2],
                    k: a[r - 1],
                    p: out[r - 1],
                }
            }
            Op::Embedding {
                num_embeddings,
                embedding_dim,
            } => LayerPlan::Embedding {
                vocab: *num_embeddings,
                dim: *embedding_dim,
                positions: input(0).iter().product(),
            },
            Op::LayerNorm | Op::RmsNorm => LayerPlan::Norm {
                c: input(0)[0],
                vol: vol(input(0)).max(1),
                rms: matches!(layer.op, Op::RmsNorm),
            },
            Op::Softmax => LayerPlan::Softmax {
                c: input(0)[0],
                vol: vol(input(0)).max(1),
            },
            Op::Attention(a) => {
                let dims: Vec<&[usize]> = (0..layer.inputs.len()).map(input).collect();
                LayerPlan::attention(a, &dims, n)?
            }
            Op::Gather { edges } => LayerPlan::Rows {
                f: input(0)[0],
                rows_in: input(0)[1],
                rows_out: *edges,
                hashed: true,
                salt: GATHER_SALT,
                gather: true,
            },
            Op::ScatterAdd { nodes } => LayerPlan::Rows {
                f: input(0)[0],
                rows_in: input(0)[1],
                rows_out: *nodes,
                hashed: true,
                salt: SCATTER_SALT,
                gather: false,
            },
            Op::SegmentSum { segments } => LayerPlan::Rows {
                f: input(0)[0],
                rows_in: input(0)[1],
                rows_out: *segments,
                hashed: false,
                salt: 0,
                gather: false,
            },
            Op::MaxPool(_) | Op::AvgPool(_) | Op::GlobalAvgPool => {
                let geometry = PoolGeometry::of(&layer.op, input(0), out, n)
                    .unwrap_or_else(|| Err("not a pooling".into()))?;
                let pads = match &layer.op {
                    Op::MaxPool(p) | Op::AvgPool(p) => p.padding.pairs().to_vec(),
                    _ => Vec::new(),
                };
                let embed = Embed::of(input(0), n, &geometry.x, &pads);
                LayerPlan::Pool { geometry, embed }
            }
            Op::BatchNorm => LayerPlan::batch_norm(input(0), n)?,
            Op::ChannelAffine | Op::MseLoss => {
                let launch = |p| shaped_kernel(&layer.op, p, input(0), n);
                match (launch(Pass::Forward), launch(Pass::Backward)) {
                    (Some(forward), Some(backward)) => LayerPlan::Shaped { forward, backward },
                    _ => return Err("no shaped kernel".into()),
                }
            }
            Op::Concat => LayerPlan::Concat {
                channels: layer
                    .inputs
                    .iter()
                    .map(|&j| layers[j].output.dims()[0])
                    .collect(),
                vol: vol(out),
            },
            // Both views of the same contiguous buffer.
            Op::Flatten | Op::FlattenPositions => LayerPlan::Flatten,
            Op::Tile { .. } | Op::Upsample { .. } => {
                let launch = |p| {
                    spatial_kernel(&layer.op, p, input(0), n)
                        .unwrap_or_else(|| Err("not tile or upsample".into()))
                };
                LayerPlan::Spatial {
                    forward: launch(Pass::Forward)?,
                    backward: launch(Pass::Backward)?,
                }
            }
            Op::SoftmaxCrossEntropy => LayerPlan::SoftmaxCe {
                c: input(0)[0],
                vol: vol(input(0)).max(1),
            },
            Op::Mul if input(1) != input(0) => {
                return Err(
                    "a broadcast `mul` (a channel gate) has no GPU kernel yet: only products of \
                     equal shapes"
                        .into(),
                );
            }
            op => {
                let kernels = (
                    elementwise_kernel(op, Pass::Forward),
                    elementwise_kernel(op, Pass::Backward),
                );
                let (Some((forward, param)), Some((backward, _))) = kernels else {
                    return Err(format!("no GPU kernel for `{}`", op.kind()));
                };
                LayerPlan::Elementwise {
                    forward,
                    backward,
                    param,
                }
            }
        })
    }

    /// A convolution (`transposed` where the layer is one: the adjoint of the convolution
    /// from its output to its input) of `layer` on one sample's `input`, at batch `n`.
    fn conv(
        layer: &Layer,
        c: &ridgeline_model::graph::Conv,
        input: &[usize],
        n: usize,
    ) -> Result<LayerPlan, String> {
        let out = layer.output.dims();
        let transposed = matches!(layer.op, Op::ConvTranspose(_));
        // A transposed layer is the adjoint of the convolution from its output to
        // its input.
        let (from, to) = if transposed {
            (out, input)
        } else {
            (input, out)
        };
        let pads = c.padding.pairs().to_vec();
        let case = ConvCase {
            label: layer.name.to_string(),
            batch: n,
            c_in: from[0],
            input: from[1..].to_vec(),
            c_out: to[0],
            kernel: c.kernel.to_vec(),
            stride: c.stride.to_vec(),
            padding: pads.clone(),
            dilation: c.dilation.to_vec(),
            groups: c.groups,
            bias: c.bias && !transposed,
            format: crate::backend::Format::Fp32,
            layout: crate::backend::Layout::ChannelsFirst,
        };
        let geometry = ConvGeometry::of(&case)?;
        let produced: Vec<usize> = geometry.y[2..].iter().map(|&v| v as usize).collect();
        if produced[..to.len() - 1] != to[1..] {
            return Err(format!(
                "the convolution gives {produced:?}, the graph {:?}",
                &to[1..]
            ));
        }
        let embed = Embed::of(from, n, &geometry.x, &pads);
        Ok(LayerPlan::Conv {
            geometry,
            transposed,
            bias: c.bias,
            embed,
        })
    }

    /// Attention of the form `a` on its inputs' one-sample shapes `dims` (one stacked, or
    /// queries, keys and values), at batch `n`; shifted windows and grouped queries have no
    /// GPU kernel yet.
    fn attention(
        a: &ridgeline_model::graph::Attention,
        dims: &[&[usize]],
        n: usize,
    ) -> Result<LayerPlan, String> {
        if a.window > 0 {
            return Err(
                "shifted-window attention has no GPU kernel yet; measure it on the CPU".into(),
            );
        }
        if a.kv_heads != a.heads {
            return Err(format!(
                "grouped-query attention ({} key and value heads for {} query heads) has \
                 no GPU kernel yet; measure it on the CPU",
                a.kv_heads, a.heads
            ));
        }
        let s = AttentionShape::of(a, dims).ok_or("not an attention's inputs")?;
        Ok(LayerPlan::Attention(AttentionPlan {
            n,
            heads: a.heads,
            d: (s.hidden / s.heads) as usize,
            seq: s.seq as usize,
            seq_kv: s.seq_kv as usize,
            stacked: dims.len() == 1,
            form: *a,
        }))
    }

    /// Batch norm on one sample's `input` at batch `n`, as cuDNN's (at least 4-D) tensor.
    fn batch_norm(input: &[usize], n: usize) -> Result<LayerPlan, String> {
        let mut dims = vec![n, input[0]];
        dims.extend(&input[1..]);
        // cuDNN takes at least four dimensions.
        while dims.len() < 4 {
            dims.push(1);
        }
        Ok(LayerPlan::BatchNorm {
            dims: dims
                .iter()
                .map(|&d| i32::try_from(d).map_err(|_| format!("{d} is beyond 32 bits")))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether the layer is a loss (mean squared error, softmax cross-entropy): its output
    /// and that output's gradient are FP32 in every precision.
    pub(crate) fn is_loss(&self) -> bool {
        match self {
            LayerPlan::SoftmaxCe { .. } => true,
            LayerPlan::Shaped { forward, .. } => forward.kernel == "op_mse_fwd",
            _ => false,
        }
    }

    /// Whether parameter `k` is read by cuDNN or cuBLAS in the matrix format (the weights
    /// of convolutions and dense layers): under mixed precision it has a 16-bit copy of its
    /// FP32 master, and a 16-bit gradient. Biases, batch-norm and affine parameters are read
    /// as FP32 by the kernels and cuDNN's batch norm.
    pub(crate) fn is_matrix_weight(&self, k: usize) -> bool {
        k == 0
            && matches!(
                self,
                LayerPlan::Conv { .. } | LayerPlan::Dense { .. } | LayerPlan::Linear { .. }
            )
    }

    /// Elements of each trainable parameter tensor, in the order the CPU executor keeps
    /// them (weights, then bias; batch norm and channel affine: scale, then shift).
    pub(crate) fn parameters(&self) -> Vec<usize> {
        let len = |d: &[i32]| d.iter().map(|&v| v.max(1) as usize).product::<usize>();
        match self {
            LayerPlan::Conv { geometry, bias, .. } => {
                let mut p = vec![len(&geometry.w)];
                if *bias {
                    // The layer's output channels: a transposed layer's are the adjoint's
                    // input channels.
                    p.push(match self {
                        LayerPlan::Conv {
                            transposed: true, ..
                        } => geometry.x[1] as usize,
                        _ => geometry.y[1] as usize,
                    });
                }
                p
            }
            LayerPlan::Dense {
                input,
                output,
                bias,
                ..
            } => {
                let mut p = vec![input * output];
                if *bias {
                    p.push(*output);
                }
                p
            }
            LayerPlan::Linear { c, out, bias, .. } => {
                let mut p = vec![c * out];
                if *bias {
                    p.push(*out);
                }
                p
            }
            LayerPlan::Embedding { vocab, dim, .. } => vec![vocab * dim],
            LayerPlan::Norm { c, rms, .. } => vec![*c; if *rms { 1 } else { 2 }],
            LayerPlan::BatchNorm { dims } => vec![dims[1] as usize; 2],
            LayerPlan::Shaped { forward, .. } if forward.kernel == "op_affine_fwd" => {
                vec![forward.a; 2]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use ridgeline_model::graph::{Conv, Pool};
    use ridgeline_model::workloads::{self, BuildOptions};

    use super::*;
    use crate::cuda::plan::tests::parameters;

    /// The embed and crop index maps, restated on the CPU.
    fn embed(e: &Embed, x: &[f32]) -> Vec<f32> {
        let ([i0, i1, i2], [p0, p1, p2], [o0, o1, o2]) = (e.input, e.padded, e.offset);
        (0..e.padded_elements())
            .map(|i| {
                let (c2, c1, c0, plane) = (
                    i % p2,
                    (i / p2) % p1,
                    (i / (p2 * p1)) % p0,
                    i / (p2 * p1 * p0),
                );
                let inside = c0 >= o0
                    && c0 - o0 < i0
                    && c1 >= o1
                    && c1 - o1 < i1
                    && c2 >= o2
                    && c2 - o2 < i2;
                if inside {
                    x[(((plane * i0 + (c0 - o0)) * i1 + (c1 - o1)) * i2 + (c2 - o2)) as usize]
                } else {
                    0.0
                }
            })
            .collect()
    }

    fn crop(e: &Embed, padded: &[f32]) -> Vec<f32> {
        let ([i0, i1, i2], [p0, p1, p2], [o0, o1, o2]) = (e.input, e.padded, e.offset);
        (0..e.input_elements())
            .map(|i| {
                let (c2, c1, c0, plane) = (
                    i % i2,
                    (i / i2) % i1,
                    (i / (i2 * i1)) % i0,
                    i / (i2 * i1 * i0),
                );
                padded[(((plane * p0 + c0 + o0) * p1 + c1 + o1) * p2 + c2 + o2) as usize]
            })
            .collect()
    }

    #[test]
    fn uneven_padding_embeds_the_input_where_cudnn_pads_the_difference() {
        // Kernel 2, "same": one row of padding after only; stride-2 kernel 3 "same" on an
        // even input pads [0, 1] too; [2, 1] puts the extra row first.
        let x: Vec<f32> = (1..=2 * 3 * 4 * 5).map(|v| v as f32).collect();
        let pads = [[2, 1], [0, 1]];
        let geometry_x = [2, 1, 5, 6];
        let e = Embed::of(&[1, 4, 5], 2, &geometry_x, &pads).unwrap();
        assert_eq!(
            (e.input, e.padded, e.offset),
            ([4, 5, 1], [5, 6, 1], [1, 0, 0])
        );
        let padded = embed(&e, &x[..40]);
        assert_eq!(padded.len(), 60);
        // Every input element lands once, the rest is zero, and crop inverts it.
        assert_eq!(padded.iter().filter(|v| **v != 0.0).count(), 40);
        assert_eq!(padded.iter().sum::<f32>(), x[..40].iter().sum::<f32>());
        assert_eq!(padded[..6], [0.0; 6], "the extra row comes first");
        assert_eq!(padded[6..12], [1.0, 2.0, 3.0, 4.0, 5.0, 0.0]);
        assert_eq!(crop(&e, &padded), x[..40]);
        assert_eq!(
            Embed::of(&[1, 4, 5], 2, &geometry_x, &[[1, 1], [0, 0]]),
            None
        );
    }

    #[test]
    fn every_layer_of_the_three_workloads_has_a_gpu_plan_with_the_models_parameters() {
        for (name, size) in [
            ("cosmoflow", vec![32]),
            ("deepcam", vec![96, 144]),
            ("resnet50", vec![64]),
        ] {
            let g = workloads::build(
                name,
                &BuildOptions {
                    input_size: Some(size),
                    width: 0.25,
                },
            )
            .unwrap();
            let counts =
                ridgeline_model::cost::cost(&g, 2, ridgeline_model::precision::Precision::Fp32);
            for (layer, cost) in g.layers().iter().zip(&counts.layers) {
                let plan = LayerPlan::of(&g, layer, 2)
                    .unwrap_or_else(|e| panic!("{name} {}: {e}", layer.name));
                assert_eq!(
                    plan.parameters().iter().sum::<usize>() as u64,
                    cost.params,
                    "{name} {}",
                    layer.name
                );
            }
        }
    }

    /// Llama's rotary embeddings and grouped-query attention have no GPU plan yet: each is
    /// refused with a reason, every other layer of Llama 3 8B has one.
    #[test]
    fn rotary_and_grouped_attention_are_refused_on_the_gpu() {
        let g = workloads::build(
            "llama3-8b",
            &BuildOptions {
                input_size: Some(vec![8]),
                width: 1.0,
            },
        )
        .unwrap();
        for layer in g.layers() {
            match (&layer.op, LayerPlan::of(&g, layer, 1)) {
                (Op::Rotary { .. }, Err(e)) => assert!(e.contains("rotary"), "{e}"),
                (Op::Attention(_), Err(e)) => assert!(e.contains("grouped-query"), "{e}"),
                (Op::Rotary { .. } | Op::Attention(_), Ok(_)) => panic!("{}", layer.name),
                (_, r) => {
                    r.unwrap_or_else(|e| panic!("{}: {e}", layer.name));
                }
            }
        }
    }

    /// Swin-T's window attention and patch merging have no GPU plan yet: each is refused
    /// with a reason, every other layer has one.
    #[test]
    fn window_attention_and_patch_merging_are_refused_on_the_gpu() {
        let g = workloads::build("swin-t", &BuildOptions::default()).unwrap();
        for layer in g.layers() {
            match (&layer.op, LayerPlan::of(&g, layer, 1)) {
                (Op::Attention(_), Err(e)) => assert!(e.contains("window"), "{e}"),
                (Op::PatchMerge, Err(e)) => assert!(e.contains("patch-merge"), "{e}"),
                (Op::Attention(_) | Op::PatchMerge, Ok(_)) => panic!("{}", layer.name),
                (_, r) => {
                    r.unwrap_or_else(|e| panic!("{}: {e}", layer.name));
                }
            }
        }
    }

    /// Every layer of the transformers and the graph network has a GPU plan with the
    /// model's parameters (a tied head keeps its own copy of the weights, as on the CPU),
    /// and attention's plan finds each sample's queries, keys and values.
    #[test]
    fn sequence_and_graph_workloads_have_gpu_plans() {
        for (name, size) in [
            ("gpt2", Some(vec![16])),
            ("bert-large", Some(vec![8])),
            ("opt-1.3b", Some(vec![8])),
            ("gin", None),
        ] {
            let g = workloads::build(
                name,
                &BuildOptions {
                    input_size: size,
                    width: 1.0,
                },
            )
            .unwrap();
            let counts =
                ridgeline_model::cost::cost(&g, 2, ridgeline_model::precision::Precision::Fp32);
            for (layer, cost) in g.layers().iter().zip(&counts.layers) {
                let plan = LayerPlan::of(&g, layer, 2)
                    .unwrap_or_else(|e| panic!("{name} {}: {e}", layer.name));
                let own = match layer.op {
                    Op::Linear {
                        tied: true,
                        out_features,
                        ..
                    } => (g.layers()[layer.inputs[0]].output.dims()[0] * out_features) as u64,
                    _ => 0,
                };
                assert_eq!(
                    plan.parameters().iter().sum::<usize>() as u64,
                    cost.params + own,
                    "{name} {}",
                    layer.name
                );
            }
        }
        let g = workloads::build(
            "gpt2",
            &BuildOptions {
                input_size: Some(vec![16]),
                width: 1.0,
            },
        )
        .unwrap();
        let i = g.find("h.0.attn.attention").unwrap();
        let LayerPlan::Attention(a) = LayerPlan::of(&g, &g.layers()[i], 3).unwrap() else {
            panic!()
        };
        assert!(a.stacked && a.form.causal && a.weight_arrays() == 2);
        assert_eq!((a.heads, a.d, a.seq, a.seq_kv), (12, 64, 16, 16));
        // Sample 2 of a stacked [3 x 768, 16] input: its queries, keys and values.
        let h = 768 * 16;
        assert_eq!(a.offsets(2), [6 * h, 7 * h, 8 * h]);
        let g = workloads::build(
            "bert-large",
            &BuildOptions {
                input_size: Some(vec![8]),
                width: 1.0,
            },
        )
        .unwrap();
        let i = g.find("encoder.layer.0.attention.self.attention").unwrap();
        let LayerPlan::Attention(a) = LayerPlan::of(&g, &g.layers()[i], 3).unwrap() else {
            panic!()
        };
        assert!(!a.stacked);
        assert_eq!(a.offsets(2), [2 * 1024 * 8; 3]);
    }

    #[test]
    fn a_transposed_convolution_is_its_adjoints_passes() {
        let mut g = Graph::new("t", vec![4, 6, 6]).unwrap();
        g.then(
            "up",
            Op::ConvTranspose(Box::new(Conv::new(3, &[2, 2]).stride(2))),
        )
        .unwrap();
        g.then("pool", Op::max_pool(Pool::new(&[2, 2]))).unwrap();
        let plan = LayerPlan::of(&g, &g.layers()[1], 2).unwrap();
        let LayerPlan::Conv {
            geometry,
            transposed,
            embed,
            ..
        } = &plan
        else {
            panic!("{plan:?}")
        };
        // The adjoint maps the 3x12x12 output to the 4x6x6 input.
        assert!(*transposed && embed.is_none());
        assert_eq!(
            (geometry.x.as_slice(), geometry.y.as_slice()),
            ([2, 3, 12, 12].as_slice(), [2, 4, 6, 6].as_slice())
        );
        assert_eq!(plan.parameters(), [4 * 3 * 2 * 2, 3]);
    }

    #[test]
    fn precisions_map_to_the_model_bytes_and_formats_they_are_predicted_with() {
        for p in Precision::ALL {
            let Some(e) = ExecPrecision::of(p) else {
                assert_eq!(p, Precision::Fp8);
                continue;
            };
            assert_eq!(e.storage.bytes() as u64, p.compute_bytes(), "{p:?}");
            assert_eq!(e.matrix.name(), p.matrix_format().name(), "{p:?}");
            assert_eq!(e.weight_copies(), p.has_master_weights(), "{p:?}");
            // cuDNN runs every storage's convolutions.
            assert!(crate::cuda::plan::ConvPlan::of(e.matrix).is_ok());
            assert_eq!(
                crate::cuda::plan::ConvPlan::of(e.matrix).unwrap().data,
                if p == Precision::Tf32 {
                    Element::F32
                } else {
                    e.storage
                }
            );
        }
        assert!(ExecPrecision::of(Precision::AmpFp16).unwrap().loss_scaling);
        assert!(!ExecPrecision::of(Precision::AmpBf16).unwrap().loss_scaling);
        assert!(!ExecPrecision::of(Precision::Fp32).unwrap().weight_copies());
    }

    #[test]
    fn loss_scale_halves_on_overflow_and_doubles_after_a_clean_interval() {
        let mut s = LossScaler::new();
        assert_eq!(s.scale, 65536.0);
        s.update(true);
        s.update(true);
        assert_eq!(s.scale, 16384.0);
        for _ in 0..LossScaler::GROWTH_INTERVAL - 1 {
            s.update(false);
        }
        assert_eq!(s.scale, 16384.0);
        // An overflow restarts the count.
        s.update(true);
        for _ in 0..LossScaler::GROWTH_INTERVAL - 1 {
            s.update(false);
        }
        assert_eq!(s.scale, 8192.0);
        s.update(false);
        assert_eq!(s.scale, 16384.0);
    }

    #[test]
    fn losses_and_matrix_weights_are_told_apart() {
        let g = workloads::build("deepcam", &BuildOptions::default()).unwrap();
        let plans: Vec<LayerPlan> = g
            .layers()
            .iter()
            .map(|l| LayerPlan::of(&g, l, 1).unwrap())
            .collect();
        let losses: Vec<usize> = (0..plans.len()).filter(|&i| plans[i].is_loss()).collect();
        assert_eq!(losses, [g.last()], "deepcam's one loss is its last layer");
        for (p, l) in plans.iter().zip(g.layers()) {
            let conv_or_dense =
                matches!(l.op, Op::Conv(_) | Op::ConvTranspose(_) | Op::Dense { .. });
            assert_eq!(p.is_matrix_weight(0), conv_or_dense, "{}", l.name);
            assert!(!p.is_matrix_weight(1));
        }
    }

    #[test]
    fn bias_gradients_launch_a_warp_per_run_or_a_thread_per_channel_and_rows() {
        // CosmoFlow's first layer at batch 2: 32 channels of 2 x 128^3, runs of 8,192.
        let n = 2 * 32 * 128usize.pow(3);
        assert_eq!(bias_grad_threads(32, 128usize.pow(3), n), 32 * 32 * 512);
        // Channels-last, or a linear layer over 1,024 tokens: a thread per channel and 256
        // rows.
        assert_eq!(bias_grad_threads(50_257, 1, 1024 * 50_257), 50_257 * 4);
        assert_eq!(bias_grad_threads(64, 1, 64 * 100), 64);
        assert_eq!(softmax_ce_threads(3, 1000), 1000);
        assert_eq!(softmax_ce_threads(50_257, 1000), 32_000);
        assert!(EXEC_SOURCE.contains("#define CE_WARP_CLASSES 32"));
        // The source's chunk sizes are the ones counted here.
        assert!(EXEC_SOURCE.contains(
            "#define CE_WARP_CLASSES 32
#define BIAS_ROWS 256"
        ));
        assert!(EXEC_SOURCE.contains("#define BIAS_RUN 8192"));
    }

    #[test]
    fn the_executor_kernels_are_defined_once_with_the_arguments_the_executor_pushes() {
        for (name, args) in [
            ("ex_fill", &["out", "v", "n"][..]),
            ("ex_uniform", &["out", "seed", "scale", "n"]),
            ("ex_uniform_f64", &["out", "seed", "scale", "n"]),
            ("ex_accumulate", &["out", "x", "n"]),
            (
                "ex_sgd",
                &["w", "dw", "copy", "overflow", "lr", "unscale", "n"],
            ),
            ("ex_check_finite", &["x", "overflow", "n"]),
            ("ex_bias_add", &["y", "bias", "a", "b", "n"]),
            ("ex_bias_grad", &["dy", "db", "a", "b", "n"]),
            (
                "ex_concat_fwd",
                &["x", "out", "a", "total", "offset", "b", "n"],
            ),
            (
                "ex_concat_bwd",
                &["x", "out", "a", "total", "offset", "b", "n"],
            ),
            (
                "ex_embed",
                &[
                    "x", "out", "i0", "i1", "i2", "p0", "p1", "p2", "o0", "o1", "o2", "n",
                ],
            ),
            (
                "ex_crop",
                &[
                    "x", "out", "i0", "i1", "i2", "p0", "p1", "p2", "o0", "o1", "o2", "n",
                ],
            ),
            (
                "ex_softmax_ce_fwd",
                &["x", "out", "c", "vol", "seed", "rows"],
            ),
            (
                "ex_softmax_ce_bwd",
                &["x", "dy", "dx", "c", "vol", "seed", "rows"],
            ),
            ("ex_softmax_fwd", &["x", "out", "c", "vol", "n"]),
            ("ex_softmax_bwd", &["y", "dy", "dx", "c", "vol", "n"]),
            ("ex_softmax_rows_fwd", &["x", "out", "c", "rows"]),
            ("ex_softmax_rows_bwd", &["y", "dy", "dx", "c", "rows"]),
            (
                "ex_norm_fwd",
                &["x", "out", "gamma", "beta", "stats", "c", "vol", "rms", "n"],
            ),
            (
                "ex_norm_bwd",
                &["x", "dy", "dx", "gamma", "stats", "c", "vol", "rms", "n"],
            ),
            (
                "ex_norm_param_grad",
                &["x", "dy", "stats", "dgamma", "dbeta", "c", "vol", "samples"],
            ),
            (
                "ex_lookup_fwd",
                &["ids", "table", "out", "vocab", "dim", "positions", "n"],
            ),
            (
                "ex_lookup_bwd",
                &["ids", "dy", "dtable", "vocab", "dim", "positions", "n"],
            ),
            (
                "ex_gather",
                &["x", "out", "f", "rx", "rout", "hashed", "salt", "n"],
            ),
            (
                "ex_scatter",
                &["x", "out", "f", "rx", "rout", "hashed", "salt", "n"],
            ),
            ("ex_attn_mask", &["x", "seq", "seq_kv", "causal", "n"]),
            ("ex_clamp_min", &["x", "lo", "n"]),
        ] {
            assert!(EXEC_KERNELS.contains(&name), "{name}");
            assert_eq!(parameters(EXEC_SOURCE, name), args, "{name}");
        }
    }
}
