//! CPU kernels of the sequence and graph ops: linear layers over positions, products of
//! activations, embeddings, layer and RMS norms, softmax, GELU and SiLU, attention, and
//! gather, scatter-add and segment sum. Tensors are batch first and channels first
//! (`[N][C][positions]`), as everywhere in the executor (`super::ops`).

use rayon::prelude::*;

use super::gemm::{View, ViewMut, matmul};
use super::random::splitmix;
use super::saved::Aux;

/// Norm epsilon (PyTorch's `LayerNorm` default).
pub(crate) const NORM_EPS: f32 = 1e-5;

/// Products `[m x k] x [k x p]`, `calls` of them back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Products {
    pub(crate) calls: usize,
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) p: usize,
}

impl Products {
    pub(crate) fn forward(&self, a: &[f32], b: &[f32], c: &mut [f32], threads: usize) {
        let Products { m, k, p, .. } = *self;
        for i in 0..self.calls {
            matmul(
                ViewMut::rows(&mut c[i * m * p..][..m * p], m, p, p),
                View::rows(&a[i * m * k..][..m * k], m, k),
                View::rows(&b[i * k * p..][..k * p], k, p),
                false,
                threads,
            );
        }
    }

    /// `dA = dC B^T`, `dB = A^T dC`, for the inputs asked for.
    pub(crate) fn backward(
        &self,
        a: &[f32],
        b: &[f32],
        dc: &[f32],
        da: Option<&mut [f32]>,
        db: Option<&mut [f32]>,
        threads: usize,
    ) {
        let Products { m, k, p, .. } = *self;
        if let Some(da) = da {
            for i in 0..self.calls {
                matmul(
                    ViewMut::rows(&mut da[i * m * k..][..m * k], m, k, k),
                    View::rows(&dc[i * m * p..][..m * p], m, p),
                    View::rows(&b[i * k * p..][..k * p], k, p).t(),
                    false,
                    threads,
                );
            }
        }
        if let Some(db) = db {
            for i in 0..self.calls {
                matmul(
                    ViewMut::rows(&mut db[i * k * p..][..k * p], k, p, p),
                    View::rows(&a[i * m * k..][..m * k], m, k).t(),
                    View::rows(&dc[i * m * p..][..m * p], m, p),
                    false,
                    threads,
                );
            }
        }
    }
}

/// A linear layer at every position: `Y_b [out x vol] = W [out x c] X_b [c x vol]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Linear {
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) out: usize,
    pub(crate) vol: usize,
}

impl Linear {
    pub(crate) fn forward(&self, x: &[f32], w: &[f32], y: &mut [f32], threads: usize) {
        let Linear { c, out, vol, .. } = *self;
        for b in 0..self.n {
            matmul(
                ViewMut::rows(&mut y[b * out * vol..][..out * vol], out, vol, vol),
                View::rows(w, out, c),
                View::rows(&x[b * c * vol..][..c * vol], c, vol),
                false,
                threads,
            );
        }
    }

    /// The weight gradient (overwritten) and, if asked, the input gradient.
    pub(crate) fn backward(
        &self,
        x: &[f32],
        w: &[f32],
        dy: &[f32],
        dw: &mut [f32],
        dx: Option<&mut [f32]>,
        threads: usize,
    ) {
        let Linear { c, out, vol, .. } = *self;
        for b in 0..self.n {
            matmul(
                ViewMut::rows(dw, out, c, c),
                View::rows(&dy[b * out * vol..][..out * vol], out, vol),
                View::rows(&x[b * c * vol..][..c * vol], c, vol).t(),
                b > 0,
                threads,
            );
        }
        if let Some(dx) = dx {
            for b in 0..self.n {
                matmul(
                    ViewMut::rows(&mut dx[b * c * vol..][..c * vol], c, vol, vol),
                    View::rows(w, out, c).t(),
                    View::rows(&dy[b * out * vol..][..out * vol], out, vol),
                    false,
                    threads,
                );
            }
        }
    }
}

/// An embedding table of `vocab` rows of `dim`, looked up at `positions` ids per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Embedding {
    pub(crate) n: usize,
    pub(crate) positions: usize,
    pub(crate) vocab: usize,
    pub(crate) dim: usize,
}

impl Embedding {
    /// The id a value of the (synthetic, uniform in [-1, 1)) input stands for.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    fn id(&self, v: f32) -> usize {
        let u = ((v + 1.0) * 0.5).clamp(0.0, 1.0);
        ((u * self.vocab as f32) as usize).min(self.vocab - 1)
    }

    pub(crate) fn forward(&self, ids: &[f32], table: &[f32], y: &mut [f32]) {
        let Embedding { positions, dim, .. } = *self;
        y.par_chunks_mut(dim * positions)
            .zip(ids.par_chunks(positions))
            .for_each(|(yb, xb)| {
                for (p, &v) in xb.iter().enumerate() {
                    let row = &table[self.id(v) * dim..][..dim];
                    for (d, &t) in row.iter().enumerate() {
                        yb[d * positions + p] = t;
                    }
                }
            });
    }

    /// The table's gradient (overwritten): each looked-up row's output gradient added in.
    pub(crate) fn backward(&self, ids: &[f32], dy: &[f32], dtable: &mut [f32]) {
        let Embedding { positions, dim, .. } = *self;
        dtable.fill(0.0);
        for b in 0..self.n {
            let (xb, gb) = (
                &ids[b * positions..][..positions],
                &dy[b * dim * positions..][..dim * positions],
            );
            for (p, &v) in xb.iter().enumerate() {
                let row = &mut dtable[self.id(v) * dim..][..dim];
                for (d, r) in row.iter_mut().enumerate() {
                    *r += gb[d * positions + p];
                }
            }
        }
    }
}

/// Layer or RMS normalisation over `c` channels at each of `vol` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Norm {
    pub(crate) n: usize,
    pub(crate) c: usize,
    pub(crate) vol: usize,
    /// RMS norm (no mean, no shift) rather than layer norm.
    pub(crate) rms: bool,
}

impl Norm {
    /// `y = (x - mean) / std * gamma + beta` per position (RMS: `x / rms * gamma`); the
    /// mean and inverse deviation of every position go to `aux.stats`. Every pass runs
    /// over the channel rows in parallel, so a batch of one uses every thread as a larger
    /// batch does.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn forward(&self, x: &[f32], params: &[Vec<f32>], y: &mut [f32], aux: &mut Aux) {
        let Norm { n, c, vol, rms } = *self;
        aux.stats.resize(2 * n * vol, 0.0);
        let (means, invs) = aux.stats.split_at_mut(n * vol);
        let cf = c as f32;
        for b in 0..n {
            let xb = &x[b * c * vol..][..c * vol];
            let mut mean = vec![0.0; vol];
            if !rms {
                mean = sum_rows(xb, vol, |acc, _, row| {
                    acc.iter_mut().zip(row).for_each(|(a, v)| *a += v);
                });
                mean.iter_mut().for_each(|m| *m /= cf);
            }
            let var = sum_rows(xb, vol, |acc, _, row| {
                for ((a, v), m) in acc.iter_mut().zip(row).zip(&mean) {
                    *a += (v - m).powi(2);
                }
            });
            for p in 0..vol {
                means[b * vol + p] = mean[p];
                invs[b * vol + p] = 1.0 / (var[p] / cf + NORM_EPS).sqrt();
            }
        }
        let means = &means[..];
        let invs = &invs[..];
        let gamma = &params[0];
        y.par_chunks_mut(vol)
            .zip(x.par_chunks(vol))
            .enumerate()
            .for_each(|(row, (yr, xr))| {
                let (b, k) = (row / c, row % c);
                let shift = if rms { 0.0 } else { params[1][k] };
                let (m, inv) = (&means[b * vol..][..vol], &invs[b * vol..][..vol]);
                for p in 0..vol {
                    yr[p] = (xr[p] - m[p]) * inv[p] * gamma[k] + shift;
                }
            });
    }

    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn backward(
        &self,
        x: &[f32],
        dy: &[f32],
        params: &[Vec<f32>],
        aux: &Aux,
        dx: Option<&mut [f32]>,
        dparams: &mut [Vec<f32>],
    ) {
        let Norm { n, c, vol, rms } = *self;
        let (means, invs) = aux.stats.split_at(n * vol);
        let gamma = &params[0];
        let xhat = |b: usize, i: usize, p: usize| {
            (x[b * c * vol + i] - means[b * vol + p]) * invs[b * vol + p]
        };
        // The scale's and shift's gradients, one channel each in parallel.
        let grads: Vec<(f32, f32)> = (0..c)
            .into_par_iter()
            .map(|k| {
                let (mut ds, mut dshift) = (0.0f32, 0.0f32);
                for b in 0..n {
                    for p in 0..vol {
                        let i = k * vol + p;
                        let g = dy[b * c * vol + i];
                        ds += g * xhat(b, i, p);
                        dshift += g;
                    }
                }
                (ds, dshift)
            })
            .collect();
        let (scale, shift) = dparams.split_at_mut(1);
        for (k, (ds, dshift)) in grads.into_iter().enumerate() {
            scale[0][k] = ds;
            if !rms {
                shift[0][k] = dshift;
            }
        }
        let Some(dx) = dx else { return };
        let cf = c as f32;
        let mut mean_g = vec![0.0f32; n * vol];
        let mut mean_gx = vec![0.0f32; n * vol];
        for b in 0..n {
            let gb = &dy[b * c * vol..][..c * vol];
            if !rms {
                let s = sum_rows(gb, vol, |acc, k, row| {
                    acc.iter_mut()
                        .zip(row)
                        .for_each(|(a, g)| *a += g * gamma[k]);
                });
                for (m, s) in mean_g[b * vol..][..vol].iter_mut().zip(s) {
                    *m = s / cf;
                }
            }
            let s = sum_rows(gb, vol, |acc, k, row| {
                for (p, (a, g)) in acc.iter_mut().zip(row).enumerate() {
                    *a += g * gamma[k] * xhat(b, k * vol + p, p);
                }
            });
            for (m, s) in mean_gx[b * vol..][..vol].iter_mut().zip(s) {
                *m = s / cf;
            }
        }
        dx.par_chunks_mut(vol).enumerate().for_each(|(row, dr)| {
            let (b, k) = (row / c, row % c);
            for (p, d) in dr.iter_mut().enumerate() {
                let i = k * vol + p;
                let g = dy[b * c * vol + i] * gamma[k];
                let j = b * vol + p;
                *d = invs[j] * (g - mean_g[j] - xhat(b, i, p) * mean_gx[j]);
            }
        });
    }
}

/// Elements a parallel task of [`fold_rows`] takes at least.
const ROW_TASK: usize = 1 << 13;

/// One value per position from the channel rows of one sample (`x`, channels first: `vol`
/// positions a row): `add` folds each row `k` into accumulators that start at `init`, and
/// `merge` joins two partial results; rows in parallel, each read contiguously.
fn fold_rows<F, M>(x: &[f32], vol: usize, init: f32, add: F, merge: M) -> Vec<f32>
where
    F: Fn(&mut [f32], usize, &[f32]) + Sync,
    M: Fn(f32, f32) -> f32 + Sync,
{
    x.par_chunks(vol)
        .enumerate()
        .with_min_len((ROW_TASK / vol.max(1)).max(1))
        .fold(
            || vec![init; vol],
            |mut acc, (k, row)| {
                add(&mut acc, k, row);
                acc
            },
        )
        .reduce(
            || vec![init; vol],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, b)| *a = merge(*a, *b));
                a
            },
        )
}

/// The sum over the channel rows of one sample of what `add` folds in from each row `k`,
/// one value per position ([`fold_rows`]).
pub(crate) fn sum_rows<F>(x: &[f32], vol: usize, add: F) -> Vec<f32>
where
    F: Fn(&mut [f32], usize, &[f32]) + Sync,
{
    fold_rows(x, vol, 0.0, add, |a, b| a + b)
}

/// The largest value over the channel rows of one sample at each position.
pub(crate) fn max_rows(x: &[f32], vol: usize) -> Vec<f32> {
    let max = |acc: &mut [f32], _: usize, row: &[f32]| {
        acc.iter_mut().zip(row).for_each(|(a, v)| *a = a.max(*v));
    };
    fold_rows(x, vol, f32::NEG_INFINITY, max, f32::max)
}

/// Softmax over `c` channels at each of `vol` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Softmax {
    pub(crate) c: usize,
    pub(crate) vol: usize,
}

impl Softmax {
    pub(crate) fn forward(&self, x: &[f32], y: &mut [f32]) {
        let Softmax { c, vol } = *self;
        y.par_chunks_mut(c * vol)
            .zip(x.par_chunks(c * vol))
            .for_each(|(yb, xb)| {
                for p in 0..vol {
                    let max = (0..c)
                        .map(|k| xb[k * vol + p])
                        .fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0.0;
                    for k in 0..c {
                        let e = (xb[k * vol + p] - max).exp();
                        yb[k * vol + p] = e;
                        sum += e;
                    }
                    for k in 0..c {
                        yb[k * vol + p] /= sum;
                    }
                }
            });
    }

    /// `dx = y (dy - sum(y dy))` per position, from the saved output `y`.
    pub(crate) fn backward(&self, y: &[f32], dy: &[f32], dx: &mut [f32]) {
        let Softmax { c, vol } = *self;
        dx.par_chunks_mut(c * vol)
            .zip(y.par_chunks(c * vol).zip(dy.par_chunks(c * vol)))
            .for_each(|(db, (yb, gb))| {
                for p in 0..vol {
                    let dot: f32 = (0..c).map(|k| yb[k * vol + p] * gb[k * vol + p]).sum();
                    for k in 0..c {
                        let i = k * vol + p;
                        db[i] = yb[i] * (gb[i] - dot);
                    }
                }
            });
    }
}

/// Rotary position embedding of `heads` over `hidden` channels at `seq` positions:
/// channels `i` and `i + d / 2` of each head rotated by `s theta^(-2i / d)` at position `s`
/// (Hugging Face's `rotate_half` form).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rotary {
    pub(crate) n: usize,
    pub(crate) heads: usize,
    pub(crate) hidden: usize,
    pub(crate) seq: usize,
    pub(crate) theta: f64,
}

impl Rotary {
    /// `out` = `x` rotated, or rotated back where `inverse` (the gradient: a rotation's
    /// adjoint is its inverse).
    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
    pub(crate) fn apply(&self, x: &[f32], out: &mut [f32], inverse: bool) {
        let Rotary {
            heads, hidden, seq, ..
        } = *self;
        let d = hidden / heads;
        let half = d / 2;
        // cos and sin per pair and position, as Hugging Face computes them in FP32.
        let mut cos = vec![0.0f32; half * seq];
        let mut sin = vec![0.0f32; half * seq];
        for i in 0..half {
            let inv_freq = (1.0 / self.theta.powf((2 * i) as f64 / d as f64)) as f32;
            for s in 0..seq {
                let angle = s as f32 * inv_freq;
                cos[i * seq + s] = angle.cos();
                sin[i * seq + s] = if inverse { -angle.sin() } else { angle.sin() };
            }
        }
        out.par_chunks_mut(d * seq)
            .zip(x.par_chunks(d * seq))
            .for_each(|(o, x)| {
                for i in 0..half {
                    let (c, sn) = (&cos[i * seq..][..seq], &sin[i * seq..][..seq]);
                    let (x1, x2) = (&x[i * seq..][..seq], &x[(i + half) * seq..][..seq]);
                    let (o1, o2) = o.split_at_mut((i + half) * seq);
                    let (o1, o2) = (&mut o1[i * seq..][..seq], &mut o2[..seq]);
                    for s in 0..seq {
                        o1[s] = x1[s] * c[s] - x2[s] * sn[s];
                        o2[s] = x2[s] * c[s] + x1[s] * sn[s];
                    }
                }
            });
        debug_assert_eq!(x.len(), self.n * hidden * seq);
    }
}

/// Multi-head attention of `heads` over `hidden` channels, `seq` queries and `seq_kv` keys;
/// keys and values of `kv_heads` heads, each shared by `heads / kv_heads` query heads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Attention {
    pub(crate) n: usize,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) hidden: usize,
    pub(crate) seq: usize,
    pub(crate) seq_kv: usize,
    pub(crate) causal: bool,
    pub(crate) dropout: f32,
    /// Keep only the output and a log-sum-exp per row, and recompute the weights in
    /// backward (flash attention's memory behaviour; on the CPU the same arithmetic).
    pub(crate) fused: bool,
    /// One input holds queries, keys and values stacked on channels.
    pub(crate) stacked: bool,
}

/// The query, key and value of one sample and head, as `[d x positions]` row blocks.
struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
}

impl Attention {
    fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }

    fn weights(&self) -> usize {
        self.seq * self.seq_kv
    }

    /// Channels of the keys and values.
    fn kv_hidden(&self) -> usize {
        self.head_dim() * self.kv_heads
    }

    /// The key and value head query head `h` reads.
    fn kv_head(&self, h: usize) -> usize {
        h / (self.heads / self.kv_heads)
    }

    /// Whether the keys and values are copied to every head first and the copies kept for
    /// backward (unfused grouped-query attention, as eager PyTorch runs it).
    fn repeats(&self) -> bool {
        !self.fused && !self.stacked && self.kv_heads < self.heads
    }

    /// The keys and values of `inputs` copied to every head: per sample `[K; V]`, each
    /// `[hidden, seq_kv]`.
    fn repeated(&self, inputs: &[&[f32]]) -> Vec<f32> {
        let (d, hk) = (self.head_dim(), self.kv_hidden() * self.seq_kv);
        let block = d * self.seq_kv;
        let mut out = Vec::with_capacity(self.n * 2 * self.hidden * self.seq_kv);
        for b in 0..self.n {
            for x in [inputs[1], inputs[2]] {
                let x = &x[b * hk..][..hk];
                for h in 0..self.heads {
                    out.extend_from_slice(&x[self.kv_head(h) * block..][..block]);
                }
            }
        }
        out
    }

    /// Sample `b`'s head `h` of `inputs`, its keys and values from `kv` where they were
    /// copied to every head ([`Attention::repeated`]).
    fn head<'a>(&self, inputs: &[&'a [f32]], kv: &'a [f32], b: usize, h: usize) -> Head<'a> {
        let d = self.head_dim();
        if self.repeats() {
            let (hs, hk) = (self.hidden * self.seq, self.hidden * self.seq_kv);
            let kv = &kv[b * 2 * hk..][..2 * hk];
            return Head {
                q: &inputs[0][b * hs + h * d * self.seq..][..d * self.seq],
                k: &kv[h * d * self.seq_kv..][..d * self.seq_kv],
                v: &kv[hk + h * d * self.seq_kv..][..d * self.seq_kv],
            };
        }
        let (hs, hk) = (self.hidden * self.seq, self.kv_hidden() * self.seq_kv);
        let (q, k, v) = if self.stacked {
            let x = &inputs[0][b * 3 * hs..][..3 * hs];
            (&x[..hs], &x[hs..2 * hs], &x[2 * hs..])
        } else {
            (
                &inputs[0][b * hs..][..hs],
                &inputs[1][b * hk..][..hk],
                &inputs[2][b * hk..][..hk],
            )
        };
        let g = self.kv_head(h);
        Head {
            q: &q[h * d * self.seq..][..d * self.seq],
            k: &k[g * d * self.seq_kv..][..d * self.seq_kv],
            v: &v[g * d * self.seq_kv..][..d * self.seq_kv],
        }
    }

    /// Whether query `s` may see key `t`.
    fn visible(&self, s: usize, t: usize) -> bool {
        !self.causal || t <= s + (self.seq_kv.saturating_sub(self.seq))
    }

    /// The scaled, masked scores `QK^T / sqrt(d)` of one head, `[seq x seq_kv]`.
    #[allow(clippy::cast_precision_loss)]
    fn scores(&self, head: &Head<'_>, out: &mut [f32], threads: usize) {
        let d = self.head_dim();
        matmul(
            ViewMut::rows(out, self.seq, self.seq_kv, self.seq_kv),
            View::rows(head.q, d, self.seq).t(),
            View::rows(head.k, d, self.seq_kv),
            false,
            threads,
        );
        let scale = 1.0 / (d as f32).sqrt();
        for s in 0..self.seq {
            for t in 0..self.seq_kv {
                let v = &mut out[s * self.seq_kv + t];
                *v = if self.visible(s, t) {
                    *v * scale
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
    }

    /// The slice of `added` ([`Attention::forward_with`]) that sample `b`'s head `h` reads.
    fn added_at(&self, len: usize, b: usize, h: usize) -> usize {
        let windows = (len / (self.heads * self.weights())).max(1);
        ((b % windows) * self.heads + h) * self.weights()
    }

    fn add_scores(&self, p: &mut [f32], added: Option<&[f32]>, b: usize, h: usize) {
        if let Some(a) = added {
            let at = self.added_at(a.len(), b, h);
            for (v, a) in p.iter_mut().zip(&a[at..][..self.weights()]) {
                *v += a;
            }
        }
    }

    /// Whether weight `i` of head `bh` survives dropout (deterministic in `seed`).
    fn kept(&self, seed: u64, bh: usize, i: usize) -> bool {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let threshold = (f64::from(self.dropout) * f64::from(u32::MAX)) as u32;
        #[allow(clippy::cast_possible_truncation)]
        let r = (splitmix(seed ^ 0xA77E, (bh * self.weights() + i) as u64) >> 32) as u32;
        r >= threshold
    }

    /// The weights after dropout, `P'`, from `P`.
    fn dropped(&self, p: &[f32], seed: u64, bh: usize) -> Vec<f32> {
        let keep = 1.0 / (1.0 - self.dropout);
        p.iter()
            .enumerate()
            .map(|(i, &v)| {
                if self.kept(seed, bh, i) {
                    v * keep
                } else {
                    0.0
                }
            })
            .collect()
    }

    pub(crate) fn forward(
        &self,
        inputs: &[&[f32]],
        out: &mut [f32],
        aux: &mut Aux,
        threads: usize,
        seed: u64,
    ) {
        self.forward_with(inputs, out, aux, threads, seed, None);
    }

    /// [`Attention::forward`] with `added` summed into the scaled scores: per window and
    /// head `[seq x seq_kv]`, sample `b` reading window `b % windows` (window attention's
    /// relative position bias and mask).
    pub(crate) fn forward_with(
        &self,
        inputs: &[&[f32]],
        out: &mut [f32],
        aux: &mut Aux,
        threads: usize,
        seed: u64,
        added: Option<&[f32]>,
    ) {
        let (d, w) = (self.head_dim(), self.weights());
        let heads = self.n * self.heads;
        if self.fused {
            aux.stats.resize(heads * self.seq, 0.0);
        } else {
            aux.probs.resize(heads * w, 0.0);
            if self.dropout > 0.0 {
                aux.mask.resize(heads * w, 0);
            }
        }
        if self.repeats() {
            aux.kv = self.repeated(inputs);
        }
        let mut p = vec![0.0f32; w];
        for b in 0..self.n {
            for h in 0..self.heads {
                let bh = b * self.heads + h;
                let head = self.head(inputs, &aux.kv, b, h);
                self.scores(&head, &mut p, threads);
                self.add_scores(&mut p, added, b, h);
                for s in 0..self.seq {
                    let row = &mut p[s * self.seq_kv..][..self.seq_kv];
                    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
                    for v in row.iter_mut() {
                        *v = (*v - max).exp() / sum;
                    }
                    if self.fused {
                        aux.stats[bh * self.seq + s] = max + sum.ln();
                    }
                }
                if !self.fused {
                    aux.probs[bh * w..][..w].copy_from_slice(&p);
                    if self.dropout > 0.0 {
                        for (i, m) in aux.mask[bh * w..][..w].iter_mut().enumerate() {
                            *m = u8::from(self.kept(seed, bh, i));
                        }
                    }
                }
                let pd = if self.dropout > 0.0 {
                    self.dropped(&p, seed, bh)
                } else {
                    p.clone()
                };
                // O^T [d x seq] = V^T [d x seq_kv] P'^T [seq_kv x seq].
                let o = &mut out[(b * self.hidden + h * d) * self.seq..][..d * self.seq];
                matmul(
                    ViewMut::rows(o, d, self.seq, self.seq),
                    View::rows(head.v, d, self.seq_kv),
                    View::rows(&pd, self.seq, self.seq_kv).t(),
                    false,
                    threads,
                );
            }
        }
    }

    /// The input gradients asked for in `dx` (one stacked input, or queries, keys and
    /// values).
    #[allow(clippy::too_many_arguments, clippy::cast_precision_loss)]
    pub(crate) fn backward(
        &self,
        inputs: &[&[f32]],
        dy: &[f32],
        aux: &Aux,
        dx: &mut [Option<&mut [f32]>],
        threads: usize,
        seed: u64,
    ) {
        self.backward_with(inputs, dy, aux, dx, threads, seed, None, None);
    }

    /// [`Attention::backward`] of [`Attention::forward_with`]: the gradient of the added
    /// scores summed over the samples into `dadded` (zeroed first), where given.
    #[allow(clippy::too_many_arguments, clippy::cast_precision_loss)]
    pub(crate) fn backward_with(
        &self,
        inputs: &[&[f32]],
        dy: &[f32],
        aux: &Aux,
        dx: &mut [Option<&mut [f32]>],
        threads: usize,
        seed: u64,
        added: Option<&[f32]>,
        mut dadded: Option<&mut [f32]>,
    ) {
        if let Some(t) = dadded.as_deref_mut() {
            t.fill(0.0);
        }
        let (d, w) = (self.head_dim(), self.weights());
        let (hs, hk) = (self.hidden * self.seq, self.kv_hidden() * self.seq_kv);
        let scale = 1.0 / (d as f32).sqrt();
        // A key or value head's gradient sums its group's query heads'.
        if !self.stacked {
            for t in dx.iter_mut().skip(1) {
                if let Some(t) = t.as_deref_mut() {
                    t.fill(0.0);
                }
            }
        }
        let mut p = vec![0.0f32; w];
        let (mut dq, mut dk, mut dv) = (
            vec![0.0f32; d * self.seq],
            vec![0.0f32; d * self.seq_kv],
            vec![0.0f32; d * self.seq_kv],
        );
        let mut ds = vec![0.0f32; w];
        for b in 0..self.n {
            for h in 0..self.heads {
                let bh = b * self.heads + h;
                let head = self.head(inputs, &aux.kv, b, h);
                if self.fused {
                    // Recompute the weights from the scores and the saved log-sum-exp.
                    self.scores(&head, &mut p, threads);
                    self.add_scores(&mut p, added, b, h);
                    for s in 0..self.seq {
                        let lse = aux.stats[bh * self.seq + s];
                        for v in &mut p[s * self.seq_kv..][..self.seq_kv] {
                            *v = (*v - lse).exp();
                        }
                    }
                } else {
                    p.copy_from_slice(&aux.probs[bh * w..][..w]);
                }
                let pd = if self.dropout > 0.0 {
                    self.dropped(&p, seed, bh)
                } else {
                    p.clone()
                };
                let go = &dy[(b * self.hidden + h * d) * self.seq..][..d * self.seq];
                // dV^T [d x seq_kv] = dO^T [d x seq] P' [seq x seq_kv].
                matmul(
                    ViewMut::rows(&mut dv, d, self.seq_kv, self.seq_kv),
                    View::rows(go, d, self.seq),
                    View::rows(&pd, self.seq, self.seq_kv),
                    false,
                    threads,
                );
                // dP' [seq x seq_kv] = dO [seq x d] V^T [d x seq_kv].
                matmul(
                    ViewMut::rows(&mut ds, self.seq, self.seq_kv, self.seq_kv),
                    View::rows(go, d, self.seq).t(),
                    View::rows(head.v, d, self.seq_kv),
                    false,
                    threads,
                );
                if self.dropout > 0.0 {
                    let keep = 1.0 / (1.0 - self.dropout);
                    for (i, g) in ds.iter_mut().enumerate() {
                        *g = if self.kept(seed, bh, i) {
                            *g * keep
                        } else {
                            0.0
                        };
                    }
                }
                // Softmax's backward, then the scale (masked weights are zero).
                for s in 0..self.seq {
                    let (pr, gr) = (
                        &p[s * self.seq_kv..][..self.seq_kv],
                        &mut ds[s * self.seq_kv..][..self.seq_kv],
                    );
                    let dot: f32 = pr.iter().zip(gr.iter()).map(|(a, b)| a * b).sum();
                    for (g, &pv) in gr.iter_mut().zip(pr) {
                        *g = pv * (*g - dot);
                    }
                }
                // The added scores' gradient, before the scale the products' carries.
                if let Some(t) = dadded.as_deref_mut() {
                    let at = self.added_at(t.len(), b, h);
                    for (a, g) in t[at..][..w].iter_mut().zip(&ds) {
                        *a += g;
                    }
                }
                for g in &mut ds {
                    *g *= scale;
                }
                // dQ^T [d x seq] = K^T [d x seq_kv] dS^T; dK^T [d x seq_kv] = Q^T dS.
                matmul(
                    ViewMut::rows(&mut dq, d, self.seq, self.seq),
                    View::rows(head.k, d, self.seq_kv),
                    View::rows(&ds, self.seq, self.seq_kv).t(),
                    false,
                    threads,
                );
                matmul(
                    ViewMut::rows(&mut dk, d, self.seq_kv, self.seq_kv),
                    View::rows(head.q, d, self.seq),
                    View::rows(&ds, self.seq, self.seq_kv),
                    false,
                    threads,
                );
                let place = |dst: &mut Option<&mut [f32]>, offset: usize, g: &[f32]| {
                    if let Some(t) = dst.as_deref_mut() {
                        t[offset..][..g.len()].copy_from_slice(g);
                    }
                };
                let add = |dst: &mut Option<&mut [f32]>, offset: usize, g: &[f32]| {
                    if let Some(t) = dst.as_deref_mut() {
                        for (a, b) in t[offset..][..g.len()].iter_mut().zip(g) {
                            *a += b;
                        }
                    }
                };
                if self.stacked {
                    let base = b * 3 * hs;
                    place(&mut dx[0], base + h * d * self.seq, &dq);
                    place(&mut dx[0], base + hs + h * d * self.seq_kv, &dk);
                    place(&mut dx[0], base + 2 * hs + h * d * self.seq_kv, &dv);
                } else {
                    let g = self.kv_head(h);
                    place(&mut dx[0], b * hs + h * d * self.seq, &dq);
                    add(&mut dx[1], b * hk + g * d * self.seq_kv, &dk);
                    add(&mut dx[2], b * hk + g * d * self.seq_kv, &dv);
                }
            }
        }
    }
}

/// The row an index entry points at: a fixed pseudo-random graph (the index is the graph's
/// structure, the same every step), `salt` telling the ops' indices apart.
#[allow(clippy::cast_possible_truncation)]
fn index(salt: u64, rows: usize, entry: usize) -> usize {
    (splitmix(salt ^ rows as u64, entry as u64) % rows as u64) as usize
}

/// Row ops on `[f x rows]` features per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rows {
    /// `out[:, e] = x[:, src(e)]`, `edges` entries over `nodes` rows.
    Gather {
        f: usize,
        nodes: usize,
        edges: usize,
    },
    /// `out[:, dst(e)] += x[:, e]`.
    ScatterAdd {
        f: usize,
        edges: usize,
        nodes: usize,
    },
    /// `out[:, s] = sum of x[:, r]` over the rows `r` of segment `s` (contiguous, as even
    /// as can be).
    SegmentSum {
        f: usize,
        rows: usize,
        segments: usize,
    },
}

const GATHER_SALT: u64 = 0x6A7E_5EED;
const SCATTER_SALT: u64 = 0x5CA7_7E12;

impl Rows {
    /// `(input rows, output rows)` and, for each input row, the output row it feeds
    /// (gather: for each output row, the input row it copies).
    fn map(&self) -> (usize, usize, Vec<usize>) {
        match *self {
            Rows::Gather { nodes, edges, .. } => (
                nodes,
                edges,
                (0..edges).map(|e| index(GATHER_SALT, nodes, e)).collect(),
            ),
            Rows::ScatterAdd { edges, nodes, .. } => (
                edges,
                nodes,
                (0..edges).map(|e| index(SCATTER_SALT, nodes, e)).collect(),
            ),
            Rows::SegmentSum { rows, segments, .. } => (
                rows,
                segments,
                (0..rows).map(|r| r * segments / rows).collect(),
            ),
        }
    }

    fn features(&self) -> usize {
        match *self {
            Rows::Gather { f, .. } | Rows::ScatterAdd { f, .. } | Rows::SegmentSum { f, .. } => f,
        }
    }

    pub(crate) fn forward(&self, x: &[f32], out: &mut [f32]) {
        let (rin, rout, map) = self.map();
        let f = self.features();
        out.par_chunks_mut(f * rout)
            .zip(x.par_chunks(f * rin))
            .for_each(|(ob, xb)| {
                if matches!(self, Rows::Gather { .. }) {
                    for (e, &src) in map.iter().enumerate() {
                        for k in 0..f {
                            ob[k * rout + e] = xb[k * rin + src];
                        }
                    }
                } else {
                    ob.fill(0.0);
                    for (r, &dst) in map.iter().enumerate() {
                        for k in 0..f {
                            ob[k * rout + dst] += xb[k * rin + r];
                        }
                    }
                }
            });
    }

    /// The adjoint: gather's gradient scatters, the sums' gradients gather.
    pub(crate) fn backward(&self, dy: &[f32], dx: &mut [f32]) {
        let (rin, rout, map) = self.map();
        let f = self.features();
        dx.par_chunks_mut(f * rin)
            .zip(dy.par_chunks(f * rout))
            .for_each(|(db, gb)| {
                if matches!(self, Rows::Gather { .. }) {
                    db.fill(0.0);
                    for (e, &src) in map.iter().enumerate() {
                        for k in 0..f {
                            db[k * rin + src] += gb[k * rout + e];
                        }
                    }
                } else {
                    for (r, &dst) in map.iter().enumerate() {
                        for k in 0..f {
                            db[k * rin + r] = gb[k * rout + dst];
                        }
                    }
                }
            });
    }
}
