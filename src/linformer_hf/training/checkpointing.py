"""The run directory: the one mechanism pretraining, fine-tuning and attention transfer use for who may write there,
how a checkpoint is written so that a kill at any moment leaves the previous one usable, which one a resume takes,
and how many are kept.

- **One writer.** A run holds ``<output_dir>/.run.lock`` (an ``flock`` plus the holder's pid, host and command) from
  before its first write to its end. The kernel drops the lock when the holder dies, however it dies, so a killed
  run's lock is taken over (with a warning), while a live one (including the training process that a SIGKILLed
  ``accelerate launch`` leaves running) stops a second run with its pid.
- **Whose directory.** A non-empty output directory belongs to an earlier run: it is refused unless the run resumes
  or says it overwrites, which deletes the earlier run's checkpoints, final model and logs first (`claim_output_dir`;
  `RunOptions` says how each command spells those options and what it writes).
- **Complete checkpoints.** Pretraining's, fine-tuning's and attention transfer's checkpoints are the Trainer's
  ``checkpoint-N``: the Trainer writes them, and once every process has, a completion marker (each file's size and
  sha256) is written last (`mark_checkpoint_complete`). A checkpoint without its marker (torn), or that fails it
  (corrupted later), is skipped by ``latest`` with a warning, which falls back to the newest complete checkpoint
  (`resolve_checkpoint`).
- **Pruning.** `prune_checkpoints` keeps the newest complete checkpoints up to a limit (and the best one, for
  fine-tuning), called only once the newest is complete: not the Trainer's rotation (``save_total_limit``), which
  deletes the older ones before the new one is marked.
- **Recipe on resume** (pretraining, fine-tuning, attention transfer). Each checkpoint records the recipe it was made
  with (model config, tokenizer, data, seed, batch). Resuming with another model, tokenizer, data, seed or batch is
  refused, naming what differs; a changed optimisation schedule only warns. A finished fine-tuning run, which keeps no
  checkpoint, records its recipe beside ``results.json``: ``latest`` finds it complete only for that recipe and
  schedule (`check_finished_recipe`).
- **Update log.** ``train_log.jsonl`` gets one line per update (step, loss, learning rate), flushed at once, so the
  losses of a killed segment survive it.

Why own code and not a library's (measured against the versions installed, filelock 4.3 and accelerate 1.15):

- The lock is ``fcntl.flock`` as `filelock` takes it on Unix, but its file also holds the holder's record, which the
  refusal names and the take-over warning reads. `filelock` has a hook to write into the held file only from 3.30
  (``on_acquired``), while the dependencies accept any filelock >= 3.10, so `RunLock` stays own code.
- ``Accelerator.save_state`` with ``automatic_checkpoint_naming`` and ``total_limit`` writes straight into
  ``checkpoints/checkpoint_<i>`` (a kill leaves a torn checkpoint under the name a resume takes), deletes the oldest
  before the new one is written (a kill then leaves fewer checkpoints than the limit), counts torn ones as kept, and
  numbers checkpoints by save, not by update; the Trainer's ``save_total_limit`` rotates before the marker is written.
  So the marker and the pruning are ours, after the Trainer's save.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import sys
import time

from ..outputs import finite_or_null, fsync_path, write_json_atomic
from .errors import ConfigError, OutputDirInUse

logger = logging.getLogger(__name__)

STATE_FILE = "trainer_state.json"  # the Trainer's state in its checkpoint-N (transformers' TRAINER_STATE_NAME)
RECIPE_FILE = "recipe_fingerprint.json"  # what the checkpoint (or a finished fine-tuning run) was made with
RESULTS_FILE = "results.json"  # a fine-tuning run's results: written last, its presence says the run finished
COMPLETE_MARKER = "checkpoint_complete.json"  # written last: size and sha256 of every other file
LOCK_FILE = ".run.lock"
UPDATE_LOG = "train_log.jsonl"
TMP_PREFIX = ".tmp-"  # a checkpoint being written
TRASH_PREFIX = ".trash-"  # a checkpoint being deleted
# What a run writes in its output directory; an overwrite deletes these (and nothing else) of the earlier run.
RUN_OUTPUTS = (
    "checkpoints",
    "final",
    "logs",
    UPDATE_LOG,  # pretraining
    "best",
    "converted",
    RESULTS_FILE,
    RECIPE_FILE,  # beside a finished fine-tuning run's results (in a checkpoint-N otherwise)
    "predictions_validation.tsv",
    "predictions_test.tsv",  # fine-tuning
    "runs",
    "distillation.json",  # fine-tuning with a teacher: which teacher (training/distillation.py)
)  # fine-tuning: the Trainer's TensorBoard logs
# summary_step<N>.json: pretraining; checkpoint-<N>: the Trainer's checkpoints (transformers' PREFIX_CHECKPOINT_DIR),
# left in a fine-tuning run's output_dir when it was killed before its end
RUN_OUTPUT_PATTERNS = (r"summary_step\d+\.json", r"checkpoint-\d+")


# ----------------------------------------------------------------------------------------------------------------
# Durable writes
# ----------------------------------------------------------------------------------------------------------------


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _files_under(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


def _remove_dir(path: str) -> None:
    """Delete a directory so that no half-deleted one is left under its name: rename it aside first."""
    if not os.path.exists(path):
        return
    parent, name = os.path.split(path)
    trash = os.path.join(parent, f"{TRASH_PREFIX}{name}-{os.getpid()}")
    os.replace(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def publish_dir(tmp: str, final: str) -> None:
    """fsync every file under ``tmp``, then rename it to ``final`` (replacing a torn or older one)."""
    for rel in _files_under(tmp):
        fsync_path(os.path.join(tmp, rel))
    fsync_path(tmp)
    _remove_dir(final)
    os.replace(tmp, final)
    fsync_path(os.path.dirname(os.path.abspath(final)))


def temporary_name(path: str) -> str:
    parent, name = os.path.split(path)
    return os.path.join(parent, TMP_PREFIX + name)


# ----------------------------------------------------------------------------------------------------------------
# What each command calls its options and writes
# ----------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a command names its run-directory options in its messages, what an overwrite deletes of an earlier run,
    and where its checkpoints are and how they are named. The defaults are the training recipes' (pretraining), whose
    checkpoints are the Trainer's ``checkpoint-N`` in the output directory itself (its PREFIX_CHECKPOINT_DIR)."""

    output_dir: str = "training.output_dir"  # the option, as the messages name it
    assign: str = "="  # between option and value in the messages: training.output_dir=X, --output_dir X
    resume: str = "--resume_from_checkpoint"
    overwrite: str = "training.overwrite_output_dir"
    refusal_advice: str = (  # the last sentence of the refusal of a non-empty output directory
        "Resume that run with --resume_from_checkpoint latest, start over there with --training.overwrite_output_dir "
        "true (deletes its checkpoints, final model and logs), or use another training.output_dir."
    )
    no_checkpoint_advice: str = "Run with training.checkpointing_steps set first, or give a checkpoint dir."
    outputs: tuple[str, ...] = RUN_OUTPUTS  # names an overwrite deletes
    output_patterns: tuple[str, ...] = RUN_OUTPUT_PATTERNS  # and names matching these
    checkpoint_folder: str = ""  # under the output directory; "": in it
    checkpoint_prefix: str = "checkpoint-"  # a checkpoint is <prefix><step>
    checkpoint_digits: int = 0  # the step zero-padded to this many digits
    state_file: str | None = STATE_FILE  # a file every checkpoint holds: a folder without it is not one
    start_over: str = (  # how a resume refused for another recipe is told to start afresh
        "start over with training.overwrite_output_dir: true, or use another training.output_dir"
    )
    max_steps: str = "training.max_steps"  # the option that sets the run's last update
    # What another command's run writes, and this command never does (fine-tuning: pretraining's final model, log and
    # summaries): a folder holding one is that run's, refused even with an overwrite, which would delete it.
    foreign_patterns: tuple[str, ...] = ()
    foreign_what: str = ""  # how the refusal names that run: "a pretraining run"

    def named(self, output_dir: str) -> str:
        return f"{self.output_dir}{self.assign}{output_dir}"

    def checkpoint_root(self, output_dir: str) -> str:
        return os.path.join(output_dir, self.checkpoint_folder) if self.checkpoint_folder else output_dir

    def checkpoint_path(self, output_dir: str, step: int) -> str:
        return os.path.join(
            self.checkpoint_root(output_dir), f"{self.checkpoint_prefix}{step:0{self.checkpoint_digits}d}"
        )


PRETRAINING = RunOptions(
    foreign_patterns=(r"best", r"results\.json", r"predictions_(validation|test)\.tsv"),
    foreign_what="a fine-tuning run, not a pretraining one",
)
FINETUNING = dataclasses.replace(
    PRETRAINING,
    # A finished fine-tuning run keeps no checkpoint (results.json says it finished): `latest` finds it complete
    # (finetuning_setup.finished_run), and running it again means starting over.
    refusal_advice=(
        "If that run was stopped, resume it with --resume_from_checkpoint latest (which finds a finished one, with "
        "results.json, complete); to run it again, start over there with --training.overwrite_output_dir true "
        "(deletes its checkpoints, best model and results), or use another training.output_dir."
    ),
    no_checkpoint_advice=(
        "Checkpoints are written at each evaluation and removed when the run finishes; start the run without "
        "resume_from_checkpoint (with --training.overwrite_output_dir true over a finished run's folder)."
    ),
    foreign_patterns=(r"final", re.escape(UPDATE_LOG), r"summary_step\d+\.json", r"checkpoints"),
    foreign_what="a pretraining run, not a fine-tuning one",
)


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------------------------


def checkpoint_root(output_dir: str, options: RunOptions = PRETRAINING) -> str:
    return options.checkpoint_root(output_dir)


def list_checkpoints(output_dir: str, options: RunOptions = PRETRAINING) -> list[str]:
    """Every checkpoint directory under the output dir, oldest first (complete or not: see `checkpoint_problem`)."""
    root = options.checkpoint_root(output_dir)
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        m = re.fullmatch(re.escape(options.checkpoint_prefix) + r"(\d+)", name)
        if m and os.path.isdir(os.path.join(root, name)):
            found.append((int(m.group(1)), os.path.join(root, name)))
    return [path for _, path in sorted(found)]


def checkpoint_problem(path: str) -> str | None:
    """Why the checkpoint in ``path`` cannot be resumed from (torn, corrupt), or None when it is complete."""
    marker = os.path.join(path, COMPLETE_MARKER)
    if not os.path.isfile(marker):
        return (
            f"it has no {COMPLETE_MARKER} (the run was killed while writing it, or an older version of this "
            f"script wrote it)"
        )
    try:
        with open(marker, encoding="utf-8") as fh:
            files = json.load(fh)["files"]
    except (OSError, ValueError, KeyError) as err:
        return f"its {COMPLETE_MARKER} is unreadable ({err})"
    for rel, expected in files.items():
        full = os.path.join(path, rel)
        if not os.path.isfile(full):
            return f"{rel} is missing"
        size = os.path.getsize(full)
        if size != expected["size"]:
            return f"{rel} has {size} bytes, {expected['size']} were written"
        if _sha256(full) != expected["sha256"]:
            return f"{rel} is corrupt (its sha256 differs from the one written)"
    return None


def resolve_checkpoint(spec: str | None, output_dir: str, options: RunOptions = PRETRAINING) -> str | None:
    """Turn the resume option (a dir or ``latest``) into a complete checkpoint dir, or fail clearly.

    ``latest`` takes the newest complete checkpoint: a torn or corrupt newer one is skipped with a warning.
    """
    if not spec:
        return None
    root = options.checkpoint_root(output_dir)
    example = f"<output_dir>/{os.path.join(options.checkpoint_folder, options.checkpoint_prefix)}N"
    if spec == "latest":
        found = list_checkpoints(output_dir, options)
        if not found:
            raise ConfigError(f"{options.resume} latest: no checkpoint under {root}. {options.no_checkpoint_advice}")
        skipped = []
        for path in reversed(found):
            problem = checkpoint_problem(path)
            if problem is None:
                for bad, why in skipped:
                    logger.warning(
                        "Skipping checkpoint %s: %s. Resuming from the previous complete one, %s.", bad, why, path
                    )
                return path
            skipped.append((path, problem))
        raise ConfigError(
            f"{options.resume} latest: no complete checkpoint under {root}: "
            + "; ".join(f"{os.path.basename(p)}: {why}" for p, why in skipped)
        )
    if not os.path.isdir(spec):
        raise ConfigError(
            f"Checkpoint dir not found: {spec}. Give a dir written by this script ({example}) or 'latest'."
        )
    if options.state_file and not os.path.isfile(os.path.join(spec, options.state_file)):
        raise ConfigError(
            f"{spec} is not a checkpoint of this script: it has no {options.state_file}. Give a dir like "
            f"{example} or 'latest'."
        )
    problem = checkpoint_problem(spec)
    if problem is not None:
        raise ConfigError(
            f"Checkpoint {spec} is incomplete or corrupt: {problem}. Give an earlier checkpoint, "
            f"or 'latest' to take the newest complete one."
        )
    # normalised: "checkpoint-2/" (a shell's completion) must name the same folder, whose parent is the run's
    return os.path.normpath(spec)


def read_checkpoint_state(path: str) -> dict:
    with open(os.path.join(path, STATE_FILE), encoding="utf-8") as fh:
        return json.load(fh)


def prune_checkpoints(
    output_dir: str, limit: int | None, options: RunOptions = PRETRAINING, keep: str | None = None
) -> None:
    """Keep the newest ``limit`` complete checkpoints (None or 0: all); delete the older ones (renamed aside first,
    then removed). ``keep`` (the best checkpoint, for the Trainer's ``load_best_model_at_end``) is kept too, counted
    in the limit as the Trainer's rotation counts it: the newest ``max(limit - 1, 1)`` and it."""
    if not limit:
        return
    found = list_checkpoints(output_dir, options)
    complete = [path for path in found if os.path.isfile(os.path.join(path, COMPLETE_MARKER))]
    if len(complete) <= limit:
        return
    best = next((p for p in complete if keep and os.path.realpath(p) == os.path.realpath(keep)), None)
    newest = complete[-limit:]
    if best is not None and best not in newest:
        newest = complete[-max(limit - 1, 1) :]
    for path in found[: found.index(newest[0])]:
        if path != best:
            _remove_dir(path)


def remove_checkpoints(paths: list[str]) -> None:
    """Delete these checkpoints (a finished fine-tuning run's), each renamed aside first: a kill mid-way leaves no
    torn checkpoint under its name, only ``.trash-`` debris that the next claim of the folder clears."""
    for path in paths:
        _remove_dir(path)


def write_completion_marker(path: str) -> None:
    """``checkpoint_complete.json``: the size and sha256 of every other file in ``path``; written last."""
    files = {
        rel: {"size": os.path.getsize(os.path.join(path, rel)), "sha256": _sha256(os.path.join(path, rel))}
        for rel in _files_under(path)
        if rel != COMPLETE_MARKER
    }
    write_json_atomic(os.path.join(path, COMPLETE_MARKER), {"files": files, "written": time.time()})


def mark_checkpoint_complete(
    processes,
    output_dir: str,
    step: int,
    limit: int | None = None,
    records: dict[str, dict] | None = None,
    keep: str | None = None,
    options: RunOptions = PRETRAINING,
) -> str:
    """Once every process has saved its files into the Trainer's ``checkpoint-N`` (its RNG state among them):
    ``records`` (file name -> JSON, e.g. the recipe fingerprint) written into it, the completion marker last, then
    the older checkpoints pruned to ``limit`` (keeping ``keep``, the best one). Call on every process (``processes``:
    accelerate's state or Accelerator); returns the checkpoint's path."""
    processes.wait_for_everyone()
    path = options.checkpoint_path(output_dir, step)
    if processes.is_main_process and os.path.isdir(path):
        for name, record in (records or {}).items():
            write_json_atomic(os.path.join(path, name), record)
        write_completion_marker(path)
        prune_checkpoints(output_dir, limit, options, keep=keep)
    processes.wait_for_everyone()
    return path


def completion_marker_callback(processes, limit: int | None = None, records: dict[str, dict] | None = None):
    """A `TrainerCallback` that marks each ``checkpoint-N`` complete once written (`mark_checkpoint_complete`):
    ``latest`` then never takes a checkpoint a kill cut short, and a corrupt one is refused. The newest ``limit``
    complete checkpoints and the best one are kept (None: all), in place of the Trainer's ``save_total_limit``,
    whose rotation deletes the older ones before the marker: a kill there left none complete. ``records``: written
    into each (`mark_checkpoint_complete`)."""
    from transformers import TrainerCallback

    class MarkComplete(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            best = state.best_model_checkpoint
            mark_checkpoint_complete(processes, args.output_dir, state.global_step, limit, records, keep=best)
            return control

    return MarkComplete()


# ----------------------------------------------------------------------------------------------------------------
# The recipe a checkpoint was made with
# ----------------------------------------------------------------------------------------------------------------

# Fields that change what is trained (refused on resume) and fields that change only how (a warning).
_DATA_FIELDS_NOT_COMPARED = ("preprocessing_num_workers", "cache_dir", "max_eval_blocks")
# Model config fields that say how a model is loaded or run, not what it is: a saved config adds auto_map, and the
# Trainer saves use_cache off. Never compared, so that a config read back from a checkpoint agrees with the one the
# run started from (an older checkpoint records them too).
_MODEL_FIELDS_NOT_COMPARED = ("transformers_version", "_name_or_path", "auto_map", "use_cache")
# The uptraining's conversion settings (model.convert_from_roberta, with its target). A checkpoint that records them
# is resumed from its own converted model, without reading model.pretrained again; an older one lacks the key.
CONVERSION_KEY = "model.convert_from_roberta"
# Attention transfer's teacher, by the SHA-256 of its config and weight files (`loading.model_files_sha256`; a Hub
# name's, of its download: `validation.model_source`): recorded since the checkpoints of that version (a Hub name's,
# since a later one). Compared where both sides record it.
TEACHER_FILES_KEY = "teacher.model_files_sha256"
_SCHEDULE_FIELDS = (
    "learning_rate",
    "lr_scheduler_type",
    "warmup_steps",
    "max_steps",
    "weight_decay",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
)


# Fine-tuning's: its schedule is set in epochs or updates and warms up over a share of them.
_FINETUNE_SCHEDULE_FIELDS = (*(f for f in _SCHEDULE_FIELDS if f != "warmup_steps"), "warmup_ratio", "num_train_epochs")


def recipe_fingerprint(recipe, model_config, tokenizer, num_processes: int) -> dict:
    """What a checkpoint must agree with to be resumed: {"must_match": {...}, "schedule": {...}}, flat dotted keys.
    ``recipe``: a pretraining or a fine-tuning recipe (then also its distillation section, and the files it reads);
    ``model_config``: the trained model's."""
    model = json.loads(model_config.to_json_string(use_diff=False))
    for volatile in _MODEL_FIELDS_NOT_COMPARED:
        model.pop(volatile, None)
    conversion = recipe.model.convert_from_roberta
    if conversion is not None:
        # the target as the recipe's model.model_type implies it (fine-tuning's default: a Linformer)
        conversion = {"target": getattr(recipe.model, "model_type", "linformer"), **conversion}
    from ..loading import vocabulary_sha256
    from ..models import max_input_length

    data = {k: v for k, v in dataclasses.asdict(recipe.data).items() if k not in _DATA_FIELDS_NOT_COMPARED}
    from .config import FinetuneRecipe

    finetuning = isinstance(recipe, FinetuneRecipe)
    if finetuning:
        files = [recipe.data.train_file, recipe.data.validation_file, recipe.data.test_file]
        if data["max_seq_length"] == max_input_length(model_config):  # the model's n, written out or left unset
            data["max_seq_length"] = None
    else:
        files = list(recipe.data.train_files) + list(recipe.data.validation_files)
    tcfg = recipe.training
    must_match = {
        **{f"model.{k}": v for k, v in model.items()},
        **({CONVERSION_KEY: conversion} if conversion is not None else {}),
        "tokenizer.vocabulary_sha256": vocabulary_sha256(tokenizer.get_vocab()),
        **{f"data.{k}": v for k, v in data.items()},
        **{f"data.size_of {path}": os.path.getsize(path) for path in files if path and os.path.isfile(path)},
        **({f"distillation.{k}": v for k, v in dataclasses.asdict(recipe.distillation).items()} if finetuning else {}),
        "training.seed": tcfg.seed,
        "training.per_device_train_batch_size": tcfg.per_device_train_batch_size,
        "training.gradient_accumulation_steps": tcfg.gradient_accumulation_steps,
        "processes": num_processes,
    }
    fields = _FINETUNE_SCHEDULE_FIELDS if finetuning else _SCHEDULE_FIELDS
    schedule = {f"training.{k}": getattr(tcfg, k) for k in fields}
    return json.loads(json.dumps({"must_match": must_match, "schedule": schedule}))  # tuples -> lists, as saved


def _differences(saved: dict, now: dict, where: str = "the checkpoint") -> list[str]:
    """The fields that differ (``where``: what ``saved`` is the record of, as the lines name it); a data field added
    after the checkpoint was made agrees with it at its default."""
    from .config import FinetuneDataSection, PretrainDataSection

    defaults = {
        f"data.{field.name}": field.default
        for section in (PretrainDataSection, FinetuneDataSection)
        for field in dataclasses.fields(section)
        if field.default is not dataclasses.MISSING
    }
    # The teacher's path: distillation.json names the teacher by its config and weights (`check_resumed_teacher`).
    not_compared = {f"model.{k}" for k in _MODEL_FIELDS_NOT_COMPARED} | {"distillation.teacher"}
    # A checkpoint from before the conversion was recorded: its converted model's config is compared instead.
    not_recorded = {k for k in (CONVERSION_KEY,) if k not in saved}
    not_recorded |= {k for k in (TEACHER_FILES_KEY,) if k not in saved or k not in now}
    keys = sorted((set(saved) | set(now)) - not_compared - not_recorded)
    return [
        f"{k}: {saved.get(k, '(absent)')!r} in {where}, {now.get(k, '(absent)')!r} now"
        for k in keys
        if saved.get(k) != now.get(k) and not (k not in saved and k in defaults and now.get(k) == defaults[k])
    ]


# The recipe fields that name where a run's inputs are read from: its record knows them by these paths.
LOCATION_FIELDS = (
    "tokenizer.name_or_path",
    "model.config_file",
    "data.train_files",
    "data.validation_files",
    "data.train_file",
    "data.validation_file",
    "data.test_file",
    "data.datasets",
    "data.validation_datasets",
    "data.dataset",
    "data.size_of ",
)


def moved_files_hint(differences: list[str]) -> str:
    """A way out for a run whose inputs only moved (``differences``: "field: ..." lines): its record knows them by
    path (`LOCATION_FIELDS`)."""
    if not any(difference.startswith(LOCATION_FIELDS) for difference in differences):
        return ""
    return (
        " If only files moved (the same data or tokenizer under another path), link the old path to the new one "
        "(ln -s NEW OLD) and go on with the old path."
    )


def records_conversion(checkpoint: str) -> bool:
    """Whether ``checkpoint`` records the uptraining conversion it was made from (`CONVERSION_KEY`), so that it can
    be resumed from its own converted model and tokenizer."""
    path = os.path.join(checkpoint, RECIPE_FILE)
    if not os.path.isfile(path):
        return False
    with open(path, encoding="utf-8") as fh:
        return CONVERSION_KEY in json.load(fh).get("must_match", {})


def check_resume_compatible(
    checkpoint: str,
    fingerprint: dict,
    max_steps: int | None,
    latest: bool,
    options: RunOptions = PRETRAINING,
    unrecorded_ok: bool = False,
) -> None:
    """Refuse to resume ``checkpoint`` with a recipe that trains something else, or past ``max_steps`` (None: no
    limit in updates); warn when the schedule changed. ``unrecorded_ok``: a checkpoint from before its command
    recorded the recipe is resumed with a warning, not refused."""
    whose = (
        f"The newest checkpoint under {os.path.dirname(checkpoint)} ({os.path.basename(checkpoint)}) was written "
        f"by another run"
        if latest
        else f"Checkpoint {checkpoint} was made with another recipe"
    )
    path = os.path.join(checkpoint, RECIPE_FILE)
    if not os.path.isfile(path) and unrecorded_ok:
        logger.warning(
            "%s records no recipe (%s, made before it was recorded): resumed unchecked.", checkpoint, RECIPE_FILE
        )
        return
    if not os.path.isfile(path):
        raise ConfigError(
            f"{whose}: it records no recipe ({RECIPE_FILE}), so resuming cannot be checked. "
            f"{options.start_over[0].upper()}{options.start_over[1:]}."
        )
    with open(path, encoding="utf-8") as fh:
        saved = json.load(fh)
    differs = _differences(saved["must_match"], fingerprint["must_match"])
    if differs:
        raise ConfigError(
            f"{whose}: its recipe differs in {len(differs)} field(s): " + "; ".join(differs) + ". Resume with the "
            f"recipe it was made with, {options.start_over}." + moved_files_hint(differs)
        )
    step = read_checkpoint_state(checkpoint)["global_step"]
    if max_steps is not None and step > max_steps:
        raise ConfigError(
            f"{whose}: it is at step {step}, past {options.max_steps}={max_steps}. Raise {options.max_steps} to "
            f"continue it, or {options.start_over}."
        )
    changed = _differences(saved["schedule"], fingerprint["schedule"])
    if changed:
        logger.warning(
            "Resuming %s with another optimisation schedule (%s): the run continues, but does not "
            "reproduce an uninterrupted one.",
            checkpoint,
            "; ".join(changed),
        )


def check_finished_recipe(output_dir: str, fingerprint: dict, options: RunOptions = PRETRAINING) -> None:
    """Refuse to take the run that finished in ``output_dir`` (its results and, beside them, the `RECIPE_FILE` it
    recorded: fine-tuning's, whose checkpoints are removed at its end) for this one when it was made with another
    recipe, or another schedule: with no checkpoint left to go on from, only the same recipe finds it complete. A
    run finished before the record cannot be told from another, and is refused as such."""
    results, path = os.path.join(output_dir, RESULTS_FILE), os.path.join(output_dir, RECIPE_FILE)
    whose = f"The run in {output_dir} finished ({results})"
    start_over = f"{options.start_over[0].upper()}{options.start_over[1:]}"
    if not os.path.isfile(path):
        raise ConfigError(
            f"{whose}, but it records no recipe ({RECIPE_FILE}: it finished before fine-tuning recorded one with its "
            f"results), so {options.resume} latest cannot tell whether it is this recipe's run, and it kept no "
            f"checkpoint to resume. Its results stand as they are; to run this recipe, {options.start_over}."
        )
    try:
        with open(path, encoding="utf-8") as fh:
            saved = json.load(fh)
        recorded, schedule = saved["must_match"], saved["schedule"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(
            f"{whose}, but its recipe record {path} is unreadable ({err}), so {options.resume} latest cannot tell "
            f"whether it is this recipe's run. {start_over}."
        ) from None
    differs = _differences(recorded, fingerprint["must_match"], "the finished run")
    differs += _differences(schedule, fingerprint["schedule"], "the finished run")
    if differs:
        raise ConfigError(
            f"{whose} with another recipe: it differs in {len(differs)} field(s): " + "; ".join(differs) + ". A "
            f"finished run keeps no checkpoint, so it cannot go on under another recipe or schedule: run it again with "
            f"the recipe it was made with (it is then complete), or {options.start_over}." + moved_files_hint(differs)
        )


# ----------------------------------------------------------------------------------------------------------------
# The output directory: policy and lock
# ----------------------------------------------------------------------------------------------------------------


class RunLock:
    """The flock on ``<output_dir>/.run.lock``, held from the first write to the end of the run."""

    _held: dict[str, RunLock] = {}  # by lock path: this process' own locks

    def __init__(self, path: str, handle):
        self.path, self.handle = path, handle

    @classmethod
    def acquire(cls, output_dir: str, options: RunOptions = PRETRAINING) -> RunLock:
        """The lock of ``output_dir``; a live holder is refused naming it and ``options``' output option."""
        import fcntl

        path = os.path.realpath(os.path.join(output_dir, LOCK_FILE))
        if path in cls._held:  # an earlier run of this process here ended by an exception before releasing it
            cls._held.pop(path).release()
        handle = open(path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = read_holder(handle)
            handle.close()
            if err.errno not in (errno.EAGAIN, errno.EACCES):
                raise ConfigError(f"Cannot lock {path}: {err}.") from None
            raise _in_use_error(output_dir, holder, options) from None
        previous = read_holder(handle)
        if previous:
            logger.warning(
                "Taking over the lock of %s in %s: that run ended without releasing it (it was killed).",
                describe_holder(previous),
                output_dir,
            )
        write_holder(handle)
        os.fsync(handle.fileno())
        lock = cls(path, handle)
        cls._held[path] = lock
        # A run that ends by an error after claiming its directory (a bad setting found later) ended cleanly: release
        # at interpreter exit, so the next run does not report it as killed. (A killed process runs no exit handler.)
        atexit.register(lock.release)
        return lock

    def release(self) -> None:
        import fcntl

        if self.handle.closed:
            return
        self.handle.seek(0)
        self.handle.truncate()  # an empty lock file: the run ended cleanly
        self.handle.flush()
        fcntl.flock(self.handle, fcntl.LOCK_UN)
        self.handle.close()
        RunLock._held.pop(self.path, None)


def _in_use_error(output_dir: str, holder: dict, options: RunOptions = PRETRAINING) -> ConfigError:
    return ConfigError(
        f"Another run is writing to {output_dir}: {describe_holder(holder)} holds {LOCK_FILE}. Wait for it "
        f"to end, stop it (kill {holder.get('pid', '<pid>')}; if its `accelerate launch` was killed, this is "
        f"the training process it left running), or use another {options.output_dir}."
    )


def check_not_running(output_dir: str, options: RunOptions = PRETRAINING) -> None:
    """Refuse at once when another live run holds ``output_dir``'s lock, before its checkpoints or files are judged
    (a live run's checkpoint being written looks torn, and its outputs like an earlier run's)."""
    import fcntl

    path = os.path.realpath(os.path.join(output_dir, LOCK_FILE))
    if path in RunLock._held or not os.path.isfile(path):
        return
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EACCES):
                raise _in_use_error(output_dir, read_holder(handle), options) from None
            return
        fcntl.flock(handle, fcntl.LOCK_UN)


def write_holder(handle) -> None:
    """Record this process as a lock's holder in the lock file ``handle`` (its pid, host, start and command), for the
    refusal of the next one to name it (`read_holder`, `describe_holder`)."""
    handle.seek(0)
    handle.truncate()
    json.dump(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        },
        handle,
    )
    handle.flush()


def read_holder(handle) -> dict:
    handle.seek(0)
    try:
        return json.loads(handle.read() or "{}")
    except ValueError:
        return {}


def describe_holder(holder: dict) -> str:
    if not holder:
        return "a run"
    return (
        f"the run of pid {holder.get('pid')} on host {holder.get('host')} (started {holder.get('started')}: "
        f"{holder.get('command')})"
    )


def _is_within(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def is_run_output(name: str, options: RunOptions = PRETRAINING) -> bool:
    """Whether an entry of an output directory is one the command writes there (what an overwrite deletes)."""
    return name in options.outputs or any(re.fullmatch(pattern, name) for pattern in options.output_patterns)


def _earlier_outputs(output_dir: str) -> list[str]:
    return sorted(name for name in os.listdir(output_dir) if name != LOCK_FILE) if os.path.isdir(output_dir) else []


def check_output_dir_unused(
    output_dir: str, resuming: bool, overwrite: bool, options: RunOptions = PRETRAINING
) -> None:
    """Refuse a non-empty ``output_dir`` unless the run resumes or overwrites it; creates and locks nothing (a check
    before any work; `claim_output_dir` repeats it under the lock)."""
    earlier = _earlier_outputs(output_dir)
    foreign = [name for name in earlier if any(re.fullmatch(pattern, name) for pattern in options.foreign_patterns)]
    if foreign and not resuming:  # before, an overwrite deleted that run's outputs too (its checkpoints, final model)
        raise OutputDirInUse(
            f"{options.named(output_dir)} holds {options.foreign_what} ({', '.join(foreign)}): "
            f"{options.overwrite} would delete that run's checkpoints and outputs. Give another {options.output_dir}."
        )
    if earlier and not resuming and not overwrite:
        shown = ", ".join(earlier[:6]) + (", ..." if len(earlier) > 6 else "")
        raise OutputDirInUse(
            f"{options.named(output_dir)} is not empty (it holds {shown}): it belongs to an earlier run. "
            f"{options.refusal_advice}"
        )


def claim_output_dir(
    output_dir: str,
    resuming: bool,
    overwrite: bool,
    is_main_process: bool = True,
    inputs: dict[str, str | list[str] | None] | None = None,
    options: RunOptions = PRETRAINING,
) -> RunLock | None:
    """Before the first write: make sure ``output_dir`` can be written, is this run's to write, and stays so.

    The main process creates the directory, takes the lock and applies the policy; the others return None. ``inputs``
    (recipe key -> path(s) the run reads) are checked against what an overwrite would delete.
    """
    if not is_main_process:
        return None
    try:
        os.makedirs(output_dir, exist_ok=True)
        lock = RunLock.acquire(output_dir, options)  # opening the lock file is the write test
    except ConfigError:
        raise
    except OSError as err:
        raise ConfigError(
            f"{options.named(output_dir)} cannot be written: {err.strerror or err} "
            f"({err.filename or output_dir}). Give a directory this user can create and write."
        ) from None
    try:
        check_output_dir_unused(output_dir, resuming, overwrite, options)
    except OutputDirInUse:
        lock.release()
        raise
    if overwrite:
        earlier = _earlier_outputs(output_dir)
        doomed = [os.path.join(output_dir, name) for name in earlier if is_run_output(name, options)]
        for key, paths in (inputs or {}).items():
            for path in [paths] if isinstance(paths, str) else paths or []:
                inside = [d for d in doomed if _is_within(path, d)]
                if inside:  # e.g. model.pretrained=<output_dir>/final: deleted before it is read
                    lock.release()
                    raise ConfigError(
                        f"{key}={path} is inside {inside[0]}, which {options.overwrite} deletes (the "
                        f"earlier run's outputs in {output_dir}): use another {options.output_dir}, or copy "
                        f"{inside[0]} out of it first."
                    )
        for full in doomed:
            if os.path.isdir(full):
                _remove_dir(full)
            else:
                os.remove(full)
    for parent in (output_dir, options.checkpoint_root(output_dir)):  # a kill while saving or pruning leaves these
        for name in os.listdir(parent) if os.path.isdir(parent) else []:
            own = parent != output_dir or is_run_debris(name, options)  # a checkpoint folder holds only the run's
            if own and name.startswith((TMP_PREFIX, TRASH_PREFIX)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    return lock


def is_run_debris(name: str, options: RunOptions = PRETRAINING) -> bool:
    """Whether an entry of an output directory is one of the run's own outputs half written (``.tmp-<output>``) or
    half deleted (``.trash-<output>-<pid>``), which a kill leaves: never another command's staging folder there (e.g.
    a push_to_hub ``--output_dir <run>/hub`` still being written)."""
    if name.startswith(TMP_PREFIX):
        return is_run_output(name[len(TMP_PREFIX) :], options)
    if name.startswith(TRASH_PREFIX):
        return is_run_output(name[len(TRASH_PREFIX) :].rpartition("-")[0], options)
    return False


# ----------------------------------------------------------------------------------------------------------------
# The update log
# ----------------------------------------------------------------------------------------------------------------


class UpdateLog:
    """``<output_dir>/train_log.jsonl``: one JSON line per update, each flushed when written (kept if the run is
    killed).

    A resumed run appends: a ``{"event": "start"}`` line marks where, so a step logged twice (once by a killed segment,
    once after the resume) reads as two segments of the same run.
    """

    def __init__(self, output_dir: str, enabled: bool = True):
        self.handle = open(os.path.join(output_dir, UPDATE_LOG), "a", encoding="utf-8") if enabled else None

    def write(self, **record) -> None:
        if self.handle is not None:
            # NaN / inf as null plus a "nonfinite" list: every line stays valid JSON
            line = json.dumps(finite_or_null({"time": round(time.time(), 3), **record}), allow_nan=False)
            self.handle.write(line + "\n")
            self.handle.flush()

    def close(self) -> None:
        if self.handle is not None:
            self.handle.close()
            self.handle = None


# Where `set_aside_later_work` moves what an abandoned path wrote: superseded-after-step<N>-<YYYYmmdd-HHMMSS>, and
# .2, .3 ... after it for the next branches off that step within the same second
SUPERSEDED_PATTERN = r"superseded-after-step\d+-\d{8}-\d{6}(\.\d+)?"


def set_aside_later_work(
    output_dir: str, checkpoint: str, later_names, options: RunOptions = PRETRAINING
) -> str | None:
    """Move what ``output_dir`` holds from after ``checkpoint`` (one of its own) into
    ``<output_dir>/superseded-after-step<N>-<time>/``, when a run resumes that earlier checkpoint: the checkpoints of
    later updates, complete or not (named as ``options`` names them), and ``later_names(step)``, the names of the
    run's other later outputs (its ``final/``, its summaries). Left in place, ``latest`` would go back to the abandoned
    path, and the new path's checkpoints would be written over the old path's of the same update. Nothing is deleted.
    Returns the folder, or None where nothing came later."""
    step = read_checkpoint_state(checkpoint)["global_step"]
    if os.path.realpath(os.path.dirname(checkpoint)) != os.path.realpath(options.checkpoint_root(output_dir)):
        return None  # another run's checkpoint, resumed into a folder of its own
    prefix = len(options.checkpoint_prefix)
    later = [path for path in list_checkpoints(output_dir, options) if int(os.path.basename(path)[prefix:]) > step]
    later += [os.path.join(output_dir, name) for name in later_names(step)]
    later = [path for path in later if os.path.exists(path)]
    if not later:
        return None
    base = os.path.join(output_dir, f"superseded-after-step{step}-{time.strftime('%Y%m%d-%H%M%S')}")
    for folder in [base, *(f"{base}.{again}" for again in range(2, 100))]:  # later branches within the second
        try:
            os.makedirs(folder)
            break
        except FileExistsError:
            if folder.endswith(".99"):
                raise
    for path in later:
        os.replace(path, os.path.join(folder, os.path.basename(path)))
    fsync_path(output_dir)
    return folder


def history_before(records: list[dict], step: int) -> dict:
    """The updates' losses, the evaluations and the training seconds of the path that led to update ``step``, from an
    update log's ``records``: a later segment's start at update S replaces whatever earlier segments logged after S
    (a killed run's updates after its last checkpoint, an abandoned path). ``train_seconds`` is None where the log
    predates its record at a checkpoint."""
    losses, evals, seconds = {}, {}, {}
    for record in records:
        at = record.get("step")
        if at is None:
            continue
        if record.get("event") == "start":
            for kept in (losses, evals, seconds):
                for key in [key for key in kept if key > at]:
                    del kept[key]
        elif record.get("event") == "eval":
            evals[at] = {k: v for k, v in record.items() if k not in ("event", "step", "time", "nonfinite")}
        elif record.get("event") == "checkpoint" and "train_seconds" in record:
            seconds[at] = record["train_seconds"]
        elif "loss" in record and "event" not in record:
            losses[at] = record["loss"]
    return {
        "train_losses": {k: v for k, v in losses.items() if k <= step},
        "evals": {k: v for k, v in evals.items() if k <= step},
        "train_seconds": seconds.get(step),
    }


def path_records(folder: str, seen: tuple[str, ...] = ()) -> list[dict]:
    """The update log of the run in ``folder``, preceded by the logs of the folders its path came through: a run
    whose first segment resumed another folder's checkpoint goes on from that folder's log (`history_before` keeps of
    it what came before the resumed update)."""
    records = read_update_log(folder)
    first = next((record for record in records if record.get("event") == "start"), None)
    source = (first or {}).get("resumed_from")
    if source:
        earlier = os.path.dirname(os.path.normpath(source))
        same = os.path.realpath(earlier) == os.path.realpath(folder)
        if not same and earlier not in seen and os.path.isfile(os.path.join(earlier, UPDATE_LOG)):
            return path_records(earlier, (*seen, folder)) + records
    return records


def read_update_log(output_dir: str) -> list[dict]:
    """The records of ``train_log.jsonl``; a last line cut short by a kill is left out."""
    records = []
    with open(os.path.join(output_dir, UPDATE_LOG), encoding="utf-8") as fh:
        for line in fh:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records
