"""Pretraining on real text (WikiText-2 validation): convergence, exact resume, 1 process == 2 processes, reload."""

import json
import os
import subprocess

import pytest
import torch
import torch.nn.functional as F
from prefork import python_executable
from training_utils import REPO, WIKITEXT, as_argv, free_port, script_env, tiny_pretrain_overrides

from linformer_hf.training.config import PretrainRecipe, load_recipe
from linformer_hf.training.pretraining import run_pretraining
from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizer")
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(out), vocab_size=1000, model_max_length=64)
    return out


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """The first 400 lines of WikiText-2 validation (real text; enough for a few epochs of tiny batches)."""
    path = tmp_path_factory.mktemp("corpus") / "wiki_head.txt"
    with open(WIKITEXT, encoding="utf-8") as src:
        path.write_text("".join(line for _, line in zip(range(400), src)), encoding="utf-8")
    return str(path)


def recipe(tokenizer_dir, output_dir, **kw):
    overrides = tiny_pretrain_overrides(tokenizer_dir, output_dir, **kw.pop("training", {}))
    overrides.update(kw)
    return load_recipe(PretrainRecipe, None, extra=overrides)


def test_validation_loss_falls_and_model_reloads(tokenizer_dir, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    out = tmp_path / "run"
    summary = run_pretraining(
        recipe(
            tokenizer_dir,
            out,
            training=dict(max_steps=60, eval_steps=30, learning_rate=4e-3, warmup_steps=5, report_to=["tensorboard"]),
            **{"data.max_train_blocks": 1200},
        ),
        show_progress=False,
    )
    evals = summary["evals"]
    assert sorted(evals) == [0, 30, 60]  # at the start, every eval_steps, and at the end: each once
    start, end = evals[0]["eval_loss"], evals[60]["eval_loss"]
    # From ~ln(vocab) = 6.9 at init: a model that learns the corpus' statistics gets well below (perplexity / 2+).
    assert start > 6.0
    assert end < start - 0.75, evals
    assert evals[30]["eval_loss"] < start - 0.3
    assert summary["final_eval"]["perplexity"] == pytest.approx(torch.exp(torch.tensor(end)).item(), rel=1e-4)

    logs = [f for _, _, files in os.walk(out / "runs") for f in files]  # the Trainer's TensorBoard folder
    assert any(f.startswith("events.out.tfevents") for f in logs)

    final = summary["final_dir"]
    model = AutoModelForMaskedLM.from_pretrained(final)
    tok = AutoTokenizer.from_pretrained(final)
    assert type(model).__name__ == "LinformerForMaskedLM"
    assert model.config.max_sequence_length == 64
    with open(os.path.join(final, "eval_results.json")) as fh:
        assert json.load(fh)["eval_loss"] == pytest.approx(end)
    preds = pipeline("fill-mask", model=model, tokenizer=tok)(f"The game was released in {tok.mask_token} .")
    assert len(preds) == 5 and all(0 <= p["score"] <= 1 for p in preds)


def test_resume_reproduces_uninterrupted_run(tokenizer_dir, small_corpus, tmp_path):
    # Small data so the run crosses epoch boundaries (5 micro-batches an epoch: updates of 2, 2 and 1); accumulation 2;
    # dropout on (tiny_test.yaml has 0.1).
    common = {"data.max_train_blocks": 40, "data.train_files": [small_corpus]}
    train = dict(max_steps=12, gradient_accumulation_steps=2, checkpointing_steps=4)
    full = run_pretraining(recipe(tokenizer_dir, tmp_path / "full", training=train, **common), show_progress=False)

    part = run_pretraining(
        recipe(tokenizer_dir, tmp_path / "part", training=dict(train, stop_after_steps=8), **common),
        show_progress=False,
    )
    assert part["completed_steps"] == 8 and "final_eval" not in part
    assert sorted(p.name for p in (tmp_path / "part").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]
    resumed = run_pretraining(
        recipe(tokenizer_dir, tmp_path / "part", training=dict(train, resume_from_checkpoint="latest"), **common),
        show_progress=False,
    )
    assert resumed["resumed_from"].endswith("checkpoint-8")
    for step in range(1, 9):
        assert part["train_losses"][step] == pytest.approx(full["train_losses"][step], abs=1e-6)
    for step in range(9, 13):
        assert resumed["train_losses"][step] == pytest.approx(full["train_losses"][step], abs=1e-6), step
    assert resumed["final_eval"]["eval_loss"] == pytest.approx(full["final_eval"]["eval_loss"], abs=1e-6)

    # An explicit checkpoint dir works too (and resumes mid-epoch: update 4 ends at the second micro-batch of the
    # second epoch).
    again = run_pretraining(
        recipe(
            tokenizer_dir,
            tmp_path / "again",
            training=dict(train, resume_from_checkpoint=str(tmp_path / "part/checkpoint-4")),
            **common,
        ),
        show_progress=False,
    )
    for step in range(5, 13):
        assert again["train_losses"][step] == pytest.approx(full["train_losses"][step], abs=1e-6), step
    # The losses did change along the way (guards against a run that does nothing).
    assert len({round(v, 4) for v in full["train_losses"].values()}) > 6


def test_two_processes_and_accumulation_match_one_process(tokenizer_dir, small_corpus, tmp_path):
    """torchrun with 2 gloo processes, per-device batch 4, equals one process with batch 8 (dropout off), as does one
    process with batch 4 and 2 accumulation steps: an update's loss is normalised by all its masked tokens."""

    def overrides(out, batch):
        o = tiny_pretrain_overrides(tokenizer_dir, out, max_steps=8, eval_steps=4, per_device_train_batch_size=batch)
        o.update(
            {
                "data.max_train_blocks": 96,
                "data.train_files": [small_corpus],
                "model.config.hidden_dropout_prob": 0.0,
                "model.config.attention_probs_dropout_prob": 0.0,
            }
        )
        return o

    one = run_pretraining(load_recipe(PretrainRecipe, None, extra=overrides(tmp_path / "one", 8)), show_progress=False)
    accumulated = {**overrides(tmp_path / "accumulated", 4), "training.gradient_accumulation_steps": 2}
    accumulated = run_pretraining(load_recipe(PretrainRecipe, None, extra=accumulated), show_progress=False)
    for step in range(1, 9):
        assert accumulated["train_losses"][step] == pytest.approx(one["train_losses"][step], abs=2e-5), step
    cmd = [
        python_executable(),
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        str(free_port()),
        "scripts/pretrain.py",
        "--config",
        os.path.join(REPO, "configs", "pretrain", "demo.yaml"),
        "--no_progress",
        *as_argv(overrides(tmp_path / "two", 4)),
        "--training.report_to",
        "[]",
        "--training.checkpointing_steps",
        "null",
        "--data.validation_files",
        "[]",
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
    with open(tmp_path / "two" / "summary_step8.json") as fh:
        two = json.load(fh)
    assert two["num_processes"] == 2
    for step in range(1, 9):
        assert two["train_losses"][str(step)] == pytest.approx(one["train_losses"][step], abs=2e-5), step
    for step in (0, 4, 8):
        assert two["evals"][str(step)]["eval_loss"] == pytest.approx(one["evals"][step]["eval_loss"], abs=2e-5)
        assert two["evals"][str(step)]["eval_masked_tokens"] == one["evals"][step]["eval_masked_tokens"]


def test_streaming_local_files_train_and_resume(tokenizer_dir, small_corpus, tmp_path):
    common = {
        "data.train_files": [small_corpus],
        "data.streaming": True,
        "data.validation_examples_streaming": 60,
        "data.shuffle_buffer_size": 100,
    }
    train = dict(max_steps=6, checkpointing_steps=3, eval_steps=3)
    full = run_pretraining(recipe(tokenizer_dir, tmp_path / "full", training=train, **common), show_progress=False)
    # every evaluation scores the same masked tokens (before, streamed masks moved on at each evaluation)
    assert len(full["evals"]) == 3 and len({e["eval_masked_tokens"] for e in full["evals"].values()}) == 1
    run_pretraining(
        recipe(tokenizer_dir, tmp_path / "part", training=dict(train, stop_after_steps=3), **common),
        show_progress=False,
    )
    resumed = run_pretraining(
        recipe(tokenizer_dir, tmp_path / "part", training=dict(train, resume_from_checkpoint="latest"), **common),
        show_progress=False,
    )
    for step in range(4, 7):
        assert resumed["train_losses"][step] == pytest.approx(full["train_losses"][step], abs=1e-6)
    assert resumed["final_eval"]["eval_loss"] == pytest.approx(full["final_eval"]["eval_loss"], abs=1e-6)


def test_time_budget_stops_then_evaluates_and_saves(tokenizer_dir, small_corpus, tmp_path):
    summary = run_pretraining(
        recipe(
            tokenizer_dir,
            tmp_path / "t",
            training=dict(max_steps=50, max_train_minutes=0.0),
            **{"data.train_files": [small_corpus]},
        ),
        show_progress=False,
    )
    assert summary["stopped_by_time_budget"] and summary["completed_steps"] == 1
    assert os.path.isfile(os.path.join(summary["final_dir"], "eval_results.json"))


def test_roberta_baseline_same_recipe(tokenizer_dir, small_corpus, tmp_path):
    from linformer_hf.training.config import ConfigError

    extra = {
        "data.train_files": [small_corpus],
        "model.model_type": "roberta",
        "model.config_file": None,
        "model.config": {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "max_position_embeddings": 66,
        },
    }
    summary = run_pretraining(
        recipe(tokenizer_dir, tmp_path / "r", training=dict(max_steps=3), **extra), show_progress=False
    )
    from transformers import AutoModelForMaskedLM

    assert type(AutoModelForMaskedLM.from_pretrained(summary["final_dir"])).__name__ == "RobertaForMaskedLM"
    extra["model.config"] = dict(extra["model.config"], max_position_embeddings=50)  # n = 48 < block 64
    with pytest.raises(ConfigError, match="larger than the model's longest input n=48"):
        run_pretraining(
            recipe(tokenizer_dir, tmp_path / "r2", training=dict(max_steps=3), **extra), show_progress=False
        )


def test_short_blocks_keep_every_token_and_validation_stays_full(tokenizer_dir, small_corpus, tmp_path):
    from transformers import AutoTokenizer

    from linformer_hf.training.data import build_mlm_collator, prepare_pretraining_data

    def prepare(probability):
        cfg = recipe(
            tokenizer_dir,
            tmp_path,
            **{
                "data.train_files": [small_corpus],
                "data.short_block_probability": probability,
                "data.short_block_min_length": 8,
            },
        ).data
        return cfg, prepare_pretraining_data(cfg, AutoTokenizer.from_pretrained(tokenizer_dir), seed=3)

    _, full = prepare(0.0)
    cfg, mixed = prepare(0.5)
    lengths = [len(ids) for ids in mixed["train"]["input_ids"]]
    short = sum(length < 64 for length in lengths)
    assert all(8 <= length <= 64 for length in lengths)
    assert 0.3 < short / len(lengths) < 0.7, (short, len(lengths))
    # The cut drops no token: both packings are prefixes of the same token stream.
    stream_full = [t for ids in full["train"]["input_ids"] for t in ids]
    stream_mixed = [t for ids in mixed["train"]["input_ids"] for t in ids]
    shorter = min(len(stream_full), len(stream_mixed))
    assert shorter > 0.9 * len(stream_full) and stream_mixed[:shorter] == stream_full[:shorter]
    # Validation keeps full blocks (perplexity stays comparable across recipes); the cut is deterministic.
    assert set(len(ids) for ids in mixed["validation"]["input_ids"]) == {64}
    assert prepare(0.5)[1]["train"]["input_ids"] == mixed["train"]["input_ids"]

    # Batches of mixed lengths are right-padded: padding is masked out and never a label.
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    collator = build_mlm_collator(tokenizer, cfg, seed=0)
    examples = [mixed["train"][i] for i in range(len(lengths)) if lengths[i] < 64][:2] + [
        mixed["train"][lengths.index(64)]
    ]
    batch = collator(examples)
    assert batch["input_ids"].shape == (3, 64)
    for row, example in enumerate(examples):
        length = len(example["input_ids"])
        assert batch["attention_mask"][row, :length].all() and not batch["attention_mask"][row, length:].any()
        assert (batch["input_ids"][row, length:] == tokenizer.pad_token_id).all()
        assert (batch["labels"][row, length:] == -100).all()
    assert (batch["labels"][batch["attention_mask"].bool()] != -100).any()  # real tokens are still MLM targets


def test_pretraining_with_short_blocks_runs_and_learns(tokenizer_dir, small_corpus, tmp_path):
    summary = run_pretraining(
        recipe(
            tokenizer_dir,
            tmp_path / "run",
            training=dict(max_steps=20, eval_steps=20),
            **{"data.train_files": [small_corpus], "data.short_block_probability": 0.3},
        ),
        show_progress=False,
    )
    assert summary["final_eval"]["eval_loss"] < summary["evals"][0]["eval_loss"] - 0.3


def test_the_masked_lm_loss_is_computed_once_and_normalised_by_the_given_count(monkeypatch):
    """One cross-entropy per forward (the model's own; none computed and thrown away), equal to sum / num_masked."""
    import torch.nn.functional as F

    from linformer_hf import LinformerConfig, LinformerForMaskedLM
    from linformer_hf.training.pretraining import masked_lm_loss

    torch.manual_seed(0)
    model = LinformerForMaskedLM(
        LinformerConfig(
            vocab_size=50,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_sequence_length=16,
            projected_length=4,
        )
    ).eval()
    input_ids = torch.randint(5, 50, (3, 16))
    labels = torch.full_like(input_ids, -100)
    labels[:, ::3] = input_ids[:, ::3]
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    with torch.no_grad():
        logits = model(input_ids).logits  # (batch, L, vocab)
    reference_sum = F.cross_entropy(logits[labels.ne(-100)], labels[labels.ne(-100)], reduction="sum")

    calls = []
    cross_entropy = F.cross_entropy
    monkeypatch.setattr(F, "cross_entropy", lambda *a, **k: calls.append(1) or cross_entropy(*a, **k))
    with torch.no_grad():
        loss = masked_lm_loss(model, batch, num_masked=torch.tensor(40))
    assert len(calls) == 1
    assert loss.item() == pytest.approx(reference_sum.item() / 40, rel=1e-5)


@pytest.mark.parametrize("model_type", ["linformer", "roberta"])
def test_the_evaluation_runs_one_forward_a_batch_and_equals_the_full_logits_cross_entropy(model_type):
    """`evaluate_mlm`'s two figures, the loss over every scored token and over those whose input is <mask>, from one
    forward a batch, equal the cross-entropy of the full logits (every position) at those tokens: rows and labels in
    the same order, with a mask token, random replacements and unchanged tokens among the scored ones."""
    from accelerate import Accelerator
    from transformers import RobertaConfig

    from linformer_hf import LinformerConfig, LinformerForMaskedLM
    from linformer_hf.training.model_setup import RobertaForMaskedLMBaseline
    from linformer_hf.training.pretraining import evaluate_mlm

    torch.manual_seed(0)
    sizes = dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    if model_type == "linformer":
        model = LinformerForMaskedLM(LinformerConfig(**sizes, max_sequence_length=16, projected_length=4))
    else:
        model = RobertaForMaskedLMBaseline(RobertaConfig(**sizes, max_position_embeddings=18))
    model.eval()
    mask_id, batches = 4, []
    for _ in range(3):
        labels = torch.randint(5, 50, (2, 16))
        scored = torch.rand(2, 16) < 0.5
        shown = torch.where(torch.rand(2, 16) < 0.6, mask_id, torch.randint(5, 50, (2, 16)))
        input_ids = torch.where(scored, shown, labels)
        batches.append({"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids),
                        "labels": labels.masked_fill(~scored, -100)})  # fmt: skip

    forwards = []
    hook = model.base_model.register_forward_hook(lambda *_: forwards.append(1))
    got = evaluate_mlm(model, batches, Accelerator(cpu=True), mask_token_id=mask_id)
    hook.remove()
    assert len(forwards) == len(batches)

    sums = torch.zeros(4, dtype=torch.float64)
    model.eval()  # evaluate_mlm leaves the model in training mode
    with torch.no_grad():
        for batch in batches:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (2, 16, V)
            scored = batch["labels"].ne(-100)
            at_mask = scored & batch["input_ids"].eq(mask_id)
            for i, where in ((0, scored), (2, at_mask)):
                sums[i] += F.cross_entropy(logits[where], batch["labels"][where], reduction="sum").double()
                sums[i + 1] += where.sum()
    assert 0 < sums[3] < sums[1]  # some scored inputs are not <mask>
    assert got["eval_masked_tokens"] == int(sums[1])
    assert got["eval_loss"] == pytest.approx((sums[0] / sums[1]).item(), rel=1e-6)
    assert got["mask_input_loss"] == pytest.approx((sums[2] / sums[3]).item(), rel=1e-6)
