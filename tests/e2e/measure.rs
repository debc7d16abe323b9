//! `ridgeline measure`: records on disk, FLOPs and bytes as the model counts them, layer
//! names that join the model's 1:1, resumable campaigns (killed mid-way), and every class of
//! bad input.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{QUICK, fixture, run_err, run_json, run_ok};

/// A fresh path in a per-test temporary directory (nothing there yet).
fn temp_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ridgeline-measure-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

/// The records of a JSON Lines file.
fn records(path: &PathBuf) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn measure(args: &[&str]) -> String {
    let mut all = vec!["measure"];
    all.extend_from_slice(args);
    all.extend_from_slice(&QUICK);
    run_ok(&all)
}

#[test]
fn gemm_records_have_the_schema_and_count_flops() {
    let out = temp_path("gemm.jsonl");
    let o = out.to_str().unwrap();
    let table = measure(&[
        "gemm",
        "--shape",
        "64x48x32",
        "--precision",
        "fp32,fp64",
        "--threads",
        "1,all",
        "--out",
        o,
    ]);
    // One thread and every CPU this process may use (the same on a one-CPU host).
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    let counts = HashSet::from([1, cores]);
    let n = 2 * counts.len();
    assert!(
        table.contains("64x48x32") && table.contains(&format!("{n} new in")),
        "{table}"
    );
    let rs = records(&out);
    assert_eq!(rs.len(), n);
    for r in &rs {
        for field in [
            "schema_version",
            "id",
            "kind",
            "shape",
            "precision",
            "device",
            "threads",
            "samples_s",
            "flops",
            "bytes",
            "env",
        ] {
            assert!(r.get(field).is_some(), "{field} missing in {r}");
        }
        assert_eq!(r["schema_version"], 2);
        assert_eq!(r["kind"], "gemm");
        assert_eq!(r["device"], "cpu");
        assert_eq!(r["shape"], serde_json::json!({ "m": 64, "n": 48, "k": 32 }));
        assert_eq!(r["flops"], 2.0 * 64.0 * 48.0 * 32.0);
        let size = if r["precision"] == "fp64" { 8.0 } else { 4.0 };
        assert_eq!(r["bytes"], size * (64.0 * 32.0 + 32.0 * 48.0 + 64.0 * 48.0));
        let samples = r["samples_s"].as_array().unwrap();
        assert!(samples.len() >= 2 && samples.iter().all(|s| s.as_f64().unwrap() > 0.0));
        for field in [
            "host",
            "cpu_model",
            "cores",
            "simd",
            "ridgeline_version",
            "git_commit",
            "timestamp",
            "blas",
        ] {
            assert!(r["env"].get(field).is_some(), "env.{field} missing");
        }
    }
    let threads: HashSet<u64> = rs.iter().map(|r| r["threads"].as_u64().unwrap()).collect();
    assert_eq!(threads, counts);
}

/// `RIDGELINE_BLAS` chooses the library of the CPU products: `off` is the GEMM crate, and
/// the records say so; a library that cannot be loaded, or is no BLAS, exits 2 naming the
/// variable, the value and the fix.
#[test]
fn the_blas_library_is_chosen_recorded_and_a_bad_one_refused() {
    let args = [
        "measure",
        "gemm",
        "--size",
        "64",
        "--threads",
        "1",
        "--format",
        "json",
    ];
    let mut all = args.to_vec();
    all.extend_from_slice(&QUICK);
    let out = crate::ridgeline()
        .args(&all)
        .env("RIDGELINE_BLAS", "off")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["env"]["blas"], "gemm 0.19 (Rust)");
    for bad in ["/nonexistent/libopenblas.so.0", "libc.so.6"] {
        let out = crate::ridgeline()
            .args(&all)
            .env("RIDGELINE_BLAS", bad)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            out.stdout.is_empty() && !stderr.contains("panicked"),
            "{stderr}"
        );
        for part in ["RIDGELINE_BLAS", bad, "`off`", "`auto`"] {
            assert!(stderr.contains(part), "{part} missing: {stderr}");
        }
    }
}

#[test]
fn json_output_is_the_records() {
    let v = run_json(&[
        "measure",
        "stream",
        "--kernel",
        "triad",
        "--size",
        "16K",
        "--threads",
        "1",
        "--format",
        "json",
        "--warmup",
        "0s",
        "--min-time",
        "0s",
        "--min-samples",
        "2",
    ]);
    let r = &v[0];
    assert_eq!(r["kind"], "stream");
    assert_eq!(r["shape"]["elements"], 2048);
    assert_eq!(r["bytes"], 24.0 * 2048.0);
    assert_eq!(r["flops"], 2.0 * 2048.0);
}

#[test]
fn conv_records_count_what_the_model_counts() {
    let out = temp_path("conv.jsonl");
    measure(&[
        "conv",
        "--workload",
        &fixture("tiny.toml"),
        "--batch",
        "2",
        "--threads",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let rs = records(&out);
    let passes: Vec<&str> = rs
        .iter()
        .map(|r| r["shape"]["pass"].as_str().unwrap())
        .collect();
    assert_eq!(passes, ["forward", "backward-data", "backward-filter"]);
    // The model's forward FLOPs of the layer at batch 2.
    let model = run_json(&[
        "workload",
        "show",
        &fixture("tiny.toml"),
        "--batch",
        "2",
        "--format",
        "json",
    ]);
    let conv = model["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "conv")
        .unwrap();
    assert_eq!(rs[0]["flops"], conv["flops_fwd"]);
    assert_eq!(rs[0]["shape"]["source"], "tiny/conv");
    assert_eq!(rs[2]["flops"], conv["flops_bwd_weight"]);
    // The data gradient of a layer inside a network costs as much as its forward pass.
    assert_eq!(rs[1]["flops"], conv["flops_fwd"]);
}

#[test]
fn mixed_precision_convolutions_need_a_gpu() {
    let err = run_err(&[
        "measure",
        "conv",
        "--workload",
        &fixture("tiny.toml"),
        "--precision",
        "fp32,fp16",
        "--threads",
        "1",
        "--min-time",
        "0s",
    ]);
    assert!(
        err.contains("fp32, not fp16") && err.contains("--device cuda"),
        "{err}"
    );
    let err = run_err(&["measure", "conv", "--precision", "fp8"]);
    assert!(err.contains("fp16"), "{err}");
    // Channels-last is a GPU layout.
    let err = run_err(&[
        "measure",
        "conv",
        "--workload",
        &fixture("tiny.toml"),
        "--layout",
        "ndhwc",
        "--threads",
        "1",
        "--min-time",
        "0s",
    ]);
    assert!(
        err.contains("channels-first") && err.contains("--device cuda"),
        "{err}"
    );
    let err = run_err(&["measure", "conv", "--layout", "nwhc"]);
    assert!(err.contains("channels-last"), "{err}");
}

#[test]
fn ops_measure_the_kinds_asked_for() {
    let v = run_json(&[
        "measure",
        "ops",
        "--workload",
        "resnet50",
        "--input-size",
        "32",
        "--width",
        "0.25",
        "--batch",
        "2",
        "--op",
        "relu,batch-norm,max-pool",
        "--threads",
        "1",
        "--format",
        "json",
        "--warmup",
        "0s",
        "--min-time",
        "0s",
        "--min-samples",
        "2",
    ]);
    let kinds: HashSet<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["shape"]["op"]["op"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, HashSet::from(["relu", "batch-norm", "max-pool"]));
    // Up to three shapes of each kind (ResNet-50 has one max-pool), forward and backward.
    assert_eq!(v.as_array().unwrap().len(), 2 * (3 + 3 + 1));
    for kind in ["relu", "batch-norm"] {
        let shapes: HashSet<String> = v
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["shape"]["op"]["op"] == kind)
            .map(|r| r["shape"]["input"].to_string())
            .collect();
        assert_eq!(shapes.len(), 3, "{kind}: distinct shapes");
    }
}

/// A scaled-down workload runs every layer forward and backward; layer names join the
/// model's 1:1 and FLOPs add up to the model's step.
fn check_workload(args: &[&str]) {
    let mut show = vec!["workload", "show"];
    show.extend_from_slice(args);
    show.extend_from_slice(&["--format", "json"]);
    let model = run_json(&show);
    let mut cmd = vec!["measure", "workload"];
    cmd.extend_from_slice(args);
    cmd.extend_from_slice(&["--steps", "2", "--format", "json"]);
    let v = run_json(&cmd);
    let rs = v.as_array().unwrap();
    let step = rs.last().unwrap();
    assert_eq!(step["kind"], "workload-step");
    assert_eq!(step["precision"], "fp32");
    assert!(step["extra"].get("loss_scale").is_none());
    assert_eq!(step["samples_s"].as_array().unwrap().len(), 2);
    assert!(step["extra"]["peak_bytes"].as_f64().unwrap() > 0.0);
    assert!(
        step["extra"]["peak_rss_bytes"].as_f64().unwrap()
            >= step["extra"]["peak_bytes"].as_f64().unwrap() / 2.0
    );
    assert_eq!(step["flops"], model["flops_train"]);
    let layers = model["layers"].as_array().unwrap();
    let forward: Vec<&str> = rs
        .iter()
        .filter(|r| r["shape"]["pass"] == "forward")
        .map(|r| r["shape"]["layer"].as_str().unwrap())
        .collect();
    let names: Vec<&str> = layers[1..]
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        forward, names,
        "one forward record per layer, in the model's order"
    );
    let flops: f64 = rs
        .iter()
        .filter(|r| r["kind"] == "workload-layer")
        .map(|r| r["flops"].as_f64().unwrap())
        .sum();
    let train = model["flops_train"].as_f64().unwrap();
    assert!((flops - train).abs() <= 1e-9 * train, "{flops} vs {train}");
    for r in rs.iter().filter(|r| r["kind"] == "workload-layer") {
        let model_layer = layers
            .iter()
            .find(|l| l["name"] == r["shape"]["layer"])
            .unwrap();
        let key = if r["shape"]["pass"] == "forward" {
            "flops_fwd"
        } else {
            "flops_bwd"
        };
        assert_eq!(r["flops"], model_layer[key], "{}", r["shape"]);
    }
}

#[test]
fn mixed_precision_workloads_need_a_gpu() {
    for precision in ["amp-fp16", "amp-bf16", "tf32"] {
        let err = run_err(&[
            "measure",
            "workload",
            "cosmoflow",
            "--input-size",
            "32",
            "--width",
            "0.25",
            "--precision",
            precision,
        ]);
        assert!(
            err.contains(precision) && err.contains("fp32 only") && err.contains("--device cuda"),
            "{err}"
        );
    }
    let err = run_err(&["measure", "workload", "cosmoflow", "--precision", "fp8"]);
    assert!(err.contains("amp-fp16"), "{err}");
    // The ops on 16-bit activations too.
    let err = run_err(&[
        "measure",
        "ops",
        "--workload",
        &fixture("tiny.toml"),
        "--precision",
        "fp16",
        "--threads",
        "1",
    ]);
    assert!(
        err.contains("fp32, not fp16") && err.contains("--device cuda"),
        "{err}"
    );
}

#[test]
fn scaled_down_cosmoflow_runs_layer_by_layer() {
    check_workload(&[
        "cosmoflow",
        "--input-size",
        "32",
        "--width",
        "0.25",
        "--batch",
        "1",
    ]);
}

#[test]
fn scaled_down_deepcam_runs_layer_by_layer() {
    check_workload(&[
        "deepcam",
        "--input-size",
        "32x48",
        "--width",
        "0.125",
        "--batch",
        "1",
    ]);
}

#[test]
fn scaled_down_resnet50_runs_layer_by_layer() {
    check_workload(&[
        "resnet50",
        "--input-size",
        "32",
        "--width",
        "0.25",
        "--batch",
        "2",
    ]);
}

#[test]
fn a_workload_file_runs_too() {
    check_workload(&[&fixture("tiny.toml"), "--batch", "3"]);
}

#[test]
fn resume_skips_what_is_recorded_and_drops_a_torn_line() {
    let out = temp_path("resume.jsonl");
    let o = out.to_str().unwrap();
    measure(&["gemm", "--size", "16,32", "--threads", "1", "--out", o]);
    let first = std::fs::read_to_string(&out).unwrap();
    // An interrupted write leaves half a record.
    std::fs::write(&out, format!("{first}{{\"schema_version\":1,\"id\":\"gem")).unwrap();
    let mut args = vec![
        "measure",
        "gemm",
        "--size",
        "16,32,48",
        "--threads",
        "1",
        "--out",
        o,
        "--resume",
    ];
    args.extend_from_slice(&QUICK);
    let result = crate::ridgeline().args(&args).output().unwrap();
    assert!(result.status.success());
    let stderr = String::from_utf8(result.stderr).unwrap();
    assert!(
        stderr.contains("resuming")
            && stderr.contains("2 records kept")
            && stderr.contains("line 3"),
        "{stderr}"
    );
    let rs = records(&out);
    let sizes: Vec<u64> = rs
        .iter()
        .map(|r| r["shape"]["m"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [16, 32, 48], "kept records first, the new one once");
    assert!(std::fs::read_to_string(&out).unwrap().starts_with(&first));
}

/// Kill a suite mid-way, resume it: every record written before the kill is kept as it
/// was, none is measured twice, and the resumed run carries on.
#[test]
fn a_killed_suite_resumes_without_losing_or_repeating_records() {
    let out = temp_path("suite.jsonl");
    let o = out.to_str().unwrap();
    let args = [
        "measure",
        "suite",
        "--budget",
        "60s",
        "--threads",
        "1",
        "--out",
        o,
        "--warmup",
        "0s",
        "--min-time",
        "0s",
        "--min-samples",
        "2",
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ridgeline"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for a few records, then kill without warning.
    let start = Instant::now();
    loop {
        let lines = std::fs::read_to_string(&out)
            .map(|s| s.lines().count())
            .unwrap_or(0);
        if lines >= 3 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the suite wrote nothing"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the suite ended before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before = std::fs::read_to_string(&out).unwrap();
    let complete: Vec<&str> = before
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l).is_ok())
        .collect();
    assert!(complete.len() >= 3);

    let result = crate::ridgeline()
        .args([
            "measure",
            "suite",
            "--budget",
            "3s",
            "--threads",
            "1",
            "--out",
            o,
            "--resume",
            "--warmup",
            "0s",
            "--min-time",
            "0s",
            "--min-samples",
            "2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8(result.stderr).unwrap();
    assert!(result.status.success(), "{stderr}");
    assert!(
        stderr.contains("already recorded") && stderr.contains("resuming"),
        "{stderr}"
    );
    let after = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = after.lines().collect();
    assert_eq!(
        &lines[..complete.len()],
        &complete[..],
        "completed records kept as they were"
    );
    assert!(
        lines.len() > complete.len(),
        "the resumed run measured more"
    );
    let ids: Vec<String> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "no record twice");
}

#[test]
fn the_suite_says_what_it_covers_before_it_starts() {
    let out = temp_path("plan.jsonl");
    let result = crate::ridgeline()
        .args([
            "measure",
            "suite",
            "--budget",
            "1s",
            "--threads",
            "1",
            "--out",
            out.to_str().unwrap(),
            "--warmup",
            "0s",
            "--min-time",
            "0s",
            "--min-samples",
            "1",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8(result.stderr).unwrap();
    assert!(result.status.success(), "{stderr}");
    assert!(
        stderr.contains("measure suite:") && stderr.contains("GEMM fp32"),
        "{stderr}"
    );
    assert!(stderr.contains("left out for lack of time"), "{stderr}");
}

#[test]
fn cuda_without_a_gpu_is_a_clear_error() {
    if std::path::Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("skipping: this machine has an NVIDIA driver (scripts/gpu-check.sh covers it)");
        return;
    }
    let err = run_err(&["measure", "gemm", "--device", "cuda"]);
    assert!(
        err.contains("cuda:0") && err.contains("--device cpu"),
        "{err}"
    );
    if cfg!(feature = "cuda") {
        // The backend is built in; the driver library is what is missing here.
        assert!(
            err.contains("libcuda.so") && err.contains("no NVIDIA driver"),
            "{err}"
        );
    } else {
        assert!(err.contains("without the CUDA backend"), "{err}");
    }
    let err = run_err(&["measure", "workload", "resnet50", "--device", "cuda:1"]);
    assert!(err.contains("cuda:1"), "{err}");
    // Mixed precision, which only a GPU runs, fails on the missing GPU, not the precision.
    let err = run_err(&[
        "measure",
        "workload",
        "resnet50",
        "--device",
        "cuda",
        "--precision",
        "amp-fp16",
    ]);
    assert!(
        err.contains("cuda:0") && !err.contains("fp32 only"),
        "{err}"
    );
    let err = run_err(&["measure", "ops", "--device", "cuda", "--precision", "bf16"]);
    assert!(err.contains("cuda:0"), "{err}");
    let err = run_err(&["measure", "stream", "--device", "tpu"]);
    assert!(err.contains("valid: cpu, cuda"), "{err}");
    // Host-device copies need a device with memory of its own.
    let err = run_err(&["measure", "copy", "--size", "4K"]);
    assert!(
        err.contains("copy h2d pinned") && err.contains("--device cuda"),
        "{err}"
    );
    let err = run_err(&["measure", "copy", "--device", "cuda", "--direction", "d2h"]);
    assert!(err.contains("cuda:0"), "{err}");
    let err = run_err(&["measure", "suite", "--device", "cuda", "--out", "/dev/null"]);
    assert!(err.contains("cuda:0"), "{err}");
    let err = run_err(&["measure", "gemm", "--device", "cuda", "--threads", "2"]);
    assert!(err.contains("--threads applies to --device cpu"), "{err}");
    // NCCL: its own checks first, then the missing driver (or build).
    let err = run_err(&["measure", "nccl", "--sizes", "6"]);
    assert!(err.contains("multiple of 4"), "{err}");
    let err = run_err(&["measure", "nccl", "--gpus", "1"]);
    assert!(err.contains("--gpus"), "{err}");
    let err = run_err(&["measure", "nccl", "--gpus", "4", "--sizes", "1K"]);
    if cfg!(feature = "cuda") {
        assert!(err.contains("libcuda.so"), "{err}");
    } else {
        assert!(err.contains("--features cuda"), "{err}");
    }
}

#[test]
fn measure_bad_input_is_refused_with_a_fix() {
    let out = temp_path("exists.jsonl");
    std::fs::write(&out, "").unwrap();
    let err = run_err(&[
        "measure",
        "gemm",
        "--size",
        "16",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        err.contains("exists.jsonl") && err.contains("--resume"),
        "{err}"
    );
    let err = run_err(&["measure", "gemm", "--resume"]);
    assert!(err.contains("--out"), "{err}");
    let err = run_err(&["measure", "gemm", "--threads", "0"]);
    assert!(err.contains("thread count"), "{err}");
    let err = run_err(&["measure", "gemm", "--shape", "64x64"]);
    assert!(err.contains("MxNxK"), "{err}");
    let err = run_err(&["measure", "gemm", "--precision", "bf16", "--size", "16"]);
    assert!(err.contains("CUDA backend"), "{err}");
    let err = run_err(&["measure", "gemm", "--shape", "1048576x1048576x1048576"]);
    assert!(err.contains("GiB is available"), "{err}");
    let err = run_err(&["measure", "stream", "--size", "3T"]);
    assert!(err.contains("unknown unit"), "{err}");
    let err = run_err(&["measure", "ops", "--op", "swish"]);
    assert!(err.contains("--op `swish`"), "{err}");
    let err = run_err(&[
        "measure",
        "conv",
        "--workload",
        "resnet50",
        "--layer",
        "conv9",
    ]);
    assert!(err.contains("--layer `conv9`"), "{err}");
    let err = run_err(&["measure", "suite", "--budget", "10s"]);
    assert!(err.contains("--out"), "{err}");
    let err = run_err(&["measure", "suite", "--budget", "soon", "--out", "x.jsonl"]);
    assert!(err.contains("not a duration"), "{err}");
    let err = run_err(&["measure", "workload", "bert"]);
    assert!(err.contains("unknown workload `bert`"), "{err}");
}

#[test]
fn a_corrupt_records_file_is_refused_on_resume() {
    let out = temp_path("corrupt.jsonl");
    let o = out.to_str().unwrap();
    measure(&["gemm", "--size", "16,32", "--threads", "1", "--out", o]);
    let text = std::fs::read_to_string(&out).unwrap();
    std::fs::write(&out, format!("garbage\n{text}")).unwrap();
    let err = run_err(&[
        "measure",
        "gemm",
        "--size",
        "16",
        "--threads",
        "1",
        "--out",
        o,
        "--resume",
    ]);
    assert!(
        err.contains("corrupt.jsonl")
            && err.contains("line 1")
            && err.contains("not a ridgeline record"),
        "{err}"
    );
}
