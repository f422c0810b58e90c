"""scripts/show_model.py: which head a folder has, fill-mask guesses only from a trained masked-LM head, a classifier's
labels, and one error line for a folder it cannot show."""

import json
import shutil

import pytest
import torch
from conftest import tiny_config
from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config
from tiny_roberta import build_tokenizer
from training_utils import load_script
from transformers import BertModel

from linformer_hf import LinformerForMaskedLM, LinformerForSequenceClassification, LinformerModel


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """A RoBERTa BPE tokenizer (with <mask>) trained on real text."""
    return build_tokenizer(str(tmp_path_factory.mktemp("bpe")))


def save(model, tokenizer, directory):
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)


@pytest.fixture(scope="module")
def masked_lm_dir(tokenizer, tmp_path_factory):
    torch.manual_seed(0)
    model = LinformerForMaskedLM(tiny_config(vocab_size=len(tokenizer), num_hidden_layers=1))
    return save(model, tokenizer, tmp_path_factory.mktemp("masked_lm"))


def show(argv, capsys):
    """show_model's exit status, stdout and its `error:` lines (the whole stderr must be those lines)."""
    code = load_script("show_model").main(argv)
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in captured.err, captured.err
    return code, captured.out, errors


def test_a_masked_lm_shows_its_head_and_fill_mask_guesses(masked_lm_dir, capsys):
    code, out, errors = show([masked_lm_dir, "--text", "The <mask> of the river.", "--top_k", "3"], capsys)
    assert code == 0 and errors == []
    assert "saved as LinformerForMaskedLM" in out
    assert out.count("fill-mask: The <mask> of the river.") == 1
    assert len([line for line in out.splitlines() if line.startswith("    ")]) == 3


def test_a_classifier_shows_its_labels_not_guesses_from_a_random_lm_head(tokenizer, tmp_path, capsys):
    """A fine-tuned classifier loaded as a masked LM would fill masks from a randomly initialised LM head."""
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer), num_hidden_layers=1, num_labels=2)
    config.id2label, config.label2id = {0: "negative", 1: "positive"}, {"negative": 0, "positive": 1}
    model = LinformerForSequenceClassification(config).eval()
    model_dir = save(model, tokenizer, tmp_path / "classifier")
    text = "the plot is thin"
    code, out, errors = show([model_dir, "--text", text], capsys)
    assert code == 0 and errors == []
    assert "saved as LinformerForSequenceClassification" in out and "no fill-mask guesses" in out
    assert "fill-mask:" not in out
    # The label scores printed are the model's, by name.
    with torch.no_grad():
        expected = model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0]
    printed = {line.split()[1]: float(line.split()[0]) for line in out.splitlines() if line.startswith("    ")}
    assert printed == pytest.approx({"negative": expected[0].item(), "positive": expected[1].item()}, abs=1e-3)


@pytest.mark.parametrize("source", ["bert", "linformer_without_architectures"])
def test_a_folder_without_a_trained_lm_head_is_refused_on_one_line(source, tokenizer, tmp_path, capsys):
    """A plain BERT folder (BertModel: no MLM head) is refused by its config's architectures; a folder whose config
    names no head, by its weights (no lm_head tensors saved)."""
    if source == "bert":
        wordpiece = build_wordpiece_tokenizer(str(tmp_path / "wordpiece"))
        model_dir = save(BertModel(tiny_bert_config()), wordpiece, tmp_path / "bert")
    else:
        model_dir = save(LinformerModel(tiny_config(vocab_size=len(tokenizer))), tokenizer, tmp_path / "encoder")
        path = tmp_path / "encoder" / "config.json"
        config = json.loads(path.read_text())
        del config["architectures"]
        path.write_text(json.dumps(config))
    code, out, errors = show([model_dir, "--text", "The <mask> of the river."], capsys)
    assert code == 2 and len(errors) == 1, errors
    assert "no trained masked-LM head" in errors[0] and "random weights" in errors[0]
    assert ("holds a BertModel" if source == "bert" else "lm_head.") in errors[0]
    assert "fill-mask:" not in out


def test_a_truncated_weights_file_is_named_on_one_line(masked_lm_dir, tmp_path, capsys):
    model_dir = shutil.copytree(masked_lm_dir, tmp_path / "copy")
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a copy cut short
    code, out, errors = show([str(model_dir)], capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"{weights} is truncated or corrupt" in errors[0]
    assert "fill-mask:" not in out


def test_a_folder_without_weights_is_refused_on_one_line(masked_lm_dir, tmp_path, capsys):
    """A folder holding a config and a tokenizer but no weights (an ONNX export folder): before, transformers' "Error
    no file named model.safetensors, or pytorch_model.bin", naming no way out."""
    model_dir = shutil.copytree(masked_lm_dir, tmp_path / "onnx", ignore=shutil.ignore_patterns("*.safetensors"))
    code, out, errors = show([str(model_dir)], capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"{model_dir} holds no weights" in errors[0] and "save_pretrained" in errors[0]
    assert out == ""


@pytest.mark.parametrize(
    "results",
    [
        {"epoch": 3.0, "eval_loss": 2.5, "perplexity": 12.18, "eval_samples": 80},  # Trainer.save_metrics("eval")
        {"step": 40, "eval_loss": 800.0, "perplexity": None, "nonfinite": ["perplexity"]},  # inf written as null
    ],
)
def test_an_eval_results_file_of_another_shape_is_shown_as_it_is(masked_lm_dir, tmp_path, capsys, results):
    """Before: a KeyError ('step') or a TypeError (None:.2f) traceback after "loaded ...", and no guesses."""
    model_dir = shutil.copytree(masked_lm_dir, tmp_path / "copy")
    (model_dir / "eval_results.json").write_text(json.dumps(results))
    code, out, errors = show([str(model_dir), "--text", "The <mask> of the river.", "--top_k", "2"], capsys)
    assert code == 0 and errors == []
    assert "validation (eval_results.json): " + ", ".join(f"{k} = {v}" for k, v in results.items()) in out
    assert "fill-mask: The <mask> of the river." in out


def test_a_folder_without_a_tokenizer_is_refused_on_one_line(tokenizer, tmp_path, capsys):
    """Before, AutoTokenizer built an empty tokenizer from the config alone: "loaded ..." then five `0.003  ''`
    guesses per text, exit 0."""
    model_dir = tmp_path / "no_tokenizer"
    LinformerForMaskedLM(tiny_config(vocab_size=len(tokenizer), num_hidden_layers=1)).save_pretrained(model_dir)
    code, out, errors = show([str(model_dir)], capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"{model_dir} has no tokenizer (none of tokenizer_config.json" in errors[0]
    assert "tokenizer.save_pretrained(" in errors[0]
    assert out == ""  # refused before the model was loaded


def test_a_performer_is_described_by_its_features_and_maximum_length(tokenizer, tmp_path, capsys):
    """A Performer has no n or k (before: `n = None, k = None`): its m random features and its position table's
    limit."""
    from linformer_hf import PerformerConfig, PerformerForMaskedLM
    from linformer_hf.models.lengths import max_input_length

    torch.manual_seed(0)
    config = PerformerConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=20,
        num_random_features=8,
    )
    model_dir = save(PerformerForMaskedLM(config), tokenizer, tmp_path / "performer")
    code, out, errors = show([model_dir, "--text", "The <mask> of the river.", "--top_k", "2"], capsys)
    assert code == 0 and errors == []
    assert max_input_length(config) == 18  # 20 rows counted from pad_token_id + 1 = 2
    assert "PerformerForMaskedLM" in out and "m = 8 random features per head, maximum input length 18" in out
    assert "None" not in out
