"""The stylometry baseline (experiments/stylometry_baseline.py) on a tiny synthetic attribution data set, where authors
differ only by a few words of their own spread thinly through each passage: it reads each passage as a model of n
positions does (so reading more scores higher here), chooses C on the validation passages alone, writes its folder as
the project's outputs are written, and refuses bad input before any work."""

import csv
import json
import os
import random
import shutil

import pyarrow.parquet as pq
import pytest
from training_utils import write_hub_dataset

from experiments import author_attribution, stylometry_baseline
from linformer_hf.loading import vocabulary_sha256

AUTHORS = ["Ash, Ann", "Birch, Bo", "Cedar, Cy", "Dogwood, Di"]
FILLER = [a + b for a in ("ba", "ko", "ri", "mu", "te", "lo", "sa", "ne") for b in ("dan", "mel", "rot", "vik")]
MARKERS = {author: [f"zx{author[0].lower()}{word}" for word in ("quor", "plim", "vesh")] for author in AUTHORS}
WORDS = 300  # a passage's words: 300 tokens or more
PASSAGE = 256  # the manifest's passage_tokens
SHORT, LONG = 24, PASSAGE  # the readings compared: 22 and 254 tokens of text
PER_AUTHOR = {"train": 10, "validation": 4, "test": 6}


def _passage(rng, author: str) -> str:
    """Filler words, and now and then (3 in 100) one of the author's own: about 9 a passage, anywhere in it."""
    return " ".join(rng.choice(MARKERS[author]) if rng.random() < 0.03 else rng.choice(FILLER) for _ in range(WORDS))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """An attribution data set in `author_attribution build`'s layout (parquet splits text, label, book, start; its
    manifest), with a byte-level BPE tokenizer trained on its text."""
    from datasets import ClassLabel, Features, Value

    from linformer_hf.training.tokenizer import train_bpe_tokenizer

    rng = random.Random(0)
    rows = {
        split: [
            {"text": _passage(rng, author), "label": label, "book": f"{author}-{split}-{i % 2}", "start": 1000 * i}
            for label, author in enumerate(AUTHORS)
            for i in range(count)
        ]
        for split, count in PER_AUTHOR.items()
    }
    root = tmp_path_factory.mktemp("stylometry")
    tokenizer = train_bpe_tokenizer(
        (row["text"] for split in rows.values() for row in split), str(root / "tokenizer"), vocab_size=400
    )
    features = Features(
        {"text": Value("string"), "label": ClassLabel(names=AUTHORS), "book": Value("string"), "start": Value("int64")}
    )
    folder = write_hub_dataset(
        root / "data", {split: [split_rows] for split, split_rows in rows.items()}, None, features
    )
    manifest = {
        "tokenizer": str(root / "tokenizer"),
        "vocabulary_sha256": vocabulary_sha256(tokenizer.get_vocab()),
        "passage_tokens": PASSAGE,
        "authors": len(AUTHORS),
        "passages": {split: len(split_rows) for split, split_rows in rows.items()},
    }
    with open(os.path.join(folder, author_attribution.MANIFEST), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh)
    return folder


@pytest.fixture(scope="module")
def baseline(data, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("baseline") / "out")
    stylometry_baseline.run(data, out, lengths=[LONG, SHORT], features=["word", "char"])
    return out


def _results(folder) -> dict:
    with open(os.path.join(folder, "results.csv"), encoding="utf-8") as fh:
        return {(row["features"], int(row["length"])): row for row in csv.DictReader(fh)}


def _predictions(folder, features, length) -> list[dict]:
    path = os.path.join(folder, "runs", f"{features}-n{length}", "predictions_test.tsv")
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def test_a_reading_is_what_the_model_reads_and_reading_more_scores_higher(data, baseline):
    from transformers import AutoTokenizer

    with open(os.path.join(data, author_attribution.MANIFEST), encoding="utf-8") as fh:
        tokenizer = AutoTokenizer.from_pretrained(json.load(fh)["tokenizer"])
    texts = [row["text"] for row in author_attribution.split_rows(data, "test")]
    for n in (SHORT, LONG):
        read = stylometry_baseline.read_first(texts, tokenizer, n)
        # the text of fine-tuning's truncated input (<s> and </s> around n - 2 tokens), to trailing whitespace
        model_reads = [
            tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            for ids in tokenizer(texts, truncation=True, max_length=n)["input_ids"]
        ]
        assert [text.rstrip() for text in read] == [text.rstrip() for text in model_reads]
        assert all(len(ids) == n - 2 for ids in tokenizer(read, add_special_tokens=False)["input_ids"])
        assert all(len(cut) < len(text) for cut, text in zip(read, texts))  # every passage is cut, even at LONG

    results = _results(baseline)
    assert sorted(results) == [("char", SHORT), ("char", LONG), ("word", SHORT), ("word", LONG)]
    for features in ("word", "char"):
        short, long = (
            float(results[(features, SHORT)]["test_accuracy"]),
            float(results[(features, LONG)]["test_accuracy"]),
        )
        assert long > short and long >= 0.9, (features, short, long)  # a reading not cut would score alike
        assert int(results[(features, LONG)]["content_tokens"]) == LONG - 2


def test_c_is_chosen_on_the_validation_passages_alone_and_runs_repeat(data, baseline, tmp_path):
    """Test labels permuted: the same C, validation accuracy and answers (only the scores change); run again on the
    same data: the same results to the digit."""
    permuted = str(tmp_path / "permuted")
    shutil.copytree(data, permuted)
    path = os.path.join(permuted, "test-00000-of-00001.parquet")
    table = pq.read_table(path)
    labels = table["label"].to_pylist()
    random.Random(1).shuffle(labels)
    assert labels != table["label"].to_pylist()
    pq.write_table(table.set_column(table.schema.get_field_index("label"), "label", [labels]), path)
    stylometry_baseline.run(permuted, str(tmp_path / "out-permuted"), lengths=[SHORT, LONG], features=["word", "char"])
    stylometry_baseline.run(data, str(tmp_path / "out-again"), lengths=[SHORT, LONG], features=["word", "char"])

    first, again, shuffled = _results(baseline), _results(tmp_path / "out-again"), _results(tmp_path / "out-permuted")
    for key, row in first.items():
        assert {k: v for k, v in again[key].items() if k != "seconds"} == {
            k: v for k, v in row.items() if k != "seconds"
        }
        assert (shuffled[key]["C"], shuffled[key]["validation_accuracy"]) == (row["C"], row["validation_accuracy"])
        answers = [r["prediction"] for r in _predictions(baseline, *key)]
        assert [r["prediction"] for r in _predictions(tmp_path / "out-again", *key)] == answers
        assert [r["prediction"] for r in _predictions(tmp_path / "out-permuted", *key)] == answers
        assert [int(r["label"]) for r in _predictions(tmp_path / "out-permuted", *key)] == labels


def test_the_folder_holds_answers_aligned_with_the_test_split_and_is_never_written_over(
    data, baseline, tmp_path, monkeypatch
):
    labels = [row["label"] for row in author_attribution.split_rows(data, "test", ["label"])]
    results = _results(baseline)
    for features, length in results:
        rows = _predictions(baseline, features, length)
        assert [int(r["index"]) for r in rows] == list(range(len(labels)))
        assert [int(r["label"]) for r in rows] == labels
        right = author_attribution.test_correct(os.path.join(baseline, "runs", f"{features}-n{length}"))
        assert sum(right) == int(results[(features, length)]["test_correct"])
    assert sorted(os.listdir(baseline)) == sorted(stylometry_baseline.FILES)
    with open(os.path.join(baseline, "results.md"), encoding="utf-8") as fh:
        report = fh.read()
    assert f"| word | {LONG:,} | {SHORT:,} | " in report and f"| char | {LONG:,} | {SHORT:,} | " in report
    with open(os.path.join(baseline, stylometry_baseline.RECORD), encoding="utf-8") as fh:
        assert json.load(fh)["test_passages_sha256"] == author_attribution.test_passages_sha256(data)
    assert not [name for name in os.listdir(os.path.dirname(baseline)) if name.startswith(".tmp-")]

    out = str(tmp_path / "out")
    shutil.copytree(baseline, out)
    calls = []
    monkeypatch.setattr(stylometry_baseline, "fit", lambda *args: calls.append(args) or pytest.fail("fitted"))
    with pytest.raises(FileExistsError, match="not empty"):
        stylometry_baseline.run(data, out, lengths=[SHORT])
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not an earlier stylometry baseline's folder"):
        stylometry_baseline.run(data, str(other), lengths=[SHORT], overwrite=True)
    assert not calls and (other / "notes.txt").read_text() == "mine"

    monkeypatch.undo()
    stylometry_baseline.run(data, out, lengths=[SHORT], features=["word"], overwrite=True)  # replaced whole
    assert sorted(_results(out)) == [("word", SHORT)] and os.listdir(os.path.join(out, "runs")) == [f"word-n{SHORT}"]
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--lengths", str(PASSAGE + 1)], f"passages hold {PASSAGE} tokens"),
        (["--lengths", "2"], "give lengths from 3 to 256"),
        (["--lengths", "24", "24"], "names one twice"),
        (["--features", "word", "syntax"], "--features syntax: unknown"),
        (["--tokenizer", "OTHER"], "is not the one"),
        (["--data", "TOKENIZER"], "has no authors_manifest.json"),
        (["--data", "MISSING"], "has no authors_manifest.json"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_work(arguments, message, data, tmp_path, monkeypatch, capsys):
    from linformer_hf.training.tokenizer import train_bpe_tokenizer

    with open(os.path.join(data, author_attribution.MANIFEST), encoding="utf-8") as fh:
        tokenizer = json.load(fh)["tokenizer"]
    if "OTHER" in arguments:
        train_bpe_tokenizer(["another text, another vocabulary"] * 4, str(tmp_path / "other"), vocab_size=300)
    swap = {"OTHER": str(tmp_path / "other"), "TOKENIZER": tokenizer, "MISSING": str(tmp_path / "missing")}
    arguments = [swap.get(a, a) for a in arguments]
    monkeypatch.setattr(stylometry_baseline, "read_first", lambda *args: pytest.fail("read the passages"))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        stylometry_baseline.main(["--data", data, "--output_dir", str(out), *arguments])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and "Traceback" not in err, err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert not out.exists()
