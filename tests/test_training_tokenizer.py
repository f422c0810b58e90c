"""The trained byte-level BPE tokenizer: `<mask>` reads like the word it stands for (fill-mask depends on it)."""

import pytest
from training_utils import WIKITEXT

from linformer_hf.training.tokenizer import iter_text_files, train_bpe_tokenizer


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_bpe_tokenizer(iter_text_files([WIKITEXT]), str(out), vocab_size=1000, model_max_length=64)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(out))  # as fill-mask and pretraining load it


@pytest.mark.parametrize("word", ["the", "of", "and", "was"])
def test_a_masked_word_gives_the_tokens_of_the_sentence_with_the_mask_in_its_place(tokenizer, word):
    # A word that is one token (" the"): "<mask>" in its place must give the sentence's tokens with the mask id
    # substituted there, which is what MLM training shows the model. Without lstrip the space before "<mask>"
    # became a token of its own.
    sentence = f"It is one {word} many things in the town ."
    ids = tokenizer(sentence)["input_ids"]
    word_ids = tokenizer(f" {word}", add_special_tokens=False)["input_ids"]
    assert len(word_ids) == 1, "the test needs a one-token word"
    position = ids.index(word_ids[0])
    masked = tokenizer(sentence.replace(f" {word} ", f" {tokenizer.mask_token} ", 1))["input_ids"]
    expected = ids[:position] + [tokenizer.mask_token_id] + ids[position + 1 :]
    assert masked == expected


def test_the_mask_does_not_swallow_the_space_after_it(tokenizer):
    with_mask = tokenizer("one <mask> town")["input_ids"]
    plain = tokenizer("one the town")["input_ids"]
    assert len(with_mask) == len(plain)
    assert with_mask[-2] == plain[-2]  # " town" keeps its leading space (rstrip stays off, as in roberta-base)
