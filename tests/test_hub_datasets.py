"""A local folder in a Hub dataset's layout is read from a cache of its own: never from another folder's of the same
name, nor from its own before it was rebuilt (training/hub_datasets.py). Each test loads into one cache shared by the
folders it compares, as the user's one cache is shared by all the folders they load."""

import os

import pytest
from datasets import ClassLabel, Features, Value
from training_utils import REPO, write_hub_dataset

from linformer_hf.training.config import FinetuneRecipe, load_recipe
from linformer_hf.training.hub_datasets import load_hub_dataset

FEATURES = Features({"text": Value("string"), "label": ClassLabel(names=["austen", "dickens", "eliot"])})


def rows(tag: str, count: int) -> list[dict]:
    return [{"text": f"{tag} passage {i}", "label": i % 3} for i in range(count)]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The datasets cache of these tests: one for all the folders a test loads."""
    import datasets

    where = str(tmp_path / "datasets-cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", where)
    return where


def test_two_folders_of_one_name_each_read_their_own_rows(tmp_path, cache):
    """The failure it prevents: the second folder named ``data`` was read as the first one's 3 rows (datasets 5.2),
    which made a fine-tuning train on another data set's passages without a word."""
    first = write_hub_dataset(tmp_path / "a" / "data", {"train": [rows("first", 3)]}, features=FEATURES)
    second = write_hub_dataset(tmp_path / "b" / "data", {"train": [rows("second", 7)]}, features=FEATURES)
    one, two = load_hub_dataset(first, split="train"), load_hub_dataset(second, split="train")
    assert (len(one), one[0]["text"]) == (3, "first passage 0")
    assert (len(two), two[0]["text"]) == (7, "second passage 0")
    assert two.features["label"].names == ["austen", "dickens", "eliot"]  # the README's and the shards' features
    again = load_hub_dataset(first, split="train")  # and the first is still read from its own cache
    assert again["text"] == one["text"] and again.cache_files[0]["filename"].startswith(cache)


def test_a_folder_rebuilt_in_place_is_read_anew(tmp_path, cache):
    folder = write_hub_dataset(tmp_path / "data", {"train": [rows("old", 3)], "test": [rows("old", 2)]})
    assert len(load_hub_dataset(folder, split="train")) == 3
    write_hub_dataset(tmp_path / "data", {"train": [rows("new", 5)], "test": [rows("new", 2)]})
    shard = os.path.join(folder, "train-00000-of-00001.parquet")
    os.utime(shard, (os.path.getatime(shard), os.path.getmtime(shard) + 10))  # a rebuild within the clock's tick
    rebuilt = load_hub_dataset(folder, split="train")
    assert (len(rebuilt), rebuilt[0]["text"]) == (5, "new passage 0")


def test_a_named_config_reads_its_own_shards(tmp_path, cache):
    write_hub_dataset(tmp_path / "glue", {"train": [rows("sst2", 4)]}, "sst2")
    folder = write_hub_dataset(tmp_path / "glue", {"train": [rows("qnli", 6)]}, "qnli")
    assert load_hub_dataset(folder, "sst2", split="train")[0]["text"] == "sst2 passage 0"
    assert len(load_hub_dataset(folder, "qnli", split="train")) == 6


def test_a_fine_tuning_reads_the_folder_it_names(tmp_path, cache):
    """Through the recipe, as `experiments.author_attribution` gives its data set: ``outputs/authors/data`` in two
    checkouts (or built twice) are two data sets."""
    from linformer_hf import LinformerConfig
    from linformer_hf.training.finetuning import load_task_data

    LinformerConfig().save_pretrained(tmp_path / "model")  # the recipe names a model; its data are what is read
    splits = {"train": [rows("x", 6)], "validation": [rows("x", 3)], "test": [rows("x", 3)]}
    write_hub_dataset(tmp_path / "small" / "data", splits, features=FEATURES)
    splits = {"train": [rows("y", 9)], "validation": [rows("y", 3)], "test": [rows("y", 4)]}
    larger = write_hub_dataset(tmp_path / "large" / "data", splits, features=FEATURES)
    for folder, expected in ((tmp_path / "small" / "data", (6, 3)), (larger, (9, 4))):
        extra = {"model.pretrained": str(tmp_path / "model"), "data.dataset": {"path": str(folder)}}
        recipe = load_recipe(FinetuneRecipe, os.path.join(REPO, "configs", "finetune", "authors.yaml"), extra=extra)
        data = load_task_data(recipe)
        assert (len(data["train"]), len(data["test"])) == expected
