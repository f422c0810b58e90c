"""Warm start: turn a RoBERTa or BERT checkpoint into the matching Linformer (or Performer) model.

Both target families are RoBERTa with another self-attention (models/modeling_<family>.py), so one
conversion serves both: `TARGET_FAMILIES` says, per family, which heads exist, how its config is built from the
source's, and which of its tensors the family initialises itself (Linformer's E, F; Performer's random features and
redraw count). The rest of this docstring describes Linformer, the default target; for Performer
(`target="performer"`) step 1 takes m and the kernel instead of n, k, and step 4 draws the random features.

No pretrained Linformer weights were ever released, so the cheapest way in is to start from a pretrained encoder.
Linformer is RoBERTa with another self-attention, and RoBERTa is BERT with another position numbering, so both
families convert:

- **RoBERTa** (and checkpoints of its layout): parameter names are Linformer's (`base_model_prefix = "roberta"`), so
  every tensor has a counterpart key for key.
- **BERT** (and BERT-layout checkpoints such as MiniLM): the same modules under other names (`bert.*` -> `roberta.*`,
  the MLM head `cls.predictions.*` -> `lm_head.*`, the sequence classifier's pooler + linear layer -> RoBERTa's
  classification head), and one real difference, the positions: BERT numbers them from 0, RoBERTa from
  `padding_idx + 1`. BERT's row p becomes row `padding_idx + 1 + p`, so a token sees the same position vector.

The conversion

1. builds a `LinformerConfig` from the source config plus the chosen n, k, sharing, projection and projection_init;
2. copies every source tensor into the Linformer model under its Linformer name;
3. lays the learned position rows out as RoBERTa does and extends them when n is longer than the source's (by
   repeating the learned rows, as Longformer did: the copies keep the local structure the model learned);
4. leaves the projections E, F to the model's own `_init_weights` (`config.projection_init`, so the saved config says
   what E, F were set to), adding only the optional noise;
5. reports every key that was copied, renamed, extended, initialised, or left at random, and refuses anything it does
   not understand (an unknown head, a source tensor with nowhere to go, a shape that cannot be mapped).

With k = n and `projection_init="neighbour_average"` (the identity at k = n), the converted model computes exactly
what the source does on right-padded batches.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import os
import re
import shutil
from collections.abc import Callable
from typing import Any

import torch
import transformers
from transformers import AutoConfig, AutoTokenizer, BertConfig, PretrainedConfig, PreTrainedModel, RobertaConfig

from .loading import check_holds_weights, check_weight_files, pad_as_the_model_takes, remote_code_files
from .models import max_input_length, modeling_linformer, modeling_performer
from .models.configuration_linformer import PROJECTION_INITS, LinformerConfig
from .models.configuration_performer import PerformerConfig
from .models.modeling_linformer import LINFORMER_HEADS, neighbour_average_projection
from .models.modeling_performer import PERFORMER_HEADS
from .outputs import (
    FolderKind,
    check_output_dir,
    check_replaceable,
    discard_staging,
    publish_folder,
    publish_new_folder,
    replace_folder,
    unique_staging_folder,
)
from .registration import FAMILIES, TOKENIZER_FILES, TOKENIZER_SAVED_FILES

# The source families, by model_type. The heads of each are found through transformers' own Auto mappings.
SOURCE_CONFIGS: dict[str, type[PretrainedConfig]] = {"roberta": RobertaConfig, "bert": BertConfig}


def _source_head(auto_name: str, config_class: type[PretrainedConfig]) -> str:
    return getattr(transformers, auto_name)._model_mapping[config_class].__name__


def architecture_map(heads: dict[str, type]) -> dict[str, str]:
    """Source head -> target head, e.g. "BertForMaskedLM" -> "LinformerForMaskedLM": the head that the same Auto
    class resolves to, derived from a family's heads table and transformers' Auto mappings. A family head whose Auto
    class has no source head (none here) is skipped."""
    return {
        _source_head(auto_name, config_class): target_class.__name__
        for config_class in SOURCE_CONFIGS.values()
        for auto_name, target_class in heads.items()
        if config_class in getattr(transformers, auto_name)._model_mapping
    }


ARCHITECTURE_MAP: dict[str, str] = architecture_map(LINFORMER_HEADS)  # the Linformer one (the default target)


def _unsupported_bert_heads(family: str) -> dict[str, str]:
    return {
        "BertForPreTraining": f"its next-sentence head has no {family} counterpart; load the checkpoint as "
        "BertForMaskedLM (architecture='BertForMaskedLM') to convert the MLM head, dropping NSP",
        "BertForNextSentencePrediction": f"the next-sentence head has no {family} counterpart; convert BertModel or "
        "BertForMaskedLM instead",
    }


_NOT_CAUSAL = "Linformer's projections mix future positions into every compressed row, so it cannot be causal"
# Heads of the source families that have no Linformer counterpart, and why (for the error message).
UNSUPPORTED_HEADS = {
    "RobertaForCausalLM": _NOT_CAUSAL,
    "BertLMHeadModel": _NOT_CAUSAL,
    **_unsupported_bert_heads("Linformer"),
}

# BERT key prefix -> Linformer key prefix, tried in order (first match wins). Module trees below each prefix match.
BERT_KEY_PREFIXES = (
    ("bert.", "roberta."),
    ("cls.predictions.transform.dense.", "lm_head.dense."),
    ("cls.predictions.transform.LayerNorm.", "lm_head.layer_norm."),
    ("cls.predictions.decoder.", "lm_head.decoder."),
    ("cls.predictions.bias", "lm_head.bias"),
)
# BertForSequenceClassification classifies the pooled first token, tanh(W_p h_0 + b_p), with a linear layer; RoBERTa's
# classification head computes the same, dense -> tanh -> out_proj on the first token (dropouts at the same places).
BERT_SEQUENCE_CLASSIFIER_PREFIXES = (
    ("bert.pooler.dense.", "classifier.dense."),
    ("classifier.", "classifier.out_proj."),
)

# Config entries that describe the saved file rather than the model; the Linformer config sets its own.
_CONFIG_KEYS_NOT_CARRIED = (
    "model_type",
    "transformers_version",
    "architectures",
    "_name_or_path",
    "auto_map",
    "position_embedding_type",
)

# sentence-transformers keeps its pooling outside the transformer, in these files and folders beside the weights.
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")

# What save_pretrained writes to a model folder of the package's families besides the code files (`remote_code_files`)
# and the tokenizer's: the config and the safetensors weights, in one file or in shards with their index.
MODEL_FOLDER_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json")
WEIGHT_SHARD = re.compile(r"model-\d+-of-\d+\.safetensors")


@functools.cache
def _family_code_files() -> frozenset[str]:
    return frozenset(name for config_class in FAMILIES for name in remote_code_files(config_class.model_type))


def is_model_file(folder: str, name: str) -> bool:
    """Whether the entry `name` of `folder` is one the package's tools write to a model folder: the config, weights,
    the families' code, the tokenizer, sentence-transformers' files and the module folders its `modules.json` names.
    How an overwrite that replaces a model folder whole tells an earlier one from a folder of other things."""
    if name in MODEL_FOLDER_FILES or name in TOKENIZER_SAVED_FILES or name in SENTENCE_TRANSFORMERS_FILES:
        return True
    if WEIGHT_SHARD.fullmatch(name) or name in _family_code_files():
        return True
    try:
        with open(os.path.join(folder, "modules.json"), encoding="utf-8") as handle:
            modules = json.load(handle)
        paths = {module.get("path", "") for module in modules if isinstance(module, dict)}
    except (OSError, ValueError, TypeError):
        return False
    return os.path.isdir(os.path.join(folder, name)) and any(path.split("/")[0] == name for path in paths if path)


def model_type_mismatch(folder: str) -> str | None:
    """Why the model folder `folder` is not one of the package's families (its config.json's model_type), or None."""
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            model_type = json.load(handle).get("model_type")
    except (OSError, ValueError, AttributeError):
        return "its config.json is not a model's config"
    if model_type not in {config_class.model_type for config_class in FAMILIES}:
        return f"its config.json is a {model_type!r} model's, not a Linformer's or Performer's"
    return None


# What `convert_checkpoint` writes: what its --overwrite replaces whole, and nothing else.
CONVERTED_MODEL = FolderKind(
    what="a model folder written by the conversion",
    required=("config.json", "conversion_report.json"),
    holds=lambda folder, name: name == "conversion_report.json" or is_model_file(folder, name),
    mismatch=model_type_mismatch,
)

# "roberta." prefixed in task heads, bare in the base model
POSITION_EMBEDDINGS_SUFFIX = "embeddings.position_embeddings.weight"


@dataclasses.dataclass
class ConversionReport:
    """What the conversion did with every tensor. `missing` and the `source_*` lists are what a user must know."""

    source: str
    source_architecture: str
    target_architecture: str
    max_sequence_length: int
    # Linformer's settings (None for another target family)
    projected_length: int | list[int] | None = None
    sharing: str | None = None
    projection: str | None = None
    projection_init: str | None = None
    target_family: str = "linformer"
    # The target family's attention settings as its config holds them (for Performer: m, kernel, features...)
    attention_settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    carried: list[str] = dataclasses.field(default_factory=list)  # copied unchanged (under the Linformer name)
    renamed: dict[str, str] = dataclasses.field(default_factory=dict)  # source key -> Linformer key, where they differ
    extended: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> how it was re-laid out or extended
    # key -> how, for the tensors the target family initialises itself (E, F; Performer's features and count)
    initialised: dict[str, str] = dataclasses.field(default_factory=dict)
    # Target parameters the source had no value for, other than those above: left at the target's random init.
    missing: list[str] = dataclasses.field(default_factory=list)
    # What transformers reported while loading the source checkpoint itself (randomly initialised or dropped).
    source_missing: list[str] = dataclasses.field(default_factory=list)
    source_unexpected: list[str] = dataclasses.field(default_factory=list)
    source_mismatched: list[str] = dataclasses.field(default_factory=list)
    tokenizer: str = "not requested"
    notes: list[str] = dataclasses.field(default_factory=list)
    # The source's number of learned positions (None in reports written before it was recorded): a
    # max_sequence_length above it means the position table was grown by repeating learned rows.
    source_positions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def problems(self) -> list[str]:
        """Everything that did not come over from a trained weight, in words."""
        found = []
        if self.missing:
            found.append(
                f"{len(self.missing)} {self.target_architecture} parameter(s) had no source value and keep a random "
                f"init: {self.missing}"
            )
        if self.source_missing:
            found.append(
                f"the source checkpoint lacked {len(self.source_missing)} weight(s) of "
                f"{self.source_architecture}, which transformers initialised randomly before conversion: "
                f"{self.source_missing}"
            )
        if self.source_unexpected:
            found.append(
                f"the source checkpoint had {len(self.source_unexpected)} weight(s) that "
                f"{self.source_architecture} does not use (not converted): {self.source_unexpected}"
            )
        if self.source_mismatched:
            found.append(
                f"the source checkpoint had weight(s) of the wrong shape for its own config: {self.source_mismatched}"
            )
        if self.tokenizer.startswith("not found"):
            found.append(f"tokenizer {self.tokenizer}")
        return found

    def summary(self) -> str:
        if self.target_family == "linformer":
            settings = (
                f"n={self.max_sequence_length} k={self.projected_length} sharing={self.sharing} "
                f"projection={self.projection} projection_init={self.projection_init}"
            )
        else:
            settings = " ".join(
                [f"n={self.max_sequence_length}"] + [f"{k}={v}" for k, v in self.attention_settings.items()]
            )
        lines = [
            f"Converted {self.source} ({self.source_architecture}) -> {self.target_architecture}",
            f"  {settings}",
            f"  {len(self.carried)} tensor(s) copied unchanged ({len(self.renamed)} under a new name)",
        ]
        lines += [f"  extended {key}: {how}" for key, how in self.extended.items()]
        if self.initialised:
            methods = sorted(set(self.initialised.values()))
            lines.append(f"  {len(self.initialised)} {self.target_family} tensor(s) initialised: {'; '.join(methods)}")
        lines.append(f"  tokenizer: {self.tokenizer}")
        lines += [f"  note: {note}" for note in self.notes]
        problems = self.problems()
        lines += [f"  WARNING: {problem}" for problem in problems] or ["  nothing missing, nothing unexpected"]
        return "\n".join(lines)


def check_projection_init(projection_init: str) -> None:
    if projection_init == "identity":
        raise ValueError(
            "projection_init='identity' was removed: it is 'neighbour_average' at k = n. Pass "
            "projection_init='neighbour_average' with projected_length equal to max_sequence_length."
        )
    if projection_init not in PROJECTION_INITS:
        raise ValueError(f"projection_init must be one of {PROJECTION_INITS}, got {projection_init!r}.")


def source_position_layout(source_config: PretrainedConfig) -> tuple[int, int]:
    """(first learned row, number of learned positions) of a source position table.

    RoBERTa numbers positions from `padding_idx + 1` (rows below are the padding row and an unused one); BERT from 0.
    """
    if source_config.model_type == "roberta":
        first_row = source_config.pad_token_id + 1
    else:
        first_row = 0
    return first_row, source_config.max_position_embeddings - first_row


def _check_source_config(source_config: PretrainedConfig) -> None:
    if source_config.model_type not in SOURCE_CONFIGS:
        raise ValueError(
            f"Expected a RoBERTa or BERT config, got model_type {source_config.model_type!r}. Only checkpoints of "
            f"these layouts ({sorted(SOURCE_CONFIGS)}) map onto Linformer."
        )
    position_type = getattr(source_config, "position_embedding_type", "absolute")
    if position_type not in (None, "absolute"):
        raise ValueError(
            f"The source uses position_embedding_type={position_type!r}; Linformer has absolute learned positions "
            "only, so the converted model would not compute what the source does."
        )
    if source_config.pad_token_id is None:
        raise ValueError(
            "The source config has no pad_token_id; Linformer (as RoBERTa) numbers positions from pad_token_id + 1 and "
            "needs it. Set config.pad_token_id to the tokenizer's pad id before converting."
        )


def _carried_settings(
    source_config: PretrainedConfig, max_sequence_length: int | None, exactly_n: bool = False
) -> tuple[dict[str, Any], int]:
    """The source config's settings for a target config, with room for n positions; and n (default: the source's).

    The position table keeps every learned row of the source and grows to n; with `exactly_n` it has n positions,
    the source's first n where n is fewer (Performer, whose longest input is its table's length)."""
    _check_source_config(source_config)
    _, learned = source_position_layout(source_config)
    n = learned if max_sequence_length is None else max_sequence_length
    offset = source_config.pad_token_id + 1  # where the target's (RoBERTa's) positions start
    settings = {key: value for key, value in source_config.to_dict().items() if key not in _CONFIG_KEYS_NOT_CARRIED}
    settings["max_position_embeddings"] = offset + n if exactly_n else max(offset + learned, offset + n)
    return settings, n


def linformer_config_from_source(
    source_config: PretrainedConfig,
    max_sequence_length: int | None = None,
    projected_length: int | list[int] | None = None,
    sharing: str = "headwise",
    projection: str = "linear",
    projection_init: str = "neighbour_average",
    freeze_projections: bool = False,
) -> LinformerConfig:
    """A `LinformerConfig` with every setting of a RoBERTa or BERT `source_config` plus the Linformer ones.

    n defaults to the source's number of learned positions (512 for roberta-base and bert-base), k to n / 4 (fairseq's
    Linformer default). `max_position_embeddings` fits both the source's positions and n, laid out from
    `pad_token_id + 1`, and never shrinks, so no learned position is dropped when n is smaller.
    """
    check_projection_init(projection_init)
    settings, n = _carried_settings(source_config, max_sequence_length)
    k = max(1, n // 4) if projected_length is None else projected_length
    # At least n + 2 rows: LinformerConfig's validation assumes RoBERTa's pad id 1 (TODO model side: use
    # pad_token_id + 1 + n); with BERT's pad id 0 the last row is then unused.
    settings["max_position_embeddings"] = max(settings["max_position_embeddings"], n + 2)
    return LinformerConfig(
        **settings,
        max_sequence_length=n,
        projected_length=k,
        sharing=sharing,
        projection=projection,
        projection_init=projection_init,
        freeze_projections=freeze_projections,
    )


def performer_config_from_source(
    source_config: PretrainedConfig,
    max_sequence_length: int | None = None,
    num_random_features: int = 256,
    kernel: str = "softmax",
    orthogonal_features: bool = True,
    orthogonal_row_norms: str = "chi",
    feature_redraw_interval: int | None = 1000,
    freeze_features: bool = False,
    kernel_epsilon: float | None = None,
) -> PerformerConfig:
    """A `PerformerConfig` with every setting of a RoBERTa or BERT `source_config` plus the FAVOR+ ones.

    FAVOR+ has no length of its own: n sizes the position table, and so the longest input (default: the source's
    positions; a longer n repeats the learned rows, as for Linformer; a shorter one keeps the first n). A source
    decoder (`is_decoder=True`) gives causal FAVOR+.
    """
    settings, _ = _carried_settings(source_config, max_sequence_length, exactly_n=True)
    return PerformerConfig(
        **settings,
        num_random_features=num_random_features,
        kernel=kernel,
        orthogonal_features=orthogonal_features,
        orthogonal_row_norms=orthogonal_row_norms,
        feature_redraw_interval=feature_redraw_interval,
        freeze_features=freeze_features,
        kernel_epsilon=kernel_epsilon,
    )


def linformer_config_from_roberta(roberta_config: RobertaConfig, *args, **kwargs) -> LinformerConfig:
    """`linformer_config_from_source` for a RoBERTa config (kept for existing callers)."""
    if roberta_config.model_type != "roberta":
        raise ValueError(
            f"Expected a RoBERTa config (model_type 'roberta'), got {roberta_config.model_type!r}; "
            "use linformer_config_from_source for BERT."
        )
    return linformer_config_from_source(roberta_config, *args, **kwargs)


def extend_position_embeddings(weight: torch.Tensor, num_positions: int, position_offset: int) -> torch.Tensor:
    """A RoBERTa-layout position table grown to `num_positions` rows by repeating its learned rows.

    Rows below `position_offset` (the padding row and, for RoBERTa, the unused one before it) are kept as they are;
    the learned rows `position_offset ..` are repeated cyclically to fill the new rows, so new position p takes the
    learned row `position_offset + (p - position_offset) % learned`. A table already long enough is returned unchanged.
    """
    old_rows = weight.shape[0]
    if num_positions <= old_rows:
        return weight
    learned = old_rows - position_offset
    if learned <= 0:
        raise ValueError(f"Position table of {old_rows} rows has no learned rows after offset {position_offset}.")
    new_positions = torch.arange(old_rows, num_positions)
    source_rows = position_offset + (new_positions - position_offset) % learned
    return torch.cat([weight, weight[source_rows]], dim=0)


def roberta_position_table(weight: torch.Tensor, source_config: PretrainedConfig) -> torch.Tensor:
    """The source's position table laid out as RoBERTa's: rows below `pad_token_id + 1`, then the learned rows.

    A RoBERTa table is already so. A BERT table gets `pad_token_id + 1` zero rows in front (the padding row, used only
    at padded positions, whose outputs nothing reads), so BERT's position p sits at row `pad_token_id + 1 + p`: the
    row RoBERTa's position numbering gives the p-th token of a right-padded sequence.
    """
    if source_config.model_type == "roberta":
        return weight
    offset = source_config.pad_token_id + 1
    return torch.cat([weight.new_zeros(offset, weight.shape[1]), weight], dim=0)


def linformer_key(source_key: str, source_architecture: str) -> str:
    """The Linformer parameter name of a source parameter."""
    if source_architecture.startswith("Roberta"):
        return source_key
    prefixes = BERT_KEY_PREFIXES
    if source_architecture == "BertForSequenceClassification":
        prefixes = BERT_SEQUENCE_CLASSIFIER_PREFIXES + prefixes
    for old, new in prefixes:
        if source_key.startswith(old):
            return new + source_key[len(old) :]
    return source_key  # BertModel: the same names as RobertaModel


def _initialise_linformer(model, report: ConversionReport, seed: int, projection_noise_std: float) -> None:
    """Describe the E, F that the model's `_init_weights` set (as `config.projection_init` says); add the noise."""
    generator = torch.Generator().manual_seed(seed)
    for name, module in model.named_modules():
        if isinstance(module, modeling_linformer.LinformerProjection) and module.weight is not None:
            how = _describe_projection(module, report.projection_init)
            if projection_noise_std > 0:
                with torch.no_grad():
                    module.weight.add_(torch.randn(module.weight.shape, generator=generator) * projection_noise_std)
                how += f" + N(0, {projection_noise_std:g}^2) noise"
            report.initialised[f"{name}.weight"] = how
    if report.projection in ("mean", "max"):
        report.notes.append(f"'{report.projection}' pooling has no parameters: nothing to initialise")


def _initialise_performer(model, report: ConversionReport, seed: int, projection_noise_std: float) -> None:
    """Describe the random features and redraw count that the model's `_init_weights` set (seeded by `seed`)."""
    config = model.config
    kind = f"orthogonal ({config.orthogonal_row_norms} row norms)" if config.orthogonal_features else "i.i.d."
    for name, module in model.named_modules():
        if isinstance(module, modeling_performer.PerformerSelfAttention):
            report.initialised[f"{name}.random_features"] = (
                f"{config.num_random_features} {kind} Gaussian features, drawn with seed {seed}"
            )
        elif isinstance(module, modeling_performer.PerformerEncoder):
            report.initialised[f"{name}.training_calls"] = "redraw count 0"
    if config.kernel == "relu":
        report.notes.append(
            "kernel='relu' is the paper's generalised attention, not an estimate of softmax: the converted model "
            "computes something else than the source until it is fine-tuned"
        )


@dataclasses.dataclass(frozen=True)
class TargetFamily:
    """What the conversion needs to know about a target family; everything else is shared."""

    name: str  # as in messages ("Linformer")
    heads: dict[str, type]  # Auto class name -> target class: the family's own heads table
    unsupported_heads: dict[str, str]  # source heads with no counterpart -> why
    build_config: Callable[..., PretrainedConfig]  # (source_config, max_sequence_length, **settings) -> config
    generated: Callable[[str], bool]  # target keys the family initialises itself (no source value expected)
    initialise: Callable[[PreTrainedModel, ConversionReport, int, float], None]  # describe (and adjust) those

    @property
    def architecture_map(self) -> dict[str, str]:
        return architecture_map(self.heads)

    @property
    def setting_names(self) -> tuple[str, ...]:
        parameters = list(inspect.signature(self.build_config).parameters)
        return tuple(parameters[2:])  # after (source_config, max_sequence_length)


TARGET_FAMILIES: dict[str, TargetFamily] = {
    "linformer": TargetFamily(
        name="Linformer",
        heads=LINFORMER_HEADS,
        unsupported_heads=UNSUPPORTED_HEADS,
        build_config=linformer_config_from_source,
        generated=lambda key: "projection" in key,
        initialise=_initialise_linformer,
    ),
    "performer": TargetFamily(
        name="Performer",
        heads=PERFORMER_HEADS,
        unsupported_heads=_unsupported_bert_heads("Performer"),  # causal LM heads convert: FAVOR+ can be causal
        build_config=performer_config_from_source,
        generated=lambda key: key.endswith(("attention.self.random_features", "encoder.training_calls")),
        initialise=_initialise_performer,
    ),
}


def target_family(target: str) -> TargetFamily:
    if target not in TARGET_FAMILIES:
        raise ValueError(f"target must be one of {sorted(TARGET_FAMILIES)}, got {target!r}.")
    return TARGET_FAMILIES[target]


def _check_source_head(model: PreTrainedModel, family: TargetFamily) -> str:
    architecture = type(model).__name__
    if architecture in family.unsupported_heads:
        raise ValueError(
            f"Cannot convert {architecture}: {architecture} has no {family.name} counterpart "
            f"({family.unsupported_heads[architecture]})."
        )
    if architecture not in family.architecture_map:
        raise ValueError(f"Cannot convert {architecture}: supported heads are {sorted(family.architecture_map)}.")
    hidden_act = model.config.hidden_act
    if architecture in ("BertForMaskedLM", "BertLMHeadModel") and hidden_act != "gelu":
        raise ValueError(
            f"{architecture}'s head applies hidden_act={hidden_act!r}, but the {family.name} (RoBERTa) LM head always "
            "applies 'gelu', so the converted logits would differ. Convert BertModel instead and train a new head."
        )
    return architecture


def _describe_projection(module: modeling_linformer.LinformerProjection, projection_init: str) -> str:
    """How `_init_weights` set this projection (the config's `projection_init`), in words for the report."""
    if module.kind == "conv":
        return "identity kernel" if module.bin_size == 1 else f"averaging kernel 1/{module.bin_size}"
    if projection_init == "random":
        return "random N(0, 1/n) (Linformer's own init)"
    if projection_init == "strided":
        if module.k == module.n:
            return "identity (strided at k = n)"
        return (
            f"strided: slot j sums positions j, j + {module.k}, j + {2 * module.k}, ... (the identity on inputs of at "
            f"most {module.k} tokens)"
        )
    if module.k == module.n:
        return "identity (neighbour average at k = n)"
    return f"neighbour average over bins of ~{module.n / module.k:g}"


def check_projection_options(
    projection: str = "linear",
    projection_init: str = "neighbour_average",
    projection_noise_std: float = 0.0,
    freeze_projections: bool = False,
) -> None:
    """Refuse a Linformer option that would change nothing for this projection (recorded, but without effect)."""
    if projection_noise_std < 0:
        raise ValueError(f"projection_noise_std must be 0 (no noise) or positive, got {projection_noise_std:g}.")
    if projection in ("mean", "max"):
        given = [
            name
            for name, value, default in (
                ("projection_init", projection_init, "neighbour_average"),
                ("projection_noise_std", projection_noise_std, 0.0),
                ("freeze_projections", freeze_projections, False),
            )
            if value != default
        ]
        if given:
            raise ValueError(
                f"{' and '.join(given)} {'has' if len(given) == 1 else 'have'} no effect with "
                f"projection={projection!r}, which pools without parameters: drop "
                f"{'it' if len(given) == 1 else 'them'}, or use projection 'linear' or 'conv'."
            )
    if projection == "conv" and projection_init != "neighbour_average":
        raise ValueError(
            f"projection_init={projection_init!r} has no effect with projection='conv': its kernel always starts as "
            "the average of its bin (neighbour_average). Drop it, or use projection 'linear'."
        )


def check_conversion(
    source_config: PretrainedConfig,
    max_sequence_length: int | None = None,
    *,
    target: str = "linformer",
    projection_noise_std: float = 0.0,
    seed: int = 0,
    source_name: str | None = None,
    **settings,
) -> PretrainedConfig:
    """`convert_model`'s options checked against the source's config alone (no weight read): the converted config,
    or ValueError for an unknown target or setting, a setting the family's config refuses, or one without effect."""
    family = target_family(target)
    if projection_noise_std and target != "linformer":
        raise ValueError(f"projection_noise_std applies to Linformer's projections; {family.name} has none.")
    if target == "linformer":
        names = ("projection", "projection_init", "freeze_projections")
        check_projection_options(
            **{name: settings[name] for name in names if name in settings}, projection_noise_std=projection_noise_std
        )
    return converted_config(source_config, max_sequence_length, target=target, **settings)


def converted_config(
    source_config: PretrainedConfig, max_sequence_length: int | None = None, *, target: str = "linformer", **settings
) -> PretrainedConfig:
    """The config of the `target` family that `convert_model` gives a model converted from one with `source_config`,
    with the same settings (the family's: see `convert_model`); ValueError for an unknown target or setting."""
    family = target_family(target)
    unknown = sorted(set(settings) - set(family.setting_names))
    if unknown:
        raise ValueError(
            f"{unknown} are not {family.name} settings; the {family.name} ones are {family.setting_names}."
        )
    if "projection_init" in settings:
        check_projection_init(settings["projection_init"])
    return family.build_config(source_config, max_sequence_length, **settings)


def convert_model(
    source: PreTrainedModel,
    max_sequence_length: int | None = None,
    *,
    target: str = "linformer",
    projection_noise_std: float = 0.0,
    seed: int = 0,
    source_name: str | None = None,
    **settings,
) -> tuple[PreTrainedModel, ConversionReport]:
    """Convert an in-memory RoBERTa or BERT model to the matching head of the `target` family.

    `settings` are the family's (see `linformer_config_from_source`: projected_length, sharing, projection,
    projection_init, freeze_projections; `performer_config_from_source`: num_random_features, kernel, ...).
    `projection_noise_std` is Linformer's only. `seed` seeds what the family initialises itself (a random E, F;
    Performer's features), without touching the caller's random state.

    Raises ValueError for an unknown target or setting, a head it cannot map, a source tensor with no counterpart,
    or a shape that differs other than the position table growing.
    """
    family = target_family(target)
    source_architecture = _check_source_head(source, family)
    config = check_conversion(
        source.config, max_sequence_length, target=target, projection_noise_std=projection_noise_std, **settings
    )
    target_class = next(
        cls for cls in family.heads.values() if cls.__name__ == family.architecture_map[source_architecture]
    )
    config.architectures = [target_class.__name__]
    # What the family initialises itself is set here by the model's own _init_weights, as the config says; seeded,
    # so that a conversion is reproducible, without touching the caller's random state.
    notes = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if target_class is family.heads["AutoModel"]:
            model = target_class(config, add_pooling_layer=source.pooler is not None)
            if source.pooler is None:
                notes.append(
                    "the source has no pooler, nor has the converted model (AutoModel adds a random one when it loads "
                    "it: pass add_pooling_layer=False)"
                )
        else:
            model = target_class(config)
    model.eval()

    _, source_positions = source_position_layout(source.config)
    report = ConversionReport(
        source=source_name or source.config._name_or_path or "<in-memory model>",
        source_architecture=source_architecture,
        target_architecture=target_class.__name__,
        # Performer has no n of its own: the length the position table (and the tokenizer) is set up for
        max_sequence_length=getattr(config, "max_sequence_length", max_sequence_length or source_positions),
        source_positions=source_positions,
        target_family=target,
        attention_settings={name: getattr(config, name) for name in family.setting_names if hasattr(config, name)},
        notes=notes,
    )
    if target == "linformer":
        report.projected_length = config.projected_length
        report.sharing = config.sharing
        report.projection = config.projection
        report.projection_init = config.projection_init
        report.attention_settings = {}

    position_offset = config.pad_token_id + 1
    source_state = {linformer_key(key, source_architecture): (key, value) for key, value in source.state_dict().items()}
    target_state = model.state_dict()  # tensors share storage with the parameters: copy_ writes the model
    consumed = set()
    with torch.no_grad():
        for key, target_tensor in target_state.items():
            if key not in source_state:
                if not family.generated(key):
                    report.missing.append(key)
                continue  # initialised by the model
            source_key, value = source_state[key]
            consumed.add(source_key)
            if source_key != key:
                report.renamed[source_key] = key
            if key.endswith(POSITION_EMBEDDINGS_SUFFIX):
                laid_out = roberta_position_table(value, source.config)
                extended = extend_position_embeddings(laid_out, target_tensor.shape[0], position_offset)
                target_tensor.copy_(extended[: target_tensor.shape[0]])  # a Performer's shorter n: the first rows
                if laid_out is not value or laid_out.shape[0] != target_tensor.shape[0]:
                    report.extended[key] = _describe_positions(
                        value.shape[0],
                        laid_out.shape[0],
                        target_tensor.shape[0],
                        position_offset,
                        laid_out is not value,
                    )
                else:
                    report.carried.append(key)
                continue
            if value.shape != target_tensor.shape:
                raise ValueError(
                    f"{source_key}: the source has shape {tuple(value.shape)} but {family.name}'s {key} has "
                    f"{tuple(target_tensor.shape)}; the conversion only knows how to lay out and grow the position "
                    "table."
                )
            target_tensor.copy_(value)
            report.carried.append(key)

    dropped = sorted({key for key, _ in source_state.values()} - consumed)
    if dropped:
        raise ValueError(
            f"{len(dropped)} source tensor(s) have no counterpart in {target_class.__name__} and would be lost: "
            f"{dropped}. This conversion does not know how to map them."
        )

    family.initialise(model, report, seed, projection_noise_std)
    if report.max_sequence_length > source_positions:
        report.notes.append(
            f"n={report.max_sequence_length} is longer than the source's {source_positions} positions: positions "
            "past it are copies, so fine-tune on long inputs before relying on them"
        )
    if source.config.model_type == "bert":
        report.notes.append(
            "BERT positions count from 0 over the whole row, RoBERTa's from pad_token_id + 1 over non-padding tokens: "
            "the same on right-padded inputs (what BERT tokenizers produce), different on left-padded ones"
        )
    return model, report


def _describe_positions(source_rows: int, laid_out_rows: int, target_rows: int, offset: int, moved: bool) -> str:
    parts = []
    if moved:
        parts.append(
            f"BERT rows 0..{source_rows - 1} moved to rows {offset}..{laid_out_rows - 1} (RoBERTa's layout, "
            f"positions from pad_token_id + 1 = {offset}); rows 0..{offset - 1} zero"
        )
    if target_rows > laid_out_rows:
        learned = laid_out_rows - offset
        parts.append(
            f"{laid_out_rows} -> {target_rows} rows; new rows repeat learned rows {offset}..{laid_out_rows - 1}"
            f" ({learned} positions) cyclically"
        )
    elif target_rows < laid_out_rows:
        parts.append(
            f"{laid_out_rows} -> {target_rows} rows: the first {target_rows - offset} positions kept, rows "
            f"{target_rows}..{laid_out_rows - 1} dropped"
        )
    return "; ".join(parts)


def load_source(
    name_or_path: str, architecture: str | None = None, target: str = "linformer"
) -> tuple[PreTrainedModel, dict[str, list[str]]]:
    """Load a RoBERTa or BERT checkpoint (local dir or Hub name) as its saved head, with transformers' loading info.

    The head must have a counterpart in the `target` family."""
    family = target_family(target)
    supported, unsupported = family.architecture_map, family.unsupported_heads
    config = AutoConfig.from_pretrained(name_or_path)
    if config.model_type not in SOURCE_CONFIGS:
        raise ValueError(
            f"{name_or_path} is a {config.model_type!r} checkpoint; only {sorted(SOURCE_CONFIGS)} checkpoints convert."
        )
    if architecture is None:
        if not config.architectures:
            raise ValueError(
                f"{name_or_path}'s config names no architecture: pass one of {sorted(supported)} explicitly."
            )
        architecture = config.architectures[0]
    if architecture in unsupported:
        raise ValueError(f"Cannot convert {architecture}: {unsupported[architecture]}.")
    if architecture not in supported:
        raise ValueError(f"Cannot convert {architecture}: supported heads are {sorted(supported)}.")
    family = "bert" if architecture.startswith("Bert") else "roberta"
    if family != config.model_type:
        raise ValueError(f"{architecture} is a {family} head but {name_or_path} is a {config.model_type!r} checkpoint.")
    model, loading_info = getattr(transformers, architecture).from_pretrained(name_or_path, output_loading_info=True)
    pooler = getattr(model, "pooler", None)
    if pooler is not None:
        pooler_keys = {f"pooler.{name}" for name in pooler.state_dict()}
        if pooler_keys <= set(loading_info.get("missing_keys", [])):
            # a base model saved without its pooler (add_pooling_layer=False): transformers made a random one, which
            # would be converted as if trained; the model is taken as saved, without one
            model.pooler = None
            loading_info["missing_keys"] = [key for key in loading_info["missing_keys"] if key not in pooler_keys]
    return model.eval(), loading_info


load_roberta = load_source  # the earlier name


def _copy_tokenizer(source: str, output_dir: str, max_sequence_length: int, config: PretrainedConfig) -> str:
    """Save the source's own tokenizer (its class and vocabulary as they are) beside the model; describe what was done.
    For a Linformer it pads on the right (`pad_as_the_model_takes`).

    The saved tokenizer_config.json names the tokenizer class (WordPiece for BERT), which AutoTokenizer prefers over
    the class registered for `linformer` (RoBERTa's BPE).
    """
    try:
        if os.path.isdir(source) and not any(os.path.exists(os.path.join(source, name)) for name in TOKENIZER_FILES):
            # transformers would build an empty tokenizer here rather than fail
            raise OSError(f"none of {TOKENIZER_FILES} in the directory")
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as error:
        return f"not found at {source} ({type(error).__name__}: {error}); save one beside the model"
    previous, side = tokenizer.model_max_length, tokenizer.padding_side
    tokenizer.model_max_length = max_sequence_length
    pad_as_the_model_takes(tokenizer, config)
    tokenizer.save_pretrained(output_dir)
    padding = f"; padding_side {side} -> {tokenizer.padding_side}" if side != tokenizer.padding_side else ""
    return (
        f"copied from {source} ({type(tokenizer).__name__}); model_max_length {previous} -> {max_sequence_length}"
        f"{padding}"
    )


def copy_sentence_transformers_modules(source: str, output_dir: str) -> list[str]:
    """Copy a sentence-transformers folder's pooling description (configuration only, no weights)."""
    if not os.path.isdir(source) or not os.path.exists(os.path.join(source, "modules.json")):
        return []
    with open(os.path.join(source, "modules.json")) as handle:
        modules = json.load(handle)
    copied = []
    for name in SENTENCE_TRANSFORMERS_FILES:
        if os.path.exists(os.path.join(source, name)):
            shutil.copy(os.path.join(source, name), os.path.join(output_dir, name))
            copied.append(name)
    for module in modules:
        path = module.get("path", "")
        if path and os.path.isdir(os.path.join(source, path)):
            shutil.copytree(os.path.join(source, path), os.path.join(output_dir, path), dirs_exist_ok=True)
            copied.append(path + "/")
    return copied


def cap_sentence_length(folder: str, n: int) -> str | None:
    """Lower a copied sentence-transformers ``max_seq_length`` to the converted model's n: sentence-transformers
    truncates inputs to it, and the model refuses inputs longer than n. Returns the note saying so, if it did."""
    path = os.path.join(folder, "sentence_bert_config.json")
    if not os.path.isfile(path):
        return None
    with open(path) as handle:
        settings = json.load(handle)
    length = settings.get("max_seq_length")
    if not isinstance(length, int) or length <= n:
        return None
    settings["max_seq_length"] = n
    with open(path, "w") as handle:
        json.dump(settings, handle, indent=2)
    return (
        f"sentence_bert_config.json: max_seq_length {length} lowered to the model's n = {n} (sentence-transformers "
        "truncates to it; the model takes no longer input)"
    )


def convert_checkpoint(
    source: str,
    output_dir: str,
    architecture: str | None = None,
    copy_tokenizer: bool = True,
    target: str = "linformer",
    overwrite: bool = False,
    **conversion_options,
) -> ConversionReport:
    """Convert the RoBERTa or BERT checkpoint `source` (local dir or Hub name) and save the `target` family's model
    (Linformer by default, or Performer) to `output_dir`.

    Writes the weights (safetensors), the config with the full `auto_map`, the modeling files, the source's tokenizer
    (with `model_max_length` set to n), a sentence-transformers folder's pooling modules, and
    `conversion_report.json`; prints the report's summary. A non-empty `output_dir` (an earlier model) is refused
    unless `overwrite`, which replaces an earlier conversion's folder whole (none of its files stays beside the new
    one), adds the model to a folder that holds no model, and refuses any other folder holding a model (another
    model's, or one beside other things: a training run, its checkpoints). The folder is written beside `output_dir`
    under a temporary name and moved into place when whole, so a conversion killed part-way leaves no folder that
    reads as a model; what a killed one left there is cleared by the next (`outputs.clear_staging_debris`).
    """
    if os.path.abspath(source) == os.path.abspath(output_dir):
        raise ValueError(f"output_dir must differ from the source {source}: the conversion would replace it.")
    inside = os.path.commonpath([os.path.realpath(source), os.path.realpath(output_dir)]) == os.path.realpath(
        output_dir
    )
    if overwrite and os.path.isdir(source) and inside:
        raise ValueError(
            f"the source {source} lies inside output_dir {output_dir}, which --overwrite replaces: give another "
            "output_dir."
        )
    # A model there is replaced whole by --overwrite: only an earlier conversion's (refused with or without the flag,
    # so that the refusal never advises a flag that would be refused in turn).
    if os.path.isfile(os.path.join(output_dir, "config.json")):
        check_replaceable(output_dir, CONVERTED_MODEL)
    check_output_dir(output_dir, overwrite, create=False)
    source_config = AutoConfig.from_pretrained(source)
    if source_config.model_type in SOURCE_CONFIGS:  # another is refused by load_source, naming it
        # the settings are checked on the source's config, before any weight is read (or downloaded)
        check_conversion(source_config, target=target, **conversion_options)
        check_holds_weights(source)
        check_weight_files(source)  # a truncated or corrupt safetensors file, named (transformers' error names none)
    model, loading_info = load_source(source, architecture, target)
    converted, report = convert_model(model, target=target, source_name=source, **conversion_options)
    report.source_missing = sorted(loading_info.get("missing_keys", []))
    report.source_unexpected = sorted(loading_info.get("unexpected_keys", []))
    report.source_mismatched = sorted(str(item) for item in loading_info.get("mismatched_keys", []))

    # A link's target: a rename onto the link itself would fail (rename does not follow it), or replace the link.
    target = os.path.realpath(output_dir)
    staging = unique_staging_folder(target)  # its own: another conversion into output_dir writes elsewhere
    try:
        _write_conversion(converted, report, source, staging, copy_tokenizer)
        if overwrite and os.path.isfile(os.path.join(target, "config.json")):  # an earlier model: replaced whole
            replace_folder(staging, target, CONVERTED_MODEL)
        elif overwrite and os.path.isdir(target) and os.listdir(target):
            publish_folder(staging, target)
        else:  # refused if another run filled output_dir meanwhile
            publish_new_folder(staging, target)
    finally:
        discard_staging(staging)  # left only by a failure
    print(report.summary())
    return report


def _write_conversion(converted, report: ConversionReport, source: str, staging: str, copy_tokenizer: bool) -> None:
    """The converted folder's files, in `staging`: the model, its tokenizer, the sentence-transformers modules, the
    report."""
    converted.save_pretrained(staging)
    if copy_tokenizer:
        report.tokenizer = _copy_tokenizer(source, staging, report.max_sequence_length, converted.config)
    copied = copy_sentence_transformers_modules(source, staging)
    if copied:
        report.notes.append(
            f"sentence-transformers modules copied as they are: {copied} (pooling runs on the encoder's token "
            "outputs, so it carries over unchanged; see docs/pretrained.md)"
        )
        note = cap_sentence_length(staging, max_input_length(converted.config))
        if note:
            report.notes.append(note)
    with open(os.path.join(staging, "conversion_report.json"), "w") as handle:
        json.dump(report.to_dict(), handle, indent=2)


__all__ = [
    "ARCHITECTURE_MAP",
    "PROJECTION_INITS",
    "SOURCE_CONFIGS",
    "TARGET_FAMILIES",
    "ConversionReport",
    "TargetFamily",
    "architecture_map",
    "convert_checkpoint",
    "copy_sentence_transformers_modules",
    "convert_model",
    "extend_position_embeddings",
    "linformer_config_from_roberta",
    "linformer_config_from_source",
    "linformer_key",
    "load_roberta",
    "load_source",
    "performer_config_from_source",
    "target_family",
    "neighbour_average_projection",
]
