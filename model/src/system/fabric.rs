//! The collective model's fabric of a job on a system's nodes: the links a collective
//! crosses, from the system's figures.

use crate::collective::{
    CALL_LATENCY_S, Fabric, LinkCost, STEP_LATENCY_NETWORK_S, STEP_LATENCY_NVLINK_S,
    STEP_LATENCY_PCIE_S,
};
use crate::error::{Error, Result};

use super::{LogGpFigures, System};

impl Fabric {
    /// The fabric of a job on `nodes` nodes of `system`.
    pub fn of(system: &System, nodes: u32) -> Result<Fabric> {
        let node = &system.node;
        let k = node.devices.value;
        let mut known = true;
        let intra = if k > 1 {
            let none = LogGpFigures::default();
            let (bw, loggp) = match (&node.nvlink, &node.pcie) {
                (Some(l), _) => (l.value, &node.nvlink_loggp),
                (None, Some(p)) => (p.value, &none),
                (None, None) => {
                    return Err(Error::argument(
                        "system",
                        &system.name,
                        format!(
                            "its nodes hold {k} devices but give no device link \
                             (node.nvlink_gbs or node.pcie_gbs), so gradients cannot be \
                             reduced inside a node"
                        ),
                    ));
                }
            };
            known &= loggp.known();
            let default = if node.nvlink.is_some() {
                STEP_LATENCY_NVLINK_S
            } else {
                STEP_LATENCY_PCIE_S
            };
            Some(LinkCost {
                alpha: if loggp.known() {
                    loggp.alpha().value()
                } else {
                    default
                },
                beta: 1.0 / bw.value(),
                g: loggp.gap().value(),
                exchange: None,
            })
        } else {
            None
        };
        let (nic, nics) = if nodes > 1 {
            let (Some(count), Some(bw)) = (&node.nics, &node.nic_bandwidth) else {
                return Err(Error::argument(
                    "nodes",
                    nodes,
                    format!(
                        "system `{}` gives no network (node.nics and node.nic_gbs), so it \
                         cannot train on more than one node",
                        system.name
                    ),
                ));
            };
            let loggp = &node.nic_loggp;
            known &= loggp.known();
            let cost = LinkCost {
                alpha: if loggp.known() {
                    loggp.alpha().value()
                } else {
                    STEP_LATENCY_NETWORK_S
                },
                beta: 1.0 / bw.value.value(),
                g: loggp.gap().value(),
                exchange: None,
            };
            (Some(cost), count.value)
        } else {
            (None, 0)
        };
        // The reduction reads two operands and writes one at the device's memory bandwidth;
        // where that is unknown until measured, it is not counted.
        let gamma = system
            .device
            .memory_bandwidth
            .as_ref()
            .map_or(0.0, |b| 3.0 / b.value.value());
        Ok(Fabric {
            k,
            n: nodes,
            intra,
            nic,
            nics,
            gamma,
            reduction: None,
            latencies_known: known,
            call_latency: if known { 0.0 } else { CALL_LATENCY_S },
        })
    }
}
