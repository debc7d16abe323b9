//! `predict`, `scale` and `sweep` (issue #3).

use crate::{fixture, run_err, run_json, run_ok};

#[test]
fn predict_json_has_the_documented_fields() {
    let v = run_json(&[
        "predict",
        "cosmoflow-v07",
        "--system",
        "cori-gpu",
        "--nodes",
        "8",
        "--batch",
        "8",
        "--precision",
        "amp-fp16",
        "--format",
        "json",
    ]);
    for field in [
        "step_time_s",
        "compute_s",
        "input_s",
        "allreduce_s",
        "bound",
        "samples_per_s",
        "samples_per_s_per_device",
        "epoch_time_s",
        "staging_s",
        "time_to_solution_s",
        "achieved_flops",
        "fraction_of_peak",
        "memory_per_device_bytes",
        "fits",
        "data_movement",
        "depthwise",
    ] {
        assert!(v.get(field).is_some(), "missing `{field}` in {v}");
    }
    assert_eq!(v["bound"], "input");
    assert_eq!(v["global_batch"], 512);
    // The shipped convergence curve: [003] Table 6 measured 100 epochs at batch 512.
    assert_eq!(v["epochs"].as_f64(), Some(100.0));
    let step = v["step_time_s"].as_f64().unwrap();
    let parts = ["compute_s", "input_s", "allreduce_s"].map(|f| v[f].as_f64().unwrap());
    assert_eq!(
        step,
        parts.iter().copied().fold(0.0, f64::max),
        "full overlap takes the max"
    );
    let sources: Vec<&str> = v["data_movement"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["source"].as_str().unwrap())
        .collect();
    assert!(sources.contains(&"gradients") && sources.contains(&"model+activations"));
}

#[test]
fn predict_table_names_the_bound_and_time_to_solution() {
    let out = run_ok(&[
        "predict",
        "resnet50",
        "--system",
        fixture("hpcai500-testbed.toml").as_str(),
        "--nodes",
        "8",
        "--batch",
        "256",
        "--precision",
        "amp-fp16",
        "--epochs",
        "40",
    ]);
    assert!(out.contains("(allreduce-bound)"), "{out}");
    assert!(out.contains("time to solution"), "{out}");
}

#[test]
fn global_batch_is_split_over_the_devices() {
    let v = run_json(&[
        "predict",
        "deepcam",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "64",
        "--global-batch",
        "2048",
        "--precision",
        "amp-bf16",
        "--format",
        "json",
    ]);
    assert_eq!(v["local_batch"], 8);
    assert_eq!(
        v["epochs"].as_f64(),
        Some(24.0),
        "[003] Table 6: 24 epochs at batch 2048"
    );
}

#[test]
fn scale_strong_marks_batches_that_do_not_divide() {
    let v = run_json(&[
        "scale",
        "deepcam",
        "--system",
        "perlmutter-gpu",
        "--mode",
        "strong",
        "--global-batch",
        "1024",
        "--nodes",
        "64,96,128",
        "--precision",
        "amp-fp16",
        "--epochs",
        "20",
        // The datasheet bound: compute-bound steps that halve with the batch.
        "--efficiency",
        "ideal",
        "--format",
        "json",
    ]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(rows[0]["outcome"].is_object());
    assert!(
        rows[1]["infeasible"]
            .as_str()
            .unwrap()
            .contains("does not divide")
    );
    let speedup = rows[2]["speedup"].as_f64().unwrap();
    assert!(speedup > 1.5 && speedup <= 2.0 + 1e-9, "{speedup}");
}

#[test]
fn scale_ensemble_and_problem_size() {
    let v = run_json(&[
        "scale",
        "cosmoflow-v07",
        "--system",
        "perlmutter-gpu",
        "--mode",
        "ensemble",
        "--batch",
        "4",
        "--nodes-per-model",
        "16",
        "--models",
        "1..8:x2",
        "--precision",
        "amp-fp16",
        "--format",
        "json",
    ]);
    let models: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["models"].as_u64().unwrap())
        .collect();
    assert_eq!(models, vec![1, 2, 4, 8]);
    let v = run_json(&[
        "scale",
        "cosmoflow",
        "--system",
        "perlmutter-gpu",
        "--mode",
        "problem-size",
        "--batch",
        "1",
        "--nodes",
        "1",
        "--input-sizes",
        "64,128",
        "--widths",
        "1,2",
        "--epochs",
        "10",
        "--format",
        "json",
    ]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    let flops = |i: usize| rows[i]["flops_per_sample"].as_f64().unwrap();
    assert!(
        (flops(2) / flops(0) - 8.0).abs() < 0.1,
        "128^3 has 8x the voxels of 64^3"
    );
}

#[test]
fn sweep_reports_counts_rate_and_the_best() {
    let dir = std::env::temp_dir().join(format!("ridgeline-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("all.csv");
    let v = run_json(&[
        "sweep",
        "resnet50",
        "--systems",
        "cori-gpu,perlmutter-gpu",
        "--nodes",
        "1..64",
        "--batch",
        "16..512:x2",
        "--precisions",
        "fp32,amp-fp16",
        "--epochs",
        "40",
        "--top",
        "3",
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(v["evaluated"], 2 * 2 * 64 * 6);
    let (feasible, infeasible) = (
        v["feasible"].as_u64().unwrap(),
        v["infeasible"].as_u64().unwrap(),
    );
    assert_eq!(feasible + infeasible, 2 * 2 * 64 * 6);
    assert!(
        v["infeasible_by_reason"]["more nodes than the system has"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert!(v["evaluations_per_s"].as_f64().unwrap() > 0.0);
    let top = v["top"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    let tts: Vec<f64> = top
        .iter()
        .map(|t| t["time_to_solution_s"].as_f64().unwrap())
        .collect();
    assert!(tts.windows(2).all(|w| w[0] <= w[1]), "best first: {tts:?}");
    assert!(top[0]["step_time_s"].is_number() && top[0]["system"].is_string());
    let csv = std::fs::read_to_string(&out).unwrap();
    assert!(
        csv.starts_with("system,stack,precision,nodes,"),
        "{}",
        &csv[..80]
    );
    assert_eq!(csv.lines().count() as u64, feasible + 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_prediction_input_is_refused() {
    let err = run_err(&[
        "predict", "resnet50", "--system", "cori-gpu", "--nodes", "0", "--batch", "8",
    ]);
    assert!(err.contains("--nodes"), "{err}");
    let err = run_err(&[
        "predict",
        "resnet50",
        "--system",
        "cori-gpu",
        "--nodes",
        "3",
        "--global-batch",
        "100",
        "--epochs",
        "40",
    ]);
    assert!(err.contains("does not divide over 24 devices"), "{err}");
    // Past the listed size (issue 17): predicted with a warning.
    let grown = run_ok(&[
        "predict", "resnet50", "--system", "cori-gpu", "--nodes", "19", "--batch", "8", "--epochs",
        "40",
    ]);
    assert!(
        grown.contains("assumed: 19 nodes, past the 18 the system lists"),
        "{grown}"
    );
    let err = run_err(&[
        "predict", "deepcam", "--system", "cori-gpu", "--nodes", "1", "--batch", "2",
    ]);
    assert!(
        err.contains("outside the convergence data (128..2048)")
            && err.contains("does not extrapolate"),
        "{err}"
    );
    let err = run_err(&[
        "predict", "resnet50", "--system", "cori-gpu", "--nodes", "1", "--batch", "8",
    ]);
    assert!(err.contains("--epochs"), "{err}");
    let err = run_err(&[
        "predict",
        "resnet50",
        "--system",
        "fugaku",
        "--nodes",
        "1",
        "--batch",
        "1",
        "--epochs",
        "40",
        "--data-location",
        "nvme",
    ]);
    assert!(err.contains("no node-local NVMe"), "{err}");
    let err = run_err(&[
        "predict",
        "resnet50",
        "--system",
        "cori-gpu",
        "--nodes",
        "1",
        "--batch",
        "8",
        "--epochs",
        "40",
        "--compute-efficiency",
        "1.5",
    ]);
    assert!(err.contains("(0, 1]"), "{err}");
    let err = run_err(&[
        "predict",
        fixture("tiny.toml").as_str(),
        "--system",
        "cori-gpu",
        "--nodes",
        "1",
        "--batch",
        "8",
    ]);
    assert!(err.contains("--dataset FILE"), "{err}");
}

#[test]
fn bad_convergence_files_are_refused() {
    let dir = std::env::temp_dir().join(format!("ridgeline-conv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let point = |b: u64, e: f64| {
        format!("[[convergence]]\nglobal_batch = {b}\nepochs = {{ value = {e}, source = \"s\" }}\n")
    };
    let head = "[sources]\ns = \"a test\"\n";
    let cases = [
        (
            "negative.toml",
            format!("{head}{}", point(64, -3.0)),
            "must be a positive number",
        ),
        (
            "zero.toml",
            format!("{head}{}", point(64, 0.0)),
            "must be a positive number",
        ),
        (
            "twice.toml",
            format!("{head}{}{}", point(64, 3.0), point(64, 4.0)),
            "appears twice",
        ),
    ];
    for (name, body, expected) in cases {
        let path = write(name, &body);
        let err = run_err(&[
            "predict",
            "resnet50",
            "--system",
            "cori-gpu",
            "--nodes",
            "1",
            "--batch",
            "8",
            "--convergence",
            &path,
        ]);
        assert!(
            err.contains(expected) && err.contains(name),
            "{name}: {err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_sweep_input_is_refused() {
    let err = run_err(&[
        "sweep",
        "resnet50",
        "--systems",
        "cori-gpu",
        "--nodes",
        "8..4",
        "--batch",
        "8",
        "--epochs",
        "40",
    ]);
    assert!(err.contains("backwards"), "{err}");
    let err = run_err(&[
        "sweep",
        "resnet50",
        "--systems",
        "cori-gpu",
        "--nodes",
        "1..4",
        "--batch",
        "8",
        "--epochs",
        "40",
        "--objective",
        "cost",
    ]);
    assert!(err.contains("price_per_node_hour"), "{err}");
    let err = run_err(&[
        "scale", "resnet50", "--system", "cori-gpu", "--mode", "strong", "--nodes", "1,2",
        "--epochs", "40",
    ]);
    assert!(err.contains("--global-batch"), "{err}");
}

/// Golden snapshots of `predict --format json`: every quantity as a base-SI number, energy
/// and price where the system gives power and a price. Taken with the bare-`f64` outcome
/// before issue 19 typed it, so they prove the typed one writes the same JSON.
#[test]
fn predict_json_golden_snapshots() {
    for (name, args) in [
        (
            "cosmoflow_v07_cori",
            &[
                "cosmoflow-v07",
                "--system",
                "cori-gpu",
                "--nodes",
                "8",
                "--batch",
                "8",
                "--precision",
                "amp-fp16",
            ][..],
        ),
        (
            "resnet50_dgx_a100",
            &[
                "resnet50", "--system", "dgx-a100", "--nodes", "4", "--batch", "64", "--epochs",
                "40",
            ][..],
        ),
    ] {
        let mut all = vec!["predict"];
        all.extend(args);
        all.extend(["--format", "json"]);
        insta::assert_snapshot!(format!("predict_{name}"), run_ok(&all));
    }
}

/// Without a profile a catalog GPU is timed by the transferred kernel model, says so, and
/// is never faster than `--efficiency ideal`; a GPU file without the model's figures gets no
/// transferred times; a wrong model name is refused.
#[test]
fn predict_times_gpus_by_the_transferred_model_unless_told_or_unable() {
    let args = |extra: &[&str]| -> Vec<String> {
        [
            "predict",
            "deepcam",
            "--system",
            "perlmutter-gpu",
            "--nodes",
            "1",
            "--batch",
            "2",
            "--epochs",
            "1",
            "--format",
            "json",
        ]
        .iter()
        .chain(extra)
        .map(|s| (*s).to_owned())
        .collect()
    };
    let json = |a: Vec<String>| run_json(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let transfer = json(args(&[]));
    let ideal = json(args(&["--efficiency", "ideal"]));
    let layers = transfer["layers"].as_array().unwrap();
    assert!(!layers.is_empty());
    assert!(layers.iter().all(|l| l["timed_by"] == "transfer"));
    assert_eq!(transfer["compute_timed_by"]["transfer"], layers.len());
    assert_eq!(ideal["compute_timed_by"]["ideal"], layers.len());
    let (t, i) = (
        transfer["compute_s"].as_f64().unwrap(),
        ideal["compute_s"].as_f64().unwrap(),
    );
    assert!(t > i, "transfer {t} against the ideal bound {i}");
    let interval = |v: &serde_json::Value| {
        let a = v["compute_interval_90_s"].as_array().unwrap().clone();
        (a[0].as_f64().unwrap(), a[1].as_f64().unwrap())
    };
    let (lo, hi) = interval(&transfer);
    assert!(i <= lo && lo < t && t < hi, "{lo} {t} {hi}");
    assert_eq!(interval(&ideal), (i, i));
    let said = |v: &serde_json::Value, what: &str| {
        v["assumptions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains(what))
    };
    assert!(said(&transfer, "transferred kernel model"));
    assert!(said(&ideal, "--efficiency ideal"));

    // DeepCAM's depthwise convolutions rest on no depthwise kernel: the prediction says how
    // many there are and what share of the layers' time they take (at least that of the
    // Xception separable convolutions' depthwise halves, `*.sepconv.conv1`); the ideal
    // bound times no layer by the model and says nothing of them.
    let caveat = transfer["assumptions"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|a| {
            let (count, rest) = a.as_str()?.split_once(" depthwise convolution layers (")?;
            let (share, _) = rest.split_once("% of the layers' time)")?;
            Some((count.parse::<usize>().ok()?, share.parse::<f64>().ok()?))
        });
    let (count, share) = caveat.unwrap_or_else(|| panic!("{}", transfer["assumptions"]));
    let time = |l: &serde_json::Value| {
        l["forward_s"].as_f64().unwrap() + l["backward_s"].as_f64().unwrap()
    };
    let sepconv: Vec<_> = layers
        .iter()
        .filter(|l| l["layer"].as_str().unwrap().ends_with(".sepconv.conv1"))
        .collect();
    let floor =
        100.0 * sepconv.iter().map(|l| time(l)).sum::<f64>() / layers.iter().map(time).sum::<f64>();
    assert!(count >= sepconv.len() && !sepconv.is_empty(), "{count}");
    assert!(share >= floor.floor() && share <= 100.0, "{share} {floor}");
    assert!(!said(&ideal, "depthwise convolution layer"));
    let resnet = run_json(&[
        "predict",
        "resnet50",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "1",
        "--batch",
        "32",
        "--epochs",
        "1",
        "--format",
        "json",
    ]);
    assert!(said(&resnet, "transferred kernel model"));
    assert!(!said(&resnet, "depthwise convolution layer"));

    // Perlmutter's GPU without its SMs and clock: the roofline's layers get no
    // transferred time, and the summary says why.
    let dir = std::env::temp_dir().join(format!("ridgeline-e2e-bare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(format!(
        "{}/data/catalog/systems/devices/a100-sxm4-40gb.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let bare: String = text
        .lines()
        .filter(|l| {
            !["sms", "boost_clock_mhz", "process_nm", "[compute]"]
                .iter()
                .any(|k| l.starts_with(k))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let file = dir.join("bare.toml");
    std::fs::write(&file, bare).unwrap();
    let file = file.to_str().unwrap();
    let roofline = |system: &str| {
        run_json(&[
            "roofline", "deepcam", "--system", system, "--batch", "2", "--format", "json",
        ])
    };
    let timed = |v: &serde_json::Value| {
        v["layers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| !l["transferred"].is_null())
            .count()
    };
    assert!(timed(&roofline("a100-sxm4-40gb")) > 0);
    assert_eq!(timed(&roofline(file)), 0);
    let table = run_ok(&["roofline", "deepcam", "--system", file, "--batch", "2"]);
    assert!(
        table.contains("none: the device is not a GPU with [compute]"),
        "{table}"
    );

    let bad = args(&["--efficiency", "fast"]);
    let err = run_err(&bad.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(err.contains("valid: transfer, ideal"), "{err}");
}

#[test]
fn predict_simulates_the_step_and_writes_its_timeline() {
    let path = std::env::temp_dir().join(format!("ridgeline-timeline-{}.json", std::process::id()));
    let p = path.to_str().unwrap();
    let args = [
        "predict",
        "resnet50",
        "--system",
        "dgx-a100",
        "--nodes",
        "4",
        "--batch",
        "64",
        "--epochs",
        "1",
        "--timeline",
        p,
    ];
    let out = run_ok(&args);
    assert!(
        out.contains("simulated step") && out.contains("buckets"),
        "{out}"
    );
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    // Every layer forward and backward on the compute stream, buckets on communication.
    let on = |cat: &str| events.iter().filter(|e| e["cat"] == cat).count();
    assert!(on("compute") >= 2 * 100, "{}", on("compute"));
    assert!(on("communication") >= 2);
    assert!(
        events
            .iter()
            .all(|e| e["ph"] == "M" || e["dur"].as_f64().unwrap() >= 0.0)
    );
    // The same seed, the same step; a bucket of nothing is refused.
    let mut varied = args.to_vec();
    varied.extend(["--rank-cv", "0.1", "--seed", "3"]);
    assert_eq!(run_ok(&varied), run_ok(&varied));
    let mut bad = args.to_vec();
    bad.extend(["--bucket-mib", "0"]);
    let err = run_err(&bad);
    assert!(
        err.contains("--bucket-mib") && err.contains("positive"),
        "{err}"
    );
    std::fs::remove_file(&path).unwrap();
}

/// `predict --chakra`: the step as a Chakra execution trace, one file per data-parallel
/// rank, read back with Chakra's schema.
#[test]
fn predict_writes_a_chakra_trace_per_rank() {
    let dir = std::env::temp_dir().join(format!("ridgeline-chakra-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("resnet50.et");
    let args = [
        "predict",
        "resnet50",
        "--system",
        "dgx-a100",
        "--nodes",
        "2",
        "--batch",
        "64",
        "--epochs",
        "1",
        "--chakra",
        prefix.to_str().unwrap(),
    ];
    let json = run_json(&[&args[..], &["--format", "json"]].concat());
    let devices = json["devices"].as_u64().unwrap();
    assert_eq!(devices, 16);
    let rank0 = std::fs::read(dir.join("resnet50.0.et")).unwrap();
    for r in 1..devices {
        assert_eq!(
            std::fs::read(dir.join(format!("resnet50.{r}.et"))).unwrap(),
            rank0
        );
    }
    assert!(!dir.join(format!("resnet50.{devices}.et")).exists());
    let (meta, nodes) = ridgeline_model::chakra::decode(&rank0, "resnet50.0.et").unwrap();
    assert_eq!(meta.version, ridgeline_model::chakra::VERSION);
    let layers = json["layers"].as_array().unwrap();
    // Every layer with work, forward and backward, then the buckets and the optimizer.
    let computed = layers
        .iter()
        .filter(|l| l["forward_s"].as_f64().unwrap() + l["backward_s"].as_f64().unwrap() > 0.0)
        .count();
    let comm: Vec<_> = nodes
        .iter()
        .filter(|n| n.r#type == ridgeline_model::chakra::NodeType::CommCollNode as i32)
        .collect();
    assert!(comm.len() >= 2, "{}", comm.len());
    assert_eq!(nodes.len(), 2 * computed + comm.len() + 1);
    // The forward and backward times are the prediction's, in microseconds.
    let conv1 = nodes.iter().find(|n| n.name == "conv1 forward").unwrap();
    let predicted = layers.iter().find(|l| l["layer"] == "conv1").unwrap()["forward_s"]
        .as_f64()
        .unwrap();
    assert_eq!(conv1.duration_micros, (predicted * 1e6).round() as u64);
    // The optimizer waits for every allreduce.
    let optimizer = nodes.last().unwrap();
    assert_eq!(optimizer.name, "optimizer");
    assert!(comm.iter().all(|c| optimizer.data_deps.contains(&c.id)));
    // Not for model-parallel splits.
    let err = run_err(&[&args[..], &["--tensor-parallel", "2"]].concat());
    assert!(err.contains("--chakra"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
