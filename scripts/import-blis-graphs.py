#!/usr/bin/env python3
"""Convert BLIS's published level-3 performance graphs into a published CPU kernel set.

The BLIS project (flame/blis, BSD-3-Clause) publishes, per machine, panels of graphs of
square GEMMs (m = n = k, 50 equally spaced sizes, each point the best of three trials) timed
on one thread and on every core of one or two sockets, one curve per library (BLIS,
OpenBLAS, Eigen, MKL, ARMPL, ...), as vector PDFs drawn by Octave (docs/graphs/large/*.pdf;
docs/Performance.md gives each machine, library version, thread count and the clock the
graphs' peak is at). The y axis is GFLOPS per thread and its top is the peak (docs/
Performance.md, "General information").

This script reads the `sgemm` graph of each PDF given: the axes from its tick marks and
labels, each curve's colour and dash pattern from the legend, and each curve's vertices as
drawn (no raster, no guessing between points), and writes, under OUT,

  gemm.csv.gz  device,precision,m,n,k,a_transpose,b_transpose,latency_s,threads

with latency_s = 2 n^3 / (GFLOPS per thread x threads x 1e9). Points under MIN_GFLOPS per
thread are left out: the plot's resolution there is a large share of the value.

Usage: scripts/import-blis-graphs.py --out data/evidence/kernels/blis-sgemm \\
           skx-8167m:MKL:1:l3_perf_skx_nt1.pdf skx-8167m:MKL:26:l3_perf_skx_jc2ic13_nt26.pdf ...

each argument DEVICE:LIBRARY:THREADS:FILE.pdf (DEVICE a catalog device, LIBRARY the legend's
name of the curve). Needs pymupdf (pip install pymupdf); not needed by the tests, which read
the CSV file.
"""

import argparse
import csv
import gzip
import io
import sys

MIN_GFLOPS = 1.0


def close(a, b, tol=0.6):
    return abs(a - b) <= tol


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def graph(page, title):
    """The axes box of the graph titled `title`: the frame whose top edge is just below it."""
    words = page.get_text("words")
    head = next((w for w in words if w[4] == title), None)
    if head is None:
        sys.exit(f"no graph titled `{title}`")
    cx = (head[0] + head[2]) / 2
    frames = []
    for d in page.get_drawings():
        r = d["rect"]
        if r.x0 < cx < r.x1 and r.y0 >= head[3] - 1 and r.width > 50 and r.height > 50:
            frames.append(r)
    if not frames:
        sys.exit(f"no axes under `{title}`")
    return min(frames, key=lambda r: r.y0 - head[3]), words


def axis(words, drawings, box, vertical):
    """A linear map from a position along the axis to its value, from the tick marks and the
    numbers labelling them."""
    ticks, labels = [], []
    for d in drawings:
        for it in d["items"]:
            if it[0] != "l":
                continue
            a, b = it[1], it[2]
            if vertical and close(a.x, box.x0) and close(a.y, b.y) and 0 < abs(b.x - a.x) < 3:
                ticks.append(a.y)
            if not vertical and close(a.y, box.y1) and close(a.x, b.x) and 0 < abs(b.y - a.y) < 3:
                ticks.append(a.x)
    for w in words:
        v = number(w[4])
        if v is None:
            continue
        if vertical and w[2] <= box.x0 + 1 and box.y0 - 8 <= (w[1] + w[3]) / 2 <= box.y1 + 8:
            labels.append(((w[1] + w[3]) / 2, v))
        if not vertical and w[1] >= box.y1 - 1 and w[1] <= box.y1 + 20 and box.x0 - 8 <= (w[0] + w[2]) / 2 <= box.x1 + 8:
            labels.append(((w[0] + w[2]) / 2, v))
    pairs = []
    for pos, v in labels:
        near = min(ticks, key=lambda t: abs(t - pos), default=None)
        if near is not None and abs(near - pos) < 3:
            pairs.append((near, v))
    pairs = sorted(set(pairs))
    if len(pairs) < 2:
        sys.exit(f"fewer than two labelled ticks on the {'y' if vertical else 'x'} axis")
    (p0, v0), (p1, v1) = pairs[0], pairs[-1]
    scale = (v1 - v0) / (p1 - p0)
    for p, v in pairs:
        if abs(v0 + (p - p0) * scale - v) > 1e-3 * abs(v1 - v0):
            sys.exit(f"ticks not linear: {pairs}")
    return lambda p: v0 + (p - p0) * scale


def style(d):
    return (tuple(round(c, 3) for c in (d.get("color") or ())), str(d.get("dashes")))


def legend(words, drawings, name):
    """The colour and dash pattern of the legend entry `name`: the line just left of it."""
    w = next((w for w in words if w[4] == name), None)
    if w is None:
        sys.exit(f"no legend entry `{name}`; entries: {sorted({x[4] for x in words if x[4].isalpha()})}")
    cy = (w[1] + w[3]) / 2
    best = None
    for d in drawings:
        r = d["rect"]
        if d.get("color") and r.x1 <= w[0] + 1 and w[0] - r.x1 < 15 and abs((r.y0 + r.y1) / 2 - cy) < 3 and r.height < 2:
            best = d
    if best is None:
        sys.exit(f"no legend line for `{name}`")
    return style(best)


def curve(path, library):
    import pymupdf

    page = pymupdf.open(path)[0]
    box, words = graph(page, "sgemm")
    drawings = page.get_drawings()
    x_of = axis(words, drawings, box, vertical=False)
    y_of = axis(words, drawings, box, vertical=True)
    want = legend(words, drawings, library)
    lines = [d for d in drawings if style(d) == want and box.contains(d["rect"]) and len(d["items"]) > 5]
    if len(lines) != 1:
        sys.exit(f"{path}: {len(lines)} `{library}` curves in the sgemm graph")
    items = lines[0]["items"]
    pts = [items[0][1]] + [it[2] for it in items]
    xs = [x_of(p.x) for p in pts]
    step = xs[-1] / len(xs)
    out = []
    for p, x in zip(pts, xs):
        n = round(x / step) * step
        if abs(x - n) > 0.1 * step:
            sys.exit(f"{path}: size {x:.1f} is not a multiple of {step:.1f}")
        out.append((int(round(n)), y_of(p.y)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("graphs", nargs="+", help="DEVICE:LIBRARY:THREADS:FILE.pdf")
    a = ap.parse_args()
    rows = []
    for spec in a.graphs:
        device, library, threads, path = spec.split(":", 3)
        threads = int(threads)
        kept = 0
        for n, gflops in curve(path, library):
            if gflops < MIN_GFLOPS:
                continue
            t = 2.0 * n**3 / (gflops * threads * 1e9)
            rows.append([device, "fp32", n, n, n, 0, 0, f"{t:.6g}", threads])
            kept += 1
        print(f"{path}: {library} on {threads} threads, {kept} GEMMs", file=sys.stderr)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow("device,precision,m,n,k,a_transpose,b_transpose,latency_s,threads".split(","))
    w.writerows(rows)
    with gzip.GzipFile(f"{a.out}/gemm.csv.gz", "wb", mtime=0) as f:
        f.write(buf.getvalue().encode())
    print(f"{len(rows)} GEMMs")


if __name__ == "__main__":
    main()
