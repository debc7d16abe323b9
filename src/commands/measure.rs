//! `ridgeline measure ...`: runs cases on a backend, appends records to `--out`, and prints
//! what was measured (the median of each case's samples, for reading; the records keep every
//! sample).

use std::path::Path;

use anyhow::Result;
use ridgeline_app::campaign::{self, Ran, ThreadCount};
use ridgeline_app::views::measure as views;
use ridgeline_app::{cases, inputs};
use ridgeline_measure::host::Caches;
use ridgeline_measure::{Case, NcclAllreduce, Protocol};
use ridgeline_model::units::Bytes;
use ridgeline_reports::{Csv, Renderer, Text};

use crate::cli::{
    Format, MeasureArgs, MeasureConvArgs, MeasureCopyArgs, MeasureGemmArgs, MeasureNcclArgs,
    MeasureOpsArgs, MeasureStreamArgs, MeasureSuiteArgs, MeasureWorkloadArgs,
};
use crate::output::{self, Progress, Style};

/// Prints the records a campaign wrote: as JSON, or each case's median.
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
    output::print(format, &ran.records, |style| {
        views::records(title, out, ran, extra, style)
    })
}

/// Measures `cases` on all cores by the default protocol (with the command line's
/// overrides) and prints them.
fn measure(
    args: &MeasureArgs,
    cases: &[Case],
    title: &str,
    extra: Vec<(String, String)>,
) -> Result<()> {
    let (_, ran) = campaign::measure(
        &args.spec(),
        &[ThreadCount::All],
        cases,
        Protocol::default(),
        &Progress::new(),
    )?;
    finish(
        title,
        args.campaign.format.format,
        args.campaign.out.as_deref(),
        &ran,
        extra,
    )
}

/// Converts each flag value.
fn all<A: Copy, B: From<A>>(values: &[A]) -> Vec<B> {
    values.iter().map(|&v| B::from(v)).collect()
}

pub(crate) fn gemm(args: &MeasureGemmArgs) -> Result<()> {
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
    measure(
        &args.measure,
        &cases::gemm(shapes, &args.precision),
        "GEMM",
        vec![],
    )
}

pub(crate) fn conv(args: &MeasureConvArgs) -> Result<()> {
    let convs = cases::conv(
        args.sweep.map(Into::into),
        &args.shapes.shapes(),
        &args.layout,
        &args.precision,
        &all(&args.pass),
    )?;
    measure(&args.measure, &convs, "Convolution", vec![])
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
    let copies = cases::copies(&all(&args.direction), &all(&args.memory), &args.size);
    measure(&args.measure, &copies, "Host-device copies", vec![])
}

pub(crate) fn stream(args: &MeasureStreamArgs) -> Result<()> {
    let caches = Caches::detect();
    let kernels = cases::stream(&all(&args.kernel), &args.size, caches);
    let s = Style::Human;
    let caches = vec![(
        "caches".to_owned(),
        format!(
            "L1d {}, last level {}",
            s.bytes(Bytes::from_count(caches.l1d as u64)),
            s.bytes(Bytes::from_count(caches.llc as u64))
        ),
    )];
    measure(&args.measure, &kernels, "STREAM memory bandwidth", caches)
}

pub(crate) fn ops(args: &MeasureOpsArgs) -> Result<()> {
    let ops = cases::ops(
        &args.shapes.shapes(),
        &args.op,
        &args.precision,
        &all(&args.pass),
    )?;
    measure(&args.measure, &ops, "Ops", vec![])
}

pub(crate) fn workload(args: &MeasureWorkloadArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    let cases = args
        .batch
        .iter()
        .map(|&b| {
            Ok(Case::Workload(
                Box::new(graph.clone()),
                usize::try_from(b)?,
                args.precision,
            ))
        })
        .collect::<Result<Vec<_>>>()?;
    let (device, ran) = campaign::measure(
        &args.measure.spec(),
        &[ThreadCount::All],
        &cases,
        campaign::steps_protocol(usize::try_from(args.steps)?),
        &Progress::new(),
    )?;
    let format = args.measure.campaign.format.format;
    if format == Format::Json {
        return output::emit(&format!(
            "{}\n",
            serde_json::to_string_pretty(&ran.records)?
        ));
    }
    let mut text = String::new();
    for doc in views::steps(&graph, &ran, &device, args.precision, args.top) {
        text.push_str(&match format {
            Format::Csv => Csv.render(&doc)?,
            _ => Text.render(&doc)?,
        });
    }
    output::emit(&text)
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
