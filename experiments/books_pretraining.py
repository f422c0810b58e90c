"""The paper's pretraining claims (Figure 3) at small scale, on whole books: pretraining runs under one recipe.

A plan (configs/books/figure3.yaml) names a pretraining recipe, the overrides every run shares, and each
run's own (its model, its n, k and sharing). Every run reads the same blocks of the longest n, in the same order, with
the same masks: shorter models read each block as consecutive inputs of their own n (``data.input_length``). So the
runs differ only in the model, and the curves compare perplexity on the same held-out tokens after the same tokens.

    python -m experiments.books_pretraining --plan configs/books/figure3.yaml            # every run
    python -m experiments.books_pretraining --plan configs/books/figure3.yaml --only roberta_n512
    python -m experiments.books_pretraining --plan configs/books/figure3.yaml --report   # collate only

Runs go one after another (``python -m linformer_hf.training.pretrain``, output in <output_dir>/<run>/, its console
in <run>.log). A finished run (it wrote its summary) is not repeated; a stopped one resumes from its last checkpoint.
So that neither is reported under settings it was not trained with, <run>.settings.json records the run's resolved
recipe when it starts, and a plan changed since for that run is refused (`check_settings`), as is a second driver on a
run another is running (`claim_runs`): runs of one plan may go side by side (``--only``), a run never twice.
After each run, <output_dir>/curves.csv (validation perplexity against tokens seen, per run) and results.md (the
last evaluation, perplexity against the plan's baseline, and training tokens/s) are written again from every run's
train_log.jsonl. Recorded as docs/results/data/books_figure3_curves.csv, the CSV is what docs/results/make_figures.py
draws docs/figures/books_figure3.png from (grouped by its n, k and sharing columns).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import statistics
import sys
import time

from linformer_hf import LinformerConfig
from linformer_hf.cli import ArgumentParser
from linformer_hf.outputs import write_json_atomic, write_text_atomic
from linformer_hf.training.checkpointing import list_checkpoints, moved_files_hint
from linformer_hf.training.config import ConfigError, PretrainRecipe, build_section, load_recipe, load_yaml
from linformer_hf.training.errors import USER_ERRORS, report
from linformer_hf.training.model_setup import make_config
from linformer_hf.training.pretraining import LOOP_CHECKPOINTS, check_block_size, read_final_summary

from .child_process import claim_runs, claimed_by_others, run_child, stopped_message

# A run reads its context once its perplexity at <mask> inputs is under this fraction of the unigram baseline's: 1%
# below, beyond the evaluation's noise on the plateau (0.994-1.022 over 2,048 updates of the runs that never left it).
READS_CONTEXT = 0.99
CURVE_COLUMNS = [
    "run",
    "model_type",
    "n",
    "k",
    "sharing",
    "projection_init",
    "seed",
    "step",
    "tokens",
    "perplexity",
    "mask_input_perplexity",
    "mask_input_over_unigram",
    "eval_loss",
]


@dataclasses.dataclass
class Run:
    name: str
    overrides: dict = dataclasses.field(default_factory=dict)  # recipe keys (section.key) of this run only


@dataclasses.dataclass
class BooksPlan:
    recipe: str = "configs/pretrain/books.yaml"
    output_dir: str = "outputs/books-figure3"
    baseline: str | None = None  # the run the others' perplexity is divided by in results.md
    shared: dict = dataclasses.field(default_factory=dict)  # recipe keys (section.key) every run takes
    runs: list[Run] = dataclasses.field(default_factory=list)

    def validate(self):
        names = [run.name for run in self.runs]
        if not names:
            raise ConfigError("the plan has no runs: give its runs as a list under runs: (each with a name).")
        if len(set(names)) != len(names):
            raise ConfigError(f"runs need unique names, got {names}.")
        if os.path.exists(self.output_dir) and not os.path.isdir(self.output_dir):
            raise ConfigError(f"output_dir {self.output_dir} is a file: give the plan a folder for its runs.")
        if self.baseline is not None and self.baseline not in names:
            raise ConfigError(f"baseline {self.baseline!r} is not one of the runs {names}.")
        if not os.path.isfile(self.recipe):
            raise ConfigError(f"recipe {self.recipe} not found; run from the root of a checkout.")
        for key in list(self.shared) + [key for run in self.runs for key in run.overrides]:
            if key in ("training.output_dir", "training.resume_from_checkpoint", "training.overwrite_output_dir"):
                raise ConfigError(f"{key} is set by the plan itself (one directory per run); remove it.")
        per_run = [run.name for run in self.runs if "data.block_size" in run.overrides]
        if per_run:
            raise ConfigError(
                f"runs {per_run} set data.block_size: every run reads the same blocks (tokens are counted in them), so "
                "it belongs in shared; set a run's n with data.input_length (a block read as several inputs)."
            )
        if not isinstance(self.shared.get("data.block_size"), int):
            raise ConfigError(
                "shared needs data.block_size (a number): every run reads the same blocks, shorter models as several "
                "inputs (data.input_length)."
            )
        for run in self.runs:  # a bad key or value fails here, before any run
            check_model(recipe(self, run))


def check_model(resolved: PretrainRecipe) -> None:
    """A run's fresh model and the length of its inputs, checked as the run checks them (`make_config`,
    `check_block_size`), but before any run of the plan: an unknown model field, or a k longer than n, in a run
    failed only when that run started, after every run before it had trained. A model read from model.pretrained
    (an uptraining's source) is its run's to check."""
    if resolved.model.pretrained:
        return
    fields = load_yaml(resolved.model.config_file) if resolved.model.config_file else {}
    fields.update(resolved.model.config or {})
    fields.pop("model_type", None)
    check_block_size(resolved, make_config(resolved.model.model_type, fields))


def recipe(plan: BooksPlan, run: Run) -> PretrainRecipe:
    return load_recipe(
        PretrainRecipe, plan.recipe, extra={**plan.shared, **run.overrides, "training.output_dir": run_dir(plan, run)}
    )


# Recipe keys that change how a run is carried out, not what it trains or measures: a started run stays the plan's
# when only these changed (a run stopped with training.stop_after_steps goes on without it). Not among them:
# training.max_train_minutes, as a run its budget ended early counts as finished.
OPERATIONAL_KEYS = {
    "training.output_dir",
    "training.resume_from_checkpoint",
    "training.overwrite_output_dir",
    "training.stop_after_steps",
    "training.checkpointing_steps",
    "training.checkpoints_total_limit",
    "training.logging_steps",
    "training.report_to",
    "training.save_final_model",
    "training.nonfinite_patience",  # the guards stop a run (not finished then); they do not change its updates
    "training.loss_spike_factor",
    "training.loss_spike_action",
    "training.per_device_eval_batch_size",
    "training.torch_compile",
    "training.torch_compile_mode",
    "training.torch_compile_backend",
    "training.optim",  # the same AdamW update, as a loop or one fused kernel
    "data.preprocessing_num_workers",
    "data.cache_dir",
}


def run_settings(plan: BooksPlan, run: Run) -> dict:
    """What a run trains and measures: its recipe as the plan resolves it (recipe file, shared and own overrides), as
    flat section.key, without OPERATIONAL_KEYS."""
    resolved = dataclasses.asdict(recipe(plan, run))
    flat = {f"{section}.{key}": value for section, fields in resolved.items() for key, value in fields.items()}
    return json.loads(json.dumps({key: value for key, value in flat.items() if key not in OPERATIONAL_KEYS}))


def settings_path(plan: BooksPlan, run: Run) -> str:
    return os.path.join(plan.output_dir, f"{run.name}.settings.json")


def has_progress(directory: str) -> bool:
    """Whether a run left something it would go on from, or be reported by: a checkpoint or a summary."""
    try:
        read_final_summary(directory)
        return True
    except FileNotFoundError:
        return bool(list_checkpoints(directory) or list_checkpoints(directory, LOOP_CHECKPOINTS))


def check_settings(plan: BooksPlan, mine: list[str] = ()) -> None:
    """Refuse a plan whose runs were started with other settings: a finished run is not run again and a stopped one
    is resumed, so either would be reported under the plan's new shape. A run that left no checkpoint or summary (it
    failed as it started) is not held to them, and starts over, unless another driver is running it now (this
    process' own runs are ``mine``). A key only one side has (a recipe field added or removed since) is not
    compared."""
    running = claimed_by_others(plan.output_dir, mine) if os.path.isdir(plan.output_dir) else []
    for run in plan.runs:
        held = has_progress(run_dir(plan, run)) or run.name in running
        if not os.path.isfile(settings_path(plan, run)) or not held:
            continue
        with open(settings_path(plan, run), encoding="utf-8") as fh:
            saved = json.load(fh)
        now = run_settings(plan, run)
        differs = [f"{k}: {saved[k]!r} then, {now[k]!r} now" for k in sorted(saved) if k in now and saved[k] != now[k]]
        if differs:
            raise ConfigError(
                f"run {run.name} in {run_dir(plan, run)} was started with other settings ({'; '.join(differs)}; "
                f"{settings_path(plan, run)}): it would be reported as the plan's. Restore them, or give the changed "
                "run another name (or the plan another output_dir)." + moved_files_hint(differs)
            )


def record_settings(plan: BooksPlan, run: Run) -> None:
    """Write the run's settings when it starts with nothing to go on from (or, for a run from before they were
    recorded, when the plan next goes on)."""
    if not os.path.isfile(settings_path(plan, run)) or not has_progress(run_dir(plan, run)):
        os.makedirs(plan.output_dir, exist_ok=True)
        write_json_atomic(settings_path(plan, run), run_settings(plan, run))


def baseline_for(plan: BooksPlan, run: Run) -> str | None:
    """The run ``run`` is compared with: the plan's baseline if both have the same seed, else the baseline's twin of
    ``run``'s seed (the run whose overrides are the baseline's with that seed: the same blocks, order and masks as
    ``run``), or None when the plan has no such run. A run of another seed reads other tokens under other masks, so
    its perplexity is divided by its own seed's baseline only."""
    if plan.baseline is None:
        return None

    def seed(candidate: Run):  # None: the recipe's own seed
        return {**plan.shared, **candidate.overrides}.get("training.seed")

    def without_seed(candidate: Run) -> dict:
        return {key: value for key, value in candidate.overrides.items() if key != "training.seed"}

    base = next(candidate for candidate in plan.runs if candidate.name == plan.baseline)
    if seed(run) == seed(base):
        return base.name
    return next(
        (c.name for c in plan.runs if seed(c) == seed(run) and without_seed(c) == without_seed(base)),
        None,
    )


def run_dir(plan: BooksPlan, run: Run) -> str:
    return os.path.join(plan.output_dir, run.name)


def finished(directory: str) -> bool:
    """The run reached its end and evaluated there (a run stopped early writes a summary without a final eval)."""
    try:
        return "final_eval" in read_final_summary(directory)
    except FileNotFoundError:
        return False


def command(plan: BooksPlan, run: Run) -> list[str]:
    """The pretraining command of one run: resumed from its last checkpoint when it has one."""
    directory = run_dir(plan, run)
    args = [sys.executable, "-m", "linformer_hf.training.pretrain", "--config", plan.recipe]
    for key, value in {**plan.shared, **run.overrides, "training.output_dir": directory}.items():
        args += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
    # A run of the loop pretraining ran on before the Trainer is resumed too: the command then says how to finish it,
    # where starting over would delete it.
    if list_checkpoints(directory) or list_checkpoints(directory, LOOP_CHECKPOINTS):
        args += ["--training.resume_from_checkpoint", "latest"]
    elif os.path.isdir(directory) and os.listdir(directory):  # stopped before its first checkpoint: nothing to keep
        args += ["--training.overwrite_output_dir", "true"]
    return args


def log_rows(directory: str) -> list[dict]:
    """train_log.jsonl's rows, the last of each (event, step) kept: a resumed run repeats the steps since its
    checkpoint, and the repeat is what the run went on from."""
    path = os.path.join(directory, "train_log.jsonl")
    if not os.path.isfile(path):
        return []
    kept: dict[tuple, dict] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                kept[(row.get("event", "update"), row["step"])] = row
    return sorted(kept.values(), key=lambda row: (row["step"], row.get("event", "update") != "eval"))


def run_shape(plan: BooksPlan, run: Run) -> dict:
    """The run's model type, n (the length of one input), k, sharing and how E, F start for a Linformer (else empty),
    and seed, as its recipe sets them, so that the curves can be grouped without reading the runs' names."""
    config = recipe(plan, run)
    fields = load_yaml(config.model.config_file) if config.model.config_file else {}
    fields.update(config.model.config or {})
    if config.model.convert_from_roberta:  # an uptraining run: the config its conversion builds (with its defaults)
        from transformers import AutoConfig

        from linformer_hf.conversion import converted_config, target_family

        settings = dict(config.model.convert_from_roberta)
        target = settings.pop("target", config.model.model_type)
        names = {*target_family(target).setting_names, "max_sequence_length"}  # not the seed or noise of E, F
        source = AutoConfig.from_pretrained(config.model.pretrained)
        target_config = converted_config(source, target=target, **{k: v for k, v in settings.items() if k in names})
        fields.update(target_config.to_dict())
    linformer = config.model.model_type == "linformer"
    return {
        "model_type": config.model.model_type,
        "n": config.data.input_length or config.data.block_size or fields.get("max_sequence_length"),
        "k": fields.get("projected_length", LinformerConfig.projected_length) if linformer else "",
        "sharing": fields.get("sharing", LinformerConfig.sharing) if linformer else "",
        "projection_init": fields.get("projection_init", LinformerConfig.projection_init) if linformer else "",
        "seed": config.training.seed,
    }


def tokens_per_update(plan: BooksPlan, run: Run) -> int:
    """Blocks an update (on one process) times the block size."""
    training = recipe(plan, run).training
    return training.per_device_train_batch_size * training.gradient_accumulation_steps * plan.shared["data.block_size"]


def reads_context_from(evals: list[dict]) -> int | None:
    """The update of the first evaluation from which a run's perplexity at `<mask>` inputs stays under READS_CONTEXT
    times the unigram baseline's (it reads its context from then on), or None if its last one is not under it. At this
    scale it is when a run left the unigram plateau, and it has ordered the final perplexities of the plan's runs."""
    from_step = None
    for row in evals:
        if not row.get("perplexity_over_unigram", float("nan")) < READS_CONTEXT:  # on the plateau (or not measured)
            from_step = None
        elif from_step is None:
            from_step = row["step"]
    return from_step


def collate(plan: BooksPlan) -> tuple[list[dict], list[dict]]:
    """(curve rows, one summary row per run) from every run's log."""
    curves, summaries = [], []
    for run in plan.runs:
        directory = run_dir(plan, run)
        rows, per_update = log_rows(directory), tokens_per_update(plan, run)
        if not rows:
            continue
        evals = [row for row in rows if row.get("event") == "eval"]
        shape = run_shape(plan, run)
        for row in evals:
            curves.append(
                {
                    "run": run.name,
                    **shape,
                    "step": row["step"],
                    "tokens": row["step"] * per_update,
                    "perplexity": round(row["perplexity"], 3),
                    "mask_input_perplexity": round(row.get("mask_input_perplexity", float("nan")), 3),
                    # below 1: the model predicts the <mask> inputs better than the token frequencies (reads context)
                    "mask_input_over_unigram": round(row.get("perplexity_over_unigram", float("nan")), 4),
                    "eval_loss": round(row["eval_loss"], 5),
                }
            )
        # Seconds between consecutive updates, over pairs with no evaluation, checkpoint or restart between them.
        updates = [row for row in rows if "event" not in row]
        gaps = [b["time"] - a["time"] for a, b in zip(updates, updates[1:]) if b["step"] == a["step"] + 1]
        interrupted = {row["step"] for row in rows if row.get("event")}
        gaps = [g for g, b in zip(gaps, updates[1:]) if b["step"] - 1 not in interrupted]
        summaries.append(
            {
                "run": run.name,
                "finished": finished(directory),
                "steps": evals[-1]["step"] if evals else 0,
                "tokens": (evals[-1]["step"] if evals else 0) * per_update,
                "perplexity": evals[-1]["perplexity"] if evals else None,
                "mask_input_perplexity": evals[-1].get("mask_input_perplexity") if evals else None,
                "mask_input_over_unigram": evals[-1].get("perplexity_over_unigram") if evals else None,
                "reads_context_from": reads_context_from(evals),
                "baseline": baseline_for(plan, run),
                "tokens_per_s": per_update / statistics.median(gaps) if gaps else None,
            }
        )
    return curves, summaries


def write_report(plan: BooksPlan) -> str:
    curves, summaries = collate(plan)
    os.makedirs(plan.output_dir, exist_ok=True)
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=CURVE_COLUMNS)
    writer.writeheader()
    writer.writerows(curves)
    write_text_atomic(os.path.join(plan.output_dir, "curves.csv"), text.getvalue())
    at_step = {(row["run"], row["step"]): row for row in curves}  # each evaluation, to compare at the same update
    lines = [
        f"# {os.path.basename(plan.output_dir)}: validation perplexity on the held-out books",
        "",
        f"Recipe {plan.recipe}, shared overrides {json.dumps(plan.shared)}. Load average when written: "
        f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())}. Tokens/s: median over updates, under that machine's load.",
        "Perplexity over all scored tokens, and at those whose input is <mask> (predictable from the context only; "
        "x unigram below 1: better than the training tokens' frequencies); both against the baseline of the run's own "
        f"seed ({plan.baseline}, or its twin with that seed: the same tokens and masks) at the same update.",
        "",
        "| run | finished | updates | tokens | perplexity | at <mask> | x unigram | baseline | vs baseline: perplexity "
        f"/ at <mask> | reads context from update (x unigram < {READS_CONTEXT} from then on) | training tokens/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def number(value, form):
        return format(value, form) if value else "-"

    def ratio(s: dict, base: dict | None, key: str) -> str:
        return number(s[key] / base[key] if base and base[key] and s[key] else None, ".3f")

    for s in summaries:
        base = at_step.get((s["baseline"], s["steps"]))  # None until the baseline has evaluated at that update
        reads = "not yet" if s["reads_context_from"] is None else s["reads_context_from"]
        lines.append(
            f"| {s['run']} | {'yes' if s['finished'] else 'no'} | {s['steps']} | {s['tokens']:,} "
            f"| {number(s['perplexity'], '.1f')} | {number(s['mask_input_perplexity'], '.1f')} "
            f"| {number(s['mask_input_over_unigram'], '.3f')} | {s['baseline'] or '-'} "
            f"| {ratio(s, base, 'perplexity')} / {ratio(s, base, 'mask_input_perplexity')} | {reads} "
            f"| {number(s['tokens_per_s'], ',.0f')} |"
        )
    text = "\n".join(lines) + "\n"
    write_text_atomic(os.path.join(plan.output_dir, "results.md"), text)
    write_json_atomic(os.path.join(plan.output_dir, "results.json"), {"runs": summaries})
    return text


def run_plan(plan: BooksPlan, only: list[str] | None = None) -> None:
    pending = [run for run in plan.runs if not (only and run.name not in only) and not finished(run_dir(plan, run))]
    mine = [run.name for run in pending]
    with claim_runs(plan.output_dir, mine) as claims:  # before their settings are checked and written
        check_settings(plan, mine)
        running = claimed_by_others(plan.output_dir, mine)
        for run in plan.runs:
            if run in pending or (os.path.isdir(run_dir(plan, run)) and run.name not in running):
                record_settings(plan, run)
        for run in pending:
            run_one(plan, run, claims[run.name])


def run_one(plan: BooksPlan, run: Run, claim: int | None = None) -> None:
    """Run one run of the plan as a child, resumed from its last checkpoint, then write the report."""
    args = command(plan, run)
    os.makedirs(plan.output_dir, exist_ok=True)
    with open(os.path.join(plan.output_dir, f"{run.name}.log"), "a", encoding="utf-8") as log:
        log.write(f"\n# {time.strftime('%Y-%m-%d %H:%M:%S')} load {os.getloadavg()}\n# {' '.join(args)}\n")
        log.flush()
        code, stopped_by = run_child(args, log, claim)
    write_report(plan)
    if stopped_by is not None:
        raise SystemExit(stopped_message(stopped_by, run.name, code, f"{plan.output_dir}/{run.name}.log"))
    if code != 0:
        raise SystemExit(f"run {run.name} exited with {code}; its console is {plan.output_dir}/{run.name}.log")


# The validation text looked for in the training books: a slice of OVERLAP_CHARACTERS (author_attribution's) every
# OVERLAP_EVERY characters of the validation blocks' text.
OVERLAP_EVERY = 1000
OVERLAP_FILE = "validation_overlap.json"


# What sets the blocks a run reads and how they fall into batches and updates (data.input_length does not: it cuts each
# block into inputs, the same text).
READS = (
    "data.datasets",
    "data.block_size",
    "data.max_train_blocks",
    "data.short_block_probability",
    "data.short_block_min_length",
    "data.streaming",
    "training.per_device_train_batch_size",
    "training.gradient_accumulation_steps",
    "training.max_steps",
)


def setting(resolved: PretrainRecipe, key: str):
    """A recipe's value of a dotted key (section.name)."""
    section, name = key.split(".")
    return getattr(getattr(resolved, section), name)


def training_batches(trainer):
    """Every batch a run's training reads, with its update (from 1), in the order the Trainer reads them: pass after
    pass over the training blocks (each pass in its own order: the loader's epoch set as the Trainer sets it) until
    max_steps updates, a pass's last update taking the batches left (fewer than gradient_accumulation_steps). A stream
    (no length) is read as one pass of max_steps updates."""
    args = trainer.args
    accumulation, loader = args.gradient_accumulation_steps, trainer.get_train_dataloader()
    try:
        length = len(loader)
    except TypeError:
        length = None
    if length is None:
        for index, batch in zip(range(args.max_steps * accumulation), loader):
            yield index // accumulation + 1, batch
        return
    per_pass = max(-(-length // accumulation), 1)
    done, epoch = 0, 0
    while done < args.max_steps:
        if hasattr(loader, "set_epoch"):  # as Trainer._run_epoch
            loader.set_epoch(epoch)
        inner = getattr(getattr(loader, "batch_sampler", None), "batch_sampler", None)
        if hasattr(inner, "set_epoch"):
            inner.set_epoch(epoch)
        for index, batch in enumerate(loader):
            update = done + index // accumulation + 1
            if update > args.max_steps:
                break
            yield update, batch
        done, epoch = done + per_pass, epoch + 1


def block_text(batch, tokenizer) -> str:
    """The text of a batch's blocks as read before masking (a masked position's label is its token), normalised."""
    from .author_attribution import normalised

    ids = batch["input_ids"].clone()
    masked = batch["labels"] != -100
    ids[masked] = batch["labels"][masked]
    return normalised(tokenizer.decode(ids.reshape(-1).tolist()))


def validation_overlap(plan: BooksPlan) -> dict:
    """How much of the validation tokens' text the training books also hold (a story both in a held-out book and in a
    training collection, a volume of an edition), and for each training seed of the plan which updates read a block
    holding it: slices of the validation blocks' text (`OVERLAP_EVERY`), looked for in the training books, then in
    the text of every block each seed's training reads (the runs of one seed read the same blocks in the same order,
    so the first run of each seed stands for them all). Written to <output_dir>/validation_overlap.json."""
    import glob
    import tempfile

    from linformer_hf.training.pretraining import build_trainer

    from .author_attribution import OVERLAP_CHARACTERS, normalised_text

    recipes = {run.name: recipe(plan, run) for run in plan.runs}
    seeds: dict[int, Run] = {}
    for run in plan.runs:
        seeds.setdefault(recipes[run.name].training.seed, run)
    for run in plan.runs:  # the first run of its seed stands for it: it must read the same batches
        first = seeds[recipes[run.name].training.seed]
        differ = [key for key in READS if setting(recipes[run.name], key) != setting(recipes[first.name], key)]
        if differ:
            raise ConfigError(
                f"runs {first.name} and {run.name} have one seed and read other blocks or batches ({', '.join(differ)} "
                "differ): --validation_overlap takes a seed's first run for all its runs. Give them plans of their own."
            )
    data = recipes[plan.runs[0].name].data
    if not data.validation_datasets:
        raise ConfigError(
            "--validation_overlap looks for the validation text in the training books (data.datasets), and the "
            "plan's validation blocks are held out of those very books (data.validation_split_percentage), where all "
            "of it would be found. Give held-out books as data.validation_datasets."
        )
    sources = data.datasets
    sliced = [source for source in sources if "[" in str(source.get("split", ""))]
    if sliced:  # the text outside the slice would be counted as training text
        raise ConfigError(
            f"--validation_overlap looks for the validation text in whole training splits, and data.datasets reads a "
            f"slice of one ({sliced[0]}): run it on a plan that trains on whole splits."
        )
    shards = [
        path
        for source in sources
        for path in sorted(glob.glob(os.path.join(source.get("path", ""), f"{source.get('split', 'train')}*.parquet")))
    ]
    if not sources or len(shards) == 0 or any(not os.path.isdir(source.get("path", "")) for source in sources):
        raise ConfigError(
            "--validation_overlap reads the training books from local folders of parquet shards in the Hub's layout "
            f"(data.datasets), and the plan's are {sources}."
        )
    result = {"slice_characters": OVERLAP_CHARACTERS, "every_characters": OVERLAP_EVERY, "seeds": {}}
    found: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed, run in seeds.items():
            resolved = recipe(plan, run)  # a copy of its own: its output folder is the scratch one
            resolved.training.output_dir = os.path.join(scratch, run.name)
            trainer = build_trainer(resolved, show_progress=False)
            try:
                tokenizer = trainer.processing_class
                if not result["seeds"]:  # the validation blocks are every run's
                    text = "".join(block_text(batch, tokenizer) for batch in trainer.get_eval_dataloader())
                    slices = [text[i : i + OVERLAP_CHARACTERS] for i in range(0, len(text), OVERLAP_EVERY)]
                    slices = [piece for piece in slices if len(piece) == OVERLAP_CHARACTERS]
                    training_text = normalised_text(shards)
                    found = [piece for piece in slices if piece in training_text]
                    del training_text
                    result.update(
                        {
                            "validation_characters": len(text),
                            "slices": len(slices),
                            "slices_in_training_books": len(found),
                        }
                    )
                updates = {}
                if found:
                    for update, batch in training_batches(trainer):
                        read = block_text(batch, tokenizer)
                        # a slice across two blocks is read half in each: either half counts
                        halves = ((piece[: len(piece) // 2], piece[len(piece) // 2 :]) for piece in found)
                        hits = sum(first in read or second in read for first, second in halves)
                        if hits:
                            updates[update] = updates.get(update, 0) + hits
                result["seeds"][str(seed)] = {
                    "runs": [r.name for r in plan.runs if recipes[r.name].training.seed == seed],
                    "updates_reading_it": updates,  # update (from 1): how many of the found slices its blocks hold
                }
            finally:
                trainer.close()
    os.makedirs(plan.output_dir, exist_ok=True)
    write_json_atomic(os.path.join(plan.output_dir, OVERLAP_FILE), result)
    return result


def overlap_summary(result: dict) -> str:
    lines = [
        f"{result['slices_in_training_books']} of {result['slices']} slices of the validation text "
        f"({result['slice_characters']} characters every {result['every_characters']:,}) are in training books."
    ]
    for seed, entry in result["seeds"].items():
        updates = entry["updates_reading_it"]
        read = ", ".join(f"update {u} ({hits} slices)" for u, hits in updates.items()) or "no update"
        lines.append(f"seed {seed} ({', '.join(entry['runs'])}): {read} read a block holding them.")
    return "\n".join(lines)


def load_plan(path: str) -> BooksPlan:
    plan = build_section(BooksPlan, load_yaml(path, given_as="--plan"))
    plan.validate()
    return plan


def main(argv=None):
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plan", required=True)
    parser.add_argument("--only", nargs="+", help="run only these runs of the plan")
    parser.add_argument("--report", action="store_true", help="collate the finished and running runs, run nothing")
    parser.add_argument(
        "--validation_overlap",
        action="store_true",
        help="how much validation text the training books hold, and which updates of each seed read it; run nothing",
    )
    args = parser.parse_args(argv)
    try:
        plan = load_plan(args.plan)
        unknown = sorted(set(args.only or []) - {run.name for run in plan.runs})
        if unknown:
            raise ConfigError(f"--only names unknown runs {unknown}; the plan's are {[r.name for r in plan.runs]}.")
        check_settings(plan)
        if args.validation_overlap:
            print(overlap_summary(validation_overlap(plan)))
            return
        if args.report and not any(log_rows(run_dir(plan, run)) for run in plan.runs):
            # nothing would be collated: an empty results.md, results.json and curves.csv, and exit 0, said otherwise
            raise ConfigError(
                f"no run of this plan has started under {plan.output_dir} (no run folder there has a train_log.jsonl "
                "with a row); nothing to report. Run the plan without --report first."
            )
        if not args.report:
            run_plan(plan, args.only)
    except USER_ERRORS as err:
        report(err)
        raise SystemExit(2) from None
    print(write_report(plan), end="")


if __name__ == "__main__":
    main()
