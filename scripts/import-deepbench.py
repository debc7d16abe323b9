#!/usr/bin/env python3
"""Convert DeepBench's published training results into ridgeline's published kernel set.

DeepBench (Baidu Research, Apache-2.0) timed cuBLAS GEMMs and cuDNN convolutions, forward and
both gradients, in FP32 and in FP16 on tensor cores on NVIDIA GPUs, and MKL's SGEMM and
convolutions in FP32 on Intel's Xeon Phi 7250, and published the times as Excel workbooks
(results/train/DeepBench_NV_<GPU>.xlsx, DeepBench_IA_KNL7250.xlsx). This script reads the FP32
sheet ("Results FP32", in the Intel workbook "Results - FP32") and the FP16 one ("Results -
FP16 ip, Mixed math", where the workbook has it) of each workbook given and writes, under
OUT:

  gemm.csv.gz  device,precision,m,n,k,a_transpose,b_transpose,latency_s
  conv.csv.gz  device,precision,pass,n,c_in,c_out,h,w,r,s,pad_h,pad_w,stride_h,stride_w,latency_s

with the shapes that ran: in FP16 DeepBench pads a tensor-core GEMM's dimensions to multiples of 8
(code/nvidia/gemm_bench.cu: m and k for NN and TN, m and n for NT, all three for TT) and a
convolution's input and output channels to multiples of 8 when either is not one
(code/nvidia/conv_bench.cu), and this script applies the same rule. Kernels shorter than
MIN_US microseconds are left out (see SOURCE.toml). `ridgeline validate transfer` reads the
set (--published): it predicts every GPU kernel, and fits the tensor-core classes on the FP16
ones; with --cpu it fits the CPU kernel model on the CPU kernels beside ridgeline's own.

Usage: scripts/import-deepbench.py --commit SHA --out data/evidence/kernels/deepbench \
           V100=v100-sxm2-16gb:DeepBench_NV_V100.xlsx T4=t4:DeepBench_NV_T4.xlsx
       scripts/import-deepbench.py --commit SHA --out data/evidence/kernels/deepbench-knl \
           KNL=xeon-phi-7250f:DeepBench_IA_KNL7250.xlsx

Needs openpyxl (pip install openpyxl); not needed by the tests, which read the CSV files.
"""

import argparse
import csv
import gzip
import io
import sys

# The sheet of each format, by the names the workbooks give it (the Intel workbook spells
# FP32's `Results - FP32` and has no FP16 sheet).
SHEETS = {"fp32": ("Results FP32", "Results - FP32"), "fp16": ("Results - FP16 ip, Mixed math",)}
MIN_US = 20.0


def pad8(v):
    return (v + 7) // 8 * 8


def rows_of(path, names):
    """The rows of the first sheet of `names` the workbook has; None where it has none."""
    import openpyxl

    wb = openpyxl.load_workbook(path, data_only=True, read_only=True)
    sheet = next((n for n in names if n in wb.sheetnames), None)
    if sheet is None:
        return None
    return list(wb[sheet].iter_rows(values_only=True))


def section(rows, title):
    """The rows of the table under a section title (column 0), up to the next title."""
    start = next(i for i, r in enumerate(rows) if r and r[0] == title)
    out = []
    for r in rows[start + 1 :]:
        if r and r[0] is not None:
            break
        if r and isinstance(r[2], (int, float)):
            out.append(r)
    return out


def ms(v):
    return float(v) / 1e3 if isinstance(v, (int, float)) else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("workbooks", nargs="+", help="GPU=device:file.xlsx")
    a = ap.parse_args()
    gemm, conv = [], []
    for spec in a.workbooks:
        _, rest = spec.split("=", 1)
        device, path = rest.split(":", 1)
        for precision, names in SHEETS.items():
            half = precision == "fp16"
            rows = rows_of(path, names)
            if rows is None:
                print(f"{path}: no {precision} sheet ({', '.join(names)}); skipped", file=sys.stderr)
                continue
            for r in section(rows, "Dense Matrix Multiplication"):
                m, n, k, at, bt, t = r[2], r[3], r[4], r[5] == "T", r[6] == "T", ms(r[8])
                if t is None:
                    continue
                if not half:
                    pass  # DeepBench pads only tensor-core shapes
                elif (not at and not bt) or (at and not bt):
                    m, k = pad8(m), pad8(k)
                elif not at and bt:
                    m, n = pad8(m), pad8(n)
                else:
                    m, n, k = pad8(m), pad8(n), pad8(k)
                if t * 1e6 >= MIN_US:
                    gemm.append([device, precision, m, n, k, int(at), int(bt), f"{t:.6g}"])
            for r in section(rows, "Convolution"):
                w, h, c, nb, kk, s, rr, pw, ph, sw, sh = r[2:13]
                if half and (c % 8 or kk % 8):
                    c, kk = pad8(c), pad8(kk)
                for name, col in (("forward", 13), ("backward-data", 14), ("backward-filter", 15)):
                    t = ms(r[col])
                    if t is not None and t * 1e6 >= MIN_US:
                        conv.append(
                            [device, precision, name, nb, c, kk, h, w, rr, s, ph, pw, sh, sw, f"{t:.6g}"]
                        )

    def write(name, header, body):
        buf = io.StringIO()
        wr = csv.writer(buf, lineterminator="\n")
        wr.writerow(header)
        wr.writerows(body)
        with gzip.GzipFile(f"{a.out}/{name}", "wb", mtime=0) as f:
            f.write(buf.getvalue().encode())

    write("gemm.csv.gz", "device,precision,m,n,k,a_transpose,b_transpose,latency_s".split(","), gemm)
    write(
        "conv.csv.gz",
        "device,precision,pass,n,c_in,c_out,h,w,r,s,pad_h,pad_w,stride_h,stride_w,latency_s".split(","),
        conv,
    )
    print(f"{len(gemm)} GEMMs, {len(conv)} convolution passes")


if __name__ == "__main__":
    main()
