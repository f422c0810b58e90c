"""Train a RoBERTa-style byte-level BPE tokenizer on text files (one document a line) or a Hub dataset.

    python -m linformer_hf.training.train_tokenizer --files outputs/corpus/docs.train.txt --vocab_size 8192 \\
        --output_dir outputs/tokenizer
    python -m linformer_hf.training.train_tokenizer --dataset wikitext --dataset_config wikitext-103-raw-v1 \\
        --output_dir outputs/tok

The result loads with AutoTokenizer.from_pretrained(output_dir). To use an existing tokenizer instead (roberta-base
when the Hub is reachable, or any local dir), skip this and set tokenizer.name_or_path in the pretraining recipe.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from ..cli import ArgumentParser
from ..outputs import check_output_dir, sigterm_unwinds
from .config import ConfigError
from .errors import USER_ERRORS, hub_unreachable_error, one_line, report
from .tokenizer import iter_text_files, train_bpe_tokenizer


def check_arguments(args) -> None:
    """Values argparse takes but the training cannot: refused on one line before any work."""
    # Both given: one of them would be dropped without a word.
    if args.files and args.dataset:
        raise ConfigError("--files and --dataset are both given: train on one of them (drop the other).")
    if args.files and args.dataset_config:  # it names a configuration of a --dataset: with --files it was dropped
        raise ConfigError("--dataset_config is given with --files: it applies to a --dataset only (drop it).")
    # 0 used to mean "every document", and a negative count failed inside itertools.
    if args.max_documents is not None and args.max_documents < 1:
        raise ConfigError(f"--max_documents must be >= 1 (or left out: every document), got {args.max_documents}.")
    # tokenizers takes an unsigned count and fails with an OverflowError.
    if args.min_frequency < 0:
        raise ConfigError(
            f"--min_frequency must be >= 0 (merges seen fewer times are not learned), got {args.min_frequency}."
        )
    if args.model_max_length < 1:
        raise ConfigError(
            f"--model_max_length must be >= 1 (the longest input in tokens), got {args.model_max_length}."
        )


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m linformer_hf.training.train_tokenizer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--files", nargs="*", default=[], help="text files, one document a line")
    parser.add_argument("--dataset", default=None, help="Hub dataset name (used when no --files)")
    parser.add_argument("--dataset_config", default=None)
    parser.add_argument("--split", default="train")
    parser.add_argument("--text_column", default="text")
    parser.add_argument("--max_documents", type=int, default=None, help="train on the first N documents only")
    parser.add_argument("--vocab_size", type=int, default=50265)
    parser.add_argument("--min_frequency", type=int, default=2)
    parser.add_argument("--model_max_length", type=int, default=512)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace what a non-empty --output_dir holds (a model trained with that tokenizer no longer matches it)",
    )
    args = parser.parse_args(argv)
    try:
        # A tokenizer is the vocabulary of every model trained with it: an earlier one is never replaced silently.
        if os.path.isfile(os.path.join(args.output_dir, "config.json")):  # refused with --overwrite too
            raise ConfigError(
                f"--output_dir {args.output_dir} holds a model (config.json): a tokenizer trained there would replace "
                f"the one its embeddings were trained with, and the model would read other tokens than it learned. "
                f"Give the new tokenizer a folder of its own."
            )
        check_output_dir(args.output_dir, args.overwrite, create=False)
        check_arguments(args)
        if args.files:
            for f in args.files:  # fail on a missing file before training starts
                if os.path.isdir(f):
                    raise ConfigError(f"--files {f} is a folder: give the text files in it (e.g. {f}/*.txt).")
                if not os.path.isfile(f):
                    raise ConfigError(f"Tokenizer training file not found: {f}.")
            texts = iter_text_files(args.files)
        elif args.dataset:
            from datasets import load_dataset

            if os.path.isfile(args.dataset):  # datasets: "Couldn't find any data file at ..."
                raise ConfigError(
                    f"--dataset {args.dataset} is a file: give text files (one document a line) with --files, or a "
                    f"dataset's folder or Hub name with --dataset."
                )

            try:
                ds = load_dataset(args.dataset, args.dataset_config, split=args.split, streaming=True)
            except ConnectionError as err:  # offline, or no network, and not cached
                raise hub_unreachable_error(
                    "--dataset", args.dataset, err, "give local text files with --files"
                ) from None
            except ValueError as err:  # datasets' "Bad split: x. Available splits: [...]", or a bad config name
                if "split" in str(err).lower():
                    raise ConfigError(
                        f"--split {args.split!r}: {args.dataset} has no such split ({one_line(err)}); give one of "
                        f"its splits with --split."
                    ) from None
                raise ConfigError(f"--dataset {args.dataset} cannot be read: {one_line(err)}") from None
            if ds.column_names is not None and args.text_column not in ds.column_names:
                raise ConfigError(f"Column {args.text_column!r} not in {args.dataset}: {ds.column_names}.")
            texts = (ex[args.text_column] for ex in ds)
        else:
            raise ConfigError("Give --files or --dataset.")
        if args.max_documents is not None:
            texts = itertools.islice(texts, args.max_documents)
        with sigterm_unwinds():  # a `kill` removes the staging folder, as Ctrl-C does
            tok = train_bpe_tokenizer(
                texts, args.output_dir, args.vocab_size, args.min_frequency, args.model_max_length, args.overwrite
            )
    except (*USER_ERRORS, OSError) as err:
        return report(err)
    print(f"tokenizer with {len(tok)} tokens saved to {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
