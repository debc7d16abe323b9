//! `ridgeline measure ...`: runs cases on a backend, appends records to `--out`, and prints
//! what was measured (the median of each case's samples, for reading; the records keep every
//! sample).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use ridgeline_app::inputs::{self, WorkloadSpec};
use ridgeline_measure::suite::{self, Caches, SOURCES};
use ridgeline_measure::{
    Backend, Case, ConvCase, ConvPass, CopyCase, CopyDirection, GemmCase, HostMemory,
    NcclAllreduce, OpCase, Pass, Protocol, Record, RecordWriter, StreamKernel, conv_cases,
    nccl_allreduce, open_backend,
};
use ridgeline_model::graph::Graph;
use ridgeline_model::memory::{Footprint, Optimizer};
use ridgeline_model::units::{ByteRate, Bytes, FlopRate, Seconds};
use ridgeline_model::workloads::{self, BuildOptions};
use ridgeline_reports::Document;
use serde::Serialize;

use crate::cli::{
    ConvPassArg, CopyDirectionArg, Format, FormatArg, HostMemoryArg, MeasureArgs, MeasureConvArgs,
    MeasureCopyArgs, MeasureGemmArgs, MeasureNcclArgs, MeasureOpsArgs, MeasureStreamArgs,
    MeasureSuiteArgs, MeasureWorkloadArgs, PassArg, ProtocolArgs, ShapesFrom, StreamArg,
    ThreadCount,
};
use crate::output::{self, Col, Style, num, text};

/// Backends by thread count, opened up front so a device error comes before any work.
pub(crate) struct Backends {
    device: String,
    open: Vec<(usize, Box<dyn Backend>)>,
}

impl Backends {
    pub(crate) fn new(args: &MeasureArgs, default: &[ThreadCount]) -> Result<Backends> {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if args.device.starts_with("cuda") {
            // A GPU runs on one stream: thread counts do not apply.
            if args.threads.is_some() {
                bail!("--threads applies to --device cpu; a GPU runs each kernel on one stream");
            }
            let backend = open_backend(&args.device, 1)?;
            return Ok(Backends {
                device: args.device.clone(),
                open: vec![(backend.threads(), backend)],
            });
        }
        let counts = args.threads.as_ref().map_or(default, |t| t.0.as_slice());
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
                open.push((n, open_backend(&args.device, n)?));
            }
        }
        Ok(Backends {
            device: args.device.clone(),
            open,
        })
    }

    pub(crate) fn threads(&self) -> Vec<usize> {
        self.open.iter().map(|(t, _)| *t).collect()
    }

    fn get(&mut self, threads: usize) -> &mut dyn Backend {
        let i = self
            .open
            .iter()
            .position(|(t, _)| *t == threads)
            .unwrap_or(0);
        &mut *self.open[i].1
    }
}

/// The protocol: `base` with the command line's overrides.
fn protocol(args: &MeasureArgs, base: Protocol) -> Protocol {
    args.protocol.apply(base)
}

/// The records file, if any, opened for a new or resumed campaign.
pub(crate) fn writer(args: &MeasureArgs) -> Result<Option<RecordWriter>> {
    let Some(path) = &args.out else {
        return Ok(None);
    };
    let (writer, found) = RecordWriter::open(path, args.resume)?;
    if args.resume {
        eprintln!(
            "resuming {}: {} records kept",
            path.display(),
            found.records
        );
        if let Some(line) = found.torn_line {
            eprintln!(
                "warning: {}: line {line} was an interrupted write; it was dropped and its measurement runs again",
                path.display()
            );
        }
        if let Some((line, n)) = found.partial {
            eprintln!(
                "warning: {}: the {n} records from line {line} on are a measurement cut short (layers without their step); they were dropped and it runs again whole",
                path.display()
            );
        }
    }
    Ok(Some(writer))
}

/// What [`run_cases`] did: the new records, and how many cases were skipped (already in
/// the file) and left unrun (the deadline came first).
pub(crate) struct Ran {
    pub(crate) records: Vec<Record>,
    skipped: usize,
    unrun: usize,
}

/// Measures `cases` in order, skipping those already in the file, writing each case's
/// records as it completes, and stops before a case that would start past `deadline`. With `passes` above one, every case is
/// measured once per pass over the whole list and its samples pooled into one record, written
/// at its last pass: a slow spell of a shared machine then moves every case a little rather
/// than the cases it happens to hit a lot. Cut short by the deadline, a case keeps the passes
/// it had.
pub(crate) fn run_cases(
    backends: &mut Backends,
    writer: &mut Option<RecordWriter>,
    cases: &[(usize, Case)],
    protocol: &Protocol,
    passes: usize,
    deadline: Option<Instant>,
) -> Result<Ran> {
    let passes = passes.max(1);
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new((cases.len() * passes) as u64)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} [{elapsed_precise} < {eta}] {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut ran = Ran {
        records: Vec::new(),
        skipped: 0,
        unrun: 0,
    };
    // Each case's records from the passes before its last, pooled, until written.
    let mut pooled: Vec<Option<Vec<Record>>> = vec![None; cases.len()];
    let mut done = vec![false; cases.len()];
    'passes: for pass in 1..=passes {
        for (i, (threads, case)) in cases.iter().enumerate() {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break 'passes;
            }
            let backend = backends.get(*threads);
            let id = case.id(backend)?;
            if writer.as_ref().is_some_and(|w| w.has(&id)) {
                if !done[i] {
                    done[i] = true;
                    ran.skipped += 1;
                }
                bar.inc(1);
                continue;
            }
            bar.set_message(format!("{} on {threads} thread(s)", case.describe()));
            let mut records = case
                .run(backend, protocol)
                .with_context(|| format!("measuring {}", case.describe()))?;
            if let Some(before) = pooled[i].take() {
                pool(&mut records, before);
            }
            pooled[i] = Some(records);
            bar.inc(1);
            if pass == passes {
                done[i] = true;
                write_case(writer, &mut ran, pooled[i].take())?;
            }
        }
    }
    bar.finish_and_clear();
    for (i, records) in pooled.into_iter().enumerate() {
        if records.is_some() {
            done[i] = true;
            write_case(writer, &mut ran, records)?;
        }
    }
    ran.unrun = done.iter().filter(|d| !**d).count();
    Ok(ran)
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

fn write_case(
    writer: &mut Option<RecordWriter>,
    ran: &mut Ran,
    records: Option<Vec<Record>>,
) -> Result<()> {
    let records = records.unwrap_or_default();
    if let Some(w) = writer.as_mut() {
        w.write(&records)?;
    }
    ran.records.extend(records);
    Ok(())
}

pub(crate) fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    }
}

/// One printed row per record.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    kind: String,
    case: String,
    precision: String,
    threads: usize,
    samples: usize,
    median_s: f64,
    flop_rate: f64,
    byte_rate: f64,
}

fn describe(r: &Record) -> String {
    let s = &r.shape;
    let list = |v: &serde_json::Value| {
        v.as_array().map_or_else(String::new, |a| {
            a.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("x")
        })
    };
    match r.kind.as_str() {
        "gemm" => format!("{}x{}x{}", s["m"], s["n"], s["k"]),
        "conv" => format!(
            "{} {} n{} {}->{} {} k{}{}{}",
            s["pass"].as_str().unwrap_or_default(),
            s["source"].as_str().unwrap_or_default(),
            s["n"],
            s["c_in"],
            s["c_out"],
            list(&s["input"]),
            list(&s["kernel"]),
            if s["groups"] == 1 {
                String::new()
            } else {
                format!(" g{}", s["groups"])
            },
            if s["dilation"]
                .as_array()
                .is_some_and(|d| d.iter().any(|v| v != 1))
            {
                format!(" d{}", list(&s["dilation"]))
            } else {
                String::new()
            },
        ),
        "stream" => format!(
            "{} {} KiB",
            s["kernel"].as_str().unwrap_or_default(),
            s["array_bytes"].as_u64().unwrap_or(0) / 1024
        ),
        "op" => format!(
            "{} {} n{} {}",
            s["op"]["op"].as_str().unwrap_or_default(),
            s["pass"].as_str().unwrap_or_default(),
            s["batch"],
            list(&s["input"])
        ),
        "comm-prtt" => format!(
            "PRTT(n={}{}) {} B, ranks {}",
            s["messages"],
            if s["delayed"] == true {
                ", delayed"
            } else {
                ""
            },
            s["bytes"],
            list(&s["pair"]).replace('x', "-"),
        ),
        "comm-exchange" => format!(
            "exchange {} B, ranks {}",
            s["bytes"],
            list(&s["pair"]).replace('x', "-")
        ),
        "comm-reduce" => format!("a += b, {} B", s["bytes"]),
        "comm-allreduce" => format!(
            "{} {} B, {} ranks",
            s["algorithm"].as_str().unwrap_or_default(),
            s["bytes"],
            s["ranks"]
        ),
        "comm-alltoall" => format!("{} B per pair, {} ranks", s["bytes"], s["ranks"]),
        _ => format!("{}", s),
    }
}

pub(crate) fn rows(records: &[Record]) -> Vec<Row> {
    records
        .iter()
        .map(|r| {
            let t = median(&r.samples_s);
            Row {
                kind: r.kind.clone(),
                case: describe(r),
                precision: r.precision.clone(),
                threads: r.threads,
                samples: r.samples_s.len(),
                median_s: t,
                flop_rate: r.flops / t,
                byte_rate: r.bytes / t,
            }
        })
        .collect()
}

pub(crate) fn row_cols() -> [Col<Row>; 7] {
    [
        text("kind", "kind", |r, _| r.kind.clone()),
        text("case", "case", |r, _| r.case.clone()),
        text("precision", "precision", |r, _| r.precision.clone()),
        num("threads", "threads", |r, s| s.count(r.threads as u64)),
        num("median", "median_s", |r, s| {
            s.seconds(Seconds::new(r.median_s))
        }),
        num("FLOP/s", "flop_rate", |r, s| {
            s.flop_rate(FlopRate::new(r.flop_rate))
        }),
        num("bytes/s", "byte_rate", |r, s| {
            s.byte_rate(ByteRate::new(r.byte_rate))
        }),
    ]
}

fn finish(title: &str, args: &MeasureArgs, ran: &Ran, extra: Vec<(String, String)>) -> Result<()> {
    if args.format.format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let table_rows = rows(&ran.records);
    let cols = row_cols();
    output::print(args.format.format, &ran.records, |style| {
        let mut doc = Document::new(title.to_owned());
        if let Some(r) = ran.records.first() {
            doc = doc.summary(
                "device",
                format!("{} ({}, {} cores)", r.device, r.env.cpu_model, r.env.cores),
            );
        }
        for (k, v) in extra {
            doc = doc.summary(k, v);
        }
        if let Some(out) = &args.out {
            doc = doc.summary(
                "records",
                format!("{} new in {}", ran.records.len(), out.display()),
            );
        }
        if ran.skipped > 0 {
            doc = doc.summary("skipped", format!("{} cases already recorded", ran.skipped));
        }
        doc.table(output::table(&table_rows, &cols, style))
            .note("median of each case's samples; FLOPs and bytes as the model counts them (bytes: the lower bound)")
    })
}

/// Runs `cases` by the default protocol (with the command line's overrides) and prints them.
fn run_and_print(
    backends: &mut Backends,
    args: &MeasureArgs,
    cases: &[(usize, Case)],
    title: &str,
    extra: Vec<(String, String)>,
) -> Result<()> {
    let mut w = writer(args)?;
    let ran = run_cases(
        backends,
        &mut w,
        cases,
        &protocol(args, Protocol::default()),
        1,
        None,
    )?;
    finish(title, args, &ran, extra)
}

pub(crate) fn gemm(args: &MeasureGemmArgs) -> Result<()> {
    let mut backends = Backends::new(&args.measure, &[ThreadCount::All])?;
    let shapes: Vec<[usize; 3]> = if !args.shape.is_empty() {
        args.shape.clone()
    } else if let Some(sizes) = &args.size {
        sizes
            .0
            .iter()
            .map(|&n| usize::try_from(n).map(|n| [n; 3]))
            .collect::<Result<_, _>>()?
    } else {
        suite::GEMM_SIZES.iter().map(|&n| [n; 3]).collect()
    };
    let cases = for_threads(&backends, |_| {
        args.precision
            .iter()
            .flat_map(|&format| {
                shapes
                    .iter()
                    .map(move |&[m, n, k]| Case::Gemm(GemmCase { m, n, k, format }))
            })
            .collect()
    });
    run_and_print(&mut backends, &args.measure, &cases, "GEMM", vec![])
}

/// `cases` for every thread count, largest first.
fn for_threads(backends: &Backends, cases: impl Fn(usize) -> Vec<Case>) -> Vec<(usize, Case)> {
    backends
        .threads()
        .into_iter()
        .flat_map(|t| cases(t).into_iter().map(move |c| (t, c)))
        .collect()
}

/// The graphs and batches shapes come from: `--workload`, or the reference workloads.
fn sources(shapes: &ShapesFrom) -> Result<Vec<(Graph, usize)>> {
    if let Some(name) = &shapes.workload {
        let graph = inputs::workload(&WorkloadSpec {
            name: name.clone(),
            input_size: shapes.input_size.as_ref().map(|s| s.0.clone()),
            width: shapes.width,
        })?;
        if let Some(missing) = shapes.layer.iter().find(|l| graph.find(l).is_none()) {
            bail!(
                "--layer `{missing}`: `{}` has no such layer (see `ridgeline workload show {name}`)",
                graph.name()
            );
        }
        return Ok(vec![(graph, usize::try_from(shapes.batch)?)]);
    }
    SOURCES
        .iter()
        .map(|s| {
            let g = workloads::build(
                s.workload,
                &BuildOptions {
                    input_size: Some(s.input.to_vec()),
                    width: 1.0,
                },
            )?;
            Ok((g, s.batch))
        })
        .collect()
}

pub(crate) fn conv(args: &MeasureConvArgs) -> Result<()> {
    let mut backends = Backends::new(&args.measure, &[ThreadCount::All])?;
    let shapes = if args.sweep {
        suite::conv_sweep()
    } else {
        let mut all = Vec::new();
        for (graph, batch) in sources(&args.shapes)? {
            all.extend(conv_cases(&graph, batch, graph.name(), &args.shapes.layer));
        }
        if all.is_empty() {
            bail!(
                "no convolution layers to measure (transposed convolutions are measured as backward-data)"
            );
        }
        all
    };
    let passes: Vec<ConvPass> = args
        .pass
        .iter()
        .map(|p| match p {
            ConvPassArg::Forward => ConvPass::Forward,
            ConvPassArg::BackwardData => ConvPass::BackwardData,
            ConvPassArg::BackwardFilter => ConvPass::BackwardFilter,
        })
        .collect();
    let cases = for_threads(&backends, |_| {
        let mut cases = Vec::new();
        for &layout in &args.layout {
            for &format in &args.precision {
                for &p in &passes {
                    for c in &shapes {
                        cases.push(Case::Conv(
                            ConvCase {
                                format,
                                layout,
                                ..c.clone()
                            },
                            p,
                        ));
                    }
                }
            }
        }
        cases
    });
    run_and_print(&mut backends, &args.measure, &cases, "Convolution", vec![])
}

/// `ridgeline measure nccl`.
pub(crate) fn nccl(args: &MeasureNcclArgs) -> Result<()> {
    let cases: Vec<NcclAllreduce> = args
        .sizes
        .0
        .iter()
        .map(|&b| NcclAllreduce {
            gpus: args.gpus as usize,
            bytes: b as usize,
        })
        .collect();
    for c in &cases {
        c.check()?;
    }
    let mut writer = match &args.out {
        Some(path) => Some(RecordWriter::open(path, args.resume)?.0),
        None => None,
    };
    let protocol = args.protocol.apply(Protocol::default());
    let mut records = Vec::new();
    {
        let done: Vec<String> = cases
            .iter()
            .map(NcclAllreduce::id)
            .filter(|id| writer.as_ref().is_some_and(|w| w.has(id)))
            .collect();
        let skip = |id: &str| done.iter().any(|d| d == id);
        nccl_allreduce(&cases, &protocol, &skip, &mut |r| {
            if let Some(w) = &mut writer {
                w.write(std::slice::from_ref(&r))?;
            }
            records.push(r);
            Ok(())
        })?;
    }
    let ran = Ran {
        records,
        skipped: 0,
        unrun: 0,
    };
    let m = MeasureArgs {
        device: "cuda".into(),
        threads: None,
        out: args.out.clone(),
        resume: args.resume,
        protocol: ProtocolArgs::default(),
        format: FormatArg {
            format: args.format.format,
        },
    };
    finish(
        &format!("NCCL allreduce across {} GPUs", args.gpus),
        &m,
        &ran,
        vec![],
    )
}

/// `ridgeline measure copy`.
pub(crate) fn copy(args: &MeasureCopyArgs) -> Result<()> {
    let mut backends = Backends::new(&args.measure, &[ThreadCount::All])?;
    let mut cases = Vec::new();
    for &d in &args.direction {
        for &m in &args.memory {
            for &bytes in &args.size {
                cases.push(CopyCase {
                    direction: match d {
                        CopyDirectionArg::H2d => CopyDirection::HostToDevice,
                        CopyDirectionArg::D2h => CopyDirection::DeviceToHost,
                    },
                    memory: match m {
                        HostMemoryArg::Pinned => HostMemory::Pinned,
                        HostMemoryArg::Pageable => HostMemory::Pageable,
                    },
                    bytes,
                });
            }
        }
    }
    let cases = for_threads(&backends, |_| {
        cases.iter().map(|&c| Case::Copy(c)).collect()
    });
    run_and_print(
        &mut backends,
        &args.measure,
        &cases,
        "Host-device copies",
        Vec::new(),
    )
}

pub(crate) fn stream(args: &MeasureStreamArgs) -> Result<()> {
    let mut backends = Backends::new(&args.measure, &[ThreadCount::All])?;
    let caches = Caches::detect();
    let sizes: Vec<usize> = if args.size.is_empty() {
        suite::stream_sizes(caches)
    } else {
        args.size.iter().map(|b| b / 8).collect()
    };
    let kernels: Vec<StreamKernel> = args
        .kernel
        .iter()
        .map(|k| match k {
            StreamArg::Copy => StreamKernel::Copy,
            StreamArg::Scale => StreamKernel::Scale,
            StreamArg::Add => StreamKernel::Add,
            StreamArg::Triad => StreamKernel::Triad,
        })
        .collect();
    let cases = for_threads(&backends, |_| {
        kernels
            .iter()
            .flat_map(|&k| sizes.iter().map(move |&n| Case::Stream(k, n)))
            .collect()
    });
    let s = Style::Human;
    let caches = vec![(
        "caches".to_owned(),
        format!(
            "L1d {}, last level {}",
            s.bytes(Bytes::from_count(caches.l1d as u64)),
            s.bytes(Bytes::from_count(caches.llc as u64))
        ),
    )];
    run_and_print(
        &mut backends,
        &args.measure,
        &cases,
        "STREAM memory bandwidth",
        caches,
    )
}

pub(crate) fn ops(args: &MeasureOpsArgs) -> Result<()> {
    let mut backends = Backends::new(&args.measure, &[ThreadCount::All])?;
    let mut cases_of: Vec<OpCase> = Vec::new();
    for (graph, batch) in sources(&args.shapes)? {
        let layers = graph.layers();
        if args.shapes.layer.is_empty() {
            cases_of.extend(suite::op_cases(&graph, batch));
        } else {
            for name in &args.shapes.layer {
                let layer = &layers[graph.find(name).unwrap_or_default()];
                cases_of.push(OpCase {
                    op: layer.op.clone(),
                    input: layers[layer.inputs[0]].output.dims().to_vec(),
                    batch,
                    format: ridgeline_measure::Format::Fp32,
                });
            }
        }
    }
    if args.shapes.workload.is_none() {
        cases_of.extend(suite::extra_ops());
    }
    if let Some(bad) = args
        .op
        .iter()
        .find(|k| ridgeline_model::file::op_kinds().all(|op| op != k.as_str()))
    {
        bail!(
            "--op `{bad}`: unknown op kind; see `ridgeline workload show` for the kinds a workload uses"
        );
    }
    cases_of.retain(|c| {
        !c.op.is_matrix()
            && !matches!(c.op.kind(), "input" | "flatten")
            && (args.op.is_empty() || args.op.iter().any(|k| k == c.op.kind()))
    });
    if cases_of.is_empty() {
        bail!(
            "no ops to measure: the workload has none of the kinds asked for (convolutions and dense layers: `measure conv`, `measure gemm`)"
        );
    }
    let passes: Vec<Pass> = args
        .pass
        .iter()
        .map(|p| match p {
            PassArg::Forward => Pass::Forward,
            PassArg::Backward => Pass::Backward,
        })
        .collect();
    let cases = for_threads(&backends, |_| {
        let mut cases = Vec::new();
        for &format in &args.precision {
            for &p in &passes {
                cases.extend(cases_of.iter().map(|c| {
                    Case::Op(
                        OpCase {
                            format,
                            ..c.clone()
                        },
                        p,
                    )
                }));
            }
        }
        cases
    });
    run_and_print(&mut backends, &args.measure, &cases, "Ops", vec![])
}

/// One layer's row of a workload run.
#[derive(Debug, Serialize)]
struct LayerRow {
    layer: String,
    op: String,
    forward_s: f64,
    backward_s: f64,
    share: f64,
    flop_rate: f64,
}

/// The protocol of full training steps: `steps` of them after the executor's warm-up step.
pub(crate) fn steps_protocol(steps: usize) -> Protocol {
    Protocol {
        warmup: Duration::ZERO,
        min_samples: steps,
        min_time: Duration::ZERO,
        max_samples: steps,
        max_time: Duration::MAX,
        cache: ridgeline_measure::protocol::CacheState::Warm,
    }
}

pub(crate) fn workload(args: &MeasureWorkloadArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    let batch = usize::try_from(args.batch)?;
    let mut backends = Backends::new(&args.measure, &[ThreadCount::All])?;
    let base = steps_protocol(usize::try_from(args.steps)?);
    let cases = for_threads(&backends, |_| {
        vec![Case::Workload(
            Box::new(graph.clone()),
            batch,
            args.precision,
        )]
    });
    let mut w = writer(&args.measure)?;
    let ran = run_cases(
        &mut backends,
        &mut w,
        &cases,
        &protocol(&args.measure, base),
        1,
        None,
    )?;
    if args.measure.format.format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let footprint = Footprint::of(&graph, args.precision, Optimizer::Sgd)
        .at(args.batch, Bytes::new(f64::INFINITY));
    let mut text_out = String::new();
    for step in ran.records.iter().filter(|r| r.kind == "workload-step") {
        let layers: Vec<&Record> = ran
            .records
            .iter()
            .filter(|r| r.kind == "workload-layer" && r.threads == step.threads)
            .collect();
        let step_s = median(&step.samples_s);
        let mut rows: Vec<LayerRow> = Vec::new();
        for l in graph.layers().iter().skip(1) {
            let pick = |pass: &str| {
                layers
                    .iter()
                    .find(|r| r.shape["layer"] == l.name.as_str() && r.shape["pass"] == pass)
                    .copied()
            };
            let (f, b) = (pick("forward"), pick("backward"));
            let t = |r: Option<&Record>| r.map_or(0.0, |r| median(&r.samples_s));
            let flops = f.map_or(0.0, |r| r.flops) + b.map_or(0.0, |r| r.flops);
            let time = t(f) + t(b);
            rows.push(LayerRow {
                layer: l.name.to_string(),
                op: l.op.kind().to_owned(),
                forward_s: t(f),
                backward_s: t(b),
                share: time / step_s,
                flop_rate: if time > 0.0 { flops / time } else { 0.0 },
            });
        }
        if args.top > 0 {
            rows.sort_by(|a, b| {
                (b.forward_s + b.backward_s).total_cmp(&(a.forward_s + a.backward_s))
            });
            rows.truncate(args.top);
        }
        let extra = step.extra.clone().unwrap_or_default();
        let s = Style::Human;
        let peak = extra["peak_bytes"].as_f64().unwrap_or(0.0);
        let update = extra["update_s"].as_array().map_or(0.0, |v| {
            median(
                &v.iter()
                    .filter_map(serde_json::Value::as_f64)
                    .collect::<Vec<_>>(),
            )
        });
        let cols: [Col<LayerRow>; 6] = [
            text("layer", "layer", |r, _| r.layer.clone()),
            text("op", "op", |r, _| r.op.clone()),
            num("forward", "forward_s", |r, s| {
                s.seconds(Seconds::new(r.forward_s))
            }),
            num("backward", "backward_s", |r, s| {
                s.seconds(Seconds::new(r.backward_s))
            }),
            num("share", "share", |r, s| match s {
                Style::Human => format!("{:.1}%", 100.0 * r.share),
                Style::Raw => r.share.to_string(),
            }),
            num("FLOP/s", "flop_rate", |r, s| {
                s.flop_rate(FlopRate::new(r.flop_rate))
            }),
        ];
        let mut doc = Document::new(format!(
            "Measured training step: {} batch {batch}, input {:?}, {} on {} ({} threads)",
            graph.name(),
            graph.input_shape().dims(),
            step.precision,
            backends.device,
            step.threads
        ))
        .summary(
            "device",
            match &step.env.gpu {
                Some(g) => format!("{} (compute capability {})", g.name, g.compute_capability),
                None => format!("{} ({} cores)", step.env.cpu_model, step.env.cores),
            },
        )
        .summary(
            "step",
            format!(
                "{} median of {} steps ({}), SGD update {}",
                s.seconds(Seconds::new(step_s)),
                step.samples_s.len(),
                s.flop_rate(FlopRate::new(step.flops / step_s)),
                s.seconds(Seconds::new(update))
            ),
        )
        .summary(
            "samples per second",
            format!("{:.2}", batch as f64 / step_s),
        )
        .summary("peak memory (executor)", s.bytes(Bytes::new(peak)));
        if let Some(rss) = extra["peak_rss_bytes"].as_f64() {
            doc = doc.summary("peak resident set (process)", s.bytes(Bytes::new(rss)));
        }
        if let Some(scales) = extra["loss_scale"].as_array() {
            let last = scales
                .last()
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.0);
            doc = doc.summary(
                "loss scale (dynamic)",
                format!(
                    "{last} at the last step; {} of {} updates skipped on overflow",
                    extra["skipped_updates"].as_u64().unwrap_or(0),
                    scales.len()
                ),
            );
        }
        doc = doc
            .summary(
                format!("model footprint (SGD, {})", args.precision.name()),
                s.bytes(footprint.total),
            )
            .table(output::table(&rows, &cols, Style::Human))
            .note(if args.top > 0 {
                format!("the {} slowest layers; --top 0 lists every layer in order", rows.len())
            } else {
                "every layer in order".to_owned()
            })
            .note("the model's footprint counts a padded copy of one sample's input as convolution workspace; the executor's convolutions may lower several small samples together");
        let rendered = match args.measure.format.format {
            Format::Csv => ridgeline_reports::Renderer::render(&ridgeline_reports::Csv, &doc)?,
            _ => ridgeline_reports::Renderer::render(&ridgeline_reports::Text, &doc)?,
        };
        text_out.push_str(&rendered);
    }
    output::emit(&text_out)
}

pub(crate) fn suite(args: &MeasureSuiteArgs) -> Result<()> {
    let ran = run_suite(args, &[ThreadCount::All, ThreadCount::N(1)])?;
    finish("Measurement suite", &args.measure, &ran, vec![])
}

/// Plans the suite to the budget on `default` thread counts (unless --threads), prints the
/// plan to stderr and runs it.
pub(crate) fn run_suite(args: &MeasureSuiteArgs, default: &[ThreadCount]) -> Result<Ran> {
    let m = &args.measure;
    if m.out.is_none() {
        bail!(
            "measure suite writes a campaign of records: give --out FILE (and --resume to continue one)"
        );
    }
    let mut backends = Backends::new(m, default)?;
    let protocol = protocol(m, suite::PROTOCOL);
    let threads = backends.threads();
    let mut w = writer(m)?;
    let rates = suite::probe(backends.get(threads[0]))?;
    let gpu = backends.get(threads[0]).env().gpu;
    let candidates = match &gpu {
        Some(g) => {
            eprintln!("measure suite: {} ({})", g.name, m.device);
            suite::standard_gpu(g.l2_bytes.unwrap_or(0) as usize)?
        }
        None => suite::standard(&threads)?,
    };
    let plan = {
        let backends = &backends;
        let w = &w;
        suite::plan(candidates, &rates, &protocol, args.budget, |t, case| {
            let Some((_, backend)) = backends.open.iter().find(|(n, _)| *n == t) else {
                return Ok(false);
            };
            Ok(w.as_ref()
                .is_some_and(|w| case.id(&**backend).is_ok_and(|id| w.has(&id))))
        })?
    };
    let s = Style::Human;
    eprintln!(
        "measure suite: {} cases in about {} of the {} budget (probe: {} FP32 GEMM, {} triad on {} threads)",
        plan.run.len(),
        humantime::format_duration(Duration::from_secs(plan.estimate_s().ceil() as u64)),
        humantime::format_duration(args.budget),
        s.flop_rate(FlopRate::new(rates.flops)),
        s.byte_rate(ByteRate::new(rates.bytes)),
        rates.cores
    );
    for line in plan.summary() {
        eprintln!("  {line}");
    }
    if plan.already > 0 {
        eprintln!("  already recorded: {} cases", plan.already);
    }
    if !plan.left_out.is_empty() {
        eprintln!(
            "left out for lack of time (raise --budget, or --resume later with a larger one):"
        );
        for line in plan.left_out_summary() {
            eprintln!("  {line}");
        }
    }
    // Every case fits with time to spare: sample each longer, in passes over the whole
    // suite (pooled), within the budget. A median of more samples rides out more of a
    // shared machine's slow spells, and samples spread over the run meet a spell of a
    // minute or two in every case a little rather than in the cases it overlaps wholly.
    let spare = args.budget.as_secs_f64() / plan.estimate_s().max(1e-9);
    let (protocol, passes) = if plan.left_out.is_empty() && spare > 1.0 {
        let f = spare.min(suite::MAX_SAMPLING_SCALE);
        let passes = suite::passes(f);
        let each = f / passes as f64;
        eprintln!(
            "  budget to spare: each case samples {f:.1}x longer, in {passes} pass(es) over the suite"
        );
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
    let deadline = Instant::now() + args.budget + args.budget / 4;
    let ran = run_cases(
        &mut backends,
        &mut w,
        &cases,
        &protocol,
        passes,
        Some(deadline),
    )?;
    if ran.unrun > 0 {
        eprintln!(
            "stopped at the budget with {} cases not run; --resume with a larger --budget runs them",
            ran.unrun
        );
    }
    Ok(ran)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ridgeline_measure::Format;

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

    fn cpu() -> Backends {
        Backends {
            device: "cpu".into(),
            open: vec![(1, open_backend("cpu", 1).unwrap())],
        }
    }

    #[test]
    fn passes_pool_each_case_into_one_record_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let mut w = Some(RecordWriter::open(&path, false).unwrap().0);
        let p = two_samples();
        let cases = [gemm(16), gemm(32)];
        let ran = run_cases(&mut cpu(), &mut w, &cases, &p, 3, None).unwrap();
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
        let mut w = Some(RecordWriter::open(&path, true).unwrap().0);
        let ran = run_cases(&mut cpu(), &mut w, &cases, &p, 3, None).unwrap();
        assert_eq!((ran.records.len(), ran.skipped, ran.unrun), (0, 2, 0));
    }

    #[test]
    fn a_deadline_keeps_the_passes_a_case_had() {
        let p = two_samples();
        let cases = [gemm(16), gemm(32)];
        let ran = run_cases(&mut cpu(), &mut None, &cases, &p, 2, Some(Instant::now())).unwrap();
        assert_eq!((ran.records.len(), ran.unrun), (0, 2));
    }

    #[test]
    fn pooling_puts_earlier_samples_first_by_id() {
        let p = two_samples();
        let mut b = cpu();
        let case = gemm(16).1;
        let before = case.run(b.get(1), &p).unwrap();
        let mut after = case.run(b.get(1), &p).unwrap();
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
