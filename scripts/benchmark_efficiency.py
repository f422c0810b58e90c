#!/usr/bin/env python
"""Linformer against RoBERTa (eager and SDPA): inference time, activation memory, training throughput, FLOP/s.

Writes results.csv, results.md (Table 3-style ratio tables and every point) and PNG plots to --out-dir.
The logic lives in `linformer_hf.research.benchmarking`; see docs/efficiency.md for results and method.

    PYTHONPATH=src python scripts/benchmark_efficiency.py --preset quick      # < 2 min on 2 CPU cores
    PYTHONPATH=src python scripts/benchmark_efficiency.py --peer              # the default preset, ~15 min
    PYTHONPATH=src python scripts/benchmark_efficiency.py --device cuda --dtype bf16 --preset paper
"""

import argparse
import json
import os
import shlex
import sys

from linformer_hf.research.benchmarking import MODELS, PRESETS, BenchmarkConfig, plot, report_markdown, run_benchmark
from linformer_hf.research.benchmarking import machine_description, write_csv


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="default")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    parser.add_argument("--dtype", choices=["fp32", "fp16", "bf16"], default=None, help="fp32 on CPU, else bf16")
    parser.add_argument("--n", type=int, nargs="+", help="sequence lengths for inference (overrides the preset)")
    parser.add_argument("--k", type=int, nargs="+", help="Linformer projected lengths (overrides the preset)")
    parser.add_argument("--train-n", type=int, nargs="*", help="sequence lengths for training throughput")
    parser.add_argument("--scaling-n", type=int, nargs="*", help="n of the side-by-side linear-cost check")
    parser.add_argument("--models", nargs="+", choices=MODELS, help="models to measure (default: all)")
    parser.add_argument("--layers", type=int, help="encoder depth, the same for every model")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--reps", type=int, help="timed repetitions per point (median reported)")
    parser.add_argument("--warmup", type=int, help="untimed repetitions per model before timing")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--sharing", choices=["none", "headwise", "key_value", "layerwise"])
    parser.add_argument("--projection", choices=["linear", "mean", "max", "conv"])
    parser.add_argument("--memory-budget-gb", type=float, help="skip points estimated above this (default 60%% of RAM)")
    parser.add_argument("--no-memory", action="store_true", help="skip the per-point memory processes")
    parser.add_argument("--peer", action="store_true", help="also compare attention modules with `linformer` (PyPI)")
    parser.add_argument("--peer-n", type=int, nargs="+", default=[4096], help="n of the peer comparison")
    parser.add_argument("--peer-k", type=int, default=256, help="k of the peer comparison")
    parser.add_argument("--out-dir", default="outputs/benchmarks/latest")
    return parser.parse_args(argv)


def config_from_args(args) -> BenchmarkConfig:
    settings = dict(PRESETS[args.preset])
    overrides = {
        "ns": args.n, "ks": args.k, "train_ns": args.train_n, "scaling_ns": args.scaling_n, "models": args.models,
        "layers": args.layers,
        "batch": args.batch, "reps": args.reps, "warmup": args.warmup, "threads": args.threads,
        "sharing": args.sharing, "projection": args.projection,
        "memory_budget_gb": args.memory_budget_gb,
    }
    settings.update({key: value for key, value in overrides.items() if value is not None})
    settings["device"] = args.device
    settings["dtype"] = args.dtype or ("fp32" if args.device == "cpu" else "bf16")
    settings["measure_memory"] = not args.no_memory
    settings["peer"] = args.peer
    settings["peer_points"] = [(n, args.peer_k) for n in args.peer_n]
    return BenchmarkConfig(**settings)


def main(argv=None):
    args = parse_args(argv)
    cfg = config_from_args(args)
    os.makedirs(args.out_dir, exist_ok=True)
    command = "PYTHONPATH=src python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *(argv or sys.argv[1:])])
    machine_before = machine_description(cfg)
    print(f"machine: {machine_before}", flush=True)
    rows, info = run_benchmark(cfg, log=lambda message: print(message, flush=True))
    machine = f"{machine_before}; after the run: {machine_description(cfg).split('load average (1, 5, 15 min) ')[1]}"
    write_csv(rows, os.path.join(args.out_dir, "results.csv"))
    with open(os.path.join(args.out_dir, "results.md"), "w") as f:
        f.write(report_markdown(rows, info, cfg, command, machine))
    with open(os.path.join(args.out_dir, "run_info.json"), "w") as f:
        json.dump({"command": command, "machine": machine, **info}, f, indent=2)
    for path in plot(rows, cfg, args.out_dir):
        print(f"wrote {path}")
    print(f"wrote {args.out_dir}/results.csv, results.md, run_info.json")


if __name__ == "__main__":
    main()
