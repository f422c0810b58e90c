"""training/config.py and training/validation.py: bad settings and bad data are refused before the first update, with a
message that names the problem: schedule and step counts, held-out percentages, fp16 on a CPU, fine-tuning labels,
and the scripts' `error:` line instead of a traceback."""

import os
import re
import shutil

import pytest
from training_utils import SST2_DEV, SST2_TRAIN, WIKITEXT, tiny_pretrain_overrides

from linformer_hf.training.config import ConfigError, FinetuneRecipe, PretrainRecipe, load_recipe


def pretrain(**extra):
    overrides = tiny_pretrain_overrides("unused-tokenizer", "unused-output", max_steps=10)
    overrides.update(extra)
    return load_recipe(PretrainRecipe, None, extra=overrides)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from linformer_hf import LinformerConfig

    out = tmp_path_factory.mktemp("model")
    LinformerConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_sequence_length=32,
        projected_length=8,
    ).save_pretrained(out)
    return str(out)


def finetune(model_dir, **extra):
    overrides = {"model.pretrained": model_dir, "data.train_file": SST2_TRAIN, "data.validation_file": SST2_DEV}
    overrides.update(extra)
    return load_recipe(FinetuneRecipe, None, extra=overrides)


# ------------------------------------------------------------------------------------------------------------------
# settings checked before the work, not after it
# ------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "training, message",
    [
        # The polynomial schedule divides by max_steps - warmup_steps at the last update.
        ({"warmup_steps": 10}, r"warmup_steps=10 must be smaller than training.max_steps=10.*polynomial"),
        (
            {"warmup_steps": 30, "lr_scheduler_type": "linear"},
            r"warmup_steps=30 must be smaller than training.max_steps=10",
        ),
        ({"warmup_steps": -1}, r"training.warmup_steps must be >= 0, got -1"),
        ({"max_steps": -5}, r"training.max_steps must be >= 1, got -5"),
        ({"checkpointing_steps": -2}, r"training.checkpointing_steps must be >= 1 \(or null: never\), got -2"),
        ({"eval_steps": -1}, r"training.eval_steps must be >= 1 \(or null: never\), got -1"),
        ({"checkpoints_total_limit": -1}, r"training.checkpoints_total_limit must be >= 1"),
        ({"stop_after_steps": 0}, r"training.stop_after_steps must be >= 1"),
        ({"learning_rate": 0}, r"training.learning_rate must be > 0"),
        # Each of these used to pass the recipe and fail (or go on silently) after the output directory was claimed.
        ({"learning_rate": float("nan")}, r"training.learning_rate must be > 0 and finite, got nan"),
        ({"learning_rate": float("inf")}, r"training.learning_rate must be > 0 and finite, got inf"),
        ({"adam_epsilon": -1}, r"training.adam_epsilon must be > 0 and finite .*got -1"),
        ({"weight_decay": -5}, r"training.weight_decay must be >= 0 and finite .*got -5"),
        ({"max_grad_norm": -1}, r"training.max_grad_norm must be > 0 and finite \(or null: no clipping\), got -1"),
        ({"seed": -1}, r"training.seed must be in \[0, 4294967295\] .*got -1"),
        ({"max_train_minutes": float("nan")}, r"training.max_train_minutes must be >= 0 .*got nan"),
        ({"output_dir": None}, r"training.output_dir: expected a string, got null"),
    ],
)
def test_pretraining_settings_refused_at_load(training, message):
    with pytest.raises(ConfigError, match=message):
        pretrain(**{f"training.{k}": v for k, v in training.items()})


@pytest.mark.parametrize(
    "overrides, message",
    [
        # The collator refused these at the first batch, after tokenising.
        (
            {"data.mask_replace_prob": 0.9, "data.random_replace_prob": 0.5},
            r"data.mask_replace_prob \+ data.random_replace_prob must be at most 1 .*0.9 \+ 0.5",
        ),
        ({"data.mask_replace_prob": -0.5}, r"data.mask_replace_prob must be in \[0, 1\], got -0.5"),
        # The model refused this when it was built, after tokenising.
        (
            {"model.config": {"hidden_size": 31, "num_attention_heads": 2}},
            r"hidden_size=31 is not a multiple of num_attention_heads=2.*hidden_size=30",
        ),
        ({"model.config": {"num_attention_heads": 0}}, r"num_attention_heads must be at least 1, got 0"),
        # A bare path used to be read one character an entry ("needs at least a 'path' key, got '/'").
        (
            {"data.train_files": [], "data.datasets": "/work/shared/data/gutenberg"},
            r"data.datasets must be a list of \{path: ...\} entries.*'\[\{path: /work/shared/data/gutenberg\}\]'",
        ),
    ],
)
def test_data_and_model_settings_refused_at_load(overrides, message):
    with pytest.raises(ConfigError, match=message):
        pretrain(**overrides)


def test_a_bad_setting_leaves_no_output_dir(tokenizer_dir, tmp_path, capsys):
    """Refused when the recipe is read: the output folder is not claimed, so a corrected rerun is not told to resume."""
    argv = pretrain_argv(tokenizer_dir, tmp_path, "--training.learning_rate", "nan")
    assert "training.learning_rate must be > 0 and finite" in run_main("pretrain", argv, capsys)
    argv = pretrain_argv(tokenizer_dir, tmp_path, "--model.config.hidden_size", "31")
    assert "hidden_size=31 is not a multiple of num_attention_heads=2" in run_main("pretrain", argv, capsys)
    assert not (tmp_path / "out").exists()


def test_constant_schedule_may_have_any_warmup():
    recipe = pretrain(**{"training.lr_scheduler_type": "constant", "training.warmup_steps": 50})
    assert recipe.training.warmup_steps == 50


@pytest.mark.parametrize("percentage", [0, 100, -3, 150])
def test_validation_split_percentage_must_be_inside_0_100(percentage, model_dir):
    with pytest.raises(ConfigError, match=rf"data.validation_split_percentage must be in \(0, 100\).*got {percentage}"):
        pretrain(**{"data.validation_split_percentage": percentage})
    with pytest.raises(ConfigError, match=rf"data.validation_split_percentage must be in \(0, 100\).*got {percentage}"):
        finetune(model_dir, **{"data.validation_split_percentage": percentage})


@pytest.mark.parametrize(
    "training, message",
    [
        (
            {"num_train_epochs": 0},
            r"training.num_train_epochs must be > 0 \(or set training.max_steps\) and finite, got 0",
        ),
        ({"num_train_epochs": -1.5}, r"training.num_train_epochs must be > 0"),
        ({"max_steps": -3}, r"training.max_steps must be >= 1 \(or null: train for num_train_epochs\), got -3"),
        ({"eval_steps": -10}, r"training.eval_steps must be >= 1"),
        ({"warmup_ratio": 1.0}, r"training.warmup_ratio must be in \[0, 1\), got 1.0"),
        ({"num_train_epochs": float("inf")}, r"training.num_train_epochs must be > 0 .*and finite, got inf"),
        # The optimizer fields and the seed are pretraining's (one dataclass), and checked the same way.
        ({"learning_rate": float("nan")}, r"training.learning_rate must be > 0 and finite, got nan"),
        ({"adam_epsilon": -1}, r"training.adam_epsilon must be > 0 and finite .*got -1"),
        ({"weight_decay": -5}, r"training.weight_decay must be >= 0 and finite .*got -5"),
        ({"max_grad_norm": -1}, r"training.max_grad_norm must be > 0 and finite \(or null: no clipping\), got -1"),
        ({"seed": 2**32}, r"training.seed must be in \[0, 4294967295\] .*got 4294967296"),
        ({"output_dir": None}, r"training.output_dir: expected a string, got null"),
    ],
)
def test_finetuning_settings_refused_at_load(training, message, model_dir):
    with pytest.raises(ConfigError, match=message):
        finetune(model_dir, **{f"training.{k}": v for k, v in training.items()})
    # Zero epochs are fine when max_steps says how long to train.
    if training == {"num_train_epochs": 0}:
        assert finetune(model_dir, **{"training.num_train_epochs": 0, "training.max_steps": 5}).training.max_steps == 5


def test_fp16_on_cpu_says_it_runs_fp32(tmp_path, caplog):
    """Accelerate accepts mixed_precision=fp16 on a CPU and computes in fp32 without a word: the run says so."""
    from accelerate.state import AcceleratorState

    from linformer_hf.training.pretraining import run_pretraining
    from linformer_hf.training.tokenizer import train_bpe_tokenizer

    tok = tmp_path / "tok"
    with open(WIKITEXT, encoding="utf-8") as fh:
        train_bpe_tokenizer([line for _, line in zip(range(300), fh)], str(tok), vocab_size=400, model_max_length=64)
    overrides = tiny_pretrain_overrides(tok, tmp_path / "run", max_steps=3, mixed_precision="fp16")
    overrides["data.max_train_blocks"] = 24
    AcceleratorState._reset_state(reset_partial_state=True)  # the precision is fixed per process once set
    try:
        with caplog.at_level("WARNING"):
            summary = run_pretraining(load_recipe(PretrainRecipe, None, extra=overrides), show_progress=False)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    assert summary["completed_steps"] == 3
    assert any("fp16 was asked for" in r.getMessage() and "computes in fp32" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------------------------------
# fine-tuning labels are checked against num_labels when the data is loaded
# ------------------------------------------------------------------------------------------------------------------


def write_sst2(path, labels):
    """An SST-2 layout file with real sentences and the given label cells (strings, written as they are)."""
    with open(SST2_TRAIN, encoding="utf-8") as fh:
        sentences = [line.split("\t")[0] for line in list(fh)[1 : len(labels) + 1]]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("sentence\tlabel\n")
        for sentence, label in zip(sentences, labels):
            fh.write(f"{sentence}\t{label}\n")
    return str(path)


@pytest.mark.parametrize(
    "cell, shown",
    [
        ("2", "2"),  # out of range for num_labels=2: crashed mid-training
        ("1.5", "1.5"),  # was truncated to 1
        ("pos", "'pos'"),
        ("-1", "-1"),
        ("", "missing"),  # was a TypeError
    ],
)
@pytest.mark.parametrize("split", ["train", "validation"])
def test_bad_label_names_file_line_and_value(model_dir, tmp_path, cell, shown, split):
    from linformer_hf.training.finetuning import load_task_data

    labels = ["0", "1"] * 10
    labels[6] = cell  # data row 7 = line 8 of the file (after the header)
    bad = write_sst2(tmp_path / f"bad_{split}.tsv", labels)
    good = write_sst2(tmp_path / "good.tsv", ["0", "1"] * 10)
    files = (
        {"data.train_file": bad, "data.validation_file": good}
        if split == "train"
        else {"data.train_file": good, "data.validation_file": bad}
    )
    with pytest.raises(ConfigError) as err:
        load_task_data(finetune(model_dir, **files))
    message = str(err.value)
    assert bad in message and "line 8" in message and shown in message, message
    assert "[0, 2)" in message  # what a label must be


def test_labels_in_csv_and_jsonl_are_checked_too(model_dir, tmp_path):
    from linformer_hf.training.finetuning import load_task_data

    csv_file = tmp_path / "train.csv"
    csv_file.write_text('sentence,label\n"a fine film",1\n"dull",0\n"odd",3\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"train.csv: 1 row\(s\) of column 'label'.*line 4: 3"):
        load_task_data(finetune(model_dir, **{"data.train_file": str(csv_file)}))
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text('{"sentence": "good", "label": 1}\n{"sentence": "bad", "label": 0.5}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"dev.jsonl: .*line 2: 0.5"):
        load_task_data(finetune(model_dir, **{"data.validation_file": str(jsonl)}))


def test_a_split_labelled_minus_one_throughout_is_named_as_unlabelled(model_dir, tmp_path):
    """GLUE's test files label every row -1: the refusal asked to fix or remove every row, where the fix is to drop
    the label column (a test file without one is predicted without a score)."""
    from linformer_hf.training.finetuning import load_task_data

    good = write_sst2(tmp_path / "good.tsv", ["0", "1"] * 10)
    unlabelled = write_sst2(tmp_path / "test.tsv", ["-1"] * 6)
    with pytest.raises(ConfigError) as err:
        load_task_data(finetune(model_dir, **{"data.train_file": good, "data.test_file": unlabelled}))
    message = str(err.value)
    assert f"{unlabelled}: every one of its 6 rows has the label -1" in message, message
    assert "Remove the 'label' column" in message and "Fix or remove these rows" not in message


def test_good_labels_load_unchanged(model_dir):
    from linformer_hf.training.finetuning import load_task_data

    splits = load_task_data(finetune(model_dir))
    assert set(splits["validation"]["label"]) == {0, 1} and len(splits["validation"]) == 872


def test_split_seed_holds_out_the_same_rows_whatever_the_training_seed(model_dir, tmp_path):
    """A student distilled with another seed must be scored on rows its teacher never trained on."""
    from linformer_hf.training.finetuning import load_task_data

    train = write_sst2(tmp_path / "train.tsv", ["0", "1"] * 50)

    def held_out(**extra):
        recipe = finetune(
            model_dir,
            **{"data.train_file": train, "data.validation_file": None, "data.validation_split_percentage": 20, **extra},
        )
        splits = load_task_data(recipe)
        assert len(splits["validation"]) == 20 and len(splits["train"]) == 80
        return sorted(splits["validation"]["sentence"])

    teacher = held_out(**{"training.seed": 1})
    assert held_out(**{"training.seed": 2, "data.split_seed": 1}) == teacher
    assert held_out(**{"training.seed": 2}) != teacher  # without it the split follows the training seed
    assert held_out(**{"training.seed": 1, "data.split_seed": 7}) != teacher


# ------------------------------------------------------------------------------------------------------------------
# the scripts print one `error:` line, never a traceback, for input the user can fix
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from linformer_hf.training.tokenizer import train_bpe_tokenizer

    out = tmp_path_factory.mktemp("tok")
    with open(WIKITEXT, encoding="utf-8") as fh:
        train_bpe_tokenizer([line for _, line in zip(range(300), fh)], str(out), vocab_size=400, model_max_length=64)
    return str(out)


def run_main(script, argv, capsys):
    from training_utils import load_script

    code = load_script(script).main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def pretrain_argv(tokenizer_dir, tmp_path, *extra):
    return [
        "--config",
        "configs/pretrain/demo.yaml",
        "--no_progress",
        "--model.config_file",
        "configs/model/tiny_test.yaml",
        "--tokenizer.name_or_path",
        tokenizer_dir,
        "--data.train_files",
        f"[{WIKITEXT}]",
        "--data.validation_files",
        "[]",
        "--data.block_size",
        "64",
        "--training.output_dir",
        str(tmp_path / "out"),
        *extra,
    ]


def test_invalid_yaml_is_an_error_line(tokenizer_dir, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  max_steps: [1,\n")
    line = run_main("pretrain", ["--config", str(bad)], capsys)
    assert str(bad) in line and "not valid YAML" in line and "line 3" in line
    line = run_main("finetune", ["--config", str(bad)], capsys)
    assert str(bad) in line and "not valid YAML" in line
    model_yaml = tmp_path / "model.yaml"  # the model's own YAML file
    model_yaml.write_text("hidden_size: {32\n")
    line = run_main("pretrain", pretrain_argv(tokenizer_dir, tmp_path, "--model.config_file", str(model_yaml)), capsys)
    assert str(model_yaml) in line and "not valid YAML" in line


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "has no text (it is empty or only blank lines)"),
        ("\n   \n\n", "has no text (it is empty or only blank lines)"),
        ("A single document on a single line.\n\n", "hold a single document"),
    ],
)
def test_empty_or_one_line_corpus_is_an_error_line(tokenizer_dir, tmp_path, capsys, content, message):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(content)
    argv = pretrain_argv(tokenizer_dir, tmp_path) + ["--data.train_files", f"[{corpus}]"]
    line = run_main("pretrain", argv, capsys)
    assert str(corpus) in line and message in line
    # A single document is enough when validation comes from its own file.
    if "single" in message:
        with pytest.raises(ConfigError, match="no block of 64 tokens"):  # too short for a block: a clear error too
            from linformer_hf.training.pretraining import run_pretraining

            run_pretraining(
                load_recipe(
                    PretrainRecipe,
                    None,
                    extra=tiny_pretrain_overrides(tokenizer_dir, tmp_path / "o2", max_steps=3)
                    | {"data.train_files": [str(corpus)], "data.validation_files": [WIKITEXT]},
                ),
                show_progress=False,
            )


def test_a_stream_of_fewer_documents_than_it_holds_out_is_refused_naming_the_setting(tmp_path):
    """It used to evaluate the whole corpus, then say "The training data gave no batch (empty stream or corpus)"."""
    from linformer_hf.training.data import no_training_batch_error

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Document number {i} of a short corpus.\n" for i in range(5)))
    overrides = {"data.train_files": [str(corpus)], "data.streaming": True, "data.validation_split_percentage": 50}
    with pytest.raises(ConfigError, match=r"hold 5 document.*data.validation_examples_streaming=1000"):
        pretrain(**overrides)
    recipe = pretrain(**overrides, **{"data.validation_examples_streaming": 2})
    # A stream of a data set is not counted ahead; the run's error names the setting all the same.
    assert "data.validation_examples_streaming=2" in str(no_training_batch_error(recipe.data))
    recipe.data.validation_files = [WIKITEXT]
    assert "validation_examples_streaming" not in str(no_training_batch_error(recipe.data))


def test_validation_files_too_short_for_a_block_name_them_not_the_split_percentage(tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer

    from linformer_hf.training.data import prepare_pretraining_data

    short = tmp_path / "valid.txt"
    short.write_text("Too short for a block.\n")
    train = tmp_path / "train.txt"
    with open(WIKITEXT, encoding="utf-8") as fh:
        train.write_text("".join(line for _, line in zip(range(200), fh)))
    recipe = pretrain(**{"data.train_files": [str(train)], "data.validation_files": [str(short)]})
    recipe.data.cache_dir = str(tmp_path / "cache")
    with pytest.raises(ConfigError) as err:
        prepare_pretraining_data(recipe.data, AutoTokenizer.from_pretrained(tokenizer_dir), seed=1)
    assert "held-out documents of data.validation_files give no block of 64 tokens" in str(err.value)
    assert "validation_split_percentage" not in str(err.value)  # not read when validation files are given


@pytest.mark.parametrize("content", ["", "\n \n"])
def test_tokenizer_training_on_no_text_is_an_error_line(tmp_path, capsys, content):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(content)
    line = run_main(
        "train_tokenizer",
        ["--files", str(corpus), "--vocab_size", "300", "--output_dir", str(tmp_path / "tok")],
        capsys,
    )
    assert "tokenizer training text is empty" in line
    assert not (tmp_path / "tok").exists()  # no 256-byte tokenizer left behind


BOOKS = os.path.join(os.path.dirname(WIKITEXT), "..", "gutenberg")


@pytest.mark.parametrize(
    "argv, message",
    [
        # Each was a traceback (ValueError from islice, OverflowError, datasets' "Bad split") or went on silently.
        (["--files", WIKITEXT, "--max_documents", "-3"], "--max_documents must be >= 1 (or left out: every document)"),
        (["--files", WIKITEXT, "--max_documents", "0"], "--max_documents must be >= 1"),  # trained on every document
        (["--files", WIKITEXT, "--min_frequency", "-1"], "--min_frequency must be >= 0"),
        (["--files", WIKITEXT, "--dataset", BOOKS], "--files and --dataset are both given"),  # dropped the dataset
        (["--dataset", BOOKS, "--split", "nosuch"], "--split 'nosuch': "),
        # a folder was "not found", a file as --dataset datasets' "Couldn't find any data file", and a
        # --dataset_config beside --files was dropped
        (["--files", os.path.dirname(WIKITEXT)], f"--files {os.path.dirname(WIKITEXT)} is a folder: give the text"),
        (
            ["--dataset", WIKITEXT],
            f"--dataset {WIKITEXT} is a file: give text files (one document a line) with --files",
        ),
        (["--files", WIKITEXT, "--dataset_config", "en"], "--dataset_config is given with --files"),
    ],
)
def test_tokenizer_arguments_that_cannot_work_are_an_error_line(tmp_path, capsys, argv, message):
    line = run_main("train_tokenizer", [*argv, "--vocab_size", "300", "--output_dir", str(tmp_path / "tok")], capsys)
    assert message in line
    if "nosuch" in argv:
        assert "'train', 'validation'" in line  # the splits there are
    assert not (tmp_path / "tok").exists()


def test_tokenizer_training_on_a_binary_file_is_an_error_line(tmp_path, capsys):
    """A binary file gave the codec's UnicodeDecodeError traceback: now the file, the line and the fix."""
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"some text\n" + bytes(range(128, 256)) + b"\n")
    argv = ["--files", WIKITEXT, str(binary), "--vocab_size", "300", "--output_dir", str(tmp_path / "tok")]
    line = run_main("train_tokenizer", argv, capsys)
    assert f"{binary} is not UTF-8 text (line 2: byte 0x80 at column 1)" in line and "--files" in line
    assert not (tmp_path / "tok").exists()


def test_a_second_tokenizer_is_refused_in_a_used_output_dir(tokenizer_dir, tmp_path, capsys):
    """A tokenizer is the vocabulary of the models trained with it: retraining into its folder (or a model's) used to
    replace it without a word."""
    import shutil

    from training_utils import load_script

    out = tmp_path / "tok"
    shutil.copytree(tokenizer_dir, out)
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    argv = ["--files", WIKITEXT, "--max_documents", "50", "--vocab_size", "300", "--output_dir", str(out)]
    line = run_main("train_tokenizer", argv, capsys)
    assert f"{out} is not empty" in line and "--overwrite" in line
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    assert load_script("train_tokenizer").main([*argv, "--overwrite"]) == 0
    assert (out / "tokenizer.json").read_bytes() != before["tokenizer.json"]  # 300 tokens, not 400


def test_a_tokenizer_is_never_trained_into_a_models_folder(tokenizer_dir, tmp_path, capsys):
    """--output_dir <model> --overwrite replaced the model's tokenizer files without a word: its embeddings then read
    ids of another vocabulary. Refused with or without --overwrite, the folder kept as it was."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tokenizer_dir, model)
    (model / "config.json").write_text('{"model_type": "linformer"}')
    before = {name: (model / name).read_bytes() for name in os.listdir(model)}
    argv = ["--files", WIKITEXT, "--max_documents", "50", "--vocab_size", "300", "--output_dir", str(model)]
    for flags in ([], ["--overwrite"]):
        line = run_main("train_tokenizer", [*argv, *flags], capsys)
        assert f"--output_dir {model} holds a model (config.json)" in line and "a folder of its own" in line
        assert {name: (model / name).read_bytes() for name in os.listdir(model)} == before


def test_overwrite_leaves_no_file_of_the_earlier_tokenizer(tmp_path, capsys):
    """--overwrite kept an earlier tokenizer's files the new one does not write, and AutoTokenizer read them with it:
    its special_tokens_map.json gave another mask and pad token, its added_tokens.json extra ids (302 tokens, not
    300). Files that are not a tokenizer's stay."""
    from training_utils import load_script
    from transformers import AutoTokenizer

    out = tmp_path / "tok"
    out.mkdir()
    (out / "special_tokens_map.json").write_text('{"mask_token": "[MASK]", "pad_token": "<s>"}')
    (out / "added_tokens.json").write_text('{"<extra>": 300}')
    (out / "vocab.txt").write_text("[PAD]\n[UNK]\n")
    (out / "notes.txt").write_text("mine")
    argv = ["--files", WIKITEXT, "--max_documents", "50", "--vocab_size", "300", "--output_dir", str(out)]
    assert load_script("train_tokenizer").main([*argv, "--overwrite"]) == 0
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert (len(tokenizer), tokenizer.mask_token, tokenizer.pad_token_id) == (300, "<mask>", 1)
    assert sorted(os.listdir(out)) == ["notes.txt", "tokenizer.json", "tokenizer_config.json"]
    assert sorted(os.listdir(tmp_path)) == ["tok"]  # no staging folder left


def test_a_tokenizer_dir_another_run_filled_meanwhile_is_kept(tmp_path, monkeypatch, capsys):
    """Two runs into one new --output_dir both passed the check before training: the second merged its tokenizer
    over the first's (and deleted the first's staging folder, of the same name, while it was being written)."""
    from linformer_hf.training import train_tokenizer

    out = tmp_path / "tok"
    with open(WIKITEXT, encoding="utf-8") as fh:
        lines = [line for _, line in zip(range(200), fh)]

    def texts(files):
        yield from lines
        out.mkdir()
        (out / "tokenizer.json").write_text("the other run's")  # it finished first

    monkeypatch.setattr(train_tokenizer, "iter_text_files", texts)
    line = run_main("train_tokenizer", ["--files", WIKITEXT, "--vocab_size", "300", "--output_dir", str(out)], capsys)
    assert f"{out} was filled by another run while this one worked" in line and "--overwrite" in line
    assert os.listdir(out) == ["tokenizer.json"] and (out / "tokenizer.json").read_text() == "the other run's"
    assert sorted(os.listdir(tmp_path)) == ["tok"]


def test_a_tokenizer_killed_while_saved_leaves_no_staging_folder(tmp_path, monkeypatch, send_sigterm):
    """SIGTERM (`kill`) during the save ended the process at once, leaving the staging folder beside --output_dir."""
    import transformers
    from training_utils import load_script

    save = transformers.PreTrainedTokenizerBase.save_pretrained

    def killed_while_saving(self, directory, *args, **kwargs):
        save(self, directory, *args, **kwargs)
        send_sigterm()

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", killed_while_saving)
    argv = ["--files", WIKITEXT, "--max_documents", "50", "--vocab_size", "300", "--output_dir", str(tmp_path / "tok")]
    with pytest.raises(KeyboardInterrupt):
        load_script("train_tokenizer").main(argv)
    assert os.listdir(tmp_path) == []


def test_empty_tokenizer_dir_is_an_error_line(tmp_path, capsys):
    empty = tmp_path / "tok"
    empty.mkdir()
    line = run_main("pretrain", pretrain_argv(str(empty), tmp_path), capsys)
    assert f"Tokenizer directory {empty} holds no tokenizer" in line
    assert "python -m linformer_hf.training.train_tokenizer" in line


def test_model_config_rejected_by_the_strict_dataclass_is_an_error_line(tokenizer_dir, model_dir, tmp_path, capsys):
    # Built from the recipe: converted to a ConfigError that names the field.
    line = run_main("pretrain", pretrain_argv(tokenizer_dir, tmp_path, "--model.config.projected_length", "-1"), capsys)
    assert "Invalid LinformerConfig" in line and "projected_length" in line and "-1" in line
    # Read from a saved config.json: huggingface_hub's own error class, caught by the scripts' handler.
    import json
    import shutil

    saved = tmp_path / "saved"
    shutil.copytree(model_dir, saved)
    config = json.loads((saved / "config.json").read_text())
    config["sharing"] = "bogus"
    (saved / "config.json").write_text(json.dumps(config))
    (tmp_path / "sst2.yaml").write_text("data: {task: sst2}\n")
    line = run_main(
        "finetune",
        [
            "--config",
            str(tmp_path / "sst2.yaml"),
            "--model.pretrained",
            str(saved),
            "--model.tokenizer",
            tokenizer_dir,
            "--data.train_file",
            SST2_DEV,
            "--training.output_dir",
            str(tmp_path / "ft"),
        ],
        capsys,
    )
    assert "invalid model config" in line and "sharing" in line and "bogus" in line


def test_conversion_script_errors(tmp_path, capsys):
    from transformers import GPT2Config

    line = run_main("convert_to_linformer", [str(tmp_path / "no_such_model"), str(tmp_path / "o")], capsys)
    assert "no such directory" in line and str(tmp_path / "no_such_model") in line and "Repo id" not in line
    (tmp_path / "empty").mkdir()
    line = run_main("convert_to_linformer", [str(tmp_path / "empty"), str(tmp_path / "o")], capsys)
    assert "has no config.json" in line
    GPT2Config(n_embd=32, n_layer=1, n_head=2, architectures=["GPT2LMHeadModel"]).save_pretrained(tmp_path / "gpt2")
    line = run_main("convert_to_linformer", [str(tmp_path / "gpt2"), str(tmp_path / "o")], capsys)
    assert "'gpt2' checkpoint" in line and "'bert', 'roberta'" in line
    # The same missing directory given to fine-tuning's on-the-fly conversion.
    with pytest.raises(ConfigError, match="no such directory"):
        load_recipe(
            FinetuneRecipe,
            None,
            extra={
                "model.pretrained": str(tmp_path / "no_such_model"),
                "model.convert_from_roberta": {},
                "data.train_file": SST2_TRAIN,
            },
        )


def test_conversion_never_replaces_a_model_and_a_killed_one_leaves_no_folder(tmp_path, capsys, monkeypatch):
    import json

    import transformers
    from tiny_roberta import build_tokenizer, tiny_roberta_config

    from linformer_hf import conversion

    source = tmp_path / "roberta"
    transformers.RobertaForMaskedLM(tiny_roberta_config(architectures=["RobertaForMaskedLM"])).save_pretrained(source)
    build_tokenizer(str(source))
    out = tmp_path / "linformer"
    assert load_script_main("convert_to_linformer", [str(source), str(out), "--projected_length", "4"]) == 0
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}

    # A second conversion there (another k) would replace the first model: refused before any work.
    line = run_main("convert_to_linformer", [str(source), str(out), "--projected_length", "8"], capsys)
    assert f"{out} is not empty" in line and "--overwrite" in line
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    # Converting into the source folder itself would replace the RoBERTa checkpoint.
    line = run_main("convert_to_linformer", [str(source), str(source), "--overwrite"], capsys)
    assert "must differ from the source" in line
    assert json.loads((source / "config.json").read_text())["model_type"] == "roberta"
    assert (
        load_script_main("convert_to_linformer", [str(source), str(out), "--projected_length", "8", "--overwrite"]) == 0
    )
    assert json.loads((out / "config.json").read_text())["projected_length"] == 8

    # A conversion killed after the weights were written leaves no folder that reads as a model.
    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(conversion, "copy_sentence_transformers_modules", killed)
    with pytest.raises(KeyboardInterrupt):
        conversion.convert_checkpoint(str(source), str(tmp_path / "killed"), projected_length=4)
    assert not (tmp_path / "killed").exists()


def load_script_main(script, argv):
    from training_utils import load_script

    return load_script(script).main(argv)


def test_push_to_hub_dry_run_on_a_non_linformer_folder(tmp_path, capsys):
    from transformers import RobertaConfig

    RobertaConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32).save_pretrained(
        tmp_path / "roberta"
    )
    line = run_main(
        "push_to_hub",
        [str(tmp_path / "roberta"), "me/model", "--dry_run", "--output_dir", str(tmp_path / "hub")],
        capsys,
    )
    assert "holds a 'roberta' model, not a Linformer" in line and "convert_to_linformer" in line


def test_finetuning_refuses_a_used_output_dir(model_dir, tmp_path):
    from linformer_hf.training.checkpointing import FINETUNING, claim_output_dir
    from linformer_hf.training.finetuning import run_finetuning

    out = tmp_path / "ft"
    (out / "best").mkdir(parents=True)
    (out / "results.json").write_text("{}")
    (out / "notes.txt").write_text("mine")
    # What the Trainer leaves in output_dir when the run is killed: its checkpoint and TensorBoard logs.
    (out / "checkpoint-3").mkdir()
    (out / "runs" / "Nov22_host").mkdir(parents=True)
    with pytest.raises(
        ConfigError,
        match=rf"training.output_dir={out} is not empty \(it holds best, checkpoint-3, "
        r"notes.txt, results.json, runs\).*--training.overwrite_output_dir true",
    ):
        run_finetuning(finetune(model_dir, **{"training.output_dir": str(out)}), show_progress=False)
    assert (out / "best").is_dir() and (out / "results.json").exists() and (out / "checkpoint-3").is_dir()
    # The model dir here has no weights: the overwrite is refused before it deletes anything (it deleted the earlier
    # run's outputs, then refused the model).
    earlier = sorted(os.listdir(out))
    with pytest.raises(ConfigError, match=r"model.pretrained: .* holds no weights"):
        run_finetuning(
            finetune(model_dir, **{"training.output_dir": str(out), "training.overwrite_output_dir": True}),
            show_progress=False,
        )
    assert sorted(os.listdir(out)) == earlier
    # Overwriting deletes the earlier run's outputs only.
    lock = claim_output_dir(str(out), resuming=False, overwrite=True, options=FINETUNING)
    lock.release()
    assert sorted(os.listdir(out)) == [".run.lock", "notes.txt"]


def test_finetuning_is_refused_while_another_run_holds_its_output_dir(model_dir, tmp_path):
    """The Trainer writes its checkpoints inside the claimed directory: a second run there is refused by the lock,
    even with overwrite_output_dir, before it deletes anything."""
    from training_utils import lock_held_by_another_process

    from linformer_hf.training.finetuning import run_finetuning

    out = tmp_path / "ft"
    out.mkdir()
    (out / "checkpoint-2").mkdir()  # the live run's
    with lock_held_by_another_process(out) as holder:
        with pytest.raises(ConfigError, match=rf"Another run is writing to {out}: .*pid {holder.pid}"):
            run_finetuning(
                finetune(model_dir, **{"training.output_dir": str(out), "training.overwrite_output_dir": True}),
                show_progress=False,
            )
    assert (out / "checkpoint-2").is_dir()


# ------------------------------------------------------------------------------------------------------------------
# The research scripts: an earlier result is refused, nonsense numbers and missing inputs are said before the work
# ------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A tiny RoBERTa (n = 16) with its tokenizer."""
    from tiny_roberta import build_tokenizer, tiny_roberta_config
    from transformers import RobertaModel

    out = tmp_path_factory.mktemp("encoder")
    tokenizer = build_tokenizer(str(out))
    RobertaModel(tiny_roberta_config(vocab_size=len(tokenizer))).save_pretrained(out)
    return str(out)


def test_analyze_spectrum_refuses_an_earlier_result_and_bad_indices_before_the_work(encoder_dir, tmp_path, capsys):
    from training_utils import load_script

    out = tmp_path / "spectrum"
    argv = [encoder_dir, WIKITEXT, str(out), "--max_inputs", "2"]
    assert load_script("analyze_spectrum").main(argv) == 0
    before = (out / "spectrum_summary.json").read_bytes()
    line = run_main("analyze_spectrum", [*argv, "--index", "2"], capsys)
    assert f"{out} is not empty" in line and "--overwrite" in line
    assert (out / "spectrum_summary.json").read_bytes() == before
    # Overwritten by a Linformer's (k < L: P is not square, so no structure plot): nothing of the first run stays.
    from linformer_hf.conversion import convert_checkpoint

    convert_checkpoint(encoder_dir, str(tmp_path / "linformer"), projected_length=4)
    (out / "notes.txt").write_text("mine")
    assert (out / "spectrum_structure.png").is_file()
    argv = [str(tmp_path / "linformer"), WIKITEXT, str(out), "--max_inputs", "2", "--overwrite"]
    assert load_script("analyze_spectrum").main(argv) == 0
    assert not (out / "spectrum_structure.png").exists() and (out / "notes.txt").read_text() == "mine"
    # r = L = 16 here: index 17 used to be refused only after every input was analysed, index 0 taken as r / 4.
    line = run_main("analyze_spectrum", [encoder_dir, WIKITEXT, str(tmp_path / "b"), "--index", "17"], capsys)
    assert "index 17 is outside 1..16" in line and os.listdir(tmp_path / "b") == []
    with pytest.raises(SystemExit):
        load_script("analyze_spectrum").main([encoder_dir, WIKITEXT, str(tmp_path / "c"), "--index", "0"])
    assert "argument --index: must be >= 1, got 0" in capsys.readouterr().err
    line = run_main("analyze_spectrum", [encoder_dir, str(tmp_path / "none.txt"), str(tmp_path / "d")], capsys)
    assert "none.txt: no such file" in line
    line = run_main("analyze_spectrum", [str(tmp_path / "no_model"), WIKITEXT, str(tmp_path / "d")], capsys)
    assert "no_model: no such directory" in line


def test_measure_favor_error_refuses_an_earlier_result_before_the_work(encoder_dir, tmp_path, capsys):
    from training_utils import load_script

    output = tmp_path / "error.json"
    output.write_text('{"an": "earlier result"}')
    argv = [encoder_dir, WIKITEXT, str(output), "--seq_len", "16", "--max_inputs", "2", "--ms", "8", "--seeds", "1"]
    line = run_main("measure_favor_error", argv, capsys)
    assert f"{output} exists" in line and "--overwrite" in line
    assert output.read_text() == '{"an": "earlier result"}'
    assert load_script("measure_favor_error").main([*argv, "--overwrite"]) == 0
    assert '"mean_over_layers"' in output.read_text()
    # The result is a file: a folder given there used to fail only when the measurement was done.
    line = run_main("measure_favor_error", [encoder_dir, WIKITEXT, str(tmp_path), "--seq_len", "16"], capsys)
    assert "is a folder" in line
    line = run_main("measure_favor_error", [encoder_dir, WIKITEXT, str(tmp_path / "e.json"), "--seq_len", "99"], capsys)
    assert "seq_len 99 exceeds the model's maximum input length 16" in line


@pytest.mark.parametrize(
    "flag, value, message",
    [
        # 0 divided by zero after the corpus was built; a negative or > 0.5 fraction silently held out every 2nd line
        ("--validation_fraction", "0", "must be in (0, 0.5], got 0.0"),
        ("--validation_fraction", "-0.1", "must be in (0, 0.5], got -0.1"),
        ("--validation_fraction", "1.5", "must be in (0, 0.5], got 1.5"),
        ("--max_chars", "0", "must be >= 1, got 0"),  # an empty corpus, written without a word
    ],
)
def test_build_corpus_refuses_nonsense_numbers_before_building(tmp_path, capsys, flag, value, message):
    from training_utils import load_script

    with pytest.raises(SystemExit):
        load_script("build_corpus").main(["--output", str(tmp_path / "c.txt"), flag, value])
    assert f"argument {flag}: {message}" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_show_model_errors_are_error_lines(encoder_dir, tmp_path, capsys):
    """The demo's last step: a wrong folder was huggingface_hub's "Repo id must be in the form" traceback, a text
    without <mask> a pipeline traceback."""
    line = run_main("show_model", [str(tmp_path / "no_such_run")], capsys)
    assert "no_such_run is not a saved model folder (no config.json)" in line
    from tiny_roberta import tiny_roberta_config
    from transformers import AutoTokenizer, RobertaForMaskedLM

    tokenizer = AutoTokenizer.from_pretrained(encoder_dir)
    RobertaForMaskedLM(tiny_roberta_config(vocab_size=len(tokenizer))).save_pretrained(tmp_path / "masked_lm")
    tokenizer.save_pretrained(tmp_path / "masked_lm")
    line = run_main("show_model", [str(tmp_path / "masked_lm"), "--text", "no mask here"], capsys)
    assert "has no <mask>" in line
    # A bare encoder has no masked-LM head to fill the mask with (tests/test_show_model.py has the cases).
    line = run_main("show_model", [encoder_dir, "--text", "a <mask> here"], capsys)
    assert "holds a RobertaModel" in line and "no trained masked-LM head" in line


def test_push_to_hub_overwrite_never_deletes_its_own_model(encoder_dir, tmp_path, capsys):
    """--overwrite deletes output_dir whole: an output_dir holding the model (the run folder of outputs/run/final)
    used to delete the run's model, checkpoints and logs."""
    from linformer_hf.conversion import convert_checkpoint

    run = tmp_path / "run"
    convert_checkpoint(encoder_dir, str(run / "final"), projected_length=4)
    (run / "train_log.jsonl").write_text("{}\n")
    argv = [str(run / "final"), "me/model", "--dry_run", "--skip_remote_check", "--output_dir", str(run), "--overwrite"]
    line = run_main("push_to_hub", argv, capsys)
    assert "model_dir" in line and f"is inside output_dir {run}" in line
    assert (run / "final" / "model.safetensors").is_file() and (run / "train_log.jsonl").is_file()
    # A file given as the folder: said as such (was "Not a directory: <file>/conversion_report.json" after the card).
    argv = [str(run / "final"), "me/model", "--dry_run", "--output_dir", str(run / "train_log.jsonl")]
    assert "train_log.jsonl is a file, not a folder" in run_main("push_to_hub", argv, capsys)
    assert "train_log.jsonl is a file, not a folder" in run_main(
        "export_onnx", [str(run / "final"), str(run / "train_log.jsonl")], capsys
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "-1"], "argument --steps: must be >= 1, got -1"),  # trained nothing and reported the accuracy
        (["--batch_size", "0"], "argument --batch_size: must be >= 1, got 0"),
        (["--data_dir", "no_such_folder"], "--data_dir no_such_folder has no train.tsv or dev.tsv"),
    ],
)
def test_int8_classifier_refuses_bad_arguments_before_training(argv, message, capsys):
    from experiments.int8_classifier import main

    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def test_a_tokenizer_killed_while_saved_leaves_no_folder_that_reads_as_one(tmp_path, monkeypatch):
    """scripts/demo.sh takes an existing tokenizer_config.json as a trained tokenizer: a kill during the save used to
    leave one beside a missing or partial tokenizer.json."""
    import transformers

    from linformer_hf.training.tokenizer import train_bpe_tokenizer

    save = transformers.PreTrainedTokenizerBase.save_pretrained

    def killed_with_tokenizer_json_unwritten(self, directory, *args, **kwargs):
        save(self, directory, *args, **kwargs)
        os.remove(os.path.join(directory, "tokenizer.json"))
        raise KeyboardInterrupt

    monkeypatch.setattr(transformers.PreTrainedTokenizerBase, "save_pretrained", killed_with_tokenizer_json_unwritten)
    with open(WIKITEXT, encoding="utf-8") as fh:
        texts = [line for _, line in zip(range(200), fh)]
    with pytest.raises(KeyboardInterrupt):
        train_bpe_tokenizer(texts, str(tmp_path / "tok"), vocab_size=300, model_max_length=32)
    assert not (tmp_path / "tok").exists()
    monkeypatch.undo()
    train_bpe_tokenizer(texts, str(tmp_path / "tok"), vocab_size=300, model_max_length=32)  # the leftover is cleared
    assert sorted(os.listdir(tmp_path)) == ["tok"] and (tmp_path / "tok" / "tokenizer.json").is_file()


def test_overwrite_never_deletes_the_model_the_run_reads(model_dir, tokenizer_dir, tmp_path):
    """Fine-tuning outputs/run/best into outputs/run with overwrite_output_dir used to delete best/ (the model to
    fine-tune) as an earlier run's output before reading it."""
    import shutil

    from linformer_hf import LinformerConfig, LinformerForMaskedLM
    from linformer_hf.training.finetuning import run_finetuning

    out = tmp_path / "ft"
    shutil.copytree(model_dir, out / "best")
    # a whole model (weights, tokenizer): one without them is refused for that first, before the output folder's rules
    LinformerForMaskedLM(LinformerConfig.from_pretrained(model_dir, vocab_size=400)).save_pretrained(out / "best")
    shutil.copytree(tokenizer_dir, out / "best", dirs_exist_ok=True)
    recipe = finetune(
        model_dir,
        **{
            "model.pretrained": str(out / "best"),
            "training.output_dir": str(out),
            "training.overwrite_output_dir": True,
        },
    )
    with pytest.raises(ConfigError, match=rf"model.pretrained={out}/best is inside {out}/best, which training.over"):
        run_finetuning(recipe, show_progress=False)
    assert (out / "best" / "config.json").is_file()


@pytest.mark.parametrize(
    "name, text, line, fix",
    [  # every row one field more: pandas took the first as an index and trained on the second, without a word
        ("all.tsv", "sentence\tlabel\na\tb\t1\nc\td\t0\n", 2, "replace the tabs"),
        ("some.tsv", "sentence\tlabel\na fine film\t1\nc\td\t0\ndull\t0\n", 3, "replace the tabs"),
        ("comma.csv", 'sentence,label\nhello, world,1\n"quoted, fine",0\n', 2, "quote texts"),
        ("short.csv", "sentence,label\nhello\n", 2, "quote texts"),
    ],
)
def test_a_row_with_another_number_of_fields_than_the_header_is_named(model_dir, tmp_path, name, text, line, fix):
    from linformer_hf.training.finetuning import load_task_data

    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"{name}, line {line}: \d fields, but the header .* has 2\..*{fix}"):
        load_task_data(finetune(model_dir, **{"data.train_file": str(path)}))
    good = tmp_path / "good.csv"
    good.write_text('sentence,label\n"hello, world",1\n\n"fine",0\n', encoding="utf-8")  # quoted; a blank line
    assert load_task_data(finetune(model_dir, **{"data.train_file": str(good), "data.validation_file": str(good)}))[
        "train"
    ]["sentence"] == ["hello, world", "fine"]


def test_a_data_set_that_cannot_be_the_tasks_is_refused_in_one_line(model_dir, tmp_path, monkeypatch):
    """data.dataset with no path, a misspelt key or a split, a folder that is not there, not a data set, without the
    task's validation split or without the config it names: each failed inside `datasets` with a traceback (a
    KeyError-like TypeError, "Unknown split", "BuilderConfig ... doesn't have a 'nme' key") before any check."""
    import datasets
    from training_utils import write_hub_dataset

    from linformer_hf.training.finetuning import load_task_data

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))
    rows = [{"sentence": "a fine film", "label": 1}, {"sentence": "a dull film", "label": 0}] * 4
    train_only = write_hub_dataset(tmp_path / "train_only", {"train": [rows]})
    whole = write_hub_dataset(tmp_path / "whole", {"train": [rows], "validation": [rows]})
    (tmp_path / "empty").mkdir()
    files = {"data.train_file": None, "data.validation_file": None}

    def read(dataset):
        return load_task_data(finetune(model_dir, **files, **{"data.dataset": dataset}))

    refused = [
        ({"name": "sst2"}, r"data.dataset needs a 'path' key .*\{path: NAME_OR_FOLDER\}"),
        ({"path": whole, "nme": "sst2"}, r"Unknown key\(s\) \['nme'\] in data.dataset; allowed: path, name, revision"),
        ({"path": whole, "split": "train"}, r"data.dataset takes no 'split': data.task sst2 reads .*\['train', 'va"),
        ({"path": str(tmp_path / "absent")}, r"data.dataset .*absent is not a folder"),
        ({"path": SST2_DEV}, r"data.dataset .*dev.tsv is not a folder: .* as data.train_file"),
        ({"path": str(tmp_path / "empty")}, r"the folder .*empty cannot be read as a data set: .*any data files"),
        ({"path": whole, "name": "sst2"}, r"the folder .*whole cannot be read as a data set: .*'sst2' not found"),
        ({"path": train_only}, r"train_only has no split\(s\) \['validation'\] \(it has \['train'\]\).*data.train"),
    ]
    for dataset, message in refused:
        with pytest.raises(ConfigError, match=message):
            read(dataset)
    splits = read({"path": whole})
    assert len(splits["train"]) == len(splits["validation"]) == len(rows)


def test_empty_text_cells_are_counted_and_named_by_line(model_dir, tmp_path, caplog):
    """An empty or blank text cell (TSV, CSV, JSON lines) is read as empty text, and said, with its line; before,
    nothing was said. Files without one say nothing."""
    from linformer_hf.training.finetuning import load_task_data

    files = {
        "a.tsv": "sentence\tlabel\na fine film\t1\n\t0\n   \t1\ndull\t0\n",
        "b.csv": 'sentence,label\n"fine",1\n,0\n"dull",0\n',
        "c.jsonl": '{"sentence": "fine", "label": 1}\n{"sentence": "", "label": 0}\n{"label": 1}\n',
    }
    expected = {"a.tsv": "2 of 4 row\\(s\\) .* \\(line 3, line 4\\)", "b.csv": "1 of 3 .* \\(line 3\\)",
                "c.jsonl": "2 of 3 .* \\(line 2, line 3\\)"}  # fmt: skip
    good = write_sst2(tmp_path / "good.tsv", ["0", "1"] * 4)
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        caplog.clear()
        with caplog.at_level("WARNING"):
            splits = load_task_data(finetune(model_dir, **{"data.train_file": str(path), "data.validation_file": good}))
        said = [r.getMessage() for r in caplog.records if "empty or missing 'sentence'" in r.getMessage()]
        assert len(said) == 1 and re.search(f"{name}: {expected[name]}; they are read as empty text", said[0]), said
        assert len(splits["train"]) == len(text.strip().splitlines()) - (name != "c.jsonl")  # no row dropped
    assert not [r for r in caplog.records if good in r.getMessage()]
    # a column empty in every row: refused (it was the same warning, and the run trained on no text)
    blank = tmp_path / "blank.tsv"
    blank.write_text("sentence\tlabel\n\t1\n  \t0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"blank.tsv: 'sentence' is empty or missing in all 2 rows: there is no text"):
        load_task_data(finetune(model_dir, **{"data.train_file": str(blank), "data.validation_file": good}))


def test_files_that_would_be_ignored_or_too_few_rows_to_hold_out_are_refused(model_dir, tmp_path):
    """A validation or test file beside a data set (no train_file) was never read, and a train_file beside a data set
    left the data set unread, without a word; one row, or a percentage that holds out all, failed in sklearn."""
    from linformer_hf.training.finetuning import load_task_data

    good = write_sst2(tmp_path / "good.tsv", ["0", "1"] * 10)
    with pytest.raises(ConfigError, match="data.validation_file and data.test_file without data.train_file"):
        finetune(model_dir, **{"data.dataset": {"path": str(tmp_path)}, "data.train_file": None,
                               "data.validation_file": good, "data.test_file": good})  # fmt: skip
    with pytest.raises(ConfigError, match=r"both given: local files or a data set, not both.*--data.dataset null"):
        finetune(model_dir, **{"data.dataset": {"path": str(tmp_path)}, "data.train_file": good})
    with pytest.raises(ConfigError, match=r"data.train_file=.* is a folder: .* data.dataset: \{path: FOLDER\}"):
        finetune(model_dir, **{"data.train_file": str(tmp_path)})
    one = write_sst2(tmp_path / "one.tsv", ["1"])
    split = {"data.validation_file": None}
    with pytest.raises(ConfigError, match=r"one.tsv has 1 row\(s\).* leaves no training row"):
        load_task_data(finetune(model_dir, **{"data.train_file": one, **split}))
    with pytest.raises(ConfigError, match=r"good.tsv has 20 row\(s\).*=99.0 of them leaves no training row"):
        load_task_data(
            finetune(model_dir, **{"data.train_file": good, "data.validation_split_percentage": 99, **split})
        )
    assert len(load_task_data(finetune(model_dir, **{"data.train_file": good, **split}))["validation"]) == 2


def test_a_model_config_field_that_reshapes_the_trained_weights_is_refused_before_any_work(model_dir, tmp_path):
    """--model.config '{max_sequence_length: 64}' on a trained Linformer failed after the tokenising, blaming an edited
    config.json; a field that does not reshape (dropout) is taken."""
    from linformer_hf.training.finetuning import run_finetuning

    out = tmp_path / "ft"
    with pytest.raises(ConfigError, match=r"model.config max_sequence_length=64 \(saved: \d+\).* keeps its sizes, n"):
        run_finetuning(finetune(model_dir, **{"model.config": {"max_sequence_length": 64},
                                              "training.output_dir": str(out)}), False)  # fmt: skip


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"id2label": {0: "a", 1: "b", 2: "c"}},
            r"id2label=\{0: 'a', 1: 'b', 2: 'c'\} gives 3 classes, but the task has 2",
        ),
        ({"num_labels": 3}, r"num_labels=3 gives 3 classes, but the task has 2 \(labels 0..1\)"),
        ({"problem_type": "regression"}, r"problem_type='regression': fine-tuning trains single-label classification"),
    ],
)
def test_model_config_keeps_the_tasks_classes_and_loss(model_dir, tmp_path, settings, message):
    """model.config id2label with three names trained a three-class head on SST-2's two classes without a word (and
    pipeline() answered with a class no row has); problem_type regression failed at the first update with a shape
    error; num_labels was called an unknown field. Each is refused before any work."""
    from linformer_hf.training.finetuning import run_finetuning

    with pytest.raises(ConfigError, match=message):
        run_finetuning(finetune(model_dir, **{"model.config": settings, "training.output_dir": str(tmp_path)}), False)


def test_a_pretraining_run_folder_given_as_the_model_points_to_its_final(model_dir, tmp_path):
    run = tmp_path / "pretrain"
    shutil.copytree(model_dir, run / "final")
    with pytest.raises(ConfigError, match=rf"has no config.json; .* A pretraining run's model is its final/: {run}"):
        finetune(str(run))
