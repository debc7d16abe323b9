#!/usr/bin/env bash
# Writes data/catalog/stacks/residuals.csv: every measured training step ridgeline validates,
# predicted by the current binary under the stack it ran under, beside its measurement.
# The band of measured over predicted time these give widens each prediction's 90 %
# interval (model/src/stack/residuals.rs); no prediction is fitted on them.
#
# Sets (each with the stack that ran it):
#   own-h100, own-h200     ridgeline's own executor on a lent H100 and H200
#                          (data/evidence/measured/*/steps.jsonl.gz), `ridgeline-executor`;
#   torch-trace-h100       the committed PyTorch trace of ResNet-50 on an H100, `pytorch-eager`;
#   torch-trace-cpu        the committed PyTorch trace of ResNet-50 on this kind of machine's
#                          CPU, calibrated on its own kernels, `pytorch-eager`;
#   neusight-labels        NeuSight's whole FP32 steps of GPUs outside the kernel fit
#                          (`validate transfer`), eager PyTorch: `pytorch-eager`.
# Benchmark runs (MLPerf, under `tuned`) are left out: too few to give `tuned` a band of its
# own, they validate the pooled band instead.
#
# Run from the repository root after `cargo build --release`, and again whenever a change
# moves a prediction (a test says when the file no longer matches the binary):
#   scripts/step-residuals.sh
set -euo pipefail
bin=${RIDGELINE:-target/release/ridgeline}
out=data/catalog/stacks/residuals.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$bin" validate --system h100-sxm5-80gb --measured data/evidence/measured/h100/steps.jsonl.gz --format json > "$tmp/own-h100.json"
"$bin" validate --system h200-sxm-141gb --measured data/evidence/measured/h200/steps.jsonl.gz --format json > "$tmp/own-h200.json"
"$bin" import torch-trace tests/fixtures/torch/resnet50-h100.json.gz --workload resnet50 --threads 1 --out "$tmp/h100.jsonl" > /dev/null
"$bin" validate --system h100-sxm5-80gb --measured "$tmp/h100.jsonl" --format json > "$tmp/torch-trace-h100.json"
"$bin" import torch-trace tests/fixtures/torch/resnet50-cpu.json.gz --workload resnet50 --threads 2 --out "$tmp/cpu.jsonl" > /dev/null
"$bin" calibrate "$tmp/cpu.jsonl" --out "$tmp/cpu.toml" > /dev/null
"$bin" validate --profile "$tmp/cpu.toml" --measured "$tmp/cpu.jsonl" --format json > "$tmp/torch-trace-cpu.json"
"$bin" validate transfer --format json > "$tmp/neusight-labels.json"

commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no | head -c1)
python3 - "$tmp" "$out" "$commit${dirty:+ (with uncommitted changes)}" <<'EOF'
import csv, datetime, json, sys
tmp, out, commit = sys.argv[1:]
rows = []
for name in ["own-h100", "own-h200", "torch-trace-h100", "torch-trace-cpu"]:
    v = json.load(open(f"{tmp}/{name}.json"))
    for s in v["steps"]:
        rows.append([s["stack"], name, s["workload"], v["device"], v["device_kind"], s["precision"], s["batch"],
                     repr(s["predicted_s"]), repr(s["measured_s"])])
t = json.load(open(f"{tmp}/neusight-labels.json"))
for s in t["steps"]:
    w = s["model"] + (" " + s["parallel"] if s["parallel"] else "")
    rows.append(["pytorch-eager", "neusight-labels", w, s["device"], "gpu", "fp32", s["batch"],
                 repr(s["predicted_s"]), repr(s["measured_s"])])
with open(out, "w", newline="") as f:
    f.write("# Step-level residuals: each measured step ridgeline validates, predicted under the stack\n")
    f.write("# it ran under (model/src/stack/residuals.rs). Written by scripts/step-residuals.sh at\n")
    f.write(f"# commit {commit} on {datetime.date.today()}; the sets and their sources are listed in the\n")
    f.write("# script's header. kind is gpu or cpu; predicted_s and measured_s are seconds a step;\n")
    f.write("# batch is per device.\n")
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["stack", "set", "workload", "device", "kind", "precision", "batch", "predicted_s", "measured_s"])
    w.writerows(rows)
print(f"{out}: {len(rows)} steps")
EOF
