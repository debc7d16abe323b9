//! `ridgeline import mlperf` on real MLPerf Training result logs (fixtures with their
//! provenance in `tests/fixtures/mlperf/SOURCE.md`), and `validate` against the runs.

use std::path::PathBuf;

use crate::{fixture, import_h100_trace, run_err, run_json, run_ok};

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ridgeline-import-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn eos_log(n: u32) -> String {
    fixture(&format!(
        "mlperf/NVIDIA/results/eos_ngc23.09_mxnet/resnet/result_{n}.txt"
    ))
}

#[test]
fn a_results_folder_becomes_run_records() {
    let runs = run_json(&["import", "mlperf", &fixture("mlperf"), "--format", "json"]);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 4);
    let eos = runs
        .iter()
        .find(|r| {
            r["file"]
                .as_str()
                .unwrap()
                .ends_with("eos_ngc23.09_mxnet/resnet/result_0.txt")
        })
        .unwrap();
    // What the log and NVIDIA's system description say.
    assert_eq!(eos["benchmark"], "resnet");
    assert_eq!(eos["submitter"], "NVIDIA");
    assert_eq!(eos["system"], "Eos_n1");
    assert_eq!(eos["nodes"], 1);
    assert_eq!(eos["accelerators_per_node"], 8);
    assert_eq!(eos["accelerator"], "NVIDIA H100-SXM5-80GB");
    assert_eq!(eos["global_batch"], 3200);
    assert_eq!(eos["train_samples"], 1_281_167);
    assert_eq!(eos["eval_samples"], 50_000);
    assert_eq!(eos["epochs"], 35);
    assert_eq!(eos["status"], "success");
    // run_start 1695520163256 ms to run_stop 1695520967209 ms.
    assert_eq!(eos["time_to_train_s"].as_f64().unwrap(), 803.953);
    let throughput = eos["throughput"].as_f64().unwrap();
    assert!((50_000.0..60_000.0).contains(&throughput), "{throughput}");
    // The Dell system: four H100s per node and 3,264 images a step.
    let dell = runs
        .iter()
        .find(|r| r["file"].as_str().unwrap().contains("XE8640x4H100"))
        .unwrap();
    assert_eq!(dell["accelerators_per_node"], 4);
    assert_eq!(dell["global_batch"], 3264);
    // CSV has one row a run.
    let csv = run_ok(&[
        "import",
        "mlperf",
        &eos_log(0),
        &eos_log(1),
        "--format",
        "csv",
    ]);
    assert_eq!(csv.lines().count(), 3, "{csv}");
}

#[test]
fn imported_runs_validate_against_predict() {
    let dir = scratch("validate");
    let runs = dir.join("runs.jsonl");
    let runs = runs.to_str().unwrap();
    run_ok(&["import", "mlperf", &fixture("mlperf"), "--out", runs]);
    assert_eq!(std::fs::read_to_string(runs).unwrap().lines().count(), 4);
    let v = run_json(&[
        "validate",
        "--measured",
        runs,
        "--system",
        "dgx-h100",
        "--precision",
        "amp-fp16",
        "--format",
        "json",
    ]);
    // The three H100 runs are predicted; the A100 run is not this system's.
    let checked = v["runs"].as_array().unwrap();
    assert_eq!(checked.len(), 3);
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].as_str().unwrap().contains("A100-PCIe-80GB"));
    for r in checked {
        let (m, p) = (
            r["measured_time_to_train_s"].as_f64().unwrap(),
            r["predicted_time_to_train_s"].as_f64().unwrap(),
        );
        let e = r["time_to_train_error"].as_f64().unwrap();
        assert!((e - (p / m - 1.0)).abs() < 1e-9);
        assert!(r["predicted_time_to_train_lo_s"].as_f64().unwrap() <= p);
        // No convergence data for ResNet-50: its epochs are the run's; no staging logged.
        assert!(r["predicted_epochs"].is_null());
        assert!(r["measured_staging_s"].is_null());
        assert!(r["predicted_time_to_train_hi_s"].as_f64().unwrap() >= p);
    }
    // Four H100s for the Dell run, eight for NVIDIA's.
    let devices: Vec<u64> = checked
        .iter()
        .map(|r| r["devices"].as_u64().unwrap())
        .collect();
    assert_eq!(
        devices.iter().filter(|d| **d == 4).count(),
        1,
        "{devices:?}"
    );
    // Runs need the precision they are predicted in.
    let err = run_err(&["validate", "--measured", runs, "--system", "dgx-h100"]);
    assert!(err.contains("--precision"), "{err}");
    // The validation report shows them.
    let out = dir.join("report");
    run_ok(&[
        "report",
        "validation",
        "--measured",
        runs,
        "--system",
        "dgx-h100",
        "--precision",
        "amp-fp16",
        "--out",
        out.to_str().unwrap(),
    ]);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("Validation of imported runs on dgx-h100"),
        "{md}"
    );
    assert_eq!(md.matches("| Eos\\_n1 |").count(), 2, "{md}");
    assert!(out.join("figures/runs-predicted-vs-measured.svg").is_file());
    let csv = std::fs::read_to_string(out.join("tables/runs.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    let err = run_err(&[
        "report",
        "validation",
        "--measured",
        runs,
        "--system",
        "dgx-h100",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(err.contains("--precision"), "{err}");
}

#[test]
fn damaged_logs_are_refused_naming_file_and_line() {
    let dir = scratch("bad");
    let text = std::fs::read_to_string(eos_log(0)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // A log cut before its run stopped.
    let cut = dir.join("result_cut.txt");
    std::fs::write(&cut, lines[..lines.len() - 5].join("\n")).unwrap();
    let err = run_err(&["import", "mlperf", cut.to_str().unwrap()]);
    assert!(
        err.contains("result_cut.txt") && err.contains("run_stop"),
        "{err}"
    );
    // A line cut in the middle of its JSON.
    let torn = dir.join("result_torn.txt");
    let mut damaged: Vec<String> = lines.iter().map(|l| (*l).to_owned()).collect();
    let half = damaged[40].len() / 2;
    damaged[40].truncate(half);
    std::fs::write(&torn, damaged.join("\n")).unwrap();
    let err = run_err(&["import", "mlperf", torn.to_str().unwrap()]);
    assert!(err.contains("result_torn.txt: line 41"), "{err}");
    // Not a result log; a folder without logs; a path that is not there.
    let other = dir.join("notes.txt");
    std::fs::write(&other, "nothing logged here\n").unwrap();
    let err = run_err(&["import", "mlperf", other.to_str().unwrap()]);
    assert!(err.contains("no :::MLLOG lines"), "{err}");
    let empty = scratch("empty");
    let err = run_err(&["import", "mlperf", empty.to_str().unwrap()]);
    assert!(err.contains("no MLPerf result logs"), "{err}");
    let err = run_err(&["import", "mlperf", "/nonexistent/result_0.txt"]);
    assert!(err.contains("no such file or folder"), "{err}");
    // A system description with a count that is not one.
    let tree = scratch("tree");
    let log = tree.join("Org/results/box/resnet/result_0.txt");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    std::fs::write(&log, &text).unwrap();
    std::fs::create_dir_all(tree.join("Org/systems")).unwrap();
    std::fs::write(
        tree.join("Org/systems/box.json"),
        r#"{"number_of_nodes": "two"}"#,
    )
    .unwrap();
    let err = run_err(&["import", "mlperf", tree.to_str().unwrap()]);
    assert!(
        err.contains("box.json") && err.contains("number_of_nodes"),
        "{err}"
    );
    // A runs file with a damaged line.
    let runs = dir.join("runs.jsonl");
    std::fs::write(&runs, "{\"record\": \"mlperf_run\", \"file\": 3}\n").unwrap();
    let err = run_err(&[
        "validate",
        "--measured",
        runs.to_str().unwrap(),
        "--system",
        "dgx-h100",
        "--precision",
        "amp-fp16",
    ]);
    assert!(err.contains("runs.jsonl: line 1"), "{err}");
}

/// A PyTorch profiler trace of ResNet-50 training on a CPU (`scripts/torch-trace.py`,
/// committed gzip-compressed), imported, calibrated and validated: the path for runs on
/// hardware ridgeline never measured.
#[test]
fn a_resnet50_trace_is_imported_calibrated_and_validated() {
    let dir = scratch("trace");
    let records = dir.join("trace.jsonl");
    let records = records.to_str().unwrap();
    let trace = fixture("torch/resnet50-cpu.json.gz");
    let imported = run_json(&[
        "import",
        "torch-trace",
        &trace,
        "--workload",
        "resnet50",
        "--threads",
        "2",
        "--out",
        records,
        "--format",
        "json",
    ]);
    assert_eq!(imported["workload"], "resnet50");
    assert_eq!(imported["batch"], 2);
    assert_eq!(imported["input"], serde_json::json!([3, 224, 224]));
    assert_eq!(imported["steps"], 2);
    // Every layer of ResNet-50 but its input.
    assert_eq!(imported["layers"], 175);
    // What is no layer is listed: each parameter's gradient accumulation, the flatten.
    let unmapped = imported["unmapped"].as_array().unwrap();
    let calls = |name: &str| {
        unmapped
            .iter()
            .find(|u| u["name"] == name)
            .map(|u| u["count"].as_u64().unwrap())
    };
    assert_eq!(calls("torch::autograd::AccumulateGrad"), Some(2 * 161));
    assert_eq!(calls("aten::flatten"), Some(2));
    // Calibrate on the trace's kernels; its provenance names the trace.
    let profile = dir.join("profile.toml");
    let profile = profile.to_str().unwrap();
    run_ok(&["calibrate", records, "--out", profile]);
    let text = std::fs::read_to_string(profile).unwrap();
    assert!(text.contains("PyTorch profiler trace"), "{text}");
    // The samples' spread is the simulator's per-rank variability by default.
    assert!(text.contains("sample_cv = "), "{text}");
    let timeline = dir.join("timeline.json");
    let out = run_ok(&[
        "predict",
        "resnet50",
        "--system",
        profile,
        "--nodes",
        "1",
        "--batch",
        "2",
        "--epochs",
        "1",
        "--timeline",
        timeline.to_str().unwrap(),
    ]);
    assert!(
        out.contains("(the profile's measured sample spread)"),
        "{out}"
    );
    // Validate against the same trace's whole steps.
    let v = run_json(&[
        "validate",
        "--profile",
        profile,
        "--measured",
        records,
        "--format",
        "json",
    ]);
    let step = &v["steps"][0];
    assert_eq!(step["workload"], "resnet50");
    let (p, m) = (
        step["predicted_s"].as_f64().unwrap(),
        step["measured_s"].as_f64().unwrap(),
    );
    assert!(p > 0.0 && m > 0.0);
    assert!((step["rel_error"].as_f64().unwrap() - (p - m) / m).abs() < 1e-9);
    // A trace records no absolute peak memory: none is compared.
    assert!(step["measured_memory_bytes"].is_null());
    assert_eq!(v["worst_layers"].as_array().unwrap().len(), 10);
    // The wrong workload is refused, naming the op and the layer.
    let err = run_err(&[
        "import",
        "torch-trace",
        &trace,
        "--workload",
        "cosmoflow",
        "--threads",
        "2",
        "--out",
        records,
    ]);
    assert!(err.contains("resnet50-cpu.json.gz"), "{err}");
}

/// A trace taken on an H100: every op's time is its CUDA kernels', a layer pass that
/// launched none (a residual add's backward) is listed and left out, and the records
/// validate against the transferred model of the trace's GPU.
#[test]
fn a_gpu_trace_times_ops_by_their_kernels() {
    let dir = scratch("gpu-trace");
    let records = dir.join("h100.jsonl");
    let records = records.to_str().unwrap();
    let imported: serde_json::Value =
        serde_json::from_str(&import_h100_trace(records, &["--format", "json"])).unwrap();
    assert_eq!(imported["device"], "cuda:0");
    assert_eq!(imported["batch"], 32);
    assert_eq!(imported["layers"], 175);
    let no_kernel = imported["no_kernel"].as_array().unwrap();
    assert_eq!(no_kernel.len(), 1, "{no_kernel:?}");
    assert_eq!(no_kernel[0]["name"], "add backward");
    // 16 residual adds, two profiled steps.
    assert_eq!(no_kernel[0]["count"], 32);
    let text = std::fs::read_to_string(records).unwrap();
    let all: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &all {
        let samples = r["samples_s"].as_array().unwrap();
        assert!(
            !samples.is_empty() && samples.iter().all(|s| s.as_f64().unwrap() > 0.0),
            "{r}"
        );
        assert_eq!(r["env"]["gpu"]["name"], "NVIDIA H100 80GB HBM3");
    }
    // The layers' kernels fit inside the step they ran in.
    let median = |r: &serde_json::Value| {
        let mut v: Vec<f64> = r["samples_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap())
            .collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let step = all.iter().find(|r| r["kind"] == "workload-step").unwrap();
    let layers: f64 = all
        .iter()
        .filter(|r| r["kind"] == "workload-layer")
        .map(median)
        .sum();
    assert!(
        layers > 0.3 * median(step) && layers < median(step),
        "{layers}"
    );
    let v = run_json(&[
        "validate",
        "--system",
        "h100-sxm5-80gb",
        "--measured",
        records,
        "--format",
        "json",
    ]);
    assert_eq!(v["steps"].as_array().unwrap().len(), 1);
}

/// A rank of a 2-process DistributedDataParallel run (gloo): the same layers, and the
/// gradient allreduces as communication, with what ran past backward.
#[test]
fn a_data_parallel_trace_records_its_communication() {
    let dir = scratch("ddp");
    let records = dir.join("ddp.jsonl");
    let imported = run_json(&[
        "import",
        "torch-trace",
        &fixture("torch/resnet50-ddp2-rank0.json.gz"),
        "--workload",
        "resnet50",
        "--threads",
        "1",
        "--out",
        records.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(imported["layers"], 175);
    assert_eq!(imported["ranks"], 2);
    let [comm, exposed] = [0, 1].map(|i| imported["comm_s"][i].as_f64().unwrap());
    assert!(
        comm > 0.0 && (0.0..=comm).contains(&exposed),
        "{comm} {exposed}"
    );
    let text = std::fs::read_to_string(&records).unwrap();
    let step: serde_json::Value = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["kind"] == "workload-step")
        .unwrap();
    assert_eq!(step["extra"]["ranks"], 2);
    assert_eq!(step["extra"]["comm_s"].as_array().unwrap().len(), 2);
    assert_eq!(step["extra"]["exposed_comm_s"].as_array().unwrap().len(), 2);
}

#[test]
fn damaged_traces_are_refused_naming_file_and_where() {
    let dir = scratch("bad-trace");
    let out = dir.join("r.jsonl");
    let out = out.to_str().unwrap();
    let args = |trace: &str| {
        run_err(&[
            "import",
            "torch-trace",
            trace,
            "--workload",
            "resnet50",
            "--threads",
            "2",
            "--out",
            out,
        ])
    };
    // A gzip stream cut short.
    let gz = std::fs::read(fixture("torch/resnet50-cpu.json.gz")).unwrap();
    let cut = dir.join("cut.json.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let err = args(cut.to_str().unwrap());
    assert!(
        err.contains("cut.json.gz") && err.contains("cut short"),
        "{err}"
    );
    // JSON cut short: the line and column.
    let torn = dir.join("torn.json");
    std::fs::write(&torn, "{\"traceEvents\": [\n{\"ph\": \"X\", \"name\": \"a").unwrap();
    let err = args(torn.to_str().unwrap());
    assert!(err.contains("torn.json: line 2 column"), "{err}");
    // Not a trace; no file.
    let other = dir.join("other.json");
    std::fs::write(&other, "[1, 2]").unwrap();
    assert!(args(other.to_str().unwrap()).contains("no `traceEvents`"));
    assert!(args("/nonexistent/trace.json").contains("/nonexistent/trace.json"));
    assert!(!std::path::Path::new(out).exists(), "no partial output");
}

/// `import nsys` on a real Nsight Systems export (pipit's Perlmutter saxpy report, MIT
/// licence; `tests/fixtures/nsys/SOURCE.md`).
#[test]
fn an_nsys_export_gives_its_kernels_by_nvtx_range() {
    let report = fixture("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz");
    let v = run_json(&["import", "nsys", &report, "--format", "json"]);
    assert_eq!(v["gpu"], "NVIDIA A100-SXM4-40GB");
    assert_eq!(v["kernels"], 5);
    let rows = v["by_range"].as_array().unwrap();
    // Every saxpy kernel was launched inside an NVTX range `saxpy`.
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["range"], "saxpy");
    assert_eq!(rows[0]["calls"], 5);
    assert_eq!(rows[0]["kernels"], 5);
    let t = rows[0]["kernel_s"].as_f64().unwrap();
    assert!((t - 0.088_573_48).abs() < 1e-9, "{t}");
    // Its ranges mark no training step: no records to make of them.
    let dir = scratch("nsys");
    let out = dir.join("r.jsonl");
    let err = run_err(&[
        "import",
        "nsys",
        &report,
        "--workload",
        "resnet50",
        "--batch",
        "2",
        "--precision",
        "fp32",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(err.contains("no NVTX range named `step...`"), "{err}");
    assert!(!out.exists());
    // Not an export; cut short.
    let other = dir.join("notes.sqlite");
    std::fs::write(&other, "text, not SQLite").unwrap();
    assert!(run_err(&["import", "nsys", other.to_str().unwrap()]).contains("notes.sqlite"));
    let gz = std::fs::read(&report).unwrap();
    let cut = dir.join("cut.sqlite.gz");
    std::fs::write(&cut, &gz[..gz.len() / 3]).unwrap();
    let err = run_err(&["import", "nsys", cut.to_str().unwrap()]);
    assert!(err.contains("cut.sqlite.gz"), "{err}");
}

/// `validate ddp-trace`: the simulator puts a traced DDP step's measured parts together; on
/// these traces of 2 and 4 ranks it fills the buckets DDP filled and lands near the step.
#[test]
fn the_simulator_reassembles_traced_data_parallel_steps() {
    for ranks in [2, 4] {
        let trace = fixture(&format!("torch/resnet50-ddp{ranks}-rank0.json.gz"));
        let c = run_json(&[
            "validate",
            "ddp-trace",
            &trace,
            "--workload",
            "resnet50",
            "--format",
            "json",
        ]);
        assert_eq!(c["ranks"], ranks);
        assert_eq!(c["steps"], 2);
        // DDP's 1 MiB first bucket (the fc layer's 8 MB alone), then 25 MiB ones: 5.
        assert_eq!(c["buckets_measured"], 5);
        assert_eq!(c["buckets_simulated"], 5);
        let e = c["error"].as_f64().unwrap();
        assert!(e.abs() < 0.1, "{ranks} ranks: {c}");
        let (m, s) = (
            c["measured_step_s"].as_f64().unwrap(),
            c["simulated_step_s"].as_f64().unwrap(),
        );
        assert!((e - (s / m - 1.0)).abs() < 1e-12);
    }
    // A trace without collectives has no data-parallel step to simulate.
    let err = run_err(&[
        "validate",
        "ddp-trace",
        &fixture("torch/resnet50-cpu.json.gz"),
        "--workload",
        "resnet50",
    ]);
    assert!(err.contains("holds no collectives"), "{err}");
}
