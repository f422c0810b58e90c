"""Task metrics computed offline (``evaluate.load`` needs the Hub): accuracy, and F1 of the positive class for QQP."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, f1_score


def classification_metrics(predictions, labels, with_f1: bool = False) -> dict[str, float]:
    predictions = np.asarray(predictions)
    labels = np.asarray(labels)
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions {predictions.shape} and labels {labels.shape} differ in shape")
    out = {"accuracy": float(accuracy_score(labels, predictions))}
    if with_f1:
        out["f1"] = float(f1_score(labels, predictions, zero_division=0))
    return out
