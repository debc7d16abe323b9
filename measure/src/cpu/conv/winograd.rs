//! 3 x 3 unit-stride 2-d convolutions by Winograd's minimal filtering F(2 x 2, 3 x 3) (Lavin
//! and Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016): each 2 x 2
//! block of outputs is computed from a 4 x 4 block of inputs with 16 multiplications per
//! input and output channel pair instead of 36, so the GEMMs that carry the work have 2.25x
//! fewer FLOPs than the direct convolution's.
//!
//! With `d` a 4 x 4 input tile, `g` a 3 x 3 kernel and `Bᵀ`, `G`, `Aᵀ` the transforms below,
//! the 2 x 2 output tile is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A`. Summed over input channels, the
//! element-wise product at each of the 16 transform positions `ξ` is a GEMM: `M[ξ] (C_out x
//! tiles) = U[ξ] (C_out x C_in) V[ξ] (C_in x tiles)`. Tiles run in blocks small enough for
//! their transformed inputs and products to stay in cache; a block's 16 GEMMs run one per
//! thread at a time. Output tiles past the image's edge are computed and dropped, input reads
//! past it are zeros (the padding).
//!
//! The data gradient of a unit-stride convolution is the forward pass of its flipped kernel
//! (`conv::backward_data`), so it runs here too; the filter gradient stays on the GEMM paths.

use rayon::prelude::*;

use super::super::gemm::{View, ViewMut, matmul};
use super::geom::{ConvGeom, with_scratch};

/// Fewest input and output channels per group. Measured on ResNet-50's layers (batch 8, 2
/// threads, a 2-core Zen 3): with 128 to 512 channels (28 x 28 down to 7 x 7) the forward pass
/// takes 10-35 % less time than on the GEMM paths; with 64 (56 x 56) the transforms' memory
/// traffic eats the gain (17 ms against 16 ms).
const MIN_CHANNELS: usize = 128;

/// Most bytes of transformed inputs and products a block of tiles holds.
const BLOCK_BYTES: usize = 8 << 20;

/// Fewest tiles per block.
const MIN_BLOCK: usize = 64;

/// Whether the Winograd path runs `g`: it [`fits`], with at least [`MIN_CHANNELS`] channels
/// in and out per group.
pub(super) fn applies(g: &ConvGeom) -> bool {
    fits(g) && g.cin_g() >= MIN_CHANNELS && g.cout_g() >= MIN_CHANNELS
}

/// Whether F(2 x 2, 3 x 3) computes `g`: a 2-d 3 x 3 kernel, unit strides and dilations.
fn fits(g: &ConvGeom) -> bool {
    g.kernel == [1, 3, 3]
        && g.input[0] == 1
        && g.pad[0] == 0
        && g.stride == [1; 3]
        && g.dilation == [1; 3]
}

/// Output tiles per sample: `ceil(Ho / 2) x ceil(Wo / 2)`.
fn tiles(g: &ConvGeom) -> (usize, usize) {
    (g.output[1].div_ceil(2), g.output[2].div_ceil(2))
}

/// Tiles per block: whole rows of tiles.
fn block(g: &ConvGeom) -> usize {
    let (th, tw) = tiles(g);
    let most = (BLOCK_BYTES / (4 * 16 * (g.cin_g() + g.cout_g()))).max(MIN_BLOCK);
    most.div_ceil(tw).clamp(1, g.n * th) * tw
}

/// Scratch bytes of the forward pass (none where the path does not run `g`).
pub(super) fn workspace(g: &ConvGeom) -> usize {
    if !applies(g) {
        return 0;
    }
    4 * 16 * (g.cin_g() * g.cout_g() + block(g) * (g.cin_g() + g.cout_g()))
}

/// `U[ξ][co][ci] = (G g Gᵀ)[ξ]` for one group's weights (`C_out/g x C_in/g x 3 x 3`).
fn transform_weights(wg: &[f32], cin: usize, cout: usize, u: &mut [f32]) {
    // One task per output channel: it writes its row of every U[ξ].
    let mut rows: Vec<Vec<&mut [f32]>> = (0..cout).map(|_| Vec::with_capacity(16)).collect();
    for plane in u[..16 * cin * cout].chunks_mut(cin * cout) {
        for (row, part) in rows.iter_mut().zip(plane.chunks_mut(cin)) {
            row.push(part);
        }
    }
    rows.into_par_iter().enumerate().for_each(|(co, mut row)| {
        for ci in 0..cin {
            let k = &wg[(co * cin + ci) * 9..][..9];
            // s = G g (4 x 3), then s Gᵀ (4 x 4).
            let mut s = [[0.0f32; 3]; 4];
            for c in 0..3 {
                let (g0, g1, g2) = (k[c], k[3 + c], k[6 + c]);
                s[0][c] = g0;
                s[1][c] = 0.5 * (g0 + g1 + g2);
                s[2][c] = 0.5 * (g0 - g1 + g2);
                s[3][c] = g2;
            }
            for (r, sr) in s.iter().enumerate() {
                let u = [
                    sr[0],
                    0.5 * (sr[0] + sr[1] + sr[2]),
                    0.5 * (sr[0] - sr[1] + sr[2]),
                    sr[2],
                ];
                for (c, v) in u.iter().enumerate() {
                    row[r * 4 + c][ci] = *v;
                }
            }
        }
    });
}

/// `V[ξ][ci][t - t0] = (Bᵀ d B)[ξ]` for tiles `t0..t0 + nt` (numbered over samples, whole
/// rows of tiles) of one group's input channels starting at `c0`. A row of tiles at a time:
/// its four input rows are copied, zero-padded, into even and odd columns, so that every
/// tile's 4 x 4 window is the same element of eight short arrays and the loop over tiles
/// vectorises.
fn transform_inputs(g: &ConvGeom, x: &[f32], c0: usize, (t0, nt): (usize, usize), v: &mut [f32]) {
    let (cin, [_, hi, wi]) = (g.cin_g(), g.input);
    let (th, tw) = tiles(g);
    let per = cin * nt;
    let (ph, pw) = (g.pad[1] as isize, g.pad[2] as isize);
    // One task per input channel: it writes its row of every V[ξ].
    let mut rows: Vec<Vec<&mut [f32]>> = (0..cin).map(|_| Vec::with_capacity(16)).collect();
    for plane in v[..16 * per].chunks_mut(per) {
        for (row, part) in rows.iter_mut().zip(plane.chunks_mut(nt)) {
            row.push(part);
        }
    }
    rows.into_par_iter().enumerate().for_each(|(ci, mut row)| {
        // even[a][j] = input row a of the tile row at column 2j (padded), odd: 2j + 1.
        let mut even = vec![[0.0f32; 4]; tw + 1].into_boxed_slice();
        let mut odd = vec![[0.0f32; 4]; tw + 1].into_boxed_slice();
        let mut d = [[0.0f32; 16]; 16];
        for r in (t0 / tw)..(t0 + nt) / tw {
            let (n, tr) = (r / th, r % th);
            let plane = &x[(n * g.c_in + c0 + ci) * hi * wi..][..hi * wi];
            for a in 0..4 {
                let ir = 2 * tr as isize - ph + a as isize;
                for j in 0..=tw {
                    for (k, dst) in [(0, &mut even), (1, &mut odd)] {
                        let ic = 2 * j as isize + k - pw;
                        dst[j][a] = if ir >= 0 && ir < hi as isize && ic >= 0 && ic < wi as isize {
                            plane[ir as usize * wi + ic as usize]
                        } else {
                            0.0
                        };
                    }
                }
            }
            let base = r * tw - t0;
            for j0 in (0..tw).step_by(16) {
                let len = 16.min(tw - j0);
                #[allow(clippy::needless_range_loop)] // `l` indexes a column of all 16 rows of `d`
                for l in 0..len {
                    let j = j0 + l;
                    let col = [even[j], odd[j], even[j + 1], odd[j + 1]];
                    // Bᵀ d (rows), then (Bᵀ d) B (columns); col[c][a] is d[a][c].
                    let mut s = [[0.0f32; 4]; 4];
                    for c in 0..4 {
                        let e = col[c];
                        s[0][c] = e[0] - e[2];
                        s[1][c] = e[1] + e[2];
                        s[2][c] = e[2] - e[1];
                        s[3][c] = e[1] - e[3];
                    }
                    for (rr, sr) in s.iter().enumerate() {
                        d[rr * 4][l] = sr[0] - sr[2];
                        d[rr * 4 + 1][l] = sr[1] + sr[2];
                        d[rr * 4 + 2][l] = sr[2] - sr[1];
                        d[rr * 4 + 3][l] = sr[1] - sr[3];
                    }
                }
                for (xi, out) in row.iter_mut().enumerate() {
                    out[base + j0..][..len].copy_from_slice(&d[xi][..len]);
                }
            }
        }
    });
}

/// `y` tiles `t0..t0 + nt` (whole rows of tiles) of one group's output channels starting at
/// `c0`: `Aᵀ M A` of each, dropping outputs past the image's edge.
fn transform_outputs(g: &ConvGeom, m: &[f32], c0: usize, (t0, nt): (usize, usize), y: &mut [f32]) {
    let (cout, [_, ho, wo]) = (g.cout_g(), g.output);
    let (th, tw) = tiles(g);
    let (per, vol) = (cout * nt, ho * wo);
    let (n0, n1) = (t0 / (th * tw), (t0 + nt - 1) / (th * tw));
    y[n0 * g.c_out * vol..(n1 + 1) * g.c_out * vol]
        .par_chunks_mut(vol)
        .enumerate()
        .filter(|(i, _)| (c0..c0 + cout).contains(&(i % g.c_out)))
        .for_each(|(i, plane)| {
            let (n, co) = (n0 + i / g.c_out, i % g.c_out - c0);
            let mut out = vec![[0.0f32; 2]; 2 * tw].into_boxed_slice();
            let first = (n * th).max(t0 / tw);
            let last = ((n + 1) * th).min((t0 + nt) / tw);
            for r in first..last {
                let at = |xi: usize| &m[xi * per + co * nt + r * tw - t0..][..tw];
                let ms: [&[f32]; 16] = std::array::from_fn(at);
                for j in 0..tw {
                    // Aᵀ M (2 x 4), then (Aᵀ M) A (2 x 2).
                    let mut s = [[0.0f32; 4]; 2];
                    for c in 0..4 {
                        let (m0, m1, m2, m3) =
                            (ms[c][j], ms[4 + c][j], ms[8 + c][j], ms[12 + c][j]);
                        s[0][c] = m0 + m1 + m2;
                        s[1][c] = m1 - m2 - m3;
                    }
                    for (a, sr) in s.iter().enumerate() {
                        out[2 * j][a] = sr[0] + sr[1] + sr[2];
                        out[2 * j + 1][a] = sr[1] - sr[2] - sr[3];
                    }
                }
                let r0 = 2 * (r % th);
                for a in 0..2.min(ho - r0) {
                    let line = &mut plane[(r0 + a) * wo..][..wo];
                    for (e, o) in line.iter_mut().zip(out.iter()) {
                        *e = o[a];
                    }
                }
            }
        });
}

/// `y = conv(x, w)` (overwrites `y`).
pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32]) {
    forward_in_blocks(g, x, w, y, block(g));
}

fn forward_in_blocks(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], block: usize) {
    let (cin, cout) = (g.cin_g(), g.cout_g());
    let (th, tw) = tiles(g);
    let total = g.n * th * tw;
    // Whole rows of tiles.
    let block = block.div_ceil(tw).clamp(1, g.n * th) * tw;
    with_scratch(16 * (cin * cout + block * (cin + cout)), |scratch| {
        let (u, rest) = scratch.split_at_mut(16 * cin * cout);
        let (v, m) = rest.split_at_mut(16 * block * cin);
        for grp in 0..g.groups {
            transform_weights(&w[grp * cout * cin * 9..][..cout * cin * 9], cin, cout, u);
            let u = &*u;
            for t0 in (0..total).step_by(block) {
                let nt = block.min(total - t0);
                transform_inputs(g, x, grp * cin, (t0, nt), v);
                let v = &v[..16 * cin * nt];
                // The 16 products, one thread each at a time.
                m[..16 * cout * nt]
                    .par_chunks_mut(cout * nt)
                    .enumerate()
                    .for_each(|(xi, mx)| {
                        matmul(
                            ViewMut::rows(mx, cout, nt, nt),
                            View::rows(&u[xi * cout * cin..][..cout * cin], cout, cin),
                            View::rows(&v[xi * cin * nt..][..cin * nt], cin, nt),
                            false,
                            1,
                        );
                    });
                transform_outputs(g, &m[..16 * cout * nt], grp * cout, (t0, nt), y);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::tests::{geom_padded, naive_forward};
    use super::*;

    fn data(len: usize, seed: f32) -> Vec<f32> {
        (0..len)
            .map(|i| (i as f32 * 0.613 + seed).sin() * 0.5)
            .collect()
    }

    /// A 2-d geometry: `p` padding on both sides of height and width, none in depth.
    #[allow(clippy::too_many_arguments)]
    fn flat(
        n: usize,
        c_in: usize,
        c_out: usize,
        groups: usize,
        hw: [usize; 2],
        k: usize,
        s: usize,
        p: usize,
    ) -> ConvGeom {
        let (pad, one) = ([0, p, p], [1, hw[0], hw[1]]);
        geom_padded(
            n,
            c_in,
            c_out,
            groups,
            one,
            [1, k, k],
            [1, s, s],
            pad,
            pad,
            1,
        )
    }

    /// Odd and even sizes, paddings 0 to 2, groups, several samples, and blocks that start
    /// and end inside a sample.
    #[test]
    fn matches_the_naive_loop_nest() {
        for (g, block) in [
            (flat(2, 16, 16, 1, [7, 7], 3, 1, 1), 5),
            (flat(3, 16, 17, 1, [6, 9], 3, 1, 0), 7),
            (flat(1, 32, 32, 2, [5, 4], 3, 1, 2), 64),
            (flat(2, 17, 16, 1, [14, 14], 3, 1, 1), 1000),
        ] {
            assert!(fits(&g), "{g:?}");
            let x = data(g.n * g.c_in * g.in_vol(), 0.3);
            let w = data(g.weights(), 1.7);
            let mut y = vec![f32::NAN; g.n * g.c_out * g.out_vol()];
            forward_in_blocks(&g, &x, &w, &mut y, block);
            for (a, b) in y.iter().zip(&naive_forward(&g, &x, &w)) {
                assert!((f64::from(*a) - b).abs() < 1e-4, "{g:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn only_wide_unit_stride_3x3_2d_convolutions_apply() {
        assert!(applies(&flat(1, 256, 256, 1, [14, 14], 3, 1, 1)));
        assert!(!applies(&flat(1, 64, 64, 1, [56, 56], 3, 1, 1)));
        assert!(!applies(&flat(1, 256, 256, 1, [14, 14], 3, 2, 1)));
        assert!(!applies(&flat(1, 256, 256, 1, [14, 14], 5, 1, 2)));
        let mut dilated = flat(1, 256, 256, 1, [9, 9], 3, 1, 2);
        dilated.dilation = [1, 2, 2];
        assert!(!applies(&dilated));
        let cube = geom_padded(1, 256, 256, 1, [8, 8, 8], [3; 3], [1; 3], [1; 3], [1; 3], 1);
        assert!(!applies(&cube));
    }
}
