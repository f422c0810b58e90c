"""Linformer (Wang et al., 2020): RoBERTa with keys and values projected along the sequence axis."""

from .configuration_linformer import LinformerConfig
from .modeling_linformer import (
    LinformerForMaskedLM,
    LinformerForMultipleChoice,
    LinformerForQuestionAnswering,
    LinformerForSequenceClassification,
    LinformerForTokenClassification,
    LinformerModel,
    LinformerPreTrainedModel,
    LinformerProjection,
    LinformerSelfAttention,
)

__all__ = [
    "LinformerConfig",
    "LinformerForMaskedLM",
    "LinformerForMultipleChoice",
    "LinformerForQuestionAnswering",
    "LinformerForSequenceClassification",
    "LinformerForTokenClassification",
    "LinformerModel",
    "LinformerPreTrainedModel",
    "LinformerProjection",
    "LinformerSelfAttention",
]
