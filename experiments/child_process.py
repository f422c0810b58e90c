"""One training run as a child process of an experiment driver (a books plan, an attribution comparison), and the
claim a driver holds on the runs it is running."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import glob
import os
import signal
import subprocess

from linformer_hf.training.checkpointing import describe_holder, read_holder, write_holder
from linformer_hf.training.config import ConfigError

# What the driver passes on: a stop request, as the training runs take it (SIGTERM / SIGINT: stop after the current
# update with a checkpoint; a second one: at once). A closed terminal (SIGHUP) is passed on as SIGTERM.
FORWARDED = {signal.SIGTERM: signal.SIGTERM, signal.SIGINT: signal.SIGINT, signal.SIGHUP: signal.SIGTERM}


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def stop_with_the_driver(driver: int) -> None:
    """In the child, before it runs: a SIGTERM when the driver dies (Linux's parent-death signal), so that a driver
    killed outright (SIGKILL, the OOM killer) leaves no run training unseen; it checkpoints and stops, and the next
    start of the driver resumes it. Elsewhere nothing is set."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (AttributeError, OSError):  # no prctl (not Linux)
        return
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != driver:  # the driver died before the signal was set
        os.kill(os.getpid(), signal.SIGTERM)


def run_child(args: list[str], log, claim: int | None = None, env: dict | None = None) -> tuple[int, int | None]:
    """Run ``args`` as a child process writing to ``log``. Each SIGTERM, SIGINT or SIGHUP this driver receives while it
    runs is passed on to it (`FORWARDED`), so it checkpoints and stops, and a second Ctrl-C stops it at once. The child
    has its own session, so a Ctrl-C in the terminal reaches it only through here, not twice at once; a driver that
    dies outright sends it a SIGTERM too (`stop_with_the_driver`), so it is never left training behind a driver that
    died. ``claim``, the file descriptor of the driver's claim on the run (`claim_runs`), is inherited by the child,
    so the run stays claimed until the child has stopped, even if the driver is killed.
    ``env``: the child's environment (this process' by default). Returns its exit code and the first signal received,
    if any."""
    received: list[int] = []
    pending: list[int] = []  # received before the child existed
    child: subprocess.Popen | None = None

    def forward(signum, frame):
        received.append(signum)
        if child is None:
            pending.append(signum)
        else:
            child.send_signal(FORWARDED[signum])

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}  # before the child: no gap
    try:
        child = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=() if claim is None else (claim,),
            env=env,
            preexec_fn=functools.partial(stop_with_the_driver, os.getpid()),
        )
        for signum in pending:
            child.send_signal(FORWARDED[signum])
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code, (received[0] if received else None)


def stopped_message(stopped_by: int, run: str, code: int, console: str, resumed: bool = True) -> str:
    """What a driver says when it stopped because a signal stopped its run (``resumed``: whether the driver's next
    start goes on from the run's last checkpoint, or runs it again from its start)."""
    again = "resumes it from the run's last checkpoint" if resumed else "runs it again from its start"
    return (
        f"{signal.Signals(stopped_by).name} received: run {run} was stopped (exit code {code}; its console is "
        f"{console}) and no later run was started. The same command {again}."
    )


def claim_path(folder: str, name: str) -> str:
    return os.path.join(folder, f".{name}.driver.lock")


@contextlib.contextmanager
def claim_runs(folder: str, names: list[str]):
    """Claim the runs ``names`` of a driver's ``folder`` for as long as the block lasts: an flock on
    ``<folder>/.<run>.driver.lock`` each, which the system releases when the driver, and the run's child it passed the
    claim to, have ended, even when killed. A second driver (the same command twice, or another plan or comparison
    into the folder) is refused here, before it writes anything about them; drivers claiming other runs of the folder
    go on side by side. The run's own lock (its output directory's ``.run.lock``) is taken only once its child has
    started, too late for the driver's records. Yields each run's claim as a file descriptor, for `run_child`."""
    os.makedirs(folder, exist_ok=True)
    claims = {}
    with contextlib.ExitStack() as held:
        for name in names:
            handle = held.enter_context(open(claim_path(folder, name), "a+", encoding="utf-8"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                raise ConfigError(
                    f"run {name} in {folder} is being run by another driver: {describe_holder(read_holder(handle))}. "
                    "Wait for it to end or stop it, or leave the run out of this one (--only the others)."
                ) from None
            write_holder(handle)
            claims[name] = handle.fileno()
        yield claims


def claimed_elsewhere(folder: str, name: str) -> bool:
    """Whether another driver holds run ``name`` of ``folder`` now (`claim_runs`; never ask it of a run this process
    claims: its own claim counts as another's)."""
    try:
        handle = open(claim_path(folder, name), encoding="utf-8")
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def claimed_by_others(folder: str, mine: list[str] = ()) -> list[str]:
    """The runs of ``folder`` other drivers hold now, leaving out this process' own claims ``mine``."""
    names = [os.path.basename(path)[1 : -len(".driver.lock")] for path in glob.glob(claim_path(folder, "*"))]
    return sorted(name for name in names if name not in mine and claimed_elsewhere(folder, name))


@contextlib.contextmanager
def exclusive(path: str):
    """Hold an flock on ``path`` for the block, waiting for it: one driver at a time reads and rewrites a record
    the drivers of a folder share."""
    with open(path, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
