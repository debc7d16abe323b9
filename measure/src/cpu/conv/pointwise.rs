//! Pointwise (1x1, unpadded) convolutions: in the channels-first layout each sample's group
//! is already a `C x positions` matrix, so every pass is one GEMM per sample and group,
//! straight on the activations — no copy, no layout change — at unit stride. A strided one
//! first gathers the positions it reads into a compact `C x positions` matrix (and scatters
//! its data gradient back), a copy of the output's size rather than the input's.

use super::geom::{ConvGeom, with_scratch};
use crate::cpu::gemm::{View, ViewMut, matmul};

/// Whether `g` is pointwise: every kernel extent 1 and no padding (any stride).
pub(super) fn applies(g: &ConvGeom) -> bool {
    g.kernel == [1; 3] && g.pad == [0; 3]
}

fn strided(g: &ConvGeom) -> bool {
    g.stride != [1; 3]
}

/// Input offset (within one channel plane) of each output position.
fn positions(g: &ConvGeom) -> impl Iterator<Item = usize> + '_ {
    let [_, hi, wi] = g.input;
    let [od, oh, ow] = g.output;
    let [sd, sh, sw] = g.stride;
    (0..od).flat_map(move |d| {
        (0..oh).flat_map(move |h| (0..ow).map(move |w| ((d * sd) * hi + h * sh) * wi + w * sw))
    })
}

/// `dst[c][p]` = `src[c][position p]` for `channels` planes.
fn gather(g: &ConvGeom, src: &[f32], channels: usize, dst: &mut [f32]) {
    let (iv, ov) = (g.in_vol(), g.out_vol());
    for c in 0..channels {
        let plane = &src[c * iv..][..iv];
        for (d, p) in dst[c * ov..][..ov].iter_mut().zip(positions(g)) {
            *d = plane[p];
        }
    }
}

/// `dst[c]` = zero except `dst[c][position p]` = `src[c][p]`.
fn scatter(g: &ConvGeom, src: &[f32], channels: usize, dst: &mut [f32]) {
    let (iv, ov) = (g.in_vol(), g.out_vol());
    for c in 0..channels {
        let plane = &mut dst[c * iv..][..iv];
        plane.fill(0.0);
        for (s, p) in src[c * ov..][..ov].iter().zip(positions(g)) {
            plane[p] = *s;
        }
    }
}

/// `y[n][grp] = w[grp] x[n][grp]`: `(C_out/g x C_in/g) (C_in/g x P)`.
pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
    let (cin, cout, iv, p) = (g.cin_g(), g.cout_g(), g.in_vol(), g.out_vol());
    let scratch = if strided(g) { cin * p } else { 0 };
    with_scratch(scratch, |buf| {
        for n in 0..g.n {
            for grp in 0..g.groups {
                let mut xs = &x[(n * g.c_in + grp * cin) * iv..][..cin * iv];
                if strided(g) {
                    gather(g, xs, cin, buf);
                    xs = buf;
                }
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
    });
}

/// `dx[n][grp] = w[grp]^T dy[n][grp]`.
pub(super) fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32], threads: usize) {
    let (cin, cout, iv, p) = (g.cin_g(), g.cout_g(), g.in_vol(), g.out_vol());
    let scratch = if strided(g) { cin * p } else { 0 };
    with_scratch(scratch, |buf| {
        for n in 0..g.n {
            for grp in 0..g.groups {
                let dys = &dy[(n * g.c_out + grp * cout) * p..][..cout * p];
                let ws = &w[grp * cout * cin..][..cout * cin];
                let dxs = &mut dx[(n * g.c_in + grp * cin) * iv..][..cin * iv];
                let product = |dst: &mut [f32]| {
                    matmul(
                        ViewMut::rows(dst, cin, p, p),
                        View::rows(ws, cout, cin).t(),
                        View::rows(dys, cout, p),
                        false,
                        threads,
                    );
                };
                if strided(g) {
                    product(&mut *buf);
                    scatter(g, buf, cin, dxs);
                } else {
                    product(dxs);
                }
            }
        }
    });
}

/// `dw[grp] = sum over n of dy[n][grp] x[n][grp]^T`.
pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let (cin, cout, iv, p) = (g.cin_g(), g.cout_g(), g.in_vol(), g.out_vol());
    let scratch = if strided(g) { cin * p } else { 0 };
    with_scratch(scratch, |buf| {
        for grp in 0..g.groups {
            let dws = &mut dw[grp * cout * cin..][..cout * cin];
            for n in 0..g.n {
                let dys = &dy[(n * g.c_out + grp * cout) * p..][..cout * p];
                let mut xs = &x[(n * g.c_in + grp * cin) * iv..][..cin * iv];
                if strided(g) {
                    gather(g, xs, cin, buf);
                    xs = buf;
                }
                matmul(
                    ViewMut::rows(dws, cout, cin, cin),
                    View::rows(dys, cout, p),
                    View::rows(xs, cin, p).t(),
                    n > 0,
                    threads,
                );
            }
        }
    });
}
