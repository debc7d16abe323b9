//! Issue 44: the models people train today. Llama's families from their `config.json`
//! (RMS norms, SwiGLU, rotary embeddings, grouped-query attention, an untied head) and the
//! built-in Llama 3 8B and 70B, through `workload show`, `memory` and a split `predict`; and
//! mixtures of experts (Mixtral 8x7B, the `moe` op) with expert parallelism.

use crate::{fixture, run_err, run_json, run_ok};

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

/// A mixture of experts in a workload file: a tiny decoder whose feed-forward network is
/// four gated experts, two a token.
const TINY_MOE: &str = r#"name = "tiny-moe"
input = [16]

[[layer]]
name = "embed"
op = "embedding"
num_embeddings = 50
embedding_dim = 32

[[layer]]
name = "norm"
op = "rms-norm"

[[layer]]
name = "experts"
op = "moe"
experts = 4
top_k = 2
ffn = 48

[[layer]]
name = "head"
op = "linear"
out_features = 50
bias = false

[[layer]]
name = "loss"
op = "softmax-cross-entropy"
"#;

/// Mixtral 8x7B from its `config.json` and built in: Hugging Face's parameters; a
/// configuration routing a token to more experts than there are, or outputting the router's
/// logits (an auxiliary loss ridgeline does not build), exits 2 naming the file and field.
#[test]
fn mixtral_config_is_a_workload() {
    let v = run_json(&[
        "workload",
        "show",
        &fixture("hf/mixtral-8x7b.json"),
        "--seq-len",
        "256",
        "--format",
        "json",
    ]);
    assert_eq!(v["params"].as_u64(), Some(46_702_792_704));
    let w = run_json(&["workload", "show", "mixtral-8x7b", "--format", "json"]);
    assert_eq!(w["params"].as_u64(), Some(46_702_792_704));
    let text = std::fs::read_to_string(fixture("hf/mixtral-8x7b.json")).unwrap();
    let dir = std::env::temp_dir().join(format!("ridgeline-mixtral-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (from, to, field) in [
        (
            "\"num_experts_per_tok\": 2",
            "\"num_experts_per_tok\": 9",
            "num_experts_per_tok",
        ),
        (
            "\"output_router_logits\": false",
            "\"output_router_logits\": true",
            "output_router_logits",
        ),
    ] {
        let bad = dir.join(format!("{field}.json"));
        std::fs::write(&bad, text.replace(from, to)).unwrap();
        let e = run_err(&["workload", "show", bad.to_str().unwrap()]);
        assert!(
            e.contains(&format!("{field}.json")) && e.contains(field),
            "{e}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Mixtral 8x7B over 16 DGX H100s with its experts over eight data-parallel replicas: the
/// stage's all-to-alls, one expert of each layer a device (without expert parallelism it
/// does not fit), a simulated timeline with the all-to-alls in it; expert parallelism that does not divide the experts, or on a
/// dense model, exits 2 naming the flag.
#[test]
fn mixtral_splits_its_experts_over_data_parallel_replicas() {
    let dir = std::env::temp_dir().join(format!("ridgeline-ep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let timeline = dir.join("moe.json");
    let args = |expert: &'static str, model: &'static str| {
        vec![
            "predict",
            model,
            "--system",
            "dgx-h100",
            "--nodes",
            "2",
            "--global-batch",
            "16",
            "--input-size",
            "1024",
            "--precision",
            "amp-bf16",
            "--stack",
            "megatron-te",
            "--expert-parallel",
            expert,
        ]
    };
    let mut with = args("8", "mixtral-8x7b");
    with.extend(["--timeline", timeline.to_str().unwrap(), "--format", "json"]);
    let v = run_json(&with);
    let stage = &v["stages"][0];
    assert!(stage["expert_alltoall_s"].as_f64().unwrap() > 0.0, "{v}");
    // One expert of each layer a device, with the router and attention whole.
    assert_eq!(
        stage["expert_params"].as_u64(),
        Some(32 * 3 * 4096 * 14336),
        "{v}"
    );
    // Without expert parallelism all 46.7 billion parameters' states are on every device.
    let e = run_err(&args("1", "mixtral-8x7b"));
    assert!(e.contains("one device needs"), "{e}");
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&timeline).unwrap()).unwrap();
    let exchanges = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"].as_str().is_some_and(|n| n.contains("exchange")))
        .count();
    assert_eq!(exchanges, 64);
    let e = run_err(&args("3", "mixtral-8x7b"));
    assert!(e.contains("expert-parallel"), "{e}");
    let e = run_err(&args("2", "llama3-8b"));
    assert!(
        e.contains("expert-parallel") && e.contains("has none"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// The CPU executor trains one step of `workload` at batch 2, writing its record in `dir`.
fn trains_a_step(workload: &str, dir: &std::path::Path) {
    let out = dir.join("step.jsonl");
    run_ok(&[
        "measure",
        "workload",
        workload,
        "--batch",
        "2",
        "--steps",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]);
    let records = std::fs::read_to_string(&out).unwrap();
    assert!(records.contains("\"workload-step\""), "{records}");
}

/// The `moe` op in a workload file: shown, measured by the CPU executor (one step), and
/// refused with its line and field where it cannot be (more experts a token than there
/// are, a capacity factor of zero, an unknown activation), or where it is one
/// expert-parallel rank's share, which the executor cannot run.
#[test]
fn a_mixture_of_experts_in_a_workload_file() {
    let dir = std::env::temp_dir().join(format!("ridgeline-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tiny.toml");
    std::fs::write(&file, TINY_MOE).unwrap();
    let path = file.to_str().unwrap();
    let v = run_json(&["workload", "show", path, "--format", "json"]);
    // The table, the norm's scale, the router, four experts of three projections, the head.
    let params = 50 * 32 + 32 + 32 * 4 + 4 * 3 * 32 * 48 + 32 * 50;
    assert_eq!(v["params"].as_u64(), Some(params));
    trains_a_step(path, &dir);
    for (from, to, want) in [
        ("top_k = 2", "top_k = 5", "top_k"),
        (
            "ffn = 48",
            "ffn = 48\ncapacity_factor = 0.0",
            "capacity_factor",
        ),
        ("ffn = 48", "ffn = 48\nactivation = \"tanh\"", "activation"),
    ] {
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, TINY_MOE.replace(from, to)).unwrap();
        let e = run_err(&["workload", "show", bad.to_str().unwrap()]);
        assert!(
            e.contains("bad.toml") && e.contains("experts") && e.contains(want),
            "{e}"
        );
    }
    let rank = dir.join("rank.toml");
    std::fs::write(&rank, TINY_MOE.replace("ffn = 48", "ffn = 48\nlocal = 2")).unwrap();
    let e = run_err(&[
        "measure",
        "workload",
        rank.to_str().unwrap(),
        "--batch",
        "1",
        "--steps",
        "1",
        "--out",
        dir.join("rank.jsonl").to_str().unwrap(),
    ]);
    assert!(e.contains("expert-parallel") && e.contains("local"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// ViT's stem in a workload file: a patch convolution, its positions as a sequence, a
/// class token and a learned position embedding.
const TINY_VIT_STEM: &str = r#"name = "tiny-vit-stem"
input = [3, 16, 16]

[[layer]]
name = "patches"
op = "conv"
out_channels = 8
kernel = [4, 4]
stride = [4, 4]

[[layer]]
name = "tokens"
op = "flatten-positions"

[[layer]]
name = "cls"
op = "prepend-tokens"
tokens = 1

[[layer]]
name = "pos"
op = "position-embedding"

[[layer]]
name = "norm"
op = "layer-norm"

[[layer]]
name = "qkv"
op = "linear"
out_features = 24

[[layer]]
name = "attn"
op = "attention"
heads = 2

[[layer]]
name = "loss"
op = "mse-loss"
"#;

/// torchvision's `VisionTransformer` through ONNX (a small one) is a workload with torch's
/// parameters that `predict` and `memory` cost and the CPU executor trains a step of; the
/// ViT ops in a workload file take their fields, and refuse what they cannot read with the
/// file, line and field.
#[test]
fn a_vision_transformer_imports_and_trains() {
    let vit = fixture("onnx/tv-vit_tiny.onnx");
    let v = run_json(&["workload", "show", &vit, "--format", "json"]);
    // torch's `sum(p.numel())` (data/evidence/reference/torchvision.toml).
    assert_eq!(v["params"].as_u64(), Some(8026));
    let imagenet = fixture("../../data/catalog/workloads/resnet50.toml");
    let v = run_json(&[
        "predict",
        &vit,
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--batch",
        "64",
        "--dataset",
        &imagenet,
        "--epochs",
        "1",
        "--format",
        "json",
    ]);
    assert!(v["step_time_s"].as_f64().is_some_and(|t| t > 0.0), "{v}");
    run_ok(&["memory", &vit, "--system", "dgx-h100"]);
    let dir = std::env::temp_dir().join(format!("ridgeline-vit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    trains_a_step(&vit, &dir);

    let file = dir.join("stem.toml");
    std::fs::write(&file, TINY_VIT_STEM).unwrap();
    let v = run_json(&[
        "workload",
        "show",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    // The convolution, a class token of 8, 17 x 8 positions, the norm's scale and shift,
    // the projections.
    let params = 8 * 3 * 16 + 8 + 8 + 17 * 8 + 2 * 8 + 8 * 24 + 24;
    assert_eq!(v["params"].as_u64(), Some(params));
    for (from, to, want) in [
        ("tokens = 1", "tokens = 0", "tokens"),
        ("tokens = 1", "", "tokens"),
        // A map is no sequence: the class token needs the positions flattened first.
        (
            "op = \"flatten-positions\"",
            "op = \"relu\"",
            "prepend-tokens",
        ),
    ] {
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, TINY_VIT_STEM.replacen(from, to, 1)).unwrap();
        let e = run_err(&["workload", "show", bad.to_str().unwrap()]);
        assert!(e.contains("bad.toml") && e.contains(want), "{e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
