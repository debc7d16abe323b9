//! The ops NVRTC kernels run row by row, forward and backward side by side: layer and RMS
//! norm, softmax and softmax cross-entropy, each over the channels at every position.

use super::pass::Pass;
use super::{Arg, Buf, GpuExecutor, op_args, ptr, seed};
use crate::cuda::layers::softmax_ce_threads;
use crate::cuda::plan::STREAM_BLOCK;
use crate::error::Result;

impl GpuExecutor<'_> {
    /// Layer norm's (`rms` false) or RMS norm's forward kernel over `c` channels at each
    /// of `vol` positions, keeping each row's statistics in the layer's state.
    pub(super) fn norm_forward(&mut self, p: &Pass, c: usize, vol: usize, rms: bool) -> Result<()> {
        let rows = self.batch * vol;
        let beta = if rms { 0 } else { self.param(p.i, 1) };
        self.run(
            "ex_norm_fwd",
            rows,
            &[
                Arg::Ptr(p.x()),
                Arg::Ptr(p.y),
                Arg::Ptr(self.param(p.i, 0)),
                Arg::Ptr(beta),
                Arg::Ptr(ptr(&self.state[p.i][0], &self.stream)),
                Arg::U64(c as u64),
                Arg::U64(vol as u64),
                Arg::U64(u64::from(rms)),
                Arg::U64(rows as u64),
            ],
        )
    }

    /// A norm's backward pass from the kept statistics: dx where the input needs it, then
    /// the scale's and shift's gradients (a block per channel).
    pub(super) fn norm_backward(
        &mut self,
        p: &Pass,
        c: usize,
        vol: usize,
        rms: bool,
    ) -> Result<()> {
        let rows = self.batch * vol;
        let stats = ptr(&self.state[p.i][0], &self.stream);
        if p.dx0() != 0 {
            self.run(
                "ex_norm_bwd",
                rows,
                &[
                    Arg::Ptr(p.x()),
                    Arg::Ptr(p.dy),
                    Arg::Ptr(p.dx0()),
                    Arg::Ptr(self.param(p.i, 0)),
                    Arg::Ptr(stats),
                    Arg::U64(c as u64),
                    Arg::U64(vol as u64),
                    Arg::U64(u64::from(rms)),
                    Arg::U64(rows as u64),
                ],
            )?;
        }
        let dbeta = if rms { 0 } else { self.dparam(p.i, 1) };
        self.run(
            "ex_norm_param_grad",
            c * STREAM_BLOCK as usize,
            &[
                Arg::Ptr(p.x()),
                Arg::Ptr(p.dy),
                Arg::Ptr(stats),
                Arg::Ptr(self.dparam(p.i, 0)),
                Arg::Ptr(dbeta),
                Arg::U64(c as u64),
                Arg::U64(vol as u64),
                Arg::U64(self.batch as u64),
            ],
        )
    }

    /// Softmax's forward kernel over `c` channels at each of `vol` positions.
    pub(super) fn softmax_forward(&mut self, p: &Pass, c: usize, vol: usize) -> Result<()> {
        let rows = self.batch * vol;
        self.run(
            "ex_softmax_fwd",
            rows,
            &[
                Arg::Ptr(p.x()),
                Arg::Ptr(p.y),
                Arg::U64(c as u64),
                Arg::U64(vol as u64),
                Arg::U64(rows as u64),
            ],
        )
    }

    /// Softmax's backward kernel, from its kept output.
    pub(super) fn softmax_backward(&mut self, p: &Pass, c: usize, vol: usize) -> Result<()> {
        if p.dx0() == 0 {
            return Ok(());
        }
        let rows = self.batch * vol;
        self.run(
            "ex_softmax_bwd",
            rows,
            &[
                Arg::Ptr(p.y),
                Arg::Ptr(p.dy),
                Arg::Ptr(p.dx0()),
                Arg::U64(c as u64),
                Arg::U64(vol as u64),
                Arg::U64(rows as u64),
            ],
        )
    }

    /// Softmax cross-entropy's forward kernel, summing the loss into a zeroed output;
    /// returns the copy of the logits backward reads (the CPU keeps the probabilities,
    /// the same size).
    pub(super) fn softmax_ce_forward(
        &mut self,
        p: &Pass,
        c: usize,
        vol: usize,
    ) -> Result<Option<Buf>> {
        self.zero(p.y, p.n_out)?;
        let rows = self.batch * vol;
        self.run(
            "ex_softmax_ce_fwd",
            softmax_ce_threads(c, rows),
            &[
                Arg::Ptr(p.x()),
                Arg::Ptr(p.y),
                Arg::U64(c as u64),
                Arg::U64(vol as u64),
                Arg::U64(seed(p.i)),
                Arg::U64(rows as u64),
            ],
        )?;
        let n_in = self.batch * c * vol;
        let keep = self.tracked(self.act(n_in))?;
        self.run(
            "op_scale_fwd",
            n_in,
            &op_args(p.x(), 0, 0, ptr(&keep, &self.stream), 0, 1.0, 0, n_in),
        )?;
        Ok(Some(keep))
    }

    /// Softmax cross-entropy's backward kernel from the kept logits (the input, where
    /// forward kept none), into scratch where no input needs the gradient.
    pub(super) fn softmax_ce_backward(&mut self, p: &Pass, c: usize, vol: usize) -> Result<()> {
        let s = self.stream.clone();
        let dx0 = p.dx0();
        let logits = if p.aux == 0 { p.x() } else { p.aux };
        let scratch = self.scratch_if_null(dx0, self.act(p.n_in))?;
        let target = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
        let rows = self.batch * vol;
        self.run(
            "ex_softmax_ce_bwd",
            softmax_ce_threads(c, rows),
            &[
                Arg::Ptr(logits),
                Arg::Ptr(p.dy),
                Arg::Ptr(target),
                Arg::U64(c as u64),
                Arg::U64(vol as u64),
                Arg::U64(seed(p.i)),
                Arg::U64(rows as u64),
            ],
        )?;
        self.release(scratch);
        Ok(())
    }
}
