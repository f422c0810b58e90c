"""The argument parser of every command line in this project: flags take the dashed and the underscored form alike.

`--max-sequence-length 2048` and `--max_sequence_length 2048` are one flag, as in transformers' `HfArgumentParser`
(which the dataclass-driven commands use). The underscored name is the one declared and shown in `--help`.
"""

from __future__ import annotations

import argparse
import sys


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser`, with `--some-flag` read as the declared `--some_flag` (and `--some-flag=value`)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args([self._underscored(arg) for arg in args], namespace)

    def _underscored(self, arg: str) -> str:
        if not arg.startswith("--") or arg == "--":
            return arg
        name, sep, value = arg.partition("=")
        underscored = "--" + name[2:].replace("-", "_")
        if name not in self._option_string_actions and underscored in self._option_string_actions:
            return underscored + sep + value
        return arg
