//! `ridgeline workload list|show|export`.

use anyhow::Result;
use ridgeline_app::inputs;
use ridgeline_app::views::model as views;
use ridgeline_model::cost;
use ridgeline_model::file;
use ridgeline_model::workloads;

use crate::cli::{ExportArgs, FormatArg, ImportArgs, ShowArgs};
use crate::output;

pub(crate) fn list(args: &FormatArg) -> Result<()> {
    let rows = views::builtins()?;
    output::print(args.format, &rows, |style| {
        views::builtins_document(&rows, style)
    })
}

pub(crate) fn show(args: &ShowArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    let c = cost::cost(&graph, args.batch, args.precision.precision);
    output::print(args.format.format, &c, |style| views::workload(&c, style))
}

pub(crate) fn export(args: &ExportArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    let description = workloads::find(graph.name()).ok().map(|b| b.description);
    let text = file::export(&graph, description)?;
    match &args.out {
        Some(path) => ridgeline_app::atomic::write(path, text),
        None => output::emit(&text),
    }
}

pub(crate) fn import(args: &ImportArgs) -> Result<()> {
    let path = args.model.display().to_string();
    if !path.ends_with(".onnx") {
        anyhow::bail!("`{path}` is not an ONNX model (.onnx)");
    }
    let graph = inputs::workload(&ridgeline_app::inputs::WorkloadSpec {
        name: path.clone(),
        input_size: None,
        width: None,
    })?;
    let text = file::export(&graph, Some(&format!("imported from {path}")))?;
    match &args.out {
        Some(out) => ridgeline_app::atomic::write(out, text),
        None => output::emit(&text),
    }
}
