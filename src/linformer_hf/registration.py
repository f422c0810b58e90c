"""Registration of Linformer with transformers' Auto classes, for local use and for `trust_remote_code` loading."""

import transformers
from transformers import AutoConfig, AutoTokenizer, BertTokenizer, RobertaTokenizer
from transformers.tokenization_utils_base import TOKENIZER_CONFIG_FILE

from .models.linformer.configuration_linformer import LinformerConfig
from .models.linformer.modeling_linformer import LINFORMER_HEADS

# Linformer uses RoBERTa's byte-level BPE tokenizer.
TOKENIZER_CLASS = RobertaTokenizer
# The files that mark a folder as holding a tokenizer (any one of them): Linformer's own, and BERT's WordPiece, which
# converted BERT-layout checkpoints keep. A folder with none would silently load as an empty tokenizer, so callers
# check for them first.
TOKENIZER_FILES = tuple(
    dict.fromkeys(
        (TOKENIZER_CONFIG_FILE, *TOKENIZER_CLASS.vocab_files_names.values(), *BertTokenizer.vocab_files_names.values())
    )
)


def register() -> None:
    """Make `model_type="linformer"` known to the Auto classes and mark the classes for code export."""
    AutoConfig.register(LinformerConfig.model_type, LinformerConfig, exist_ok=True)
    LinformerConfig.register_for_auto_class("AutoConfig")
    for auto_name, model_class in LINFORMER_HEADS.items():
        getattr(transformers, auto_name).register(LinformerConfig, model_class, exist_ok=True)
        # save_pretrained then copies modeling_linformer.py and configuration_linformer.py beside the weights.
        model_class.register_for_auto_class(auto_name)
    AutoTokenizer.register(LinformerConfig, tokenizer_class=TOKENIZER_CLASS, exist_ok=True)
