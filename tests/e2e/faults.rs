//! Issue 17: the faults found while modelling real clusters (part 4) and by a fuzzing pass
//! (part 5). Each gets a clear error (exit 2, naming the key, the flag or the file) or a
//! fix that the test checks.

use std::path::PathBuf;

use crate::{run_err, run_json, run_ok};

/// A scratch directory of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("ridgeline-faults-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `text` to `name` in a scratch directory and returns the path.
fn write(name: &str, text: &str) -> String {
    let path = scratch("files").join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A catalog file's text, by repository path.
fn data(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

const QUICK: [&str; 8] = [
    "--warmup",
    "0s",
    "--min-time",
    "0s",
    "--min-samples",
    "3",
    "--threads",
    "1",
];

#[test]
fn issue17_a_cpu_profile_is_refused_for_a_gpu_system() {
    let dir = scratch("cpu-profile");
    let records = dir.join("cpu-suite.jsonl");
    let r = records.to_str().unwrap();
    let _ = std::fs::remove_file(r);
    let mut args = vec!["measure", "gemm", "--size", "32,48,64,96,128", "--out", r];
    args.extend(QUICK);
    run_ok(&args);
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
    let text = data("data/systems/dgx-a100.toml").replace(
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
    let device = data("data/systems/devices/v100-sxm2-16gb.toml");
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
