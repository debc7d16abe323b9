#!/usr/bin/env bash
# The CPU kernel campaign: GEMMs, convolutions (2-D and 3-D; forward, backward-data and
# backward-filter), element-wise, pooling and normalisation ops, and STREAM bandwidth, timed
# by ridgeline's own kernels and by PyTorch's (oneDNN, MKL) at the same shapes, kept with the
# machine's facts. The records are what the transferable CPU kernel model is fitted on
# (`docs/TRANSFER.md`, "CPUs"); run it on every machine the project runs on.
#
#   scripts/cpu-records.sh [OUT_DIR]
#
# OUT_DIR defaults to data/evidence/kernels/ridgeline/cpu-<model>-f<family>m<model> for this
# CPU. Thread counts: 1, half the cores (from 4 up) and all of them.
#   - gemm: square 32..2048 (x2) and the products of linear layers, at every thread count;
#   - conv: the calibration suite's sweep (15 shapes, 2-D and 3-D, plain, 1x1, grouped,
#     dilated, depthwise) at every thread count, and the reference workloads' layer shapes
#     (cosmoflow, deepcam, resnet50) at all cores;
#   - ops: the reference workloads' op shapes at all cores;
#   - stream: copy, scale, add and triad from L1 to past the last-level cache, every count;
#   - steps: whole training steps of the self-check's runs (cosmoflow 64^3, deepcam 96x144,
#     resnet50 224, gpt2 32 tokens; batches 1, 2, 4; 3 steps after a warm-up) on all cores;
#   - pytorch-*: the gemm, conv and ops cases again in PyTorch (scripts/cpu-kernels-torch.py,
#     in a virtual environment under target/ with torch from the package index).
# A short protocol (20 ms warm-up, at least 2 samples and 100 ms) keeps it within ten
# minutes on a 2-core machine. SOURCE.toml records the CPU (model, family, microcode, flags,
# caches), memory, NUMA nodes, kernel, the ridgeline commit and the PyTorch version.
set -euo pipefail
cd "$(dirname "$0")/.."

field() { awk -F': ' -v k="$1" '$1 ~ "^"k"[ \t]*$" {print $2; exit}' /proc/cpuinfo; }
model_name=$(field "model name")
[[ -n $model_name ]] || model_name=$(field "CPU part")
family=$(field "cpu family")
[[ -n $family ]] || family=$(field "CPU architecture")
model=$(field "model")
[[ -n $model ]] || model=$(field "CPU part")
slug=$(echo "$model_name" | tr '[:upper:]' '[:lower:]' | sed -E 's/\((r|tm)\)//g; s/(cpu|processor|@.*)//g; s/[^a-z0-9]+/-/g; s/^-+|-+$//g')
out=${1:-data/evidence/kernels/ridgeline/cpu-${slug}-f${family}m${model}}
cores=$(nproc)
threads=1
((cores >= 4)) && threads+=",$((cores / 2))"
((cores > 1)) && threads+=",$cores"

cargo build --release --quiet
bin=target/release/ridgeline
# ridgeline's products run on the system's OpenBLAS where one is installed (as numpy's do;
# PyTorch's run on MKL), else on the gemm crate: install Debian's threaded build (set to one thread per caller)
# where apt is at hand, and record which library ran.
if ! ls /usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0 >/dev/null 2>&1 && command -v apt-get >/dev/null \
    && [[ $(id -u) == 0 ]]; then
    apt-get install -y --no-install-recommends libopenblas0-pthread >/dev/null \
        || { apt-get update >/dev/null && apt-get install -y --no-install-recommends libopenblas0-pthread >/dev/null; }
fi
blas=$("$bin" measure gemm --size 32 --threads 1 --warmup 0s --min-time 0s --min-samples 1 --format json \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["env"]["blas"])')
venv=target/torch-venv
if [[ ! -x $venv/bin/python ]]; then
    python3 -m venv "$venv" || { apt-get update && apt-get install -y python3-venv && python3 -m venv "$venv"; }
fi
"$venv/bin/python" -c 'import torch' 2>/dev/null || "$venv/bin/pip" install --quiet torch

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
protocol=(--warmup 20ms --min-samples 2 --min-time 100ms)
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
SECONDS=0
echo "cpu-records: $model_name, $cores cores, threads $threads, products on $blas -> $out" >&2

"$bin" measure gemm --size 32..2048:x2 --threads "$threads" "${protocol[@]}" --out "$work/gemm.jsonl" >/dev/null
"$bin" measure gemm --resume --shape 8x1000x2048,64x4096x1024,512x768x768,512x3072x768,512x768x3072,1024x1024x64,4096x256x256,256x4096x4096 \
    --threads "$threads" "${protocol[@]}" --out "$work/gemm.jsonl" >/dev/null
"$bin" measure conv --sweep suite --threads "$threads" "${protocol[@]}" --out "$work/conv.jsonl" >/dev/null
"$bin" measure conv --resume --threads all "${protocol[@]}" --out "$work/conv.jsonl" >/dev/null
"$bin" measure ops --threads all "${protocol[@]}" --out "$work/ops.jsonl" >/dev/null
"$bin" measure stream --threads "$threads" "${protocol[@]}" --out "$work/stream.jsonl" >/dev/null
# Whole training steps of the self-check's runs (ridgeline's CPU executor, all cores), which
# `validate transfer --cpu` predicts from the kernel model fitted without this CPU.
resume=()
for run in cosmoflow:64 deepcam:96x144 resnet50:224 gpt2:32; do
    "$bin" measure workload "${run%%:*}" --input-size "${run##*:}" --batch 1,2,4 --steps 3 \
        --threads all "${resume[@]}" --out "$work/steps.jsonl" >/dev/null
    resume=(--resume)
done
echo "cpu-records: ridgeline's kernels done in ${SECONDS} s" >&2
for kind in gemm conv ops; do
    "$venv/bin/python" scripts/cpu-kernels-torch.py "$work/$kind.jsonl" "$work/pytorch-$kind.jsonl" \
        --warmup 0.02 --min-samples 2 --min-time 0.1
done
echo "cpu-records: PyTorch's done, ${SECONDS} s in all" >&2

mkdir -p "$out"
for f in "$work"/*.jsonl; do
    gzip -9 -c "$f" >"$out/$(basename "$f").gz"
done

cache() { # level type -> size as sysfs gives it, e.g. 32K
    for d in /sys/devices/system/cpu/cpu0/cache/index*; do
        if [[ $(cat "$d/level") == "$1" && $(cat "$d/type") == "$2" ]]; then
            echo "$(cat "$d/size") shared by CPUs $(cat "$d/shared_cpu_list")"
            return
        fi
    done
    echo unknown
}
q() { printf '"%s"' "$(echo "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
onednn=$("$venv/bin/python" -c 'import torch; print(torch.__config__.show())' | sed -n 's/.*MKL-DNN v\([^ ]*\).*/\1/p' | head -1)
cat >"$out/SOURCE.toml" <<EOF
description = "CPU kernels of one machine, timed by ridgeline's own kernels (gemm, conv, ops, stream) and by PyTorch's (pytorch-*: the same cases), and whole training steps of ridgeline's CPU executor (steps), written by scripts/cpu-records.sh"
measured_by = "scripts/cpu-records.sh at ridgeline commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!data' || echo ' (with uncommitted changes)'), from $started to $(date -u +%Y-%m-%dT%H:%M:%SZ) (${SECONDS} s)"
protocol = "warm-up 20 ms, at least 2 samples and 100 ms per case; ridgeline's kernels with the caches as inside a training step (--cache step), PyTorch's on the same operands each call"
threads = $(q "$threads")
frameworks = $(q "ridgeline $("$bin" --version | awk '{print $2}') (its CPU kernels: products on $blas, its convolutions and ops); pytorch $torch_version (oneDNN $onednn, MKL) for pytorch-*.jsonl.gz")

[cpu]
model_name = $(q "$model_name")
vendor_id = $(q "$(field vendor_id)")
family = $(q "$family")
model = $(q "$model")
stepping = $(q "$(field stepping)")
microcode = $(q "$(field microcode)")
logical_cpus = $cores
threads_per_core = $(q "$(lscpu | awk -F: '/Thread\(s\) per core/ {gsub(/ /, "", $2); print $2}')")
numa_nodes = $(q "$(lscpu | awk -F: '/NUMA node\(s\)/ {gsub(/ /, "", $2); print $2}')")
hypervisor = $(q "$(lscpu | awk -F: '/Hypervisor vendor/ {gsub(/^ +/, "", $2); print $2}')")
l1d = $(q "$(cache 1 Data)")
l2 = $(q "$(cache 2 Unified)")
l3 = $(q "$(cache 3 Unified)")
flags = $(q "$(field flags | tr ' ' '\n' | grep -E '^(avx|avx2|fma|avx512f|avx512_bf16|avx512_fp16|amx_bf16|amx_tile|sve|sve2|asimd|sme)$' | tr '\n' ' ' | sed 's/ $//')")

[machine]
memory = $(q "$(awk '/MemTotal/ {print $2, $3}' /proc/meminfo)")
kernel = $(q "$(uname -r)")
EOF
# The machine as a CPU device file: what the model's features need of it. Its figures are
# local's (cores, clock, peaks, LLC, each with how it was found) and the memory bandwidth
# this campaign's STREAM triad sustained (the largest past 4 x the LLC on all cores): a
# virtual machine's share of its host has no datasheet figure of its own.
"$bin" system show local --format json >"$work/local.json"
python3 - "$work/local.json" "$work/stream.jsonl" "$out/device.toml" "$(basename "$out")" "$(field "model name")" <<'PY'
import json, statistics, sys
local, stream, out, name, model_name = sys.argv[1:]
d = json.load(open(local))["device"]
llc = d["llc"]["value"]
best = 0.0
for line in open(stream):
    r = json.loads(line)
    if r["shape"]["kernel"] == "triad" and r["shape"]["array_bytes"] > 4 * llc and r["threads"] == d["cores"]["value"]:
        best = max(best, r["bytes"] / statistics.median(r["samples_s"]))
q = lambda s: json.dumps(s)
clock = d["boost_clock_hz"]
with open(out, "w") as f:
    f.write(f"""# This machine's CPU as scripts/cpu-records.sh described it (`ridgeline system show local`),
# the device the records beside it were measured on.
name = {q(name)}
kind = "cpu"
vendor = {q(d["vendor"])}
model = {q(model_name)}
description = {q(d["description"])}
cores = {{ value = {d["cores"]["value"]}, source = "cores" }}

[sources]
cores = {q(d["cores"]["source"])}
clock = {q(clock["source"])}
fp32 = {q(d["peak"]["fp32"]["source"])}
fp64 = {q(d["peak"]["fp64"]["source"])}
llc = {q(d["llc"]["source"])}
stream = "STREAM triad measured by scripts/cpu-records.sh (stream.jsonl.gz beside this file): the largest rate of the arrays past 4 x the last-level cache on all cores"

[compute]
boost_clock_mhz = {{ value = {clock["value"] / 1e6:.1f}, source = "clock" }}

[peak]
tflops_fp64 = {{ value = {d["peak"]["fp64"]["value"] / 1e12:.6f}, source = "fp64" }}
tflops_fp32 = {{ value = {d["peak"]["fp32"]["value"] / 1e12:.6f}, source = "fp32" }}

[memory]
bandwidth_gbs = {{ value = {best / 1e9:.1f}, source = "stream" }}
llc_mib = {{ value = {llc / 2**20:.1f}, source = "llc" }}
""")
PY
echo "cpu-records: $out ($(ls "$out" | tr '\n' ' ')) in ${SECONDS} s" >&2
