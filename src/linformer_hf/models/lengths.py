"""Facts about input length that hold for every model family this package trains or studies."""

# Families whose embeddings number positions from `padding_idx + 1`, as RoBERTa's do (the project's own families are
# built on RoBERTa's embeddings). Every other family (BERT and its layout) numbers them from 0.
POSITIONS_AFTER_PADDING_IDX = ("roberta", "xlm-roberta", "camembert", "longformer", "linformer", "performer")


def max_input_length(config) -> int:
    """The longest input (tokens, specials included) a model with this config accepts.

    Linformer: n (`max_sequence_length`, the width of E and F). RoBERTa-style position tables (RoBERTa itself, and
    families without an n): `max_position_embeddings - (pad_token_id + 1)`, since RoBERTa numbers positions from
    `padding_idx + 1`. BERT-style tables: `max_position_embeddings`, numbered from 0.
    """
    n = getattr(config, "max_sequence_length", None)
    if n is not None:
        return int(n)
    if config.model_type in POSITIONS_AFTER_PADDING_IDX:
        return int(config.max_position_embeddings) - (int(config.pad_token_id) + 1)
    return int(config.max_position_embeddings)
