"""Linformer configuration: RoBERTa's configuration plus the settings of the low-rank attention."""

from huggingface_hub.dataclasses import strict
from transformers import RobertaConfig

SHARING_MODES = ("none", "headwise", "key_value", "layerwise")
PROJECTION_KINDS = ("linear", "mean", "max", "conv")
PROJECTION_INITS = ("random", "neighbour_average")


@strict
class LinformerConfig(RobertaConfig):
    r"""
    Configuration of a Linformer encoder (Wang et al., 2020, "Self-Attention with Linear Complexity").

    Every RoBERTa setting keeps its meaning; attention keys and values are additionally projected along the
    sequence axis from n rows to k rows by E and F (k x n), so each layer costs O(n k) instead of O(n^2).

    Args:
        max_sequence_length (`int`, defaults to 512):
            n: the longest input the model accepts, and the width of E and F. Inputs shorter than n use the first
            columns of E and F. `max_position_embeddings` defaults to n + 2 (RoBERTa's position offset).
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
            learnable; the identity when k = n). Weights loaded from a checkpoint are not re-initialised.

    Example:

    ```python
    >>> from linformer_hf import LinformerConfig, LinformerModel
    >>> config = LinformerConfig(max_sequence_length=1024, projected_length=256, sharing="key_value")
    >>> model = LinformerModel(config)
    ```"""

    model_type = "linformer"

    max_sequence_length: int = 512
    projected_length: int | list[int] = 128
    sharing: str = "headwise"
    projection: str = "linear"
    freeze_projections: bool = False
    projection_init: str = "random"
    # None means "n + 2", derived in __post_init__.
    max_position_embeddings: int | None = None

    def __post_init__(self, **kwargs):
        if self.max_position_embeddings is None and isinstance(self.max_sequence_length, int):
            # RoBERTa numbers positions from padding_idx + 1, hence the offset of 2.
            self.max_position_embeddings = self.max_sequence_length + 2
        super().__post_init__(**kwargs)

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
        """Part of `@strict` validation: reject settings that cannot make a Linformer, naming the field."""
        super().validate_architecture()
        n = self.max_sequence_length
        if not isinstance(n, int) or n <= 0:
            raise ValueError(f"`max_sequence_length` (n) must be a positive integer, got {n!r}.")
        if self.sharing not in SHARING_MODES:
            raise ValueError(f"`sharing` must be one of {SHARING_MODES}, got {self.sharing!r}.")
        if self.projection_init not in PROJECTION_INITS:
            raise ValueError(f"`projection_init` must be one of {PROJECTION_INITS}, got {self.projection_init!r}.")
        if self.projection not in PROJECTION_KINDS:
            raise ValueError(f"`projection` must be one of {PROJECTION_KINDS}, got {self.projection!r}.")

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

        if self.max_position_embeddings < n + 2:
            raise ValueError(
                f"`max_position_embeddings`={self.max_position_embeddings} is too small for "
                f"`max_sequence_length` n={n}: RoBERTa's positions start at padding_idx + 1, so it needs at least "
                f"n + 2 = {n + 2} (or leave it unset)."
            )
        if self.is_decoder or self.add_cross_attention:
            raise ValueError(
                "Linformer cannot be a decoder (`is_decoder`/`add_cross_attention` must be False): projecting keys "
                "and values along the sequence mixes every position into every compressed row, so a causal mask "
                "cannot stop a token from seeing the future."
            )


__all__ = ["LinformerConfig", "SHARING_MODES", "PROJECTION_KINDS", "PROJECTION_INITS"]
