//! `ridgeline workload list|show|export`.

use anyhow::Result;
use ridgeline_app::inputs;
use ridgeline_model::cost::{self, LayerCost};
use ridgeline_model::file;
use ridgeline_model::graph::Shape;
use ridgeline_model::workloads::{self, BUILTINS, BuildOptions};
use ridgeline_reports::Document;
use serde::Serialize;

use crate::cli::{ExportArgs, FormatArg, ImportArgs, ShowArgs};
use crate::output::{self, Col, Style, num, text};

/// One row of `workload list`.
#[derive(Debug, Serialize)]
struct Listed {
    name: &'static str,
    description: &'static str,
    input_shape: Vec<usize>,
    params: u64,
    macs_fwd: u128,
}

pub(crate) fn list(args: &FormatArg) -> Result<()> {
    let rows = BUILTINS
        .iter()
        .map(|b| {
            let graph = b.build(&BuildOptions::default())?;
            let c = cost::cost(&graph, 1, ridgeline_model::precision::Precision::Fp32);
            Ok(Listed {
                name: b.name,
                description: b.description,
                input_shape: b.input.to_vec(),
                params: c.params,
                macs_fwd: c.macs_fwd,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let cols: [Col<Listed>; 5] = [
        text("workload", "name", |r, _| r.name.to_owned()),
        text("input", "input_shape", |r, _| {
            Shape::new(&r.input_shape).to_string()
        }),
        num("params", "params", |r, s| s.count(r.params)),
        num("GMAC/sample", "macs_fwd", |r, s| match s {
            Style::Human => format!("{:.3}", r.macs_fwd as f64 / 1e9),
            Style::Raw => r.macs_fwd.to_string(),
        }),
        text("description", "description", |r, _| {
            r.description.to_owned()
        }),
    ];
    output::print(args.format, &rows, |style| {
        Document::new("Built-in workloads").table(output::table(&rows, &cols, style))
    })
}

pub(crate) fn show(args: &ShowArgs) -> Result<()> {
    let graph = inputs::workload(&args.workload.spec())?;
    let c = cost::cost(&graph, args.batch, args.precision.precision);
    let cols: [Col<LayerCost>; 11] = [
        text("layer", "name", |r, _| r.name.to_owned()),
        text("op", "op", |r, _| r.op.to_owned()),
        text("output", "output_shape", |r, _| {
            Shape::new(r.output_shape).to_string()
        }),
        num("params", "params", |r, s| s.count(r.params)),
        num("fwd FLOP", "flops_fwd", |r, s| s.flops(r.flops_fwd)),
        num("bwd data", "flops_bwd_data", |r, s| {
            s.flops(r.flops_bwd_data)
        }),
        num("bwd weight", "flops_bwd_weight", |r, s| {
            s.flops(r.flops_bwd_weight)
        }),
        num("HBM fwd", "hbm_bytes_fwd", |r, s| s.bytes(r.hbm_bytes_fwd)),
        num("HBM bwd", "hbm_bytes_bwd", |r, s| s.bytes(r.hbm_bytes_bwd)),
        num("FLOP/B", "arithmetic_intensity", |r, s| {
            s.number(r.arithmetic_intensity, 1)
        }),
        num("kept", "activation_bytes", |r, s| {
            s.bytes(r.activation_bytes)
        }),
    ];
    output::print(args.format.format, &c, |style| {
        let s = Style::Human;
        Document::new(format!("Workload {}: one training step", c.workload))
            .summary("batch", s.count(c.batch))
            .summary("precision", c.precision.name())
            .summary("input", Shape::new(c.input_shape).to_string())
            .summary("parameters", s.count(c.params))
            .summary("forward MACs", s.count(c.macs_fwd))
            .summary(
                "FLOPs",
                format!(
                    "{} forward + {} backward = {}",
                    s.flops(c.flops_fwd),
                    s.flops(c.flops_bwd),
                    s.flops(c.flops_train)
                ),
            )
            .summary(
                "HBM bytes (lower bound)",
                format!(
                    "{} forward + {} backward = {}",
                    s.bytes(c.hbm_bytes_fwd),
                    s.bytes(c.hbm_bytes_bwd),
                    s.bytes(c.hbm_bytes_train)
                ),
            )
            .summary(
                "arithmetic intensity",
                format!("{:.1} FLOP/B", c.arithmetic_intensity),
            )
            .summary("activations kept", s.bytes(c.activation_bytes))
            .table(output::table(&c.layers, &cols, style))
    })
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
