"""The fine-tuning run's `Trainer` and its training: the metrics it evaluates, the divergence guard, the callbacks
that stop a run (SIGTERM / SIGINT, ``training.stop_after_steps``), mark each checkpoint complete and record what
``training.torch_compile`` compiled, and, with ``distillation.teacher``, the `distillation.DistillationTrainer`."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from . import compiling
from .checkpointing import FINETUNING, prune_checkpoints, write_completion_marker
from .config import FinetuneRecipe
from .errors import Preempted
from .guards import StopSignal, divergence_callback, resume_hint
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
    from transformers import DataCollatorWithPadding, Trainer

    tcfg = recipe.training
    compile_record = compile_record_callback() if compiling.compile_target(tcfg.torch_compile) != "no" else None
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
        data_collator=DataCollatorWithPadding(
            classifier.tokenizer, pad_to_multiple_of=8 if tcfg.mixed_precision in ("fp16", "bf16") else None
        ),
        processing_class=classifier.tokenizer,
        compute_metrics=metrics_function(task, run.processes.is_main_process),
        # The stop first: a checkpoint it asks for is checked for non-finite weights as any other.
        callbacks=[stopping, divergence_callback(guard), completion_marker_callback(run.processes, CHECKPOINTS_KEPT)]
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


def completion_marker_callback(processes, limit: int | None = None):
    """A `TrainerCallback` that writes the run directory's completion marker (training/checkpointing.py) into each
    ``checkpoint-N`` once every process has saved its files there: ``latest`` then never takes a checkpoint a kill
    cut short, and a corrupt one is refused, as for pretraining and transfer. Then it keeps the newest ``limit``
    complete checkpoints and the best one (`prune_checkpoints`; None: all), in place of the Trainer's
    ``save_total_limit``, whose rotation deletes the older ones before the marker: a kill there left none complete."""
    from transformers import TrainerCallback

    class MarkComplete(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            processes.wait_for_everyone()  # every process' files (its RNG state) are in the checkpoint
            path = FINETUNING.checkpoint_path(args.output_dir, state.global_step)
            if processes.is_main_process and os.path.isdir(path):
                write_completion_marker(path)
                prune_checkpoints(args.output_dir, limit, FINETUNING, keep=state.best_model_checkpoint)
            processes.wait_for_everyone()
            return control

    return MarkComplete()


def stop_after_steps_callback(steps: int):
    """A `TrainerCallback` that stops training after ``steps`` updates with a checkpoint, as an interruption would."""
    from transformers import TrainerCallback

    class StopAfterSteps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= steps:
                control.should_training_stop = True
                control.should_save = True
            return control

    return StopAfterSteps()


def stop_signal_callback(stop: StopSignal):
    """A `TrainerCallback` that ends training after the update during which SIGTERM / SIGINT came (`StopSignal`,
    agreed over the processes of its `accelerator`, set once the Trainer has made one), with a checkpoint;
    `stopped_at` then holds that update.

    A signal during the last update is left to the end of the run: the run has no update left to lose, and what is
    left (the last evaluation, best/, the predictions) is what a resume from that checkpoint would do.
    """
    from transformers import TrainerCallback

    class StopOnSignal(TrainerCallback):
        accelerator = None
        stopped_at: int | None = None

        def on_step_end(self, args, state, control, **kwargs):
            # Every process reads the flag at the same point (an all-reduce with several): all stop together.
            if state.global_step < state.max_steps and stop.requested(self.accelerator):
                control.should_training_stop = True
                control.should_save = True
                self.stopped_at = state.global_step
            return control

    return StopOnSignal()


def compile_record_callback():
    """A `TrainerCallback` for ``training.torch_compile``: its ``record`` gets the first update's seconds (the compile
    time with it) and the graphs compiled during that update and during later ones (evaluations, which compile their
    own, not counted: a later update that compiles is a recompilation)."""
    from transformers import TrainerCallback

    class CompileRecord(TrainerCallback):
        def __init__(self):
            self.record: dict = {}

        def on_train_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_begin(self, args, state, control, **kwargs):
            self.graphs = compiling.compiled_graphs()

        def on_step_end(self, args, state, control, **kwargs):
            graphs = compiling.compiled_graphs() - self.graphs
            if "first_update_seconds" not in self.record:
                seconds = time.perf_counter() - self.started
                self.record.update(first_update_seconds=seconds, first_update_graphs=graphs, later_update_graphs=0)
                if state.is_world_process_zero:
                    print(f"compiled: the first update took {seconds:.1f} s ({graphs} graph(s) compiled)")
            else:
                self.record["later_update_graphs"] += graphs

    return CompileRecord()
