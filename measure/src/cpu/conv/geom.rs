//! The geometry of a convolution, and the scratch buffer its passes share.

use std::cell::RefCell;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a scratch buffer of `len` elements with unspecified contents. The buffer is
/// kept per thread between calls, as the frameworks' caching allocators keep theirs, so a
/// convolution does not pay for fresh pages on every call.
pub(super) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            if buf.len() < len {
                buf.resize(len, 0.0);
            }
            f(&mut buf[..len])
        }
        // Only a nested call finds it taken; it gets a buffer of its own.
        Err(_) => f(&mut vec![0.0; len]),
    })
}

/// The geometry of one convolution, normalised to three spatial dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConvGeom {
    pub(crate) n: usize,
    pub(crate) c_in: usize,
    pub(crate) c_out: usize,
    pub(crate) groups: usize,
    pub(crate) input: [usize; 3],
    pub(crate) output: [usize; 3],
    pub(crate) kernel: [usize; 3],
    pub(crate) stride: [usize; 3],
    /// Padding before each dimension (padding after only changes the output size).
    pub(crate) pad: [usize; 3],
    pub(crate) dilation: [usize; 3],
}

/// Pads a 1-, 2- or 3-element list to three, with `fill` in front.
pub(crate) fn three(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    let start = 3 - v.len().min(3);
    out[start..].copy_from_slice(&v[v.len().saturating_sub(3)..]);
    out
}

impl ConvGeom {
    /// Input channels per group.
    pub(crate) fn cin_g(&self) -> usize {
        self.c_in / self.groups
    }

    /// Output channels per group.
    pub(crate) fn cout_g(&self) -> usize {
        self.c_out / self.groups
    }

    /// Kernel volume.
    pub(crate) fn kvol(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Rows of the lowered matrix: `C_in / groups x kernel volume`.
    pub(crate) fn k_rows(&self) -> usize {
        self.cin_g() * self.kvol()
    }

    /// Spatial volume of the input.
    pub(crate) fn in_vol(&self) -> usize {
        self.input.iter().product()
    }

    /// Spatial volume of the output.
    pub(crate) fn out_vol(&self) -> usize {
        self.output.iter().product()
    }

    /// Elements of the weight tensor.
    pub(crate) fn weights(&self) -> usize {
        self.c_out * self.k_rows()
    }

    /// Whether this is depthwise (one input and one output channel per group).
    pub(super) fn depthwise(&self) -> bool {
        self.cin_g() == 1 && self.cout_g() == 1 && self.groups > 1
    }

    /// Whether every stride is 1.
    pub(super) fn unit_stride(&self) -> bool {
        self.stride == [1; 3]
    }

    /// The unit-stride convolution whose forward pass is this one's backward-data pass (for
    /// unit-stride convolutions whose padding does not exceed the dilated kernel).
    pub(super) fn flipped(&self) -> Option<ConvGeom> {
        let mut pad = [0; 3];
        for (d, p) in pad.iter_mut().enumerate() {
            *p = ((self.kernel[d] - 1) * self.dilation[d]).checked_sub(self.pad[d])?;
        }
        Some(ConvGeom {
            c_in: self.c_out,
            c_out: self.c_in,
            input: self.output,
            output: self.input,
            pad,
            ..self.clone()
        })
    }

    /// Input coordinate along dimension `d` for output coordinate `o` and kernel offset `k`,
    /// if inside the input.
    #[inline]
    pub(super) fn coord(&self, d: usize, o: usize, k: usize) -> Option<usize> {
        let i = (o * self.stride[d] + k * self.dilation[d]).checked_sub(self.pad[d])?;
        (i < self.input[d]).then_some(i)
    }
}

/// The kernel offset `(a, b, c)` of flattened kernel index `kk`.
#[inline]
pub(super) fn offset(g: &ConvGeom, kk: usize) -> (usize, usize, usize) {
    let [_, kh, kw] = g.kernel;
    (kk / (kh * kw), (kk / kw) % kh, kk % kw)
}
