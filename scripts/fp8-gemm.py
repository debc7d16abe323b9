#!/usr/bin/env python3
"""FP8 matrix products on an NVIDIA GPU that has FP8 tensor cores (Hopper, Ada, Blackwell),
timed through PyTorch's torch._scaled_mm (cuBLASLt's FP8 matmul: E4M3 operands, per-tensor
scales, FP32 accumulation, BF16 output), with the same shapes in BF16 through torch.matmul
(cuBLAS) beside them on the same GPU as a check of scale.

Writes a kernel set in the published sets' CSV form (device, precision, m, n, k, a_transpose,
b_transpose, latency_s), one row per product and format, and prints a short table. The
operands are uniform random in [-1, 1) (cast to E4M3 for FP8); each product is warmed up,
then timed with CUDA events around each of at least 20 calls for at least 50 ms, and the
median kept; three operand sets rotate so the L2 does not hold a product's inputs.

Usage: scripts/fp8-gemm.py --device-name h200-sxm-141gb --out fp8.csv [--shapes MxNxK,...]
"""

import argparse
import csv
import statistics
import sys

SHAPES = (
    "512x512x512 1024x1024x1024 2048x2048x2048 4096x4096x4096 8192x8192x8192 "
    "2048x1024x1024 2048x4096x1024 2048x1024x4096 8192x1024x1024 8192x4096x1024 "
    "8192x1024x4096 32768x1024x1024 32768x4096x1024 32768x1024x4096 "
    "2048x2560x2560 2048x10240x2560 2048x2560x10240 8192x2560x2560 8192x10240x2560 "
    "8192x2560x10240 8192x7680x2560 64x4096x4096 256x4096x4096 4096x64x4096 "
    "4096x256x4096 16384x16384x128 8192x8192x256 8192x8192x8192"
).split()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device-name", required=True, help="ridgeline's device id of this GPU")
    p.add_argument("--out", required=True, help="CSV file to write")
    p.add_argument("--shapes", default=",".join(SHAPES), help="MxNxK, comma-separated")
    args = p.parse_args()
    try:
        import torch
    except ImportError:
        print("fp8-gemm: PyTorch is not installed; nothing measured", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("fp8-gemm: no CUDA GPU visible to PyTorch; nothing measured", file=sys.stderr)
        return 2
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) < (8, 9):
        print(f"fp8-gemm: compute capability {major}.{minor} has no FP8 tensor cores", file=sys.stderr)
        return 2
    shapes = []
    for s in args.shapes.split(","):
        try:
            m, n, k = (int(x) for x in s.lower().split("x"))
        except ValueError:
            print(f"fp8-gemm: --shapes: '{s}' is not MxNxK (e.g. 4096x4096x4096)", file=sys.stderr)
            return 2
        shapes.append((m, n, k))

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(0)

    def uniform(rows, cols):
        return torch.rand(rows, cols, device=dev, generator=gen) * 2 - 1

    def timed(call):
        for _ in range(5):
            call(0)
        torch.cuda.synchronize()
        times = []
        total = 0.0
        i = 0
        while len(times) < 20 or total < 0.05:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            call(i % 3)
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 1e3
            times.append(t)
            total += t
            i += 1
            if i > 2000:
                break
        return statistics.median(times)

    rows = []
    print(f"{'m x n x k':>22}  {'fp8 e4m3':>10}  {'bf16':>10}  {'fp8 TF/s':>9}  {'bf16 TF/s':>9}")
    for m, n, k in shapes:
        flops = 2.0 * m * n * k
        # A is row-major [M, K]; _scaled_mm wants B column-major, so B is the transpose of an
        # [N, K] row-major tensor.
        a32 = [uniform(m, k) for _ in range(3)]
        b32 = [uniform(n, k) for _ in range(3)]
        a8 = [a.to(torch.float8_e4m3fn) for a in a32]
        b8 = [b.to(torch.float8_e4m3fn).t() for b in b32]
        one = torch.ones((), device=dev)
        out8 = torch._scaled_mm(a8[0], b8[0], scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        ref = a8[0].float() @ b8[0].float()
        err = (out8.float() - ref).norm() / ref.norm()
        if not err < 1e-2:
            print(f"fp8-gemm: {m}x{n}x{k}: FP8 product off its FP32 reference by {err:.2e}", file=sys.stderr)
            return 1
        t8 = timed(
            lambda j: torch._scaled_mm(a8[j], b8[j], scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        )
        a16 = [a.to(torch.bfloat16) for a in a32]
        b16 = [b.to(torch.bfloat16).t() for b in b32]
        t16 = timed(lambda j: torch.matmul(a16[j], b16[j]))
        # b_transpose = 1: B is stored [N, K], as both calls read it.
        rows.append((args.device_name, "fp8", m, n, k, 0, 1, t8))
        rows.append((args.device_name, "bf16", m, n, k, 0, 1, t16))
        print(f"{m:>6} x {n:>6} x {k:>6}  {t8 * 1e3:>8.4f}ms  {t16 * 1e3:>8.4f}ms  "
              f"{flops / t8 / 1e12:>9.1f}  {flops / t16 / 1e12:>9.1f}")
        del a32, b32, a8, b8, a16, b16, out8, ref
        torch.cuda.empty_cache()
    with open(args.out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["device", "precision", "m", "n", "k", "a_transpose", "b_transpose", "latency_s"])
        for r in rows:
            w.writerow(r[:7] + (f"{r[7]:.9g}",))
    print(f"{len(rows)} products in {args.out}; torch {torch.__version__}, "
          f"cuBLASLt {torch.backends.cuda.preferred_blas_library()}, "
          f"{torch.cuda.get_device_name()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
