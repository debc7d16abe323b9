//! The model crate's error type. Every variant names where the problem is (file, field or
//! layer, value) and how to fix it, so the CLI can print it as is.

use crate::precision::{NumberFormat, Precision};

/// Errors from parsing and validating workloads, systems and run parameters.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file is not valid TOML, or a value has the wrong type or an unknown key. The
    /// message from the TOML parser carries the line, column and key.
    #[error("{file}: {message}")]
    Parse {
        /// The file (or built-in source) being read.
        file: String,
        /// The parser's message, with line and column.
        message: String,
    },

    /// A value parsed but is out of range or inconsistent with another field.
    #[error("{file}: field `{field}`: {message}")]
    Invalid {
        /// The file (or built-in source) being read.
        file: String,
        /// Dotted path of the field, e.g. `device.memory_bandwidth_gbs`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// A layer cannot be built: its parameters do not fit its input shapes.
    #[error("{location}: layer `{layer}`: {message}")]
    Layer {
        /// Where the layer is defined: the built-in workload, or the file and line.
        location: String,
        /// The layer name.
        layer: String,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// A workload, system or device name is not in the catalog.
    #[error("unknown {kind} `{name}`; valid {kind}s: {}", valid.join(", "))]
    UnknownName {
        /// `workload`, `system` or `device`.
        kind: &'static str,
        /// The name given.
        name: String,
        /// The names that exist.
        valid: Vec<String>,
    },

    /// A run parameter (batch size, width, input size, ...) is out of range.
    #[error("{name} = {value}: {message}")]
    Argument {
        /// The parameter, as named on the command line.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is wrong and how to fix it.
        message: String,
    },

    /// The device has no peak for the number format a precision needs.
    #[error(
        "device `{device}` has no {format} peak, so it cannot run precision `{precision}`; \
         choose another precision, or add {} under [peak] in its device file",
        peak_keys(*.format)
    )]
    UnsupportedPrecision {
        /// The device name.
        device: String,
        /// The precision asked for.
        precision: Precision,
        /// The number format that is missing.
        format: NumberFormat,
    },

    /// A workload could not be written as a file.
    #[error("cannot export workload `{workload}`: {message}")]
    Export {
        /// The workload.
        workload: String,
        /// Why.
        message: String,
    },

    /// This machine could not be described as the `local` system.
    #[error("system `local`: {0}")]
    Local(String),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Invalid`] for `file` and `field`.
    pub fn invalid(
        file: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Invalid {
            file: file.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// An [`Error::Argument`].
    pub fn argument(name: &'static str, value: impl ToString, message: impl Into<String>) -> Self {
        Error::Argument {
            name,
            value: value.to_string(),
            message: message.into(),
        }
    }
}

/// The device-file keys that would give a peak for `format`: FP8 and TF32 run on tensor
/// cores only.
fn peak_keys(format: NumberFormat) -> String {
    let tensor = format!("`tflops_{format}_tensor = {{ value = ..., source = \"...\" }}`");
    match format {
        NumberFormat::Fp8 | NumberFormat::Tf32 => format!("{tensor} (tensor cores)"),
        _ => format!(
            "`tflops_{format} = {{ value = ..., source = \"...\" }}` (vector units) or {tensor} (matrix units)"
        ),
    }
}

/// Parses TOML into `T`, reporting the file, line, column and key on failure.
pub(crate) fn parse_toml<T: serde::de::DeserializeOwned>(text: &str, file: &str) -> Result<T> {
    toml::from_str(text).map_err(|e| Error::Parse {
        file: file.to_owned(),
        message: e.to_string().trim().to_owned(),
    })
}
