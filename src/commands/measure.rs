//! `ridgeline measure ...`: runs cases on a backend, appends records to `--out`, and prints
//! what was measured (the median of each case's samples, for reading; the records keep every
//! sample).

use std::path::Path;

use anyhow::{Result, bail};
use ridgeline_app::campaign::{self, Backends, Ran, Records, Runner, ThreadCount};
use ridgeline_app::inputs::{self, WorkloadSpec};
use ridgeline_app::tables;
use ridgeline_calibrate::stats;
use ridgeline_measure::suite::{self, Caches, SOURCES};
use ridgeline_measure::{
    Case, ConvCase, ConvPass, CopyCase, CopyDirection, GemmCase, HostMemory, NcclAllreduce, OpCase,
    Pass, Protocol, Record, StepRun, StreamKernel, conv_cases, nccl_allreduce,
};
use ridgeline_model::graph::Graph;
use ridgeline_model::memory::{Footprint, Optimizer};
use ridgeline_model::units::{Bytes, FlopRate, Seconds};
use ridgeline_model::workloads::{self, BuildOptions};
use ridgeline_reports::Document;
use serde::Serialize;

use crate::cli::{
    ConvPassArg, CopyDirectionArg, Format, HostMemoryArg, MeasureArgs, MeasureConvArgs,
    MeasureCopyArgs, MeasureGemmArgs, MeasureNcclArgs, MeasureOpsArgs, MeasureStreamArgs,
    MeasureSuiteArgs, MeasureWorkloadArgs, PassArg, ShapesFrom, StreamArg,
};
use crate::output::{self, Col, Progress, Style, num, text};

fn finish(
    title: &str,
    format: Format,
    out: Option<&Path>,
    ran: &Ran,
    extra: Vec<(String, String)>,
) -> Result<()> {
    if format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let table_rows = tables::record_rows(&ran.records);
    let cols = tables::record_cols();
    output::print(format, &ran.records, |style| {
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
        if let Some(out) = out {
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
    backends: Backends,
    args: &MeasureArgs,
    cases: &[(usize, Case)],
    title: &str,
    extra: Vec<(String, String)>,
) -> Result<()> {
    let ran = run(backends, args, cases, Protocol::default())?;
    finish(title, args.format.format, args.out.as_deref(), &ran, extra)
}

/// Opens the records file of `args` and runs `cases` by `base` with the command line's
/// overrides, with a progress bar.
fn run(
    backends: Backends,
    args: &MeasureArgs,
    cases: &[(usize, Case)],
    base: Protocol,
) -> Result<Ran> {
    let progress = Progress::new();
    let records = Records::open(args.out.as_deref(), args.resume, &progress)?;
    Runner::new(backends, records, &progress).run(
        cases,
        &args.protocol.overrides().apply(base),
        1,
        None,
    )
}

/// The backends `args` asks for (`default` thread counts unless --threads).
fn backends(args: &MeasureArgs, default: &[ThreadCount]) -> Result<Backends> {
    Backends::new(&args.spec(), default)
}

pub(crate) fn gemm(args: &MeasureGemmArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
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
    run_and_print(backends, &args.measure, &cases, "GEMM", vec![])
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
    let backends = backends(&args.measure, &[ThreadCount::All])?;
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
    run_and_print(backends, &args.measure, &cases, "Convolution", vec![])
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
    let progress = Progress::new();
    let mut file = Records::open(args.out.as_deref(), args.resume, &progress)?;
    let protocol = args.protocol.overrides().apply(Protocol::default());
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
    };
    nccl_allreduce(&cases, &protocol, &skip, &mut |r| {
        file.write(std::slice::from_ref(&r))?;
        ran.records.push(r);
        Ok(())
    })?;
    finish(
        &format!("NCCL allreduce across {} GPUs", args.gpus),
        args.format.format,
        args.out.as_deref(),
        &ran,
        vec![],
    )
}

/// `ridgeline measure copy`.
pub(crate) fn copy(args: &MeasureCopyArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
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
        backends,
        &args.measure,
        &cases,
        "Host-device copies",
        Vec::new(),
    )
}

pub(crate) fn stream(args: &MeasureStreamArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
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
        backends,
        &args.measure,
        &cases,
        "STREAM memory bandwidth",
        caches,
    )
}

pub(crate) fn ops(args: &MeasureOpsArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
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
    run_and_print(backends, &args.measure, &cases, "Ops", vec![])
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

pub(crate) fn workload(args: &MeasureWorkloadArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    let batch = usize::try_from(args.batch)?;
    let backends = backends(&args.measure, &[ThreadCount::All])?;
    let base = campaign::steps_protocol(usize::try_from(args.steps)?);
    let cases = for_threads(&backends, |_| {
        vec![Case::Workload(
            Box::new(graph.clone()),
            batch,
            args.precision,
        )]
    });
    let device = backends.device().to_owned();
    let ran = run(backends, &args.measure, &cases, base)?;
    if args.measure.format.format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let footprint = Footprint::of(&graph, args.precision, Optimizer::Sgd)
        .at(args.batch, Bytes::new(f64::INFINITY));
    let mut text_out = String::new();
    for StepRun { step, layers } in StepRun::from_records(&ran.records) {
        let step_s = stats::median(&step.samples_s);
        let mut rows: Vec<LayerRow> = Vec::new();
        for l in graph.layers().iter().skip(1) {
            let pick = |pass: &str| {
                layers
                    .iter()
                    .find(|r| r.shape["layer"] == l.name.as_str() && r.shape["pass"] == pass)
                    .copied()
            };
            let (f, b) = (pick("forward"), pick("backward"));
            let t = |r: Option<&Record>| r.map_or(0.0, |r| stats::median(&r.samples_s));
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
            stats::median(
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
            device,
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
    let progress = Progress::new();
    let ran = campaign::suite(
        &args.measure.spec(),
        args.budget,
        &[ThreadCount::All, ThreadCount::N(1)],
        &progress,
    )?;
    finish(
        "Measurement suite",
        args.measure.format.format,
        args.measure.out.as_deref(),
        &ran,
        vec![],
    )
}
