"""The frozen-embedding probe: embeddings stay aligned with their texts, and the splits are the fine-tuning's."""

import csv
import json
import random

import pytest
import torch
from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config
from transformers import BertModel

from experiments.embedding_probe import embed, main


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tinybert")
    tokenizer = build_wordpiece_tokenizer(str(out), model_max_length=64)
    torch.manual_seed(0)
    BertModel(tiny_bert_config(max_position_embeddings=64)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def test_embeddings_follow_input_order_despite_length_sorting(tiny_bert_dir):
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(tiny_bert_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    texts = ["the city of the river and the old castle", "a", "the war", "it was the first game of the season"]
    together = embed(model, tokenizer, texts, batch_size=3)  # batches mix lengths, in sorted order
    one_by_one = torch.cat([embed(model, tokenizer, [text], batch_size=1) for text in texts])
    torch.testing.assert_close(together, one_by_one, atol=1e-5, rtol=1e-5)  # padding ignored, order kept
    torch.testing.assert_close(together.norm(dim=-1), torch.ones(len(texts)))


def test_probe_separates_a_task_the_embeddings_encode(tiny_bert_dir, tmp_path):
    """Labels decided by which word a text repeats, lengths varied: a misaligned embedding/label pairing (the
    length sort not undone) would score near chance, the right one near 1."""
    rng = random.Random(0)

    def write(path, rows):
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\")
            writer.writerow(["sentence", "label"])
            writer.writerows(rows)

    def rows(count):
        out = []
        for _ in range(count):
            label = rng.randint(0, 1)
            word = "city" if label else "war"
            out.append((" ".join([word] * rng.randint(1, 12)), label))
        return out

    write(tmp_path / "train.tsv", rows(120))
    write(tmp_path / "dev.tsv", rows(40))
    output = tmp_path / "probe.json"
    argv = ["--config", "configs/finetune/sst2.yaml", "--data.train_file", str(tmp_path / "train.tsv")]
    argv += ["--data.validation_file", str(tmp_path / "dev.tsv"), "--models", tiny_bert_dir, "--output", str(output)]
    assert main(argv) == 0
    result = json.loads(output.read_text())
    assert (result["train"], result["validation"]) == (120, 40)
    assert result["models"][tiny_bert_dir]["accuracy"] >= 0.95
    assert result["models"][tiny_bert_dir]["max_length"] == 64  # the recipe's max_seq_length: null, the model's n
    assert main(argv) == 2  # an existing result is never overwritten


def test_longest_input_counts_bert_positions_from_zero_and_roberta_after_padding():
    """BERT's 512 positions take 512 tokens; RoBERTa's 514 rows take 512 (its positions start at pad + 1). Counting
    BERT like RoBERTa refused IMDB at 512 tokens for all-MiniLM-L6-v2 ("n=511")."""
    from transformers import BertConfig, RobertaConfig

    from linformer_hf import LinformerConfig, PerformerConfig
    from linformer_hf.models import max_input_length

    assert max_input_length(BertConfig(max_position_embeddings=512, pad_token_id=0)) == 512
    assert max_input_length(RobertaConfig(max_position_embeddings=514, pad_token_id=1)) == 512
    assert max_input_length(PerformerConfig(max_position_embeddings=514, pad_token_id=1)) == 512
    assert max_input_length(LinformerConfig(max_sequence_length=1024, projected_length=128)) == 1024


@pytest.mark.parametrize("position", ["first", "after a model"])
def test_a_missing_model_folder_is_named_before_any_model_runs(position, tiny_bert_dir, tmp_path, capsys, monkeypatch):
    """Every --models folder is checked before the first is run: a missing one is said to be missing on one line,
    not met after the models before it were embedded as transformers' malformed Hub repo id (a traceback)."""
    import experiments.embedding_probe as embedding_probe

    def work(*args, **kwargs):
        raise AssertionError("a model was run before the folders were checked")

    monkeypatch.setattr(embedding_probe, "run_probe", work)
    missing = str(tmp_path / "no-such-model")
    models = [missing] if position == "first" else [tiny_bert_dir, missing]
    output = tmp_path / "probe.json"
    assert main(["--config", "configs/finetune/sst2.yaml", "--models", *models, "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--models={missing}: no such directory" in err and "Repo id" not in err
    assert not output.exists()


def test_a_hub_name_offline_after_a_model_is_one_line_before_any_runs(tiny_bert_dir, tmp_path, capsys, monkeypatch):
    """A Hub name that cannot be fetched offline, given after a model folder, is one line naming --models and the
    name, before the first model is embedded (before: a traceback after the models before it had run)."""
    import experiments.embedding_probe as embedding_probe

    def work(*args, **kwargs):
        raise AssertionError("a model was run before every model was found")

    monkeypatch.setattr(embedding_probe, "run_probe", work)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    output = tmp_path / "probe.json"
    models = [tiny_bert_dir, "nobody-here/no-such-model"]
    assert main(["--config", "configs/finetune/sst2.yaml", "--models", *models, "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--models" in err and "nobody-here/no-such-model" in err
    assert not output.exists()
