#!/usr/bin/env bash
# The kernel records the transferable GPU model needs and the public sets lack, in parts
# (PARTS, default all of them, in this order):
#   gemm   cuBLAS GEMMs over a grid of shapes in every format (fp64, fp32, tf32, fp16, bf16);
#   conv   cuDNN convolutions forward, backward-data and backward-filter at the reference
#          workloads' layer shapes in tf32, fp16 and bf16 (channels-last, what tensor cores
#          read best), then in fp32 (channels-first, as NeuSight's were run);
#   sweep  the kernel sweep (`measure conv --sweep kernels`): 3-d convolutions from 1 to 256
#          channels, depthwise 2-d and 3-d, grouped; every pass, in the same four formats;
#   fp8    FP8 (E4M3) products through cuBLASLt beside BF16 on the same shapes
#          (scripts/fp8-gemm.py, through PyTorch; GPUs of compute capability 8.9 and up).
# Each command appends to its JSON Lines file as it measures, so a command cut short by
# TIMEOUT keeps what it measured, and a second run resumes.
#
# Usage: scripts/gpu-records.sh [OUT_DIR] [DEVICE]   (defaults: gpu-records, cuda:0;
#        TIMEOUT=<seconds per command, default 300>; RIDGELINE=<binary built with
#        `--features cuda`>, else it builds one; PARTS="gemm conv sweep fp8";
#        DEVICE_ID=<ridgeline's device id of the GPU, for fp8.csv>)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-records}"
device="${2:-cuda:0}"
limit="${TIMEOUT:-300}"
parts=" ${PARTS:-gemm conv sweep fp8} "
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
if [[ "$parts" == *" gemm "* ]]; then
    echo "== GEMM (cuBLAS): ${#shapes[@]} shapes in fp64, fp32, tf32, fp16 and bf16"
    step "gemm" "$bin" measure gemm --device "$device" --precision fp16,bf16,tf32,fp32,fp64 \
        --shape "$(IFS=,; echo "${shapes[*]}")" "${protocol[@]}" --out "$out/gemm.jsonl"
fi

if [[ "$parts" == *" conv "* ]]; then
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
fi

if [[ "$parts" == *" sweep "* ]]; then
    echo "== the kernel sweep (cuDNN): 3-d, depthwise and grouped convolutions, every pass,"
    echo "   in fp16, bf16 and tf32 channels-last, then fp32 channels-first"
    for precision in fp16 bf16 tf32; do
        step "sweep $precision" "$bin" measure conv --device "$device" --sweep kernels \
            --precision "$precision" --layout channels-last "${protocol[@]}" \
            --out "$out/sweep.jsonl"
    done
    step "sweep fp32" "$bin" measure conv --device "$device" --sweep kernels \
        --precision fp32 --layout channels-first "${protocol[@]}" --out "$out/sweep-fp32.jsonl"
fi

if [[ "$parts" == *" fp8 "* ]]; then
    echo "== FP8 (E4M3) products through cuBLASLt beside BF16 (PyTorch's torch._scaled_mm)"
    step "fp8" python3 scripts/fp8-gemm.py \
        --device-name "${DEVICE_ID:-unknown-gpu}" --out "$out/fp8.csv"
fi

echo "records in $out/ (gemm.jsonl, conv.jsonl, conv-fp32.jsonl, sweep.jsonl, sweep-fp32.jsonl,"
echo "fp8.csv: the parts run)"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "steps that failed (${#failed[@]}):"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
