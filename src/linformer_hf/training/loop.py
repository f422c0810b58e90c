"""What pretraining and fine-tuning, both on transformers' `Trainer`, share: the divergence guard of a recipe and the
teardown of a run."""

from __future__ import annotations

import torch

from .guards import DivergenceGuard


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
