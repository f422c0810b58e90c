"""Registration of Linformer with transformers' Auto classes, for local use and for `trust_remote_code` loading."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForMultipleChoice,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    RobertaTokenizer,
)

from .configuration_linformer import LinformerConfig
from .modeling_linformer import (
    LinformerForMaskedLM,
    LinformerForMultipleChoice,
    LinformerForQuestionAnswering,
    LinformerForSequenceClassification,
    LinformerForTokenClassification,
    LinformerModel,
)

# Auto class -> (auto factory, Linformer class). The saved `auto_map` (modeling_linformer.AUTO_MAP) lists the same.
AUTO_CLASSES = {
    "AutoModel": (AutoModel, LinformerModel),
    "AutoModelForMaskedLM": (AutoModelForMaskedLM, LinformerForMaskedLM),
    "AutoModelForSequenceClassification": (AutoModelForSequenceClassification, LinformerForSequenceClassification),
    "AutoModelForTokenClassification": (AutoModelForTokenClassification, LinformerForTokenClassification),
    "AutoModelForQuestionAnswering": (AutoModelForQuestionAnswering, LinformerForQuestionAnswering),
    "AutoModelForMultipleChoice": (AutoModelForMultipleChoice, LinformerForMultipleChoice),
}


def register() -> None:
    """Make `model_type="linformer"` known to the Auto classes and mark the classes for code export."""
    AutoConfig.register(LinformerConfig.model_type, LinformerConfig, exist_ok=True)
    LinformerConfig.register_for_auto_class("AutoConfig")
    for auto_name, (auto_class, model_class) in AUTO_CLASSES.items():
        auto_class.register(LinformerConfig, model_class, exist_ok=True)
        # save_pretrained then copies modeling_linformer.py and configuration_linformer.py beside the weights.
        model_class.register_for_auto_class(auto_name)
    # Linformer uses RoBERTa's byte-level BPE tokenizer.
    AutoTokenizer.register(LinformerConfig, tokenizer_class=RobertaTokenizer, exist_ok=True)
