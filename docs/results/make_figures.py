"""Draw the figures of the docs from the recorded results in docs/results/data/ (nothing is measured here).

    python docs/results/make_figures.py [--data_dir docs/results/data] [--output_dir docs/figures]

Writes speed_cpu.png (the 2-core CPU default-grid run), speed_gpu_h100.png (the H100 fp16 grid),
speed_gpu_h100_realistic.png (the H100 at realistic load, bf16, 12 layers, 32,768 tokens a batch), quality_vs_k.png
(all-MiniLM-L6-v2 conversion and the small-scale replication), distillation_recovery.png (converted classifiers
against their teacher, per update, on the CPU), distillation_recovery_h200.png (the same on one H200),
compiled_gpu_h100.png and compiled_gpu_h200.png (each card's compiled steps against eager, bf16, 12 layers) and,
once recorded, books_figure3.png (pretraining on whole books: perplexity against tokens seen) and
books_uptrain_minilm.png (all-MiniLM-L6-v2 uptrained to n = 4,096 against its control at 512); author_attribution.png
(the attribution runs and their seeds pooled). Needs matplotlib (the `tools` extra).
"""

import argparse
import csv
import os
import re
from collections import defaultdict
from statistics import mean
from typing import NamedTuple

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CPU_RUN = "cpu2_fp32_default_grid_loaded.csv"
GPU_RUN = "h100_fp16_inference.csv"
REALISTIC_RUN = "h100_realistic_bf16.csv"
REALISTIC_BEFORE = "h100_realistic_bf16_before_fix.csv"  # the Linformer before its SDPA inputs were fixed
QUALITY = "quality_vs_k.csv"
RECOVERY = "distillation_recovery.csv"  # experiments/distillation_evidence.sh's recovery.csv of each task, joined
RECOVERY_H200 = "distillation_recovery_h200.csv"  # the same, from experiments/gpu_evidence.sh on one H200
LAYERS = "bf16-compiled-layers"
EAGER_AND_LAYERS = {"bf16": ("eager", "bf16"), LAYERS: ("compiled per layer", LAYERS)}  # run: (label, RoBERTa's run)
COMPILED = {  # each card's GPU session (experiments/gpu_session.sh and a second call): its files, runs and title
    "h100": dict(
        files=("h100_compiled_bf16.csv", "h100_compiled_bf16_n16384.csv"),
        runs=EAGER_AND_LAYERS,
        baseline_label="RoBERTa-SDPA (the same run)",
        title="NVIDIA H100, bf16 autocast, 12 layers, width 768, 32,768 tokens a batch (2026-11-26)",
    ),
    "h200": dict(
        files=("h200_compiled_bf16.csv", "h200_compiled_bf16_n16384.csv"),
        runs=EAGER_AND_LAYERS | {"bf16-compiled": ("compiled whole, against RoBERTa-SDPA per layer", LAYERS)},
        baseline_label="RoBERTa-SDPA (the same call; compiled per layer for the whole-model bars)",
        legend_below=True,
        title="NVIDIA H200, bf16 autocast, 12 layers, width 768, 32,768 tokens a batch (2026-11-26)",
    ),
}
BOOKS_CURVES = "books_figure3_curves.csv"  # experiments/books_pretraining.py's curves.csv of configs/books/figure3.yaml
UPTRAIN_MINILM = "books_uptrain_minilm_curves.csv"  # the same, of configs/books/uptrain_minilm.yaml
UPTRAIN_MINILM_MLM = "books_uptrain_minilm_mlm_curves.csv"  # the same, of configs/books/uptrain_minilm_mlm.yaml
CONVERSION_MINILM_MLM = (
    "books_conversion_minilm_mlm_curves.csv"  # the same, of configs/books/conversion_minilm_mlm.yaml
)
ATTRIBUTION_RUNS = "author_attribution_runs.csv"  # each attribution run's correct test passages (compare's results)
ATTRIBUTION_POOLED = "author_attribution_pooled.csv"  # experiments/author_attribution.py pool's pairs.csv
# the same runs rescored on every passage of the held-out books (author_attribution rescore, then pool's pairs.csv)
ATTRIBUTION_RESCORED = "author_attribution_pooled_324.csv"
# The MiniLM uptraining plans drawn together: (curves, what the teacher was, line style)
UPTRAIN_MINILM_PLANS = (
    (UPTRAIN_MINILM, "from the fitted head", "--"),
    (UPTRAIN_MINILM_MLM, "from the encoder trained on as a masked LM", "-"),
)


def read_rows(path: str) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def curves(rows: list[dict], column: str) -> dict[str, list[tuple[int, float]]]:
    """{label: [(n, value), ...]} for the rows that measured `column`; the label is the model, with k if it has one."""
    lines = defaultdict(list)
    for row in rows:
        if row.get("status", "ok") == "ok" and row.get(column):
            label = f"{row['model']} k={row['k']}" if row.get("k") else row["model"]
            lines[label].append((int(row["n"]), float(row[column])))
    return {label: sorted(points) for label, points in sorted(lines.items())}


def speed_panel(ax, lines: dict[str, list[tuple[int, float]]], ylabel: str, title: str) -> None:
    for label, points in lines.items():
        style = "--" if label.startswith("roberta") else "-"
        ax.plot(*zip(*points), style, marker="o", markersize=4, label=label)
    ax.set(yscale="log", xlabel="sequence length n", ylabel=ylabel, title=title)
    plain_ticks(ax, sorted({n for points in lines.values() for n, _ in points}))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plain_ticks(ax, xs: list[int]) -> None:
    """A log2 x axis labelled with the values themselves (512, 1024, ...), not powers of 2."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.minorticks_off()


def speed_figures(data_dir: str, out_dir: str) -> list[str]:
    cpu = read_rows(os.path.join(data_dir, CPU_RUN))
    gpu = read_rows(os.path.join(data_dir, GPU_RUN))
    realistic = read_rows(os.path.join(data_dir, REALISTIC_RUN))
    before = [
        dict(row, model="linformer (before fix)")
        for row in read_rows(os.path.join(data_dir, REALISTIC_BEFORE))
        if row["model"] == "linformer" and row["k"] == "128"
    ]
    figures = [
        (
            "speed_cpu.png",
            "2-core CPU, fp32, 2 layers, width 768, batch 1 (machine under load)",
            [
                (curves([r for r in cpu if r["mode"] == "inference"], "time_s"), "inference time (s)", "inference"),
                (curves([r for r in cpu if r["mode"] == "train"], "tokens_per_s"), "tokens/s", "training"),
            ],
        ),
        (
            "speed_gpu_h100.png",
            "NVIDIA H100, fp16, 2 layers, width 768, batch 1",
            [
                (curves(gpu, "time_ms"), "inference time (ms)", "inference"),
                (curves(gpu, "activation_mb"), "activation memory (MB)", "inference memory"),
            ],
        ),
        (
            "speed_gpu_h100_realistic.png",
            "NVIDIA H100, bf16 autocast, 12 layers, width 768, 32,768 tokens a batch",
            [
                (curves([r for r in realistic + before if r["mode"] == mode], "real_tokens_per_s"), "tokens/s", mode)
                for mode in ("inference", "train")
            ],
        ),
    ]
    written = []
    for filename, suptitle, panels in figures:
        fig, axes = plt.subplots(1, len(panels), figsize=(11, 4.2), dpi=90)
        for ax, (lines, ylabel, title) in zip(axes, panels):
            speed_panel(ax, lines, ylabel, title)
        fig.suptitle(suptitle)
        fig.tight_layout()
        written.append(save(fig, out_dir, filename))
    return written


def quality_figure(data_dir: str, out_dir: str) -> str:
    rows = read_rows(os.path.join(data_dir, QUALITY))

    def series(source, model, stage, metric):
        points = [
            (int(r["k_or_m"]), float(r["value"]), float(r["std"] or 0))
            for r in rows
            if (r["source"], r["model"], r["stage"], r["metric"]) == (source, model, stage, metric) and r["k_or_m"]
        ]
        return sorted(points)

    def reference(source, model, metric):
        key = (source, model, metric)
        return next(float(r["value"]) for r in rows if (r["source"], r["model"], r["metric"]) == key)

    fig, axes = plt.subplots(2, 2, figsize=(11, 10), dpi=90)
    panels = [
        (axes[0, 0], "minilm", ["cosine_sst2", "cosine_imdb"], "embedding cosine with the teacher", None),
        (axes[0, 1], "minilm", ["probe_sst2", "probe_imdb"], "frozen-embedding probe accuracy (%)", "teacher"),
    ]
    for ax, source, metrics, ylabel, teacher in panels:
        for metric, colour in zip(metrics, ("C0", "C1")):
            task = metric.split("_")[1].upper().replace("SST2", "SST-2")
            for stage, style in (("transferred", "-"), ("converted", ":")):
                points = series(source, "linformer", stage, metric)
                ax.plot([p[0] for p in points], [p[1] for p in points], style, color=colour, marker="o",
                        label=f"Linformer, {stage}, {task}")  # fmt: skip
                performer = series(source, "performer", stage, metric)
                ax.plot([p[0] for p in performer], [p[1] for p in performer], "*", color=colour, markersize=11,
                        fillstyle="full" if stage == "transferred" else "none",
                        label=f"Performer m=256, {stage}, {task}")  # fmt: skip
            if teacher:
                ax.axhline(reference(source, teacher, metric), color=colour, linestyle="--", alpha=0.6,
                           label=f"teacher, {task}")  # fmt: skip
        ax.set(xlabel="k (Performer: m)", ylabel=ylabel, title="converted from all-MiniLM-L6-v2 (n = 512)")
        plain_ticks(ax, [64, 128, 256])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.13))
    for ax, metric, ylabel in (
        (axes[1, 0], "perplexity", "validation perplexity, one seed (lower is better)"),
        (axes[1, 1], "sst2_dev", "SST-2 dev accuracy (%), mean ± std of 3 seeds"),
    ):
        for stage, style in (("headwise", "-o"), ("mean pooling", "s")):
            points = series("replication", "linformer", stage, metric)
            ax.errorbar([p[0] for p in points], [p[1] for p in points], yerr=[p[2] for p in points], fmt=style,
                        capsize=3, label=f"Linformer, {stage}")  # fmt: skip
        ax.axhline(reference("replication", "roberta", metric), color="k", linestyle="--", label="RoBERTa")
        ax.set(xlabel="k", ylabel=ylabel, title="pretrained from scratch (tiny models, CPU, n = 512)")
        plain_ticks(ax, [32, 64, 128])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, out_dir, "quality_vs_k.png")


def compiled_figure(data_dir: str, out_dir: str, card: str = "h100") -> str:
    """Per mode: each model's tokens/s as a multiple of RoBERTa-SDPA's, eager and compiled, at each n where a compiled
    point was measured (docs/results/compiled-gpu-<card>.md); the ratio is taken within one call of the session, as
    the page does. A card's runs are COMPILED[card]: each run's label and the RoBERTa-SDPA run it is set against (a
    whole-model compiled Linformer against RoBERTa-SDPA compiled per layer, its fastest mode)."""
    spec = COMPILED[card]
    tokens, baseline = {}, {}  # (run, mode, model, n) -> tokens/s; the later call's point where two calls have one
    for name in spec["files"]:
        rows = [r for r in read_rows(os.path.join(data_dir, name)) if r["status"] == "ok"]
        here = {(r["run"], r["mode"], r["model"], int(r["n"])): float(r["real_tokens_per_s"]) for r in rows}
        for (run, mode, model, n), value in here.items():
            against = (spec["runs"].get(run, ("", run))[1], mode, "roberta-sdpa", n)
            if run in spec["runs"] and model != "roberta-sdpa" and against in here:
                tokens[run, mode, model, n], baseline[run, mode, model, n] = value, here[against]
    models = [m for m in ("linformer", "performer", "performer-bf16", "performer-bf16-recompute")
              if any(key[2] == m for key in tokens)]  # fmt: skip
    below = spec.get("legend_below", False)  # one legend under both panels, where a panel's own would hide bars
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.6 if below else 4.2), dpi=90)
    for ax, mode in zip(axes, ("train", "inference")):
        ns = sorted({n for run, m, _, n in tokens if run != "bf16" and m == mode})
        slots = [(m, run) for m in models for run in spec["runs"] if any(k[:3] == (run, mode, m) for k in tokens)]
        width = 0.8 / len(slots)
        for i, (model, run) in enumerate(slots):
            how = spec["runs"][run][0]
            xs, ys = [], []
            for j, n in enumerate(ns):
                if (run, mode, model, n) in tokens:
                    xs.append(j - 0.4 + (i + 0.5) * width)
                    ys.append(tokens[run, mode, model, n] / baseline[run, mode, model, n])
            ax.bar(xs, ys, width, color=f"C{models.index(model)}", alpha=0.45 if run == "bf16" else 1.0,
                   hatch="//" if "whole" in how else None, label=f"{model}, {how}")  # fmt: skip
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label=spec["baseline_label"])
        ax.set_xticks(range(len(ns)), [f"n = {n}" for n in ns])
        ax.set(ylabel="tokens/s, multiple of RoBERTa-SDPA's", title="training step" if mode == "train" else mode)
        ax.grid(True, axis="y", alpha=0.3)
        if not below:
            ax.legend(fontsize=7)
    fig.suptitle(spec["title"])
    if below:
        legend = {}
        for ax in axes:
            legend.update(zip(*reversed(ax.get_legend_handles_labels())))
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=3, fontsize=8)
        fig.tight_layout(rect=(0, 0.2, 1, 1))
    else:
        fig.tight_layout()
    return save(fig, out_dir, f"compiled_gpu_{card}.png")


class RunShape(NamedTuple):
    """What a books run trained: the columns of curves.csv that say which model it is (its seed aside)."""

    model_type: str
    n: int
    k: int | None
    sharing: str
    init: str  # how E, F started


def books_figure(data_dir: str, out_dir: str, data_file: str = BOOKS_CURVES) -> str:
    """The paper's Figure 3 at small scale: validation perplexity on the held-out books against tokens seen,
    (a) at n = 512, RoBERTa-SDPA and every Linformer; (b) the Linformers at k = 256 for each n, RoBERTa at 512 beside
    them (docs/results/books-pretraining.md). Below each, the perplexity at ``<mask>`` inputs over the unigram
    baseline's: under 1.0 a model reads its context. Runs are grouped by the n, k and sharing columns, not by name."""
    rows = read_rows(os.path.join(data_dir, data_file))
    runs = defaultdict(list)  # {run: [(tokens, perplexity, at <mask> x unigram), ...]}
    shape, seed = {}, {}
    for r in rows:
        # the ratio is empty for a run without a unigram baseline (streamed training data): drawn as a gap
        ratio = float(r["mask_input_over_unigram"]) if r.get("mask_input_over_unigram") else float("nan")
        runs[r["run"]].append((int(r["tokens"]) / 1e6, float(r["perplexity"]), ratio))
        # how E, F started (a column since 2026-11-27: "random" before, the default)
        init = r.get("projection_init") or ("random" if r["model_type"] == "linformer" else "")
        k = int(r["k"]) if r["k"] else None
        shape[r["run"]] = RunShape(r["model_type"], int(r["n"]), k, r["sharing"], init)
        seed[r["run"]] = int(r["seed"]) if r.get("seed") else None
    roberta_512 = [run for run, s in shape.items() if s.model_type == "roberta" and s.n == 512]
    linformers = sorted(
        (run for run, s in shape.items() if s.model_type == "linformer"),
        key=lambda run: (
            shape[run].sharing != "headwise",
            shape[run].sharing,  # a sharing's other seeds beside it
            shape[run].k,
            shape[run].n,
            shape[run].init != "random",
            seed[run] or 0,
        ),
    )
    first_seed = min((s for s in seed.values() if s is not None), default=None)
    panels = [
        ("a. n = 512", roberta_512 + [run for run in linformers if shape[run].n == 512], "k"),
        (
            "b. k = 256",
            roberta_512 + sorted((run for run in linformers if shape[run].k == 256), key=lambda run: shape[run].n),
            "n",
        ),
    ]
    # One colour per model (a run's in both panels, its other seeds' too), dotted for the second seed, dash-dotted for a
    # third.
    models = list(dict.fromkeys(shape[run] for run in roberta_512 + linformers))
    colors = {run: f"C{models.index(shape[run]) % 10}" for run in roberta_512 + linformers}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), dpi=90, sharex=True)
    for column, (title, members, varied) in enumerate(panels):
        for run in members:
            model_type, n, k, sharing, init = shape[run]
            if model_type == "roberta":
                label, style = f"RoBERTa-SDPA, n = {n}", "--"
            else:
                label = f"Linformer, {varied} = {k if varied == 'k' else n}"
                label += f", {sharing}" if sharing != "headwise" else ""
                label += f", E, F from {init}" if init != "random" else ""
                style = "-"
            if seed[run] != first_seed:
                label, style = f"{label}, seed {seed[run]}", ":" if seed[run] == first_seed + 1 else "-."
            tokens, perplexity, over_unigram = zip(*sorted(runs[run]))
            for row, values in enumerate((perplexity, over_unigram)):
                axes[row][column].plot(tokens, values, style, color=colors[run], marker="o", markersize=3, label=label)
        top, bottom = axes[0][column], axes[1][column]
        top.set(ylabel="validation perplexity (masked tokens)", title=title)
        top.set_yscale("log")
        top.legend(fontsize=7)
        bottom.axhline(1.0, color="grey", linewidth=0.8)
        bottom.set(xlabel="training tokens seen (millions)", ylabel="perplexity at <mask> inputs / the unigram's")
        for ax in (top, bottom):
            ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("Masked-LM pretraining on whole books: 4 layers, width 256, the same tokens for every model")
    fig.tight_layout()
    return save(fig, out_dir, "books_figure3.png")


def recovery_figure(data_dir: str, out_dir: str, data_file: str, title: str, filename: str) -> str:
    """Per task: each converted student's held-out accuracy against updates (the mean over its seeds, their range
    shaded), and the teacher's line (the better of the teacher and its control, as the ratios in
    docs/results/distillation.md take it)."""
    rows = read_rows(os.path.join(data_dir, data_file))
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    names = sorted({re.sub(r"-s\d+$", "", r["run"]) for r in rows} - {"teacher"})
    colors = {name: f"C{i % 10}" for i, name in enumerate(names)}  # one colour per student in every panel
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4.6), dpi=90, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        runs = defaultdict(lambda: defaultdict(list))  # {run without its -s<seed>: {step: [accuracy per seed]}}
        for r in rows:
            if r["task"] == task:
                runs[re.sub(r"-s\d+$", "", r["run"])][int(r["step"])].append(float(r["accuracy"]))
        teacher = max(max(a) for a in runs.pop("teacher").values())
        reference = max(
            [teacher] + [max(a) for name, points in runs.items() if name.startswith("control") for a in points.values()]
        )
        ax.axhline(reference, color="k", linestyle="--", label=f"reference (teacher or control): {reference:.2f}")
        ax.axhline(0.995 * reference, color="k", linestyle=":", label="99.5% of it")
        for name, points in sorted(runs.items()):
            steps = sorted(points)
            seeds = min(len(points[s]) for s in steps)
            label = name + (f" ({seeds} seeds)" if seeds > 1 else "")
            style = "--" if name.startswith("control") else "-"
            color = colors[name]
            ax.plot(steps, [mean(points[s]) for s in steps], style, color=color, marker="o", markersize=4, label=label)
            if seeds > 1:
                low, high = [min(points[s]) for s in steps], [max(points[s]) for s in steps]
                ax.fill_between(steps, low, high, color=color, alpha=0.15)
        ax.set(xlabel="updates (batch 32)", ylabel="held-out accuracy (%)", title=f"{task}: converted from its teacher")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return save(fig, out_dir, filename)


def uptrain_figure(data_dir: str, out_dir: str, plans=UPTRAIN_MINILM_PLANS) -> str:
    """Uptraining against its control: validation perplexity on the held-out books against tokens seen, over all
    scored tokens and at ``<mask>`` inputs, for the model converted to a Linformer at a longer n and for the teacher
    trained on at its own n on the same tokens (the control, whose first evaluation is the teacher's); the unigram
    baseline at ``<mask>`` inputs beside them (docs/results/books-pretraining.md). ``plans``: (curves file, what the
    teacher was, line style) of each plan drawn, those recorded so far; one colour per role (Linformer, control)."""
    drawn = [(name, teacher, style) for name, teacher, style in plans if os.path.isfile(os.path.join(data_dir, name))]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), dpi=90, sharex=True)
    for name, teacher, style in drawn:
        rows = read_rows(os.path.join(data_dir, name))
        runs = defaultdict(list)  # {run: [(tokens, perplexity, at <mask>), ...]}
        label, colour, unigram = {}, {}, None
        for r in rows:
            runs[r["run"]].append((int(r["tokens"]) / 1e6, float(r["perplexity"]), float(r["mask_input_perplexity"])))
            if r["model_type"] == "linformer":
                label[r["run"]] = f"converted to a Linformer at n = {r['n']}, k = {r['k']}, trained on"
                colour[r["run"]] = "C0"
            else:
                label[r["run"]] = f"the teacher trained on at n = {r['n']} (control)"
                colour[r["run"]] = "C1"
            if r.get("mask_input_over_unigram"):
                unigram = float(r["mask_input_perplexity"]) / float(r["mask_input_over_unigram"])
        suffix = f", {teacher}" if len(drawn) > 1 else ""
        for ax, column in ((axes[0], 1), (axes[1], 2)):
            for run in sorted(runs, key=lambda run: label[run]):
                points = sorted(runs[run])
                ax.plot([p[0] for p in points], [p[column] for p in points], style, color=colour[run], marker="o",
                        markersize=3, label=label[run] + suffix)  # fmt: skip
            if column == 2 and unigram:
                ax.axhline(unigram, color="grey", linewidth=0.8, linestyle=style, label="unigram baseline" + suffix)
    for ax, title in ((axes[0], "all scored tokens"), (axes[1], "at <mask> inputs")):
        ax.set(xlabel="training tokens seen (millions)", ylabel="validation perplexity", title=title)
        ax.set_yscale("log")
        ax.set_yticks([50, 100, 200, 400, 800], labels=["50", "100", "200", "400", "800"])
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2 if len(drawn) > 1 else 3, fontsize=8)
    fig.suptitle("all-MiniLM-L6-v2 converted to n = 4,096 and trained on whole books, beside its control on the same "
                 "tokens")  # fmt: skip
    fig.tight_layout(rect=(0, 0.04 + 0.035 * len(drawn), 1, 1))
    return save(fig, out_dir, "books_uptrain_minilm.png")


def conversion_figure(data_dir: str, out_dir: str, data_file: str = CONVERSION_MINILM_MLM,
                      teacher_file: str = UPTRAIN_MINILM_MLM) -> str:  # fmt: skip
    """What converting a masked LM to a longer n costs before any training: validation perplexity at update 0 (over
    all scored tokens and at ``<mask>`` inputs), by k at n = 4,096 (the run at k = n is full attention) and, for full
    attention, by n; the teacher reading its own n (update 0 of the uptraining plan's control, on the same masked
    tokens) and the unigram baseline at ``<mask>`` inputs beside them; the plan's runs of the teacher's own
    architecture with its positions grown beforehand (copied, or interpolated: the run's name says) as single marks
    at their n (docs/results/books-pretraining.md)."""
    updated_0 = [r for r in read_rows(os.path.join(data_dir, data_file)) if r["step"] == "0"]
    converted = [r for r in updated_0 if r["model_type"] == "linformer"]
    # the source's own architecture at the longer n, its positions grown beforehand (copied or interpolated)
    grown = [r for r in updated_0 if r["model_type"] != "linformer"]
    teacher = next(
        r
        for r in read_rows(os.path.join(data_dir, teacher_file))
        if r["model_type"] != "linformer" and r["step"] == "0"
    )
    longest = max(int(r["n"]) for r in converted)

    def points(rows, x):
        rows = sorted(rows, key=lambda r: int(r[x]))
        return (
            [int(r[x]) for r in rows],
            [float(r["perplexity"]) for r in rows],
            [float(r["mask_input_perplexity"]) for r in rows],
        )

    by_k = points([r for r in converted if int(r["n"]) == longest], "k")
    full = points([r for r in converted if r["k"] == r["n"]] + [teacher], "n")
    unigram = float(teacher["mask_input_perplexity"]) / float(teacher["mask_input_over_unigram"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), dpi=90, sharey=True)
    panels = (
        (axes[0], by_k, "k (E, F: n x k; k = n is full attention)", f"a Linformer at n = {longest:,}, by k"),
        (axes[1], full, "n (the tokens one input holds)", "full attention, positions copied out, by n"),
    )
    for ax, (xs, everything, at_mask), xlabel, title in panels:
        ax.plot(xs, at_mask, "-o", color="C0", markersize=4, label="at <mask> inputs")
        ax.plot(xs, everything, "--o", color="C0", markersize=4, label="all scored tokens")
        ax.axhline(float(teacher["mask_input_perplexity"]), color="C1", linewidth=1,
                   label=f"the teacher reading {int(teacher['n']):,}, at <mask> inputs")  # fmt: skip
        ax.axhline(unigram, color="grey", linewidth=0.8, linestyle="--", label="unigram baseline, at <mask> inputs")
        plain_ticks(ax, xs)
        ax.set(xlabel=xlabel, title=title)
        ax.set_yscale("log")
        ax.set_yticks([50, 100, 200, 400, 800], labels=["50", "100", "200", "400", "800"])
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.grid(True, which="both", alpha=0.3)
    for r in grown:
        how = "interpolated" if "interpolate" in r["run"] else "copied"
        axes[1].plot([int(r["n"])], [float(r["mask_input_perplexity"])], "x" if how == "interpolated" else "+",
                     color="C3" if how == "interpolated" else "C2", markersize=9, linestyle="none",
                     label=f"{teacher['model_type'].upper()} itself, positions {how}, at <mask> inputs")  # fmt: skip
    axes[0].set_ylabel("validation perplexity before any update")
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle("all-MiniLM-L6-v2, trained on as a masked LM at 512, converted: the same masked held-out tokens")
    fig.tight_layout()
    return save(fig, out_dir, "books_conversion_minilm.png")


def attribution_figure(data_dir: str, out_dir: str) -> str:
    """Author attribution on passages of held-out books (docs/results/author-attribution.md): each run's test
    accuracy by model, with the mean of the pooled runs (the rebuilt models, where run with every seed) and chance;
    beside it the pooled differences in points with their 95% intervals, and the issue's 5-point target."""
    runs = read_rows(os.path.join(data_dir, ATTRIBUTION_RUNS))
    pairs = read_rows(os.path.join(data_dir, ATTRIBUTION_POOLED))
    label = {"teacher": "teacher,\nreads 512", "full-n2048": "full attention,\nreads 2,048",
             "linformer": "Linformer k = 256,\nreads 4,096", "full-n4096": "full attention,\nreads 4,096"}  # fmt: skip
    order = [run for run in label if any(r["run"] == run for r in runs)]
    seeds = {r["seed"] for r in runs if r["models"] == "rebuilt"}
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.4), dpi=90, gridspec_kw={"width_ratios": [1.35, 1]})
    ax = axes[0]
    # every (models, seed) of the runs gets a mark: the lost first models in grey, then each seed of the rebuilt ones
    first = sorted({("first", r["seed"]) for r in runs if r["models"] == "first"})
    marks = {key: ("s", "C7", f"seed {key[1]}, first models (lost)") for key in first}
    for i, seed in enumerate(sorted(seeds, key=int)):
        marks[("rebuilt", seed)] = ("oD^v"[i % 4], f"C{i}", f"seed {seed}")
    for (models, seed), (marker, colour, name) in marks.items():
        chosen = {r["run"]: r for r in runs if r["models"] == models and r["seed"] == seed}
        xs = [order.index(run) + 0.12 * (list(marks).index((models, seed)) - (len(marks) - 1) / 2) for run in chosen]
        ys = [100 * int(r["test_correct"]) / int(r["test_passages"]) for r in chosen.values()]
        ax.plot(xs, ys, marker, color=colour, linestyle="none", markersize=7, label=name)
    for i, run in enumerate(order):
        pooled = [r for r in runs if r["run"] == run and r["models"] == "rebuilt"]
        if {r["seed"] for r in pooled} != seeds:  # not run with every seed yet: not pooled
            continue
        accuracy = mean(100 * int(r["test_correct"]) / int(r["test_passages"]) for r in pooled)
        ax.hlines(accuracy, i - 0.25, i + 0.25, color="black", linewidth=2,
                  label="mean of the pooled seeds" if i == 0 else None)  # fmt: skip
    passages = int(runs[0]["test_passages"])
    authors = int(runs[0]["authors"])
    ax.axhline(100 / authors, color="grey", linestyle="--", linewidth=0.8, label=f"chance ({authors} authors)")
    ax.set_xticks(range(len(order)), [label[run] for run in order], fontsize=9)
    ax.set(ylabel=f"test accuracy, % of {passages} passages", title=f"each run, on the first {passages} passages",
           ylim=(0, 50))  # fmt: skip
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax = axes[1]
    # per pair: the first test passages (interval over passages), then, where rescored on every passage of the same
    # held-out books, the passages weighed alike and the books weighed alike, each with its interval over books
    rescored_path = os.path.join(data_dir, ATTRIBUTION_RESCORED)
    rescored = {}
    if os.path.isfile(rescored_path):
        rescored = {(p["run"], p["reference"]): p for p in read_rows(rescored_path)}
    series = [
        ("points", "ci95_low", "ci95_high", "C7", "o", f"{passages} passages, interval over passages", False),
        ("points", "book_ci95_low", "book_ci95_high", "C0", "s", "all passages of the books, over books", True),
        ("by_book_points", "by_book_ci95_low", "by_book_ci95_high", "C1", "D", "each book alike, over books", True),
    ]
    shown = [entry for entry in series if not entry[-1] or rescored]
    for i, pair in enumerate(pairs):
        for j, (centre, low_key, high_key, colour, marker, name, rescored_only) in enumerate(shown):
            row = rescored.get((pair["run"], pair["reference"])) if rescored_only else pair
            if row is None:
                continue
            y = i + 0.22 * (j - (len(shown) - 1) / 2)
            points, low, high = (float(row[key]) for key in (centre, low_key, high_key))
            ax.errorbar(points, y, xerr=[[points - low], [high - points]], fmt=marker, color=colour, capsize=3,
                        markersize=5, label=name if i == 0 else None)  # fmt: skip
    ax.axvline(0, color="black", linewidth=0.8)
    ax.axvline(5, color="C3", linestyle="--", linewidth=0.8, label="target: the Linformer 5 points above the teacher")
    flat = {run: text.replace("\n", " ") for run, text in label.items()}
    ax.set_yticks(range(len(pairs)), [f"{flat[p['run']]}\nagainst {flat[p['reference']]}" for p in pairs], fontsize=8)
    ax.set_ylim(len(pairs) + 0.1 + 0.3 * len(shown), -0.5)  # the first pair on top, room for the legend below
    ax.set(xlabel="difference in points, seeds pooled (95% intervals)", title="pooled over the seeds")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Which author wrote a passage of a held-out book? 4-layer, 256-wide models, 2-core CPU")
    fig.tight_layout()
    return save(fig, out_dir, "author_attribution.png")


def save(fig, out_dir: str, filename: str) -> str:
    path = os.path.join(out_dir, filename)
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv=None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", "--data-dir", default=os.path.join(HERE, "data"))
    parser.add_argument("--output_dir", "--output-dir", default=os.path.join(HERE, "..", "figures"))
    args = parser.parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    written = speed_figures(args.data_dir, args.output_dir) + [
        quality_figure(args.data_dir, args.output_dir),
        compiled_figure(args.data_dir, args.output_dir, "h100"),
        compiled_figure(args.data_dir, args.output_dir, "h200"),
        recovery_figure(
            args.data_dir,
            args.output_dir,
            RECOVERY,
            "all-MiniLM-L6-v2 classifiers converted and fine-tuned on, 2-core CPU",
            "distillation_recovery.png",
        ),
        recovery_figure(
            args.data_dir,
            args.output_dir,
            RECOVERY_H200,
            "the same with two seeds each, IMDB read to 512 tokens, one H200 (2026-11-26)",
            "distillation_recovery_h200.png",
        ),
    ]
    if os.path.isfile(os.path.join(args.data_dir, BOOKS_CURVES)):
        written.append(books_figure(args.data_dir, args.output_dir))
    else:  # until the plan's runs are recorded (docs/results/books-pretraining.md says how far they are)
        print(f"books_figure3.png not drawn: {BOOKS_CURVES} is not recorded yet")
    if os.path.isfile(os.path.join(args.data_dir, UPTRAIN_MINILM)):
        written.append(uptrain_figure(args.data_dir, args.output_dir))
    if os.path.isfile(os.path.join(args.data_dir, CONVERSION_MINILM_MLM)):
        written.append(conversion_figure(args.data_dir, args.output_dir))
    written.append(attribution_figure(args.data_dir, args.output_dir))
    for path in written:
        print("wrote", os.path.relpath(path))
    return written


if __name__ == "__main__":
    main()
