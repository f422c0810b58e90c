"""Masked-LM pretraining on the hand-written Accelerate loop against the `Trainer` prototype (issue 36, item 2).

Side by side in one process, on the tiny model (configs/model/tiny_test.yaml, dropout on) and WikiText-2 validation
text, from the same init and seed, with gradient accumulation 2:

1. per-update losses of the loop and of `MaskedLMTrainer` with the loop's normalisation (``micro_batch``) and with the
   Trainer's ``num_items_in_batch`` over the whole update (``update``): max abs difference;
2. seconds per update (median over updates 2..N of interleaved repeats, from the update log's time stamps);
3. resume: stopped after update 10 with a checkpoint (a fresh run object resumes from it) against an unbroken run.

    python -m experiments.mlm_trainer_vs_loop --out /tmp/mlm_vs_loop [--updates 30 --repeats 3]

Writes ``<out>/report.json`` and prints it. Results and the conclusion: docs/training.md ("Why the loop and not
Trainer").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WIKITEXT = os.path.join(REPO, "..", "shared", "data", "wikitext-2", "valid.txt")
if not os.path.exists(WIKITEXT):
    WIKITEXT = os.path.join("/work", "shared", "data", "wikitext-2", "valid.txt")


def recipe(tokenizer_dir, out, model="tiny_test", block_size=64, **training):
    from linformer_hf.training.config import PretrainRecipe, load_recipe

    settings = {
        "model.model_type": "linformer",
        "model.config_file": os.path.join(REPO, "configs", "model", f"{model}.yaml"),
        "tokenizer.name_or_path": str(tokenizer_dir),
        "data.train_files": [WIKITEXT],
        "data.block_size": block_size,
        # 192 blocks / 8 = 24 micro-batches = 12 updates an epoch: runs cross epochs, update 10 is mid-epoch.
        "data.max_train_blocks": 192,
        "data.max_eval_blocks": 16,
        "training.output_dir": str(out),
        "training.per_device_train_batch_size": 8,
        "training.gradient_accumulation_steps": 2,
        "training.warmup_steps": 2,
        "training.logging_steps": 1,
        "training.learning_rate": 2e-3,
        "training.max_grad_norm": 1.0,
        "training.save_final_model": False,
    }
    settings.update({f"training.{k}": v for k, v in training.items()})
    return load_recipe(PretrainRecipe, None, extra=settings)


def logged(out):
    """{step: (loss, time)} from <out>/train_log.jsonl, the last record of a step winning (a resumed segment)."""
    from linformer_hf.training.checkpointing import read_update_log

    return {r["step"]: (r["loss"], r["time"]) for r in read_update_log(out) if "loss" in r}


def run_loop(tokenizer_dir, out, **training):
    from linformer_hf.training.pretraining import run_pretraining

    shutil.rmtree(out, ignore_errors=True)
    run_pretraining(recipe(tokenizer_dir, out, **training), show_progress=False)
    return logged(out)


def run_trainer(tokenizer_dir, out, normalisation, fresh=True, **training):
    from experiments.mlm_trainer import build_trainer

    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    trainer = build_trainer(recipe(tokenizer_dir, out, **training), normalisation=normalisation)
    try:
        trainer.train(resume_from_checkpoint=trainer.resume_dir)
    finally:
        trainer.update_log.close()
        if trainer.lock is not None:
            trainer.lock.release()
    return logged(out)


def max_diff(a, b):
    steps = sorted(set(a) & set(b))
    return max(abs(a[s][0] - b[s][0]) for s in steps), len(steps)


def per_update_seconds(records):
    steps = sorted(records)
    return [records[s][1] - records[p][1] for p, s in zip(steps, steps[1:])]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="outputs/mlm_trainer_vs_loop")
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    import torch
    import transformers

    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    tok = os.path.join(args.out, "tokenizer")
    if not os.path.isfile(os.path.join(tok, "tokenizer.json")):
        train_bpe_tokenizer(iter_text_files([WIKITEXT]), tok, vocab_size=1000, model_max_length=128)
    n, o = args.updates, args.out
    report = {
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "threads": args.threads,
        "updates": n,
        "gradient_accumulation_steps": 2,
    }

    # 1. losses, from the same init and seed
    loop = run_loop(tok, f"{o}/loop", max_steps=n)
    micro = run_trainer(tok, f"{o}/trainer_micro", "micro_batch", max_steps=n)
    update = run_trainer(tok, f"{o}/trainer_update", "update", max_steps=n)
    report["losses"] = {
        "loop": {s: v[0] for s, v in sorted(loop.items())},
        "trainer_micro_batch": {s: v[0] for s, v in sorted(micro.items())},
        "trainer_update": {s: v[0] for s, v in sorted(update.items())},
    }
    report["max_abs_diff_trainer_micro_batch_vs_loop"], report["compared_updates"] = max_diff(micro, loop)
    report["max_abs_diff_trainer_update_vs_loop"], _ = max_diff(update, loop)
    report["update1_abs_diff_trainer_update_vs_loop"] = abs(update[1][0] - loop[1][0])

    # 3. resume: stopped after update 10 (checkpoint there), a fresh run object resumes to the end
    run_loop(tok, f"{o}/loop_resume", max_steps=n, checkpointing_steps=10, stop_after_steps=10)
    loop_resumed = run_loop_resume(tok, f"{o}/loop_resume", n)
    run_trainer(tok, f"{o}/trainer_resume", "micro_batch", max_steps=n, checkpointing_steps=10, stop_after_steps=10)
    trainer_resumed = run_trainer(
        tok,
        f"{o}/trainer_resume",
        "micro_batch",
        fresh=False,
        max_steps=n,
        checkpointing_steps=10,
        resume_from_checkpoint="latest",
    )
    report["resume_max_abs_diff_loop"], _ = max_diff(loop_resumed, loop)
    report["resume_max_abs_diff_trainer"], _ = max_diff(trainer_resumed, micro)
    report["resume_steps_logged"] = {"loop": sorted(loop_resumed), "trainer": sorted(trainer_resumed)}

    # 2. seconds per update (updates 2..N of each run), interleaved repeats; the tiny model, then a wider one
    # (hidden 128, n = 128) where the update's compute weighs more against the fixed cost of the loop around it
    for model, block_size in (("tiny_test", 64), ("small_n128_k32", 128)):
        kw = dict(model=model, block_size=block_size, max_steps=n)
        times = {"loop": [], "trainer_update": []}
        for _ in range(args.repeats):
            times["loop"] += per_update_seconds(run_loop(tok, f"{o}/time_loop", **kw))
            times["trainer_update"] += per_update_seconds(run_trainer(tok, f"{o}/time_trainer", "update", **kw))
        report[f"seconds_per_update_median_{model}"] = {k: statistics.median(v) for k, v in times.items()}
        report[f"seconds_per_update_samples_{model}"] = {k: len(v) for k, v in times.items()}
    report["torch_threads_after"] = torch.get_num_threads()
    report["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    with open(os.path.join(o, "report.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "losses"}, indent=1))
    return report


def run_loop_resume(tok, out, n):
    from linformer_hf.training.pretraining import run_pretraining

    run_pretraining(
        recipe(tok, out, max_steps=n, checkpointing_steps=10, resume_from_checkpoint="latest"), show_progress=False
    )
    return logged(out)


if __name__ == "__main__":
    main()
