"""Warm start from RoBERTa: exact equivalence at k = n, every head, position extension, honest reporting."""

import json
import os
import sys

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from tiny_roberta import build_tokenizer, randomize_all, tiny_roberta_config
from torch import nn

import linformer_hf
from linformer_hf.conversion import (
    ARCHITECTURE_MAP,
    convert_checkpoint,
    convert_model,
    extend_position_embeddings,
    neighbour_average_projection,
)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import convert_roberta_to_linformer  # noqa: E402

OUTPUT_KEY = {"RobertaModel": "last_hidden_state"}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_tokenizer(str(tmp_path_factory.mktemp("tokenizer")))


def save_roberta(architecture, directory, tokenizer=None, seed=0, **config_overrides):
    config_overrides.setdefault("num_labels", 3)
    model = getattr(transformers, architecture)(tiny_roberta_config(**config_overrides)).eval()
    randomize_all(model, seed)
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return model


def padded_batch(vocab_size=300, length=16, seed=1):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (3, length), generator=generator)
    mask = torch.ones_like(ids)
    for row, real in [(1, 11), (2, 5)]:
        ids[row, real:] = 1  # RoBERTa's pad id
        mask[row, real:] = 0
    return ids, mask


@pytest.mark.parametrize(
    "architecture", ["RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification"]
)
@pytest.mark.parametrize("sharing,projection,n", [
    ("headwise", "linear", 16),   # same n as RoBERTa
    ("none", "linear", 40),       # n > RoBERTa's positions: the table is extended
    ("layerwise", "conv", 16),
])
def test_k_equal_n_reproduces_roberta_exactly(tmp_path, tokenizer, architecture, sharing, projection, n):
    roberta = save_roberta(architecture, tmp_path / "roberta", tokenizer)
    report = convert_checkpoint(str(tmp_path / "roberta"), str(tmp_path / "linformer"), max_sequence_length=n,
                                projected_length=n, sharing=sharing, projection=projection)
    assert report.problems() == []
    linformer_class = getattr(linformer_hf, ARCHITECTURE_MAP[architecture])
    linformer = linformer_class.from_pretrained(str(tmp_path / "linformer")).eval()
    assert type(linformer) is linformer_class

    ids, mask = padded_batch()
    key = OUTPUT_KEY.get(architecture, "logits")
    with torch.no_grad():
        expected, actual = roberta(ids, attention_mask=mask), linformer(ids, attention_mask=mask)
    torch.testing.assert_close(actual[key], expected[key], rtol=0, atol=1e-5)
    if architecture == "RobertaModel":
        torch.testing.assert_close(actual.pooler_output, expected.pooler_output, rtol=0, atol=1e-5)


@pytest.mark.parametrize("architecture", sorted(ARCHITECTURE_MAP))
def test_every_head_converts_with_every_weight_carried(architecture):
    roberta = getattr(transformers, architecture)(tiny_roberta_config(num_labels=3)).eval()
    linformer, report = convert_model(roberta, max_sequence_length=16, projected_length=4)
    assert type(linformer).__name__ == ARCHITECTURE_MAP[architecture]
    assert report.missing == [] and report.problems() == []
    source_state, target_state = roberta.state_dict(), linformer.state_dict()
    assert sorted(report.carried) == sorted(source_state)  # same n: nothing extended, everything copied
    for key, value in source_state.items():
        assert torch.equal(target_state[key], value), key
    assert set(target_state) - set(source_state) == set(report.initialised)
    assert all("projection" in key for key in report.initialised)


def test_position_extension_repeats_the_learned_rows(tmp_path):
    roberta = save_roberta("RobertaForMaskedLM", tmp_path / "roberta")
    report = convert_checkpoint(str(tmp_path / "roberta"), str(tmp_path / "linformer"), max_sequence_length=40,
                                projected_length=10, copy_tokenizer=False)
    old = roberta.roberta.embeddings.position_embeddings.weight  # 18 rows: 2 special + 16 learned
    new = linformer_hf.LinformerForMaskedLM.from_pretrained(str(tmp_path / "linformer")).roberta.embeddings
    new = new.position_embeddings.weight
    assert new.shape == (42, 32)
    torch.testing.assert_close(new[:18], old, rtol=0, atol=0)
    for block_start in (18, 34):  # positions 16..31 and 32..39 repeat learned rows 2.. in order
        rows = min(16, 42 - block_start)
        torch.testing.assert_close(new[block_start:block_start + rows], old[2:2 + rows], rtol=0, atol=0)
    assert "18 -> 42 rows" in report.extended["roberta.embeddings.position_embeddings.weight"]


def test_extend_position_embeddings_keeps_a_long_enough_table():
    table = torch.randn(10, 4)
    assert extend_position_embeddings(table, 8, 2) is table
    grown = extend_position_embeddings(table, 13, 2)
    assert torch.equal(grown[10:], table[[2, 3, 4]])


def test_neighbour_average_projection_bins():
    assert torch.equal(neighbour_average_projection(6, 6), torch.eye(6))
    matrix = neighbour_average_projection(8, 4)
    torch.testing.assert_close(matrix.sum(-1), torch.ones(4))
    assert torch.equal(matrix[1], torch.tensor([0, 0, 0.5, 0.5, 0, 0, 0, 0]))
    uneven = neighbour_average_projection(10, 4)  # bins 0-1, 2-4, 5-6, 7-9
    assert torch.equal((uneven > 0).sum(-1), torch.tensor([2, 3, 2, 3]))
    torch.testing.assert_close(uneven.sum(-1), torch.ones(4))


def test_neighbour_average_init_equals_mean_pooling_on_full_inputs():
    """The linear init is exactly the paper's mean-pooling projection (with learnable E) on full-length input."""
    roberta = transformers.RobertaModel(tiny_roberta_config()).eval()
    randomize_all(roberta)
    linear, report = convert_model(roberta, max_sequence_length=16, projected_length=4, sharing="none")
    pooled, _ = convert_model(roberta, max_sequence_length=16, projected_length=4, projection="mean")
    assert set(report.initialised.values()) == {"neighbour average over bins of ~4"}
    ids = padded_batch()[0][:1]
    torch.testing.assert_close(linear(ids).last_hidden_state, pooled(ids).last_hidden_state, rtol=1e-5, atol=1e-5)


def test_projection_noise_and_random_init():
    roberta = transformers.RobertaModel(tiny_roberta_config()).eval()
    noisy, report = convert_model(roberta, max_sequence_length=16, projected_length=4, projection_noise_std=0.01)
    weight = noisy.encoder.layer[0].attention.self.key_projection.weight[0]
    assert 0 < (weight - neighbour_average_projection(16, 4)).abs().max() < 0.1
    assert all("noise" in how for how in report.initialised.values())
    _, report = convert_model(roberta, max_sequence_length=16, projected_length=4, projection_init="random")
    assert all(how.startswith("random") for how in report.initialised.values())
    with pytest.raises(ValueError, match="'identity' needs k = n"):
        convert_model(roberta, max_sequence_length=16, projected_length=4, projection_init="identity")


def test_checkpoint_missing_and_extra_weights_are_reported(tmp_path, capsys):
    save_roberta("RobertaForSequenceClassification", tmp_path / "roberta")
    weights_file = tmp_path / "roberta" / "model.safetensors"
    state = load_file(str(weights_file))
    del state["classifier.out_proj.bias"]
    state["classifier.extra_scale"] = torch.ones(3)
    save_file(state, str(weights_file), metadata={"format": "pt"})

    report = convert_checkpoint(str(tmp_path / "roberta"), str(tmp_path / "linformer"), projected_length=4)
    assert report.source_missing == ["classifier.out_proj.bias"]
    assert report.source_unexpected == ["classifier.extra_scale"]
    assert report.tokenizer.startswith("not found")
    printed = capsys.readouterr().out
    assert "WARNING" in printed and "classifier.out_proj.bias" in printed and "classifier.extra_scale" in printed
    saved = json.loads((tmp_path / "linformer" / "conversion_report.json").read_text())
    assert saved["source_missing"] == ["classifier.out_proj.bias"]


def test_a_roberta_tensor_with_no_counterpart_is_an_error():
    roberta = transformers.RobertaForMaskedLM(tiny_roberta_config()).eval()
    roberta.roberta.encoder.layer[0].attention.self.rotary_scale = nn.Parameter(torch.ones(4))
    with pytest.raises(ValueError, match=r"1 RoBERTa tensor\(s\) have no counterpart.*rotary_scale"):
        convert_model(roberta, max_sequence_length=16, projected_length=4)


def test_unsupported_heads_and_models_are_refused(tmp_path):
    causal = transformers.RobertaForCausalLM(tiny_roberta_config(is_decoder=True))
    with pytest.raises(ValueError, match="RobertaForCausalLM has no Linformer counterpart"):
        convert_model(causal)
    bert = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1,
                                                          num_attention_heads=4, intermediate_size=37))
    bert.save_pretrained(tmp_path / "bert")
    with pytest.raises(ValueError, match="'bert' checkpoint, not 'roberta'"):
        convert_checkpoint(str(tmp_path / "bert"), str(tmp_path / "out"))


def test_script_converts_a_local_checkpoint_with_its_tokenizer(tmp_path, tokenizer):
    save_roberta("RobertaForMaskedLM", tmp_path / "roberta", tokenizer)
    convert_roberta_to_linformer.main([
        str(tmp_path / "roberta"), str(tmp_path / "linformer"), "--max-sequence-length", "32",
        "--projected-length", "8,4", "--sharing", "key_value",
    ])
    config = linformer_hf.LinformerConfig.from_pretrained(str(tmp_path / "linformer"))
    assert (config.max_sequence_length, config.projected_length, config.sharing) == (32, [8, 4], "key_value")
    assert config.architectures == ["LinformerForMaskedLM"] and "AutoModelForMaskedLM" in config.auto_map
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "linformer"))
    assert reloaded.model_max_length == 32
    assert reloaded("a cat")["input_ids"] == tokenizer("a cat")["input_ids"]


def test_fine_tuned_classifier_keeps_its_labels():
    config = tiny_roberta_config(id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1},
                                 problem_type="single_label_classification")
    roberta = transformers.RobertaForSequenceClassification(config).eval()
    linformer, _ = convert_model(roberta, projected_length=4)
    assert linformer.config.id2label == {0: "negative", 1: "positive"}
    assert linformer.config.label2id == {"negative": 0, "positive": 1}
    assert linformer.config.problem_type == "single_label_classification"
    assert (linformer.config.max_sequence_length, linformer.config.max_position_embeddings) == (16, 18)
