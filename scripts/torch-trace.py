#!/usr/bin/env python3
"""Writes PyTorch profiler (Kineto) traces of ResNet-50 training steps on the CPU or a GPU.

The trace is the Chrome-trace JSON that `torch.profiler` exports, as a user of PyTorch would
record it: `record_shapes=True`, one warm-up step, then the profiled steps, each marked by the
profiler's own `ProfilerStep#N`. With `--ranks N` the model trains data-parallel on N
processes (DistributedDataParallel over gloo, DDP's 25 MiB buckets) and each rank writes its
own trace, `OUT` with `.rankR` before `.json`. `ridgeline import torch-trace` reads them. The
committed fixtures were written by

    python3 scripts/torch-trace.py --batch 2 --size 224 --steps 2 \
        --out tests/fixtures/torch/resnet50-cpu.json && gzip -9 tests/fixtures/torch/resnet50-cpu.json
    python3 scripts/torch-trace.py --batch 2 --size 64 --steps 2 --ranks 2 --threads 1 \
        --out /tmp/ddp.json && gzip -9 -c /tmp/ddp.rank0.json > tests/fixtures/torch/resnet50-ddp2-rank0.json.gz
    python3 scripts/torch-trace.py --batch 2 --size 64 --steps 2 --ranks 4 --threads 1 \
        --out /tmp/ddp4.json && gzip -9 -c /tmp/ddp4.rank0.json > tests/fixtures/torch/resnet50-ddp4-rank0.json.gz

with torch 2.5.1 and torchvision 0.20.1 on the CPU (an Intel Xeon with AMX, 2 cores). With
`--device cuda` the model trains on the GPU (`--amp` in autocast fp16) and the trace holds the
CUDA kernels too; the warm-up step before the profiled ones lets cuDNN pick its algorithms.
Needs torch and torchvision.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision


def train(rank: int, a: argparse.Namespace) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    model = torchvision.models.resnet50().to(dev)
    out = a.out
    if a.ranks > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
        model = torch.nn.parallel.DistributedDataParallel(model)
        stem, ext = os.path.splitext(a.out)
        out = f"{stem}.rank{rank}{ext}"
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(a.batch, 3, a.size, a.size, device=dev)
    y = torch.randint(0, 1000, (a.batch,), device=dev)
    gpu = dev.type == "cuda"
    scaler = torch.amp.GradScaler("cuda", enabled=a.amp)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16, enabled=a.amp):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if gpu:
            torch.cuda.synchronize()

    if gpu:
        torch.backends.cudnn.benchmark = True
        for _ in range(3):
            step()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    schedule = torch.profiler.schedule(wait=0, warmup=1, active=a.steps, repeat=1)
    with torch.profiler.profile(
        activities=activities,
        record_shapes=True,
        schedule=schedule,
    ) as prof:
        for _ in range(1 + a.steps):
            step()
            prof.step()
    prof.export_chrome_trace(out)
    if a.ranks > 1:
        dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=2, help="batch per rank")
    p.add_argument("--size", type=int, default=224, help="input height and width")
    p.add_argument("--steps", type=int, default=2, help="profiled training steps")
    p.add_argument("--threads", type=int, default=2, help="CPU threads per rank")
    p.add_argument("--ranks", type=int, default=1, help="data-parallel processes (gloo)")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU)")
    p.add_argument("--amp", action="store_true", help="autocast fp16 on the GPU (amp-fp16)")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    if a.amp and a.device == "cpu":
        p.error("--amp needs --device cuda")
    if a.device != "cpu" and a.ranks > 1:
        p.error("--ranks runs on the CPU (gloo); a GPU trace is one rank")
    if a.ranks > 1:
        mp.spawn(train, args=(a,), nprocs=a.ranks)
    else:
        train(0, a)


if __name__ == "__main__":
    main()
