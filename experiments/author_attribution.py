"""Author attribution on long passages of books: a long-document task where reading more can pay.

Which of the books' authors wrote a passage? The data are the books of ../shared/data/gutenberg (its README): every
author with at least 4 books has one book in its ``validation`` split, and those authors (83) are the classes.

**The data set** (`build_dataset`, the ``build`` command) is a local folder in a Hub dataset's layout (parquet shards,
a README declaring the splits; columns ``text``, ``label`` (a ClassLabel whose names are the authors), ``book``,
``start``), which the package's fine-tuning reads as ``data.dataset`` with ``data.task: authors``
(configs/finetune/authors.yaml):

- ``train``: up to ``train_per_author`` passages of each author's training books;
- ``validation``: up to ``dev_per_author`` other passages of the same training books, to choose the model on (the
  fine-tuning keeps the best evaluation);
- ``test``: up to ``test_per_author`` passages of the author's validation book, which no training passage comes from.
  This is the score (results.json ``test``): the model is never chosen on it.

Passages are measured in tokens of one tokenizer (the compared models'): each holds at least ``passage_tokens`` tokens
with the special tokens the tokenizer adds (4,096 by default), and ends at the first word boundary after them, so it
never ends inside a word. A book is cut into consecutive slots of ``passage_tokens`` x 6 characters (English text
takes about 4.2 characters a token), a passage is cut from the start of its slot (snapped to a paragraph or word
start), so no two passages overlap; the first and last ``edge_characters`` of a book (title page, contents, "THE
END", advertisements of the author's other works) are never used. An author's passages are taken round-robin over
their books (each book's slots in a seeded random order), so a long book does not fill the quota; every author gets
the same quota, or all they have. An author whose books give no training passage, or whose held-out book gives none
(a few short books), is left out of the classes (listed in the manifest). Everything is deterministic given the seed,
the books and the tokenizer.

**What makes the comparison fair.** Every model is fine-tuned on the same passages in the same order (same recipe,
seed and number of updates), chosen on the same validation passages and scored on the same test passages. A model of
n positions reads each passage's first n tokens (the fine-tuning truncates to the model's n): the teacher at 512 reads
the first 512, full attention at 2,048 the first 2,048, the Linformer at 4,096 all of it. As every passage is at least
4,096 tokens long, every model reads a full n-token input, never padding, so the time per passage is that of n
tokens. What differs is only how much of each passage a model reads (and how it attends), which is the question: the
same passages, not the same tokens (the teacher at 512 reads an eighth of each; fed the rest as more passages it
would answer another question, whether more data pays). The
passages are cut with the models' tokenizer (the teacher's, which the uptrained Linformer and the teacher with copied
positions carry): ``compare`` refuses a model whose vocabulary is not the one the data were cut with, as n tokens of
another tokenizer would be another amount of text.

**The comparison** (`compare`): for the Linformer at 4,096 (uptrained from the teacher), the teacher truncated at its
own 512, and the teacher with its positions copied out to 2,048 and 4,096 (`long_input.extend_positions`: full
attention over the whole input, the Longformer recipe's first step), one ``python -m linformer_hf.training.finetune``
run each, one after another, in <output_dir>/runs/<run> (its console in <run>.log). A finished run (results.json
written) is not repeated; a stopped one resumes from its last checkpoint. results.md and results.csv then give, per
run, the test accuracy, the time per passage of inference (the test split's prediction, per passage) and the training
time (the wall time of its segments, each child process one, in runs/<run>/timing.jsonl: a lower bound, marked so,
where a segment's driver was killed outright and never wrote its end).

    python -m experiments.author_attribution build --books ../shared/data/gutenberg --tokenizer TEACHER_DIR \\
        --output_dir outputs/authors/data
    python -m experiments.author_attribution compare --data outputs/authors/data --linformer LINFORMER_DIR \\
        --teacher TEACHER_DIR --output_dir outputs/authors

Before anything is written, compare refuses what could not run to its end or would report what it did not measure:
an override the recipe does not take, a teacher that cannot be copied out to a longer n, a model reading more tokens
than a passage holds (padding). Each Ctrl-C or SIGTERM reaches the running fine-tuning (the first: it checkpoints and
stops; a second: at once; a driver killed outright sends it one SIGTERM), and no later run starts. compare.json in the
folder records the data (every split's passages), the recipe, the overrides, the seed, the models (each by the
SHA-256 of its config and weights, so the folders may move) and how many tokens of a passage each run reads; once a
run there has a result or a checkpoint, or another compare is running one, a compare with others into that folder is
refused (its runs would be reported as the new ones). Compares with the same settings may share a folder, each running
other runs (`--only`); a run another compare is running is refused (`claim_runs`).

**Pooling** (`pool`): several compare folders of the same test passages (another fine-tuning seed each, or models from
another pretraining seed), each run's accuracy per folder and their mean, and the differences passage by passage over
all of them (`pooled_difference`). A run of one name must read as many tokens in every folder (a model of another n
is refused):

    python -m experiments.author_attribution pool outputs/authors outputs/authors-seed2 \\
        --output_dir outputs/authors-pooled
"""

from __future__ import annotations

import csv
import glob
import hashlib
import itertools
import json
import os
import random
import re
import shutil
import sys
import time

from linformer_hf.cli import ArgumentParser
from linformer_hf.loading import model_sha256, saved_model_length, vocabulary_sha256
from linformer_hf.outputs import (
    FolderKind,
    check_output_dir,
    check_replaceable,
    sigterm_unwinds,
    staged_output,
    write_csv_atomic,
    write_json_atomic,
    write_text_atomic,
)
from linformer_hf.training.config import ConfigError, FinetuneRecipe, load_recipe
from linformer_hf.training.errors import USER_ERRORS, non_negative_int, positive_int, report
from linformer_hf.training.tasks import AUTHORS_MANIFEST as MANIFEST  # the fine-tuning checks it (data.task authors)
from linformer_hf.training.validation import check_model_source

from .child_process import claim_runs, claimed_by_others, exclusive, run_child, stopped_message
from .long_input import read_configs

CHARACTERS_PER_TOKEN = 6  # a slot's characters per token of its passage: more than English text takes (about 4.2)
COMPARISON = "compare.json"  # in a compare folder: the test passages its runs are scored on, the models, the overrides
RECIPE = os.path.join("configs", "finetune", "authors.yaml")
RESULT_COLUMNS = [
    "run",
    "model",
    "n",
    "test_accuracy",
    "test_passages",
    "seconds_per_passage",
    "validation_accuracy",
    "updates",
    "training_seconds",
    "training_segments_unended",
    "vs_teacher_points",
    "vs_teacher_ci95_low",
    "vs_teacher_ci95_high",
    "vs_teacher_mcnemar_p",
]
BOOTSTRAP_SAMPLES = 10_000
POOLED_COLUMNS = ["run", "seeds", "test_accuracy_per_seed", "test_accuracy_mean", "test_accuracy_by_book"]
PAIR_COLUMNS = [
    "run",
    "reference",
    "points",
    "ci95_low",
    "ci95_high",
    "p",
    "books",
    "book_ci95_low",
    "book_ci95_high",
    "by_book_points",
    "by_book_ci95_low",
    "by_book_ci95_high",
    "by_book_p",
]
POOL_FILES = ("results.md", "pooled.csv", "pairs.csv")
# What pool's --overwrite replaces, whole: a folder of pool's files only (an earlier version killed part-way may have
# left some of them).
POOLED = FolderKind(what="an earlier pool's folder", required=(), holds=lambda folder, name: name in POOL_FILES)


# What `build_dataset` writes in its folder: all that --overwrite may delete.
BUILD_FILES = (MANIFEST, "README.md", *(f"{split}-00000-of-00001.parquet" for split in ("train", "validation", "test")))
# What --overwrite replaces, whole: only an earlier data set (a compare folder above it, say, holds its runs).
DATA_SET = FolderKind(
    what="a data set build wrote", required=(MANIFEST,), holds=lambda folder, name: name in BUILD_FILES
)


def book_shards(books: str) -> dict[str, list[str]]:
    """{"train": [shard, ...], "validation": [shard]} of a folder in the gutenberg layout."""
    shards = {split: sorted(glob.glob(os.path.join(books, f"{split}*.parquet"))) for split in ("train", "validation")}
    missing = [split for split, files in shards.items() if not files]
    if missing:
        raise ConfigError(f"{books} has no {' or '.join(missing)} shards ({{split}}-*.parquet): give the books folder.")
    return shards


def read_catalogue(shards: dict[str, list[str]]) -> list[dict]:
    """Every book's split, shard, row, id, author and length in characters, one shard read at a time."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    books = []
    for split, files in shards.items():
        for shard in files:
            table = pq.read_table(shard, columns=["id", "author", "text"])
            lengths = pc.utf8_length(table["text"]).to_pylist()
            for row, (book_id, author, length) in enumerate(
                zip(table["id"].to_pylist(), table["author"].to_pylist(), lengths)
            ):
                books.append(
                    {"split": split, "shard": shard, "row": row, "id": book_id, "author": author, "length": length}
                )
            del table
    return books


OVERLAP_CHARACTERS = 150  # the slice of a passage looked for in the training books


def normalised(text: str) -> str:
    """Lower case, every run of other characters than letters and digits one space: the same text in two editions."""
    return re.sub(r"[^a-z0-9]+", " ", text.lower())


def normalised_text(shards: list[str]) -> str:
    """The `normalised` text of every book of these parquet shards, one book a line: what a slice of a held-out
    book's text is looked for in."""
    import pyarrow.parquet as pq

    return "\n".join(
        normalised(text) for shard in shards for text in pq.read_table(shard, columns=["text"])["text"].to_pylist()
    )


def test_passages_in_training_books(data_dir: str, books: str) -> list[bool]:
    """For each test passage of the data set in `data_dir`, in order: whether a training book of `books` also holds
    its text (the same story in a collection, a volume of a complete edition), looked for by a slice from its middle
    (OVERLAP_CHARACTERS, `normalised`) in all the training books. A book being held out does not keep its text out of
    the training books."""

    corpus = normalised_text(book_shards(books)["train"])
    found = []
    for row in split_rows(data_dir, "test", ["text"]):
        text = normalised(row["text"])
        middle = len(text) // 2
        found.append(text[middle : middle + OVERLAP_CHARACTERS] in corpus)
    return found


def passages_in_training_books(data_dir: str, books: str) -> list[dict]:
    """`test_passages_in_training_books` by held-out book: {book, author, passages, found}."""
    with open(os.path.join(data_dir, MANIFEST), encoding="utf-8") as fh:
        names = list(json.load(fh)["per_author"])  # in the order of the labels (build_dataset's authors)
    test = split_rows(data_dir, "test", ["label", "book"])
    counts: dict[str, dict] = {}
    for row, found in zip(test, test_passages_in_training_books(data_dir, books), strict=True):
        entry = counts.setdefault(
            row["book"], {"book": row["book"], "author": names[row["label"]], "passages": 0, "found": 0}
        )
        entry["passages"] += 1
        entry["found"] += found
    return list(counts.values())


def book_slots(length: int, slot: int, edge: int) -> list[int]:
    """Start characters of the consecutive slots of `slot` characters between the book's first and last `edge`."""
    return list(range(edge, length - edge - slot + 1, slot))


def round_robin(author_books: list[dict], slot: int, edge: int, rng: random.Random) -> list[tuple[str, int]]:
    """(book id, slot start) of every slot of these books: one slot of each book in turn, the books and each book's
    slots in a seeded random order."""
    queues = []
    for book in sorted(author_books, key=lambda b: b["id"]):
        starts = book_slots(book["length"], slot, edge)
        rng.shuffle(starts)
        queues.append([(book["id"], start) for start in starts])
    rng.shuffle(queues)
    order = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop(0))
    return order


def cut_passage(text: str, start: int, slot: int, tokenizer, content_tokens: int) -> tuple[str, int] | None:
    """The passage of the slot at `start`: from a paragraph (or else a word) start near the slot's start, to the
    first word boundary after `content_tokens` tokens; with its start character. None when the slot holds fewer."""
    window = text[start : start + slot]
    head = window[: slot // 8]
    paragraph = head.find("\n\n")
    if paragraph >= 0:
        skip = paragraph + 2
    else:
        space = next((i for i, char in enumerate(head) if char.isspace()), 0)
        skip = space + 1 if space else 0
    while skip < len(window) and window[skip].isspace():
        skip += 1
    window = window[skip:]
    encoded = tokenizer(window, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    offsets = encoded["offset_mapping"]
    for i in range(content_tokens - 1, len(offsets)):
        end = offsets[i][1]
        # A word ends here (text, then whitespace): a prefix cut here tokenises as the whole window did.
        if 0 < end < len(window) and window[end].isspace() and not window[end - 1].isspace():
            return window[:end], start + skip
    return None


def build_dataset(
    books: str,
    tokenizer_dir: str,
    output_dir: str,
    passage_tokens: int = 4096,
    train_per_author: int = 24,
    dev_per_author: int = 2,
    test_per_author: int = 8,
    edge_characters: int = 5000,
    seed: int = 1,
    max_authors: int | None = None,
    overwrite: bool = False,
) -> dict:
    """Write the author-attribution data set (see the module's docstring) to `output_dir`; returns its manifest
    (counts per split and author, the settings, the tokenizer's vocabulary hash, the seconds it took)."""
    import datasets
    import pyarrow.parquet as pq
    from datasets import ClassLabel, Dataset, Features, Value
    from transformers import AutoTokenizer

    datasets.disable_progress_bars()  # one parquet file a split: its bar says nothing
    began = time.perf_counter()
    for flag, source in (("--books", books), ("--tokenizer", tokenizer_dir)):  # --overwrite deletes output_dir whole
        inside = os.path.commonpath([os.path.realpath(output_dir), os.path.realpath(source)])
        if inside in (os.path.realpath(output_dir), os.path.realpath(source)):
            raise ConfigError(
                f"--output_dir {output_dir} is {flag} {source}, or holds it or lies inside it: the data set is written "
                f"as a folder of its own (--overwrite deletes it whole). Give another --output_dir."
            )
    check_replaceable(output_dir, DATA_SET)  # with or without --overwrite: it would be refused in turn
    check_output_dir(output_dir, overwrite=overwrite, create=False)
    for name, value in (("passage_tokens", passage_tokens), ("train_per_author", train_per_author)):
        if value < 1:
            raise ConfigError(f"--{name} must be >= 1, got {value}.")
    if not os.path.isdir(tokenizer_dir):
        raise ConfigError(f"--tokenizer {tokenizer_dir} is not a folder: give the compared models' tokenizer folder.")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    if not tokenizer.is_fast:
        raise ConfigError(f"{tokenizer_dir}: a fast tokenizer is needed (character offsets of its tokens).")
    content_tokens = passage_tokens - tokenizer.num_special_tokens_to_add(pair=False)
    if content_tokens < 1:
        raise ConfigError(
            f"--passage_tokens {passage_tokens} leaves no room for text beside the tokenizer's "
            f"{tokenizer.num_special_tokens_to_add(pair=False)} special tokens: give the models' n."
        )
    slot = passage_tokens * CHARACTERS_PER_TOKEN
    catalogue = read_catalogue(book_shards(books))
    held_out = {b["author"] for b in catalogue if b["split"] == "validation"}
    trained = {b["author"] for b in catalogue if b["split"] == "train"}
    authors = sorted(held_out & trained)
    if max_authors is not None:
        authors = authors[:max_authors]
    if len(authors) < 2:
        raise ConfigError(f"{books}: {len(authors)} author(s) have both training and validation books; 2 are needed.")

    # Which slots become which split's passages, from the lengths alone; the texts are read shard by shard after.
    rng = random.Random(seed)
    wanted: dict[tuple[str, int], str] = {}  # (book id, slot start) -> split
    for author in authors:
        training = [b for b in catalogue if b["author"] == author and b["split"] == "train"]
        order = round_robin(training, slot, edge_characters, rng)
        for i, key in enumerate(order[: train_per_author + dev_per_author]):
            wanted[key] = "train" if i < train_per_author else "validation"
        for held_out in [b for b in catalogue if b["author"] == author and b["split"] == "validation"]:
            for key in round_robin([held_out], slot, edge_characters, rng)[:test_per_author]:
                wanted[key] = "test"
    by_book: dict[str, list[int]] = {}
    for book_id, start in wanted:
        by_book.setdefault(book_id, []).append(start)

    rows: dict[str, list[dict]] = {"train": [], "validation": [], "test": []}
    dropped = 0
    for shard in sorted({b["shard"] for b in catalogue if b["id"] in by_book}):
        table = pq.read_table(shard, columns=["id", "author", "text"])
        for book_id, author, text in zip(*(table[c].to_pylist() for c in ("id", "author", "text"))):
            for start in sorted(by_book.get(book_id, [])):
                cut = cut_passage(text, start, slot, tokenizer, content_tokens)
                if cut is None:
                    dropped += 1
                    continue
                passage, first = cut
                split = wanted[(book_id, start)]
                rows[split].append({"text": passage, "label": author, "book": book_id, "start": first})
        del table
    # An author whose books give no training passage, or whose held-out book none, is no class: it could not be
    # learnt, or not scored.
    counts = {author: {split: sum(r["label"] == author for r in rows[split]) for split in rows} for author in authors}
    without = sorted(author for author, count in counts.items() if not (count["train"] and count["test"]))
    authors = [author for author in authors if author not in without]
    if len(authors) < 2:
        raise ConfigError(
            f"{books}: {len(authors)} author(s) have passages of {passage_tokens} tokens in both training and held-out "
            "books; 2 are needed (books too short for the passage length?)."
        )
    label = {author: i for i, author in enumerate(authors)}
    for split in rows:  # one order whatever the shards: by author, book and place
        rows[split] = [{**r, "label": label[r["label"]]} for r in rows[split] if r["label"] in label]
        rows[split].sort(key=lambda r: (r["label"], r["book"], r["start"]))

    features = Features(
        {"text": Value("string"), "label": ClassLabel(names=authors), "book": Value("string"), "start": Value("int64")}
    )
    # A staging folder of this build's own: two builds into one --output_dir never write into, or delete, each other's,
    # and the data set appears whole at once, or not at all when another build published there meanwhile.
    with staged_output(output_dir, DATA_SET, overwrite) as staging:  # --overwrite: an earlier data set (checked above)
        for split, split_rows in rows.items():
            Dataset.from_list(split_rows, features=features).to_parquet(
                os.path.join(staging, f"{split}-00000-of-00001.parquet")
            )
        per_author = {author: counts[author] for author in authors}
        manifest = {
            "books": os.path.abspath(books),
            "tokenizer": os.path.abspath(tokenizer_dir),
            "vocabulary_sha256": vocabulary_sha256(tokenizer.get_vocab()),
            "passage_tokens": passage_tokens,
            "train_per_author": train_per_author,
            "dev_per_author": dev_per_author,
            "test_per_author": test_per_author,
            "edge_characters": edge_characters,
            "seed": seed,
            "authors": len(authors),
            "authors_without_passages": {author: counts[author] for author in without},  # no class: see above
            "passages": {split: len(split_rows) for split, split_rows in rows.items()},
            "books_used": {split: len({r["book"] for r in rows[split]}) for split in rows},  # the passages' books
            "passages_per_author": {
                split: {
                    "min": min(c[split] for c in per_author.values()),
                    "max": max(c[split] for c in per_author.values()),
                }
                for split in rows
            },
            "dropped_slots": dropped,
            "per_author": per_author,
            "seconds": round(time.perf_counter() - began, 1),
        }
        write_json_atomic(os.path.join(staging, MANIFEST), manifest)
        lines = [f"  - split: {split}\n    path: {split}-*.parquet" for split in rows]
        readme = (
            "---\nconfigs:\n- config_name: default\n  data_files:\n" + "\n".join(lines) + "\n---\n\n"
            f"# Author attribution: passages of at least {passage_tokens} tokens\n\n"
            f"Built by experiments/author_attribution.py from {books} (seed {seed}): {len(authors)} authors; "
            + ", ".join(f"{split} {len(split_rows)} passages" for split, split_rows in rows.items())
            + f". {MANIFEST} has the settings and the counts per author.\n"
        )
        write_text_atomic(os.path.join(staging, "README.md"), readme)
    return manifest


# ------------------------------------------------------------------------------------------------------------------
# The comparison: one fine-tuning run per model, one after another, resumable.
# ------------------------------------------------------------------------------------------------------------------


def plan_runs(linformer: str | None, teacher: str | None, full_lengths: list[int], output_dir: str) -> list[dict]:
    """The runs: {name, model (the folder fine-tuned), source, n}. The teacher with copied positions is written to
    <output_dir>/models/teacher-n<n> when a run needs it (`prepare_model`)."""
    if len(set(full_lengths)) != len(full_lengths):
        raise ConfigError(f"--full_lengths {' '.join(map(str, full_lengths))} names an n twice: give each n once.")
    runs = []
    if linformer:
        runs.append({"name": "linformer", "model": linformer, "source": linformer, "n": None})
    if teacher:
        runs.append({"name": "teacher", "model": teacher, "source": teacher, "n": None})
        for n in full_lengths:
            model = os.path.join(output_dir, "models", f"teacher-n{n}")
            runs.append({"name": f"full-n{n}", "model": model, "source": teacher, "n": n})
    if not runs:
        raise ConfigError("give --linformer and/or --teacher: the model folders to fine-tune.")
    return runs


EXTENSION_REPORT = "extension_report.json"  # in a copied-out teacher: what it was copied from (`extend_positions`)


def prepare_model(run: dict, source_sha256: str | None) -> None:
    """The teacher with its positions copied out to n (full attention at n), written once for each teacher: a copy
    of another teacher (the folder's record replaced since) is made again, never fine-tuned as this one's."""
    if run["n"] is None:
        return
    report_path = os.path.join(run["model"], EXTENSION_REPORT)
    if os.path.isfile(os.path.join(run["model"], "config.json")) and os.path.isfile(report_path):
        with open(report_path, encoding="utf-8") as fh:
            if json.load(fh).get("source_sha256") == source_sha256:
                return
    from .long_input import extend_positions

    shutil.rmtree(run["model"], ignore_errors=True)
    extend_positions(run["source"], run["model"], run["n"])
    with open(report_path, encoding="utf-8") as fh:
        report = json.load(fh)
    write_json_atomic(report_path, {**report, "source_sha256": source_sha256})


def check_tokenizer(model_dir: str, manifest: dict) -> None:
    from transformers import AutoTokenizer

    if vocabulary_sha256(AutoTokenizer.from_pretrained(model_dir).get_vocab()) != manifest["vocabulary_sha256"]:
        raise ConfigError(
            f"{model_dir}'s tokenizer is not the one the passages were cut with ({manifest['tokenizer']}): n tokens "
            "of another vocabulary are another amount of text. Build the data with this model's tokenizer."
        )


def run_dir(output_dir: str, run: dict) -> str:
    return os.path.join(output_dir, "runs", run["name"])


def finished(directory: str) -> bool:
    return os.path.isfile(os.path.join(directory, "results.json"))


TIMING = "timing.jsonl"  # in a run's folder: one line at each segment's start, one at its end (`begin_segment`)


def begin_segment(directory: str) -> float:
    """Append the start of a run segment (one child process) to the run's timing.jsonl, before the child starts, and
    return its id (the time it began). Its end is appended when the child exits (`end_segment`): a driver killed
    outright (SIGKILL, the OOM killer) never writes it, and the start left alone says that the run's time lacks a
    segment (`training_time`), where before the segment vanished and the run was reported as faster than it was."""
    os.makedirs(directory, exist_ok=True)
    began = time.time()
    with open(os.path.join(directory, TIMING), "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"began": began, "driver": os.getpid()}) + "\n")
    return began


def end_segment(directory: str, began: float, seconds: float, code: int) -> None:
    """Append the end of the segment `begin_segment` started: its wall time (training and evaluations) and the
    child's exit code."""
    with open(os.path.join(directory, TIMING), "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"began": began, "seconds": seconds, "exit": code}) + "\n")


def training_time(directory: str) -> tuple[float | None, int]:
    """A run's wall seconds over the segments that ended (lines with "seconds", those written before segments
    recorded their start among them), and how many segments began and recorded no end (their driver was killed
    outright): with any, the seconds are a lower bound. (None, 0) without a timing.jsonl."""
    path = os.path.join(directory, TIMING)
    if not os.path.isfile(path):
        return None, 0
    lines = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by the kill: its segment's start, if any, is unmatched
                continue
    ended = [line for line in lines if "seconds" in line]
    ends = {line["began"] for line in ended if "began" in line}
    unended = sum(1 for line in lines if "seconds" not in line and line.get("began") not in ends)
    return sum(line["seconds"] for line in ended), unended


def command(run: dict, data: str, output_dir: str, recipe: str, shared: dict) -> list[str]:
    """The fine-tuning command of one run: resumed from its last checkpoint when it has one."""
    directory = run_dir(output_dir, run)
    overrides = {
        **shared,
        "model.pretrained": run["model"],
        "data.dataset": {"path": data},
        "training.output_dir": directory,
    }
    args = [sys.executable, "-m", "linformer_hf.training.finetune", "--config", recipe, "--no_progress"]
    for key, value in overrides.items():
        args += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
    if glob.glob(os.path.join(directory, "checkpoint-*")):
        args += ["--training.resume_from_checkpoint", "latest"]
    # Stopped before its first checkpoint (or not started: its timing.jsonl alone, `begin_segment`): nothing to keep.
    elif os.path.isdir(directory) and os.listdir(directory):
        args += ["--training.overwrite_output_dir", "true"]
    return args


def reading_length(run: dict, max_seq_length: int | None) -> int:
    """How many tokens of a passage the run reads: the recipe's data.max_seq_length (with the overrides) when set,
    else the model's n (the teacher's copied out to the run's n for a full-n<n> run)."""
    return max_seq_length or run["n"] or saved_model_length(run["source"])


def check_runs(
    runs: list[dict], data: str, output_dir: str, recipe: str, shared: dict, manifest: dict
) -> FinetuneRecipe:
    """Refuse, before anything is written or run, a comparison that cannot run to its end or would report what it did
    not measure: overrides the recipe does not take, a teacher that cannot be copied out to a longer n (only after its
    own run would that fail), a data.max_seq_length longer than a model's n, or a run reading more tokens than a
    passage holds (the rest would be padding, reported as text read). Returns the recipe as the runs read it (the
    model, data and output folders aside)."""
    for run in runs:  # a misspelt or ill-typed override fails here, not in the first run's child
        resolved = load_recipe(
            FinetuneRecipe,
            recipe,
            extra={
                **shared,
                "model.pretrained": run["source"],
                "data.dataset": {"path": data},
                "training.output_dir": run_dir(output_dir, run),
            },
        )
    extended = [run for run in runs if run["n"] is not None]
    if extended:
        from transformers import AutoConfig

        from linformer_hf.conversion import _check_source_config

        try:
            _check_source_config(AutoConfig.from_pretrained(extended[0]["source"]))
        except ValueError as err:
            raise ConfigError(
                f"--teacher {extended[0]['source']} cannot be run as full attention at a longer n: {err} Compare it "
                "without --full_lengths (pass --full_lengths with no value)."
            ) from None
    asked = resolved.data.max_seq_length
    for run in runs:
        n = run["n"] or saved_model_length(run["source"])
        if asked is not None and asked > n:
            raise ConfigError(
                f"data.max_seq_length={asked} is longer than the {run['name']} model's n={n}: every model would have "
                "to read that many tokens. Set it to at most the shortest model's n, or leave it out (each model "
                "reads its own n)."
            )
        if reading_length(run, asked) > manifest["passage_tokens"]:
            raise ConfigError(
                f"the {run['name']} run reads {reading_length(run, asked):,} tokens, and the passages of {data} hold "
                f"{manifest['passage_tokens']:,}: it would read padding, reported as text. Build the data with "
                f"--passage_tokens {reading_length(run, asked)} or more, or leave that model out."
            )
    return resolved


def collate(runs: list[dict], output_dir: str, max_seq_length: int | None) -> list[dict]:
    rows = []
    for run in runs:
        directory = run_dir(output_dir, run)
        if not finished(directory):
            continue
        with open(os.path.join(directory, "results.json"), encoding="utf-8") as fh:
            result = json.load(fh)
        seconds, unended = training_time(directory)
        test = result.get("test", {})
        rows.append(
            {
                "run": run["name"],
                "model": run["model"],
                "n": reading_length(run, max_seq_length),
                "test_accuracy": test.get("accuracy"),
                "test_passages": test.get("examples"),
                "seconds_per_passage": test.get("seconds_per_example"),
                "validation_accuracy": result["best"]["accuracy"],
                "updates": result["steps"],
                "training_seconds": round(seconds, 1) if seconds is not None else None,  # a lower bound if unended
                "training_segments_unended": unended,
            }
        )
    return rows


def test_correct(directory: str) -> list[bool]:
    """Whether each test passage was answered right, in the passages' order (the run's predictions_test.tsv)."""
    with open(os.path.join(directory, "predictions_test.tsv"), encoding="utf-8") as fh:
        return [row["prediction"] == row["label"] for row in csv.DictReader(fh, delimiter="\t")]


def bootstrap_interval(delta, rng) -> tuple[float, float]:
    """The 95% interval of the mean of ``delta`` (one difference a passage) from a bootstrap over the passages."""
    import numpy as np

    draws = rng.integers(0, len(delta), size=(BOOTSTRAP_SAMPLES, len(delta)))
    low, high = np.percentile(delta[draws].mean(axis=1), [2.5, 97.5])
    return low, high


def paired_difference(correct: list[bool], reference: list[bool], seed: int = 0) -> dict:
    """The accuracy of ``correct`` minus that of ``reference`` on the same passages, in points, with a 95% interval
    from a paired bootstrap over the passages, and the exact McNemar test's p (a two-sided binomial test on the
    passages that one answers right and the other wrong)."""
    import numpy as np
    from scipy.stats import binomtest

    if len(correct) != len(reference):
        raise ValueError(f"{len(correct)} predictions against {len(reference)}: not the same test passages.")
    delta = np.asarray(correct, dtype=float) - np.asarray(reference, dtype=float)
    low, high = bootstrap_interval(delta, np.random.default_rng(seed))
    wins, losses = int((delta > 0).sum()), int((delta < 0).sum())
    p = binomtest(wins, wins + losses, 0.5).pvalue if wins + losses else 1.0
    return {
        "vs_teacher_points": round(100 * float(delta.mean()), 1),
        "vs_teacher_ci95_low": round(100 * float(low), 1),
        "vs_teacher_ci95_high": round(100 * float(high), 1),
        "vs_teacher_mcnemar_p": round(float(p), 4),
    }


def write_report(runs: list[dict], output_dir: str, manifest: dict, max_seq_length: int | None) -> str:
    rows = collate(runs, output_dir, max_seq_length)
    teacher = [run for run in runs if run["name"] == "teacher" and finished(run_dir(output_dir, run))]
    if teacher:  # every other run against the truncated teacher, passage by passage
        reference = test_correct(run_dir(output_dir, teacher[0]))
        for run, row in zip([r for r in runs if finished(run_dir(output_dir, r))], rows, strict=True):
            if run["name"] != "teacher":
                row.update(paired_difference(test_correct(run_dir(output_dir, run)), reference))
    os.makedirs(output_dir, exist_ok=True)
    write_csv_atomic(os.path.join(output_dir, "results.csv"), RESULT_COLUMNS, rows)
    passages = manifest["passages"]
    lines = [
        "# Author attribution: accuracy on passages of held-out books",
        "",
        f"{manifest['authors']} authors; passages of {manifest['passage_tokens']} tokens: {passages['train']} "
        f"training, {passages['validation']} validation (model choice), {passages['test']} test (held-out books; "
        "the score). Each model reads a passage's first n tokens. Time per passage: inference on the test split. "
        "Run s: each run's wall time, tokenising, evaluations and test included. "
        f"Load average when written: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}.",
        "",
        "Against the teacher: the test accuracy's difference in points, passage by passage, with its 95% paired "
        "bootstrap interval and the exact McNemar test's p.",
        "",
        "| run | n | test accuracy | against the teacher (95% interval; p) | validation accuracy "
        "| s / passage (inference) | updates | run s (wall) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        accuracy = f"{100 * r['test_accuracy']:.1f}" if r["test_accuracy"] is not None else "-"
        per_passage = f"{r['seconds_per_passage']:.4f}" if r["seconds_per_passage"] is not None else "-"
        training = f"{r['training_seconds']:,.0f}" if r["training_seconds"] is not None else "-"
        if r["training_segments_unended"]:
            training = f">= {training}"
        against = "-"
        if r.get("vs_teacher_points") is not None:
            against = (
                f"{r['vs_teacher_points']:+.1f} ({r['vs_teacher_ci95_low']:+.1f} to {r['vs_teacher_ci95_high']:+.1f}; "
                f"{r['vs_teacher_mcnemar_p']:.3f})"
            )
        lines.append(
            f"| {r['run']} | {r['n']} | {accuracy} | {against} | {100 * r['validation_accuracy']:.1f} | {per_passage} "
            f"| {r['updates']} | {training} |"
        )
    unended = [f"{r['run']} ({r['training_segments_unended']})" for r in rows if r["training_segments_unended"]]
    if unended:  # not a silent undercount: say which runs' time lacks segments
        lines += [
            "",
            f">= run s: a lower bound. Segments of these runs began and recorded no end (their driver was killed "
            f"outright: SIGKILL, the OOM killer), so their time is not counted: {', '.join(unended)}.",
        ]
    done = [run["name"] for run in runs if finished(run_dir(output_dir, run))]
    against_full = [(a, b) for a, b in reference_pairs(done) if b != "teacher"]
    if against_full:
        lines += ["", "The Linformer against full attention, the same way:", ""]
        for a, b in against_full:
            d = paired_difference(
                test_correct(os.path.join(output_dir, "runs", a)), test_correct(os.path.join(output_dir, "runs", b))
            )
            lines.append(
                f"- {a} against {b}: {d['vs_teacher_points']:+.1f} points ({d['vs_teacher_ci95_low']:+.1f} to "
                f"{d['vs_teacher_ci95_high']:+.1f}; {d['vs_teacher_mcnemar_p']:.3f})"
            )
    text = "\n".join(lines) + "\n"
    write_text_atomic(os.path.join(output_dir, "results.md"), text)
    return text


def read_manifest(data: str) -> dict:
    path = os.path.join(data, MANIFEST)
    if not os.path.isfile(path):
        raise ConfigError(
            f"{data} has no {MANIFEST}: build the data first (python -m experiments.author_attribution build ...)."
        )
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def test_passages_sha256(data: str) -> str:
    """Which test passages, in which order: the sha256 of the test split's (book, start, label) rows."""
    import pyarrow.parquet as pq

    paths = sorted(glob.glob(os.path.join(data, "test-*.parquet")))
    if not paths:
        raise ConfigError(
            f"{data} has no test-*.parquet: build the data first (python -m experiments.author_attribution build ...)."
        )
    rows = [pq.read_table(path, columns=["book", "start", "label"]).to_pylist() for path in paths]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def data_sha256(data: str) -> str:
    """What every run learns from, is chosen on and is scored on: the sha256 of every split's rows, text and all (data
    built with another --train_per_author, seed or tokenizer share the test passages but not what the runs learnt)."""
    import pyarrow.parquet as pq

    digest = hashlib.sha256()
    for path in sorted(glob.glob(os.path.join(data, "*.parquet"))):
        digest.update(os.path.basename(path).encode())
        digest.update(json.dumps(pq.read_table(path).to_pylist(), sort_keys=True).encode())
    return digest.hexdigest()


def file_sha256(path: str) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def model_record(source: str) -> dict:
    """A compared model as compare.json names it: its folder's real path and `model_sha256` (a Hub name: the name)."""
    if not os.path.isdir(source):
        return {"path": source, "sha256": None}
    return {"path": os.path.realpath(source), "sha256": model_sha256(source)}


def model_identity(record: dict | str) -> str:
    """What makes two recorded models the same: their config's and weights' SHA-256, so that a folder moved, copied to
    another disk or reached through a link (a worktree's `outputs`) is the same model; a record without one (a Hub
    name, or a compare.json written before the hash was, which holds the path alone) is its path."""
    if isinstance(record, str):
        return os.path.realpath(record)
    return record["sha256"] or record["path"]


# What a compare folder's runs were made with, besides the models and the overrides: a folder's runs are only ever
# reported, and pooled, with runs made with the same. A record written before a key was (compare.json of 2026-11-28)
# leaves it unknown: not checked, and not filled in for runs it cannot vouch for.
RECORDED_SETTINGS = {
    "test_passages_sha256": "the test passages",
    "data_sha256": "the training and validation passages",
    "recipe_sha256": "the recipe",
}
# compare.json's tokens of each passage each run reads (`reading_length`), by run name: a run of one name in two
# folders may be another model (`pool`), of another n. Unknown (not checked) in a record written before it was.
READING = "reading_length"


def has_results(output_dir: str) -> list[str]:
    """The runs of a compare folder that hold something a later run would go on from or report: a result or a
    checkpoint."""
    return sorted(
        os.path.basename(directory)
        for directory in glob.glob(os.path.join(output_dir, "runs", "*"))
        if finished(directory) or glob.glob(os.path.join(directory, "checkpoint-*"))
    )


def record_comparison(
    output_dir: str,
    data: str,
    runs: list[dict],
    shared: dict,
    recipe: str = RECIPE,
    seed: int | None = None,
    running: list[str] = (),
    reading_lengths: dict[str, int] | None = None,
) -> dict:
    """Write <output_dir>/compare.json (the passages, the recipe, the overrides and seed, the models, and how many
    tokens of a passage each run reads: ``reading_lengths``, by run name, `reading_length`) and return it, or check
    that a folder holding earlier runs, or runs another compare is running now (``running``), was made with the same
    ones: a finished run is never repeated, and a stopped one is resumed, so a compare of other data, another seed or
    another model into the same folder would report the earlier runs under the new settings. A record whose runs left
    nothing (a compare that failed before its first checkpoint) is replaced."""
    sources = {source: model_record(source) for source in {run["source"] for run in runs}}  # each folder hashed once
    record = {
        "data": os.path.abspath(data),
        "test_passages_sha256": test_passages_sha256(data),
        "data_sha256": data_sha256(data),
        "recipe": os.path.abspath(recipe),
        "recipe_sha256": file_sha256(recipe),
        "shared": shared,
        "seed": seed,  # the fine-tuning seed, the recipe's own when --shared does not set it
        "models": {run["name"]: sources[run["source"]] for run in runs},
    }
    if reading_lengths is not None:
        record[READING] = dict(reading_lengths)
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, COMPARISON)
    kept = has_results(output_dir) + [f"{name}, being run now" for name in running]
    if os.path.isfile(path) and kept:
        with open(path, encoding="utf-8") as fh:
            earlier = json.load(fh)
        for key in [*RECORDED_SETTINGS, "recipe", "seed"]:  # unknown for the earlier runs: left unknown
            if key not in earlier:
                record.pop(key)
        # What a run reads follows from the recipe, the overrides and the model, all checked below: for earlier runs
        # whose recipe is unknown (a record of 2026-11-28), it is unknown too.
        if READING not in earlier and "recipe_sha256" not in record:
            record.pop(READING, None)
        changed = [label for key, label in RECORDED_SETTINGS.items() if key in earlier and earlier[key] != record[key]]
        if settings(earlier) != settings(record):
            changed.append(f"the overrides and seed (then {settings(earlier)}, now {settings(record)})")
        changed += [
            f"the {name} model"
            for name, model in record["models"].items()
            # an earlier record of the path alone matches that path
            if name in earlier["models"]
            and model_identity(earlier["models"][name]) not in (model_identity(model), os.path.realpath(model["path"]))
        ]
        changed += [
            f"what the {name} run reads (then {earlier[READING][name]:,} tokens, now {length:,})"
            for name, length in record.get(READING, {}).items()
            if name in earlier.get(READING, {}) and earlier[READING][name] != length
        ]
        if changed:
            raise ConfigError(
                f"{output_dir} holds runs ({', '.join(kept)}) made with other settings ({'; '.join(changed)} "
                f"{'differs' if len(changed) == 1 else 'differ'}: {path}); they would be reported as this "
                "comparison's. Run the command they were made with, or give another --output_dir."
            )
        record["models"] = {**earlier["models"], **record["models"]}
        if READING in record:
            record[READING] = {**earlier.get(READING, {}), **record[READING]}
    write_json_atomic(path, record)
    return record


def read_comparison(folder: str) -> dict:
    path = os.path.join(folder, COMPARISON)
    if not os.path.isfile(path):
        raise ConfigError(
            f"{folder} has no {COMPARISON} (no compare ran there, or one from before 2026-11-28 did): run compare "
            "again with the same arguments, which repeats no finished run and writes it."
        )
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def check_recorded_data(folder: str, record: dict, training: bool = True) -> None:
    """Refuse a compare folder whose data set (compare.json's ``data``) no longer holds the test passages its runs
    were scored on, in their order (rebuilt since, in place: with another --test_per_author, say), or (``training``)
    other training and validation passages where those were recorded: the runs' predictions_test.tsv answer the
    passages of then, row by row, and read against the passages of now they would be matched to other passages."""
    data = record["data"]
    if not os.path.isdir(data):
        raise ConfigError(
            f"{folder} was scored on {data}, which is gone: its runs' answers cannot be matched to their passages."
        )
    changed = []
    if test_passages_sha256(data) != record["test_passages_sha256"]:
        changed.append("test passages")
    if training and "data_sha256" in record and data_sha256(data) != record["data_sha256"]:
        changed.append("passages")
    if changed:
        raise ConfigError(
            f"{data} no longer holds the {changed[0]} {folder}'s runs were scored on (rebuilt since?): their answers "
            "(runs/<run>/predictions_test.tsv, one a passage in order) would be matched to other passages. Rebuild "
            "it as it was (its authors_manifest.json has the settings), or build a data set with other settings in "
            "a folder of its own."
        )


def pooled_difference(correct, reference, seed: int = 0) -> dict:
    """The accuracy of ``correct`` minus that of ``reference`` (both (seeds, passages) arrays of right / wrong, one row
    per seed of the same passages), in points, averaged over the seeds. A passage is the unit: its difference is
    averaged over the seeds first; the 95% interval is a bootstrap over passages and p a two-sided paired sign-flip
    permutation test of the passages' differences (which for one seed is the McNemar test's statistic)."""
    import numpy as np

    delta = (np.asarray(correct, dtype=float) - np.asarray(reference, dtype=float)).mean(axis=0)  # (passages,)
    rng = np.random.default_rng(seed)
    low, high = bootstrap_interval(delta, rng)
    signs = rng.choice([-1.0, 1.0], size=(BOOTSTRAP_SAMPLES, len(delta)))
    extreme = int((np.abs((signs * delta).mean(axis=1)) >= abs(delta.mean()) - 1e-12).sum())
    return {
        "points": round(100 * float(delta.mean()), 1),
        "ci95_low": round(100 * float(low), 1),
        "ci95_high": round(100 * float(high), 1),
        "p": round((extreme + 1) / (BOOTSTRAP_SAMPLES + 1), 4),
    }


def book_difference(correct, reference, books, seed: int = 0) -> dict:
    """`pooled_difference` with the held-out book as the unit: passages of one book are not independent samples (one
    author, one book, read by the same fine-tuned models), so the passage bootstrap's interval is too narrow when a
    few books give most passages. ``books`` names each passage's book. Gives the passage-weighted difference's 95%
    interval from a bootstrap over books (``book_ci95_*``), and the difference with every book weighed alike (each
    book's mean difference, averaged: ``by_book_points``), with its book bootstrap interval and a sign-flip p over
    books."""
    import numpy as np

    delta = (np.asarray(correct, dtype=float) - np.asarray(reference, dtype=float)).mean(axis=0)  # (passages,)
    names, index = np.unique(np.asarray(books), return_inverse=True)
    sums = np.bincount(index, weights=delta, minlength=len(names))
    counts = np.bincount(index, minlength=len(names)).astype(float)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(names), size=(BOOTSTRAP_SAMPLES, len(names)))
    weighted = np.percentile(sums[draws].sum(axis=1) / counts[draws].sum(axis=1), [2.5, 97.5])
    per_book = sums / counts
    alike = np.percentile(per_book[draws].mean(axis=1), [2.5, 97.5])
    signs = rng.choice([-1.0, 1.0], size=(BOOTSTRAP_SAMPLES, len(names)))
    extreme = int((np.abs((signs * per_book).mean(axis=1)) >= abs(per_book.mean()) - 1e-12).sum())
    return {
        "books": len(names),
        "book_ci95_low": round(100 * float(weighted[0]), 1),
        "book_ci95_high": round(100 * float(weighted[1]), 1),
        "by_book_points": round(100 * float(per_book.mean()), 1),
        "by_book_ci95_low": round(100 * float(alike[0]), 1),
        "by_book_ci95_high": round(100 * float(alike[1]), 1),
        "by_book_p": round((extreme + 1) / (BOOTSTRAP_SAMPLES + 1), 4),
    }


def reference_pairs(names: list[str]) -> list[tuple[str, str]]:
    """What each comparison asks: every run against the truncated teacher, and the Linformer against each full
    attention run (does it read its n as well as full attention reads its own?)."""
    pairs = [(name, "teacher") for name in names if name != "teacher" and "teacher" in names]
    if "linformer" in names:
        pairs += [("linformer", name) for name in names if name.startswith("full-n")]
    return pairs


def settings(record: dict) -> dict:
    """A compare folder's overrides, with the fine-tuning seed it resolved to when recorded: --shared
    '{training.seed: 1}' against a recipe whose seed is 1 is the same run."""
    if record.get("seed") is None:
        return record["shared"]
    return {**record["shared"], "training.seed": record["seed"]}


def identities(record: dict) -> dict:
    return {name: model_identity(model) for name, model in record["models"].items()}


def pool(
    folders: list[str],
    output_dir: str,
    overwrite: bool = False,
    without_passages_in: str | None = None,
    without_test_of: str | None = None,
) -> str:
    """Pool compare folders of the same test passages (another fine-tuning seed each, or other pretrained models of
    the same recipe) into <output_dir>/results.md, pooled.csv and pairs.csv: each run's accuracy per folder and mean,
    and the pairs of `reference_pairs` over all folders (`pooled_difference`). Runs not finished in every folder are
    named, not pooled; runs of one name that read other numbers of tokens (compare.json's reading_length: another
    model's n) are refused. An earlier pool's `output_dir` is replaced, whole, with `overwrite` only; the three files
    appear together (written beside it first). `without_passages_in` (a books folder): the test passages its training
    books also hold are left out (`test_passages_in_training_books`). `without_test_of` (a data set folder): the test
    passages of that data set's test split are left out, so that folders `rescore`d on more passages are pooled on the
    new ones alone."""
    import numpy as np

    if len(folders) < 2:
        raise ConfigError(f"pool takes two compare folders or more, got {len(folders)}.")
    if any(os.path.realpath(output_dir) == os.path.realpath(folder) for folder in folders):
        raise ConfigError(f"--output_dir {output_dir} is one of the pooled folders: its results.md is compare's.")
    if os.path.isdir(output_dir) and set(os.listdir(output_dir)) - set(POOL_FILES):
        raise FileExistsError(
            f"{output_dir} holds files that pool did not write ({sorted(set(os.listdir(output_dir)) - set(POOL_FILES))}"
            "): give an empty folder, or one an earlier pool wrote."
        )
    if len({os.path.realpath(folder) for folder in folders}) != len(folders):
        raise ConfigError(f"pool was given the same folder twice: {folders}.")
    records = [read_comparison(folder) for folder in folders]
    if len({record["test_passages_sha256"] for record in records}) != 1:
        raise ConfigError(
            "the folders score other test passages (built from other data): "
            + "; ".join(f"{folder}: {record['data']}" for folder, record in zip(folders, records, strict=True))
            + ". Pool only comparisons of the same data set."
        )
    for key, label, source in [
        ("data_sha256", "training and validation passages", "data"),
        ("recipe_sha256", "recipes", "recipe"),
    ]:
        values = {record[key] for record in records if key in record}  # a record from before the key: not checked
        if len(values) > 1:
            raise ConfigError(
                f"the folders' runs were fine-tuned with other {label} ("
                + "; ".join(f"{f}: {r.get(source, '?')}" for f, r in zip(folders, records, strict=True))
                + "), so their differences would mix that change into the seeds'. Pool only comparisons made alike."
            )
    overrides = [{k: v for k, v in record["shared"].items() if k != "training.seed"} for record in records]
    if any(o != overrides[0] for o in overrides):
        raise ConfigError(
            "the folders were fine-tuned with other overrides besides the seed ("
            + "; ".join(f"{folder}: {o}" for folder, o in zip(folders, overrides, strict=True))
            + "): pooled, that change would pass for seed noise. Pool only comparisons that differ in the seed (and "
            "the models)."
        )
    for name in sorted({name for record in records for name in record.get(READING, {})}):
        read = {f: r[READING][name] for f, r in zip(folders, records, strict=True) if name in r.get(READING, {})}
        if len(set(read.values())) > 1:  # another model of another n, or another data.max_seq_length
            raise ConfigError(
                f"the {name} runs read other numbers of tokens of each passage ("
                + "; ".join(f"{folder}: {length:,}" for folder, length in read.items())
                + "): pooled, reading more or less would pass for seed noise. Pool only folders whose runs of one "
                "name read as many tokens (models of the same n, the same data.max_seq_length)."
            )
    for i, j in itertools.combinations(range(len(records)), 2):
        if settings(records[i]) == settings(records[j]) and identities(records[i]) == identities(records[j]):
            raise ConfigError(
                f"{folders[i]} and {folders[j]} ran the same models with the same overrides ({records[i]['shared']}): "
                "the same comparison twice, not two. Give each another seed (--shared '{training.seed: 2}')."
            )
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        raise FileExistsError(
            f"{output_dir} holds an earlier pool's results: give another --output_dir, or --overwrite to replace them."
        )
    order = [name for name in ("linformer", "teacher") if any(name in r["models"] for r in records)]
    order += sorted(
        {name for r in records for name in r["models"] if name.startswith("full-n")}, key=lambda x: int(x[6:])
    )
    done = {name: [finished(os.path.join(folder, "runs", name)) for folder in folders] for name in order}
    names = [name for name in order if all(done[name])]
    partial = {
        name: [f for f, d in zip(folders, done[name], strict=True) if d]
        for name in order
        if any(done[name]) and not all(done[name])
    }
    if not names:
        raise ConfigError(f"no run is finished in every folder ({', '.join(folders)}): nothing to pool.")
    correct = {
        name: np.array([test_correct(os.path.join(folder, "runs", name)) for folder in folders], dtype=float)
        for name in names
    }
    lengths = {name: c.shape[1] for name, c in correct.items()}
    if len(set(lengths.values())) != 1:
        raise ConfigError(f"the runs' predictions cover different numbers of test passages ({lengths}).")
    kept = np.ones(next(iter(lengths.values())), dtype=bool)
    # the passages' books, and those left out, are read from the first folder's data set (a record whose data set is
    # gone pools without the book-level figures)
    books = None
    if without_test_of or without_passages_in or os.path.isdir(records[0]["data"]):
        check_recorded_data(folders[0], records[0], training=False)
        passages = split_rows(records[0]["data"], "test", ["book", "start"])
        books = np.array([row["book"] for row in passages])
    if without_test_of:
        earlier = {(row["book"], row["start"]) for row in split_rows(without_test_of, "test", ["book", "start"])}
        scored = np.array([(row["book"], row["start"]) in earlier for row in passages])
        left_out_scored = int(scored.sum())
        kept &= ~scored
    if without_passages_in:
        in_books = np.array(test_passages_in_training_books(records[0]["data"], without_passages_in))
        left_out_in_books = int((kept & in_books).sum())
        kept &= ~in_books
    if not kept.any():
        raise ConfigError("every test passage is left out: nothing to pool.")
    correct = {name: c[:, kept] for name, c in correct.items()}
    lengths = {name: c.shape[1] for name, c in correct.items()}
    books = books[kept] if books is not None else None

    def by_book(right) -> float | None:  # the mean over books of each book's accuracy, over the seeds
        if books is None:
            return None
        return round(100 * float(np.mean([right[:, books == book].mean() for book in np.unique(books)])), 1)

    rows = [
        {
            "run": name,
            "seeds": len(folders),
            "test_accuracy_per_seed": " ".join(f"{100 * a:.1f}" for a in correct[name].mean(axis=1)),
            "test_accuracy_mean": round(100 * float(correct[name].mean()), 1),
            "test_accuracy_by_book": by_book(correct[name]),
        }
        for name in names
    ]
    pairs = [
        {
            "run": a,
            "reference": b,
            **pooled_difference(correct[a], correct[b]),
            **(book_difference(correct[a], correct[b], books) if books is not None else {}),
        }
        for a, b in reference_pairs(names)
    ]
    passages = next(iter(lengths.values()))
    lines = [
        f"# Author attribution over {len(folders)} comparisons of the same {passages} test passages",
        "",
        *(
            [f"Left out: the {left_out_scored} test passages of {without_test_of}'s test split.", ""]
            if without_test_of
            else []
        ),
        *(
            [
                f"Left out: the {left_out_in_books} {'other ' if without_test_of else ''}test passages that training "
                f"books of {without_passages_in} also hold.",
                "",
            ]
            if without_passages_in
            else []
        ),
        "Folders: "
        + ", ".join(f"{folder} ({record['shared']})" for folder, record in zip(folders, records, strict=True))
        + ".",
        "",
        "| run | test accuracy per folder | mean | each book alike |",
        "| --- | --- | --- | --- |",
        *[
            f"| {r['run']} | {r['test_accuracy_per_seed']} | {r['test_accuracy_mean']:.1f} | "
            f"{'-' if r['test_accuracy_by_book'] is None else format(r['test_accuracy_by_book'], '.1f')} |"
            for r in rows
        ],
        "",
        "Differences in points over all folders (a passage's difference averaged over the folders first; 95% bootstrap "
        "interval over passages and over held-out books, whose passages are not independent; two-sided paired "
        "sign-flip permutation p over passages); and with each held-out book weighed alike (its passages' mean "
        "difference; interval and p over books):",
        "",
        "| run | against | points (95% over passages; over books) | p | each book alike (95%; p) |",
        "| --- | --- | --- | --- | --- |",
        *[
            f"| {p['run']} | {p['reference']} | {p['points']:+.1f} ({p['ci95_low']:+.1f} to {p['ci95_high']:+.1f}; "
            + (
                f"{p['book_ci95_low']:+.1f} to {p['book_ci95_high']:+.1f}) | {p['p']:.4f} | "
                f"{p['by_book_points']:+.1f} ({p['by_book_ci95_low']:+.1f} to {p['by_book_ci95_high']:+.1f}; "
                f"{p['by_book_p']:.4f}) |"
                if "books" in p
                else f"-) | {p['p']:.4f} | - |"
            )
            for p in pairs
        ],
    ]
    if partial:
        lines += [
            "",
            "Not pooled, as not finished in every folder: "
            + "; ".join(f"{n} (finished in {', '.join(f)})" for n, f in partial.items())
            + ".",
        ]
    text = "\n".join(lines) + "\n"
    # Written in a staging folder of this pool's own beside --output_dir and moved into place whole: a stop part-way
    # leaves the earlier pool as it was, never its report beside new tables.
    with staged_output(output_dir, POOLED, overwrite) as staging:  # --overwrite: an earlier pool (checked above)
        write_csv_atomic(os.path.join(staging, "pooled.csv"), POOLED_COLUMNS, rows)
        write_csv_atomic(os.path.join(staging, "pairs.csv"), PAIR_COLUMNS, pairs)
        write_text_atomic(os.path.join(staging, "results.md"), text)
    return text


# ------------------------------------------------------------------------------------------------------------------
# Rescoring: the models a compare kept, on more passages of the same held-out books.
# ------------------------------------------------------------------------------------------------------------------

RESCORE_FILES = (COMPARISON, "results.md", "results.csv", "runs")  # what rescore writes in its folder
# What rescore's --overwrite replaces, whole: only an earlier rescore's folder, never a compare folder (its runs and
# kept models would go with it).
RESCORED = FolderKind(
    what="an earlier rescore's folder",
    required=(COMPARISON,),
    holds=lambda folder, name: name in RESCORE_FILES,
    mismatch=lambda folder: None if "rescored_from" in read_comparison(folder) else "it is a compare folder",
)


def split_rows(data: str, split: str, columns: list[str] | None = None) -> list[dict]:
    """Every row of one split of a data set folder, in order (only `columns`, where given)."""
    import pyarrow.parquet as pq

    paths = sorted(glob.glob(os.path.join(data, f"{split}-*.parquet")))
    if not paths:
        raise ConfigError(
            f"{data} has no {split}-*.parquet: build the data first "
            "(python -m experiments.author_attribution build ...)."
        )
    return [row for path in paths for row in pq.read_table(path, columns=columns).to_pylist()]


def predict_passages(model_dir: str, texts: list[str], max_length: int, batch_size: int) -> tuple[list[int], float]:
    """A fine-tuned classifier's answer to each text, reading its first `max_length` tokens as fine-tuning cut them
    (`tokenize_task`: the tokenizer's truncation), and the seconds the predictions took."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import linformer_hf  # noqa: F401  (registers the Linformer with the Auto classes)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    answers, began = [], time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(texts), batch_size):
            batch = tokenizer(
                texts[i : i + batch_size], truncation=True, max_length=max_length, padding=True, return_tensors="pt"
            )
            answers += model(**batch).logits.argmax(-1).tolist()
    return answers, time.perf_counter() - began


def rescore(folder: str, data: str, output_dir: str, overwrite: bool = False) -> str:
    """Score the models a compare folder kept (runs/<run>/best) on the test passages of `data`, a data set whose
    training and validation passages are the folder's own: ``build`` with the same settings and a larger
    ``--test_per_author`` takes more passages of the same held-out books, which no model trained on or was chosen on.
    Writes a compare folder of its own to `output_dir` (compare.json, runs/<run>/predictions_test.tsv and
    results.json, results.md and results.csv), which `pool` reads as it reads compare's; the whole folder appears at
    once when every run is scored. Where `data` holds the folder's own test passages, the new answers are compared
    with the recorded ones (the same model reading the same tokens) and the agreement is recorded. Every check runs
    before a model is loaded."""
    from transformers import AutoConfig

    from linformer_hf.models import max_input_length

    record = read_comparison(folder)
    if os.path.realpath(output_dir) == os.path.realpath(folder):
        raise ConfigError(f"--output_dir {output_dir} is the compare folder itself: give a folder of its own.")
    check_replaceable(output_dir, RESCORED)  # with or without --overwrite: it would be refused in turn
    check_output_dir(output_dir, overwrite=overwrite, create=False)
    manifest = read_manifest(data)
    if not os.path.isdir(record["data"]):
        raise ConfigError(
            f"{folder} was scored on {record['data']}, which is gone: {data}'s training and validation passages cannot "
            "be checked against the ones its models learnt from."
        )
    check_recorded_data(folder, record)  # its answers are matched to its passages, row by row
    for split in ("train", "validation"):
        if split_rows(data, split) != split_rows(record["data"], split):
            raise ConfigError(
                f"{data}'s {split} passages are not the ones {folder}'s models learnt from and were chosen on "
                f"({record['data']}): build the data with that data set's settings, changing only --test_per_author."
            )
    if manifest["vocabulary_sha256"] != read_manifest(record["data"])["vocabulary_sha256"]:
        raise ConfigError(
            f"{data} was cut with another tokenizer than {record['data']}: build it with the one the models read."
        )
    names = [name for name in record["models"] if finished(os.path.join(folder, "runs", name))]
    kept = {name: os.path.join(folder, "runs", name, "best") for name in names}
    missing = [name for name, best in kept.items() if not os.path.isfile(os.path.join(best, "config.json"))]
    if not names or missing:
        raise ConfigError(
            f"{folder} has "
            + (f"no kept model (runs/<run>/best) for {missing}" if missing else "no finished run")
            + ": nothing to rescore."
        )
    recipe = record.get("recipe", RECIPE)
    if "recipe_sha256" in record and (not os.path.isfile(recipe) or file_sha256(recipe) != record["recipe_sha256"]):
        # Its data.max_seq_length is what the runs read where compare.json does not say (and its eval batch size).
        raise ConfigError(
            f"the recipe {folder}'s runs were fine-tuned with, {recipe}, is "
            + ("gone" if not os.path.isfile(recipe) else "changed since")
            + ": how many tokens of a passage they read cannot be known from it. Put it back as it was."
        )
    resolved = load_recipe(
        FinetuneRecipe,
        recipe,
        extra={
            **record["shared"],
            "model.pretrained": next(iter(kept.values())),
            "data.dataset": {"path": data},
            "training.output_dir": output_dir,
        },
    )
    test, recorded = split_rows(data, "test"), split_rows(record["data"], "test")
    place = {(row["book"], row["start"]): i for i, row in enumerate(test)}
    common = [(j, place[(r["book"], r["start"])]) for j, r in enumerate(recorded) if (r["book"], r["start"]) in place]

    lengths = {}  # what each run reads, as its fine-tuning did: every one known before a model is loaded
    for name, best in kept.items():
        lengths[name] = resolved.data.max_seq_length or max_input_length(AutoConfig.from_pretrained(best))
        recorded_length = record.get(READING, {}).get(name)
        if recorded_length is not None and recorded_length != lengths[name]:
            raise ConfigError(
                f"the {name} run read {recorded_length:,} tokens of a passage ({folder}'s {COMPARISON}), and its kept "
                f"model with the recipe as it is now would read {lengths[name]:,}: scored so, it would answer another "
                "question than the one it was fine-tuned on."
            )

    with staged_output(output_dir, RESCORED, overwrite) as staging:  # --overwrite: an earlier rescore (checked)
        runs = []
        for name, best in kept.items():
            n = int(name[len("full-n") :]) if name.startswith("full-n") else None
            runs.append({"name": name, "model": best, "source": best, "n": n})
            length = lengths[name]
            print(f"{name}: {len(test)} passages at {length} tokens", flush=True)
            answers, seconds = predict_passages(
                best, [row["text"] for row in test], length, resolved.training.per_device_eval_batch_size
            )
            with open(os.path.join(folder, "runs", name, "predictions_test.tsv"), encoding="utf-8") as fh:
                before = [int(row["prediction"]) for row in csv.DictReader(fh, delimiter="\t")]
            with open(os.path.join(folder, "runs", name, "results.json"), encoding="utf-8") as fh:
                earlier = json.load(fh)
            directory = os.path.join(staging, "runs", name)
            os.makedirs(directory)
            write_text_atomic(
                os.path.join(directory, "predictions_test.tsv"),
                "index\tprediction\tlabel\n"
                + "".join(f"{i}\t{a}\t{row['label']}\n" for i, (a, row) in enumerate(zip(answers, test, strict=True))),
            )
            right = sum(a == row["label"] for a, row in zip(answers, test, strict=True))
            write_json_atomic(
                os.path.join(directory, "results.json"),
                {
                    "task": earlier["task"],
                    "best": earlier["best"],  # chosen on the validation passages, as before
                    "steps": earlier["steps"],
                    "test": {
                        "accuracy": right / len(test),
                        "examples": len(test),
                        "seconds_per_example": seconds / len(test),
                    },
                    "rescored": {
                        "from": os.path.realpath(os.path.join(folder, "runs", name)),
                        "reads": length,
                        "recorded_passages": len(common),
                        "recorded_answers_agreeing": sum(before[j] == answers[i] for j, i in common),
                    },
                },
            )
        write_json_atomic(
            os.path.join(staging, COMPARISON),
            {
                **record,
                "data": os.path.abspath(data),
                "test_passages_sha256": test_passages_sha256(data),
                "data_sha256": data_sha256(data),  # its training and validation passages: the folder's (checked)
                READING: lengths,
                "rescored_from": {"folder": os.path.realpath(folder), "data": record["data"]},
            },
        )
        text = write_report(runs, staging, manifest, resolved.data.max_seq_length)
        unfinished = [name for name in record["models"] if name not in kept]
        if unfinished:  # said where the results are read, as compare's report leaves them out
            text += (
                f"\nNot rescored, as not finished in {folder}: {', '.join(unfinished)} (finish them with the compare "
                "that started them, then rescore again).\n"
            )
            write_text_atomic(os.path.join(staging, "results.md"), text)
    return text


# The recipe keys compare sets for each run (`command`): not overrides a comparison can take.
SET_BY_COMPARE = (
    "model.pretrained",
    "data.dataset",
    "training.output_dir",
    "training.resume_from_checkpoint",
    "training.overwrite_output_dir",
)


def compare(
    data: str,
    output_dir: str,
    linformer: str | None = None,
    teacher: str | None = None,
    full_lengths: tuple[int, ...] = (2048, 4096),
    recipe: str = RECIPE,
    shared: dict | None = None,
    only: list[str] | None = None,
) -> str:
    """Fine-tune each model on the data (one run each, skipped when finished), then write results.md / .csv."""
    shared = shared or {}
    set_here = sorted(set(shared) & set(SET_BY_COMPARE))
    if set_here:  # else ignored without a word (the folders), or a stopped run could never be resumed (the last two)
        raise ConfigError(
            f"--shared sets {', '.join(set_here)}, which compare sets for each run itself (its model, --data, "
            "<output_dir>/runs/<run>, and resuming a stopped run from its checkpoint): remove it from --shared."
        )
    for option, model in (("--linformer", linformer), ("--teacher", teacher)):
        if model is not None:  # a missing folder is named as one, not as transformers' malformed repo id
            check_model_source(model, option)
            if not os.path.isdir(model):  # a Hub name offline: one line naming the option
                read_configs(option, [model])
    manifest = read_manifest(data)
    if not os.path.isfile(recipe):
        raise ConfigError(f"recipe {recipe} not found; run from the root of a checkout or give --recipe.")
    runs = plan_runs(linformer, teacher, list(full_lengths), output_dir)
    unknown = sorted(set(only or []) - {run["name"] for run in runs})
    if unknown:
        raise ConfigError(
            f"--only {' '.join(unknown)}: no such run in this comparison, whose runs are "
            f"{', '.join(run['name'] for run in runs)} (full-n<n> for each of --full_lengths, which needs --teacher)."
        )
    for source in {run["source"] for run in runs}:
        check_tokenizer(source, manifest)
    short = [run["n"] for run in runs if run["n"] is not None and run["n"] <= saved_model_length(run["source"])]
    if short:
        raise ConfigError(
            f"--full_lengths {short}: not longer than the teacher's n={saved_model_length(teacher)}, so there is "
            "nothing to copy its positions out to; the teacher's own run reads that many tokens."
        )
    resolved = check_runs(runs, data, output_dir, recipe, shared, manifest)
    max_seq_length = resolved.data.max_seq_length
    pending = [run for run in runs if not (only and run["name"] not in only) and not finished(run_dir(output_dir, run))]
    mine = [run["name"] for run in pending]
    with claim_runs(output_dir, mine) as claims:
        # Claimed before the record, which another compare into the folder may be writing now: of two with other
        # settings, one is refused.
        with exclusive(os.path.join(output_dir, ".compare.lock")):
            running = claimed_by_others(output_dir, mine)
            reading = {run["name"]: reading_length(run, max_seq_length) for run in runs}
            record = record_comparison(
                output_dir, data, runs, shared, recipe, resolved.training.seed, running, reading_lengths=reading
            )
        for run in pending:
            prepare_model(run, record["models"][run["name"]]["sha256"])
            # Its start recorded before the command is made: a first segment's line is then in the run's folder,
            # which the command starts over (`command`).
            began = begin_segment(run_dir(output_dir, run))
            args = command(run, data, output_dir, recipe, shared)
            console = os.path.join(output_dir, f"{run['name']}.log")
            with open(console, "a", encoding="utf-8") as log:
                log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} load {os.getloadavg()}\n# {' '.join(args)}\n")
                log.flush()
                started = time.perf_counter()
                code, stopped_by = run_child(args, log, claims[run["name"]])
            end_segment(run_dir(output_dir, run), began, time.perf_counter() - started, code)
            if stopped_by is not None or code != 0:
                write_report(runs, output_dir, manifest, max_seq_length)
            if stopped_by is not None:
                raise SystemExit(stopped_message(stopped_by, run["name"], code, console))
            if code != 0:
                raise SystemExit(f"run {run['name']} exited with {code}; its console is {console}")
    return write_report(runs, output_dir, manifest, max_seq_length)


def main(argv=None):
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="write the data set of passages")
    build.add_argument("--books", default=os.path.join("..", "shared", "data", "gutenberg"))
    build.add_argument("--tokenizer", required=True, help="the compared models' tokenizer (a folder)")
    build.add_argument("--output_dir", default=os.path.join("outputs", "authors", "data"))
    build.add_argument("--passage_tokens", type=positive_int, default=4096)
    build.add_argument("--train_per_author", type=positive_int, default=24)
    build.add_argument("--dev_per_author", type=positive_int, default=2)
    build.add_argument("--test_per_author", type=positive_int, default=8)
    build.add_argument("--edge_characters", type=non_negative_int, default=5000)
    build.add_argument("--seed", type=int, default=1)
    build.add_argument("--max_authors", type=positive_int, default=None, help="the first N authors (a small run)")
    build.add_argument("--overwrite", action="store_true", help="replace an earlier data set (a folder build wrote)")
    run = commands.add_parser("compare", help="fine-tune each model on the data set and report")
    run.add_argument("--data", default=os.path.join("outputs", "authors", "data"))
    run.add_argument("--output_dir", default=os.path.join("outputs", "authors"))
    run.add_argument("--linformer", help="the Linformer at n = 4,096 (uptrained from the teacher)")
    run.add_argument("--teacher", help="the teacher at 512 (RoBERTa or BERT layout): run truncated, and extended")
    run.add_argument("--full_lengths", type=int, nargs="*", default=[2048, 4096], help="n of the extended teacher")
    run.add_argument("--recipe", default=RECIPE)
    run.add_argument("--shared", default="{}", help="recipe overrides every run takes, as YAML: '{training.seed: 2}'")
    run.add_argument("--only", nargs="+", help="run only these runs")
    overlap = commands.add_parser("overlap", help="count the test passages whose text a training book also holds")
    overlap.add_argument("--data", default=os.path.join("outputs", "authors", "data"))
    overlap.add_argument("--books", default=os.path.join("..", "shared", "data", "gutenberg"))
    pooling = commands.add_parser("pool", help="pool compare folders of the same data (another seed each)")
    pooling.add_argument("folders", nargs="+", help="compare output folders")
    pooling.add_argument("--output_dir", required=True)
    pooling.add_argument("--overwrite", action="store_true", help="replace an earlier pool's results in --output_dir")
    pooling.add_argument(
        "--without_passages_in", metavar="BOOKS", help="leave out the test passages the training books of BOOKS hold"
    )
    pooling.add_argument(
        "--without_test_of", metavar="DATA", help="leave out the test passages of DATA's test split (earlier data)"
    )
    rescoring = commands.add_parser(
        "rescore", help="score a compare folder's kept models on the test passages of a larger data set"
    )
    rescoring.add_argument("folder", help="a compare output folder")
    rescoring.add_argument("--data", required=True, help="the data set built as the folder's, with more test passages")
    rescoring.add_argument("--output_dir", required=True)
    rescoring.add_argument("--overwrite", action="store_true", help="replace an earlier rescore's folder")
    args = parser.parse_args(argv)
    try:
        output_dir = getattr(args, "output_dir", None)
        if output_dir is not None and os.path.exists(output_dir) and not os.path.isdir(output_dir):
            raise ConfigError(f"--output_dir {output_dir} is a file: give a folder for the {args.command}'s results.")
        if args.command == "overlap":
            books = passages_in_training_books(args.data, args.books)
            found = [book for book in books if book["found"]]
            print(
                f"{sum(b['found'] for b in books)} of {sum(b['passages'] for b in books)} test passages of {args.data} "
                f"are also in training books of {args.books}:"
            )
            for book in found:
                print(f"  {book['author']}, held-out book {book['book']}: {book['found']} of {book['passages']}")
            return
        if args.command == "pool":
            with sigterm_unwinds():  # a kill removes the staging folder beside --output_dir
                text = pool(
                    args.folders, args.output_dir, args.overwrite, args.without_passages_in, args.without_test_of
                )
            print(text, end="")
            return
        if args.command == "rescore":
            with sigterm_unwinds():  # a kill removes the staging folder beside --output_dir
                print(rescore(args.folder, args.data, args.output_dir, args.overwrite), end="")
            return
        if args.command == "build":
            with sigterm_unwinds():  # a kill removes the staging folder beside --output_dir
                manifest = build_dataset(
                    args.books,
                    args.tokenizer,
                    args.output_dir,
                    args.passage_tokens,
                    args.train_per_author,
                    args.dev_per_author,
                    args.test_per_author,
                    args.edge_characters,
                    args.seed,
                    args.max_authors,
                    args.overwrite,
                )
            summary = {k: v for k, v in manifest.items() if k != "per_author"}
            print(json.dumps(summary, indent=2))
            return
        import yaml

        try:
            shared = yaml.safe_load(args.shared) or {}
        except yaml.YAMLError as err:  # a brace or quote left out: one line, not the parser's traceback
            raise ConfigError(
                f"--shared {args.shared!r} is not YAML ({getattr(err, 'problem', None) or err}): give a mapping of "
                "recipe keys, e.g. '{training.seed: 2, training.learning_rate: 2.0e-4}'."
            ) from None
        if not isinstance(shared, dict):
            raise ConfigError(f"--shared must be a mapping of recipe keys, got {args.shared!r}.")
        text = compare(
            args.data, args.output_dir, args.linformer, args.teacher, args.full_lengths, args.recipe, shared, args.only
        )
    except (*USER_ERRORS, FileExistsError, NotADirectoryError, OSError) as err:
        report(err)
        raise SystemExit(2) from None
    print(text, end="")


if __name__ == "__main__":
    main()
