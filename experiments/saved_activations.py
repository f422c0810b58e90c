#!/usr/bin/env python
"""What one layer keeps for backward: the bytes autograd saves in a training forward, by tensor shape and dtype.

One layer of each model at the given width (base: d = 768, 12 heads, d_ff = 3072, Performer m = 256), dropout 0 as in
the benchmark, fp32 weights, input (batch, L, d) in fp32, the forward under `torch.autocast(dtype=bf16)` (as the GPU
benchmark trains). Every tensor autograd saves is caught by `torch.autograd.graph.saved_tensors_hooks` and counted
once per storage (several saved views of one tensor are one allocation); the layer's parameters and buffers are left
out (they are the weights, not activations; autocast's bf16 copies of the weights are counted, as they are kept), and
so is what a node saved that the forward then dropped (freed before backward).
`--compiled` measures the layer compiled with `torch.compile(fullgraph=True)` (inductor) instead: the saved tensors are
then what AOTAutograd's forward graph hands to its backward graph.

Models: `roberta-sdpa` (transformers' RobertaLayer, SDPA), `performer` (fp32 feature maps), `performer-bf16`
(`feature_map_dtype="bfloat16"`), and each Performer with `-recompute` (`recompute_feature_maps=True`).

    python -m experiments.saved_activations OUT.json                 # n = 4096, batch 1, eager
    python -m experiments.saved_activations OUT.json --compiled      # the same compiled (minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import weakref

import torch

from linformer_hf.outputs import check_output_file, write_json_atomic
from linformer_hf.training.errors import positive_int, report

MODELS = (
    "roberta-sdpa",
    "performer",
    "performer-bf16",
    "performer-recompute",
    "performer-bf16-recompute",
)


def build_layer(model: str, hidden_size: int, heads: int, intermediate_size: int, num_random_features: int):
    """One layer of `model` in training mode, dropout 0."""
    shape = dict(
        hidden_size=hidden_size,
        num_attention_heads=heads,
        intermediate_size=intermediate_size,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    if model == "roberta-sdpa":
        from transformers import RobertaConfig
        from transformers.models.roberta.modeling_roberta import RobertaLayer

        return RobertaLayer(RobertaConfig(**shape, attn_implementation="sdpa")).train()
    from linformer_hf import PerformerConfig
    from linformer_hf.models.modeling_performer import PerformerLayer

    config = PerformerConfig(
        **shape,
        num_random_features=num_random_features,
        feature_map_dtype="bfloat16" if "bf16" in model else "float32",
        recompute_feature_maps=model.endswith("-recompute"),
    )
    layer = PerformerLayer(config, 0).train()
    layer.attention.self.redraw_features(torch.Generator().manual_seed(0))
    return layer


def saved_tensors(layer, hidden_states, mask, compiled: bool) -> list[tuple[tuple[int, ...], str, int]]:
    """(shape, dtype, bytes of its storage) of each distinct storage saved for backward by one forward of `layer`."""
    run = layer
    if compiled:
        run = torch.compile(layer, fullgraph=True)
        with torch.autocast(hidden_states.device.type, dtype=torch.bfloat16):
            output = run(hidden_states, mask)
        (output[0] if isinstance(output, tuple) else output).float().sum().backward()  # compiles forward and backward
    # Weak references to what each node keeps: a node that the forward drops (an amax whose result is detached)
    # frees what it saved, which is then not counted. The holder keeps the tensor detached: the tensor itself, when
    # it is the node's own output, would keep the node alive (node -> holder -> output -> node). Forward only: this
    # measurement never unpacks.
    saved = []

    def pack(tensor):
        holder = Saved(tensor.detach())
        saved.append(weakref.ref(holder))
        return holder

    with torch.autocast(hidden_states.device.type, dtype=torch.bfloat16):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda holder: holder.tensor):
            output = run(hidden_states, mask)
    own = {t.untyped_storage().data_ptr() for t in [*layer.parameters(), *layer.buffers()]}
    kept = {}
    for ref in saved:
        holder = ref()
        if holder is not None and holder.tensor.untyped_storage().data_ptr() not in own:
            tensor, storage = holder.tensor, holder.tensor.untyped_storage()
            kept[storage.data_ptr()] = (tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), storage.nbytes())
    del output
    return list(kept.values())


class Saved:
    """What autograd keeps in place of a saved tensor while it is measured."""

    def __init__(self, tensor):
        self.tensor = tensor


def markdown(rows: list[dict], baseline: str = "roberta-sdpa") -> str:
    """One line per model: MiB kept per layer, against the baseline; then each model's largest groups."""
    base = next((r["bytes"] for r in rows if r["model"] == baseline), None)
    lines = ["| model | MiB kept per layer | tensors | against " + baseline + " |", "| --- | --- | --- | --- |"]
    for r in rows:
        ratio = f"{r['bytes'] / base:.2f}x" if base else "-"
        lines.append(f"| {r['model']} | {r['bytes'] / 2**20:.1f} | {r['tensors']} | {ratio} |")
    for r in rows:
        lines.append(f"\n{r['model']}, by shape and dtype (MiB):")
        for group in r["groups"][:8]:
            lines.append(f"  {str(tuple(group['shape'])):28s} {group['dtype']:9s} {group['bytes'] / 2**20:8.1f}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", help="the JSON file to write")
    parser.add_argument("--length", type=positive_int, default=4096, help="n, tokens a sequence")
    parser.add_argument("--batch", type=positive_int, default=1)
    parser.add_argument("--hidden_size", type=positive_int, default=768)
    parser.add_argument("--heads", type=positive_int, default=12)
    parser.add_argument("--intermediate_size", type=positive_int, default=3072)
    parser.add_argument("--num_random_features", type=positive_int, default=256, help="Performer's m")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--compiled", action="store_true", help="torch.compile(fullgraph=True) each layer first")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run's OUTPUT")
    args = parser.parse_args(argv)
    try:  # before any layer is built
        if args.hidden_size % args.heads:
            raise ValueError(f"--hidden_size {args.hidden_size} is not a multiple of --heads {args.heads}: change one.")
        check_output_file(args.output, args.overwrite)
    except (OSError, ValueError) as err:
        return report(err)
    torch.manual_seed(0)
    hidden_states = torch.randn(args.batch, args.length, args.hidden_size, requires_grad=True)
    padding_mask = torch.ones(args.batch, args.length)
    rows = []
    for model in args.models:
        start = time.time()
        torch._dynamo.reset()
        layer = build_layer(model, args.hidden_size, args.heads, args.intermediate_size, args.num_random_features)
        # RoBERTa-SDPA takes no mask for an unpadded batch (transformers drops it); a Performer takes the padding mask
        mask = None if model == "roberta-sdpa" else padding_mask
        kept = saved_tensors(layer, hidden_states, mask, args.compiled)
        groups = collections.Counter()
        for shape, dtype, size in kept:
            groups[(shape, dtype)] += size
        rows.append(
            {
                "model": model,
                "bytes": sum(size for *_, size in kept),
                "tensors": len(kept),
                "groups": [
                    {"shape": list(shape), "dtype": dtype, "bytes": size}
                    for (shape, dtype), size in sorted(groups.items(), key=lambda item: -item[1])
                ],
            }
        )
        print(f"{model} done, {time.time() - start:.0f}s", file=sys.stderr)
    write_json_atomic(args.output, {"args": vars(args), "torch": torch.__version__, "rows": rows})
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
