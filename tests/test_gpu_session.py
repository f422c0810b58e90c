"""Issue 37's GPU session (`experiments/gpu_session.sh`): its compiled runs, its time limits, the files it gathers, and
its CPU dry run end to end. No timing assertions."""

import contextlib
import csv
import dataclasses
import json
import os
import re
import subprocess
import threading
import time

import pytest
from prefork import python_executable

from experiments import gpu_checks, gpu_session
from experiments.gpu_checks import GpuChecksConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SESSION = dict(
    realistic_ns=[4096, 512, 16384],
    realistic_ks=[256],
    realistic_models=["roberta-sdpa", "linformer", "performer", "performer-bf16"],
)


def test_compiled_runs_are_the_realistic_presets_compiled():
    runs = ["bf16", "bf16-compiled", "bf16-compiled-layers", "fp16-compiled", "fp16-compiled-layers"]
    cfg = GpuChecksConfig(realistic_runs=runs, realistic_compile_timeout_s=125, **SESSION)
    cfg.validate()
    planned = gpu_checks.realistic_configs(cfg, "cuda")
    assert [(name, bench.dtype, bench.compile, bench.compile_timeout_s) for name, bench in planned] == [
        ("bf16", "bf16", "no", None), ("bf16-compiled", "bf16", "model", 125),
        ("bf16-compiled-layers", "bf16", "layers", 125), ("fp16-compiled", "fp16", "model", 125),
        ("fp16-compiled-layers", "fp16", "layers", 125),
    ]  # fmt: skip
    eager = planned[0][1]
    for _, bench in planned:
        bench.validate()  # every point's model config builds
        assert (bench.layers, bench.tokens_per_batch, bench.hidden_size, bench.autocast) == (12, 32768, 768, True)
        assert (bench.ns, bench.train_ns, bench.ks, bench.models) == (
            [4096, 512, 16384], [4096, 512, 16384], [256], ["roberta-sdpa", "linformer", "performer", "performer-bf16"],
        )  # fmt: skip
        # the same points as the eager run, compiled: only dtype and compile (and the compile's limit) differ
        differ = {f.name for f in dataclasses.fields(bench) if getattr(bench, f.name) != getattr(eager, f.name)}
        assert differ <= {"dtype", "compile", "compile_timeout_s"}, differ
    # training alone: no inference n
    train = GpuChecksConfig(realistic_runs=["bf16-compiled"], realistic_modes=["train"], **SESSION)
    train.validate()
    ((_, bench),) = gpu_checks.realistic_configs(train, "cuda")
    assert (bench.ns, bench.train_ns) == ([], [4096, 512, 16384])
    with pytest.raises(ValueError, match="2 values for 1 realistic_runs"):
        GpuChecksConfig(realistic_runs=["bf16"], realistic_run_budgets_s=[1, 2]).validate()
    with pytest.raises(ValueError, match="profile_compile must be"):
        GpuChecksConfig(profile_compile="yes").validate()
    for dtypes in ([], ["fp32"], ["bf16", "tf32"]):
        with pytest.raises(ValueError, match="profile_dtypes must be bf16, fp16 or both"):
            GpuChecksConfig(profile_dtypes=dtypes).validate()
    with pytest.raises(ValueError, match="realistic_modes must be inference, train or both"):
        GpuChecksConfig(realistic_modes=["training"]).validate()
    for malformed in ("16384", "16384=", "n=performer", "16384=performer,bert"):
        with pytest.raises(ValueError, match="realistic_models_by_n takes N=MODEL,MODEL"):
            GpuChecksConfig(realistic_models_by_n=[malformed]).validate()
    by_n = GpuChecksConfig(realistic_models_by_n=["16384=roberta-sdpa,performer", "512=linformer"])
    assert by_n.models_at() == {16384: ["roberta-sdpa", "performer"], 512: ["linformer"]}


def test_the_profile_takes_each_dtype_eager_then_compiled_and_a_cpu_profiles_fp32_once():
    """The session's third stage: one layer at n = 4096, bf16 then fp16 (with loss scaling), each eager then compiled
    per layer, in files of their own; bf16 keeps the first session's names (profile_<model>[_compiled])."""
    cfg = GpuChecksConfig(profile_compile="layers", profile_dtypes=["bf16", "fp16"])
    cfg.validate()
    variants = gpu_checks.profile_variants(cfg, "cuda")
    assert [(suffix, bench.dtype, bench.autocast, bench.compile) for suffix, bench in variants] == [
        ("", "bf16", True, "no"), ("_compiled", "bf16", True, "layers"),
        ("_fp16", "fp16", True, "no"), ("_fp16_compiled", "fp16", True, "layers"),
    ]  # fmt: skip
    for _, bench in variants:
        assert (bench.layers, bench.ns, bench.train_ns, bench.ks, bench.batch_at(4096)) == (1, [4096], [4096], [256], 8)
    fp16_only = GpuChecksConfig(profile_dtypes=["fp16"])
    assert [(s, b.dtype) for s, b in gpu_checks.profile_variants(fp16_only, "cuda")] == [("_fp16", "fp16")]
    tiny = GpuChecksConfig(tiny=True, profile_compile="layers", profile_dtypes=["bf16", "fp16"])
    assert [(suffix, bench.dtype, bench.autocast) for suffix, bench in gpu_checks.profile_variants(tiny, "cpu")] == [
        ("", "fp32", False), ("_compiled", "fp32", False),
    ]  # fmt: skip


def test_a_grid_measures_other_models_at_some_n_and_training_alone(tmp_path, monkeypatch):
    """The session's plan: Performer alone beside RoBERTa-SDPA at n = 16384 (`--realistic_models_by_n`), and a run
    of training steps only (`--realistic_modes train`), each n one benchmark run as before."""
    import benchmarks
    from benchmarks import BenchmarkRow, Mode, RunInfo

    calls = []

    def fake_run_benchmark(cfg, log, peak_info=None, deadline=None):
        calls.append((cfg.ns, cfg.train_ns, cfg.models))
        rows = [BenchmarkRow(mode=Mode.TRAIN, model=model, n=(cfg.ns + cfg.train_ns)[0], time_s=0.1)
                for model in cfg.models]  # fmt: skip
        return rows, RunInfo(matmul_peak_gflops=1.0, memory_budget_gib=1.0, runtime_s=1.0)

    monkeypatch.setattr(benchmarks, "run_benchmark", fake_run_benchmark)
    report = gpu_checks.Report(str(tmp_path), "test", "a stand-in GPU")
    for modes in (["inference", "train"], ["train"]):
        cfg = GpuChecksConfig(realistic_runs=["bf16-compiled-layers"], realistic_modes=modes,
                              realistic_models_by_n=["16384=roberta-sdpa,performer"], **SESSION)  # fmt: skip
        cfg.validate()
        calls.clear()
        gpu_checks.part_realistic_grid(cfg, "cuda", report)
        inference = "inference" in modes
        four = ["roberta-sdpa", "linformer", "performer", "performer-bf16"]
        assert calls == [
            ([4096] if inference else [], [4096], four), ([512] if inference else [], [512], four),
            ([16384] if inference else [], [16384], ["roberta-sdpa", "performer"]),
        ]  # fmt: skip


def test_the_hard_stop_cuts_worker_timeouts_and_skips_an_n_that_cannot_finish(tmp_path, monkeypatch):
    import benchmarks
    from benchmarks import BenchmarkRow, Mode, RunInfo

    clock = [1000.0]
    monkeypatch.setattr(gpu_checks.time, "time", lambda: clock[0])
    calls = []

    def fake_run_benchmark(cfg, log, peak_info=None, deadline=None):
        calls.append((cfg.ns, cfg.timeout_s, deadline))
        clock[0] += 40.0  # each n takes 40 s
        row = BenchmarkRow(mode=Mode.TRAIN, model="linformer", n=cfg.ns[0], k=256, time_s=0.1)
        return [row], RunInfo(matmul_peak_gflops=1.0, memory_budget_gib=1.0, runtime_s=40.0)

    monkeypatch.setattr(benchmarks, "run_benchmark", fake_run_benchmark)
    cfg = GpuChecksConfig(realistic_runs=["bf16-compiled"], **SESSION)
    ((name, bench),) = gpu_checks.realistic_configs(cfg, "cuda")
    part = gpu_checks.PartResult("realistic_grid")
    report = gpu_checks.Report(str(tmp_path), "test", "a stand-in GPU")
    # the run's own deadline is far; the hard stop leaves 70 s: the first n takes 40 s, then 30 s are left, more than
    # half of 40, so the second starts; then none is left
    gpu_checks._run_grid(part, [(name, bench, 1e9)], report, lambda n, r: {"run": n, "n": r.n, "status": "ok"},
                         max_timeout_s=600.0, stop_at=1070.0)  # fmt: skip
    assert [(ns, timeout, deadline) for ns, timeout, deadline in calls] == [
        ([4096], 600.0, 1070.0), ([512], 600.0, 1070.0),
    ]  # fmt: skip
    assert part.summary["not run (time budget)"] == "bf16-compiled n=16384"


def _write_grid(run_dir, run, rows):
    from benchmarks import BenchmarkRow, Mode, write_csv

    os.makedirs(os.path.join(run_dir, f"grid_{run}"))
    write_csv([BenchmarkRow(mode=Mode.TRAIN, device="cuda", **row) for row in rows],
              os.path.join(run_dir, f"grid_{run}", "results.csv"))  # fmt: skip


def test_gathering_merges_the_runs_and_sets_compiled_beside_eager(tmp_path):
    from benchmarks import Status, read_csv

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    common = dict(n=4096, dtype="bf16", padding_fraction=0.0)
    _write_grid(a, "bf16", [
        dict(model="roberta-sdpa", k=None, compile="no", real_tokens_per_s=300.0, fraction_of_peak=0.4, **common),
        dict(model="linformer", k=256, compile="no", real_tokens_per_s=400.0, fraction_of_peak=0.3, **common),
    ])  # fmt: skip
    compiled = dict(compile="model", compile_s=50.0, graphs_first_call=1, graphs_second_step=0, graphs_later=0)
    _write_grid(a, "bf16-compiled", [
        dict(model="roberta-sdpa", k=None, real_tokens_per_s=330.0, fraction_of_peak=0.45, **compiled, **common),
        dict(model="linformer", k=256, real_tokens_per_s=600.0, fraction_of_peak=0.45, **compiled, **common),
    ])  # fmt: skip
    killed = (
        "timing: timed out after 155 s in the warm-ups or the timing, after every compile; this model compiled in 61 s"
    )
    _write_grid(b, "fp16-compiled", [
        dict(model="linformer", k=256, real_tokens_per_s=540.0, **compiled, **dict(common, dtype="fp16")),
        dict(model="roberta-sdpa", k=None, status=Status.FAILED, reason=killed, compile="model", compile_s=61.0,
             **dict(common, dtype="fp16")),
    ])  # fmt: skip
    with open(os.path.join(b, "profile_linformer_compiled.txt"), "w") as f:
        f.write("a table")
    with open(os.path.join(b, "profile_linformer_compiled.csv"), "w") as f:
        f.write("name,calls\ntriton_poi_fused_0,12\n")
    out = str(tmp_path / "out")
    assert gpu_session.main([out, a, b, str(tmp_path / "not-run")]) == 0
    assert sorted(os.listdir(out)) == ["profile.csv", "profile.txt", "report.md", "results.csv"]
    rows = read_csv(os.path.join(out, "results.csv"))  # the benchmark's own reader
    assert [(r.model, r.compile, r.dtype) for r in rows] == [
        ("roberta-sdpa", "no", "bf16"), ("linformer", "no", "bf16"), ("roberta-sdpa", "model", "bf16"),
        ("linformer", "model", "bf16"), ("linformer", "model", "fp16"), ("roberta-sdpa", "model", "fp16"),
    ]  # fmt: skip
    with open(os.path.join(out, "results.csv"), newline="") as f:
        assert [r["run"] for r in csv.DictReader(f)][-1] == "fp16-compiled"
    report = open(os.path.join(out, "report.md")).read()
    # linformer compiled: 600 / 400 eager = 1.50x; against RoBERTa-SDPA eager 1.33x, compiled 1.82x; fp16 0.90x bf16
    row = "| bf16-compiled | train | 4096 | linformer k=256 | 400 | 600 | 1.50x | 0.3 -> 0.45 | 1.33x | 1.82x |"
    assert row in report
    assert "| 50 | 1 / 0 / 0 | - |" in report and "| 0.90x |" in report
    # a failed point: its reason, and the compile time it had (column 13 of 15)
    assert f"| fp16-compiled | train | 4096 | roberta-sdpa | failed: {killed} | | | | | | | | 61 | | |" in report
    assert "== linformer_compiled" in open(os.path.join(out, "profile.txt")).read()


def test_two_gathers_writing_one_file_at_once_leave_one_whole_file(tmp_path, monkeypatch):
    """The shell gathers every 20 s and once more at the end, and a gather it stopped may still be running: two
    writes of one file at once shared `<file>.tmp` (the second rename failed with FileNotFoundError, or the file mixed
    both texts). Each write has a temporary file of its own now, so the file ends as one text, whole. Both writers hold
    their temporary file open before either writes (a barrier in `open`), so the writes always overlap."""
    opened = threading.Barrier(2, timeout=10)

    def open_then_wait(path, mode="r", *args, **kwargs):
        handle = open(path, mode, *args, **kwargs)
        if "r" not in mode:
            with contextlib.suppress(threading.BrokenBarrierError):
                opened.wait()
        return handle

    monkeypatch.setattr(gpu_session, "open", open_then_wait, raising=False)
    path, texts, errors = tmp_path / "report.md", ["a" * 100_000 + "\n", "b" * 50 + "\n"], []

    def gather(text):
        try:
            gpu_session._write(str(path), text)
        except Exception as err:  # noqa: BLE001 (reported below)
            errors.append(err)

    writers = [threading.Thread(target=gather, args=(text,)) for text in texts]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=30)
    assert errors == []
    assert path.read_text() in texts
    assert os.listdir(tmp_path) == ["report.md"]  # no temporary file left


def test_a_gather_killed_mid_write_leaves_a_temporary_file_the_next_one_removes(tmp_path):
    """A gather killed mid-write (the device's limit, the shell's kill) leaves `<file>.tmp-<pid>-<8 hex>`: the next
    write of the file removes it once that process is gone, and keeps one whose process still runs (a gather writing
    it now)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    path = tmp_path / "results.csv"
    killed, running = (
        tmp_path / f"results.csv.tmp-{dead.pid}-0123abcd",
        tmp_path / f"results.csv.tmp-{os.getpid()}-89abcdef",
    )
    for debris in (killed, running):
        debris.write_text("run,model\nbf16,")
    gpu_session._write(str(path), "run,model\n")
    assert sorted(os.listdir(tmp_path)) == sorted(["results.csv", running.name])
    assert path.read_text() == "run,model\n"


def test_cpu_dry_run_of_the_session_writes_every_file(tmp_path):
    """The exact script on CPU with tiny models (GPU_SESSION_TINY=1): both stages run, and the files come back.
    Its total is 1,200 s, not the GPU's 500: on a loaded CPU the stages' ends (fractions of the total) cut the last
    compiled run (about 100 s from the start when the machine is quiet)."""
    out, total = tmp_path / "out", 1200
    env = dict(os.environ, OUT=str(out), GPU_SESSION_TINY="1", GPU_SESSION_WORK=str(tmp_path / "work"),
               PYTHON=python_executable(), GPU_SESSION_TOTAL_S=str(total))  # fmt: skip
    started = time.time()
    done = subprocess.run(["bash", os.path.join(ROOT, "experiments", "gpu_session.sh")], env=env,
                          capture_output=True, text=True, timeout=total)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert time.time() - started < total
    assert sorted(os.listdir(out)) == ["log.txt", "profile.csv", "profile.txt", "report.md", "results.csv"]
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in os.listdir(out))  # what the device tool returns
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # stage 1: training at one n, RoBERTa-SDPA and Linformer, eager, per layer and the whole model; stage 2: training
    # at a second n, the Performer with bf16 feature maps, kept and recomputed, beside RoBERTa-SDPA, eager and per
    # layer (fp32 on a CPU)
    stage_1 = {(run, "train", "128", model) for run in ("bf16", "bf16-compiled-layers", "bf16-compiled")
               for model in ("roberta-sdpa", "linformer")}  # fmt: skip
    stage_2 = {(run, "train", "64", model) for run in ("bf16", "bf16-compiled-layers")
               for model in ("roberta-sdpa", "performer-bf16", "performer-bf16-recompute")}  # fmt: skip
    assert {(r["run"], r["mode"], r["n"], r["model"]) for r in rows} == stage_1 | stage_2
    for row in rows:
        assert row["status"] == "ok", row["reason"]
        assert float(row["real_tokens_per_s"]) > 0 and float(row["fraction_of_peak"]) > 0
        if "compiled" in row["run"]:
            assert float(row["compile_s"]) > 0 and row["graphs_first_call"] == "1"
            assert row["graphs_second_step"] == "0"
    report = (out / "report.md").read_text()
    assert "compiled / eager" in report and "| bf16-compiled | train | 128 | linformer k=16 |" in report
    assert "| bf16-compiled-layers | train | 64 | performer-bf16-recompute |" in report
    # stage 3: the profiles of one layer, Linformer then RoBERTa-SDPA, eager then compiled (one dtype on a CPU)
    profiles = (out / "profile.txt").read_text()
    order = ["linformer", "linformer_compiled", "roberta-sdpa", "roberta-sdpa_compiled"]
    assert [profiles.index(f"== {name} (") for name in order] == sorted(profiles.index(f"== {n} (") for n in order)
    with open(out / "profile.csv", newline="") as f:
        assert {row["profile"] for row in csv.DictReader(f)} == set(order)
    log = (out / "log.txt").read_text()
    assert "stage 1 exit 0" in log and "stage 2 exit 0" in log and "stage 3 exit 0" in log
    assert "gpu session done" in log
    assert f"compiles within {total // 4} s" in log and "linformer k=16 compiled in" in log  # a quarter of the total


def test_a_session_out_of_time_stops_its_stages_and_still_returns_its_files(tmp_path):
    """With no time left every stage is stopped by `timeout` at once; the script still exits 0 with the report.
    Its interpreter starts 3 s late, past each stage's 1 s: a forked one could otherwise end a tiny profile in it."""
    out = tmp_path / "out"
    late_python = tmp_path / "late_python"
    late_python.write_text(f'#!/bin/sh\nsleep 3\nexec {python_executable()} "$@"\n')
    late_python.chmod(0o755)
    env = dict(os.environ, OUT=str(out), GPU_SESSION_TINY="1", GPU_SESSION_TOTAL_S="1",
               GPU_SESSION_WORK=str(tmp_path / "work"), PYTHON=str(late_python))  # fmt: skip
    done = subprocess.run(["bash", os.path.join(ROOT, "experiments", "gpu_session.sh")], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["log.txt", "report.md"]
    assert "No compiled point was measured." in (out / "report.md").read_text()
    log = (out / "log.txt").read_text()
    assert "stage 1 exit 124" in log and "stage 2 exit 124" in log and "stage 3 exit 124" in log


GPU_CHECKS_SHIM = r"""#!/usr/bin/env bash
# PYTHON for gpu_session.sh: each `-m experiments.gpu_checks ARGS` is parsed and validated as on a CUDA machine
# (torch.cuda.is_available patched True), recorded, and not run; everything else runs as it would.
if [ "$1 $2" = "-m experiments.gpu_checks" ]; then
    shift 2
    exec "{python}" -c '
import json, sys, torch
torch.cuda.is_available = lambda: True
from transformers import HfArgumentParser
from experiments.gpu_checks import GpuChecksConfig
(cfg,) = HfArgumentParser(GpuChecksConfig).parse_args_into_dataclasses(sys.argv[1:])
cfg.validate()
with open("{log}", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
' "$@"
fi
exec "{python}" "$@"
"""


def test_the_gpu_sessions_own_commands_are_valid_on_cuda(tmp_path):
    """gpu_session.sh as the device runs it (not GPU_SESSION_TINY): every gpu_checks command it builds passes
    GpuChecksConfig.validate on CUDA, the benchmark configs of its grids and profile included, without a GPU here.
    A command refused there would cost the session's device time before the first measurement."""
    log, shim = tmp_path / "commands.jsonl", tmp_path / "python"
    shim.write_text(GPU_CHECKS_SHIM.replace("{python}", python_executable()).replace("{log}", str(log)))
    shim.chmod(0o755)
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPU_SESSION_WORK=str(tmp_path / "work"), PYTHON=str(shim))
    env.pop("GPU_SESSION_TINY", None)
    done = subprocess.run(
        ["bash", os.path.join(ROOT, "experiments", "gpu_session.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "error:" not in done.stdout + done.stderr, done.stdout[-3000:] + done.stderr[-3000:]
    commands = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(commands) == 3  # the three stages, each validated
    assert all(c[c.index("--device") + 1] == "cuda" and "--tiny" not in c for c in commands)
