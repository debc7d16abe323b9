//! The disabled twin of the CUDA backend, for builds without the `cuda` feature:
//! [`CudaBackend::open`] always returns
//! [`Error::BackendUnavailable`](crate::Error::BackendUnavailable) saying why and how to
//! build with the backend.

use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::record::GpuEnv;

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
    Err(no_nccl())
}

fn no_nccl() -> Error {
    Error::BackendUnavailable {
        backend: "cuda".into(),
        reason: "this ridgeline was built without the CUDA backend (build with `--features \
                 cuda`); NCCL allreduce needs it and at least two GPUs"
            .into(),
    }
}

/// One MPI rank's GPU in an NCCL allreduce (not part of this build: every constructor
/// says how to build it).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) enum NcclRank {}

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
impl NcclRank {
    pub(crate) fn open(_ordinal: usize) -> Result<NcclRank> {
        Err(no_nccl())
    }

    pub(crate) fn unique_id() -> Result<[u8; 128]> {
        Err(no_nccl())
    }

    pub(crate) fn join(&mut self, _rank: usize, _ranks: usize, _id: &[u8; 128]) -> Result<()> {
        match *self {}
    }

    pub(crate) fn reserve(&mut self, _count: usize) -> Result<()> {
        match *self {}
    }

    pub(crate) fn reduce(&mut self, _values: &[f32]) -> Result<Vec<f32>> {
        match *self {}
    }

    pub(crate) fn allreduce(&mut self, _count: usize) -> Result<()> {
        match *self {}
    }

    pub(crate) fn gpu(&self) -> GpuEnv {
        match *self {}
    }

    pub(crate) fn nccl_version(&self) -> Result<String> {
        match *self {}
    }
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
