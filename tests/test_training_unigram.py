"""The unigram baseline of masked-LM perplexity (training/metrics.py), as pretraining reports it beside its own, and
the output bias that starts a fresh model there (model.output_bias_init)."""

import math

import numpy as np
import pytest
import torch
from training_utils import WIKITEXT, tiny_pretrain_overrides

from linformer_hf.training.config import ConfigError, PretrainRecipe, load_recipe
from linformer_hf.training.metrics import token_counts, unigram_log_probs, unigram_nll, unigram_perplexity


def test_unigram_perplexity_of_a_toy_corpus_is_the_hand_computed_one():
    # Training tokens: id 1 three times, id 2 once (id 0, a special token, is left out): p(1) = 3/4, p(2) = 1/4.
    counts = token_counts([[0, 1, 1, 2], [1, 0]], vocab_size=3, exclude_ids=[0])
    assert counts.tolist() == [0, 3, 1]
    # Scored labels 1 and 2 (-100: not masked, not scored): exp(-(ln 3/4 + ln 1/4) / 2) = 1 / sqrt(3/16).
    labels = [[-100, 1, -100], [2, -100, -100]]
    assert unigram_perplexity(counts, labels, smoothing=0) == pytest.approx(1 / math.sqrt(3 / 16))
    # Add-one smoothing over the 3 ids: p(1) = 4/7, p(2) = 2/7.
    assert unigram_perplexity(counts, labels, smoothing=1) == pytest.approx(1 / math.sqrt(8 / 49))
    # Sums, so that batches add up: two halves give the whole.
    log_probs = unigram_log_probs(counts, smoothing=0)
    whole = unigram_nll(log_probs, labels)
    halves = [unigram_nll(log_probs, part) for part in labels]
    assert whole[1] == 2 and sum(h[1] for h in halves) == 2
    assert whole[0] == pytest.approx(sum(h[0] for h in halves))


def test_unigram_perplexity_is_lowest_for_the_scored_tokens_own_frequencies():
    """Gibbs' inequality: on a set of tokens, the unigram model of their own frequencies has the lowest perplexity,
    equal to exp(their entropy); any other frequencies do worse, and uniform ones give the vocabulary size."""
    rng = np.random.default_rng(0)
    vocab = 50
    labels = rng.choice(vocab, size=2000, p=rng.dirichlet(np.full(vocab, 0.3)))
    own = np.bincount(labels, minlength=vocab)
    freq = own[own > 0] / own.sum()
    entropy = -(freq * np.log(freq)).sum()
    assert unigram_perplexity(own, labels, smoothing=0) == pytest.approx(math.exp(entropy))
    for _ in range(5):
        other = rng.integers(1, 100, size=vocab)
        assert unigram_perplexity(other, labels, smoothing=0) > math.exp(entropy)
    assert unigram_perplexity(np.ones(vocab), labels, smoothing=0) == pytest.approx(vocab)


def test_unseen_tokens_and_bad_input():
    counts = token_counts([[1, 1, 1]], vocab_size=4)
    assert unigram_perplexity(counts, [2], smoothing=0) == math.inf  # never seen, no smoothing: p = 0
    assert unigram_perplexity(counts, [2], smoothing=1) == pytest.approx((3 + 4) / 1)  # p = 1 / (3 + 4)
    with pytest.raises(ValueError, match="outside the vocabulary of 4"):
        token_counts([[1, 4]], vocab_size=4)
    with pytest.raises(ValueError, match="No scored label"):
        unigram_perplexity(counts, [-100, -100])


def test_pretraining_reports_the_unigram_perplexity_an_mlm_of_the_frequencies_reaches(tmp_path):
    """The reported unigram figure is the perplexity that pretraining's own evaluation gives a masked LM whose
    output is the training set's token frequencies whatever the input: same tokens scored, same average."""
    from linformer_hf.training.data import prepare_pretraining_data
    from linformer_hf.training.pretraining import build_trainer, evaluate_mlm
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    tokenizer_dir = tmp_path / "tokenizer"
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(tokenizer_dir), vocab_size=500, model_max_length=64)
    recipe = load_recipe(
        PretrainRecipe,
        None,
        extra={
            **tiny_pretrain_overrides(tokenizer_dir, tmp_path / "run", max_steps=10),
            "data.max_train_blocks": 300,
            "data.max_eval_blocks": 24,
        },
    )
    trainer = build_trainer(recipe)
    tokenizer = trainer.processing_class
    try:
        # The training blocks, rebuilt independently, give the frequencies.
        blocks = prepare_pretraining_data(recipe.data, tokenizer, recipe.training.seed)["train"]
        counts = token_counts(blocks["input_ids"], len(tokenizer), exclude_ids=tokenizer.all_special_ids)
        assert counts.sum() > 0.9 * 300 * 64  # 64-token blocks, a few special tokens left out
        model = trainer.model
        # logits = log p(token) at every position, whatever the input (the decoder weight is tied to the embeddings,
        # zeroed too: no matter here)
        with torch.no_grad():
            model.lm_head.decoder.weight.zero_()
            model.lm_head.bias.copy_(torch.from_numpy(unigram_log_probs(counts)).float())
        metrics = evaluate_mlm(model, trainer.get_eval_dataloader(), trainer.accelerator, tokenizer.mask_token_id)
    finally:
        trainer.close()
    assert metrics["eval_masked_tokens"] > 100
    assert trainer.unigram["unigram_perplexity"] == pytest.approx(metrics["perplexity"], rel=1e-4)
    # The same on the scored tokens whose input is <mask> (the ones a model must predict from context alone).
    assert trainer.unigram["unigram_mask_input_perplexity"] == pytest.approx(metrics["mask_input_perplexity"], rel=1e-4)
    assert trainer.unigram["unigram_perplexity"] < 500 / 2  # far below uniform over the vocabulary


def test_a_fresh_model_with_the_unigram_output_bias_starts_at_the_unigram_baseline(tmp_path):
    """model.output_bias_init: unigram. Before any update, the model's perplexity is near the unigram baseline's on the
    same masked tokens (its initial logits are small beside the log frequencies), where a zero bias starts near the
    vocabulary size; the bias set is the one the output layer uses (tied), for RoBERTa and the Linformer."""
    from linformer_hf.training.pretraining import build_trainer, evaluate_mlm
    from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer

    tokenizer_dir = tmp_path / "tokenizer"
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(tokenizer_dir), vocab_size=500, model_max_length=64)
    start = {}
    for model_type, bias_init in (("linformer", "unigram"), ("roberta", "unigram"), ("linformer", "zeros")):
        overrides = {
            **tiny_pretrain_overrides(tokenizer_dir, tmp_path / f"{model_type}-{bias_init}", max_steps=10),
            "data.max_train_blocks": 300,
            "data.max_eval_blocks": 24,
            "model.model_type": model_type,
            "model.output_bias_init": bias_init,
        }
        if model_type == "roberta":
            overrides["model.config_file"] = None
            overrides["model.config"] = {
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 66,
            }
        trainer = build_trainer(load_recipe(PretrainRecipe, None, extra=overrides))
        mask = trainer.processing_class.mask_token_id
        try:
            metrics = evaluate_mlm(trainer.model, trainer.get_eval_dataloader(), trainer.accelerator, mask)
        finally:
            trainer.close()
        unigram = trainer.unigram["unigram_mask_input_perplexity"]
        start[model_type, bias_init] = metrics["mask_input_perplexity"] / unigram
    assert start["linformer", "unigram"] == pytest.approx(1.0, abs=0.1), start
    assert start["roberta", "unigram"] == pytest.approx(1.0, abs=0.1), start
    assert start["linformer", "zeros"] > 2.0, start  # near uniform over 500 tokens, the baseline far below


def test_the_unigram_output_bias_is_refused_where_it_cannot_apply(tmp_path):
    base = tiny_pretrain_overrides(tmp_path / "tokenizer", tmp_path / "run", max_steps=10)
    with pytest.raises(ConfigError, match="model.output_bias_init must be one of"):
        load_recipe(PretrainRecipe, None, extra={**base, "model.output_bias_init": "frequencies"})
    with pytest.raises(ConfigError, match="model.pretrained is set"):
        load_recipe(
            PretrainRecipe, None, extra={**base, "model.output_bias_init": "unigram", "model.pretrained": str(tmp_path)}
        )
    with pytest.raises(ConfigError, match="streamed data set"):
        load_recipe(PretrainRecipe, None, extra={**base, "model.output_bias_init": "unigram", "data.streaming": True})
