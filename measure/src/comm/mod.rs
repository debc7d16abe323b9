//! Communication benchmarks under MPI (docs/ARCHITECTURE.md "Measurement"; Hoefler, Lichei and Rehm,
//! *Low-Overhead LogGP Parameter Assessment for Modern Interconnection Networks*, IPDPS 2007
//! — the Netgauge method).
//!
//! The measurement binary is launched by `mpirun` or `srun`; every rank runs the same
//! plan in lockstep, and rank 0 writes the records. Three benchmarks:
//!
//! - **ping-pong** ([`CommBench::PingPong`]): for a pair of ranks, the parametrised round
//!   trip `PRTT(n, d, s)` — the client sends `n` messages of `s` bytes with `d` seconds of
//!   busy delay between them, the server answers the last one with one message of `s`
//!   bytes — at `n = 1` (the ping-pong), at `n` = [`CommPlan::train`] with no delay (a
//!   message train, paced by the gap) and with `d = PRTT(1, 0, s)` (paced by the sender's
//!   overhead). `ridgeline-calibrate` derives LogGP's `L`, `o`, `g` and `G` from them.
//!   Then both ranks of the pair send and receive `s` bytes at once (`MPI_Sendrecv`, as
//!   OSU's bidirectional test does): the cost of one step of every allreduce algorithm,
//!   which is more than a one-way message where both directions share the CPUs or memory
//!   that move the bytes.
//!   Pairs are rank 0 and one rank per level ([`Pairs::Levels`]: the first other rank on
//!   rank 0's host, and the first on another host), or rank 0 and every other rank. The
//!   campaign also times the local reduction kernel (`a += b` on FP32) that allreduce
//!   algorithms run, at every size: the `gamma` of the collective model.
//! - **allreduce** ([`CommBench::Allreduce`]): FP32 sum over every rank, by the MPI
//!   library's `MPI_Allreduce` (its own choice of algorithm; Open MPI's `coll_tuned` MCA
//!   settings, when given, are recorded) and by ring, recursive halving-doubling,
//!   recursive doubling and the pipelined double binary tree written here over
//!   point-to-point messages, so the algorithm is known; and, asked for by name, by NCCL
//!   on one GPU per rank ([`AllreduceAlgorithm::Nccl`], with the `cuda` feature), the
//!   communicator bootstrapped through MPI. Every algorithm's result is checked against
//!   the exact sum before it is timed.
//! - **all-to-all** ([`CommBench::Alltoall`]): `MPI_Alltoall`, `s` bytes to every rank.
//!
//! Timing follows the run protocol ([`crate::protocol`]) across ranks: rank 0 decides the
//! warm-up, the batch of runs per sample and when to stop, and broadcasts each decision;
//! every sample starts after a barrier, and a collective's sample is its slowest rank's time.
//!
//! Without the `mpi` cargo feature, [`run`] is the disabled twin: it says how to build
//! with MPI.

use crate::error::Result;

mod plan;
pub use plan::*;

#[cfg(feature = "mpi")]
mod enabled;
#[cfg(feature = "mpi")]
use enabled as imp;

#[cfg(not(feature = "mpi"))]
mod disabled;
#[cfg(not(feature = "mpi"))]
use disabled as imp;

/// Runs `plan` in an MPI job: every rank calls this; rank 0 appends records to `out`
/// (resuming it with `resume`). Errors before any measurement (one rank, a records file
/// from a job of another size) are returned on every rank.
pub fn run(plan: &CommPlan, open: &mut Opener<'_>) -> Result<CommRun> {
    plan.check()?;
    imp::run(plan, open)
}

/// Runs `plan` in an MPI job: every rank calls this; rank 0 appends the records to the file
/// `open` gives. Errors before training (one rank, no file) are returned on every rank.
pub fn ddp(plan: &DdpPlan, open: &mut Opener<'_>) -> Result<DdpRun> {
    plan.check()?;
    imp::ddp(plan, open)
}

/// Whether this build can run communication benchmarks.
pub const ENABLED: bool = cfg!(feature = "mpi");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sizes_span_the_range() {
        let s = CommBench::PingPong.default_sizes();
        assert_eq!((s[0], *s.last().unwrap()), (1, MAX_MESSAGE_BYTES));
        let s = CommBench::Allreduce.default_sizes();
        assert_eq!((s[0], *s.last().unwrap()), (4, MAX_MESSAGE_BYTES));
        assert!(CommPlan::new(CommBench::Alltoall).check().is_ok());
    }

    #[test]
    fn sizes_out_of_range_are_refused() {
        let mut p = CommPlan::new(CommBench::PingPong);
        p.sizes = vec![MAX_MESSAGE_BYTES + 1];
        let e = p.check().unwrap_err().to_string();
        assert!(e.contains("--sizes") && e.contains("256 MiB"), "{e}");
        let mut p = CommPlan::new(CommBench::Allreduce);
        p.sizes = vec![2];
        assert!(p.check().unwrap_err().to_string().contains("from 4 B"));
        p.sizes = vec![6];
        assert!(
            p.check()
                .unwrap_err()
                .to_string()
                .contains("multiples of 4")
        );
        let mut p = CommPlan::new(CommBench::PingPong);
        p.train = 1;
        assert!(p.check().unwrap_err().to_string().contains("--train"));
    }

    #[test]
    fn algorithms_parse_by_name() {
        for a in AllreduceAlgorithm::ALL {
            assert_eq!(a.name().parse::<AllreduceAlgorithm>(), Ok(a));
        }
        assert_eq!("nccl".parse(), Ok(AllreduceAlgorithm::Nccl));
        assert!(!AllreduceAlgorithm::ALL.contains(&AllreduceAlgorithm::Nccl));
        assert!("hier".parse::<AllreduceAlgorithm>().is_err());
    }
}
