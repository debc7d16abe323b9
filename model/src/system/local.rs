//! The `local` system: this machine, described from the text of `/proc/cpuinfo` and
//! `/proc/meminfo` (read by the caller) and `data/systems/local.toml`, which maps CPU
//! signatures to catalog devices. An unrecognised CPU is an error that says how to add it,
//! never a guess.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{Device, Sourced, System, parse_toml};
use crate::error::{Error, Result};
use crate::units::Bytes;

/// What `/proc/cpuinfo` says about this machine's processor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuInfo {
    /// `vendor_id`, e.g. `GenuineIntel`.
    pub vendor_id: String,
    /// `cpu family`.
    pub family: u32,
    /// `model`.
    pub model: u32,
    /// `model name` (virtual machines often hide the brand string).
    pub model_name: String,
    /// Physical cores visible (distinct `physical id` / `core id` pairs, or processors).
    pub cores: u32,
    /// `cache size` in KiB (the last-level cache on x86).
    pub cache_kib: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLocal {
    name: String,
    description: Option<String>,
    #[serde(default)]
    sources: BTreeMap<String, String>,
    cpu: Vec<RawCpuMatch>,
}

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

/// Parses the text of `/proc/cpuinfo`.
pub fn parse_cpuinfo(text: &str) -> Result<CpuInfo> {
    let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
    let mut cores = BTreeSet::new();
    let mut processors = 0u32;
    let (mut physical, mut core) = (None, None);
    for line in text.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if let (Some(p), Some(c)) = (physical.take(), core.take()) {
                cores.insert((p, c));
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => processors += 1,
            "physical id" => physical = Some(value.to_owned()),
            "core id" => core = Some(value.to_owned()),
            _ => {}
        }
        fields.entry(key).or_insert(value);
    }
    let get = |key: &str| {
        fields.get(key).copied().ok_or_else(|| {
            Error::Local(format!("/proc/cpuinfo has no `{key}` line; describe this machine in a system file and pass --system FILE"))
        })
    };
    let number = |key: &str| -> Result<u32> {
        get(key)?
            .parse()
            .map_err(|_| Error::Local(format!("/proc/cpuinfo `{key}` is not a number")))
    };
    let cache_kib = fields
        .get("cache size")
        .and_then(|v| v.trim_end_matches("KB").trim().parse().ok());
    let visible = if cores.is_empty() {
        processors
    } else {
        u32::try_from(cores.len()).unwrap_or(u32::MAX)
    };
    if visible == 0 {
        return Err(Error::Local("/proc/cpuinfo lists no processor".into()));
    }
    Ok(CpuInfo {
        vendor_id: get("vendor_id")?.to_owned(),
        family: number("cpu family")?,
        model: number("model")?,
        model_name: fields
            .get("model name")
            .copied()
            .unwrap_or("unknown")
            .to_owned(),
        cores: visible,
        cache_kib,
    })
}

/// Parses `MemTotal` from the text of `/proc/meminfo`.
pub fn parse_meminfo(text: &str) -> Result<Bytes> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(Bytes::from_kib)
        .ok_or_else(|| Error::Local("/proc/meminfo has no readable `MemTotal` line".into()))
}

/// Describes this machine as a one-node system of one CPU device, using `local_toml`
/// (`data/systems/local.toml`) to find the catalog device for its CPU.
pub fn local_system(
    cpu: &CpuInfo,
    host_memory: Bytes,
    local_toml: &str,
    file: &str,
    lookup: &dyn Fn(&str) -> Result<Device>,
) -> Result<System> {
    let raw: RawLocal = parse_toml(local_toml, file)?;
    let matched = raw.cpu.iter().find(|m| {
        m.vendor_id == cpu.vendor_id
            && m.family == cpu.family
            && m.model == cpu.model
            && m.cache_kib.is_none_or(|c| Some(c) == cpu.cache_kib)
    });
    let Some(m) = matched else {
        return Err(Error::Local(format!(
            "this machine's CPU ({} family {} model {}, \"{}\", cache {} KiB) is not listed in \
             {file}; add a [[cpu]] entry naming a device file for it, or describe the machine \
             in a system file and pass --system FILE",
            cpu.vendor_id,
            cpu.family,
            cpu.model,
            cpu.model_name,
            cpu.cache_kib
                .map_or_else(|| "unknown".to_owned(), |c| c.to_string())
        )));
    };
    let identified = raw.sources.get(&m.source).cloned().ok_or_else(|| {
        Error::invalid(
            file,
            "cpu.source",
            format!("`{}` is not a key of [sources]", m.source),
        )
    })?;
    let why = format!(
        "/proc/cpuinfo: {} physical cores visible to this machine; CPU identified as `{}`: {identified}",
        cpu.cores, m.device
    );
    let read = |what: &str| format!("{what}, read at run time");
    let device = lookup(&m.device)?.with_cores(cpu.cores, &why)?;
    let mut system = System::single_device(device);
    system.name = raw.name;
    system.description = raw.description;
    system.node.devices.source = read("/proc/cpuinfo");
    system.node.cpu = Some(format!("{} ({} cores visible)", cpu.model_name, cpu.cores));
    system.node.host_memory = Some(Sourced {
        value: host_memory,
        source: read("/proc/meminfo MemTotal"),
    });
    system.cluster.nodes.source = "this machine".into();
    Ok(system)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\
        model\t\t: 143\nmodel name\t: Intel(R) Xeon(R) Processor\ncache size\t: 107520 KB\n\
        physical id\t: 0\ncore id\t\t: 0\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n\
        cpu family\t: 6\nmodel\t\t: 143\nphysical id\t: 0\ncore id\t\t: 1\n\n";

    #[test]
    fn cpuinfo_counts_physical_cores() {
        let info = parse_cpuinfo(CPUINFO).unwrap();
        assert_eq!(info.cores, 2);
        assert_eq!(info.family, 6);
        assert_eq!(info.model, 143);
        assert_eq!(info.cache_kib, Some(107_520));
    }

    #[test]
    fn hyperthreads_count_once() {
        let smt = CPUINFO.replace("core id\t\t: 1", "core id\t\t: 0");
        assert_eq!(parse_cpuinfo(&smt).unwrap().cores, 1);
    }

    #[test]
    fn meminfo_total_in_kib() {
        let m = parse_meminfo("MemTotal:       24682416 kB\nMemFree: 1 kB\n").unwrap();
        assert_eq!(m, Bytes::from_kib(24_682_416.0));
        assert!(parse_meminfo("nothing").is_err());
    }

    #[test]
    fn unknown_cpu_says_how_to_add_it() {
        let toml = "name = \"local\"\n[sources]\n\n[[cpu]]\nvendor_id = \"AuthenticAMD\"\n\
                    family = 25\nmodel = 1\ndevice = \"x\"\nsource = \"s\"\n";
        let info = parse_cpuinfo(CPUINFO).unwrap();
        let err = local_system(&info, Bytes::from_gib(1.0), toml, "local.toml", &|_| {
            unreachable!("no lookup for an unmatched CPU")
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("add a [[cpu]] entry"), "{err}");
        assert!(err.contains("family 6 model 143"), "{err}");
    }
}
