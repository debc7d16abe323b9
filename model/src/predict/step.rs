//! The step model: a workload at a precision as per-layer affine costs of the batch
//! ([`StepModel`]), and a device's attained rates.

use serde::Serialize;

use crate::cost::{self, GraphCost};
use crate::error::Result;
use crate::graph::Graph;
use crate::kernels::{Kernel, step_kernels};
use crate::memory::{Footprint, Optimizer};
use crate::precision::Precision;
use crate::profile::{Profile, precision_name};
use crate::roofline::Efficiency;
use crate::system::System;

/// Per-layer costs of a workload at a precision as affine functions of the batch size:
/// FLOPs `f x b`, bytes `a x b + w`. Flat arrays, one entry per layer that does any work.
#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    pub(super) workload: String,
    pub(super) precision: Precision,
    pub(super) matrix: Vec<bool>,
    pub(super) flops_fwd: Vec<f64>,
    pub(super) flops_bwd: Vec<f64>,
    pub(super) act_fwd: Vec<f64>,
    pub(super) weights_fwd: Vec<f64>,
    pub(super) act_bwd: Vec<f64>,
    pub(super) weights_bwd: Vec<f64>,
    /// Each layer's kernels at batch 1 and at batch 2 (their features are affine in the
    /// batch, so any batch follows), for calibrated profiles.
    pub(super) kernels: Vec<[Vec<Kernel>; 2]>,
    /// Bytes the optimizer update moves: read the gradient, read and write the FP32 weights
    /// (and the compute copy under mixed precision), read and write the optimizer state.
    pub update_bytes: f64,
    /// Training FLOPs per sample.
    pub flops_per_sample: f64,
    /// HBM bytes of a step: per sample and fixed.
    pub hbm_per_sample: f64,
    /// HBM bytes of a step that do not depend on the batch (weights).
    pub hbm_fixed: f64,
    /// Trainable parameters.
    pub params: u64,
    /// Elements of one input sample.
    pub input_elements: u64,
    /// The memory footprint (SGD with momentum unless built otherwise).
    pub footprint: Footprint,
}

impl StepModel {
    /// The model of `graph` at `precision`, with `optimizer` for the footprint.
    pub fn new(graph: &Graph, precision: Precision, optimizer: Optimizer) -> StepModel {
        let one = cost::cost(graph, 1, precision);
        let two = cost::cost(graph, 2, precision);
        Self::from_costs(graph, &one, &two, optimizer)
    }

    fn from_costs(
        graph: &Graph,
        one: &GraphCost<'_>,
        two: &GraphCost<'_>,
        optimizer: Optimizer,
    ) -> StepModel {
        let mut m = StepModel {
            workload: graph.name().to_owned(),
            precision: one.precision,
            matrix: Vec::new(),
            flops_fwd: Vec::new(),
            flops_bwd: Vec::new(),
            act_fwd: Vec::new(),
            weights_fwd: Vec::new(),
            act_bwd: Vec::new(),
            weights_bwd: Vec::new(),
            kernels: Vec::new(),
            update_bytes: 0.0,
            flops_per_sample: one.flops_train.value(),
            hbm_per_sample: two.hbm_bytes_train.value() - one.hbm_bytes_train.value(),
            hbm_fixed: 2.0 * one.hbm_bytes_train.value() - two.hbm_bytes_train.value(),
            params: one.params,
            input_elements: graph.input_shape().elements(),
            footprint: Footprint::from_cost(graph, one, optimizer),
        };
        let fp32 = 4.0 * one.params as f64;
        let compute_copy = if one.precision.compute_bytes() < 4 {
            one.params as f64 * one.precision.compute_bytes() as f64
        } else {
            0.0
        };
        m.update_bytes = 3.0 * fp32 + compute_copy + 2.0 * m.footprint.optimizer_state.value();
        let (k1, k2) = (step_kernels(graph, one), step_kernels(graph, two));
        for (((a, b), k1), k2) in one.layers.iter().zip(&two.layers).zip(k1).zip(k2) {
            let work = a.flops_fwd.value() + a.flops_bwd.value();
            let bytes = a.hbm_bytes_fwd.value() + a.hbm_bytes_bwd.value();
            if work == 0.0 && bytes == 0.0 {
                continue;
            }
            // Bytes are affine in the batch: a b + w, from b = 1 and b = 2.
            let (f1, f2) = (a.hbm_bytes_fwd.value(), b.hbm_bytes_fwd.value());
            let (g1, g2) = (a.hbm_bytes_bwd.value(), b.hbm_bytes_bwd.value());
            m.matrix.push(a.matrix);
            m.kernels.push([k1, k2]);
            m.flops_fwd.push(a.flops_fwd.value());
            m.flops_bwd.push(a.flops_bwd.value());
            m.act_fwd.push(f2 - f1);
            m.weights_fwd.push(2.0 * f1 - f2);
            m.act_bwd.push(g2 - g1);
            m.weights_bwd.push(2.0 * g1 - g2);
        }
        m
    }

    /// The precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The workload's name.
    pub fn workload(&self) -> &str {
        &self.workload
    }

    /// Forward time and training-step time of one device at local batch `b`: the sum over
    /// layers and passes of `max(F / (peak x eff), B / (BW x eff))` — or, for layers a
    /// calibrated `profile` has fits for, their fitted kernel times — plus the optimizer
    /// update at the memory bandwidth.
    pub fn device_times(
        &self,
        b: f64,
        rates: &DeviceRates,
        profile: Option<&Profile>,
    ) -> (f64, f64) {
        let mut fwd = 0.0;
        let mut bwd = self.update_bytes / rates.bandwidth;
        let precision = precision_name(self.precision);
        for i in 0..self.matrix.len() {
            if let Some(p) = profile {
                let [k1, k2] = &self.kernels[i];
                let fitted = (!k1.is_empty())
                    .then(|| Some((p.layer_times(k1, precision)?, p.layer_times(k2, precision)?)))
                    .flatten();
                if let Some(((f1, b1), (f2, b2))) = fitted {
                    fwd += f1 + (f2 - f1) * (b - 1.0);
                    bwd += b1 + (b2 - b1) * (b - 1.0);
                    continue;
                }
            }
            let peak = if self.matrix[i] {
                rates.matrix
            } else {
                rates.vector
            };
            fwd += (b * self.flops_fwd[i] / peak)
                .max((b * self.act_fwd[i] + self.weights_fwd[i]) / rates.bandwidth);
            bwd += (b * self.flops_bwd[i] / peak)
                .max((b * self.act_bwd[i] + self.weights_bwd[i]) / rates.bandwidth);
        }
        (fwd, fwd + bwd)
    }
}

/// A device's attained rates: matrix and vector FLOP/s and memory bytes/s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DeviceRates {
    /// FLOP/s of matrix ops.
    pub matrix: f64,
    /// FLOP/s of vector ops.
    pub vector: f64,
    /// Bytes/s of device memory.
    pub bandwidth: f64,
}

impl DeviceRates {
    /// The rates of `system`'s device at `precision` with `efficiency`.
    pub fn of(system: &System, precision: Precision, efficiency: Efficiency) -> Result<Self> {
        let d = &system.device;
        Ok(DeviceRates {
            matrix: d.matrix_peak(precision)?.rate.value() * efficiency.compute,
            vector: d.vector_peak(precision)?.rate.value() * efficiency.compute,
            // Unknown until measured (`local`): memory time is not counted, and the
            // prediction says so (a lower bound on time).
            bandwidth: d
                .memory_bandwidth
                .as_ref()
                .map_or(f64::INFINITY, |b| b.value.value() * efficiency.memory),
        })
    }
}
