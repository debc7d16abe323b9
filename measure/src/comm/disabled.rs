//! The disabled twin: this build has no MPI, so every campaign is an error that says how
//! to build with it.

use super::plan::{CommPlan, CommRun, DdpPlan, DdpRun, HOW_TO_BUILD, Opener};
use crate::error::{Error, Result};

pub(super) fn run(_plan: &CommPlan, _open: &mut Opener<'_>) -> Result<CommRun> {
    Err(unavailable())
}

pub(super) fn ddp(_plan: &DdpPlan, _open: &mut Opener<'_>) -> Result<DdpRun> {
    Err(unavailable())
}

fn unavailable() -> Error {
    Error::BackendUnavailable {
        backend: "mpi".into(),
        reason: format!("this ridgeline was built without the `mpi` feature; {HOW_TO_BUILD}"),
    }
}
