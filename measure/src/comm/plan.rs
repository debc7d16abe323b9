//! What a communication campaign runs (its plans), what it returns, and the constants both
//! twins of the MPI backend share.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;

use ridgeline_model::graph::Graph;

use crate::error::{Error, Result};
use crate::protocol::Protocol;
use crate::record::{Device, Record};

/// Largest message, and largest allreduce: 256 MiB.
pub const MAX_MESSAGE_BYTES: u64 = 256 << 20;
/// Smallest allreduce: one FP32 element.
pub const MIN_ALLREDUCE_BYTES: u64 = 4;
/// Messages in a train, by default (Netgauge's `n`).
pub const DEFAULT_TRAIN: usize = 8;
/// The `device` of every communication record.
pub const DEVICE: Device = Device::Mpi;

/// A communication benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CommBench {
    /// Parametrised round trips between pairs of ranks, and the local reduction kernel.
    PingPong,
    /// Allreduce over every rank.
    Allreduce,
    /// All-to-all over every rank.
    Alltoall,
}

impl CommBench {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CommBench::PingPong => "pingpong",
            CommBench::Allreduce => "allreduce",
            CommBench::Alltoall => "alltoall",
        }
    }

    /// The smallest size it takes, in bytes.
    pub fn min_bytes(self) -> u64 {
        match self {
            CommBench::PingPong | CommBench::Alltoall => 1,
            CommBench::Allreduce => MIN_ALLREDUCE_BYTES,
        }
    }

    /// The default sizes: powers of 4 from the smallest to 256 MiB (all-to-all: per rank,
    /// up to 16 MiB, since every rank sends that much to each other rank).
    pub fn default_sizes(self) -> Vec<u64> {
        let max = match self {
            CommBench::Alltoall => 16 << 20,
            _ => MAX_MESSAGE_BYTES,
        };
        std::iter::successors(Some(self.min_bytes()), |&s| Some(s * 4))
            .take_while(|&s| s <= max)
            .collect()
    }
}

/// An allreduce algorithm that can be measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AllreduceAlgorithm {
    /// `MPI_Allreduce`: the library's choice.
    Mpi,
    /// Ring: reduce-scatter then all-gather around a ring of ranks.
    Ring,
    /// Recursive halving-doubling (Rabenseifner); a power-of-two number of ranks.
    Rhd,
    /// Recursive doubling: log2(p) exchanges of the whole vector; a power of two.
    Rd,
    /// Pipelined double binary tree: two trees, each reducing and broadcasting half the
    /// vector in segments.
    Tree,
    /// `ncclAllReduce` on each rank's GPU (its index among its host's ranks), the
    /// communicator bootstrapped through MPI: GPU buffers over NVLink, PCIe and the network
    /// (NCCL's choice of ring or tree; `NCCL_ALGO` pins one). Needs the `cuda` feature too.
    Nccl,
}

impl AllreduceAlgorithm {
    /// Every algorithm on host memory (the default set; [`AllreduceAlgorithm::Nccl`] is
    /// asked for by name).
    pub const ALL: [AllreduceAlgorithm; 5] = [
        AllreduceAlgorithm::Mpi,
        AllreduceAlgorithm::Ring,
        AllreduceAlgorithm::Rhd,
        AllreduceAlgorithm::Rd,
        AllreduceAlgorithm::Tree,
    ];

    /// Its name on the command line and in records.
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgorithm::Mpi => "mpi",
            AllreduceAlgorithm::Ring => "ring",
            AllreduceAlgorithm::Rhd => "rhd",
            AllreduceAlgorithm::Rd => "rd",
            AllreduceAlgorithm::Tree => "tree",
            AllreduceAlgorithm::Nccl => "nccl",
        }
    }

    /// Whether it needs a power-of-two number of ranks.
    pub fn needs_power_of_two(self) -> bool {
        matches!(self, AllreduceAlgorithm::Rhd | AllreduceAlgorithm::Rd)
    }
}

impl fmt::Display for AllreduceAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AllreduceAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        AllreduceAlgorithm::ALL
            .into_iter()
            .chain([AllreduceAlgorithm::Nccl])
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!("unknown allreduce algorithm `{s}`; valid: mpi, ring, rhd, rd, tree, nccl")
            })
    }
}

/// Which pairs of ranks a ping-pong campaign measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pairs {
    /// Rank 0 with the first other rank on its host and the first rank on another host.
    Levels,
    /// Rank 0 with every other rank.
    All,
}

/// What a communication campaign measures.
#[derive(Debug, Clone, PartialEq)]
pub struct CommPlan {
    /// The benchmark.
    pub bench: CommBench,
    /// Message sizes in bytes (allreduce: the vector; all-to-all: per pair of ranks).
    pub sizes: Vec<u64>,
    /// Allreduce algorithms (allreduce only).
    pub algorithms: Vec<AllreduceAlgorithm>,
    /// Pairs (ping-pong only).
    pub pairs: Pairs,
    /// Messages per train (ping-pong only), at least 2.
    pub train: usize,
    /// The run protocol.
    pub protocol: Protocol,
}

impl CommPlan {
    /// A plan with the defaults of `bench`.
    pub fn new(bench: CommBench) -> CommPlan {
        CommPlan {
            bench,
            sizes: bench.default_sizes(),
            algorithms: AllreduceAlgorithm::ALL.to_vec(),
            pairs: Pairs::Levels,
            train: DEFAULT_TRAIN,
            protocol: Protocol::default(),
        }
    }

    /// Checks what can be checked before MPI starts: sizes in range (and whole FP32
    /// elements for allreduce), a train of at least two messages.
    pub fn check(&self) -> Result<()> {
        if self.sizes.is_empty() {
            return Err(Error::invalid("--sizes", "no sizes given"));
        }
        let min = self.bench.min_bytes();
        let max = match self.bench {
            CommBench::Alltoall => MAX_MESSAGE_BYTES / 2,
            _ => MAX_MESSAGE_BYTES,
        };
        for &s in &self.sizes {
            if s < min || s > max {
                return Err(Error::invalid(
                    "--sizes",
                    format!(
                        "{s} bytes is out of range for {}: sizes go from {min} B to {} MiB",
                        self.bench.name(),
                        max >> 20
                    ),
                ));
            }
            if self.bench == CommBench::Allreduce && s % 4 != 0 {
                return Err(Error::invalid(
                    "--sizes",
                    format!(
                        "{s} bytes is not a whole number of FP32 elements: allreduce sizes are multiples of 4"
                    ),
                ));
            }
        }
        if self.train < 2 {
            return Err(Error::invalid(
                "--train",
                format!("{} messages: a train needs at least 2", self.train),
            ));
        }
        if self.bench == CommBench::Allreduce && self.algorithms.is_empty() {
            return Err(Error::invalid("--algorithm", "no algorithm given"));
        }
        Ok(())
    }
}

/// What a campaign did, as seen by one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct CommRun {
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub ranks: usize,
    /// Records measured (rank 0 only; empty elsewhere).
    pub records: Vec<Record>,
    /// Measurements skipped because `--resume` found them.
    pub skipped: usize,
    /// Algorithms left out, and why (rank 0 only).
    pub notes: Vec<String>,
}

impl CommRun {
    /// Whether this rank is the one that reports.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }
}

/// Opens the records file on rank 0 (`None`: no file, records are only returned): the
/// campaign's one resume rule, from whoever runs the campaign.
pub type Opener<'a> = dyn FnMut() -> Result<Option<Box<dyn crate::record::Sink + 'a>>> + 'a;

/// A data-parallel training run under MPI (`ridgeline measure comm ddp`): every rank trains
/// `graph` on the CPU executor with a batch of its own and allreduces the gradients in DDP's
/// buckets, by `MPI_Allreduce`, on a communication thread beside backward.
#[derive(Debug, Clone)]
pub struct DdpPlan {
    /// The workload.
    pub graph: Graph,
    /// Samples per rank.
    pub batch: usize,
    /// Compute threads per rank.
    pub threads: usize,
    /// Bytes of the first gradient bucket ([`ridgeline_model::sim::DDP_FIRST_BUCKET_BYTES`]).
    pub first_bucket_bytes: f64,
    /// Bytes of every later bucket ([`ridgeline_model::sim::DDP_BUCKET_BYTES`]).
    pub bucket_bytes: f64,
    /// Whether buckets are allreduced beside backward (else after it).
    pub overlap: bool,
    /// Unmeasured steps first.
    pub warmup: usize,
    /// Measured steps.
    pub steps: usize,
}

impl DdpPlan {
    /// A plan of DDP's default buckets, overlapped, one warm-up step and five measured.
    pub fn new(graph: Graph, batch: usize, threads: usize) -> DdpPlan {
        DdpPlan {
            graph,
            batch,
            threads,
            first_bucket_bytes: ridgeline_model::sim::DDP_FIRST_BUCKET_BYTES,
            bucket_bytes: ridgeline_model::sim::DDP_BUCKET_BYTES,
            overlap: true,
            warmup: 1,
            steps: 5,
        }
    }

    /// Checks what can be checked before MPI starts.
    pub fn check(&self) -> Result<()> {
        if self.batch == 0 {
            return Err(Error::invalid("--batch", "must be at least 1"));
        }
        if self.threads == 0 {
            return Err(Error::invalid("--threads", "must be at least 1"));
        }
        if self.steps == 0 {
            return Err(Error::invalid("--steps", "must be at least 1"));
        }
        if !(self.bucket_bytes > 0.0 && self.first_bucket_bytes > 0.0) {
            return Err(Error::invalid(
                "--bucket-mib",
                "a gradient bucket holds more than 0 bytes",
            ));
        }
        Ok(())
    }
}

/// What a data-parallel run did, as seen by one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct DdpRun {
    /// This rank.
    pub rank: usize,
    /// Ranks in the job.
    pub ranks: usize,
    /// Rank 0's records: a `workload-layer` record per layer and pass and the
    /// `workload-step` record (empty elsewhere, and where `--resume` found the run).
    pub records: Vec<Record>,
    /// Gradient buckets per step.
    pub buckets: usize,
    /// Whether `--resume` found the run already recorded.
    pub skipped: bool,
}

impl DdpRun {
    /// Whether this rank is the one that reports.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }
}

/// How to get a build that can, for error messages.
pub const HOW_TO_BUILD: &str = "build ridgeline with MPI: install Open MPI (Debian: apt-get install \
     libopenmpi-dev openmpi-bin libclang-dev), then `cargo build --release --features mpi`, and \
     launch it with `mpirun -np 2 target/release/ridgeline measure comm ...`";
