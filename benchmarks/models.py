"""The models the benchmark compares, by name: each a transformers config of the run's shape, dropout 0.

A model joins the benchmark with one entry in `MODELS` (how to configure it at length n) and, in `costs.py`, the
memory terms of its attention keyed by its `model_type` and either its FLOP terms or `counted_flops=True`. This
package's models of linear cost in n (Linformer, Performer) are compared against every other model: the quadratic
baselines (RoBERTa eager and SDPA) and the peers a user with long documents would pick instead (transformers'
Longformer and BigBird, ModernBERT; opt-in: `--models` or `--preset peers`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from transformers import PretrainedConfig


class ModelShape(Protocol):
    """The fields of a run's settings (`config.ModelShape`) that the models are built from: named here, so that
    this module does not import the settings that validate against it."""

    vocab_size: int
    hidden_size: int
    layers: int
    heads: int
    intermediate_size: int
    sharing: str
    projection: str
    longformer_window: int
    bigbird_block_size: int
    bigbird_random_blocks: int
    num_random_features: int


def _shape(cfg: ModelShape, n: int) -> dict:
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
    def make(cfg: ModelShape, n: int, k: int | None) -> PretrainedConfig:
        from transformers import RobertaConfig

        return RobertaConfig(**_shape(cfg, n), attn_implementation=attn_implementation)

    return make


def _linformer(cfg: ModelShape, n: int, k: int | None) -> PretrainedConfig:
    from linformer_hf.models.configuration_linformer import LinformerConfig

    return LinformerConfig(
        **_shape(cfg, n),
        max_sequence_length=n,
        projected_length=k,
        sharing=cfg.sharing,
        projection=cfg.projection,
        attn_implementation="sdpa",
    )


def _longformer(cfg: ModelShape, n: int, k: int | None) -> PretrainedConfig:
    from transformers import LongformerConfig

    # Longformer pads the input to a multiple of the window (`realised_attention` records it).
    return LongformerConfig(**_shape(cfg, n), attention_window=cfg.longformer_window)


def _bigbird(cfg: ModelShape, n: int, k: int | None) -> PretrainedConfig:
    from transformers import BigBirdConfig

    # Up to (5 + 2r) blocks of tokens BigBird runs full attention instead (`realised_attention` records it).
    return BigBirdConfig(
        **_shape(cfg, n),
        attention_type="block_sparse",
        block_size=cfg.bigbird_block_size,
        num_random_blocks=cfg.bigbird_random_blocks,
    )


def _performer(causal: bool, feature_map_dtype: str = "float32", recompute_feature_maps: bool = False):
    def make(cfg: ModelShape, n: int, k: int | None) -> PretrainedConfig:
        from linformer_hf.models.configuration_performer import PerformerConfig

        # is_decoder: causal FAVOR+ by prefix sums (the bare PerformerModel, as for the bidirectional one)
        return PerformerConfig(
            **_shape(cfg, n),
            num_random_features=cfg.num_random_features,
            is_decoder=causal,
            feature_map_dtype=feature_map_dtype,
            recompute_feature_maps=recompute_feature_maps,
        )

    return make


# ModernBERT-base as released (answerdotai/ModernBERT-base): 22 layers, GeGLU feed-forward of width 1152, local
# attention over a window of 128 positions in two of every three layers, global attention in every third.
MODERNBERT_BASE = dict(hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152)
MODERNBERT_WINDOW = 128


def _modernbert(attn_implementation: str, released: bool):
    """ModernBERT as released (`released`: its own depth, width and feed-forward whatever the run's shape), or its
    architecture at the run's width, heads and depth with the released feed-forward ratio (1152 / 768)."""

    def make(cfg: ModelShape, n: int, k: int | None) -> PretrainedConfig:
        from transformers import ModernBertConfig

        shape = MODERNBERT_BASE if released else dict(
            hidden_size=cfg.hidden_size, num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
            intermediate_size=cfg.hidden_size * MODERNBERT_BASE["intermediate_size"] // MODERNBERT_BASE["hidden_size"],
        )  # fmt: skip
        return ModernBertConfig(
            **shape, vocab_size=cfg.vocab_size, max_position_embeddings=n, local_attention=MODERNBERT_WINDOW,
            # RoBERTa's special ids, so that one batch (padding id 1) serves every model
            pad_token_id=1, bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2,
            attention_dropout=0.0, mlp_dropout=0.0, embedding_dropout=0.0, attn_implementation=attn_implementation,
        )  # fmt: skip

    return make


def _flash_attention_unavailable(cfg) -> str | None:
    """Why FlashAttention-2 cannot run with `cfg`, or None."""
    import importlib.util

    if not cfg.device.startswith("cuda"):
        return "flash_attention_2 runs on CUDA only"
    if importlib.util.find_spec("flash_attn") is None:
        return (
            "flash_attn is not installed (PyPI has only a source distribution, built against the local CUDA "
            "toolkit: pip install flash-attn --no-build-isolation)"
        )
    import torch

    if torch.cuda.get_device_capability(cfg.device)[0] < 8:
        return "FlashAttention-2 needs an Ampere or newer GPU (compute capability >= 8.0)"
    return None


@dataclass(frozen=True)
class BenchmarkModel:
    make_config: Callable[[ModelShape, int, int | None], PretrainedConfig]
    takes_k: bool = False  # measured once per projected length k <= n
    # This package's attention of linear cost in n: compared against every other model (the ratio tables), and
    # timed in the linear-cost check.
    linear: bool = False
    # In the default model list; the peers are opt-in (slow, and not this package's).
    default: bool = True
    # Tokens with global attention, from the first (Longformer's `global_attention_mask`, as in classification).
    global_tokens: int = 0
    # FLOPs counted by torch's FlopCounterMode on the real run instead of `costs.py`'s model (the peers' chunked
    # and block-sparse attention gather and pad in ways a closed form would only approximate).
    counted_flops: bool = False
    # Why the model cannot run with the run's settings (its rows are then `skipped` with that reason), or None.
    unavailable: Callable[[ModelShape], str | None] | None = None


MODELS: dict[str, BenchmarkModel] = {
    "roberta-eager": BenchmarkModel(_roberta("eager")),
    "roberta-sdpa": BenchmarkModel(_roberta("sdpa")),
    "linformer": BenchmarkModel(_linformer, takes_k=True, linear=True),
    "performer": BenchmarkModel(_performer(causal=False), linear=True),
    "performer-causal": BenchmarkModel(_performer(causal=True), linear=True),
    # FAVOR+'s projections and products in bf16 (exp and sums in fp32): its tensor-core variant, opt-in
    "performer-bf16": BenchmarkModel(
        _performer(causal=False, feature_map_dtype="bfloat16"), linear=True, default=False
    ),
    # the same, keeping only Q, K, V for backward and running FAVOR+ again there: memory against speed, opt-in
    "performer-bf16-recompute": BenchmarkModel(
        _performer(causal=False, feature_map_dtype="bfloat16", recompute_feature_maps=True), linear=True, default=False
    ),
    "longformer": BenchmarkModel(_longformer, default=False, counted_flops=True),
    "longformer-global": BenchmarkModel(_longformer, default=False, global_tokens=1, counted_flops=True),
    "bigbird": BenchmarkModel(_bigbird, default=False, counted_flops=True),
    # ModernBERT at the run's depth and width ("equal depth"), and as users get it ("-base": 22 layers, 768 wide).
    "modernbert-sdpa": BenchmarkModel(_modernbert("sdpa", released=False), default=False),
    "modernbert-base-sdpa": BenchmarkModel(_modernbert("sdpa", released=True), default=False),
    "modernbert-fa2": BenchmarkModel(
        _modernbert("flash_attention_2", released=False), default=False, unavailable=_flash_attention_unavailable
    ),
    "modernbert-base-fa2": BenchmarkModel(
        _modernbert("flash_attention_2", released=True), default=False, unavailable=_flash_attention_unavailable
    ),
}
DEFAULT_MODELS = [name for name, model in MODELS.items() if model.default]


def model_config(model: str, n: int, k: int | None, cfg: ModelShape) -> PretrainedConfig:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; choose from {tuple(MODELS)}")
    return MODELS[model].make_config(cfg, n, k)


def build_model(config: PretrainedConfig):
    """The bare encoder (with pooler) of `config` through the Auto classes (`linformer_hf` registers Linformer and
    Performer)."""
    from transformers import AutoModel

    return AutoModel.from_config(config)


def model_inputs(model: str, ids, mask) -> dict:
    """The forward's keyword arguments: ids and mask, plus Longformer's global attention mask where the model has
    global tokens."""
    inputs = dict(input_ids=ids, attention_mask=mask)
    global_tokens = MODELS[model].global_tokens
    if global_tokens:
        global_mask = mask.new_zeros(mask.shape)
        global_mask[:, :global_tokens] = 1
        inputs["global_attention_mask"] = global_mask
    return inputs


def realised_attention(net, inputs: dict) -> str | None:
    """What attention the model ran on `inputs`, read from the model after its forward: BigBird's `attention_type`
    (it switches to full attention up to (5 + 2r) blocks of tokens), the padding Longformer and BigBird add to reach
    a multiple of their window or block, Longformer's global tokens. None for the models that run what was asked."""
    config, seq_len = net.config, inputs["input_ids"].shape[1]
    if config.model_type == "big_bird":
        if net.attention_type != "block_sparse":
            return net.attention_type
        padded = -seq_len % config.block_size
        return f"block_sparse (block {config.block_size}, {config.num_random_blocks} random)" + (
            f", padded by {padded}" if padded else ""
        )
    if config.model_type == "longformer":
        window = config.attention_window
        window = window if isinstance(window, int) else max(window)
        padded = -seq_len % window
        global_mask = inputs.get("global_attention_mask")
        global_tokens = 0 if global_mask is None else int(global_mask[0].sum())
        return f"sliding window {window}, {global_tokens} global" + (f", padded by {padded}" if padded else "")
    return None
