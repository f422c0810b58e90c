"""Tasks that stand in for a slow compile or a stopped worker, for tests/test_benchmarking.py. In a module of their
own: a fresh process (`benchmarks.workers.run_in_fresh_process`) imports the class of the task it is sent, and must
not have to import a test module for it."""

import dataclasses
import os
import signal
import time

from benchmarks.workers import TimingTask


@dataclasses.dataclass
class SlowFirstCall(TimingTask):
    """The model `slow` (a label) compiles for `hold_s` seconds more: its first call sleeps first, inside the
    compile's time limit, as a long inductor compile would."""

    slow: str = ""
    hold_s: float = 600.0

    def _first_calls(self, label, step, limit_s, why):
        if label == self.slow:
            run = step.run

            def held():
                time.sleep(self.hold_s)
                return run()

            step = dataclasses.replace(step, run=held)
        return super()._first_calls(label, step, limit_s, why)


@dataclasses.dataclass
class DiesCompiling(TimingTask):
    """No torch at all: reports that `points[0]` compiled in 1.5 s and that `points[1]` began compiling, then dies
    (exit code 3), as a process killed in the middle of a compile would."""

    def run(self, progress=None):
        first, second = self.points[0][0], self.points[1][0]
        progress({"event": "compiling", "label": first})
        progress({"event": "compiled", "label": first, "compile_s": 1.5, "first_call": 1, "second_step": 0})
        progress({"event": "compiling", "label": second})
        os._exit(3)


class Interrupted:
    """A task whose process gets Ctrl-C's SIGINT while it runs (a terminal sends it to the whole process group)."""

    def run(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)


@dataclasses.dataclass
class StopsTheBenchmark:
    """A task whose process writes its pid to `pid_file`, sends the benchmark's process (`parent`) SIGTERM, as `kill`
    or a job scheduler does (to it alone, not to its process group), then works on for a minute."""

    parent: int
    pid_file: str

    def run(self):
        with open(self.pid_file, "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
        os.kill(self.parent, signal.SIGTERM)
        time.sleep(60)
