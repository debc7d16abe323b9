//! Unit-stride convolution as shifted GEMMs on the padded, channels-last copy of the input.
//!
//! Output positions are numbered on the padded grid, `q = (od Hp + oh) Wp + ow`; on that
//! numbering the input position tap `(a, b, c)` reads is `q + (a dD Hp + b dH) Wp + c dW`
//! for every output, so the operand of each group of taps is a plain strided view of the
//! copy and a tile of outputs is a short sum of GEMMs with no im2col at all. Grid positions
//! with `oh >= Ho` or `ow >= Wo` are computed and dropped: `Hp Wp / (Ho Wo)` more work (6 %
//! for 3x3 on 64x64); where that waste is large (small images) the dispatcher picks the
//! lowered path instead.

use rayon::prelude::*;

use super::super::gemm::{View, ViewMut, matmul};
use super::geom::{ConvGeom, with_scratch};
use super::layout::{Grid, gather_tile, pack, rearrange, restore, scatter_tile, taps};

/// Bytes of output tile per GEMM: small enough to stay in L2 across the taps.
const TILE_BYTES: usize = 512 << 10;
/// Fewest and most grid positions per tile.
const MIN_TILE: usize = 256;
const MAX_TILE: usize = 8192;

/// Grid positions that carry outputs: `Do x Hp x Wp`.
fn positions(g: &ConvGeom, grid: &Grid) -> usize {
    g.output[0] * grid.hp * grid.wp
}

/// The extra work of computing every grid position: `Hp Wp / (Ho Wo) - 1`.
pub(super) fn waste(g: &ConvGeom) -> f64 {
    let grid = Grid::new(g);
    (grid.hp * grid.wp) as f64 / (g.output[1] * g.output[2]) as f64 - 1.0
}

/// Runs `(row in tile, output position, length)` of the valid outputs among grid positions
/// `[q0, q0 + t)`.
fn runs(g: &ConvGeom, grid: &Grid, q0: usize, t: usize) -> Vec<(usize, usize, usize)> {
    let [_, ho, wo] = g.output;
    let mut out = Vec::new();
    let mut q = q0;
    while q < q0 + t {
        let (od, oh, ow) = (
            q / (grid.hp * grid.wp),
            (q / grid.wp) % grid.hp,
            q % grid.wp,
        );
        let row_end = (q - ow + grid.wp).min(q0 + t);
        if oh < ho && ow < wo {
            let len = (wo - ow).min(row_end - q);
            out.push((q - q0, (od * ho + oh) * wo + ow, len));
        }
        q = row_end;
    }
    out
}

/// Grid positions per tile on `threads` threads: at most [`TILE_BYTES`] of output, in a
/// number of tiles that is a multiple of the threads, so that each round of tiles keeps every
/// thread busy (one tile of a 28 x 28 image would leave a second thread idle). One thread
/// gives the largest tile, which sizes the workspace.
fn tile(g: &ConvGeom, grid: &Grid, threads: usize) -> usize {
    let q = positions(g, grid);
    let most = (TILE_BYTES / (4 * g.cout_g().max(1))).clamp(MIN_TILE, MAX_TILE);
    let tiles = q.div_ceil(most).next_multiple_of(threads.max(1));
    q.div_ceil(tiles).max(MIN_TILE).min(most).min(q)
}

/// Scratch bytes of the forward and backward-filter passes.
pub(super) fn workspace(g: &ConvGeom) -> usize {
    let grid = Grid::new(g);
    let copy = grid.len * g.cin_g();
    let threads = rayon::current_num_threads();
    let forward = copy + threads * tile(g, &grid, 1) * g.cout_g() + g.k_rows() * g.cout_g();
    let filter = copy + positions(g, &grid) * g.cout_g() + 2 * g.k_rows() * g.cout_g();
    4 * forward.max(filter)
}

pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol, q) = (g.in_vol(), g.out_vol(), positions(g, &grid));
    let t = tile(g, &grid, threads);
    // Tiles run in rounds of one per thread, each thread's GEMMs on their own: many small
    // GEMMs split across threads spend more on synchronising than they gain. (Splitting
    // the output channels between threads instead halves the GEMMs' width, which costs
    // more.)
    let starts: Vec<usize> = (0..q).step_by(t).collect();
    let round = threads.max(1);
    with_scratch(grid.len * cin + round * t * cout + k * cout, |scratch| {
        let (copy, rest) = scratch.split_at_mut(grid.len * cin);
        let (out_tiles, wr) = rest.split_at_mut(round * t * cout);
        for grp in 0..g.groups {
            rearrange(g, &taps, &w[grp * cout * k..][..cout * k], wr);
            let wr = &*wr;
            for n in 0..g.n {
                pack(
                    g,
                    &grid,
                    &x[(n * g.c_in + grp * cin) * in_vol..][..cin * in_vol],
                    copy,
                );
                let copy = &*copy;
                let ys = &mut y[(n * g.c_out + grp * cout) * out_vol..][..cout * out_vol];
                for batch in starts.chunks(round) {
                    out_tiles
                        .par_chunks_mut(t * cout)
                        .zip(batch.par_iter())
                        .for_each(|(dst, &q0)| {
                            let tt = t.min(q - q0);
                            let dst = &mut dst[..tt * cout];
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
                                    1,
                                );
                                row += cols;
                            }
                        });
                    let runs: Vec<(usize, usize, usize)> = batch
                        .iter()
                        .enumerate()
                        .flat_map(|(i, &q0)| {
                            runs(g, &grid, q0, t.min(q - q0))
                                .into_iter()
                                .map(move |(r, p, l)| (r + i * t, p, l))
                        })
                        .collect();
                    scatter_tile(out_tiles, cout, ys, out_vol, &runs);
                }
            }
        }
    });
}

pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let grid = Grid::new(g);
    let taps = taps(g, &grid);
    let (cin, cout, k) = (g.cin_g(), g.cout_g(), g.k_rows());
    let (in_vol, out_vol, q) = (g.in_vol(), g.out_vol(), positions(g, &grid));
    let all_runs = runs(g, &grid, 0, q);
    // One part of the positions per thread, each with its own partial sum.
    let parts = threads.clamp(1, q.div_ceil(MIN_TILE).max(1));
    let span = q.div_ceil(parts);
    with_scratch(grid.len * cin + q * cout + parts * k * cout, |scratch| {
        let (copy, rest) = scratch.split_at_mut(grid.len * cin);
        let (grad, partial) = rest.split_at_mut(q * cout);
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
                        let (q0, q1) = (p * span, ((p + 1) * span).min(q));
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
            restore(g, &taps, partial, &mut dw[grp * cout * k..][..cout * k]);
        }
    });
}
