//! Convolution lowered to one GEMM per tile of output positions (im2col), for strided
//! convolutions and unit-stride ones on small images, where the shifted path would waste
//! much of its work on padding. The lowered tile is built from the padded, channels-last
//! copy of the input: for each output and kernel row, `kW x C_in/g` adjacent values (with
//! `dW = 1`) are one copy. It is position-major, so each GEMM's output tile is
//! channels-last, the GEMM crate's fast orientation.

use rayon::prelude::*;

use super::super::gemm::{View, ViewMut, matmul};
use super::layout::{
    Grid, Taps, gather_tile, pack, rearrange, restore, scatter_tile, taps, unpack_add,
};
use super::{ConvGeom, with_scratch};

/// Bytes of lowered tile per GEMM.
const TILE_BYTES: usize = 4 << 20;
/// Fewest output positions per tile.
const MIN_TILE: usize = 256;

fn tile(g: &ConvGeom) -> usize {
    (TILE_BYTES / (4 * g.k_rows().max(1)))
        .max(MIN_TILE)
        .min(g.out_vol().max(1))
}

/// Scratch bytes of the passes.
pub(super) fn workspace(g: &ConvGeom) -> usize {
    let t = tile(g);
    4 * (Grid::new(g).len * g.cin_g() + t * g.k_rows() + t * g.cout_g() + g.k_rows() * g.cout_g())
}

/// The grid origin of each output position in `[p0, p0 + t)`.
fn origins(g: &ConvGeom, grid: &Grid, p0: usize, t: usize) -> Vec<usize> {
    let [_, ho, wo] = g.output;
    (p0..p0 + t)
        .map(|p| grid.origin(g, p / (ho * wo), (p / wo) % ho, p % wo))
        .collect()
}

/// Fills `col` (`t x k`, row-major, columns in tap order) from the padded copy.
fn im2col(taps: &[Taps], cin: usize, copy: &[f32], origins: &[usize], col: &mut [f32]) {
    let k = col.len() / origins.len().max(1);
    col.par_chunks_mut(k)
        .zip(origins.par_iter())
        .for_each(|(row, &o)| {
            let mut at = 0;
            for tap in taps {
                let n = tap.n * cin;
                row[at..at + n].copy_from_slice(&copy[(o + tap.shift) * cin..][..n]);
                at += n;
            }
        });
}

/// The adjoint of [`im2col`]: adds each lowered row back onto the padded copy.
fn col2im(taps: &[Taps], cin: usize, col: &[f32], origins: &[usize], copy: &mut [f32]) {
    let k = col.len() / origins.len().max(1);
    for (row, &o) in col.chunks(k).zip(origins) {
        let mut at = 0;
        for tap in taps {
            let n = tap.n * cin;
            copy[(o + tap.shift) * cin..][..n]
                .iter_mut()
                .zip(&row[at..at + n])
                .for_each(|(d, v)| *d += v);
            at += n;
        }
    }
}

pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let t = tile(g);
    with_scratch(grid.len * cin + t * k + t * cout, |scratch| {
        let (copy, rest) = scratch.split_at_mut(grid.len * cin);
        let (col, out_tile) = rest.split_at_mut(t * k);
        for grp in 0..g.groups {
            let wr = rearrange(g, &taps, &w[grp * cout * k..][..cout * k]);
            for n in 0..g.n {
                pack(
                    g,
                    &grid,
                    &x[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol],
                    copy,
                );
                let ys = &mut y[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                let mut p0 = 0;
                while p0 < out_vol {
                    let tt = t.min(out_vol - p0);
                    im2col(
                        &taps,
                        cin,
                        copy,
                        &origins(g, &grid, p0, tt),
                        &mut col[..tt * k],
                    );
                    let dst = &mut out_tile[..tt * cout];
                    matmul(
                        ViewMut::rows(dst, tt, cout, cout),
                        View::rows(&col[..tt * k], tt, k),
                        View::rows(&wr, k, cout),
                        false,
                        threads,
                    );
                    scatter_tile(dst, cout, ys, out_vol, &[(0, p0, tt)]);
                    p0 += tt;
                }
            }
        }
    });
}

pub(super) fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let t = tile(g);
    dx.fill(0.0);
    with_scratch(grid.len * cin + t * k + t * cout, |scratch| {
        let (copy, rest) = scratch.split_at_mut(grid.len * cin);
        let (col, grad) = rest.split_at_mut(t * k);
        for grp in 0..g.groups {
            let wr = rearrange(g, &taps, &w[grp * cout * k..][..cout * k]);
            for n in 0..g.n {
                copy.fill(0.0);
                let dys = &dy[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                let mut p0 = 0;
                while p0 < out_vol {
                    let tt = t.min(out_vol - p0);
                    gather_tile(dys, cout, out_vol, &mut grad[..tt * cout], &[(0, p0, tt)]);
                    // col (t x k) = grad (t x C_out/g) . wr^T (C_out/g x k)
                    matmul(
                        ViewMut::rows(&mut col[..tt * k], tt, k, k),
                        View::rows(&grad[..tt * cout], tt, cout),
                        View::rows(&wr, k, cout).t(),
                        false,
                        threads,
                    );
                    col2im(&taps, cin, &col[..tt * k], &origins(g, &grid, p0, tt), copy);
                    p0 += tt;
                }
                unpack_add(
                    g,
                    &grid,
                    copy,
                    &mut dx[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol],
                );
            }
        }
    });
}

pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let t = tile(g);
    with_scratch(grid.len * cin + t * k + t * cout + k * cout, |scratch| {
        let (copy, rest) = scratch.split_at_mut(grid.len * cin);
        let (col, rest) = rest.split_at_mut(t * k);
        let (grad, acc) = rest.split_at_mut(t * cout);
        for grp in 0..g.groups {
            acc.fill(0.0);
            for n in 0..g.n {
                pack(
                    g,
                    &grid,
                    &x[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol],
                    copy,
                );
                let dys = &dy[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                let mut p0 = 0;
                while p0 < out_vol {
                    let tt = t.min(out_vol - p0);
                    im2col(
                        &taps,
                        cin,
                        copy,
                        &origins(g, &grid, p0, tt),
                        &mut col[..tt * k],
                    );
                    gather_tile(dys, cout, out_vol, &mut grad[..tt * cout], &[(0, p0, tt)]);
                    // dW (k x C_out/g, tap order) += col^T (k x t) . grad (t x C_out/g)
                    matmul(
                        ViewMut::rows(acc, k, cout, cout),
                        View::rows(&col[..tt * k], tt, k).t(),
                        View::rows(&grad[..tt * cout], tt, cout),
                        true,
                        threads,
                    );
                    p0 += tt;
                }
            }
            restore(g, &taps, acc, &mut dw[grp * cout * k..][..cout * k]);
        }
    });
}
