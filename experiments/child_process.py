"""One training run as a child process of an experiment driver (a books plan, an attribution comparison)."""

from __future__ import annotations

import signal
import subprocess

# What the driver passes on: a stop request, as the training runs take it (SIGTERM / SIGINT: stop after the current
# update with a checkpoint; a second one: at once). A closed terminal (SIGHUP) is passed on as SIGTERM.
FORWARDED = {signal.SIGTERM: signal.SIGTERM, signal.SIGINT: signal.SIGINT, signal.SIGHUP: signal.SIGTERM}


def run_child(args: list[str], log) -> tuple[int, int | None]:
    """Run ``args`` as a child process writing to ``log``. Each SIGTERM, SIGINT or SIGHUP this driver receives while it
    runs is passed on to it (`FORWARDED`), so it checkpoints and stops, and a second Ctrl-C stops it at once. The child
    has its own session, so a Ctrl-C in the terminal reaches it only through here, not twice at once, and it is never
    left training behind a driver that died. Returns its exit code and the first signal received, if any."""
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
        child = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        for signum in pending:
            child.send_signal(FORWARDED[signum])
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code, (received[0] if received else None)


def stopped_message(stopped_by: int, run: str, code: int, console: str) -> str:
    """What a driver says when it stopped because a signal stopped its run."""
    return (
        f"{signal.Signals(stopped_by).name} received: run {run} was stopped (exit code {code}; its console is "
        f"{console}) and no later run was started. The same command resumes it from the run's last checkpoint."
    )
