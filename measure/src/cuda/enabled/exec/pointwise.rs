//! The ops NVRTC kernels run element by element or by copying, forward and backward side
//! by side: the element-wise ops, channel affine and mean squared error, concatenation,
//! flatten, tile and upsample, embedding lookups, and gathers and scatters of rows.

use super::pass::Pass;
use super::{
    Arg, GpuExecutor, RowIndex, concat_args, op_args, ptr, rows_args, seed, shaped_args,
    spatial_args,
};
use crate::cuda::plan::{ShapedLaunch, SpatialLaunch};
use crate::error::Result;

impl GpuExecutor<'_> {
    /// An element-wise op's forward kernel; a sum of more than two inputs adds the rest.
    pub(super) fn elementwise_forward(
        &mut self,
        p: &Pass,
        forward: &str,
        param: f32,
    ) -> Result<()> {
        let n = p.n_out;
        self.run(
            forward,
            n,
            &op_args(p.x(), p.x2(), 0, p.y, 0, param, seed(p.i), n),
        )?;
        for &extra in p.inputs.iter().skip(2) {
            self.run(
                "ex_accumulate",
                n,
                &[Arg::Ptr(p.y), Arg::Ptr(extra), Arg::U64(n as u64)],
            )?;
        }
        Ok(())
    }

    /// An element-wise op's backward kernel. relu and tanh read their output, the others
    /// their input; a sum's or a product's kernel writes both inputs' gradients (into
    /// scratch where one needs none), a product's from both inputs, and a sum's further
    /// inputs take `dy` as it is.
    pub(super) fn elementwise_backward(
        &mut self,
        p: &Pass,
        forward: &str,
        backward: &str,
        param: f32,
    ) -> Result<()> {
        let s = self.stream.clone();
        let (n, dx0) = (p.n_out, p.dx0());
        let reads_output = matches!(forward, "op_relu_fwd" | "op_tanh_fwd");
        let (xa, ya) = if reads_output { (p.y, p.y) } else { (p.x(), 0) };
        if matches!(forward, "op_add_fwd" | "op_mul_fwd") {
            let scratch = self.scratch_if_null(dx0, self.act(n))?;
            let first = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
            let second = p.dx.get(1).copied().unwrap_or(0);
            let scratch2 = self.scratch_if_null(second, self.act(n))?;
            let second = scratch2.as_ref().map_or(second, |b| ptr(b, &s));
            self.run(
                backward,
                n,
                &op_args(p.x(), p.x2(), p.dy, first, second, 0.0, 0, n),
            )?;
            for &extra in p.dx.iter().skip(2).filter(|&&d| d != 0) {
                self.run("op_scale_bwd", n, &op_args(0, 0, p.dy, extra, 0, 1.0, 0, n))?;
            }
            self.release(scratch);
            self.release(scratch2);
        } else if dx0 != 0 {
            self.run(
                backward,
                n,
                &op_args(xa, ya, p.dy, dx0, 0, param, seed(p.i), n),
            )?;
        }
        Ok(())
    }

    /// Channel affine's or mean squared error's forward kernel: the affine reads its
    /// scale and shift, the loss its target (and sums into a zeroed output).
    pub(super) fn shaped_forward(&mut self, p: &Pass, forward: &ShapedLaunch) -> Result<()> {
        let (x2, third, loss) = if forward.kernel == "op_mse_fwd" {
            (ptr(&self.state[p.i][0], &self.stream), 0, true)
        } else {
            (self.param(p.i, 0), self.param(p.i, 1), false)
        };
        if loss {
            self.zero(p.y, p.n_out)?;
        }
        self.run(
            forward.kernel,
            forward.n,
            &shaped_args(forward, [p.x(), x2, third], [p.y, 0, 0]),
        )
    }

    /// Channel affine's or mean squared error's backward kernel: dx (into scratch where
    /// no input needs it), and the affine's zeroed then summed parameter gradients.
    pub(super) fn shaped_backward(&mut self, p: &Pass, backward: &ShapedLaunch) -> Result<()> {
        let s = self.stream.clone();
        let dx0 = p.dx0();
        let scratch = self.scratch_if_null(dx0, self.act(p.n_in))?;
        let target = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
        if backward.kernel == "op_mse_bwd" {
            let t = ptr(&self.state[p.i][0], &s);
            self.run(
                backward.kernel,
                backward.n,
                &shaped_args(backward, [p.x(), t, p.dy], [target, 0, 0]),
            )?;
        } else {
            let (ds, db) = (self.dparam(p.i, 0), self.dparam(p.i, 1));
            self.zero(ds, backward.a)?;
            self.zero(db, backward.a)?;
            self.run(
                backward.kernel,
                backward.n,
                &shaped_args(
                    backward,
                    [p.x(), self.param(p.i, 0), p.dy],
                    [target, ds, db],
                ),
            )?;
        }
        self.release(scratch);
        Ok(())
    }

    /// Concatenation along channels: each input copied to its channels of the output.
    pub(super) fn concat_forward(
        &mut self,
        p: &Pass,
        channels: &[usize],
        vol: usize,
    ) -> Result<()> {
        let total: usize = channels.iter().sum();
        let mut offset = 0;
        for (&xk, &ck) in p.inputs.iter().zip(channels) {
            let n = self.batch * ck * vol;
            self.run(
                "ex_concat_fwd",
                n,
                &concat_args(xk, p.y, ck, total, offset, vol, n),
            )?;
            offset += ck;
        }
        Ok(())
    }

    /// Concatenation's backward pass: each input's channels of `dy` copied to its
    /// gradient, where it needs one.
    pub(super) fn concat_backward(
        &mut self,
        p: &Pass,
        channels: &[usize],
        vol: usize,
    ) -> Result<()> {
        let total: usize = channels.iter().sum();
        let mut offset = 0;
        for (&dk, &ck) in p.dx.iter().zip(channels) {
            let n = self.batch * ck * vol;
            if dk != 0 {
                self.run(
                    "ex_concat_bwd",
                    n,
                    &concat_args(p.dy, dk, ck, total, offset, vol, n),
                )?;
            }
            offset += ck;
        }
        Ok(())
    }

    /// Flatten: a copy.
    pub(super) fn flatten_forward(&mut self, p: &Pass) -> Result<()> {
        let n = p.n_out;
        self.run("op_scale_fwd", n, &op_args(p.x(), 0, 0, p.y, 0, 1.0, 0, n))
    }

    /// Flatten's backward pass: `dy` copied to the input's gradient.
    pub(super) fn flatten_backward(&mut self, p: &Pass) -> Result<()> {
        if p.dx0() == 0 {
            return Ok(());
        }
        let n = p.n_out;
        self.run(
            "op_scale_bwd",
            n,
            &op_args(0, 0, p.dy, p.dx0(), 0, 1.0, 0, n),
        )
    }

    /// Tile's or upsample's forward kernel.
    pub(super) fn spatial_forward(&mut self, p: &Pass, forward: &SpatialLaunch) -> Result<()> {
        self.run(
            forward.kernel,
            forward.threads(),
            &spatial_args(forward, p.x(), 0, p.y),
        )
    }

    /// Tile's or upsample's backward kernel, summing into the zeroed input gradient.
    pub(super) fn spatial_backward(&mut self, p: &Pass, backward: &SpatialLaunch) -> Result<()> {
        if p.dx0() == 0 {
            return Ok(());
        }
        self.fill(p.dx0(), p.n_in, self.precision.storage, 0.0)?;
        self.run(
            backward.kernel,
            backward.threads(),
            &spatial_args(backward, 0, p.dy, p.dx0()),
        )
    }

    /// An embedding lookup's forward kernel: `positions` ids per sample, each a row of the
    /// `vocab x dim` table.
    pub(super) fn embedding_forward(
        &mut self,
        p: &Pass,
        (vocab, dim, positions): (usize, usize, usize),
    ) -> Result<()> {
        self.run(
            "ex_lookup_fwd",
            p.n_out,
            &[
                Arg::Ptr(p.x()),
                Arg::Ptr(self.param(p.i, 0)),
                Arg::Ptr(p.y),
                Arg::U64(vocab as u64),
                Arg::U64(dim as u64),
                Arg::U64(positions as u64),
                Arg::U64(p.n_out as u64),
            ],
        )
    }

    /// An embedding lookup's backward kernel: `dy` summed into the zeroed table gradient's
    /// rows. Ids have no gradient: the input's, where asked, is zero.
    pub(super) fn embedding_backward(
        &mut self,
        p: &Pass,
        (vocab, dim, positions): (usize, usize, usize),
    ) -> Result<()> {
        let table = self.dparam(p.i, 0);
        self.zero(table, vocab * dim)?;
        self.run(
            "ex_lookup_bwd",
            p.n_out,
            &[
                Arg::Ptr(p.x()),
                Arg::Ptr(p.dy),
                Arg::Ptr(table),
                Arg::U64(vocab as u64),
                Arg::U64(dim as u64),
                Arg::U64(positions as u64),
                Arg::U64(p.n_out as u64),
            ],
        )?;
        if p.dx0() != 0 {
            self.fill(p.dx0(), p.n_in, self.precision.storage, 0.0)?;
        }
        Ok(())
    }

    /// Rows gathered (`gather`) or summed by scatter into a zeroed output.
    pub(super) fn rows_forward(&mut self, p: &Pass, index: RowIndex, gather: bool) -> Result<()> {
        let n_out = p.n_out;
        if gather {
            self.run("ex_gather", n_out, &rows_args(p.x(), p.y, index, n_out))
        } else {
            self.fill(p.y, n_out, self.precision.storage, 0.0)?;
            let (f, rows_in) = (index.0, index.1);
            let n_in = self.batch * f * rows_in;
            self.run("ex_scatter", n_in, &rows_args(p.x(), p.y, index, n_in))
        }
    }

    /// The adjoint of [`GpuExecutor::rows_forward`]: a gather's gradient scatters, a
    /// scatter's gradient gathers, with the index's input and output rows swapped.
    pub(super) fn rows_backward(
        &mut self,
        p: &Pass,
        (f, rows_in, rows_out, hashed, salt): RowIndex,
        gather: bool,
    ) -> Result<()> {
        let index = (f, rows_out, rows_in, hashed, salt);
        let dx0 = p.dx0();
        if dx0 == 0 {
            return Ok(());
        }
        if gather {
            self.fill(dx0, p.n_in, self.precision.storage, 0.0)?;
            self.run("ex_scatter", p.n_out, &rows_args(p.dy, dx0, index, p.n_out))
        } else {
            self.run("ex_gather", p.n_in, &rows_args(p.dy, dx0, index, p.n_in))
        }
    }
}
