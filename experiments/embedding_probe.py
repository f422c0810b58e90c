"""Frozen-embedding probe: how a sentence encoder is normally used, measured cheaply.

Each model embeds the task's texts without any training (mean pooling of the last hidden states over real tokens,
then L2 normalisation, as all-MiniLM-L6-v2 is meant to be used), and a logistic regression fitted on the training
embeddings is scored on the validation embeddings. The splits come from a fine-tuning recipe through the same
`load_task_data` that `linformer_hf.training.finetune` uses, so a probe and a fine-tuning run with the same recipe
see the same train and validation texts (IMDB's held-out part included).

    python -m experiments.embedding_probe --config configs/finetune/sst2.yaml \
        --data.train_file ../shared/data/sst2/train.tsv --data.validation_file ../shared/data/sst2/dev.tsv \
        --data.max_train_samples 20000 --models /tmp/minilm/all-MiniLM-L6-v2 outputs/minilm-k128 \
        --output outputs/probe/sst2.json

Needs the `train` extra (datasets, scikit-learn). Models: any folder (or Hub name) `AutoModel` loads, Linformer,
Performer, BERT or RoBERTa; each is truncated to the longest input it takes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

from linformer_hf.cli import ArgumentParser
from linformer_hf.models.lengths import max_input_length
from linformer_hf.outputs import check_output_file, write_json_atomic


@torch.no_grad()
def embed(model, tokenizer, texts: list[str], batch_size: int = 64, max_length: int | None = None) -> torch.Tensor:
    """(len(texts), hidden) mean-pooled, L2-normalised sentence embeddings, computed in the model's own precision."""
    device = next(model.parameters()).device
    max_length = max_length or max_input_length(model.config)
    # Sort by length so that a batch pads little; the embeddings are put back in the input order.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = torch.empty(len(texts), model.config.hidden_size)
    for start in range(0, len(texts), batch_size):
        index = order[start : start + batch_size]
        batch = tokenizer(
            [texts[i] for i in index], truncation=True, max_length=max_length, padding=True, return_tensors="pt"
        ).to(device)
        hidden = model(**batch).last_hidden_state.float()  # (batch, seq, hidden)
        mask = batch["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        out[index] = torch.nn.functional.normalize(pooled, dim=-1).cpu()
    return out


def fit_probe(train_x, train_y, seed: int = 0):
    """Logistic regression on frozen embeddings; C picked by 3-fold cross-validation on the training part."""
    from sklearn.linear_model import LogisticRegressionCV

    classifier = LogisticRegressionCV(
        Cs=[0.1, 1.0, 10.0, 100.0], cv=3, scoring="accuracy", max_iter=2000, random_state=seed
    )
    return classifier.fit(train_x, train_y)


def probe_accuracy(train_x, train_y, eval_x, eval_y, seed: int = 0) -> dict:
    """Accuracy on the evaluation embeddings of the probe fitted on the training ones, and the C it picked."""
    classifier = fit_probe(train_x, train_y, seed)
    return {"accuracy": round(float(classifier.score(eval_x, eval_y)), 5), "C": float(classifier.C_[0])}


def run_probe(recipe, models: list[str], batch_size: int = 64, device: str | None = None) -> dict:
    from transformers import AutoModel, AutoTokenizer

    from linformer_hf.training.finetuning import TASKS, load_task_data

    task = TASKS[recipe.data.task]
    if len(task.text_columns) != 1:
        raise ValueError(f"The probe embeds single texts; task {recipe.data.task} has pairs {task.text_columns}.")
    splits = load_task_data(recipe)
    column = task.text_columns[0]
    texts = {name: [str(t) for t in splits[name][column]] for name in ("train", "validation")}
    labels = {name: splits[name][task.label_column] for name in ("train", "validation")}
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    results = {"task": recipe.data.task, "train": len(texts["train"]), "validation": len(texts["validation"])}
    results["models"] = {}
    for name in models:
        started = time.perf_counter()
        tokenizer = AutoTokenizer.from_pretrained(name)
        model = AutoModel.from_pretrained(name).to(device).eval()
        max_length = recipe.data.max_seq_length or max_input_length(model.config)
        features = {split: embed(model, tokenizer, texts[split], batch_size, max_length) for split in texts}
        scores = probe_accuracy(
            features["train"].numpy(), labels["train"], features["validation"].numpy(), labels["validation"]
        )
        scores.update(max_length=max_length, seconds=round(time.perf_counter() - started, 1))
        results["models"][name] = scores
        print(f"{name}: accuracy {scores['accuracy']:.4f} (C={scores['C']}, {scores['seconds']} s)", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    from linformer_hf.training.config import FinetuneRecipe, load_recipe
    from linformer_hf.training.errors import USER_ERRORS, report
    from linformer_hf.training.validation import check_model_source

    from .long_input import read_configs  # long_input embeds with this module's functions: imported here

    parser = ArgumentParser(
        prog="python -m experiments.embedding_probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="a fine-tuning recipe (configs/finetune/*.yaml): the data")
    parser.add_argument("--models", nargs="+", required=True, help="model folders or Hub names")
    parser.add_argument("--output", required=True, help="results JSON (refused if it exists)")
    parser.add_argument("--batch_size", type=int, default=64)
    args, rest = parser.parse_known_args(argv)
    try:
        for name in args.models:  # every one before any is run: not transformers' malformed repo id after the first
            check_model_source(name, "--models")
        check_output_file(args.output, overwrite=False, flag=None)
        read_configs("--models", args.models)  # a Hub name offline: one line, before the first model is embedded
    except (*USER_ERRORS, OSError) as err:
        return report(err)
    try:
        recipe = load_recipe(FinetuneRecipe, args.config, rest + ["--model.pretrained", args.models[0]])
        results = run_probe(recipe, args.models, args.batch_size)
    except USER_ERRORS as err:
        return report(err)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_json_atomic(args.output, results)  # whole or absent: an existing file means a finished probe
    return 0


if __name__ == "__main__":
    sys.exit(main())
