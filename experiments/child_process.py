"""One training run as a child process of an experiment driver (a books plan, an attribution comparison)."""

from __future__ import annotations

import signal
import subprocess


def run_child(args: list[str], log) -> tuple[int, int | None]:
    """Run ``args`` as a child process writing to ``log``; a SIGTERM or SIGINT to this driver is passed on to it, once
    (a training run stops after its current update with a checkpoint). The child has its own session, so a Ctrl-C in
    the terminal reaches it only through here, not twice (twice, the Trainer would be killed before it checkpoints).
    Returns its exit code and the signal received, if any."""
    child = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    received: list[int] = []

    def forward(signum, frame):
        if not received:
            received.append(signum)
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
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
