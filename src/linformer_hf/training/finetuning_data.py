"""The fine-tuning task's data, read and checked before any output or model: local files (.tsv, .csv, .json(l)) or
the task's Hub data set, their columns and labels checked (and a data set built for its task, its manifest and
tokenizer), and the names of the classes the model is saved with."""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass

from .config import ConfigError, FinetuneRecipe
from .errors import hub_unreachable_error, one_line
from .tasks import TASKS, Task, with_classes_of
from .validation import (
    check_field_counts,
    check_has_rows,
    check_labels,
    is_local_folder,
    unreadable_file_error,
    warn_empty_texts,
)


@dataclass
class TaskData:
    """The recipe's task (with the data's classes, for a task that takes them from its data), its splits and the
    names of its classes."""

    task: Task
    splits: dict
    class_names: list[str]


def load_task(recipe: FinetuneRecipe) -> TaskData:
    """The task's splits read and checked (`load_task_data`; a data set built for the task first:
    `check_built_data`), with the task's classes and their names."""
    check_built_data(recipe)
    splits = load_task_data(recipe)
    task = with_classes_of(TASKS[recipe.data.task], splits["train"])
    return TaskData(task, splits, label_names(splits["train"], task))


def check_built_data(recipe: FinetuneRecipe) -> None:
    """For a task whose data set is built for it (`Task.manifest`: author attribution), before anything is read:
    data.dataset is a folder holding the builder's manifest, and its passages were cut with the model's tokenizer
    (the manifest's vocabulary_sha256). Without this, any folder of texts and ClassLabel labels was fine-tuned on as
    the task's data set (its passages of no known length), and so were passages measured in another tokenizer's
    tokens: another amount of text each, which may hold fewer than the model's n (padding, read as text)."""
    dcfg, mcfg = recipe.data, recipe.model
    task = TASKS[dcfg.task]
    if task.manifest is None:
        return
    build = f"{task.built_by} --tokenizer {mcfg.tokenizer or mcfg.pretrained} --output_dir FOLDER"
    if dcfg.dataset is None:
        raise ConfigError(
            f"data.task {dcfg.task} reads a data set built for it, as data.dataset: {{path: FOLDER}}, not "
            f"data.train_file ({dcfg.train_file}). Build one ({build}) and give its folder."
        )
    path = dcfg.dataset.get("path")
    if not os.path.isdir(str(path)):
        raise ConfigError(
            f"data.dataset {path} is not a local folder, and data.task {dcfg.task} reads the folder its builder "
            f"writes, with {task.manifest}. Build one ({build}) and give its folder."
        )
    manifest_path = os.path.join(path, task.manifest)
    if not os.path.isfile(manifest_path):
        raise ConfigError(
            f"data.dataset {path} has no {task.manifest}: it is not a data set built for data.task {dcfg.task} "
            f"(passages of a known length in the model's tokens). Build one ({build}) and give its folder, or give "
            "another data.task."
        )
    with open(manifest_path, encoding="utf-8") as fh:
        manifest = json.load(fh)
    from ..loading import tokenizer_vocabulary, vocabulary_sha256

    tokenizer_dir = mcfg.tokenizer or mcfg.pretrained
    vocabulary = tokenizer_vocabulary(tokenizer_dir)  # None: no tokenizer there, which loading the model reports
    if vocabulary is not None and vocabulary_sha256(vocabulary) != manifest.get("vocabulary_sha256"):
        raise ConfigError(
            f"data.dataset {path}: its passages were cut in tokens of another tokenizer "
            f"({manifest.get('tokenizer', 'not recorded')}) than the model's ({tokenizer_dir}), and n tokens of "
            f"another vocabulary are another amount of text (fewer than n: padding). Build the data set with this "
            f"model's tokenizer ({build}), or fine-tune a model of that tokenizer."
        )
    passage_tokens = manifest.get("passage_tokens")
    reads = dcfg.max_seq_length or model_length(mcfg)
    if passage_tokens and reads and reads > passage_tokens:
        raise ConfigError(
            f"data.dataset {path}: its passages hold {passage_tokens:,} tokens, and the model reads {reads:,} "
            f"({'data.max_seq_length' if dcfg.max_seq_length else 'its n'}): the rest of each input would be "
            f"padding, reported as text read. Set data.max_seq_length {passage_tokens} (the passages' length), or "
            f"build the data again ({build} --passage_tokens {reads})."
        )


def model_length(mcfg) -> int | None:
    """The longest input of model.pretrained (its n), from its config alone; None for a model converted on the fly
    (its n is the conversion's) or a folder without a config (refused where the model is loaded)."""
    if mcfg.convert_from_roberta is not None or not os.path.isfile(os.path.join(mcfg.pretrained, "config.json")):
        return None
    from ..loading import saved_model_length

    return saved_model_length(mcfg.pretrained)


def load_task_data(recipe: FinetuneRecipe) -> dict:
    """{"train", "validation", optionally "test"} datasets, columns checked. "test" is data.test_file, or the task's
    `Task.test_split` of data.dataset when the data set has that split."""
    dcfg, task = recipe.data, TASKS[recipe.data.task]
    seed = recipe.training.seed if dcfg.split_seed is None else dcfg.split_seed
    splits = {}
    if dcfg.train_file:
        splits["train"] = _load_file(dcfg.train_file, "train")
        task = with_classes_of(task, splits["train"], dcfg.train_file)
        check_columns(splits["train"], task, dcfg.train_file)
        if dcfg.validation_file:
            splits["validation"] = _load_file(dcfg.validation_file, "validation")
            check_columns(splits["validation"], task, dcfg.validation_file)
        else:
            rows = len(splits["train"])
            held_out = math.ceil(rows * dcfg.validation_split_percentage / 100)  # as `train_test_split` rounds it
            if not 1 <= held_out < rows:
                left = "no validation row" if held_out < 1 else "no training row"
                raise ConfigError(
                    f"{dcfg.train_file} has {rows} row(s): holding out data.validation_split_percentage="
                    f"{dcfg.validation_split_percentage} of them leaves {left}. Give data.validation_file, more rows "
                    "or another percentage."
                )
            parts = splits["train"].train_test_split(test_size=dcfg.validation_split_percentage / 100, seed=seed)
            splits["train"], splits["validation"] = parts["train"], parts["test"]
        if dcfg.test_file:
            splits["test"] = _load_file(dcfg.test_file, "test")
            check_columns(splits["test"], task, dcfg.test_file, need_labels=False)
    else:
        from .hub_datasets import load_hub_dataset

        hub = dict(dcfg.dataset or task.hub)
        check_dataset_splits(hub, task, dcfg.task)
        try:
            splits["train"] = load_hub_dataset(**hub, split=task.train_split)
            splits["validation"] = load_hub_dataset(**hub, split=task.eval_split)
            if task.test_split and task.test_split in _split_names(hub):
                splits["test"] = load_hub_dataset(**hub, split=task.test_split)
        except ConnectionError as err:  # offline, or no network, and not cached: say so, with the local way
            columns = ", ".join([*task.text_columns, task.label_column])
            raise hub_unreachable_error(
                "data.dataset",
                hub.get("path"),
                err,
                "give local files instead, --data.train_file F --data.validation_file F "
                f"(.tsv, .csv or .json(l) with columns {columns})",
            ) from None
        except (ValueError, FileNotFoundError) as err:  # a Hub data set without the split, or config, asked for
            raise ConfigError(
                f"data.dataset {hub} cannot be read as data.task {dcfg.task}'s data set (its splits "
                f"{task.train_split} and {task.eval_split}): {one_line(err)}"
            ) from None
        # A task whose classes are the data's: the training split's ClassLabel, which `datasets` gives every split.
        task = with_classes_of(task, splits["train"], f"{hub} split train")
        for name, ds in splits.items():
            check_columns(ds, task, f"{hub} split {name}")
    if dcfg.max_train_samples is not None:
        splits["train"] = (
            splits["train"].shuffle(seed=seed).select(range(min(dcfg.max_train_samples, len(splits["train"]))))
        )
    if dcfg.max_eval_samples is not None:
        splits["validation"] = splits["validation"].select(range(min(dcfg.max_eval_samples, len(splits["validation"]))))
    return splits


def check_dataset_splits(hub: dict, task: Task, task_name: str) -> None:
    """A data.dataset that is a local folder reads as a data set (its config, when named, declared) and holds the
    task's training and evaluation splits; before, each of these failed inside `datasets` with a traceback. Hub names
    are checked as they are loaded (this machine may not reach the Hub)."""
    from datasets import load_dataset_builder

    path = str(hub["path"])
    if not is_local_folder(path):
        return
    if not os.path.isdir(path):
        raise ConfigError(
            f"data.dataset {path} is not a folder: give a folder in a Hub dataset's layout, a Hub name, or a "
            "file as data.train_file (.tsv, .csv, .json(l))."
        )
    try:
        builder = load_dataset_builder(path, hub.get("name"))
    except (ValueError, FileNotFoundError) as err:  # no data files, a config its README does not declare
        raise ConfigError(f"data.dataset: the folder {path} cannot be read as a data set: {one_line(err)}") from None
    found = sorted(builder.config.data_files or {})
    missing = [split for split in (task.train_split, task.eval_split) if split not in found]
    if missing:
        raise ConfigError(
            f"data.dataset {path} has no split(s) {missing} (it has {found or 'none'}): data.task {task_name} "
            f"trains on its {task.train_split!r} split and keeps the best model by its {task.eval_split!r} split. "
            "Add the split to the folder, or give the rows as local files (data.train_file, and data.validation_file "
            "or a share held out by data.validation_split_percentage)."
        )


def _load_file(path: str, split: str):
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    lower = path.lower()
    if lower.endswith(".tsv"):
        builder, options = "csv", {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    elif lower.endswith(".csv"):
        builder, options = "csv", {}
    elif lower.endswith((".json", ".jsonl")):
        builder, options = "json", {}
    else:
        raise ConfigError(f"Unsupported file type for {path}: use .tsv, .csv, .json or .jsonl.")
    check_has_rows(path, header_rows=1 if builder == "csv" else 0)
    if builder == "csv":
        check_field_counts(path, **options)
    try:
        return load_dataset(builder, data_files={split: path}, **options)[split]
    except DatasetGenerationError as err:  # e.g. bytes that are not UTF-8: said with the file and the line
        raise unreadable_file_error([path], err) from None


def check_columns(ds, task: Task, source: str, need_labels: bool = True):
    needed = list(task.text_columns) + ([task.label_column] if need_labels else [])
    missing = [c for c in needed if c not in ds.column_names]
    if missing:
        raise ConfigError(
            f"{source} lacks column(s) {missing} needed by this task; it has {ds.column_names}. "
            f"The task expects columns {needed}."
        )
    header_rows = 1 if source.lower().endswith((".csv", ".tsv")) else 0 if source.lower().endswith(".jsonl") else None
    if task.label_column in ds.column_names:
        check_labels(ds, task.label_column, task.num_labels, source, header_rows)
    warn_empty_texts(ds, task.text_columns, source, header_rows)


def _split_names(hub: dict) -> list[str]:
    from datasets import get_dataset_split_names

    return get_dataset_split_names(hub["path"], hub.get("name"))


def label_names(ds, task: Task) -> list[str]:
    """The names of classes 0..num_labels-1 that the model is saved with (`id2label`), so that a pipeline says
    "positive", not "LABEL_1": the data set's own (a ClassLabel column, as the Hub's GLUE and IMDB have), else the
    task's (`Task.label_names`: a local file holds its classes by index), else the indices themselves ("0", "1")."""
    names = getattr(ds.features.get(task.label_column), "names", None)
    if names is None or len(names) != task.num_labels:
        names = task.label_names or [str(i) for i in range(task.num_labels)]
    return [str(name) for name in names]
