//! What both GEMM paths share: the padded, channels-last copy of one group's input, the
//! kernel taps grouped into GEMM operands, weights rearranged to match, and the conversions
//! between channels-first planes and channels-last tiles.

use rayon::prelude::*;

use super::geom::ConvGeom;

/// The padded grid of one convolution: the input with its padding, enough for every
/// window, channels-last.
#[derive(Debug, Clone, Copy)]
pub(super) struct Grid {
    /// Padded height and width (the depth is implied by `len`).
    pub(super) hp: usize,
    pub(super) wp: usize,
    /// Positions in the copy: the grid plus a zero tail that keeps every shifted read of
    /// the unit-stride path in bounds.
    pub(super) len: usize,
}

impl Grid {
    pub(super) fn new(g: &ConvGeom) -> Grid {
        let ext = |d: usize| {
            (g.input[d] + g.pad[d])
                .max((g.output[d] - 1) * g.stride[d] + (g.kernel[d] - 1) * g.dilation[d] + 1)
        };
        let (dp, hp, wp) = (ext(0), ext(1), ext(2));
        let tail = (g.kernel[1] - 1) * g.dilation[1] * wp + (g.kernel[2] - 1) * g.dilation[2];
        Grid {
            hp,
            wp,
            len: dp * hp * wp + tail,
        }
    }

    /// The grid position of the first tap of output `(od, oh, ow)`'s window.
    #[inline]
    pub(super) fn origin(&self, g: &ConvGeom, od: usize, oh: usize, ow: usize) -> usize {
        (od * g.stride[0] * self.hp + oh * g.stride[1]) * self.wp + ow * g.stride[2]
    }
}

/// One GEMM operand of the tap sum: the taps `(a, b, c0..c0 + n)` of a kernel row, `shift`
/// grid positions from a window's origin. With `dW = 1` a kernel row's taps are adjacent
/// in the copy and form one operand.
#[derive(Debug, Clone, Copy)]
pub(super) struct Taps {
    pub(super) a: usize,
    pub(super) b: usize,
    pub(super) c0: usize,
    pub(super) n: usize,
    pub(super) shift: usize,
}

pub(super) fn taps(g: &ConvGeom, grid: &Grid) -> Vec<Taps> {
    let [kd, kh, kw] = g.kernel;
    let [dd, dh, dw] = g.dilation;
    let per = if dw == 1 { kw } else { 1 };
    let mut out = Vec::with_capacity(kd * kh * kw);
    for a in 0..kd {
        for b in 0..kh {
            for c0 in (0..kw).step_by(per) {
                let shift = (a * dd * grid.hp + b * dh) * grid.wp + c0 * dw;
                out.push(Taps {
                    a,
                    b,
                    c0,
                    n: per,
                    shift,
                });
            }
        }
    }
    out
}

/// The lowered column of tap `j` of `t` for input channel `ci`: columns run over the taps
/// in order, `C_in / groups` channels each.
#[inline]
pub(super) fn kernel_index(g: &ConvGeom, t: &Taps, j: usize) -> usize {
    let [_, kh, kw] = g.kernel;
    (t.a * kh + t.b) * kw + t.c0 + j
}

/// The row of the tap-order matrix that holds flattened kernel index `kk` of input channel
/// `ci`, for every `kk`: `tap_row(kk) * C_in/g + ci`.
fn tap_rows(g: &ConvGeom, taps: &[Taps]) -> Vec<usize> {
    let mut rows = vec![0; g.kvol()];
    let mut r = 0;
    for t in taps {
        for j in 0..t.n {
            rows[kernel_index(g, t, j)] = r;
            r += 1;
        }
    }
    rows
}

/// Block size of the weight transposes.
const B: usize = 16;

/// Weights of one group (`C_out/g x C_in/g x kernel`) as a `(kernel C_in/g) x C_out/g`
/// row-major matrix in tap order, written to `out`: row `tap * C_in/g + ci` is input
/// channel `ci` at the `tap`-th kernel offset in [`taps`] order. Weights change every step,
/// so they are re-laid out on every call: in parallel bands of [`B`] rows, each filled one
/// output channel at a time, so that every source row is read once per band and the band's
/// rows stay in cache.
pub(super) fn rearrange(g: &ConvGeom, taps: &[Taps], wg: &[f32], out: &mut [f32]) {
    let (cin, cout, k, kvol) = (g.cin_g(), g.cout_g(), g.k_rows(), g.kvol());
    let mut source = vec![0; k];
    for (kk, &row) in tap_rows(g, taps).iter().enumerate() {
        for ci in 0..cin {
            source[row * cin + ci] = ci * kvol + kk;
        }
    }
    out[..k * cout]
        .par_chunks_mut(B * cout)
        .zip(source.par_chunks(B))
        .for_each(|(band, from)| {
            for co in 0..cout {
                let src = &wg[co * k..][..k];
                for (row, &s) in band.chunks_mut(cout).zip(from) {
                    row[co] = src[s];
                }
            }
        });
}

/// The inverse of [`rearrange`], summing `parts` tap-order matrices laid end to end into
/// `dwg` (`C_out/g x C_in/g x kernel`, overwritten).
pub(super) fn restore(g: &ConvGeom, taps: &[Taps], parts: &[f32], dwg: &mut [f32]) {
    let (cin, cout, k, kvol) = (g.cin_g(), g.cout_g(), g.k_rows(), g.kvol());
    let n = parts.len() / (k * cout);
    let rows = tap_rows(g, taps);
    dwg.par_chunks_mut(B * k)
        .enumerate()
        .for_each(|(blk, dst)| {
            let co0 = blk * B;
            for s0 in (0..k).step_by(B) {
                for s in s0..(s0 + B).min(k) {
                    let (ci, kk) = (s / kvol, s % kvol);
                    let r = rows[kk] * cin + ci;
                    for (c, row) in dst.chunks_mut(k).enumerate() {
                        row[s] = (0..n).map(|p| parts[(p * k + r) * cout + co0 + c]).sum();
                    }
                }
            }
        });
}

/// Copies one group's input planes (`C_in/g x in_vol`) into the padded grid,
/// channels-last; everything else in `copy` is zero. In parallel over the grid's rows (a 2-d
/// image has a single depth plane).
pub(super) fn pack(g: &ConvGeom, grid: &Grid, xs: &[f32], copy: &mut [f32]) {
    let cin = g.cin_g();
    let [di, hi, wi] = g.input;
    let in_vol = g.in_vol();
    let pw = g.pad[2];
    copy.par_chunks_mut(grid.wp * cin)
        .enumerate()
        .for_each(|(r, row)| {
            let (dp, hp) = (r / grid.hp, r % grid.hp);
            let at = dp
                .checked_sub(g.pad[0])
                .filter(|&d| d < di && row.len() == grid.wp * cin)
                .zip(hp.checked_sub(g.pad[1]).filter(|&h| h < hi));
            let Some((d, h)) = at else {
                row.fill(0.0);
                return;
            };
            row[..pw * cin].fill(0.0);
            row[(pw + wi) * cin..].fill(0.0);
            let body = &mut row[pw * cin..(pw + wi) * cin];
            for ci in 0..cin {
                let src = &xs[ci * in_vol + (d * hi + h) * wi..][..wi];
                for (w, v) in src.iter().enumerate() {
                    body[w * cin + ci] = *v;
                }
            }
        });
}

/// The adjoint of [`pack`]: adds the interior of a padded channels-last grid onto one
/// group's input planes (`C_in/g x in_vol`), dropping the padding.
pub(super) fn unpack_add(g: &ConvGeom, grid: &Grid, copy: &[f32], xs: &mut [f32]) {
    let cin = g.cin_g();
    let [di, hi, wi] = g.input;
    let in_vol = g.in_vol();
    xs.par_chunks_mut(in_vol)
        .enumerate()
        .for_each(|(ci, plane)| {
            for d in 0..di {
                for h in 0..hi {
                    let base = ((d + g.pad[0]) * grid.hp + h + g.pad[1]) * grid.wp + g.pad[2];
                    let dst = &mut plane[(d * hi + h) * wi..][..wi];
                    for (w, v) in dst.iter_mut().enumerate() {
                        *v += copy[(base + w) * cin + ci];
                    }
                }
            }
        });
}

/// Copies a channels-last tile `tile` (`rows x channels`, row-major) into channels-first
/// planes (`channels x vol`): for each run `(r0, p0, len)`, tile rows `r0..r0 + len` go to
/// positions `p0..p0 + len`. Eight channels at a time, in 8 x 8 blocks.
pub(super) fn scatter_tile(
    tile: &[f32],
    channels: usize,
    planes: &mut [f32],
    vol: usize,
    runs: &[(usize, usize, usize)],
) {
    const B: usize = 8;
    planes
        .par_chunks_mut(B * vol)
        .enumerate()
        .for_each(|(blk, dst)| {
            let c0 = blk * B;
            let width = dst.len() / vol;
            for &(r0, p0, len) in runs {
                let mut j = 0;
                if width == B {
                    while j + B <= len {
                        let block: [[f32; B]; B] = std::array::from_fn(|r| {
                            let row = &tile[(r0 + j + r) * channels + c0..][..B];
                            std::array::from_fn(|c| row[c])
                        });
                        for (c, plane) in dst.chunks_mut(vol).enumerate() {
                            for (r, v) in plane[p0 + j..][..B].iter_mut().enumerate() {
                                *v = block[r][c];
                            }
                        }
                        j += B;
                    }
                }
                for jj in j..len {
                    let row = &tile[(r0 + jj) * channels + c0..][..width];
                    for (c, v) in row.iter().enumerate() {
                        dst[c * vol + p0 + jj] = *v;
                    }
                }
            }
        });
}

/// Copies channels-first planes (`channels x vol`) into a channels-last tile: for each run
/// `(r0, p0, len)`, positions `p0..p0 + len` go to tile rows `r0..r0 + len`; rows in no run
/// are zero.
pub(super) fn gather_tile(
    planes: &[f32],
    channels: usize,
    vol: usize,
    tile: &mut [f32],
    runs: &[(usize, usize, usize)],
) {
    let rows = tile.len() / channels.max(1);
    let chunk = rows.div_ceil(rayon::current_num_threads().max(1)).max(64);
    tile.par_chunks_mut(chunk * channels)
        .enumerate()
        .for_each(|(t, part)| {
            part.fill(0.0);
            let (lo, hi) = (t * chunk, t * chunk + part.len() / channels);
            for &(r0, p0, len) in runs {
                let (a, b) = (r0.max(lo), (r0 + len).min(hi));
                for r in a..b {
                    let p = p0 + (r - r0);
                    let row = &mut part[(r - lo) * channels..][..channels];
                    for (c, v) in row.iter_mut().enumerate() {
                        *v = planes[c * vol + p];
                    }
                }
            }
        });
}
