//! Depthwise convolution (one input and one output channel per group) as a direct loop
//! nest: for each output row and kernel tap, one multiply-add over the row's valid span,
//! which the compiler vectorises for unit strides. Planes run in parallel.

use rayon::prelude::*;

use super::geom::{ConvGeom, offset};

/// The span `[lo, hi)` of output columns `ow` whose input column
/// `ow * stride + tap - pad` lies in `[0, wi)`, clipped to `[0, wo)`.
#[inline]
pub(super) fn valid_span(
    wo: usize,
    stride: usize,
    tap: usize,
    pad: usize,
    wi: usize,
) -> (usize, usize) {
    let lo = pad.saturating_sub(tap).div_ceil(stride).min(wo);
    let hi = (wi + pad)
        .saturating_sub(tap)
        .div_ceil(stride)
        .min(wo)
        .max(lo);
    (lo, hi)
}

/// Calls `f(out_row, in_row, lo, hi, first, kk)` for every output row (as a position of its
/// first element), kernel tap `kk` and the valid span `[lo, hi)` of that row, whose first
/// element reads input position `in_row + first`.
#[inline]
fn rows(g: &ConvGeom, mut f: impl FnMut(usize, usize, usize, usize, usize, usize)) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    for kk in 0..g.kvol() {
        let (a, b, c) = offset(g, kk);
        let tap = c * g.dilation[2];
        let (lo, hi_) = valid_span(wo, g.stride[2], tap, g.pad[2], wi);
        if lo == hi_ {
            continue;
        }
        let first = lo * g.stride[2] + tap - g.pad[2];
        for od in 0..do_ {
            let Some(id) = g.coord(0, od, a) else {
                continue;
            };
            for oh in 0..ho {
                let Some(ih) = g.coord(1, oh, b) else {
                    continue;
                };
                f((od * ho + oh) * wo, (id * hi + ih) * wi, lo, hi_, first, kk);
            }
        }
    }
}

pub(super) fn forward(g: &ConvGeom, x: &[f32], w: &[f32], y: &mut [f32]) {
    let (in_vol, out_vol, kvol, s) = (g.in_vol(), g.out_vol(), g.kvol(), g.stride[2]);
    y.par_chunks_mut(out_vol)
        .enumerate()
        .for_each(|(nc, plane)| {
            let c = nc % g.c_out;
            let xs = &x[nc * in_vol..][..in_vol];
            let wc = &w[c * kvol..][..kvol];
            plane.fill(0.0);
            rows(g, |o, i, lo, hi, first, kk| {
                let wv = wc[kk];
                let dst = &mut plane[o + lo..o + hi];
                if s == 1 {
                    dst.iter_mut()
                        .zip(&xs[i + first..])
                        .for_each(|(y, x)| *y += wv * x);
                } else {
                    dst.iter_mut()
                        .enumerate()
                        .for_each(|(j, y)| *y += wv * xs[i + first + j * s]);
                }
            });
        });
}

pub(super) fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32]) {
    let (in_vol, out_vol, kvol, s) = (g.in_vol(), g.out_vol(), g.kvol(), g.stride[2]);
    dx.par_chunks_mut(in_vol)
        .enumerate()
        .for_each(|(nc, plane)| {
            let c = nc % g.c_in;
            let dys = &dy[nc * out_vol..][..out_vol];
            let wc = &w[c * kvol..][..kvol];
            plane.fill(0.0);
            rows(g, |o, i, lo, hi, first, kk| {
                let wv = wc[kk];
                let src = &dys[o + lo..o + hi];
                if s == 1 {
                    plane[i + first..][..src.len()]
                        .iter_mut()
                        .zip(src)
                        .for_each(|(x, g)| *x += wv * g);
                } else {
                    src.iter()
                        .enumerate()
                        .for_each(|(j, g)| plane[i + first + j * s] += wv * g);
                }
            });
        });
}

pub(super) fn backward_filter(g: &ConvGeom, x: &[f32], dy: &[f32], dw: &mut [f32]) {
    let (in_vol, out_vol, kvol, s) = (g.in_vol(), g.out_vol(), g.kvol(), g.stride[2]);
    dw.par_chunks_mut(kvol).enumerate().for_each(|(c, wc)| {
        wc.fill(0.0);
        for n in 0..g.n {
            let nc = n * g.c_in + c;
            let xs = &x[nc * in_vol..][..in_vol];
            let dys = &dy[nc * out_vol..][..out_vol];
            rows(g, |o, i, lo, hi, first, kk| {
                let src = &dys[o + lo..o + hi];
                wc[kk] += if s == 1 {
                    src.iter()
                        .zip(&xs[i + first..])
                        .map(|(g, x)| g * x)
                        .sum::<f32>()
                } else {
                    src.iter()
                        .enumerate()
                        .map(|(j, g)| g * xs[i + first + j * s])
                        .sum::<f32>()
                };
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_clip_to_the_input() {
        // wi = 5, pad 1, kernel tap 0: output 0 reads -1 (invalid), 1..5 read 0..4.
        assert_eq!(valid_span(5, 1, 0, 1, 5), (1, 5));
        assert_eq!(valid_span(5, 1, 2, 1, 5), (0, 4));
        // Stride 2, pad 3, tap 0: ow*2 - 3 >= 0 from ow = 2; < 7 while ow*2 < 10.
        assert_eq!(valid_span(6, 2, 0, 3, 7), (2, 5));
        // No overlap at all.
        assert_eq!(valid_span(2, 1, 0, 9, 3), (2, 2));
    }
}
