"""Author attribution (experiments/author_attribution.py): the data set built end to end from a few real books cut
short (passages of held-out books only in the test split, passages of the requested length, labels named by author,
the same passages for the same seed), the recipe configs/finetune/authors.yaml fine-tuning on it to the end, and the
comparison running each model once (resumable) and reporting accuracy and time per passage."""

import csv
import glob
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from training_utils import (
    DATA,
    REPO,
    WIKITEXT,
    claimed_by_another_driver,
    save_tiny_pretrained_linformer,
    signal_this_process_once_started,
    stoppable_child,
    write_hub_dataset,
)

from experiments import author_attribution
from linformer_hf import outputs
from linformer_hf.loading import model_sha256
from linformer_hf.training.config import ConfigError, FinetuneRecipe, load_recipe
from linformer_hf.training.finetuning import run_finetuning

BOOKS = os.path.join(DATA, "gutenberg")
MARKER = "Zqxjheldoutmarker"  # at the start of every paragraph of the held-out books, and nowhere else
BOOK_CHARACTERS = 9_000  # each stand-in book: the real start of the book (title page included), about 2,000 tokens
PASSAGE = 128  # tokens: the tiny Linformer's n
AUTHORS = ["Alcott, Louisa May", "Alger, Horatio, Jr.", "Andersen, H. C. (Hans Christian)"]
BUILD = dict(passage_tokens=PASSAGE, train_per_author=6, dev_per_author=2, test_per_author=3, edge_characters=300)


def _rows(path: str, groups: list[int]) -> list[dict]:
    parquet = pq.ParquetFile(path)
    rows = [row for group in groups for row in parquet.read_row_group(group).to_pylist()]
    return [{**row, "text": row["text"][:BOOK_CHARACTERS]} for row in rows]


@pytest.fixture(scope="module")
def books(tmp_path_factory):
    """A folder like ../shared/data/gutenberg: two training books of each of three authors (the real first books of
    train shard 0), one more book under an author who has no held-out book, and each author's real held-out book
    with a marker at the start of every paragraph."""
    training = _rows(os.path.join(BOOKS, "train-00000-of-00006.parquet"), [0, 1])
    held_out = _rows(os.path.join(BOOKS, "validation.parquet"), [0])
    train = [book for author in AUTHORS for book in [b for b in training if b["author"] == author][:2]]
    spare = next(b for b in training if b["author"] == AUTHORS[0] and b not in train)
    train.append({**spare, "author": "Nobody, Training Only"})
    validation = [
        {**book, "text": book["text"].replace("\n\n", f"\n\n{MARKER} ")}
        for author in AUTHORS
        for book in held_out
        if book["author"] == author
    ]
    assert len(train) == 7 and len(validation) == 3
    folder = tmp_path_factory.mktemp("books") / "gutenberg"
    return write_hub_dataset(folder, {"train": [train[:4], train[4:]], "validation": [validation]})


@pytest.fixture(scope="module")
def linformer(tmp_path_factory):
    return save_tiny_pretrained_linformer(tmp_path_factory.mktemp("linformer"), n=PASSAGE, k=16, layers=1)


@pytest.fixture(scope="module")
def data(books, linformer, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("authors") / "data")
    manifest = author_attribution.build_dataset(books, linformer, out, seed=1, **BUILD)
    return out, manifest


def _splits(folder):
    from datasets import load_dataset

    return load_dataset(folder)


def _texts(books, split):
    return [
        row["text"]
        for path in sorted(os.listdir(books))
        if path.startswith(split)
        for row in pq.read_table(os.path.join(books, path)).to_pylist()
    ]


def test_held_out_books_reach_only_the_test_split(books, data):
    folder, manifest = data
    splits = _splits(folder)
    held_out_ids = {
        row["id"] for row in pq.read_table(os.path.join(books, "validation-00000-of-00001.parquet")).to_pylist()
    }
    held_out_texts = _texts(books, "validation")
    for split in ("train", "validation"):
        assert not set(splits[split]["book"]) & held_out_ids
        assert not any(MARKER in text for text in splits[split]["text"])
        assert not any(text in book for text in splits[split]["text"] for book in held_out_texts)
    assert set(splits["test"]["book"]) <= held_out_ids
    assert all(any(text in book for book in held_out_texts) for text in splits["test"]["text"])
    assert sum(MARKER in text for text in splits["test"]["text"]) >= 1
    # The model is chosen on other passages of the training books: none of them is a training passage.
    assert not set(zip(splits["train"]["book"], splits["train"]["start"])) & set(
        zip(splits["validation"]["book"], splits["validation"]["start"])
    )
    assert manifest["passages"] == {split: len(splits[split]) for split in ("train", "validation", "test")}


def test_labels_are_the_authors_with_a_held_out_book_balanced(data):
    folder, manifest = data
    splits = _splits(folder)
    for split in splits.values():
        assert split.features["label"].names == AUTHORS  # "Nobody, Training Only" has no held-out book: no class
    per_author = {split: [list(splits[split]["label"]).count(i) for i in range(3)] for split in splits}
    assert per_author == {"train": [6, 6, 6], "validation": [2, 2, 2], "test": [3, 3, 3]}
    assert manifest["authors"] == 3 and manifest["per_author"][AUTHORS[0]] == {"train": 6, "validation": 2, "test": 3}


def test_passages_have_the_requested_length_and_end_on_a_word(data, linformer):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(linformer)
    splits = _splits(data[0])
    texts = [text for split in splits.values() for text in split["text"]]
    lengths = [len(ids) for ids in tokenizer(texts, verbose=False)["input_ids"]]  # with <s> and </s>
    assert min(lengths) >= PASSAGE
    shorter = [len(ids) for ids in tokenizer([t.rsplit(None, 1)[0] for t in texts], verbose=False)["input_ids"]]
    assert max(shorter) < PASSAGE  # the passage ends at the first word boundary after PASSAGE tokens
    assert all(not text[0].isspace() and not text[-1].isspace() for text in texts)


def test_the_same_seed_gives_the_same_passages(books, linformer, data, tmp_path):
    again = author_attribution.build_dataset(books, linformer, str(tmp_path / "again"), seed=1, **BUILD)
    other = author_attribution.build_dataset(books, linformer, str(tmp_path / "other"), seed=2, **BUILD)
    first = _splits(data[0])
    assert _splits(str(tmp_path / "again"))["train"]["text"] == first["train"]["text"]
    assert _splits(str(tmp_path / "other"))["train"]["text"] != first["train"]["text"]
    assert again["passages"] == data[1]["passages"] and other["authors"] == 3
    with pytest.raises(FileExistsError):  # an earlier data set is never replaced silently
        author_attribution.build_dataset(books, linformer, str(tmp_path / "again"), seed=1, **BUILD)


def test_the_recipe_fine_tunes_to_the_end_and_answers_an_author(data, linformer, tmp_path):
    from transformers import pipeline

    recipe = load_recipe(
        FinetuneRecipe,
        os.path.join(REPO, "configs", "finetune", "authors.yaml"),
        extra={
            "model.pretrained": linformer,
            "data.dataset": {"path": data[0]},
            "training.output_dir": str(tmp_path / "run"),
            "training.max_steps": 3,
            "training.per_device_train_batch_size": 6,
            "training.learning_rate": 1e-3,
        },
    )
    result = run_finetuning(recipe, show_progress=False)
    assert result["steps"] == 3
    assert result["test"]["examples"] == 9 and 0 <= result["test"]["accuracy"] <= 1
    assert result["test"]["seconds_per_example"] > 0
    classify = pipeline("text-classification", model=result["best_dir"])
    answer = classify(_splits(data[0])["test"]["text"][0], truncation=True)[0]
    assert answer["label"] in AUTHORS


def _tiny_roberta(out, tokenizer_dir, n: int = 64) -> str:
    """A tiny RoBERTa masked LM of n positions with the Linformer's tokenizer: the teacher at its own n."""
    import torch
    from transformers import AutoTokenizer, RobertaConfig, RobertaForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=n + tokenizer.pad_token_id + 1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    RobertaForMaskedLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def test_compare_runs_each_model_once_and_reports(data, linformer, tmp_path, monkeypatch, forked_subprocesses):
    """Each model's fine-tuning command, run in this process (the command's own main), once: a second compare
    finds every run finished and only reports."""
    from linformer_hf.training import finetune

    calls = []

    def run_in_process(args, log, claim):
        assert args[1:3] == ["-m", "linformer_hf.training.finetune"]
        calls.append(args)
        return finetune.main(args[3:]), None

    monkeypatch.setattr(author_attribution, "run_child", run_in_process)
    monkeypatch.chdir(REPO)  # the recipe's path, as from a checkout
    teacher = _tiny_roberta(tmp_path / "teacher", linformer)
    out = str(tmp_path / "compare")
    shared = {"training.max_steps": 2, "training.per_device_train_batch_size": 6}
    text = author_attribution.compare(data[0], out, linformer, teacher, (PASSAGE,), shared=shared)
    assert [args[args.index("--training.output_dir") + 1] for args in calls] == [
        os.path.join(out, "runs", name) for name in ("linformer", "teacher", f"full-n{PASSAGE}")
    ]
    with open(os.path.join(out, "results.csv"), encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["run"], int(r["n"])) for r in rows] == [("linformer", PASSAGE), ("teacher", 64), ("full-n128", PASSAGE)]
    assert all(float(r["seconds_per_passage"]) > 0 and int(r["test_passages"]) == 9 for r in rows)
    assert "| full-n128 | 128 |" in text and os.path.isfile(os.path.join(out, "results.md"))
    assert rows[1]["vs_teacher_points"] == "" and rows[0]["vs_teacher_mcnemar_p"] != ""  # each against the teacher
    assert all(float(r["training_seconds"]) > 0 and r["training_segments_unended"] == "0" for r in rows)
    assert ">=" not in text
    assert "- linformer against full-n128: " in text  # and the Linformer against full attention
    with open(os.path.join(out, "compare.json"), encoding="utf-8") as fh:
        record = json.load(fh)
    assert record["test_passages_sha256"] == author_attribution.test_passages_sha256(data[0])
    assert record["reading_length"] == {"linformer": PASSAGE, "teacher": 64, f"full-n{PASSAGE}": PASSAGE}
    with open(os.path.join(out, "models", f"teacher-n{PASSAGE}", "extension_report.json")) as fh:
        assert json.load(fh)["source_positions"] == 64  # the teacher's 64 positions copied out to 128
    calls.clear()
    author_attribution.compare(data[0], out, linformer, teacher, (PASSAGE,), shared=shared)
    assert calls == []  # finished runs are not repeated
    # another seed into the same folder would report these runs as its own: refused before any run
    with pytest.raises(
        ConfigError, match=r"other settings \(the overrides and seed \(then .*, now .*'training.seed': 3"
    ):
        author_attribution.compare(data[0], out, linformer, teacher, (PASSAGE,), shared={**shared, "training.seed": 3})
    linked = tmp_path / "linked"
    linked.symlink_to(os.path.dirname(teacher))  # the same teacher through a link (a worktree's outputs) is accepted
    author_attribution.record_comparison(
        out,
        data[0],
        author_attribution.plan_runs(None, str(linked / os.path.basename(teacher)), [], out),
        shared,
        seed=1,
    )
    with pytest.raises(ConfigError, match="the teacher model differ"):
        author_attribution.compare(data[0], out, teacher=linformer, full_lengths=(), shared=shared)
    assert calls == []


def test_a_compared_model_is_its_weights_not_its_path(data, linformer, tmp_path, monkeypatch):
    """A model folder moved or copied (a project moved to another disk) is the same model; one retrained in place is
    another, though its path is the same. A compare.json that names a model by its path alone (as written before the
    hash) is still accepted for that path. A folder that several runs start from is read once."""
    teacher = _tiny_roberta(tmp_path / "teacher", linformer)
    out = str(tmp_path / "compare")
    hashed = []
    monkeypatch.setattr(
        author_attribution, "model_sha256", lambda folder: hashed.append(folder) or model_sha256(folder)
    )

    def record(model):
        runs = author_attribution.plan_runs(None, str(model), [PASSAGE], out)
        author_attribution.record_comparison(out, data[0], runs, {})

    record(teacher)
    assert hashed == [str(teacher)]  # the teacher and full-n128 start from it: hashed once
    os.makedirs(os.path.join(out, "runs", "teacher"))
    with open(os.path.join(out, "runs", "teacher", "results.json"), "w", encoding="utf-8") as fh:
        fh.write("{}")  # a finished run: the record is checked from now on
    moved = tmp_path / "elsewhere" / "teacher"
    shutil.copytree(teacher, moved)
    record(moved)
    with open(os.path.join(out, "compare.json"), encoding="utf-8") as fh:
        models = json.load(fh)["models"]
    assert models["teacher"]["path"] == os.path.realpath(moved) and models["full-n128"] == models["teacher"]
    with open(moved / "config.json", encoding="utf-8") as fh:
        config = json.load(fh)
    with open(moved / "config.json", "w", encoding="utf-8") as fh:
        json.dump({**config, "layer_norm_eps": 1e-6}, fh)  # the same path, another model
    with pytest.raises(ConfigError, match="the teacher model; the full-n128 model differ"):
        record(moved)
    with open(os.path.join(out, "compare.json"), encoding="utf-8") as fh:
        legacy = json.load(fh)
    legacy["models"] = {name: os.path.realpath(moved) for name in legacy["models"]}
    with open(os.path.join(out, "compare.json"), "w", encoding="utf-8") as fh:
        json.dump(legacy, fh)
    record(moved)  # the path alone: accepted for that path, and the hash written
    with pytest.raises(ConfigError, match="the teacher model; the full-n128 model differ"):
        record(teacher)


def test_compare_refuses_a_model_with_another_tokenizer(data, tmp_path):
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    other = tmp_path / "other"
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(other), vocab_size=600, model_max_length=PASSAGE)
    with pytest.raises(ConfigError, match="not the one the passages were cut with"):
        author_attribution.compare(data[0], str(tmp_path / "out"), linformer=str(other))


def test_compare_refuses_an_only_that_names_no_run(data, linformer, tmp_path):
    """A misspelt --only, or one naming a run the other arguments do not make, would otherwise run nothing and report
    the folder as if done: refused before any work."""
    out = tmp_path / "out"
    for only, kwargs in [
        (["full-n4069"], {"teacher": linformer, "full_lengths": (4096,)}),
        (["teacher", "linformer"], {"linformer": linformer, "full_lengths": ()}),
    ]:
        with pytest.raises(ConfigError, match=f"--only {only[0]}: no such run"):
            author_attribution.compare(data[0], str(out), only=only, **kwargs)
    assert not out.exists()


def test_the_task_refuses_labels_without_class_names(linformer, tmp_path):
    """The authors task takes its classes from the training split's ClassLabel: a plain integer label column is
    refused before any model is loaded."""
    from linformer_hf.training.finetuning import load_task_data

    rows = [{"text": f"passage {i}", "label": i % 2} for i in range(4)]

    plain = write_hub_dataset(tmp_path / "plain", {"train": [rows], "validation": [rows]})
    extra = {"model.pretrained": linformer, "data.dataset": {"path": plain}, "training.output_dir": str(tmp_path)}
    recipe = load_recipe(FinetuneRecipe, os.path.join(REPO, "configs", "finetune", "authors.yaml"), extra=extra)
    with pytest.raises(ConfigError, match="must be a ClassLabel"):
        load_task_data(recipe)


def test_fine_tuning_the_task_on_what_is_not_its_data_set_is_refused_before_any_work(
    books, data, linformer, tmp_path, capsys
):
    """data.task authors fine-tuned on any folder of texts and ClassLabel labels as the author-attribution data set
    (no authors_manifest.json: passages of no known length), and on passages cut in another tokenizer's tokens than
    the model's (another amount of text each; fewer than n: padding). Each is refused in one line naming the problem
    and the fix, before the output folder is made."""
    from linformer_hf.training import finetune
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    unbuilt = tmp_path / "unbuilt"
    shutil.copytree(data[0], unbuilt)
    os.remove(unbuilt / author_attribution.MANIFEST)
    other = tmp_path / "other-tokenizer"
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(other), vocab_size=600, model_max_length=PASSAGE)
    short = str(tmp_path / "short")  # passages of half the model's n: it would read padding
    author_attribution.build_dataset(books, linformer, short, seed=1, **{**BUILD, "passage_tokens": PASSAGE // 2})
    out = tmp_path / "run"
    for folder, extra, message in [
        (unbuilt, [], f"data.dataset {unbuilt} has no authors_manifest.json: it is not a data set built for data.task"),
        (short, [], f"its passages hold {PASSAGE // 2} tokens, and the model reads {PASSAGE} (its n)"),
        (
            data[0],
            ["--model.tokenizer", str(other)],
            f"its passages were cut in tokens of another tokenizer ({linformer}) than the model's ({other})",
        ),
        (tmp_path / "nowhere", [], f"data.dataset {tmp_path / 'nowhere'} is not a local folder"),
    ]:
        code = finetune.main(
            ["--config", os.path.join(REPO, author_attribution.RECIPE), "--no_progress"]
            + ["--model.pretrained", linformer, "--data.dataset", json.dumps({"path": str(folder)})]
            + ["--training.output_dir", str(out), "--training.max_steps", "1", *extra]
        )
        lines = capsys.readouterr().err.strip().splitlines()
        assert (code, len(lines)) == (2, 1) and not out.exists()  # before: it fine-tuned, and exited 0
        assert message in lines[0] and "python -m experiments.author_attribution build --tokenizer" in lines[0]


def test_a_stopped_run_resumes_and_a_copy_must_be_longer_than_the_teacher(
    data, linformer, tmp_path, forked_subprocesses
):
    run = {"name": "teacher", "model": linformer, "source": linformer, "n": None}
    out = str(tmp_path / "compare")
    fresh = author_attribution.command(run, data[0], out, author_attribution.RECIPE, {"training.seed": 2})
    assert "--training.resume_from_checkpoint" not in fresh and fresh[fresh.index("--training.seed") + 1] == "2"
    os.makedirs(os.path.join(out, "runs", "teacher", "checkpoint-4"))  # stopped after its first evaluation
    resumed = author_attribution.command(run, data[0], out, author_attribution.RECIPE, {})
    assert resumed[-2:] == ["--training.resume_from_checkpoint", "latest"]
    teacher = _tiny_roberta(tmp_path / "teacher", linformer)
    with pytest.raises(ConfigError, match="not longer than the teacher's n=64"):
        author_attribution.compare(
            data[0],
            out,
            teacher=teacher,
            full_lengths=(64,),
            recipe=os.path.join(REPO, "configs", "finetune", "authors.yaml"),
        )


def test_the_paired_difference_against_the_teacher():
    """Points of accuracy over the same passages, a paired bootstrap interval, and the exact McNemar p: 10 passages
    only one model gets right, all of them the first, is p = 2 / 2^10; equal answers differ by 0 with p = 1."""
    teacher = [True] * 20 + [False] * 30
    better = [True] * 20 + [True] * 10 + [False] * 20
    result = author_attribution.paired_difference(better, teacher)
    assert result["vs_teacher_points"] == 20.0
    assert result["vs_teacher_ci95_low"] > 0 and result["vs_teacher_ci95_high"] <= 40.0
    assert result["vs_teacher_mcnemar_p"] == round(2 / 2**10, 4)
    same = author_attribution.paired_difference(teacher, teacher)
    assert (same["vs_teacher_points"], same["vs_teacher_ci95_low"], same["vs_teacher_mcnemar_p"]) == (0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="not the same test passages"):
        author_attribution.paired_difference(better[:-1], teacher)


def refuse_model_loading(monkeypatch):
    """From here on, rescore scoring any model fails the test: what follows must be refused before a model loads."""

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the refusal")

    monkeypatch.setattr(author_attribution, "predict_passages", no_model)


def _fake_compare(folder, data, shared, answers, seed=None, recipe=author_attribution.RECIPE, reading=None):
    """A compare folder as compare leaves it, without fine-tuning: compare.json (with the tokens each run reads,
    ``reading``, when given), and each run's results.json and predictions_test.tsv with the given right (1) / wrong
    (0) answers on the data's test passages."""
    runs = [{"name": name, "source": f"/models/{name}"} for name in answers]
    author_attribution.record_comparison(
        str(folder), data, runs, shared, os.path.join(REPO, recipe), seed, reading_lengths=reading
    )
    for name, right in answers.items():
        run = folder / "runs" / name
        run.mkdir(parents=True)
        (run / "results.json").write_text("{}")
        lines = ["index\tprediction\tlabel"] + [f"{i}\t{0 if ok else 1}\t0" for i, ok in enumerate(right)]
        (run / "predictions_test.tsv").write_text("\n".join(lines) + "\n")
    return str(folder)


def test_pool_averages_seeds_passage_by_passage_and_refuses_what_is_not_the_same_test(data, tmp_path):
    """Two seeds of the same 9 test passages: each run's accuracy per seed and its mean; each pair's difference is
    the mean over passages of the seeds' mean difference. A run finished in one folder only is named, not pooled.
    Refused: one folder, the same folder twice, the same comparison twice, other test passages, an output folder
    that is a pooled one or holds other files."""
    one = _fake_compare(
        tmp_path / "seed1",
        data[0],
        {"training.seed": 1},
        {"linformer": [1, 1, 1, 0, 0, 0, 0, 0, 1], "teacher": [1, 0, 0, 0, 0, 0, 0, 0, 1], "full-n4096": [1] * 9},
    )
    two = _fake_compare(
        tmp_path / "seed2",
        data[0],
        {"training.seed": 2},
        {"linformer": [1, 1, 0, 0, 0, 0, 0, 0, 0], "teacher": [1, 0, 1, 0, 0, 0, 0, 0, 0]},
    )
    out = str(tmp_path / "pooled")
    text = author_attribution.pool([one, two], out)
    with open(os.path.join(out, "pooled.csv"), encoding="utf-8") as fh:
        rows = {r["run"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"linformer", "teacher"}
    assert (
        rows["linformer"]["test_accuracy_per_seed"] == "44.4 22.2"
        and float(rows["linformer"]["test_accuracy_mean"]) == 33.3
    )
    assert rows["teacher"]["test_accuracy_mean"] == "22.2"
    with open(os.path.join(out, "pairs.csv"), encoding="utf-8") as fh:
        (pair,) = list(csv.DictReader(fh))
    # linformer - teacher, passage by passage: [0, 1, 1, 0, ...] and [0, 1, -1, 0, ...], averaged over the seeds
    # [0, 1, 0, 0, ...]: 1/9
    assert (pair["run"], pair["reference"], float(pair["points"])) == ("linformer", "teacher", 11.1)
    assert float(pair["ci95_low"]) < 11.1 < float(pair["ci95_high"]) and 0 < float(pair["p"]) <= 1
    assert "full-n4096 (finished in " in text and "Not pooled" in text
    with pytest.raises(FileExistsError, match="holds an earlier pool's results.*--overwrite"):
        author_attribution.pool([one, two], out)  # an earlier pool is not replaced without a word
    author_attribution.pool([one, two], out, overwrite=True)
    same = _fake_compare(
        tmp_path / "again",
        data[0],
        {"training.seed": 1},
        {"linformer": [1] * 9, "teacher": [0] * 9, "full-n4096": [0] * 9},
    )
    other_data = tmp_path / "other-data"
    other_data.mkdir()
    import pyarrow.parquet as pq

    table = pq.read_table(os.path.join(data[0], "test-00000-of-00001.parquet"))
    pq.write_table(table.slice(1), str(other_data / "test-00000-of-00001.parquet"))  # one passage fewer
    other = _fake_compare(tmp_path / "other", str(other_data), {"training.seed": 3}, {"teacher": [0] * 8})
    for folders, output, match in [
        ([one], out, "two compare folders or more"),
        ([one, one], out, "the same folder twice"),
        ([one, same], out, "the same comparison twice"),
        ([one, other], out, "other test passages"),
        ([one, two], one, "is one of the pooled folders"),
        ([one, two], str(tmp_path / "seed2" / "runs"), "holds files that pool did not write"),
    ]:
        with pytest.raises((ConfigError, FileExistsError), match=match):
            author_attribution.pool(folders, output)
    assert not os.path.exists(os.path.join(one, "runs", "pooled.csv"))
    with pytest.raises(ConfigError, match="has no compare.json"):
        author_attribution.pool([one, str(tmp_path / "seed2" / "runs")], out)


def test_a_pool_stopped_while_writing_leaves_the_earlier_pool_whole(data, tmp_path, monkeypatch, send_sigterm):
    """pool wrote pooled.csv, pairs.csv and results.md one by one into --output_dir: a stop between them left the new
    tables beside the earlier report. Now the new pool is written in a staging folder beside it and replaces the
    folder whole: stopped (SIGTERM while writing its report), the earlier pool is as it was and no staging is left;
    a pool that ends replaces every file."""
    one = _fake_compare(tmp_path / "seed1", data[0], {"training.seed": 1}, {"linformer": [1] * 9, "teacher": [0] * 9})
    two = _fake_compare(tmp_path / "seed2", data[0], {"training.seed": 2}, {"linformer": [1] * 9, "teacher": [1] * 9})
    three = _fake_compare(tmp_path / "seed3", data[0], {"training.seed": 3}, {"linformer": [0] * 9, "teacher": [1] * 9})
    out = tmp_path / "pooled"
    author_attribution.pool([one, two], str(out))
    earlier = {name: (out / name).read_text() for name in sorted(os.listdir(out))}
    assert sorted(earlier) == sorted(author_attribution.POOL_FILES)

    writes = []
    write_text = author_attribution.write_text_atomic

    def stopped_at_the_report(path, text):
        writes.append(os.path.basename(path))
        if os.path.basename(path) == "results.md":
            send_sigterm()
        write_text(path, text)

    with monkeypatch.context() as patch:
        patch.setattr(author_attribution, "write_text_atomic", stopped_at_the_report)  # results.md
        patch.setattr(outputs, "write_text_atomic", stopped_at_the_report)  # the tables (outputs.write_csv_atomic)
        with pytest.raises(KeyboardInterrupt):
            author_attribution.main(["pool", one, two, three, "--output_dir", str(out), "--overwrite"])
    assert writes == ["pooled.csv", "pairs.csv", "results.md"]  # stopped after the tables were written
    assert {name: (out / name).read_text() for name in sorted(os.listdir(out))} == earlier
    assert sorted(os.listdir(tmp_path)) == ["pooled", "seed1", "seed2", "seed3"]  # no staging folder, no record

    text = author_attribution.pool([one, two, three], str(out), overwrite=True)
    assert (out / "results.md").read_text() == text and "over 3 comparisons" in text
    assert all((out / name).read_text() != earlier[name] for name in earlier)
    assert sorted(os.listdir(tmp_path)) == ["pooled", "seed1", "seed2", "seed3"]

    # Two pools into one new folder at once: the later one to end is refused, not put in place of the other's.
    fresh = tmp_path / "fresh"

    def another_pool_ends_first(path, text):
        if os.path.basename(path) == "results.md" and not started:
            started.append(True)
            author_attribution.pool([one, two], str(fresh))
        write_text(path, text)

    started = []

    with monkeypatch.context() as patch:
        patch.setattr(author_attribution, "write_text_atomic", another_pool_ends_first)
        with pytest.raises(FileExistsError, match="was filled by another run while this one worked"):
            author_attribution.pool([one, two, three], str(fresh))
    assert "over 2 comparisons" in (fresh / "results.md").read_text()
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]


def test_pool_refuses_runs_of_one_name_that_read_other_lengths(data, tmp_path, capsys):
    """A run name may stand for other models in other folders (another pretraining seed's): a linformer of another n
    reads other tokens of each passage, which pooled would pass for seed noise. Refused in one line naming the run,
    the folders and the lengths; a folder recorded before the lengths were (2026-11-28) leaves them unknown, and is
    pooled with either."""
    answers = {"linformer": [1] * 9, "teacher": [0] * 9}
    one = _fake_compare(
        tmp_path / "one", data[0], {"training.seed": 1}, answers, reading={"linformer": 128, "teacher": 64}
    )
    two = _fake_compare(
        tmp_path / "two", data[0], {"training.seed": 2}, answers, reading={"linformer": 96, "teacher": 64}
    )
    out = str(tmp_path / "pooled")
    with pytest.raises(SystemExit) as stop:
        author_attribution.main(["pool", one, two, "--output_dir", out])
    error = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(error.splitlines()) == 1
    assert f"the linformer runs read other numbers of tokens of each passage ({one}: 128; {two}: 96)" in error
    assert not os.path.exists(out)
    legacy = _fake_compare(tmp_path / "legacy", data[0], {"training.seed": 3}, answers)
    same = _fake_compare(tmp_path / "same", data[0], {"training.seed": 4}, answers, reading={"linformer": 128})
    assert "| linformer | 100.0 100.0 100.0 | 100.0 |" in author_attribution.pool([one, legacy, same], out)
    with pytest.raises(ConfigError, match=f"the linformer runs read other .*{two}: 96; .*same: 128"):
        author_attribution.pool([legacy, two, same], out, overwrite=True)  # the unknown one aside


def test_the_pooled_difference_is_the_paired_one_for_one_seed_and_averages_seeds():
    """One seed: the same points and interval as `paired_difference`, and a p near McNemar's. A passage's difference
    is averaged over seeds: one seed +1 and the other -1 on every passage is 0 points, p = 1."""
    teacher = [True] * 20 + [False] * 30
    better = [True] * 20 + [True] * 10 + [False] * 20
    pooled = author_attribution.pooled_difference([better], [teacher])
    paired = author_attribution.paired_difference(better, teacher)
    assert (pooled["points"], pooled["ci95_low"], pooled["ci95_high"]) == (
        paired["vs_teacher_points"],
        paired["vs_teacher_ci95_low"],
        paired["vs_teacher_ci95_high"],
    )
    # 10 passages differ, all one way: the exact sign-flip p is 2 / 2^10 = 0.00195, McNemar's (sampled: within 0.0015)
    assert paired["vs_teacher_mcnemar_p"] == 0.002 and abs(pooled["p"] - 2 / 2**10) < 0.0015
    opposite = author_attribution.pooled_difference([better, teacher], [teacher, better])
    assert (opposite["points"], opposite["ci95_low"], opposite["ci95_high"], opposite["p"]) == (0.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize(
    "flag, value",
    [("--test_per_author", "-1"), ("--dev_per_author", "0"), ("--edge_characters", "-5"), ("--max_authors", "0")],
)
def test_build_refuses_a_count_that_would_cut_nothing_or_wrap_around(flag, value, tmp_path, capsys):
    """A negative count sliced all but the last slots (test -1: 24 passages an author), an empty validation split
    crashed after all the cutting, a negative edge wrapped around the book: each is refused by the parser, naming it."""
    with pytest.raises(SystemExit) as stop:
        arguments = ["build", "--tokenizer", str(tmp_path), "--output_dir", str(tmp_path / "d"), flag, value]
        author_attribution.main(arguments)
    assert stop.value.code == 2 and flag in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_build_never_writes_over_its_books_or_tokenizer_and_leaves_room_for_text(books, linformer, tmp_path):
    """`--overwrite` deletes the output folder whole: given the teacher's folder (the --tokenizer) or the books as the
    output, it deleted the model or the corpus. A passage of only special tokens crashed or wrote two-token text."""
    model = shutil.copytree(linformer, tmp_path / "model")
    corpus = shutil.copytree(books, tmp_path / "books")
    for output in (model, corpus, corpus / "data", tmp_path):
        with pytest.raises(ConfigError, match="Give another --output_dir"):
            author_attribution.build_dataset(str(corpus), str(model), str(output), overwrite=True, **BUILD)
    assert sorted(os.listdir(model)) == sorted(os.listdir(linformer))
    assert sorted(os.listdir(corpus)) == sorted(os.listdir(books))
    with pytest.raises(ConfigError, match="leaves no room for text"):
        author_attribution.build_dataset(str(corpus), str(model), str(tmp_path / "d"), **{**BUILD, "passage_tokens": 2})


def test_build_overwrites_only_an_earlier_data_set(books, linformer, data, tmp_path):
    """`--overwrite` deletes the output folder whole. Given a compare folder (compare's default output is the folder
    above build's), it deleted every run and kept model the refusal without it had named: only a folder build wrote
    is replaced."""
    compared = tmp_path / "authors"
    shutil.copytree(data[0], compared / "data")
    (compared / "runs" / "teacher" / "best").mkdir(parents=True)
    (compared / "compare.json").write_text("{}")
    for output in (compared, compared / "data" / ".."):
        with pytest.raises(FileExistsError, match="is not a data set build wrote"):
            author_attribution.build_dataset(books, linformer, str(output), overwrite=True, **BUILD)
    mine = tmp_path / "mine"  # a folder of other files, not a data set
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not a data set build wrote"):
        author_attribution.build_dataset(books, linformer, str(mine), overwrite=True, **BUILD)
    assert sorted(os.listdir(compared)) == ["compare.json", "data", "runs"] and os.listdir(mine) == ["notes.txt"]
    earlier = shutil.copytree(data[0], tmp_path / "earlier")  # an earlier data set is replaced
    manifest = author_attribution.build_dataset(books, linformer, str(earlier), overwrite=True, **{**BUILD, "seed": 2})
    assert manifest["seed"] == 2 and sorted(os.listdir(earlier)) == sorted(author_attribution.BUILD_FILES)
    # nothing of the staging is left beside it: neither the folder nor its writer's record
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]
    # without --overwrite a folder of other things is refused as such, not with advice to pass --overwrite
    with pytest.raises(FileExistsError, match="not a data set build wrote") as refused:
        author_attribution.build_dataset(books, linformer, str(mine), **BUILD)
    assert "pass --overwrite" not in str(refused.value)


def test_two_builds_into_one_folder_never_replace_each_other(books, linformer, tmp_path, monkeypatch, send_sigterm):
    """Two builds into one empty --output_dir at once (both found it empty): the later one deleted the staging folder
    the first was writing (one name for both) and then the first's published data set, without --overwrite. Now each
    writes its own, and the one that ends second is refused, the other's data set kept; a stopped build leaves no
    staging folder behind."""
    out = tmp_path / "data"
    cut = author_attribution.cut_passage

    def another_build_publishes(*args, **kwargs):  # the other build ends while this one cuts its passages
        if not out.exists():
            out.mkdir()
            (out / author_attribution.MANIFEST).write_text('{"the other build": true}')
        return cut(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(author_attribution, "cut_passage", another_build_publishes)
        with pytest.raises(FileExistsError, match="filled by another run"):
            author_attribution.build_dataset(books, linformer, str(out), **BUILD)
    assert os.listdir(out) == ["authors_manifest.json"] and "the other" in (out / "authors_manifest.json").read_text()
    with monkeypatch.context() as patch:  # SIGTERM while writing: unwound, its staging folder removed
        patch.setattr(author_attribution, "vocabulary_sha256", send_sigterm)
        with pytest.raises(KeyboardInterrupt):
            author_attribution.main(
                ["build", "--books", books, "--tokenizer", linformer, "--output_dir", str(tmp_path / "stopped")]
                + [f"--{key}={value}" for key, value in BUILD.items()]
            )
    assert sorted(os.listdir(tmp_path)) == ["data"]


def test_a_compare_that_fails_before_any_run_leaves_its_folder_free(data, linformer, tmp_path, monkeypatch):
    """A misspelt override is refused before compare.json is written (it locked the folder against the corrected
    command); a record whose runs left nothing behind (no result, no checkpoint) is replaced by the next compare, and
    one whose runs did is not."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(author_attribution, "run_child", lambda *args: pytest.fail("a run started"))
    out = tmp_path / "compare"
    with pytest.raises(ConfigError, match="sed"):
        author_attribution.compare(data[0], str(out), linformer, shared={"training.sed": 3})
    assert not (out / "compare.json").exists()
    runs = author_attribution.plan_runs(linformer, None, [], str(out))
    author_attribution.record_comparison(str(out), data[0], runs, {"training.seed": 3})
    os.makedirs(out / "runs" / "linformer")  # a run stopped before its first checkpoint: nothing kept
    author_attribution.record_comparison(str(out), data[0], runs, {"training.seed": 2})
    with open(out / "compare.json", encoding="utf-8") as fh:
        assert json.load(fh)["shared"] == {"training.seed": 2}
    os.makedirs(out / "runs" / "linformer" / "checkpoint-2")  # now a run would go on from this one
    with pytest.raises(ConfigError, match=r"holds runs \(linformer\) made with other settings"):
        author_attribution.record_comparison(str(out), data[0], runs, {"training.seed": 3})


@pytest.mark.parametrize(
    "key, value",
    [
        ("training.overwrite_output_dir", True),
        ("training.resume_from_checkpoint", "latest"),
        ("training.output_dir", "elsewhere"),
        ("model.pretrained", "roberta-base"),
        ("data.dataset", {"path": "other"}),
    ],
)
def test_compare_refuses_a_shared_override_of_what_it_sets_itself(key, value, data, linformer, tmp_path, monkeypatch):
    """compare sets each run's model, data, folder and resuming. Given in --shared, the folders and the model were
    ignored without a word, and training.overwrite_output_dir ran until the first stop, after which the same command
    failed (overwrite and resume at once) and any other was refused (other settings): the run could not go on."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(author_attribution, "run_child", lambda *args: pytest.fail("a run started"))
    out = tmp_path / "compare"
    with pytest.raises(ConfigError, match=f"--shared sets {key}, which compare sets for each run itself"):
        author_attribution.compare(data[0], str(out), linformer, shared={key: value, "training.max_steps": 2})
    assert not out.exists()


def test_what_a_run_cannot_read_or_finish_is_refused_before_any_run(data, linformer, tmp_path, monkeypatch):
    """Refused before anything is written: a teacher that full attention cannot be copied out from (it failed only
    after the teacher's own fine-tuning, as a raw ValueError), a data.max_seq_length longer than a model's n, a model
    that would read more tokens than a passage holds (padding, reported as text), an n given twice. The n column is
    what a run reads: data.max_seq_length when set."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(author_attribution, "run_child", lambda *args: pytest.fail("a run started"))
    teacher = _tiny_roberta(tmp_path / "teacher", linformer)  # n = 64; the passages hold 128 tokens
    out = tmp_path / "compare"
    for kwargs, match in [
        ({"teacher": linformer, "full_lengths": (256,)}, "cannot be run as full attention at a longer n"),
        ({"linformer": linformer, "full_lengths": (), "shared": {"data.max_seq_length": 256}}, "longer than the lin"),
        ({"teacher": teacher, "full_lengths": (256,)}, "the full-n256 run reads 256 tokens, and the passages of"),
        ({"teacher": teacher, "full_lengths": (128, 128)}, "names an n twice"),
    ]:
        with pytest.raises(ConfigError, match=match):
            author_attribution.compare(data[0], str(out), **kwargs)
    assert not out.exists()
    run = author_attribution.plan_runs(linformer, None, [], str(out))[0]
    assert author_attribution.reading_length(run, None) == PASSAGE
    assert author_attribution.reading_length(run, 96) == 96


def test_a_compare_or_pool_of_other_training_data_or_recipe_is_refused(data, tmp_path):
    """Data built with other settings (here one training passage fewer) score the same test passages but train
    other models, and another recipe fine-tunes them otherwise: a folder's runs are not reported, nor pooled, with
    runs of those; nor are folders of other overrides than the seed pooled. --shared '{training.seed: 1}' is the
    recipe's own seed: the same comparison as no --shared."""
    other_data = tmp_path / "other-data"
    shutil.copytree(data[0], other_data)
    train = next(p for p in os.listdir(other_data) if p.startswith("train-"))
    table = pq.read_table(os.path.join(data[0], train))
    pq.write_table(table.slice(1), str(other_data / train))
    assert author_attribution.test_passages_sha256(str(other_data)) == author_attribution.test_passages_sha256(data[0])
    recipe = tmp_path / "authors.yaml"
    recipe.write_text(open(os.path.join(REPO, author_attribution.RECIPE), encoding="utf-8").read() + "\n# edited\n")
    answers = {"linformer": [1] * 9, "teacher": [0] * 9}
    one = _fake_compare(tmp_path / "one", data[0], {"training.seed": 1}, answers, seed=1)
    for folder, data_dir, path, match in [
        ("data", str(other_data), author_attribution.RECIPE, "training and validation passages"),
        ("recipe", data[0], str(recipe), "recipes"),
    ]:
        two = _fake_compare(tmp_path / folder, data_dir, {"training.seed": 2}, answers, seed=2, recipe=path)
        with pytest.raises(ConfigError, match=f"fine-tuned with other {match}"):
            author_attribution.pool([one, two], str(tmp_path / "pooled"))
        runs = [{"name": name, "source": f"/models/{name}"} for name in answers]
        with pytest.raises(ConfigError, match="made with other settings"):
            author_attribution.record_comparison(one, data_dir, runs, {"training.seed": 1}, path, 1)
    default_seed = _fake_compare(tmp_path / "default", data[0], {}, answers, seed=1)
    with pytest.raises(ConfigError, match="the same comparison twice"):
        author_attribution.pool([one, default_seed], str(tmp_path / "pooled"))
    faster = _fake_compare(tmp_path / "lr", data[0], {"training.seed": 2, "training.learning_rate": 1e-3}, answers)
    with pytest.raises(ConfigError, match="other overrides besides the seed"):
        author_attribution.pool([one, faster], str(tmp_path / "pooled"))


def test_a_stop_signal_to_compare_reaches_the_running_fine_tuning_once(data, linformer, tmp_path, monkeypatch):
    """Ctrl-C on compare: the fine-tuning run gets one SIGINT (it checkpoints and exits), compare names the signal
    and starts no later run. Before, the run was SIGKILLed 0.25 s after the Ctrl-C, before its checkpoint, and a
    SIGTERM left it orphaned."""
    import signal
    import sys

    monkeypatch.chdir(REPO)
    child, events = stoppable_child(tmp_path, exit_code=75)
    monkeypatch.setattr(author_attribution, "prepare_model", lambda run, source_sha256: None)
    monkeypatch.setattr(author_attribution, "command", lambda run, *rest: [sys.executable, str(child), run["name"]])
    signal_this_process_once_started(events, signal.SIGINT)
    teacher = _tiny_roberta(tmp_path / "teacher", linformer)
    with pytest.raises(SystemExit, match="SIGINT received: run linformer was stopped .exit code 75"):
        author_attribution.compare(data[0], str(tmp_path / "out"), linformer, teacher, full_lengths=())
    assert events.read_text().splitlines() == ["linformer started", "linformer got SIGINT"]


def test_a_segment_whose_driver_was_killed_makes_the_run_time_a_lower_bound(data, linformer, tmp_path, monkeypatch):
    """compare wrote a segment's wall time only once its child had exited: a driver killed outright (SIGKILL, the OOM
    killer) lost that segment, and the report gave the rest as the run's time, too small with nothing to say so. A
    segment's start is now written first: one that never ended makes the run's time a lower bound, marked and named.
    Lines written before segments recorded their start (seconds and exit alone) still count."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(author_attribution, "prepare_model", lambda run, source_sha256: None)

    class Killed(BaseException):
        """The driver's end at a SIGKILL: nothing after the child's start runs."""

    def killed(args, log, claim):
        raise Killed

    commands = []

    def finishing(args, log, claim):
        commands.append(args)
        run = args[args.index("--training.output_dir") + 1]
        os.makedirs(run, exist_ok=True)  # as the fine-tuning does
        test = {"accuracy": 1 / 3, "examples": 9, "seconds_per_example": 0.01}
        with open(os.path.join(run, "results.json"), "w", encoding="utf-8") as fh:
            json.dump({"best": {"accuracy": 0.5}, "steps": 3, "test": test}, fh)
        lines = ["index\tprediction\tlabel"] + [f"{i}\t{i % 3}\t0" for i in range(9)]
        with open(os.path.join(run, "predictions_test.tsv"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        return 0, None

    out = tmp_path / "compare"
    monkeypatch.setattr(author_attribution, "run_child", killed)
    with pytest.raises(Killed):
        author_attribution.compare(data[0], str(out), linformer)
    monkeypatch.setattr(author_attribution, "run_child", finishing)
    text = author_attribution.compare(data[0], str(out), linformer)
    assert "| >= 0 |" in text and "so their time is not counted: linformer (1)." in text
    with open(out / "results.csv", encoding="utf-8") as fh:
        (row,) = list(csv.DictReader(fh))
    assert row["training_segments_unended"] == "1" and float(row["training_seconds"]) < 60
    # The killed segment's start is all its folder holds: the next segment starts over, not refused as another run's.
    assert commands[0][-2:] == ["--training.overwrite_output_dir", "true"]
    timing = out / "runs" / "linformer" / "timing.jsonl"
    ours = timing.read_text()
    timing.write_text('{"seconds": 1000.0, "exit": -9}\n' + ours)  # a segment of before: counted, ended
    seconds, unended = author_attribution.training_time(str(out / "runs" / "linformer"))
    assert 1000 <= seconds < 1060 and unended == 1
    timing.write_text('{"seconds": 1000.0, "exit": -9}\n{"seconds": 20.5, "exit": 0}\n')
    assert author_attribution.training_time(str(out / "runs" / "linformer")) == (1020.5, 0)


def test_a_copied_out_teacher_is_made_again_for_another_teacher(linformer, tmp_path, monkeypatch):
    """models/teacher-n<n> of a teacher whose record was replaced (no run had a result) is not fine-tuned as the new
    teacher's: it is made again from it, once."""
    from experiments import long_input

    first = _tiny_roberta(tmp_path / "first", linformer)
    second = _tiny_roberta(tmp_path / "second", linformer, n=96)
    out = str(tmp_path / "compare")
    made = []
    extend = long_input.extend_positions
    monkeypatch.setattr(long_input, "extend_positions", lambda *args: made.append(args[0]) or extend(*args))
    for teacher in (first, second, second):
        (run,) = [r for r in author_attribution.plan_runs(None, teacher, [PASSAGE], out) if r["n"]]
        author_attribution.prepare_model(run, model_sha256(teacher))
    assert made == [first, second]
    with open(os.path.join(out, "models", f"teacher-n{PASSAGE}", "extension_report.json"), encoding="utf-8") as fh:
        report = json.load(fh)
    assert (report["source_positions"], report["source_sha256"]) == (96, model_sha256(second))


def test_a_recipe_files_max_seq_length_is_what_the_runs_read(data, linformer, tmp_path, monkeypatch):
    """data.max_seq_length set in the recipe file, not only in --shared, is checked against the models' n."""
    import yaml

    monkeypatch.chdir(REPO)
    with open(author_attribution.RECIPE, encoding="utf-8") as fh:
        recipe = yaml.safe_load(fh)
    recipe["data"]["max_seq_length"] = 4 * PASSAGE
    path = tmp_path / "authors.yaml"
    path.write_text(yaml.safe_dump(recipe))
    with pytest.raises(ConfigError, match=f"data.max_seq_length={4 * PASSAGE} is longer than the linformer model"):
        author_attribution.compare(data[0], str(tmp_path / "out"), linformer, recipe=str(path))


def test_a_record_from_before_a_setting_was_recorded_resumes_and_leaves_it_unknown(data, tmp_path):
    """A compare.json of 2026-11-28 (the test passages, overrides and models only) is resumed with the same overrides
    (an explicit seed equal to the recipe's among them) and refused with others; the settings it never recorded are not
    stamped on its runs."""
    out = tmp_path / "compare"
    runs = [{"name": "teacher", "source": "/models/teacher"}]
    author_attribution.record_comparison(str(out), data[0], runs, {"training.num_train_epochs": 5})
    os.makedirs(out / "runs" / "teacher")
    (out / "runs" / "teacher" / "results.json").write_text("{}")
    with open(out / "compare.json", encoding="utf-8") as fh:
        legacy = {k: v for k, v in json.load(fh).items() if k in ("data", "test_passages_sha256", "shared", "models")}
    (out / "compare.json").write_text(json.dumps(legacy))
    record = author_attribution.record_comparison(
        str(out), data[0], runs, {"training.num_train_epochs": 5}, seed=1, reading_lengths={"teacher": 64}
    )
    assert set(record) == set(legacy)  # what its runs read is unknown too: their recipe is
    with pytest.raises(
        ConfigError, match="then {'training.num_train_epochs': 5}, now {'training.num_train_epochs': 4}"
    ):
        author_attribution.record_comparison(str(out), data[0], runs, {"training.num_train_epochs": 4}, seed=1)
    new = tmp_path / "new"
    author_attribution.record_comparison(str(new), data[0], runs, {}, seed=1)
    os.makedirs(new / "runs" / "teacher")
    (new / "runs" / "teacher" / "results.json").write_text("{}")
    author_attribution.record_comparison(str(new), data[0], runs, {"training.seed": 1}, seed=1)  # the same seed
    with pytest.raises(ConfigError, match="'training.seed': 2"):
        author_attribution.record_comparison(str(new), data[0], runs, {"training.seed": 2}, seed=2)
    # A record of the recipe but not of what the runs read (the recipe, overrides and models decide it): filled in.
    record = author_attribution.record_comparison(str(new), data[0], runs, {}, seed=1, reading_lengths={"teacher": 64})
    assert record["reading_length"] == {"teacher": 64}
    with pytest.raises(ConfigError, match=r"what the teacher run reads \(then 64 tokens, now 96\)"):
        author_attribution.record_comparison(str(new), data[0], runs, {}, seed=1, reading_lengths={"teacher": 96})


def test_a_compare_beside_a_running_one_shares_its_settings_and_never_its_runs(data, linformer, tmp_path, monkeypatch):
    """While one compare runs a run that has no checkpoint yet, a second into the same folder with another seed is
    refused (before, it replaced compare.json under the first, whose run was then reported with the new seed); one
    with the same settings may run the other runs, and its models are added to the record; no compare runs a run
    another is running."""
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(author_attribution, "run_child", lambda *args: pytest.fail("a run started"))
    teacher = _tiny_roberta(tmp_path / "teacher", linformer)
    out = tmp_path / "compare"
    runs = author_attribution.plan_runs(linformer, None, [], str(out))
    author_attribution.record_comparison(str(out), data[0], runs, {"training.seed": 3}, seed=3)  # the first compare
    before = (out / "compare.json").read_text()
    with claimed_by_another_driver(out, "linformer"):  # ... running linformer, before its first checkpoint
        with pytest.raises(ConfigError, match=r"holds runs \(linformer, being run now\) made with other settings"):
            author_attribution.compare(
                data[0], str(out), linformer, teacher, (), shared={"training.seed": 2}, only=["teacher"]
            )
        with pytest.raises(ConfigError, match="run linformer in .* is being run by another driver"):
            author_attribution.compare(data[0], str(out), linformer, teacher, (), shared={"training.seed": 3})
        assert (out / "compare.json").read_text() == before

        started = []
        monkeypatch.setattr(author_attribution, "prepare_model", lambda run, source_sha256: None)
        monkeypatch.setattr(author_attribution, "run_child", lambda args, *rest: started.append(args) or (0, None))
        kwargs = {"shared": {"training.seed": 3}, "only": ["teacher"]}
        author_attribution.compare(data[0], str(out), linformer, teacher, (), **kwargs)
    assert [args[args.index("--training.output_dir") + 1] for args in started] == [str(out / "runs" / "teacher")]
    with open(out / "compare.json", encoding="utf-8") as fh:
        assert sorted(json.load(fh)["models"]) == ["linformer", "teacher"]


def test_overlap_finds_the_test_passages_a_training_book_also_holds(books, data, tmp_path, capsys):
    """A held-out book's text in a training book (a story in a collection: 10 of the 137 published test passages)
    is found passage by passage; the fixture's held-out books, marked in every paragraph, are in no training book."""
    assert all(book["found"] == 0 for book in author_attribution.passages_in_training_books(data[0], books))
    shards = {split: [pq.read_table(f).to_pylist() for f in sorted(glob.glob(f"{books}/{split}-*.parquet"))]
              for split in ("train", "validation")}  # fmt: skip
    held_out = next(book for book in shards["validation"][0] if book["author"] == AUTHORS[1])
    collection = {**shards["train"][1][0], "id": "collection", "text": "Front matter.\n\n" + held_out["text"]}
    copy = write_hub_dataset(
        tmp_path / "books", {**shards, "train": [shards["train"][0], [*shards["train"][1], collection]]}
    )
    found = {book["author"]: book for book in author_attribution.passages_in_training_books(data[0], copy)}
    assert found[AUTHORS[1]]["found"] == found[AUTHORS[1]]["passages"] > 0
    assert found[AUTHORS[0]]["found"] == found[AUTHORS[2]]["found"] == 0
    author_attribution.main(["overlap", "--data", data[0], "--books", str(copy)])
    assert f"{found[AUTHORS[1]]['passages']} of " in capsys.readouterr().out
    # pool leaves them out: a model right on exactly those passages scores 0 on the rest
    overlapping = author_attribution.test_passages_in_training_books(data[0], copy)
    answers = {"linformer": [int(found) for found in overlapping], "teacher": [0] * len(overlapping)}
    folders = [_fake_compare(tmp_path / f"seed{seed}", data[0], {"training.seed": seed}, answers) for seed in (1, 2)]
    text = author_attribution.pool(folders, str(tmp_path / "pooled"), without_passages_in=copy)
    assert f"Left out: the {sum(overlapping)} test passages" in text
    assert (
        f"same {len(overlapping) - sum(overlapping)} test passages" in text and "| linformer | 0.0 0.0 | 0.0 |" in text
    )


def test_rescore_scores_the_kept_models_on_more_passages_and_reproduces_the_recorded_answers(
    books, data, linformer, tmp_path, monkeypatch, send_sigterm
):
    """A compare's kept models scored on the test passages of the same data built with more of them: the answers on
    the passages compare scored are its own (recorded as agreeing), every passage of the larger test split is
    answered, and the folder pools as compare's do, on the new passages alone with --without_test_of. Refused before
    any model loads: data whose training passages are not the models' own, an output folder of other files, and an
    earlier rescore's folder without --overwrite."""
    from linformer_hf.training import finetune

    monkeypatch.setattr(author_attribution, "run_child", lambda args, log, claim: (finetune.main(args[3:]), None))
    monkeypatch.chdir(REPO)
    teacher = _tiny_roberta(tmp_path / "teacher", linformer)
    out = str(tmp_path / "compare")
    shared = {"training.max_steps": 2, "training.per_device_train_batch_size": 6}
    author_attribution.compare(data[0], out, linformer, teacher, (), shared=shared)
    more = str(tmp_path / "more")
    manifest = author_attribution.build_dataset(books, linformer, more, seed=1, **{**BUILD, "test_per_author": 50})
    assert manifest["passages"]["test"] > data[1]["passages"]["test"]

    rescored = str(tmp_path / "rescored")
    # Stopped by SIGTERM while scoring (before: its hidden staging folder stayed beside --output_dir)
    scoring = author_attribution.predict_passages
    with monkeypatch.context() as patch:
        patch.setattr(author_attribution, "predict_passages", send_sigterm)
        with pytest.raises(KeyboardInterrupt):
            author_attribution.main(["rescore", out, "--data", more, "--output_dir", rescored])
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")] and not os.path.exists(rescored)
    assert author_attribution.predict_passages is scoring
    text = author_attribution.rescore(out, more, rescored)
    assert f"{manifest['passages']['test']} test" in text
    for name in ("linformer", "teacher"):
        with open(os.path.join(rescored, "runs", name, "results.json"), encoding="utf-8") as fh:
            result = json.load(fh)
        assert result["test"]["examples"] == manifest["passages"]["test"]
        assert result["rescored"]["recorded_passages"] == data[1]["passages"]["test"]
        assert result["rescored"]["recorded_answers_agreeing"] == data[1]["passages"]["test"]
        assert result["rescored"]["reads"] == (PASSAGE if name == "linformer" else 64)
    with open(os.path.join(rescored, "compare.json"), encoding="utf-8") as fh:
        assert json.load(fh)["reading_length"] == {"linformer": PASSAGE, "teacher": 64}
        with open(os.path.join(rescored, "runs", name, "predictions_test.tsv"), encoding="utf-8") as fh:
            answers = list(csv.DictReader(fh, delimiter="\t"))
        with open(os.path.join(out, "runs", name, "predictions_test.tsv"), encoding="utf-8") as fh:
            before = list(csv.DictReader(fh, delimiter="\t"))
        place = {(r["book"], r["start"]): i for i, r in enumerate(author_attribution.split_rows(more, "test"))}
        for row, old in zip(author_attribution.split_rows(data[0], "test"), before, strict=True):
            assert answers[place[(row["book"], row["start"])]]["prediction"] == old["prediction"]
        assert [int(a["label"]) for a in answers] == [r["label"] for r in author_attribution.split_rows(more, "test")]

    # pooled with a fake second seed on the same larger data, on the new passages alone
    passages = manifest["passages"]["test"]
    second = _fake_compare(
        tmp_path / "seed2",
        more,
        {**shared, "training.seed": 2},
        {"linformer": [1] * passages, "teacher": [0] * passages},
    )
    new_passages = manifest["passages"]["test"] - data[1]["passages"]["test"]
    pooled = author_attribution.pool([rescored, second], str(tmp_path / "pooled"), without_test_of=data[0])
    assert f"over 2 comparisons of the same {new_passages} test passages" in pooled
    assert "| each book alike (95%; p) |" in pooled
    # a compare with a run not finished (stopped, or --only): the others are rescored, and the report names it
    partial = str(tmp_path / "partial")
    shutil.copytree(out, partial)
    os.remove(os.path.join(partial, "runs", "teacher", "results.json"))
    text = author_attribution.rescore(partial, more, str(tmp_path / "rescored-partial"))
    assert os.listdir(tmp_path / "rescored-partial" / "runs") == ["linformer"]
    assert f"Not rescored, as not finished in {partial}: teacher" in text
    assert text == (tmp_path / "rescored-partial" / "results.md").read_text()
    with open(tmp_path / "pooled" / "pooled.csv", encoding="utf-8") as fh:
        assert all(float(row["test_accuracy_by_book"]) >= 0 for row in csv.DictReader(fh))
    assert f"Left out: the {data[1]['passages']['test']} test passages of {data[0]}'s test split." in pooled

    refuse_model_loading(monkeypatch)
    fewer = str(tmp_path / "fewer")
    author_attribution.build_dataset(books, linformer, fewer, seed=1, **{**BUILD, "train_per_author": 5})
    with pytest.raises(ConfigError, match="train passages are not the ones"):
        author_attribution.rescore(out, fewer, str(tmp_path / "r2"))
    with pytest.raises(FileExistsError, match="an earlier run's results|--overwrite"):
        author_attribution.rescore(out, more, rescored)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"not an earlier rescore's folder \(it holds notes.txt, which"):
        author_attribution.rescore(out, more, str(tmp_path / "mine"), overwrite=True)
    with pytest.raises(ConfigError, match="the compare folder itself"):
        author_attribution.rescore(out, more, out)
    bare = str(tmp_path / "bare-compare")  # a compare folder without its logs: names rescore writes, runs and all
    shutil.copytree(out, bare, ignore=shutil.ignore_patterns("*.log", "models", ".*"))
    with pytest.raises(FileExistsError, match=r"is not an earlier rescore's folder \(it is a compare folder\)"):
        author_attribution.rescore(out, more, bare, overwrite=True)
    assert os.path.isdir(os.path.join(bare, "runs", "linformer", "best"))
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_two_rescores_into_one_new_folder_never_replace_each_other(data, linformer, tmp_path, monkeypatch):
    """rescore chose between replacing and publishing by whether --output_dir was empty when it ended, not by
    --overwrite: a rescore that another rescore into the same new folder ended before (both found it empty) put its
    folder in place of the other's, silently. Now, as pool, the later one to end is refused without --overwrite and
    the other's folder is kept; with --overwrite it replaces it."""
    folder = _fake_compare(tmp_path / "compare", data[0], {}, {"linformer": [1] * data[1]["passages"]["test"]})
    shutil.copytree(linformer, os.path.join(folder, "runs", "linformer", "best"))
    results = {"task": "authors", "best": {"step": 1, "accuracy": 0.5}, "steps": 1}
    (tmp_path / "compare" / "runs" / "linformer" / "results.json").write_text(json.dumps(results))
    answer = [0]

    def fixed_answers(model_dir, texts, max_length, batch_size):
        return [answer[0]] * len(texts), 1.0

    started = []

    def another_rescore_ends_first(model_dir, texts, max_length, batch_size):
        if not started:
            started.append(True)
            answer[0] = 1
            author_attribution.rescore(folder, data[0], str(fresh))
            answer[0] = 0
        return fixed_answers(model_dir, texts, max_length, batch_size)

    def rescored_answers():
        with open(fresh / "runs" / "linformer" / "predictions_test.tsv", encoding="utf-8") as fh:
            return {row["prediction"] for row in csv.DictReader(fh, delimiter="\t")}

    fresh = tmp_path / "rescored"
    monkeypatch.setattr(author_attribution, "predict_passages", another_rescore_ends_first)
    with pytest.raises(FileExistsError, match="was filled by another run while this one worked"):
        author_attribution.rescore(folder, data[0], str(fresh))
    assert rescored_answers() == {"1"}  # the other rescore's folder, kept
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]
    monkeypatch.setattr(author_attribution, "predict_passages", fixed_answers)
    author_attribution.rescore(folder, data[0], str(fresh), overwrite=True)
    assert rescored_answers() == {"0"}
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".tmp-")]
    # --output_dir a link to an empty folder (a rename onto the link itself failed): written into the linked folder
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    author_attribution.rescore(folder, data[0], str(tmp_path / "link"))
    assert (tmp_path / "link").is_symlink() and (tmp_path / "elsewhere" / "results.md").is_file()


def test_compare_names_a_shared_that_is_not_yaml_in_one_line(data, linformer, tmp_path, capsys):
    """--shared with a brace left out ended in the YAML parser's traceback (exit 1)."""
    with pytest.raises(SystemExit) as stop:
        author_attribution.main(
            ["compare", "--data", data[0], "--linformer", linformer, "--output_dir", str(tmp_path / "out")]
            + ["--shared", "{training.seed: 2"]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--shared '{training.seed: 2' is not YAML" in err
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("command", ["compare", "pool", "rescore", "build"])
def test_a_file_as_output_dir_is_one_error_line_naming_it(command, data, linformer, tmp_path, capsys):
    """compare and pool given a file for --output_dir ended on a bare errno line ('[Errno 17] File exists')."""
    a_file = tmp_path / "results.txt"
    a_file.write_text("mine")
    argv = {
        "compare": ["compare", "--data", data[0], "--linformer", linformer],
        "pool": ["pool", str(tmp_path / "a"), str(tmp_path / "b")],
        "rescore": ["rescore", str(tmp_path / "a"), "--data", data[0]],
        "build": ["build", "--tokenizer", linformer],
    }[command]
    with pytest.raises(SystemExit) as stop:
        author_attribution.main([*argv, "--output_dir", str(a_file)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--output_dir {a_file} is a file: give a folder" in err
    assert a_file.read_text() == "mine"


@pytest.mark.parametrize("option", ["--linformer", "--teacher"])
def test_compare_names_a_missing_model_folder_before_any_work(option, tmp_path, capsys):
    """A --linformer or --teacher folder that is not there is said to be missing on one line, before the data is
    read or anything written; not transformers' malformed Hub repo id."""
    missing = str(tmp_path / "no-such-model")
    (tmp_path / "data").mkdir()  # a manifest, so that nothing else is refused first
    (tmp_path / "data" / author_attribution.MANIFEST).write_text('{"tokenizer": "t", "vocabulary_sha256": "0"}')
    with pytest.raises(SystemExit) as stop:
        author_attribution.main(
            ["compare", "--data", str(tmp_path / "data"), "--output_dir", str(tmp_path / "out"), option, missing]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{option}={missing}: no such directory" in err and "Repo id" not in err
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize("option", ["--linformer", "--teacher"])
def test_compare_names_a_hub_model_offline_in_one_line(option, tmp_path, capsys, monkeypatch):
    """A --linformer or --teacher Hub name that cannot be fetched offline is one line naming the option and the
    name, before anything is written (before: transformers' message, naming neither)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / author_attribution.MANIFEST).write_text('{"tokenizer": "t", "vocabulary_sha256": "0"}')
    with pytest.raises(SystemExit) as stop:
        author_attribution.main(
            ["compare", "--data", str(tmp_path / "data"), "--output_dir", str(tmp_path / "out"), option]
            + ["nobody-here/no-such-model"]
        )
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option in err and "nobody-here/no-such-model" in err
    assert not os.path.exists(tmp_path / "out")


def test_rescore_and_pool_refuse_a_folder_whose_data_set_was_rebuilt_since(
    books, data, linformer, tmp_path, monkeypatch
):
    """The answers a compare folder recorded (predictions_test.tsv, one a passage in order) are matched to its data
    set's test passages as they are now: rebuilt in place since (another --test_per_author), rescore matched them to
    other passages (fewer: a wrong agreement, silently; more: an IndexError after every model had run), and pool left
    out other passages than it said. Both now refuse, before any model loads."""
    from linformer_hf.training import finetune

    monkeypatch.setattr(author_attribution, "run_child", lambda args, log, claim: (finetune.main(args[3:]), None))
    monkeypatch.chdir(REPO)
    own = str(tmp_path / "data")
    shutil.copytree(data[0], own)
    out = str(tmp_path / "compare")
    shared = {"training.max_steps": 1, "training.per_device_train_batch_size": 6}
    author_attribution.compare(own, out, linformer, None, (), shared=shared)
    more = str(tmp_path / "more")
    author_attribution.build_dataset(books, linformer, more, seed=1, **{**BUILD, "test_per_author": 50})
    passages = len(author_attribution.split_rows(more, "test"))
    second = _fake_compare(tmp_path / "seed2", more, {**shared, "training.seed": 2}, {"linformer": [1] * passages})
    first = _fake_compare(tmp_path / "seed3", more, {**shared, "training.seed": 3}, {"linformer": [0] * passages})
    author_attribution.pool([first, second], str(tmp_path / "pooled"), without_test_of=own)  # as built: accepted
    # the compare's data set rebuilt in place with fewer test passages, and so the pooled folders'
    author_attribution.build_dataset(books, linformer, own, seed=1, overwrite=True, **{**BUILD, "test_per_author": 2})
    author_attribution.build_dataset(books, linformer, more, seed=1, overwrite=True, **{**BUILD, "test_per_author": 4})

    refuse_model_loading(monkeypatch)
    again = str(tmp_path / "again")
    author_attribution.build_dataset(books, linformer, again, seed=1, **{**BUILD, "test_per_author": 50})
    with pytest.raises(ConfigError, match="no longer holds the test passages .*compare's runs were scored on"):
        author_attribution.rescore(out, again, str(tmp_path / "rescored"))
    assert not os.path.exists(tmp_path / "rescored")
    with pytest.raises(ConfigError, match="no longer holds the test passages .*seed3's runs were scored on"):
        author_attribution.pool([first, second], str(tmp_path / "pooled"), overwrite=True, without_test_of=own)


def test_rescore_reads_as_many_tokens_as_the_fine_tuning_did(books, data, linformer, tmp_path, monkeypatch):
    """rescore took what each run reads from the recipe file as it is now: a recipe whose data.max_seq_length was
    edited since (or a record's reading_length other than the kept model's) had the models fine-tuned on a passage's
    first 64 tokens scored on its first 128, and recorded as reading 128. Refused, before any model loads: a recipe
    changed since or gone, and a length other than compare.json's reading_length."""
    from linformer_hf.training import finetune

    monkeypatch.setattr(author_attribution, "run_child", lambda args, log, claim: (finetune.main(args[3:]), None))
    monkeypatch.chdir(REPO)
    recipe = tmp_path / "authors.yaml"
    original = (Path(REPO) / author_attribution.RECIPE).read_text()
    assert "max_seq_length: null" in original
    recipe.write_text(original.replace("max_seq_length: null", "max_seq_length: 64"))
    out = str(tmp_path / "compare")
    shared = {"training.max_steps": 1, "training.per_device_train_batch_size": 6}
    author_attribution.compare(data[0], out, linformer, None, (), recipe=str(recipe), shared=shared)
    more = str(tmp_path / "more")
    author_attribution.build_dataset(books, linformer, more, seed=1, **{**BUILD, "test_per_author": 50})

    refuse_model_loading(monkeypatch)
    recipe.write_text(original)  # edited since: the models would read 128 tokens
    with pytest.raises(ConfigError, match="authors.yaml, is changed since"):
        author_attribution.rescore(out, more, str(tmp_path / "rescored"))
    recipe.unlink()
    with pytest.raises(ConfigError, match="authors.yaml, is gone"):
        author_attribution.rescore(out, more, str(tmp_path / "rescored"))
    recipe.write_text(original)
    path = os.path.join(out, "compare.json")
    with open(path, encoding="utf-8") as fh:
        record = json.load(fh)
    assert record["reading_length"] == {"linformer": 64}
    del record["recipe_sha256"]  # a record that vouches for the length alone
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(record, fh)
    with pytest.raises(ConfigError, match="the linformer run read 64 tokens .* would read 128"):
        author_attribution.rescore(out, more, str(tmp_path / "rescored"))
    assert not os.path.exists(tmp_path / "rescored")


def test_book_level_differences_weigh_each_held_out_book_alike():
    """With one passage a book, the book-level figures are the passage-level ones (the same bootstrap draws); where
    one book gives most passages, weighing passages and weighing books answer differently, and the interval over
    books is the wider."""
    correct, reference = [[1, 0, 1, 1, 0, 1, 0, 1]], [[0, 0, 1, 0, 0, 1, 1, 0]]
    by_passage = author_attribution.pooled_difference(correct, reference)
    by_book = author_attribution.book_difference(correct, reference, list("abcdefgh"))
    assert by_book["books"] == 8 and by_book["by_book_points"] == by_passage["points"] == 25.0
    interval = (by_passage["ci95_low"], by_passage["ci95_high"])
    assert (by_book["book_ci95_low"], by_book["book_ci95_high"]) == interval
    assert (by_book["by_book_ci95_low"], by_book["by_book_ci95_high"]) == interval

    # book a: 10 passages, all won; books b to e: 1 passage each, all lost
    correct, reference = [[1] * 10 + [0] * 4], [[0] * 10 + [1] * 4]
    books = ["a"] * 10 + ["b", "c", "d", "e"]
    by_passage = author_attribution.pooled_difference(correct, reference)
    by_book = author_attribution.book_difference(correct, reference, books)
    assert by_passage["points"] == 42.9 and by_book["by_book_points"] == -60.0
    assert by_book["book_ci95_high"] - by_book["book_ci95_low"] > by_passage["ci95_high"] - by_passage["ci95_low"]
