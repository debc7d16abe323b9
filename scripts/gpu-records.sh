#!/usr/bin/env bash
# The tensor-core kernel records the transferable GPU model needs and NeuSight's public set
# (FP32 only) lacks: cuBLAS GEMMs over a grid of shapes in every format (fp64, fp32, tf32,
# fp16, bf16), and cuDNN convolutions forward, backward-data and backward-filter at the
# reference workloads' layer shapes in tf32, fp16 and bf16 (channels-last, what tensor cores
# read best), then in fp32 (channels-first, as NeuSight's were run: its convolutions are all
# 3 x 3 forward passes of stride 1, and these are every other kind too). Each command appends to its JSON Lines file as it measures, so a command cut
# short by TIMEOUT keeps what it measured, and a second run resumes.
#
# Usage: scripts/gpu-records.sh [OUT_DIR] [DEVICE]   (defaults: gpu-records, cuda:0;
#        TIMEOUT=<seconds per command, default 300>; RIDGELINE=<binary built with
#        `--features cuda`>, else it builds one)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-records}"
device="${2:-cuda:0}"
limit="${TIMEOUT:-300}"
mkdir -p "$out"

if [ -n "${RIDGELINE:-}" ]; then
    bin="$RIDGELINE"
else
    cargo build --release --locked --features cuda || exit 1
    bin=target/release/ridgeline
fi
# Short windows: a GPU kernel of a millisecond gives a hundred samples in 100 ms.
protocol=(--warmup 30ms --min-time 100ms --min-samples 5 --resume)
failed=()
step() {
    local name="$1"
    shift
    timeout "$limit" "$@"
    local rc=$?
    if [ "$rc" -eq 124 ]; then
        echo "CUT SHORT after ${limit} s: $name (its records so far stand)"
    elif [ "$rc" -ne 0 ]; then
        echo "FAILED: $name"
        failed+=("$name")
    fi
}

# Square sizes; a training step's linear layers (tokens x hidden, the 4x MLP both ways) at
# BERT-large's and GPT-3 2.7B's widths; skinny, deep-K and shallow-K products; and sizes off
# the 8- and 128-multiples the libraries tile by.
shapes=(
    512x512x512 1024x1024x1024 2048x2048x2048 4096x4096x4096 8192x8192x8192
    2048x1024x1024 2048x4096x1024 2048x1024x4096 8192x1024x1024 8192x4096x1024
    8192x1024x4096 32768x1024x1024 32768x4096x1024 32768x1024x4096
    2048x2560x2560 2048x10240x2560 2048x2560x10240 8192x2560x2560 8192x10240x2560
    8192x2560x10240 8192x7680x2560
    64x4096x4096 256x4096x4096 4096x64x4096 4096x256x4096 128x128x16384 512x512x32768
    16384x16384x128 8192x8192x256 1000x1000x1000 3000x3000x3000 5000x777x1234
    12345x1536x768
)
echo "== GEMM (cuBLAS): ${#shapes[@]} shapes in fp64, fp32, tf32, fp16 and bf16"
step "gemm" "$bin" measure gemm --device "$device" --precision fp16,bf16,tf32,fp32,fp64 \
    --shape "$(IFS=,; echo "${shapes[*]}")" "${protocol[@]}" --out "$out/gemm.jsonl"

echo "== convolutions (cuDNN), forward and both gradients, tf32, fp16 and bf16, channels-last"
for spec in "resnet50 32" "cosmoflow 4" "deepcam 2"; do
    set -- $spec
    step "conv $1" "$bin" measure conv --device "$device" --workload "$1" --batch "$2" \
        --precision fp16,bf16,tf32 --layout channels-last "${protocol[@]}" \
        --out "$out/conv.jsonl"
done

echo "== convolutions (cuDNN), forward and both gradients, fp32 (FMA), channels-first"
for spec in "resnet50 32" "cosmoflow 4" "deepcam 2"; do
    set -- $spec
    step "conv fp32 $1" "$bin" measure conv --device "$device" --workload "$1" --batch "$2" \
        --precision fp32 --layout channels-first "${protocol[@]}" --out "$out/conv-fp32.jsonl"
done

echo "records in $out/ (gemm.jsonl, conv.jsonl, conv-fp32.jsonl)"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "steps that failed (${#failed[@]}):"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
