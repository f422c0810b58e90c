"""Registration of the model families (Linformer, Performer) with transformers' Auto classes, for local use and for
`trust_remote_code` loading."""

import transformers
from transformers import AutoConfig, AutoTokenizer, BertTokenizer, RobertaTokenizer
from transformers.tokenization_utils_base import TOKENIZER_CONFIG_FILE

from .models import modeling_linformer, modeling_performer
from .models.configuration_linformer import LinformerConfig
from .models.configuration_performer import PerformerConfig

# Each family's config class and its table of heads (Auto class name -> model class, one name per class).
FAMILIES = {LinformerConfig: modeling_linformer.LINFORMER_HEADS, PerformerConfig: modeling_performer.PERFORMER_HEADS}
# Each family's every Auto class -> the class it gives: its heads, and a head again under a second Auto class
# (AutoModelForPreTraining: the masked LM, as transformers maps RoBERTa's), declared in the family's modeling file.
AUTO_CLASSES = {
    LinformerConfig: modeling_linformer.auto_classes(),
    PerformerConfig: modeling_performer.auto_classes(),
}

# Every family uses RoBERTa's byte-level BPE tokenizer.
TOKENIZER_CLASS = RobertaTokenizer
# The files that mark a folder as holding a tokenizer (any one of them): Linformer's own, and BERT's WordPiece, which
# converted BERT-layout checkpoints keep. A folder with none would silently load as an empty tokenizer, so callers
# check for them first.
TOKENIZER_FILES = tuple(
    dict.fromkeys(
        (TOKENIZER_CONFIG_FILE, *TOKENIZER_CLASS.vocab_files_names.values(), *BertTokenizer.vocab_files_names.values())
    )
)
# Everything a tokenizer's save_pretrained may write beside them: what a command replacing its own earlier output
# deletes, so that no file of another tokenizer stays beside the new one.
TOKENIZER_SAVED_FILES = (*TOKENIZER_FILES, "special_tokens_map.json", "added_tokens.json", "chat_template.jinja")


def register() -> None:
    """Make `model_type="linformer"` and `"performer"` known to the Auto classes and mark the classes for code
    export."""
    for config_class, heads in FAMILIES.items():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        config_class.register_for_auto_class("AutoConfig")
        for auto_name, model_class in AUTO_CLASSES[config_class].items():
            getattr(transformers, auto_name).register(config_class, model_class, exist_ok=True)
        for auto_name, model_class in heads.items():
            # save_pretrained then copies the modeling and configuration files (and their siblings) beside the weights.
            # transformers keeps one Auto class per class (`_auto_class`): the head's own, never a second name.
            model_class.register_for_auto_class(auto_name)
        AutoTokenizer.register(config_class, tokenizer_class=TOKENIZER_CLASS, exist_ok=True)
