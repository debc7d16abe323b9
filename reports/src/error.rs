//! The reports crate's error type.

/// Errors while rendering.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The CSV writer failed.
    #[error("writing CSV: {0}")]
    Csv(String),
    /// A report is malformed (an identifier unusable as a file name, or used twice).
    #[error("report: {0}")]
    Report(String),
    /// A plot could not be drawn (bad values, or the drawing backend failed).
    #[error("plot `{chart}`: {message}")]
    Plot {
        /// The chart's title.
        chart: String,
        /// What went wrong.
        message: String,
    },
}
