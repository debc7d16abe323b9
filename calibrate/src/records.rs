//! Records files as the fits read them, and the error that names a record in one.

use ridgeline_measure::ConvPass;
use ridgeline_measure::record::{self, Measured, Record};
use ridgeline_model::kernels::{ConvShape, Kernel, KernelClass, KernelPass, gemm_kernel};

use crate::error::{Error, Result};

/// A records file, read.
#[derive(Debug, Clone)]
pub struct RecordFile {
    /// Path as given.
    pub path: String,
    /// Its records.
    pub records: Vec<Record>,
}

/// The error for record `r` of `file`: what is wrong with it.
pub(crate) fn record_error(file: &str, r: &Record, message: impl Into<String>) -> Error {
    Error::Record {
        file: file.to_owned(),
        id: r.id.clone(),
        message: message.into(),
    }
}

/// The kernels of convolution record `r` of `file`; an error naming the record for a shape
/// that cannot run.
pub(crate) fn conv_kernels(file: &str, r: &Record, s: &record::ConvShape) -> Result<Vec<Kernel>> {
    conv_shape_kernels(s).map_err(|message| record_error(file, r, message))
}

/// The kernels of a convolution shape: one per pass, two for both gradients in one call; an
/// error saying what is wrong with a shape that cannot run.
pub(crate) fn conv_shape_kernels(
    s: &record::ConvShape,
) -> std::result::Result<Vec<Kernel>, &'static str> {
    let rank = s.input.len();
    if [
        s.kernel.len(),
        s.stride.len(),
        s.padding.len(),
        s.dilation.len(),
    ]
    .iter()
    .any(|&l| l != rank)
        || s.groups == 0
    {
        return Err("conv shape: lists of unequal rank or zero groups");
    }
    let mut output = Vec::with_capacity(rank);
    for d in 0..rank {
        let span = s.dilation[d] * (s.kernel[d].max(1) - 1) + 1;
        let padded = s.input[d] + s.padding[d][0] + s.padding[d][1];
        if span > padded || s.stride[d] == 0 {
            return Err("conv shape: kernel larger than padded input");
        }
        output.push((padded - span) / s.stride[d] + 1);
    }
    let shape = ConvShape {
        batch: s.n,
        c_in: s.c_in,
        c_out: s.c_out,
        input: s.input.clone(),
        output,
        kernel: s.kernel.clone(),
        stride: s.stride.clone(),
        padded: s.padding.iter().any(|p| p[0] > 0 || p[1] > 0),
        groups: s.groups,
    };
    Ok(match s.pass {
        ConvPass::Forward => vec![shape.kernel(KernelPass::Forward)],
        ConvPass::BackwardData => vec![shape.kernel(KernelPass::BackwardData)],
        ConvPass::BackwardFilter => vec![shape.kernel(KernelPass::BackwardFilter)],
        ConvPass::Backward => both_gradients(
            shape.kernel(KernelPass::BackwardData),
            shape.kernel(KernelPass::BackwardFilter),
        ),
    })
}

/// Both gradients measured in one call: each backward pass's fit gets the sum of the two
/// kernels' features, so that with the two passes' fits alike the layer's two predicted
/// kernels add up to the call.
pub(crate) fn both_gradients(data: Kernel, filter: Kernel) -> Vec<Kernel> {
    let mut x = data.x;
    for (a, b) in x.iter_mut().zip(filter.x) {
        *a += b;
    }
    vec![Kernel { x, ..data }, Kernel { x, ..filter }]
}

/// One product of `m x k` by `k x n` as a GEMM kernel, forward.
pub(crate) fn product_kernel(m: u64, n: u64, k: u64) -> Kernel {
    gemm_kernel(
        KernelClass::Gemm,
        KernelPass::Forward,
        m as f64,
        n as f64,
        k as f64,
        1.0,
    )
}

/// The kernel a GEMM or convolution record of `file` measured, described as `predict`
/// describes a layer's ([`ridgeline_model::kernels`]); `None` for other records, an error
/// naming the record for a convolution whose shape cannot run.
pub fn record_kernel(file: &str, r: &Record) -> Result<Option<Kernel>> {
    Ok(match &r.measured {
        Measured::Gemm(g) => Some(product_kernel(g.m, g.n, g.k)),
        // Both gradients in one call are not one kernel.
        Measured::Conv(c) if c.pass == ridgeline_measure::ConvPass::Backward => None,
        Measured::Conv(c) => conv_kernels(file, r, c)?.pop(),
        _ => None,
    })
}
