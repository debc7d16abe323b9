//! What a measurement campaign measures: the cases of each micro-kernel command and of a
//! workload run, from the shapes a user names (a workload and its layers, or the reference
//! workloads the suite uses). [`crate::campaign::Runner`] runs them.

use anyhow::{Result, bail};
use ridgeline_measure::host::Caches;
use ridgeline_measure::suite::{self, SOURCES};
use ridgeline_measure::{
    Case, ConvCase, ConvPass, CopyCase, CopyDirection, Format, GemmCase, HostMemory, Layout,
    OpCase, Pass, StreamKernel, conv_cases,
};
use ridgeline_model::graph::Graph;
use ridgeline_model::workloads::{self, BuildOptions};

use crate::inputs::{self, WorkloadSpec};

/// Where shapes come from: one workload (all its layers, or those named) at a batch, or the
/// reference workloads at the suite's inputs and batches.
#[derive(Debug, Clone, Default)]
pub struct Shapes {
    /// The workload; `None` for the reference workloads.
    pub workload: Option<WorkloadSpec>,
    /// Batch size of the workload's shapes.
    pub batch: u64,
    /// Only these layers of the workload (all when empty).
    pub layers: Vec<String>,
}

impl Shapes {
    /// The graphs and batches the shapes come from.
    pub fn sources(&self) -> Result<Vec<(Graph, usize)>> {
        if let Some(spec) = &self.workload {
            let graph = inputs::workload(spec)?;
            if let Some(missing) = self.layers.iter().find(|l| graph.find(l).is_none()) {
                bail!(
                    "--layer `{missing}`: `{}` has no such layer (see `ridgeline workload show {}`)",
                    graph.name(),
                    spec.name
                );
            }
            return Ok(vec![(graph, usize::try_from(self.batch)?)]);
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
}

/// GEMMs of `shapes` (m, n, k; the suite's square sizes when `None`) in every format.
pub fn gemm(shapes: Option<Vec<[usize; 3]>>, formats: &[Format]) -> Vec<Case> {
    let shapes = shapes.unwrap_or_else(|| suite::GEMM_SIZES.iter().map(|&n| [n; 3]).collect());
    formats
        .iter()
        .flat_map(|&format| {
            shapes
                .iter()
                .map(move |&[m, n, k]| Case::Gemm(GemmCase { m, n, k, format }))
        })
        .collect()
}

/// Convolutions: a sweep, or the distinct convolutions of `shapes`; each in every layout,
/// format and pass.
pub fn conv(
    sweep: Option<suite::ConvSweep>,
    shapes: &Shapes,
    layouts: &[Layout],
    formats: &[Format],
    passes: &[ConvPass],
) -> Result<Vec<Case>> {
    let convs = if let Some(sweep) = sweep {
        sweep.cases()
    } else {
        let mut all = Vec::new();
        for (graph, batch) in shapes.sources()? {
            all.extend(conv_cases(&graph, batch, graph.name(), &shapes.layers));
        }
        if all.is_empty() {
            bail!(
                "no convolution layers to measure (transposed convolutions are measured as backward-data)"
            );
        }
        all
    };
    let mut cases = Vec::new();
    for &layout in layouts {
        for &format in formats {
            for &p in passes {
                for c in &convs {
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
    Ok(cases)
}

/// Host-device copies in every direction and kind of host memory, of each size.
pub fn copies(directions: &[CopyDirection], memories: &[HostMemory], sizes: &[usize]) -> Vec<Case> {
    let mut cases = Vec::new();
    for &direction in directions {
        for &memory in memories {
            for &bytes in sizes {
                cases.push(Case::Copy(CopyCase {
                    direction,
                    memory,
                    bytes,
                }));
            }
        }
    }
    cases
}

/// STREAM kernels on arrays of `sizes` bytes each (a size per cache level of `caches` when
/// none are given).
pub fn stream(kernels: &[StreamKernel], sizes: &[usize], caches: Caches) -> Vec<Case> {
    let elements: Vec<usize> = if sizes.is_empty() {
        suite::stream_sizes(caches)
    } else {
        sizes.iter().map(|b| b / 8).collect()
    };
    kernels
        .iter()
        .flat_map(|&k| elements.iter().map(move |&n| Case::Stream(k, n)))
        .collect()
}

/// The non-GEMM ops of `shapes` (all of a workload's, or the layers named; with the suite's
/// extra ops for the reference workloads), of the kinds in `kinds` (all when empty), in
/// every format and pass.
pub fn ops(
    shapes: &Shapes,
    kinds: &[String],
    formats: &[Format],
    passes: &[Pass],
) -> Result<Vec<Case>> {
    let mut of: Vec<OpCase> = Vec::new();
    for (graph, batch) in shapes.sources()? {
        let layers = graph.layers();
        if shapes.layers.is_empty() {
            of.extend(suite::op_cases(&graph, batch));
        } else {
            for name in &shapes.layers {
                let layer = &layers[graph.find(name).unwrap_or_default()];
                of.push(OpCase {
                    op: layer.op.clone(),
                    input: layers[layer.inputs[0]].output.dims().to_vec(),
                    batch,
                    format: Format::Fp32,
                });
            }
        }
    }
    if shapes.workload.is_none() {
        of.extend(suite::extra_ops());
    }
    if let Some(bad) = kinds
        .iter()
        .find(|k| ridgeline_model::file::op_kinds().all(|op| op != k.as_str()))
    {
        bail!(
            "--op `{bad}`: unknown op kind; see `ridgeline workload show` for the kinds a workload uses"
        );
    }
    of.retain(|c| {
        !c.op.is_matrix()
            && !matches!(c.op.kind(), "input" | "flatten")
            && (kinds.is_empty() || kinds.iter().any(|k| k == c.op.kind()))
    });
    if of.is_empty() {
        bail!(
            "no ops to measure: the workload has none of the kinds asked for (convolutions and dense layers: `measure conv`, `measure gemm`)"
        );
    }
    let mut cases = Vec::new();
    for &format in formats {
        for &p in passes {
            cases.extend(of.iter().map(|c| {
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
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resnet(layers: &[&str]) -> Shapes {
        Shapes {
            workload: Some(WorkloadSpec {
                name: "resnet50".into(),
                input_size: Some(vec![64]),
                width: None,
            }),
            batch: 2,
            layers: layers.iter().map(|l| (*l).to_owned()).collect(),
        }
    }

    #[test]
    fn every_thread_count_gets_every_case_in_order() {
        let cases = gemm(Some(vec![[8, 8, 8], [16, 4, 2]]), &[Format::Fp32]);
        let threads: Vec<usize> = crate::campaign::for_threads(&[4, 1], &cases)
            .iter()
            .map(|c| c.0)
            .collect();
        assert_eq!(threads, [4, 4, 1, 1]);
    }

    #[test]
    fn a_named_layer_gives_its_own_convolution_in_every_pass() {
        let passes = [ConvPass::Forward, ConvPass::BackwardFilter];
        let cases = conv(
            None,
            &resnet(&["conv1"]),
            &[Layout::ChannelsFirst],
            &[Format::Fp32],
            &passes,
        )
        .unwrap();
        assert_eq!(cases.len(), 2);
        assert!(
            cases
                .iter()
                .all(|c| matches!(c, Case::Conv(cc, _) if cc.batch == 2 && cc.c_in == 3))
        );
        let err = conv(
            None,
            &resnet(&["conv9"]),
            &[Layout::ChannelsFirst],
            &[Format::Fp32],
            &passes,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--layer `conv9`"), "{err}");
    }

    #[test]
    fn op_kinds_filter_and_an_unknown_kind_is_an_error() {
        let relu = ops(
            &resnet(&[]),
            &["relu".into()],
            &[Format::Fp32],
            &[Pass::Forward],
        )
        .unwrap();
        assert!(!relu.is_empty());
        assert!(
            relu.iter()
                .all(|c| matches!(c, Case::Op(o, _) if o.op.kind() == "relu"))
        );
        let err = ops(
            &resnet(&[]),
            &["relux".into()],
            &[Format::Fp32],
            &[Pass::Forward],
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("--op `relux`: unknown op kind"), "{err}");
    }
}
