//! The disabled twin of the CUDA backend, for builds without the `cuda` feature:
//! [`CudaBackend::open`] always returns
//! [`Error::BackendUnavailable`](crate::Error::BackendUnavailable) saying why and how to
//! build with the backend.

use crate::backend::Backend;
use crate::error::{Error, Result};

/// The CUDA backend (not part of this build).
#[derive(Debug)]
pub enum CudaBackend {}

impl CudaBackend {
    /// Opens GPU `ordinal`; in this build, always an error that says why.
    pub fn open(ordinal: usize) -> Result<Box<dyn Backend>> {
        let driver = std::path::Path::new("/proc/driver/nvidia/version").exists();
        let gpu = if driver {
            "an NVIDIA driver is present, but"
        } else {
            "no NVIDIA driver was found on this machine, and"
        };
        Err(Error::BackendUnavailable {
            backend: format!("cuda:{ordinal}"),
            reason: format!(
                "{gpu} this ridgeline was built without the CUDA backend (build with \
                 `--features cuda`); measure on the CPU with --device cpu"
            ),
        })
    }
}

/// NCCL needs the CUDA backend.
pub(super) fn nccl_unavailable() -> Result<()> {
    Err(Error::BackendUnavailable {
        backend: "cuda".into(),
        reason: "this ridgeline was built without the CUDA backend (build with `--features \
                 cuda`); NCCL allreduce needs it and at least two GPUs"
            .into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disabled_twin_says_why() {
        let err = CudaBackend::open(0)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("cuda:0") && err.contains("--device cpu"),
            "{err}"
        );
    }
}
