//! Pointwise (1x1, unit-stride, unpadded) convolutions: in the channels-first layout each
//! sample's group is already a `C x positions` matrix, so every pass is one GEMM per sample
//! and group, straight on the activations — no copy, no layout change.

use super::ConvGeom;
use crate::cpu::gemm::{View, ViewMut, matmul};

/// Whether `g` is pointwise: every kernel extent 1, unit strides, no padding.
pub(super) fn applies(g: &ConvGeom) -> bool {
    g.kernel == [1; 3] && g.stride == [1; 3] && g.pad == [0; 3] && g.input == g.output
}

/// `y[n][grp] = w[grp] x[n][grp]`: `(C_out/g x C_in/g) (C_in/g x P)`.
pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
    let (cin, cout, p) = (g.cin_g(), g.cout_g(), g.in_vol());
    for n in 0..g.n {
        for grp in 0..g.groups {
            let xs = &x[(n * g.c_in + grp * cin) * p..][..cin * p];
            let ws = &w[grp * cout * cin..][..cout * cin];
            let ys = &mut y[(n * g.c_out + grp * cout) * p..][..cout * p];
            matmul(
                ViewMut::rows(ys, cout, p, p),
                View::rows(ws, cout, cin),
                View::rows(xs, cin, p),
                false,
                threads,
            );
        }
    }
}

/// `dx[n][grp] = w[grp]^T dy[n][grp]`.
pub(super) fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32], threads: usize) {
    let (cin, cout, p) = (g.cin_g(), g.cout_g(), g.in_vol());
    for n in 0..g.n {
        for grp in 0..g.groups {
            let dys = &dy[(n * g.c_out + grp * cout) * p..][..cout * p];
            let ws = &w[grp * cout * cin..][..cout * cin];
            let dxs = &mut dx[(n * g.c_in + grp * cin) * p..][..cin * p];
            matmul(
                ViewMut::rows(dxs, cin, p, p),
                View::rows(ws, cout, cin).t(),
                View::rows(dys, cout, p),
                false,
                threads,
            );
        }
    }
}

/// `dw[grp] = sum over n of dy[n][grp] x[n][grp]^T`.
pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let (cin, cout, p) = (g.cin_g(), g.cout_g(), g.in_vol());
    for grp in 0..g.groups {
        let dws = &mut dw[grp * cout * cin..][..cout * cin];
        for n in 0..g.n {
            let dys = &dy[(n * g.c_out + grp * cout) * p..][..cout * p];
            let xs = &x[(n * g.c_in + grp * cin) * p..][..cin * p];
            matmul(
                ViewMut::rows(dws, cout, cin, cin),
                View::rows(dys, cout, p),
                View::rows(xs, cin, p).t(),
                n > 0,
                threads,
            );
        }
    }
}
