//! What the builders share: layer names and the width multiplier.

use compact_str::CompactString;

/// `prefix.name`, built without the formatting machinery and without a heap allocation
/// for names up to 24 bytes (the builders' hot path).
pub(super) fn dotted(prefix: &str, name: &str) -> CompactString {
    let mut s = CompactString::with_capacity(prefix.len() + 1 + name.len());
    s.push_str(prefix);
    s.push('.');
    s.push_str(name);
    s
}

/// The width multiplier applied to a reference channel count.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scale(pub(super) f64);

impl Scale {
    /// `channels x width`, rounded, at least 1.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    pub(super) fn ch(self, channels: usize) -> usize {
        ((channels as f64 * self.0).round() as usize).max(1)
    }
}
