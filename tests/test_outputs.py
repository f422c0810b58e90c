"""linformer_hf.outputs: what a run killed mid-write leaves beside its output is cleared by the next run on that output,
and only where its writer is known to be dead; an overwrite replaces only a folder of the command's own kind."""

import glob
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

import linformer_hf.outputs as outputs
from linformer_hf.outputs import unique_staging_folder

# The writers below load outputs.py alone (it needs only the standard library): started in a tenth of a second, not
# after the package's torch import.
WRITER = r"""
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("outputs", sys.argv[1])
outputs = sys.modules["outputs"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(outputs)
staging = outputs.unique_staging_folder(sys.argv[2])
with open(os.path.join(staging, "model.safetensors"), "wb") as handle:
    handle.write(b"x" * 2500)
if sys.argv[3] == "replacing":  # killed inside replace_folder: the earlier output moved aside, the new one not in
    os.replace(sys.argv[2], staging + "-replaced")
print(staging, flush=True)
time.sleep(300)
"""


def start_writer(output_dir, mode="writing"):
    """A process writing `output_dir`'s staging folder (a model file of 2.5 kB in it), and that folder."""
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, outputs.__file__, str(output_dir), mode], stdout=subprocess.PIPE, text=True
    )
    staging = process.stdout.readline().strip()
    assert staging, "the writer failed before its staging folder was made"
    return process, staging


def kill(process):
    process.send_signal(signal.SIGKILL)  # nothing of it runs on the way out
    process.wait()
    process.stdout.close()


def test_the_next_run_removes_a_killed_runs_staging_folder_and_keeps_a_live_ones(tmp_path, caplog):
    """A SIGKILL (or power cut) mid-write left `.tmp-<name>-XXXXXXXX` beside the output (a whole model copy, GBs),
    never removed. Now the next run on that output removes it once its writer is dead on this host, saying so with its
    size; a concurrent run's folder is never touched, and one whose writer it cannot tell is kept and named."""
    out = tmp_path / "out"
    killed, killed_staging = start_writer(out)
    live, live_staging = start_writer(out)
    try:
        kill(killed)
        assert os.path.isdir(killed_staging) and os.path.isdir(live_staging)
        unknown = tmp_path / ".tmp-out-abcd1234"  # no record of its writer (an older version's)
        unknown.mkdir()
        elsewhere = tmp_path / ".tmp-out-efgh5678"  # written on another machine sharing the folder
        elsewhere.mkdir()
        (tmp_path / ".tmp-out-efgh5678.writer").write_text(json.dumps({"pid": killed.pid, "host": "elsewhere"}))
        neighbour, _ = start_writer(tmp_path / "out-small")  # another output's: its name starts the same
        kill(neighbour)

        with caplog.at_level(logging.WARNING, logger="linformer_hf.outputs"):
            mine = unique_staging_folder(str(out))
        assert not os.path.exists(killed_staging) and not os.path.exists(killed_staging + outputs.WRITER_SUFFIX)
        removed = [record.getMessage() for record in caplog.records if record.getMessage().startswith("removed")]
        assert len(removed) == 1 and removed[0].startswith(f"removed {killed_staging} (2.5 kB), left beside {out}")
        assert f"pid {killed.pid} on {socket.gethostname()}" in removed[0]
        assert os.path.isdir(live_staging) and os.path.isfile(live_staging + outputs.WRITER_SUFFIX)
        assert os.path.isdir(unknown) and os.path.isdir(elsewhere)
        messages = caplog.text
        assert f"left {unknown} (0 bytes)" in messages and "no record of its writer" in messages
        assert f"left {elsewhere}" in messages and "on elsewhere" in messages and "another host" in messages
        assert live_staging not in messages
        assert len([name for name in os.listdir(tmp_path) if name.startswith(".tmp-out-small-")]) == 2  # not out's

        outputs.discard_staging(mine)
        assert not os.path.exists(mine) and not os.path.exists(mine + outputs.WRITER_SUFFIX)
    finally:
        kill(live)
    unique_staging_folder(str(out))  # now dead: removed too
    assert not os.path.exists(live_staging)


def test_a_killed_replacement_keeps_the_earlier_output_until_a_new_one_is_in_place(tmp_path, caplog):
    """Killed between moving the earlier output aside and moving the new one in, a replacement leaves the output
    absent and its only copy at `<staging>-replaced`: kept, and named with the way back, until an output is there
    again."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_text("{}")
    writer, staging = start_writer(out, "replacing")
    kill(writer)
    aside = staging + "-replaced"  # where replace_folder moves the earlier output
    assert not out.exists() and os.path.isfile(os.path.join(aside, "config.json"))
    with caplog.at_level(logging.WARNING, logger="linformer_hf.outputs"):
        mine = unique_staging_folder(str(out))
    assert not os.path.exists(staging) and os.path.isfile(os.path.join(aside, "config.json"))
    assert f"left {aside}" in caplog.text and f"Move it back to {out}" in caplog.text
    os.rename(mine, out)  # the new output in place: the earlier one is debris now
    outputs.discard_staging(mine)
    unique_staging_folder(str(out))
    assert not os.path.exists(aside) and not os.path.exists(staging + outputs.WRITER_SUFFIX)


def test_writer_state_says_dead_only_where_this_machine_can_tell(tmp_path):
    here = outputs._this_process()
    assert outputs.writer_state(here)[0] == "alive"
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert outputs.writer_state(dict(here, pid=int(done.stdout)))[0] == "dead"
    if here["start_ticks"]:  # Linux: a pid another process took since is not the writer
        assert outputs.writer_state(dict(here, start_ticks="1"))[0] == "dead"
    if here["boot_id"]:  # written before this machine restarted (a power cut)
        assert outputs.writer_state(dict(here, boot_id="another boot"))[0] == "dead"
    if here["pid_namespace"]:
        assert outputs.writer_state(dict(here, pid_namespace="pid:[1]"))[0] == "unknown"
    assert outputs.writer_state(dict(here, host="elsewhere"))[0] == "unknown"
    assert outputs.writer_state({"pid": "x"})[0] == "unknown"


def test_replace_folder_replaces_only_its_own_kind_and_restores_the_earlier_on_failure(tmp_path):
    """replace_folder deleted whatever the output folder held; and a new folder that could not be moved in left the
    earlier one moved aside, the output gone."""
    from linformer_hf.outputs import FolderKind, check_replaceable, replace_folder

    model = FolderKind(
        what="a model folder",
        required=("config.json",),
        holds=lambda folder, name: name in ("config.json", "model.safetensors"),
    )
    earlier, staging = tmp_path / "out", tmp_path / "new"
    earlier.mkdir()
    (earlier / "config.json").write_text("earlier")
    (earlier / "checkpoint-10").mkdir()
    staging.mkdir()
    (staging / "config.json").write_text("new")
    with pytest.raises(FileExistsError, match=r"out is not a model folder \(it holds checkpoint-10, which such"):
        replace_folder(str(staging), str(earlier), model)
    assert (earlier / "checkpoint-10").is_dir()
    os.rmdir(earlier / "checkpoint-10")
    with pytest.raises(FileNotFoundError):  # the new folder cannot be moved in: the earlier one is put back
        replace_folder(str(tmp_path / "missing"), str(earlier), model)
    assert (earlier / "config.json").read_text() == "earlier"
    replace_folder(str(staging), str(earlier), model)
    assert (earlier / "config.json").read_text() == "new" and sorted(os.listdir(tmp_path)) == ["out"]
    os.remove(earlier / "config.json")
    (earlier / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="it holds notes.txt.*delete .* yourself"):
        check_replaceable(str(earlier), model)
    os.remove(earlier / "notes.txt")
    (earlier / "model.safetensors").write_text("")
    with pytest.raises(FileExistsError, match="it has no config.json, which every such folder holds"):
        check_replaceable(str(earlier), model)


# A process killed by SIGKILL inside write_text_atomic, after its temporary file was written and before the rename.
ATOMIC_WRITER = r"""
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("outputs", sys.argv[1])
outputs = sys.modules["outputs"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(outputs)

def held(fd):  # the temporary file is whole on disk: stopped before its rename
    print("written", flush=True)
    time.sleep(300)

outputs.os.fsync = held
outputs.write_text_atomic(sys.argv[2], "a killed writer's")
"""


def start_atomic_writer(path):
    process = subprocess.Popen(
        [sys.executable, "-c", ATOMIC_WRITER, outputs.__file__, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline().strip() == "written", "the writer failed before its temporary file was written"
    return process


def test_the_next_write_removes_a_killed_writers_temporary_file_and_keeps_a_live_ones(tmp_path):
    """A SIGKILL inside write_text_atomic left `<file>.tmp-<pid>` beside the file for good. The next write to the same
    path removes such a file once its writer is dead on this host; a live writer's (another process writing the same
    file now) and another host's are kept, as are other files' and a user's own."""
    path = tmp_path / "results.csv"
    path.write_text("earlier")
    killed, live = start_atomic_writer(path), start_atomic_writer(path)
    try:
        kill(killed)
        (debris,) = glob.glob(f"{path}.tmp-{killed.pid}*")
        (writing,) = glob.glob(f"{path}.tmp-{live.pid}*")
        older = tmp_path / f"results.csv.tmp-{killed.pid}"  # as versions before the host was in the name wrote it
        previous = tmp_path / f"results.csv.tmp-{killed.pid}@{outputs._host_tag()}"  # before each write had its own
        previous.write_text("")
        elsewhere = tmp_path / f"results.csv.tmp-{killed.pid}@elsewhere"  # another host sharing the folder
        other_file = tmp_path / f"results.md.tmp-{killed.pid}"  # another file's: its own next write clears it
        mine = tmp_path / "results.csv.tmp-notes"  # not a writer's name
        for kept in (older, elsewhere, other_file, mine):
            kept.write_text("")
        outputs.write_text_atomic(str(path), "new")
        assert path.read_text() == "new"
        assert not os.path.exists(debris) and not older.exists() and not previous.exists()
        assert os.path.exists(writing) and elsewhere.exists() and other_file.exists() and mine.exists()
    finally:
        kill(live)
    outputs.write_text_atomic(str(path), "again")  # its writer is dead now
    assert not os.path.exists(writing)
    assert sorted(os.listdir(tmp_path)) == sorted(["results.csv", elsewhere.name, other_file.name, mine.name])


def test_two_threads_writing_one_file_at_once_leave_one_whole_text(tmp_path, monkeypatch):
    """write_text_atomic's temporary name was `<file>.tmp-<pid>@<host>`: two threads of one process writing the same
    file at once wrote into one temporary file (a mix of both texts), and the second rename found it gone
    (FileNotFoundError). Each write has a temporary file of its own now: held until both have written theirs, both
    writes succeed, the file is one of the two texts whole, and no temporary file is left."""
    path = tmp_path / "results.csv"
    texts = ["a" * 100_000 + "\n", "b" * 50_000 + "\n"]
    both_written = threading.Barrier(2, timeout=20)
    waited, fsync = set(), os.fsync

    def held_until_both_have_written(fd):  # each thread's first flush: its temporary file, before the rename
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            both_written.wait()
        fsync(fd)

    monkeypatch.setattr(outputs.os, "fsync", held_until_both_have_written)
    errors = []

    def write(text):
        try:
            outputs.write_text_atomic(str(path), text)
        except BaseException as err:  # noqa: BLE001  (reported below, in the test's thread)
            errors.append(err)

    threads = [threading.Thread(target=write, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert path.read_text() in texts
    assert os.listdir(tmp_path) == ["results.csv"]


def test_write_csv_atomic_takes_dicts_or_sequences_and_a_stop_while_making_rows_keeps_the_earlier_file(tmp_path):
    """The one CSV helper of spectrum, author_attribution and the benchmark: rows as dicts (by column, a missing one
    empty, one not in the columns an error) or as sequences; a generator stopped part-way leaves the earlier file."""
    import csv

    path = tmp_path / "results.csv"
    outputs.write_csv_atomic(str(path), ["model", "n"], [{"model": "linformer", "n": 512}, {"model": "roberta"}])
    earlier = path.read_text()
    with open(path, newline="") as handle:
        assert list(csv.DictReader(handle)) == [{"model": "linformer", "n": "512"}, {"model": "roberta", "n": ""}]
    with pytest.raises(ValueError, match="k"):
        outputs.write_csv_atomic(str(path), ["model", "n"], [{"model": "linformer", "n": 512, "k": 64}])

    def stopped_after_one_row():
        yield ["performer", 1024]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        outputs.write_csv_atomic(str(path), ["model", "n"], stopped_after_one_row())
    assert path.read_text() == earlier and os.listdir(tmp_path) == ["results.csv"]
    outputs.write_csv_atomic(str(path), ["model", "n"], (row for row in [["performer", 1024]]))
    assert path.read_bytes() == b"model,n\r\nperformer,1024\r\n"  # as csv.writer writes to a file
