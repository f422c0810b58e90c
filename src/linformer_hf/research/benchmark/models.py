"""The models the benchmark compares, by name: each a transformers config of the run's shape, dropout 0.

A model joins the benchmark with one entry in `MODELS` (how to configure it at length n) and, in `costs.py`, the
FLOP and memory terms of its attention keyed by its `model_type`. The models of linear cost in n (Linformer,
Performer) are compared against the quadratic baselines (RoBERTa eager and SDPA).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from transformers import PretrainedConfig

    from .config import BenchmarkConfig


def _shape(cfg: BenchmarkConfig, n: int) -> dict:
    """What every model of a run shares: width, depth, heads, feed-forward, vocabulary, positions for n tokens."""
    return dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=n + 2,  # RoBERTa's positions start at padding_idx + 1
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def _roberta(attn_implementation: str):
    def make(cfg: BenchmarkConfig, n: int, k: int | None) -> PretrainedConfig:
        from transformers import RobertaConfig

        return RobertaConfig(**_shape(cfg, n), attn_implementation=attn_implementation)

    return make


def _linformer(cfg: BenchmarkConfig, n: int, k: int | None) -> PretrainedConfig:
    from ...models.configuration_linformer import LinformerConfig

    return LinformerConfig(
        **_shape(cfg, n),
        max_sequence_length=n,
        projected_length=k,
        sharing=cfg.sharing,
        projection=cfg.projection,
        attn_implementation="sdpa",
    )


def _performer(causal: bool):
    def make(cfg: BenchmarkConfig, n: int, k: int | None) -> PretrainedConfig:
        from ...models.configuration_performer import PerformerConfig

        # is_decoder: causal FAVOR+ by prefix sums (the bare PerformerModel, as for the bidirectional one)
        return PerformerConfig(**_shape(cfg, n), num_random_features=cfg.num_random_features, is_decoder=causal)

    return make


@dataclass(frozen=True)
class BenchmarkModel:
    make_config: Callable[[BenchmarkConfig, int, int | None], PretrainedConfig]
    takes_k: bool = False  # measured once per projected length k <= n
    # Cost linear in n: compared against the quadratic baselines, and timed in the linear-cost check.
    linear: bool = False


MODELS: dict[str, BenchmarkModel] = {
    "roberta-eager": BenchmarkModel(_roberta("eager")),
    "roberta-sdpa": BenchmarkModel(_roberta("sdpa")),
    "linformer": BenchmarkModel(_linformer, takes_k=True, linear=True),
    "performer": BenchmarkModel(_performer(causal=False), linear=True),
    "performer-causal": BenchmarkModel(_performer(causal=True), linear=True),
}


def model_config(model: str, n: int, k: int | None, cfg: BenchmarkConfig) -> PretrainedConfig:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {tuple(MODELS)}")
    return MODELS[model].make_config(cfg, n, k)


def build_model(config: PretrainedConfig):
    """The bare encoder (with pooler) of `config` through the Auto classes (`linformer_hf` registers Linformer and
    Performer)."""
    from transformers import AutoModel

    return AutoModel.from_config(config)
