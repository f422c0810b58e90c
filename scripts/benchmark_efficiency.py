#!/usr/bin/env python
"""Linformer against RoBERTa (eager and SDPA), and with `--preset peers` against Longformer and BigBird: inference
time, activation memory, training step (forward + backward + AdamW), FLOP/s.

Writes results.csv, results.md (Table 3-style ratio tables and every point), run_info.json and PNG plots to
--output_dir. Every field of `BenchmarkConfig` is a flag; see docs/efficiency.md for results and method.

    python scripts/benchmark_efficiency.py --preset quick          # < 2 min on 2 CPU cores
    python scripts/benchmark_efficiency.py --peer                  # the default preset, ~15 min
    python scripts/benchmark_efficiency.py --preset peers --ns 4096 --train_ns 4096   # the peers at n = 4096
    python scripts/benchmark_efficiency.py --preset paper --device cuda --dtype bf16
"""

import sys

from linformer_hf.research.benchmark.cli import main

if __name__ == "__main__":
    sys.exit(main())
