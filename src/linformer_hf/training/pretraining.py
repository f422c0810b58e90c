"""Masked-LM pretraining with Accelerate: the loop behind ``scripts/pretrain.py``.

Exactness guarantees (tested in tests/test_training_pretrain.py):
- resume: ``accelerator.save_state`` stores model, optimizer, scheduler (registered), RNG states and the step counter;
  data order comes from Accelerate's seedable sampler (seed + epoch), masking from per-block seeds, and the resumed
  epoch skips the consumed batches with ``skip_first_batches``: a resumed run reproduces the uninterrupted one.
- processes: the loss is the sum of token losses divided by the number of masked tokens of the whole global batch
  (all-reduced), and each global batch holds the same blocks whatever the process count, so one process with a global
  batch B and P processes with B / P each compute the same updates.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from .checkpointing import (UpdateLog, atomic_write_json, check_resume_compatible, claim_output_dir, publish_dir,
                            read_checkpoint_state, recipe_fingerprint, resolve_checkpoint, save_checkpoint,
                            temporary_name)
from .config import ConfigError, PretrainRecipe
from .data import _example_seed, build_mlm_collator, prepare_pretraining_data, shard_stream
from ..models import max_input_length
from .model_setup import build_mlm_model
from .tokenizer import load_tokenizer
from .validation import warn_if_mixed_precision_ignored

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------------
# Loss and evaluation
# ----------------------------------------------------------------------------------------------------------------

def masked_token_loss_sum(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of cross-entropy over masked tokens, and their count (per example: shape [batch]).

    The LM head runs only at the masked positions (`logits_for_labels_only`, which both the Linformer and the RoBERTa
    baseline built by `models.build_mlm_model` take): about 15% of the vocabulary projection's cost, same loss.
    """
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    labelled = labels.ne(-100)  # (batch, L)
    logits = model(**inputs, labels=labels, logits_for_labels_only=True).logits  # (num_labelled, vocab)
    losses = F.cross_entropy(logits.float(), labels[labelled], reduction="none")  # (num_labelled,)
    example = labelled.nonzero()[:, 0]  # which example each labelled position belongs to
    loss_sums = torch.zeros(labels.shape[0], dtype=losses.dtype, device=losses.device).index_add(0, example, losses)
    return loss_sums, labelled.sum(dim=1)


@torch.no_grad()
def evaluate_mlm(model, dataloader, accelerator) -> dict[str, float]:
    model.eval()
    total_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    total_tokens = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    for batch in dataloader:
        loss_sum, count = masked_token_loss_sum(model, batch)
        loss_sum, count = accelerator.gather_for_metrics((loss_sum, count))
        total_loss += loss_sum.double().sum()
        total_tokens += count.double().sum()
    model.train()
    loss = (total_loss / total_tokens.clamp(min=1)).item()
    return {"eval_loss": loss, "perplexity": math.exp(min(loss, 50.0)), "eval_masked_tokens": int(total_tokens.item())}


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------

def check_block_size(recipe: PretrainRecipe, model_config) -> None:
    n = max_input_length(model_config)
    if recipe.data.block_size > n:
        raise ConfigError(
            f"data.block_size={recipe.data.block_size} is larger than the model's longest input n={n} "
            f"(max_sequence_length). Lower data.block_size or raise model max_sequence_length."
        )


def optimizer_step(accelerator, model, optimizer, scheduler, max_grad_norm) -> None:
    """The update inside `accelerator.accumulate`: clip and advance the schedule only when gradients are synced."""
    if accelerator.sync_gradients and max_grad_norm:
        accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    if accelerator.sync_gradients and not accelerator.optimizer_step_was_skipped:
        scheduler.step()
    optimizer.zero_grad()


def finish(accelerator) -> None:
    """End the trackers and tear the process group down while every process is still alive.

    A gloo group left to garbage collection can block forever in its destructor once the other processes have
    exited (seen in the 2-process fine-tuning test), so all processes meet at a barrier and destroy it together.
    """
    accelerator.end_training()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        accelerator.wait_for_everyone()
        torch.distributed.destroy_process_group()


def build_optimizer(model, cfg) -> torch.optim.Optimizer:
    no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight", "layernorm.weight")
    params = [
        {"params": [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith(no_decay)],
         "weight_decay": cfg.weight_decay},
        {"params": [p for n, p in model.named_parameters() if p.requires_grad and n.endswith(no_decay)],
         "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(params, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_epsilon)


def run_pretraining(recipe: PretrainRecipe, show_progress: bool = True) -> dict:
    """Pretrain as the recipe says; returns a summary (losses per step, final evaluation, paths)."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, ProjectConfiguration, set_seed
    from tqdm.auto import tqdm
    from transformers import get_scheduler

    tcfg, dcfg = recipe.training, recipe.data
    # Everything that can fail on bad input is checked before the Accelerator, data and model are built.
    resume_dir = resolve_checkpoint(tcfg.resume_from_checkpoint, tcfg.output_dir)
    tokenizer = load_tokenizer(recipe.tokenizer.name_or_path)
    if recipe.model.pretrained:
        from transformers import AutoConfig

        model_config = AutoConfig.from_pretrained(recipe.model.pretrained)
    else:
        from .model_setup import build_model_config

        model_config = build_model_config(recipe.model, tokenizer)
    check_block_size(recipe, model_config)
    # The recipe a resumed checkpoint was made with, then the output directory (writable, this run's, locked).
    fingerprint = recipe_fingerprint(recipe, model_config, tokenizer, int(os.environ.get("WORLD_SIZE", "1")))
    if resume_dir:
        check_resume_compatible(resume_dir, fingerprint, tcfg.max_steps, latest=tcfg.resume_from_checkpoint == "latest")
    lock = claim_output_dir(tcfg.output_dir, resuming=resume_dir is not None, overwrite=tcfg.overwrite_output_dir,
                            is_main_process=int(os.environ.get("RANK", "0")) == 0)

    accelerator = Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=tcfg.gradient_accumulation_steps, sync_with_dataloader=False),
        mixed_precision=tcfg.mixed_precision,
        log_with=tcfg.report_to or None,
        project_config=ProjectConfiguration(project_dir=tcfg.output_dir, logging_dir=os.path.join(tcfg.output_dir, "logs")),
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=tcfg.seed),
    )
    set_seed(tcfg.seed)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    warn_if_mixed_precision_ignored(accelerator)

    data = prepare_pretraining_data(dcfg, tokenizer, tcfg.seed, accelerator)
    collator = build_mlm_collator(tokenizer, dcfg, tcfg.seed, accelerator.process_index)
    eval_collator = build_mlm_collator(tokenizer, dcfg, tcfg.seed + 1, accelerator.process_index)

    set_seed(tcfg.seed)  # the model init does not depend on how much RNG the data preparation used
    model = build_mlm_model(recipe.model, tokenizer)
    optimizer = build_optimizer(model, tcfg)
    scheduler = get_scheduler(tcfg.lr_scheduler_type, optimizer, num_warmup_steps=tcfg.warmup_steps,
                              num_training_steps=tcfg.max_steps)

    streaming = dcfg.streaming
    if streaming:
        train_ds = shard_stream(data["train"], accelerator.process_index, accelerator.num_processes, tcfg.seed,
                                dcfg.shuffle_buffer_size)
        train_dl = DataLoader(train_ds, batch_size=tcfg.per_device_train_batch_size, collate_fn=collator)
        eval_ds = split_eval = data["validation"]
        from datasets.distributed import split_dataset_by_node

        split_eval = split_dataset_by_node(eval_ds, rank=accelerator.process_index,
                                           world_size=accelerator.num_processes)
        eval_dl = DataLoader(split_eval, batch_size=tcfg.per_device_eval_batch_size, collate_fn=eval_collator)
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        train_dl = DataLoader(data["train"], batch_size=tcfg.per_device_train_batch_size, shuffle=True,
                              drop_last=True, collate_fn=collator)
        eval_dl = DataLoader(data["validation"], batch_size=tcfg.per_device_eval_batch_size, collate_fn=eval_collator)
        model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
        if len(train_dl) == 0:
            raise ConfigError(
                f"The training set has {len(data['train'])} blocks, fewer than one global batch "
                f"({tcfg.per_device_train_batch_size} x {accelerator.num_processes} processes)."
            )
    # The scheduler is stepped once per optimizer update by this loop (not prepared: Accelerate would step it once
    # per process), and registered so that save_state / load_state carry it.
    accelerator.register_for_checkpointing(scheduler)

    if tcfg.report_to:
        flat = {f"{s}.{k}": (v if isinstance(v, (int, float, str, bool)) else str(v))
                for s, sec in asdict(recipe).items() for k, v in sec.items()}
        accelerator.init_trackers("pretrain", config=flat)

    accum = tcfg.gradient_accumulation_steps
    completed_steps = 0
    if resume_dir:
        accelerator.print(f"Resuming from {resume_dir}")
        accelerator.load_state(resume_dir)
        completed_steps = read_checkpoint_state(resume_dir)["completed_steps"]
    update_log = UpdateLog(tcfg.output_dir, enabled=accelerator.is_main_process)
    update_log.write(event="start", step=completed_steps, resumed_from=resume_dir, pid=os.getpid())

    micro_done = completed_steps * accum
    if streaming:
        epoch, skip = 0, micro_done  # streamed data is replayed up to the resume point
    else:
        epoch, skip = divmod(micro_done, len(train_dl))

    tokens_per_update = tcfg.per_device_train_batch_size * accum * accelerator.num_processes * dcfg.block_size
    summary = {"train_losses": {}, "evals": {}, "output_dir": tcfg.output_dir, "resumed_from": resume_dir,
               "num_processes": accelerator.num_processes}
    stop_at = min(tcfg.max_steps, tcfg.stop_after_steps) if tcfg.stop_after_steps else tcfg.max_steps
    progress = tqdm(total=tcfg.max_steps, initial=completed_steps, disable=not (show_progress and accelerator.is_local_main_process),
                    desc="pretrain", dynamic_ncols=True)
    model.train()
    update_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    t_last, steps_since_log = time.perf_counter(), 0
    micro = 0
    t_start = time.perf_counter()

    def out_of_time() -> bool:
        # All processes must agree: stop everywhere as soon as one process is out of time.
        flag = torch.tensor(float(time.perf_counter() - t_start > 60 * tcfg.max_train_minutes), device=accelerator.device)
        return bool(accelerator.reduce(flag, reduction="sum").item() > 0) if accelerator.num_processes > 1 else bool(flag)

    if tcfg.eval_steps and completed_steps == 0:  # the starting point of the validation curve
        metrics = evaluate_mlm(model, eval_dl, accelerator)
        summary["evals"][0] = metrics
        accelerator.print(f"step 0: eval_loss {metrics['eval_loss']:.4f} perplexity {metrics['perplexity']:.2f}")

    loop_start, paused_seconds = time.perf_counter(), 0.0  # paused: evaluation and checkpointing
    while completed_steps < stop_at:
        collator.set_epoch(epoch)
        if streaming:
            train_ds.set_epoch(epoch)
            dl = train_dl
        else:
            train_dl.set_epoch(epoch)
            dl = accelerator.skip_first_batches(train_dl, skip) if skip else train_dl
        iterator = iter(dl)
        if streaming and skip:
            for _ in range(skip):
                next(iterator)
        skip = 0
        got_batch = False
        for batch in iterator:
            got_batch = True
            # Dropout randomness as a function of (seed, update, micro-batch, process): a resumed run draws the same
            # dropout masks whatever else consumed the global RNG (data loader iterators do) before it resumed.
            torch.manual_seed(_example_seed(tcfg.seed, completed_steps, micro, accelerator.process_index))
            micro = (micro + 1) % accum
            with accelerator.accumulate(model):
                loss_sum, count = masked_token_loss_sum(model, batch)
                local_sum, local_count = loss_sum.sum(), count.sum()
                global_count = accelerator.reduce(local_count.detach().clone(), reduction="sum").clamp(min=1)
                # DDP averages gradients over processes: scale so the update follows sum / global masked tokens.
                loss = local_sum * accelerator.num_processes / global_count
                accelerator.backward(loss)
                update_loss += accelerator.reduce(local_sum.detach().double(), reduction="sum") / global_count / accum
                optimizer_step(accelerator, model, optimizer, scheduler, tcfg.max_grad_norm)
            if not accelerator.sync_gradients:
                continue
            completed_steps += 1
            steps_since_log += 1
            step_loss = update_loss.item()
            update_loss.zero_()
            summary["train_losses"][completed_steps] = step_loss
            update_log.write(step=completed_steps, loss=step_loss, lr=scheduler.get_last_lr()[0])
            progress.update(1)
            if completed_steps % tcfg.logging_steps == 0 or completed_steps == stop_at:
                now = time.perf_counter()
                tok_s = tokens_per_update * steps_since_log / max(now - t_last, 1e-9)
                t_last, steps_since_log = now, 0
                lr = scheduler.get_last_lr()[0]
                progress.set_postfix(loss=f"{step_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
                if tcfg.report_to:
                    accelerator.log({"train/loss": step_loss, "train/lr": lr, "train/tokens_per_s": tok_s},
                                    step=completed_steps)
            if tcfg.eval_steps and completed_steps % tcfg.eval_steps == 0 and completed_steps < tcfg.max_steps:
                pause_start = time.perf_counter()
                metrics = evaluate_mlm(model, eval_dl, accelerator)
                paused_seconds += time.perf_counter() - pause_start
                summary["evals"][completed_steps] = metrics
                update_log.write(event="eval", step=completed_steps, **metrics)
                accelerator.print(f"step {completed_steps}: eval_loss {metrics['eval_loss']:.4f} "
                                  f"perplexity {metrics['perplexity']:.2f}")
                if tcfg.report_to:
                    accelerator.log({"eval/loss": metrics["eval_loss"], "eval/perplexity": metrics["perplexity"]},
                                    step=completed_steps)
            if tcfg.checkpointing_steps and completed_steps % tcfg.checkpointing_steps == 0:
                pause_start = time.perf_counter()
                path = save_checkpoint(accelerator, tcfg.output_dir, completed_steps,
                                       {"completed_steps": completed_steps, "epoch": epoch}, fingerprint,
                                       tcfg.checkpoints_total_limit)
                update_log.write(event="checkpoint", step=completed_steps, path=path)
                paused_seconds += time.perf_counter() - pause_start
            if completed_steps >= stop_at:
                break
            if tcfg.max_train_minutes is not None and out_of_time():
                accelerator.print(f"time budget of {tcfg.max_train_minutes} min reached after {completed_steps} "
                                  f"updates (of {tcfg.max_steps}); evaluating and saving now")
                summary["stopped_by_time_budget"] = True
                stop_at = completed_steps
                break
        if not got_batch:
            raise ConfigError("The training data gave no batch (empty stream or corpus).")
        if completed_steps < stop_at:
            epoch += 1
    progress.close()
    # Time spent on updates alone (seconds per update = train_seconds / updates run in this process).
    summary["train_seconds"] = time.perf_counter() - loop_start - paused_seconds

    if completed_steps >= tcfg.max_steps or summary.get("stopped_by_time_budget"):
        metrics = evaluate_mlm(model, eval_dl, accelerator)
        summary["evals"][completed_steps] = metrics
        summary["final_eval"] = metrics
        update_log.write(event="eval", step=completed_steps, **metrics)
        accelerator.print(f"final (step {completed_steps}): validation MLM loss {metrics['eval_loss']:.4f}, "
                          f"perplexity {metrics['perplexity']:.2f}")
        if tcfg.report_to:
            accelerator.log({"eval/loss": metrics["eval_loss"], "eval/perplexity": metrics["perplexity"]},
                            step=completed_steps)
        if tcfg.save_final_model:
            final_dir = os.path.join(tcfg.output_dir, "final")
            final_tmp = temporary_name(final_dir)  # renamed into place once whole: no torn final/
            accelerator.wait_for_everyone()
            unwrapped = accelerator.unwrap_model(model)
            unwrapped.save_pretrained(final_tmp, is_main_process=accelerator.is_main_process,
                                      save_function=accelerator.save)
            if accelerator.is_main_process:
                tokenizer.save_pretrained(final_tmp)
                atomic_write_json(os.path.join(final_tmp, "eval_results.json"), {"step": completed_steps, **metrics})
                publish_dir(final_tmp, final_dir)
            accelerator.wait_for_everyone()
            summary["final_dir"] = final_dir
    summary["completed_steps"] = completed_steps
    if accelerator.is_main_process:
        atomic_write_json(os.path.join(tcfg.output_dir, f"summary_step{completed_steps}.json"), summary)
    update_log.close()
    finish(accelerator)
    if lock is not None:
        lock.release()
    return summary
