//! What a forward pass leaves for its backward besides the retained tensors.

use super::moe;

/// State a forward pass leaves for backward besides the retained tensors.
#[derive(Debug, Default)]
pub(crate) struct Aux {
    /// Batch norm: per-channel mean and inverse standard deviation.
    pub(crate) stats: Vec<f32>,
    /// Dropout: the keep mask.
    pub(crate) mask: Vec<u8>,
    /// Softmax cross-entropy: the probabilities.
    pub(crate) probs: Vec<f32>,
    /// Unfused grouped-query attention: the keys and values copied to every head, which
    /// its backward reads (as eager PyTorch's products save them).
    pub(crate) kv: Vec<f32>,
    /// A mixture of experts: its routing and each expert's tensors.
    pub(crate) moe: moe::Saved,
}

impl Aux {
    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        4 * (self.stats.len() + self.probs.len() + self.kv.len())
            + self.mask.len()
            + self.moe.bytes()
    }
}
