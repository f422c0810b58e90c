"""`python -m benchmarks --resume`: a run killed part-way (SIGKILL: nothing of it ran on the way out) measures only
the points it had not, in a second sitting, and ends as an uninterrupted run would; the settings and the machine must
be the run's own; rows keep the values of the sitting that measured them."""

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys

import pytest

from benchmarks import BenchmarkRow, Mode, Status, cli, read_csv
from benchmarks import run as bench_run
from benchmarks.run import PeerResult, planned_groups

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Four lengths' worth of groups, each a process or two: inference n = 16 and 32, training n = 16, the linear-cost
# check at 16 and 32.
ARGV = [
    "--preset", "quick", "--ns", "16", "32", "--ks", "8", "--train_ns", "16", "--scaling_ns", "16", "32",
    "--models", "roberta-sdpa", "linformer", "--layers", "1", "--hidden_size", "32", "--heads", "4",
    "--intermediate_size", "48", "--vocab_size", "99", "--reps", "1", "--warmup", "1", "--threads", "1",
    "--timeout_s", "120", "--no_measure_memory",
]  # fmt: skip

# The benchmark, held at its second length (the first's rows in results_partial.csv) until it is killed.
HELD_AT_THE_SECOND_LENGTH = r"""
import sys, time
import benchmarks.run as run
from benchmarks import cli
timed, calls = run._time_points, []

def held(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        print("measuring the second length", flush=True)
        time.sleep(600)
    return timed(*args, **kwargs)

run._time_points = held
sys.exit(cli.main(sys.argv[1:]))
"""

# What differs between two runs of the same settings: the measurements (and what the load makes of them).
TIMED = (
    "time_s", "time_s_min", "tokens_per_s", "real_tokens_per_s", "achieved_gflops", "matmul_peak_gflops",
    "fraction_of_peak",
)  # fmt: skip


def untimed(row: BenchmarkRow) -> BenchmarkRow:
    return dataclasses.replace(row, **dict.fromkeys(TIMED))


def killed_at_the_second_length(out) -> None:
    """The benchmark into `out`, SIGKILLed (with its worker processes) once its first length is saved."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "src"), REPO]))
    process = subprocess.Popen(
        [sys.executable, "-c", HELD_AT_THE_SECOND_LENGTH, *ARGV, "--output_dir", str(out)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        for line in process.stdout:
            if line.strip() == "measuring the second length":
                break
        else:
            pytest.fail(f"the benchmark ended (exit {process.wait()}) before its second length")
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the benchmark and its forkserver: nothing runs on the way out
        process.wait()
        process.stdout.close()


def csv_lines(path) -> list[str]:
    with open(path, newline="") as handle:
        return [",".join(row) for row in csv.reader(handle)]


def test_a_killed_run_resumes_with_only_the_points_it_had_not_measured(tmp_path, monkeypatch, capsys):
    """A stopped run kept results_partial.csv, but the next run started over (and refused the folder without
    --overwrite). --resume measures only the lengths the killed run had not saved; its results.csv has the rows of an
    uninterrupted run (the same points, statuses and settings), the earlier sitting's rows as they were measured, and
    run_info.json names each sitting with its machine and load. A finished run resumed is complete: exit 0."""
    out = tmp_path / "out"
    killed_at_the_second_length(out)
    assert sorted(os.listdir(out)) == ["results_partial.csv", "run_partial.json"]
    saved = csv_lines(out / "results_partial.csv")
    assert len(saved) == 1 + 2  # the header and n = 16's two points

    # Without --resume, the folder is refused, naming --resume
    assert cli.main([*ARGV, "--output_dir", str(out)]) == 2
    assert "--resume measures the rest" in capsys.readouterr().err

    # Other settings are refused before any work, naming the setting and both values
    assert cli.main([*ARGV, "--reps", "2", "--output_dir", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "reps" in err and "2" in err and "1" in err and err.startswith("error: ")
    assert sorted(os.listdir(out)) == ["results_partial.csv", "run_partial.json"]

    timed = bench_run._time_points
    measured = []

    def recorded(cfg, mode, rows, log, deadline=None):
        measured.append((mode, sorted({row.n for row in rows.values()})))
        return timed(cfg, mode, rows, log, deadline)

    monkeypatch.setattr(bench_run, "_time_points", recorded)
    assert cli.main([*ARGV, "--output_dir", str(out), "--resume"]) == 0
    # n = 16's inference was not measured again
    assert measured == [(Mode.INFERENCE, [32]), (Mode.TRAIN, [16]), (Mode.INFERENCE, [16, 32])]
    assert "results_partial.csv" not in os.listdir(out) and "run_partial.json" not in os.listdir(out)
    resumed = csv_lines(out / "results.csv")
    assert resumed[: len(saved)] == saved  # the first sitting's rows, to the last digit
    rows = read_csv(str(out / "results.csv"))
    cfg = cli.parse_args([*ARGV, "--output_dir", str(out)])[1]
    assert [(r.mode, r.model, r.n, r.k) for r in rows] == [key for group in planned_groups(cfg) for key in group]
    assert all(row.status == Status.OK for row in rows)

    info = json.loads((out / "run_info.json").read_text())
    first, second = info["sittings"]
    assert first["points"] == ["inference n=16"] and second["points"] == [
        "inference n=32", "train n=16", "scaling n=16", "scaling n=32"
    ]  # fmt: skip
    assert "--resume" not in first["command"] and "--resume" in second["command"]
    for sitting in (first, second):
        assert "load average (1, 5, 15 min)" in sitting["machine"]
    assert info["command"] == first["command"]  # the run's settings: what it was started with
    report = (out / "results.md").read_text()
    assert "sitting 1 (inference n=16)" in report and "sitting 2 (inference n=32, " in report

    # A finished run, resumed: complete, nothing rewritten
    before = {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)}
    measured.clear()
    assert cli.main([*ARGV, "--output_dir", str(out), "--resume"]) == 0
    assert "complete" in capsys.readouterr().out and measured == []
    assert {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)} == before

    # The same settings uninterrupted: the same rows apart from the timings
    whole = tmp_path / "whole"
    monkeypatch.setattr(bench_run, "_time_points", timed)
    assert cli.main([*ARGV, "--output_dir", str(whole)]) == 0
    assert [untimed(r) for r in read_csv(str(whole / "results.csv"))] == [untimed(r) for r in rows]
    assert len(json.loads((whole / "run_info.json").read_text())["sittings"]) == 1


def test_resume_keeps_whole_lengths_only_and_measures_again_what_a_ctrl_c_stopped(tmp_path, monkeypatch, capsys):
    """A checkpoint's rows are this run's groups of points from the start, whole: rows of another grid, or a length cut
    short, are refused naming the row; a length whose worker was stopped by Ctrl-C (and the rest after it) is
    measured again; peer comparisons saved are kept."""
    cfg = cli.parse_args([*ARGV, "--output_dir", str(tmp_path)])[1]
    groups = planned_groups(cfg)
    rows = [BenchmarkRow(mode, model, n, k, time_s=0.5) for group in groups for mode, model, n, k in group]
    first = len(groups[0])
    assert bench_run.kept_groups(cfg, rows[: first + len(groups[1])]) == [rows[:first], rows[first : first + 2]]
    stopped = dataclasses.replace(
        rows[first], status=Status.FAILED, reason="timing: process exited with code 130 (interrupted: SIGINT, Ctrl-C)"
    )
    assert bench_run.kept_groups(cfg, [*rows[:first], stopped, *rows[first + 1 :]]) == [rows[:first]]
    with pytest.raises(ValueError, match=r"row 2 \(inference roberta-sdpa n=16\) is not the point this run measures"):
        bench_run.kept_groups(cfg, [rows[0], rows[0]])
    with pytest.raises(ValueError, match=r"rows end part-way through a length \(at row 1\)"):
        bench_run.kept_groups(cfg, rows[:1])

    peer = dataclasses.replace(cfg, peer=True, peer_ns=[16, 32], peer_k=8)
    done = PeerResult(16, 8, median_s={"linformer (PyPI)": 1.0})
    assert bench_run.kept_peers(peer, [done, PeerResult(32, 8, error="process exited with code 130 "
                                                         "(interrupted: SIGINT, Ctrl-C)")]) == [done]  # fmt: skip
    assert bench_run.kept_peers(peer, [PeerResult(32, 8)]) == []  # not this run's first

    # Every row saved and one peer comparison of two: only the other is measured, and saved with the first
    tasks, saved = [], []

    def worker(task, timeout_s, on_progress=None):
        tasks.append(task)
        return {"times": {"linformer (PyPI)": [2.0]}}

    monkeypatch.setattr(bench_run, "run_in_fresh_process", worker)
    resumed, info = bench_run.run_benchmark(
        peer, log=lambda message: None, peak_info={"gflops": 1.0}, earlier=bench_run.Measured(rows, [done]),
        on_measured=lambda rows: pytest.fail("no row was measured"), on_peer=lambda results: saved.append(results),
    )  # fmt: skip
    assert resumed == rows and [task.n for task in tasks] == [32]
    assert info.peer == [done, PeerResult(32, 8, median_s={"linformer (PyPI)": 2.0})] and saved == [info.peer]


def test_resume_refuses_a_folder_it_cannot_continue_and_starts_a_new_one(tmp_path, monkeypatch, capsys):
    """--resume with --overwrite is one or the other; a folder of rows without the record of their settings (an
    earlier version's stopped run), or of other files, is refused naming the way out; an absent or empty folder starts
    the run."""
    with pytest.raises(SystemExit):
        cli.parse_args([*ARGV, "--output_dir", str(tmp_path), "--resume", "--overwrite"])
    assert "--resume" in capsys.readouterr().err

    old = tmp_path / "old"
    old.mkdir()
    (old / "results_partial.csv").write_text("mode\n")
    assert cli.main([*ARGV, "--output_dir", str(old), "--resume"]) == 2
    assert "no record of its settings (run_partial.json" in capsys.readouterr().err

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert cli.main([*ARGV, "--output_dir", str(mine), "--resume"]) == 2
    assert "holds no run to resume" in capsys.readouterr().err

    # Another machine or software than the run began on: refused, naming what differs
    from benchmarks.report import cpu_details
    from benchmarks.resume import Checkpoint

    cfg = cli.parse_args([*ARGV, "--output_dir", str(tmp_path)])[1]
    moved = tmp_path / "moved"
    moved.mkdir()
    checkpoint = Checkpoint(str(moved), cfg, "python -m benchmarks ...", "a machine", cpu_details())
    checkpoint.record["machine_identity"]["torch"] = "1.0"
    checkpoint.save_rows([])
    assert cli.main([*ARGV, "--output_dir", str(moved), "--resume"]) == 2
    assert 'began on another machine or software (torch "1.0" there, "' in capsys.readouterr().err
    gpu = Checkpoint(str(moved), cfg, "python -m benchmarks ...", "a machine", cpu_details())
    gpu.record["sittings"][0]["peak_info"] = {"gflops": 1.0, "device_name": "NVIDIA H200"}
    later = Checkpoint(str(moved), cfg, "...", "a machine", cpu_details(), (gpu.record, bench_run.Measured()))
    with pytest.raises(RuntimeError, match="began on the GPU NVIDIA H200, this sitting runs on NVIDIA A100"):
        later.peak({"gflops": 1.0, "device_name": "NVIDIA A100"})

    started = []
    monkeypatch.setattr(cli, "run_benchmark", lambda cfg, **kwargs: started.append(kwargs.get("earlier")) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        cli.main([*ARGV, "--output_dir", str(tmp_path / "new"), "--resume"])
    assert started == [bench_run.Measured()] and "nothing to resume" in capsys.readouterr().out
