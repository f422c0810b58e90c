"""experiments/gpu_checks.py on a machine without CUDA: what it skips and says, the CPU tiny run of its parts, and the
run folder policy. (On a CUDA machine the default run is the GPU run itself, so these tests pin the CPU paths.)"""

import json
import math
import os

import pytest
import torch

from experiments import gpu_checks
from experiments.gpu_checks import DEFAULT_PARTS, PARTS, GpuChecksConfig, main, run_checks


def _report(run_dir):
    with open(os.path.join(run_dir, "report.json")) as f:
        return {part["name"]: part for part in json.load(f)["parts"]}


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def test_default_run_without_cuda_skips_the_gpu_parts_and_exits_0(tmp_path, no_cuda, capsys):
    run_dir = tmp_path / "run"
    assert main(["--output_dir", str(run_dir)]) == 0
    parts = _report(run_dir)
    assert list(parts) == DEFAULT_PARTS  # every part reported, in the documented numbering
    assert DEFAULT_PARTS == [part for part in PARTS if part != "realistic_grid"]  # which takes a command of its own
    assert parts["environment"]["status"] == "ok"
    assert parts["environment"]["rows"][0]["torch"] == torch.__version__
    for name in ("inference_grid", "training_step", "long_sequence", "profile"):
        assert parts[name]["status"] == "skipped"
        assert parts[name]["reason"] == "no CUDA device"
        assert parts[name]["rows"] == []
    markdown = (run_dir / "report.md").read_text()
    assert "## 3. training_step: skipped" in markdown and "Reason: no CUDA device" in markdown
    assert "no CUDA device" in capsys.readouterr().out  # said as it runs, not only in the files


def test_tiny_cpu_training_step_is_finite_and_complete(tmp_path):
    cfg = GpuChecksConfig(
        output_dir=str(tmp_path / "tiny"), device="cpu", tiny=True, parts=["training_step"], train_steps=2,
        warmup_steps=0,
    )  # fmt: skip
    run_dir, parts = run_checks(cfg)
    part = _report(run_dir)["training_step"]
    assert part["status"] == "ok", part["reason"]
    runs = {(row["model"], row["precision"]) for row in part["rows"]}
    assert runs == {
        ("linformer k=16", "fp16"), ("roberta-sdpa", "fp16"), ("linformer k=16", "bf16"), ("roberta-sdpa", "bf16"),
        ("performer", "fp16"),
    }  # fmt: skip
    for row in part["rows"]:
        assert "error" not in row, row
        assert row["loss_finite"] and row["grads_finite_last_step"]
        assert math.isfinite(row["last_loss"]) and row["last_loss"] > 0
        assert row["tokens_per_s"] > 0 and row["median_step_ms"] > 0
        assert row["tokens_per_s"] == pytest.approx(2 * 64 / (row["median_step_ms"] / 1000), rel=0.01)
        # Loss scaling in fp16 only: the scaler's scale is reported there, and nothing else.
        assert (row["final_scale"] is not None) == (row["precision"] == "fp16")
        assert (row["skipped_steps"] is not None) == (row["precision"] == "fp16")
        if row["precision"] == "fp16":
            assert 0 <= row["skipped_steps"] <= 3  # warm-up + timed + the checked step
    assert part["summary"]["fp16 tokens/s Linformer / RoBERTa-SDPA"] > 0
    # Parts not asked for are not reported as run.
    assert set(_report(run_dir)) == {"training_step"}


def test_tiny_cpu_long_sequence_compares_with_fp32(tmp_path):
    cfg = GpuChecksConfig(output_dir=str(tmp_path / "long"), device="cpu", tiny=True, parts=["long_sequence"])
    run_dir, _ = run_checks(cfg)
    part = _report(run_dir)["long_sequence"]
    assert part["status"] == "ok", part["reason"]
    assert {(row["model"], row["n"]) for row in part["rows"]} == {
        ("linformer k=16", 128), ("linformer k=16", 256), ("performer", 128), ("performer", 256),
    }  # fmt: skip
    for row in part["rows"]:
        assert row["fp16_finite"] is True
        assert 0 <= row["relative_error_vs_fp32"] < 1e-2


def test_a_failing_part_is_reported_and_the_others_still_run(tmp_path, monkeypatch):
    def broken(*args):
        raise RuntimeError("boom")

    def fine(cfg, device, report):
        return gpu_checks.PartResult("long_sequence", rows=[{"n": 1}])

    # The first part to run fails; a later one (a stand-in, to stay fast) must still run and be reported.
    monkeypatch.setattr(gpu_checks, "part_environment", broken)
    monkeypatch.setattr(gpu_checks, "part_long_sequence", fine)
    cfg = GpuChecksConfig(output_dir=str(tmp_path / "f"), device="cpu", parts=["environment", "long_sequence"])
    run_dir, _ = run_checks(cfg)
    parts = _report(run_dir)
    assert parts["environment"]["status"] == "failed"
    assert "RuntimeError: boom" in parts["environment"]["reason"]
    assert parts["long_sequence"]["status"] == "ok" and parts["long_sequence"]["rows"] == [{"n": 1}]
    assert main(["--output_dir", str(tmp_path / "g"), "--device", "cpu", "--parts", "environment"]) == 1


def test_an_earlier_run_folder_is_never_overwritten(tmp_path, no_cuda, monkeypatch, capsys):
    run_dir = tmp_path / "run"
    assert main(["--output_dir", str(run_dir), "--parts", "environment"]) == 0
    before = (run_dir / "report.json").read_text()
    assert main(["--output_dir", str(run_dir)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert (run_dir / "report.json").read_text() == before
    # The default folder is timestamped; two runs in the same second get two folders.
    monkeypatch.chdir(tmp_path)
    first, _ = run_checks(GpuChecksConfig(parts=["environment"]))
    second, _ = run_checks(GpuChecksConfig(parts=["environment"]))
    assert first != second and os.path.dirname(first) == os.path.join("outputs", "gpu_checks")
    assert os.path.exists(os.path.join(first, "report.json")) and os.path.exists(os.path.join(second, "report.json"))


def test_unknown_part_is_refused_before_any_folder_is_made(tmp_path, capsys):
    assert main(["--output_dir", str(tmp_path / "x"), "--parts", "grid"]) == 2
    assert "unknown parts ['grid']" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _grid(tmp_path, monkeypatch, budget, fail_n=None):
    """The grid part with the benchmark replaced by a stand-in (the real one needs CUDA for fp16/bf16)."""
    import benchmarks
    from benchmarks import BenchmarkRow, Mode, RunInfo, read_csv

    calls = []

    def fake_run_benchmark(cfg, log, peak_info=None):
        calls.append((cfg.dtype, cfg.ns))
        (n,) = cfg.ns
        if n == fail_n:
            raise RuntimeError("measuring the matmul peak failed")
        rows = [
            BenchmarkRow(mode=Mode.INFERENCE, model="roberta-sdpa", n=n, k=None, time_s=0.002, activation_mb=4.0),
            BenchmarkRow(mode=Mode.INFERENCE, model="linformer", n=n, k=128, time_s=0.001, activation_mb=1.0),
        ]
        return rows, RunInfo(matmul_peak_gflops=100.0, memory_budget_gib=10.0, runtime_s=1.0)

    monkeypatch.setattr(benchmarks, "run_benchmark", fake_run_benchmark)
    cfg = GpuChecksConfig(
        grid_fp16_ns=[512, 1024], grid_bf16_ns=[512], grid_ks=[128], grid_models=["roberta-sdpa", "linformer"],
        grid_time_budget_s=budget,
    )  # fmt: skip
    report = gpu_checks.Report(str(tmp_path), "test", "a stand-in GPU")
    part = gpu_checks.part_inference_grid(cfg, "cuda", report)
    return part, calls, read_csv


def test_grid_runs_one_benchmark_per_n_and_keeps_its_csv(tmp_path, monkeypatch):
    part, calls, read_csv = _grid(tmp_path, monkeypatch, budget=1e6, fail_n=1024)
    assert calls == [("fp16", [512]), ("fp16", [1024]), ("bf16", [512])]
    assert part.status == "failed" and "n=1024" in part.reason  # the failed n is named, the others still ran
    assert [(r["dtype"], r["n"], r["status"]) for r in part.rows] == [
        ("fp16", 512, "ok"), ("fp16", 512, "ok"), ("fp16", 1024, "failed"), ("bf16", 512, "ok"), ("bf16", 512, "ok"),
    ]  # fmt: skip
    assert len(read_csv(str(tmp_path / "grid_fp16" / "results.csv"))) == 2
    assert "| 512 | 2.00x |" in part.markdown  # the ratio table: 0.002 s / 0.001 s
    assert "| 512 | 4.00x |" in part.markdown  # and the memory saving: 4 MB / 1 MB


def test_grid_time_budget_starts_no_n_after_it(tmp_path, monkeypatch):
    part, calls, _ = _grid(tmp_path, monkeypatch, budget=0)
    assert calls == []
    assert part.summary["not run (time budget)"] == "fp16 n=512, fp16 n=1024, bf16 n=512"


def test_tiny_cpu_realistic_grid_writes_its_csv(tmp_path):
    from benchmarks import Mode, Status, read_csv

    # The default runs: the bf16 presets with and without padding (fp32 on CPU); one of them is run here.
    planned = gpu_checks.realistic_configs(GpuChecksConfig(tiny=True), "cpu")
    assert [(name, bench.padding_fraction, bench.tokens_per_batch) for name, bench in planned] == [
        ("bf16", 0.0, 512), ("bf16-padded", 0.25, 512),
    ]  # fmt: skip
    chosen = GpuChecksConfig(realistic_runs=["fp16"], realistic_ns=[512], realistic_models=["linformer"])
    ((name, bench),) = gpu_checks.realistic_configs(chosen, "cuda")  # a V100's run, a model and an n chosen
    assert (name, bench.dtype, bench.autocast, bench.ns, bench.train_ns, bench.models) == (
        "fp16", "fp16", True, [512], [512], ["linformer"],
    )  # fmt: skip
    cfg = GpuChecksConfig(
        output_dir=str(tmp_path / "real"), device="cpu", tiny=True, parts=["realistic_grid"], realistic_ns=[128],
        realistic_runs=["bf16-padded"],
    )  # fmt: skip
    run_dir, _ = run_checks(cfg)
    part = _report(run_dir)["realistic_grid"]
    assert part["status"] == "ok", part["reason"]
    assert {(row["run"], row["mode"]) for row in part["rows"]} == {
        ("bf16-padded", "inference"),
        ("bf16-padded", "train"),
    }
    rows = read_csv(os.path.join(run_dir, "grid_bf16-padded", "results.csv"))
    assert {(r.mode, r.model) for r in rows} == {
        (mode, model) for mode in (Mode.INFERENCE, Mode.TRAIN)
        for model in ("roberta-sdpa", "linformer", "modernbert-sdpa", "modernbert-fa2")
    }  # fmt: skip
    for row in rows:
        assert (row.batch, row.layers) == (4, 3)  # 512 positions / n = 128
        if row.model == "modernbert-fa2":
            assert row.status == Status.SKIPPED and "CUDA only" in row.reason
            continue
        assert row.status == Status.OK, row.reason
        assert row.padding_fraction == 0.25
        assert row.real_tokens_per_s == pytest.approx(0.75 * 512 / row.time_s, rel=1e-3)


def test_tiny_cpu_profile_writes_the_top_operators(tmp_path):
    import csv

    cfg = GpuChecksConfig(output_dir=str(tmp_path / "prof"), device="cpu", tiny=True, parts=["profile"])
    run_dir, _ = run_checks(cfg)
    part = _report(run_dir)["profile"]
    assert part["status"] == "ok", part["reason"]
    assert {row["model"] for row in part["rows"]} == {"linformer k=16", "performer", "roberta-sdpa"}
    for model in ("linformer", "performer", "roberta-sdpa"):
        assert "Self CPU" in open(os.path.join(run_dir, f"profile_{model}.txt")).read()
        with open(os.path.join(run_dir, f"profile_{model}.csv"), newline="") as f:
            events = list(csv.DictReader(f))
        names = {event["name"] for event in events}
        assert "aten::mm" in names or "aten::addmm" in names  # the step's products, backward and all
        assert any("adam" in name.lower() for name in names)  # and the optimizer's step
        assert sum(float(event["share_of_self_time"]) for event in events) == pytest.approx(1.0, abs=0.01)


def test_realistic_parts_on_cpu_without_tiny_say_why(tmp_path):
    cfg = GpuChecksConfig(output_dir=str(tmp_path / "x"), device="cpu", parts=["realistic_grid", "profile"])
    run_dir, _ = run_checks(cfg)
    for part in _report(run_dir).values():
        assert part["status"] == "skipped" and "for CUDA" in part["reason"] and "--tiny" in part["reason"]
    assert main(["--output_dir", str(tmp_path / "y"), "--realistic_runs", "bf32"]) == 2


@pytest.mark.parametrize(
    "flags, fields, message",
    [
        (["--realistic_models", "foo"], {"realistic_models": ["foo"]}, "--realistic_models: unknown models ['foo']"),
        (["--realistic_ns", "100"], {"realistic_ns": [100]}, "--realistic_ns [100]: each n must divide the realistic"),
        (["--realistic_ks", "0"], {"realistic_ks": [0]}, "--realistic_ks must hold positive k, got [0]"),
    ],
)
def test_bad_realistic_flags_are_refused_before_any_part_runs(tmp_path, monkeypatch, capsys, flags, fields, message):
    ran = []
    monkeypatch.setattr(
        gpu_checks, "part_training_step", lambda *args: ran.append(1) or gpu_checks.PartResult("training_step")
    )
    argv = ["--output_dir", str(tmp_path / "x"), "--device", "cpu", "--tiny"]
    assert main([*argv, "--parts", "environment", "training_step", "realistic_grid", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and "scaling_ns" not in err and "tokens_per_batch" not in err  # this command's flags
    assert not ran and not (tmp_path / "x").exists()  # refused before the training step, no folder made
    # a CUDA run's flags are checked too, for its preset (32,768 positions a batch), without a GPU here
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("512", "32768")):
        GpuChecksConfig(device="cuda", parts=["realistic_grid"], **fields).validate()
