"""Sequence-classification fine-tuning (SST-2, QNLI, QQP, IMDB, author attribution) on transformers' `Trainer`.

``python -m linformer_hf.training.finetune`` (and ``scripts/finetune.py``) run `run_finetuning`. The recipe's
``training`` section becomes `TrainingArguments` (`training_arguments`): the evaluation schedule (every epoch, or
every ``eval_steps``), keeping the best model by the task's metric, gradient accumulation, trackers (``report_to``,
TensorBoard under ``<output_dir>/runs``) and distribution (``torchrun`` / ``accelerate launch``) are the Trainer's.
What the run adds: the tasks' columns and files, the checks before any work, the conversion of RoBERTa to
Linformer or Performer, and the outputs the replication reads: ``<output_dir>/best`` (the best model),
``predictions_validation.tsv`` and ``predictions_test.tsv`` (the best model's predictions on ``data.test_file``, or
on the data set's test split for a task that names one: `Task.test_split`), and ``results.json`` (every evaluation,
the best, the test metrics with the inference time per example, the training loss per logged update, and
``warnings`` when the model kept predicts one class for every example: metrics.collapsed_classifier). The output
directory is claimed once the inputs and the model are checked, before any work, as pretraining's is
(training/checkpointing.py: refused when it holds an earlier run's outputs unless ``training.overwrite_output_dir``,
locked until the end). Every evaluation writes a
whole checkpoint (weights, optimizer, schedule, RNG states; the Trainer's ``checkpoint-N`` with checkpointing.py's
completion marker) that ``training.resume_from_checkpoint`` (``latest``: the newest complete one, or a
``checkpoint-N`` dir) continues from exactly; ``training.stop_after_steps`` stops a run there on purpose, and
SIGTERM / SIGINT stop it after the current update with one (`errors.Preempted`: the command exits 75), as pretraining
does. With ``distillation.teacher`` the student also learns from a frozen teacher classifier
(training/distillation.py).

Differences from the Accelerate loop it replaced: with ``eval_steps`` the last update is evaluated only when it falls
on the schedule (or when no evaluation fell in the run), and ``mixed_precision`` comes from the recipe alone
(``fp16`` / ``bf16``), not from the Accelerate config file.

The run reads top-down in `run_finetuning`, one step per module, each returning what the next takes:

1. `finetuning_data.load_task`: the task's splits read and checked (files or the Hub, columns, labels; a data set
   built for its task, by its manifest and tokenizer), its classes and their names; with a teacher,
   `distillation.check_teacher`. Nothing is written before these checks and the next two.
2. `finetuning_setup.start_run`: `TrainingArguments` from the recipe, the checkpoint to resume from, the output
   directory checked (not a live run's; empty unless resumed or overwritten). ``latest`` onto a run that finished
   there (a requeued job) finds its results instead: `finetuning_setup.finished_run` says it is complete, and does
   nothing else, once step 3 has found the recipe the one it recorded (another is refused).
3. `finetuning_model.check_model`: the model, its tokenizer and config checked against each other and the recipe
   (a conversion's source and settings against the config it will give), the teacher against the length, a resumed
   checkpoint's recipe against this one. Then `finetuning_setup.claim_run`: the output directory claimed and locked
   (an overwrite deletes the earlier run's outputs), so a run refused for its model leaves them as they were.
   `finetuning_model.load_classifier`: the conversion (where the recipe asks for one), the teacher recorded, the
   splits tokenised, the model's weights read and its classification head initialised.
4. `finetuning_trainer.build_trainer` and `finetuning_trainer.train`: the Trainer with its callbacks, and its run.
5. `finetuning_results.write_results`: best/, the predictions and results.json, each whole or absent, then the
   checkpoints removed (a kill before results.json leaves the run resumable).
6. `finetuning_setup.end_run`: the process group torn down and the directory's lock released, also when the run
   stops early (a signal, divergence).

The step modules call only shared modules (tasks, validation, checkpointing, guards, compiling, metrics,
distillation, loop), never each other or this one: a step is read in its own module, then the next.
"""

from __future__ import annotations

from .config import FinetuneRecipe
from .errors import Preempted, TrainingDiverged
from .finetuning_data import label_names, load_task, load_task_data
from .finetuning_model import check_model, load_classifier, tokenize_task
from .finetuning_results import write_results
from .finetuning_setup import claim_run, end_run, finished_run, start_run, training_arguments
from .finetuning_trainer import build_trainer, train
from .guards import StopSignal, stop_signal_callback
from .tasks import TASKS

__all__ = ["TASKS", "label_names", "load_task_data", "run_finetuning", "tokenize_task", "training_arguments"]


def run_finetuning(recipe: FinetuneRecipe, show_progress: bool = True) -> dict:
    """Fine-tune with transformers' `Trainer` as the recipe says; returns the evaluations, the best one, the test.

    Raises `TrainingDiverged` when the divergence guard stops the run, and `Preempted` after SIGTERM / SIGINT (the
    current update finished and a checkpoint written), as pretraining does.
    """
    stop = StopSignal().install()  # from the start: a signal during setup stops the run after its first update
    try:
        # Checks on inputs first (files, columns, the teacher, the model and its tokenizer), before any output, model
        # or training: the output directory is claimed (an overwrite deletes the earlier run's outputs) only then.
        data = load_task(recipe)
        if recipe.distillation.teacher is not None:
            from . import distillation

            distillation.check_teacher(recipe.distillation, recipe.model, data.task.num_labels, data.class_names)
        run = start_run(recipe, show_progress)
        checked = check_model(recipe, data, run)
        if run.finished:  # `latest` onto a finished run: complete if of this recipe (nothing claimed or written)
            return finished_run(recipe, run, checked.fingerprint)
        claim_run(recipe, run)
        classifier = load_classifier(recipe, data, run, checked)
        stopping = stop_signal_callback(stop)
        trainer, guard, compile_record = build_trainer(recipe, data.task, run, classifier, stopping)
        try:
            stopped_at = train(trainer, run.checkpoint, stopping, stop, recipe.training)
            if stopped_at is not None:
                result = {"stopped_at": stopped_at}
            else:
                result = write_results(recipe, data.task, trainer, guard, classifier, compile_record)
        except (TrainingDiverged, Preempted):
            end_run(run, trainer)  # every process raised at the same update: tear the group down together
            raise
        end_run(run, trainer)
        return result
    finally:
        stop.restore()
