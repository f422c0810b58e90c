"""Linformer for Hugging Face Transformers.

Importing this package registers Linformer with transformers' Auto classes (`model_type = "linformer"`), so
`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`, ... and `AutoTokenizer` resolve it like a built-in model.
"""

from .models.linformer.configuration_linformer import PROJECTION_INITS, PROJECTION_KINDS, SHARING_MODES, LinformerConfig
from .models.linformer.modeling_linformer import (
    LINFORMER_HEADS,
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
from .registration import register

register()

__version__ = "0.1.0"

__all__ = [
    "LINFORMER_HEADS",
    "PROJECTION_INITS",
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
