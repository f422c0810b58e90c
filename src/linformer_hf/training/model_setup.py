"""The one place the training code builds models: Linformer, Performer, or RoBERTa as the same-recipe baseline."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM
from transformers.modeling_outputs import MaskedLMOutput

from ..models.configuration_linformer import LinformerConfig
from ..models.configuration_performer import PerformerConfig
from ..models.modeling_linformer import LinformerForMaskedLM
from ..models.modeling_performer import PerformerForMaskedLM
from ..outputs import write_json_atomic
from .config import MODEL_TYPES, ConfigError, ModelSection, load_yaml
from .errors import LOCAL_MODEL, hub_unreachable, hub_unreachable_error


class SavedAsParent:
    """Saves ``config.json`` with ``saved_architecture`` as the architecture, so a saved folder is plain RoBERTa or
    BERT: transformers writes the class's own name there, which no other code knows."""

    saved_architecture: str

    def save_pretrained(self, save_directory, *args, **kwargs):
        super().save_pretrained(save_directory, *args, **kwargs)
        path = os.path.join(save_directory, "config.json")
        if os.path.isfile(path):  # only the main process writes under multi-process runs
            with open(path, encoding="utf-8") as fh:
                config = json.load(fh)
            config["architectures"] = [self.saved_architecture]
            write_json_atomic(path, config)


class RobertaForMaskedLMBaseline(SavedAsParent, RobertaForMaskedLM):
    """RoBERTa's masked LM with LinformerForMaskedLM's forward: the baseline under the identical recipe.

    The two forwards compute the same thing (RoBERTa's encoder and LM head, mean cross-entropy); Linformer's also
    takes `logits_for_labels_only`, which pretraining uses, so the baseline's cost per step stays comparable to
    Linformer's. Saved folders are plain RoBERTa (`model_type: roberta`, loaded as `RobertaForMaskedLM`).
    """

    saved_architecture = "RobertaForMaskedLM"
    forward = LinformerForMaskedLM.forward


class BertForMaskedLMBaseline(SavedAsParent, BertForMaskedLM):
    """BERT's masked LM under pretraining (a BERT-layout encoder such as all-MiniLM-L6-v2, e.g. while a head
    is fitted on it): BERT's forward with `logits_for_labels_only` (LinformerForMaskedLM's). Saved folders are plain
    BERT."""

    saved_architecture = "BertForMaskedLM"

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        labels=None,
        logits_for_labels_only: bool = False,
        num_items_in_batch=None,
        **kwargs,
    ) -> MaskedLMOutput:
        hidden = self.bert(
            input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, position_ids=position_ids
        ).last_hidden_state  # (batch, L, d)
        if logits_for_labels_only:
            if labels is None:
                raise ValueError("`logits_for_labels_only=True` needs `labels` to say which positions to score.")
            labelled = labels != -100
            hidden, labels = hidden[labelled], labels[labelled]  # (num_labelled, d), (num_labelled,)
        logits = self.cls(hidden)  # (batch, L, vocab) or (num_labelled, vocab)
        loss = None
        if labels is not None:
            loss = self.loss_function(
                logits, labels, vocab_size=self.config.vocab_size, num_items_in_batch=num_items_in_batch
            )
        return MaskedLMOutput(loss=loss, logits=logits)


def head_parameter_names(model) -> list[str]:
    """The masked-LM head's own parameters (its transform and output bias; not the output layer, which shares the
    word embeddings)."""
    head = "cls." if isinstance(model, BertForMaskedLM) else "lm_head."
    shared = {id(model.get_input_embeddings().weight)}
    return [name for name, p in model.named_parameters() if name.startswith(head) and id(p) not in shared]


def output_bias(model) -> torch.nn.Parameter:
    """The masked-LM head's output bias (RoBERTa's and this package's ``lm_head.bias``, BERT's
    ``cls.predictions.bias``), which the output layer's bias shares."""
    head = model.cls.predictions if isinstance(model, BertForMaskedLM) else model.lm_head
    return head.bias


@torch.no_grad()
def init_output_bias(model, log_probs) -> None:
    """Start ``model`` at the unigram model: its output bias set to ``log_probs`` (log token frequencies, one per
    vocabulary entry of the tokenizer), so that with the small initial logits of a fresh model it predicts the token
    frequencies. Rows past the tokenizer's (a vocabulary padded to a multiple) get the rarest token's value."""
    bias = output_bias(model)
    log_probs = torch.as_tensor(log_probs, dtype=bias.dtype)
    if bias.shape[0] < len(log_probs):
        raise ValueError(f"{len(log_probs)} log frequencies for an output bias of only {bias.shape[0]} tokens")
    bias.fill_(log_probs.min())
    bias[: len(log_probs)] = log_probs


def _classes(model_type: str):
    if model_type == "roberta":
        return RobertaConfig, RobertaForMaskedLMBaseline
    if model_type == "linformer":
        return LinformerConfig, LinformerForMaskedLM
    if model_type == "performer":
        return PerformerConfig, PerformerForMaskedLM
    if model_type == "bert":
        return BertConfig, BertForMaskedLMBaseline
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
    # Token ids come from the tokenizer so the embeddings match it; a recipe that says otherwise is refused, not
    # overridden without a word.
    from_tokenizer = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }
    differ = [
        f"{key}={fields[key]} (the tokenizer's: {value})"
        for key, value in from_tokenizer.items()
        if key in fields and fields[key] != value
    ]
    if differ:
        raise ConfigError(
            f"model.config / model.config_file set {', '.join(differ)}: the vocabulary size and special token ids "
            "come from the tokenizer. Drop them, or give the tokenizer they belong to (tokenizer.name_or_path)."
        )
    fields.update(from_tokenizer)
    return make_config(model_type, fields)


def convert_masked_lm(section: ModelSection):
    """The RoBERTa or BERT masked LM in ``section.pretrained`` converted in memory to ``section.model_type`` with the
    settings of ``section.convert_from_roberta`` (`linformer_hf.conversion.convert_model`: every weight carried over,
    the learned positions copied out to n), and the conversion's `ConversionReport` (what the run's ``final/`` says
    it came from). Its masked-LM head must have been trained: a checkpoint saved without one (a sentence encoder) is
    refused, not given a random head."""
    from ..conversion import convert_model, load_source
    from .validation import check_model_source

    check_model_source(section.pretrained, "model.pretrained")
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
                f"uptraining needs one: fit a head on the frozen encoder first (model.trainable: lm_head, "
                f"configs/pretrain/fit_mlm_head_books.yaml)"
            )
        model, report = convert_model(source, target=target, source_name=section.pretrained, **settings)
        report.source_missing = sorted(loading.get("missing_keys", []))
        report.source_unexpected = sorted(loading.get("unexpected_keys", []))
    except (OSError, ValueError, StrictDataclassError) as err:
        if hub_unreachable(err):
            raise hub_unreachable_error("model.pretrained", section.pretrained, err, LOCAL_MODEL) from None
        raise ConfigError(
            f"Could not convert model.pretrained={section.pretrained}: {' '.join(str(err).split())}"
        ) from None
    return model, report


def load_uptrained_checkpoint(section: ModelSection, checkpoint: str):
    """The converted model that an uptraining run saved in ``checkpoint``, to resume it without reading
    model.pretrained again: a Hub name offline, or a folder since moved, would stop the resume. The checkpoint's
    recipe records the conversion's settings, and the resume compares them with the recipe's."""
    config_cls, model_cls = _classes(section.model_type)
    saved_type = config_cls.from_pretrained(checkpoint).model_type
    if saved_type != section.model_type:
        raise ConfigError(
            f"Checkpoint {checkpoint} holds a {saved_type!r} model but model.model_type is {section.model_type!r}: "
            f"resume it with the recipe it was made with."
        )
    model, loading = model_cls.from_pretrained(checkpoint, output_loading_info=True)
    if loading["missing_keys"]:
        missing = loading["missing_keys"]
        raise ConfigError(
            f"Checkpoint {checkpoint} lacks {len(missing)} weight(s) of its model (e.g. {missing[0]}): it is torn. "
            f"Resume an earlier checkpoint by its folder, or start over."
        )
    return model


def build_mlm_model(section: ModelSection, tokenizer):
    """A fresh masked-LM model from the recipe, or the saved one in ``section.pretrained``; with ``trainable:
    lm_head`` everything but the head's own parameters is frozen."""
    config_cls, model_cls = _classes(section.model_type)
    if not section.pretrained:
        return model_cls(build_model_config(section, tokenizer))
    if not os.path.isfile(os.path.join(section.pretrained, "config.json")):
        raise ConfigError(f"model.pretrained={section.pretrained} has no config.json; not a saved model dir.")
    saved_type = config_cls.from_pretrained(section.pretrained).model_type
    if saved_type != section.model_type:
        raise ConfigError(
            f"model.pretrained={section.pretrained} is a {saved_type!r} model but model.model_type is "
            f"{section.model_type!r}; set model.model_type: {saved_type}."
        )
    model, loading = model_cls.from_pretrained(section.pretrained, output_loading_info=True)
    head = set(head_parameter_names(model))
    untrained = [key for key in loading["missing_keys"] if key in head]
    if section.trainable == "lm_head":
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name in head)
    elif untrained:
        raise ConfigError(
            f"model.pretrained={section.pretrained} has no trained masked-LM head ({len(untrained)} head weights "
            f"missing, e.g. {untrained[0]}), so its masked-LM loss starts from a random head. Fit one on the frozen "
            f"encoder first (model.trainable: lm_head, e.g. configs/pretrain/fit_mlm_head_books.yaml)."
        )
    return model
