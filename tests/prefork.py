"""Pre-imported interpreters for the tests' subprocesses: each `python` a test starts forks from one that has
already imported torch, transformers, accelerate and datasets.

Why: the suite starts well over a hundred Python processes (the documented commands, the training scripts, their
`accelerate launch` children), and each spends 5-8 s of this 2-core machine importing those libraries before its
first line of work: about half of the suite's CPU time.

How: `install(directory)` writes `python`, `python3` and `accelerate` stand-ins into `directory/bin` (tests put it
first on PATH, or run `python_executable()`). A stand-in sends its command line, working directory, environment and
open file descriptors (its standard streams, and any its caller passed on) to a server over a Unix socket; the
server forks a child that takes them on and runs the command as `python -m mod`, `python -c code` or `python script`
would, and the stand-in relays the child's exit status and forwards signals to it (a child whose stand-in is killed
outright kills itself). The child's `sys.executable` is the stand-in, multiprocessing's too, so what it starts
(accelerate's launcher and torchrun's workers, a benchmark's forkserver) forks too.

What keeps a forked child equal to a fresh process:
- One server per value of the environment variables that the pre-imported libraries read at import (HF_*,
  TRANSFORMERS_*, TORCH*, OMP_*, PYTHON*, GLIBC_*, LD_*, HOME ...: `import_time_environment`), started on first use
  with exactly that environment. Only PYTHONPATH (applied to `sys.path`) and OMP_NUM_THREADS (applied with
  `torch.set_num_threads`) may differ from the server's.
- The package under test is never pre-imported: every child imports linformer_hf (and registers its Auto classes)
  itself, from its own PYTHONPATH. A PYTHONPATH entry that would shadow a pre-imported module runs a real
  interpreter instead.
- Any other interpreter option (-X, -W, -I, a script on stdin ...; -B and -u only where PYTHONDONTWRITEBYTECODE and
  PYTHONUNBUFFERED do not already say them) runs a real interpreter, as does everything
  when LINFORMER_TEST_PREFORK=0 (CI's floor run: the oldest supported versions, real interpreters throughout).
"""

import array
import fcntl
import gc
import hashlib
import json
import os
import re
import signal
import socket
import struct
import sys
import time

PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "transformers.trainer", "accelerate", "datasets")
# What nearly every training command imports next (building a model and a Trainer, reading a Hub-layout dataset):
# about 0.7 s a command more. Missing ones (another transformers release) are left out.
PRELOAD_IF_PRESENT = (
    "transformers.generation",
    "transformers.masking_utils",
    "transformers.modeling_layers",
    "psutil",
    "scipy.io",
)
# Variables some pre-imported library reads when it is imported (grep of their module-level os.environ reads), plus
# the interpreter's and the C libraries'. KMP_* only tune Intel's OpenMP (torch's CPU wheel links GNU's), and
# `accelerate launch` sets them; ACCELERATE_* are read when an Accelerator starts.
IMPORT_TIME = re.compile(
    r"^(HF_|HUGGINGFACE_|TRANSFORMERS_|TOKENIZERS_|SAFETENSORS_|TORCH|PYTORCH_|TRITON|OMP_|GOMP_|MKL|OPENBLAS_|"
    r"NUMEXPR_|PYTHON|GLIBC_|LD_|MALLOC_|CUDA|NVIDIA_|XLA_|USE_|EAGER_IMPORT$|SPACE_ID$|WANDB_|TQDM_|XDG_|HOME$|"
    r"TMPDIR$|TEMP$|TMP$|LANG$|LC_|TZ$)"
)
APPLIED = ("PYTHONPATH", "OMP_NUM_THREADS")
IDLE_EXIT_S = 120  # a server nobody has asked for this long exits (a new one starts on the next request)
STATUS = struct.Struct("!i")  # >= 0: exit code; < 0: killed by that signal
# Read when used, not at import: torchrun's per-launch and per-worker settings (a run id, an error file) would
# otherwise give every launch's workers a server of their own, which is to say real interpreters.
RUN_TIME = re.compile(r"^(TORCHELASTIC_|TORCH_NCCL_)")
# Options that change nothing where a variable already says the same (the server was started with that variable).
IMPLIED_BY_ENVIRONMENT = {"-B": "PYTHONDONTWRITEBYTECODE", "-u": "PYTHONUNBUFFERED"}
MAX_FDS = 64  # descriptors a command may be given (one message carries them all)


def enabled() -> bool:
    return os.environ.get("LINFORMER_TEST_PREFORK", "1") != "0"


def import_time_environment(env: dict) -> dict:
    return {k: v for k, v in sorted(env.items()) if IMPORT_TIME.match(k) and not RUN_TIME.match(k) and k not in APPLIED}


def server_key(env: dict, python: str) -> str:
    text = json.dumps([python, import_time_environment(env)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------------------------
# The stand-ins (run with -S -E: no site-packages, nothing from the environment, so they start in milliseconds)
# ------------------------------------------------------------------------------------------------------------------

STAND_IN = """#!{python} -SE
import sys
sys.path.insert(0, {tests!r})
import prefork
prefork.stand_in({python!r}, {script!r}, {directory!r})
"""


def install(directory: str) -> str:
    """Writes the stand-ins into `directory/bin`; returns that folder."""
    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    tests = os.path.dirname(os.path.abspath(__file__))
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    for name, script in (("python", None), ("python3", None), ("accelerate", accelerate)):
        path = os.path.join(bin_dir, name)
        with open(path, "w") as fh:
            fh.write(STAND_IN.format(python=sys.executable, tests=tests, script=script, directory=directory))
        os.chmod(path, 0o755)
    return bin_dir


def start_session() -> str | None:
    """In the first process of a test session: a folder for the stand-ins and servers, named in the environment so
    that pytest-xdist's workers share it; returns it when this process made it (it stops them: `end_session`)."""
    import tempfile

    if not enabled() or os.environ.get("LINFORMER_PREFORK_DIR"):
        return None
    directory = tempfile.mkdtemp(prefix="prefork-")  # short: a Unix socket's path has at most 107 bytes
    install(directory)
    os.environ["LINFORMER_PREFORK_DIR"] = directory
    return directory


def end_session(directory: str) -> None:
    import glob
    import shutil

    for pid_file in glob.glob(os.path.join(directory, "*.pid")):
        try:
            with open(pid_file) as fh:
                os.kill(int(fh.read()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
    shutil.rmtree(directory, ignore_errors=True)


def python_executable() -> str:
    """The interpreter a test should start: the stand-in when this session has one, else this interpreter."""
    directory = os.environ.get("LINFORMER_PREFORK_DIR")
    if enabled() and directory and os.path.exists(os.path.join(directory, "bin", "python")):
        return os.path.join(directory, "bin", "python")
    return sys.executable


def command_of(argv: list, script: str | None) -> tuple | None:
    """(mode, target, args) for a command line a forked child can run, or None."""
    if script is not None:  # the accelerate console script
        return ("script", script, argv)
    while argv and os.environ.get(IMPLIED_BY_ENVIRONMENT.get(argv[0], "")):
        argv = argv[1:]  # what the environment already says (multiprocessing and torchrun pass it on)
    if len(argv) >= 2 and argv[0] in ("-m", "-c"):
        return ("module" if argv[0] == "-m" else "code", argv[1], argv[2:])
    if argv and not argv[0].startswith("-"):
        return ("script", argv[0], argv[1:])
    return None


def stand_in(python: str, script: str | None, directory: str) -> None:
    argv = sys.argv[1:]
    real = [python, script, *argv] if script else [python, *argv]

    def run_real(why: str):
        note(directory, f"real interpreter, {why}: {' '.join(argv)[:160]}")
        os.execv(python, real)

    command = command_of(argv, script)
    if command is None:
        run_real("interpreter options")
    if not enabled():
        run_real("LINFORMER_TEST_PREFORK=0")
    env = dict(os.environ)
    sock = connect(directory, env, python)
    if sock is None:
        run_real(f"no server yet for {server_key(env, python)}")
    # what the command starts with sys.executable (accelerate's launcher, a timing process) forks too
    # every descriptor the command was given (its streams, and any its caller passed on: a forkserver's socket and
    # pipe), to be taken on at the same numbers
    numbers = open_descriptors(exclude=sock.fileno())
    if numbers[:3] != [0, 1, 2] or len(numbers) > MAX_FDS:
        sock.close()
        run_real(f"descriptors {numbers[:3]}... ({len(numbers)}): not three standard streams and at most {MAX_FDS}")
    request = {
        "command": command,
        "cwd": os.getcwd(),
        "env": env,
        "executable": os.path.join(directory, "bin", "python"),
        "fds": numbers,
    }
    payload = json.dumps(request).encode()
    fds = array.array("i", numbers)
    sock.sendmsg([struct.pack("!I", len(payload)), payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
    reply = receive_exactly(sock, 1 + STATUS.size)
    if reply is None or reply[:1] != b"P":  # the server runs no such command here: a real interpreter does
        sock.close()
        run_real("refused by the server")
    child = STATUS.unpack(reply[1:])[0]
    note(directory, f"forked from {server_key(env, python)}: {' '.join(argv)[:160]}")

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, forward)
    status = receive_exactly(sock, STATUS.size)
    code = STATUS.unpack(status)[0] if status else 1
    if code < 0:  # killed by a signal: so is the stand-in, for its caller to see
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def open_descriptors(exclude: int) -> list:
    """This process's open file descriptors in order, but `exclude`."""
    listed = [int(name) for name in os.listdir("/proc/self/fd")]  # the listing's own descriptor is closed by now
    return [fd for fd in sorted(listed) if fd != exclude and _is_open(fd)]


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def receive_exactly(sock, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def note(directory: str, line: str) -> None:
    """One line of the session's account (`summary`)."""
    with open(os.path.join(directory, "commands.log"), "a") as fh:
        fh.write(line.replace("\n", " ") + "\n")


def connect(directory: str, env: dict, python: str):
    """A connection to the server for this environment. None on the first request in an environment (a real
    interpreter runs it, and a server starts for the next one: one-off environments, such as a benchmark's timing
    process with its own settings, would pay a server's longer imports for nothing), or if the server cannot start."""
    import subprocess

    stem = os.path.join(directory, server_key(env, python))
    path = stem + ".sock"

    def attempt():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except OSError:
            sock.close()
            return None

    sock = attempt()
    if sock is not None:
        return sock
    with open(stem + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = attempt()
        if sock is not None:
            return sock
        seen = os.path.exists(stem + ".seen")
        if not seen:
            open(stem + ".seen", "w").close()
            return None
        if os.path.exists(stem + ".pid"):  # started, still importing (or failed: see its .log)
            return None
        # The marker comes first: the server overwrites it with its pid, which end_session stops it by.
        open(stem + ".pid", "w").close()
        with open(stem + ".log", "a") as log:
            subprocess.Popen(
                [python, os.path.abspath(__file__), "serve", path],
                env={k: v for k, v in env.items() if k not in APPLIED},
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
    return None


def summary(directory: str) -> str:
    """How the session's subprocesses ran: forked from a server, or real interpreters, and why."""
    import collections

    try:
        with open(os.path.join(directory, "commands.log")) as fh:
            kinds = collections.Counter(line.split(":")[0].split(" for ")[0].split(" from ")[0] for line in fh)
    except FileNotFoundError:
        return "prefork: no subprocess started"
    servers = len([name for name in os.listdir(directory) if name.endswith(".log") and name != "commands.log"])
    return f"prefork: {dict(kinds)} ({servers} servers)"


# ------------------------------------------------------------------------------------------------------------------
# The server
# ------------------------------------------------------------------------------------------------------------------


def serve(path: str) -> int | None:
    """Imports PRELOAD, then forks a child per request until idle. Returns in a child only: its exit code."""
    import importlib
    import select

    pid_file = path[: -len(".sock")] + ".pid"
    with open(pid_file, "w") as fh:  # end_session stops it by this
        fh.write(str(os.getpid()))
    for name in PRELOAD:
        importlib.import_module(name)
    for name in PRELOAD_IF_PRESENT:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # What is imported stays: the children's full collections skip it (they took 0.5 s of a 2 s command walking
    # these objects, and dirtied their pages).
    gc.collect()
    gc.freeze()
    base_path = sys.path[1:]  # what an interpreter started without PYTHONPATH searches
    preloaded = {name.partition(".")[0] for name in sys.modules}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".tmp")
    listener.listen(64)
    server = os.getpid()
    os.rename(path + ".tmp", path)  # connectable only once everything is imported
    children, idle_since, served = {}, time.monotonic(), 0
    print(f"server {server}: ready, {len(sys.modules)} modules", flush=True)
    while True:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    conn.sendall(STATUS.pack(code))
                except OSError:
                    pass
                conn.close()
            idle_since = time.monotonic()
        if not children and time.monotonic() - idle_since > IDLE_EXIT_S:
            for name in (path, pid_file):  # the next request in this environment starts another
                if os.path.exists(name):
                    os.unlink(name)
            print(f"server {server}: idle, exits after {served} commands", flush=True)
            return None
        if not select.select([listener], [], [], 0.05)[0]:
            continue
        conn, _ = listener.accept()
        request, fds = receive_request(conn)
        if request is None:
            conn.close()
            continue
        reason = refusal(request, preloaded)
        if reason:
            print(f"server {server}: runs no {request['command'][:2]}: {reason}", flush=True)
            conn.sendall(b"X" + STATUS.pack(0))
            conn.close()
            for fd in fds:
                os.close(fd)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other in children.values():
                other.close()
            return run_child(request, fds, conn, base_path)
        served += 1
        for fd in fds:
            os.close(fd)
        conn.sendall(b"P" + STATUS.pack(pid))
        children[pid] = conn


def receive_request(conn):
    """The request and its descriptors, or (None, []) for anything malformed (its descriptors closed)."""
    header, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize))
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    payload = receive_exactly(conn, struct.unpack("!I", header)[0]) if len(header) == 4 else None
    request = json.loads(payload) if payload else None
    if request is None or len(request.get("fds", [])) != len(fds) or request["fds"][:3] != [0, 1, 2]:
        for fd in fds:
            os.close(fd)
        return None, []
    return request, list(fds)


def refusal(request: dict, preloaded: set) -> str | None:
    """Why a forked child would not be the process the command asks for (None: it would)."""
    for entry in request["env"].get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.isdir(entry):
            names = {name.partition(".")[0] for name in os.listdir(entry)}
            shadowed = names & preloaded
            if shadowed:
                return f"PYTHONPATH entry {entry} holds {sorted(shadowed)}, already imported here"
    return None


def run_child(request: dict, fds: list, conn, base_path: list) -> int:
    """In the forked child: take on the command's streams, directory, environment and arguments, and run it."""
    import runpy
    import threading
    import traceback
    import types

    # The command's descriptors at their own numbers: first all of them (and this connection) above every target
    # number, so that no dup2 below closes one still to be placed.
    targets = request["fds"]
    above = max(targets) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above) for fd in fds]
    for fd in fds:
        os.close(fd)
    if conn.fileno() in targets:
        old = conn.detach()
        conn = socket.socket(fileno=fcntl.fcntl(old, fcntl.F_DUPFD_CLOEXEC, above))
        os.close(old)
    for target, fd in zip(targets, moved):
        os.dup2(fd, target)  # inheritable, as the stand-in's own were
        os.close(fd)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def watch():  # the stand-in gone (killed, or its caller timed out): so is this command
        try:
            conn.recv(1)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="prefork-watch").start()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if "OMP_NUM_THREADS" in os.environ:
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    sys.executable = request["executable"]
    if "multiprocessing.spawn" in sys.modules:  # read sys.executable when the server imported it
        sys.modules["multiprocessing.spawn"].set_executable(sys.executable)
    mode, target, args = request["command"]
    python_path = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    first = {"module": os.getcwd(), "code": "", "script": os.path.dirname(os.path.realpath(target))}[mode]
    sys.path[:] = [first, *python_path, *base_path]
    try:
        if mode == "module":
            sys.argv = ["-m", *args]
            runpy._run_module_as_main(target, alter_argv=True)
        else:
            sys.argv = ["-c" if mode == "code" else target, *args]
            main = types.ModuleType("__main__")
            main.__dict__["__builtins__"] = __builtins__
            if mode == "script":
                main.__file__ = target
                with open(target, "rb") as fh:
                    source = fh.read()
            sys.modules["__main__"] = main
            exec(compile(source if mode == "script" else target, target if mode == "script" else "<string>", "exec"),
                 main.__dict__)  # fmt: skip
        return 0
    except SystemExit as stop:
        if stop.code is None:
            return 0
        if isinstance(stop.code, int):
            return stop.code
        print(stop.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt as error:
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as error:  # printed as the interpreter would: from the command's first frame
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        return 1


def finish(code: int) -> None:
    """A forked child's exit, as the interpreter's own up to its module teardown: wait for the command's threads, run
    its atexit callbacks, flush. The teardown itself (every module's objects collected) would touch, and so copy,
    each page shared with the server: 1.8 s here, for nothing a command can rely on."""
    import atexit
    import threading

    try:
        threading._shutdown()
    except Exception:
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


if __name__ == "__main__" and sys.argv[1:2] == ["serve"]:
    code = serve(sys.argv[2])
    if code is not None:
        finish(code)
