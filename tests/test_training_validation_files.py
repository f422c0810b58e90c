"""training/validation.py on hostile inputs: a tokenizer larger than the model, token ids the embeddings have no row
for, a tampered saved folder, and data files that are not UTF-8, empty, only a header, blank, missing a column, or
one very long line. Each is a clear error before any work (or handled correctly)."""

import json
import os

import pytest
import test_training_checkpointing as checkpointing_tests
import torch
import transformers
from conftest import tiny_config
from training_utils import REPO, SST2_DEV, tiny_pretrain_overrides

from linformer_hf import LinformerForMaskedLM, PerformerConfig, PerformerModel
from linformer_hf.loading import load_model
from linformer_hf.training.config import ConfigError, FinetuneRecipe, PretrainRecipe, load_recipe
from linformer_hf.training.finetuning import TASKS, load_task_data, tokenize_task
from linformer_hf.training.pretraining import run_pretraining

tokenizer_dir = checkpointing_tests.tokenizer_dir  # a 1,000-token BPE tokenizer trained on WikiText-2


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory):
    """A saved tiny Linformer with 500 embeddings (n = 64, k = 8)."""
    out = tmp_path_factory.mktemp("small_model")
    LinformerForMaskedLM(tiny_config(vocab_size=500, max_sequence_length=64, projected_length=8)).save_pretrained(out)
    return str(out)


# ------------------------------------------------------------------------------------------------------------------
# Tokenizer, ids and model
# ------------------------------------------------------------------------------------------------------------------


def sst2_recipe(model_dir, tokenizer, output_dir) -> FinetuneRecipe:
    """Fine-tuning ``model_dir`` on SST-2's dev rows with ``tokenizer`` (model.tokenizer)."""
    extra = {
        "model.pretrained": str(model_dir),
        "model.tokenizer": str(tokenizer),
        "data.train_file": SST2_DEV,
        "data.validation_file": SST2_DEV,
        "training.output_dir": str(output_dir),
    }
    return load_recipe(FinetuneRecipe, None, extra=extra)


def test_a_tokenizer_larger_than_the_model_is_refused_before_training(tokenizer_dir, small_model_dir, tmp_path):
    """Before: pretraining started and failed at the first batch holding an id >= 500 with `IndexError: index out of
    range in self` inside the embedding (a device-side assert on a GPU). After: refused before any work."""
    overrides = tiny_pretrain_overrides(tokenizer_dir, tmp_path / "pre", max_steps=4)
    overrides.update({"model.pretrained": small_model_dir, "model.config_file": None})  # the saved model's config
    with pytest.raises(ConfigError, match=r"has 1000 tokens but the model .* has only 500 embeddings"):
        run_pretraining(load_recipe(PretrainRecipe, None, extra=overrides), show_progress=False)
    assert not (tmp_path / "pre").exists()

    recipe = sst2_recipe(small_model_dir, tokenizer_dir, tmp_path / "fine")
    from linformer_hf.training.finetuning import run_finetuning

    with pytest.raises(ConfigError, match=r"has 1000 tokens but the model .* has only 500 embeddings"):
        run_finetuning(recipe, show_progress=False)


def test_a_model_folder_without_its_tokenizer_is_refused_before_training(small_model_dir, tmp_path):
    """Before: transformers made an empty tokenizer of a model folder that holds none (5 tokens: every word <unk>),
    and fine-tuning trained and scored on it without a word, saving it with best/. After: refused before any work,
    asking for model.tokenizer; the same for a model.tokenizer folder without one."""
    from linformer_hf.training.finetuning import run_finetuning

    extra = {
        "model.pretrained": small_model_dir,
        "data.train_file": SST2_DEV,
        "data.validation_file": SST2_DEV,
        "data.max_train_samples": 16,
        "data.max_eval_samples": 16,
        "training.max_steps": 1,
        "training.output_dir": str(tmp_path / "fine"),
    }
    with pytest.raises(ConfigError, match=rf"model.pretrained={small_model_dir} holds no tokenizer .*model.tokenizer"):
        run_finetuning(load_recipe(FinetuneRecipe, None, extra=extra), show_progress=False)
    assert not (tmp_path / "fine").exists()  # refused before the output folder is claimed
    with pytest.raises(ConfigError, match=rf"model.tokenizer={small_model_dir} holds no tokenizer"):
        run_finetuning(sst2_recipe(small_model_dir, small_model_dir, tmp_path / "fine"), show_progress=False)


def test_a_tokenizer_config_without_a_vocabulary_is_refused(small_model_dir, tmp_path):
    """A folder holding a tokenizer_config.json and no vocabulary passed the files check, and transformers 5 made a
    tokenizer of only its 5 special tokens of it (every word <unk>): refused by fine-tuning and pretraining's loader."""
    import json
    import shutil

    from linformer_hf.training.finetuning import run_finetuning
    from linformer_hf.training.tokenizer import load_tokenizer

    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "RobertaTokenizer"}))
    with pytest.raises(ConfigError, match=rf"The tokenizer in {partial} holds no vocabulary, only its 5 special"):
        load_tokenizer(str(partial))
    with_config = tmp_path / "model"  # a model folder with that file beside its weights
    shutil.copytree(small_model_dir, with_config)
    shutil.copy(partial / "tokenizer_config.json", with_config)
    with pytest.raises(ConfigError, match=rf"The tokenizer in {with_config} holds no vocabulary"):
        run_finetuning(sst2_recipe(with_config, with_config, tmp_path / "fine"), show_progress=False)


def test_token_id_conflict_finds_an_id_that_means_another_token_and_allows_new_tokens():
    from linformer_hf.loading import token_id_conflict

    model_vocabulary = {"<pad>": 0, "the": 1, "cat": 2, "sat": 3}
    assert token_id_conflict(model_vocabulary, dict(model_vocabulary)) is None
    assert token_id_conflict(model_vocabulary, {**model_vocabulary, "<new>": 4}) is None  # only adds an id
    swapped = {**model_vocabulary, "cat": 3, "sat": 2}
    assert token_id_conflict(model_vocabulary, swapped) == "id 2 is 'sat' to it and 'cat' to the model"
    moved = {"<pad>": 0, "the": 1, "cat": 2, "sat": 7}  # id 3 unused, "sat" elsewhere
    assert token_id_conflict(model_vocabulary, moved) == "'sat' is id 7 to it and id 3 to the model"


def swapped_tokenizer(tokenizer_dir, target) -> str:
    """The same BPE tokenizer with two tokens' ids swapped: the same size, another vocabulary."""
    import shutil

    shutil.copytree(tokenizer_dir, target)
    path = os.path.join(target, "tokenizer.json")
    with open(path, encoding="utf-8") as fh:
        saved = json.load(fh)
    vocabulary = saved["model"]["vocab"]
    first, second = sorted(vocabulary, key=vocabulary.get)[500:502]
    vocabulary[first], vocabulary[second] = vocabulary[second], vocabulary[first]
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(saved, fh)
    for name in ("vocab.json", "merges.txt"):  # the slow files would be read instead where present
        if os.path.exists(os.path.join(target, name)):
            os.remove(os.path.join(target, name))
    return str(target)


def test_a_tokenizer_other_than_the_models_own_is_refused_before_training(tokenizer_dir, tmp_path):
    """Before: a tokenizer of the model's size but another vocabulary (model.tokenizer, tokenizer.name_or_path)
    fine-tuned and pretrained on without any error, on ids that mean other tokens to the model. After: refused before
    any work, naming an id; the model's own tokenizer named again, or one that only adds tokens, is taken."""
    from transformers import AutoTokenizer

    from linformer_hf.training.finetuning import run_finetuning
    from linformer_hf.training.finetuning_model import load_tokenizer_and_config

    model_dir = str(tmp_path / "model")
    LinformerForMaskedLM(tiny_config(vocab_size=1008, max_sequence_length=64, projected_length=8)).save_pretrained(
        model_dir
    )
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(model_dir)
    other = swapped_tokenizer(tokenizer_dir, tmp_path / "swapped")
    assert len(AutoTokenizer.from_pretrained(other)) == len(AutoTokenizer.from_pretrained(tokenizer_dir))

    def finetune(tokenizer):
        return sst2_recipe(model_dir, tokenizer, tmp_path / "fine")

    with pytest.raises(
        ConfigError, match=r"swapped is not the one saved with the model .*: id 50\d is '.+' to it and "
    ):
        run_finetuning(finetune(other), show_progress=False)
    assert not (tmp_path / "fine").exists()  # refused before the output folder is claimed  # claimed, nothing written
    with pytest.raises(ConfigError, match=r"leave model.tokenizer unset"):
        run_finetuning(finetune(other), show_progress=False)

    overrides = tiny_pretrain_overrides(other, tmp_path / "pre", max_steps=4)
    overrides.update({"model.pretrained": model_dir, "model.config_file": None})
    with pytest.raises(ConfigError, match=r"not the one saved with the model .*leave tokenizer.name_or_path unset"):
        run_pretraining(load_recipe(PretrainRecipe, None, extra=overrides), show_progress=False)
    assert not (tmp_path / "pre").exists()

    # The model's own vocabulary from another folder, and the same with one token added: taken.
    task = TASKS["sst2"]
    load_tokenizer_and_config(finetune(tokenizer_dir).model, task, ["negative", "positive"])
    extended = AutoTokenizer.from_pretrained(tokenizer_dir)
    extended.add_tokens(["<chapter>"])
    extended.save_pretrained(tmp_path / "extended")
    tokenizer, _ = load_tokenizer_and_config(finetune(str(tmp_path / "extended")).model, task, ["negative", "positive"])
    assert len(tokenizer) == 1001


@pytest.mark.parametrize("family", ["linformer", "performer"])
def test_out_of_range_ids_are_a_clear_error_in_the_forward(family):
    """Before: `IndexError: index out of range in self` from torch.embedding. After: the id, the size and the fix."""
    if family == "linformer":
        model = LinformerForMaskedLM(tiny_config(type_vocab_size=1)).eval()
    else:
        model = PerformerModel(
            PerformerConfig(
                vocab_size=99,
                type_vocab_size=1,
                hidden_size=32,
                num_hidden_layers=1,
                num_attention_heads=4,
                intermediate_size=37,
            )
        ).eval()
    ids = torch.randint(0, 99, (2, 8))
    model(input_ids=ids)  # in range: fine
    with pytest.raises(ValueError, match=r"input_ids holds 99, but the model's vocab_size is 99 \(ids 0 to 98\)"):
        model(input_ids=torch.cat([ids[:, :7], torch.full((2, 1), 99)], dim=1))
    with pytest.raises(ValueError, match=r"input_ids holds -1"):
        model(input_ids=torch.cat([ids[:, :7], torch.full((2, 1), -1)], dim=1))
    types = torch.zeros_like(ids)
    types[:, 4:] = 1  # a pair as BERT's tokenizer marks it
    with pytest.raises(ValueError, match=r"token_type_ids holds 1, but the model's type_vocab_size is 1"):
        model(input_ids=ids, token_type_ids=types)


# ------------------------------------------------------------------------------------------------------------------
# A tampered saved folder
# ------------------------------------------------------------------------------------------------------------------


def copy_model(source, target):
    import shutil

    shutil.copytree(source, target)
    return str(target)


def edit_config(folder, **fields):
    path = os.path.join(folder, "config.json")
    with open(path) as fh:
        config = json.load(fh)
    config.update(fields)
    with open(path, "w") as fh:
        json.dump(config, fh)


def test_a_tampered_saved_folder_fails_clearly_at_load(small_model_dir, tmp_path):
    # Truncated weights. Before: safetensors' "incomplete metadata, file not fully covered", no file named.
    truncated = copy_model(small_model_dir, tmp_path / "truncated")
    weights = os.path.join(truncated, "model.safetensors")
    with open(weights, "r+b") as fh:
        fh.truncate(os.path.getsize(weights) // 2)
    with pytest.raises(ValueError, match=rf"{weights} is truncated or corrupt .* Copy or download it again"):
        load_model(truncated)
    with pytest.raises(ConfigError, match=rf"model.pretrained: {weights} is truncated"):
        from linformer_hf.training.validation import check_model_files

        check_model_files(truncated, "model.pretrained")

    # projected_length edited. Before: "You set `ignore_mismatched_sizes` to `False` ... look at the above report!"
    edited = copy_model(small_model_dir, tmp_path / "k4")
    edit_config(edited, projected_length=4)
    message = r"do not fit its config \(.*projected_length=4.* is \(1, 8, 64\) in the weights but the config asks for"
    with pytest.raises(ValueError, match=message):
        transformers.AutoModelForMaskedLM.from_pretrained(edited)

    # sharing edited: the trained E, F would be dropped and new ones drawn at random (refused already; kept here so
    # that the tampering cases stay together).
    shared = copy_model(small_model_dir, tmp_path / "sharing")
    edit_config(shared, sharing="none")
    with pytest.raises(ValueError, match=r"sharing='none'.*restore the values it was saved with"):
        transformers.AutoModelForMaskedLM.from_pretrained(shared)

    # A Performer's num_random_features edited. Before: transformers' "look at the above report".
    performer = tmp_path / "performer"
    config = PerformerConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        num_random_features=16,
    )  # fmt: skip
    PerformerModel(config).save_pretrained(performer)
    PerformerModel.from_pretrained(performer)  # as saved: loads
    edit_config(performer, num_random_features=8)
    message = r"num_random_features=8.*random_features is \(16, 16\) in the weights but the config asks for \(8, 16\)"
    with pytest.raises(ValueError, match=message):
        transformers.AutoModel.from_pretrained(performer)


# ------------------------------------------------------------------------------------------------------------------
# Data files
# ------------------------------------------------------------------------------------------------------------------


def sst2_rows(count):
    with open(SST2_DEV, encoding="utf-8") as fh:
        return [line for _, line in zip(range(count + 1), fh)]  # the header and `count` rows


@pytest.mark.parametrize(
    "content, message",
    [
        # Before: DatasetGenerationError "An error occurred while generating the dataset", no file or line.
        (
            lambda rows: "".join(rows[:4]).encode() + b"caf\xe9 au lait\t1\n" + "".join(rows[4:]).encode(),
            r"is not UTF-8 text \(line 5: byte 0xe9 at column 4\)",
        ),
        # Before: the same DatasetGenerationError.
        (lambda rows: b"", r"has no text \(it is empty or only blank lines\)"),
        (lambda rows: b"  \n\n \t\n", r"has no text \(it is empty or only blank lines\)"),
        # Before: `ValueError: Instruction "validation" corresponds to no data!`
        (lambda rows: rows[0].encode(), r"has only a header"),
        # Already refused by the recipe checks, kept with the other cases.
        (lambda rows: "".join(r.split("\t")[0] + "\n" for r in rows).encode(), r"lacks column\(s\) \['label'\]"),
    ],
    ids=["non-utf8", "empty", "whitespace-only", "header-only", "no-label-column"],
)
@pytest.mark.parametrize("role", ["train", "validation"])
def test_bad_finetuning_data_files_are_refused_naming_the_file(small_model_dir, tmp_path, content, message, role):
    path = tmp_path / f"{role}.tsv"
    path.write_bytes(content(sst2_rows(12)))
    extra = {
        "model.pretrained": small_model_dir,
        "data.train_file": SST2_DEV,
        "data.validation_file": SST2_DEV,
        f"data.{role}_file": str(path),
    }
    with pytest.raises(ConfigError, match=message) as err:
        load_task_data(load_recipe(FinetuneRecipe, None, extra=extra))
    assert str(path) in str(err.value)


def test_a_non_utf8_pretraining_file_is_refused_naming_the_line(tokenizer_dir, tmp_path):
    """Before: DatasetGenerationError with a UnicodeDecodeError inside, naming neither file nor line."""
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes(b"First document.\nSecond document.\n" + "Third: café.\n".encode("latin-1"))
    overrides = tiny_pretrain_overrides(tokenizer_dir, tmp_path / "out", max_steps=4)
    overrides.update({"data.train_files": [str(corpus)], "data.cache_dir": str(tmp_path / "cache")})
    with pytest.raises(ConfigError, match=rf"{corpus} is not UTF-8 text \(line 3: byte 0xe9 at column 11\)"):
        run_pretraining(load_recipe(PretrainRecipe, None, extra=overrides), show_progress=False)


def test_a_one_megabyte_line_is_truncated_to_the_model_length_and_the_other_rows_kept(
    tokenizer_dir, small_model_dir, tmp_path, capsys
):
    """One very long row (1 MB here; a 10 MB row behaves the same, at about 50 s of tokenizing on the development
    machine): loaded whole, truncated to max_seq_length, the rows around it unchanged."""
    rows = sst2_rows(6)
    path = tmp_path / "long.tsv"
    path.write_text(rows[0] + "word " * 200_000 + "\t1\n" + "".join(rows[1:]), encoding="utf-8")
    splits = load_task_data(
        load_recipe(
            FinetuneRecipe,
            None,
            extra={"model.pretrained": small_model_dir, "data.train_file": str(path), "data.validation_file": SST2_DEV},
        )
    )
    assert len(splits["train"]) == 7 and len(splits["train"][0]["sentence"]) == 1_000_000
    assert splits["train"][1]["sentence"] == rows[1].split("\t")[0]
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    encoded = tokenize_task({"train": splits["train"]}, tokenizer, TASKS["sst2"], max_length=32)["train"]
    assert len(encoded[0]["input_ids"]) == 32 and encoded[0]["labels"] == 1
    assert set(encoded.column_names) == {"input_ids", "attention_mask", "labels"}  # nothing extra for the collator
    longer = sum(len(tokenizer(text)["input_ids"]) > 32 for text in splits["train"]["sentence"])
    assert 1 <= longer < 7  # the megabyte row and maybe others, not all
    assert f"Truncated to data.max_seq_length=32 tokens: {longer} of 7 train examples" in capsys.readouterr().out
    assert (
        encoded[1]["input_ids"]
        == tokenizer(splits["train"][1]["sentence"], truncation=True, max_length=32)["input_ids"]
    )
    # Without data.max_seq_length the length is the model's n, and the line says so (it named the unset option); a
    # share just under all is not rounded up to 100%.
    from datasets import Dataset

    many = Dataset.from_dict({"sentence": ["one two three four five six"] * 999 + ["one"], "label": [0] * 1000})
    tokenize_task({"train": many}, tokenizer, TASKS["sst2"], max_length=4, limit="the model's n")
    printed = capsys.readouterr().out
    assert "Truncated to the model's n=4 tokens:" in printed and "(100%)" not in printed


# ------------------------------------------------------------------------------------------------------------------
# Hub names that cannot be reached (the tests run offline): one line naming the name and the local way
# ------------------------------------------------------------------------------------------------------------------


def test_finetuning_by_a_hub_dataset_name_offline_is_one_line_offering_local_files(
    small_model_dir, tmp_path, capsys, monkeypatch
):
    """Before: a 23-line traceback ending in `ConnectionError: Couldn't reach 'glue' on the Hub`. After: one line
    that names the dataset, says why, and offers data.train_file / data.validation_file with the task's columns."""
    import datasets

    from linformer_hf.training import finetune

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "cache"))  # not this machine's glue

    recipe = os.path.join(REPO, "configs", "finetune", "qnli.yaml")
    argv = ["--config", recipe, "--model.pretrained", small_model_dir, "--training.output_dir", str(tmp_path / "out")]
    status = finetune.main(argv)
    err = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in err, err
    assert err.startswith("error: data.dataset 'glue' is not a local path") and "offline mode is on" in err
    assert "--data.train_file" in err and "--data.validation_file" in err and "question, sentence, label" in err
    assert not (tmp_path / "out").exists()  # refused before any work


@pytest.mark.parametrize(
    "script,argv",
    [
        ("convert_to_linformer.py", ["roberta-base", "{tmp}/converted"]),
        (
            "transfer_attention.py",
            ["--teacher", "roberta-base", "--student", "{model}", "--output_dir", "{tmp}/t", "--text_files", "{text}"],
        ),
    ],
)
def test_a_model_hub_name_offline_is_one_line_naming_it(script, argv, small_model_dir, tokenizer_dir, tmp_path):
    """Before: `error: We couldn't connect to 'https://huggingface.co' to load the files ...`, naming neither the
    model nor the option. After: the option, the name, why, and the local alternative."""
    import shutil

    from training_utils import WIKITEXT, run_script

    student = shutil.copytree(small_model_dir, tmp_path / "student")  # with a tokenizer, as a transfer needs
    shutil.copytree(tokenizer_dir, student, dirs_exist_ok=True)
    args = [a.format(tmp=tmp_path, model=student, text=WIKITEXT) for a in argv]
    hub_cache = str(tmp_path / "hf")  # nothing cached on this machine
    result = run_script(
        [os.path.join(REPO, "scripts", script), *args], timeout=120, HF_HOME=hub_cache, HF_HUB_CACHE=hub_cache
    )
    lines = [line for line in result.stderr.splitlines() if not line.startswith("Loading weights")]
    assert result.returncode == 2 and lines[-1].startswith("error: "), result.stderr
    assert "'roberta-base' is not a local path" in lines[-1] and "offline mode is on" in lines[-1]
    assert "folder of a saved model" in lines[-1] and "Traceback" not in result.stderr


def test_converting_a_hub_name_offline_for_finetuning_is_one_line_naming_it(tmp_path, capsys):
    """Before: `error: Could not convert RoBERTa checkpoint roberta-base: We couldn't connect to
    'https://huggingface.co' ...`. After: the option, the name, why, and the local alternative."""
    from huggingface_hub import constants

    from linformer_hf.training import finetune

    argv = ["--config", os.path.join(REPO, "configs", "finetune", "sst2.yaml"), "--model.pretrained", "roberta-base"]
    argv += ["--model.convert_from_roberta", "{projected_length: 16}", "--data.train_file", SST2_DEV]
    argv += ["--training.output_dir", str(tmp_path / "out")]
    assert constants.HF_HUB_OFFLINE  # the tests run offline (conftest)
    if os.path.isdir(os.path.join(constants.HF_HUB_CACHE, "models--roberta-base")):
        pytest.skip("roberta-base is in this machine's Hub cache")
    assert finetune.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: model.pretrained 'roberta-base' is not a local path") and "offline mode" in err
    assert "folder of a saved model" in err


def test_max_seq_length_longer_than_n_names_the_fix(tokenizer_dir, tmp_path):
    """The error says which value to set (the model's n), not only that the asked length is too long."""
    from linformer_hf.training.finetuning import run_finetuning

    model_dir = tmp_path / "model"
    LinformerForMaskedLM(tiny_config(vocab_size=1000, max_sequence_length=64, projected_length=8)).save_pretrained(
        model_dir
    )
    extra = {
        "model.pretrained": str(model_dir),
        "model.tokenizer": tokenizer_dir,
        "data.train_file": SST2_DEV,
        "data.max_seq_length": 128,
        "training.output_dir": str(tmp_path / "out"),
    }
    with pytest.raises(ConfigError, match=r"max_seq_length=128 is larger than .* n=64: set --data.max_seq_length 64"):
        run_finetuning(load_recipe(FinetuneRecipe, os.path.join(REPO, "configs", "finetune", "sst2.yaml"), extra=extra))


@pytest.mark.parametrize("task, max_seq_length, least", [("sst2", 1, 3), ("qnli", 3, 6)])
def test_max_seq_length_shorter_than_the_special_tokens_is_refused_before_tokenising(
    tokenizer_dir, tmp_path, monkeypatch, task, max_seq_length, least
):
    """Before, a length below the tokenizer's special tokens (<s> </s>, or four for a pair) was not cut to at all (the
    tokenizer only logs it): the inputs kept their whole length, past data.max_seq_length, none was reported cut, and
    the run trained on them (a model of a small n failed at its first update). Now it is refused before tokenising."""
    from linformer_hf.training import finetuning_model
    from linformer_hf.training.finetuning import run_finetuning

    model_dir = tmp_path / "model"
    LinformerForMaskedLM(tiny_config(vocab_size=1000, max_sequence_length=64, projected_length=8)).save_pretrained(
        model_dir
    )
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("question\tsentence\tlabel\n" + "who wrote it?\tnobody knows who wrote the book .\t1\n" * 8)
    data = SST2_DEV if task == "sst2" else str(pairs)
    extra = {
        "model.pretrained": str(model_dir),
        "model.tokenizer": tokenizer_dir,
        "data.task": task,
        "data.train_file": data,
        "data.validation_file": data,
        "data.max_seq_length": max_seq_length,
        "training.output_dir": str(tmp_path / "out"),
        "training.max_steps": 1,
    }
    monkeypatch.setattr(finetuning_model, "tokenize_task", lambda *a, **k: pytest.fail("tokenised"))
    message = rf"max_seq_length={max_seq_length} leaves no token for the text: .* --data.max_seq_length {least} or more"
    with pytest.raises(ConfigError, match=message):
        run_finetuning(load_recipe(FinetuneRecipe, None, extra=extra), show_progress=False)
