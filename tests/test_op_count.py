"""How many aten ops one training step (forward and backward) of a Linformer layer issues, against a RoBERTa layer
on SDPA: on a GPU each op that is not a view is a kernel launch, and small ones cost their launch, not their work."""

import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import RobertaConfig
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.roberta.modeling_roberta import RobertaLayer

from linformer_hf import LinformerConfig, LinformerModel

# Linformer's ops per layer over RoBERTa-SDPA's, as counted below (width 64, batch 3 x 128, padded, k = 32, E and F
# per layer): 229 / 141 = 1.62 before issue 20, 196 / 141 = 1.39 after. What remains is the compression itself
# ([E; F] X and its row sums, the bias term (E 1 - 1) b, with their backward) and the slot mask; issue 20 asks for
# 1.15.
MAX_OPS_OVER_ROBERTA = 1.40


class CountOps(TorchDispatchMode):
    """Every aten op dispatched (views included, as the profiler lists them), by name."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def ops_of_a_training_step(layer, hidden_states, *args, **kwargs) -> collections.Counter:
    x = hidden_states.clone().requires_grad_()
    with CountOps() as recorder:
        output = layer(x, *args, **kwargs)
        output = output[0] if isinstance(output, tuple) else output
        output.sum().backward()
    return recorder.counts


def test_a_linformer_layer_training_step_issues_few_more_ops_than_a_roberta_sdpa_layer():
    batch, seq_len, width = 3, 128, 64
    settings = dict(
        vocab_size=99,
        hidden_size=width,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=4 * width,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="sdpa",
    )
    mask = torch.ones(batch, seq_len)
    mask[1, 100:] = 0
    mask[2, 60:] = 0
    hidden_states = torch.randn(batch, seq_len, width)

    roberta_config = RobertaConfig(**settings, max_position_embeddings=seq_len + 2)
    # The mask RobertaModel hands its layers, made once per forward.
    roberta_mask = create_bidirectional_mask(
        config=roberta_config, inputs_embeds=hidden_states, attention_mask=mask.long()
    )
    assert roberta_mask is not None  # padded: SDPA gets a mask, not is_causal or None
    roberta = ops_of_a_training_step(RobertaLayer(roberta_config).train(), hidden_states, roberta_mask)

    linformer_model = LinformerModel(LinformerConfig(**settings, max_sequence_length=seq_len, projected_length=32))
    encoder = linformer_model.train().encoder
    linformer = ops_of_a_training_step(encoder.layer[0], hidden_states, mask, **encoder.shared_layer_inputs())

    assert roberta["aten._scaled_dot_product_flash_attention_for_cpu"] == 1  # counted what we meant to count
    assert linformer["aten._scaled_dot_product_flash_attention_for_cpu"] == 1
    ratio = sum(linformer.values()) / sum(roberta.values())
    assert ratio <= MAX_OPS_OVER_ROBERTA, (sum(linformer.values()), sum(roberta.values()), linformer - roberta)
