"""The efficiency benchmark's logic: FLOP counts, a tiny end-to-end run, over-memory skips. No timing assertions."""

import csv

import pytest
import torch
from conftest import randomize_projections, tiny_config
from torch.utils.flop_counter import FlopCounterMode

from linformer_hf import LinformerModel
from linformer_hf.research.benchmarking import (
    CSV_COLUMNS,
    BenchmarkConfig,
    build_model,
    estimate_activation_bytes,
    forward_flops,
    ratio_tables,
    run_benchmark,
    write_csv,
)

TINY = dict(hidden_size=32, heads=4, intermediate_size=48, layers=2, vocab_size=99)


def tiny_benchmark(**overrides) -> BenchmarkConfig:
    settings = dict(TINY, ns=[16, 64], ks=[8], train_ns=[16], reps=1, warmup=1, threads=1, timeout_s=120)
    settings.update(overrides)
    return BenchmarkConfig(**settings)


def test_flop_count_matches_a_hand_count():
    # d = 32, d_ff = 48, n = 16, k = 8, 2 layers, batch 1; multiply-adds per layer:
    # Q, output: 2 * 16 * 32 * 32 = 32768; feed-forward: 2 * 16 * 32 * 48 = 49152
    # RoBERTa: + K, V 32768 + attention 2 * 16 * 16 * 32 = 16384                 -> 131072
    # Linformer headwise: + E X, F X 2 * 8 * 16 * 32 = 8192, K, V on 8 rows 2 * 8 * 32 * 32 = 16384,
    #   attention 2 * 16 * 8 * 32 = 8192                                          -> 114688
    # pooler: 32 * 32 = 1024; FLOPs = 2 * multiply-adds.
    shape = dict(hidden_size=32, intermediate_size=48, layers=2)
    assert forward_flops("roberta-sdpa", 16, None, **shape) == 2 * (2 * 131072 + 1024)
    assert forward_flops("linformer", 16, 8, **shape) == 2 * (2 * 114688 + 1024)
    # E = F computes E X once
    assert forward_flops("linformer", 16, 8, sharing="key_value", **shape) == 2 * (2 * (114688 - 4096) + 1024)


@pytest.mark.parametrize("model,k,sharing", [("roberta-eager", None, "headwise"), ("linformer", 8, "headwise"),
                                             ("linformer", 8, "key_value"), ("linformer", 8, "none")])
def test_flop_count_matches_torch_flop_counter(model, k, sharing):
    """The analytic count equals what torch counts for the real model (eager attention: plain matmuls only)."""
    cfg = BenchmarkConfig(**TINY, sharing=sharing)
    net = build_model(model, 16, k, cfg).eval()
    if model == "linformer":
        net.config._attn_implementation = "eager"
    ids = torch.randint(3, 99, (1, 16))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        net(ids, attention_mask=torch.ones_like(ids))
    expected = forward_flops(model, 16, k, hidden_size=32, intermediate_size=48, layers=2, sharing=sharing)
    # The only extra product: the slot mask's einsum, |E| (heads, k, L) times the mask, per layer and per distinct
    # projection (E and F, or E = F once).
    projections = 1 if sharing == "key_value" else 2
    heads = 4 if sharing == "none" else 1
    extra = 2 * 2 * projections * heads * 8 * 16 if model == "linformer" else 0
    assert counter.get_total_flops() == expected + extra


def test_memory_estimate_is_quadratic_only_for_eager_attention():
    cfg = BenchmarkConfig()
    eager = [estimate_activation_bytes("roberta-eager", n, None, cfg, "inference") for n in (4096, 8192)]
    linformer = [estimate_activation_bytes("linformer", n, 256, cfg, "inference") for n in (4096, 8192)]
    assert eager[1] / eager[0] > 3.5
    assert linformer[1] / linformer[0] < 2.1
    # n = 65536: the eager score matrices alone are 2 * 12 * 65536^2 * 4 bytes = 384 GiB
    assert estimate_activation_bytes("roberta-eager", 65536, None, cfg, "inference") > 384 * 2**30


def test_quick_run_writes_rows_and_skips_what_would_not_fit(tmp_path):
    # A budget between the eager model's estimate at n = 64 and everything else's.
    cfg = tiny_benchmark()
    eager_64 = estimate_activation_bytes("roberta-eager", 64, None, cfg, "inference")
    others = [estimate_activation_bytes("roberta-sdpa", 64, None, cfg, "inference"),
              estimate_activation_bytes("linformer", 64, 8, cfg, "inference")]
    others += [estimate_activation_bytes(model, 16, k, cfg, mode) for model, k in
               [("roberta-eager", None), ("roberta-sdpa", None), ("linformer", 8)] for mode in ("inference", "train")]
    assert max(others) < eager_64
    cfg.memory_budget_gb = (max(others) + eager_64) / 2 / 2**30

    rows, info = run_benchmark(cfg, log=lambda message: None)
    assert info["matmul_peak_gflops"] > 0
    by_key = {(r["mode"], r["model"], r["n"]): r for r in rows}
    assert len(rows) == 2 * 3 + 3  # inference at two n, training at one, three models each

    skipped = by_key[("inference", "roberta-eager", 64)]
    assert skipped["status"].startswith("skipped: would not fit")
    assert skipped["time_s"] == "" and skipped["activation_mb"] == ""
    for key, row in by_key.items():
        if row is skipped:
            continue
        assert row["status"] == "ok", (key, row["status"])
        assert row["time_s"] > 0 and row["tokens_per_s"] > 0 and 0 < row["fraction_of_peak"]
        if row["mode"] == "inference":
            assert row["memory_method"] in ("vmhwm", "ru_maxrss")
            assert row["activation_mb"] >= 0 and row["weights_mb"] > 0

    path = tmp_path / "results.csv"
    write_csv(rows, str(path))
    with open(path) as f:
        written = list(csv.DictReader(f))
    assert list(written[0].keys()) == CSV_COLUMNS
    assert len(written) == len(rows)
    assert "baseline OOM" in ratio_tables(rows, cfg)


def test_invalid_settings_are_clear_errors():
    with pytest.raises(ValueError, match="fp32 only"):
        BenchmarkConfig(dtype="fp16").validate()
    with pytest.raises(ValueError, match="unknown models"):
        BenchmarkConfig(models=["bert"]).validate()


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
