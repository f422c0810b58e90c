"""What the scripts report as one `error:` line instead of a traceback: input the user can fix.

Besides `ConfigError`, this covers huggingface_hub's strict-dataclass errors, which transformers' configs raise for a
field they reject (e.g. `projected_length: -1`) and which are not ValueErrors.
"""

from __future__ import annotations

import sys

from huggingface_hub.errors import StrictDataclassError

from .config import ConfigError

# The exceptions that mean "your input is wrong" (the message says what and how to fix it), not "the code is wrong".
USER_ERRORS = (ConfigError, StrictDataclassError)


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
