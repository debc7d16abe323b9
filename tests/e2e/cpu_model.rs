//! The CPU kernel model (issue 47): `validate transfer --cpu`, and `predict` timing a CPU's
//! layers by it, as the stack's CPU kernels, never faster than the ideal bound.

use crate::faults::scratch;
use crate::{run_err, run_json, run_ok};

const COSMOFLOW: [&str; 14] = [
    "predict",
    "cosmoflow",
    "--nodes",
    "1",
    "--batch",
    "4",
    "--epochs",
    "1",
    "--train-samples",
    "1000",
    "--eval-samples",
    "10",
    "--format",
    "json",
];

fn predict(system: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = COSMOFLOW.to_vec();
    args.extend(["--system", system]);
    args.extend(extra);
    run_json(&args)
}

#[test]
fn validate_transfer_cpu_leaves_each_cpu_out_and_says_why_not_with_one() {
    let v = run_json(&["validate", "transfer", "--cpu", "--format", "json"]);
    let cpus = v["cpus"].as_object().unwrap();
    // ridgeline's own records of a machine, and DeepBench's Xeon Phi (--published's default).
    assert!(cpus.contains_key("xeon-phi-7250f"), "{cpus:?}");
    assert!(cpus.keys().any(|c| c.starts_with("cpu-")), "{cpus:?}");
    let fitted = v["fitted"].as_array().unwrap();
    for class in [
        "ridgeline gemm forward",
        "onednn conv-spatial backward-filter",
    ] {
        assert!(
            fitted.iter().any(|h| h["class"] == class),
            "{class} missing from {fitted:?}"
        );
    }
    let held = v["transfer"]["holdouts"].as_array().unwrap();
    for cpu in cpus.keys() {
        assert!(
            held.iter()
                .any(|h| h["device"] == cpu.as_str() && h["class"] == "onednn gemm forward"),
            "{cpu} not left out: {held:?}"
        );
    }
    // The Xeon Phi has no kernels of ridgeline's executor: the steps are the fit's own.
    let steps = v["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    assert!(
        steps.iter().all(|s| s["device"] == "fitted on"),
        "{steps:?}"
    );
    // Without the published set, one CPU: nothing is left out, and the output says why.
    let dir = scratch("cpu-model");
    let none = dir.join("no-such-set");
    let one = run_json(&[
        "validate",
        "transfer",
        "--cpu",
        "--published",
        none.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let why = one["not_left_out"].as_str().unwrap();
    assert!(why.contains("needs two"), "{why}");
    assert!(one["transfer"].is_null());
    // A published CPU set that does not say the threads its kernels ran on.
    let knl = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/evidence/kernels/deepbench-knl"
    );
    let bare = dir.join("knl-without-threads");
    std::fs::create_dir_all(&bare).unwrap();
    for f in ["gemm.csv.gz", "conv.csv.gz"] {
        std::fs::copy(format!("{knl}/{f}"), bare.join(f)).unwrap();
    }
    let source = std::fs::read_to_string(format!("{knl}/SOURCE.toml")).unwrap();
    let source: String = source
        .lines()
        .filter(|l| !l.starts_with("threads"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(bare.join("SOURCE.toml"), source).unwrap();
    let err = run_err(&[
        "validate",
        "transfer",
        "--cpu",
        "--published",
        bare.to_str().unwrap(),
    ]);
    assert!(
        err.contains("knl-without-threads")
            && err.contains("`threads` is missing")
            && err.contains("xeon-phi-7250f"),
        "{err}"
    );
    // --write-model writes the model the binary ships.
    let out = dir.join("cpu-transfer.toml");
    run_ok(&[
        "validate",
        "transfer",
        "--cpu",
        "--write-model",
        out.to_str().unwrap(),
    ]);
    let text = std::fs::read_to_string(&out).unwrap();
    let shipped = include_str!("../../data/evidence/kernels/cpu-transfer.toml");
    assert_eq!(text, shipped);
    // A directory without a CPU record set.
    let err = run_err(&[
        "validate",
        "transfer",
        "--cpu",
        "--ours",
        dir.to_str().unwrap(),
    ]);
    assert!(
        err.contains("no CPU record set") && err.contains("cpu-records.sh"),
        "{err}"
    );
}

#[test]
fn a_cpu_is_timed_by_the_cpu_model_as_its_stacks_kernels_never_below_the_ideal_bound() {
    for system in ["fugaku", "a64fx", "grace", "xeon-8480plus"] {
        // A device on its own has no host memory: a system file around it does.
        let system = if system == "fugaku" {
            system.to_owned()
        } else {
            let dir = scratch(&format!("cpu-system-{system}"));
            let path = dir.join("system.toml");
            std::fs::write(
                &path,
                format!(
                    "name = \"one\"\ndescription = \"one node\"\n[sources]\ns = \"a test\"\n\
                     [node]\ndevice = \"{system}\"\ndevices = {{ value = 1, source = \"s\" }}\n\
                     cpu = \"the device\"\nhost_memory_gib = {{ value = 256.0, source = \"s\" }}\n\
                     [cluster]\nnodes = {{ value = 1, source = \"s\" }}\nnetwork = \"none\"\n"
                ),
            )
            .unwrap();
            path.to_str().unwrap().to_owned()
        };
        let ideal = predict(&system, &["--efficiency", "ideal"]);
        let eager = predict(&system, &[]);
        let ours = predict(&system, &["--stack", "ridgeline-executor"]);
        for (p, whose) in [
            (&eager, "oneDNN's and MKL's kernels"),
            (&ours, "ridgeline's own kernels"),
        ] {
            let timed = &p["compute_timed_by"];
            assert!(
                timed["transfer"].as_u64().unwrap() > 10,
                "{system}: {timed}"
            );
            let said = p["assumptions"].to_string();
            assert!(
                said.contains("timed by the CPU kernel model") && said.contains(whose),
                "{system}: {said}"
            );
            let (t, bound) = (
                p["compute_s"].as_f64().unwrap(),
                ideal["compute_s"].as_f64().unwrap(),
            );
            assert!(t > bound, "{system}: {t} against the bound {bound}");
            for (a, b) in p["layers"]
                .as_array()
                .unwrap()
                .iter()
                .zip(ideal["layers"].as_array().unwrap())
            {
                assert!(
                    a["forward_s"].as_f64() >= b["forward_s"].as_f64(),
                    "{a} {b}"
                );
                assert!(
                    a["backward_s"].as_f64() >= b["backward_s"].as_f64(),
                    "{a} {b}"
                );
            }
        }
        assert_eq!(ideal["compute_timed_by"]["transfer"], 0);
        assert_ne!(eager["compute_s"], ours["compute_s"]);
    }
}
