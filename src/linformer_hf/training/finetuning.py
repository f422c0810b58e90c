"""Sequence-classification fine-tuning (SST-2, QNLI, QQP, IMDB, author attribution) on transformers' `Trainer`.

``python -m linformer_hf.training.finetune`` (and ``scripts/finetune.py``) run `run_finetuning`. The recipe's
``training`` section becomes `TrainingArguments` (`training_arguments`): the evaluation schedule (every epoch, or
every ``eval_steps``), keeping the best model by the task's metric, gradient accumulation, trackers (``report_to``,
TensorBoard under ``<output_dir>/runs``) and distribution (``torchrun`` / ``accelerate launch``) are the Trainer's.
What this module adds: the tasks' columns and files, the checks before any work, the conversion of RoBERTa to
Linformer or Performer, and the outputs the replication reads: ``<output_dir>/best`` (the best model),
``predictions_validation.tsv`` and ``predictions_test.tsv`` (the best model's predictions on ``data.test_file``, or
on the data set's test split for a task that names one: `Task.test_split`), and ``results.json`` (every evaluation,
the best, the test metrics with the inference time per example, the training loss per logged update, and
``warnings`` when the model kept predicts one class for every example: metrics.collapsed_classifier). The output
directory is claimed before any work as pretraining's is (training/checkpointing.py: refused when it holds an
earlier run's outputs unless ``training.overwrite_output_dir``, locked until the end). Every evaluation writes a
whole checkpoint (weights, optimizer, schedule, RNG states; the Trainer's ``checkpoint-N`` with checkpointing.py's
completion marker) that ``training.resume_from_checkpoint`` (``latest``: the newest complete one, or a
``checkpoint-N`` dir) continues from exactly; ``training.stop_after_steps`` stops a run there on purpose, and
SIGTERM / SIGINT stop it
after the current update with one (`errors.Preempted`: the command exits 75), as pretraining does. With
``distillation.teacher`` the student also learns from a frozen teacher classifier (training/distillation.py).

Differences from the Accelerate loop it replaced: with ``eval_steps`` the last update is evaluated only when it falls
on the schedule (or when no evaluation fell in the run), and ``mixed_precision`` comes from the recipe alone
(``fp16`` / ``bf16``), not from the Accelerate config file.
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import time

from ..loading import pad_as_the_model_takes
from ..outputs import write_json_atomic
from . import compiling
from .checkpointing import FINETUNING, claim_output_dir, resolve_checkpoint, write_completion_marker
from .config import ConfigError, FinetuneRecipe
from .errors import LOCAL_MODEL, Preempted, TrainingDiverged, hub_unreachable, hub_unreachable_error
from .guards import StopSignal, check_weights_finite, divergence_callback, resume_hint
from .metrics import classification_metrics, collapsed_classifier
from .tasks import TASKS, Task, with_classes_of
from .validation import (
    check_has_rows,
    check_labels,
    check_model_files,
    check_tokenizer_fits_model,
    unreadable_file_error,
    warn_if_mixed_precision_ignored,
)

logger = logging.getLogger(__name__)


def _load_file(path: str, split: str):
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    lower = path.lower()
    if lower.endswith(".tsv"):
        builder, options = "csv", {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    elif lower.endswith(".csv"):
        builder, options = "csv", {}
    elif lower.endswith((".json", ".jsonl")):
        builder, options = "json", {}
    else:
        raise ConfigError(f"Unsupported file type for {path}: use .tsv, .csv, .json or .jsonl.")
    check_has_rows(path, header_rows=1 if builder == "csv" else 0)
    try:
        return load_dataset(builder, data_files={split: path}, **options)[split]
    except DatasetGenerationError as err:  # e.g. bytes that are not UTF-8: said with the file and the line
        raise unreadable_file_error([path], err) from None


def check_columns(ds, task: Task, source: str, need_labels: bool = True):
    needed = list(task.text_columns) + ([task.label_column] if need_labels else [])
    missing = [c for c in needed if c not in ds.column_names]
    if missing:
        raise ConfigError(
            f"{source} lacks column(s) {missing} needed by this task; it has {ds.column_names}. "
            f"The task expects columns {needed}."
        )
    if task.label_column in ds.column_names:
        header_rows = (
            1 if source.lower().endswith((".csv", ".tsv")) else 0 if source.lower().endswith(".jsonl") else None
        )
        check_labels(ds, task.label_column, task.num_labels, source, header_rows)


def load_task_data(recipe: FinetuneRecipe) -> dict:
    """{"train", "validation", optionally "test"} datasets, columns checked. "test" is data.test_file, or the task's
    `Task.test_split` of data.dataset when the data set has that split."""
    dcfg, task = recipe.data, TASKS[recipe.data.task]
    seed = recipe.training.seed if dcfg.split_seed is None else dcfg.split_seed
    splits = {}
    if dcfg.train_file:
        splits["train"] = _load_file(dcfg.train_file, "train")
        task = with_classes_of(task, splits["train"], dcfg.train_file)
        check_columns(splits["train"], task, dcfg.train_file)
        if dcfg.validation_file:
            splits["validation"] = _load_file(dcfg.validation_file, "validation")
            check_columns(splits["validation"], task, dcfg.validation_file)
        else:
            parts = splits["train"].train_test_split(test_size=dcfg.validation_split_percentage / 100, seed=seed)
            splits["train"], splits["validation"] = parts["train"], parts["test"]
        if dcfg.test_file:
            splits["test"] = _load_file(dcfg.test_file, "test")
            check_columns(splits["test"], task, dcfg.test_file, need_labels=False)
    else:
        from datasets import load_dataset

        hub = dict(dcfg.dataset or task.hub)
        try:
            splits["train"] = load_dataset(**hub, split=task.train_split)
            splits["validation"] = load_dataset(**hub, split=task.eval_split)
            if task.test_split and task.test_split in _split_names(hub):
                splits["test"] = load_dataset(**hub, split=task.test_split)
        except ConnectionError as err:  # offline, or no network, and not cached: say so, with the local way
            columns = ", ".join([*task.text_columns, task.label_column])
            raise hub_unreachable_error(
                "data.dataset",
                hub.get("path"),
                err,
                "give local files instead, --data.train_file F --data.validation_file F "
                f"(.tsv, .csv or .json(l) with columns {columns})",
            ) from None
        # A task whose classes are the data's: the training split's ClassLabel, which `datasets` gives every split.
        task = with_classes_of(task, splits["train"], f"{hub} split train")
        for name, ds in splits.items():
            check_columns(ds, task, f"{hub} split {name}")
    if dcfg.max_train_samples is not None:
        splits["train"] = (
            splits["train"].shuffle(seed=seed).select(range(min(dcfg.max_train_samples, len(splits["train"]))))
        )
    if dcfg.max_eval_samples is not None:
        splits["validation"] = splits["validation"].select(range(min(dcfg.max_eval_samples, len(splits["validation"]))))
    return splits


def _split_names(hub: dict) -> list[str]:
    from datasets import get_dataset_split_names

    return get_dataset_split_names(hub["path"], hub.get("name"))


def label_names(ds, task: Task) -> list[str]:
    """The names of classes 0..num_labels-1 that the model is saved with (`id2label`), so that a pipeline says
    "positive", not "LABEL_1": the data set's own (a ClassLabel column, as the Hub's GLUE and IMDB have), else the
    task's (`Task.label_names`: a local file holds its classes by index), else the indices themselves ("0", "1")."""
    names = getattr(ds.features.get(task.label_column), "names", None)
    if names is None or len(names) != task.num_labels:
        names = task.label_names or [str(i) for i in range(task.num_labels)]
    return [str(name) for name in names]


def tokenize_task(splits: dict, tokenizer, task: Task, max_length: int, num_proc=None, say: bool = True) -> dict:
    """Each split tokenised to at most `max_length` tokens. Examples that are longer are cut (for pairs, the longer
    text first, as the tokenizer's `longest_first`), and how many were cut is reported, split by split (where
    ``say``: by the main process)."""

    def encode(batch):
        texts = [[("" if t is None else str(t)) for t in batch[c]] for c in task.text_columns]
        enc = tokenizer(*texts, truncation=True, max_length=max_length)
        full = [i for i, ids in enumerate(enc["input_ids"]) if len(ids) == max_length]  # only these can be cut
        enc["truncated"] = [False] * len(enc["input_ids"])
        if full:
            whole = tokenizer(*[[column[i] for i in full] for column in texts], truncation=False, verbose=False)
            for i, ids in zip(full, whole["input_ids"]):
                enc["truncated"][i] = len(ids) > max_length
        if task.label_column in batch:
            enc["labels"] = [int(x) for x in batch[task.label_column]]
        return enc

    out, cut = {}, []
    for name, ds in splits.items():
        encoded = ds.map(
            encode, batched=True, remove_columns=ds.column_names, num_proc=num_proc, desc=f"Tokenising {name}"
        )
        truncated = sum(encoded["truncated"])
        if truncated:
            cut.append(f"{truncated:,} of {len(encoded):,} {name} examples ({100 * truncated / len(encoded):.0f}%)")
        out[name] = encoded.remove_columns("truncated")
    if cut and say:
        print(
            f"Truncated to data.max_seq_length={max_length} tokens: {'; '.join(cut)}. The model reads only their "
            "first tokens; raise data.max_seq_length (up to the model's n) or convert at a larger n to read them whole."
        )
    return out


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
        fp16=tcfg.mixed_precision == "fp16",
        bf16=tcfg.mixed_precision == "bf16",
        eval_strategy=strategy,
        eval_steps=tcfg.eval_steps,
        eval_on_start=tcfg.eval_on_start,
        save_strategy=strategy if tcfg.save_best else "no",
        save_steps=tcfg.eval_steps,
        save_total_limit=1,
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


def evaluations(log_history: list[dict], task: Task) -> list[dict]:
    """The evaluations in a Trainer's log, as {metric: value, "step", "epoch"} (the Trainer prefixes eval_)."""
    names = ("accuracy", "f1") if task.with_f1 else ("accuracy",)
    return [
        {**{name: entry[f"eval_{name}"] for name in names}, "step": entry["step"], "epoch": entry["epoch"]}
        for entry in log_history
        if f"eval_{task.main_metric}" in entry
    ]


def run_finetuning(recipe: FinetuneRecipe, show_progress: bool = True) -> dict:
    """Fine-tune with transformers' `Trainer` as the recipe says; returns the evaluations, the best one, the test.

    Raises `TrainingDiverged` when the divergence guard stops the run, and `Preempted` after SIGTERM / SIGINT (the
    current update finished and a checkpoint written), as pretraining does.
    """
    stop = StopSignal().install()  # from the start: a signal during setup stops the run after its first update
    try:
        return _run_finetuning(recipe, show_progress, stop)
    finally:
        stop.restore()


def _run_finetuning(recipe: FinetuneRecipe, show_progress: bool, stop: StopSignal) -> dict:
    from accelerate import PartialState
    from transformers import (
        AutoConfig,
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        set_seed,
    )
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    from ..models import max_input_length
    from . import distillation

    tcfg, dcfg, mcfg = recipe.training, recipe.data, recipe.model
    # Checks on inputs first (files, columns, the teacher, config fields), before any model or training.
    splits = load_task_data(recipe)
    task = with_classes_of(TASKS[dcfg.task], splits["train"])
    distilling, record = recipe.distillation.teacher is not None, None
    if distilling:
        distillation.check_teacher(recipe.distillation, mcfg, task.num_labels)
    # The Trainer's settings; making them sets up accelerate's process state as the Trainer uses it (its backend and
    # timeout), which says which process is the main one.
    args = training_arguments(recipe, show_progress)
    processes = PartialState()
    # The output directory: writable, this run's (or overwritten), locked until the end. The Trainer's own
    # checkpoint-N dirs and TensorBoard runs/ go inside it, so the policy and the lock cover them too.
    resuming = tcfg.resume_from_checkpoint is not None
    lock = claim_output_dir(
        tcfg.output_dir,
        resuming=resuming,
        overwrite=tcfg.overwrite_output_dir,
        is_main_process=processes.is_main_process,
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
    checkpoint = resolve_checkpoint(tcfg.resume_from_checkpoint, tcfg.output_dir, FINETUNING)
    if mcfg.convert_from_roberta is not None:
        mcfg = convert_roberta_for_finetuning(mcfg, tcfg.output_dir, reuse=resuming)
    tok_dir = mcfg.tokenizer or mcfg.pretrained
    try:
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(f"No tokenizer in {tok_dir}; set model.tokenizer to a tokenizer dir. ({err})") from err
    config = AutoConfig.from_pretrained(mcfg.pretrained, num_labels=task.num_labels)
    check_model_files(mcfg.pretrained, "model.pretrained")
    unknown = sorted(set(mcfg.config) - set(config.to_dict()))
    if unknown:
        raise ConfigError(f"Unknown {type(config).__name__} field(s) {unknown} in model.config.")
    names = label_names(splits["train"], task)
    config.id2label, config.label2id = dict(enumerate(names)), {name: i for i, name in enumerate(names)}
    for k, v in mcfg.config.items():  # after the names: model.config.id2label / label2id in the recipe win
        setattr(config, k, v)
    if config.problem_type is None and task.num_labels > 1:
        # What transformers' classification heads set at their first call (integer labels): set here, a compiled
        # model does not recompile at the second update when the config changes under it.
        config.problem_type = "single_label_classification"
    check_tokenizer_fits_model(tokenizer, config, tok_dir, mcfg.pretrained, pairs=len(task.text_columns) == 2)
    pad_as_the_model_takes(tokenizer, config)  # the collator's batches, and the tokenizer saved with the model
    n = max_input_length(config)
    max_length = dcfg.max_seq_length or n
    if max_length > n:
        raise ConfigError(
            f"data.max_seq_length={max_length} is larger than the model's longest input n={n}: set "
            f"--data.max_seq_length {n} or less (null: the model's n), or fine-tune a model with a larger n."
        )
    if distilling:
        distillation.check_teacher_length(recipe.distillation.teacher, max_length)
        record = distillation.teacher_record(recipe.distillation)
    if resuming:
        distillation.check_resumed_teacher(tcfg.output_dir, record)
    elif distilling and processes.is_main_process:  # which teacher this run learns from
        write_json_atomic(os.path.join(tcfg.output_dir, distillation.RECORD_FILE), record)

    compiling.check_compile_device(tcfg.torch_compile, tcfg.torch_compile_mode, tcfg.torch_compile_backend, args.device)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    with args.main_process_first():
        encoded = tokenize_task(
            splits, tokenizer, task, max_length, dcfg.preprocessing_num_workers, say=processes.is_main_process
        )
    set_seed(tcfg.seed)  # the classification head's initialisation
    model = AutoModelForSequenceClassification.from_pretrained(mcfg.pretrained, config=config)
    if tcfg.torch_compile == "layers":
        compiling.compile_layers(model, tcfg.torch_compile_mode, tcfg.torch_compile_backend)
    compile_record = compile_record_callback() if compiling.compile_target(tcfg.torch_compile) != "no" else None

    def compute_metrics(prediction):
        predictions = prediction.predictions.argmax(-1)
        warning = collapsed_classifier(predictions, prediction.label_ids)
        if warning and processes.is_main_process:  # said at every evaluation where it happens
            print(f"Warning: {warning}")
        return classification_metrics(predictions, prediction.label_ids, with_f1=task.with_f1)

    # Before the divergence callback: a checkpoint the stop asks for is checked for non-finite weights as any other.
    stopping = stop_signal_callback(stop)
    guard = finetune_guard(tcfg)
    trainer_class, extra = Trainer, {}
    if distilling:
        trainer_class = distillation.DistillationTrainer
        extra = {"teacher": distillation.load_teacher(recipe.distillation.teacher), "distillation": recipe.distillation}
    trainer = trainer_class(
        model=model,
        args=args,
        train_dataset=encoded["train"],
        eval_dataset=encoded["validation"],
        data_collator=DataCollatorWithPadding(
            tokenizer, pad_to_multiple_of=8 if tcfg.mixed_precision in ("fp16", "bf16") else None
        ),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=[stopping, divergence_callback(guard), completion_marker_callback(processes)]
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
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    except TrainingDiverged:
        finish_trainer(trainer)  # every process raised at the same update: tear the group down together
        if lock is not None:
            lock.release()
        raise
    max_steps = trainer.state.max_steps
    if stopping.stopped_at is not None:  # SIGTERM / SIGINT: the Trainer saved checkpoint-<step> on the way out
        finish_trainer(trainer)
        if lock is not None:
            lock.release()
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
        finish_trainer(trainer)
        if lock is not None:
            lock.release()
        return {"stopped_at": trainer.state.global_step}

    # The validation predictions of the model kept (the best one, or the last without save_best), before anything is
    # written: a run that ended diverging (inside a streak of skipped updates, or with a non-finite validation loss)
    # publishes nothing.
    validation = trainer.predict(encoded["validation"])
    best_dir = os.path.join(tcfg.output_dir, "best")
    try:
        guard.check_finished(
            trainer.state.global_step,
            f"{best_dir} or results.json" if tcfg.save_best else "results.json",
            {"validation loss": validation.metrics["test_loss"]},
        )
    except TrainingDiverged:
        finish_trainer(trainer)
        if lock is not None:
            lock.release()
        raise
    # The Trainer's log: one entry per logged update ("loss") and one per evaluation ("eval_<metric>").
    if not evaluations(trainer.state.log_history, task):  # eval_steps beyond the last update: evaluate it once
        trainer.evaluate()
    history = evaluations(trainer.state.log_history, task)
    train_losses = {entry["step"]: entry["loss"] for entry in trainer.state.log_history if "loss" in entry}
    best = max(history, key=lambda h: h[task.main_metric])  # the first of equals, as the Trainer keeps it
    if tcfg.save_best:  # the Trainer has loaded the best checkpoint back (load_best_model_at_end)
        check_weights_finite(trainer.model, best_dir)
        trainer.save_model(best_dir)
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
    if distilling:
        result["distillation"] = record
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
        for name in os.listdir(tcfg.output_dir):  # the Trainer's checkpoints: the best one is in best_dir
            if name.startswith(PREFIX_CHECKPOINT_DIR + "-"):
                shutil.rmtree(os.path.join(tcfg.output_dir, name), ignore_errors=True)
        write_json_atomic(os.path.join(tcfg.output_dir, "results.json"), result)
        print(f"{dcfg.task}: best {task.main_metric} {best[task.main_metric]:.4f} at step {best['step']}")
    finish_trainer(trainer)
    if lock is not None:
        lock.release()
    return result


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


def completion_marker_callback(processes):
    """A `TrainerCallback` that writes the run directory's completion marker (training/checkpointing.py) into each
    ``checkpoint-N`` once every process has saved its files there: ``latest`` then never takes a checkpoint a kill
    cut short, and a corrupt one is refused, as for pretraining and transfer."""
    from transformers import TrainerCallback

    class MarkComplete(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            processes.wait_for_everyone()  # every process' files (its RNG state) are in the checkpoint
            path = FINETUNING.checkpoint_path(args.output_dir, state.global_step)
            if processes.is_main_process and os.path.isdir(path):
                write_completion_marker(path)
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


def convert_roberta_for_finetuning(mcfg, output_dir: str, reuse: bool = False):
    """Convert the RoBERTa checkpoint in ``mcfg.pretrained`` to the ``target`` family of ``mcfg.convert_from_roberta``
    (Linformer by default, or Performer) in ``<output_dir>/converted`` (once; ``reuse``: a resumed run takes the
    conversion its first part wrote)."""
    import dataclasses

    from accelerate import PartialState
    from huggingface_hub.errors import StrictDataclassError

    from ..conversion import convert_checkpoint

    target = os.path.join(output_dir, "converted")
    state = PartialState()
    with state.main_process_first():
        if state.is_main_process and not (reuse and os.path.isfile(os.path.join(target, "config.json"))):
            try:
                convert_checkpoint(mcfg.pretrained, target, **mcfg.convert_from_roberta)
            except (OSError, ValueError, StrictDataclassError) as err:
                if hub_unreachable(err):  # transformers' message names neither the model nor the way out
                    raise hub_unreachable_error("model.pretrained", mcfg.pretrained, err, LOCAL_MODEL) from None
                raise ConfigError(
                    f"Could not convert RoBERTa checkpoint {mcfg.pretrained}: {' '.join(str(err).split())}"
                ) from err
    tokenizer = mcfg.tokenizer
    if tokenizer is None and not any(os.path.exists(os.path.join(target, f)) for f in ("tokenizer.json", "vocab.json")):
        tokenizer = mcfg.pretrained
    return dataclasses.replace(mcfg, pretrained=target, tokenizer=tokenizer, convert_from_roberta=None)


def finish_trainer(trainer) -> None:
    """Tear the run down (loop.finish) once the Trainer no longer holds the DistributedDataParallel wrapper, so that
    the wrapper is freed while the process group still exists."""
    from .loop import finish

    trainer.model_wrapped = trainer.model
    finish(trainer.accelerator)


def _write_predictions(path: str, preds, labels):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("index\tprediction" + ("\tlabel" if labels is not None else "") + "\n")
        for i, p in enumerate(preds):
            fh.write(f"{i}\t{int(p)}" + (f"\t{int(labels[i])}" if labels is not None else "") + "\n")
