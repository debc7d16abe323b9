//! Element-wise kernels: the unary ops and dropout, forward and backward side by side, and
//! their plumbing (a map, a gradient zipped with a saved tensor).

use rayon::prelude::*;

use crate::cpu::activation;
use crate::cpu::random::splitmix;
use crate::cpu::saved::Aux;

/// Elements per rayon task of element-wise kernels: large enough that scheduling is
/// negligible, small enough to balance.
pub(super) const CHUNK: usize = 1 << 14;

/// `out = f(x)` element by element.
pub(super) fn map(out: &mut [f32], x: &[f32], f: impl Fn(f32) -> f32 + Sync) {
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(o, x)| o.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)));
}

/// The first input's gradient, where it is wanted: `f(dy, other)` element by element.
pub(super) fn zip_map(
    dx: &mut [Option<&mut [f32]>],
    dy: &[f32],
    other: &[f32],
    f: impl Fn(f32, f32) -> f32 + Sync,
) {
    if let Some(d) = dx.first_mut().and_then(|d| d.as_deref_mut()) {
        d.par_chunks_mut(CHUNK)
            .zip(dy.par_chunks(CHUNK))
            .zip(other.par_chunks(CHUNK))
            .for_each(|((o, g), v)| {
                o.iter_mut()
                    .zip(g)
                    .zip(v)
                    .for_each(|((o, &g), &v)| *o = f(g, v))
            });
    }
}

/// The product of two inputs of one shape.
pub(super) fn mul_forward(a: &[f32], b: &[f32], out: &mut [f32]) {
    out.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK))
        .zip(b.par_chunks(CHUNK))
        .for_each(|((o, a), b)| {
            o.iter_mut()
                .zip(a)
                .zip(b)
                .for_each(|((o, a), b)| *o = a * b);
        });
}

/// A product's backward pass: each input's gradient is the output gradient times the other
/// input.
pub(super) fn mul_backward(a: &[f32], b: &[f32], dy: &[f32], dx: &mut [Option<&mut [f32]>]) {
    let (da, db) = dx.split_at_mut(1);
    zip_map(da, dy, b, |g, b| g * b);
    zip_map(db, dy, a, |g, a| g * a);
}

/// The sum of the inputs.
pub(super) fn add_forward(inputs: &[&[f32]], out: &mut [f32]) {
    out.copy_from_slice(inputs[0]);
    for other in &inputs[1..] {
        out.par_chunks_mut(CHUNK)
            .zip(other.par_chunks(CHUNK))
            .for_each(|(o, v)| o.iter_mut().zip(v).for_each(|(o, v)| *o += v));
    }
}

/// A sum's backward pass: `dy` to every input that needs a gradient.
pub(super) fn add_backward(dy: &[f32], dx: &mut [Option<&mut [f32]>]) {
    for d in dx.iter_mut().flatten() {
        d.copy_from_slice(dy);
    }
}

/// Dropout's forward pass at `rate`: draws the mask into `aux` and keeps the rest scaled by
/// `1 / (1 - rate)`.
pub(super) fn dropout_forward(rate: f32, x: &[f32], out: &mut [f32], aux: &mut Aux, seed: u64) {
    aux.mask.resize(x.len(), 0);
    let keep = 1.0 / (1.0 - rate);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let threshold = (f64::from(rate) * f64::from(u32::MAX)) as u32;
    aux.mask
        .par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(c, ms)| {
            for (i, m) in ms.iter_mut().enumerate() {
                #[allow(clippy::cast_possible_truncation)]
                let r = (splitmix(seed, (c * CHUNK + i) as u64) >> 32) as u32;
                *m = u8::from(r >= threshold);
            }
        });
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .zip(aux.mask.par_chunks(CHUNK))
        .for_each(|((o, v), m)| {
            for ((o, v), m) in o.iter_mut().zip(v).zip(m) {
                *o = if *m == 1 { v * keep } else { 0.0 };
            }
        });
}

/// Dropout's backward pass: the gradient through the forward pass's mask, scaled alike.
pub(super) fn dropout_backward(rate: f32, dy: &[f32], aux: &Aux, d: &mut [f32]) {
    let keep = 1.0 / (1.0 - rate);
    d.par_chunks_mut(CHUNK)
        .zip(dy.par_chunks(CHUNK))
        .zip(aux.mask.par_chunks(CHUNK))
        .for_each(|((o, g), m)| {
            for ((o, g), m) in o.iter_mut().zip(g).zip(m) {
                *o = if *m == 1 { g * keep } else { 0.0 };
            }
        });
}

/// A unary element-wise op: its forward pass and its gradient, side by side. ReLU, tanh and
/// the sigmoid keep their output for backward; a scale and a shift keep nothing; the others
/// keep their input.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Unary {
    /// ReLU.
    Relu,
    /// Leaky ReLU.
    LeakyRelu(f32),
    /// Tanh.
    Tanh,
    /// The logistic sigmoid.
    Sigmoid,
    /// Clamping to `[min, max]`.
    Clip(f32, f32),
    /// Hard swish.
    HardSwish,
    /// Hard sigmoid `max(0, min(1, alpha x + beta))`.
    HardSigmoid(f32, f32),
    /// Multiplication by a constant.
    Scale(f32),
    /// Addition of a constant.
    Shift(f32),
    /// Power with a constant exponent.
    Pow(f32),
    /// GELU (tanh approximation).
    Gelu,
    /// SiLU.
    Silu,
}

impl Unary {
    /// `out = op(x)`.
    pub(super) fn forward(self, x: &[f32], out: &mut [f32]) {
        match self {
            Unary::Relu => map(out, x, |v| v.max(0.0)),
            // Branch-free, so it vectorises (the signs of activations are unpredictable).
            Unary::LeakyRelu(a) => map(out, x, |v| v.max(0.0) + a * v.min(0.0)),
            Unary::Tanh => map(out, x, f32::tanh),
            Unary::Sigmoid => map(out, x, |v| 1.0 / (1.0 + (-v).exp())),
            Unary::Clip(lo, hi) => map(out, x, |v| v.clamp(lo, hi)),
            Unary::HardSwish => map(out, x, |v| v * (v + 3.0).clamp(0.0, 6.0) / 6.0),
            Unary::HardSigmoid(a, b) => map(out, x, |v| (a * v + b).clamp(0.0, 1.0)),
            Unary::Scale(f) => map(out, x, |v| f * v),
            Unary::Shift(c) => map(out, x, |v| v + c),
            Unary::Pow(e) => map(out, x, |v| v.powf(e)),
            Unary::Gelu => map(out, x, activation::gelu),
            Unary::Silu => map(out, x, activation::silu),
        }
    }

    /// The input's gradient from the output's, `dy`, and what the op keeps (its input `x`
    /// or its output `out`).
    pub(super) fn backward(
        self,
        x: &[f32],
        out: &[f32],
        dy: &[f32],
        dx: &mut [Option<&mut [f32]>],
    ) {
        match self {
            Unary::Relu => zip_map(dx, dy, out, |g, y| if y > 0.0 { g } else { 0.0 }),
            Unary::LeakyRelu(a) => zip_map(dx, dy, x, |g, v| {
                g * (a + (1.0 - a) * f32::from(u8::from(v > 0.0)))
            }),
            Unary::Tanh => zip_map(dx, dy, out, |g, y| g * (1.0 - y * y)),
            Unary::Sigmoid => zip_map(dx, dy, out, |g, y| g * y * (1.0 - y)),
            Unary::Clip(lo, hi) => {
                zip_map(dx, dy, x, |g, v| g * f32::from(u8::from(v > lo && v < hi)))
            }
            Unary::HardSwish => zip_map(dx, dy, x, |g, v| {
                if v <= -3.0 {
                    0.0
                } else if v >= 3.0 {
                    g
                } else {
                    g * (2.0 * v + 3.0) / 6.0
                }
            }),
            Unary::HardSigmoid(a, b) => zip_map(dx, dy, x, |g, v| {
                let z = a * v + b;
                g * a * f32::from(u8::from(z > 0.0 && z < 1.0))
            }),
            Unary::Scale(f) => zip_map(dx, dy, dy, |g, _| f * g),
            Unary::Shift(_) => zip_map(dx, dy, dy, |g, _| g),
            Unary::Pow(e) => zip_map(dx, dy, x, |g, v| g * e * v.powf(e - 1.0)),
            Unary::Gelu => zip_map(dx, dy, x, |g, v| g * activation::gelu_grad(v)),
            Unary::Silu => zip_map(dx, dy, x, |g, v| g * activation::silu_grad(v)),
        }
    }
}
