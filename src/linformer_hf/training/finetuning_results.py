"""What a fine-tuning run leaves: the model kept (the best by the task's metric, or the last without
``training.save_best``) in ``<output_dir>/best``, its predictions (``predictions_validation.tsv``,
``predictions_test.tsv``) and ``results.json`` (every evaluation, the best, the test metrics with the inference time
per example, the training loss per logged update, ``warnings`` when the model predicts one class for every example:
metrics.collapsed_classifier), written last, after the recipe it was made with (``recipe_fingerprint.json``, as a
checkpoint records it: a requeued ``latest`` finds the run complete only for that recipe). Each is whole or absent
(written aside, flushed, renamed), and the Trainer's checkpoints are removed only once all are: a kill before
results.json leaves the run resumable from its last checkpoint, one after it a complete run (whose leftover
checkpoints ``latest`` removes: finetuning_setup.finished_run). A run that ended diverging publishes nothing."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..outputs import write_json_atomic, write_text_atomic
from .checkpointing import (
    FINETUNING,
    RECIPE_FILE,
    RESULTS_FILE,
    list_checkpoints,
    publish_dir,
    remove_checkpoints,
    temporary_name,
)
from .config import FinetuneRecipe
from .guards import DivergenceGuard, check_weights_finite
from .metrics import classification_metrics, collapsed_classifier
from .tasks import Task

if TYPE_CHECKING:
    from .finetuning_model import Classifier


def write_results(
    recipe: FinetuneRecipe, task: Task, trainer, guard: DivergenceGuard, classifier: Classifier, compile_record
) -> dict:
    """Evaluate the model kept, save it and its predictions, write results.json, then remove the checkpoints; returns
    the results."""
    tcfg, dcfg, encoded = recipe.training, recipe.data, classifier.encoded
    # The validation predictions of the model kept (the best one, or the last without save_best), before anything is
    # written: a run that ended diverging (inside a streak of skipped updates, or with a non-finite validation loss)
    # publishes nothing.
    validation = trainer.predict(encoded["validation"])
    best_dir = os.path.join(tcfg.output_dir, "best")
    guard.check_finished(
        trainer.state.global_step,
        f"{best_dir} or {RESULTS_FILE}" if tcfg.save_best else RESULTS_FILE,
        {"validation loss": validation.metrics["test_loss"]},
    )
    # The Trainer's log: one entry per logged update ("loss") and one per evaluation ("eval_<metric>"). The
    # evaluation before the first update (eval_on_start) is of no model the run keeps: it is not one.
    if not trained_evaluations(trainer.state.log_history, task):  # eval_steps beyond the last update: evaluate it
        trainer.evaluate()
    history = evaluations(trainer.state.log_history, task)
    train_losses = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    best = kept_evaluation(trained_evaluations(trainer.state.log_history, task), trainer.state, tcfg.save_best, task)
    if tcfg.save_best:  # the Trainer has loaded the best checkpoint back (load_best_model_at_end)
        check_weights_finite(trainer.model, best_dir)
        staging = temporary_name(best_dir)  # .tmp-best: debris the next claim of the folder clears
        trainer.save_model(staging)
        if trainer.is_world_process_zero():
            publish_dir(staging, best_dir)  # flushed, then renamed: a kill leaves the whole best/ or none
    if trainer.is_world_process_zero():
        _write_predictions(
            os.path.join(tcfg.output_dir, "predictions_validation.tsv"),
            validation.predictions.argmax(-1),
            validation.label_ids,
        )
    result = {
        "task": dcfg.task,
        "best": best,
        "history": history,
        "steps": trainer.state.global_step,
        "train_losses": train_losses,
        "best_dir": best_dir if tcfg.save_best else None,
    }
    collapsed = collapsed_classifier(validation.predictions.argmax(-1), validation.label_ids)
    if collapsed:  # the model kept predicts one class: say so where the score is read
        result["warnings"] = [collapsed]
    if compile_record:
        result["compile"] = compile_record.record
    if recipe.distillation.teacher is not None:
        result["distillation"] = classifier.teacher_record
        result["train_terms"] = {  # the loss's terms per logged update (DistillationTrainer.log)
            entry["step"]: {name: entry[name] for name in ("task_loss", "kd_kl", "hidden_loss") if name in entry}
            for entry in trainer.state.log_history
            if "task_loss" in entry
        }
    if "test" in encoded:
        test = trainer.predict(encoded["test"])
        preds, labels = test.predictions.argmax(-1), test.label_ids
        if trainer.is_world_process_zero():
            _write_predictions(os.path.join(tcfg.output_dir, "predictions_test.tsv"), preds, labels)
        if labels is not None:
            result["test"] = classification_metrics(preds, labels, with_f1=task.with_f1)
            # Inference time of the kept model on the test split (padded batches of per_device_eval_batch_size, on
            # this process's device), per example: what reading an input of this length costs.
            result["test"]["examples"] = len(encoded["test"])
            result["test"]["seconds_per_example"] = test.metrics["test_runtime"] / max(1, len(encoded["test"]))
            collapsed = collapsed_classifier(preds, labels, split="test")
            if collapsed:
                result.setdefault("warnings", []).append(collapsed)
    if trainer.is_world_process_zero():
        # The recipe beside the results, then the results: a requeued job's `latest` finds the run complete
        # (finetuning_setup.finished_run) only for this recipe. Until results.json is on disk the checkpoints stay:
        # a kill before it costs only the run's end, which `latest` does again from the last one.
        write_json_atomic(os.path.join(tcfg.output_dir, RECIPE_FILE), classifier.fingerprint)
        write_json_atomic(os.path.join(tcfg.output_dir, RESULTS_FILE), result)
        # The Trainer's checkpoints last (the best one is in best_dir), each renamed aside before it is deleted.
        remove_checkpoints(list_checkpoints(tcfg.output_dir, FINETUNING))
        print(f"{dcfg.task}: best {task.main_metric} {best[task.main_metric]:.4f} at step {best['step']}")
    return result


def evaluations(log_history: list[dict], task: Task) -> list[dict]:
    """The evaluations in a Trainer's log, as {metric: value, "step", "epoch"} (the Trainer prefixes eval_)."""
    names = ("accuracy", "f1") if task.with_f1 else ("accuracy",)
    return [
        {**{name: entry[f"eval_{name}"] for name in names}, "step": entry["step"], "epoch": entry["epoch"]}
        for entry in log_history
        if f"eval_{task.main_metric}" in entry
    ]


def trained_evaluations(log_history: list[dict], task: Task) -> list[dict]:
    """The `evaluations` of the model being trained, after its first update: not the one before it (eval_on_start),
    which the Trainer neither checkpoints nor counts for its best model."""
    return [entry for entry in evaluations(log_history, task) if entry["step"] > 0]


def kept_evaluation(trained: list[dict], state, save_best: bool, task: Task) -> dict:
    """results.json's "best": with ``save_best``, the evaluation of the model the Trainer kept (its best checkpoint,
    loaded back into best/); else, or where that step was not evaluated, the best of ``trained`` (the first of
    equals, as the Trainer keeps it). Before, the best of every evaluation was reported, the one before the first
    update too: a run with eval_on_start reported that score while best/ held a worse model."""
    if save_best and state.best_global_step:
        kept = [entry for entry in trained if entry["step"] == state.best_global_step]
        if kept:
            return kept[0]
    return max(trained, key=lambda h: h[task.main_metric])


def _write_predictions(path: str, preds, labels):
    """One line per example (whole or absent: `write_text_atomic`)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    lines = ["index\tprediction" + ("\tlabel" if labels is not None else "")]
    for i, p in enumerate(preds):
        lines.append(f"{i}\t{int(p)}" + (f"\t{int(labels[i])}" if labels is not None else ""))
    write_text_atomic(path, "\n".join(lines) + "\n")
