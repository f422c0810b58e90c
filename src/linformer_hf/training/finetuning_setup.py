"""The fine-tuning run's settings and directory: the recipe's ``training`` section as transformers'
`TrainingArguments`, the checkpoint a resumed run continues from, the output directory claimed as pretraining's is
(training/checkpointing.py: refused when it holds an earlier run's outputs unless ``training.overwrite_output_dir``,
locked until the end) once every check has passed, and the run's end."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from typing import Any

from .checkpointing import (
    FINETUNING,
    RECIPE_FILE,
    RESULTS_FILE,
    RunLock,
    check_finished_recipe,
    check_not_running,
    check_output_dir_unused,
    checkpoint_problem,
    claim_output_dir,
    is_run_debris,
    list_checkpoints,
    remove_checkpoints,
    resolve_checkpoint,
    set_aside_later_work,
)
from .config import ConfigError, FinetuneRecipe
from .loop import finish_trainer
from .tasks import TASKS
from .validation import runs_on_cpu


@dataclass
class RunSetup:
    args: Any  # transformers' TrainingArguments
    processes: Any  # accelerate's PartialState: which process is the main one
    lock: RunLock | None  # the output directory's (the main process holds it, once `claim_run` took it)
    checkpoint: str | None  # the checkpoint-N dir to resume from
    resuming: bool
    finished: str | None = None  # `latest` onto a finished run: its results file (`finished_run` judges the recipe)
    leftovers: list[str] = field(default_factory=list)  # checkpoints beside those results: `finished_run` removes them


def start_run(recipe: FinetuneRecipe, show_progress: bool = True) -> RunSetup:
    """The Trainer's settings and the checkpoint to resume from, the output directory checked (not held by a live
    run; empty, or resumed or overwritten): nothing is written, and the directory is claimed only by `claim_run`,
    once the model has been checked too."""
    from accelerate import PartialState

    tcfg = recipe.training
    # Making the settings sets up accelerate's process state as the Trainer uses it (its backend and timeout), which
    # says which process is the main one.
    args = training_arguments(recipe, show_progress)
    processes = PartialState()
    resuming = tcfg.resume_from_checkpoint is not None
    check_not_running(tcfg.output_dir, FINETUNING)  # a live run's folder: said as such, not as an earlier run's
    finished, leftovers = None, []
    if tcfg.resume_from_checkpoint == "latest":
        finished, leftovers = finished_results(tcfg.output_dir)
    checkpoint = None if finished else resolve_checkpoint(tcfg.resume_from_checkpoint, tcfg.output_dir, FINETUNING)
    check_output_dir_unused(tcfg.output_dir, resuming, tcfg.overwrite_output_dir, FINETUNING)
    return RunSetup(args, processes, None, checkpoint, resuming, finished, leftovers)


def finished_results(output_dir: str) -> tuple[str | None, list[str]]:
    """For ``resume_from_checkpoint latest``: the results file of the run that finished in ``output_dir`` (a requeued
    job runs the finished command again), and the checkpoints beside it (the run was killed after its results, while
    removing them, or they are torn: not resumed), or (None, []) where there is none, or where a complete checkpoint
    was written after it (a later run in the folder, which `latest` resumes). A folder with a finished run's other
    outputs, but neither its results nor a checkpoint, is refused: there is nothing to resume, and nothing to call
    complete."""
    results = os.path.join(output_dir, RESULTS_FILE)
    checkpoints = list_checkpoints(output_dir, FINETUNING)  # complete or not
    if not os.path.isfile(results):
        outputs = ("best", "predictions_validation.tsv", "predictions_test.tsv", RECIPE_FILE)
        found = [name for name in outputs if os.path.exists(os.path.join(output_dir, name))]
        if found and not checkpoints:
            raise ConfigError(
                f"{FINETUNING.resume} latest: {output_dir} holds a finished fine-tuning run's outputs "
                f"({', '.join(found)}) but not its {RESULTS_FILE} (deleted, or an older version, which removed the "
                f"checkpoints first, was killed while writing them), and no checkpoint: it is neither "
                f"complete nor resumable. Start over there with --{FINETUNING.overwrite} true (deletes those outputs), "
                f"or use another training.output_dir."
            )
        return None, []
    written = os.path.getmtime(results)
    if any(os.path.getmtime(path) > written and checkpoint_problem(path) is None for path in checkpoints):
        return None, []
    return results, checkpoints


def finished_run(recipe: FinetuneRecipe, run: RunSetup, fingerprint: dict | None) -> dict:
    """The results of the run that finished in the output directory (`finished_results`), when it was made with this
    recipe (``fingerprint``: checkpointing.recipe_fingerprint), said to be complete; nothing is written, except that
    checkpoints left beside the results are named and removed (`remove_leftovers`). Another recipe or schedule is
    refused (`check_finished_recipe`), and the folder left as it is."""
    tcfg, results = recipe.training, run.finished
    if fingerprint is None:  # a conversion to do again: the one the finished run made is no longer in converted/
        raise ConfigError(
            f"The run in {tcfg.output_dir} finished ({results}), but the model it converted is no longer in "
            f"{os.path.join(tcfg.output_dir, 'converted')}, so its recipe cannot be compared with this one. Start "
            f"over there with --{FINETUNING.overwrite} true, or use another training.output_dir."
        )
    check_finished_recipe(tcfg.output_dir, fingerprint, FINETUNING)
    try:
        with open(results, encoding="utf-8") as fh:
            result = json.load(fh)
        metric = TASKS[recipe.data.task].main_metric
        best = f", best {metric} {result['best'][metric]:.4f} at step {result['best']['step']}"
        steps = result["steps"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"The run in {tcfg.output_dir} finished, but its {results} is unreadable ({err}): start over there with "
            f"--{FINETUNING.overwrite} true, or use another training.output_dir."
        ) from None
    if run.processes.is_main_process:
        left = ""
        debris = [name for name in os.listdir(tcfg.output_dir) if is_run_debris(name, FINETUNING)]
        if run.leftovers or debris:  # the run was stopped after its results, while removing its checkpoints
            names = ", ".join([os.path.basename(path) for path in run.leftovers] + debris)
            remove_leftovers(tcfg.output_dir, run.leftovers, debris)
            left = (
                f" Removed beside it: {names}, older than its results (the run was stopped after writing them, "
                f"while removing its checkpoints, or they are torn): a finished run keeps none."
            )
        print(
            f"The run in {tcfg.output_dir} is complete ({results}: {steps} updates{best}): nothing to do. To run it "
            f"again, start over there with --{FINETUNING.overwrite} true in place of the resume (deletes its best "
            f"model, predictions and results), or give another training.output_dir.{left}",
            flush=True,
        )
    return result


def remove_leftovers(output_dir: str, checkpoints: list[str], debris: list[str]) -> None:
    """Remove the checkpoints a finished run left beside its results (`finished_results`), and what a kill left half
    deleted there (``debris``: ``.trash-checkpoint-N-<pid>``), under the folder's lock: what the run's end would have
    removed."""
    lock = RunLock.acquire(output_dir, FINETUNING)
    try:
        remove_checkpoints(checkpoints)
        for name in debris:
            path = os.path.join(output_dir, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.remove(path)
    finally:
        lock.release()


def claim_run(recipe: FinetuneRecipe, run: RunSetup) -> None:
    """The output directory: writable, this run's (or overwritten: the earlier run's outputs deleted), locked until
    the end. The Trainer's own checkpoint-N dirs and TensorBoard runs/ go inside it, so the policy and the lock cover
    them too. Called once every check of the inputs and the model has passed: a refused run leaves it as it was."""
    tcfg, dcfg, mcfg = recipe.training, recipe.data, recipe.model
    run.lock = claim_output_dir(
        tcfg.output_dir,
        resuming=run.resuming,
        overwrite=tcfg.overwrite_output_dir,
        is_main_process=run.processes.is_main_process,
        options=FINETUNING,
        inputs={
            "model.pretrained": mcfg.pretrained,
            "model.tokenizer": mcfg.tokenizer,
            "data.train_file": dcfg.train_file,
            "data.validation_file": dcfg.validation_file,
            "data.test_file": dcfg.test_file,
            "distillation.teacher": recipe.distillation.teacher,
        },
    )
    if run.checkpoint:
        # An earlier checkpoint of this folder branches off the later ones: set aside (as pretraining does), once
        # every process has found its checkpoint, so that `latest` follows the new path.
        run.processes.wait_for_everyone()
        if run.processes.is_main_process:
            aside = set_aside_later_work(tcfg.output_dir, run.checkpoint, lambda step: [])
            if aside:
                print(
                    f"Resuming {run.checkpoint}: the later checkpoints of this folder are moved to {aside}.", flush=True
                )


def training_arguments(recipe: FinetuneRecipe, show_progress: bool = True):
    """The recipe's ``training`` section as `TrainingArguments` (most fields carry the same names)."""
    from transformers import TrainingArguments

    tcfg, task = recipe.training, TASKS[recipe.data.task]
    # Evaluate every eval_steps updates, or at the end of every epoch; keep the best model by the task's metric.
    strategy = "steps" if tcfg.eval_steps else "epoch"
    # The whole model: Trainer's own option (Accelerate compiles the prepared model). Layers are compiled in place
    # by run_finetuning; null and no leave it to Trainer's default (the Accelerate config's dynamo settings).
    whole_model = tcfg.torch_compile == "model"
    return TrainingArguments(
        output_dir=tcfg.output_dir,  # checkpoint-N dirs while training (removed at the end), TensorBoard in runs/
        seed=tcfg.seed,
        per_device_train_batch_size=tcfg.per_device_train_batch_size,
        per_device_eval_batch_size=tcfg.per_device_eval_batch_size,
        gradient_accumulation_steps=tcfg.gradient_accumulation_steps,
        num_train_epochs=tcfg.num_train_epochs,
        max_steps=tcfg.max_steps or -1,
        learning_rate=tcfg.learning_rate,
        adam_beta1=tcfg.adam_beta1,
        adam_beta2=tcfg.adam_beta2,
        adam_epsilon=tcfg.adam_epsilon,
        weight_decay=tcfg.weight_decay,
        lr_scheduler_type=tcfg.lr_scheduler_type,
        warmup_steps=tcfg.warmup_ratio,  # a float in [0, 1): a share of the updates
        max_grad_norm=tcfg.max_grad_norm or 0.0,  # 0: no clipping
        **({"optim": tcfg.optim} if tcfg.optim else {}),  # null: the Trainer's default (fused)
        fp16=tcfg.mixed_precision == "fp16",
        bf16=tcfg.mixed_precision == "bf16",
        use_cpu=runs_on_cpu(),
        eval_strategy=strategy,
        eval_steps=tcfg.eval_steps,
        eval_on_start=tcfg.eval_on_start,
        save_strategy=strategy if tcfg.save_best else "no",
        save_steps=tcfg.eval_steps,
        # No save_total_limit: the Trainer's rotation deletes the older checkpoints before the new one is marked
        # complete. The completion-marker callback prunes them after its marker (finetuning_trainer.CHECKPOINTS_KEPT).
        save_only_model=False,  # optimizer, schedule and RNG states too: a run resumes exactly
        load_best_model_at_end=tcfg.save_best,
        metric_for_best_model=task.main_metric,
        logging_steps=tcfg.logging_steps,
        logging_first_step=False,
        report_to=tcfg.report_to or "none",
        disable_tqdm=not show_progress,
        dataloader_drop_last=False,
        torch_compile=whole_model,
        torch_compile_mode=tcfg.torch_compile_mode if whole_model else None,
        torch_compile_backend=tcfg.torch_compile_backend if whole_model else None,
    )


def end_run(run: RunSetup, trainer) -> None:
    """Tear the run down (`finish_trainer`) on every process together, then give the output directory back."""
    finish_trainer(trainer)
    if run.lock is not None:
        run.lock.release()
