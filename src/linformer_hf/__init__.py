"""Linformer for Hugging Face Transformers.

Importing this package registers Linformer with transformers' Auto classes (`model_type = "linformer"`), so
`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`, ... and `AutoTokenizer` resolve it like a built-in model.
"""

from .configuration_linformer import PROJECTION_KINDS, SHARING_MODES, LinformerConfig
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
from .registration import AUTO_CLASSES, register

register()

__version__ = "0.1.0"

__all__ = [
    "AUTO_CLASSES",
    "PROJECTION_KINDS",
    "SHARING_MODES",
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
