//! One-layer model graphs for micro-kernel cases, so that shapes are validated and FLOPs and
//! bytes are counted exactly as the model counts them.
//!
//! A case's layer reads a trainable per-channel affine layer (`pre`), not the input sample
//! directly, so that its data gradient is part of its backward pass as it is inside a network.

use ridgeline_model::cost::{self, LayerCost};
use ridgeline_model::graph::{Conv, Graph, Op, Padding};
use ridgeline_model::precision::Precision;

use crate::backend::{ConvCase, Format, OpCase};
use crate::error::{Error, Result};

/// The measured layer's name in case graphs.
pub(crate) const LAYER: &str = "layer";

fn base(input: Vec<usize>) -> Result<Graph> {
    let mut g = Graph::new("case", input).map_err(|e| Error::invalid("input", e.message))?;
    g.then("pre", Op::ChannelAffine)
        .map_err(|e| Error::invalid("input", e.message))?;
    Ok(g)
}

/// The conv op of a case.
pub(crate) fn conv_op(case: &ConvCase) -> Op {
    let mut c = Conv::new(case.c_out, &case.kernel);
    c.stride = case.stride.iter().copied().collect();
    c.dilation = case.dilation.iter().copied().collect();
    c.padding = Padding::Explicit(case.padding.iter().copied().collect());
    c.groups = case.groups;
    c.bias = case.bias;
    Op::conv(c)
}

/// `input -> pre -> conv`.
pub(crate) fn conv_graph(case: &ConvCase) -> Result<Graph> {
    let mut input = vec![case.c_in];
    input.extend_from_slice(&case.input);
    let mut g = base(input)?;
    g.then(LAYER, conv_op(case))
        .map_err(|e| Error::invalid(format!("conv case `{}`", case.label), e.message))?;
    Ok(g)
}

/// `input -> pre -> op` (`add`, `mul` and `concat` read `pre` twice).
pub(crate) fn op_graph(case: &OpCase) -> Result<Graph> {
    let mut g = base(case.input.clone())?;
    let pre = g.last();
    let inputs: &[usize] = if matches!(case.op, Op::Add | Op::Mul | Op::Concat) {
        &[pre, pre]
    } else {
        &[pre]
    };
    g.push(LAYER, case.op.clone(), inputs)
        .map_err(|e| Error::invalid(format!("op case `{}`", case.op.kind()), e.message))?;
    Ok(g)
}

/// The model's cost of the case's layer at `batch` with tensors in `format` (bytes of
/// 16-bit tensors for fp16 and bf16, of FP32 ones otherwise).
pub(crate) fn layer_cost(graph: &Graph, batch: usize, format: Format) -> LayerCost<'_> {
    let precision = match format {
        Format::Fp16 => Precision::AmpFp16,
        Format::Bf16 => Precision::AmpBf16,
        Format::Fp32 | Format::Tf32 | Format::Fp64 => Precision::Fp32,
    };
    let c = cost::cost(graph, batch as u64, precision);
    c.layers
        .into_iter()
        .last()
        .unwrap_or_else(|| unreachable!("case graphs have a layer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_layers_compute_a_data_gradient() {
        let case = ConvCase {
            label: "t".into(),
            batch: 2,
            c_in: 4,
            input: vec![8, 8],
            c_out: 8,
            kernel: vec![3, 3],
            stride: vec![1, 1],
            padding: vec![[1, 1]; 2],
            dilation: vec![1, 1],
            groups: 1,
            bias: false,
            format: crate::backend::Format::Fp32,
            layout: crate::backend::Layout::ChannelsFirst,
        };
        let g = conv_graph(&case).unwrap();
        let c = layer_cost(&g, 2, Format::Fp32);
        assert_eq!(c.flops_bwd_data, c.flops_fwd);
        assert_eq!(c.flops_fwd.value(), 2.0 * 2.0 * 8.0 * 64.0 * 4.0 * 9.0);
    }

    #[test]
    fn invalid_cases_are_errors() {
        let case = ConvCase {
            label: "bad".into(),
            batch: 1,
            c_in: 4,
            input: vec![2, 2],
            c_out: 8,
            kernel: vec![5, 5],
            stride: vec![1, 1],
            padding: vec![[0, 0]; 2],
            dilation: vec![1, 1],
            groups: 1,
            bias: false,
            format: crate::backend::Format::Fp32,
            layout: crate::backend::Layout::ChannelsFirst,
        };
        let err = conv_graph(&case).unwrap_err().to_string();
        assert!(err.contains("larger than its padded input"), "{err}");
    }
}
