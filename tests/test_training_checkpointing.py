"""training/checkpointing.py: no run loses its work or takes another's. The output-directory policy and lock, the
recipe a checkpoint records, atomic checkpoints with fallback past a torn or corrupt one, the update log, and kills at
random points (and during a save) that resume to the losses of an uninterrupted run."""

import json
import os
import random
import re
import shutil
import signal
import subprocess
import time

import pytest
import torch
import yaml
from prefork import python_executable
from training_utils import REPO, WIKITEXT, lock_held_by_another_process, script_env, tiny_pretrain_overrides

from linformer_hf.training.checkpointing import (
    COMPLETE_MARKER,
    LOCK_FILE,
    RECIPE_FILE,
    UPDATE_LOG,
    checkpoint_problem,
    list_checkpoints,
    read_update_log,
)
from linformer_hf.training.config import ConfigError, PretrainRecipe, apply_overrides, load_recipe
from linformer_hf.training.pretraining import run_pretraining


@pytest.fixture(scope="module")
def transfer_pair(tmp_path_factory):
    from test_transfer import build_pair

    return build_pair(tmp_path_factory.mktemp("transfer"))


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    out = tmp_path_factory.mktemp("tokenizer")
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(out), vocab_size=1000, model_max_length=64)
    return str(out)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "wiki_head.txt"
    with open(WIKITEXT, encoding="utf-8") as src:
        path.write_text("".join(line for _, line in zip(range(400), src)), encoding="utf-8")
    return str(path)


def overrides(tokenizer_dir, corpus, out, **training):
    """A tiny run: 40 training blocks of 64 tokens (5 batches an epoch), dropout on, a checkpoint every 2 updates."""
    o = tiny_pretrain_overrides(tokenizer_dir, out, **{"max_steps": 8, "checkpointing_steps": 2, **training})
    o.update({"data.train_files": [corpus], "data.max_train_blocks": 40, "data.max_eval_blocks": 16})
    return o


def run(tokenizer_dir, corpus, out, **training):
    return run_pretraining(
        load_recipe(PretrainRecipe, None, extra=overrides(tokenizer_dir, corpus, out, **training)), show_progress=False
    )


def losses_by_step(output_dir):
    """Every update's loss from train_log.jsonl; a step logged by a killed segment and again after the resume must
    agree (the resume reproduces it)."""
    found = {}
    for record in read_update_log(output_dir):
        if "loss" in record:
            step = record["step"]
            assert found.setdefault(step, record["loss"]) == pytest.approx(record["loss"], abs=1e-6), step
    return found


def test_a_checkpoint_made_before_a_data_field_existed_resumes_while_the_field_is_at_its_default(
    tokenizer_dir, small_corpus, tmp_path, monkeypatch
):
    """A run checkpointed by an older version (its recipe record lacks a newer data field) resumes after an upgrade;
    the same field set to something else is a difference."""
    from linformer_hf.training import pretraining

    current = pretraining.recipe_fingerprint

    def before_input_length_existed(*args, **kwargs):
        fingerprint = current(*args, **kwargs)
        del fingerprint["must_match"]["data.input_length"]
        return fingerprint

    out = tmp_path / "run"
    with monkeypatch.context() as patched:
        patched.setattr(pretraining, "recipe_fingerprint", before_input_length_existed)
        run(tokenizer_dir, small_corpus, out, max_steps=4, stop_after_steps=2)
    extra = overrides(tokenizer_dir, small_corpus, out, max_steps=4, resume_from_checkpoint="latest")
    with pytest.raises(ConfigError, match=r"data.input_length: '\(absent\)' in the checkpoint, 32 now"):
        run_pretraining(
            load_recipe(PretrainRecipe, None, extra={**extra, "data.input_length": 32}), show_progress=False
        )
    assert run(tokenizer_dir, small_corpus, out, max_steps=4, resume_from_checkpoint="latest")["completed_steps"] == 4


def test_a_resume_takes_the_recipes_learning_rate_weight_decay_and_adam_settings(tokenizer_dir, small_corpus, tmp_path):
    """Before, the Trainer's loaded optimizer and schedule kept the checkpoint's values, while the resume said it went
    on with the new schedule: a lowered learning rate after a divergence changed nothing."""
    new = dict(learning_rate=4e-3, weight_decay=0.5, adam_beta2=0.9, adam_epsilon=1e-6)  # the default: 2e-3
    fresh = tmp_path / "fresh"
    run(tokenizer_dir, small_corpus, fresh, max_steps=4, **new)
    out = tmp_path / "run"
    run(tokenizer_dir, small_corpus, out, max_steps=4, stop_after_steps=2)
    run(tokenizer_dir, small_corpus, out, max_steps=4, resume_from_checkpoint="latest", **new)

    def rates(folder):
        return {r["step"]: r["lr"] for r in read_update_log(folder) if "lr" in r}

    assert rates(out)[1] == pytest.approx(rates(fresh)[1] / 2)  # before the resume: the old rate
    for step in (3, 4):  # after: the new rate's schedule at that update
        assert rates(out)[step] == pytest.approx(rates(fresh)[step], rel=1e-9), step
    saved = torch.load(out / "checkpoint-4" / "optimizer.pt", weights_only=True)["param_groups"]
    assert saved[0]["weight_decay"] == 0.5 and saved[1]["weight_decay"] == 0.0
    assert all(g["betas"] == (0.9, 0.9) or list(g["betas"]) == [0.9, 0.9] for g in saved)
    assert all(g["eps"] == 1e-6 for g in saved)


def test_resuming_an_earlier_checkpoint_sets_the_later_path_aside_and_the_summary_covers_the_whole_path(
    tokenizer_dir, small_corpus, tmp_path
):
    """Before, `latest` went back to the abandoned path's newer checkpoint (and published its final model), the new
    path's checkpoint-4 was written over the old one's, and a resumed run's summary held its last segment only."""
    out = tmp_path / "run"
    first = run(tokenizer_dir, small_corpus, out, max_steps=6, eval_steps=3)
    branch = dict(max_steps=6, eval_steps=3, max_grad_norm=0.5)  # another path from update 2
    # with the trailing slash of a shell's completion (before, taken for another folder's checkpoint: nothing was
    # set aside, and the new path wrote over the old one)
    earlier = str(out / "checkpoint-2") + "/"
    run(tokenizer_dir, small_corpus, out, **branch, stop_after_steps=4, resume_from_checkpoint=earlier)
    aside = [p for p in out.iterdir() if p.name.startswith("superseded-after-step2-")]
    assert len(aside) == 1
    assert sorted(p.name for p in aside[0].iterdir()) == ["checkpoint-4", "checkpoint-6", "final", "summary_step6.json"]
    resumed = run(tokenizer_dir, small_corpus, out, **branch, resume_from_checkpoint="latest")
    assert resumed["resumed_from"] == str(out / "checkpoint-4")  # the new path's
    assert sorted(resumed["train_losses"]) == [1, 2, 3, 4, 5, 6] and sorted(resumed["evals"]) == [0, 3, 6]
    assert resumed["train_losses"][1] == first["train_losses"][1]  # the shared start
    assert resumed["train_losses"][4] != first["train_losses"][4]  # the new path's (its update 3 clipped otherwise)
    assert resumed["train_seconds"] > 0 and json.loads((out / "summary_step6.json").read_text())["train_losses"]


def test_two_branches_off_one_checkpoint_within_a_second_are_set_aside_apart(tmp_path, monkeypatch):
    """The folder is named by the step and the second: a second branch off the same checkpoint within that second
    (a tiny run, a stop after one update) failed with FileExistsError and moved nothing. Now it gets <name>.2."""
    from linformer_hf.training import checkpointing

    def write_checkpoint(step):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))

    monkeypatch.setattr(checkpointing.time, "strftime", lambda form: "20260101-120000")
    for step in (2, 4):
        write_checkpoint(step)
    first = checkpointing.set_aside_later_work(str(tmp_path), str(tmp_path / "checkpoint-2"), lambda step: [])
    write_checkpoint(3)  # the first branch's
    second = checkpointing.set_aside_later_work(str(tmp_path), str(tmp_path / "checkpoint-2"), lambda step: [])
    assert os.path.basename(first) == "superseded-after-step2-20260101-120000" and second == first + ".2"
    assert os.listdir(first) == ["checkpoint-4"] and os.listdir(second) == ["checkpoint-3"]
    assert all(re.fullmatch(checkpointing.SUPERSEDED_PATTERN, os.path.basename(f)) for f in (first, second))


def test_a_run_resumed_from_another_folders_checkpoint_keeps_that_folders_history_through_later_resumes(
    tokenizer_dir, small_corpus, tmp_path
):
    """Folder b starts from a's checkpoint-2: its summaries hold a's first updates and evaluation, also after b is
    resumed from its own checkpoint (before, the second resume read b's log only: updates 1-2 and eval 0 vanished)."""
    a, b = tmp_path / "a", tmp_path / "b"
    whole = run(tokenizer_dir, small_corpus, a, max_steps=6, eval_steps=3)
    schedule = dict(max_steps=6, eval_steps=3)
    first = run(
        tokenizer_dir, small_corpus, b, **schedule, stop_after_steps=4, resume_from_checkpoint=str(a / "checkpoint-2")
    )
    assert sorted(first["train_losses"]) == [1, 2, 3, 4]
    assert not [p for p in a.iterdir() if p.name.startswith("superseded")]  # a is not touched
    last = run(tokenizer_dir, small_corpus, b, **schedule, resume_from_checkpoint="latest")
    assert last["train_losses"] == pytest.approx(whole["train_losses"], abs=1e-6)
    assert sorted(last["evals"]) == [0, 3, 6]


def test_a_run_stopped_by_its_time_budget_leaves_a_checkpoint_to_go_on_from(tokenizer_dir, small_corpus, tmp_path):
    """Before, it left only final/: going on with more time or more updates was refused for want of a checkpoint."""
    out = tmp_path / "run"
    stopped = run(tokenizer_dir, small_corpus, out, max_steps=4, max_train_minutes=0)
    assert stopped["stopped_by_time_budget"] and stopped["completed_steps"] == 1
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-1"]
    going_on = run(tokenizer_dir, small_corpus, out, max_steps=4, resume_from_checkpoint="latest")
    assert going_on["completed_steps"] == 4 and sorted(going_on["train_losses"]) == [1, 2, 3, 4]


def test_a_run_whose_data_moved_is_told_how_to_go_on_and_the_way_works(tokenizer_dir, small_corpus, tmp_path):
    """A record knows its data by path: moved data is refused, with the link that resumes it (and it does)."""
    out = tmp_path / "run"
    data = tmp_path / "data"
    data.mkdir()
    old = data / "corpus.txt"
    shutil.copy(small_corpus, old)
    run(tokenizer_dir, str(old), out, max_steps=4, stop_after_steps=2)
    moved = tmp_path / "moved.txt"
    os.replace(old, moved)
    with pytest.raises(ConfigError, match=r"data.train_files: .* If only files moved .* \(ln -s NEW OLD\)"):
        run(tokenizer_dir, str(moved), out, max_steps=4, resume_from_checkpoint="latest")
    os.symlink(moved, old)
    assert run(tokenizer_dir, str(old), out, max_steps=4, resume_from_checkpoint="latest")["completed_steps"] == 4
    # a difference that is not a location gets no such hint
    with pytest.raises(ConfigError, match="training.seed") as refused:
        run(tokenizer_dir, str(old), tmp_path / "run", max_steps=6, seed=7, resume_from_checkpoint="latest")
    assert "ln -s" not in str(refused.value)


# ------------------------------------------------------------------------------------------------------------------
# whose output directory
# ------------------------------------------------------------------------------------------------------------------


def test_a_used_output_dir_is_refused_unless_resumed_or_overwritten(tokenizer_dir, small_corpus, tmp_path):
    out = tmp_path / "run"
    first = run(tokenizer_dir, small_corpus, out, max_steps=4)
    assert [os.path.basename(p) for p in list_checkpoints(out)] == ["checkpoint-2", "checkpoint-4"]

    # A second run, not resuming: refused before any work, the first run's outputs untouched.
    with pytest.raises(ConfigError) as err:
        run(tokenizer_dir, small_corpus, out, max_steps=6, seed=7)
    message = str(err.value)
    assert f"training.output_dir={out} is not empty" in message and "checkpoints" in message and "final" in message
    assert "--resume_from_checkpoint latest" in message and "--training.overwrite_output_dir true" in message
    assert [os.path.basename(p) for p in list_checkpoints(out)] == ["checkpoint-2", "checkpoint-4"]

    # `latest` finding the state of a run with another recipe says so, naming every difference.
    with pytest.raises(ConfigError) as err:
        run(
            tokenizer_dir,
            small_corpus,
            out,
            max_steps=6,
            seed=7,
            per_device_train_batch_size=4,
            resume_from_checkpoint="latest",
        )
    message = str(err.value)
    assert "(checkpoint-4) was written by another run" in message
    assert "training.seed: 42 in the checkpoint, 7 now" in message
    assert "training.per_device_train_batch_size: 8 in the checkpoint, 4 now" in message
    with pytest.raises(ConfigError, match=r"model.hidden_size: 32 in the checkpoint, 48 now"):
        run_pretraining(
            load_recipe(
                PretrainRecipe,
                None,
                extra={
                    **overrides(tokenizer_dir, small_corpus, out, max_steps=6, resume_from_checkpoint="latest"),
                    "model.config": {"hidden_size": 48},
                },
            ),
            show_progress=False,
        )
    with pytest.raises(ConfigError, match=r"data.block_size: 64 in the checkpoint, 32 now"):
        run_pretraining(
            load_recipe(
                PretrainRecipe,
                None,
                extra={
                    **overrides(tokenizer_dir, small_corpus, out, max_steps=6, resume_from_checkpoint="latest"),
                    "data.block_size": 32,
                },
            ),
            show_progress=False,
        )
    # ... and one past this run's max_steps is not taken as this run's.
    with pytest.raises(ConfigError, match=r"at step 4, past training.max_steps=3"):
        run(tokenizer_dir, small_corpus, out, max_steps=3, resume_from_checkpoint="latest")

    # Overwrite: the earlier run's checkpoints and final model are gone, so nothing of it is resumed or reported.
    second = run(
        tokenizer_dir, small_corpus, out, max_steps=3, checkpointing_steps=3, seed=7, overwrite_output_dir=True
    )
    assert [os.path.basename(p) for p in list_checkpoints(out)] == ["checkpoint-3"]
    assert json.loads((out / "final" / "eval_results.json").read_text())["step"] == 3
    assert second["train_losses"][1] != pytest.approx(first["train_losses"][1], abs=1e-6)
    assert not (out / "summary_step4.json").exists()
    with pytest.raises(ConfigError, match="overwrite_output_dir deletes the checkpoints"):
        load_recipe(
            PretrainRecipe,
            None,
            extra=overrides(
                tokenizer_dir, small_corpus, out, overwrite_output_dir=True, resume_from_checkpoint="latest"
            ),
        )


def test_a_checkpoint_of_the_loop_pretraining_ran_on_before_is_refused_saying_what_to_do(
    tokenizer_dir, small_corpus, tmp_path
):
    """Pretraining ran on its own loop before the Trainer; the Trainer cannot resume that loop's checkpoints/step_N.
    A resume of one, by `latest` or by its folder, is refused before any work, naming the fix; nothing is deleted."""
    out = tmp_path / "run"
    checkpoint = out / "checkpoints" / "step_4"  # as the loop left it: accelerate's save_state and its own state
    checkpoint.mkdir(parents=True)
    (checkpoint / "random_states_0.pkl").write_bytes(b"")
    (checkpoint / "trainer_state.json").write_text('{"completed_steps": 4, "epoch": 0}')
    for spec in ("latest", str(checkpoint)):
        with pytest.raises(ConfigError) as err:
            run(tokenizer_dir, small_corpus, out, resume_from_checkpoint=spec)
        message = str(err.value)
        assert message.startswith(f"{checkpoint} is a checkpoint of the hand-written loop pretraining ran on"), message
        assert "at commit bccc055 or earlier" in message and "--training.overwrite_output_dir true" in message
    with pytest.raises(ConfigError, match="is not empty"):  # nor is a new run there taken as a start over
        run(tokenizer_dir, small_corpus, out)
    assert sorted(os.listdir(checkpoint)) == ["random_states_0.pkl", "trainer_state.json"]


def test_an_output_dir_that_cannot_be_written_fails_before_the_work(tokenizer_dir, small_corpus, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(ConfigError, match=rf"training.output_dir={blocker}/run cannot be written: Not a directory"):
        run(tokenizer_dir, small_corpus, blocker / "run")


def test_a_live_writer_holds_the_dir_and_a_killed_ones_lock_is_taken_over(
    tokenizer_dir, small_corpus, tmp_path, caplog
):
    out = tmp_path / "run"
    out.mkdir()
    with lock_held_by_another_process(out) as holder:
        with pytest.raises(ConfigError) as err:
            run(tokenizer_dir, small_corpus, out, max_steps=3)
        message = str(err.value)
        assert f"Another run is writing to {out}" in message and f"pid {holder.pid}" in message
        assert f"kill {holder.pid}" in message
        # what a live run's folder holds (its log, a checkpoint being written) is not taken for an earlier run's
        # or a torn one: before, a rerun was told to resume, and a resume that its checkpoint was torn
        (out / UPDATE_LOG).write_text("{}\n")
        (out / "checkpoint-2").mkdir()
        for resume in (None, "latest"):
            with pytest.raises(ConfigError, match=rf"Another run is writing to {out}: .*pid {holder.pid}"):
                run(tokenizer_dir, small_corpus, out, max_steps=3, resume_from_checkpoint=resume)
        shutil.rmtree(out / "checkpoint-2")
        os.remove(out / UPDATE_LOG)
    with caplog.at_level("WARNING"):
        summary = run(tokenizer_dir, small_corpus, out, max_steps=3)
    assert summary["completed_steps"] == 3
    assert any(f"Taking over the lock of the run of pid {holder.pid}" in r.getMessage() for r in caplog.records)
    assert (out / LOCK_FILE).read_text() == ""  # released at the end


# ------------------------------------------------------------------------------------------------------------------
# atomic checkpoints; a torn or corrupt newest one is skipped
# ------------------------------------------------------------------------------------------------------------------


def test_latest_falls_back_past_corrupt_and_torn_checkpoints(tokenizer_dir, small_corpus, tmp_path, caplog):
    full = run(tokenizer_dir, small_corpus, tmp_path / "full")
    out = tmp_path / "part"
    run(tokenizer_dir, small_corpus, out, stop_after_steps=6)
    checkpoints = list_checkpoints(out)
    assert [os.path.basename(p) for p in checkpoints] == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    for path in checkpoints:
        marker = json.loads(open(os.path.join(path, COMPLETE_MARKER)).read())["files"]
        assert {"trainer_state.json", RECIPE_FILE, "model.safetensors"} <= set(marker)

    # checkpoint-6: same size, different bytes (corrupt); checkpoint-4: no completion marker (as a save cut short
    # leaves it).
    weights = os.path.join(checkpoints[2], "model.safetensors")
    data = bytearray(open(weights, "rb").read())
    data[-100:] = bytes(100)
    open(weights, "wb").write(bytes(data))
    os.remove(os.path.join(checkpoints[1], COMPLETE_MARKER))

    with pytest.raises(ConfigError, match=r"checkpoint-6 is incomplete or corrupt: model.safetensors is corrupt"):
        run(tokenizer_dir, small_corpus, out, resume_from_checkpoint=checkpoints[2])
    with caplog.at_level("WARNING"):
        resumed = run(tokenizer_dir, small_corpus, out, resume_from_checkpoint="latest")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("checkpoint-6: model.safetensors is corrupt" in w and w.endswith("checkpoint-2.") for w in warnings)
    assert any(f"checkpoint-4: it has no {COMPLETE_MARKER}" in w for w in warnings), warnings
    assert resumed["resumed_from"].endswith("checkpoint-2")
    for step in range(3, 9):
        assert resumed["train_losses"][step] == pytest.approx(full["train_losses"][step], abs=1e-6), step
    # The torn and corrupt checkpoints were replaced by whole ones of the resumed run.
    assert all(os.path.isfile(os.path.join(p, COMPLETE_MARKER)) for p in list_checkpoints(out))
    # The update log kept every segment: 1-6, then 3-8 after the resume, agreeing where they overlap.
    assert losses_by_step(out) == pytest.approx(full["train_losses"], abs=1e-6)
    assert [r["step"] for r in read_update_log(out) if r.get("event") == "start"] == [0, 2]


def test_a_run_killed_after_its_last_checkpoint_resumes_to_its_final_model_without_another_update(
    tokenizer_dir, small_corpus, tmp_path
):
    """The last update's checkpoint is written before final/: a kill between them is resumed by evaluating and
    publishing that checkpoint's model (the Trainer, resumed there, would make one update more)."""
    out = tmp_path / "run"
    whole = run(tokenizer_dir, small_corpus, out, max_steps=4)
    shutil.rmtree(out / "final")  # as the kill left the run
    os.remove(out / "summary_step4.json")
    resumed = run(tokenizer_dir, small_corpus, out, max_steps=4, resume_from_checkpoint="latest")
    # no update made, and the summary still holds the run's (from its update log)
    assert resumed["completed_steps"] == 4 and resumed["train_losses"] == whole["train_losses"]
    assert sum(r.get("event") == "start" for r in read_update_log(out)) == 2
    assert [r["step"] for r in read_update_log(out) if "loss" in r and "event" not in r] == [1, 2, 3, 4]
    assert resumed["final_eval"]["eval_loss"] == whole["final_eval"]["eval_loss"]
    assert max(losses_by_step(out)) == 4 and (out / "final" / "config.json").is_file()


# ------------------------------------------------------------------------------------------------------------------
# Fault injection: SIGKILL at random points and during a save, resume with `latest`, compare with an uninterrupted run
# ------------------------------------------------------------------------------------------------------------------

KILL_DURING_SAVE = """
import os, runpy, signal, sys
from linformer_hf.training import checkpointing

write_marker, target = checkpointing.write_completion_marker, sys.argv[1]

def killed_before_marker(path):  # the checkpoint's files are written, its marker is not
    if path.endswith(target):
        os.kill(os.getpid(), signal.SIGKILL)
    write_marker(path)

checkpointing.write_completion_marker = killed_before_marker
sys.argv = ["scripts/pretrain.py"] + sys.argv[2:]
runpy.run_path("scripts/pretrain.py", run_name="__main__")
"""


def pretrain_command(recipe_path, *extra):
    return [python_executable(), "scripts/pretrain.py", "--config", str(recipe_path), "--no_progress", *extra]


def subprocess_env():
    # The same thread count as this process: the float reductions, hence the losses, are then bit-identical.
    return script_env(OMP_NUM_THREADS=str(torch.get_num_threads()))


def write_recipe(path, tokenizer_dir, corpus, out, **training):
    path.write_text(yaml.safe_dump(apply_overrides({}, overrides(tokenizer_dir, corpus, out, **training))))
    return path


def test_sigkill_during_a_save_and_at_a_random_point_then_resume_matches(tokenizer_dir, small_corpus, tmp_path):
    """One run in three segments: killed while saving checkpoint-4, resumed and killed at a random moment after a random
    update (while saving, evaluating, logging or computing), resumed to the end. Every update's loss, from every
    segment, equals the uninterrupted run's."""
    max_steps = 8
    full = run(tokenizer_dir, small_corpus, tmp_path / "full", max_steps=max_steps)["train_losses"]
    out = tmp_path / "run"
    recipe = write_recipe(tmp_path / "run.yaml", tokenizer_dir, small_corpus, out, max_steps=max_steps)

    # 1) killed during the save of checkpoint-4: its files are written, its marker is not.
    killed = subprocess.run(
        [python_executable(), "-c", KILL_DURING_SAVE, "checkpoint-4", *pretrain_command(recipe)[2:]],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert {os.path.basename(p): checkpoint_problem(p) is None for p in list_checkpoints(out)} == {
        "checkpoint-2": True,
        "checkpoint-4": False,
    }

    # 2) resumed (from checkpoint-2), then killed at a random moment after a random update past the first segment's.
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    kill_after, delay = rng.randrange(5, max_steps), rng.uniform(0.0, 0.3)
    context = f"random seed {seed}: second segment killed {delay:.2f} s after update {kill_after}"
    proc = subprocess.Popen(
        pretrain_command(recipe, "--resume_from_checkpoint", "latest"),
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None:
            if max(losses_by_step(out)) >= kill_after:
                break
            time.sleep(0.01)
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    # 3) resumed to the end (unless the kill came after it: then there is nothing left to do).
    if not (out / "final").exists():
        resumed = subprocess.run(
            pretrain_command(recipe, "--resume_from_checkpoint", "latest"),
            cwd=REPO,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert resumed.returncode == 0, f"{context}\n{resumed.stderr[-3000:]}"
    losses = losses_by_step(out)  # every segment, agreeing where they overlap
    assert sorted(losses) == list(range(1, max_steps + 1)), context
    for step in losses:
        assert losses[step] == pytest.approx(full[step], abs=1e-6), f"{context}: step {step}"
    assert len([r for r in read_update_log(out) if r.get("event") == "start"]) >= 2, context
    assert all(checkpoint_problem(p) is None for p in list_checkpoints(out)), context
    assert json.loads((out / "final" / "eval_results.json").read_text())["step"] == max_steps


# ------------------------------------------------------------------------------------------------------------------
# The orphan of a SIGKILLed `accelerate launch` keeps the lock
# ------------------------------------------------------------------------------------------------------------------


def test_lock_catches_the_training_process_a_killed_accelerate_launch_leaves(tokenizer_dir, small_corpus, tmp_path):
    out = tmp_path / "run"
    recipe = write_recipe(
        tmp_path / "r.yaml", tokenizer_dir, small_corpus, out, max_steps=5000, checkpointing_steps=None
    )
    launcher = subprocess.Popen(
        [
            python_executable(),
            "-m",
            "accelerate.commands.launch",
            "--cpu",
            "--num_processes",
            "1",
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            *pretrain_command(recipe)[1:],
        ],
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    orphan = None
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (out / UPDATE_LOG).exists():
            assert launcher.poll() is None, "accelerate launch ended early"
            time.sleep(0.1)
        orphan = json.loads((out / LOCK_FILE).read_text())["pid"]
        assert orphan != launcher.pid  # the lock is the training process', not the launcher's
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        os.kill(orphan, 0)  # still running, and writing
        with pytest.raises(ConfigError) as err:
            run(tokenizer_dir, small_corpus, out, max_steps=5000, checkpointing_steps=None, overwrite_output_dir=True)
        assert f"pid {orphan}" in str(err.value) and "accelerate launch" in str(err.value)
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGKILL)
            launcher.wait()
        if orphan is not None:
            try:
                os.kill(orphan, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert (out / UPDATE_LOG).exists()  # the refused run deleted nothing of the live one's


# ------------------------------------------------------------------------------------------------------------------
# Attention transfer: the same policy (refuse a used output_dir unless resumed or overwritten), whole checkpoints only
# ------------------------------------------------------------------------------------------------------------------


def test_transfer_refuses_a_used_output_dir_and_never_resumes_a_torn_checkpoint(transfer_pair, tmp_path, monkeypatch):
    from test_transfer import arguments
    from transformers import Trainer

    from linformer_hf.training.checkpointing import list_checkpoints
    from linformer_hf.training.transfer import TRANSFER, run_transfer

    settings = dict(layer_steps=6, checkpoint_every=2)
    straight = run_transfer(arguments(transfer_pair, tmp_path / "straight", **settings))
    out = tmp_path / "run"

    save_checkpoint = Trainer._save_checkpoint

    def killed_during_the_second_save(self, model, trial):
        save_checkpoint(self, model, trial)
        if self.state.global_step == 4:
            os.remove(out / "checkpoint-4" / "optimizer.pt")  # a kill mid-save leaves a torn folder
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_save_checkpoint", killed_during_the_second_save)
    with pytest.raises(KeyboardInterrupt):
        run_transfer(arguments(transfer_pair, out, **settings))
    monkeypatch.undo()
    log = (out / "transfer_log.jsonl").read_text()

    # A new run there, not resuming: refused before any work, the killed run's log and checkpoints kept.
    with pytest.raises(FileExistsError, match=r"is not empty .*--resume latest.*--overwrite_output_dir"):
        run_transfer(arguments(transfer_pair, out, **settings))
    assert (out / "transfer_log.jsonl").read_text() == log

    # `latest` is the last whole checkpoint (step 2), and the resumed run ends where the uninterrupted one did.
    resumed = run_transfer(arguments(transfer_pair, out, resume="latest", **settings))
    assert resumed["after"] == straight["after"]
    assert not any(name.startswith((".tmp-", ".trash-")) for name in os.listdir(out))
    checkpoints = list_checkpoints(str(out), TRANSFER)
    # the newest two (--checkpoints_to_keep), the last step's among them: a run with more steps goes on from it
    assert [os.path.basename(path) for path in checkpoints] == ["checkpoint-4", "checkpoint-6"]
    assert all(os.path.isfile(os.path.join(path, COMPLETE_MARKER)) for path in checkpoints)

    # Starting over is explicit, and cannot be combined with a resume.
    again = run_transfer(arguments(transfer_pair, out, overwrite_output_dir=True, **settings))
    assert again["after"] == straight["after"] and "before" in again
    with pytest.raises(ValueError, match="--overwrite_output_dir deletes the checkpoints"):
        arguments(transfer_pair, out, overwrite_output_dir=True, resume="latest", **settings)


# ------------------------------------------------------------------------------------------------------------------
# The benchmark: an earlier run's results are refused, not overwritten; its CSVs are whole or absent
# ------------------------------------------------------------------------------------------------------------------


def test_benchmark_refuses_an_earlier_runs_results_before_measuring(tmp_path, capsys):
    from benchmarks.cli import main

    out = tmp_path / "bench"
    out.mkdir()
    (out / "results.csv").write_text("the earlier run's rows")
    assert main(["--preset", "quick", "--output_dir", str(out)]) == 2
    err = capsys.readouterr()
    assert f"error: {out} is not empty (it holds results.csv)" in err.err and "--overwrite" in err.err
    assert "machine:" not in err.out  # refused before the run started
    assert os.listdir(out) == ["results.csv"] and (out / "results.csv").read_text() == "the earlier run's rows"


def test_benchmark_csv_stopped_while_written_keeps_the_previous_whole_file(tmp_path, monkeypatch):
    """results_partial.csv is rewritten after every length: a stop in the middle of a rewrite used to leave a
    truncated file, losing the rows measured before."""
    from benchmarks import results

    rows = [
        results.BenchmarkRow(mode=results.Mode.INFERENCE, model="linformer", n=n, k=8, time_s=0.1) for n in (16, 32)
    ]
    path = tmp_path / "results_partial.csv"
    results.write_csv(rows[:1], str(path))
    before = path.read_text()
    cells = iter(range(10**6))
    to_text = results._to_text

    def stopped_part_way(value):
        if next(cells) == 3:  # in the first row: the file held the header only
            raise KeyboardInterrupt
        return to_text(value)

    monkeypatch.setattr(results, "_to_text", stopped_part_way)
    with pytest.raises(KeyboardInterrupt):
        results.write_csv(rows, str(path))
    assert path.read_text() == before and os.listdir(tmp_path) == ["results_partial.csv"]
    monkeypatch.undo()
    assert results.read_csv(str(path)) == rows[:1]


# ------------------------------------------------------------------------------------------------------------------
# Replication: a saved result is reused only for the recipe it was made with
# ------------------------------------------------------------------------------------------------------------------


def test_replication_rerun_with_a_changed_plan_does_not_report_the_old_results(tmp_path, monkeypatch):
    """A plan changed and rerun into the same output_dir used to report the earlier plan's saved figures as its own."""
    from test_replication import QUICK, tiny_overrides

    from experiments import replication

    class Ran(Exception):
        pass

    def no_training(command, log_path):
        raise Ran

    monkeypatch.setattr(replication, "_run", no_training)
    plan = replication.load_plan(QUICK, tiny_overrides(tmp_path))
    paths = replication.prepare_data(plan)
    variant = plan.variants[0]
    with pytest.raises(Ran):  # nothing saved yet: the run would start
        replication.pretrain_variant(plan, variant, paths, "tokenizer")
    recipe_file = tmp_path / "run" / "recipes" / f"pretrain_{variant.name}.yaml"
    recipe = yaml.safe_load(recipe_file.read_text())
    result_path = replication.pretrain_result_path(plan, variant)
    os.makedirs(os.path.dirname(result_path))
    with open(result_path, "w") as fh:  # the result of this very recipe: reused, nothing runs
        json.dump({"recipe": recipe, "final_perplexity": 12.5}, fh)
    assert replication.pretrain_variant(plan, variant, paths, "tokenizer")["final_perplexity"] == 12.5

    overrides = tiny_overrides(tmp_path)
    overrides["pretrain"]["max_steps"] = 9
    changed = replication.load_plan(QUICK, overrides)
    with pytest.raises(ConfigError) as err:
        replication.pretrain_variant(changed, changed.variants[0], paths, "tokenizer")
    message = str(err.value)
    assert "was made with another recipe (training.max_steps: 6 in the saved result, 9 now)" in message
    assert "another --output_dir" in message


def test_transfer_never_writes_over_its_own_models_and_names_a_missing_teacher(transfer_pair, tmp_path):
    from test_transfer import arguments

    from linformer_hf.training.transfer import run_transfer

    student = transfer_pair / "student_k4"
    weights = (student / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="--output_dir must differ from --student"):
        run_transfer(arguments(transfer_pair, student, layer_steps=2, overwrite_output_dir=True))
    assert (student / "model.safetensors").read_bytes() == weights
    # A mistyped teacher folder was huggingface_hub's "Repo id must be in the form" error.
    with pytest.raises(ConfigError, match=r"--teacher=.*no_teacher: no such directory"):
        run_transfer(arguments(transfer_pair, tmp_path / "out", teacher=str(tmp_path / "no_teacher")))


def test_gpu_checks_report_killed_while_rewritten_keeps_the_parts_before(tmp_path, monkeypatch):
    """report.json and report.md are rewritten after every part of a ~7 min run: a stop during a rewrite used to leave
    them truncated, losing every part finished before."""
    from experiments import gpu_checks

    report = gpu_checks.Report(str(tmp_path), "test", "a stand-in GPU")
    report.add(gpu_checks.PartResult(name="environment", summary={"cuda": "12.4"}))
    before = {name: (tmp_path / name).read_text() for name in ("report.json", "report.md")}

    def stopped(self, ordered):
        raise KeyboardInterrupt

    monkeypatch.setattr(gpu_checks.Report, "markdown", stopped)
    with pytest.raises(KeyboardInterrupt):
        report.add(gpu_checks.PartResult(name="training_step", status="failed", reason="boom"))
    assert (tmp_path / "report.md").read_text() == before["report.md"]
    assert json.loads((tmp_path / "report.json").read_text())["parts"][0]["summary"] == {"cuda": "12.4"}
    assert sorted(os.listdir(tmp_path)) == ["report.json", "report.md"]


def test_transfer_is_refused_while_another_run_writes_its_output_dir(transfer_pair, tmp_path):
    """Two transfers resuming into one folder (or started before the first wrote anything) used to write each other's
    checkpoints: the live one holds the folder's lock, as a pretraining run does."""
    from test_transfer import arguments

    from linformer_hf.training.transfer import run_transfer

    out = tmp_path / "run"
    out.mkdir()
    with lock_held_by_another_process(out) as holder:
        with pytest.raises(ConfigError, match=rf"Another run is writing to {out}: .*pid {holder.pid}"):
            run_transfer(arguments(transfer_pair, out, layer_steps=2))
    assert os.listdir(out) == [LOCK_FILE]
    report = run_transfer(arguments(transfer_pair, out, layer_steps=2))  # the killed holder's lock is taken over
    assert "after" in report and (out / LOCK_FILE).read_text() == ""


def test_transfer_resume_reads_past_a_log_line_a_kill_cut_short(tmp_path):
    """--resume drops the log records past the checkpoint; a last line cut short by a kill made it raise instead."""
    from linformer_hf.training.transfer import _truncate_log

    log = tmp_path / "transfer_log.jsonl"
    log.write_text(
        "".join(json.dumps({"step": step, "loss": 1.0 / step}) + "\n" for step in range(1, 6)) + '{"step": 6, "lo'
    )
    _truncate_log(str(log), after_step=4)
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2, 3, 4]
    assert os.listdir(tmp_path) == ["transfer_log.jsonl"]


def test_a_run_ended_by_an_error_is_not_reported_as_killed(tmp_path, caplog):
    """A run that claimed its directory and then stopped on a bad setting left its pid in the lock, and the next run
    warned that it had been killed."""
    from linformer_hf.training.checkpointing import RunLock

    out = tmp_path / "run"
    out.mkdir()
    ended = subprocess.run(
        [
            python_executable(),
            "-c",
            "import sys\nfrom linformer_hf.training.checkpointing import RunLock\n"
            "RunLock.acquire(sys.argv[1])\nraise SystemExit('error: a setting found wrong after the claim')",
            str(out),
        ],
        env=script_env(),
        capture_output=True,
        text=True,
    )
    assert ended.returncode == 1 and "found wrong" in ended.stderr
    assert (out / LOCK_FILE).read_text() == ""
    with caplog.at_level("WARNING"):
        RunLock.acquire(str(out)).release()
    assert not any("Taking over the lock" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------------------------------
# Fine-tuning: the Trainer's checkpoint-N, pruned only once the newest one is complete
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    from test_training_finetune import pretrained_dir as build

    return build.__wrapped__(tmp_path_factory)


def finetune_recipe(pretrained_dir, tmp_path, out, **training):
    from training_utils import sst2_head, tiny_finetune_overrides

    from linformer_hf.training.config import FinetuneRecipe

    settings = {"training.max_steps": 6, "training.eval_steps": 2, "training.per_device_train_batch_size": 8}
    settings.update({f"training.{key}": value for key, value in training.items()})
    train_file = sst2_head(tmp_path / "train.tsv", 64)
    return load_recipe(FinetuneRecipe, None, extra=tiny_finetune_overrides(pretrained_dir, train_file, out, settings))


def scripted_metrics(accuracies):
    """A `metrics_function` whose evaluations score these accuracies in turn (then the last again): which checkpoint
    is the best is then chosen by the test."""

    def metrics_function(task, is_main_process):
        left = iter(accuracies)
        return lambda prediction: {"accuracy": next(left, accuracies[-1])}

    return metrics_function


def finetuning_checkpoints(out):
    return {
        int(name.split("-")[1]): (out / name / COMPLETE_MARKER).is_file()
        for name in os.listdir(out)
        if name.startswith("checkpoint-")
    }


def test_prune_keeps_the_newest_complete_checkpoints_and_the_best(tmp_path):
    from linformer_hf.training.checkpointing import FINETUNING, prune_checkpoints

    def make(*steps, torn=()):
        for step in steps:
            path = tmp_path / f"checkpoint-{step}"
            path.mkdir()
            if step not in torn:
                (path / COMPLETE_MARKER).write_text("{}")

    def left():
        return sorted(int(name.split("-")[1]) for name in os.listdir(tmp_path) if name.startswith("checkpoint-"))

    make(2, 4, 6, 8, torn=(4,))
    prune_checkpoints(str(tmp_path), 1, FINETUNING, keep=str(tmp_path / "checkpoint-2"))
    assert left() == [2, 8]  # the best besides the newest: the limit counts it, as the Trainer's rotation does
    prune_checkpoints(str(tmp_path), 1, FINETUNING, keep=str(tmp_path / "checkpoint-8"))
    assert left() == [8]
    make(10, 12, 14)
    prune_checkpoints(str(tmp_path), 3, FINETUNING, keep=str(tmp_path / "checkpoint-8"))
    assert left() == [8, 12, 14]
    prune_checkpoints(str(tmp_path), 2, FINETUNING, keep=None)
    assert left() == [12, 14]
    make(16, torn=(16,))  # a torn newest one counts for nothing and is left to be written over
    prune_checkpoints(str(tmp_path), 1, FINETUNING, keep=str(tmp_path / "checkpoint-4"))  # a best no longer there
    assert left() == [14, 16]


@pytest.mark.parametrize(
    "accuracies, killed_at",
    [([0.1, 0.2, 0.3], 4), ([0.9, 0.8, 0.7], 6)],
    ids=["the-new-checkpoint-is-the-best", "an-older-checkpoint-is-the-best"],
)
def test_a_kill_before_a_finetuning_checkpoint_is_marked_leaves_the_previous_one(
    pretrained_dir, tmp_path, monkeypatch, accuracies, killed_at
):
    """Before: the Trainer's rotation (``save_total_limit``) deleted the older checkpoints inside `_save_checkpoint`,
    before `on_save` wrote the new one's completion marker. A kill between them left no complete checkpoint when the
    new one was also the best (the rotation keeps it), and only the best one, older than the one deleted, otherwise.
    After: the older ones are pruned once the new one is marked complete, and `latest` resumes from the previous."""
    from linformer_hf.training import checkpointing, finetuning, finetuning_trainer
    from linformer_hf.training.checkpointing import FINETUNING, resolve_checkpoint

    monkeypatch.setattr(finetuning_trainer, "metrics_function", scripted_metrics(accuracies))
    write_marker = checkpointing.write_completion_marker

    class Killed(Exception):
        pass

    def killed_before_the_marker(path):  # the checkpoint's files are written, its marker is not
        if path.endswith(f"checkpoint-{killed_at}"):
            raise Killed
        write_marker(path)

    monkeypatch.setattr(checkpointing, "write_completion_marker", killed_before_the_marker)
    out = tmp_path / "run"
    with pytest.raises(Killed):
        finetuning.run_finetuning(finetune_recipe(pretrained_dir, tmp_path, out), show_progress=False)
    previous = killed_at - 2
    found = finetuning_checkpoints(out)
    assert found.get(previous) is True and found[killed_at] is False, found
    assert resolve_checkpoint("latest", str(out), FINETUNING) == str(out / f"checkpoint-{previous}")

    monkeypatch.setattr(checkpointing, "write_completion_marker", write_marker)
    start_run, started = finetuning.start_run, []
    monkeypatch.setattr(finetuning, "start_run", lambda *a, **k: started.append(start_run(*a, **k)) or started[-1])
    resumed = finetuning.run_finetuning(
        finetune_recipe(pretrained_dir, tmp_path, out, resume_from_checkpoint="latest"), show_progress=False
    )
    assert started[0].checkpoint == str(out / f"checkpoint-{previous}")
    assert [e["step"] for e in resumed["history"]] == [2, 4, 6]
    assert (out / "results.json").is_file() and not finetuning_checkpoints(out)


def test_a_stop_in_mid_epoch_adds_no_evaluation_with_per_epoch_evaluation(pretrained_dir, tmp_path, monkeypatch):
    """Evaluating once an epoch (no training.eval_steps, as the authors recipe does), a stop in the middle of an epoch
    used to evaluate there too (the Trainer ends the epoch it breaks out of): an evaluation the uninterrupted run never
    makes, which could become the best model. Now the stopped and resumed run evaluates, and chooses, as the whole
    run does."""
    from linformer_hf.training import finetuning
    from linformer_hf.training.errors import Preempted
    from linformer_hf.training.guards import StopSignal

    epochs = {"max_steps": None, "eval_steps": None, "num_train_epochs": 2}  # 64 examples, 8 updates an epoch
    whole = finetuning.run_finetuning(finetune_recipe(pretrained_dir, tmp_path, tmp_path / "whole", **epochs), False)
    assert [entry["step"] for entry in whole["history"]] == [8, 16]

    requested, calls = StopSignal.requested, []

    def signal_at_the_fifth_update(self, accelerator=None):
        calls.append(1)
        if len(calls) == 5:
            self.received = signal.SIGTERM  # as the handler sets it
        return requested(self, accelerator)

    monkeypatch.setattr(StopSignal, "requested", signal_at_the_fifth_update)
    out = tmp_path / "run"
    with pytest.raises(Preempted):
        finetuning.run_finetuning(finetune_recipe(pretrained_dir, tmp_path, out, **epochs), False)
    (checkpoint,) = [name for name in os.listdir(out) if name.startswith("checkpoint-")]
    assert int(checkpoint.split("-")[1]) % 8 != 0  # the middle of an epoch
    with open(out / checkpoint / "trainer_state.json", encoding="utf-8") as fh:
        state = json.load(fh)
    assert [entry for entry in state["log_history"] if "eval_loss" in entry] == [] and state["best_metric"] is None
    monkeypatch.setattr(StopSignal, "requested", requested)
    resumed = finetuning.run_finetuning(
        finetune_recipe(pretrained_dir, tmp_path, out, **epochs, resume_from_checkpoint="latest"), False
    )
    assert resumed["history"] == whole["history"] and resumed["best"] == whole["best"]


def test_a_stopped_finetuning_run_keeps_its_newest_checkpoint_and_the_best(pretrained_dir, tmp_path, monkeypatch):
    """One checkpoint is kept, and the best one besides it when it is older (the Trainer's rule for
    ``save_total_limit: 1``), each only once the newest is complete. Before, the Trainer also deleted every checkpoint
    but the best at the end of `train`, so a stop after an evaluation lost the checkpoint it had just written."""
    from linformer_hf.training import finetuning, finetuning_trainer
    from linformer_hf.training.checkpointing import FINETUNING, resolve_checkpoint

    monkeypatch.setattr(finetuning_trainer, "metrics_function", scripted_metrics([0.9, 0.8]))
    out = tmp_path / "run"
    stopped = finetuning.run_finetuning(finetune_recipe(pretrained_dir, tmp_path, out, stop_after_steps=5), False)
    assert stopped == {"stopped_at": 5}
    assert finetuning_checkpoints(out) == {2: True, 5: True}  # the best (step 2) and the newest; step 4 pruned
    assert resolve_checkpoint("latest", str(out), FINETUNING) == str(out / "checkpoint-5")


def test_a_finetuning_checkpoint_resumes_only_under_its_own_recipe(pretrained_dir, tmp_path, caplog):
    """Each fine-tuning checkpoint records its recipe; a resume with another seed, task data or max_seq_length is
    refused, naming each field, as is one past max_steps (before, a checkpoint of another recipe was resumed without
    a word, and its run reported as the new one). A checkpoint from before the record is resumed with a warning."""
    import json

    from linformer_hf.training import finetuning
    from linformer_hf.training.checkpointing import RECIPE_FILE, write_completion_marker

    out = tmp_path / "run"
    assert finetuning.run_finetuning(finetune_recipe(pretrained_dir, tmp_path, out, stop_after_steps=2), False) == {
        "stopped_at": 2
    }
    with open(out / "checkpoint-2" / RECIPE_FILE, encoding="utf-8") as fh:
        assert json.load(fh)["must_match"]["training.seed"] == 42

    def resumed(**training):
        return finetune_recipe(pretrained_dir, tmp_path, out, resume_from_checkpoint="latest", **training)

    other = resumed(seed=7)
    other.data.max_seq_length = 16
    with pytest.raises(ConfigError, match=r"written by another run: its recipe differs in 2 field\(s\): data.max_seq"):
        finetuning.run_finetuning(other, False)
    with pytest.raises(ConfigError, match="it is at step 2, past training.max_steps=1"):
        finetuning.run_finetuning(resumed(max_steps=1), False)
    os.remove(out / "checkpoint-2" / RECIPE_FILE)  # as a checkpoint made before fine-tuning recorded its recipe
    write_completion_marker(str(out / "checkpoint-2"))
    with caplog.at_level("WARNING"):
        result = finetuning.run_finetuning(resumed(), False)
    assert result["steps"] == 6 and "records no recipe" in caplog.text


def test_a_finetuning_resume_of_another_recipe_is_refused_before_tokenising_or_loading_the_model(
    pretrained_dir, tmp_path, monkeypatch
):
    """Before, the checkpoint's recipe was compared once the splits were tokenised and the model loaded (minutes on a
    large data set, for a run then refused); now it is compared first."""
    from linformer_hf.training import finetuning, finetuning_model

    out = tmp_path / "run"
    assert finetuning.run_finetuning(finetune_recipe(pretrained_dir, tmp_path, out, stop_after_steps=2), False) == {
        "stopped_at": 2
    }
    monkeypatch.setattr(finetuning_model, "tokenize_task", lambda *a, **k: pytest.fail("tokenised"))
    changed = finetune_recipe(pretrained_dir, tmp_path, out, resume_from_checkpoint="latest", seed=7)
    with pytest.raises(ConfigError, match=r"written by another run: .*training.seed: 42 in the checkpoint, 7 now"):
        finetuning.run_finetuning(changed, False)
    assert finetuning_checkpoints(out) == {2: True}


def test_a_finetuning_recipe_reading_the_models_n_is_one_recipe_written_out_or_not(pretrained_dir, tmp_path):
    """Before: a run started without data.max_seq_length (the model's n) and resumed with it written out as n was
    refused as another recipe (and the other way round). One token less is another recipe."""
    from transformers import AutoConfig, AutoTokenizer

    from linformer_hf.models import max_input_length
    from linformer_hf.training.checkpointing import recipe_fingerprint

    config, tokenizer = AutoConfig.from_pretrained(pretrained_dir), AutoTokenizer.from_pretrained(pretrained_dir)
    n = max_input_length(config)

    def fingerprint(max_seq_length):
        recipe = finetune_recipe(pretrained_dir, tmp_path, tmp_path / "run")
        recipe.data.max_seq_length = max_seq_length
        return recipe_fingerprint(recipe, config, tokenizer, 1)

    assert fingerprint(None) == fingerprint(n)
    assert fingerprint(None) != fingerprint(n - 1)


def test_a_finetuning_resumed_from_an_earlier_checkpoint_sets_the_later_ones_aside(pretrained_dir, tmp_path):
    """Before, the later checkpoints stayed: the new path's were written over them, and `latest` went back to them."""
    from linformer_hf.training import finetuning

    out = tmp_path / "run"
    assert finetuning.run_finetuning(finetune_recipe(pretrained_dir, tmp_path, out, stop_after_steps=4), False) == {
        "stopped_at": 4
    }
    assert finetuning_checkpoints(out) == {2: True, 4: True}
    branch = finetune_recipe(
        pretrained_dir, tmp_path, out, stop_after_steps=4, resume_from_checkpoint=str(out / "checkpoint-2")
    )
    assert finetuning.run_finetuning(branch, False) == {"stopped_at": 4}
    aside = [p for p in out.iterdir() if p.name.startswith("superseded-after-step2-")]
    assert len(aside) == 1 and [p.name for p in aside[0].iterdir()] == ["checkpoint-4"]
    assert finetuning_checkpoints(out) == {2: True, 4: True}  # the new path's checkpoint-4


def test_finetuning_never_takes_a_pretraining_runs_folder_even_to_overwrite(pretrained_dir, tmp_path):
    """Before, a fine-tuning run given a pretraining run's folder with training.overwrite_output_dir true (as the
    refusal of the used folder advised) deleted that run's final model, checkpoints, log and summaries; now it is
    refused before any work, naming what the folder holds, and the folder is left as it was."""
    from linformer_hf.training import finetuning

    out = tmp_path / "pretrain"
    for name in ("final", "checkpoint-4"):
        (out / name).mkdir(parents=True)
        (out / name / "model.safetensors").write_bytes(b"weights")
    for name in (UPDATE_LOG, "summary_step4.json"):
        (out / name).write_text("{}\n")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    for overwrite in (True, False):
        with pytest.raises(ConfigError) as err:
            finetuning.run_finetuning(
                finetune_recipe(pretrained_dir, tmp_path, out, overwrite_output_dir=overwrite), show_progress=False
            )
        message = str(err.value)
        assert f"training.output_dir={out} holds a pretraining run" in message, message
        assert "final, summary_step4.json, train_log.jsonl" in message and "Give another training.output_dir" in message
        assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.name != LOCK_FILE) == before


def test_pretraining_never_takes_a_finetuning_runs_folder_even_to_overwrite(tokenizer_dir, small_corpus, tmp_path):
    """The other way round: pretraining with training.overwrite_output_dir true over a fine-tuning run's folder
    deleted its best/ model, results and predictions."""
    out = tmp_path / "finetune"
    (out / "best").mkdir(parents=True)
    (out / "best" / "model.safetensors").write_bytes(b"weights")
    for name in ("results.json", "predictions_test.tsv"):
        (out / name).write_text("{}\n")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    for overwrite in (True, False):
        with pytest.raises(ConfigError) as err:
            run(tokenizer_dir, small_corpus, out, overwrite_output_dir=overwrite)
        message = str(err.value)
        assert f"training.output_dir={out} holds a fine-tuning run" in message, message
        assert "best, predictions_test.tsv, results.json" in message and "Give another training.output_dir" in message
        assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.name != LOCK_FILE) == before


def test_claiming_a_run_folder_removes_its_own_debris_and_no_other_commands_staging(tmp_path):
    """A resumed run removes what a kill left of its own writes (`.tmp-final`, a pruned checkpoint's `.trash-...`),
    and it removed every `.tmp-*` there: another command's staging folder inside the run folder (push_to_hub
    --output_dir <run>/hub, still being written) went with them."""
    from linformer_hf.training.checkpointing import claim_output_dir

    out = tmp_path / "run"
    for name in (".tmp-final", ".trash-checkpoint-4-1234", ".tmp-hub-x1y2z3", ".trash-notes-77"):
        (out / name).mkdir(parents=True)
        (out / name / "model.safetensors").write_bytes(b"weights")
    (out / "checkpoint-2").mkdir()
    lock = claim_output_dir(str(out), resuming=True, overwrite=False)
    try:
        assert sorted(os.listdir(out)) == [".run.lock", ".tmp-hub-x1y2z3", ".trash-notes-77", "checkpoint-2"]
    finally:
        lock.release()


def test_the_same_command_run_again_after_the_run_finished_has_nothing_to_do(
    tokenizer_dir, small_corpus, tmp_path, capsys
):
    """`--resume_from_checkpoint latest` on a finished run loaded its last checkpoint, evaluated again and wrote
    final/ and its summary again. Now it says the run is complete and returns its summary, writing nothing; a run
    killed between its last checkpoint and final/ is still finished, and more updates still train on."""
    out = tmp_path / "run"
    first = run(tokenizer_dir, small_corpus, out, max_steps=4)

    def written():
        return {str(p.relative_to(out)): p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}

    before = written()
    capsys.readouterr()
    again = run(tokenizer_dir, small_corpus, out, max_steps=4, resume_from_checkpoint="latest")
    assert f"The run in {out} is complete (4 updates" in capsys.readouterr().out
    assert again == json.loads(json.dumps(first)) and written() == before
    # another recipe is still refused as such, not called complete
    with pytest.raises(ConfigError, match="training.seed"):
        run(tokenizer_dir, small_corpus, out, max_steps=4, seed=7, resume_from_checkpoint="latest")
    # killed before final/ was published: finished from the last checkpoint
    shutil.rmtree(out / "final")
    os.remove(out / "summary_step4.json")
    resumed = run(tokenizer_dir, small_corpus, out, max_steps=4, resume_from_checkpoint="latest")
    assert json.loads((out / "final" / "eval_results.json").read_text())["step"] == 4
    assert resumed["evals"].keys() == first["evals"].keys()
    # raising max_steps trains on
    assert run(tokenizer_dir, small_corpus, out, max_steps=6, resume_from_checkpoint="latest")["completed_steps"] == 6
