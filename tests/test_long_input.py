"""Long inputs from a short-input teacher: the extended teacher is exact; the probe sees what truncation loses."""

import csv
import json
import os
import random
import subprocess
import sys

import pytest
import torch
from tiny_bert import build_wordpiece_tokenizer, tiny_bert_config
from transformers import AutoModel, AutoTokenizer, BertModel

import linformer_hf  # noqa: F401  (registers the Linformer Auto classes)
from experiments.long_input import extend_positions, long_document_probe, main, paired_difference
from linformer_hf import outputs
from linformer_hf.conversion import convert_checkpoint

SHORT_POSITIONS = 16
LONG_N = 48


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("teacher")
    tokenizer = build_wordpiece_tokenizer(str(out), model_max_length=SHORT_POSITIONS)
    torch.manual_seed(0)
    BertModel(tiny_bert_config(max_position_embeddings=SHORT_POSITIONS)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="module")
def extended_dir(teacher_dir, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("extended") / "model")
    extend_positions(teacher_dir, out, LONG_N)
    return out


def padded_batch(tokenizer, max_length):
    texts = ["the city of the river and the old castle " * 6, "the war", "it was the first game of the season " * 3]
    return tokenizer(texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")


def test_extended_teacher_keeps_the_teacher_on_short_inputs(teacher_dir, extended_dir):
    teacher, extended = AutoModel.from_pretrained(teacher_dir).eval(), AutoModel.from_pretrained(extended_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(extended_dir)
    assert tokenizer.model_max_length == LONG_N and extended.config.max_position_embeddings == LONG_N
    batch = padded_batch(tokenizer, SHORT_POSITIONS)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        torch.testing.assert_close(extended(**batch).last_hidden_state[mask], teacher(**batch).last_hidden_state[mask])


def test_extended_teacher_equals_the_linformer_converted_at_k_equal_n(teacher_dir, extended_dir, tmp_path):
    """Conversion at n = LONG_N extends positions the same way, so at k = n the two compute the same function on
    inputs longer than the teacher's positions (padded batch); position p copies learned row p mod 16."""
    student_dir = str(tmp_path / "linformer")
    convert_checkpoint(
        teacher_dir, student_dir, max_sequence_length=LONG_N, projected_length=LONG_N, sharing="key_value"
    )
    extended, student = AutoModel.from_pretrained(extended_dir).eval(), AutoModel.from_pretrained(student_dir).eval()
    table = extended.embeddings.position_embeddings.weight
    torch.testing.assert_close(table[SHORT_POSITIONS + 3], table[3])
    batch = padded_batch(AutoTokenizer.from_pretrained(extended_dir), LONG_N)
    assert batch["input_ids"].shape[1] > SHORT_POSITIONS
    mask = batch["attention_mask"].bool()
    assert not mask.all()
    with torch.no_grad():
        torch.testing.assert_close(
            student(**batch).last_hidden_state[mask], extended(**batch).last_hidden_state[mask], atol=1e-5, rtol=1e-5
        )


def test_extend_refuses_a_length_the_teacher_already_has(teacher_dir, tmp_path):
    with pytest.raises(ValueError, match="not longer than the source's 16 positions"):
        extend_positions(teacher_dir, str(tmp_path / "out"), SHORT_POSITIONS)


def test_paired_difference():
    result = paired_difference([True, True, False, True], [True, False, False, False])
    assert result["difference"] == pytest.approx(0.5)
    assert result["standard_error"] == pytest.approx((1 / 3) ** 0.5 / 2, abs=1e-5)  # diffs 0,1,0,1: sd sqrt(1/3)
    with pytest.raises(ValueError):
        paired_difference([True], [True, False])


def write_documents(path, seed=0):
    """Label words: 'city' (1) or 'war' (0), repeated. Short documents carry them anywhere; long ones only after a
    filler longer than the teacher's 16 positions, so only a model that reads past position 16 can see the label
    ('war' is two WordPieces: at most 15 tokens short, 27 to 46 long)."""
    rng = random.Random(seed)
    rows = []
    for i in range(160):
        label = rng.randint(0, 1)
        word = "city" if label else "war"
        if i % 2:
            text = " ".join(["the"] * rng.randint(0, 3) + [word] * rng.randint(2, 5))
        else:
            text = " ".join(["the"] * rng.randint(17, 20) + [word] * rng.randint(8, 12))
        rows.append((text, label))
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def test_probe_sees_what_truncation_hides(teacher_dir, extended_dir, tmp_path):
    data = tmp_path / "docs.csv"
    write_documents(data)
    output = tmp_path / "probe.json"
    argv = ["probe", "--data", str(data), "--models", teacher_dir, extended_dir, "--reference", extended_dir]
    assert main(argv + ["--output", str(output)]) == 0
    results = json.loads(output.read_text())
    assert results["threshold"] == SHORT_POSITIONS and results["long"] == 80 and results["short"] == 80
    teacher, extended = results["models"][teacher_dir], results["models"][extended_dir]
    assert teacher["long_documents_truncated"] == 80 and extended["long_documents_truncated"] == 0
    assert teacher["long_accuracy"] <= 0.7  # sees only the filler: near chance
    assert extended["long_accuracy"] >= 0.9
    paired = extended["against_" + teacher_dir.rstrip("/").split("/")[-1]]
    assert paired["difference"] == pytest.approx(extended["long_accuracy"] - teacher["long_accuracy"], abs=1e-4)
    assert extended["cosine_with_reference_long"] == pytest.approx(1.0, abs=1e-5)
    assert main(argv + ["--output", str(output)]) == 2  # never overwrites a result


def test_probe_needs_short_and_long_documents(teacher_dir):
    with pytest.raises(ValueError, match="needs both"):
        long_document_probe([teacher_dir], ["the war"] * 4, [0, 1, 0, 1])


def test_length_split_for_fine_tuning(teacher_dir, tmp_path):
    import pandas as pd

    data = tmp_path / "docs.csv"
    write_documents(data)
    out = tmp_path / "split"
    # what a split killed while writing short.csv left beside it (it wrote through `short.csv.tmp`, one name for every
    # writer, that the next split did not remove): removed now, its writer being dead
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / f"short.csv.tmp-{dead.pid}-0123abcd@{outputs._host_tag()}").write_text("text,la")
    assert main(["split", "--data", str(data), "--tokenizer", teacher_dir, str(out)]) == 0
    assert sorted(os.listdir(out)) == ["long.csv", "short.csv"]
    short, long = pd.read_csv(out / "short.csv"), pd.read_csv(out / "long.csv")
    assert len(short) == len(long) == 80  # every document lands in exactly one part
    tokenizer = AutoTokenizer.from_pretrained(teacher_dir)
    assert max(len(tokenizer(t)["input_ids"]) for t in short.text) <= SHORT_POSITIONS
    assert min(len(tokenizer(t)["input_ids"]) for t in long.text) > SHORT_POSITIONS
    assert set(short.columns) == {"text", "label"}
    assert main(["split", "--data", str(data), "--tokenizer", teacher_dir, str(out)]) == 2  # never overwrites


def test_missing_data_is_a_clear_error(teacher_dir, tmp_path, capsys):
    argv = ["probe", "--data", str(tmp_path / "none.csv"), "--models", teacher_dir, "--output", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "No data file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_missing_source_folder_is_named_before_any_work(tmp_path, capsys):
    """A local source that is not there is said to be missing (as the conversion script says it), not reported as
    transformers' malformed Hub repo id; a well-formed name that is neither a folder nor reachable offline says so."""
    missing = tmp_path / "no-such-teacher"
    assert main(["extend", str(missing), str(tmp_path / "out"), "--n", str(LONG_N)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such directory" in err and str(missing) in err and "Repo id" not in err
    assert main(["extend", "no-such-teacher", str(tmp_path / "out"), "--n", str(LONG_N)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'no-such-teacher' is not a local path" in err and "folder of a saved model" in err
    (tmp_path / "empty").mkdir()
    assert main(["extend", str(tmp_path / "empty"), str(tmp_path / "out"), "--n", str(LONG_N)]) == 2
    assert "has no config.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# Every argument of every subcommand that names a model or tokenizer folder (or Hub name): (option, argv given the
# valid teacher folder, the name under test, the data file and a fresh output path). The name comes after a valid
# model where the argument takes several, so "before any work" means before the first model is run too.
MODEL_ARGUMENTS = {
    "extend source": ("source", lambda teacher, name, data, out: ["extend", name, out, "--n", str(LONG_N)]),
    "split --tokenizer": (
        "--tokenizer", lambda teacher, name, data, out: ["split", "--data", data, "--tokenizer", name, out]
    ),
    "split --tokenizer --threshold": (
        "--tokenizer",
        lambda teacher, name, data, out: ["split", "--data", data, "--tokenizer", name, "--threshold", "16", out],
    ),
    "score --models": (
        "--models",
        lambda teacher, name, data, out: ["score", "--data", data, "--models", teacher, name, "--output", out],
    ),
    "probe --models": (
        "--models",
        lambda teacher, name, data, out: ["probe", "--data", data, "--models", teacher, name, "--output", out],
    ),
    "probe --reference": (
        "--reference",
        lambda teacher, name, data, out: ["probe", "--data", data, "--models", teacher, "--reference", name,
                                          "--output", out],
    ),
}  # fmt: skip


def no_work(monkeypatch):
    """Make reading the documents or loading a model fail the test: the name must be refused before either."""
    import transformers

    import experiments.long_input as long_input

    def work(*args, **kwargs):
        raise AssertionError("work began before the model argument was checked")

    monkeypatch.setattr(long_input, "read_documents", work)
    for auto in ("AutoConfig", "AutoTokenizer", "AutoModel", "AutoModelForSequenceClassification"):
        monkeypatch.setattr(getattr(transformers, auto), "from_pretrained", work)


@pytest.mark.parametrize("case", list(MODEL_ARGUMENTS))
def test_every_model_argument_names_a_missing_folder_before_any_work(case, teacher_dir, tmp_path, capsys, monkeypatch):
    """A local folder that is not there is said to be missing, on one line naming the argument and the path, before
    the data is read or any model loaded; not transformers' malformed Hub repo id. A file, or a folder without
    config.json where the model is read from one, is refused alike."""
    option, argv = MODEL_ARGUMENTS[case]
    data, out = str(tmp_path / "docs.csv"), str(tmp_path / "out")
    write_documents(data)
    no_work(monkeypatch)
    missing = str(tmp_path / "no-such-model")
    assert main(argv(teacher_dir, missing, data, out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{option}={missing}: no such directory" in err and "Repo id" not in err
    assert main(argv(teacher_dir, data, data, out)) == 2  # a file where a folder is meant
    assert f"{option}={data} is a file" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    if "--threshold" not in case:  # with --threshold, split reads the tokenizer alone, which needs no config.json
        assert main(argv(teacher_dir, str(tmp_path / "empty"), data, out)) == 2
        assert f"{option}={tmp_path / 'empty'} has no config.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", list(MODEL_ARGUMENTS))
def test_every_model_argument_says_a_hub_name_offline(case, teacher_dir, tmp_path, capsys, monkeypatch):
    """A well-formed name that is not a folder, offline, is said as such on one line naming the argument, before the
    first model is run over the documents."""
    import transformers

    import experiments.long_input as long_input

    def work(*args, **kwargs):
        raise AssertionError("a model was run before the Hub name was checked")

    monkeypatch.setattr(long_input, "embed", work)
    monkeypatch.setattr(transformers.AutoModelForSequenceClassification, "from_pretrained", work)
    option, argv = MODEL_ARGUMENTS[case]
    data, out = str(tmp_path / "docs.csv"), str(tmp_path / "out")
    write_documents(data)
    assert main(argv(teacher_dir, "no-such-model", data, out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{option} 'no-such-model' is not a local path" in err
    assert "folder of a saved model" in err
    assert not (tmp_path / "out").exists()


def test_a_killed_split_or_extension_leaves_nothing_that_reads_as_finished(teacher_dir, tmp_path, monkeypatch):
    """experiments/pretrained_evidence.sh takes an existing long.csv (or config.json) as a finished step: a kill while
    they were written used to leave one cut short."""
    import pandas as pd
    import transformers

    from experiments.long_input import write_length_split

    data = tmp_path / "docs.csv"
    write_documents(data)
    to_csv, written = pd.DataFrame.to_csv, []

    def killed_writing_the_second(self, *args, **kwargs):
        text = to_csv(self, *args, **kwargs)
        written.append(text)
        if len(written) == 2:
            raise KeyboardInterrupt
        return text

    monkeypatch.setattr(pd.DataFrame, "to_csv", killed_writing_the_second)
    with pytest.raises(KeyboardInterrupt):
        write_length_split(str(data), teacher_dir, str(tmp_path / "split"), None)
    assert os.listdir(tmp_path / "split") == ["short.csv"]  # no long.csv, nor a temporary file of it

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", killed)  # after the weights
    with pytest.raises(KeyboardInterrupt):
        extend_positions(teacher_dir, str(tmp_path / "extended"), LONG_N)
    assert not (tmp_path / "extended").exists()


def write_labelled(path, labels):
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows([f"review number {i}", label] for i, label in enumerate(labels))


def test_folds_hold_every_document_out_once_with_both_labels(tmp_path):
    import pandas as pd

    labels = [0] * 13 + [1] * 10
    write_labelled(tmp_path / "long.csv", labels)
    out = tmp_path / "folds"
    assert main(["folds", "--data", str(tmp_path / "long.csv"), "--folds", "5", str(out)]) == 0
    held_out = []
    for i in range(5):
        train, test = pd.read_csv(out / f"fold-{i}" / "train.csv"), pd.read_csv(out / f"fold-{i}" / "test.csv")
        assert not set(train.text) & set(test.text) and len(train) + len(test) == len(labels)
        assert sorted(test.label.value_counts().to_dict().items()) in ([(0, 2), (1, 2)], [(0, 3), (1, 2)])  # stratified
        held_out += list(test.text)
    assert sorted(held_out) == sorted(f"review number {i}" for i in range(len(labels)))  # each exactly once
    assert main(["folds", "--data", str(tmp_path / "long.csv"), "--folds", "5", str(out)]) == 2  # never overwrites
    with pytest.raises(ValueError, match="rarest label has 10"):
        from experiments.long_input import write_folds

        write_folds(str(tmp_path / "long.csv"), str(tmp_path / "other"), folds=11)


def test_crossval_pairs_every_held_out_document_and_checks_the_pairing(tmp_path, capsys):
    labels = [0, 1, 1, 0, 1, 0, 0, 1]
    write_labelled(tmp_path / "long.csv", labels)
    folds = tmp_path / "folds"
    assert main(["folds", "--data", str(tmp_path / "long.csv"), "--folds", "2", str(folds)]) == 0

    def write_run(name, flip):  # a run per fold whose prediction is wrong on the documents flip(index) picks
        dirs = []
        for i in range(2):
            with open(folds / f"fold-{i}" / "test.csv") as handle:
                fold_labels = [int(row["label"]) for row in csv.DictReader(handle)]
            run = tmp_path / f"{name}-fold{i}"
            run.mkdir()
            rows = [f"{j}\t{1 - y if flip(i, j) else y}\t{y}" for j, y in enumerate(fold_labels)]
            (run / "predictions_validation.tsv").write_text("index\tprediction\tlabel\n" + "\n".join(rows) + "\n")
            dirs.append(str(run))
        return dirs

    control = write_run("control", lambda i, j: j == 0)  # one wrong per fold: 6 of 8
    linformer = write_run("linformer", lambda i, j: False)  # all 8 right
    argv = ["crossval", "--folds_dir", str(folds), "--baseline", "control", "--output", str(tmp_path / "cv.json")]
    assert main(argv + ["--run", "control", *control, "--run", "linformer", *linformer]) == 0
    report = json.loads((tmp_path / "cv.json").read_text())
    assert report["documents"] == 8
    assert report["runs"]["control"]["accuracy"] == 0.75 and report["runs"]["linformer"]["accuracy"] == 1.0
    assert report["runs"]["linformer"]["against_control"] == paired_difference(
        [True] * 8, [False, True, True, True] * 2
    )
    assert main(argv + ["--run", "control", *control]) == 2  # never overwrites a report
    argv[-1] = str(tmp_path / "other.json")
    assert main(argv + ["--run", "control", control[0]]) == 2  # one dir per fold
    assert "one run dir per fold" in capsys.readouterr().err
    assert main(argv + ["--run", "control", *reversed(control)]) == 2  # scored on another fold: refused
    assert "does not hold fold 0's test documents" in capsys.readouterr().err
    assert not (tmp_path / "other.json").exists()


def test_score_reads_each_classifier_to_its_own_length_and_pairs_it_with_the_first(teacher_dir, tmp_path):
    """A classifier converted at k = n = LONG_N with strided E is full attention over the extended positions: on
    documents the teacher reads whole it predicts what the teacher predicts, and it reads LONG_N tokens, not 16."""
    from transformers import BertForSequenceClassification

    from experiments.long_input import score_classifiers

    classifier = tmp_path / "classifier"
    torch.manual_seed(0)
    BertForSequenceClassification(tiny_bert_config(max_position_embeddings=SHORT_POSITIONS)).save_pretrained(classifier)
    AutoTokenizer.from_pretrained(teacher_dir).save_pretrained(classifier)
    converted = tmp_path / "converted"
    convert_checkpoint(
        str(classifier), str(converted), max_sequence_length=LONG_N, projected_length=LONG_N, projection_init="strided"
    )
    texts = ["the war", "it was the first game", "the old castle and the river", "the city"] * 3
    labels = [0, 1, 1, 0] * 3
    results = score_classifiers([str(classifier), str(converted)], texts, labels, batch_size=5)
    first, second = results["models"][str(classifier)], results["models"][str(converted)]
    assert (first["max_length"], second["max_length"]) == (SHORT_POSITIONS, LONG_N)
    assert second["accuracy"] == first["accuracy"]
    assert second["against_first"] == {
        "difference": 0.0,
        "standard_error": 0.0,
    }  # the same prediction, document by document
    output = tmp_path / "score.json"
    argv = ["score", "--data", str(tmp_path / "docs.csv"), "--models", str(classifier), "--output", str(output)]
    write_labelled(tmp_path / "docs.csv", labels)
    assert main(argv) == 0 and json.loads(output.read_text())["documents"] == len(labels)
    assert main(argv) == 2  # never overwrites a result


def test_a_masked_lm_keeps_its_head_and_interpolated_positions_stretch_the_learned_rows(tmp_path):
    """A masked-LM teacher is written with its head (the same logits on inputs it could read); `interpolate` gives
    every new position a distinct row read off the learned table at p (learned - 1) / (n - 1), linearly."""
    from transformers import AutoModelForMaskedLM, BertForMaskedLM

    source = str(tmp_path / "mlm")
    tokenizer = build_wordpiece_tokenizer(source, model_max_length=SHORT_POSITIONS)
    torch.manual_seed(0)
    BertForMaskedLM(tiny_bert_config(max_position_embeddings=SHORT_POSITIONS)).save_pretrained(source)
    tokenizer.save_pretrained(source)
    teacher = AutoModelForMaskedLM.from_pretrained(source).eval()
    learned = teacher.bert.embeddings.position_embeddings.weight.detach()  # (16, hidden): BERT's rows start at 0
    n = 4 * (SHORT_POSITIONS - 1) + 1  # new position 4 j is learned row j exactly
    for how in ("copy", "interpolate"):
        out = str(tmp_path / how)
        report = extend_positions(source, out, n, positions=how)
        assert report["positions"] == how and report["rows"] == n
        extended = AutoModelForMaskedLM.from_pretrained(out).eval()  # loads with every weight: the head was written
        table = extended.bert.embeddings.position_embeddings.weight.detach()
        if how == "copy":
            batch = padded_batch(tokenizer, SHORT_POSITIONS)
            mask = batch["attention_mask"].bool()
            with torch.no_grad():
                torch.testing.assert_close(extended(**batch).logits[mask], teacher(**batch).logits[mask])
            torch.testing.assert_close(table[SHORT_POSITIONS + 1], learned[1])
            continue
        torch.testing.assert_close(table[::4], learned)
        torch.testing.assert_close(table[1], 0.75 * learned[0] + 0.25 * learned[1])
        torch.testing.assert_close(table[6], 0.5 * learned[1] + 0.5 * learned[2])
    with pytest.raises(ValueError, match="positions='nearest': choose one of"):
        extend_positions(source, str(tmp_path / "bad"), n, positions="nearest")
