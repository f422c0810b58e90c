"""The benchmark's command line: every `BenchmarkConfig` field is a flag (transformers' `HfArgumentParser`), a
preset sets the defaults, and flags given override it. `python -m benchmarks --help`."""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from dataclasses import asdict, dataclass, field
from typing import Literal

from linformer_hf.outputs import check_output_dir, sigterm_unwinds, write_json_atomic, write_text_atomic
from linformer_hf.training.errors import report

from .config import PRESETS, BenchmarkConfig
from .report import FIGURES, cpu_details, load_average, machine_description, plot, report_markdown
from .results import BenchmarkRow, Status, write_csv
from .resume import COMPLETE, PARTIAL_CSV, PARTIAL_JSON, Checkpoint, read_checkpoint
from .run import RunInfo, run_benchmark

# What a run writes in output_dir; --overwrite deletes these of the earlier run, and nothing else there.
RUN_FILES = ("results.csv", PARTIAL_CSV, PARTIAL_JSON, "results.md", "run_info.json", *(f[-1] for f in FIGURES))


@dataclass
class CommandLine:
    """What the command adds to a `BenchmarkConfig`: where the defaults come from and where results go."""

    preset: Literal[tuple(PRESETS)] = field(default="default", metadata={"help": "the defaults of every field"})
    output_dir: str = field(
        default="outputs/benchmarks/latest", metadata={"help": "results.csv, results.md, run_info.json, PNGs"}
    )
    overwrite: bool = field(
        default=False, metadata={"help": "replace an earlier run's results in a non-empty output_dir"}
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": "continue the stopped run in output_dir (the same settings): measure only the points it had not "
            "saved, then write its results as a whole run does; a finished run is left as it is"
        },
    )


def _parser():
    from transformers import HfArgumentParser

    parser = HfArgumentParser((CommandLine, BenchmarkConfig), prog="python -m benchmarks", description=__doc__)
    for action in parser._actions:
        if action.nargs == "+":
            action.nargs = "*"  # `--train_ns` with no value: no training points
    return parser


def parse_args(argv: list[str] | None = None) -> tuple[CommandLine, BenchmarkConfig]:
    parser = _parser()
    known, _ = parser.parse_known_args(argv)
    parser.set_defaults(**PRESETS[known.preset])
    command_line, cfg, unknown = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    if unknown:
        parser.error(f"unknown arguments {unknown}; see --help (flags are spelled with underscores)")
    if command_line.resume and command_line.overwrite:
        parser.error("--resume continues the run in output_dir and --overwrite starts it again: give one of them")
    try:
        cfg.validate()
    except ValueError as err:  # one line before any work, as for a bad flag
        parser.error(str(err))
    return command_line, cfg


def check_device(cfg: BenchmarkConfig) -> None:
    """A CUDA run on a machine without CUDA is refused before any work (the presets for a GPU set device=cuda), as is
    --peer without the package it times."""
    import torch

    if cfg.peer and importlib.util.find_spec("linformer") is None:  # else every peer point fails, at the run's end
        raise RuntimeError("--peer needs the `linformer` package (PyPI): pip install linformer --no-deps")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"--device {cfg.device}, but this torch ({torch.__version__}) sees no CUDA device; run on a CUDA machine, "
            "or on CPU with --device cpu --dtype fp32 --no_autocast (and a CPU preset: quick, default, peers)"
        )


def remove_earlier_run(out_dir: str) -> None:
    """Delete an earlier run's own files (`RUN_FILES`; a partial CSV of it would read as this run's), and nothing
    else of the folder."""
    for name in os.listdir(out_dir):
        if name in RUN_FILES:
            os.remove(os.path.join(out_dir, name))


def lock_output_dir(out_dir: str) -> int:
    """An flock on the output folder itself, held while the run lasts: a second benchmark into it, started before
    the first wrote anything (both found it empty), is refused rather than left to overwrite the first's results."""
    import fcntl

    handle = os.open(out_dir, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        raise RuntimeError(
            f"another benchmark is writing to {out_dir}: wait for it to end, or give another --output_dir"
        ) from None
    return handle


def remove_if_unused(out_dir: str, made: bool) -> None:
    """Remove the output folder where this run made it and wrote nothing there (a run that failed at its start)."""
    if made and os.path.isdir(out_dir) and not os.listdir(out_dir):
        os.rmdir(out_dir)


def nothing_measured(rows: list[BenchmarkRow], info: RunInfo) -> str | None:
    """Why a run measured nothing (no point ok, no peer timed), or None where it measured something: such a run must
    not read as a success to a script."""
    if any(row.status == Status.OK for row in rows) or any(peer.error is None for peer in info.peer):
        return None
    failed = sum(row.status == Status.FAILED for row in rows) + len(info.peer)
    skipped = sum(row.status == Status.SKIPPED for row in rows)
    if failed and not skipped:
        return "every point failed"
    return f"nothing was measured ({failed} point(s) failed, {skipped} skipped)"


def check_not_stopped(out_dir: str) -> None:
    """The folder of a run that did not finish (stopped, or still running), given without --resume or --overwrite:
    refused naming both."""
    if os.path.isfile(os.path.join(out_dir, PARTIAL_JSON)):
        raise FileExistsError(
            f"{out_dir} holds a run that did not finish ({PARTIAL_CSV}: the points it measured): if it was stopped, "
            "the same command with --resume measures the rest; with --overwrite, all again; or give another "
            "--output_dir."
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command_line, cfg = parse_args(argv)
    out_dir = command_line.output_dir
    made = not os.path.exists(out_dir)  # check_output_dir makes it
    try:  # before any work: an earlier run's results are never overwritten silently
        check_device(cfg)
        if not command_line.resume and not command_line.overwrite:
            check_not_stopped(out_dir)
        # --resume: a folder of the run's own files (checked once locked), or a new one
        check_output_dir(out_dir, command_line.overwrite or command_line.resume)
        lock = lock_output_dir(out_dir)
    except (OSError, RuntimeError) as err:
        return report(err)
    try:
        found = None
        if command_line.resume:
            try:
                found = read_checkpoint(out_dir, cfg, cpu_details())
            except (OSError, RuntimeError) as err:
                remove_if_unused(out_dir, made)
                return report(err)
            if found == COMPLETE:
                print(f"{out_dir} holds the whole run (results.csv, run_info.json): complete, nothing to measure.")
                return 0
            if found is None:
                print(f"nothing to resume in {out_dir}: the run starts.", flush=True)
        with sigterm_unwinds():  # SIGTERM (kill, timeout, a job scheduler) stops the run as Ctrl-C does
            return _measure(command_line, cfg, argv, made, found)
    finally:
        os.close(lock)  # the run is over (main called again in this process finds the folder free)


def _measure(command_line: CommandLine, cfg: BenchmarkConfig, argv: list[str], made: bool, found=None) -> int:
    """The run into its checked and locked output folder (`made`: by this run; `found`: what `read_checkpoint` found
    of the stopped run it resumes): the exit status."""
    out_dir = command_line.output_dir
    if command_line.overwrite:
        remove_earlier_run(out_dir)
    command = "python -m benchmarks " + " ".join(shlex.quote(a) for a in argv)
    cpu = cpu_details()  # family, model and instruction sets: what the record's CPU was, where its name is vague
    machine_before = machine_description(cfg, cpu)
    print(f"machine: {machine_before}", flush=True)
    for where in cfg.unmeasured_ks():  # a Linformer's k is at most n
        print(f"not measured: {where}", flush=True)
    # The rows so far and the run's record, saved after each length, should the run be stopped (--resume reads them)
    checkpoint = Checkpoint(out_dir, cfg, command, machine_before, cpu, found)
    try:
        rows, info = run_benchmark(
            cfg,
            log=lambda message: print(message, flush=True),
            on_measured=checkpoint.save_rows,
            peak_info=checkpoint.reusable_peak(),
            earlier=checkpoint.earlier,
            on_peer=checkpoint.save_peer,
            on_peak=checkpoint.peak,
        )
    except KeyboardInterrupt:  # one line, not the traceback of wherever the run was
        kept = checkpoint.saved()
        remove_if_unused(out_dir, made)
        if kept is None:
            print(
                "stopped (Ctrl-C or SIGTERM): no point was measured; the same command runs it again.", file=sys.stderr
            )
        else:
            again = "the same command" if command_line.resume else "the same command with --resume"
            again += " in place of --overwrite" if command_line.overwrite else ""
            print(f"stopped (Ctrl-C or SIGTERM): {kept}; {again} measures the rest.", file=sys.stderr)
        return 130
    except RuntimeError as err:  # the run itself failed (measuring the matmul peak, WorkerFailed): one line
        remove_if_unused(out_dir, made)
        return report(err)
    command, machine, sittings = checkpoint.finish(rows, info, load_average())
    write_csv(rows, os.path.join(out_dir, "results.csv"))
    write_text_atomic(os.path.join(out_dir, "results.md"), report_markdown(rows, info, cfg, command, machine))
    write_json_atomic(
        os.path.join(out_dir, "run_info.json"),
        {"command": command, "machine": machine, "cpu": cpu, "config": asdict(cfg),
         "not_measured": cfg.unmeasured_ks(), **asdict(info), "sittings": sittings},
    )  # fmt: skip
    for path in plot(rows, cfg, out_dir):
        print(f"wrote {path}")
    checkpoint.remove()  # last: the whole run is in results.csv, results.md and run_info.json
    print(f"wrote {out_dir}/results.csv, results.md, run_info.json")
    problem = nothing_measured(rows, info)
    if problem is not None:
        print(f"error: {problem} (the reasons: {out_dir}/results.md)", file=sys.stderr)
        return 1
    return 0
