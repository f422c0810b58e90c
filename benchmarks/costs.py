"""The cost model: FLOPs and a memory estimate of one forward pass, as pure functions of a model's config.

FLOPs count the matrix products only (2 per multiply-add), which is what `torch.utils.flop_counter` counts; the
tests check the two agree on the real models. Elementwise work (GELU, LayerNorm, softmax, pooling a bin, masking) is
not counted. Each attention family contributes its terms through a table keyed by `config.model_type`, so a peer
model joins with one function per table.

ModernBERT's local layers cost full attention under SDPA and eager (the window is a mask) and only the window under
FlashAttention-2; its feed-forward is GeGLU (3 L d d_ff); it has no pooler.

Notation: L tokens in the input (L <= n), width d, H heads, feed-forward width d_ff, k projected rows (Linformer),
m random features per head and chunks of C positions (Performer).

The peers (Longformer, BigBird) have memory terms here but no FLOP terms: their FLOPs are what torch's
FlopCounterMode counts on the measured run (`models.BenchmarkModel.counted_flops`), padding and gathers included.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PretrainedConfig


def _roberta_attention_multiply_adds(config: PretrainedConfig, seq_len: int, layer_idx: int) -> int:
    """Q, K, V and output maps 4 L d^2; Q K^T and P V 2 L^2 d (eager and SDPA do the same products)."""
    d, L = config.hidden_size, seq_len
    return 4 * L * d * d + 2 * L * L * d


def _compressed_length(config: PretrainedConfig, seq_len: int, layer_idx: int) -> int:
    """k' rows after compression: k for a linear E; one per bin of s = n / k positions for pooling and conv."""
    k = config.projected_length_of_layer(layer_idx)
    if config.projection == "linear":
        return k
    return math.ceil(seq_len / (config.max_sequence_length // k))


def _linformer_attention_multiply_adds(config: PretrainedConfig, seq_len: int, layer_idx: int) -> int:
    """Q and output maps 2 L d^2; attention over k' rows 2 L k' d; then, by path:

    - fast path (`config.compresses_input_first`): E X (and F X unless E = F) k L d each for a linear E, the K and
      V maps on k' rows 2 k' d^2;
    - plain path: K and V maps on all rows 2 L d^2, E K and F V k L d each for a linear E.
    Pooling and conv compress elementwise (no product). A linear E also finds the slots that a real token reaches:
    |E| times the 0/1 mask, k L per distinct projection and per head it holds; on the fast path also its row sums
    over real tokens E 1 (for the bias terms (E 1) b), k L more, both made once per forward for all layers
    (`prepare_linear_compressions`): with one E for every layer (`sharing="layerwise"`), counted at layer 0 only.
    """
    d, L = config.hidden_size, seq_len
    k = config.projected_length_of_layer(layer_idx)
    k_out = _compressed_length(config, seq_len, layer_idx)
    linear = config.projection == "linear"
    distinct_projections = 1 if config.sharing in ("key_value", "layerwise") else 2  # E = F, or E and F
    heads_per_projection = config.num_attention_heads if config.sharing == "none" else 1
    total = 2 * L * d * d + 2 * L * k_out * d
    if config.compresses_input_first:
        total += 2 * k_out * d * d + (distinct_projections * k * L * d if linear else 0)
    else:
        total += 2 * L * d * d + (2 * k * L * d if linear else 0)
    if linear and config.compresses_input_first:
        if config.sharing != "layerwise" or layer_idx == 0:
            total += 2 * distinct_projections * k * L
    elif linear:
        total += distinct_projections * heads_per_projection * k * L
    return total


def _causal_chunk_sizes(config: PretrainedConfig, seq_len: int) -> list[int]:
    """The lengths of causal FAVOR+'s chunks: C = `causal_chunk_size` each, the last one shorter."""
    chunk = config.causal_chunk_size
    return [min(chunk, seq_len - start) for start in range(0, seq_len, chunk)]


def _performer_attention_multiply_adds(config: PretrainedConfig, seq_len: int, layer_idx: int) -> int:
    """Q, K, V and output maps 4 L d^2; the features of queries and keys, x W^T, 2 L m d; then

    - bidirectional: phi(K)^T V and phi(Q) (phi(K)^T V) L m d each, the normaliser phi(Q) (phi(K)^T 1) H L m;
    - causal: the same three from the carried state (phi(q_i)^T S, phi(q_i)^T z and the state update psi^T V, chunk
      by chunk), plus within each chunk of C positions the C x C weights phi(Q_c) psi_c^T H C^2 m and their product
      with V_c C^2 d.
    Elementwise work (exp, the stabilisers, prefix sums, row sums) is not counted.
    """
    d, L, m, H = config.hidden_size, seq_len, config.num_random_features, config.num_attention_heads
    total = 4 * L * d * d + 2 * L * m * d + 2 * L * m * d + H * L * m
    if config.is_decoder:
        total += sum(C * C * (H * m + d) for C in _causal_chunk_sizes(config, seq_len))
    return total


def _modernbert_keys_per_layer(config: PretrainedConfig, seq_len: int, layer_idx: int) -> int:
    """Query-key pairs of one head in one layer: L^2 in global layers, and in local layers too for SDPA and eager (the
    window is a mask over the full product); FlashAttention-2 computes only the window of w = local_attention / 2
    positions each side and the query itself, L + 2 sum_j min(j, w) pairs (counted as the window's pairs: the kernel's
    tiles also compute some pairs outside it)."""
    L = seq_len
    window = config.sliding_window  # half the window
    # transformers passes FlashAttention-2 a window only when L exceeds it (sliding_window + 1 keys), else full
    windowed = config.layer_types[layer_idx] == "sliding_attention" and L > window + 1
    if not (windowed and config._attn_implementation == "flash_attention_2"):
        return L * L
    inner = (L - 1) * L // 2 if L - 1 <= window else window * (window + 1) // 2 + window * (L - 1 - window)
    return L + 2 * inner


def _modernbert_attention_multiply_adds(config: PretrainedConfig, seq_len: int, layer_idx: int) -> int:
    """Fused Q, K, V map and output map 4 L d^2; Q K^T and P V 2 d per query-key pair
    (`_modernbert_keys_per_layer`). Rotary embeddings are elementwise."""
    d = config.hidden_size
    return 4 * seq_len * d * d + 2 * d * _modernbert_keys_per_layer(config, seq_len, layer_idx)


def _roberta_attention_elements(config: PretrainedConfig, seq_len: int) -> int:
    """One (heads, L, L) score matrix for eager attention; SDPA never holds one."""
    if config._attn_implementation == "eager":
        return config.num_attention_heads * seq_len * seq_len
    return 0


def _modernbert_attention_elements(config: PretrainedConfig, seq_len: int) -> int:
    """Eager: one (heads, L, L) score matrix; SDPA: the (L, L) boolean masks of the full and local layers (about L^2
    elements of 2 bytes, generous); FlashAttention-2: none."""
    if config._attn_implementation == "eager":
        return config.num_attention_heads * seq_len * seq_len
    return 0 if config._attn_implementation == "flash_attention_2" else seq_len * seq_len


def _linformer_attention_elements(config: PretrainedConfig, seq_len: int) -> int:
    """One (heads, L, k') score block (generous: the fused SDPA kernel need not hold it)."""
    k_out = max(_compressed_length(config, seq_len, i) for i in range(config.num_hidden_layers))
    return config.num_attention_heads * seq_len * k_out


def _performer_attention_elements(config: PretrainedConfig, seq_len: int) -> int:
    """Three (heads, L, m) feature tensors alive at once (x W^T, its log-features, phi) for queries and keys alike
    (generous); causal adds the (heads, C, C) weights of a chunk. Linear in L."""
    H, m = config.num_attention_heads, config.num_random_features
    elements = 3 * H * seq_len * m
    if config.is_decoder:
        elements += H * max(_causal_chunk_sizes(config, seq_len)) ** 2
    return elements


def _longformer_attention_elements(config: PretrainedConfig, seq_len: int) -> int:
    """Sliding chunks: 2L/w - 1 overlapping chunks of w positions each score a (w, w) block per head, about 2 H L w,
    before they are cut to the (H, L, w + 1) band; doubled for the mask's chunks and the global columns (generous).
    Linear in L."""
    window = config.attention_window
    window = window if isinstance(window, int) else max(window)
    padded = seq_len + -seq_len % window
    return 4 * config.num_attention_heads * padded * window


def _big_bird_attention_elements(config: PretrainedConfig, seq_len: int) -> int:
    """Block-sparse: each query block of b tokens scores 3 sliding, 2 global and r random blocks, and the first and
    last query blocks every key, so about H L b (5 + r) + 2 H b L; the gathered keys and values of the (3 + r)
    blocks again as much: H L b (2r + 14), generous. Full attention (what BigBird runs up to (5 + 2r) b tokens):
    one (H, L, L) score matrix, as eager RoBERTa."""
    H, b, r = config.num_attention_heads, config.block_size, config.num_random_blocks
    if config.attention_type == "original_full" or seq_len <= (5 + 2 * r) * b:
        return H * seq_len * seq_len
    padded = seq_len + -seq_len % b
    return H * padded * b * (2 * r + 14)


ATTENTION_MULTIPLY_ADDS = {
    "roberta": _roberta_attention_multiply_adds,
    "linformer": _linformer_attention_multiply_adds,
    "performer": _performer_attention_multiply_adds,
    "modernbert": _modernbert_attention_multiply_adds,
}


def _feed_forward_multiply_adds(config: PretrainedConfig, seq_len: int) -> int:
    """Two maps L d d_ff; ModernBERT's GeGLU: d to 2 d_ff (value and gate), then d_ff to d, 3 L d d_ff."""
    d, d_ff = config.hidden_size, config.intermediate_size
    return (3 if config.model_type == "modernbert" else 2) * seq_len * d * d_ff


# The bare encoders without a pooler (its d^2 per sequence is not counted for them).
NO_POOLER = {"modernbert"}
ATTENTION_ELEMENTS = {
    "roberta": _roberta_attention_elements,
    "linformer": _linformer_attention_elements,
    "performer": _performer_attention_elements,
    "longformer": _longformer_attention_elements,
    "big_bird": _big_bird_attention_elements,
    "modernbert": _modernbert_attention_elements,
}


def _term(table: dict, config: PretrainedConfig):
    if config.model_type not in table:
        raise ValueError(
            f"no cost model for model_type {config.model_type!r}; known: {sorted(table)} (Longformer's and BigBird's "
            "FLOPs are counted by torch's FlopCounterMode on the run itself, see `models.BenchmarkModel`)"
        )
    return table[config.model_type]


def forward_flops(config: PretrainedConfig, seq_len: int, batch: int = 1, pooler: bool = True) -> int:
    """FLOPs of the matrix products of one forward pass of the bare encoder (`AutoModel`) over `seq_len` tokens.

    Per layer: the attention's terms (see `ATTENTION_MULTIPLY_ADDS`) plus the feed-forward
    (`_feed_forward_multiply_adds`); plus the pooler, d^2 per sequence (none in `NO_POOLER`).
    """
    attention = _term(ATTENTION_MULTIPLY_ADDS, config)
    d, feed_forward = config.hidden_size, _feed_forward_multiply_adds(config, seq_len)
    layers = sum(attention(config, seq_len, i) + feed_forward for i in range(config.num_hidden_layers))
    pooled = pooler and config.model_type not in NO_POOLER
    return 2 * batch * (layers + (d * d if pooled else 0))


def _performer_backward_savings(config: PretrainedConfig, seq_len: int, layer_idx: int) -> tuple[int, int]:
    """(multiply-adds of products with one constant operand, multiply-adds of products nothing uses).

    Constant operand: x W^T for queries and keys, 2 L m d (W, the random features, is a buffer); causal: the first
    chunk's phi(Q_c) S and phi(Q_c) z, C m (d + H), against the zero initial state. Unused: causal attention's
    last state update psi_c^T V_c, C m d, which no later chunk reads.
    """
    d, m, H = config.hidden_size, config.num_random_features, config.num_attention_heads
    constant, unused = 2 * seq_len * m * d, 0
    if config.is_decoder:
        chunks = _causal_chunk_sizes(config, seq_len)
        constant += chunks[0] * m * (d + H)
        unused += chunks[-1] * m * d
    return constant, unused


# Products of the forward pass whose backward is not two products: one where an operand needs no gradient, none
# where nothing uses the result. By model_type; the rest: two.
BACKWARD_SAVINGS = {"performer": _performer_backward_savings}


def _performer_recomputed_multiply_adds(config: PretrainedConfig, seq_len: int, layer_idx: int) -> int:
    """With `recompute_feature_maps`, backward runs FAVOR+'s forward again: its products without the four maps
    (`_performer_attention_multiply_adds` less 4 L d^2); none otherwise."""
    if not config.recompute_feature_maps:
        return 0
    d = config.hidden_size
    return _performer_attention_multiply_adds(config, seq_len, layer_idx) - 4 * seq_len * d * d


# Products of the forward pass that backward runs again (recomputation instead of saved activations), by model_type.
RECOMPUTED = {"performer": _performer_recomputed_multiply_adds}


def step_flops(config: PretrainedConfig, seq_len: int, batch: int, training: bool = False) -> int:
    """FLOPs of one measured step: a forward pass, or forward + backward (the backward of a product is two products,
    except those of `BACKWARD_SAVINGS`; plus the products that backward runs again, `RECOMPUTED`)."""
    forward = forward_flops(config, seq_len, batch)
    if not training:
        return forward
    savings = BACKWARD_SAVINGS.get(config.model_type)
    constant = unused = 0
    for layer_idx in range(config.num_hidden_layers if savings else 0):
        layer_constant, layer_unused = savings(config, seq_len, layer_idx)
        constant, unused = constant + layer_constant, unused + layer_unused
    recomputed = RECOMPUTED.get(config.model_type)
    again = sum(recomputed(config, seq_len, i) for i in range(config.num_hidden_layers)) if recomputed else 0
    return 3 * forward - 2 * batch * (constant + 2 * unused - again)


def estimate_activation_bytes(
    config: PretrainedConfig, seq_len: int, batch: int, bytes_per_element: int, training: bool = False
) -> int:
    """A deliberately generous estimate of the activation memory of one step, to skip points that cannot fit.

    Linear in L: a few (L, d) and (L, d_ff) tensors alive at once in inference; every layer's in training.
    Attention: scores and probabilities alive together (two score tensors) in inference; in training every
    layer's probabilities plus the live pair (layers + 2) (Performer: its feature tensors in their place). Quadratic
    only for eager RoBERTa.
    """
    d, layers, L = config.hidden_size, config.num_hidden_layers, seq_len
    d_ff = config.intermediate_size * (2 if config.model_type == "modernbert" else 1)  # GeGLU: value and gate
    scores = _term(ATTENTION_ELEMENTS, config)(config, seq_len)
    if training:
        elements = layers * L * (16 * d + 4 * d_ff) + (layers + 2) * scores
    else:
        elements = L * (8 * d + 3 * d_ff) + 2 * scores
    return batch * elements * bytes_per_element
