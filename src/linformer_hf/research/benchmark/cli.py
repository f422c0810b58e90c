"""The benchmark's command line: every `BenchmarkConfig` field is a flag (transformers' `HfArgumentParser`), a
preset sets the defaults, and flags given override it. `python -m linformer_hf.research.benchmark --help`."""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import asdict, dataclass, field
from typing import Literal

from .config import PRESETS, BenchmarkConfig
from .report import load_average, machine_description, plot, report_markdown
from .results import write_csv
from .run import run_benchmark


@dataclass
class CommandLine:
    """What the command adds to a `BenchmarkConfig`: where the defaults come from and where results go."""

    preset: Literal[tuple(PRESETS)] = field(default="default", metadata={"help": "the defaults of every field"})
    output_dir: str = field(
        default="outputs/benchmarks/latest", metadata={"help": "results.csv, results.md, run_info.json, PNGs"}
    )


def _parser():
    from transformers import HfArgumentParser

    parser = HfArgumentParser((CommandLine, BenchmarkConfig), description=__doc__)
    for action in parser._actions:
        if action.nargs == "+":
            action.nargs = "*"  # `--train_ns` with no value: no training points
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[CommandLine, BenchmarkConfig]:
    parser = _parser()
    known, _ = parser.parse_known_args(argv)
    parser.set_defaults(**PRESETS[known.preset])
    command_line, cfg, unknown = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    if unknown:
        parser.error(f"unknown arguments {unknown}; see --help (flags are spelled with underscores)")
    cfg.validate()
    return command_line, cfg


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command_line, cfg = parse_args(argv)
    out_dir = command_line.output_dir
    os.makedirs(out_dir, exist_ok=True)
    command = "python scripts/benchmark_efficiency.py " + " ".join(shlex.quote(a) for a in argv)
    machine_before = machine_description(cfg)
    print(f"machine: {machine_before}", flush=True)
    partial = os.path.join(out_dir, "results_partial.csv")  # the rows so far, should the run be stopped
    rows, info = run_benchmark(
        cfg, log=lambda message: print(message, flush=True), on_measured=lambda rows: write_csv(rows, partial)
    )
    machine = f"{machine_before}; after the run: {load_average()}"
    write_csv(rows, os.path.join(out_dir, "results.csv"))
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(report_markdown(rows, info, cfg, command, machine))
    with open(os.path.join(out_dir, "run_info.json"), "w") as f:
        json.dump({"command": command, "machine": machine, "config": asdict(cfg), **asdict(info)}, f, indent=2)
    for path in plot(rows, cfg, out_dir):
        print(f"wrote {path}")
    print(f"wrote {out_dir}/results.csv, results.md, run_info.json")
