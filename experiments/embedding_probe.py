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

**Test split, predictions and pairs.** When the recipe's data has a labelled test split (a data.test_file with labels,
or the task's test split: author attribution's passages of held-out books), each probe is scored on it too; its labels
choose nothing (C is chosen on the training or the validation split). ``--predictions_dir DIR`` writes each model's
DIR/<label>/predictions_test.tsv (index, prediction, label: one row a test passage in the split's order, the layout
of a fine-tuned run's, which `author_attribution.test_correct` reads), and the output compares each model with the
first of ``--models``, passage by passage (`author_attribution.paired_difference`: paired bootstrap interval, exact
McNemar p) and, when the data has a ``book`` column, book by book (`author_attribution.book_difference`).

**Features (``--pooling``).** ``last`` (the default): the last hidden state's mean over real tokens, L2-normalised,
as above. ``all``: the mean over real tokens of every hidden state (the embeddings' output and each layer's),
concatenated and standardised (mean and scale fitted on the training split). A model is run once for either
(``output_hidden_states``), and each is derived from its pooled hidden states.

**C (``--choose_c``).** ``cv`` (the default): `LogisticRegressionCV`, 3 folds of the training split, Cs `CV_GRID`.
``validation``: a logistic regression on the training split for each C of `VALIDATION_GRID` (1e-4 to 1e6), the one
of the highest validation accuracy kept (the smallest C on a tie). The output names the grid and says when the C
picked is at its edge (``C_at_edge``): a wider grid might have picked another.

**Resuming (``--cache_dir DIR``).** Each model's pooled hidden states are kept in DIR, keyed by the SHA-256 of the
model's files, the length it reads and the SHA-256 of the texts embedded: a later probe (another pooling or choice
of C, or one stopped part-way) reads them instead of running the model again.

    python -m experiments.embedding_probe --config configs/finetune/authors.yaml \\
        --data.dataset.path outputs/authors40/data --models TEACHER LINFORMER --labels teacher linformer \\
        --pooling all --choose_c validation --cache_dir outputs/probe/features \\
        --predictions_dir outputs/probe/all-validation --output outputs/probe/all-validation.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time

import torch

from linformer_hf.cli import ArgumentParser
from linformer_hf.models.lengths import max_input_length
from linformer_hf.outputs import check_output_file, write_json_atomic, write_text_atomic

POOLINGS = ("last", "all")
C_CHOICES = ("cv", "validation")
CV_GRID = (0.1, 1.0, 10.0, 100.0)  # LogisticRegressionCV's Cs (`fit_probe`)
# --choose_c validation: 1e-4 to 1e6 in steps of about half a decade. L2-normalised last states (norm 1) want a large C
# (the books models' 256 features on 38 authors: 1e3 and 1e4, validation accuracy falling past 1e4), thousands of
# standardised features a small one (0.03 to 0.1 there): the grid holds both with room on either side.
VALIDATION_GRID = tuple(float(f"{m}e{e}") for e in range(-4, 6) for m in (1, 3)) + (1e6,)
MAX_ITER = 2000
GENERIC_FOLDERS = ("final", "best")  # a model folder named so is labelled by the folder it is in
# Each model's test answers, one row a test passage in the split's order (a fine-tuned run's file of that name).
PREDICTIONS = "predictions_test.tsv"


@torch.no_grad()
def pooled_states(
    model, tokenizer, texts: list[str], batch_size: int = 64, max_length: int | None = None, every_state: bool = False
) -> torch.Tensor:
    """(len(texts), states, hidden) float32, in the input order: the mean over real tokens (the attention mask) of the
    last hidden state (states = 1) or, ``every_state``, of each hidden state (``output_hidden_states``: the
    embeddings' output, then each layer's), computed in the model's own precision."""
    device = next(model.parameters()).device
    max_length = max_length or max_input_length(model.config)
    extra = {"output_hidden_states": True} if every_state else {}
    # Sort by length so that a batch pads little; the rows are put back in the input order.
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    states = model.config.num_hidden_layers + 1 if every_state else 1
    out = torch.empty(len(texts), states, model.config.hidden_size)
    for start in range(0, len(texts), batch_size):
        index = order[start : start + batch_size]
        batch = tokenizer(
            [texts[i] for i in index], truncation=True, max_length=max_length, padding=True, return_tensors="pt"
        ).to(device)
        output = model(**batch, **extra)
        hidden = output.hidden_states if every_state else (output.last_hidden_state,)  # each (batch, seq, hidden)
        mask = batch["attention_mask"].unsqueeze(-1).float()  # (batch, seq, 1)
        count = mask.sum(1).clamp(min=1.0)
        out[index] = torch.stack([(h.float() * mask).sum(1) / count for h in hidden], dim=1).cpu()
    return out


def embed(model, tokenizer, texts: list[str], batch_size: int = 64, max_length: int | None = None) -> torch.Tensor:
    """(len(texts), hidden) mean-pooled, L2-normalised sentence embeddings, computed in the model's own precision."""
    pooled = pooled_states(model, tokenizer, texts, batch_size, max_length)[:, -1]
    return torch.nn.functional.normalize(pooled, dim=-1)


def probe_features(pooled: dict, pooling: str) -> dict:
    """Each split's probe features from its pooled hidden states ``pooled[split]`` (passages, states, hidden): the
    last state L2-normalised (``last``), or every state concatenated and standardised on the training split
    (``all``)."""
    import numpy as np

    if pooling == "last":
        return {
            split: torch.nn.functional.normalize(torch.as_tensor(x[:, -1]), dim=-1).numpy()
            for split, x in pooled.items()
        }
    from sklearn.preprocessing import StandardScaler

    flat = {split: np.asarray(x).reshape(len(x), -1) for split, x in pooled.items()}
    scaler = StandardScaler().fit(flat["train"])
    return {split: scaler.transform(x) for split, x in flat.items()}


def fit_probe(train_x, train_y, seed: int = 0):
    """Logistic regression on frozen embeddings; C picked by 3-fold cross-validation on the training part."""
    from sklearn.linear_model import LogisticRegressionCV

    classifier = LogisticRegressionCV(Cs=list(CV_GRID), cv=3, scoring="accuracy", max_iter=MAX_ITER, random_state=seed)
    return classifier.fit(train_x, train_y)


def fit_on_validation(train_x, train_y, validation_x, validation_y, grid=VALIDATION_GRID):
    """A logistic regression on the training split for each C of ``grid``; returns the one of the highest validation
    accuracy (the smallest C on a tie) and each C's validation accuracy."""
    from sklearn.linear_model import LogisticRegression

    best, scores = None, {}
    for c in sorted(grid):
        classifier = LogisticRegression(C=c, max_iter=MAX_ITER).fit(train_x, train_y)
        scores[c] = float(classifier.score(validation_x, validation_y))
        if best is None or scores[c] > scores[best.C]:
            best = classifier
    return best, scores


def probe_accuracy(train_x, train_y, eval_x, eval_y, seed: int = 0) -> dict:
    """Accuracy on the evaluation embeddings of the probe fitted on the training ones, and the C it picked."""
    classifier = fit_probe(train_x, train_y, seed)
    return {"accuracy": round(float(classifier.score(eval_x, eval_y)), 5), "C": float(classifier.C_[0])}


def probe(features: dict, labels: dict, choose_c: str = "cv", seed: int = 0) -> dict:
    """Fit a probe on ``features["train"]`` with C chosen as ``choose_c`` says, from the training and validation
    splits alone; returns its validation accuracy ("accuracy"), C, the grid, whether C is at the grid's edge and, when
    ``labels`` holds a "test" split, the test predictions and accuracy (``labels["test"]`` is read only to score)."""
    if choose_c == "cv":
        classifier, grid, by_c = fit_probe(features["train"], labels["train"], seed), CV_GRID, None
        c = float(classifier.C_[0])
    else:
        train, validation = (features["train"], labels["train"]), (features["validation"], labels["validation"])
        classifier, by_c = fit_on_validation(*train, *validation)
        grid, c = VALIDATION_GRID, float(classifier.C)
    result = {
        "accuracy": round(float(classifier.score(features["validation"], labels["validation"])), 5),
        "C": c,
        "C_grid": list(grid),
        "C_at_edge": c in (min(grid), max(grid)),
    }
    if by_c is not None:
        result["validation_accuracy_by_C"] = {str(k): round(v, 5) for k, v in by_c.items()}
    if "test" in labels:
        predictions = [int(p) for p in classifier.predict(features["test"])]
        right = sum(p == int(y) for p, y in zip(predictions, labels["test"], strict=True))
        result.update(test_accuracy=round(right / len(predictions), 5), test_correct=right)
        result["test_predictions"] = predictions
    return result


def model_labels(models: list[str], labels: list[str] | None = None) -> list[str]:
    """A name for each model, its predictions' folder: ``labels`` as given, else each folder's name (a "final" or
    "best" folder: the folder it is in), numbered where two are alike."""
    from linformer_hf.training.errors import ConfigError

    if labels is not None:
        if len(labels) != len(models):
            raise ConfigError(f"--labels names {len(labels)} model(s) and --models gives {len(models)}: one each.")
        bad = [label for label in labels if not label or label in (".", "..") or "/" in label or os.sep in label]
        if bad:
            raise ConfigError(f"--labels {bad[0]!r} cannot name a folder: give names without '/'.")
        if len(set(labels)) != len(labels):
            raise ConfigError(f"--labels {' '.join(labels)} names a model twice: give each its own.")
        return list(labels)
    names = []
    for model in models:
        path = os.path.normpath(model)
        name = os.path.basename(path)
        if name in GENERIC_FOLDERS and os.path.basename(os.path.dirname(path)):
            name = os.path.basename(os.path.dirname(path))
        names.append(name)
    return [name if names.count(name) == 1 else f"{name}-{i + 1}" for i, name in enumerate(names)]


def labelled(ds, column: str, num_labels: int | None) -> bool:
    """Whether every row of ``ds`` holds a class index in ``column`` (an unlabelled test file: no such column, or
    GLUE's -1 throughout)."""
    if column not in ds.column_names or len(ds) == 0:
        return False
    values = ds[column]
    return all(isinstance(v, int) and v >= 0 and (num_labels is None or v < num_labels) for v in values)


def check_probe_request(splits: dict, task, choose_c: str, predictions_dir: str | None, labels: list[str]) -> bool:
    """Before any model is loaded: C can be chosen as asked, and predictions written where asked. Returns whether the
    test split is scored (it exists and is labelled)."""
    from linformer_hf.training.errors import ConfigError

    column = task.label_column
    if choose_c == "validation" and ("validation" not in splits or not labelled(splits["validation"], column, None)):
        raise ConfigError(
            "--choose_c validation chooses C on the validation split, and the recipe's data has no labelled "
            "validation split: give one (data.validation_file, or a data set with the task's evaluation split), "
            "or --choose_c cv (3 folds of the training split)."
        )
    scored = "test" in splits and labelled(splits["test"], column, None)
    if predictions_dir is not None:
        if not scored:
            raise ConfigError(
                "--predictions_dir writes the test predictions, and the recipe's data has no labelled test split "
                "(data.test_file with labels, or a data set with the task's test split): drop --predictions_dir."
            )
        for label in labels:
            check_output_file(os.path.join(predictions_dir, label, PREDICTIONS), overwrite=False, flag=None)
    return scored


def texts_sha256(texts: dict) -> str:
    """What a model embeds: the SHA-256 of each split's texts, in order."""
    return hashlib.sha256(json.dumps(texts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def cache_path(cache_dir: str, name: str, max_length: int, data_sha256: str) -> str:
    """Where a model's pooled hidden states over these texts are kept: keyed by the model's files (`model_sha256`; a
    Hub name: the name), the length it reads and the texts."""
    from linformer_hf.loading import model_sha256

    model = model_sha256(name) if os.path.isdir(name) else hashlib.sha256(name.encode()).hexdigest()
    return os.path.join(cache_dir, f"{model[:16]}-n{max_length}-{data_sha256[:16]}.npz")


def read_cache(path: str) -> tuple[dict, float] | None:
    import numpy as np

    if not os.path.isfile(path):
        return None
    with np.load(path) as stored:
        pooled = {key[len("pooled_") :]: stored[key] for key in stored.files if key.startswith("pooled_")}
        return pooled, float(stored["seconds"])


def write_cache(path: str, pooled: dict, seconds: float) -> None:
    """Whole or absent: written beside and moved into place."""
    import numpy as np

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    staging = f"{path}.{os.getpid()}.tmp.npz"
    np.savez(staging, seconds=np.asarray(seconds), **{f"pooled_{split}": x for split, x in pooled.items()})
    os.replace(staging, path)


def load_average() -> str:
    return " / ".join(f"{x:.1f}" for x in os.getloadavg())


def compare_with_first(results: dict, books: list | None, seed: int = 0) -> list[dict]:
    """Each model against the first, on the same test passages: `author_attribution.paired_difference` (passages) and,
    with ``books`` (each test passage's book), `author_attribution.book_difference`."""
    from .author_attribution import book_difference, paired_difference

    entries = list(results.values())
    reference = entries[0]
    truth = reference["test_labels"]
    reference_right = [p == y for p, y in zip(reference["test_predictions"], truth, strict=True)]
    pairs = []
    for entry in entries[1:]:
        right = [p == y for p, y in zip(entry["test_predictions"], truth, strict=True)]
        difference = paired_difference(right, reference_right, seed)
        pair = {
            "model": entry["label"],
            "reference": reference["label"],
            "points": difference["vs_teacher_points"],
            "ci95_low": difference["vs_teacher_ci95_low"],
            "ci95_high": difference["vs_teacher_ci95_high"],
            "mcnemar_p": difference["vs_teacher_mcnemar_p"],
        }
        if books is not None:
            pair.update(book_difference([right], [reference_right], books, seed))
        pairs.append(pair)
    return pairs


def run_probe(
    recipe,
    models: list[str],
    batch_size: int = 64,
    device: str | None = None,
    pooling: str = "last",
    choose_c: str = "cv",
    labels: list[str] | None = None,
    cache_dir: str | None = None,
    predictions_dir: str | None = None,
    configs: dict | None = None,
) -> dict:
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from linformer_hf.training.finetuning import TASKS, load_task_data

    if pooling not in POOLINGS or choose_c not in C_CHOICES:
        raise ValueError(f"pooling {pooling!r} / choose_c {choose_c!r}: choose from {POOLINGS} / {C_CHOICES}.")
    task = TASKS[recipe.data.task]
    if len(task.text_columns) != 1:
        raise ValueError(f"The probe embeds single texts; task {recipe.data.task} has pairs {task.text_columns}.")
    labels = model_labels(models, labels)
    splits = load_task_data(recipe)
    scored = check_probe_request(splits, task, choose_c, predictions_dir, labels)  # before any model is loaded
    names = ("train", "validation", "test") if scored else ("train", "validation")
    column = task.text_columns[0]
    texts = {name: [str(t) for t in splits[name][column]] for name in names}
    targets = {name: [int(y) for y in splits[name][task.label_column]] for name in names}
    books = [str(b) for b in splits["test"]["book"]] if scored and "book" in splits["test"].column_names else None
    data_sha256 = texts_sha256(texts)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    # Every hidden state when it is used, or kept for a later probe of the other pooling.
    every_state = pooling == "all" or cache_dir is not None
    results = {"task": recipe.data.task, "train": len(texts["train"]), "validation": len(texts["validation"])}
    if scored:
        results["test"] = len(texts["test"])
    results.update(pooling=pooling, choose_c=choose_c, texts_sha256=data_sha256, load_average_start=load_average())
    results["models"] = {}
    entries = {}
    for name, label in zip(models, labels, strict=True):
        started = time.perf_counter()
        config = (configs or {}).get(name) or AutoConfig.from_pretrained(name)
        max_length = recipe.data.max_seq_length or max_input_length(config)
        path = cache_path(cache_dir, name, max_length, data_sha256) if cache_dir else None
        cached = read_cache(path) if path else None
        if cached is not None:
            pooled, embed_seconds = cached
        else:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModel.from_pretrained(name).to(device).eval()
            pooled = {
                split: pooled_states(model, tokenizer, texts[split], batch_size, max_length, every_state).numpy()
                for split in texts
            }
            embed_seconds = time.perf_counter() - started
            del model
            if path:
                write_cache(path, pooled, embed_seconds)
        features = probe_features(pooled, pooling)
        scores = probe(features, targets, choose_c)
        predictions = scores.pop("test_predictions", None)
        scores.update(
            label=label,
            max_length=max_length,
            features=int(features["train"].shape[1]),
            embed_seconds=round(embed_seconds, 1),
            cached=cached is not None,
            seconds=round(time.perf_counter() - started, 1),
        )
        results["models"][name] = scores
        if predictions is not None:
            entries[name] = {"label": label, "test_predictions": predictions, "test_labels": targets["test"]}
        edge = ", at the grid's edge" if scores["C_at_edge"] else ""
        test = f", test {scores['test_accuracy']:.4f}" if scored else ""
        print(
            f"{label}: accuracy {scores['accuracy']:.4f}{test} (C={scores['C']}{edge}; {pooling} pooling, C by "
            f"{choose_c}; n={max_length}; {scores['seconds']} s{', features cached' if cached else ''})",
            flush=True,
        )
    if scored and len(entries) > 1:
        results["comparisons"] = compare_with_first(entries, books)
        for pair in results["comparisons"]:
            line = (
                f"{pair['model']} - {pair['reference']}: {pair['points']:+.1f} points ({pair['ci95_low']:+.1f} to "
                f"{pair['ci95_high']:+.1f}; McNemar p {pair['mcnemar_p']:.4f})"
            )
            if books is not None:
                line += f"; over {pair['books']} books {pair['book_ci95_low']:+.1f} to {pair['book_ci95_high']:+.1f}"
            print(line, flush=True)
    if predictions_dir is not None:
        for entry in entries.values():
            rows = zip(entry["test_predictions"], entry["test_labels"], strict=True)
            write_text_atomic(
                os.path.join(predictions_dir, entry["label"], PREDICTIONS),
                "index\tprediction\tlabel\n" + "".join(f"{i}\t{p}\t{y}\n" for i, (p, y) in enumerate(rows)),
            )
    results["load_average_end"] = load_average()
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
    parser.add_argument("--pooling", choices=POOLINGS, default="last", help="last hidden state, or every one")
    parser.add_argument("--choose_c", choices=C_CHOICES, default="cv", help="C by 3-fold CV on train, or validation")
    parser.add_argument("--labels", nargs="+", help="a name for each model (its predictions' folder)")
    parser.add_argument("--predictions_dir", help="write DIR/<label>/predictions_test.tsv (a labelled test split)")
    parser.add_argument("--cache_dir", help="keep each model's pooled hidden states here, and reuse them")
    args, rest = parser.parse_known_args(argv)
    try:
        for name in args.models:  # every one before any is run: not transformers' malformed repo id after the first
            check_model_source(name, "--models")
        check_output_file(args.output, overwrite=False, flag=None)
        labels = model_labels(args.models, args.labels)
        configs = read_configs("--models", args.models)  # a Hub name offline: one line, before any model is embedded
    except (*USER_ERRORS, OSError) as err:
        return report(err)
    try:
        recipe = load_recipe(FinetuneRecipe, args.config, rest + ["--model.pretrained", args.models[0]])
        results = run_probe(
            recipe,
            args.models,
            args.batch_size,
            pooling=args.pooling,
            choose_c=args.choose_c,
            labels=labels,
            cache_dir=args.cache_dir,
            predictions_dir=args.predictions_dir,
            configs=configs,
        )
    except (*USER_ERRORS, OSError) as err:
        return report(err)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_json_atomic(args.output, results)  # whole or absent: an existing file means a finished probe
    return 0


if __name__ == "__main__":
    sys.exit(main())
