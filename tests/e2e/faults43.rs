//! Issue 43: the faults found by using ridgeline on published training runs and by a fuzz
//! campaign. Each test fails without its fix.

use std::path::PathBuf;

use crate::{fixture, ridgeline, run_err, run_json, run_ok};

/// A scratch directory of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("ridgeline-faults43-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `text` to `name` in a scratch directory and returns the path.
fn write(name: &str, text: &str) -> String {
    let path = scratch("files").join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A shipped data file's text, by repository path.
fn data(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// `predict` of GPT-3 2.7B split 4 x 2 over 4 Perlmutter nodes, with `extra` flags, as JSON.
fn split_json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "predict",
        "gpt3-2.7b",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "4",
        "--tensor-parallel",
        "4",
        "--pipeline-parallel",
        "2",
        "--batch",
        "4",
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    run_json(&args)
}

/// Item 6: the split path takes `--epochs`, `--train-samples` and `--eval-samples` as the
/// data-parallel path does, and its JSON has the time to solution.
#[test]
fn issue43_6_the_split_path_takes_the_epochs_and_the_samples() {
    let base = split_json(&["--epochs", "2", "--train-samples", "100000"]);
    let step = base["step_s"].as_f64().unwrap();
    let eval_step = base["eval_step_s"].as_f64().unwrap();
    assert!(eval_step > 0.0 && eval_step < step, "{base}");
    // 100,000 sequences at 8 a step: 12,500 steps an epoch, no evaluation.
    assert_eq!(base["steps_per_epoch"], 12_500);
    assert_eq!(base["eval_time_s"].as_f64(), Some(0.0));
    let tts = base["time_to_solution_s"].as_f64().unwrap();
    assert!((tts / (2.0 * 12_500.0 * step) - 1.0).abs() < 1e-9, "{base}");
    let more = split_json(&["--epochs", "3", "--train-samples", "100000"]);
    assert!((more["time_to_solution_s"].as_f64().unwrap() / tts - 1.5).abs() < 1e-9);
    let fewer = split_json(&["--epochs", "2", "--train-samples", "50000"]);
    assert_eq!(fewer["steps_per_epoch"], 6_250);
    // Evaluation: 50,000 sequences are 6,250 forward-only steps an epoch.
    let eval = split_json(&[
        "--epochs",
        "2",
        "--train-samples",
        "100000",
        "--eval-samples",
        "50000",
    ]);
    let e = eval["eval_time_s"].as_f64().unwrap();
    assert!((e / (6_250.0 * eval_step) - 1.0).abs() < 1e-9, "{eval}");
    assert!((eval["time_to_solution_s"].as_f64().unwrap() - tts - 2.0 * e).abs() < 1e-6 * tts);
}

/// Item 6: a split that does not fit exits 2, as the data-parallel path does.
#[test]
fn issue43_6_a_split_that_does_not_fit_exits_2() {
    let e = run_err(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "perlmutter-gpu",
        "--nodes",
        "4",
        "--tensor-parallel",
        "2",
        "--pipeline-parallel",
        "2",
        "--batch",
        "8",
    ]);
    assert!(
        e.contains("one device needs") && e.contains("40.00 GiB"),
        "{e}"
    );
}

/// Items 7 and 21: the split path's messages name the flags as given, not the global
/// batch derived from them.
#[test]
fn issue43_7_split_messages_name_the_flags_given() {
    // Tensor parallelism over whole nodes is modelled (its collectives over the network).
    let out = run_ok(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "dgx-h100",
        "--nodes",
        "4",
        "--tensor-parallel",
        "16",
        "--batch",
        "4",
        "--epochs",
        "1",
        "--train-samples",
        "1000",
    ]);
    assert!(out.contains("tensor parallelism across 2 nodes"), "{out}");
    let e = run_err(&[
        "predict",
        "gpt2",
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--tensor-parallel",
        "8",
        "--batch",
        "4",
    ]);
    assert!(e.contains("tensor-parallel = 8"), "{e}");
    let e = run_err(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "dgx-h100",
        "--nodes",
        "4",
        "--pipeline-parallel",
        "2",
        "--micro-batches",
        "3",
        "--batch",
        "4",
    ]);
    assert!(
        e.contains("--batch 4") && e.contains("3 micro-batches") && !e.contains("= 64"),
        "{e}"
    );
    let e = run_err(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--pipeline-parallel",
        "2",
        "--batch",
        "3",
    ]);
    assert!(
        e.contains("--batch 3") && e.contains("--pipeline-parallel 2"),
        "{e}"
    );
}

/// Item 8: a GPU device file without a figure the transferred model needs is timed at the
/// ideal bound, and says so on stderr every time, naming the file and the field.
#[test]
fn issue43_8_a_device_file_the_transferred_model_cannot_time_warns() {
    let full = data("data/systems/devices/h200-sxm-141gb.toml");
    let lacking = full
        .lines()
        .filter(|l| !l.starts_with("boost_clock_mhz"))
        .collect::<Vec<_>>()
        .join("\n");
    let file = write("h200-no-clock.toml", &lacking);
    let runs: [&[&str]; 2] = [
        &[
            "predict",
            "gpt2",
            "--nodes",
            "1",
            "--batch",
            "4",
            "--pipeline-parallel",
            "1",
            "--system",
        ],
        &["system", "show"],
    ];
    for args in runs {
        let cmd = args[0];
        let out = ridgeline().args(args).arg(&file).output().unwrap();
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("warning:")
                && stderr.contains("h200-no-clock.toml")
                && stderr.contains("compute.boost_clock_mhz"),
            "{cmd}: {stderr}"
        );
    }
    // The complete file: no warning.
    let file = write("h200.toml", &full);
    let out = ridgeline()
        .args([
            "predict",
            "gpt2",
            "--nodes",
            "1",
            "--batch",
            "4",
            "--pipeline-parallel",
            "1",
            "--system",
            &file,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("warning"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = fixture;
}
