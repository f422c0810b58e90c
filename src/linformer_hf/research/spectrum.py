"""The paper's Figure 1 for any encoder: how low-rank is each head's context mapping P?

For every layer and head, P = softmax(Q K^T / sqrt(d_h)) is (L x L) for RoBERTa and (L x k) for Linformer. Its
singular values s_1 >= s_2 >= ... give the normalised cumulative spectrum c_i = (s_1 + ... + s_i) / (s_1 + ... + s_r),
r = min(L, k). The paper (Wang et al., 2020, Fig. 1) shows for a pretrained RoBERTa at L = 512 that c_128 is already
high (more so in higher layers), i.e. P is approximately low-rank. Here the curves are averaged over inputs: packed
chunks of exactly L tokens from any text, so no padding enters P.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass

import torch
from transformers import AutoModel, AutoTokenizer

from ..models import max_input_length


@dataclass
class Spectrum:
    """Cumulative normalised singular values of P, averaged over `num_inputs` inputs of `seq_len` tokens."""

    curves: torch.Tensor  # (layers, heads, r): c_1 .. c_r, in [0, 1], c_r = 1
    num_inputs: int
    seq_len: int
    model_name: str
    # r of each layer; a Linformer with one k per layer has layers with fewer singular values than `rank`, whose
    # curves are padded with 1.0 (the singular values past a matrix's rank are 0, so the cumulative sum stays 1).
    layer_ranks: list[int] | None = None

    @property
    def rank(self) -> int:
        return self.curves.shape[-1]

    def at_index(self, index: int) -> torch.Tensor:
        """(layers, heads): c_index, with `index` counted from 1 as in the paper (c_128)."""
        if not 1 <= index <= self.rank:
            raise ValueError(
                f"index {index} is outside 1..{self.rank}: P has r = min(L, k) = {self.rank} singular values here "
                f"(L = {self.seq_len}). Pick an index <= {self.rank}, e.g. {max(1, self.rank // 4)} (the paper's "
                "128 of 512 is r / 4)."
            )
        return self.curves[..., index - 1]


def load_encoder(name_or_path: str, trust_remote_code: bool = False):
    """The bare encoder with eager attention (so P is returned) and its tokenizer; a local dir or a Hub name."""
    import linformer_hf  # noqa: F401  (registers model_type "linformer" with the Auto classes)

    model = AutoModel.from_pretrained(name_or_path, attn_implementation="eager", trust_remote_code=trust_remote_code)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
    return model.eval(), tokenizer


def read_texts(path: str, column: str | None = None, limit: int | None = None) -> list[str]:
    """Texts from a .txt file (one per non-empty line, wikitext '= heading =' lines skipped) or a .tsv/.csv column."""
    texts = []
    if path.endswith((".tsv", ".csv")):
        delimiter = "\t" if path.endswith(".tsv") else ","
        with open(path, encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle, delimiter=delimiter)
            if column is None:
                column = next((name for name in ("sentence", "text", "review") if name in reader.fieldnames), None)
            if column not in (reader.fieldnames or []):
                raise ValueError(f"{path} has columns {reader.fieldnames}; name the text column with --text_column.")
            for row in reader:
                texts.append(row[column])
                if limit and len(texts) >= limit:
                    break
    else:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line and not (line.startswith("=") and line.endswith("=")):
                    texts.append(line)
                    if limit and len(texts) >= limit:
                        break
    if not texts:
        raise ValueError(f"No text found in {path}.")
    return texts


def pack_inputs(tokenizer, texts: list[str], seq_len: int, max_inputs: int) -> torch.Tensor:
    """(num_inputs, seq_len) token ids: texts joined by </s> and cut into full chunks, each wrapped in <s> .. </s>.

    Every input has exactly `seq_len` real tokens, so P is never shaped by padding. Raises if the text cannot fill
    one chunk; the last partial chunk is left out (the count used is returned in the Spectrum).
    """
    body = seq_len - 2
    stream: list[int] = []
    for text in texts:
        stream += tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(stream) >= body * max_inputs:
            break
    count = min(len(stream) // body, max_inputs)
    if count == 0:
        raise ValueError(
            f"The text gives {len(stream)} tokens, fewer than one input of {seq_len}: give more text or "
            "a smaller --seq_len."
        )
    chunks = [
        [tokenizer.bos_token_id] + stream[i * body : (i + 1) * body] + [tokenizer.eos_token_id] for i in range(count)
    ]
    return torch.tensor(chunks)


def cumulative_spectrum(attention: torch.Tensor) -> torch.Tensor:
    """(..., L, k) attention probabilities -> (..., min(L, k)) normalised cumulative singular values."""
    singular_values = torch.linalg.svdvals(attention.double())
    cumulative = singular_values.cumsum(-1)
    return cumulative / cumulative[..., -1:]


@torch.no_grad()
def compute_spectrum(model, input_ids: torch.Tensor, batch_size: int = 8, model_name: str = "") -> Spectrum:
    """Average, over the rows of `input_ids`, each layer's and head's cumulative spectrum of P."""
    totals = None  # per layer: (heads, r_layer) summed over inputs
    for start in range(0, input_ids.shape[0], batch_size):
        batch = input_ids[start : start + batch_size]
        attentions = model(batch, attention_mask=torch.ones_like(batch), output_attentions=True).attentions
        if not attentions:
            raise ValueError(
                f"{type(model).__name__} returned no attention probabilities; load it with "
                "attn_implementation='eager' (load_encoder does)."
            )
        sums = [cumulative_spectrum(probs).sum(0) for probs in attentions]
        totals = sums if totals is None else [total + new for total, new in zip(totals, sums)]
    layer_ranks = [total.shape[-1] for total in totals]
    rank = max(layer_ranks)
    curves = torch.ones(len(totals), totals[0].shape[0], rank, dtype=torch.float64)
    for layer, total in enumerate(totals):
        curves[layer, :, : total.shape[-1]] = total / input_ids.shape[0]
    return Spectrum(
        curves=curves.float(),
        num_inputs=input_ids.shape[0],
        seq_len=input_ids.shape[1],
        model_name=model_name or getattr(model.config, "_name_or_path", ""),
        layer_ranks=layer_ranks,
    )


def write_csv(spectrum: Spectrum, index: int, output_dir: str) -> dict[str, str]:
    """spectrum_curves.csv (layer, head, index, cumulative) and spectrum_at_index.csv (layer, head, cumulative)."""
    os.makedirs(output_dir, exist_ok=True)
    paths = {
        "curves": os.path.join(output_dir, "spectrum_curves.csv"),
        "at_index": os.path.join(output_dir, "spectrum_at_index.csv"),
        "summary": os.path.join(output_dir, "spectrum_summary.json"),
    }
    layers, heads, rank = spectrum.curves.shape
    with open(paths["curves"], "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "head", "index", "cumulative_normalised_singular_value"])
        for layer in range(layers):
            for head in range(heads):
                for i in range(spectrum.layer_ranks[layer] if spectrum.layer_ranks else rank):
                    writer.writerow([layer, head, i + 1, f"{spectrum.curves[layer, head, i].item():.6f}"])
    values = spectrum.at_index(index)
    with open(paths["at_index"], "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["layer", "head", f"cumulative_at_{index}"])
        for layer in range(layers):
            for head in range(heads):
                writer.writerow([layer, head, f"{values[layer, head].item():.6f}"])
    with open(paths["summary"], "w") as handle:
        json.dump(
            {
                "model": spectrum.model_name,
                "num_inputs": spectrum.num_inputs,
                "seq_len": spectrum.seq_len,
                "rank": rank,
                "layer_ranks": spectrum.layer_ranks,
                "index": index,
                "mean_at_index_per_layer": [round(v, 6) for v in values.mean(-1).tolist()],
                "mean_at_index": round(values.mean().item(), 6),
                # c_1 near 1 means P is close to rank one, e.g. near-uniform attention in an untrained model: low rank
                # for a trivial reason, which the paper's claim is not about.
                "mean_first_singular_share_per_layer": [round(v, 6) for v in spectrum.curves[..., 0].mean(-1).tolist()],
            },
            handle,
            indent=2,
        )
    return paths


def plot(spectrum: Spectrum, index: int, output_dir: str, title: str | None = None) -> dict[str, str]:
    """spectrum_curves.png (per layer: mean over heads, band = min..max over heads) and spectrum_heatmap.png."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    os.makedirs(output_dir, exist_ok=True)
    layers, heads, rank = spectrum.curves.shape
    title = title or spectrum.model_name
    x = torch.arange(1, rank + 1)
    colours = plt.cm.viridis(torch.linspace(0, 1, layers).tolist())

    figure, axes = plt.subplots(figsize=(5.5, 4))
    for layer in range(layers):
        curves = spectrum.curves[layer]
        axes.plot(x, curves.mean(0), color=colours[layer], label=f"layer {layer + 1}", linewidth=1.2)
        axes.fill_between(x, curves.min(0).values, curves.max(0).values, color=colours[layer], alpha=0.15)
    axes.axvline(index, color="grey", linestyle="--", linewidth=0.8)
    axes.set_xlabel("singular value index")
    axes.set_ylabel("normalised cumulative singular value")
    axes.set_ylim(0, 1.02)
    axes.set_title(f"{title}\nP spectrum, {spectrum.num_inputs} inputs of {spectrum.seq_len} tokens", fontsize=9)
    axes.legend(fontsize=7, ncol=2 if layers > 6 else 1, loc="lower right")
    figure.tight_layout()
    curves_path = os.path.join(output_dir, "spectrum_curves.png")
    figure.savefig(curves_path, dpi=110)
    plt.close(figure)

    values = spectrum.at_index(index)
    figure, axes = plt.subplots(figsize=(0.45 * heads + 2.5, 0.35 * layers + 1.8))
    image = axes.imshow(values, cmap="viridis", aspect="auto", vmin=float(values.min()), vmax=1.0)
    if layers * heads <= 256:  # numbers stay legible
        for layer in range(layers):
            for head in range(heads):
                axes.text(
                    head,
                    layer,
                    f"{values[layer, head]:.3f}",
                    ha="center",
                    va="center",
                    fontsize=6,
                    color="white" if values[layer, head] < values.mean() else "black",
                )
    axes.set_xticks(range(heads), [str(h + 1) for h in range(heads)], fontsize=7)
    axes.set_yticks(range(layers), [str(layer + 1) for layer in range(layers)], fontsize=7)
    axes.set_xlabel("head")
    axes.set_ylabel("layer")
    axes.set_title(f"cumulative singular value at index {index} of {rank}", fontsize=9)
    figure.colorbar(image, ax=axes)
    figure.tight_layout()
    heatmap_path = os.path.join(output_dir, "spectrum_heatmap.png")
    figure.savefig(heatmap_path, dpi=110)
    plt.close(figure)
    return {"curves_plot": curves_path, "heatmap": heatmap_path}


def analyze(
    name_or_path: str,
    text_path: str,
    output_dir: str,
    seq_len: int | None = None,
    max_inputs: int = 32,
    index: int | None = None,
    text_column: str | None = None,
    batch_size: int = 8,
    trust_remote_code: bool = False,
    title: str | None = None,
) -> tuple[Spectrum, dict[str, str]]:
    """Load, pack text, compute, and write CSV + plots; `index` defaults to r / 4 (the paper's 128 of 512)."""
    model, tokenizer = load_encoder(name_or_path, trust_remote_code)
    limit = max_input_length(model.config)
    seq_len = seq_len or limit
    if seq_len > limit:
        raise ValueError(f"seq_len {seq_len} exceeds the model's maximum input length {limit}.")
    input_ids = pack_inputs(tokenizer, read_texts(text_path, text_column), seq_len, max_inputs)
    spectrum = compute_spectrum(model, input_ids, batch_size, model_name=name_or_path)
    index = index or max(1, spectrum.rank // 4)
    paths = write_csv(spectrum, index, output_dir)
    paths.update(plot(spectrum, index, output_dir, title))
    return spectrum, paths


__all__ = [
    "Spectrum",
    "analyze",
    "compute_spectrum",
    "cumulative_spectrum",
    "load_encoder",
    "pack_inputs",
    "plot",
    "read_texts",
    "write_csv",
]
