"""Linformer (and Performer) for Hugging Face Transformers.

Importing this package registers Linformer and Performer with transformers' Auto classes (`model_type =
"linformer"`, `"performer"`), so
`AutoConfig`, `AutoModel`, `AutoModelForMaskedLM`, ... and `AutoTokenizer` resolve it like a built-in model.
"""

from .models.configuration_linformer import PROJECTION_INITS, PROJECTION_KINDS, SHARING_MODES, LinformerConfig
from .models.configuration_performer import KERNELS, ROW_NORMS, PerformerConfig
from .models.modeling_linformer import (
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
from .models.modeling_performer import (
    PERFORMER_HEADS,
    PerformerForCausalLM,
    PerformerForMaskedLM,
    PerformerForMultipleChoice,
    PerformerForQuestionAnswering,
    PerformerForSequenceClassification,
    PerformerForTokenClassification,
    PerformerModel,
    PerformerPreTrainedModel,
    PerformerSelfAttention,
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
    "KERNELS",
    "PERFORMER_HEADS",
    "ROW_NORMS",
    "PerformerConfig",
    "PerformerForCausalLM",
    "PerformerForMaskedLM",
    "PerformerForMultipleChoice",
    "PerformerForQuestionAnswering",
    "PerformerForSequenceClassification",
    "PerformerForTokenClassification",
    "PerformerModel",
    "PerformerPreTrainedModel",
    "PerformerSelfAttention",
]
