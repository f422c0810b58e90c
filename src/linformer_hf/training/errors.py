"""What the scripts report as one `error:` line instead of a traceback: input the user can fix.

Besides `ConfigError`, this covers huggingface_hub's strict-dataclass errors, which transformers' configs raise for a
field they reject (e.g. `projected_length: -1`) and which are not ValueErrors.
"""

from __future__ import annotations

import argparse
import sys

from huggingface_hub.errors import StrictDataclassError


class ConfigError(ValueError):
    """A recipe or an override is invalid (unknown key, wrong type, inconsistent values)."""


# The exit status of a run stopped by SIGTERM / SIGINT after writing a checkpoint: "resume me" (EX_TEMPFAIL of
# sysexits.h, "temporary failure, try again later"), for job scripts that requeue.
RESUMABLE_EXIT_CODE = 75


class TrainingDiverged(Exception):
    """The loss or gradients stayed non-finite (or spiked): the run stopped without saving its current state."""


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message names the `pip install` command of its extra."""


class Preempted(Exception):
    """The run was asked to stop (SIGTERM / SIGINT) and wrote a checkpoint to resume from; the message says which."""


# The exceptions that mean "your input is wrong" (the message says what and how to fix it), not "the code is wrong";
# a diverged run is one: its message says what to change, and a missing extra says what to install.
USER_ERRORS = (ConfigError, StrictDataclassError, TrainingDiverged, MissingExtra)


def one_line(err: BaseException) -> str:
    """The message of ``err`` on one line (strict-dataclass messages span two: the validator, then the reason)."""
    text = " ".join(str(err).split())
    if isinstance(err, StrictDataclassError):
        text = f"invalid model config: {text}"
    return text


def report(err: BaseException) -> int:
    """Print ``error: <message>`` to stderr; the exit status for the scripts."""
    print(f"error: {one_line(err)}", file=sys.stderr)
    return 2


def report_preempted(err: Preempted) -> int:
    """Print the stop message and return `RESUMABLE_EXIT_CODE`."""
    print(f"stopped: {one_line(err)}", file=sys.stderr)
    return RESUMABLE_EXIT_CODE


def positive_int(text: str) -> int:
    """argparse type of a count that must be >= 1: `--max_inputs 0` is refused by the parser, not taken as a default
    or met as a confusing error after the model is loaded."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value
