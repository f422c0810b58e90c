"""A prototype of masked-LM pretraining on transformers' `Trainer` : not the default path.

``run_pretraining`` (pretraining.py) stays the command's loop; this module is what a switch would build on, and what
experiments/mlm_trainer_vs_loop.py measures against the loop (docs/training.md, "Why the loop and not Trainer").
It reuses the package's data (`prepare_pretraining_data`, blocks carrying their index) and seeded masking
(`SeededMaskingCollator`, its epoch set from the Trainer's), the loop's optimizer and schedule, its dropout seeding
per (seed, update, micro-batch, process), the LM head run at the masked positions only, and fine-tuning's callbacks
(SIGTERM checkpoint, divergence guard, completion markers, stop_after_steps) plus a time budget.

The loss: ``normalisation="update"`` is the Trainer's ``num_items_in_batch``: the sum of masked-token losses of
the whole update (all micro-batches, all processes) over their masked-token count. ``normalisation="micro_batch"``
reproduces the loop: each micro-batch's sum over its own masked-token count (all processes), averaged over the
accumulation steps.

Not here (what a switch would still need): the loop's evaluation (`evaluate_mlm`, the unigram baseline), the final
model and summary, the recipe fingerprint checked on resume, the ``checkpoints/step_N`` layout and the update log's
``skipped``/``nonfinite`` fields, streamed data.
"""

from __future__ import annotations

import json
import math
import os
import time

import torch
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments

from linformer_hf.training.data import _example_seed


class MaskedLMTrainer(Trainer):
    """`Trainer` for masked-LM pretraining with the loop's masking, dropout seeding and loss."""

    def __init__(self, *args, normalisation: str = "update", **kwargs):
        if normalisation not in ("update", "micro_batch"):
            raise ValueError(f"normalisation must be 'update' or 'micro_batch', not {normalisation!r}")
        super().__init__(*args, **kwargs)
        self.normalisation = normalisation
        self.model_accepts_loss_kwargs = True  # the forward takes num_items_in_batch
        self._micro = 0
        self.update_loss = torch.zeros((), dtype=torch.float64)  # this update's loss so far (read at on_step_end)
        self.add_callback(_SeededEpoch(self.data_collator))

    def training_step(self, model, inputs, num_items_in_batch=None):
        gas = self.args.gradient_accumulation_steps
        # Dropout as in the loop: a function of (seed, update, micro-batch, process), whatever consumed the RNG before.
        torch.manual_seed(_example_seed(self.args.seed, self.state.global_step, self._micro, self.args.process_index))
        self._micro = (self._micro + 1) % gas
        if self.normalisation == "micro_batch":
            count = inputs["labels"].ne(-100).sum().to(self.args.device)
            if self.args.world_size > 1:
                count = self.accelerator.gather(count).sum()
            num_items_in_batch = count.clamp(min=1) * gas  # the loop's mean over micro-batches of sum / count
        loss = super().training_step(model, inputs, num_items_in_batch)
        # compute_loss scaled the loss by the process count (DDP averages gradients): the update's loss is the sum over
        # processes of each one's share, i.e. this process's share times the process count / process count summed.
        share = loss.detach().double() / max(self.accelerator.num_processes, 1)
        if self.accelerator.num_processes > 1:
            share = self.accelerator.reduce(share, reduction="sum")
        self.update_loss = self.update_loss.to(share.device) + share
        return loss

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # The LM head at the masked positions only; the model's loss divides the summed token losses by the count.
        outputs = model(**inputs, logits_for_labels_only=True, num_items_in_batch=num_items_in_batch)
        loss = outputs.loss
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # as Trainer.compute_loss: undo DDP's mean over processes
        return (loss, outputs) if return_outputs else loss


class _SeededEpoch(TrainerCallback):
    """The masking collator's epoch is the Trainer's (masks are seeded by (seed, epoch, block index))."""

    def __init__(self, collator):
        self.collator = collator

    def on_epoch_begin(self, args, state, control, **kwargs):
        # state.epoch is the epoch index at an epoch's start, and epoch + fraction when a run resumes inside one
        self.collator.set_epoch(int(math.floor(state.epoch + 1e-9)) if state.epoch else 0)


def update_log_callback(trainer: MaskedLMTrainer, update_log, guard=None):
    """One `UpdateLog` line per update (step, loss, lr), as the loop writes them; the loss goes to the guard's
    spike check (the divergence callback counts non-finite gradients)."""

    class LogUpdates(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            loss = trainer.update_loss.item()
            trainer.update_loss.zero_()
            update_log.write(step=state.global_step, loss=loss, lr=trainer.lr_scheduler.get_last_lr()[0])
            if guard is not None and math.isfinite(loss):
                guard._check_spike(state.global_step, loss)

    return LogUpdates()


def time_budget_callback(minutes: float, accelerator=None):
    """Stop after the update that passes ``minutes`` of training (agreed over processes), with a checkpoint."""

    class TimeBudget(TrainerCallback):
        stopped_at: int | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            flag = torch.tensor(float(time.perf_counter() - self.started > 60 * minutes))
            if accelerator is not None and accelerator.num_processes > 1:
                flag = accelerator.reduce(flag.to(accelerator.device), reduction="sum")
            if flag.item() > 0 and state.global_step < state.max_steps:
                control.should_training_stop = control.should_save = True
                self.stopped_at = state.global_step
            return control

    return TimeBudget()


def pretraining_arguments(tcfg, **overrides) -> TrainingArguments:
    """A pretraining recipe's ``training`` section as `TrainingArguments` (the optimizer and schedule are passed to the
    Trainer built, as the loop builds them)."""
    settings = dict(
        output_dir=tcfg.output_dir,
        seed=tcfg.seed,
        data_seed=tcfg.seed,  # the seedable sampler's seed, as the loop's DataLoaderConfiguration
        per_device_train_batch_size=tcfg.per_device_train_batch_size,
        per_device_eval_batch_size=tcfg.per_device_eval_batch_size,
        gradient_accumulation_steps=tcfg.gradient_accumulation_steps,
        max_steps=tcfg.max_steps,
        max_grad_norm=tcfg.max_grad_norm or 0.0,
        logging_steps=tcfg.logging_steps,
        eval_strategy="no",
        save_strategy="steps" if tcfg.checkpointing_steps else "no",
        save_steps=tcfg.checkpointing_steps or 500,
        remove_unused_columns=False,  # the collator reads each block's index
        dataloader_drop_last=True,
        report_to=tcfg.report_to or "none",
        disable_tqdm=True,
        fp16=tcfg.mixed_precision == "fp16",
        bf16=tcfg.mixed_precision == "bf16",
        use_cpu=os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"),
    )
    settings.update(overrides)
    return TrainingArguments(**settings)


def build_trainer(recipe, normalisation: str = "update", stop=None) -> MaskedLMTrainer:
    """A `MaskedLMTrainer` for a pretraining recipe: the output directory claimed and locked (``trainer.lock``), the
    loop's data, collator, model init, optimizer and schedule, and the reliability callbacks; ``trainer.train(
    resume_from_checkpoint=trainer.resume_dir)`` runs it (``trainer.lock.release()`` after)."""
    from transformers import get_scheduler, set_seed

    from linformer_hf.loading import pad_as_the_model_takes
    from linformer_hf.training.checkpointing import FINETUNING, UpdateLog, claim_output_dir, resolve_checkpoint
    from linformer_hf.training.data import build_mlm_collator, prepare_pretraining_data
    from linformer_hf.training.finetuning_trainer import (
        completion_marker_callback,
        stop_after_steps_callback,
        stop_signal_callback,
    )
    from linformer_hf.training.guards import divergence_callback, resume_hint
    from linformer_hf.training.loop import build_optimizer, recipe_guard
    from linformer_hf.training.model_setup import build_mlm_model, build_model_config
    from linformer_hf.training.pretraining import check_block_size
    from linformer_hf.training.tokenizer import load_tokenizer

    tcfg, dcfg = recipe.training, recipe.data
    args = pretraining_arguments(tcfg)
    tokenizer = load_tokenizer(recipe.tokenizer.name_or_path)
    model_config = build_model_config(recipe.model, tokenizer)
    check_block_size(recipe, model_config)
    pad_as_the_model_takes(tokenizer, model_config)
    resume_dir = resolve_checkpoint(tcfg.resume_from_checkpoint, tcfg.output_dir, FINETUNING)
    lock = claim_output_dir(
        tcfg.output_dir,
        resuming=resume_dir is not None,
        overwrite=tcfg.overwrite_output_dir,
        is_main_process=args.process_index == 0,
        options=FINETUNING,
    )
    set_seed(tcfg.seed)
    data = prepare_pretraining_data(dcfg, tokenizer, tcfg.seed)
    collator = build_mlm_collator(tokenizer, dcfg, tcfg.seed, args.process_index)
    set_seed(tcfg.seed)  # the model init, as the loop's
    model = build_mlm_model(recipe.model, tokenizer)
    optimizer = build_optimizer(model, tcfg)
    scheduler = get_scheduler(
        tcfg.lr_scheduler_type, optimizer, num_warmup_steps=tcfg.warmup_steps, num_training_steps=tcfg.max_steps
    )
    guard = recipe_guard(tcfg, resume_hint("--resume_from_checkpoint", "start over"), last_good_checkpoint=resume_dir)
    stopping = stop_signal_callback(stop) if stop is not None else None
    callbacks = [c for c in (stopping, divergence_callback(guard)) if c is not None]
    # prunes after the new checkpoint is marked complete (not the Trainer's rotation, which deletes before)
    callbacks.append(completion_marker_callback(args.distributed_state, tcfg.checkpoints_total_limit))
    if tcfg.stop_after_steps:
        callbacks.append(stop_after_steps_callback(tcfg.stop_after_steps))
    trainer = MaskedLMTrainer(
        model=model,
        args=args,
        train_dataset=data["train"],
        data_collator=collator,
        processing_class=tokenizer,
        optimizers=(optimizer, scheduler),
        callbacks=callbacks,
        normalisation=normalisation,
    )
    if stopping is not None:
        stopping.accelerator = trainer.accelerator
    if tcfg.max_train_minutes is not None:
        trainer.add_callback(time_budget_callback(tcfg.max_train_minutes, trainer.accelerator))
    if args.disable_tqdm:  # no line per logged update on stdout, as the loop without its progress bar
        trainer.remove_callback(PrinterCallback)
    step = 0
    if resume_dir is not None:
        with open(os.path.join(resume_dir, "trainer_state.json"), encoding="utf-8") as fh:
            step = json.load(fh)["global_step"]
    update_log = UpdateLog(tcfg.output_dir, enabled=args.process_index == 0)
    update_log.write(event="start", step=step, resumed_from=resume_dir, pid=os.getpid())
    trainer.add_callback(update_log_callback(trainer, update_log, guard))
    trainer.lock, trainer.guard, trainer.update_log, trainer.resume_dir = lock, guard, update_log, resume_dir
    return trainer


__all__ = [
    "MaskedLMTrainer",
    "build_trainer",
    "pretraining_arguments",
    "time_budget_callback",
    "update_log_callback",
]
