"""The efficiency benchmark: the cost model against torch's FLOP counter, a tiny end-to-end run, typed rows and
their CSV, settings checked before any work, the command line derived from the config. No timing assertions."""

import dataclasses
import functools
import glob
import os
import re
import sys
import time
import types

import pytest
import torch
from conftest import randomize_projections, tiny_config
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import (
    CSV_COLUMNS,
    BenchmarkConfig,
    BenchmarkRow,
    Mode,
    Status,
    build_model,
    estimate_activation_bytes,
    forward_flops,
    model_config,
    ratio_tables,
    read_csv,
    run_benchmark,
    step_flops,
    write_csv,
)
from benchmarks.cli import parse_args
from benchmarks.run import memory_budget_bytes
from benchmarks.workers import MemoryTask, WorkerFailed, run_in_fresh_process
from linformer_hf import LinformerModel

DOCS = os.path.join(os.path.dirname(__file__), "..", "docs")

TINY = dict(hidden_size=32, heads=4, intermediate_size=48, layers=2, vocab_size=99, num_random_features=12)


def tiny_benchmark(**overrides) -> BenchmarkConfig:
    settings = dict(TINY, ns=[16, 64], ks=[8], train_ns=[16], reps=1, warmup=1, threads=1, timeout_s=120)
    settings.update(overrides)
    return BenchmarkConfig(**settings)


def counted_flops(config, seq_len: int, batch: int = 1, train: bool = False) -> int:
    """What torch counts for the real model. SDPA's math backend, so that its products are visible to the counter
    (the fused CPU kernel is one opaque op)."""
    net = build_model(config)
    net.train(train)
    ids = torch.randint(3, config.vocab_size, (batch, seq_len))
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        with torch.set_grad_enabled(train):
            out = net(ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            if train:
                out.square().mean().backward()
    return counter.get_total_flops()


def test_flop_count_matches_a_hand_count():
    # d = 32, d_ff = 48, n = 16, k = 8, H = 4, 2 layers, batch 1; multiply-adds per layer:
    # Q, output: 2 * 16 * 32 * 32 = 32768; feed-forward: 2 * 16 * 32 * 48 = 49152
    # RoBERTa: + K, V 32768 + attention 2 * 16 * 16 * 32 = 16384                 -> 131072
    # Linformer headwise: + E X, F X 2 * 8 * 16 * 32 = 8192, K, V on 8 rows 2 * 8 * 32 * 32 = 16384,
    #   attention 2 * 16 * 8 * 32 = 8192, reached slots |E| 1 and |F| 1: 2 * 8 * 16 = 256, row sums E 1 and F 1
    #   (for the bias terms): 256                                                -> 115200
    # pooler: 32 * 32 = 1024; FLOPs = 2 * multiply-adds.
    cfg = BenchmarkConfig(**TINY)
    assert forward_flops(model_config("roberta-sdpa", 16, None, cfg), 16) == 2 * (2 * 131072 + 1024)
    assert forward_flops(model_config("linformer", 16, 8, cfg), 16) == 2 * (2 * 115200 + 1024)
    # E = F compresses X once and finds the reached slots and the row sums once
    shared = model_config("linformer", 16, 8, dataclasses.replace(cfg, sharing="key_value"))
    assert forward_flops(shared, 16) == 2 * (2 * (115200 - 4096 - 128 - 128) + 1024)
    # Performer, m = 12: Q, K, V, output 4 * 16 * 32 * 32 = 65536; features of Q and K 2 * 16 * 12 * 32 = 12288;
    #   phi(K)^T V and phi(Q) (.) 2 * 16 * 12 * 32 = 12288; normaliser 4 * 16 * 12 = 768; feed-forward 24576
    #   -> 115456 (twice the feed-forward: 49152 + 65536 + 12288 * 2 + 768 = 140032)
    # causal, chunks of 8 and 8: + 2 * 8 * 8 * (4 * 12 + 32) = 10240
    assert forward_flops(model_config("performer", 16, None, cfg), 16) == 2 * (2 * 140032 + 1024)
    causal = model_config("performer-causal", 16, None, cfg)
    causal.causal_chunk_size = 8
    assert forward_flops(causal, 16) == 2 * (2 * (140032 + 10240) + 1024)


LINFORMER_VARIANTS = [
    # (sharing, projection): the fast path for every kind that compresses X first, the plain path otherwise
    ("headwise", "linear"),
    ("key_value", "linear"),
    ("layerwise", "linear"),
    ("none", "linear"),
    ("headwise", "mean"),
    ("headwise", "conv"),
    ("headwise", "max"),
    ("none", "conv"),
]


@pytest.mark.parametrize("model", ["roberta-eager", "roberta-sdpa"])
def test_roberta_flop_count_matches_torch_flop_counter(model):
    config = model_config(model, 16, None, BenchmarkConfig(**TINY))
    assert counted_flops(config, 16, batch=2) == forward_flops(config, 16, batch=2)


@pytest.mark.parametrize("sharing,projection", LINFORMER_VARIANTS)
@pytest.mark.parametrize("seq_len", [16, 11])  # L = n, and a shorter input (a partial last bin for pooling)
def test_linformer_flop_count_matches_torch_flop_counter(sharing, projection, seq_len):
    config = model_config("linformer", 16, 8, BenchmarkConfig(**TINY, sharing=sharing, projection=projection))
    # Both paths are covered, and the cost model follows the attention's own switch.
    assert config.compresses_input_first == (sharing != "none" and projection != "max")
    assert counted_flops(config, seq_len) == forward_flops(config, seq_len)


@pytest.mark.parametrize("model", ["performer", "performer-causal", "performer-bf16"])
@pytest.mark.parametrize("seq_len,chunk_size", [(16, 128), (16, 8), (13, 4)])  # one chunk, several, a partial last
def test_performer_flop_count_matches_torch_flop_counter(model, seq_len, chunk_size):
    config = model_config(model, 16, None, BenchmarkConfig(**TINY))
    assert config.is_decoder == (model == "performer-causal")
    config.causal_chunk_size = chunk_size
    assert counted_flops(config, seq_len, batch=2) == forward_flops(config, seq_len, batch=2)


def test_linformer_flop_count_with_a_k_per_layer():
    config = model_config("linformer", 16, 8, BenchmarkConfig(**TINY))
    config.projected_length = [8, 4]
    assert counted_flops(config, 16) == forward_flops(config, 16)
    assert forward_flops(config, 16) < forward_flops(model_config("linformer", 16, 8, BenchmarkConfig(**TINY)), 16)


@pytest.mark.parametrize(
    "model,k",
    [
        ("roberta-sdpa", None),
        ("linformer", 8),
        ("performer", None),
        ("performer-causal", None),
        ("performer-bf16", None),
        ("performer-bf16-recompute", None),
    ],
)
def test_training_step_costs_three_forwards(model, k):
    config = model_config(model, 16, k, BenchmarkConfig(**TINY))
    counted = counted_flops(config, 16, batch=2, train=True)
    assert step_flops(config, 16, 2, training=True) == pytest.approx(counted, rel=0.02)


@pytest.mark.parametrize("model", ["performer", "performer-causal"])
def test_recomputed_feature_maps_cost_one_more_favor_forward_in_the_step(model):
    """Backward runs FAVOR+ again, every product of it (none is skipped): what torch counts on top of the step
    without recomputation is the cost model's, to the FLOP."""
    steps = {}
    for recompute in (False, True):
        config = model_config(model, 16, None, BenchmarkConfig(**TINY))
        config.causal_chunk_size = 4  # several chunks, causal
        config.recompute_feature_maps = recompute
        steps[recompute] = (counted_flops(config, 16, batch=2, train=True), step_flops(config, 16, 2, training=True))
    (counted, estimated), (counted_again, estimated_again) = steps[False], steps[True]
    assert counted_again - counted == estimated_again - estimated > 0


def test_memory_estimate_is_quadratic_only_for_eager_attention():
    cfg = BenchmarkConfig()

    def estimate(model, n, k=None):
        return estimate_activation_bytes(model_config(model, n, k, cfg), n, 1, 4)

    eager = [estimate("roberta-eager", n) for n in (4096, 8192)]
    sdpa = [estimate("roberta-sdpa", n) for n in (4096, 8192)]
    linformer = [estimate("linformer", n, 256) for n in (4096, 8192)]
    performers = [[estimate(model, n) for n in (4096, 8192)] for model in ("performer", "performer-causal")]
    assert eager[1] / eager[0] > 3.5
    assert sdpa[1] / sdpa[0] < 2.1 and linformer[1] / linformer[0] < 2.1
    assert all(performer[1] / performer[0] < 2.1 for performer in performers)
    # n = 65536: the eager score matrices alone are 2 * 12 * 65536^2 * 4 bytes = 384 GiB
    assert estimate("roberta-eager", 65536) > 384 * 2**30


def test_quick_run_writes_rows_and_skips_what_would_not_fit(tmp_path):
    # A budget between the eager model's estimate at n = 256 and everything else's. (At n <= 128, one chunk of causal
    # FAVOR+ holds (L x L) weights as eager attention does: n = 256 is two chunks.)
    cfg = tiny_benchmark(ns=[16, 256], scaling_ns=[16, 64])

    def estimate(model, n, k, training=False):
        return estimate_activation_bytes(model_config(model, n, k, cfg), n, cfg.batch_at(n), 4, training)

    eager_256 = estimate("roberta-eager", 256, None)
    others = [estimate(model, 256, k) for model, k in cfg.points(256) if model != "roberta-eager"]
    others += [estimate(model, 16, k, training) for model, k in cfg.points(16) for training in (False, True)]
    assert max(others) < eager_256
    cfg.memory_budget_gb = (max(others) + eager_256) / 2 / 2**30

    rows, info = run_benchmark(cfg, log=lambda message: None)
    assert info.matmul_peak_gflops > 0
    # inference at two n and training at one, five models each; the linear-cost check at two n, three models
    assert len(rows) == 2 * 5 + 5 + 2 * 3
    by_key = {(r.mode, r.model, r.n): r for r in rows}

    skipped = by_key[(Mode.INFERENCE, "roberta-eager", 256)]
    assert skipped.status == Status.SKIPPED and "would not fit" in skipped.reason
    assert skipped.time_s is None and skipped.activation_mb is None
    for key, row in by_key.items():
        if row is skipped:
            continue
        assert row.status == Status.OK, (key, row.reason)
        assert row.time_s > 0 and row.tokens_per_s > 0 and row.fraction_of_peak > 0
        assert (row.k, row.sharing) == ((8, "headwise") if row.model == "linformer" else (None, None))
        if row.mode == Mode.INFERENCE:
            assert row.memory_method in ("vmhwm", "ru_maxrss")
            assert row.activation_mb >= 0 and row.weights_mb > 0
    for model in ("linformer", "performer", "performer-causal"):
        assert by_key[(Mode.SCALING, model, 64)].gflop > by_key[(Mode.SCALING, model, 16)].gflop

    path = tmp_path / "results.csv"
    write_csv(rows, str(path))
    with open(path) as f:
        assert f.readline().strip().split(",") == CSV_COLUMNS == [f.name for f in dataclasses.fields(BenchmarkRow)]
    assert read_csv(str(path)) == rows  # every field, its type and None survive the round trip
    tables = ratio_tables(rows, cfg)
    assert "baseline OOM" in tables
    assert (
        "**Inference speed-up of performer-causal over roberta-sdpa**" in tables
        and "| n | m=12 |\n| --- | --- |" in tables
    )


PUBLISHED_RUNS = sorted(glob.glob(os.path.join(DOCS, "results", "data", "cpu2_*.csv")))


def test_published_runs_are_found():
    assert len(PUBLISHED_RUNS) == 4, PUBLISHED_RUNS


@pytest.mark.parametrize("path", PUBLISHED_RUNS)
def test_published_runs_load_and_agree_with_the_cost_model(path):
    """The run CSVs docs/results/efficiency-cpu.md cites are typed rows of today's format, FLOPs today's count."""
    rows = read_csv(path)
    assert rows and {row.status for row in rows} <= {Status.OK, Status.SKIPPED}
    for row in rows:
        cfg = BenchmarkConfig(
            layers=row.layers, batch=row.batch, hidden_size=row.hidden_size, intermediate_size=row.intermediate_size,
            heads=row.heads, sharing=row.sharing or "headwise", projection=row.projection or "linear",
        )  # fmt: skip
        flops = step_flops(model_config(row.model, row.n, row.k, cfg), row.n, row.batch, row.mode == Mode.TRAIN)
        assert row.gflop == pytest.approx(flops / 1e9, rel=1e-3), row.label


def test_ratio_tables_name_failed_and_skipped_points():
    cfg = tiny_benchmark(ns=[16], train_ns=[], measure_memory=False, models=["roberta-sdpa", "linformer"])
    rows = [
        BenchmarkRow(Mode.INFERENCE, "roberta-sdpa", 16, None, time_s=2.0),
        BenchmarkRow(Mode.INFERENCE, "linformer", 16, 8, time_s=0.5),
    ]
    assert "| 16 | 4.00x |" in ratio_tables(rows, cfg)
    rows[1] = dataclasses.replace(rows[1], status=Status.FAILED, reason="timing: timed out", time_s=None)
    assert "| 16 | failed |" in ratio_tables(rows, cfg)
    rows[0] = dataclasses.replace(rows[0], status=Status.SKIPPED, time_s=None)
    assert "| 16 | baseline OOM |" in ratio_tables(rows, cfg)


def test_a_failing_worker_raises_with_its_error():
    task = MemoryTask(tiny_benchmark(), Mode.INFERENCE, "bert", 16, None)
    with pytest.raises(WorkerFailed, match="unknown model 'bert'"):
        run_in_fresh_process(task, timeout_s=120)


def test_invalid_settings_are_clear_errors():
    with pytest.raises(ValueError, match="fp32 only"):
        BenchmarkConfig(dtype="fp16").validate()
    with pytest.raises(ValueError, match="both set; give one of them"):
        tiny_benchmark(batch=2, tokens_per_batch=128).validate()
    # every length list, each named: 128 is no multiple of the training n = 48 nor of the scaling n = 256
    message = r"tokens_per_batch=128 is not a multiple of every n: train_ns \[48\], scaling_ns \[256\]"
    with pytest.raises(ValueError, match=message):
        tiny_benchmark(ns=[16, 64], train_ns=[48], scaling_ns=[256], tokens_per_batch=128).validate()
    with pytest.raises(ValueError, match="padding_fraction must be in"):
        tiny_benchmark(padding_fraction=0.6).validate()
    with pytest.raises(ValueError, match="unknown models"):
        BenchmarkConfig(models=["bert"]).validate()


@pytest.mark.parametrize("lengths", ["ns", "train_ns", "scaling_ns"])
def test_every_length_list_is_checked_against_k_before_the_run(lengths):
    # Pooling needs n to be a multiple of k; n = 100 is not one of k = 8. The old check looked at `ns` only, so a bad
    # `train_ns` or `scaling_ns` failed minutes into the run.
    cfg = tiny_benchmark(ns=[64], train_ns=[64], scaling_ns=[], projection="mean")
    setattr(cfg, lengths, [64, 100])
    with pytest.raises(ValueError, match=rf"{lengths} has n=100.*multiple"):
        run_benchmark(cfg, log=lambda message: pytest.fail("the run started"))


def test_peer_points_are_checked_before_the_run():
    with pytest.raises(ValueError, match="peer_k=256 is larger"):
        tiny_benchmark(peer=True, peer_ns=[128], peer_k=256).validate()
    # the fix names peer_k, not ks (the peer's k)
    with pytest.raises(ValueError, match=r"peer_ns has n=64, which makes an invalid linformer \(k=100.* Change peer_ns "
                       r"or peer_k\.$"):  # fmt: skip
        tiny_benchmark(peer_ns=[64], peer_k=100).validate()


class StandInPeerAttention(torch.nn.Module):
    """The `linformer` package's LinformerSelfAttention as PeerTask calls it, recording the shape of its input."""

    inputs = []

    def __init__(self, dim, seq_len, k, heads, dim_head, one_kv_head, share_kv):
        super().__init__()
        self.out = torch.nn.Linear(dim, dim)

    def forward(self, x):
        StandInPeerAttention.inputs.append(tuple(x.shape))
        return self.out(x)


@pytest.mark.parametrize(
    "batching, batch", [(dict(), 1), (dict(batch=3), 3), (dict(tokens_per_batch=256), 4)]
)  # fmt: skip
def test_the_peer_is_timed_on_the_runs_batch(batching, batch, monkeypatch):
    """--peer failed at every n unless --batch was given (randn() of a batch of None, by default and with
    tokens_per_batch): the attention modules get the batch the run's points get at that n."""
    from benchmarks.workers import PeerTask

    monkeypatch.setitem(sys.modules, "linformer", types.SimpleNamespace(LinformerSelfAttention=StandInPeerAttention))
    StandInPeerAttention.inputs = []
    cfg = tiny_benchmark(ns=[64], train_ns=[], peer=True, peer_ns=[64], peer_k=8, **batching)
    cfg.validate()
    assert cfg.batch_at(64) == batch
    times = PeerTask(cfg, 64, 8).run()["times"]
    assert sorted(times) == ["linformer (PyPI)", "linformer_hf (fast path)", "linformer_hf (plain path)"]
    assert all(len(t) == 3 for t in times.values())
    assert set(StandInPeerAttention.inputs) == {(batch, 64, cfg.hidden_size)}


def test_a_failures_text_is_one_table_cell():
    """A peer's multi-line TypeError broke the Markdown table it was written in: every cell is one line, pipes
    escaped."""
    from benchmarks.report import absolute_table, peer_table
    from benchmarks.run import PeerResult, RunInfo

    error = "TypeError: randn() received an invalid combination of arguments:\n * (tuple of ints size | None)\n"
    info = RunInfo(1.0, 1.0, peer=[PeerResult(4096, 256, error=error)])
    row = BenchmarkRow(Mode.INFERENCE, "linformer", 16, 8, status=Status.FAILED, reason=f"timing: {error}")
    for table in (peer_table(info), absolute_table([row])):
        lines = table.splitlines()
        assert len(lines) == 3, table
        # as many cells in each row as in the header: only the escaped pipe is inside a cell
        assert len({len(re.split(r"(?<!\\)\|", line)) for line in lines}) == 1, table
        assert "arguments: * (tuple of ints size \\| None)" in lines[2]


def test_memory_budget_needs_no_psutil(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # `import psutil` now raises ImportError
    budget = memory_budget_bytes(BenchmarkConfig(), device_total=None)
    assert 0 < budget < 2**50
    assert memory_budget_bytes(BenchmarkConfig(), device_total=10 * 2**30) == int(0.6 * 10 * 2**30)
    assert memory_budget_bytes(BenchmarkConfig(memory_budget_gb=2.0), device_total=None) == 2 * 2**30


def test_every_config_field_is_a_flag_spelled_with_underscores():
    wanted = BenchmarkConfig(
        ns=[64], ks=[8], train_ns=[], scaling_ns=[64], models=["linformer"], device="cuda:1", dtype="fp16", layers=3,
        batch=2, hidden_size=64, heads=2, intermediate_size=96, vocab_size=77, sharing="key_value",
        num_random_features=32, longformer_window=8, bigbird_block_size=4, bigbird_random_blocks=1,
        projection="mean", reps=4, warmup=0, threads=1, memory_budget_gb=1.5, measure_memory=False, peer=True,
        peer_ns=[64], peer_k=8, timeout_s=60.0, padding_fraction=0.25, autocast=True, train_memory=True,
        compile="layers", compile_mode="max-autotune", compile_backend="inductor", compile_timeout_s=30.0,
    )  # fmt: skip
    argv = ["--output_dir", "somewhere"]
    exclusive = {"tokens_per_batch"}  # not with batch: parsed on its own below
    for f in dataclasses.fields(BenchmarkConfig):
        if f.name in exclusive:
            continue
        value = getattr(wanted, f.name)
        assert value != getattr(BenchmarkConfig(), f.name), f"{f.name} must differ from its default to be tested"
        if isinstance(value, bool):
            argv.append(f"--{f.name}" if value else f"--no_{f.name}")
        elif isinstance(value, list):
            argv += [f"--{f.name}", *map(str, value)]  # an empty list: the flag alone
        else:
            argv += [f"--{f.name}", str(value)]
    command_line, parsed = parse_args(argv)
    assert parsed == wanted
    assert command_line.output_dir == "somewhere"
    _, parsed = parse_args(["--ns", "64", "--train_ns", "32", "--scaling_ns", "--ks", "8", "--tokens_per_batch", "128"])
    assert (parsed.tokens_per_batch, parsed.batch_at(64), parsed.batch_at(32)) == (128, 2, 4)


def test_a_preset_sets_defaults_that_flags_override():
    command_line, cfg = parse_args(["--preset", "targets", "--reps", "5"])
    assert command_line.preset == "targets"
    assert (cfg.ns, cfg.scaling_ns, cfg.reps) == ([512, 4096, 16384], [4096, 16384], 5)
    with pytest.raises(SystemExit):
        parse_args(["--seq_len", "512"])  # unknown flags are errors, not ignored


def test_cpu_defaults_to_fp32_and_cuda_to_bf16():
    assert BenchmarkConfig().dtype == "fp32"
    assert BenchmarkConfig(device="cuda").dtype == "bf16"


@pytest.mark.parametrize("sharing", ["headwise", "key_value", "layerwise"])
@pytest.mark.parametrize("projection", ["linear", "mean", "conv"])
def test_fast_path_compression_equals_masked_projection(sharing, projection):
    """`compress_input` (E folded with the mask) equals projecting the masked input, for E X and for E 1."""
    model = LinformerModel(tiny_config(sharing=sharing, projection=projection)).eval()
    randomize_projections(model)
    layer = model.encoder.layer[0].attention.self
    projection_module = layer.projections(model.encoder.shared_projection)[0]
    x = torch.randn(2, 13, 32)
    mask = torch.ones(2, 13)
    mask[1, 5:] = 0
    compressed, row_sums = projection_module.compress_input(x, mask)
    torch.testing.assert_close(compressed, projection_module(x[:, None], mask)[:, 0])
    torch.testing.assert_close(row_sums, projection_module(torch.ones(2, 1, 13, 1), mask)[:, 0])


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--ns", "0"], "ns must hold positive lengths, got [0]"),
        (["--batch", "2", "--tokens_per_batch", "512"], "both set; give one of them"),
        # each failed part-way with a traceback, or ran every point to a failure and exited 0
        (["--heads", "0"], "heads must be >= 1, got 0"),
        (["--intermediate_size", "0"], "intermediate_size must be >= 1, got 0"),
        (["--layers", "0"], "layers must be >= 1, got 0"),
        (["--hidden_size", "100"], "hidden_size 100 is not a multiple of heads 12"),
        (["--reps", "0"], "reps must be >= 1, got 0"),
        (["--warmup", "-1"], "warmup must be >= 0, got -1"),
        (["--threads", "0"], "threads must be >= 1, got 0"),
        (["--timeout_s", "0"], "timeout_s must be > 0, got 0.0"),
        (["--memory_budget_gb", "-1"], "memory_budget_gb must be > 0, got -1.0"),
        (["--device", "gpu"], "device must be cpu or cuda[:i], got 'gpu'"),
        # a list flag with no value is an empty list: these measured nothing (the matmul peak only) and exited 0
        (["--models"], "models is empty: name at least one of"),
        (["--models", "linformer", "roberta-sdpa", "--ks"], "ks is empty, but linformer needs a projected length k"),
        (["--ns", "--train_ns", "--scaling_ns"], "nothing to measure: models"),
        (
            ["--ns", "64", "--ks", "128", "--train_ns", "--scaling_ns", "--models", "linformer"],
            "no point at ns=[64], train_ns=[], scaling_ns=[] (scaling_ns times the linear-cost models only; ns n=64: k "
            "[128] > n)",
        ),  # fmt: skip
        (["--peer", "--peer_ns"], "peer is set but peer_ns is empty: give peer_ns"),
        (["--peer_k", "0"], "peer_k must be >= 1, got 0"),
        (
            ["--peer", "--peer_ns", "256", "--tokens_per_batch", "128", "--ns", "64", "--train_ns", "--scaling_ns"],
            "tokens_per_batch=128 is not a multiple of every n: peer_ns [256] (",
        ),
    ],
)
def test_an_invalid_setting_is_one_error_line_before_any_work(flags, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(["--preset", "quick", "--output_dir", str(tmp_path / "out"), *flags])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_run_that_fails_during_the_timing_is_dropped_alone():
    """One model running out of memory beside the others (seen on an H100: eager RoBERTa at n = 2048) costs its own
    point, not the timing of every model at that n."""
    from benchmarks.workers import _interleaved_times

    calls = {"good": 0, "bad": 0}

    def good():
        calls["good"] += 1

    def bad():
        calls["bad"] += 1
        if calls["bad"] == 2:
            raise RuntimeError("CUDA out of memory")

    errors = {}
    runs = {"good": good, "bad": bad}
    times = _interleaved_times(runs, BenchmarkConfig(device="cpu"), 4, errors)
    assert list(times) == ["good"] and len(times["good"]) == 4
    assert errors == {"bad": "RuntimeError: CUDA out of memory"} and "bad" not in runs
    calls["bad"] = 1
    with pytest.raises(RuntimeError):  # without `errors` a failure still ends the timing
        _interleaved_times({"bad": bad}, BenchmarkConfig(device="cpu"), 1)


@pytest.mark.parametrize("mode", [Mode.TRAIN, Mode.INFERENCE])
@pytest.mark.parametrize("compiled", ["model", "layers"])
def test_compiled_steps_are_timed_after_their_compile_and_do_not_recompile(compiled, mode):
    """`--compile`: the inference step and the training step (forward, backward, AdamW) run the compiled model; its
    first call, which compiles, is timed apart (compile_s), and the timed repetitions compile nothing more. The memory
    step compiles off the books."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    from benchmarks.workers import MemoryTask, TimingTask

    torch._dynamo.reset()
    counters.clear()
    cfg = tiny_benchmark(models=["linformer", "performer"], compile=compiled, compile_backend="aot_eager", reps=3)
    cfg.validate()
    points = [("linformer k=8", "linformer", 16, 8), ("performer", "performer", 16, None)]
    timing = TimingTask(cfg, mode, points).run()
    assert timing["errors"] == {}
    assert set(timing["compile_s"]) == {"linformer k=8", "performer"} and min(timing["compile_s"].values()) > 0
    assert counters["stats"]["unique_graphs"] >= 2  # both models ran compiled
    assert timing["graphs_while_timed"] == 0
    # Per model: its first call compiled, its second step (run alone right after) nothing, and nothing later either:
    # every model is built before any compiles, so a model built after another's compile cannot make that one's
    # graph recompile (building registers the model's class with transformers, which the graphs guard on).
    assert set(timing["graphs"]) == {"linformer k=8", "performer"}
    for graphs in timing["graphs"].values():
        assert graphs["first_call"] >= 1 and graphs["second_step"] == 0 and graphs["later"] == 0, graphs
    assert all(len(times) == 3 for times in timing["times"].values())
    memory = MemoryTask(cfg, mode, "linformer", 16, 8).run()
    assert memory["activation_bytes"] >= 0


def test_compile_settings_that_cannot_work_are_refused_before_the_run():
    with pytest.raises(ValueError, match="compile must be no, model or layers"):
        tiny_benchmark(compile="encoder").validate()
    with pytest.raises(ValueError, match="compile_mode='reduce-overhead' captures CUDA graphs, which need a CUDA"):
        tiny_benchmark(compile="model", compile_mode="reduce-overhead").validate()
    with pytest.raises(ValueError, match="compile_mode='max-autotune' is set but compile is no"):
        tiny_benchmark(compile_mode="max-autotune").validate()
    with pytest.raises(ValueError, match="compile_timeout_s=60 is set but compile is no"):
        tiny_benchmark(compile_timeout_s=60).validate()
    with pytest.raises(ValueError, match="compile_timeout_s must be positive, got 0"):
        tiny_benchmark(compile="model", compile_timeout_s=0).validate()


SLOW_BACKEND = "slow_first_graph"
_held_graphs = []


def _slow_first_graph(graph, example_inputs):
    """A torch.compile backend that compiles as `eager` does, but holds the first graph it gets for two minutes, as a
    long inductor compile would (`_held_graphs` says whether it has had it)."""
    if not _held_graphs:
        _held_graphs.append(graph)
        time.sleep(120)
    return graph.forward


def test_a_compile_past_its_limit_fails_that_model_alone_and_the_others_are_timed():
    """On an H100 the whole-model compiled training of four models at one n ran past the timing process's timeout
    together, and every model's result was lost, the compile times of those that had compiled included. Each model's
    compile now has a limit of its own: the first model's, held in the compile backend past `compile_timeout_s`, is
    interrupted there and that model fails alone, its reason naming the compile and its time; the next model
    compiles in the same process and is timed; each compile is reported as it goes."""
    import torch._dynamo

    from benchmarks.workers import TimingTask

    if SLOW_BACKEND not in torch._dynamo.list_backends(exclude_tags=()):
        torch._dynamo.register_backend(_slow_first_graph, name=SLOW_BACKEND)
    torch._dynamo.reset()
    _held_graphs.clear()
    cfg = tiny_benchmark(models=["linformer", "performer"], compile="model", compile_backend=SLOW_BACKEND,
                         compile_timeout_s=10, reps=2)  # fmt: skip
    cfg.validate()
    points = [("linformer k=8", "linformer", 16, 8), ("performer", "performer", 16, None)]
    events = []
    started = time.perf_counter()
    timing = TimingTask(cfg, Mode.TRAIN, points).run(events.append)
    assert time.perf_counter() - started < 100  # the held compile did not run its two minutes
    assert _held_graphs  # the first graph was held: the interruption came from inside the compile
    assert list(timing["errors"]) == ["linformer k=8"], timing["errors"]
    held_s = re.fullmatch(
        r"compile timed out after (\d+) s \(compile_timeout_s = 10 s\)", timing["errors"]["linformer k=8"]
    )
    assert held_s and int(held_s.group(1)) >= 10, timing["errors"]
    assert list(timing["times"]) == ["performer"] and len(timing["times"]["performer"]) == 2
    assert list(timing["compile_s"]) == ["performer"] and timing["graphs"]["performer"]["second_step"] == 0
    assert [(event["event"], event.get("label")) for event in events] == [
        ("compiling", "linformer k=8"), ("failed", "linformer k=8"), ("compiling", "performer"),
        ("compiled", "performer"), ("timing", None),
    ]  # fmt: skip


def test_no_compile_runs_into_the_time_kept_to_time_the_models():
    """A compile's limit is also cut to the timing process's end, less what the timing of its models needs, so that
    a slow compile cannot take the timing of those compiled before it along; a model left no time is not compiled."""
    from benchmarks.workers import TimingTask

    cfg = tiny_benchmark(models=["linformer"], compile="model", compile_backend="eager", compile_timeout_s=100, reps=3)
    far = TimingTask(cfg, Mode.TRAIN, [], ends_at=time.time() + 1000)
    assert far.compile_limit([0.5]) == (100, "compile_timeout_s = 100 s")
    # kept: 10 s and twice the (1 warm-up + 3 reps + 3) calls at the second steps' seconds, the next model's counted
    # as the slowest's: 10 + 2 * 7 * (0.5 + 0.5) = 24 s of the 60 left
    limit, why = TimingTask(cfg, Mode.TRAIN, [], ends_at=time.time() + 60.4).compile_limit([0.5])
    assert 35 < limit <= 36.4 and why == "the timing process's end was 60 s away, 24 s of them kept to time the models"
    points = [("linformer k=8", "linformer", 16, 8)]
    timing = TimingTask(cfg, Mode.INFERENCE, points, ends_at=time.time() + 5.4).run()
    assert timing["errors"] == {
        "linformer k=8": "compile not started: the timing process's end was 5 s away, 10 s of them kept to time the "
        "models"
    }
    assert timing["times"] == {} and timing["compile_s"] == {}


def test_a_timing_process_killed_mid_compile_keeps_each_compile_time_and_says_where_it_was(monkeypatch):
    """The H100 case: the timing process of a compiled n ran past its timeout. The rows keep the compile time of each
    model that had compiled, and their reasons say which model was compiling, and for how long; a model whose compile
    had not begun says so. Once every model had compiled, the reasons say the process ended in the timing."""
    from benchmarks import run as bench_run
    from benchmarks import workers

    clock = [100.0]
    monkeypatch.setattr(workers, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    all_compiled = False

    def killed(task, timeout_s, on_progress=None):
        assert task.ends_at is not None and [label for label, *_ in task.points] == list(rows)
        on_progress({"event": "compiling", "label": "roberta-sdpa"})
        clock[0] += 48.2
        on_progress({"event": "compiled", "label": "roberta-sdpa", "compile_s": 48.2, "first_call": 1,
                     "second_step": 0})  # fmt: skip
        on_progress({"event": "compiling", "label": "linformer k=256"})
        clock[0] += 61.0
        if all_compiled:
            on_progress({"event": "compiled", "label": "linformer k=256", "compile_s": 61.0, "first_call": 1,
                         "second_step": 0})  # fmt: skip
            on_progress({"event": "failed", "label": "performer", "error": "compile not started: no time"})
            on_progress({"event": "timing"})
        raise WorkerFailed("timed out after 155 s")

    monkeypatch.setattr(bench_run, "run_in_fresh_process", killed)
    cfg = tiny_benchmark(models=["roberta-sdpa", "linformer", "performer"], ks=[256], compile="model")
    labels = [("roberta-sdpa", None), ("linformer", 256), ("performer", None)]
    rows = {row.label: row for row in (BenchmarkRow(mode=Mode.TRAIN, model=m, n=512, k=k) for m, k in labels)}
    log = []
    bench_run._time_points(cfg, Mode.TRAIN, rows, log.append)
    assert {label: (row.status, row.compile_s, row.graphs_first_call) for label, row in rows.items()} == {
        "roberta-sdpa": (Status.FAILED, 48.2, 1), "linformer k=256": (Status.FAILED, None, None),
        "performer": (Status.FAILED, None, None),
    }  # fmt: skip
    assert [row.reason for row in rows.values()] == [
        "timing: timed out after 155 s while linformer k=256 was compiling (61 s in); this model compiled in 48.2 s",
        "timing: timed out after 155 s while compiling this model (61 s in)",
        "timing: timed out after 155 s before this model's compile began, while linformer k=256 was compiling "
        "(61 s in)",
    ]
    assert "    roberta-sdpa compiled in 48.2 s" in log
    assert "  timing failed: timed out after 155 s while linformer k=256 was compiling (61 s in)" in log

    all_compiled = True
    rows = {row.label: row for row in (BenchmarkRow(mode=Mode.TRAIN, model=m, n=512, k=k) for m, k in labels)}
    bench_run._time_points(cfg, Mode.TRAIN, rows, log.append)
    assert [(row.compile_s, row.reason) for row in rows.values()] == [
        (48.2, "timing: timed out after 155 s in the warm-ups or the timing, after every compile; this model compiled "
         "in 48.2 s"),
        (61.0, "timing: timed out after 155 s in the warm-ups or the timing, after every compile; this model compiled "
         "in 61.0 s"),
        (None, "compile not started: no time"),
    ]  # fmt: skip


def test_a_timing_process_that_dies_mid_compile_has_told_what_it_compiled():
    """A real fresh process reports each compile as it goes: what it said before it died (or, the same to the pipe,
    was killed at its timeout) reaches the parent."""
    from timing_stand_ins import DiesCompiling

    from benchmarks.workers import TimingProgress

    progress = TimingProgress()
    task = DiesCompiling(tiny_benchmark(), Mode.TRAIN, [("a", "linformer", 16, 8), ("b", "performer", 16, None)])
    with pytest.raises(WorkerFailed, match="process exited with code 3"):
        run_in_fresh_process(task, timeout_s=120, on_progress=progress.add)
    assert list(progress.compiled) == ["a"] and progress.compiled["a"]["compile_s"] == 1.5
    assert progress.compiling == "b"


def test_a_slow_compile_cut_by_the_timing_process_end_fails_alone_end_to_end(monkeypatch):
    """End to end as on the H100: no compile_timeout_s, and a timing process whose timeout is short (there: cut to
    the session's hard end). The second model's compile, held past what the process has left, is stopped while the
    first model, compiled, can still be timed; the first keeps its compile time, the second says why it failed."""
    from timing_stand_ins import SlowFirstCall

    from benchmarks import run as bench_run

    monkeypatch.setattr(bench_run, "TimingTask", functools.partial(SlowFirstCall, slow="performer"))
    cfg = tiny_benchmark(models=["linformer", "performer"], ns=[16], train_ns=[], compile="model",
                         compile_backend="eager", measure_memory=False, timeout_s=30, reps=2)  # fmt: skip
    log = []
    started = time.time()
    rows, _ = run_benchmark(cfg, log=log.append)
    assert time.time() - started < 120
    linformer, performer = rows
    assert (linformer.status, linformer.reps, linformer.graphs_second_step) == (Status.OK, 2, 0)
    assert linformer.compile_s > 0 and any(line.startswith("    linformer k=8 compiled in") for line in log)
    assert performer.status == Status.FAILED and performer.compile_s is None
    assert re.fullmatch(r"compile timed out after \d+ s \(the timing process's end was \d+ s away, \d+ s of them "
                        r"kept to time the models\)", performer.reason), performer.reason  # fmt: skip


def test_overwrite_deletes_the_earlier_runs_files_only_and_a_second_run_into_the_folder_is_refused(tmp_path, capsys):
    """--overwrite deleted every PNG of the folder, a user's own figure too; two runs started into one empty folder
    both wrote there, the second's results replacing the first's without a word."""
    import fcntl

    from benchmarks import cli

    out = tmp_path / "out"
    out.mkdir()
    (out / "my_figure.png").write_text("mine")
    (out / "results.md").write_text("an earlier run's")
    (out / "inference_time.png").write_text("an earlier run's")
    handle = os.open(out, os.O_RDONLY)
    fcntl.flock(handle, fcntl.LOCK_EX)  # as a run in progress holds it
    try:
        assert cli.main(["--preset", "quick", "--output_dir", str(out), "--overwrite"]) != 0
        assert "another benchmark is writing to" in capsys.readouterr().err
    finally:
        os.close(handle)
    assert (out / "results.md").exists()  # refused before deleting anything
    os.close(cli.lock_output_dir(str(out)))  # free again
    cli.remove_earlier_run(str(out))
    assert sorted(os.listdir(out)) == ["my_figure.png"]


def test_peer_without_its_package_is_refused_before_any_work(tmp_path, capsys):
    """Every peer point failed at the end of the run (exit 0) when the `linformer` package was missing."""
    import importlib.util

    from benchmarks import cli

    if importlib.util.find_spec("linformer") is not None:
        pytest.skip("the `linformer` package is installed here")
    assert cli.main(["--preset", "quick", "--peer", "--peer_k", "8", "--output_dir", str(tmp_path / "out")]) != 0
    assert "--peer needs the `linformer` package" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_k_longer_than_n_is_named_not_dropped_without_a_word():
    """--ns 100 --ks 200 measured no Linformer at n = 100 and said nothing."""
    cfg = tiny_benchmark(ns=[100, 256], train_ns=[], scaling_ns=[], ks=[64, 200])
    assert cfg.unmeasured_ks() == ["ns n=100: k [200] > n"]
    assert ("linformer", 200) not in cfg.points(100) and ("linformer", 64) in cfg.points(100)
    assert tiny_benchmark(ns=[100], ks=[200], models=["roberta-sdpa"]).unmeasured_ks() == []


def test_a_run_whose_every_point_failed_exits_non_zero(tmp_path, monkeypatch, capsys):
    """It wrote its tables of failures and exited 0: a script read success."""
    from benchmarks import cli
    from benchmarks.run import RunInfo

    failed = BenchmarkRow(Mode.INFERENCE, "linformer", 16, 8, status=Status.FAILED, reason="timing: timed out")
    monkeypatch.setattr(cli, "run_benchmark", lambda cfg, **kwargs: ([failed], RunInfo(1.0, 1.0)))
    argv = ["--preset", "quick", "--ns", "16", "--ks", "8", "--train_ns", "--scaling_ns", "--models", "linformer"]
    assert cli.main([*argv, "--output_dir", str(tmp_path / "out")]) == 1
    assert "every point failed" in capsys.readouterr().err and (tmp_path / "out" / "results.md").exists()
    measured = dataclasses.replace(failed, status=Status.OK, reason=None, time_s=0.5)

    def one_measured(cfg, log, on_measured, **kwargs):
        on_measured([failed, measured])  # the rows-so-far file, kept should the run be stopped
        return [failed, measured], RunInfo(1.0, 1.0)

    monkeypatch.setattr(cli, "run_benchmark", one_measured)
    assert cli.main([*argv, "--output_dir", str(tmp_path / "out2")]) == 0
    assert not (tmp_path / "out2" / "results_partial.csv").exists()  # the whole run is in results.csv


def test_ctrl_c_on_a_run_is_one_line_naming_what_was_kept(tmp_path, monkeypatch, capsys):
    from benchmarks import cli

    def interrupted(cfg, log, on_measured, **kwargs):
        on_measured([BenchmarkRow(Mode.INFERENCE, "linformer", 16, 8, time_s=0.5)])
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "run_benchmark", interrupted)
    out = tmp_path / "out"
    argv = ["--preset", "quick", "--ns", "16", "--ks", "8", "--train_ns", "--scaling_ns", "--output_dir", str(out)]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert (
        f"the points measured so far are in {out}/results_partial.csv; the same command with --resume measures the rest"
        in err
    )
    assert (out / "results_partial.csv").exists()

    def interrupted_at_once(cfg, log, on_measured, **kwargs):
        raise KeyboardInterrupt

    # stopped before a point: the folder it made is removed, and the same command runs again as it is (it said to add
    # --overwrite, which is not needed)
    monkeypatch.setattr(cli, "run_benchmark", interrupted_at_once)
    fresh = tmp_path / "fresh"
    assert cli.main([*argv[:-1], str(fresh)]) == 130
    err = capsys.readouterr().err
    assert "no point was measured; the same command runs it again." in err and not fresh.exists()


def test_sigterm_stops_a_run_as_ctrl_c_does_and_leaves_no_worker_measuring(tmp_path, monkeypatch, capsys, send_sigterm):
    """SIGTERM (kill, timeout, a job scheduler) reaches the benchmark's process alone: it died at once, without the
    line naming what was kept, and its worker went on measuring, unseen, for as long as its point took (beside
    whatever was timed next)."""
    from timing_stand_ins import StopsTheBenchmark

    from benchmarks import cli

    pid_file = tmp_path / "worker.pid"

    def stopped_while_measuring(cfg, log, on_measured, **kwargs):
        on_measured([BenchmarkRow(Mode.INFERENCE, "linformer", 16, 8, time_s=0.5)])
        return run_in_fresh_process(StopsTheBenchmark(os.getpid(), str(pid_file)), timeout_s=120)

    monkeypatch.setattr(cli, "run_benchmark", stopped_while_measuring)
    out = tmp_path / "out"
    argv = ["--preset", "quick", "--ns", "16", "--ks", "8", "--train_ns", "--scaling_ns", "--output_dir", str(out)]
    assert cli.main(argv) == 130
    assert f"stopped (Ctrl-C or SIGTERM): the points measured so far are in {out}/results_partial.csv" in (
        capsys.readouterr().err
    )
    worker = int(pid_file.read_text())
    for _ in range(50):  # gone, or a zombie its forkserver has yet to reap
        try:
            with open(f"/proc/{worker}/stat", encoding="utf-8") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the worker {worker} is still running")


def test_a_run_that_fails_at_its_start_is_one_error_line_and_leaves_no_folder(tmp_path, capsys):
    """--timeout_s 0.5 ended in two chained tracebacks (the matmul peak's process timed out, "after 0 s") and left an
    empty folder behind."""
    from benchmarks import cli

    argv = ["--preset", "quick", "--timeout_s", "0.001"]
    out = tmp_path / "out"
    assert cli.main([*argv, "--output_dir", str(out)]) != 0
    err = capsys.readouterr().err
    assert err == (
        "error: measuring the matmul peak failed: timed out after 0.001 s; raise --timeout_s (0.001 s now), the time "
        "limit of each worker process\n"
    )
    assert not out.exists()
    out.mkdir()  # a folder of the user's own is kept, and a run into it is not refused as an earlier run's
    for _ in range(2):
        assert cli.main([*argv, "--output_dir", str(out)]) != 0
        assert capsys.readouterr().err.startswith("error: measuring the matmul peak failed: timed out after 0.001 s")
        assert out.is_dir() and not os.listdir(out)


SKIPPED = BenchmarkRow(Mode.INFERENCE, "linformer", 16, 8, status=Status.SKIPPED, reason="would not fit")


@pytest.mark.parametrize(
    "rows, peer_error, problem",
    [
        ([SKIPPED], None, "nothing was measured (0 point(s) failed, 1 skipped)"),
        ([SKIPPED, dataclasses.replace(SKIPPED, status=Status.FAILED)], None,
         "nothing was measured (1 point(s) failed, 1 skipped)"),
        ([], None, "nothing was measured (0 point(s) failed, 0 skipped)"),
        ([], "WorkerFailed: timed out", "every point failed"),
    ],
)  # fmt: skip
def test_a_run_that_measured_nothing_exits_non_zero(rows, peer_error, problem, tmp_path, monkeypatch, capsys):
    """Every point skipped (above the memory budget, or its model unavailable), or no point at all: it wrote its
    tables and exited 0."""
    from benchmarks import cli
    from benchmarks.run import PeerResult, RunInfo

    peer = [] if peer_error is None else [PeerResult(16, 8, error=peer_error)]
    monkeypatch.setattr(cli, "run_benchmark", lambda cfg, **kwargs: (rows, RunInfo(1.0, 1.0, peer=peer)))
    argv = ["--preset", "quick", "--ns", "16", "--ks", "8", "--train_ns", "--scaling_ns", "--models", "linformer"]
    out = tmp_path / "out"
    assert cli.main([*argv, "--output_dir", str(out)]) == 1
    assert capsys.readouterr().err == f"error: {problem} (the reasons: {out}/results.md)\n"
    assert (out / "results.md").exists()
    timed = PeerResult(16, 8, median_s={"linformer (PyPI)": 1.0, "linformer_hf (fast path)": 0.5})
    monkeypatch.setattr(cli, "run_benchmark", lambda cfg, **kwargs: (rows, RunInfo(1.0, 1.0, peer=[timed])))
    assert cli.main([*argv, "--output_dir", str(tmp_path / "peer")]) == 0  # the peer was measured


def test_points_left_out_for_k_longer_than_n_are_named_in_the_results(tmp_path, monkeypatch):
    """`not measured: ...` was printed to stdout alone: results.md and run_info.json did not say which points were
    left out."""
    import json

    from benchmarks import cli
    from benchmarks.run import RunInfo

    measured = BenchmarkRow(Mode.INFERENCE, "linformer", 64, 32, time_s=0.5)
    monkeypatch.setattr(cli, "run_benchmark", lambda cfg, **kwargs: ([measured], RunInfo(1.0, 1.0)))
    argv = ["--preset", "quick", "--ns", "16", "64", "--ks", "32", "--train_ns", "16", "--scaling_ns", "--models"]
    assert cli.main([*argv, "linformer", "--output_dir", str(tmp_path / "out")]) == 0
    left_out = ["ns n=16: k [32] > n", "train_ns n=16: k [32] > n"]
    assert json.loads((tmp_path / "out" / "run_info.json").read_text())["not_measured"] == left_out
    assert f"Not measured (a Linformer's k is at most n): {'; '.join(left_out)}\n" in (
        (tmp_path / "out" / "results.md").read_text()
    )


X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse2 avx avx2 avx512f avx512bw hypervisor

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: another
flags\t\t: fpu amx_tile
"""


def test_the_machine_names_the_cpu_family_model_and_instruction_sets(tmp_path, monkeypatch):
    """/proc/cpuinfo's model name alone ("AMD EPYC" in a virtual machine) did not say which generation a record ran
    on, nor whether it had AVX-512: the family and model numbers and the flags do. Without /proc/cpuinfo (macOS),
    or without flags, they are unknown (None), not "no"."""
    import json

    from benchmarks import cli, report
    from benchmarks.run import RunInfo

    (tmp_path / "cpuinfo").write_text(X86_CPUINFO)
    details = report.cpu_details(str(tmp_path / "cpuinfo"))  # the first processor's
    assert details == {"model_name": "AMD EPYC", "vendor": "AuthenticAMD", "family": 25, "model": 17, "stepping": 1,
                       "avx512": True, "avx2": True, "amx": False, "hypervisor": True}  # fmt: skip
    assert report.cpu_description(details) == (
        "AMD EPYC (family 25, model 17; AVX-512 yes, AVX2 yes, AMX no; under a hypervisor)"
    )
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\n")
    arm = report.cpu_details(str(tmp_path / "arm"))
    assert arm["family"] is None and not any(arm[key] or arm[key] is None for key in ("avx512", "avx2", "amx"))
    missing = report.cpu_details(str(tmp_path / "none"))
    assert missing["model_name"] and {k: v for k, v in missing.items() if k != "model_name"} == dict.fromkeys(
        ("vendor", "family", "model", "stepping", "avx512", "avx2", "amx", "hypervisor")
    )
    assert report.cpu_description(missing) == missing["model_name"]
    assert report.machine_description(BenchmarkConfig(), missing).startswith(f"{missing['model_name']}, ")

    monkeypatch.setattr(cli, "cpu_details", lambda: details)
    measured = BenchmarkRow(Mode.INFERENCE, "linformer", 16, 8, time_s=0.5)
    monkeypatch.setattr(cli, "run_benchmark", lambda cfg, **kwargs: ([measured], RunInfo(1.0, 1.0)))
    argv = ["--preset", "quick", "--ns", "16", "--ks", "8", "--train_ns", "--scaling_ns", "--models", "linformer"]
    assert cli.main([*argv, "--output_dir", str(tmp_path / "out")]) == 0
    run_info = json.loads((tmp_path / "out" / "run_info.json").read_text())
    assert run_info["cpu"] == details and run_info["machine"].startswith(report.cpu_description(details) + ", ")
    assert f"Machine: {report.cpu_description(details)}, " in (tmp_path / "out" / "results.md").read_text()


def test_a_worker_stopped_by_ctrl_c_exits_without_a_traceback():
    """Ctrl-C reaches the worker processes too: each printed `Process ForkServerProcess-8: Traceback ...
    KeyboardInterrupt` below the run's one-line "stopped (Ctrl-C)". It exits with 130 instead (a SystemExit of a code:
    no traceback), and the parent names it."""
    from timing_stand_ins import Interrupted

    with pytest.raises(WorkerFailed, match=r"^process exited with code 130 \(interrupted: SIGINT, Ctrl-C\)$"):
        run_in_fresh_process(Interrupted(), timeout_s=120)


def test_a_compile_that_swallows_its_time_limit_still_fails_as_timed_out():
    """Seen once: the alarm's CompileTimedOut was printed from inside a compile, which went on: the model "compiled in
    12.5 s" past its 3 s limit and was timed. An alarm that went off fails the model, come up its exception or not."""
    from benchmarks.workers import PointFailed, PreparedStep, TimingTask

    calls = []

    def swallows_the_alarm():  # as a compile's `except BaseException:` (or a bare except) that logs and goes on would
        calls.append(time.perf_counter())
        try:
            time.sleep(5 if len(calls) == 1 else 0)
        except BaseException:
            pass

    cfg = tiny_benchmark(models=["linformer"], compile="model", compile_backend="eager", compile_timeout_s=0.2)
    step = PreparedStep(net=None, inputs={}, optimizer=None, run=swallows_the_alarm)
    why = "compile_timeout_s = 0.2 s"
    started = time.perf_counter()
    with pytest.raises(PointFailed, match=r"^compile timed out after \d+ s \(compile_timeout_s = 0.2 s\)$"):
        TimingTask(cfg, Mode.INFERENCE, [])._first_calls("linformer k=8", step, 0.2, why)
    assert len(calls) == 2 and time.perf_counter() - started < 4  # the alarm cut the first call short
