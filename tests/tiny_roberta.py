"""Tiny RoBERTa checkpoints and a tiny byte-level BPE tokenizer, built offline for conversion and packaging tests."""

import os

import torch
from transformers import RobertaConfig, RobertaTokenizer

WIKITEXT = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "wikitext-2", "valid.txt")


def wikitext_lines(count: int = 400) -> list[str]:
    with open(WIKITEXT, encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip() and not line.strip().startswith("=")]
    return lines[:count]


def build_tokenizer(directory: str, vocab_size: int = 300, model_max_length: int = 16) -> RobertaTokenizer:
    """A RoBERTa tokenizer (byte-level BPE with RoBERTa's special tokens) trained on a few hundred wikitext lines."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        wikitext_lines(),
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
    )
    os.makedirs(directory, exist_ok=True)
    bpe.save_model(directory)
    return RobertaTokenizer(
        vocab=os.path.join(directory, "vocab.json"),
        merges=os.path.join(directory, "merges.txt"),
        model_max_length=model_max_length,
    )


def tiny_roberta_config(**overrides) -> RobertaConfig:
    settings = dict(
        vocab_size=300,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=18,  # 16 learned positions after RoBERTa's offset of 2
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-5,
    )
    settings.update(overrides)
    return RobertaConfig(**settings)


def randomize_all(model, seed: int = 0) -> None:
    """Dense random values everywhere (LayerNorms and biases included), so nothing matches by a default init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2)
