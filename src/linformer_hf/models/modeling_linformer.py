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
"""PyTorch Linformer: RoBERTa with low-rank self-attention (Wang et al., 2020).

The whole model in one file, laid out as transformers lays out a model's flat `modeling_<model>.py`: the attention
(projections E, F, the self-attention), then the blocks built around it (attention block, layer, encoder), the
pretrained base class, the bare model and the task heads. `LinformerConfig` reaches the attention along
`LinformerModel` -> `LinformerEncoder` -> `LinformerLayer` -> `LinformerAttention` -> `LinformerSelfAttention`, all
below. Where transformers' generated files copy the parent model's code, this file imports RoBERTa's building blocks
that are unchanged (embeddings, attention output block, feed-forward, pooler, LM and classification heads, init):
the remote code of a saved folder runs on every transformers release from 4.57 on, and each release's own RoBERTa
blocks are the ones that fit it. The heads' forwards are RoBERTa's, written out here around `LinformerModel`.
Parameter names match RoBERTa's (`roberta.encoder.layer.0.attention.self.query.weight`, ...), so a RoBERTa checkpoint
loads into a Linformer with only the projections E, F missing.

Notation (the paper's): n = `config.max_sequence_length`, k = projected length of a layer, L <= n the length of
the current batch, d = hidden size, d_h = head size, H = number of heads.

This file is copied beside saved weights with `configuration_linformer.py` and `compat.py` (sibling imports), so it
imports only `torch`, `transformers` and those; what differs between transformers releases comes from `compat.py`.
"""

import re
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn import CrossEntropyLoss
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPooling,
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

from .compat import (
    PreTrainedModelCompat,
    attention_function,
    auto_docstring,
    init,
    model_forward,
    tied_weights,
)
from .configuration_linformer import LinformerConfig

logger = logging.get_logger(__name__)

# State-dict keys of E and F: every LinformerProjection is held in an attribute named *_projection.
PROJECTION_KEY = re.compile(r"_projection\.weight$")


def neighbour_average_projection(n: int, k: int) -> torch.Tensor:
    """E of shape (k, n) whose row j averages the j-th of k contiguous bins of positions.

    Bin j covers positions floor(j n / k) .. floor((j + 1) n / k) - 1 (size n / k when k divides n), with weight
    1 / bin size: what mean pooling computes, but learnable. It keeps locality (a compressed row stands for a stretch
    of neighbouring tokens, where a random E mixes all n positions into every row), it is sparse, so bins entirely
    past the end of a short input are masked out, and with k = n it is the identity.
    """
    if not 0 < k <= n:
        raise ValueError(f"A projection from n={n} to k={k} rows needs 0 < k <= n.")
    bounds = [(j * n) // k for j in range(k + 1)]
    matrix = torch.zeros(k, n)
    for j in range(k):
        start, end = bounds[j], bounds[j + 1]
        matrix[j, start:end] = 1.0 / (end - start)
    return matrix


def strided_projection(n: int, k: int) -> torch.Tensor:
    """E of shape (k, n) whose row j sums positions j, j + k, j + 2k, ...: 1 where p mod k = j, else 0.

    Its first k columns are the identity: an input of L <= k tokens uses only them, so every token keeps a slot of its
    own and the layer computes full attention, exactly (slots past the end of the input are masked out). Longer
    inputs fold positions k apart into one slot. For classifiers converted from full attention whose inputs are
    mostly shorter than k (sentence pairs), where neighbour averaging merges adjacent tokens from the start.
    """
    if not 0 < k <= n:
        raise ValueError(f"A projection from n={n} to k={k} rows needs 0 < k <= n.")
    positions = torch.arange(n)
    return (positions[None, :] % k == torch.arange(k)[:, None]).float()


class LinformerProjection(nn.Module):
    """One sequence-axis projection of the paper, E (or F): compresses L <= n rows to at most k rows.

    - `"linear"`: a learned matrix E of shape (k, n); an input of length L uses its first L columns.
    - `"mean"` / `"max"`: pooling over consecutive bins of s = n / k positions (no parameters).
    - `"conv"`: a learned kernel of width s applied with stride s, i.e. E with one kernel repeated on its diagonal.

    `num_heads` is H when every head has its own projection (`sharing="none"`), else 1 (broadcast over heads).
    Padded positions never contribute: their rows are zeroed (or excluded from the max) before compressing, so the
    compressed rows of real tokens are the same whatever padding follows them.
    """

    def __init__(self, kind: str, n: int, k: int, num_heads: int, frozen: bool = False):
        super().__init__()
        self.kind = kind
        self.n = n
        self.k = k
        self.num_heads = num_heads
        self.bin_size = n // k  # s, for pooling and conv
        if kind == "linear":
            shape = (num_heads, k, n)  # E
        elif kind == "conv":
            shape = (num_heads, self.bin_size)  # kernel
        else:
            shape = None
        if shape is None:
            self.weight = None
        elif frozen:
            # A persistent buffer: saved under the same key as the trainable version, never handed to an optimizer,
            # and it stays frozen after from_pretrained (which re-creates parameters, losing requires_grad=False).
            self.weight = nn.Buffer(torch.empty(shape), persistent=True)
        else:
            self.weight = nn.Parameter(torch.empty(shape))

    def extra_repr(self) -> str:
        return f"kind={self.kind}, n={self.n}, k={self.k}, num_heads={self.num_heads}"

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Compress `x` along the sequence axis.

        Args:
            x: (batch, heads or 1, L, features).
            mask: (batch, L), 1.0 for real tokens and 0.0 for padding, in x's dtype.
        Returns:
            (batch, heads, k', features) with k' = k for "linear" and ceil(L / s) <= k for the pooled kinds.
        """
        seq_len = x.shape[-2]
        x = x * mask[:, None, :, None]  # padded rows contribute nothing, to any kind of projection
        if self.kind == "linear":
            # (heads, k, L) @ (batch, heads, L, features) -> (batch, heads, k, features)
            return torch.matmul(self.weight[:, :, :seq_len], x)

        x_bins, mask_bins = self._split_into_bins(x, mask)  # (b, h, bins, s, f), (b, 1, bins, s, 1)
        if self.kind == "mean":
            count = mask_bins.sum(dim=3)  # (batch, 1, bins, 1)
            return x_bins.sum(dim=3) / count.clamp(min=1)
        if self.kind == "max":
            x_bins = x_bins.masked_fill(mask_bins == 0, torch.finfo(x.dtype).min)
            pooled = x_bins.amax(dim=3)
            # A bin of padding only has no maximum: zero it (the slot is masked out of the softmax anyway).
            return pooled.masked_fill(mask_bins.sum(dim=3) == 0, 0.0)
        # conv: (batch, h, bins, s, f) * (h, 1, s, 1) summed over s
        return (x_bins * self.weight[:, None, :, None]).sum(dim=3)

    def compress_input(self, x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """E X and E 1 for a projection shared by all heads (`num_heads == 1`, not max pooling): the fast path.

        The padding mask is folded into E (its columns at padded positions are zeroed), which for the linear kind
        costs k L per sequence instead of masking X (L d).

        Args:
            x: (batch, L, d), the layer input.
            mask: (batch, L), 1.0 for real tokens and 0.0 for padding, in x's dtype.
        Returns:
            E X (batch, k', d) and E 1 (batch, k', 1), the row sums of the masked E that multiply a bias.
        """
        if self.kind == "linear":
            masked = self.weight[0, :, : x.shape[-2]] * mask[:, None, :]  # (batch, k, L)
            return torch.bmm(masked, x), masked.sum(dim=-1, keepdim=True)
        # Pooling and conv: each row of E is one bin; compressing the mask itself gives E 1.
        compressed = self(x[:, None], mask)[:, 0]  # (batch, k', d)
        row_sums = self(mask[:, None, :, None], mask)[:, 0]  # (batch, k', 1)
        return compressed, row_sums

    def _split_into_bins(self, x: torch.Tensor, mask: torch.Tensor):
        s = self.bin_size
        # To a whole number of bins, ceil(L / s). Padded unconditionally and split with -1 bins, no branch on L: an
        # exported graph (torch.export, ONNX) traced at one L then stays valid for every L.
        pad = -x.shape[-2] % s
        x = F.pad(x, (0, 0, 0, pad))
        mask = F.pad(mask, (0, pad))
        x_bins = x.unflatten(-2, (-1, s))  # (batch, heads, bins, s, features)
        mask_bins = mask[:, None, :, None].unflatten(-2, (-1, s))  # (batch, 1, bins, s, 1)
        return x_bins, mask_bins

    def reached_slots(self, mask: torch.Tensor) -> torch.Tensor:
        """Which compressed rows receive at least one real token.

        A row that no real token reaches (identity E past the end of a short input, a pooling bin of padding only)
        must be masked out of the softmax rather than left as a zero key that still takes attention weight.

        Args:
            mask: (batch, L) of 0.0 / 1.0.
        Returns:
            bool tensor (batch, heads or 1, k').
        """
        seq_len = mask.shape[-1]
        if self.kind == "linear":
            # |E| (heads, k, L) times the 0/1 mask: a sum of non-negative terms, > 0 iff a real token has E != 0.
            # Detached: a boolean needs no gradient, so autograd need not record the product.
            magnitude = self.weight[:, :, :seq_len].detach().abs()
            # (batch, L) @ (heads, L, k) -> (heads, batch, k): one matrix product (an einsum adds a dozen reshapes),
            # batch before k so that the k slots stay contiguous (SDPA's fused kernels take no other mask layout)
            return (torch.matmul(mask, magnitude.transpose(1, 2)) > 0).transpose(0, 1)
        padded = F.pad(mask, (0, -seq_len % self.bin_size))
        return padded.unflatten(-1, (-1, self.bin_size)).sum(-1)[:, None] > 0


class LinearCompressionInputs(NamedTuple):
    """What a layer's linear compression needs that depends only on the padding mask and on its parameters (E, F
    and the key/value biases), not on the layer input X: made once per forward for every layer by
    `prepare_linear_compressions`.

    - `projection`: [E; F] (2k x L), or E (k x L) when E = F, the first L columns.
    - `columns_mask`: the padding mask as (batch, 1, L), to zero the columns of E at padded positions.
    - `key_bias_correction`, `value_bias_correction`: (batch, k, d), the bias terms (E 1) b^K and (F 1) b^V, with
      E 1 the row sums over real tokens, to add to (E X) W^K and (F X) W^V; or (E 1 - 1) b^K and (F 1 - 1) b^V when
      `maps_add_bias`.
    - `slot_mask`: (batch, 1, 1, k), 0 where a real token reaches slot j of E and of F, the dtype's minimum elsewhere.
    - `maps_add_bias`: whether the key and value maps must be called as modules (which add b once per row): some
      map is not a plain `nn.Linear` (a dynamically quantised Linear, whose weight and bias are methods, a wrapped
      one) or has hooks. Plain maps are applied as their weight alone, so b enters once, through the corrections: one
      bias add and one bias gradient fewer per map.

    The tensors come first and the flag last: a layer is handed the tensors as positional arguments.
    """

    projection: torch.Tensor
    columns_mask: torch.Tensor
    key_bias_correction: torch.Tensor
    value_bias_correction: torch.Tensor
    slot_mask: torch.Tensor
    maps_add_bias: bool


def _is_plain_linear(module: nn.Module) -> bool:
    """An `nn.Linear` itself, without hooks: its map is x W^T + b, read from its parameters."""
    return type(module) is nn.Linear and not (module._forward_hooks or module._forward_pre_hooks)


def _bias_tensor(linear: nn.Module) -> torch.Tensor | None:
    """The bias b of a key or value map (a method on a dynamically quantised Linear), or None."""
    return linear.bias() if callable(linear.bias) else linear.bias


def _bias_of(linear: nn.Module, like: torch.Tensor, width: int) -> torch.Tensor:
    """The bias b of a key or value map, zeros if it has none."""
    bias = _bias_tensor(linear)
    return like.new_zeros(width) if bias is None else bias


def prepare_linear_compressions(
    layer_projections: list[list[LinformerProjection]],
    key_value_maps: list[tuple[nn.Module, nn.Module]],
    mask: torch.Tensor,
    width: int,
) -> list[LinearCompressionInputs]:
    """`LinearCompressionInputs` of many layers at once: a few ops per model forward instead of a dozen per layer.

    The [E; F] of all layers are stacked into one (R x L) matrix (R = the sum of their rows), so one matrix product
    with the mask gives every row sum, one more every reached slot, one `where` every slot mask, and one product
    with the stacked biases every bias correction; each layer then takes views of these. All is differentiable
    (but the booleans): E, F and b get the same gradients as from a per-layer computation. Nothing of size
    (batch, R, L) is formed: the results are (batch, R) and (batch, 2k, d) per layer, as the compressed keys and values.

    Args:
        layer_projections: per layer, [E] (E = F) or [E, F], linear and shared by all heads (`num_heads == 1`), all of
            the same k; a single entry when every layer shares it (`sharing="layerwise"`).
        key_value_maps: per layer, its key and value maps (`nn.Linear` or a replacement called alike).
        mask: (batch, L), 1.0 for real tokens and 0.0 for padding.
        width: d, the width of keys and values.
    Returns:
        one `LinearCompressionInputs` per layer (per entry of `key_value_maps`).
    """
    seq_len = mask.shape[-1]
    groups, count, k = len(layer_projections), len(layer_projections[0]), layer_projections[0][0].k
    # (1, k, n) each; the one E of sharing="layerwise" (the encoder's) may sit on another device than a layer placed
    # by a device map
    weights = [
        projection.weight if projection.weight.device == mask.device else projection.weight.to(mask.device)
        for projections in layer_projections
        for projection in projections
    ]
    # squeeze, not [0]: its backward is a view, where select's allocates and fills a (1, R, n) gradient
    stacked = torch.cat(weights, dim=1).squeeze(0)[:, :seq_len]  # (R, L), R = groups * count * k
    maps_add_bias = not all(_is_plain_linear(linear) for maps in key_value_maps for linear in maps)
    # E 1 over real tokens, for every E and F (minus the 1 b that maps called as modules add): (R, L) @ (L, batch)
    bias_scales = torch.mm(stacked, mask.T) - 1 if maps_add_bias else torch.mm(stacked, mask.T)  # (R, batch)
    # The dtype the key and value maps compute in: bf16 or fp16 under autocast (as this product), else the weights'.
    # The corrections and slot masks are made in it, so that the compressed keys and values reach SDPA in the
    # queries' dtype: with one fp32 input SDPA leaves its fused kernels for its fp32 math path (2x slower on an H100).
    compute_dtype = bias_scales.dtype
    bias_scales = bias_scales.view(groups, count, k, -1).transpose(2, 3)[..., None]  # (groups, 1 or 2, batch, k, 1)
    biases = torch.stack([_bias_of(linear, mask, width) for maps in key_value_maps for linear in maps])  # (2 layers, d)
    biases = biases.to(compute_dtype)
    # (groups, 1 or 2, batch, k, 1) * (layers, 2, 1, 1, d) -> (layers, 2, batch, k, d): (E 1) b^K, (F 1) b^V, then
    # one (batch, k, d) view each, key and value of layer 0, of layer 1, ...
    corrections = (bias_scales * biases.view(len(key_value_maps), 2, 1, 1, -1)).flatten(0, 1).unbind(0)
    # |E| 1 over real tokens: a sum of non-negative terms, > 0 iff a real token has E != 0 (detached: a boolean
    # needs no gradient). Slot j is reached when it is in E and in F: (batch, groups, 1 or 2, k) -> (groups, batch, k),
    # copied to standard strides so that every layer's slot mask has its k slots contiguous (SDPA's fused kernels take
    # no other mask layout) and the same strides whatever the number of layers, batch 1 included (a compiled layer
    # would recompile on them; `contiguous()` keeps a size-1 batch's stride as it is).
    reached = (torch.mm(mask, stacked.detach().abs().T) > 0).view(-1, groups, count, k).all(dim=2)
    reached = reached.transpose(0, 1).clone(memory_format=torch.contiguous_format)
    slot_masks = additive_slot_mask(reached[:, :, None], compute_dtype).unbind(0)  # (batch, 1, 1, k) each
    columns_mask = mask[:, None, :]  # (batch, 1, L), one view for all layers
    if groups == 1:  # one E for every layer
        projections, slot_masks = [stacked] * len(key_value_maps), slot_masks * len(key_value_maps)
    else:
        projections = stacked.split(count * k)
    return [
        LinearCompressionInputs(projection, columns_mask, key_correction, value_correction, slot_mask, maps_add_bias)
        for projection, key_correction, value_correction, slot_mask in zip(
            projections, corrections[0::2], corrections[1::2], slot_masks
        )
    ]


def additive_slot_mask(reached: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, heads or 1, k') reached slots -> the additive mask (batch, heads or 1, 1, k'): 0, or the minimum."""
    return torch.where(reached, 0.0, torch.finfo(dtype).min).to(dtype)[..., None, :]


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q (E K)^T / sqrt(d_h) + mask) (F V): attention of L queries over k' compressed slots.

    The "eager" entry of transformers' attention interface, with its calling convention: query (batch, heads, L, d_h),
    key and value (batch, heads, k', d_h), an additive mask (batch, heads or 1, 1, k'); returns the output as
    (batch, L, heads, d_h) and the contextual mapping P (batch, heads, L, k'). The softmax runs in fp32, so P sums to
    one in half precision too.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (batch, heads, L, k')
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    output = torch.matmul(F.dropout(probs, p=dropout, training=module.training), value)  # (batch, heads, L, d_h)
    return output.transpose(1, 2).contiguous(), probs


def _map_compressed(linear: nn.Module, compressed_x: torch.Tensor, bias_scale: torch.Tensor) -> torch.Tensor:
    """(E X) W + (E 1) b: the key or value map of compressed rows, through the module's own call.

    The module adds b once per row, i.e. (E X) W + 1 b; the rest, (E 1 - 1) b, is added here (`bias_scale` is
    E 1 - 1, (batch, k', 1)). Calling the module (rather than F.linear on its weight) keeps the map whatever replaced
    the `nn.Linear`: a dynamically quantised Linear (`torch.ao.quantization.quantize_dynamic`), whose weight and bias
    are methods, or a wrapped one.
    """
    bias = linear.bias() if callable(linear.bias) else linear.bias
    mapped = linear(compressed_x)  # (batch, k', d)
    if bias is None:
        return mapped
    # A product and a sum, not addcmul: its backward spends two more multiplications on the (here unit) scale.
    return mapped + bias_scale * bias


class LinformerSelfAttention(nn.Module):
    """Multi-head self-attention over keys and values compressed from n to k rows.

    head_i = softmax(Q W_i^Q (E_i X W_i^K)^T / sqrt(d_h)) (F_i X W_i^V)

    After compression this is ordinary attention of L queries over k' slots with an additive mask, so it runs
    through transformers' attention interface (`config._attn_implementation`: "sdpa", "eager" or a registered kernel).

    When one projection serves all heads and is linear (sharing other than "none"; all kinds but max pooling),
    the layer input is compressed first and the key/value maps run on k rows instead of L:
    E (X W + 1 b^T) = (E X) W + (E 1) b^T, with the padding mask folded into E. This is exact and saves most of
    the key/value projection cost at long n.
    """

    is_causal = False  # bidirectional: a causal mask is meaningless after projecting along the sequence

    def __init__(self, config: LinformerConfig, layer_idx: int):
        super().__init__()
        if config.hidden_size % config.num_attention_heads != 0:
            raise ValueError(
                f"The hidden size ({config.hidden_size}) is not a multiple of the number of attention "
                f"heads ({config.num_attention_heads})"
            )
        self.config = config
        self.layer_idx = layer_idx
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.scaling = self.attention_head_size**-0.5

        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

        k = config.projected_length_of_layer(layer_idx)
        # CODEPATH: sharing="none" (the paper's own E_i, F_i per head; configs/replication) holds one projection per
        # head; every other sharing (key_value: model_cards/all-MiniLM-L6-v2-linformer-k128) one for all heads.
        heads = config.num_attention_heads if config.sharing == "none" else 1

        def make_projection():
            return LinformerProjection(
                config.projection, config.max_sequence_length, k, heads, frozen=config.freeze_projections
            )

        # Which projection modules a layer owns; "layerwise" owns none, the encoder passes its shared one.
        # CODEPATH: the paper's four layouts of E, F; checkpoints of each: none and headwise (the default) in
        # configs/replication, key_value in model_cards/all-MiniLM-L6-v2-linformer-k128, layerwise in
        # configs/model/*_layer.
        if config.sharing in ("none", "headwise"):
            self.key_projection = make_projection()  # E
            self.value_projection = make_projection()  # F
        elif config.sharing == "key_value":  # CODEPATH: E = F, as above
            self.key_value_projection = make_projection()  # E = F

    def projections(self, shared_projection: LinformerProjection | None):
        """(E, F) for this layer."""
        # CODEPATH: where this layer's E, F live follows `sharing`, as in __init__ (layerwise: the encoder's one E).
        if self.config.sharing == "layerwise":
            return shared_projection, shared_projection
        if self.config.sharing == "key_value":  # CODEPATH: E = F, as in __init__
            return self.key_value_projection, self.key_value_projection
        return self.key_projection, self.value_projection

    def linear_compression_projections(self, shared_projection: LinformerProjection | None):
        """[E] (E = F) or [E, F] when this layer takes the fast path with linear projections, else None: what
        `prepare_linear_compressions` stacks for it."""
        # CODEPATH: linear E, F shared by the heads (key_value, as model_cards/all-MiniLM-L6-v2-linformer-k128;
        # headwise; layerwise) are stacked once per forward; per-head E_i (sharing="none") and pooling
        # (configs/replication) are not.
        if not (self.config.compresses_input_first and self.config.projection == "linear"):
            return None
        key_projection, value_projection = self.projections(shared_projection)
        return [key_projection] if value_projection is key_projection else [key_projection, value_projection]

    def compress_keys_values(self, hidden_states, mask, key_projection, value_projection, use_fast_path=True):
        """E K and F V as (batch, heads, k', d_h) each.

        The fast path compresses X once (E = F, or E and F stacked when linear) and applies W^K, W^V to k' rows;
        the plain path applies W^K, W^V to all L rows, then compresses per head. Both give the same result.
        """
        key, value, _ = self.compress_keys_values_and_slot_mask(
            hidden_states, mask, key_projection, value_projection, use_fast_path
        )
        return key, value

    def compress_keys_values_and_slot_mask(
        self,
        hidden_states,
        mask,
        key_projection,
        value_projection,
        use_fast_path,
        linear_compression: LinearCompressionInputs | None = None,
    ):
        """`compress_keys_values`, and the additive mask (batch, heads or 1, 1, k') of the compressed slots that no
        real token reaches in E or F (identity E past the end of a short input, a pooling bin of padding only): such a
        slot must be masked out of the softmax rather than left as a zero key that still takes attention weight.

        `linear_compression`, what the encoder prepared for this layer once per forward, spares recomputing the parts
        that depend only on the mask and E, F; without it (a layer called alone) they are made here."""
        batch, seq_len, _ = hidden_states.shape
        heads, d_h = self.num_attention_heads, self.attention_head_size
        shared = value_projection is key_projection
        # CODEPATH: every checkpoint whose E, F serve all heads and are linear maps of X (all sharings but "none", all
        # projections but max pooling) takes the fast path; sharing="none" and max pooling (configs/replication) do not.
        if use_fast_path and self.config.compresses_input_first:
            if key_projection.kind == "linear":
                if linear_compression is None:
                    projections = [key_projection] if shared else [key_projection, value_projection]
                    linear_compression = prepare_linear_compressions(
                        [projections], [(self.key, self.value)], mask, self.config.hidden_size
                    )[0]
                projection, columns_mask, key_correction, value_correction, slot_mask, maps_add_bias = (
                    linear_compression
                )
                # [E X; F X] (batch, 2k or k, d), with the padding mask folded into E (its columns at padded positions
                # zeroed), which costs k L per sequence instead of masking X (L d)
                compressed_x = torch.bmm(projection * columns_mask, hidden_states)
                # [E X; F X] -> E X, F X: views, (batch, k, d) each
                key_x, value_x = (compressed_x, compressed_x) if shared else compressed_x.chunk(2, dim=1)
                if maps_add_bias:  # (E X) W + 1 b from the modules, (E 1 - 1) b from the corrections
                    key, value = self.key(key_x), self.value(value_x)
                else:  # plain nn.Linear: (E X) W from the weight alone, all of (E 1) b from the corrections
                    key, value = F.linear(key_x, self.key.weight), F.linear(value_x, self.value.weight)
                key = key + key_correction  # (batch, k, d)
                value = value + value_correction
            else:
                key_x, key_sums = key_projection.compress_input(hidden_states, mask)  # E X, E 1
                value_x, value_sums = (
                    (key_x, key_sums) if shared else value_projection.compress_input(hidden_states, mask)
                )
                key = _map_compressed(self.key, key_x, key_sums - 1)  # (E X) W + (E 1) b
                value = _map_compressed(self.value, value_x, value_sums - 1)
                # pooling: the bins alone say it, alike for E and F
                slot_mask = additive_slot_mask(key_projection.reached_slots(mask), hidden_states.dtype)
            # (batch, k', d) -> (batch, heads, k', d_h)
            key = key.unflatten(-1, (heads, d_h)).transpose(1, 2)
            value = value.unflatten(-1, (heads, d_h)).transpose(1, 2)
            return key, value, slot_mask

        hidden_shape = (batch, seq_len, heads, d_h)
        key = self.key(hidden_states).view(hidden_shape).transpose(1, 2)  # (batch, heads, L, d_h)
        value = self.value(hidden_states).view(hidden_shape).transpose(1, 2)
        reached = key_projection.reached_slots(mask)
        if not shared and key_projection.kind == "linear":  # pooling reaches alike through E and F
            reached = reached & value_projection.reached_slots(mask)
        slot_mask = additive_slot_mask(reached, hidden_states.dtype)
        return key_projection(key, mask), value_projection(value, mask), slot_mask  # (batch, heads, k', d_h)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        shared_projection: LinformerProjection | None = None,
        layer_tensors: tuple[torch.Tensor, ...] = (),
        maps_add_bias: bool = False,
        use_fast_path: bool = True,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """
        Args:
            hidden_states: (batch, L, d).
            attention_mask: (batch, L), 1.0 for real tokens and 0.0 for padding, in hidden_states' dtype.
            layer_tensors, maps_add_bias: this layer's share of `prepare_linear_compressions`, made once per forward
                by the encoder for all layers: its tensors (which reach a checkpointed layer as the checkpoint's
                inputs, see `LinformerLayer`) and its flag; made here when not given.
        Returns:
            the attention output (batch, L, d) and P (batch, heads, L, k') when the eager computation ran (None
            otherwise), which transformers' output capturing records as `attentions` when they are asked for.
        """
        linear_compression = LinearCompressionInputs(*layer_tensors, maps_add_bias) if layer_tensors else None
        batch, seq_len, _ = hidden_states.shape
        key_projection, value_projection = self.projections(shared_projection)

        query = self.query(hidden_states).view(batch, seq_len, -1, self.attention_head_size).transpose(1, 2)
        key, value, slot_mask = self.compress_keys_values_and_slot_mask(
            hidden_states, attention_mask, key_projection, value_projection, use_fast_path, linear_compression
        )  # (batch, heads, k', d_h) each, (batch, heads or 1, 1, k')
        # Under autocast the plain path and pooling (masked or scaled in fp32) can return fp32 keys and values: SDPA's
        # fused kernels need q, k, v and the mask in one dtype. No copy where they are (the linear fast path).
        key, value, slot_mask = key.to(query.dtype), value.to(query.dtype), slot_mask.to(query.dtype)

        # The output-capturing decorator owns `output_attentions`: it passes the call's flag down with the other
        # kwargs and falls back to the config's, as here. Only the eager computation returns P (sdpa and kernels give
        # no weights), so when attentions are asked for it runs whatever the backend.
        if kwargs.get("output_attentions", self.config.output_attentions):
            attention_interface = eager_attention_forward
        else:
            attention_interface = attention_function(self.config._attn_implementation, eager_attention_forward)
        attn_output, attn_probs = attention_interface(
            self,
            query,
            key,
            value,
            slot_mask,
            dropout=self.dropout.p if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )  # (batch, L, heads, d_h), P or None
        attn_output = attn_output.reshape(batch, seq_len, -1).contiguous()  # (batch, L, d)
        return attn_output, attn_probs


class LinformerAttention(nn.Module):
    """Linformer self-attention followed by RoBERTa's output block (dense, dropout, residual, LayerNorm)."""

    def __init__(self, config: LinformerConfig, layer_idx: int):
        super().__init__()
        self.self = LinformerSelfAttention(config, layer_idx)
        self.output = RobertaSelfOutput(config)

    def forward(self, hidden_states, attention_mask, **kwargs):
        attention_output, attn_weights = self.self(hidden_states, attention_mask, **kwargs)
        return self.output(attention_output, hidden_states), attn_weights


class LinformerLayer(GradientCheckpointingLayer):
    """A RoBERTa layer with Linformer self-attention.

    `layer_tensors`, this layer's share of the compression inputs the encoder made once for the forward
    (`LinformerEncoder.layer_inputs`), come in as positional arguments, and go on to the self-attention as its
    `layer_tensors`: under gradient checkpointing only positional tensors enter the checkpoint as its inputs. One passed
    as a keyword would bring its graph (shared by all layers) into each layer's recomputation, which reentrant
    checkpointing (`use_reentrant=True`, as DeepSpeed's) runs as a backward of its own: the second layer's would walk
    that graph again and fail ("backward through the graph a second time").
    """

    def __init__(self, config: LinformerConfig, layer_idx: int):
        super().__init__()
        self.chunk_size_feed_forward = config.chunk_size_feed_forward  # as RoBERTa: 0 = the whole sequence at once
        self.attention = LinformerAttention(config, layer_idx)
        self.intermediate = RobertaIntermediate(config)
        self.output = RobertaOutput(config)

    def forward(self, hidden_states, attention_mask, *layer_tensors, **kwargs):
        if layer_tensors:
            kwargs["layer_tensors"] = layer_tensors
        attention_output, _ = self.attention(hidden_states, attention_mask, **kwargs)
        # (batch, L, d); the feed-forward may run in chunks along the sequence to bound its (L x d_ff) activations
        return apply_chunking_to_forward(self.feed_forward_chunk, self.chunk_size_feed_forward, 1, attention_output)

    def feed_forward_chunk(self, attention_output):
        return self.output(self.intermediate(attention_output), attention_output)


class LinformerEncoder(nn.Module):
    """The stack of Linformer layers. With `sharing="layerwise"` it owns the one E of all layers and hands it to each of
    them; for linear projections shared by the heads it makes, once per forward, what every layer's compression needs
    from the padding mask and the projections alone (`prepare_linear_compressions`)."""

    def __init__(self, config: LinformerConfig):
        super().__init__()
        self.config = config
        self.layer = nn.ModuleList([LinformerLayer(config, i) for i in range(config.num_hidden_layers)])
        # CODEPATH: sharing="layerwise" (configs/model/*_layer) owns its one E here; other sharings' layers own theirs.
        if config.sharing == "layerwise":
            # One E for every layer, keys and values; owned here, passed to each layer at call time.
            self.shared_projection = LinformerProjection(
                config.projection,
                config.max_sequence_length,
                config.projected_length,
                1,
                frozen=config.freeze_projections,
            )
        else:
            self.shared_projection = None

    def shared_layer_inputs(self) -> dict:
        """What every layer takes from the encoder besides its input: the shared E (`sharing="layerwise"`) or None.
        A layer called alone, `layer(hidden_states, mask, **encoder.shared_layer_inputs())`, makes the rest itself."""
        return {"shared_projection": self.shared_projection}

    def layer_inputs(
        self, hidden_states: torch.Tensor, attention_mask: torch.Tensor
    ) -> list[tuple[tuple[torch.Tensor, ...], dict]]:
        """Each layer's extra inputs as (tensors, keyword arguments), with what its linear compression needs from the
        mask and its parameters alone, made here once per forward for all layers (`prepare_linear_compressions`)
        rather than in every layer: its tensors (passed positionally, which gradient checkpointing needs; see
        `LinformerLayer`) and its flag."""
        shared = self.shared_layer_inputs()
        attentions = [layer.attention.self for layer in self.layer]
        layer_projections = [
            attention.linear_compression_projections(self.shared_projection) for attention in attentions
        ]
        key_value_maps = [(attention.key, attention.value) for attention in attentions]
        # What the layers read as tensors rather than through their modules' forward: E, F (mean and max pooling have
        # none) and, when the input is compressed first, the key/value biases.
        read = [
            projection.weight
            for attention in attentions
            for projection in attention.projections(self.shared_projection)
        ]
        # CODEPATH: checkpoints whose E, F serve all heads (key_value: model_cards/all-MiniLM-L6-v2-linformer-k128;
        # headwise) read the biases; sharing="none" and max pooling (configs/replication) call the maps as modules.
        if self.config.compresses_input_first:
            read += [_bias_tensor(linear) for maps in key_value_maps for linear in maps]
        read = [tensor for tensor in read if tensor is not None]
        if any(tensor.device.type == "meta" for tensor in read):
            self.refuse_offloaded_weights()
        # Pooled or per-head (sharing='none') projections, or layers placed on other devices than the first (a device
        # map over several accelerators, whose hooks move each layer's inputs to its device): each layer makes its own
        if layer_projections[0] is None or any(tensor.device != hidden_states.device for tensor in read):
            return [((), shared)] * len(self.layer)
        width = self.config.hidden_size
        # CODEPATH: sharing="layerwise" (configs/model/*_layer): one E for all layers, stacked once; else one per layer.
        if self.config.sharing == "layerwise":
            layer_projections = layer_projections[:1]
        if len({projections[0].k for projections in layer_projections}) == 1:
            prepared = prepare_linear_compressions(layer_projections, key_value_maps, attention_mask, width)
        else:  # k differs between layers (`projected_length` a list): layer by layer
            prepared = [
                prepare_linear_compressions([projections], [maps], attention_mask, width)[0]
                for projections, maps in zip(layer_projections, key_value_maps)
            ]
        return [(tuple(inputs[:-1]), {**shared, "maps_add_bias": inputs.maps_add_bias}) for inputs in prepared]

    def refuse_offloaded_weights(self) -> None:
        """Raise the error that names the weights left on the meta device, and the fix."""
        modules = [*self.layer, *([self.shared_projection] if self.shared_projection is not None else [])]
        on_meta = [
            f"layer {i}" if i < len(self.layer) else "the shared projection"
            for i, module in enumerate(modules)
            if any(tensor.device.type == "meta" for tensor in [*module.parameters(), *module.buffers()])
        ]
        raise ValueError(
            f"This Linformer's {', '.join(on_meta)} hold weights on the meta device: offloaded by a device_map (its "
            "'cpu' or 'disk' entries beside an accelerator, or a max_memory smaller than the model), or never "
            "loaded. A Linformer layer reads its projections E, F and its key/value biases as tensors, outside their "
            "modules' forward, where accelerate's offloading hooks do not bring them in. Give every layer a device: "
            "load without a device_map, or with one whose entries are all accelerators (device_map='auto' with "
            "max_memory enough for the whole model)."
        )

    def forward(self, hidden_states, attention_mask, **kwargs) -> BaseModelOutput:
        for layer_module, (tensors, inputs) in zip(self.layer, self.layer_inputs(hidden_states, attention_mask)):
            hidden_states = layer_module(hidden_states, attention_mask, *tensors, **inputs, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


@auto_docstring(
    custom_intro="""
    The base class of every Linformer model: RoBERTa's weight names and init, plus the projections E, F (their init from
    `config.projection_init`, and the check that a checkpoint's E, F fit the config).
    """
)
# trf-ignore: TRF013 (the family's base class: each model's own __init__ calls post_init once its modules exist)
class LinformerPreTrainedModel(PreTrainedModelCompat, RobertaPreTrainedModel):
    config_class = LinformerConfig
    config: LinformerConfig
    base_model_prefix = "roberta"  # as RoBERTa (and XLM-R, CamemBERT): RoBERTa checkpoints map key for key
    supports_gradient_checkpointing = True
    # After compression, attention is ordinary attention of L queries over k' slots with an additive slot mask, run
    # through transformers' attention interface: "eager", "sdpa" or a kernel registered with AttentionInterface.
    # Flash and flex attention cannot apply that mask: they are refused by name in
    # _check_and_adjust_attn_implementation, with the reason.
    _supports_sdpa = True
    _supports_flash_attn = False
    _supports_flex_attn = False
    # Not a vLLM/TGI backend model: that also asks for tensor-parallel plans and logits slicing.
    _supports_attention_backend = False
    _no_split_modules = ["RobertaEmbeddings", "LinformerLayer"]
    _can_record_outputs = {
        "hidden_states": LinformerLayer,
        "attentions": LinformerSelfAttention,
    }

    def __init__(self, config: LinformerConfig, *inputs, **kwargs):
        # A config checks every setting when it is built, but one changed afterwards (from_pretrained's keyword
        # overrides, an assignment) only has each field's type checked: the checks across fields (n against the
        # position table, k <= n, no decoder) run again before any weight is made.
        config.validate()
        super().__init__(config, *inputs, **kwargs)

    def _check_and_adjust_attn_implementation(self, attn_implementation, is_init_check=False, **kwargs):
        # Called by __init__, from_pretrained and set_attn_implementation, before any hub kernel is fetched.
        if attn_implementation is not None:
            if "flash" in attn_implementation:  # every flash flavour, as transformers tells them apart
                reason = "flash attention takes no additive mask"
            elif "flex_attention" in attn_implementation:
                reason = "flex attention reads one mask row per query and head 0 only"
            else:
                reason = None
            if reason is not None:
                raise ValueError(
                    f"Linformer cannot run attn_implementation={attn_implementation!r}: {reason}, and Linformer must "
                    "mask the compressed key/value slots that no real token reaches (padding, inputs shorter than "
                    "n), per head when sharing='none'. Use 'sdpa' (the default), 'eager', or a kernel registered "
                    "with transformers.AttentionInterface that takes an additive (batch, heads, 1, k) mask."
                )
        return super()._check_and_adjust_attn_implementation(attn_implementation, is_init_check, **kwargs)

    def check_loaded_keys(self, missing_keys, unexpected_keys, mismatched_keys) -> None:
        """After from_pretrained has loaded a checkpoint: refuse projections that do not fit the config.

        The layout of E and F (which modules exist, and whether they have weights) follows `sharing` and `projection`.
        A checkpoint whose projection weights the model cannot take, or that has some but not all of those the model
        expects, was saved under another config: loading it would silently drop trained E, F or leave them random.
        A checkpoint with no projection weights at all is a RoBERTa checkpoint (or a pooling Linformer): its E, F
        start from `projection_init`, said loudly.
        """
        mismatched = sorted(entry for entry in mismatched_keys if PROJECTION_KEY.search(entry[0]))
        if mismatched:  # said here, by name, instead of transformers' "look at the above report"
            mismatched_keys.difference_update(mismatched)
            key, saved, now = mismatched[0]
            raise ValueError(
                f"The projection weights in {self.config._name_or_path or 'the checkpoint'} do not fit its config "
                f"(sharing={self.config.sharing!r}, projected_length={self.config.projected_length}, "
                f"max_sequence_length={self.config.max_sequence_length}): {key} is {tuple(saved)} in the weights but "
                f"the config asks for {tuple(now)} ({len(mismatched)} projection weight(s) differ). Likely cause: one "
                "of these was edited in config.json, or passed to from_pretrained, after the model was saved; restore "
                "the values it was saved with."
            )
        missing = sorted(key for key in missing_keys if PROJECTION_KEY.search(key))
        unexpected = sorted(key for key in unexpected_keys if PROJECTION_KEY.search(key))
        source = self.config._name_or_path or "the checkpoint"
        config = self.config
        settings = f"sharing={config.sharing!r}, projection={config.projection!r}"

        def listed(keys):
            return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")

        if unexpected:
            expects = f"expects {listed(missing)}" if missing else "has no such weights"
            raise ValueError(
                f"The projection weights in {source} do not fit its config ({settings}): the checkpoint holds "
                f"{listed(unexpected)}, which this model cannot take, and the model {expects}. Loading would drop "
                "the trained E, F. Likely cause: a config other than the one it was saved with (`sharing`, "
                "`projection` or `num_hidden_layers` edited in config.json, or passed to from_pretrained); restore "
                "the values it was saved with."
            )
        expected = [key for key in self.state_dict() if PROJECTION_KEY.search(key)]
        if missing and len(missing) < len(expected):
            raise ValueError(
                f"{source} holds only some of the projection weights its config ({settings}) needs: "
                f"{listed(missing)} are missing. The checkpoint is incomplete or was saved under another config."
            )
        if missing:
            logger.warning(
                f"{source} has no projection weights, but this model ({settings}) has learned E, F: "
                f"{listed(missing)} start from projection_init={config.projection_init!r}, untrained. Expected when "
                "loading a RoBERTa checkpoint into a Linformer. If this folder holds a Linformer saved with "
                "projection='mean' or 'max', its config.json was edited after saving: restore it."
            )

    def save_pretrained(self, save_directory, *args, **kwargs):
        # transformers records only the saved class in `auto_map`; a shared model must load as any head.
        self.config.auto_map = auto_map()
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module):
        """RoBERTa's init, plus the one place where projections start, as `config.projection_init` says.

        transformers runs this for every tensor a checkpoint did not provide (a new model, E and F when a RoBERTa
        checkpoint is loaded or converted) and skips loaded ones, so a trained E is never re-initialised.
        """
        super()._init_weights(module)
        if not isinstance(module, LinformerProjection) or module.weight is None:
            return
        if module.kind == "conv":
            # a kernel of width s = n / k starts as mean pooling of its bin (neighbour averaging, whatever the init)
            init.constant_(module.weight, 1.0 / module.bin_size)
        # CODEPATH: how a new E, F start; loaded ones are never re-initialised. neighbour_average: converted models
        # (model_cards/all-MiniLM-L6-v2-linformer-k128); strided: classifiers converted for short inputs
        # (docs/pretrained.md); random: the paper's, and models trained from scratch (configs/replication).
        elif self.config.projection_init == "neighbour_average":
            init.copy_(module.weight, neighbour_average_projection(module.n, module.k).expand_as(module.weight))
        elif self.config.projection_init == "strided":  # CODEPATH: as above
            init.copy_(module.weight, strided_projection(module.n, module.k).expand_as(module.weight))
        else:
            # "random": N(0, 1/n) keeps a compressed row of a full-length input (a sum of n terms) at the scale of
            # one input row.
            init.normal_(module.weight, mean=0.0, std=module.n**-0.5)


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
    The bare Linformer encoder: RoBERTa's embeddings and pooler around a stack of Linformer layers.

    Takes the (batch, L) padding mask only, right padding only, for inputs of at most n tokens.
    """
)
class LinformerModel(LinformerPreTrainedModel):
    def __init__(self, config: LinformerConfig, add_pooling_layer: bool = True):
        r"""
        add_pooling_layer (`bool`, *optional*, defaults to `True`):
            Whether to add RoBERTa's pooler (a dense layer and tanh over the first token's output); the heads that read
            only the per-token outputs are built without it.
        """
        super().__init__(config)
        self.config = config
        self.gradient_checkpointing = False
        self.embeddings = RobertaEmbeddings(config)
        self.encoder = LinformerEncoder(config)
        self.pooler = RobertaPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def check_input_length(self, seq_len: int) -> None:
        """Refuse inputs longer than n, the width of E and F, or than the position table holds (RoBERTa numbers
        positions from padding_idx + 1: a pad id above 1 takes rows that n + 2 leaves for tokens)."""
        n = self.config.max_sequence_length
        if seq_len > n:
            raise ValueError(
                f"Input length {seq_len} exceeds the model's max_sequence_length n={n} (the width of its "
                f"projections E and F). Truncate the input, e.g. tokenizer(..., truncation=True, max_length={n}), "
                "or use a model built with a larger `max_sequence_length`."
            )
        positions = self.config.max_position_embeddings - self.config.first_position
        if seq_len > positions:
            raise ValueError(
                f"Input length {seq_len} exceeds the {positions} positions this model's table holds "
                f"(max_position_embeddings={self.config.max_position_embeddings}, numbered from pad_token_id + 1 = "
                f"{self.config.first_position}). Truncate the input to max_length={positions}, or build the model "
                f"with max_position_embeddings >= {n + self.config.first_position} (the default for its pad id)."
            )

    @staticmethod
    def check_padding_side(attention_mask: torch.Tensor) -> None:
        """Refuse padding before a real token (left padding). E and F are indexed by position: left padding moves every
        token onto other columns of E and F, and the real tokens' outputs differ from the unpadded input's, silently.
        Right padding is exact.

        Checked on CPU masks only, as `check_padding_mask` checks values: on an accelerator reading the mask is a
        host-device sync on every forward, and `torch._assert_async`, which does not sync, reports a failure as a
        device-side assert that leaves the CUDA context unusable, not as an error naming the fix. Tokenizers return
        CPU tensors, so the check runs wherever a batch is built on the CPU and moved after; the tokenizers this
        package saves beside a Linformer pad on the right. Compiled and traced graphs (torch.compile, ONNX export)
        skip it, as they skip the other value checks: a data-dependent branch would break them (`run_onnx` runs it
        before the graph, hence static).
        """
        if torch.compiler.is_compiling() or torch.jit.is_tracing() or attention_mask.device.type != "cpu":
            return
        tokens = attention_mask != 0  # (batch, L)
        token_after_padding = tokens[:, 1:] & ~tokens[:, :-1]  # (batch, L - 1): a token right after padding
        if token_after_padding.any():
            row = int(token_after_padding.any(dim=-1).nonzero()[0])
            raise ValueError(
                f"attention_mask row {row} has padding before real tokens (left padding), but a Linformer takes right "
                "padding only: its projections E and F are indexed by position, so left padding would silently change "
                'every output. Pad on the right: set `tokenizer.padding_side = "right"` before tokenizing.'
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
            padding mask is accepted: the compressed attention forms no (L x L) score matrix to mask.
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
            self.check_padding_side(attention_mask)

        check_token_ids(self.config, input_ids, token_type_ids)
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


# Task heads: RoBERTa's heads (modules, forwards, losses) around the bare Linformer. Their losses do not take
# `num_items_in_batch`, so Trainer must scale them for gradient accumulation itself (`accepts_loss_kwargs = False`);
# the LM head's loss does take it.


@auto_docstring(
    custom_intro="""
    The Linformer model with RoBERTa's masked language modeling head on top.
    """
)
class LinformerForMaskedLM(LinformerPreTrainedModel):
    _tied_weights_keys = tied_weights(
        {"lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight", "lm_head.decoder.bias": "lm_head.bias"}
    )

    def __init__(self, config: LinformerConfig):
        super().__init__(config)
        self.roberta = LinformerModel(config, add_pooling_layer=False)
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
    The Linformer model with RoBERTa's sequence classification/regression head on top (a linear layer over the first
    token's output), e.g. for GLUE tasks.
    """
)
class LinformerForSequenceClassification(LinformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: LinformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = LinformerModel(config, add_pooling_layer=False)
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


@auto_docstring(
    custom_intro="""
    The Linformer model with RoBERTa's multiple choice head on top (a linear layer over the pooled output and a
    softmax), e.g. for RocStories/SWAG tasks.
    """
)
class LinformerForMultipleChoice(LinformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: LinformerConfig):
        super().__init__(config)
        self.roberta = LinformerModel(config)
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


@auto_docstring(
    custom_intro="""
    The Linformer model with RoBERTa's token classification head on top (a linear layer over every token's output), e.g.
    for named-entity recognition.
    """
)
class LinformerForTokenClassification(LinformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: LinformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = LinformerModel(config, add_pooling_layer=False)
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


@auto_docstring(
    custom_intro="""
    The Linformer model with RoBERTa's extractive question answering head on top (a linear layer over every token's
    output computing span start and end logits), e.g. for SQuAD.
    """
)
class LinformerForQuestionAnswering(LinformerPreTrainedModel):
    accepts_loss_kwargs = False

    def __init__(self, config: LinformerConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.roberta = LinformerModel(config, add_pooling_layer=False)
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


# The one table of heads: Auto class name -> Linformer class, one name per class (the head's own Auto class: the one
# conversion, the model card and its pipeline tag read). Registration, the saved `auto_map`, conversion and the model
# card derive their lists from it.
LINFORMER_HEADS = {
    "AutoModel": LinformerModel,
    "AutoModelForMaskedLM": LinformerForMaskedLM,
    "AutoModelForSequenceClassification": LinformerForSequenceClassification,
    "AutoModelForTokenClassification": LinformerForTokenClassification,
    "AutoModelForQuestionAnswering": LinformerForQuestionAnswering,
    "AutoModelForMultipleChoice": LinformerForMultipleChoice,
}


def auto_classes() -> dict[str, type]:
    """Every Auto class that loads a Linformer -> the class it gives: the heads, and AutoModelForPreTraining giving the
    masked LM, as transformers maps RoBERTa's (`MODEL_FOR_PRETRAINING_MAPPING`). Registration and the saved `auto_map`
    derive from it; a head's own Auto class stays the one in `LINFORMER_HEADS`."""
    return {**LINFORMER_HEADS, "AutoModelForPreTraining": LINFORMER_HEADS["AutoModelForMaskedLM"]}


def auto_map() -> dict[str, str]:
    """What `trust_remote_code=True` needs to load every head from a saved folder (file names as copied there):
    transformers records only the saved class in `auto_map`, and a family's folder must load as any of its heads."""
    module = __name__.rsplit(".", 1)[-1]
    entries = {"AutoConfig": f"{LinformerConfig.__module__.rsplit('.', 1)[-1]}.{LinformerConfig.__name__}"}
    entries.update({auto: f"{module}.{cls.__name__}" for auto, cls in auto_classes().items()})
    return entries


__all__ = [
    "LINFORMER_HEADS",
    "auto_classes",
    "auto_map",
    "LinformerProjection",
    "LinformerSelfAttention",
    "LinformerPreTrainedModel",
    "LinformerModel",
    "LinformerForMaskedLM",
    "LinformerForSequenceClassification",
    "LinformerForMultipleChoice",
    "LinformerForTokenClassification",
    "LinformerForQuestionAnswering",
]
