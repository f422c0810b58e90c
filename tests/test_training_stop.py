"""Every loop stops the same way: SIGTERM / SIGINT sent to a real fine-tuning or attention-transfer process finish the
update, write a checkpoint, release the lock and exit with the resumable status (75), and `latest` resumes to what an
uninterrupted run gives. (Pretraining's own tests are in test_training_guards.py.)"""

import json
import os
import signal
import subprocess
import threading
import time

import pytest
import yaml
from prefork import python_executable
from safetensors.torch import load_file
from test_training_checkpointing import subprocess_env
from training_utils import REPO, sst2_head, tiny_finetune_overrides

from linformer_hf.training.checkpointing import COMPLETE_MARKER, LOCK_FILE
from linformer_hf.training.config import FinetuneRecipe, apply_overrides, load_recipe
from linformer_hf.training.errors import RESUMABLE_EXIT_CODE


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    from test_training_finetune import pretrained_dir as build

    return build.__wrapped__(tmp_path_factory)


class Watched:
    """A subprocess whose stdout and stderr are read as they come (a reader thread each), to signal it mid-run."""

    def __init__(self, command):
        self.proc = subprocess.Popen(
            command,
            cwd=REPO,
            env={**subprocess_env(), "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out, self.err = [], []
        self.readers = [
            threading.Thread(target=lambda s=stream, lines=lines: lines.extend(s), daemon=True)
            for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    def wait_for(self, seen, timeout=240):
        """Wait until `seen()` is true while the process is still running."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, "the run ended before it was signalled:\n" + "".join(self.err)[-3000:]
            if seen():
                return
            time.sleep(0.02)
        raise AssertionError(f"not seen within {timeout} s")

    def finish(self, timeout=180):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        for reader in self.readers:
            reader.join(timeout=10)
        return self.proc.returncode, "".join(self.err)


def same_tensors(a_path, b_path):
    a, b = load_file(str(a_path)), load_file(str(b_path))
    return a.keys() == b.keys() and all((a[key] == b[key]).all() for key in a)


# ------------------------------------------------------------------------------------------------------------------
# Fine-tuning (transformers' Trainer)
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_both_stop_signals_set_the_flag_every_loop_reads(signum):
    """SIGINT and SIGTERM take one path (`StopSignal`), which every loop reads between updates: so one signal per loop
    is run end to end below (Ctrl-C to fine-tuning, SIGTERM to transfer; pretraining's tests send both)."""
    import os

    from linformer_hf.training.guards import StopSignal

    previous = signal.getsignal(signum)
    stop = StopSignal().install()
    try:
        assert not stop.requested()
        os.kill(os.getpid(), signum)
        assert stop.requested() and stop.name == signal.Signals(signum).name
        assert signal.getsignal(signum) is previous  # a second signal acts at once
    finally:
        stop.restore()


@pytest.mark.parametrize("signum", [signal.SIGINT], ids=["SIGINT"])
def test_a_signal_stops_finetuning_with_a_checkpoint_and_latest_resumes_exactly(pretrained_dir, tmp_path, signum):
    """Before: Ctrl-C printed a KeyboardInterrupt traceback and SIGTERM killed the run (status 143), with no checkpoint
    (the updates since the last evaluation lost). After: the update ends, `checkpoint-<step>` is written, the lock
    released, the last line says what happened and how to resume, the status is 75; `latest` then gives the
    uninterrupted run's losses, evaluations and best model."""
    max_steps = 60  # a few ms an update: the signal lands mid-run
    overrides = tiny_finetune_overrides(
        pretrained_dir,
        sst2_head(tmp_path / "train.tsv", 256),
        tmp_path / "run",
        {
            "data.max_eval_samples": 32,
            "model.config": {"hidden_dropout_prob": 0.1},  # the RNG state must carry over
            "training.max_steps": max_steps,
            "training.per_device_train_batch_size": 8,
            "training.eval_steps": 25,
            "training.logging_steps": 1,
        },
    )
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(apply_overrides({}, overrides)))
    command = [python_executable(), "scripts/finetune.py", "--config", str(recipe), "--no_progress"]

    from linformer_hf.training.finetuning import run_finetuning

    whole = run_finetuning(
        load_recipe(FinetuneRecipe, None, extra={**overrides, "training.output_dir": str(tmp_path / "whole")}),
        show_progress=False,
    )

    run = Watched(command)
    run.wait_for(lambda: sum("'loss'" in line for line in run.out) >= 3)  # the Trainer prints each logged update
    run.proc.send_signal(signum)
    status, stderr = run.finish()
    assert status == RESUMABLE_EXIT_CODE, stderr[-3000:]
    message = stderr.strip().splitlines()[-1]
    name = signal.Signals(signum).name
    assert message.startswith(f"stopped: {name} received: stopped after update "), message
    step = int(message.split("stopped after update ")[1].split()[0])
    assert 3 <= step < max_steps
    out = tmp_path / "run"
    checkpoint = out / f"checkpoint-{step}"
    assert f"with checkpoint {checkpoint}" in message and "--resume_from_checkpoint latest" in message
    assert (checkpoint / "trainer_state.json").is_file() and (checkpoint / "optimizer.pt").is_file()
    assert (checkpoint / COMPLETE_MARKER).is_file()  # the run directory's marker: `latest` may take it
    assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    assert not (out / "results.json").exists() and not (out / "best").exists()
    assert (out / LOCK_FILE).read_text() == ""  # released, not left to the kernel

    status, stderr = Watched([*command, "--resume_from_checkpoint", "latest"]).finish(timeout=300)
    assert status == 0, stderr[-3000:]
    resumed = json.loads((out / "results.json").read_text())
    for key in ("train_losses", "history", "best", "steps"):
        expected = {str(s): v for s, v in whole[key].items()} if key == "train_losses" else whole[key]
        assert resumed[key] == expected, key
    assert same_tensors(tmp_path / "whole" / "best" / "model.safetensors", out / "best" / "model.safetensors")


def test_a_signal_during_the_last_finetuning_update_lets_the_run_finish(pretrained_dir, tmp_path, monkeypatch):
    """No update is left to lose: the run evaluates, saves best/ and its results as an unsignalled run, and gives the
    signal handlers back."""
    from linformer_hf.training import finetuning

    max_steps, real = 4, finetuning.stop_signal_callback

    def signalled_during_the_last_update(stop):
        callback = real(stop)

        def on_step_begin(args, state, control, **kwargs):
            if state.global_step == max_steps - 1:
                os.kill(os.getpid(), signal.SIGTERM)

        callback.on_step_begin = on_step_begin
        return callback

    monkeypatch.setattr(finetuning, "stop_signal_callback", signalled_during_the_last_update)
    overrides = tiny_finetune_overrides(
        pretrained_dir,
        sst2_head(tmp_path / "train.tsv", 64),
        tmp_path / "run",
        {"data.max_eval_samples": 16, "training.max_steps": max_steps, "training.eval_steps": 2},
    )
    result = finetuning.run_finetuning(load_recipe(FinetuneRecipe, None, extra=overrides), show_progress=False)
    assert result["steps"] == max_steps and [h["step"] for h in result["history"]] == [2, 4]
    assert (tmp_path / "run" / "results.json").is_file() and (tmp_path / "run" / "best").is_dir()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# ------------------------------------------------------------------------------------------------------------------
# Attention transfer
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transfer_pair(tmp_path_factory):
    from test_transfer import build_pair

    return build_pair(tmp_path_factory.mktemp("transfer"))


@pytest.mark.parametrize("signum", [signal.SIGTERM], ids=["SIGTERM"])
def test_a_signal_stops_attention_transfer_with_a_checkpoint_and_latest_resumes_exactly(
    transfer_pair, tmp_path, signum
):
    """The same from outside: a signal to `scripts/transfer_attention.py` while it trains (both stages: the stop may
    land in either), status 75 and a checkpoint; `--resume latest` ends with the uninterrupted run's weights and
    fidelity."""
    from test_transfer import arguments

    from linformer_hf.training.checkpointing import list_checkpoints
    from linformer_hf.training.transfer import TRANSFER, run_transfer

    overrides = dict(layer_steps=40, end_to_end_steps=40, train_attention_weights=True, checkpoint_every=1000)
    straight = run_transfer(arguments(transfer_pair, tmp_path / "straight", **overrides))

    out = tmp_path / "run"
    args = arguments(transfer_pair, out, **overrides)
    command = [
        python_executable(),
        "scripts/transfer_attention.py",
        "--teacher",
        args.teacher,
        "--student",
        args.student,
    ]
    command += ["--output_dir", args.output_dir, "--text_files", *args.text_files, "--lengths", *map(str, args.lengths)]
    for name in ("batch_size", "layer_steps", "end_to_end_steps", "projection_learning_rate", "warmup_steps"):
        command += [f"--{name}", str(getattr(args, name))]
    for name in ("eval_windows", "log_every", "checkpoint_every", "train_attention_weights", "show_progress"):
        command += [f"--{name}", str(getattr(args, name))]
    log = out / "transfer_log.jsonl"

    def steps_logged():
        return log.exists() and len(log.read_text().splitlines()) >= 3

    run = Watched(command)
    run.wait_for(steps_logged)
    run.proc.send_signal(signum)
    status, stderr = run.finish()
    assert status == RESUMABLE_EXIT_CODE, stderr[-3000:]
    message = stderr.strip().splitlines()[-1]
    assert message.startswith(f"stopped: {signal.Signals(signum).name} received: stopped after step "), message
    step = int(message.split("stopped after step ")[1].split()[0])
    assert 3 <= step < 80 and "--resume latest" in message
    assert [os.path.basename(p) for p in list_checkpoints(str(out), TRANSFER)] == [f"checkpoint-{step}"]
    assert not (out / "model.safetensors").exists()
    assert (out / LOCK_FILE).read_text() == ""

    status, stderr = Watched([*command, "--resume", "latest"]).finish(timeout=300)
    assert status == 0, stderr[-3000:]
    report = json.loads((out / "transfer_report.json").read_text())
    assert report["after"] == straight["after"]
    assert same_tensors(tmp_path / "straight" / "model.safetensors", out / "model.safetensors")
