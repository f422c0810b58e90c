#!/usr/bin/env python
"""Which parts of FAVOR+ tolerate bf16 / fp16? The relative error of low-precision variants, measured.

Bidirectional softmax FAVOR+ (the model's `favor_attention`) has four parts that could run in a half type:
  proj      the feature projections x' W^T (the (L x d) @ (d x m) matmuls),
  contract  the two big contractions phi(K)^T V and phi(Q) (phi(K)^T V),
  exp       the log-features, their stabilisers and exp (elementwise, on the projection's half-type output),
  sums      the normaliser: phi(K)^T 1 and phi(Q) (phi(K)^T 1) from half-type features.
`favor_variant` runs FAVOR+ with any subset of them in `dtype` (the rest in fp32; matmuls cast their inputs and
read the output back as fp32). For fp16 contractions V is divided by its largest |v| per (batch, head) first and the
output multiplied back (a scalar that cancels), so that phi(K)^T V <= L / sqrt(m) stays below fp16's 65504.

Reported per setting and variant: ||A - E||_F / ||E||_F against exact softmax attention E, and ||A - F||_F / ||F||_F
against fp32 FAVOR+ F with the same random features, mean over seeded draws of W.

    python -m experiments.favor_precision random OUT.json
    python -m experiments.favor_precision ops  # the aten ops of one FAVOR+ forward
    python -m experiments.favor_precision encoder OUT.json --model outputs/all-MiniLM-L6-v2 \\
        --text ../shared/data/wikitext-2/valid.txt
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

from experiments.approximation import exact_attention
from linformer_hf.models.modeling_performer import TINY, draw_random_features, favor_attention
from linformer_hf.outputs import check_output_file, write_json_atomic
from linformer_hf.training.errors import USER_ERRORS, positive_int, report
from linformer_hf.training.validation import check_model_source

PARTS = ("proj", "contract", "exp", "sums")
# name -> parts in the half type
VARIANTS = {
    "proj": ("proj",),
    "contract": ("contract",),
    "proj+contract": ("proj", "contract"),
    "proj+contract+sums": ("proj", "contract", "sums"),
    "all (naive)": PARTS,
}


def favor_variant(q, k, v, mask, w, dtype=None, parts=(), epsilon=1e-6):
    """Bidirectional softmax FAVOR+ (as `favor_attention`), with `parts` (see PARTS) in `dtype`; fp32 output."""
    half = {part: (dtype if part in parts else None) for part in PARTS}

    def cast(x, dt):
        return x if dt is None else x.to(dt)

    q, k, v, w = q.float(), k.float(), v.float(), w.float()
    m, d = w.shape
    real = mask[:, None, :, None] > 0
    keep = real.float()
    scale = d**-0.25
    qs, ks = q * scale, k * scale
    # proj: the matmul in dtype; exp: its output stays there, and so does all elementwise work up to phi.
    work = half["exp"] if half["exp"] is not None else torch.float32
    # x'^T w = x^T (d^-1/4 w): the half type rounds x and d^-1/4 W, as the model does.
    q_proj = torch.matmul(cast(q, half["proj"]), cast(w * scale, half["proj"]).T).to(work)
    k_proj = torch.matmul(cast(k, half["proj"]), cast(w * scale, half["proj"]).T).to(work)
    log_q = q_proj - qs.to(work).pow(2).sum(-1, keepdim=True) / 2
    log_k = k_proj - ks.to(work).pow(2).sum(-1, keepdim=True) / 2
    phi_q = (torch.exp(log_q - log_q.amax(-1, keepdim=True)) + epsilon) * m**-0.5
    log_k = log_k.masked_fill(~real, float("-inf"))
    stab = log_k.amax(dim=(-1, -2), keepdim=True)
    stab = torch.where(torch.isfinite(stab), stab, 0.0)
    phi_k = (torch.exp(log_k - stab) + epsilon) * m**-0.5 * keep.to(work)
    # contract: phi(K)^T V and phi(Q) (phi(K)^T V) with inputs in dtype (fp32 accumulation inside the matmul).
    ct = half["contract"]
    v_scale = None
    if ct == torch.float16:
        v_scale = v.abs().amax(dim=(-1, -2), keepdim=True).clamp_min(TINY)
        v = v / v_scale
    key_value = torch.matmul(cast(phi_k, ct).transpose(-1, -2), cast(v, ct))
    numerator = torch.matmul(cast(phi_q, ct), cast(key_value, ct)).float()
    if v_scale is not None:
        numerator = numerator * v_scale
    # sums: the normaliser from half-type features (else fp32).
    st = half["sums"]
    key_sum = cast(phi_k, st).sum(dim=-2)[..., None]
    normaliser = torch.matmul(cast(phi_q, st), cast(key_sum, st)).float()
    return numerator / normaliser.clamp_min(TINY)


def rel(a, b, rows):
    return float(((a - b) * rows).norm() / (b * rows).norm())


def measure(q, k, v, mask, ms, seeds, dtypes, epsilon=1e-6, causal=False):
    """Rows {m, variant, dtype, vs_exact, vs_fp32} (means over seeds) for one set of Q, K, V. Causal: the model's
    own `favor_attention(causal=True, feature_dtype=...)` (its projections in the half type) against causal
    attention."""
    exact = exact_attention(q, k, v, mask, causal=causal)
    rows_mask = (mask > 0)[:, None, :, None].float()
    out = []
    for m in ms:
        acc = {}
        for seed in range(seeds):
            w = draw_random_features(m, q.shape[-1], True, "chi", torch.Generator().manual_seed(seed))
            reference = favor_attention(q, k, v, mask, w, epsilon=epsilon, causal=causal)
            acc.setdefault(("fp32", "-"), []).append((rel(reference, exact, rows_mask), 0.0))
            if causal:
                for dtype in dtypes:
                    got = favor_attention(q, k, v, mask, w, epsilon=epsilon, causal=True, feature_dtype=dtype)
                    acc.setdefault(("proj (causal)", str(dtype).split(".")[-1]), []).append(
                        (rel(got, exact, rows_mask), rel(got, reference, rows_mask))
                    )
                continue
            mine = favor_variant(q, k, v, mask, w, epsilon=epsilon)
            assert rel(mine, reference, rows_mask) < 1e-5, "favor_variant's fp32 path is not favor_attention"
            for dtype in dtypes:
                for name, parts in VARIANTS.items():
                    got = favor_variant(q, k, v, mask, w, dtype, parts, epsilon=epsilon)
                    acc.setdefault((name, str(dtype).split(".")[-1]), []).append(
                        (rel(got, exact, rows_mask), rel(got, reference, rows_mask))
                    )
        for (name, dtype), values in acc.items():
            vs_exact = sum(x for x, _ in values) / len(values)
            vs_fp32 = sum(y for _, y in values) / len(values)
            out.append({"m": m, "variant": name, "dtype": dtype, "vs_exact": vs_exact, "vs_fp32": vs_fp32})
    return out


def random_case(seq_len, d, logit_std, seed=0):
    """Q, K with q^T k / sqrt(d) of std `logit_std` (entries N(0, logit_std)), V ~ N(0, 1); one batch, one head."""
    g = torch.Generator().manual_seed(1000 + seed)
    q, k = (torch.randn(1, 1, seq_len, d, generator=g) * math.sqrt(logit_std) for _ in range(2))
    v = torch.randn(1, 1, seq_len, d, generator=g)
    return q, k, v, torch.ones(1, seq_len)


def markdown(rows, dtype):
    """One table per dtype: per setting, fp32 FAVOR+'s error against exact attention, then for each variant its
    error against fp32 FAVOR+ and (in brackets) its error against exact attention over fp32 FAVOR+'s."""
    keys = [key for key in ("logit_std", "L", "layer") if key in rows[0]]
    settings = {}
    for row in rows:
        setting = tuple(row[key] for key in keys) + (row["m"],)
        settings.setdefault(setting, {})[(row["variant"], row["dtype"])] = row
    if "layer" in keys:  # mean over layers
        merged = {}
        for setting, cells in settings.items():
            for cell, row in cells.items():
                merged.setdefault((setting[-1],), {}).setdefault(cell, []).append(row)
        settings = {
            s: {c: {k: sum(r[k] for r in rs) / len(rs) for k in ("vs_exact", "vs_fp32")} for c, rs in cells.items()}
            for s, cells in merged.items()
        }
        keys = []
    name = str(dtype).split(".")[-1]
    variants = [v for v in ("proj (causal)", *VARIANTS) if any((v, name) in cells for cells in settings.values())]
    header = [*keys, "m", "fp32 vs exact", *variants]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for setting, cells in settings.items():
        base = cells[("fp32", "-")]["vs_exact"]
        row = [f"{x:g}" for x in setting] + [f"{base:.3f}"]
        for variant in variants:
            cell = cells[(variant, name)]
            row.append(f"{cell['vs_fp32']:.4f} ({cell['vs_exact'] / base:.3f})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def count_ops(seq_len=64, m=64, d=32, causal=False, **kwargs) -> dict[str, int]:
    """The aten ops one `favor_attention` forward dispatches (batch 2, 4 heads, a padded batch item), by name."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            self.ops[name] = self.ops.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(0)
    dtype = kwargs.pop("input_dtype", torch.float32)
    q, k, v = (torch.randn(2, 4, seq_len, d, generator=g).to(dtype) for _ in range(3))
    mask = torch.ones(2, seq_len)
    mask[1, seq_len * 2 // 3 :] = 0
    w = draw_random_features(m, d, generator=g)
    with Counter() as counter:
        favor_attention(q, k, v, mask, w, causal=causal, chunk_size=16, **kwargs)
    return counter.ops


# Ops that only re-describe memory (no kernel of their own).
VIEW_OPS = {
    "view",
    "_unsafe_view",
    "transpose",
    "permute",
    "expand",
    "unsqueeze",
    "squeeze",
    "slice",
    "select",
    "t",
    "alias",
    "detach",
    "as_strided",
}


def print_op_counts():
    cases = {
        "softmax, fp32": {},
        "softmax, bf16 features": {"feature_dtype": torch.bfloat16},
        "softmax, bf16 features, bf16 inputs (autocast)": {
            "feature_dtype": torch.bfloat16,
            "input_dtype": torch.bfloat16,
        },
        "softmax, fp16 features": {"feature_dtype": torch.float16},
        "relu, fp32": {"kernel": "relu", "epsilon": 1e-3},
    }
    print("| case | bidirectional: ops (not views) | causal, L = 64, 4 chunks: ops (not views) |")
    print("| --- | --- | --- |")
    for name, kwargs in cases.items():
        cells = []
        for causal in (False, True):
            ops = count_ops(causal=causal, **dict(kwargs))
            total = sum(ops.values())
            cells.append(f"{total} ({total - sum(n for op, n in ops.items() if op in VIEW_OPS)})")
        print(f"| {name} | {cells[0]} | {cells[1]} |")


def check_arguments(args) -> None:
    """What can go wrong after the measurement, refused before it: no OUTPUT (or one for `ops`, which writes
    none), an earlier result there, the encoder's model or text missing."""
    if args.source == "ops":
        if args.output is not None:
            raise ValueError(f"ops prints the op counts and writes no file: drop OUTPUT ({args.output}).")
        return
    if args.output is None:
        raise ValueError(f"{args.source} writes its rows to OUTPUT: give the JSON file to write, e.g. favor.json.")
    if args.source == "encoder":
        if not args.model or not args.text:
            raise ValueError("encoder measures a model's own queries and keys: give --model DIR and --text FILE.")
        check_model_source(args.model, "--model")
        if not os.path.isfile(args.text):
            raise FileNotFoundError(f"--text {args.text}: no such file; give a .txt, .tsv or .csv file.")
    check_output_file(args.output, args.overwrite)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=["random", "encoder", "ops"])
    parser.add_argument("output", nargs="?", help="the JSON file to write (random, encoder)")
    parser.add_argument("--ms", type=positive_int, nargs="+", default=[64, 256])
    parser.add_argument(
        "--lengths", type=positive_int, nargs="+", default=[256, 1024, 4096], help="random: values of L"
    )
    parser.add_argument("--logit_stds", type=float, nargs="+", default=[0.5, 1.0], help="random")
    parser.add_argument("--head_size", type=positive_int, default=64, help="random: d")
    parser.add_argument("--seeds", type=positive_int, default=3)
    parser.add_argument("--causal", action="store_true", help="random: causal FAVOR+ (the model's projections only)")
    parser.add_argument("--model", help="encoder: a local BERT-style model directory")
    parser.add_argument("--text", help="encoder: a .txt file")
    parser.add_argument("--seq_len", type=positive_int, default=128)
    parser.add_argument("--max_inputs", type=positive_int, default=4)
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run's OUTPUT")
    args = parser.parse_args(argv)
    try:  # before any measurement
        check_arguments(args)
    except (*USER_ERRORS, OSError, ValueError) as err:
        return report(err)
    torch.set_num_threads(1)
    if args.source == "ops":
        print_op_counts()
        return 0
    dtypes = (torch.bfloat16, torch.float16)
    start = time.time()
    results = []
    if args.source == "random":
        for logit_std in args.logit_stds:
            for seq_len in args.lengths:
                q, k, v, mask = random_case(seq_len, args.head_size, logit_std)
                for row in measure(q, k, v, mask, args.ms, args.seeds, dtypes, causal=args.causal):
                    results.append({"logit_std": logit_std, "L": seq_len, **row})
                print(f"logit std {logit_std} L {seq_len} done, {time.time() - start:.0f}s", file=sys.stderr)
    else:
        from transformers import AutoModel, AutoTokenizer

        from experiments.approximation import teacher_queries_keys
        from experiments.spectrum import read_texts

        tokenizer = AutoTokenizer.from_pretrained(args.model)
        model = AutoModel.from_pretrained(args.model)
        texts = read_texts(args.text, limit=args.max_inputs)
        batch = tokenizer(texts, truncation=True, max_length=args.seq_len, padding=True, return_tensors="pt")
        mask = batch["attention_mask"].float()
        pairs = teacher_queries_keys(model, batch["input_ids"], mask)
        seq_len = mask.shape[1]
        for layer, (q, k) in enumerate(pairs):
            v = torch.eye(seq_len).expand(q.shape[0], q.shape[1], seq_len, seq_len)  # V = I: attention matrices
            for row in measure(q, k, v, mask, args.ms, args.seeds, dtypes):
                results.append({"layer": layer, **row})
            print(f"layer {layer} done, {time.time() - start:.0f}s", file=sys.stderr)
    write_json_atomic(args.output, {"args": vars(args), "rows": results})
    for dtype in dtypes:
        print(f"\n{dtype}: error against fp32 FAVOR+ (error against exact / fp32 FAVOR+'s)\n")
        print(markdown(results, dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
