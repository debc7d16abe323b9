//! Every class of bad input named in issue #2: a clear message naming the file, field or
//! layer and how to fix it; exit code 2; never a panic.

use std::path::PathBuf;

use crate::{fixture, run_err};

/// Writes `text` to a temporary file named `name` and returns its path.
fn temp_file(name: &str, text: &str) -> String {
    let dir: PathBuf = std::env::temp_dir().join(format!("ridgeline-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn tiny() -> String {
    std::fs::read_to_string(fixture("tiny.toml")).unwrap()
}

fn box_system() -> String {
    std::fs::read_to_string(fixture("box.toml")).unwrap()
}

#[test]
fn unknown_workload_lists_the_valid_ones() {
    let err = run_err(&["workload", "show", "bert"]);
    assert!(err.contains("unknown workload `bert`"), "{err}");
    assert!(
        err.contains("cosmoflow, cosmoflow-v07, deepcam, resnet50"),
        "{err}"
    );
}

#[test]
fn unknown_system_lists_the_valid_ones() {
    let err = run_err(&["memory", "resnet50", "--system", "summit"]);
    assert!(err.contains("unknown system `summit`"), "{err}");
    assert!(err.contains("cori-gpu") && err.contains("local") && err.contains("h100-sxm5-80gb"));
}

#[test]
fn malformed_workload_toml_names_file_line_and_field() {
    let path = temp_file(
        "syntax.toml",
        &tiny().replace("out_channels = 8", "out_channels = 8x"),
    );
    let err = run_err(&["workload", "show", &path]);
    assert!(
        err.contains("syntax.toml") && err.contains("line 8"),
        "{err}"
    );
    let path = temp_file(
        "type.toml",
        &tiny().replace("kernel = 3", "kernel = \"three\""),
    );
    let err = run_err(&["workload", "show", &path]);
    assert!(err.contains("type.toml") && err.contains("kernel"), "{err}");
    let path = temp_file(
        "unknown.toml",
        &tiny().replace("kernel = 3", "kernel = 3\nstrides = 2"),
    );
    let err = run_err(&["workload", "show", &path]);
    assert!(
        err.contains("unknown field `strides`") && err.contains("line 10"),
        "{err}"
    );
}

#[test]
fn malformed_system_toml_names_file_line_and_field() {
    let path = temp_file(
        "sys.toml",
        &box_system().replace("devices = {", "devices = {{"),
    );
    let err = run_err(&["system", "show", &path]);
    assert!(err.contains("sys.toml") && err.contains("line 10"), "{err}");
    let path = temp_file("sys2.toml", &box_system().replace("pcie_gbs", "pcie_gb"));
    let err = run_err(&["system", "show", &path]);
    assert!(err.contains("pcie_gb") && err.contains("line 12"), "{err}");
}

#[test]
fn batch_zero_is_refused() {
    let err = run_err(&["workload", "show", "resnet50", "--batch", "0"]);
    assert!(err.contains("--batch") && err.contains('0'), "{err}");
    let err = run_err(&[
        "roofline", "resnet50", "--system", "cori-gpu", "--batch", "0",
    ]);
    assert!(err.contains("--batch"), "{err}");
    let err = run_err(&[
        "memory",
        "resnet50",
        "--system",
        "cori-gpu",
        "--batch-range",
        "0..8",
    ]);
    assert!(err.contains("batch range"), "{err}");
}

#[test]
fn non_positive_bandwidth_or_peak_is_refused_naming_the_field() {
    let path = temp_file(
        "bw.toml",
        &box_system().replace("value = 31.5", "value = 0.0"),
    );
    let err = run_err(&["system", "show", &path]);
    assert!(
        err.contains("field `node.pcie_gbs.value`") && err.contains("greater than zero"),
        "{err}"
    );
    let device = std::fs::read_to_string(format!(
        "{}/data/catalog/systems/devices/v100-sxm2-16gb.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let path = temp_file(
        "peak.toml",
        &device.replace("value = 15.7", "value = -15.7"),
    );
    let err = run_err(&["roofline", "resnet50", "--system", &path, "--batch", "1"]);
    assert!(err.contains("field `peak.tflops_fp32.value`"), "{err}");
    let path = temp_file("hbm.toml", &device.replace("value = 900.0", "value = 0"));
    let err = run_err(&["system", "show", &path]);
    assert!(err.contains("memory.bandwidth_gbs"), "{err}");
}

#[test]
fn kernel_larger_than_padded_input_names_the_layer() {
    let path = temp_file(
        "kernel.toml",
        &tiny().replace("kernel = 3\npadding = \"same\"", "kernel = 9"),
    );
    let err = run_err(&["workload", "show", &path]);
    assert!(
        err.contains("layer `conv`") && err.contains("larger than its padded input"),
        "{err}"
    );
    let err = run_err(&["workload", "show", "cosmoflow", "--input-size", "16"]);
    assert!(
        err.contains("input-size") && err.contains("at least 32"),
        "{err}"
    );
}

#[test]
fn groups_that_do_not_divide_the_channels_name_the_layer() {
    let path = temp_file(
        "groups.toml",
        &tiny().replace("kernel = 3", "kernel = 3\ngroups = 2"),
    );
    let err = run_err(&["workload", "show", &path]);
    assert!(
        err.contains("layer `conv`") && err.contains("groups = 2 does not divide"),
        "{err}"
    );
}

#[test]
fn shapes_that_do_not_connect_name_the_layer() {
    let path = temp_file(
        "connect.toml",
        &tiny().replace("[\"relu\", \"conv\"]", "[\"relu\", \"input\"]"),
    );
    let err = run_err(&["workload", "show", &path]);
    assert!(
        err.contains("layer `skip`") && err.contains("do not connect"),
        "{err}"
    );
    let path = temp_file(
        "ref.toml",
        &tiny().replace("[\"relu\", \"conv\"]", "[\"relu\", \"cnv\"]"),
    );
    let err = run_err(&["workload", "show", &path]);
    assert!(err.contains("input `cnv` is not an earlier layer"), "{err}");
    let err = run_err(&["workload", "show", "deepcam", "--input-size", "100x200"]);
    assert!(err.contains("multiple of 16"), "{err}");
}

#[test]
fn other_bad_arguments() {
    let err = run_err(&["workload", "show", "/nonexistent/model.toml"]);
    assert!(
        err.contains("cannot read workload file `/nonexistent/model.toml`"),
        "{err}"
    );
    let err = run_err(&["workload", "show", &fixture("tiny.toml"), "--width", "2"]);
    assert!(
        err.contains("--width applies to built-in workloads only"),
        "{err}"
    );
    let err = run_err(&["workload", "show", "resnet50", "--width=-1"]);
    assert!(err.contains("width"), "{err}");
    let err = run_err(&["workload", "show", "resnet50", "--precision", "fp4"]);
    assert!(err.contains("fp32, tf32, amp-fp16, amp-bf16, fp8"), "{err}");
    let err = run_err(&[
        "roofline",
        "resnet50",
        "--system",
        "cori-gpu",
        "--batch",
        "8",
        "--precision",
        "amp-bf16",
    ]);
    assert!(
        err.contains("v100-sxm2-16gb") && err.contains("bf16"),
        "{err}"
    );
    let err = run_err(&["memory", "resnet50", "--system", "xeon-8480plus"]);
    assert!(err.contains("host_memory_gib"), "{err}");
    let err = run_err(&[
        "memory",
        "resnet50",
        "--system",
        "cori-gpu",
        "--batch-step",
        "4",
    ]);
    assert!(err.contains("--batch-range"), "{err}");
}
