//! The CPU kernels of a mixture-of-experts layer ([`ridgeline_model::graph::Op::Moe`]), as
//! Hugging Face's `MixtralSparseMoeBlock` computes it: the router's logits (a linear layer
//! without bias), their softmax over the experts, each token's `top_k` experts with the
//! weights renormalised over them, each expert's feed-forward network on the tokens routed
//! to it (`w2(act(w1 x) * w3 x)` gated, `w2(act(w1 x))` plain), and each token's output its
//! experts' outputs weighted and summed. With a capacity, an expert takes the first
//! `capacity` of its tokens (by choice rank, then position) and drops the rest, whose
//! weights stay in the renormalisation. Routing is per sample.
//!
//! Parameters: the router `[E x H]`, then each expert's `w1 [F x H]`, `w2 [H x F]` and, gated,
//! `w3 [F x H]`. Tensors are batch first and channels first (`[N][H][S]`).

use ridgeline_model::graph::ExpertActivation;

use super::activation;
use super::gemm::{View, ViewMut, matmul};

/// A mixture-of-experts layer at batch `n`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Moe {
    pub(crate) n: usize,
    pub(crate) hidden: usize,
    pub(crate) seq: usize,
    pub(crate) experts: usize,
    pub(crate) top_k: usize,
    pub(crate) ffn: usize,
    pub(crate) gated: bool,
    pub(crate) act: ExpertActivation,
    /// Tokens an expert takes per sample at most; `None`: every one routed to it.
    pub(crate) capacity: Option<usize>,
}

/// One token routed to one expert.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Route {
    /// The token's position.
    token: u32,
    /// Which of the token's choices this is.
    choice: u32,
}

impl Route {
    fn token(self) -> usize {
        self.token as usize
    }

    /// The index of the token's weight among a sample's `[S][k]` weights.
    fn weight(self, k: usize) -> usize {
        self.token as usize * k + self.choice as usize
    }
}

/// What one expert computed for one sample.
#[derive(Debug, Default)]
struct Computed {
    routes: Vec<Route>,
    /// The routed tokens, `[H x m]`.
    x: Vec<f32>,
    /// `w1 x`, `[F x m]`.
    g: Vec<f32>,
    /// `w3 x`, `[F x m]` (gated).
    u: Vec<f32>,
    /// `act(w1 x)`, `[F x m]` (gated: the product's other factor, which eager PyTorch keeps;
    /// plain, it is `a`).
    s: Vec<f32>,
    /// The input of `w2`, `[F x m]`.
    a: Vec<f32>,
    /// The expert's output, `[H x m]`.
    y: Vec<f32>,
}

/// What forward keeps for backward.
#[derive(Debug, Default)]
pub(crate) struct Saved {
    /// The router's probabilities, `[N][S][E]`.
    probs: Vec<f32>,
    /// Each token's chosen experts, `[N][S][k]`.
    chosen: Vec<usize>,
    /// Their renormalised weights, `[N][S][k]`.
    weights: Vec<f32>,
    /// Per sample and expert, `[N][E]`.
    computed: Vec<Computed>,
}

impl Saved {
    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        let tensors: usize = self
            .computed
            .iter()
            .map(|c| c.x.len() + c.g.len() + c.u.len() + c.s.len() + c.a.len() + c.y.len())
            .sum();
        let routes: usize = self.computed.iter().map(|c| c.routes.len()).sum();
        4 * (self.probs.len() + self.weights.len() + tensors)
            + 8 * self.chosen.len()
            + std::mem::size_of::<Route>() * routes
    }
}

fn activation(act: ExpertActivation, v: f32) -> f32 {
    match act {
        ExpertActivation::Silu => activation::silu(v),
        ExpertActivation::Gelu => activation::gelu(v),
        ExpertActivation::Relu => v.max(0.0),
    }
}

fn activation_grad(act: ExpertActivation, v: f32) -> f32 {
    match act {
        ExpertActivation::Silu => activation::silu_grad(v),
        ExpertActivation::Gelu => activation::gelu_grad(v),
        ExpertActivation::Relu => f32::from(u8::from(v > 0.0)),
    }
}

impl Moe {
    /// Elements of each parameter tensor: the router, then each expert's projections.
    pub(crate) fn param_sizes(&self) -> Vec<usize> {
        let (h, f) = (self.hidden, self.ffn);
        let mut v = vec![self.experts * h];
        for _ in 0..self.experts {
            v.extend([f * h, h * f]);
            if self.gated {
                v.push(f * h);
            }
        }
        v
    }

    /// The inputs each parameter tensor multiplies (its fan-in), in [`Moe::param_sizes`]'s
    /// order.
    pub(crate) fn fan_ins(&self) -> Vec<usize> {
        let mut v = vec![self.hidden];
        for _ in 0..self.experts {
            v.extend([self.hidden, self.ffn]);
            if self.gated {
                v.push(self.hidden);
            }
        }
        v
    }

    /// `(w1, w2, w3)` of expert `e` among `params`.
    fn expert<'p>(&self, params: &'p [Vec<f32>], e: usize) -> [&'p [f32]; 3] {
        let per = if self.gated { 3 } else { 2 };
        let base = 1 + e * per;
        let w3 = if self.gated {
            &params[base + 2][..]
        } else {
            &[]
        };
        [&params[base], &params[base + 1], w3]
    }

    /// The output `[N][H][S]` of `x`, keeping what backward needs in `saved`.
    pub(crate) fn forward(
        &self,
        x: &[f32],
        params: &[Vec<f32>],
        out: &mut [f32],
        saved: &mut Saved,
        threads: usize,
    ) {
        let Moe {
            n,
            hidden: h,
            seq: s,
            experts: e,
            top_k: k,
            ffn: f,
            ..
        } = *self;
        saved.probs = vec![0.0; n * s * e];
        saved.chosen = vec![0; n * s * k];
        saved.weights = vec![0.0; n * s * k];
        saved.computed = (0..n * e).map(|_| Computed::default()).collect();
        out.fill(0.0);
        let mut logits = vec![0.0f32; e * s];
        for b in 0..n {
            let xb = &x[b * h * s..][..h * s];
            matmul(
                ViewMut::rows(&mut logits, e, s, s),
                View::rows(&params[0], e, h),
                View::rows(xb, h, s),
                false,
                threads,
            );
            // Softmax over the experts and the top-k of every token.
            for t in 0..s {
                let p = &mut saved.probs[(b * s + t) * e..][..e];
                let max = (0..e).map(|j| logits[j * s + t]).fold(f32::MIN, f32::max);
                for (j, p) in p.iter_mut().enumerate() {
                    *p = (logits[j * s + t] - max).exp();
                }
                let sum: f32 = p.iter().sum();
                p.iter_mut().for_each(|v| *v /= sum);
                let mut order: Vec<usize> = (0..e).collect();
                // Highest first; ties to the lower index.
                order.sort_by(|&i, &j| p[j].total_cmp(&p[i]).then(i.cmp(&j)));
                let total: f32 = order[..k].iter().map(|&j| p[j]).sum();
                for c in 0..k {
                    saved.chosen[(b * s + t) * k + c] = order[c];
                    saved.weights[(b * s + t) * k + c] = p[order[c]] / total;
                }
            }
            // Each expert's tokens, by choice rank then position, up to its capacity.
            for c in 0..k {
                for t in 0..s {
                    let ex = saved.chosen[(b * s + t) * k + c];
                    let routes = &mut saved.computed[b * e + ex].routes;
                    if self.capacity.is_none_or(|cap| routes.len() < cap) {
                        #[allow(clippy::cast_possible_truncation)]
                        routes.push(Route {
                            token: t as u32,
                            choice: c as u32,
                        });
                    }
                }
            }
            for ex in 0..e {
                let [w1, w2, w3] = self.expert(params, ex);
                let c = &mut saved.computed[b * e + ex];
                let m = c.routes.len();
                if m == 0 {
                    continue;
                }
                c.x = vec![0.0; h * m];
                for (col, r) in c.routes.iter().enumerate() {
                    for row in 0..h {
                        c.x[row * m + col] = xb[row * s + r.token()];
                    }
                }
                let project = |w: &[f32], rows: usize, cols: usize, input: &[f32]| {
                    let mut o = vec![0.0f32; rows * m];
                    matmul(
                        ViewMut::rows(&mut o, rows, m, m),
                        View::rows(w, rows, cols),
                        View::rows(input, cols, m),
                        false,
                        threads,
                    );
                    o
                };
                c.g = project(w1, f, h, &c.x);
                c.a = c.g.iter().map(|&v| activation(self.act, v)).collect();
                if self.gated {
                    c.u = project(w3, f, h, &c.x);
                    c.s.clone_from(&c.a);
                    c.a.iter_mut().zip(&c.u).for_each(|(a, u)| *a *= u);
                }
                c.y = project(w2, h, f, &c.a);
                let ob = &mut out[b * h * s..][..h * s];
                for (col, r) in c.routes.iter().enumerate() {
                    let w = saved.weights[b * s * k + r.weight(k)];
                    for row in 0..h {
                        ob[row * s + r.token()] += w * c.y[row * m + col];
                    }
                }
            }
        }
    }

    /// The parameters' gradients (overwritten) and, if asked, the input's.
    #[allow(clippy::too_many_arguments, clippy::too_many_lines)]
    pub(crate) fn backward(
        &self,
        x: &[f32],
        params: &[Vec<f32>],
        dy: &[f32],
        saved: &Saved,
        dparams: &mut [Vec<f32>],
        mut dx: Option<&mut [f32]>,
        threads: usize,
    ) {
        let Moe {
            n,
            hidden: h,
            seq: s,
            experts: e,
            top_k: k,
            ffn: f,
            gated,
            act,
            ..
        } = *self;
        dparams.iter_mut().for_each(|d| d.fill(0.0));
        if let Some(d) = dx.as_deref_mut() {
            d.fill(0.0);
        }
        let per = if gated { 3 } else { 2 };
        let mut dlogits = vec![0.0f32; e * s];
        for b in 0..n {
            let xb = &x[b * h * s..][..h * s];
            let dyb = &dy[b * h * s..][..h * s];
            // The gradient of each token's weights.
            let mut dweights = vec![0.0f32; s * k];
            for ex in 0..e {
                let c = &saved.computed[b * e + ex];
                let m = c.routes.len();
                if m == 0 {
                    continue;
                }
                let [w1, w2, w3] = self.expert(params, ex);
                // The expert's output gradient: each token's, times its weight.
                let mut dye = vec![0.0f32; h * m];
                for (col, r) in c.routes.iter().enumerate() {
                    let w = saved.weights[b * s * k + r.weight(k)];
                    let mut dot = 0.0f32;
                    for row in 0..h {
                        let g = dyb[row * s + r.token()];
                        dye[row * m + col] = w * g;
                        dot += g * c.y[row * m + col];
                    }
                    dweights[r.weight(k)] += dot;
                }
                let base = 1 + ex * per;
                // `dW2 += dY A^T`, `dA = W2^T dY`.
                matmul(
                    ViewMut::rows(&mut dparams[base + 1], h, f, f),
                    View::rows(&dye, h, m),
                    View::rows(&c.a, f, m).t(),
                    true,
                    threads,
                );
                let mut da = vec![0.0f32; f * m];
                matmul(
                    ViewMut::rows(&mut da, f, m, m),
                    View::rows(w2, h, f).t(),
                    View::rows(&dye, h, m),
                    false,
                    threads,
                );
                let mut dg = vec![0.0f32; f * m];
                let mut du = if gated {
                    vec![0.0f32; f * m]
                } else {
                    Vec::new()
                };
                for i in 0..f * m {
                    let grad = activation_grad(act, c.g[i]);
                    if gated {
                        dg[i] = da[i] * c.u[i] * grad;
                        du[i] = da[i] * c.s[i];
                    } else {
                        dg[i] = da[i] * grad;
                    }
                }
                // `dW1 += dG X^T`, `dW3 += dU X^T`, `dX = W1^T dG + W3^T dU`.
                let mut dxe = vec![0.0f32; h * m];
                let pairs: &[(usize, &[f32], &[f32])] = if gated {
                    &[(base, &dg, w1), (base + 2, &du, w3)]
                } else {
                    &[(base, &dg, w1)]
                };
                for (i, &(slot, dz, w)) in pairs.iter().enumerate() {
                    matmul(
                        ViewMut::rows(&mut dparams[slot], f, h, h),
                        View::rows(dz, f, m),
                        View::rows(&c.x, h, m).t(),
                        true,
                        threads,
                    );
                    matmul(
                        ViewMut::rows(&mut dxe, h, m, m),
                        View::rows(w, f, h).t(),
                        View::rows(dz, f, m),
                        i > 0,
                        threads,
                    );
                }
                if let Some(d) = dx.as_deref_mut() {
                    let db = &mut d[b * h * s..][..h * s];
                    for (col, r) in c.routes.iter().enumerate() {
                        for row in 0..h {
                            db[row * s + r.token()] += dxe[row * m + col];
                        }
                    }
                }
            }
            // Through the renormalisation (`w_j = p_j / Z`) and the softmax to the logits.
            for t in 0..s {
                let p = &saved.probs[(b * s + t) * e..][..e];
                let chosen = &saved.chosen[(b * s + t) * k..][..k];
                let w = &saved.weights[(b * s + t) * k..][..k];
                let dw = &dweights[t * k..][..k];
                let z: f32 = chosen.iter().map(|&j| p[j]).sum();
                let mean: f32 = dw.iter().zip(w).map(|(d, w)| d * w).sum();
                let mut dp = vec![0.0f32; e];
                for c in 0..k {
                    dp[chosen[c]] = (dw[c] - mean) / z;
                }
                let inner: f32 = dp.iter().zip(p).map(|(d, p)| d * p).sum();
                for j in 0..e {
                    dlogits[j * s + t] = p[j] * (dp[j] - inner);
                }
            }
            // The router: `dWr += dL X^T`, `dX += Wr^T dL`.
            matmul(
                ViewMut::rows(&mut dparams[0], e, h, h),
                View::rows(&dlogits, e, s),
                View::rows(xb, h, s).t(),
                true,
                threads,
            );
            if let Some(d) = dx.as_deref_mut() {
                matmul(
                    ViewMut::rows(&mut d[b * h * s..][..h * s], h, s, s),
                    View::rows(&params[0], e, h).t(),
                    View::rows(&dlogits, e, s),
                    true,
                    threads,
                );
            }
        }
    }
}
