//! The ops cuDNN runs, forward and backward side by side: convolutions (a transposed one
//! runs its adjoint's passes swapped), pooling and batch norm. An unevenly padded input is
//! copied into the padded tensor cuDNN reads (`ex_embed`) and its gradient cropped back
//! (`ex_crop`); a convolution's bias is a kernel after cuDNN.

use super::pass::Pass;
use super::{Device, GpuExecutor, embed_args, op_buffers, ptr};
use crate::cuda::layers::Embed;
use crate::cuda::plan::{ConvGeometry, PoolGeometry, elements};
use crate::error::Result;

impl GpuExecutor<'_> {
    /// A convolution's forward pass: cuDNN's forward, then the bias.
    pub(super) fn conv_forward(
        &mut self,
        p: &Pass,
        embed: Option<&Embed>,
        geometry: &ConvGeometry,
        bias: bool,
    ) -> Result<()> {
        let s = self.stream.clone();
        let padded = self.embed_opt(embed, p.x())?;
        let xp = padded.as_ref().map_or(p.x(), |b| ptr(b, &s));
        let Device::Conv(c) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        self.tracker.alloc(c.workspace[0]);
        let b = self.buffers(xp, self.param(p.i, 0), p.y);
        c.forward.run(p.handle, b).map_err(p.failed())?;
        self.tracker.free(c.workspace[0]);
        self.release(padded);
        if bias {
            self.bias_add(p.i, p.y, geometry.y[1] as usize, p.n_out)?;
        }
        Ok(())
    }

    /// A convolution's backward pass: backward-data (into the padded tensor, then
    /// cropped), backward-filter, the bias's gradient.
    pub(super) fn conv_backward(
        &mut self,
        p: &Pass,
        embed: Option<&Embed>,
        geometry: &ConvGeometry,
        bias: bool,
    ) -> Result<()> {
        let s = self.stream.clone();
        let (x, dx0) = (p.x(), p.dx0());
        let padded = self.embed_opt(embed, x)?;
        let xp = padded.as_ref().map_or(x, |b| ptr(b, &s));
        let Device::Conv(c) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        let ws = c.workspace[1].max(c.workspace[2]);
        self.tracker.alloc(ws);
        if let Some(pass) = &c.backward_data
            && dx0 != 0
        {
            // dx into the padded tensor, then cropped.
            let target = padded.as_ref().map_or(dx0, |b| ptr(b, &s));
            pass.run(p.handle, self.buffers(target, self.param(p.i, 0), p.dy))
                .map_err(p.failed())?;
            if let Some(e) = embed {
                // The padded input's copy was overwritten by dx; crop it.
                self.run(
                    "ex_crop",
                    p.n_in,
                    &embed_args(e, target, dx0, e.input_elements()),
                )?;
                // The filter gradient needs the input again.
                self.run(
                    "ex_embed",
                    e.padded_elements() as usize,
                    &embed_args(e, x, target, e.padded_elements()),
                )?;
            }
        }
        c.backward_filter
            .run(p.handle, self.buffers(xp, self.dparam(p.i, 0), p.dy))
            .map_err(p.failed())?;
        self.tracker.free(ws);
        self.release(padded);
        if bias {
            self.bias_grad(p.i, p.dy, geometry.y[1] as usize, p.n_out)?;
        }
        Ok(())
    }

    /// A transposed convolution's forward pass: its adjoint's backward-data, whose dx is
    /// this layer's output (padded where the adjoint pads unevenly, then cropped) and
    /// whose dy is this layer's input.
    pub(super) fn transposed_conv_forward(
        &mut self,
        p: &Pass,
        embed: Option<&Embed>,
        geometry: &ConvGeometry,
        bias: bool,
    ) -> Result<()> {
        let s = self.stream.clone();
        let padded = embed
            .map(|e| self.tracked(self.act(e.padded_elements() as usize)))
            .transpose()?;
        let target = padded.as_ref().map_or(p.y, |b| ptr(b, &s));
        let Device::Conv(c) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        let ws = c.workspace[1];
        self.tracker.alloc(ws);
        let Some(pass) = c.backward_data.as_ref() else {
            return Err(self.missing(p.i));
        };
        let b = self.buffers(target, self.param(p.i, 0), p.x());
        pass.run(p.handle, b).map_err(p.failed())?;
        self.tracker.free(ws);
        if let (Some(e), Some(b)) = (embed, &padded) {
            self.run(
                "ex_crop",
                p.n_out,
                &embed_args(e, ptr(b, &s), p.y, e.input_elements()),
            )?;
        }
        self.release(padded);
        if bias {
            self.bias_add(p.i, p.y, geometry.x[1] as usize, p.n_out)?;
        }
        Ok(())
    }

    /// A transposed convolution's backward pass: the adjoint's forward gives dx from dy
    /// (padded where the adjoint pads unevenly); its backward-filter takes dy as x and
    /// this layer's input as dy.
    pub(super) fn transposed_conv_backward(
        &mut self,
        p: &Pass,
        embed: Option<&Embed>,
        geometry: &ConvGeometry,
        bias: bool,
    ) -> Result<()> {
        let s = self.stream.clone();
        let dx0 = p.dx0();
        let padded = self.embed_opt(embed, p.dy)?;
        let dp = padded.as_ref().map_or(p.dy, |b| ptr(b, &s));
        let Device::Conv(c) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        let ws = c.workspace[0].max(c.workspace[2]);
        self.tracker.alloc(ws);
        if dx0 != 0 {
            c.forward
                .run(p.handle, self.buffers(dp, self.param(p.i, 0), dx0))
                .map_err(p.failed())?;
        }
        c.backward_filter
            .run(p.handle, self.buffers(dp, self.dparam(p.i, 0), p.x()))
            .map_err(p.failed())?;
        self.tracker.free(ws);
        self.release(padded);
        if bias {
            self.bias_grad(p.i, p.dy, geometry.x[1] as usize, p.n_out)?;
        }
        Ok(())
    }

    /// Pooling's forward pass through cuDNN, on the padded input where the padding is
    /// uneven.
    pub(super) fn pool_forward(&mut self, p: &Pass, embed: Option<&Embed>) -> Result<()> {
        let s = self.stream.clone();
        let padded = self.embed_opt(embed, p.x())?;
        let xp = padded.as_ref().map_or(p.x(), |b| ptr(b, &s));
        let Device::Cudnn(l) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        l.run(p.handle, true, op_buffers(xp, 0, p.y, 0, [0; 8]))
            .map_err(p.failed())?;
        self.release(padded);
        Ok(())
    }

    /// Pooling's backward pass. cuDNN reads the input and the pooled output: max pooling
    /// recomputes the output (the schedule keeps the input only, as the frameworks keep
    /// max-pool indices); average pooling reads neither, so a stand-in of the input's
    /// size takes its place where the schedule dropped it.
    pub(super) fn pool_backward(
        &mut self,
        p: &Pass,
        embed: Option<&Embed>,
        geometry: &PoolGeometry,
    ) -> Result<()> {
        let s = self.stream.clone();
        let (x, dx0) = (p.x(), p.dx0());
        let nx = self.act(elements(&geometry.x));
        // cuDNN's input: the (padded) input where the schedule keeps it (max pooling),
        // else a stand-in of its size (average pooling reads none of it).
        let padded = match (embed, x != 0) {
            (Some(e), true) => Some(self.embed(e, x)?),
            _ => None,
        };
        let stand_in = if x == 0 {
            Some(self.tracked(nx)?)
        } else {
            None
        };
        let xp = padded
            .as_ref()
            .or(stand_in.as_ref())
            .map_or(x, |b| ptr(b, &s));
        // dx straight into the input's gradient, or into a padded buffer cropped after.
        let grad = if embed.is_none() && dx0 != 0 {
            None
        } else {
            Some(self.tracked(nx)?)
        };
        let target = grad.as_ref().map_or(dx0, |b| ptr(b, &s));
        let y = self.tracked(self.act(p.n_out))?;
        let yp = ptr(&y, &s);
        let Device::Cudnn(l) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        if geometry.max {
            l.run(p.handle, true, op_buffers(xp, 0, yp, 0, [0; 8]))
                .map_err(p.failed())?;
        }
        l.run(p.handle, false, op_buffers(xp, target, yp, p.dy, [0; 8]))
            .map_err(p.failed())?;
        if let (Some(e), true) = (embed, dx0 != 0) {
            self.run(
                "ex_crop",
                p.n_in,
                &embed_args(e, target, dx0, e.input_elements()),
            )?;
        }
        for b in [Some(y), padded, stand_in, grad] {
            self.release(b);
        }
        Ok(())
    }

    /// Batch norm's forward pass through cuDNN (training mode: batch statistics, the
    /// running averages updated).
    pub(super) fn batch_norm_forward(&mut self, p: &Pass) -> Result<()> {
        let Device::Cudnn(l) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        l.run(
            p.handle,
            true,
            op_buffers(p.x(), 0, p.y, 0, self.bn_channels(p.i)),
        )
        .map_err(p.failed())
    }

    /// Batch norm's backward pass through cuDNN: dx (into scratch where no input needs
    /// it, as cuDNN always writes it) and the scale's and shift's gradients.
    pub(super) fn batch_norm_backward(&mut self, p: &Pass) -> Result<()> {
        let s = self.stream.clone();
        let dx0 = p.dx0();
        let scratch = self.scratch_if_null(dx0, self.act(p.n_in))?;
        let target = scratch.as_ref().map_or(dx0, |b| ptr(b, &s));
        let Device::Cudnn(l) = &self.device[p.i] else {
            return Err(self.missing(p.i));
        };
        l.run(
            p.handle,
            false,
            op_buffers(p.x(), target, 0, p.dy, self.bn_channels(p.i)),
        )
        .map_err(p.failed())?;
        self.release(scratch);
        Ok(())
    }
}
