"""Checks on inputs that the recipe's field checks (config.py's ``validate()``) cannot make: the rows of the data, and
what the machine actually runs.

Each check fails (or warns) before the first update, naming the file, the row and the value, so that a bad cell is
fixed in the data instead of crashing mid-training or being scored silently as a miss.
"""

from __future__ import annotations

import csv
import logging
import math
import numbers
import os
import re

from .errors import ConfigError, one_line

logger = logging.getLogger(__name__)

MAX_LISTED = 5  # bad rows named in one message


def _as_label(value, num_labels: int) -> int | None:
    """The class index ``value`` stands for, or None when it is not an integer in [0, num_labels)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, numbers.Integral):
        index = int(value)
    elif isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        index = int(value)
    else:
        return None
    return index if 0 <= index < num_labels else None


def check_labels(ds, label_column: str, num_labels: int, source: str, header_rows: int | None = None) -> None:
    """Every cell of ``label_column`` is a class index in [0, num_labels); else a ConfigError naming the rows.

    ``header_rows``: lines before the first data row in a line-per-row file (1 for csv/tsv, 0 for JSON lines), so that
    the message gives the file's line numbers; None names rows (1-based) instead.
    """
    bad = []
    for row, value in enumerate(ds[label_column]):
        if _as_label(value, num_labels) is None:
            bad.append((row, value))
    if not bad:
        return
    if len(bad) == len(ds) and len({value for _, value in bad}) == 1:  # one placeholder throughout: GLUE's test files
        raise ConfigError(
            f"{source}: every one of its {len(ds)} rows has the label {bad[0][1]!r}, not a class index in "
            f"[0, {num_labels}): an unlabelled split, as GLUE's test files are? Remove the {label_column!r} column "
            f"from a test file to have it predicted without a score, or give the labelled file."
        )
    where = _row_name(header_rows)
    shown = "; ".join(f"{where(row)}: {'missing' if value is None else repr(value)}" for row, value in bad[:MAX_LISTED])
    more = f" (and {len(bad) - MAX_LISTED} more)" if len(bad) > MAX_LISTED else ""
    raise ConfigError(
        f"{source}: {len(bad)} row(s) of column {label_column!r} are not a class index in [0, {num_labels}) "
        f"(integers 0..{num_labels - 1}, one per row): {shown}{more}. Fix or remove these rows."
    )


def _row_name(header_rows: int | None):
    """How a message names row ``row`` (0-based) of a data set: by its file line where the file has a line per row."""
    return (lambda row: f"row {row + 1}") if header_rows is None else (lambda row: f"line {row + 1 + header_rows}")


def warn_empty_texts(ds, text_columns, source: str, header_rows: int | None = None) -> int:
    """Say how many rows have an empty or missing text cell (read as empty text: the model sees only its special
    tokens), naming the first; returns that count. A warning, not an error: real data sets hold a few (GLUE's QQP).
    A column empty in every row is an error: the model would learn the labels from no text (another column named?)."""
    blank = {column: {row for row, text in enumerate(ds[column]) if text is None or not str(text).strip()}
             for column in text_columns}  # fmt: skip
    for column, rows in blank.items():
        if len(ds) and len(rows) == len(ds):
            raise ConfigError(
                f"{source}: {column!r} is empty or missing in all {len(ds)} rows: there is no text to learn from. Give "
                f"a file whose {column!r} column holds the task's text."
            )
    empty = sorted(set().union(*blank.values()))
    if empty:
        where = _row_name(header_rows)
        shown = ", ".join(where(row) for row in empty[:MAX_LISTED])
        more = f" (and {len(empty) - MAX_LISTED} more)" if len(empty) > MAX_LISTED else ""
        logger.warning(
            "%s: %d of %d row(s) have an empty or missing %s (%s%s); they are read as empty text. Fix or remove them "
            "if that is not meant.",
            source,
            len(empty),
            len(ds),
            " or ".join(repr(c) for c in text_columns),
            shown,
            more,
        )
    return len(empty)


def runs_on_cpu() -> bool:
    """`TrainingArguments.use_cpu`: as the Accelerate launcher says (its ``--cpu``, or a config's ``use_cpu``), and
    wherever torch sees no accelerator. Without it the Trainer refuses bf16 on a CPU (which autocasts in bf16 well)
    with "Your setup doesn't support bf16/gpu", and only when the command runs outside the launcher."""
    import torch
    from accelerate.utils import parse_flag_from_env

    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6: CUDA, XPU, MPS, ...
    available = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    return parse_flag_from_env("ACCELERATE_USE_CPU") or not available


def warn_if_mixed_precision_ignored(accelerator) -> str | None:
    """Say so when fp16 was asked for but the device runs fp32 (Accelerate ignores fp16 on a CPU without a word)."""
    if accelerator.mixed_precision == "fp16" and not accelerator.native_amp:
        message = (
            f"mixed_precision fp16 was asked for, but the device {accelerator.device.type!r} has no fp16 autocast: "
            f"this run computes in fp32 (speed and numbers are fp32's). Set mixed_precision: no (or bf16, which a "
            f"CPU autocasts) to silence this."
        )
        if accelerator.is_main_process:
            logger.warning(message)
        return message
    return None


def check_model_source(name_or_path: str, what: str) -> None:
    """A model given as a local directory must exist; otherwise it must at least be a well-formed Hub repo id.

    Without this, a mistyped local path reaches huggingface_hub, which reports it as a malformed repo id.
    """
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if os.path.isdir(name_or_path):
        return
    if os.path.exists(name_or_path):
        raise ConfigError(f"{what}={name_or_path} is a file; give the directory of a saved model (with config.json).")
    try:
        validate_repo_id(name_or_path)
    except HFValidationError:
        raise ConfigError(
            f"{what}={name_or_path}: no such directory (and not a Hub name such as roberta-base or "
            f"user/model). Check the path."
        ) from None


def model_source(name_or_path: str, what: str) -> tuple[str, list[str]]:
    """The folder and the names of the files a model is built from (`loading.model_source_files`: a folder's, or a
    Hub name's download), which a run hashes to know the model again (`loading.files_sha256`). A Hub name that is not
    in the cache and cannot be fetched is one error naming it and the way out (``what``: its option)."""
    from ..loading import model_source_files
    from .errors import LOCAL_MODEL, hub_unreachable, hub_unreachable_error

    try:
        return model_source_files(name_or_path)
    except Exception as err:  # huggingface_hub's errors are not all OSErrors
        if hub_unreachable(err):
            raise hub_unreachable_error(what, name_or_path, err, LOCAL_MODEL) from None
        raise


def count_documents(path: str, up_to: int) -> int:
    """Non-blank lines of a text file (one document a line), counting no further than ``up_to``."""
    found = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                found += 1
                if found >= up_to:
                    break
    return found


def check_text_files(train_files: list[str], validation_files: list[str], hold_out: bool) -> None:
    """Text files for pretraining hold text: at least one document each, and two in all when validation is held out
    of train (one document cannot be split into a train and a validation part)."""
    for path in list(train_files) + list(validation_files):
        if count_documents(path, 1) == 0:
            raise ConfigError(
                f"Data file {path} has no text (it is empty or only blank lines); give text files with "
                f"one document a line."
            )
    if hold_out and sum(count_documents(path, 2) for path in train_files) < 2:
        raise ConfigError(
            f"data.train_files {list(train_files)} hold a single document (one non-blank line): too few to hold out "
            f"data.validation_split_percentage for validation. Give more text, or data.validation_files."
        )


def check_tokenizer_fits_model(
    tokenizer, model_config, tokenizer_source: str, model_source: str, tokenizer_option: str, pairs: bool = False
):
    """Every id the tokenizer can give has an embedding row: refused before training, naming both sizes (otherwise an
    index error deep inside the embedding at the first rare token, or a device assert on a GPU). A tokenizer named by
    ``tokenizer_option`` beside a model folder that holds its own must give every id the meaning the model's gives it:
    one of the same size but another vocabulary trains and scores on ids that mean other tokens to the model, without
    any error. With ``pairs``, a tokenizer that marks the second segment with token_type_ids 1 needs a model with two
    segment embeddings."""
    if len(tokenizer) > model_config.vocab_size:
        raise ConfigError(
            f"The tokenizer {tokenizer_source} has {len(tokenizer)} tokens but the model {model_source} has only "
            f"{model_config.vocab_size} embeddings (vocab_size): ids from {model_config.vocab_size} up have no "
            f"embedding. Use the tokenizer the model was trained with."
        )
    if os.path.isdir(model_source) and os.path.realpath(model_source) != os.path.realpath(tokenizer_source):
        from ..loading import token_id_conflict, tokenizer_vocabulary

        model_vocabulary = tokenizer_vocabulary(model_source)
        conflict = model_vocabulary and token_id_conflict(model_vocabulary, tokenizer.get_vocab())
        if conflict:
            raise ConfigError(
                f"The tokenizer {tokenizer_source} is not the one saved with the model {model_source}: {conflict}. "
                f"Use the model's own tokenizer (leave {tokenizer_option} unset), or a model trained with this one."
            )
    type_vocab_size = getattr(model_config, "type_vocab_size", None)
    if (
        pairs
        and type_vocab_size is not None
        and type_vocab_size < 2
        and "token_type_ids" in tokenizer.model_input_names
    ):
        raise ConfigError(
            f"The tokenizer {tokenizer_source} marks the second text of a pair with token_type_ids 1, but the model "
            f"{model_source} has type_vocab_size={type_vocab_size} (one segment). Use the tokenizer the model was "
            f"trained with."
        )


def check_model_files(model_dir: str, what: str, holds_weights: bool = False) -> None:
    """A saved model's weight files are whole (`loading.check_weight_files`), and with ``holds_weights`` there are
    some (`loading.check_holds_weights`), as a recipe error."""
    from ..loading import check_holds_weights, check_weight_files

    try:
        if holds_weights:
            check_holds_weights(model_dir)
        check_weight_files(model_dir)
    except ValueError as err:
        raise ConfigError(f"{what}: {err}") from None


def first_non_utf8_line(path: str) -> str | None:
    """Where ``path`` stops being UTF-8 ("line N: byte 0x.. at column C"), or None. Read only after a load failed."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as err:
                return f"line {number}: byte {raw[err.start]:#04x} at column {err.start + 1}"
    return None


def unreadable_file_error(paths: list[str], err: BaseException) -> ConfigError:
    """The error for data files that `datasets` could not read (it names neither the file nor the line)."""
    for path in paths:
        where = first_non_utf8_line(path) if os.path.isfile(path) else None
        if where:
            return ConfigError(
                f"Data file {path} is not UTF-8 text ({where}). Convert it to UTF-8 (e.g. `iconv -f latin1 -t utf-8 "
                f"{os.path.basename(path)}`), or remove the line."
            )
    cause = err.__cause__ or err
    return ConfigError(f"Data file(s) {', '.join(paths)} could not be read: {type(cause).__name__}: {cause}")


def check_has_rows(path: str, header_rows: int) -> None:
    """A table file holds at least one row below its header (``datasets`` fails on it with a message that does not
    name the file)."""
    if count_documents(path, header_rows + 1) <= header_rows:
        what = "only a header" if count_documents(path, 1) else "no text (it is empty or only blank lines)"
        raise ConfigError(f"Data file {path} has {what}: give a file with the task's columns and at least one row.")


def check_field_counts(path: str, **dialect) -> None:
    """Every row of a CSV / TSV file has as many fields as its header (``dialect``: `csv.reader`'s options, as the
    file is loaded with). A row with one more is read by pandas with its first field as an index, and every other
    shifted one column left: a text cut at an unquoted comma, say, trains in place of the whole text, without a word."""
    csv.field_size_limit(2**31 - 1)  # a long document is one field (the default limit is 128 KiB)
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        rows = csv.reader(handle, **dialect)
        header = next(rows, [])
        for row in rows:
            if row and len(row) != len(header):
                separator = "tab" if dialect.get("delimiter") == "\t" else "comma"
                raise ConfigError(
                    f"Data file {path}, line {rows.line_num}: {len(row)} fields, but the header {header} has "
                    f"{len(header)}. A {separator} inside a text splits it: "
                    + (
                        "replace the tabs inside texts with spaces."
                        if separator == "tab"
                        else 'quote texts that hold commas ("a, b"), as CSV writers do.'
                    )
                )


DATASET_ENTRY_KEYS = ("path", "name", "split", "text_column", "revision")
_SHARD_NAME = re.compile(r"^(?P<prefix>.+)-(?P<index>\d+)-of-(?P<total>\d+)(?P<suffix>\.[^/]+)$")


def missing_shards(files: list[str]) -> list[str]:
    """The files of a sharded set (``train-00003-of-00006.parquet``, the Hub's naming) that ``files`` lacks."""
    found: dict[tuple[str, int, str, int], set[int]] = {}
    for path in files:
        match = _SHARD_NAME.match(path)
        if match:
            key = (match["prefix"], len(match["index"]), match["suffix"], int(match["total"]))
            found.setdefault(key, set()).add(int(match["index"]))
    missing = []
    for (prefix, width, suffix, total), indices in found.items():
        missing += [f"{prefix}-{i:0{width}d}-of-{total:0{width}d}{suffix}" for i in range(total) if i not in indices]
    return missing


def is_local_folder(path: str) -> bool:
    """Whether a data.datasets path means a folder on this machine rather than a Hub name."""
    return os.path.isdir(path) or path.startswith((".", "/", "~")) or os.path.exists(path)


def check_dataset_entry(entry, where: str, default_text_column: str, streaming: bool = False) -> int | None:
    """One entry of data.datasets / data.validation_datasets is well formed, and, when it is a local folder in a Hub
    dataset's layout, its split's shards are all there and readable and hold the text column: a missing or corrupt
    shard is named here, before any tokenising or training, not met as an error deep inside ``datasets``.

    Hub names are checked by ``datasets`` when they are loaded (this machine may not reach the Hub). ``streaming``:
    the entry is streamed, which reads its own split only. Returns the documents the entry reads when they can be
    counted from the shards' footers (a local folder's whole split of parquet shards), else None."""
    if not isinstance(entry, dict) or "path" not in entry:
        example = entry if isinstance(entry, str) else "FOLDER_OR_HUB_NAME"
        raise ConfigError(
            f"Each entry of {where} needs at least a 'path' key, got {entry!r}: write it as {{path: {example}}}, "
            f"e.g. {where}: [{{path: {example}, split: train}}]."
        )
    bad = sorted(set(entry) - set(DATASET_ENTRY_KEYS))
    if bad:
        raise ConfigError(f"Unknown key(s) {bad} in a {where} entry; allowed: {', '.join(DATASET_ENTRY_KEYS)}.")
    path = str(entry["path"])
    if not is_local_folder(path):
        return None
    if not os.path.isdir(path):
        raise ConfigError(f"{where}: {path} is not a folder (give a folder of data files in a Hub dataset's layout).")
    from datasets import load_dataset_builder

    try:
        builder = load_dataset_builder(path, entry.get("name"))
    except (ValueError, FileNotFoundError) as err:  # e.g. a config name the folder's README does not declare
        raise ConfigError(f"{where}: the folder {path} cannot be read as a dataset: {one_line(err)}") from None
    split = str(entry.get("split", "train")).split("[")[0]  # "train[:1%]": a slice of the train split
    data_files = builder.config.data_files or {}
    if split not in data_files:
        raise ConfigError(
            f"{where}: the folder {path} has no split {split!r} (it has {sorted(data_files) or 'none'}); "
            f"set 'split' in the entry."
        )
    files = [str(f) for f in data_files[split]]
    missing = missing_shards(files)
    if missing:
        raise ConfigError(
            f"{where}: split {split!r} of {path} is incomplete: {', '.join(missing[:MAX_LISTED])} "
            f"{'is' if len(missing) == 1 else 'are'} missing ({len(files)} of {len(files) + len(missing)} shards "
            f"found). Restore the missing shard(s) (download them again)."
        )
    text_column = entry.get("text_column", default_text_column)
    rows = [_check_parquet_shard(file, text_column, where) for file in files if file.endswith(".parquet")]
    # `datasets` fails on a split of no rows with "BatchSize must be greater than 0", which reads as a damaged file.
    if len(rows) == len(files) and sum(rows) == 0:
        raise ConfigError(
            f"{where}: split {split!r} of {path} has no rows ({len(files)} shard(s) of 0 rows): give a split that "
            f"holds documents (set 'split' in the entry), or drop the entry."
        )
    documents = sum(rows) if len(rows) == len(files) and "[" not in str(entry.get("split", "train")) else None
    if streaming:
        return documents
    # A folder is prepared whole (every split) to read one of its splits, so an empty other split fails it too.
    for other, other_files in data_files.items():
        if other != split and _parquet_rows([str(f) for f in other_files]) == 0:
            raise ConfigError(
                f"{where}: split {other!r} of {path} has no rows, and datasets prepares every split of a folder to "
                f"read its {split!r} split: move the empty split's files out of the folder, or give it documents."
            )
    return documents


def _parquet_rows(files: list[str]) -> int | None:
    """The rows of a split's parquet files, by their footers; None when they are not all readable parquet files."""
    import pyarrow.parquet as pq

    if not files or not all(file.endswith(".parquet") for file in files):
        return None
    try:
        return sum(pq.ParquetFile(file).metadata.num_rows for file in files)
    except Exception:  # a corrupt shard of a split not read: the loader names it
        return None


def _check_parquet_shard(file: str, text_column: str, where: str) -> int:
    """A parquet shard opens (its footer is whole: a truncated or overwritten file fails here) and has the column;
    returns its rows."""
    import pyarrow.parquet as pq

    try:
        shard = pq.ParquetFile(file)
        schema = shard.schema_arrow
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError for a truncated or non-parquet file
        raise ConfigError(
            f"{where}: the shard {file} is corrupt or truncated ({one_line(err)}). Download it again."
        ) from None
    if text_column not in schema.names:
        raise ConfigError(
            f"{where}: the shard {file} has no column {text_column!r} (it has {schema.names}); set text_column in "
            f"the entry (or data.text_column)."
        )
    return shard.metadata.num_rows
