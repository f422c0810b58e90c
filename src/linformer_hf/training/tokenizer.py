"""Train a RoBERTa-style byte-level BPE tokenizer with ``tokenizers`` and save it for ``AutoTokenizer``."""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable, Iterator

from ..outputs import discard_staging, publish_folder, publish_new_folder, unique_staging_folder
from .config import ConfigError
from .errors import LOCAL_MODEL, hub_unreachable, hub_unreachable_error, one_line

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa's ids 0..3, then <mask>
# Any of these marks a saved tokenizer (fast, BPE vocab, or sentencepiece model) for AutoTokenizer.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "sentencepiece.bpe.model", "spiece.model")


def iter_text_files(files: list[str]) -> Iterator[str]:
    for path in files:
        if not os.path.isfile(path):
            raise ConfigError(f"Tokenizer training file not found: {path}.")
        try:
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    if line.strip():
                        yield line
        except UnicodeDecodeError:  # a binary or non-UTF-8 file: say which and where, not the codec's traceback
            from .validation import first_non_utf8_line

            raise ConfigError(
                f"Tokenizer training file {path} is not UTF-8 text ({first_non_utf8_line(path)}): convert it to "
                f"UTF-8 (e.g. `iconv -f latin1 -t utf-8`), or leave it out of --files."
            ) from None


def train_bpe_tokenizer(
    texts: Iterable[str],
    output_dir: str,
    vocab_size: int = 8192,
    min_frequency: int = 2,
    model_max_length: int = 512,
    overwrite: bool = True,
):
    """Train byte-level BPE on ``texts`` and save a ``RobertaTokenizer`` to ``output_dir``; returns the tokenizer.

    ``overwrite``: an earlier tokenizer in ``output_dir`` is replaced (every file of it; other files stay); without
    it, an ``output_dir`` that is not empty when the tokenizer is saved is refused (FileExistsError)."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer
    from transformers import RobertaTokenizer

    from ..registration import TOKENIZER_SAVED_FILES

    if vocab_size < 300:
        raise ConfigError(f"vocab_size must be at least 300 (256 bytes + special tokens), got {vocab_size}.")
    documents = 0

    def counted(texts):
        nonlocal documents
        for text in texts:
            if text and not text.isspace():
                documents += 1
                yield text

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        counted(texts),
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    if documents == 0:  # the trainer would save a tokenizer of the 256 bytes alone
        raise ConfigError(
            "The tokenizer training text is empty (no non-blank document); give text files with one document a line."
        )
    if bpe.get_vocab_size() < vocab_size:
        logger.warning(
            "The text (%d documents) gave %d tokens, fewer than vocab_size=%d: too little text to learn "
            "the vocabulary asked for.",
            documents,
            bpe.get_vocab_size(),
            vocab_size,
        )
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file, merges_file = bpe.save_model(tmp)
        # `<mask>` takes the space before it, as in roberta-base: "will be <mask> in" must read [" be", <mask>, " in"]
        # like "will be removed in" reads [" be", " removed", " in"]. transformers 5's RobertaTokenizer leaves the
        # mask token bare, and fill-mask prompts then put a lone " " token before the mask, which no training
        # block ever has (the model answers with word fragments).
        mask_token = AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)
        tokenizer = RobertaTokenizer(
            vocab=vocab_file, merges=merges_file, mask_token=mask_token, model_max_length=model_max_length
        )
    # Saved beside output_dir under a temporary name and moved into place when whole: a kill during the save leaves
    # no folder that reads as a tokenizer (scripts/demo.sh takes tokenizer_config.json as "trained").
    target = os.path.realpath(output_dir)  # a link's target: a rename onto the link itself would fail
    staging = unique_staging_folder(target)  # its own: another run into output_dir stages elsewhere
    try:
        tokenizer.save_pretrained(staging)
        if overwrite:
            saved = set(os.listdir(staging))
            publish_folder(staging, target)
            # An earlier tokenizer's files the new one does not write (special_tokens_map.json, added_tokens.json,
            # a vocab.txt) would be read with it by AutoTokenizer: another mask or pad token, extra token ids.
            for name in TOKENIZER_SAVED_FILES:
                if name not in saved and os.path.isfile(os.path.join(target, name)):
                    os.remove(os.path.join(target, name))
        else:  # refused if another run filled output_dir meanwhile
            publish_new_folder(staging, target)
    finally:
        discard_staging(staging)  # left only by a failure or a stop
    return tokenizer


def check_has_vocabulary(tokenizer, where: str) -> None:
    """A tokenizer with tokens beside its special ones. transformers 5 makes one of only its special tokens from a
    folder that holds a tokenizer_config.json and no vocabulary: every word then reads as <unk>, without a word."""
    if len(tokenizer) <= len(set(tokenizer.all_special_ids)):
        raise ConfigError(
            f"The tokenizer in {where} holds no vocabulary, only its {len(tokenizer)} special tokens (a "
            "tokenizer_config.json without tokenizer.json or vocab files?): give the folder of the whole tokenizer."
        )


def load_tokenizer(name_or_path: str, of_model: bool = False):
    """The tokenizer in a folder or of a Hub name; ``of_model``: the name is model.pretrained's (the recipe gives no
    tokenizer of its own), so an unreachable name is reported as the model's."""
    from transformers import AutoTokenizer

    if os.path.isdir(name_or_path) or os.path.exists(name_or_path):
        if not os.path.isdir(name_or_path):
            raise ConfigError(f"tokenizer {name_or_path} is a file; give the directory that holds it.")
        if not any(os.path.isfile(os.path.join(name_or_path, f)) for f in TOKENIZER_FILES):
            # transformers would go on to guess a tokenizer class and fail on something unrelated (sentencepiece)
            raise ConfigError(
                f"Tokenizer directory {name_or_path} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}). "
                f"Train one with `python -m linformer_hf.training.train_tokenizer --files <text files> "
                f"--output_dir {name_or_path}`."
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        except (OSError, ValueError) as err:
            raise ConfigError(f"Could not load the tokenizer in {name_or_path}: {err}") from err
        check_has_vocabulary(tokenizer, name_or_path)
        return tokenizer
    if name_or_path.startswith((".", "/")) or name_or_path.startswith("outputs"):
        raise ConfigError(
            f"Tokenizer directory not found: {name_or_path}. Train one first with "
            f"`python -m linformer_hf.training.train_tokenizer --files <text files> --output_dir {name_or_path}` "
            f"or set tokenizer.name_or_path to an existing dir (or a Hub name such as roberta-base when online)."
        )
    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except OSError as err:
        if hub_unreachable(err) and of_model:
            raise hub_unreachable_error("model.pretrained", name_or_path, err, LOCAL_MODEL) from None
        if hub_unreachable(err):
            raise hub_unreachable_error(
                "tokenizer", name_or_path, err, "give the folder of a saved tokenizer (or model) instead"
            ) from None
        raise ConfigError(
            f"Could not load tokenizer {name_or_path!r} (not a local dir, and the Hub failed): {one_line(err)}"
        ) from err
