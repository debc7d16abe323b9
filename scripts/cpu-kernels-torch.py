#!/usr/bin/env python3
"""Times ridgeline's CPU kernel cases in PyTorch (oneDNN and MKL) and writes them as records.

    python3 scripts/cpu-kernels-torch.py IN.jsonl OUT.jsonl

IN is a records file `ridgeline measure gemm|conv|ops` wrote on this machine. Each of its
GEMM, convolution and op records is measured again the way eager PyTorch runs it, at the
record's own thread count (`torch.set_num_threads`): a GEMM as `torch.mm`, a convolution's
forward pass as `F.conv2d`/`F.conv3d` and its backward passes as the one ATen call autograd
makes (`aten.convolution_backward`, asked for the one gradient), an op forward as its
functional call and backward as `torch.autograd.grad` of its output (the autograd engine's
time included, as a training step pays it). The samples follow ridgeline's protocol as
`scripts/cpu-records.sh` sets it (`--warmup`, `--min-samples`, `--min-time`, given here as
seconds) on the same operands each run (warm caches). Each record keeps the case's id,
shape, FLOPs and bytes, and says in `env.framework` what ran it; cases PyTorch has no
matching call for are counted and left out. Needs torch.
"""

import argparse
import datetime
import json
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "fp64": torch.float64}


MAX_SAMPLES = 1000


def sample(fn, warmup, min_samples, min_time):
    """Seconds of each timed call of `fn` after `warmup` seconds of calls: at least
    `min_samples` and `min_time` seconds of them, at most MAX_SAMPLES past the least."""
    start = time.perf_counter()
    fn()
    while time.perf_counter() - start < warmup:
        fn()
    samples = []
    start = time.perf_counter()
    while len(samples) < min_samples or (
        time.perf_counter() - start < min_time and len(samples) < MAX_SAMPLES
    ):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return samples


def gemm(shape, dtype):
    a = torch.rand(shape["m"], shape["k"], dtype=dtype)
    b = torch.rand(shape["k"], shape["n"], dtype=dtype)
    out = torch.empty(shape["m"], shape["n"], dtype=dtype)
    return lambda: torch.mm(a, b, out=out)


def conv(shape, dtype):
    dims = len(shape["input"])
    pads = shape["padding"]
    if any(lo != hi for lo, hi in pads):
        return None
    padding = [lo for lo, _ in pads]
    groups = shape["groups"]
    x = torch.rand(shape["n"], shape["c_in"], *shape["input"], dtype=dtype)
    w = torch.rand(shape["c_out"], shape["c_in"] // groups, *shape["kernel"], dtype=dtype)
    bias = torch.rand(shape["c_out"], dtype=dtype) if shape["bias"] else None
    f = F.conv2d if dims == 2 else F.conv3d if dims == 3 else None
    if f is None:
        return None
    args = dict(stride=shape["stride"], padding=padding, dilation=shape["dilation"], groups=groups)
    if shape["pass"] == "forward":
        return lambda: f(x, w, bias, **args)
    y = f(x, w, bias, **args)
    gy = torch.rand_like(y)
    mask = [shape["pass"] == "backward-data", shape["pass"] == "backward-filter", False]
    bias_sizes = [shape["c_out"]] if shape["bias"] else None
    return lambda: torch.ops.aten.convolution_backward(
        gy, x, w, bias_sizes, shape["stride"], padding, shape["dilation"], False, [0] * dims, groups, mask
    )


def op_call(op, dims):
    """The functional call of an op on one input, or None."""
    kind = op["op"]
    simple = {
        "relu": F.relu,
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "gelu": F.gelu,
        "silu": F.silu,
    }
    if kind in simple:
        return simple[kind]
    if kind == "leaky-relu":
        return lambda x: F.leaky_relu(x, op["alpha"])
    if kind == "scale":
        return lambda x: x * op["factor"]
    if kind == "shift":
        return lambda x: x + op["offset"]
    if kind == "pow":
        return lambda x: torch.pow(x, op["exponent"])
    if kind == "dropout":
        return lambda x: F.dropout(x, op["rate"], training=True)
    if kind in ("max-pool", "avg-pool"):
        if any(lo != hi for lo, hi in op["padding"]):
            return None
        pad = [lo for lo, _ in op["padding"]]
        table = {
            ("max-pool", 2): F.max_pool2d,
            ("max-pool", 3): F.max_pool3d,
            ("avg-pool", 2): F.avg_pool2d,
            ("avg-pool", 3): F.avg_pool3d,
        }
        f = table.get((kind, dims))
        return f and (lambda x: f(x, op["kernel"], op["stride"], pad))
    if kind == "global-avg-pool":
        return lambda x: x.mean(dim=tuple(range(2, x.dim())))
    if kind == "batch-norm":
        return lambda x: F.batch_norm(
            x, None, None, torch.ones(x.shape[1]), torch.zeros(x.shape[1]), training=True
        )
    if kind == "layer-norm":
        # ridgeline's layer norm normalises the first feature axis of (features, positions).
        return lambda x: F.layer_norm(x.transpose(1, -1), (x.shape[1],)).transpose(1, -1)
    if kind == "upsample":
        return lambda x: F.interpolate(x, scale_factor=op["scale_factor"], mode="nearest")
    if kind == "softmax-cross-entropy":
        return None
    return None


def binary_call(kind):
    return {"add": torch.add, "mul": torch.mul}.get(kind)


def op(shape, dtype):
    kind = shape["op"]["op"]
    dims = len(shape["input"]) - 1
    x = torch.rand(shape["batch"], *shape["input"], dtype=dtype)
    backward = shape["pass"] == "backward"
    binary = binary_call(kind)
    if binary is not None:
        y0 = torch.rand_like(x)
        call = lambda v: binary(v, y0)  # noqa: E731
    else:
        call = op_call(shape["op"], dims)
    if call is None:
        return None
    if not backward:
        return lambda: call(x)
    x.requires_grad_(True)
    y = call(x)
    gy = torch.rand_like(y)
    return lambda: torch.autograd.grad(y, x, gy, retain_graph=True)


def framework():
    onednn = torch.backends.mkldnn.version() if hasattr(torch.backends.mkldnn, "version") else None
    config = torch.__config__.show()
    if onednn is None:
        for line in config.splitlines():
            if "MKL-DNN v" in line:
                onednn = line.split("MKL-DNN v")[1].split()[0]
    return f"pytorch {torch.__version__}, oneDNN {onednn}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("records")
    p.add_argument("out")
    p.add_argument("--warmup", type=float, default=0.02)
    p.add_argument("--min-samples", type=int, default=2)
    p.add_argument("--min-time", type=float, default=0.1)
    a = p.parse_args()
    name = framework()
    builders = {"gemm": gemm, "conv": conv, "op": op}
    written, skipped = 0, {}
    with open(a.records) as src, open(a.out, "a") as out:
        for line in src:
            r = json.loads(line)
            build = builders.get(r["kind"])
            dtype = DTYPES.get(r["precision"])
            if build is None or dtype is None or r["device"] != "cpu":
                continue
            torch.set_num_threads(r["threads"])
            with torch.no_grad() if r["kind"] != "op" else torch.enable_grad():
                fn = build(r["shape"], dtype)
                if fn is None:
                    what = r["shape"].get("op", {}).get("op", r["kind"])
                    skipped[what] = skipped.get(what, 0) + 1
                    continue
                r["samples_s"] = sample(fn, a.warmup, a.min_samples, a.min_time)
            env = r["env"]
            env["framework"] = name
            env["timestamp"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            env.pop("slurm", None)
            r.pop("extra", None)
            out.write(json.dumps(r, separators=(",", ":")) + "\n")
            out.flush()
            written += 1
    print(f"{a.out}: {written} records by {name}; left out (no matching call): {skipped or 'none'}", file=sys.stderr)


if __name__ == "__main__":
    main()
