//! Software stacks (issue 41): `ridgeline stack list | show`, `--stack` on the prediction
//! commands, what each rule changes in the output, the stack measured steps and imported
//! runs are validated under, and every class of bad stack input.

use std::path::PathBuf;

use super::*;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ridgeline-stack-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The text of built-in stack `name`'s file.
fn builtin(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/data/catalog/stacks/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

/// Writes `text` to `name` in `dir`; its path.
fn write_in(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

const RESNET: [&str; 11] = [
    "predict", "resnet50", "--system", "dgx-h100", "--nodes", "1", "--batch", "64", "--epochs",
    "1", "--format",
];

fn predict(precision: &str, stack: Option<&str>) -> serde_json::Value {
    let mut args: Vec<&str> = RESNET.to_vec();
    args.extend(["json", "--precision", precision]);
    run_json_under(args, stack)
}

/// Runs `args` under `stack` (`--stack`, where given) and parses its JSON.
fn run_json_under<'a>(mut args: Vec<&'a str>, stack: Option<&'a str>) -> serde_json::Value {
    if let Some(s) = stack {
        args.extend(["--stack", s]);
    }
    run_json(&args)
}

#[test]
fn stacks_are_listed_and_shown_with_their_sources() {
    let list = run_json(&["stack", "list", "--format", "json"]);
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pytorch-eager",
            "pytorch-compiled",
            "megatron-te",
            "tuned",
            "ridgeline-executor"
        ]
    );
    let text = run_ok(&["stack", "show", "tuned"]);
    assert!(
        text.contains("host.dispatch") && text.contains("graph"),
        "{text}"
    );
    assert!(
        text.contains("fuse-bn-relu"),
        "the fusion rules' source: {text}"
    );
    let eager = run_json(&["stack", "show", "pytorch-eager", "--format", "json"]);
    assert_eq!(eager["host"]["dispatch"]["value"], "per-op");
    assert!(
        eager["host"]["forward"]["kinds"]["conv"]["source"]
            .as_str()
            .unwrap()
            .contains("resnet50-h100.json.gz")
    );
}

#[test]
fn the_default_stack_is_eager_and_says_how_the_host_and_device_share_the_step() {
    let eager = predict("fp32", None);
    let s = &eager["stack"];
    assert_eq!(s["stack"], "pytorch-eager");
    assert_eq!(s["dispatch"], "per-op");
    // ResNet-50's convolutions run in TF32 under PyTorch's defaults on an H100.
    assert_eq!(s["tf32_layers"], 53);
    let host = s["host_s"].as_f64().unwrap();
    let busy = s["device_busy_s"].as_f64().unwrap();
    let compute = eager["compute_s"].as_f64().unwrap();
    assert!(host > 0.0 && busy > 0.0);
    // The step is at least what each timeline needs.
    assert!(
        compute >= host.max(busy) * (1.0 - 1e-12),
        "{compute} {host} {busy}"
    );
    let assumed = eager["assumptions"].to_string();
    assert!(
        assumed.contains("software stack `pytorch-eager`"),
        "{assumed}"
    );
    assert!(assumed.contains("run in TF32"), "{assumed}");
    // Explicitly named, the same prediction.
    assert_eq!(
        predict("fp32", Some("pytorch-eager"))["compute_s"],
        eager["compute_s"]
    );
}

#[test]
fn tuned_fuses_and_replays_a_graph_and_is_faster_than_eager() {
    let eager = predict("amp-fp16", Some("pytorch-eager"));
    let tuned = predict("amp-fp16", Some("tuned"));
    let s = &tuned["stack"];
    assert_eq!(s["dispatch"], "graph");
    let rules: Vec<&str> = s["fusion"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap())
        .collect();
    assert_eq!(rules, ["norm-activation", "norm-add-activation"]);
    for f in s["fusion"].as_array().unwrap() {
        assert!(f["launches_saved"].as_u64().unwrap() > 0, "{f}");
        assert!(f["bytes_saved_per_sample"].as_f64().unwrap() > 0.0, "{f}");
    }
    // 16 bottleneck blocks: batch norm + add + ReLU; the other 33 batch norms + ReLU.
    assert_eq!(s["fusion"][1]["groups"], 16);
    assert_eq!(s["fusion"][0]["groups"], 33);
    // Fused groups are one layer entry each; the graph's host time is one launch.
    assert_eq!(tuned["layers"].as_array().unwrap().len(), 175 - 33 - 2 * 16);
    assert!(
        tuned["layers"]
            .to_string()
            .contains("layer1.0.bn3+layer1.0.add+layer1.0.relu3")
    );
    assert!(s["host_s"].as_f64().unwrap() < 1e-4);
    let (e, t) = (
        eager["compute_s"].as_f64().unwrap(),
        tuned["compute_s"].as_f64().unwrap(),
    );
    assert!(t < e, "tuned {t} vs eager {e}");
}

#[test]
fn compiled_fuses_pointwise_chains_and_launches_kernels_from_the_host() {
    let compiled = predict("amp-fp16", Some("pytorch-compiled"));
    let s = &compiled["stack"];
    assert_eq!(s["dispatch"], "per-kernel");
    assert_eq!(s["fusion"][0]["rule"], "elementwise");
    assert!(s["host_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_user_stack_file_runs_and_bad_ones_are_refused_naming_file_field_and_fix() {
    let dir = scratch("files");
    let eager = builtin("pytorch-eager");
    let write = |name: &str, text: &str| write_in(&dir, name, text);
    // A copy with every host time doubled's step is no faster.
    let slow = write(
        "slow.toml",
        &eager
            .replace("name = \"pytorch-eager\"", "name = \"slow\"")
            .replace("default = { value = 73.7", "default = { value = 147.4"),
    );
    let mine = predict("fp32", Some(&slow));
    assert_eq!(mine["stack"]["stack"], "slow");
    assert!(
        mine["compute_s"].as_f64().unwrap() >= predict("fp32", None)["compute_s"].as_f64().unwrap()
    );
    let cases = [
        (
            "unknown-rule.toml",
            "rules = { value = []",
            "rules = { value = [\"bn-fusion\"]",
            "fusion.rules.value[0]",
        ),
        (
            "unknown-kind.toml",
            "conv = { value = 82.3",
            "convolution = { value = 82.3",
            "host.forward_us.convolution",
        ),
        (
            "bad-math.toml",
            "fp32_matmuls = { value = \"fp32\"",
            "fp32_matmuls = { value = \"fp8\"",
            "precision.fp32_matmuls.value",
        ),
        (
            "bad-dispatch.toml",
            "value = \"per-op\"",
            "value = \"lazy\"",
            "host.dispatch.value",
        ),
        (
            "bad-cpu-kernels.toml",
            "cpu_kernels = { value = \"onednn\"",
            "cpu_kernels = { value = \"mkl\"",
            "host.cpu_kernels.value",
        ),
        (
            "no-source.toml",
            "kernel_gap_us = { value = 1.2, source = \"h100_trace\" }",
            "kernel_gap_us = 1.2",
            "every figure carries its source",
        ),
    ];
    for (name, from, to, field) in cases {
        assert!(eager.contains(from), "{from}");
        let path = write(name, &eager.replacen(from, to, 1));
        let mut args: Vec<&str> = RESNET.to_vec();
        args.extend(["json", "--precision", "fp32", "--stack", &path]);
        let err = run_err(&args);
        assert!(err.contains(&path), "{name}: {err}");
        assert!(err.contains(field), "{name}: {err}");
    }
    // An unknown name lists the built-in ones and says a file works too.
    let mut args: Vec<&str> = RESNET.to_vec();
    args.extend(["json", "--precision", "fp32", "--stack", "pytorch"]);
    let err = run_err(&args);
    assert!(
        err.contains("unknown stack `pytorch`") && err.contains("tuned"),
        "{err}"
    );
    assert!(err.contains("stack TOML file"), "{err}");
    // A file that is not there.
    let err = run_err(&["stack", "show", "missing/stack.toml"]);
    assert!(err.contains("missing/stack.toml"), "{err}");
}

#[test]
fn the_stack_applies_to_scale_and_sweep() {
    let scale = run_json(&[
        "scale",
        "resnet50",
        "--system",
        "dgx-h100",
        "--mode",
        "weak",
        "--batch",
        "64",
        "--nodes",
        "1,2",
        "--precision",
        "amp-fp16",
        "--epochs",
        "1",
        "--stack",
        "tuned",
        "--format",
        "json",
    ]);
    let step = |v: &serde_json::Value| v["rows"][0]["outcome"]["compute_s"].as_f64().unwrap();
    let tuned = step(&scale);
    let eager = predict("amp-fp16", None)["compute_s"].as_f64().unwrap();
    assert!(tuned < eager, "{tuned} vs {eager}");
    let sweep = run_json(&[
        "sweep",
        "resnet50",
        "--systems",
        "dgx-h100",
        "--nodes",
        "1",
        "--batch",
        "64",
        "--precisions",
        "amp-fp16",
        "--epochs",
        "1",
        "--stack",
        "tuned",
        "--format",
        "json",
    ]);
    let best = sweep["top"][0]["compute_s"].as_f64().unwrap();
    assert!((best - tuned).abs() <= 1e-12 * tuned, "{best} vs {tuned}");
}

#[test]
fn imported_runs_are_validated_under_tuned_unless_told_otherwise() {
    let dir = scratch("runs");
    let runs = dir.join("runs.jsonl");
    let runs = runs.to_str().unwrap();
    run_ok(&["import", "mlperf", &fixture("mlperf"), "--out", runs]);
    let validate = |stack: Option<&str>| {
        let args = vec![
            "validate",
            "--measured",
            runs,
            "--system",
            "dgx-h100",
            "--precision",
            "amp-fp16",
            "--format",
            "json",
        ];
        run_json_under(args, stack)
    };
    let tuned = validate(None);
    assert_eq!(tuned["stack"], "tuned");
    let eager = validate(Some("pytorch-eager"));
    assert_eq!(eager["stack"], "pytorch-eager");
    let err = |v: &serde_json::Value| v["median_abs_error"].as_f64().unwrap();
    // The submissions fuse batch norm and replay graphs: tuned predicts them closer.
    assert!(
        err(&tuned) < err(&eager),
        "{} vs {}",
        err(&tuned),
        err(&eager)
    );
}

/// Issue 41: a split transformer runs under the stack, gets epochs and time to solution as
/// a data-parallel one does, and a split that does not fit is refused with exit 2.
#[test]
fn split_steps_take_the_stack_and_time_to_solution_and_refuse_what_does_not_fit() {
    let split = |stack: &str, extra: &[&str]| {
        let mut args = vec![
            "predict",
            "gpt3-xl",
            "--system",
            "dgx-h100",
            "--nodes",
            "4",
            "--global-batch",
            "512",
            "--tensor-parallel",
            "2",
            "--pipeline-parallel",
            "2",
            "--micro-batches",
            "64",
            "--precision",
            "amp-bf16",
            "--stack",
            stack,
            "--format",
            "json",
        ];
        args.extend_from_slice(extra);
        args.iter()
            .map(|s| (*s).to_owned())
            .collect::<Vec<String>>()
    };
    let run = |args: Vec<String>| run_json(&strs(&args));
    let tuned = run(split("tuned", &[]));
    let eager = run(split("pytorch-eager", &[]));
    assert_eq!(tuned["stack"], "tuned");
    assert!(tuned["step_s"].as_f64() < eager["step_s"].as_f64());
    // GPT-3's one pass of 300 billion tokens at 512 sequences a step.
    assert_eq!(tuned["epochs"].as_f64(), Some(1.0));
    assert_eq!(
        tuned["steps_per_epoch"].as_u64(),
        Some(146_484_375u64.div_ceil(512))
    );
    let tts = tuned["time_to_solution_s"].as_f64().unwrap();
    let step = tuned["step_s"].as_f64().unwrap();
    assert!((tts - 286_103.0 * step).abs() < 1e-9 * tts, "{tts} {step}");
    // --epochs scales it.
    let two = run(split("tuned", &["--epochs", "2"]));
    assert!((two["time_to_solution_s"].as_f64().unwrap() - 2.0 * tts).abs() < 1e-9 * tts);
    // Everything on one GPU does not fit an H100's 80 GB: exit 2, naming the fix.
    let err = run_err(&[
        "predict",
        "gpt3-xl",
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--batch",
        "64",
        "--tensor-parallel",
        "1",
        "--pipeline-parallel",
        "1",
    ]);
    assert!(
        err.contains("one device needs") && err.contains("but has 80.00 GiB"),
        "{err}"
    );
    assert!(err.contains("ridgeline sweep"), "{err}");
}

/// Issue 41: the procurement report sets each candidate under the default stack beside the
/// tuned one; asked for `tuned` itself, there is nothing to set beside.
#[test]
fn procurement_shows_each_candidate_under_the_default_and_the_tuned_stack() {
    let dir = scratch("procurement");
    let report = |stack: Option<&str>, name: &str| {
        let out = dir.join(name);
        let out = out.to_str().unwrap().to_owned();
        let args = vec![
            "report",
            "procurement",
            "--systems",
            "dgx-a100,dgx-h100",
            "--out",
            &out,
            "--format",
            "json",
        ];
        run_json_under(args, stack)
    };
    let v = report(None, "default");
    let rows = v["software"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r["stack"], "pytorch-eager");
        assert_eq!(r["tuned"], "tuned");
        assert!(r["speedup"].as_f64().unwrap() > 1.0, "{r}");
    }
    let html = std::fs::read_to_string(dir.join("default").join("report.html")).unwrap();
    assert!(html.contains("Software: the same candidates under a tuned stack"));
    let tuned = report(Some("tuned"), "tuned");
    assert!(tuned["software"].as_array().unwrap().is_empty());
}

/// Issue 41: `memory --stack` keeps what the stack's kernels keep: fused attention only its
/// output and a log-sum-exp, so a tuned GPT-3 XL fits a larger batch.
#[test]
fn memory_under_a_stack_that_fuses_attention_fits_a_larger_batch() {
    let memory = |stack: &str| {
        run_json(&[
            "memory",
            "gpt3-xl",
            "--system",
            "h100-sxm5-80gb",
            "--precision",
            "amp-bf16",
            "--stack",
            stack,
            "--format",
            "json",
        ])
    };
    let (eager, tuned) = (memory("pytorch-eager"), memory("tuned"));
    let per_sample = |v: &serde_json::Value| v["per_sample_bytes"].as_f64().unwrap();
    assert!(per_sample(&tuned) < per_sample(&eager));
    assert!(tuned["max_batch"].as_u64() > eager["max_batch"].as_u64());
    // ResNet-50 has no attention: the same under any stack.
    let resnet = |stack: &str| {
        run_json(&[
            "memory",
            "resnet50",
            "--system",
            "h100-sxm5-80gb",
            "--stack",
            stack,
            "--format",
            "json",
        ])["max_batch"]
            .clone()
    };
    assert_eq!(resnet("tuned"), resnet("pytorch-eager"));
}

/// Issue 41: the stack's pipeline schedule and distributed optimizer, and interleaved 1F1B
/// over `--virtual-stages`: a shorter fill and drain for more activations in flight; GPipe
/// as long as 1F1B but every micro-batch's activations kept; the sharded optimizer state
/// smaller; and the layouts a schedule cannot run refused naming the flag and the fix.
#[test]
fn pipeline_schedules_and_the_distributed_optimizer_come_from_the_stack() {
    let dir = scratch("schedules");
    let tuned = builtin("tuned");
    let write = |name: &str, text: String| write_in(&dir, name, &text);
    let gpipe = write(
        "gpipe.toml",
        tuned.replace(
            "schedule = { value = \"1f1b\"",
            "schedule = { value = \"gpipe\"",
        ),
    );
    let replicated = write(
        "replicated.toml",
        tuned.replace(
            "distributed_optimizer = { value = true",
            "distributed_optimizer = { value = false",
        ),
    );
    // GPT-3 XL on 4 DGX H100 nodes, tensor 2 x pipeline 4, in bf16.
    let args = |stack: &str, virtual_stages: &str, micro: &str, global: &str| -> Vec<String> {
        [
            "predict",
            "gpt3-xl",
            "--system",
            "dgx-h100",
            "--nodes",
            "4",
            "--global-batch",
            global,
            "--tensor-parallel",
            "2",
            "--pipeline-parallel",
            "4",
            "--micro-batches",
            micro,
            "--virtual-stages",
            virtual_stages,
            "--precision",
            "amp-bf16",
            "--stack",
            stack,
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect()
    };
    let split_m = |stack: &str, virtual_stages: &str, micro: &str, global: &str| {
        let mut a = args(stack, virtual_stages, micro, global);
        a.extend(["--format".to_owned(), "json".to_owned()]);
        run_json(&strs(&a))
    };
    let split = |stack: &str, virtual_stages: &str| split_m(stack, virtual_stages, "64", "512");
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    let (one, two) = (split("tuned", "1"), split("tuned", "2"));
    assert_eq!(two["split"]["virtual_stages"], 2);
    assert!(f(&two, "pipeline_s") < f(&one, "pipeline_s"));
    assert!(f(&two, "bubble") < f(&one, "bubble"));
    assert!(f(&two, "memory_per_device_bytes") > f(&one, "memory_per_device_bytes"));
    // GPipe keeps every micro-batch's activations, a replica's whole batch: 64 sequences
    // do not fit, 8 do.
    let (g, eight) = (
        split_m(&gpipe, "1", "8", "64"),
        split_m("tuned", "1", "8", "64"),
    );
    assert!((f(&g, "pipeline_s") - f(&eight, "pipeline_s")).abs() < 1e-9 * f(&g, "pipeline_s"));
    assert!(f(&g, "memory_per_device_bytes") > f(&eight, "memory_per_device_bytes"));
    let r = split(&replicated, "1");
    assert!(f(&r, "memory_per_device_bytes") > f(&one, "memory_per_device_bytes"));
    assert!(f(&r, "update_s") > f(&one, "update_s"));
    let refused = |stack: &str, v: &str, expect: &str| {
        let err = run_err(&strs(&args(stack, v, "64", "512")));
        assert!(
            err.contains("virtual-stages") && err.contains(expect),
            "{err}"
        );
    };
    // 24 layers over 4 stages are 6 a stage: 4 virtual stages do not divide them.
    refused("tuned", "4", "divides the 6 layers");
    refused(&gpipe, "2", "has no virtual stages");
}

/// The arguments as the test helpers take them.
fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Issue 41: FP8 linear layers where the stack has an FP8 recipe and the device an FP8 peak;
/// refused, naming the field and the fix, where either lacks it.
#[test]
fn fp8_runs_the_stacks_linear_layers_at_the_fp8_peak_and_is_refused_where_it_cannot() {
    let predict = |stack: &str, precision: &str, system: &str| {
        vec![
            "predict",
            "gpt3-xl",
            "--system",
            system,
            "--nodes",
            "1",
            "--batch",
            "4",
            "--epochs",
            "1",
            "--precision",
            precision,
            "--stack",
            stack,
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<String>>()
    };
    let json = |stack: &str, precision: &str| {
        let mut a = predict(stack, precision, "dgx-h100");
        a.extend(["--format".to_owned(), "json".to_owned()]);
        run_json(&strs(&a))
    };
    let (fp8, bf16) = (json("megatron-te", "fp8"), json("megatron-te", "amp-bf16"));
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    assert!(
        step(&fp8) < step(&bf16),
        "{} vs {}",
        step(&fp8),
        step(&bf16)
    );
    // Four linear layers in each of the 24 transformer layers; the head stays BF16.
    let e = &fp8["stack"];
    assert_eq!(e["fp8_layers"], 96, "{e}");
    assert!(e["fp8_cast_bytes_per_sample"].as_f64().unwrap() > 0.0);
    assert_eq!(bf16["stack"]["fp8_layers"], 0);
    let text = run_ok(&strs(&predict("megatron-te", "fp8", "dgx-h100")));
    assert!(text.contains("96 linear layers multiply in FP8"), "{text}");
    // A stack without an FP8 recipe, a device without an FP8 peak: exit 2, field and fix.
    let err = run_err(&strs(&predict("pytorch-eager", "fp8", "dgx-h100")));
    assert!(
        err.contains("data/catalog/stacks/pytorch-eager.toml")
            && err.contains("precision.fp8")
            && err.contains("megatron-te"),
        "{err}"
    );
    let err = run_err(&strs(&predict("megatron-te", "fp8", "dgx-a100")));
    assert!(
        err.contains("a100-sxm4-80gb") && err.contains("tflops_fp8_tensor"),
        "{err}"
    );
}

/// Issue 41: recomputation and fusion keep fewer activations; full recomputation runs the
/// transformer layers' forward pass again in backward.
#[test]
fn recomputation_and_fusion_trade_memory_for_time() {
    let dir = scratch("recompute");
    let te = builtin("megatron-te");
    let write = |name: &str, recompute: &str| {
        let from = "recompute = { value = \"selective\"";
        assert!(te.contains(from));
        let to = format!("recompute = {{ value = \"{recompute}\"");
        write_in(&dir, name, &te.replace(from, &to))
    };
    let (none, full) = (write("none.toml", "none"), write("full.toml", "full"));
    let memory = |stack: &str| {
        run_json(&[
            "memory",
            "gpt3-xl",
            "--system",
            "dgx-h100",
            "--precision",
            "amp-bf16",
            "--optimizer",
            "adam",
            "--stack",
            stack,
            "--format",
            "json",
        ])
    };
    let per = |v: &serde_json::Value| v["per_sample_bytes"].as_f64().unwrap();
    let (eager, te_none, te_full) = (memory("pytorch-eager"), memory(&none), memory(&full));
    assert!(
        per(&te_none) < per(&eager),
        "{} vs {}",
        per(&te_none),
        per(&eager)
    );
    assert!(te_none["stack_memory"]["fused_saved"].as_f64().unwrap() > 0.0);
    assert!(per(&te_full) < per(&te_none) / 2.0);
    assert_eq!(te_full["stack_memory"]["recomputed_layers"], 24);
    let predict = |stack: &str| {
        run_json(&[
            "predict",
            "gpt3-xl",
            "--system",
            "dgx-h100",
            "--nodes",
            "1",
            "--batch",
            "4",
            "--epochs",
            "1",
            "--precision",
            "amp-bf16",
            "--stack",
            stack,
            "--format",
            "json",
        ])
    };
    let (a, b) = (predict(&none), predict(&full));
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    // A training step is about one forward and two of backward: the forward again is about
    // a third more.
    let more = step(&b) / step(&a);
    assert!(more > 1.15 && more < 1.5, "{more}");
    let flops = b["stack"]["recomputed_flops_per_sample"].as_f64().unwrap();
    assert!(flops > 0.0);
    assert_eq!(a["stack"]["recomputed_flops_per_sample"], 0.0);
}

/// Issue 41: GPT-3 175B as the benchmark submissions lay it out is expressible, fits, and
/// its prediction says what each rule contributed.
#[test]
fn gpt3_175b_in_the_submissions_layout_fits_and_says_what_each_rule_did() {
    let config = crate::fixture("hf/gpt3-175b.json");
    let args = |stack: &str, format: &str| {
        vec![
            "predict",
            config.as_str(),
            "--system",
            "dgx-h100",
            "--nodes",
            "1024",
            "--tensor-parallel",
            "4",
            "--pipeline-parallel",
            "8",
            "--virtual-stages",
            "12",
            "--micro-batches",
            "8",
            "--global-batch",
            "2048",
            "--precision",
            "fp8",
            "--optimizer",
            "adam",
            "--stack",
            stack,
            "--format",
            format,
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<String>>()
    };
    let v = run_json(&strs(&args("tuned", "json")));
    let gib = v["memory_per_device_bytes"].as_f64().unwrap() / f64::from(1u32 << 30);
    assert!(gib < 80.0, "{gib} GiB");
    assert_eq!(v["split"]["virtual_stages"], 12);
    let e = &v["effects"];
    assert_eq!(e["fp8_layers"], 384, "{e}");
    assert!(e["memory"]["sequence_parallel_saved"].as_f64().unwrap() > 0.0);
    assert!(e["memory"]["fused_saved"].as_f64().unwrap() > 0.0);
    assert!(v["bubble"].as_f64().unwrap() > 0.0);
    // The gradients' reduction overlaps the backward pass; tensor-parallel traffic the
    // products (tuned's userbuffers).
    assert!(v["data_exposed_s"].as_f64() < v["data_allreduce_s"].as_f64());
    for s in v["stages"].as_array().unwrap() {
        assert!(s["tensor_exposed_s"].as_f64() <= s["tensor_allreduce_s"].as_f64());
    }
    let text = run_ok(&strs(&args("tuned", "table")));
    for said in [
        "interleaved over 12 virtual stages",
        "sequence parallel",
        "linear layers multiply in FP8",
        "sequence parallelism:",
        "not hidden by the backward pass",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
    // Eager PyTorch has no FP8 recipe.
    let err = run_err(&strs(&args("pytorch-eager", "json")));
    assert!(err.contains("precision.fp8"), "{err}");
}

/// Issue 41: `roofline --stack` sets the step under a stack's rules beside the hardware's;
/// `sweep --stack A,B` sweeps stacks; tensor parallelism spans whole nodes where asked.
#[test]
fn roofline_and_sweep_take_stacks_and_tensor_parallelism_spans_nodes() {
    let roof = |stack: Option<&str>| {
        let a = vec![
            "roofline",
            "resnet50",
            "--system",
            "dgx-h100",
            "--batch",
            "64",
            "--precision",
            "amp-fp16",
            "--format",
            "json",
        ];
        run_json_under(a, stack)
    };
    let (plain, tuned) = (roof(None), roof(Some("tuned")));
    assert!(plain.get("stack").is_none());
    assert_eq!(plain["step_time"], tuned["step_time"]);
    // Fused batch norm, ReLU and residual adds move fewer bytes: faster at the roofline.
    let under = tuned["stack"]["step_time_s"].as_f64().unwrap();
    assert!(under < tuned["step_time"].as_f64().unwrap(), "{under}");
    assert_eq!(tuned["stack"]["effects"]["stack"], "tuned");

    let sweep = run_json(&[
        "sweep",
        "gpt3-xl",
        "--systems",
        "dgx-h100",
        "--nodes",
        "1",
        "--batch",
        "4",
        "--precisions",
        "amp-bf16",
        "--stack",
        "pytorch-eager,tuned",
        "--epochs",
        "1",
        "--format",
        "json",
    ]);
    let top = sweep["top"].as_array().unwrap();
    assert_eq!(top.len(), 2);
    assert_eq!(top[0]["stack"], "tuned");
    assert_eq!(top[1]["stack"], "pytorch-eager");

    let split = |tensor: &str, pipeline: &str| {
        run_json(&[
            "predict",
            "gpt3-xl",
            "--system",
            "dgx-h100",
            "--nodes",
            "2",
            "--tensor-parallel",
            tensor,
            "--pipeline-parallel",
            pipeline,
            "--global-batch",
            "64",
            "--micro-batches",
            "16",
            "--precision",
            "amp-bf16",
            "--epochs",
            "1",
            "--format",
            "json",
        ])
    };
    let (across, inside) = (split("16", "1"), split("8", "2"));
    let tp = |v: &serde_json::Value| v["stages"][0]["tensor_allreduce_s"].as_f64().unwrap();
    // Over the network, and over twice the ranks: slower collectives.
    assert!(
        tp(&across) > tp(&inside),
        "{} vs {}",
        tp(&across),
        tp(&inside)
    );
    let err = run_err(&[
        "predict",
        "gpt3-xl",
        "--system",
        "dgx-h100",
        "--nodes",
        "3",
        "--tensor-parallel",
        "12",
        "--global-batch",
        "64",
        "--micro-batches",
        "16",
        "--precision",
        "amp-bf16",
    ]);
    assert!(
        err.contains("tensor-parallel") && err.contains("12"),
        "{err}"
    );
}

/// Issue 41: a stack that packs sequences computes a transformer data set's mean tokens,
/// not the padded length; one that pads, and a length the user gives, keep it.
#[test]
fn packing_computes_the_data_sets_mean_tokens_where_the_stack_packs() {
    // BERT-Large on one DGX H100 under `stack`, with `extra`.
    let args = |stack: &'static str, extra: &[&'static str]| {
        let mut a = vec![
            "predict",
            "bert-large",
            "--system",
            "dgx-h100",
            "--nodes",
            "1",
            "--batch",
            "32",
            "--precision",
            "amp-bf16",
            "--stack",
            stack,
        ];
        a.extend_from_slice(extra);
        a
    };
    let predict = |stack: &'static str, extra: &[&'static str]| {
        run_json(&[&args(stack, extra)[..], &["--format", "json"]].concat())
    };
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    let said = |v: &serde_json::Value| {
        v["assumptions"].as_array().unwrap().iter().any(|a| {
            a.as_str().unwrap().starts_with(
                "packing (stack `tuned`): each sequence computes its data set's mean 256 tokens",
            )
        })
    };
    let (packed, padded) = (
        predict("tuned", &[]),
        predict("tuned", &["--seq-len", "512"]),
    );
    assert!(said(&packed) && !said(&padded));
    // Half the tokens: less than two thirds of the time (attention shrinks by more).
    assert!(
        step(&packed) < 0.67 * step(&padded),
        "{} vs {}",
        step(&packed),
        step(&padded)
    );
    let eager = predict("pytorch-eager", &[]);
    assert!(!said(&eager));
    // A split model packs the same way: its title says the tokens, its JSON the rule.
    let split = ["--tensor-parallel", "2"];
    let (packed, padded) = (
        predict("tuned", &split),
        predict("tuned", &[&split[..], &["--seq-len", "512"]].concat()),
    );
    assert!(
        packed["packing"]
            .as_str()
            .unwrap()
            .contains("mean 256 tokens"),
        "{packed}"
    );
    assert!(padded.get("packing").is_none());
    let split_step = |v: &serde_json::Value| v["step_s"].as_f64().unwrap();
    assert!(split_step(&packed) < 0.67 * split_step(&padded));
    let text = run_ok(&args("tuned", &split));
    assert!(text.contains("bert-large (256 tokens)"), "{text}");
}

/// One step of the residuals ridgeline ships.
struct Shipped {
    set: String,
    workload: String,
    precision: String,
    batch: u64,
    predicted_s: f64,
    measured_s: f64,
}

/// The residuals ridgeline ships (`data/catalog/stacks/residuals.csv`).
fn shipped_residuals() -> Vec<Shipped> {
    let text = std::fs::read_to_string(format!(
        "{}/data/catalog/stacks/residuals.csv",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Shipped {
                set: f[1].to_owned(),
                workload: f[2].to_owned(),
                precision: f[5].to_owned(),
                batch: f[6].parse().unwrap(),
                predicted_s: f[7].parse().unwrap(),
                measured_s: f[8].parse().unwrap(),
            }
        })
        .collect()
}

/// The step residuals that give each stack its interval are what the binary predicts now:
/// a change that moves a prediction must write them again.
#[test]
fn the_shipped_step_residuals_are_the_binarys_predictions() {
    let shipped = shipped_residuals();
    let dir = scratch("residuals");
    let trace = dir.join("h100.jsonl");
    let trace = trace.to_str().unwrap();
    import_h100_trace(trace, &[]);
    let own = format!(
        "{}/data/evidence/measured/h100/steps.jsonl.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut checked = 0;
    for (set, measured) in [("own-h100", own.as_str()), ("torch-trace-h100", trace)] {
        let v = run_json(&[
            "validate",
            "--system",
            "h100-sxm5-80gb",
            "--measured",
            measured,
            "--format",
            "json",
        ]);
        for s in v["steps"].as_array().unwrap() {
            let (w, p, b) = (
                s["workload"].as_str().unwrap(),
                s["precision"].as_str().unwrap(),
                s["batch"].as_u64().unwrap(),
            );
            let now = s["predicted_s"].as_f64().unwrap();
            let row = shipped
                .iter()
                .find(|r| r.set == set && r.workload == w && r.precision == p && r.batch == b)
                .unwrap_or_else(|| panic!("{set} {w} {p} b{b} is not in data/catalog/stacks/residuals.csv: run scripts/step-residuals.sh"));
            assert!(
                (row.predicted_s - now).abs() <= 1e-9 * now,
                "{set} {w} {p} b{b}: data/catalog/stacks/residuals.csv has {} s, the binary predicts {now} s: run scripts/step-residuals.sh",
                row.predicted_s
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 11);
    std::fs::remove_dir_all(&dir).ok();
}

/// Each validated step is judged by the band of the others under its stack: own steps by
/// `ridgeline-executor`'s, each step's own residual left out; the interval is that band.
#[test]
fn validated_steps_get_the_band_of_the_other_steps_of_their_stack() {
    let own = format!(
        "{}/data/evidence/measured/h100/steps.jsonl.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let args = ["validate", "--system", "h100-sxm5-80gb", "--measured", &own];
    let mut json = args.to_vec();
    json.extend(["--format", "json"]);
    let v = run_json(&json);
    let shipped = shipped_residuals();
    for s in v["steps"].as_array().unwrap() {
        let band = &s["band"];
        assert_eq!(band["stack"], "ridgeline-executor");
        assert_eq!(band["pooled"], false);
        // Ten H100 and ten H200 steps, this one left out.
        assert_eq!(band["steps"], 19, "{s}");
        let (lo, hi) = (band["lo"].as_f64().unwrap(), band["hi"].as_f64().unwrap());
        let p = s["predicted_s"].as_f64().unwrap();
        let [a, b] = [
            s["predicted_lo_s"].as_f64().unwrap(),
            s["predicted_hi_s"].as_f64().unwrap(),
        ];
        assert!(
            (a - p * lo).abs() <= 1e-12 * p && (b - p * hi).abs() <= 1e-12 * p,
            "{s}"
        );
        // The band's ends are ratios of the other steps.
        let others: Vec<f64> = shipped
            .iter()
            .filter(|r| r.set.starts_with("own-"))
            .filter(|r| {
                !(r.set == "own-h100"
                    && r.workload == s["workload"]
                    && r.precision == s["precision"]
                    && r.batch == s["batch"].as_u64().unwrap())
            })
            .map(|r| r.measured_s / r.predicted_s)
            .collect();
        assert!(others.iter().any(|x| (x - lo).abs() <= 1e-9 * lo), "{lo}");
        assert!(others.iter().any(|x| (x - hi).abs() <= 1e-9 * hi), "{hi}");
    }
    let text = run_ok(&args);
    assert!(
        text.contains("measured steps inside their predicted interval (the band of measured over predicted time of the steps validated on GPUs under ridgeline-executor, each step's own left out)"),
        "{text}"
    );
}

/// `predict` says where its interval comes from: the stack's validated steps, or every
/// stack's where it has too few (`tuned`), and none at the ideal bound.
#[test]
fn predict_says_which_validated_steps_give_its_interval() {
    let eager = predict("fp32", None);
    let band = &eager["stack"]["band"];
    assert_eq!(band["stack"], "pytorch-eager");
    assert_eq!(band["pooled"], false);
    let o = &eager;
    let c = o["compute_s"].as_f64().unwrap();
    let [lo, hi] = [0, 1].map(|i| o["compute_interval_90_s"][i].as_f64().unwrap());
    assert!((lo - c * band["lo"].as_f64().unwrap()).abs() <= 1e-12 * c);
    assert!((hi - c * band["hi"].as_f64().unwrap()).abs() <= 1e-12 * c);
    let tuned = predict("amp-bf16", Some("tuned"));
    assert_eq!(tuned["stack"]["band"]["pooled"], true);
    let mut args = RESNET.to_vec();
    args.extend(["table", "--precision", "amp-bf16", "--stack", "tuned"]);
    let text = run_ok(&args);
    assert!(
        text.contains("under every stack (too few under tuned)"),
        "{text}"
    );
    args.extend(["--efficiency", "ideal"]);
    let text = run_ok(&args);
    assert!(
        text.contains("none: every layer at the ideal bound"),
        "{text}"
    );
    // A split step: the same band around its step.
    let split = run_json(&[
        "predict",
        "gpt3-2.7b",
        "--system",
        "dgx-h100",
        "--nodes",
        "1",
        "--tensor-parallel",
        "4",
        "--batch",
        "4",
        "--precision",
        "amp-bf16",
        "--epochs",
        "1",
        "--format",
        "json",
    ]);
    let step = split["step_s"].as_f64().unwrap();
    assert_eq!(split["band"], *band);
    for (i, end) in ["lo", "hi"].iter().enumerate() {
        let want = step * band[end].as_f64().unwrap();
        let got = split["step_interval_90_s"][i].as_f64().unwrap();
        assert!((got - want).abs() <= 1e-12 * want, "{got} {want}");
    }
}
