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
# Usage: scripts/gpu-check.sh [OUT_DIR] [DEVICE]   (defaults: gpu-check, cuda:0; BUDGET=3m;
#        SYSTEM=<catalog system or file> also calibrates a profile of it from the suite)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu-check}"
device="${2:-cuda:0}"
mkdir -p "$out"

cargo build --release --locked --features cuda
bin=target/release/ridgeline

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/nvidia-smi.csv"
fi

echo "== GEMM (cuBLAS), a first look"
"$bin" measure gemm --device "$device" --precision fp32,tf32,fp16,bf16 \
    --size 1024,4096,8192 --out "$out/gemm.jsonl"
echo "== convolution layouts: two of ResNet-50's 3x3 convolutions in fp16, channels-first"
echo "   (NCHW) and channels-last (NHWC)"
"$bin" measure conv --device "$device" --workload resnet50 --batch 32 \
    --layer layer1.0.conv2,layer3.0.conv2 --precision fp16 \
    --layout channels-first,channels-last --out "$out/conv-layouts.jsonl"
echo "== the calibration suite: GEMM in every format, cuDNN convolutions, STREAM, copies,"
echo "   every op"
"$bin" measure suite --device "$device" --budget "${BUDGET:-3m}" --out "$out/suite.jsonl"

echo "== the reference workloads at small batch, FP32 and mixed precision (amp-fp16:"
echo "   16-bit activations, FP32 master weights, dynamic loss scaling), every layer timed"
for precision in fp32 amp-fp16; do
    for batch in 1 2 4; do
        "$bin" measure workload cosmoflow --device "$device" --batch "$batch" --steps 5 \
            --precision "$precision" --out "$out/workloads.jsonl"
        "$bin" measure workload deepcam --device "$device" --batch "$batch" --steps 5 \
            --precision "$precision" --out "$out/workloads.jsonl"
        "$bin" measure workload resnet50 --device "$device" --batch "$((8 * batch))" \
            --steps 5 --precision "$precision" --out "$out/workloads.jsonl"
    done
done

if [ -n "${SYSTEM:-}" ]; then
    echo "== calibrate the datasheet system $SYSTEM from the suite, its roofline, and the"
    echo "   validation of the workloads against the calibrated prediction"
    "$bin" calibrate "$out/suite.jsonl" --system "$SYSTEM" --out "$out/profile.toml"
    "$bin" roofline resnet50 --system "$out/profile.toml" --batch 64 --precision amp-fp16 \
        --plot "$out/plots" > "$out/roofline.txt"
    "$bin" validate --profile "$out/profile.toml" --measured "$out/workloads.jsonl" \
        | tee "$out/validation.txt"
    "$bin" report validation --profile "$out/profile.toml" --measured "$out/workloads.jsonl" \
        --out "$out/report"
fi

gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l || echo 0)
if [ "$gpus" -ge 2 ]; then
    echo "== NCCL allreduce across the $gpus GPUs"
    "$bin" measure nccl --gpus "$gpus" --sizes 4K..256M:x4 --out "$out/nccl.jsonl"
fi

echo "== a transformer and a graph network (sequence and graph ops: cuBLAS batched GEMMs,"
echo "   NVRTC norms, softmax, attention's mask, embeddings, gather and scatter; first run"
echo "   on a GPU here: a failure is reported and the other records stand)"
for precision in fp32 amp-fp16; do
    "$bin" measure workload gpt2 --device "$device" --seq-len 256 --batch 4 --steps 5 \
        --precision "$precision" --out "$out/sequence.jsonl" \
        || echo "FAILED: gpt2 at $precision on the GPU executor"
    "$bin" measure workload gin --device "$device" --batch 4 --steps 5 \
        --precision "$precision" --out "$out/sequence.jsonl" \
        || echo "FAILED: gin at $precision on the GPU executor"
done

echo
echo "records in $out/ (gemm.jsonl, conv-layouts.jsonl, suite.jsonl, workloads.jsonl,"
echo "sequence.jsonl;"
echo "nccl.jsonl with two or more GPUs; profile.toml, plots/, validation.txt and report/"
echo "with SYSTEM set)."
