"""The fine-tuning tasks: their text and label columns, Hub names, splits and metric. One table, read by the recipe's
checks (config.py) and by the fine-tuning run (finetuning_data.py and the steps after it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .errors import ConfigError

# In an author-attribution data set's folder (experiments/author_attribution.py build writes it): the settings and
# counts it was built with, among them the `loading.vocabulary_sha256` of the tokenizer that cut its passages.
AUTHORS_MANIFEST = "authors_manifest.json"


@dataclass(frozen=True)
class Task:
    text_columns: tuple  # one column (single sentences) or two (pairs)
    hub: dict | None  # load_dataset kwargs for the Hub version
    train_split: str
    eval_split: str
    main_metric: str = "accuracy"
    with_f1: bool = False
    # None: as many classes as the names of the data set's ClassLabel label column (`with_classes_of`), for tasks
    # whose classes are the data's own (authors).
    num_labels: int | None = 2
    label_column: str = "label"
    # The names of classes 0, 1, ... as the Hub data set defines them (its ClassLabel), saved with the fine-tuned model
    # (`id2label`). A local file in the task's layout holds the same classes by index; None: no names known.
    label_names: tuple | None = None
    # A split of data.dataset scored once at the end by the model kept (results.json "test"), when the data set has
    # it; the model is chosen on eval_split. None: only data.test_file is.
    test_split: str | None = None
    # For a task whose data set is built for it, cut to lengths in tokens of one tokenizer: the file its folder holds
    # (a JSON object with that tokenizer's "vocabulary_sha256" and its folder, "tokenizer"), and the command that
    # builds it. Fine-tuning refuses a data.dataset without it, or of another tokenizer than the model's
    # (finetuning_data.check_built_data). None: any data set in the task's columns.
    manifest: str | None = None
    built_by: str | None = None


TASKS = {
    "sst2": Task(
        ("sentence",), {"path": "glue", "name": "sst2"}, "train", "validation", label_names=("negative", "positive")
    ),
    "qnli": Task(
        ("question", "sentence"),
        {"path": "glue", "name": "qnli"},
        "train",
        "validation",
        label_names=("entailment", "not_entailment"),
    ),
    "qqp": Task(
        ("question1", "question2"),
        {"path": "glue", "name": "qqp"},
        "train",
        "validation",
        with_f1=True,
        label_names=("not_duplicate", "duplicate"),
    ),
    "imdb": Task(("text",), {"path": "imdb"}, "train", "test", label_names=("neg", "pos")),
    # Author attribution on long passages of books (experiments/author_attribution.py builds the data set: a local
    # folder in a Hub dataset's layout, given as data.dataset): `train` passages of the training books, `validation`
    # other passages of the same books (to choose the model on), `test` passages of held-out books (the score).
    # The classes are the authors, named by the data set's ClassLabel.
    "authors": Task(
        ("text",),
        None,
        "train",
        "validation",
        num_labels=None,
        test_split="test",
        manifest=AUTHORS_MANIFEST,
        built_by="python -m experiments.author_attribution build",
    ),
}


def with_classes_of(task: Task, ds, source: str = "the training data") -> Task:
    """The task with its number of classes and their names taken from ``ds``'s ClassLabel label column when the task
    leaves them to the data (``num_labels`` None); the task unchanged otherwise."""
    if task.num_labels is not None:
        return task
    names = getattr(ds.features.get(task.label_column), "names", None)
    if not names:
        raise ConfigError(
            f"{source}: this task takes its classes from the data set's label column {task.label_column!r}, which must "
            "be a ClassLabel with the class names (as experiments/author_attribution.py writes it); it is "
            f"{ds.features.get(task.label_column)}."
        )
    return dataclasses.replace(task, num_labels=len(names), label_names=tuple(str(name) for name in names))
