//! The MPI implementation, through rsmpi over the system's MPI library.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::topology::{Color, SimpleCommunicator};
use mpi::traits::{Communicator, CommunicatorCollectives, Destination, Root, Source};

use super::plan::{
    AllreduceAlgorithm, CommBench, CommPlan, CommRun, DEVICE, DdpPlan, DdpRun, Opener, Pairs,
};
use crate::cpu::ddp::DdpOptions;
use ridgeline_model::collective::{DoubleTree, TREE_SEGMENT_BYTES, segments as segments_of};

use crate::cuda::NcclRank;
use crate::error::{Error, Result};
use crate::protocol::{MIN_RESOLUTIONS, Protocol, median, timer_resolution};
use crate::record::{
    AllreduceShape, AlltoallShape, Env, ExchangeShape, Extra, Measured, PrttShape, Record,
    RecordPrecision, ReduceShape, Sink as RecordSink, record_id,
};

/// Longest host name exchanged between ranks.
const HOST_BYTES: usize = 256;

/// What every record of the job carries.
struct Job {
    ranks: usize,
    hosts: Vec<String>,
    ranks_per_node: usize,
    nodes: usize,
    library: String,
    settings: BTreeMap<String, String>,
}

impl Job {
    fn extra(&self) -> Extra {
        Extra {
            ranks: Some(self.ranks),
            ranks_per_node: Some(self.ranks_per_node),
            nodes: Some(self.nodes),
            hosts: self.hosts.clone(),
            mpi_library: Some(self.library.clone()),
            mpi_settings: self.settings.clone(),
            ..Extra::default()
        }
    }
}

/// Rank 0's records file and what resuming it found.
struct Sink<'a> {
    file: Option<Box<dyn RecordSink + 'a>>,
    /// Median sample of each resumed record, by id (a delayed train needs its ping-pong).
    resumed: HashMap<String, f64>,
    records: Vec<Record>,
    skipped: usize,
}

impl Sink<'_> {
    fn has(&self, id: &str) -> bool {
        self.file.as_ref().is_some_and(|f| f.has(id))
    }

    fn push(&mut self, record: Record) -> Result<()> {
        if let Some(f) = &mut self.file {
            f.write(std::slice::from_ref(&record))?;
        }
        self.records.push(record);
        Ok(())
    }
}

/// A started job: MPI initialised, this rank's place, the job's description and rank 0's
/// records file.
struct Started<'a> {
    /// Keeps MPI up until the job is done.
    _universe: mpi::environment::Universe,
    world: SimpleCommunicator,
    rank: usize,
    ranks: usize,
    job: Job,
    sink: Sink<'a>,
}

/// Starts MPI at `threading` (at least), checks the job has two ranks or more, describes it,
/// and opens rank 0's records file: a failure there is returned on every rank.
fn start<'a>(open: &mut Opener<'a>, threading: mpi::Threading) -> Result<Started<'a>> {
    let (universe, provided) =
        mpi::initialize_with_threading(threading).ok_or_else(|| Error::BackendUnavailable {
            backend: "mpi".into(),
            reason: "MPI is already initialised in this process".into(),
        })?;
    if provided < threading {
        return Err(Error::BackendUnavailable {
            backend: "mpi".into(),
            reason: format!(
                "the MPI library gives threading level {provided:?}, and this needs \
                 {threading:?}: one thread computes while the main thread communicates"
            ),
        });
    }
    let world = universe.world();
    // A rank that panics would leave the others waiting in a collective for ever: say
    // why, then end the whole job.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        SimpleCommunicator::world().abort(70);
    }));
    let (rank, ranks) = place(&world);
    if ranks < 2 {
        return Err(Error::invalid(
            "ranks",
            "this job has 1 rank, and communication needs at least 2: launch it with \
             `mpirun -np 2 ridgeline measure comm ...` (or `srun -n 2 ...`)",
        ));
    }
    let job = job(&world, ranks);

    // Rank 0 opens the records file; every rank learns whether that worked.
    let mut failure = None;
    let mut sink = Sink {
        file: None,
        resumed: HashMap::new(),
        records: Vec::new(),
        skipped: 0,
    };
    if rank == 0 {
        match open().and_then(|file| resumed(file.as_deref(), ranks).map(|r| (file, r))) {
            Ok((file, resumed)) => {
                sink.file = file;
                sink.resumed = resumed;
            }
            Err(e) => failure = Some(e),
        }
    }
    // Every rank returns rank 0's message (mpirun may end the job before rank 0 prints).
    let mut message = [0u8; 1024];
    if let Some(e) = &failure {
        let text = e.to_string();
        let n = text.len().min(message.len());
        message[..n].copy_from_slice(&text.as_bytes()[..n]);
    }
    world.process_at_rank(0).broadcast_into(&mut message[..]);
    if message[0] != 0 {
        let end = message
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(message.len());
        return Err(failure.unwrap_or_else(|| {
            Error::invalid(
                "rank 0",
                String::from_utf8_lossy(&message[..end]).into_owned(),
            )
        }));
    }
    Ok(Started {
        _universe: universe,
        world,
        rank,
        ranks,
        job,
        sink,
    })
}

pub(super) fn run<'a>(plan: &CommPlan, open: &mut Opener<'a>) -> Result<CommRun> {
    let Started {
        _universe,
        world,
        rank,
        ranks,
        job,
        mut sink,
    } = start(open, mpi::Threading::Single)?;

    // NCCL's GPUs and communicator, set up before anything is measured: a failure (no
    // GPU, no NCCL) is agreed by every rank and returned, not aborted on.
    let mut nccl = if plan.bench == CommBench::Allreduce
        && plan.algorithms.contains(&AllreduceAlgorithm::Nccl)
    {
        Some(nccl_rank(&world, plan, &job)?)
    } else {
        None
    };
    let floor = timer_resolution().as_secs_f64() * f64::from(MIN_RESOLUTIONS);
    let mut notes = Vec::new();
    let outcome = match plan.bench {
        CommBench::PingPong => pingpong(&world, plan, &job, floor, &mut sink),
        CommBench::Allreduce => allreduce(
            &world,
            plan,
            &job,
            floor,
            &mut sink,
            &mut notes,
            nccl.as_mut(),
        ),
        CommBench::Alltoall => alltoall(&world, plan, &job, floor, &mut sink),
    };
    if let Err(e) = outcome {
        // A rank-local failure (a full disk on rank 0, a wrong sum) leaves the others
        // waiting in a collective: say why, and end the whole job.
        eprintln!("error: rank {rank}: {e}");
        world.abort(2);
    }
    Ok(CommRun {
        rank,
        ranks,
        records: sink.records,
        skipped: sink.skipped,
        notes,
    })
}

/// A data-parallel run: every rank trains on the CPU executor, its compute on a thread of
/// its own, the main thread allreducing each gradient bucket by `MPI_Allreduce` as it comes
/// (`MPI_THREAD_FUNNELED`: only the main thread calls MPI). Rank 0 writes its own steps.
pub(super) fn ddp<'a>(plan: &DdpPlan, open: &mut Opener<'a>) -> Result<DdpRun> {
    let Started {
        _universe,
        world,
        rank,
        ranks,
        job,
        mut sink,
    } = start(open, mpi::Threading::Funneled)?;
    let options = DdpOptions {
        first_bucket_bytes: plan.first_bucket_bytes,
        bucket_bytes: plan.bucket_bytes,
        overlap: plan.overlap,
        warmup: plan.warmup,
        steps: plan.steps,
        ranks,
    };
    let shape = crate::record::StepShape {
        workload: plan.graph.name().to_owned(),
        input: plan.graph.input_shape().dims().to_vec(),
        batch: plan.batch,
        ranks: Some(ranks),
    };
    let id = record_id(
        &Measured::WorkloadStep(shape),
        RecordPrecision::Fp32,
        plan.threads,
        crate::record::Device::Cpu,
    );
    if skip(&world, &mut sink, &id) {
        return Ok(DdpRun {
            rank,
            ranks,
            records: Vec::new(),
            buckets: 0,
            skipped: true,
        });
    }
    let mut scratch: HashMap<usize, Vec<f32>> = HashMap::new();
    let trained = crate::cpu::ddp::train(
        &plan.graph,
        plan.batch,
        plan.threads,
        &options,
        &mut || world.barrier(),
        &mut |data: &mut Vec<f32>| {
            let out = scratch
                .entry(data.len())
                .or_insert_with(|| vec![0.0; data.len()]);
            world.all_reduce_into(&data[..], &mut out[..], SystemOperation::sum());
            std::mem::swap(data, out);
        },
    );
    let trained = agree(&world, "data-parallel step", trained)?;
    let buckets = trained.steps.first().map_or(0, |s| s.buckets.len());
    if rank == 0 {
        let mut extra = job.extra();
        extra.ranks = Some(ranks);
        for r in trained.records(&plan.graph, plan.batch, plan.threads, &options, extra) {
            if let Err(e) = sink.push(r) {
                eprintln!("error: rank 0: {e}");
                world.abort(2);
            }
        }
    }
    Ok(DdpRun {
        rank,
        ranks,
        records: sink.records,
        buckets,
        skipped: false,
    })
}

/// The job's hosts (every rank's processor name), library and settings.
fn job(world: &SimpleCommunicator, ranks: usize) -> Job {
    let name = mpi::environment::processor_name().unwrap_or_else(|_| "unknown".into());
    let mut mine = [0u8; HOST_BYTES];
    let bytes = name.as_bytes();
    let n = bytes.len().min(HOST_BYTES);
    mine[..n].copy_from_slice(&bytes[..n]);
    let mut all = vec![0u8; HOST_BYTES * ranks];
    world.all_gather_into(&mine[..], &mut all[..]);
    let hosts: Vec<String> = all
        .chunks(HOST_BYTES)
        .map(|c| {
            let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
            String::from_utf8_lossy(&c[..end]).into_owned()
        })
        .collect();
    let mut per_host: BTreeMap<&str, usize> = BTreeMap::new();
    for h in &hosts {
        *per_host.entry(h.as_str()).or_default() += 1;
    }
    let ranks_per_node = per_host.values().copied().max().unwrap_or(1);
    let nodes = per_host.len();
    let library = mpi::environment::library_version()
        .map(|v| {
            // "Open MPI v4.1.4, package: ..., ident: ..." (NUL-padded): its first part.
            v.split([',', '\n', '\0'])
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
        .unwrap_or_else(|_| "unknown".into());
    Job {
        ranks,
        hosts,
        ranks_per_node,
        nodes,
        library,
        settings: settings(),
    }
}

/// The MPI settings that change what is measured: Open MPI's transport and collective MCA
/// parameters (`mpirun --mca btl self,tcp` reaches the ranks as `OMPI_MCA_btl`), MPICH's
/// control variables.
fn settings() -> BTreeMap<String, String> {
    const KEEP: [&str; 5] = ["btl", "pml", "mtl", "coll", "osc"];
    std::env::vars()
        .filter_map(|(k, v)| {
            if let Some(p) = k.strip_prefix("OMPI_MCA_") {
                KEEP.iter()
                    .any(|keep| p.starts_with(keep))
                    .then(|| (p.to_owned(), v))
            } else {
                k.starts_with("MPIR_CVAR_").then_some((k, v))
            }
        })
        .collect()
}

/// What rank 0's file already holds: the median of each record, by id. A file being
/// resumed must come from a job of the same size.
fn resumed(file: Option<&(dyn RecordSink + '_)>, ranks: usize) -> Result<HashMap<String, f64>> {
    let mut resumed = HashMap::new();
    let Some(file) = file else {
        return Ok(resumed);
    };
    for r in file.kept().iter().filter(|r| r.device == DEVICE) {
        let theirs = r.extra.ranks;
        if theirs != Some(ranks) {
            return Err(Error::invalid(
                file.path().display().to_string(),
                format!(
                    "its record `{}` was measured by a job of {} ranks, and this job has \
                     {ranks}: resume it with the same number of ranks, or write to another \
                     --out",
                    r.id,
                    theirs.map_or_else(|| "an unknown number of".into(), |p| p.to_string())
                ),
            ));
        }
        resumed.insert(r.id.clone(), median(&r.samples_s));
    }
    Ok(resumed)
}

fn record(
    measured: Measured,
    precision: RecordPrecision,
    bytes: u64,
    samples: Vec<f64>,
    extra: Extra,
) -> Record {
    let mut r = Record::new(
        measured,
        precision,
        DEVICE,
        1,
        samples,
        0.0,
        bytes as f64,
        Env::capture(),
    );
    r.extra = extra;
    r
}

/// The shape of an allreduce of `bytes` over `ranks` MPI ranks.
fn allreduce_shape(bytes: u64, algorithm: AllreduceAlgorithm, ranks: usize) -> Measured {
    Measured::CommAllreduce(AllreduceShape {
        bytes,
        algorithm: algorithm.name().into(),
        ranks: Some(ranks),
        gpus: None,
    })
}

/// Whether rank 0 of `comm` already has `id`: decided there and broadcast.
fn skip(comm: &SimpleCommunicator, sink: &mut Sink, id: &str) -> bool {
    let mut s = u8::from(comm.rank() == 0 && sink.has(id));
    comm.process_at_rank(0).broadcast_into(&mut s);
    if s != 0 && comm.rank() == 0 {
        sink.skipped += 1;
    }
    s != 0
}

/// Times `run` on every rank of `comm` by `protocol`, in lockstep. Rank 0 decides when the
/// warm-up ends, how many runs a sample batches (enough to span the timer's resolution
/// `floor`) and when sampling stops, and broadcasts each decision. Every sample starts
/// after a barrier; with `slowest`, a sample is the slowest rank's time per run, else rank
/// 0's. The samples come back on rank 0 (empty elsewhere).
fn timed(
    comm: &SimpleCommunicator,
    protocol: &Protocol,
    floor: f64,
    slowest: bool,
    mut run: impl FnMut(),
) -> Vec<f64> {
    let root = comm.process_at_rank(0);
    let is_root = comm.rank() == 0;
    comm.barrier();
    let start = Instant::now();
    let mut runs = 0u32;
    loop {
        run();
        runs += 1;
        let mut done = u8::from(is_root && start.elapsed() >= protocol.warmup);
        root.broadcast_into(&mut done);
        if done != 0 {
            break;
        }
    }
    let per_run = start.elapsed().as_secs_f64() / f64::from(runs);
    let mut batch = if per_run >= floor || per_run <= 0.0 {
        1u32
    } else {
        (floor / per_run).ceil().min(1e6) as u32
    };
    root.broadcast_into(&mut batch);
    let mut samples = Vec::new();
    let sampling = Instant::now();
    loop {
        comm.barrier();
        let t = Instant::now();
        for _ in 0..batch {
            run();
        }
        let mine = t.elapsed().as_secs_f64() / f64::from(batch);
        let sample = if slowest {
            let mut most = 0.0f64;
            if is_root {
                root.reduce_into_root(&mine, &mut most, SystemOperation::max());
            } else {
                root.reduce_into(&mine, SystemOperation::max());
            }
            most
        } else {
            mine
        };
        let mut stop = 0u8;
        if is_root {
            samples.push(sample);
            let n = samples.len();
            let elapsed = sampling.elapsed();
            let enough = n >= protocol.min_samples && elapsed >= protocol.min_time;
            let too_long = n >= protocol.min_samples && elapsed >= protocol.max_time;
            stop = u8::from(enough || too_long || n >= protocol.max_samples.max(1));
        }
        root.broadcast_into(&mut stop);
        if stop != 0 {
            break;
        }
    }
    samples
}

/// Rank 0's partners: one per level, or every other rank.
fn partners(hosts: &[String], pairs: Pairs) -> Vec<usize> {
    match pairs {
        Pairs::All => (1..hosts.len()).collect(),
        Pairs::Levels => {
            let same = (1..hosts.len()).find(|&r| hosts[r] == hosts[0]);
            let other = (1..hosts.len()).find(|&r| hosts[r] != hosts[0]);
            same.into_iter().chain(other).collect()
        }
    }
}

fn pingpong(
    world: &SimpleCommunicator,
    plan: &CommPlan,
    job: &Job,
    floor: f64,
    sink: &mut Sink,
) -> Result<()> {
    let (rank, _) = place(world);
    let largest = plan.sizes.iter().copied().max().unwrap_or(1) as usize;
    let send = vec![1u8; largest];
    let mut recv = vec![0u8; largest];
    for partner in partners(&job.hosts, plan.pairs) {
        let color = if rank == 0 || rank == partner {
            Color::with_value(0)
        } else {
            Color::undefined()
        };
        if let Some(pair) = world.split_by_color(color) {
            let extra = Extra {
                same_host: Some(job.hosts[0] == job.hosts[partner]),
                pair_hosts: vec![job.hosts[0].clone(), job.hosts[partner].clone()],
                ..job.extra()
            };
            round_trips(&pair, plan, floor, sink, partner, &extra, &send, &mut recv)?;
        }
        world.barrier();
    }
    // The reduction kernel of the allreduce algorithms, on rank 0 alone.
    if rank == 0 {
        let mut elements: Vec<usize> = plan
            .sizes
            .iter()
            .map(|&s| (s as usize / 4).max(1))
            .collect();
        elements.dedup();
        let largest = elements.iter().copied().max().unwrap_or(1);
        let mut a = vec![0.0f32; largest];
        let b = vec![0.0f32; largest];
        for n in elements {
            let shape = Measured::CommReduce(ReduceShape {
                bytes: n as u64 * 4,
                ranks: job.ranks,
            });
            let id = record_id(&shape, RecordPrecision::Fp32, 1, DEVICE);
            if sink.has(&id) {
                sink.skipped += 1;
                continue;
            }
            let samples = plan.protocol.measure(|| add(&mut a[..n], &b[..n]));
            sink.push(record(
                shape,
                RecordPrecision::Fp32,
                n as u64 * 4,
                samples,
                job.extra(),
            ))?;
        }
    }
    world.barrier();
    Ok(())
}

/// The parametrised round trips of one pair (rank 0 of `pair` is the client).
#[allow(clippy::too_many_arguments)]
fn round_trips(
    pair: &SimpleCommunicator,
    plan: &CommPlan,
    floor: f64,
    sink: &mut Sink,
    partner: usize,
    extra: &Extra,
    send: &[u8],
    recv: &mut [u8],
) -> Result<()> {
    let client = pair.rank() == 0;
    let peer = pair.process_at_rank(if client { 1 } else { 0 });
    let n = plan.train;
    for &bytes in &plan.sizes {
        let s = bytes as usize;
        let mut pingpong_s = 0.0;
        for (messages, delayed) in [(1, false), (n, false), (n, true)] {
            let shape = Measured::CommPrtt(PrttShape {
                bytes,
                messages,
                delayed,
                pair: [0, partner],
            });
            let id = record_id(&shape, RecordPrecision::Bytes, 1, DEVICE);
            if skip(pair, sink, &id) {
                if messages == 1 {
                    pingpong_s = sink.resumed.get(&id).copied().unwrap_or(0.0);
                }
                continue;
            }
            let delay = if delayed { pingpong_s } else { 0.0 };
            let samples = timed(pair, &plan.protocol, floor, false, || {
                if client {
                    for i in 0..messages {
                        peer.send(&send[..s]);
                        if i + 1 < messages {
                            spin(delay);
                        }
                    }
                    peer.receive_into(&mut recv[..s]);
                } else {
                    for _ in 0..messages {
                        peer.receive_into(&mut recv[..s]);
                    }
                    peer.send(&send[..s]);
                }
            });
            if client {
                if messages == 1 {
                    pingpong_s = median(&samples);
                }
                let extra = Extra {
                    delay_s: Some(delay),
                    ..extra.clone()
                };
                sink.push(record(shape, RecordPrecision::Bytes, bytes, samples, extra))?;
            }
        }
        // Both ranks send and receive at once: the step of every allreduce algorithm.
        let shape = Measured::CommExchange(ExchangeShape {
            bytes,
            pair: [0, partner],
        });
        let id = record_id(&shape, RecordPrecision::Bytes, 1, DEVICE);
        if skip(pair, sink, &id) {
            continue;
        }
        let mut fresh = vec![0u8; s];
        let mut round = 0u8;
        let samples = timed(pair, &plan.protocol, floor, true, || {
            round = round.wrapping_add(1);
            fresh.fill(round);
            mpi::point_to_point::send_receive_into(&fresh[..], &peer, &mut recv[..s], &peer);
        });
        if client {
            sink.push(record(
                shape,
                RecordPrecision::Bytes,
                bytes,
                samples,
                extra.clone(),
            ))?;
        }
    }
    Ok(())
}

/// Busy-waits `seconds` (a sleeping sender would measure the scheduler, not its overhead).
fn spin(seconds: f64) {
    if seconds <= 0.0 {
        return;
    }
    let t = Instant::now();
    while t.elapsed().as_secs_f64() < seconds {
        std::hint::spin_loop();
    }
}

/// `a += b`: the reduction every allreduce algorithm here runs.
fn add(a: &mut [f32], b: &[f32]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += *y;
    }
}

/// Buffers of one rank's allreduce.
struct Buffers {
    data: Vec<f32>,
    recv: Vec<f32>,
    tmp: Vec<f32>,
    /// The tree's segments from children: one slot per tree and child.
    slots: Vec<f32>,
}

/// Elements of one slot of [`Buffers::slots`]: a tree segment, rounded up.
const SLOT: usize = TREE_SEGMENT_BYTES as usize / 4 + 2;

fn allreduce(
    world: &SimpleCommunicator,
    plan: &CommPlan,
    job: &Job,
    floor: f64,
    sink: &mut Sink,
    notes: &mut Vec<String>,
    mut nccl: Option<&mut NcclRank>,
) -> Result<()> {
    let p = job.ranks;
    let largest = plan.sizes.iter().copied().max().unwrap_or(4) as usize / 4;
    let mut buf = Buffers {
        data: vec![0.0; largest],
        recv: vec![0.0; largest],
        tmp: vec![0.0; largest],
        slots: vec![0.0; 4 * SLOT],
    };
    for &algorithm in &plan.algorithms {
        if algorithm == AllreduceAlgorithm::Nccl {
            let gpu = nccl
                .as_deref_mut()
                .ok_or_else(|| Error::invalid("allreduce nccl", "the NCCL rank is not set up"))?;
            nccl_allreduce(world, plan, job, floor, sink, gpu)?;
            continue;
        }
        if algorithm.needs_power_of_two() && !p.is_power_of_two() {
            if world.rank() == 0 {
                notes.push(format!(
                    "{algorithm} skipped: it needs a power-of-two number of ranks, not {p}"
                ));
            }
            continue;
        }
        for &bytes in &plan.sizes {
            let count = bytes as usize / 4;
            let shape = allreduce_shape(bytes, algorithm, p);
            let id = record_id(&shape, RecordPrecision::Fp32, 1, DEVICE);
            if skip(world, sink, &id) {
                continue;
            }
            check(world, algorithm, count, &mut buf)?;
            buf.data[..count].fill(0.0);
            let samples = timed(world, &plan.protocol, floor, true, || {
                reduce_all(world, algorithm, count, &mut buf);
            });
            if world.rank() == 0 {
                let extra = Extra {
                    algorithm: Some(algorithm.name().into()),
                    ..job.extra()
                };
                sink.push(record(shape, RecordPrecision::Fp32, bytes, samples, extra))?;
            }
        }
    }
    Ok(())
}

/// `mine` where every rank succeeded; else an error on every rank (its own, or one that
/// points at the others'), so no rank goes on into a collective the others left.
fn agree<T>(world: &SimpleCommunicator, what: &str, mine: Result<T>) -> Result<T> {
    let mut failed = 0u8;
    world.all_reduce_into(
        &u8::from(mine.is_err()),
        &mut failed,
        SystemOperation::max(),
    );
    match mine {
        Ok(_) if failed != 0 => Err(Error::invalid(
            what,
            "another rank failed (its error is printed above)",
        )),
        other => other,
    }
}

/// This rank's GPU in an NCCL communicator of every rank: each rank opens GPU `i`, `i`
/// its index among the ranks of its host; rank 0 makes the communicator's unique id and
/// MPI broadcasts it; every rank joins and reserves buffers for the largest size.
fn nccl_rank(world: &SimpleCommunicator, plan: &CommPlan, job: &Job) -> Result<NcclRank> {
    let rank = world.rank() as usize;
    let local = job.hosts[..rank]
        .iter()
        .filter(|h| **h == job.hosts[rank])
        .count();
    let mut gpu = agree(world, "nccl", NcclRank::open(local))?;
    let mut id = [0u8; 128];
    let made = if rank == 0 {
        NcclRank::unique_id().map(|v| id = v)
    } else {
        Ok(())
    };
    agree(world, "nccl", made)?;
    world.process_at_rank(0).broadcast_into(&mut id[..]);
    agree(world, "nccl", gpu.join(rank, job.ranks, &id))?;
    let largest = plan.sizes.iter().copied().max().unwrap_or(4) as usize / 4;
    agree(world, "nccl", gpu.reserve(largest))?;
    Ok(gpu)
}

/// The allreduce through NCCL on every rank's GPU ([`nccl_rank`]): each size is checked
/// against the exact sum, then timed as the host sees it (the call and a stream
/// synchronisation; the slowest rank's time).
fn nccl_allreduce(
    world: &SimpleCommunicator,
    plan: &CommPlan,
    job: &Job,
    floor: f64,
    sink: &mut Sink,
    gpu: &mut NcclRank,
) -> Result<()> {
    let rank = world.rank() as usize;
    let p = job.ranks;
    let version = agree(world, "nccl", gpu.nccl_version())?;
    for &bytes in &plan.sizes {
        let count = bytes as usize / 4;
        let shape = allreduce_shape(bytes, AllreduceAlgorithm::Nccl, p);
        let id = record_id(&shape, RecordPrecision::Fp32, 1, DEVICE);
        if skip(world, sink, &id) {
            continue;
        }
        // Small integers: every partial sum is exact in FP32.
        let value = |r: usize, i: usize| (r + 1) as f32 + (i % 3) as f32;
        let mine: Vec<f32> = (0..count).map(|i| value(rank, i)).collect();
        let checked = gpu.reduce(&mine).and_then(|sum| {
            match (0..count).find(|&i| sum[i] != (0..p).map(|r| value(r, i)).sum::<f32>()) {
                None => Ok(()),
                Some(i) => Err(Error::invalid(
                    "allreduce nccl",
                    format!("wrong sum of {count} elements on {p} ranks (this rank: element {i})"),
                )),
            }
        });
        agree(world, "allreduce nccl", checked)?;
        let mut failure = None;
        let samples = timed(world, &plan.protocol, floor, true, || {
            if failure.is_none()
                && let Err(e) = gpu.allreduce(count)
            {
                failure = Some(e);
            }
        });
        agree(world, "allreduce nccl", failure.map_or(Ok(()), Err))?;
        if rank == 0 {
            let extra = Extra {
                algorithm: Some("nccl".into()),
                library: Some("nccl".into()),
                nccl_version: Some(version.clone()),
                nccl_settings: nccl_settings(),
                ..job.extra()
            };
            let mut r = record(shape, RecordPrecision::Fp32, bytes, samples, extra);
            r.env.gpu = Some(gpu.gpu());
            sink.push(r)?;
        }
    }
    Ok(())
}

/// The `NCCL_*` environment variables of this process (e.g. `NCCL_ALGO`, `NCCL_PROTO`),
/// which decide how NCCL runs.
fn nccl_settings() -> BTreeMap<String, String> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect()
}

/// Runs `algorithm` once on known values and checks the sum on every rank; a wrong sum
/// anywhere is an error everywhere.
fn check(
    world: &SimpleCommunicator,
    algorithm: AllreduceAlgorithm,
    count: usize,
    buf: &mut Buffers,
) -> Result<()> {
    let rank = world.rank();
    let p = world.size();
    // Small integers: every partial sum is exact in FP32.
    let value = |r: i32, i: usize| (r + 1) as f32 + (i % 3) as f32;
    for (i, x) in buf.data[..count].iter_mut().enumerate() {
        *x = value(rank, i);
    }
    reduce_all(world, algorithm, count, buf);
    let result = if algorithm == AllreduceAlgorithm::Mpi {
        &buf.recv[..count]
    } else {
        &buf.data[..count]
    };
    let wrong = result
        .iter()
        .enumerate()
        .position(|(i, &x)| x != (0..p).map(|r| value(r, i)).sum::<f32>());
    let mut anywhere = 0u8;
    world.all_reduce_into(
        &u8::from(wrong.is_some()),
        &mut anywhere,
        SystemOperation::max(),
    );
    if anywhere != 0 {
        return Err(Error::invalid(
            format!("allreduce {algorithm}"),
            format!(
                "wrong sum of {count} elements on {p} ranks{}",
                wrong.map_or_else(String::new, |i| format!(" (this rank: element {i})"))
            ),
        ));
    }
    Ok(())
}

/// One allreduce of `count` elements of `buf.data` (`mpi`: into `buf.recv`).
fn reduce_all(
    world: &SimpleCommunicator,
    algorithm: AllreduceAlgorithm,
    count: usize,
    buf: &mut Buffers,
) {
    match algorithm {
        AllreduceAlgorithm::Mpi => world.all_reduce_into(
            &buf.data[..count],
            &mut buf.recv[..count],
            SystemOperation::sum(),
        ),
        AllreduceAlgorithm::Ring => ring(world, &mut buf.data[..count], &mut buf.tmp),
        AllreduceAlgorithm::Rhd => rhd(world, &mut buf.data[..count], &mut buf.tmp),
        AllreduceAlgorithm::Rd => rd(world, &mut buf.data[..count], &mut buf.tmp),
        AllreduceAlgorithm::Tree => tree(world, &mut buf.data[..count], &mut buf.slots),
        AllreduceAlgorithm::Nccl => {
            unreachable!("NCCL reduces GPU buffers: `allreduce` hands it to `nccl_allreduce`")
        }
    }
}

/// This rank and the number of ranks of `comm`.
fn place(comm: &SimpleCommunicator) -> (usize, usize) {
    (
        usize::try_from(comm.rank()).unwrap_or(0),
        usize::try_from(comm.size()).unwrap_or(1),
    )
}

/// The process of rank `r` of `comm`.
fn at(comm: &SimpleCommunicator, r: usize) -> mpi::topology::Process<'_> {
    comm.process_at_rank(i32::try_from(r).unwrap_or(i32::MAX))
}

/// Chunk `c` of `p` over `n` elements.
fn chunk(n: usize, p: usize, c: usize) -> std::ops::Range<usize> {
    c * n / p..(c + 1) * n / p
}

/// `data[send]` and `data[recv]`, two disjoint ranges, one shared and one mutable.
fn split(
    data: &mut [f32],
    send: std::ops::Range<usize>,
    recv: std::ops::Range<usize>,
) -> (&[f32], &mut [f32]) {
    if send.end <= recv.start {
        let (a, b) = data.split_at_mut(recv.start);
        (&a[send], &mut b[..recv.len()])
    } else {
        let (a, b) = data.split_at_mut(send.start);
        (&b[..send.len()], &mut a[recv])
    }
}

/// Ring allreduce: `p - 1` reduce-scatter steps, then `p - 1` all-gather steps, each
/// sending one chunk to the next rank and receiving one from the previous.
fn ring(world: &SimpleCommunicator, data: &mut [f32], tmp: &mut [f32]) {
    let (r, p) = place(world);
    let n = data.len();
    let next = at(world, (r + 1) % p);
    let prev = at(world, (r + p - 1) % p);
    for step in 0..p - 1 {
        let send = chunk(n, p, (r + p - step) % p);
        let recv = chunk(n, p, (r + p - step - 1) % p);
        let len = recv.len();
        mpi::point_to_point::send_receive_into(&data[send], &next, &mut tmp[..len], &prev);
        add(&mut data[recv], &tmp[..len]);
    }
    for step in 0..p - 1 {
        let send = chunk(n, p, (r + 1 + p - step) % p);
        let recv = chunk(n, p, (r + p - step) % p);
        let (s, d) = split(data, send, recv);
        mpi::point_to_point::send_receive_into(s, &next, d, &prev);
    }
}

/// Recursive halving-doubling (Rabenseifner): reduce-scatter by halving the vector with
/// partners `p/2, p/4, ..., 1` apart, then all-gather in the reverse order.
fn rhd(world: &SimpleCommunicator, data: &mut [f32], tmp: &mut [f32]) {
    let (r, p) = place(world);
    let mut range = 0..data.len();
    let mut path = Vec::new();
    let mut mask = p / 2;
    while mask >= 1 {
        let partner = at(world, r ^ mask);
        let mid = range.start + range.len() / 2;
        let (keep, give) = if r & mask == 0 {
            (range.start..mid, mid..range.end)
        } else {
            (mid..range.end, range.start..mid)
        };
        let len = keep.len();
        mpi::point_to_point::send_receive_into(&data[give], &partner, &mut tmp[..len], &partner);
        add(&mut data[keep.clone()], &tmp[..len]);
        path.push((mask, range));
        range = keep;
        mask /= 2;
    }
    while let Some((mask, parent)) = path.pop() {
        let partner = at(world, r ^ mask);
        let theirs = if range.start == parent.start {
            range.end..parent.end
        } else {
            parent.start..range.start
        };
        let (s, d) = split(data, range, theirs);
        mpi::point_to_point::send_receive_into(s, &partner, d, &partner);
        range = parent;
    }
}

/// Recursive doubling: exchange the whole vector with partners `1, 2, ..., p/2` apart,
/// adding what arrives.
fn rd(world: &SimpleCommunicator, data: &mut [f32], tmp: &mut [f32]) {
    let (r, p) = place(world);
    let n = data.len();
    let mut mask = 1;
    while mask < p {
        let partner = at(world, r ^ mask);
        mpi::point_to_point::send_receive_into(&data[..], &partner, &mut tmp[..n], &partner);
        add(data, &tmp[..n]);
        mask *= 2;
    }
}

/// The pipelined double binary tree (`DoubleTree`): each tree reduces and broadcasts
/// half the vector in segments, by the model's schedule, every round's messages in flight
/// at once; segments from children are added after the round.
fn tree(world: &SimpleCommunicator, data: &mut [f32], slots: &mut [f32]) {
    let (me, p) = place(world);
    let trees = DoubleTree::new(p);
    let (n, _) = segments_of(data.len() as f64 * 4.0);
    let (a, b) = data.split_at_mut(data.len() / 2);
    let mut segs = [segments(a, n), segments(b, n)];
    let lens: Vec<Vec<usize>> = segs
        .iter()
        .map(|v| v.iter().map(|s| s.len()).collect())
        .collect();
    let index = |round: usize, lag: usize| round.checked_sub(lag).filter(|&k| k < n);
    for round in 0..trees.rounds(n) {
        // Segments to add after the round: (tree, child slot, segment).
        let mut arriving = Vec::new();
        {
            let mut slot_iter = slots.chunks_mut(SLOT);
            let mut slot = [[None, None], [None, None]];
            for tree_slots in &mut slot {
                for s in tree_slots.iter_mut() {
                    *s = slot_iter.next();
                }
            }
            mpi::request::multiple_scope(12, |scope, requests| {
                for (t, (tree, segs)) in trees.trees.iter().zip(segs.iter_mut()).enumerate() {
                    let (h, d, top) = (tree.height(me), tree.depth(me), tree.top());
                    let up = tree.parent(me).and_then(|_| index(round, h));
                    let down_in = tree.parent(me).and_then(|_| index(round + 1, top + d));
                    let down_out = index(round, top + d);
                    let (into, [up_seg, out_seg]) = pick(segs, down_in, [up, down_out]);
                    let reduce = i32::try_from(2 * t).unwrap_or(0);
                    let bcast = reduce + 1;
                    for (c, &child) in tree.children(me).iter().enumerate() {
                        if let Some(k) = index(round, tree.height(child))
                            && let Some(buf) = slot[t][c].take()
                        {
                            let len = lens[t][k];
                            arriving.push((t, c, k, len));
                            requests.add(at(world, child).immediate_receive_into_with_tag(
                                scope,
                                &mut buf[..len],
                                reduce,
                            ));
                        }
                        if let Some(seg) = out_seg {
                            requests
                                .add(at(world, child).immediate_send_with_tag(scope, seg, bcast));
                        }
                    }
                    if let Some(parent) = tree.parent(me) {
                        if let Some(seg) = up_seg {
                            requests
                                .add(at(world, parent).immediate_send_with_tag(scope, seg, reduce));
                        }
                        if let Some(seg) = into {
                            requests.add(
                                at(world, parent)
                                    .immediate_receive_into_with_tag(scope, seg, bcast),
                            );
                        }
                    }
                }
                let mut done = Vec::new();
                requests.wait_all(&mut done);
            });
        }
        for (t, c, k, len) in arriving {
            let from = &slots[(2 * t + c) * SLOT..][..len];
            add(segs[t][k], from);
        }
    }
}

/// `v` cut into `n` segments as [`chunk`] cuts it.
fn segments(v: &mut [f32], n: usize) -> Vec<&mut [f32]> {
    let len = v.len();
    let mut out = Vec::with_capacity(n);
    let mut rest = v;
    for k in 0..n {
        let (seg, tail) = rest.split_at_mut(chunk(len, n, k).len());
        out.push(seg);
        rest = tail;
    }
    out
}

/// From `segs`, segment `write` to receive into and segments `read` to send.
fn pick<'s>(
    segs: &'s mut [&mut [f32]],
    write: Option<usize>,
    read: [Option<usize>; 2],
) -> (Option<&'s mut [f32]>, [Option<&'s [f32]>; 2]) {
    let mut into = None;
    let mut out = [None, None];
    for (i, s) in segs.iter_mut().enumerate() {
        if Some(i) == write {
            into = Some(&mut **s);
        } else {
            let shared: &'s [f32] = s;
            for (slot, want) in out.iter_mut().zip(read) {
                if want == Some(i) {
                    *slot = Some(shared);
                }
            }
        }
    }
    (into, out)
}

fn alltoall(
    world: &SimpleCommunicator,
    plan: &CommPlan,
    job: &Job,
    floor: f64,
    sink: &mut Sink,
) -> Result<()> {
    let p = job.ranks;
    let largest = plan.sizes.iter().copied().max().unwrap_or(1) as usize * p;
    let send = vec![1u8; largest];
    let mut recv = vec![0u8; largest];
    for &bytes in &plan.sizes {
        let total = bytes as usize * p;
        let shape = Measured::CommAlltoall(AlltoallShape { bytes, ranks: p });
        let id = record_id(&shape, RecordPrecision::Bytes, 1, DEVICE);
        if skip(world, sink, &id) {
            continue;
        }
        let samples = timed(world, &plan.protocol, floor, true, || {
            world.all_to_all_into(&send[..total], &mut recv[..total]);
        });
        if world.rank() == 0 {
            sink.push(record(
                shape,
                RecordPrecision::Bytes,
                bytes,
                samples,
                job.extra(),
            ))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_vector() {
        for (n, p) in [(10, 3), (7, 4), (3, 4), (1024, 2)] {
            let mut next = 0;
            for c in 0..p {
                let r = chunk(n, p, c);
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, n);
        }
    }

    #[test]
    fn split_gives_the_two_ranges() {
        let mut d: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let (s, r) = split(&mut d, 6..9, 1..3);
        assert_eq!(s, &[6.0, 7.0, 8.0]);
        assert_eq!(r, &mut [1.0, 2.0]);
        let (s, r) = split(&mut d, 0..2, 5..10);
        assert_eq!((s.len(), r.len()), (2, 5));
        // Empty chunks of a short vector.
        let (s, r) = split(&mut d, 0..0, 0..1);
        assert_eq!((s.len(), r.len()), (0, 1));
        let (s, r) = split(&mut d, 1..1, 0..1);
        assert_eq!((s.len(), r.len()), (0, 1));
    }

    #[test]
    fn level_pairs_take_one_rank_per_level() {
        let hosts: Vec<String> = ["a", "a", "b", "a", "b"]
            .iter()
            .map(|s| (*s).into())
            .collect();
        assert_eq!(partners(&hosts, Pairs::Levels), vec![1, 2]);
        assert_eq!(partners(&hosts, Pairs::All), vec![1, 2, 3, 4]);
        let one_host: Vec<String> = vec!["a".into(); 4];
        assert_eq!(partners(&one_host, Pairs::Levels), vec![1]);
    }
}
