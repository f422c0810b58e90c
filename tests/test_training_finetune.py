"""Fine-tuning on real SST-2 and IMDB files and on a pair-input (QQP layout) file; offline metrics; 2 processes."""

import csv
import json
import os
import shutil
import signal
import subprocess

import numpy as np
import pytest
import torch
from prefork import python_executable
from training_utils import (
    DATA,
    IMDB,
    REPO,
    SST2_DEV,
    SST2_TRAIN,
    WIKITEXT,
    free_port,
    run_script,
    save_tiny_pretrained_linformer,
    script_env,
    sst2_head,
    tiny_finetune_overrides,
)

from linformer_hf.training.config import FinetuneRecipe, load_recipe
from linformer_hf.training.finetuning import label_names, run_finetuning
from linformer_hf.training.metrics import classification_metrics, collapsed_classifier
from linformer_hf.training.tasks import TASKS, Task


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    """A tiny Linformer (n = 256 for long documents) with a tokenizer trained on real text, saved like pretrain.py
    does."""
    return save_tiny_pretrained_linformer(tmp_path_factory.mktemp("pretrained"))


def read_predictions(path):
    with open(path, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return np.array([int(r["prediction"]) for r in rows]), np.array([int(r["label"]) for r in rows])


def test_sst2_script_reports_accuracy_keeps_best_and_writes_predictions(pretrained_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification

    out = tmp_path / "sst2"
    res = run_script(
        [
            "scripts/finetune.py",
            "--config",
            "configs/finetune/sst2.yaml",
            "--no_progress",
            "--model.pretrained",
            pretrained_dir,
            "--data.train_file",
            SST2_TRAIN,
            "--data.validation_file",
            SST2_DEV,
            "--data.test_file",
            SST2_DEV,
            "--data.max_train_samples",
            "384",
            "--data.max_seq_length",
            "64",
            "--training.output_dir",
            str(out),
            "--training.num_train_epochs",
            "2",
            "--training.learning_rate",
            "1e-3",
            "--training.per_device_train_batch_size",
            "32",
            "--training.report_to",
            "[tensorboard]",
        ]
    )
    assert res.returncode == 0, res.stderr[-3000:]
    with open(out / "results.json") as fh:
        result = json.load(fh)
    assert [h["step"] for h in result["history"]] == [12, 24]  # one evaluation per epoch
    best = max(result["history"], key=lambda h: h["accuracy"])
    assert result["best"]["accuracy"] == best["accuracy"]
    # The reported metric is the one of the written predictions (all 872 dev rows, in order).
    preds, labels = read_predictions(out / "predictions_validation.tsv")
    assert len(preds) == 872
    with open(SST2_DEV, encoding="utf-8") as fh:
        dev_labels = [int(line.rstrip("\n").split("\t")[1]) for line in list(fh)[1:]]
    assert labels.tolist() == dev_labels
    assert (preds == labels).mean() == pytest.approx(best["accuracy"])
    # The best checkpoint reloads and predicts the test file as reported.
    model = AutoModelForSequenceClassification.from_pretrained(out / "best")
    assert type(model).__name__ == "LinformerForSequenceClassification"
    test_preds, _ = read_predictions(out / "predictions_test.tsv")
    assert (test_preds == preds).all()
    assert result["test"]["accuracy"] == pytest.approx(best["accuracy"])
    # Tracked (TensorBoard), and no intermediate checkpoint is left beside the best model.
    assert any(f.startswith("events.out.tfevents") for _, _, files in os.walk(out / "runs") for f in files)
    assert not [name for name in os.listdir(out) if name.startswith("checkpoint-")]
    assert (out / ".run.lock").read_text() == ""  # the output directory's lock, released at the end


def test_imdb_long_documents_truncated_to_n(pretrained_dir, tmp_path):
    recipe = load_recipe(
        FinetuneRecipe,
        None,
        extra={
            "model.pretrained": pretrained_dir,
            "data.task": "imdb",
            "data.train_file": IMDB,
            "data.max_train_samples": 96,
            "data.max_eval_samples": 64,
            "data.validation_split_percentage": 10,
            "training.output_dir": str(tmp_path / "imdb"),
            "training.num_train_epochs": 1,
            "training.per_device_train_batch_size": 16,
            "training.learning_rate": 1e-3,
            "training.eval_steps": 100,
        },
    )  # beyond the run's 6 updates: the final model is evaluated once
    result = run_finetuning(recipe, show_progress=False)
    assert result["steps"] == 6 and 0.0 <= result["best"]["accuracy"] <= 1.0
    assert [h["step"] for h in result["history"]] == [6]
    preds, labels = read_predictions(tmp_path / "imdb" / "predictions_validation.tsv")
    assert len(preds) == 64
    assert (preds == labels).mean() == pytest.approx(result["best"]["accuracy"])


def write_pair_file(path, rows):
    """A QQP-layout file made from SST-2 sentences: label 1 when both sentences have the same sentiment."""
    with open(SST2_TRAIN, encoding="utf-8") as fh:
        lines = [line.rstrip("\n").split("\t") for line in list(fh)[1 : 2 * rows + 1]]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("question1\tquestion2\tlabel\n")
        for (s1, l1), (s2, l2) in zip(lines[0::2], lines[1::2]):
            fh.write(f"{s1}\t{s2}\t{int(l1 == l2)}\n")


def test_pairs_qqp_layout_report_accuracy_and_f1_with_two_processes(pretrained_dir, tmp_path):
    train, dev = tmp_path / "train.tsv", tmp_path / "dev.tsv"
    write_pair_file(train, 128)
    write_pair_file(dev, 150)  # 150 rows: not a multiple of the 2 x 16 eval batch, so padding must be dropped
    out = tmp_path / "qqp"
    cmd = [
        python_executable(),
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        "scripts/finetune.py",
        "--config",
        "configs/finetune/qqp.yaml",
        "--no_progress",
        "--model.pretrained",
        pretrained_dir,
        "--data.train_file",
        str(train),
        "--data.validation_file",
        str(dev),
        "--data.max_seq_length",
        "96",
        "--training.output_dir",
        str(out),
        "--training.num_train_epochs",
        "1",
        "--training.per_device_train_batch_size",
        "8",
        "--training.per_device_eval_batch_size",
        "16",
        "--training.learning_rate",
        "1e-3",
    ]
    res = subprocess.run(
        cmd,
        cwd=REPO,
        env=script_env(ACCELERATE_USE_CPU="1", OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    with open(out / "results.json") as fh:
        result = json.load(fh)
    assert result["steps"] == 8  # 128 rows / (2 processes x 8)
    assert set(result["best"]) >= {"accuracy", "f1"}
    preds, labels = read_predictions(out / "predictions_validation.tsv")
    assert len(preds) == 150
    expected = classification_metrics(preds, labels, with_f1=True)
    assert result["best"]["accuracy"] == pytest.approx(expected["accuracy"])
    assert result["best"]["f1"] == pytest.approx(expected["f1"])


def qnli_head(path, rows: int) -> str:
    """The header and the first `rows` pairs of the local QNLI file (labels by index: 0 entailment)."""
    with open(os.path.join(DATA, "qnli", "train.tsv"), encoding="utf-8") as fh:
        lines = [line for _, line in zip(range(rows + 1), fh)]
    path.write_text("".join(lines), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    "task,make_file,names",
    [("sst2", sst2_head, ["negative", "positive"]), ("qnli", qnli_head, ["entailment", "not_entailment"])],
)
def test_a_fine_tuned_classifier_is_saved_with_its_label_names(pretrained_dir, tmp_path, task, make_file, names):
    """Local files hold the classes by index; the saved model carries the task's names, so a pipeline answers
    "positive" or "not_entailment" rather than LABEL_1. One update and a few rows: only the names are checked."""
    from transformers import AutoConfig, pipeline

    train = make_file(tmp_path / "train.tsv", 16)
    settings = {"data.task": task, "data.validation_file": train, "training.max_steps": 1}
    settings["training.per_device_train_batch_size"] = 8
    out = tmp_path / "out"
    recipe = load_recipe(FinetuneRecipe, None, extra=tiny_finetune_overrides(pretrained_dir, train, out, settings))
    run_finetuning(recipe, show_progress=False)
    config = AutoConfig.from_pretrained(out / "best")
    assert config.id2label == dict(enumerate(names))
    assert config.label2id == {name: i for i, name in enumerate(names)}
    classify = pipeline("text-classification", model=str(out / "best"), top_k=None)
    text = "a gripping , funny film" if task == "sst2" else {"text": "Who wrote it?", "text_pair": "It was written."}
    assert sorted(score["label"] for score in classify([text])[0]) == sorted(names)


def test_label_names_come_from_the_data_then_the_task_then_the_indices():
    """A Hub data set's ClassLabel names its classes; a local file's integer column takes the task's names; a task
    with none keeps the indices."""
    from datasets import ClassLabel, Dataset, Features, Value

    hub = Dataset.from_dict(
        {"sentence": ["a", "b"], "label": [0, 1]},
        features=Features({"sentence": Value("string"), "label": ClassLabel(names=["bad", "good"])}),
    )
    local = Dataset.from_dict({"sentence": ["a", "b"], "label": [0, 1]})
    assert label_names(hub, TASKS["sst2"]) == ["bad", "good"]
    assert label_names(local, TASKS["sst2"]) == ["negative", "positive"]
    assert label_names(local, TASKS["imdb"]) == ["neg", "pos"]
    assert label_names(local, Task(("sentence",), None, "train", "validation", num_labels=3)) == ["0", "1", "2"]


def test_metrics_match_definitions():
    m = classification_metrics([1, 0, 1, 1], [1, 0, 0, 1], with_f1=True)
    assert m["accuracy"] == 0.75
    assert m["f1"] == pytest.approx(2 * 2 / (2 * 2 + 1 + 0))  # tp 2, fp 1, fn 0


def test_collapsed_classifier_is_named_only_when_one_class_is_predicted_for_mixed_labels():
    warning = collapsed_classifier([1, 1, 1, 1], [0, 1, 1, 1])
    assert "predicts class 1 for all 4 validation examples, whose labels hold 2 classes" in warning
    assert "(75.0%) is only the share of class 1" in warning
    assert collapsed_classifier([1, 0, 1, 1], [0, 1, 1, 1]) is None  # two classes predicted, however badly
    assert collapsed_classifier([0, 0, 0], [0, 0, 0]) is None  # one class is all there is to predict
    assert collapsed_classifier([1], [0]) is None  # one example says nothing


def test_a_run_that_learns_one_class_says_so_at_each_evaluation_and_in_its_results(pretrained_dir, tmp_path, capsys):
    """A labelling bug (every training label 0) teaches the classifier one class: its validation accuracy is then the
    share of that class, and the run must say so rather than report it as a score."""
    train = sst2_head(tmp_path / "train.tsv", 128, label=0)
    settings = {"data.max_eval_samples": 64, "training.num_train_epochs": 2, "training.learning_rate": 1e-3}
    settings["training.per_device_train_batch_size"] = 32
    recipe = load_recipe(
        FinetuneRecipe, None, extra=tiny_finetune_overrides(pretrained_dir, train, tmp_path / "out", settings)
    )
    result = run_finetuning(recipe, show_progress=False)
    preds, labels = read_predictions(tmp_path / "out" / "predictions_validation.tsv")
    assert set(preds) == {0} and set(labels) == {0, 1}
    share = f"{100 * np.mean(labels == 0):.1f}%"
    assert result["warnings"] == [collapsed_classifier(preds, labels)]
    assert share in result["warnings"][0]
    printed = capsys.readouterr().out
    assert printed.count("Warning: Collapsed classifier: it predicts class 0 for all 64 validation examples") >= 2
    with open(tmp_path / "out" / "results.json") as fh:
        assert json.load(fh)["warnings"] == result["warnings"]


def tiny_roberta_dir(folder) -> str:
    """A tiny RoBERTa masked LM at 64 positions with its tokenizer, saved in ``folder``: a source to convert."""
    import torch
    from transformers import RobertaConfig, RobertaForMaskedLM

    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    tok = train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(folder), vocab_size=500, model_max_length=64)
    torch.manual_seed(0)
    RobertaForMaskedLM(
        RobertaConfig(
            vocab_size=len(tok),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=66,
            pad_token_id=1,
        )
    ).save_pretrained(folder)
    return str(folder)


def converting_recipe(source, conversion, output_dir, **overrides):
    return load_recipe(
        FinetuneRecipe,
        None,
        extra={
            "model.pretrained": source,
            "model.convert_from_roberta": conversion,
            "data.task": "sst2",
            "data.train_file": SST2_TRAIN,
            "data.validation_file": SST2_DEV,
            "data.max_train_samples": 64,
            "data.max_eval_samples": 64,
            "training.output_dir": str(output_dir),
            "training.num_train_epochs": 1,
            "training.per_device_train_batch_size": 16,
            **overrides,
        },
    )


@pytest.mark.parametrize(
    "conversion,expected",
    [
        ({"projected_length": 16}, {"model_type": "linformer", "projected_length": 16, "max_sequence_length": 64}),
        (
            {"target": "performer", "num_random_features": 16, "kernel": "relu"},
            {"model_type": "performer", "num_random_features": 16, "kernel": "relu"},
        ),
    ],
)
def test_finetune_from_a_roberta_checkpoint_converted_on_the_fly(tmp_path, conversion, expected):
    from transformers import AutoConfig

    recipe = converting_recipe(tiny_roberta_dir(tmp_path / "roberta"), conversion, tmp_path / "out")
    result = run_finetuning(recipe, show_progress=False)
    assert result["steps"] == 4
    config = AutoConfig.from_pretrained(tmp_path / "out" / "best")
    assert {key: getattr(config, key) for key in expected} == expected


def test_a_resumed_run_on_a_converted_source_needs_no_source_and_keeps_its_conversion_settings(tmp_path):
    """The conversion the run's first part saved is resumed, with the source gone (before, the recipe was refused
    for a source that no longer existed); other conversion settings are refused, naming the field (before, the
    saved conversion was taken and the new settings ignored)."""
    import shutil

    from linformer_hf.training.config import ConfigError

    source = tiny_roberta_dir(tmp_path / "roberta")
    conversion = {"max_sequence_length": 64, "projected_length": 16}
    schedule = {"training.eval_steps": 2}
    part = run_finetuning(
        converting_recipe(source, conversion, tmp_path / "out", **schedule, **{"training.stop_after_steps": 2}),
        show_progress=False,
    )
    assert part == {"stopped_at": 2}
    shutil.rmtree(source)
    latest = {**schedule, "training.resume_from_checkpoint": "latest"}
    other = {**conversion, "projected_length": 8}
    with pytest.raises(ConfigError, match=r"model.convert_from_roberta: .*'projected_length': 16.* in the checkpoint"):
        run_finetuning(converting_recipe(source, other, tmp_path / "out", **latest), show_progress=False)
    resumed = run_finetuning(converting_recipe(source, conversion, tmp_path / "out", **latest), show_progress=False)
    assert resumed["steps"] == 4


@pytest.mark.parametrize(
    "conversion,message",
    [
        ({"target": "performer", "projected_length": 16}, r"\['projected_length'\].*target performer.*kernel"),
        ({"target": "performer", "projection_noise_std": 0.1}, r"\['projection_noise_std'\]"),
        ({"num_random_features": 16}, r"\['num_random_features'\].*target linformer.*projected_length"),
        ({"target": "reformer"}, "convert_from_roberta.target: target must be one of"),
    ],
)
def test_conversion_options_are_checked_against_the_target_family(tmp_path, conversion, message):
    """Each family's own settings, named in the error with the allowed ones, before any model is loaded."""
    from linformer_hf.training.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_recipe(
            FinetuneRecipe,
            None,
            extra={
                "model.pretrained": str(tmp_path),
                "model.convert_from_roberta": conversion,
                "data.task": "sst2",
                "data.train_file": SST2_TRAIN,
            },
        )


def test_logged_loss_under_accumulation_is_the_mean_of_all_micro_batches(pretrained_dir, tmp_path):
    """2 micro-batches of 8 log (and train) as one batch of 16: the logged loss is the update's, not the last half's."""
    train = sst2_head(tmp_path / "train.tsv", 64)

    def run(batch, accumulation):
        overrides = tiny_finetune_overrides(
            pretrained_dir,
            train,
            tmp_path / f"b{batch}",
            {
                "model.config": {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
                "data.max_train_samples": 64,
                "data.max_eval_samples": 16,
                "data.max_seq_length": 64,
                "training.num_train_epochs": 1,
                "training.per_device_train_batch_size": batch,
                "training.gradient_accumulation_steps": accumulation,
                "training.learning_rate": 1e-3,
                "training.save_best": False,
                "training.logging_steps": 1,
            },
        )
        recipe = load_recipe(FinetuneRecipe, None, extra=overrides)
        return run_finetuning(recipe, show_progress=False)["train_losses"]

    whole, accumulated = run(16, 1), run(8, 2)
    assert list(accumulated) == list(whole) == [1, 2, 3, 4]
    for step in whole:
        assert accumulated[step] == pytest.approx(whole[step], abs=1e-5), step
    assert len({round(v, 4) for v in whole.values()}) > 1


def test_eval_on_start_reaches_the_trainer(pretrained_dir, tmp_path):
    """`training.eval_on_start` (where a converted classifier starts, before any update) is passed to the Trainer."""
    from linformer_hf.training.finetuning import training_arguments

    argv = ["--model.pretrained", pretrained_dir, "--data.train_file", SST2_TRAIN, "--data.validation_file", SST2_DEV]
    argv += ["--training.output_dir", str(tmp_path / "out")]
    recipe = load_recipe(FinetuneRecipe, "configs/finetune/sst2.yaml", argv)
    assert training_arguments(recipe).eval_on_start is False
    recipe = load_recipe(FinetuneRecipe, "configs/finetune/sst2.yaml", argv + ["--training.eval_on_start", "true"])
    assert training_arguments(recipe).eval_on_start is True


def test_results_best_is_the_kept_model_not_the_evaluation_before_the_first_update(pretrained_dir, tmp_path):
    """With eval_on_start, the evaluation before any update (of no model the run keeps: the Trainer neither
    checkpoints it nor counts it for its best) was taken as results.json's best when it scored highest, while best/
    held a model that scored less; and with no evaluation on the schedule after it, the model trained was never
    evaluated at all. Here the training labels are all 1 and the validation labels all 0: training only lowers the
    score, so the evaluation at step 0 is (one of) the highest."""
    train = sst2_head(tmp_path / "train.tsv", 32, label=1)
    validation = tmp_path / "dev.tsv"
    with open(SST2_DEV, encoding="utf-8") as fh:
        header, *lines = list(fh)
    validation.write_text(header + "".join([line for line in lines if line.rstrip().endswith("\t0")][:48]))
    settings = {"training.eval_on_start": True, "training.learning_rate": 5e-3, "training.max_steps": 6}
    settings.update({"training.per_device_train_batch_size": 8, "data.validation_file": str(validation)})
    for eval_steps, kept_step in ((3, None), (10, 6)):  # on the schedule at 3 and 6; beyond the last update
        out = tmp_path / f"out-{eval_steps}"
        overrides = tiny_finetune_overrides(pretrained_dir, train, out, {**settings, "training.eval_steps": eval_steps})
        result = run_finetuning(load_recipe(FinetuneRecipe, None, extra=overrides), show_progress=False)
        assert result["history"][0]["step"] == 0  # the evaluation before the first update stays in the history
        assert result["best"]["step"] > 0 and result["best"]["step"] == (kept_step or result["best"]["step"])
        preds, labels = read_predictions(out / "predictions_validation.tsv")  # of the model kept in best/
        assert result["best"]["accuracy"] == pytest.approx(float(np.mean(preds == labels)))
        with open(out / "results.json", encoding="utf-8") as fh:
            assert json.load(fh)["best"] == result["best"]


@pytest.mark.parametrize("max_seq_length", [59, None])
def test_mixed_precision_pads_to_a_multiple_of_8_never_past_n(tmp_path, max_seq_length):
    """Under bf16 the batches are padded to a multiple of 8, but never past the model's n: a Linformer of n = 60 read
    batches of 59 or 60 tokens padded to 64, and refused them as longer than n."""
    pretrained = save_tiny_pretrained_linformer(tmp_path / "n60", n=60, k=12)
    recipe = load_recipe(
        FinetuneRecipe,
        None,
        extra={
            "model.pretrained": pretrained,
            "data.task": "imdb",
            "data.train_file": IMDB,
            "data.max_train_samples": 8,
            "data.max_eval_samples": 8,
            "data.validation_split_percentage": 10,
            "data.max_seq_length": max_seq_length,
            "training.output_dir": str(tmp_path / "out"),
            "training.num_train_epochs": 1,
            "training.per_device_train_batch_size": 8,
            "training.mixed_precision": "bf16",
            "training.save_best": False,
        },
    )  # IMDB reviews: every one longer than 60 tokens, cut to max_seq_length
    result = run_finetuning(recipe, show_progress=False)
    assert result["steps"] == 1 and 0.0 <= result["best"]["accuracy"] <= 1.0


def test_the_padding_collator_rounds_to_8_up_to_n_only_under_mixed_precision(tmp_path):
    from transformers import AutoTokenizer

    from linformer_hf.training.data import padding_collator

    tokenizer = AutoTokenizer.from_pretrained(save_tiny_pretrained_linformer(tmp_path, n=60, k=12))

    def padded(lengths, longest, precision):
        features = [{"input_ids": [5] * length, "attention_mask": [1] * length, "label": 0} for length in lengths]
        batch = padding_collator(tokenizer, longest, precision)(features)
        assert batch["labels"].tolist() == [0] * len(lengths)
        assert batch["attention_mask"].sum(1).tolist() == lengths  # padding is masked out
        return batch["input_ids"].shape[1]

    for precision in ("bf16", "fp16"):
        assert [padded([10, 17], 60, precision), padded([56], 60, precision)] == [24, 56]
        assert [padded([57], 60, precision), padded([59, 3], 60, precision), padded([60], 60, precision)] == [60] * 3
        assert padded([59], 64, precision) == 64
    for precision in (None, "no"):
        assert [padded([10, 17], 60, precision), padded([59], 60, precision)] == [17, 59]


# ------------------------------------------------------------------------------------------------------------------
# The same command run again after the run finished (a requeued job), and a refused command's earlier outputs
# ------------------------------------------------------------------------------------------------------------------


def finetune_command(overrides: dict) -> int:
    """`linformer-hf finetune` in this process, as a job script runs it: its exit status."""
    from training_utils import as_argv

    from linformer_hf.training.finetune import main

    return main(
        ["--config", os.path.join(REPO, "configs", "finetune", "sst2.yaml"), "--no_progress", *as_argv(overrides)]
    )


def finetune_argv(overrides: dict) -> list[str]:
    """`finetune_command`'s command line, for a process of its own."""
    from training_utils import as_argv

    config = os.path.join(REPO, "configs", "finetune", "sst2.yaml")
    return ["-m", "linformer_hf.training.finetune", "--config", config, "--no_progress", *as_argv(overrides)]


def folder_state(folder) -> dict:
    """Every file under ``folder`` (the lock file too): its bytes and when it was last written."""
    return {
        str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def finished_finetuning(pretrained_dir, tmp_path_factory):
    """A fine-tuning run finished by `finetune_command` (stopped at update 2, then resumed to its end at 4), with a copy
    of its checkpoint-2 kept aside; returns the folder, that copy and a function giving the run's overrides for
    another output folder. Copy the folder (`shutil.copytree` keeps the files' times) before changing anything."""
    root = tmp_path_factory.mktemp("finished")
    train = sst2_head(root / "train.tsv", 32)
    settings = {"training.max_steps": 4, "training.eval_steps": 2, "training.per_device_train_batch_size": 8}
    settings.update({"data.test_file": train, "data.max_eval_samples": 32, "training.learning_rate": 1e-3})

    def overrides(out, **changes):
        return {**tiny_finetune_overrides(pretrained_dir, train, out, settings), **changes}

    out = root / "run"
    assert finetune_command(overrides(out, **{"training.stop_after_steps": 2})) == 0
    checkpoint = root / "checkpoint-2"
    shutil.copytree(out / "checkpoint-2", checkpoint)
    assert finetune_command(overrides(out, **{"training.resume_from_checkpoint": "latest"})) == 0
    assert not [name for name in os.listdir(out) if name.startswith("checkpoint-")]
    return out, checkpoint, overrides


def test_a_finished_finetuning_run_resumed_with_latest_is_complete_and_left_as_it_is(
    finished_finetuning, tmp_path, capsys
):
    """A requeued job runs the finished command again with `--training.resume_from_checkpoint latest`: it exited 2
    with "no checkpoint" (a finished run keeps only best/ and its results), where pretraining and transfer say the run
    is complete and exit 0. Now fine-tuning does too, writing nothing; the finished run records its recipe, so that
    another recipe (or schedule) is refused, naming the field, and a run finished before the record is named as
    such."""
    from linformer_hf.training.checkpointing import RECIPE_FILE

    finished, _, overrides = finished_finetuning
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    before = folder_state(out)
    assert {"results.json", "predictions_validation.tsv", "predictions_test.tsv", "best/model.safetensors"} <= set(
        before
    )
    assert RECIPE_FILE in before
    latest = {"training.resume_from_checkpoint": "latest"}
    capsys.readouterr()
    assert finetune_command(overrides(out, **latest)) == 0
    printed = capsys.readouterr()
    assert f"The run in {out} is complete ({out / 'results.json'}: 4 updates" in printed.out, printed
    assert folder_state(out) == before  # results, predictions, best/: the same bytes, none written again

    for change, field in (
        ({"training.seed": 7}, "training.seed: 42 in the finished run, 7 now"),
        ({"training.max_steps": 6}, "training.max_steps: 4 in the finished run, 6 now"),
    ):
        assert finetune_command(overrides(out, **latest, **change)) == 2
        error = capsys.readouterr().err
        assert field in error and "start over with training.overwrite_output_dir" in error, error
        assert folder_state(out) == before

    os.remove(out / RECIPE_FILE)  # a run finished before fine-tuning recorded its recipe with its results
    before = folder_state(out)
    assert finetune_command(overrides(out, **latest)) == 2
    error = capsys.readouterr().err
    assert f"error: The run in {out} finished ({out / 'results.json'})" in error, error
    assert f"records no recipe ({RECIPE_FILE}" in error and "start over with training.overwrite_output_dir" in error
    assert "Traceback" not in error and folder_state(out) == before


def test_latest_onto_a_finished_run_beside_a_stray_checkpoint_or_without_its_results(
    finished_finetuning, tmp_path, capsys
):
    """`latest` onto folders a finished run left otherwise: a checkpoint beside its results that is older than them
    (the run killed after its results, while removing its checkpoints) is named and removed, with a checkpoint left
    half deleted (`.trash-`), the run complete and its outputs untouched; one written after them (a later run in the
    folder) is resumed to its end, as transfer resumes a checkpoint newer than its report. Without results.json
    (deleted), or with it unreadable, the command is refused naming what is missing, not with "no checkpoint" or a
    traceback, and the folder is left as it was."""
    from linformer_hf.training.checkpointing import LOCK_FILE

    finished, checkpoint, overrides = finished_finetuning
    latest = {"training.resume_from_checkpoint": "latest"}
    out = tmp_path / "stray"
    shutil.copytree(finished, out)
    shutil.copytree(checkpoint, out / "checkpoint-2")  # its times kept: older than results.json
    assert os.path.getmtime(out / "checkpoint-2") < os.path.getmtime(out / "results.json")
    shutil.copytree(checkpoint, out / ".trash-checkpoint-4-123")  # killed mid-removal: renamed aside, not deleted
    before = folder_state(out)
    capsys.readouterr()
    assert finetune_command(overrides(out, **latest)) == 0
    printed = capsys.readouterr().out
    assert f"The run in {out} is complete" in printed, printed
    assert "Removed beside it: checkpoint-2, .trash-checkpoint-4-123, older than" in printed, printed
    after = folder_state(out)
    assert {k: v for k, v in after.items() if k != LOCK_FILE} == {
        k: v for k, v in before.items() if not k.startswith(("checkpoint-2/", ".trash-")) and k != LOCK_FILE
    }
    assert not [name for name in os.listdir(out) if name.startswith(("checkpoint-", ".trash-"))]

    shutil.copytree(checkpoint, out / "checkpoint-2")
    os.utime(out / "checkpoint-2")  # written after the results: a later run's, resumed
    assert finetune_command(overrides(out, **latest)) == 0
    assert "is complete" not in capsys.readouterr().out
    resumed, first = (json.loads((folder / "results.json").read_text()) for folder in (out, finished))
    assert resumed["steps"] == 4 and resumed["history"] == first["history"] and resumed["best"] == first["best"]
    assert not [name for name in os.listdir(out) if name.startswith("checkpoint-")]

    out = tmp_path / "no-results"
    shutil.copytree(finished, out)
    os.remove(out / "results.json")
    before = folder_state(out)
    assert finetune_command(overrides(out, **latest)) == 2
    error = capsys.readouterr().err
    assert f"{out} holds a finished fine-tuning run's outputs (best, predictions_validation.tsv" in error, error
    assert "but not its results.json" in error and "neither complete nor resumable" in error
    assert "Traceback" not in error and folder_state(out) == before

    (out / "results.json").write_text('{"task": "sst2", "be')  # cut short
    before = folder_state(out)
    assert finetune_command(overrides(out, **latest)) == 2
    error = capsys.readouterr().err
    assert f"error: The run in {out} finished, but its {out / 'results.json'} is unreadable" in error, error
    assert folder_state(out) == before


KILLED_FINISHING = """
import os, signal, sys
from linformer_hf.training import finetuning_results
from linformer_hf.training.finetune import main

moment, write_json = sys.argv[1], finetuning_results.write_json_atomic

def killed(*args):
    os.kill(os.getpid(), signal.SIGKILL)

def killed_writing_results(path, data):  # results.json not yet written: best/, predictions and recipe are
    if os.path.basename(path) == "results.json":
        killed()
    write_json(path, data)

if moment == "before results.json":
    finetuning_results.write_json_atomic = killed_writing_results
else:  # results.json written, no checkpoint removed yet
    finetuning_results.remove_checkpoints = killed
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("moment", ["before results.json", "before removing the checkpoints"])
def test_a_run_killed_while_writing_its_results_is_resumable_or_complete(finished_finetuning, tmp_path, capsys, moment):
    """A finished run removed its checkpoints before it wrote results.json: a kill in that gap left neither a
    finished run nor a checkpoint, and `latest` refused the folder (the whole run lost). Now the checkpoints are
    removed last: a run SIGKILLed just before writing results.json is resumed by `latest` from its last checkpoint
    and ends with the uninterrupted run's results, predictions and best model; one killed after it, before removing
    its checkpoints, is complete, and `latest` names those checkpoints and removes them, its outputs untouched."""
    from linformer_hf.training.checkpointing import LOCK_FILE, RESULTS_FILE, checkpoint_problem

    finished, _, overrides = finished_finetuning
    out = tmp_path / "run"
    killed = subprocess.run(
        [python_executable(), "-c", KILLED_FINISHING, moment, *finetune_argv(overrides(out))[2:]],
        cwd=REPO,
        env=script_env(OMP_NUM_THREADS=str(torch.get_num_threads())),  # the same sums as this process's run
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    checkpoints = sorted(name for name in os.listdir(out) if name.startswith("checkpoint-"))
    assert checkpoints and all(checkpoint_problem(out / name) is None for name in checkpoints)
    assert (out / RESULTS_FILE).is_file() == (moment != "before results.json")
    assert (out / "best" / "model.safetensors").is_file() and (out / "predictions_test.tsv").is_file()
    before = folder_state(out)

    capsys.readouterr()
    assert finetune_command(overrides(out, **{"training.resume_from_checkpoint": "latest"})) == 0
    printed = capsys.readouterr()
    assert not [name for name in os.listdir(out) if name.startswith(("checkpoint-", ".tmp-", ".trash-"))]
    resumed, first = (json.loads((folder / RESULTS_FILE).read_text()) for folder in (out, finished))
    for key in ("steps", "history", "best", "train_losses"):
        assert resumed[key] == first[key], key
    for name in ("predictions_validation.tsv", "predictions_test.tsv", "best/model.safetensors"):
        assert (out / name).read_bytes() == (finished / name).read_bytes(), name
    if moment == "before results.json":
        assert "is complete" not in printed.out, printed.out
    else:
        assert f"The run in {out} is complete" in printed.out, printed.out
        assert f"Removed beside it: {', '.join(checkpoints)}, older than its results" in printed.out
        after = folder_state(out)
        kept = {k: v for k, v in before.items() if not k.startswith("checkpoint-") and k != LOCK_FILE}
        assert {k: v for k, v in after.items() if k != LOCK_FILE} == kept  # results, best/, predictions: as written


@pytest.mark.parametrize("broken", ["no weights", "no tokenizer", "inputs longer than n", "a source without weights"])
def test_an_overwrite_refused_for_its_model_leaves_the_earlier_runs_outputs(
    finished_finetuning, pretrained_dir, tmp_path, capsys, broken
):
    """With training.overwrite_output_dir the output folder was claimed, and the earlier run's results, predictions and
    best/ deleted, before the model was checked: a model folder without its weights or tokenizer (or a data length
    past its n, or a RoBERTa source to convert without weights) then refused the run with the earlier results gone.
    Now every check of the model and its tokenizer comes first: the folder is left as it was, its lock file too."""
    from linformer_hf.loading import TOKENIZER_FILES

    finished, _, overrides = finished_finetuning
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    before = folder_state(out)
    model = tmp_path / "model"
    changes = {"model.pretrained": str(model), "training.overwrite_output_dir": True}
    if broken == "a source without weights":
        tiny_roberta_dir(model)
        changes["model.convert_from_roberta"] = {"projected_length": 16}
    else:
        shutil.copytree(pretrained_dir, model)
    if broken in ("no weights", "a source without weights"):
        os.remove(model / "model.safetensors")
        message = f"model.pretrained: {model} holds no weights"
    elif broken == "no tokenizer":
        for name in TOKENIZER_FILES:
            if (model / name).exists():
                os.remove(model / name)
        message = f"model.pretrained={model} holds no tokenizer"
    else:
        changes["data.max_seq_length"] = 512
        message = "data.max_seq_length=512 is larger than the model's longest input n=256"
    capsys.readouterr()
    assert finetune_command(overrides(out, **changes)) == 2
    error = capsys.readouterr().err
    assert message in error, error
    assert folder_state(out) == before
