"""The frozen-embedding probe: embeddings stay aligned with their texts, and the splits are the fine-tuning's."""

import csv
import json
import os
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


# ----------------------------------------------------------------------------------------------------------------------
# Test split, predictions, pooling of every hidden state, C chosen on validation (author attribution's frozen probes)
# ----------------------------------------------------------------------------------------------------------------------

AUTHORS = ["Ash, Ann", "Birch, Bo", "Cedar, Cy"]
AUTHOR_WORDS = ["city", "was", "and"]  # one WordPiece token each in the tiny tokenizer
FILLER = ["the", "of", "w", "k", "o", "r", "se", "al", "t", "ch", "f", "m", "g"]
PER_AUTHOR = {"train": 12, "validation": 4, "test": 6}


def _passage(rng, author: int) -> str:
    """Filler, and the author's word now and then; 4 to 40 words, so that a batch pads."""
    return " ".join(
        AUTHOR_WORDS[author] if rng.random() < 0.3 else rng.choice(FILLER) for _ in range(rng.randint(4, 40))
    )


def _authors_data(folder, shuffle_test_labels: bool = False) -> str:
    """A data set in `author_attribution build`'s layout (parquet splits text, label, book, start), authors told apart
    by a word of their own; ``shuffle_test_labels``: the same passages with the test labels permuted."""
    from datasets import ClassLabel, Features, Value
    from training_utils import write_hub_dataset

    rng = random.Random(0)
    rows = {
        split: [
            {"text": _passage(rng, label), "label": label, "book": f"{author}-{split}-{i % 2}", "start": 100 * i}
            for label, author in enumerate(AUTHORS)
            for i in range(count)
        ]
        for split, count in PER_AUTHOR.items()
    }
    for split_rows in rows.values():  # authors interleaved: the test split's order is not the labels'
        random.Random(1).shuffle(split_rows)
    if shuffle_test_labels:
        labels = [row["label"] for row in rows["test"]]
        random.Random(2).shuffle(labels)
        rows["test"] = [{**row, "label": label} for row, label in zip(rows["test"], labels)]
    features = Features(
        {"text": Value("string"), "label": ClassLabel(names=AUTHORS), "book": Value("string"), "start": Value("int64")}
    )
    return write_hub_dataset(folder, {split: [split_rows] for split, split_rows in rows.items()}, None, features)


@pytest.fixture(scope="module")
def authors_data(tmp_path_factory):
    return _authors_data(tmp_path_factory.mktemp("probe-authors") / "data")


@pytest.fixture(scope="module")
def one_layer_bert_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tinybert1")
    tokenizer = build_wordpiece_tokenizer(str(out), model_max_length=64)
    torch.manual_seed(1)
    BertModel(tiny_bert_config(max_position_embeddings=64, num_hidden_layers=1)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def _probe(data, models, output, *extra) -> dict:
    argv = ["--config", "configs/finetune/authors.yaml", "--data.dataset.path", str(data), "--models", *models]
    assert main([*argv, "--output", str(output), *extra]) == 0
    return json.loads(output.read_text())


def _predictions(folder) -> list[dict]:
    with open(os.path.join(folder, "predictions_test.tsv"), encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


@pytest.mark.parametrize("pooling,choose_c", [("all", "validation"), ("last", "validation"), ("all", "cv")])
def test_test_labels_choose_nothing(pooling, choose_c, authors_data, one_layer_bert_dir, tmp_path):
    """The same passages with the test labels shuffled: the same C, the same validation accuracy and the same test
    predictions (C chosen, scaler and probe fitted on the training and validation splits alone); only the score
    moves."""
    shuffled = _authors_data(tmp_path / "shuffled", shuffle_test_labels=True)
    runs = {}
    for name, data in (("true", authors_data), ("shuffled", shuffled)):
        runs[name] = _probe(
            data,
            [one_layer_bert_dir],
            tmp_path / f"{name}.json",
            *("--pooling", pooling, "--choose_c", choose_c, "--labels", "bert"),
            *("--predictions_dir", str(tmp_path / name)),
        )
    true, mixed = (runs[name]["models"][one_layer_bert_dir] for name in ("true", "shuffled"))
    assert (true["C"], true["accuracy"]) == (mixed["C"], mixed["accuracy"])
    assert true["test_accuracy"] >= 0.8 and mixed["test_accuracy"] != true["test_accuracy"]
    predicted = {name: [row["prediction"] for row in _predictions(tmp_path / name / "bert")] for name in runs}
    assert predicted["true"] == predicted["shuffled"]
    assert [row["label"] for row in _predictions(tmp_path / "true" / "bert")] != [
        row["label"] for row in _predictions(tmp_path / "shuffled" / "bert")
    ]


def test_all_pooling_of_a_one_layer_model_is_the_concatenation_by_hand(one_layer_bert_dir):
    """`all` of a one-layer encoder: [mean of the embeddings' output, mean of the layer's output] over each text's real
    tokens, each text run alone, then standardised with the training rows' mean and (population) deviation; `last`:
    the layer's mean, L2-normalised."""
    import numpy as np
    from transformers import AutoModel, AutoTokenizer

    from experiments.embedding_probe import pooled_states, probe_features

    model = AutoModel.from_pretrained(one_layer_bert_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(one_layer_bert_dir)
    rng = random.Random(3)
    texts = {split: [_passage(rng, i % 3) for i in range(count)] for split, count in (("train", 9), ("test", 4))}
    by_hand = {}
    with torch.no_grad():
        for split, split_texts in texts.items():
            rows = []
            for text in split_texts:
                ids = tokenizer(text, return_tensors="pt")
                embedded = model.embeddings(input_ids=ids["input_ids"], token_type_ids=ids["token_type_ids"])
                layer = model(**ids).last_hidden_state
                rows.append(torch.cat([embedded.mean(1)[0], layer.mean(1)[0]]).numpy())
            by_hand[split] = np.stack(rows)
    pooled = {
        split: pooled_states(model, tokenizer, t, batch_size=3, every_state=True).numpy() for split, t in texts.items()
    }
    assert pooled["train"].shape == (9, 2, 32)
    features = probe_features(pooled, "all")
    mean, deviation = by_hand["train"].mean(0), by_hand["train"].std(0)
    for split in texts:
        np.testing.assert_allclose(features[split], (by_hand[split] - mean) / deviation, atol=1e-4, rtol=1e-4)
    last = probe_features(pooled, "last")
    for split in texts:
        layer = by_hand[split][:, 32:]
        np.testing.assert_allclose(last[split], layer / np.linalg.norm(layer, axis=1, keepdims=True), atol=1e-5)


@pytest.fixture(scope="module")
def tiny_linformer_dir(tmp_path_factory):
    from training_utils import save_tiny_pretrained_linformer

    return save_tiny_pretrained_linformer(tmp_path_factory.mktemp("linformer"), n=64, k=8, layers=2)


@pytest.mark.parametrize("which", ["bert", "linformer"])
def test_pooled_states_ignore_padding(which, tiny_bert_dir, tiny_linformer_dir):
    """Every hidden state's pool of a passage embedded alone equals its pool in a batch padded to a longer one's
    length (the embeddings' output included, where a mean over padding would show first)."""
    from transformers import AutoModel, AutoTokenizer

    from experiments.embedding_probe import pooled_states

    folder = tiny_bert_dir if which == "bert" else tiny_linformer_dir
    model = AutoModel.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rng = random.Random(4)
    texts = [" ".join(rng.choice(FILLER + AUTHOR_WORDS) for _ in range(length)) for length in (3, 40, 9, 25)]
    together = pooled_states(model, tokenizer, texts, batch_size=4, every_state=True)  # one batch, padded to 40+
    assert together.shape == (4, model.config.num_hidden_layers + 1, model.config.hidden_size)
    for i, text in enumerate(texts):
        alone = pooled_states(model, tokenizer, [text], batch_size=1, every_state=True)[0]
        torch.testing.assert_close(together[i], alone, atol=1e-5, rtol=1e-5)


def test_predictions_follow_the_test_split_and_pair_with_the_first_model(
    authors_data, tiny_bert_dir, one_layer_bert_dir, tmp_path
):
    """predictions_test.tsv: one row a test passage in the split's order, its label the split's (as a fine-tuned
    run's, read by author_attribution.test_correct); the probes score well only if each prediction is its passage's.
    The comparison with the first model is author_attribution's statistics over those files."""
    from experiments.author_attribution import book_difference, paired_difference, split_rows, test_correct

    models = [tiny_bert_dir, one_layer_bert_dir]
    result = _probe(
        authors_data,
        models,
        tmp_path / "probe.json",
        *("--pooling", "all", "--choose_c", "validation", "--labels", "first", "second"),
        *("--predictions_dir", str(tmp_path / "predictions")),
    )
    test = split_rows(authors_data, "test")  # the parquet file's rows (load_dataset may answer from its cache)
    assert (result["train"], result["validation"], result["test"]) == (36, 12, 18)
    right = {}
    for model, label in zip(models, ("first", "second")):
        rows = _predictions(tmp_path / "predictions" / label)
        assert [int(row["index"]) for row in rows] == list(range(len(test)))
        assert [int(row["label"]) for row in rows] == [row["label"] for row in test]
        right[label] = test_correct(str(tmp_path / "predictions" / label))
        assert sum(right[label]) == result["models"][model]["test_correct"]
        assert result["models"][model]["test_accuracy"] >= 0.8  # a prediction put on another passage: near 1/3
    (pair,) = result["comparisons"]
    assert (pair["model"], pair["reference"]) == ("second", "first")
    expected = paired_difference(right["second"], right["first"])
    assert (pair["points"], pair["ci95_low"], pair["ci95_high"], pair["mcnemar_p"]) == tuple(expected.values())
    books = book_difference([right["second"]], [right["first"]], [row["book"] for row in test])
    assert {key: pair[key] for key in books} == books and pair["books"] == 6


def test_a_second_probe_reads_the_cached_states_without_running_a_model(
    authors_data, one_layer_bert_dir, tmp_path, monkeypatch
):
    """--cache_dir: the pooled states of a model over these texts, kept; the other pooling and choice of C later read
    them (no model loaded) and give what a probe that runs the model gives."""
    import transformers

    cache = str(tmp_path / "cache")
    _probe(authors_data, [one_layer_bert_dir], tmp_path / "first.json", "--cache_dir", cache)
    fresh = _probe(authors_data, [one_layer_bert_dir], tmp_path / "fresh.json", "--pooling", "all")

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded although its states were cached")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", no_model)
    cached = _probe(
        authors_data, [one_layer_bert_dir], tmp_path / "cached.json", "--pooling", "all", "--cache_dir", cache
    )
    entry, again = fresh["models"][one_layer_bert_dir], cached["models"][one_layer_bert_dir]
    assert again["cached"] and not entry["cached"]
    assert (again["C"], again["accuracy"], again["test_correct"]) == (
        entry["C"],
        entry["accuracy"],
        entry["test_correct"],
    )


def test_validation_choice_keeps_the_smallest_c_of_the_best_and_says_when_it_is_at_the_edge():
    import numpy as np

    from experiments.embedding_probe import VALIDATION_GRID, probe

    rng = np.random.default_rng(0)
    centres = np.eye(3) * 10
    features = {
        split: np.concatenate([c + rng.normal(size=(5, 3)) for c in centres])
        for split in ("train", "validation", "test")
    }
    labels = {split: [0] * 5 + [1] * 5 + [2] * 5 for split in features}
    result = probe(features, labels, "validation")  # every C separates these: the smallest is kept
    assert set(result["validation_accuracy_by_C"].values()) == {1.0}
    assert result["C"] == min(VALIDATION_GRID) and result["C_at_edge"]
    assert result["C_grid"] == list(VALIDATION_GRID) and result["test_accuracy"] == 1.0


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--pooling", "mean"], None),  # argparse: invalid choice
        (["--choose_c", "test"], None),
        (["--labels", "one", "two"], "--labels names 2 model(s)"),
        (["--choose_c", "validation"], "no labelled validation split"),
        (["--predictions_dir", "PRED"], "no labelled test split"),
    ],
)
def test_bad_requests_are_refused_before_any_model_is_loaded(
    extra, message, authors_data, tiny_bert_dir, tmp_path, capsys, monkeypatch
):
    import transformers

    import linformer_hf.training.finetuning as finetuning

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the request was checked")

    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", no_model)
    output = tmp_path / "probe.json"
    argv = ["--config", "configs/finetune/authors.yaml", "--data.dataset.path", authors_data]
    if "validation" in extra:  # a data set without a validation split (load_task_data always gives one today)
        load = finetuning.load_task_data
        monkeypatch.setattr(
            finetuning, "load_task_data", lambda recipe: {k: v for k, v in load(recipe).items() if k != "validation"}
        )
    if "PRED" in extra:  # SST-2 files without a test file: nothing to predict
        (tmp_path / "train.tsv").write_text("sentence\tlabel\n" + "city city\t1\nwar\t0\n" * 3)
        argv = ["--config", "configs/finetune/sst2.yaml", "--data.train_file", str(tmp_path / "train.tsv")]
        argv += ["--data.validation_file", str(tmp_path / "train.tsv")]
        extra = ["--predictions_dir", str(tmp_path / "predictions")]
    argv += ["--models", tiny_bert_dir, "--output", str(output), *extra]
    if message is None:
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == 2 and "invalid choice" in capsys.readouterr().err
    else:
        assert main(argv) == 2
        err = [
            line for line in capsys.readouterr().err.splitlines() if line and "examples/s]" not in line
        ]  # no progress bar
        assert len(err) == 1 and message in err[0]
    assert not output.exists() and not (tmp_path / "predictions").exists()
