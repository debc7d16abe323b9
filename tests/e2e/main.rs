//! End-to-end tests: drive the real `ridgeline` binary (assert_cmd) and check its output
//! against the reference figures, golden snapshots and invariants. Every bad-input class
//! of issue #2 is checked to exit with code 2 and a message naming what to fix.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod bad_input;
mod calibrate;
mod comm;
mod cpu_model;
mod docs;
mod faults;
mod faults43;
mod fuzz;
mod import;
mod layers;
mod measure;
mod memory;
mod models44;
mod predict;
mod report;
mod roofline;
mod slurm;
mod stack;
mod system;
mod workload;

use assert_cmd::Command;
use serde_json::Value;

/// A measurement protocol short enough for tests: no warm-up, no minimum time, three
/// samples.
const QUICK: [&str; 6] = ["--warmup", "0s", "--min-time", "0s", "--min-samples", "3"];

/// Every file under `dir`, in any folder below it.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// The `ridgeline` binary under test.
fn ridgeline() -> Command {
    assert_cmd::cargo::cargo_bin_cmd!("ridgeline")
}

/// Runs `args`, asserts success and returns standard output.
fn run_ok(args: &[&str]) -> String {
    let out = ridgeline().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "ridgeline {args:?} failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `args` and parses standard output as JSON.
fn run_json(args: &[&str]) -> Value {
    serde_json::from_str(&run_ok(args)).unwrap()
}

/// Runs `args`, asserts exit code 2 without a panic, and returns standard error.
fn run_err(args: &[&str]) -> String {
    let out = ridgeline().args(args).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "ridgeline {args:?}: {stderr}");
    assert!(
        !stderr.contains("panicked"),
        "ridgeline {args:?} panicked: {stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout when failing");
    stderr
}

/// Path of a test fixture.
fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// Imports the committed H100 PyTorch trace of ResNet-50 into the records file `out`, with
/// `extra` arguments; standard output.
fn import_h100_trace(out: &str, extra: &[&str]) -> String {
    let trace = fixture("torch/resnet50-h100.json.gz");
    let mut args = vec![
        "import",
        "torch-trace",
        &trace,
        "--workload",
        "resnet50",
        "--threads",
        "1",
        "--out",
        out,
    ];
    args.extend_from_slice(extra);
    run_ok(&args)
}
