#!/usr/bin/env python
"""Gather the offline default corpus (English docs of the installed Python packages) into one text file, cached.

python scripts/build_corpus.py --output outputs/corpus/docs.txt
"""

import argparse

from linformer_hf.training.corpus import build_docs_corpus


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="outputs/corpus/docs.txt")
    parser.add_argument("--max_chars", type=int, default=5_000_000)
    parser.add_argument("--max_chars_per_package", type=int, default=150_000)
    parser.add_argument(
        "--validation_fraction",
        type=float,
        default=0.02,
        help="also write <output stem>.valid.txt holding every 1/fraction-th paragraph",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    m = build_docs_corpus(args.output, args.max_chars, args.max_chars_per_package, args.force)
    # A deterministic train/validation split into two files (every k-th paragraph held out).
    stem = args.output[:-4] if args.output.endswith(".txt") else args.output
    k = max(2, round(1 / args.validation_fraction))
    with (
        open(args.output, encoding="utf-8") as src,
        open(stem + ".train.txt", "w", encoding="utf-8") as tr,
        open(stem + ".valid.txt", "w", encoding="utf-8") as va,
    ):
        for i, line in enumerate(src):
            (va if i % k == k - 1 else tr).write(line)
    state = "cached" if m.get("cached") else "built"
    print(
        f"corpus {state}: {args.output} ({m['chars'] / 1e6:.1f} M chars, {m['paragraphs']} paragraphs from "
        f"{len(m['packages'])} installed packages; sha256 {m['sha256'][:12]}); "
        f"split into {stem}.train.txt / {stem}.valid.txt"
    )


if __name__ == "__main__":
    main()
