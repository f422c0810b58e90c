"""Small-scale replication of the paper's quality claims (Figure 3 and Table 2) under one identical recipe.

A plan (configs/replication/*.yaml) names the shared model shape, the variants (RoBERTa, Linformers and Performers
that differ only in their attention settings), one pretraining recipe and the fine-tuning tasks. `run_plan` then

1. prepares the data once: the pretraining text (WikiText-2 plus the IMDB reviews of the fine-tuning *training*
   split, so the held-out reviews are never seen), the IMDB train / held-out files and the SST-2 files;
2. trains one byte-level BPE tokenizer on the pretraining text, shared by every variant;
3. pretrains every variant with `python -m linformer_hf.training.pretrain` (same data order, masking, seed, steps
   and tokens);
4. fine-tunes every pretrained model with `python -m linformer_hf.training.finetune` on each task that fits its n,
   for each seed,
   choosing the checkpoint on a validation split carved out of the training data and reporting the held-out split;
5. writes `results.json`, a Markdown report and a perplexity plot.

Each run's command is recorded, and a run whose result file exists is not repeated, so an interrupted plan resumes.

    python -m experiments.replication --plan configs/replication/quick.yaml   # < 10 min on 2 CPU cores
    python -m experiments.replication --plan configs/replication/full.yaml    # the docs/results/replication.md run

Plan keys are overridden as recipe keys are, --key value (YAML values) and --section.key value:
--output_dir outputs/replication/try2 --seeds [1,2] --pretrain.seed 43. --only_variants [a,b] runs only those variants
of the plan (its tokenizer and recipe unchanged), e.g. ones added since the plan was run; the other variants'
finished results in output_dir are reported beside them. Results: <output_dir>/results.json,
results.md and perplexity.png. A Ctrl-C or SIGTERM stops the running run and the plan; a run without its result
file starts over.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import os
import shlex
import shutil
import statistics
import sys
import time
from typing import Any, Literal

import yaml

import linformer_hf
from linformer_hf.cli import ArgumentParser
from linformer_hf.models import max_input_length
from linformer_hf.outputs import write_json_atomic, write_text_atomic
from linformer_hf.training.config import (
    ConfigError,
    FinetuneDataSection,
    FinetuneModelSection,
    FinetuneRecipe,
    FinetuneTrainingSection,
    ModelSection,
    PretrainDataSection,
    PretrainRecipe,
    PretrainTrainingSection,
    TokenizerSection,
    apply_overrides,
    build_section,
    load_yaml,
    parse_overrides,
)
from linformer_hf.training.errors import USER_ERRORS, report
from linformer_hf.training.model_setup import make_config
from linformer_hf.training.pretraining import read_final_summary
from linformer_hf.training.tokenizer import SPECIAL_TOKENS

from .child_process import run_child, stopped_message

PAD_TOKEN_ID = SPECIAL_TOKENS.index("<pad>")  # of the tokenizer the replication trains

# The directory linformer_hf was imported from: the runs import the same code, installed or from a checkout.
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(linformer_hf.__file__)))


@dataclasses.dataclass
class Variant:
    name: str
    model_type: Literal["linformer", "performer", "roberta"] = "linformer"
    # LinformerConfig / PerformerConfig / RobertaConfig fields on top of the plan's model
    config: dict = dataclasses.field(default_factory=dict)
    # Longer-input variants (n = 1024) pretrain on longer blocks; halve the batch to keep the tokens per update equal.
    block_size: int | None = None
    per_device_train_batch_size: int | None = None


@dataclasses.dataclass
class FinetuneTask:
    name: str  # a label for the report, e.g. imdb_n512
    task: Literal["sst2", "imdb"]
    max_seq_length: int
    max_train_samples: int | None = None
    max_eval_samples: int | None = 1000  # of the validation split that picks the checkpoint (the test set is whole)
    num_train_epochs: float = 2.0
    learning_rate: float = 1e-4
    per_device_train_batch_size: int = 16
    variants: list[str] | None = None  # which variants to fine-tune (default: all whose n fits max_seq_length)
    seeds: list[int] | None = None  # fine-tuning seeds for this task (default: the plan's seeds)


# Keys of the pretraining recipe that the replication sets itself (from the plan's data_dir, block_size, ...).
OWNED_DATA_KEYS = (
    "datasets",
    "train_files",
    "validation_files",
    "validation_split_percentage",
    "block_size",
    "max_eval_blocks",
)
# output_dir per run; an interrupted run starts over in it (overwrite), so none resumes
OWNED_TRAINING_KEYS = ("output_dir", "overwrite_output_dir", "resume_from_checkpoint")


@dataclasses.dataclass
class ReplicationPlan:
    output_dir: str = "outputs/replication/quick"
    data_dir: str = "../shared/data"  # WikiText-2, IMDB and SST-2 in the layout of shared/data/README.md
    imdb_heldout: int = 500  # reviews kept out of pretraining and fine-tuning training, for the IMDB table
    vocab_size: int = 4096
    model: dict = dataclasses.field(default_factory=dict)  # config fields shared by every variant (checked at load)
    variants: list[Variant] = dataclasses.field(default_factory=list)
    pretrain: PretrainTrainingSection = dataclasses.field(default_factory=PretrainTrainingSection)
    # the `data` section of the pretraining recipe, less the keys the replication sets (OWNED_DATA_KEYS)
    pretrain_data: PretrainDataSection = dataclasses.field(default_factory=PretrainDataSection)
    rms_lengths: list[int] = dataclasses.field(default_factory=lambda: [16, 64, 512])  # see attention_rms_of
    block_size: int = 512
    max_eval_blocks: int | None = 128  # held-out blocks for the perplexity curve (same blocks for every variant)
    finetune: list[FinetuneTask] = dataclasses.field(default_factory=list)
    seeds: list[int] = dataclasses.field(default_factory=lambda: [1])
    # Run only these variants of the plan (all when null), e.g. variants added to a plan that has been run before:
    # the rest of the plan (tokenizer, recipe, tasks) stays that of the whole plan, so the results are comparable.
    only_variants: list[str] | None = None

    def validate(self):
        names = [v.name for v in self.variants]
        if not names or len(set(names)) != len(names):
            raise ConfigError(f"variants need unique names, got {names}.")
        unknown = sorted(set(self.only_variants or []) - set(names))
        if unknown or self.only_variants == []:
            raise ConfigError(f"only_variants {self.only_variants} must name some of the plan's variants {names}.")
        for t in self.finetune:
            unknown = sorted(set(t.variants or []) - set(names))
            if unknown:
                raise ConfigError(f"finetune task {t.name!r} names unknown variants {unknown}; variants are {names}.")
        for section, owned, defaults in (
            ("pretrain_data", OWNED_DATA_KEYS, PretrainDataSection()),
            ("pretrain", OWNED_TRAINING_KEYS, PretrainTrainingSection()),
        ):
            for key in owned:
                if getattr(getattr(self, section), key) != getattr(defaults, key):
                    raise ConfigError(
                        f"{section}.{key} is set by the replication itself (from data_dir, "
                        f"output_dir, block_size, max_eval_blocks; every run starts over in its "
                        f"own directory); remove it from the plan."
                    )
        if self.pretrain.stop_after_steps is not None:
            raise ConfigError(
                "pretrain.stop_after_steps interrupts a run without its final evaluation; a replication "
                "needs finished runs. Use pretrain.max_steps or pretrain.max_train_minutes."
            )
        self.pretrain.validate()
        for name in ("wikitext-2/valid.txt", "imdb/train.csv", "sst2/train.tsv", "sst2/dev.tsv"):
            if not os.path.isfile(os.path.join(self.data_dir, name)):
                raise ConfigError(f"{name} not found under data_dir={self.data_dir} (see shared/data/README.md).")
        wikitext = os.path.join(self.data_dir, "wikitext-2", "valid.txt")
        dataclasses.replace(self.pretrain_data, train_files=[wikitext], block_size=self.block_size).validate()
        for index, variant in enumerate(self.variants):  # a bad model field fails here, not inside a run
            make_config(
                variant.model_type,
                variant_model_fields(self, variant),
                where=f"the plan's model + variants[{index}].config",
            )


def load_plan(path: str, overrides: dict[str, Any] | None = None) -> ReplicationPlan:
    """Read a plan; `overrides` (``{"output_dir": ..., "pretrain.seed": 43}``, as `parse_overrides` returns them
    from ``--output_dir ... --pretrain.seed 43``) replace keys the way a recipe's overrides do."""
    plan = build_section(ReplicationPlan, apply_overrides(load_yaml(path, given_as="--plan"), overrides or {}))
    plan.validate()
    return plan


def block_size_of(plan: ReplicationPlan, variant: Variant) -> int:
    return variant.block_size or plan.block_size


def variant_model_fields(plan: ReplicationPlan, variant: Variant) -> dict[str, Any]:
    """The model config fields of a variant: the plan's shared ones, then the variant's own."""
    fields = {**plan.model, **variant.config}
    if variant.model_type != "linformer":
        # The shared fields describe the Linformers' n; the longest input of RoBERTa and Performer (no E, F) is their
        # position table instead, sized to the variant's blocks (positions are numbered from the padding id + 1).
        fields.pop("max_sequence_length", None)
        fields.setdefault("max_position_embeddings", block_size_of(plan, variant) + PAD_TOKEN_ID + 1)
    return fields


def variant_n(plan: ReplicationPlan, variant: Variant) -> int:
    """The longest input the variant takes."""
    fields = {**variant_model_fields(plan, variant), "pad_token_id": PAD_TOKEN_ID}
    return max_input_length(make_config(variant.model_type, fields))


def tokens_per_update(plan: ReplicationPlan, variant: Variant) -> int:
    batch = variant.per_device_train_batch_size or plan.pretrain.per_device_train_batch_size
    return batch * plan.pretrain.gradient_accumulation_steps * block_size_of(plan, variant)


# ----------------------------------------------------------------------------------------------------------- data


def _clean_review(text: str) -> str:
    return " ".join(html.unescape(text).replace("<br />", " ").split())


def prepare_data(plan: ReplicationPlan) -> dict[str, str]:
    """Write the shared inputs under <output_dir>/data once; returns their paths."""
    out = os.path.join(plan.output_dir, "data")
    paths = {
        "pretrain_text": os.path.join(out, "pretrain.txt"),
        "imdb_train": os.path.join(out, "imdb_train.csv"),
        "imdb_heldout": os.path.join(out, "imdb_heldout.csv"),
        "sst2_train": os.path.join(plan.data_dir, "sst2", "train.tsv"),
        "sst2_dev": os.path.join(plan.data_dir, "sst2", "dev.tsv"),
    }
    if all(os.path.isfile(p) for p in paths.values()):
        return paths
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(plan.data_dir, "imdb", "train.csv"), encoding="utf-8", newline="") as fh:
        reviews = list(csv.DictReader(fh))  # already shuffled (shared/data/README.md)
    if len(reviews) <= plan.imdb_heldout:
        raise ConfigError(f"imdb_heldout={plan.imdb_heldout} leaves no IMDB reviews to train on ({len(reviews)}).")
    train, heldout = reviews[: -plan.imdb_heldout], reviews[-plan.imdb_heldout :]
    # Each file through a temporary name and a rename: the check above must never take a file cut short by a kill.
    for path, rows in ((paths["imdb_train"], train), (paths["imdb_heldout"], heldout)):
        text = io.StringIO(newline="")
        writer = csv.DictWriter(text, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows({"text": _clean_review(r["text"]), "label": int(r["label"])} for r in rows)
        write_text_atomic(path, text.getvalue())
    lines = []
    with open(os.path.join(plan.data_dir, "wikitext-2", "valid.txt"), encoding="utf-8") as wiki:
        for line in wiki:
            if line.strip() and not line.strip().startswith("="):  # paragraphs, not headings
                lines.append(line.strip() + "\n")
    for row in train:  # the held-out reviews never reach pretraining
        lines.append(_clean_review(row["text"]) + "\n")
    write_text_atomic(paths["pretrain_text"], "".join(lines))
    return paths


# ------------------------------------------------------------------------------------------------------------ runs


def _module_command(module: str, *args: str) -> list[str]:
    """``python -m linformer_hf.<module> args``: runs from any directory, installed or not."""
    return [sys.executable, "-m", f"linformer_hf.{module}", *args]


def _run(command: list[str], log_path: str) -> float:
    """Run a command to completion with its output in log_path; returns the wall-clock seconds. A Ctrl-C or SIGTERM
    to the plan is passed on to it (`run_child`): it stops, and so does the plan, leaving no run training alone."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + shlex.join(command) + "\n")
        log.flush()
        code, stopped_by = run_child(command, log, env=env)
    name = os.path.splitext(os.path.basename(log_path))[0]
    if stopped_by is not None:  # a run without a result file starts over: nothing to resume
        raise SystemExit(stopped_message(stopped_by, name, code, log_path, resumed=False))
    if code != 0:
        with open(log_path, encoding="utf-8") as log:
            tail = log.read()[-3000:]
        raise RuntimeError(f"{shlex.join(command)} failed (exit {code}); log {log_path}:\n{tail}")
    return time.perf_counter() - start


def _write_yaml(path: str, data: dict) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return path


def train_tokenizer(plan: ReplicationPlan, paths: dict[str, str]) -> str:
    tokenizer_dir = os.path.join(plan.output_dir, "tokenizer")
    if not os.path.isfile(os.path.join(tokenizer_dir, "tokenizer.json")):
        _run(
            _module_command(
                "training.train_tokenizer",
                "--files",
                paths["pretrain_text"],
                "--output_dir",
                tokenizer_dir,
                "--vocab_size",
                str(plan.vocab_size),
                "--model_max_length",
                str(max(variant_n(plan, v) for v in plan.variants)),
                "--overwrite",  # the plan's own folder: what a killed run left there (no tokenizer.json) is replaced
            ),
            os.path.join(plan.output_dir, "logs", "tokenizer.log"),
        )
    return tokenizer_dir


def pretrain_variant(plan: ReplicationPlan, variant: Variant, paths: dict, tokenizer_dir: str) -> dict:
    result_path = pretrain_result_path(plan, variant)
    run_dir = os.path.join(plan.output_dir, "pretrain", variant.name)
    block_size = block_size_of(plan, variant)
    # A variant interrupted before its result file was written starts over (its directory is not resumed).
    training = dataclasses.replace(plan.pretrain, output_dir=run_dir, overwrite_output_dir=True)
    if variant.per_device_train_batch_size:
        training.per_device_train_batch_size = variant.per_device_train_batch_size
    data = dataclasses.replace(
        plan.pretrain_data,
        train_files=[paths["pretrain_text"]],
        validation_split_percentage=5,
        block_size=block_size,
        # the same held-out text for every variant: longer blocks are fewer
        max_eval_blocks=plan.max_eval_blocks * plan.block_size // block_size if plan.max_eval_blocks else None,
    )
    recipe = dataclasses.asdict(
        PretrainRecipe(
            model=ModelSection(model_type=variant.model_type, config=variant_model_fields(plan, variant)),
            tokenizer=TokenizerSection(name_or_path=tokenizer_dir),
            data=data,
            training=training,
        )
    )
    saved = _read_json(result_path)
    if saved is not None:
        check_saved_recipe(result_path, saved, recipe)
        return saved
    recipe_path = _write_yaml(os.path.join(plan.output_dir, "recipes", f"pretrain_{variant.name}.yaml"), recipe)
    command = _module_command("training.pretrain", "--config", recipe_path, "--no_progress")
    seconds = _run(command, os.path.join(plan.output_dir, "logs", f"pretrain_{variant.name}.log"))
    summary = read_final_summary(run_dir)
    steps = summary["completed_steps"]  # max_steps, or fewer when the time budget ended the run
    result = {
        "variant": dataclasses.asdict(variant),
        "command": shlex.join(command),
        "recipe": recipe,
        "evals": sorted(({"step": int(step), **m} for step, m in summary["evals"].items()), key=lambda e: e["step"]),
        "final_perplexity": summary["final_eval"]["perplexity"],
        "final_eval_loss": summary["final_eval"]["eval_loss"],
        "train_seconds": summary.get("train_seconds"),
        "wall_seconds": seconds,
        "steps": steps,
        "tokens": steps * tokens_per_update(plan, variant),
        "model_dir": summary["final_dir"],
        "attention_rms": attention_rms_of(
            summary["final_dir"],
            tokenizer_dir,
            paths["imdb_heldout"],
            [length for length in plan.rms_lengths if length <= block_size],
        ),
    }
    _write_json(result_path, result)
    return result


def attention_rms_of(
    model_dir: str, tokenizer_dir: str, text_csv: str, lengths: list[int], num_sequences: int = 16
) -> dict[str, float]:
    """First-layer attention output RMS of a pretrained model at each input length, on held-out reviews.

    The check for the short-input failure (`experiments.diagnostics`): a model whose attention output
    shrinks with L
    passes little between tokens on SST-2's short sentences.
    """
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from .diagnostics import attention_output_rms

    if not lengths:
        return {}
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    with open(text_csv, encoding="utf-8", newline="") as fh:
        reviews = [row["text"] for row in csv.DictReader(fh)]
    longest = max(lengths)
    stream = []  # reviews back to back, each <s> ... </s>, cut into windows that each start with <s>
    for review in reviews:
        stream.extend(tokenizer(review, verbose=False)["input_ids"])
        if len(stream) >= num_sequences * longest:
            break
    count = min(num_sequences, len(stream) // longest)
    if count == 0:
        raise ConfigError(f"{text_csv} has fewer than {longest} tokens; lower rms_lengths.")
    sequences = torch.tensor(stream[: count * longest]).view(count, longest)
    sequences[:, 0] = tokenizer.bos_token_id
    model = AutoModelForMaskedLM.from_pretrained(model_dir)
    rms = attention_output_rms(model, sequences, lengths, layers=[0])
    return {str(length): values[0] for length, values in rms.items()}


def finetune_variant(
    plan: ReplicationPlan, variant: Variant, task: FinetuneTask, seed: int, paths: dict, model_dir: str
) -> dict:
    result_path = finetune_result_path(plan, variant, task, seed)
    run_dir = os.path.join(plan.output_dir, "finetune", variant.name, task.name, f"seed{seed}")
    if task.task == "sst2":  # checkpoint chosen on 10% of train; the GLUE dev set is the held-out test
        files = {"train_file": paths["sst2_train"], "test_file": paths["sst2_dev"]}
    else:
        files = {"train_file": paths["imdb_train"], "test_file": paths["imdb_heldout"]}
    recipe = dataclasses.asdict(
        FinetuneRecipe(
            model=FinetuneModelSection(pretrained=model_dir),
            data=FinetuneDataSection(
                task=task.task,
                **files,
                validation_split_percentage=10,
                max_seq_length=task.max_seq_length,
                max_train_samples=task.max_train_samples,
                max_eval_samples=task.max_eval_samples,
            ),
            # overwrite_output_dir: a run interrupted before its result file was written starts over
            training=FinetuneTrainingSection(
                output_dir=run_dir,
                overwrite_output_dir=True,
                seed=seed,
                num_train_epochs=task.num_train_epochs,
                per_device_train_batch_size=task.per_device_train_batch_size,
                per_device_eval_batch_size=64,
                learning_rate=task.learning_rate,
            ),
        )
    )
    saved = _read_json(result_path)
    if saved is not None:
        if "recipe" in saved:  # results saved before the recipe was recorded are taken as they are
            check_saved_recipe(result_path, saved, recipe)
        return saved
    recipe_path = _write_yaml(
        os.path.join(plan.output_dir, "recipes", f"finetune_{variant.name}_{task.name}_seed{seed}.yaml"), recipe
    )
    command = _module_command("training.finetune", "--config", recipe_path, "--no_progress")
    seconds = _run(command, os.path.join(plan.output_dir, "logs", f"finetune_{variant.name}_{task.name}_{seed}.log"))
    with open(os.path.join(run_dir, "results.json"), encoding="utf-8") as fh:
        finetuned = json.load(fh)
    shutil.rmtree(os.path.join(run_dir, "best"), ignore_errors=True)  # the report needs numbers, not checkpoints
    result = {
        "variant": variant.name,
        "task": task.name,
        "seed": seed,
        "command": shlex.join(command),
        "recipe": recipe,
        "test_accuracy": finetuned["test"]["accuracy"],
        "validation_accuracy": finetuned["best"]["accuracy"],
        "wall_seconds": seconds,
    }
    _write_json(result_path, result)
    return result


def pretrain_result_path(plan: ReplicationPlan, variant: Variant) -> str:
    return os.path.join(plan.output_dir, "results", f"pretrain_{variant.name}.json")


def finetune_result_path(plan: ReplicationPlan, variant: Variant, task: FinetuneTask, seed: int) -> str:
    return os.path.join(plan.output_dir, "results", f"finetune_{variant.name}_{task.name}_seed{seed}.json")


def _read_json(path: str) -> Any:
    """The saved result at path, or None when that run has not finished."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _write_json(path: str, data: Any) -> None:
    """Through a temporary file and a rename: a result file exists only whole, so a kill never leaves one that a rerun
    takes as finished (or cannot read)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_json_atomic(path, data)


def check_saved_recipe(result_path: str, saved: dict, recipe: dict) -> None:
    """A saved result is reused only if it was made with the recipe this plan asks for now: a plan changed since
    (steps, learning rate, model settings...) and rerun into the same output_dir must not report the old figures."""
    now = json.loads(json.dumps(recipe))  # as saved: tuples are lists
    differences = [
        f"{key}: {before!r} in the saved result, {after!r} now"
        for key, before, after in _differences(saved.get("recipe"), now)
    ]
    if differences:
        raise ConfigError(
            f"{result_path} was made with another recipe ({'; '.join(differences[:6])}): this plan's run would "
            "differ. Give the changed plan another --output_dir, or delete that result file to run it again."
        )


def _differences(before: Any, after: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(set(before) & set(after)):  # a key the saved recipe lacks: a field added since, not a change
            found += _differences(before[key], after[key], f"{prefix}{key}.")
        return found
    return [] if before == after else [(prefix.rstrip("."), before, after)]


def run_plan(plan: ReplicationPlan, log=print) -> dict:
    start = time.perf_counter()
    paths = prepare_data(plan)
    tokenizer_dir = train_tokenizer(plan, paths)
    results = {"plan": dataclasses.asdict(plan), "pretrain": {}, "finetune": [], "complete": False}

    def save():
        # After every run, so that a plan stopped early still has its results and report so far.
        results["total_seconds"] = time.perf_counter() - start
        _write_json(os.path.join(plan.output_dir, "results.json"), results)
        write_report(results, plan.output_dir)

    def selected(variant: Variant) -> bool:
        return plan.only_variants is None or variant.name in plan.only_variants

    # A variant left out by only_variants is not run, but its finished results in output_dir (from an earlier run of
    # the plan) are reported beside the others.
    for variant in plan.variants:
        if not selected(variant):
            saved = _read_json(pretrain_result_path(plan, variant))
            if saved is not None:
                results["pretrain"][variant.name] = saved
            continue
        log(f"[pretrain] {variant.name}")
        results["pretrain"][variant.name] = result = pretrain_variant(plan, variant, paths, tokenizer_dir)
        log(f"[pretrain] {variant.name}: validation perplexity {result['final_perplexity']:.2f}")
        save()
    # Seed by seed, so that a plan stopped early still has one complete column per task.
    all_seeds = sorted({seed for task in plan.finetune for seed in (task.seeds or plan.seeds)})
    for seed in all_seeds:
        for task in plan.finetune:
            if seed not in (task.seeds or plan.seeds):
                continue
            for variant in plan.variants:
                if task.max_seq_length > variant_n(plan, variant):
                    continue  # the model cannot take inputs of this length
                if task.variants is not None and variant.name not in task.variants:
                    continue
                if not selected(variant):
                    saved = _read_json(finetune_result_path(plan, variant, task, seed))
                    if saved is not None:
                        results["finetune"].append(saved)
                    continue
                log(f"[finetune] {variant.name} {task.name} seed {seed}")
                model_dir = results["pretrain"][variant.name]["model_dir"]
                result = finetune_variant(plan, variant, task, seed, paths, model_dir)
                log(f"[finetune] {variant.name} {task.name} seed {seed}: accuracy {result['test_accuracy']:.4f}")
                results["finetune"].append(result)
                save()
    results["complete"] = True
    save()
    return results


# ---------------------------------------------------------------------------------------------------------- report


def baseline_of(results: dict, name: str) -> dict | None:
    """The RoBERTa run a variant is compared with: the one pretrained on blocks of the same length, else the first."""
    plan_block = results["plan"]["block_size"]
    block = results["pretrain"][name]["variant"].get("block_size") or plan_block
    robertas = [r for r in results["pretrain"].values() if r["variant"]["model_type"] == "roberta"]
    same_n = [r for r in robertas if (r["variant"].get("block_size") or plan_block) == block]
    return (same_n or robertas or [None])[0]


def summarize(results: dict) -> list[dict]:
    """One row per variant: final perplexity, its ratio to RoBERTa's (same n), mean/std accuracy per task."""
    tasks = [t["name"] for t in results["plan"]["finetune"]]
    rows = []
    for name, pre in results["pretrain"].items():
        baseline = baseline_of(results, name)
        row = {
            "variant": name,
            "perplexity": pre["final_perplexity"],
            "perplexity_vs_roberta": pre["final_perplexity"] / baseline["final_perplexity"] if baseline else None,
            "seconds_per_step": (pre["train_seconds"] or pre["wall_seconds"]) / pre["steps"],
            "attention_rms": pre.get("attention_rms") or {},
        }
        for task in tasks:
            accs = [f["test_accuracy"] for f in results["finetune"] if f["variant"] == name and f["task"] == task]
            row[task] = (
                (statistics.mean(accs), statistics.stdev(accs) if len(accs) > 1 else 0.0, len(accs)) if accs else None
            )
        rows.append(row)
    return rows


def write_report(results: dict, output_dir: str) -> str:
    rows = summarize(results)
    tasks = [t["name"] for t in results["plan"]["finetune"]]
    lines = [
        "| variant | val. perplexity | vs RoBERTa | s / step | attn. RMS by L | " + " | ".join(tasks) + " |",
        "| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in tasks) + " |",
    ]
    for row in rows:
        cells = [
            row["variant"],
            f"{row['perplexity']:.2f}",
            f"{row['perplexity_vs_roberta']:.3f}" if row["perplexity_vs_roberta"] else "-",
            f"{row['seconds_per_step']:.2f}",
            " / ".join(f"{value:.2f}" for _, value in sorted(row["attention_rms"].items(), key=lambda kv: int(kv[0])))
            or "-",
        ]
        for task in tasks:
            value = row[task]
            cells.append("-" if value is None else f"{100 * value[0]:.1f} ± {100 * value[1]:.1f} (n={value[2]})")
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    write_text_atomic(os.path.join(output_dir, "results.md"), table)
    plot_perplexity(results, os.path.join(output_dir, "perplexity.png"))
    return table


def plot_perplexity(results: dict, path: str) -> None:
    """Left: validation perplexity over updates (from the first evaluation after initialisation). Right: its ratio to
    the RoBERTa pretrained on blocks of the same length, at each evaluation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.get_cmap("tab20").colors
    for index, (name, pre) in enumerate(results["pretrain"].items()):
        evals = [e for e in pre["evals"] if e["step"] > 0]
        style = dict(
            marker="o",
            ms=3,
            label=name,
            color=colours[index % len(colours)],
            linestyle={"roberta": "--", "performer": "-."}.get(pre["variant"]["model_type"], "-"),
        )
        left.plot([e["step"] for e in evals], [e["perplexity"] for e in evals], **style)
        baseline = baseline_of(results, name)
        if baseline is not None:
            reference = {e["step"]: e["perplexity"] for e in baseline["evals"]}
            shared = [e for e in evals if e["step"] in reference]
            right.plot([e["step"] for e in shared], [e["perplexity"] / reference[e["step"]] for e in shared], **style)
    left.set_xlabel("update")
    left.set_ylabel("validation MLM perplexity")
    left.set_title("Pretraining under one recipe (cf. the paper's Figure 3)", fontsize=10)
    right.set_xlabel("update")
    right.set_ylabel("perplexity / RoBERTa's (same n)")
    right.set_title("Relative to RoBERTa", fontsize=10)
    right.axhline(1.05, color="grey", linewidth=0.8, linestyle=":")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    # on the right panel, unless no RoBERTa was run (no ratios to draw)
    legend_axis = right if right.get_legend_handles_labels()[0] else left
    legend_axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = ArgumentParser(
        prog="python -m experiments.replication",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--plan", required=True, help="configs/replication/*.yaml")
    args, rest = parser.parse_known_args(argv)
    try:
        plan = load_plan(args.plan, parse_overrides(rest, top_level_keys=True))
        results = run_plan(plan)
    except USER_ERRORS as err:
        return report(err)
    with open(os.path.join(plan.output_dir, "results.md"), encoding="utf-8") as fh:
        print(fh.read())
    print(f"total {results['total_seconds'] / 60:.1f} min; results in {plan.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
