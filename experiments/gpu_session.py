"""Gather what `experiments/gpu_session.sh` measured into the few files a device call returns, and the issue-37 table.

`python -m experiments.gpu_session OUT RUN_DIR [RUN_DIR ...]` reads the `experiments.gpu_checks` run folders and
writes, each through a temporary file of its own and a rename (the shell calls it every 20 s while the runs go, so a
command killed at its limit keeps what was measured, and two gathers at once end with one whole file):

- `OUT/results.csv`: every `grid_<run>/results.csv` row, the benchmark's own columns with the run's name first
  (`benchmarks.read_csv` reads it; `compile`, `dtype` and `padding_fraction` tell the runs apart too);
- `OUT/profile.txt` and `OUT/profile.csv`: every `profile_<model>[_compiled].txt` / `.csv`, one after another;
- `OUT/report.md`: the compiled-against-eager table of issue 37 (below), then each run folder's `report.md`.

The table: for each point of a compiled run, the eager point of the same mode, n, model, dtype and padding (from any
run), tokens/s of both and their ratio, the fraction of the measured matmul peak of both, both against RoBERTa-SDPA
run the same way, peak memory, the first call's time (`compile_s`) and the graphs compiled by the first call, the
second step and the later calls; a failed point, its reason and, where its compile ended, its compile time. Imports
neither torch nor the benchmark: it runs in a second.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import io
import os
import re
import secrets
import sys

BASELINE = "roberta-sdpa"


# `_write`'s temporary file beside `<file>`: `<file>.tmp-<pid>-<8 hex digits>`, one per write (only the characters
# the device tool returns, should a killed gather leave one in OUT).
TMP_SUFFIX = re.compile(r"\.tmp-(?P<pid>[1-9][0-9]{0,8})-[0-9a-f]{8}")


def _clear_dead_tmp(path: str) -> None:
    """Remove the temporary files beside `path` that gathers killed mid-write left, once their process is gone; a
    running one's (a gather writing `path` now) is kept."""
    folder, base = os.path.split(os.path.abspath(path))
    for name in os.listdir(folder):
        match = TMP_SUFFIX.fullmatch(name[len(base) :]) if name.startswith(base) else None
        if match is None:
            continue
        try:
            os.kill(int(match["pid"]), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except OSError:
            continue  # another user's process: running
        with contextlib.suppress(OSError):  # removed meanwhile by another gather
            os.remove(os.path.join(folder, name))


def _write(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file of this write's own and a rename: a reader sees the earlier
    file or the whole new one, and two gathers writing `path` at once (the shell's every-20-s loop, one it stopped
    that still runs, its last gather) end with one of their texts, whole. What `linformer_hf.outputs.write_text_atomic`
    does, without importing the package."""
    _clear_dead_tmp(path)
    tmp = None
    try:
        while tmp is None:  # a name of this write's own, made exclusively: another write's is never opened
            candidate = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
            with contextlib.suppress(FileExistsError):
                handle = open(candidate, "x", newline="")
                tmp = candidate
        with handle:
            handle.write(text)
        os.replace(tmp, path)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def _grid_csvs(run_dirs: list[str]) -> list[tuple[str, str]]:
    """(run name, path) of every grid CSV, in the order of the run folders, then of the runs' names."""
    found = []
    for run_dir in run_dirs:
        for path in sorted(glob.glob(os.path.join(run_dir, "grid_*", "results.csv")), key=os.path.dirname):
            found.append((os.path.basename(os.path.dirname(path)).removeprefix("grid_"), path))
    return found


def merged_rows(run_dirs: list[str]) -> tuple[list[str], list[dict]]:
    """The columns (`run` first) and every row of the run folders' grid CSVs."""
    columns, rows = ["run"], []
    for run, path in _grid_csvs(run_dirs):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            columns += [c for c in reader.fieldnames or [] if c not in columns]
            rows += [{"run": run, **record} for record in reader]
    return columns, rows


def _label(row: dict) -> str:
    return row["model"] if not row.get("k") else f"{row['model']} k={row['k']}"


def _number(text) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _ratio(a, b) -> str:
    a, b = _number(a), _number(b)
    return f"{a / b:.2f}x" if a and b else "-"


def _fmt(value, digits: int = 3) -> str:
    number = _number(value)
    if number is None:
        return "-" if value in (None, "") else str(value)
    return f"{number:.{digits}g}" if abs(number) < 10**digits else f"{number:.0f}"


def compiled_table(rows: list[dict]) -> str:
    """Markdown: each compiled point beside its eager twin (the module docstring says the columns)."""

    def key(row, compiled=None):
        return (row["mode"], row["n"], _label(row), row["dtype"], row.get("padding_fraction"),
                row.get("compile") if compiled is None else compiled)  # fmt: skip

    by_key = {}
    for row in rows:
        by_key.setdefault(key(row), row)
    compiled = [r for r in rows if r.get("compile") not in (None, "", "no")]
    if not compiled:
        return "No compiled point was measured.\n"
    header = (
        "| run | mode | n | model | tokens/s eager | compiled | compiled / eager | fraction of peak eager -> "
        "compiled | vs RoBERTa-SDPA eager | compiled | peak MB eager | compiled | compile s | graphs first / second "
        "/ later | fp16 / bf16 |"
    )
    lines = [header, "|" + " --- |" * 15]
    for row in compiled:
        eager = by_key.get(key(row, "no"), {})
        base_c = by_key.get(key(dict(row, model=BASELINE, k=""), row["compile"]), {})
        base_e = by_key.get(key(dict(row, model=BASELINE, k=""), "no"), {})
        if row["status"] != "ok":  # the reason in the first figure's place; a compile that ended keeps its time
            reason = (row.get("reason") or "").replace("|", "/")[:200]
            lines.append(f"| {row['run']} | {row['mode']} | {row['n']} | {_label(row)} | {row['status']}: {reason} |"
                         + " |" * 7 + f" {_fmt(row.get('compile_s'))} |" + " |" * 2)  # fmt: skip
            continue
        speed = "real_tokens_per_s"
        # fp16 rows: their speed against the bf16 row of the same compile target (what a V100's recipe costs)
        bf16 = by_key.get((row["mode"], row["n"], _label(row), "bf16", row.get("padding_fraction"), row["compile"]), {})
        fp16_vs_bf16 = _ratio(row.get(speed), bf16.get(speed)) if row["dtype"] == "fp16" else "-"
        graphs = " / ".join(_fmt(row.get(c)) for c in ("graphs_first_call", "graphs_second_step", "graphs_later"))
        cells = [
            row["run"], row["mode"], row["n"], _label(row), _fmt(eager.get(speed), 4), _fmt(row.get(speed), 4),
            _ratio(row.get(speed), eager.get(speed)),
            f"{_fmt(eager.get('fraction_of_peak'))} -> {_fmt(row.get('fraction_of_peak'))}",
            _ratio(eager.get(speed), base_e.get(speed)), _ratio(row.get(speed), base_c.get(speed)),
            _fmt(eager.get("peak_mb"), 5), _fmt(row.get("peak_mb"), 5), _fmt(row.get("compile_s")), graphs,
            fp16_vs_bf16,
        ]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def collect(out_dir: str, run_dirs: list[str]) -> list[str]:
    """Write `results.csv`, `profile.txt`, `profile.csv` and `report.md` into `out_dir`; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    written = []
    columns, rows = merged_rows(run_dirs)
    if rows:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
        _write(os.path.join(out_dir, "results.csv"), text.getvalue())
        written.append("results.csv")
    texts, profile_rows = [], []
    for run_dir in run_dirs:
        for path in sorted(glob.glob(os.path.join(run_dir, "profile_*.txt"))):
            name = os.path.basename(path)[len("profile_") : -len(".txt")]
            with open(path) as f:
                texts.append(f"== {name} ({path})\n{f.read()}\n")
            csv_path = path[: -len(".txt")] + ".csv"
            if os.path.exists(csv_path):
                with open(csv_path, newline="") as f:
                    profile_rows += [{"profile": name, **record} for record in csv.DictReader(f)]
    if texts:
        _write(os.path.join(out_dir, "profile.txt"), "\n".join(texts))
        written.append("profile.txt")
    if profile_rows:
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=list(dict.fromkeys(k for r in profile_rows for k in r)), restval="")
        writer.writeheader()
        writer.writerows(profile_rows)
        _write(os.path.join(out_dir, "profile.csv"), text.getvalue())
        written.append("profile.csv")
    report = ["# GPU session (issue 37): compiled against eager\n", compiled_table(rows)]
    for run_dir in run_dirs:
        path = os.path.join(run_dir, "report.md")
        if os.path.exists(path):
            with open(path) as f:
                report.append(
                    f"\n---\n\nRun folder `{run_dir}`:\n\n" + f.read().replace("# GPU checks", "## GPU checks", 1)
                )
    _write(os.path.join(out_dir, "report.md"), "\n".join(report))
    written.append("report.md")
    return written


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        print("usage: python -m experiments.gpu_session OUT RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    collect(argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
