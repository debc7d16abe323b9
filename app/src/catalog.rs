//! The catalog as commands list it: every shipped system and device, and the figures of one
//! system with their sources.

use anyhow::Result;
use ridgeline_model::catalog;
use ridgeline_model::stack::{Dispatch, Fp8Layers, FusionRule, MathMode, Recompute, Stack};
use ridgeline_model::system::{DeviceKind, Sourced, System};
use ridgeline_model::units::{ByteRate, Bytes, FlopRate, Seconds};
use serde::Serialize;

use crate::columns::{Col, Style, num, text};

/// One row of `system list`.
#[derive(Debug, Serialize)]
pub struct Listed {
    name: String,
    /// `system` or `device`.
    kind: &'static str,
    device: String,
    devices_per_node: Option<u32>,
    nodes: Option<u32>,
    description: String,
}

/// Every shipped system, `local`, then every shipped device.
pub fn listing() -> Result<Vec<Listed>> {
    let mut rows = Vec::new();
    for entry in catalog::SYSTEMS {
        let s = catalog::system(entry.name)?;
        rows.push(Listed {
            name: s.name,
            kind: "system",
            device: s.device.name,
            devices_per_node: Some(s.node.devices.value),
            nodes: Some(s.cluster.nodes.value),
            description: s.description.unwrap_or_default(),
        });
    }
    rows.push(Listed {
        name: catalog::LOCAL_NAME.to_owned(),
        kind: "system",
        device: "described from this machine".to_owned(),
        devices_per_node: Some(1),
        nodes: Some(1),
        description: "this machine (`ridgeline system show local`)".to_owned(),
    });
    for entry in catalog::DEVICES {
        let d = catalog::device(entry.name)?;
        rows.push(Listed {
            name: d.name.clone(),
            kind: "device",
            device: d.name,
            devices_per_node: None,
            nodes: None,
            description: d.description.unwrap_or(d.model),
        });
    }
    Ok(rows)
}

/// The columns of the listing.
pub fn listing_cols() -> [Col<Listed>; 6] {
    [
        text("name", "name", |r, _| r.name.clone()),
        text("kind", "kind", |r, _| r.kind.to_owned()),
        text("device", "device", |r, _| r.device.clone()),
        num("devices/node", "devices_per_node", |r, s| {
            r.devices_per_node.map_or_else(String::new, |n| s.count(n))
        }),
        num("nodes", "nodes", |r, s| {
            r.nodes.map_or_else(String::new, |n| s.count(n))
        }),
        text("description", "description", |r, _| r.description.clone()),
    ]
}

/// One figure of a system as `system show` lists it: the field, its value in both styles
/// and its source.
#[derive(Debug)]
pub struct SystemFigure {
    field: String,
    human: String,
    raw: String,
    source: String,
}

struct Figures(Vec<SystemFigure>);

impl Figures {
    fn add<T>(&mut self, field: &str, v: Option<&Sourced<T>>, fmt: impl Fn(&T, Style) -> String) {
        if let Some(v) = v {
            self.0.push(SystemFigure {
                field: field.to_owned(),
                human: fmt(&v.value, Style::Human),
                raw: fmt(&v.value, Style::Raw),
                source: v.source.clone(),
            });
        }
    }

    fn text(&mut self, field: &str, v: Option<&str>) {
        if let Some(v) = v {
            self.0.push(SystemFigure {
                field: field.to_owned(),
                human: v.to_owned(),
                raw: v.to_owned(),
                source: String::new(),
            });
        }
    }
}

/// Every figure of `s`, device then node then cluster, each with its source.
pub fn figures(s: &System) -> Vec<SystemFigure> {
    let flops = |v: &FlopRate, st: Style| st.flop_rate(*v);
    let bytes = |v: &Bytes, st: Style| st.bytes(*v);
    let rate = |v: &ByteRate, st: Style| st.byte_rate(*v);
    let count = |v: &u32, st: Style| st.count(u64::from(*v));
    let watts = |v: &f64, st: Style| match st {
        Style::Human => format!("{v:.0} W"),
        Style::Raw => v.to_string(),
    };
    let secs = |v: &Seconds, st: Style| st.seconds(*v);
    let plain = |v: &f64, st: Style| st.number(Some(*v), 2);
    let d = &s.device;
    let mut f = Figures(Vec::new());
    f.text("device.name", Some(&d.name));
    f.text(
        "device.kind",
        Some(if d.kind == DeviceKind::Gpu {
            "gpu"
        } else {
            "cpu"
        }),
    );
    f.text("device.model", Some(&format!("{} {}", d.vendor, d.model)));
    f.add("device.cores", d.cores.as_ref(), count);
    let p = &d.peak;
    for (field, v) in [
        ("device.peak.fp64", &p.fp64),
        ("device.peak.fp32", &p.fp32),
        ("device.peak.fp16", &p.fp16),
        ("device.peak.bf16", &p.bf16),
        ("device.peak.fp64_tensor", &p.fp64_tensor),
        ("device.peak.fp32_tensor", &p.fp32_tensor),
        ("device.peak.tf32_tensor", &p.tf32_tensor),
        ("device.peak.fp16_tensor", &p.fp16_tensor),
        ("device.peak.bf16_tensor", &p.bf16_tensor),
        ("device.peak.fp8_tensor", &p.fp8_tensor),
    ] {
        f.add(field, v.as_ref(), flops);
    }
    f.add("device.sms", d.sms.as_ref(), count);
    let mhz = |v: &f64, st: Style| match st {
        Style::Human => format!("{:.0} MHz", v / 1e6),
        Style::Raw => v.to_string(),
    };
    f.add("device.boost_clock", d.boost_clock_hz.as_ref(), mhz);
    let nm = |v: &f64, st: Style| match st {
        Style::Human => format!("{v} nm"),
        Style::Raw => v.to_string(),
    };
    f.add("device.process", d.process_nm.as_ref(), nm);
    f.add("device.memory_capacity", d.memory_capacity.as_ref(), bytes);
    match &d.memory_bandwidth {
        Some(bw) => f.add("device.memory_bandwidth", Some(bw), rate),
        None => f.0.push(SystemFigure {
            field: "device.memory_bandwidth".to_owned(),
            human: "unknown until measured".into(),
            raw: String::new(),
            source:
                "calibrate a profile to supply it (ridgeline measure suite; ridgeline calibrate)"
                    .into(),
        }),
    }
    f.add("device.llc", d.llc.as_ref(), bytes);
    f.add("device.tdp_w", d.tdp_w.as_ref(), watts);
    let n = &s.node;
    f.add("node.devices", Some(&n.devices), count);
    f.text("node.cpu", n.cpu.as_deref());
    f.add("node.host_memory", n.host_memory.as_ref(), bytes);
    f.add(
        "node.host_memory_bandwidth",
        n.host_memory_bandwidth.as_ref(),
        rate,
    );
    f.add("node.pcie", n.pcie.as_ref(), rate);
    f.add("node.nvlink", n.nvlink.as_ref(), rate);
    f.add("node.nvlink_latency", n.nvlink_loggp.latency.as_ref(), secs);
    f.add(
        "node.nvlink_overhead",
        n.nvlink_loggp.overhead.as_ref(),
        secs,
    );
    f.add(
        "node.nvlink_message_gap",
        n.nvlink_loggp.message_gap.as_ref(),
        secs,
    );
    f.add("node.nvme_capacity", n.nvme_capacity.as_ref(), bytes);
    f.add("node.nvme_read", n.nvme_read.as_ref(), rate);
    f.add("node.nvme_write", n.nvme_write.as_ref(), rate);
    f.add("node.nics", n.nics.as_ref(), count);
    f.add("node.nic_bandwidth", n.nic_bandwidth.as_ref(), rate);
    f.add("node.nic_latency", n.nic_loggp.latency.as_ref(), secs);
    f.add("node.nic_overhead", n.nic_loggp.overhead.as_ref(), secs);
    f.add(
        "node.nic_message_gap",
        n.nic_loggp.message_gap.as_ref(),
        secs,
    );
    f.add("node.pfs_client", n.pfs_client.as_ref(), rate);
    f.add("node.power_w", n.power_w.as_ref(), watts);
    let c = &s.cluster;
    f.add("cluster.nodes", Some(&c.nodes), count);
    f.text("cluster.network", c.network.as_deref());
    f.text("cluster.pfs", c.pfs.as_deref());
    f.add("cluster.pfs_capacity", c.pfs_capacity.as_ref(), bytes);
    f.add("cluster.pfs_bandwidth", c.pfs_bandwidth.as_ref(), rate);
    f.add(
        "cluster.price_per_node_hour",
        c.price_per_node_hour.as_ref(),
        plain,
    );
    f.0
}

/// The columns of a system's figures.
pub fn figure_cols() -> [Col<SystemFigure>; 3] {
    [
        text("field", "field", |r, _| r.field.clone()),
        text("value", "value", |r, s| {
            if s == Style::Human {
                r.human.clone()
            } else {
                r.raw.clone()
            }
        }),
        text("source", "source", |r, _| r.source.clone()),
    ]
}

/// A built-in stack as `stack list` lists it.
#[derive(Debug, Serialize)]
pub struct ListedStack {
    /// Its name.
    pub name: String,
    /// How its host issues kernels.
    pub dispatch: Dispatch,
    /// Its fusion rules.
    pub fusion: Vec<FusionRule>,
    /// What FP32 training runs convolutions in.
    pub fp32_convolutions: MathMode,
    /// What FP32 training runs products in.
    pub fp32_matmuls: MathMode,
    /// Which layers FP8 training multiplies in FP8.
    pub fp8: Fp8Layers,
    /// What the backward pass recomputes.
    pub recompute: Recompute,
    /// What it describes.
    pub description: String,
}

/// Every built-in stack, the default first.
pub fn stack_listing() -> Result<Vec<ListedStack>> {
    let mut names = catalog::stack_names();
    names.sort_by_key(|n| n != catalog::DEFAULT_STACK);
    names
        .iter()
        .map(|n| {
            let s = catalog::stack(n)?;
            Ok(ListedStack {
                name: s.name,
                dispatch: s.host.dispatch.value,
                fusion: s.fusion.value,
                fp32_convolutions: s.precision.convolutions.value,
                fp32_matmuls: s.precision.matmuls.value,
                fp8: s.precision.fp8.value,
                recompute: s.recompute.value,
                description: s.description,
            })
        })
        .collect()
}

/// The columns of the stack listing.
pub fn stack_listing_cols() -> [Col<ListedStack>; 7] {
    [
        text("name", "name", |r, _| r.name.clone()),
        text("dispatch", "dispatch", |r, _| r.dispatch.to_string()),
        text("fusion", "fusion", |r, _| {
            if r.fusion.is_empty() {
                "none".to_owned()
            } else {
                r.fusion
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }),
        text("fp32 conv / matmul", "fp32_math", |r, _| {
            format!("{} / {}", r.fp32_convolutions.name(), r.fp32_matmuls.name())
        }),
        text("fp8", "fp8", |r, _| r.fp8.name().to_owned()),
        text("recompute", "recompute", |r, _| r.recompute.to_string()),
        text("description", "description", |r, _| r.description.clone()),
    ]
}

/// Every figure of stack `s`, host then device, fusion and precision, each with its source.
pub fn stack_figures(s: &Stack) -> Vec<SystemFigure> {
    let us = |v: &Seconds, st: Style| match st {
        Style::Human => format!("{:.1} us", v.value() * 1e6),
        Style::Raw => v.value().to_string(),
    };
    let word = |v: &dyn std::fmt::Display| v.to_string();
    let h = &s.host;
    let mut f = Figures(Vec::new());
    f.text("name", Some(&s.name));
    f.text("file", Some(&s.file));
    f.add("host.dispatch", Some(&h.dispatch), |v, _| word(v));
    f.add("host.kernel_us", h.kernel.as_ref(), us);
    f.add("host.graph_us", h.graph.as_ref(), us);
    f.add("host.parameter_us", Some(&h.parameter), us);
    f.add("host.optimizer_tensor_us", Some(&h.optimizer_tensor), us);
    for (table, times) in [("forward_us", &h.forward), ("backward_us", &h.backward)] {
        if let Some(t) = times {
            f.add(&format!("host.{table}.default"), t.default.as_ref(), us);
            for (kind, v) in &t.kinds {
                f.add(&format!("host.{table}.{kind}"), Some(v), us);
            }
        }
    }
    f.add("device.kernel_gap_us", Some(&s.kernel_gap), us);
    f.add("fusion.rules", Some(&s.fusion), |v, _| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.iter().map(|r| r.name()).collect::<Vec<_>>().join(", ")
        }
    });
    f.add(
        "precision.fp32_convolutions",
        Some(&s.precision.convolutions),
        |v, _| v.name().to_owned(),
    );
    f.add(
        "precision.fp32_matmuls",
        Some(&s.precision.matmuls),
        |v, _| v.name().to_owned(),
    );
    f.add("precision.fp8", Some(&s.precision.fp8), |v, _| {
        v.name().to_owned()
    });
    f.add("memory.recompute", Some(&s.recompute), |v, _| word(v));
    f.add("memory.tied_copies", s.tied_copies.as_ref(), |v, _| word(v));
    f.add(
        "memory.fp32_gradients",
        s.fp32_gradients.as_ref(),
        |v, _| word(v),
    );
    f.add("data.packing", Some(&s.packing), |v, _| word(v));
    let p = &s.parallel;
    f.add("parallel.schedule", Some(&p.schedule), |v, _| word(v));
    for (field, flag) in [
        ("parallel.distributed_optimizer", &p.distributed_optimizer),
        ("parallel.sequence_parallel", &p.sequence_parallel),
        ("parallel.overlap_gradients", &p.overlap_gradients),
        (
            "parallel.overlap_tensor_parallel",
            &p.overlap_tensor_parallel,
        ),
    ] {
        f.add(field, Some(flag), |v, _| word(v));
    }
    f.0
}
