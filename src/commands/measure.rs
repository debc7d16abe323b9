//! `ridgeline measure ...`: runs cases on a backend, appends records to `--out`, and prints
//! what was measured (the median of each case's samples, for reading; the records keep every
//! sample).

use std::path::Path;

use anyhow::Result;
use ridgeline_app::campaign::{self, Backends, Ran, Records, Runner, ThreadCount};
use ridgeline_app::cases;
use ridgeline_app::inputs::{self};
use ridgeline_app::tables;
use ridgeline_measure::suite::Caches;
use ridgeline_measure::{Case, NcclAllreduce, Protocol, StepRun};
use ridgeline_model::units::Bytes;
use ridgeline_reports::Document;

use crate::cli::{
    Format, MeasureArgs, MeasureConvArgs, MeasureCopyArgs, MeasureGemmArgs, MeasureNcclArgs,
    MeasureOpsArgs, MeasureStreamArgs, MeasureSuiteArgs, MeasureWorkloadArgs,
};
use crate::output::{self, Progress, Style};

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
        if !ran.declined.is_empty() {
            doc = doc.summary(
                "not measured",
                format!(
                    "{} cases the device runs no algorithm for",
                    ran.declined.len()
                ),
            );
            for why in &ran.declined {
                doc = doc.note(format!("not measured: {why}"));
            }
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
    finish(
        title,
        args.campaign.format.format,
        args.campaign.out.as_deref(),
        &ran,
        extra,
    )
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
    let records = Records::open(
        args.campaign.out.as_deref(),
        args.campaign.resume,
        &progress,
    )?;
    Runner::new(backends, records, &progress).run(
        cases,
        &args.campaign.protocol.overrides().apply(base),
        1,
        None,
    )
}

/// The backends `args` asks for (`default` thread counts unless --threads).
fn backends(args: &MeasureArgs, default: &[ThreadCount]) -> Result<Backends> {
    Backends::new(&args.spec(), default)
}

/// Converts each flag value.
fn all<A: Copy, B: From<A>>(values: &[A]) -> Vec<B> {
    values.iter().map(|&v| B::from(v)).collect()
}

pub(crate) fn gemm(args: &MeasureGemmArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
    let shapes: Option<Vec<[usize; 3]>> = if !args.shape.is_empty() {
        Some(args.shape.clone())
    } else if let Some(sizes) = &args.size {
        Some(
            sizes
                .0
                .iter()
                .map(|&n| usize::try_from(n).map(|n| [n; 3]))
                .collect::<Result<_, _>>()?,
        )
    } else {
        None
    };
    let cases = cases::for_threads(&backends.threads(), &cases::gemm(shapes, &args.precision));
    run_and_print(backends, &args.measure, &cases, "GEMM", vec![])
}

pub(crate) fn conv(args: &MeasureConvArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
    let convs = cases::conv(
        args.sweep.map(Into::into),
        &args.shapes.shapes(),
        &args.layout,
        &args.precision,
        &all(&args.pass),
    )?;
    let cases = cases::for_threads(&backends.threads(), &convs);
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
    let protocol = args
        .campaign
        .protocol
        .overrides()
        .apply(Protocol::default());
    let ran = campaign::nccl(
        &cases,
        args.campaign.out.as_deref(),
        args.campaign.resume,
        &protocol,
        &Progress::new(),
    )?;
    finish(
        &format!("NCCL allreduce across {} GPUs", args.gpus),
        args.campaign.format.format,
        args.campaign.out.as_deref(),
        &ran,
        vec![],
    )
}

/// `ridgeline measure copy`.
pub(crate) fn copy(args: &MeasureCopyArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
    let copies = cases::copies(&all(&args.direction), &all(&args.memory), &args.size);
    let cases = cases::for_threads(&backends.threads(), &copies);
    run_and_print(
        backends,
        &args.measure,
        &cases,
        "Host-device copies",
        vec![],
    )
}

pub(crate) fn stream(args: &MeasureStreamArgs) -> Result<()> {
    let backends = backends(&args.measure, &[ThreadCount::All])?;
    let caches = Caches::detect();
    let kernels = cases::stream(&all(&args.kernel), &args.size, caches);
    let cases = cases::for_threads(&backends.threads(), &kernels);
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
    let ops = cases::ops(
        &args.shapes.shapes(),
        &args.op,
        &args.precision,
        &all(&args.pass),
    )?;
    let cases = cases::for_threads(&backends.threads(), &ops);
    run_and_print(backends, &args.measure, &cases, "Ops", vec![])
}

pub(crate) fn workload(args: &MeasureWorkloadArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    let batch = usize::try_from(args.batch)?;
    let backends = backends(&args.measure, &[ThreadCount::All])?;
    let base = campaign::steps_protocol(usize::try_from(args.steps)?);
    let cases = cases::for_threads(
        &backends.threads(),
        &[Case::Workload(
            Box::new(graph.clone()),
            batch,
            args.precision,
        )],
    );
    let device = backends.device().to_owned();
    let ran = run(backends, &args.measure, &cases, base)?;
    if args.measure.campaign.format.format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let mut text_out = String::new();
    for run in StepRun::from_records(&ran.records) {
        let rows = tables::step_layer_rows(&graph, &run, args.top);
        let mut doc = Document::new(format!(
            "Measured training step: {} batch {batch}, input {:?}, {} on {} ({} threads)",
            graph.name(),
            graph.input_shape().dims(),
            run.step.precision,
            device,
            run.step.threads
        ));
        for (k, v) in tables::step_summary(&graph, &run, batch, args.precision) {
            doc = doc.summary(k, v);
        }
        doc = doc
            .table(output::table(&rows, &tables::step_layer_cols(), Style::Human))
            .note(if args.top > 0 {
                format!("the {} slowest layers; --top 0 lists every layer in order", rows.len())
            } else {
                "every layer in order".to_owned()
            })
            .note("the model's footprint counts a padded copy of one sample's input as convolution workspace; the executor's convolutions may lower several small samples together");
        let rendered = match args.measure.campaign.format.format {
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
        args.measure.campaign.format.format,
        args.measure.campaign.out.as_deref(),
        &ran,
        vec![],
    )
}
