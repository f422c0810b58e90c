"""Compiled and accelerator execution of both families: torch.compile(fullgraph=True) of a padded training step gives
eager's outputs, gradients and redraw schedule; on CUDA a training step makes no host-device sync."""

import copy

import pytest
import torch
from conftest import random_batch, randomize_projections, tiny_config

from linformer_hf import LinformerModel, PerformerConfig, PerformerModel


def build(family: str):
    """A tiny model of the family in training mode (no dropout, so eager and compiled runs draw nothing random), with
    no pooler: its parameters would get no gradient in eager mode, and zeros compiled."""
    if family == "linformer":
        model = LinformerModel(tiny_config(num_hidden_layers=2), add_pooling_layer=False)
        randomize_projections(model)
    else:
        # A redraw every 2nd training call: the 3 calls below count 1, redraw at 2, count 3.
        config = PerformerConfig(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=18,
            num_random_features=12,
            feature_redraw_interval=2,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        model = PerformerModel(config, add_pooling_layer=False)
    return model.train()


def padded_batch(device="cpu"):
    """Two rows of 16 positions, the second right-padded after 9 tokens."""
    ids = random_batch(2, 16)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    return ids.to(device), mask.to(device)


def training_step(model, ids, mask, run=None):
    """Forward (by `run`, e.g. the compiled model, else `model`) and backward of a loss over real positions; returns
    the output and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    output = (model if run is None else run)(ids, attention_mask=mask).last_hidden_state  # (batch, L, d)
    (output * mask[..., None]).square().mean().backward()
    return output.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def random_features(model):
    return [layer.attention.self.random_features.clone() for layer in model.encoder.layer]


@pytest.mark.parametrize("family", ["linformer", "performer"])
def test_fullgraph_compile_of_a_padded_training_step_equals_eager(family):
    """The `aot_eager` backend runs what `inductor` would compile (Dynamo's one graph with fullgraph=True, and
    AOTAutograd's forward and backward graphs) without generating kernels, which takes a minute on the CPU."""
    torch._dynamo.reset()
    eager = build(family)
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, fullgraph=True, backend="aot_eager")
    ids, mask = padded_batch()
    start = random_features(eager) if family == "performer" else None

    for call in range(3):
        # After the first call the graph is reused as is: the redraw schedule is data, not a guard to recompile on.
        with torch.compiler.set_stance("fail_on_recompile" if call else "default"):
            got, got_grads = training_step(compiled_model, ids, mask, run=compiled)
        expected, expected_grads = training_step(eager, ids, mask)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=f"call {call + 1}")
        assert got_grads.keys() == expected_grads.keys()
        for name, grad in expected_grads.items():
            torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-5, msg=f"call {call + 1}: {name}")
        if family == "performer":
            assert int(compiled_model.encoder.training_calls) == int(eager.encoder.training_calls) == call + 1
            for got_w, expected_w in zip(random_features(compiled_model), random_features(eager), strict=True):
                assert torch.equal(got_w, expected_w), f"call {call + 1}"
    if family == "performer":  # the schedule did redraw (at call 2), so the comparison above covers a redraw
        assert all(not torch.equal(a, b) for a, b in zip(random_features(eager), start, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("family", ["linformer", "performer"])
def test_a_cuda_training_step_makes_no_host_device_sync(family):
    model = build(family).cuda()
    ids, mask = padded_batch("cuda")
    training_step(model, ids, mask)  # the first Performer call reads the count buffer once (it was never counted)
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):  # Performer: calls 2 (a redraw) and 3
            training_step(model, ids, mask)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
