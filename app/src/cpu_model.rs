//! The CPU kernel model's data and check: the CPU record sets read (one directory a machine,
//! `cpu-*` under `data/evidence/kernels/ridgeline/`, written by `scripts/cpu-records.sh`) and
//! the CPU kernels of published sets (DeepBench's Xeon Phi, `scripts/import-deepbench.py`; the
//! GEMMs of BLIS's graphs, `scripts/import-blis-graphs.py`),
//! the model fitted on every CPU and each CPU left out in turn
//! (`ridgeline validate transfer --cpu`), and the fitted model written.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ridgeline_calibrate::cpu_transfer::{self, CpuPoint, CpuTransfer};
use ridgeline_calibrate::transfer::Holdout;
use ridgeline_model::system::Device;
use ridgeline_model::transfer::cpu::{CpuSpec, Software};
use serde::Serialize;

/// The prefix of a CPU record set's directory.
pub const SET_PREFIX: &str = "cpu-";

/// The device file of a CPU record set: the machine the records were measured on.
pub const DEVICE_FILE: &str = "device.toml";

/// One machine's CPU kernel records.
#[derive(Debug, Clone)]
pub struct CpuSet {
    /// The directory's name (`cpu-amd-epyc-f25m1`), the CPU's name in reports.
    pub name: String,
    /// The directory.
    pub dir: PathBuf,
    /// The machine's CPU ([`DEVICE_FILE`]).
    pub device: Device,
    /// Its records files and whose kernels each timed: `pytorch-*` PyTorch's (oneDNN,
    /// MKL), the others ridgeline's own.
    pub files: Vec<(PathBuf, Software)>,
}

/// The records files of a kernel record set's directory (`*.jsonl`, `*.jsonl.gz`), sorted;
/// files in its subdirectories are not read.
pub fn records_files(set: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(set)
        .with_context(|| set.display().to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".jsonl") || name.ends_with(".jsonl.gz")
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Whose kernels a records file of a CPU set holds, by its name.
pub fn software_of(file: &Path) -> Software {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("pytorch-") {
        Software::Onednn
    } else {
        Software::Ridgeline
    }
}

/// The CPU record sets under `dir` (its `cpu-*` directories), sorted by name.
pub fn cpu_sets(dir: &Path) -> Result<Vec<CpuSet>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: a directory of kernel records", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(SET_PREFIX))
        })
        .collect();
    dirs.sort();
    let mut out = Vec::new();
    for set in dirs {
        let file = set.join(DEVICE_FILE);
        let text = std::fs::read_to_string(&file).with_context(|| {
            format!(
                "{}: a CPU record set needs the device file of its machine \
                 (scripts/cpu-records.sh writes it)",
                file.display()
            )
        })?;
        let device = ridgeline_model::system::parse_device(&text, &file.display().to_string())?;
        if CpuSpec::of(&device, 1, ridgeline_model::precision::Precision::Fp32).is_none() {
            bail!(
                "{}: a CPU device with {} is needed to time kernels on it (missing: {})",
                file.display(),
                "cores, compute.boost_clock_mhz, the FP32 peak, memory.llc_mib and \
                 memory.bandwidth_gbs",
                CpuSpec::missing(&device).join(", ")
            );
        }
        let files = records_files(&set)?;
        out.push(CpuSet {
            name: set
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned(),
            dir: set.clone(),
            device,
            files: files
                .into_iter()
                .map(|f| (f.clone(), software_of(&f)))
                .collect(),
        });
    }
    Ok(out)
}

/// Every kernel record of `sets` as a point of the CPU model.
pub fn cpu_points(sets: &[CpuSet]) -> Result<Vec<CpuPoint>> {
    let mut out = Vec::new();
    for set in sets {
        for (file, software) in &set.files {
            let (records, _) = ridgeline_measure::record::read_records(file)?;
            let spec = |threads: u32, p| CpuSpec::of(&set.device, threads, p);
            out.extend(cpu_transfer::record_points(
                &file.display().to_string(),
                &records,
                &set.name,
                *software,
                &spec,
            )?);
        }
    }
    Ok(out)
}

/// The published CPU kernel sets `validate transfer --cpu` reads unless --published names
/// others: DeepBench's Xeon Phi and the GEMMs of BLIS's graphs.
pub const PUBLISHED: &[&str] = &[
    "data/evidence/kernels/deepbench-knl",
    "data/evidence/kernels/blis-sgemm",
];

/// A published kernel set's CPU kernels ([`cpu_transfer::published_points`]).
#[derive(Debug, Clone)]
pub struct PublishedCpus {
    /// The set's directory.
    pub dir: PathBuf,
    /// Its CPUs' kernels as points.
    pub points: Vec<CpuPoint>,
    /// Where they come from: the set, its CPUs, the source and commit.
    pub data: String,
}

/// The CPU kernels of the published sets `dirs` (a missing directory is skipped; a set with
/// no CPU gives no points). Each device is its catalog file; a CPU device without the figures
/// the model needs is an error naming them.
pub fn published_cpus(dirs: &[PathBuf]) -> Result<Vec<PublishedCpus>> {
    let mut out = Vec::new();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        let set = ridgeline_calibrate::dataset::PublishedSet::read(dir)?;
        let mut devices = BTreeMap::new();
        for name in set.source.devices.values() {
            let source = dir.join("SOURCE.toml");
            let device = ridgeline_model::catalog::device(name)
                .with_context(|| format!("{}: device `{name}`", source.display()))?;
            if device.kind == ridgeline_model::system::DeviceKind::Cpu
                && CpuSpec::of(&device, 1, ridgeline_model::precision::Precision::Fp32).is_none()
            {
                bail!(
                    "{}: device `{name}`: its file lacks {} to time CPU kernels; add them, sourced",
                    source.display(),
                    CpuSpec::missing(&device).join(", ")
                );
            }
            devices.insert(name.clone(), device);
        }
        let spec = |name: &str, threads: u32, p| CpuSpec::of(devices.get(name)?, threads, p);
        let points = cpu_transfer::published_points(&set, &spec)
            .with_context(|| format!("{}: a published kernel set", dir.display()))?;
        if points.is_empty() {
            continue;
        }
        let cpus: std::collections::BTreeSet<&str> =
            points.iter().map(|p| p.cpu.as_str()).collect();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let data = format!(
            "{name} ({}): published, {} at {}",
            cpus.into_iter().collect::<Vec<_>>().join(", "),
            set.source.repository,
            set.source.commit
        );
        out.push(PublishedCpus {
            dir: dir.clone(),
            points,
            data,
        });
    }
    Ok(out)
}

/// The file of a CPU set's whole training steps (`scripts/cpu-records.sh`).
pub const STEPS_FILE: &str = "steps.jsonl.gz";

/// What `validate transfer --cpu` found.
#[derive(Debug, Clone, Serialize)]
pub struct CpuCheck {
    /// The CPUs of the data, by set name, with their kernels.
    pub cpus: BTreeMap<String, usize>,
    /// Per software and class: the model fitted on every CPU, judged on its own kernels (a
    /// fit's residuals, not a validation).
    pub fitted: Vec<Holdout>,
    /// Each CPU left out in turn, where the data has two CPUs or more.
    pub transfer: Option<CpuTransfer>,
    /// Why no CPU was left out, where none was.
    pub not_left_out: Option<String>,
    /// Each set's whole training steps ([`STEPS_FILE`]) against their prediction on its CPU,
    /// uncalibrated: by the model fitted without that CPU (`device` the CPU) where the data
    /// has two CPUs or more, else by the model fitted on it (`device` `fitted on`, not a
    /// validation).
    pub steps: Vec<Holdout>,
}

/// Fits the CPU model on the sets under `dir` and the CPU kernels of the published sets
/// `published`, and leaves each CPU out where there are two or more.
pub fn check(dir: &Path, published: &[PathBuf]) -> Result<(CpuCheck, Vec<CpuPoint>)> {
    let sets = cpu_sets(dir)?;
    if sets.is_empty() {
        bail!(
            "{}: no CPU record set (a `{SET_PREFIX}*` directory with its {DEVICE_FILE}); \
             record one with scripts/cpu-records.sh",
            dir.display()
        );
    }
    let mut points = cpu_points(&sets)?;
    for set in published_cpus(published)? {
        points.extend(set.points);
    }
    let mut cpus = BTreeMap::new();
    for p in &points {
        *cpus.entry(p.cpu.clone()).or_insert(0) += 1;
    }
    let all: Vec<&CpuPoint> = points.iter().collect();
    let fits = cpu_transfer::fit(&all)?;
    let fitted = cpu_transfer::residuals(&fits, &all);
    let (transfer, not_left_out) = if cpus.len() >= 2 {
        (Some(cpu_transfer::leave_one_out(&points)?), None)
    } else {
        (
            None,
            Some(format!(
                "the data has kernels of {} CPU ({}): leaving one out needs two; each machine \
                 scripts/cpu-records.sh runs on adds one, and so does each published CPU set \
                 (--published)",
                cpus.len(),
                cpus.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
        )
    };
    let steps = steps(&sets, &points)?;
    Ok((
        CpuCheck {
            cpus,
            fitted,
            transfer,
            not_left_out,
            steps,
        },
        points,
    ))
}

/// Each set's whole training steps predicted on its CPU by the model fitted without it, as a
/// row of errors; by the model fitted with it where no other CPU has kernels of ridgeline's
/// executor, the software the steps run (published sets time a framework's libraries).
fn steps(sets: &[CpuSet], points: &[CpuPoint]) -> Result<Vec<Holdout>> {
    let mut out = Vec::new();
    for set in sets {
        let file = set.dir.join(STEPS_FILE);
        if !file.exists() {
            continue;
        }
        let several = points
            .iter()
            .any(|p| p.cpu != set.name && p.software == Software::Ridgeline);
        let others: Vec<CpuPoint> = points
            .iter()
            .filter(|p| !several || p.cpu != set.name)
            .cloned()
            .collect();
        let model = cpu_transfer::model(&others, None, Vec::new(), "leave one CPU out")?;
        let device = set.dir.join(DEVICE_FILE);
        let system = crate::inputs::system(&device.display().to_string())?;
        let (records, _) = ridgeline_measure::record::read_records(&file)?;
        let v = ridgeline_calibrate::validate::validate_with(
            &system,
            &records,
            &file.display().to_string(),
            None,
            Some(&model),
        )?;
        let errors: Vec<f64> = v.steps.iter().map(|s| s.rel_error).collect();
        let cpu = if several {
            set.name.as_str()
        } else {
            "fitted on"
        };
        out.push(cpu_transfer::errors_row(
            cpu,
            format!("steps {} (ridgeline-executor)", set.name),
            &errors,
        ));
    }
    Ok(out)
}

/// The model fitted on every CPU of `dir` and of the published sets `published`, as the TOML
/// ridgeline ships (`data/evidence/kernels/cpu-transfer.toml`).
pub fn model_text(
    dir: &Path,
    published: &[PathBuf],
    check: &CpuCheck,
    points: &[CpuPoint],
) -> Result<String> {
    let sets = cpu_sets(dir)?;
    let mut data: Vec<String> = sets
        .iter()
        .map(|s| {
            format!(
                "{} ({}): {}",
                s.name,
                s.device.model,
                s.files
                    .iter()
                    .filter_map(|(f, _)| f.file_name().and_then(|n| n.to_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    data.extend(published_cpus(published)?.into_iter().map(|s| s.data));
    let model = cpu_transfer::model(
        points,
        check.transfer.as_ref(),
        data,
        "ridgeline validate transfer --cpu --write-model data/evidence/kernels/cpu-transfer.toml",
    )?;
    let body = toml::to_string(&model).context("writing the CPU kernel model")?;
    Ok(format!(
        "# The CPU kernel model ridgeline ships: written by the command in source.fitted_by from\n\
         # the CPU record sets it names (docs/ARCHITECTURE.md \"A kernel model for CPUs you don't\n\
         # have\"). Do not edit: fit it again.\n{body}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ridgeline_model::transfer::cpu::CpuModel;

    fn shipped_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/evidence/kernels/ridgeline")
    }

    /// The coefficients ridgeline ships are what fitting the shipped CPU records gives
    /// (`ridgeline validate transfer --cpu --write-model data/evidence/kernels/cpu-transfer.toml`).
    #[test]
    fn the_shipped_cpu_model_is_the_fit_of_the_shipped_records() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let published: Vec<PathBuf> = PUBLISHED.iter().map(|p| root.join(p)).collect();
        let (check, points) = check(&shipped_dir(), &published).unwrap();
        let text = model_text(&shipped_dir(), &published, &check, &points).unwrap();
        let refit = CpuModel::parse(&text, "refit").unwrap();
        let shipped = CpuModel::builtin();
        assert_eq!(shipped.source.cpus, refit.source.cpus);
        assert_eq!(shipped.classes.len(), refit.classes.len());
        for (a, b) in shipped.classes.iter().zip(&refit.classes) {
            assert_eq!(
                (a.software, a.class, a.pass, &a.op),
                (b.software, b.class, b.pass, &b.op)
            );
            assert_eq!(a.points, b.points);
            for (x, y) in a.coefficients.iter().zip(&b.coefficients) {
                assert!((x - y).abs() <= 1e-9 * y.abs().max(1e-15), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn a_set_without_its_machines_device_file_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("ridgeline-cpu-sets-{}", std::process::id()));
        let set = dir.join("cpu-test");
        std::fs::create_dir_all(&set).unwrap();
        let e = format!("{:#}", cpu_sets(&dir).unwrap_err());
        assert!(
            e.contains("cpu-test/device.toml") && e.contains("scripts/cpu-records.sh"),
            "{e}"
        );
        // A device file without the model's figures: which ones it lacks.
        std::fs::write(
            set.join(DEVICE_FILE),
            "name = \"x\"\nkind = \"cpu\"\nvendor = \"v\"\nmodel = \"m\"\n[sources]\ns = \"s\"\n\
             [peak]\ntflops_fp32 = { value = 1.0, source = \"s\" }\n[memory]\n",
        )
        .unwrap();
        let e = format!("{:#}", cpu_sets(&dir).unwrap_err());
        assert!(e.contains("missing: cores, compute.boost_clock_mhz"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
