"""Long inputs from a short-input teacher: the use a Linformer exists for.

A pretrained encoder such as all-MiniLM-L6-v2 has 512 positions, so a longer document is truncated. A Linformer
converted from it with `--max_sequence_length 2048` reads the whole document at O(n k) cost. Whether that helps is
measured here, against the teacher truncated to its own length:

- `extend_positions` writes the teacher itself with its position table grown to n by the cyclic copy conversion uses
  (`conversion.extend_position_embeddings`, the first step of the Longformer recipe). It is exact full attention at
  n, so it is both the transfer teacher for a Linformer converted at that n (`scripts/transfer_attention.py` refuses
  windows longer than the teacher's positions) and the quadratic baseline. At k = n the Linformer conversion equals it.
- `long_document_probe` embeds labelled documents with each model (mean pooling over real tokens, as
  `embedding_probe`), fits a logistic regression on the documents every model reads whole (at most `threshold`
  tokens) and scores it on the longer ones, which the teacher sees truncated. The models are compared on the same
  long documents, paired, so the standard error is that of the per-document difference.

    python -m experiments.long_input extend /tmp/minilm/all-MiniLM-L6-v2 /tmp/minilm-n2048 --n 2048
    python -m experiments.long_input extend MASKED_LM /tmp/masked-lm-n4096 --n 4096 --positions interpolate
    python -m experiments.long_input probe --data ../shared/data/imdb/train.csv \
        --models /tmp/minilm/all-MiniLM-L6-v2 /tmp/minilm-n2048 /tmp/linformer-n2048-k512 \
        --reference /tmp/minilm-n2048 --output outputs/long_input/probe.json

Needs the `train` extra (datasets, scikit-learn).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import os
import re
import shutil
import sys
import time

import torch

from linformer_hf.cli import ArgumentParser
from linformer_hf.models.lengths import max_input_length
from linformer_hf.outputs import (
    check_output_dir,
    check_output_file,
    publish_folder,
    staging_folder,
    write_json_atomic,
    write_text_atomic,
)

from .embedding_probe import embed, fit_probe

POSITION_EXTENSIONS = ("copy", "interpolate")


def check_model_folders(option: str, names: list[str], config: bool = True) -> None:
    """Each model (or tokenizer) `option` names, before any work: a local folder that is not there is said to be
    missing (`check_model_source`, as the conversion script), not reported as transformers' malformed Hub repo id;
    with `config`, a folder must hold config.json (the model, or the teacher's length, is read from it)."""
    from linformer_hf.training.errors import ConfigError
    from linformer_hf.training.validation import check_model_source

    for name in names:
        check_model_source(name, option)
        if config and os.path.isdir(name) and not os.path.isfile(os.path.join(name, "config.json")):
            raise ConfigError(f"{option}={name} has no config.json: not a saved checkpoint directory.")


@contextlib.contextmanager
def naming_the_hub_model(option: str, name: str):
    """A Hub name that cannot be fetched (offline, nothing cached) is said as such, naming `option` and `name`:
    transformers' message names neither it nor the way out."""
    from linformer_hf.training.errors import LOCAL_MODEL, hub_unreachable, hub_unreachable_error

    try:
        yield
    except OSError as err:
        if hub_unreachable(err):
            raise hub_unreachable_error(option, name, err, LOCAL_MODEL) from None
        raise


def read_configs(option: str, names: list[str]) -> dict:
    """The config of each model `option` names, read before any work: a Hub name offline, or a folder that is not
    a model, is refused before the first model is run over the documents."""
    from transformers import AutoConfig

    configs = {}
    for name in names:
        with naming_the_hub_model(option, name):
            configs[name] = AutoConfig.from_pretrained(name)
    return configs


def interpolate_positions(weight: torch.Tensor, num_positions: int, position_offset: int) -> torch.Tensor:
    """A RoBERTa-layout position table grown to `num_positions` rows by stretching its learned rows over them.

    Rows below `position_offset` are kept; new position p of the n = num_positions - position_offset takes the learned
    table read at the fractional row p (learned - 1) / (n - 1), linearly between its neighbours: every position is
    distinct, and neighbours n / learned apart in the new table are neighbours in the learned one (position
    interpolation, where `conversion.extend_position_embeddings` repeats the learned rows).
    """
    learned = weight[position_offset:]  # (learned, hidden)
    n = num_positions - position_offset
    stretched = torch.nn.functional.interpolate(learned.T[None], size=n, mode="linear", align_corners=True)[0].T
    return torch.cat([weight[:position_offset], stretched], dim=0)  # (num_positions, hidden)


def extend_positions(source: str, output_dir: str, n: int, positions: str = "copy") -> dict:
    """Save the BERT or RoBERTa encoder `source` (with its head, when it has one) with room for n tokens: the new
    positions copy the learned ones (`copy`, conversion's) or stretch them over n (`interpolate`).

    Returns what was done: the source's length, n, how, and the number of position rows before and after.
    """
    import transformers
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from linformer_hf.conversion import _check_source_config, extend_position_embeddings, source_position_layout

    if positions not in POSITION_EXTENSIONS:
        raise ValueError(f"positions={positions!r}: choose one of {POSITION_EXTENSIONS}.")
    check_model_folders("source", [source])  # as the conversion script: a missing folder is named as one
    config = AutoConfig.from_pretrained(source)
    _check_source_config(config)  # BERT or RoBERTa layout, absolute positions, a pad id
    first_row, learned = source_position_layout(config)
    if n <= learned:
        raise ValueError(f"n={n} is not longer than the source's {learned} positions: there is nothing to extend.")
    check_output_dir(output_dir, overwrite=False, flag=None, create=False)
    # the class it was saved as (a masked LM keeps its head), else the bare encoder
    architecture = getattr(transformers, (config.architectures or ["AutoModel"])[0], AutoModel)
    model = architecture.from_pretrained(source)
    embeddings = model.base_model.embeddings.position_embeddings
    key = next(name for name, param in model.named_parameters() if param is embeddings.weight)
    old = embeddings.weight.detach()  # (first_row + learned, hidden)
    rows = first_row + n
    grow = extend_position_embeddings if positions == "copy" else interpolate_positions
    table = grow(old, rows, first_row)  # (first_row + n, hidden)

    config.max_position_embeddings = rows
    extended = type(model)(config)
    state = model.state_dict()
    state[key] = table
    extended.load_state_dict(state, strict=True)  # the index buffers (position_ids, ...) are not persistent
    # Written beside output_dir under a temporary name and moved into place when whole: a kill part-way leaves no
    # folder that reads as a model.
    staging = staging_folder(output_dir)
    shutil.rmtree(staging, ignore_errors=True)
    extended.save_pretrained(staging)

    tokenizer = AutoTokenizer.from_pretrained(source)
    tokenizer.model_max_length = n
    tokenizer.save_pretrained(staging)
    report = {"source": source, "source_positions": learned, "n": n, "positions": positions,
              "rows_before": old.shape[0], "rows": rows}  # fmt: skip
    with open(os.path.join(staging, "extension_report.json"), "w") as handle:
        json.dump(report, handle, indent=2)
    publish_folder(staging, output_dir)
    return report


def read_documents(path: str, text_column: str = "text", label_column: str = "label"):
    """The CSV (or TSV, read as GLUE's: no quoting) file as a pandas frame, checked for these columns."""
    import pandas as pd

    if not os.path.isfile(path):
        raise FileNotFoundError(f"No data file {path}: give a CSV (or TSV) with {text_column!r} and {label_column!r}.")
    frame = pd.read_csv(path, sep="\t" if path.endswith(".tsv") else ",", quoting=3 if path.endswith(".tsv") else 0)
    for column in (text_column, label_column):
        if column not in frame.columns:
            raise ValueError(f"{path} has no column {column!r}; it has {list(frame.columns)}.")
    return frame


def load_documents(path: str, text_column: str = "text", label_column: str = "label") -> tuple[list[str], list[int]]:
    """Texts and integer labels from a CSV (or TSV) file with these columns."""
    frame = read_documents(path, text_column, label_column)
    return [str(t) for t in frame[text_column]], [int(y) for y in frame[label_column]]


def paired_difference(correct: list[bool], baseline: list[bool]) -> dict:
    """Accuracy difference of two classifiers on the same items, with the standard error of the mean difference."""
    if len(correct) != len(baseline) or not correct:
        raise ValueError("Paired comparison needs two equally long, non-empty lists of outcomes.")
    diffs = [float(a) - float(b) for a, b in zip(correct, baseline)]
    mean = sum(diffs) / len(diffs)
    variance = sum((d - mean) ** 2 for d in diffs) / max(1, len(diffs) - 1)
    return {"difference": round(mean, 5), "standard_error": round(math.sqrt(variance / len(diffs)), 5)}


def split_by_length(texts: list[str], tokenizer, threshold: int) -> tuple[list[int], list[int], list[int]]:
    """Indices of the documents of at most `threshold` tokens (special tokens included), of the longer ones, and
    every document's length. Both parts must be non-empty: one is fitted or trained on, the other scored."""
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False, verbose=False)["input_ids"]]
    short = [i for i, length in enumerate(lengths) if length <= threshold]
    long = [i for i, length in enumerate(lengths) if length > threshold]
    if not long or not short:
        raise ValueError(
            f"Of {len(texts)} documents, {len(short)} have at most {threshold} tokens and {len(long)} more: the "
            "comparison needs both (fit on the short, score on the long). Pick another --threshold or other data."
        )
    return short, long, lengths


def write_length_split(data: str, tokenizer_name: str, output_dir: str, threshold: int | None = None) -> dict:
    """Write `short.csv` (documents the teacher reads whole) and `long.csv` (the others) for fine-tuning on the first
    and evaluating on the second (`scripts/finetune.py --data.train_file short.csv --data.validation_file long.csv`)."""
    from transformers import AutoTokenizer

    # the teacher's n is read from its config.json; with --threshold, a folder of the tokenizer alone will do
    check_model_folders("--tokenizer", [tokenizer_name], config=not threshold)
    paths = {name: os.path.join(output_dir, f"{name}.csv") for name in ("short", "long")}
    existing = [path for path in paths.values() if os.path.exists(path)]
    if existing:  # checked before any work, so a split is never half written over
        raise FileExistsError(f"{existing} exist; give a new output directory.")
    if not threshold:
        threshold = max_input_length(read_configs("--tokenizer", [tokenizer_name])[tokenizer_name])
    frame = read_documents(data)
    with naming_the_hub_model("--tokenizer", tokenizer_name):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_name)
    short, long, lengths = split_by_length([str(t) for t in frame["text"]], tokenizer, threshold)
    os.makedirs(output_dir, exist_ok=True)
    for name, rows in (("short", short), ("long", long)):  # each whole or absent: a kill leaves no short file
        write_text_atomic(paths[name], frame.iloc[rows].to_csv(index=False))
    return {"threshold": threshold, "short": len(short), "long": len(long), "longest": max(lengths)}


def write_folds(data: str, output_dir: str, folds: int = 5, seed: int = 0) -> dict:
    """Split the documents of `data` into `folds` label-stratified folds and write, for each fold i,
    `fold-i/train.csv` (the other folds) and `fold-i/test.csv` (fold i), rows in the file's order.

    Every document is in exactly one test fold, so fine-tuning one model per fold and scoring it on that fold gives
    one held-out prediction per document, and two recipes can be compared on the same documents (`crossval`).
    """
    from sklearn.model_selection import StratifiedKFold

    frame = read_documents(data)
    labels = frame["label"].tolist()
    smallest = min(labels.count(label) for label in set(labels))
    if folds < 2 or smallest < folds:
        raise ValueError(
            f"{data}: {folds} folds need at least 2 folds and as many documents of each label as folds (the rarest "
            f"label has {smallest}); give fewer folds or more data."
        )
    existing = [name for name in (f"fold-{i}" for i in range(folds)) if os.path.exists(os.path.join(output_dir, name))]
    if existing:  # checked before any work, so folds are never half written over
        raise FileExistsError(f"{output_dir} already holds {existing}; give a new output directory.")
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    sizes = []
    for i, (train_rows, test_rows) in enumerate(splitter.split(frame, labels)):
        staging = staging_folder(os.path.join(output_dir, f"fold-{i}"))
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        frame.iloc[sorted(train_rows)].to_csv(os.path.join(staging, "train.csv"), index=False)
        frame.iloc[sorted(test_rows)].to_csv(os.path.join(staging, "test.csv"), index=False)
        publish_folder(staging, os.path.join(output_dir, f"fold-{i}"))
        sizes.append(len(test_rows))
    return {"documents": len(frame), "folds": folds, "seed": seed, "test_sizes": sizes}


def read_fold_outcomes(folds_dir: str, run_dirs: list[str]) -> list[bool]:
    """Whether each held-out document was classified correctly, fold after fold: run_dirs[i] is the fine-tuning run
    scored on `folds_dir/fold-i/test.csv` (its `predictions_validation.tsv`). The labels a run wrote must be the test
    fold's, row for row, or the pairing with another recipe would be meaningless."""
    outcomes = []
    for i, run_dir in enumerate(run_dirs):
        path = os.path.join(run_dir, "predictions_validation.tsv")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} is missing: the run for fold {i} has not finished.")
        with open(path, encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        expected = read_documents(os.path.join(folds_dir, f"fold-{i}", "test.csv"))["label"].tolist()
        written = [int(row["label"]) for row in rows]
        if written != expected:
            raise ValueError(
                f"{path} does not hold fold {i}'s test documents in order ({len(written)} rows against "
                f"{len(expected)}): was this run scored on {folds_dir}/fold-{i}/test.csv?"
            )
        outcomes += [int(row["prediction"]) == int(row["label"]) for row in rows]
    return outcomes


def _fold_names(folds_dir: str) -> list[str]:
    """The fold-i folders the folds command wrote, checked to be 0, 1, ... with no gap."""
    names = sorted(
        (name for name in os.listdir(folds_dir) if re.fullmatch(r"fold-\d+", name)), key=lambda n: int(n[5:])
    )
    if not names or names != [f"fold-{i}" for i in range(len(names))]:
        raise ValueError(f"{folds_dir} does not hold folds fold-0, fold-1, ... written by the folds command.")
    return names


def crossval_report(folds_dir: str, runs: dict[str, list[str]], baseline: str) -> dict:
    """Held-out accuracy of each recipe over all folds, and its paired difference with `baseline` on the same
    documents (mean and standard error of the per-document difference in correctness)."""
    if baseline not in runs:
        raise ValueError(f"The baseline {baseline!r} is not among the runs {sorted(runs)}.")
    folds = len(_fold_names(folds_dir))
    for name, dirs in runs.items():
        if len(dirs) != folds:
            raise ValueError(
                f"--run {name} gives {len(dirs)} run dirs; {folds_dir} has {folds} folds: give one run dir per fold, "
                "in fold order."
            )
    outcomes = {name: read_fold_outcomes(folds_dir, dirs) for name, dirs in runs.items()}
    report = {"documents": len(outcomes[baseline]), "baseline": baseline, "runs": {}}
    for name, correct in outcomes.items():
        entry = {"accuracy": round(sum(correct) / len(correct), 5)}
        if name != baseline:
            entry["against_" + baseline] = paired_difference(correct, outcomes[baseline])
        report["runs"][name] = entry
    return report


def score_classifiers(models: list[str], texts: list[str], labels: list[int], batch_size: int = 8) -> dict:
    """Accuracy of each fine-tuned sequence classifier on the documents, each reading as many tokens as it takes
    (its n), and each model after the first paired against the first on the same documents.

    This scores a classifier as it stands, with no update: a teacher, or the same teacher just converted at a larger
    n, which is where fine-tuning on long documents starts from."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    check_model_folders("--models", models)
    read_configs("--models", models)  # a Hub name offline is refused before the first model is scored
    results, outcomes = {"documents": len(texts), "models": {}}, {}
    for name in models:
        started = time.perf_counter()
        with naming_the_hub_model("--models", name):
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModelForSequenceClassification.from_pretrained(name).eval()
        max_length = max_input_length(model.config)
        predictions = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(
                    texts[start : start + batch_size],
                    truncation=True,
                    max_length=max_length,
                    padding=True,
                    return_tensors="pt",
                )
                predictions += model(**batch).logits.argmax(-1).tolist()
        outcomes[name] = [p == y for p, y in zip(predictions, labels)]
        results["models"][name] = {
            "max_length": max_length,
            "accuracy": round(sum(outcomes[name]) / len(texts), 5),
            "seconds": round(time.perf_counter() - started, 1),
        }
        if name != models[0]:
            results["models"][name]["against_first"] = paired_difference(outcomes[name], outcomes[models[0]])
        print(f"{name}: accuracy {results['models'][name]['accuracy']:.4f} reading {max_length} tokens", flush=True)
    return results


def long_document_probe(
    models: list[str],
    texts: list[str],
    labels: list[int],
    threshold: int | None = None,
    reference: str | None = None,
    batch_size: int = 16,
    seed: int = 0,
) -> dict:
    """Probe accuracy on the documents longer than `threshold` tokens, fitted on the shorter ones, for each model.

    `threshold` defaults to the first model's input length (the teacher's). Lengths are counted with the first
    model's tokenizer, so every model is fitted and scored on the same documents. With `reference`, each model's
    embeddings of the long documents are compared with the reference's (cosine; the reference is embedded even if
    it is not among `models`).
    """
    from transformers import AutoModel, AutoTokenizer

    check_model_folders("--models", models)
    check_model_folders("--reference", [reference] if reference else [])
    configs = read_configs("--models", models)  # a Hub name offline is refused before the first model is run
    if reference:
        read_configs("--reference", [reference])
    with naming_the_hub_model("--models", models[0]):
        first_tokenizer = AutoTokenizer.from_pretrained(models[0])
    if threshold is None:
        threshold = max_input_length(configs[models[0]])
    short, long, lengths = split_by_length(texts, first_tokenizer, threshold)
    results = {
        "threshold": threshold,
        "documents": len(texts),
        "short": len(short),
        "long": len(long),
        "long_lengths": {
            "median": sorted(lengths[i] for i in long)[len(long) // 2],
            "max": max(lengths[i] for i in long),
        },
        "models": {},
    }
    embeddings, outcomes = {}, {}
    for name in dict.fromkeys(models + ([reference] if reference else [])):
        started = time.perf_counter()
        with naming_the_hub_model("--models" if name in models else "--reference", name):
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModel.from_pretrained(name).eval()
        max_length = max_input_length(model.config)
        features = embed(model, tokenizer, texts, batch_size, max_length)  # (documents, hidden)
        seconds = time.perf_counter() - started
        embeddings[name] = features
        if name not in models:
            continue
        classifier = fit_probe(features[short].numpy(), [labels[i] for i in short], seed)
        predictions = classifier.predict(features[long].numpy())
        outcomes[name] = [bool(p == labels[i]) for p, i in zip(predictions, long)]
        scores = {"accuracy": round(sum(outcomes[name]) / len(long), 5), "C": float(classifier.C_[0])}
        truncated = sum(lengths[i] > max_length for i in long)
        results["models"][name] = {
            "max_length": max_length,
            "long_accuracy": scores["accuracy"],
            "C": scores["C"],
            "long_documents_truncated": truncated,
            "seconds": round(seconds, 1),
        }
        print(
            f"{name}: accuracy on {len(long)} long documents {scores['accuracy']:.4f} (reads {max_length} tokens, "
            f"{truncated} truncated; {seconds:.0f} s)",
            flush=True,
        )
    baseline = models[0]
    for name in models[1:]:
        results["models"][name]["against_" + os.path.basename(baseline.rstrip("/"))] = paired_difference(
            outcomes[name], outcomes[baseline]
        )
    if reference:
        for name in models:
            cosine = (embeddings[name][long] * embeddings[reference][long]).sum(-1)  # both L2-normalised
            results["models"][name]["cosine_with_reference_long"] = round(float(cosine.mean()), 4)
        results["reference"] = reference
    return results


def main(argv: list[str] | None = None) -> int:
    from linformer_hf.training.errors import LOCAL_MODEL, USER_ERRORS, hub_unreachable, hub_unreachable_error, report

    parser = ArgumentParser(
        prog="python -m experiments.long_input",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    extend = commands.add_parser("extend", help="the teacher with its positions grown to n (full attention)")
    extend.add_argument("source", help="a BERT or RoBERTa encoder: a local folder or a Hub name")
    extend.add_argument("output_dir")
    extend.add_argument("--n", type=int, required=True, help="the new maximum input length")
    extend.add_argument(
        "--positions", choices=POSITION_EXTENSIONS, default="copy",
        help="copy: repeat the learned rows (conversion's, Longformer's); interpolate: stretch them over n",
    )  # fmt: skip
    split = commands.add_parser("split", help="short.csv / long.csv by the teacher's length, for fine-tuning")
    split.add_argument("--data", required=True, help="CSV with text and label columns")
    split.add_argument("--tokenizer", required=True, help="the teacher (its tokenizer counts, its n is the default)")
    split.add_argument("--threshold", type=int, help="long = more tokens than this (default: the teacher's n)")
    split.add_argument("output_dir")
    folds = commands.add_parser(
        "folds", help="label-stratified cross-validation folds of a CSV: fold-i/{train,test}.csv"
    )
    folds.add_argument("--data", required=True, help="CSV with text and label columns (e.g. long.csv from split)")
    folds.add_argument("--folds", type=int, default=5)
    folds.add_argument("--seed", type=int, default=0)
    folds.add_argument("output_dir")
    crossval = commands.add_parser("crossval", help="paired held-out accuracy of recipes fine-tuned on each fold")
    crossval.add_argument("--folds_dir", required=True, help="the folds command's output_dir")
    crossval.add_argument(
        "--run",
        nargs="+",
        action="append",
        required=True,
        metavar=("NAME", "RUN_DIR"),
        help="a recipe's name, then its fine-tuning output dirs, one per fold in fold order; repeat per recipe",
    )
    crossval.add_argument("--baseline", required=True, help="the NAME the others are compared with")
    crossval.add_argument("--output", required=True, help="results JSON (refused if it exists)")
    score = commands.add_parser("score", help="accuracy of fine-tuned classifiers as they stand, paired with the first")
    score.add_argument("--data", required=True, help="CSV/TSV with text and label columns")
    score.add_argument("--models", nargs="+", required=True, help="classifier dirs; the first is the baseline")
    score.add_argument("--batch_size", type=int, default=8)
    score.add_argument("--output", required=True, help="results JSON (refused if it exists)")
    probe = commands.add_parser("probe", help="probe accuracy on documents longer than the teacher reads")
    probe.add_argument("--data", required=True, help="CSV/TSV with text and label columns")
    probe.add_argument("--text_column", default="text")
    probe.add_argument("--label_column", default="label")
    probe.add_argument("--models", nargs="+", required=True, help="the first is the baseline (the teacher)")
    probe.add_argument("--reference", help="embeddings to compare each model's with (e.g. the extended teacher)")
    probe.add_argument("--threshold", type=int, help="long = more tokens than this (default: the first model's n)")
    probe.add_argument("--batch_size", type=int, default=16)
    probe.add_argument("--output", required=True, help="results JSON (refused if it exists)")
    args = parser.parse_args(argv)
    try:
        if args.command == "extend":
            print(json.dumps(extend_positions(args.source, args.output_dir, args.n, args.positions), indent=2))
            return 0
        if args.command == "split":
            print(json.dumps(write_length_split(args.data, args.tokenizer, args.output_dir, args.threshold), indent=2))
            return 0
        if args.command == "folds":
            print(json.dumps(write_folds(args.data, args.output_dir, args.folds, args.seed), indent=2))
            return 0
        check_output_file(args.output, overwrite=False, flag=None)
        if args.command == "crossval":
            results = crossval_report(args.folds_dir, {name: dirs for name, *dirs in args.run}, args.baseline)
            print(json.dumps(results, indent=2))
        elif args.command == "score":
            check_model_folders("--models", args.models)  # before the data is read
            texts, labels = load_documents(args.data)
            results = score_classifiers(args.models, texts, labels, args.batch_size)
        else:
            check_model_folders("--models", args.models)  # before the data is read
            check_model_folders("--reference", [args.reference] if args.reference else [])
            texts, labels = load_documents(args.data, args.text_column, args.label_column)
            results = long_document_probe(args.models, texts, labels, args.threshold, args.reference, args.batch_size)
    except (*USER_ERRORS, OSError, ValueError) as err:  # an existing output, a missing data file, bad folds...
        if args.command == "extend" and hub_unreachable(err):  # transformers' message names neither it nor the way out
            err = hub_unreachable_error("source", args.source, err, LOCAL_MODEL)
        return report(err)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_json_atomic(args.output, results)  # whole or absent: an existing file means a finished result
    return 0


if __name__ == "__main__":
    sys.exit(main())
