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
    python -m experiments.favor_precision encoder OUT.json --model outputs/all-MiniLM-L6-v2 \\
        --text ../shared/data/wikitext-2/valid.txt
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import torch

from experiments.approximation import exact_attention
from linformer_hf.models.modeling_performer import TINY, draw_random_features, favor_attention

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
    q_proj = torch.matmul(cast(qs, half["proj"]), cast(w, half["proj"]).T).to(work)
    k_proj = torch.matmul(cast(ks, half["proj"]), cast(w, half["proj"]).T).to(work)
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


def measure(q, k, v, mask, ms, seeds, dtypes, epsilon=1e-6):
    """Rows {m, variant, dtype, vs_exact, vs_fp32} (means over seeds) for one set of Q, K, V."""
    exact = exact_attention(q, k, v, mask)
    rows_mask = (mask > 0)[:, None, :, None].float()
    out = []
    for m in ms:
        acc = {}
        for seed in range(seeds):
            w = draw_random_features(m, q.shape[-1], True, "chi", torch.Generator().manual_seed(seed))
            reference = favor_attention(q, k, v, mask, w, epsilon=epsilon)
            mine = favor_variant(q, k, v, mask, w, epsilon=epsilon)
            assert rel(mine, reference, rows_mask) < 1e-5, "favor_variant's fp32 path is not favor_attention"
            acc.setdefault(("fp32", "-"), []).append((rel(reference, exact, rows_mask), 0.0))
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
    header = [*keys, "m", "fp32 vs exact", *VARIANTS]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for setting, cells in settings.items():
        base = cells[("fp32", "-")]["vs_exact"]
        row = [f"{x:g}" for x in setting] + [f"{base:.3f}"]
        for variant in VARIANTS:
            cell = cells[(variant, name)]
            row.append(f"{cell['vs_fp32']:.4f} ({cell['vs_exact'] / base:.3f})")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=["random", "encoder"])
    parser.add_argument("output")
    parser.add_argument("--ms", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096], help="random: values of L")
    parser.add_argument("--logit_stds", type=float, nargs="+", default=[0.5, 1.0], help="random")
    parser.add_argument("--head_size", type=int, default=64, help="random: d")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--model", help="encoder: a local BERT-style model directory")
    parser.add_argument("--text", help="encoder: a .txt file")
    parser.add_argument("--seq_len", type=int, default=128)
    parser.add_argument("--max_inputs", type=int, default=4)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    dtypes = (torch.bfloat16, torch.float16)
    start = time.time()
    results = []
    if args.source == "random":
        for logit_std in args.logit_stds:
            for seq_len in args.lengths:
                q, k, v, mask = random_case(seq_len, args.head_size, logit_std)
                for row in measure(q, k, v, mask, args.ms, args.seeds, dtypes):
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
    with open(args.output, "w") as handle:
        json.dump({"args": vars(args), "rows": results}, handle, indent=1)
    for dtype in dtypes:
        print(f"\n{dtype}: error against fp32 FAVOR+ (error against exact / fp32 FAVOR+'s)\n")
        print(markdown(results, dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
