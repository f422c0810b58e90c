"""Masked-LM pretraining with Accelerate: ``python -m linformer_hf.training.pretrain`` (and ``scripts/pretrain.py``).

A loop of its own rather than transformers' ``Trainer``: blocks are masked with per-block seeds, the loss is
normalised by the masked tokens of the whole global batch, and a time budget ends a run with its final evaluation.
`setup_pretraining` builds a `PretrainingRun`, `train_micro_batch` advances it, `evaluate_and_log`,
`save_checkpoint` and `save_final_model` record it; `run_pretraining` is the loop that ties them. The output
directory's policy and lock, atomic checkpoints, the recipe check on resume and the update log are
training/checkpointing.py's.

Exactness guarantees (tested in tests/test_training_pretrain.py):
- resume: ``accelerator.save_state`` stores model, optimizer, scheduler (registered), RNG states and the step counter;
  data order comes from Accelerate's seedable sampler (seed + epoch), masking from per-block seeds, and the resumed
  epoch skips the consumed batches with ``skip_first_batches``: a resumed run reproduces the uninterrupted one.
- processes: the loss is the sum of token losses divided by the number of masked tokens of the whole global batch
  (all-reduced), and each global batch holds the same blocks whatever the process count, so one process with a global
  batch B and P processes with B / P each compute the same updates.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from datasets.distributed import split_dataset_by_node
from torch.utils.data import DataLoader

from ..loading import pad_as_the_model_takes
from ..models import max_input_length
from ..outputs import write_json_atomic
from . import checkpointing, compiling
from .checkpointing import (
    RunLock,
    UpdateLog,
    check_resume_compatible,
    claim_output_dir,
    publish_dir,
    read_checkpoint_state,
    recipe_fingerprint,
    resolve_checkpoint,
    temporary_name,
)
from .config import ConfigError, PretrainRecipe
from .data import SeededMaskingCollator, _example_seed, build_mlm_collator, prepare_pretraining_data, shard_stream
from .errors import Preempted, TrainingDiverged
from .guards import DivergenceGuard, StopSignal, check_weights_finite, resume_hint
from .loop import build_accelerator, build_optimizer, finish, init_trackers, optimizer_step, recipe_guard
from .metrics import token_counts, unigram_log_probs, unigram_nll
from .model_setup import build_mlm_model, build_model_config, convert_masked_lm, init_output_bias
from .tokenizer import load_tokenizer
from .validation import check_model_files, check_tokenizer_fits_model, warn_if_mixed_precision_ignored

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# Summaries
# ----------------------------------------------------------------------------------------------------------------


def summary_path(output_dir: str, completed_steps: int) -> str:
    """Where a run writes its summary: one file per run, named by the updates completed when it ended."""
    return os.path.join(output_dir, f"summary_step{completed_steps}.json")


def read_final_summary(output_dir: str) -> dict:
    """The summary of the run that went furthest in ``output_dir`` (a time budget may end it before max_steps)."""
    found = []
    for name in os.listdir(output_dir) if os.path.isdir(output_dir) else []:
        m = re.fullmatch(r"summary_step(\d+)\.json", name)
        if m:
            found.append(int(m.group(1)))
    if not found:
        raise FileNotFoundError(f"No summary_step<N>.json in {output_dir}: the pretraining run did not finish.")
    with open(summary_path(output_dir, max(found)), encoding="utf-8") as fh:
        return json.load(fh)


# ----------------------------------------------------------------------------------------------------------------
# Loss and evaluation
# ----------------------------------------------------------------------------------------------------------------


def masked_lm_loss(model, batch, num_masked) -> torch.Tensor:
    """The masked tokens' summed cross-entropy divided by ``num_masked``, computed once, by the model's own loss.

    transformers' masked-LM loss sums the token losses and divides by ``num_items_in_batch`` when it is given (as
    ``Trainer`` does under gradient accumulation): with the masked-token count of the whole global batch it gives
    the normalisation of the module docstring, with 1 it gives the plain sum. The LM head runs only at the masked
    positions (``logits_for_labels_only``, which both the Linformer and the RoBERTa baseline built by
    ``model_setup.build_mlm_model`` take): about 15% of the vocabulary projection's cost, same loss.
    """
    return model(**batch, logits_for_labels_only=True, num_items_in_batch=num_masked).loss


def labels_at_mask_inputs(batch, mask_token_id: int) -> torch.Tensor:
    """The batch's labels kept only where the input shows ``<mask>`` (-100 elsewhere).

    Of the scored tokens, the MLM collator replaces 80% by ``<mask>``, 10% by a random token and leaves 10% unchanged:
    at those last ones the answer is in the input, and a model that learns to copy non-mask inputs lowers the usual
    MLM loss a lot without reading any context. The loss at ``<mask>`` inputs is the one that says how well the model
    predicts a token from its context alone, the one to compare with the unigram baseline.
    """
    return batch["labels"].masked_fill(batch["input_ids"].ne(mask_token_id), -100)


@torch.no_grad()
def evaluate_mlm(model, dataloader, accelerator, mask_token_id: int | None = None) -> dict[str, float]:
    """Validation loss per masked token over every process' shard of the validation blocks (each block once); with
    ``mask_token_id``, also the loss at the scored tokens whose input is ``<mask>`` (`labels_at_mask_inputs`)."""
    model.eval()
    # [loss, tokens] over all scored tokens, then over those whose input is <mask>
    totals = torch.zeros(4, dtype=torch.float64, device=accelerator.device)
    for batch in dataloader:
        batch = {key: value.to(accelerator.device) for key, value in batch.items()}
        totals[0] += masked_lm_loss(model, batch, num_masked=1).double()
        totals[1] += batch["labels"].ne(-100).sum()
        if mask_token_id is not None:
            at_mask = {**batch, "labels": labels_at_mask_inputs(batch, mask_token_id)}
            totals[2] += masked_lm_loss(model, at_mask, num_masked=1).double()
            totals[3] += at_mask["labels"].ne(-100).sum()
    model.train()
    totals = accelerator.reduce(totals, reduction="sum")
    loss = (totals[0] / totals[1].clamp(min=1)).item()
    out = {"eval_loss": loss, "perplexity": math.exp(min(loss, 50.0)), "eval_masked_tokens": int(totals[1].item())}
    if mask_token_id is not None:
        at_mask_loss = (totals[2] / totals[3].clamp(min=1)).item()
        out.update(mask_input_loss=at_mask_loss, mask_input_perplexity=math.exp(min(at_mask_loss, 50.0)))
    return out


def training_unigram_log_probs(train_data, tokenizer) -> np.ndarray | None:
    """log p(token) of the training blocks' token frequencies (add-one smoothed), counted without the special tokens
    (never masked, so never predicted); None for streamed training data, which cannot be counted up front."""
    if not hasattr(train_data, "__len__"):
        return None
    counts = token_counts(
        (ids for batch in train_data.iter(batch_size=1024) for ids in batch["input_ids"]),
        len(tokenizer),
        exclude_ids=tokenizer.all_special_ids,
    )
    return unigram_log_probs(counts)


def unigram_baseline(log_probs: np.ndarray | None, mask_token_id: int, eval_dataloader, accelerator) -> dict | None:
    """The perplexity that predicting the training set's token frequencies (``log_probs``), whatever the context,
    reaches on the very masked tokens `evaluate_mlm` scores (the validation masking is seeded, the same at every
    evaluation): on all of them (``unigram_perplexity``) and on those whose input is ``<mask>``
    (``unigram_mask_input_perplexity``). The bar a masked LM must clear to show it uses context; None without
    ``log_probs`` (streamed training data).
    """
    if log_probs is None:
        return None
    sums = [0.0, 0, 0.0, 0]  # [nll, scored] over all scored tokens, then over those whose input is <mask>
    for batch in eval_dataloader:
        for i, labels in ((0, batch["labels"]), (2, labels_at_mask_inputs(batch, mask_token_id))):
            batch_nll, batch_scored = unigram_nll(log_probs, labels.numpy())
            sums[i] += batch_nll
            sums[i + 1] += batch_scored
    totals = accelerator.reduce(torch.tensor(sums, dtype=torch.float64, device=accelerator.device), reduction="sum")
    loss = (totals[0] / totals[1].clamp(min=1)).item()
    at_mask_loss = (totals[2] / totals[3].clamp(min=1)).item()
    return {
        "unigram_loss": loss,
        "unigram_perplexity": math.exp(min(loss, 50.0)),
        "unigram_mask_input_loss": at_mask_loss,
        "unigram_mask_input_perplexity": math.exp(min(at_mask_loss, 50.0)),
    }


# ----------------------------------------------------------------------------------------------------------------
# The run: setup, one update, evaluation and saving, and the loop that ties them
# ----------------------------------------------------------------------------------------------------------------


def check_block_size(recipe: PretrainRecipe, model_config) -> None:
    """The model's inputs fit its n. data.block_size unset (null) is n, so one override sets the length of a run;
    with data.input_length set, the inputs are that long and blocks may be longer (a multiple of it)."""
    data = recipe.data
    n = max_input_length(model_config)
    if data.block_size is None:
        data.block_size = n
    if data.input_length is not None:
        if data.input_length > n:
            raise ConfigError(
                f"data.input_length={data.input_length} is larger than the model's longest input n={n} "
                f"(max_sequence_length). Lower data.input_length or raise model max_sequence_length."
            )
        if data.block_size % data.input_length:
            raise ConfigError(
                f"data.block_size={data.block_size} is not a multiple of data.input_length={data.input_length}: "
                f"each block is read as whole inputs. Give a block_size that input_length divides."
            )
    elif data.block_size > n:
        raise ConfigError(
            f"data.block_size={data.block_size} is larger than the model's longest input n={n} "
            f"(max_sequence_length). Lower data.block_size or raise model max_sequence_length, or read each block "
            f"as several inputs with data.input_length."
        )


def compile_plugin(tcfg) -> dict:
    """The Accelerator's ``dynamo_plugin`` for ``training.torch_compile``: none when it is null (the Accelerate config
    decides, as for mixed precision); else Accelerate compiles the whole model at ``prepare`` (model) or nothing (no,
    and layers, which are compiled in place)."""
    from accelerate.utils import TorchDynamoPlugin

    if tcfg.torch_compile is None:
        return {}
    if tcfg.torch_compile != "model":
        return {"dynamo_plugin": TorchDynamoPlugin(backend="no")}
    kwargs = compiling.compile_kwargs(tcfg.torch_compile_mode, tcfg.torch_compile_backend)
    return {"dynamo_plugin": TorchDynamoPlugin(**kwargs)}


def compiles_whole_model(accelerator) -> bool:
    """Whether ``accelerator.prepare`` compiles the model (by ``training.torch_compile: model`` or the Accelerate
    config's dynamo settings)."""
    from accelerate.utils import DynamoBackend

    return accelerator.state.dynamo_plugin.backend != DynamoBackend.NO


@dataclass
class PretrainingRun:
    """What a run holds between updates; built by `setup_pretraining`, advanced by `train_update`."""

    recipe: PretrainRecipe
    accelerator: Any
    tokenizer: Any
    model: Any
    optimizer: Any
    scheduler: Any
    collator: SeededMaskingCollator
    train_dl: DataLoader
    eval_dl: DataLoader
    completed_steps: int = 0  # optimizer updates done (restored on resume)
    epoch: int = 0
    skip: int = 0  # micro-batches of `epoch` already consumed before a resume
    micro: int = 0  # micro-batch index inside the current update
    summary: dict = field(default_factory=dict)
    fingerprint: dict = field(default_factory=dict)  # the recipe each checkpoint records (checked on resume)
    lock: RunLock | None = None  # on <output_dir>/.run.lock, held by the main process until `close_run`
    update_log: UpdateLog | None = None  # <output_dir>/train_log.jsonl: one line per update, evaluation, checkpoint
    unigram: dict | None = None  # `unigram_baseline` of the validation masked tokens (None for streamed data)
    guard: DivergenceGuard | None = None  # stops the run on non-finite updates; knows the last good checkpoint
    last_update_finite: bool = True  # the gradients of the last update were finite (it was not skipped)

    @property
    def streaming(self) -> bool:
        return self.recipe.data.streaming


def setup_pretraining(recipe: PretrainRecipe) -> PretrainingRun:
    """Check the inputs and claim the output directory, then build the Accelerator, data, model, optimizer and
    schedule, and restore a checkpoint."""
    from accelerate import PartialState
    from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, parse_flag_from_env, set_seed
    from transformers import get_scheduler

    tcfg, dcfg = recipe.training, recipe.data
    # Everything that can fail on bad input is checked before the Accelerator, data and model are built.
    resume_dir = resolve_checkpoint(tcfg.resume_from_checkpoint, tcfg.output_dir)
    tokenizer = load_tokenizer(recipe.tokenizer.name_or_path)
    # Uptraining: the source converted once here (a resumed run converts it again, then loads the checkpoint over it).
    converted = convert_masked_lm(recipe.model) if recipe.model.convert_from_roberta is not None else None
    if converted is not None:
        model_config = converted.config
    elif recipe.model.pretrained:
        from transformers import AutoConfig

        model_config = AutoConfig.from_pretrained(recipe.model.pretrained)
    else:
        model_config = build_model_config(recipe.model, tokenizer)
    check_block_size(recipe, model_config)
    pad_as_the_model_takes(tokenizer, model_config)  # and final/'s tokenizer says so
    if recipe.model.pretrained and converted is None:
        check_model_files(recipe.model.pretrained, "model.pretrained")
    check_tokenizer_fits_model(
        tokenizer, model_config, recipe.tokenizer.name_or_path, recipe.model.pretrained or "built"
    )
    # The recipe a resumed checkpoint was made with, then the output directory (writable, this run's, locked). The
    # Accelerator is built after these checks; accelerate's process state says how many processes there are and
    # which is main (the Accelerator takes the same state over).
    processes = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # as the Accelerator will ask for it
    fingerprint = recipe_fingerprint(recipe, model_config, tokenizer, processes.num_processes)
    if resume_dir:
        check_resume_compatible(resume_dir, fingerprint, tcfg.max_steps, latest=tcfg.resume_from_checkpoint == "latest")
    lock = claim_output_dir(
        tcfg.output_dir,
        resuming=resume_dir is not None,
        overwrite=tcfg.overwrite_output_dir,
        is_main_process=processes.is_main_process,
        inputs={
            "model.pretrained": recipe.model.pretrained,
            "tokenizer.name_or_path": recipe.tokenizer.name_or_path,
            "data.train_files": dcfg.train_files,
            "data.validation_files": dcfg.validation_files,
        },
    )

    accelerator = build_accelerator(
        tcfg,
        # The loop, not the data loader, says when an update ends (a streamed epoch has no known length).
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=tcfg.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=tcfg.seed),
        **compile_plugin(tcfg),
    )
    compiling.check_compile_device(
        tcfg.torch_compile, tcfg.torch_compile_mode, tcfg.torch_compile_backend, accelerator.device
    )
    if tcfg.torch_compile is not None:
        whole_model = tcfg.torch_compile == "model"
        compiling.check_accelerator_compiles(
            accelerator, (tcfg.torch_compile_backend or "inductor") if whole_model else "no", tcfg.torch_compile_mode
        )
    if compiles_whole_model(accelerator):  # by the recipe, or by the Accelerate config when the recipe leaves it
        compiling.allow_dynamic_output_shapes()
    set_seed(tcfg.seed)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    warn_if_mixed_precision_ignored(accelerator)

    data = prepare_pretraining_data(dcfg, tokenizer, tcfg.seed, accelerator)
    collator = build_mlm_collator(tokenizer, dcfg, tcfg.seed, accelerator.process_index)
    eval_collator = build_mlm_collator(tokenizer, dcfg, tcfg.seed + 1, accelerator.process_index)

    log_probs = training_unigram_log_probs(data["train"], tokenizer)

    set_seed(tcfg.seed)  # the model init does not depend on how much RNG the data preparation used
    model = converted if converted is not None else build_mlm_model(recipe.model, tokenizer)
    if recipe.model.output_bias_init == "unigram":  # a fresh model (validated), non-streamed data (validated)
        init_output_bias(model, log_probs)
    if tcfg.torch_compile == "layers":  # in place, before DDP wraps the model (the whole model: at prepare)
        compiling.compile_layers(model, tcfg.torch_compile_mode, tcfg.torch_compile_backend)
    optimizer = build_optimizer(model, tcfg)
    scheduler = get_scheduler(
        tcfg.lr_scheduler_type, optimizer, num_warmup_steps=tcfg.warmup_steps, num_training_steps=tcfg.max_steps
    )

    # Each process evaluates its own shard of the validation blocks (no block twice, none padded in), and the
    # losses and token counts are summed over processes.
    eval_shard = split_dataset_by_node(
        data["validation"], rank=accelerator.process_index, world_size=accelerator.num_processes
    )
    eval_dl = DataLoader(eval_shard, batch_size=tcfg.per_device_eval_batch_size, collate_fn=eval_collator)
    if dcfg.streaming:
        train_ds = shard_stream(
            data["train"], accelerator.process_index, accelerator.num_processes, tcfg.seed, dcfg.shuffle_buffer_size
        )
        train_dl = DataLoader(train_ds, batch_size=tcfg.per_device_train_batch_size, collate_fn=collator)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        train_dl = DataLoader(
            data["train"],
            batch_size=tcfg.per_device_train_batch_size,
            shuffle=True,
            drop_last=True,
            collate_fn=collator,
        )
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        if len(train_dl) == 0:
            raise ConfigError(
                f"The training set has {len(data['train'])} blocks, fewer than one global batch "
                f"({tcfg.per_device_train_batch_size} x {accelerator.num_processes} processes)."
            )
    # The scheduler is stepped once per optimizer update by this loop (not prepared: Accelerate would step it once
    # per process), and registered so that save_state / load_state carry it.
    accelerator.register_for_checkpointing(scheduler)
    init_trackers(accelerator, recipe, "pretrain")

    run = PretrainingRun(
        recipe,
        accelerator,
        tokenizer,
        model,
        optimizer,
        scheduler,
        collator,
        train_dl,
        eval_dl,
        summary={
            "train_losses": {},
            "evals": {},
            "output_dir": tcfg.output_dir,
            "resumed_from": resume_dir,
            "num_processes": accelerator.num_processes,
        },
        fingerprint=fingerprint,
        lock=lock,
        guard=recipe_guard(
            tcfg,
            resume_hint(
                "--resume_from_checkpoint",
                "start over after changing one of these (training.checkpointing_steps keeps one)",
            ),
            last_good_checkpoint=resume_dir,
        ),
        unigram=unigram_baseline(log_probs, tokenizer.mask_token_id, eval_dl, accelerator),
    )
    if run.unigram:
        run.summary["unigram"] = run.unigram
        accelerator.print(
            f"unigram baseline (the training set's token frequencies on the same masked validation tokens): "
            f"perplexity {run.unigram['unigram_perplexity']:.2f} on all of them, "
            f"{run.unigram['unigram_mask_input_perplexity']:.2f} on those whose input is <mask>"
        )
    if resume_dir:
        accelerator.print(f"Resuming from {resume_dir}")
        accelerator.load_state(resume_dir)
        run.completed_steps = read_checkpoint_state(resume_dir)["completed_steps"]
    run.update_log = UpdateLog(tcfg.output_dir, enabled=accelerator.is_main_process)
    run.update_log.write(event="start", step=run.completed_steps, resumed_from=resume_dir, pid=os.getpid())
    micro_done = run.completed_steps * tcfg.gradient_accumulation_steps
    if dcfg.streaming:
        run.epoch, run.skip = 0, micro_done  # streamed data is replayed up to the resume point
    else:
        run.epoch, run.skip = divmod(micro_done, len(train_dl))
    return run


def epoch_batches(run: PretrainingRun):
    """The micro-batches of ``run.epoch``, after the ones a resumed run already consumed."""
    run.collator.set_epoch(run.epoch)
    if run.streaming:
        run.train_dl.dataset.set_epoch(run.epoch)  # the stream's shuffle buffer
        iterator = iter(run.train_dl)
        for _ in range(run.skip):
            next(iterator)
    else:
        run.train_dl.set_epoch(run.epoch)  # the seedable sampler's order
        iterator = iter(run.accelerator.skip_first_batches(run.train_dl, run.skip) if run.skip else run.train_dl)
    run.skip = 0
    return iterator


def train_micro_batch(run: PretrainingRun, batch) -> torch.Tensor:
    """Forward and backward of one micro-batch (and the update when it ends one); returns its share of the update's
    loss (masked-token loss over the global batch's masked tokens, summed over processes)."""
    accelerator, tcfg = run.accelerator, run.recipe.training
    # Dropout randomness as a function of (seed, update, micro-batch, process): a resumed run draws the same
    # dropout masks whatever else consumed the global RNG (data loader iterators do) before it resumed.
    torch.manual_seed(_example_seed(tcfg.seed, run.completed_steps, run.micro, accelerator.process_index))
    run.micro = (run.micro + 1) % tcfg.gradient_accumulation_steps
    with accelerator.accumulate(run.model):
        global_count = accelerator.reduce(batch["labels"].ne(-100).sum(), reduction="sum").clamp(min=1)
        loss = masked_lm_loss(run.model, batch, global_count)  # this process' token losses / global count
        # DDP averages gradients over processes: scale so the update follows sum / global masked tokens.
        accelerator.backward(loss * accelerator.num_processes)
        finite = optimizer_step(accelerator, run.model, run.optimizer, run.scheduler, tcfg.max_grad_norm)
        if accelerator.sync_gradients:
            run.last_update_finite = finite
    return accelerator.reduce(loss.detach().double(), reduction="sum") / tcfg.gradient_accumulation_steps


def evaluate_and_log(run: PretrainingRun, final: bool = False) -> dict[str, float]:
    metrics = evaluate_mlm(run.model, run.eval_dl, run.accelerator, mask_token_id=run.tokenizer.mask_token_id)
    if run.unigram:
        metrics.update(run.unigram)
        # Below 1: at <mask> inputs the model predicts the tokens better than their frequencies alone do, i.e. it
        # reads the context (the usual MLM perplexity also counts the 10% of scored tokens left unchanged, which a
        # model can copy; see labels_at_mask_inputs).
        metrics["perplexity_over_unigram"] = (
            metrics["mask_input_perplexity"] / run.unigram["unigram_mask_input_perplexity"]
        )
    step = run.completed_steps
    run.summary["evals"][step] = metrics
    run.update_log.write(event="eval", step=step, **metrics)
    what = f"final (step {step}): validation MLM loss" if final else f"step {step}: eval_loss"
    versus = ""
    if run.unigram:
        versus = (
            f"; at <mask> inputs {metrics['mask_input_perplexity']:.2f}, "
            f"{metrics['perplexity_over_unigram']:.3f} x unigram"
        )
    run.accelerator.print(f"{what} {metrics['eval_loss']:.4f} perplexity {metrics['perplexity']:.2f}{versus}")
    if run.recipe.training.report_to and (final or step > 0):
        run.accelerator.log({"eval/loss": metrics["eval_loss"], "eval/perplexity": metrics["perplexity"]}, step=step)
    return metrics


def save_checkpoint(run: PretrainingRun) -> str:
    """``<output_dir>/checkpoints/step_N``, written atomically with the recipe fingerprint; older ones pruned."""
    tcfg = run.recipe.training
    check_weights_finite(run.model, f"checkpoint step_{run.completed_steps}", run.guard)
    path = checkpointing.save_checkpoint(
        run.accelerator,
        tcfg.output_dir,
        run.completed_steps,
        {
            checkpointing.STATE_FILE: {"completed_steps": run.completed_steps, "epoch": run.epoch},
            checkpointing.RECIPE_FILE: run.fingerprint,
        },
        tcfg.checkpoints_total_limit,
    )
    run.update_log.write(event="checkpoint", step=run.completed_steps, path=path)
    run.guard.last_good_checkpoint = path
    return path


def save_final_model(run: PretrainingRun, metrics: dict[str, float]) -> str:
    """The model and tokenizer in ``<output_dir>/final`` (loadable with the Auto classes), with its evaluation.

    Written as ``.tmp-final`` and renamed into place once whole: a kill while saving leaves no torn ``final/``.
    """
    accelerator = run.accelerator
    final_dir = os.path.join(run.recipe.training.output_dir, "final")
    check_weights_finite(run.model, final_dir, run.guard)
    final_tmp = temporary_name(final_dir)
    accelerator.wait_for_everyone()
    accelerator.unwrap_model(run.model).save_pretrained(
        final_tmp, is_main_process=accelerator.is_main_process, save_function=accelerator.save
    )
    if accelerator.is_main_process:
        # Truncation with the saved tokenizer stops at the model's n, not at the length the tokenizer was trained for.
        run.tokenizer.model_max_length = max_input_length(accelerator.unwrap_model(run.model).config)
        run.tokenizer.save_pretrained(final_tmp)
        write_json_atomic(os.path.join(final_tmp, "eval_results.json"), {"step": run.completed_steps, **metrics})
        publish_dir(final_tmp, final_dir)
    accelerator.wait_for_everyone()
    return final_dir


def close_run(run: PretrainingRun) -> None:
    """End the trackers and the process group, close the update log and release the output directory's lock."""
    if run.update_log is not None:
        run.update_log.close()
    run.model = run.accelerator.unwrap_model(run.model)  # the DDP wrapper must go before the group (loop.finish)
    finish(run.accelerator)
    if run.lock is not None:
        run.lock.release()


def run_pretraining(recipe: PretrainRecipe, show_progress: bool = True) -> dict:
    """Pretrain as the recipe says; returns a summary (losses per step, evaluations, paths).

    Raises `TrainingDiverged` when the guard stops the run (nothing saved from then), and `Preempted` after the
    checkpoint a SIGTERM / SIGINT asked for (the lock released): the command exits with the resumable status.
    """
    stop = StopSignal().install()  # from the start: a signal during setup stops the run after its first update
    try:
        run = setup_pretraining(recipe)
        try:
            return _train(run, stop, show_progress)
        except TrainingDiverged as err:
            run.update_log.write(event="diverged", step=run.completed_steps, error=str(err))
            close_run(run)
            raise
    finally:
        stop.restore()


def _train(run: PretrainingRun, stop: StopSignal, show_progress: bool) -> dict:
    from tqdm.auto import tqdm

    recipe = run.recipe
    tcfg, accelerator, summary = recipe.training, run.accelerator, run.summary
    tokens_per_update = (
        tcfg.per_device_train_batch_size
        * tcfg.gradient_accumulation_steps
        * accelerator.num_processes
        * recipe.data.block_size
    )
    stop_at = min(tcfg.max_steps, tcfg.stop_after_steps) if tcfg.stop_after_steps else tcfg.max_steps
    progress = tqdm(
        total=tcfg.max_steps,
        initial=run.completed_steps,
        desc="pretrain",
        dynamic_ncols=True,
        disable=not (show_progress and accelerator.is_local_main_process),
    )
    run.model.train()
    update_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    t_start = t_last = time.perf_counter()
    steps_since_log = 0

    def out_of_time() -> bool:
        # All processes must agree: stop everywhere as soon as one process is out of time.
        flag = torch.tensor(
            float(time.perf_counter() - t_start > 60 * tcfg.max_train_minutes), device=accelerator.device
        )
        return (
            bool(accelerator.reduce(flag, reduction="sum").item() > 0) if accelerator.num_processes > 1 else bool(flag)
        )

    if tcfg.eval_steps and run.completed_steps == 0:  # the starting point of the validation curve
        evaluate_and_log(run)

    loop_start, paused_seconds = time.perf_counter(), 0.0  # paused: evaluation and checkpointing
    # Compiled: graphs compiled during updates (not evaluations), and this process' first update's time (the compile
    # time with it); a later update that compiles is a recompilation (a new input length, or a guard that failed).
    compiled = tcfg.torch_compile == "layers" or compiles_whole_model(accelerator)
    update_graphs = 0
    while run.completed_steps < stop_at:
        got_batch = False
        for batch in epoch_batches(run):
            got_batch = True
            graphs = compiling.compiled_graphs()
            update_loss += train_micro_batch(run, batch)
            update_graphs += compiling.compiled_graphs() - graphs
            if not accelerator.sync_gradients:
                continue
            run.completed_steps += 1
            step = run.completed_steps
            if compiled and "compile" not in summary:
                first_seconds = time.perf_counter() - loop_start
                summary["compile"] = {"first_update_seconds": first_seconds, "first_update_graphs": update_graphs}
                run.update_log.write(event="compiled", step=step, seconds=first_seconds, graphs=update_graphs)
                accelerator.print(
                    f"compiled: the first update took {first_seconds:.1f} s ({update_graphs} graph(s) compiled)"
                )
                update_graphs = 0
            steps_since_log += 1
            summary["train_losses"][step] = step_loss = update_loss.item()
            update_loss.zero_()
            lr = run.scheduler.get_last_lr()[0]
            run.update_log.write(
                step=step, loss=step_loss, lr=lr, **({} if run.last_update_finite else {"skipped": True})
            )
            run.guard.after_update(step, step_loss, run.last_update_finite)
            progress.update(1)
            if step % tcfg.logging_steps == 0 or step == stop_at:
                now = time.perf_counter()
                tok_s = tokens_per_update * steps_since_log / max(now - t_last, 1e-9)
                t_last, steps_since_log = now, 0
                progress.set_postfix(loss=f"{step_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
                if tcfg.report_to:
                    accelerator.log({"train/loss": step_loss, "train/lr": lr, "train/tokens_per_s": tok_s}, step=step)
            pause_start = time.perf_counter()
            if tcfg.eval_steps and step % tcfg.eval_steps == 0 and step < tcfg.max_steps:
                evaluate_and_log(run)
            saved = bool(tcfg.checkpointing_steps and step % tcfg.checkpointing_steps == 0)
            if saved and run.guard.streak:  # the run may be diverging: keep the last good checkpoint the newest
                logger.warning(
                    "No checkpoint at step %d: its update was non-finite (the last good one, %s, stays the newest).",
                    step,
                    run.guard.last_good_checkpoint,
                )
                saved = False
            if saved:
                save_checkpoint(run)
            if stop.requested(accelerator):  # agreed by every process: all stop after this update
                path = run.guard.last_good_checkpoint if saved else save_checkpoint(run)
                run.update_log.write(event="stopped", step=step, signal=stop.name, checkpoint=path)
                progress.close()
                close_run(run)
                raise Preempted(
                    f"{stop.name} received: stopped after update {step} of {tcfg.max_steps} with checkpoint {path}. "
                    f"Resume with --resume_from_checkpoint latest."
                )
            paused_seconds += time.perf_counter() - pause_start
            if step >= stop_at:
                break
            if tcfg.max_train_minutes is not None and out_of_time():
                accelerator.print(
                    f"time budget of {tcfg.max_train_minutes} min reached after {step} "
                    f"updates (of {tcfg.max_steps}); evaluating and saving now"
                )
                summary["stopped_by_time_budget"] = True
                stop_at = step
                break
        if not got_batch:
            raise ConfigError("The training data gave no batch (empty stream or corpus).")
        if run.completed_steps < stop_at:
            run.epoch += 1
    progress.close()
    # Time spent on updates alone (seconds per update = train_seconds / updates run in this process).
    summary["train_seconds"] = time.perf_counter() - loop_start - paused_seconds
    if "compile" in summary:
        summary["compile"]["later_update_graphs"] = update_graphs
        if update_graphs:
            accelerator.print(
                f"compiled {update_graphs} more graph(s) after the first update (each new input length compiles "
                "once; TORCH_LOGS=recompiles says why)"
            )

    if run.completed_steps >= tcfg.max_steps or summary.get("stopped_by_time_budget"):
        summary["final_eval"] = metrics = evaluate_and_log(run, final=True)
        # A run that ended diverging (inside a streak of skipped updates, or evaluating to NaN) publishes nothing.
        what = os.path.join(tcfg.output_dir, "final") if tcfg.save_final_model else "the summary"
        run.guard.check_finished(run.completed_steps, what, {"validation MLM loss": metrics["eval_loss"]})
        if tcfg.save_final_model:
            summary["final_dir"] = save_final_model(run, metrics)
    summary["completed_steps"] = run.completed_steps
    if accelerator.is_main_process:
        write_json_atomic(summary_path(tcfg.output_dir, run.completed_steps), summary)
    close_run(run)
    return summary
