"""The fine-tuning tasks: their text and label columns, Hub names, splits and metric. One table, read by the recipe's
checks (config.py) and by the fine-tuning run (finetuning.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    text_columns: tuple  # one column (single sentences) or two (pairs)
    hub: dict | None  # load_dataset kwargs for the Hub version
    train_split: str
    eval_split: str
    main_metric: str = "accuracy"
    with_f1: bool = False
    num_labels: int = 2
    label_column: str = "label"
    # The names of classes 0, 1, ... as the Hub data set defines them (its ClassLabel), saved with the fine-tuned model
    # (`id2label`). A local file in the task's layout holds the same classes by index; None: no names known.
    label_names: tuple | None = None


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
}
