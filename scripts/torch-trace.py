#!/usr/bin/env python3
"""Writes a PyTorch profiler (Kineto) trace of ResNet-50 training steps on the CPU.

The trace is the Chrome-trace JSON that `torch.profiler` exports, as a user of PyTorch would
record it: `record_shapes=True`, one warm-up step, then the profiled steps, each marked by the
profiler's own `ProfilerStep#N`. `ridgeline import torch-trace` reads it. The committed fixture
`tests/fixtures/torch/resnet50-cpu.json.gz` was written by

    python3 scripts/torch-trace.py --batch 2 --size 224 --steps 2 \
        --out tests/fixtures/torch/resnet50-cpu.json && gzip -9 tests/fixtures/torch/resnet50-cpu.json

with torch 2.5.1 and torchvision 0.20.1 on the CPU (2 threads; an Intel Xeon with AMX). Needs
torch and torchvision.
"""

import argparse

import torch
import torchvision


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--size", type=int, default=224, help="input height and width")
    p.add_argument("--steps", type=int, default=2, help="profiled training steps")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    model = torchvision.models.resnet50()
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, 1000, (a.batch,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    schedule = torch.profiler.schedule(wait=0, warmup=1, active=a.steps, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule,
    ) as prof:
        for _ in range(1 + a.steps):
            step()
            prof.step()
    prof.export_chrome_trace(a.out)


if __name__ == "__main__":
    main()
