"""Everything a CUDA machine should run: `python -m experiments.gpu_checks --output_dir DIR`.

Parts, each timed on its own and reported `ok`, `skipped` (with the reason) or `failed` (with the error; the other
parts still run):

1. `environment`: device name and memory, torch, CUDA and transformers versions.
2. `inference_grid`: the efficiency benchmark (`benchmarks`) on CUDA in fp16 (n = 512 ... 65536) and bf16
   (n up to 16384), RoBERTa (SDPA, eager) against Linformer (k = 128, 256) and Performer, within a time budget.
3. `training_step`: a V100-style fp16 AMP training step (autocast + `GradScaler`, AdamW, MLM loss) of Linformer and
   RoBERTa at base width side by side, the same in bf16 autocast (no scaler), and a Performer step in fp16.
4. `long_sequence`: Linformer and Performer forward at n = 16384 and 65536 in fp16 autocast: finite outputs and
   their relative error against an fp32 forward of the same model on the same input.
5. `realistic_grid` (issue 20; not in the default run, it takes a command of its own): the benchmark's
   `gpu-realistic` presets, 12 base layers, 32,768 positions a batch, inference and training (AdamW) tokens/s and
   memory of every model (RoBERTa SDPA and eager, Linformer k = 128 and 256, Performer, ModernBERT as released and at
   equal depth with SDPA and FlashAttention-2, Longformer, BigBird), one run per `--realistic_runs` entry (bf16,
   bf16-padded, fp16, fp16-padded; compiled by torch.compile, issue 37: bf16-compiled, bf16-compiled-layers,
   fp16-compiled, fp16-compiled-layers, bf16-padded-compiled), inference, training or both (`--realistic_modes`),
   other models at some n (`--realistic_models_by_n`), within `--realistic_time_budget_s` (or
   `--realistic_run_budgets_s`, and a hard end `--realistic_stop_at`), each CSV written as it goes; the compiled
   runs' compiles each within `--realistic_compile_timeout_s`.
6. `profile`: torch.profiler's table of one training step of one base layer, Linformer k = 256 and Performer against
   RoBERTa-SDPA at n = `--profile_n`, the top kernels by device time, as text and CSV; with `--profile_compile`,
   the same step compiled too (`profile_<model>_compiled.*`); with `--profile_dtypes bf16 fp16`, the same in fp16
   autocast with loss scaling too (`profile_<model>_fp16[_compiled].*`).

The parts run in the order 1, 3, 4, 6, 2, 5: the grids are the longest and each is bounded by its time budget, so
a run cut short keeps the short checks. Without CUDA, parts 2-6 are skipped ("no CUDA device"); `--device cpu --tiny`
runs parts 3-6 on CPU with tiny models, which is how the tests exercise them. Imports nothing of `datasets`.

Output: a run folder (default `outputs/gpu_checks/<timestamp>`; an existing non-empty folder is refused) with
`report.json` (rewritten after every part, so a killed run keeps the parts done), `report.md` (a table per part), the
benchmark's own `results.csv` / `results.md` per grid run under `grid_<run>/` (`grid_fp16/`, `grid_bf16/`,
`grid_bf16-padded/`, ...) and `profile_<model>.txt` / `.csv`. Issue 37's whole GPU session in one device call:
`experiments/gpu_session.sh`.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import importlib
import io
import json
import math
import os
import shlex
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field

from linformer_hf.outputs import write_text_atomic

PARTS = ("environment", "inference_grid", "training_step", "long_sequence", "realistic_grid", "profile")
RUN_ORDER = ("environment", "training_step", "long_sequence", "profile", "inference_grid", "realistic_grid")
# The default run: every part but the realistic grid, which takes a command of its own (see --realistic_runs).
DEFAULT_PARTS = [part for part in PARTS if part != "realistic_grid"]
NO_CUDA = "no CUDA device"


@dataclass
class GpuChecksConfig:
    """The command line of `experiments/gpu_checks.py` (each field a flag of the same name)."""

    output_dir: str | None = field(
        default=None, metadata={"help": "run folder (default outputs/gpu_checks/<timestamp>); must not hold files"}
    )
    device: str = field(default="auto", metadata={"help": "auto (CUDA if there is one), cuda[:i] or cpu"})
    tiny: bool = field(default=False, metadata={"help": "tiny models and lengths (parts 3 and 4 testable on CPU)"})
    parts: list[str] = field(
        default_factory=lambda: list(DEFAULT_PARTS),
        metadata={"help": f"a subset of {PARTS} (default: all but realistic_grid)"},
    )
    grid_time_budget_s: float = field(
        default=240.0, metadata={"help": "seconds for the grid: no new n is started after it (fp16 gets 65%%)"}
    )
    grid_fp16_ns: list[int] = field(default_factory=lambda: [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536])
    grid_bf16_ns: list[int] = field(default_factory=lambda: [512, 2048, 4096, 16384])
    grid_ks: list[int] = field(default_factory=lambda: [128, 256])
    grid_models: list[str] = field(default_factory=lambda: ["roberta-sdpa", "roberta-eager", "linformer", "performer"])
    train_steps: int = field(default=20, metadata={"help": "timed training steps per model (after the warm-up)"})
    warmup_steps: int = 3
    train_batch: int = field(default=8, metadata={"help": "sequences of n = 512 per training step"})
    long_ns: list[int] = field(default_factory=lambda: [16384, 65536], metadata={"help": "n of the long forward"})
    realistic_runs: list[str] = field(
        default_factory=lambda: ["bf16", "bf16-padded"],
        metadata={
            "help": "the realistic grid's runs, a subset of bf16, bf16-padded, fp16, fp16-padded (V100: fp16), "
            "bf16-compiled, bf16-compiled-layers, fp16-compiled, fp16-compiled-layers, bf16-padded-compiled"
        },
    )
    realistic_ns: list[int] = field(
        default_factory=list, metadata={"help": "n of the realistic grid (default: the preset's, 512 ... 16384)"}
    )
    realistic_models: list[str] = field(
        default_factory=list,
        metadata={"help": "models of the realistic grid (default: the preset's; fewer on a 16-32 GB GPU: every model "
                  "of an n is built in one process)"},
    )  # fmt: skip
    realistic_models_by_n: list[str] = field(
        default_factory=list,
        metadata={"help": "the models of one n of the realistic grid, as N=MODEL,MODEL (16384=roberta-sdpa,performer): "
                  "at that n only these (default: --realistic_models at every n)"},
    )  # fmt: skip
    realistic_ks: list[int] = field(
        default_factory=list, metadata={"help": "Linformer k of the realistic grid (default: the preset's, 128 256)"}
    )
    realistic_modes: list[str] = field(
        default_factory=lambda: ["inference", "train"],
        metadata={"help": "what the realistic grid measures at each n: inference, train (the training step) or both"},
    )
    realistic_time_budget_s: float = field(
        default=480.0, metadata={"help": "seconds for the realistic grid, shared equally by its runs"}
    )
    realistic_run_budgets_s: list[float] = field(
        default_factory=list,
        metadata={"help": "seconds of each realistic run, in the order of --realistic_runs (instead of equal shares "
                  "of --realistic_time_budget_s); what one leaves, the next gets"},
    )  # fmt: skip
    realistic_stop_at: float | None = field(
        default=None,
        metadata={"help": "Unix time by which the realistic grid ends: no worker outlives it, and no n starts with "
                  "less than 20 s, or half the time its run's previous n took, left (a session's hard limit)"},
    )  # fmt: skip
    realistic_compile_backend: str | None = field(
        default=None, metadata={"help": "torch.compile backend of the compiled realistic runs (default inductor)"}
    )
    realistic_compile_timeout_s: float | None = field(
        default=None,
        metadata={"help": "seconds one model's compile may take in the compiled realistic runs: a model over it fails "
                  "alone, the others of its n are timed (the benchmark's compile_timeout_s; default: no limit but "
                  "the time the timing process has)"},
    )  # fmt: skip
    profile_n: int = field(default=4096, metadata={"help": "n of the profiled training step"})
    profile_models: list[str] = field(
        default_factory=lambda: ["linformer", "performer", "roberta-sdpa"],
        metadata={"help": "models of the profile: linformer (k = 256), performer, performer-bf16, roberta-sdpa"},
    )
    profile_compile: str = field(
        default="no",
        metadata={"help": "no, model or layers: also profile the step compiled so (profile_<model>_compiled.txt/.csv)"},
    )
    profile_dtypes: list[str] = field(
        default_factory=lambda: ["bf16"],
        metadata={"help": "autocast dtypes of the profiled step, in order: bf16, fp16 (with loss scaling) or both; "
                  "a dtype other than bf16 names its files profile_<model>_<dtype>[_compiled].txt/.csv (on a CPU the "
                  "step runs once, in fp32)"},
    )  # fmt: skip

    def models_at(self) -> dict[int, list[str]]:
        """`realistic_models_by_n` as {n: models}."""
        from benchmarks import MODELS

        models_at = {}
        for entry in self.realistic_models_by_n:
            n, _, models = entry.partition("=")
            names = [name for name in models.split(",") if name]
            if not n.isdigit() or not names or set(names) - set(MODELS):
                raise ValueError(
                    f"realistic_models_by_n takes N=MODEL,MODEL with models of {tuple(MODELS)}, got {entry!r}"
                )
            models_at[int(n)] = names
        return models_at

    def validate(self):
        unknown = set(self.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ValueError(f"device must be auto, cpu or cuda[:i], got {self.device!r}")
        if self.train_steps < 1 or self.warmup_steps < 0:
            raise ValueError("train_steps must be >= 1 and warmup_steps >= 0")
        unknown_runs = set(self.realistic_runs) - set(REALISTIC_RUNS)
        if unknown_runs or not self.realistic_runs:
            raise ValueError(f"realistic_runs must be a subset of {tuple(REALISTIC_RUNS)}, got {self.realistic_runs}")
        self.models_at()  # refuses a malformed --realistic_models_by_n
        if not self.realistic_modes or set(self.realistic_modes) - {"inference", "train"}:
            raise ValueError(f"realistic_modes must be inference, train or both, got {self.realistic_modes}")
        if self.realistic_run_budgets_s and len(self.realistic_run_budgets_s) != len(self.realistic_runs):
            raise ValueError(
                f"realistic_run_budgets_s has {len(self.realistic_run_budgets_s)} values for "
                f"{len(self.realistic_runs)} realistic_runs {self.realistic_runs}: give one a run"
            )
        unknown_profiled = set(self.profile_models) - {"linformer", "performer", "performer-bf16", "roberta-sdpa"}
        if unknown_profiled:
            raise ValueError(
                f"profile_models must be linformer, performer, performer-bf16 or roberta-sdpa, got "
                f"{sorted(unknown_profiled)}"
            )
        if self.profile_compile not in ("no", "model", "layers"):
            raise ValueError(f"profile_compile must be no, model or layers, got {self.profile_compile!r}")
        if not self.profile_dtypes or set(self.profile_dtypes) - {"bf16", "fp16"}:
            raise ValueError(f"profile_dtypes must be bf16, fp16 or both, got {self.profile_dtypes}")
        if 32768 % self.profile_n:
            raise ValueError(f"profile_n must divide the realistic batch of 32768 positions, got {self.profile_n}")
        self.validate_benchmark_configs()

    def validate_benchmark_configs(self):
        """Build the benchmark configs of the parts that will run, on the device asked for (auto: CUDA), and validate
        them: a bad grid flag stops the command before any part runs, named by this command's flag, not minutes later
        in its part with the benchmark's field names."""
        device = "cuda" if self.device == "auto" else self.device
        runs_here = device != "cpu" or self.tiny  # on CPU without --tiny the grids and the profile are skipped
        if "inference_grid" in self.parts and device != "cpu":
            _benchmark_flags("--grid_fp16_ns, --grid_bf16_ns, --grid_ks or --grid_models",
                             lambda: inference_grid_configs(self, device))  # fmt: skip
        if "realistic_grid" in self.parts and runs_here:
            self.validate_realistic(device)
        if "profile" in self.parts and runs_here:
            _benchmark_flags("--profile_n, --profile_compile or --realistic_compile_backend",
                             lambda: profile_variants(self, device))  # fmt: skip

    def validate_realistic(self, device: str):
        """The realistic grid's flags, then every run's benchmark config (each point's model config built)."""
        from benchmarks import MODELS

        unknown = set(self.realistic_models) - set(MODELS)
        if unknown:
            raise ValueError(f"--realistic_models: unknown models {sorted(unknown)}; choose from {tuple(MODELS)}")
        bad_ks = [k for k in self.realistic_ks if k < 1]
        if bad_ks:
            raise ValueError(f"--realistic_ks must hold positive k, got {bad_ks}")
        if self.realistic_compile_timeout_s is not None and not self.realistic_compile_timeout_s > 0:
            raise ValueError(f"--realistic_compile_timeout_s must be positive, got {self.realistic_compile_timeout_s}")
        configs = realistic_configs(self, device)
        positions = configs[0][1].tokens_per_batch
        uneven = [n for n in self.realistic_ns if n < 1 or positions % n]
        if uneven:
            raise ValueError(
                f"--realistic_ns {uneven}: each n must divide the realistic batch of {positions} positions (batch = "
                f"{positions} / n), e.g. {positions // 64} or {positions // 8}; give such n"
            )
        for name, full in configs:
            _benchmark_flags(f"--realistic_* (run {name})", full.validate)


def _benchmark_flags(flags: str, build) -> None:
    """Run `build` (a benchmark config's validation); its error names the benchmark's fields, so it is prefixed
    with the flags of this command that set them."""
    try:
        build()
    except ValueError as error:
        raise ValueError(f"{flags}: the benchmark config they make is invalid: {error}") from None


# ---------------------------------------------------------------------------------------------------------------
# The run folder and the report
# ---------------------------------------------------------------------------------------------------------------


def claim_run_dir(output_dir: str | None) -> str:
    """The run's folder, created. A given folder that holds files is refused (it belongs to an earlier run); the
    default name gets a suffix instead, so no run overwrites another."""
    if output_dir is None:
        base = os.path.join("outputs", "gpu_checks", time.strftime("%Y%m%d-%H%M%S"))
        output_dir, suffix = base, 1
        while os.path.exists(output_dir):
            suffix += 1
            output_dir = f"{base}-{suffix}"
    elif os.path.isdir(output_dir) and os.listdir(output_dir):
        raise FileExistsError(
            f"--output_dir {output_dir} is not empty (it holds {', '.join(sorted(os.listdir(output_dir))[:5])}): it "
            f"belongs to an earlier run. Give a new folder, or leave --output_dir out for a timestamped one."
        )
    os.makedirs(output_dir, exist_ok=True)
    return output_dir


@dataclass
class PartResult:
    name: str
    status: str = "ok"  # ok, skipped, failed
    reason: str | None = None  # why skipped, or the error
    seconds: float = 0.0
    rows: list[dict] = field(default_factory=list)  # one table row per measurement
    summary: dict = field(default_factory=dict)
    markdown: str = ""  # extra Markdown for report.md (the grid's ratio tables)


class Report:
    def __init__(self, run_dir: str, command: str, device: str):
        self.run_dir, self.command, self.device = run_dir, command, device
        self.parts: dict[str, PartResult] = {}
        self.started = time.time()

    def log(self, message: str):
        print(f"[{time.time() - self.started:6.1f} s] {message}", flush=True)

    def add(self, part: PartResult):
        self.parts[part.name] = part
        self.write()

    def write(self):
        ordered = [self.parts[name] for name in PARTS if name in self.parts]
        data = {
            "command": self.command,
            "device": self.device,
            "runtime_s": round(time.time() - self.started, 1),
            "parts": [dataclasses.asdict(p) for p in ordered],
        }
        # Rewritten after every part, each through a temporary file and a rename: a run killed while writing keeps
        # the previous whole report, with every part finished before.
        write_text_atomic(os.path.join(self.run_dir, "report.json"), json.dumps(data, indent=2, default=str))
        write_text_atomic(os.path.join(self.run_dir, "report.md"), self.markdown(ordered))

    def markdown(self, ordered: list[PartResult]) -> str:
        out = [
            "# GPU checks\n",
            f"Command: `{self.command}`  ",
            f"Device: {self.device}  ",
            f"Runtime so far: {time.time() - self.started:.0f} s\n",
        ]
        for part in ordered:
            number = PARTS.index(part.name) + 1
            out.append(f"## {number}. {part.name}: {part.status} ({part.seconds:.1f} s)\n")
            if part.reason:
                out.append(f"{'Reason' if part.status == 'skipped' else 'Error'}: {part.reason.strip()}\n")
            if part.summary:
                out.append("  \n".join(f"{key}: {value}" for key, value in part.summary.items()) + "\n")
            if part.rows:
                out.append(_table(part.rows))
            if part.markdown:
                out.append(part.markdown)
        return "\n".join(out)


def _table(rows: list[dict]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(_text(row.get(c)) for c in columns) + " |")
    return "\n".join(lines) + "\n"


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


# ---------------------------------------------------------------------------------------------------------------
# Shared helpers
# ---------------------------------------------------------------------------------------------------------------


def _synchronize(device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _reset_peak(device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def _peak_mib(device: str) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1) if device.startswith("cuda") else None


def _free(device: str):
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _shape(tiny: bool, layers: int) -> dict:
    """Base width (RoBERTa-base) or a tiny model; dropout 0 so that fp16 and fp32 runs see the same function."""
    if tiny:
        return dict(vocab_size=200, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    return dict(
        vocab_size=50265, hidden_size=768, num_hidden_layers=layers, num_attention_heads=12, intermediate_size=3072
    )


def _config(family: str, n: int, k: int, tiny: bool, layers: int):
    from transformers import RobertaConfig

    from linformer_hf.models.configuration_linformer import LinformerConfig
    from linformer_hf.models.configuration_performer import PerformerConfig

    common = dict(
        **_shape(tiny, layers), max_position_embeddings=n + 2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    if family == "linformer":
        return LinformerConfig(**common, max_sequence_length=n, projected_length=k)
    if family == "performer":
        return PerformerConfig(**common, num_random_features=16 if tiny else 256)
    return RobertaConfig(**common, attn_implementation="sdpa")


# ---------------------------------------------------------------------------------------------------------------
# Part 1: environment
# ---------------------------------------------------------------------------------------------------------------


def part_environment(device: str, report: Report) -> PartResult:
    import torch
    import transformers

    row = {
        "device": device,
        "torch": torch.__version__,
        "cuda (torch build)": torch.version.cuda,
        "transformers": transformers.__version__,
        "python": sys.version.split()[0],
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        row |= {
            "device name": props.name,
            "total memory GiB": round(props.total_memory / 2**30, 1),
            "compute capability": f"{props.major}.{props.minor}",
            "bf16 supported": torch.cuda.is_bf16_supported(),
        }
    else:
        row["device name"] = "CPU"
    for package in ("accelerate", "flash_attn"):  # flash_attn: ModernBERT's FlashAttention-2 rows run only with it
        try:
            row[package] = importlib.import_module(package).__version__
        except ImportError:
            row[package] = None
    return PartResult("environment", rows=[row])


# ---------------------------------------------------------------------------------------------------------------
# Part 2: the inference grid (the efficiency benchmark)
# ---------------------------------------------------------------------------------------------------------------


def _run_grid(
    result: PartResult,
    runs: list[tuple[str, object, float]],
    report: Report,
    row_of,
    max_timeout_s: float = 180.0,
    run_key: str = "run",
    stop_at: float | None = None,
    models_at: dict[int, list[str]] | None = None,
) -> None:
    """Run each benchmark config of `runs` ((name, config, deadline)) one n at a time into `grid_<name>/`, so that
    its results.csv and results.md grow as the grid goes and no n starts after its deadline. `row_of(name, row)`: the
    part's table row of a benchmark row, whose `run_key` names the run. A failed n is recorded and the next n still
    runs. `stop_at` (a Unix time): the hard end of the whole grid; no worker outlives it (a point still running then
    is `failed`), and no n starts with less than 20 s, or half the time its run's previous n took, left.
    `models_at` ({n: models}): the models of those n, instead of the config's."""
    models_at = models_at or {}
    from benchmarks import ratio_tables, report_markdown, run_benchmark, write_csv

    markdown, not_run = [], []
    peaks = {}  # the matmul peak, measured once per device and dtype
    for name, full, deadline in runs:
        out_dir = os.path.join(report.run_dir, f"grid_{name}")
        os.makedirs(out_dir, exist_ok=True)
        rows, done, info, previous_s = [], [], None, None
        for n in dict.fromkeys([*full.ns, *full.train_ns]):  # inference's n, then training's alone, in their order
            now = time.time()
            left = None if stop_at is None else stop_at - now
            hard_stop = left is not None and (left < 20.0 or (previous_s and left < 0.5 * previous_s))
            if now > deadline or hard_stop:
                not_run.append(f"{name} n={n}")
                continue
            report.log(f"grid {name} n={n}")
            # A hung worker must not eat the whole command's time: no worker outlives the budget by much (with
            # `stop_at`, its timeout is cut to the hard end instead, so a compile begun near the deadline can finish).
            timeout_s = max_timeout_s if stop_at is not None else min(max_timeout_s, max(60.0, deadline - now))
            ns, train_ns = [n] if n in full.ns else [], [n] if n in full.train_ns else []
            one = dataclasses.replace(full, ns=ns, train_ns=train_ns, timeout_s=timeout_s,
                                      models=models_at.get(n, full.models))  # fmt: skip
            peak_key = (full.device, full.dtype, full.hidden_size, full.intermediate_size)
            extra = {"peak_info": peaks[peak_key]} if peak_key in peaks else {}
            if stop_at is not None:
                extra["deadline"] = stop_at
            try:
                n_rows, n_info = run_benchmark(one, log=lambda message: report.log(f"  {message}"), **extra)
            except Exception as error:  # e.g. the matmul-peak process died: this n fails, the next n still runs
                report.log(f"  grid {name} n={n} failed: {type(error).__name__}: {error}")
                result.rows.append(
                    {
                        run_key: name,
                        "model": "(all)",
                        "n": n,
                        "status": "failed",
                        "reason": f"{type(error).__name__}: {error}",
                    }
                )
                report.add(result)
                continue
            previous_s = time.time() - now
            rows += n_rows
            done.append(n)
            peaks[peak_key] = n_info.peak_info
            if info is None:
                info = n_info
            else:
                info = dataclasses.replace(info, runtime_s=info.runtime_s + n_info.runtime_s)
            shown = _done(full, done)
            write_csv(rows, os.path.join(out_dir, "results.csv"))
            write_text_atomic(
                os.path.join(out_dir, "results.md"), report_markdown(rows, info, shown, report.command, report.device)
            )
            result.rows += [row_of(name, row) for row in n_rows]
            report.add(result)  # the rows so far survive a killed run
        if done:
            shown = _done(full, done)
            markdown.append(f"### {name} (every point in `grid_{name}/results.md`)\n")
            markdown.append(ratio_tables(rows, shown))
            result.summary[f"{name} dense matmul peak GFLOP/s"] = info.matmul_peak_gflops
    result.markdown = "\n".join(markdown)
    if not_run:
        result.summary["not run (time budget)"] = ", ".join(not_run)
    failed = [r for r in result.rows if r["status"] == "failed"]
    if failed:
        result.status = "failed"
        result.reason = (
            f"{len(failed)} points failed, e.g. {failed[0]['model']} n={failed[0]['n']}: {failed[0]['reason']}"
        )


def _done(full, done: list[int]):
    """The benchmark config `full` cut to the lengths `done` (what its report shows)."""
    return dataclasses.replace(
        full, ns=sorted(n for n in full.ns if n in done), train_ns=sorted(n for n in full.train_ns if n in done)
    )


def inference_grid_configs(cfg: GpuChecksConfig, device: str) -> list[tuple[str, object]]:
    """The grid's benchmark config of each dtype, fp16 then bf16, validated."""
    from benchmarks import BenchmarkConfig

    configs = []
    for dtype, ns in (("fp16", cfg.grid_fp16_ns), ("bf16", cfg.grid_bf16_ns)):
        full = BenchmarkConfig(
            ns=list(ns), ks=list(cfg.grid_ks), train_ns=[], scaling_ns=[], models=list(cfg.grid_models),
            device=device, dtype=dtype, layers=2, timeout_s=180.0,
        )  # fmt: skip
        full.validate()
        configs.append((dtype, full))
    return configs


def part_inference_grid(cfg: GpuChecksConfig, device: str, report: Report) -> PartResult:
    result = PartResult("inference_grid")
    started = time.time()
    # fp16 first with 65% of the budget; bf16 gets the rest of the budget, whatever fp16 left included.
    deadlines = {"fp16": started + 0.65 * cfg.grid_time_budget_s, "bf16": started + cfg.grid_time_budget_s}
    runs = [(dtype, full, deadlines[dtype]) for dtype, full in inference_grid_configs(cfg, device)]

    def row_of(dtype, row):
        return {"dtype": dtype, "model": row.label, "n": row.n, "status": row.status.value,
                "time_ms": None if row.time_s is None else round(1000 * row.time_s, 3),
                "activation_mb": row.activation_mb, "fraction_of_peak": row.fraction_of_peak,
                "reason": row.reason or row.memory_error}  # fmt: skip

    _run_grid(result, runs, report, row_of, run_key="dtype")
    return result


# ---------------------------------------------------------------------------------------------------------------
# Part 5: the realistic-load grid (issue 20)
# ---------------------------------------------------------------------------------------------------------------

# What each realistic run is: the benchmark's preset, dtype and `--compile`. fp16 is what a V100 runs (loss scaling,
# no bf16). The compiled runs (issue 37) are the same points through torch.compile: the whole model, or each layer.
REALISTIC_RUNS = {
    "bf16": ("gpu-realistic", "bf16", "no"),
    "bf16-padded": ("gpu-realistic-padded", "bf16", "no"),
    "fp16": ("gpu-realistic", "fp16", "no"),
    "fp16-padded": ("gpu-realistic-padded", "fp16", "no"),
    "bf16-compiled": ("gpu-realistic", "bf16", "model"),
    "bf16-compiled-layers": ("gpu-realistic", "bf16", "layers"),
    "fp16-compiled": ("gpu-realistic", "fp16", "model"),
    "fp16-compiled-layers": ("gpu-realistic", "fp16", "layers"),
    "bf16-padded-compiled": ("gpu-realistic-padded", "bf16", "model"),
}


def realistic_configs(cfg: GpuChecksConfig, device: str) -> list[tuple[str, object]]:
    """The benchmark config of each of `cfg.realistic_runs`: its preset on `device`; with `tiny` a tiny shape of the
    same grid (fp32 on CPU), which is how the tests run it."""
    from benchmarks import PRESETS, BenchmarkConfig

    configs = []
    for name in cfg.realistic_runs:
        preset, dtype, compiled = REALISTIC_RUNS[name]
        settings = dict(PRESETS[preset], device=device, dtype=dtype)
        if compiled != "no":
            settings |= dict(
                compile=compiled,
                compile_backend=cfg.realistic_compile_backend,
                compile_timeout_s=cfg.realistic_compile_timeout_s,
            )
        if cfg.realistic_ns:
            settings["ns"] = settings["train_ns"] = list(cfg.realistic_ns)
        if cfg.realistic_models:
            settings["models"] = list(cfg.realistic_models)
        if cfg.realistic_ks:
            settings["ks"] = list(cfg.realistic_ks)
        if cfg.tiny:
            settings |= dict(
                hidden_size=32, heads=4, intermediate_size=48, layers=3, vocab_size=99, tokens_per_batch=512,
                ks=cfg.realistic_ks or [16], num_random_features=16, longformer_window=16, bigbird_block_size=8,
                reps=1, warmup=1, ns=cfg.realistic_ns or [128, 256], train_ns=cfg.realistic_ns or [128, 256],
                timeout_s=120.0,
                models=cfg.realistic_models or ["roberta-sdpa", "linformer", "modernbert-sdpa", "modernbert-fa2"],
                measure_memory=False, train_memory=False,  # a process a point on CPU: the benchmark's tests cover it
            )  # fmt: skip
        if device == "cpu":
            settings |= dict(dtype="fp32", autocast=False)  # the benchmark runs fp32 only on CPU
        if "inference" not in cfg.realistic_modes:
            settings["ns"] = []
        if "train" not in cfg.realistic_modes:
            settings["train_ns"] = []
        configs.append((name, BenchmarkConfig(**settings)))
    return configs


def part_realistic_grid(cfg: GpuChecksConfig, device: str, report: Report) -> PartResult:
    """The `gpu-realistic` presets, one run per `realistic_runs` entry, the time budget shared among them (what one
    leaves, the next gets)."""
    result = PartResult("realistic_grid")
    configs = realistic_configs(cfg, device)
    started = time.time()
    budgets = cfg.realistic_run_budgets_s or [cfg.realistic_time_budget_s / len(configs)] * len(configs)
    runs = []
    for index, (name, full) in enumerate(configs):
        full.validate()
        runs.append((name, full, started + sum(budgets[: index + 1])))
    result.summary["shape"] = (
        f"{configs[0][1].layers} layers, width {configs[0][1].hidden_size}, {configs[0][1].tokens_per_batch} "
        "positions a batch (batch = that / n), inference and training step (AdamW), memory of both"
    )

    def row_of(name, row):
        return {"run": name, "mode": row.mode.value, "model": row.label, "n": row.n, "batch": row.batch,
                "status": row.status.value,
                "time_ms": None if row.time_s is None else round(1000 * row.time_s, 3),
                "real_tokens_per_s": row.real_tokens_per_s, "fraction_of_peak": row.fraction_of_peak,
                "peak_mb": row.peak_mb, "kernels": row.kernels,
                **({"compile_s": row.compile_s, "graphs_first_call": row.graphs_first_call,
                    "graphs_second_step": row.graphs_second_step, "graphs_later": row.graphs_later}
                   if row.compile not in (None, "no") else {}),
                "reason": row.reason or row.memory_error}  # fmt: skip

    _run_grid(result, runs, report, row_of, max_timeout_s=600.0, stop_at=cfg.realistic_stop_at,
              models_at=cfg.models_at())  # fmt: skip
    for name, _ in configs:
        markdown = os.path.join(report.run_dir, f"grid_{name}", "results.md")
        if os.path.exists(markdown):
            result.summary[f"{name} report"] = markdown  # the targets table is in it
    # Points skipped for a stated reason (FlashAttention-2 without flash_attn, memory) are not failures.
    return result


# ---------------------------------------------------------------------------------------------------------------
# Part 6: the kernel profile of one training step
# ---------------------------------------------------------------------------------------------------------------


def profile_variants(cfg: GpuChecksConfig, device: str) -> list[tuple[str, object]]:
    """The profiled steps of one model, in order: (file suffix, BenchmarkConfig) for each of `profile_dtypes`, eager
    then (with `profile_compile`) compiled: "", "_compiled", "_fp16", "_fp16_compiled". One base layer at n =
    `profile_n` with the realistic batch of 32,768 positions, under autocast; on a CPU fp32 without autocast, once."""
    from benchmarks import PRESETS, BenchmarkConfig

    cuda = device.startswith("cuda")
    n, k = (128, 16) if cfg.tiny else (cfg.profile_n, 256)
    settings = dict(PRESETS["gpu-realistic"], device=device, layers=1, ns=[n], train_ns=[n], ks=[k])
    if cfg.tiny:
        settings |= dict(hidden_size=32, heads=4, intermediate_size=48, vocab_size=99, tokens_per_batch=256)
    variants = []
    for dtype in cfg.profile_dtypes if cuda else ["fp32"]:
        bench = BenchmarkConfig(**settings | (dict(dtype=dtype) if cuda else dict(dtype="fp32", autocast=False)))
        bench.validate()
        stem = "" if dtype in ("bf16", "fp32") else f"_{dtype}"
        variants.append((stem, bench))
        if cfg.profile_compile != "no":  # the same step compiled: what inductor fuses, and what remains
            compiled = dataclasses.replace(
                bench, compile=cfg.profile_compile, compile_backend=cfg.realistic_compile_backend
            )
            compiled.validate()
            variants.append((stem + "_compiled", compiled))
    return variants


def part_profile(cfg: GpuChecksConfig, device: str, report: Report) -> PartResult:
    """torch.profiler over one training step (forward, backward, AdamW) of a one-layer model at base width,
    Linformer (k = 256) and Performer (m = 256) against RoBERTa-SDPA, at n = `profile_n` with the realistic batch
    of 32,768 positions, bf16 autocast (and fp16, `profile_dtypes`): the top kernels by their own device time (CPU:
    the top operators), as text and CSV per model and variant (`profile_variants`)."""
    import torch

    from benchmarks import Mode
    from benchmarks.workers import prepare_step

    cuda = device.startswith("cuda")
    n, k = (128, 16) if cfg.tiny else (cfg.profile_n, 256)
    variants = profile_variants(cfg, device)
    bench = variants[0][1]
    sort_key = "self_device_time_total" if cuda else "self_cpu_time_total"
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    result = PartResult("profile")
    dtypes = "/".join(dict.fromkeys(run_cfg.dtype for _, run_cfg in variants))
    result.summary["shape"] = (
        f"1 layer, width {bench.hidden_size}, n {n}, batch {bench.batch_at(n)}, {dtypes}"
        f"{' autocast' if bench.autocast else ''}, one training step after 2 warm-up steps; sorted by {sort_key}"
    )
    files = []
    for model in cfg.profile_models:
        model_k = k if model == "linformer" else None
        for suffix, run_cfg in variants:
            label = (
                (f"linformer k={k}" if model_k else model)
                + (f" {run_cfg.dtype}" if suffix.startswith("_fp16") else "")
                + (f" compiled ({run_cfg.compile})" if suffix.endswith("_compiled") else "")
            )
            report.log(f"profile: {label}")
            torch.manual_seed(0)
            step = prepare_step(run_cfg, model, n, model_k, Mode.TRAIN)
            started = time.perf_counter()
            step.run()  # compiled: the first call compiles
            _synchronize(device)
            if run_cfg.compile != "no":
                result.summary[f"{label} first call s"] = round(time.perf_counter() - started, 2)
            step.run()
            _synchronize(device)
            with torch.profiler.profile(activities=activities) as profiler:
                step.run()
                _synchronize(device)
            averages = profiler.key_averages()
            stem = os.path.join(report.run_dir, f"profile_{model}{suffix}")
            table = averages.table(sort_by=sort_key, row_limit=30, max_name_column_width=80)
            write_text_atomic(stem + ".txt", table)
            events = sorted(averages, key=lambda e: getattr(e, sort_key), reverse=True)
            total = sum(getattr(e, sort_key) for e in events) or 1.0
            text = io.StringIO(newline="")
            writer = csv.writer(text)
            writer.writerow(["name", "calls", "self_time_us", "share_of_self_time", "cpu_time_total_us"])
            for event in events:
                self_us = getattr(event, sort_key)
                writer.writerow(
                    [event.key, event.count, f"{self_us:.1f}", f"{self_us / total:.4f}", f"{event.cpu_time_total:.1f}"]
                )
            write_text_atomic(stem + ".csv", text.getvalue())
            files.append(f"profile_{model}{suffix}.txt/.csv")
            for event in events[:8]:
                result.rows.append({"model": label, "kernel": event.key[:90], "calls": event.count,
                                    "self_ms": round(getattr(event, sort_key) / 1000, 3),
                                    "share": round(getattr(event, sort_key) / total, 3)})  # fmt: skip
            result.summary[f"{label} step self time ms"] = round(total / 1000, 2)
            step = None
            _free(device)
            report.add(result)  # the profiles so far survive a killed run
    result.summary["files"] = ", ".join(files)
    return result


# ---------------------------------------------------------------------------------------------------------------
# Part 3: the AMP training step
# ---------------------------------------------------------------------------------------------------------------


def _mlm_batch(batch: int, n: int, vocab_size: int, device: str):
    """Random tokens, 15% of them masked (id 4, RoBERTa's <mask> would do the same) and the only positions scored."""
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab_size, (batch, n), generator=generator)
    scored = torch.rand(batch, n, generator=generator) < 0.15
    labels = ids.masked_fill(~scored, -100)
    inputs = ids.masked_fill(scored, 4)
    return inputs.to(device), torch.ones_like(inputs).to(device), labels.to(device)


def _train(model, batch, device: str, precision: str, steps: int, warmup: int) -> dict:
    """`warmup` + `steps` optimizer steps; fp16 with loss scaling (the V100 recipe), bf16 without, fp32 plain."""
    import torch

    device_type = "cuda" if device.startswith("cuda") else "cpu"
    autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(device_type, enabled=precision == "fp16")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.01)
    inputs, mask, labels = batch
    model.train()
    times, losses, skipped, grads_finite = [], [], 0, None
    check_step = warmup + steps  # one more, untimed step whose unscaled grads are checked one by one
    _reset_peak(device)
    for step in range(check_step + 1):
        _synchronize(device)
        start = time.perf_counter()
        with torch.autocast(device_type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            loss = model(input_ids=inputs, attention_mask=mask, labels=labels).loss
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)  # the grads in true units, so their finiteness is the model's, not the scale's
        if step == check_step:
            grads_finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
        scale_before = scaler.get_scale()
        scaler.step(optimizer)  # skipped by the scaler when a grad is inf/nan
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        _synchronize(device)
        if warmup <= step < check_step:
            times.append(time.perf_counter() - start)
        losses.append(loss.item())
        # The scaler lowers its scale exactly when it found an inf/nan grad and skipped the step.
        if scaler.is_enabled() and scaler.get_scale() < scale_before:
            skipped += 1
    median = statistics.median(times)
    return {
        "median_step_ms": round(1000 * median, 2),
        "tokens_per_s": round(inputs.numel() / median, 1),
        "peak_memory_mib": _peak_mib(device),
        "final_scale": scaler.get_scale() if scaler.is_enabled() else None,
        "skipped_steps": skipped if scaler.is_enabled() else None,  # without a scaler no step is skipped
        "first_loss": round(losses[0], 4),
        "last_loss": round(losses[-1], 4),
        "loss_finite": all(math.isfinite(x) for x in losses),
        "grads_finite_last_step": grads_finite,
    }


def part_training_step(cfg: GpuChecksConfig, device: str, report: Report) -> PartResult:
    import torch
    from transformers import AutoModelForMaskedLM

    n, k = (64, 16) if cfg.tiny else (512, 128)
    batch_size = 2 if cfg.tiny else cfg.train_batch
    result = PartResult("training_step")
    shape = _shape(cfg.tiny, layers=12)
    result.summary["shape"] = (
        f"batch {batch_size} x n {n}, {shape['num_hidden_layers']} layers, width {shape['hidden_size']}, "
        f"{cfg.warmup_steps} warm-up + {cfg.train_steps} timed AdamW steps, MLM loss on 15% of the tokens"
    )
    runs = [("linformer", "fp16"), ("roberta", "fp16"), ("linformer", "bf16"), ("roberta", "bf16")]
    runs.append(("performer", "fp16"))
    errors = []
    for family, precision in runs:
        label = f"{family} k={k}" if family == "linformer" else f"{family}-sdpa" if family == "roberta" else family
        report.log(f"training step: {label} {precision}")
        try:
            torch.manual_seed(0)
            config = _config(family, n, k, cfg.tiny, layers=12)
            model = AutoModelForMaskedLM.from_config(config).to(device)
            batch = _mlm_batch(batch_size, n, config.vocab_size, device)
            row = {"model": label, "precision": precision, "n": n}
            row |= _train(model, batch, device, precision, cfg.train_steps, cfg.warmup_steps)
        except Exception as error:  # one failing run leaves the others
            row = {"model": label, "precision": precision, "error": f"{type(error).__name__}: {error}"}
            errors.append(f"{label} {precision}: {type(error).__name__}: {error}")
        finally:
            model = batch = None
            _free(device)
        result.rows.append(row)
        report.log(f"  {row}")
    for precision in ("fp16", "bf16"):
        by_model = {r["model"]: r for r in result.rows if r["precision"] == precision and "tokens_per_s" in r}
        lin, rob = by_model.get(f"linformer k={k}"), by_model.get("roberta-sdpa")
        if lin and rob:
            result.summary[f"{precision} tokens/s Linformer / RoBERTa-SDPA"] = round(
                lin["tokens_per_s"] / rob["tokens_per_s"], 3
            )
    for r in result.rows:
        if r.get("loss_finite") is False:
            errors.append(f"{r['model']} {r['precision']}: non-finite loss")
        if r.get("grads_finite_last_step") is False:
            errors.append(f"{r['model']} {r['precision']}: non-finite grads")
    if errors:
        result.status, result.reason = "failed", "; ".join(errors)
    return result


# ---------------------------------------------------------------------------------------------------------------
# Part 4: long-sequence fp16 forward
# ---------------------------------------------------------------------------------------------------------------


def part_long_sequence(cfg: GpuChecksConfig, device: str, report: Report) -> PartResult:
    import torch
    from transformers import AutoModel

    ns = [128, 256] if cfg.tiny else list(cfg.long_ns)
    k = 16 if cfg.tiny else 256
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    result = PartResult("long_sequence")
    shape = _shape(cfg.tiny, layers=2)
    result.summary["shape"] = (
        f"batch 1, {shape['num_hidden_layers']} layers, width {shape['hidden_size']}, fp32 weights; the fp16 autocast "
        "forward against the fp32 forward of the same model and input"
    )
    errors = []
    for family in ("linformer", "performer"):
        for n in ns:
            label = f"linformer k={k}" if family == "linformer" else "performer"
            report.log(f"long sequence: {label} n={n}")
            row = {"model": label, "n": n}
            try:
                torch.manual_seed(0)
                model = AutoModel.from_config(_config(family, n, k, cfg.tiny, layers=2)).to(device).eval()
                ids = torch.randint(5, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
                ids = ids.to(device)
                with torch.inference_mode():
                    with torch.autocast(device_type, dtype=torch.float16):
                        model(input_ids=ids)  # warm-up (kernel choice), so the timed pass is a steady one
                        _synchronize(device)
                        _reset_peak(device)
                        start = time.perf_counter()
                        half = model(input_ids=ids).last_hidden_state
                        _synchronize(device)
                        row["fp16_forward_ms"] = round(1000 * (time.perf_counter() - start), 2)
                        row["fp16_peak_memory_mib"] = _peak_mib(device)
                    row["fp16_finite"] = bool(torch.isfinite(half).all())
                    try:
                        full = model(input_ids=ids).last_hidden_state
                        error = (half.float() - full).norm() / full.norm()
                        row["relative_error_vs_fp32"] = float(f"{error.item():.3g}")
                    except torch.cuda.OutOfMemoryError:
                        row["relative_error_vs_fp32"] = "fp32 reference did not fit"
                if not row["fp16_finite"]:
                    errors.append(f"{label} n={n}: non-finite fp16 output")
            except Exception as error:
                row["error"] = f"{type(error).__name__}: {error}"
                errors.append(f"{label} n={n}: {row['error']}")
            finally:
                model = half = full = None
                _free(device)
            result.rows.append(row)
            report.log(f"  {row}")
    if errors:
        result.status, result.reason = "failed", "; ".join(errors)
    return result


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------


def resolve_device(requested: str) -> str | None:
    """The device to run on, or None where CUDA was asked for (or `auto`) and there is none."""
    import torch

    if requested == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        return None
    return "cuda" if requested == "auto" else requested


def run_checks(cfg: GpuChecksConfig, command: str = "") -> tuple[str, dict[str, PartResult]]:
    """Run every part of `cfg`, writing the report after each. Returns the run folder and the parts by name."""
    cfg.validate()
    run_dir = claim_run_dir(cfg.output_dir)
    device = resolve_device(cfg.device)
    described = device or "CPU (no CUDA device)"
    if device and device.startswith("cuda"):
        import torch

        described = f"{torch.cuda.get_device_name(torch.device(device))} ({device})"
    report = Report(run_dir, command, described)
    report.log(f"gpu checks: device {described}; writing to {run_dir}")
    functions = {
        "environment": lambda: part_environment(device or "cpu", report),
        "inference_grid": lambda: part_inference_grid(cfg, device, report),
        "training_step": lambda: part_training_step(cfg, device, report),
        "long_sequence": lambda: part_long_sequence(cfg, device, report),
        "realistic_grid": lambda: part_realistic_grid(cfg, device, report),
        "profile": lambda: part_profile(cfg, device, report),
    }
    for name in RUN_ORDER:
        if name not in cfg.parts:
            continue
        started = time.time()
        report.log(f"part {PARTS.index(name) + 1} ({name}): start")
        if name != "environment" and device is None:
            part = PartResult(name, status="skipped", reason=NO_CUDA)
        elif name == "inference_grid" and device == "cpu":
            part = PartResult(
                name,
                status="skipped",
                reason="the grid is fp16/bf16 on CUDA; on CPU run `python -m benchmarks` (fp32)",
            )
        elif name in ("realistic_grid", "profile") and device == "cpu" and not cfg.tiny:
            part = PartResult(
                name,
                status="skipped",
                reason="the realistic load is for CUDA (12 base layers, 32,768 tokens a batch); --tiny runs it on CPU",
            )
        else:
            try:
                part = functions[name]()
            except Exception as error:  # one failing part must not stop the others
                part = PartResult(name, status="failed", reason=f"{type(error).__name__}: {error}")
                report.log(traceback.format_exc())
        part.seconds = round(time.time() - started, 1)
        report.add(part)
        report.log(f"part {PARTS.index(name) + 1} ({name}): {part.status} in {part.seconds} s" + (
            f": {part.reason}" if part.reason else ""
        ))  # fmt: skip
    report.log(f"wrote {run_dir}/report.json, report.md")
    return run_dir, report.parts


def main(argv: list[str] | None = None) -> int:
    from transformers import HfArgumentParser

    argv = sys.argv[1:] if argv is None else argv
    parser = HfArgumentParser(GpuChecksConfig, description=__doc__)
    (cfg,) = parser.parse_args_into_dataclasses(argv)
    try:
        cfg.validate()
        command = "python -m experiments.gpu_checks " + " ".join(shlex.quote(a) for a in argv)
        _, parts = run_checks(cfg, command)
    except (ValueError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    summary = ", ".join(f"{name} {part.status}" for name, part in parts.items())
    print(f"summary: {summary}", flush=True)
    return 1 if any(part.status == "failed" for part in parts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
