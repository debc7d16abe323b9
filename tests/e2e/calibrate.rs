//! `ridgeline calibrate` and `ridgeline validate`: the loop from micro-kernel records to a
//! profile, predictions with it, and their comparison with a measured workload.

use std::path::PathBuf;

use crate::{QUICK, run_err, run_json, run_ok};

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ridgeline-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn measure(args: &[&str], out: &str) {
    let mut all = vec!["measure"];
    all.extend_from_slice(args);
    all.extend_from_slice(&QUICK);
    all.extend_from_slice(&["--threads", "all", "--out", out]);
    if std::path::Path::new(out).exists() {
        all.push("--resume");
    }
    run_ok(&all);
}

/// Micro-kernels -> profile -> roofline, predict and validate with it, on a small CosmoFlow.
#[test]
fn the_loop_runs_from_micro_kernels_to_validation() {
    let dir = temp_dir();
    let micro = dir.join("micro.jsonl");
    let micro = micro.to_str().unwrap();
    let _ = std::fs::remove_file(micro);
    measure(&["gemm", "--size", "64,96,128,192,256,384,512"], micro);
    // DRAM is fitted from arrays past twice this host's last-level cache: size them by it.
    let llc = run_json(&["system", "show", "local", "--format", "json"])["device"]["llc"]["value"]
        .as_f64()
        .expect("the host's last-level cache");
    // A copy moves 16 bytes an element: the smallest array is 4 last-level caches at least.
    let base = (96u64 << 20).max((llc / 4.0) as u64);
    let sizes = format!("{base},{},{},4K,8K,12K", base * 4 / 3, base * 5 / 3);
    measure(
        &["stream", "--kernel", "triad,copy", "--size", &sizes],
        micro,
    );
    measure(
        &[
            "conv",
            "--workload",
            "cosmoflow",
            "--input-size",
            "32",
            "--width",
            "0.25",
        ],
        micro,
    );
    let profile = dir.join("profile.toml");
    let profile = profile.to_str().unwrap();
    let p = run_json(&["calibrate", micro, "--out", profile, "--format", "json"]);
    assert_eq!(p["schema_version"], 1);
    // Every CPU this process may use, whatever the host.
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(p["threads"], cores);
    assert_eq!(p["system"], "local");
    let kernels = p["kernels"].as_array().unwrap();
    let gemm = kernels
        .iter()
        .find(|k| k["class"] == "gemm" && k["pass"] == "forward")
        .expect("a GEMM fit");
    // Seven GEMM sizes, each fitted once per pass of dense layers.
    assert_eq!(gemm["points"], 7);
    let ceiling = p["ceilings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "gemm" && c["precision"] == "fp32")
        .expect("a GEMM ceiling");
    let rate = ceiling["tflops"].as_f64().unwrap() * 1e12;
    assert!(rate > 1e8 && rate < 1e13, "GEMM ceiling {rate} FLOP/s");
    assert!(kernels.iter().any(|k| k["class"] == "conv-spatial"));
    assert!(kernels.iter().all(|k| {
        k["coefficients"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c.as_f64().unwrap() >= 0.0)
    }));
    let dram = p["bandwidth"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["level"] == "dram")
        .unwrap_or_else(|| panic!("no DRAM bandwidth (last-level cache {llc} B): {p:#}"));
    assert!(dram["bandwidth_gbs"].as_f64().unwrap() > 0.5);
    assert_eq!(p["provenance"]["files"][0]["path"], micro);

    // The profile stands in for a system.
    let r = run_json(&[
        "roofline",
        "cosmoflow",
        "--input-size",
        "32",
        "--batch",
        "1",
        "--system",
        profile,
        "--format",
        "json",
    ]);
    assert!(
        r["calibrated_layers"].as_u64().unwrap() >= 5,
        "{}",
        r["calibrated_layers"]
    );
    assert!(r["system"].as_str().unwrap().contains("calibrated"));
    let pred = run_json(&[
        "predict",
        "cosmoflow",
        "--input-size",
        "32",
        "--batch",
        "1",
        "--nodes",
        "1",
        "--epochs",
        "1",
        "--train-samples",
        "1000",
        "--system",
        profile,
        "--format",
        "json",
    ]);
    assert!(pred["step_time_s"].as_f64().unwrap() > 0.0);

    // A measured step, compared.
    let measured = dir.join("workload.jsonl");
    let measured = measured.to_str().unwrap();
    let _ = std::fs::remove_file(measured);
    run_ok(&[
        "measure",
        "workload",
        "cosmoflow",
        "--input-size",
        "32",
        "--batch",
        "1",
        "--steps",
        "2",
        "--threads",
        "all",
        "--out",
        measured,
    ]);
    let v = run_json(&[
        "validate",
        "--profile",
        profile,
        "--measured",
        measured,
        "--format",
        "json",
    ]);
    let step = &v["steps"][0];
    for field in [
        "predicted_s",
        "measured_s",
        "rel_error",
        "predicted_memory_bytes",
        "measured_memory_bytes",
    ] {
        assert!(step[field].as_f64().unwrap().is_finite(), "{field}: {step}");
    }
    assert_eq!(step["workload"], "cosmoflow");
    assert_eq!(step["batch"], 1);
    let rel = step["rel_error"].as_f64().unwrap();
    let (p_s, m_s) = (
        step["predicted_s"].as_f64().unwrap(),
        step["measured_s"].as_f64().unwrap(),
    );
    assert!((rel - (p_s - m_s) / m_s).abs() < 1e-9);
    for field in [
        "median_abs_rel_error",
        "max_abs_rel_error",
        "memory_median_abs_rel_error",
    ] {
        assert!(v["summary"][field].as_f64().unwrap() >= 0.0, "{field}");
    }
    assert!(!v["worst_layers"].as_array().unwrap().is_empty());
    assert_eq!(step["precision"], "fp32");

    another_precision(&dir, profile, measured, step);
    validation_report(&dir, profile, measured, &v);
    refuses_bad_inputs(&dir, profile, micro, measured);
}

/// [`the_loop_runs_from_micro_kernels_to_validation`]'s step record relabelled to
/// another precision: predicted in it (mixed precision runs on a GPU only), in 16-bit
/// activations with less memory and no FP32 fit applied; FP8 is refused.
fn another_precision(
    dir: &std::path::Path,
    profile: &str,
    measured: &str,
    step: &serde_json::Value,
) {
    // A record of another precision is predicted in it (the records relabelled: mixed
    // precision runs on a GPU only): 16-bit activations, less memory.
    let text = std::fs::read_to_string(measured).unwrap();
    assert!(text.contains("\"precision\":\"fp32\""));
    let relabelled = |precision: &str| {
        let path = dir.join(format!("workload-{precision}.jsonl"));
        std::fs::write(
            &path,
            text.replace(
                "\"precision\":\"fp32\"",
                &format!("\"precision\":\"{precision}\""),
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_owned()
    };
    let amp = relabelled("amp-fp16");
    let va = run_json(&[
        "validate",
        "--profile",
        profile,
        "--measured",
        &amp,
        "--format",
        "json",
    ]);
    let amp_step = &va["steps"][0];
    assert_eq!(amp_step["precision"], "amp-fp16");
    assert_eq!(amp_step["measured_s"], step["measured_s"]);
    let memory = |s: &serde_json::Value| s["predicted_memory_bytes"].as_f64().unwrap();
    assert!(memory(amp_step) < memory(step), "{amp_step} vs {step}");
    // The profile holds FP32 fits only: none applies to a 16-bit step.
    assert!(step["calibrated_layers"].as_u64().unwrap() > 0);
    assert_eq!(amp_step["calibrated_layers"], 0, "{amp_step}");
    let table = run_ok(&["validate", "--profile", profile, "--measured", &amp]);
    assert!(table.contains("cosmoflow amp-fp16"), "{table}");
    let bad = relabelled("fp8");
    let err = run_err(&["validate", "--profile", profile, "--measured", &bad]);
    assert!(err.contains("precision") && err.contains("fp8"), "{err}");
}

/// The same validation as a report: tables, the prediction-vs-measurement and error plots,
/// the measured hardware efficiency of every layer pass, and a calibrated roofline plot.
fn validation_report(dir: &std::path::Path, profile: &str, measured: &str, v: &serde_json::Value) {
    // The same validation as a report: tables, the prediction-vs-measurement and error
    // plots, and the measured hardware efficiency of every layer pass.
    let out = dir.join("validation-report");
    let rv = run_json(&[
        "report",
        "validation",
        "--profile",
        profile,
        "--measured",
        measured,
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(rv["steps"], v["steps"]);
    let files: Vec<&str> = rv["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for f in [
        "report.html",
        "figures/predicted-vs-measured.svg",
        "figures/error-distribution.svg",
        "figures/efficiency-cosmoflow.svg",
        "tables/steps.csv",
    ] {
        assert!(files.iter().any(|x| x.ends_with(f)), "{f} not in {files:?}");
    }
    let svg = std::fs::read_to_string(out.join("figures/predicted-vs-measured.svg")).unwrap();
    assert!(svg.contains("Predicted vs measured layer time on") && svg.contains("y = x"));
    let svg = std::fs::read_to_string(out.join("figures/efficiency-cosmoflow.svg")).unwrap();
    assert!(svg.contains("Hardware efficiency: cosmoflow, batch 1"));
    assert!(svg.contains("measured run time") && svg.contains("at full efficiency"));
    for l in rv["layers"].as_array().unwrap() {
        let (flops, eff) = (
            l["flops"].as_f64().unwrap(),
            l["efficiency"].as_f64().unwrap(),
        );
        if flops > 0.0 {
            // Measured FLOP/s cannot exceed the datasheet peak of this CPU.
            assert!(eff > 0.0 && eff < 1.0, "{l}");
        }
    }
    // A calibrated roofline plot shows the measured GEMM ceiling under the datasheet peak.
    run_ok(&[
        "roofline",
        "cosmoflow",
        "--input-size",
        "32",
        "--batch",
        "1",
        "--system",
        profile,
        "--plot",
        out.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(out.join("roofline.svg")).unwrap();
    assert!(
        svg.contains("measured gemm"),
        "no measured ceiling in the roofline plot"
    );
}

/// Bad input to calibration and validation, each refused naming what is wrong.
fn refuses_bad_inputs(dir: &std::path::Path, profile: &str, micro: &str, measured: &str) {
    // Bad input: workload records are not micro-kernel records.
    let err = run_err(&["calibrate", measured, "--out", profile]);
    assert!(
        err.contains("no micro-kernel records") && err.contains("measure suite"),
        "{err}"
    );
    // Micro-kernel records are not workload steps.
    let err = run_err(&["validate", "--profile", profile, "--measured", micro]);
    assert!(err.contains("no workload-step records"), "{err}");
    // A profile is needed for --profile.
    let err = run_err(&["validate", "--profile", micro, "--measured", measured]);
    assert!(err.contains(micro), "{err}");
    // A negative coefficient is refused with the field named.
    let text = std::fs::read_to_string(profile).unwrap();
    let bad = dir.join("bad.toml");
    let start = text.find("coefficients = [").unwrap();
    let end = start + text[start..].find(']').unwrap() + 1;
    let negative = "coefficients = [1e-6, -1e-11, 0.0, 0.0, 0.0]";
    std::fs::write(
        &bad,
        format!("{}{negative}{}", &text[..start], &text[end..]),
    )
    .unwrap();
    let err = run_err(&[
        "validate",
        "--profile",
        bad.to_str().unwrap(),
        "--measured",
        measured,
    ]);
    assert!(err.contains("kernels[0].coefficients"), "{err}");
    // A workload measured at another width cannot be rebuilt from its record.
    let narrow = dir.join("narrow.jsonl");
    let _ = std::fs::remove_file(&narrow);
    run_ok(&[
        "measure",
        "workload",
        "cosmoflow",
        "--input-size",
        "32",
        "--width",
        "0.25",
        "--steps",
        "1",
        "--threads",
        "all",
        "--out",
        narrow.to_str().unwrap(),
    ]);
    let err = run_err(&[
        "validate",
        "--profile",
        profile,
        "--measured",
        narrow.to_str().unwrap(),
    ]);
    assert!(err.contains("FLOPs"), "{err}");
}

#[test]
fn validate_needs_its_inputs() {
    let err = run_err(&["validate"]);
    assert!(
        err.contains("--profile") || err.contains("--self-check"),
        "{err}"
    );
    let err = run_err(&[
        "calibrate",
        "/nonexistent/runs.jsonl",
        "--out",
        "/tmp/x.toml",
    ]);
    assert!(err.contains("/nonexistent/runs.jsonl"), "{err}");
    let err = run_err(&[
        "calibrate",
        "/nonexistent/runs.jsonl",
        "--out",
        "/tmp/x.toml",
        "--system",
        "nosuch",
    ]);
    assert!(err.contains("nosuch"), "{err}");
}

#[test]
fn validate_published_sets_the_models_counts_beside_the_papers() {
    let out = run_ok(&["validate", "published", "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let layers = v["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 4);
    for l in layers {
        assert_eq!(l["mismatches"].as_array().unwrap().len(), 0, "{l}");
        assert_eq!(l["params"], l["reference_params"], "{l}");
        assert_eq!(l["macs_fwd"], l["reference_macs_fwd"], "{l}");
    }
    let figures = v["table2"].as_array().unwrap();
    assert_eq!(figures.len(), 28);
    let find = |w: &str, q: &str| {
        figures
            .iter()
            .find(|f| f["workload"] == w && f["quantity"] == q)
            .unwrap()
    };
    // [004] Table II: 2887 GiF per DeepCAM sample; 0.084 GiB the ResNet-50 HBM limit.
    let f = find("deepcam", "flops_per_sample");
    assert_eq!(f["published"].as_f64().unwrap(), 2887.0 * 1073741824.0);
    // The model counts the layers' own FLOPs: below the profiler's figure, not far off.
    let ratio = f["ratio"].as_f64().unwrap();
    assert!((0.4..1.0).contains(&ratio), "{f}");
    let f = find("resnet50", "hbm_limit_per_sample");
    let ratio = f["ratio"].as_f64().unwrap();
    assert!((0.8..1.2).contains(&ratio), "{f}");
    let table = run_ok(&["validate", "published"]);
    assert!(table.contains("319 of 319 layers"), "{table}");
    assert!(table.contains("[004] Table II"), "{table}");
}

#[test]
fn import_neusight_writes_a_kernel_set_and_refuses_what_it_cannot_source() {
    let out = std::env::temp_dir().join(format!("ridgeline-import-{}", std::process::id()));
    let o = out.to_str().unwrap();
    let dir = crate::fixture("neusight");
    let text = run_ok(&[
        "import", "neusight", &dir, "--commit", "db1fdc9", "--out", o,
    ]);
    assert!(
        text.contains("gemm on t4") && text.contains("3 kernels"),
        "{text}"
    );
    // Of the fixture's three convolutions cuDNN ran one as an implicit GEMM.
    assert!(
        text.lines()
            .any(|l| l.contains("conv implicit-gemm on t4") && l.ends_with(" 1 kernels")),
        "{text}"
    );
    for file in ["gemm.csv.gz", "conv.csv.gz", "vector.csv.gz", "SOURCE.toml"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let source = std::fs::read_to_string(out.join("SOURCE.toml")).unwrap();
    assert!(source.contains("commit = \"db1fdc9\"") && source.contains("MIT"));
    // The whole-step labels (one GPU, and tensor-parallel over four) and their model.
    let labels = out.join("labels");
    assert!(labels.join("steps.csv.gz").is_file());
    let config = std::fs::read_to_string(labels.join("models/gpt2_large.json")).unwrap();
    assert!(config.contains("\"n_embd\": 1280"), "{config}");
    assert!(
        text.contains("2 training steps"),
        "the import names the steps it converted: {text}"
    );
    // The test set's kernels of GPUs outside the fit, apart from the fitted set.
    let test = out.join("test");
    assert!(test.join("gemm.csv.gz").is_file() && test.join("SOURCE.toml").is_file());
    assert!(
        text.contains("test gemm on h100-sxm5-80gb") && text.contains("test vector on l4"),
        "{text}"
    );
    // The fixture sits inside ridgeline's repository: its commit is not NeuSight's.
    let err = run_err(&["import", "neusight", &dir, "--out", o]);
    assert!(err.contains("--commit"), "{err}");
    let err = run_err(&["import", "neusight", &dir, "--commit", "main", "--out", o]);
    assert!(err.contains("hexadecimal"), "{err}");
    let err = run_err(&["import", "neusight", "/nonexistent", "--commit", "db1fdc9"]);
    assert!(err.contains("NeuSight checkout"), "{err}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn validate_transfer_names_what_it_cannot_do() {
    // One GPU's kernels (the converter's fixture): nothing to leave out.
    let out = std::env::temp_dir().join(format!("ridgeline-one-gpu-{}", std::process::id()));
    let o = out.to_str().unwrap();
    let dir = crate::fixture("neusight");
    run_ok(&[
        "import", "neusight", &dir, "--commit", "db1fdc9", "--out", o,
    ]);
    let err = run_err(&["validate", "transfer", "--kernels", o]);
    assert!(err.contains("at least 3 devices"), "{err}");
    // A published tensor-core set whose device is not in the catalog, or whose rows are
    // bad, is refused before any fit, naming the file.
    let public = out.join("deepbench");
    std::fs::create_dir_all(&public).unwrap();
    let shipped =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/evidence/kernels/deepbench");
    for f in ["gemm.csv.gz", "conv.csv.gz"] {
        std::fs::copy(shipped.join(f), public.join(f)).unwrap();
    }
    let source = std::fs::read_to_string(shipped.join("SOURCE.toml")).unwrap();
    let p = public.to_str().unwrap();
    let transfer = |source: String| {
        std::fs::write(public.join("SOURCE.toml"), source).unwrap();
        run_err(&["validate", "transfer", "--kernels", o, "--published", p])
    };
    let err = transfer(source.replace("[devices]\n", "[devices]\n\"NVIDIA X9\" = \"x9\"\n"));
    assert!(
        err.contains("SOURCE.toml") && err.contains("device `x9`"),
        "{err}"
    );
    let err = transfer(source.replace("= \"t4\"", "= \"t5\""));
    assert!(err.contains("row 295: device `t4`"), "{err}");
    std::fs::write(public.join("gemm.csv.gz"), "device,precision\n").unwrap();
    let err = transfer(source);
    assert!(err.contains("gemm.csv.gz") && err.contains("gzip"), "{err}");
    let err = run_err(&["validate", "transfer", "--kernels", "/nonexistent"]);
    assert!(
        err.contains("SOURCE.toml") && err.contains("ridgeline import"),
        "{err}"
    );
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn validate_times_a_gpu_nobody_calibrated_against_its_measured_steps() {
    // The H200 steps ridgeline's CUDA executor measured (data/evidence/measured/h200), against the
    // transferred kernel model with no calibration.
    let steps = format!(
        "{}/data/evidence/measured/h200/steps.jsonl.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let v = run_json(&[
        "validate",
        "--system",
        "h200-sxm-141gb",
        "--measured",
        &steps,
        "--format",
        "json",
    ]);
    let rows = v["steps"].as_array().unwrap();
    assert_eq!(rows.len(), 10, "{v}");
    assert!(
        rows.iter()
            .any(|s| s["workload"] == "resnet50" && s["precision"] == "amp-fp16")
    );
    assert!(
        rows.iter()
            .all(|s| s["predicted_s"].as_f64().unwrap() > 0.0)
    );
    // Every step predicted with its 90 % interval, and the share inside it reported.
    assert!(rows.iter().all(|s| {
        let (lo, p, hi) = (
            s["predicted_lo_s"].as_f64().unwrap(),
            s["predicted_s"].as_f64().unwrap(),
            s["predicted_hi_s"].as_f64().unwrap(),
        );
        lo < p && p < hi
    }));
    assert_eq!(v["summary"]["interval_steps"], 10);
    let c = v["summary"]["interval_coverage"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&c), "{c}");
    let table = run_ok(&[
        "validate",
        "--system",
        "h200-sxm-141gb",
        "--measured",
        &steps,
    ]);
    assert!(
        table.contains("no calibration") && table.contains("inside their predicted interval"),
        "{table}"
    );
    // A profile and a system are two answers to one question.
    let err = run_err(&[
        "validate",
        "--system",
        "h200-sxm-141gb",
        "--profile",
        "p.toml",
        "--measured",
        &steps,
    ]);
    assert!(
        err.contains("--system") || err.contains("--profile"),
        "{err}"
    );
}
