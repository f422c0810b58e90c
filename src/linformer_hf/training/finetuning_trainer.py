"""The fine-tuning run's `Trainer` and its training: the metrics it evaluates, the divergence guard, the callbacks
shared with pretraining (the stops in training/guards.py, the completion marker in training/checkpointing.py, the
compile record in training/compiling.py), and, with ``distillation.teacher``, the `distillation.DistillationTrainer`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from . import compiling
from .checkpointing import RECIPE_FILE, completion_marker_callback
from .config import FinetuneRecipe
from .errors import Preempted
from .guards import StopSignal, divergence_callback, resume_hint, stop_after_steps_callback
from .loop import optimizer_settings_callback
from .metrics import classification_metrics, collapsed_classifier
from .tasks import Task
from .validation import warn_if_mixed_precision_ignored

if TYPE_CHECKING:
    from .finetuning_model import Classifier
    from .finetuning_setup import RunSetup

# The checkpoint-N kept while training: the newest, and the best besides it when that is older (the Trainer's rule for
# save_total_limit=1, applied once the newest is complete: `completion_marker_callback`).
CHECKPOINTS_KEPT = 1


def build_trainer(recipe: FinetuneRecipe, task: Task, run: RunSetup, classifier: Classifier, stopping):
    """The Trainer (a DistillationTrainer with a teacher) with its callbacks, ``stopping`` (`stop_signal_callback`)
    first; returns it with its divergence guard and its compile record (None when nothing is compiled)."""
    from transformers import Trainer

    from ..models.lengths import max_input_length
    from .data import padding_collator

    tcfg = recipe.training
    compiles = compiling.compile_target(tcfg.torch_compile) != "no"
    compile_record = compiling.compile_record_callback() if compiles else None
    guard = finetune_guard(tcfg)
    trainer_class, extra = Trainer, {}
    if recipe.distillation.teacher is not None:
        from . import distillation

        trainer_class = distillation.DistillationTrainer
        extra = {"teacher": distillation.load_teacher(recipe.distillation.teacher), "distillation": recipe.distillation}
    trainer = trainer_class(
        model=classifier.model,
        args=run.args,
        train_dataset=classifier.encoded["train"],
        eval_dataset=classifier.encoded["validation"],
        # to a multiple of 8 under mixed precision, never past the model's n
        data_collator=padding_collator(
            classifier.tokenizer, max_input_length(classifier.model.config), tcfg.mixed_precision
        ),
        processing_class=classifier.tokenizer,
        compute_metrics=metrics_function(task, run.processes.is_main_process),
        # The stop first: a checkpoint it asks for is checked for non-finite weights as any other.
        callbacks=[
            stopping,
            divergence_callback(guard),
            optimizer_settings_callback(),
            # Each checkpoint records its recipe (the resumed one was checked against it by load_classifier).
            completion_marker_callback(run.processes, CHECKPOINTS_KEPT, {RECIPE_FILE: classifier.fingerprint}),
        ]
        + ([stop_after_steps_callback(tcfg.stop_after_steps)] if tcfg.stop_after_steps else [])
        + ([compile_record] if compile_record else []),
        **extra,
    )
    stopping.accelerator = trainer.accelerator  # the Trainer's own: its processes agree on the stop
    warn_if_mixed_precision_ignored(trainer.accelerator)
    if tcfg.torch_compile == "model":
        compiling.check_accelerator_compiles(
            trainer.accelerator, tcfg.torch_compile_backend or "inductor", tcfg.torch_compile_mode
        )
    return trainer, guard, compile_record


def train(trainer, checkpoint: str | None, stopping, stop: StopSignal, tcfg) -> int | None:
    """Train (from ``checkpoint`` when resuming). Returns None when the run went to its end, or the update it stopped
    at on purpose (``training.stop_after_steps``, a checkpoint kept); raises `Preempted` after SIGTERM / SIGINT and
    `TrainingDiverged` when the divergence guard stops it."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    trainer.train(resume_from_checkpoint=checkpoint)
    max_steps = trainer.state.max_steps
    if stopping.stopped_at is not None:  # SIGTERM / SIGINT: the Trainer saved checkpoint-<step> on the way out
        path = os.path.join(tcfg.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{stopping.stopped_at}")
        raise Preempted(
            f"{stop.name} received: stopped after update {stopping.stopped_at} of {max_steps} with checkpoint {path}. "
            "Resume with --resume_from_checkpoint latest."
        )
    if tcfg.stop_after_steps and trainer.state.global_step < max_steps:  # stopped on purpose, a checkpoint kept
        print(
            f"Stopped at update {trainer.state.global_step} of {max_steps}; continue with "
            "--training.resume_from_checkpoint latest"
        )
        return trainer.state.global_step
    return None


def metrics_function(task: Task, is_main_process: bool):
    """The Trainer's ``compute_metrics``: the task's metrics of the predicted classes, and a warning at every
    evaluation where the model predicts one class for every example."""

    def compute_metrics(prediction):
        predictions = prediction.predictions.argmax(-1)
        warning = collapsed_classifier(predictions, prediction.label_ids)
        if warning and is_main_process:  # said at every evaluation where it happens
            print(f"Warning: {warning}")
        return classification_metrics(predictions, prediction.label_ids, with_f1=task.with_f1)

    return compute_metrics


def finetune_guard(tcfg):
    from .loop import recipe_guard

    return recipe_guard(
        tcfg,
        resume_hint(
            "",
            "resume from a checkpoint-N of the run written before it with --training.resume_from_checkpoint, or start "
            "over with --training.overwrite_output_dir true, after changing one of these",
        ),
    )
