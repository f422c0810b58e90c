"""Performer (FAVOR+): the config's checks, exact padding, causal attention without leaks, the measured
approximation error, the redraw schedule, save/load, remote code, half precision, checkpointing and Trainer."""

import copy
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from conftest import CHECKPOINTING_METHODS, enable_checkpointing, kept_for_backward, random_batch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoModel, Trainer, TrainingArguments

import linformer_hf
from experiments.approximation import (
    error_table,
    exact_attention,
    favor_relative_error,
    teacher_queries_keys,
)
from linformer_hf import (
    PerformerConfig,
    PerformerForCausalLM,
    PerformerForMaskedLM,
    PerformerForMultipleChoice,
    PerformerForSequenceClassification,
    PerformerModel,
)
from linformer_hf.models import modeling_performer
from linformer_hf.models.modeling_performer import draw_random_features, favor_attention

HEADS = {name: (getattr(transformers, name), cls) for name, cls in linformer_hf.PERFORMER_HEADS.items()}


def tiny_performer(**overrides) -> PerformerConfig:
    settings = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=66,
        num_random_features=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-5,
        causal_chunk_size=4,  # several chunks in every test input
    )
    settings.update(overrides)
    return PerformerConfig(**settings)


def config_for_head(model_class, **overrides):
    if model_class is PerformerForCausalLM:
        overrides.setdefault("is_decoder", True)
    return tiny_performer(**overrides)


def example_inputs(model_class, batch_size=2, seq_len=12):
    ids = random_batch(batch_size, seq_len)
    mask = torch.ones_like(ids)
    mask[-1, seq_len // 2 :] = 0
    if model_class is PerformerForMultipleChoice:  # (batch, choices, seq)
        return {"input_ids": ids[:, None].repeat(1, 3, 1), "attention_mask": mask[:, None].repeat(1, 3, 1)}
    return {"input_ids": ids, "attention_mask": mask}


def first_output(outputs):
    return outputs.logits if getattr(outputs, "logits", None) is not None else outputs[0]


def features_of(model):
    attentions = [m for m in model.modules() if isinstance(m, modeling_performer.PerformerSelfAttention)]
    return [m.random_features.clone() for m in attentions]


# --- the config ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad,field",
    [
        (dict(num_random_features=0), "num_random_features"),
        (dict(kernel="tanh"), "kernel"),
        (dict(orthogonal_row_norms="unit"), "orthogonal_row_norms"),
        (dict(feature_redraw_interval=0), "feature_redraw_interval"),
        (dict(kernel_epsilon=-1e-3), "kernel_epsilon"),
        (dict(causal_chunk_size=0), "causal_chunk_size"),
        (dict(feature_map_dtype="bf16"), "feature_map_dtype"),
        (dict(feature_map_dtype="float64"), "feature_map_dtype"),
        (dict(recompute_feature_maps="yes"), "recompute_feature_maps"),
        (dict(recompute_feature_maps=None), "recompute_feature_maps"),
        (dict(add_cross_attention=True), "add_cross_attention"),
    ],
)
def test_bad_settings_fail_at_construction_naming_the_field(bad, field):
    with pytest.raises(StrictDataclassError, match=field):
        tiny_performer(**bad)


def test_kernel_epsilon_defaults_to_the_kernel_and_survives_a_round_trip(tmp_path):
    assert tiny_performer().kernel_epsilon == 1e-6
    assert tiny_performer(kernel="relu").kernel_epsilon == 1e-3
    config = tiny_performer(kernel="relu", kernel_epsilon=1e-4, feature_redraw_interval=None)
    config.save_pretrained(tmp_path)
    loaded = PerformerConfig.from_pretrained(tmp_path)
    assert (loaded.kernel_epsilon, loaded.feature_redraw_interval, loaded.kernel) == (1e-4, None, "relu")


def test_causal_lm_needs_a_decoder_config():
    with pytest.raises(ValueError, match="is_decoder=True"):
        PerformerForCausalLM(tiny_performer())


# --- FAVOR+ itself ------------------------------------------------------------------------------------------------


def test_orthogonal_features_are_orthogonal_within_blocks_with_the_chosen_row_norms():
    w = draw_random_features(20, 8, orthogonal=True, row_norms="sqrt_d", generator=torch.Generator().manual_seed(0))
    assert w.shape == (20, 8)
    torch.testing.assert_close(w.norm(dim=1), torch.full((20,), 8**0.5))
    block = w[:8] / 8**0.5
    torch.testing.assert_close(block @ block.T, torch.eye(8), atol=1e-5, rtol=0)
    chi = draw_random_features(20, 8, orthogonal=True, row_norms="chi", generator=torch.Generator().manual_seed(0))
    assert chi.norm(dim=1).std() > 0.1  # Gaussian lengths, not all sqrt(d)


def test_favor_converges_to_exact_softmax_attention_as_m_grows():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 12, 8, generator=generator) * 0.7 for _ in range(3))
    mask = torch.ones(1, 12)
    exact = exact_attention(q, k, v, mask)
    errors = []
    for m in (64, 1 << 16):
        w = draw_random_features(m, 8, orthogonal=False, generator=generator)
        errors.append(float((favor_attention(q, k, v, mask, w, epsilon=0.0) - exact).norm() / exact.norm()))
    assert errors[1] < 0.02 < errors[0], errors


def test_the_measured_error_falls_as_m_grows_and_orthogonal_features_do_no_worse():
    # Logits q^T k / sqrt(d) of std 0.5. (At std 1 the error is still ~70% at m = 1024: the variance of positive
    # features grows as exp(||q + k||^2), which is what users of other implementations reported.)
    generator = torch.Generator().manual_seed(1)
    q, k = (torch.randn(2, 2, 24, 16, generator=generator) * 0.5 for _ in range(2))
    rows = error_table(q, k, ms=(16, 64, 256, 1024), kernels=("softmax",), seeds=6)
    for orthogonal in (True, False):
        errors = [r.mean for r in rows if r.orthogonal is orthogonal]
        assert errors == sorted(errors, reverse=True), (orthogonal, errors)
        assert errors[-1] < errors[0] / 2.5  # 64x the features: measured 6.5x (orthogonal), 3.3x (i.i.d.) less error
    orthogonal_mean = sum(r.mean for r in rows if r.orthogonal) / 4
    iid_mean = sum(r.mean for r in rows if not r.orthogonal) / 4
    assert orthogonal_mean <= iid_mean
    # The relu kernel is another attention, not an estimate of softmax: its error does not vanish with m.
    relu = error_table(q, k, ms=(1024,), kernels=("relu",), orthogonal=(True,), seeds=2)[0]
    assert relu.mean > 2 * rows[3].mean
    # Same seed, same figure: the measurement is reproducible.
    assert favor_relative_error(q, k, 64, seed=3) == favor_relative_error(q, k, 64, seed=3)


def test_causal_favor_at_position_i_is_bidirectional_favor_of_the_prefix():
    """The causal prefix sums (chunked, with a running key stabiliser) compute exactly what FAVOR+ over tokens
    0..i computes, for every i: nothing after i takes part, and chunk boundaries change nothing."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 11, 8, generator=generator) * 2 for _ in range(3))
    mask = torch.ones(2, 11)
    mask[1, :2] = 0  # left padding too
    w = draw_random_features(16, 8, generator=generator)
    for kernel in ("softmax", "relu"):
        causal = favor_attention(q, k, v, mask, w, kernel=kernel, causal=True, chunk_size=3)
        assert torch.isfinite(causal).all()
        for i in range(2, 11):
            prefix = favor_attention(
                q[..., : i + 1, :], k[..., : i + 1, :], v[..., : i + 1, :], mask[:, : i + 1], w, kernel=kernel
            )
            torch.testing.assert_close(causal[..., i, :], prefix[..., i, :], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
@pytest.mark.parametrize("causal", [False, True])
def test_padded_keys_take_no_part_in_favor_not_even_in_the_stabiliser(kernel, causal):
    """Padded keys aligned with a feature (whose log-features w^T k' - ||k'||^2 / 2 would set the key maximum) and a
    large epsilon (so that a key kept in the normaliser, or a stabiliser that moved, would show): the real rows equal
    FAVOR+ without them."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 10, 8, generator=generator) for _ in range(3))
    w = draw_random_features(16, 8, generator=generator)
    k[..., 6:, :] = w[0] * 8**0.25  # k' = k / d^(1/4) = w_0 maximises w_0^T k' - ||k'||^2 / 2
    mask = torch.ones(2, 10)
    mask[:, 6:] = 0
    padded = favor_attention(q, k, v, mask, w, kernel=kernel, epsilon=0.05, causal=causal, chunk_size=4)
    alone = favor_attention(
        q[..., :6, :],
        k[..., :6, :],
        v[..., :6, :],
        mask[:, :6],
        w,
        kernel=kernel,
        epsilon=0.05,
        causal=causal,
        chunk_size=4,
    )
    torch.testing.assert_close(padded[..., :6, :], alone, atol=1e-6, rtol=1e-5)


def test_causal_favor_never_materialises_an_l_by_l_or_l_by_m_by_d_tensor():
    """Forward and backward of causal FAVOR+ at L = 1024: the largest tensor any op creates is an (L x m) feature
    map, not (L x L) scores nor one (m x d) state per position."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class LargestTensor(TorchDispatchMode):
        largest = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            sizes = [t.numel() for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            self.largest = max([self.largest, *sizes])
            return out

    seq_len, m, d = 1024, 16, 8
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, seq_len, d, generator=generator).requires_grad_() for _ in range(3))
    w = draw_random_features(m, d, generator=generator)
    with LargestTensor() as recorder:
        favor_attention(q, k, v, torch.ones(1, seq_len), w, causal=True, chunk_size=32).sum().backward()
    assert q.grad is not None and torch.isfinite(q.grad).all()
    assert recorder.largest <= seq_len * max(m, d), recorder.largest


@pytest.mark.parametrize("causal", [False, True])
def test_fp16_autocast_key_sums_do_not_overflow(causal):
    """phi(K)^T V over many large values exceeds fp16's 65504; FAVOR+ keeps its sums in fp32 under autocast."""
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 1, 2048, 8, generator=generator) for _ in range(2))
    v = torch.full((1, 1, 2048, 8), 20000.0)
    mask = torch.ones(1, 2048)
    w = draw_random_features(16, 8, generator=generator)
    expected = favor_attention(q, k, v, mask, w, causal=causal, chunk_size=512)
    for dtype in (torch.float16, torch.bfloat16):
        with torch.autocast("cpu", dtype=dtype):
            got = favor_attention(
                q.to(dtype), k.to(dtype), v.to(dtype), mask, w.to(dtype), causal=causal, chunk_size=512
            )
        assert got.dtype == torch.float32 and torch.isfinite(got).all()
        # Inputs rounded to the half type: the output moves by that rounding only.
        torch.testing.assert_close(got, expected, rtol=0.02, atol=0.0)


# --- half-type feature maps (feature_map_dtype) -------------------------------------------------------------------

HALF_TYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# Error against fp32 FAVOR+ (same W), measured on random Q, K of logit std 0.5 and 1 (docs/results/
# favor-approximation.md, 2026-11-26): at most 0.020 (bf16) and 0.0024 (fp16); these bounds leave a margin.
HALF_ERROR_BOUND = {"bfloat16": 0.03, "float16": 0.005}


def relative_error(got, expected, rows):
    return float(((got - expected) * rows).norm() / (expected * rows).norm())


def seeded_half_case(seq_len=256, d=32, logit_std=0.5, m=64):
    generator = torch.Generator().manual_seed(7)
    q, k = (torch.randn(2, 2, seq_len, d, generator=generator) * logit_std**0.5 for _ in range(2))
    v = torch.randn(2, 2, seq_len, d, generator=generator)
    mask = torch.ones(2, seq_len)
    mask[1, seq_len * 2 // 3 :] = 0
    w = draw_random_features(m, d, generator=generator)
    return q, k, v, mask, w


def test_float32_feature_maps_are_the_default_and_an_old_config_without_the_field_loads_them(tmp_path):
    assert tiny_performer().feature_map_dtype == "float32"
    q, k, v, mask, w = seeded_half_case(seq_len=40)
    for causal in (False, True):
        default = favor_attention(q, k, v, mask, w, causal=causal, chunk_size=16)
        assert torch.equal(
            favor_attention(q, k, v, mask, w, causal=causal, chunk_size=16, feature_dtype=torch.float32), default
        )
    tiny_performer().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["feature_map_dtype"]  # a folder saved before the option existed
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert PerformerConfig.from_pretrained(tmp_path).feature_map_dtype == "float32"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", list(HALF_TYPES))
def test_half_feature_maps_stay_within_the_measured_error_of_fp32_favor(name, causal):
    """Error against fp32 FAVOR+ within the measured bound, and the error against exact softmax attention at most
    10% above fp32 FAVOR+'s; and the half type is really used (the output is not fp32 FAVOR+'s)."""
    q, k, v, mask, w = seeded_half_case()
    rows = mask[:, None, :, None]
    exact = exact_attention(q, k, v, mask, causal=causal)
    fp32 = favor_attention(q, k, v, mask, w, causal=causal, chunk_size=64)
    half = favor_attention(q, k, v, mask, w, causal=causal, chunk_size=64, feature_dtype=HALF_TYPES[name])
    assert half.dtype == torch.float32 and torch.isfinite(half).all()
    assert 1e-5 < relative_error(half, fp32, rows) < HALF_ERROR_BOUND[name]
    assert relative_error(half, exact, rows) <= 1.1 * relative_error(fp32, exact, rows)
    assert float(half[1, :, 200:].abs().max()) < float("inf")  # padded query rows stay finite


def test_half_feature_maps_match_the_measured_variant():
    """The model's bf16 path is the variant the record measured: projections and contractions in bf16, exp,
    stabilisers and the normaliser in fp32."""
    from experiments.favor_precision import favor_variant

    q, k, v, mask, w = seeded_half_case()
    for dtype in HALF_TYPES.values():
        got = favor_attention(q, k, v, mask, w, feature_dtype=dtype)
        measured = favor_variant(q, k, v, mask, w, dtype, ("proj", "contract"))
        torch.testing.assert_close(got, measured, rtol=0, atol=2e-3 * float(measured.abs().max()))


def test_fp16_contractions_do_not_overflow_with_large_values():
    """phi(K)^T V over 2048 keys of |v| = 20000 is far above fp16's 65504: V is scaled into range first."""
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 2, 2048, 8, generator=generator) for _ in range(2))
    v = torch.full((1, 2, 2048, 8), 20000.0)
    v[:, 1] = torch.randn(2048, 8, generator=generator) * 20000.0
    mask = torch.ones(1, 2048)
    w = draw_random_features(16, 8, generator=generator)
    expected = favor_attention(q, k, v, mask, w)
    got = favor_attention(q, k, v, mask, w, feature_dtype=torch.float16)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, expected, rtol=0.01, atol=0.01 * 20000)


@pytest.mark.parametrize("name", list(HALF_TYPES))
def test_half_feature_maps_give_finite_gradients_close_to_fp32s(name):
    q, k, v, mask, w = seeded_half_case(seq_len=64)
    mask[0] = 0  # a batch item with no real key at all
    weights = torch.linspace(-1, 1, 2 * 2 * 64 * 32).view(2, 2, 64, 32)
    grads = {}
    for dtype in (None, HALF_TYPES[name]):
        inputs = [t.clone().requires_grad_() for t in (q, k, v)]
        (favor_attention(*inputs, mask, w, feature_dtype=dtype) * weights).sum().backward()
        grads[dtype] = [t.grad for t in inputs]
    for got, expected in zip(grads[HALF_TYPES[name]], grads[None]):
        assert torch.isfinite(got).all()
        assert relative_error(got, expected, 1.0) < 5 * HALF_ERROR_BOUND[name]


@pytest.mark.parametrize("is_decoder", [False, True])
def test_bf16_feature_maps_survive_save_load_and_run_under_bf16_autocast(is_decoder, tmp_path):
    torch.manual_seed(0)
    model = PerformerModel(tiny_performer(is_decoder=is_decoder, feature_map_dtype="bfloat16")).eval()
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    expected = model(ids, attention_mask=mask).last_hidden_state
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["feature_map_dtype"] == "bfloat16"
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert loaded.config.feature_map_dtype == "bfloat16"
    torch.testing.assert_close(loaded(ids, attention_mask=mask).last_hidden_state, expected, rtol=0, atol=0)
    # The option is wired to the attention: the same weights in fp32 give other outputs.
    fp32 = PerformerModel(tiny_performer(is_decoder=is_decoder)).eval()
    fp32.load_state_dict(model.state_dict())
    reference = fp32(ids, attention_mask=mask).last_hidden_state
    assert not torch.equal(reference, expected)
    torch.testing.assert_close(expected, reference, rtol=0.05, atol=0.05)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(ids, attention_mask=mask).last_hidden_state
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), reference, rtol=0.05, atol=0.05)


# --- recomputed feature maps (recompute_feature_maps) -------------------------------------------------------------


def twin_with_recomputation(model):
    """The same model (weights, W, redraw count) built with `recompute_feature_maps=True`."""
    config = copy.deepcopy(model.config)
    config.recompute_feature_maps = True
    twin = type(model)(config).train(model.training)
    twin.load_state_dict(model.state_dict())
    return twin


@pytest.mark.parametrize("is_decoder", [False, True])
def test_a_layer_that_recomputes_keeps_what_a_roberta_layer_keeps(is_decoder):
    """fp32, no dropout, per layer: the layer input X (for the Q, K, V maps), Q, K, V, the attention output (for the
    output map), X' and the feed-forward's input after the first LayerNorm, the (L x d_ff) input and output of GELU,
    the input of the second LayerNorm and both LayerNorms' mean and 1 / std: 8 B L d + 2 B L d_ff + 4 B L elements;
    plus the padding mask (B L) and W (m d_h). Without recomputation the layer keeps at least phi(Q) and phi(K) more,
    (B, heads, L, m) each, the largest tensors here (m = 4 d_h)."""
    batch, length = 2, 24
    config = tiny_performer(num_random_features=32, is_decoder=is_decoder)  # d = 32, 4 heads, d_h = 8, d_ff = 37
    d, d_ff, m, heads = config.hidden_size, config.intermediate_size, 32, config.num_attention_heads
    bound = 4 * (8 * batch * length * d + 2 * batch * length * d_ff + 5 * batch * length + m * config.head_size)
    feature_map = batch * heads * length * m
    hidden = torch.randn(batch, length, d, requires_grad=True)
    mask = torch.ones(batch, length)
    mask[1, 15:] = 0
    kept_bytes = {}
    for recompute in (False, True):
        config.recompute_feature_maps = recompute
        layer = modeling_performer.PerformerLayer(config, 0).train()
        layer.attention.self.redraw_features(torch.Generator().manual_seed(0))
        kept = kept_for_backward(layer, layer, hidden, mask)
        kept_bytes[recompute] = sum(t.untyped_storage().nbytes() for t in kept)
        if recompute:
            assert max(t.numel() for t in kept) < feature_map
    assert kept_bytes[True] <= bound
    assert kept_bytes[False] >= bound + 2 * 4 * feature_map


@pytest.mark.parametrize(
    "settings,autocast",
    [
        (dict(), False),
        (dict(kernel="relu"), False),
        (dict(is_decoder=True), False),
        (dict(is_decoder=True, kernel="relu"), False),
        (dict(feature_map_dtype="float16"), False),
        (dict(feature_map_dtype="bfloat16"), True),
        (dict(is_decoder=True, feature_map_dtype="bfloat16"), True),
    ],
)
def test_recomputed_feature_maps_give_the_same_loss_and_gradients(settings, autocast):
    """Backward runs FAVOR+ again with the forward's settings, inputs, W and autocast state: the gradients are those
    of the kept feature maps (fp32 tolerances; under bf16 autocast the recomputation rounds as the forward did)."""
    config = tiny_performer(**settings)
    model = (PerformerForCausalLM if config.is_decoder else PerformerForMaskedLM)(config).train()
    recomputing = twin_with_recomputation(model)
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0

    def loss_and_grads(m):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = m(ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in m.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads(model)
    loss_recomputed, grads_recomputed = loss_and_grads(recomputing)
    torch.testing.assert_close(loss_recomputed, loss)
    assert grads_recomputed.keys() == grads.keys() == {n for n, p in model.named_parameters() if p.requires_grad}
    for name in grads:
        torch.testing.assert_close(grads_recomputed[name], grads[name], msg=name)


def test_a_redraw_before_the_backward_does_not_reach_the_recomputation():
    """Two training calls and then one backward (two views of a batch for a contrastive loss): the second call
    redraws W in place, and the first call's backward must recompute with the W of its own forward, as the kept
    feature maps would (checkpointing the buffer itself raises at backward: modified by an in-place operation)."""
    model = PerformerModel(tiny_performer(feature_redraw_interval=2)).train()  # the 2nd call redraws
    recomputing = twin_with_recomputation(model)
    ids = random_batch(2, 12)

    def grads_of_two_calls(m):
        first = m(ids).last_hidden_state
        before = features_of(m)
        second = m(ids).last_hidden_state
        assert not any(torch.equal(a, b) for a, b in zip(before, features_of(m)))  # redrawn in between
        (first.square().mean() + second.mean()).backward()
        return {n: p.grad for n, p in m.named_parameters() if p.grad is not None}

    grads, grads_recomputed = grads_of_two_calls(model), grads_of_two_calls(recomputing)
    assert grads_recomputed.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(grads_recomputed[name], grads[name], msg=name)


def test_recompute_feature_maps_is_off_by_default_survives_save_load_and_reaches_the_attention(tmp_path):
    assert tiny_performer().recompute_feature_maps is False
    model = PerformerModel(tiny_performer(num_random_features=32, recompute_feature_maps=True)).train()
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["recompute_feature_maps"] is True
    loaded = AutoModel.from_pretrained(tmp_path).train()
    assert loaded.config.recompute_feature_maps is True
    ids = random_batch(2, 12)
    # No (batch, heads, L, m) feature map is kept: the loaded model recomputes.
    feature_map = 2 * 4 * 12 * 32
    assert max(t.numel() for t in kept_for_backward(loaded, loaded, ids)) < feature_map
    loaded.config.recompute_feature_maps = False
    assert max(t.numel() for t in kept_for_backward(loaded, loaded, ids)) >= feature_map
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["recompute_feature_maps"]  # a folder saved before the option existed
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert PerformerConfig.from_pretrained(tmp_path).recompute_feature_maps is False


# --- the model ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_outputs_at_real_positions_do_not_depend_on_right_padding_in_any_layer(kernel):
    # A large epsilon, so that padded keys kept in the normaliser (as eps-sized features) would show.
    model = PerformerModel(tiny_performer(kernel=kernel, kernel_epsilon=0.01)).eval()
    ids = random_batch(2, 7)
    short = model(ids, output_hidden_states=True).hidden_states
    padded_ids = torch.cat([ids, torch.randint(3, 99, (2, 9))], dim=1)  # any tokens: the mask must hide them
    mask = torch.zeros_like(padded_ids)
    mask[:, :7] = 1
    padded = model(padded_ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(short) == model.config.num_hidden_layers + 1
    for layer, (a, b) in enumerate(zip(short, padded, strict=True)):
        torch.testing.assert_close(b[:, :7], a, atol=1e-5, rtol=1e-5, msg=f"layer {layer}")


@pytest.mark.parametrize("kernel", ["softmax", "relu"])
def test_a_decoder_never_sees_the_future(kernel):
    model = PerformerForCausalLM(tiny_performer(kernel=kernel, is_decoder=True)).eval()
    ids = random_batch(2, 13)
    changed = ids.clone()
    changed[:, 6:] = torch.randint(3, 99, (2, 7))
    a = model(ids, output_hidden_states=True)
    b = model(changed, output_hidden_states=True)
    for layer, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states, strict=True)):
        torch.testing.assert_close(y[:, :6], x[:, :6], atol=1e-5, rtol=1e-5, msg=f"layer {layer}")
    torch.testing.assert_close(b.logits[:, :6], a.logits[:, :6], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(b.logits[:, 6:], a.logits[:, 6:])  # ... and it does see the present
    # The bidirectional model with the same weights does see the future: the test can fail.
    encoder = PerformerModel(tiny_performer(kernel=kernel)).eval()
    assert not torch.allclose(encoder(changed).last_hidden_state[:, :6], encoder(ids).last_hidden_state[:, :6])


def test_causal_lm_loss_and_generation():
    model = PerformerForCausalLM(tiny_performer(is_decoder=True)).eval()
    ids = random_batch(2, 9)
    out = model(ids, labels=ids)
    shifted = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 99), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, shifted)
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight  # tied, as RoBERTa's
    generated = model.generate(ids[:1, :4], max_new_tokens=3, do_sample=False)  # no cache: re-reads the prefix
    manual = ids[:1, :4]
    for _ in range(3):
        manual = torch.cat([manual, model(manual).logits[:, -1:].argmax(-1)], dim=1)
    assert torch.equal(generated, manual)


def test_import_registers_every_auto_class():
    for auto_name, (auto_class, model_class) in HEADS.items():
        assert type(auto_class.from_config(config_for_head(model_class))) is model_class, auto_name


@pytest.mark.parametrize("auto_name", list(HEADS))
def test_save_and_load_gives_identical_outputs_for_every_head(auto_name, tmp_path):
    auto_class, model_class = HEADS[auto_name]
    model = model_class(config_for_head(model_class)).eval()
    features = features_of(model)
    assert len(features) == 3 and not torch.equal(features[0], features[1])  # one draw per layer
    inputs = example_inputs(model_class)
    expected = first_output(model(**inputs))
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["auto_map"] == modeling_performer.auto_map()
    for name in ("modeling_performer.py", "configuration_performer.py", "compat.py"):
        assert (tmp_path / name).exists(), name

    loaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is model_class
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    torch.testing.assert_close(first_output(loaded(**inputs)), expected, rtol=0, atol=1e-6)


def test_remote_code_loads_every_head_in_a_process_that_never_imports_the_package(tmp_path):
    references = {}
    for auto_name, (_, model_class) in HEADS.items():
        model = model_class(config_for_head(model_class, kernel="relu" if "Token" in auto_name else "softmax")).eval()
        model.save_pretrained(tmp_path / auto_name)
        inputs = example_inputs(model_class)
        references[auto_name] = (inputs, first_output(model(**inputs)).detach())
    torch.save(references, tmp_path / "references.pt")
    script = textwrap.dedent(
        f"""
        import sys, torch, transformers
        references = torch.load({str(tmp_path / "references.pt")!r})
        for auto_name, (inputs, expected) in references.items():
            auto_class = getattr(transformers, auto_name)
            model = auto_class.from_pretrained({str(tmp_path)!r} + "/" + auto_name, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            out = model(**inputs)
            got = out.logits if getattr(out, "logits", None) is not None else out[0]
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
            print("loaded", auto_name, type(model).__name__)
        assert not any(m.startswith("linformer_hf") for m in sys.modules), "the package was imported"
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("loaded") == len(HEADS)


def _train_calls(model, n, ids):
    model.train()
    for _ in range(n):
        model(ids)


def test_features_are_redrawn_only_in_training_on_schedule_and_the_schedule_survives_save_load(tmp_path):
    ids = random_batch(2, 8)
    model = PerformerModel(tiny_performer(feature_redraw_interval=3))
    start = features_of(model)
    _train_calls(model, 2, ids)
    model.eval()
    for _ in range(5):
        model(ids)  # eval calls neither redraw nor count
    assert int(model.encoder.training_calls) == 2
    assert all(torch.equal(a, b) for a, b in zip(features_of(model), start, strict=True))

    model.save_pretrained(tmp_path)
    resumed = PerformerModel.from_pretrained(tmp_path)
    assert int(resumed.encoder.training_calls) == 2

    _train_calls(model, 1, ids)  # call 3: redraw
    _train_calls(resumed, 1, ids)
    redrawn = features_of(model)
    assert all(not torch.equal(a, b) for a, b in zip(redrawn, start, strict=True))
    # The resumed run redraws on the same step, to the same features (seeded by the count, as on every process).
    assert all(torch.equal(a, b) for a, b in zip(features_of(resumed), redrawn, strict=True))
    _train_calls(model, 2, ids)  # calls 4, 5: no redraw
    assert all(torch.equal(a, b) for a, b in zip(features_of(model), redrawn, strict=True))


def test_the_host_copy_of_the_count_follows_every_write_to_the_buffer():
    """The schedule is decided from a host copy of `training_calls`; a count written into the buffer by anything else
    (a hand-set count, a state dict loaded in place, a replaced buffer) is what the next call counts on from."""
    ids = random_batch(2, 8)
    model = PerformerModel(tiny_performer(feature_redraw_interval=4))
    _train_calls(model, 1, ids)
    model.encoder.training_calls.fill_(2)  # in place: the next call is 3, no redraw
    start = features_of(model)
    _train_calls(model, 1, ids)
    assert int(model.encoder.training_calls) == 3
    assert all(torch.equal(a, b) for a, b in zip(features_of(model), start, strict=True))

    model.load_state_dict({**model.state_dict(), "encoder.training_calls": torch.tensor(7)})
    _train_calls(model, 1, ids)  # call 8: a redraw, seeded by the count
    assert int(model.encoder.training_calls) == 8
    assert all(not torch.equal(a, b) for a, b in zip(features_of(model), start, strict=True))

    model.encoder.training_calls = torch.tensor(10)  # a new tensor (as `.to(device)` makes)
    _train_calls(model, 1, ids)
    assert int(model.encoder.training_calls) == 11


def test_the_count_reads_the_device_buffer_only_after_an_outside_write(monkeypatch):
    """Reading the count buffer is a host-device sync on CUDA: only the first call and a call after an outside write
    may do it. torch 2.11 bumps the buffer's version after the custom op's own call (a version check inside the op
    then read the buffer at every call, seen on an H100); the op here is wrapped to do the same."""
    stale_at_entry = []
    op = modeling_performer.count_training_call_op

    def like_torch_2_11(host_count, training_calls, *args):
        stale_at_entry.append(int(host_count[modeling_performer.HOST_STALE]))
        op(host_count, training_calls, *args)
        training_calls.add_(0)  # a version bump, as the op's call in torch 2.11

    monkeypatch.setattr(modeling_performer, "count_training_call_op", like_torch_2_11)
    ids = random_batch(2, 8)
    model = PerformerModel(tiny_performer(feature_redraw_interval=2))
    _train_calls(model, 3, ids)
    model.encoder.training_calls.fill_(10)  # an outside write: read once
    _train_calls(model, 2, ids)
    assert stale_at_entry == [1, 0, 0, 1, 0]
    assert int(model.encoder.training_calls) == 12


@pytest.mark.parametrize(
    "settings", [dict(feature_redraw_interval=None), dict(feature_redraw_interval=1, freeze_features=True)]
)
def test_features_never_change_without_a_schedule_or_when_frozen(settings):
    model = PerformerModel(tiny_performer(**settings))
    start = features_of(model)
    _train_calls(model, 3, random_batch(2, 8))
    assert int(model.encoder.training_calls) == 3
    assert all(torch.equal(a, b) for a, b in zip(features_of(model), start, strict=True))


@pytest.mark.parametrize("recompute_feature_maps", [False, True])
@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("method", CHECKPOINTING_METHODS)
@pytest.mark.parametrize("is_decoder", [False, True])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(
    is_decoder, method, use_reentrant, recompute_feature_maps
):
    """With a redraw on every call: the checkpointed layers re-run in backward with the features of their forward,
    reentrant checkpointing (DeepSpeed's kind) included, and so does FAVOR+ recomputed within them."""
    config = tiny_performer(
        feature_redraw_interval=1, is_decoder=is_decoder, recompute_feature_maps=recompute_feature_maps
    )
    model = (PerformerForCausalLM if is_decoder else PerformerForMaskedLM)(config).train()
    checkpointed = copy.deepcopy(model)
    checkpointed_calls = enable_checkpointing(checkpointed, method, use_reentrant)
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0

    def loss_and_grads(m):
        loss = m(ids, attention_mask=mask, labels=ids).loss
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

    loss, grads = loss_and_grads(model)
    loss_ckpt, grads_ckpt = loss_and_grads(checkpointed)
    assert len(checkpointed_calls) == config.num_hidden_layers  # every layer ran checkpointed
    torch.testing.assert_close(loss_ckpt, loss)
    assert grads_ckpt.keys() == grads.keys() == {n for n, p in model.named_parameters() if p.requires_grad}
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], msg=name)


@pytest.mark.parametrize("recompute_feature_maps", [False, True])
@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("method", CHECKPOINTING_METHODS)
def test_checkpointed_layers_recompute_with_the_features_of_their_forward_after_a_redraw(
    method, use_reentrant, recompute_feature_maps
):
    """Two training calls, then one backward (two views of a batch for a contrastive loss): the second call redraws W
    in place, and the first call's checkpointed layers must re-run in backward with the W of their own forward."""
    config = tiny_performer(feature_redraw_interval=2, recompute_feature_maps=recompute_feature_maps)
    model = PerformerModel(config).train()  # the 2nd call redraws
    checkpointed = copy.deepcopy(model)
    checkpointed_calls = enable_checkpointing(checkpointed, method, use_reentrant)
    ids = random_batch(2, 12)

    def grads_of_two_calls(m):
        first = m(ids).last_hidden_state
        before = features_of(m)
        second = m(ids).last_hidden_state
        assert not any(torch.equal(a, b) for a, b in zip(before, features_of(m)))  # redrawn in between
        (first.square().mean() + second.mean()).backward()
        return {n: p.grad for n, p in m.named_parameters() if p.grad is not None}

    grads, grads_ckpt = grads_of_two_calls(model), grads_of_two_calls(checkpointed)
    assert len(checkpointed_calls) == 2 * config.num_hidden_layers
    assert grads_ckpt.keys() == grads.keys()
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], msg=name)


@pytest.mark.parametrize("is_decoder", [False, True])
def test_bf16_autocast_and_half_weights_stay_finite_and_close(is_decoder, tmp_path):
    model = PerformerModel(tiny_performer(is_decoder=is_decoder)).eval()
    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    expected = model(ids, attention_mask=mask).last_hidden_state
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(ids, attention_mask=mask).last_hidden_state
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), expected, rtol=0.05, atol=0.05)
    model.save_pretrained(tmp_path)
    half = AutoModel.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    got = half(ids, attention_mask=mask).last_hidden_state
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
    torch.testing.assert_close(got.float(), expected, rtol=0.1, atol=0.1)


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


@pytest.mark.parametrize("model_class", [PerformerForCausalLM, PerformerForSequenceClassification])
def test_trainer_runs_and_counts_every_training_call(model_class, tmp_path):
    ids = random_batch(8, 10)
    if model_class is PerformerForCausalLM:
        rows = [{"input_ids": ids[i], "labels": ids[i]} for i in range(8)]
    else:
        rows = [{"input_ids": ids[i], "labels": i % 2} for i in range(8)]
    model = model_class(config_for_head(model_class, num_labels=2, feature_redraw_interval=2))
    start = features_of(model)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        max_steps=3,
        learning_rate=1e-3,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
    )
    trainer = Trainer(model=model, args=args, train_dataset=_ListDataset(rows))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(loss == loss and loss < 10 for loss in losses)
    assert int(model.roberta.encoder.training_calls) == 3
    assert all(not torch.equal(a, b) for a, b in zip(features_of(model), start, strict=True))  # redrawn at call 2


def test_a_roberta_checkpoint_loads_with_only_the_features_missing_and_approximates_roberta(tmp_path):
    """Every RoBERTa weight carries over; the random features are drawn (not left empty), and with many of them the
    Performer computes nearly what the RoBERTa it came from computes (the paper's backward compatibility)."""
    from transformers import RobertaConfig, RobertaModel

    sizes = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=66,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    roberta = RobertaModel(RobertaConfig(**sizes), add_pooling_layer=False).eval()
    with torch.no_grad():  # attention logits of std ~0.5, not the near-uniform attention of a fresh init
        for name, param in roberta.named_parameters():
            if name.endswith(("query.weight", "key.weight")):
                param.normal_(0.0, 0.12)
    roberta.save_pretrained(tmp_path)
    performer = PerformerModel.from_pretrained(
        tmp_path, config=PerformerConfig(**sizes, num_random_features=8192), add_pooling_layer=False
    ).eval()
    for name, tensor in roberta.state_dict().items():
        assert torch.equal(performer.state_dict()[name], tensor), name
    extra = set(performer.state_dict()) - set(roberta.state_dict())
    assert extra == {"encoder.training_calls"} | {f"encoder.layer.{i}.attention.self.random_features" for i in (0, 1)}
    assert all(torch.isfinite(f).all() and f.std() > 0.5 for f in features_of(performer))

    ids = random_batch(2, 12)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    expected = roberta(ids, attention_mask=mask).last_hidden_state
    got = performer(ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[0], expected[0], atol=2e-3, rtol=0)
    torch.testing.assert_close(got[1, :8], expected[1, :8], atol=2e-3, rtol=0)


def test_teacher_queries_and_keys_are_what_each_layer_computes():
    from transformers import RobertaConfig, RobertaModel

    roberta = RobertaModel(
        RobertaConfig(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=66,
        )
    ).eval()
    ids = random_batch(2, 9)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    pairs = teacher_queries_keys(roberta, ids, mask)
    hidden = roberta(ids, attention_mask=mask, output_hidden_states=True).hidden_states
    assert len(pairs) == 2
    for layer, (q, k) in enumerate(pairs):
        attention = roberta.encoder.layer[layer].attention.self
        assert q.shape == k.shape == (2, 4, 9, 8)
        torch.testing.assert_close(q, attention.query(hidden[layer]).view(2, 9, 4, 8).transpose(1, 2))
        torch.testing.assert_close(k, attention.key(hidden[layer]).view(2, 9, 4, 8).transpose(1, 2))


def test_measure_favor_error_script_reports_every_layer_and_setting(tmp_path):
    """The measurement on a saved encoder and its tokenizer, end to end through the script."""
    from tiny_roberta import WIKITEXT, build_tokenizer, tiny_roberta_config
    from transformers import RobertaModel

    from experiments import measure_favor_error

    tokenizer = build_tokenizer(str(tmp_path / "model"))
    tokenizer.save_pretrained(tmp_path / "model")
    RobertaModel(tiny_roberta_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "model")
    code = measure_favor_error.main(
        [
            str(tmp_path / "model"),
            WIKITEXT,
            str(tmp_path / "error.json"),
            "--seq_len",
            "16",
            "--max_inputs",
            "3",
            "--ms",
            "8",
            "64",
            "--seeds",
            "2",
        ]
    )
    assert code == 0
    result = json.loads((tmp_path / "error.json").read_text())
    assert result["inputs"] == 3 and result["seq_len"] == 16
    assert [layer["layer"] for layer in result["layers"]] == [0, 1]
    assert all(layer["logit_std"] > 0 for layer in result["layers"])
    settings = {(r["kernel"], r["orthogonal"], r["num_random_features"]) for r in result["mean_over_layers"]}
    assert settings == {(k, o, m) for k in ("softmax", "relu") for o in (True, False) for m in (8, 64)}
    assert all(0 <= r["mean"] < 10 for r in result["mean_over_layers"])


def test_saved_activations_script_measures_every_model(tmp_path, capsys):
    from experiments import saved_activations

    out = tmp_path / "saved.json"
    argv = [str(out), "--length", "24", "--hidden_size", "32", "--heads", "4", "--intermediate_size", "37"]
    assert saved_activations.main([*argv, "--num_random_features", "32"]) == 0
    rows = {r["model"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(saved_activations.MODELS)
    kept = {model: row["bytes"] for model, row in rows.items()}
    # fp32 weights under bf16 autocast: the recomputing Performer keeps what RoBERTa-SDPA keeps and at most the
    # padding mask and W (fp32) more; without recomputation, at least its two (batch, heads, L, m) fp32 exp results
    for model in ("performer", "performer-bf16"):
        assert 0 <= kept[model + "-recompute"] - kept["roberta-sdpa"] <= 4 * (24 + 32 * 8)
        assert kept[model] - kept[model + "-recompute"] >= 2 * 4 * (4 * 24 * 32)
    assert "| roberta-sdpa |" in capsys.readouterr().out


def test_favor_precision_script_measures_every_variant_and_counts_ops(tmp_path, capsys):
    from experiments import favor_precision

    out = tmp_path / "precision.json"
    argv = [
        "random",
        str(out),
        "--lengths",
        "32",
        "--ms",
        "16",
        "--logit_stds",
        "0.5",
        "--seeds",
        "1",
        "--head_size",
        "8",
    ]
    assert favor_precision.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["variant"], r["dtype"]) for r in rows} == {("fp32", "-")} | {
        (variant, dtype) for variant in favor_precision.VARIANTS for dtype in ("bfloat16", "float16")
    }
    assert all(0 < r["vs_fp32"] < 0.1 for r in rows if r["variant"] != "fp32")
    assert "| 0.5 | 32 | 16 |" in capsys.readouterr().out
    ops = favor_precision.count_ops()
    assert ops["bmm"] == 3 and ops["exp"] == 2  # phi(K)^T V, phi(Q) (.), the normaliser; one exp per side


def test_favor_precision_and_saved_activations_check_arguments_and_output_before_measuring(
    tmp_path, capsys, monkeypatch
):
    """Bad values and an unwritable or earlier OUTPUT are refused before the measurement (which used to end in a
    traceback after it, or overwrite the earlier file); a missing folder is made and the JSON written whole."""
    from experiments import favor_precision, saved_activations

    measured = []
    monkeypatch.setattr(favor_precision, "measure", lambda *args, **kwargs: measured.append(1) or [])
    monkeypatch.setattr(saved_activations, "saved_tensors", lambda *args: measured.append(1) or [])
    earlier = tmp_path / "earlier.json"
    earlier.write_text("an earlier result")
    small = ["--lengths", "32", "--ms", "16", "--logit_stds", "0.5", "--seeds", "1", "--head_size", "8"]
    for argv, message in [
        (["random", *small], "random writes its rows to OUTPUT: give the JSON file to write"),
        (["random", str(earlier), *small], "exists (an earlier run's result)"),
        (["encoder", str(tmp_path / "e.json")], "give --model DIR and --text FILE"),
        (["ops", str(tmp_path / "ops.json")], "ops prints the op counts and writes no file"),
    ]:
        assert favor_precision.main(argv) == 2
        assert message in capsys.readouterr().err
    for flag, value in (("--ms", "0"), ("--lengths", "-5"), ("--seeds", "0")):
        with pytest.raises(SystemExit):
            favor_precision.main(["random", str(tmp_path / "p.json"), flag, value])
        assert f"argument {flag}: must be >= 1" in capsys.readouterr().err
    shape = ["--length", "24", "--hidden_size", "32", "--heads", "4", "--models", "roberta-sdpa"]
    assert saved_activations.main([str(earlier), *shape]) == 2
    assert "exists (an earlier run's result)" in capsys.readouterr().err
    assert saved_activations.main([str(tmp_path / "s.json"), *shape, "--heads", "5"]) == 2
    assert "--hidden_size 32 is not a multiple of --heads 5" in capsys.readouterr().err
    assert (
        measured == []
        and earlier.read_text() == "an earlier result"
        and sorted(os.listdir(tmp_path)) == ["earlier.json"]
    )
    # measured for real: a folder that does not exist yet is made; --overwrite replaces the earlier file
    monkeypatch.undo()
    assert favor_precision.main(["random", str(tmp_path / "new" / "p.json"), *small]) == 0
    assert {r["variant"] for r in json.loads((tmp_path / "new" / "p.json").read_text())["rows"]} >= {"fp32"}
    assert saved_activations.main([str(earlier), *shape, "--overwrite"]) == 0
    assert json.loads(earlier.read_text())["rows"][0]["model"] == "roberta-sdpa"


def test_a_causal_lm_from_an_encoders_folder_is_refused_with_the_fix_and_the_fix_loads_it(tmp_path):
    """A masked LM's folder under the causal-LM class: the error names the keyword that makes it load, and it does."""
    torch.manual_seed(0)
    PerformerForMaskedLM(tiny_performer()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=r"from_pretrained\(path, is_decoder=True\)"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, is_decoder=True)
    assert isinstance(model, PerformerForCausalLM) and model.config.is_decoder


@pytest.mark.parametrize("is_decoder", [False, True])
def test_left_padding_of_any_id_or_as_embeddings_leaves_the_real_tokens_outputs_alone(is_decoder):
    """Positions count the tokens the mask says are real. Before, they counted the ids that were not pad_token_id
    (RoBERTa's rule): left padding with another id (</s>, as decoders often pad) or passed as inputs_embeds moved every
    real token onto other positions, and changed their outputs by about 2.7, without a word."""
    torch.manual_seed(0)
    config = tiny_performer(is_decoder=is_decoder)
    model = PerformerModel(config).eval()
    ids = random_batch(1, 10)
    mask = torch.cat([torch.zeros(1, 4), torch.ones(1, 10)], 1).long()
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        for pad_id in (config.pad_token_id, config.eos_token_id):
            padded = torch.cat([torch.full((1, 4), pad_id), ids], 1)
            out = model(padded, attention_mask=mask).last_hidden_state[:, 4:]
            torch.testing.assert_close(out, alone, atol=1e-5, rtol=0, msg=f"padded with id {pad_id}")
            embedded = model(inputs_embeds=model.embeddings.word_embeddings(padded), attention_mask=mask)
            torch.testing.assert_close(embedded.last_hidden_state[:, 4:], alone, atol=1e-5, rtol=0)


def test_settings_that_cannot_work_are_refused_however_they_reach_the_model(tmp_path):
    """A from_pretrained override is checked as the constructor checks it (before: torch.cat's or range()'s error at
    the first forward); an attention kernel is refused with the reason (before: transformers' "not supported yet");
    a position table that holds no token is refused (before: "max_length=0" at the forward)."""
    PerformerModel(tiny_performer()).save_pretrained(tmp_path)
    with pytest.raises(StrictDataclassError, match="`num_random_features` must be a positive integer, got 0"):
        AutoModel.from_pretrained(tmp_path, num_random_features=0)
    with pytest.raises(StrictDataclassError, match="`causal_chunk_size` must be a positive integer"):
        AutoModel.from_pretrained(tmp_path, is_decoder=True, causal_chunk_size=0)
    with pytest.raises(ValueError, match="Performer cannot run attn_implementation='sdpa': FAVOR\\+ forms no"):
        AutoModel.from_pretrained(tmp_path, attn_implementation="sdpa")
    with pytest.raises(StrictDataclassError, match="`max_position_embeddings`=2 holds no token"):
        tiny_performer(max_position_embeddings=2)
    assert AutoModel.from_pretrained(tmp_path, attn_implementation="eager").config._attn_implementation == "eager"


def test_output_attentions_says_that_a_performer_has_none():
    """Before: `attentions` came back None without a word (RoBERTa with SDPA warns); now one warning says why, the
    outputs are unchanged, and a call without it says nothing."""
    from transformers.testing_utils import CaptureLogger

    model = PerformerModel(tiny_performer()).eval()
    ids = torch.randint(0, 99, (2, 8))
    modeling_performer.logger.warning_once.cache_clear()
    with CaptureLogger(modeling_performer.logger) as quiet:
        plain = model(ids)
    with CaptureLogger(modeling_performer.logger) as told:
        asked = model(ids, output_attentions=True)
    assert quiet.out == "" and "a Performer forms no (L x L) attention matrix" in told.out
    assert asked.attentions is None and torch.equal(asked.last_hidden_state, plain.last_hidden_state)
