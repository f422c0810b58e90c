"""Task metrics computed offline (``evaluate.load`` needs the Hub): accuracy, and F1 of the positive class for QQP;
and the unigram baseline of masked-LM perplexity."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from itertools import chain

import numpy as np


def classification_metrics(predictions, labels, with_f1: bool = False) -> dict[str, float]:
    # imported here: scikit-learn takes about half a second to import, and pretraining, which imports this module for
    # the unigram baseline, never needs it
    from sklearn.metrics import accuracy_score, f1_score

    predictions = np.asarray(predictions)
    labels = np.asarray(labels)
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions {predictions.shape} and labels {labels.shape} differ in shape")
    out = {"accuracy": float(accuracy_score(labels, predictions))}
    if with_f1:
        out["f1"] = float(f1_score(labels, predictions, zero_division=0))
    return out


def collapsed_classifier(predictions, labels, split: str = "validation") -> str | None:
    """A warning when a classifier predicts one class for every example of a split whose labels hold more than one
    class (a fine-tuning run that diverged softly, or a learning rate too high for a few hundred examples), else None.
    Its accuracy is then only the share of that class, which can look like a score."""
    predictions = np.asarray(predictions).reshape(-1)
    labels = np.asarray(labels).reshape(-1)
    classes = np.unique(predictions)
    if predictions.size < 2 or classes.size != 1 or np.unique(labels).size < 2:
        return None
    only = int(classes[0])
    share = float(np.mean(labels == only))
    return (
        f"Collapsed classifier: it predicts class {only} for all {predictions.size:,} {split} examples, whose labels "
        f"hold {np.unique(labels).size} classes; its accuracy ({100 * share:.1f}%) is only the share of class {only}. "
        "Lower training.learning_rate, train on more examples or for more updates, or check the labels."
    )


# ----------------------------------------------------------------------------------------------------------------
# The unigram baseline: what a masked LM reaches by predicting the training set's token frequencies whatever the
# context. A masked LM's perplexity means something only next to it (small MLMs first sit on this plateau).
# ----------------------------------------------------------------------------------------------------------------


def token_counts(sequences: Iterable[Sequence[int]], vocab_size: int, exclude_ids: Iterable[int] = ()) -> np.ndarray:
    """How often each token id occurs in ``sequences``: an int64 array of ``vocab_size`` entries.

    ``exclude_ids`` (a tokenizer's special tokens, which the MLM collator never masks, so never has to predict) are
    counted as 0. An id outside [0, vocab_size) is an error: the counts would not be over the model's vocabulary.
    """
    counts = np.zeros(vocab_size, dtype=np.int64)
    batch: list[Sequence[int]] = []

    def add(batch):
        ids = np.fromiter(chain.from_iterable(batch), dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
            raise ValueError(
                f"token id {int(ids.min()) if ids.min() < 0 else int(ids.max())} is outside the vocabulary of "
                f"{vocab_size}; count with the tokenizer's full size (len(tokenizer))."
            )
        counts[:] += np.bincount(ids, minlength=vocab_size)

    for seq in sequences:
        batch.append(seq)
        if len(batch) == 1024:
            add(batch)
            batch = []
    add(batch)
    counts[list(exclude_ids)] = 0
    return counts


def unigram_log_probs(counts: np.ndarray, smoothing: float = 1.0) -> np.ndarray:
    """log p(token) of the unigram model ``p = (count + smoothing) / (total + smoothing * V)`` (add-``smoothing``,
    so that a token never seen in training costs a finite log(smoothing / (total + smoothing * V)))."""
    counts = np.asarray(counts, dtype=np.float64)
    if smoothing < 0:
        raise ValueError(f"smoothing must be >= 0, got {smoothing}.")
    total = counts.sum() + smoothing * counts.size
    if total <= 0:
        raise ValueError("The unigram model needs at least one counted token (or smoothing > 0).")
    with np.errstate(divide="ignore"):  # a zero count with smoothing 0 is log 0 = -inf, i.e. infinite perplexity
        return np.log(counts + smoothing) - math.log(total)


def unigram_nll(log_probs: np.ndarray, labels, ignore_index: int = -100) -> tuple[float, int]:
    """Summed negative log-likelihood of the scored ``labels`` (those != ``ignore_index``, as in an MLM batch's
    ``labels``) under ``log_probs``, and how many were scored: sums, so that batches and processes can be added."""
    labels = np.asarray(labels).reshape(-1)
    scored = labels[labels != ignore_index]
    return float(-log_probs[scored].sum()), int(scored.size)


def unigram_perplexity(counts: np.ndarray, labels, smoothing: float = 1.0, ignore_index: int = -100) -> float:
    """Perplexity of the unigram model of ``counts`` on the scored ``labels``: ``exp`` of the mean cross-entropy per
    scored token, the same average as masked-LM perplexity when ``labels`` are the MLM's masked-token labels."""
    nll, n = unigram_nll(unigram_log_probs(counts, smoothing), labels, ignore_index)
    if n == 0:
        raise ValueError(f"No scored label (every label is ignore_index={ignore_index}).")
    return math.exp(nll / n)
