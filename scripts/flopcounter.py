#!/usr/bin/env python3
"""PyTorch's own FLOP count (torch.utils.flop_counter.FlopCounterMode) of one training step
of each built-in transformer, written as ridgeline's reference data
(data/evidence/reference/flopcounter.toml). Needs torch and transformers (not CI: the file is
committed, and a test compares ridgeline's counts with it).

Each model is built from its configuration as ridgeline builds it
(data/catalog/transformers/*.toml, Hugging Face's field names), on PyTorch's meta device
(shapes only, no weights or arithmetic), with eager attention (the unfused QK^T, softmax, AV
that ridgeline's `attention` op describes), dropout off (it has no matrix product), batch 1 at the model's full
context. FlopCounterMode counts the matrix products (mm, addmm, bmm, baddbmm: 2 m n k) of the
forward pass and of the backward pass separately.

Usage: python3 scripts/flopcounter.py > data/evidence/reference/flopcounter.toml
"""
import sys
import tomllib

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

MODELS = ["gpt2", "gpt2-large", "gpt3-xl", "gpt3-2.7b", "opt-1.3b", "bert-large"]
HEADS = {"gpt2": "GPT2LMHeadModel", "opt": "OPTForCausalLM", "bert": "BertForPreTraining"}


def count(name):
    with open(f"data/catalog/transformers/{name}.config.toml", "rb") as f:
        fields = tomllib.load(f)
    fields.pop("source", None)
    model_type = fields.pop("model_type")
    config = transformers.AutoConfig.for_model(model_type, **fields)
    config._attn_implementation = "eager"
    seq = getattr(config, "n_positions", None) or config.max_position_embeddings
    with torch.device("meta"):
        model = getattr(transformers, HEADS[model_type])(config)
        # Dropout costs no matrix products; eval mode spares OPT's layer-drop draw, which
        # meta tensors cannot take.
        model.eval()
        ids = torch.zeros((1, seq), dtype=torch.long)
        inputs = {"input_ids": ids, "labels": ids}
        if model_type == "bert":
            inputs["token_type_ids"] = ids
            inputs["attention_mask"] = torch.ones((1, seq), dtype=torch.long)
            inputs["next_sentence_label"] = torch.zeros((1,), dtype=torch.long)
        fwd = FlopCounterMode(display=False)
        with fwd:
            loss = model(**inputs).loss
        bwd = FlopCounterMode(display=False)
        with bwd:
            loss.backward()
    params = sum(p.numel() for p in model.parameters())
    return seq, params, fwd.get_total_flops(), bwd.get_total_flops()


def main():
    out = sys.stdout
    out.write(
        "# PyTorch's FLOP count of one training step of each built-in transformer, batch 1 at its\n"
        "# full context: torch.utils.flop_counter.FlopCounterMode around the forward pass and the\n"
        "# backward pass of the Hugging Face model built from ridgeline's configuration file on\n"
        "# the meta device, eager attention, dropout off. It counts matrix products only\n"
        "# (2 m n k each). Written by scripts/flopcounter.py; the model's counts are checked\n"
        "# against it by a test.\n\n"
        "[sources]\n"
        f"flopcounter = \"torch {torch.__version__} FlopCounterMode, transformers {transformers.__version__}, "
        "scripts/flopcounter.py\"\n"
    )
    for name in MODELS:
        seq, params, fwd, bwd = count(name)
        out.write(
            f"\n[[model]]\nname = \"{name}\"\nseq = {seq}\nbatch = 1\n"
            f"params = {{ value = {params}, source = \"flopcounter\" }}\n"
            f"flops_fwd = {{ value = {fwd}, source = \"flopcounter\" }}\n"
            f"flops_bwd = {{ value = {bwd}, source = \"flopcounter\" }}\n"
        )
        out.flush()


if __name__ == "__main__":
    main()
