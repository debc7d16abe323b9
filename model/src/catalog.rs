//! The catalog shipped with ridgeline: device and system files from `data/catalog/systems/` and the
//! reference tables from `data/evidence/reference/`, embedded in the binary so they work wherever
//! it is installed. Each entry keeps its repository path for error messages.

use crate::dataset::{self, WorkloadData};
use crate::error::{Error, Result};
use crate::system::{self, Device, HostFacts, System};

/// An embedded data file: its name on the command line, path in the repository, and text.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Name used on the command line.
    pub name: &'static str,
    /// Path in the repository, for messages.
    pub path: &'static str,
    /// File contents.
    pub text: &'static str,
}

macro_rules! entries {
    ($dir:literal; $($name:literal),* $(,)?) => {
        entries!($dir, ".toml"; $($name),*)
    };
    ($dir:literal, $suffix:literal; $($name:literal),* $(,)?) => {
        &[$(Entry {
            name: $name,
            path: concat!("data/catalog/", $dir, "/", $name, $suffix),
            text: include_str!(concat!("../../data/catalog/", $dir, "/", $name, $suffix)),
        }),*]
    };
}

/// Device files, `data/catalog/systems/devices/*.toml`.
pub const DEVICES: &[Entry] = entries!("systems/devices";
    "v100-sxm2-16gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb",
    "mi250x", "p4", "t4", "p100-pcie-16gb", "v100-pcie-32gb", "a100-pcie-40gb",
    "a100-pcie-80gb", "l4", "h100-pcie-80gb", "gh200", "b200", "mi100", "mi210", "mi300x", "a40",
    "a64fx", "xeon-8480plus", "grace", "xeon-phi-7250f", "xeon-8167m", "xeon-e5-2690v3",
    "thunderx2-cn9975", "graviton2");

/// System files, `data/catalog/systems/*.toml` (without `local`, which needs this machine).
pub const SYSTEMS: &[Entry] = entries!("systems";
    "cori-gpu", "perlmutter-gpu", "dgx-a100", "dgx-h100", "dgx-h200", "fugaku");

/// Data sets and convergence curves of the built-in workloads, `data/catalog/workloads/*.toml`.
pub const WORKLOAD_DATA: &[Entry] = entries!("workloads";
    "cosmoflow", "cosmoflow-v07", "deepcam", "resnet50", "swin-t", "bert-large", "gpt3-xl",
    "gpt3-2.7b", "gpt3-175b", "opt-1.3b");

/// Workload mixes for procurement reports, `data/catalog/mixes/*.toml`.
pub const MIXES: &[Entry] = entries!("mixes"; "mlperf-hpc");

/// Example procurement candidates (offers), `data/catalog/candidates/*.toml`.
pub const CANDIDATES: &[Entry] =
    entries!("candidates", ".offer.toml"; "dgx-a100", "dgx-h100", "dgx-h200");

/// Software stacks, `data/catalog/stacks/*.toml`.
pub const STACKS: &[Entry] = entries!("stacks";
    "pytorch-eager", "pytorch-compiled", "megatron-te", "tuned", "ridgeline-executor");

/// The stack a prediction runs under unless told otherwise: what a scientist runs without
/// tuning.
pub const DEFAULT_STACK: &str = "pytorch-eager";

/// `data/catalog/systems/local.toml`: how this machine's CPU maps to a device file.
pub const LOCAL: Entry = Entry {
    name: "local",
    path: "data/catalog/systems/local.toml",
    text: include_str!("../../data/catalog/systems/local.toml"),
};

/// The name of the system that describes this machine.
pub const LOCAL_NAME: &str = "local";

/// Names of every catalog device.
pub fn device_names() -> Vec<String> {
    DEVICES.iter().map(|e| e.name.to_owned()).collect()
}

/// Names of every catalog system, `local` included.
pub fn system_names() -> Vec<String> {
    SYSTEMS
        .iter()
        .map(|e| e.name)
        .chain([LOCAL_NAME])
        .map(str::to_owned)
        .collect()
}

/// The catalog device called `name`.
pub fn device(name: &str) -> Result<Device> {
    let entry = DEVICES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| Error::UnknownName {
            kind: "device",
            name: name.to_owned(),
            valid: device_names(),
        })?;
    system::parse_device(entry.text, entry.path)
}

/// The catalog system called `name`, or a one-device system for a catalog device name.
/// `local` is not handled here: use [`local`].
pub fn system(name: &str) -> Result<System> {
    if let Some(entry) = SYSTEMS.iter().find(|e| e.name == name) {
        return system::parse_system(entry.text, entry.path, &device);
    }
    if DEVICES.iter().any(|e| e.name == name) {
        return device(name).map(System::single_device);
    }
    let mut valid = system_names();
    valid.extend(device_names());
    Err(Error::UnknownName {
        kind: "system",
        name: name.to_owned(),
        valid,
    })
}

/// Parses a user's system or device file, resolving device names against the catalog.
pub fn system_from_file(text: &str, path: &str) -> Result<System> {
    system::parse_system_or_device(text, path, &device)
}

/// Names of every built-in stack.
pub fn stack_names() -> Vec<String> {
    STACKS.iter().map(|e| e.name.to_owned()).collect()
}

/// The built-in stack called `name`.
pub fn stack(name: &str) -> Result<crate::stack::Stack> {
    let entry = STACKS
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| crate::stack::unknown(name, stack_names()))?;
    crate::stack::parse(entry.text, entry.path)
}

/// The built-in stack of [`DEFAULT_STACK`], parsed once.
pub fn default_stack() -> &'static crate::stack::Stack {
    static STACK: std::sync::OnceLock<crate::stack::Stack> = std::sync::OnceLock::new();
    STACK.get_or_init(|| {
        stack(DEFAULT_STACK)
            .unwrap_or_else(|e| unreachable!("the built-in stacks are checked by a test: {e}"))
    })
}

/// The shipped data set and convergence curve of a built-in workload, if any.
pub fn workload_data(name: &str) -> Result<Option<WorkloadData>> {
    WORKLOAD_DATA
        .iter()
        .find(|e| e.name == name)
        .map(|e| dataset::parse_workload_data(e.text, e.path))
        .transpose()
}

/// A shipped workload mix.
pub fn mix(name: &str) -> Result<crate::procurement::Mix> {
    let entry = MIXES
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| Error::UnknownName {
            kind: "mix",
            name: name.to_owned(),
            valid: MIXES.iter().map(|e| e.name.to_owned()).collect(),
        })?;
    crate::procurement::parse_mix(entry.text, entry.path)
}

/// A shipped example candidate, if `name` is one.
pub fn candidate(name: &str) -> Result<Option<crate::procurement::Offer>> {
    CANDIDATES
        .iter()
        .find(|e| e.name == name)
        .map(|e| crate::procurement::parse_offer(e.text, e.path))
        .transpose()
}

/// This machine as the `local` system, from what the host reports about itself.
pub fn local(facts: &HostFacts) -> Result<System> {
    system::local_system(facts, LOCAL.text, LOCAL.path, &device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::Precision;

    #[test]
    fn every_catalog_device_and_system_parses() {
        for e in DEVICES {
            let d = device(e.name).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(
                d.name, e.name,
                "{}: name field must match the file name",
                e.path
            );
        }
        for e in SYSTEMS {
            let s = system(e.name).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(
                s.name, e.name,
                "{}: name field must match the file name",
                e.path
            );
        }
    }

    #[test]
    fn every_workload_data_file_parses_and_names_its_workload() {
        for e in WORKLOAD_DATA {
            let d = workload_data(e.name)
                .unwrap_or_else(|err| panic!("{err}"))
                .unwrap();
            assert_eq!(d.workload.as_deref(), Some(e.name));
            assert!(d.dataset.is_some(), "{}", e.path);
        }
    }

    #[test]
    fn unknown_system_lists_valid_names() {
        let err = system("cori").unwrap_err().to_string();
        assert!(err.contains("unknown system `cori`"), "{err}");
        assert!(err.contains("cori-gpu") && err.contains("local") && err.contains("mi250x"));
    }

    #[test]
    fn device_name_works_as_a_system() {
        let s = system("h100-sxm5-80gb").unwrap();
        assert_eq!(s.node.devices.value, 1);
        assert_eq!(s.device.model, "H100-SXM5-80GB");
    }

    #[test]
    fn datasheet_machine_balance_of_v100() {
        let d = device("v100-sxm2-16gb").unwrap();
        let peak = d.matrix_peak(Precision::AmpFp16).unwrap().rate;
        let balance = peak / d.memory_bandwidth.unwrap().value;
        assert!(
            (balance - 138.9).abs() < 0.1,
            "[004] says about 138: {balance}"
        );
    }

    #[test]
    fn v100_cannot_run_bf16_and_a100_can() {
        assert!(
            device("v100-sxm2-16gb")
                .unwrap()
                .matrix_peak(Precision::AmpBf16)
                .is_err()
        );
        let a100 = device("a100-sxm4-40gb").unwrap();
        assert_eq!(
            a100.matrix_peak(Precision::AmpBf16)
                .unwrap()
                .rate
                .as_tflops(),
            312.0
        );
        assert_eq!(
            a100.matrix_peak(Precision::Tf32).unwrap().rate.as_tflops(),
            156.0
        );
    }
}
