"""Pretraining data: load a corpus (Hub names or local text files), tokenise once (cached by ``datasets``), pack into
blocks of ``block_size`` tokens (RoBERTa's full-sentences packing: documents are concatenated across boundaries,
each keeping its ``<s> ... </s>``), shard per process, and mask dynamically with transformers' collator.

Masking is made reproducible per example: each block is masked with a generator seeded by (seed, epoch, block index),
so a resumed run and an uninterrupted one mask identically, and one process or several mask the same block the same
way (fairseq seeds its masking the same way).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from itertools import chain

import torch
import torch.nn.functional as F
from datasets import IterableDataset, concatenate_datasets, interleave_datasets, load_dataset
from datasets.distributed import split_dataset_by_node
from datasets.exceptions import DatasetGenerationError

from .config import ConfigError, PretrainDataSection
from .errors import hub_unreachable_error, one_line
from .hub_datasets import load_hub_dataset
from .validation import unreadable_file_error

INDEX_COLUMN = "block_index"


def _select_text(ds, text_column: str, source: str):
    columns = ds.column_names
    if columns is not None and text_column not in columns:
        raise ConfigError(
            f"Column {text_column!r} not found in {source}; it has columns {columns}. "
            f"Set data.text_column (or text_column in the data.datasets entry)."
        )
    if columns is not None:
        ds = ds.remove_columns([c for c in columns if c != text_column])
    if text_column != "text":
        ds = ds.rename_column(text_column, "text")
    return ds


def _load_entries(entries: list[dict], cfg: PretrainDataSection, where: str, seed: int = 0):
    """The "text" column of the data.datasets-style entries (Hub names, or local folders in a Hub dataset's layout),
    as one dataset: concatenated, or for streams interleaved (seeded)."""
    parts = []
    for entry in entries:
        path = entry["path"]
        try:
            ds = load_hub_dataset(
                path,
                entry.get("name"),
                split=entry.get("split", "train"),
                revision=entry.get("revision"),
                streaming=cfg.streaming,
                cache_dir=cfg.cache_dir,
            )
        except ConnectionError as err:  # offline, or the Hub is down: one line with the local alternative
            raise hub_unreachable_error(
                f"{where} entry",
                path,
                err,
                "download it where the Hub is reachable and give its local folder as the "
                "entry's path (a folder of parquet shards in the Hub's layout is read the same way), or give local "
                "text files in data.train_files",
            ) from None
        except DatasetGenerationError as err:  # e.g. a shard whose footer is whole but whose pages are not
            cause = err.__cause__ or err
            if "BatchSize must be greater than 0" in str(cause):  # pyarrow's word for a parquet split of 0 rows
                raise ConfigError(
                    f"{where}: {path} has a split of no rows, and datasets prepares every split of a dataset to "
                    f"read one ({one_line(cause)}). Give another dataset or revision, or download it and give its "
                    f"local folder without the empty split's files."
                ) from None
            raise ConfigError(
                f"{where}: {path} could not be read ({type(cause).__name__}: {one_line(cause)}). Check its data files "
                f"(download a damaged one again)."
            ) from None
        parts.append(_select_text(ds, entry.get("text_column", cfg.text_column), path))
    if len(parts) == 1:
        return parts[0]
    if cfg.streaming:
        return interleave_datasets(parts, seed=seed, stopping_strategy="all_exhausted")
    return concatenate_datasets(parts)


def load_raw_corpus(cfg: PretrainDataSection, seed: int):
    """Return {"train": ds, "validation": ds} of a single "text" column (Dataset, or IterableDataset if streaming)."""
    if cfg.train_files:
        files = {"train": list(cfg.train_files)}
        if cfg.validation_files:
            files["validation"] = list(cfg.validation_files)
        try:
            raw = load_dataset("text", data_files=files, streaming=cfg.streaming, cache_dir=cfg.cache_dir)
        except DatasetGenerationError as err:  # e.g. bytes that are not UTF-8: said with the file and the line
            raise unreadable_file_error([path for paths in files.values() for path in paths], err) from None
        train = raw["train"]
        validation = raw["validation"] if "validation" in raw else None
    else:
        train = _load_entries(cfg.datasets, cfg, "data.datasets", seed)
        validation = None
        if cfg.validation_datasets:
            validation = _load_entries(cfg.validation_datasets, cfg, "data.validation_datasets", seed)
    if validation is None:
        if cfg.streaming:
            validation = train.take(cfg.validation_examples_streaming)
            train = train.skip(cfg.validation_examples_streaming)
        else:
            split = train.train_test_split(test_size=cfg.validation_split_percentage / 100.0, seed=seed)
            train, validation = split["train"], split["test"]
    return {"train": train, "validation": validation}


# How much text is handled at once. Documents range from a line (WikiText) to a whole book (about 0.3M characters),
# so batches are sized in characters, not documents: a fixed 1,000 documents a batch is a few kB of lines, but of books
# it is the whole corpus in memory at once (a streamed run grew past 19 GB before its first update).
TOKENIZE_BATCH_CHARACTERS = 2_000_000  # the tokenizer's encodings of one batch (about 0.5M tokens)
PACK_BATCH_CHARACTERS = 16_000_000  # token ids of one packing batch; each batch drops its tail of < block_size
PIECE_CHARACTERS = 32_000_000  # text tokenised and cached as one piece: a killed run redoes at most one
MAX_DOCUMENTS_PER_BATCH = 1000  # datasets' own default batch size, kept for corpora of short documents
SAMPLED_DOCUMENTS = 64  # documents whose mean length sizes the batches


def mean_document_characters(ds) -> float:
    """The mean length in characters of the first `SAMPLED_DOCUMENTS` documents (streamed data: of the stream's)."""
    if isinstance(ds, IterableDataset):
        texts = [example["text"] or "" for example in ds.take(SAMPLED_DOCUMENTS)]
    else:
        texts = [text or "" for text in ds.select(range(min(SAMPLED_DOCUMENTS, len(ds))))["text"]]
    return sum(map(len, texts)) / max(len(texts), 1)


def _workers(num_proc: int | None, rows: int) -> int | None:
    """``num_proc`` for ``datasets.map`` over ``rows`` rows: None (in process) for one worker or fewer rows."""
    return num_proc if num_proc and num_proc > 1 and rows >= num_proc else None


def documents_per_batch(mean_characters: float, characters: int) -> int:
    return int(max(1, min(MAX_DOCUMENTS_PER_BATCH, characters // max(mean_characters, 1.0))))


def block_lengths(
    total: int, block_size: int, short_block_probability: float = 0.0, short_block_min_length: int = 8, seed: int = 0
) -> list[int]:
    """Lengths of the consecutive blocks cut from ``total`` packed tokens (the tail that fills no block is dropped).

    Each block is ``block_size`` long, except that with probability ``short_block_probability`` it is cut to a length
    drawn uniformly from [short_block_min_length, block_size] (BERT's ``short_seq_prob``). No token is dropped by the
    cut: the next block starts where the short one ends. Deterministic in ``seed``.
    """
    if short_block_probability == 0:
        return [block_size] * (total // block_size)
    rng = torch.Generator().manual_seed(seed)
    lengths, used = [], 0
    while True:
        length = block_size
        if torch.rand((), generator=rng).item() < short_block_probability:
            length = int(torch.randint(short_block_min_length, block_size + 1, (), generator=rng))
        if used + length > total:
            return lengths
        lengths.append(length)
        used += length


TOKENIZE_VERSION = 1  # part of the tokenised pieces' cache key: raise it when `tokenize` changes what it writes


def tokenize_fingerprint(ds, tokenizer) -> str | None:
    """The cache key of a piece's tokenisation, from what sets its tokens: the piece (its own fingerprint) and the
    tokenizer's vocabulary, merges, normalisation and special tokens (its tokenizer.json without the padding and
    truncation settings, which `tokenize` does not use). datasets' own key hashes the whole tokenizer object, so a
    Linformer run, whose tokenizer pads on the right (`loading.pad_as_the_model_takes`), tokenised a corpus again
    beside a RoBERTa run's cache of the same tokens (17 minutes and 2.3 GB for the books). None for a slow tokenizer
    (datasets' own key)."""
    if not getattr(tokenizer, "is_fast", False) or getattr(ds, "_fingerprint", None) is None:
        return None
    import json

    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    backend.pop("padding", None)
    backend.pop("truncation", None)
    key = json.dumps([ds._fingerprint, backend, TOKENIZE_VERSION], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def tokenize_and_pack(
    ds,
    tokenizer,
    block_size: int,
    num_proc: int | None = None,
    short_block_probability: float = 0.0,
    short_block_min_length: int = 8,
    seed: int = 0,
):
    """Tokenise documents (with special tokens) and pack them into blocks of ``block_size`` tokens.

    With ``short_block_probability`` > 0 a share of the blocks is shorter (see `block_lengths`), so that the model
    also sees inputs shorter than n in pretraining; a Linformer uses only the first L columns of E and F for an input
    of L tokens, and those columns are otherwise trained only as part of full-length inputs.
    """

    def tokenize(batch):
        texts = [t for t in batch["text"] if t and not t.isspace()]
        if not texts:  # a batch of blank documents (after a long one, say) gives no rows; the tokenizer fails on []
            return {"input_ids": []}
        return {"input_ids": tokenizer(texts, add_special_tokens=True, verbose=False)["input_ids"]}

    def pack(batch, indices):
        ids = list(chain.from_iterable(batch["input_ids"]))
        # Seeded by the batch's first document, so the cut is the same on every run and in every process.
        lengths = block_lengths(
            len(ids),
            block_size,
            short_block_probability,
            short_block_min_length,
            seed=_example_seed(seed, indices[0] if indices else 0),
        )
        blocks, start = [], 0
        for length in lengths:
            blocks.append(ids[start : start + length])
            start += length
        return {"input_ids": blocks}

    streaming = isinstance(ds, IterableDataset)
    mean_characters = mean_document_characters(ds)
    tokenize_batch = documents_per_batch(mean_characters, TOKENIZE_BATCH_CHARACTERS)
    pack_batch = documents_per_batch(mean_characters, PACK_BATCH_CHARACTERS)
    if streaming:
        ds = ds.map(tokenize, batched=True, batch_size=tokenize_batch, remove_columns=["text"])
        return ds.map(pack, batched=True, batch_size=pack_batch, with_indices=True)
    # Map-style data is tokenised in pieces of about `PIECE_CHARACTERS`, each cached by ``datasets`` as it completes:
    # a run killed while tokenising a large corpus starts again at the piece it was in.
    pieces = max(1, math.ceil(len(ds) * mean_characters / PIECE_CHARACTERS))
    tokenized = []
    for index in range(pieces):
        piece = ds.shard(num_shards=pieces, index=index, contiguous=True) if pieces > 1 else ds
        tokenized.append(
            piece.map(
                tokenize,
                batched=True,
                batch_size=tokenize_batch,
                writer_batch_size=tokenize_batch,
                remove_columns=["text"],
                num_proc=_workers(num_proc, len(piece)),
                new_fingerprint=tokenize_fingerprint(piece, tokenizer),
                desc="Tokenising" if pieces == 1 else f"Tokenising (piece {index + 1} of {pieces})",
            )
        )
    ds = tokenized[0] if pieces == 1 else concatenate_datasets(tokenized)
    ds = ds.map(
        pack,
        batched=True,
        batch_size=pack_batch,
        with_indices=True,
        num_proc=_workers(num_proc, len(ds)),
        desc=f"Packing into blocks of {block_size}",
    )
    return ds.map(lambda batch, idx: {INDEX_COLUMN: idx}, batched=True, with_indices=True, desc="Indexing blocks")


def prepare_pretraining_data(cfg: PretrainDataSection, tokenizer, seed: int, processes=None):
    """Load, tokenise and pack the corpus.

    Map-style data is cached by ``datasets``; with ``processes`` (accelerate's state), the main process builds it
    first."""
    from contextlib import nullcontext

    ctx = processes.main_process_first() if processes is not None else nullcontext()
    with ctx:
        raw = load_raw_corpus(cfg, seed)
        out = {}
        for split, ds in raw.items():
            # Validation keeps full blocks, so that perplexity is measured at length n whatever the training mix.
            short = cfg.short_block_probability if split == "train" else 0.0
            out[split] = tokenize_and_pack(
                ds, tokenizer, cfg.block_size, cfg.preprocessing_num_workers, short, cfg.short_block_min_length, seed
            )
    if not cfg.streaming:
        if len(out["train"]) == 0:
            raise ConfigError(
                f"The training corpus gives no block of {cfg.block_size} tokens; "
                f"use more text or a smaller data.block_size."
            )
        if len(out["validation"]) == 0 and (cfg.validation_files or cfg.validation_datasets):
            # The split percentage is not read when held-out documents are given: the fix is in them.
            source = "data.validation_files" if cfg.validation_files else "data.validation_datasets"
            raise ConfigError(
                f"The held-out documents of {source} give no block of {cfg.block_size} tokens; give more held-out "
                f"text there, or a smaller data.block_size."
            )
        if len(out["validation"]) == 0:
            raise ConfigError(
                f"The validation split gives no block of {cfg.block_size} tokens; "
                f"raise data.validation_split_percentage, or give more held-out text (data.validation_files, "
                f"data.validation_datasets)."
            )
        if cfg.max_train_blocks is not None:
            out["train"] = out["train"].select(range(min(cfg.max_train_blocks, len(out["train"]))))
        if cfg.max_eval_blocks is not None:
            out["validation"] = out["validation"].select(range(min(cfg.max_eval_blocks, len(out["validation"]))))
    else:  # a stream's first blocks
        if cfg.max_train_blocks is not None:
            out["train"] = out["train"].take(cfg.max_train_blocks)
        if cfg.max_eval_blocks is not None:
            out["validation"] = out["validation"].take(cfg.max_eval_blocks)
    return out


def no_training_batch_error(cfg: PretrainDataSection) -> ConfigError:
    """The error for a run whose training data gave no batch, naming the setting that took the documents."""
    if cfg.streaming and not (cfg.validation_files or cfg.validation_datasets):
        return ConfigError(
            f"The training stream gave no batch: without held-out documents, the first "
            f"data.validation_examples_streaming={cfg.validation_examples_streaming} documents of the stream are held "
            f"out for validation, and the corpus gave no training block after them. Lower "
            f"data.validation_examples_streaming, or give held-out documents (data.validation_files or "
            f"data.validation_datasets)."
        )
    return ConfigError("The training data gave no batch (empty stream or corpus).")


def prepare_held_out_blocks(cfg: PretrainDataSection, tokenizer):
    """The validation blocks of `prepare_pretraining_data` alone, from held-out documents the recipe names
    (data.validation_datasets or data.validation_files), without reading the training corpus: for scoring saved
    models on the documents their pretraining validated on. Map-style, cached, the first max_eval_blocks kept."""
    if cfg.validation_datasets:
        held_out = _load_entries(
            cfg.validation_datasets, dataclasses.replace(cfg, streaming=False), "data.validation_datasets"
        )
    elif cfg.validation_files:
        try:
            held_out = load_dataset(
                "text", data_files=list(cfg.validation_files), split="train", cache_dir=cfg.cache_dir
            )
        except DatasetGenerationError as err:
            raise unreadable_file_error(list(cfg.validation_files), err) from None
    else:
        raise ConfigError(
            "Scoring held-out documents needs them named: set data.validation_datasets (e.g. a corpus's validation "
            "split) or data.validation_files."
        )
    blocks = tokenize_and_pack(held_out, tokenizer, cfg.block_size, cfg.preprocessing_num_workers)
    if len(blocks) == 0:
        raise ConfigError(f"The held-out documents give no block of {cfg.block_size} tokens; give more text.")
    if cfg.max_eval_blocks is not None:
        blocks = blocks.select(range(min(cfg.max_eval_blocks, len(blocks))))
    return blocks


def shard_stream(ds: IterableDataset, rank: int, world_size: int, seed: int, buffer_size: int):
    """Each process reads its own shard of a streamed corpus (shuffled with a buffer)."""
    ds = ds.shuffle(seed=seed, buffer_size=buffer_size)
    return split_dataset_by_node(ds, rank=rank, world_size=world_size)


def _example_seed(*parts: int) -> int:
    digest = hashlib.sha256(",".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class SeededMaskingCollator:
    """Wraps ``DataCollatorForLanguageModeling`` so that each block is masked by its own seeded generator.

    The masking itself (15%, 80/10/10, special tokens never masked) is transformers' collator; this wrapper only chooses
    the generator per example: seeded by (seed, epoch, block index) when blocks carry an index, else by
    (seed, epoch, process, batch counter) for streamed data.
    """

    def __init__(self, mlm_collator, seed: int, process_index: int = 0, input_length: int | None = None):
        self.collator = mlm_collator
        self.input_length = input_length  # each masked block is cut into consecutive inputs this long
        self.seed = seed
        self.process_index = process_index
        self.epoch = 0
        self.batches_seen = 0

    def set_epoch(self, epoch: int):
        self.epoch = epoch

    def __call__(self, examples):
        outs = []
        for position, example in enumerate(examples):
            example = dict(example)
            index = example.pop(INDEX_COLUMN, None)
            if index is None:
                key = (self.seed, self.epoch, self.process_index, self.batches_seen, position)
            else:
                key = (self.seed, self.epoch, int(index))
            self.collator.generator = torch.Generator().manual_seed(_example_seed(*key))
            outs.append(self.collator([example]))
        self.batches_seen += 1
        batch = self._pad_and_stack(outs)
        if self.input_length is not None:  # (blocks, block_size) -> (blocks * block_size / input_length, input_length)
            batch = {key: value.reshape(-1, self.input_length) for key, value in batch.items()}
        return batch

    def _pad_and_stack(self, outs):
        """Stack per-example outputs, right-padding shorter blocks (padding is masked out and never a label)."""
        longest = max(o["input_ids"].shape[1] for o in outs)
        pad_values = {"input_ids": self.collator.tokenizer.pad_token_id, "labels": -100, "attention_mask": 0}
        batch = {}
        for key in outs[0]:
            if key not in pad_values and any(o[key].shape[1] != longest for o in outs):
                raise ValueError(f"Cannot pad collator output {key!r} of blocks with different lengths.")
            batch[key] = torch.cat(
                [F.pad(o[key], (0, longest - o[key].shape[1]), value=pad_values.get(key, 0)) for o in outs], dim=0
            )
        return batch


# Under fp16 / bf16 a batch is padded to a multiple of this many tokens (tensor cores' tile), up to the model's n.
PAD_MULTIPLE = 8


@dataclasses.dataclass
class PaddingCollator:
    """transformers' ``DataCollatorWithPadding`` (each batch padded to its longest example, ``label`` renamed
    ``labels``), padded further to a multiple of ``multiple`` tokens but never past ``longest``, the model's n: a batch
    that the multiple would take past n is padded to n. Built by `padding_collator`."""

    rounded: object  # DataCollatorWithPadding(pad_to_multiple_of=multiple)
    capped: object  # DataCollatorWithPadding(padding="max_length", max_length=longest)
    multiple: int
    longest: int

    def __call__(self, features):
        name = self.rounded.tokenizer.model_input_names[0]
        length = max(len(feature[name]) for feature in features)
        if math.ceil(length / self.multiple) * self.multiple <= self.longest:
            return self.rounded(features)
        return self.capped(features)  # longer than n already (never: inputs are cut to n) stays so, and is refused


def padding_collator(tokenizer, longest: int, mixed_precision: str | None):
    """The collator of variable-length inputs (fine-tuning's): each batch padded to its longest example, and under
    mixed precision (``fp16`` / ``bf16``) to a multiple of `PAD_MULTIPLE` tokens, but never past ``longest`` (the
    model's longest input, its n). A Linformer's n need not be a multiple of 8: a batch near n was padded past it (a
    Linformer of n = 60 got 64 tokens) and refused as longer than n."""
    from transformers import DataCollatorWithPadding

    if mixed_precision not in ("fp16", "bf16"):
        return DataCollatorWithPadding(tokenizer)
    rounded = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=PAD_MULTIPLE)
    if longest % PAD_MULTIPLE == 0:  # no multiple of 8 falls between a length <= n and n
        return rounded
    capped = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=longest)
    return PaddingCollator(rounded, capped, PAD_MULTIPLE, longest)


def build_mlm_collator(tokenizer, cfg: PretrainDataSection, seed: int, process_index: int = 0):
    from transformers import DataCollatorForLanguageModeling

    if tokenizer.mask_token is None:
        raise ConfigError("The tokenizer has no mask token; masked LM pretraining needs one (e.g. <mask>).")
    base = DataCollatorForLanguageModeling(
        tokenizer=tokenizer,
        mlm=True,
        mlm_probability=cfg.mlm_probability,
        mask_replace_prob=cfg.mask_replace_prob,
        random_replace_prob=cfg.random_replace_prob,
        return_tensors="pt",
    )
    return SeededMaskingCollator(base, seed=seed, process_index=process_index, input_length=cfg.input_length)


__all__ = [
    "INDEX_COLUMN",
    "PAD_MULTIPLE",
    "PaddingCollator",
    "SeededMaskingCollator",
    "block_lengths",
    "build_mlm_collator",
    "load_raw_corpus",
    "padding_collator",
    "prepare_held_out_blocks",
    "prepare_pretraining_data",
    "shard_stream",
    "tokenize_and_pack",
]
