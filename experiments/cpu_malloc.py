"""Does glibc's malloc cost CPU training steps time? One masked-LM training step (forward, backward, AdamW) of the books
plan's models, timed in child processes that differ only in their malloc settings, run in turn (A, B, A, B, ...).

PyTorch's CPU tensors come from glibc's malloc, which serves each block over 32 MB (the largest mmap threshold glibc
accepts) with a fresh mmap and returns it at free: every step faults its large activations in again, page by page,
in the kernel. `glibc.malloc.mmap_max=0` serves them from the heap instead, and a high `trim_threshold` keeps the
freed heap, so later steps reuse pages already mapped, at the cost of a higher resident peak. Each step draws its
own 15% mask, as pretraining does, so the LM head's blocks change size from step to step; the resident memory after
the warm-up and after the last step shows whether the kept heap stays bounded (fragmentation grows it).

    python -m experiments.cpu_malloc --rounds 3 --steps 10
    python -m experiments.cpu_malloc --rounds 1 --steps 60     # how the resident memory grows
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from linformer_hf.cli import ArgumentParser
from linformer_hf.training.errors import positive_int

SETTINGS = {
    "default": None,
    "heap (mmap_max=0, trim_threshold=16 GiB)": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184",
}
BOOKS = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024, vocab_size=32768)
MINILM = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536, vocab_size=30522)
# the books plan's shapes (configs/books/figure3.yaml: 4 layers, width 256, 4,096 tokens a step), and the MiniLM head
# fit's (configs/pretrain/fit_mlm_head_books.yaml: all-MiniLM-L6-v2's shape, 16 x 512 tokens a step)
MODELS = {
    "roberta-sdpa n=512": dict(model_type="roberta", n=512, k=None, tokens=4096, width=BOOKS),
    "linformer n=1024 k=256": dict(model_type="linformer", n=1024, k=256, tokens=4096, width=BOOKS),
    "bert (all-MiniLM-L6-v2) n=512": dict(model_type="bert", n=512, k=None, tokens=8192, width=MINILM),
}


def resident_gb() -> float:
    """The process's resident memory now (not its peak), from /proc."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


def child(model_type: str, n: int, k: int | None, tokens: int, width: dict, steps: int) -> dict:
    import resource
    import time

    import torch
    from transformers import BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

    from linformer_hf import LinformerConfig, LinformerForMaskedLM

    torch.manual_seed(0)
    if model_type == "roberta":
        model = RobertaForMaskedLM(RobertaConfig(max_position_embeddings=n + 2, attn_implementation="sdpa", **width))
    elif model_type == "bert":
        model = BertForMaskedLM(BertConfig(max_position_embeddings=n, attn_implementation="sdpa", **width))
    else:
        model = LinformerForMaskedLM(LinformerConfig(max_sequence_length=n, projected_length=k, **width))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(5, width["vocab_size"], (tokens // n, n))  # (batch, n)
    masks = torch.Generator().manual_seed(1)  # the same masks, in the same order, under every setting
    kwargs = {"logits_for_labels_only": True} if model_type == "linformer" else {}

    def step() -> float:
        labels = torch.where(torch.rand(ids.shape, generator=masks) < 0.15, ids, -100)  # a fresh mask each step
        if model_type in ("roberta", "bert"):  # the pretraining trainer's path: the LM head at the labelled positions
            encoder = model.roberta if model_type == "roberta" else model.bert
            hidden = encoder(input_ids=ids).last_hidden_state  # (batch, n, d)
            labelled = labels != -100
            head = model.lm_head if model_type == "roberta" else model.cls
            logits = head(hidden[labelled])  # (num_labelled, vocab)
            loss = torch.nn.functional.cross_entropy(logits, labels[labelled])
        else:
            loss = model(input_ids=ids, labels=labels, **kwargs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(3):  # warm-up: AdamW's state, the first faults
        step()
    times = []
    warm_rss = resident_gb()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "step_s": statistics.median(times),
        "user_s": (after.ru_utime - before.ru_utime) / steps,
        "sys_s": (after.ru_stime - before.ru_stime) / steps,
        "faults": (after.ru_minflt - before.ru_minflt) / steps,
        "max_rss_gb": after.ru_maxrss / 2**20,
        "rss_warm_gb": warm_rss,  # after the 3 untimed steps
        "rss_last_gb": resident_gb(),  # after the last timed step: above rss_warm_gb, the heap kept growing
        "last_loss": loss,  # equal under every setting: malloc changes where tensors live, not what they hold
    }


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=3, help="times each setting runs, alternating")
    parser.add_argument("--steps", type=positive_int, default=10, help="timed steps per run (after 3 untimed)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS), metavar="MODEL",
                        help=f"which shapes to run (default: all): {', '.join(repr(m) for m in MODELS)}")  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(**json.loads(args.child), steps=args.steps)))
        return
    print(f"load average before: {os.getloadavg()}")
    for model in args.models:
        shape = MODELS[model]
        runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
        for _ in range(args.rounds):
            for name, tunables in SETTINGS.items():
                env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
                if tunables:
                    env["GLIBC_TUNABLES"] = tunables
                child_args = ["--steps", str(args.steps), "--child", json.dumps(shape)]
                cmd = [sys.executable, "-m", "experiments.cpu_malloc", *child_args]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode != 0:  # one line, the child's last, not a traceback of the parent
                    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                    failed = f"the {model} step under malloc setting {name!r} failed ({done.returncode})"
                    sys.exit(f"error: {failed}: {last}")
                runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
        base = statistics.median(r["step_s"] for r in runs["default"])
        print(f"\n{model} ({shape['tokens']:,} tokens a step; medians of {args.rounds} runs of {args.steps} steps)")
        print(
            "| malloc | step (s) | vs default | user (s) | sys (s) | page faults | peak RSS (GB) "
            "| RSS after warm-up -> last step (GB) | last loss |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, rs in runs.items():
            med = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
            print(
                f"| {name} | {med['step_s']:.3f} | {base / med['step_s']:.2f}x | {med['user_s']:.3f} | "
                f"{med['sys_s']:.3f} | {med['faults']:,.0f} | {med['max_rss_gb']:.2f} | "
                f"{med['rss_warm_gb']:.2f} -> {med['rss_last_gb']:.2f} | {rs[0]['last_loss']!r} |"
            )
        same = len({r["last_loss"] for rs in runs.values() for r in rs}) == 1
        print(f"the same last loss in every run: {same}")
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
