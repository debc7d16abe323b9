//! Issue 17: the faults found while modelling real clusters (part 4) and by a fuzzing pass
//! (part 5). Each gets a clear error (exit 2, naming the key, the flag or the file) or a
//! fix that the test checks.

use std::path::PathBuf;

use crate::{run_err, run_json, run_ok};

/// A scratch directory of this test process.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("ridgeline-faults-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A fresh GEMM records file `dir/name` of the given sizes, measured quickly on one
/// thread; its path.
fn measured_gemm(dir: &std::path::Path, name: &str, sizes: &str) -> String {
    let out = dir.join(name);
    let o = out.to_str().unwrap().to_owned();
    let _ = std::fs::remove_file(&out);
    let mut args = vec!["measure", "gemm", "--size", sizes, "--out", &o];
    args.extend(QUICK);
    run_ok(&args);
    o
}

/// Writes `text` to `name` in a scratch directory and returns the path.
pub(crate) fn write(name: &str, text: &str) -> String {
    let path = scratch("files").join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A catalog file's text, by repository path.
pub(crate) fn data(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The quick protocol, on one thread.
const QUICK: [&str; 8] = {
    let q = crate::QUICK;
    [q[0], q[1], q[2], q[3], q[4], q[5], "--threads", "1"]
};

/// `measure workload` of CosmoFlow at 32^3, one step, into `out` (resumed or not), by the
/// quick protocol.
fn tiny_workload_args(out: &str, resume: bool) -> Vec<&str> {
    let mut args = vec![
        "measure",
        "workload",
        "cosmoflow",
        "--input-size",
        "32",
        "--steps",
        "1",
        "--out",
        out,
    ];
    if resume {
        args.push("--resume");
    }
    args.extend(QUICK);
    args
}

#[test]
fn issue17_a_cpu_profile_is_refused_for_a_gpu_system() {
    let dir = scratch("cpu-profile");
    let records = measured_gemm(&dir, "cpu-suite.jsonl", "32,48,64,96,128");
    let r = records.as_str();
    let profile = dir.join("p.toml");
    let err = run_err(&[
        "calibrate",
        r,
        "--system",
        "perlmutter-gpu",
        "--out",
        profile.to_str().unwrap(),
    ]);
    assert!(
        err.contains("`cpu`") && err.contains("a100-sxm4-40gb"),
        "{err}"
    );
    assert!(err.contains("cpu-suite.jsonl"), "{err}");
    assert!(!profile.exists(), "no profile is written");
    // The same records calibrate this machine.
    run_ok(&["calibrate", r, "--out", profile.to_str().unwrap()]);
    // A hand-edited profile that names a GPU system is refused where it is used.
    let text = std::fs::read_to_string(&profile)
        .unwrap()
        .replace("system = \"local\"", "system = \"perlmutter-gpu\"");
    let edited = write("edited-profile.toml", &text);
    let err = run_err(&["system", "show", &edited]);
    assert!(err.contains("edited-profile.toml: field `device`"), "{err}");
}

#[test]
fn issue17_dgx_data_sets_that_fit_the_nvme_are_read_from_it() {
    // CosmoFlow's 8.8 TB data set fits a DGX's 30 TB NVMe, not its 2 TB memory.
    for system in ["dgx-a100", "dgx-h100", "dgx-h200"] {
        let p = run_json(&[
            "predict",
            "cosmoflow",
            "--system",
            system,
            "--nodes",
            "1",
            "--batch",
            "4",
            "--epochs",
            "10",
            "--format",
            "json",
        ]);
        assert_eq!(p["data_location"], "nvme", "{system}");
        let staging = p["staging_s"].as_f64().unwrap();
        if system == "dgx-a100" {
            // No file system is sourced for the A100 SuperPOD: no staging, and said so.
            assert_eq!(staging, 0.0);
            let said = p["assumptions"].to_string();
            assert!(said.contains("no staging"), "{said}");
        } else {
            // Staged from the SuperPOD's file system at its per-node share.
            assert!(staging > 0.0, "{system}");
        }
    }
    // Without the read bandwidth the error names the missing key.
    let text = data("data/catalog/systems/dgx-a100.toml").replace(
        "nvme_read_gbs = { value = 51.2, source = \"drives\" } # 8 x 6.4 GB/s, RAID 0\n",
        "",
    );
    let path = write("dgx-no-nvme-read.toml", &text);
    let err = run_err(&[
        "predict",
        "cosmoflow",
        "--system",
        &path,
        "--nodes",
        "1",
        "--batch",
        "4",
        "--epochs",
        "10",
    ]);
    assert!(err.contains("add node.nvme_read_gbs"), "{err}");
}

#[test]
fn issue17_a_scenario_may_go_past_the_listed_nodes_with_a_warning() {
    let p = run_json(&[
        "predict", "resnet50", "--system", "dgx-h100", "--nodes", "128", "--batch", "64",
        "--epochs", "40", "--format", "json",
    ]);
    assert_eq!(p["nodes"], 128);
    assert_eq!(p["devices"], 1024);
    let said = p["assumptions"].as_array().unwrap();
    assert!(
        said.iter()
            .any(|a| a.as_str().unwrap().contains("past the 32 the system lists")),
        "{said:?}"
    );
    // Sweeps keep the listed size, and their reason says how to raise it.
    let s = run_json(&[
        "scale", "resnet50", "--system", "dgx-h100", "--mode", "weak", "--batch", "64", "--nodes",
        "32,64", "--epochs", "40", "--format", "json",
    ]);
    let reason = s["rows"][1]["infeasible"].as_str().unwrap();
    assert!(reason.contains("larger `cluster.nodes`"), "{reason}");
}

#[test]
fn issue17_staging_counts_when_the_data_set_sits_in_host_memory() {
    // DeepCAM's share fits Perlmutter's host memory at 256 nodes: staged from the PFS.
    let p = run_json(&[
        "predict",
        "deepcam",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "256",
        "--batch",
        "2",
        "--epochs",
        "10",
        "--format",
        "json",
    ]);
    assert_eq!(p["data_location"], "ddr");
    let staging = p["staging_s"].as_f64().unwrap();
    assert!(staging > 0.0, "{p}");
    let tts = p["time_to_solution_s"].as_f64().unwrap();
    let epoch = p["epoch_time_s"].as_f64().unwrap();
    assert!((tts - staging - 10.0 * epoch).abs() < 1e-6 * tts);
}

#[test]
fn issue17_a_missing_peak_names_the_real_key_and_following_it_works() {
    // A V100 has no bf16: the message names `tflops_bf16` under [peak].
    let device = data("data/catalog/systems/devices/v100-sxm2-16gb.toml");
    let path = write("v100.toml", &device);
    let err = run_err(&[
        "roofline",
        "resnet50",
        "--system",
        &path,
        "--batch",
        "8",
        "--precision",
        "amp-bf16",
    ]);
    assert!(
        err.contains("tflops_bf16") && err.contains("[peak]"),
        "{err}"
    );
    assert!(!err.contains("peak_tflops"), "{err}");
    // Following the message gives a file that parses and runs.
    let fixed = device.replace(
        "[peak]\n",
        "[peak]\ntflops_bf16_tensor = { value = 100.0, source = \"v100\" }\n",
    );
    let source_key = device
        .lines()
        .find_map(|l| l.strip_prefix("tflops_fp32 = { value = "))
        .and_then(|l| l.split("source = \"").nth(1))
        .and_then(|l| l.split('"').next())
        .unwrap()
        .to_owned();
    let fixed = fixed.replace(
        "source = \"v100\" }",
        &format!("source = \"{source_key}\" }}"),
    );
    let path = write("v100-bf16.toml", &fixed);
    run_ok(&[
        "roofline",
        "resnet50",
        "--system",
        &path,
        "--batch",
        "8",
        "--precision",
        "amp-bf16",
    ]);
}

#[test]
fn issue17_predict_refuses_a_batch_that_does_not_fit_and_names_the_largest() {
    let err = run_err(&[
        "predict",
        "resnet50",
        "--system",
        "v100-sxm2-16gb",
        "--nodes",
        "1",
        "--batch",
        "4096",
        "--epochs",
        "1",
        "--data-location",
        "pfs",
    ]);
    assert!(err.contains("batch = 4096"), "{err}");
    assert!(
        err.contains("one device needs") && err.contains("but has 16.00 GiB"),
        "{err}"
    );
    assert!(
        err.contains("the largest batch per device that fits is"),
        "{err}"
    );
}

#[test]
fn issue17_cosmoflow_v1_has_a_convergence_curve() {
    let p = run_json(&[
        "predict",
        "cosmoflow",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "128",
        "--batch",
        "1",
        "--format",
        "json",
    ]);
    // Global batch 512: the reference convergence point (22.8 epochs).
    assert!((p["epochs"].as_f64().unwrap() - 22.833).abs() < 1e-3, "{p}");
    // Outside the curve: says it does not extrapolate and how to pass the epochs.
    let err = run_err(&[
        "predict",
        "cosmoflow",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "1",
        "--batch",
        "4",
    ]);
    assert!(
        err.contains("does not extrapolate") && err.contains("--epochs"),
        "{err}"
    );
}

/// Negative and zero values of numeric flags: a range error naming the flag, never an
/// "unexpected argument".
#[test]
fn issue17_negative_and_zero_numbers_name_their_flag() {
    let predict = [
        "predict", "resnet50", "--system", "cori-gpu", "--nodes", "1", "--batch", "8", "--epochs",
        "3",
    ];
    let cases: &[(&[&str], &str)] = &[
        (&predict, "--epochs"),
        (&predict, "--nodes"),
        (&predict, "--batch"),
        (&predict, "--compute-efficiency"),
        (&predict, "--memory-efficiency"),
        (&predict, "--preprocess-rate"),
        (&predict, "--compression"),
        (&predict, "--train-samples"),
        (&predict, "--eval-samples"),
        (
            &["memory", "resnet50", "--system", "cori-gpu"],
            "--batch-step",
        ),
        (&["roofline", "resnet50", "--system", "cori-gpu"], "--batch"),
        (&["workload", "show", "resnet50"], "--batch"),
        (&["workload", "show", "resnet50"], "--width"),
        (
            &[
                "sweep",
                "resnet50",
                "--systems",
                "cori-gpu",
                "--batch",
                "8",
                "--epochs",
                "3",
            ],
            "--nodes",
        ),
        (&["measure", "gemm"], "--size"),
        (&["measure", "gemm", "--size", "64"], "--threads"),
        (&["measure", "gemm", "--size", "64"], "--min-samples"),
        (&["measure", "workload", "resnet50"], "--steps"),
        (&["validate", "--self-check"], "--budget"),
        (&["measure", "suite", "--out", "x.jsonl"], "--budget"),
    ];
    for (base, flag) in cases {
        for value in ["-3", "0"] {
            // The base command without the flag, then the flag with the bad value.
            let mut args: Vec<&str> = Vec::new();
            let mut it = base.iter();
            while let Some(a) = it.next() {
                if a == flag {
                    it.next();
                } else {
                    args.push(a);
                }
            }
            args.extend([*flag, value]);
            if *flag == "--budget" && value == "0" {
                args.pop();
                args.push("0s");
            }
            let err = run_err(&args);
            let name = flag.trim_start_matches("--");
            assert!(
                err.contains(flag) || err.contains(&format!("{name} =")),
                "{args:?}: {err}"
            );
            assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
        }
    }
}

/// A system file with every storage and link figure, to push each one past its range.
const FULL_SYSTEM: &str = r#"name = "full"
[sources]
s = "test"
[node]
device = "a100-sxm4-80gb"
devices = { value = 4, source = "s" }
host_memory_gib = { value = 512.0, source = "s" }
host_memory_gbs = { value = 400.0, source = "s" }
pcie_gbs = { value = 31.5, source = "s" }
nvlink_gbs = { value = 300.0, source = "s" }
nvme_capacity_gb = { value = 4000.0, source = "s" }
nvme_read_gbs = { value = 10.0, source = "s" }
nics = { value = 4, source = "s" }
nic_gbs = { value = 25.0, source = "s" }
[cluster]
nodes = { value = 16, source = "s" }
pfs_capacity_pb = { value = 10.0, source = "s" }
pfs_bandwidth_gbs = { value = 500.0, source = "s" }
"#;

#[test]
fn issue17_huge_system_figures_are_refused_after_unit_conversion() {
    for key in [
        "host_memory_gib",
        "host_memory_gbs",
        "pcie_gbs",
        "nvlink_gbs",
        "nvme_capacity_gb",
        "nvme_read_gbs",
        "nic_gbs",
        "pfs_capacity_pb",
        "pfs_bandwidth_gbs",
    ] {
        let text: String = FULL_SYSTEM
            .lines()
            .map(|l| {
                if l.starts_with(&format!("{key} =")) {
                    format!("{key} = {{ value = 1e300, source = \"s\" }}")
                } else {
                    l.to_owned()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let path = write(&format!("huge-{key}.toml"), &text);
        let err = run_err(&[
            "predict", "resnet50", "--system", &path, "--nodes", "2", "--batch", "8", "--epochs",
            "10",
        ]);
        assert!(
            err.contains(key) && err.contains("beyond any machine"),
            "{key}: {err}"
        );
    }
    // The unmodified file predicts.
    let path = write("full.toml", FULL_SYSTEM);
    run_ok(&[
        "predict", "resnet50", "--system", &path, "--nodes", "2", "--batch", "8", "--epochs", "10",
    ]);
}

#[test]
fn issue17_huge_epochs_counts_and_batches_never_print_inf_or_wrapped_numbers() {
    let err = run_err(&[
        "predict", "resnet50", "--system", "cori-gpu", "--nodes", "1", "--batch", "8", "--epochs",
        "1e308",
    ]);
    assert!(err.contains("--epochs"), "{err}");
    // 2^32 - 1 nodes of 2^32 - 1 devices: refused, naming the field.
    let text = FULL_SYSTEM
        .replace("devices = { value = 4,", "devices = { value = 4294967295,")
        .replace("nodes = { value = 16,", "nodes = { value = 4294967295,");
    let path = write("wrap.toml", &text);
    let err = run_err(&[
        "predict", "resnet50", "--system", &path, "--nodes", "1", "--batch", "8", "--epochs", "1",
    ]);
    assert!(err.contains("node.devices.value"), "{err}");
    // 64 large 3-D convolutions at batch 65,536: the MAC total passes 2^64 and is exact.
    let mut workload = String::from("name = \"macs\"\ninput = [1024, 64, 64, 64]\n");
    for i in 0..64 {
        workload.push_str(&format!(
            "[[layer]]\nname = \"c{i}\"\nop = \"conv\"\nout_channels = 1024\nkernel = 3\npadding = \"same\"\n"
        ));
    }
    let path = write("macs.toml", &workload);
    let json = run_ok(&[
        "workload", "show", &path, "--batch", "65536", "--format", "json",
    ]);
    let per_layer: u128 = 1024 * 1024 * 27 * 64 * 64 * 64;
    let exact = format!("\"macs_fwd\": {},", 64 * 65_536 * per_layer);
    assert!(
        json.contains(&exact),
        "{exact} in {}",
        &json[..400.min(json.len())]
    );
}

/// Writes `records` as a JSON Lines file.
fn jsonl(name: &str, records: &[serde_json::Value]) -> String {
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    write(name, &text)
}

/// A measured tiny workload (CosmoFlow at 32^3), its records as JSON: measured once for
/// every test of this binary (the others wait for it).
fn tiny_workload_records() -> Vec<serde_json::Value> {
    static RECORDS: std::sync::OnceLock<Vec<serde_json::Value>> = std::sync::OnceLock::new();
    RECORDS
        .get_or_init(|| {
            let out = scratch("tiny-workload").join("w.jsonl");
            let _ = std::fs::remove_file(&out);
            let o = out.to_str().unwrap();
            let args = tiny_workload_args(o, false);
            run_ok(&args);
            std::fs::read_to_string(out)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        })
        .clone()
}

#[test]
fn issue17_records_that_claim_nonsense_are_refused() {
    let records = tiny_workload_records();
    let step = records
        .iter()
        .position(|r| r["kind"] == "workload-step")
        .unwrap();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "negative-peak",
            Box::new(|r| r["extra"]["peak_bytes"] = (-41).into()),
            "extra.peak_bytes",
        ),
        (
            "schema",
            Box::new(|r| r["schema_version"] = 99.into()),
            "schema_version 99",
        ),
        (
            "threads",
            Box::new(|r| r["threads"] = 0.into()),
            "threads 0",
        ),
        (
            "precision",
            Box::new(|r| r["precision"] = "fp7".into()),
            "precision `fp7`",
        ),
        (
            "flops-zero",
            Box::new(|r| r["flops"] = 0.0.into()),
            "flops 0",
        ),
        (
            "flops-negative",
            Box::new(|r| r["flops"] = (-5.0).into()),
            "flops -5",
        ),
        (
            "sample-zero",
            Box::new(|r| r["samples_s"] = serde_json::json!([0.0])),
            "samples_s",
        ),
    ];
    for (name, edit, expected) in cases {
        let mut rs = records.clone();
        edit(&mut rs[step]);
        let path = jsonl(&format!("{name}.jsonl"), &rs);
        let err = run_err(&["calibrate", &path, "--out", &write("unused.toml", "")]);
        assert!(err.contains(expected), "{name}: {err}");
        assert!(
            err.contains(&format!("{name}.jsonl")),
            "{name}: names the file: {err}"
        );
        // Resuming such a file refuses it too: nothing counts as done.
        let args = tiny_workload_args(&path, true);
        let err = run_err(&args);
        assert!(err.contains(expected), "{name} on resume: {err}");
    }
}

#[test]
fn issue17_renamed_layers_are_refused_by_validate() {
    let dir = scratch("renamed");
    let micro = measured_gemm(&dir, "gemm.jsonl", "32,64,128");
    let m = micro.as_str();
    let profile = dir.join("p.toml");
    let p = profile.to_str().unwrap();
    run_ok(&["calibrate", m, "--threads", "1", "--out", p]);
    let renamed: Vec<serde_json::Value> = tiny_workload_records()
        .into_iter()
        .map(|mut r| {
            if r["kind"] == "workload-layer" {
                let name = format!("renamed_{}", r["shape"]["layer"].as_str().unwrap());
                r["shape"]["layer"] = name.into();
                r["id"] = format!("{}-renamed", r["id"].as_str().unwrap()).into();
            }
            r
        })
        .collect();
    let path = jsonl("renamed.jsonl", &renamed);
    let err = run_err(&["validate", "--profile", p, "--measured", &path]);
    assert!(
        err.contains("renamed_") && err.contains("is not a layer of `cosmoflow`"),
        "{err}"
    );
}

#[test]
fn issue17_gemm_records_with_a_zero_dimension_are_refused() {
    let dir = scratch("gemm-zero");
    let micro = measured_gemm(&dir, "gemm.jsonl", "32,64");
    let m = micro.as_str();
    let text = std::fs::read_to_string(m)
        .unwrap()
        .replacen("\"m\":32", "\"m\":0", 1);
    let path = write("gemm-m0.jsonl", &text);
    let err = run_err(&["calibrate", &path, "--out", &write("unused2.toml", "")]);
    assert!(
        err.contains("shape.m 0") && err.contains("gemm-m0.jsonl"),
        "{err}"
    );
}

#[test]
fn issue17_scale_marks_configurations_that_do_not_fit_as_infeasible() {
    let v = run_json(&[
        "scale",
        "resnet50",
        "--system",
        "v100-sxm2-16gb",
        "--mode",
        "weak",
        "--batch",
        "4096",
        "--nodes",
        "1",
        "--epochs",
        "10",
        "--data-location",
        "pfs",
        "--format",
        "json",
    ]);
    let row = &v["rows"][0];
    assert!(row["outcome"].is_null(), "{row}");
    let reason = row["infeasible"].as_str().unwrap();
    assert!(reason.contains("one device needs"), "{reason}");
}

#[test]
fn issue17_a_profile_of_an_unknown_device_and_an_empty_layer_name_are_refused() {
    let dir = scratch("quantum");
    let micro = measured_gemm(&dir, "gemm.jsonl", "32,64,128");
    let m = micro.as_str();
    let profile = dir.join("p.toml");
    run_ok(&[
        "calibrate",
        m,
        "--threads",
        "1",
        "--out",
        profile.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&profile)
        .unwrap()
        .replace("device = \"cpu\"", "device = \"quantum\"");
    let path = write("quantum.toml", &text);
    let err = run_err(&["system", "show", &path]);
    assert!(
        err.contains("field `device`") && err.contains("quantum"),
        "{err}"
    );

    let workload = "name = \"w\"\ninput = [3, 8, 8]\n[[layer]]\nname = \"\"\nop = \"relu\"\n";
    let path = write("empty-name.toml", workload);
    let err = run_err(&["workload", "show", &path]);
    assert!(
        err.contains("layer name is empty") && err.contains("line 3"),
        "{err}"
    );
}

#[test]
fn issue17_flags_out_of_this_machines_range_are_refused_before_anything_runs() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = (cores + 1000).to_string();
    let err = run_err(&["measure", "gemm", "--size", "64", "--threads", &threads]);
    assert!(err.contains(&format!("--threads {threads}")), "{err}");
    assert!(err.contains(&format!("at most {cores}")), "{err}");

    let out = scratch("sweep-out").join("x.txt");
    let err = run_err(&[
        "sweep",
        "resnet50",
        "--systems",
        "cori-gpu",
        "--nodes",
        "1",
        "--batch",
        "8",
        "--epochs",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(err.contains(".csv or a .json"), "{err}");
    assert!(!out.exists());

    let started = std::time::Instant::now();
    let err = run_err(&["validate", "--self-check", "--budget", "0s"]);
    assert!(err.contains("--budget"), "{err}");
    let err = run_err(&[
        "sweep",
        "resnet50",
        "--systems",
        "cori-gpu",
        "--nodes",
        "1..4294967295",
        "--batch",
        "8",
        "--epochs",
        "3",
    ]);
    assert!(
        err.contains("--nodes") && err.contains("between 1 and"),
        "{err}"
    );
    let mut args = vec![
        "measure",
        "gemm",
        "--size",
        "64",
        "--out",
        "/dev/full",
        "--resume",
    ];
    args.extend(QUICK);
    let err = run_err(&args);
    assert!(
        err.contains("/dev/full") && err.contains("not a regular file"),
        "{err}"
    );
    // None of them measured or evaluated anything first (a generous bound for a busy host).
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
}

#[test]
fn issue17_a_layer_graph_is_bounded_and_parses_in_linear_time() {
    let mut text = String::from("name = \"deep\"\ninput = [4]\n");
    for i in 0..100_001 {
        text.push_str(&format!("[[layer]]\nname = \"r{i}\"\nop = \"relu\"\n"));
    }
    let path = write("deep.toml", &text);
    let err = run_err(&["workload", "show", &path]);
    assert!(err.contains("more than 100000 layers"), "{err}");
}

#[test]
fn issue17_resume_after_a_kill_mid_measurement_duplicates_nothing() {
    let records = tiny_workload_records();
    // Killed mid-write: the layers are on disk, the step (written last) is not.
    let cut: Vec<serde_json::Value> = records
        .iter()
        .filter(|r| r["kind"] != "workload-step")
        .cloned()
        .collect();
    let path = jsonl("killed.jsonl", &cut);
    let args = tiny_workload_args(&path, true);
    let out = crate::ridgeline().args(&args).output().unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("a measurement cut short"), "{stderr}");
    let text = std::fs::read_to_string(&path).unwrap();
    let ids: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
        .collect();
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no record is duplicated");
    assert_eq!(ids.len(), records.len(), "the measurement ran again whole");
    // A file with a duplicate id is refused by every reader.
    let mut twice = records.clone();
    twice.push(records[0].clone());
    let path = jsonl("twice.jsonl", &twice);
    let err = run_err(&["calibrate", &path, "--out", &write("unused3.toml", "")]);
    assert!(err.contains("already on line 1"), "{err}");
}

#[test]
fn issue17_reports_and_outputs_are_replaced_whole() {
    let dir = scratch("atomic");
    let report = dir.join("report");
    let r = report.to_str().unwrap();
    let base = [
        "report", "workload", "resnet50", "--system", "dgx-h100", "--nodes", "2", "--batch", "64",
        "--epochs", "40", "--out", r,
    ];
    let mut png = base.to_vec();
    png.extend(["--images", "png"]);
    run_ok(&png);
    let pngs = |d: &std::path::Path| {
        std::fs::read_dir(d.join("figures"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "png")
            })
            .count()
    };
    assert!(pngs(&report) > 0);
    run_ok(&base);
    assert_eq!(
        pngs(&report),
        0,
        "no figure of the earlier report is mixed in"
    );
    let beside: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(beside, ["report"], "no temporary directory is left");
    // A directory that holds something else is never replaced.
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("thesis.tex"), "mine").unwrap();
    let mut other = base.to_vec();
    *other.last_mut().unwrap() = home.to_str().unwrap();
    let err = run_err(&other);
    assert!(err.contains("neither empty nor an earlier report"), "{err}");
    assert_eq!(
        std::fs::read_to_string(home.join("thesis.tex")).unwrap(),
        "mine"
    );
}

#[test]
fn issue17_messages_name_the_file_and_the_fix() {
    // A bare number where a sourced figure belongs.
    let text = FULL_SYSTEM.replace("devices = { value = 4, source = \"s\" }", "devices = 8");
    let path = write("bare.toml", &text);
    let err = run_err(&["system", "show", &path]);
    assert!(err.contains("{ value = 8, source = "), "{err}");
    assert!(!err.contains("RawSourced"), "{err}");
    // --out naming a directory: one clear error, the OS's words once.
    let dir = scratch("out-dir");
    let err = run_err(&[
        "measure",
        "gemm",
        "--size",
        "64",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(err.contains("not a regular file"), "{err}");
    let missing = dir.join("no/such/dir/r.jsonl");
    let err = run_err(&[
        "measure",
        "gemm",
        "--size",
        "64",
        "--out",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    // A complete last line that is not a record is an error, and --resume keeps it.
    let records = tiny_workload_records();
    let mut text: String = records.iter().map(|r| format!("{r}\n")).collect();
    text.push_str("this is not a record\n");
    let path = write("garbage-last.jsonl", &text);
    let args = tiny_workload_args(&path, true);
    let err = run_err(&args);
    assert!(
        err.contains(&format!("line {}", records.len() + 1)),
        "{err}"
    );
    assert!(
        std::fs::read_to_string(&path)
            .unwrap()
            .ends_with("this is not a record\n")
    );
    // A mix naming an unknown workload names the mix and the built-in workloads.
    let mix = write(
        "mix.toml",
        "name = \"m\"\n[[workload]]\nname = \"bert\"\nweight = 1.0\nprecision = \"fp32\"\nbatches = [8]\n",
    );
    let out = scratch("mix-report");
    let err = run_err(&[
        "report",
        "procurement",
        "--systems",
        "dgx-h100",
        "--mix",
        &mix,
        "--out",
        out.join("r").to_str().unwrap(),
    ]);
    assert!(
        err.contains("mix.toml") && err.contains("cosmoflow, cosmoflow-v07"),
        "{err}"
    );
    // A profile over a bare CPU device: predict names the profile's system and the fix.
    let records = measured_gemm(&dir, "cpu.jsonl", "32,64,128");
    let profile = dir.join("p.toml");
    run_ok(&[
        "calibrate",
        &records,
        "--system",
        "xeon-8480plus",
        "--threads",
        "1",
        "--out",
        profile.to_str().unwrap(),
    ]);
    let err = run_err(&[
        "predict",
        "resnet50",
        "--system",
        profile.to_str().unwrap(),
        "--nodes",
        "1",
        "--batch",
        "8",
        "--epochs",
        "1",
    ]);
    assert!(
        err.contains("overlays `xeon-8480plus`, a bare device"),
        "{err}"
    );
    assert!(err.contains("node.host_memory_gib"), "{err}");
}

#[test]
fn issue17_a_full_standard_output_is_named() {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ridgeline"))
        .args(["workload", "list"])
        .stdout(file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standard output"), "{err}");
}
