"""A Linformer takes right padding only: every tokenizer this package saves beside one pads on the right, whatever
its source said (conversion, pretraining, fine-tuning, attention transfer, Hub packaging), so that batches built from
the saved folder are exact. The Performer takes either side: its tokenizers are left as they are. (The model's own
refusal of left padding is tested in test_attention.py.)"""

import json
import os
import shutil

import pytest
import torch
import transformers
from tiny_roberta import build_tokenizer, randomize_all, tiny_roberta_config
from training_utils import sst2_head, tiny_finetune_overrides

from linformer_hf.conversion import convert_checkpoint

TEXTS = ["the first season was released", "on DVD"]


def padding_side_saved(folder) -> str | None:
    with open(os.path.join(folder, "tokenizer_config.json")) as fh:
        return json.load(fh).get("padding_side")


def left_padding_copy(source, folder) -> str:
    """A copy of the tokenizer in `source` saved with padding_side="left" (as some Hub tokenizers are)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(source), padding_side="left")
    tokenizer.save_pretrained(str(folder))
    assert transformers.AutoTokenizer.from_pretrained(str(folder)).padding_side == "left"  # the premise
    return str(folder)


def assert_pads_on_the_right(folder):
    assert padding_side_saved(folder) == "right"  # recorded, not left to the class default
    assert transformers.AutoTokenizer.from_pretrained(str(folder)).padding_side == "right"


@pytest.fixture(scope="module")
def left_padded_roberta(tmp_path_factory):
    """A tiny RoBERTa masked LM whose saved tokenizer pads on the left."""
    folder = tmp_path_factory.mktemp("roberta")
    tokenizer = build_tokenizer(str(folder))
    model = transformers.RobertaForMaskedLM(tiny_roberta_config()).eval()
    randomize_all(model, 0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    left_padding_copy(folder, folder)
    return folder


def test_a_converted_linformer_pads_on_the_right_and_its_padded_batches_are_exact(left_padded_roberta, tmp_path):
    """Before: the source's left padding was copied, and the converted model's padded batches silently differed from
    the unpadded inputs."""
    report = convert_checkpoint(str(left_padded_roberta), str(tmp_path / "linformer"), projected_length=4)
    assert "padding_side left -> right" in report.tokenizer
    assert_pads_on_the_right(tmp_path / "linformer")

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "linformer"))
    model = transformers.AutoModel.from_pretrained(str(tmp_path / "linformer")).eval()
    batch = tokenizer(TEXTS, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        padded = model(**batch).last_hidden_state
        for row, text in enumerate(TEXTS):
            alone = model(**tokenizer([text], truncation=True, return_tensors="pt")).last_hidden_state[0]
            torch.testing.assert_close(padded[row, : len(alone)], alone, rtol=1e-5, atol=1e-5)


def test_a_converted_performer_keeps_the_source_padding_side(left_padded_roberta, tmp_path):
    """The Performer is exact under left padding: its tokenizer is copied as it is."""
    convert_checkpoint(str(left_padded_roberta), str(tmp_path / "performer"), target="performer")
    assert transformers.AutoTokenizer.from_pretrained(str(tmp_path / "performer")).padding_side == "left"


@pytest.fixture(scope="module")
def pretrained_dir(tmp_path_factory):
    from test_training_finetune import pretrained_dir as build

    return build.__wrapped__(tmp_path_factory)


def test_finetuning_a_linformer_pads_on_the_right_and_saves_its_tokenizer_so(pretrained_dir, tmp_path):
    """A tokenizer that pads on the left: the run's batches are right-padded (the model refuses left padding) and
    best/'s tokenizer pads on the right."""
    from linformer_hf.training.config import FinetuneRecipe, load_recipe
    from linformer_hf.training.finetuning import run_finetuning

    tokenizer = left_padding_copy(pretrained_dir, tmp_path / "tokenizer")
    overrides = tiny_finetune_overrides(
        pretrained_dir,
        sst2_head(tmp_path / "train.tsv", 32),
        tmp_path / "run",
        {"model.tokenizer": tokenizer, "data.max_eval_samples": 16, "training.max_steps": 2},
    )
    result = run_finetuning(load_recipe(FinetuneRecipe, None, extra=overrides), show_progress=False)
    assert_pads_on_the_right(result["best_dir"])


def test_pretraining_a_linformer_saves_a_tokenizer_that_pads_on_the_right(tmp_path):
    from training_utils import WIKITEXT, tiny_pretrain_overrides

    from linformer_hf.training.config import PretrainRecipe, load_recipe
    from linformer_hf.training.pretraining import run_pretraining
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(tmp_path / "bpe"), vocab_size=500, model_max_length=64)
    tokenizer = left_padding_copy(tmp_path / "bpe", tmp_path / "tokenizer")
    overrides = tiny_pretrain_overrides(tokenizer, tmp_path / "run", max_steps=3)
    overrides.update({"data.max_train_blocks": 8, "data.max_eval_blocks": 8})
    run_pretraining(load_recipe(PretrainRecipe, None, extra=overrides), show_progress=False)
    assert_pads_on_the_right(tmp_path / "run" / "final")


def test_attention_transfer_saves_a_tokenizer_that_pads_on_the_right(tmp_path):
    from test_transfer import arguments, build_pair

    from linformer_hf.training.transfer import run_transfer

    pair = build_pair(tmp_path / "pair")
    student = tmp_path / "student"
    shutil.copytree(pair / "student_k4", student)
    left_padding_copy(student, student)
    run_transfer(arguments(pair, tmp_path / "out", student=str(student), layer_steps=1))
    assert_pads_on_the_right(tmp_path / "out")


def test_a_packaged_linformer_carries_a_tokenizer_that_pads_on_the_right(left_padded_roberta, tmp_path):
    from linformer_hf.hub import prepare_model_folder

    convert_checkpoint(str(left_padded_roberta), str(tmp_path / "linformer"), projected_length=4)
    left_padding_copy(tmp_path / "linformer", tmp_path / "linformer")  # as an older conversion saved it
    prepare_model_folder(str(tmp_path / "linformer"), str(tmp_path / "package"), "user/tiny-linformer")
    assert_pads_on_the_right(tmp_path / "package")
