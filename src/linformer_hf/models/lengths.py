"""Facts about input length that hold for every model family this package trains or studies."""


def max_input_length(config) -> int:
    """The longest input (tokens, specials included) a model with this config accepts.

    Linformer: n (`max_sequence_length`, the width of E and F). BERT numbers positions from 0, so it takes
    `max_position_embeddings`. RoBERTa-style position tables (RoBERTa itself, and families without an n):
    `max_position_embeddings - (pad_token_id + 1)`, since RoBERTa numbers positions from `padding_idx + 1`.
    """
    n = getattr(config, "max_sequence_length", None)
    if n is not None:
        return int(n)
    if config.model_type == "bert":
        return int(config.max_position_embeddings)
    return int(config.max_position_embeddings) - (int(config.pad_token_id) + 1)
