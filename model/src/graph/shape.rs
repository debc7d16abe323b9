//! Per-sample tensor shapes.

use std::fmt;

use serde::{Serialize, Serializer};
use smallvec::SmallVec;

/// A short list of dimensions, stored inline (no heap allocation up to four entries, the
/// most any supported op needs: channels plus three spatial dimensions).
pub type Dims = SmallVec<[usize; 4]>;

/// The shape of one sample's tensor, without the batch dimension, channels first:
/// `[C, D, H, W]` for 3-d feature maps, `[C, H, W]` for 2-d, `[F]` for feature vectors.
/// (CosmoFlow's Keras reference is channels-last; ridgeline always stores channels first.)
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Shape {
    dims: Dims,
    /// Product of `dims`, cached: costing asks for it many times per layer.
    elements: u64,
}

impl Shape {
    /// A shape from its dimensions, channels first.
    pub fn new(dims: &[usize]) -> Self {
        let elements = dims.iter().map(|&d| d as u64).product();
        Self {
            dims: Dims::from_slice(dims),
            elements,
        }
    }

    /// All dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    /// Number of dimensions (1 for a feature vector, 1 + spatial rank for a feature map).
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The channel (or feature) count: the first dimension.
    pub fn channels(&self) -> usize {
        self.dims.first().copied().unwrap_or(0)
    }

    /// The spatial dimensions (everything after the channels).
    pub fn spatial(&self) -> &[usize] {
        self.dims.get(1..).unwrap_or(&[])
    }

    /// Number of elements of one sample.
    pub fn elements(&self) -> u64 {
        self.elements
    }

    /// Number of spatial positions (1 for a feature vector).
    pub fn spatial_elements(&self) -> u64 {
        self.spatial().iter().map(|&d| d as u64).product()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.dims.iter().map(usize::to_string).collect();
        f.write_str(&parts.join("x"))
    }
}

/// Serialised as a list of dimensions.
impl Serialize for Shape {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.dims.as_slice().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_spatial_and_elements() {
        let s = Shape::new(&[4, 128, 128, 128]);
        assert_eq!(s.channels(), 4);
        assert_eq!(s.spatial(), &[128, 128, 128]);
        assert_eq!(s.elements(), 4 * 128 * 128 * 128);
        assert_eq!(s.spatial_elements(), 128 * 128 * 128);
        assert_eq!(s.to_string(), "4x128x128x128");
    }

    #[test]
    fn feature_vector_has_no_spatial_dims() {
        let s = Shape::new(&[1000]);
        assert!(s.spatial().is_empty());
        assert_eq!(s.spatial_elements(), 1);
    }
}
