"""The one place the training code builds models: Linformer, Performer, or RoBERTa as the same-recipe baseline."""

from __future__ import annotations

import os
from typing import Any

from huggingface_hub.errors import StrictDataclassError
from transformers import RobertaConfig, RobertaForMaskedLM

from ..models.configuration_linformer import LinformerConfig
from ..models.configuration_performer import PerformerConfig
from ..models.modeling_linformer import LinformerForMaskedLM
from ..models.modeling_performer import PerformerForMaskedLM
from .config import MODEL_TYPES, ConfigError, ModelSection, load_yaml
from .errors import LOCAL_MODEL, hub_unreachable, hub_unreachable_error


class RobertaForMaskedLMBaseline(RobertaForMaskedLM):
    """RoBERTa's masked LM with LinformerForMaskedLM's forward: the baseline under the identical recipe.

    The two forwards compute the same thing (RoBERTa's encoder and LM head, mean cross-entropy); Linformer's also
    takes `logits_for_labels_only`, which pretraining uses, so the baseline's cost per step stays comparable to
    Linformer's. Saved folders are plain RoBERTa (`model_type: roberta`, loaded as `RobertaForMaskedLM`).
    """

    forward = LinformerForMaskedLM.forward


def _classes(model_type: str):
    if model_type == "roberta":
        return RobertaConfig, RobertaForMaskedLMBaseline
    if model_type == "linformer":
        return LinformerConfig, LinformerForMaskedLM
    if model_type == "performer":
        return PerformerConfig, PerformerForMaskedLM
    raise ConfigError(f"model.model_type must be one of {MODEL_TYPES}, got {model_type!r}.")


def make_config(model_type: str, fields: dict[str, Any], where: str = "model.config / model.config_file"):
    """The model config of ``model_type`` from ``fields``; unknown or invalid fields are a ConfigError naming them."""
    config_cls, _ = _classes(model_type)
    allowed = set(config_cls().to_dict())
    unknown = sorted(set(fields) - allowed)
    if unknown:
        raise ConfigError(
            f"Unknown {config_cls.__name__} field(s) {unknown} in {where}. "
            f"Allowed fields: {', '.join(sorted(allowed))}."
        )
    try:
        return config_cls(**fields)
    except (ValueError, TypeError, StrictDataclassError) as err:  # the last: transformers' strict config checks
        # (not ValueErrors); their messages span two lines (validator, then reason), put on one here
        raise ConfigError(f"Invalid {config_cls.__name__} in {where}: {' '.join(str(err).split())}") from err


def build_model_config(section: ModelSection, tokenizer) -> Any:
    fields: dict[str, Any] = {}
    model_type = section.model_type
    if section.config_file:
        fields.update(load_yaml(section.config_file))
        file_type = fields.pop("model_type", model_type)
        if file_type != model_type:
            raise ConfigError(
                f"model.config_file {section.config_file} is for model_type {file_type!r} but "
                f"model.model_type is {model_type!r}; make them agree."
            )
    fields.update(section.config or {})
    fields.pop("model_type", None)
    # Token ids come from the tokenizer so the embeddings match it.
    fields.update(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return make_config(model_type, fields)


def convert_masked_lm(section: ModelSection):
    """The RoBERTa or BERT masked LM in ``section.pretrained`` converted in memory to ``section.model_type`` with the
    settings of ``section.convert_from_roberta`` (`linformer_hf.conversion.convert_model`: every weight carried over,
    the learned positions copied out to n). Its masked-LM head must have been trained: a checkpoint saved without one
    (a sentence encoder) is refused, not given a random head."""
    from ..conversion import convert_model, load_source

    settings = dict(section.convert_from_roberta)
    target = settings.pop("target", section.model_type)
    try:
        from transformers import AutoConfig

        source_type = AutoConfig.from_pretrained(section.pretrained).model_type
        head = "BertForMaskedLM" if source_type == "bert" else "RobertaForMaskedLM"
        source, loading = load_source(section.pretrained, head, target)
        untrained = [key for key in loading.get("missing_keys", []) if "lm_head" in key or key.startswith("cls.")]
        if untrained:
            raise ValueError(
                f"it has no trained masked-LM head ({len(untrained)} head weights missing, e.g. {untrained[0]}); "
                f"uptraining needs one: fit a head on the frozen encoder first"
            )
        model, _ = convert_model(source, target=target, source_name=section.pretrained, **settings)
    except (OSError, ValueError, StrictDataclassError) as err:
        if hub_unreachable(err):
            raise hub_unreachable_error("model.pretrained", section.pretrained, err, LOCAL_MODEL) from None
        raise ConfigError(
            f"Could not convert model.pretrained={section.pretrained}: {' '.join(str(err).split())}"
        ) from None
    return model


def build_mlm_model(section: ModelSection, tokenizer):
    """A fresh masked-LM model from the recipe, or the saved one in ``section.pretrained``."""
    config_cls, model_cls = _classes(section.model_type)
    if section.pretrained:
        if not os.path.isfile(os.path.join(section.pretrained, "config.json")):
            raise ConfigError(f"model.pretrained={section.pretrained} has no config.json; not a saved model dir.")
        return model_cls.from_pretrained(section.pretrained)
    config = build_model_config(section, tokenizer)
    return model_cls(config)
