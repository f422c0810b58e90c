"""The report: Markdown tables (Table 3's layout, every point, linear cost, peer), PNG plots, the machine."""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

from .config import BenchmarkConfig
from .models import MODELS
from .results import BenchmarkRow, Mode, Status
from .run import RunInfo


def _find(rows: list[BenchmarkRow], mode: Mode, model: str, n: int, k: int | None = None) -> BenchmarkRow | None:
    for row in rows:
        if row.mode == mode and row.model == model and row.n == n and row.k == k:
            return row
    return None


def _cell(baseline: BenchmarkRow | None, compressed: BenchmarkRow | None, column: str) -> str:
    """baseline / compressed model of `column`, or why there is no ratio; for times, the FLOP ratio beside it (the
    speed-up's ceiling where both run at the same fraction of the machine's peak)."""
    if compressed is None or baseline is None:
        return "-"
    for row, name in ((baseline, "baseline "), (compressed, "")):
        if row.status == Status.SKIPPED:  # estimated not to fit, or unavailable (FlashAttention-2 without flash_attn)
            unavailable = row.reason and not row.reason.startswith("would not fit")
            return f"{name}{'skipped' if unavailable else 'OOM'}"
        if row.status == Status.FAILED:
            return f"{name}failed"
    a, b = getattr(baseline, column), getattr(compressed, column)
    if a is None or b is None or b == 0:
        return "n/a"
    cell = f"{a / b:.2f}x"
    if column == "time_s" and baseline.gflop and compressed.gflop:
        cell += f" (FLOP {baseline.gflop / compressed.gflop:.2f}x)"
    return cell


def ratio_tables(rows: list[BenchmarkRow], cfg: BenchmarkConfig) -> str:
    """Markdown: each linear-cost model's speed-up and memory saving over each baseline (Table 3's layout: n down,
    k across; one column, m, for Performer)."""
    out = []
    baselines = [m for m in cfg.models if not MODELS[m].linear]
    compressed = [m for m in cfg.models if MODELS[m].linear]
    sections = [(Mode.INFERENCE, "time_s", "Inference speed-up", cfg.ns)]
    if cfg.measure_memory:
        sections.append((Mode.INFERENCE, "activation_mb", "Inference activation-memory saving", cfg.ns))
    sections.append((Mode.TRAIN, "time_s", "Training step (forward + backward + AdamW) speed-up", cfg.train_ns))
    for mode, column, title, ns in sections:
        if not ns:
            continue
        for model in compressed:
            if MODELS[model].takes_k:
                ks, header = cfg.ks, "| n \\ k | " + " | ".join(str(k) for k in cfg.ks) + " |"
            else:
                ks, header = [None], f"| n | m={cfg.num_random_features} |"
            for baseline in baselines:
                flops = " (in brackets: the FLOP ratio, the ceiling)" if column == "time_s" else ""
                out.append(f"**{title} of {model} over {baseline}** (baseline / {model}{flops})\n")
                out.append(header)
                out.append("| --- |" + " --- |" * len(ks))
                for n in ns:
                    cells = [_cell(_find(rows, mode, baseline, n), _find(rows, mode, model, n, k), column) for k in ks]
                    out.append(f"| {n} | " + " | ".join(cells) + " |")
                out.append("")
    return "\n".join(out)


@dataclass(frozen=True)
class Target:
    """One of issue 20's targets: `model` (every k of the run) at least `ratio` times as fast as `baseline` at n."""

    mode: Mode
    model: str
    baseline: str
    n: int
    ratio: float


_MODERNBERTS = ("modernbert-base-sdpa", "modernbert-base-fa2", "modernbert-sdpa", "modernbert-fa2")
# For H100 or better, bf16, 12 layers, 32,768 tokens a batch (the `gpu-realistic` presets); with 25% padding the
# same ratios within 10%.
TARGETS = [
    Target(Mode.TRAIN, "linformer", "roberta-sdpa", 512, 1.0),
    Target(Mode.TRAIN, "linformer", "roberta-sdpa", 4096, 1.6),
    Target(Mode.TRAIN, "linformer", "roberta-sdpa", 16384, 3.0),
    Target(Mode.INFERENCE, "linformer", "roberta-sdpa", 512, 1.0),
    Target(Mode.INFERENCE, "linformer", "roberta-sdpa", 4096, 1.5),
    *(Target(mode, "linformer", m, 8192, 1.5) for m in _MODERNBERTS for mode in (Mode.INFERENCE, Mode.TRAIN)),
    Target(Mode.TRAIN, "performer", "roberta-sdpa", 8192, 1.0),
]


def targets_table(rows: list[BenchmarkRow], cfg: BenchmarkConfig) -> str:
    """Markdown: each target whose two points the run measured, with the speed-up in real tokens/s, its FLOP
    ratio (the ceiling) and whether it is met; empty when the run has none of them."""
    out = []
    for target in TARGETS:
        for k in cfg.ks if MODELS[target.model].takes_k else [None]:
            ours, theirs = (
                _find(rows, target.mode, target.model, target.n, k),
                _find(rows, target.mode, target.baseline, target.n),
            )
            if ours is None or theirs is None:
                continue
            label = target.model if k is None else f"{target.model} k={k}"
            ceiling = f"{theirs.gflop / ours.gflop:.2f}x" if theirs.gflop and ours.gflop else "n/a"
            if ours.status == Status.OK and theirs.status == Status.OK and ours.time_s and theirs.time_s:
                measured = theirs.time_s / ours.time_s  # one batch for both: the ratio of their (real) tokens/s
                cells = [f"{measured:.2f}x", "yes" if measured >= target.ratio else "no"]
            else:
                cells = [_cell(theirs, ours, "time_s"), "-"]
            out.append(
                f"| {target.mode.value} | {label} | {target.baseline} | {target.n} | >= {target.ratio}x | {ceiling} | "
                + " | ".join(cells)
                + " |"
            )
    if not out:
        return ""
    header = [
        "| mode | model | over | n | target | FLOP ratio (ceiling) | measured (real tokens/s) | met |",
        "|" + " --- |" * 8,
    ]
    return "\n".join(header + out)


PEER_SECTIONS = [
    (Mode.INFERENCE, "time_s", "Inference time (s)", "s"),
    (Mode.INFERENCE, "activation_mb", "Inference activation memory (MB above the weights)", " MB"),
    (Mode.TRAIN, "time_s", "Training step (forward + backward + AdamW) time (s)", "s"),
]


def peers_table(rows: list[BenchmarkRow], cfg: BenchmarkConfig) -> str:
    """Markdown: per n, the Linformer (each k) beside every other model of the run, each cell `value (ratio)` with
    ratio = that model / Linformer, so > 1x is a Linformer win. A peer that ran other attention than asked (BigBird's
    full attention on short inputs) is marked with what ran. Empty unless the run has a Linformer and a peer."""
    others = [m for m in cfg.models if m != "linformer"]
    if "linformer" not in cfg.models or all(MODELS[m].default for m in others):
        return ""
    out = []
    for mode, column, title, unit in PEER_SECTIONS:
        ns = cfg.ns if mode == Mode.INFERENCE else cfg.train_ns
        if not ns or (column == "activation_mb" and not cfg.measure_memory):
            continue
        for k in cfg.ks:
            out.append(f"**{title}: Linformer k={k} against the others** (in brackets: other / Linformer)\n")
            out.append(f"| n | linformer k={k} | " + " | ".join(others) + " |")
            out.append("| --- |" + " --- |" * (len(others) + 1))
            for n in ns:
                ours = _find(rows, mode, "linformer", n, k)
                ours_value = getattr(ours, column) if ours is not None and ours.status == Status.OK else None
                cells = ["-" if ours_value is None else f"{ours_value:.4g}{unit}"]
                for model in others:
                    row = _find(rows, mode, model, n)
                    if row is None or row.status != Status.OK or getattr(row, column) is None:
                        cells.append("-" if row is None else row.status.value)
                        continue
                    value = getattr(row, column)
                    cell = f"{value:.4g}{unit}"
                    if ours_value:
                        cell += f" ({value / ours_value:.2f}x)"
                    if row.attention and not row.attention.startswith(("sliding", "block_sparse")):
                        cell += f" [ran {row.attention}]"
                    cells.append(cell)
                out.append(f"| {n} | " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def _text(value) -> str:
    """A Markdown table cell: one line (an error's lines joined), its pipes escaped, so no text can break the table."""
    if value is None:
        return ""
    text = value.value if isinstance(value, Status | Mode) else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def absolute_table(rows: list[BenchmarkRow]) -> str:
    """Markdown: every point's time, throughput, achieved FLOP/s and memory."""
    out = [
        "| mode | model | n | k | batch | status | time (s) | tokens/s | real tokens/s (padding) | GFLOP | GFLOP/s "
        "| of matmul peak | activation MB | peak MB | weights MB | attention that ran | attention kernels "
        "| first call (s), compiled |",
        "|" + " --- |" * 18,
    ]
    for r in rows:
        status = r.status.value + (f": {r.reason}" if r.reason else "")
        if r.memory_error:
            status += f" (memory failed: {r.memory_error})"
        fraction = f"{r.fraction_of_peak:.0%}" if r.fraction_of_peak is not None else ""
        gflop = f"{r.gflop} (counted)" if r.gflop is not None and r.flop_source == "FlopCounterMode" else r.gflop
        real = "" if r.real_tokens_per_s is None else f"{r.real_tokens_per_s} ({r.padding_fraction:.0%})"
        cells = [r.mode, r.model, r.n, r.k, r.batch, status, r.time_s, r.tokens_per_s, real, gflop, r.achieved_gflops,
                 fraction, r.activation_mb, r.peak_mb, r.weights_mb, r.attention, r.kernels, r.compile_s]  # fmt: skip
        out.append("| " + " | ".join(_text(c) for c in cells) + " |")
    return "\n".join(out)


def scaling_table(rows: list[BenchmarkRow]) -> str:
    """Markdown: time at each n against the smallest n, with the FLOP ratio (measured side by side in one process)."""
    scaling = [r for r in rows if r.mode == Mode.SCALING and r.status == Status.OK]
    if not scaling:
        return ""
    out = [
        "| model | k | n | time (s) | time / time at smallest n | FLOP ratio | of matmul peak |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model, k in sorted({(r.model, r.k) for r in scaling}):
        points = sorted((r for r in scaling if (r.model, r.k) == (model, k)), key=lambda r: r.n)
        first = points[0]
        for r in points:
            out.append(
                f"| {model} | {'' if k is None else k} | {r.n} | {r.time_s} | {r.time_s / first.time_s:.2f} | "
                f"{r.gflop / first.gflop:.2f} | {r.fraction_of_peak:.0%} |"
            )
    return "\n".join(out)


def peer_table(info: RunInfo) -> str:
    if not info.peer:
        return ""
    out = ["| n | k | module | median time (s) | linformer (PyPI) / this |", "| --- | --- | --- | --- | --- |"]
    for entry in info.peer:
        if entry.error:
            out.append(f"| {entry.n} | {entry.k} | {_text('failed: ' + entry.error)} | | |")
            continue
        peer_time = entry.median_s["linformer (PyPI)"]
        for name, seconds in entry.median_s.items():
            out.append(f"| {entry.n} | {entry.k} | {name} | {seconds:.4f} | {peer_time / seconds:.2f}x |")
    return "\n".join(out)


FIGURES = [
    (Mode.INFERENCE, "time_s", "inference time (s)", "inference_time.png"),
    (Mode.INFERENCE, "activation_mb", "activation memory above weights (MB)", "inference_memory.png"),
    (Mode.TRAIN, "tokens_per_s", "training tokens/s (forward + backward + AdamW)", "training_throughput.png"),
]


def plot(rows: list[BenchmarkRow], cfg: BenchmarkConfig, out_dir: str) -> list[str]:
    """Log-log PNGs against n, one line per model (and k): inference time, inference memory, training throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({r.label for r in rows}, key=lambda label: (label.startswith("lin"), label))
    written = []
    for mode, column, ylabel, filename in FIGURES:
        fig, ax = plt.subplots(figsize=(6, 4.2), dpi=90)
        drawn = False
        for label in labels:
            points = [
                (r.n, getattr(r, column))
                for r in rows
                if r.mode == mode and r.label == label and getattr(r, column)  # measured and > 0 (log axis)
            ]
            if points:
                ax.plot(*zip(*points), marker="o", label=label, linestyle="--" if "roberta" in label else "-")
                drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{mode.value}, {cfg.device} {cfg.dtype}, {cfg.layers} layers, d={cfg.hidden_size}, H={cfg.heads}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, filename)
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


CPUINFO = "/proc/cpuinfo"
# The instruction sets a record names, each by the /proc/cpuinfo flag that says the CPU offers it (AVX-512 by its
# foundation, AMX by its tile registers).
CPU_FEATURES = {"avx512": ("AVX-512", "avx512f"), "avx2": ("AVX2", "avx2"), "amx": ("AMX", "amx_tile")}


def cpu_details(path: str = CPUINFO) -> dict:
    """The CPU as /proc/cpuinfo gives its first processor: the model name, the vendor, the family, model and stepping
    numbers (which say the generation where the model name does not: a virtual machine's can be just "AMD EPYC"), and
    whether it offers AVX-512, AVX2 and AMX, and runs under a hypervisor, from its flags. Where there is no
    /proc/cpuinfo (macOS) or it lacks a field, the name is platform's and the rest None: not known, not "no"."""
    fields = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():  # the end of the first processor's block
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass

    def number(key: str) -> int | None:
        try:
            return int(fields[key])
        except (KeyError, ValueError):
            return None

    flags = fields.get("flags", fields.get("Features"))  # x86's flags; an Arm CPU's Features (no AVX, no AMX)
    offered = set(flags.split()) if flags is not None else None
    details = {
        "model_name": fields.get("model name") or platform.processor() or platform.machine() or None,
        "vendor": fields.get("vendor_id"),
        "family": number("cpu family"),
        "model": number("model"),
        "stepping": number("stepping"),
    }
    for key, (_, flag) in CPU_FEATURES.items():
        details[key] = None if offered is None else flag in offered
    details["hypervisor"] = None if offered is None else "hypervisor" in offered
    return details


def cpu_description(details: dict) -> str:
    """`cpu_details` as a record states it: "AMD EPYC (family 25, model 17; AVX-512 yes, AVX2 yes, AMX no; under a
    hypervisor)", with only what is known."""
    known = []
    if details.get("family") is not None:
        known.append(f"family {details['family']}, model {details.get('model')}")
    features = [
        f"{name} {'yes' if details[key] else 'no'}"
        for key, (name, _) in CPU_FEATURES.items()
        if details.get(key) is not None
    ]
    if features:
        known.append(", ".join(features))
    if details.get("hypervisor"):
        known.append("under a hypervisor")
    name = details.get("model_name") or "unknown CPU"
    return f"{name} ({'; '.join(known)})" if known else name


def machine_description(cfg: BenchmarkConfig, cpu: dict | None = None) -> str:
    """The machine line of a record: the CPU (`cpu_description` of ``cpu``, by default this machine's
    `cpu_details`), the number of CPUs, torch and its threads, and the load."""
    import torch

    threads = cfg.threads or torch.get_num_threads()
    return (
        f"{cpu_description(cpu if cpu is not None else cpu_details())}, {os.cpu_count()} logical CPUs, "
        f"torch {torch.__version__} with {threads} threads, load average (1, 5, 15 min) {load_average()}"
    )


def _batch_text(cfg: BenchmarkConfig) -> str:
    text = f"batch {cfg.batch_at(0) if cfg.tokens_per_batch is None else f'{cfg.tokens_per_batch} / n'}"
    if cfg.padding_fraction:
        text += f", {cfg.padding_fraction:.0%} of the positions padding (real tokens/s excludes them)"
    return text


def _precision_text(cfg: BenchmarkConfig) -> str:
    compiled = "" if cfg.compile == "no" else f", torch.compile of the {cfg.compile} ({cfg.compile_mode or 'default'})"
    if not cfg.autocast:
        return f"weights in {cfg.dtype}{compiled}"
    return f"fp32 weights under {cfg.dtype} autocast" + (", loss scaling" if cfg.dtype == "fp16" else "") + compiled


def report_markdown(rows: list[BenchmarkRow], info: RunInfo, cfg: BenchmarkConfig, command: str, machine: str) -> str:
    parts = [
        "# Benchmark results\n",
        f"Command: `{command}`  ",
        f"Machine: {machine}  ",
        f"Dense matmul peak measured in this run: {info.matmul_peak_gflops:.1f} GFLOP/s ({cfg.dtype})  ",
        f"Runtime: {info.runtime_s / 60:.1f} min  ",
        f"Models: width {cfg.hidden_size}, {cfg.heads} heads, d_ff {cfg.intermediate_size}, {cfg.layers} layers, "
        f"{_batch_text(cfg)}, {_precision_text(cfg)}; Linformer sharing={cfg.sharing}, projection={cfg.projection}; "
        f"Performer m={cfg.num_random_features} (softmax kernel, orthogonal features); Longformer window "
        f"{cfg.longformer_window}; BigBird block {cfg.bigbird_block_size}, {cfg.bigbird_random_blocks} random blocks\n",
    ]
    unmeasured = cfg.unmeasured_ks()
    if unmeasured:
        parts.append(f"Not measured (a Linformer's k is at most n): {'; '.join(unmeasured)}\n")
    targets = targets_table(rows, cfg)
    if targets:
        parts += [
            "## Issue 20's targets\n",
            "(Set for H100 or better, bf16, 12 layers, 32,768 tokens a batch: the `gpu-realistic` presets.)\n",
            targets,
            "",
        ]
    peers = peers_table(rows, cfg)
    if peers:
        parts += ["## Linformer against the peers\n", peers]
    parts += [
        "## Ratio tables\n",
        ratio_tables(rows, cfg),
        "## All points\n",
        absolute_table(rows),
        "",
    ]
    scaling = scaling_table(rows)
    if scaling:
        parts += ["## Linear cost (each point timed side by side in one process)\n", scaling, ""]
    peer = peer_table(info)
    if peer:
        parts += ["## Attention module against the `linformer` package (no mask)\n", peer, ""]
    return "\n".join(parts)
