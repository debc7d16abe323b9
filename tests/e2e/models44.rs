//! Issue 44: the models people train today. Llama's families from their `config.json`
//! (RMS norms, SwiGLU, rotary embeddings, grouped-query attention, an untied head) and the
//! built-in Llama 3 8B and 70B, through `workload show`, `memory` and a split `predict`.

use crate::{fixture, run_err, run_json};

/// Each published configuration is a workload with Hugging Face's parameter count; a
/// grouped-query configuration whose key and value heads do not divide its heads exits 2
/// naming the file and the field.
#[test]
fn llama_mistral_and_qwen2_configs_are_workloads() {
    for (file, params) in [
        ("hf/llama-2-7b.json", 6_738_415_616u64),
        ("hf/mistral-7b.json", 7_241_732_096),
        ("hf/qwen2-7b.json", 7_615_616_512),
    ] {
        let v = run_json(&[
            "workload",
            "show",
            &fixture(file),
            "--seq-len",
            "256",
            "--format",
            "json",
        ]);
        assert_eq!(v["params"].as_u64(), Some(params), "{file}");
    }
    let text = std::fs::read_to_string(fixture("hf/mistral-7b.json")).unwrap();
    let dir = std::env::temp_dir().join(format!("ridgeline-llama-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("kv.json");
    std::fs::write(
        &bad,
        text.replace("\"num_key_value_heads\": 8", "\"num_key_value_heads\": 5"),
    )
    .unwrap();
    let e = run_err(&["workload", "show", bad.to_str().unwrap()]);
    assert!(
        e.contains("kv.json") && e.contains("num_key_value_heads"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Llama 3 70B split 8 x 4 over 32 DGX H100 nodes (data-parallel 8) under Megatron-LM with
/// Transformer Engine, one sequence a micro-batch: a step time and memory that fits (under
/// eager PyTorch's unfused attention it does not); the built-in's parameters are Hugging
/// Face's.
#[test]
fn llama3_70b_splits_over_dgx_h100() {
    // Llama 3 70B split 8 x 4 over 32 DGX H100 nodes, 64 sequences a data-parallel rank.
    let split = |extra: &[&'static str]| {
        let mut args = vec![
            "predict",
            "llama3-70b",
            "--system",
            "dgx-h100",
            "--nodes",
            "32",
            "--tensor-parallel",
            "8",
            "--pipeline-parallel",
            "4",
            "--batch",
            "64",
            "--precision",
            "amp-bf16",
        ];
        args.extend_from_slice(extra);
        args
    };
    let v = run_json(&split(&[
        "--stack",
        "megatron-te",
        "--micro-batches",
        "64",
        "--format",
        "json",
    ]));
    let step = v["step_s"].as_f64().unwrap();
    assert!(step > 0.0 && step.is_finite(), "{v}");
    // Fused attention, sequence parallelism and the distributed optimizer: it fits.
    let memory = v["memory_per_device_bytes"].as_f64().unwrap();
    assert!(memory > 0.0 && memory < 80.0 * f64::from(1u32 << 30), "{v}");
    // The same step with eager attention's score matrices at 8192 tokens does not.
    let e = run_err(&split(&[]));
    assert!(e.contains("one device needs"), "{e}");
    let w = run_json(&["workload", "show", "llama3-70b", "--format", "json"]);
    assert_eq!(w["params"].as_u64(), Some(70_553_706_496));
}
