//! What this machine reports about itself, for the `local` system and the suite's plan.
//!
//! [`facts`] reads `/proc/cpuinfo`, the process's affinity mask (`Cpus_allowed_list` of
//! `/proc/self/status`), its cgroup's CPU quota and memory limit (cgroup v2 `cpu.max` and
//! `memory.max`, or v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` and
//! `memory.limit_in_bytes`, found through `/proc/self/cgroup` and `/proc/self/mountinfo`,
//! the lowest limit of the cgroup and its ancestors), CPU 0's caches and cpufreq maximum
//! from sysfs, `/proc/meminfo`, and, where the kernel gives no cpufreq, measures the clock
//! with [`measure_clock`]. The parsing is in small functions over text, tested on fixtures;
//! the model crate turns the facts into a system (`ridgeline_model::catalog::local`).

use std::collections::BTreeSet;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use ridgeline_model::system::{Cache, Clock, Disk, HostFacts, parse_cpuinfo, parse_meminfo};
use ridgeline_model::units::Bytes;

use crate::error::{Error, Result};

/// Reads everything `local` is described from. Files that a machine may lack (cgroup
/// limits, cpufreq, sysfs caches) are left out; `/proc/cpuinfo` and `/proc/meminfo` are
/// required.
pub fn facts() -> Result<HostFacts> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let required = |path: &str| {
        std::fs::read_to_string(path).map_err(|cause| Error::Io {
            path: path.into(),
            cause,
        })
    };
    let model = |e: ridgeline_model::Error| Error::invalid("system `local`", e.to_string());
    let cpu = parse_cpuinfo(&required("/proc/cpuinfo")?).map_err(model)?;
    let mem_total = parse_meminfo(&required("/proc/meminfo")?).map_err(model)?;
    let cgroups = read("/proc/self/cgroup")
        .zip(read("/proc/self/mountinfo"))
        .map(|(c, m)| cgroup_dirs(&c, &m))
        .unwrap_or_default();
    let cpufreq_max_hz = read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
        .and_then(|s| s.trim().parse::<f64>().ok())
        .map(|khz| khz * 1e3);
    let cpuinfo_hz = cpu.mhz.map(|m| m * 1e6);
    let measured_hz = cpufreq_max_hz.is_none().then(measure_clock);
    Ok(HostFacts {
        arch: std::env::consts::ARCH.to_owned(),
        allowed_cpus: read("/proc/self/status").and_then(|s| allowed_cpus(&s)),
        cpu_quota: cpu_quota(&cgroups),
        caches: caches(Path::new("/sys/devices/system/cpu/cpu0/cache")),
        mem_total,
        mem_limit: memory_limit(&cgroups),
        clock: Clock {
            cpufreq_max_hz,
            cpuinfo_hz,
            measured_hz,
        },
        sve_vector_bytes: read("/proc/sys/abi/sve_default_vector_length")
            .and_then(|s| s.trim().parse().ok()),
        disk: disk(),
        cpu,
    })
}

/// The file system of the working directory.
fn disk() -> Option<Disk> {
    let dir = std::env::current_dir().ok()?;
    let stat = rustix::fs::statvfs(&dir).ok()?;
    let bytes = stat.f_blocks.checked_mul(stat.f_frsize)?;
    (bytes > 0).then(|| Disk {
        path: dir.display().to_string(),
        bytes,
    })
}

/// Iterations of the clock loop per sample: 2 x 2^22 dependent operations, about 2 ms at
/// 4 GHz, far above the timer's resolution.
const CLOCK_ITERATIONS: u64 = 1 << 22;

/// Samples of the clock loop; the fastest counts (interruptions only slow a sample down).
const CLOCK_SAMPLES: usize = 7;

/// The clock this core runs at, Hz: a chain of dependent integer operations, each waiting
/// for the one before, runs at one per cycle on every x86-64 and Arm core (an ALU's
/// latency is one cycle), so operations per second is cycles per second. Each iteration
/// is an exclusive-or and an add on values the compiler cannot see (`black_box`), so it
/// can neither fold the chain nor run it in parallel. About 15 ms.
pub fn measure_clock() -> f64 {
    let (a, b) = (black_box(0x5555_5555_u64), black_box(0x1234_5678_u64));
    let chain = |n: u64| {
        let mut x = black_box(1_u64);
        for _ in 0..n {
            x = (x ^ a).wrapping_add(b);
        }
        black_box(x)
    };
    chain(CLOCK_ITERATIONS / 4);
    (0..CLOCK_SAMPLES)
        .map(|_| {
            let t = Instant::now();
            chain(CLOCK_ITERATIONS);
            2.0 * CLOCK_ITERATIONS as f64 / t.elapsed().as_secs_f64().max(1e-9)
        })
        .fold(0.0, f64::max)
}

/// The logical CPUs of `Cpus_allowed_list` in the text of `/proc/self/status`.
pub fn allowed_cpus(status: &str) -> Option<BTreeSet<u32>> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim())
}

/// A kernel CPU list, `0-3,8,10-11`.
pub fn parse_cpu_list(list: &str) -> Option<BTreeSet<u32>> {
    let mut cpus = BTreeSet::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 20 {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => {
                cpus.insert(part.parse().ok()?);
            }
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// A cgroup directory of this process for one controller, with the mount it lies under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDir {
    /// `cpu`, `memory`, or `` for the unified (v2) hierarchy.
    pub controller: String,
    /// The directory of this process's cgroup.
    pub dir: PathBuf,
    /// The mount point: limits are looked for from `dir` up to here.
    pub mount: PathBuf,
}

/// This process's cgroup directories, from the texts of `/proc/self/cgroup` and
/// `/proc/self/mountinfo`: for cgroup v2 the unified one, for v1 those of the `cpu` and
/// `memory` controllers.
pub fn cgroup_dirs(cgroup: &str, mountinfo: &str) -> Vec<CgroupDir> {
    // mountinfo: id parent major:minor root mountpoint options [optional...] - fstype source
    // superoptions
    let mounts: Vec<(String, PathBuf, String, BTreeSet<String>)> = mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let pre: Vec<&str> = pre.split_whitespace().collect();
            let post: Vec<&str> = post.split_whitespace().collect();
            let (root, point) = (pre.get(3)?, pre.get(4)?);
            let fstype = (*post.first()?).to_owned();
            let options = post
                .get(2)
                .map(|o| o.split(',').map(str::to_owned).collect())
                .unwrap_or_default();
            Some(((*root).to_owned(), PathBuf::from(point), fstype, options))
        })
        .collect();
    let mut dirs = Vec::new();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let wanted: Vec<&str> = if controllers.is_empty() {
            vec![""]
        } else {
            controllers
                .split(',')
                .filter(|c| matches!(*c, "cpu" | "memory"))
                .collect()
        };
        for controller in wanted {
            let mount = mounts.iter().find(|(_, _, fstype, options)| {
                if controller.is_empty() {
                    fstype == "cgroup2"
                } else {
                    fstype == "cgroup" && options.contains(controller)
                }
            });
            if let Some((root, point, _, _)) = mount {
                let relative = path
                    .strip_prefix(root.as_str())
                    .unwrap_or(path)
                    .trim_start_matches('/');
                dirs.push(CgroupDir {
                    controller: controller.to_owned(),
                    dir: point.join(relative),
                    mount: point.clone(),
                });
            }
        }
    }
    dirs
}

/// The lowest of `value` over the cgroup directories of `controller` and their ancestors up
/// to the mount, reading `file` in each.
fn lowest_limit(
    dirs: &[CgroupDir],
    controllers: &[&str],
    file: &str,
    value: impl Fn(&Path, &str) -> Option<f64>,
) -> Option<f64> {
    let mut lowest: Option<f64> = None;
    for d in dirs
        .iter()
        .filter(|d| controllers.contains(&d.controller.as_str()))
    {
        let mut dir = Some(d.dir.as_path());
        while let Some(here) = dir {
            if let Some(v) = std::fs::read_to_string(here.join(file))
                .ok()
                .and_then(|t| value(here, t.trim()))
            {
                lowest = Some(lowest.map_or(v, |l| l.min(v)));
            }
            if here == d.mount {
                break;
            }
            dir = here.parent().filter(|p| p.starts_with(&d.mount));
        }
    }
    lowest
}

/// The cgroup CPU quota in CPUs, where one is set (v2 `cpu.max`, v1 CFS quota / period).
fn cpu_quota(dirs: &[CgroupDir]) -> Option<f64> {
    let v2 = lowest_limit(dirs, &[""], "cpu.max", |_, t| parse_cpu_max(t));
    let v1 = lowest_limit(dirs, &["cpu"], "cpu.cfs_quota_us", |dir, quota| {
        let period = std::fs::read_to_string(dir.join("cpu.cfs_period_us")).ok()?;
        parse_cfs_quota(quota, period.trim())
    });
    match (v2, v1) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// cgroup v2 `cpu.max`: `max 100000` (none) or `200000 100000` (2 CPUs).
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let quota = parts.next()?;
    let period: f64 = parts.next().map_or(Some(100_000.0), |p| p.parse().ok())?;
    if quota == "max" {
        return None;
    }
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// cgroup v1 `cpu.cfs_quota_us` (-1 for none) over `cpu.cfs_period_us`.
pub fn parse_cfs_quota(quota: &str, period: &str) -> Option<f64> {
    let (quota, period): (f64, f64) = (quota.parse().ok()?, period.parse().ok()?);
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// The cgroup memory limit, where one is set (v2 `memory.max`, v1
/// `memory.limit_in_bytes`).
fn memory_limit(dirs: &[CgroupDir]) -> Option<Bytes> {
    let v2 = lowest_limit(dirs, &[""], "memory.max", |_, t| parse_memory_limit(t));
    let v1 = lowest_limit(dirs, &["memory"], "memory.limit_in_bytes", |_, t| {
        parse_memory_limit(t)
    });
    let lowest = match (v2, v1) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    lowest.map(Bytes::new)
}

/// A memory limit in bytes: `max` (v2) or a value at or above 2^62 (v1's "unlimited",
/// 9223372036854771712) is no limit.
pub fn parse_memory_limit(text: &str) -> Option<f64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes > 0 && bytes < 1 << 62).then_some(bytes as f64)
}

/// Cache sizes of CPU 0 (L1 data and last level), from sysfs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caches {
    /// L1 data cache bytes.
    pub l1d: usize,
    /// Last-level cache bytes.
    pub llc: usize,
}

impl Caches {
    /// Reads `/sys/devices/system/cpu/cpu0/cache`; where it is missing, 32 KiB and 32 MiB.
    pub fn detect() -> Caches {
        let mut found = Caches {
            l1d: 32 << 10,
            llc: 32 << 20,
        };
        let mut llc_level = 0;
        for c in caches(Path::new("/sys/devices/system/cpu/cpu0/cache")) {
            let bytes = usize::try_from(c.bytes).unwrap_or(usize::MAX);
            if c.level == 1 && c.kind == "Data" {
                found.l1d = bytes;
            }
            if c.kind != "Instruction" && c.level >= llc_level {
                llc_level = c.level;
                found.llc = bytes;
            }
        }
        found
    }
}

/// The caches under `dir` (`/sys/devices/system/cpu/cpu0/cache`): `index*/level`, `type`
/// and `size`.
pub fn caches(dir: &Path) -> Vec<Cache> {
    let mut caches = Vec::new();
    for i in 0..8 {
        let index = dir.join(format!("index{i}"));
        let read = |f: &str| {
            std::fs::read_to_string(index.join(f))
                .ok()
                .map(|s| s.trim().to_owned())
        };
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        if let (Ok(level), Some(bytes)) = (level.parse(), parse_cache_size(&size)) {
            caches.push(Cache { level, kind, bytes });
        }
    }
    caches
}

/// A sysfs cache size: `32K`, `1024K`, `32M`.
pub fn parse_cache_size(s: &str) -> Option<u64> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_ranges_and_singles() {
        let set = parse_cpu_list("0-3,8,10-11").unwrap();
        assert_eq!(set.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3, 8, 10, 11]);
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_cpu_list("").is_none());
        assert!(parse_cpu_list("0-4294967295").is_none(), "bounded");
        let status = "Name:\tx\nCpus_allowed:\t3\nCpus_allowed_list:\t0-1\n";
        assert_eq!(allowed_cpus(status).unwrap().len(), 2);
    }

    #[test]
    fn cpu_quotas_of_both_cgroup_versions() {
        assert_eq!(parse_cpu_max("max 100000"), None);
        assert_eq!(parse_cpu_max("150000 100000"), Some(1.5));
        assert_eq!(parse_cfs_quota("-1", "100000"), None);
        assert_eq!(parse_cfs_quota("200000", "100000"), Some(2.0));
    }

    #[test]
    fn memory_limits_treat_huge_values_as_none() {
        assert_eq!(parse_memory_limit("max"), None);
        assert_eq!(parse_memory_limit("9223372036854771712"), None);
        assert_eq!(parse_memory_limit("4294967296"), Some(4_294_967_296.0));
    }

    #[test]
    fn cgroup_dirs_resolve_v1_and_v2_mounts() {
        let cgroup = "4:memory:/process_api/abc\n1:cpu,cpuacct:/\n0::/user.slice/s1\n";
        let mountinfo = "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
            32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
            36 31 0:33 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
            40 31 0:35 /user.slice /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let dirs = cgroup_dirs(cgroup, mountinfo);
        let find = |c: &str| dirs.iter().find(|d| d.controller == c).unwrap();
        assert_eq!(
            find("memory").dir,
            PathBuf::from("/sys/fs/cgroup/memory/process_api/abc")
        );
        assert_eq!(find("cpu").dir, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(find("").dir, PathBuf::from("/sys/fs/cgroup/unified/s1"));
        assert_eq!(find("").mount, PathBuf::from("/sys/fs/cgroup/unified"));
    }

    #[test]
    fn limits_are_the_lowest_up_the_hierarchy() {
        let root = std::env::temp_dir().join(format!("ridgeline-cgroup-{}", std::process::id()));
        let leaf = root.join("a/b");
        std::fs::create_dir_all(&leaf).unwrap();
        std::fs::write(root.join("a/cpu.max"), "50000 100000\n").unwrap();
        std::fs::write(leaf.join("cpu.max"), "max 100000\n").unwrap();
        std::fs::write(root.join("memory.max"), "1073741824\n").unwrap();
        std::fs::write(leaf.join("memory.max"), "max\n").unwrap();
        let dirs = [CgroupDir {
            controller: String::new(),
            dir: leaf,
            mount: root.clone(),
        }];
        assert_eq!(cpu_quota(&dirs), Some(0.5));
        assert_eq!(memory_limit(&dirs), Some(Bytes::from_gib(1.0)));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn cache_sizes_in_sysfs_units() {
        assert_eq!(parse_cache_size("32K"), Some(32 << 10));
        assert_eq!(parse_cache_size("32768K"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("x"), None);
    }

    #[test]
    fn the_measured_clock_is_a_plausible_frequency() {
        // Any core of the last twenty years: between 200 MHz and 10 GHz (a chain the
        // compiler folded or ran in parallel would read far above that).
        let hz = measure_clock();
        assert!((2e8..1e10).contains(&hz), "{hz}");
    }
}
