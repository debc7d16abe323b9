//! Unit-stride convolution as shifted GEMMs on a padded, channels-last copy of the input.
//!
//! The input of one group of one sample is copied into a grid of `Dp x Hp x Wp` positions
//! (the input with its padding), `C_in / groups` channels per position. Output positions
//! are numbered on the same grid, `q = (od * Hp + oh) * Wp + ow`; on that numbering, the
//! input position kernel tap `(a, b, c)` reads is `q + (a dD Hp + b dH) Wp + c dW` for every
//! output, so the operand of each tap is a plain strided view of the copy. With `dW = 1`
//! the `kW` taps of a kernel row are adjacent in memory and form one GEMM with
//! `kW x C_in / groups` columns. Grid positions with `oh >= Ho` or `ow >= Wo` are computed
//! and dropped: `Hp Wp / (Ho Wo)` more work (6 % for 3x3 on 64x64), in exchange for no
//! im2col at all.

use rayon::prelude::*;

use super::super::gemm::{View, ViewMut, matmul};
use super::{ConvGeom, gather_tile, scatter_tile, with_scratch};

/// Bytes of output tile per GEMM: small enough to stay in L2 across the taps.
const TILE_BYTES: usize = 512 << 10;
/// Fewest and most grid positions per tile.
const MIN_TILE: usize = 256;
const MAX_TILE: usize = 8192;

/// The padded grid of one convolution.
#[derive(Debug, Clone, Copy)]
struct Grid {
    /// Padded extents (depth need not be stored: the copy's length covers it).
    hp: usize,
    wp: usize,
    /// Grid positions that carry outputs: `Do x Hp x Wp`.
    q: usize,
    /// Positions in the copy: the grid plus a zero tail that keeps every shifted read in
    /// bounds.
    len: usize,
}

impl Grid {
    fn new(g: &ConvGeom) -> Grid {
        let ext =
            |d: usize| (g.input[d] + g.pad[d]).max(g.output[d] + (g.kernel[d] - 1) * g.dilation[d]);
        let (dp, hp, wp) = (ext(0), ext(1), ext(2));
        let tail = (g.kernel[1] - 1) * g.dilation[1] * wp + (g.kernel[2] - 1) * g.dilation[2];
        Grid {
            hp,
            wp,
            q: g.output[0] * hp * wp,
            len: dp * hp * wp + tail,
        }
    }

    /// Runs `(row in tile, output position, length)` of the valid outputs among grid
    /// positions `[q0, q0 + t)`.
    fn runs(&self, g: &ConvGeom, q0: usize, t: usize) -> Vec<(usize, usize, usize)> {
        let [_, ho, wo] = g.output;
        let mut out = Vec::new();
        let mut q = q0;
        while q < q0 + t {
            let (od, oh, ow) = (
                q / (self.hp * self.wp),
                (q / self.wp) % self.hp,
                q % self.wp,
            );
            let row_end = (q - ow + self.wp).min(q0 + t);
            if oh < ho && ow < wo {
                let len = (wo - ow).min(row_end - q);
                out.push((q - q0, (od * ho + oh) * wo + ow, len));
            }
            q = row_end;
        }
        out
    }
}

/// One GEMM of the tap sum: the taps `(a, b, c0..c0 + n)` of a kernel row.
#[derive(Debug, Clone, Copy)]
struct Taps {
    a: usize,
    b: usize,
    c0: usize,
    n: usize,
    /// Grid offset of the first tap.
    shift: usize,
}

fn taps(g: &ConvGeom, grid: &Grid) -> Vec<Taps> {
    let [kd, kh, kw] = g.kernel;
    let [dd, dh, dw] = g.dilation;
    let per_gemm = if dw == 1 { kw } else { 1 };
    let mut out = Vec::with_capacity(kd * kh * kw);
    for a in 0..kd {
        for b in 0..kh {
            for c0 in (0..kw).step_by(per_gemm) {
                let shift = (a * dd * grid.hp + b * dh) * grid.wp + c0 * dw;
                out.push(Taps {
                    a,
                    b,
                    c0,
                    n: per_gemm,
                    shift,
                });
            }
        }
    }
    out
}

fn tile(g: &ConvGeom, grid: &Grid) -> usize {
    (TILE_BYTES / (4 * g.cout_g().max(1)))
        .clamp(MIN_TILE, MAX_TILE)
        .min(grid.q)
}

/// Scratch bytes of the forward and backward-filter passes.
pub(super) fn workspace(g: &ConvGeom) -> usize {
    let grid = Grid::new(g);
    let copy = grid.len * g.cin_g();
    let forward = copy + tile(g, &grid) * g.cout_g() + g.k_rows() * g.cout_g();
    let filter = copy + grid.q * g.cout_g() + 2 * g.k_rows() * g.cout_g();
    4 * forward.max(filter)
}

/// Copies one group's input planes (`C_in / groups x in_vol`) into the padded grid,
/// channels-last; everything else in `copy` is zero.
fn pack(g: &ConvGeom, grid: &Grid, xs: &[f32], copy: &mut [f32]) {
    let cin = g.cin_g();
    let [_, hi, wi] = g.input;
    let in_vol = g.in_vol();
    let plane = grid.hp * grid.wp * cin;
    copy.par_chunks_mut(plane)
        .enumerate()
        .for_each(|(dp, slice)| {
            let Some(d) = dp
                .checked_sub(g.pad[0])
                .filter(|&d| d < g.input[0] && slice.len() == plane)
            else {
                slice.fill(0.0);
                return;
            };
            for (hp, row) in slice.chunks_mut(grid.wp * cin).enumerate() {
                let Some(h) = hp.checked_sub(g.pad[1]).filter(|&h| h < hi) else {
                    row.fill(0.0);
                    continue;
                };
                let pw = g.pad[2];
                row[..pw * cin].fill(0.0);
                row[(pw + wi) * cin..].fill(0.0);
                let body = &mut row[pw * cin..(pw + wi) * cin];
                for ci in 0..cin {
                    let src = &xs[ci * in_vol + (d * hi + h) * wi..][..wi];
                    for (w, v) in src.iter().enumerate() {
                        body[w * cin + ci] = *v;
                    }
                }
            }
        });
}

/// Weights of one group rearranged per [`Taps`]: for each, a `(n C_in/g) x C_out/g`
/// row-major matrix whose row `j * C_in/g + ci` is tap `(a, b, c0 + j)` of input channel
/// `ci`.
fn rearrange(g: &ConvGeom, taps: &[Taps], wg: &[f32]) -> Vec<f32> {
    let (cin, cout, kvol) = (g.cin_g(), g.cout_g(), g.kvol());
    let [_, kh, kw] = g.kernel;
    let mut out = Vec::with_capacity(g.k_rows() * cout);
    for t in taps {
        for j in 0..t.n {
            let kk = (t.a * kh + t.b) * kw + t.c0 + j;
            for ci in 0..cin {
                out.extend((0..cout).map(|co| wg[(co * cin + ci) * kvol + kk]));
            }
        }
    }
    out
}

pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let t = tile(g, &grid);
    with_scratch(grid.len * cin + t * cout, |scratch| {
        let (copy, out_tile) = scratch.split_at_mut(grid.len * cin);
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
                let mut q0 = 0;
                while q0 < grid.q {
                    let tt = t.min(grid.q - q0);
                    let dst = &mut out_tile[..tt * cout];
                    let mut row = 0;
                    for (i, tap) in taps.iter().enumerate() {
                        let cols = tap.n * cin;
                        matmul(
                            ViewMut::rows(dst, tt, cout, cout),
                            View {
                                data: &copy[(q0 + tap.shift) * cin..],
                                rows: tt,
                                cols,
                                rs: cin,
                                cs: 1,
                            },
                            View::rows(&wr[row * cout..][..cols * cout], cols, cout),
                            i > 0,
                            threads,
                        );
                        row += cols;
                    }
                    scatter_tile(dst, cout, tt, ys, out_vol, &grid.runs(g, q0, tt));
                    q0 += tt;
                }
            }
        }
    });
}

pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k, kvol) = (g.cin_g(), g.cout_g(), g.k_rows(), g.kvol());
    let (in_vol, out_vol) = (g.in_vol(), g.out_vol());
    let [_, kh, kw] = g.kernel;
    let all_runs = grid.runs(g, 0, grid.q);
    // Split the positions into one part per thread, each with its own partial sum.
    let parts = threads.clamp(1, grid.q.div_ceil(MIN_TILE).max(1));
    let span = grid.q.div_ceil(parts);
    with_scratch(
        grid.len * cin + grid.q * cout + parts * k * cout,
        |scratch| {
            let (copy, rest) = scratch.split_at_mut(grid.len * cin);
            let (grad, partial) = rest.split_at_mut(grid.q * cout);
            for grp in 0..g.groups {
                partial.fill(0.0);
                for n in 0..g.n {
                    pack(
                        g,
                        &grid,
                        &x[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol],
                        copy,
                    );
                    gather_tile(
                        &dy[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol],
                        cout,
                        out_vol,
                        grad,
                        &all_runs,
                    );
                    let (copy, grad) = (&*copy, &*grad);
                    partial
                        .par_chunks_mut(k * cout)
                        .enumerate()
                        .for_each(|(p, acc)| {
                            let (q0, q1) = (p * span, ((p + 1) * span).min(grid.q));
                            let mut row = 0;
                            for tap in &taps {
                                let rows = tap.n * cin;
                                // dW_tap (rows x C_out/g) += copy_tap^T (rows x positions) . grad (positions x C_out/g)
                                matmul(
                                    ViewMut::rows(
                                        &mut acc[row * cout..][..rows * cout],
                                        rows,
                                        cout,
                                        cout,
                                    ),
                                    View {
                                        data: &copy[(q0 + tap.shift) * cin..],
                                        rows,
                                        cols: q1 - q0,
                                        rs: 1,
                                        cs: cin,
                                    },
                                    View::rows(&grad[q0 * cout..q1 * cout], q1 - q0, cout),
                                    true,
                                    1,
                                );
                                row += rows;
                            }
                        });
                }
                // Sum the parts and write back as [C_out][C_in/g][kernel].
                let dwg = &mut dw[grp * cout * k..][..cout * k];
                let partial = &*partial;
                dwg.par_chunks_mut(k).enumerate().for_each(|(co, dst)| {
                    let mut row = 0;
                    for tap in &taps {
                        for j in 0..tap.n {
                            let kk = (tap.a * kh + tap.b) * kw + tap.c0 + j;
                            for ci in 0..cin {
                                let r = row + j * cin + ci;
                                dst[ci * kvol + kk] =
                                    (0..parts).map(|p| partial[(p * k + r) * cout + co]).sum();
                            }
                        }
                        row += tap.n * cin;
                    }
                });
            }
        },
    );
}
