#!/usr/bin/env python3
"""Convert LLMCompass's real-hardware matrix products into ridgeline's published kernel set.

LLMCompass (Princeton University, BSD-3-Clause) measured torch.matmul of [M, K] by [K, N] in
16-bit on an NVIDIA A100 and an AMD MI210 to check its simulator
(ae/figure5/ab/real_hardware/matmul_{A100,MI210}.csv: M, N, K, "<ms>ms", "<TFLOP/s>Tflops",
no header). Its code (software_model/matmul.py, Matmul.run_on_gpu) allocates the operands as
torch.bfloat16 and times each of 50 calls by the host clock around the call and a
torch.cuda.synchronize(), keeping the median: a time holds the call's launch and the
synchronisation besides the kernel. This script writes, under OUT,

  gemm.csv.gz  device,precision,m,n,k,a_transpose,b_transpose,latency_s

(m = M output rows, n = N columns, k = K the reduction; neither operand transposed), leaving
out products under MIN_US microseconds, where the host's share of a time passes a few per
cent. LLMCompass's vector ops (softmax, layer norm, GELU) are not converted: a published set
holds products and convolutions.

Usage: scripts/import-llmcompass.py --repo /path/to/LLMCompass --commit SHA \
           --out data/evidence/kernels/llmcompass A100=a100-sxm4-80gb MI210=mi210
"""

import argparse
import csv
import gzip
import io
import os
import subprocess
import sys

MIN_US = 200.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True, help="a checkout or bare git dir of LLMCompass")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("devices", nargs="+", help="GPU=catalog-device, e.g. MI210=mi210")
    a = ap.parse_args()
    git = ["git", "-C", a.repo] if os.path.isdir(os.path.join(a.repo, ".git")) else ["git", "--git-dir", a.repo]
    rows, short = [], 0
    for pair in a.devices:
        gpu, device = pair.split("=")
        path = f"ae/figure5/ab/real_hardware/matmul_{gpu}.csv"
        text = subprocess.run(git + ["show", f"{a.commit}:{path}"], check=True, capture_output=True, text=True).stdout
        for i, line in enumerate(text.strip().splitlines()):
            f = [x.strip() for x in line.split(",")]
            if len(f) != 5 or not f[3].endswith("ms") or not f[4].endswith("Tflops"):
                sys.exit(f"{path}: line {i + 1}: expected `M, N, K, <ms>ms, <TFLOP/s>Tflops`, got `{line}`")
            m, n, k = int(f[0]), int(f[1]), int(f[2])
            s = float(f[3][:-2]) * 1e-3
            # The two columns agree: the throughput is 2 M N K over the time.
            tflops = float(f[4][: -len("Tflops")])
            if abs(2 * m * n * k / s / 1e12 - tflops) > 0.01 * tflops:
                sys.exit(f"{path}: line {i + 1}: {tflops} TFLOP/s is not 2 M N K / {s} s")
            if s * 1e6 < MIN_US:
                short += 1
                continue
            rows.append([device, "bf16", m, n, k, 0, 0, f"{s:.6g}"])
    os.makedirs(a.out, exist_ok=True)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["device", "precision", "m", "n", "k", "a_transpose", "b_transpose", "latency_s"])
    w.writerows(rows)
    with gzip.GzipFile(os.path.join(a.out, "gemm.csv.gz"), "wb", mtime=0) as g:
        g.write(buf.getvalue().encode())
    print(f"{a.out}/gemm.csv.gz: {len(rows)} products; {short} under {MIN_US} us left out")


if __name__ == "__main__":
    main()
