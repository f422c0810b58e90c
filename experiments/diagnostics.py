"""How much attention carries at different input lengths: a check for the short-input failure of a Linformer.

A Linformer input of L < n tokens uses only the first L columns of E and F. If those columns were trained only as
part of full-length inputs, the compressed values F X are sums over few tokens and the attention output shrinks with
L; on short inputs (SST-2 sentences, ~20 tokens) the layer then passes almost nothing between tokens, and a classifier
reading the first token sees a constant. `attention_output_rms` measures this, for a Linformer or a RoBERTa alike.
"""

from __future__ import annotations

import torch


def attention_output_rms(
    model, input_ids: torch.Tensor, lengths: list[int], layers: list[int] | None = None, batch_size: int = 16
) -> dict[int, list[float]]:
    """Root mean square of each layer's self-attention output (before the output projection), over real tokens.

    Args:
        model: a Linformer or RoBERTa model (bare or with a head), in eval mode or not (it is run in eval mode).
        input_ids: (num_sequences, >= max(lengths)) token ids of real text, each starting with <s>.
        lengths: the input lengths L to compare; each sequence is cut to its first L - 1 tokens plus </s>.
        layers: which layers to report (default: all).
    Returns:
        {L: [rms of layer i for i in layers]}.
    """
    base = model.base_model
    all_layers = base.encoder.layer
    layers = list(range(len(all_layers))) if layers is None else layers
    if input_ids.shape[1] < max(lengths):
        raise ValueError(
            f"input_ids has {input_ids.shape[1]} tokens per sequence, fewer than the longest length "
            f"asked for ({max(lengths)}); give longer sequences or shorter lengths."
        )
    eos = base.config.eos_token_id
    captured: dict[int, list[torch.Tensor]] = {}

    def hook(index):
        def store(_module, _inputs, output):
            captured.setdefault(index, []).append(output[0].detach())  # (batch, L, d)

        return store

    handles = [all_layers[i].attention.self.register_forward_hook(hook(i)) for i in layers]
    was_training = model.training
    model.eval()
    result = {}
    try:
        for length in lengths:
            captured.clear()
            ids = input_ids[:, :length].clone()
            if eos is not None:
                ids[:, -1] = eos
            with torch.no_grad():
                for start in range(0, ids.shape[0], batch_size):
                    chunk = ids[start : start + batch_size]
                    model(input_ids=chunk, attention_mask=torch.ones_like(chunk))
            result[length] = [torch.cat(captured[i]).float().pow(2).mean().sqrt().item() for i in layers]
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return result


__all__ = ["attention_output_rms"]
