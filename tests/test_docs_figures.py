"""docs/results/make_figures.py draws every figure from the committed CSVs, and those CSVs hold the figures the
results pages state."""

import csv
import os
import runpy

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "docs", "results", "data")
SCRIPT = os.path.join(REPO, "docs", "results", "make_figures.py")


def test_the_figures_script_draws_every_figure_from_the_committed_data(tmp_path):
    pytest.importorskip("matplotlib")
    make_figures = runpy.run_path(SCRIPT)
    written = make_figures["main"](["--output_dir", str(tmp_path)])
    names = sorted(os.path.basename(path) for path in written)
    assert names == [
        "author_attribution.png",
        "books_conversion_minilm.png",
        "books_figure3.png",
        "books_uptrain_minilm.png",
        "compiled_gpu_h100.png",
        "compiled_gpu_h200.png",
        "distillation_recovery.png",
        "distillation_recovery_h200.png",
        "quality_vs_k.png",
        "speed_cpu.png",
        "speed_gpu_h100.png",
        "speed_gpu_h100_realistic.png",
    ]
    for path in written:
        with open(path, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
        assert os.path.getsize(path) > 10_000  # axes, lines and labels, not an empty canvas


def test_the_curves_keep_one_line_per_model_and_k_and_skip_what_was_not_measured():
    curves = runpy.run_path(SCRIPT)["curves"]
    with open(os.path.join(DATA, "h100_fp16_inference.csv"), newline="") as fh:
        rows = list(csv.DictReader(fh))
    lines = curves(rows, "time_ms")
    assert set(lines) == {"linformer k=128", "linformer k=256", "performer k=256", "roberta-eager", "roberta-sdpa"}
    assert [n for n, _ in lines["roberta-eager"]] == [512, 1024, 2048, 4096, 8192, 16384]  # 32768 was skipped
    assert dict(lines["linformer k=256"])[32768] == 4.09


def test_the_plotted_data_match_the_results_pages():
    """Each CSV row copied from a results table appears in that table (a typo in either would show here)."""
    with open(os.path.join(REPO, "docs", "results", "efficiency-gpu-h100.md"), encoding="utf-8") as fh:
        gpu_page = fh.read()
    with open(os.path.join(DATA, "h100_fp16_inference.csv"), newline="") as fh:
        for row in csv.DictReader(fh):
            if row["status"] == "ok":
                assert f"{float(row['time_ms']):.2f} ({row['activation_mb']})" in gpu_page, row
    with open(os.path.join(REPO, "docs", "results", "pretrained-minilm.md"), encoding="utf-8") as fh:
        minilm_page = fh.read()
    with open(os.path.join(REPO, "docs", "results", "replication.md"), encoding="utf-8") as fh:
        replication_page = fh.read()
    with open(os.path.join(DATA, "quality_vs_k.csv"), newline="") as fh:
        for row in csv.DictReader(fh):
            page = minilm_page if row["source"] == "minilm" else replication_page
            value = row["value"] + (f" ± {row['std']}" if row["std"] else "")
            assert value in page, row

    # The recovery curves: each run's accuracies, in update order, are its row of a table on the distillation page
    # (the teacher's are listed in one cell).
    with open(os.path.join(REPO, "docs", "results", "distillation.md"), encoding="utf-8") as fh:
        distillation_page = fh.read().replace("**", "")
    runs = {}
    for data in ("distillation_recovery.csv", "distillation_recovery_h200.csv"):
        with open(os.path.join(DATA, data), newline="") as fh:
            for row in csv.DictReader(fh):
                runs.setdefault((data, row["task"], row["run"]), []).append((int(row["step"]), row["accuracy"]))
    for (_, task, run), points in runs.items():
        accuracies = [accuracy for _, accuracy in sorted(points)]
        if run == "teacher":
            assert ", ".join(accuracies) in distillation_page, (task, run)
        else:
            assert f"| {run} | " + " | ".join(accuracies) + " |" in distillation_page, (task, run)


def test_the_attribution_data_are_the_record_pages():
    """Each attribution run's accuracy is in its model's row of the pooled table of docs/results/author-attribution.md's
    section of all four models over three seeds, with the mean of the model's rebuilt runs beside it, and each pooled
    difference with its interval is in that section, as pool wrote them."""
    with open(os.path.join(REPO, "docs", "results", "author-attribution.md"), encoding="utf-8") as fh:
        page = fh.read()
    start = page.index("\n## All four models over three seeds")
    end = page.find("\n## ", start + 1)
    pooled_section = page[start : end if end != -1 else len(page)]
    starts = {
        "teacher": "| teacher, truncated |",
        "linformer": "| Linformer k = 256 (uptrained) |",
        "full-n2048": "| full attention (positions copied) |",
        "full-n4096": "| full attention at 4,096 (positions copied) |",
    }
    table = {run: next(line for line in pooled_section.splitlines() if line.startswith(start))
             for run, start in starts.items()}  # fmt: skip
    with open(os.path.join(DATA, "author_attribution_runs.csv"), newline="") as fh:
        runs = list(csv.DictReader(fh))
    seeds = {row["seed"] for row in runs if row["models"] == "rebuilt"}
    assert len(runs) == 15 and seeds == {"1", "2", "3"}
    for row in runs:
        accuracy = 100 * int(row["test_correct"]) / int(row["test_passages"])
        assert f"| {accuracy:.1f}" in table[row["run"]], row
        if row["models"] == "rebuilt":
            assert f"({row['test_correct']}" in table[row["run"]], row
    for run in starts:  # the table's mean is the mean of the model's rebuilt runs
        rebuilt = [100 * int(r["test_correct"]) / int(r["test_passages"]) for r in runs
                   if r["run"] == run and r["models"] == "rebuilt"]  # fmt: skip
        assert len(rebuilt) >= 2 and f"| {sum(rebuilt) / len(rebuilt):.1f}" in table[run], run
    with open(os.path.join(DATA, "author_attribution_pooled.csv"), newline="") as fh:
        pairs = list(csv.DictReader(fh))
    # pooled over every seed: the models each seed ran
    pooled = [
        run for run in starts if {r["seed"] for r in runs if r["run"] == run and r["models"] == "rebuilt"} == seeds
    ]
    assert {(p["run"], p["reference"]) for p in pairs} == {
        *((run, "teacher") for run in pooled if run != "teacher"),
        *(("linformer", run) for run in pooled if run.startswith("full-n")),
    }
    for pair in pairs:
        points, low, high = (float(pair[key]) for key in ("points", "ci95_low", "ci95_high"))
        assert f"{points:+.1f} ({low:+.1f} to {high:+.1f}; " in pooled_section, pair


def test_the_attribution_figure_draws_every_run_and_a_mean_only_where_every_seed_ran(tmp_path):
    """Each row of the runs CSV is one point, whatever its seed (a third seed is drawn, not dropped), and a model's
    mean line is drawn only when every seed of the rebuilt models ran it."""
    pytest.importorskip("matplotlib")
    figures = runpy.run_path(SCRIPT)
    columns = ["models", "seed", "run", "n", "test_correct", "test_passages", "authors"]
    rows = [("first", "1", "teacher", 512, 30), ("rebuilt", "1", "teacher", 512, 31),
            ("rebuilt", "2", "teacher", 512, 44), ("rebuilt", "3", "teacher", 512, 40),
            ("rebuilt", "1", "linformer", 4096, 45),
            ("rebuilt", "2", "linformer", 4096, 51), ("rebuilt", "3", "linformer", 4096, 50),
            ("rebuilt", "1", "full-n4096", 4096, 36), ("rebuilt", "2", "full-n4096", 4096, 55)]  # fmt: skip
    with open(tmp_path / figures["ATTRIBUTION_RUNS"], "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(columns)
        writer.writerows([*row, 137, 19] for row in rows)
    with open(tmp_path / figures["ATTRIBUTION_POOLED"], "w", newline="") as fh:
        fh.write("run,reference,points,ci95_low,ci95_high,p\nlinformer,teacher,7.7,0.7,14.6,0.0436\n")
    drawn = {}
    figures["attribution_figure"].__globals__["save"] = lambda fig, out_dir, name: drawn.setdefault(name, fig)
    figures["attribution_figure"](str(tmp_path), str(tmp_path))
    runs_axes = drawn["author_attribution.png"].axes[0]
    points = {line.get_label(): len(line.get_xdata()) for line in runs_axes.get_lines() if line.get_marker() != "None"}
    assert points == {"seed 1, first models (lost)": 1, "seed 1": 3, "seed 2": 3, "seed 3": 2}
    means = [collection for collection in runs_axes.collections if collection.get_segments()]
    assert sorted(round(segment[0][1], 1) for c in means for segment in c.get_segments()) == [
        round(100 * (31 + 44 + 40) / 3 / 137, 1),  # teacher
        round(100 * (45 + 51 + 50) / 3 / 137, 1),  # linformer; full-n4096 lacks seed 3: no mean
    ]


@pytest.mark.parametrize("run", ["h100_realistic_bf16", "h100_realistic_bf16_padded"])
def test_the_realistic_load_page_quotes_its_csv(run):
    """Every measured point of the H100 realistic-load runs appears in the record's tables as the CSV gives it: real
    tokens/s in thousands and the ratio to RoBERTa-SDPA at the same n and mode."""
    with open(os.path.join(REPO, "docs", "results", "efficiency-gpu-h100-realistic.md"), encoding="utf-8") as fh:
        page = fh.read()
    with open(os.path.join(DATA, f"{run}.csv"), newline="") as fh:
        rows = [row for row in csv.DictReader(fh) if row["status"] == "ok"]
    baseline = {(r["mode"], r["n"]): float(r["real_tokens_per_s"]) for r in rows if r["model"] == "roberta-sdpa"}
    assert len(baseline) == 8
    for row in rows:
        tokens = float(row["real_tokens_per_s"])
        quoted = f"{tokens / 1e3:.0f}k ({tokens / baseline[row['mode'], row['n']]:.2f}x)"
        assert quoted in page, (row["mode"], row["model"], row["k"], row["n"], quoted)


def test_the_compiled_gpu_page_states_the_recorded_tokens_per_second():
    """Every measured point of the H100 compiled runs appears in docs/results/compiled-gpu-h100.md as the page rounds
    it (thousands of tokens/s, then the fraction of the peak), so a figure copied wrong or a CSV swapped shows here."""
    with open(os.path.join(REPO, "docs", "results", "compiled-gpu-h100.md"), encoding="utf-8") as fh:
        page = fh.read()
    checked = 0
    for name in ("h100_compiled_bf16.csv", "h100_compiled_bf16_n16384.csv"):
        with open(os.path.join(DATA, name), newline="") as fh:
            for row in csv.DictReader(fh):
                if row["status"] != "ok":
                    continue
                tokens = f"{float(row['real_tokens_per_s']) / 1e3:.0f}k ("
                peak = f", {float(row['fraction_of_peak']):.2f}, {float(row['peak_mb']) / 1e3:.1f} GB)"
                assert tokens in page and peak in page, row
                checked += 1
    assert checked == 40  # 28 points of the first call (4 more failed), 12 of the second


H200_CALLS = ("h200_compiled_bf16.csv", "h200_compiled_bf16_n16384.csv")  # the session's first and second call
H200_MODELS = ("roberta-sdpa", "linformer", "performer", "performer-bf16", "performer-bf16-recompute")


def _h200_page_and_calls():
    with open(os.path.join(REPO, "docs", "results", "compiled-gpu-h200.md"), encoding="utf-8") as fh:
        page = fh.read()
    calls = []
    for name in H200_CALLS:
        with open(os.path.join(DATA, name), newline="") as fh:
            calls.append(list(csv.DictReader(fh)))
    return page, calls


def _n_label(call: int, n: str) -> str:
    """The page's n column: 16384 was measured in both calls, the other n in the first only."""
    return f"{n}, call {call + 1}" if n == "16384" else n


def test_the_h200_compiled_page_states_each_point_against_roberta_sdpa_of_its_process():
    """Every measured point of the H200 session appears on docs/results/compiled-gpu-h200.md as the page writes it:
    thousands of tokens/s, the ratio to RoBERTa-SDPA of the same call, run, mode and n, the fraction of the peak and
    the peak memory; each training row ends with its FLOP ceiling."""
    page, calls = _h200_page_and_calls()
    checked = 0
    for call, rows in enumerate(calls):
        ok = [row for row in rows if row["status"] == "ok"]
        base = {(r["run"], r["mode"], r["n"]): r for r in ok if r["model"] == "roberta-sdpa"}
        for row in ok:
            roberta = base[row["run"], row["mode"], row["n"]]
            tokens = float(row["real_tokens_per_s"])
            cell = (f"{tokens / 1e3:.0f}k ({tokens / float(roberta['real_tokens_per_s']):.2f}x, "
                    f"{float(row['fraction_of_peak']):.2f}, {float(row['peak_mb']) / 1e3:.1f} GB)")  # fmt: skip
            assert cell in page, (call + 1, row["run"], row["mode"], row["model"], row["n"], cell)
            if row["mode"] == "train" and row["model"] != "roberta-sdpa" and row["run"] == "bf16":
                label = f"{row['model']} k={row['k']}" if row["k"] else row["model"]
                ceiling = float(roberta["gflop"]) / float(row["gflop"])
                line = next(
                    li for li in page.splitlines() if li.startswith(f"| {_n_label(call, row['n'])} | {label} |")
                )
                assert line.endswith(f"| {ceiling:.2f}x |"), line
            checked += 1
    assert checked == 50  # 40 points of the first call (2 more not timed), 10 of the second


def test_the_h200_page_sets_the_whole_model_linformer_against_roberta_sdpa_per_layer_and_fp16_against_bf16():
    page, calls = _h200_page_and_calls()
    for call, n in ((0, "4096"), (1, "16384")):
        tokens = {(r["run"], r["model"]): float(r["real_tokens_per_s"]) for r in calls[call] if r["n"] == n
                  and r["mode"] == "train" and r["status"] == "ok"}  # fmt: skip
        whole, layers = tokens["bf16-compiled", "linformer"], tokens["bf16-compiled-layers", "roberta-sdpa"]
        both = tokens["bf16-compiled-layers", "linformer"] / layers
        assert f"| {n} | {whole / 1e3:.0f}k | {layers / 1e3:.0f}k | {whole / layers:.2f}x | {both:.2f}x |" in page
        # RoBERTa-SDPA's whole-model compile slowed it: the reason the page compares with its per-layer run
        assert tokens["bf16-compiled", "roberta-sdpa"] < tokens["bf16", "roberta-sdpa"]
    speed = {(r["run"], r["model"]): float(r["real_tokens_per_s"]) for r in calls[0] if r["n"] == "4096"}
    for model, label in (("roberta-sdpa", "roberta-sdpa"), ("linformer", "linformer k=256")):
        eager = speed["fp16", model] / speed["bf16", model]
        layers = speed["fp16-compiled-layers", model] / speed["bf16-compiled-layers", model]
        line = next(li for li in page.splitlines() if li.startswith(f"| {label} | {speed['bf16', model] / 1e3:.0f}k |"))
        assert f"| {eager:.2f}x | {speed['bf16-compiled-layers', model] / 1e3:.0f}k |" in line, line
        assert line.endswith(f"| {layers:.2f}x |"), line
    # the memory of recomputed feature maps, second call, against RoBERTa-SDPA of the same process
    peak = {(r["run"], r["model"]): float(r["peak_mb"]) / 1e3 for r in calls[1]}
    for model in ("performer-bf16", "performer-bf16-recompute"):
        cells = [
            f"{peak[run, model]:.1f} GB against {peak[run, 'roberta-sdpa']:.1f} GB "
            f"({peak[run, model] / peak[run, 'roberta-sdpa']:.2f}x)"
            for run in ("bf16", "bf16-compiled-layers")
        ]
        assert f"| {model} | {cells[0]} | {cells[1]} |" in page


def test_the_h200_page_states_each_compile_time_and_that_nothing_recompiled():
    """The compile-time table holds, for each compiled run, mode and n, every model's first-call time as the CSV gives
    it ("not timed" where the stage's end came first, "-" where the model was not in the run); and every compiled
    point compiled its graphs in the first call and none after, as the page says."""
    page, calls = _h200_page_and_calls()
    how = {
        "bf16-compiled-layers": "per layer",
        "bf16-compiled": "whole model",
        "fp16-compiled-layers": "per layer, fp16",
    }
    tables = 0
    for call, rows in enumerate(calls):
        compiled = [row for row in rows if row["run"] in how]
        for key in dict.fromkeys((r["run"], r["mode"], r["n"]) for r in compiled):
            run, mode, n = key
            by_model = {r["model"]: r for r in compiled if (r["run"], r["mode"], r["n"]) == key}
            cells = [("-" if model not in by_model else "not timed" if by_model[model]["status"] != "ok"
                      else f"{float(by_model[model]['compile_s']):.1f} s") for model in H200_MODELS]  # fmt: skip
            mode_label = "training" if mode == "train" else mode
            row = f"| {how[run]} | {mode_label} | {_n_label(call, n)} | " + " | ".join(cells) + " |"
            assert row in page, row
            tables += 1
            for r in by_model.values():
                if r["status"] == "ok":
                    graphs = (r["graphs_first_call"], r["graphs_second_step"], r["graphs_later"])
                    assert graphs == ("1", "0", "0"), (call + 1, key, r["model"])
    assert tables == 9
    assert "1 / 0 / 0 graphs (first call, second step, later steps) at every point" in page


def test_the_books_figure_groups_the_plans_runs_by_their_n_and_k(tmp_path):
    """The plan's curves.csv, as experiments/books_pretraining.py writes it from the runs' logs, drawn: panel a holds
    every run at n = 512, panel b the Linformers at k = 256 for each n beside RoBERTa at 512."""
    pytest.importorskip("matplotlib")
    import json

    from experiments.books_pretraining import load_plan, run_dir, write_report

    plan = load_plan(os.path.join(REPO, "configs", "books", "figure3.yaml"))
    plan.output_dir = str(tmp_path / "plan")
    for i, run in enumerate(plan.runs):
        os.makedirs(run_dir(plan, run))
        with open(os.path.join(run_dir(plan, run), "train_log.jsonl"), "w") as fh:
            for step in (128, 256):
                row = {
                    "event": "eval",
                    "step": step,
                    "perplexity": 900.0 - step - i,
                    "eval_loss": 6.0,
                    "mask_input_perplexity": 800.0 - i,
                    "perplexity_over_unigram": 1.0 - step / 1000,
                }
                fh.write(json.dumps(row) + "\n")
    write_report(plan)
    figures = runpy.run_path(SCRIPT)
    drawn = {}
    figures["books_figure"].__globals__["save"] = lambda fig, out_dir, name: drawn.setdefault(name, fig)
    figures["books_figure"](plan.output_dir, str(tmp_path), "curves.csv")
    axes = drawn["books_figure3.png"].axes  # the perplexity row, then the <mask>-over-unigram row
    panel_a, panel_b = (ax.get_legend_handles_labels()[1] for ax in axes[:2])
    assert [ax.get_legend_handles_labels()[1] for ax in axes[2:]] == [panel_a, panel_b]
    assert panel_a == [
        "RoBERTa-SDPA, n = 512",
        "RoBERTa-SDPA, n = 512, seed 2",
        "RoBERTa-SDPA, n = 512, seed 3",
        "Linformer, k = 64",
        "Linformer, k = 128",
        "Linformer, k = 128, seed 2",
        "Linformer, k = 128, E, F from neighbour_average",
        "Linformer, k = 256",
        "Linformer, k = 256, seed 2",
        "Linformer, k = 128, key_value",
        "Linformer, k = 128, key_value, seed 2",
        "Linformer, k = 128, layerwise",
    ]
    assert panel_b == [
        "RoBERTa-SDPA, n = 512",
        "RoBERTa-SDPA, n = 512, seed 2",
        "RoBERTa-SDPA, n = 512, seed 3",
        "Linformer, n = 512",
        "Linformer, n = 512, seed 2",
        "Linformer, n = 1024",
        "Linformer, n = 2048",
        "Linformer, n = 4096",
        "Linformer, n = 4096, seed 2",
    ]
    line = drawn["books_figure3.png"].axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [128 * 4096 / 1e6, 256 * 4096 / 1e6]  # tokens seen: updates x 4,096
    assert list(line.get_ydata()) == [900.0 - 128, 900.0 - 256]
    ratio = axes[2].get_lines()[0]
    assert list(ratio.get_ydata()) == [1.0 - 128 / 1000, 1.0 - 256 / 1000]
    assert ratio.get_color() == line.get_color()  # a run keeps its colour in every panel
    by_label = {line.get_label(): line for line in axes[0].get_lines()}
    twin, other_seed = by_label["Linformer, k = 128"], by_label["Linformer, k = 128, seed 2"]
    assert other_seed.get_color() == twin.get_color()
    assert (other_seed.get_linestyle(), twin.get_linestyle()) == (":", "-")


def write_curves(path, rows: list[dict]) -> None:
    """A books plan's curves.csv (experiments/books_pretraining.py's columns) holding ``rows``."""
    from experiments.books_pretraining import CURVE_COLUMNS

    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CURVE_COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(rows)


def capturing(name: str):
    """make_figures' function ``name``, with the figures it saves kept in the returned dict (by file name)."""
    drawn = {}
    function = runpy.run_path(SCRIPT)[name]
    function.__globals__["save"] = lambda fig, out_dir, filename: drawn.setdefault(filename, fig)
    return function, drawn


def test_the_uptraining_figure_draws_the_converted_model_beside_its_control(tmp_path):
    """An uptraining plan's curves.csv drawn: one line per run (the Linformer and the control at the teacher's n),
    tokens seen in millions, both perplexities, and the unigram baseline at <mask> inputs from the recorded ratio."""
    pytest.importorskip("matplotlib")

    rows = [
        dict(run="linformer_n4096_k256", model_type="linformer", n=4096, k=256, step=s, tokens=4096 * s,
             perplexity=500 - s, mask_input_perplexity=700 - s, mask_input_over_unigram=(700 - s) / 650)
        for s in (0, 41)
    ] + [
        dict(run="minilm_n512_control", model_type="bert", n=512, k="", step=s, tokens=4096 * s,
             perplexity=400 - 2 * s, mask_input_perplexity=600 - 2 * s, mask_input_over_unigram=(600 - 2 * s) / 650)
        for s in (0, 41)
    ]  # fmt: skip
    write_curves(tmp_path / "curves.csv", rows)
    uptrain_figure, drawn = capturing("uptrain_figure")
    uptrain_figure(str(tmp_path), str(tmp_path), [("curves.csv", "from the fitted head", "-")])
    everything, at_mask = drawn["books_uptrain_minilm.png"].axes
    lines = {line.get_label(): line for line in at_mask.get_lines()}
    linformer = lines["converted to a Linformer at n = 4096, k = 256, trained on"]
    control = lines["the teacher trained on at n = 512 (control)"]
    assert list(linformer.get_xdata()) == [0.0, 41 * 4096 / 1e6]
    assert list(linformer.get_ydata()) == [700.0, 659.0] and list(control.get_ydata()) == [600.0, 518.0]
    assert list(lines["unigram baseline"].get_ydata()) == pytest.approx([650.0, 650.0])
    assert [list(line.get_ydata()) for line in everything.get_lines()] == [[500.0, 459.0], [400.0, 318.0]]

    # a second plan (another teacher, the same runs), and one not recorded yet: the recorded two, told apart by line
    # style and named by their teacher, each role in one colour
    os.rename(tmp_path / "curves.csv", tmp_path / "first.csv")
    write_curves(
        tmp_path / "second.csv", [{**row, "mask_input_perplexity": row["mask_input_perplexity"] / 2} for row in rows]
    )
    plans = [("first.csv", "from A", "--"), ("missing.csv", "from B", ":"), ("second.csv", "from C", "-")]
    drawn.clear()
    uptrain_figure(str(tmp_path), str(tmp_path), plans)
    lines = {line.get_label(): line for line in drawn["books_uptrain_minilm.png"].axes[1].get_lines()}
    assert sorted(lines) == sorted(
        f"{what}, from {teacher}"
        for what in ("converted to a Linformer at n = 4096, k = 256, trained on", "the teacher trained on at n = 512 "
                     "(control)", "unigram baseline") for teacher in "AC"
    )  # fmt: skip
    first, second = (lines[f"converted to a Linformer at n = 4096, k = 256, trained on, from {t}"] for t in "AC")
    assert (first.get_linestyle(), second.get_linestyle()) == ("--", "-")
    assert (
        first.get_color()
        == second.get_color()
        != lines["the teacher trained on at n = 512 (control), from A"].get_color()
    )
    assert list(second.get_ydata()) == [350.0, 329.5]


def test_the_conversion_figure_draws_update_0_by_k_and_full_attention_by_n_beside_the_teacher(tmp_path):
    """A conversion plan's curves.csv drawn from its update-0 rows only: by k at the longest n (k = n among them),
    full attention (k = n) by n with the teacher at its own n (update 0 of the uptraining plan's control) first, the
    teacher and the unigram baseline at <mask> inputs as lines across."""
    pytest.importorskip("matplotlib")

    def row(run, model_type, n, k, step, everything, at_mask):
        return dict(run=run, model_type=model_type, n=n, k=k, step=step, tokens=4096 * step, perplexity=everything,
                    mask_input_perplexity=at_mask, mask_input_over_unigram=at_mask / 650)  # fmt: skip

    converted = [
        row("linformer_n4096_k256", "linformer", 4096, 256, 0, 500, 900),
        row("linformer_n4096_k256", "linformer", 4096, 256, 1, 640, 1100),  # after an update: not drawn
        row("full_n4096", "linformer", 4096, 4096, 0, 340, 600),
        row("linformer_n4096_k1024", "linformer", 4096, 1024, 0, 460, 830),
        row("full_n1024", "linformer", 1024, 1024, 0, 150, 250),
        row("bert_n4096_interpolate", "bert", 4096, "", 0, 460, 835),
        row("bert_n4096_copy", "bert", 4096, "", 0, 340, 600),
    ]
    teacher = [row("linformer_n4096_k256", "linformer", 4096, 256, 0, 500, 900)]
    teacher += [row("minilm_n512_control", "bert", 512, "", s, 60 - s, 82 - s) for s in (0, 41)]
    write_curves(tmp_path / "conversion.csv", converted)
    write_curves(tmp_path / "uptrain.csv", teacher)
    conversion_figure, drawn = capturing("conversion_figure")
    conversion_figure(str(tmp_path), str(tmp_path), "conversion.csv", "uptrain.csv")
    by_k, by_n = drawn["books_conversion_minilm.png"].axes
    for ax, xs, everything, at_mask in (
        (by_k, [256, 1024, 4096], [500, 460, 340], [900, 830, 600]),
        (by_n, [512, 1024, 4096], [60, 150, 340], [82, 250, 600]),
    ):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert list(lines["at <mask> inputs"].get_xdata()) == xs
        assert list(lines["at <mask> inputs"].get_ydata()) == at_mask
        assert list(lines["all scored tokens"].get_ydata()) == everything
        assert list(lines["the teacher reading 512, at <mask> inputs"].get_ydata()) == [82.0, 82.0]
        assert list(lines["unigram baseline, at <mask> inputs"].get_ydata()) == pytest.approx([650.0, 650.0])
    marks = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in by_n.get_lines()}
    assert marks["BERT itself, positions interpolated, at <mask> inputs"] == ([4096], [835.0])
    assert marks["BERT itself, positions copied, at <mask> inputs"] == ([4096], [600.0])


def test_the_rescored_attribution_data_are_the_record_page():
    """Each pooled difference over every passage of the held-out books (the rescored runs, as pool wrote them) is in
    docs/results/author-attribution.md's section on them: passage-weighted with its intervals over passages and over
    books, and with each book weighed alike; and the 137 passages' book intervals beside theirs."""
    with open(os.path.join(REPO, "docs", "results", "author-attribution.md"), encoding="utf-8") as fh:
        page = fh.read()
    start = page.index("\n## Every passage of the held-out books")
    end = page.find("\n## ", start + 1)
    section = page[start : end if end != -1 else len(page)]
    for name in ("author_attribution_pooled_324.csv", "author_attribution_pooled.csv"):
        with open(os.path.join(DATA, name), newline="") as fh:
            pairs = list(csv.DictReader(fh))
        assert len(pairs) == 5
        for pair in pairs:
            low, high, book_low, book_high = (float(pair[k]) for k in ("ci95_low", "ci95_high", "book_ci95_low",
                                                                         "book_ci95_high"))  # fmt: skip
            points = float(pair["points"])
            assert f"{points:+.1f} ({low:+.1f} to {high:+.1f}; {book_low:+.1f} to {book_high:+.1f}; " in section, pair
            if name.endswith("324.csv"):
                by_book = (float(pair[k]) for k in ("by_book_points", "by_book_ci95_low", "by_book_ci95_high"))
                assert "{:+.1f} ({:+.1f} to {:+.1f}; ".format(*by_book) in section, pair
