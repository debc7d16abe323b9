//! Convolution through cuDNN's N-d API (feature `cuda`): descriptors owned by RAII wrappers
//! (destroyed on every path), the fastest algorithm chosen by cuDNN's find API
//! (`cudnnFind*AlgorithmEx`, which runs each candidate on the real buffers) within a
//! workspace limit, and the pass run with that algorithm. FP32 data with FP32 arithmetic
//! (`CUDNN_FMA_MATH`: no TF32 tensor cores, so that an `fp32` record is fp32).

// Every cuDNN call is a foreign call; each `unsafe` block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::c_void;

use cudarc::cudnn::{result, sys};
use serde_json::{Value, json};

use super::plan::{ConvGeometry, ConvMath, ConvPlan, Element, PoolGeometry, packed_strides};
use crate::backend::ConvPass;

/// Most workspace the find API may use, bytes.
pub(crate) const WORKSPACE_LIMIT: usize = 1 << 30;

/// Algorithms the find API is asked to rank.
const CANDIDATES: usize = 16;

/// A cuDNN error with the call that failed.
/// The `call` of a [`CudnnFailure`] where cuDNN runs no algorithm for a convolution: the
/// case is declined, not failed ([`crate::Error::Declined`]).
pub(crate) const NO_ALGORITHM: &str = "no algorithm";

pub(crate) struct CudnnFailure {
    /// The call.
    pub(crate) call: &'static str,
    /// cuDNN's status.
    pub(crate) message: String,
}

fn check(call: &'static str, r: Result<(), result::CudnnError>) -> Result<(), CudnnFailure> {
    r.map_err(|e| CudnnFailure {
        call,
        message: format!("{e:?}"),
    })
}

fn status(call: &'static str, s: sys::cudnnStatus_t) -> Result<(), CudnnFailure> {
    check(call, s.result())
}

/// A cuDNN handle bound to a stream.
pub(crate) struct Handle(sys::cudnnHandle_t);

impl Handle {
    /// A handle issuing work on `stream`.
    pub(crate) fn new(stream: sys::cudaStream_t) -> Result<Handle, CudnnFailure> {
        let handle = Handle(result::create_handle().map_err(|e| CudnnFailure {
            call: "cudnnCreate",
            message: format!("{e:?}"),
        })?);
        // SAFETY: the handle was just created and `stream` is a live stream of the
        // backend's context (it outlives the handle, which the backend drops first).
        check("cudnnSetStream", unsafe {
            result::set_stream(handle.0, stream)
        })?;
        Ok(handle)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: created by `cudnnCreate` and destroyed only here. A failure cannot be
        // reported from drop; the handle is gone either way.
        let _ = unsafe { result::destroy_handle(self.0) };
    }
}

/// cuDNN's data type of an element type.
fn data_type(e: Element) -> sys::cudnnDataType_t {
    match e {
        Element::F64 => sys::cudnnDataType_t::CUDNN_DATA_DOUBLE,
        Element::F32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        Element::F16 => sys::cudnnDataType_t::CUDNN_DATA_HALF,
        Element::Bf16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
    }
}

/// cuDNN's math type.
fn math_type(m: ConvMath) -> sys::cudnnMathType_t {
    match m {
        ConvMath::Fma => sys::cudnnMathType_t::CUDNN_FMA_MATH,
        ConvMath::Default => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
        ConvMath::TensorOp => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
    }
}

/// A tensor descriptor (packed).
pub(crate) struct Tensor(sys::cudnnTensorDescriptor_t);

impl Tensor {
    /// An FP32 tensor.
    fn new(dims: &[i32]) -> Result<Tensor, CudnnFailure> {
        Tensor::typed(dims, Element::F32)
    }

    fn typed(dims: &[i32], element: Element) -> Result<Tensor, CudnnFailure> {
        Tensor::strided(dims, &packed_strides(dims), element)
    }

    /// A tensor of `dims` laid out with `strides`.
    fn strided(dims: &[i32], strides: &[i32], element: Element) -> Result<Tensor, CudnnFailure> {
        let t = Tensor(
            result::create_tensor_descriptor().map_err(|e| CudnnFailure {
                call: "cudnnCreateTensorDescriptor",
                message: format!("{e:?}"),
            })?,
        );
        // SAFETY: the descriptor is live; `dims` and `strides` hold `dims.len()` ints each
        // (the callers derive the strides from the dims) and outlive the call (cuDNN
        // copies them).
        check("cudnnSetTensorNdDescriptor", unsafe {
            result::set_tensornd_descriptor(
                t.0,
                data_type(element),
                dims.len() as i32,
                dims.as_ptr(),
                strides.as_ptr(),
            )
        })?;
        Ok(t)
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        // SAFETY: created above and destroyed only here.
        let _ = unsafe { result::destroy_tensor_descriptor(self.0) };
    }
}

/// A filter descriptor: dims KCRS, in memory KCRS or (channels last) KRSC.
struct Filter(sys::cudnnFilterDescriptor_t);

impl Filter {
    fn new(dims: &[i32], element: Element, channels_last: bool) -> Result<Filter, CudnnFailure> {
        let f = Filter(
            result::create_filter_descriptor().map_err(|e| CudnnFailure {
                call: "cudnnCreateFilterDescriptor",
                message: format!("{e:?}"),
            })?,
        );
        // SAFETY: the descriptor is live; `dims` holds `dims.len()` ints.
        check("cudnnSetFilterNdDescriptor", unsafe {
            result::set_filternd_descriptor(
                f.0,
                data_type(element),
                if channels_last {
                    sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC
                } else {
                    sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW
                },
                dims.len() as i32,
                dims.as_ptr(),
            )
        })?;
        Ok(f)
    }
}

impl Drop for Filter {
    fn drop(&mut self) {
        // SAFETY: created above and destroyed only here.
        let _ = unsafe { result::destroy_filter_descriptor(self.0) };
    }
}

/// A convolution descriptor.
struct Convolution(sys::cudnnConvolutionDescriptor_t);

impl Convolution {
    fn new(g: &ConvGeometry, plan: ConvPlan) -> Result<Convolution, CudnnFailure> {
        let c = Convolution(
            result::create_convolution_descriptor().map_err(|e| CudnnFailure {
                call: "cudnnCreateConvolutionDescriptor",
                message: format!("{e:?}"),
            })?,
        );
        // SAFETY: the descriptor is live; the three arrays hold `pads.len()` ints each.
        check("cudnnSetConvolutionNdDescriptor", unsafe {
            result::set_convolutionnd_descriptor(
                c.0,
                g.pads.len() as i32,
                g.pads.as_ptr(),
                g.strides.as_ptr(),
                g.dilations.as_ptr(),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                data_type(plan.compute),
            )
        })?;
        // SAFETY: the descriptor is live.
        check("cudnnSetConvolutionMathType", unsafe {
            result::set_convolution_math_type(c.0, math_type(plan.math))
        })?;
        // SAFETY: the descriptor is live.
        check("cudnnSetConvolutionGroupCount", unsafe {
            result::set_convolution_group_count(c.0, g.groups)
        })?;
        Ok(c)
    }
}

impl Drop for Convolution {
    fn drop(&mut self) {
        // SAFETY: created above and destroyed only here.
        let _ = unsafe { result::destroy_convolution_descriptor(self.0) };
    }
}

/// Device pointers of a pass's buffers: input (or input gradient), filter (or filter
/// gradient), output (or output gradient), bias (or bias gradient), workspace.
#[derive(Clone, Copy)]
pub(crate) struct Buffers {
    pub(crate) x: *mut c_void,
    pub(crate) w: *mut c_void,
    pub(crate) y: *mut c_void,
    pub(crate) bias: *mut c_void,
    pub(crate) workspace: *mut c_void,
    pub(crate) workspace_bytes: usize,
}

/// One convolution pass, described and with its algorithm chosen.
pub(crate) struct Pass {
    x: Tensor,
    w: Filter,
    y: Tensor,
    bias: Tensor,
    conv: Convolution,
    with_bias: bool,
    algo: Algo,
}

#[derive(Clone, Copy)]
enum Algo {
    Fwd(sys::cudnnConvolutionFwdAlgo_t),
    BwdData(sys::cudnnConvolutionBwdDataAlgo_t),
    BwdFilter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

impl Pass {
    /// Describes `pass` of `g` in the number format of `plan` and lets cuDNN's find API
    /// pick the fastest algorithm on the real buffers (elements of `plan.data`),
    /// `b.workspace_bytes` of workspace at most. Returns the pass, the workspace it needs,
    /// and notes for the record (the algorithm, the math type and the candidates).
    pub(crate) fn find(
        handle: &Handle,
        g: &ConvGeometry,
        pass: ConvPass,
        with_bias: bool,
        plan: ConvPlan,
        b: Buffers,
    ) -> Result<(Pass, usize, std::collections::BTreeMap<String, Value>), CudnnFailure> {
        let mut p = Pass {
            x: Tensor::strided(&g.x, &g.strides(&g.x), plan.data)?,
            w: Filter::new(&g.w, plan.data, g.channels_last)?,
            y: Tensor::strided(&g.y, &g.strides(&g.y), plan.data)?,
            bias: Tensor::typed(&g.bias, plan.data)?,
            conv: Convolution::new(g, plan)?,
            with_bias,
            algo: Algo::Fwd(
                sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
            ),
        };
        let mut returned = 0;
        // Each arm: (algorithm, status, time ms, memory) of every candidate, fastest first.
        let ranked: Vec<(String, bool, f32, usize, Algo)> = match pass {
            ConvPass::Backward => {
                return Err(CudnnFailure {
                    call: "cudnnFind*AlgorithmEx",
                    message: "the backward pass with both gradients in one call is imported \
                              from traces, not measured"
                        .into(),
                });
            }
            ConvPass::Forward => {
                // SAFETY: an all-zero bit pattern is a valid value of this plain C struct
                // (enums with a zero variant, numbers and an int array); cuDNN overwrites
                // the first `returned` entries.
                let mut perf: Vec<sys::cudnnConvolutionFwdAlgoPerf_t> =
                    vec![unsafe { std::mem::zeroed() }; CANDIDATES];
                // SAFETY: handle and descriptors are live; the buffers are device
                // allocations sized by `g` for this pass (the backend allocates them from
                // the same geometry); `perf` has room for CANDIDATES results and the
                // workspace for `workspace_bytes`.
                status("cudnnFindConvolutionForwardAlgorithmEx", unsafe {
                    sys::cudnnFindConvolutionForwardAlgorithmEx(
                        handle.0,
                        p.x.0,
                        b.x,
                        p.w.0,
                        b.w,
                        p.conv.0,
                        p.y.0,
                        b.y,
                        CANDIDATES as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                        b.workspace,
                        b.workspace_bytes,
                    )
                })?;
                perf.truncate(returned.max(0) as usize);
                perf.iter()
                    .map(|r| {
                        let ok = r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
                        (
                            format!("{:?}", r.algo),
                            ok,
                            r.time,
                            r.memory,
                            Algo::Fwd(r.algo),
                        )
                    })
                    .collect()
            }
            ConvPass::BackwardData => {
                // SAFETY: as above.
                let mut perf: Vec<sys::cudnnConvolutionBwdDataAlgoPerf_t> =
                    vec![unsafe { std::mem::zeroed() }; CANDIDATES];
                // SAFETY: as above; here `y` holds dy and `x` receives dx.
                status("cudnnFindConvolutionBackwardDataAlgorithmEx", unsafe {
                    sys::cudnnFindConvolutionBackwardDataAlgorithmEx(
                        handle.0,
                        p.w.0,
                        b.w,
                        p.y.0,
                        b.y,
                        p.conv.0,
                        p.x.0,
                        b.x,
                        CANDIDATES as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                        b.workspace,
                        b.workspace_bytes,
                    )
                })?;
                perf.truncate(returned.max(0) as usize);
                perf.iter()
                    .map(|r| {
                        let ok = r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
                        (
                            format!("{:?}", r.algo),
                            ok,
                            r.time,
                            r.memory,
                            Algo::BwdData(r.algo),
                        )
                    })
                    .collect()
            }
            ConvPass::BackwardFilter => {
                // SAFETY: as above.
                let mut perf: Vec<sys::cudnnConvolutionBwdFilterAlgoPerf_t> =
                    vec![unsafe { std::mem::zeroed() }; CANDIDATES];
                // SAFETY: as above; here `y` holds dy and `w` receives dw.
                status("cudnnFindConvolutionBackwardFilterAlgorithmEx", unsafe {
                    sys::cudnnFindConvolutionBackwardFilterAlgorithmEx(
                        handle.0,
                        p.x.0,
                        b.x,
                        p.y.0,
                        b.y,
                        p.conv.0,
                        p.w.0,
                        b.w,
                        CANDIDATES as i32,
                        &mut returned,
                        perf.as_mut_ptr(),
                        b.workspace,
                        b.workspace_bytes,
                    )
                })?;
                perf.truncate(returned.max(0) as usize);
                perf.iter()
                    .map(|r| {
                        let ok = r.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS;
                        (
                            format!("{:?}", r.algo),
                            ok,
                            r.time,
                            r.memory,
                            Algo::BwdFilter(r.algo),
                        )
                    })
                    .collect()
            }
        };
        let chosen = choose(
            &ranked.iter().map(|r| (r.1, r.3)).collect::<Vec<_>>(),
            b.workspace_bytes,
        )
        .ok_or_else(|| CudnnFailure {
            call: NO_ALGORITHM,
            message: format!(
                "cuDNN's find (cudnnFind*AlgorithmEx) gives no algorithm that runs within {} MiB \
                 of workspace ({} tried)",
                b.workspace_bytes >> 20,
                ranked.len()
            ),
        })?;
        let (name, _, time, memory, algo) = &ranked[chosen];
        p.algo = *algo;
        let notes = std::collections::BTreeMap::from([
            ("cudnn_algorithm".to_owned(), json!(name)),
            ("cudnn_find_time_s".to_owned(), json!(f64::from(*time) / 1e3)),
            ("cudnn_workspace_bytes".to_owned(), json!(memory)),
            ("cudnn_math".to_owned(), json!(plan.math.name())),
            (
                "cudnn_candidates".to_owned(),
                ranked
                    .iter()
                    .map(|(n, ok, t, m, _)| json!({"algorithm": n, "ok": ok, "time_s": f64::from(*t) / 1e3, "workspace_bytes": m}))
                    .collect(),
            ),
        ]);
        Ok((p, *memory, notes))
    }

    /// Whether the pass owes a bias gradient (backward-filter of a layer with a bias), which
    /// the caller reduces from dy with its own kernel, as frameworks do: cuDNN's
    /// `cudnnConvolutionBackwardBias` refuses bf16 channels-last tensors
    /// (`CUDNN_STATUS_NOT_SUPPORTED`) and took 28 ms for fp16 channels-last where cuDNN's
    /// weight gradient took 1.7 ms (CosmoFlow's first layer at batch 4, H200, 2026-11-26).
    pub(crate) fn bias_gradient(&self) -> bool {
        self.with_bias && matches!(self.algo, Algo::BwdFilter(_))
    }

    /// Runs the pass once (plus the bias term of forward when the layer has one).
    pub(crate) fn run(&self, handle: &Handle, b: Buffers) -> Result<(), CudnnFailure> {
        let (one, zero) = (1.0f32, 0.0f32);
        let (one, zero): (*const c_void, *const c_void) =
            ((&raw const one).cast(), (&raw const zero).cast());
        match self.algo {
            Algo::Fwd(a) => {
                // SAFETY: live handle and descriptors; buffers sized by the geometry these
                // descriptors were made from; workspace at least what `find` reported.
                status("cudnnConvolutionForward", unsafe {
                    sys::cudnnConvolutionForward(
                        handle.0,
                        one,
                        self.x.0,
                        b.x,
                        self.w.0,
                        b.w,
                        self.conv.0,
                        a,
                        b.workspace,
                        b.workspace_bytes,
                        zero,
                        self.y.0,
                        b.y,
                    )
                })?;
                if self.with_bias {
                    // SAFETY: the bias tensor [1, c_out, 1...] broadcasts over y.
                    status("cudnnAddTensor", unsafe {
                        sys::cudnnAddTensor(handle.0, one, self.bias.0, b.bias, one, self.y.0, b.y)
                    })?;
                }
            }
            Algo::BwdData(a) => {
                // SAFETY: as above, dy in `y`, dx written to `x`.
                status("cudnnConvolutionBackwardData", unsafe {
                    sys::cudnnConvolutionBackwardData(
                        handle.0,
                        one,
                        self.w.0,
                        b.w,
                        self.y.0,
                        b.y,
                        self.conv.0,
                        a,
                        b.workspace,
                        b.workspace_bytes,
                        zero,
                        self.x.0,
                        b.x,
                    )
                })?;
            }
            Algo::BwdFilter(a) => {
                // SAFETY: as above, dy in `y`, dw written to `w`.
                status("cudnnConvolutionBackwardFilter", unsafe {
                    sys::cudnnConvolutionBackwardFilter(
                        handle.0,
                        one,
                        self.x.0,
                        b.x,
                        self.y.0,
                        b.y,
                        self.conv.0,
                        a,
                        b.workspace,
                        b.workspace_bytes,
                        zero,
                        self.w.0,
                        b.w,
                    )
                })?;
                // The bias gradient is the caller's ([`Self::bias_gradient`]).
            }
        }
        Ok(())
    }
}

/// A pooling descriptor.
struct PoolingDesc(sys::cudnnPoolingDescriptor_t);

impl Drop for PoolingDesc {
    fn drop(&mut self) {
        // SAFETY: created by `cudnnCreatePoolingDescriptor` and destroyed only here.
        let _ = unsafe { sys::cudnnDestroyPoolingDescriptor(self.0) };
    }
}

/// Device pointers of a pooling or batch-norm pass: the input and its gradient, the output
/// and its gradient, and (batch norm) the per-channel scale, bias, running and saved
/// statistics and the parameter gradients, in that order.
#[derive(Clone, Copy)]
pub(crate) struct OpBuffers {
    pub(crate) x: *mut c_void,
    pub(crate) dx: *mut c_void,
    pub(crate) y: *mut c_void,
    pub(crate) dy: *mut c_void,
    pub(crate) channel: [*mut c_void; 8],
}

/// A pooling or batch-norm layer, described for cuDNN.
pub(crate) enum Layer {
    /// Pooling.
    Pool {
        /// The window.
        desc: PoolingDescHandle,
        /// Input.
        x: Tensor,
        /// Output.
        y: Tensor,
    },
    /// Batch normalisation over the batch and spatial positions, per channel.
    BatchNorm {
        /// Input (and output, and their gradients).
        x: Tensor,
        /// Per-channel parameters `[1, c, 1...]`.
        channel: Tensor,
    },
}

/// A pooling descriptor held by a [`Layer`].
pub(crate) struct PoolingDescHandle(PoolingDesc);

/// Batch norm's epsilon and running-average factor (the frameworks' defaults).
const BN_EPSILON: f64 = 1e-5;
const BN_MOMENTUM: f64 = 0.1;

impl Layer {
    /// A pooling layer of geometry `g` on tensors of `element`.
    pub(crate) fn pool(g: &PoolGeometry, element: Element) -> Result<Layer, CudnnFailure> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` is a valid place for the new descriptor.
        status("cudnnCreatePoolingDescriptor", unsafe {
            sys::cudnnCreatePoolingDescriptor(&mut raw)
        })?;
        let desc = PoolingDesc(raw);
        let mode = if g.max {
            sys::cudnnPoolingMode_t::CUDNN_POOLING_MAX
        } else {
            sys::cudnnPoolingMode_t::CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
        };
        // SAFETY: the descriptor is live; window, padding and stride hold `window.len()`
        // ints each.
        status("cudnnSetPoolingNdDescriptor", unsafe {
            sys::cudnnSetPoolingNdDescriptor(
                desc.0,
                mode,
                sys::cudnnNanPropagation_t::CUDNN_NOT_PROPAGATE_NAN,
                g.window.len() as i32,
                g.window.as_ptr(),
                g.pads.as_ptr(),
                g.strides.as_ptr(),
            )
        })?;
        Ok(Layer::Pool {
            desc: PoolingDescHandle(desc),
            x: Tensor::typed(&g.x, element)?,
            y: Tensor::typed(&g.y, element)?,
        })
    }

    /// A batch-norm layer on input `x` dims `[n, c, spatial...]` of `element`; the
    /// per-channel parameters and statistics are FP32 whatever the input (cuDNN's derived
    /// type for FP32, FP16 and BF16 data).
    pub(crate) fn batch_norm(x: &[i32], element: Element) -> Result<Layer, CudnnFailure> {
        let mut channel = vec![1; x.len()];
        channel[1] = x[1];
        Ok(Layer::BatchNorm {
            x: Tensor::typed(x, element)?,
            channel: Tensor::new(&channel)?,
        })
    }

    /// Runs the forward (else backward) pass once.
    pub(crate) fn run(
        &self,
        handle: &Handle,
        forward: bool,
        b: OpBuffers,
    ) -> Result<(), CudnnFailure> {
        let (one, zero) = (1.0f32, 0.0f32);
        let (one, zero): (*const c_void, *const c_void) =
            ((&raw const one).cast(), (&raw const zero).cast());
        let c = b.channel;
        match (self, forward) {
            (Layer::Pool { desc, x, y }, true) => {
                // SAFETY: live handle and descriptors; `x` and `y` are device buffers of the
                // descriptors' sizes.
                status("cudnnPoolingForward", unsafe {
                    sys::cudnnPoolingForward(handle.0, desc.0.0, one, x.0, b.x, zero, y.0, b.y)
                })
            }
            (Layer::Pool { desc, x, y }, false) => {
                // SAFETY: as above; dy has y's size and dx has x's.
                status("cudnnPoolingBackward", unsafe {
                    sys::cudnnPoolingBackward(
                        handle.0, desc.0.0, one, y.0, b.y, y.0, b.dy, x.0, b.x, zero, x.0, b.dx,
                    )
                })
            }
            (Layer::BatchNorm { x, channel }, true) => {
                // SAFETY: live handle and descriptors; x and y hold the input's elements,
                // the eight channel buffers `c` floats each (scale, bias, running mean and
                // variance, saved mean and inverse variance, and the two gradients).
                status("cudnnBatchNormalizationForwardTraining", unsafe {
                    sys::cudnnBatchNormalizationForwardTraining(
                        handle.0,
                        sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL,
                        one,
                        zero,
                        x.0,
                        b.x,
                        x.0,
                        b.y,
                        channel.0,
                        c[0],
                        c[1],
                        BN_MOMENTUM,
                        c[2],
                        c[3],
                        BN_EPSILON,
                        c[4],
                        c[5],
                    )
                })
            }
            (Layer::BatchNorm { x, channel }, false) => {
                // SAFETY: as above; dy and dx hold the input's elements; the saved statistics
                // are those a forward pass on the same buffers wrote.
                status("cudnnBatchNormalizationBackward", unsafe {
                    sys::cudnnBatchNormalizationBackward(
                        handle.0,
                        sys::cudnnBatchNormMode_t::CUDNN_BATCHNORM_SPATIAL,
                        one,
                        zero,
                        one,
                        zero,
                        x.0,
                        b.x,
                        x.0,
                        b.dy,
                        x.0,
                        b.dx,
                        channel.0,
                        c[0],
                        c[6],
                        c[7],
                        BN_EPSILON,
                        c[4],
                        c[5],
                    )
                })
            }
        }
    }
}

/// The algorithm to use from cuDNN's ranking (fastest first): the first that succeeded and
/// fits the workspace limit.
pub(crate) fn choose(ranked: &[(bool, usize)], limit: usize) -> Option<usize> {
    ranked
        .iter()
        .position(|&(ok, memory)| ok && memory <= limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fastest_algorithm_that_succeeded_and_fits_is_chosen() {
        // Ranked fastest first: a failed one, one too big, then two that fit.
        let ranked = [(false, 0), (true, 2 << 30), (true, 1 << 20), (true, 0)];
        assert_eq!(choose(&ranked, WORKSPACE_LIMIT), Some(2));
        assert_eq!(choose(&ranked, 0), Some(3));
        assert_eq!(choose(&[(false, 0)], WORKSPACE_LIMIT), None);
    }
}
