"""The classifier to fine-tune and the inputs it reads: the pretrained model (or a RoBERTa checkpoint converted to
Linformer or Performer in ``<output_dir>/converted``), its tokenizer, its config (the task's classes and their names,
``model.config``), the longest input it takes, the distillation teacher checked against that length and recorded, and
the task's splits tokenised to it."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..loading import TOKENIZER_FILES, pad_as_the_model_takes
from ..outputs import write_json_atomic
from . import compiling
from .checkpointing import FINETUNING, check_resume_compatible, recipe_fingerprint
from .config import ConfigError, FinetuneRecipe
from .errors import LOCAL_MODEL, hub_unreachable, hub_unreachable_error
from .tasks import Task
from .tokenizer import check_has_vocabulary
from .validation import check_model_files, check_tokenizer_fits_model

if TYPE_CHECKING:
    from .finetuning_data import TaskData
    from .finetuning_setup import RunSetup

logger = logging.getLogger(__name__)


@dataclass
class CheckedModel:
    """The model as `check_model` found it, before the output directory is claimed."""

    model: Any  # the recipe's model section; for a conversion done already, its output folder (`converted_model`)
    tokenizer: Any
    config: Any  # the classifier's config (the task's classes and their names, model.config)
    max_length: int
    teacher_record: dict | None  # which teacher the run learns from (distillation.teacher_record), None without one
    fingerprint: dict | None  # the recipe (checkpointing.recipe_fingerprint); None until a conversion to come is done
    converts: bool  # the conversion of model.pretrained is still to be done (tokenizer and config: the planned ones)


@dataclass
class Classifier:
    model: Any  # an AutoModelForSequenceClassification
    tokenizer: Any
    encoded: dict  # the task's splits tokenised to at most max_length tokens
    max_length: int
    teacher_record: dict | None  # which teacher the run learns from (distillation.teacher_record), None without one
    fingerprint: dict  # the recipe each checkpoint records (checkpointing.recipe_fingerprint)


def check_model(recipe: FinetuneRecipe, data: TaskData, run: RunSetup) -> CheckedModel:
    """Every check on the model, its tokenizer and config (files, tokenizer, ``model.config`` fields, lengths), the
    teacher against the length, the device for ``training.torch_compile``, and a resumed checkpoint's recipe against
    this one: all before the output directory is claimed (an overwrite deletes the earlier run's outputs there), so a
    refused run leaves it as it was. Reads no weights and writes nothing.

    With ``model.convert_from_roberta`` the conversion (written into ``<output_dir>/converted``) comes after the
    claim: its source and settings are checked here, and its tokenizer and lengths against the config it will have;
    a resumed run takes the conversion its first part wrote."""
    from . import distillation

    tcfg, mcfg = recipe.training, recipe.model
    planned, converts = None, False
    if mcfg.convert_from_roberta is not None:
        if run.resuming and os.path.isfile(os.path.join(tcfg.output_dir, "converted", "config.json")):
            mcfg = converted_model(mcfg, tcfg.output_dir)
        else:
            planned, converts = planned_conversion_config(mcfg, data.task), True
    tokenizer, config = load_tokenizer_and_config(mcfg, data.task, data.class_names, planned)
    max_length = input_length(recipe, tokenizer, config, data.task)
    record = None
    if recipe.distillation.teacher is not None:
        distillation.check_teacher_length(recipe.distillation.teacher, max_length)
        record = distillation.teacher_record(recipe.distillation)
    if run.resuming:
        distillation.check_resumed_teacher(tcfg.output_dir, record)
    compiling.check_compile_device(
        tcfg.torch_compile, tcfg.torch_compile_mode, tcfg.torch_compile_backend, run.args.device
    )
    checked = CheckedModel(mcfg, tokenizer, config, max_length, record, None, converts)
    if not converts:
        checked.fingerprint = checked_fingerprint(recipe, config, tokenizer, run)
    return checked


def checked_fingerprint(recipe: FinetuneRecipe, config, tokenizer, run: RunSetup) -> dict:
    """What each checkpoint records (the task, the files, the model, the seed and batch), and the checkpoint resumed
    compared with it (the teacher: `check_model`): before the tokenising and the model's weights."""
    fingerprint = recipe_fingerprint(recipe, config, tokenizer, run.processes.num_processes)
    if run.checkpoint:
        tcfg = recipe.training
        latest = tcfg.resume_from_checkpoint == "latest"
        check_resume_compatible(run.checkpoint, fingerprint, tcfg.max_steps, latest, FINETUNING, unrecorded_ok=True)
    return fingerprint


def input_length(recipe: FinetuneRecipe, tokenizer, config, task: Task) -> int:
    """The longest input the run reads (``data.max_seq_length``, or the model's n), checked against the model and the
    tokenizer's special tokens."""
    from ..models import max_input_length

    n = max_input_length(config)
    max_length = recipe.data.max_seq_length or n
    if max_length > n:
        raise ConfigError(
            f"data.max_seq_length={max_length} is larger than the model's longest input n={n}: set "
            f"--data.max_seq_length {n} or less (null: the model's n), or fine-tune a model with a larger n."
        )
    pairs = len(task.text_columns) == 2
    least = tokenizer.num_special_tokens_to_add(pair=pairs) + len(task.text_columns)  # a token of each text
    if max_length < least:  # else the tokenizer does not truncate at all (a logged warning): inputs past the length
        raise ConfigError(
            f"data.max_seq_length={max_length} leaves no token for the text: the tokenizer adds "
            f"{least - len(task.text_columns)} special tokens to each {'pair' if pairs else 'input'}. Set "
            f"--data.max_seq_length {least} or more (null: the model's n={n})."
        )
    return max_length


def load_classifier(recipe: FinetuneRecipe, data: TaskData, run: RunSetup, checked: CheckedModel) -> Classifier:
    """Once the output directory is claimed: the conversion (where `check_model` left one to do, then its model
    checked as any other), the teacher recorded, the splits tokenised and the model's weights read."""
    from transformers import AutoModelForSequenceClassification, set_seed

    tcfg, dcfg = recipe.training, recipe.data
    mcfg, tokenizer, config, max_length = checked.model, checked.tokenizer, checked.config, checked.max_length
    fingerprint = checked.fingerprint
    if checked.converts:
        mcfg = convert_roberta_for_finetuning(mcfg, tcfg.output_dir)
        tokenizer, config = load_tokenizer_and_config(mcfg, data.task, data.class_names)
        max_length = input_length(recipe, tokenizer, config, data.task)
        fingerprint = checked_fingerprint(recipe, config, tokenizer, run)
    if recipe.distillation.teacher is not None and not run.resuming and run.processes.is_main_process:
        from . import distillation

        write_json_atomic(os.path.join(tcfg.output_dir, distillation.RECORD_FILE), checked.teacher_record)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    with run.args.main_process_first():
        encoded = tokenize_task(
            data.splits,
            tokenizer,
            data.task,
            max_length,
            dcfg.preprocessing_num_workers,
            say=run.processes.is_main_process,
            limit="data.max_seq_length" if dcfg.max_seq_length else "the model's n",
        )
    set_seed(tcfg.seed)  # the classification head's initialisation
    model = AutoModelForSequenceClassification.from_pretrained(mcfg.pretrained, config=config)
    if tcfg.torch_compile == "layers":
        compiling.compile_layers(model, tcfg.torch_compile_mode, tcfg.torch_compile_backend)
    return Classifier(model, tokenizer, encoded, max_length, checked.teacher_record, fingerprint)


# Config fields that set the shapes of saved weights: a pretrained model cannot take another value of them.
WEIGHT_SHAPE_FIELDS = {
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "max_sequence_length",
    "projected_length",
    "sharing",
    "projection",
}


def load_tokenizer_and_config(mcfg, task: Task, class_names: list[str], config=None):
    """The tokenizer and the model's config for the task, checked against each other and against ``model.config``;
    the tokenizer pads as the model takes its padding. ``config``: the one a conversion of ``mcfg.pretrained`` will
    give (`planned_conversion_config`), in place of the folder's own."""
    from transformers import AutoConfig, AutoTokenizer

    if config is None:
        config = AutoConfig.from_pretrained(mcfg.pretrained, num_labels=task.num_labels)
    if config.model_type not in ("linformer", "performer"):  # a teacher to distil from, say; or a conversion forgotten
        logger.warning(
            "model.pretrained=%s is a %r model: it is fine-tuned as it is, with its own attention. For a Linformer, "
            "convert it (model.convert_from_roberta).",
            mcfg.pretrained,
            config.model_type,
        )
    check_label_fields(mcfg.config, task.num_labels)
    unknown = sorted(set(mcfg.config) - set(config.to_dict()) - {"num_labels"})
    if unknown:
        raise ConfigError(f"Unknown {type(config).__name__} field(s) {unknown} in model.config.")
    reshaped = sorted(k for k, v in mcfg.config.items() if k in WEIGHT_SHAPE_FIELDS and getattr(config, k) != v)
    if reshaped:  # else the load fails after the tokenising, blaming an edited config.json
        given = ", ".join(f"{k}={mcfg.config[k]!r} (saved: {getattr(config, k)!r})" for k in reshaped)
        raise ConfigError(
            f"model.config {given} would change the shape of {mcfg.pretrained}'s trained weights: a trained model "
            "keeps its sizes, n and k. For another n, uptrain it (docs/pretrained.md, long documents) or convert its "
            "RoBERTa/BERT source again (model.convert_from_roberta)."
        )
    config.id2label, config.label2id = dict(enumerate(class_names)), {name: i for i, name in enumerate(class_names)}
    for k, v in mcfg.config.items():  # after the names: model.config.id2label / label2id in the recipe win
        setattr(config, k, v)
    if config.problem_type is None and task.num_labels > 1:
        # What transformers' classification heads set at their first call (integer labels): set here, a compiled
        # model does not recompile at the second update when the config changes under it.
        config.problem_type = "single_label_classification"
    check_model_files(mcfg.pretrained, "model.pretrained", holds_weights=True)  # else an OSError after the tokenising
    tok_dir = mcfg.tokenizer or mcfg.pretrained
    if os.path.isdir(tok_dir) and not any(os.path.isfile(os.path.join(tok_dir, name)) for name in TOKENIZER_FILES):
        # transformers 5 makes an empty tokenizer of a folder without one (5 tokens: every word <unk>) without a word
        raise ConfigError(
            f"{'model.tokenizer' if mcfg.tokenizer else 'model.pretrained'}={tok_dir} holds no tokenizer (none of "
            f"{', '.join(TOKENIZER_FILES)}): set model.tokenizer to the folder of the tokenizer the model was "
            "pretrained with."
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(f"No tokenizer in {tok_dir}; set model.tokenizer to a tokenizer dir. ({err})") from err
    check_has_vocabulary(tokenizer, tok_dir)
    check_tokenizer_fits_model(
        tokenizer, config, tok_dir, mcfg.pretrained, "model.tokenizer", pairs=len(task.text_columns) == 2
    )
    pad_as_the_model_takes(tokenizer, config)  # the collator's batches, and the tokenizer saved with the model
    return tokenizer, config


def check_label_fields(settings: dict, num_labels: int) -> None:
    """``model.config`` may rename the task's classes (id2label, label2id), never change their number or the loss:
    before, id2label with three names trained a three-class head on the two-class task without a word, and
    problem_type regression failed at the first update with a shape error."""
    for key in ("num_labels", "id2label", "label2id"):
        if key in settings:
            value = settings[key]
            classes = value if key == "num_labels" else len(value) if isinstance(value, dict) else None
            if classes != num_labels:
                raise ConfigError(
                    f"model.config {key}={value!r} gives {classes if classes is not None else 'no'} classes, but the "
                    f"task has {num_labels} (labels 0..{num_labels - 1}): the classifier has the task's classes. Drop "
                    f"{key} from model.config; id2label may rename them ({num_labels} names: {{0: NAME, 1: NAME}})."
                )
    problem_type = settings.get("problem_type", "single_label_classification")
    if problem_type != "single_label_classification":
        raise ConfigError(
            f"model.config problem_type={problem_type!r}: fine-tuning trains single-label classification (the "
            "cross-entropy of the class index in the label column). Drop problem_type from model.config."
        )


def planned_conversion_config(mcfg, task: Task):
    """The config the conversion of ``mcfg.pretrained`` (``mcfg.convert_from_roberta``) will give, for the task, with
    the source and the settings checked as the conversion checks them first: before the output directory is claimed,
    reading no weights."""
    from transformers import AutoConfig

    from ..conversion import SOURCE_CONFIGS, check_conversion
    from .validation import check_model_source

    check_model_source(mcfg.pretrained, "model.pretrained")
    try:
        source = AutoConfig.from_pretrained(mcfg.pretrained)
        if source.model_type not in SOURCE_CONFIGS:
            raise ValueError(
                f"{mcfg.pretrained} is a {source.model_type!r} checkpoint; only {sorted(SOURCE_CONFIGS)} checkpoints "
                "convert."
            )
        config = check_conversion(source, **mcfg.convert_from_roberta)
    except (OSError, ValueError) as err:
        if hub_unreachable(err):  # transformers' message names neither the model nor the way out
            raise hub_unreachable_error("model.pretrained", mcfg.pretrained, err, LOCAL_MODEL) from None
        raise ConfigError(
            f"Could not convert RoBERTa checkpoint {mcfg.pretrained}: {' '.join(str(err).split())}"
        ) from err
    config.num_labels = task.num_labels
    return config


def convert_roberta_for_finetuning(mcfg, output_dir: str):
    """Convert the RoBERTa checkpoint in ``mcfg.pretrained`` to the ``target`` family of ``mcfg.convert_from_roberta``
    (Linformer by default, or Performer) in ``<output_dir>/converted``; returns the model section that reads it
    (`converted_model`)."""
    from accelerate import PartialState
    from huggingface_hub.errors import StrictDataclassError

    from ..conversion import convert_checkpoint

    target = os.path.join(output_dir, "converted")
    state = PartialState()
    with state.main_process_first():
        if state.is_main_process:
            from .validation import check_model_source

            check_model_source(mcfg.pretrained, "model.pretrained")
            try:
                convert_checkpoint(mcfg.pretrained, target, **mcfg.convert_from_roberta)
            except (OSError, ValueError, StrictDataclassError) as err:
                if hub_unreachable(err):  # transformers' message names neither the model nor the way out
                    raise hub_unreachable_error("model.pretrained", mcfg.pretrained, err, LOCAL_MODEL) from None
                raise ConfigError(
                    f"Could not convert RoBERTa checkpoint {mcfg.pretrained}: {' '.join(str(err).split())}"
                ) from err
    return converted_model(mcfg, output_dir)


def converted_model(mcfg, output_dir: str):
    """The model section of a run whose conversion is in ``<output_dir>/converted`` (written by this run, or by the
    first part of a resumed one): the converted folder as ``model.pretrained``, its own tokenizer (the source's where
    it has none, unless ``model.tokenizer`` names one)."""
    import dataclasses

    target = os.path.join(output_dir, "converted")
    tokenizer = mcfg.tokenizer
    if tokenizer is None and not any(os.path.exists(os.path.join(target, f)) for f in ("tokenizer.json", "vocab.json")):
        tokenizer = mcfg.pretrained
    return dataclasses.replace(mcfg, pretrained=target, tokenizer=tokenizer, convert_from_roberta=None)


def tokenize_task(
    splits: dict,
    tokenizer,
    task: Task,
    max_length: int,
    num_proc=None,
    say: bool = True,
    limit: str = "data.max_seq_length",
) -> dict:
    """Each split tokenised to at most `max_length` tokens. Examples that are longer are cut (for pairs, the longer
    text first, as the tokenizer's `longest_first`), and how many were cut is reported, split by split (where
    ``say``: by the main process), naming what set the length (``limit``)."""

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
            share = f"{100 * truncated / len(encoded):.0f}%" if truncated < len(encoded) else "all"
            share = "99%" if share == "100%" else share  # not all: a share rounded up to all would say so
            cut.append(f"{truncated:,} of {len(encoded):,} {name} examples ({share})")
        out[name] = encoded.remove_columns("truncated")
    if cut and say:
        print(
            f"Truncated to {limit}={max_length} tokens: {'; '.join(cut)}. The model reads only their "
            "first tokens; raise data.max_seq_length (up to the model's n) or convert at a larger n to read them whole."
        )
    return out
