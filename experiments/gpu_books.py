"""Issue 35 at base width on one GPU in one device call (experiments/gpu_books.sh, whose header gives the plan, the
budget and the call): the preparation run on this machine, and the steps the script runs on the GPU machine.

    python -m experiments.gpu_books prepare        # here, once, in the checkout that travels: .gpu_books/
    python -m experiments.gpu_books environment WORK DIR
    python -m experiments.gpu_books wheels DIR/whl # the carried wheels the image lacks (or has in a version unfit)
    python -m experiments.gpu_books tokenise --plan P --output_dir D [--set KEY=VALUE ...] [--environment WORK DIR]
    python -m experiments.gpu_books commands --plan P --output_dir D [--set KEY=VALUE ...]
    python -m experiments.gpu_books gather OUT WORK

The runs are plans of experiments/books_pretraining.py (configs/books/gpu_base.yaml, gpu_uptrain.yaml) with their
output directory and some shared keys replaced (``--set``: the carried data and tokenizer, the cache, the time budget,
a tiny model for the CPU dry run); each run is that plan's command, the package's pretraining CLI
(``python -m linformer_hf.training.pretrain --config RECIPE --key value ...``), written to a file by `tokenise` (for
its plan) or `commands` and started by the script itself: a Python process that only starts another would import the
package for nothing (5-8 s each on the development machine). The curves are collated from the runs'
train_log.jsonl by books_pretraining's own reader. Nothing here imports torch or ``datasets`` at module level: the
environment step must be able to say that ``datasets`` is missing.
"""

from __future__ import annotations

import argparse
import csv
import glob
import hashlib
import io
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = "../shared/data/gutenberg"
TOKENIZER = "outputs/tokenizer-books"
DEST = ".gpu_books"
SHARDS = (0, 1)  # train-00000 and train-00001 of 6: 122 M characters, about 30 M tokens of the books tokenizer
# `datasets` is not on the GPU image; these are its needs that the image lacks (dill, multiprocess) or may hold in a
# version outside datasets' pins (fsspec); `wheels` installs only those the image does not already satisfy.
WHEELS = ("datasets==5.2.0", "dill==0.4.1", "multiprocess==0.70.19", "fsspec==2026.9.0")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT_BYTES = 64 * 2**20  # what one device call may send: the working tree and the carried paths together


class PrepareError(RuntimeError):
    pass


# ----------------------------------------------------------------------------------------------------------------
# Here: what travels
# ----------------------------------------------------------------------------------------------------------------


def _git(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


def inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


def travelling_bytes(repo: str = REPO) -> int:
    """The bytes of what a device call sends without `carry`: tracked files and untracked files git does not ignore
    (a symbolic link as a link)."""
    listed = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=repo)
    if listed.returncode:
        raise PrepareError(f"git ls-files failed in {repo}: {listed.stderr.strip()}")
    total = 0
    for name in filter(None, listed.stdout.split("\0")):
        path = os.path.join(repo, name)
        if os.path.lexists(path):
            total += os.lstat(path).st_size
    return total


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder) for f in files)


def _sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _shard_facts(path: str) -> dict:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["text"])
    return {
        "bytes": os.path.getsize(path),
        "books": table.num_rows,
        "characters": int(pc.sum(pc.utf8_length(table["text"])).as_py() or 0),
        "sha256": _sha256(path),
    }


def pad_right(tokenizer_dir: str) -> None:
    """Record ``padding_side: right`` in the tokenizer's config, the side it pads on already (RoBERTa's default) and the
    one a Linformer's pretraining writes into it (`loading.pad_as_the_model_takes`). Written up front, it leaves the
    tokenizer's state, and so the cache key of the tokenised blocks (``datasets`` hashes the tokenizer), the same for
    the RoBERTa and the Linformer runs: without it the Linformer run tokenises the books a second time."""
    path = os.path.join(tokenizer_dir, "tokenizer_config.json")
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    config["padding_side"] = "right"
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)


def download_wheels(folder: str, wheels=WHEELS) -> list[str]:
    """The wheels for the GPU image's Python (3.12, x86-64), without their dependencies, as the device README says."""
    os.makedirs(folder, exist_ok=True)
    args = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12"]
    args += ["--implementation", "cp", *[f"--platform={p}" for p in PLATFORMS], "-d", folder, *wheels]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        raise PrepareError(f"pip download failed (is PyPI reachable?):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*.whl")))


def prepare(
    source: str = SOURCE,
    tokenizer: str = TOKENIZER,
    dest: str = DEST,
    shards=SHARDS,
    wheels: bool = True,
    repo: str = REPO,
    limit: int = LIMIT_BYTES,
) -> dict:
    """Copy what the device call must carry into ``dest`` (relative to ``repo``): the chosen train shards renamed as a
    whole set (``train-0000j-of-0000m.parquet``: a set with shards missing is refused by the data check), the
    validation shard and the README (the Hub layout ``load_dataset`` reads), the tokenizer, the wheels; then check that
    the working tree and ``dest`` fit in one call. Returns the manifest (also written as ``dest``/MANIFEST.json)."""
    dest = dest if os.path.isabs(dest) else os.path.join(repo, dest)
    if inside(dest, repo):
        relative = os.path.relpath(dest, repo)
        # a file inside: `/.gpu_books/` ignores a folder, which need not exist yet
        if _git("check-ignore", "-q", os.path.join(relative, "MANIFEST.json"), cwd=repo).returncode != 0:
            exclude = _git("rev-parse", "--git-path", "info/exclude", cwd=repo).stdout.strip() or ".git/info/exclude"
            raise PrepareError(
                f"{relative}/ is not ignored by git, so it would travel as part of the tree and could be committed: "
                f"add it first, e.g. `echo /{relative}/ >> {exclude}` (this branch's .gitignore lists /.gpu_books/)."
            )
    train = sorted(glob.glob(os.path.join(source, "train-*.parquet")))
    validation = sorted(glob.glob(os.path.join(source, "validation*.parquet")))
    if not train or not validation or not os.path.isfile(os.path.join(source, "README.md")):
        raise PrepareError(
            f"{source} holds no train-*.parquet and validation*.parquet shards with their README.md (the Hub layout of "
            "the books corpus)."
        )
    if not shards or any(not 0 <= i < len(train) for i in shards) or len(set(shards)) != len(shards):
        raise PrepareError(f"--shards must name distinct shards among 0..{len(train) - 1}, got {list(shards)}.")
    if not os.path.isfile(os.path.join(tokenizer, "tokenizer.json")):
        raise PrepareError(
            f"No tokenizer in {tokenizer}: train it first (python -m linformer_hf.training.train_tokenizer --dataset "
            f"{source} --split train --vocab_size 32768 --output_dir {tokenizer})."
        )
    books = os.path.join(dest, "gutenberg")
    shutil.rmtree(books, ignore_errors=True)
    os.makedirs(books)
    manifest = {"source": os.path.abspath(source), "made": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "shards": {}}
    for j, i in enumerate(shards):
        name = f"train-{j:05d}-of-{len(shards):05d}.parquet"
        shutil.copyfile(train[i], os.path.join(books, name))
        manifest["shards"][name] = {"from": os.path.basename(train[i]), **_shard_facts(os.path.join(books, name))}
    for path in validation:  # the held-out books, all of them, under their own names
        name = os.path.basename(path)
        shutil.copyfile(path, os.path.join(books, name))
        manifest["shards"][name] = {"from": name, **_shard_facts(os.path.join(books, name))}
    with open(os.path.join(source, "README.md"), encoding="utf-8") as fh:
        readme = fh.read()
    carried = ", ".join(f"{v['from']} as {k}" for k, v in manifest["shards"].items())
    readme += (
        f"\n## This copy (experiments/gpu_books.py prepare)\n\nA subset carried to a GPU machine: {carried}. "
        "Only those training books are here; the validation books are all here.\n"
    )
    with open(os.path.join(books, "README.md"), "w", encoding="utf-8") as fh:
        fh.write(readme)
    copy = os.path.join(dest, "tokenizer-books")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(tokenizer, copy)
    pad_right(copy)
    manifest["tokenizer"] = {
        "from": os.path.abspath(tokenizer),
        "sha256": _sha256(os.path.join(tokenizer, "tokenizer.json")),
        "changed": "tokenizer_config.json: padding_side right (pad_right)",
    }
    whl = os.path.join(dest, "whl")
    shutil.rmtree(whl, ignore_errors=True)
    manifest["wheels"] = download_wheels(whl) if wheels else []
    carried_bytes, tree_bytes = folder_bytes(dest), travelling_bytes(repo)
    manifest["bytes"] = {"carried": carried_bytes, "tree": tree_bytes, "limit": limit}
    with open(os.path.join(dest, "MANIFEST.json"), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1)
    total = carried_bytes + tree_bytes
    mib = 2**20
    print(
        f"carried {carried_bytes / mib:.1f} MiB ({dest}) + working tree {tree_bytes / mib:.1f} MiB = "
        f"{total / mib:.1f} MiB of the call's {limit / mib:.0f} MiB"
    )
    if total > limit:
        raise PrepareError(
            f"What would travel ({total / mib:.1f} MiB) is over the device call's {limit / mib:.0f} MiB: carry fewer "
            f"shards (--shards), or clear untracked files from the working tree."
        )
    return manifest


# ----------------------------------------------------------------------------------------------------------------
# There: the environment, the wheels
# ----------------------------------------------------------------------------------------------------------------

VERSIONED = ("torch", "transformers", "accelerate", "tokenizers", "huggingface_hub", "fsspec", "pyarrow", "pandas")
VERSIONED += ("numpy", "xxhash", "dill", "multiprocess", "datasets")


def _version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment(work: str, data_dir: str) -> int:
    """Print and record (``work``/environment.md) the device and the versions; 3 with one clear line when ``datasets``
    cannot be imported or the carried data is not there."""
    lines = [f"- python {sys.version.split()[0]} ({sys.executable})"]
    lines += [f"- {name} {_version(name)}" for name in VERSIONED]
    # The GPU as nvidia-smi names it: this process goes on to fork tokenising workers, so it leaves CUDA uninitialised.
    smi = shutil.which("nvidia-smi")
    query = ["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"]
    gpu = subprocess.run([smi, *query], capture_output=True, text=True).stdout.strip() if smi else ""
    try:
        import torch

        lines.insert(0, f"- device: {gpu or 'cpu'}; torch CUDA {torch.version.cuda}; {os.cpu_count()} CPU cores")
    except Exception as err:  # noqa: BLE001 - said, and the run stops below
        lines.insert(0, f"- torch cannot be imported: {err}")
    problems = []
    try:
        import datasets  # noqa: F401
    except Exception as err:  # noqa: BLE001
        problems.append(
            f"`import datasets` failed ({type(err).__name__}: {err}): the carried wheels ({data_dir}/whl) did not "
            "install or do not fit this image's packages (versions above)."
        )
    for needed in ("gutenberg/README.md", "tokenizer-books/tokenizer.json"):
        if not os.path.isfile(os.path.join(data_dir, needed)):
            problems.append(
                f"{data_dir}/{needed} is missing: run `python -m experiments.gpu_books prepare` and carry {data_dir}."
            )
    manifest = os.path.join(data_dir, "MANIFEST.json")
    if os.path.isfile(manifest):
        with open(manifest, encoding="utf-8") as fh:
            shards = json.load(fh).get("shards", {})
        lines.append(
            "- data: "
            + "; ".join(
                f"{k} ({v['from']}, {v['books']} books, {v['characters']:,} characters)" for k, v in shards.items()
            )
        )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "environment.md"), "w", encoding="utf-8") as fh:
        fh.write(text + "".join(f"- error: {p}\n" for p in problems))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 3 if problems else 0


def _wheel_name(path: str) -> tuple[str, str]:
    name, version = os.path.basename(path).split("-")[:2]
    return name.lower().replace("_", "-"), version


def wheels_to_install(folder: str) -> list[str]:
    """The carried wheels to install: ``datasets`` unless the image has it, and each of its needs that the image lacks
    or holds in a version outside ``datasets``' requirement (read from the carried wheel's metadata)."""
    import zipfile
    from importlib import metadata

    from packaging.requirements import Requirement

    paths = sorted(glob.glob(os.path.join(folder, "*.whl")))
    by_name = {_wheel_name(p)[0]: p for p in paths}
    if "datasets" not in by_name:
        raise PrepareError(f"No datasets wheel in {folder}: run `python -m experiments.gpu_books prepare` here.")
    with zipfile.ZipFile(by_name["datasets"]) as wheel:
        meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        requires = [
            Requirement(line.split(":", 1)[1].strip())
            for line in wheel.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    wanted = {r.name.lower().replace("_", "-"): r for r in requires if r.marker is None}
    chosen = []
    for name, path in by_name.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if name == "datasets" or installed is None:
            chosen.append(path)
        elif name in wanted and not wanted[name].specifier.contains(installed, prereleases=True):
            chosen.append(path)
    return chosen


# ----------------------------------------------------------------------------------------------------------------
# There: the runs
# ----------------------------------------------------------------------------------------------------------------


def parse_sets(items: list[str]) -> dict:
    import yaml

    out = {}
    for item in items or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--set takes KEY=VALUE (a recipe key, e.g. training.max_steps=4), got {item!r}")
        out[key] = yaml.safe_load(raw) if raw != "" else ""
    return out


def gpu_plan(path: str, output_dir: str, sets: dict):
    """The books plan at ``path`` with its output directory and the ``sets`` shared keys replaced, checked, and written
    to ``output_dir``/plan.yaml (what `gather` reads back)."""
    import yaml

    from experiments.books_pretraining import BooksPlan
    from linformer_hf.training.config import build_section, load_yaml

    data = load_yaml(path, given_as="--plan")
    data["output_dir"] = os.path.abspath(output_dir)
    data["shared"] = {**(data.get("shared") or {}), **sets}
    plan = build_section(BooksPlan, data)
    plan.validate()
    os.makedirs(plan.output_dir, exist_ok=True)
    with open(os.path.join(plan.output_dir, "plan.yaml"), "w", encoding="utf-8") as fh:
        yaml.safe_dump({**data, "source": path}, fh, sort_keys=False)
    return plan


def tokenise(plan) -> int:
    """Tokenise and pack the plan's data as its first run's pretraining does (`prepare_pretraining_data`, into
    data.cache_dir), so that the runs find it cached and the cost is timed apart."""
    from experiments.books_pretraining import recipe
    from linformer_hf.training.data import prepare_pretraining_data
    from linformer_hf.training.tokenizer import load_tokenizer

    config = recipe(plan, plan.runs[0])
    tokenizer = load_tokenizer(config.tokenizer.name_or_path)
    start = time.time()
    data = prepare_pretraining_data(config.data, tokenizer, config.training.seed)
    train, validation = len(data["train"]), len(data["validation"])
    print(
        f"tokenised and packed in {time.time() - start:.1f} s: {train:,} training blocks of {config.data.block_size} "
        f"({train * config.data.block_size / 1e6:.1f} M tokens), {validation} validation blocks kept"
    )
    return 0


def write_commands(plan) -> None:
    """Each run's pretraining command (books_pretraining.command, from the interpreter's next argument on) into the
    plan's output directory: ``RUN.args``, NUL-separated, for the script to start, and ``RUN.line``, the same as one
    shell line (`python ...`), for the log and report.md."""
    from experiments.books_pretraining import command

    for chosen in plan.runs:
        args = command(plan, chosen)[1:] + ["--no_progress"]
        path = os.path.join(plan.output_dir, chosen.name)
        with open(f"{path}.args", "w", encoding="utf-8") as fh:
            fh.write("".join(arg + "\0" for arg in args))
        with open(f"{path}.line", "w", encoding="utf-8") as fh:
            fh.write(shlex.join(["python", *args]) + "\n")


# ----------------------------------------------------------------------------------------------------------------
# There: the files that come back
# ----------------------------------------------------------------------------------------------------------------


def read_plans(work: str) -> list:
    from experiments.books_pretraining import BooksPlan
    from linformer_hf.training.config import build_section, load_yaml

    plans = []
    for path in sorted(glob.glob(os.path.join(work, "*", "plan.yaml"))):
        data = load_yaml(path)
        data.pop("source", None)
        plans.append(build_section(BooksPlan, data))
    return plans


def _interval_rates(rows: list[dict], per_update: int) -> dict[int, tuple[float | None, float | None]]:
    """For each evaluation's step: training tokens/s (median over the updates since the previous evaluation, pairs
    with no evaluation, compile or restart between them) and the seconds since the run started."""
    start = next((row["time"] for row in rows if row.get("event") == "start"), None)
    interrupted = {row["step"] for row in rows if row.get("event")}
    updates = [row for row in rows if "event" not in row]
    gaps = [
        (b["step"], b["time"] - a["time"])
        for a, b in zip(updates, updates[1:])
        if b["step"] == a["step"] + 1 and a["step"] not in interrupted
    ]
    out, previous = {}, -1
    for row in (r for r in rows if r.get("event") == "eval"):
        window = [gap for step, gap in gaps if previous < step <= row["step"]]
        rate = per_update / statistics.median(window) if window and statistics.median(window) > 0 else None
        out[row["step"]] = (rate, row["time"] - start if start else None)
        previous = row["step"]
    return out


def collate_all(plans: list) -> tuple[list[dict], list[dict], list[str]]:
    """Curve rows and run summaries of every plan (books_pretraining.collate), with tokens/s and elapsed seconds per
    evaluation, the compile time and how each run ended; and the problems met (a plan that cannot be read yet)."""
    from experiments.books_pretraining import collate, log_rows, run_dir, tokens_per_update
    from linformer_hf.training.pretraining import read_final_summary

    curves, summaries, problems = [], [], []
    for plan in plans:
        name = os.path.basename(plan.output_dir)
        try:
            plan_curves, plan_summaries = collate(plan)
            extra = {}
            for run in plan.runs:
                rows = log_rows(run_dir(plan, run))
                if rows:
                    extra[run.name] = (_interval_rates(rows, tokens_per_update(plan, run)), rows)
        except Exception as err:  # noqa: BLE001 - a log line being written, a run not started: said, not fatal
            problems.append(f"{name}: {type(err).__name__}: {err}")
            continue
        for row in plan_curves:
            rate, elapsed = extra[row["run"]][0].get(row["step"], (None, None))
            curves.append(
                {
                    "plan": name,
                    **row,
                    "train_tokens_per_s": round(rate) if rate else "",
                    "elapsed_s": round(elapsed, 1) if elapsed is not None else "",
                }
            )
        for summary in plan_summaries:
            rows = extra.get(summary["run"], (None, []))[1]
            compiled = [row for row in rows if row.get("event") == "compiled"]
            try:
                final = read_final_summary(run_dir(plan, next(r for r in plan.runs if r.name == summary["run"])))
            except FileNotFoundError:
                final = {}
            summaries.append(
                {
                    "plan": name,
                    **summary,
                    "first_update_s": round(compiled[-1]["seconds"], 1) if compiled else None,
                    "stopped_by_time_budget": bool(final.get("stopped_by_time_budget")),
                    "train_seconds": round(final["train_seconds"], 1) if "train_seconds" in final else None,
                    "evaluations": {row["step"]: row for row in rows if row.get("event") == "eval"},
                }
            )
    return curves, summaries, problems


def _f(value, form: str = ".1f") -> str:
    return "-" if value is None or value == "" else format(value, form)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return ""


def _vs_baseline(run: dict, baseline: dict | None) -> str:
    """The run's perplexity at <mask> inputs over the baseline's, at the last update both evaluated (a time budget
    stops runs at different updates), with that update named when it is not the run's last evaluation."""
    common = sorted(set(run["evaluations"]) & set(baseline["evaluations"])) if baseline else []
    if not common:
        return "-"
    step = common[-1]
    ratio = run["evaluations"][step]["mask_input_perplexity"] / baseline["evaluations"][step]["mask_input_perplexity"]
    return f"{ratio:.3f}" if step == max(run["evaluations"]) else f"{ratio:.3f} (at {step})"


def report(work: str, curves: list[dict], summaries: list[dict], problems: list[str]) -> str:
    lines = [
        "# Issue 35 at base width on one GPU: Figure 3 and uptraining (experiments/gpu_books.sh)",
        "",
        f"Written {time.strftime('%Y-%m-%d %H:%M:%S %Z')}. Perplexity: validation masked LM on the held-out books' "
        "first 32 blocks of 4,096 tokens, over all scored tokens and at those whose input is <mask> (x unigram below "
        "1: better than the training tokens' frequencies, i.e. the model reads context). Tokens/s: training, median "
        "over updates (no evaluation, compile or save counted).",
        "",
        "## Environment",
        "",
        _read(os.path.join(work, "environment.md")).strip() or "(not recorded)",
        "",
        "## Stages",
        "",
        "| stage | exit | started (s) | seconds | note |",
        "| --- | --- | --- | --- | --- |",
    ]
    for line in _read(os.path.join(work, "stages.tsv")).splitlines():
        parts = (line.split("\t") + [""] * 5)[:5]
        lines.append("| " + " | ".join(parts) + " |")
    lines += [
        "",
        "Exit 0: done; 124 or 137: stopped at the stage's hard end (its evaluations so far are kept); "
        "`not run`: too little time left.",
        "",
    ]
    for plan in dict.fromkeys(s["plan"] for s in summaries):
        runs = [s for s in summaries if s["plan"] == plan]
        baseline = next((s for s in runs if s["run"] == s["baseline"] and s["mask_input_perplexity"]), None)
        lines += [
            f"## {plan}",
            "",
            "| run | finished | updates | tokens | perplexity | at <mask> | x unigram "
            f"| at <mask> / {runs[0]['baseline']} (same update) | tokens/s | first update (s) | time budget hit "
            "| training s |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for s in runs:
            lines.append(
                f"| {s['run']} | {'yes' if s['finished'] else 'no'} | {s['steps']} | {s['tokens']:,} "
                f"| {_f(s['perplexity'])} | {_f(s['mask_input_perplexity'])} "
                f"| {_f(s['mask_input_over_unigram'], '.3f')} "
                f"| {_vs_baseline(s, baseline)} | {_f(s['tokens_per_s'], ',.0f')} | {_f(s['first_update_s'])} "
                f"| {'yes' if s['stopped_by_time_budget'] else 'no'} | {_f(s['train_seconds'])} |"
            )
        steps = sorted({step for s in runs for step in s["evaluations"]})
        names = [s["run"] for s in runs]
        lines += [
            "",
            "At each evaluation (perplexity / at <mask>):",
            "",
            "| updates | " + " | ".join(names) + " |",
            "| --- | " + " | ".join("---" for _ in names) + " |",
        ]
        for step in steps:
            cells = []
            for s in runs:
                row = s["evaluations"].get(step)
                cells.append(f"{row['perplexity']:.1f} / {row['mask_input_perplexity']:.1f}" if row else "")
            lines.append(f"| {step} | " + " | ".join(cells) + " |")
        lines.append("")
    uptrained = next((s for s in summaries if s["run"] == "linformer_n4096_k256" and "uptrain" in s["plan"]), None)
    if uptrained:
        control = next((s for s in summaries if s["run"] == "roberta_n512_control"), None)
        teacher = next((s for s in summaries if s["run"] == "roberta_n512" and "base" in s["plan"]), None)

        def at(s, which):
            if not s or not s["evaluations"]:
                return None
            row = s["evaluations"][min(s["evaluations"]) if which == "first" else max(s["evaluations"])]
            return row

        rows = [
            ("teacher: RoBERTa at 512 at the end of its pretraining", at(teacher, "last")),
            ("uptrained Linformer at 4,096 before training (update 0)", at(uptrained, "first")),
            (f"uptrained Linformer after {uptrained['steps']} updates", at(uptrained, "last")),
            (f"control: the teacher at 512 after {control['steps'] if control else 0} updates", at(control, "last")),
        ]
        lines += [
            "## Uptraining against the teacher reading 512",
            "",
            "| model | perplexity | at <mask> | x unigram |",
            "| --- | --- | --- | --- |",
        ]
        for label, row in rows:
            if row:
                lines.append(
                    f"| {label} | {row['perplexity']:.1f} | {row['mask_input_perplexity']:.1f} "
                    f"| {row.get('perplexity_over_unigram', float('nan')):.3f} |"
                )
            else:
                lines.append(f"| {label} | not measured | | |")
        lines.append("")
    if problems:
        lines += ["## Not collated", ""] + [f"- {p}" for p in problems] + [""]
    commands = [_read(p).strip() for p in sorted(glob.glob(os.path.join(work, "*", "commands.txt")))]
    lines += ["## Commands", "", "```", *[c for c in commands if c], "```", ""]
    return "\n".join(lines)


def gather(out: str, work: str) -> int:
    """curves.csv, results.json and report.md into ``out`` from what the runs under ``work`` logged so far (each file
    written whole, then moved into place: a kill mid-way leaves the last whole one, and its temporary file is removed
    by the next gather, `write_text_atomic`)."""
    from experiments.books_pretraining import CURVE_COLUMNS
    from linformer_hf.outputs import write_json_atomic, write_text_atomic

    os.makedirs(out, exist_ok=True)
    plans = read_plans(work)
    curves, summaries, problems = collate_all(plans)
    if curves:
        text = io.StringIO(newline="")
        # the plan's curve columns, with the plan named first and each evaluation's speed and time after them
        writer = csv.DictWriter(text, fieldnames=["plan", *CURVE_COLUMNS, "train_tokens_per_s", "elapsed_s"])
        writer.writeheader()
        writer.writerows(curves)
        write_text_atomic(os.path.join(out, "curves.csv"), text.getvalue())
    if summaries:
        write_json_atomic(os.path.join(out, "results.json"), {"runs": summaries})
    write_text_atomic(os.path.join(out, "report.md"), report(work, curves, summaries, problems))
    return 0


# ----------------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("prepare", help="here: copy the shards, tokenizer and wheels to carry into DEST, check the size")
    p.add_argument("--source", default=SOURCE)
    p.add_argument("--tokenizer", default=TOKENIZER)
    p.add_argument("--dest", default=DEST)
    p.add_argument("--shards", type=int, nargs="+", default=list(SHARDS))
    p.add_argument("--no_wheels", action="store_true", help="download no wheels (a CPU dry run needs none)")
    p = sub.add_parser("environment", help="print and record the device and versions; 3 if datasets cannot load")
    p.add_argument("work")
    p.add_argument("data_dir")
    p = sub.add_parser("wheels", help="print the carried wheels this machine needs installed")
    p.add_argument("folder")
    for name, what in (("tokenise", "tokenise the plan's data and write its runs' commands"),
                       ("commands", "write the plan's runs' commands")):  # fmt: skip
        p = sub.add_parser(name, help=what)
        p.add_argument("--plan", required=True)
        p.add_argument("--output_dir", required=True)
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a shared key of the plan")
        if name == "tokenise":
            p.add_argument(
                "--environment", nargs=2, metavar=("WORK", "DATA_DIR"), help="first the environment step (one process)"
            )
    p = sub.add_parser("gather", help="curves.csv, results.json and report.md into OUT from the runs under WORK")
    p.add_argument("out")
    p.add_argument("work")
    args = parser.parse_args(argv)
    try:
        if args.what == "prepare":
            prepare(args.source, args.tokenizer, args.dest, args.shards, wheels=not args.no_wheels)
            return 0
        if args.what == "environment":
            return environment(args.work, args.data_dir)
        if args.what == "wheels":
            print("\n".join(wheels_to_install(args.folder)))
            return 0
        if args.what == "gather":
            return gather(args.out, args.work)
        if args.what == "tokenise" and args.environment:
            status = environment(*args.environment)
            if status:
                return status
        plan = gpu_plan(args.plan, args.output_dir, parse_sets(args.set))
        write_commands(plan)
        return tokenise(plan) if args.what == "tokenise" else 0
    except PrepareError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        from linformer_hf.training.errors import USER_ERRORS
        from linformer_hf.training.errors import report as report_error

        if isinstance(err, USER_ERRORS):
            return report_error(err)
        raise


if __name__ == "__main__":
    sys.exit(main())
