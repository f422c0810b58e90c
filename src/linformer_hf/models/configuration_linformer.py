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
"""Linformer configuration: RoBERTa's configuration plus the settings of the low-rank attention."""

from typing import Literal, get_args

from .compat import RobertaConfig, auto_docstring, config_class

# The option types: @strict validates every value against them (on construction, from_pretrained and assignment),
# naming the field and the allowed values; the tuples below are derived from them for argparse choices and tests.
Sharing = Literal["none", "headwise", "key_value", "layerwise"]
ProjectionKind = Literal["linear", "mean", "max", "conv"]
ProjectionInit = Literal["random", "neighbour_average", "strided"]

SHARING_MODES: tuple[str, ...] = get_args(Sharing)
PROJECTION_KINDS: tuple[str, ...] = get_args(ProjectionKind)
PROJECTION_INITS: tuple[str, ...] = get_args(ProjectionInit)


@auto_docstring(
    custom_intro="""
    Configuration of a Linformer encoder (Wang et al., 2020, "Self-Attention with Linear Complexity").

    Every RoBERTa setting keeps its meaning; attention keys and values are additionally projected along the
    sequence axis from n rows to k rows by E and F (k x n), so each layer costs O(n k) instead of O(n^2).
    """
)
@config_class
class LinformerConfig(RobertaConfig):
    r"""
    max_sequence_length (`int`, defaults to 512):
        n: the longest input the model accepts, and the width of E and F. Inputs shorter than n use the first
        columns of E and F. `max_position_embeddings` defaults to n + 2 (RoBERTa numbers positions from
        pad_token_id + 1).
    projected_length (`int` or `list[int]`, defaults to 128):
        k: the number of compressed key/value rows. A list gives one k per layer (the paper's nonuniform
        projected dimension).
    sharing (`str`, defaults to `"headwise"`):
        `"none"`: own E_i, F_i for every head; `"headwise"`: one E and one F per layer, shared by its heads;
        `"key_value"`: one E = F per layer; `"layerwise"`: one E for all layers, keys and values.
    projection (`str`, defaults to `"linear"`):
        `"linear"`: learned E, F; `"mean"` / `"max"`: pooling over bins of n / k positions; `"conv"`: a learned
        kernel of width n / k applied with stride n / k along the sequence.
    freeze_projections (`bool`, defaults to `False`):
        Keep E and F at their initial values (they are still saved with the weights).
    projection_init (`str`, defaults to `"random"`):
        How a new model's learned E, F start: `"random"`, N(0, 1/n) entries (dense, like the paper's);
        `"neighbour_average"`, row j averaging the j-th of k contiguous bins of positions (mean pooling that stays
        learnable; the identity when k = n); `"strided"`, row j summing positions j, j + k, j + 2k, ... (the
        identity on the first k positions, so an input of L <= k tokens is attended exactly as by full attention,
        and longer ones fold distant tokens together). A conv kernel always starts as mean pooling of its bin.
        Weights loaded from a checkpoint are not re-initialised; E, F missing from one (a RoBERTa checkpoint) are.

    Example:

    ```python
    >>> from linformer_hf import LinformerConfig, LinformerModel
    >>> config = LinformerConfig(max_sequence_length=1024, projected_length=256, sharing="key_value")
    >>> model = LinformerModel(config)
    ```"""

    model_type = "linformer"

    max_sequence_length: int = 512
    projected_length: int | list[int] = 128
    sharing: Sharing = "headwise"
    projection: ProjectionKind = "linear"
    freeze_projections: bool = False
    projection_init: ProjectionInit = "random"
    # None means "n + pad_token_id + 1" (n + 2), derived in __post_init__.
    max_position_embeddings: int | None = None

    def __post_init__(self, **kwargs):
        if self.max_position_embeddings is None and isinstance(self.max_sequence_length, int):
            # RoBERTa numbers positions from padding_idx + 1: n + 2 for its pad id, 1 (and never fewer).
            self.max_position_embeddings = self.max_sequence_length + max(2, self.first_position)
        super().__post_init__(**kwargs)

    @property
    def first_position(self) -> int:
        """The position id of the first token: RoBERTa's embeddings number positions from padding_idx + 1."""
        return (self.pad_token_id if isinstance(self.pad_token_id, int) else 1) + 1

    def projected_length_of_layer(self, layer_idx: int) -> int:
        """k of layer `layer_idx`."""
        if isinstance(self.projected_length, int):
            return self.projected_length
        return self.projected_length[layer_idx]

    @property
    def compresses_input_first(self) -> bool:
        """Whether attention takes the fast path: compress the layer input X before the key/value maps.

        Exact when one projection serves all heads (sharing other than "none") and it is a linear map of its input
        (every kind but max pooling): E (X W + 1 b^T) = (E X) W + (E 1) b^T.
        """
        return self.sharing != "none" and self.projection != "max"

    def validate_architecture(self):
        """Part of `@strict` validation: reject settings that cannot make a Linformer, naming the field.

        Field types (including the allowed values of `sharing`, `projection`, `projection_init`) are checked by
        `@strict` itself. Either way a bad config raises `huggingface_hub.errors.StrictDataclassError` (a field's
        type: `StrictDataclassFieldValidationError`; a check here: `StrictDataclassClassValidationError`), which is
        not a `ValueError`.
        """
        super().validate_architecture()
        n = self.max_sequence_length
        if not isinstance(n, int) or n <= 0:
            raise ValueError(f"`max_sequence_length` (n) must be a positive integer, got {n!r}.")

        ks = self.projected_length
        if isinstance(ks, list):
            if self.sharing == "layerwise":
                raise ValueError(
                    "`projected_length` is a per-layer list, but `sharing='layerwise'` uses one E for all layers, "
                    "so all layers must have the same k: give an int, or use sharing 'none', 'headwise' or "
                    "'key_value'."
                )
            if len(ks) != self.num_hidden_layers:
                raise ValueError(
                    f"`projected_length` has {len(ks)} entries but `num_hidden_layers` is {self.num_hidden_layers}: "
                    "give one k per layer, or a single int."
                )
        else:
            ks = [ks]
        for k in ks:
            if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
                raise ValueError(f"`projected_length` (k) must be a positive integer or a list of them, got {k!r}.")
            if k > n:
                raise ValueError(
                    f"`projected_length` k={k} is larger than `max_sequence_length` n={n}; a projection from n to k "
                    "rows needs k <= n."
                )
            if self.projection != "linear" and n % k != 0:
                raise ValueError(
                    f"`projection={self.projection!r}` pools bins of n / k positions, so `max_sequence_length` "
                    f"n={n} must be a multiple of `projected_length` k={k}."
                )

        # n + 2 as for RoBERTa's pad id (transformers' own tests set another pad id on such a config); the model
        # refuses an input longer than the table holds for the pad id it has (`check_input_length`).
        if self.max_position_embeddings < n + 2:
            raise ValueError(
                f"`max_position_embeddings`={self.max_position_embeddings} is too small for "
                f"`max_sequence_length` n={n}: RoBERTa's positions start at padding_idx + 1, so it needs at least "
                f"n + 2 = {n + 2} (or leave it unset)."
            )
        if not isinstance(self.num_hidden_layers, int) or self.num_hidden_layers < 1:
            raise ValueError(f"`num_hidden_layers` must be at least 1, got {self.num_hidden_layers!r}.")
        if self.is_decoder or self.add_cross_attention:
            raise ValueError(
                "Linformer cannot be a decoder (`is_decoder`/`add_cross_attention` must be False): projecting keys "
                "and values along the sequence mixes every position into every compressed row, so a causal mask "
                "cannot stop a token from seeing the future."
            )


__all__ = [
    "LinformerConfig",
    "PROJECTION_INITS",
    "PROJECTION_KINDS",
    "SHARING_MODES",
    "ProjectionInit",
    "ProjectionKind",
    "Sharing",
]
