//! The ops cuBLAS runs, forward and backward side by side: dense layers, linear layers at
//! every position and products of two activations, on row-major operands through cuBLAS's
//! column-major GEMMs in the precision's matrix format with FP32 accumulation.

use std::ffi::c_void;

use cudarc::cublas;

use super::GpuExecutor;
use super::pass::Pass;
use crate::cuda::enabled::device::{call, compute_type, data_type};
use crate::cuda::plan::GemmPlan;
use crate::error::{Error, Result};

impl GpuExecutor<'_> {
    /// A dense layer's forward pass (`n` samples, `input` to `output` features): row-major
    /// `y [n x out] = x [n x in] W^T`, `W [out x in]`, as column-major `y^T (out x n) =
    /// W^T' (out x in) x^T (in x n)`; then the bias.
    pub(super) fn dense_forward(
        &mut self,
        p: &Pass,
        (n, input, output): (usize, usize, usize),
        bias: bool,
    ) -> Result<()> {
        self.gemm(
            p.blas,
            (true, false),
            (output, n, input),
            (self.param(p.i, 0), input),
            (p.x(), input),
            (p.y, output),
        )?;
        if bias {
            self.bias_add(p.i, p.y, output, p.n_out)?;
        }
        Ok(())
    }

    /// A dense layer's backward pass: `dx^T (in x n) = W^T (in x out, column-major W)
    /// dy^T (out x n)` where the input needs it, `dW^T (in x out) = x^T (in x n) dy (n x
    /// out)`, the bias's gradient.
    pub(super) fn dense_backward(
        &mut self,
        p: &Pass,
        (n, input, output): (usize, usize, usize),
        bias: bool,
    ) -> Result<()> {
        if p.dx0() != 0 {
            self.gemm(
                p.blas,
                (false, false),
                (input, n, output),
                (self.param(p.i, 0), input),
                (p.dy, output),
                (p.dx0(), input),
            )?;
        }
        self.gemm(
            p.blas,
            (false, true),
            (input, output, n),
            (p.x(), input),
            (p.dy, output),
            (self.dparam(p.i, 0), input),
        )?;
        if bias {
            self.bias_grad(p.i, p.dy, output, p.n_out)?;
        }
        Ok(())
    }

    /// A linear layer's forward pass at every position: `y [out x vol] = W [out x c] x [c
    /// x vol]` per sample (`n` of them), one strided batched GEMM; then the bias.
    pub(super) fn linear_forward(
        &mut self,
        p: &Pass,
        (n, c, out, vol): (usize, usize, usize, usize),
        bias: bool,
    ) -> Result<()> {
        self.gemm_rows(
            p.blas,
            (false, false),
            (out, vol, c),
            Mat::new(self.param(p.i, 0), c, 0),
            Mat::new(p.x(), vol, c * vol),
            Mat::new(p.y, vol, out * vol),
            n,
            false,
        )?;
        if bias {
            self.bias_add(p.i, p.y, out, p.n_out)?;
        }
        Ok(())
    }

    /// A linear layer's backward pass: `dx [c x vol] = W^T dy` per sample where the input
    /// needs it, `dW [out x c]` the sum over samples of `dy x^T` (accumulated sample by
    /// sample), the bias's gradient.
    pub(super) fn linear_backward(
        &mut self,
        p: &Pass,
        (n, c, out, vol): (usize, usize, usize, usize),
        bias: bool,
    ) -> Result<()> {
        let w = self.param(p.i, 0);
        if p.dx0() != 0 {
            self.gemm_rows(
                p.blas,
                (true, false),
                (c, vol, out),
                Mat::new(w, c, 0),
                Mat::new(p.dy, vol, out * vol),
                Mat::new(p.dx0(), vol, c * vol),
                n,
                false,
            )?;
        }
        let dw = self.dparam(p.i, 0);
        for b in 0..n {
            self.gemm_rows(
                p.blas,
                (false, true),
                (out, c, vol),
                Mat::new(self.at(p.dy, b * out * vol), vol, 0),
                Mat::new(self.at(p.x(), b * c * vol), vol, 0),
                Mat::new(dw, c, 0),
                1,
                b > 0,
            )?;
        }
        if bias {
            self.bias_grad(p.i, p.dy, out, p.n_out)?;
        }
        Ok(())
    }

    /// A product of two activations' forward pass: `calls` products `C [m x p] = A [m x
    /// k] B [k x p]`, one strided batched GEMM.
    pub(super) fn matmul_forward(
        &mut self,
        pass: &Pass,
        (calls, m, k, p): (usize, usize, usize, usize),
    ) -> Result<()> {
        self.gemm_rows(
            pass.blas,
            (false, false),
            (m, p, k),
            Mat::new(pass.x(), k, m * k),
            Mat::new(pass.x2(), p, k * p),
            Mat::new(pass.y, p, m * p),
            calls,
            false,
        )
    }

    /// A product of two activations' backward pass: `dA [m x k] = dC B^T` and `dB [k x
    /// p] = A^T dC`, each where its input needs it.
    pub(super) fn matmul_backward(
        &mut self,
        pass: &Pass,
        (calls, m, k, p): (usize, usize, usize, usize),
    ) -> Result<()> {
        if pass.dx0() != 0 {
            self.gemm_rows(
                pass.blas,
                (false, true),
                (m, k, p),
                Mat::new(pass.dy, p, m * p),
                Mat::new(pass.x2(), p, k * p),
                Mat::new(pass.dx0(), k, m * k),
                calls,
                false,
            )?;
        }
        if let Some(&db) = pass.dx.get(1).filter(|&&d| d != 0) {
            self.gemm_rows(
                pass.blas,
                (true, false),
                (k, p, m),
                Mat::new(pass.x(), k, m * k),
                Mat::new(pass.dy, p, m * p),
                Mat::new(db, p, k * p),
                calls,
                false,
            )?;
        }
        Ok(())
    }

    /// Row-major `C = op(A) op(B)` (`m x n`, inner dimension `k`; `op` transposes where
    /// asked) for `batch` products at the operands' strides, through cuBLAS's column-major
    /// strided batched GEMM on the transposes (`C^T = op(B)^T op(A)^T`), in the precision's
    /// matrix format with FP32 accumulation; `accumulate` adds into `C`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gemm_rows(
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

/// One operand of [`GpuExecutor::gemm_rows`]: a device pointer, the row-major leading
/// dimension, and the elements between consecutive products.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mat {
    ptr: u64,
    ld: usize,
    stride: usize,
}

impl Mat {
    pub(super) fn new(ptr: u64, ld: usize, stride: usize) -> Mat {
        Mat { ptr, ld, stride }
    }
}
