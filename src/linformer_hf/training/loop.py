"""What the pretraining and fine-tuning loops share: the optimizer, the update step, trackers and teardown."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import torch

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
