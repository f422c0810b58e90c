"""The long-document command (research/long_document.py) on tiny models: progress per layer, fp32 vs int8, and the
Linformer fast path running through quantised Linear modules."""

import pytest
import torch
from torch.ao.nn.quantized import dynamic as quantized_dynamic

from linformer_hf import LinformerConfig, LinformerModel
from linformer_hf.research import long_document


def tiny_config(**overrides) -> LinformerConfig:
    settings = dict(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
        max_sequence_length=64,
        projected_length=16,
        chunk_size_feed_forward=16,
    )
    settings.update(overrides)
    return LinformerConfig(**settings)


def test_progress_advances_once_per_layer_in_order_and_hooks_are_removed():
    model = long_document.build_model(tiny_config())
    input_ids = long_document.random_document(model.config)
    with torch.no_grad(), long_document.layer_progress(model, enabled=True) as finished:
        model(input_ids=input_ids)
        assert [index for index, _ in finished] == [0, 1, 2]
        times = [t for _, t in finished]
        assert times == sorted(times)
    with torch.no_grad():
        model(input_ids=input_ids)
    assert len(finished) == 3  # the hooks left with the bar
    assert all(not layer._forward_hooks for layer in model.encoder.layer)


def test_quantised_linformer_runs_its_fast_path_through_int8_linear_modules():
    config = tiny_config()
    assert config.compresses_input_first  # the default settings take the fast path
    model = long_document.build_model(config, seed=1)
    input_ids = long_document.random_document(config, seed=1)
    with torch.no_grad():
        fp32 = model(input_ids=input_ids).last_hidden_state
    quantised = long_document.quantize_int8(model)
    attention = quantised.encoder.layer[0].attention.self
    for linear in (attention.query, attention.key, attention.value, quantised.encoder.layer[0].intermediate.dense):
        assert isinstance(linear, quantized_dynamic.Linear)
    calls = []
    attention.key.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape))
    with torch.no_grad():
        int8 = quantised(input_ids=input_ids).last_hidden_state
    # The key map ran once, on the k compressed rows (the fast path), through the quantised module.
    assert calls == [torch.Size([1, config.projected_length, config.hidden_size])]
    assert not torch.allclose(int8, fp32, atol=1e-5)  # int8 arithmetic really ran
    whole, lowest = long_document.cosine(int8, fp32)
    assert whole > 0.99 and lowest > 0.95


def test_fast_path_with_padding_matches_the_plain_path_after_the_module_call_rewrite():
    # E 1 != 1 on padded rows: the bias correction (E 1 - 1) b must be right, not only the unpadded case.
    torch.manual_seed(0)
    model = LinformerModel(tiny_config(num_hidden_layers=1)).eval()
    attention = model.encoder.layer[0].attention.self
    hidden = torch.randn(2, 40, 32)
    mask = torch.ones(2, 40)
    mask[1, 25:] = 0
    e, f = attention.projections(None)
    with torch.no_grad():
        fast = attention.compress_keys_values(hidden, mask, e, f, use_fast_path=True)
        plain = attention.compress_keys_values(hidden, mask, e, f, use_fast_path=False)
    for a, b in zip(fast, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_one_command_runs_both_modes_and_summarises_against_the_targets(capsys):
    report = long_document.main(
        ["--mode", "both", "--layers", "2", "--n", "32", "--k", "8", "--chunk_size_feed_forward", "16", "--no_progress"]
    )
    assert [result.mode for result in report.results] == ["fp32", "int8"]
    for result in report.results:
        assert result.output.shape == (1, 32, 768)
        assert len(result.layer_seconds) == 2
        assert result.flops > 0 and result.peak_rss_bytes > 0
    assert report.reference_gflops > 0
    assert report.cosine_int8[0] > 0.99
    summary = capsys.readouterr().out
    assert "| fp32 |" in summary and "| int8 |" in summary and "cosine" in summary


def test_unknown_mode_is_refused_before_building():
    with pytest.raises(ValueError, match="modes must be"):
        long_document.run_long_document(tiny_config(), modes=("fp16",))
