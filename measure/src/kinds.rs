//! The kinds a measurement is made of: number formats, layouts, passes, STREAM kernels and
//! copy directions, shared by the cases backends run and the records they write.

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Number formats a micro-kernel can run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// IEEE double.
    Fp64,
    /// IEEE single.
    Fp32,
    /// TensorFloat-32 (tensor cores).
    Tf32,
    /// IEEE half with FP32 accumulation.
    Fp16,
    /// bfloat16 with FP32 accumulation.
    Bf16,
}

impl Format {
    /// Name in records and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Format::Fp64 => "fp64",
            Format::Fp32 => "fp32",
            Format::Tf32 => "tf32",
            Format::Fp16 => "fp16",
            Format::Bf16 => "bf16",
        }
    }

    /// Bytes per element in memory.
    pub const fn bytes(self) -> u64 {
        match self {
            Format::Fp64 => 8,
            Format::Fp32 | Format::Tf32 => 4,
            Format::Fp16 | Format::Bf16 => 2,
        }
    }
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [
            Format::Fp64,
            Format::Fp32,
            Format::Tf32,
            Format::Fp16,
            Format::Bf16,
        ]
        .into_iter()
        .find(|f| f.name() == s)
        .ok_or_else(|| format!("unknown number format `{s}`; valid: fp64, fp32, tf32, fp16, bf16"))
    }
}

/// Where a convolution's channels sit in memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Channels first: NCHW, NCDHW (the layer graph's and the CPU's layout).
    #[default]
    ChannelsFirst,
    /// Channels last: NHWC, NDHWC (what tensor cores read best; TensorFlow's default, and
    /// PyTorch's `channels_last` memory format).
    ChannelsLast,
}

impl Layout {
    /// Name in records and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::ChannelsFirst => "channels-first",
            Layout::ChannelsLast => "channels-last",
        }
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "channels-first" | "nchw" | "ncdhw" => Ok(Layout::ChannelsFirst),
            "channels-last" | "nhwc" | "ndhwc" => Ok(Layout::ChannelsLast),
            _ => Err(format!(
                "unknown layout `{s}`; valid: channels-first (nchw, ncdhw), channels-last (nhwc, ndhwc)"
            )),
        }
    }
}

/// Which pass of a convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConvPass {
    /// `y = conv(x, w)`.
    Forward,
    /// `dx` from `dy`.
    BackwardData,
    /// `dw` from `x` and `dy`.
    BackwardFilter,
    /// `dx` and `dw` in one call, as PyTorch's `convolution_backward` computes them: a pass
    /// of imported measurements (`ridgeline import torch-trace`); no backend runs it (the
    /// suite measures each gradient alone).
    Backward,
}

impl ConvPass {
    /// Every pass a backend runs.
    pub const ALL: [ConvPass; 3] = [
        ConvPass::Forward,
        ConvPass::BackwardData,
        ConvPass::BackwardFilter,
    ];

    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            ConvPass::Forward => "forward",
            ConvPass::BackwardData => "backward-data",
            ConvPass::BackwardFilter => "backward-filter",
            ConvPass::Backward => "backward",
        }
    }
}

impl ConvPass {
    /// The error a backend gives for [`ConvPass::Backward`], which it does not run.
    pub(crate) fn refused(what: &str) -> Error {
        Error::invalid(
            what,
            "the backward pass with both gradients in one call is imported from traces, not \
             measured; measure backward-data and backward-filter",
        )
    }
}

/// A STREAM kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamKernel {
    /// `c = a`.
    Copy,
    /// `b = q c`.
    Scale,
    /// `c = a + b`.
    Add,
    /// `a = b + q c`.
    Triad,
}

impl StreamKernel {
    /// Every kernel.
    pub const ALL: [StreamKernel; 4] = [
        StreamKernel::Copy,
        StreamKernel::Scale,
        StreamKernel::Add,
        StreamKernel::Triad,
    ];

    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            StreamKernel::Copy => "copy",
            StreamKernel::Scale => "scale",
            StreamKernel::Add => "add",
            StreamKernel::Triad => "triad",
        }
    }

    /// Arrays read plus written per element.
    pub const fn arrays(self) -> u64 {
        match self {
            StreamKernel::Copy | StreamKernel::Scale => 2,
            StreamKernel::Add | StreamKernel::Triad => 3,
        }
    }

    /// FLOPs per element.
    pub const fn flops(self) -> u64 {
        match self {
            StreamKernel::Copy => 0,
            StreamKernel::Scale | StreamKernel::Add => 1,
            StreamKernel::Triad => 2,
        }
    }
}

/// Which way a host-device copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CopyDirection {
    /// Host to device.
    #[serde(rename = "h2d")]
    HostToDevice,
    /// Device to host.
    #[serde(rename = "d2h")]
    DeviceToHost,
}

impl CopyDirection {
    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            CopyDirection::HostToDevice => "h2d",
            CopyDirection::DeviceToHost => "d2h",
        }
    }
}

/// The host side of a host-device copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostMemory {
    /// Page-locked memory: the copy engine reads or writes it directly (DMA).
    Pinned,
    /// Ordinary memory: the driver stages it through pinned buffers.
    Pageable,
}

impl HostMemory {
    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            HostMemory::Pinned => "pinned",
            HostMemory::Pageable => "pageable",
        }
    }
}

/// Forward or backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pass {
    /// Forward.
    Forward,
    /// Backward (data and parameter gradients).
    Backward,
}

impl Pass {
    /// Name in records.
    pub const fn name(self) -> &'static str {
        match self {
            Pass::Forward => "forward",
            Pass::Backward => "backward",
        }
    }
}
