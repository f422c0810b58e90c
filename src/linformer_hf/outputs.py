"""Where a command writes its results: an earlier run's results are never replaced silently, and a result file is
either whole or absent (a kill mid-write leaves no truncated file under the final name).

The wording and the flag are those of export_onnx and push_to_hub: a non-empty output folder, or an existing output
file, is refused before any work unless `--overwrite`. An overwrite that replaces a folder whole replaces only a folder
of the command's own kind (`FolderKind`, `check_replaceable`): never a folder of other things given by mistake.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable


def held(output_dir: str) -> str:
    """What a folder holds, for an error message: the first few names."""
    names = sorted(os.listdir(output_dir))
    return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")


def replace_hint(flag: str | None, what: str) -> str:
    """The end of a refusal: how to replace `what`, where the command has a flag for it."""
    return f", or pass {flag} to replace {what}." if flag else "."


def check_output_dir(output_dir: str, overwrite: bool, flag: str | None = "--overwrite", create: bool = True) -> None:
    """Before any work: `output_dir` is a folder (or can be one) that holds no earlier results unless `overwrite`
    (`flag` on the command line; None where the command has no such flag). With `create`, makes it and checks it can
    be written."""
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise NotADirectoryError(f"{output_dir} is a file, not a folder: give a folder for the results.")
    # A folder to be made under a file fails only when first written (`create=False`: after the work).
    ancestor = os.path.dirname(os.path.abspath(output_dir))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise NotADirectoryError(
            f"{ancestor} is a file, not a folder: {output_dir} cannot be made inside it. Give a folder for the results."
        )
    if os.path.isdir(output_dir) and os.listdir(output_dir) and not overwrite:
        raise FileExistsError(
            f"{output_dir} is not empty (it holds {held(output_dir)}): an earlier run's results are never "
            f"overwritten silently. Give another output directory{replace_hint(flag, 'them')}"
        )
    if not create:
        return
    os.makedirs(output_dir, exist_ok=True)
    if not os.access(output_dir, os.W_OK):
        raise PermissionError(f"{output_dir} cannot be written by this user: give another output directory.")


def check_output_file(path: str, overwrite: bool, flag: str | None = "--overwrite") -> None:
    """Before any work: `path` names a file (not a folder) in a folder that can be written, and no earlier result
    unless `overwrite`. Creates the folder."""
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder: give the name of the file to write, e.g. {path}/result.json.")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(
            f"{path} exists (an earlier run's result): it is never overwritten silently. Give another file name"
            f"{replace_hint(flag, 'it')}"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.exists(parent) and not os.path.isdir(parent):
        raise NotADirectoryError(f"{parent} is a file, not a folder: {path} cannot be written there.")
    os.makedirs(parent, exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise PermissionError(f"{parent} cannot be written by this user: give another place for {path}.")


def fsync_path(path: str) -> None:
    """Flush a file or a folder (its entries: a rename into it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: a reader sees the old file or the whole new one,
    never a torn one, also after a power cut (the file and then its folder are flushed)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_path(os.path.dirname(os.path.abspath(path)))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def finite_or_null(data, flag: bool = True):
    """``data`` with every non-finite float (NaN, inf) as None: what strict JSON can hold (``json.dumps`` writes
    ``NaN``, which JSON readers other than Python's refuse). With ``flag``, a top-level dict that had one gets
    ``"nonfinite"``: the keys whose values were non-finite (nested dicts, e.g. losses by step, keep their keys)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        out = {key: finite_or_null(value, flag=False) for key, value in data.items()}
        flagged = [key for key, value in data.items() if isinstance(value, float) and not math.isfinite(value)]
        if flag and flagged:
            out["nonfinite"] = flagged
        return out
    if isinstance(data, (list, tuple)):
        return [finite_or_null(value, flag=False) for value in data]
    return data


def write_json_atomic(path: str, data) -> None:
    write_text_atomic(path, json.dumps(finite_or_null(data), indent=2, allow_nan=False))


def staging_folder(output_dir: str) -> str:
    """Where a folder is written before `publish_folder` moves it to `output_dir`: beside it (the same filesystem, so
    the move is a rename), under a hidden temporary name."""
    output_dir = os.path.abspath(output_dir)
    return os.path.join(os.path.dirname(output_dir), f".tmp-{os.path.basename(output_dir)}")


def unique_staging_folder(output_dir: str) -> str:
    """A new folder beside `output_dir` (the same filesystem, so the move is a rename) under a hidden temporary name of
    its own: two runs writing the same `output_dir` at once never write into, or delete, each other's. Made with the
    permissions a folder gets from the umask (mkdtemp's are the owner's only)."""
    output_dir = os.path.abspath(output_dir)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".tmp-{os.path.basename(output_dir)}-", dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)
    return staging


def publish_new_folder(staging: str, output_dir: str, flag: str | None = "--overwrite") -> None:
    """Move the whole folder `staging` to `output_dir`, which does not exist or is empty, in one rename; refused when
    another run filled `output_dir` meanwhile (a rename onto a non-empty folder fails), so neither result replaces the
    other silently."""
    try:
        os.rename(staging, output_dir)
    except OSError as err:
        if err.errno not in (errno.ENOTEMPTY, errno.EEXIST) or not os.path.isdir(output_dir):
            raise
        raise FileExistsError(
            f"{output_dir} was filled by another run while this one worked (it holds {held(output_dir)}): its results "
            f"are kept. Give another output directory{replace_hint(flag, 'them')}"
        ) from None


@dataclasses.dataclass(frozen=True)
class FolderKind:
    """The folder a command writes as its output, as an overwrite that replaces it whole tells it from a folder of
    other things (a home or data folder, a training run with its checkpoints) given by mistake."""

    what: str  # how messages name it: "a model folder written by push_to_hub"
    required: tuple[str, ...]  # the files every such folder holds
    holds: Callable[[str, str], bool]  # (folder, name): whether such a folder may hold the entry `name`
    mismatch: Callable[[str], str | None] = lambda folder: None  # what else tells the folder apart, in words


def check_replaceable(output_dir: str, kind: FolderKind, flag: str | None = "--overwrite") -> None:
    """Before an overwrite that deletes `output_dir` whole: refuse it unless it is empty or an earlier output of `kind`
    (every file `kind.required` there, nothing `kind.holds` does not allow, no `kind.mismatch`), naming what it holds
    instead and the ways out. Run before any work, and again by `replace_folder` just before the deletion."""
    if not os.path.isdir(output_dir) or not os.listdir(output_dir):
        return
    names = sorted(os.listdir(output_dir))
    foreign = [name for name in names if not kind.holds(output_dir, name)]
    missing = [name for name in kind.required if not os.path.isfile(os.path.join(output_dir, name))]
    if foreign:
        found = (
            f"it holds {', '.join(foreign[:6])}{', ...' if len(foreign) > 6 else ''}, which such a folder never holds"
        )
    elif missing:
        found = f"it has no {', '.join(missing)}, which every such folder holds"
    else:
        found = kind.mismatch(output_dir)
        if not found:
            return
    option = f"{flag} replaces" if flag else "an overwrite replaces"
    raise FileExistsError(
        f"{output_dir} is not {kind.what} ({found}): {option} only such a folder, whole, and never deletes a folder "
        f"of other things. Give another output directory, or delete {output_dir} yourself if nothing in it is needed."
    )


def replace_folder(staging: str, output_dir: str, kind: FolderKind, flag: str | None = "--overwrite") -> None:
    """Move the whole folder `staging` to `output_dir`, replacing the whole folder there (an overwritten model: no
    file of the earlier one may outlive it, such as a tokenizer of another length beside the new weights, or another
    family's modeling code) once `check_replaceable` finds it an earlier output of `kind`. The earlier folder is moved
    aside first (back again if the new one cannot be moved in) and deleted once the new one is in place."""
    if not os.path.isdir(output_dir):
        os.replace(staging, output_dir)
        return
    check_replaceable(output_dir, kind, flag)  # again: the folder may have changed while the run worked
    earlier = f"{staging}-replaced"
    shutil.rmtree(earlier, ignore_errors=True)
    os.replace(output_dir, earlier)
    try:
        os.replace(staging, output_dir)
    except BaseException:
        os.replace(earlier, output_dir)
        raise
    shutil.rmtree(earlier)


def publish_folder(staging: str, output_dir: str) -> None:
    """Move the whole folder `staging` to `output_dir`: one rename when `output_dir` does not exist; otherwise (an
    overwrite) each entry replaces the one of the same name, and other files there are kept."""
    if not os.path.isdir(output_dir):
        os.replace(staging, output_dir)
        return
    for name in os.listdir(staging):
        target = os.path.join(output_dir, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        os.replace(os.path.join(staging, name), target)
    os.rmdir(staging)


@contextlib.contextmanager
def sigterm_unwinds():
    """SIGTERM (`kill`, a job scheduler's stop) unwinds as Ctrl-C does (KeyboardInterrupt) while a command writes: its
    staging folder beside the output is removed on the way out, not left behind (SIGKILL cannot be caught). Only the
    main thread can set a handler; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
