use crate::{run_json, run_ok};

#[test]
fn max_batch_is_where_the_rows_stop_fitting() {
    let v = run_json(&[
        "memory",
        "deepcam",
        "--system",
        "perlmutter-gpu",
        "--precision",
        "amp-fp16",
        "--format",
        "json",
    ]);
    let max = v["max_batch"].as_u64().unwrap();
    assert!(max >= 1, "DeepCAM fits an A100-40GB");
    assert_eq!(
        v["device_memory"]["value"].as_f64(),
        Some(40.0 * 1024f64.powi(3))
    );
    for row in v["rows"].as_array().unwrap() {
        let batch = row["batch"].as_u64().unwrap();
        assert_eq!(row["fits"].as_bool(), Some(batch <= max), "batch {batch}");
        let parts = [
            "parameters",
            "gradients",
            "optimizer_state",
            "buffers",
            "workspace",
            "input",
            "activations",
            "activation_gradients",
        ];
        let sum: f64 = parts.iter().map(|p| row[p].as_f64().unwrap()).sum();
        let total = row["total"].as_f64().unwrap();
        assert!((sum - total).abs() <= 1e-9 * total);
    }
}

#[test]
fn batch_range_and_step() {
    let v = run_json(&[
        "memory",
        "resnet50",
        "--system",
        "v100-sxm2-16gb",
        "--batch-range",
        "8..40",
        "--batch-step",
        "16",
        "--format",
        "json",
    ]);
    let batches: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["batch"].as_u64().unwrap())
        .collect();
    assert_eq!(batches, vec![8, 24, 40]);
    let v = run_json(&[
        "memory",
        "resnet50",
        "--system",
        "v100-sxm2-16gb",
        "--batch-range",
        "3..20",
        "--format",
        "json",
    ]);
    let batches: Vec<u64> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["batch"].as_u64().unwrap())
        .collect();
    assert_eq!(batches, vec![3, 6, 12, 20]);
}

#[test]
fn adam_needs_more_memory_than_sgd() {
    let fixed = |opt: &str| {
        run_json(&[
            "memory",
            "resnet50",
            "--system",
            "a100-sxm4-80gb",
            "--optimizer",
            opt,
            "--format",
            "json",
        ])["fixed_bytes"]
            .as_f64()
            .unwrap()
    };
    // Two FP32 moments per parameter.
    assert_eq!(fixed("adam") - fixed("sgd"), 8.0 * 25_557_032.0);
}

#[test]
fn table_names_the_device_and_largest_batch() {
    let table = run_ok(&["memory", "cosmoflow", "--system", "cori-gpu"]);
    assert!(
        table.contains("v100-sxm2-16gb") && table.contains("max batch"),
        "{table}"
    );
}
