"""Loading a saved Linformer folder for the tools that take one (Hub packaging, ONNX export), checked first."""

from __future__ import annotations

import os

from transformers import PretrainedConfig

from .models.configuration_linformer import LinformerConfig
from .models.modeling_linformer import LINFORMER_HEADS, LinformerPreTrainedModel


def heads_by_name() -> dict[str, type[LinformerPreTrainedModel]]:
    """Both spellings of a head: the Auto class name ("AutoModelForSequenceClassification") and the class name."""
    names = dict(LINFORMER_HEADS)
    names.update({cls.__name__: cls for cls in LINFORMER_HEADS.values()})
    return names


def load_linformer(model_dir: str, head: str | None = None) -> LinformerPreTrainedModel:
    """A saved Linformer, in eval mode, after checking that the folder holds one.

    Args:
        model_dir: a folder written by `save_pretrained`.
        head: an Auto class name or a Linformer class name; default: the head the folder was saved as (its config's
            `architectures`), or `LinformerModel` when it names none.
    Raises:
        ValueError (before any weights are read): no config.json, a config of another model type (read as written,
        before any Linformer class touches it), an unknown head.
    """
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise ValueError(
            f"{model_dir} is not a saved model folder (no config.json): give the directory written by "
            "save_pretrained, e.g. the output of scripts/convert_to_linformer.py or of fine-tuning."
        )
    config_dict, _ = PretrainedConfig.get_config_dict(model_dir)
    model_type = config_dict.get("model_type")
    if model_type != LinformerConfig.model_type:
        raise ValueError(
            f"{model_dir} holds a {model_type!r} model, not a Linformer (model_type 'linformer'): convert a RoBERTa or "
            "BERT checkpoint first with scripts/convert_to_linformer.py (earlier name: "
            "convert_roberta_to_linformer.py)."
        )
    heads = heads_by_name()
    if head is None:
        head = (config_dict.get("architectures") or ["LinformerModel"])[0]
    if head not in heads:
        raise ValueError(
            f"Unknown head {head!r} for {model_dir}; choose one of {', '.join(LINFORMER_HEADS)} (or the Linformer "
            "class names)."
        )
    return heads[head].from_pretrained(model_dir).eval()
