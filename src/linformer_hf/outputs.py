"""Where a command writes its results: an earlier run's results are never replaced silently, and a result file is
either whole or absent (a kill mid-write leaves no truncated file under the final name).

The wording and the flag are those of export_onnx and push_to_hub: a non-empty output folder, or an existing output
file, is refused before any work unless `--overwrite`. An overwrite that replaces a folder whole replaces only a folder
of the command's own kind (`FolderKind`, `check_replaceable`): never a folder of other things given by mistake.

A folder is written beside its output under a hidden name (`unique_staging_folder`) with a record of its writer beside
it; a run killed mid-write (SIGKILL, a power cut) leaves it, and the next run on the same output removes it once its
writer is known to be dead (`clear_staging_debris`).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import errno
import io
import json
import logging
import math
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

logger = logging.getLogger(__name__)


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
    if not create:  # the folder is made (or staged beside it) after the work: where it goes must be writable now
        if not os.access(ancestor, os.W_OK):
            raise PermissionError(f"{ancestor} cannot be written by this user: give another output directory.")
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


# `write_text_atomic`'s temporary file beside `<file>`: `<file>.tmp-<pid>-<8 hex digits>@<host>`, one per write (two
# threads of one process writing the same file at once each have their own). Read too, as earlier versions wrote them:
# `<file>.tmp-<pid>@<host>`, and `<file>.tmp-<pid>` (read as this host's).
TMP_FILE_SUFFIX = re.compile(r"\.tmp-(?P<pid>[1-9][0-9]{0,8})(?:-[0-9a-f]{8})?(?:@(?P<host>[A-Za-z0-9._-]+))?")


def _host_tag() -> str:
    """This host as a temporary file's name carries it (only the characters a host name may hold, cut short)."""
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:40]


def clear_tmp_file_debris(path: str) -> list[str]:
    """Remove the temporary files that `write_text_atomic`s of `path` killed mid-write (SIGKILL, a power cut) left
    beside it, where their writer is known dead on this host (`writer_state`): a live writer's (a concurrent write of
    the same file) and another host's are kept. Returns the paths removed."""
    folder, base = os.path.split(os.path.abspath(path))
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    removed = []
    for name in names:
        match = TMP_FILE_SUFFIX.fullmatch(name[len(base) :]) if name.startswith(base) else None
        if match is None or (match["host"] or _host_tag()) != _host_tag():
            continue
        debris = os.path.join(folder, name)
        if os.path.isdir(debris) or writer_state({"pid": int(match["pid"]), "host": socket.gethostname()})[0] != "dead":
            continue
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove: the write goes on
            os.remove(debris)
            removed.append(debris)
    return removed


def write_text_atomic(path: str, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: a reader sees the old file or the whole new one,
    never a torn one, also after a power cut (the file and then its folder are flushed). What writers of `path` killed
    mid-write left beside it is removed first (`clear_tmp_file_debris`). Concurrent writes of `path` (other processes,
    or threads of this one) each write a temporary file of their own: the file ends as one of their texts, whole."""
    clear_tmp_file_debris(path)
    tmp = None
    try:
        while tmp is None:  # a name of this write's own, made exclusively: another write's is never opened
            candidate = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}@{_host_tag()}"
            with contextlib.suppress(FileExistsError):
                handle = open(candidate, "x", encoding="utf-8", newline="")
                tmp = candidate
        with handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_path(os.path.dirname(os.path.abspath(path)))
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)


def write_csv_atomic(path: str, columns: Sequence[str], rows: Iterable[Mapping | Sequence]) -> None:
    """A CSV of a header row `columns` and `rows` (dicts by column name, a missing one empty and one not in `columns`
    an error; or sequences in column order) through `write_text_atomic`: the file is whole or absent, and a failure
    or stop while the rows are made (a generator) leaves `path` as it was."""
    text = io.StringIO(newline="")
    writer, by_name = csv.writer(text), csv.DictWriter(text, fieldnames=list(columns))
    writer.writerow(columns)
    for row in rows:
        (by_name if isinstance(row, Mapping) else writer).writerow(row)
    write_text_atomic(path, text.getvalue())


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


STAGING_PREFIX = ".tmp-"
# Beside each staging folder `.tmp-<name>-XXXXXXXX`: `.tmp-<name>-XXXXXXXX.writer`, the JSON record of the process
# writing it (pid, host, boot, pid namespace, start time), which tells a later run whether that writer still lives.
WRITER_SUFFIX = ".writer"
# What `replace_folder` moves the earlier output to while the new one is moved in.
REPLACED_SUFFIX = "-replaced"


def unique_staging_folder(output_dir: str) -> str:
    """A new folder beside `output_dir` (the same filesystem, so the move is a rename) under a hidden temporary name of
    its own: two runs writing the same `output_dir` at once never write into, or delete, each other's. Made with the
    permissions a folder gets from the umask. Its writer is recorded beside it (`WRITER_SUFFIX`), and what killed
    runs left beside `output_dir` is cleared first (`clear_staging_debris`). Remove it with `discard_staging`."""
    output_dir = os.path.abspath(output_dir)
    parent = os.path.dirname(output_dir)
    os.makedirs(parent, exist_ok=True)
    clear_staging_debris(output_dir)
    record = json.dumps(dict(_this_process(), output=output_dir, started=time.strftime("%Y-%m-%dT%H:%M:%S%z")))
    while True:
        # The record first, made exclusively: a kill before the folder exists leaves only a record, never a folder
        # of unknown writer.
        prefix = f"{STAGING_PREFIX}{os.path.basename(output_dir)}-"
        fd, record_path = tempfile.mkstemp(prefix=prefix, suffix=WRITER_SUFFIX, dir=parent)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(record)
            handle.flush()
            os.fsync(handle.fileno())  # read after a power cut: the next run then knows the writer is gone
        staging = record_path.removesuffix(WRITER_SUFFIX)
        try:
            os.mkdir(staging)  # the umask's permissions (mkdtemp's are the owner's only)
            return staging
        except FileExistsError:  # a folder of that name without this record (an older version's): another name
            os.remove(record_path)


def discard_staging(staging: str) -> None:
    """Remove a staging folder (what a failed or stopped run wrote; nothing once it was published) and its record."""
    shutil.rmtree(staging, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(staging + WRITER_SUFFIX)


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _process_stat(pid: int) -> tuple[str, str] | None:
    """A process's state letter and start time (clock ticks after boot), from /proc; None where there is none."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _this_process() -> dict:
    stat = _process_stat(os.getpid())
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "boot_id": _boot_id(),
        "pid_namespace": _pid_namespace(),
        "start_ticks": stat[1] if stat else None,
        "command": " ".join(sys.argv)[:500],
    }


def writer_state(record: dict) -> tuple[str, str]:
    """Whether the process a staging record names still runs: ("alive" | "dead" | "unknown", who, in words).

    Dead only where this machine can tell: the same host name, and either another boot of it (a power cut), or the
    same pid namespace with no such process (or a zombie, or another process that took its pid since). Another host,
    container or anything unreadable is "unknown"; a process that exists, another user's included, is "alive"."""
    pid, host = record.get("pid"), record.get("host")
    who = f"pid {pid} on {host}" + (f", started {record['started']}" if record.get("started") else "")
    if not isinstance(pid, int) or pid <= 0 or not host:
        return "unknown", "an unreadable record of its writer"
    if host != socket.gethostname():
        return "unknown", f"{who}: another host, whose processes this one cannot see"
    boot = _boot_id()
    if record.get("boot_id") and boot and record["boot_id"] != boot:
        return "dead", f"{who}: before this machine restarted"
    namespace = _pid_namespace()
    if record.get("pid_namespace") and namespace and record["pid_namespace"] != namespace:
        return "unknown", f"{who}: another container (pid namespace) on this host"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead", f"{who}: no longer running"
    except PermissionError:
        pass  # another user's process: it exists
    except OSError:
        return "unknown", f"{who}: its state cannot be read"
    stat = _process_stat(pid)
    if stat and stat[0] in ("Z", "X"):
        return "dead", f"{who}: exited"
    if stat and record.get("start_ticks") and stat[1] != record["start_ticks"]:
        return "dead", f"{who}: exited (the pid is another process's now)"
    return "alive", f"{who}: running"


def folder_size(path: str) -> int:
    """The bytes of the files under `path` (links as links)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def size_text(size: float) -> str:
    """A size in bytes as a log line gives it: "812 bytes", "4.2 MB", "1.3 GB"."""
    if size < 1000:
        return f"{int(size)} bytes"
    for unit in ("kB", "MB", "GB"):
        size /= 1000
        if size < 1000 or unit == "GB":
            break
    return f"{size:.1f} {unit}"


def clear_staging_debris(output_dir: str) -> list[str]:
    """Remove what runs killed while writing `output_dir` (SIGKILL, a power cut: nothing of theirs ran on the way out)
    left beside it: their staging folders (possibly a whole model each) and records. Only a writer known to be dead
    (`writer_state`) loses its folder, with one log line each naming its size; one still running (a concurrent run)
    keeps it untouched; a folder whose writer is unknown (another host or container, no record: an older version's)
    is kept and named in a warning. An earlier output a killed replacement had moved aside (`REPLACED_SUFFIX`) is
    kept, with a warning, while `output_dir` is absent: it may be the only copy. Returns the paths removed."""
    output_dir = os.path.abspath(output_dir)
    parent = os.path.dirname(output_dir)
    pattern = re.compile(
        re.escape(STAGING_PREFIX + os.path.basename(output_dir))
        + rf"-(?P<key>[a-z0-9_]{{8}})(?P<kind>{re.escape(REPLACED_SUFFIX)}|{re.escape(WRITER_SUFFIX)})?"
    )
    groups: dict[str, dict[str, str]] = {}
    for name in os.listdir(parent) if os.path.isdir(parent) else []:
        match = pattern.fullmatch(name)
        if match:
            groups.setdefault(match["key"], {})[match["kind"] or ""] = os.path.join(parent, name)
    removed = []
    for _, group in sorted(groups.items()):
        folders = [
            group[kind]
            for kind in ("", REPLACED_SUFFIX)
            if kind in group and os.path.isdir(group[kind]) and not os.path.islink(group[kind])
        ]
        record = None
        if WRITER_SUFFIX in group:
            with contextlib.suppress(OSError, ValueError):
                with open(group[WRITER_SUFFIX], encoding="utf-8") as handle:
                    record = json.load(handle)
        state, who = writer_state(record) if isinstance(record, dict) else ("unknown", "no record of its writer")
        if state == "alive":
            continue  # a run writing it now
        if state == "unknown":
            for folder in folders:
                logger.warning(
                    "left %s (%s), a staging folder beside %s whose writer cannot be told dead (%s). Delete it "
                    "yourself once no run writes it.",
                    folder,
                    size_text(folder_size(folder)),
                    output_dir,
                    who,
                )
            continue
        keep_record = False
        for folder in folders:
            if folder.endswith(REPLACED_SUFFIX) and not os.path.exists(output_dir):
                logger.warning(
                    "left %s (%s): the earlier %s, moved aside by a replacement that was killed (%s) before the new "
                    "folder was in place. Move it back to %s, or delete it.",
                    folder,
                    size_text(folder_size(folder)),
                    output_dir,
                    who,
                    output_dir,
                )
                keep_record = True
                continue
            size = folder_size(folder)
            shutil.rmtree(folder, ignore_errors=True)
            logger.warning(
                "removed %s (%s), left beside %s by a killed run (%s).", folder, size_text(size), output_dir, who
            )
            removed.append(folder)
        if WRITER_SUFFIX in group and not keep_record:
            with contextlib.suppress(FileNotFoundError):
                os.remove(group[WRITER_SUFFIX])
    return removed


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
    earlier = staging + REPLACED_SUFFIX  # its writer is staging's (`clear_staging_debris`)
    shutil.rmtree(earlier, ignore_errors=True)
    os.replace(output_dir, earlier)
    try:
        os.replace(staging, output_dir)
    except BaseException:
        os.replace(earlier, output_dir)
        raise
    shutil.rmtree(earlier)


@contextlib.contextmanager
def staged_output(output_dir: str, kind: FolderKind, overwrite: bool, flag: str | None = "--overwrite"):
    """Write a command's output folder whole, or not at all: yields a staging folder of this run's own beside
    `output_dir` (`unique_staging_folder`; beside a link's folder, not the link) to write in, and once the block ends
    moves it into place. With `overwrite`, an earlier output of `kind` there is replaced whole (`replace_folder`);
    without, it goes only where `output_dir` is absent or empty (`publish_new_folder`): a run that another run into
    the same new folder ended before (both found it empty) is refused, never put in place of the other's. Whether to
    replace is `overwrite`'s alone, never what `output_dir` happens to hold when the run ends. A failure or a stop in
    the block leaves `output_dir` as it was, and the staging folder is removed either way."""
    target = os.path.realpath(output_dir)  # a link's folder: a rename onto the link would replace the link
    staging = unique_staging_folder(target)
    try:
        yield staging
        if overwrite and os.path.isdir(target) and os.listdir(target):
            replace_folder(staging, target, kind, flag)
        else:
            publish_new_folder(staging, target, flag)
    finally:
        discard_staging(staging)  # left only by a failure or a stop


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
