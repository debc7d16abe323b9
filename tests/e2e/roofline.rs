use crate::{run_json, run_ok};

#[test]
fn step_time_is_the_sum_of_layer_times_and_bounds_are_labelled() {
    let v = run_json(&[
        "roofline",
        "cosmoflow",
        "--system",
        "cori-gpu",
        "--batch",
        "8",
        "--format",
        "json",
    ]);
    let layers = v["layers"].as_array().unwrap();
    let sum: f64 = layers.iter().map(|l| l["time"].as_f64().unwrap()).sum();
    let step = v["step_time"].as_f64().unwrap();
    assert!((sum - step).abs() <= 1e-9 * step);
    assert!(v["fraction_of_peak"].as_f64().unwrap() <= 1.0);
    let bound = |name: &str| {
        layers.iter().find(|l| l["name"] == name).unwrap()["bound"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(bound("conv3d_2"), "compute");
    assert_eq!(bound("leaky_re_lu_0"), "memory");
    // V100: 15.7 TFLOP/s FP32 over 900 GB/s.
    let balance = v["machine_balance"].as_f64().unwrap();
    assert!((balance - 15.7e12 / 900e9).abs() < 1e-9, "{balance}");
}

#[test]
fn tensor_cores_make_mixed_precision_faster() {
    let time = |p: &str| {
        run_json(&[
            "roofline",
            "resnet50",
            "--system",
            "h100-sxm5-80gb",
            "--batch",
            "64",
            "--precision",
            p,
            "--format",
            "json",
        ])["step_time"]
            .as_f64()
            .unwrap()
    };
    assert!(time("amp-bf16") < time("tf32"));
    assert!(time("tf32") < time("fp32"));
}

#[test]
fn table_shows_peaks_and_step_time() {
    let table = run_ok(&["roofline", "resnet50", "--system", "a64fx", "--batch", "4"]);
    assert!(
        table.contains("machine balance") && table.contains("step time"),
        "{table}"
    );
}
