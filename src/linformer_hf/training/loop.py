"""What the pretraining and fine-tuning loops share: the optimizer, the update step, trackers and teardown."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import torch

from .guards import DivergenceGuard, gradients_finite

# Parameters without weight decay (biases and LayerNorm gains), as in RoBERTa's recipe and transformers' Trainer.
NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "layernorm.weight")


def build_optimizer(model, cfg) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters, from a section with the `config.OptimizerSection` fields."""
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for name, p in named if not name.endswith(NO_DECAY)], "weight_decay": cfg.weight_decay},
        {"params": [p for name, p in named if name.endswith(NO_DECAY)], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon)


def build_accelerator(cfg, gradient_accumulation_plugin=None, **kwargs):
    """An Accelerator logging to ``<output_dir>/logs`` with the section's precision and trackers."""
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration

    if gradient_accumulation_plugin is None:
        kwargs["gradient_accumulation_steps"] = cfg.gradient_accumulation_steps
    return Accelerator(
        gradient_accumulation_plugin=gradient_accumulation_plugin,
        mixed_precision=cfg.mixed_precision,
        log_with=cfg.report_to or None,
        project_config=ProjectConfiguration(
            project_dir=cfg.output_dir, logging_dir=os.path.join(cfg.output_dir, "logs")
        ),
        **kwargs,
    )


def init_trackers(accelerator, recipe, project: str) -> None:
    """Start the trackers (TensorBoard ...) with the recipe as flat ``section.key`` hyper-parameters."""
    if not recipe.training.report_to:
        return
    flat: dict[str, Any] = {
        f"{section}.{key}": (value if isinstance(value, (int, float, str, bool)) else str(value))
        for section, fields in asdict(recipe).items()
        for key, value in fields.items()
    }
    accelerator.init_trackers(project, config=flat)


def optimizer_step(accelerator, model, optimizer, scheduler, max_grad_norm) -> bool:
    """The update inside `accelerator.accumulate`: clip and advance the schedule only when gradients are synced.

    Returns whether the gradients were finite (after unscaling; always True between syncs). An update with non-finite
    gradients is skipped, weights, optimizer moments and schedule unchanged: by the grad scaler under fp16 (which also
    lowers its scale), here otherwise. Synced gradients are the same on every process, so all decide alike.
    """
    finite = True
    if accelerator.sync_gradients:
        if max_grad_norm:
            norm = accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
            finite = bool(torch.isfinite(norm).item())
        else:
            accelerator.unscale_gradients()
            finite = gradients_finite(model.parameters())
        if not finite and accelerator.scaler is None:
            optimizer.zero_grad()
            return False
    optimizer.step()
    if accelerator.sync_gradients and not accelerator.optimizer_step_was_skipped:
        scheduler.step()
    optimizer.zero_grad()
    return finite


def recipe_guard(tcfg, resume_hint, last_good_checkpoint: str | None = None) -> DivergenceGuard:
    """The divergence guard of a recipe's ``training`` section (`config.OptimizerSection` fields)."""
    warmup = getattr(tcfg, "warmup_steps", None)
    warmup = (
        f"training.warmup_steps (now {warmup})"
        if warmup is not None
        else f"training.warmup_ratio (now {tcfg.warmup_ratio})"
    )
    return DivergenceGuard(
        tcfg.nonfinite_patience,
        advice=(
            f"a lower training.learning_rate (now {tcfg.learning_rate:g}), more warm-up with {warmup}, clipping with "
            f"training.max_grad_norm (now {tcfg.max_grad_norm}), or mixed_precision bf16 instead of fp16"
        ),
        resume_hint=resume_hint,
        spike_factor=tcfg.loss_spike_factor,
        spike_action=tcfg.loss_spike_action,
        last_good_checkpoint=last_good_checkpoint,
    )


def finish(accelerator) -> None:
    """End the trackers and tear the process group down while every process is still alive.

    A gloo group left to garbage collection can block forever in its destructor once the other processes have
    exited (seen in the 2-process fine-tuning test), so all processes meet at a barrier and destroy it together. A
    DistributedDataParallel wrapper freed after that blocks the same way in its reducer's destructor, so accelerate's
    references to the prepared objects are dropped and collected first; callers drop their own beforehand.
    """
    accelerator.end_training()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        accelerator.free_memory()  # forgets the prepared model, optimizer, loaders, then collects garbage
        accelerator.wait_for_everyone()
        torch.distributed.destroy_process_group()


def finish_trainer(trainer) -> None:
    """Tear a `Trainer`'s run down (`finish`) once the Trainer no longer holds the DistributedDataParallel wrapper, so
    that the wrapper is freed while the process group still exists."""
    trainer.model_wrapped = trainer.model
    finish(trainer.accelerator)
