use crate::{fixture, run_json, run_ok};

#[test]
fn list_shows_the_workloads_with_reference_parameter_counts() {
    let v = run_json(&["workload", "list", "--format", "json"]);
    let params: Vec<(String, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_owned(),
                w["params"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        params,
        vec![
            ("cosmoflow".to_owned(), 8_907_556),
            ("cosmoflow-v07".to_owned(), 5_597_604),
            ("deepcam".to_owned(), 56_454_720),
            ("resnet50".to_owned(), 25_557_032),
            ("swin-t".to_owned(), 28_288_354),
            ("bert-large".to_owned(), 336_226_108),
            ("gpt2".to_owned(), 124_439_808),
            ("gpt2-large".to_owned(), 774_030_080),
            ("gpt3-xl".to_owned(), 1_315_723_264),
            ("gpt3-2.7b".to_owned(), 2_651_553_280),
            ("gpt3-175b".to_owned(), 174_604_259_328),
            ("opt-1.3b".to_owned(), 1_315_758_080),
            ("llama3-8b".to_owned(), 8_030_261_248),
            ("llama3-70b".to_owned(), 70_553_706_496),
            ("mixtral-8x7b".to_owned(), 46_702_792_704),
            ("gin".to_owned(), 908_401),
        ]
    );
    let table = run_ok(&["workload", "list"]);
    assert!(
        table.contains("56,454,720") && table.contains("327.669"),
        "{table}"
    );
}

/// Golden snapshots of the stable JSON interface, one per built-in workload.
#[test]
fn show_json_golden_snapshots() {
    for name in ["cosmoflow", "cosmoflow-v07", "deepcam", "resnet50"] {
        let out = run_ok(&["workload", "show", name, "--format", "json"]);
        insta::assert_snapshot!(format!("show_{name}"), out);
    }
}

#[test]
fn show_json_has_documented_fields_and_consistent_totals() {
    let v = run_json(&[
        "workload", "show", "resnet50", "--batch", "8", "--format", "json",
    ]);
    for field in [
        "params",
        "flops_fwd",
        "flops_bwd",
        "flops_train",
        "hbm_bytes_train",
        "activation_bytes",
        "layers",
    ] {
        assert!(v.get(field).is_some(), "missing `{field}`");
    }
    let layers = v["layers"].as_array().unwrap();
    let sum = |f: &str| layers.iter().map(|l| l[f].as_f64().unwrap()).sum::<f64>();
    assert_eq!(sum("params") as u64, v["params"].as_u64().unwrap());
    let fwd = v["flops_fwd"].as_f64().unwrap();
    assert!((sum("flops_fwd") - fwd).abs() <= 1e-9 * fwd);
    let train = v["flops_train"].as_f64().unwrap();
    assert!((fwd + v["flops_bwd"].as_f64().unwrap() - train).abs() <= 1e-9 * train);
    // 8 samples of ResNet-50's 4.089 GMAC.
    assert_eq!(v["macs_fwd"].as_u64().unwrap(), 8 * 4_089_184_256);
    let conv1 = &layers[1];
    assert_eq!(conv1["name"], "conv1");
    assert_eq!(conv1["output_shape"], serde_json::json!([64, 112, 112]));
    assert_eq!(
        conv1["flops_bwd_data"].as_f64(),
        Some(0.0),
        "no data gradient for the stem"
    );
}

#[test]
fn show_table_and_csv_agree_with_json() {
    let table = run_ok(&["workload", "show", "cosmoflow"]);
    assert!(table.contains("8,907,556"), "{table}");
    assert!(table.contains("conv3d_4"), "{table}");
    let csv = run_ok(&["workload", "show", "cosmoflow", "--format", "csv"]);
    let mut lines = csv.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("name,op,output_shape,params,flops_fwd"),
        "{header}"
    );
    let conv = lines.find(|l| l.starts_with("conv3d,")).unwrap();
    // Raw numbers in base units: 2 x 7,247,757,312 MACs.
    assert!(conv.contains(",3488,14495514624,"), "{conv}");
}

#[test]
fn scaled_workload_changes_shapes_and_counts() {
    let v = run_json(&[
        "workload",
        "show",
        "deepcam",
        "--input-size",
        "384x576",
        "--width",
        "0.5",
        "--format",
        "json",
    ]);
    assert_eq!(v["input_shape"], serde_json::json!([16, 384, 576]));
    let last = v["layers"].as_array().unwrap().iter().rev().nth(1).unwrap();
    assert_eq!(last["name"], "upsample.last_deconv.0");
    assert_eq!(last["output_shape"], serde_json::json!([3, 384, 576]));
}

#[test]
fn export_then_load_gives_the_same_workload() {
    let dir = std::env::temp_dir().join(format!("ridgeline-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["cosmoflow", "deepcam", "resnet50"] {
        let path = dir.join(format!("{name}.toml"));
        let path = path.to_str().unwrap();
        run_ok(&["workload", "export", name, "--out", path]);
        let builtin = run_ok(&["workload", "show", name, "--batch", "3", "--format", "json"]);
        let loaded = run_ok(&["workload", "show", path, "--batch", "3", "--format", "json"]);
        assert_eq!(builtin, loaded, "{name}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hand_written_workload_file() {
    let v = run_json(&[
        "workload",
        "show",
        &fixture("tiny.toml"),
        "--format",
        "json",
    ]);
    assert_eq!(v["workload"], "tiny");
    // conv 3->8 3x3 with bias, batch norm over 8 channels, dense from 8x4x4 to 10.
    assert_eq!(
        v["params"].as_u64(),
        Some(8 * 3 * 9 + 8 + 2 * 8 + 8 * 16 * 10 + 10)
    );
}

#[test]
fn a_hugging_face_config_is_a_workload_and_bad_ones_exit_2() {
    let config = fixture("hf/gpt2.json");
    let v = run_json(&[
        "workload",
        "show",
        &config,
        "--seq-len",
        "128",
        "--format",
        "json",
    ]);
    // GPT-2 (124M) as Hugging Face counts it.
    assert_eq!(v["params"].as_u64(), Some(124_439_808));
    assert_eq!(v["input_shape"], serde_json::json!([128]));
    let dir = std::env::temp_dir().join(format!("ridgeline-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        crate::run_err(&["workload", "show", path.to_str().unwrap()])
    };
    let text = std::fs::read_to_string(&config).unwrap();
    let e = bad("t5.json", &text.replace("\"gpt2\"", "\"t5\""));
    assert!(e.contains("t5.json") && e.contains("model_type"), "{e}");
    let e = bad(
        "heads.json",
        &text.replace("\"n_head\": 12", "\"n_head\": 7"),
    );
    // Named by the key the file gives (GPT-2's `n_head`).
    assert!(e.contains("heads.json") && e.contains("`n_head`"), "{e}");
    let e = bad("cut.json", &text[..text.len() / 2]);
    assert!(e.contains("cut.json"), "{e}");
    let e = crate::run_err(&["workload", "show", &config, "--seq-len", "4096"]);
    assert!(e.contains("1024 positions"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn predict_times_a_transformer_by_the_transferred_model() {
    let v = run_json(&[
        "predict", "gpt3-xl", "--system", "dgx-h100", "--nodes", "64", "--batch", "1", "--format",
        "json",
    ]);
    // 512 sequences of 2048 tokens: the GPT-3 paper's batch, one pass of 300 billion tokens.
    assert_eq!(v["global_batch"].as_u64(), Some(512));
    assert_eq!(v["epochs"].as_f64(), Some(1.0));
    let by = &v["compute_timed_by"];
    assert!(by["transfer"].as_u64().unwrap() > 250, "{by}");
}

#[test]
fn predict_splits_a_transformer_over_tensor_pipeline_and_data() {
    let v = run_json(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "dgx-h100",
        "--nodes",
        "2",
        "--tensor-parallel",
        "4",
        "--pipeline-parallel",
        "2",
        "--micro-batches",
        "8",
        "--global-batch",
        "64",
        "--format",
        "json",
    ]);
    assert_eq!(v["split"]["data"].as_u64(), Some(2));
    assert_eq!(v["micro_batch"].as_u64(), Some(4));
    // 1F1B: each stage once, then the slowest for the other seven micro-batches; idle at
    // least the balanced bubble, (p - 1) / (m + p - 1).
    let stages = v["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2);
    let stage_s: Vec<f64> = stages
        .iter()
        .map(|s| {
            ["forward_s", "backward_s", "tensor_allreduce_s", "p2p_s"]
                .iter()
                .map(|k| s[*k].as_f64().unwrap())
                .sum()
        })
        .collect();
    let slowest = stage_s.iter().copied().fold(0.0, f64::max);
    let pipeline = v["pipeline_s"].as_f64().unwrap();
    assert!((pipeline - (stage_s.iter().sum::<f64>() + 7.0 * slowest)).abs() < 1e-9 * pipeline);
    assert!(v["bubble"].as_f64().unwrap() >= 1.0 / 9.0 - 1e-12);
    assert_eq!(stages[1]["layers"], serde_json::json!([16, 32]));
    let step = v["step_s"].as_f64().unwrap();
    // The stack (the default) overlaps the gradients' reduction with the backward pass:
    // only the excess shows.
    let exposed = v["data_exposed_s"].as_f64().unwrap();
    assert!(exposed <= v["data_allreduce_s"].as_f64().unwrap());
    let parts = v["pipeline_s"].as_f64().unwrap() + exposed + v["update_s"].as_f64().unwrap();
    assert!((step - parts).abs() < 1e-12 * step, "{step} vs {parts}");
    let e = crate::run_err(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--tensor-parallel",
        "3",
        "--batch",
        "1",
    ]);
    assert!(e.contains("replicas of 3"), "{e}");
    let e = crate::run_err(&[
        "predict",
        "resnet50",
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--tensor-parallel",
        "2",
        "--batch",
        "1",
    ]);
    assert!(e.contains("not a transformer"), "{e}");
    let e = crate::run_err(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--tensor-parallel",
        "8",
        "--global-batch",
        "3",
        "--micro-batches",
        "2",
    ]);
    assert!(e.contains("multiple of 2"), "{e}");
}

#[test]
fn workload_import_turns_an_onnx_model_into_a_layer_file_or_refuses_it_whole() {
    let dir = std::env::temp_dir().join(format!("ridgeline-onnx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("resnet50.toml");
    run_ok(&[
        "workload",
        "import",
        &fixture("onnx/light_resnet50.onnx"),
        "--out",
        out.to_str().unwrap(),
    ]);
    let v = run_json(&[
        "workload",
        "show",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(v["params"].as_u64(), Some(25_557_032));
    // An ONNX model is a workload as it is, too.
    let direct = run_json(&[
        "workload",
        "show",
        &fixture("onnx/light_resnet50.onnx"),
        "--format",
        "json",
    ]);
    assert_eq!(direct["flops_train"], v["flops_train"]);
    let refused = dir.join("alexnet.toml");
    let e = crate::run_err(&[
        "workload",
        "import",
        &fixture("onnx/light_bvlc_alexnet.onnx"),
        "--out",
        refused.to_str().unwrap(),
    ]);
    assert!(e.contains("LRN") && e.contains("node 18"), "{e}");
    assert!(!refused.exists(), "no partial file");
    std::fs::remove_dir_all(&dir).ok();
}

/// A transformer exported from Hugging Face (GPT-2, 64 tokens) imports as the built-in one
/// and round-trips through its layer file.
#[test]
fn workload_import_reads_a_transformer() {
    let dir = std::env::temp_dir().join(format!("ridgeline-onnx-gpt2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("gpt2.toml");
    run_ok(&[
        "workload",
        "import",
        &fixture("onnx/gpt2-seq64.onnx"),
        "--out",
        out.to_str().unwrap(),
    ]);
    let show = |w: &str, extra: &[&str]| {
        let mut args = vec!["workload", "show", w, "--format", "json"];
        args.extend_from_slice(extra);
        run_json(&args)
    };
    let imported = show(out.to_str().unwrap(), &[]);
    let builtin = show("gpt2", &["--seq-len", "64"]);
    assert_eq!(imported["params"].as_u64(), Some(124_439_808));
    assert_eq!(imported["params"], builtin["params"]);
    assert_eq!(imported["macs_fwd"], builtin["macs_fwd"]);
    // BERT-Large as an ONNX file is a workload as it is, too.
    let bert = show(&fixture("onnx/bert-large-seq64.onnx"), &[]);
    let builtin = show("bert-large", &["--seq-len", "64"]);
    assert_eq!(bert["params"].as_u64(), Some(336_226_108));
    assert_eq!(bert["macs_fwd"], builtin["macs_fwd"]);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn sweep_searches_the_splits_of_a_transformer() {
    let v = run_json(&[
        "sweep",
        "gpt2-large",
        "--systems",
        "dgx-h100",
        "--nodes",
        "1",
        "--batch",
        "4",
        "--tensor-parallel",
        "1,2,4",
        "--pipeline-parallel",
        "1,2",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    let top = v["top"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    // Fastest per sequence first.
    let rate = |i: usize| top[i]["sequences_per_s"].as_f64().unwrap();
    assert!(rate(0) >= rate(1) && rate(1) >= rate(2));
    assert!(v["feasible"].as_u64().unwrap() >= 3);
    let e = crate::run_err(&[
        "sweep",
        "resnet50",
        "--systems",
        "dgx-h100",
        "--nodes",
        "1",
        "--batch",
        "4",
        "--tensor-parallel",
        "2",
    ]);
    assert!(e.contains("not a transformer"), "{e}");
}
