//! The executor's deterministic pseudo-random streams: synthetic data, initial parameters,
//! dropout masks and labels.

/// A deterministic pseudo-random stream (splitmix64), for synthetic data, masks and labels.
pub(crate) fn splitmix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform value in [-1, 1) from the stream.
#[allow(clippy::cast_precision_loss)]
pub(crate) fn uniform(seed: u64, i: u64) -> f32 {
    ((splitmix(seed, i) >> 40) as f32 / (1u64 << 23) as f32) - 1.0
}
