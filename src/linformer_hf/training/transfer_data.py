"""The text of an attention transfer: documents read, shuffled and split (training / held out) by document, and the
windows each step and each evaluation reads, framed by the tokenizer's special tokens."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import torch

from .data import TOKENIZE_BATCH_CHARACTERS, documents_per_batch
from .errors import ConfigError, hub_unreachable_error
from .transfer_arguments import TransferArguments
from .validation import check_text_files, count_documents, unreadable_file_error


def load_texts(args: TransferArguments) -> list[str]:
    """The documents: lines of text files, or a column of a datasets dataset (Hub name or a local builder)."""
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    from .hub_datasets import load_hub_dataset

    # A folder was "[Errno 21] Is a directory" (--text_files) or datasets' "Unable to find" (--data_files).
    for option, paths in (("--text_files", args.text_files), ("--data_files", args.data_files)):
        for path in paths or []:
            if os.path.isdir(path):
                raise ConfigError(f"{option} {path} is a folder: give the files in it (e.g. {path}/*.txt).")
    if args.text_files:
        missing = [path for path in args.text_files if not os.path.exists(path)]
        if missing:
            raise FileNotFoundError(f"--text_files not found: {missing}")
        check_text_files(args.text_files, [], hold_out=False)  # an empty file: named, not datasets' traceback
        try:
            dataset, column = load_dataset("text", data_files=args.text_files, split="train"), "text"
        except DatasetGenerationError as err:  # e.g. bytes that are not UTF-8: said with the file and the line
            raise unreadable_file_error(list(args.text_files), err) from None
    else:
        for path in args.data_files or []:  # an empty file: named, not datasets' traceback
            if os.path.isfile(path) and count_documents(path, 1) == 0:
                raise ConfigError(
                    f"Data file {path} has no text (it is empty or only blank lines): give a file with documents."
                )
        extra = {}
        if args.dataset == "csv" and args.data_files and all(path.endswith(".tsv") for path in args.data_files):
            extra = {"delimiter": "\t", "quoting": 3}  # GLUE's TSV files have no quoting
        try:
            dataset = load_hub_dataset(
                args.dataset, args.dataset_config, data_files=args.data_files, split=args.dataset_split, **extra
            )
        except DatasetGenerationError as err:  # not UTF-8, or not in the builder's format (a CSV read as JSON)
            error = str(unreadable_file_error(list(args.data_files or [args.dataset]), err))
            if not error.endswith("."):  # read as text, but not in the builder's format
                error += f". Check that --dataset {args.dataset} is the format of the file(s)."
            raise ConfigError(error) from None
        except ConnectionError as err:  # offline, or no network, and not cached
            raise hub_unreachable_error(
                "--dataset",
                args.dataset,
                err,
                "give local text instead: --text_files F, or --dataset csv/json with --data_files F",
            ) from None
        column = args.text_column
        if column not in dataset.column_names:
            raise ValueError(
                f"{args.dataset} has no column {column!r} (columns: {dataset.column_names}); pass --text_column."
            )
    dtype = getattr(dataset.features[column], "dtype", None)
    if dtype not in ("string", "large_string"):
        raise ConfigError(
            f"--text_column {column} of {args.dataset} holds {dtype or dataset.features[column]} values, not text: "
            f"give the column with the documents (columns: {dataset.column_names})."
        )
    texts = [text for text in dataset[column] if text and text.strip()]
    if not texts:
        raise ValueError("The text source holds no non-empty document.")
    return texts


@dataclasses.dataclass
class TokenStreams:
    """Training and held-out token streams (documents concatenated, no special tokens; int32), split by
    document."""

    train: torch.Tensor
    held_out: torch.Tensor
    held_out_documents: list[str]


def tokenize_streams(texts: list[str], tokenizer, eval_fraction: float, seed: int) -> TokenStreams:
    """Shuffle the documents (seeded), hold out the first `eval_fraction` of them, concatenate each part's tokens.

    `eval_fraction=1` holds out everything (evaluation only). Tokenised a batch of documents at a time into int32
    arrays: a flat Python list of the ids held about 250 bytes a token (2 GB for 7M tokens of books)."""
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
    held_out_count = max(1, round(len(texts) * eval_fraction))
    if held_out_count >= len(texts) and eval_fraction < 1:
        raise ValueError(f"{len(texts)} document(s) cannot be split into training and held-out text; give more.")

    def stream(indices: list[int]) -> torch.Tensor:
        per_batch = documents_per_batch(
            sum(len(texts[i]) for i in indices) / max(len(indices), 1), TOKENIZE_BATCH_CHARACTERS
        )
        pieces = [np.zeros(0, dtype=np.int32)]
        for start in range(0, len(indices), per_batch):
            batch = [texts[i] for i in indices[start : start + per_batch]]
            ids = tokenizer(batch, add_special_tokens=False, verbose=False)["input_ids"]
            pieces.extend(np.asarray(document, dtype=np.int32) for document in ids)
        return torch.from_numpy(np.concatenate(pieces))

    return TokenStreams(
        train=stream(order[held_out_count:]),
        held_out=stream(order[:held_out_count]),
        held_out_documents=[texts[i] for i in order[:held_out_count]],
    )


def num_special_tokens(tokenizer) -> int:
    prefix, suffix = special_token_framing(tokenizer)
    return len(prefix) + len(suffix)


def special_token_framing(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a single text ([CLS] .. [SEP] for BERT, <s> .. </s> for RoBERTa)."""
    bare = tokenizer("hello", add_special_tokens=False)["input_ids"]
    framed = tokenizer("hello")["input_ids"]
    for start in range(len(framed) - len(bare) + 1):
        if framed[start : start + len(bare)] == bare:
            return framed[:start], framed[start + len(bare) :]
    raise ValueError(f"Cannot tell where {type(tokenizer).__name__} puts its special tokens around a text.")


def with_special_tokens(content: torch.Tensor, tokenizer) -> torch.Tensor:
    """(batch, L - specials) -> (batch, L): the tokenizer's own framing around every window."""
    prefix, suffix = special_token_framing(tokenizer)
    batch = content.shape[0]
    return torch.cat(
        [
            torch.tensor(prefix, dtype=torch.long).expand(batch, -1),
            content,
            torch.tensor(suffix, dtype=torch.long).expand(batch, -1),
        ],
        dim=1,
    )


def training_batch(
    streams: TokenStreams,
    tokenizer,
    args: TransferArguments,
    lengths: list[int],
    step: int,
    process_index: int = 0,
    num_processes: int = 1,
) -> torch.Tensor:
    """The windows of step `step`: a pure function of (seed, step), so a resumed run sees the same batches.

    Length lengths[step % len(lengths)]; each process takes its own rows of the global batch.
    """
    length = lengths[step % len(lengths)]
    content = length - num_special_tokens(tokenizer)
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    starts = torch.randint(0, len(streams.train) - content + 1, (args.batch_size * num_processes,), generator=generator)
    starts = starts[process_index::num_processes]
    windows = torch.stack([streams.train[start : start + content] for start in starts.tolist()]).long()
    return with_special_tokens(windows, tokenizer)


def held_out_batches(streams: TokenStreams, tokenizer, lengths: list[int], windows: int) -> dict[int, torch.Tensor]:
    """`windows` consecutive held-out windows per length (the same for every evaluation)."""
    batches = {}
    for length in lengths:
        content = length - num_special_tokens(tokenizer)
        if len(streams.held_out) < content * windows:
            raise ValueError(
                f"The held-out text has {len(streams.held_out)} tokens, fewer than {windows} windows of "
                f"{length}: raise --eval_fraction or lower --eval_windows."
            )
        chunk = streams.held_out[: content * windows].view(windows, content).long()
        batches[length] = with_special_tokens(chunk, tokenizer)
    return batches
