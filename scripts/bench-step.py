"""The side-by-side training-step benchmark behind scripts/bench-step (see there)."""

import json
import statistics
import subprocess
import sys
import time

import torch
import torchvision

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
RIDGELINE = "target/release/ridgeline"
THREADS, BATCH, SIZE, STEPS = 2, 8, 224, 5


def ridgeline_step():
    """Median seconds of ridgeline's measured training steps (one warm-up step first)."""
    out = subprocess.run(
        [RIDGELINE, "measure", "workload", "resnet50", "--batch", str(BATCH), "--input-size", str(SIZE),
         "--threads", str(THREADS), "--steps", str(STEPS), "--format", "json"],
        check=True, capture_output=True, text=True,
    )
    steps = [r for r in json.loads(out.stdout) if r["kind"] == "workload-step"]
    assert len(steps) == 1, f"one step record expected, got {len(steps)}"
    return statistics.median(steps[0]["samples_s"])


def torch_step():
    """Median seconds of PyTorch's training steps: zero the gradients, forward, loss,
    backward, SGD update, as ridgeline's step does, after one warm-up step."""
    torch.manual_seed(0)
    model = torchvision.models.resnet50()
    x = torch.randn(BATCH, 3, SIZE, SIZE)
    y = torch.randint(0, 1000, (BATCH,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss(model(x), y).backward()
        opt.step()

    step()
    samples = []
    for _ in range(STEPS):
        t = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main():
    torch.set_num_threads(THREADS)
    onednn = torch.backends.mkldnn.is_available()
    print(f"torch {torch.__version__} (oneDNN {'on' if onednn else 'off'}), torchvision {torchvision.__version__}; "
          f"ResNet-50 batch {BATCH}, {SIZE}x{SIZE}, fp32, {THREADS} threads, {STEPS} steps per round")
    ours, theirs, ratios = [], [], []
    # Each ratio is taken within a round, PyTorch timed just before and after ridgeline: on a
    # shared machine the speed drifts more between rounds than within one.
    for r in range(ROUNDS):
        t0 = torch_step()
        o = ridgeline_step()
        t1 = torch_step()
        t = (t0 + t1) / 2
        ours.append(o)
        theirs += [t0, t1]
        ratios.append(t / o)
        print(f"  round {r + 1}: ridgeline {o:.3f} s, PyTorch {t0:.3f} / {t1:.3f} s -> {t / o:.2f}x")
    med = statistics.median
    print(
        f"\nridgeline {med(ours):.3f} s, PyTorch {med(theirs):.3f} s per step -> {med(ratios):.2f}x PyTorch's speed "
        f"({min(ratios):.2f}..{max(ratios):.2f}) (target >= 1.00x)"
    )


if __name__ == "__main__":
    main()
