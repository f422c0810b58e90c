"""Checks on inputs that the recipe's field checks (config.py's ``validate()``) cannot make: the rows of the data, and
what the machine actually runs.

Each check fails (or warns) before the first update, naming the file, the row and the value, so that a bad cell is
fixed in the data instead of crashing mid-training or being scored silently as a miss.
"""

from __future__ import annotations

import logging
import math
import numbers

from .config import ConfigError

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
        message = (f"mixed_precision fp16 was asked for, but the device {accelerator.device.type!r} has no fp16 autocast: "
                   f"this run computes in fp32 (speed and numbers are fp32's). Set mixed_precision: no (or bf16) to "
                   f"silence this.")
        if accelerator.is_main_process:
            logger.warning(message)
        return message
    return None
