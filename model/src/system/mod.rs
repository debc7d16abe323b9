//! Systems: the device, the node built around it, and the cluster of those nodes.
//!
//! Files are read in two stages: `raw` mirrors the TOML exactly and
//! refuses unknown keys; this module checks ranges and cross-field rules once, resolves
//! every number's `source` key to its full citation, and converts to typed quantities.
//! Nothing downstream re-checks. The file format is documented in `data/README.md`.

mod calibrated;
mod fabric;
mod local;
pub(crate) mod raw;

pub(crate) use raw::RawSourced;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::{Error, Result, parse_toml};
use crate::precision::{NumberFormat, Precision};
use crate::units::{Base, ByteRate, Bytes, FlopRate, Seconds};

pub use local::{
    Cache, Clock, CpuInfo, Disk, HostFacts, Processor, local_system, parse_cpuinfo, parse_meminfo,
};

/// Most nodes a system or scenario may have (Fugaku, the largest machine in the catalog,
/// has 158,976): keeps device counts and global batches exact in 64 bits.
pub const MAX_NODES: u32 = 10_000_000;

/// Most devices (or NICs) per node.
pub const MAX_PER_NODE: u32 = 4096;

/// Most CPU cores of one device.
pub const MAX_CORES: u32 = 1 << 20;
/// The most streaming multiprocessors (compute units) a GPU file may give.
pub const MAX_SMS: u32 = 1 << 16;

/// Largest figure a system file may give, in base SI units after conversion (bytes,
/// bytes/s, FLOP/s, W, s): far above any machine (a zettabyte, a zettaflop), and small
/// enough that no product of figures overflows to infinity.
pub const MAX_FIGURE: f64 = 1e24;

/// Smallest figure a system file may give, in the unit its key names (TFLOPS, GB/s, MHz,
/// GiB, us, W): far below any machine (a megaflop, a kilobyte a second, a hertz), and large
/// enough that no time divided by it runs to thousands of years' worth of overflow (a
/// peak of 1e-300 TFLOPS timed a step at 3e299 s).
pub const MIN_FIGURE: f64 = 1e-6;

/// A value and the citation it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sourced<T> {
    /// The value, in base SI units for quantities.
    pub value: T,
    /// Full citation (datasheet, paper and section, or the file read at run time).
    pub source: String,
}

/// Whether a device is an accelerator or a CPU socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A GPU or other accelerator with its own memory.
    Gpu,
    /// A CPU socket; its memory is the node's host memory unless it has on-package memory.
    Cpu,
}

/// Peak throughput per number format: vector units, and matrix (tensor) units.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Peaks {
    /// FP64 vector.
    pub fp64: Option<Sourced<FlopRate>>,
    /// FP32 vector.
    pub fp32: Option<Sourced<FlopRate>>,
    /// FP16 vector (packed half2 on NVIDIA).
    pub fp16: Option<Sourced<FlopRate>>,
    /// BF16 vector.
    pub bf16: Option<Sourced<FlopRate>>,
    /// FP64 on matrix/tensor units.
    pub fp64_tensor: Option<Sourced<FlopRate>>,
    /// FP32 on matrix units (AMD MFMA); NVIDIA has none.
    pub fp32_tensor: Option<Sourced<FlopRate>>,
    /// TF32 on tensor cores.
    pub tf32_tensor: Option<Sourced<FlopRate>>,
    /// FP16 on tensor/matrix units (dense, FP32 accumulate).
    pub fp16_tensor: Option<Sourced<FlopRate>>,
    /// BF16 on tensor/matrix units (dense, FP32 accumulate).
    pub bf16_tensor: Option<Sourced<FlopRate>>,
    /// FP8 (E4M3/E5M2) on tensor/matrix units (dense).
    pub fp8_tensor: Option<Sourced<FlopRate>>,
}

impl Peaks {
    fn get(&self, format: NumberFormat, tensor: bool) -> Option<&Sourced<FlopRate>> {
        match (format, tensor) {
            (NumberFormat::Fp64, false) => self.fp64.as_ref(),
            (NumberFormat::Fp32, false) => self.fp32.as_ref(),
            (NumberFormat::Fp16, false) => self.fp16.as_ref(),
            (NumberFormat::Bf16, false) => self.bf16.as_ref(),
            (NumberFormat::Tf32 | NumberFormat::Fp8, false) => None,
            (NumberFormat::Fp64, true) => self.fp64_tensor.as_ref(),
            (NumberFormat::Fp32, true) => self.fp32_tensor.as_ref(),
            (NumberFormat::Tf32, true) => self.tf32_tensor.as_ref(),
            (NumberFormat::Fp16, true) => self.fp16_tensor.as_ref(),
            (NumberFormat::Bf16, true) => self.bf16_tensor.as_ref(),
            (NumberFormat::Fp8, true) => self.fp8_tensor.as_ref(),
        }
    }

    fn all_mut(&mut self) -> [&mut Option<Sourced<FlopRate>>; 10] {
        [
            &mut self.fp64,
            &mut self.fp32,
            &mut self.fp16,
            &mut self.bf16,
            &mut self.fp64_tensor,
            &mut self.fp32_tensor,
            &mut self.tf32_tensor,
            &mut self.fp16_tensor,
            &mut self.bf16_tensor,
            &mut self.fp8_tensor,
        ]
    }
}

/// The peak a class of ops runs at under a precision, and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakUse {
    /// Which peak: the file key without `tflops_`, e.g. `fp16_tensor` or `fp32`.
    pub name: String,
    /// The rate.
    pub rate: FlopRate,
    /// Its citation.
    pub source: String,
}

/// One compute device: a GPU, or a CPU socket (or the cores of it this machine may use).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    /// Catalog name, e.g. `v100-sxm2-16gb`.
    pub name: String,
    /// GPU or CPU.
    pub kind: DeviceKind,
    /// Vendor.
    pub vendor: String,
    /// Marketing model name.
    pub model: String,
    /// Free-text description.
    pub description: Option<String>,
    /// Physical cores (CPUs), which the peaks are for.
    pub cores: Option<Sourced<u32>>,
    /// Peak throughput per number format.
    pub peak: Peaks,
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD) of a GPU.
    pub sms: Option<Sourced<u32>>,
    /// The clock the device's peaks are computed at (a GPU's boost clock, a CPU's maximum
    /// turbo or the clock `local` measured), Hz.
    pub boost_clock_hz: Option<Sourced<f64>>,
    /// A CPU's all-core clock under vector (AVX-512, SVE) load, where the vendor gives one,
    /// Hz: what the transferred CPU model runs its cores at (`transfer::cpu::CpuSpec`).
    pub vector_clock_hz: Option<Sourced<f64>>,
    /// The foundry process a GPU's compute die is made in, by its marketed feature size in
    /// nanometres (TSMC 16FF is 16, 12FFN 12, N7 7, N6 6, N5 5, 4N and 4NP 4): what the
    /// transferred model scales a kernel's energy per FLOP by (`transfer::DeviceSpec`).
    pub process_nm: Option<Sourced<f64>>,
    /// Device memory capacity (HBM); `None` for CPUs that use the node's host memory.
    pub memory_capacity: Option<Sourced<Bytes>>,
    /// Peak memory bandwidth; `None` where it is unknown until measured (`local` on a CPU
    /// without a catalog entry): a calibrated profile supplies it.
    pub memory_bandwidth: Option<Sourced<ByteRate>>,
    /// Last-level cache (GPU L2, CPU L3).
    pub llc: Option<Sourced<Bytes>>,
    /// Thermal design power in watts.
    pub tdp_w: Option<Sourced<f64>>,
}

impl Device {
    /// The peak that matrix ops (convolution, dense) run at under `precision`: the matrix
    /// units for the precision's format if the device has them, otherwise its vector units
    /// for that format (e.g. FP32 GEMM on NVIDIA CUDA cores, FP16 GEMM on AVX512-FP16). A
    /// CPU with neither computes 16-bit formats in FP32 (frameworks convert on the fly), so
    /// its FP32 vector peak bounds them; a GPU without the format cannot run the precision.
    pub fn matrix_peak(&self, precision: Precision) -> Result<PeakUse> {
        let format = precision.matrix_format();
        self.peak_use(format, true)
            .or_else(|| self.peak_use(format, false))
            .or_else(|| {
                (self.kind == DeviceKind::Cpu)
                    .then(|| self.peak_use(NumberFormat::Fp32, false))
                    .flatten()
            })
            .ok_or_else(|| self.unsupported(precision, format))
    }

    /// The peak that vector ops (element-wise, pooling, normalisation) run at under
    /// `precision`: the vector units for its format; 16-bit formats fall back to the FP32
    /// vector rate on devices that quote no packed 16-bit vector rate (they compute in FP32).
    pub fn vector_peak(&self, precision: Precision) -> Result<PeakUse> {
        let format = precision.vector_format();
        self.peak_use(format, false)
            .or_else(|| self.peak_use(NumberFormat::Fp32, false))
            .ok_or_else(|| self.unsupported(precision, format))
    }

    fn peak_use(&self, format: NumberFormat, tensor: bool) -> Option<PeakUse> {
        self.peak.get(format, tensor).map(|p| PeakUse {
            name: if tensor {
                format!("{format}_tensor")
            } else {
                format.to_string()
            },
            rate: p.value,
            source: p.source.clone(),
        })
    }

    fn unsupported(&self, precision: Precision, format: NumberFormat) -> Error {
        Error::UnsupportedPrecision {
            device: self.name.clone(),
            precision,
            format,
        }
    }

    /// This CPU restricted to `cores` of its cores: peaks and TDP scale with the core
    /// count; memory bandwidth and cache stay the socket's (an upper bound for a partial
    /// socket, which calibration replaces with what is measured).
    pub fn with_cores(&self, cores: u32, why: &str) -> Result<Device> {
        let total = self.cores.as_ref().ok_or_else(|| {
            Error::Local(format!(
                "device `{}` has no `cores` field, so its peaks cannot be scaled to the {cores} \
                 cores of this machine; add `cores = {{ value = N, source = \"...\" }}`",
                self.name
            ))
        })?;
        let factor = f64::from(cores) / f64::from(total.value);
        let note = format!("; scaled to {cores} of {} cores", total.value);
        let mut d = self.clone();
        for p in d.peak.all_mut().into_iter().flatten() {
            p.value = p.value * factor;
            p.source.push_str(&note);
        }
        if let Some(t) = d.tdp_w.as_mut() {
            t.value *= factor;
            t.source.push_str(&note);
        }
        d.cores = Some(Sourced {
            value: cores,
            source: why.to_owned(),
        });
        if let Some(bw) = d.memory_bandwidth.as_mut() {
            bw.source
                .push_str("; whole-socket figure, shared by all its cores");
        }
        Ok(d)
    }
}

/// The LogGP figures of a link besides its bandwidth (Alexandrov et al., SPAA 1995): a
/// message of k bytes costs `L + 2o + (k - 1) G`, and a sender's consecutive messages are at
/// least `g` apart. Each is optional; an absent one counts as zero and predictions say so.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct LogGpFigures {
    /// Latency `L`.
    pub latency: Option<Sourced<Seconds>>,
    /// Overhead `o` on each side.
    pub overhead: Option<Sourced<Seconds>>,
    /// Gap `g` between consecutive messages.
    pub message_gap: Option<Sourced<Seconds>>,
}

impl LogGpFigures {
    /// Whether `L` is given (the figure that matters most; `o` and `g` refine it).
    pub fn known(&self) -> bool {
        self.latency.is_some()
    }

    /// `L + 2o`, the start-up cost of a message.
    pub fn alpha(&self) -> Seconds {
        let v = |s: &Option<Sourced<Seconds>>| s.as_ref().map_or(0.0, |x| x.value.value());
        Seconds::new(v(&self.latency) + 2.0 * v(&self.overhead))
    }

    /// `g`.
    pub fn gap(&self) -> Seconds {
        self.message_gap.as_ref().map_or(Seconds::ZERO, |g| g.value)
    }
}

/// A node: devices plus host memory, links and local storage. Bandwidths are per
/// direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Node {
    /// Devices per node.
    pub devices: Sourced<u32>,
    /// Host CPU description.
    pub cpu: Option<String>,
    /// Host (DDR) memory.
    pub host_memory: Option<Sourced<Bytes>>,
    /// Host memory bandwidth of the node (all sockets).
    pub host_memory_bandwidth: Option<Sourced<ByteRate>>,
    /// Host-to-device PCIe bandwidth available to each device.
    pub pcie: Option<Sourced<ByteRate>>,
    /// Device-to-device fabric (NVLink, NVSwitch, Infinity Fabric) bandwidth per device.
    pub nvlink: Option<Sourced<ByteRate>>,
    /// LogGP `L`, `o`, `g` of the device fabric (`G` is 1 / `nvlink`).
    pub nvlink_loggp: LogGpFigures,
    /// Node-local NVMe capacity usable by jobs.
    pub nvme_capacity: Option<Sourced<Bytes>>,
    /// Node-local NVMe read bandwidth.
    pub nvme_read: Option<Sourced<ByteRate>>,
    /// Node-local storage is present (`nvme_capacity`) but its read bandwidth is unknown
    /// until measured (`local`: the file system ridgeline runs in): reads from it are not
    /// counted, and predictions say so.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub nvme_read_unknown: bool,
    /// Node-local NVMe write bandwidth (staging).
    pub nvme_write: Option<Sourced<ByteRate>>,
    /// Network interfaces per node.
    pub nics: Option<Sourced<u32>>,
    /// Bandwidth of each network interface.
    pub nic_bandwidth: Option<Sourced<ByteRate>>,
    /// LogGP `L`, `o`, `g` between nodes (`G` is 1 / `nic_bandwidth`).
    pub nic_loggp: LogGpFigures,
    /// The most one node's parallel file system client reads per second.
    pub pfs_client: Option<Sourced<ByteRate>>,
    /// Node power in watts (all devices and hosts), where known.
    pub power_w: Option<Sourced<f64>>,
}

/// The cluster: how many nodes, the network and the parallel file system.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cluster {
    /// Nodes.
    pub nodes: Sourced<u32>,
    /// Network description.
    pub network: Option<String>,
    /// Parallel file system description.
    pub pfs: Option<String>,
    /// Parallel file system capacity.
    pub pfs_capacity: Option<Sourced<Bytes>>,
    /// Parallel file system aggregate bandwidth.
    pub pfs_bandwidth: Option<Sourced<ByteRate>>,
    /// Burst buffer (a shared flash tier between the nodes and the parallel file system,
    /// such as Cray DataWarp) capacity.
    pub burst_buffer_capacity: Option<Sourced<Bytes>>,
    /// Burst buffer aggregate bandwidth.
    pub burst_buffer_bandwidth: Option<Sourced<ByteRate>>,
    /// Price of one node-hour, in the currency of its source.
    pub price_per_node_hour: Option<Sourced<f64>>,
}

/// A system: one node type and the cluster of those nodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct System {
    /// Name, e.g. `cori-gpu`.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// The compute device.
    pub device: Device,
    /// The node.
    pub node: Node,
    /// The cluster.
    pub cluster: Cluster,
    /// How the system was described where that took reasoning beyond its file (`local`:
    /// the cores, clock and vector units the peaks come from); printed under `assumed:`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assumptions: Vec<String>,
    /// The calibrated profile on top of the datasheet, when one is given
    /// ([`crate::profile::Profile::overlay`]).
    #[serde(skip)]
    pub calibration: Option<std::sync::Arc<crate::profile::Profile>>,
}

impl System {
    /// A one-device, one-node system around `device` (`--system <device name>`).
    pub fn single_device(device: Device) -> System {
        let source = format!("single-device system built from device `{}`", device.name);
        let one = Sourced { value: 1, source };
        System {
            name: device.name.clone(),
            description: Some(format!("one {} on its own", device.model)),
            node: Node {
                devices: one.clone(),
                cpu: None,
                host_memory: None,
                host_memory_bandwidth: None,
                pcie: None,
                nvlink: None,
                nvlink_loggp: LogGpFigures::default(),
                nvme_capacity: None,
                nvme_read: None,
                nvme_read_unknown: false,
                nvme_write: None,
                nics: None,
                nic_bandwidth: None,
                nic_loggp: LogGpFigures::default(),
                pfs_client: None,
                power_w: None,
            },
            cluster: Cluster {
                nodes: one,
                network: None,
                pfs: None,
                pfs_capacity: None,
                pfs_bandwidth: None,
                burst_buffer_capacity: None,
                burst_buffer_bandwidth: None,
                price_per_node_hour: None,
            },
            device,
            assumptions: Vec::new(),
            calibration: None,
        }
    }

    /// The memory one device trains in: its own memory, or for a CPU without on-package
    /// memory its share of the node's host memory.
    pub fn device_memory(&self) -> Option<Sourced<Bytes>> {
        if let Some(m) = &self.device.memory_capacity {
            return Some(m.clone());
        }
        self.node.host_memory.as_ref().map(|h| Sourced {
            value: h.value * (1.0 / f64::from(self.node.devices.value)),
            source: format!(
                "node host memory / {} devices ({})",
                self.node.devices.value, h.source
            ),
        })
    }
}

/// Microseconds to seconds.
fn micros(us: f64) -> Seconds {
    Seconds::new(us * 1e-6)
}

/// Parses a device file.
pub fn parse_device(text: &str, file: &str) -> Result<Device> {
    let raw: raw::RawDevice = parse_toml(text, file)?;
    let ctx = Ctx {
        file,
        prefix: "",
        sources: &raw.sources,
    };
    ctx.device(raw.clone())
}

/// Parses a system file; a `node.device` name is looked up with `lookup`.
pub fn parse_system(
    text: &str,
    file: &str,
    lookup: &dyn Fn(&str) -> Result<Device>,
) -> Result<System> {
    let raw: raw::RawSystem = parse_toml(text, file)?;
    let ctx = Ctx {
        file,
        prefix: "",
        sources: &raw.sources,
    };
    let device = match (&raw.device, &raw.node.device) {
        (Some(_), Some(_)) => {
            return Err(ctx.invalid(
                "node.device",
                "the file has its own [device] table and also names a catalog device; keep one",
            ));
        }
        (None, None) => {
            return Err(ctx.invalid(
                "node.device",
                "missing: name a catalog device (`device = \"a100-sxm4-40gb\"`) or add a \
                 [device] table",
            ));
        }
        (Some(d), None) => {
            let mut sources = raw.sources.clone();
            sources.extend(d.sources.clone());
            Ctx {
                file,
                prefix: "device.",
                sources: &sources,
            }
            .device(d.clone())?
        }
        (None, Some(name)) => lookup(name)?,
    };
    let n = &raw.node;
    let node = Node {
        devices: ctx.count("node.devices", &n.devices, MAX_PER_NODE)?,
        cpu: n.cpu.clone(),
        host_memory: ctx.opt("node.host_memory_gib", &n.host_memory_gib, Bytes::from_gib)?,
        host_memory_bandwidth: ctx.opt(
            "node.host_memory_gbs",
            &n.host_memory_gbs,
            ByteRate::from_gbs,
        )?,
        pcie: ctx.opt("node.pcie_gbs", &n.pcie_gbs, ByteRate::from_gbs)?,
        nvlink: ctx.opt("node.nvlink_gbs", &n.nvlink_gbs, ByteRate::from_gbs)?,
        nvlink_loggp: LogGpFigures {
            latency: ctx.opt("node.nvlink_latency_us", &n.nvlink_latency_us, micros)?,
            overhead: ctx.opt("node.nvlink_overhead_us", &n.nvlink_overhead_us, micros)?,
            message_gap: ctx.opt(
                "node.nvlink_message_gap_us",
                &n.nvlink_message_gap_us,
                micros,
            )?,
        },
        nvme_capacity: ctx.opt("node.nvme_capacity_gb", &n.nvme_capacity_gb, Bytes::from_gb)?,
        nvme_read: ctx.opt("node.nvme_read_gbs", &n.nvme_read_gbs, ByteRate::from_gbs)?,
        nvme_read_unknown: false,
        nvme_write: ctx.opt("node.nvme_write_gbs", &n.nvme_write_gbs, ByteRate::from_gbs)?,
        nics: n
            .nics
            .as_ref()
            .map(|c| ctx.count("node.nics", c, MAX_PER_NODE))
            .transpose()?,
        nic_bandwidth: ctx.opt("node.nic_gbs", &n.nic_gbs, ByteRate::from_gbs)?,
        nic_loggp: LogGpFigures {
            latency: ctx.opt("node.nic_latency_us", &n.nic_latency_us, micros)?,
            overhead: ctx.opt("node.nic_overhead_us", &n.nic_overhead_us, micros)?,
            message_gap: ctx.opt("node.nic_message_gap_us", &n.nic_message_gap_us, micros)?,
        },
        pfs_client: ctx.opt("node.pfs_client_gbs", &n.pfs_client_gbs, ByteRate::from_gbs)?,
        power_w: ctx.opt("node.power_w", &n.power_w, |w| w)?,
    };
    if node.nic_bandwidth.is_some() != node.nics.is_some() {
        return Err(ctx.invalid("node.nics", "give both `nics` and `nic_gbs`, or neither"));
    }
    let c = &raw.cluster;
    let cluster = Cluster {
        nodes: ctx.count("cluster.nodes", &c.nodes, MAX_NODES)?,
        network: c.network.clone(),
        pfs: c.pfs.clone(),
        pfs_capacity: ctx.opt("cluster.pfs_capacity_pb", &c.pfs_capacity_pb, |pb| {
            Bytes::from_tb(pb * 1000.0)
        })?,
        pfs_bandwidth: ctx.opt(
            "cluster.pfs_bandwidth_gbs",
            &c.pfs_bandwidth_gbs,
            ByteRate::from_gbs,
        )?,
        burst_buffer_capacity: ctx.opt(
            "cluster.burst_buffer_capacity_tb",
            &c.burst_buffer_capacity_tb,
            Bytes::from_tb,
        )?,
        burst_buffer_bandwidth: ctx.opt(
            "cluster.burst_buffer_gbs",
            &c.burst_buffer_gbs,
            ByteRate::from_gbs,
        )?,
        price_per_node_hour: ctx.opt(
            "cluster.price_per_node_hour",
            &c.price_per_node_hour,
            |p| p,
        )?,
    };
    if cluster.burst_buffer_capacity.is_some() != cluster.burst_buffer_bandwidth.is_some() {
        return Err(ctx.invalid(
            "cluster.burst_buffer_gbs",
            "give both `burst_buffer_capacity_tb` and `burst_buffer_gbs`, or neither",
        ));
    }
    let mut system = System {
        name: raw.name.clone(),
        description: raw.description.clone(),
        device,
        node,
        cluster,
        assumptions: Vec::new(),
        calibration: None,
    };
    if system.device.memory_bandwidth.is_none() {
        system.assumptions.push(format!(
            "{file}: the CPU's memory bandwidth is unknown until measured: layers are timed at \
             the compute peak alone (a lower bound on time); calibrate (`ridgeline measure \
             suite`, then `ridgeline calibrate --system {file}`) and pass the profile as \
             --system"
        ));
    }
    if system.device_memory().is_none() {
        return Err(ctx.invalid(
            "node.host_memory_gib",
            format!(
                "device `{}` has no memory.capacity_gib, so the node needs host_memory_gib for \
                 it to train in",
                system.device.name
            ),
        ));
    }
    Ok(system)
}

/// Parses either file kind: a system file if it has a `[node]` table, else a device file,
/// which becomes a one-device system.
pub fn parse_system_or_device(
    text: &str,
    file: &str,
    lookup: &dyn Fn(&str) -> Result<Device>,
) -> Result<System> {
    let table: toml::Table = parse_toml(text, file)?;
    if table.contains_key("node") {
        parse_system(text, file, lookup)
    } else {
        parse_device(text, file).map(System::single_device)
    }
}

/// Validation context: the file, a prefix for field paths, and the sources to resolve.
pub(crate) struct Ctx<'a> {
    pub(crate) file: &'a str,
    pub(crate) prefix: &'a str,
    pub(crate) sources: &'a BTreeMap<String, String>,
}

impl Ctx<'_> {
    pub(crate) fn invalid(&self, field: &str, message: impl Into<String>) -> Error {
        Error::invalid(self.file, format!("{}{field}", self.prefix), message)
    }

    pub(crate) fn source(&self, field: &str, key: &str) -> Result<String> {
        if key.trim().is_empty() {
            return Err(self.invalid(
                &format!("{field}.source"),
                "is empty; cite where the number comes from",
            ));
        }
        self.sources.get(key).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.sources.keys().map(String::as_str).collect();
            self.invalid(
                &format!("{field}.source"),
                format!(
                    "`{key}` is not a key of the [sources] table (known: {}); add \
                     `{key} = \"<citation>\"` under [sources]",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })
    }

    /// A positive, finite number converted with `unit`.
    /// A positive, finite number converted with `unit`, at most [`MAX_FIGURE`] in base
    /// units after the conversion (1e300 GB/s would otherwise become infinite).
    fn number<T: Base>(
        &self,
        field: &str,
        raw: &raw::RawSourced<f64>,
        unit: impl Fn(f64) -> T,
    ) -> Result<Sourced<T>> {
        if !raw.value.is_finite() || raw.value <= 0.0 {
            return Err(self.invalid(
                &format!("{field}.value"),
                format!(
                    "{} is not a positive number; it must be greater than zero",
                    raw.value
                ),
            ));
        }
        if raw.value < MIN_FIGURE {
            return Err(self.invalid(
                &format!("{field}.value"),
                format!(
                    "{:e} is below any machine (at least {MIN_FIGURE:e} in the unit the key \
                     names); check the unit in the key's name",
                    raw.value
                ),
            ));
        }
        let value = unit(raw.value);
        if !value.base().is_finite() || value.base() > MAX_FIGURE {
            return Err(self.invalid(
                &format!("{field}.value"),
                format!(
                    "{} is {:e} in base units, beyond any machine (at most {MAX_FIGURE:e}); \
                     check the unit in the key's name",
                    raw.value,
                    value.base()
                ),
            ));
        }
        Ok(Sourced {
            value,
            source: self.source(field, &raw.source)?,
        })
    }

    fn opt<T: Base>(
        &self,
        field: &str,
        raw: &Option<raw::RawSourced<f64>>,
        unit: impl Fn(f64) -> T,
    ) -> Result<Option<Sourced<T>>> {
        raw.as_ref()
            .map(|r| self.number(field, r, unit))
            .transpose()
    }

    fn count(&self, field: &str, raw: &raw::RawSourced<u32>, max: u32) -> Result<Sourced<u32>> {
        if raw.value == 0 || raw.value > max {
            return Err(self.invalid(
                &format!("{field}.value"),
                format!("{}: must be between 1 and {max}", raw.value),
            ));
        }
        Ok(Sourced {
            value: raw.value,
            source: self.source(field, &raw.source)?,
        })
    }

    fn device(&self, raw: raw::RawDevice) -> Result<Device> {
        let kind = match raw.kind.as_str() {
            "gpu" => DeviceKind::Gpu,
            "cpu" => DeviceKind::Cpu,
            other => {
                return Err(self.invalid("kind", format!("`{other}`: must be \"gpu\" or \"cpu\"")));
            }
        };
        if raw.name.trim().is_empty() {
            return Err(self.invalid("name", "is empty"));
        }
        let tflops = |field: &str, v: &Option<raw::RawSourced<f64>>| {
            self.opt(&format!("peak.{field}"), v, FlopRate::from_tflops)
        };
        let p = &raw.peak;
        let peak = Peaks {
            fp64: tflops("tflops_fp64", &p.tflops_fp64)?,
            fp32: tflops("tflops_fp32", &p.tflops_fp32)?,
            fp16: tflops("tflops_fp16", &p.tflops_fp16)?,
            bf16: tflops("tflops_bf16", &p.tflops_bf16)?,
            fp64_tensor: tflops("tflops_fp64_tensor", &p.tflops_fp64_tensor)?,
            fp32_tensor: tflops("tflops_fp32_tensor", &p.tflops_fp32_tensor)?,
            tf32_tensor: tflops("tflops_tf32_tensor", &p.tflops_tf32_tensor)?,
            fp16_tensor: tflops("tflops_fp16_tensor", &p.tflops_fp16_tensor)?,
            bf16_tensor: tflops("tflops_bf16_tensor", &p.tflops_bf16_tensor)?,
            fp8_tensor: tflops("tflops_fp8_tensor", &p.tflops_fp8_tensor)?,
        };
        if peak.fp32.is_none() {
            return Err(self.invalid(
                "peak.tflops_fp32",
                "missing: every device needs its FP32 vector peak (vector ops run at it)",
            ));
        }
        let m = &raw.memory;
        let device = Device {
            name: raw.name.clone(),
            kind,
            vendor: raw.vendor.clone(),
            model: raw.model.clone(),
            description: raw.description.clone(),
            cores: raw
                .cores
                .as_ref()
                .map(|c| self.count("cores", c, MAX_CORES))
                .transpose()?,
            peak,
            sms: raw
                .compute
                .as_ref()
                .and_then(|c| c.sms.as_ref())
                .map(|c| self.count("compute.sms", c, MAX_SMS))
                .transpose()?,
            boost_clock_hz: self.opt(
                "compute.boost_clock_mhz",
                &raw.compute.as_ref().and_then(|c| c.boost_clock_mhz.clone()),
                |mhz| mhz * 1e6,
            )?,
            vector_clock_hz: self.opt(
                "compute.vector_clock_mhz",
                &raw.compute
                    .as_ref()
                    .and_then(|c| c.vector_clock_mhz.clone()),
                |mhz| mhz * 1e6,
            )?,
            process_nm: self.opt(
                "compute.process_nm",
                &raw.compute.as_ref().and_then(|c| c.process_nm.clone()),
                |nm| nm,
            )?,
            memory_capacity: self.opt("memory.capacity_gib", &m.capacity_gib, Bytes::from_gib)?,
            memory_bandwidth: match &m.bandwidth_gbs {
                Some(b) => Some(self.number("memory.bandwidth_gbs", b, ByteRate::from_gbs)?),
                // A CPU's may be unknown until calibration measures it.
                None if kind == DeviceKind::Cpu => None,
                None => {
                    return Err(self.invalid(
                        "memory.bandwidth_gbs",
                        "missing: a GPU needs its memory bandwidth",
                    ));
                }
            },
            llc: self.opt("memory.llc_mib", &m.llc_mib, Bytes::from_mib)?,
            tdp_w: raw
                .power
                .as_ref()
                .map(|p| self.number("power.tdp_w", &p.tdp_w, |w| w))
                .transpose()?,
        };
        if kind == DeviceKind::Gpu && device.memory_capacity.is_none() {
            return Err(self.invalid(
                "memory.capacity_gib",
                "missing: a GPU needs its memory capacity",
            ));
        }
        Ok(device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICE: &str = r#"
name = "toy"
kind = "gpu"
vendor = "Acme"
model = "Toy 1"
[sources]
sheet = "Acme Toy 1 datasheet"
[peak]
tflops_fp32 = { value = 10.0, source = "sheet" }
tflops_fp16_tensor = { value = 100.0, source = "sheet" }
[memory]
capacity_gib = { value = 16.0, source = "sheet" }
bandwidth_gbs = { value = 1000.0, source = "sheet" }
"#;

    fn no_lookup(name: &str) -> Result<Device> {
        Err(Error::UnknownName {
            kind: "device",
            name: name.into(),
            valid: vec![],
        })
    }

    #[test]
    fn device_sources_resolve_to_citations() {
        let d = parse_device(DEVICE, "toy.toml").unwrap();
        let bw = d.memory_bandwidth.as_ref().unwrap();
        assert_eq!(bw.value, ByteRate::from_gbs(1000.0));
        assert_eq!(bw.source, "Acme Toy 1 datasheet");
        assert_eq!(d.memory_capacity.unwrap().value, Bytes::from_gib(16.0));
    }

    #[test]
    fn matrix_peak_prefers_tensor_units_and_falls_back_to_vector() {
        let d = parse_device(DEVICE, "toy.toml").unwrap();
        assert_eq!(
            d.matrix_peak(Precision::AmpFp16).unwrap().name,
            "fp16_tensor"
        );
        assert_eq!(d.matrix_peak(Precision::Fp32).unwrap().name, "fp32");
        // No fp16 vector peak: vector ops compute at the FP32 rate.
        assert_eq!(d.vector_peak(Precision::AmpFp16).unwrap().name, "fp32");
        let err = d.matrix_peak(Precision::Tf32).unwrap_err().to_string();
        assert!(err.contains("no tf32 peak"), "{err}");
    }

    #[test]
    fn compute_units_and_the_boost_clock_are_read_and_checked() {
        let with = |sms: &str| {
            DEVICE.replace(
                "[memory]",
                &format!(
                    "[compute]\nsms = {{ value = {sms}, source = \"sheet\" }}\n\
                     boost_clock_mhz = {{ value = 1410.0, source = \"sheet\" }}\n[memory]"
                ),
            )
        };
        let d = parse_device(&with("108"), "toy.toml").unwrap();
        assert_eq!(d.sms.unwrap().value, 108);
        assert_eq!(d.boost_clock_hz.unwrap().value, 1.41e9);
        let err = parse_device(&with("0"), "toy.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("compute.sms.value"), "{err}");
        assert!(parse_device(DEVICE, "toy.toml").unwrap().sms.is_none());
        let node = |nm: &str| {
            with("108").replace(
                "[memory]",
                &format!("process_nm = {{ value = {nm}, source = \"sheet\" }}\n[memory]"),
            )
        };
        let d = parse_device(&node("7"), "toy.toml").unwrap();
        assert_eq!(d.process_nm.unwrap().value, 7.0);
        let err = parse_device(&node("-7"), "toy.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("toy.toml") && err.contains("compute.process_nm.value"),
            "{err}"
        );
    }

    #[test]
    fn non_positive_bandwidth_is_refused_naming_the_field() {
        let text = DEVICE.replace("value = 1000.0", "value = -5.0");
        let err = parse_device(&text, "toy.toml").unwrap_err().to_string();
        assert!(
            err.contains("toy.toml: field `memory.bandwidth_gbs.value`"),
            "{err}"
        );
    }

    #[test]
    fn zero_peak_is_refused() {
        let text = DEVICE.replace("value = 10.0", "value = 0.0");
        let err = parse_device(&text, "toy.toml").unwrap_err().to_string();
        assert!(err.contains("peak.tflops_fp32.value"), "{err}");
    }

    #[test]
    fn unknown_source_key_is_refused() {
        let text = DEVICE.replace(
            "source = \"sheet\" }\n[memory]",
            "source = \"blog\" }\n[memory]",
        );
        let err = parse_device(&text, "toy.toml").unwrap_err().to_string();
        assert!(
            err.contains("`blog` is not a key of the [sources] table"),
            "{err}"
        );
    }

    #[test]
    fn unknown_key_reports_line_and_key() {
        let text = DEVICE.replace("[memory]", "[memory]\nbandwith_gbs = 3");
        let err = parse_device(&text, "toy.toml").unwrap_err().to_string();
        assert!(err.starts_with("toy.toml: "), "{err}");
        assert!(err.contains("line 12"), "{err}");
        assert!(err.contains("bandwith_gbs"), "{err}");
    }

    #[test]
    fn system_with_inline_device_parses() {
        let text = format!(
            "name = \"box\"\n[sources]\nspec = \"box spec\"\n[node]\ndevices = {{ value = 2, \
             source = \"spec\" }}\n[cluster]\nnodes = {{ value = 4, source = \"spec\" }}\n\
             [device]\n{}",
            DEVICE.replace("\n[", "\n[device.")
        );
        let s = parse_system(&text, "box.toml", &no_lookup).unwrap();
        assert_eq!(s.node.devices.value, 2);
        assert_eq!(s.device.name, "toy");
        assert_eq!(s.device_memory().unwrap().value, Bytes::from_gib(16.0));
    }

    #[test]
    fn system_needs_a_device() {
        let text = "name = \"box\"\n[sources]\nspec = \"x\"\n[node]\ndevices = { value = 2, \
                    source = \"spec\" }\n[cluster]\nnodes = { value = 4, source = \"spec\" }\n";
        let err = parse_system(text, "box.toml", &no_lookup)
            .unwrap_err()
            .to_string();
        assert!(err.contains("node.device"), "{err}");
    }

    #[test]
    fn cpu_device_scales_with_cores() {
        let text = DEVICE.replace(
            "kind = \"gpu\"",
            "kind = \"cpu\"\ncores = { value = 8, source = \"sheet\" }",
        );
        let d = parse_device(&text, "cpu.toml").unwrap();
        let two = d.with_cores(2, "test").unwrap();
        assert_eq!(two.peak.fp32.unwrap().value, FlopRate::from_tflops(2.5));
        assert_eq!(
            two.memory_bandwidth,
            d.memory_bandwidth.map(|mut b| {
                b.source
                    .push_str("; whole-socket figure, shared by all its cores");
                b
            })
        );
    }

    /// Fuzzing the system parsers: arbitrary and mutated text never panics.
    mod properties {
        use proptest::prelude::*;

        use super::*;
        use crate::catalog;
        use crate::file::tests::properties::{edits, mutate};

        fn lookup(name: &str) -> Result<Device> {
            catalog::device(name)
        }

        proptest! {
            #[test]
            fn arbitrary_text_never_panics(text in ".{0,400}") {
                let _ = parse_system_or_device(&text, "fuzz.toml", &lookup);
            }

            #[test]
            fn mutated_catalog_files_never_panic(
                entry in prop::sample::select(catalog::DEVICES.iter().chain(catalog::SYSTEMS).collect::<Vec<_>>()),
                edits in edits(),
            ) {
                let text = mutate(entry.text, &edits);
                if let Ok(s) = parse_system_or_device(&text, entry.path, &lookup) {
                    for p in Precision::ALL {
                        let _ = s.device.matrix_peak(p);
                        let _ = s.device.vector_peak(p);
                    }
                    let _ = s.device_memory();
                }
            }

            #[test]
            fn mutated_cpuinfo_never_panics(edits in edits()) {
                let cpuinfo = mutate(local::tests::CPUINFO, &edits);
                if let Ok(cpu) = parse_cpuinfo(&cpuinfo) {
                    let mut facts = local::tests::facts(local::tests::CPUINFO);
                    facts.cpu = cpu;
                    let _ = catalog::local(&facts);
                }
                let _ = parse_meminfo(&mutate("MemTotal: 1000 kB\n", &edits));
            }
        }
    }
}
