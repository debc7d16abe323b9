//! Errors of calibration and validation.

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Samples break an invariant.
    #[error("samples: {0}")]
    Samples(String),
    /// A fit cannot be made.
    #[error("fit: {0}")]
    Fit(String),
    /// A record cannot be used.
    #[error("{file}: record `{id}`: {message}")]
    Record {
        /// The records file.
        file: String,
        /// The record's id.
        id: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The inputs as a whole cannot give what was asked.
    #[error("{0}")]
    Input(String),
    /// From the model.
    #[error(transparent)]
    Model(#[from] ridgeline_model::Error),
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
