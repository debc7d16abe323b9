//! Pooling over windows of up to three spatial dimensions: max and average pooling,
//! forward and backward side by side, plane by plane.

use rayon::prelude::*;
use ridgeline_model::graph::Pool;

use crate::cpu::conv::three;

/// A pooling window normalised to three spatial dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PoolGeom {
    pub(crate) nc: usize,
    pub(crate) input: [usize; 3],
    pub(crate) output: [usize; 3],
    pub(crate) kernel: [usize; 3],
    pub(crate) stride: [usize; 3],
    pub(crate) pad: [usize; 3],
}

impl PoolGeom {
    pub(super) fn new(p: &Pool, nc: usize, input: &[usize], output: &[usize]) -> Self {
        PoolGeom {
            nc,
            input: three(input, 1),
            output: three(output, 1),
            kernel: three(&p.kernel, 1),
            stride: three(&p.stride, 1),
            pad: three(
                &p.padding
                    .pairs()
                    .iter()
                    .map(|pair| pair[0])
                    .collect::<Vec<_>>(),
                0,
            ),
        }
    }

    /// The input span `[lo, hi)` along dimension `d` of output coordinate `o` (padding
    /// clipped off).
    #[inline]
    fn span(&self, d: usize, o: usize) -> (usize, usize) {
        let start = o * self.stride[d];
        let hi = (start + self.kernel[d])
            .saturating_sub(self.pad[d])
            .min(self.input[d]);
        (start.saturating_sub(self.pad[d]).min(hi), hi)
    }

    fn in_vol(&self) -> usize {
        self.input.iter().product()
    }

    fn out_vol(&self) -> usize {
        self.output.iter().product()
    }

    /// Max pooling's forward pass, plane by plane.
    pub(super) fn max_forward(&self, x: &[f32], out: &mut [f32]) {
        let (iv, ov) = (self.in_vol(), self.out_vol());
        out.par_chunks_mut(ov)
            .zip(x.par_chunks(iv))
            .for_each_init(Vec::new, |row, (o, xi)| max_pool_plane(self, xi, o, row));
    }

    /// Max pooling's backward pass: each window's gradient to its maximum.
    pub(super) fn max_backward(&self, x: &[f32], dy: &[f32], d: &mut [f32]) {
        let (iv, ov) = (self.in_vol(), self.out_vol());
        d.par_chunks_mut(iv)
            .zip(x.par_chunks(iv))
            .zip(dy.par_chunks(ov))
            .for_each(|((di, xi), dyi)| max_pool_plane_backward(self, xi, dyi, di));
    }

    /// Average pooling's forward pass, plane by plane.
    pub(super) fn avg_forward(&self, x: &[f32], out: &mut [f32]) {
        let (iv, ov) = (self.in_vol(), self.out_vol());
        out.par_chunks_mut(ov)
            .zip(x.par_chunks(iv))
            .for_each_init(Vec::new, |row, (o, xi)| avg_pool_plane(self, xi, o, row));
    }

    /// Average pooling's backward pass: each window's gradient spread over it.
    pub(super) fn avg_backward(&self, dy: &[f32], d: &mut [f32]) {
        let (iv, ov) = (self.in_vol(), self.out_vol());
        d.par_chunks_mut(iv)
            .zip(dy.par_chunks(ov))
            .for_each(|(di, dyi)| avg_pool_plane_backward(self, dyi, di));
    }
}

/// Max pooling of one plane: the window's rows are first reduced element-wise across depth
/// and height (vectorised), then along width.
fn max_pool_plane(g: &PoolGeom, x: &[f32], out: &mut [f32], row: &mut Vec<f32>) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            row.clear();
            row.resize(wi, f32::NEG_INFINITY);
            for id in d0..d1 {
                for ih in h0..h1 {
                    let src = &x[(id * hi + ih) * wi..][..wi];
                    row.iter_mut().zip(src).for_each(|(m, &v)| *m = m.max(v));
                }
            }
            let dst = &mut out[(od * ho + oh) * wo..][..wo];
            for (ow, o) in dst.iter_mut().enumerate() {
                let (w0, w1) = g.span(2, ow);
                *o = row[w0..w1].iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
            }
        }
    }
}

/// Average pooling of one plane (padding counts towards the divisor, PyTorch's default).
fn avg_pool_plane(g: &PoolGeom, x: &[f32], out: &mut [f32], row: &mut Vec<f32>) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    #[allow(clippy::cast_precision_loss)]
    let k = g.kernel.iter().product::<usize>() as f32;
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            row.clear();
            row.resize(wi, 0.0);
            for id in d0..d1 {
                for ih in h0..h1 {
                    let src = &x[(id * hi + ih) * wi..][..wi];
                    row.iter_mut().zip(src).for_each(|(m, &v)| *m += v);
                }
            }
            let dst = &mut out[(od * ho + oh) * wo..][..wo];
            for (ow, o) in dst.iter_mut().enumerate() {
                let (w0, w1) = g.span(2, ow);
                *o = row[w0..w1].iter().sum::<f32>() / k;
            }
        }
    }
}

/// The gradient of max pooling for one plane: each output's gradient goes to the first
/// maximum of its window (overwrites `dx`). The arg-max is kept with selects rather than
/// branches: which element wins is unpredictable.
fn max_pool_plane_backward(g: &PoolGeom, x: &[f32], dy: &[f32], dx: &mut [f32]) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    dx.fill(0.0);
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            for ow in 0..wo {
                let (w0, w1) = g.span(2, ow);
                if d0 == d1 || h0 == h1 || w0 == w1 {
                    continue;
                }
                let first = (d0 * hi + h0) * wi + w0;
                let (mut best, mut arg) = (x[first], first);
                for id in d0..d1 {
                    for ih in h0..h1 {
                        let base = (id * hi + ih) * wi;
                        for (iw, &v) in x[base + w0..base + w1].iter().enumerate() {
                            let better = v > best;
                            best = if better { v } else { best };
                            arg = if better { base + w0 + iw } else { arg };
                        }
                    }
                }
                dx[arg] += dy[(od * ho + oh) * wo + ow];
            }
        }
    }
}

/// The gradient of average pooling for one plane (overwrites `dx`).
fn avg_pool_plane_backward(g: &PoolGeom, dy: &[f32], dx: &mut [f32]) {
    let [do_, ho, wo] = g.output;
    let [_, hi, wi] = g.input;
    #[allow(clippy::cast_precision_loss)]
    let k = g.kernel.iter().product::<usize>() as f32;
    dx.fill(0.0);
    for od in 0..do_ {
        let (d0, d1) = g.span(0, od);
        for oh in 0..ho {
            let (h0, h1) = g.span(1, oh);
            for ow in 0..wo {
                let (w0, w1) = g.span(2, ow);
                let v = dy[(od * ho + oh) * wo + ow] / k;
                for id in d0..d1 {
                    for ih in h0..h1 {
                        let base = (id * hi + ih) * wi;
                        dx[base + w0..base + w1].iter_mut().for_each(|d| *d += v);
                    }
                }
            }
        }
    }
}

/// Global average pooling: each plane of `vol` positions to its mean.
pub(super) fn global_avg_forward(vol: usize, x: &[f32], out: &mut [f32]) {
    #[allow(clippy::cast_precision_loss)]
    let v = vol as f32;
    out.par_iter_mut()
        .zip(x.par_chunks(vol))
        .for_each(|(o, xi)| *o = xi.iter().sum::<f32>() / v);
}

/// Global average pooling's backward pass: each plane's gradient spread evenly over it.
pub(super) fn global_avg_backward(vol: usize, dy: &[f32], d: &mut [f32]) {
    #[allow(clippy::cast_precision_loss)]
    let v = vol as f32;
    d.par_chunks_mut(vol)
        .zip(dy.par_iter())
        .for_each(|(di, g)| di.fill(g / v));
}
