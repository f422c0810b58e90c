"""Issue 20's realistic load in the efficiency benchmark, on CPU with tiny models: ModernBERT as a peer (its FLOPs,
its rows), a fixed number of tokens per batch, padded batches counted in real tokens, fp16 autocast with loss scaling
(the V100 recipe), the FLOP ceilings of the issue's targets, the GPU presets. No timing assertions."""

import dataclasses

import pytest
import torch
from test_benchmarking import TINY, counted_flops

from benchmarks import PRESETS, BenchmarkConfig, BenchmarkRow, Mode, Status, forward_flops, model_config, run_benchmark
from benchmarks.costs import _modernbert_keys_per_layer
from benchmarks.models import MODELS, build_model, model_inputs
from benchmarks.report import ratio_tables, report_markdown, targets_table
from benchmarks.workers import PAD_ID, _autocast, _make_inputs, _optimizer, _scaler, _step, padded_lengths

# Three layers: global, local, local (ModernBERT's pattern); its window of 128 is local at n = 256.
TINY_MODERNBERT = dict(TINY, layers=3)


@pytest.mark.parametrize("seq_len", [256, 100])
def test_modernbert_flop_count_matches_torch_flop_counter(seq_len):
    config = model_config("modernbert-sdpa", 256, None, BenchmarkConfig(**TINY_MODERNBERT))
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"]
    # SDPA's local layers compute the full product under a window mask: counted as full attention
    assert counted_flops(config, seq_len, batch=2) == forward_flops(config, seq_len, batch=2)
    # as released whatever the run's shape
    released = model_config("modernbert-base-sdpa", 256, None, BenchmarkConfig(**TINY_MODERNBERT))
    shape = (released.num_hidden_layers, released.hidden_size, released.num_attention_heads, released.intermediate_size)
    assert shape == (22, 768, 12, 1152) and released.local_attention == 128


def test_flash_attention_counts_only_the_window():
    config = model_config("modernbert-fa2", 256, None, BenchmarkConfig(**TINY_MODERNBERT))
    half = config.sliding_window  # 64 positions each side, as transformers passes FlashAttention-2

    def pairs(L):  # brute force: query i sees keys within `half` of it
        return sum(min(L - 1, i + half) - max(0, i - half) + 1 for i in range(L))

    for L in (66, 100, 129, 300, 1000):
        assert _modernbert_keys_per_layer(config, L, 1) == pairs(L), L
        assert _modernbert_keys_per_layer(config, L, 0) == L * L  # the global layer
    assert _modernbert_keys_per_layer(config, 65, 1) == 65 * 65  # up to sliding_window + 1 keys: no window passed


# The project's stated forward-FLOP ceilings of a 12-layer base Linformer (k = 256) over 12-layer RoBERTa, and the
# cost model's own for what the Linformer runs.
STATED = {512: 1.0, 4096: 1.7, 8192: 2.5, 16384: 4.1}
FAST_PATH = {512: 1.08, 4096: 1.98, 8192: 2.92, 16384: 4.81}


def test_flop_ceilings_of_the_targets():
    """The stated ceilings are those of the plain path (K and V maps on all n rows, then E K and F V: the paper's
    form, sharing='none' here); the Linformer of this package compresses X first (headwise sharing: E X, then the K
    and V maps on k rows, checked against torch's counter above), which saves 2 (n - k) d^2 a layer: its ceilings
    are higher. Against ModernBERT the stated 2.3x (as released) and 1.2x (12 layers) at n = 8192 count its local
    layers as their window, which is what FlashAttention-2 computes."""
    cfg = BenchmarkConfig(layers=12)
    plain = dataclasses.replace(cfg, sharing="none")
    for n, stated in STATED.items():

        def flops(model, k=None, run=cfg, n=n):
            return forward_flops(model_config(model, n, k, run), n)

        assert not model_config("linformer", n, 256, plain).compresses_input_first
        assert flops("roberta-sdpa") / flops("linformer", 256, plain) == pytest.approx(stated, abs=0.1), n
        assert flops("roberta-sdpa") / flops("linformer", 256) == pytest.approx(FAST_PATH[n], abs=0.01), n
    linformer_plain = forward_flops(model_config("linformer", 8192, 256, plain), 8192)
    assert forward_flops(model_config("modernbert-base-fa2", 8192, None, cfg), 8192) / linformer_plain == (
        pytest.approx(2.3, abs=0.1)
    )
    assert forward_flops(model_config("modernbert-fa2", 8192, None, cfg), 8192) / linformer_plain == (
        pytest.approx(1.2, abs=0.1)
    )


@pytest.mark.parametrize("batch", [1, 2, 3, 8, 64])
def test_padded_lengths_give_the_padding_fraction_for_any_batch(batch):
    n = 4096
    lengths = padded_lengths(batch, n, 0.25)
    assert len(lengths) == batch and all(n // 2 <= length <= n for length in lengths)
    assert 1 - sum(lengths) / (batch * n) == pytest.approx(0.25, abs=1e-3)
    assert padded_lengths(batch, n, 0.0) == [n] * batch
    if batch > 2:
        assert len(set(lengths)) == batch  # spread, not one length


def test_padded_batch_is_the_same_for_every_model():
    cfg = BenchmarkConfig(**TINY, tokens_per_batch=512, padding_fraction=0.25)
    ids, mask = _make_inputs(cfg, 64)
    assert ids.shape == mask.shape == (8, 64)
    lengths = mask.sum(1).tolist()
    assert sorted(lengths) == sorted(padded_lengths(8, 64, 0.25))
    for row, length in zip(ids, lengths, strict=True):  # padding at the end, RoBERTa's pad id, the rest real tokens
        assert (row[length:] == PAD_ID).all() and (row[:length] > PAD_ID).all()
    again = _make_inputs(cfg, 64)
    assert torch.equal(again[0], ids) and torch.equal(again[1], mask)


def test_fp16_autocast_training_step_scales_the_loss():
    # The V100 recipe (fp16 autocast, GradScaler, fused AdamW) on CPU: validate() refuses fp16 there, the step
    # itself does not need CUDA.
    cfg = BenchmarkConfig(**TINY, dtype="fp16", autocast=True)
    net = build_model(model_config("linformer", 32, 8, cfg)).train()
    assert _scaler(cfg, Mode.INFERENCE) is None and _scaler(dataclasses.replace(cfg, dtype="bf16"), Mode.TRAIN) is None
    scaler, optimizer = _scaler(cfg, Mode.TRAIN), _optimizer(net, Mode.TRAIN)
    before = [p.detach().clone() for p in net.parameters()]
    ids, mask = _make_inputs(cfg, 32, batch=2)
    dtypes = []
    net.pooler.dense.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    _step(net, model_inputs("linformer", ids, mask), Mode.TRAIN, optimizer, _autocast(cfg), scaler)
    assert dtypes == [torch.float16]  # the products ran under fp16 autocast, the weights stayed fp32
    assert all(p.dtype == torch.float32 for p in net.parameters())
    assert scaler.get_scale() == 65536.0  # finite grads at the initial scale: the step was taken, not skipped
    moved = [not torch.equal(b, p) for b, p in zip(before, net.parameters(), strict=True)]
    assert sum(moved) > len(moved) // 2 and all(p.grad is None for p in net.parameters())


def test_modernbert_runs_through_the_benchmark_with_padding_and_fixed_tokens():
    """The `peers` preset's ModernBERT on a tiny shape: inference and a training step (with memory) on a padded batch
    of a fixed number of tokens, beside RoBERTa-SDPA and the Linformer; FlashAttention-2 skipped with its reason."""
    models = ["roberta-sdpa", "linformer", "modernbert-sdpa", "modernbert-fa2"]
    assert "modernbert-sdpa" in PRESETS["peers"]["models"]
    cfg = BenchmarkConfig(
        **TINY_MODERNBERT, ns=[256], ks=[32], train_ns=[256], models=models, tokens_per_batch=512,
        padding_fraction=0.25, train_memory=True, reps=1, warmup=1, threads=1, timeout_s=120,
    )  # fmt: skip
    cfg.validate()
    rows, info = run_benchmark(cfg, log=lambda message: None)
    by_key = {(r.mode, r.model): r for r in rows}
    assert len(rows) == len(by_key) == 2 * len(models)
    for mode in (Mode.INFERENCE, Mode.TRAIN):
        skipped = by_key[(mode, "modernbert-fa2")]
        assert skipped.status == Status.SKIPPED and skipped.reason == "flash_attention_2 runs on CUDA only"
        for model in ("roberta-sdpa", "linformer", "modernbert-sdpa"):
            row = by_key[(mode, model)]
            assert row.status == Status.OK, (mode, model, row.reason)
            assert (row.batch, row.padding_fraction) == (2, 0.25)
            assert row.tokens_per_s == pytest.approx(512 / row.time_s, rel=1e-3)
            assert row.real_tokens_per_s == pytest.approx(0.75 * row.tokens_per_s, rel=1e-3)
            assert row.gflop > 0 and row.flop_source == "cost model"
            assert row.activation_mb is not None and row.peak_mb > 0 and row.memory_method in ("vmhwm", "ru_maxrss")
            assert row.kernels == "aten::_scaled_dot_product_flash_attention_for_cpu"  # SDPA's fused CPU kernel
    modernbert = by_key[(Mode.INFERENCE, "modernbert-sdpa")]
    assert (modernbert.layers, modernbert.intermediate_size) == (3, 48)  # the run's depth, 1.5 d GeGLU
    expected = forward_flops(model_config("modernbert-sdpa", 256, None, cfg), 256, batch=2)
    assert modernbert.gflop == pytest.approx(expected / 1e9, rel=1e-3)
    assert by_key[(Mode.TRAIN, "modernbert-sdpa")].gflop == pytest.approx(3 * expected / 1e9, rel=1e-3)
    # The ratio tables set each speed-up beside its FLOP ratio, against RoBERTa-SDPA and ModernBERT alike.
    tables = ratio_tables(rows, cfg)
    for baseline in ("roberta-sdpa", "modernbert-sdpa"):
        assert f"Training step (forward + backward + AdamW) speed-up of linformer over {baseline}" in tables
    flop_ratio = modernbert.gflop / by_key[(Mode.INFERENCE, "linformer")].gflop
    assert f"(FLOP {flop_ratio:.2f}x)" in tables
    markdown = report_markdown(rows, info, cfg, "test", "test machine")
    assert "batch 512 / n, 25% of the positions padding" in markdown


def test_gpu_presets_are_the_issues_realistic_load():
    for name, padding in (("gpu-realistic", 0.0), ("gpu-realistic-padded", 0.25)):
        cfg = BenchmarkConfig(**PRESETS[name])
        cfg.validate()  # every point's config builds; nothing touches CUDA
        assert (cfg.layers, cfg.hidden_size, cfg.heads, cfg.intermediate_size) == (12, 768, 12, 3072)
        assert cfg.ns == cfg.train_ns == [512, 1024, 2048, 4096, 8192, 16384]
        assert [cfg.batch_at(n) * n for n in cfg.ns] == [32768] * 6
        assert (cfg.dtype, cfg.autocast, cfg.padding_fraction, cfg.train_memory) == ("bf16", True, padding, True)
        assert cfg.ks == [128, 256] and cfg.num_random_features == 256
        assert {"roberta-sdpa", "roberta-eager", "modernbert-sdpa", "modernbert-base-sdpa", "modernbert-fa2",
                "modernbert-base-fa2", "longformer", "bigbird"} <= set(cfg.models)  # fmt: skip
        dataclasses.replace(cfg, dtype="fp16").validate()  # a V100's run
    assert MODELS["modernbert-fa2"].unavailable(BenchmarkConfig(**TINY)) == "flash_attention_2 runs on CUDA only"


def test_targets_table_sets_each_measured_ratio_beside_its_ceiling():
    cfg = BenchmarkConfig(**PRESETS["gpu-realistic"])
    rows = [
        BenchmarkRow(Mode.TRAIN, "roberta-sdpa", 4096, None, time_s=3.0, gflop=90.0),
        BenchmarkRow(Mode.TRAIN, "linformer", 4096, 256, time_s=2.0, gflop=45.0),
        BenchmarkRow(Mode.TRAIN, "linformer", 4096, 128, time_s=1.5, gflop=40.0),
        BenchmarkRow(Mode.INFERENCE, "modernbert-base-fa2", 8192, None, status=Status.SKIPPED, reason="no flash_attn"),
        BenchmarkRow(Mode.INFERENCE, "linformer", 8192, 256, time_s=1.0, gflop=10.0),
    ]
    table = targets_table(rows, cfg).splitlines()
    assert "| train | linformer k=256 | roberta-sdpa | 4096 | >= 1.6x | 2.00x | 1.50x | no |" in table
    assert "| train | linformer k=128 | roberta-sdpa | 4096 | >= 1.6x | 2.25x | 2.00x | yes |" in table
    assert (
        "| inference | linformer k=256 | modernbert-base-fa2 | 8192 | >= 1.5x | n/a | baseline skipped | - |" in table
    )
    assert len(table) == 2 + 3  # header and the three targets the rows hold
    assert targets_table(rows[:1], cfg) == ""


def test_a_cuda_preset_without_cuda_is_one_error_line_before_any_work(tmp_path, monkeypatch, capsys):
    from benchmarks.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--preset", "gpu-realistic", "--output_dir", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --device cuda, but this torch") and error.count("\n") == 1
    assert not (tmp_path / "run").exists()


def test_attention_ops_name_the_kernel_that_ran():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchmarks.workers import attention_ops, prepare_step

    cfg = BenchmarkConfig(**TINY, batch=2, padding_fraction=0.25)
    sdpa, eager = (prepare_step(cfg, model, 64, None, Mode.TRAIN) for model in ("roberta-sdpa", "roberta-eager"))
    assert attention_ops(sdpa.run) == "aten::_scaled_dot_product_flash_attention_for_cpu"  # not the backward's
    assert attention_ops(eager.run) is None
    with sdpa_kernel(SDPBackend.MATH):  # SDPA's fallback: no fused kernel, said as none
        assert attention_ops(sdpa.run) is None
