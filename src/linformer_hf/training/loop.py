"""What pretraining and fine-tuning, both on transformers' `Trainer`, share: the divergence guard of a recipe, the
recipe's optimizer settings on a resumed run, and the teardown of a run."""

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


def optimizer_settings_callback():
    """A `TrainerCallback` that gives a resumed run the recipe's learning rate, weight decay and Adam settings.

    The Trainer loads the optimizer and the schedule as the checkpoint saved them: their learning rate (the schedule's
    base), weight decay, betas and epsilon are the checkpoint's, whatever the recipe now says, while a changed
    schedule is announced as taken (`check_resume_compatible`), and lowering the learning rate after a divergence
    changed nothing. Once they are loaded (`on_train_begin`), the recipe's values are set: the decayed parameters'
    group (the Trainer's first) takes ``weight_decay``, and the current learning rate is the schedule's at the resumed
    update from the new base. The schedule's shape (kind, warmup, length) is rebuilt from the recipe by the Trainer."""
    from transformers import TrainerCallback

    class RecipeOptimizerSettings(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kwargs):
            if optimizer is None or state.global_step == 0:  # a fresh run's optimizer was made from the recipe
                return
            groups = optimizer.param_groups
            for index, group in enumerate(groups):
                group.update(
                    betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_epsilon, initial_lr=args.learning_rate
                )
                if index == 0:
                    group["weight_decay"] = args.weight_decay
            lambdas = getattr(lr_scheduler, "lr_lambdas", None)
            if lambdas is not None:  # every schedule the recipes take is a LambdaLR: lr = base x factor(update)
                lr_scheduler.base_lrs = [args.learning_rate] * len(groups)
                for group, factor in zip(groups, lambdas, strict=True):
                    group["lr"] = args.learning_rate * factor(lr_scheduler.last_epoch)
                lr_scheduler._last_lr = [group["lr"] for group in groups]

    return RecipeOptimizerSettings()


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
