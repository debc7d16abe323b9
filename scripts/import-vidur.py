#!/usr/bin/env python3
"""Convert Vidur's per-operator GPU profiles into ridgeline's published kernel set.

Vidur (Microsoft, MIT) profiled the operators of eight transformer models' layers in FP16 on an
NVIDIA A100, H100 and A40 (data/profiling/compute/<gpu>/<org>/<model>/mlp.csv): for each token
count T and tensor-parallel degree P, the summed GPU kernel time of each operator's region in a
PyTorch profiler trace, 20 samples, in milliseconds (vidur/profiling/mlp/mlp_impl.py; the
operators are sarathi-serve's tensor-parallel layers on one GPU, no communication). Four of
them are one product each, `F.linear(x, W)`: y[T, n] = x[T, k] W[n, k]^T, with the head
dimension hd = H / n_head:

  attn_pre_proj   m = T, n = (n_head + 2 n_kv_head) hd / P, k = H   (bias inside for Qwen, phi-2)
  attn_post_proj  m = T, n = H, k = n_head hd / P
  mlp_up_proj     m = T, n = 2 I / P (gated MLPs) or I / P, k = H
  mlp_down_proj   m = T, n = H, k = I / P

This script writes, under OUT,

  gemm.csv.gz  device,precision,m,n,k,a_transpose,b_transpose,latency_s

one row per distinct (device, m, n, k): the median over every profile row with that product of
each row's median (a shape recurs across models, and T = 2048 and 4096 twice in a file).
Products shorter than MIN_US microseconds are left out: the times are printed to the
microsecond, and the shortest are the profiler's launch-bound regions. The bias, where a model
has one, is left in the product's time (a few per cent of its bytes). a_transpose = 0,
b_transpose = 1: the weight is stored [n, k] and used transposed, as F.linear does.

Usage: scripts/import-vidur.py --repo /path/to/vidur --commit SHA --out data/evidence/kernels/vidur \
           a100=a100-sxm4-80gb h100=h100-sxm5-80gb a40=a40
"""

import argparse
import csv
import gzip
import io
import os
import statistics
import subprocess
import sys

MIN_US = 20.0
OPS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]


def products(row):
    """The (op, m, n, k) of a profile row's four products."""
    h = int(row["n_embd"])
    i = int(row["n_expanded_embd"])
    heads = int(row["n_head"])
    kv = int(row["n_kv_head"])
    p = int(row["num_tensor_parallel_workers"])
    t = int(row["num_tokens"])
    hd = h // heads
    gated = row["use_gated_mlp"].strip().lower() == "true"
    for v, what in [(heads, "heads"), (kv, "kv heads"), (i, "intermediate size")]:
        if (v * (hd if what != "intermediate size" else 1)) % p:
            sys.exit(f"tensor-parallel degree {p} does not divide the {what}")
    return [
        ("attn_pre_proj", t, (heads + 2 * kv) * hd // p, h),
        ("attn_post_proj", t, h, heads * hd // p),
        ("mlp_up_proj", t, (2 if gated else 1) * i // p, h),
        ("mlp_down_proj", t, h, i // p),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True, help="a checkout or bare git dir of microsoft/vidur")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("devices", nargs="+", help="GPU=catalog-device, e.g. h100=h100-sxm5-80gb")
    a = ap.parse_args()
    git = ["git", "--git-dir", a.repo] if not os.path.isdir(os.path.join(a.repo, ".git")) else ["git", "-C", a.repo]
    files = subprocess.run(
        git + ["ls-tree", "-r", "--name-only", a.commit, "data/profiling/compute"],
        check=True, capture_output=True, text=True,
    ).stdout.split()
    times = {}
    for pair in a.devices:
        gpu, device = pair.split("=")
        mine = [f for f in files if f.startswith(f"data/profiling/compute/{gpu}/") and f.endswith("/mlp.csv")]
        if not mine:
            sys.exit(f"no mlp.csv under data/profiling/compute/{gpu}/ at {a.commit}")
        for f in mine:
            text = subprocess.run(git + ["show", f"{a.commit}:{f}"], check=True, capture_output=True, text=True).stdout
            for row in csv.DictReader(io.StringIO(text)):
                for op, m, n, k in products(row):
                    ms = float(row[f"time_stats.{op}.median"])
                    times.setdefault((device, m, n, k), []).append(ms * 1e-3)
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for (device, m, n, k), v in sorted(times.items()):
        s = statistics.median(v)
        if s * 1e6 >= MIN_US:
            rows.append([device, "fp16", m, n, k, 0, 1, f"{s:.6g}"])
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["device", "precision", "m", "n", "k", "a_transpose", "b_transpose", "latency_s"])
    w.writerows(rows)
    with gzip.GzipFile(os.path.join(a.out, "gemm.csv.gz"), "wb", mtime=0) as g:
        g.write(buf.getvalue().encode())
    per = {}
    for r in rows:
        per[r[0]] = per.get(r[0], 0) + 1
    print(f"{a.out}/gemm.csv.gz: {len(rows)} products ({per}); {len(times) - len(rows)} under {MIN_US} us left out")


if __name__ == "__main__":
    main()
