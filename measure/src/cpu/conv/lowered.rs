//! Convolution lowered to GEMM one tile of output positions at a time (im2col), for strided
//! convolutions and the rare unit-stride ones the shifted path does not take. The lowered
//! tile is position-major (`positions x C_in/g kernel`), so that each GEMM's output tile is
//! channels-last, the GEMM crate's fast orientation.

use rayon::prelude::*;

use super::super::gemm::{View, ViewMut, matmul};
use super::{ConvGeom, gather_tile, offset, scatter_tile, with_scratch};

/// Bytes of lowered tile per GEMM.
const TILE_BYTES: usize = 2 << 20;
/// Fewest output positions per tile.
const MIN_TILE: usize = 64;

fn tile(g: &ConvGeom) -> usize {
    (TILE_BYTES / (4 * g.k_rows().max(1)))
        .max(MIN_TILE)
        .min(g.out_vol().max(1))
}

/// Scratch bytes of the passes.
pub(super) fn workspace(g: &ConvGeom) -> usize {
    let t = tile(g);
    4 * (t * g.k_rows() + t * g.cout_g() + 2 * g.k_rows() * g.cout_g())
}

/// Fills `col` (`t x C_in/g kernel`, row-major) with the inputs output positions
/// `[p0, p0 + t)` of one group of one sample read; taps in the padding are zero.
fn im2col(g: &ConvGeom, xs: &[f32], p0: usize, col: &mut [f32]) {
    let k = g.k_rows();
    let kvol = g.kvol();
    let [_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    let in_vol = g.in_vol();
    col.par_chunks_mut(k).enumerate().for_each(|(r, row)| {
        let p = p0 + r;
        let (od, oh, ow) = (p / (ho * wo), (p / wo) % ho, p % wo);
        for kk in 0..kvol {
            let (a, b, c) = offset(g, kk);
            let at = match (g.coord(0, od, a), g.coord(1, oh, b), g.coord(2, ow, c)) {
                (Some(id), Some(ih), Some(iw)) => Some((id * hi + ih) * wi + iw),
                _ => None,
            };
            for ci in 0..g.cin_g() {
                row[ci * kvol + kk] = at.map_or(0.0, |i| xs[ci * in_vol + i]);
            }
        }
    });
}

/// Adds a position-major lowered gradient back onto one group's input gradient planes
/// (the adjoint of [`im2col`]).
fn col2im(g: &ConvGeom, col: &[f32], p0: usize, t: usize, dxs: &mut [f32]) {
    let k = g.k_rows();
    let kvol = g.kvol();
    let [_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    dxs.par_chunks_mut(g.in_vol())
        .enumerate()
        .for_each(|(ci, plane)| {
            for r in 0..t {
                let p = p0 + r;
                let (od, oh, ow) = (p / (ho * wo), (p / wo) % ho, p % wo);
                let src = &col[r * k + ci * kvol..][..kvol];
                for (kk, v) in src.iter().enumerate() {
                    let (a, b, c) = offset(g, kk);
                    if let (Some(id), Some(ih), Some(iw)) =
                        (g.coord(0, od, a), g.coord(1, oh, b), g.coord(2, ow, c))
                    {
                        plane[(id * hi + ih) * wi + iw] += v;
                    }
                }
            }
        });
}

/// `w` of one group (`C_out/g x k`) transposed to `k x C_out/g`.
fn transpose(wg: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; wg.len()];
    for (r, row) in wg.chunks(cols).enumerate() {
        for (c, v) in row.iter().enumerate() {
            out[c * rows + r] = *v;
        }
    }
    out
}

pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let t = tile(g);
    with_scratch(t * k + t * cout, |scratch| {
        let (col, out_tile) = scratch.split_at_mut(t * k);
        for grp in 0..g.groups {
            let wt = transpose(&w[grp * cout * k..][..cout * k], cout, k);
            for n in 0..g.n {
                let xs = &x[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol];
                let ys = &mut y[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                let mut p0 = 0;
                while p0 < out_vol {
                    let tt = t.min(out_vol - p0);
                    im2col(g, xs, p0, &mut col[..tt * k]);
                    let dst = &mut out_tile[..tt * cout];
                    matmul(
                        ViewMut::rows(dst, tt, cout, cout),
                        View::rows(&col[..tt * k], tt, k),
                        View::rows(&wt, k, cout),
                        false,
                        threads,
                    );
                    scatter_tile(dst, cout, tt, ys, out_vol, &[(0, p0, tt)]);
                    p0 += tt;
                }
            }
        }
    });
}

pub(super) fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32], threads: usize) {
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let t = tile(g);
    dx.fill(0.0);
    with_scratch(t * k + t * cout, |scratch| {
        let (col, grad) = scratch.split_at_mut(t * k);
        for grp in 0..g.groups {
            let wg = &w[grp * cout * k..][..cout * k];
            for n in 0..g.n {
                let dys = &dy[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                let dxs = &mut dx[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol];
                let mut p0 = 0;
                while p0 < out_vol {
                    let tt = t.min(out_vol - p0);
                    gather_tile(dys, cout, out_vol, &mut grad[..tt * cout], &[(0, p0, tt)]);
                    // col (t x k) = grad (t x C_out/g) . w (C_out/g x k)
                    matmul(
                        ViewMut::rows(&mut col[..tt * k], tt, k, k),
                        View::rows(&grad[..tt * cout], tt, cout),
                        View::rows(wg, cout, k),
                        false,
                        threads,
                    );
                    col2im(g, &col[..tt * k], p0, tt, dxs);
                    p0 += tt;
                }
            }
        }
    });
}

pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let t = tile(g);
    let mut acc = vec![0.0f32; k * cout];
    with_scratch(t * k + t * cout, |scratch| {
        let (col, grad) = scratch.split_at_mut(t * k);
        for grp in 0..g.groups {
            acc.fill(0.0);
            for n in 0..g.n {
                let xs = &x[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol];
                let dys = &dy[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                let mut p0 = 0;
                while p0 < out_vol {
                    let tt = t.min(out_vol - p0);
                    im2col(g, xs, p0, &mut col[..tt * k]);
                    gather_tile(dys, cout, out_vol, &mut grad[..tt * cout], &[(0, p0, tt)]);
                    // dW^T (k x C_out/g) += col^T (k x t) . grad (t x C_out/g)
                    matmul(
                        ViewMut::rows(&mut acc, k, cout, cout),
                        View::rows(&col[..tt * k], tt, k).t(),
                        View::rows(&grad[..tt * cout], tt, cout),
                        true,
                        threads,
                    );
                    p0 += tt;
                }
            }
            let dwg = &mut dw[grp * cout * k..][..cout * k];
            dwg.copy_from_slice(&transpose(&acc, k, cout));
        }
    });
}
