//! CosmoFlow, after the MLPerf HPC reference (`mlcommons/hpc`, `cosmoflow/models/cosmoflow.py`
//! with `configs/cosmo.yaml`): five blocks of Conv3D ('same' padding, bias), LeakyReLU(0.3)
//! and MaxPool3D(2), with 32, 64, 128, 256, 512 filters; flatten; Dense 128 and 64, each
//! with LeakyReLU and Dropout(0.5); Dense 4 with tanh; output scaled by 1.2; MSE loss.
//! Version 1.0 and later use kernel 3, v0.7 used kernel 2.

use super::naming::Scale;
use crate::graph::{Conv, Graph, LayerError, Op, Padding, Pool};

const FILTERS: [usize; 5] = [32, 64, 128, 256, 512];
const HIDDEN: [usize; 2] = [128, 64];
const OUTPUTS: usize = 4;
/// Keras' LeakyReLU default, used by the reference.
const LEAKY_ALPHA: f64 = 0.3;
const DROPOUT: f64 = 0.5;
const OUTPUT_SCALE: f64 = 1.2;

pub(super) fn check_input(spatial: &[usize]) -> Result<(), String> {
    // Five 2x poolings need at least 32 along each dimension.
    match spatial.iter().find(|&&d| d < 32) {
        Some(d) => Err(format!(
            "extent {d} is too small: five 2x poolings need at least 32"
        )),
        None => Ok(()),
    }
}

pub(super) fn build_v1(spatial: &[usize], w: &Scale) -> Result<Graph, LayerError> {
    build("cosmoflow", 3, spatial, w)
}

pub(super) fn build_v07(spatial: &[usize], w: &Scale) -> Result<Graph, LayerError> {
    build("cosmoflow-v07", 2, spatial, w)
}

fn build(name: &str, kernel: usize, spatial: &[usize], w: &Scale) -> Result<Graph, LayerError> {
    let mut input = vec![4];
    input.extend_from_slice(spatial);
    let mut g = Graph::new(name, input)?;
    for (i, &filters) in FILTERS.iter().enumerate() {
        let suffix = if i == 0 {
            String::new()
        } else {
            format!("_{i}")
        };
        let conv = Conv::new(w.ch(filters), &[kernel; 3]).padding(Padding::Same);
        g.then(format!("conv3d{suffix}"), Op::conv(conv))?;
        g.then(
            format!("leaky_re_lu_{i}"),
            Op::LeakyRelu { alpha: LEAKY_ALPHA },
        )?;
        g.then(
            format!("max_pooling3d_{i}"),
            Op::max_pool(Pool::new(&[2; 3])),
        )?;
    }
    g.then("flatten", Op::Flatten)?;
    for (i, &units) in HIDDEN.iter().enumerate() {
        g.then(
            format!("dense_{i}"),
            Op::Dense {
                out_features: w.ch(units),
                bias: true,
            },
        )?;
        g.then(
            format!("leaky_re_lu_fc{i}"),
            Op::LeakyRelu { alpha: LEAKY_ALPHA },
        )?;
        g.then(format!("dropout_{i}"), Op::Dropout { rate: DROPOUT })?;
    }
    g.then(
        "dense_out",
        Op::Dense {
            out_features: OUTPUTS,
            bias: true,
        },
    )?;
    g.then("tanh", Op::Tanh)?;
    g.then(
        "lambda_scale_1p2",
        Op::Scale {
            factor: OUTPUT_SCALE,
        },
    )?;
    g.then("loss", Op::MseLoss)?;
    Ok(g)
}
