#!/usr/bin/env python3
"""Exports torchvision's classification models to ONNX without their weights, as fixtures of
`ridgeline workload show` (issue 44), and writes PyTorch's own counts of them as reference
data.

Each model is built by torchvision with random weights (`weights=None`: nothing is
downloaded), in eval mode, and exported by `torch.onnx.export` (the TorchScript exporter,
opset 17, batch 1, 3 x 224 x 224, constants unfolded so that each batch norm stays a
`BatchNormalization` node rather than folded into its convolution). Every floating-point weight is then replaced by a
`ConstantOfShape` of its shape (scripts/export-onnx.py's `strip`), so a fixture keeps the
graph and the shapes in a few hundred KB. Beside them, `data/evidence/reference/torchvision.toml`
holds each model's trainable parameters (`sum(p.numel())`) and the forward FLOPs that
`torch.utils.flop_counter.FlopCounterMode` counts at batch 1 (its matrix products and
convolutions, `2 m n k`), with the versions that counted them. The count runs with
`nn.MultiheadAttention`'s inference fast path off (`torch.backends.mha`): training never
takes it, the export does not either, and FlopCounterMode does not see inside its fused
kernel (ViT-B/16's projections and attention would go uncounted).

Usage (not CI: the fixtures and the reference file are committed):

    python3 scripts/export-torchvision.py --out tests/fixtures/onnx \\
        --reference data/evidence/reference/torchvision.toml

Written with torch 2.15.0, torchvision 0.29.2 and onnx 1.23.2 on the CPU.
"""

import argparse
import importlib.util
import os
import sys

import onnx
import torch
import torchvision
from torch.utils.flop_counter import FlopCounterMode

MODELS = [
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "regnet_y_400mf",
    "convnext_tiny",
    "vit_b_16",
    "swin_t",
    "densenet121",
    "shufflenet_v2_x1_0",
    "vit_tiny",
]

# Small members of the zoo's families, built by torchvision's own classes, for the tests
# that run a training step on the CPU: (constructor, input side).
SMALL = {
    # ViT's layers at 3 x 32 x 32: patches of 8, two encoder layers of two heads.
    "vit_tiny": (
        lambda: torchvision.models.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
            mlp_dim=32, num_classes=10,
        ),
        32,
    ),
}


def strip_weights():
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("export_onnx", os.path.join(here, "export-onnx.py"))
    module = importlib.util.module_from_spec(spec)
    # export-onnx.py imports transformers at the top; it is not needed here.
    sys.modules.setdefault("transformers", type(sys)("transformers"))
    spec.loader.exec_module(module)
    return module.strip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder of the fixtures")
    p.add_argument("--reference", required=True, help="the reference TOML to write")
    p.add_argument("models", nargs="*", default=MODELS)
    a = p.parse_args()
    strip = strip_weights()
    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)
    rows = []
    for name in a.models:
        if name in SMALL:
            build, side = SMALL[name]
            model = build().eval()
        else:
            model, side = getattr(torchvision.models, name)(weights=None).eval(), 224
        x = torch.randn(1, 3, side, side)
        params = sum(p.numel() for p in model.parameters() if p.requires_grad)
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(x)
        flops = counter.get_total_flops()
        path = os.path.join(a.out, f"tv-{name}.onnx")
        tmp = path + ".full"
        torch.onnx.export(
            model,
            (x,),
            tmp,
            opset_version=17,
            input_names=["input"],
            output_names=["logits"],
            # Folding constants would fold each batch norm into its convolution.
            do_constant_folding=False,
            dynamo=False,
        )
        m = onnx.load(tmp)
        os.remove(tmp)
        strip(m, None)
        onnx.save(m, path)
        print(f"{path}: {len(m.graph.node)} nodes, {params} parameters, {flops} forward FLOPs",
              file=sys.stderr)
        rows.append((name, params, flops))
    with open(a.reference, "w") as f:
        f.write(
            "# torchvision's classification models at batch 1, 3 x 224 x 224 (the small ones\n"
            "# of SMALL in the script at their own sizes): trainable\n"
            "# parameters and the forward FLOPs torch.utils.flop_counter.FlopCounterMode counts\n"
            "# (matrix products and convolutions, 2 m n k; attention's fast path off, as in\n"
            "# training), as scripts/export-torchvision.py\n"
            f"# wrote them with torch {torch.__version__} and torchvision {torchvision.__version__}\n"
            "# (random weights; the counts do not depend on them). The ONNX exports are\n"
            "# tests/fixtures/onnx/tv-<model>.onnx.\n"
        )
        for name, params, flops in rows:
            f.write(f"\n[{name}]\nparams = {params}\nforward_flops = {flops}\n")


if __name__ == "__main__":
    main()
