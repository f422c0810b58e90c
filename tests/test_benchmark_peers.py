"""The peers in the efficiency benchmark (transformers' Longformer and BigBird): their rows on a tiny configuration
through the same pipeline (time, memory, counted FLOPs, the attention that actually ran), and the training step's
optimizer. No timing assertions."""

import pytest
import torch

from benchmarks import (
    PRESETS,
    BenchmarkConfig,
    Mode,
    Status,
    build_model,
    forward_flops,
    model_config,
    run_benchmark,
)
from benchmarks.models import model_inputs, realised_attention
from benchmarks.report import peer_table, peers_table
from benchmarks.workers import MemoryTask, _optimizer, _step, run_in_fresh_process

PEERS = ["longformer", "longformer-global", "bigbird"]

# BigBird with blocks of 8 and 3 random blocks runs block-sparse attention only above (5 + 2 * 3) * 8 = 88 tokens:
# n = 64 falls back to full attention, n = 128 does not. Longformer's window of 16 makes n = 128 eight windows.
TINY_PEERS = dict(
    hidden_size=32, heads=4, intermediate_size=48, layers=1, vocab_size=99, longformer_window=16,
    bigbird_block_size=8, bigbird_random_blocks=3, reps=1, warmup=1, threads=1, timeout_s=120,
)  # fmt: skip


def tiny_peers(**overrides) -> BenchmarkConfig:
    settings = dict(TINY_PEERS, ns=[64, 128], ks=[8], train_ns=[128], models=["linformer", *PEERS])
    settings.update(overrides)
    return BenchmarkConfig(**settings)


def test_peer_rows_run_through_the_pipeline_and_record_what_ran():
    cfg = tiny_peers()
    snapshots = []
    rows, _ = run_benchmark(cfg, log=lambda message: None, on_measured=lambda rows: snapshots.append(list(rows)))
    # the rows so far after each length: n = 64, n = 128 (inference), n = 128 (training)
    assert [len(snapshot) for snapshot in snapshots] == [4, 8, 12] and snapshots[-1] == rows
    by_key = {(r.mode, r.model, r.n): r for r in rows}
    assert len(rows) == len(by_key) == 3 * 4  # inference at two n and training at one, four models
    for key, row in by_key.items():
        assert row.status == Status.OK, (key, row.reason)
        assert row.time_s > 0 and row.gflop > 0 and row.achieved_gflops > 0, key
        if row.mode == Mode.INFERENCE:
            assert row.activation_mb is not None and row.weights_mb > 0 and row.memory_error is None, key
        assert row.flop_source == ("FlopCounterMode" if row.model in PEERS else "cost model"), key

    # What ran, not what was asked: BigBird falls back to full attention at 64 <= 88 tokens, in timing and memory.
    assert by_key[(Mode.INFERENCE, "bigbird", 64)].attention == "original_full"
    for mode in (Mode.INFERENCE, Mode.TRAIN):
        assert by_key[(mode, "bigbird", 128)].attention == "block_sparse (block 8, 3 random)"
        assert by_key[(mode, "longformer", 128)].attention == "sliding window 16, 0 global"
        assert by_key[(mode, "longformer-global", 128)].attention == "sliding window 16, 1 global"
    assert "[ran original_full]" in peers_table(rows, cfg)

    # The counted FLOPs saw the attention products: above what the projections and feed-forward alone cost (RoBERTa's
    # count without its 2 L^2 d score and value products), and the global token adds its row and column.
    for model in PEERS:
        dense_only = forward_flops(model_config("roberta-sdpa", 128, None, cfg), 128) - 2 * 2 * 128 * 128 * 32
        assert by_key[(Mode.INFERENCE, model, 128)].gflop * 1e9 > dense_only, model
    longformer, with_global = (by_key[(Mode.INFERENCE, m, 128)].gflop for m in ("longformer", "longformer-global"))
    assert with_global > longformer
    # A training step counts the backward too (about twice the forward; the optimizer has no products).
    assert by_key[(Mode.TRAIN, "bigbird", 128)].gflop > 2.5 * by_key[(Mode.INFERENCE, "bigbird", 128)].gflop


def test_memory_warm_up_does_not_switch_bigbird_to_full_attention():
    # The memory process warms up on a short input (64 tokens here, full attention for BigBird, which then stays
    # full for good); the measured model must still run block-sparse at n = 128.
    task = MemoryTask(tiny_peers(), Mode.INFERENCE, "bigbird", 128, None)
    assert run_in_fresh_process(task, timeout_s=120)["attention"] == "block_sparse (block 8, 3 random)"


def test_longformer_records_the_padding_it_adds():
    cfg = tiny_peers()
    net = build_model(model_config("longformer", 40, None, cfg)).eval()
    ids = torch.randint(3, cfg.vocab_size, (1, 40))
    inputs = model_inputs("longformer-global", ids, torch.ones_like(ids))
    assert inputs["global_attention_mask"].tolist() == [[1] + [0] * 39]
    with torch.inference_mode():
        assert net(**inputs).last_hidden_state.shape == (1, 40, cfg.hidden_size)
    assert realised_attention(net, inputs) == "sliding window 16, 1 global, padded by 8"


@pytest.mark.parametrize("model", ["linformer", "bigbird"])
def test_training_step_takes_the_optimizer_step(model):
    cfg = tiny_peers()
    net = build_model(model_config(model, 128, 8, cfg)).train()
    optimizer = _optimizer(net, Mode.TRAIN)
    ids = torch.randint(3, cfg.vocab_size, (1, 128))
    before = [p.detach().clone() for p in net.parameters()]
    _step(net, model_inputs(model, ids, torch.ones_like(ids)), Mode.TRAIN, optimizer)
    moved = [not torch.equal(b, p) for b, p in zip(before, net.parameters(), strict=True)]
    assert sum(moved) > len(moved) // 2  # AdamW moved the weights (those the input reached)
    assert all(p.grad is None for p in net.parameters())  # and the gradients were dropped
    assert all(state["step"] == 1 for state in optimizer.state.values())


@pytest.mark.parametrize(
    "setting,match",
    [(dict(longformer_window=15), "longformer_window must be even"), (dict(bigbird_block_size=0), "bigbird_block")],
)
def test_bad_peer_settings_are_clear_errors(setting, match):
    with pytest.raises(ValueError, match=match):
        tiny_peers(**setting).validate()


def test_peers_are_opt_in():
    assert not set(PEERS) & set(BenchmarkConfig().models)
    assert set(PEERS) <= set(BenchmarkConfig(**PRESETS["peers"]).models)


def test_the_attention_module_is_timed_against_the_linformer_package():
    """--peer against the `linformer` package itself (PyPI, not a dependency: skipped without it), on the run's batch
    (tokens_per_batch here; --peer failed at every n unless --batch was given)."""
    pytest.importorskip("linformer")
    from benchmarks.run import PeerResult, RunInfo
    from benchmarks.workers import PeerTask

    cfg = tiny_peers(
        ns=[64], train_ns=[], models=["linformer"], peer=True, peer_ns=[64], peer_k=8, tokens_per_batch=128
    )
    cfg.validate()
    times = run_in_fresh_process(PeerTask(cfg, 64, 8), timeout_s=120)["times"]
    assert sorted(times) == ["linformer (PyPI)", "linformer_hf (fast path)", "linformer_hf (plain path)"]
    assert all(len(t) == 3 and min(t) > 0 for t in times.values())
    table = peer_table(RunInfo(1.0, 1.0, peer=[PeerResult(64, 8, {name: min(t) for name, t in times.items()})]))
    assert [line.split(" | ")[2] for line in table.splitlines()[2:]] == list(times)
