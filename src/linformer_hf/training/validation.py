"""Checks on inputs that the recipe's field checks (config.py's ``validate()``) cannot make: the rows of the data, and
what the machine actually runs.

Each check fails (or warns) before the first update, naming the file, the row and the value, so that a bad cell is
fixed in the data instead of crashing mid-training or being scored silently as a miss.
"""

from __future__ import annotations

import logging
import math
import numbers

from .errors import ConfigError

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
    where = (lambda row: f"row {row + 1}") if header_rows is None else (lambda row: f"line {row + 1 + header_rows}")
    shown = "; ".join(f"{where(row)}: {'missing' if value is None else repr(value)}" for row, value in bad[:MAX_LISTED])
    more = f" (and {len(bad) - MAX_LISTED} more)" if len(bad) > MAX_LISTED else ""
    raise ConfigError(
        f"{source}: {len(bad)} row(s) of column {label_column!r} are not a class index in [0, {num_labels}) "
        f"(integers 0..{num_labels - 1}, one per row): {shown}{more}. Fix or remove these rows."
    )


def warn_if_mixed_precision_ignored(accelerator) -> str | None:
    """Say so when fp16 was asked for but the device runs fp32 (Accelerate ignores fp16 on a CPU without a word)."""
    if accelerator.mixed_precision == "fp16" and not accelerator.native_amp:
        message = (
            f"mixed_precision fp16 was asked for, but the device {accelerator.device.type!r} has no fp16 autocast: "
            f"this run computes in fp32 (speed and numbers are fp32's). Set mixed_precision: no (or bf16) to "
            f"silence this."
        )
        if accelerator.is_main_process:
            logger.warning(message)
        return message
    return None


def check_model_source(name_or_path: str, what: str) -> None:
    """A model given as a local directory must exist; otherwise it must at least be a well-formed Hub repo id.

    Without this, a mistyped local path reaches huggingface_hub, which reports it as a malformed repo id.
    """
    import os

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
