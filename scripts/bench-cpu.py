"""The side-by-side CPU benchmark behind scripts/bench-cpu (see there)."""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

N = 2048
ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
RIDGELINE = "target/release/ridgeline"
CORES = os.cpu_count() or 1
# ridgeline's own runs keep the environment the user has (OPENBLAS_* do not concern it).
PROTOCOL = ["--warmup", "300ms", "--min-samples", "10", "--min-time", "1s"]


def numpy_gemm(threads):
    """Median seconds of a 2048^3 f32 matmul on `threads` threads."""
    a = np.random.default_rng(1).random((N, N), dtype=np.float32)
    b = np.random.default_rng(2).random((N, N), dtype=np.float32)
    with threadpool_limits(threads):
        start = time.perf_counter()
        while time.perf_counter() - start < 0.3:
            a @ b
        samples = []
        start = time.perf_counter()
        while len(samples) < 10 or time.perf_counter() - start < 1.0:
            t = time.perf_counter()
            a @ b
            samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def ridgeline(args):
    """Median seconds and FLOPs of the one record a ridgeline measure command prints."""
    out = subprocess.run([RIDGELINE, "measure", *args, *PROTOCOL, "--format", "json"], check=True, capture_output=True, text=True)
    record = json.loads(out.stdout)[0]
    return statistics.median(record["samples_s"]), record["flops"]


def main():
    blas = [(i["internal_api"], i.get("architecture"), i.get("version")) for i in threadpool_info()]
    print(f"numpy {np.__version__}, BLAS {blas}; {CORES} cores")
    gemm_flops = 2.0 * N**3
    for threads in sorted({1, CORES}):
        gemm = ["gemm", "--shape", f"{N}x{N}x{N}", "--threads", str(threads)]
        conv = ["conv", "--workload", "cosmoflow", "--layer", "conv3d_1", "--pass", "forward", "--threads", str(threads)]
        ours, theirs, convs, vs_numpy, vs_gemm = [], [], [], [], []
        # Each ratio is taken within a round, its reference measured just before and just
        # after: on a shared machine the speed drifts more between rounds than within one.
        for _ in range(ROUNDS):
            n0 = gemm_flops / numpy_gemm(threads)
            t, f = ridgeline(gemm)
            g0 = f / t
            n1 = gemm_flops / numpy_gemm(threads)
            t, f = ridgeline(conv)
            c = f / t
            t, f = ridgeline(gemm)
            g1 = f / t
            ours += [g0, g1]
            theirs += [n0, n1]
            convs.append(c)
            vs_numpy.append(g0 / ((n0 + n1) / 2))
            vs_gemm.append(c / ((g0 + g1) / 2))
        med = statistics.median
        print(f"\n{threads} thread(s), {ROUNDS} rounds (median of per-round ratios; min..max):")
        print(
            f"  f32 GEMM 2048^3: ridgeline {med(ours) / 1e9:.1f} GFLOP/s, numpy {med(theirs) / 1e9:.1f} GFLOP/s -> "
            f"{100 * med(vs_numpy):.0f} % ({100 * min(vs_numpy):.0f}..{100 * max(vs_numpy):.0f}) (target >= 90 %)"
        )
        print(
            f"  conv3d forward, CosmoFlow layer 2: {med(convs) / 1e9:.1f} GFLOP/s -> {100 * med(vs_gemm):.0f} % "
            f"({100 * min(vs_gemm):.0f}..{100 * max(vs_gemm):.0f}) of ridgeline's f32 GEMM (target >= 70 %)"
        )

if __name__ == "__main__":
    main()
