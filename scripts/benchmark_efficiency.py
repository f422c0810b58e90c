#!/usr/bin/env python
"""Linformer against RoBERTa (eager and SDPA): inference time, activation memory, training throughput, FLOP/s.

Writes results.csv, results.md (Table 3-style ratio tables and every point), run_info.json and PNG plots to
--output_dir. Every field of `BenchmarkConfig` is a flag; see docs/efficiency.md for results and method.

    python scripts/benchmark_efficiency.py --preset quick          # < 2 min on 2 CPU cores
    python scripts/benchmark_efficiency.py --peer                  # the default preset, ~15 min
    python scripts/benchmark_efficiency.py --preset paper --device cuda --dtype bf16
"""

from linformer_hf.research.benchmark.cli import main

if __name__ == "__main__":
    main()
