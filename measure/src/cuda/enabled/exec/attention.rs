//! Attention on the GPU, forward and backward side by side: per sample, `QK^T` batched
//! over heads through cuBLAS, the scale, mask, clamp, softmax and dropout kernels over all
//! the weights, and the product with the values; fused attention keeps no weights and
//! recomputes them in backward.

use cudarc::cublas;
use ridgeline_model::graph::ScoreMask;

use super::matrix::Mat;
use super::pass::Pass;
use super::{Arg, Buf, GpuExecutor, op_args, ptr, seed};
use crate::cuda::layers::AttentionPlan;
use crate::error::Result;

impl GpuExecutor<'_> {
    /// Attention's weights for every sample and head into `p` (after the scale, mask,
    /// clamp and softmax of the layer's form) and, with dropout, into `dropped`: each
    /// sample's `QK^T` as one GEMM batched over heads, then the element-wise kernels over
    /// all the weights. `q(b)` and `k(b)` are sample `b`'s queries and keys (`[H, S]`,
    /// `[H, S_kv]` row blocks).
    #[allow(clippy::too_many_arguments, clippy::cast_precision_loss)]
    fn attention_weights(
        &self,
        a: &AttentionPlan,
        q: &dyn Fn(usize) -> u64,
        k: &dyn Fn(usize) -> u64,
        p: u64,
        dropped: u64,
        seed: u64,
        blas: &cublas::CudaBlas,
    ) -> Result<()> {
        let (h, d, sq, t) = (a.heads, a.d, a.seq, a.seq_kv);
        let per = a.weights();
        for b in 0..a.n {
            // P [S x S_kv] = Q^T K, per head.
            self.gemm_rows(
                blas,
                (true, false),
                (sq, t, d),
                Mat::new(q(b), sq, d * sq),
                Mat::new(k(b), t, d * t),
                Mat::new(self.at(p, b * per), t, sq * t),
                h,
                false,
            )?;
        }
        let w = a.n * per;
        let f = a.form;
        if !f.scale_queries {
            let scale = 1.0 / (d as f32).sqrt();
            self.run("op_scale_fwd", w, &op_args(p, 0, 0, p, 0, scale, 0, w))?;
        }
        if f.causal || f.mask != ScoreMask::None {
            self.run(
                "ex_attn_mask",
                w,
                &[
                    Arg::Ptr(p),
                    Arg::U64(sq as u64),
                    Arg::U64(t as u64),
                    Arg::U64(u64::from(f.causal)),
                    Arg::U64(w as u64),
                ],
            )?;
        }
        if f.clamp {
            self.run(
                "ex_clamp_min",
                w,
                &[Arg::Ptr(p), Arg::F32(f32::MIN), Arg::U64(w as u64)],
            )?;
        }
        let rows = w / t.max(1);
        self.run(
            "ex_softmax_rows_fwd",
            32 * rows,
            &[
                Arg::Ptr(p),
                Arg::Ptr(p),
                Arg::U64(t as u64),
                Arg::U64(rows as u64),
            ],
        )?;
        if f.dropout > 0.0 {
            #[allow(clippy::cast_possible_truncation)]
            let rate = f.dropout as f32;
            self.run(
                "op_dropout_fwd",
                w,
                &op_args(p, 0, 0, dropped, 0, rate, seed, w),
            )?;
        }
        Ok(())
    }

    /// Sample `b`'s queries, keys or values (`which` 0, 1, 2) in the attention's inputs.
    fn attention_input(&self, a: &AttentionPlan, inputs: &[u64], b: usize, which: usize) -> u64 {
        let base = if a.stacked {
            inputs.first()
        } else {
            inputs.get(which)
        };
        base.map_or(0, |&p| self.at(p, a.offsets(b)[which]))
    }

    /// Attention's forward pass into `y`; returns what backward reads besides the inputs:
    /// unfused, the weights after softmax (and after dropout); with the scale on the
    /// queries, the scaled queries.
    #[allow(clippy::cast_precision_loss)]
    pub(super) fn attention_forward(
        &mut self,
        pass: &Pass,
        a: &AttentionPlan,
    ) -> Result<Option<Buf>> {
        let s = self.stream.clone();
        let (i, inputs, y, blas) = (pass.i, &pass.inputs[..], pass.y, pass.blas);
        let (h, d, sq, t) = (a.heads, a.d, a.seq, a.seq_kv);
        let (hidden, per) = (a.hidden(), a.weights());
        let w = a.n * per;
        let dropout = a.form.dropout > 0.0;
        let weights_len = a.weight_arrays() * w;
        let queries = if a.form.scale_queries {
            a.n * hidden * sq
        } else {
            0
        };
        let kept_len = if a.form.fused { 0 } else { weights_len } + queries;
        let kept = if kept_len > 0 {
            Some(self.tracked(self.act(kept_len))?)
        } else {
            None
        };
        let scratch = if a.form.fused {
            Some(self.tracked(self.act(weights_len))?)
        } else {
            None
        };
        let kb = kept.as_ref().map_or(0, |b| ptr(b, &s));
        let p = scratch.as_ref().map_or(kb, |b| ptr(b, &s));
        let dropped = if dropout { self.at(p, w) } else { p };
        let qs = self.at(kb, kept_len - queries);
        if a.form.scale_queries {
            let scale = 1.0 / (d as f32).sqrt();
            let len = hidden * sq;
            for b in 0..a.n {
                let q = self.attention_input(a, inputs, b, 0);
                let out = self.at(qs, b * len);
                self.run(
                    "op_scale_fwd",
                    len,
                    &op_args(q, 0, 0, out, 0, scale, 0, len),
                )?;
            }
        }
        let q = |b: usize| {
            if a.form.scale_queries {
                self.at(qs, b * hidden * sq)
            } else {
                self.attention_input(a, inputs, b, 0)
            }
        };
        let k = |b: usize| self.attention_input(a, inputs, b, 1);
        self.attention_weights(a, &q, &k, p, dropped, seed(i), blas)?;
        for b in 0..a.n {
            // O [d x S] = V [d x S_kv] P'^T, per head.
            self.gemm_rows(
                blas,
                (false, true),
                (d, sq, t),
                Mat::new(self.attention_input(a, inputs, b, 2), t, d * t),
                Mat::new(self.at(dropped, b * per), t, sq * t),
                Mat::new(self.at(y, b * hidden * sq), sq, d * sq),
                h,
                false,
            )?;
        }
        self.release(scratch);
        Ok(kept)
    }

    /// Attention's backward pass from `dy` into the input gradients `dxs` (one stacked,
    /// or queries, keys and values; null where none is needed): `dV = dO P'`, `dP' = dO^T
    /// V`, dropout's, softmax's and the scale's backward, `dQ = K dS^T`, `dK = Q dS`; fused
    /// attention first recomputes its weights.
    #[allow(clippy::cast_precision_loss)]
    pub(super) fn attention_backward(&mut self, pass: &Pass, a: &AttentionPlan) -> Result<()> {
        let s = self.stream.clone();
        let (i, inputs, dy, dxs, blas) =
            (pass.i, &pass.inputs[..], pass.dy, &pass.dx[..], pass.blas);
        let (h, d, sq, t) = (a.heads, a.d, a.seq, a.seq_kv);
        let (hidden, per) = (a.hidden(), a.weights());
        let w = a.n * per;
        let dropout = a.form.dropout > 0.0;
        let weights_len = a.weight_arrays() * w;
        let scale = 1.0 / (d as f32).sqrt();
        let kb = pass.aux;
        let scratch = if a.form.fused {
            Some(self.tracked(self.act(weights_len))?)
        } else {
            None
        };
        let ds_buf = self.tracked(self.act(w))?;
        let ds = ptr(&ds_buf, &s);
        let p = scratch.as_ref().map_or(kb, |b| ptr(b, &s));
        let dropped = if dropout { self.at(p, w) } else { p };
        let qs = self.at(kb, if a.form.fused { 0 } else { weights_len });
        let q = |b: usize| {
            if a.form.scale_queries {
                self.at(qs, b * hidden * sq)
            } else {
                self.attention_input(a, inputs, b, 0)
            }
        };
        let k = |b: usize| self.attention_input(a, inputs, b, 1);
        let v = |b: usize| self.attention_input(a, inputs, b, 2);
        // Sample `b`'s gradient of queries, keys or values, where one is needed.
        let target = |b: usize, which: usize| {
            let base = if a.stacked {
                dxs.first()
            } else {
                dxs.get(which)
            };
            base.filter(|&&p| p != 0)
                .map(|&p| self.at(p, a.offsets(b)[which]))
        };
        if a.form.fused {
            self.attention_weights(a, &q, &k, p, dropped, seed(i), blas)?;
        }
        for b in 0..a.n {
            let go = self.at(dy, b * hidden * sq);
            if let Some(dv) = target(b, 2) {
                // dV [d x S_kv] = dO [d x S] P'.
                self.gemm_rows(
                    blas,
                    (false, false),
                    (d, t, sq),
                    Mat::new(go, sq, d * sq),
                    Mat::new(self.at(dropped, b * per), t, sq * t),
                    Mat::new(dv, t, d * t),
                    h,
                    false,
                )?;
            }
            // dP' [S x S_kv] = dO^T V.
            self.gemm_rows(
                blas,
                (true, false),
                (sq, t, d),
                Mat::new(go, sq, d * sq),
                Mat::new(v(b), t, d * t),
                Mat::new(self.at(ds, b * per), t, sq * t),
                h,
                false,
            )?;
        }
        if dropout {
            #[allow(clippy::cast_possible_truncation)]
            let rate = a.form.dropout as f32;
            self.run(
                "op_dropout_bwd",
                w,
                &op_args(0, 0, ds, ds, 0, rate, seed(i), w),
            )?;
        }
        // Softmax's backward (masked and clamped weights are zero), then the scale's.
        let rows = w / t.max(1);
        self.run(
            "ex_softmax_rows_bwd",
            32 * rows,
            &[
                Arg::Ptr(p),
                Arg::Ptr(ds),
                Arg::Ptr(ds),
                Arg::U64(t as u64),
                Arg::U64(rows as u64),
            ],
        )?;
        if !a.form.scale_queries {
            self.run("op_scale_bwd", w, &op_args(0, 0, ds, ds, 0, scale, 0, w))?;
        }
        for b in 0..a.n {
            let dsb = self.at(ds, b * per);
            if let Some(dq) = target(b, 0) {
                // dQ [d x S] = K dS^T.
                self.gemm_rows(
                    blas,
                    (false, true),
                    (d, sq, t),
                    Mat::new(k(b), t, d * t),
                    Mat::new(dsb, t, sq * t),
                    Mat::new(dq, sq, d * sq),
                    h,
                    false,
                )?;
                if a.form.scale_queries {
                    let len = hidden * sq;
                    self.run(
                        "op_scale_bwd",
                        len,
                        &op_args(0, 0, dq, dq, 0, scale, 0, len),
                    )?;
                }
            }
            if let Some(dk) = target(b, 1) {
                // dK [d x S_kv] = Q dS.
                self.gemm_rows(
                    blas,
                    (false, false),
                    (d, t, sq),
                    Mat::new(q(b), sq, d * sq),
                    Mat::new(dsb, t, sq * t),
                    Mat::new(dk, t, d * t),
                    h,
                    false,
                )?;
            }
        }
        self.release(Some(ds_buf));
        self.release(scratch);
        Ok(())
    }
}
