"""Everything a CUDA machine should run, in one command: `python -m experiments.gpu_checks --output_dir DIR`.

Parts, each timed on its own and reported `ok`, `skipped` (with the reason) or `failed` (with the error; the other
parts still run):

1. `environment`: device name and memory, torch, CUDA and transformers versions.
2. `inference_grid`: the efficiency benchmark (`benchmarks`) on CUDA in fp16 (n = 512 ... 65536) and bf16
   (n up to 16384), RoBERTa (SDPA, eager) against Linformer (k = 128, 256) and Performer, within a time budget.
3. `training_step`: a V100-style fp16 AMP training step (autocast + `GradScaler`, AdamW, MLM loss) of Linformer and
   RoBERTa at base width side by side, the same in bf16 autocast (no scaler), and a Performer step in fp16.
4. `long_sequence`: Linformer and Performer forward at n = 16384 and 65536 in fp16 autocast: finite outputs and
   their relative error against an fp32 forward of the same model on the same input.

The parts run in the order 1, 3, 4, 2: the grid is the longest and is bounded by `--grid_time_budget_s`, so a run cut
short keeps the short checks. Without CUDA, parts 2-4 are skipped ("no CUDA device"); `--device cpu --tiny` runs
parts 3 and 4 on CPU with a tiny model, which is how the tests exercise them. Imports nothing of `datasets`.

Output: a run folder (default `outputs/gpu_checks/<timestamp>`; an existing non-empty folder is refused) with
`report.json` (rewritten after every part, so a killed run keeps the parts done), `report.md` (a table per part) and
the benchmark's own `results.csv` / `results.md` per dtype under `grid_fp16/`, `grid_bf16/`.
"""

from __future__ import annotations

import dataclasses
import gc
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

PARTS = ("environment", "inference_grid", "training_step", "long_sequence")
RUN_ORDER = ("environment", "training_step", "long_sequence", "inference_grid")
NO_CUDA = "no CUDA device"


@dataclass
class GpuChecksConfig:
    """The command line of `experiments/gpu_checks.py` (each field a flag of the same name)."""

    output_dir: str | None = field(
        default=None, metadata={"help": "run folder (default outputs/gpu_checks/<timestamp>); must not hold files"}
    )
    device: str = field(default="auto", metadata={"help": "auto (CUDA if there is one), cuda[:i] or cpu"})
    tiny: bool = field(default=False, metadata={"help": "tiny models and lengths (parts 3 and 4 testable on CPU)"})
    parts: list[str] = field(default_factory=lambda: list(PARTS), metadata={"help": f"a subset of {PARTS}"})
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

    def validate(self):
        unknown = set(self.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
        if not (self.device in ("auto", "cpu") or self.device.startswith("cuda")):
            raise ValueError(f"device must be auto, cpu or cuda[:i], got {self.device!r}")
        if self.train_steps < 1 or self.warmup_steps < 0:
            raise ValueError("train_steps must be >= 1 and warmup_steps >= 0")


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
    try:
        import accelerate

        row["accelerate"] = accelerate.__version__
    except ImportError:
        row["accelerate"] = None
    return PartResult("environment", rows=[row])


# ---------------------------------------------------------------------------------------------------------------
# Part 2: the inference grid (the efficiency benchmark)
# ---------------------------------------------------------------------------------------------------------------


def part_inference_grid(cfg: GpuChecksConfig, device: str, report: Report) -> PartResult:
    from benchmarks import BenchmarkConfig, RunInfo, ratio_tables, report_markdown, run_benchmark, write_csv

    result = PartResult("inference_grid")
    started = time.time()
    # fp16 first with 65% of the budget; bf16 gets the rest of the budget, whatever fp16 left included.
    deadlines = {"fp16": started + 0.65 * cfg.grid_time_budget_s, "bf16": started + cfg.grid_time_budget_s}
    markdown, not_run = [], []
    for dtype, ns in (("fp16", cfg.grid_fp16_ns), ("bf16", cfg.grid_bf16_ns)):
        full = BenchmarkConfig(
            ns=list(ns), ks=list(cfg.grid_ks), train_ns=[], scaling_ns=[], models=list(cfg.grid_models),
            device=device, dtype=dtype, layers=2, timeout_s=180.0,
        )  # fmt: skip
        full.validate()
        out_dir = os.path.join(report.run_dir, f"grid_{dtype}")
        os.makedirs(out_dir, exist_ok=True)
        rows, done, info = [], [], None
        for n in ns:
            if time.time() > deadlines[dtype]:
                not_run.append(f"{dtype} n={n}")
                continue
            report.log(f"grid {dtype} n={n}")
            # One benchmark run per n, so the CSV grows as the grid goes and the budget is checked between n.
            # A hung worker must not eat the whole command's time: no worker outlives the budget by much.
            timeout_s = min(180.0, max(60.0, deadlines[dtype] - time.time()))
            one = dataclasses.replace(full, ns=[n], timeout_s=timeout_s)
            try:
                n_rows, n_info = run_benchmark(one, log=lambda message: report.log(f"  {message}"))
            except Exception as error:  # e.g. the matmul-peak process died: this n fails, the next n still runs
                report.log(f"  grid {dtype} n={n} failed: {type(error).__name__}: {error}")
                result.rows.append(
                    {
                        "dtype": dtype,
                        "model": "(all)",
                        "n": n,
                        "status": "failed",
                        "reason": f"{type(error).__name__}: {error}",
                    }
                )
                report.add(result)
                continue
            rows += n_rows
            done.append(n)
            if info is None:
                info = n_info
            else:
                info = RunInfo(
                    info.matmul_peak_gflops, info.memory_budget_gib, runtime_s=info.runtime_s + n_info.runtime_s
                )
            shown = dataclasses.replace(full, ns=done)
            write_csv(rows, os.path.join(out_dir, "results.csv"))
            with open(os.path.join(out_dir, "results.md"), "w") as f:
                f.write(report_markdown(rows, info, shown, report.command, report.device))
            for row in n_rows:
                result.rows.append(
                    {"dtype": dtype, "model": row.label, "n": row.n, "status": row.status.value,
                     "time_ms": None if row.time_s is None else round(1000 * row.time_s, 3),
                     "activation_mb": row.activation_mb, "fraction_of_peak": row.fraction_of_peak,
                     "reason": row.reason or row.memory_error}
                )  # fmt: skip
            report.add(result)  # the rows so far survive a killed run
        if done:
            markdown.append(f"### {dtype} (Table 3 layout; every point in `grid_{dtype}/results.md`)\n")
            markdown.append(ratio_tables(rows, dataclasses.replace(full, ns=done)))
            result.summary[f"{dtype} dense matmul peak GFLOP/s"] = info.matmul_peak_gflops
    result.markdown = "\n".join(markdown)
    if not_run:
        result.summary["not run (time budget)"] = ", ".join(not_run)
    failed = [r for r in result.rows if r["status"] == "failed"]
    if failed:
        result.status = "failed"
        result.reason = (
            f"{len(failed)} points failed, e.g. {failed[0]['model']} n={failed[0]['n']}: {failed[0]['reason']}"
        )
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
