//! The levels data moves through, as LogGP parameters per device (Alexandrov et al.,
//! *LogGP*, SPAA 1995; \[004\] §V-C).
//!
//! A k-byte message over a level costs `L + 2o + (k - 1) G`: a start-up latency (given in
//! system files as `*_latency_us`, which stands for the whole `L + 2o`) and a gap per byte
//! `G = 1 / bandwidth`. Bulk streams are bandwidth-bound, so a level without a latency
//! figure is modelled with `L + 2o = 0` and the prediction says so. A level that the k
//! devices of a node share (host memory, NVMe, the NICs, the node's share of the parallel
//! file system, capped by the node's network and its `pfs_client_gbs`) gives each device
//! `G x k` — docs/ARCHITECTURE.md "Formulas"; this is how \[004\] Fig. 4
//! prices a byte on Cori GPU (HBM 1 : InfiniBand 72 : PCIe gen3 56 : NVMe 2250).

use std::fmt;

use serde::Serialize;

use crate::system::{LogGpFigures, System};
use crate::units::{ByteRate, Bytes, Seconds};

/// A level of the memory, storage and network hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// Device memory (HBM, or DRAM for a CPU device).
    Hbm,
    /// Host memory (DDR), shared by the node's devices.
    HostMemory,
    /// The device's host link (PCIe).
    Pcie,
    /// The device-to-device fabric inside a node (NVLink, NVSwitch, Infinity Fabric).
    Nvlink,
    /// The node's network interfaces, shared by its devices.
    Network,
    /// Node-local NVMe, shared by the node's devices.
    Nvme,
    /// The burst buffer: the node's share of its aggregate bandwidth.
    BurstBuffer,
    /// The parallel file system: the node's share of its aggregate bandwidth.
    Pfs,
}

impl Level {
    /// Name used in output.
    pub const fn name(self) -> &'static str {
        match self {
            Level::Hbm => "hbm",
            Level::HostMemory => "host-memory",
            Level::Pcie => "pcie",
            Level::Nvlink => "nvlink",
            Level::Network => "network",
            Level::Nvme => "nvme",
            Level::BurstBuffer => "burst-buffer",
            Level::Pfs => "pfs",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One level as one device sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Link {
    /// Which level.
    pub level: Level,
    /// The level's bandwidth (per direction) before sharing.
    pub bandwidth: ByteRate,
    /// How many devices share it.
    pub shared_by: u32,
    /// Start-up cost `L + 2o`; zero when the system file gives none.
    pub latency: Seconds,
    /// Whether `L` comes from the system file.
    pub latency_known: bool,
    /// LogGP `g`: the least time between a sender's consecutive messages.
    pub message_gap: Seconds,
    /// Where the bandwidth figure comes from.
    pub source: String,
}

impl Link {
    /// Seconds per byte for one device: `G x shared_by`.
    pub fn gap(&self) -> f64 {
        f64::from(self.shared_by) / self.bandwidth.value()
    }

    /// The bandwidth one device gets.
    pub fn per_device(&self) -> ByteRate {
        ByteRate::new(self.bandwidth.value() / f64::from(self.shared_by))
    }

    /// LogGP time of one message of `bytes` bytes for one device: `L + 2o + (k - 1) G`.
    pub fn message(&self, bytes: Bytes) -> Seconds {
        let k = bytes.value();
        if k <= 0.0 {
            return Seconds::ZERO;
        }
        self.latency + Seconds::new((k - 1.0).max(0.0) * self.gap())
    }

    /// LogGP time of `count` back-to-back messages of `bytes` bytes each from one sender:
    /// a new message starts every `max(g, (k - 1) G + o)`, the last one then lands.
    #[allow(clippy::cast_precision_loss)]
    pub fn train(&self, count: u64, bytes: Bytes) -> Seconds {
        if count == 0 {
            return Seconds::ZERO;
        }
        let per = Seconds::new((bytes.value() - 1.0).max(0.0) * self.gap()).max(self.message_gap);
        per * (count - 1) as f64 + self.message(bytes)
    }
}

/// Every level a system describes, for one device when the job uses `nodes` nodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hierarchy {
    /// The levels present, device memory first.
    pub links: Vec<Link>,
}

impl Hierarchy {
    /// The levels of `system` seen by one device of a job on `nodes` nodes (the node's
    /// share of the parallel file system depends on how many nodes read it; it is capped by
    /// the node's network, which carries it).
    pub fn of(system: &System, nodes: u32) -> Hierarchy {
        let node = &system.node;
        let k = node.devices.value;
        let link =
            |level, bandwidth: ByteRate, shared_by, loggp: Option<&LogGpFigures>, source: &str| {
                Link {
                    level,
                    bandwidth,
                    shared_by,
                    latency: loggp.map_or(Seconds::ZERO, LogGpFigures::alpha),
                    latency_known: loggp.is_some_and(LogGpFigures::known),
                    message_gap: loggp.map_or(Seconds::ZERO, LogGpFigures::gap),
                    source: source.to_owned(),
                }
            };
        // A device whose bandwidth is unknown until measured has no HBM level: nothing is
        // costed relative to it.
        let mut links: Vec<Link> = system
            .device
            .memory_bandwidth
            .iter()
            .map(|d| link(Level::Hbm, d.value, 1, None, &d.source))
            .collect();
        if let Some(h) = &node.host_memory_bandwidth {
            links.push(link(Level::HostMemory, h.value, k, None, &h.source));
        }
        if let Some(p) = &node.pcie {
            links.push(link(Level::Pcie, p.value, 1, None, &p.source));
        }
        if let Some(n) = &node.nvlink {
            links.push(link(
                Level::Nvlink,
                n.value,
                1,
                Some(&node.nvlink_loggp),
                &n.source,
            ));
        }
        let network = node_network(system);
        if let Some((bw, source)) = &network {
            links.push(link(Level::Network, *bw, k, Some(&node.nic_loggp), source));
        }
        if let Some(r) = &node.nvme_read {
            links.push(link(Level::Nvme, r.value, k, None, &r.source));
        }
        // Shared tiers: the node's share of the aggregate, capped by its network (which
        // carries it) and, for the PFS, by its client.
        let share = |total: ByteRate, client: Option<&ByteRate>| {
            let share = total.value() / f64::from(nodes.max(1));
            let capped = network
                .as_ref()
                .map_or(share, |(bw, _)| share.min(bw.value()));
            ByteRate::new(client.map_or(capped, |c| capped.min(c.value())))
        };
        if let Some(b) = &system.cluster.burst_buffer_bandwidth {
            let source = format!("{} / {nodes} nodes, capped by the node's network", b.source);
            links.push(link(
                Level::BurstBuffer,
                share(b.value, None),
                k,
                None,
                &source,
            ));
        }
        if let Some(p) = &system.cluster.pfs_bandwidth {
            let source = format!(
                "{} / {nodes} nodes, capped by the node's network and PFS client",
                p.source
            );
            let client = node.pfs_client.as_ref().map(|c| &c.value);
            links.push(link(Level::Pfs, share(p.value, client), k, None, &source));
        }
        Hierarchy { links }
    }

    /// The level, if the system has it.
    pub fn get(&self, level: Level) -> Option<&Link> {
        self.links.iter().find(|l| l.level == level)
    }

    /// A level's gap relative to device memory's (the "relative cost of a byte" of \[004\]
    /// Fig. 4).
    pub fn relative_cost(&self, level: Level) -> Option<f64> {
        let hbm = self.get(Level::Hbm)?.gap();
        self.get(level).map(|l| l.gap() / hbm)
    }
}

/// The node's aggregate network bandwidth (`nics x nic_gbs`) and its source.
pub(crate) fn node_network(system: &System) -> Option<(ByteRate, String)> {
    let node = &system.node;
    match (&node.nics, &node.nic_bandwidth) {
        (Some(n), Some(bw)) => Some((
            ByteRate::new(f64::from(n.value) * bw.value.value()),
            format!(
                "{} NICs ({}) x {} ({})",
                n.value, n.source, bw.value, bw.source
            ),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;

    /// \[004\] Fig. 4 caption: on Cori GPU a byte costs, relative to HBM, 72 over InfiniBand,
    /// 56 over PCIe gen3 and 2250 from NVMe.
    #[test]
    fn cori_gpu_relative_byte_costs_match_ibrahim_fig4() {
        let h = Hierarchy::of(&catalog::system("cori-gpu").unwrap(), 8);
        let rel = |l| h.relative_cost(l).unwrap();
        assert_eq!(rel(Level::Hbm), 1.0);
        assert!(
            (rel(Level::Network) - 72.0).abs() < 0.5,
            "{}",
            rel(Level::Network)
        );
        assert!(
            (rel(Level::Pcie) - 56.0).abs() < 0.5,
            "{}",
            rel(Level::Pcie)
        );
        assert!(
            (rel(Level::Nvme) - 2250.0).abs() < 1.0,
            "{}",
            rel(Level::Nvme)
        );
    }

    #[test]
    fn shared_levels_divide_bandwidth_among_devices() {
        let s = catalog::system("cori-gpu").unwrap();
        let h = Hierarchy::of(&s, 1);
        let nvme = h.get(Level::Nvme).unwrap();
        assert_eq!(nvme.shared_by, 8);
        assert_eq!(nvme.per_device(), ByteRate::from_gbs(0.4));
        // One node reads Lustre at most at its network's 100 GB/s, not the whole 700 GB/s.
        assert_eq!(
            h.get(Level::Pfs).unwrap().bandwidth,
            ByteRate::from_gbs(100.0)
        );
        // 18 nodes share 700 GB/s.
        let h18 = Hierarchy::of(&s, 18);
        assert!((h18.get(Level::Pfs).unwrap().bandwidth.as_gbs() - 700.0 / 18.0).abs() < 1e-9);
    }

    #[test]
    fn loggp_message_cost() {
        let s = catalog::system("cori-gpu").unwrap();
        let h = Hierarchy::of(&s, 2);
        let net = h.get(Level::Network).unwrap();
        assert!(net.latency_known);
        let one = net.message(Bytes::new(1.0));
        assert_eq!(one, net.latency);
        let big = net.message(Bytes::from_gb(1.0));
        assert!((big.value() - (0.6e-6 + (1e9 - 1.0) * 8.0 / 100e9)).abs() < 1e-12);
        assert_eq!(net.message(Bytes::ZERO), Seconds::ZERO);
        // Without a message gap, a train of messages is bandwidth-bound.
        let train = net.train(10, Bytes::from_gb(0.1));
        assert!((train.value() - (0.6e-6 + (1e9 - 10.0) * 8.0 / 100e9)).abs() < 1e-9);
    }

    #[test]
    fn small_messages_are_paced_by_the_message_gap() {
        let mut net = Link {
            level: Level::Network,
            bandwidth: ByteRate::from_gbs(10.0),
            shared_by: 1,
            latency: Seconds::new(1e-6),
            latency_known: true,
            message_gap: Seconds::new(2e-6),
            source: String::new(),
        };
        let t = net.train(100, Bytes::new(8.0));
        assert!((t.value() - (99.0 * 2e-6 + 1e-6 + 7.0 / 10e9)).abs() < 1e-15);
        net.message_gap = Seconds::ZERO;
        assert!(net.train(100, Bytes::new(8.0)) < t);
    }

    #[test]
    fn a_lone_device_has_only_its_memory() {
        let h = Hierarchy::of(&catalog::system("h100-sxm5-80gb").unwrap(), 1);
        assert_eq!(h.links.len(), 1);
        assert_eq!(h.links[0].level, Level::Hbm);
    }
}
