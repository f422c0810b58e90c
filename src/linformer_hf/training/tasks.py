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


TASKS = {
    "sst2": Task(("sentence",), {"path": "glue", "name": "sst2"}, "train", "validation"),
    "qnli": Task(("question", "sentence"), {"path": "glue", "name": "qnli"}, "train", "validation"),
    "qqp": Task(("question1", "question2"), {"path": "glue", "name": "qqp"}, "train", "validation", with_f1=True),
    "imdb": Task(("text",), {"path": "imdb"}, "train", "test"),
}
