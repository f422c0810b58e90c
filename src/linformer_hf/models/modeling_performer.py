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

Everything except the self-attention (embeddings, feed-forward and output blocks, pooler, task heads and their
forwards) is RoBERTa's, imported from `transformers` and assembled once for every family of this package in
`modeling_roberta_with_attention.py`. Parameter names match RoBERTa's, so a RoBERTa checkpoint loads into a
Performer with only the random features missing (they are drawn, not learned).

Notation (the paper's): L the length of the batch, d = head size d_h, m = number of random features, W (m x d) the
random features of a layer, phi the feature map, so that softmax attention exp(q^T k / sqrt(d)) ~ phi(q)^T phi(k).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers.utils import logging

from .compat import auto_docstring, init
from .configuration_performer import PerformerConfig
from .modeling_roberta_with_attention import (
    RobertaEncoderWith,
    RobertaWithAttentionForCausalLM,
    RobertaWithAttentionForMaskedLM,
    RobertaWithAttentionForMultipleChoice,
    RobertaWithAttentionForQuestionAnswering,
    RobertaWithAttentionForSequenceClassification,
    RobertaWithAttentionForTokenClassification,
    RobertaWithAttentionModel,
    RobertaWithAttentionPreTrainedModel,
    auto_map_for,
)

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
    gives the same W everywhere.
    """
    if not orthogonal:
        return torch.randn(m, d, generator=generator)
    blocks = []
    for _ in range(math.ceil(m / d)):
        q, r = torch.linalg.qr(torch.randn(d, d, generator=generator))
        # Fix the signs QR leaves free (diag(R) > 0): without it Q is not uniformly distributed (Haar), and the
        # features are biased.
        q = q * torch.sign(torch.diagonal(r))[None, :]
        blocks.append(q.T)  # d orthonormal rows
    w = torch.cat(blocks)[:m]  # (m, d)
    if row_norms == "chi":
        lengths = torch.randn(m, d, generator=generator).norm(dim=1)
    elif row_norms == "sqrt_d":
        lengths = torch.full((m,), math.sqrt(d))
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
) -> torch.Tensor:
    """FAVOR+: D^-1 phi(Q) (phi(K)^T V) with D = diag(phi(Q) phi(K)^T 1), in fp32 whatever the autocast dtype.

    Args:
        query, key: (batch, heads, L, d); value: (batch, heads, L, d_v).
        mask: (batch, L), 1.0 for real tokens and 0.0 for padding.
        features: W, (m, d).
        kernel: `"softmax"`: phi(x) = (exp(w^T x' - ||x'||^2 / 2 - s) + epsilon) / sqrt(m) with x' = x / d^(1/4),
            so phi(q)^T phi(k) estimates exp(q^T k / sqrt(d)); `"relu"`: phi(x) = (ReLU(w^T x') + epsilon) / sqrt(m).
        causal: query i attends to keys j <= i only (prefix sums over chunks of `chunk_size` positions).
    Returns:
        (batch, heads, L, d_v) in fp32.

    The stabiliser s keeps exp from overflowing; it cancels between numerator and normaliser. Queries: the maximum
    over features of each token. Keys: the maximum over features and real positions of each (batch, head) (for
    causal attention: over the positions j <= i, so no query is stabilised by a future key), detached as constants.
    Padding is exact: phi(k) is zeroed at padded positions after the feature map, so padded keys add nothing to
    phi(K)^T V nor to the normaliser, and padded positions never set the key stabiliser.
    """
    # Under fp16 the key sums phi(K)^T V and the normaliser overflow (65504) long before L is large, and bf16 keeps
    # 8 bits of mantissa: everything here runs in fp32.
    with torch.autocast(device_type=query.device.type, enabled=False):
        q, k, v, w = query.float(), key.float(), value.float(), features.float()
        m, d = w.shape
        real = mask[:, None, :, None] > 0  # (batch, 1, L, 1)
        keep = real.float()
        data_scale = d**-0.25  # q'^T k' = q^T k / sqrt(d)
        query_proj = torch.matmul(q * data_scale, w.T)  # (batch, heads, L, m)
        key_proj = torch.matmul(k * data_scale, w.T)
        feature_scale = m**-0.5

        if kernel == "softmax":
            log_q = query_proj - (q * data_scale).pow(2).sum(-1, keepdim=True) / 2
            phi_q = torch.exp(log_q - log_q.amax(dim=-1, keepdim=True).detach()) + epsilon
            log_k = key_proj - (k * data_scale).pow(2).sum(-1, keepdim=True) / 2  # (batch, heads, L, m)
        elif kernel == "relu":
            phi_q = F.relu(query_proj) + epsilon
            log_k = None
        else:
            raise ValueError(f"kernel must be 'softmax' or 'relu', got {kernel!r}.")
        phi_q = phi_q * feature_scale

        if causal:
            numerator, normaliser = _causal_sums(phi_q, log_k, key_proj, v, real, epsilon * feature_scale, chunk_size)
        else:
            if log_k is not None:
                log_k = log_k.masked_fill(~real, float("-inf"))
                stabiliser = log_k.amax(dim=(-1, -2), keepdim=True).detach()  # (batch, heads, 1, 1)
                stabiliser = torch.where(torch.isfinite(stabiliser), stabiliser, 0.0)  # no real key at all
                phi_k = torch.exp(log_k - stabiliser) + epsilon
            else:
                phi_k = F.relu(key_proj) + epsilon
            phi_k = phi_k * feature_scale * keep  # (batch, heads, L, m): padded keys contribute nothing
            key_value = torch.matmul(phi_k.transpose(-1, -2), v)  # phi(K)^T V (batch, heads, m, d_v)
            key_sum = phi_k.sum(dim=-2)[..., None]  # phi(K)^T 1 (batch, heads, m, 1)
            numerator = torch.matmul(phi_q, key_value)  # (batch, heads, L, d_v)
            normaliser = torch.matmul(phi_q, key_sum)  # (batch, heads, L, 1)
        return numerator / normaliser.clamp_min(TINY)


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
    else:  # relu: features need no stabiliser
        psi = F.relu(key_proj) * (m**-0.5) * keep
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
    `attention_probs_dropout_prob` does not apply.
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

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor, **kwargs) -> tuple[torch.Tensor, None]:
        """
        Args:
            hidden_states: (batch, L, d).
            attention_mask: (batch, L), 1.0 for real tokens and 0.0 for padding.
        Returns:
            the attention output (batch, L, d) in hidden_states' dtype, and None (no attention weights).
        """
        batch, seq_len, _ = hidden_states.shape
        hidden_shape = (batch, seq_len, self.num_attention_heads, self.attention_head_size)
        query = self.query(hidden_states).view(hidden_shape).transpose(1, 2)  # (batch, heads, L, d_h)
        key = self.key(hidden_states).view(hidden_shape).transpose(1, 2)
        value = self.value(hidden_states).view(hidden_shape).transpose(1, 2)
        output = favor_attention(
            query,
            key,
            value,
            attention_mask,
            self.random_features,
            kernel=self.config.kernel,
            epsilon=self.config.kernel_epsilon,
            causal=self.is_causal,
            chunk_size=self.config.causal_chunk_size,
        )  # (batch, heads, L, d_h), fp32
        output = output.to(value.dtype).transpose(1, 2).reshape(batch, seq_len, -1)  # (batch, L, d)
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


class PerformerEncoder(RobertaEncoderWith):
    """RoBERTa's layer stack with FAVOR+ self-attention; owns the redraw schedule of the random features.

    The count of training forward calls is a persistent buffer (`training_calls`), so a model saved mid-training
    and loaded again redraws on the same steps. Counting and redrawing happen here, once per model call and before
    any layer runs, so gradient checkpointing (which re-runs layers in the backward pass) sees the same features.

    The count also lives on the host, in a CPU tensor that `.to(device)` leaves in place and the state dict does not
    hold: deciding whether a call redraws then never reads the device, so a training step on CUDA has no
    host-device sync, and under torch.compile the schedule is data, not a Python branch to guard on.
    """

    self_attention_class = PerformerSelfAttention

    def __init__(self, config: PerformerConfig):
        super().__init__(config)
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

    def forward(self, hidden_states, attention_mask, **kwargs):
        if self.training:
            self.count_training_call()
        return super().forward(hidden_states, attention_mask, **kwargs)


@auto_docstring(
    custom_intro="""
    The base class of every Performer model: RoBERTa's weight names and init, plus the random features W (drawn where a
    checkpoint has none) and their redraw count.
    """
)
class PerformerPreTrainedModel(RobertaWithAttentionPreTrainedModel):
    config_class = PerformerConfig
    config: PerformerConfig
    # FAVOR+ is its own computation: there is no score matrix for an attention backend (sdpa, flash, flex) to run.
    _supports_sdpa = False
    _supports_flash_attn = False
    _supports_flex_attn = False

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


@auto_docstring(
    custom_intro="""
    The bare Performer encoder (or decoder, with `is_decoder=True`): RoBERTa's embeddings and pooler around a
    stack of FAVOR+ layers. Takes the (batch, L) padding mask only.
    """
)
class PerformerModel(PerformerPreTrainedModel, RobertaWithAttentionModel):
    encoder_class = PerformerEncoder


# Task heads: RoBERTa's modules and forwards (built in modeling_roberta_with_attention) around a PerformerModel.


@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's masked language modeling head on top.
    """
)
class PerformerForMaskedLM(PerformerPreTrainedModel, RobertaWithAttentionForMaskedLM):
    base_model_class = PerformerModel


@auto_docstring(
    custom_intro="""
    Next-token prediction with causal FAVOR+ (needs `is_decoder=True`).
    """
)
class PerformerForCausalLM(PerformerPreTrainedModel, RobertaWithAttentionForCausalLM):
    base_model_class = PerformerModel


@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's sequence classification/regression head on top (a linear layer over the first
    token's output), e.g. for GLUE tasks.
    """
)
class PerformerForSequenceClassification(PerformerPreTrainedModel, RobertaWithAttentionForSequenceClassification):
    base_model_class = PerformerModel


@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's multiple choice head on top (a linear layer over the pooled output and a
    softmax), e.g. for RocStories/SWAG tasks.
    """
)
class PerformerForMultipleChoice(PerformerPreTrainedModel, RobertaWithAttentionForMultipleChoice):
    base_model_class = PerformerModel


@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's token classification head on top (a linear layer over every token's output), e.g.
    for named-entity recognition.
    """
)
class PerformerForTokenClassification(PerformerPreTrainedModel, RobertaWithAttentionForTokenClassification):
    base_model_class = PerformerModel


@auto_docstring(
    custom_intro="""
    The Performer model with RoBERTa's extractive question answering head on top (a linear layer over every token's
    output computing span start and end logits), e.g. for SQuAD.
    """
)
class PerformerForQuestionAnswering(PerformerPreTrainedModel, RobertaWithAttentionForQuestionAnswering):
    base_model_class = PerformerModel


# The one table of heads: Auto class name -> Performer class. Registration and the saved `auto_map` derive from it.
PERFORMER_HEADS = {
    "AutoModel": PerformerModel,
    "AutoModelForMaskedLM": PerformerForMaskedLM,
    "AutoModelForCausalLM": PerformerForCausalLM,
    "AutoModelForSequenceClassification": PerformerForSequenceClassification,
    "AutoModelForTokenClassification": PerformerForTokenClassification,
    "AutoModelForQuestionAnswering": PerformerForQuestionAnswering,
    "AutoModelForMultipleChoice": PerformerForMultipleChoice,
}


def auto_map() -> dict[str, str]:
    """What `trust_remote_code=True` needs to load every head from a saved folder (file names as copied there)."""
    return auto_map_for(PerformerConfig, PERFORMER_HEADS)


__all__ = [
    "PERFORMER_HEADS",
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
