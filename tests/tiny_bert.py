"""A tiny random BERT and a tiny WordPiece tokenizer, built offline for the BERT conversion and transfer tests."""

import os

from tiny_roberta import randomize_all, wikitext_lines  # noqa: F401  (re-exported for the BERT tests)
from transformers import BertConfig, BertTokenizer


def build_wordpiece_tokenizer(directory: str, vocab_size: int = 300, model_max_length: int = 16) -> BertTokenizer:
    """A BERT tokenizer (WordPiece, BERT's special tokens, [PAD] = 0) trained on a few hundred wikitext lines."""
    from tokenizers import BertWordPieceTokenizer

    wordpiece = BertWordPieceTokenizer(lowercase=True)
    wordpiece.train_from_iterator(
        wikitext_lines(),
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
    )
    os.makedirs(directory, exist_ok=True)
    wordpiece.save_model(directory)
    # The trainer gives the same tokens in a different order in every process (a hash map's): sorted after the
    # special tokens, every token keeps its id from run to run, and so do the models and tests built on it.
    path = os.path.join(directory, "vocab.txt")
    with open(path, encoding="utf-8") as handle:
        tokens = handle.read().splitlines()
    special = tokens[:5]
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(special + sorted(tokens[5:])) + "\n")
    return BertTokenizer(vocab=path, model_max_length=model_max_length)


def tiny_bert_config(**overrides) -> BertConfig:
    settings = dict(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=16,  # BERT counts positions from 0: 16 learned positions
        type_vocab_size=2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-5,
    )
    settings.update(overrides)
    return BertConfig(**settings)
