# Copyright 2026 The linformer-hf Authors. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""PyTorch Performer: RoBERTa with FAVOR+ self-attention (Choromanski et al., 2021).

The whole model in one file, laid out as transformers lays out a model's flat `modeling_<model>.py`: the attention
(random features, FAVOR+, the self-attention), then the blocks built around it (attention block, layer, encoder with
its redraw schedule), the pretrained base class, the bare model and the task heads. `PerformerConfig` reaches the
attention along `PerformerModel` -> `PerformerEncoder` -> `PerformerLayer` -> `PerformerAttention` ->
`PerformerSelfAttention`, all below. Where transformers' generated files copy the parent model's code, this file
imports RoBERTa's building blocks that are unchanged (embeddings, attention output block, feed-forward, pooler, LM and
classification heads, init): the remote code of a saved folder runs on every transformers release from 4.57 on, and
each release's own RoBERTa blocks are the ones that fit it. The heads' forwards are RoBERTa's, written out here around
`PerformerModel`, as in `modeling_linformer.py` (tests/test_model_files.py checks the copies). Parameter names match
RoBERTa's, so a RoBERTa checkpoint loads into a Performer with only the random features missing (they are drawn, not
learned).

Notation (the paper's): L the length of the batch, d = head size d_h, m = number of random features, W (m x d) the
random features of a layer, phi the feature map, so that softmax attention exp(q^T k / sqrt(d)) ~ phi(q)^T phi(k).

This file is copied beside saved weights with `configuration_performer.py` and `compat.py` (sibling imports), so it
imports only `torch`, `transformers` and those; what differs between transformers releases comes from `compat.py`.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import CrossEntropyLoss
from torch.utils.checkpoint import checkpoint
from transformers import GenerationMixin
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPooling,
    CausalLMOutput,
    MaskedLMOutput,
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.models.roberta.modeling_roberta import (
    RobertaClassificationHead,
    RobertaEmbeddings,
    RobertaIntermediate,
    RobertaLMHead,
    RobertaOutput,
    RobertaPooler,
    RobertaPreTrainedModel,
    RobertaSelfOutput,
)
from transformers.pytorch_utils import apply_chunking_to_forward
from transformers.utils import logging
from transformers.utils.generic import can_return_tuple

from .compat import PreTrainedModelCompat, auto_docstring, init, model_forward, tied_weights
from .configuration_performer import PerformerConfig

logger = logging.get_logger(__name__)

# Smallest normaliser divided by: a query whose keys are all padding (or a row of underflowed features) gets 0
# rather than 0 / 0.
TINY = 1e-30


def draw_random_features(
    m: int,
    d: int,
    orthogonal: bool = True,
    row_norms: str = "chi",
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """W of shape (m, d): rows w ~ N(0, I_d), or orthogonal rows with Gaussian-like lengths.

    Orthogonal features (the paper's ORF): ceil(m / d) blocks of d orthonormal rows, each Q^T of the QR decomposition
    of a d x d Gaussian matrix (with the signs that make it Haar-distributed), cut to m rows; then every row is scaled
    to the length of a Gaussian row (`"chi"`, chi(d)-distributed, so each row is still marginally N(0, I_d) and the
    estimate stays unbiased) or to sqrt(d) (`"sqrt_d"`). Drawn in fp32 on the CPU from `generator`, so the same seed
    gives the same W everywhere, whatever torch's default dtype and device (a model built with `dtype=torch.float16`
    sets the default dtype to fp16, which has no QR on the CPU).
    """
    fp32_cpu = {"dtype": torch.float32, "device": "cpu"}
    if not orthogonal:
        return torch.randn(m, d, generator=generator, **fp32_cpu)
    blocks = []
    for _ in range(math.ceil(m / d)):
        q, r = torch.linalg.qr(torch.randn(d, d, generator=generator, **fp32_cpu))
        # Fix the signs QR leaves free (diag(R) > 0): without it Q is not uniformly distributed (Haar), and the
        # features are biased.
        q = q * torch.sign(torch.diagonal(r))[None, :]
        blocks.append(q.T)  # d orthonormal rows
    w = torch.cat(blocks)[:m]  # (m, d)
    if row_norms == "chi":
        lengths = torch.randn(m, d, generator=generator, **fp32_cpu).norm(dim=1)
    elif row_norms == "sqrt_d":
        lengths = torch.full((m,), math.sqrt(d), **fp32_cpu)
    else:
        raise ValueError(f"row_norms must be 'chi' or 'sqrt_d', got {row_norms!r}.")
    return w * lengths[:, None]


def favor_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    features: torch.Tensor,
    kernel: str = "softmax",
    epsilon: float = 1e-6,
    causal: bool = False,
    chunk_size: int = 128,
    feature_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """FAVOR+: D^-1 phi(Q) (phi(K)^T V) with D = diag(phi(Q) phi(K)^T 1), in fp32 whatever the autocast dtype
    (or, with `feature_dtype`, its matmuls in a half type and everything else in fp32).

    Args:
        query, key: (batch, heads, L, d); value: (batch, heads, L, d_v).
        mask: (batch, L), 1.0 for real tokens and 0.0 for padding.
        features: W, (m, d).
        kernel: `"softmax"`: phi(x) = (exp(w^T x' - ||x'||^2 / 2 - s) + epsilon) / sqrt(m) with x' = x / d^(1/4),
            so phi(q)^T phi(k) estimates exp(q^T k / sqrt(d)); `"relu"`: phi(x) = (ReLU(w^T x') + epsilon) / sqrt(m).
        causal: query i attends to keys j <= i only (prefix sums over chunks of `chunk_size` positions).
        feature_dtype: None or torch.float32 (all fp32), or torch.bfloat16 / torch.float16: the projections x' W^T
            and, bidirectional, the contractions phi(K)^T V and phi(Q) (phi(K)^T V) take their inputs in that dtype
            (tensor cores; the matmuls accumulate in fp32); the exp, the stabilisers and the normaliser
            phi(Q) (phi(K)^T 1) stay fp32. fp16: V is divided by its largest |v| per (batch, head) before the
            contraction and the normaliser likewise, so that phi(K)^T V <= L / sqrt(m) stays within fp16's range.
    Returns:
        (batch, heads, L, d_v) in fp32.

    The stabiliser s keeps exp from overflowing; it cancels between numerator and normaliser. Queries: the maximum
    over features of each token. Keys: the maximum over features and real positions of each (batch, head) (for
    causal attention: over the positions j <= i, so no query is stabilised by a future key), detached as constants.
    Padding is exact: phi(k) is zeroed at padded positions after the feature map, so padded keys add nothing to
    phi(K)^T V nor to the normaliser, and padded positions never set the key stabiliser.
    """
    # Under fp16 the key sums phi(K)^T V and the normaliser overflow (65504) long before L is large, and bf16 keeps
    # 8 bits of mantissa: the sums, the exp and its stabilisers run in fp32 under autocast; only the matmuls of
    # `feature_dtype` take half-type inputs (docs/results/favor-approximation.md measures what that costs).
    # Few kernels: the scales go on W (m x d) and on per-token or per-head tensors, never on an (L x m) one.
    half = None if feature_dtype in (None, torch.float32) else feature_dtype
    matmul_dtype = half or torch.float32
    with torch.autocast(device_type=query.device.type, enabled=False):
        m, d = features.shape
        real = mask[:, None, :, None] > 0  # (batch, 1, L, 1)
        feature_scale = m**-0.5
        # w^T x' = (d^-1/4 w)^T x; relu features also take 1/sqrt(m) there (ReLU(c x) = c ReLU(x) for c > 0).
        w_scale = d**-0.25 if kernel == "softmax" else d**-0.25 * feature_scale
        w_t = (features.float() * w_scale).to(matmul_dtype).T
        query_proj = torch.matmul(query.to(matmul_dtype), w_t).float()  # (batch, heads, L, m)
        key_proj = torch.matmul(key.to(matmul_dtype), w_t).float()
        key_epsilon = (real * (epsilon * feature_scale)).float()  # (batch, 1, L, 1): 0 at padded keys

        if kernel == "softmax":
            # log phi(q) = w^T q' - ||q'||^2 / 2 - s_q with s_q its maximum over features: ||q'||^2 / 2 is the same
            # for every feature of a query, so it cancels in w^T q' - s_q and is never computed; and
            # 1 / sqrt(m) = exp(-log(m) / 2) joins the stabiliser.
            query_shift = query_proj.amax(dim=-1, keepdim=True).detach() + math.log(m) / 2  # (batch, heads, L, 1)
            phi_q = torch.exp(query_proj - query_shift) + epsilon * feature_scale
            # ||k'||^2 / 2 = ||k||^2 / (2 sqrt(d)), per key (batch, heads, L, 1)
            key_half_norm = torch.linalg.vector_norm(key, dim=-1, keepdim=True, dtype=torch.float32).square()
            key_half_norm = key_half_norm * (d**-0.5 / 2)
        elif kernel == "relu":
            phi_q = F.relu(query_proj) + epsilon * feature_scale
        else:
            raise ValueError(f"kernel must be 'softmax' or 'relu', got {kernel!r}.")

        if causal:
            log_k = key_proj - key_half_norm if kernel == "softmax" else None  # (batch, heads, L, m)
            numerator, normaliser = _causal_sums(
                phi_q, log_k, key_proj, value.float(), real, epsilon * feature_scale, chunk_size
            )
            return numerator / normaliser.clamp_min(TINY)

        if kernel == "softmax":
            # +inf half norms at padded keys: their log-features are -inf, so phi(k) = 0 there (with no epsilon,
            # see key_epsilon) and they never set the stabiliser.
            log_k = key_proj - key_half_norm.masked_fill(~real, float("inf"))
            stabiliser = log_k.amax(dim=(-1, -2), keepdim=True).detach()  # (batch, heads, 1, 1)
            stabiliser = torch.nan_to_num(stabiliser, neginf=0.0) + math.log(m) / 2  # -inf: no real key at all
            phi_k = torch.exp(log_k - stabiliser) + key_epsilon  # (batch, heads, L, m)
        else:
            phi_k = torch.addcmul(key_epsilon, F.relu(key_proj), real)  # padded keys contribute nothing
        value_scale = None
        if half is torch.float16:  # a scalar that cancels: phi(K)^T V <= L / sqrt(m) within fp16's range
            value_scale = torch.linalg.vector_norm(value, float("inf"), dim=(-1, -2), keepdim=True, dtype=torch.float32)
            value_scale = value_scale.clamp_min(TINY)
            v = (value / value_scale).to(matmul_dtype)
        else:
            v = value.to(matmul_dtype)
        # phi(K)^T V (batch, heads, m, d_v) and phi(Q) (phi(K)^T V) (batch, heads, L, d_v), in matmul_dtype
        key_value = torch.matmul(phi_k.to(matmul_dtype).transpose(-1, -2), v)
        numerator = torch.matmul(phi_q.to(matmul_dtype), key_value)
        normaliser = torch.matmul(phi_q, phi_k.sum(dim=-2)[..., None])  # phi(Q) (phi(K)^T 1) (batch, heads, L, 1)
        if half is None:
            return numerator / normaliser.clamp_min(TINY)
        if value_scale is not None:
            normaliser = normaliser / value_scale
        # A query with no real key has numerator and normaliser 0: divide by 1, not by TINY, whose gradient 1 / TINY
        # overflows the half type on its way back into the numerator's matmul (NaN). The fp32 quotient of a
        # half-type numerator is one kernel.
        return numerator / normaliser.masked_fill(normaliser <= TINY, 1.0)


def _causal_sums(phi_q, log_k, key_proj, v, real, key_epsilon, chunk_size):
    """Numerator and normaliser of causal FAVOR+ by prefix sums, with memory linear in L.

    For query i: sum_{j <= i} phi(q_i)^T phi_i(k_j) v_j with phi_i(k_j) = (exp(log_k_j - R_i) + eps) / sqrt(m), where
    R_i is the key stabiliser of the prefix (the largest log-feature of the real keys j <= i): the same value as
    bidirectional FAVOR+ run on the prefix alone, and nothing after i takes part.

    - The epsilon part is eps / sqrt(m) (sum_f phi(q_i)_f) (sum_{j <= i} v_j): running sums of v and of the mask.
    - The exponential part is split per key as exp(log_k_j - t_j) exp(t_j - R_i), t_j the key's own maximum. Within a
      chunk of C positions it is the masked quadratic form (C x C weights); across chunks the running state
      S = sum_j exp(t_j - R) psi_j v_j^T (m x d_v) and z (m) are carried at the reference R of the chunk end and
      rescaled by exp(R_old - R_new) <= 1 when R grows. No (L x L) or (L x m x d_v) tensor exists.
    """
    batch, heads, seq_len, m = phi_q.shape
    keep = real.float()
    if log_k is not None:
        token_max = log_k.amax(dim=-1, keepdim=True).detach()  # t_j (batch, heads, L, 1)
        psi = torch.exp(log_k - token_max) * (m**-0.5) * keep  # (batch, heads, L, m), entries in [0, 1 / sqrt(m)]
        t = token_max.masked_fill(~real, float("-inf"))
        running = torch.cummax(t, dim=-2).values  # R_i, -inf before the first real key
        # Positions before the first real key have nothing to stabilise: give them the first real R, keeping R finite
        # and non-decreasing so that every rescaling factor exp(R_old - R_new) is <= 1.
        first = running.masked_fill(torch.isinf(running), float("inf")).amin(dim=-2, keepdim=True)
        first = torch.where(torch.isfinite(first), first, 0.0)
        running = torch.where(torch.isinf(running), first, running)
    else:  # relu: features need no stabiliser; key_proj carries the 1 / sqrt(m) of W's scale
        psi = F.relu(key_proj) * keep
        t = torch.zeros_like(keep).expand(batch, heads, seq_len, 1)
        running = t

    # Epsilon part: running sums over real positions, (batch, heads, L, d_v) and (batch, heads, L, 1).
    query_sum = phi_q.sum(dim=-1, keepdim=True) * key_epsilon
    numerator = query_sum * torch.cumsum(v * keep, dim=-2)
    normaliser = query_sum * torch.cumsum(keep, dim=-2).expand(batch, heads, seq_len, 1)

    state = v.new_zeros(batch, heads, m, v.shape[-1])  # S
    state_sum = v.new_zeros(batch, heads, m, 1)  # z
    reference = running[..., :1, :]  # R of the state, (batch, heads, 1, 1)
    numerator_chunks, normaliser_chunks = [], []
    for start in range(0, seq_len, chunk_size):
        chunk = slice(start, start + chunk_size)
        q_c, psi_c, v_c = phi_q[..., chunk, :], psi[..., chunk, :], v[..., chunk, :]
        t_c, r_c = t[..., chunk, :], running[..., chunk, :]
        size = q_c.shape[-2]
        # Earlier chunks: phi(q_i)^T S, moved from the state's reference to R_i.
        carried = torch.exp(reference - r_c)  # (batch, heads, C, 1), <= 1
        num_c = torch.matmul(q_c, state) * carried
        den_c = torch.matmul(q_c, state_sum) * carried
        # This chunk: weights phi(q_i)^T psi_j exp(t_j - R_i) for j <= i.
        exponent = t_c.transpose(-1, -2) - r_c  # (batch, heads, C, C): t_j - R_i
        causal = torch.ones(size, size, dtype=torch.bool, device=q_c.device).tril()
        exponent = exponent.masked_fill(~causal, float("-inf"))  # before exp: a future t_j may exceed R_i
        weights = torch.matmul(q_c, psi_c.transpose(-1, -2)) * torch.exp(exponent)  # (batch, heads, C, C)
        numerator_chunks.append(num_c + torch.matmul(weights, v_c))
        normaliser_chunks.append(den_c + weights.sum(dim=-1, keepdim=True))
        # Carry the chunk into the state, at the reference of its last position.
        new_reference = r_c[..., -1:, :]
        decay = torch.exp(reference - new_reference)  # <= 1
        psi_at_reference = psi_c * torch.exp(t_c - new_reference)  # (batch, heads, C, m)
        state = state * decay + torch.matmul(psi_at_reference.transpose(-1, -2), v_c)
        state_sum = state_sum * decay + psi_at_reference.sum(dim=-2)[..., None]
        reference = new_reference
    numerator = numerator + torch.cat(numerator_chunks, dim=-2)
    normaliser = normaliser + torch.cat(normaliser_chunks, dim=-2)
    return numerator, normaliser


class PerformerSelfAttention(nn.Module):
    """Multi-head self-attention by FAVOR+: head_i = D^-1 phi(Q_i) (phi(K_i)^T V_i), Q_i = X W_i^Q etc.

    The random features W (m x d_h, shared by the heads of a layer) are a persistent buffer: saved with the weights,
    never trained, redrawn by the encoder on the schedule of `config.feature_redraw_interval`. Bidirectional, or causal
    with `config.is_decoder`. There is no attention matrix, so no attention weights are returned and
    `attention_probs_dropout_prob` does not apply. With `config.recompute_feature_maps`, FAVOR+ runs under
    `torch.utils.checkpoint` (non-reentrant): backward keeps Q, K, V and W, and recomputes phi(Q) and phi(K).
    """

    def __init__(self, config: PerformerConfig, layer_idx: int):
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0:
            raise ValueError(
                f"The hidden size ({config.hidden_size}) is not a multiple of the number of attention "
                f"heads ({config.num_attention_heads})"
            )
        self.config = config
        self.layer_idx = layer_idx
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.head_size
        self.is_causal = config.is_decoder

        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.random_features = nn.Buffer(
            torch.empty(config.num_random_features, self.attention_head_size), persistent=True
        )

    def extra_repr(self) -> str:
        c = self.config
        return (
            f"m={c.num_random_features}, kernel={c.kernel}, orthogonal={c.orthogonal_features}, causal={self.is_causal}"
        )

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Replace W by a fresh draw (in place: the buffer keeps its device and dtype)."""
        c = self.config
        fresh = draw_random_features(
            c.num_random_features, self.attention_head_size, c.orthogonal_features, c.orthogonal_row_norms, generator
        )
        self.random_features.copy_(fresh)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        random_features: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, None]:
        """
        Args:
            hidden_states: (batch, L, d).
            attention_mask: (batch, L), 1.0 for real tokens and 0.0 for padding.
            random_features: W (m x d_h) to use instead of the buffer: the encoder passes a snapshot of it to a
                checkpointed layer, whose backward re-runs this forward.
        Returns:
            the attention output (batch, L, d) in hidden_states' dtype, and None (no attention weights).
        """
        batch, seq_len, _ = hidden_states.shape
        hidden_shape = (batch, seq_len, self.num_attention_heads, self.attention_head_size)
        query = self.query(hidden_states).view(hidden_shape).transpose(1, 2)  # (batch, heads, L, d_h)
        key = self.key(hidden_states).view(hidden_shape).transpose(1, 2)
        value = self.value(hidden_states).view(hidden_shape).transpose(1, 2)
        settings = {
            "kernel": self.config.kernel,
            "epsilon": self.config.kernel_epsilon,
            "causal": self.is_causal,
            "chunk_size": self.config.causal_chunk_size,
            "feature_dtype": getattr(torch, self.config.feature_map_dtype),
        }
        if random_features is None:
            random_features = self.random_features
        # CODEPATH: `recompute_feature_maps=True` (opt-in; no shipped config sets it), when gradients are recorded,
        # recomputes FAVOR+ in backward; the default, inference under no_grad and every folder saved before the
        # option keep the feature maps for backward.
        if self.config.recompute_feature_maps and torch.is_grad_enabled():
            # Backward keeps Q, K, V (and W) only, and runs FAVOR+ again for phi(Q), phi(K) and the rest: no
            # (batch, heads, L, m) tensor outlives the forward. FAVOR+ draws nothing random, so no RNG state is kept.
            # W is passed as a copy (m x d_h): a redraw between this forward and its backward (a second training
            # call first) writes the buffer in place, and the recomputation must see the W of this forward.
            output = checkpoint(
                favor_attention,
                query,
                key,
                value,
                attention_mask,
                random_features.clone(),
                use_reentrant=False,
                preserve_rng_state=False,
                **settings,
            )
        else:
            output = favor_attention(query, key, value, attention_mask, random_features, **settings)
        # (batch, heads, L, d_h) in fp32 -> (batch, L, d)
        output = output.to(value.dtype).transpose(1, 2).reshape(batch, seq_len, -1)
        return output, None


# The encoder's host copy of the count: [count, stale], stale = 1 when the device buffer must be read once.
HOST_COUNT, HOST_STALE = 0, 1


def _count_training_call(
    host_count: torch.Tensor,
    training_calls: torch.Tensor,
    random_features: list[torch.Tensor],
    redraw_interval: int,
    orthogonal: bool,
    row_norms: str,
) -> None:
    """Count one training call in `training_calls`; redraw every W in `random_features` when the count is a multiple
    of `redraw_interval` (0: never).

    The schedule is decided on the host, from `host_count` (a CPU tensor), so a CUDA model never waits for its
    device to say the count. The device buffer is read only when `host_count` is marked stale: at the first call, and
    after something other than this function wrote the buffer (`PerformerEncoder.count_training_call` marks it).
    The fresh features come from a generator seeded with the call count, so every data-parallel process draws the
    same W without communicating (DDP also broadcasts buffers, but only at the start of the next call).
    """
    count, stale = host_count.tolist()
    if stale:
        count = int(training_calls)  # written elsewhere: read it once (a sync on CUDA, once per load)
    calls = count + 1
    training_calls.fill_(calls)  # a kernel launch, no sync
    host_count.copy_(torch.tensor([calls, 0]))
    if redraw_interval == 0 or calls % redraw_interval != 0:
        return
    generator = torch.Generator().manual_seed(calls)
    for features in random_features:
        m, d = features.shape
        fresh = draw_random_features(m, d, orthogonal, row_norms, generator)
        # non_blocking: from pageable host memory the copy is staged before it returns, and it does not wait for
        # the device to finish its queue (a blocking copy would, at every redraw).
        features.copy_(fresh, non_blocking=True)


def _count_training_call_op():
    """`_count_training_call` as a custom op: opaque to torch.compile, which would otherwise break the graph at the
    host-side schedule (fullgraph=True refuses to), and run as is, in eager and compiled code alike."""
    namespace = torch.ops.linformer_hf
    if hasattr(namespace, "performer_training_call"):  # defined already: by the package, or by a copy of this file
        return namespace.performer_training_call
    op = torch.library.custom_op(
        "linformer_hf::performer_training_call", mutates_args=("host_count", "training_calls", "random_features")
    )(_count_training_call)
    op.register_fake(lambda *args: None)
    return op


count_training_call_op = _count_training_call_op()


# Copied from linformer_hf.models.modeling_linformer.LinformerAttention with Linformer->Performer
class PerformerAttention(nn.Module):
    """Performer self-attention followed by RoBERTa's output block (dense, dropout, residual, LayerNorm)."""

    def __init__(self, config: PerformerConfig, layer_idx: int):
        super().__init__()
        self.self = PerformerSelfAttention(config, layer_idx)
        self.output = RobertaSelfOutput(config)

    def forward(self, hidden_states, attention_mask, **kwargs):
        attention_output, attn_weights = self.self(hidden_states, attention_mask, **kwargs)
        return self.output(attention_output, hidden_states), attn_weights


class PerformerLayer(GradientCheckpointingLayer):
    """A RoBERTa layer with FAVOR+ self-attention."""

    def __init__(self, config: PerformerConfig, layer_idx: int):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward  # as RoBERTa: 0 = the whole sequence at once
        self.attention = PerformerAttention(config, layer_idx)
        self.intermediate = RobertaIntermediate(config)
        self.output = RobertaOutput(config)

    def forward(self, hidden_states, attention_mask, **kwargs):
        attention_output, _ = self.attention(hidden_states, attention_mask, **kwargs)
        # (batch, L, d); the feed-forward may run in chunks along the sequence to bound its (L x d_ff) activations
        return apply_chunking_to_forward(self.feed_forward_chunk, self.chunk_size_feed_forward, 1, attention_output)

    def feed_forward_chunk(self, attention_output):
        return self.output(self.intermediate(attention_output), attention_output)


class PerformerEncoder(nn.Module):
    """The stack of Performer layers; owns the redraw schedule of the random features.

    The count of training forward calls is a persistent buffer (`training_calls`), so a model saved mid-training
    and loaded again redraws on the same steps. Counting and redrawing happen here, once per model call and before
    any layer runs; a checkpointed layer, which re-runs in the backward pass, is given a copy of its W, so it re-runs
    with the features of its forward even when a later call has redrawn them.

    The count also lives on the host, in a CPU tensor that `.to(device)` leaves in place and the state dict does not
    hold: deciding whether a call redraws then never reads the device, so a training step on CUDA has no
    host-device sync, and under torch.compile the schedule is data, not a Python branch to guard on.
    """

    def __init__(self, config: PerformerConfig):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([PerformerLayer(config, i) for i in range(config.num_hidden_layers)])
        self.training_calls = nn.Buffer(torch.zeros((), dtype=torch.long), persistent=True)
        # [count, stale]: stale, so the first call reads the buffer. On the CPU by name: from_pretrained builds the
        # model under a meta default device.
        self.host_count = torch.tensor([0, 1], dtype=torch.long, device="cpu")
        # (_version, data_ptr) of the buffer as the last eager count left it: any other write (a hand-set count, a
        # state dict loaded in place, a replaced buffer) changes one of them. Read here, outside the custom op, since
        # torch releases differ in whether the op's own call bumps the version (2.11 does: a sync every call).
        self._counted_buffer: tuple[int, int] | None = None
        # Compiled calls skip that check; a state dict loaded in place is still seen.
        self.register_load_state_dict_post_hook(lambda module, keys: module.host_count.__setitem__(HOST_STALE, 1))

    @torch.no_grad()
    def count_training_call(self) -> None:
        """Count one training call; redraw every layer's features when the schedule says so."""
        interval = self.config.feature_redraw_interval
        eager = not torch.compiler.is_compiling()
        if eager and self._counted_buffer != (self.training_calls._version, self.training_calls.data_ptr()):
            self.host_count[HOST_STALE] = 1
        # CODEPATH: `freeze_features=True` or `feature_redraw_interval=None` never redraw (interval 0); every other
        # Performer (the default: every 1000 training calls, the paper's schedule) redraws on its interval.
        redraw_interval = 0 if interval is None or self.config.freeze_features else interval
        count_training_call_op(
            self.host_count,
            self.training_calls,
            [layer.attention.self.random_features for layer in self.layer],
            redraw_interval,
            self.config.orthogonal_features,
            self.config.orthogonal_row_norms,
        )
        if eager:
            self._counted_buffer = (self.training_calls._version, self.training_calls.data_ptr())

    def shared_layer_inputs(self) -> dict:
        """What every layer takes from the encoder besides its input: nothing (as the Linformer's encoder names it,
        for code that calls one layer alone: `layer(hidden_states, mask, **encoder.shared_layer_inputs())`)."""
        return {}

    def forward(self, hidden_states, attention_mask, **kwargs) -> BaseModelOutput:
        if self.training:
            self.count_training_call()
        for layer_module in self.layer:
            if layer_module.gradient_checkpointing and self.training and torch.is_grad_enabled():
                # A checkpointed layer re-runs in backward and would read W then, after a later training call (two
                # calls before one backward) may have redrawn it in place: it gets a copy of this call's W (m x d_h)
                # as an input, which the checkpoint keeps for its re-run.
                features = layer_module.attention.self.random_features.clone()
                hidden_states = layer_module(hidden_states, attention_mask, random_features=features, **kwargs)
            else:
                hidden_states = layer_module(hidden_states, attention_mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


@auto_docstring(
    custom_intro="""
    The base class of every Performer model: RoBERTa's weight names and init, plus the random features W (drawn where a
    checkpoint has none) and their redraw count.
    """
)
# trf-ignore: TRF013 (the family's base class: each model's own __init__ calls post_init once its modules exist)
class PerformerPreTrainedModel(PreTrainedModelCompat, RobertaPreTrainedModel):
    config_class = PerformerConfig
    config: PerformerConfig
    base_model_prefix = "roberta"  # as RoBERTa (and XLM-R, CamemBERT): RoBERTa checkpoints map key for key
    supports_gradient_checkpointing = True
    # FAVOR+ is its own computation: there is no score matrix for an attention backend (sdpa, flash, flex) to run.
    _supports_sdpa = False
    _supports_flash_attn = False
    _supports_flex_attn = False
    # Not a vLLM/TGI backend model: that also asks for tensor-parallel plans and logits slicing.
    _supports_attention_backend = False
    _no_split_modules = ["RobertaEmbeddings", "PerformerLayer"]
    _can_record_outputs = {"hidden_states": PerformerLayer}  # no attention weights: FAVOR+ forms no (L x L) matrix

    def __init__(self, config: PerformerConfig, *inputs, **kwargs):
        # A config checks every setting when it is built, but one changed afterwards (from_pretrained's keyword
        # overrides, an assignment) only has each field's type checked: the checks across fields run again before
        # any weight is made.
        config.validate()
        super().__init__(config, *inputs, **kwargs)

    def _check_and_adjust_attn_implementation(self, attn_implementation, is_init_check=False, **kwargs):
        # Called by __init__, from_pretrained and set_attn_implementation: said here instead of transformers' "does
        # not support ... yet", which suggests that support may come.
        if attn_implementation is not None and attn_implementation != "eager":
            raise ValueError(
                f"Performer cannot run attn_implementation={attn_implementation!r}: FAVOR+ forms no (L x L) score "
                "matrix for an attention kernel to compute; it runs its own computation, which is linear in L. Leave "
                "attn_implementation unset (or 'eager')."
            )
        return super()._check_and_adjust_attn_implementation(attn_implementation, is_init_check, **kwargs)

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers records only the saved class in `auto_map`; a shared model must load as any head.
        self.config.auto_map = auto_map()
        return super().save_pretrained(save_directory, *args, **kwargs)

    def check_loaded_keys(self, missing_keys, unexpected_keys, mismatched_keys) -> None:
        """After from_pretrained has loaded a checkpoint: refuse saved random features W of another shape.

        W is (m, head size): a checkpoint whose W does not fit was saved under another `num_random_features` (or
        width and heads); loading it would replace the features the model was trained with by a fresh draw.
        """
        mismatched = sorted(entry for entry in mismatched_keys if entry[0].endswith("random_features"))
        if mismatched:  # said here, by name, instead of transformers' "look at the above report"
            mismatched_keys.difference_update(mismatched)
            key, saved, now = mismatched[0]
            c = self.config
            raise ValueError(
                f"The random features in {c._name_or_path or 'the checkpoint'} do not fit its config "
                f"(num_random_features={c.num_random_features}, hidden_size={c.hidden_size}, "
                f"num_attention_heads={c.num_attention_heads}): {key} is {tuple(saved)} in the weights but the config "
                f"asks for {tuple(now)}. Likely cause: one of these was edited in config.json after the model was "
                "saved; restore the values it was saved with."
            )

    @torch.no_grad()
    def _init_weights(self, module):
        """RoBERTa's init, plus a fresh draw of the random features and a zero redraw count.

        transformers runs this only for tensors a checkpoint did not provide (a new model, or a RoBERTa checkpoint
        loaded into a Performer), so saved features and a saved count are never replaced.
        """
        super()._init_weights(module)
        if isinstance(module, PerformerSelfAttention):
            c = self.config
            features = draw_random_features(
                c.num_random_features, module.attention_head_size, c.orthogonal_features, c.orthogonal_row_norms
            )
            init.copy_(module.random_features, features)
        elif isinstance(module, PerformerEncoder):
            init.zeros_(module.training_calls)


# Copied from linformer_hf.models.modeling_linformer.check_batched
def check_batched(input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None) -> None:
    """An unbatched input (input_ids of shape (L,), inputs_embeds of (L, d)) is an error naming the fix; further in it
    would fail with an index error."""
    name, given, rank = ("input_ids", input_ids, 2) if input_ids is not None else ("inputs_embeds", inputs_embeds, 3)
    if given.dim() != rank:
        shape = "(batch, L)" if rank == 2 else "(batch, L, d)"
        raise ValueError(
            f"{name} must be of shape {shape}, got {tuple(given.shape)}. Add the batch dimension of a single sequence "
            f"({name}[None]), or tokenize with return_tensors='pt'."
        )


# Copied from linformer_hf.models.modeling_linformer.check_padding_mask with Linformer->Performer
def check_padding_mask(attention_mask: torch.Tensor, input_shape: torch.Size) -> None:
    """Refuse a mask that is not the (batch, L) padding mask of 1 (token) / 0 (padding) that tokenizers return."""
    if attention_mask.shape != input_shape:
        raise ValueError(
            f"attention_mask must be a (batch, sequence_length) padding mask of shape {tuple(input_shape)}, "
            f"got shape {tuple(attention_mask.shape)}. This model takes the 2-D mask of 1 (token) / 0 (padding) "
            "that tokenizers return."
        )
    if attention_mask.dtype == torch.bool or torch.compiler.is_compiling() or torch.jit.is_tracing():
        # Compiled and traced graphs skip the value check: a data-dependent branch would break them.
        return
    if attention_mask.device.type != "cpu":
        # Reading an accelerator tensor's values is a host-device sync that stalls every call (and
        # `torch._assert_async` would abort the CUDA context rather than raise). The check runs where reading is free:
        # on the CPU, where a tokenizer's mask and any mask a user builds by hand start out.
        return
    # One elementwise pass: an additive (0 / -inf) or soft mask read as `!= 0` would silently let padding in.
    invalid = (attention_mask != 0) & (attention_mask != 1)
    if invalid.any():
        raise ValueError(
            "attention_mask must hold 1 for real tokens and 0 for padding (the mask tokenizers return; a bool mask "
            f"means True = token), but it holds {attention_mask[invalid][0].item()!r}. An additive mask (0 for "
            "tokens, -inf for padding) converts with `(mask == 0).long()`; a mask where 1 or True marks padding, "
            "with `1 - mask` or `~mask`."
        )


# Copied from linformer_hf.models.modeling_linformer.check_token_ids with Linformer->Performer
def check_token_ids(config, input_ids: torch.Tensor | None, token_type_ids: torch.Tensor | None) -> None:
    """Refuse ids the embedding tables have no row for, with the sizes, instead of an index error (CPU) or a device
    assert (GPU) inside the embedding. Checked on CPU tensors only: on an accelerator it would wait for the device on
    every forward; there the training scripts check the tokenizer against the model before any work."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return
    for name, ids, field in (
        ("input_ids", input_ids, "vocab_size"),
        ("token_type_ids", token_type_ids, "type_vocab_size"),
    ):
        if ids is None or ids.device.type != "cpu" or ids.numel() == 0:
            continue
        size, low, high = getattr(config, field), int(ids.min()), int(ids.max())
        if low < 0 or high >= size:
            raise ValueError(
                f"{name} holds {high if high >= size else low}, but the model's {field} is {size} (ids 0 to "
                f"{size - 1}): the inputs come from another tokenizer than the model's. Use the tokenizer saved with "
                f"the model"
                + ("; a single-segment model takes no token_type_ids." if field == "type_vocab_size" else ".")
            )


@auto_docstring(
    custom_intro="""
    The bare Performer encoder (or decoder, with `is_decoder=True`): RoBERTa's embeddings and pooler around a
    stack of FAVOR+ layers. Takes the (batch, L) padding mask only.
    """
)
class PerformerModel(PerformerPreTrainedModel):
    def __init__(self, config: PerformerConfig, add_pooling_layer: bool = True):
        r"""
        add_pooling_layer (`bool`, *optional*, defaults to `True`):
            Whether to add RoBERTa's pooler (a dense layer and tanh over the first token's output); the heads that read
            only the per-token outputs are built without it.
        """
        super().__init__(config)
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = RobertaEmbeddings(config)
        self.encoder = PerformerEncoder(config)
        self.pooler = RobertaPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def check_input_length(self, seq_len: int) -> None:
        """Refuse inputs longer than the position table (RoBERTa numbers positions from padding_idx + 1)."""
        longest = self.config.max_position_embeddings - (self.config.pad_token_id + 1)
        if seq_len > longest:
            raise ValueError(
                f"Input length {seq_len} exceeds the {longest} positions this model has "
                f"(max_position_embeddings={self.config.max_position_embeddings}). Truncate the input, e.g. "
                f"tokenizer(..., truncation=True, max_length={longest})."
            )

    @model_forward
    @auto_docstring
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling:
        r"""
        attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
            1 for real tokens, 0 for padding (int, float or bool with True for tokens); any other value is an error
            (checked for a mask on the CPU: reading an accelerator's mask would stall every call). Only this 2-D
            padding mask is accepted: FAVOR+ forms no (L x L) score matrix to mask.
        """
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        if encoder_hidden_states is not None or encoder_attention_mask is not None:
            raise ValueError(
                f"{type(self).__name__} is an encoder only: it has no cross-attention (`encoder_hidden_states`)."
            )
        input_shape = input_ids.shape if input_ids is not None else inputs_embeds.shape[:-1]
        check_batched(input_ids, inputs_embeds)
        self.check_input_length(input_shape[1])
        if attention_mask is not None:
            check_padding_mask(attention_mask, input_shape)
        if kwargs.get("output_attentions"):  # asked for, and the output would otherwise be None without a word
            logger.warning_once(
                "output_attentions=True: a Performer forms no (L x L) attention matrix (FAVOR+ never does), so the "
                "output's `attentions` is None."
            )

        check_token_ids(self.config, input_ids, token_type_ids)
        if position_ids is None and attention_mask is not None:
            # Positions count the tokens the mask says are real (RoBERTa's embeddings count those that are not
            # pad_token_id): padding of any id, on either side, or inputs_embeds, leaves real tokens' outputs alone.
            real = (attention_mask != 0).long()  # (batch, L)
            position_ids = torch.cumsum(real, dim=1) * real + self.config.pad_token_id
        embedding_output = self.embeddings(
            input_ids=input_ids, position_ids=position_ids, token_type_ids=token_type_ids, inputs_embeds=inputs_embeds
        )
        if attention_mask is None:
            if input_ids is not None and input_ids.device.type == "cpu":  # reads ids: a sync elsewhere, as above
                self.warn_if_padding_and_no_attention_mask(input_ids, None)
            attention_mask = torch.ones(input_shape, device=embedding_output.device)
        mask = (attention_mask != 0).to(embedding_output.dtype)  # (batch, L): 1.0 token, 0.0 padding

        encoder_outputs = self.encoder(embedding_output, mask, **kwargs)
        sequence_output = encoder_outputs.last_hidden_state
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=pooled_output)


# Task heads: RoBERTa's heads (modules, forwards, losses) around the bare Performer. Their losses do not take
# `num_items_in_batch`, so Trainer must scale them for gradient accumulation itself (`accepts_loss_kwargs = False`);
# the LM head's loss does take it.


# Copied from linformer_hf.models.modeling_linformer.LinformerForMaskedLM with Linformer->Performer
@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's masked language modeling head on top.
    """
)
class PerformerForMaskedLM(PerformerPreTrainedModel):
    _tied_weights_keys = tied_weights(
        {"lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight", "lm_head.decoder.bias": "lm_head.bias"}
    )

    def __init__(self, config: PerformerConfig):
        super().__init__(config)
        self.roberta = PerformerModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        logits_for_labels_only: bool = False,
        **kwargs,
    ) -> MaskedLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            Token ids to predict at masked positions, -100 elsewhere. The loss is the mean over labelled tokens, or
            their sum divided by `num_items_in_batch` when given (as `Trainer` does under gradient accumulation).
        logits_for_labels_only (`bool`, defaults to `False`):
            A pretraining speed-up: run the LM head only where `labels != -100` (about 15% of positions under MLM)
            and return logits of shape `(num_labelled, vocab_size)` in that order. The loss is unchanged. By default
            logits cover every position, as RoBERTa's.
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        sequence_output = outputs.last_hidden_state  # (batch, L, d)
        if logits_for_labels_only:
            if labels is None:
                raise ValueError("`logits_for_labels_only=True` needs `labels` to say which positions to score.")
            labelled = labels != -100
            sequence_output, labels = sequence_output[labelled], labels[labelled]  # (num_labelled, d), (num_labelled,)
        logits = self.lm_head(sequence_output)  # (batch, L, vocab) or (num_labelled, vocab)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


@auto_docstring(
    custom_intro="""
    Next-token prediction with causal FAVOR+ and RoBERTa's LM head (needs `is_decoder=True`).

    There is no key/value cache: `generate` re-reads the whole prefix at every step (`use_cache=False`).
    """
)
class PerformerForCausalLM(PerformerPreTrainedModel, GenerationMixin):
    _tied_weights_keys = tied_weights(
        {"lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight", "lm_head.decoder.bias": "lm_head.bias"}
    )

    def __init__(self, config: PerformerConfig):
        if not config.is_decoder:
            raise ValueError(
                f"{type(self).__name__} needs `is_decoder=True` in its config: a bidirectional encoder sees the "
                "tokens it is asked to predict, so next-token training would learn to copy them. Set it: "
                "`PerformerConfig(..., is_decoder=True)`, or `from_pretrained(path, is_decoder=True)` for a saved "
                "model (its encoder's weights then attend causally)."
            )
        super().__init__(config)
        self.roberta = PerformerModel(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings):
        self.lm_head.decoder = new_embeddings

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No cache: every step reads the whole prefix. No position_ids either: generate counts from 0, while RoBERTa's
        # embeddings number positions themselves from padding_idx + 1 (skipping padding).
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> CausalLMOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The input ids (-100 where no loss is wanted); the loss shifts them so position i predicts token i + 1.
        """
        kwargs.pop("use_cache", None)  # no cache to use: every call reads the whole prefix
        kwargs.pop("past_key_values", None)
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (batch, L, vocab)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size, **kwargs)
        return CausalLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


# Copied from linformer_hf.models.modeling_linformer.LinformerForSequenceClassification with Linformer->Performer
@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's sequence classification/regression head on top (a linear layer over the first
    token's output), e.g. for GLUE tasks.
    """
)
class PerformerForSequenceClassification(PerformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: PerformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = PerformerModel(config, add_pooling_layer=False)
        self.classifier = RobertaClassificationHead(config)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            Class indices (`num_labels > 1`), or targets of a regression (`num_labels == 1`) or of a multi-label
            classification (float, `(batch_size, num_labels)`), as `config.problem_type` says or infers.
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(outputs.last_hidden_state)  # (batch, num_labels), from the first token
        loss = None
        if labels is not None:
            loss = self.loss_function(labels, logits, self.config)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


# Copied from linformer_hf.models.modeling_linformer.LinformerForMultipleChoice with Linformer->Performer
@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's multiple choice head on top (a linear layer over the pooled output and a
    softmax), e.g. for RocStories/SWAG tasks.
    """
)
class PerformerForMultipleChoice(PerformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: PerformerConfig):
        super().__init__(config)
        self.roberta = PerformerModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> MultipleChoiceModelOutput:
        r"""
        input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`):
            Indices of input sequence tokens in the vocabulary, one sequence per choice.
        token_type_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
            Segment token indices, one sequence per choice.
        labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            The index of the right choice, in `[0, num_choices - 1]`.
        position_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
            Indices of positions of each input sequence token in the position embeddings.
        inputs_embeds (`torch.Tensor` of shape `(batch_size, num_choices, sequence_length, hidden_size)`, *optional*):
            An embedded representation instead of `input_ids`, one sequence per choice.
        """
        num_choices = input_ids.shape[1] if input_ids is not None else inputs_embeds.shape[1]
        # (batch, num_choices, L) -> (batch * num_choices, L): every choice runs as a sequence of its own
        flat_input_ids = input_ids.view(-1, input_ids.size(-1)) if input_ids is not None else None
        flat_position_ids = position_ids.view(-1, position_ids.size(-1)) if position_ids is not None else None
        flat_token_type_ids = token_type_ids.view(-1, token_type_ids.size(-1)) if token_type_ids is not None else None
        flat_attention_mask = attention_mask.view(-1, attention_mask.size(-1)) if attention_mask is not None else None
        flat_inputs_embeds = (
            inputs_embeds.view(-1, inputs_embeds.size(-2), inputs_embeds.size(-1))
            if inputs_embeds is not None
            else None
        )
        outputs = self.roberta(
            flat_input_ids,
            position_ids=flat_position_ids,
            token_type_ids=flat_token_type_ids,
            attention_mask=flat_attention_mask,
            inputs_embeds=flat_inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        pooled_output = self.dropout(outputs.pooler_output)  # (batch * num_choices, d)
        reshaped_logits = self.classifier(pooled_output).view(-1, num_choices)  # (batch, num_choices)
        loss = None
        if labels is not None:
            loss = CrossEntropyLoss()(reshaped_logits, labels.to(reshaped_logits.device))
        return MultipleChoiceModelOutput(
            loss=loss, logits=reshaped_logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


# Copied from linformer_hf.models.modeling_linformer.LinformerForTokenClassification with Linformer->Performer
@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's token classification head on top (a linear layer over every token's output), e.g.
    for named-entity recognition.
    """
)
class PerformerForTokenClassification(PerformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: PerformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = PerformerModel(config, add_pooling_layer=False)
        classifier_dropout = (
            config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        )
        self.dropout = nn.Dropout(classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        r"""
        labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The class of every token, in `[0, num_labels - 1]`; -100 where no loss is wanted (padding).
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (batch, L, num_labels)
        loss = None
        if labels is not None:
            loss = CrossEntropyLoss()(logits.view(-1, self.num_labels), labels.to(logits.device).view(-1))
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


# Copied from linformer_hf.models.modeling_linformer.LinformerForQuestionAnswering with Linformer->Performer
@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's extractive question answering head on top (a linear layer over every token's
    output computing span start and end logits), e.g. for SQuAD.
    """
)
class PerformerForQuestionAnswering(PerformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: PerformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = PerformerModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    @auto_docstring
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        r"""
        start_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            The position of the first token of the answer span; positions outside the input are not in the loss.
        end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
            The position of the last token of the answer span; positions outside the input are not in the loss.
        """
        outputs = self.roberta(
            input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        logits = self.qa_outputs(outputs.last_hidden_state)  # (batch, L, 2)
        start_logits, end_logits = logits.split(1, dim=-1)
        start_logits = start_logits.squeeze(-1).contiguous()  # (batch, L)
        end_logits = end_logits.squeeze(-1).contiguous()
        loss = None
        if start_positions is not None and end_positions is not None:
            loss = self.loss_function(start_logits, end_logits, start_positions, end_positions)
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# The one table of heads: Auto class name -> Performer class, one name per class (the head's own Auto class: the one
# the model card and its pipeline tag read). Registration and the saved `auto_map` derive from it.
PERFORMER_HEADS = {
    "AutoModel": PerformerModel,
    "AutoModelForMaskedLM": PerformerForMaskedLM,
    "AutoModelForCausalLM": PerformerForCausalLM,
    "AutoModelForSequenceClassification": PerformerForSequenceClassification,
    "AutoModelForTokenClassification": PerformerForTokenClassification,
    "AutoModelForQuestionAnswering": PerformerForQuestionAnswering,
    "AutoModelForMultipleChoice": PerformerForMultipleChoice,
}


# Copied from linformer_hf.models.modeling_linformer.auto_classes with Linformer->Performer
def auto_classes() -> dict[str, type]:
    """Every Auto class that loads a Performer -> the class it gives: the heads, and AutoModelForPreTraining giving the
    masked LM, as transformers maps RoBERTa's (`MODEL_FOR_PRETRAINING_MAPPING`). Registration and the saved `auto_map`
    derive from it; a head's own Auto class stays the one in `PERFORMER_HEADS`."""
    return {**PERFORMER_HEADS, "AutoModelForPreTraining": PERFORMER_HEADS["AutoModelForMaskedLM"]}


# Copied from linformer_hf.models.modeling_linformer.auto_map with Linformer->Performer
def auto_map() -> dict[str, str]:
    """What `trust_remote_code=True` needs to load every head from a saved folder (file names as copied there):
    transformers records only the saved class in `auto_map`, and a family's folder must load as any of its heads."""
    module = __name__.rsplit(".", 1)[-1]
    entries = {"AutoConfig": f"{PerformerConfig.__module__.rsplit('.', 1)[-1]}.{PerformerConfig.__name__}"}
    entries.update({auto: f"{module}.{cls.__name__}" for auto, cls in auto_classes().items()})
    return entries


__all__ = [
    "PERFORMER_HEADS",
    "auto_classes",
    "auto_map",
    "draw_random_features",
    "favor_attention",
    "PerformerSelfAttention",
    "PerformerEncoder",
    "PerformerPreTrainedModel",
    "PerformerModel",
    "PerformerForMaskedLM",
    "PerformerForCausalLM",
    "PerformerForSequenceClassification",
    "PerformerForMultipleChoice",
    "PerformerForTokenClassification",
    "PerformerForQuestionAnswering",
]
