//! The measure crate's error type.

use std::path::PathBuf;

/// Errors from measuring.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Reading or writing a records file failed.
    #[error("{}: {cause}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong (said in the message, not chained, so it is said once).
        cause: std::io::Error,
    },

    /// A backend cannot run here (not built in, no device, a library missing).
    #[error("backend `{backend}` is not available: {reason}")]
    BackendUnavailable {
        /// The backend asked for, e.g. `cuda`.
        backend: String,
        /// Why, and how to fix it.
        reason: String,
    },

    /// A call into a device library failed.
    #[error("{device}: {call} failed: {message}")]
    Device {
        /// The device, e.g. `cuda:0`.
        device: String,
        /// The library call.
        call: String,
        /// The library's error.
        message: String,
    },

    /// A case the device's library runs no algorithm for (cuDNN finds none for a
    /// convolution within the workspace limit): that case cannot be measured here, the
    /// others can.
    #[error("{device}: {message}")]
    Declined {
        /// The device, e.g. `cuda:0`.
        device: String,
        /// What the library declined, and why.
        message: String,
    },

    /// A request the backend cannot honour (a precision it lacks, a bad shape).
    #[error("{what}: {message}")]
    Invalid {
        /// What was asked for.
        what: String,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// A records file line that is not a record (other than a torn last line).
    #[error("{}, line {line}: not a ridgeline record: {message}", path.display())]
    Record {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        message: String,
    },
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Invalid`].
    pub fn invalid(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Invalid {
            what: what.into(),
            message: message.into(),
        }
    }
}
