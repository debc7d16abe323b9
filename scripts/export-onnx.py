#!/usr/bin/env python3
"""Exports a Hugging Face language model to ONNX without its weights, as a fixture of
`ridgeline workload import`.

The model is built from its configuration (random weights: nothing is downloaded), run in
eval mode with eager attention, and exported by `torch.onnx.export` (opset 17, static shapes:
batch 1 and `--seq-len` tokens). Then every floating-point weight is replaced by a
`ConstantOfShape` of its shape, as the ONNX backend tests' `light` models hold theirs, so the
file keeps the graph and the shapes (a few hundred KB, not half a gigabyte). A head tied to
the token embeddings, which the exporter writes as a transposed copy of the table, becomes
a `Transpose` of the table: the tie stays in the graph, where the copy's data showed it.

The committed fixtures were written by

    python3 scripts/export-onnx.py gpt2 --seq-len 64 --out tests/fixtures/onnx/gpt2-seq64.onnx
    python3 scripts/export-onnx.py bert-large --seq-len 64 \
        --out tests/fixtures/onnx/bert-large-seq64.onnx
    python3 scripts/export-onnx.py opt-1.3b --seq-len 64 --out tests/fixtures/onnx/opt-1.3b-seq64.onnx

with torch 2.5.1, transformers 4.46.3 and onnx 1.23.2 on the CPU.
"""

import argparse
import os

import numpy as np
import onnx
import torch
import transformers
from onnx import helper, numpy_helper


def build(name: str) -> torch.nn.Module:
    if name == "gpt2":
        # The configuration of Hugging Face's `gpt2` (124M): the library's defaults.
        config = transformers.GPT2Config(attn_implementation="eager")
        return transformers.GPT2LMHeadModel(config).eval()
    if name == "bert-large":
        # google-bert/bert-large-uncased's configuration (data/catalog/transformers/
        # bert-large.toml), trained as BertForPreTraining: masked-LM and next-sentence heads.
        config = transformers.BertConfig(
            vocab_size=30522,
            hidden_size=1024,
            num_hidden_layers=24,
            num_attention_heads=16,
            intermediate_size=4096,
            attn_implementation="eager",
        )
        return transformers.BertForPreTraining(config).eval()
    if name == "opt-1.3b":
        # facebook/opt-1.3b's configuration (data/catalog/transformers/opt-1.3b.config.toml).
        config = transformers.OPTConfig(
            vocab_size=50272,
            hidden_size=2048,
            num_hidden_layers=24,
            ffn_dim=8192,
            num_attention_heads=32,
            max_position_embeddings=2048,
            word_embed_proj_dim=2048,
            attn_implementation="eager",
        )
        return transformers.OPTForCausalLM(config).eval()
    raise SystemExit(f"unknown model {name}: gpt2, bert-large, opt-1.3b")


def strip(model: onnx.ModelProto, tied: tuple[str, str] | None) -> None:
    g = model.graph
    nodes = []
    keep = []
    for t in g.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            keep.append(t)
            continue
        if tied and t.name == tied[1]:
            nodes.append(helper.make_node("Transpose", [tied[0]], [t.name], perm=[1, 0]))
            continue
        shape = numpy_helper.from_array(np.array(t.dims, dtype=np.int64), t.name + "/shape")
        nodes.append(helper.make_node("Constant", [], [shape.name], value=shape))
        nodes.append(helper.make_node("ConstantOfShape", [shape.name], [t.name]))
    del g.initializer[:]
    g.initializer.extend(keep)
    # Initializers are graph inputs in old IR versions; the weights no longer are.
    weights = {n.output[0] for n in nodes}
    inputs = [i for i in g.input if i.name not in weights]
    del g.input[:]
    g.input.extend(inputs)
    body = list(g.node)
    del g.node[:]
    g.node.extend(nodes + body)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", help="gpt2, bert-large or opt-1.3b")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.manual_seed(0)
    m = build(a.model)
    ids = torch.randint(0, m.config.vocab_size, (1, a.seq_len))
    tmp = a.out + ".full"
    torch.onnx.export(
        m,
        (ids,),
        tmp,
        opset_version=17,
        input_names=["input_ids"],
        output_names=["logits", "seq_relationship_logits"][: 1 + (a.model == "bert-large")],
        do_constant_folding=True,
    )
    model = onnx.load(tmp)
    os.remove(tmp)
    # The tied head: the initializer equal to the token table transposed.
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    table = next(
        n for n in arrays if n.endswith(("wte.weight", "word_embeddings.weight", "embed_tokens.weight"))
    )
    copy = next(
        (n for n, v in arrays.items() if n != table and v.shape == arrays[table].T.shape
         and np.array_equal(v, arrays[table].T)),
        None,
    )
    strip(model, (table, copy) if copy else None)
    onnx.save(model, a.out)
    print(f"{a.out}: {len(model.graph.node)} nodes, tied head: {copy is not None}")


if __name__ == "__main__":
    main()
