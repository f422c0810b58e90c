"""How close is FAVOR+ to the softmax attention it approximates? The relative error, measured.

For queries and keys Q, K (batch, heads, L, d) the exact attention matrix is A = softmax(Q K^T / sqrt(d)) (the
padded keys of `mask` excluded). FAVOR+ never forms its matrix; running it on V = I_L does:
A_hat = D^-1 phi(Q) phi(K)^T, through the same `favor_attention` the model uses. The reported figure is the relative
Frobenius error ||A_hat - A||_F / ||A||_F over the real query rows, per draw of the random features, averaged over
seeds. Given V, the error of the attention outputs A_hat V against A V instead.

Public reports measured 73-100% relative error for performer-pytorch (performer-pytorch #46, #69); this gives the
figure for any model's Q, K (e.g. those of a pretrained encoder's layers) and any m.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linformer_hf.models.configuration_performer import DEFAULT_KERNEL_EPSILON
from linformer_hf.models.modeling_performer import draw_random_features, favor_attention


def exact_attention(query, key, value, mask, causal: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d) + mask) V in fp32, padded keys (and future keys when causal) excluded."""
    q, k, v = query.float(), key.float(), value.float()
    scores = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5  # (batch, heads, L, L)
    allowed = (mask[:, None, None, :] > 0).expand_as(scores)
    if causal:
        allowed = allowed & torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1).nan_to_num(0.0), v)


def favor_relative_error(
    query: torch.Tensor,
    key: torch.Tensor,
    num_random_features: int,
    *,
    value: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    kernel: str = "softmax",
    orthogonal: bool = True,
    row_norms: str = "chi",
    epsilon: float | None = None,
    causal: bool = False,
    seed: int = 0,
) -> float:
    """||FAVOR+ - softmax||_F / ||softmax||_F for one draw of m random features (seeded), over real query rows.

    Args:
        query, key: (batch, heads, L, d); value: (batch, heads, L, d_v) or None to compare attention matrices.
        mask: (batch, L) of 1 (token) / 0 (padding), or None for no padding.
    """
    if query.shape != key.shape or query.dim() != 4:
        raise ValueError(
            f"query and key must both be (batch, heads, L, d), got {tuple(query.shape)} and {tuple(key.shape)}."
        )
    batch, heads, seq_len, d = query.shape
    if mask is None:
        mask = torch.ones(batch, seq_len, device=query.device)
    if value is None:  # V = I_L turns attention outputs into attention matrices
        value = torch.eye(seq_len, device=query.device).expand(batch, heads, seq_len, seq_len)
    if epsilon is None:
        epsilon = DEFAULT_KERNEL_EPSILON[kernel]
    features = draw_random_features(
        num_random_features, d, orthogonal, row_norms, torch.Generator().manual_seed(seed)
    ).to(query.device)
    approx = favor_attention(query, key, value, mask, features, kernel=kernel, epsilon=epsilon, causal=causal)
    exact = exact_attention(query, key, value, mask, causal=causal)
    rows = (mask > 0)[:, None, :, None].float()  # padded query rows are nobody's output
    return float(((approx - exact) * rows).norm() / (exact * rows).norm())


@dataclass
class ErrorRow:
    """Mean and spread over seeds of the relative error of one setting."""

    num_random_features: int
    kernel: str
    orthogonal: bool
    mean: float
    std: float
    seeds: int


def error_table(
    query: torch.Tensor,
    key: torch.Tensor,
    ms: tuple[int, ...] = (32, 64, 128, 256, 512, 1024),
    kernels: tuple[str, ...] = ("softmax", "relu"),
    orthogonal: tuple[bool, ...] = (True, False),
    seeds: int = 5,
    **kwargs,
) -> list[ErrorRow]:
    """The relative error for every m, kernel and feature kind, each over `seeds` draws (seeds 0 .. seeds - 1)."""
    rows = []
    for kernel in kernels:
        for orth in orthogonal:
            for m in ms:
                errors = torch.tensor(
                    [
                        favor_relative_error(query, key, m, kernel=kernel, orthogonal=orth, seed=s, **kwargs)
                        for s in range(seeds)
                    ]
                )
                std = float(errors.std()) if seeds > 1 else 0.0
                rows.append(ErrorRow(m, kernel, orth, float(errors.mean()), std, seeds))
    return rows


@torch.no_grad()
def teacher_queries_keys(model, input_ids, attention_mask=None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The queries and keys every layer of a BERT-style encoder computes for these inputs (what a Performer would
    feed FAVOR+ if it took over the weights), as (Q, K) per layer, each (batch, heads, L, d_h).

    Works on any model whose self-attention modules hold `query` and `key` linear maps and a head count
    (RoBERTa, BERT, Linformer, Performer): they are read by forward hooks, so the model runs unchanged.
    """
    attentions = [m for m in model.modules() if hasattr(m, "query") and hasattr(m, "key")]
    if not attentions:
        raise ValueError(f"{type(model).__name__} has no self-attention modules with `query` and `key` maps.")
    captured: dict[tuple[int, str], torch.Tensor] = {}
    hooks = []
    for index, attention in enumerate(attentions):
        heads = getattr(attention, "num_attention_heads", None) or model.config.num_attention_heads
        for name in ("query", "key"):

            def hook(_module, _inputs, output, index=index, name=name, heads=heads):
                # (batch, L, d) -> (batch, heads, L, d_h)
                captured[index, name] = output.unflatten(-1, (heads, -1)).transpose(1, 2).float()

            hooks.append(getattr(attention, name).register_forward_hook(hook))
    try:
        model.eval()(input_ids=input_ids, attention_mask=attention_mask)
    finally:
        for handle in hooks:
            handle.remove()
    return [(captured[i, "query"], captured[i, "key"]) for i in range(len(attentions))]


def measure_model(
    model_path: str,
    text_path: str,
    seq_len: int = 128,
    max_inputs: int = 4,
    ms: tuple[int, ...] = (32, 64, 128, 256, 512, 1024),
    seeds: int = 3,
    trust_remote_code: bool = False,
) -> dict:
    """The FAVOR+ error on a pretrained encoder's own queries and keys, per layer and averaged over layers.

    The first `max_inputs` texts of `text_path` (see `spectrum.read_texts`), each cut to `seq_len` tokens (shorter
    ones padded; padded keys and query rows are left out of the error). Returns a JSON-ready dict: the inputs, each
    layer's logit spread (std of q^T k / sqrt(d_h) over real pairs) and error rows, and the mean over layers of
    every setting.
    """
    from transformers import AutoModel, AutoTokenizer

    from linformer_hf.models.lengths import max_input_length

    from .spectrum import read_texts

    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    model = AutoModel.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    limit = max_input_length(model.config)
    if seq_len > limit:  # said now, not as an index error deep in the embeddings
        raise ValueError(
            f"seq_len {seq_len} exceeds the model's maximum input length {limit}: give --seq_len <= {limit}."
        )
    texts = read_texts(text_path, limit=max_inputs)
    batch = tokenizer(texts, truncation=True, max_length=seq_len, padding=True, return_tensors="pt")
    mask = batch["attention_mask"]
    pairs = teacher_queries_keys(model, batch["input_ids"], mask)
    real_pairs = (mask[:, None, :, None] * mask[:, None, None, :]).bool()  # (batch, 1, L, L)
    layers, totals = [], {}
    for layer, (q, k) in enumerate(pairs):
        logits = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
        rows = error_table(q, k, ms=ms, seeds=seeds, mask=mask)
        layers.append(
            {
                "layer": layer,
                "logit_std": float(logits.masked_select(real_pairs.expand_as(logits)).std()),
                "rows": [vars(row) for row in rows],
            }
        )
        for row in rows:
            totals.setdefault((row.kernel, row.orthogonal, row.num_random_features), []).append(row.mean)
    mean_over_layers = [
        {"kernel": kernel, "orthogonal": orthogonal, "num_random_features": m, "mean": sum(v) / len(v)}
        for (kernel, orthogonal, m), v in totals.items()
    ]
    return {
        "model": model_path,
        "text": text_path,
        "inputs": int(mask.shape[0]),
        "seq_len": int(mask.shape[1]),
        "real_tokens": int(mask.sum()),
        "seeds": seeds,
        "layers": layers,
        "mean_over_layers": mean_over_layers,
    }


__all__ = [
    "ErrorRow",
    "error_table",
    "exact_attention",
    "favor_relative_error",
    "measure_model",
    "teacher_queries_keys",
]
