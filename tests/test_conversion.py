"""Warm start from RoBERTa: exact equivalence at k = n, every head, position extension, honest reporting."""

import json
import os
import shutil
import sys

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config
from tiny_roberta import build_tokenizer, randomize_all, tiny_roberta_config
from torch import nn

import linformer_hf
from linformer_hf.conversion import (
    ARCHITECTURE_MAP,
    TARGET_FAMILIES,
    convert_checkpoint,
    convert_model,
    extend_position_embeddings,
    neighbour_average_projection,
)
from linformer_hf.models import max_input_length

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import convert_to_linformer  # noqa: E402

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


@pytest.mark.parametrize("architecture", ["RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification"])
@pytest.mark.parametrize(
    "sharing,projection,n",
    [
        ("headwise", "linear", 16),  # same n as RoBERTa
        ("none", "linear", 40),  # n > RoBERTa's positions: the table is extended
        ("layerwise", "conv", 16),
    ],
)
def test_k_equal_n_reproduces_roberta_exactly(tmp_path, tokenizer, architecture, sharing, projection, n):
    roberta = save_roberta(architecture, tmp_path / "roberta", tokenizer)
    report = convert_checkpoint(
        str(tmp_path / "roberta"),
        str(tmp_path / "linformer"),
        max_sequence_length=n,
        projected_length=n,
        sharing=sharing,
        projection=projection,
    )
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


ROBERTA_HEADS = sorted(name for name in ARCHITECTURE_MAP if name.startswith("Roberta"))
BERT_HEADS = sorted(name for name in ARCHITECTURE_MAP if name.startswith("Bert"))


def test_head_maps_come_from_the_auto_classes():
    assert len(ROBERTA_HEADS) == len(BERT_HEADS) == len(linformer_hf.LINFORMER_HEADS)
    for auto_name, linformer_class in linformer_hf.LINFORMER_HEADS.items():
        for config_class in (transformers.RobertaConfig, transformers.BertConfig):
            source = getattr(transformers, auto_name)._model_mapping[config_class]
            assert ARCHITECTURE_MAP[source.__name__] == linformer_class.__name__


@pytest.mark.parametrize("architecture", ROBERTA_HEADS)
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
    report = convert_checkpoint(
        str(tmp_path / "roberta"),
        str(tmp_path / "linformer"),
        max_sequence_length=40,
        projected_length=10,
        copy_tokenizer=False,
    )
    old = roberta.roberta.embeddings.position_embeddings.weight  # 18 rows: 2 special + 16 learned
    new = linformer_hf.LinformerForMaskedLM.from_pretrained(str(tmp_path / "linformer")).roberta.embeddings
    new = new.position_embeddings.weight
    assert new.shape == (42, 32)
    torch.testing.assert_close(new[:18], old, rtol=0, atol=0)
    for block_start in (18, 34):  # positions 16..31 and 32..39 repeat learned rows 2.. in order
        rows = min(16, 42 - block_start)
        torch.testing.assert_close(new[block_start : block_start + rows], old[2 : 2 + rows], rtol=0, atol=0)
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
    with pytest.raises(ValueError, match="'identity' was removed: it is 'neighbour_average' at k = n"):
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
    with pytest.raises(ValueError, match=r"1 source tensor\(s\) have no counterpart.*rotary_scale"):
        convert_model(roberta, max_sequence_length=16, projected_length=4)


def test_unsupported_heads_and_models_are_refused(tmp_path):
    causal = transformers.RobertaForCausalLM(tiny_roberta_config(is_decoder=True))
    with pytest.raises(ValueError, match="RobertaForCausalLM has no Linformer counterpart"):
        convert_model(causal)
    distilbert = transformers.DistilBertModel(
        transformers.DistilBertConfig(dim=32, n_layers=1, n_heads=4, hidden_dim=37, vocab_size=99)
    )
    distilbert.save_pretrained(tmp_path / "distilbert")
    with pytest.raises(ValueError, match="is a 'distilbert' checkpoint; only \\['bert', 'roberta'\\]"):
        convert_checkpoint(str(tmp_path / "distilbert"), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="RobertaForCausalLM has no Linformer counterpart"):
        convert_model(causal)


def test_script_converts_a_local_checkpoint_with_its_tokenizer(tmp_path, tokenizer):
    save_roberta("RobertaForMaskedLM", tmp_path / "roberta", tokenizer)
    convert_to_linformer.main(
        [
            str(tmp_path / "roberta"),
            str(tmp_path / "linformer"),
            "--max-sequence-length",  # the dashed form of a flag is the underscored one
            "32",
            "--projected-length=8,4",
            "--sharing",
            "key_value",
        ]
    )
    config = linformer_hf.LinformerConfig.from_pretrained(str(tmp_path / "linformer"))
    assert (config.max_sequence_length, config.projected_length, config.sharing) == (32, [8, 4], "key_value")
    assert config.architectures == ["LinformerForMaskedLM"] and "AutoModelForMaskedLM" in config.auto_map
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "linformer"))
    assert reloaded.model_max_length == 32
    assert reloaded("a cat")["input_ids"] == tokenizer("a cat")["input_ids"]


def test_script_explains_the_removed_identity_init(tmp_path, capsys):
    with pytest.raises(SystemExit):
        convert_to_linformer.main([str(tmp_path / "roberta"), str(tmp_path / "out"), "--projection_init", "identity"])
    assert "'identity' was removed: it is 'neighbour_average' at k = n" in capsys.readouterr().err


def test_fine_tuned_classifier_keeps_its_labels():
    config = tiny_roberta_config(
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
        problem_type="single_label_classification",
    )
    roberta = transformers.RobertaForSequenceClassification(config).eval()
    linformer, _ = convert_model(roberta, projected_length=4)
    assert linformer.config.id2label == {0: "negative", 1: "positive"}
    assert linformer.config.label2id == {"negative": 0, "positive": 1}
    assert linformer.config.problem_type == "single_label_classification"
    assert (linformer.config.max_sequence_length, linformer.config.max_position_embeddings) == (16, 18)


def test_converted_config_records_the_projection_init(tmp_path):
    """The saved config says what E, F were set to, and a model built from it starts from the same E, F."""
    roberta = save_roberta("RobertaForMaskedLM", tmp_path / "roberta")
    convert_checkpoint(str(tmp_path / "roberta"), str(tmp_path / "linformer"), projected_length=4, copy_tokenizer=False)
    config = linformer_hf.LinformerConfig.from_pretrained(str(tmp_path / "linformer"))
    assert config.projection_init == "neighbour_average"
    saved = linformer_hf.LinformerForMaskedLM.from_pretrained(str(tmp_path / "linformer"))
    rebuilt = linformer_hf.LinformerForMaskedLM(config)
    for name in ("key_projection", "value_projection"):
        expected = getattr(rebuilt.roberta.encoder.layer[1].attention.self, name).weight
        torch.testing.assert_close(getattr(saved.roberta.encoder.layer[1].attention.self, name).weight, expected)
        torch.testing.assert_close(expected[0], neighbour_average_projection(16, 4))
    linformer, _ = convert_model(roberta, projected_length=4, projection_init="random", seed=1)
    again, _ = convert_model(roberta, projected_length=4, projection_init="random", seed=1)
    assert torch.equal(
        linformer.state_dict()["roberta.encoder.layer.0.attention.self.key_projection.weight"],
        again.state_dict()["roberta.encoder.layer.0.attention.self.key_projection.weight"],
    )  # seeded
    assert linformer.config.projection_init == "random"
    weight = linformer.roberta.encoder.layer[0].attention.self.key_projection.weight
    assert 0.1 < weight.std().item() * 4 < 10  # N(0, 1/n) with n = 16, not the bins
    assert (weight != 0).all()


# ---- BERT-layout checkpoints (BERT, MiniLM, ...) ----


@pytest.fixture(scope="module")
def wordpiece(tmp_path_factory):
    return build_wordpiece_tokenizer(str(tmp_path_factory.mktemp("wordpiece")))


def save_bert(architecture, directory, tokenizer=None, seed=0, **config_overrides):
    config_overrides.setdefault("num_labels", 3)
    model = getattr(transformers, architecture)(tiny_bert_config(**config_overrides)).eval()
    randomize_all(model, seed)
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
    return model


def padded_bert_batch(vocab_size=300, length=16, seed=1):
    """Right-padded ids (BERT's pad id 0) with two segments, as a BERT tokenizer returns for sentence pairs."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, (3, length), generator=generator)
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)
    for row, real in [(1, 11), (2, 5)]:
        ids[row, real:] = 0
        mask[row, real:] = 0
    types[0, 9:] = 1
    types[1, 6:11] = 1
    return ids, mask, types


@pytest.mark.parametrize(
    "architecture,output",
    [
        ("BertModel", "last_hidden_state"),
        ("BertForMaskedLM", "logits"),
        ("BertForSequenceClassification", "logits"),
        ("BertForTokenClassification", "logits"),
    ],
)
@pytest.mark.parametrize("sharing,n", [("headwise", 16), ("none", 40)])  # n = 40 > 16 positions: extended table
def test_bert_k_equal_n_reproduces_bert_exactly(tmp_path, wordpiece, architecture, output, sharing, n):
    bert = save_bert(architecture, tmp_path / "bert", wordpiece)
    report = convert_checkpoint(
        str(tmp_path / "bert"), str(tmp_path / "linformer"), max_sequence_length=n, projected_length=n, sharing=sharing
    )
    assert report.problems() == []
    linformer = (
        transformers.AutoModel.from_pretrained(str(tmp_path / "linformer"))
        if architecture == "BertModel"
        else getattr(linformer_hf, ARCHITECTURE_MAP[architecture]).from_pretrained(str(tmp_path / "linformer"))
    )
    linformer.eval()
    ids, mask, types = padded_bert_batch()
    with torch.no_grad():
        expected = bert(ids, attention_mask=mask, token_type_ids=types)
        actual = linformer(ids, attention_mask=mask, token_type_ids=types)
    if output == "logits" and expected.logits.dim() == 2:  # sequence classification: one row per sequence
        torch.testing.assert_close(actual.logits, expected.logits, rtol=0, atol=1e-5)
        return
    real = mask.bool()  # padded positions get BERT's absolute position but RoBERTa's padding row: nothing reads them
    torch.testing.assert_close(actual[output][real], expected[output][real], rtol=0, atol=1e-5)
    if architecture == "BertModel":
        torch.testing.assert_close(actual.pooler_output, expected.pooler_output, rtol=0, atol=1e-5)


@pytest.mark.parametrize("architecture", BERT_HEADS)
def test_every_bert_head_converts_with_every_weight_carried(architecture):
    bert = getattr(transformers, architecture)(tiny_bert_config(num_labels=3)).eval()
    randomize_all(bert)
    linformer, report = convert_model(bert, max_sequence_length=16, projected_length=4)
    assert type(linformer).__name__ == ARCHITECTURE_MAP[architecture]
    assert report.missing == [] and report.problems() == []
    target_state = linformer.state_dict()
    for key, value in bert.state_dict().items():
        target_key = report.renamed.get(key, key)
        if key.endswith("position_embeddings.weight"):
            torch.testing.assert_close(target_state[target_key][1:17], value, rtol=0, atol=0)  # pad id 0: offset 1
            assert target_key in report.extended
            continue
        assert torch.equal(target_state[target_key], value), key
    assert set(target_state) - {report.renamed.get(key, key) for key in bert.state_dict()} == set(report.initialised)


def test_bert_positions_map_onto_robertas_layout():
    bert = transformers.BertModel(tiny_bert_config()).eval()
    randomize_all(bert)
    linformer, report = convert_model(bert, projected_length=4)
    table = linformer.embeddings.position_embeddings.weight
    assert linformer.config.pad_token_id == 0 and linformer.config.max_sequence_length == 16
    assert table.shape[0] == linformer.config.max_position_embeddings == 18  # validation asks n + 2 rows
    torch.testing.assert_close(table[1:17], bert.embeddings.position_embeddings.weight, rtol=0, atol=0)
    assert torch.equal(table[0], torch.zeros(32))
    torch.testing.assert_close(table[17], table[1], rtol=0, atol=0)  # the unused extra row repeats position 0
    assert linformer.config.type_vocab_size == 2
    torch.testing.assert_close(
        linformer.embeddings.token_type_embeddings.weight, bert.embeddings.token_type_embeddings.weight, rtol=0, atol=0
    )
    assert "moved to rows 1..16" in report.extended["embeddings.position_embeddings.weight"]


def test_bert_tokenizer_round_trips_through_a_converted_folder(tmp_path, wordpiece):
    """AutoTokenizer loads the folder's own WordPiece tokenizer, not the RoBERTa BPE registered for linformer."""
    save_bert("BertForMaskedLM", tmp_path / "bert", wordpiece)
    report = convert_checkpoint(str(tmp_path / "bert"), str(tmp_path / "linformer"), projected_length=4)
    assert "BertTokenizer" in report.tokenizer
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "linformer"))
    assert type(reloaded) is type(wordpiece)
    text = ("the first season of the series", "was released on DVD")
    expected, actual = wordpiece(*text), reloaded(*text)
    assert actual["input_ids"] == expected["input_ids"] and actual["token_type_ids"] == expected["token_type_ids"]
    assert (
        reloaded.pad_token_id == 0 == transformers.AutoConfig.from_pretrained(str(tmp_path / "linformer")).pad_token_id
    )
    assert reloaded.model_max_length == 16
    assert reloaded.convert_ids_to_tokens(actual["input_ids"])[0] == "[CLS]"


def test_bert_heads_without_a_linformer_layout_are_refused(tmp_path):
    with pytest.raises(ValueError, match="BertForPreTraining has no Linformer counterpart.*BertForMaskedLM"):
        convert_model(transformers.BertForPreTraining(tiny_bert_config()))
    with pytest.raises(ValueError, match="BertLMHeadModel has no Linformer counterpart"):
        convert_model(transformers.BertLMHeadModel(tiny_bert_config(is_decoder=True)))
    with pytest.raises(ValueError, match="hidden_act='relu'.*always applies 'gelu'"):
        convert_model(transformers.BertForMaskedLM(tiny_bert_config(hidden_act="relu")))
    with pytest.raises(ValueError, match="position_embedding_type='relative_key'"):
        convert_model(transformers.BertModel(tiny_bert_config(position_embedding_type="relative_key")))
    # A pretraining checkpoint converts as its MLM head when asked to.
    save_bert("BertForPreTraining", tmp_path / "bert")
    with pytest.raises(ValueError, match="BertForPreTraining: its next-sentence head"):
        convert_checkpoint(str(tmp_path / "bert"), str(tmp_path / "out"))
    report = convert_checkpoint(
        str(tmp_path / "bert"),
        str(tmp_path / "out"),
        architecture="BertForMaskedLM",
        projected_length=4,
        copy_tokenizer=False,
    )
    assert report.target_architecture == "LinformerForMaskedLM"
    assert any("seq_relationship" in key for key in report.source_unexpected)  # the dropped NSP head is reported


def test_sentence_transformers_pooling_is_copied(tmp_path, wordpiece):
    save_bert("BertModel", tmp_path / "st", wordpiece)
    (tmp_path / "st" / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (tmp_path / "st" / "1_Pooling").mkdir()
    (tmp_path / "st" / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (tmp_path / "st" / "sentence_bert_config.json").write_text('{"max_seq_length": 16}')
    report = convert_checkpoint(str(tmp_path / "st"), str(tmp_path / "linformer"), projected_length=4)
    # an earlier conversion with its pooling module folder is the conversion's own: --overwrite replaces it
    report = convert_checkpoint(str(tmp_path / "st"), str(tmp_path / "linformer"), projected_length=4, overwrite=True)
    assert json.loads((tmp_path / "linformer" / "1_Pooling" / "config.json").read_text()) == {
        "pooling_mode_mean_tokens": True
    }
    assert (tmp_path / "linformer" / "modules.json").exists()
    assert any("sentence-transformers modules copied" in note for note in report.notes)
    # a model shorter than the sentence length: sentence-transformers truncates to n, which the model takes (before,
    # every long input failed with the model's own "exceeds max_sequence_length")
    report = convert_checkpoint(
        str(tmp_path / "st"), str(tmp_path / "short"), max_sequence_length=8, projected_length=4
    )
    assert json.loads((tmp_path / "short" / "sentence_bert_config.json").read_text())["max_seq_length"] == 8
    assert any("max_seq_length 16 lowered to the model's n = 8" in note for note in report.notes)


def test_overwrite_replaces_an_earlier_model_whole(tmp_path, wordpiece):
    """--overwrite over an earlier conversion leaves none of its files: not its tokenizer of another length beside the
    new weights (inputs were truncated to the old n without a word), nor another family's modeling code. A folder
    that holds no model keeps its files; a source inside the folder the overwrite replaces is refused."""
    save_bert("BertForMaskedLM", tmp_path / "bert", wordpiece)
    out = tmp_path / "out"
    convert_checkpoint(str(tmp_path / "bert"), str(out), target="performer", num_random_features=8)
    assert (out / "modeling_performer.py").exists() and (out / "tokenizer.json").exists()
    convert_checkpoint(str(tmp_path / "bert"), str(out), copy_tokenizer=False, overwrite=True, projected_length=4)
    assert not (out / "modeling_performer.py").exists() and not (out / "tokenizer.json").exists()
    assert linformer_hf.LinformerConfig.from_pretrained(str(out)).projected_length == 4
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "mine.txt").write_text("kept")
    convert_checkpoint(str(tmp_path / "bert"), str(notes), overwrite=True, projected_length=4)
    assert (notes / "mine.txt").read_text() == "kept" and (notes / "config.json").exists()
    shutil.copytree(tmp_path / "bert", out / "source")
    with pytest.raises(ValueError, match="lies inside output_dir .* which --overwrite replaces"):
        convert_checkpoint(str(out / "source"), str(out), overwrite=True, projected_length=4)
    assert (out / "source" / "config.json").exists()


def test_overwrite_refuses_a_model_folder_the_conversion_did_not_write(tmp_path, wordpiece, capsys):
    """--overwrite replaced any folder holding a config.json whole: a training run (its model beside checkpoints and
    logs), another model's folder. Now only an earlier conversion is replaced; anything else is refused before any
    work, naming what it holds and the ways out, and kept as it was."""
    save_bert("BertForMaskedLM", tmp_path / "bert", wordpiece)
    run = tmp_path / "run"  # a conversion trained on there: its checkpoints and log beside the model
    convert_checkpoint(str(tmp_path / "bert"), str(run), projected_length=4)
    (run / "checkpoint-500").mkdir()
    (run / "checkpoint-500" / "optimizer.pt").write_bytes(b"state")
    (run / "train_log.jsonl").write_text("{}\n")
    other = tmp_path / "other"  # another family's model: its own config.json and weights
    shutil.copytree(tmp_path / "bert", other)
    (other / "conversion_report.json").write_text("{}")
    capsys.readouterr()
    for folder, found in (
        (run, "it holds checkpoint-500, train_log.jsonl, which such a folder never holds"),
        (other, "its config.json is a 'bert' model's"),
        (tmp_path / "bert", "it has no conversion_report.json"),
    ):
        before = sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))
        # without --overwrite the refusal is the same: it used to advise passing --overwrite, refused in turn
        for flags in (["--overwrite"], []):
            argv = [str(tmp_path / "bert") if folder != tmp_path / "bert" else str(run), str(folder), *flags]
            assert convert_to_linformer.main([*argv, "--projected_length", "8"]) == 2
            error = capsys.readouterr().err
            assert f"{folder} is not a model folder written by the conversion ({found}" in error
            assert "Give another output directory, or delete" in error and "yourself" in error
            assert "or pass" not in error
            assert sorted(str(path.relative_to(folder)) for path in folder.rglob("*")) == before
    assert json.loads((run / "config.json").read_text())["projected_length"] == 4


# ---- Performer as the target family ----

PERFORMER_MAP = TARGET_FAMILIES["performer"].architecture_map


def performer_source(architecture, seed=0):
    """A tiny RoBERTa/BERT head with dense random weights, LayerNorm gains near 1 and W^Q, W^K of std 0.12, so that
    attention logits have std ~0.5 and attention matters to the outputs (randomize_all's LayerNorm gains of ~0 leave
    near-uniform attention, which any m approximates)."""
    config_of = tiny_bert_config if architecture.startswith("Bert") else tiny_roberta_config
    decoder = architecture in ("RobertaForCausalLM", "BertLMHeadModel")
    model = getattr(transformers, architecture)(config_of(num_labels=3, is_decoder=decoder)).eval()
    randomize_all(model, seed)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("query.weight", "key.weight")):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.12)
            elif name.endswith(("LayerNorm.weight", "layer_norm.weight")):
                param.add_(1.0)
    return model


def test_performer_head_map_has_every_performer_head_including_causal_lm():
    assert sorted(PERFORMER_MAP.values()) == sorted(
        cls.__name__ for cls in linformer_hf.PERFORMER_HEADS.values() for _ in range(2)
    )  # one RoBERTa and one BERT head per Performer head
    assert PERFORMER_MAP["RobertaForCausalLM"] == PERFORMER_MAP["BertLMHeadModel"] == "PerformerForCausalLM"


@pytest.mark.parametrize("architecture", sorted(PERFORMER_MAP))
def test_every_head_converts_to_performer_with_every_weight_carried(architecture):
    source = performer_source(architecture)
    performer, report = convert_model(source, target="performer", num_random_features=8, seed=3)
    assert type(performer).__name__ == PERFORMER_MAP[architecture] == report.target_architecture
    assert report.missing == [] and report.problems() == [] and report.target_family == "performer"
    assert performer.config.num_random_features == report.attention_settings["num_random_features"] == 8
    assert performer.config.is_decoder == source.config.is_decoder
    target_state = performer.state_dict()
    for key, value in source.state_dict().items():
        target_key = report.renamed.get(key, key)
        if architecture.startswith("Bert") and key.endswith("position_embeddings.weight"):
            torch.testing.assert_close(target_state[target_key][1:17], value, rtol=0, atol=0)  # pad id 0: offset 1
            continue
        assert torch.equal(target_state[target_key], value), key
    generated = set(target_state) - {report.renamed.get(key, key) for key in source.state_dict()}
    assert generated == set(report.initialised)
    assert all(key.endswith(("random_features", "training_calls")) for key in generated)
    features = [value for key, value in target_state.items() if key.endswith("random_features")]
    assert len(features) == 2 and all(f.shape == (8, 8) and f.std() > 0.5 for f in features)
    again, _ = convert_model(source, target="performer", num_random_features=8, seed=3)
    assert all(torch.equal(again.state_dict()[key], target_state[key]) for key in generated)  # seeded


@pytest.mark.parametrize("architecture", ["RobertaForMaskedLM", "BertModel", "RobertaForCausalLM"])
def test_a_performer_with_many_features_computes_what_its_source_does_and_with_few_it_does_not(architecture):
    source = performer_source(architecture)
    bert = architecture.startswith("Bert")
    ids, mask, types = padded_bert_batch() if bert else (*padded_batch(), None)
    extra = {"token_type_ids": types} if bert else {}
    real = mask.bool()

    def relative_error(num_random_features):
        performer, _ = convert_model(source, target="performer", num_random_features=num_random_features)
        with torch.no_grad():
            expected = source(ids, attention_mask=mask, **extra)[0][real]
            actual = performer(ids, attention_mask=mask, **extra)[0][real]
        return ((actual - expected).norm() / expected.norm()).item()

    many, few = relative_error(8192), relative_error(2)
    assert many < 0.06, many  # measured 0.02-0.04
    assert few > 5 * many, (few, many)  # measured 0.27-0.73


def test_relu_kernel_converts_and_says_it_is_another_attention():
    performer, report = convert_model(performer_source("RobertaModel"), target="performer", kernel="relu")
    assert performer.config.kernel == "relu" and performer.config.kernel_epsilon == 1e-3
    assert any("not an estimate of softmax" in note for note in report.notes)


def test_settings_of_the_wrong_family_are_refused():
    roberta = performer_source("RobertaModel")
    with pytest.raises(ValueError, match=r"\['projected_length'\] are not Performer settings.*num_random_features"):
        convert_model(roberta, target="performer", projected_length=4)
    with pytest.raises(ValueError, match=r"\['kernel'\] are not Linformer settings"):
        convert_model(roberta, kernel="relu")
    with pytest.raises(ValueError, match="projection_noise_std applies to Linformer's projections"):
        convert_model(roberta, target="performer", projection_noise_std=0.1)
    with pytest.raises(ValueError, match=r"target must be one of \['linformer', 'performer'\]"):
        convert_model(roberta, target="reformer")
    with pytest.raises(ValueError, match="BertForPreTraining has no Performer counterpart"):
        convert_model(transformers.BertForPreTraining(tiny_bert_config()), target="performer")


@pytest.mark.parametrize("source_family", ["roberta", "bert"])
def test_script_converts_to_performer_keeping_the_tokenizer_and_the_folder_loads_with_automodel(
    tmp_path, tokenizer, wordpiece, source_family
):
    if source_family == "roberta":
        source = save_roberta("RobertaForMaskedLM", tmp_path / "source", tokenizer)
        source_tokenizer = tokenizer
    else:
        source = save_bert("BertForMaskedLM", tmp_path / "source", wordpiece)
        source_tokenizer = wordpiece
    convert_to_linformer.main(
        [
            str(tmp_path / "source"),
            str(tmp_path / "performer"),
            "--family",
            "performer",
            "--num_random_features",
            "16",
            "--iid_features",
            "--feature_redraw_interval",
            "50",
        ]
    )
    config = linformer_hf.PerformerConfig.from_pretrained(str(tmp_path / "performer"))
    assert (config.num_random_features, config.orthogonal_features, config.feature_redraw_interval) == (16, False, 50)
    assert config.kernel == "softmax" and config.architectures == ["PerformerForMaskedLM"]
    report = json.loads((tmp_path / "performer" / "conversion_report.json").read_text())
    assert report["target_family"] == "performer" and report["missing"] == []
    model = transformers.AutoModel.from_pretrained(str(tmp_path / "performer"))
    assert type(model) is linformer_hf.PerformerModel
    masked_lm = transformers.AutoModelForMaskedLM.from_pretrained(str(tmp_path / "performer"))
    assert torch.equal(
        masked_lm.lm_head.decoder.weight,
        source.state_dict()[
            "lm_head.decoder.weight" if source_family == "roberta" else "cls.predictions.decoder.weight"
        ],
    )
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "performer"))
    assert type(reloaded).__name__ == type(source_tokenizer).__name__ or reloaded.is_fast
    assert reloaded("a cat")["input_ids"] == source_tokenizer("a cat")["input_ids"]


def test_script_refuses_flags_of_the_other_family(tmp_path, capsys):
    with pytest.raises(SystemExit):
        convert_to_linformer.main(
            [str(tmp_path / "roberta"), str(tmp_path / "out"), "--family", "performer", "--projected_length", "4"]
        )
    assert "['--projected_length'] do not apply to --family performer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        convert_to_linformer.main([str(tmp_path / "roberta"), str(tmp_path / "out"), "--kernel", "relu"])
    assert "['--kernel'] do not apply to --family linformer" in capsys.readouterr().err


# ---- settings checked before the work, options without effect, concurrent conversions ----


def test_a_strided_init_is_reported_as_strided():
    roberta = transformers.RobertaModel(tiny_roberta_config()).eval()
    _, report = convert_model(roberta, max_sequence_length=16, projected_length=4, projection_init="strided")
    assert set(report.initialised.values()) == {
        "strided: slot j sums positions j, j + 4, j + 8, ... (the identity on inputs of at most 4 tokens)"
    }
    _, report = convert_model(roberta, max_sequence_length=16, projected_length=16, projection_init="strided")
    assert set(report.initialised.values()) == {"identity (strided at k = n)"}


@pytest.mark.parametrize(
    "options, message",
    [
        (
            dict(projection="conv", projection_init="strided"),
            "projection_init='strided' has no effect with projection='conv'",
        ),
        (
            dict(projection="conv", projection_init="random", seed=5),
            "projection_init='random' has no effect with projection='conv'",
        ),
        (
            dict(projection="mean", projection_noise_std=0.1),
            "projection_noise_std has no effect with projection='mean'",
        ),
        (
            dict(projection="max", projection_init="strided", freeze_projections=True),
            "projection_init and freeze_projections have no effect with projection='max'",
        ),
        (dict(projection_noise_std=-0.1), "projection_noise_std must be 0 .no noise. or positive, got -0.1"),
    ],
)
def test_options_without_effect_are_refused(options, message):
    roberta = transformers.RobertaModel(tiny_roberta_config()).eval()
    with pytest.raises(ValueError, match=message):
        convert_model(roberta, max_sequence_length=16, projected_length=4, **options)


def test_settings_are_checked_before_any_weight_is_read(tmp_path, capsys):
    """A k larger than n, or an option without effect, is refused on the source's config: the weights (here
    unreadable) are not loaded (for a Hub name: downloaded) first."""
    save_roberta("RobertaModel", tmp_path / "roberta")
    (tmp_path / "roberta" / "model.safetensors").write_bytes(b"not weights")
    for flags, message in (
        (["--projected_length", "600"], "`projected_length` k=600 is larger than `max_sequence_length` n=16"),
        (["--projection", "conv", "--projection_init", "random"], "'random' has no effect with projection='conv'"),
    ):
        assert convert_to_linformer.main([str(tmp_path / "roberta"), str(tmp_path / "out"), *flags]) == 2
        error = capsys.readouterr().err
        assert message in error and "Loading weights" not in error and "safetensors" not in error.lower()
    assert not (tmp_path / "out").exists()


def test_a_base_model_saved_without_a_pooler_converts_without_one(tmp_path):
    """transformers would give the source a random pooler on loading, which would be converted as if trained."""
    model = transformers.BertModel(tiny_bert_config(), add_pooling_layer=False).eval()
    randomize_all(model)
    model.save_pretrained(tmp_path / "bert")
    report = convert_checkpoint(
        str(tmp_path / "bert"), str(tmp_path / "out"), projected_length=16, copy_tokenizer=False
    )
    assert not [key for key in load_file(str(tmp_path / "out" / "model.safetensors")) if "pooler" in key]
    assert report.source_missing == [] and report.problems() == []
    assert any("the source has no pooler, nor has the converted model" in note for note in report.notes)
    save_bert("BertModel", tmp_path / "pooled")  # a saved pooler is carried, as before
    convert_checkpoint(str(tmp_path / "pooled"), str(tmp_path / "pooled_out"), projected_length=4)
    assert "pooler.dense.weight" in load_file(str(tmp_path / "pooled_out" / "model.safetensors"))


def test_a_performer_shorter_than_its_source_reads_no_longer_input_than_its_tokenizer(tmp_path, wordpiece):
    """n sizes a Performer's position table, as --max_sequence_length says: the model, its tokenizer and the
    sentence-transformers length agree (the table kept the source's 16 positions and the model took 16 tokens)."""
    source = save_bert("BertModel", tmp_path / "st", wordpiece)
    (tmp_path / "st" / "modules.json").write_text("[]")
    (tmp_path / "st" / "sentence_bert_config.json").write_text('{"max_seq_length": 12}')
    report = convert_checkpoint(str(tmp_path / "st"), str(tmp_path / "out"), target="performer", max_sequence_length=8)
    config = transformers.AutoConfig.from_pretrained(str(tmp_path / "out"))
    assert max_input_length(config) == 8 == report.max_sequence_length
    assert transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out")).model_max_length == 8
    assert json.loads((tmp_path / "out" / "sentence_bert_config.json").read_text())["max_seq_length"] == 8
    table = load_file(str(tmp_path / "out" / "model.safetensors"))["embeddings.position_embeddings.weight"]
    assert torch.equal(table[1:], source.embeddings.position_embeddings.weight[:8])  # BERT's first 8, after row 0
    assert "the first 8 positions kept" in report.extended["embeddings.position_embeddings.weight"]


def test_a_conversion_that_finds_its_folder_filled_meanwhile_keeps_the_other_result(tmp_path, wordpiece, monkeypatch):
    """Two conversions into one new folder at once: each writes a staging folder of its own, and the one that ends
    second is refused (not published over the first, nor crashing on a staging folder the other deleted)."""
    import linformer_hf.conversion as conversion

    save_bert("BertModel", tmp_path / "bert", wordpiece)
    out = tmp_path / "out"
    copy_modules, other = conversion.copy_sentence_transformers_modules, []

    def another_conversion_meanwhile(source, staging):
        if not other:  # while this one writes, another conversion into the same folder runs to its end
            other.append(source)
            convert_checkpoint(str(tmp_path / "bert"), str(out), projected_length=16)
        return copy_modules(source, staging)

    monkeypatch.setattr(conversion, "copy_sentence_transformers_modules", another_conversion_meanwhile)
    with pytest.raises(FileExistsError, match=f"{out} was filled by another run while this one worked"):
        convert_checkpoint(str(tmp_path / "bert"), str(out), projected_length=4)
    assert linformer_hf.LinformerConfig.from_pretrained(str(out)).projected_length == 16  # the other's, whole
    assert sorted(os.listdir(tmp_path)) == ["bert", "out"]  # no staging folder left


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_conversion_into_a_link_to_an_empty_folder_lands_in_the_folder(tmp_path, wordpiece, overwrite):
    """The staged folder is published with one rename, which does not follow a link at its target: a link to an
    empty folder (a scratch disk linked into a project) failed with "Not a directory", naming the staging folder."""
    save_bert("BertModel", tmp_path / "bert", wordpiece)
    (tmp_path / "disk" / "out").mkdir(parents=True)
    os.symlink(tmp_path / "disk" / "out", tmp_path / "out")
    convert_checkpoint(str(tmp_path / "bert"), str(tmp_path / "out"), projected_length=4, overwrite=overwrite)
    assert os.path.islink(tmp_path / "out")  # the link is kept, and the model is in its folder
    assert linformer_hf.LinformerConfig.from_pretrained(str(tmp_path / "disk" / "out")).projected_length == 4
    assert sorted(os.listdir(tmp_path / "disk")) == ["out"]  # no staging folder left


def test_a_truncated_source_weights_file_is_one_error_line_naming_it(tmp_path, wordpiece, capsys):
    """A source folder copied part-way (its safetensors file cut short): one `error:` line naming the file and the
    fix, and nothing written (before: safetensors' traceback, "incomplete metadata, file not fully covered")."""
    save_bert("BertModel", tmp_path / "bert", wordpiece)
    weights = tmp_path / "bert" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    capsys.readouterr()
    assert convert_to_linformer.main([str(tmp_path / "bert"), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: {weights} is truncated or corrupt") and "Copy or download it again" in error
    assert "\n" not in error
    assert sorted(os.listdir(tmp_path)) == ["bert"]


def test_a_conversion_stopped_by_sigterm_leaves_no_staging_folder(tmp_path, wordpiece, monkeypatch, send_sigterm):
    """`kill` (SIGTERM) while the model is written unwinds as Ctrl-C does (before: the process ended and its hidden
    .tmp- staging folder, a partial model, stayed beside output_dir)."""
    import linformer_hf.conversion as conversion

    save_bert("BertModel", tmp_path / "bert", wordpiece)
    monkeypatch.setattr(conversion, "copy_sentence_transformers_modules", send_sigterm)
    with pytest.raises(KeyboardInterrupt):
        convert_to_linformer.main([str(tmp_path / "bert"), str(tmp_path / "out")])
    assert sorted(os.listdir(tmp_path)) == ["bert"]


def test_a_source_folder_without_weights_is_one_error_line_naming_the_fix(tmp_path, wordpiece, capsys):
    """A source folder with its config and tokenizer but no weights: before, transformers' "Error no file named
    model.safetensors, or pytorch_model.bin, found in directory", naming no way out."""
    save_bert("BertModel", tmp_path / "bert", wordpiece)
    os.remove(tmp_path / "bert" / "model.safetensors")
    capsys.readouterr()
    assert convert_to_linformer.main([str(tmp_path / "bert"), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"error: {tmp_path / 'bert'} holds no weights") and "save_pretrained" in error
    assert sorted(os.listdir(tmp_path)) == ["bert"]
