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
                for &v in &x[(b * c + ch) * vol..][..vol] {
                    s += f64::from(v);
                    s2 += f64::from(v) * f64::from(v);
                }
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
        d.par_chunks_mut(vol).enumerate().for_each(|(i, di)| {
            let ch = i % c;
            let (s, sx) = sums[ch];
            let off = i * vol;
            for (j, o) in di.iter_mut().enumerate() {
                let xhat = (x[off + j] - mean[ch]) * inv[ch];
                *o = gamma[ch] * inv[ch] / m * (m * dy[off + j] - s - xhat * sx);
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

/// Per channel, `sum(dy)` and `sum(dy of(channel, x))`, accumulated in `f64`.
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
                for (g, v) in dy[off..][..vol].iter().zip(&x[off..][..vol]) {
                    s += f64::from(*g);
                    sx += f64::from(*g) * f64::from(of(ch, *v));
                }
            }
            #[allow(clippy::cast_possible_truncation)]
            (s as f32, sx as f32)
        })
        .collect()
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
