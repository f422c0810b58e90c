"""Sequence-classification fine-tuning (SST-2, QNLI, QQP, IMDB) with Accelerate: the loop behind scripts/finetune.py."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader

from .checkpointing import claim_output_dir
from .config import ConfigError, FinetuneRecipe
from .metrics import classification_metrics
from .validation import check_labels, warn_if_mixed_precision_ignored

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    text_columns: tuple  # one column (single sentences) or two (pairs)
    hub: dict | None  # load_dataset kwargs for the Hub version
    train_split: str
    eval_split: str
    main_metric: str = "accuracy"
    with_f1: bool = False
    num_labels: int = 2
    label_column: str = "label"


TASKS = {
    "sst2": Task(("sentence",), {"path": "glue", "name": "sst2"}, "train", "validation"),
    "qnli": Task(("question", "sentence"), {"path": "glue", "name": "qnli"}, "train", "validation"),
    "qqp": Task(("question1", "question2"), {"path": "glue", "name": "qqp"}, "train", "validation", with_f1=True),
    "imdb": Task(("text",), {"path": "imdb"}, "train", "test"),
}


def _load_file(path: str, split: str):
    from datasets import load_dataset

    lower = path.lower()
    if lower.endswith(".tsv"):
        return load_dataset("csv", data_files={split: path}, delimiter="\t", quoting=csv.QUOTE_NONE)[split]
    if lower.endswith(".csv"):
        return load_dataset("csv", data_files={split: path})[split]
    if lower.endswith((".json", ".jsonl")):
        return load_dataset("json", data_files={split: path})[split]
    raise ConfigError(f"Unsupported file type for {path}: use .tsv, .csv, .json or .jsonl.")


def check_columns(ds, task: Task, source: str, need_labels: bool = True):
    needed = list(task.text_columns) + ([task.label_column] if need_labels else [])
    missing = [c for c in needed if c not in ds.column_names]
    if missing:
        raise ConfigError(f"{source} lacks column(s) {missing} needed by this task; it has {ds.column_names}. "
                          f"The task expects columns {needed}.")
    if task.label_column in ds.column_names:
        header_rows = 1 if source.lower().endswith((".csv", ".tsv")) else 0 if source.lower().endswith(".jsonl") else None
        check_labels(ds, task.label_column, task.num_labels, source, header_rows)


def load_task_data(recipe: FinetuneRecipe) -> dict:
    """{"train", "validation", optionally "test"} datasets, columns checked."""
    dcfg, task = recipe.data, TASKS[recipe.data.task]
    seed = recipe.training.seed
    splits = {}
    if dcfg.train_file:
        splits["train"] = _load_file(dcfg.train_file, "train")
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
        splits["train"] = load_dataset(**hub, split=task.train_split)
        splits["validation"] = load_dataset(**hub, split=task.eval_split)
        for name, ds in splits.items():
            check_columns(ds, task, f"{hub} split {name}")
    if dcfg.max_train_samples is not None:
        splits["train"] = splits["train"].shuffle(seed=seed).select(range(min(dcfg.max_train_samples, len(splits["train"]))))
    if dcfg.max_eval_samples is not None:
        splits["validation"] = splits["validation"].select(range(min(dcfg.max_eval_samples, len(splits["validation"]))))
    return splits


def tokenize_task(splits: dict, tokenizer, task: Task, max_length: int, num_proc=None) -> dict:
    def encode(batch):
        texts = [[("" if t is None else str(t)) for t in batch[c]] for c in task.text_columns]
        enc = tokenizer(*texts, truncation=True, max_length=max_length)
        if task.label_column in batch:
            enc["labels"] = [int(x) for x in batch[task.label_column]]
        return enc

    out = {}
    for name, ds in splits.items():
        out[name] = ds.map(encode, batched=True, remove_columns=ds.column_names, num_proc=num_proc,
                           desc=f"Tokenising {name}")
    return out


@torch.no_grad()
def predict(model, dataloader, accelerator):
    model.eval()
    preds, labels = [], []
    for batch in dataloader:
        batch_labels = batch.pop("labels", None)
        logits = model(**batch).logits
        p = logits.argmax(dim=-1)
        if batch_labels is None:
            p = accelerator.gather_for_metrics(p)
        else:
            p, batch_labels = accelerator.gather_for_metrics((p, batch_labels))
            labels.append(batch_labels.cpu().numpy())
        preds.append(p.cpu().numpy())
    model.train()
    return np.concatenate(preds), (np.concatenate(labels) if labels else None)


def run_finetuning(recipe: FinetuneRecipe, show_progress: bool = True) -> dict:
    import linformer_hf  # noqa: F401  (registers Linformer with the Auto classes)
    from accelerate import Accelerator
    from accelerate.utils import ProjectConfiguration, set_seed
    from tqdm.auto import tqdm
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding
    from transformers import get_scheduler

    from ..models import max_input_length
    from .pretraining import build_optimizer, finish, optimizer_step

    tcfg, dcfg, mcfg = recipe.training, recipe.data, recipe.model
    task = TASKS[dcfg.task]
    # Checks on inputs first (files, columns, config fields), before any model or training.
    splits = load_task_data(recipe)
    lock = claim_output_dir(tcfg.output_dir, resuming=False, overwrite=tcfg.overwrite_output_dir,
                            is_main_process=int(os.environ.get("RANK", "0")) == 0)
    if mcfg.convert_from_roberta is not None:
        mcfg = convert_roberta_for_finetuning(mcfg, tcfg.output_dir)
    tok_dir = mcfg.tokenizer or mcfg.pretrained
    try:
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(f"No tokenizer in {tok_dir}; set model.tokenizer to a tokenizer dir. ({err})") from err
    config = AutoConfig.from_pretrained(mcfg.pretrained, num_labels=task.num_labels)
    unknown = sorted(set(mcfg.config) - set(config.to_dict()))
    if unknown:
        raise ConfigError(f"Unknown {type(config).__name__} field(s) {unknown} in model.config.")
    for k, v in mcfg.config.items():
        setattr(config, k, v)
    n = max_input_length(config)
    max_length = dcfg.max_seq_length or n
    if max_length > n:
        raise ConfigError(f"data.max_seq_length={max_length} is larger than the model's longest input n={n}.")

    accelerator = Accelerator(
        gradient_accumulation_steps=tcfg.gradient_accumulation_steps,
        mixed_precision=tcfg.mixed_precision,
        log_with=tcfg.report_to or None,
        project_config=ProjectConfiguration(project_dir=tcfg.output_dir, logging_dir=os.path.join(tcfg.output_dir, "logs")),
    )
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    warn_if_mixed_precision_ignored(accelerator)
    set_seed(tcfg.seed)
    with accelerator.main_process_first():
        encoded = tokenize_task(splits, tokenizer, task, max_length, dcfg.preprocessing_num_workers)
    model = AutoModelForSequenceClassification.from_pretrained(mcfg.pretrained, config=config)

    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8 if accelerator.mixed_precision != "no" else None)
    train_dl = DataLoader(encoded["train"], batch_size=tcfg.per_device_train_batch_size, shuffle=True,
                          collate_fn=collator)
    eval_dl = DataLoader(encoded["validation"], batch_size=tcfg.per_device_eval_batch_size, collate_fn=collator)
    test_dl = (DataLoader(encoded["test"], batch_size=tcfg.per_device_eval_batch_size, collate_fn=collator)
               if "test" in encoded else None)
    optimizer = build_optimizer(model, tcfg)
    model, optimizer, train_dl, eval_dl = accelerator.prepare(model, optimizer, train_dl, eval_dl)
    if test_dl is not None:
        test_dl = accelerator.prepare(test_dl)

    updates_per_epoch = math.ceil(len(train_dl) / tcfg.gradient_accumulation_steps)
    max_steps = tcfg.max_steps or int(math.ceil(tcfg.num_train_epochs * updates_per_epoch))
    num_epochs = math.ceil(max_steps / updates_per_epoch)
    scheduler = get_scheduler(tcfg.lr_scheduler_type, optimizer, num_warmup_steps=int(tcfg.warmup_ratio * max_steps),
                              num_training_steps=max_steps)
    if tcfg.report_to:
        flat = {f"{s}.{k}": (v if isinstance(v, (int, float, str, bool)) else str(v))
                for s, sec in asdict(recipe).items() for k, v in sec.items()}
        accelerator.init_trackers(f"finetune_{dcfg.task}", config=flat)

    best_dir = os.path.join(tcfg.output_dir, "best")
    best, history = None, []
    completed = 0
    progress = tqdm(total=max_steps, disable=not (show_progress and accelerator.is_local_main_process),
                    desc=f"finetune {dcfg.task}", dynamic_ncols=True)

    def evaluate_and_keep(epoch):
        nonlocal best
        preds, labels = predict(model, eval_dl, accelerator)
        metrics = classification_metrics(preds, labels, with_f1=task.with_f1)
        metrics.update(step=completed, epoch=epoch)
        history.append(metrics)
        accelerator.print(f"{dcfg.task} step {completed}: " + ", ".join(
            f"{k} {v:.4f}" for k, v in metrics.items() if k not in ("step", "epoch")))
        if tcfg.report_to:
            accelerator.log({f"eval/{k}": v for k, v in metrics.items()}, step=completed)
        if best is None or metrics[task.main_metric] > best[task.main_metric]:
            best = dict(metrics)
            if tcfg.save_best:
                accelerator.wait_for_everyone()
                accelerator.unwrap_model(model).save_pretrained(
                    best_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save)
                if accelerator.is_main_process:
                    tokenizer.save_pretrained(best_dir)
                    _write_predictions(os.path.join(tcfg.output_dir, "predictions_validation.tsv"), preds, labels)

    model.train()
    for epoch in range(num_epochs):
        for batch in train_dl:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer_step(accelerator, model, optimizer, scheduler, tcfg.max_grad_norm)
            if not accelerator.sync_gradients:
                continue
            completed += 1
            progress.update(1)
            if completed % tcfg.logging_steps == 0:
                mean_loss = accelerator.reduce(loss.detach(), reduction="mean").item()
                progress.set_postfix(loss=f"{mean_loss:.4f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
                if tcfg.report_to:
                    accelerator.log({"train/loss": mean_loss, "train/lr": scheduler.get_last_lr()[0]}, step=completed)
            if tcfg.eval_steps and completed % tcfg.eval_steps == 0:
                evaluate_and_keep(epoch)
            if completed >= max_steps:
                break
        if not tcfg.eval_steps or completed >= max_steps:
            if not history or history[-1]["step"] != completed:
                evaluate_and_keep(epoch)
        if completed >= max_steps:
            break
    progress.close()

    result = {"task": dcfg.task, "best": best, "history": history, "steps": completed,
              "best_dir": best_dir if tcfg.save_best else None}
    if test_dl is not None:
        if tcfg.save_best:  # predict the test file with the best checkpoint
            state = AutoModelForSequenceClassification.from_pretrained(best_dir).state_dict()
            accelerator.unwrap_model(model).load_state_dict(state)
        preds, labels = predict(model, test_dl, accelerator)
        if accelerator.is_main_process:
            _write_predictions(os.path.join(tcfg.output_dir, "predictions_test.tsv"), preds, labels)
        if labels is not None:
            result["test"] = classification_metrics(preds, labels, with_f1=task.with_f1)
    if accelerator.is_main_process:
        os.makedirs(tcfg.output_dir, exist_ok=True)
        with open(os.path.join(tcfg.output_dir, "results.json"), "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    accelerator.print(f"{dcfg.task}: best {task.main_metric} {best[task.main_metric]:.4f} at step {best['step']}")
    finish(accelerator)
    if lock is not None:
        lock.release()
    return result


def convert_roberta_for_finetuning(mcfg, output_dir: str):
    """Convert the RoBERTa checkpoint in ``mcfg.pretrained`` to a Linformer in ``<output_dir>/converted`` (once)."""
    import dataclasses

    from accelerate import PartialState
    from huggingface_hub.errors import StrictDataclassError

    from ..conversion import convert_checkpoint

    target = os.path.join(output_dir, "converted")
    state = PartialState()
    with state.main_process_first():
        if state.is_main_process:
            try:
                convert_checkpoint(mcfg.pretrained, target, **mcfg.convert_from_roberta)
            except (OSError, ValueError, StrictDataclassError) as err:
                raise ConfigError(f"Could not convert RoBERTa checkpoint {mcfg.pretrained}: "
                                  f"{' '.join(str(err).split())}") from err
    tokenizer = mcfg.tokenizer
    if tokenizer is None and not any(os.path.exists(os.path.join(target, f)) for f in ("tokenizer.json", "vocab.json")):
        tokenizer = mcfg.pretrained
    return dataclasses.replace(mcfg, pretrained=target, tokenizer=tokenizer, convert_from_roberta=None)


def _write_predictions(path: str, preds, labels):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("index\tprediction" + ("\tlabel" if labels is not None else "") + "\n")
        for i, p in enumerate(preds):
            fh.write(f"{i}\t{int(p)}" + (f"\t{int(labels[i])}" if labels is not None else "") + "\n")
