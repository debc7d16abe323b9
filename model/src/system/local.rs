//! The `local` system: this machine, described from what it reports about itself.
//!
//! The caller (the `measure` crate, which owns reading the host) hands over [`HostFacts`]:
//! the text of `/proc/cpuinfo` parsed into a [`CpuInfo`], the processors this process may
//! run on (its affinity mask), the cgroup CPU quota and memory limit, the caches from sysfs,
//! `/proc/meminfo`'s total, and the clock (cpufreq's maximum, else `/proc/cpuinfo`'s and a
//! measured one). [`local_system`] turns them into a one-device system:
//!
//! - **A CPU `data/catalog/systems/local.toml` lists by its signature** (`[[cpu]]`, sourced) keeps its
//!   catalog device's datasheet figures, scaled to the cores this process may use.
//! - **Any other CPU** is described from the facts: peak FLOP/s per format = FMA units x
//!   lanes x 2 x cores x clock, with the FMA units and datapath width of its core
//!   microarchitecture from `local.toml`'s `[[core]]` table (sourced), or two units at the
//!   ISA's full width when the core is not listed (said so); AMX and AVX512-FP16 add their
//!   rates from `[isa]`. Memory bandwidth is **unknown until measured**: calibration
//!   supplies it, and every prediction says so.
//!
//! Every step of that reasoning is kept in [`System::assumptions`] (printed under
//! `assumed:` and given in JSON), and every figure's source says where it came from.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::raw::RawSourced;
use super::{Device, DeviceKind, Peaks, Sourced, System};
use crate::error::parse_toml;
use crate::error::{Error, Result};
use crate::units::{Bytes, FlopRate};

/// What `/proc/cpuinfo` says about this machine's processor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuInfo {
    /// Vendor: `vendor_id` on x86 (`GenuineIntel`, `AuthenticAMD`), `CPU implementer` on
    /// Arm (`0x41` is Arm Ltd).
    pub vendor_id: String,
    /// `cpu family` on x86, `CPU architecture` on Arm.
    pub family: u32,
    /// `model` on x86, `CPU part` on Arm (e.g. 0xd0c, Neoverse N1).
    pub model: u32,
    /// `model name` (virtual machines often hide the brand string; Arm kernels print none).
    pub model_name: String,
    /// ISA extensions: `flags` on x86, `Features` on Arm.
    pub flags: BTreeSet<String>,
    /// `cpu MHz` of the first processor, where printed.
    pub mhz: Option<f64>,
    /// Every processor (logical CPU): its number and, where printed, its physical package
    /// and core ids, which tell hyperthreads of one core apart from cores.
    pub processors: Vec<Processor>,
    /// `cache size` in KiB (the last-level cache on x86).
    pub cache_kib: Option<u64>,
}

/// One logical CPU of `/proc/cpuinfo`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Processor {
    /// `processor`.
    pub id: u32,
    /// `physical id` and `core id`, where printed.
    pub core: Option<(String, String)>,
}

impl CpuInfo {
    /// Physical cores among the logical CPUs `allowed` (all when `None`): distinct package
    /// and core ids, or the logical CPUs themselves where the kernel prints no core ids.
    pub fn physical_cores(&self, allowed: Option<&BTreeSet<u32>>) -> u32 {
        let mine = || {
            self.processors
                .iter()
                .filter(|p| allowed.is_none_or(|a| a.contains(&p.id)))
        };
        let cores: BTreeSet<_> = mine().filter_map(|p| p.core.as_ref()).collect();
        let logical = mine().count();
        let n = if cores.is_empty() {
            logical
        } else {
            cores.len()
        };
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Whether the CPU reports ISA extension `flag`.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.contains(flag)
    }

    /// The signature as people read it: `AuthenticAMD family 25 model 17`.
    pub fn signature(&self) -> String {
        format!(
            "{} family {} model {}",
            self.vendor_id, self.family, self.model
        )
    }
}

/// One cache level of CPU 0, from sysfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cache {
    /// Level, 1 to 4.
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// Size in bytes.
    pub bytes: u64,
}

/// How fast this machine's cores run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Clock {
    /// cpufreq's `cpuinfo_max_freq` of CPU 0, Hz: the highest clock the kernel knows of.
    pub cpufreq_max_hz: Option<f64>,
    /// `/proc/cpuinfo`'s `cpu MHz`, Hz: often the nominal clock in virtual machines.
    pub cpuinfo_hz: Option<f64>,
    /// Measured by a chain of dependent integer operations (one per cycle), Hz.
    pub measured_hz: Option<f64>,
}

/// Everything `local` is described from, as the host reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostFacts {
    /// `std::env::consts::ARCH`: `x86_64`, `aarch64`, ...
    pub arch: String,
    /// `/proc/cpuinfo`.
    pub cpu: CpuInfo,
    /// Logical CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`),
    /// where readable.
    pub allowed_cpus: Option<BTreeSet<u32>>,
    /// The cgroup CPU quota in CPUs (quota / period), where one is set.
    pub cpu_quota: Option<f64>,
    /// Caches of CPU 0 (sysfs), where readable.
    pub caches: Vec<Cache>,
    /// `MemTotal` of `/proc/meminfo`.
    pub mem_total: Bytes,
    /// The cgroup memory limit, where one is set.
    pub mem_limit: Option<Bytes>,
    /// The clock.
    pub clock: Clock,
    /// The SVE vector length in bytes (`/proc/sys/abi/sve_default_vector_length`), on Arm.
    pub sve_vector_bytes: Option<u32>,
    /// The file system ridgeline runs in, where `statvfs` answers: where a data set on this
    /// machine is read from.
    pub disk: Option<Disk>,
}

/// A file system of this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Disk {
    /// The directory asked about (the working directory).
    pub path: String,
    /// Its file system's size in bytes.
    pub bytes: u64,
}

impl HostFacts {
    /// Cores the peaks count, and why: physical cores among the allowed logical CPUs,
    /// capped by the cgroup quota (rounded up: a peak is an upper bound).
    pub fn cores(&self) -> (u32, String) {
        let cpu = &self.cpu;
        let physical = cpu.physical_cores(self.allowed_cpus.as_ref());
        let logical = self
            .allowed_cpus
            .as_ref()
            .map_or(cpu.processors.len(), BTreeSet::len);
        let mut why = match &self.allowed_cpus {
            Some(a) => format!(
                "affinity mask {} ({logical} logical CPUs, {physical} physical cores)",
                cpu_list(a)
            ),
            None => format!("{logical} logical CPUs, {physical} physical cores in /proc/cpuinfo"),
        };
        let mut cores = physical.max(1);
        match self.cpu_quota {
            Some(q) if q.is_finite() && q > 0.0 => {
                let cap = q.ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
                if cap < cores {
                    cores = cap;
                    why.push_str(&format!(", capped by the cgroup CPU quota of {q:.2} CPUs"));
                } else {
                    why.push_str(&format!(", cgroup CPU quota {q:.2} CPUs (no cap)"));
                }
            }
            _ => why.push_str(", no cgroup CPU quota"),
        }
        (cores, why)
    }

    /// Memory this process may use, and why: `MemTotal`, or the cgroup limit when lower.
    pub fn memory(&self) -> (Bytes, String) {
        match self.mem_limit {
            Some(l) if l.value() < self.mem_total.value() => (
                l,
                format!(
                    "the cgroup memory limit ({:.2} GiB; /proc/meminfo MemTotal is {:.2} GiB)",
                    l.as_gib(),
                    self.mem_total.as_gib()
                ),
            ),
            _ => (
                self.mem_total,
                "/proc/meminfo MemTotal (no lower cgroup memory limit)".to_owned(),
            ),
        }
    }

    /// The last-level cache: the largest level of CPU 0 that holds data.
    pub fn llc(&self) -> Option<&Cache> {
        self.caches
            .iter()
            .filter(|c| c.kind != "Instruction")
            .max_by_key(|c| (c.level, c.bytes))
    }

    /// The clock the peaks count, and why. cpufreq's maximum where the kernel has one;
    /// otherwise the larger of `/proc/cpuinfo`'s figure and the measured clock (virtual
    /// machines print their nominal clock there while the cores run at their boost clock,
    /// and a peak is an upper bound).
    pub fn clock(&self) -> Result<(f64, String)> {
        let c = &self.clock;
        let ghz = |hz: f64| format!("{:.3} GHz", hz / 1e9);
        if let Some(hz) = c.cpufreq_max_hz.filter(|h| h.is_finite() && *h > 0.0) {
            return Ok((
                hz,
                format!(
                    "{} from cpufreq (cpu0/cpufreq/cpuinfo_max_freq, the highest clock)",
                    ghz(hz)
                ),
            ));
        }
        let valid = |h: Option<f64>| h.filter(|h| h.is_finite() && *h > 0.0);
        match (valid(c.cpuinfo_hz), valid(c.measured_hz)) {
            (Some(i), Some(m)) if m > i => Ok((
                m,
                format!(
                    "{} measured (dependent integer operations, one per cycle); /proc/cpuinfo \
                     says {} (no cpufreq; virtual machines print their nominal clock there), the larger is used",
                    ghz(m),
                    ghz(i)
                ),
            )),
            (Some(i), measured) => Ok((
                i,
                format!(
                    "{} from /proc/cpuinfo `cpu MHz` (no cpufreq){}",
                    ghz(i),
                    measured.map_or_else(String::new, |m| format!("; measured {}", ghz(m)))
                ),
            )),
            (None, Some(m)) => Ok((
                m,
                format!(
                    "{} measured (dependent integer operations, one per cycle; neither cpufreq \
                     nor /proc/cpuinfo gives a clock)",
                    ghz(m)
                ),
            )),
            (None, None) => Err(Error::Local(
                "no clock: cpufreq, /proc/cpuinfo `cpu MHz` and the measured clock are all \
                 missing; describe the machine in a system file and pass --system FILE"
                    .into(),
            )),
        }
    }
}

/// `0-3,8` from a set of CPU numbers.
fn cpu_list(cpus: &BTreeSet<u32>) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut it = cpus.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        out.push(if end == start {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    out.join(",")
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLocal {
    name: String,
    description: Option<String>,
    #[serde(default)]
    sources: BTreeMap<String, String>,
    #[serde(default)]
    cpu: Vec<RawCpuMatch>,
    #[serde(default)]
    core: Vec<RawCore>,
    isa: RawIsa,
}

/// A CPU with a sourced catalog device.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCpuMatch {
    vendor_id: String,
    family: u32,
    model: u32,
    cache_kib: Option<u64>,
    device: String,
    source: String,
}

/// A core microarchitecture's vector FMA resources.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCore {
    name: String,
    vendor_id: String,
    family: u32,
    models: Vec<u32>,
    fma_units: RawSourced<u32>,
    fma_bits: RawSourced<u32>,
}

/// Rates that ISA extensions add, per core and cycle or relative to FP32.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIsa {
    amx_bf16_flop_per_cycle: RawSourced<f64>,
    fp16_per_fp32: RawSourced<f64>,
}

/// The vector ISA of a CPU: width in bits and whether it has FMA.
struct VectorIsa {
    name: &'static str,
    bits: u32,
    fma: bool,
}

fn vector_isa(facts: &HostFacts) -> Option<VectorIsa> {
    let cpu = &facts.cpu;
    let isa = |name, bits, fma| Some(VectorIsa { name, bits, fma });
    if cpu.has("avx512f") {
        isa("AVX-512", 512, true)
    } else if cpu.has("avx2") && cpu.has("fma") {
        isa("AVX2 with FMA", 256, true)
    } else if cpu.has("avx") {
        isa("AVX", 256, cpu.has("fma"))
    } else if cpu.has("sve") {
        let bits = facts.sve_vector_bytes.map_or(128, |b| 8 * b);
        isa("SVE", bits, true)
    } else if cpu.has("asimd") {
        isa("NEON (Advanced SIMD)", 128, true)
    } else if cpu.has("sse2") {
        isa("SSE2", 128, false)
    } else {
        None
    }
}

/// Describes this machine as a one-node system of one CPU device, using `local_toml`
/// (`data/catalog/systems/local.toml`) for the CPUs with catalog devices and the core
/// microarchitectures' FMA resources.
pub fn local_system(
    facts: &HostFacts,
    local_toml: &str,
    file: &str,
    lookup: &dyn Fn(&str) -> Result<Device>,
) -> Result<System> {
    let raw: RawLocal = parse_toml(local_toml, file)?;
    let source = |field: &str, key: &str| {
        raw.sources.get(key).cloned().ok_or_else(|| {
            Error::invalid(file, field, format!("`{key}` is not a key of [sources]"))
        })
    };
    let cpu = &facts.cpu;
    let (cores, cores_why) = facts.cores();
    let (memory, memory_why) = facts.memory();
    let mut assumptions = vec![format!(
        "`local` is this machine: {} ({}), {cores} cores from the {cores_why}",
        cpu.model_name,
        cpu.signature()
    )];
    let matched = raw.cpu.iter().find(|m| {
        m.vendor_id == cpu.vendor_id
            && m.family == cpu.family
            && m.model == cpu.model
            && m.cache_kib.is_none_or(|c| Some(c) == cpu.cache_kib)
    });
    let device = if let Some(m) = matched {
        let identified = source("cpu.source", &m.source)?;
        let why = format!(
            "{cores} cores this process may use ({cores_why}); CPU identified as `{}`: \
             {identified}",
            m.device
        );
        assumptions.push(format!(
            "CPU identified as catalog device `{}` ({identified}); its datasheet peaks scaled \
             to {cores} cores",
            m.device
        ));
        lookup(&m.device)?.with_cores(cores, &why)?
    } else {
        derived_device(facts, &raw, cores, &cores_why, &source, &mut assumptions)?
    };
    let mut system = System::single_device(device);
    system.name = raw.name;
    system.description = raw.description;
    system.node.devices.source = "this machine: one CPU device".into();
    system.node.cpu = Some(format!(
        "{} ({cores} cores this process may use)",
        cpu.model_name
    ));
    system.node.host_memory = Some(Sourced {
        value: memory,
        source: format!("{memory_why}, read at run time"),
    });
    assumptions.push(format!(
        "memory {:.2} GiB from {memory_why}",
        memory.as_gib()
    ));
    if system.device.memory_bandwidth.is_none() {
        assumptions.push(
            "memory bandwidth unknown until measured: layers are timed at the compute peak alone \
             (a lower bound on time); calibrate (`ridgeline measure suite --out s.jsonl`, then \
             `ridgeline calibrate s.jsonl --system local`) and pass the profile as --system"
                .into(),
        );
    }
    if let Some(d) = &facts.disk {
        system.node.nvme_capacity = Some(Sourced {
            value: Bytes::from_count(d.bytes),
            source: format!(
                "the file system of {} (statvfs), read at run time: where a data set on this \
                 machine is read from",
                d.path
            ),
        });
        system.node.nvme_read_unknown = true;
        assumptions.push(format!(
            "a data set larger than memory is read from the file system of {} ({:.0} GB), at a \
             bandwidth unknown until measured: its reads are not counted",
            d.path,
            d.bytes as f64 / 1e9
        ));
    }
    system.cluster.nodes.source = "this machine".into();
    system.assumptions = assumptions;
    Ok(system)
}

/// A device for a CPU with no catalog entry, from the host's facts.
fn derived_device(
    facts: &HostFacts,
    raw: &RawLocal,
    cores: u32,
    cores_why: &str,
    source: &dyn Fn(&str, &str) -> Result<String>,
    assumptions: &mut Vec<String>,
) -> Result<Device> {
    let cpu = &facts.cpu;
    let isa = vector_isa(facts).ok_or_else(|| {
        Error::Local(format!(
            "/proc/cpuinfo reports no vector ISA ridgeline knows (AVX-512, AVX2, AVX, SVE, \
             NEON, SSE2) for {}; describe the machine in a system file and pass --system FILE",
            cpu.signature()
        ))
    })?;
    let (clock, clock_why) = facts.clock()?;
    let core = raw.core.iter().find(|c| {
        c.vendor_id == cpu.vendor_id && c.family == cpu.family && c.models.contains(&cpu.model)
    });
    let (units, bits, units_why, units_src) = vector_units(facts, &isa, core, source)?;
    if units == 0 || bits < 64 {
        return Err(Error::invalid(
            "data/catalog/systems/local.toml",
            "core.fma_units",
            format!("{units} units of {bits} bits: give at least one unit of at least 64 bits"),
        ));
    }
    let per_cycle = |element_bits: u32| f64::from(units * (bits / element_bits) * 2);
    let n = f64::from(cores);
    let rate = |per_cycle: f64| FlopRate::new(n * clock * per_cycle);
    let fmt_peak = |name: &str, per: f64| {
        format!(
            "{name} = {cores} cores x {:.3} GHz x {per} FLOP/cycle = {:.1} GFLOP/s",
            clock / 1e9,
            n * clock * per / 1e9
        )
    };
    let reasoning = format!(
        "{}; {units_why}; clock {clock_why}; cores: {cores_why}{units_src}",
        isa.name
    );
    let sourced = |per: f64, name: &str, extra: &str| Sourced {
        value: rate(per),
        source: format!("{}; {reasoning}{extra}", fmt_peak(name, per)),
    };
    let fp32 = per_cycle(32);
    let mut peak = Peaks {
        fp64: Some(sourced(per_cycle(64), "FP64", "")),
        fp32: Some(sourced(fp32, "FP32", "")),
        ..Peaks::default()
    };
    assumptions.push(format!("vector units: {units_why}"));
    assumptions.push(format!("clock {clock_why}"));
    assumptions.push(format!(
        "peak {}; {}",
        fmt_peak("FP32", fp32),
        fmt_peak("FP64", per_cycle(64))
    ));
    if cpu.has("avx512_fp16") || cpu.has("asimdhp") {
        let f = &raw.isa.fp16_per_fp32;
        let why = source("isa.fp16_per_fp32.source", &f.source)?;
        let per = fp32 * f.value;
        peak.fp16 = Some(sourced(per, "FP16", &format!("; FP16 arithmetic: {why}")));
        assumptions.push(format!("peak {} ({why})", fmt_peak("FP16", per)));
    }
    if cpu.has("amx_bf16") {
        let a = &raw.isa.amx_bf16_flop_per_cycle;
        let why = source("isa.amx_bf16_flop_per_cycle.source", &a.source)?;
        peak.bf16_tensor = Some(Sourced {
            value: rate(a.value),
            source: format!(
                "{}; AMX: {why}; clock {clock_why}",
                fmt_peak("BF16 matrix", a.value)
            ),
        });
        assumptions.push(format!(
            "peak {} (AMX: {why})",
            fmt_peak("BF16 matrix", a.value)
        ));
    }
    let llc = facts.llc().map(|c| Sourced {
        value: Bytes::from_count(c.bytes),
        source: format!(
            "sysfs cpu0/cache: L{} {}, read at run time",
            c.level,
            c.kind.to_lowercase()
        ),
    });
    Ok(Device {
        name: "local-cpu".into(),
        kind: DeviceKind::Cpu,
        vendor: vendor_name(&cpu.vendor_id).to_owned(),
        model: cpu.model_name.clone(),
        description: Some(format!(
            "this machine's CPU ({}), described from what it reports",
            cpu.signature()
        )),
        cores: Some(Sourced {
            value: cores,
            source: cores_why.to_owned(),
        }),
        peak,
        sms: None,
        boost_clock_hz: Some(Sourced {
            value: clock,
            source: format!("the clock the peaks are computed at: {clock_why}"),
        }),
        vector_clock_hz: None,
        process_nm: None,
        memory_capacity: None,
        memory_bandwidth: None,
        llc,
        tdp_w: None,
    })
}

/// The vector units of the host's core: how many, of how many bits, why, and the core
/// table's sources: the table's where it lists the core (`core`), else assumed from the
/// vector ISA `isa` (two FMA units where it has FMA, one add and one multiply unit where not).
fn vector_units(
    facts: &HostFacts,
    isa: &VectorIsa,
    core: Option<&RawCore>,
    source: &dyn Fn(&str, &str) -> Result<String>,
) -> Result<(u32, u32, String, String)> {
    let cpu = &facts.cpu;
    Ok(match core {
        Some(c) => {
            let units_src = source("core.fma_units.source", &c.fma_units.source)?;
            let bits_src = source("core.fma_bits.source", &c.fma_bits.source)?;
            let bits = c.fma_bits.value.min(isa.bits);
            let halves = if c.fma_bits.value < isa.bits {
                format!(
                    "; {}-bit {} instructions run as {} {}-bit parts",
                    isa.bits,
                    isa.name,
                    isa.bits / c.fma_bits.value.max(1),
                    c.fma_bits.value
                )
            } else {
                String::new()
            };
            (
                c.fma_units.value,
                bits,
                format!(
                    "{} core ({}): {} FMA units x {} bits{halves}",
                    c.name,
                    cpu.signature(),
                    c.fma_units.value,
                    c.fma_bits.value
                ),
                format!("; sources: {units_src}; {bits_src}"),
            )
        }
        None if isa.fma => (
            2,
            isa.bits,
            format!(
                "{} is not in local.toml's core table: assumed 2 FMA units at the full {}-bit \
                 width of {} (an upper bound; some cores have one)",
                cpu.signature(),
                isa.bits,
                isa.name
            ),
            String::new(),
        ),
        None => (
            1,
            isa.bits,
            format!(
                "{} is not in local.toml's core table and {} has no FMA: assumed one add and one \
                 multiply unit of {} bits (2 FLOP per lane and cycle)",
                cpu.signature(),
                isa.name,
                isa.bits
            ),
            String::new(),
        ),
    })
}

/// The vendor a CPUID vendor string or Arm implementer code stands for (Linux
/// `arch/arm64/include/asm/cputype.h` for the implementers).
fn vendor_name(vendor_id: &str) -> &str {
    match vendor_id {
        "GenuineIntel" => "Intel",
        "AuthenticAMD" => "AMD",
        "0x41" => "Arm",
        "0x46" => "Fujitsu",
        "0x48" => "HiSilicon",
        "0x4e" => "NVIDIA",
        "0x61" => "Apple",
        "0xc0" => "Ampere",
        other => other,
    }
}

/// Parses the text of `/proc/cpuinfo`, on x86 (`vendor_id`, `cpu family`, `model`, `flags`)
/// or Arm (`CPU implementer`, `CPU architecture`, `CPU part`, `Features`).
pub fn parse_cpuinfo(text: &str) -> Result<CpuInfo> {
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    let mut processors = Vec::new();
    let mut current: Option<u32> = None;
    let (mut physical, mut core) = (None, None);
    let mut finish = |id: &mut Option<u32>, p: &mut Option<String>, c: &mut Option<String>| {
        if let Some(id) = id.take() {
            processors.push(Processor {
                id,
                core: p.take().zip(c.take()),
            });
        }
        *p = None;
        *c = None;
    };
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => {
                finish(&mut current, &mut physical, &mut core);
                current = Some(value.parse().map_err(|_| {
                    Error::Local(format!(
                        "/proc/cpuinfo: `processor : {value}` is not a number"
                    ))
                })?);
            }
            "physical id" => physical = Some(value.to_owned()),
            "core id" => core = Some(value.to_owned()),
            _ => {}
        }
        fields.entry(key).or_insert(value);
    }
    finish(&mut current, &mut physical, &mut core);
    if processors.is_empty() {
        return Err(Error::Local(
            "/proc/cpuinfo lists no processor; describe this machine in a system file and pass \
             --system FILE"
                .into(),
        ));
    }
    let get = |keys: &[&str]| keys.iter().find_map(|k| fields.get(k).copied());
    let missing = |what: &str| {
        Error::Local(format!(
            "/proc/cpuinfo has no `{what}` line; describe this machine in a system file and pass \
             --system FILE"
        ))
    };
    let number = |keys: &[&str]| -> Result<u32> {
        let v = get(keys).ok_or_else(|| missing(keys[0]))?;
        let parsed = match v.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => v.parse().ok(),
        };
        parsed.ok_or_else(|| {
            Error::Local(format!(
                "/proc/cpuinfo `{}`: `{v}` is not a number",
                keys[0]
            ))
        })
    };
    let vendor_id = get(&["vendor_id", "CPU implementer"])
        .ok_or_else(|| missing("vendor_id"))?
        .to_owned();
    let mhz = fields
        .get("cpu MHz")
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0);
    Ok(CpuInfo {
        vendor_id,
        family: number(&["cpu family", "CPU architecture"])?,
        model: number(&["model", "CPU part"])?,
        model_name: get(&["model name", "Model"])
            .unwrap_or("unknown")
            .to_owned(),
        flags: get(&["flags", "Features"])
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        mhz,
        processors,
        cache_kib: fields
            .get("cache size")
            .and_then(|v| v.trim_end_matches("KB").trim().parse().ok()),
    })
}

/// Parses `MemTotal` from the text of `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Result<Bytes> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .map(Bytes::from_kib)
        .ok_or_else(|| Error::Local("/proc/meminfo has no readable `MemTotal` line".into()))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::catalog;
    use crate::precision::Precision;

    /// Two processors of an Emerald Rapids VM that hides the brand string.
    pub(crate) const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\
        model\t\t: 207\nmodel name\t: Intel(R) Xeon(R) Processor\ncpu MHz\t\t: 2100.000\n\
        cache size\t: 266240 KB\nphysical id\t: 0\ncore id\t\t: 0\n\
        flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_fp16 amx_bf16 amx_tile\n\n\
        processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 207\n\
        physical id\t: 0\ncore id\t\t: 1\n\n";

    const ARM: &str = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd asimdhp sve\n\
        CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\n\n\
        processor\t: 1\nFeatures\t: fp asimd asimdhp sve\nCPU implementer\t: 0x41\n\
        CPU architecture: 8\nCPU part\t: 0xd40\n\n";

    pub(crate) fn facts(cpuinfo: &str) -> HostFacts {
        HostFacts {
            arch: "x86_64".into(),
            cpu: parse_cpuinfo(cpuinfo).unwrap(),
            allowed_cpus: None,
            cpu_quota: None,
            caches: vec![
                Cache {
                    level: 1,
                    kind: "Data".into(),
                    bytes: 48 << 10,
                },
                Cache {
                    level: 3,
                    kind: "Unified".into(),
                    bytes: 260 << 20,
                },
            ],
            mem_total: Bytes::from_gib(24.0),
            mem_limit: None,
            clock: Clock {
                cpufreq_max_hz: None,
                cpuinfo_hz: Some(2.1e9),
                measured_hz: Some(3.0e9),
            },
            sve_vector_bytes: None,
            disk: Some(Disk {
                path: "/work".into(),
                bytes: 250_000_000_000,
            }),
        }
    }

    #[test]
    fn cpuinfo_counts_physical_cores() {
        let info = parse_cpuinfo(CPUINFO).unwrap();
        assert_eq!(info.physical_cores(None), 2);
        assert_eq!((info.family, info.model), (6, 207));
        assert_eq!(info.cache_kib, Some(266_240));
        assert!(info.has("avx512f") && !info.has("sve"));
        assert_eq!(info.mhz, Some(2100.0));
    }

    #[test]
    fn hyperthreads_count_once_and_affinity_narrows() {
        let smt = CPUINFO.replace("core id\t\t: 1", "core id\t\t: 0");
        assert_eq!(parse_cpuinfo(&smt).unwrap().physical_cores(None), 1);
        let info = parse_cpuinfo(CPUINFO).unwrap();
        assert_eq!(info.physical_cores(Some(&BTreeSet::from([1]))), 1);
    }

    #[test]
    fn arm_cpuinfo_reads_implementer_and_part() {
        let info = parse_cpuinfo(ARM).unwrap();
        assert_eq!(info.vendor_id, "0x41");
        assert_eq!((info.family, info.model), (8, 0xd40));
        assert_eq!(info.physical_cores(None), 2, "no core ids: logical CPUs");
        assert!(info.has("sve"));
    }

    #[test]
    fn meminfo_total_in_kib() {
        let m = parse_meminfo("MemTotal:       24682416 kB\nMemFree: 1 kB\n").unwrap();
        assert_eq!(m, Bytes::from_kib(24_682_416.0));
        assert!(parse_meminfo("nothing").is_err());
        assert!(parse_meminfo("MemTotal: 0 kB").is_err());
    }

    #[test]
    fn an_unlisted_cpu_is_described_from_its_facts() {
        let s = catalog::local(&facts(CPUINFO)).unwrap();
        assert_eq!(s.device.name, "local-cpu");
        assert_eq!(s.device.cores.as_ref().unwrap().value, 2);
        // Not in the core table: 2 FMA units x 512 bits at the measured 3.0 GHz (larger
        // than cpuinfo's 2.1).
        let fp32 = s.device.peak.fp32.as_ref().unwrap();
        assert!(
            (fp32.value.value() - 2.0 * 3.0e9 * 64.0).abs() < 1.0,
            "{fp32:?}"
        );
        assert!(fp32.source.contains("measured"), "{}", fp32.source);
        assert!(
            s.device.memory_bandwidth.is_none(),
            "unknown until measured"
        );
        assert!(s.device.matrix_peak(Precision::AmpBf16).is_ok(), "AMX");
        assert!(s.device.peak.fp16.is_some(), "AVX512-FP16");
        assert_eq!(s.device.llc.as_ref().unwrap().value, Bytes::from_mib(260.0));
        let all = s.assumptions.join("\n");
        assert!(
            all.contains("memory bandwidth unknown until measured"),
            "{all}"
        );
        assert!(
            all.contains("FP32 = 2 cores x 3.000 GHz x 64 FLOP/cycle"),
            "{all}"
        );
    }

    #[test]
    fn cgroup_quota_and_memory_limit_cap_the_machine() {
        let mut f = facts(CPUINFO);
        f.cpu_quota = Some(0.5);
        f.mem_limit = Some(Bytes::from_gib(4.0));
        let s = catalog::local(&f).unwrap();
        assert_eq!(s.device.cores.as_ref().unwrap().value, 1);
        assert_eq!(s.device_memory().unwrap().value, Bytes::from_gib(4.0));
        assert!(s.assumptions.join(" ").contains("cgroup CPU quota of 0.50"));
    }

    #[test]
    fn cpufreq_wins_over_cpuinfo_and_measured_clocks() {
        let mut f = facts(CPUINFO);
        f.clock.cpufreq_max_hz = Some(3.8e9);
        assert_eq!(f.clock().unwrap().0, 3.8e9);
        f.clock = Clock {
            cpuinfo_hz: Some(2.0e9),
            measured_hz: Some(1.5e9),
            ..Clock::default()
        };
        assert_eq!(f.clock().unwrap().0, 2.0e9);
        f.clock = Clock::default();
        assert!(f.clock().unwrap_err().to_string().contains("no clock"));
    }

    #[test]
    fn a_listed_core_uses_its_datapath_width() {
        // Zen 4 executes 512-bit AVX-512 as two 256-bit halves: 32 FP32 FLOP/cycle.
        let zen4 = CPUINFO
            .replace("GenuineIntel", "AuthenticAMD")
            .replace("cpu family\t: 6", "cpu family\t: 25")
            .replace("model\t\t: 207", "model\t\t: 17")
            .replace(" avx512_fp16 amx_bf16 amx_tile", "");
        let s = catalog::local(&facts(&zen4)).unwrap();
        let fp32 = s.device.peak.fp32.as_ref().unwrap();
        assert!(
            (fp32.value.value() - 2.0 * 3.0e9 * 32.0).abs() < 1.0,
            "{fp32:?}"
        );
        assert!(fp32.source.contains("Zen 4"), "{}", fp32.source);
        // No AMX: 16-bit matrix ops run at the FP32 vector peak.
        assert_eq!(
            s.device.matrix_peak(Precision::AmpBf16).unwrap().name,
            "fp32"
        );
    }

    #[test]
    fn arm_cores_use_sve_width() {
        let mut f = facts(ARM);
        f.arch = "aarch64".into();
        f.sve_vector_bytes = Some(32);
        f.clock = Clock {
            measured_hz: Some(2.6e9),
            ..Clock::default()
        };
        let s = catalog::local(&f).unwrap();
        let fp64 = s.device.peak.fp64.as_ref().unwrap().value.value();
        // Neoverse V1: 2 x 256-bit SVE FMA units = 16 FP64 FLOP/cycle.
        assert!((fp64 - 2.0 * 2.6e9 * 16.0).abs() < 1.0, "{fp64}");
    }

    #[test]
    fn a_listed_cpu_keeps_its_catalog_figures() {
        let spr = CPUINFO
            .replace("model\t\t: 207", "model\t\t: 143")
            .replace("266240", "107520");
        let s = catalog::local(&facts(&spr)).unwrap();
        assert_eq!(s.device.name, "xeon-8480plus");
        // 2 cores x 3.8 GHz x 64 FP32 FLOP/cycle.
        let fp32 = s.device.peak.fp32.as_ref().unwrap().value.as_tflops();
        assert!((fp32 - 2.0 * 3.8 * 64.0 / 1000.0).abs() < 1e-9, "{fp32}");
        assert!(s.device.memory_bandwidth.is_some());
    }

    #[test]
    fn cpu_lists_read_as_ranges() {
        assert_eq!(
            cpu_list(&BTreeSet::from([0, 1, 2, 3, 8, 10, 11])),
            "0-3,8,10-11"
        );
    }
}
