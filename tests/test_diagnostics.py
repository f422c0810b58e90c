"""The short-input check: attention output RMS by input length."""

import pytest
import torch
from conftest import random_batch, randomize_projections, tiny_config
from transformers import RobertaConfig, RobertaModel

from experiments.diagnostics import attention_output_rms
from linformer_hf import LinformerModel


def test_rms_is_that_of_the_attention_output_and_scales_with_f():
    model = LinformerModel(tiny_config(sharing="headwise")).eval()
    randomize_projections(model)
    ids = random_batch(3, 16)
    ids[:, 0] = model.config.bos_token_id
    before = attention_output_rms(model, ids, [6, 16])

    # Recomputed by hand for layer 0 at L = 16 (the hook must see the attention output, not the layer output).
    inputs = ids.clone()
    inputs[:, -1] = model.config.eos_token_id
    with torch.no_grad():
        hidden = model.embeddings(input_ids=inputs)
        out, _ = model.encoder.layer[0].attention.self(hidden, torch.ones(3, 16))
    assert before[16][0] == pytest.approx(out.pow(2).mean().sqrt().item(), rel=1e-5)

    # Attention output is P (F V): doubling F in layer 0 doubles it there.
    with torch.no_grad():
        model.encoder.layer[0].attention.self.value_projection.weight.mul_(2.0)
    after = attention_output_rms(model, ids, [6, 16])
    assert after[6][0] == pytest.approx(2 * before[6][0], rel=1e-5)
    assert after[16][0] == pytest.approx(2 * before[16][0], rel=1e-5)


def test_works_for_roberta_and_restores_training_mode():
    model = RobertaModel(
        RobertaConfig(
            vocab_size=99,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=37,
            max_position_embeddings=40,
        )
    ).train()
    ids = random_batch(2, 20)
    rms = attention_output_rms(model, ids, [4, 20], layers=[1])
    assert set(rms) == {4, 20} and all(len(v) == 1 and v[0] > 0 for v in rms.values())
    assert model.training
    with pytest.raises(ValueError, match="fewer than the longest length"):
        attention_output_rms(model, ids, [32])
