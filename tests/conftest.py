import os

# Nothing in the tests may wait on a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import warnings  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import linformer_hf  # noqa: E402,F401  (registers the Auto classes)
from linformer_hf import LinformerConfig  # noqa: E402

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


def tiny_config(**overrides) -> LinformerConfig:
    """A Linformer small enough to run every property test in well under a second."""
    settings = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
        max_sequence_length=16,
        projected_length=8,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-5,
    )
    settings.update(overrides)
    return LinformerConfig(**settings)


def randomize_projections(model, seed: int = 0) -> None:
    """Give E/F (and conv kernels) dense random values, so no test passes by a lucky structured init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "projection" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


def random_batch(batch_size: int, seq_len: int, vocab_size: int = 99, seed: int = 0):
    """Token ids avoiding the special ids 0-2 (bos, pad, eos)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab_size, (batch_size, seq_len), generator=generator)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# The two names of turning gradient checkpointing on: `gradient_checkpointing_enable` (every 5.x; a deprecated alias
# in newer releases) and `activation_checkpointing_enable` (newer releases only).
CHECKPOINTING_METHODS = ["gradient_checkpointing_enable", "activation_checkpointing_enable"]


def enable_checkpointing(model, method: str) -> list:
    """Turn gradient checkpointing on by `method`; the list returned gains one entry per checkpointed layer call."""
    if not hasattr(model, method):
        pytest.skip(f"transformers {transformers.__version__} has no {method}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the deprecated alias works all the same
        getattr(model, method)()
    calls = []
    for layer in model.modules():
        if getattr(layer, "gradient_checkpointing", False):
            checkpoint = layer._gradient_checkpointing_func

            def counted(*args, _checkpoint=checkpoint, **kwargs):
                calls.append(1)
                return _checkpoint(*args, **kwargs)

            layer._gradient_checkpointing_func = counted
    return calls
