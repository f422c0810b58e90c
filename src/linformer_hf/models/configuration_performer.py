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
"""Performer configuration: RoBERTa's configuration plus the settings of FAVOR+ attention."""

from typing import Literal, get_args

from .compat import RobertaConfig, auto_docstring, config_class

# The option types: @strict validates every value against them (on construction, from_pretrained and assignment),
# naming the field and the allowed values; the tuples below are derived from them for argparse choices and tests.
Kernel = Literal["softmax", "relu"]
RowNorms = Literal["chi", "sqrt_d"]
FeatureMapDtype = Literal["float32", "bfloat16", "float16"]

KERNELS: tuple[str, ...] = get_args(Kernel)
ROW_NORMS: tuple[str, ...] = get_args(RowNorms)
FEATURE_MAP_DTYPES: tuple[str, ...] = get_args(FeatureMapDtype)

# The reference implementations' stabiliser for each kernel (google-research FAVOR+: 1e-6 for positive softmax
# features; the paper's generalised attention: ReLU(x W^T) + 1e-3).
DEFAULT_KERNEL_EPSILON = {"softmax": 1e-6, "relu": 1e-3}


@auto_docstring(
    custom_intro="""
    Configuration of a Performer (Choromanski et al., 2021, "Rethinking Attention with Performers").

    Every RoBERTa setting keeps its meaning; self-attention is FAVOR+: softmax(Q K^T / sqrt(d_h)) V is approximated
    by phi(Q) (phi(K)^T V), normalised by phi(Q) (phi(K)^T 1), with m random features per head, so each layer costs
    O(L m d_h) instead of O(L^2 d_h). `attention_probs_dropout_prob` is unused: no attention matrix is formed.

    """
)
@config_class
class PerformerConfig(RobertaConfig):
    r"""
    num_random_features (`int`, defaults to 256):
        m: the number of random features per head (the paper's default).
    kernel (`str`, defaults to `"softmax"`):
        `"softmax"`: positive random features phi(x) = exp(w^T x - ||x||^2 / 2) / sqrt(m), an unbiased estimate
        of softmax attention; `"relu"`: the paper's generalised attention, phi(x) = ReLU(w^T x) / sqrt(m), a
        different (not softmax) attention.
    orthogonal_features (`bool`, defaults to `True`):
        Draw the rows of W in orthogonal blocks of d_h (lower variance than i.i.d. Gaussian rows).
    orthogonal_row_norms (`str`, defaults to `"chi"`):
        Row lengths of orthogonal features: `"chi"`, the lengths of Gaussian rows (chi(d_h)-distributed; keeps
        the estimate unbiased); `"sqrt_d"`, all sqrt(d_h) (the "regularised" variant).
    feature_redraw_interval (`int` or `None`, defaults to 1000):
        Redraw W every this many training forward calls of the model; `None` never redraws. Never in eval.
        The count is a buffer of the model, saved with it, so a resumed run keeps the schedule.
    freeze_features (`bool`, defaults to `False`):
        Keep W as it is whatever the interval (e.g. for fine-tuning a pretrained Performer).
    kernel_epsilon (`float`, defaults to 1e-6 for softmax, 1e-3 for relu):
        Added to every feature (over sqrt(m)), so that the normaliser phi(q)^T sum_j phi(k_j) stays positive.
    causal_chunk_size (`int`, defaults to 128):
        With `is_decoder=True`, the block length of the causal prefix sums: memory per layer is
        O(L m d_h / chunk + chunk^2 + m d_h) per head instead of O(L^2).
    feature_map_dtype (`str`, defaults to `"float32"`):
        The dtype of FAVOR+'s matmuls: the projections x' W^T (x' = x / d_h^(1/4)) and, bidirectional, the
        contractions phi(K)^T V and phi(Q) (phi(K)^T V). `"bfloat16"` or `"float16"` run them on tensor cores
        (fp32 accumulation); the exp, its stabilisers and the normaliser phi(Q) (phi(K)^T 1) stay fp32, whatever
        the autocast dtype. `"float32"`: everything in fp32. Causal attention uses it for the projections only.
    recompute_feature_maps (`bool`, defaults to `False`):
        Keep only Q, K, V (and W) of each layer for the backward pass and run FAVOR+ again there, instead of keeping
        its (batch, heads, L, m) feature maps phi(Q), phi(K) and the results of their exp, in fp32 (m = 256 is
        4 d_h at base width). A layer then keeps what a RoBERTa-SDPA layer keeps: at base width 2.7x less than with
        `False` in eager mode, 1.8x less compiled (docs/results/performer-memory-cpu.md), for one more FAVOR+ forward
        per layer in backward (4 L m d_h multiply-adds per head, bidirectional: 3.4% more FLOPs in a training step at
        base width; more time than that where FAVOR+'s elementwise work dominates). Gradients are those of `False`.
        Applies whenever gradients are recorded; inference under `torch.no_grad()` is unchanged. Redundant with
        gradient checkpointing of whole layers, which recomputes the layer anyway.

    Example:

    ```python
    >>> from linformer_hf import PerformerConfig, PerformerModel
    >>> config = PerformerConfig(num_random_features=128, kernel="softmax", feature_redraw_interval=1000)
    >>> model = PerformerModel(config)
    ```"""

    model_type = "performer"

    num_random_features: int = 256
    kernel: Kernel = "softmax"
    orthogonal_features: bool = True
    orthogonal_row_norms: RowNorms = "chi"
    feature_redraw_interval: int | None = 1000
    freeze_features: bool = False
    # None means "the kernel's default", derived in __post_init__.
    kernel_epsilon: float | int | None = None
    causal_chunk_size: int = 128
    feature_map_dtype: FeatureMapDtype = "float32"
    recompute_feature_maps: bool = False

    def __post_init__(self, **kwargs):
        if self.kernel_epsilon is None and self.kernel in DEFAULT_KERNEL_EPSILON:
            self.kernel_epsilon = DEFAULT_KERNEL_EPSILON[self.kernel]
        super().__post_init__(**kwargs)

    @property
    def head_size(self) -> int:
        """d_h."""
        return self.hidden_size // self.num_attention_heads

    def validate_architecture(self):
        """Part of `@strict` validation: reject settings that cannot make a Performer, naming the field.

        Field types (including the allowed values of `kernel` and `orthogonal_row_norms`) are checked by `@strict`
        itself. Either way a bad config raises `huggingface_hub.errors.StrictDataclassError`.
        """
        super().validate_architecture()

        def positive_int(name):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")

        positive_int("num_random_features")
        positive_int("causal_chunk_size")
        first_position = (self.pad_token_id if isinstance(self.pad_token_id, int) else 1) + 1
        if self.max_position_embeddings <= first_position:
            raise ValueError(
                f"`max_position_embeddings`={self.max_position_embeddings} holds no token: RoBERTa's positions start "
                f"at padding_idx + 1 = {first_position} (`pad_token_id`={self.pad_token_id}), so inputs of up to L "
                f"tokens need {first_position} + L."
            )
        if self.feature_redraw_interval is not None:
            positive_int("feature_redraw_interval")
        eps = self.kernel_epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
            raise ValueError(f"`kernel_epsilon` must be a number >= 0, got {eps!r}.")
        if self.add_cross_attention:
            raise ValueError(
                "Performer has no cross-attention (`add_cross_attention` must be False); `is_decoder=True` gives "
                "causal self-attention."
            )


__all__ = [
    "DEFAULT_KERNEL_EPSILON",
    "FEATURE_MAP_DTYPES",
    "KERNELS",
    "ROW_NORMS",
    "FeatureMapDtype",
    "Kernel",
    "PerformerConfig",
    "RowNorms",
]
