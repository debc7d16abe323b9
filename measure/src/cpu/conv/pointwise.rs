//! Pointwise (1x1, unpadded) convolutions: in the channels-first layout each sample's group
//! is already a `C x positions` matrix, so every pass is one GEMM per sample and group,
//! straight on the activations — no copy, no layout change — at unit stride. A strided one
//! first gathers the positions it reads into a compact `C x positions` matrix (and scatters
//! its data gradient back), a copy of the output's size rather than the input's.
//!
//! Small images (under [`JOIN_BELOW`] output positions, as in the last stages of a ResNet)
//! make GEMMs too short to run well, one per sample: there the samples' matrices are first
//! joined side by side into one `C x (samples positions)` matrix, so that a pass is one
//! GEMM per group over all the samples (the copies are small next to the GEMM's FLOPs).

use rayon::prelude::*;

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

/// Output positions below which the samples are joined into one GEMM.
const JOIN_BELOW: usize = 1024;

/// Most bytes of joined matrices held at once; more samples are joined in rounds.
const JOINED_BYTES: usize = 64 << 20;

/// Samples joined per round (1: the passes run one GEMM per sample).
fn joined(g: &ConvGeom) -> usize {
    if g.n < 2 || g.out_vol() >= JOIN_BELOW {
        return 1;
    }
    (JOINED_BYTES / (4 * g.out_vol() * (g.cin_g() + g.cout_g())).max(1)).clamp(1, g.n)
}

/// Scratch bytes of the passes.
pub(super) fn workspace(g: &ConvGeom) -> usize {
    let m = joined(g);
    if m > 1 {
        4 * m * g.out_vol() * (g.cin_g() + g.cout_g())
    } else if strided(g) {
        4 * g.cin_g() * g.out_vol()
    } else {
        0
    }
}

/// One group's planes of samples `n0..n0 + m` side by side: `dst[c][i P + p]` = channel
/// `c0 + c` of sample `n0 + i` at output position `p` (`src` has `total` channels of `vol`
/// elements per sample; `pick`: read the positions a strided pass reads, else `vol = P`).
#[allow(clippy::too_many_arguments)]
fn join(
    g: &ConvGeom,
    src: &[f32],
    total: usize,
    c0: usize,
    vol: usize,
    pick: bool,
    (n0, m): (usize, usize),
    dst: &mut [f32],
) {
    let p = g.out_vol();
    dst.par_chunks_mut(m * p).enumerate().for_each(|(c, row)| {
        for (i, out) in row.chunks_mut(p).enumerate() {
            let plane = &src[((n0 + i) * total + c0 + c) * vol..][..vol];
            if pick {
                for (d, at) in out.iter_mut().zip(positions(g)) {
                    *d = plane[at];
                }
            } else {
                out.copy_from_slice(plane);
            }
        }
    });
}

/// The adjoint of [`join`]: writes the joined `src` back into the planes of channels
/// `c0..c0 + channels` of samples `n0..n0 + m` of `dst` (with `pick`, at the positions read
/// and zero elsewhere).
#[allow(clippy::too_many_arguments)]
fn split(
    g: &ConvGeom,
    src: &[f32],
    total: usize,
    (c0, channels): (usize, usize),
    vol: usize,
    pick: bool,
    (n0, m): (usize, usize),
    dst: &mut [f32],
) {
    let p = g.out_vol();
    dst[n0 * total * vol..(n0 + m) * total * vol]
        .par_chunks_mut(vol)
        .enumerate()
        .filter(|(j, _)| (c0..c0 + channels).contains(&(j % total)))
        .for_each(|(j, plane)| {
            let (i, c) = (j / total, j % total - c0);
            let row = &src[(c * m + i) * p..][..p];
            if pick {
                plane.fill(0.0);
                for (v, at) in row.iter().zip(positions(g)) {
                    plane[at] = *v;
                }
            } else {
                plane.copy_from_slice(row);
            }
        });
}

/// Sample `n`'s input channels of group `grp` as a `C_in/g x P` matrix: the planes of `x`
/// themselves at unit stride, else the positions read gathered into `buf`.
fn sample_input<'a>(
    g: &ConvGeom,
    x: &'a [f32],
    (n, grp): (usize, usize),
    buf: &'a mut [f32],
) -> &'a [f32] {
    let (cin, iv) = (g.cin_g(), g.in_vol());
    let planes = &x[(n * g.c_in + grp * cin) * iv..][..cin * iv];
    if strided(g) {
        gather(g, planes, cin, buf);
        buf
    } else {
        planes
    }
}

/// Runs `f((n0, k), group, inputs, outputs)` for every round of `k` joined samples from
/// `n0` and every group, with scratch for the round's joined `C_in/g` and `C_out/g`
/// matrices (`k P` columns each).
fn in_rounds(g: &ConvGeom, mut f: impl FnMut((usize, usize), usize, &mut [f32], &mut [f32])) {
    let (m, p, cin, cout) = (joined(g), g.out_vol(), g.cin_g(), g.cout_g());
    with_scratch(m * p * (cin + cout), |buf| {
        let (ins, outs) = buf.split_at_mut(m * p * cin);
        for n0 in (0..g.n).step_by(m) {
            let k = m.min(g.n - n0);
            for grp in 0..g.groups {
                f(
                    (n0, k),
                    grp,
                    &mut ins[..k * p * cin],
                    &mut outs[..k * p * cout],
                );
            }
        }
    });
}

/// `y[n][grp] = w[grp] x[n][grp]`: `(C_out/g x C_in/g) (C_in/g x P)`.
pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
    let (cin, cout, iv, p) = (g.cin_g(), g.cout_g(), g.in_vol(), g.out_vol());
    if joined(g) > 1 {
        return in_rounds(g, |(n0, k), grp, xs, ys| {
            join(g, x, g.c_in, grp * cin, iv, strided(g), (n0, k), xs);
            matmul(
                ViewMut::rows(ys, cout, k * p, k * p),
                View::rows(&w[grp * cout * cin..][..cout * cin], cout, cin),
                View::rows(xs, cin, k * p),
                false,
                threads,
            );
            split(g, ys, g.c_out, (grp * cout, cout), p, false, (n0, k), y);
        });
    }
    let (inner, outer) = sample_threads(g, threads);
    let one = |n: usize, yn: &mut [f32]| {
        with_scratch(if strided(g) { cin * p } else { 0 }, |buf| {
            for grp in 0..g.groups {
                let xs = sample_input(g, x, (n, grp), buf);
                matmul(
                    ViewMut::rows(&mut yn[grp * cout * p..][..cout * p], cout, p, p),
                    View::rows(&w[grp * cout * cin..][..cout * cin], cout, cin),
                    View::rows(xs, cin, p),
                    false,
                    inner,
                );
            }
        });
    };
    let planes = y.chunks_mut(g.c_out * p).enumerate();
    if outer {
        planes.par_bridge().for_each(|(n, yn)| one(n, yn));
    } else {
        planes.for_each(|(n, yn)| one(n, yn));
    }
}

/// `dx[n][grp] = w[grp]^T dy[n][grp]`.
pub(super) fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32], threads: usize) {
    let (cin, cout, iv, p) = (g.cin_g(), g.cout_g(), g.in_vol(), g.out_vol());
    if joined(g) > 1 {
        return in_rounds(g, |(n0, k), grp, dxs, dys| {
            join(g, dy, g.c_out, grp * cout, p, false, (n0, k), dys);
            matmul(
                ViewMut::rows(dxs, cin, k * p, k * p),
                View::rows(&w[grp * cout * cin..][..cout * cin], cout, cin).t(),
                View::rows(dys, cout, k * p),
                false,
                threads,
            );
            split(
                g,
                dxs,
                g.c_in,
                (grp * cin, cin),
                iv,
                strided(g),
                (n0, k),
                dx,
            );
        });
    }
    let (inner, outer) = sample_threads(g, threads);
    let one = |n: usize, dxn: &mut [f32]| {
        with_scratch(if strided(g) { cin * p } else { 0 }, |buf| {
            for grp in 0..g.groups {
                let dxs = &mut dxn[grp * cin * iv..][..cin * iv];
                let product = |dst: &mut [f32]| {
                    matmul(
                        ViewMut::rows(dst, cin, p, p),
                        View::rows(&w[grp * cout * cin..][..cout * cin], cout, cin).t(),
                        View::rows(&dy[(n * g.c_out + grp * cout) * p..][..cout * p], cout, p),
                        false,
                        inner,
                    );
                };
                if strided(g) {
                    product(&mut *buf);
                    scatter(g, buf, cin, dxs);
                } else {
                    product(dxs);
                }
            }
        });
    };
    let planes = dx.chunks_mut(g.c_in * iv).enumerate();
    if outer {
        planes.par_bridge().for_each(|(n, dxn)| one(n, dxn));
    } else {
        planes.for_each(|(n, dxn)| one(n, dxn));
    }
}

/// `dw[grp] = sum over n of dy[n][grp] x[n][grp]^T`.
pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32], threads: usize) {
    let (cin, cout, iv, p) = (g.cin_g(), g.cout_g(), g.in_vol(), g.out_vol());
    if joined(g) > 1 {
        return in_rounds(g, |(n0, k), grp, xs, dys| {
            join(g, x, g.c_in, grp * cin, iv, strided(g), (n0, k), xs);
            join(g, dy, g.c_out, grp * cout, p, false, (n0, k), dys);
            matmul(
                ViewMut::rows(&mut dw[grp * cout * cin..][..cout * cin], cout, cin, cin),
                View::rows(dys, cout, k * p),
                View::rows(xs, cin, k * p).t(),
                n0 > 0,
                threads,
            );
        });
    }
    // One partial sum per share of the samples, each share on a thread of its own.
    let (inner, outer) = sample_threads(g, threads);
    let shares = if outer { threads.min(g.n) } else { 1 };
    let mut partial = vec![0.0f32; (shares - 1) * dw.len()];
    let sums = std::iter::once(&mut *dw).chain(partial.chunks_mut(g.c_out * cin));
    let one = |share: usize, dws: &mut [f32]| {
        with_scratch(if strided(g) { cin * p } else { 0 }, |buf| {
            for (i, n) in (share..g.n).step_by(shares).enumerate() {
                for grp in 0..g.groups {
                    let xs = sample_input(g, x, (n, grp), buf);
                    matmul(
                        ViewMut::rows(&mut dws[grp * cout * cin..][..cout * cin], cout, cin, cin),
                        View::rows(&dy[(n * g.c_out + grp * cout) * p..][..cout * p], cout, p),
                        View::rows(xs, cin, p).t(),
                        i > 0,
                        inner,
                    );
                }
            }
        });
    };
    if outer {
        sums.enumerate().par_bridge().for_each(|(s, d)| one(s, d));
        for part in partial.chunks(dw.len()) {
            dw.iter_mut().zip(part).for_each(|(d, v)| *d += v);
        }
    } else {
        sums.enumerate().for_each(|(s, d)| one(s, d));
    }
}

/// Threads per GEMM, and whether samples run in parallel (each sample's GEMMs on one
/// thread): with at least as many samples as threads, whole samples share the threads
/// better than each GEMM does (no synchronisation inside a GEMM, and a GEMM's own split
/// scales poorly on short products).
fn sample_threads(g: &ConvGeom, threads: usize) -> (usize, bool) {
    if threads > 1 && g.n >= threads {
        (1, true)
    } else {
        (threads, false)
    }
}
