//! N-d convolution on the CPU: forward, backward-data and backward-filter in `f32`, every
//! multiply-accumulate in the GEMM crate except for depthwise convolutions.
//!
//! Both GEMM paths start from one copy of the input of a group of a sample into a
//! zero-padded, channels-last grid ([`layout`]).
//!
//! - Unit-stride convolutions on images large enough that padding costs little run
//!   [`shifted`]: on the padded grid each kernel offset is a plain shift, so a tile of
//!   outputs is a short sum of GEMMs straight from the copy — no im2col. The backward-data
//!   pass is the forward pass of the flipped, transposed kernel; the backward-filter pass is
//!   a GEMM per kernel row over all positions.
//! - Strided convolutions and small images run [`lowered`]: a tile of output positions is
//!   lowered position-major from the copy (im2col, one contiguous copy per kernel row),
//!   then one GEMM.
//! - Pointwise convolutions (1x1, no padding) run [`pointwise`]: one GEMM per sample and
//!   group straight on the channels-first activations — no copy at unit stride, a gather of
//!   the positions read (the output's size) when strided; on small images the samples are
//!   joined side by side into one GEMM.
//! - 2-d 3 x 3 unit-stride convolutions with 128 or more channels in and out per group run
//!   [`winograd`] F(2 x 2, 3 x 3) forward (and so backward-data, the flipped forward pass):
//!   2.25x fewer FLOPs in its GEMMs than the direct convolution.
//! - Depthwise convolutions (one channel per group) run a direct loop nest.
//!
//! The GEMM crate is fastest when the output tile is channels-last and the long dimension
//! (positions) is its column count; both paths arrange their operands so, and convert
//! from and to the channels-first layout of activations once per tile.
//!
//! 1-d and 2-d convolutions run as 3-d ones with unit leading dimensions. A transposed
//! convolution is the adjoint of a convolution: its forward pass is that convolution's
//! `backward_data`, its data gradient that convolution's `forward`.
//!
//! Layouts: activations `[N][C][D][H][W]`, weights `[C_out][C_in / groups][kD][kH][kW]`
//! (PyTorch's), all row-major `f32`.

mod depthwise;
mod geom;
mod layout;
mod lowered;
mod pointwise;
mod shifted;
mod winograd;

use rayon::prelude::*;

pub(crate) use geom::{ConvGeom, three};

/// Largest share of extra work on padding the shifted path may do (`Hp Wp / (Ho Wo) - 1`);
/// past it, the lowered path's im2col costs less.
const MAX_WASTE: f64 = 0.25;

/// Fewest input channels per group for which backward-data runs as the flipped forward pass.
const MIN_FLIPPED_CHANNELS: usize = 16;

impl ConvGeom {
    /// Whether the shifted path runs this convolution: unit strides, and at most
    /// [`MAX_WASTE`] of its work spent on padding.
    fn shifted(&self) -> bool {
        self.unit_stride() && shifted::waste(self) <= MAX_WASTE
    }

    /// Bytes of scratch memory the passes allocate while they run (the largest of them).
    pub(crate) fn workspace_bytes(&self) -> usize {
        if self.depthwise() {
            0
        } else if pointwise::applies(self) {
            pointwise::workspace(self)
        } else if self.unit_stride() {
            // Backward-data is the flipped convolution's forward pass where there is one.
            let backward_data = self.flipped().map_or_else(
                || lowered::workspace(self),
                |f| shifted::workspace(&f).max(winograd::workspace(&f)),
            );
            shifted::workspace(self)
                .max(winograd::workspace(self))
                .max(backward_data)
        } else {
            lowered::workspace(self)
        }
    }
}

/// `y = conv(x, w) + bias`.
pub(crate) fn forward(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    threads: usize,
) {
    if g.depthwise() {
        depthwise::forward(g, x, w, y);
    } else if pointwise::applies(g) {
        pointwise::forward(g, x, w, y, threads);
    } else if winograd::applies(g) {
        winograd::forward(g, x, w, y);
    } else if g.shifted() {
        shifted::forward(g, x, w, y, threads);
    } else {
        lowered::forward(g, x, w, y, threads);
    }
    if let Some(b) = bias {
        add_channel_bias(y, b, g.c_out, g.out_vol());
    }
}

/// Adds `bias[c]` to every element of channel `c` of a `[N][C][vol]` tensor.
pub(crate) fn add_channel_bias(y: &mut [f32], bias: &[f32], channels: usize, vol: usize) {
    y.par_chunks_mut(vol).enumerate().for_each(|(i, plane)| {
        let v = bias[i % channels];
        plane.iter_mut().for_each(|e| *e += v);
    });
}

/// `dx = conv^T(dy, w)`: the gradient with respect to the input (overwrites `dx`).
pub(crate) fn backward_data(g: &ConvGeom, dy: &[f32], w: &[f32], dx: &mut [f32], threads: usize) {
    if g.depthwise() {
        depthwise::backward_data(g, dy, w, dx);
        return;
    }
    if pointwise::applies(g) {
        pointwise::backward_data(g, dy, w, dx, threads);
        return;
    }
    // The flipped forward pass has C_in/g output channels: too few, and its GEMMs are too
    // narrow to pay; the lowered pass's are C_in/g x kernel wide.
    match g
        .flipped()
        .filter(|_| g.unit_stride() && g.cin_g() >= MIN_FLIPPED_CHANNELS)
    {
        Some(f) => {
            // Per group: w'[ci][co][k'] = w[co][ci][kvol - 1 - k'].
            let (cin, cout, kvol) = (g.cin_g(), g.cout_g(), g.kvol());
            let mut wf = vec![0.0f32; w.len()];
            wf.par_chunks_mut(cout * kvol)
                .enumerate()
                .for_each(|(gi, dst)| {
                    let (grp, ci) = (gi / cin, gi % cin);
                    for co in 0..cout {
                        let src = &w[((grp * cout + co) * cin + ci) * kvol..][..kvol];
                        for (k, v) in dst[co * kvol..][..kvol].iter_mut().enumerate() {
                            *v = src[kvol - 1 - k];
                        }
                    }
                });
            forward(&f, dy, &wf, None, dx, threads);
        }
        None => lowered::backward_data(g, dy, w, dx, threads),
    }
}

/// `dw = dy x im2col(x)^T` and `dbias = sum(dy)` (overwrites both).
pub(crate) fn backward_filter(
    g: &ConvGeom,
    x: &[f32],
    dy: &[f32],
    dw: &mut [f32],
    dbias: Option<&mut [f32]>,
    threads: usize,
) {
    if g.depthwise() {
        depthwise::backward_filter(g, x, dy, dw);
    } else if pointwise::applies(g) {
        pointwise::backward_filter(g, x, dy, dw, threads);
    } else if g.shifted() {
        shifted::backward_filter(g, x, dy, dw, threads);
    } else {
        lowered::backward_filter(g, x, dy, dw, threads);
    }
    if let Some(db) = dbias {
        channel_sums(dy, db, g.c_out, g.out_vol());
    }
}

/// `out[c]` = the sum of channel `c` of a `[N][C][vol]` tensor (overwrites `out`).
pub(crate) fn channel_sums(dy: &[f32], out: &mut [f32], channels: usize, vol: usize) {
    let n = dy.len() / (channels * vol).max(1);
    out.par_iter_mut().enumerate().for_each(|(c, v)| {
        *v = (0..n)
            .map(|b| lane_sum(&dy[(b * channels + c) * vol..][..vol]))
            .sum();
    });
}

/// The sum of `v` in 16 independent lanes, which the compiler vectorises (a single running
/// sum is bound by the latency of one addition per element).
fn lane_sum(v: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    let chunks = v.chunks_exact(16);
    let rest: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for (l, x) in lanes.iter_mut().zip(c) {
            *l += x;
        }
    }
    lanes.iter().sum::<f32>() + rest
}

#[cfg(test)]
pub(crate) mod tests {
    use super::geom::offset;
    use super::*;

    /// Calls `f(o, i, kk)` for every output position, kernel offset and the input position
    /// it reads (skipping padding), for one channel plane.
    fn taps(g: &ConvGeom, mut f: impl FnMut(usize, usize, usize)) {
        let [do_, ho, wo] = g.output;
        let [_, hi, wi] = g.input;
        for o in 0..do_ * ho * wo {
            let (od, oh, ow) = (o / (ho * wo), (o / wo) % ho, o % wo);
            for kk in 0..g.kvol() {
                let (a, b, c) = offset(g, kk);
                if let (Some(id), Some(ih), Some(iw)) =
                    (g.coord(0, od, a), g.coord(1, oh, b), g.coord(2, ow, c))
                {
                    f(o, (id * hi + ih) * wi + iw, kk);
                }
            }
        }
    }

    /// The textbook loop nest, in f64.
    pub(crate) fn naive_forward(g: &ConvGeom, x: &[f32], w: &[f32]) -> Vec<f64> {
        let (in_vol, out_vol, kvol) = (g.in_vol(), g.out_vol(), g.kvol());
        let mut y = vec![0.0f64; g.n * g.c_out * out_vol];
        for n in 0..g.n {
            for co in 0..g.c_out {
                let grp = co / g.cout_g();
                for ci in 0..g.cin_g() {
                    let cin = grp * g.cin_g() + ci;
                    let xs = &x[(n * g.c_in + cin) * in_vol..][..in_vol];
                    let ws = &w[(co * g.cin_g() + ci) * kvol..][..kvol];
                    taps(g, |o, i, kk| {
                        y[(n * g.c_out + co) * out_vol + o] += f64::from(xs[i]) * f64::from(ws[kk]);
                    });
                }
            }
        }
        y
    }

    /// A geometry with the output size the frameworks give (`after` extra padding at the end).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn geom(
        n: usize,
        c_in: usize,
        c_out: usize,
        groups: usize,
        input: [usize; 3],
        k: [usize; 3],
        s: usize,
        p: usize,
        d: usize,
    ) -> ConvGeom {
        geom_padded(n, c_in, c_out, groups, input, k, [s; 3], [p; 3], [p; 3], d)
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn geom_padded(
        n: usize,
        c_in: usize,
        c_out: usize,
        groups: usize,
        input: [usize; 3],
        k: [usize; 3],
        s: [usize; 3],
        before: [usize; 3],
        after: [usize; 3],
        d: usize,
    ) -> ConvGeom {
        let output = std::array::from_fn(|i| {
            (input[i] + before[i] + after[i] - d * (k[i] - 1) - 1) / s[i] + 1
        });
        ConvGeom {
            n,
            c_in,
            c_out,
            groups,
            input,
            output,
            kernel: k,
            stride: s,
            pad: before,
            dilation: [d; 3],
        }
    }

    fn data(len: usize, seed: f32) -> Vec<f32> {
        (0..len)
            .map(|i| (i as f32 * 0.731 + seed).sin() * 0.5)
            .collect()
    }

    fn dot(a: &[f32], b: &[f64]) -> f64 {
        a.iter().zip(b).map(|(x, y)| f64::from(*x) * y).sum()
    }

    fn cases() -> Vec<ConvGeom> {
        vec![
            geom(2, 3, 4, 1, [1, 6, 7], [1, 3, 3], 1, 1, 1), // 2-d, padded
            geom(1, 4, 6, 2, [1, 9, 8], [1, 3, 3], 2, 1, 1), // grouped, strided
            geom(2, 5, 5, 5, [1, 8, 8], [1, 3, 3], 1, 2, 2), // depthwise, dilated
            geom(1, 2, 3, 1, [5, 6, 4], [3, 3, 3], 1, 1, 1), // 3-d
            geom(1, 2, 2, 1, [4, 4, 4], [2, 2, 2], 2, 0, 1), // 3-d strided, even kernel
            geom(2, 3, 2, 1, [1, 1, 10], [1, 1, 3], 1, 0, 1), // 1-d
            geom(1, 4, 6, 2, [3, 7, 6], [3, 3, 3], 1, 2, 2), // 3-d grouped, dilated
            geom(2, 6, 5, 1, [1, 5, 5], [1, 1, 1], 1, 0, 1), // 1x1 (pointwise)
            geom(2, 6, 4, 2, [2, 3, 5], [1, 1, 1], 1, 0, 1), // 3-d grouped pointwise
            geom(1, 3, 4, 1, [1, 5, 5], [1, 1, 1], 2, 0, 1), // strided 1x1 (gathered)
            geom(2, 3, 4, 1, [1, 32, 33], [1, 1, 1], 1, 0, 1), // 1x1 on a large image, per sample
            geom(3, 4, 2, 2, [1, 64, 66], [1, 1, 1], 2, 0, 1), // strided 1x1, samples in parallel
            geom(3, 100, 98, 1, [1, 4, 4], [1, 1, 1], 1, 0, 1), // 1x1 joined, rows split
            geom(3, 9, 100, 1, [1, 7, 7], [1, 3, 3], 1, 1, 1), // lowered across samples, rows split
            geom_padded(
                2,
                128,
                130,
                1,
                [1, 6, 7],
                [1, 3, 3],
                [1; 3],
                [0, 1, 1],
                [0, 1, 1],
                1,
            ), // Winograd
            geom(2, 4, 6, 2, [3, 6, 7], [1, 1, 1], 2, 0, 1), // 3-d grouped strided 1x1
            geom(1, 3, 4, 1, [1, 11, 9], [1, 7, 7], 2, 3, 1), // stem-like 7x7 stride 2
            geom(1, 4, 4, 1, [1, 6, 6], [1, 3, 3], 1, 0, 1), // valid padding
            geom(1, 3, 4, 1, [1, 5, 6], [1, 3, 3], 1, 3, 1), // padding beyond the kernel
            geom_padded(1, 3, 2, 1, [1, 5, 6], [1, 2, 2], [1; 3], [0; 3], [1; 3], 1), // "same", even kernel
            geom_padded(
                1,
                2,
                3,
                1,
                [1, 7, 6],
                [1, 3, 3],
                [1, 2, 3],
                [0, 1, 1],
                [0, 1, 2],
                1,
            ), // mixed strides
        ]
    }

    #[test]
    fn forward_matches_the_naive_loop_nest() {
        for g in cases() {
            let x = data(g.n * g.c_in * g.in_vol(), 0.3);
            let w = data(g.weights(), 1.7);
            let mut y = vec![f32::NAN; g.n * g.c_out * g.out_vol()];
            forward(&g, &x, &w, None, &mut y, 2);
            let expected = naive_forward(&g, &x, &w);
            for (a, b) in y.iter().zip(&expected) {
                assert!((f64::from(*a) - b).abs() < 1e-4, "{g:?}: {a} vs {b}");
            }
        }
    }

    /// Backward passes are the adjoints of the forward pass: <dy, conv(x)> = <conv^T(dy), x>
    /// and = <dw, w> for the filter gradient; and each element of the data gradient is right
    /// (its sum against one-hot inputs).
    #[test]
    fn backward_passes_are_adjoints_of_forward() {
        for g in cases() {
            let x = data(g.n * g.c_in * g.in_vol(), 0.3);
            let w = data(g.weights(), 1.7);
            let dy = data(g.n * g.c_out * g.out_vol(), 2.9);
            let y = naive_forward(&g, &x, &w);
            let lhs: f64 = dy.iter().zip(&y).map(|(a, b)| f64::from(*a) * b).sum();
            let mut dx = vec![f32::NAN; x.len()];
            backward_data(&g, &dy, &w, &mut dx, 2);
            let dx64: Vec<f64> = dx.iter().map(|v| f64::from(*v)).collect();
            assert!(
                (dot(&x, &dx64) - lhs).abs() < 1e-3 * lhs.abs().max(1.0),
                "{g:?} data"
            );
            // Element-wise: dx[i] = <dy, conv(e_i)>.
            for i in (0..x.len()).step_by(x.len().div_ceil(7)) {
                let mut e = vec![0.0f32; x.len()];
                e[i] = 1.0;
                let yi = naive_forward(&g, &e, &w);
                let expected: f64 = dy.iter().zip(&yi).map(|(a, b)| f64::from(*a) * b).sum();
                assert!(
                    (dx64[i] - expected).abs() < 1e-4,
                    "{g:?} dx[{i}]: {} vs {expected}",
                    dx64[i]
                );
            }
            let mut dw = vec![f32::NAN; w.len()];
            let mut db = vec![f32::NAN; g.c_out];
            backward_filter(&g, &x, &dy, &mut dw, Some(&mut db), 2);
            let dw64: Vec<f64> = dw.iter().map(|v| f64::from(*v)).collect();
            assert!(
                (dot(&w, &dw64) - lhs).abs() < 1e-3 * lhs.abs().max(1.0),
                "{g:?} filter"
            );
            for i in (0..w.len()).step_by(w.len().div_ceil(7)) {
                let mut e = vec![0.0f32; w.len()];
                e[i] = 1.0;
                let yi = naive_forward(&g, &x, &e);
                let expected: f64 = dy.iter().zip(&yi).map(|(a, b)| f64::from(*a) * b).sum();
                assert!(
                    (dw64[i] - expected).abs() < 1e-4,
                    "{g:?} dw[{i}]: {} vs {expected}",
                    dw64[i]
                );
            }
            let total: f32 = dy.iter().sum();
            assert!(
                (db.iter().sum::<f32>() - total).abs() < 1e-3,
                "bias gradient"
            );
        }
    }

    /// Both GEMM paths on every unit-stride case, whichever the dispatcher would pick.
    #[test]
    fn both_paths_agree_with_the_naive_loop_nest() {
        for g in cases()
            .into_iter()
            .filter(|g| !g.depthwise() && !pointwise::applies(g))
        {
            let x = data(g.n * g.c_in * g.in_vol(), 0.3);
            let w = data(g.weights(), 1.7);
            let dy = data(g.n * g.c_out * g.out_vol(), 2.9);
            let expected = naive_forward(&g, &x, &w);
            let mut reference_dw = vec![f32::NAN; w.len()];
            lowered::backward_filter(&g, &x, &dy, &mut reference_dw, 2);
            let mut reference_dx = vec![f32::NAN; x.len()];
            lowered::backward_data(&g, &dy, &w, &mut reference_dx, 2);
            let mut y = vec![f32::NAN; expected.len()];
            lowered::forward(&g, &x, &w, &mut y, 2);
            for (a, b) in y.iter().zip(&expected) {
                assert!(
                    (f64::from(*a) - b).abs() < 1e-4,
                    "lowered {g:?}: {a} vs {b}"
                );
            }
            if !g.unit_stride() {
                continue;
            }
            let mut y = vec![f32::NAN; expected.len()];
            shifted::forward(&g, &x, &w, &mut y, 2);
            for (a, b) in y.iter().zip(&expected) {
                assert!(
                    (f64::from(*a) - b).abs() < 1e-4,
                    "shifted {g:?}: {a} vs {b}"
                );
            }
            let mut dw = vec![f32::NAN; w.len()];
            shifted::backward_filter(&g, &x, &dy, &mut dw, 2);
            for (a, b) in dw.iter().zip(&reference_dw) {
                assert!((a - b).abs() < 1e-4, "shifted filter {g:?}: {a} vs {b}");
            }
            let mut dx = vec![f32::NAN; x.len()];
            backward_data(&g, &dy, &w, &mut dx, 2);
            for (a, b) in dx.iter().zip(&reference_dx) {
                assert!((a - b).abs() < 1e-4, "data {g:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn the_dispatcher_takes_the_shifted_path_on_large_images_only() {
        assert!(geom(1, 32, 64, 1, [64, 64, 64], [3, 3, 3], 1, 1, 1).shifted());
        assert!(!geom(1, 256, 512, 1, [8, 8, 8], [3, 3, 3], 1, 1, 1).shifted());
        assert!(!geom(1, 64, 64, 1, [1, 56, 56], [1, 3, 3], 2, 1, 1).shifted());
    }

    #[test]
    fn larger_shapes_cross_tile_boundaries() {
        // Enough positions for several tiles on every path, and odd channel counts.
        for g in [
            geom(1, 5, 19, 1, [9, 17, 21], [3, 3, 3], 1, 1, 1),
            geom(2, 7, 13, 1, [1, 61, 67], [1, 3, 3], 2, 1, 1),
        ] {
            let x = data(g.n * g.c_in * g.in_vol(), 0.1);
            let w = data(g.weights(), 0.2);
            let mut y = vec![f32::NAN; g.n * g.c_out * g.out_vol()];
            forward(&g, &x, &w, None, &mut y, 2);
            for (a, b) in y.iter().zip(&naive_forward(&g, &x, &w)) {
                assert!((f64::from(*a) - b).abs() < 1e-3, "{g:?}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn three_pads_in_front() {
        assert_eq!(three(&[5], 1), [1, 1, 5]);
        assert_eq!(three(&[4, 5], 1), [1, 4, 5]);
        assert_eq!(three(&[3, 4, 5], 1), [3, 4, 5]);
    }
}
