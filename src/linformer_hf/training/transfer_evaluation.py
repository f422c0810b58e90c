"""How faithful a transferred student is to its teacher: each layer's attention error on the teacher's layer input,
and the cosine between the two models' sentence embeddings, on held-out windows and whole held-out documents."""

from __future__ import annotations

import torch

from .transfer_losses import mean_pool
from .transfer_models import capture_attention, compared_length, student_attention


@torch.no_grad()
def evaluate_fidelity(teacher, student, batches: dict[int, torch.Tensor], batch_size: int = 8) -> dict:
    """Per window length: each layer's attention-output relative error (layer-local, on the teacher's layer input) and
    the cosine between the mean-pooled last hidden states of student and teacher (end to end)."""
    device = next(student.parameters()).device
    results = {}
    for length, ids in batches.items():
        layer_sq = torch.zeros(teacher.config.num_hidden_layers, dtype=torch.float64)
        layer_norm = torch.zeros_like(layer_sq)
        cosines = []
        for chunk in ids.to(device).split(batch_size):
            mask = torch.ones(chunk.shape, dtype=torch.float32, device=device)
            with capture_attention(teacher) as records:
                teacher_out = teacher.base_model(chunk, attention_mask=mask)
            for layer_idx, (hidden, target) in enumerate(records):
                output = student_attention(student, layer_idx, hidden, mask)
                layer_sq[layer_idx] += ((output - target) ** 2).sum().item()
                layer_norm[layer_idx] += (target**2).sum().item()
            student_out = student.base_model(chunk, attention_mask=mask)
            cosines.append(
                torch.nn.functional.cosine_similarity(
                    mean_pool(student_out.last_hidden_state, mask),
                    mean_pool(teacher_out.last_hidden_state, mask),
                    dim=-1,
                )
            )
        errors = (layer_sq / layer_norm).sqrt()
        results[str(length)] = {
            "attention_relative_error_per_layer": [round(value, 5) for value in errors.tolist()],
            "embedding_cosine_mean": round(torch.cat(cosines).mean().item(), 5),
            "embedding_cosine_min": round(torch.cat(cosines).min().item(), 5),
            "windows": int(ids.shape[0]),
        }
    return results


@torch.no_grad()
def evaluate_documents(teacher, student, tokenizer, documents: list[str], batch_size: int = 8) -> dict:
    """Embedding cosine (mean pooling) between student and teacher on whole documents, as the model is used: each
    document tokenized with the tokenizer's framing, truncated to the longest input both models read (the student's n,
    or the teacher's positions where those are fewer), batches padded."""
    device = next(student.parameters()).device
    n = compared_length(teacher, student)
    cosines, lengths = [], []
    for start in range(0, len(documents), batch_size):
        batch = tokenizer(
            documents[start : start + batch_size], truncation=True, max_length=n, padding=True, return_tensors="pt"
        ).to(device)
        mask = batch["attention_mask"].float()
        inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "token_type_ids") if key in batch}
        teacher_out = teacher.base_model(**inputs).last_hidden_state
        student_out = student.base_model(**inputs).last_hidden_state
        cosines.append(
            torch.nn.functional.cosine_similarity(mean_pool(student_out, mask), mean_pool(teacher_out, mask), dim=-1)
        )
        lengths.append(batch["attention_mask"].sum(1))
    cosines, lengths = torch.cat(cosines), torch.cat(lengths).float()
    return {
        "documents": len(documents),
        "tokens_median": int(lengths.median().item()),
        "truncated_to": n,
        "embedding_cosine_mean": round(cosines.mean().item(), 5),
        "embedding_cosine_min": round(cosines.min().item(), 5),
    }


def fidelity_values(fidelity: dict) -> dict[str, float]:
    """The numbers of an `evaluate` result, by name: what must be finite for a transferred model to be published."""
    values = {}
    for length, result in fidelity["windows"].items():
        for layer, error in enumerate(result["attention_relative_error_per_layer"]):
            values[f"attention relative error of layer {layer} at L={length}"] = error
        values[f"embedding cosine at L={length}"] = result["embedding_cosine_mean"]
    values["embedding cosine on held-out documents"] = fidelity["documents"]["embedding_cosine_mean"]
    return values
