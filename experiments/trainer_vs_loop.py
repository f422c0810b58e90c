"""Masked-LM pretraining on the `Trainer` (this checkout) against the hand-written loop it replaced: the same recipe
run through each checkout's ``python -m linformer_hf.training.pretrain``, compared on every update's loss (the update
log) and on the final weights (``final/model.safetensors``).

    git worktree add /tmp/loop bccc055      # a commit that still pretrains on the loop
    python -m experiments.trainer_vs_loop --loop_checkout /tmp/loop --out /tmp/trainer_vs_loop

The recipe: configs/model/tiny_test.yaml (dropout 0.1), WikiText-2 validation text, blocks of 64 tokens, batch 8,
lr 2e-3, clipping 1.0, the same seed, 12 updates. The comparisons:

1. accumulation 1, 40 training blocks (5 updates an epoch): the loop's and the Trainer's normalisations agree;
2. accumulation 2, 48 blocks (6 micro-batches, 3 updates an epoch, so both make the same updates across the epoch
   ends): the Trainer as shipped (the update's masked tokens normalise its loss), and the Trainer with the loop's
   normalisation patched in (each micro-batch's own masked tokens, averaged over the micro-batches);
3. resume: the Trainer stopped after update 5 (mid-epoch) with a checkpoint, then resumed, against its unbroken run.

Writes ``<out>/report.json`` and prints it: the largest absolute difference of the losses and of the final weights,
and the median seconds per update of each run (from the update log's time stamps: 1 ms resolution, under the load of
the machine, given with the report).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

import yaml

from linformer_hf.outputs import check_output_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIKITEXT = os.path.join(REPO, "..", "shared", "data", "wikitext-2", "valid.txt")

# The loop's normalisation, patched into the Trainer for comparison 2 (the shipped one is the Trainer's own).
LOOP_NORMALISATION = """
import runpy, sys
from linformer_hf.training import pretraining

training_step = pretraining.MaskedLMTrainer.training_step

def per_micro_batch(self, model, inputs, num_items_in_batch=None):
    count = self.accelerator.reduce(inputs["labels"].ne(-100).sum(), reduction="sum").clamp(min=1)
    return training_step(self, model, inputs, count * self.args.gradient_accumulation_steps)

pretraining.MaskedLMTrainer.training_step = per_micro_batch
sys.argv = ["pretrain"] + sys.argv[1:]
runpy.run_module("linformer_hf.training.pretrain", run_name="__main__")
"""


def recipe(tokenizer, out, blocks, **training) -> dict:
    return {
        "model": {"model_type": "linformer", "config_file": os.path.join(REPO, "configs", "model", "tiny_test.yaml")},
        "tokenizer": {"name_or_path": tokenizer},
        "data": {
            "train_files": [WIKITEXT],
            "block_size": 64,
            "validation_split_percentage": 5,
            "max_train_blocks": blocks,
            "max_eval_blocks": 16,
        },
        "training": {
            "output_dir": out,
            "seed": 42,
            "per_device_train_batch_size": 8,
            "per_device_eval_batch_size": 16,
            "max_steps": 12,
            "warmup_steps": 2,
            "learning_rate": 2e-3,
            "max_grad_norm": 1.0,
            "logging_steps": 1,
            **training,
        },
    }


def pretrain(checkout: str, settings: dict, *extra: str, patch: str | None = None) -> None:
    out = settings["training"]["output_dir"]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out + ".yaml")
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(settings, fh)
    command = ["-c", patch] if patch else ["-m", "linformer_hf.training.pretrain"]
    env = {**os.environ, "PYTHONPATH": os.path.join(checkout, "src"), "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [sys.executable, *command, "--config", path, "--no_progress", *extra], cwd=checkout, env=env, check=True
    )


def losses(out: str) -> dict[int, tuple[float, float]]:
    """{step: (loss, time)} of the update log, the last record of a step winning (a resumed segment)."""
    with open(os.path.join(out, "train_log.jsonl"), encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    return {r["step"]: (r["loss"], r["time"]) for r in records if "loss" in r}


def compare(a: str, b: str) -> dict:
    import torch
    from safetensors.torch import load_file

    la, lb = losses(a), losses(b)
    steps = sorted(set(la) & set(lb))
    wa, wb = (load_file(os.path.join(out, "final", "model.safetensors")) for out in (a, b))
    return {
        "updates": len(steps),
        "max_abs_loss_difference": max(abs(la[s][0] - lb[s][0]) for s in steps),
        "first_update_loss_difference": abs(la[1][0] - lb[1][0]),
        "max_abs_weight_difference": max((wa[k] - wb[k]).abs().max().item() for k in wa),
        "weights_equal": all(torch.equal(wa[k], wb[k]) for k in wa),
        "seconds_per_update_median": {os.path.basename(out): seconds_per_update(out) for out in (a, b)},
    }


def seconds_per_update(out: str) -> float:
    records = losses(out)
    steps = sorted(records)
    return statistics.median(records[s][1] - records[p][1] for p, s in zip(steps, steps[1:]) if s == p + 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop_checkout", required=True, help="a checkout of a commit that pretrains on the loop")
    parser.add_argument("--out", default="outputs/trainer_vs_loop")
    parser.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    args = parser.parse_args(argv)

    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    try:  # an earlier comparison is replaced only when asked
        check_output_dir(args.out, args.overwrite, create=False)
    except (FileExistsError, NotADirectoryError) as err:
        parser.error(str(err))
    shutil.rmtree(args.out, ignore_errors=True)
    out = os.path.abspath(args.out)
    tokenizer = os.path.join(out, "tokenizer")
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), tokenizer, vocab_size=1000, model_max_length=64)
    loop, trainer = os.path.abspath(args.loop_checkout), REPO
    report = {"uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()}

    pretrain(loop, recipe(tokenizer, f"{out}/loop_ga1", 40))
    pretrain(trainer, recipe(tokenizer, f"{out}/trainer_ga1", 40))
    report["accumulation_1"] = compare(f"{out}/loop_ga1", f"{out}/trainer_ga1")

    ga2 = {"gradient_accumulation_steps": 2}
    pretrain(loop, recipe(tokenizer, f"{out}/loop_ga2", 48, **ga2))
    pretrain(trainer, recipe(tokenizer, f"{out}/trainer_ga2", 48, **ga2))
    pretrain(trainer, recipe(tokenizer, f"{out}/trainer_ga2_loop_normalisation", 48, **ga2), patch=LOOP_NORMALISATION)
    report["accumulation_2"] = compare(f"{out}/loop_ga2", f"{out}/trainer_ga2")
    report["accumulation_2_loop_normalisation"] = compare(f"{out}/loop_ga2", f"{out}/trainer_ga2_loop_normalisation")

    resumed = recipe(tokenizer, f"{out}/trainer_ga2_resumed", 48, **ga2, checkpointing_steps=5)
    pretrain(trainer, {**resumed, "training": {**resumed["training"], "stop_after_steps": 5}})
    pretrain(trainer, resumed, "--resume_from_checkpoint", "latest")
    report["resume_after_update_5"] = compare(f"{out}/trainer_ga2", f"{out}/trainer_ga2_resumed")

    report["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    for name in ("loop_ga1", "trainer_ga1", "loop_ga2", "trainer_ga2", "trainer_ga2_loop_normalisation"):
        report.setdefault("losses", {})[name] = {s: v[0] for s, v in sorted(losses(f"{out}/{name}").items())}
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "losses"}, indent=1))
    return report


if __name__ == "__main__":
    main()
