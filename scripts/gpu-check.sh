#!/usr/bin/env bash
# What a user with an NVIDIA GPU runs first: builds ridgeline with the CUDA backend,
# measures this GPU (cuBLAS GEMM in fp32, tf32, fp16 and bf16; the calibration suite:
# cuDNN convolutions at the reference workloads' layer shapes, STREAM through NVRTC,
# host-device copies, every op) and trains the three reference workloads at small batch on
# it (FP32 and mixed precision amp-fp16, every layer timed with CUDA events), then GPT-2
# and the graph network GIN (the sequence and graph ops), writing records to a directory;
# with
# SYSTEM set, it calibrates that system from the suite and prints the validation table of
# the workloads against the calibrated prediction.
#
# Needs an NVIDIA driver and the CUDA 13 libraries (libcublas.so.13, libnvrtc.so.13,
# libcudnn.so.9) on the
# library path; without them each command exits 2 naming what is missing.
#
# Every step runs even when one before it failed: a failure is reported, the other records
# stand, and the script exits 1 at the end naming the steps that failed.
#
# Usage: scripts/gpu-check.sh [OUT_DIR] [DEVICE]   (defaults: gpu-check, cuda:0; BUDGET=3m;
#        SYSTEM=<catalog system or file> also calibrates a profile of it from the suite;
#        BATCHES="1 2 4" the workloads' batches (ResNet-50 runs 8x each);
#        RIDGELINE=<binary> uses a ridgeline built with `--features cuda` elsewhere instead of
#        building one, for a GPU machine without a Rust toolchain)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-check}"
device="${2:-cuda:0}"
mkdir -p "$out"

if [ -n "${RIDGELINE:-}" ]; then
    bin="$RIDGELINE"
else
    cargo build --release --locked --features cuda || exit 1
    bin=target/release/ridgeline
fi
failed=()
# Runs one step; a failure is named and remembered, and the script goes on.
step() {
    local name="$1"
    shift
    if ! "$@"; then
        echo "FAILED: $name"
        failed+=("$name")
    fi
}

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/nvidia-smi.csv"
fi

echo "== GEMM (cuBLAS), a first look"
step "gemm" "$bin" measure gemm --device "$device" --precision fp32,tf32,fp16,bf16 \
    --size 1024,4096,8192 --out "$out/gemm.jsonl"
echo "== convolution layouts: two of ResNet-50's 3x3 convolutions in fp16, channels-first"
echo "   (NCHW) and channels-last (NHWC)"
step "conv layouts" "$bin" measure conv --device "$device" --workload resnet50 --batch 32 \
    --layer layer1.0.conv2,layer3.0.conv2 --precision fp16 \
    --layout channels-first,channels-last --out "$out/conv-layouts.jsonl"
echo "== the calibration suite: GEMM in every format, cuDNN convolutions, STREAM, copies,"
echo "   every op"
step "suite" "$bin" measure suite --device "$device" --budget "${BUDGET:-3m}" --out "$out/suite.jsonl"

echo "== the reference workloads at small batch, FP32 and mixed precision (amp-fp16:"
echo "   16-bit activations, FP32 master weights, dynamic loss scaling), every layer timed"
for precision in fp32 amp-fp16; do
    for batch in ${BATCHES:-1 2 4}; do
        for workload in cosmoflow deepcam resnet50; do
            b="$batch"
            if [ "$workload" = resnet50 ]; then b=$((8 * batch)); fi
            step "$workload batch $b $precision" "$bin" measure workload "$workload" \
                --device "$device" --batch "$b" --steps 5 --precision "$precision" \
                --out "$out/workloads.jsonl" --resume
        done
    done
done

if [ -n "${SYSTEM:-}" ]; then
    echo "== calibrate the datasheet system $SYSTEM from the suite, its roofline, and the"
    echo "   validation of the workloads against the calibrated prediction"
    step "calibrate" "$bin" calibrate "$out/suite.jsonl" --system "$SYSTEM" --out "$out/profile.toml"
    step "roofline" "$bin" roofline resnet50 --system "$out/profile.toml" --batch 64 --precision amp-fp16 \
        --plot "$out/plots" > "$out/roofline.txt"
    step "validate" "$bin" validate --profile "$out/profile.toml" \
        --measured "$out/workloads.jsonl" > "$out/validation.txt"
    cat "$out/validation.txt"
    step "report" "$bin" report validation --profile "$out/profile.toml" --measured "$out/workloads.jsonl" \
        --out "$out/report"
fi

gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || echo 0)
if [ "$gpus" -ge 2 ]; then
    echo "== NCCL allreduce across the $gpus GPUs"
    step "nccl" "$bin" measure nccl --gpus "$gpus" --sizes 4K..256M:x4 --out "$out/nccl.jsonl"
fi

echo "== a transformer and a graph network (sequence and graph ops: cuBLAS batched GEMMs,"
echo "   NVRTC norms, softmax, attention's mask, embeddings, gather and scatter; first run"
echo "   on a GPU here: a failure is reported and the other records stand)"
for precision in fp32 amp-fp16; do
    step "gpt2 $precision" "$bin" measure workload gpt2 --device "$device" --seq-len 256 \
        --batch 4 --steps 5 --precision "$precision" --out "$out/sequence.jsonl" --resume
    step "gin $precision" "$bin" measure workload gin --device "$device" --batch 4 --steps 5 \
        --precision "$precision" --out "$out/sequence.jsonl" --resume
done

echo
echo "records in $out/ (gemm.jsonl, conv-layouts.jsonl, suite.jsonl, workloads.jsonl,"
echo "sequence.jsonl;"
echo "nccl.jsonl with two or more GPUs; profile.toml, plots/, validation.txt and report/"
echo "with SYSTEM set)."
if [ "${#failed[@]}" -gt 0 ]; then
    echo "steps that failed (${#failed[@]}):"
    printf '  %s\n' "${failed[@]}"
    exit 1
fi
