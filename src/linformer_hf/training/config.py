"""YAML recipes for pretraining and fine-tuning, as dataclasses with command-line overrides.

A recipe file is a mapping of sections (``model``, ``data``, ``training`` ...) to mappings of keys. Every key is
checked against the dataclass of its section: an unknown section or key is an error that names it and lists the
allowed ones. Any key can be overridden on the command line as ``--section.key value`` (or ``--section.key=value``);
values are parsed as YAML (``8``, ``true``, ``null``, ``[a, b]``) and converted to the field's type (``Optional``,
``list[X]``, ``Literal[...]``, nested dataclasses). Each section then checks its values in ``validate()``. The
replication plan (``experiments/replication.py``) is read by the same functions, with the same overrides.

Why this module and not a config library (decided for issue 10):

- ``transformers.HfArgumentParser`` maps dataclass fields to flat flags. Two sections here share field names
  (``output_dir``, ``seed``, ``max_steps`` in ``training``; ``config`` in ``model``), which a flat namespace cannot
  hold, and it has no ``--section.key`` form nor overrides on top of a YAML file (``parse_yaml_file`` reads a flat
  file and stops there). It would replace the type conversion only.
- OmegaConf structured configs do nest, merge a YAML file with dotted overrides and check types, but the override
  syntax is ``section.key=value`` (not the ``--section.key value`` the scripts, docs and ``accelerate launch`` lines
  use), and it would be a new dependency of the ``train`` extra to replace about 60 lines of conversion;
  ``validate()`` would still be ours.
- draccus (nested dataclasses, YAML, ``--section.key value``) is the closest fit. It is not installed in the
  project's environment, and its messages for our error cases (unknown key with the allowed list, wrong type) were
  not checked, so it is not adopted in this change; it is the library to try first if this module grows.

What stays hand-written is the part no library gives in this form: about 120 lines of YAML-to-dataclass
conversion and override parsing (`_coerce`, `build_section`, `parse_overrides`, `apply_overrides`). Revisit if a
third kind of config file appears.

The project's one rule for options: a sectioned YAML recipe (pretraining, fine-tuning, the replication plan) goes
through this module; a flat command line with no recipe file (the efficiency benchmark, attention transfer, the
conversion and Hub scripts) is a dataclass read by ``HfArgumentParser`` or argparse. Flags are spelled with
underscores everywhere (``--output_dir``, ``--training.max_steps``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from typing import Any

import yaml

from .errors import ConfigError
from .tasks import TASKS


def _check_at_least(section, names: tuple[str, ...], minimum, optional_means: str | None = None):
    """Each named field of ``section`` is >= minimum (or None where ``optional_means`` says what None does)."""
    for name in names:
        value = getattr(section, name)
        if value is None and optional_means is not None:
            continue
        # nan passes every comparison, and inf is no count or budget: both refused, not run with
        if value is None or not math.isfinite(value) or value < minimum:
            hint = f" (or null: {optional_means})" if optional_means else ""
            raise ConfigError(f"training.{name} must be >= {minimum}{hint}, got {value}.")


def _check_seed(section) -> None:
    """numpy's seed (set by the Trainer and set_seed) takes [0, 2**32 - 1] only, and fails after the run has begun."""
    if not 0 <= section.seed < 2**32:
        raise ConfigError(f"training.seed must be in [0, {2**32 - 1}] (numpy's seed range), got {section.seed}.")


def _check_report_to(section) -> None:
    """Each tracker of ``training.report_to`` is installed: the Trainer fails on one that is not, after the data is
    tokenised."""
    from transformers.integrations import get_available_reporting_integrations

    wanted = [name for name in section.report_to if name not in ("none", "all")]
    missing = sorted(set(wanted) - set(get_available_reporting_integrations()))
    if missing:
        raise ConfigError(
            f"training.report_to names {missing}, not installed here: pip install {' '.join(missing)}, or drop it "
            f"(installed: {get_available_reporting_integrations() or 'none'})."
        )


def _check_percentage(name: str, value: float):
    if not 0 < value < 100:
        raise ConfigError(
            f"data.{name} must be in (0, 100) (the share of train held out for validation, in percent), got {value}."
        )


def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """Convert a YAML-parsed value to the annotated type (``Optional[X]``, ``list[X]``, ``dict``, scalars)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", typing.Union)):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"{where}: cannot convert {value!r}")
    if annotation is Any:
        return value
    if dataclasses.is_dataclass(annotation):  # a nested section, e.g. a list entry of a replication plan
        return value if isinstance(value, annotation) else build_section(annotation, value, where)
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: must be one of {', '.join(map(repr, args))}, got {value!r}.")
        return value
    if origin is list:
        if value is None:
            return []
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [_coerce(v, args[0] if args else Any, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or annotation is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(float(value)) if float(value).is_integer() else int(value)
            except ValueError:
                pass
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            return float(value)  # also accepts "5e-4", which YAML 1.1 reads as a string
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if annotation is str:
        if value is None:  # str(None) would be the folder or name 'None'
            raise ConfigError(f"{where}: expected a string, got null; give a value (this key cannot be null).")
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        if isinstance(value, bool):  # str(False) would be 'False', not the word that was written
            raise ConfigError(
                f"{where}: expected a string, got the boolean {value}: YAML reads a bare yes/no/on/off/true/false as a "
                f"boolean. Quote the word ('...') to pass it as text."
            )
        return str(value)
    return value


def build_section(cls, values: dict[str, Any] | None, section: str = ""):
    """``cls(**values)`` with every key checked and every value converted; ``section`` ("" at the top) names them."""
    values = values or {}
    prefix, where = (f"{section}.", f"'{section}'") if section else ("", "the file")
    if not isinstance(values, dict):
        raise ConfigError(f"Section {where} must be a mapping of keys to values, got {values!r}.")
    types = _field_types(cls)
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise ConfigError(
            f"Unknown key(s) {', '.join(repr(prefix + k) for k in unknown)} in the config. "
            f"Allowed keys in {where}: {', '.join(sorted(types))}."
        )
    kwargs = {k: _coerce(v, types[k], prefix + k) for k, v in values.items()}
    return cls(**kwargs)


def load_yaml(path: str | os.PathLike, given_as: str = "--config") -> dict[str, Any]:
    """The mapping in the YAML file `path`; `given_as` names where the user gave it (a flag or a recipe key), for the
    error when it is missing."""
    if not os.path.isfile(path):
        raise ConfigError(f"Config file not found: {path}. Pass an existing YAML file as {given_as}.")
    with open(path, encoding="utf-8") as fh:
        try:
            data = yaml.safe_load(fh) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"Config file {path} must contain a mapping of sections, got {type(data).__name__}.")
    return data


def _check_mixed_precision(section) -> None:
    """YAML reads a bare ``no`` (in a recipe or ``--training.mixed_precision no``) as false: take it as ``"no"``."""
    if section.mixed_precision is False:
        section.mixed_precision = "no"
    if section.mixed_precision not in (None, "no", "fp16", "bf16"):
        raise ConfigError(f"training.mixed_precision must be null, no, fp16 or bf16, got {section.mixed_precision!r}.")


def parse_overrides(argv: list[str], top_level_keys: bool = False) -> dict[str, Any]:
    """Parse ``--section.key value`` / ``--section.key=value`` pairs into a flat ``{"section.key": value}``.

    Recipes have sections only, so every key is dotted; a replication plan also has top-level keys
    (``top_level_keys=True``: ``--output_dir x`` as well as ``--pretrain.seed 43``).
    """
    overrides: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--") or not (top_level_keys or "." in arg.split("=", 1)[0]):
            raise ConfigError(
                f"Unrecognised argument {arg!r}. Overrides have the form --section.key value "
                f"(for example --training.learning_rate 1e-4)."
            )
        if "=" in arg:
            key, raw = arg[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(argv):
                raise ConfigError(f"Override {arg} needs a value.")
            key, raw = arg[2:], argv[i + 1]
            i += 2
        key = key.replace("-", "_")  # --training.learning-rate is --training.learning_rate: no recipe key has a dash
        try:
            overrides[key] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError as err:
            raise ConfigError(f"Override --{key}: cannot parse the value {raw!r} as YAML ({err}).") from None
    return overrides


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    data = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node = data
        for part in parts[:-1]:
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise ConfigError(f"Cannot override {dotted}: '{part}' is not a section.")
            node[part] = dict(node[part])
            node = node[part]
        node[parts[-1]] = value
    return data


def build_recipe(cls, data: dict[str, Any]):
    """Build a top-level recipe dataclass whose fields are section dataclasses."""
    sections = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(sections))
    if unknown:
        # A recipe of the other command (its own sections give it away): say which, not only what is unknown.
        other = {"tokenizer": "a pretraining recipe (configs/pretrain/)", "distillation": "a fine-tuning recipe "
                 "(configs/finetune/)"}  # fmt: skip
        whose = next((other[name] for name in unknown if name in other), None)
        raise ConfigError(
            f"Unknown section(s) {', '.join(map(repr, unknown))} in the config. "
            f"Allowed sections: {', '.join(sorted(sections))}."
            + (f" It looks like {whose}: give it to that command." if whose else "")
        )
    hints = typing.get_type_hints(cls)
    kwargs = {name: build_section(hints[name], data.get(name), name) for name in sections}
    return cls(**kwargs)


def load_recipe(cls, path: str | None, argv: list[str] | None = None, extra: dict[str, Any] | None = None):
    data = load_yaml(path) if path else {}
    overrides = parse_overrides(list(argv or []))
    overrides.update(extra or {})
    recipe = build_recipe(cls, apply_overrides(data, overrides))
    if hasattr(recipe, "validate"):
        recipe.validate()
    return recipe


# --------------------------------------------------------------------------------------------------------------------
# Recipe sections
# --------------------------------------------------------------------------------------------------------------------

MODEL_TYPES = ("linformer", "performer", "roberta", "bert")
TRAINABLE = ("all", "lm_head")
OUTPUT_BIAS_INITS = ("zeros", "unigram")


@dataclasses.dataclass
class ModelSection:
    """Which model to build: from a model YAML (``config_file``) plus inline ``config`` fields, or a pretrained dir."""

    model_type: str = "linformer"  # linformer | performer | roberta (the baseline, same recipe) | bert (a source)
    config_file: str | None = None  # configs/model/*.yaml: fields of the model_type's config class
    config: dict = dataclasses.field(default_factory=dict)  # inline fields, override config_file
    pretrained: str | None = None  # continue from a saved model dir instead of a fresh init
    # Uptraining: model.pretrained is a RoBERTa or BERT masked LM (a dir, or a Hub name when online), converted to
    # model_type when the run starts (linformer_hf.conversion; its learned positions copied out to n), e.g.
    # {max_sequence_length: 4096, projected_length: 256}. The keys are fine-tuning's model.convert_from_roberta's.
    convert_from_roberta: dict | None = None
    # What the run trains: all, or lm_head: only the masked-LM head (its transform and output bias; the output layer
    # shares the frozen word embeddings), to fit a head on an encoder released without one (all-MiniLM-L6-v2) before
    # it is uptrained or scored by masked LM.
    trainable: str = "all"
    # A fresh model's masked-LM output bias: "zeros" (transformers' init) or "unigram", the log frequencies of the
    # training blocks' tokens (add-one smoothed). With "unigram" a model starts at the unigram baseline instead of
    # spending its first hundreds of updates getting there (Adam moves each bias by about the learning rate an update,
    # and the log frequencies span more than 10).
    output_bias_init: str = "zeros"

    def validate(self, resuming: bool = False):
        """``resuming``: the run resumes a checkpoint, which may hold the uptraining's converted model, so a source
        out of reach is not refused here (`build_trainer` reads it only for an older checkpoint)."""
        if self.model_type not in MODEL_TYPES:
            raise ConfigError(f"model.model_type must be one of {MODEL_TYPES}, got {self.model_type!r}.")
        if self.trainable not in TRAINABLE:
            raise ConfigError(f"model.trainable must be one of {TRAINABLE}, got {self.trainable!r}.")
        if self.output_bias_init not in OUTPUT_BIAS_INITS:
            raise ConfigError(
                f"model.output_bias_init must be one of {OUTPUT_BIAS_INITS}, got {self.output_bias_init!r}."
            )
        if self.output_bias_init != "zeros" and self.pretrained is not None:
            raise ConfigError(
                f"model.output_bias_init={self.output_bias_init} initialises a fresh model, and model.pretrained is "
                f"set (its trained head keeps its bias): drop one of them."
            )
        if self.trainable == "lm_head" and self.pretrained is None:
            raise ConfigError(
                "model.trainable=lm_head fits a head on a pretrained encoder, and model.pretrained is not set: give "
                "the encoder (a saved dir or Hub name)."
            )
        if self.trainable == "lm_head" and self.convert_from_roberta is not None:
            raise ConfigError(
                "model.trainable=lm_head fits the head of model.pretrained as it is; fit it in one run, then convert "
                "and uptrain the result (model.convert_from_roberta) in the next."
            )
        if self.config_file is not None and not os.path.isfile(self.config_file):
            raise ConfigError(f"model.config_file not found: {self.config_file}. Use a file from configs/model/.")
        if self.pretrained is None and self.convert_from_roberta is None:
            self._check_heads()
        if self.convert_from_roberta is not None:
            if self.pretrained is None:
                raise ConfigError(
                    "model.convert_from_roberta converts model.pretrained, which is not set: give the RoBERTa or "
                    "BERT masked LM to start from."
                )
            target = self.convert_from_roberta.get("target", self.model_type)
            if target != self.model_type or self.model_type in ("roberta", "bert"):
                raise ConfigError(
                    f"model.convert_from_roberta makes a {target!r} model but model.model_type is "
                    f"{self.model_type!r}: set model.model_type to linformer or performer (the family to convert to)."
                )
            if self.config_file or self.config:
                raise ConfigError(
                    "model.config_file / model.config are not read when model.convert_from_roberta is set (the "
                    "source's config is carried over): give n, k and the other settings in model.convert_from_roberta."
                )
            check_conversion(
                self.convert_from_roberta, self.pretrained, default_target=self.model_type, check_source=not resuming
            )
        elif self.pretrained is not None:
            if self.config_file or self.config:
                raise ConfigError(
                    "model.config_file / model.config are not read when model.pretrained is set (the saved model goes "
                    "on with its own config): drop them (--model.config_file null), or leave model.pretrained unset "
                    "to build a fresh model from them."
                )
            from .validation import check_model_source

            check_model_source(self.pretrained, "model.pretrained")

    def _check_heads(self) -> None:
        """The fresh model's width splits into its heads: the model refuses it only when it is built, after the data
        is tokenised and the output directory claimed."""
        from transformers import AutoConfig

        fields = dict(load_yaml(self.config_file, "model.config_file")) if self.config_file else {}
        fields.update(self.config or {})
        defaults = AutoConfig.for_model(self.model_type)  # the family's defaults (registered by the package)
        hidden = fields.get("hidden_size", defaults.hidden_size)
        heads = fields.get("num_attention_heads", defaults.num_attention_heads)
        if isinstance(heads, int) and heads < 1:
            raise ConfigError(f"model.config: num_attention_heads must be at least 1, got {heads}.")
        if isinstance(hidden, int) and isinstance(heads, int) and hidden % heads:
            raise ConfigError(
                f"model.config: hidden_size={hidden} is not a multiple of num_attention_heads={heads} (each head "
                f"takes hidden_size / num_attention_heads): change one of them, e.g. hidden_size="
                f"{max(heads, hidden - hidden % heads)}."
            )


def conversion_keys(settings: dict, default_target: str = "linformer") -> tuple[str, ...]:
    """The keys model.convert_from_roberta takes: the shared ones, then the target family's settings."""
    from ..conversion import target_family

    target = settings.get("target", default_target)
    try:
        family = target_family(target)
    except ValueError as err:
        raise ConfigError(f"model.convert_from_roberta.target: {err}") from err
    noise = ("projection_noise_std",) if target == "linformer" else ()  # Linformer's projections only
    return ("target", "max_sequence_length", "seed", *noise, *family.setting_names)


def check_conversion(
    settings: dict, pretrained: str, default_target: str = "linformer", check_source: bool = True
) -> None:
    """model.convert_from_roberta names only known keys, and (``check_source``) model.pretrained can be a checkpoint
    to convert."""
    allowed = conversion_keys(settings, default_target)
    unknown = sorted(set(settings) - set(allowed))
    if unknown:
        raise ConfigError(
            f"Unknown key(s) {unknown} in model.convert_from_roberta (target "
            f"{settings.get('target', default_target)}); allowed: {', '.join(allowed)}."
        )
    if not check_source:
        return
    from .validation import check_model_source

    check_model_source(pretrained, "model.pretrained")
    if os.path.exists(pretrained) and not os.path.isfile(os.path.join(pretrained, "config.json")):
        raise ConfigError(f"model.pretrained={pretrained} has no config.json; not a RoBERTa checkpoint dir.")


@dataclasses.dataclass
class TokenizerSection:
    # a local dir written by linformer_hf.training.train_tokenizer, or a Hub name; null: model.pretrained's own
    name_or_path: str | None = "outputs/tokenizer"


@dataclasses.dataclass
class PretrainDataSection:
    # Hub datasets, each {path: ..., name: ..., split: ..., text_column: ...}; concatenated
    # (paper: BookCorpus + Wikipedia). A local folder in a Hub dataset's layout (parquet shards) is taken the same way.
    datasets: list = dataclasses.field(default_factory=list)
    # Held-out documents to validate on, entries as in data.datasets (e.g. a corpus's own validation split): whole
    # documents no training block comes from. Empty: validation_split_percentage of train (streaming: the first
    # validation_examples_streaming documents of the stream) is held out instead.
    validation_datasets: list = dataclasses.field(default_factory=list)
    train_files: list[str] = dataclasses.field(default_factory=list)  # local text files, one document a line
    validation_files: list[str] = dataclasses.field(default_factory=list)
    text_column: str = "text"
    validation_split_percentage: float = 1.0  # held out of train when no validation files are given
    validation_examples_streaming: int = 1000  # documents held out from the stream's head when streaming
    streaming: bool = False
    shuffle_buffer_size: int = 10000  # streaming only
    block_size: int | None = 512  # tokens per packed block; <= the model's longest input n; null: n itself
    # Read each block as consecutive inputs of this many tokens (<= n; block_size a multiple of it); null: one input a
    # block. Runs at different n that share block_size then read the same tokens in the same order with the same
    # masks (the paper's Figure 3 compares n at a fixed k this way). Batch sizes and max_*_blocks count blocks.
    input_length: int | None = None
    # Share of training blocks cut shorter, to a length uniform in [short_block_min_length, block_size] (BERT's
    # short_seq_prob). A Linformer pretrained on full blocks only barely attends on short inputs
    # (docs/results/replication.md).
    short_block_probability: float = 0.0
    short_block_min_length: int = 8
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    max_train_blocks: int | None = None
    max_eval_blocks: int | None = None
    preprocessing_num_workers: int | None = None
    cache_dir: str | None = None  # datasets cache dir (tokenised/packed data is cached there)

    def validate(self):
        for key in ("datasets", "validation_datasets"):
            value = getattr(self, key)
            if not isinstance(value, list):  # a bare path would be read entry by entry, one character each
                path = value if isinstance(value, str) else "FOLDER_OR_HUB_NAME"
                raise ConfigError(
                    f"data.{key} must be a list of {{path: ...}} entries, got {value!r}: write it as "
                    f"--data.{key} '[{{path: {path}}}]' (in a recipe: {key}: [{{path: {path}, split: train}}])."
                )
        if not self.datasets and not self.train_files:
            raise ConfigError("data: give Hub datasets in data.datasets or local text files in data.train_files.")
        for f in list(self.train_files) + list(self.validation_files):
            if not os.path.isfile(f):
                raise ConfigError(f"Data file not found: {f}. Check data.train_files / data.validation_files.")
        from .validation import check_text_files

        check_text_files(
            self.train_files,
            self.validation_files,
            hold_out=bool(self.train_files) and not self.validation_files and not self.streaming,
        )
        if self.streaming and self.train_files and not self.validation_files:
            from .validation import count_documents

            # A stream holds out its first documents for validation; a corpus of no more would train on nothing.
            held_out = self.validation_examples_streaming
            found = sum(count_documents(path, held_out + 1) for path in self.train_files)
            if found <= held_out:
                raise ConfigError(
                    f"data.train_files hold {found} document(s), and a stream without data.validation_files holds "
                    f"out its first data.validation_examples_streaming={held_out} for validation, which leaves none "
                    f"to train on: lower data.validation_examples_streaming, or give data.validation_files."
                )
        if self.train_files and self.datasets:
            raise ConfigError(
                "data: give either data.train_files (local text files) or data.datasets (Hub names or local "
                "folders), not both; list every source in one of them."
            )
        if self.validation_datasets and not self.datasets:
            raise ConfigError(
                "data.validation_datasets is set but data.datasets is not: with local text files, give the held-out "
                "ones as data.validation_files."
            )
        from .validation import check_dataset_entry

        # Held-out entries first: an empty validation split of a folder is then named as the entry that reads it,
        # not as the training entry whose folder it is also in.
        documents = {}
        for key in ("validation_datasets", "datasets"):
            documents[key] = [
                check_dataset_entry(entry, f"data.{key}", self.text_column, self.streaming)
                for entry in getattr(self, key)
            ]
        counts = documents["datasets"]
        if self.streaming and counts and not self.validation_datasets and None not in counts:
            # As for train_files above, from the shards' footers. Interleaved entries run until each is exhausted,
            # so the stream holds at most (entries x the largest) documents.
            held_out = self.validation_examples_streaming
            if len(counts) * max(counts) <= held_out:
                raise ConfigError(
                    f"data.datasets hold {sum(counts)} document(s), and a stream without data.validation_datasets "
                    f"holds out its first data.validation_examples_streaming={held_out} for validation, which leaves "
                    f"none to train on: lower data.validation_examples_streaming, or give held-out documents in "
                    f"data.validation_datasets."
                )
        if not 0 < self.mlm_probability < 1:
            raise ConfigError(f"data.mlm_probability must be in (0, 1), got {self.mlm_probability}.")
        # The collator draws both replacements from one share of the masked tokens: each in [0, 1], and together at most
        # all of them (the rest are left unchanged). It would fail at the first batch, after tokenising.
        for name in ("mask_replace_prob", "random_replace_prob"):
            if not 0 <= getattr(self, name) <= 1:
                raise ConfigError(f"data.{name} must be in [0, 1], got {getattr(self, name)}.")
        if self.mask_replace_prob + self.random_replace_prob > 1:
            raise ConfigError(
                f"data.mask_replace_prob + data.random_replace_prob must be at most 1 (shares of the masked tokens), "
                f"got {self.mask_replace_prob} + {self.random_replace_prob}: lower one of them (BERT's: 0.8 and 0.1)."
            )
        if self.block_size is not None and self.block_size < 8:
            raise ConfigError(f"data.block_size must be at least 8, got {self.block_size}.")
        if not 0 <= self.short_block_probability <= 1:
            raise ConfigError(f"data.short_block_probability must be in [0, 1], got {self.short_block_probability}.")
        if self.input_length is not None:
            if self.input_length < 8:
                raise ConfigError(f"data.input_length must be at least 8, got {self.input_length}.")
            if self.short_block_probability:
                raise ConfigError(
                    "data.input_length cuts full blocks into equal inputs; it cannot be combined with "
                    "data.short_block_probability (shorter blocks). Set one of them."
                )
        if not 2 <= self.short_block_min_length <= (self.block_size or self.short_block_min_length):
            raise ConfigError(
                f"data.short_block_min_length must be in [2, block_size={self.block_size}], "
                f"got {self.short_block_min_length}."
            )
        _check_percentage("validation_split_percentage", self.validation_split_percentage)
        for name in ("validation_examples_streaming", "shuffle_buffer_size", "max_train_blocks", "max_eval_blocks"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"data.{name} must be >= 1, got {value}.")


ADAMW_KERNELS = ("adamw_torch", "adamw_torch_fused")  # `training.optim`: torch's AdamW, as a loop or fused


@dataclasses.dataclass
class OptimizerSection:
    """AdamW and its learning-rate schedule: the fields both training sections share (they inherit them).

    The defaults are the paper's (fairseq's RoBERTa) pretraining recipe; the names are `TrainingArguments`'.
    """

    learning_rate: float = 5e-4  # peak learning rate
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-6
    weight_decay: float = 0.01  # not applied to biases and LayerNorm gains (the Trainer's rule)
    lr_scheduler_type: str = "polynomial"  # any transformers.get_scheduler name
    max_grad_norm: float | None = None  # fairseq's RoBERTa recipe does not clip; set e.g. 1.0 to clip
    # The same AdamW update in one of torch's two kernels (`TrainingArguments.optim`): adamw_torch (a loop, or foreach
    # on a GPU) or adamw_torch_fused (one fused kernel: fewer launches on a GPU). null: the command's own, adamw_torch
    # for pretraining (fairseq's, and the recorded runs') and the Trainer's adamw_torch_fused for fine-tuning.
    optim: str | None = None
    # The divergence guard (training/guards.py): an update with a non-finite loss or gradients is skipped, and this
    # many in a row stop the run (an isolated fp16 overflow, which the grad scaler skips, is not a divergence).
    nonfinite_patience: int = 10
    loss_spike_factor: float | None = None  # a loss above this x the running median of the last 100: a spike
    loss_spike_action: str = "warn"  # warn | stop

    def validate(self):
        from transformers.trainer_utils import SchedulerType

        _check_at_least(self, ("nonfinite_patience",), 1)
        if self.loss_spike_factor is not None and not self.loss_spike_factor > 1:
            raise ConfigError(
                f"training.loss_spike_factor must be > 1 (or null: no spike rule), got {self.loss_spike_factor}."
            )
        if self.loss_spike_action not in ("warn", "stop"):
            raise ConfigError(f"training.loss_spike_action must be warn or stop, got {self.loss_spike_action!r}.")

        # nan slips past `<= 0`, and inf trains to nan: a finite number or the run diverges at the first update.
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ConfigError(f"training.learning_rate must be > 0 and finite, got {self.learning_rate}.")
        if not (math.isfinite(self.adam_epsilon) and self.adam_epsilon > 0):
            raise ConfigError(
                f"training.adam_epsilon must be > 0 and finite (AdamW divides by it; e.g. 1e-6), got "
                f"{self.adam_epsilon}."
            )
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ConfigError(
                f"training.weight_decay must be >= 0 and finite (0: none), got {self.weight_decay}: a negative "
                "one pushes the weights away from zero."
            )
        # The Trainer skips clipping for a norm <= 0 without a word: null says "no clipping" instead.
        if self.max_grad_norm is not None and not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ConfigError(
                f"training.max_grad_norm must be > 0 and finite (or null: no clipping), got {self.max_grad_norm}."
            )

        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1):
            raise ConfigError(
                f"training.adam_beta1 / adam_beta2 must be in [0, 1), got {self.adam_beta1} / {self.adam_beta2}."
            )
        if self.optim not in (None, *ADAMW_KERNELS):
            raise ConfigError(
                f"training.optim must be {' or '.join(ADAMW_KERNELS)} (or null: the command's own), got "
                f"{self.optim!r}: the recipe's adam_* fields are AdamW's, so only its kernels are offered."
            )
        schedulers = [kind.value for kind in SchedulerType]
        if self.lr_scheduler_type not in schedulers:
            raise ConfigError(
                f"training.lr_scheduler_type must be one of {', '.join(schedulers)}; got {self.lr_scheduler_type!r}."
            )


@dataclasses.dataclass
class CompileSection:
    """`torch.compile` of the trained model: the fields both training sections share (they inherit them), named as
    `TrainingArguments`' (training/compiling.py says what each target compiles)."""

    # null: as the Accelerate config says (its dynamo_config; none by default); no; model: the whole model as one
    # graph; layers: each encoder layer (one graph serves them all). A bare false is YAML's: taken as no.
    torch_compile: str | bool | None = None
    torch_compile_mode: str | None = None  # inductor's: default, reduce-overhead, max-autotune, ...; null: default
    torch_compile_backend: str | None = None  # any torch.compile backend; null: inductor

    def validate_compile(self):
        from .compiling import check_compile_options, compile_target

        if self.torch_compile is not None:  # null stays null: the Accelerate config decides
            self.torch_compile = compile_target(self.torch_compile)
        check_compile_options(self.torch_compile, self.torch_compile_mode, self.torch_compile_backend)


@dataclasses.dataclass
class PretrainTrainingSection(CompileSection, OptimizerSection):
    output_dir: str = "outputs/pretrain"
    seed: int = 42
    per_device_train_batch_size: int = 16
    per_device_eval_batch_size: int = 16
    gradient_accumulation_steps: int = 1
    max_steps: int = 125000  # optimizer updates
    warmup_steps: int = 10000
    # null: take it from the Accelerate config; no | fp16 | bf16 (a bare no is YAML false: taken as no)
    mixed_precision: str | bool | None = None
    checkpointing_steps: int | None = None  # the Trainer's checkpoint-N every N updates and after the last
    checkpoints_total_limit: int | None = None  # the newest kept, pruned once the newest is complete
    resume_from_checkpoint: str | None = None  # a checkpoint dir, or "latest"
    eval_steps: int | None = None  # evaluate every N updates (and always at the end)
    logging_steps: int = 10
    report_to: list[str] = dataclasses.field(default_factory=list)  # e.g. [tensorboard]
    stop_after_steps: int | None = None  # stop after N updates with a checkpoint (as if interrupted): tests, slices
    max_train_minutes: float | None = None  # time budget: stop updating after it, then evaluate and save as at the end
    save_final_model: bool = True
    overwrite_output_dir: bool = False  # start over in a non-empty output_dir (deletes the earlier run's outputs)

    def validate(self):
        super().validate()  # learning rate, betas, epsilon, weight decay, clipping, scheduler name
        self.validate_compile()
        _check_seed(self)
        _check_report_to(self)
        _check_at_least(
            self,
            (
                "per_device_train_batch_size",
                "per_device_eval_batch_size",
                "gradient_accumulation_steps",
                "max_steps",
                "logging_steps",
            ),
            1,
        )
        _check_at_least(self, ("checkpointing_steps", "eval_steps"), 1, optional_means="never")
        _check_at_least(self, ("checkpoints_total_limit",), 1, optional_means="keep all")
        _check_at_least(self, ("stop_after_steps",), 1, optional_means="run to max_steps")
        _check_at_least(self, ("max_train_minutes",), 0, optional_means="no time budget")
        _check_at_least(self, ("warmup_steps",), 0)
        # Every schedule but `constant` warms up, then decays over max_steps - warmup_steps updates; with none left the
        # polynomial schedule divides by zero at the last update, and the others never leave warmup.
        if self.lr_scheduler_type != "constant" and self.warmup_steps >= self.max_steps:
            raise ConfigError(
                f"training.warmup_steps={self.warmup_steps} must be smaller than training.max_steps={self.max_steps}: "
                f"the {self.lr_scheduler_type} schedule decays over the updates after warmup, and none would be left. "
                f"Lower warmup_steps or raise max_steps."
            )
        _check_mixed_precision(self)
        if self.overwrite_output_dir and self.resume_from_checkpoint:
            raise ConfigError(
                "training.overwrite_output_dir deletes the checkpoints that resume_from_checkpoint="
                f"{self.resume_from_checkpoint!r} would resume from; give one or the other."
            )


@dataclasses.dataclass
class PretrainRecipe:
    model: ModelSection
    tokenizer: TokenizerSection
    data: PretrainDataSection
    training: PretrainTrainingSection

    def validate(self):
        self.model.validate(resuming=bool(self.training.resume_from_checkpoint))
        if self.tokenizer.name_or_path is None:
            if self.model.pretrained is None:
                raise ConfigError(
                    "tokenizer.name_or_path is null (the model's own tokenizer) but there is no model.pretrained: "
                    "give a tokenizer dir or Hub name."
                )
            self.tokenizer.name_or_path = self.model.pretrained
        self.data.validate()
        self.training.validate()
        if self.model.output_bias_init == "unigram" and self.data.streaming:
            raise ConfigError(
                "model.output_bias_init=unigram counts the training tokens before the first update, which a streamed "
                "data set (data.streaming: true) cannot give: use data.streaming: false, or output_bias_init: zeros."
            )


# The keys of data.dataset: what `datasets.load_dataset` is given, besides the task's splits.
FINETUNE_DATASET_KEYS = ("path", "name", "revision")


@dataclasses.dataclass
class FinetuneDataSection:
    task: str = "sst2"  # sst2 | qnli | qqp | imdb | authors (its data set: experiments/author_attribution.py)
    # Hub source (used when no local files are given): {path: glue, name: sst2}; null = the task's default
    dataset: dict | None = None
    train_file: str | None = None  # local csv / tsv / json(l) with the task's columns
    validation_file: str | None = None
    test_file: str | None = None
    validation_split_percentage: float = 10.0  # held out of train when there is no validation file
    # Seed of that held-out split (and of the max_train_samples subset); null: training.seed. Fix it when runs with
    # different seeds must see the same rows, e.g. a student distilled from a teacher fine-tuned on the rest.
    split_seed: int | None = None
    max_seq_length: int | None = None  # null: the model's n (longest input it takes)
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    preprocessing_num_workers: int | None = None

    def validate(self):
        if self.task not in TASKS:
            raise ConfigError(f"data.task must be one of {sorted(TASKS)}, got {self.task!r}.")
        for name in ("train_file", "validation_file", "test_file"):
            f = getattr(self, name)
            if f is not None and os.path.isdir(f):
                raise ConfigError(
                    f"data.{name}={f} is a folder: give a .tsv, .csv or .json(l) file, or a folder in a Hub dataset's "
                    "layout as data.dataset: {path: FOLDER}."
                )
            if f is not None and not os.path.isfile(f):
                raise ConfigError(f"data.{name} not found: {f}.")
        if self.train_file is None and self.dataset is None and TASKS[self.task].hub is None:
            raise ConfigError(f"data: task {self.task} needs data.train_file or data.dataset.")
        # Local files or a data set, never parts of both: the one not read would be ignored without a word.
        if self.train_file is not None and self.dataset is not None:
            raise ConfigError(
                f"data.train_file ({self.train_file}) and data.dataset ({self.dataset}) are both given: local files "
                "or a data set, not both. Drop one (--data.dataset null)."
            )
        if self.dataset is not None:
            self.validate_dataset()
        unread = [name for name in ("validation_file", "test_file") if getattr(self, name) and not self.train_file]
        if unread:
            raise ConfigError(
                f"data.{' and data.'.join(unread)} without data.train_file: the data set's own splits would be read "
                "and the file ignored. Give data.train_file too, or drop it."
            )
        _check_percentage("validation_split_percentage", self.validation_split_percentage)
        for name in ("max_seq_length", "max_train_samples", "max_eval_samples"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"data.{name} must be >= 1, got {value}.")

    def validate_dataset(self):
        """data.dataset is {path: ...} with the keys `datasets.load_dataset` is given here (`FINETUNE_DATASET_KEYS`);
        before, a key missing, misspelt or naming a split failed inside `datasets` with a traceback."""
        task = TASKS[self.task]
        if "path" not in self.dataset:
            raise ConfigError(
                f"data.dataset needs a 'path' key (a Hub name, or a folder in a Hub dataset's layout), got "
                f"{self.dataset!r}: write it as {{path: NAME_OR_FOLDER}} (with name: CONFIG for a data set of several)."
            )
        unknown = sorted(set(self.dataset) - set(FINETUNE_DATASET_KEYS))
        if "split" in unknown:
            splits = [task.train_split, task.eval_split] + ([task.test_split] if task.test_split else [])
            raise ConfigError(
                f"data.dataset takes no 'split': data.task {self.task} reads the data set's splits {splits} itself. "
                "Drop it; for other splits, give them as local files (data.train_file, data.validation_file)."
            )
        if unknown:
            raise ConfigError(f"Unknown key(s) {unknown} in data.dataset; allowed: {', '.join(FINETUNE_DATASET_KEYS)}.")


@dataclasses.dataclass
class FinetuneTrainingSection(CompileSection, OptimizerSection):
    # RoBERTa's GLUE fine-tuning differs from its pretraining in these three optimizer defaults.
    learning_rate: float = 2e-5
    weight_decay: float = 0.1
    lr_scheduler_type: str = "linear"
    output_dir: str = "outputs/finetune"
    seed: int = 42
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 64
    gradient_accumulation_steps: int = 1
    num_train_epochs: float = 3.0
    max_steps: int | None = None  # overrides num_train_epochs
    warmup_ratio: float = 0.06
    # no | fp16 | bf16 (null: no; a bare no is YAML false: taken as no); the Trainer's fp16 / bf16
    mixed_precision: str | bool | None = None
    eval_steps: int | None = None  # null: evaluate at the end of every epoch
    eval_on_start: bool = False  # also evaluate before the first update (where a converted classifier starts)
    logging_steps: int = 10
    report_to: list[str] = dataclasses.field(default_factory=list)
    save_best: bool = True
    overwrite_output_dir: bool = False  # run in a non-empty output_dir (deletes the earlier run's outputs)
    # Resume an interrupted run: "latest" (the newest checkpoint-N in output_dir) or a checkpoint-N dir. Checkpoints
    # are written at every evaluation (eval_steps, or each epoch) with the optimizer, schedule and RNG states.
    resume_from_checkpoint: str | None = None
    stop_after_steps: int | None = None  # stop (as if interrupted) after N updates, with a checkpoint: tests, slices

    def validate(self):
        super().validate()  # learning rate, betas, epsilon, weight decay, clipping, scheduler name
        self.validate_compile()
        _check_seed(self)
        _check_report_to(self)
        _check_at_least(
            self,
            (
                "per_device_train_batch_size",
                "per_device_eval_batch_size",
                "gradient_accumulation_steps",
                "logging_steps",
            ),
            1,
        )
        _check_at_least(self, ("max_steps",), 1, optional_means="train for num_train_epochs")
        _check_at_least(self, ("stop_after_steps",), 1, optional_means="run to the end")
        if self.overwrite_output_dir and self.resume_from_checkpoint:
            raise ConfigError(
                "training.overwrite_output_dir deletes the checkpoints that resume_from_checkpoint="
                f"{self.resume_from_checkpoint!r} would resume from; give one or the other."
            )
        if self.stop_after_steps is not None and not (self.save_best and self.eval_steps):
            raise ConfigError(
                "training.stop_after_steps needs checkpoints to resume from: set training.eval_steps (a checkpoint is "
                "written at each evaluation) and keep training.save_best true."
            )
        _check_at_least(self, ("eval_steps",), 1, optional_means="evaluate at the end of every epoch")
        if self.max_steps is None and not (math.isfinite(self.num_train_epochs) and self.num_train_epochs > 0):
            raise ConfigError(
                f"training.num_train_epochs must be > 0 (or set training.max_steps) and finite, got "
                f"{self.num_train_epochs}."
            )
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"training.warmup_ratio must be in [0, 1), got {self.warmup_ratio}.")
        _check_mixed_precision(self)


@dataclasses.dataclass
class FinetuneModelSection:
    pretrained: str = "outputs/pretrain/final"  # a saved Linformer, Performer (or RoBERTa) dir
    tokenizer: str | None = None  # null: the tokenizer saved in the model dir
    config: dict = dataclasses.field(default_factory=dict)  # config fields to change, e.g. {hidden_dropout_prob: 0.1}
    # Start from a RoBERTa checkpoint (model.pretrained: a dir, or a Hub name when online) converted on the fly with
    # linformer_hf.conversion; the options go to convert_checkpoint, e.g. {max_sequence_length: 512,
    # projected_length: 128}, or {target: performer, num_random_features: 256, kernel: softmax} for a Performer.
    convert_from_roberta: dict | None = None

    def validate(self, resuming: bool = False):
        """``resuming``: a resumed run takes the conversion its first part saved, so a source out of reach is not
        refused here (`convert_roberta_for_finetuning` reads it only where there is none)."""
        if self.convert_from_roberta is not None:
            check_conversion(self.convert_from_roberta, self.pretrained, check_source=not resuming)
            return
        if not os.path.isdir(self.pretrained):
            raise ConfigError(
                f"model.pretrained is not a directory: {self.pretrained}. Pretrain first "
                f"(linformer_hf.training.pretrain writes <output_dir>/final) or point it at a saved model dir."
            )
        if not os.path.isfile(os.path.join(self.pretrained, "config.json")):
            final = os.path.join(self.pretrained, "final")
            hint = f" A pretraining run's model is its final/: {final}." if os.path.isdir(final) else ""
            raise ConfigError(
                f"model.pretrained={self.pretrained} has no config.json; it is not a saved model dir.{hint}"
            )


@dataclasses.dataclass
class FinetuneDistillationSection:
    """Knowledge distillation from a frozen teacher classifier (training/distillation.py): the student trains on
    (1 - kd_weight) x cross-entropy with the labels + kd_weight x T^2 x KL(teacher || student) on logits / T,
    + hidden_weight x the mean over hidden_layers of the relative squared error of the hidden states."""

    teacher: str | None = None  # a fine-tuned sequence classifier dir (BERT, RoBERTa, MiniLM, ...); null: no teacher
    kd_weight: float = 0.5  # share of the loss on the teacher's logits, in [0, 1]; 0: labels only
    temperature: float = 2.0  # T: both logits are divided by T; the KL term is scaled by T^2 (Hinton et al.)
    hidden_weight: float = 0.0  # weight of the layer-wise hidden-state loss; 0: off
    # Which hidden states to match: 0 is the embeddings' output, l the output of layer l; null: every layer 1..N.
    hidden_layers: list[int] | None = None

    def validate(self):
        if self.teacher is None:
            changed = [
                name
                for name in ("kd_weight", "temperature", "hidden_weight", "hidden_layers")
                if getattr(self, name) != getattr(FinetuneDistillationSection, name, None)
            ]
            if changed:
                raise ConfigError(
                    f"distillation.{changed[0]} is set but distillation.teacher is not: give the teacher classifier "
                    "dir (e.g. the model you convert) or drop the distillation options."
                )
            return
        if not 0 <= self.kd_weight <= 1:
            raise ConfigError(f"distillation.kd_weight must be in [0, 1], got {self.kd_weight}.")
        if not self.temperature > 0:
            raise ConfigError(f"distillation.temperature must be > 0, got {self.temperature}.")
        if self.hidden_weight < 0:
            raise ConfigError(f"distillation.hidden_weight must be >= 0 (0: off), got {self.hidden_weight}.")
        if self.hidden_layers is not None and self.hidden_weight == 0:
            raise ConfigError(
                f"distillation.hidden_layers={self.hidden_layers} is set but distillation.hidden_weight is 0, so no "
                "layer would be matched: set hidden_weight > 0 (e.g. 1.0) or drop hidden_layers."
            )
        if self.hidden_layers is not None and not self.hidden_layers:
            raise ConfigError(
                "distillation.hidden_layers is empty: list the hidden states to match (0: embeddings, l: layer l), or "
                "leave it null for every layer."
            )
        if self.kd_weight == 0 and self.hidden_weight == 0:
            raise ConfigError(
                "distillation.teacher is set but both kd_weight and hidden_weight are 0: the teacher would not be "
                "used. Set kd_weight > 0 and/or hidden_weight > 0, or drop distillation.teacher."
            )
        from .validation import check_model_source

        check_model_source(self.teacher, "distillation.teacher")
        # Whether the student can learn from this teacher (its labels, vocabulary, depth) is read from the teacher's
        # folder: checked when the run starts, before any work (distillation.check_teacher), not here.


@dataclasses.dataclass
class FinetuneRecipe:
    model: FinetuneModelSection
    data: FinetuneDataSection
    training: FinetuneTrainingSection
    distillation: FinetuneDistillationSection = dataclasses.field(default_factory=FinetuneDistillationSection)

    def validate(self):
        self.data.validate()
        self.model.validate(resuming=bool(self.training.resume_from_checkpoint))
        self.training.validate()
        self.distillation.validate()
