//! Convolution lowered to one GEMM per tile of output positions (im2col), for strided
//! convolutions and unit-stride ones on small images, where the shifted path would waste
//! much of its work on padding. The lowered tile is built from the padded, channels-last
//! copy of the input: for each output and kernel row, `kW x C_in/g` adjacent values (with
//! `dW = 1`) are one copy. It is position-major, so each GEMM's output tile is
//! channels-last, the GEMM crate's fast orientation.

use rayon::prelude::*;

use super::super::gemm::{View, ViewMut, matmul};
use super::geom::{ConvGeom, with_scratch};
use super::layout::{
    Grid, Taps, gather_tile, pack, rearrange, restore, scatter_tile, taps, unpack_add,
};

/// Bytes of lowered tile per GEMM.
const TILE_BYTES: usize = 4 << 20;
/// Fewest output positions per tile.
const MIN_TILE: usize = 256;

/// Output positions per tile, counted over the samples lowered together (a tile of a small
/// image spans several samples, so its GEMM is tall enough to split between threads).
fn tile(g: &ConvGeom) -> usize {
    (TILE_BYTES / (4 * g.k_rows().max(1)))
        .max(MIN_TILE)
        .min((g.n * g.out_vol()).max(1))
}

/// Most bytes of padded copies held at once: samples are lowered together (so small images
/// still make tall GEMMs) up to this much.
const COPIES_BYTES: usize = 256 << 20;

/// Samples lowered together.
fn samples(g: &ConvGeom, grid: &Grid) -> usize {
    (COPIES_BYTES / (4 * grid.len * g.cin_g()).max(1)).clamp(1, g.n)
}

/// Scratch bytes of the passes.
pub(super) fn workspace(g: &ConvGeom) -> usize {
    let grid = Grid::new(g);
    let t = tile(g);
    4 * (samples(g, &grid) * grid.len * g.cin_g()
        + t * g.k_rows()
        + t * g.cout_g()
        + g.k_rows() * g.cout_g())
}

/// The origin, in the copies of samples `n0..`, of each output position `[p0, p0 + t)`
/// counted over those samples (`p = (n - n0) out_vol + position`).
fn origins(g: &ConvGeom, grid: &Grid, p0: usize, t: usize) -> Vec<usize> {
    let [_, ho, wo] = g.output;
    let vol = g.out_vol();
    (p0..p0 + t)
        .map(|p| {
            let (n, q) = (p / vol, p % vol);
            n * grid.len + grid.origin(g, q / (ho * wo), (q / wo) % ho, q % wo)
        })
        .collect()
}

/// For tile rows `[p0, p0 + t)` counted over samples, `(sample, row in tile, position,
/// length)` of each sample's share.
fn shares(vol: usize, p0: usize, t: usize) -> Vec<(usize, usize, usize, usize)> {
    let mut out = Vec::new();
    let mut p = p0;
    while p < p0 + t {
        let (n, q) = (p / vol, p % vol);
        let len = (vol - q).min(p0 + t - p);
        out.push((n, p - p0, q, len));
        p += len;
    }
    out
}

/// Packs samples `n0..n0 + m` of group `grp` of `x` into their padded copies.
fn pack_samples(
    g: &ConvGeom,
    grid: &Grid,
    x: &[f32],
    grp: usize,
    n0: usize,
    m: usize,
    copies: &mut [f32],
) {
    let (cin, in_vol) = (g.cin_g(), g.in_vol());
    for (i, copy) in copies.chunks_mut(grid.len * cin).take(m).enumerate() {
        pack(
            g,
            grid,
            &x[((n0 + i) * g.c_in + grp * cin) * in_vol..][..cin * in_vol],
            copy,
        );
    }
}

/// Runs for [`gather_tile`] of tile rows `[p0, p0 + t)` counted over samples `n0..`, reading
/// the output gradient from its group's first plane of sample 0: each sample's share, its
/// position offset by that sample's planes.
fn gradient_runs(g: &ConvGeom, n0: usize, p0: usize, t: usize) -> Vec<(usize, usize, usize)> {
    let vol = g.out_vol();
    shares(vol, p0, t)
        .into_iter()
        .map(|(i, r0, q0, len)| (r0, (n0 + i) * g.c_out * vol + q0, len))
        .collect()
}

/// Fills `col` (`t x k`, row-major, columns in tap order) from the padded copies.
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

/// The adjoint of [`im2col`]: adds each lowered row back onto the padded copies.
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
    let out_vol = g.out_vol();
    let (t, chunk, per) = (tile(g), samples(g, &grid), grid.len * cin);
    with_scratch(chunk * per + t * k + t * cout + k * cout, |scratch| {
        let (copies, rest) = scratch.split_at_mut(chunk * per);
        let (col, rest) = rest.split_at_mut(t * k);
        let (out_tile, wr) = rest.split_at_mut(t * cout);
        for grp in 0..g.groups {
            rearrange(g, &taps, &w[grp * cout * k..][..cout * k], wr);
            let wr = &*wr;
            for n0 in (0..g.n).step_by(chunk) {
                let m = chunk.min(g.n - n0);
                pack_samples(g, &grid, x, grp, n0, m, copies);
                let total = m * out_vol;
                let mut p0 = 0;
                while p0 < total {
                    let tt = t.min(total - p0);
                    im2col(
                        &taps,
                        cin,
                        copies,
                        &origins(g, &grid, p0, tt),
                        &mut col[..tt * k],
                    );
                    let dst = &mut out_tile[..tt * cout];
                    matmul(
                        ViewMut::rows(dst, tt, cout, cout),
                        View::rows(&col[..tt * k], tt, k),
                        View::rows(wr, k, cout),
                        false,
                        threads,
                    );
                    for (i, r0, q0, len) in shares(out_vol, p0, tt) {
                        let ys =
                            &mut y[((n0 + i) * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                        scatter_tile(dst, cout, ys, out_vol, &[(r0, q0, len)]);
                    }
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
    let (t, chunk, per) = (tile(g), samples(g, &grid), grid.len * cin);
    dx.fill(0.0);
    with_scratch(chunk * per + t * k + t * cout + k * cout, |scratch| {
        let (copies, rest) = scratch.split_at_mut(chunk * per);
        let (col, rest) = rest.split_at_mut(t * k);
        let (grad, wr) = rest.split_at_mut(t * cout);
        for grp in 0..g.groups {
            rearrange(g, &taps, &w[grp * cout * k..][..cout * k], wr);
            let wr = &*wr;
            for n0 in (0..g.n).step_by(chunk) {
                let m = chunk.min(g.n - n0);
                copies.fill(0.0);
                let total = m * out_vol;
                let mut p0 = 0;
                while p0 < total {
                    let tt = t.min(total - p0);
                    let runs = gradient_runs(g, n0, p0, tt);
                    gather_tile(
                        &dy[grp * cout * out_vol..],
                        cout,
                        out_vol,
                        &mut grad[..tt * cout],
                        &runs,
                    );
                    // col (t x k) = grad (t x C_out/g) . wr^T (C_out/g x k)
                    matmul(
                        ViewMut::rows(&mut col[..tt * k], tt, k, k),
                        View::rows(&grad[..tt * cout], tt, cout),
                        View::rows(wr, k, cout).t(),
                        false,
                        threads,
                    );
                    col2im(
                        &taps,
                        cin,
                        &col[..tt * k],
                        &origins(g, &grid, p0, tt),
                        copies,
                    );
                    p0 += tt;
                }
                for (i, copy) in copies.chunks(per).take(m).enumerate() {
                    unpack_add(
                        g,
                        &grid,
                        copy,
                        &mut dx[((n0 + i) * g.c_in + grp * cin) * in_vol..][..cin * in_vol],
                    );
                }
            }
        }
    });
}

pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let out_vol = g.out_vol();
    let (t, chunk, per) = (tile(g), samples(g, &grid), grid.len * cin);
    with_scratch(chunk * per + t * k + t * cout + k * cout, |scratch| {
        let (copies, rest) = scratch.split_at_mut(chunk * per);
        let (col, rest) = rest.split_at_mut(t * k);
        let (grad, acc) = rest.split_at_mut(t * cout);
        for grp in 0..g.groups {
            acc.fill(0.0);
            for n0 in (0..g.n).step_by(chunk) {
                let m = chunk.min(g.n - n0);
                pack_samples(g, &grid, x, grp, n0, m, copies);
                let total = m * out_vol;
                let mut p0 = 0;
                while p0 < total {
                    let tt = t.min(total - p0);
                    im2col(
                        &taps,
                        cin,
                        copies,
                        &origins(g, &grid, p0, tt),
                        &mut col[..tt * k],
                    );
                    let runs = gradient_runs(g, n0, p0, tt);
                    gather_tile(
                        &dy[grp * cout * out_vol..],
                        cout,
                        out_vol,
                        &mut grad[..tt * cout],
                        &runs,
                    );
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
