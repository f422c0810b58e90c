"""Every shipped fine-tuning recipe reads its task from the Hub by name (GLUE's sst2, qnli and qqp; IMDB), or from the
local folder in the Hub's layout it names (authors): run here
through local folders of the same names in the Hub's layout (parquet shards with the label names, a README declaring
configs and splits) built from real rows of ../shared/data, as they run where the Hub is reachable."""

import csv
import glob
import json
import os

import pytest
from datasets import ClassLabel, Features, Value
from training_utils import DATA, REPO, save_tiny_pretrained_linformer, write_hub_dataset

from linformer_hf.loading import tokenizer_vocabulary, vocabulary_sha256
from linformer_hf.training.config import FinetuneRecipe, load_recipe
from linformer_hf.training.finetuning import run_finetuning
from linformer_hf.training.tasks import AUTHORS_MANIFEST, TASKS

ROWS = 24  # of each split: enough for a batch and an evaluation


def _tsv_rows(path, rows):
    with open(path, encoding="utf-8") as fh:
        reader = csv.DictReader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [{**row, "label": int(row["label"])} for _, row in zip(range(rows), reader)]


def _imdb_rows(start, rows):
    with open(os.path.join(DATA, "imdb", "train.csv"), encoding="utf-8") as fh:
        all_rows = [{"text": r["text"], "label": int(r["label"])} for r in csv.DictReader(fh)]
    return all_rows[start : start + rows]


def _features(columns, names):
    return Features({**{c: Value("string") for c in columns}, "label": ClassLabel(names=names)})


@pytest.fixture(autouse=True)
def _own_datasets_cache(tmp_path, monkeypatch):
    """The stand-ins are cached under their Hub names ("glue", "imdb"): in the user's cache, a later offline load of
    the real name from anywhere would find these few rows."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))


@pytest.fixture(scope="module")
def hub_stand_ins(tmp_path_factory, pretrained_dir):
    """``glue`` (configs sst2, qnli, qqp) and ``imdb`` folders, named as the recipes name the Hub datasets."""
    root = tmp_path_factory.mktemp("hub")
    sst2 = _tsv_rows(os.path.join(DATA, "sst2", "train.tsv"), 2 * ROWS)
    write_hub_dataset(
        root / "glue",
        {"train": [sst2[:ROWS]], "validation": [sst2[ROWS:]]},
        "sst2",
        _features(["sentence"], ["negative", "positive"]),
    )
    qnli = _tsv_rows(os.path.join(DATA, "qnli", "train.tsv"), 2 * ROWS)
    write_hub_dataset(
        root / "glue",
        {"train": [qnli[:ROWS]], "validation": [qnli[ROWS:]]},
        "qnli",
        _features(["question", "sentence"], ["entailment", "not_entailment"]),
    )
    # QQP's columns and label names, over QNLI's question pairs (no QQP text is on this machine).
    qqp = [{"question1": r["question"], "question2": r["sentence"], "label": r["label"]} for r in qnli]
    write_hub_dataset(
        root / "glue",
        {"train": [qqp[:ROWS]], "validation": [qqp[ROWS:]]},
        "qqp",
        _features(["question1", "question2"], ["not_duplicate", "duplicate"]),
    )
    write_hub_dataset(
        root / "imdb",
        {"train": [_imdb_rows(0, ROWS)], "test": [_imdb_rows(1000, ROWS)]},
        features=_features(["text"], ["neg", "pos"]),
    )
    # The authors recipe's local data set (experiments/author_attribution.py builds it), where the recipe names it:
    # IMDB reviews labelled with three authors' names, in train, validation and test splits, and the manifest the
    # build writes, naming the model's tokenizer as the one that cut them (the fine-tuning checks it).
    authors = ["Alcott, Louisa May", "Austen, Jane", "Twain, Mark"]
    reviews = [{"text": r["text"], "label": i % 3} for i, r in enumerate(_imdb_rows(1500, 3 * ROWS))]
    folder = write_hub_dataset(
        root / "outputs" / "authors" / "data",
        {"train": [reviews[:ROWS]], "validation": [reviews[ROWS : 2 * ROWS]], "test": [reviews[2 * ROWS :]]},
        features=_features(["text"], authors),
    )
    with open(os.path.join(folder, AUTHORS_MANIFEST), "w", encoding="utf-8") as fh:
        vocabulary = vocabulary_sha256(tokenizer_vocabulary(pretrained_dir))
        json.dump({"tokenizer": pretrained_dir, "vocabulary_sha256": vocabulary}, fh)
    return root


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    return save_tiny_pretrained_linformer(tmp_path_factory.mktemp("pretrained"), layers=1)


@pytest.mark.parametrize(
    "path", sorted(glob.glob(os.path.join(REPO, "configs", "finetune", "*.yaml"))), ids=os.path.basename
)
def test_each_finetune_recipe_reads_its_hub_dataset_by_name(path, hub_stand_ins, pretrained_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(hub_stand_ins)  # the Hub names resolve to the folders here, as load_dataset reads them
    recipe = load_recipe(
        FinetuneRecipe,
        path,
        extra={
            "model.pretrained": pretrained_dir,
            "training.output_dir": str(tmp_path / "run"),
            "training.per_device_train_batch_size": 8,
            "training.max_steps": 2,
            "training.report_to": [],
        },
    )
    task = TASKS[recipe.data.task]
    source = recipe.data.dataset or task.hub
    assert recipe.data.train_file is None and os.path.isdir(hub_stand_ins / source["path"])  # the Hub path is taken
    result = run_finetuning(recipe, show_progress=False)
    assert result["steps"] == 2 and 0.0 <= result["best"]["accuracy"] <= 1.0
    assert ("f1" in result["best"]) == task.with_f1
    assert os.path.isfile(os.path.join(recipe.training.output_dir, "predictions_validation.tsv"))
    assert ("test" in result) == (task.test_split is not None)  # a task's test split is scored when it has one
    from transformers import AutoConfig

    names = load_dataset_names(hub_stand_ins, source)
    assert AutoConfig.from_pretrained(result["best_dir"]).id2label == dict(enumerate(names))  # the Hub's label names


def load_dataset_names(root, source: dict) -> list[str]:
    from linformer_hf.training.hub_datasets import load_hub_dataset

    train = load_hub_dataset(os.path.join(root, source["path"]), source.get("name"), split="train")
    return train.features["label"].names
