"""experiments/mlm_trainer.py: the `Trainer` prototype of masked-LM pretraining makes the loop's updates (same data
order, masks, dropout and loss), resumes exactly, and with the Trainer's own ``num_items_in_batch`` normalises over
the whole update (docs/training.md, "Why the loop and not Trainer")."""

import pytest
from training_utils import WIKITEXT, tiny_pretrain_overrides

from experiments.mlm_trainer import build_trainer
from linformer_hf.training.checkpointing import read_update_log
from linformer_hf.training.config import PretrainRecipe, load_recipe
from linformer_hf.training.pretraining import run_pretraining
from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizer")
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(out), vocab_size=1000, model_max_length=64)
    return str(out)


def recipe(tokenizer_dir, out, **training):
    # 48 blocks / 8 = 6 micro-batches = 3 updates an epoch (accumulation 2): 6 updates cross an epoch boundary.
    overrides = tiny_pretrain_overrides(
        tokenizer_dir, out, gradient_accumulation_steps=2, save_final_model=False, **{"max_steps": 6, **training}
    )
    overrides.update({"data.max_train_blocks": 48, "data.max_eval_blocks": 8})
    return load_recipe(PretrainRecipe, None, extra=overrides)


def trainer_losses(tokenizer_dir, out, normalisation, **training):
    trainer = build_trainer(recipe(tokenizer_dir, out, **training), normalisation=normalisation)
    try:
        trainer.train(resume_from_checkpoint=trainer.resume_dir)
    finally:
        trainer.update_log.close()
        trainer.lock.release()
    return {r["step"]: r["loss"] for r in read_update_log(out) if "loss" in r}


def test_the_trainer_prototype_makes_the_loops_updates_and_resumes_exactly(tokenizer_dir, tmp_path):
    loop = run_pretraining(recipe(tokenizer_dir, tmp_path / "loop"), show_progress=False)["train_losses"]
    same = trainer_losses(tokenizer_dir, tmp_path / "micro", "micro_batch")
    assert sorted(same) == list(range(1, 7))
    for step in same:
        assert same[step] == pytest.approx(loop[step], abs=1e-6), step

    # Stopped after update 4 (mid-epoch) with a checkpoint, then resumed by a new Trainer: the same losses.
    trainer_losses(tokenizer_dir, tmp_path / "part", "micro_batch", checkpointing_steps=4, stop_after_steps=4)
    resumed = trainer_losses(
        tokenizer_dir, tmp_path / "part", "micro_batch", checkpointing_steps=4, resume_from_checkpoint="latest"
    )
    assert sorted(resumed) == list(range(1, 7))
    for step in resumed:
        assert resumed[step] == pytest.approx(loop[step], abs=1e-6), step

    # The Trainer's num_items_in_batch: one masked-token count for the whole update, not one per micro-batch, so the
    # first update's loss (same weights, same masked tokens) moves, a little.
    update = trainer_losses(tokenizer_dir, tmp_path / "update", "update", max_steps=3)
    assert 1e-6 < abs(update[1] - loop[1]) < 1e-2
