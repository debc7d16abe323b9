use crate::{run_json, run_ok};

#[test]
fn list_has_every_catalog_system_and_device() {
    let v = run_json(&["system", "list", "--format", "json"]);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for name in [
        "cori-gpu",
        "perlmutter-gpu",
        "dgx-h100",
        "fugaku",
        "local",
        "v100-sxm2-16gb",
        "a100-sxm4-40gb",
        "a100-sxm4-80gb",
        "h100-sxm5-80gb",
        "h200-sxm-141gb",
        "mi250x",
        "a64fx",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
}

#[test]
fn show_gives_every_number_with_its_source() {
    let v = run_json(&["system", "show", "cori-gpu", "--format", "json"]);
    assert_eq!(v["node"]["devices"]["value"], 8);
    assert_eq!(
        v["device"]["memory_bandwidth"]["value"].as_f64(),
        Some(900e9)
    );
    let source = v["node"]["pcie"]["source"].as_str().unwrap();
    assert!(source.contains("[004]"), "{source}");
    let table = run_ok(&["system", "show", "dgx-h100"]);
    assert!(table.contains("device.peak.bf16_tensor") && table.contains("989.50 TFLOP/s"));
}

#[test]
fn show_accepts_a_system_file() {
    let path = crate::fixture("box.toml");
    let v = run_json(&["system", "show", &path, "--format", "json"]);
    assert_eq!(v["name"], "box");
    assert_eq!(v["device"]["name"], "a100-sxm4-80gb");
}

/// `local` describes whatever machine runs the test (issue 17): any Linux CPU, its peaks
/// from cores, vector units and clock, its reasoning under `assumed:` and in JSON.
#[test]
fn local_is_this_machine_whatever_its_cpu() {
    let v = run_json(&["system", "show", "local", "--format", "json"]);
    assert_eq!(v["name"], "local");
    assert_eq!(v["device"]["kind"], "cpu");
    assert!(v["node"]["host_memory"]["value"].as_f64().unwrap() > 0.0);
    let cores = v["device"]["cores"]["value"].as_u64().unwrap();
    assert!(cores >= 1);
    let fp32 = v["device"]["peak"]["fp32"]["value"].as_f64().unwrap();
    // Between 0.1 and 1000 GFLOP/s per core: any CPU of the last twenty years.
    assert!(
        (1e8 * cores as f64..1e12 * cores as f64).contains(&fp32),
        "{fp32}"
    );
    let assumptions = v["assumptions"].as_array().unwrap();
    assert!(
        assumptions
            .iter()
            .any(|a| a.as_str().unwrap().starts_with("`local` is this machine")),
        "{assumptions:?}"
    );
    let table = run_ok(&["system", "show", "local"]);
    assert!(
        table.contains("assumed: `local` is this machine"),
        "{table}"
    );
}

/// `predict` on `local` runs to the end on any CPU and carries the machine's reasoning
/// (issue 17, acceptance): a positive, finite step and the `assumed:` lines.
#[test]
fn predict_on_local_runs_whatever_the_cpu() {
    let args = [
        "predict", "resnet50", "--system", "local", "--nodes", "1", "--batch", "2", "--epochs",
        "40",
    ];
    let out = run_ok(&args);
    assert!(out.contains("assumed: `local` is this machine"), "{out}");
    // Never a table of blanks: either rows with known bandwidths or a sentence saying why not.
    assert!(out.contains("Data movement per sample"), "{out}");
    let mut json = args.to_vec();
    json.extend(["--format", "json"]);
    let v = run_json(&json);
    let step = v["step_time_s"].as_f64().unwrap();
    assert!(step.is_finite() && step > 0.0, "{step}");
}
