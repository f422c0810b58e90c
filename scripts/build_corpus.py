#!/usr/bin/env python
"""Gather the offline default corpus (English docs of the installed Python packages) into one text file, cached.

python scripts/build_corpus.py --output outputs/corpus/docs.txt
"""

import argparse
import os
import sys

from linformer_hf.cli import ArgumentParser
from linformer_hf.outputs import sigterm_unwinds
from linformer_hf.training.corpus import build_docs_corpus, check_corpus_output, split_paths
from linformer_hf.training.errors import ConfigError, positive_int, report


def fraction(text: str) -> float:
    """Every round(1 / fraction)-th paragraph is held out: 0 < fraction <= 0.5 (one paragraph in two, at most)."""
    value = float(text)
    if not 0 < value <= 0.5:
        raise argparse.ArgumentTypeError(f"must be in (0, 0.5], got {value}")
    return value


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--output", default="outputs/corpus/docs.txt")
    parser.add_argument("--max_chars", type=positive_int, default=5_000_000)
    parser.add_argument("--max_chars_per_package", type=positive_int, default=150_000)
    parser.add_argument(
        "--validation_fraction",
        type=fraction,
        default=0.02,
        help="also write <output stem>.valid.txt holding every 1/fraction-th paragraph",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --output (or its .train.txt / .valid.txt) that is not a corpus this tool built (its "
        ".manifest.json beside it); refused otherwise",
    )
    args = parser.parse_args(argv)
    train_path, valid_path = split_paths(args.output)
    try:  # before any work: the corpus and both splits
        check_corpus_output(args.output, args.overwrite)
    except OSError as err:
        return report(err)
    with sigterm_unwinds():  # a `kill` removes the partial files, as Ctrl-C does
        m = build_docs_corpus(args.output, args.max_chars, args.max_chars_per_package, args.force, args.overwrite)
        # A deterministic train/validation split into two files (every k-th paragraph held out).
        k = max(2, round(1 / args.validation_fraction))
        if m["paragraphs"] < k:  # an empty split: training on it fails later, far from the cause
            return report(
                ConfigError(
                    f"The corpus {args.output} has {m['paragraphs']} paragraph(s) (at most --max_chars "
                    f"{args.max_chars} characters, --max_chars_per_package {args.max_chars_per_package} from each "
                    f"package), too few to hold one out of {k} as validation text: raise --max_chars and "
                    f"--max_chars_per_package."
                )
            )
        # Written under temporary names and renamed when whole: a stop part-way leaves no short split behind.
        try:
            with (
                open(args.output, encoding="utf-8") as src,
                open(train_path + ".tmp", "w", encoding="utf-8") as tr,
                open(valid_path + ".tmp", "w", encoding="utf-8") as va,
            ):
                for i, line in enumerate(src):
                    (va if i % k == k - 1 else tr).write(line)
            for path in (train_path, valid_path):
                os.replace(path + ".tmp", path)
        finally:
            for path in (train_path, valid_path):
                if os.path.exists(path + ".tmp"):  # left only by a stop or a failure
                    os.remove(path + ".tmp")
    state = "cached" if m.get("cached") else "built"
    print(
        f"corpus {state}: {args.output} ({m['chars'] / 1e6:.1f} M chars, {m['paragraphs']} paragraphs from "
        f"{len(m['packages'])} installed packages; sha256 {m['sha256'][:12]}); "
        f"split into {train_path} / {valid_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
