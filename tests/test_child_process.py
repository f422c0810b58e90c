"""experiments/child_process.py: how an experiment driver runs a training run as its child and passes stop requests
on to it."""

import signal
import subprocess
import sys

import pytest
from training_utils import claimed_by_another_driver, signal_this_process_once_started, stoppable_child

from experiments.child_process import claim_runs, claimed_by_others, claimed_elsewhere, run_child
from linformer_hf.training.config import ConfigError


def test_each_stop_request_reaches_the_child_and_a_closed_terminal_is_a_sigterm(tmp_path):
    """A first Ctrl-C asks the run to checkpoint and stop; a second, passed on too, stops it at once (before, the
    driver kept the second one). SIGHUP (the terminal closed) reaches the child as SIGTERM: before, the child, in its
    own session, went on training alone behind a driver that had died."""
    child, events = stoppable_child(tmp_path, exit_code=3, stops_after=2)
    signal_this_process_once_started(events, signal.SIGINT, signal.SIGINT)
    with open(tmp_path / "log", "w") as log:
        code, stopped_by = run_child([sys.executable, str(child), "run"], log)
    assert (code, stopped_by) == (3, signal.SIGINT)
    assert events.read_text().splitlines() == ["run started", "run got SIGINT", "run got SIGINT"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the driver's handler is gone again

    (tmp_path / "hup").mkdir()
    child, events = stoppable_child(tmp_path / "hup")
    signal_this_process_once_started(events, signal.SIGHUP)
    with open(tmp_path / "log", "w") as log:
        code, stopped_by = run_child([sys.executable, str(child), "run"], log)
    assert stopped_by == signal.SIGHUP and events.read_text().splitlines() == ["run started", "run got SIGTERM"]


def test_the_child_runs_in_its_own_session(tmp_path):
    """So that a Ctrl-C in the terminal (sent to the foreground process group) reaches it once, through the driver."""
    script = tmp_path / "sid.py"
    script.write_text("import os; print(os.getsid(0) == os.getpid())")
    with open(tmp_path / "log", "w") as log:
        assert run_child([sys.executable, str(script)], log) == (0, None)
    assert (tmp_path / "log").read_text().strip() == "True"
    assert subprocess.run([sys.executable, str(script)], capture_output=True, text=True).stdout.strip() == "False"


def test_a_run_another_driver_holds_is_refused_and_free_once_that_driver_is_killed(tmp_path):
    """Two drivers (the same command twice, or two plans into one folder) never run one run: the second is refused,
    naming the first, before it writes anything; other runs of the folder stay free, and a killed driver's claim
    ends with it."""
    folder = tmp_path / "plan"
    with claimed_by_another_driver(folder, "a") as driver:
        assert claimed_elsewhere(str(folder), "a") and not claimed_elsewhere(str(folder), "b")
        with pytest.raises(
            ConfigError, match=rf"run a in {folder} is being run by another driver: the run of pid {driver.pid} "
        ):
            with claim_runs(str(folder), ["b", "a"]):
                pytest.fail("claimed a run another driver holds")
        with claim_runs(str(folder), ["b"]):
            assert claimed_by_others(str(folder), ["b"]) == ["a"]
            assert claimed_by_others(str(folder)) == ["a", "b"]  # this process' own claim, asked of, counts too
        assert claimed_by_others(str(folder)) == ["a"]  # b freed at the block's end, and when refused above
    assert not claimed_elsewhere(str(folder), "a")  # killed: its claim went with it
    with claim_runs(str(folder), ["a"]):
        pass


def test_a_killed_drivers_child_checkpoints_and_stops_and_keeps_its_run_claimed_until_then(tmp_path):
    """A SIGKILLed driver (or one the OOM killer took) sends its child a SIGTERM (the parent-death signal): the run
    checkpoints and stops rather than training on unseen, which a rerun of the driver named by a dead pid. Until the
    child has stopped, the run stays claimed (the child inherits the claim): no second driver takes it meanwhile."""
    import time

    from training_utils import REPO, script_env

    folder = tmp_path / "plan"
    child, events = stoppable_child(tmp_path)
    (tmp_path / "slow_stop.py").write_text(  # the stand-in, stopping 2 s after its SIGTERM as a checkpoint takes time
        child.read_text().replace("        sys.exit(", "        time.sleep(2); sys.exit(")
    )
    driver_script = (
        "import sys\n"
        "from experiments.child_process import claim_runs, run_child\n"
        "with claim_runs(sys.argv[1], ['a']) as claims:\n"
        "    run_child([sys.executable, sys.argv[2], 'a'], sys.stdout, claims['a'])\n"
    )
    driver = subprocess.Popen(
        [sys.executable, "-c", driver_script, str(folder), str(tmp_path / "slow_stop.py")], cwd=REPO, env=script_env()
    )
    deadline = time.monotonic() + 60
    while not (events.exists() and "a started" in events.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    driver.kill()
    driver.wait()
    deadline = time.monotonic() + 30
    while "a got SIGTERM" not in events.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert events.read_text().splitlines() == ["a started", "a got SIGTERM"]
    assert claimed_elsewhere(str(folder), "a")  # still stopping
    with pytest.raises(ConfigError, match="run a in .* is being run by another driver"):
        with claim_runs(str(folder), ["a"]):
            pass
    while claimed_elsewhere(str(folder), "a") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not claimed_elsewhere(str(folder), "a")  # stopped: its claim went with it
    assert "ran to its end" not in events.read_text()
