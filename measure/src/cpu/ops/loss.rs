//! The losses against synthetic targets, forward and backward side by side: softmax over
//! channels then cross-entropy against a label per position, and the squared error against
//! a target per element, each the mean per sample.

use rayon::prelude::*;

use crate::cpu::random::{splitmix, uniform};
use crate::cpu::saved::Aux;
use crate::cpu::seq;

/// The synthetic class of a position.
#[allow(clippy::cast_possible_truncation)]
pub(super) fn label(seed: u64, b: usize, pos: usize, classes: usize) -> usize {
    (splitmix(seed ^ 0x5EED, (b as u64) << 32 | pos as u64) % classes as u64) as usize
}

/// The synthetic regression target of an element.
pub(super) fn target(seed: u64, b: usize, i: usize) -> f32 {
    uniform(seed ^ 0x7A26, (b as u64) << 32 | i as u64)
}

/// Softmax cross-entropy's forward pass over `n` samples of `c` classes at `vol`
/// positions: the probabilities into `aux.probs`, each sample's mean loss into `out`.
pub(super) fn softmax_cross_entropy_forward(
    (n, c, vol): (usize, usize, usize),
    x: &[f32],
    out: &mut [f32],
    aux: &mut Aux,
    seed: u64,
) {
    // Over the channel rows in parallel, each read contiguously, so that a batch of one
    // uses every thread as a larger batch does.
    aux.probs.resize(x.len(), 0.0);
    let mut stats = Vec::with_capacity(2 * n * vol);
    for b in 0..n {
        let xb = &x[b * c * vol..][..c * vol];
        let max = seq::max_rows(xb, vol);
        let sum = seq::sum_rows(xb, vol, |acc, _, row| {
            for ((a, v), m) in acc.iter_mut().zip(row).zip(&max) {
                *a += (v - m).exp();
            }
        });
        stats.extend(max.into_iter().zip(sum));
    }
    aux.probs
        .par_chunks_mut(vol)
        .zip(x.par_chunks(vol))
        .enumerate()
        .for_each(|(row, (p, xr))| {
            let st = &stats[(row / c) * vol..][..vol];
            for ((p, v), (max, sum)) in p.iter_mut().zip(xr).zip(st) {
                *p = (v - max).exp() / sum;
            }
        });
    for (b, o) in out.iter_mut().enumerate().take(n) {
        let p = &aux.probs[b * c * vol..][..c * vol];
        #[allow(clippy::cast_precision_loss)]
        let loss: f32 = (0..vol)
            .map(|pos| -(p[label(seed, b, pos, c) * vol + pos].max(1e-30)).ln())
            .sum::<f32>()
            / vol as f32;
        *o = loss;
    }
}

/// Softmax cross-entropy's backward pass: `dy` times the probabilities less the one-hot
/// labels, over the positions.
pub(super) fn softmax_cross_entropy_backward(
    (n, c, vol): (usize, usize, usize),
    dy: &[f32],
    aux: &Aux,
    d: &mut [f32],
    seed: u64,
) {
    let labels: Vec<usize> = (0..n * vol)
        .map(|i| label(seed, i / vol, i % vol, c))
        .collect();
    #[allow(clippy::cast_precision_loss)]
    let v = vol as f32;
    d.par_chunks_mut(vol)
        .zip(aux.probs.par_chunks(vol))
        .enumerate()
        .for_each(|(row, (di, p))| {
            let (b, k) = (row / c, row % c);
            let scale = dy[b] / v;
            let l = &labels[b * vol..][..vol];
            for ((d, p), l) in di.iter_mut().zip(p).zip(l) {
                let onehot = if *l == k { 1.0 } else { 0.0 };
                *d = scale * (p - onehot);
            }
        });
}

/// The squared error's forward pass over `n` samples of `elems` elements: each sample's
/// mean.
pub(super) fn mse_forward(n: usize, elems: usize, x: &[f32], out: &mut [f32], seed: u64) {
    for b in 0..n {
        let xi = &x[b * elems..][..elems];
        #[allow(clippy::cast_precision_loss)]
        let loss = xi
            .iter()
            .enumerate()
            .map(|(i, v)| (v - target(seed, b, i)).powi(2))
            .sum::<f32>()
            / elems as f32;
        out[b] = loss;
    }
}

/// The squared error's backward pass: `2 dy (x - target) / elems`.
pub(super) fn mse_backward(
    n: usize,
    elems: usize,
    x: &[f32],
    dy: &[f32],
    d: &mut [f32],
    seed: u64,
) {
    #[allow(clippy::cast_precision_loss)]
    let e = elems as f32;
    for b in 0..n {
        for i in 0..elems {
            d[b * elems + i] = dy[b] * 2.0 * (x[b * elems + i] - target(seed, b, i)) / e;
        }
    }
}
