"""What attention transfer minimises (the stage-1 variants and stage 2, described in training/transfer.py's
docstring), and the distances its evaluation reports. Fine-tuning with a teacher uses `matching_loss` too."""

from __future__ import annotations

import math

import torch

from .transfer_arguments import TransferArguments
from .transfer_models import STUDENT_MASKED_LM, capture_attention, student_attention, teacher_attention_layers


def matching_loss(student_out, teacher_out, mask, kind: str) -> torch.Tensor:
    """Distance between two (batch, L, d) tensors over real tokens: relative squared error, or mean squared error."""
    squared = ((student_out - teacher_out) ** 2 * mask[..., None]).sum()
    if kind == "relative":
        return squared / (teacher_out**2 * mask[..., None]).sum().clamp(min=1e-12)
    return squared / (mask.sum() * student_out.shape[-1])


def relative_error(student_out, teacher_out, mask) -> float:
    """||S - T|| / ||T|| over real tokens: the fidelity figure reported per layer."""
    return math.sqrt(matching_loss(student_out, teacher_out, mask, "relative").item())


def mean_pool(hidden_states, mask):
    """Sentence embedding as sentence-transformers computes it: the mean of token vectors over real tokens."""
    return (hidden_states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp(min=1e-9)


def teacher_attention_weights(teacher_attention, hidden_states, mask) -> torch.Tensor:
    """P = softmax(Q K^T / sqrt(d_h)) of a BERT / RoBERTa self-attention module on its input, padded keys masked:
    (batch, heads, L, L). Computed from the module's W^Q, W^K (absolute positions: no term inside the softmax)."""
    batch, length, _ = hidden_states.shape
    heads = teacher_attention.num_attention_heads
    head_size = teacher_attention.attention_head_size

    def split(x):
        return x.view(batch, length, heads, head_size).transpose(1, 2)

    query, key = split(teacher_attention.query(hidden_states)), split(teacher_attention.key(hidden_states))
    scores = torch.matmul(query, key.transpose(2, 3)) / math.sqrt(head_size)
    scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def attention_weights_loss(student, layer_idx: int, hidden_states, mask, teacher_probs) -> torch.Tensor:
    """The `attention_weights` stage-1 loss of one layer (training/transfer.py's docstring): sum_t P_it (log P_it -
    log A_it), the cross-entropy less the teacher's entropy, the mean over heads and real queries, with A = Pbar Ehat
    the student's slot weights mapped back to positions through E."""
    encoder = student.base_model.encoder
    attention = encoder.layer[layer_idx].attention.self
    key_projection, _ = attention.projections(encoder.shared_projection)
    _, slot_probs = attention(hidden_states, mask, encoder.shared_projection, output_attentions=True)  # (b, h, L, k)
    length = hidden_states.shape[1]
    magnitude = key_projection.weight[:, :, :length].abs()[None] * mask[:, None, None, :]  # (b, h or 1, k, L)
    spread = magnitude / magnitude.sum(-1, keepdim=True).clamp(min=1e-12)  # rows sum to 1: Ehat
    mapped = torch.matmul(slot_probs, spread)  # (b, h, L, L): A, each query row sums to 1
    log_teacher = torch.log(teacher_probs.clamp(min=1e-9))
    kl = (teacher_probs * (log_teacher - torch.log(mapped.clamp(min=1e-9)))).sum(-1)  # (b, h, L)
    queries = mask[:, None, :].expand_as(kl)
    return (kl * queries).sum() / queries.sum()


def layer_local_loss(teacher, student, ids, mask, kind: str, layer_loss: str = "attention_output"):
    """Stage 1: the mean over layers of each layer's loss (``layer_loss``, training/transfer.py's docstring) on the
    teacher's own layer inputs; also each layer's figure for the log (relative error, MSE or cross-entropy)."""
    if layer_loss == "attention_output":
        with torch.no_grad(), capture_attention(teacher) as records:
            teacher.base_model(ids, attention_mask=mask)
        losses = [
            matching_loss(student_attention(student, layer_idx, hidden, mask), target, mask, kind)
            for layer_idx, (hidden, target) in enumerate(records)
        ]
    else:
        with torch.no_grad():
            states = teacher.base_model(ids, attention_mask=mask, output_hidden_states=True).hidden_states
        encoder = student.base_model.encoder
        losses = []
        for layer_idx in range(len(states) - 1):
            hidden = states[layer_idx]
            if layer_loss == "attention_weights":
                with torch.no_grad():
                    target = teacher_attention_weights(teacher_attention_layers(teacher)[layer_idx], hidden, mask)
                losses.append(attention_weights_loss(student, layer_idx, hidden, mask, target))
            else:  # hidden_states: the whole layer on X_l against X_{l+1}
                output = encoder.layer[layer_idx](hidden, mask, **encoder.shared_layer_inputs())
                losses.append(matching_loss(output, states[layer_idx + 1], mask, kind))
    relative = kind == "relative" and layer_loss != "attention_weights"
    return torch.stack(losses).mean(), [math.sqrt(loss.item()) if relative else loss.item() for loss in losses]


def layer_log_key(args, stage: str) -> str:
    """The log's name for a step's per-layer figures."""
    if stage == "layer" and args.layer_loss == "attention_weights":
        return "layer_attention_kl"
    return "layer_relative_error" if args.loss == "relative" else "layer_mse"


def end_to_end_loss(teacher, student, ids, mask, args: TransferArguments):
    """Stage 2: hidden states of every layer (and MLM logits when both models have the head) against the teacher's."""
    use_logits = (
        isinstance(student, STUDENT_MASKED_LM)
        and hasattr(teacher, "get_output_embeddings")
        and teacher.get_output_embeddings() is not None
    )
    with torch.no_grad():
        teacher_out = teacher(ids, attention_mask=mask, output_hidden_states=True)
    student_out = student(ids, attention_mask=mask, output_hidden_states=True)
    pairs = list(zip(student_out.hidden_states[1:], teacher_out.hidden_states[1:]))
    losses = [matching_loss(s, t, mask, args.loss) for s, t in pairs]
    loss = torch.stack(losses).mean()
    if use_logits:
        teacher_log_probs = torch.log_softmax(teacher_out.logits, dim=-1)
        student_log_probs = torch.log_softmax(student_out.logits, dim=-1)
        kl = (teacher_log_probs.exp() * (teacher_log_probs - student_log_probs)).sum(-1)  # (batch, L)
        loss = loss + args.mlm_weight * (kl * mask).sum() / mask.sum()
    return loss, [math.sqrt(value.item()) if args.loss == "relative" else value.item() for value in losses]
