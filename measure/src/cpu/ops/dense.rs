//! A dense layer on the CPU, forward and backward side by side: `[n x input] -> [n x
//! output]` through the GEMM, weights `[output x input]` row-major, and the bias.

use crate::cpu::conv::{add_channel_bias, channel_sums};
use crate::cpu::gemm::{View, ViewMut, matmul};

/// A dense layer: samples, input and output features, and whether it has a bias.
pub(super) type Dense = (usize, usize, usize, bool);

/// `out [n x output] = x [n x input] W^T`, plus the bias.
pub(super) fn forward(
    (n, input, output, bias): Dense,
    x: &[f32],
    params: &[Vec<f32>],
    out: &mut [f32],
    threads: usize,
) {
    matmul(
        ViewMut::rows(out, n, output, output),
        View::rows(x, n, input),
        View::rows(&params[0], output, input).t(),
        false,
        threads,
    );
    if bias {
        add_channel_bias(out, &params[1], output, 1);
    }
}

/// `dW = dy^T x`, the bias's gradient (the column sums of `dy`), and `dx = dy W` where
/// the input needs it.
pub(super) fn backward(
    (n, input, output, bias): Dense,
    x: &[f32],
    dy: &[f32],
    params: &[Vec<f32>],
    dx: Option<&mut [f32]>,
    dparams: &mut [Vec<f32>],
    threads: usize,
) {
    matmul(
        ViewMut::rows(&mut dparams[0], output, input, input),
        View::rows(dy, n, output).t(),
        View::rows(x, n, input),
        false,
        threads,
    );
    if bias {
        channel_sums(dy, &mut dparams[1], output, 1);
    }
    if let Some(d) = dx {
        matmul(
            ViewMut::rows(d, n, input, input),
            View::rows(dy, n, output),
            View::rows(&params[0], output, input),
            false,
            threads,
        );
    }
}
