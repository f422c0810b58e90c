"""Warm start: turn a RoBERTa checkpoint into the matching Linformer model.

No pretrained Linformer weights were ever released, so the cheapest way in is to start from RoBERTa. Linformer's
parameter names are RoBERTa's (`base_model_prefix = "roberta"`), so every RoBERTa weight has a counterpart key for
key; the conversion only has to

1. build a `LinformerConfig` from the RoBERTa config plus the chosen n, k, sharing and projection;
2. copy every RoBERTa tensor into the Linformer model;
3. extend the learned position embeddings when n is longer than RoBERTa's (by repeating the learned rows, as
   Longformer did: the copies keep the local structure the model learned, so fine-tuning starts from sensible
   positions instead of random ones);
4. initialise the projections E, F, which RoBERTa does not have (see `neighbour_average_projection`);
5. report every key that was copied, extended, initialised, or left at random, and refuse anything it does not
   understand (an unknown head, a RoBERTa tensor with nowhere to go, a shape that cannot be mapped).

With k = n the default initialisation is the identity, and the converted model computes exactly what RoBERTa does.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import torch
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, RobertaConfig

from .models import modeling_linformer
from .models.modeling_linformer import neighbour_average_projection
from .models.configuration_linformer import LinformerConfig

# RoBERTa head -> Linformer head. Every pair shares its module tree and parameter names.
ARCHITECTURE_MAP = {
    "RobertaModel": "LinformerModel",
    "RobertaForMaskedLM": "LinformerForMaskedLM",
    "RobertaForSequenceClassification": "LinformerForSequenceClassification",
    "RobertaForTokenClassification": "LinformerForTokenClassification",
    "RobertaForQuestionAnswering": "LinformerForQuestionAnswering",
    "RobertaForMultipleChoice": "LinformerForMultipleChoice",
}

PROJECTION_INITS = ("neighbour_average", "identity", "random")

# Config entries that describe the saved file rather than the model; the Linformer config sets its own.
_CONFIG_KEYS_NOT_CARRIED = ("model_type", "transformers_version", "architectures", "_name_or_path", "auto_map")

# Any of these in a local checkpoint means it has a tokenizer to copy.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer_config.json")

# "roberta." prefixed in task heads, bare in RobertaModel
POSITION_EMBEDDINGS_SUFFIX = "embeddings.position_embeddings.weight"


@dataclasses.dataclass
class ConversionReport:
    """What the conversion did with every tensor. `missing` and the `source_*` lists are what a user must know."""

    source: str
    source_architecture: str
    target_architecture: str
    max_sequence_length: int
    projected_length: int | list[int]
    sharing: str
    projection: str
    projection_init: str
    carried: list[str] = dataclasses.field(default_factory=list)  # copied unchanged from RoBERTa
    extended: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> how it was extended
    initialised: dict[str, str] = dataclasses.field(default_factory=dict)  # projection key -> how
    # Linformer parameters RoBERTa had no value for, other than projections: left at Linformer's random init.
    missing: list[str] = dataclasses.field(default_factory=list)
    # What transformers reported while loading the RoBERTa checkpoint itself (randomly initialised or dropped).
    source_missing: list[str] = dataclasses.field(default_factory=list)
    source_unexpected: list[str] = dataclasses.field(default_factory=list)
    source_mismatched: list[str] = dataclasses.field(default_factory=list)
    tokenizer: str = "not requested"
    notes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def problems(self) -> list[str]:
        """Everything that did not come over from a trained weight, in words."""
        found = []
        if self.missing:
            found.append(f"{len(self.missing)} Linformer parameter(s) had no RoBERTa value and keep a random init: "
                         f"{self.missing}")
        if self.source_missing:
            found.append(f"the RoBERTa checkpoint lacked {len(self.source_missing)} weight(s) of "
                         f"{self.source_architecture}, which transformers initialised randomly before conversion: "
                         f"{self.source_missing}")
        if self.source_unexpected:
            found.append(f"the RoBERTa checkpoint had {len(self.source_unexpected)} weight(s) that "
                         f"{self.source_architecture} does not use (not converted): {self.source_unexpected}")
        if self.source_mismatched:
            found.append(f"the RoBERTa checkpoint had weight(s) of the wrong shape for its own config: "
                         f"{self.source_mismatched}")
        if self.tokenizer.startswith("not found"):
            found.append(f"tokenizer {self.tokenizer}")
        return found

    def summary(self) -> str:
        lines = [
            f"Converted {self.source} ({self.source_architecture}) -> {self.target_architecture}",
            f"  n={self.max_sequence_length} k={self.projected_length} sharing={self.sharing} "
            f"projection={self.projection} projection_init={self.projection_init}",
            f"  {len(self.carried)} tensor(s) copied unchanged",
        ]
        lines += [f"  extended {key}: {how}" for key, how in self.extended.items()]
        if self.initialised:
            methods = sorted(set(self.initialised.values()))
            lines.append(f"  {len(self.initialised)} projection tensor(s) initialised: {'; '.join(methods)}")
        lines.append(f"  tokenizer: {self.tokenizer}")
        lines += [f"  note: {note}" for note in self.notes]
        problems = self.problems()
        lines += [f"  WARNING: {problem}" for problem in problems] or ["  nothing missing, nothing unexpected"]
        return "\n".join(lines)


def linformer_config_from_roberta(
    roberta_config: RobertaConfig,
    max_sequence_length: int | None = None,
    projected_length: int | list[int] | None = None,
    sharing: str = "headwise",
    projection: str = "linear",
    freeze_projections: bool = False,
) -> LinformerConfig:
    """A `LinformerConfig` with every RoBERTa setting of `roberta_config` plus the Linformer ones.

    n defaults to RoBERTa's own maximum length (512 for roberta-base), k to n / 4 (fairseq's Linformer default).
    `max_position_embeddings` grows to fit n and never shrinks, so no learned position is dropped when n is smaller.
    """
    if roberta_config.model_type != "roberta":
        raise ValueError(
            f"Expected a RoBERTa config (model_type 'roberta'), got model_type {roberta_config.model_type!r}. "
            "Only RoBERTa checkpoints map key for key onto Linformer; convert a RoBERTa model."
        )
    position_offset = roberta_config.pad_token_id + 1  # RoBERTa numbers positions from padding_idx + 1
    roberta_length = roberta_config.max_position_embeddings - position_offset
    n = roberta_length if max_sequence_length is None else max_sequence_length
    k = max(1, n // 4) if projected_length is None else projected_length

    settings = {key: value for key, value in roberta_config.to_dict().items() if key not in _CONFIG_KEYS_NOT_CARRIED}
    settings["max_position_embeddings"] = max(roberta_config.max_position_embeddings, n + position_offset)
    return LinformerConfig(
        **settings,
        max_sequence_length=n,
        projected_length=k,
        sharing=sharing,
        projection=projection,
        freeze_projections=freeze_projections,
    )


def extend_position_embeddings(weight: torch.Tensor, num_positions: int, position_offset: int) -> torch.Tensor:
    """RoBERTa's position table grown to `num_positions` rows by repeating its learned rows.

    Rows below `position_offset` (the padding row and the unused one before it) are kept as they are; the learned
    rows `position_offset ..` are repeated cyclically to fill the new rows, so new position p takes the learned row
    `position_offset + (p - position_offset) % learned`. A table that is already long enough is returned unchanged.
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


def _init_projection(module: modeling_linformer.LinformerProjection, method: str, noise_std: float,
                     generator: torch.Generator) -> str | None:
    """Set one projection's weight in place; return how, or None for parameter-free pooling."""
    if module.weight is None:
        return None
    if method == "identity" and module.k != module.n:
        raise ValueError(
            f"projection_init='identity' needs k = n, but this projection maps n={module.n} to k={module.k}: use "
            "'neighbour_average' (the identity when k = n) or 'random'."
        )
    with torch.no_grad():
        if method == "random":
            # keep the model's own init (linear: N(0, 1/n); conv: 1/s, i.e. mean pooling)
            how = "random N(0, 1/n) (Linformer's own init)" if module.kind == "linear" else "mean pooling kernel 1/s"
        elif module.kind == "linear":
            module.weight.copy_(neighbour_average_projection(module.n, module.k).expand_as(module.weight))
            how = "identity" if module.k == module.n else f"neighbour average over bins of ~{module.n / module.k:g}"
        else:  # conv: the same averaging, as a kernel of width s = n / k
            module.weight.fill_(1.0 / module.bin_size)
            how = "identity kernel" if module.bin_size == 1 else f"averaging kernel 1/{module.bin_size}"
        if noise_std > 0:
            module.weight.add_(torch.randn(module.weight.shape, generator=generator) * noise_std)
            how += f" + N(0, {noise_std:g}^2) noise"
    return how


def convert_model(
    roberta: PreTrainedModel,
    max_sequence_length: int | None = None,
    projected_length: int | list[int] | None = None,
    sharing: str = "headwise",
    projection: str = "linear",
    projection_init: str = "neighbour_average",
    projection_noise_std: float = 0.0,
    freeze_projections: bool = False,
    seed: int = 0,
    source_name: str | None = None,
) -> tuple[modeling_linformer.LinformerPreTrainedModel, ConversionReport]:
    """Convert an in-memory RoBERTa model (any head of `ARCHITECTURE_MAP`) to the matching Linformer head.

    Raises ValueError for a head it cannot map, a RoBERTa tensor with no Linformer counterpart, or a shape that
    differs other than the position table growing.
    """
    if projection_init not in PROJECTION_INITS:
        raise ValueError(f"projection_init must be one of {PROJECTION_INITS}, got {projection_init!r}.")
    source_architecture = type(roberta).__name__
    if source_architecture not in ARCHITECTURE_MAP:
        raise ValueError(
            f"Cannot convert {source_architecture}: supported RoBERTa heads are {sorted(ARCHITECTURE_MAP)}. "
            "(RobertaForCausalLM has no Linformer counterpart: Linformer's projections mix future positions into "
            "every compressed row, so it cannot be causal.)"
        )
    config = linformer_config_from_roberta(
        roberta.config, max_sequence_length, projected_length, sharing, projection, freeze_projections
    )
    target_class = getattr(modeling_linformer, ARCHITECTURE_MAP[source_architecture])
    config.architectures = [target_class.__name__]
    if source_architecture == "RobertaModel":
        linformer = target_class(config, add_pooling_layer=roberta.pooler is not None)
    else:
        linformer = target_class(config)
    linformer.eval()

    report = ConversionReport(
        source=source_name or roberta.config._name_or_path or "<in-memory model>",
        source_architecture=source_architecture,
        target_architecture=target_class.__name__,
        max_sequence_length=config.max_sequence_length,
        projected_length=config.projected_length,
        sharing=sharing,
        projection=projection,
        projection_init=projection_init,
    )

    position_offset = config.pad_token_id + 1
    source_state = roberta.state_dict()
    target_state = linformer.state_dict()  # tensors share storage with the parameters: copy_ writes the model
    consumed = set()
    with torch.no_grad():
        for key, target in target_state.items():
            if key not in source_state:
                if "projection" not in key:
                    report.missing.append(key)
                continue  # projections are initialised below
            source = source_state[key]
            consumed.add(key)
            if key.endswith(POSITION_EMBEDDINGS_SUFFIX) and source.shape[0] < target.shape[0]:
                target.copy_(extend_position_embeddings(source, target.shape[0], position_offset))
                learned = source.shape[0] - position_offset
                report.extended[key] = (
                    f"{source.shape[0]} -> {target.shape[0]} rows; new rows repeat learned rows "
                    f"{position_offset}..{source.shape[0] - 1} ({learned} positions) cyclically"
                )
                continue
            if source.shape != target.shape:
                raise ValueError(
                    f"{key}: RoBERTa has shape {tuple(source.shape)} but Linformer expects {tuple(target.shape)}; "
                    "the conversion only knows how to grow the position table. Check the overrides."
                )
            target.copy_(source)
            report.carried.append(key)

    dropped = sorted(set(source_state) - consumed)
    if dropped:
        raise ValueError(
            f"{len(dropped)} RoBERTa tensor(s) have no counterpart in {target_class.__name__} and would be lost: "
            f"{dropped}. This conversion does not know how to map them."
        )

    generator = torch.Generator().manual_seed(seed)
    for name, module in linformer.named_modules():
        if isinstance(module, modeling_linformer.LinformerProjection):
            how = _init_projection(module, projection_init, projection_noise_std, generator)
            if how is not None:
                report.initialised[f"{name}.weight"] = how
    if projection in ("mean", "max"):
        report.notes.append(f"'{projection}' pooling has no parameters: nothing to initialise")
    if config.max_sequence_length > roberta.config.max_position_embeddings - position_offset:
        report.notes.append(
            f"n={config.max_sequence_length} is longer than RoBERTa's {roberta.config.max_position_embeddings - position_offset}"
            " positions: positions past it are copies, so fine-tune on long inputs before relying on them"
        )
    return linformer, report


def load_roberta(name_or_path: str, architecture: str | None = None) -> tuple[PreTrainedModel, dict[str, list[str]]]:
    """Load a RoBERTa checkpoint (local dir or Hub name) as its saved head, with transformers' loading info."""
    import transformers

    config = AutoConfig.from_pretrained(name_or_path)
    if config.model_type != "roberta":
        raise ValueError(
            f"{name_or_path} is a {config.model_type!r} checkpoint, not 'roberta'; only RoBERTa checkpoints convert."
        )
    if architecture is None:
        if not config.architectures:
            raise ValueError(
                f"{name_or_path}'s config names no architecture: pass one of {sorted(ARCHITECTURE_MAP)} explicitly."
            )
        architecture = config.architectures[0]
    if architecture not in ARCHITECTURE_MAP:
        raise ValueError(f"Cannot convert {architecture}: supported RoBERTa heads are {sorted(ARCHITECTURE_MAP)}.")
    model, loading_info = getattr(transformers, architecture).from_pretrained(name_or_path, output_loading_info=True)
    return model.eval(), loading_info


def convert_checkpoint(
    source: str,
    output_dir: str,
    architecture: str | None = None,
    copy_tokenizer: bool = True,
    **conversion_options,
) -> ConversionReport:
    """Convert the RoBERTa checkpoint `source` (local dir or Hub name) and save the Linformer to `output_dir`.

    Writes the weights (safetensors), the config with the full `auto_map`, the modeling files, the tokenizer
    (with `model_max_length` set to n) and `conversion_report.json`; prints the report's summary.
    """
    roberta, loading_info = load_roberta(source, architecture)
    linformer, report = convert_model(roberta, source_name=source, **conversion_options)
    report.source_missing = sorted(loading_info.get("missing_keys", []))
    report.source_unexpected = sorted(loading_info.get("unexpected_keys", []))
    report.source_mismatched = sorted(str(item) for item in loading_info.get("mismatched_keys", []))

    linformer.save_pretrained(output_dir)
    if copy_tokenizer:
        try:
            if os.path.isdir(source) and not any(os.path.exists(os.path.join(source, name)) for name in TOKENIZER_FILES):
                # transformers would build an empty RobertaTokenizer here rather than fail
                raise OSError(f"none of {TOKENIZER_FILES} in the directory")
            tokenizer = AutoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as error:
            report.tokenizer = f"not found at {source} ({type(error).__name__}: {error}); save one beside the model"
        else:
            previous = tokenizer.model_max_length
            tokenizer.model_max_length = report.max_sequence_length
            tokenizer.save_pretrained(output_dir)
            report.tokenizer = (f"copied from {source} ({type(tokenizer).__name__}); model_max_length "
                                f"{previous} -> {report.max_sequence_length}")
    with open(os.path.join(output_dir, "conversion_report.json"), "w") as handle:
        json.dump(report.to_dict(), handle, indent=2)
    print(report.summary())
    return report


__all__ = [
    "ARCHITECTURE_MAP",
    "PROJECTION_INITS",
    "ConversionReport",
    "convert_checkpoint",
    "convert_model",
    "extend_position_embeddings",
    "linformer_config_from_roberta",
    "load_roberta",
    "neighbour_average_projection",
]
