"""Attention transfer on a tiny BERT teacher: the capture is exact at k = n, the error falls, resume is exact."""

import json
import re
import shutil

import pytest
import torch
import transformers
from safetensors.torch import load_file
from tiny_bert import build_wordpiece_tokenizer, randomize_all, tiny_bert_config, wikitext_lines

from linformer_hf.conversion import convert_checkpoint
from linformer_hf.training import transfer
from linformer_hf.training.transfer import TransferArguments, main, run_transfer


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_pair(tmp_path_factory.mktemp("transfer"))


def build_pair(root):
    """A tiny random BERT MLM teacher with its WordPiece tokenizer, two Linformers converted from it, and a text file.

    student_k16: k = n, the identity; student_k4: k = 4 with random E, F, far from the teacher, so that what transfer
    does is visible in a few steps (from neighbour-average E, F a random tiny teacher's diffuse attention is already
    matched about as well as k = 4 allows).
    """
    tokenizer = build_wordpiece_tokenizer(str(root / "teacher"))
    teacher = transformers.BertForMaskedLM(tiny_bert_config()).eval()
    randomize_all(teacher, seed=3)
    with torch.no_grad():  # sharper attention than N(0, 0.2^2) weights give, so that compressing it loses something
        for layer in teacher.bert.encoder.layer:
            layer.attention.self.query.weight.mul_(2)
            layer.attention.self.key.weight.mul_(2)
    teacher.save_pretrained(root / "teacher")
    tokenizer.save_pretrained(root / "teacher")
    for k, init in ((4, "random"), (16, "neighbour_average")):
        convert_checkpoint(
            str(root / "teacher"),
            str(root / f"student_k{k}"),
            projected_length=k,
            sharing="key_value",
            projection_init=init,
        )
    convert_checkpoint(  # few features: FAVOR+ is a coarse estimate of the teacher's attention
        str(root / "teacher"), str(root / "student_performer"), target="performer", num_random_features=4
    )
    text = root / "text.txt"
    text.write_text("\n".join(wikitext_lines(300)) + "\n")
    return root


def arguments(pair, output_dir, **overrides):
    settings = dict(
        teacher=str(pair / "teacher"),
        student=str(pair / "student_k4"),
        output_dir=str(output_dir),
        text_files=[str(pair / "text.txt")],
        lengths=[8, 16],
        batch_size=4,
        layer_steps=30,
        projection_learning_rate=1e-2,
        warmup_steps=2,
        eval_windows=4,
        log_every=1,
        checkpoint_every=100,
        show_progress=False,
    )
    settings.update(overrides)
    return TransferArguments(**settings)


def mean_error(fidelity, length):
    errors = fidelity["windows"][str(length)]["attention_relative_error_per_layer"]
    return sum(errors) / len(errors)


def test_at_k_equal_n_the_student_already_matches_its_teacher(pair, tmp_path):
    """Checks the capture itself: identity projections reproduce the teacher's attention output and embeddings."""
    report = run_transfer(
        arguments(pair, tmp_path, student=str(pair / "student_k16"), layer_steps=1, projection_learning_rate=0.0)
    )
    for length in ("8", "16"):
        assert max(report["before"]["windows"][length]["attention_relative_error_per_layer"]) < 1e-5
        assert report["before"]["windows"][length]["embedding_cosine_min"] > 0.99999
    assert report["before"]["documents"]["embedding_cosine_min"] > 0.99999  # whole documents, padded batches


def test_layer_local_transfer_lowers_the_attention_error(pair, tmp_path):
    report = run_transfer(arguments(pair, tmp_path))
    for length in (8, 16):
        before, after = mean_error(report["before"], length), mean_error(report["after"], length)
        assert before > 0.3  # random E, F: the student starts far off
        assert after < 0.5 * before, (length, before, after)
    log = [json.loads(line) for line in (tmp_path / "transfer_log.jsonl").read_text().splitlines()]
    assert [record["step"] for record in log] == list(range(1, 31))
    assert {record["length"] for record in log} == {8, 16}
    assert {record["stage"] for record in log} == {"layer"}
    # Only the projections moved in stage 1: every other weight is the teacher's, as converted.
    before, after = (
        load_file(str(pair / "student_k4" / "model.safetensors")),
        load_file(str(tmp_path / "model.safetensors")),
    )
    changed = {key for key in before if not torch.equal(before[key], after[key])}
    assert changed and all("projection" in key for key in changed)
    reloaded = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert type(reloaded).__name__ == "BertTokenizer"


def test_resume_is_exact_across_both_stages(pair, tmp_path):
    overrides = dict(layer_steps=4, end_to_end_steps=4, train_attention_weights=True, checkpoint_every=3)
    straight = run_transfer(arguments(pair, tmp_path / "straight", **overrides))
    stopped = run_transfer(arguments(pair, tmp_path / "resumed", stop_after_steps=5, **overrides))
    assert stopped["stopped_at"] == 5
    resumed = run_transfer(arguments(pair, tmp_path / "resumed", resume="latest", **overrides))
    assert resumed["after"] == straight["after"]
    a, b = (
        load_file(str(tmp_path / "straight" / "model.safetensors")),
        load_file(str(tmp_path / "resumed" / "model.safetensors")),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    logs = [
        [json.loads(line) for line in (tmp_path / run / "transfer_log.jsonl").read_text().splitlines()]
        for run in ("straight", "resumed")
    ]
    assert [(r["step"], r["stage"], r["loss"]) for r in logs[0]] == [
        (r["step"], r["stage"], r["loss"]) for r in logs[1]
    ]
    assert [r["stage"] for r in logs[0]] == ["layer"] * 4 + ["end_to_end"] * 4
    # stage 2 trained everything, the teacher's MLM head included
    changed = {
        key for key in a if not torch.equal(a[key], load_file(str(pair / "student_k4" / "model.safetensors"))[key])
    }
    assert any(key.startswith("lm_head.") for key in changed)


def test_the_same_transfer_run_again_after_it_finished_says_so_and_redoes_nothing(pair, tmp_path, capsys):
    """The command that finished a run, run again (--resume latest, as a requeued job has it), resumed the newest
    earlier checkpoint (the last step kept none then), trained the last steps again and replaced the model, report and
    log; without --resume it was refused, advising that resume. Now either says the run is complete and returns its
    report; other options, or --overwrite_output_dir, are not the finished run."""
    from linformer_hf.training.errors import OutputDirInUse

    out = tmp_path / "out"
    overrides = dict(layer_steps=4, checkpoint_every=2)
    assert run_transfer(arguments(pair, out, stop_after_steps=3, **overrides))["stopped_at"] == 3
    finished = run_transfer(arguments(pair, out, resume="latest", **overrides))
    written = {path.name: path.stat().st_mtime_ns for path in out.iterdir()}
    capsys.readouterr()
    for again in (dict(resume="latest"), dict(resume="latest", stop_after_steps=3), {}, dict(log_every=2)):
        report = run_transfer(arguments(pair, out, **overrides, **again))
        assert report["after"] == finished["after"], again
        assert f"The transfer in {out} is complete (transfer_report.json: 4 of 4 steps" in capsys.readouterr().out
        assert {path.name: path.stat().st_mtime_ns for path in out.iterdir()} == written, again
    # the default projection learning rate, recorded as the student's n sets it, is the same option left out
    default = run_transfer(arguments(pair, tmp_path / "default", layer_steps=1, projection_learning_rate=None))
    assert run_transfer(arguments(pair, tmp_path / "default", layer_steps=1, projection_learning_rate=None)) == default
    assert "is complete" in capsys.readouterr().out
    # Another transfer in the finished run's folder is refused as before (or resumed, with --resume).
    with pytest.raises(OutputDirInUse, match="is not empty"):
        run_transfer(arguments(pair, out, layer_steps=5, checkpoint_every=2))
    assert {path.name: path.stat().st_mtime_ns for path in out.iterdir()} == written


def test_a_finished_transfer_run_again_with_a_retrained_teacher_is_refused_not_complete(
    pair, tmp_path, capsys, monkeypatch
):
    """The same command run again after the teacher's weights changed at the same path (same config, retrained) was
    told the run is complete (exit 0), for a teacher the run never saw. Now refused, naming the teacher's SHA-256 the
    run recorded and the one it has now, and the way out; nothing in the folder changes. The same teacher copied with
    a training_args.bin beside it is still the run's, and a report of an earlier version (no hash) is compared by the
    checkpoint of its last step."""
    from linformer_hf.loading import model_files_sha256

    out, teacher = tmp_path / "out", tmp_path / "teacher"
    shutil.copytree(pair / "teacher", teacher)
    command = dict(layer_steps=2, checkpoint_every=2, teacher=str(teacher))
    finished = run_transfer(arguments(pair, out, **command))
    recorded = model_files_sha256(str(teacher))
    (teacher / "training_args.bin").write_bytes(b"the settings of its training, not its weights")
    assert run_transfer(arguments(pair, out, **command))["after"] == finished["after"]
    assert "is complete" in capsys.readouterr().out
    model = transformers.BertForMaskedLM.from_pretrained(teacher)
    randomize_all(model, seed=4)
    model.save_pretrained(teacher)
    now = model_files_sha256(str(teacher))
    written = {path.name: path.stat().st_mtime_ns for path in out.iterdir()}
    for again in ({}, dict(resume="latest")):
        given = arguments(pair, out, **command, **again)
        monkeypatch.setattr(transfer, "parse_command_line", lambda argv, given=given: given)  # these options
        with pytest.raises(SystemExit) as status:
            main([])
        assert status.value.code == 2
        error = capsys.readouterr().err.strip().splitlines()[-1]  # (after the weights' progress bars)
        assert error.startswith("error: --teacher ") and "is complete" not in error
        assert f"{teacher} has other config and weights than the teacher the transfer in {out} was run with" in error
        assert f"SHA-256 {recorded} when the run started, {now} now" in error
        assert "--output_dir" in error and "--overwrite_output_dir" in error
        assert {path.name: path.stat().st_mtime_ns for path in out.iterdir()} == written
    # a report of an earlier version records no hash: the checkpoint of its last step does
    report = json.loads((out / "transfer_report.json").read_text())
    assert report["teacher_model_files_sha256"] == finished["teacher_model_files_sha256"] == recorded
    del report["teacher_model_files_sha256"]
    (out / "transfer_report.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match=f"SHA-256 {recorded} when the run started, {now} now"):
        run_transfer(arguments(pair, out, **command))


def test_a_finished_transfer_extended_with_more_steps_goes_on_from_its_last_step(pair, tmp_path, capsys, caplog):
    """A finished run keeps a checkpoint of its last step (the optimizer's state and the step, beside the model), so
    the same command with more steps and --resume latest goes on from there: not from the newest periodic checkpoint,
    training the steps after it again (and saying it resumed there). It ends as a run of that many steps from the
    start does."""
    common = dict(layer_steps=4, train_attention_weights=True, checkpoint_every=4)
    out = tmp_path / "extended"
    straight = run_transfer(arguments(pair, tmp_path / "straight", end_to_end_steps=4, **common))
    run_transfer(arguments(pair, out, end_to_end_steps=2, **common))
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]
    capsys.readouterr()
    extended = run_transfer(arguments(pair, out, end_to_end_steps=4, resume="latest", **common))
    assert f"Resumed from {out / 'checkpoint-6'} at step 6" in capsys.readouterr().out
    assert "another optimisation schedule" not in caplog.text  # the steps done are those of the longer run
    assert extended["after"] == straight["after"]
    a, b = (load_file(str(folder / "model.safetensors")) for folder in (tmp_path / "straight", out))
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
    logs = [
        [json.loads(line) for line in (folder / "transfer_log.jsonl").read_text().splitlines()]
        for folder in (tmp_path / "straight", out)
    ]
    assert [(r["step"], r["stage"], r["loss"]) for r in logs[0]] == [
        (r["step"], r["stage"], r["loss"]) for r in logs[1]
    ]
    assert json.loads((out / "transfer_report.json").read_text())["arguments"]["end_to_end_steps"] == 4
    # A run finished by an earlier version kept no checkpoint of its last step: the steps after its newest one are
    # trained again, and said so.
    old = tmp_path / "old"
    run_transfer(arguments(pair, old, end_to_end_steps=2, **common))
    shutil.rmtree(old / "checkpoint-6")
    capsys.readouterr()
    run_transfer(arguments(pair, old, end_to_end_steps=4, resume="latest", **common))
    assert (
        f"Resumed from {old / 'checkpoint-4'} at step 4: the run finished here at step 6 (transfer_report.json), so "
        "steps 5 to 6 are trained again (it kept no checkpoint of its last step" in capsys.readouterr().out
    )


def test_resuming_an_earlier_checkpoint_by_name_sets_the_later_path_aside(pair, tmp_path, capsys):
    """--resume <output_dir>/checkpoint-2 in a run that went on to step 6 left checkpoint-4 and -6 (and the finished
    run's model and report) in place: the new path's checkpoint-4 was written over the old one, a later --resume
    latest went on from the abandoned path's checkpoint-6, and the folder's model was that path's. Now they are moved
    into superseded-after-step2-<time>/ (the log of that path copied there), as pretraining does, and named."""
    out = tmp_path / "out"
    common = dict(layer_steps=6, checkpoint_every=2, checkpoints_to_keep=3)
    run_transfer(arguments(pair, out, **common))
    model = (out / "model.safetensors").read_bytes()
    capsys.readouterr()
    # with the trailing slash of a shell's completion; another schedule from step 2 on (only warned)
    branch = dict(common, warmup_steps=4)
    stopped = run_transfer(arguments(pair, out, **branch, resume=str(out / "checkpoint-2") + "/", stop_after_steps=4))
    assert stopped["stopped_at"] == 4
    aside = [path for path in out.iterdir() if path.name.startswith("superseded-after-step2-")]
    assert len(aside) == 1
    moved = sorted(path.name for path in aside[0].iterdir())
    assert {"checkpoint-4", "checkpoint-6", "model.safetensors", "config.json", "transfer_report.json"} <= set(moved)
    assert {"transfer_log.jsonl", "fidelity_before.json"} & set(moved) == {"transfer_log.jsonl"}  # the log: a copy
    assert (aside[0] / "model.safetensors").read_bytes() == model
    assert [json.loads(line)["step"] for line in (aside[0] / "transfer_log.jsonl").read_text().splitlines()] == [
        1,
        2,
        3,
        4,
        5,
        6,
    ]
    said = capsys.readouterr().out
    assert f"Resuming {out / 'checkpoint-2'}: this folder's work from after step 2 is moved to {aside[0]}: " in said
    assert ", ".join(moved) in said
    assert sorted(path.name for path in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert not (out / "model.safetensors").exists() and not (out / "transfer_report.json").exists()
    # --resume latest follows the new path (before: the abandoned path's checkpoint-6)
    resumed = run_transfer(arguments(pair, out, **branch, resume="latest"))
    assert f"Resumed from {out / 'checkpoint-4'} at step 4" in capsys.readouterr().out
    assert resumed["arguments"]["warmup_steps"] == 4 and (out / "model.safetensors").read_bytes() != model
    log = [json.loads(line) for line in (out / "transfer_log.jsonl").read_text().splitlines()]
    assert [record["step"] for record in log] == [1, 2, 3, 4, 5, 6]
    # the set-aside folder is the transfer's: an overwrite deletes it with the rest (not refused as foreign)
    run_transfer(arguments(pair, out, layer_steps=1, overwrite_output_dir=True))
    assert not [path for path in out.iterdir() if path.name.startswith("superseded")]


def test_a_teacher_that_does_not_match_is_refused(pair, tmp_path):
    other = transformers.BertModel(tiny_bert_config(num_hidden_layers=3))
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match="differ in num_hidden_layers: teacher 3, student 2"):
        run_transfer(arguments(pair, tmp_path / "out", teacher=str(tmp_path / "other")))
    with pytest.raises(ValueError, match="Window length 32 exceeds the student's n=16"):
        run_transfer(arguments(pair, tmp_path / "out", lengths=[8, 32]))
    with pytest.raises(ValueError, match="--text_files or as --dataset"):
        arguments(pair, tmp_path / "out", text_files=None)
    # the teacher itself given as the student: refused before any weights are read, naming the conversion to run
    with pytest.raises(ValueError, match="holds a 'bert' model, not a Linformer or a Performer.*convert_to_linformer"):
        run_transfer(arguments(pair, tmp_path / "out", student=str(pair / "teacher")))
    assert not (tmp_path / "out").exists()


def test_script_flags(pair, tmp_path):
    """The command line reaches the same run (HfArgumentParser over TransferArguments)."""
    report = main(
        [
            "--teacher",
            str(pair / "teacher"),
            "--student",
            str(pair / "student_k4"),
            "--output_dir",
            str(tmp_path),
            "--dataset",
            "text",
            "--data_files",
            str(pair / "text.txt"),
            "--lengths",
            "8",
            "16",
            "--batch_size",
            "2",
            "--layer_steps",
            "2",
            "--eval_windows",
            "2",
            "--show_progress",
            "false",
        ]
    )
    assert report["lengths"] == [8, 16] and report["arguments"]["layer_steps"] == 2
    assert (tmp_path / "transfer_report.json").exists()


def test_evaluate_only_measures_without_training(pair, tmp_path):
    report = main(
        [
            "--teacher",
            str(pair / "teacher"),
            "--student",
            str(pair / "student_k4"),
            "--output_dir",
            str(tmp_path),
            "--text_files",
            str(pair / "text.txt"),
            "--lengths",
            "16",
            "--evaluate_only",
            "--eval_documents",
            "20",
            "--show_progress",
            "false",
        ]
    )
    documents = report["fidelity"]["documents"]
    assert documents["documents"] == 20 and documents["embedding_cosine_mean"] < 0.999  # random E, F: off
    assert json.loads((tmp_path / "fidelity.json").read_text())["fidelity"] == report["fidelity"]
    assert not (tmp_path / "model.safetensors").exists()


def test_a_performer_student_trains_its_attention_weights_only_when_asked(pair, tmp_path):
    """FAVOR+ has no parameters of its own: stage 1 refuses to run without --train_attention_weights, and with it
    only W^Q, W^K, W^V move (the random features stay), and the attention error falls."""
    performer = str(pair / "student_performer")
    with pytest.raises(ValueError, match="nothing to train for a Performer student.*--train_attention_weights"):
        run_transfer(arguments(pair, tmp_path / "refused", student=performer))
    report = run_transfer(
        arguments(
            pair,
            tmp_path / "out",
            student=performer,
            train_attention_weights=True,
            attention_learning_rate=1e-2,
            layer_steps=20,
        )
    )
    for length in (8, 16):
        before, after = mean_error(report["before"], length), mean_error(report["after"], length)
        assert after < 0.8 * before, (length, before, after)
    before = load_file(str(pair / "student_performer" / "model.safetensors"))
    after = load_file(str(tmp_path / "out" / "model.safetensors"))
    changed = {key for key in before if not torch.equal(before[key], after[key])}
    assert changed and all(
        key.endswith(("query.weight", "query.bias", "key.weight", "key.bias", "value.weight", "value.bias"))
        for key in changed
    ), changed


def test_projection_learning_rate_defaults_by_n_and_is_recorded(pair, tmp_path):
    """Unset, E's learning rate follows the student's n (1e-3 at n = 512); the report records the value used."""
    from linformer_hf.training.transfer import default_projection_learning_rate

    assert default_projection_learning_rate(512) == pytest.approx(1e-3)
    assert default_projection_learning_rate(2048) == pytest.approx(2.5e-4)
    report = run_transfer(arguments(pair, tmp_path, layer_steps=1, projection_learning_rate=None))
    n = 16  # the tiny students' n
    assert report["arguments"]["projection_learning_rate"] == pytest.approx(default_projection_learning_rate(n))


@pytest.mark.parametrize("layer_loss", ["attention_output", "attention_weights", "hidden_states"])
def test_each_stage_one_variant_lowers_its_loss(pair, tmp_path, layer_loss):
    run_transfer(arguments(pair, tmp_path, layer_loss=layer_loss, layer_steps=24))
    log = [json.loads(line) for line in (tmp_path / "transfer_log.jsonl").read_text().splitlines()]
    losses = {length: [r["loss"] for r in log if r["length"] == length] for length in (8, 16)}
    for length, values in losses.items():  # one length per step in turn: compare like with like
        first, last = sum(values[:3]) / 3, sum(values[-3:]) / 3
        assert last < 0.9 * first, (layer_loss, length, first, last)
    key = "layer_attention_kl" if layer_loss == "attention_weights" else "layer_relative_error"
    assert all(len(r[key]) == 2 for r in log)


def test_at_k_equal_n_the_variants_reach_their_floor(pair):
    """Identity E = F: the slot weights mapped back through E are the teacher's P (KL 0), and each whole layer
    reproduces the teacher's layer output."""
    from linformer_hf.loading import load_model
    from linformer_hf.training.transfer_losses import (
        attention_weights_loss,
        layer_local_loss,
        teacher_attention_weights,
    )
    from linformer_hf.training.transfer_models import load_teacher, teacher_attention_layers

    teacher, student = load_teacher(str(pair / "teacher")), load_model(str(pair / "student_k16")).eval()
    ids = torch.randint(5, 300, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(ids.shape)
    mask[1, 9:] = 0  # a padded row
    with torch.no_grad():
        states = teacher.base_model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        probs = teacher_attention_weights(teacher_attention_layers(teacher)[0], states[0], mask)
        assert abs(attention_weights_loss(student, 0, states[0], mask, probs).item()) < 1e-5
        # the teacher's own P, as BERT's eager attention returns it, on the real keys
        eager = transformers.BertModel.from_pretrained(str(pair / "teacher"), attn_implementation="eager").eval()
        reference = eager(ids, attention_mask=mask, output_attentions=True).attentions[0]
        assert torch.allclose(probs * mask[:, None, None, :], reference * mask[:, None, None, :], atol=1e-5)
        _, per_layer = layer_local_loss(teacher, student, ids, mask, "relative", "hidden_states")
    assert max(per_layer) < 1e-5


def test_attention_weights_needs_a_linformer_with_a_learned_e(pair, tmp_path):
    with pytest.raises(ValueError, match="needs a Linformer student with projection 'linear'"):
        run_transfer(
            arguments(
                pair,
                tmp_path,
                student=str(pair / "student_performer"),
                layer_loss="attention_weights",
                train_attention_weights=True,
            )
        )


@pytest.mark.parametrize("student", ["student_k4", "student_performer"])
def test_compiled_layers_transfer_as_eager_and_compile_once_per_stage(pair, tmp_path, student):
    """--torch_compile layers: both stages' losses and the transferred weights equal the eager run's. At one length,
    the first step of stage 1 compiles (the self-attention's graph, one for all layers), and the first of stage 2
    (the layer's); no other step compiles."""
    overrides = dict(
        student=str(pair / student), lengths=[16], layer_steps=3, end_to_end_steps=3, train_attention_weights=True
    )
    eager = run_transfer(arguments(pair, tmp_path / "eager", **overrides))
    compiled = run_transfer(
        arguments(pair, tmp_path / "compiled", torch_compile="layers", torch_compile_backend="aot_eager", **overrides)
    )
    logs = [
        [json.loads(line) for line in (tmp_path / run / "transfer_log.jsonl").read_text().splitlines()]
        for run in ("eager", "compiled")
    ]
    assert [r["stage"] for r in logs[1]] == ["layer"] * 3 + ["end_to_end"] * 3
    for expected, got in zip(*logs, strict=True):
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5), got["step"]
    a, b = (load_file(str(tmp_path / run / "model.safetensors")) for run in ("eager", "compiled"))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=1e-4, atol=1e-6, msg=key)
    assert list(compiled["compile"]["graphs_by_step"]) == [1, 4]  # the first step of each stage
    assert compiled["compile"]["first_step_seconds"] > 0
    assert "compile" not in eager


def test_transfer_compile_options_that_cannot_work_are_refused(pair, tmp_path):
    # The fix named used to be "set --torch_compile to model or layers": model is not a transfer's
    no = "--torch_compile_mode='max-autotune' is set but --torch_compile is no: set --torch_compile to layers."
    with pytest.raises(ValueError, match=re.escape(no)):
        arguments(pair, tmp_path, torch_compile_mode="max-autotune")
    with pytest.raises(ValueError, match="--torch_compile must be no or layers, got 'model'"):
        arguments(pair, tmp_path, torch_compile="model")
    with pytest.raises(ValueError, match="captures CUDA graphs, which need a CUDA device"):
        run_transfer(arguments(pair, tmp_path, torch_compile="layers", torch_compile_mode="reduce-overhead"))


# ------------------------------------------------------------------------------------------------------------------
# The run on transformers' Trainer: its checkpoints carry the shared records, and what it cannot resume is refused
# ------------------------------------------------------------------------------------------------------------------


def test_a_checkpoint_records_its_recipe_and_a_resume_with_another_is_refused(pair, tmp_path, caplog):
    """A checkpoint is the Trainer's checkpoint-N with the transfer's fingerprint, its training seconds and the
    completion marker; a resume with other batches is refused naming the field, a changed schedule only warns."""
    import os

    from linformer_hf.training.checkpointing import COMPLETE_MARKER, RECIPE_FILE
    from linformer_hf.training.errors import ConfigError

    out = tmp_path / "run"
    stopped = run_transfer(arguments(pair, out, layer_steps=4, stop_after_steps=2))
    assert stopped["stopped_at"] == 2 and "before" in stopped
    files = set(os.listdir(out / "checkpoint-2"))
    assert {"trainer_state.json", "optimizer.pt", "scheduler.pt", RECIPE_FILE, COMPLETE_MARKER} <= files
    assert json.loads((out / "checkpoint-2" / "transfer_progress.json").read_text())["train_seconds"] > 0
    with pytest.raises(ConfigError, match=r"differs in 1 field\(s\): --batch_size: 4 in the checkpoint, 2 now\. .*"):
        run_transfer(arguments(pair, out, layer_steps=4, batch_size=2, resume="latest"))
    resumed = run_transfer(arguments(pair, out, layer_steps=4, warmup_steps=3, resume="latest"))
    assert "another optimisation schedule (--warmup_steps: 2 in the checkpoint, 3 now)" in caplog.text
    # the figures measured before training, when the run started, are in the resumed run's report too
    assert resumed["before"] == stopped["before"] and (out / "model.safetensors").exists()
    assert json.loads((out / "transfer_report.json").read_text())["before"] == stopped["before"]
    log = [json.loads(line) for line in (out / "transfer_log.jsonl").read_text().splitlines()]
    assert [record["step"] for record in log] == [1, 2, 3, 4]


def test_a_resume_with_a_teacher_of_other_weights_is_refused(pair, tmp_path):
    """A checkpoint recorded the teacher's config, not its weights: a resume with another teacher of the same shape (a
    folder whose weights were replaced) trained on towards it without a word. Now the SHA-256 of its config and weight
    files is recorded and compared: the same teacher copied elsewhere, with a training_args.bin beside it, resumes;
    other weights are refused; a checkpoint made before the hash was recorded resumes as before."""
    from linformer_hf.training.checkpointing import RECIPE_FILE, write_completion_marker
    from linformer_hf.training.errors import ConfigError

    out, teacher = tmp_path / "run", tmp_path / "teacher"
    shutil.copytree(pair / "teacher", teacher)
    assert run_transfer(arguments(pair, out, layer_steps=5, stop_after_steps=2))["stopped_at"] == 2
    (teacher / "training_args.bin").write_bytes(b"the settings of its training, not its weights")
    copied = arguments(pair, out, layer_steps=5, teacher=str(teacher), resume="latest", stop_after_steps=3)
    assert run_transfer(copied)["stopped_at"] == 3
    model = transformers.BertForMaskedLM.from_pretrained(teacher)
    randomize_all(model, seed=4)
    model.save_pretrained(teacher)
    with pytest.raises(ConfigError, match=r"differs in 1 field\(s\): teacher\.model_files_sha256: '[0-9a-f]{64}' in"):
        run_transfer(arguments(pair, out, layer_steps=5, teacher=str(teacher), resume="latest"))
    recipe = json.loads((out / "checkpoint-3" / RECIPE_FILE).read_text())
    del recipe["must_match"]["teacher.model_files_sha256"]
    (out / "checkpoint-3" / RECIPE_FILE).write_text(json.dumps(recipe))
    write_completion_marker(str(out / "checkpoint-3"))
    assert run_transfer(arguments(pair, out, layer_steps=5, resume="latest", stop_after_steps=4))["stopped_at"] == 4


def test_a_teacher_given_as_a_hub_name_is_known_by_its_files_too(pair, tmp_path, monkeypatch, capsys):
    """A checkpoint recorded the teacher's SHA-256 only where --teacher was a folder: a Hub name's newer download
    (retrained weights under the same name) was resumed and called complete without a word. Now its files are found
    as loading found them (the Hub cache) and hashed as a folder's are: a resume, and the finished run run again, with
    another download are refused."""
    from huggingface_hub import constants
    from training_utils import hub_cache_model

    from linformer_hf.loading import model_files_sha256
    from linformer_hf.training.checkpointing import RECIPE_FILE
    from linformer_hf.training.errors import ConfigError

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # the tests' Hub cache: nothing but what is put there
    hub_cache_model(cache, "org/teacher", pair / "teacher")
    monkeypatch.chdir(tmp_path)  # "org/teacher" is no folder here
    out = tmp_path / "run"
    command = dict(teacher="org/teacher", layer_steps=4, checkpoint_every=2)
    assert run_transfer(arguments(pair, out, **command, stop_after_steps=2))["stopped_at"] == 2
    recipe = json.loads((out / "checkpoint-2" / RECIPE_FILE).read_text())
    assert recipe["must_match"]["teacher.model_files_sha256"] == model_files_sha256(str(pair / "teacher"))
    retrained = hub_cache_model(cache, "org/teacher", pair / "teacher", commit="1" * 40)
    model = transformers.BertForMaskedLM.from_pretrained(retrained)
    randomize_all(model, seed=4)
    model.save_pretrained(retrained)
    with pytest.raises(ConfigError, match=r"teacher\.model_files_sha256: '[0-9a-f]{64}' in"):
        run_transfer(arguments(pair, out, **command, resume="latest"))
    hub_cache_model(cache, "org/teacher", pair / "teacher", names=[])  # refs/main back to the run's download
    run_transfer(arguments(pair, out, **command, resume="latest"))
    hub_cache_model(cache, "org/teacher", pair / "teacher", names=[], commit="1" * 40)
    with pytest.raises(ValueError, match="org/teacher has other config and weights than the teacher the transfer"):
        run_transfer(arguments(pair, out, **command))
    assert "is complete" not in capsys.readouterr().out


def test_a_checkpoint_of_the_old_loop_is_refused_naming_the_fix(pair, tmp_path, capsys):
    """The loop transfer ran on before the Trainer wrote checkpoints/step_000000N (accelerate's save_state), which the
    Trainer cannot read: a resume of one says so and how to go on, before any work."""
    from linformer_hf.training.errors import ConfigError

    out = tmp_path / "run"
    old = out / "checkpoints" / "step_0000004"
    old.mkdir(parents=True)
    (old / "random_states_0.pkl").write_bytes(b"")
    (out / "transfer_log.jsonl").write_text(json.dumps({"step": 4, "loss": 1.0}) + "\n")
    fix = r"commit bb52f8c or earlier\), or start afresh: --overwrite_output_dir"
    for resume in ("latest", str(old)):
        with pytest.raises(ConfigError, match=rf"step_0000004 is a checkpoint of the hand-written loop .*{fix}"):
            run_transfer(arguments(pair, out, resume=resume))
    command = ["--teacher", str(pair / "teacher"), "--student", str(pair / "student_k4"), "--output_dir", str(out)]
    with pytest.raises(SystemExit) as exit:
        main([*command, "--text_files", str(pair / "text.txt"), "--resume", "latest", "--show_progress", "false"])
    assert exit.value.code == 2 and "hand-written loop" in capsys.readouterr().err
    assert not (out / "fidelity_before.json").exists()
    report = run_transfer(arguments(pair, out, layer_steps=2, overwrite_output_dir=True))  # deletes the old ones
    assert "after" in report and not (out / "checkpoints").exists()


def test_a_diverging_transfer_exits_with_status_2_and_saves_no_model(pair, tmp_path, capsys):
    """The divergence guard stops the Trainer's run from inside (its callback): status 2, one error line naming the
    last good checkpoint-N, no transferred model, the folder's lock released."""
    from linformer_hf.training.checkpointing import LOCK_FILE

    out = tmp_path / "diverged"
    args = arguments(pair, out)
    command = ["--teacher", args.teacher, "--student", args.student, "--output_dir", str(out)]
    command += ["--text_files", *args.text_files, "--lengths", "8", "16", "--batch_size", "4", "--warmup_steps", "2"]
    command += ["--eval_windows", "4", "--log_every", "1", "--show_progress", "false", "--checkpoint_every", "2"]
    command += ["--layer_steps", "8", "--end_to_end_steps", "4", "--nonfinite_patience", "2"]
    for rate in ("projection_learning_rate", "attention_learning_rate", "end_to_end_learning_rate"):
        command += [f"--{rate}", "1e8"]
    with pytest.raises(SystemExit) as exit:
        main(command)
    assert exit.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: training diverged at step 11: the loss or gradients were non-finite on 2 "), error
    assert f"The last good checkpoint is {out / 'checkpoint-8'}" in error
    assert not (out / "model.safetensors").exists() and not (out / "transfer_report.json").exists()
    assert (out / LOCK_FILE).read_text() == ""
    log = [json.loads(line) for line in (out / "transfer_log.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("skipped")) for r in log][-2:] == [(10, True), (11, True)]


def test_a_student_without_a_tokenizer_is_refused_before_any_work(pair, tmp_path, capsys):
    """transformers would build an empty 5-token tokenizer there: the run would train on empty text and save it."""
    import shutil

    student = tmp_path / "student"
    shutil.copytree(pair / "student_k4", student)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (student / name).unlink()
    args = arguments(pair, tmp_path / "out", student=str(student))
    command = ["--teacher", args.teacher, "--student", args.student, "--output_dir", args.output_dir]
    with pytest.raises(SystemExit) as exit:
        main([*command, "--text_files", *args.text_files, "--show_progress", "false"])
    error = capsys.readouterr().err.strip().splitlines()
    assert exit.value.code == 2 and len(error) == 1
    assert error[0].startswith(f"error: --student {student} holds no tokenizer") and "save_pretrained" in error[0]
    assert not (tmp_path / "out").exists()


def test_a_student_longer_than_its_teacher_is_compared_where_the_teacher_reads(pair, tmp_path):
    """A student converted with n = 32 from a teacher of 16 positions: by default the windows go up to 16, and whole
    documents are cut to 16 tokens for both models (not to the student's n, which the teacher cannot read)."""
    convert_checkpoint(str(pair / "teacher"), str(tmp_path / "n32"), max_sequence_length=32, projected_length=8)
    report = run_transfer(arguments(pair, tmp_path / "out", student=str(tmp_path / "n32"), lengths=None, layer_steps=1))
    assert report["lengths"] == [16]
    assert report["after"]["documents"]["truncated_to"] == 16 and report["before"]["documents"]["documents"] > 0
    with pytest.raises(ValueError, match="Window length 32 exceeds the teacher's 16 positions.*drop it from --lengths"):
        run_transfer(arguments(pair, tmp_path / "out2", student=str(tmp_path / "n32"), lengths=[8, 32]))


def test_a_teacher_with_another_vocabulary_of_the_same_size_is_refused(pair, tmp_path):
    import shutil

    from tiny_roberta import build_tokenizer

    teacher = tmp_path / "teacher"
    shutil.copytree(pair / "teacher", teacher)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        (teacher / name).unlink()
    build_tokenizer(str(teacher)).save_pretrained(teacher)  # BPE: another vocabulary, the same vocab_size in config
    with pytest.raises(ValueError, match="The teacher's tokenizer .* has another vocabulary than the student's"):
        run_transfer(arguments(pair, tmp_path / "out", teacher=str(teacher)))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("option", ["log_every", "checkpoint_every", "checkpoints_to_keep", "eval_documents"])
def test_counts_below_one_are_refused_when_parsed(pair, tmp_path, option):
    with pytest.raises(ValueError, match=f"--{option} must be at least 1, got 0"):
        arguments(pair, tmp_path, **{option: 0})


@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("stop_after_steps", 0, "--stop_after_steps must be at least 1 (or left out: run to the end), got 0"),
        ("stop_after_steps", -2, "--stop_after_steps must be at least 1"),
        ("warmup_steps", -3, "--warmup_steps must be 0 or more, got -3"),
        ("projection_learning_rate", -1.0, "--projection_learning_rate must be a finite number, 0 or more, got -1.0"),
        ("projection_learning_rate", float("nan"), "--projection_learning_rate must be a finite number"),
        ("attention_learning_rate", float("inf"), "--attention_learning_rate must be a finite number"),
        ("end_to_end_learning_rate", -2e-5, "--end_to_end_learning_rate must be a finite number"),
        ("mlm_weight", -1.0, "--mlm_weight must be a finite number, 0 or more, got -1.0"),
        ("seed", -1, r"--seed must be in [0, 2**32 - 1], got -1"),
    ],
)
def test_values_that_cannot_work_are_refused_when_parsed(pair, tmp_path, capsys, option, value, expected):
    """Each used to run: --stop_after_steps 0 stopped after one step, a negative warm-up was none, a negative learning
    rate or MLM weight climbed the loss it should lower, a NaN one diverged after the teacher was measured, and a
    negative seed was accelerate's error, naming no option."""
    with pytest.raises(ValueError, match=re.escape(expected)):
        arguments(pair, tmp_path, **{option: value})
    command = ["--teacher", str(pair / "teacher"), "--student", str(pair / "student_k4"), "--output_dir"]
    command += [str(tmp_path / "out"), "--text_files", str(pair / "text.txt"), f"--{option}={value}"]
    with pytest.raises(SystemExit) as exit:
        main(command)
    assert exit.value.code == 2 and expected in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--stop_after_steps", "5"], "--stop_after_steps does"),
        (["--resume", "latest"], "--resume does"),
        (["--layer_steps", "50", "--checkpoint_every", "10"], "--layer_steps, --checkpoint_every do"),
        (["--end_to_end_steps", "4", "--mlm_weight", "0.5"], "--end_to_end_steps, --mlm_weight do"),
        (["--eval_fraction", "0.5"], "--eval_fraction does"),
        (["--torch_compile", "layers"], "--torch_compile does"),
        (["--train_attention_weights"], "--train_attention_weights does"),
        # given at their defaults (200 steps, a checkpoint every 100, no compiling): refused all the same
        (["--layer_steps", "200"], "--layer_steps does"),
        (["--checkpoint_every=100", "--torch_compile", "no"], "--checkpoint_every, --torch_compile do"),
        (
            ["--train_attention_weights=false", "--end_to_end_steps=0"],
            "--end_to_end_steps, --train_attention_weights do",
        ),
    ],
)
def test_evaluate_only_refuses_the_options_of_training_when_parsed(pair, tmp_path, capsys, flags, named):
    """--evaluate_only trains nothing: a stop, a resume, a schedule or a checkpoint option given with it was taken
    without a word and did nothing; each is refused by name before any work, whatever its value (one given at its
    default was taken without a word)."""
    command = ["--teacher", str(pair / "teacher"), "--student", str(pair / "student_k4"), "--output_dir"]
    command += [str(tmp_path / "out"), "--text_files", str(pair / "text.txt"), "--evaluate_only", *flags]
    with pytest.raises(SystemExit) as exit:
        main(command)
    error = capsys.readouterr().err
    assert exit.value.code == 2 and f"--evaluate_only trains nothing, so {named} nothing with it" in error
    assert not (tmp_path / "out").exists()
    # What the evaluation reads is kept: the text, the lengths and batches, the seed, replacing fidelity.json.
    kept = dict(lengths=[16], batch_size=2, eval_windows=2, eval_documents=4, seed=3, overwrite_output_dir=True)
    kept.update(teacher=str(pair / "teacher"), student=str(pair / "student_k4"), output_dir=str(tmp_path / "out"))
    assert TransferArguments(text_files=[str(pair / "text.txt")], evaluate_only=True, show_progress=False, **kept)
    # the test's training arguments (layer_steps and others away from their defaults)
    with pytest.raises(ValueError, match="--layer_steps, --projection_learning_rate, --warmup_steps, --log_every do"):
        arguments(pair, tmp_path, evaluate_only=True)


def test_overwrite_output_dir_leaves_no_file_of_the_earlier_run(pair, tmp_path):
    """An earlier transfer's model files (another family's modeling code, a sentence-transformers pooling, a
    tokenizer's vocabulary, a conversion report) are deleted with it; a folder holding what no transfer writes is
    refused before any work."""
    out = tmp_path / "out"
    run_transfer(arguments(pair, out, layer_steps=1))
    fresh = sorted(path.name for path in out.iterdir())
    earlier = ["modeling_performer.py", "configuration_performer.py", "modules.json", "sentence_bert_config.json"]
    earlier += ["config_sentence_transformers.json", "vocab.txt", "special_tokens_map.json", "conversion_report.json"]
    for name in earlier:
        (out / name).write_text("{}")
    (out / "1_Pooling").mkdir()
    (out / "1_Pooling" / "config.json").write_text("{}")
    run_transfer(arguments(pair, out, layer_steps=1, overwrite_output_dir=True))
    assert sorted(path.name for path in out.iterdir()) == fresh
    (out / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=f"--output_dir {out} holds notes.txt, which no transfer writes"):
        run_transfer(arguments(pair, out, layer_steps=1, overwrite_output_dir=True))
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").exists()


@pytest.mark.parametrize(
    "case, expected",
    [
        ("nothing to train", "Stage 1 has nothing to train for a Performer student"),
        ("one document", r"1 document\(s\) cannot be split into training and held-out text"),
        ("too few held-out tokens", "The held-out text has .* tokens, fewer than 1000 windows"),
    ],
)
def test_overwrite_output_dir_deletes_nothing_when_the_run_is_refused(pair, tmp_path, case, expected):
    """A refusal found once the models and text are read comes before --overwrite_output_dir deletes the earlier
    run's outputs: they used to be deleted first, and the run then refused, leaving an empty folder."""
    out = tmp_path / "out"
    run_transfer(arguments(pair, out, layer_steps=1))
    earlier = sorted(path.name for path in out.iterdir())
    (tmp_path / "one.txt").write_text(" ".join(wikitext_lines(50)) + "\n")
    overrides = {
        "nothing to train": dict(student=str(pair / "student_performer")),
        "one document": dict(text_files=[str(tmp_path / "one.txt")]),
        "too few held-out tokens": dict(eval_windows=1000),
    }[case]
    with pytest.raises(ValueError, match=expected):
        run_transfer(arguments(pair, out, layer_steps=1, overwrite_output_dir=True, **overrides))
    assert sorted(path.name for path in out.iterdir()) == earlier


def test_overwrite_output_dir_never_deletes_the_student_the_run_reads(pair, tmp_path):
    """A checkpoint of the earlier run taken as --student (with a tokenizer saved into it) was deleted with that run's
    outputs, after it was loaded: the user's model was gone and the result lacked its conversion report."""
    import shutil

    out = tmp_path / "out"
    run_transfer(arguments(pair, out, layer_steps=3, checkpoint_every=2))
    student = out / "checkpoint-2"
    for name in ("tokenizer.json", "tokenizer_config.json", "conversion_report.json"):
        shutil.copy(pair / "student_k4" / name, student)
    with pytest.raises(ValueError, match=f"--student={student} is inside {student}, which --overwrite_output_dir"):
        run_transfer(arguments(pair, out, student=str(student), layer_steps=1, overwrite_output_dir=True))
    assert (student / "model.safetensors").is_file() and (out / "transfer_report.json").is_file()


def test_a_folder_another_transfer_is_writing_is_refused_naming_the_flag(pair, tmp_path):
    from training_utils import lock_held_by_another_process

    from linformer_hf.training.errors import ConfigError

    out = tmp_path / "out"
    out.mkdir()
    with lock_held_by_another_process(out) as holder:
        with pytest.raises(ConfigError, match=rf"pid {holder.pid}.*or use another --output_dir\.$"):
            run_transfer(arguments(pair, out, overwrite_output_dir=True))


@pytest.mark.parametrize(
    "case, expected",
    [
        ("empty text file", r"Data file \S+empty.txt has no text \(it is empty or only blank lines\)"),
        ("binary text file", r"Data file \S+binary.txt is not UTF-8 text \(line 1: byte 0xff at column 3\)"),
        ("csv read as json", r"Data file\(s\) \S+table.csv could not be read: .*Check that --dataset json is the"),
        ("empty json file", r"Data file \S+empty.json has no text"),
        ("a column of numbers", r"--text_column label of csv holds int64 values, not text: give the column with"),
        # were "[Errno 21] Is a directory" and datasets' "Unable to find"
        ("a folder of text files", r"--text_files \S+texts is a folder: give the files in it \(e.g. \S+texts/\*.txt\)"),
        ("a folder of data files", r"--data_files \S+texts is a folder: give the files in it"),
    ],
)
def test_text_that_cannot_be_read_is_one_error_line(pair, tmp_path, capsys, monkeypatch, case, expected):
    """Said before the models load (minutes for real ones): no model weights are read first."""
    from linformer_hf.training import transfer

    def no_weights(*args, **kwargs):
        raise AssertionError("the models were loaded before the text was checked")

    monkeypatch.setattr(transfer, "load_model", no_weights)
    monkeypatch.setattr(transfer, "load_teacher", no_weights)
    monkeypatch.setattr(transformers.PreTrainedModel, "from_pretrained", classmethod(no_weights))
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "binary.txt").write_bytes(b"ab\xff\xfe\x00\x01cd\n")
    (tmp_path / "texts").mkdir()
    (tmp_path / "table.csv").write_text("text,label\n" + "".join(f"{line},{i}\n" for i, line in enumerate("abc")))
    text = {
        "empty text file": ["--text_files", str(tmp_path / "empty.txt")],
        "binary text file": ["--text_files", str(tmp_path / "binary.txt")],
        "csv read as json": ["--dataset", "json", "--data_files", str(tmp_path / "table.csv")],
        "empty json file": ["--dataset", "json", "--data_files", str(tmp_path / "empty.json")],
        "a column of numbers": ["--dataset", "csv", "--data_files", str(tmp_path / "table.csv")],
        "a folder of text files": ["--text_files", str(tmp_path / "texts")],
        "a folder of data files": ["--dataset", "text", "--data_files", str(tmp_path / "texts")],
    }[case]
    if case == "a column of numbers":
        text += ["--text_column", "label"]
    command = ["--teacher", str(pair / "teacher"), "--student", str(pair / "student_k4")]
    with pytest.raises(SystemExit) as exit:
        main([*command, "--output_dir", str(tmp_path / "out"), *text, "--show_progress", "false"])
    output = capsys.readouterr().err
    error = [line for line in output.splitlines() if line.startswith("error:")]
    assert exit.value.code == 2 and "Traceback" not in output and len(error) == 1 and re.search(expected, error[0])


def test_the_token_streams_are_the_shuffled_documents_ids_whatever_the_batching(pair, monkeypatch):
    """Tokenised a batch of documents at a time into int32 (bounded memory on books): the streams must still be each
    part's documents' ids, in the seeded order, and the windows cut from them int64 as the models take them."""
    from linformer_hf.training import transfer_data

    tokenizer = transformers.AutoTokenizer.from_pretrained(pair / "teacher")
    texts = wikitext_lines(40)
    expected = transfer_data.tokenize_streams(texts, tokenizer, 0.25, seed=5)
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(5)).tolist()
    ids = tokenizer([texts[i] for i in order], add_special_tokens=False)["input_ids"]
    held_out = round(len(texts) * 0.25)
    assert expected.train.tolist() == [token for document in ids[held_out:] for token in document]
    assert expected.held_out.tolist() == [token for document in ids[:held_out] for token in document]
    assert expected.train.dtype == torch.int32
    monkeypatch.setattr(transfer_data, "TOKENIZE_BATCH_CHARACTERS", 50)  # a few documents a batch
    batched = transfer_data.tokenize_streams(texts, tokenizer, 0.25, seed=5)
    assert torch.equal(batched.train, expected.train) and torch.equal(batched.held_out, expected.held_out)
    args = TransferArguments(
        teacher=str(pair / "teacher"), student=str(pair / "student_k4"), output_dir="unused", text_files=["t.txt"]
    )
    assert transfer_data.training_batch(batched, tokenizer, args, [16], step=0).dtype == torch.long
    assert transfer_data.held_out_batches(batched, tokenizer, [16], windows=2)[16].dtype == torch.long
