//! The reports crate's error type.

/// Errors while rendering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CSV writer failed.
    #[error("writing CSV: {0}")]
    Csv(String),
}
