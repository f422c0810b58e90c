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
