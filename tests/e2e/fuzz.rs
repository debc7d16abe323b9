//! Issue 17: a fuzz test that keeps running in CI. Proptest mutates every kind of input
//! file (systems, workloads, records, profiles; issue 43: model configurations, MLPerf
//! logs, PyTorch traces, ONNX files) and the numbers on the command line (the parallel
//! flags among them), runs
//! the real binary on each mutant with a time limit, and holds three laws:
//!
//! - no panic, no hang (a run past its limit is killed and fails the test);
//! - the exit code is 0 (a result) or 2 (a clear error), nothing else;
//! - a result never holds a non-finite number, and its counts do not wrap (a global
//!   batch is the local batch times the devices, forward MACs are at most half the forward
//!   FLOPs, times are positive).
//!
//! Bounded: a fixed number of cases per input kind, each run at most [`LIMIT`].

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;

/// The longest one run may take before it counts as a hang (debug build, busy host).
const LIMIT: Duration = Duration::from_secs(60);

/// Cases per input kind (`RIDGELINE_FUZZ_CASES` overrides it for a longer campaign).
const CASES: u32 = 64;

fn config() -> ProptestConfig {
    let cases = std::env::var("RIDGELINE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES);
    ProptestConfig {
        cases,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// A scratch directory of this test process.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ridgeline-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One edit of a text file.
#[derive(Debug, Clone)]
enum Edit {
    /// The n-th number (modulo their count) becomes an extreme value.
    Number(usize, &'static str),
    /// The n-th line is removed.
    DeleteLine(usize),
    /// The n-th line appears twice.
    DuplicateLine(usize),
    /// Text is inserted at a fraction of the length.
    Insert(f64, String),
    /// The file ends at a fraction of its length.
    Truncate(f64),
}

/// Values that have broken parsers and models before.
const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "-3",
    "1e300",
    "1e-300",
    "4294967295",
    "4294967296",
    "18446744073709551615",
    "99999999999999999999",
    "nan",
    "inf",
    "-0",
    "0.0",
    "1e308",
    "65536",
    "2.5",
    "\"x\"",
];

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        4 => (any::<usize>(), prop::sample::select(EXTREMES)).prop_map(|(n, v)| Edit::Number(n, v)),
        1 => any::<usize>().prop_map(Edit::DeleteLine),
        1 => any::<usize>().prop_map(Edit::DuplicateLine),
        1 => (0.0..1.0f64, "[ -~\n]{0,12}").prop_map(|(at, s)| Edit::Insert(at, s)),
        1 => (0.0..1.0f64).prop_map(Edit::Truncate),
    ]
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    prop::collection::vec(edit(), 1..4)
}

/// `text` with `edits` applied.
fn mutate(text: &str, edits: &[Edit]) -> String {
    let mut text = text.to_owned();
    for e in edits {
        match e {
            Edit::Number(n, v) => {
                let spans = numbers(&text);
                if !spans.is_empty() {
                    let (a, b) = spans[n % spans.len()];
                    text.replace_range(a..b, v);
                }
            }
            Edit::DeleteLine(n) | Edit::DuplicateLine(n) => {
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let i = n % lines.len();
                    if matches!(e, Edit::DeleteLine(_)) {
                        lines.remove(i);
                    } else {
                        lines.insert(i, lines[i]);
                    }
                }
                text = lines.join("\n") + "\n";
            }
            Edit::Insert(at, s) => {
                let i = floor_char(&text, (*at * text.len() as f64) as usize);
                text.insert_str(i, s);
            }
            Edit::Truncate(at) => {
                let i = floor_char(&text, (*at * text.len() as f64) as usize);
                text.truncate(i);
            }
        }
    }
    text
}

fn floor_char(text: &str, mut i: usize) -> usize {
    i = i.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Byte spans of the numbers in `text` (digits, with a sign, point and exponent).
fn numbers(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit()
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            let start = if i > 0 && b[i - 1] == b'-' { i - 1 } else { i };
            let mut j = i;
            while j < b.len()
                && (b[j].is_ascii_digit() || matches!(b[j], b'.' | b'e' | b'E' | b'_'))
            {
                j += 1;
            }
            spans.push((start, j));
            i = j;
        } else {
            i += 1;
        }
    }
    spans
}

/// Runs the binary and holds the laws; returns standard output of a success.
fn run(args: &[&str]) -> Result<Option<String>, TestCaseError> {
    let out = crate::ridgeline()
        .args(args)
        .timeout(LIMIT)
        .output()
        .map_err(|e| TestCaseError::fail(format!("{args:?}: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code();
    prop_assert!(
        code.is_some(),
        "{args:?}: killed after {LIMIT:?} (a hang): {stderr}"
    );
    prop_assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    prop_assert!(
        matches!(code, Some(0 | 2)),
        "{args:?}: exit {code:?}: {stderr}"
    );
    if code == Some(2) {
        prop_assert!(
            stderr.lines().any(|l| l.starts_with("error: ")),
            "{args:?}: {stderr}"
        );
        return Ok(None);
    }
    let stdout = String::from_utf8(out.stdout)
        .map_err(|e| TestCaseError::fail(format!("{args:?}: stdout: {e}")))?;
    // A non-finite number prints as a CSV cell of its own (`inf`, `NaN`); free text that
    // merely contains the word does not count.
    let bad = stdout
        .lines()
        .flat_map(|l| l.split(','))
        .find(|cell| matches!(cell.trim(), "inf" | "-inf" | "NaN" | "-NaN"));
    prop_assert!(
        bad.is_none(),
        "{args:?}: `{bad:?}` in the result:\n{stdout}"
    );
    Ok(Some(stdout))
}

/// A JSON result whose numbers are all finite (serde writes a non-finite float as null,
/// so the fields that must be numbers are checked to be numbers).
fn json(stdout: &str, numeric: &[&str]) -> Result<Value, TestCaseError> {
    let v: Value = serde_json::from_str(stdout)
        .map_err(|e| TestCaseError::fail(format!("not JSON: {e}\n{stdout}")))?;
    for key in numeric {
        let x = v[*key].as_f64();
        prop_assert!(
            x.is_some_and(f64::is_finite),
            "`{key}` is {} in {stdout}",
            v[*key]
        );
    }
    Ok(v)
}

fn write(name: &str, text: &str) -> String {
    let path = scratch().join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

fn catalog(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// The laws of a prediction: finite figures and no wrapped counts.
fn check_prediction(stdout: &str) -> Result<(), TestCaseError> {
    let v = json(
        stdout,
        &[
            "step_time_s",
            "time_to_solution_s",
            "epoch_time_s",
            "staging_s",
            "samples_per_s",
            "epochs",
            "achieved_flops",
            "memory_per_device_bytes",
        ],
    )?;
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    prop_assert_eq!(
        n("global_batch"),
        n("local_batch") * n("devices"),
        "{}",
        stdout
    );
    prop_assert!(v["step_time_s"].as_f64().unwrap() > 0.0, "{}", stdout);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_system_files_never_panic_hang_or_print_nonsense(
        base in prop::sample::select(vec![
            "data/catalog/systems/dgx-h100.toml",
            "data/catalog/systems/cori-gpu.toml",
            "data/catalog/systems/perlmutter-gpu.toml",
            "data/catalog/systems/devices/a100-sxm4-40gb.toml",
            "tests/fixtures/box.toml",
        ]),
        edits in edits(),
    ) {
        let path = write("system.toml", &mutate(&catalog(base), &edits));
        if let Some(out) = run(&[
            "predict", "resnet50", "--system", &path, "--nodes", "2", "--batch", "8",
            "--epochs", "10", "--data-location", "pfs", "--format", "json",
        ])? {
            check_prediction(&out)?;
        }
        run(&["memory", "deepcam", "--system", &path, "--format", "csv"])?;
        run(&["system", "show", &path, "--format", "csv"])?;
        run(&[
            "scale", "resnet50", "--system", &path, "--mode", "weak", "--batch", "64",
            "--nodes", "1..8:x2", "--epochs", "40", "--format", "csv",
        ])?;
        run(&[
            "sweep", "resnet50", "--systems", &format!("{path},dgx-a100"), "--nodes", "1..64:x2",
            "--batch", "8..256:x2", "--epochs", "40", "--format", "csv",
        ])?;
    }

    #[test]
    fn mutated_data_set_files_never_panic_hang_or_print_nonsense(
        base in prop::sample::select(vec![
            "data/catalog/workloads/cosmoflow.toml",
            "data/catalog/workloads/cosmoflow-v07.toml",
            "data/catalog/workloads/deepcam.toml",
        ]),
        edits in edits(),
    ) {
        let path = write("data.toml", &mutate(&catalog(base), &edits));
        if let Some(out) = run(&[
            "predict", "cosmoflow", "--system", "perlmutter-gpu", "--nodes", "64", "--batch", "2",
            "--dataset", &path, "--convergence", &path, "--format", "json",
        ])? {
            check_prediction(&out)?;
        }
    }

    #[test]
    fn mutated_workload_files_never_panic_hang_or_print_nonsense(edits in edits()) {
        let path = write("workload.toml", &mutate(&catalog("tests/fixtures/tiny.toml"), &edits));
        if let Some(out) = run(&["workload", "show", &path, "--batch", "65536", "--format", "json"])? {
            let v = json(&out, &["flops_fwd", "flops_bwd", "hbm_bytes_fwd", "activation_bytes"])?;
            let macs = v["macs_fwd"].to_string().parse::<f64>().unwrap_or(f64::NAN);
            let flops = v["flops_fwd"].as_f64().unwrap();
            prop_assert!(2.0 * macs <= flops * (1.0 + 1e-9), "MACs {} wrapped? {}", macs, out);
        }
        run(&["roofline", &path, "--system", "h100-sxm5-80gb", "--batch", "4", "--format", "csv"])?;
    }

    #[test]
    fn mutated_records_never_panic_hang_or_print_nonsense(edits in edits()) {
        let (gemm, _) = measured();
        let records = write("records.jsonl", &mutate(gemm, &edits));
        let profile = scratch().join("fuzz-profile.toml");
        run(&["calibrate", &records, "--threads", "1", "--out", profile.to_str().unwrap(),
            "--format", "json"])?;
    }

    #[test]
    fn mutated_profiles_never_panic_hang_or_print_nonsense(edits in edits()) {
        let (_, profile) = measured();
        let path = write("profile.toml", &mutate(profile, &edits));
        if let Some(out) = run(&[
            "predict", "resnet50", "--system", &path, "--nodes", "1", "--batch", "4",
            "--epochs", "1", "--format", "json",
        ])? {
            check_prediction(&out)?;
        }
    }

    #[test]
    fn extreme_numbers_on_the_command_line_never_panic_hang_or_print_nonsense(
        flag in prop::sample::select(vec![
            "--nodes", "--batch", "--epochs", "--compute-efficiency", "--memory-efficiency",
            "--preprocess-rate", "--compression", "--train-samples", "--eval-samples",
        ]),
        value in prop::sample::select(EXTREMES),
    ) {
        let mut args = vec![
            "predict", "cosmoflow", "--system", "dgx-h100", "--format", "json",
        ];
        for (f, v) in [("--nodes", "4"), ("--batch", "2"), ("--epochs", "20")] {
            if f != flag {
                args.extend([f, v]);
            }
        }
        args.extend([flag, value]);
        if let Some(out) = run(&args)? {
            check_prediction(&out)?;
        }
    }
}

// Issue 43: the input classes added last wave (configuration files, MLPerf logs, PyTorch
// traces, ONNX files, the parallel flags).
proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_model_configurations_never_panic_hang_or_print_nonsense(
        base in prop::sample::select(vec![
            ("tests/fixtures/hf/gpt2.json", "config.json"),
            ("tests/fixtures/hf/gpt3-175b.json", "config.json"),
            ("tests/fixtures/hf/bert-base-sst2.json", "config.json"),
            ("tests/fixtures/hf/mistral-7b.json", "config.json"),
            ("tests/fixtures/hf/qwen2-7b.json", "config.json"),
            ("tests/fixtures/hf/mixtral-8x7b.json", "config.json"),
            ("data/catalog/transformers/bert-large.config.toml", "config.toml"),
            ("data/catalog/transformers/mixtral-8x7b.config.toml", "config.toml"),
            ("data/catalog/transformers/llama3-8b.config.toml", "config.toml"),
            ("data/catalog/transformers/opt-1.3b.config.toml", "config.toml"),
        ]),
        edits in edits(),
    ) {
        let path = write(base.1, &mutate(&catalog(base.0), &edits));
        if let Some(out) = run(&["workload", "show", &path, "--format", "json"])? {
            let v = json(&out, &["flops_fwd", "activation_bytes"])?;
            let params = v["params"].as_u64();
            prop_assert!(params.is_some_and(|p| p > 0 && p < 1 << 50), "params wrapped? {}", out);
        }
        if let Some(out) = run(&[
            "predict", &path, "--system", "dgx-h100", "--nodes", "2", "--batch", "8",
            "--tensor-parallel", "2", "--pipeline-parallel", "2", "--epochs", "1",
            "--train-samples", "1000", "--format", "json",
        ])? {
            let v = json(&out, &["step_s", "eval_step_s", "memory_per_device_bytes"])?;
            prop_assert!(v["step_s"].as_f64().unwrap() > 0.0, "{}", out);
        }
    }

    #[test]
    fn mutated_mlperf_logs_never_panic_hang_or_print_nonsense(edits in edits()) {
        let log = mutate(
            &catalog("tests/fixtures/mlperf/NVIDIA/results/eos_ngc23.09_mxnet/resnet/result_0.txt"),
            &edits,
        );
        let path = write("result_0.txt", &log);
        let runs = scratch().join("runs.jsonl");
        let _ = std::fs::remove_file(&runs);
        if let Some(out) = run(&["import", "mlperf", &path, "--format", "json"])? {
            let v: Value = serde_json::from_str(&out)
                .map_err(|e| TestCaseError::fail(format!("not JSON: {e}\n{out}")))?;
            for r in v.as_array().into_iter().flatten() {
                let t = r["time_to_train_s"].as_f64().unwrap_or(f64::NAN);
                prop_assert!(t.is_finite() && (0.0..1e9).contains(&t), "{}", out);
                if let Some(i) = r["init_s"].as_f64() {
                    prop_assert!((0.0..1e9).contains(&i), "init {} in {}", i, out);
                }
                if let Some(x) = r["throughput"].as_f64() {
                    prop_assert!(x.is_finite() && x > 0.0, "{}", out);
                }
                prop_assert!(r["nodes"].as_u64().is_some_and(|n| n >= 1), "{}", out);
                prop_assert!(r["global_batch"].as_u64().is_some_and(|n| (1..=1 << 53).contains(&n)));
            }
            let r = runs.to_str().unwrap();
            if run(&["import", "mlperf", &path, "--out", r])?.is_some() {
                run(&[
                    "validate", "--measured", r, "--system", "dgx-h100", "--precision",
                    "amp-fp16", "--format", "json",
                ])?;
            }
        }
    }

    #[test]
    fn mutated_torch_traces_never_panic_hang_or_print_nonsense(edits in edits()) {
        let path = write("trace.json", &mutate(cpu_trace(), &edits));
        let out = scratch().join("trace-records.jsonl");
        let _ = std::fs::remove_file(&out);
        run(&[
            "import", "torch-trace", &path, "--workload", "resnet50", "--threads", "1", "--out",
            out.to_str().unwrap(), "--format", "json",
        ])?;
    }

    #[test]
    fn mutated_onnx_files_never_panic_hang_or_print_nonsense(
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6),
    ) {
        let mut bytes = std::fs::read(format!(
            "{}/tests/fixtures/onnx/light_squeezenet.onnx",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        for (at, b) in flips {
            let i = at % bytes.len();
            bytes[i] = b;
        }
        let path = scratch().join("model.onnx");
        std::fs::write(&path, &bytes).unwrap();
        if let Some(out) = run(&["workload", "show", path.to_str().unwrap(), "--format", "json"])? {
            json(&out, &["flops_fwd", "activation_bytes"])?;
        }
    }

    #[test]
    fn extreme_parallel_flags_never_panic_hang_or_print_nonsense(
        flag in prop::sample::select(vec![
            "--tensor-parallel", "--pipeline-parallel", "--micro-batches", "--virtual-stages",
            "--global-batch", "--nodes", "--expert-parallel",
        ]),
        value in prop::sample::select(EXTREMES),
    ) {
        let mut args = vec![
            "predict", "gpt3-xl", "--system", "dgx-h100", "--stack", "tuned", "--epochs", "1",
            "--train-samples", "100000", "--format", "json",
        ];
        for (f, v) in [
            ("--nodes", "4"),
            ("--tensor-parallel", "2"),
            ("--pipeline-parallel", "2"),
            ("--global-batch", "64"),
        ] {
            if f != flag {
                args.extend([f, v]);
            }
        }
        args.extend([flag, value]);
        if let Some(out) = run(&args)? {
            let v = json(&out, &["step_s", "eval_step_s", "time_to_solution_s"])?;
            prop_assert!(v["step_s"].as_f64().unwrap() > 0.0, "{}", out);
        }
        let mut sweep = vec![
            "sweep", "gpt3-xl", "--systems", "dgx-h100", "--nodes", "1,2", "--batch", "8",
            "--epochs", "1", "--format", "json",
        ];
        let v = if flag == "--global-batch" || flag == "--nodes" { "2" } else { value };
        sweep.extend([
            if flag == "--global-batch" || flag == "--nodes" { "--tensor-parallel" } else { flag },
            v,
        ]);
        run(&sweep)?;
    }
}

/// The CPU trace of ResNet-50 (`tests/fixtures/torch/`), decompressed once.
fn cpu_trace() -> &'static str {
    static TRACE: OnceLock<String> = OnceLock::new();
    TRACE.get_or_init(|| {
        let file = std::fs::File::open(format!(
            "{}/tests/fixtures/torch/resnet50-cpu.json.gz",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(file), &mut text).unwrap();
        text
    })
}

/// GEMM records measured once for every case, and a profile calibrated from them.
fn measured() -> (&'static str, &'static str) {
    static MEASURED: OnceLock<(String, String)> = OnceLock::new();
    let (records, profile) = MEASURED.get_or_init(|| {
        let dir = scratch();
        let records = dir.join("gemm.jsonl");
        let _ = std::fs::remove_file(&records);
        let r = records.to_str().unwrap();
        crate::run_ok(&[
            "measure",
            "gemm",
            "--size",
            "32,48,64,96,128",
            "--threads",
            "1",
            "--warmup",
            "0s",
            "--min-time",
            "0s",
            "--min-samples",
            "3",
            "--out",
            r,
        ]);
        let profile = dir.join("profile.toml");
        crate::run_ok(&["calibrate", r, "--out", profile.to_str().unwrap()]);
        (
            std::fs::read_to_string(records).unwrap(),
            std::fs::read_to_string(profile).unwrap(),
        )
    });
    (records, profile)
}
