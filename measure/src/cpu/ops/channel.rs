//! Per-channel kernels over `n` samples of `c` channels at `vol` positions: batch
//! normalisation, and a channel affine's and a channel scale's shared sums, forward and
//! backward side by side.

use rayon::prelude::*;

use crate::cpu::saved::Aux;

/// Batch-norm epsilon (PyTorch's and Keras' default order of magnitude).
pub(crate) const BN_EPS: f32 = 1e-5;

/// Batch norm's forward pass: each channel's mean and inverse standard deviation over the
/// batch into `aux.stats`, then `gamma xhat + beta`.
pub(super) fn batch_norm_forward(
    (n, c, vol): (usize, usize, usize),
    x: &[f32],
    params: &[Vec<f32>],
    out: &mut [f32],
    aux: &mut Aux,
) {
    aux.stats.resize(2 * c, 0.0);
    let m = (n * vol) as f64;
    let (mean, inv) = aux.stats.split_at_mut(c);
    mean.par_iter_mut()
        .zip(inv.par_iter_mut())
        .enumerate()
        .for_each(|(ch, (mu, is))| {
            let (mut s, mut s2) = (0.0f64, 0.0f64);
            for b in 0..n {
                let v = &x[(b * c + ch) * vol..][..vol];
                let (a, q) = block_sums(v, v, |_, v| v, |g, _| g * g);
                s += a;
                s2 += q;
            }
            let mean = s / m;
            let var = (s2 / m - mean * mean).max(0.0);
            #[allow(clippy::cast_possible_truncation)]
            {
                *mu = mean as f32;
                *is = 1.0 / (var as f32 + BN_EPS).sqrt();
            }
        });
    let (gamma, beta) = (&params[0], &params[1]);
    let (mean, inv) = aux.stats.split_at(c);
    out.par_chunks_mut(vol)
        .zip(x.par_chunks(vol))
        .enumerate()
        .for_each(|(i, (o, xi))| {
            let ch = i % c;
            let (a, b) = (
                gamma[ch] * inv[ch],
                beta[ch] - gamma[ch] * inv[ch] * mean[ch],
            );
            o.iter_mut().zip(xi).for_each(|(o, &v)| *o = a * v + b);
        });
}

/// Batch norm's backward pass: the scale's and shift's gradients, and the input's where
/// `dx` wants it, from the forward pass's statistics.
pub(super) fn batch_norm_backward(
    (n, c, vol): (usize, usize, usize),
    x: &[f32],
    dy: &[f32],
    params: &[Vec<f32>],
    aux: &Aux,
    dx: Option<&mut [f32]>,
    dparams: &mut [Vec<f32>],
) {
    let (mean, inv) = aux.stats.split_at(c);
    let gamma = &params[0];
    #[allow(clippy::cast_precision_loss)]
    let m = (n * vol) as f32;
    // Per channel: sum(dy) and sum(dy * xhat).
    let sums = sums_of(dy, x, (n, c, vol), |ch, v| (v - mean[ch]) * inv[ch]);
    for (ch, &(s, sx)) in sums.iter().enumerate() {
        dparams[0][ch] = sx;
        dparams[1][ch] = s;
    }
    if let Some(d) = dx {
        // dx = gamma inv / m (m dy - s - xhat sx), xhat = (x - mean) inv: per channel
        // `k_dy dy + k_x x + k_1`, one fused pass.
        d.par_chunks_mut(vol)
            .zip(dy.par_chunks(vol).zip(x.par_chunks(vol)))
            .enumerate()
            .for_each(|(i, (di, (gi, xi)))| {
                let ch = i % c;
                let (s, sx) = sums[ch];
                let a = gamma[ch] * inv[ch] / m;
                let (k_dy, k_x) = (a * m, -a * inv[ch] * sx);
                let k_1 = -a * s - k_x * mean[ch];
                for ((o, &g), &v) in di.iter_mut().zip(gi).zip(xi) {
                    *o = k_dy * g + k_x * v + k_1;
                }
            });
    }
}

/// `out` = `x` times `gamma` per channel (`c` channels of `vol` positions, samples after one
/// another): a channel scale's output, and its input gradient (and a channel affine's).
pub(super) fn scale_channels(out: &mut [f32], x: &[f32], gamma: &[f32], c: usize, vol: usize) {
    out.par_chunks_mut(vol)
        .zip(x.par_chunks(vol))
        .enumerate()
        .for_each(|(i, (o, xi))| {
            let ch = i % c;
            o.iter_mut().zip(xi).for_each(|(o, &v)| *o = gamma[ch] * v);
        });
}

/// Per channel, `sum(dy)` (a shift's gradient) and `sum(dy x)` (a scale's), over `n`
/// samples of `c` channels of `vol` positions.
pub(super) fn gradient_sums(
    dy: &[f32],
    x: &[f32],
    n: usize,
    c: usize,
    vol: usize,
) -> Vec<(f32, f32)> {
    sums_of(dy, x, (n, c, vol), |_, v| v)
}

/// Per channel, `sum(dy)` and `sum(dy of(channel, x))`.
fn sums_of(
    dy: &[f32],
    x: &[f32],
    (n, c, vol): (usize, usize, usize),
    of: impl Fn(usize, f32) -> f32 + Sync,
) -> Vec<(f32, f32)> {
    (0..c)
        .into_par_iter()
        .map(|ch| {
            let (mut s, mut sx) = (0.0f64, 0.0f64);
            for b in 0..n {
                let off = (b * c + ch) * vol;
                let (a, q) = block_sums(
                    &dy[off..][..vol],
                    &x[off..][..vol],
                    |g, _| g,
                    |g, v| g * of(ch, v),
                );
                s += a;
                sx += q;
            }
            #[allow(clippy::cast_possible_truncation)]
            (s as f32, sx as f32)
        })
        .collect()
}

/// Lanes of a block's partial sums.
const LANES: usize = 8;
/// Elements whose partial sums are kept in `f32` before they are added in `f64`.
const BLOCK: usize = 512;

/// `sum(f(a, b))` and `sum(g(a, b))` over paired elements: `LANES` independent `f32`
/// partial sums over each block of `BLOCK` elements (a loop the compiler vectorises, where a
/// single running sum is one long chain of dependent additions), the blocks added in `f64`.
fn block_sums(
    a: &[f32],
    b: &[f32],
    f: impl Fn(f32, f32) -> f32,
    g: impl Fn(f32, f32) -> f32,
) -> (f64, f64) {
    let (mut sf, mut sg) = (0.0f64, 0.0f64);
    for (ab, bb) in a.chunks(BLOCK).zip(b.chunks(BLOCK)) {
        let (mut lf, mut lg) = ([0.0f32; LANES], [0.0f32; LANES]);
        let (ac, bc) = (ab.chunks_exact(LANES), bb.chunks_exact(LANES));
        let (ar, br) = (ac.remainder(), bc.remainder());
        for (a8, b8) in ac.zip(bc) {
            for l in 0..LANES {
                lf[l] += f(a8[l], b8[l]);
                lg[l] += g(a8[l], b8[l]);
            }
        }
        for (&x, &y) in ar.iter().zip(br) {
            lf[0] += f(x, y);
            lg[0] += g(x, y);
        }
        sf += lf.iter().map(|&v| f64::from(v)).sum::<f64>();
        sg += lg.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    (sf, sg)
}

/// A channel affine's forward pass: `gamma x + beta` per channel (`c` channels of `vol`
/// positions).
pub(super) fn affine_forward(
    (c, vol): (usize, usize),
    x: &[f32],
    params: &[Vec<f32>],
    out: &mut [f32],
) {
    let (gamma, beta) = (&params[0], &params[1]);
    out.par_chunks_mut(vol)
        .zip(x.par_chunks(vol))
        .enumerate()
        .for_each(|(i, (o, xi))| {
            let ch = i % c;
            o.iter_mut()
                .zip(xi)
                .for_each(|(o, &v)| *o = gamma[ch] * v + beta[ch]);
        });
}

/// A channel scale's backward pass: the scale's gradient (each channel's sum of `dy x`) and
/// `dx = gamma dy` where the input needs it.
pub(super) fn scale_backward(
    (n, c, vol): (usize, usize, usize),
    x: &[f32],
    dy: &[f32],
    params: &[Vec<f32>],
    dx: Option<&mut [f32]>,
    dparams: &mut [Vec<f32>],
) {
    for (ds, (_, sx)) in dparams[0].iter_mut().zip(gradient_sums(dy, x, n, c, vol)) {
        *ds = sx;
    }
    if let Some(d) = dx {
        scale_channels(d, dy, &params[0], c, vol);
    }
}

/// A channel affine's backward pass: the scale's and the shift's gradients (each channel's
/// sums of `dy x` and of `dy`) and `dx = gamma dy` where the input needs it.
pub(super) fn affine_backward(
    (n, c, vol): (usize, usize, usize),
    x: &[f32],
    dy: &[f32],
    params: &[Vec<f32>],
    dx: Option<&mut [f32]>,
    dparams: &mut [Vec<f32>],
) {
    let sums = gradient_sums(dy, x, n, c, vol);
    let (scale, shift) = dparams.split_at_mut(1);
    for ((ds, dt), (s, sx)) in scale[0].iter_mut().zip(shift[0].iter_mut()).zip(sums) {
        *ds = sx;
        *dt = s;
    }
    if let Some(d) = dx {
        scale_channels(d, dy, &params[0], c, vol);
    }
}
