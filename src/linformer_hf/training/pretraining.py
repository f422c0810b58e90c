"""Masked-LM pretraining on transformers' `Trainer`: ``python -m linformer_hf.training.pretrain`` (and
``scripts/pretrain.py``).

`build_trainer` checks the inputs, claims the output directory and builds the data, the model, its optimizer and
schedule and a `MaskedLMTrainer`; `run_pretraining` trains it, then evaluates and writes ``final/`` and the summary.
The Trainer does what it does for any model: the data order (its seedable sampler, seeded by ``training.seed``),
gradient accumulation and clipping, mixed precision, distribution, TensorBoard, and the ``checkpoint-N`` it saves and
resumes from. `MaskedLMTrainer` adds what pretraining needs:

- masks seeded per (seed, epoch, block index) (`data.SeededMaskingCollator`, its epoch the Trainer's), and dropout
  seeded per (seed, update, micro-batch, process);
- the loss of the LM head run at the masked positions only (`masked_lm_loss`), normalised as the Trainer normalises
  under accumulation: the update's summed token losses over its masked tokens, all micro-batches and processes
  (docs/training.md says why);
- its evaluation (`evaluate_mlm`: each validation block once over the processes) beside the unigram baseline;
- the run's records: ``train_log.jsonl`` (a line per update, evaluation, checkpoint, start and stop), the recipe in
  every checkpoint and its completion marker (training/checkpointing.py), no checkpoint inside a streak of skipped
  updates, the time budget, the summary.

Exactness guarantees (tested in tests/test_training_pretrain.py): a resumed run makes the uninterrupted run's updates
(the checkpoint holds the model, optimizer, schedule and the Trainer's state; the data order, masks and dropout are
functions of the seed and of the position in the run); and P processes with a per-device batch of B / P, or one
process with B / g and g accumulation steps, make the updates of one process with a batch of B.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import time

import numpy as np
import torch
import torch.nn.functional as F
from datasets import IterableDataset
from datasets.distributed import split_dataset_by_node
from torch.utils.data import DataLoader
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

from ..loading import pad_as_the_model_takes
from ..models import max_input_length
from ..outputs import write_json_atomic
from . import compiling
from .checkpointing import (
    PRETRAINING,
    RECIPE_FILE,
    STATE_FILE,
    UPDATE_LOG,
    RunOptions,
    UpdateLog,
    check_not_running,
    check_output_dir_unused,
    check_resume_compatible,
    claim_output_dir,
    history_before,
    list_checkpoints,
    mark_checkpoint_complete,
    path_records,
    publish_dir,
    read_checkpoint_state,
    recipe_fingerprint,
    records_conversion,
    resolve_checkpoint,
    set_aside_later_work,
    temporary_name,
)
from .config import ConfigError, PretrainRecipe
from .data import _example_seed, build_mlm_collator, no_training_batch_error, prepare_pretraining_data, shard_stream
from .errors import Preempted, TrainingDiverged
from .guards import (
    StopSignal,
    check_weights_finite,
    divergence_callback,
    resume_hint,
    stop_after_steps_callback,
    stop_signal_callback,
)
from .loop import finish_trainer, optimizer_settings_callback, recipe_guard
from .metrics import token_counts, unigram_log_probs, unigram_nll
from .model_setup import (
    build_mlm_model,
    build_model_config,
    convert_masked_lm,
    init_output_bias,
    load_uptrained_checkpoint,
)
from .tokenizer import load_tokenizer
from .validation import check_model_files, check_tokenizer_fits_model, runs_on_cpu, warn_if_mixed_precision_ignored

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# Summaries
# ----------------------------------------------------------------------------------------------------------------


def summary_steps(output_dir: str) -> list[int]:
    """The updates at which the runs in ``output_dir`` ended: the N of each summary_step<N>.json."""
    names = os.listdir(output_dir) if os.path.isdir(output_dir) else []
    return [int(m.group(1)) for m in (re.fullmatch(r"summary_step(\d+)\.json", name) for name in names) if m]


def later_outputs(output_dir: str, step: int) -> list[str]:
    """The names of what a run in ``output_dir`` wrote when it ended after update ``step``: its summaries, and then
    its ``final/``."""
    later = [os.path.basename(summary_path(output_dir, n)) for n in summary_steps(output_dir) if n > step]
    return later + ["final"] if later else []


def summary_path(output_dir: str, completed_steps: int) -> str:
    """Where a run writes its summary: one file per run, named by the updates completed when it ended."""
    return os.path.join(output_dir, f"summary_step{completed_steps}.json")


def finished(output_dir: str, max_steps: int) -> bool:
    """Whether the run in ``output_dir`` ended at ``max_steps`` with its ``final/`` and summary written: the same
    command run again with ``--resume_from_checkpoint latest`` has nothing to do (it evaluated and wrote both again)."""
    results = os.path.join(output_dir, "final", "eval_results.json")
    if not (os.path.isfile(summary_path(output_dir, max_steps)) and os.path.isfile(results)):
        return False
    with open(results, encoding="utf-8") as fh:
        return json.load(fh).get("step") == max_steps


def read_final_summary(output_dir: str) -> dict:
    """The summary of the run that went furthest in ``output_dir`` (a time budget may end it before max_steps)."""
    found = summary_steps(output_dir)
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
    ``mask_token_id``, also the loss at the scored tokens whose input is ``<mask>`` (`labels_at_mask_inputs`), from
    the same forward."""
    model.eval()
    # [loss, tokens] over all scored tokens, then over those whose input is <mask>
    totals = torch.zeros(4, dtype=torch.float64, device=accelerator.device)
    for batch in dataloader:
        batch = {key: value.to(accelerator.device) for key, value in batch.items()}
        # One forward a batch: the summed loss over the scored tokens, and their logits, in the order of the scored
        # positions, from which the loss at <mask> inputs is the same cross-entropy over a subset of rows.
        output = model(**batch, logits_for_labels_only=True, num_items_in_batch=1)
        scored = batch["labels"].ne(-100)  # (batch, L)
        totals[0] += output.loss.double()
        totals[1] += scored.sum()
        if mask_token_id is not None:
            at_mask = batch["input_ids"][scored].eq(mask_token_id)  # (num_scored,), the logits' rows
            logits, labels = output.logits[at_mask].float(), batch["labels"][scored][at_mask]  # (num_at_mask, vocab)
            totals[2] += F.cross_entropy(logits, labels, reduction="sum").double()
            totals[3] += at_mask.sum()
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
# The inputs' length and compiling
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


# ----------------------------------------------------------------------------------------------------------------
# Resuming: the Trainer's checkpoints, not those of the loop pretraining ran on before
# ----------------------------------------------------------------------------------------------------------------

# Until pretraining ran on the Trainer, its own loop wrote <output_dir>/checkpoints/step_N (accelerate's save_state).
LOOP_CHECKPOINTS = RunOptions(checkpoint_folder="checkpoints", checkpoint_prefix="step_")
LOOP_COMMIT = "bccc055"  # a commit of this repository that pretrains on that loop: the last before the Trainer


def refuse_loop_checkpoint(spec: str | None, output_dir: str) -> None:
    """Refuse to resume (``spec``: a checkpoint dir, or ``latest`` in ``output_dir``) a checkpoint of the loop
    pretraining ran on before the Trainer, which the Trainer cannot read, saying how to finish that run or start
    afresh, rather than letting a resume fail deep inside the Trainer or start over."""
    if spec == "latest":
        found = list_checkpoints(output_dir, LOOP_CHECKPOINTS)
        if list_checkpoints(output_dir) or not found:
            return
        checkpoint = found[-1]
    elif spec and os.path.isfile(os.path.join(spec, "random_states_0.pkl")):  # accelerate's save_state, not Trainer's
        checkpoint = spec
    else:
        return
    raise ConfigError(
        f"{checkpoint} is a checkpoint of the hand-written loop pretraining ran on before it moved to transformers' "
        f"Trainer, which cannot resume it. Finish that run with the code it started with (this repository at commit "
        f"{LOOP_COMMIT} or earlier), or start afresh: --training.overwrite_output_dir true (deletes its checkpoints, "
        f"final model and logs) or another training.output_dir."
    )


# ----------------------------------------------------------------------------------------------------------------
# The Trainer
# ----------------------------------------------------------------------------------------------------------------


def training_arguments(recipe: PretrainRecipe, resuming: bool, show_progress: bool = True) -> TrainingArguments:
    """The recipe's ``training`` section as `TrainingArguments` (the optimizer's fields carry the same names)."""

    tcfg = recipe.training
    evaluates, saves = tcfg.eval_steps is not None, tcfg.checkpointing_steps is not None
    args = TrainingArguments(
        output_dir=tcfg.output_dir,  # checkpoint-N, and TensorBoard's runs/
        seed=tcfg.seed,
        data_seed=tcfg.seed,  # the seedable sampler: the blocks' order in each epoch
        per_device_train_batch_size=tcfg.per_device_train_batch_size,
        per_device_eval_batch_size=tcfg.per_device_eval_batch_size,
        gradient_accumulation_steps=tcfg.gradient_accumulation_steps,
        max_steps=tcfg.max_steps,
        # null: not fused, the AdamW of fairseq's recipe and of this command before it ran on Trainer
        optim=tcfg.optim or "adamw_torch",
        learning_rate=tcfg.learning_rate,
        adam_beta1=tcfg.adam_beta1,
        adam_beta2=tcfg.adam_beta2,
        adam_epsilon=tcfg.adam_epsilon,
        weight_decay=tcfg.weight_decay,  # not on biases and LayerNorm gains (the Trainer's rule)
        lr_scheduler_type=tcfg.lr_scheduler_type,
        warmup_steps=tcfg.warmup_steps,
        max_grad_norm=tcfg.max_grad_norm or 0.0,  # 0: no clipping
        average_tokens_across_devices=True,  # num_items_in_batch: the update's masked tokens over all processes
        eval_strategy="steps" if evaluates else "no",
        eval_on_start=evaluates and not resuming,  # the start of the validation curve
        save_strategy="steps" if saves else "no",
        # No save_total_limit: the Trainer's rotation deletes the older checkpoints before the new one is marked
        # complete; they are pruned after the marker (`MaskedLMTrainer.record_checkpoint`).
        logging_steps=tcfg.logging_steps,
        report_to=tcfg.report_to or "none",
        disable_tqdm=not show_progress,
        remove_unused_columns=False,  # the collator reads each block's index
        dataloader_drop_last=True,
        fp16=tcfg.mixed_precision == "fp16",
        bf16=tcfg.mixed_precision == "bf16",
        use_cpu=runs_on_cpu(),
        **({"eval_steps": tcfg.eval_steps} if evaluates else {}),
        **({"save_steps": tcfg.checkpointing_steps} if saves else {}),
    )
    if tcfg.mixed_precision == "no":  # else the Accelerate config's precision (null: it decides, as for compiling)
        args.mixed_precision = "no"
    return args


class MaskedLMTrainer(Trainer):
    """`Trainer` for masked-LM pretraining: seeded masking and dropout, the LM head at the masked positions only, the
    validation loss beside the unigram baseline, and the run's records. Built by `build_trainer`; ``close`` ends the
    run (the process group, the update log, the output directory's lock)."""

    def __init__(
        self,
        *args,
        recipe: PretrainRecipe,
        eval_collator,
        guard,
        stopping,
        fingerprint: dict,
        update_log: UpdateLog,
        summary: dict,
        lock=None,
        resume_dir: str | None = None,
        **kwargs,
    ):
        self.recipe = recipe  # read while the Trainer builds its Accelerator (`_build_accelerator_args`)
        self.events = RunEvents(self)
        tcfg = recipe.training
        callbacks = [self.events, stopping]  # before the guard's, which checks the weights of the saves they ask for
        if tcfg.stop_after_steps:
            callbacks.append(stop_after_steps_callback(tcfg.stop_after_steps))
        callbacks.append(divergence_callback(guard, update_loss=lambda: self.update_loss))
        callbacks.append(optimizer_settings_callback())
        super().__init__(*args, callbacks=callbacks, **kwargs)
        self.model_accepts_loss_kwargs = True  # the models' forward takes num_items_in_batch (model_setup)
        self.eval_collator, self.guard, self.stopping, self.fingerprint = eval_collator, guard, stopping, fingerprint
        self.update_log, self.summary, self.lock, self.resume_dir = update_log, summary, lock, resume_dir
        stopping.accelerator = self.accelerator  # its processes agree on the stop
        self.unigram: dict | None = None  # `unigram_baseline` of the validation masked tokens (None: streamed data)
        self.update_loss = math.nan  # the last update's loss
        self.train_seconds = 0.0  # in updates, evaluations and checkpoints left out
        self._update_loss_sum = torch.zeros((), dtype=torch.float64)  # this process's share of the update's loss
        self._micro_batch = 0  # of the update under way
        self._epoch: int | None = None
        self.compile_record = None
        if tcfg.torch_compile == "layers" or compiles_whole_model(self.accelerator):
            # Before the run's events, which log the first update's record.
            self.compile_record = compiling.compile_record_callback()
            self.callback_handler.callbacks.insert(
                self.callback_handler.callbacks.index(self.events), self.compile_record
            )

    def _build_accelerator_args(self, **kwargs):
        # training.torch_compile no or layers must also turn off a compiling Accelerate config, which the Trainer's
        # own torch_compile cannot say.
        return {**super()._build_accelerator_args(**kwargs), **compile_plugin(self.recipe.training)}

    # -- data ---------------------------------------------------------------------------------------------------

    def get_train_dataloader(self) -> DataLoader:
        if not isinstance(self.train_dataset, IterableDataset):
            return super().get_train_dataloader()
        # A stream: each process reads its own shard, shuffled with a buffer (not one reader dispatching batches).
        dcfg = self.recipe.data
        stream = shard_stream(
            self.train_dataset, self.args.process_index, self.args.world_size, self.args.seed, dcfg.shuffle_buffer_size
        )
        return DataLoader(stream, batch_size=self.args.per_device_train_batch_size, collate_fn=self.data_collator)

    def get_eval_dataloader(self, eval_dataset=None) -> DataLoader:
        # Each process scores its own shard of the validation blocks: each block once (none repeated to even the
        # shards out), the sums added over processes by evaluate_mlm.
        shard = split_dataset_by_node(self.eval_dataset, rank=self.args.process_index, world_size=self.args.world_size)
        # Streamed blocks carry no index, so their masks are drawn by batch count: counted from 0 at each evaluation,
        # every evaluation masks the same tokens (before, the count ran on and each evaluation scored others).
        self.eval_collator.batches_seen = 0
        return DataLoader(shard, batch_size=self.args.per_device_eval_batch_size, collate_fn=self.eval_collator)

    def start_epoch(self, state, train_dataloader, model) -> None:
        """The masks' epoch is the Trainer's (the one a run starts or resumes in, then one more per epoch)."""
        self._epoch = math.floor(state.epoch + 1e-9) if self._epoch is None else self._epoch + 1
        self.data_collator.set_epoch(self._epoch)
        if isinstance(self.train_dataset, IterableDataset):
            train_dataloader.dataset.set_epoch(self._epoch)  # the stream's shuffle buffer
            # A stream's pass may end inside an update, which the Trainer would carry into the next pass: dropped.
            model.zero_grad(set_to_none=True)
            self._update_loss_sum.zero_()
            self._micro_batch = 0

    # -- one update -----------------------------------------------------------------------------------------------

    def training_step(self, model, inputs, num_items_in_batch=None):
        # Dropout as a function of (seed, update, micro-batch, process): a resumed run draws the same masks, whatever
        # consumed the global RNG before it (data loader iterators do).
        seed = _example_seed(self.args.seed, self.state.global_step, self._micro_batch, self.args.process_index)
        torch.manual_seed(seed)
        loss = super().training_step(model, inputs, num_items_in_batch)
        # compute_loss scaled this process's share of the update's loss by the process count (DDP averages gradients)
        self._update_loss_sum = self._update_loss_sum.to(loss.device) + loss.double() / self.accelerator.num_processes
        if self.accelerator.sync_gradients:  # the update's last micro-batch
            self.update_loss = self.accelerator.reduce(self._update_loss_sum, reduction="sum").item()
            self._update_loss_sum.zero_()
            self._micro_batch = 0
        else:
            self._micro_batch += 1
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = masked_lm_loss(model, inputs, num_items_in_batch)
        if num_items_in_batch is not None:  # counted over all processes, whose gradients DDP averages: as the Trainer
            loss = loss * self.accelerator.num_processes
        return (loss, None) if return_outputs else loss

    def start_clock(self) -> None:
        self._started = self._resumed = self._last_update_end = time.perf_counter()

    def record_update(self, control) -> None:
        """After update ``state.global_step``: its line in the update log, no checkpoint while it is non-finite, the
        time budget. Its loss goes to the divergence guard next (`divergence_callback`)."""
        tcfg, step = self.recipe.training, self.state.global_step
        now = time.perf_counter()
        self.train_seconds += now - max(self._last_update_end, self._resumed)
        self._last_update_end = now
        skipped = self.accelerator.optimizer_step_was_skipped  # non-finite gradients (divergence_callback) or fp16's
        self.summary["train_losses"][step] = self.update_loss
        self.update_log.write(
            step=step,
            loss=self.update_loss,
            lr=self.lr_scheduler.get_last_lr()[0],
            **({"skipped": True} if skipped else {}),
        )
        record = self.compile_record.record if self.compile_record else {}
        if record and "compile" not in self.summary:  # the first update of a compiled run
            self.summary["compile"] = record
            seconds, graphs = record["first_update_seconds"], record["first_update_graphs"]
            self.update_log.write(event="compiled", step=step, seconds=seconds, graphs=graphs)
        if control.should_save and (skipped or not math.isfinite(self.update_loss)):
            # The run may be diverging: the last good checkpoint stays the newest (a stop still saves, after this).
            logger.warning(
                "No checkpoint at step %d: its update was non-finite (the last good one, %s, stays the newest).",
                step,
                self.guard.last_good_checkpoint,
            )
            control.should_save = False
        if tcfg.max_train_minutes is not None and step < min(tcfg.max_steps, tcfg.stop_after_steps or tcfg.max_steps):
            # Every process must agree: all stop as soon as one is out of time.
            late = float(now - self._started > 60 * tcfg.max_train_minutes)
            late = self.accelerator.reduce(torch.tensor(late, device=self.args.device), reduction="sum").item()
            if late:
                self.accelerator.print(
                    f"time budget of {tcfg.max_train_minutes} min reached after {step} updates (of {tcfg.max_steps}); "
                    "evaluating and saving now"
                )
                self.summary["stopped_by_time_budget"] = True
                control.should_training_stop = True
                # and a checkpoint to go on from with more time, as a stop signal leaves (none of a non-finite update)
                control.should_save = not skipped and math.isfinite(self.update_loss)

    def record_checkpoint(self) -> str:
        """After the Trainer saved ``checkpoint-N``: the recipe and the completion marker written into it, the older
        ones pruned (checkpointing.py), and the update log told."""
        step = self.state.global_step
        path = mark_checkpoint_complete(
            self.accelerator,
            self.args.output_dir,
            step,
            self.recipe.training.checkpoints_total_limit,
            records={RECIPE_FILE: self.fingerprint},
        )
        # train_seconds: what a resume from this checkpoint counts on from (`history_before`)
        self.update_log.write(event="checkpoint", step=step, path=path, train_seconds=round(self.train_seconds, 3))
        self.guard.last_good_checkpoint = path
        self._resumed = time.perf_counter()
        return path

    # -- evaluation -----------------------------------------------------------------------------------------------

    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval", final=False) -> dict:
        """The validation loss and perplexity (`evaluate_mlm`) beside the unigram baseline, recorded in the summary
        and the update log. ``final``: the run's last evaluation (also at ``max_steps``)."""
        metrics = evaluate_mlm(
            self.model_wrapped, self.get_eval_dataloader(), self.accelerator, self.processing_class.mask_token_id
        )
        if self.unigram:
            metrics.update(self.unigram)
            # Below 1: at <mask> inputs the model predicts the tokens better than their frequencies alone do, i.e. it
            # reads the context (the usual MLM perplexity also counts the 10% of scored tokens left unchanged, which a
            # model can copy; see labels_at_mask_inputs).
            metrics["perplexity_over_unigram"] = (
                metrics["mask_input_perplexity"] / self.unigram["unigram_mask_input_perplexity"]
            )
        step = self.state.global_step
        self.summary["evals"][step] = metrics
        self.update_log.write(event="eval", step=step, **metrics)
        final = final or step >= self.args.max_steps
        what = f"final (step {step}): validation MLM loss" if final else f"step {step}: eval_loss"
        versus = ""
        if self.unigram:
            versus = (
                f"; at <mask> inputs {metrics['mask_input_perplexity']:.2f}, "
                f"{metrics['perplexity_over_unigram']:.3f} x unigram"
            )
        self.accelerator.print(f"{what} {metrics['eval_loss']:.4f} perplexity {metrics['perplexity']:.2f}{versus}")
        self.log({"eval_loss": metrics["eval_loss"], "eval_perplexity": metrics["perplexity"]})
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics=metrics)
        self._resumed = time.perf_counter()
        return metrics

    def close(self) -> None:
        """End the run: the update log closed, the process group torn down, the output directory's lock released."""
        self.update_log.close()
        finish_trainer(self)
        if self.lock is not None:
            self.lock.release()


class RunEvents(TrainerCallback):
    """The Trainer's events that `MaskedLMTrainer` keeps its records on (a Trainer has no hooks of its own there)."""

    def __init__(self, trainer: MaskedLMTrainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer.start_clock()

    def on_epoch_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        self.trainer.start_epoch(state, train_dataloader, model)

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.record_update(control)

    def on_save(self, args, state, control, **kwargs):
        self.trainer.record_checkpoint()


CONVERSION_REPORT = "conversion_report.json"  # an uptraining run's conversion, in its output_dir and final/


def resumed_uptraining_line(recipe: PretrainRecipe, checkpoint: str, output_dir: str) -> str:
    """What a resumed uptraining reads: its checkpoint's converted model, not model.pretrained (named, with the
    source the run's conversion report gives where that differs)."""
    path = os.path.join(output_dir, CONVERSION_REPORT)
    source = None
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as fh:
            source = json.load(fh).get("source")
    line = (
        f"Resuming the uptraining from {checkpoint}: its converted model and tokenizer are read from the checkpoint; "
        f"model.pretrained={recipe.model.pretrained} is not read again."
    )
    if source is None:
        return line + f" ({path} is missing: final/ will not name the source.)"
    if source != recipe.model.pretrained:
        return line + f" The run was converted from {source} ({CONVERSION_REPORT})."
    return line


def build_trainer(recipe: PretrainRecipe, stop: StopSignal | None = None, show_progress: bool = True):
    """Check the inputs and claim the output directory, then build the data, the model, its optimizer and schedule,
    and the `MaskedLMTrainer` that runs them (stopped after the update in which ``stop`` is set, with a checkpoint;
    the optimizer and schedule are the Trainer's, made when it starts).
    ``trainer.train(resume_from_checkpoint=trainer.resume_dir)`` runs it (`run_pretraining`). None when the run
    resumed by ``latest`` has finished (`finished`): nothing is claimed, built or written."""
    from accelerate import PartialState
    from transformers import set_seed

    tcfg, dcfg = recipe.training, recipe.data
    # Everything that can fail on bad input is checked before the output directory is claimed and the data and the
    # model are built.
    check_not_running(tcfg.output_dir)  # a live run's folder: said as such, not as an earlier run's or a torn one
    refuse_loop_checkpoint(tcfg.resume_from_checkpoint, tcfg.output_dir)
    resume_dir = resolve_checkpoint(tcfg.resume_from_checkpoint, tcfg.output_dir)
    # An earlier run's folder, before a source is downloaded or converted (claim_output_dir checks it again, locked)
    check_output_dir_unused(tcfg.output_dir, resume_dir is not None, tcfg.overwrite_output_dir)
    # Making the settings sets up accelerate's process state as the Trainer uses it: how many processes there are,
    # which is the main one, and the device, on which the compile options are checked before any work.
    args = training_arguments(recipe, resuming=resume_dir is not None, show_progress=show_progress)
    processes = PartialState()
    compiling.check_compile_device(tcfg.torch_compile, tcfg.torch_compile_mode, tcfg.torch_compile_backend, args.device)
    uptraining = recipe.model.convert_from_roberta is not None
    # Uptraining: the source converted once, when the run starts. A resumed run reads the converted model (and the
    # source's tokenizer, when the recipe names no other) from its checkpoint instead, so the source may be out of
    # reach by then; a checkpoint from before the conversion was recorded converts the source again.
    resumed_uptraining = uptraining and resume_dir is not None and records_conversion(resume_dir)
    of_model = recipe.tokenizer.name_or_path == recipe.model.pretrained
    tokenizer = load_tokenizer(
        resume_dir if resumed_uptraining and of_model else recipe.tokenizer.name_or_path,
        of_model=of_model and not resumed_uptraining,
    )
    if resumed_uptraining:
        converted, conversion = load_uptrained_checkpoint(recipe.model, resume_dir), None
    else:
        converted, conversion = convert_masked_lm(recipe.model) if uptraining else (None, None)
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
        tokenizer,
        model_config,
        recipe.tokenizer.name_or_path,
        recipe.model.pretrained or "built",
        "tokenizer.name_or_path",
    )
    # The recipe a resumed checkpoint was made with, then the output directory (writable, this run's, locked).
    fingerprint = recipe_fingerprint(recipe, model_config, tokenizer, processes.num_processes)
    if resume_dir:
        check_resume_compatible(resume_dir, fingerprint, tcfg.max_steps, latest=tcfg.resume_from_checkpoint == "latest")
        if tcfg.resume_from_checkpoint == "latest" and finished(tcfg.output_dir, tcfg.max_steps):
            return None
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
    if resume_dir:
        # Resuming an earlier checkpoint of this folder branches off what was written after it: set aside, so that
        # `latest` and the summaries follow the new path and nothing of the old one is written over (once every
        # process has found its checkpoint).
        processes.wait_for_everyone()
        if processes.is_main_process:
            later = lambda step: later_outputs(tcfg.output_dir, step)  # noqa: E731
            aside = set_aside_later_work(tcfg.output_dir, resume_dir, later)
            if aside:
                print(f"Resuming {resume_dir}: what this folder holds from after it is moved to {aside}.", flush=True)
    if conversion is not None and processes.is_main_process:  # what final/ (and its model card) came from
        write_json_atomic(os.path.join(tcfg.output_dir, CONVERSION_REPORT), conversion.to_dict())
        print(conversion.summary(), flush=True)
    if resumed_uptraining and processes.is_main_process:
        print(resumed_uptraining_line(recipe, resume_dir, tcfg.output_dir), flush=True)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)

    set_seed(tcfg.seed)
    data = prepare_pretraining_data(dcfg, tokenizer, tcfg.seed, processes)
    if not dcfg.streaming and len(data["train"]) < tcfg.per_device_train_batch_size * processes.num_processes:
        raise ConfigError(
            f"The training set has {len(data['train'])} blocks, fewer than one global batch "
            f"({tcfg.per_device_train_batch_size} x {processes.num_processes} processes)."
        )
    log_probs = training_unigram_log_probs(data["train"], tokenizer)
    set_seed(tcfg.seed)  # the model init does not depend on how much RNG the data preparation used
    model = converted if converted is not None else build_mlm_model(recipe.model, tokenizer)
    if recipe.model.output_bias_init == "unigram":  # a fresh model (validated), non-streamed data (validated)
        init_output_bias(model, log_probs)
    if tcfg.torch_compile == "layers":  # in place, before DDP wraps the model (the whole model: at prepare)
        compiling.compile_layers(model, tcfg.torch_compile_mode, tcfg.torch_compile_backend)
    guard = recipe_guard(
        tcfg,
        resume_hint(
            "--resume_from_checkpoint",
            "start over after changing one of these (training.checkpointing_steps keeps one)",
        ),
        last_good_checkpoint=resume_dir,
    )
    summary = {
        "train_losses": {},
        "evals": {},
        "output_dir": tcfg.output_dir,
        "resumed_from": resume_dir,
        "num_processes": processes.num_processes,
    }
    trainer = MaskedLMTrainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        eval_dataset=data["validation"],
        data_collator=build_mlm_collator(tokenizer, dcfg, tcfg.seed, processes.process_index),
        processing_class=tokenizer,
        recipe=recipe,
        eval_collator=build_mlm_collator(tokenizer, dcfg, tcfg.seed + 1, processes.process_index),
        guard=guard,
        stopping=stop_signal_callback(stop or StopSignal()),
        fingerprint=fingerprint,
        update_log=UpdateLog(tcfg.output_dir, enabled=processes.is_main_process),
        summary=summary,
        lock=lock,
        resume_dir=resume_dir,
    )
    if not show_progress:  # with the progress bar off, the Trainer would print every logged update instead
        trainer.remove_callback(PrinterCallback)
    warn_if_mixed_precision_ignored(trainer.accelerator)
    if tcfg.torch_compile is not None:
        whole_model = tcfg.torch_compile == "model"
        backend = (tcfg.torch_compile_backend or "inductor") if whole_model else "no"
        compiling.check_accelerator_compiles(trainer.accelerator, backend, tcfg.torch_compile_mode)
    if compiles_whole_model(
        trainer.accelerator
    ):  # by the recipe, or by the Accelerate config when the recipe leaves it
        compiling.allow_dynamic_output_shapes()

    trainer.unigram = unigram_baseline(
        log_probs, tokenizer.mask_token_id, trainer.get_eval_dataloader(), trainer.accelerator
    )
    if trainer.unigram:
        summary["unigram"] = trainer.unigram
        trainer.accelerator.print(
            f"unigram baseline (the training set's token frequencies on the same masked validation tokens): "
            f"perplexity {trainer.unigram['unigram_perplexity']:.2f} on all of them, "
            f"{trainer.unigram['unigram_mask_input_perplexity']:.2f} on those whose input is <mask>"
        )
    step = 0
    if resume_dir:
        trainer.accelerator.print(f"Resuming from {resume_dir}")
        step = read_checkpoint_state(resume_dir)["global_step"]
        # The summary covers the whole path to the end, not the last segment only: the updates, evaluations and
        # training time before the checkpoint come from the update log of the folder it was made in.
        made_in = os.path.dirname(resume_dir)
        if os.path.isfile(os.path.join(made_in, UPDATE_LOG)):
            history = history_before(path_records(made_in), step)
            summary["train_losses"].update(history["train_losses"])
            summary["evals"].update(history["evals"])
            trainer.train_seconds = history["train_seconds"] or 0.0
        else:
            logger.warning(
                "%s has no %s: this run's summary holds only the updates and evaluations made from %s on.",
                made_in,
                UPDATE_LOG,
                resume_dir,
            )
    trainer.update_log.write(event="start", step=step, resumed_from=resume_dir, pid=os.getpid())
    return trainer


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------


def save_final_model(trainer: MaskedLMTrainer, metrics: dict[str, float]) -> str:
    """The model and tokenizer in ``<output_dir>/final`` (loadable with the Auto classes), with its evaluation.

    Written as ``.tmp-final`` and renamed into place once whole: a kill while saving leaves no torn ``final/``.
    """
    accelerator, model = trainer.accelerator, trainer.model
    final_dir = os.path.join(trainer.args.output_dir, "final")
    check_weights_finite(model, final_dir, trainer.guard)
    final_tmp = temporary_name(final_dir)
    accelerator.wait_for_everyone()
    model.save_pretrained(final_tmp, is_main_process=accelerator.is_main_process, save_function=accelerator.save)
    if accelerator.is_main_process:
        tokenizer = trainer.processing_class
        # Truncation with the saved tokenizer stops at the model's n, not at the length the tokenizer was trained for.
        tokenizer.model_max_length = max_input_length(model.config)
        tokenizer.save_pretrained(final_tmp)
        write_json_atomic(os.path.join(final_tmp, "eval_results.json"), {"step": trainer.state.global_step, **metrics})
        conversion = os.path.join(trainer.args.output_dir, CONVERSION_REPORT)
        if os.path.isfile(conversion):  # an uptraining run's: the source and how it was converted
            shutil.copy(conversion, os.path.join(final_tmp, CONVERSION_REPORT))
        publish_dir(final_tmp, final_dir)
    accelerator.wait_for_everyone()
    return final_dir


def train(trainer: MaskedLMTrainer, stop: StopSignal) -> dict:
    """Train, then (at ``max_steps``, or when the time budget ran out) evaluate and publish ``final/``; write the
    summary and return it. Raises `Preempted` after the checkpoint a SIGTERM / SIGINT asked for, and
    `TrainingDiverged` when the guard stops the run or it ended diverging."""
    from transformers import TrainerState

    tcfg, summary, resume_dir = trainer.recipe.training, trainer.summary, trainer.resume_dir
    started_at = read_checkpoint_state(resume_dir)["global_step"] if resume_dir else 0
    if started_at >= tcfg.max_steps:
        # A run killed after its last checkpoint and before final/: the Trainer would make one more update when it
        # resumes there (transformers 5.24), so the checkpoint is only loaded, then evaluated and published.
        trainer._load_from_checkpoint(resume_dir)
        trainer.state = TrainerState.load_from_json(os.path.join(resume_dir, STATE_FILE))
    else:
        trainer.train(resume_from_checkpoint=resume_dir)
    step = trainer.state.global_step
    if trainer.stopping.stopped_at is not None:  # SIGTERM / SIGINT: the Trainer saved checkpoint-<step> on the way out
        path = PRETRAINING.checkpoint_path(tcfg.output_dir, step)
        trainer.update_log.write(event="stopped", step=step, signal=stop.name, checkpoint=path)
        raise Preempted(
            f"{stop.name} received: stopped after update {step} of {tcfg.max_steps} with checkpoint {path}. "
            f"Resume with --resume_from_checkpoint latest."
        )
    if step == started_at < tcfg.max_steps:  # no update made (the summary holds the path's earlier ones)
        raise no_training_batch_error(trainer.recipe.data)
    summary["train_seconds"] = trainer.train_seconds
    if summary.get("compile", {}).get("later_update_graphs"):
        trainer.accelerator.print(
            f"compiled {summary['compile']['later_update_graphs']} more graph(s) after the first update (each new "
            "input length compiles once; TORCH_LOGS=recompiles says why)"
        )
    if step >= tcfg.max_steps or summary.get("stopped_by_time_budget"):
        # The last evaluation: the Trainer's at max_steps when it evaluates every eval_steps, else one now.
        summary["final_eval"] = metrics = summary["evals"].get(step) or trainer.evaluate(final=True)
        # A run that ended diverging (inside a streak of skipped updates, or evaluating to NaN) publishes nothing.
        what = os.path.join(tcfg.output_dir, "final") if tcfg.save_final_model else "the summary"
        trainer.guard.check_finished(step, what, {"validation MLM loss": metrics["eval_loss"]})
        if tcfg.save_final_model:
            summary["final_dir"] = save_final_model(trainer, metrics)
    summary["completed_steps"] = step
    if trainer.is_world_process_zero():
        write_json_atomic(summary_path(tcfg.output_dir, step), summary)
    return summary


def run_pretraining(recipe: PretrainRecipe, show_progress: bool = True) -> dict:
    """Pretrain as the recipe says; returns the summary (the loss of every update, the evaluations, paths).

    Raises `TrainingDiverged` when the guard stops the run or it ended diverging (no ``final/``), and `Preempted`
    after the checkpoint a SIGTERM / SIGINT asked for: the command exits with the resumable status. The output
    directory is released either way.
    """
    stop = StopSignal().install()  # from the start: a signal during setup stops the run after its first update
    try:
        trainer = build_trainer(recipe, stop, show_progress)
        if trainer is None:
            output_dir = recipe.training.output_dir
            print(
                f"The run in {output_dir} is complete ({recipe.training.max_steps} updates, final model in "
                f"{os.path.join(output_dir, 'final')}): nothing to do. To train on, raise training.max_steps.",
                flush=True,
            )
            return read_final_summary(output_dir)
        try:
            summary = train(trainer, stop)
        except TrainingDiverged as err:
            trainer.update_log.write(event="diverged", step=trainer.state.global_step, error=str(err))
            trainer.close()
            raise
        except Preempted:
            trainer.close()
            raise
        trainer.close()
        return summary
    finally:
        stop.restore()
