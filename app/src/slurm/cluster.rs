//! A system file of a Slurm partition: what Slurm knows of its nodes (how many, their
//! cores, memory and GPUs) joined with what a node says of its own processor (the `local`
//! description), every figure Slurm cannot know marked as assumed and named.

use std::fmt::Write as _;

use anyhow::{Result, bail};
use ridgeline_model::system::{Device, DeviceKind, System};

use super::client;

/// One node as `scontrol show node --oneliner` describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// `NodeName`.
    pub name: String,
    /// Physical cores: `Sockets` x `CoresPerSocket` (`CPUTot` where those are missing).
    pub cores: u32,
    /// `RealMemory`, MiB.
    pub memory_mib: u64,
    /// GPUs from `Gres` (`gpu:TYPE:N` or `gpu:N`): the type, if named, and how many.
    pub gpus: Option<(Option<String>, u32)>,
    /// `Partitions`.
    pub partitions: Vec<String>,
}

/// The nodes `scontrol show node --oneliner` lists: one line per node of `Key=Value`
/// words (a value may hold spaces, as `OS=Linux 6.1.0 ...`: a word without `=` continues
/// the value before it).
pub fn parse_nodes(text: &str) -> Result<Vec<Node>> {
    let mut nodes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields: Vec<(String, String)> = Vec::new();
        for word in line.split_whitespace() {
            match word.split_once('=') {
                Some((k, v)) if !k.is_empty() && k.chars().all(char::is_alphanumeric) => {
                    fields.push((k.to_owned(), v.to_owned()));
                }
                _ => {
                    if let Some((_, v)) = fields.last_mut() {
                        v.push(' ');
                        v.push_str(word);
                    }
                }
            }
        }
        let get = |key: &str| {
            fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let number = |key: &str| get(key).and_then(|v| v.parse::<u64>().ok());
        let Some(name) = get("NodeName") else {
            bail!("`scontrol show node --oneliner` printed a line without NodeName: `{line}`");
        };
        let cores = match (
            number("Sockets"),
            number("CoresPerSocket"),
            number("CPUTot"),
        ) {
            (Some(s), Some(c), _) => s * c,
            (_, _, Some(cpus)) => cpus,
            _ => bail!("node {name}: Slurm gives neither Sockets and CoresPerSocket nor CPUTot"),
        };
        let Some(memory_mib) = number("RealMemory") else {
            bail!("node {name}: Slurm gives no RealMemory");
        };
        nodes.push(Node {
            name: name.to_owned(),
            cores: u32::try_from(cores)?,
            memory_mib,
            gpus: get("Gres").and_then(gpus),
            partitions: get("Partitions")
                .map(|p| p.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
        });
    }
    Ok(nodes)
}

/// The GPUs of a `Gres` value (`gpu:a100:4(S:0-1),nvme:1`, `gpu:2`): type and count.
fn gpus(gres: &str) -> Option<(Option<String>, u32)> {
    gres.split(',').find_map(|g| {
        let g = g.split('(').next()?;
        let mut parts = g.split(':');
        if parts.next()? != "gpu" {
            return None;
        }
        let rest: Vec<&str> = parts.collect();
        match rest.as_slice() {
            [n] => Some((None, n.parse().ok()?)),
            [t, n] => Some((Some((*t).to_owned()), n.parse().ok()?)),
            _ => None,
        }
    })
}

/// A partition described: the system file's text, the figures assumed, and its nodes.
#[derive(Debug, Clone)]
pub struct Described {
    /// The system's name: `<cluster>-<partition>`.
    pub name: String,
    /// The system file (TOML).
    pub toml: String,
    /// What Slurm could not say and was assumed, one line each.
    pub assumed: Vec<String>,
    /// Nodes in the partition.
    pub nodes: usize,
}

/// Describes `partition` (Slurm's default where `None`) of the cluster this machine's
/// Slurm serves: asks `sinfo`, `scontrol show node` and `scontrol show config`, and joins
/// their answer with `local`, this machine (`here` is its node name). `gpu` names the
/// catalog device of the partition's GPUs where Slurm's GRES type does not single one out.
pub fn describe(
    partition: Option<&str>,
    gpu: Option<&str>,
    local: &System,
    here: &str,
) -> Result<Described> {
    let (known, default) = super::partitions()?;
    let partition = match partition {
        Some(p) if known.iter().any(|k| k == p) => p.to_owned(),
        Some(p) => bail!(
            "--partition {p}: this cluster has no partition `{p}` (sinfo lists {}); give one of \
             them",
            known.join(", ")
        ),
        None => default.ok_or_else(|| {
            anyhow::anyhow!(
                "this cluster has no default partition: give --partition (sinfo lists {})",
                known.join(", ")
            )
        })?,
    };
    let config = client("scontrol", &["show", "config"])?;
    let cluster = config
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "ClusterName").then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| "cluster".to_owned());
    let nodes = parse_nodes(&client("scontrol", &["show", "node", "--oneliner"])?)?;
    let nodes: Vec<Node> = nodes
        .into_iter()
        .filter(|n| n.partitions.iter().any(|p| p == &partition))
        .collect();
    let device = match gpu {
        Some(name) => Some(ridgeline_model::catalog::device(name)?),
        None => None,
    };
    system_file(&cluster, &partition, &nodes, local, here, device)
}

/// [`describe`] on this machine: `local` as `ridgeline system show local` describes it,
/// and its node name as Slurm knows it (`SLURMD_NODENAME` inside a job, else the short
/// host name).
pub fn describe_here(partition: Option<&str>, gpu: Option<&str>) -> Result<Described> {
    let local = crate::inputs::system("local")?;
    let here = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().split('.').next().unwrap_or_default().to_owned())
        })
        .unwrap_or_else(|| "this machine".to_owned());
    let d = describe(partition, gpu, &local, &here)?;
    // The file must read back as a system.
    ridgeline_model::catalog::system_from_file(&d.toml, &d.name).map_err(|e| {
        anyhow::anyhow!(
            "the system file written from Slurm does not read back (a ridgeline bug): {e}"
        )
    })?;
    Ok(d)
}

/// The system file of `partition` of `cluster` from its `nodes`, `local` (this machine,
/// node `here`) and, for a GPU partition, the catalog `gpu` (else matched from GRES).
pub fn system_file(
    cluster: &str,
    partition: &str,
    nodes: &[Node],
    local: &System,
    here: &str,
    gpu: Option<Device>,
) -> Result<Described> {
    let Some(first) = nodes.first() else {
        bail!("partition {partition} has no nodes");
    };
    let name = format!("{cluster}-{partition}");
    let today = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let cores = nodes.iter().map(|n| n.cores).min().unwrap_or(first.cores);
    let memory_mib = nodes
        .iter()
        .map(|n| n.memory_mib)
        .min()
        .unwrap_or(first.memory_mib);
    let gpus = nodes
        .iter()
        .map(|n| n.gpus.as_ref().map_or(0, |g| g.1))
        .min()
        .unwrap_or(0);
    let mut assumed = Vec::new();
    if nodes
        .iter()
        .any(|n| n.cores != cores || n.memory_mib != memory_mib)
    {
        assumed.push(format!(
            "the {} nodes differ; the file takes the smallest: {cores} cores, {memory_mib} MiB",
            nodes.len()
        ));
    }
    let inside = nodes.iter().any(|n| n.name == here);
    let slurm = format!(
        "Slurm on {today}: `scontrol show node` of partition {partition} of cluster {cluster} ({} node(s): {})",
        nodes.len(),
        nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# Written by `ridgeline system from-slurm --partition {partition}` on {today}, on node {here}.\n\
         # Slurm gives the nodes, their cores, memory and GPUs; every other figure is assumed\n\
         # and says so in its source. Edit any figure with a better source; calibrate the\n\
         # partition (`ridgeline measure suite --slurm --calibrate`) to measure the rest."
    );
    let _ = writeln!(t, "name = {}", string(&name));
    let mut sources = vec![("slurm", slurm)];
    let device_lines = if gpus > 0 {
        let gpu = match gpu {
            Some(d) => d,
            None => gres_device(partition, first)?,
        };
        let _ = writeln!(
            t,
            "description = {}",
            string(&format!(
                "Slurm partition {partition} of {cluster}: {} node(s) of {gpus} x {} and {cores} CPU cores",
                nodes.len(),
                gpu.name
            ))
        );
        assumed.push(format!(
            "the GPUs are the catalog's {}: its datasheet figures, not measured",
            gpu.name
        ));
        format!("device = {}\n", string(&gpu.name))
    } else {
        let table = cpu_device(&name, cores, local, here, inside, partition)?;
        let _ = writeln!(
            t,
            "description = {}",
            string(&format!(
                "Slurm partition {partition} of {cluster}: {} node(s) of {cores} cores ({})",
                nodes.len(),
                local.device.model
            ))
        );
        sources.extend(table.sources);
        assumed.extend(table.assumed);
        table.toml
    };
    assumed.push(
        "the network (NICs, their bandwidth and latency) and the parallel file system are not \
         in Slurm's view: they are left out, and a multi-node prediction needs them added or \
         calibrated (`ridgeline measure comm --slurm`)"
            .to_owned(),
    );
    let _ = writeln!(t, "\n[sources]");
    for (k, v) in &sources {
        let _ = writeln!(t, "{k} = {}", string(v));
    }
    if gpus == 0 {
        t += &device_lines;
    }
    let _ = writeln!(t, "\n[node]");
    if gpus > 0 {
        t += &device_lines;
    }
    let _ = writeln!(
        t,
        "devices = {{ value = {}, source = \"slurm\" }}",
        gpus.max(1)
    );
    let _ = writeln!(
        t,
        "cpu = {}",
        string(&format!("{cores} cores ({})", local_cpu(local, inside)))
    );
    let _ = writeln!(
        t,
        "host_memory_gib = {{ value = {}, source = \"slurm\" }}",
        memory_mib as f64 / 1024.0
    );
    let _ = writeln!(t, "\n[cluster]");
    let _ = writeln!(
        t,
        "nodes = {{ value = {}, source = \"slurm\" }}",
        nodes.len()
    );
    let _ = writeln!(t, "network = \"unknown to Slurm: add it, or calibrate it\"");
    for a in &assumed {
        let _ = writeln!(t, "# assumed: {a}");
    }
    Ok(Described {
        name,
        toml: t,
        assumed,
        nodes: nodes.len(),
    })
}

/// The CPU of `local`, in words, said to be this machine's where it is not a node of the
/// partition.
fn local_cpu(local: &System, inside: bool) -> String {
    if inside {
        local.device.model.clone()
    } else {
        format!("assumed like {}'s", local.device.model)
    }
}

/// A `[device]` table, the sources it cites and what it assumes.
struct DeviceTable {
    toml: String,
    sources: Vec<(&'static str, String)>,
    assumed: Vec<String>,
}

/// The `[device]` table of a CPU partition: this machine's processor per core (its peaks
/// over the cores it may use), times the cores Slurm gives a node; its source; and what was
/// assumed.
fn cpu_device(
    name: &str,
    cores: u32,
    local: &System,
    here: &str,
    inside: bool,
    partition: &str,
) -> Result<DeviceTable> {
    let d = &local.device;
    if d.kind != DeviceKind::Cpu {
        bail!("this machine's device is not a CPU: give --gpu NAME for the partition's GPUs");
    }
    let Some(local_cores) = d.cores.as_ref().map(|c| c.value).filter(|c| *c > 0) else {
        bail!("this machine's description has no core count to scale its peaks from");
    };
    let per = |v: f64| v / f64::from(local_cores) * f64::from(cores) / 1e12;
    let mut assumed = Vec::new();
    let whose = if inside {
        format!("node {here} of the partition")
    } else {
        assumed.push(format!(
            "the processor is this machine's ({here}, not a node of partition {partition}): \
             run `srun --partition {partition} ridgeline system from-slurm` to describe one of \
             its nodes"
        ));
        format!("this machine, {here}, which is not a node of partition {partition}")
    };
    assumed.push(format!(
        "peak FLOP/s = the per-core peak `ridgeline system show local` gives on {here} x {cores} \
         cores (vector units, clock and the cores' count as that describes them)"
    ));
    let source = format!(
        "`ridgeline system show local` on {whose}: its per-core peak (over {local_cores} cores) x \
         the cores Slurm gives a node; {}",
        d.peak.fp32.as_ref().map_or("", |p| p.source.as_str())
    );
    let mut t = String::from("\n[device]\n");
    let _ = writeln!(t, "name = {}", string(&format!("{name}-cpu")));
    t += "kind = \"cpu\"\n";
    let _ = writeln!(t, "vendor = {}", string(&d.vendor));
    let _ = writeln!(t, "model = {}", string(&d.model));
    let _ = writeln!(t, "cores = {{ value = {cores}, source = \"slurm\" }}");
    t += "\n[device.peak]\n";
    for (field, peak) in [
        ("tflops_fp64", &d.peak.fp64),
        ("tflops_fp32", &d.peak.fp32),
        ("tflops_fp16", &d.peak.fp16),
        ("tflops_bf16", &d.peak.bf16),
    ] {
        if let Some(p) = peak {
            let _ = writeln!(
                t,
                "{field} = {{ value = {}, source = \"node\" }}",
                per(p.value.value())
            );
        }
    }
    let mut sources = vec![("node", source)];
    t += "\n[device.memory]\n";
    if let Some(llc) = &d.llc {
        let _ = writeln!(
            t,
            "llc_mib = {{ value = {}, source = \"llc\" }}",
            llc.value.value() / 1024.0 / 1024.0
        );
        sources.push((
            "llc",
            format!("`ridgeline system show local` on {whose}: {}", llc.source),
        ));
    }
    assumed.push(
        "memory bandwidth: unknown until measured; calibrating the partition supplies it"
            .to_owned(),
    );
    Ok(DeviceTable {
        toml: t,
        sources,
        assumed,
    })
}

/// The catalog device Slurm's GRES type names, where it names exactly one.
fn gres_device(partition: &str, node: &Node) -> Result<Device> {
    let names = ridgeline_model::catalog::device_names();
    let gres = node.gpus.as_ref().and_then(|g| g.0.clone());
    let matches: Vec<&String> = match &gres {
        Some(t) => names
            .iter()
            .filter(|n| n.starts_with(&t.to_lowercase()))
            .collect(),
        None => Vec::new(),
    };
    match (matches.as_slice(), gres) {
        ([one], _) => Ok(ridgeline_model::catalog::device(one)?),
        (_, Some(t)) => bail!(
            "partition {partition}: Slurm names its GPUs `{t}`, which is {} of the catalog's \
             devices{}: give --gpu NAME (`ridgeline system list`)",
            if matches.is_empty() {
                "none"
            } else {
                "several"
            },
            if matches.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    matches
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
        (_, None) => bail!(
            "partition {partition}: Slurm gives its nodes GPUs without a type: give --gpu NAME \
             (`ridgeline system list`)"
        ),
    }
}

/// `s` as a TOML string.
fn string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCONTROL: &str = "NodeName=nid001 Arch=x86_64 CoresPerSocket=32 CPUAlloc=0 CPUTot=128 CPULoad=0.01 Gres=gpu:a100:4(S:0-1) NodeAddr=nid001 OS=Linux 5.14.21 #1 SMP RealMemory=245760 Sockets=2 ThreadsPerCore=2 Partitions=gpu,debug State=IDLE\n\
NodeName=cn7 CPUTot=2 Gres=(null) RealMemory=21000 Partitions=local State=IDLE\n";

    #[test]
    fn scontrol_nodes_are_read_with_their_gpus() {
        let nodes = parse_nodes(SCONTROL).unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[0].name, "nid001");
        assert_eq!(nodes[0].cores, 64);
        assert_eq!(nodes[0].memory_mib, 245_760);
        assert_eq!(nodes[0].gpus, Some((Some("a100".into()), 4)));
        assert_eq!(nodes[0].partitions, ["gpu", "debug"]);
        assert_eq!(nodes[1].cores, 2);
        assert_eq!(nodes[1].gpus, None);
        assert_eq!(gpus("gpu:2"), Some((None, 2)));
        assert!(parse_nodes("Arch=x86_64\n").is_err());
    }

    #[test]
    fn a_cpu_partition_takes_the_nodes_processor_per_core() {
        let nodes = parse_nodes(SCONTROL).unwrap();
        let local = ridgeline_model::catalog::system("fugaku").unwrap();
        let per_core = local.device.peak.fp32.as_ref().unwrap().value.value()
            / f64::from(local.device.cores.as_ref().unwrap().value);
        let d = system_file("c", "local", &nodes[1..], &local, "cn7", None).unwrap();
        let system = ridgeline_model::catalog::system_from_file(&d.toml, "c.toml").unwrap();
        assert_eq!(system.device.cores.as_ref().unwrap().value, 2);
        let fp32 = system.device.peak.fp32.as_ref().unwrap().value.value();
        assert!((fp32 / (2.0 * per_core) - 1.0).abs() < 1e-9, "{fp32}");
        assert!(system.device.memory_bandwidth.is_none());
        assert!(
            (system.node.host_memory.as_ref().unwrap().value.as_gib() - 21000.0 / 1024.0).abs()
                < 1e-9
        );
        assert!(d.assumed.iter().any(|a| a.contains("memory bandwidth")));
        assert!(!d.assumed.iter().any(|a| a.contains("not a node")));
        // Described from a machine outside the partition, the processor is assumed.
        let d = system_file("c", "local", &nodes[1..], &local, "login1", None).unwrap();
        assert!(
            d.assumed
                .iter()
                .any(|a| a.contains("not a node of partition local")),
            "{:?}",
            d.assumed
        );
    }

    #[test]
    fn a_gpu_partition_needs_a_device_that_gres_singles_out() {
        let nodes = parse_nodes(SCONTROL).unwrap();
        let local = ridgeline_model::catalog::system("fugaku").unwrap();
        // `a100` is several catalog devices.
        let e = system_file("perlmutter", "gpu", &nodes[..1], &local, "login1", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--gpu") && e.contains("a100-sxm4-40gb"), "{e}");
        let gpu = ridgeline_model::catalog::device("a100-sxm4-40gb").unwrap();
        let d = system_file(
            "perlmutter",
            "gpu",
            &nodes[..1],
            &local,
            "login1",
            Some(gpu),
        )
        .unwrap();
        let system = ridgeline_model::catalog::system_from_file(&d.toml, "gpu.toml").unwrap();
        assert_eq!(system.name, "perlmutter-gpu");
        assert_eq!(system.device.name, "a100-sxm4-40gb");
        assert_eq!(system.node.devices.value, 4);
        assert_eq!(system.cluster.nodes.value, 1);
        assert!(
            d.assumed.iter().any(|a| a.contains("network")),
            "{:?}",
            d.assumed
        );
    }
}
