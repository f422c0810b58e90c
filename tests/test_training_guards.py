"""training/guards.py: runs that survive divergence and preemption. The divergence guard never saves a broken model and
keeps the last good checkpoint; SIGTERM / SIGINT finish the update, write a checkpoint, release the lock and exit
with the resumable status, alone and under `accelerate launch` with two processes; logs stay valid JSON."""

import json
import os
import signal
import subprocess
import time

import pytest
import test_training_checkpointing as checkpointing_tests
import torch
from prefork import python_executable
from safetensors.torch import load_file
from test_training_checkpointing import losses_by_step, pretrain_command, run, subprocess_env, write_recipe
from training_utils import REPO, free_port, script_env, sst2_head, tiny_finetune_overrides

from linformer_hf.training import pretraining
from linformer_hf.training.checkpointing import COMPLETE_MARKER, LOCK_FILE, UPDATE_LOG, list_checkpoints
from linformer_hf.training.errors import RESUMABLE_EXIT_CODE, TrainingDiverged
from linformer_hf.training.guards import DivergenceGuard, resume_hint

# The module-scoped tokenizer and corpus of the checkpointing tests.
tokenizer_dir, small_corpus = checkpointing_tests.tokenizer_dir, checkpointing_tests.small_corpus


def strict_json_lines(path):
    """Every line of a JSONL file, parsed as strict JSON (Python's json accepts NaN, other readers do not)."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    with open(path, encoding="utf-8") as fh:
        return [json.loads(line, parse_constant=refuse) for line in fh]


def checkpoint_weights_finite(path):
    return all(torch.isfinite(t).all() for t in load_file(os.path.join(path, "model.safetensors")).values())


# ------------------------------------------------------------------------------------------------------------------
# Divergence
# ------------------------------------------------------------------------------------------------------------------


def test_a_diverging_run_stops_naming_the_step_and_keeps_the_last_good_checkpoint(
    tokenizer_dir, small_corpus, tmp_path, capsys
):
    """lr 1e4: the loss is non-finite from update 4 on. Before: the run went on, exited 0, wrote a NaN final/ and
    NaN checkpoints that rotated the good ones out, and NaN literals in its log."""
    from linformer_hf.training.pretrain import main

    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "r.yaml",
        tokenizer_dir,
        small_corpus,
        out,
        max_steps=12,
        learning_rate=1e4,
        checkpoints_total_limit=1,
        nonfinite_patience=3,
    )
    assert main(["--config", str(recipe), "--no_progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    good = os.path.join(str(out), "checkpoint-2")
    assert err.startswith("error: training diverged at step 6:") and "(steps 4-6)" in err, err
    assert f"The last good checkpoint is {good}" in err and f"--resume_from_checkpoint {good}" in err
    assert "training.learning_rate (now 10000)" in err and "bf16 instead of fp16" in err
    assert not (out / "final").exists()
    assert [os.path.basename(p) for p in list_checkpoints(out)] == ["checkpoint-2"]  # none written over it at 4
    assert checkpoint_weights_finite(good)
    records = strict_json_lines(out / UPDATE_LOG)
    bad = [r for r in records if r.get("step") in (4, 5, 6) and "loss" in r]
    assert [(r["loss"], r["nonfinite"], r["skipped"]) for r in bad] == [(None, ["loss"], True)] * 3
    assert records[-1]["event"] == "diverged"
    assert (out / LOCK_FILE).read_text() == ""  # released: the next run is not told this one was killed


def test_a_run_that_ends_inside_a_streak_of_skipped_updates_publishes_no_final_model(
    tokenizer_dir, small_corpus, tmp_path, capsys
):
    """lr 1e4 for 12 updates with a patience of 10: updates 4-12 are non-finite and skipped, 9 in a row. Before: the
    run reached max_steps, its final validation loss was NaN, it wrote final/ from the weights that give it, and it
    exited 0. After: status 2 and one error line naming the last good checkpoint; no final/, no summary."""
    from linformer_hf.training.pretrain import main

    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "r.yaml", tokenizer_dir, small_corpus, out, max_steps=12, learning_rate=1e4, nonfinite_patience=10
    )
    assert main(["--config", str(recipe), "--no_progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    good = os.path.join(str(out), "checkpoint-2")
    assert err.startswith(
        "error: training diverged: the run ended at step 12 after 9 non-finite updates in a row (steps 4-12, each "
        f"skipped), so {out / 'final'} was not written."
    ), err
    assert f"The last good checkpoint is {good}" in err and f"--resume_from_checkpoint {good}" in err
    assert "training.learning_rate (now 10000)" in err
    assert not (out / "final").exists() and not list(out.glob(".tmp-final*"))
    assert not list(out.glob("summary_step*.json"))
    assert [os.path.basename(p) for p in list_checkpoints(out)] == ["checkpoint-2"]
    records = strict_json_lines(out / UPDATE_LOG)
    assert records[-1]["event"] == "diverged" and records[-1]["error"] == err.removeprefix("error: ")
    assert (out / LOCK_FILE).read_text() == ""


def test_a_run_whose_final_evaluation_is_not_finite_publishes_no_final_model(
    tokenizer_dir, small_corpus, tmp_path, monkeypatch
):
    """Every update finite, but the final validation loss is not (as weights that overflow only on held-out text
    give): no final/, and the error names the loss and the last good checkpoint."""
    original, calls = pretraining.evaluate_mlm, []

    def nan_loss(*args, **kwargs):  # without eval_steps, the only evaluation is the final one
        calls.append(1)
        return {**original(*args, **kwargs), "eval_loss": float("nan")}

    monkeypatch.setattr(pretraining, "evaluate_mlm", nan_loss)
    out = tmp_path / "run"
    with pytest.raises(TrainingDiverged) as err:
        run(tokenizer_dir, small_corpus, out, max_steps=4)
    good = os.path.join(str(out), "checkpoint-4")
    assert str(err.value).startswith("training diverged: the final validation MLM loss at step 4 is nan"), err.value
    assert f"The last good checkpoint is {good}" in str(err.value)
    assert not (out / "final").exists() and len(calls) == 1
    assert (out / LOCK_FILE).read_text() == ""


def test_an_isolated_non_finite_update_is_skipped_not_a_divergence(tokenizer_dir, small_corpus, tmp_path, monkeypatch):
    """One NaN loss (as an fp16 overflow gives): that update is skipped, weights and schedule unchanged, and the run
    goes on to a finite final model; the same NaN on `nonfinite_patience` updates in a row stops it."""
    original, calls = pretraining.masked_lm_loss, {"train": 0}
    nan_at = {3}

    def sometimes_nan(model, batch, num_masked):
        loss = original(model, batch, num_masked)
        if model.training:
            calls["train"] += 1
            if calls["train"] in nan_at:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(pretraining, "masked_lm_loss", sometimes_nan)
    summary = run(tokenizer_dir, small_corpus, tmp_path / "one", max_steps=5, nonfinite_patience=2)
    assert summary["completed_steps"] == 5 and (tmp_path / "one" / "final").is_dir()
    assert checkpoint_weights_finite(tmp_path / "one" / "final")
    records = {r["step"]: r for r in strict_json_lines(tmp_path / "one" / UPDATE_LOG) if "loss" in r}
    assert records[3]["loss"] is None and records[3]["skipped"] and records[3]["lr"] == records[2]["lr"]
    assert all(records[s]["loss"] is not None and "skipped" not in records[s] for s in (1, 2, 4, 5))
    summary_file = json.loads((tmp_path / "one" / "summary_step5.json").read_text())
    assert summary_file["train_losses"]["3"] is None

    calls["train"], nan_at = 0, {3, 4}
    with pytest.raises(TrainingDiverged, match=r"at step 4: .* 2 consecutive updates \(steps 3-4\)"):
        run(tokenizer_dir, small_corpus, tmp_path / "two", max_steps=5, nonfinite_patience=2)


def test_divergence_guard_counts_only_consecutive_bad_updates_and_spikes_when_asked():
    guard = DivergenceGuard(3, advice="a lower lr", resume_hint=resume_hint("--resume", "start over"))
    for step, loss in enumerate([1.0, float("nan"), float("inf"), 1.0, float("nan"), 0.9, float("nan")], start=1):
        guard.after_update(step, loss)  # never 3 in a row
    guard.after_update(8, 1.0, gradients_ok=False)
    with pytest.raises(TrainingDiverged, match="No checkpoint was written"):
        guard.after_update(9, float("nan"))

    spikes = DivergenceGuard(
        3, advice="x", resume_hint=resume_hint("--resume", "start over"), spike_factor=5.0, spike_action="stop"
    )
    spikes.last_good_checkpoint = "ckpt"
    for step in range(1, 12):
        spikes.after_update(step, 2.0)
    spikes.after_update(12, 9.0)  # 4.5 x the median
    with pytest.raises(TrainingDiverged, match=r"loss spike at step 13: 11 is above 5 x .*last good checkpoint is"):
        spikes.after_update(13, 11.0)


def test_a_finished_run_is_refused_when_its_last_update_was_skipped_or_its_final_evaluation_is_not_finite():
    guard = DivergenceGuard(10, advice="a lower lr", resume_hint=resume_hint("--resume", "start over"))
    guard.last_good_checkpoint = "ckpt"
    guard.after_update(1, 2.0)
    guard.check_finished(1, "final/", {"loss": 2.0, "accuracy": 0.5})  # a healthy run: nothing raised
    guard.after_update(2, float("nan"))
    guard.after_update(3, 1.0, gradients_ok=False)
    with pytest.raises(TrainingDiverged, match=r"ended at step 3 after 2 non-finite updates in a row \(steps 2-3"):
        guard.check_finished(3, "final/", {"loss": 2.0})
    guard.after_update(4, 1.5)  # a good update ends the streak
    guard.check_finished(4, "final/", {"loss": 1.5})
    for bad in (float("nan"), float("inf")):
        with pytest.raises(
            TrainingDiverged, match=rf"the final loss at step 4 is {bad}, so final/ was not written. .*is ckpt"
        ):
            guard.check_finished(4, "final/", {"loss": bad, "accuracy": 0.5})


# ------------------------------------------------------------------------------------------------------------------
# Preemption
# ------------------------------------------------------------------------------------------------------------------


def wait_for_update(out, step, proc, timeout=240):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, "the run ended before it was signalled"
        if (out / UPDATE_LOG).exists() and max(losses_by_step(out) or [0]) >= step:
            return
        time.sleep(0.02)
    raise AssertionError(f"no update {step} within {timeout} s")


def test_ctrl_c_finishes_the_update_checkpoints_and_exits_resumable(tokenizer_dir, small_corpus, tmp_path):
    """SIGINT (Ctrl-C) to a one-process run. Before: a KeyboardInterrupt traceback and no checkpoint (all updates
    since the last one lost). After: the update ends, a checkpoint is written, the lock released, the exit status is
    the resumable one, and `latest` continues exactly."""
    signum = signal.SIGINT
    max_steps = 8
    full = run(tokenizer_dir, small_corpus, tmp_path / "full", max_steps=max_steps, checkpointing_steps=None)
    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "r.yaml", tokenizer_dir, small_corpus, out, max_steps=max_steps)
    recipe.write_text(recipe.read_text().replace("checkpointing_steps: 2", "checkpointing_steps: null"))
    proc = subprocess.Popen(
        pretrain_command(recipe), cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for_update(out, 2, proc)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == RESUMABLE_EXIT_CODE, stderr.decode()[-3000:]
    stopped = [r for r in strict_json_lines(out / UPDATE_LOG) if r.get("event") == "stopped"]
    assert len(stopped) == 1 and stopped[0]["signal"] == signal.Signals(signum).name
    step = stopped[0]["step"]
    assert 2 <= step < max_steps
    assert [os.path.basename(p) for p in list_checkpoints(out)] == [f"checkpoint-{step}"]
    assert os.path.isfile(os.path.join(list_checkpoints(out)[0], COMPLETE_MARKER))
    message = stderr.decode().strip().splitlines()[-1]
    assert message.startswith(f"stopped: {signal.Signals(signum).name} received: stopped after update {step}")
    assert "--resume_from_checkpoint latest" in message
    assert (out / LOCK_FILE).read_text() == ""  # released, not left to the kernel
    assert not (out / "final").exists()

    run(
        tokenizer_dir, small_corpus, out, max_steps=max_steps, checkpointing_steps=None, resume_from_checkpoint="latest"
    )
    losses = losses_by_step(out)
    assert sorted(losses) == list(range(1, max_steps + 1))
    for s in losses:
        assert losses[s] == pytest.approx(full["train_losses"][s], abs=1e-6), s


def accelerate_launch(recipe, *extra):
    """`accelerate launch` with two CPU processes (torchrun underneath: it passes SIGTERM on to both)."""
    return [
        python_executable(),
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        "scripts/pretrain.py",
        "--config",
        str(recipe),
        "--no_progress",
        *extra,
    ]


def test_sigterm_under_accelerate_launch_with_two_processes_checkpoints_and_resumes_exactly(
    tokenizer_dir, small_corpus, tmp_path
):
    """SLURM's preemption: SIGTERM to `accelerate launch` (two processes), which passes it on. Before: both processes
    died (status 143) with no checkpoint. After: both stop after the same update (the flag is all-reduced each update),
    save one checkpoint together without deadlock and exit with the resumable status; the resumed run's losses equal
    the uninterrupted two-process run's to 1e-6."""
    max_steps = 40  # about 50 ms an update: the signal lands mid-run
    env = script_env(ACCELERATE_USE_CPU="1", OMP_NUM_THREADS="1")
    recipes = {}
    for name in ("full", "run"):
        recipes[name] = write_recipe(
            tmp_path / f"{name}.yaml",
            tokenizer_dir,
            small_corpus,
            tmp_path / name,
            max_steps=max_steps,
            per_device_train_batch_size=4,
            checkpointing_steps=None,
        )
    full = subprocess.run(
        accelerate_launch(recipes["full"]), cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert full.returncode == 0, full.stderr[-3000:]

    out = tmp_path / "run"
    launcher = subprocess.Popen(
        accelerate_launch(recipes["run"]), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for_update(out, 3, launcher)
        launcher.send_signal(signal.SIGTERM)
        _, stderr = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    stderr = stderr.decode()
    # Each training process says so and exits with the resumable status (the launcher itself reports the signal).
    stopped_lines = [line for line in stderr.splitlines() if line.startswith("stopped: SIGTERM received")]
    assert len(stopped_lines) == 2 and stopped_lines[0] == stopped_lines[1], stderr[-3000:]
    stopped = [r for r in strict_json_lines(out / UPDATE_LOG) if r.get("event") == "stopped"]
    assert len(stopped) == 1 and 3 <= stopped[0]["step"] < max_steps
    (checkpoint,) = list_checkpoints(out)
    assert os.path.basename(checkpoint) == f"checkpoint-{stopped[0]['step']}"
    assert {"rng_state_0.pth", "rng_state_1.pth", COMPLETE_MARKER} <= set(os.listdir(checkpoint))
    assert (out / LOCK_FILE).read_text() == ""

    resumed = subprocess.run(
        accelerate_launch(recipes["run"], "--resume_from_checkpoint", "latest"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    reference, losses = losses_by_step(tmp_path / "full"), losses_by_step(out)
    assert sorted(losses) == list(range(1, max_steps + 1))
    for step in losses:
        assert losses[step] == pytest.approx(reference[step], abs=1e-6), step


# ------------------------------------------------------------------------------------------------------------------
# Attention transfer: the same guard and the same stop
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def transfer_pair(tmp_path_factory):
    from test_transfer import build_pair

    return build_pair(tmp_path_factory.mktemp("transfer"))


def transfer_checkpoints(out) -> list[str]:
    """The names of a transfer's checkpoints (the Trainer's checkpoint-N in its output folder), oldest first."""
    from linformer_hf.training.checkpointing import list_checkpoints
    from linformer_hf.training.transfer import TRANSFER

    return [os.path.basename(path) for path in list_checkpoints(str(out), TRANSFER)]


def test_transfer_stops_on_divergence_and_on_sigterm_with_a_checkpoint(transfer_pair, tmp_path, monkeypatch):
    """Before: a NaN loss trained on (NaN weights saved as the transferred model, NaN in the log), and SIGTERM lost
    every step since the last checkpoint. After: non-finite steps are skipped, `nonfinite_patience` in a row stop the
    run naming the last good checkpoint; SIGTERM writes a checkpoint after the step and raises `Preempted`, and the
    resumed run ends with the weights of an uninterrupted one."""
    from test_transfer import arguments

    from linformer_hf.training import transfer, transfer_trainer
    from linformer_hf.training.errors import Preempted

    original, calls = transfer_trainer.layer_local_loss, {"n": 0}

    def nan_from_step_3(*args, **kwargs):
        calls["n"] += 1
        loss, per_layer = original(*args, **kwargs)
        return (loss * float("nan"), per_layer) if calls["n"] >= 3 else (loss, per_layer)

    monkeypatch.setattr(transfer_trainer, "layer_local_loss", nan_from_step_3)
    out = tmp_path / "diverged"
    with pytest.raises(TrainingDiverged) as err:
        transfer.run_transfer(arguments(transfer_pair, out, layer_steps=8, checkpoint_every=2, nonfinite_patience=3))
    good = transfer.checkpoint_dir(str(out), 2)
    assert "at step 5" in str(err.value) and f"The last good checkpoint is {good}" in str(err.value)
    assert "--projection_learning_rate" in str(err.value)
    assert transfer_checkpoints(out) == [os.path.basename(good)]  # step 4's was not written
    assert not (out / "model.safetensors").exists() and not (out / "transfer_report.json").exists()
    log = strict_json_lines(out / "transfer_log.jsonl")
    assert [(r["step"], r["loss"], r.get("skipped")) for r in log][2:] == [
        (3, None, True),
        (4, None, True),
        (5, None, True),
    ]
    assert (out / LOCK_FILE).read_text() == ""
    monkeypatch.setattr(transfer_trainer, "layer_local_loss", original)

    overrides = dict(layer_steps=6, checkpoint_every=100)
    straight = transfer.run_transfer(arguments(transfer_pair, tmp_path / "straight", **overrides))
    batch = transfer_trainer.training_batch

    def sigterm_at_step_3(streams, tokenizer, args, lengths, step, *rest):
        if step == 2:  # the third step: the signal arrives during it
            os.kill(os.getpid(), signal.SIGTERM)
        return batch(streams, tokenizer, args, lengths, step, *rest)

    monkeypatch.setattr(transfer_trainer, "training_batch", sigterm_at_step_3)
    out = tmp_path / "stopped"
    with pytest.raises(Preempted, match=r"SIGTERM received: stopped after step 3 of 6 with checkpoint .*checkpoint-3"):
        transfer.run_transfer(arguments(transfer_pair, out, **overrides))
    assert transfer_checkpoints(out) == ["checkpoint-3"]
    assert (out / LOCK_FILE).read_text() == ""
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers are given back
    monkeypatch.setattr(transfer_trainer, "training_batch", batch)
    resumed = transfer.run_transfer(arguments(transfer_pair, out, resume="latest", **overrides))
    assert resumed["after"] == straight["after"]
    a, b = load_file(str(tmp_path / "straight" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert all(torch.equal(a[key], b[key]) for key in a)


def test_a_transfer_that_ends_diverging_saves_no_model(transfer_pair, tmp_path, monkeypatch):
    """Learning rates of 1e8 for 8 layer-local and 4 end-to-end steps, a patience of 20: steps 10-12 are non-finite
    and skipped, and the final evaluation is NaN / inf. Before: the transferred model and its report were saved
    from those weights. After: the error names the streak and the last good checkpoint; nothing is saved. A
    non-finite final evaluation alone is refused too."""
    from test_transfer import arguments

    from linformer_hf.training import transfer

    rates = dict(projection_learning_rate=1e8, attention_learning_rate=1e8, end_to_end_learning_rate=1e8)
    out = tmp_path / "diverged"
    with pytest.raises(TrainingDiverged) as err:
        transfer.run_transfer(
            arguments(
                transfer_pair,
                out,
                layer_steps=8,
                end_to_end_steps=4,
                checkpoint_every=2,
                nonfinite_patience=20,
                **rates,
            )
        )
    good = transfer.checkpoint_dir(str(out), 8)
    message = str(err.value)
    assert message.startswith(
        "training diverged: the run ended at step 12 after 3 non-finite updates in a row (steps 10-12, each skipped), "
        f"so the transferred model in {out} was not written."
    ), message
    assert f"The last good checkpoint is {good}; resume from it with --resume {good}" in message
    assert "--projection_learning_rate, now 1e+08" in message
    assert not (out / "model.safetensors").exists() and not (out / "transfer_report.json").exists()
    assert (out / LOCK_FILE).read_text() == ""

    documents = transfer.evaluate_documents

    def nan_cosine(*args, **kwargs):
        return {**documents(*args, **kwargs), "embedding_cosine_mean": float("nan")}

    monkeypatch.setattr(transfer, "evaluate_documents", nan_cosine)
    out = tmp_path / "nan"
    with pytest.raises(
        TrainingDiverged, match=r"^training diverged: the final embedding cosine on held-out documents at step 2 is nan"
    ):
        transfer.run_transfer(arguments(transfer_pair, out, layer_steps=2))
    assert not (out / "model.safetensors").exists() and not (out / "transfer_report.json").exists()


# ------------------------------------------------------------------------------------------------------------------
# Fine-tuning (transformers' Trainer): the guard as a callback
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    from test_training_finetune import pretrained_dir as build

    return build.__wrapped__(tmp_path_factory)


def test_a_diverging_finetune_stops_and_writes_no_best_model(pretrained_dir, tmp_path):
    """lr 1e4 on SST-2. Before: the run ended with status 0, NaN gradients from step 3 on, its log's losses 0.0 (the
    Trainer filters NaN), eval_loss NaN, and best/ and results.json written as for a good run. After: non-finite
    updates are skipped and 3 in a row stop the run with the error; no best/, no results.json, the lock released."""
    from linformer_hf.training.config import FinetuneRecipe, load_recipe
    from linformer_hf.training.finetuning import run_finetuning

    train = sst2_head(tmp_path / "train.tsv", 128)
    out = tmp_path / "run"
    recipe = load_recipe(
        FinetuneRecipe,
        None,
        extra=tiny_finetune_overrides(
            pretrained_dir,
            train,
            out,
            {
                "data.max_eval_samples": 16,
                "training.max_steps": 16,
                "training.per_device_train_batch_size": 8,
                "training.eval_steps": 2,
                "training.learning_rate": 1e4,
                "training.nonfinite_patience": 3,
                "training.logging_steps": 1,
            },
        ),
    )
    with pytest.raises(TrainingDiverged) as err:
        run_finetuning(recipe, show_progress=False)
    message = str(err.value)
    assert "consecutive updates" in message and "training.learning_rate (now 10000)" in message
    assert "--training.overwrite_output_dir true" in message
    assert not (out / "best").exists() and not (out / "results.json").exists()
    assert (out / LOCK_FILE).read_text() == ""
    for checkpoint in out.glob("checkpoint-*"):  # the Trainer's own, written before the divergence
        assert checkpoint_weights_finite(checkpoint)


def test_a_finetune_that_ends_inside_a_streak_of_skipped_updates_writes_no_best_model(pretrained_dir, tmp_path):
    """lr 1e4 on SST-2 with a patience of 20: the gradients are non-finite from update 3 on, each update skipped, until
    the last (8). Before: the run ended with status 0, best/ and results.json written as for a good run. After: the
    error names the streak; no best/, no results.json, the lock released."""
    from linformer_hf.training.config import FinetuneRecipe, load_recipe
    from linformer_hf.training.finetuning import run_finetuning

    train = sst2_head(tmp_path / "train.tsv", 64)
    out = tmp_path / "run"
    recipe = load_recipe(
        FinetuneRecipe,
        None,
        extra=tiny_finetune_overrides(
            pretrained_dir,
            train,
            out,
            {
                "data.max_eval_samples": 16,
                "training.max_steps": 8,
                "training.per_device_train_batch_size": 8,
                "training.eval_steps": 2,
                "training.learning_rate": 1e4,
                "training.nonfinite_patience": 20,
            },
        ),
    )
    with pytest.raises(TrainingDiverged) as err:
        run_finetuning(recipe, show_progress=False)
    message = str(err.value)
    assert message.startswith("training diverged: the run ended at step 8 after ") and "in a row (steps " in message
    assert f"{out / 'best'} or results.json was not written" in message
    assert "--training.overwrite_output_dir true" in message and "training.learning_rate (now 10000)" in message
    assert not (out / "best").exists() and not (out / "results.json").exists()
    assert (out / LOCK_FILE).read_text() == ""


def test_a_finetune_whose_kept_model_evaluates_to_a_non_finite_loss_writes_no_best_model(
    pretrained_dir, tmp_path, monkeypatch
):
    """Every update finite: the run publishes best/ and results.json. The same run whose kept model gives a NaN
    validation loss (patched in) publishes neither, and says why."""
    import transformers

    from linformer_hf.training.config import FinetuneRecipe, load_recipe
    from linformer_hf.training.finetuning import run_finetuning

    train = sst2_head(tmp_path / "train.tsv", 64)

    def recipe(out):
        settings = {"data.max_eval_samples": 8, "training.max_steps": 4, "training.eval_steps": 2}
        return load_recipe(FinetuneRecipe, None, extra=tiny_finetune_overrides(pretrained_dir, train, out, settings))

    healthy = tmp_path / "healthy"
    run_finetuning(recipe(healthy), show_progress=False)
    assert (healthy / "best" / "config.json").is_file() and (healthy / "results.json").is_file()

    predict = transformers.Trainer.predict

    def nan_loss(self, *args, **kwargs):
        output = predict(self, *args, **kwargs)
        return output._replace(metrics={**output.metrics, "test_loss": float("nan")})

    monkeypatch.setattr(transformers.Trainer, "predict", nan_loss)
    out = tmp_path / "nan"
    with pytest.raises(TrainingDiverged, match=r"^training diverged: the final validation loss at step 4 is nan, so "):
        run_finetuning(recipe(out), show_progress=False)
    assert not (out / "best").exists() and not (out / "results.json").exists()
    assert (out / LOCK_FILE).read_text() == ""


def test_a_skipped_finetuning_update_leaves_the_weights_and_the_schedule(pretrained_dir, tmp_path, monkeypatch):
    """One update with non-finite gradients (the 3rd of 6). Before: its weights were kept, but the Trainer stepped
    the learning-rate schedule past it. After: the 4th update runs at the 3rd's learning rate, and the run ends."""
    import transformers

    from linformer_hf.training import guards
    from linformer_hf.training.config import FinetuneRecipe, load_recipe
    from linformer_hf.training.finetuning import run_finetuning

    calls, original = {"n": 0}, guards.gradients_finite

    def third_update_bad(parameters):
        calls["n"] += 1
        return False if calls["n"] == 3 else original(parameters)

    learning_rates, log = {}, transformers.Trainer.log

    def record(self, logs, *args, **kwargs):
        if "learning_rate" in logs:
            learning_rates[self.state.global_step] = logs["learning_rate"]
        return log(self, logs, *args, **kwargs)

    monkeypatch.setattr(guards, "gradients_finite", third_update_bad)
    monkeypatch.setattr(transformers.Trainer, "log", record)
    overrides = tiny_finetune_overrides(
        pretrained_dir,
        sst2_head(tmp_path / "train.tsv", 64),
        tmp_path / "run",
        {
            "data.max_eval_samples": 8,
            "training.max_steps": 6,
            "training.per_device_train_batch_size": 8,
            "training.warmup_ratio": 0.0,
            "training.logging_steps": 1,
            "training.save_best": False,
        },
    )
    result = run_finetuning(load_recipe(FinetuneRecipe, None, extra=overrides), show_progress=False)
    assert result["steps"] == 6 and sorted(learning_rates) == [1, 2, 3, 4, 5, 6]
    lr = [learning_rates[step] for step in range(1, 7)]
    assert lr[0] > lr[1] > lr[2] and lr[3] == lr[2] and lr[3] > lr[4] > lr[5], lr  # the schedule waited one update


@pytest.mark.parametrize(
    "training, message",
    [
        ({"nonfinite_patience": 0}, r"training.nonfinite_patience must be >= 1, got 0"),
        ({"loss_spike_factor": 0.5}, r"training.loss_spike_factor must be > 1 \(or null: no spike rule\), got 0.5"),
        ({"loss_spike_action": "explode"}, r"training.loss_spike_action must be warn or stop, got 'explode'"),
    ],
)
def test_guard_settings_are_checked_at_load(training, message):
    from training_utils import tiny_pretrain_overrides

    from linformer_hf.training.config import ConfigError, PretrainRecipe, load_recipe

    overrides = tiny_pretrain_overrides("unused-tokenizer", "unused-output", max_steps=10, **training)
    with pytest.raises(ConfigError, match=message):
        load_recipe(PretrainRecipe, None, extra=overrides)
