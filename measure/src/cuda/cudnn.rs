//! Convolution through cuDNN's N-d API (feature `cuda`): descriptors owned by RAII wrappers
//! (destroyed on every path), the algorithms ranked by cuDNN's find API
//! (`cudnnFind*AlgorithmEx`, which runs each candidate on the real buffers) within a
//! workspace limit, the first few of them kept for the caller to time again
//! ([`Pass::candidates`]: find's own times are the host's when a call takes longer to issue
//! than to run), and the pass run with the algorithm selected. FP32 data with FP32 arithmetic
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

/// Distinct algorithms kept from find's ranking for the caller to time ([`Pass::candidates`]).
pub(crate) const RETIMED: usize = 3;

/// Find's time of a candidate after the first, at most this multiple of the first's plus
/// this many milliseconds, for the candidate to be kept. Find's times of micro-kernels read
/// the host (an H200 found cuDNN's precomputed implicit GEMM 1.0-5.1 times slower than the
/// implicit GEMM where it ran 10-40 times faster, 2026-11-26), while an algorithm that is
/// slow indeed (backward-data's `ALGO_0`: 0.3 s where `ALGO_1` ran in 0.25 ms) would cost
/// more to time again than the whole measurement.
pub(crate) const RETIME_SPAN: (f32, f32) = (2.0, 0.5);

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
    /// The distinct algorithms that ran and fit the workspace, in find's order (at most
    /// [`RETIMED`], at least one: [`Pass::find`] fails without): name, algorithm, workspace
    /// bytes.
    viable: Vec<(String, Algo, usize)>,
    /// Which of `viable` runs.
    chosen: usize,
}

/// One of find's candidates: its algorithm's name, whether it ran, its time (ms), its
/// workspace (bytes) and the algorithm.
type Ranked = (String, bool, f32, usize, Algo);

#[derive(Clone, Copy)]
enum Algo {
    Fwd(sys::cudnnConvolutionFwdAlgo_t),
    BwdData(sys::cudnnConvolutionBwdDataAlgo_t),
    BwdFilter(sys::cudnnConvolutionBwdFilterAlgo_t),
}

impl Pass {
    /// Describes `pass` of `g` in the number format of `plan` and lets cuDNN's find API
    /// rank the algorithms on the real buffers (elements of `plan.data`),
    /// `b.workspace_bytes` of workspace at most; the pass runs find's fastest until another
    /// is selected ([`Pass::select`]). Returns the pass and notes for the record (the
    /// algorithm, its workspace, the math type and find's candidates).
    pub(crate) fn find(
        handle: &Handle,
        g: &ConvGeometry,
        pass: ConvPass,
        with_bias: bool,
        plan: ConvPlan,
        b: Buffers,
    ) -> Result<(Pass, std::collections::BTreeMap<String, Value>), CudnnFailure> {
        let mut p = Pass {
            x: Tensor::strided(&g.x, &g.strides(&g.x), plan.data)?,
            w: Filter::new(&g.w, plan.data, g.channels_last)?,
            y: Tensor::strided(&g.y, &g.strides(&g.y), plan.data)?,
            bias: Tensor::typed(&g.bias, plan.data)?,
            conv: Convolution::new(g, plan)?,
            with_bias,
            viable: Vec::new(),
            chosen: 0,
        };
        // Each arm: (algorithm, status, time ms, memory) of every candidate, fastest first.
        let ranked: Vec<Ranked> = match pass {
            ConvPass::Backward => {
                return Err(CudnnFailure {
                    call: "cudnnFind*AlgorithmEx",
                    message: "the backward pass with both gradients in one call is imported \
                              from traces, not measured"
                        .into(),
                });
            }
            ConvPass::Forward => p.find_forward(handle, &b)?,
            ConvPass::BackwardData => p.find_backward_data(handle, &b)?,
            ConvPass::BackwardFilter => p.find_backward_filter(handle, &b)?,
        };
        let keep = viable(
            &ranked
                .iter()
                .map(|r| (r.0.as_str(), r.1, r.3, r.2))
                .collect::<Vec<_>>(),
            b.workspace_bytes,
            RETIMED,
        );
        if keep.is_empty() {
            return Err(CudnnFailure {
                call: NO_ALGORITHM,
                message: format!(
                    "cuDNN's find (cudnnFind*AlgorithmEx) gives no algorithm that runs within \
                     {} MiB of workspace ({} tried)",
                    b.workspace_bytes >> 20,
                    ranked.len()
                ),
            });
        }
        p.viable = keep
            .iter()
            .map(|&i| (ranked[i].0.clone(), ranked[i].4, ranked[i].3))
            .collect();
        p.select(0);
        let time = ranked[keep[0]].2;
        let notes = std::collections::BTreeMap::from([
            ("cudnn_algorithm".to_owned(), json!(p.algorithm())),
            ("cudnn_find_time_s".to_owned(), json!(f64::from(time) / 1e3)),
            ("cudnn_workspace_bytes".to_owned(), json!(p.workspace_bytes())),
            ("cudnn_math".to_owned(), json!(plan.math.name())),
            (
                "cudnn_candidates".to_owned(),
                ranked
                    .iter()
                    .map(|(n, ok, t, m, _)| json!({"algorithm": n, "ok": ok, "time_s": f64::from(*t) / 1e3, "workspace_bytes": m}))
                    .collect(),
            ),
        ]);
        Ok((p, notes))
    }

    /// The forward pass's candidates as cuDNN's find ranks them on the buffers `b`,
    /// fastest first.
    fn find_forward(&self, handle: &Handle, b: &Buffers) -> Result<Vec<Ranked>, CudnnFailure> {
        let mut returned = 0;
        // SAFETY: an all-zero bit pattern is a valid value of this plain C struct
        // (enums with a zero variant, numbers and an int array); cuDNN overwrites
        // the first `returned` entries.
        let mut perf: Vec<sys::cudnnConvolutionFwdAlgoPerf_t> =
            vec![unsafe { std::mem::zeroed() }; CANDIDATES];
        // SAFETY: handle and descriptors are live; the buffers are device
        // allocations sized by the pass's geometry (the backend allocates them from
        // the same geometry); `perf` has room for CANDIDATES results and the
        // workspace for `workspace_bytes`.
        status("cudnnFindConvolutionForwardAlgorithmEx", unsafe {
            sys::cudnnFindConvolutionForwardAlgorithmEx(
                handle.0,
                self.x.0,
                b.x,
                self.w.0,
                b.w,
                self.conv.0,
                self.y.0,
                b.y,
                CANDIDATES as i32,
                &mut returned,
                perf.as_mut_ptr(),
                b.workspace,
                b.workspace_bytes,
            )
        })?;
        perf.truncate(returned.max(0) as usize);
        Ok(perf
            .iter()
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
            .collect())
    }

    /// Backward-data's candidates as cuDNN's find ranks them on the buffers `b`,
    /// fastest first.
    fn find_backward_data(
        &self,
        handle: &Handle,
        b: &Buffers,
    ) -> Result<Vec<Ranked>, CudnnFailure> {
        let mut returned = 0;
        // SAFETY: as in `find_forward`.
        let mut perf: Vec<sys::cudnnConvolutionBwdDataAlgoPerf_t> =
            vec![unsafe { std::mem::zeroed() }; CANDIDATES];
        // SAFETY: as in `find_forward`; here `y` holds dy and `x` receives dx.
        status("cudnnFindConvolutionBackwardDataAlgorithmEx", unsafe {
            sys::cudnnFindConvolutionBackwardDataAlgorithmEx(
                handle.0,
                self.w.0,
                b.w,
                self.y.0,
                b.y,
                self.conv.0,
                self.x.0,
                b.x,
                CANDIDATES as i32,
                &mut returned,
                perf.as_mut_ptr(),
                b.workspace,
                b.workspace_bytes,
            )
        })?;
        perf.truncate(returned.max(0) as usize);
        Ok(perf
            .iter()
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
            .collect())
    }

    /// Backward-filter's candidates as cuDNN's find ranks them on the buffers `b`,
    /// fastest first.
    fn find_backward_filter(
        &self,
        handle: &Handle,
        b: &Buffers,
    ) -> Result<Vec<Ranked>, CudnnFailure> {
        let mut returned = 0;
        // SAFETY: as in `find_forward`.
        let mut perf: Vec<sys::cudnnConvolutionBwdFilterAlgoPerf_t> =
            vec![unsafe { std::mem::zeroed() }; CANDIDATES];
        // SAFETY: as in `find_forward`; here `y` holds dy and `w` receives dw.
        status("cudnnFindConvolutionBackwardFilterAlgorithmEx", unsafe {
            sys::cudnnFindConvolutionBackwardFilterAlgorithmEx(
                handle.0,
                self.x.0,
                b.x,
                self.y.0,
                b.y,
                self.conv.0,
                self.w.0,
                b.w,
                CANDIDATES as i32,
                &mut returned,
                perf.as_mut_ptr(),
                b.workspace,
                b.workspace_bytes,
            )
        })?;
        perf.truncate(returned.max(0) as usize);
        Ok(perf
            .iter()
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
            .collect())
    }

    /// How many algorithms the pass can run: the distinct ones that ran under find and fit
    /// the workspace, in find's order, at most [`RETIMED`].
    pub(crate) fn candidates(&self) -> usize {
        self.viable.len()
    }

    /// Runs candidate `i` (in find's order) from now on; out of range keeps the current one.
    pub(crate) fn select(&mut self, i: usize) {
        if i < self.viable.len() {
            self.chosen = i;
        }
    }

    /// The algorithm the pass runs.
    fn algo(&self) -> Algo {
        self.viable[self.chosen].1
    }

    /// The name of the algorithm the pass runs, as cuDNN spells it.
    pub(crate) fn algorithm(&self) -> &str {
        self.viable.get(self.chosen).map_or("", |v| v.0.as_str())
    }

    /// The workspace the selected algorithm needs, bytes.
    pub(crate) fn workspace_bytes(&self) -> usize {
        self.viable.get(self.chosen).map_or(0, |v| v.2)
    }

    /// Whether the pass owes a bias gradient (backward-filter of a layer with a bias), which
    /// the caller reduces from dy with its own kernel, as frameworks do: cuDNN's
    /// `cudnnConvolutionBackwardBias` refuses bf16 channels-last tensors
    /// (`CUDNN_STATUS_NOT_SUPPORTED`) and took 28 ms for fp16 channels-last where cuDNN's
    /// weight gradient took 1.7 ms (CosmoFlow's first layer at batch 4, H200, 2026-11-26).
    pub(crate) fn bias_gradient(&self) -> bool {
        self.with_bias && matches!(self.algo(), Algo::BwdFilter(_))
    }

    /// Runs the pass once (plus the bias term of forward when the layer has one).
    pub(crate) fn run(&self, handle: &Handle, b: Buffers) -> Result<(), CudnnFailure> {
        let (one, zero) = (1.0f32, 0.0f32);
        let (one, zero): (*const c_void, *const c_void) =
            ((&raw const one).cast(), (&raw const zero).cast());
        match self.algo() {
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

/// The candidates worth running from cuDNN's ranking (`(algorithm, ran, workspace bytes,
/// find's milliseconds)`, fastest first by find's clock): indices of those that ran and fit
/// the workspace `limit`, each algorithm once (find lists one per math type and workspace),
/// within [`RETIME_SPAN`] of the first one's time, at most `most`.
pub(crate) fn viable(ranked: &[(&str, bool, usize, f32)], limit: usize, most: usize) -> Vec<usize> {
    let mut keep: Vec<usize> = Vec::new();
    for (i, &(name, ok, memory, ms)) in ranked.iter().enumerate() {
        if keep.len() == most {
            break;
        }
        let near = keep
            .first()
            .is_none_or(|&f| ms <= RETIME_SPAN.0 * ranked[f].3 + RETIME_SPAN.1);
        if ok && memory <= limit && near && keep.iter().all(|&k| ranked[k].0 != name) {
            keep.push(i);
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_algorithms_that_ran_and_fit_are_kept_once_each_in_finds_order() {
        // Ranked fastest first: a failed one, one too big, then one algorithm twice (two
        // workspaces), then two more.
        let ranked = [
            ("A", false, 0, -1.0),
            ("B", true, 2 << 30, 0.1),
            ("C", true, 1 << 20, 0.2),
            ("C", true, 0, 0.3),
            ("D", true, 0, 0.4),
            ("E", true, 0, 0.5),
        ];
        assert_eq!(viable(&ranked, WORKSPACE_LIMIT, RETIMED), vec![2, 4, 5]);
        assert_eq!(viable(&ranked, WORKSPACE_LIMIT, 1), vec![2]);
        // Without workspace: the C that needs none, and B is out.
        assert_eq!(viable(&ranked, 0, RETIMED), vec![3, 4, 5]);
        assert!(viable(&[("A", false, 0, -1.0)], WORKSPACE_LIMIT, RETIMED).is_empty());
    }

    #[test]
    fn an_algorithm_find_timed_far_slower_than_the_first_is_not_timed_again() {
        // H200 backward-data, 2026-11-26: ALGO_1 in 0.15 ms by find, ALGO_0 in 300 ms.
        let ranked = [("ALGO_1", true, 0, 0.15), ("ALGO_0", true, 0, 300.0)];
        assert_eq!(viable(&ranked, WORKSPACE_LIMIT, RETIMED), vec![0]);
        // Within twice the first plus half a millisecond: kept (a micro-kernel whose find
        // time read the host).
        let ranked = [
            ("IMPLICIT", true, 0, 0.063),
            ("PRECOMP", true, 0, 0.32),
            ("X", true, 0, 0.7),
        ];
        assert_eq!(viable(&ranked, WORKSPACE_LIMIT, RETIMED), vec![0, 1]);
        // Long kernels: twice the first.
        let ranked = [
            ("A", true, 0, 10.0),
            ("B", true, 0, 20.4),
            ("C", true, 0, 21.0),
        ];
        assert_eq!(viable(&ranked, WORKSPACE_LIMIT, RETIMED), vec![0, 1]);
    }
}
