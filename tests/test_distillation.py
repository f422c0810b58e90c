"""Fine-tuning a converted classifier with its teacher (training/distillation.py) on a tiny BERT classifier:
the student's task loss and its KL to the teacher fall, a resumed run repeats the uninterrupted one exactly, and a
teacher the student cannot learn from is refused before any work."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config
from training_utils import SST2_DEV, SST2_TRAIN

from linformer_hf.training.config import ConfigError, FinetuneRecipe, load_recipe
from linformer_hf.training.finetuning import run_finetuning


def write_rule_labelled(source, destination, rows):
    """The first SST-2 sentences of ``source``, labelled 1 where the word "the" occurs: a rule a tiny model learns in
    a few dozen updates, so that its teacher fits its data as a converged one does."""
    with open(source, encoding="utf-8") as handle:
        sentences = [line.split("\t")[0] for line in handle.readlines()[1 : rows + 1]]
    labels = [int("the" in sentence.split()) for sentence in sentences]
    destination.write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in zip(sentences, labels)))
    return str(destination)


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A tiny BERT classifier fine-tuned on 512 sentences (16 tokens), with its WordPiece tokenizer."""
    root = tmp_path_factory.mktemp("distillation")
    start = root / "start"
    tokenizer = build_wordpiece_tokenizer(str(start))
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(tiny_bert_config(num_labels=2)).save_pretrained(start)
    tokenizer.save_pretrained(start)
    train = write_rule_labelled(SST2_TRAIN, root / "train.tsv", 512)
    dev = write_rule_labelled(SST2_DEV, root / "dev.tsv", 128)
    recipe = load_recipe(
        FinetuneRecipe,
        None,
        extra={
            "model.pretrained": str(start),
            "data.train_file": train,
            "data.validation_file": dev,
            "data.max_seq_length": 16,
            "training.output_dir": str(root / "teacher"),
            "training.num_train_epochs": 4,
            "training.per_device_train_batch_size": 32,
            "training.learning_rate": 3e-3,
            "training.lr_scheduler_type": "constant",
            "training.warmup_ratio": 0.0,
            "training.eval_steps": 64,
            "training.weight_decay": 0.0,
        },
    )
    run_finetuning(recipe, show_progress=False)
    teacher_dir = root / "teacher" / "best"
    # Relabel the training sentences with the teacher's predictions: a teacher that fits its training data, as a
    # converged one does, in a few seconds of training.
    model = transformers.AutoModelForSequenceClassification.from_pretrained(teacher_dir).eval()
    rows = [line.rstrip("\n").split("\t") for line in open(train, encoding="utf-8").readlines()[1:]]
    with torch.no_grad():
        batch = tokenizer([row[0] for row in rows], truncation=True, max_length=16, padding=True, return_tensors="pt")
        predictions = model(**batch).logits.argmax(-1).tolist()
    assert 0.2 < sum(predictions) / len(predictions) < 0.8  # both labels
    relabelled = root / "train_teacher_labels.tsv"
    relabelled.write_text("sentence\tlabel\n" + "".join(f"{r[0]}\t{y}\n" for r, y in zip(rows, predictions)))
    return {"dir": str(teacher_dir), "train": str(relabelled), "dev": dev}


def student_overrides(teacher, output_dir, **extra):
    """Convert the teacher (k = 4 of n = 16, random E = F: far from the teacher) and fine-tune it with the teacher."""
    overrides = {
        "model.pretrained": teacher["dir"],
        "model.convert_from_roberta": {"projected_length": 4, "projection_init": "random", "sharing": "key_value"},
        "data.train_file": teacher["train"],
        "data.validation_file": teacher["dev"],
        "data.max_seq_length": 16,
        "distillation.teacher": teacher["dir"],
        "training.output_dir": str(output_dir),
        "training.per_device_train_batch_size": 16,
        "training.learning_rate": 2e-3,
        "training.logging_steps": 1,
        "training.warmup_ratio": 0.0,
    }
    overrides.update(extra)
    return overrides


def run(overrides):
    return run_finetuning(load_recipe(FinetuneRecipe, None, extra=overrides), show_progress=False)


def distillation_terms(model_dir, teacher, hidden_layers=None) -> dict:
    """The three terms of the loss on the first 256 training sentences at once, labelled by the teacher (not one
    training batch: no batch-to-batch noise), for the model in ``model_dir`` against the teacher."""
    from linformer_hf.training.distillation import hidden_state_loss, load_teacher, logit_kl

    tokenizer = transformers.AutoTokenizer.from_pretrained(teacher["dir"])
    rows = [line.rstrip("\n").split("\t") for line in open(teacher["train"], encoding="utf-8").readlines()[1:257]]
    batch = tokenizer([r[0] for r in rows], truncation=True, max_length=16, padding=True, return_tensors="pt")
    labels = torch.tensor([int(r[1]) for r in rows])
    model = transformers.AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    with torch.no_grad():
        student, reference = (
            model(**batch, output_hidden_states=True),
            load_teacher(teacher["dir"])(**batch, output_hidden_states=True),
        )
    mask = batch["attention_mask"].float()
    return {
        "task_loss": torch.nn.functional.cross_entropy(student.logits, labels).item(),
        "kd_kl": logit_kl(student.logits, reference.logits, 1.0).item(),
        "hidden_loss": hidden_state_loss(student.hidden_states, reference.hidden_states, mask, hidden_layers).item(),
    }


def test_task_loss_and_distance_to_the_teacher_fall(teacher, tmp_path):
    result = run(
        student_overrides(
            teacher, tmp_path / "student", **{"training.max_steps": 24, "distillation.hidden_weight": 1.0}
        )
    )
    terms = [result["train_terms"][step] for step in sorted(result["train_terms"])]
    assert len(terms) == 24 and all(set(t) == {"task_loss", "kd_kl", "hidden_loss"} for t in terms)  # logged
    # The converted student before any update against the model the run kept.
    before = distillation_terms(tmp_path / "student" / "converted", teacher)
    after = distillation_terms(result["best_dir"], teacher)
    for name in ("task_loss", "kd_kl", "hidden_loss"):
        assert after[name] < 0.8 * before[name], (name, before[name], after[name])
    record = json.loads((tmp_path / "student" / "distillation.json").read_text())
    assert record == result["distillation"] and record["teacher"] == teacher["dir"]
    assert len(record["teacher_sha256"]) == 64


def test_a_resumed_run_repeats_the_uninterrupted_one(teacher, tmp_path):
    """With dropout on (the RNG state must carry over) and a Performer student (its random features too)."""
    common = {
        "model.convert_from_roberta": {"target": "performer", "num_random_features": 8},
        "model.config": {"hidden_dropout_prob": 0.1},
        "training.max_steps": 8,
        "training.eval_steps": 4,
        "distillation.hidden_weight": 0.5,
        "distillation.hidden_layers": [1, 2],
    }
    whole = run(student_overrides(teacher, tmp_path / "whole", **common))
    stopped = run(student_overrides(teacher, tmp_path / "parts", **common, **{"training.stop_after_steps": 5}))
    assert stopped == {"stopped_at": 5}  # between checkpoints 4 and 8: saved on the stop
    assert not (tmp_path / "parts" / "results.json").exists()
    resumed = run(
        student_overrides(teacher, tmp_path / "parts", **common, **{"training.resume_from_checkpoint": "latest"})
    )
    for key in ("train_losses", "train_terms", "history", "best", "steps"):
        assert resumed[key] == whole[key], key


def test_resume_refuses_another_teacher_and_follows_a_moved_one(teacher, tmp_path, monkeypatch):
    common = {"training.max_steps": 4, "training.eval_steps": 2}
    assert run(student_overrides(teacher, tmp_path, **common, **{"training.stop_after_steps": 2}))["stopped_at"] == 2
    resume = {**common, "training.resume_from_checkpoint": "latest"}
    with pytest.raises(ConfigError, match="distilled with temperature=2.0"):
        run(student_overrides(teacher, tmp_path, **resume, **{"distillation.temperature": 4.0}))
    without = student_overrides(teacher, tmp_path, **resume)
    del without["distillation.teacher"]
    with pytest.raises(ConfigError, match="resume it with --distillation.teacher"):
        run(without)
    # Another teacher at the same path (weights changed) is refused; the same teacher at another path, named by a
    # relative path from another directory, resumes (before: refused as another teacher, by its path).
    moved, tampered = (tmp_path.parent / f"{tmp_path.name}-{name}" for name in ("moved", "tampered"))
    shutil.copytree(teacher["dir"], moved)
    shutil.copytree(teacher["dir"], tampered)
    config = json.loads((tampered / "config.json").read_text())
    (tampered / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-5}))
    monkeypatch.chdir(moved.parent)
    with pytest.raises(ConfigError, match="distilled with teacher_sha256="):
        run(student_overrides(teacher, tmp_path, **resume, **{"distillation.teacher": tampered.name}))
    assert run(student_overrides(teacher, tmp_path, **resume, **{"distillation.teacher": moved.name}))["steps"] == 4


def test_the_teacher_is_known_by_its_config_and_weights_not_its_training_settings(teacher, tmp_path):
    """The teacher's SHA-256 took in every .bin file of its folder, the Trainer's training_args.bin (saved beside a
    fine-tuned classifier, nothing of its outputs) among them: a teacher whose training_args.bin changed was refused
    on resume as another teacher. Now its config and weight files only (named in the record). A run recorded with the
    earlier hash resumes where that hash still matches, and where it does not is refused saying why and how to go
    on."""
    from linformer_hf.loading import model_sha256

    copy = tmp_path / "teacher"
    shutil.copytree(teacher["dir"], copy)
    assert (copy / "training_args.bin").is_file()
    common = {"training.max_steps": 6, "training.eval_steps": 2, "distillation.teacher": str(copy)}
    out = tmp_path / "run"
    assert run(student_overrides(teacher, out, **common, **{"training.stop_after_steps": 2}))["stopped_at"] == 2
    record = json.loads((out / "distillation.json").read_text())
    assert record["teacher_sha256_files"] == ["config.json", "model.safetensors"]
    (copy / "training_args.bin").write_bytes(b"the settings of another fine-tuning")
    resume = {**common, "training.resume_from_checkpoint": "latest"}
    assert run(student_overrides(teacher, out, **resume, **{"training.stop_after_steps": 3}))["stopped_at"] == 3
    # A record of the earlier hash (config.json and every .safetensors / .bin file): resumed where it matches.
    earlier = {key: value for key, value in record.items() if key != "teacher_sha256_files"}
    (out / "distillation.json").write_text(json.dumps({**earlier, "teacher_sha256": model_sha256(str(copy))}))
    assert run(student_overrides(teacher, out, **resume, **{"training.stop_after_steps": 4}))["stopped_at"] == 4
    # ... and where it does not (training_args.bin changed since, or the teacher), refused, naming the way on.
    (out / "distillation.json").write_text(json.dumps({**earlier, "teacher_sha256": "0" * 64}))
    with pytest.raises(ConfigError, match="recorded its teacher by an earlier SHA-256.*training_args.bin") as error:
        run(student_overrides(teacher, out, **resume))
    assert record["teacher_sha256"] in str(error.value)
    (out / "distillation.json").write_text(json.dumps({**earlier, "teacher_sha256": record["teacher_sha256"]}))
    assert run(student_overrides(teacher, out, **resume, **{"training.stop_after_steps": 5}))["stopped_at"] == 5
    # The weights changed: another teacher, refused as before.
    (out / "distillation.json").write_text(json.dumps(record))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 1e-5}))
    with pytest.raises(ConfigError, match="distilled with teacher_sha256="):
        run(student_overrides(teacher, out, **resume))


@pytest.mark.parametrize(
    "change,message",
    [
        ({"distillation.teacher": None, "distillation.kd_weight": 0.7}, "kd_weight is set but distillation.teacher"),
        ({"distillation.kd_weight": 1.5}, r"kd_weight must be in \[0, 1\]"),
        ({"distillation.temperature": 0}, "temperature must be > 0"),
        ({"distillation.kd_weight": 0}, "would not be used"),
        ({"distillation.hidden_layers": [1, 2]}, r"hidden_layers=\[1, 2\] is set but distillation.hidden_weight is 0"),
        ({"distillation.hidden_weight": 1, "distillation.hidden_layers": []}, "hidden_layers is empty"),
        ({"data.task": "qnli"}, None),  # same labels: accepted at validation (2 labels)
        ({"training.stop_after_steps": 0}, "stop_after_steps must be >= 1"),
        ({"training.resume_from_checkpoint": "latest", "training.overwrite_output_dir": True}, "one or the other"),
    ],
)
def test_distillation_options_are_checked(teacher, tmp_path, change, message):
    overrides = {key: value for key, value in student_overrides(teacher, tmp_path).items()}
    overrides.update(change)
    if message is None:
        load_recipe(FinetuneRecipe, None, extra=overrides)
        return
    with pytest.raises(ConfigError, match=message):
        load_recipe(FinetuneRecipe, None, extra=overrides)


def test_a_teacher_the_student_cannot_learn_from_is_refused(teacher, tmp_path):
    """Refused when the run starts, before any work (the output directory is not even created); validating the recipe
    reads no model."""
    base = student_overrides(teacher, tmp_path / "out")
    # Another label count than the task's.
    three = tmp_path / "three_labels"
    transformers.BertForSequenceClassification(tiny_bert_config(num_labels=3)).save_pretrained(three)
    load_recipe(FinetuneRecipe, None, extra={**base, "distillation.teacher": str(three)})
    with pytest.raises(ConfigError, match="teacher has 3 labels but the task's student has 2"):
        run({**base, "distillation.teacher": str(three)})
    # The task's classes in the other order (its id2label; any other names say nothing of the order, and pass).
    swapped = tmp_path / "swapped_classes"
    model = transformers.AutoModelForSequenceClassification.from_pretrained(teacher["dir"])
    assert model.config.id2label == {0: "negative", 1: "positive"}  # SST-2's, as the teacher's fine-tuning saved them
    model.config.id2label, model.config.label2id = {0: "Positive", 1: "Negative"}, {"Positive": 0, "Negative": 1}
    model.save_pretrained(swapped)
    transformers.AutoTokenizer.from_pretrained(teacher["dir"]).save_pretrained(swapped)
    with pytest.raises(ConfigError, match=r"numbers the task's classes otherwise: .* \['Positive', 'Negative'\]"):
        run({**base, "distillation.teacher": str(swapped)})
    # Not a classifier.
    encoder = tmp_path / "encoder"
    transformers.BertModel(tiny_bert_config()).save_pretrained(encoder)
    with pytest.raises(ConfigError, match="not a sequence classifier"):
        run({**base, "distillation.teacher": str(encoder)})
    # A hidden state the student does not have.
    with pytest.raises(ConfigError, match=r"hidden_layers \[3\] out of range"):
        run({**base, "distillation.hidden_weight": 1, "distillation.hidden_layers": [3]})
    # Another vocabulary: the same size, other tokens.
    other = tmp_path / "other_vocabulary"
    tokenizer = build_wordpiece_tokenizer(str(other))
    vocab = tokenizer.get_vocab()
    (other / "vocab.txt").write_text("\n".join(sorted(vocab, key=vocab.get)[::-1]) + "\n")
    transformers.BertForSequenceClassification(tiny_bert_config(num_labels=2)).save_pretrained(other)
    transformers.BertTokenizer(vocab_file=str(other / "vocab.txt")).save_pretrained(other)
    with pytest.raises(ConfigError, match="tokenizer .* differs from the student's"):
        run({**base, "distillation.teacher": str(other)})
    # A copy of the teacher without its weights (its best/ keeps the Trainer's training_args.bin): before, the run
    # wrote distillation.json and tokenised, then failed loading the teacher with a traceback.
    weightless = tmp_path / "weightless"
    shutil.copytree(teacher["dir"], weightless, ignore=shutil.ignore_patterns("*.safetensors"))
    assert (weightless / "training_args.bin").is_file()
    with pytest.raises(ConfigError, match=r"distillation.teacher: .*weightless holds no weights"):
        run({**base, "distillation.teacher": str(weightless)})
    # Another depth, with the hidden-state loss on.
    deep = tmp_path / "deep"
    transformers.BertForSequenceClassification(tiny_bert_config(num_labels=2, num_hidden_layers=3)).save_pretrained(
        deep
    )
    with pytest.raises(ConfigError, match="differ in num_hidden_layers: teacher 3, student 2"):
        run({**base, "distillation.teacher": str(deep), "distillation.hidden_weight": 1})
    assert not (tmp_path / "out").exists()


def test_a_teacher_given_as_a_hub_name_is_hashed_from_the_cache_or_refused_before_any_work(
    teacher, tmp_path, monkeypatch
):
    """A Hub name as distillation.teacher failed where its files were hashed, with `[Errno 2] No such file or
    directory: 'org/teacher'` (os.listdir on the name). Now its files are found as loading finds them (the Hub cache,
    downloaded first where the Hub can be reached) and hashed as a folder of the same files is; the record names the
    teacher as given, and a resume whose cached teacher changed is refused. Offline and not in the cache (or its
    weights not), one error naming it and the way out, before any work."""
    from huggingface_hub import constants
    from training_utils import hub_cache_model

    from linformer_hf.loading import model_files_sha256

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))  # the tests' Hub cache: nothing but what is put there
    hub_cache_model(cache, "org/teacher", teacher["dir"])
    monkeypatch.chdir(tmp_path)  # "org/teacher" is no folder here
    common = {"distillation.teacher": "org/teacher", "training.max_steps": 4, "training.eval_steps": 2}
    out = tmp_path / "run"
    assert run(student_overrides(teacher, out, **common, **{"training.stop_after_steps": 2}))["stopped_at"] == 2
    record = json.loads((out / "distillation.json").read_text())
    assert record["teacher"] == "org/teacher"
    assert record["teacher_sha256"] == model_files_sha256(teacher["dir"])  # training_args.bin aside, as a folder's
    assert record["teacher_sha256_files"] == ["config.json", "model.safetensors"]
    # the name's newer download (another commit: retrained, here its config changed) is another teacher
    config = json.loads((Path(teacher["dir"]) / "config.json").read_text())
    retrained = hub_cache_model(cache, "org/teacher", teacher["dir"], commit="1" * 40)
    with open(os.path.join(retrained, "config.json"), "w") as handle:
        json.dump({**config, "layer_norm_eps": 1e-5}, handle)
    resume = {**common, "training.resume_from_checkpoint": "latest"}
    with pytest.raises(ConfigError, match="distilled with teacher_sha256="):
        run(student_overrides(teacher, out, **resume))
    hub_cache_model(cache, "org/teacher", teacher["dir"], names=[])  # refs/main back to the run's commit
    assert run(student_overrides(teacher, out, **resume))["steps"] == 4
    # not in the cache, or only its config and tokenizer: one line, before any work
    tokenizer_files = [name for name in os.listdir(teacher["dir"]) if "token" in name or name == "vocab.txt"]
    hub_cache_model(cache, "org/config-only", teacher["dir"], names=["config.json", *tokenizer_files])
    for name in ("org/absent", "org/config-only"):
        with pytest.raises(ConfigError) as error:
            run(student_overrides(teacher, tmp_path / "refused", **{**common, "distillation.teacher": name}))
        message = str(error.value)
        assert message.startswith(f"distillation.teacher {name!r} is not a local path"), message
        assert "offline mode is on" in message and "folder of a saved model" in message
        assert not (tmp_path / "refused").exists()
