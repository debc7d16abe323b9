//! The converter of NeuSight's measured kernels (Lee, Phanishayee, Mahajan, ASPLOS 2025;
//! <https://github.com/trsharm25/NeuSight>, MIT licence) into a [`KernelSet`].
//!
//! NeuSight's `scripts/asplos/data/dataset/train/collect/<op>/p2.1.0/<GPU>.csv` hold one row
//! per measured operator: its latency in milliseconds (the mean of the fastest of repeated
//! runs, timed with CUDA events; `neusight/Dataset/collect.py`) and its shape, in FP32 with
//! PyTorch 2.1 and cuDNN 8.9. The shapes follow `collect.py`:
//! - `bmm`: `B, M, N, K` multiply `B x M x N` by `B x N x K`: `batch` products with `m = M`
//!   rows, inner dimension `k = N` and `n = K` columns;
//! - `linear`: `torch.nn.Linear(N, K)` (with bias) on a `B x M x N` input: one product of
//!   `B x M` rows (kept as `batch = B`, `m = M`), inner `N`, `K` columns;
//! - `conv`: `torch.nn.Conv2d(Input_Channel, Output_Channel, Kernel_Szie, Stride, Padding)`
//!   without bias on `B x Input_Channel x Input_Size x Input_Size`;
//! - the vector ops (`add`, `mul`, `div`, `pow` and their scalar forms `addu`, ..., `relu`,
//!   `gelu`, `tanh`, `softmax`, `ln` for layer norm) on `B x H`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::dataset::{ConvSample, GemmSample, KernelSet, Source, VectorSample};
use crate::error::{Error, Result};

/// Where the kernels are in a checkout of the repository.
pub const COLLECT: &str = "scripts/asplos/data/dataset/train/collect";

/// The PyTorch directory of the measurements converted.
pub const TORCH: &str = "p2.1.0";

/// NeuSight's device names and the ridgeline devices they are.
pub const DEVICES: [(&str, &str); 6] = [
    ("Tesla P4", "p4"),
    ("Tesla T4", "t4"),
    ("Tesla P100-PCIE-16GB", "p100-pcie-16gb"),
    ("Tesla V100-PCIE-32GB", "v100-pcie-32gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
];

#[derive(Deserialize)]
struct Row {
    #[serde(rename = "Latency")]
    latency_ms: f64,
    #[serde(rename = "Device")]
    device: String,
    #[serde(rename = "B")]
    b: u64,
    #[serde(rename = "M", default)]
    m: Option<u64>,
    #[serde(rename = "N", default)]
    n: Option<u64>,
    #[serde(rename = "K", default)]
    k: Option<u64>,
    #[serde(rename = "H", default)]
    h: Option<u64>,
    #[serde(rename = "Input_Channel", default)]
    c_in: Option<u64>,
    #[serde(rename = "Output_Channel", default)]
    c_out: Option<u64>,
    #[serde(rename = "Kernel_Szie", default)]
    kernel: Option<u64>,
    #[serde(rename = "Input_Size", default)]
    size: Option<u64>,
    #[serde(rename = "Stride", default)]
    stride: Option<u64>,
    #[serde(rename = "Padding", default)]
    padding: Option<u64>,
}

/// Converts the measurements under `dir` (a checkout of NeuSight at `commit`).
pub fn convert(dir: &Path, commit: &str) -> Result<KernelSet> {
    let collect = dir.join(COLLECT);
    let ops = std::fs::read_dir(&collect).map_err(|e| {
        Error::Input(format!(
            "{}: {e}; give the directory of a NeuSight checkout (git clone \
             https://github.com/trsharm25/NeuSight)",
            collect.display()
        ))
    })?;
    let mut ops: Vec<String> = ops
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join(TORCH).is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ops.sort();
    let mut set = KernelSet {
        source: Source {
            description: "FP32 operator latencies measured by NeuSight on five NVIDIA GPUs".into(),
            repository: "https://github.com/trsharm25/NeuSight".into(),
            commit: commit.to_owned(),
            paths: format!("{COLLECT}/<op>/{TORCH}/<GPU>.csv"),
            licence: "MIT".into(),
            copyright: "Copyright (c) 2025 Georgia Institute of Technology and Microsoft \
                        Corporation"
                .into(),
            measured_with: "PyTorch 2.1, CUDA 12.1, cuDNN 8.9; FP32; milliseconds converted \
                            to seconds; the mean of the fastest of repeated runs timed with \
                            CUDA events (neusight/Dataset/collect.py)"
                .into(),
            converted_by: format!("ridgeline import neusight DIR --commit {commit}"),
            devices: BTreeMap::new(),
        },
        gemm: Vec::new(),
        conv: Vec::new(),
        vector: Vec::new(),
    };
    for op in &ops {
        let mut files: Vec<_> = std::fs::read_dir(collect.join(op).join(TORCH))
            .map_err(|e| Error::Input(format!("{}: {e}", collect.join(op).display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "csv"))
            .collect();
        files.sort();
        for path in files {
            convert_file(&path, op, &mut set)?;
        }
    }
    if set.gemm.is_empty() && set.conv.is_empty() && set.vector.is_empty() {
        return Err(Error::Input(format!(
            "{}: no measurements under <op>/{TORCH}/",
            collect.display()
        )));
    }
    Ok(set)
}

fn convert_file(path: &Path, op: &str, set: &mut KernelSet) -> Result<()> {
    let at = |line: usize, what: String| {
        Error::Input(format!("{}: line {line}: {what}", path.display()))
    };
    let mut reader = csv::Reader::from_path(path)
        .map_err(|e| Error::Input(format!("{}: {e}", path.display())))?;
    for (i, row) in reader.deserialize::<Row>().enumerate() {
        let line = i + 2;
        let r = row.map_err(|e| at(line, e.to_string()))?;
        let device = DEVICES
            .iter()
            .find(|(name, _)| *name == r.device)
            .map(|(_, id)| (*id).to_owned())
            .ok_or_else(|| {
                at(
                    line,
                    format!(
                        "device `{}` is not one ridgeline knows; add it to \
                         calibrate::neusight::DEVICES with its device file",
                        r.device
                    ),
                )
            })?;
        set.source.devices.insert(r.device.clone(), device.clone());
        let need = |v: Option<u64>, col: &str| {
            v.ok_or_else(|| at(line, format!("column `{col}` is missing for `{op}`")))
        };
        let latency_s = r.latency_ms * 1e-3;
        match op {
            "bmm" | "linear" => set.gemm.push(GemmSample {
                device,
                op: op.to_owned(),
                batch: r.b,
                m: need(r.m, "M")?,
                n: need(r.k, "K")?,
                k: need(r.n, "N")?,
                latency_s,
            }),
            "conv" => set.conv.push(ConvSample {
                device,
                op: op.to_owned(),
                batch: r.b,
                c_in: need(r.c_in, "Input_Channel")?,
                c_out: need(r.c_out, "Output_Channel")?,
                size: need(r.size, "Input_Size")?,
                kernel: need(r.kernel, "Kernel_Szie")?,
                stride: need(r.stride, "Stride")?,
                padding: need(r.padding, "Padding")?,
                latency_s,
            }),
            _ => set.vector.push(VectorSample {
                device,
                op: op.to_owned(),
                batch: r.b,
                h: need(r.h, "H")?,
                latency_s,
            }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/neusight")
    }

    fn temp(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("ridgeline-neusight-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn converts_each_family_in_ridgeline_terms() {
        let set = convert(&fixture(), "db1fdc9").unwrap();
        assert_eq!(
            (set.gemm.len(), set.conv.len(), set.vector.len()),
            (3, 3, 3)
        );
        // bmm 13,27,15,29 on a T4 multiplies 13 x (27 x 15) by (15 x 29): k is N.
        let g = &set.gemm[0];
        assert_eq!((g.device.as_str(), g.op.as_str()), ("t4", "bmm"));
        assert_eq!((g.batch, g.m, g.n, g.k), (13, 27, 29, 15));
        let c = &set.conv[0];
        assert_eq!(
            (
                c.batch, c.c_in, c.c_out, c.kernel, c.size, c.stride, c.padding
            ),
            (38, 893, 326, 3, 5, 1, 1)
        );
        assert!((c.latency_s - 2.7097493012746177e-3).abs() < 1e-12);
        assert_eq!(set.vector[0].op, "relu");
        assert_eq!(set.source.devices["Tesla T4"], "t4");
        assert_eq!(set.source.commit, "db1fdc9");
    }

    #[test]
    fn a_set_reads_back_as_written_to_six_digits() {
        let set = convert(&fixture(), "db1fdc9").unwrap();
        let dir = temp("roundtrip");
        set.write(&dir).unwrap();
        let back = KernelSet::read(&dir).unwrap();
        assert_eq!(back.source, set.source);
        assert_eq!(back.gemm.len(), 3);
        for (a, b) in back.conv.iter().zip(&set.conv) {
            assert!((a.latency_s / b.latency_s - 1.0).abs() < 1e-5);
            assert_eq!((a.batch, a.c_in, a.size), (b.batch, b.c_in, b.size));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_sources_and_sets_name_the_file_line_and_fix() {
        // An unknown device.
        let dir = temp("unknown");
        let ops = dir.join(COLLECT).join("relu").join(TORCH);
        std::fs::create_dir_all(&ops).unwrap();
        std::fs::write(
            ops.join("x.csv"),
            "OPName,Latency,Device,B,H\nrelu,0.04,Radeon 9000,1,8\n",
        )
        .unwrap();
        let e = convert(&dir, "db1fdc9").unwrap_err().to_string();
        assert!(
            e.contains("x.csv: line 2") && e.contains("Radeon 9000"),
            "{e}"
        );
        // A GEMM row without its K.
        let ops = dir.join(COLLECT).join("bmm").join(TORCH);
        std::fs::create_dir_all(&ops).unwrap();
        std::fs::write(
            ops.join("y.csv"),
            "OPName,Latency,Device,B,M,N\nbmm,0.04,Tesla T4,1,8,8\n",
        )
        .unwrap();
        let e = convert(&dir, "db1fdc9").unwrap_err().to_string();
        assert!(e.contains("y.csv: line 2") && e.contains("`K`"), "{e}");
        // Not a checkout at all.
        let e = convert(&dir.join("nothing"), "db1fdc9")
            .unwrap_err()
            .to_string();
        assert!(e.contains("NeuSight checkout"), "{e}");
        // A written set with a zero time is refused on reading, naming the row.
        let mut set = convert(&fixture(), "db1fdc9").unwrap();
        set.vector[1].latency_s = 0.0;
        let out = temp("zero");
        set.write(&out).unwrap();
        let e = KernelSet::read(&out).unwrap_err().to_string();
        assert!(
            e.contains("vector.csv.gz: row 2") && e.contains("latency_s 0"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
    }

    /// The checked-in set (data/kernels/neusight) reads and holds what the README says.
    #[test]
    fn the_checked_in_set_reads() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/kernels/neusight");
        let set = KernelSet::read(&dir).unwrap();
        assert_eq!(
            set.devices(),
            [
                "a100-pcie-40gb",
                "a100-pcie-80gb",
                "p100-pcie-16gb",
                "p4",
                "t4",
                "v100-pcie-32gb"
            ]
        );
        assert!(set.gemm.len() > 100_000 && set.conv.len() > 20_000 && set.vector.len() > 100_000);
        assert_eq!(set.source.licence, "MIT");
    }
}
