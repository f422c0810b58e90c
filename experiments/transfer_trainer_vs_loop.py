"""Attention transfer on the `Trainer` (this checkout) against the hand-written loop it replaced: the same run through
each checkout's ``python -m linformer_hf.training.transfer``, compared on every step's loss and per-layer figures (the
transfer log), on the final weights (``model.safetensors``) and on the fidelity after training, and each path's
stopped-then-resumed run against its unbroken one.

    git worktree add /tmp/transfer-loop bb52f8c      # a commit that still transfers on the loop
    PYTHONPATH=src:. python -m experiments.transfer_trainer_vs_loop --loop_checkout /tmp/transfer-loop \
        --out /tmp/transfer_trainer_vs_loop

(``--loop_checkout`` may also be this checkout, before the switch: both paths are then the loop.)

The pair is the tests' (tests/test_transfer.py `build_pair`): a tiny random BERT MLM teacher (2 layers, n = 16), a
Linformer converted from it with k = 4 and random E, F, and 300 WikiText-2 lines. The run: windows of 8 and 16 tokens
in turn, batch 4, 6 layer-local steps (E, F and W^Q, W^K, W^V) then 6 end-to-end steps (every weight, the MLM head's
KL included), checkpoints every 4 steps, the same seed. The resumed run stops after step 5 (stage 1), resumes and stops
after step 9 (stage 2, across the stage boundary), then resumes to the end. All of it again with two CPU processes
under `accelerate launch` (each process its own rows of a step's windows, the gradients averaged).

Writes ``<out>/report.json`` (with every step's loss of each run) and prints it without the losses.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from linformer_hf.outputs import check_output_dir

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETTINGS = {
    "lengths": ["8", "16"],
    "batch_size": "4",
    "layer_steps": "6",
    "end_to_end_steps": "6",
    "train_attention_weights": "true",
    "projection_learning_rate": "1e-2",
    "attention_learning_rate": "1e-3",
    "end_to_end_learning_rate": "1e-3",
    "warmup_steps": "2",
    "eval_windows": "4",
    "log_every": "1",
    "checkpoint_every": "4",
    "checkpoints_to_keep": "2",
    "show_progress": "false",
}
STOPS = (5, 9)  # stage 1, then stage 2 (the boundary is at step 6)


def build_pair(out: str) -> str:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from pathlib import Path

    from test_transfer import build_pair as build

    root = os.path.join(out, "pair")
    os.makedirs(root)
    build(Path(root))
    return root


def launcher(processes: int) -> list[str]:
    """One process as is; more under `accelerate launch` on the CPU (gloo)."""
    if processes == 1:
        return [sys.executable, "-m"]
    port = str(29500 + os.getpid() % 1000)
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes)] + [
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", port, "-m"
    ]  # fmt: skip


def transfer(checkout: str, pair: str, out: str, *extra: str, processes: int = 1) -> None:
    command = [*launcher(processes), "linformer_hf.training.transfer", "--teacher", f"{pair}/teacher"]
    command += ["--student", f"{pair}/student_k4", "--output_dir", out, "--text_files", f"{pair}/text.txt"]
    for name, value in SETTINGS.items():
        command += [f"--{name}", *(value if isinstance(value, list) else [value])]
    env = {
        **os.environ,
        "PYTHONPATH": os.path.join(checkout, "src"),
        "PYTHONDONTWRITEBYTECODE": "1",  # the loop's checkout is only read
        "OMP_NUM_THREADS": "1",
        **({"ACCELERATE_USE_CPU": "1"} if processes > 1 else {}),
    }
    subprocess.run([*command, *extra], cwd=checkout, env=env, check=True)


def log(out: str) -> dict[int, dict]:
    """{step: record} of the transfer log (one uninterrupted run: a resume drops the records past its checkpoint)."""
    with open(os.path.join(out, "transfer_log.jsonl"), encoding="utf-8") as fh:
        records = [json.loads(line) for line in fh if line.strip()]
    return {r["step"]: r for r in records}


def compare(a: str, b: str) -> dict:
    import torch
    from safetensors.torch import load_file

    la, lb = log(a), log(b)
    steps = sorted(la)
    wa, wb = (load_file(os.path.join(out, "model.safetensors")) for out in (a, b))
    ra, rb = (json.load(open(os.path.join(out, "transfer_report.json"), encoding="utf-8")) for out in (a, b))
    key = next(k for k in la[1] if k.startswith("layer_"))
    return {
        "steps": len(steps),
        "same_steps_and_stages": [(s, la[s]["stage"], la[s]["length"]) for s in steps]
        == [(s, lb[s]["stage"], lb[s]["length"]) for s in sorted(lb)],
        "max_abs_loss_difference": max(abs(la[s]["loss"] - lb[s]["loss"]) for s in steps),
        "losses_equal": all(la[s]["loss"] == lb[s]["loss"] for s in steps),
        "per_layer_equal": all(la[s][key] == lb[s][key] for s in steps),
        "learning_rates_equal": all(la[s]["learning_rates"] == lb[s]["learning_rates"] for s in steps),
        "max_abs_weight_difference": max((wa[k] - wb[k]).abs().max().item() for k in wa),
        "weights_equal": wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa),
        "fidelity_after_equal": ra["after"] == rb["after"],
        "fidelity_before_equal": ra.get("before") == rb.get("before") if "before" in rb else None,
    }


def seconds_per_step(out: str) -> float:
    records = log(out)
    steps = sorted(records)
    times = [records[s]["train_seconds"] for s in steps]
    return statistics.median(b - a for a, b in zip(times, times[1:]))


def run_path(checkout: str, pair: str, out: str, name: str, processes: int = 1) -> None:
    def run(suffix, *extra):
        transfer(checkout, pair, f"{out}/{name}_{suffix}", *extra, processes=processes)

    run("straight")
    run("resumed", "--stop_after_steps", str(STOPS[0]))
    run("resumed", "--resume", "latest", "--stop_after_steps", str(STOPS[1]))
    run("resumed", "--resume", "latest")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop_checkout", required=True, help="a checkout of a commit that transfers on the loop")
    parser.add_argument("--out", default="outputs/transfer_trainer_vs_loop")
    parser.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    args = parser.parse_args(argv)

    try:  # an earlier comparison is replaced only when asked
        check_output_dir(args.out, args.overwrite, create=False)
    except (FileExistsError, NotADirectoryError) as err:
        parser.error(str(err))
    shutil.rmtree(args.out, ignore_errors=True)
    out = os.path.abspath(args.out)
    pair = build_pair(out)
    loop, trainer = os.path.abspath(args.loop_checkout), REPO
    report = {
        "loop_checkout": subprocess.run(
            ["git", "-C", loop, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "trainer_checkout": subprocess.run(
            ["git", "-C", trainer, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "settings": SETTINGS,
        "stops": list(STOPS),
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    run_path(loop, pair, out, "loop")
    run_path(trainer, pair, out, "trainer")
    report["trainer_vs_loop"] = compare(f"{out}/loop_straight", f"{out}/trainer_straight")
    report["loop_resumed_vs_straight"] = compare(f"{out}/loop_straight", f"{out}/loop_resumed")
    report["trainer_resumed_vs_straight"] = compare(f"{out}/trainer_straight", f"{out}/trainer_resumed")
    report["trainer_resumed_vs_loop_straight"] = compare(f"{out}/loop_straight", f"{out}/trainer_resumed")
    # Two processes (each its own rows of a step's windows, the gradients averaged): the same checks.
    run_path(loop, pair, out, "loop_2p", processes=2)
    run_path(trainer, pair, out, "trainer_2p", processes=2)
    report["two_processes_trainer_vs_loop"] = compare(f"{out}/loop_2p_straight", f"{out}/trainer_2p_straight")
    report["two_processes_loop_resumed_vs_straight"] = compare(f"{out}/loop_2p_straight", f"{out}/loop_2p_resumed")
    report["two_processes_trainer_resumed_vs_straight"] = compare(
        f"{out}/trainer_2p_straight", f"{out}/trainer_2p_resumed"
    )
    report["seconds_per_step_median"] = {n: seconds_per_step(f"{out}/{n}_straight") for n in ("loop", "trainer")}
    report["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    report["losses"] = {
        name: {s: r["loss"] for s, r in sorted(log(f"{out}/{name}").items())}
        for name in ("loop_straight", "loop_resumed", "trainer_straight", "trainer_resumed")
    }
    with open(os.path.join(out, "report.json"), "w", encoding="utf-8") as fh:
        json.dump(report, fh, indent=1)
    print(json.dumps({k: v for k, v in report.items() if k != "losses"}, indent=1))
    return report


if __name__ == "__main__":
    main()
