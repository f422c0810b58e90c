"""The tests' pre-imported interpreters (tests/prefork.py) run a command as a fresh `python` would: its arguments,
streams, directory, environment, exit status and signals; and a real interpreter wherever a fork could differ."""

import os
import signal
import subprocess
import time

import prefork
import pytest


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("prefork"))
    python = os.path.join(prefork.install(directory), "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for _ in range(240):  # the first request runs a real interpreter and the second starts the server
        result = subprocess.run([python, "-c", "pass"], env=env, timeout=300)
        assert result.returncode == 0
        if forked(directory):
            break
        time.sleep(0.5)
    yield directory, python
    prefork.end_session(directory)


def forked(directory) -> list:
    with open(os.path.join(directory, "commands.log")) as fh:
        return [line for line in fh if line.startswith("forked")]


def run(python, *args, cwd=None, input=None, **env):
    env = dict({k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **env)
    return subprocess.run([python, *args], env=env, cwd=cwd, input=input, capture_output=True, text=True, timeout=300)


def test_a_forked_command_sees_its_own_arguments_streams_directory_and_environment(stand_ins, tmp_path):
    directory, python = stand_ins
    before = len(forked(directory))
    who = "import os, sys; print(sys.argv, os.getcwd(), os.environ['PROBE'], sys.executable)"
    result = run(python, "-c", who, "a", "b", cwd=tmp_path, PROBE="x y")
    assert (result.returncode, result.stdout) == (0, f"['-c', 'a', 'b'] {tmp_path} x y {python}\n"), result.stderr
    script = tmp_path / "script.py"
    script.write_text("import sys; print(__name__, sys.argv, sys.path[0], sys.stdin.read())\nsys.exit(3)\n")
    result = run(python, str(script), "z", input="from stdin")
    assert (result.returncode, result.stdout) == (3, f"__main__ ['{script}', 'z'] {tmp_path} from stdin\n")
    (tmp_path / "probe_module.py").write_text("import sys\nif __name__ == '__main__':\n    print(sys.argv[1:])\n")
    result = run(python, "-m", "probe_module", "q", PYTHONPATH=str(tmp_path))
    assert (result.returncode, result.stdout) == (0, "['q']\n"), result.stderr
    result = run(python, "-c", "raise ValueError('boom')")
    assert result.returncode == 1
    assert result.stderr.startswith('Traceback (most recent call last):\n  File "<string>"'), result.stderr
    assert len(forked(directory)) == before + 4  # forked, every one


def test_descriptors_passed_on_reach_the_command_and_multiprocessing_helpers_fork_too(stand_ins):
    """What a caller passes on (`pass_fds`: a forkserver's socket and pipe) is open in the command at the same number,
    and multiprocessing starts its forkserver through the stand-in, forked as well (a benchmark's timing processes)."""
    directory, python = stand_ins
    before = len(forked(directory))
    read_end, write_end = os.pipe()
    spare = os.dup(write_end)  # a second one, above the first: both are placed at their own numbers
    code = (
        "import multiprocessing as mp, os, sys\n"
        f"os.write({write_end}, b'first '); os.write({spare}, b'second ')\n"
        "ctx = mp.get_context('forkserver')\n"
        "with ctx.Pool(1) as pool:\n"
        "    print(pool.apply(os.getppid) != os.getpid(), flush=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [python, "-c", code], env=env, pass_fds=(write_end, spare), capture_output=True, text=True, timeout=300
    )
    os.close(write_end)
    os.close(spare)
    with os.fdopen(read_end, "rb") as fh:
        assert fh.read() == b"first second "
    assert (result.returncode, result.stdout) == (0, "True\n"), result.stderr
    started = forked(directory)[before:]
    assert any("-c import multiprocessing as mp" in line for line in started)
    assert any("multiprocessing.forkserver import main" in line for line in started), started
    # no standard input at all: a real interpreter runs it, as given
    closed = subprocess.run(["bash", "-c", f"exec 0<&-; {python} -c 'print(\"ran\")'"], env=env, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert (closed.returncode, closed.stdout) == (0, "ran\n"), closed.stderr
    with open(os.path.join(directory, "commands.log")) as fh:
        assert fh.read().splitlines()[-1].startswith("real interpreter, descriptors [1, 2]")


def test_an_option_the_environment_already_sets_is_no_reason_for_a_real_interpreter(monkeypatch):
    """multiprocessing starts its helpers with -B where PYTHONDONTWRITEBYTECODE is set, and torchrun its workers with
    -u: where the environment already says the same, the same interpreter."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")
    assert prefork.command_of(["-B", "-c", "pass", "x"], None) == ("code", "pass", ["x"])
    assert prefork.command_of(["-u", "-B", "script.py", "-u"], None) == ("script", "script.py", ["-u"])
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    assert prefork.command_of(["-B", "-c", "pass"], None) is None  # -B changes something: a real interpreter
    monkeypatch.setenv("PYTHONUNBUFFERED", "")
    assert prefork.command_of(["-u", "-m", "mod"], None) is None


def test_signals_reach_the_command_and_its_end_is_the_stand_ins(stand_ins, tmp_path):
    directory, python = stand_ins
    handled = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(75))\n"
    for code, status in ((handled, 75), ("import time\n", -signal.SIGTERM)):
        proc = subprocess.Popen(
            [python, "-c", code + "print('up', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE
        )
        assert proc.stdout.readline() == b"up\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == status
        proc.stdout.close()
    # killed outright (a timeout, a test's SIGKILL), the stand-in takes the command with it
    pid_file = tmp_path / "pid"
    proc = subprocess.Popen(
        [python, "-c", f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)"]
    )
    while not (pid_file.exists() and pid_file.read_text()):
        time.sleep(0.1)
    command = int(pid_file.read_text())
    assert command != proc.pid
    proc.kill()
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{command}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{command}")


def test_an_import_time_setting_gets_its_own_server_and_a_shadowing_path_a_real_interpreter(stand_ins, tmp_path):
    directory, python = stand_ins
    read = "import sys, huggingface_hub.constants as c; print(c.HF_HOME, 'transformers' in sys.modules)"
    home = str(tmp_path / "home")
    results = [run(python, "-c", read, HF_HOME=home)]
    while not results[-1].stdout.endswith("True\n") and len(results) < 240:  # forked once its server is up
        time.sleep(0.5)
        results.append(run(python, "-c", read, HF_HOME=home))
    assert results[0].stdout == f"{home} False\n"  # a real interpreter: the server's has another HF_HOME
    assert results[-1].stdout == f"{home} True\n"
    shadow = tmp_path / "shadow" / "transformers"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("SHADOW = True\n")
    result = run(python, "-c", "import transformers; print(transformers.SHADOW)", PYTHONPATH=str(shadow.parent))
    assert (result.returncode, result.stdout) == (0, "True\n"), result.stderr
    with open(os.path.join(directory, "commands.log")) as fh:
        assert "refused by the server" in fh.read().splitlines()[-1]


def test_torchruns_per_launch_settings_share_the_server_and_an_import_time_one_does_not():
    """torchrun gives each launch a run id and each worker an error file: read when used, so the workers of every
    launch fork from one server; a variable a library reads at import (HF_HOME) keys a server of its own."""
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/bin"}
    key = prefork.server_key(env, "/usr/bin/python3")
    worker = dict(env, TORCHELASTIC_RUN_ID="1234", TORCHELASTIC_ERROR_FILE="/tmp/x/error.json", LOCAL_RANK="1")
    assert prefork.server_key(worker, "/usr/bin/python3") == key
    assert prefork.server_key(dict(env, OMP_NUM_THREADS="1"), "/usr/bin/python3") == key  # applied in the child
    assert prefork.server_key(dict(env, HF_HOME="/elsewhere"), "/usr/bin/python3") != key
    assert prefork.server_key(dict(env, TORCH_HOME="/elsewhere"), "/usr/bin/python3") != key
