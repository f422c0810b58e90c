"""Classical stylometry on the author-attribution passages: does the data reward reading more, without a transformer?

A TF-IDF + linear SVM baseline (scikit-learn) on the data set `author_attribution` builds, reading each passage as
much as a model of n positions does, for each n of ``--lengths``. If it scores higher at 4,096 tokens than at 512, the
task rewards reading more, whatever the compared transformers make of it.

**What a reading of n tokens is.** Fine-tuning reads a passage as ``tokenizer(text, truncation=True,
max_length=n)`` (`linformer_hf.training.finetuning_model.tokenize_task`): the tokenizer's special tokens (RoBERTa's
``<s>`` and ``</s>``: 2) and the passage's first n minus those content tokens. Here the passage is tokenised with that
same call, by the data set's own tokenizer (its manifest's, checked against the vocabulary's SHA-256 it records), and
cut after the last character its content tokens cover (`read_first`): the baseline at n = 512 sees the text the
teacher at 512 reads, its first 510 tokens, and at 4,096 the text the Linformer reads, 4,094 tokens (a passage holds
at least that many, and a few more up to the end of its last word). The one difference: where the last token read
is whitespace, its offsets cover only its first character, so a run of trailing whitespace may be cut short, which
neither kind of features sees. n may not exceed the data set's ``passage_tokens`` (the passages' length).

**The fit, one per (length, features).** The TF-IDF vocabulary and weights are fitted on the training passages only,
a `LinearSVC` on them for each C of `C_GRID`, and the C of the highest validation accuracy (the smallest such C on a
tie) is kept; the test passages (held-out books) are only scored, never looked at to choose. Features (`FEATURES`):
``word``, word unigrams; ``char``, character 2- to 4-grams within words. Deterministic: LinearSVC's random_state is
fixed, and the rest has no randomness.

    python -m experiments.stylometry_baseline --data outputs/authors40/data --output_dir outputs/stylometry-authors40 \\
        --lengths 512 2048 4096 --features word char

Writes, in a folder that appears whole at once (refused where it holds anything, unless ``--overwrite`` and it is an
earlier such folder): results.csv (each fit's length, features, C, validation and test accuracy, right answers,
seconds), runs/<features>-n<length>/predictions_test.tsv (index, prediction, label: one row a test passage in the test
split's order, the layout of the fine-tuned runs', so `author_attribution.test_correct` reads either), pairs.csv and
results.md (each longer reading against each shorter, passage by passage and by held-out book: the record's
`paired_difference` and `book_difference`), and stylometry.json (the data set's passages and tokenizer, the grid, the
library versions). Needs the ``train`` extra (scikit-learn).
"""

from __future__ import annotations

import itertools
import os
import time

from linformer_hf.cli import ArgumentParser
from linformer_hf.loading import vocabulary_sha256
from linformer_hf.outputs import (
    FolderKind,
    check_output_dir,
    check_replaceable,
    discard_staging,
    publish_new_folder,
    replace_folder,
    sigterm_unwinds,
    unique_staging_folder,
    write_json_atomic,
    write_text_atomic,
)
from linformer_hf.training.errors import USER_ERRORS, ConfigError, MissingExtra, positive_int, report

from .author_attribution import (
    book_difference,
    data_sha256,
    paired_difference,
    read_manifest,
    split_rows,
    test_passages_sha256,
    write_csv_atomic,
)

# TfidfVectorizer's settings for each kind of features (sublinear tf: a word's count matters less than its presence).
FEATURES = {
    "word": {"sublinear_tf": True, "min_df": 2},
    "char": {"analyzer": "char_wb", "ngram_range": (2, 4), "sublinear_tf": True, "min_df": 2, "max_features": 200_000},
}
C_GRID = (0.1, 0.3, 1.0, 3.0, 10.0)
SEED = 0  # LinearSVC's random_state
MAX_ITER = 10_000
RESULT_COLUMNS = [
    "length",
    "content_tokens",
    "features",
    "C",
    "validation_accuracy",
    "test_accuracy",
    "test_correct",
    "test_passages",
    "seconds",
]
PAIR_COLUMNS = [
    "features",
    "length",
    "reference_length",
    "points",
    "ci95_low",
    "ci95_high",
    "mcnemar_p",
    "books",
    "book_ci95_low",
    "book_ci95_high",
    "by_book_points",
    "by_book_ci95_low",
    "by_book_ci95_high",
    "by_book_p",
]
RECORD = "stylometry.json"
FILES = ("results.csv", "results.md", "pairs.csv", RECORD, "runs")
# What --overwrite replaces, whole: only an earlier baseline's folder.
STYLOMETRY = FolderKind(
    what="an earlier stylometry baseline's folder", required=(RECORD,), holds=lambda folder, name: name in FILES
)


def run_name(features: str, length: int) -> str:
    return f"{features}-n{length}"


def load_tokenizer(manifest: dict, data: str, tokenizer_dir: str | None = None):
    """The tokenizer the passages were cut with: the manifest's (or `tokenizer_dir`), refused unless its vocabulary is
    the one the manifest records."""
    from transformers import AutoTokenizer

    tokenizer_dir = tokenizer_dir or manifest["tokenizer"]
    if not os.path.isdir(tokenizer_dir):
        raise ConfigError(
            f"{data} was cut with the tokenizer in {tokenizer_dir}, which is not a folder (moved?): give it with "
            "--tokenizer."
        )
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if vocabulary_sha256(tokenizer.get_vocab()) != manifest["vocabulary_sha256"]:
        raise ConfigError(
            f"{tokenizer_dir}'s tokenizer is not the one {data}'s passages were cut with ({manifest['tokenizer']}): n "
            "tokens of another vocabulary are another amount of text. Give that tokenizer with --tokenizer."
        )
    if not tokenizer.is_fast:
        raise ConfigError(f"{tokenizer_dir}: a fast tokenizer is needed (character offsets of its tokens).")
    return tokenizer


def check_request(data: str, lengths: list[int], features: list[str], tokenizer_dir: str | None = None):
    """Refuse what the baseline cannot read as asked, before any work; returns the data set's manifest and tokenizer."""
    unknown = [name for name in features if name not in FEATURES]
    if unknown:
        raise ConfigError(f"--features {' '.join(unknown)}: unknown; give some of {', '.join(FEATURES)}.")
    for flag, values in (("--lengths", lengths), ("--features", features)):
        if len(set(values)) != len(values):
            raise ConfigError(f"{flag} {' '.join(map(str, values))} names one twice: give each once.")
    manifest = read_manifest(data)  # refuses a folder that is not an attribution data set
    tokenizer = load_tokenizer(manifest, data, tokenizer_dir)
    longest = manifest["passage_tokens"]
    special = tokenizer.num_special_tokens_to_add(pair=False)
    wrong = [n for n in lengths if n > longest or n <= special]
    if wrong:
        raise ConfigError(
            f"--lengths {' '.join(map(str, wrong))}: {data}'s passages hold {longest:,} tokens, and a reading of n "
            f"tokens holds {special} special tokens and n - {special} of text: give lengths from {special + 1} to "
            f"{longest}."
        )
    return manifest, tokenizer


def read_first(texts: list[str], tokenizer, n: int) -> list[str]:
    """Each text as far as a model of n positions reads it: fine-tuning's call (`tokenize_task`:
    ``tokenizer(text, truncation=True, max_length=n)``), the text cut after the last character its tokens cover (the
    special tokens cover none; a whitespace token's offsets cover its first character only)."""
    encoded = tokenizer(texts, truncation=True, max_length=n, return_offsets_mapping=True, verbose=False)
    return [text[: max(end for _, end in offsets)] for text, offsets in zip(texts, encoded["offset_mapping"])]


def fit(texts: dict[str, list[str]], labels: dict[str, list[int]], features: str) -> dict:
    """TF-IDF fitted on the training texts, a LinearSVC for each C of `C_GRID`, the C of the best validation accuracy
    kept (the first on a tie); its answers to the test texts, and the seconds it all took. ``labels``: the training
    and validation passages' (the test passages' are never given)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.svm import LinearSVC

    began = time.perf_counter()
    vectorizer = TfidfVectorizer(**FEATURES[features])
    train = vectorizer.fit_transform(texts["train"])
    validation, test = vectorizer.transform(texts["validation"]), vectorizer.transform(texts["test"])
    best = None
    for C in C_GRID:
        model = LinearSVC(C=C, random_state=SEED, max_iter=MAX_ITER).fit(train, labels["train"])
        answers = model.predict(validation)
        accuracy = sum(int(a) == b for a, b in zip(answers, labels["validation"])) / len(answers)
        if best is None or accuracy > best[0]:
            best = (accuracy, C, model)
    accuracy, C, model = best
    return {
        "C": C,
        "validation_accuracy": accuracy,
        "predictions": [int(a) for a in model.predict(test)],
        "seconds": time.perf_counter() - began,
    }


def p_value(p: float) -> str:
    """A p as the report gives it: 4 decimals (the statistics round to them), and below the last one, said so."""
    return "< 0.0001" if p < 0.0001 else f"{p:.4f}"


def report_text(manifest: dict, data: str, rows: list[dict], pairs: list[dict], cut_seconds: dict, load) -> str:
    passages = manifest["passages"]
    lines = [
        "# Author attribution: classical stylometry (TF-IDF + linear SVM) by reading length",
        "",
        f"{data}: {manifest['authors']} authors (chance {100 / manifest['authors']:.1f}%); {passages['train']} "
        f"training, {passages['validation']} validation (the choice of C), {passages['test']} test passages (held-out "
        "books; the score). A reading of n tokens is the passage's text as a model of n positions reads it (the "
        f"data set's tokenizer, n minus {rows[0]['length'] - rows[0]['content_tokens']} special tokens). C from "
        f"{', '.join(map(str, C_GRID))} on the validation passages. Load average: {load[0]} at the start, {load[1]} "
        "at the end.",
        "",
        "| features | reads (tokens) | C | validation accuracy | test accuracy (right) | s (fit) |",
        "| --- | --- | --- | --- | --- | --- |",
        *[
            f"| {r['features']} | {r['length']:,} | {r['C']} | {100 * r['validation_accuracy']:.1f} | "
            f"{100 * r['test_accuracy']:.1f} ({r['test_correct']}) | {r['seconds']:.1f} |"
            for r in rows
        ],
        "",
        "s (fit): TF-IDF fitted and applied, an SVM for each C, the test answers. Cutting the passages (tokenising): "
        + ", ".join(f"{seconds:.1f} s at {n:,}" for n, seconds in cut_seconds.items())
        + ".",
    ]
    if pairs:
        lines += [
            "",
            "Reading more, in test accuracy points (95% paired bootstrap interval over passages; over held-out books; "
            "the exact McNemar test's p), and with each held-out book weighed alike (95% over books; sign-flip p):",
            "",
            "| features | reads | against | points (95% over passages; over books) | p | each book alike (95%; p) |",
            "| --- | --- | --- | --- | --- | --- |",
            *[
                f"| {p['features']} | {p['length']:,} | {p['reference_length']:,} | {p['points']:+.1f} "
                f"({p['ci95_low']:+.1f} to {p['ci95_high']:+.1f}; {p['book_ci95_low']:+.1f} to "
                f"{p['book_ci95_high']:+.1f}) | {p_value(p['mcnemar_p'])} | {p['by_book_points']:+.1f} "
                f"({p['by_book_ci95_low']:+.1f} to {p['by_book_ci95_high']:+.1f}; {p_value(p['by_book_p'])}) |"
                for p in pairs
            ],
        ]
    return "\n".join(lines) + "\n"


def run(
    data: str,
    output_dir: str,
    lengths: list[int] = (512, 2048, 4096),
    features: list[str] = ("word", "char"),
    overwrite: bool = False,
    tokenizer_dir: str | None = None,
) -> str:
    """Fit and score the baseline for each (length, features) (see the module's docstring); returns results.md."""
    try:
        import sklearn
    except ImportError:
        raise MissingExtra('the stylometry baseline needs scikit-learn: pip install -e ".[train]"') from None
    lengths, features = list(lengths), list(features)
    check_replaceable(output_dir, STYLOMETRY)  # with or without --overwrite: it would be refused in turn
    check_output_dir(output_dir, overwrite=overwrite, create=False)
    manifest, tokenizer = check_request(data, lengths, features, tokenizer_dir)
    lengths = sorted(lengths)
    rows = {split: split_rows(data, split, ["text", "label", "book"]) for split in ("train", "validation", "test")}
    labels = {split: [row["label"] for row in passages] for split, passages in rows.items()}
    load = [" / ".join(f"{x:.1f}" for x in os.getloadavg())]
    special = tokenizer.num_special_tokens_to_add(pair=False)

    results, cut_seconds, correct = [], {}, {}
    for n in lengths:
        began = time.perf_counter()
        texts = {split: read_first([row["text"] for row in passages], tokenizer, n) for split, passages in rows.items()}
        cut_seconds[n] = time.perf_counter() - began
        for name in features:
            fitted = fit(texts, {split: labels[split] for split in ("train", "validation")}, name)  # no test label
            right = [a == b for a, b in zip(fitted["predictions"], labels["test"])]
            correct[(name, n)] = right
            results.append(
                {
                    "length": n,
                    "content_tokens": n - special,
                    "features": name,
                    "C": fitted["C"],
                    "validation_accuracy": fitted["validation_accuracy"],
                    "test_accuracy": sum(right) / len(right),
                    "test_correct": sum(right),
                    "test_passages": len(right),
                    "seconds": fitted["seconds"],
                    "predictions": fitted["predictions"],
                }
            )
            print(
                f"{name} at {n}: C {fitted['C']}, validation {100 * fitted['validation_accuracy']:.1f}%, test "
                f"{100 * sum(right) / len(right):.1f}% ({fitted['seconds']:.0f} s)",
                flush=True,
            )
    books = [row["book"] for row in rows["test"]]
    pairs = []
    for name in features:
        for shorter, longer in itertools.combinations(lengths, 2):
            difference = paired_difference(correct[(name, longer)], correct[(name, shorter)])
            pairs.append(
                {
                    "features": name,
                    "length": longer,
                    "reference_length": shorter,
                    "points": difference["vs_teacher_points"],
                    "ci95_low": difference["vs_teacher_ci95_low"],
                    "ci95_high": difference["vs_teacher_ci95_high"],
                    "mcnemar_p": difference["vs_teacher_mcnemar_p"],
                    **book_difference([correct[(name, longer)]], [correct[(name, shorter)]], books),
                }
            )
    load.append(" / ".join(f"{x:.1f}" for x in os.getloadavg()))
    text = report_text(manifest, data, results, pairs, cut_seconds, load)

    target = os.path.realpath(output_dir)  # a link's folder: the rename replaces the folder, not the link
    staging = unique_staging_folder(target)
    try:
        for result in results:
            directory = os.path.join(staging, "runs", run_name(result["features"], result["length"]))
            os.makedirs(directory)
            write_text_atomic(
                os.path.join(directory, "predictions_test.tsv"),
                "index\tprediction\tlabel\n"
                + "".join(
                    f"{i}\t{a}\t{b}\n"
                    for i, (a, b) in enumerate(zip(result["predictions"], labels["test"], strict=True))
                ),
            )
        write_csv_atomic(
            os.path.join(staging, "results.csv"),
            RESULT_COLUMNS,
            [
                {
                    **{k: v for k, v in r.items() if k != "predictions"},
                    "validation_accuracy": round(r["validation_accuracy"], 4),
                    "test_accuracy": round(r["test_accuracy"], 4),
                    "seconds": round(r["seconds"], 1),
                }
                for r in results
            ],
        )
        write_csv_atomic(os.path.join(staging, "pairs.csv"), PAIR_COLUMNS, pairs)
        write_text_atomic(os.path.join(staging, "results.md"), text)
        write_json_atomic(
            os.path.join(staging, RECORD),
            {
                "data": os.path.abspath(data),
                "test_passages_sha256": test_passages_sha256(data),
                "data_sha256": data_sha256(data),
                "tokenizer": os.path.abspath(tokenizer_dir or manifest["tokenizer"]),
                "vocabulary_sha256": manifest["vocabulary_sha256"],
                "lengths": lengths,
                "features": {name: FEATURES[name] for name in features},
                "C_grid": list(C_GRID),
                "random_state": SEED,
                "max_iter": MAX_ITER,
                "scikit_learn": sklearn.__version__,
            },
        )
        if overwrite and os.path.isdir(target) and os.listdir(target):
            replace_folder(staging, target, STYLOMETRY)  # an earlier baseline's folder (checked above)
        else:  # refused where another run filled it meanwhile
            publish_new_folder(staging, target)
    finally:
        discard_staging(staging)  # left only by a failure or a stop
    return text


def main(argv=None):
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="an author-attribution data set (author_attribution build)")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--lengths", type=positive_int, nargs="+", default=[512, 2048, 4096], help="tokens read")
    parser.add_argument("--features", nargs="+", default=["word", "char"], help=f"some of {', '.join(FEATURES)}")
    parser.add_argument("--tokenizer", help="the data set's tokenizer, where its manifest's folder moved")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier baseline's folder")
    args = parser.parse_args(argv)
    try:
        with sigterm_unwinds():  # a kill removes the staging folder beside --output_dir
            text = run(args.data, args.output_dir, args.lengths, args.features, args.overwrite, args.tokenizer)
    except (*USER_ERRORS, FileExistsError, NotADirectoryError, OSError) as err:
        report(err)
        raise SystemExit(2) from None
    print(text, end="")


if __name__ == "__main__":
    main()
