//! One layer's pass, forward or backward: the device addresses it reads and writes,
//! resolved once, and the dispatch from the layer's plan to its op. Each op's forward and
//! backward sit side by side in the module of its kind: [`super::conv`] (cuDNN),
//! [`super::matrix`] (cuBLAS), [`super::pointwise`] and [`super::normalize`] (NVRTC kernels)
//! and [`super::attention`].

use cudarc::cublas;

use super::{Buf, GpuExecutor, device_error, ptr};
use crate::cuda::cudnn::{CudnnFailure, Handle};
use crate::cuda::layers::LayerPlan;
use crate::error::{Error, Result};

/// What one layer's pass reads and writes, as device addresses (0 where there is none),
/// and the libraries it runs through.
pub(super) struct Pass<'h> {
    /// The layer.
    pub(super) i: usize,
    /// Each input's activation (0 where the schedule keeps none).
    pub(super) inputs: Vec<u64>,
    /// The layer's output: written by forward; read by backward where the schedule keeps
    /// it.
    pub(super) y: u64,
    /// Backward: the output's gradient (0 in forward).
    pub(super) dy: u64,
    /// Backward: each input's gradient (0 where none is needed; none in forward).
    pub(super) dx: Vec<u64>,
    /// Backward: what forward kept beyond the schedule's tensors (0 where nothing).
    pub(super) aux: u64,
    /// Elements of the output.
    pub(super) n_out: usize,
    /// Elements of the first input.
    pub(super) n_in: usize,
    pub(super) handle: &'h Handle,
    pub(super) blas: &'h cublas::CudaBlas,
    ordinal: usize,
}

impl Pass<'_> {
    /// The first input's activation.
    pub(super) fn x(&self) -> u64 {
        self.inputs.first().copied().unwrap_or(0)
    }

    /// The second input's activation.
    pub(super) fn x2(&self) -> u64 {
        self.inputs.get(1).copied().unwrap_or(0)
    }

    /// The first input's gradient.
    pub(super) fn dx0(&self) -> u64 {
        self.dx.first().copied().unwrap_or(0)
    }

    /// A cuDNN failure of this pass as this crate's error.
    pub(super) fn failed(&self) -> impl Fn(CudnnFailure) -> Error + use<> {
        let ordinal = self.ordinal;
        move |f| device_error(ordinal, f)
    }
}

impl GpuExecutor<'_> {
    /// Layer `i`'s pass over the activations `acts`, its own output at `y`.
    fn pass<'h>(
        &self,
        i: usize,
        acts: &[Option<Buf>],
        y: u64,
        handle: &'h Handle,
        blas: &'h cublas::CudaBlas,
    ) -> Pass<'h> {
        let layer = &self.graph.layers()[i];
        Pass {
            i,
            inputs: layer
                .inputs
                .iter()
                .map(|&j| acts[j].as_ref().map_or(0, |a| ptr(a, &self.stream)))
                .collect(),
            y,
            dy: 0,
            dx: Vec::new(),
            aux: 0,
            n_out: self.len(i),
            n_in: layer.inputs.first().map_or(0, |&j| self.len(j)),
            handle,
            blas,
            ordinal: self.ordinal,
        }
    }

    /// Layer `i`'s forward pass into `out`; returns what it keeps for backward beyond the
    /// schedule's tensors: softmax cross-entropy's copy of its input; unfused attention's
    /// weights, and the scaled queries where the scale is on the queries.
    pub(super) fn forward(
        &mut self,
        i: usize,
        acts: &[Option<Buf>],
        out: &Buf,
        handle: &Handle,
        blas: &cublas::CudaBlas,
    ) -> Result<Option<Buf>> {
        let p = self.pass(i, acts, ptr(out, &self.stream), handle, blas);
        let plan = self.plans[i].clone();
        match &plan {
            LayerPlan::Input => {}
            LayerPlan::Conv {
                transposed: false,
                embed,
                geometry,
                bias,
            } => self.conv_forward(&p, embed.as_ref(), geometry, *bias)?,
            LayerPlan::Conv {
                transposed: true,
                embed,
                geometry,
                bias,
            } => self.transposed_conv_forward(&p, embed.as_ref(), geometry, *bias)?,
            LayerPlan::Dense {
                n,
                input,
                output,
                bias,
            } => self.dense_forward(&p, (*n, *input, *output), *bias)?,
            LayerPlan::Pool { embed, .. } => self.pool_forward(&p, embed.as_ref())?,
            LayerPlan::BatchNorm { .. } => self.batch_norm_forward(&p)?,
            LayerPlan::Elementwise { forward, param, .. } => {
                self.elementwise_forward(&p, forward, *param)?;
            }
            LayerPlan::Shaped { forward, .. } => self.shaped_forward(&p, forward)?,
            LayerPlan::Concat { channels, vol } => self.concat_forward(&p, channels, *vol)?,
            LayerPlan::Flatten => self.flatten_forward(&p)?,
            LayerPlan::Spatial { forward, .. } => self.spatial_forward(&p, forward)?,
            LayerPlan::Linear {
                n,
                c,
                out,
                vol,
                bias,
            } => self.linear_forward(&p, (*n, *c, *out, *vol), *bias)?,
            LayerPlan::MatMul {
                calls,
                m,
                k,
                p: cols,
            } => {
                self.matmul_forward(&p, (*calls, *m, *k, *cols))?;
            }
            LayerPlan::Embedding {
                vocab,
                dim,
                positions,
            } => self.embedding_forward(&p, (*vocab, *dim, *positions))?,
            LayerPlan::Norm { c, vol, rms } => self.norm_forward(&p, *c, *vol, *rms)?,
            LayerPlan::Softmax { c, vol } => self.softmax_forward(&p, *c, *vol)?,
            LayerPlan::Rows {
                f,
                rows_in,
                rows_out,
                hashed,
                salt,
                gather,
            } => self.rows_forward(&p, (*f, *rows_in, *rows_out, *hashed, *salt), *gather)?,
            LayerPlan::Attention(a) => return self.attention_forward(&p, a),
            LayerPlan::SoftmaxCe { c, vol } => return self.softmax_ce_forward(&p, *c, *vol),
        }
        Ok(None)
    }

    /// Layer `i`'s backward pass: input gradients into `dx` (one per input, `None` where
    /// none is needed), parameter gradients into its `dparams`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn backward(
        &mut self,
        i: usize,
        acts: &[Option<Buf>],
        aux: Option<&Buf>,
        dy: &Buf,
        dx: &[Option<Buf>],
        handle: &Handle,
        blas: &cublas::CudaBlas,
    ) -> Result<()> {
        let s = &self.stream;
        let own = acts[i].as_ref().map_or(0, |a| ptr(a, s));
        let mut p = self.pass(i, acts, own, handle, blas);
        p.dy = ptr(dy, s);
        p.dx = dx
            .iter()
            .map(|d| d.as_ref().map_or(0, |d| ptr(d, s)))
            .collect();
        p.aux = aux.map_or(0, |a| ptr(a, s));
        let plan = self.plans[i].clone();
        match &plan {
            LayerPlan::Input => Ok(()),
            LayerPlan::Conv {
                transposed: false,
                embed,
                geometry,
                bias,
            } => self.conv_backward(&p, embed.as_ref(), geometry, *bias),
            LayerPlan::Conv {
                transposed: true,
                embed,
                geometry,
                bias,
            } => self.transposed_conv_backward(&p, embed.as_ref(), geometry, *bias),
            LayerPlan::Dense {
                n,
                input,
                output,
                bias,
            } => self.dense_backward(&p, (*n, *input, *output), *bias),
            LayerPlan::Pool { embed, geometry } => self.pool_backward(&p, embed.as_ref(), geometry),
            LayerPlan::BatchNorm { .. } => self.batch_norm_backward(&p),
            LayerPlan::Elementwise {
                backward,
                param,
                forward,
            } => self.elementwise_backward(&p, forward, backward, *param),
            LayerPlan::Shaped { backward, .. } => self.shaped_backward(&p, backward),
            LayerPlan::Concat { channels, vol } => self.concat_backward(&p, channels, *vol),
            LayerPlan::Flatten => self.flatten_backward(&p),
            LayerPlan::Spatial { backward, .. } => self.spatial_backward(&p, backward),
            LayerPlan::Linear {
                n,
                c,
                out,
                vol,
                bias,
            } => self.linear_backward(&p, (*n, *c, *out, *vol), *bias),
            LayerPlan::MatMul {
                calls,
                m,
                k,
                p: cols,
            } => self.matmul_backward(&p, (*calls, *m, *k, *cols)),
            LayerPlan::Embedding {
                vocab,
                dim,
                positions,
            } => self.embedding_backward(&p, (*vocab, *dim, *positions)),
            LayerPlan::Norm { c, vol, rms } => self.norm_backward(&p, *c, *vol, *rms),
            LayerPlan::Softmax { c, vol } => self.softmax_backward(&p, *c, *vol),
            LayerPlan::Rows {
                f,
                rows_in,
                rows_out,
                hashed,
                salt,
                gather,
            } => self.rows_backward(&p, (*f, *rows_in, *rows_out, *hashed, *salt), *gather),
            LayerPlan::Attention(a) => self.attention_backward(&p, a),
            LayerPlan::SoftmaxCe { c, vol } => self.softmax_ce_backward(&p, *c, *vol),
        }
    }
}
