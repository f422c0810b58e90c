"""The paper's Figure 1 for any encoder: how low-rank is each head's context mapping P?

For every layer and head, P = softmax(Q K^T / sqrt(d_h)) is (L x L) for RoBERTa and (L x k) for Linformer. Its
singular values s_1 >= s_2 >= ... give the normalised cumulative spectrum c_i = (s_1 + ... + s_i) / (s_1 + ... + s_r),
r = min(L, k). The paper (Wang et al., 2020, Fig. 1) shows for a pretrained RoBERTa at L = 512 that c_128 is already
high (more so in higher layers), i.e. P is approximately low-rank. Here the curves are averaged over inputs of exactly L
real tokens, so no padding enters P: packed chunks of any text, or the first L tokens of each document that long.

Beside the spectrum, the structure that decides it: for square P (L x L, key positions as columns) the mean attention
mass per offset j - i near the diagonal (local and positional heads, e.g. "previous token") and on special tokens
([CLS], [SEP], <s>, </s>). A head that puts its mass on a thin band around the diagonal is close to a shifted identity,
which is full rank: the low-rank argument cannot hold for it.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass

import torch
from transformers import AutoModel, AutoTokenizer

from linformer_hf.models import max_input_length
from linformer_hf.outputs import write_csv_atomic, write_text_atomic


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
    # Square P only (L x L; None for a Linformer's L x k): mean over query rows i of P[i, i + d] for the offsets
    # d = -locality_width .. +locality_width, and of the mass on columns holding special tokens.
    offset_mass: torch.Tensor | None = None  # (layers, heads, 2 * locality_width + 1)
    special_mass: torch.Tensor | None = None  # (layers, heads)
    locality_width: int = 2
    windows: str = "packed"

    @property
    def local_mass(self) -> torch.Tensor | None:
        """(layers, heads): mean attention mass on keys within `locality_width` positions of the query."""
        return None if self.offset_mass is None else self.offset_mass.sum(-1)

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


def _window_body_length(tokenizer, seq_len: int) -> int:
    """Tokens of text in a window of `seq_len` once the framing of `_frame` is added."""
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise ValueError(
            f"{type(tokenizer).__name__} has no cls/sep tokens to frame a window with (BERT: [CLS] .. [SEP], "
            "RoBERTa: <s> .. </s>); use an encoder tokenizer that defines them."
        )
    return seq_len - 2


def _frame(tokenizer, body: list[int]) -> list[int]:
    """One window as the encoder saw single texts in training: [CLS] body [SEP] (BERT), <s> body </s> (RoBERTa)."""
    return [tokenizer.cls_token_id] + body + [tokenizer.sep_token_id]


def _token_ids(tokenizer, text: str) -> list[int]:
    # verbose=False: texts longer than the model are expected here (windows are cut from them)
    return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]


def pack_inputs(tokenizer, texts: list[str], seq_len: int, max_inputs: int) -> torch.Tensor:
    """(num_inputs, seq_len) token ids: texts joined by the separator token and cut into full chunks, each framed by
    [CLS] .. [SEP] (<s> .. </s> for RoBERTa).

    Every input has exactly `seq_len` real tokens, so P is never shaped by padding. Raises if the text cannot fill
    one chunk; the last partial chunk is left out (the count used is returned in the Spectrum).
    """
    body = _window_body_length(tokenizer, seq_len)
    stream: list[int] = []
    for text in texts:
        stream += _token_ids(tokenizer, text) + [tokenizer.sep_token_id]
        if len(stream) >= body * max_inputs:
            break
    count = min(len(stream) // body, max_inputs)
    if count == 0:
        raise ValueError(
            f"The text gives {len(stream)} tokens, fewer than one input of {seq_len}: give more text or "
            "a smaller --seq_len."
        )
    chunks = [_frame(tokenizer, stream[i * body : (i + 1) * body]) for i in range(count)]
    return torch.tensor(chunks)


def document_windows(tokenizer, texts: list[str], seq_len: int, max_inputs: int) -> torch.Tensor:
    """(num_inputs, seq_len) token ids: the first `seq_len` tokens (framing included) of each text that is at least
    that long, in order, so every input is one real document with no padding and no seams between documents.

    Raises, naming the longest text, if no text is long enough.
    """
    body = _window_body_length(tokenizer, seq_len)
    chunks, longest = [], 0
    for text in texts:
        ids = _token_ids(tokenizer, text)
        longest = max(longest, len(ids))
        if len(ids) >= body:
            chunks.append(_frame(tokenizer, ids[:body]))
            if len(chunks) == max_inputs:
                break
    if not chunks:
        raise ValueError(
            f"None of the {len(texts)} texts has {body} tokens (the longest has {longest}), so no window of "
            f"{seq_len} real tokens can be cut from one document: use --windows packed or a smaller --seq_len."
        )
    return torch.tensor(chunks)


WINDOW_KINDS = {"packed": pack_inputs, "documents": document_windows}


def cumulative_spectrum(attention: torch.Tensor) -> torch.Tensor:
    """(..., L, k) attention probabilities -> (..., min(L, k)) normalised cumulative singular values.

    The singular values are the square roots of the eigenvalues of the smaller Gram matrix (P P^T or P^T P), in
    double precision: on MiniLM's P at L = 512 this was 3-4x faster on one CPU thread than `svdvals` (whose
    iterative solver slows down on the many near-zero singular values of sharp attention) and the curve agreed to
    5e-13. Rounding makes some of the tiny eigenvalues slightly negative; they are 0.
    """
    attention = attention.double()
    gram = attention @ attention.mT if attention.shape[-2] <= attention.shape[-1] else attention.mT @ attention
    singular_values = torch.linalg.eigvalsh(gram).clamp(min=0).sqrt().flip(-1)  # descending
    cumulative = singular_values.cumsum(-1)
    return cumulative / cumulative[..., -1:]


def attention_structure(
    attention: torch.Tensor, special_columns: torch.Tensor, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch, heads, L, L) P and (batch, L) bool special-token columns ->
    offset mass (batch, heads, 2 * width + 1): mean over query rows i of P[i, i + d], d = -width .. width, and
    special mass (batch, heads): mean over rows of the mass on special-token columns.

    Rows near the edges have no key at some offsets; they count 0 there, so a uniform P gives (L - |d|) / L^2.
    """
    length = attention.shape[-1]
    offsets = [torch.diagonal(attention, offset=d, dim1=-2, dim2=-1).sum(-1) / length for d in range(-width, width + 1)]
    special = (attention * special_columns[:, None, None, :]).sum(-1).mean(-1)
    return torch.stack(offsets, -1), special


@torch.no_grad()
def compute_spectrum(
    model,
    input_ids: torch.Tensor,
    batch_size: int = 8,
    model_name: str = "",
    special_token_ids: list[int] | None = None,
    locality_width: int = 2,
    windows: str = "packed",
) -> Spectrum:
    """Average, over the rows of `input_ids`, each layer's and head's cumulative spectrum of P, and for square P the
    attention mass near the diagonal and on `special_token_ids` (default: the first and last token of each input)."""
    if special_token_ids is None:
        special_columns = torch.zeros_like(input_ids, dtype=torch.bool)
        special_columns[:, [0, -1]] = True
    else:
        special_columns = torch.isin(input_ids, torch.tensor(special_token_ids))
    totals = None  # per layer: (heads, r_layer) summed over inputs
    structure = None  # per layer: (offset mass (heads, 2w+1), special mass (heads,)) summed over inputs; square P only
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
        # Columns are key positions only for square P. (A Linformer with k = L passes this test too; its columns
        # are E's rows, which are positions when E is the identity, as after conversion at k = n.)
        if all(probs.shape[-1] == probs.shape[-2] for probs in attentions):
            measured = [
                tuple(
                    part.double().sum(0)
                    for part in attention_structure(probs, special_columns[start : start + batch_size], locality_width)
                )
                for probs in attentions
            ]
            structure = (
                measured
                if structure is None
                else [(o + new_o, sp + new_sp) for (o, sp), (new_o, new_sp) in zip(structure, measured)]
            )
    count = input_ids.shape[0]
    layer_ranks = [total.shape[-1] for total in totals]
    rank = max(layer_ranks)
    curves = torch.ones(len(totals), totals[0].shape[0], rank, dtype=torch.float64)
    for layer, total in enumerate(totals):
        curves[layer, :, : total.shape[-1]] = total / count
    return Spectrum(
        curves=curves.float(),
        num_inputs=count,
        seq_len=input_ids.shape[1],
        model_name=model_name or getattr(model.config, "_name_or_path", ""),
        layer_ranks=layer_ranks,
        offset_mass=None if structure is None else torch.stack([o for o, _ in structure]).float() / count,
        special_mass=None if structure is None else torch.stack([sp for _, sp in structure]).float() / count,
        locality_width=locality_width,
        windows=windows,
    )


def default_report_indices(rank: int) -> list[int]:
    """r / 8, r / 4, r / 2: the paper's 128 of 512 with a step either side (64 and 256)."""
    return sorted({max(1, rank // 8), max(1, rank // 4), max(1, rank // 2)})


def write_csv(
    spectrum: Spectrum, index: int, output_dir: str, report_indices: list[int] | None = None
) -> dict[str, str]:
    """spectrum_curves.csv (layer, head, index, cumulative), spectrum_at_index.csv (layer, head, cumulative),
    spectrum_heads.csv (per head: cumulative at each report index, first singular value's share, and for square P
    the mass per offset near the diagonal and on special tokens) and spectrum_summary.json. Layers and heads are
    counted from 0 in the CSVs."""
    os.makedirs(output_dir, exist_ok=True)
    report_indices = report_indices or default_report_indices(spectrum.rank)
    paths = {
        "curves": os.path.join(output_dir, "spectrum_curves.csv"),
        "at_index": os.path.join(output_dir, "spectrum_at_index.csv"),
        "heads": os.path.join(output_dir, "spectrum_heads.csv"),
        "summary": os.path.join(output_dir, "spectrum_summary.json"),
    }
    layers, heads, rank = spectrum.curves.shape
    # Each file whole or absent (`write_csv_atomic`): a run stopped or killed mid-write leaves no file cut short.
    write_csv_atomic(
        paths["curves"],
        ["layer", "head", "index", "cumulative_normalised_singular_value"],
        (
            [layer, head, i + 1, f"{spectrum.curves[layer, head, i].item():.6f}"]
            for layer in range(layers)
            for head in range(heads)
            for i in range(spectrum.layer_ranks[layer] if spectrum.layer_ranks else rank)
        ),
    )
    values = spectrum.at_index(index)
    write_csv_atomic(
        paths["at_index"],
        ["layer", "head", f"cumulative_at_{index}"],
        ([layer, head, f"{values[layer, head].item():.6f}"] for layer in range(layers) for head in range(heads)),
    )
    at_reports = {i: spectrum.at_index(i) for i in report_indices}
    width = spectrum.locality_width
    offsets = list(range(-width, width + 1))
    header = ["layer", "head"] + [f"cumulative_at_{i}" for i in report_indices] + ["first_singular_share"]
    if spectrum.offset_mass is not None:
        header += [f"local_mass_within_{width}"] + [f"mass_at_offset_{d:+d}" for d in offsets]
        header += ["special_token_mass"]

    def head_row(layer: int, head: int) -> list:
        row = [layer, head] + [f"{at_reports[i][layer, head].item():.6f}" for i in report_indices]
        row.append(f"{spectrum.curves[layer, head, 0].item():.6f}")
        if spectrum.offset_mass is not None:
            row.append(f"{spectrum.local_mass[layer, head].item():.6f}")
            row += [f"{v:.6f}" for v in spectrum.offset_mass[layer, head].tolist()]
            row.append(f"{spectrum.special_mass[layer, head].item():.6f}")
        return row

    write_csv_atomic(
        paths["heads"], header, (head_row(layer, head) for layer in range(layers) for head in range(heads))
    )
    structure = {}
    if spectrum.offset_mass is not None:
        structure = {
            "locality_width": width,
            "mean_local_mass_per_layer": [round(v, 6) for v in spectrum.local_mass.mean(-1).tolist()],
            "mean_special_token_mass_per_layer": [round(v, 6) for v in spectrum.special_mass.mean(-1).tolist()],
            # Pearson correlation over heads: negative when the local heads are the less low-rank ones
            "correlation_local_mass_vs_cumulative_at_index": round(
                torch.corrcoef(torch.stack([spectrum.local_mass.flatten(), values.flatten()]))[0, 1].item(), 4
            ),
        }
    write_text_atomic(
        paths["summary"],
        json.dumps(
            {
                "model": spectrum.model_name,
                "windows": spectrum.windows,
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
                "mean_at_report_indices_per_layer": {
                    str(i): [round(v, 6) for v in at_reports[i].mean(-1).tolist()] for i in report_indices
                },
                "min_at_report_indices": {str(i): round(at_reports[i].min().item(), 6) for i in report_indices},
                **structure,
            },
            indent=2,
        ),
    )
    return paths


def plot(spectrum: Spectrum, index: int, output_dir: str, title: str | None = None) -> dict[str, str]:
    """spectrum_curves.png (per layer: mean over heads, band = min..max over heads), spectrum_heatmap.png (layers x
    heads at `index`), spectrum_curves_per_head.png (one panel a layer, one curve a head) and, for square P,
    spectrum_structure.png (each head's value at `index` against its local and special-token attention mass)."""
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
    paths = {"curves_plot": curves_path, "heatmap": heatmap_path}

    # One panel a layer; with square P each head is coloured by its local mass, so near-diagonal heads stand out.
    columns = min(3, layers)
    rows = -(-layers // columns)
    figure, grid = plt.subplots(
        rows, columns, figsize=(3.2 * columns, 2.6 * rows), sharex=True, sharey=True, squeeze=False
    )
    local = spectrum.local_mass
    for layer in range(layers):
        axes = grid[layer // columns][layer % columns]
        for head in range(heads):
            shade = plt.cm.plasma(float(local[layer, head])) if local is not None else None
            axes.plot(x, spectrum.curves[layer, head], color=shade, linewidth=0.9)
        axes.axvline(index, color="grey", linestyle="--", linewidth=0.7)
        axes.set_title(f"layer {layer + 1}", fontsize=8)
        axes.set_ylim(0, 1.02)
        axes.tick_params(labelsize=7)
    for empty in range(layers, rows * columns):
        grid[empty // columns][empty % columns].axis("off")
    figure.supxlabel("singular value index", fontsize=8)
    figure.supylabel("normalised cumulative singular value", fontsize=8)
    if local is not None:
        mappable = plt.cm.ScalarMappable(cmap="plasma", norm=matplotlib.colors.Normalize(0, 1))
        figure.colorbar(mappable, ax=grid, label=f"mass within {spectrum.locality_width} of the diagonal", shrink=0.8)
    figure.suptitle(f"{title}: every head", fontsize=9)
    paths["curves_per_head_plot"] = os.path.join(output_dir, "spectrum_curves_per_head.png")
    figure.savefig(paths["curves_per_head_plot"], dpi=100)
    plt.close(figure)

    if local is not None:
        figure, panels = plt.subplots(1, 2, figsize=(8, 3.4), sharey=True)
        layer_of = torch.arange(layers)[:, None].expand(layers, heads).flatten()
        for axes, measure, label in (
            (panels[0], local, f"mean attention mass on |i - j| <= {spectrum.locality_width}"),
            (panels[1], spectrum.special_mass, "mean attention mass on special tokens"),
        ):
            points = axes.scatter(
                measure.flatten(), values.flatten(), c=layer_of + 1, cmap="viridis", s=16, vmin=1, vmax=layers
            )
            axes.set_xlabel(label, fontsize=8)
            axes.set_xlim(0, 1)
            axes.tick_params(labelsize=7)
        panels[0].set_ylabel(f"cumulative singular value at {index}", fontsize=8)
        figure.colorbar(points, ax=panels, label="layer")
        figure.suptitle(f"{title}: what the low-rank heads attend to", fontsize=9)
        paths["structure_plot"] = os.path.join(output_dir, "spectrum_structure.png")
        figure.savefig(paths["structure_plot"], dpi=100)
        plt.close(figure)
    return paths


def check_indices(model, input_ids: torch.Tensor, index: int | None, report_indices: list[int] | None) -> None:
    """Before the work: every index asked for is within 1..r, r read off one input's attention matrices (r = min(L, k)
    for a Linformer), so that a wrong --index is said now, not after every input was analysed."""
    asked = [i for i in [index, *(report_indices or [])] if i is not None]
    if not asked:
        return
    with torch.no_grad():
        attentions = model(
            input_ids[:1], attention_mask=torch.ones_like(input_ids[:1]), output_attentions=True
        ).attentions
    rank = max(min(probs.shape[-2:]) for probs in attentions) if attentions else None
    wrong = [i for i in asked if i < 1 or (rank is not None and i > rank)]
    if wrong:
        raise ValueError(
            f"index {wrong[0]} is outside 1..{rank}: P has r = min(L, k) = {rank} singular values here "
            f"(L = {input_ids.shape[1]}). Pick --index / --report_indices within 1..{rank}, e.g. {max(1, rank // 4)} "
            "(the paper's 128 of 512 is r / 4)."
        )


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
    windows: str = "packed",
    report_indices: list[int] | None = None,
    locality_width: int = 2,
) -> tuple[Spectrum, dict[str, str]]:
    """Load, cut text into windows, compute, and write CSV + plots; `index` defaults to r / 4 (the paper's 128 of
    512), `report_indices` to r / 8, r / 4, r / 2.

    `name_or_path`: any encoder folder or Hub name AutoModel loads with eager attention (RoBERTa, BERT layout such as
    MiniLM, a Linformer made by the conversion). `windows`: "packed" (texts joined, cut into full windows) or
    "documents" (the first seq_len tokens of each text that long, e.g. IMDB reviews).
    """
    if windows not in WINDOW_KINDS:
        raise ValueError(f"windows must be one of {sorted(WINDOW_KINDS)}, got {windows!r}.")
    model, tokenizer = load_encoder(name_or_path, trust_remote_code)
    limit = max_input_length(model.config)
    seq_len = seq_len or limit
    if seq_len > limit:
        raise ValueError(f"seq_len {seq_len} exceeds the model's maximum input length {limit}.")
    input_ids = WINDOW_KINDS[windows](tokenizer, read_texts(text_path, text_column), seq_len, max_inputs)
    check_indices(model, input_ids, index, report_indices)
    spectrum = compute_spectrum(
        model,
        input_ids,
        batch_size,
        model_name=name_or_path,
        special_token_ids=tokenizer.all_special_ids,
        locality_width=locality_width,
        windows=windows,
    )
    index = max(1, spectrum.rank // 4) if index is None else index
    paths = write_csv(spectrum, index, output_dir, report_indices)
    paths.update(plot(spectrum, index, output_dir, title))
    return spectrum, paths


__all__ = [
    "WINDOW_KINDS",
    "Spectrum",
    "analyze",
    "attention_structure",
    "compute_spectrum",
    "cumulative_spectrum",
    "default_report_indices",
    "document_windows",
    "load_encoder",
    "pack_inputs",
    "plot",
    "read_texts",
    "write_csv",
]
