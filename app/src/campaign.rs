//! Measurement campaigns: cases run on backends opened up front, records appended to a
//! file as each case completes, and a campaign resumed by one rule everywhere: a case whose
//! record id is in the file is done and skipped ([`RecordWriter`] keeps the ids, drops a torn
//! last line and a measurement cut short). [`Runner`] runs micro-kernel and workload cases
//! on the CPU and CUDA backends; [`Records`] is the same file and rule for the paths that
//! cannot run case by case on one backend: [`nccl`] across a node's GPUs, and [`comm()`], the
//! MPI campaign, whose ranks measure together while rank 0 writes through a [`Records`]
//! handed to `ridgeline_measure::comm` as a `record::Sink`. [`suite()`] plans the
//! micro-kernel suite to a budget and runs it; a [`Shard`] of a campaign is what a Slurm
//! array task measures (`crate::slurm`). Progress goes to an [`Observer`]: the command line draws bars, tests and
//! pipelines stay silent.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ridgeline_measure::comm::{self, CommPlan, CommRun, DdpPlan, DdpRun};
use ridgeline_measure::protocol::CacheState;
use ridgeline_measure::record::Sink;
use ridgeline_measure::{
    Backend, Case, NcclAllreduce, Protocol, Record, RecordWriter, nccl_allreduce, open_backend,
    suite,
};
use ridgeline_model::units::{ByteRate, FlopRate};

use crate::columns::Style;

/// A thread count: a number or every core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadCount {
    /// Every core available to the process.
    All,
    /// This many.
    N(usize),
}

/// Where a campaign runs and writes.
#[derive(Debug, Clone)]
pub struct CampaignSpec {
    /// Device: `cpu`, `cuda` or `cuda:N`.
    pub device: String,
    /// Thread counts (CPU only); `None` takes the campaign's default.
    pub threads: Option<Vec<ThreadCount>>,
    /// The records file, if any.
    pub out: Option<PathBuf>,
    /// Continue the campaign in `out`: keep its records and skip what they cover.
    pub resume: bool,
    /// The run protocol's settings given in place of the campaign's.
    pub protocol: ProtocolOverrides,
    /// Measure only this share of the cases: [`Shard`] `i` of `n`, as a Slurm array task
    /// does.
    pub shard: Option<Shard>,
    /// Opens the backend of a device at a thread count: [`open_backend`], or a stand-in in
    /// tests.
    pub open: Opener,
}

/// Opens the backend of a device (`cpu`, `cuda:N`) at a thread count.
pub type Opener = fn(&str, usize) -> ridgeline_measure::Result<Box<dyn Backend>>;

impl CampaignSpec {
    /// A campaign on `device` with its defaults, writing `out`.
    pub fn new(device: &str, out: Option<PathBuf>) -> CampaignSpec {
        CampaignSpec {
            device: device.to_owned(),
            threads: None,
            out,
            resume: false,
            protocol: ProtocolOverrides::default(),
            shard: None,
            open: open_backend,
        }
    }
}

/// A share of a campaign's cases: those whose place in it is `index` modulo `count`. The
/// shares of `0..count` split it whole, each case into one, and spread every kind of case
/// over them alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which share, from 0.
    pub index: usize,
    /// How many shares.
    pub count: usize,
}

impl Shard {
    /// The cases of this share, in order.
    pub fn of<T>(self, cases: Vec<T>) -> Vec<T> {
        cases
            .into_iter()
            .enumerate()
            .filter(|(i, _)| i % self.count == self.index)
            .map(|(_, c)| c)
            .collect()
    }
}

/// Only `shard`'s cases, where one is given.
fn share<T>(shard: Option<Shard>, cases: Vec<T>) -> Vec<T> {
    match shard {
        Some(s) => s.of(cases),
        None => cases,
    }
}

/// The run protocol's settings a user may override.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProtocolOverrides {
    /// Warm-up time per measurement.
    pub warmup: Option<Duration>,
    /// Fewest samples per measurement.
    pub min_samples: Option<usize>,
    /// Least sampling time per measurement.
    pub min_time: Option<Duration>,
    /// What the caches hold when each timed run starts (CPU).
    pub cache: Option<CacheState>,
}

impl ProtocolOverrides {
    /// `base` with the overrides given.
    pub fn apply(&self, base: Protocol) -> Protocol {
        let mut p = base;
        if let Some(w) = self.warmup {
            p.warmup = w;
        }
        if let Some(n) = self.min_samples {
            p.min_samples = n;
            p.max_samples = p.max_samples.max(p.min_samples);
        }
        if let Some(t) = self.min_time {
            p.min_time = t;
            p.max_time = p.max_time.max(t);
        }
        if let Some(c) = self.cache {
            p.cache = c;
        }
        p
    }
}

/// What a campaign reports as it goes. Every method has a silent default.
pub trait Observer {
    /// A line worth saying before the work goes on (a resumed file, a dropped line).
    fn notice(&self, _line: &str) {}
    /// A run of `total` steps begins.
    fn begin(&self, _total: u64) {}
    /// The next step measures `what`.
    fn step(&self, _what: &str) {}
    /// One step is done.
    fn advance(&self) {}
    /// The run is over.
    fn end(&self) {}
}

/// An observer that says nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Observer for Silent {}

/// Backends by thread count, opened up front so a device error comes before any work.
pub struct Backends {
    device: String,
    open: Vec<(usize, Box<dyn Backend>)>,
}

impl Backends {
    /// Opens the backends `spec` asks for (its thread counts, else `default`).
    pub fn new(spec: &CampaignSpec, default: &[ThreadCount]) -> Result<Backends> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if spec.device.starts_with("cuda") {
            // A GPU runs on one stream: thread counts do not apply.
            if spec.threads.is_some() {
                bail!("--threads applies to --device cpu; a GPU runs each kernel on one stream");
            }
            let backend = (spec.open)(&spec.device, 1)?;
            return Ok(Backends {
                device: spec.device.clone(),
                open: vec![(backend.threads(), backend)],
            });
        }
        let counts = spec.threads.as_deref().unwrap_or(default);
        let mut open: Vec<(usize, Box<dyn Backend>)> = Vec::new();
        for c in counts {
            let n = match c {
                ThreadCount::All => cores,
                ThreadCount::N(n) if *n > cores => bail!(
                    "--threads {n}: this process may use {cores} CPUs (its affinity mask and \
                     cgroup quota); give at most {cores}, or `all`"
                ),
                ThreadCount::N(n) => *n,
            };
            if !open.iter().any(|(t, _)| *t == n) {
                open.push((n, (spec.open)(&spec.device, n)?));
            }
        }
        Ok(Backends {
            device: spec.device.clone(),
            open,
        })
    }

    /// The device they run on.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The thread counts opened, in order.
    pub fn threads(&self) -> Vec<usize> {
        self.open.iter().map(|(t, _)| *t).collect()
    }

    /// The backend of `threads` (the first one when none has that count).
    pub fn get(&mut self, threads: usize) -> &mut dyn Backend {
        let i = self
            .open
            .iter()
            .position(|(t, _)| *t == threads)
            .unwrap_or(0);
        &mut *self.open[i].1
    }
}

/// `cases` (the same on every thread count) for each of `threads`, in order.
pub fn for_threads(threads: &[usize], cases: &[Case]) -> Vec<(usize, Case)> {
    threads
        .iter()
        .flat_map(|&t| cases.iter().map(move |c| (t, c.clone())))
        .collect()
}

/// Measures `cases` at each of the thread counts `spec` names (`default` unless it names
/// them) on the backends it opens, by `base` with the spec's overrides, into the spec's
/// records file (resumed by the one rule), telling `observer` the progress; the device
/// measured on, and what ran.
pub fn measure(
    spec: &CampaignSpec,
    default: &[ThreadCount],
    cases: &[Case],
    base: Protocol,
    observer: &dyn Observer,
) -> Result<(String, Ran)> {
    let backends = Backends::new(spec, default)?;
    let cases = share(spec.shard, for_threads(&backends.threads(), cases));
    let device = backends.device().to_owned();
    let records = Records::open(spec.out.as_deref(), spec.resume, observer)?;
    let ran = Runner::new(backends, records, observer).run(
        &cases,
        &spec.protocol.apply(base),
        1,
        None,
    )?;
    Ok((device, ran))
}

/// What [`Runner::run`] did: the new records, and how many cases were skipped (already in
/// the file) and left unrun (the deadline came first).
pub struct Ran {
    /// The records measured now.
    pub records: Vec<Record>,
    /// Cases already in the file.
    pub skipped: usize,
    /// Cases the deadline left unrun.
    pub unrun: usize,
    /// Cases the device declined, each with why ([`ridgeline_measure::Error::Declined`]):
    /// not measured, the others are.
    pub declined: Vec<String>,
}

/// A campaign's records file: resumed by the one rule, written case by case.
#[derive(Debug)]
pub struct Records {
    writer: Option<RecordWriter>,
}

impl Records {
    /// Opens `out` for a new or resumed campaign (nothing to open without a file); what a
    /// resume keeps and drops goes to `observer`.
    pub fn open(
        out: Option<&Path>,
        resume: bool,
        observer: &dyn Observer,
    ) -> ridgeline_measure::Result<Records> {
        let Some(path) = out else {
            return Ok(Records { writer: None });
        };
        let (writer, found) = RecordWriter::open(path, resume)?;
        if resume {
            observer.notice(&format!(
                "resuming {}: {} records kept",
                path.display(),
                found.records
            ));
            if let Some(line) = found.torn_line {
                observer.notice(&format!(
                    "warning: {}: line {line} was an interrupted write; it was dropped and its measurement runs again",
                    path.display()
                ));
            }
            if let Some((line, n)) = found.partial {
                observer.notice(&format!(
                    "warning: {}: the {n} records from line {line} on are a measurement cut short (layers without their step); they were dropped and it runs again whole",
                    path.display()
                ));
            }
        }
        Ok(Records {
            writer: Some(writer),
        })
    }

    /// No file: records are only returned.
    pub fn none() -> Records {
        Records { writer: None }
    }

    /// Whether the file already holds the record `id`.
    pub fn has(&self, id: &str) -> bool {
        self.writer.as_ref().is_some_and(|w| w.has(id))
    }

    /// Appends one case's records (all of them, or none on error).
    pub fn write(&mut self, records: &[Record]) -> ridgeline_measure::Result<()> {
        match self.writer.as_mut() {
            Some(w) => w.write(records),
            None => Ok(()),
        }
    }

    /// The file, for runners that take a [`Sink`] (none without a file).
    pub fn into_sink<'a>(self) -> Option<Box<dyn Sink + 'a>> {
        self.writer.map(|w| Box::new(w) as Box<dyn Sink>)
    }
}

/// Runs the MPI communication campaign `plan` (every rank calls this): rank 0 opens `out`
/// by the one resume rule, telling `observer` what a resume keeps and drops, and writes the
/// records as they are measured.
pub fn comm(
    plan: &CommPlan,
    out: Option<&Path>,
    resume: bool,
    observer: &dyn Observer,
) -> Result<CommRun> {
    Ok(comm::run(plan, &mut || {
        Ok(Records::open(out, resume, observer)?.into_sink())
    })?)
}

/// Runs the data-parallel training `plan` in an MPI job (every rank calls this; rank 0
/// appends the records to `out`, opened by the one resume rule).
pub fn ddp(
    plan: &DdpPlan,
    out: Option<&Path>,
    resume: bool,
    observer: &dyn Observer,
) -> Result<DdpRun> {
    Ok(comm::ddp(plan, &mut || {
        Ok(Records::open(out, resume, observer)?.into_sink())
    })?)
}

/// Runs NCCL allreduce `cases` across the node's GPUs by `protocol` into `out` (opened by
/// the one resume rule), skipping the sizes it already holds.
pub fn nccl(
    cases: &[NcclAllreduce],
    out: Option<&Path>,
    resume: bool,
    protocol: &Protocol,
    observer: &dyn Observer,
) -> Result<Ran> {
    for c in cases {
        c.check()?;
    }
    let mut file = Records::open(out, resume, observer)?;
    let done: Vec<String> = cases
        .iter()
        .map(NcclAllreduce::id)
        .filter(|id| file.has(id))
        .collect();
    let skip = |id: &str| done.iter().any(|d| d == id);
    let mut ran = Ran {
        records: Vec::new(),
        skipped: done.len(),
        unrun: 0,
        declined: Vec::new(),
    };
    nccl_allreduce(cases, protocol, &skip, &mut |r| {
        file.write(std::slice::from_ref(&r))?;
        ran.records.push(r);
        Ok(())
    })?;
    Ok(ran)
}

/// Micro-kernel and workload cases run on backends into a records file.
pub struct Runner<'o> {
    /// The backends, by thread count.
    pub backends: Backends,
    /// The records file.
    pub records: Records,
    observer: &'o dyn Observer,
}

impl<'o> Runner<'o> {
    /// A runner of `backends` into `records`.
    pub fn new(backends: Backends, records: Records, observer: &'o dyn Observer) -> Runner<'o> {
        Runner {
            backends,
            records,
            observer,
        }
    }

    /// Opens the backends and then the records file of `spec`: a device error comes before
    /// the file is touched.
    pub fn open(
        spec: &CampaignSpec,
        default: &[ThreadCount],
        observer: &'o dyn Observer,
    ) -> Result<Runner<'o>> {
        let backends = Backends::new(spec, default)?;
        let records = Records::open(spec.out.as_deref(), spec.resume, observer)?;
        Ok(Runner {
            backends,
            records,
            observer,
        })
    }

    /// Measures `cases` (each on the backend of its thread count) in order, skipping those
    /// already in the file, writing each case's records as it completes, and stops before a
    /// case that would start past `deadline`. With `passes` above one, every case is measured
    /// once per pass over the whole list and its samples pooled into one record, written at
    /// its last pass: a slow spell of a shared machine then moves every case a little rather
    /// than the cases it happens to hit a lot. Cut short by the deadline, a case keeps the
    /// passes it had.
    pub fn run(
        &mut self,
        cases: &[(usize, Case)],
        protocol: &Protocol,
        passes: usize,
        deadline: Option<Instant>,
    ) -> Result<Ran> {
        let passes = passes.max(1);
        let bar = self.observer;
        bar.begin((cases.len() * passes) as u64);
        let mut ran = Ran {
            records: Vec::new(),
            skipped: 0,
            unrun: 0,
            declined: Vec::new(),
        };
        // Each case's records from the passes before its last, pooled, until written.
        let mut pooled: Vec<Option<Vec<Record>>> = vec![None; cases.len()];
        let mut done = vec![false; cases.len()];
        'passes: for pass in 1..=passes {
            for (i, (threads, case)) in cases.iter().enumerate() {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break 'passes;
                }
                let backend = self.backends.get(*threads);
                let id = case.id(backend)?;
                if self.records.has(&id) {
                    if !done[i] {
                        done[i] = true;
                        ran.skipped += 1;
                    }
                    bar.advance();
                    continue;
                }
                bar.step(&format!("{} on {threads} thread(s)", case.describe()));
                let mut records = match case.run(backend, protocol) {
                    Err(e @ ridgeline_measure::Error::Declined { .. }) => {
                        let why = format!("{}: {e}", case.describe());
                        bar.notice(&format!("not measured: {why}"));
                        ran.declined.push(why);
                        done[i] = true;
                        bar.advance();
                        continue;
                    }
                    r => r.with_context(|| format!("measuring {}", case.describe()))?,
                };
                if let Some(before) = pooled[i].take() {
                    pool(&mut records, before);
                }
                pooled[i] = Some(records);
                bar.advance();
                if pass == passes {
                    done[i] = true;
                    write_case(&mut self.records, &mut ran, pooled[i].take())?;
                }
            }
        }
        bar.end();
        for (i, records) in pooled.into_iter().enumerate() {
            if records.is_some() {
                done[i] = true;
                write_case(&mut self.records, &mut ran, records)?;
            }
        }
        ran.unrun = done.iter().filter(|d| !**d).count();
        Ok(ran)
    }
}

/// The standard micro-kernel suite of `spec` (its thread counts, else `default`), planned to
/// `budget` from a quick probe of the machine; the plan goes to `observer` before the run.
/// Time to spare is spent sampling every case longer, in passes over the whole suite.
pub fn suite(
    spec: &CampaignSpec,
    budget: Duration,
    default: &[ThreadCount],
    observer: &dyn Observer,
) -> Result<Ran> {
    if spec.out.is_none() {
        bail!(
            "measure suite writes a campaign of records: give --out FILE (and --resume to continue one)"
        );
    }
    let mut backends = Backends::new(spec, default)?;
    let protocol = spec.protocol.apply(suite::PROTOCOL);
    let threads = backends.threads();
    let records = Records::open(spec.out.as_deref(), spec.resume, observer)?;
    let rates = suite::probe(backends.get(threads[0]))?;
    let gpu = backends.get(threads[0]).env().gpu;
    let candidates = match &gpu {
        Some(g) => {
            observer.notice(&format!("measure suite: {} ({})", g.name, spec.device));
            suite::standard_gpu(g.l2_bytes.unwrap_or(0) as usize)?
        }
        None => suite::standard(&threads)?,
    };
    let candidates = share(spec.shard, candidates);
    let plan = {
        let backends = &backends;
        let records = &records;
        suite::plan(candidates, &rates, &protocol, budget, |t, case| {
            let Some((_, backend)) = backends.open.iter().find(|(n, _)| *n == t) else {
                return Ok(false);
            };
            Ok(case.id(&**backend).is_ok_and(|id| records.has(&id)))
        })?
    };
    let s = Style::Human;
    observer.notice(&format!(
        "measure suite: {} cases in about {} of the {} budget (probe: {} FP32 GEMM, {} triad on {} threads)",
        plan.run.len(),
        humantime::format_duration(Duration::from_secs(plan.estimate_s().ceil() as u64)),
        humantime::format_duration(budget),
        s.flop_rate(FlopRate::new(rates.flops)),
        s.byte_rate(ByteRate::new(rates.bytes)),
        rates.cores
    ));
    for line in plan.summary() {
        observer.notice(&format!("  {line}"));
    }
    if plan.already > 0 {
        observer.notice(&format!("  already recorded: {} cases", plan.already));
    }
    if !plan.left_out.is_empty() {
        observer.notice(
            "left out for lack of time (raise --budget, or --resume later with a larger one):",
        );
        for line in plan.left_out_summary() {
            observer.notice(&format!("  {line}"));
        }
    }
    // Every case fits with time to spare: sample each longer, in passes over the whole
    // suite (pooled), within the budget. A median of more samples rides out more of a
    // shared machine's slow spells, and samples spread over the run meet a spell of a
    // minute or two in every case a little rather than in the cases it overlaps wholly.
    let spare = budget.as_secs_f64() / plan.estimate_s().max(1e-9);
    let (protocol, passes) = if plan.left_out.is_empty() && spare > 1.0 {
        let f = spare.min(suite::MAX_SAMPLING_SCALE);
        let passes = suite::passes(f);
        let each = f / passes as f64;
        observer.notice(&format!(
            "  budget to spare: each case samples {f:.1}x longer, in {passes} pass(es) over the suite"
        ));
        let p = Protocol {
            min_time: protocol.min_time.mul_f64(each),
            max_time: protocol.max_time.mul_f64(each),
            min_samples: (protocol.min_samples as f64 * each).ceil() as usize,
            max_samples: (protocol.max_samples as f64 * each).ceil() as usize,
            ..protocol
        };
        (p, passes)
    } else {
        (protocol, 1)
    };
    let cases: Vec<(usize, Case)> = plan.run.into_iter().map(|p| (p.threads, p.case)).collect();
    // Past the budget by a quarter, stop: the estimates are rough.
    let deadline = Instant::now() + budget + budget / 4;
    let ran =
        Runner::new(backends, records, observer).run(&cases, &protocol, passes, Some(deadline))?;
    if ran.unrun > 0 {
        observer.notice(&format!(
            "stopped at the budget with {} cases not run; --resume with a larger --budget runs them",
            ran.unrun
        ));
    }
    Ok(ran)
}

/// The protocol of full training steps: `steps` of them after the executor's warm-up step.
pub fn steps_protocol(steps: usize) -> Protocol {
    Protocol {
        warmup: Duration::ZERO,
        min_samples: steps,
        min_time: Duration::ZERO,
        max_samples: steps,
        max_time: Duration::MAX,
        cache: CacheState::Warm,
    }
}

/// Puts `before`'s samples (earlier passes of the same case) ahead of each record's own.
fn pool(records: &mut [Record], before: Vec<Record>) {
    for earlier in before {
        if let Some(r) = records.iter_mut().find(|r| r.id == earlier.id) {
            let mut samples = earlier.samples_s;
            samples.append(&mut r.samples_s);
            r.samples_s = samples;
        }
    }
}

fn write_case(file: &mut Records, ran: &mut Ran, records: Option<Vec<Record>>) -> Result<()> {
    let records = records.unwrap_or_default();
    file.write(&records)?;
    ran.records.extend(records);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ridgeline_measure::{Format, GemmCase};

    fn gemm(n: usize) -> (usize, Case) {
        let format = Format::Fp32;
        (
            1,
            Case::Gemm(GemmCase {
                m: n,
                n,
                k: n,
                format,
            }),
        )
    }

    fn two_samples() -> Protocol {
        Protocol {
            min_samples: 2,
            max_samples: 2,
            ..Protocol::quick()
        }
    }

    fn cpu(records: Records) -> Runner<'static> {
        Runner {
            backends: Backends {
                device: "cpu".into(),
                open: vec![(1, open_backend("cpu", 1).unwrap())],
            },
            records,
            observer: &Silent,
        }
    }

    fn file(path: &std::path::Path, resume: bool) -> Records {
        Records::open(Some(path), resume, &Silent).unwrap()
    }

    /// The CPU backend, but declining every GEMM of `m` = 32, as cuDNN declines a
    /// convolution it runs no algorithm for.
    struct Declining(Box<dyn Backend>);

    impl Backend for Declining {
        fn device(&self) -> ridgeline_measure::Device {
            self.0.device()
        }
        fn threads(&self) -> usize {
            self.0.threads()
        }
        fn env(&self) -> ridgeline_measure::Env {
            self.0.env()
        }
        fn gemm(&mut self, c: &GemmCase, p: &Protocol) -> ridgeline_measure::Result<Vec<f64>> {
            if c.m == 32 {
                return Err(ridgeline_measure::Error::Declined {
                    device: "cpu".into(),
                    message: "no algorithm for this one".into(),
                });
            }
            self.0.gemm(c, p)
        }
        fn conv(
            &mut self,
            c: &ridgeline_measure::ConvCase,
            pass: ridgeline_measure::ConvPass,
            p: &Protocol,
        ) -> ridgeline_measure::Result<Vec<f64>> {
            self.0.conv(c, pass, p)
        }
        fn stream(
            &mut self,
            k: ridgeline_measure::StreamKernel,
            elements: usize,
            p: &Protocol,
        ) -> ridgeline_measure::Result<Vec<f64>> {
            self.0.stream(k, elements, p)
        }
        fn op(
            &mut self,
            c: &ridgeline_measure::OpCase,
            pass: ridgeline_measure::Pass,
            p: &Protocol,
        ) -> ridgeline_measure::Result<Vec<f64>> {
            self.0.op(c, pass, p)
        }
        fn workload(
            &mut self,
            graph: &ridgeline_model::graph::Graph,
            batch: usize,
            precision: ridgeline_model::precision::Precision,
            p: &Protocol,
        ) -> ridgeline_measure::Result<ridgeline_measure::WorkloadRun> {
            self.0.workload(graph, batch, precision, p)
        }
    }

    /// A case the device declines is listed and left out; the cases after it are measured,
    /// and a second run on the file tries it again (it has no record).
    #[test]
    fn a_declined_case_is_listed_and_the_others_measured() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let runner = |records| Runner {
            backends: Backends {
                device: "cpu".into(),
                open: vec![(
                    1,
                    Box::new(Declining(open_backend("cpu", 1).unwrap())) as Box<dyn Backend>,
                )],
            },
            records,
            observer: &Silent,
        };
        let cases = [gemm(16), gemm(32), gemm(48)];
        let ran = runner(file(&path, false))
            .run(&cases, &two_samples(), 1, None)
            .unwrap();
        assert_eq!(ran.records.len(), 2);
        assert_eq!(ran.declined.len(), 1, "{:?}", ran.declined);
        assert!(ran.declined[0].contains("no algorithm for this one"));
        assert!(ran.declined[0].contains("32"), "{}", ran.declined[0]);
        assert_eq!(ran.unrun, 0);
        let ran = runner(file(&path, true))
            .run(&cases, &two_samples(), 1, None)
            .unwrap();
        assert_eq!(
            (ran.records.len(), ran.skipped, ran.declined.len()),
            (0, 2, 1)
        );
    }

    #[test]
    fn passes_pool_each_case_into_one_record_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let p = two_samples();
        let cases = [gemm(16), gemm(32)];
        let ran = cpu(file(&path, false)).run(&cases, &p, 3, None).unwrap();
        assert_eq!((ran.skipped, ran.unrun), (0, 0));
        assert_eq!(ran.records.len(), 2);
        assert!(
            ran.records.iter().all(|r| r.samples_s.len() == 6),
            "three passes of two"
        );
        let lines = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            lines.lines().count(),
            2,
            "one record per case, no duplicate id"
        );
        // Run again on the same file: both are done.
        let ran = cpu(file(&path, true)).run(&cases, &p, 3, None).unwrap();
        assert_eq!((ran.records.len(), ran.skipped, ran.unrun), (0, 2, 0));
    }

    #[test]
    fn shares_split_the_cases_whole() {
        let cases: Vec<usize> = (0..10).collect();
        let mut all: Vec<usize> = (0..3)
            .flat_map(|index| Shard { index, count: 3 }.of(cases.clone()))
            .collect();
        assert_eq!(Shard { index: 1, count: 3 }.of(cases.clone()), [1, 4, 7]);
        all.sort_unstable();
        assert_eq!(all, cases);
    }

    #[test]
    fn a_deadline_keeps_the_passes_a_case_had() {
        let p = two_samples();
        let cases = [gemm(16), gemm(32)];
        let ran = cpu(Records::none())
            .run(&cases, &p, 2, Some(Instant::now()))
            .unwrap();
        assert_eq!((ran.records.len(), ran.unrun), (0, 2));
    }

    #[test]
    fn pooling_puts_earlier_samples_first_by_id() {
        let p = two_samples();
        let mut b = cpu(Records::none());
        let case = gemm(16).1;
        let before = case.run(b.backends.get(1), &p).unwrap();
        let mut after = case.run(b.backends.get(1), &p).unwrap();
        let expected: Vec<f64> = before[0]
            .samples_s
            .iter()
            .chain(&after[0].samples_s)
            .copied()
            .collect();
        pool(&mut after, before);
        assert_eq!(after[0].samples_s, expected);
    }
}
