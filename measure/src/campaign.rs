//! Measurements as values: a [`Case`] knows its record id (so `--resume` can skip it before it
//! runs), runs on any [`Backend`], and turns the raw timings into [`Record`]s with FLOPs and
//! bytes counted exactly as the model counts them.

use ridgeline_model::cost;
use ridgeline_model::file::layer_spec;
use ridgeline_model::graph::{Graph, Op};
use ridgeline_model::precision::Precision;

use crate::backend::{
    Backend, ConvCase, ConvPass, CopyCase, Format, GemmCase, Layout, OpCase, Pass, StreamKernel,
    WorkloadRun,
};
use crate::cases;
use crate::cpu::CpuBackend;
use crate::cuda::CudaBackend;
use crate::error::{Error, Result};
use crate::protocol::Protocol;
use crate::record::{
    ConvShape, CopyShape, Extra, GemmShape, LayerShape, Measured, OpShape, OpSpec, Record,
    RecordKind, RecordPrecision, StepShape, StreamShape, record_id,
};

/// One measurement.
#[derive(Debug, Clone)]
pub enum Case {
    /// A GEMM.
    Gemm(GemmCase),
    /// One pass of a convolution.
    Conv(ConvCase, ConvPass),
    /// A STREAM kernel on arrays of this many `f64`.
    Stream(StreamKernel, usize),
    /// One pass of a non-GEMM op.
    Op(OpCase, Pass),
    /// Full training steps of a workload graph at a batch size, in a training precision.
    Workload(Box<Graph>, usize, Precision),
    /// A host-device copy.
    Copy(CopyCase),
}

/// The backend for a `--device` value: `cpu`, `cuda` or `cuda:N`.
pub fn open_backend(device: &str, threads: usize) -> Result<Box<dyn Backend>> {
    match device {
        "cpu" => Ok(Box::new(CpuBackend::new(threads)?)),
        "cuda" => CudaBackend::open(0),
        other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(ordinal)) => CudaBackend::open(ordinal),
            _ => Err(Error::invalid(
                format!("device `{other}`"),
                "unknown device; valid: cpu, cuda, cuda:N (N = GPU ordinal)",
            )),
        },
    }
}

/// The distinct convolutions of `graph` at `batch` (of the layers named in `only`, if any),
/// labelled `source/layer` by the first layer of each shape. Transposed convolutions are the
/// adjoint passes of these and are measured through them.
pub fn conv_cases(graph: &Graph, batch: usize, source: &str, only: &[String]) -> Vec<ConvCase> {
    let mut out: Vec<ConvCase> = Vec::new();
    for (i, layer) in graph.layers().iter().enumerate() {
        if !only.is_empty() && !only.iter().any(|l| l == layer.name.as_str()) {
            continue;
        }
        let Some(case) = conv_case(graph, i, batch, Format::Fp32, source) else {
            continue;
        };
        if !out.iter().any(|o| {
            ConvCase {
                label: case.label.clone(),
                ..o.clone()
            } == case
        }) {
            out.push(case);
        }
    }
    out
}

/// Layer `i` of `graph`, where it is a convolution, as a case at `batch` in `format`
/// (channels first), labelled `source/layer`.
pub fn conv_case(
    graph: &Graph,
    i: usize,
    batch: usize,
    format: Format,
    source: &str,
) -> Option<ConvCase> {
    let layers = graph.layers();
    let layer = layers.get(i)?;
    let Op::Conv(c) = &layer.op else {
        return None;
    };
    let x = layers[*layer.inputs.first()?].output.dims();
    Some(ConvCase {
        label: format!("{source}/{}", layer.name),
        batch,
        c_in: x[0],
        input: x[1..].to_vec(),
        c_out: c.out_channels,
        kernel: c.kernel.to_vec(),
        stride: c.stride.to_vec(),
        padding: c.padding.pairs().to_vec(),
        dilation: c.dilation.to_vec(),
        groups: c.groups,
        bias: c.bias,
        format,
        layout: Layout::ChannelsFirst,
    })
}

fn dims(v: &[usize]) -> String {
    v.iter().map(usize::to_string).collect::<Vec<_>>().join("x")
}

impl Case {
    /// The record kind.
    pub fn kind(&self) -> RecordKind {
        match self {
            Case::Gemm(_) => RecordKind::Gemm,
            Case::Conv(..) => RecordKind::Conv,
            Case::Stream(..) => RecordKind::Stream,
            Case::Op(..) => RecordKind::Op,
            Case::Workload(..) => RecordKind::WorkloadStep,
            Case::Copy(..) => RecordKind::Copy,
        }
    }

    /// The number format.
    pub fn precision(&self) -> RecordPrecision {
        match self {
            Case::Gemm(g) => g.format.into(),
            Case::Stream(..) => RecordPrecision::Fp64,
            Case::Copy(..) => RecordPrecision::Bytes,
            Case::Conv(c, _) => c.format.into(),
            Case::Op(c, _) => c.format.into(),
            Case::Workload(_, _, p) => (*p).into(),
        }
    }

    /// What the case's record measured: its kind and shape (of its step record, for a
    /// workload).
    pub fn measured(&self) -> Result<Measured> {
        Ok(match self {
            Case::Gemm(g) => Measured::Gemm(GemmShape {
                m: g.m as u64,
                n: g.n as u64,
                k: g.k as u64,
            }),
            Case::Conv(c, pass) => Measured::Conv(ConvShape {
                source: c.label.clone(),
                n: c.batch,
                c_in: c.c_in,
                c_out: c.c_out,
                input: c.input.clone(),
                kernel: c.kernel.clone(),
                stride: c.stride.clone(),
                padding: c.padding.clone(),
                dilation: c.dilation.clone(),
                groups: c.groups,
                bias: c.bias,
                pass: *pass,
                layout: c.layout,
            }),
            Case::Stream(k, n) => Measured::Stream(StreamShape {
                kernel: *k,
                elements: *n as u64,
                array_bytes: *n as u64 * 8,
            }),
            Case::Op(c, pass) => {
                let graph = cases::op_graph(c)?;
                let mut op: OpSpec = serde_json::to_value(layer_spec(&graph, graph.last()))
                    .and_then(serde_json::from_value)
                    .map_err(|e| Error::invalid("op", e.to_string()))?;
                op.params.remove("name");
                op.params.remove("inputs");
                Measured::Op(OpShape {
                    op,
                    input: c.input.clone(),
                    batch: c.batch,
                    pass: *pass,
                })
            }
            Case::Workload(g, batch, _) => Measured::WorkloadStep(run_shape(g, *batch)),
            Case::Copy(c) => Measured::Copy(CopyShape {
                direction: c.direction,
                memory: c.memory,
                bytes: c.bytes as u64,
            }),
        })
    }

    /// The id of this case's record (of its step record, for a workload) on `backend`.
    pub fn id(&self, backend: &dyn Backend) -> Result<String> {
        Ok(record_id(
            &self.measured()?,
            self.precision(),
            backend.threads(),
            backend.device(),
        ))
    }

    /// A one-line description for progress output.
    pub fn describe(&self) -> String {
        match self {
            Case::Gemm(g) => format!("gemm {} {}x{}x{}", g.format.name(), g.m, g.n, g.k),
            Case::Conv(c, pass) => format!(
                "conv {} {}{} n{} {}->{} {} k{}",
                pass.name(),
                c.label,
                if c.layout == Layout::ChannelsLast {
                    " channels-last"
                } else {
                    ""
                },
                c.batch,
                c.c_in,
                c.c_out,
                dims(&c.input),
                dims(&c.kernel)
            ),
            Case::Stream(k, n) => format!("stream {} {} KiB", k.name(), n * 8 / 1024),
            Case::Op(c, pass) => format!(
                "op {} {} n{} {}",
                c.op.kind(),
                pass.name(),
                c.batch,
                dims(&c.input)
            ),
            Case::Workload(g, batch, precision) => format!(
                "workload {} batch {batch} {} {}",
                g.name(),
                dims(g.input_shape().dims()),
                precision.name()
            ),
            Case::Copy(c) => format!(
                "copy {} {} {} KiB",
                c.direction.name(),
                c.memory.name(),
                c.bytes / 1024
            ),
        }
    }

    /// The FLOPs and bytes of one run of a GEMM, convolution or op case, as its record
    /// counts them; an error for the other cases, whose counts come with their measurement.
    pub fn counts(&self) -> Result<(f64, f64)> {
        match self {
            Case::Gemm(g) => {
                let (m, n, k) = (g.m as f64, g.n as f64, g.k as f64);
                let bytes = (m * k + k * n + m * n) * g.format.bytes() as f64;
                Ok((2.0 * m * n * k, bytes))
            }
            Case::Conv(c, pass) => {
                let graph = cases::conv_graph(c)?;
                let cost = cases::layer_cost(&graph, c.batch, c.format);
                Ok(conv_counts(&graph, c, *pass, &cost))
            }
            Case::Op(c, pass) => {
                let graph = cases::op_graph(c)?;
                let cost = cases::layer_cost(&graph, c.batch, c.format);
                Ok(match pass {
                    Pass::Forward => (cost.flops_fwd.value(), cost.hbm_bytes_fwd.value()),
                    Pass::Backward => (cost.flops_bwd.value(), cost.hbm_bytes_bwd.value()),
                })
            }
            other => Err(Error::invalid(
                other.describe(),
                "counted when measured, not beforehand",
            )),
        }
    }

    /// Runs the case on `backend` by `protocol` and returns its records (a workload gives one
    /// per layer and pass, then its step record).
    pub fn run(&self, backend: &mut dyn Backend, protocol: &Protocol) -> Result<Vec<Record>> {
        let make = |backend: &dyn Backend,
                    measured: Measured,
                    samples: Vec<f64>,
                    flops: f64,
                    bytes: f64| {
            Record::new(
                measured,
                self.precision(),
                backend.device(),
                backend.threads(),
                samples,
                flops,
                bytes,
                backend.env(),
            )
        };
        let shape = self.measured()?;
        match self {
            Case::Gemm(g) => {
                let samples = backend.gemm(g, protocol)?;
                let (flops, bytes) = self.counts()?;
                Ok(vec![make(&*backend, shape, samples, flops, bytes)])
            }
            Case::Conv(c, pass) => {
                let (flops, bytes) = self.counts()?;
                let samples = backend.conv(c, *pass, protocol)?;
                let mut record = make(&*backend, shape, samples, flops, bytes);
                record.extra.notes = backend.take_notes();
                Ok(vec![record])
            }
            Case::Copy(c) => {
                let samples = backend.copy(c, protocol)?;
                Ok(vec![make(&*backend, shape, samples, 0.0, c.bytes as f64)])
            }
            Case::Stream(k, n) => {
                let samples = backend.stream(*k, *n, protocol)?;
                let n = *n as f64;
                Ok(vec![make(
                    &*backend,
                    shape,
                    samples,
                    k.flops() as f64 * n,
                    (k.arrays() * 8) as f64 * n,
                )])
            }
            Case::Op(c, pass) => {
                let (flops, bytes) = self.counts()?;
                let samples = backend.op(c, *pass, protocol)?;
                Ok(vec![make(&*backend, shape, samples, flops, bytes)])
            }
            Case::Workload(graph, batch, precision) => {
                let run = backend.workload(graph, *batch, *precision, protocol)?;
                Ok(workload_records(
                    graph,
                    *batch,
                    *precision,
                    &run,
                    run_shape(graph, *batch),
                    &|measured, samples, flops, bytes| {
                        make(&*backend, measured, samples, flops, bytes)
                    },
                ))
            }
        }
    }
}

/// The records of a measured training run `run` of `graph` at `batch` (its shape `shape`):
/// one per layer and pass, then the step's, made by `make` from a shape, samples, FLOPs and
/// bytes.
pub(crate) fn workload_records(
    graph: &Graph,
    batch: usize,
    precision: Precision,
    run: &WorkloadRun,
    shape: StepShape,
    make: &dyn Fn(Measured, Vec<f64>, f64, f64) -> Record,
) -> Vec<Record> {
    let cost = cost::cost(graph, batch as u64, precision);
    let mut records = Vec::with_capacity(2 * run.layers.len() + 1);
    for ((times, layer), lc) in run.layers.iter().zip(graph.layers()).zip(&cost.layers) {
        let passes = [
            (
                Pass::Forward,
                &times.forward_s,
                &times.notes.forward,
                lc.flops_fwd.value(),
                lc.hbm_bytes_fwd.value(),
            ),
            (
                Pass::Backward,
                &times.backward_s,
                &times.notes.backward,
                lc.flops_bwd.value(),
                lc.hbm_bytes_bwd.value(),
            ),
        ];
        for (pass, samples, notes, flops, bytes) in passes {
            if samples.is_empty() || matches!(layer.op, Op::Input) {
                continue;
            }
            let layer_shape = Measured::WorkloadLayer(LayerShape {
                run: shape.clone(),
                layer: layer.name.to_string(),
                op: layer.op.kind().to_owned(),
                pass,
            });
            let mut record = make(layer_shape, samples.clone(), flops, bytes);
            record.extra.notes.extend(notes.clone());
            records.push(record);
        }
    }
    let mut step = make(
        Measured::WorkloadStep(shape),
        run.step_s.clone(),
        cost.flops_train.value(),
        cost.hbm_bytes_train.value(),
    );
    step.extra = Extra {
        peak_bytes: Some(run.peak_bytes),
        peak_rss_bytes: run.peak_rss_bytes,
        update_s: run.update_s.clone(),
        loss_scale: run.loss_scale.clone(),
        skipped_updates: (!run.loss_scale.is_empty()).then_some(run.skipped_updates as u64),
        ..Extra::default()
    };
    records.push(step);
    records
}

fn run_shape(graph: &Graph, batch: usize) -> StepShape {
    StepShape {
        workload: graph.name().to_owned(),
        input: graph.input_shape().dims().to_vec(),
        batch,
        ranks: None,
    }
}

/// FLOPs and bytes of one pass of a conv case. Forward FLOPs and bytes, and backward FLOPs,
/// are the model's; the backward passes each read one activation and the weights and write
/// the other, the same lower bound as forward.
fn conv_counts(
    graph: &Graph,
    case: &ConvCase,
    pass: ConvPass,
    cost: &cost::LayerCost<'_>,
) -> (f64, f64) {
    let out = graph.layers()[graph.last()].output.elements() as f64;
    let input = graph.input_shape().elements() as f64;
    let weights = cost.params as f64;
    let bytes = case.format.bytes() as f64 * ((input + out) * case.batch as f64 + weights);
    let flops = match pass {
        ConvPass::Forward => cost.flops_fwd.value(),
        ConvPass::BackwardData => cost.flops_bwd_data.value(),
        ConvPass::BackwardFilter => cost.flops_bwd_weight.value(),
        ConvPass::Backward => cost.flops_bwd_data.value() + cost.flops_bwd_weight.value(),
    };
    (flops, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::PassNotes;
    use ridgeline_model::workloads::{self, BuildOptions};
    use std::collections::BTreeMap;

    fn cpu() -> Box<dyn Backend> {
        open_backend("cpu", 1).unwrap()
    }

    /// CosmoFlow on a 32-cube input at `width` of its channels.
    fn cosmoflow(width: f64) -> Graph {
        workloads::build(
            "cosmoflow",
            &BuildOptions {
                input_size: Some(vec![32]),
                width,
            },
        )
        .unwrap()
    }

    #[test]
    fn devices() {
        assert!(open_backend("cpu", 1).is_ok());
        for d in ["cuda", "cuda:1"] {
            let err = open_backend(d, 1).err().unwrap();
            assert!(matches!(err, Error::BackendUnavailable { .. }), "{err}");
        }
        let err = open_backend("tpu", 1).err().unwrap().to_string();
        assert!(err.contains("valid: cpu, cuda"), "{err}");
    }

    #[test]
    fn gemm_records_count_flops_and_bytes() {
        let mut b = cpu();
        let case = Case::Gemm(GemmCase {
            m: 32,
            n: 16,
            k: 8,
            format: Format::Fp64,
        });
        let r = case.run(&mut *b, &Protocol::quick()).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].flops, r[0].bytes),
            (2.0 * 32.0 * 16.0 * 8.0, 8.0 * (256.0 + 128.0 + 512.0))
        );
        assert_eq!(r[0].id, case.id(&*b).unwrap());
        assert_eq!(
            r[0].measured,
            Measured::Gemm(GemmShape { m: 32, n: 16, k: 8 })
        );
        assert_eq!(r[0].samples_s.len(), 3);
    }

    #[test]
    fn conv_forward_bytes_are_the_models() {
        let g = cosmoflow(0.25);
        let convs = conv_cases(&g, 2, "cosmoflow", &[]);
        assert!(!convs.is_empty());
        for c in &convs {
            let graph = cases::conv_graph(c).unwrap();
            let cost = cases::layer_cost(&graph, c.batch, c.format);
            let (flops, bytes) = conv_counts(&graph, c, ConvPass::Forward, &cost);
            assert_eq!(
                (flops, bytes),
                (cost.flops_fwd.value(), cost.hbm_bytes_fwd.value()),
                "{}",
                c.label
            );
            let (d, _) = conv_counts(&graph, c, ConvPass::BackwardData, &cost);
            let (w, _) = conv_counts(&graph, c, ConvPass::BackwardFilter, &cost);
            assert_eq!(d + w, cost.flops_bwd.value());
        }
    }

    #[test]
    fn conv_cases_are_distinct_shapes() {
        let g = workloads::build(
            "resnet50",
            &BuildOptions {
                input_size: Some(vec![64]),
                width: 0.25,
            },
        )
        .unwrap();
        let convs = conv_cases(&g, 1, "resnet50", &[]);
        let convs_in_graph = g
            .layers()
            .iter()
            .filter(|l| matches!(l.op, Op::Conv(_)))
            .count();
        assert!(convs.len() < convs_in_graph, "ResNet repeats block shapes");
        for (i, a) in convs.iter().enumerate() {
            for b in &convs[i + 1..] {
                assert_ne!(
                    ConvCase {
                        label: String::new(),
                        ..a.clone()
                    },
                    ConvCase {
                        label: String::new(),
                        ..b.clone()
                    }
                );
            }
        }
    }

    #[test]
    fn channels_last_convolutions_are_their_own_records() {
        let g = workloads::build("cosmoflow", &BuildOptions::default()).unwrap();
        let first = conv_cases(&g, 1, "cosmoflow", &[])[0].clone();
        let last = ConvCase {
            layout: Layout::ChannelsLast,
            ..first.clone()
        };
        let (a, b) = (
            Case::Conv(first, ConvPass::Forward),
            Case::Conv(last, ConvPass::Forward),
        );
        // Channels-first records keep the shape they had before layouts.
        assert!(a.measured().unwrap().shape_json().get("layout").is_none());
        assert_eq!(
            b.measured().unwrap().shape_json()["layout"],
            "channels-last"
        );
        let cpu = cpu();
        assert_ne!(a.id(&*cpu).unwrap(), b.id(&*cpu).unwrap());
        assert!(b.describe().contains("channels-last"));
    }

    #[test]
    fn op_records_describe_the_op() {
        let case = OpCase {
            op: Op::max_pool(ridgeline_model::graph::Pool::new(&[2, 2])),
            input: vec![3, 8, 8],
            batch: 2,
            format: Format::Fp32,
        };
        let fp16 = Case::Op(
            OpCase {
                format: Format::Fp16,
                ..case.clone()
            },
            Pass::Backward,
        );
        assert_eq!(fp16.precision(), RecordPrecision::Fp16);
        // 16-bit records are GPU records: the CPU says so.
        let e = fp16
            .run(&mut *cpu(), &Protocol::quick())
            .unwrap_err()
            .to_string();
        assert!(e.contains("fp16") && e.contains("--device cuda"), "{e}");
        let c = Case::Op(case, Pass::Backward);
        let Measured::Op(shape) = c.measured().unwrap() else {
            panic!("an op case measures an op")
        };
        assert_eq!(shape.op.op, "max-pool");
        assert_eq!(shape.op.params["kernel"], serde_json::json!([2, 2]));
        let r = c.run(&mut *cpu(), &Protocol::quick()).unwrap();
        assert!(r[0].bytes > 0.0 && r[0].kind() == RecordKind::Op);
    }

    #[test]
    fn workload_records_join_the_model_layer_by_layer() {
        let g = cosmoflow(0.125);
        let case = Case::Workload(Box::new(g.clone()), 1, Precision::Fp32);
        let p = Protocol {
            min_samples: 2,
            max_samples: 2,
            ..Protocol::quick()
        };
        let records = case.run(&mut *cpu(), &p).unwrap();
        let step = records.last().unwrap();
        assert_eq!(step.kind(), RecordKind::WorkloadStep);
        assert_eq!(step.id, case.id(&*cpu()).unwrap());
        assert!(step.extra.peak_bytes.unwrap() > 0);
        let cost = cost::cost(&g, 1, Precision::Fp32);
        let forward: Vec<&LayerShape> = records
            .iter()
            .filter_map(|r| match &r.measured {
                Measured::WorkloadLayer(l) if l.pass == Pass::Forward => Some(l),
                _ => None,
            })
            .collect();
        assert_eq!(
            forward.len(),
            g.layers().len() - 1,
            "every layer but the input"
        );
        let sum: f64 = records
            .iter()
            .filter(|r| r.kind() == RecordKind::WorkloadLayer)
            .map(|r| r.flops)
            .sum();
        assert!((sum - cost.flops_train.value()).abs() <= 1e-9 * sum);
        for r in &forward {
            assert!(g.find(&r.layer).is_some());
        }
        let ids: std::collections::HashSet<&str> = records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids.len(), records.len(), "ids are unique");
    }

    #[test]
    fn what_a_backend_noted_of_a_pass_goes_to_that_pass_record() {
        let g = cosmoflow(0.125);
        let p = Protocol {
            min_samples: 1,
            max_samples: 1,
            ..Protocol::quick()
        };
        let backend = cpu();
        let mut run = backend_run(&g, &p);
        let conv = run.layers.iter().position(|l| l.name == "conv3d").unwrap();
        let note = |v: &str| BTreeMap::from([("cudnn_forward_algorithm".to_owned(), v.into())]);
        run.layers[conv].notes = PassNotes {
            forward: note("A"),
            backward: note("B"),
        };
        let records = workload_records(
            &g,
            1,
            Precision::Fp32,
            &run,
            run_shape(&g, 1),
            &|m, s, f, b| {
                Record::new(
                    m,
                    Precision::Fp32.into(),
                    backend.device(),
                    1,
                    s,
                    f,
                    b,
                    backend.env(),
                )
            },
        );
        let noted: Vec<(Pass, &serde_json::Value)> = records
            .iter()
            .filter_map(|r| match &r.measured {
                Measured::WorkloadLayer(l) => {
                    Some((l.pass, r.extra.notes.get("cudnn_forward_algorithm")?))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            noted,
            [(Pass::Forward, &"A".into()), (Pass::Backward, &"B".into())]
        );
        let forward = records
            .iter()
            .find(|r| matches!(&r.measured, Measured::WorkloadLayer(l) if l.layer == "conv3d" && l.pass == Pass::Forward))
            .unwrap();
        let json = serde_json::to_string(forward).unwrap();
        assert!(json.contains(r#""cudnn_forward_algorithm":"A""#), "{json}");
    }

    /// One measured step of `g` on the CPU.
    fn backend_run(g: &Graph, p: &Protocol) -> WorkloadRun {
        cpu().workload(g, 1, Precision::Fp32, p).unwrap()
    }
}
