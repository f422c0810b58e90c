"""Attention transfer: make a converted Linformer compute what its teacher (the original encoder) computes, cheaply.

A converted Linformer keeps every weight of its teacher, but its attention sees k compressed key/value rows instead
of L, so each layer's attention output drifts from the teacher's and the drift compounds through the stack. Transfer
trains the student to undo that, in two stages:

1. **Layer-local** (the idea of LoLCATs' attention transfer, Zhang et al. 2024): every student layer is fed the
   teacher's own layer input X_l, and its self-attention output is pulled towards the teacher's on the same X_l.
   Only E, F (and, as an option, the layer's W^Q, W^K, W^V) train. The layers train independently and nothing is
   backpropagated through the stack, so one teacher forward per batch serves all layers.
2. **End-to-end** (optional): every student weight trains so that its hidden states (and its MLM logits, where both
   models have an MLM head) match the teacher's on the same input.

What stage 1 matches on the teacher's layer input X_l (``--layer_loss``), each layer-local, summed over real tokens
and averaged over layers:

- ``attention_output`` (the default): the self-attention output before W^O (LoLCATs' attention transfer),
  ||S - T||^2 / ||T||^2 (or the MSE with ``--loss mse``).
- ``attention_weights`` (Hedgehog, Zhang et al. 2024, for a Linformer with learned E): per head h and real query i,
  the cross-entropy -sum_t P_it log A_it between the teacher's softmax weights P_i = softmax(q_i K^T / sqrt(d_h)) over
  the L positions (the teacher's own W^Q, W^K on X_l) and the student's weights over its k slots mapped back to
  positions through E: A_i = Pbar_i Ehat, with Pbar_i = softmax(q_i (E K)^T / sqrt(d_h)) over the slots and Ehat the
  first L columns of |E| with padded positions zeroed, each row normalised to sum 1 (slot j's attention is spread over
  the tokens it compresses, in proportion to |E_jt|). A_i sums to 1. The loss reported and minimised is that
  cross-entropy minus the teacher's entropy -sum_t P_it log P_it (a constant: the same gradients), i.e.
  KL(P_i || A_i), 0 when the student's weights are the teacher's (as at k = n with identity E). Hedgehog distils
  softmax weights into a feature map; here they are those of a softmax over compressed keys.
- ``hidden_states`` (CALD's layer-wise hidden-state distillation, ICLR 2025, layer-local): the whole layer (attention,
  W^O, feed-forward, LayerNorms) on X_l against the teacher's layer output X_{l+1}, with ``--loss``.

Both stages run on windows of the lengths the model will serve (short and long, `--lengths`), one length per batch in
turn, with dropout off in both models: the target is a deterministic function of the input. A batch is a pure
function of (seed, step), so a run resumed from a checkpoint (`accelerator.save_state`) continues exactly as it would
have gone on.

The student may also be a Performer (`scripts/convert_to_linformer.py --family performer`). FAVOR+ has no
parameters of its own (its random features are a fixed buffer), so stage 1 trains W^Q, W^K, W^V only, and only with
`--train_attention_weights`; with the softmax kernel a converted Performer already estimates the teacher's attention,
and what is left to learn is to adapt W^Q, W^K, W^V to the m features drawn.

This module lives in `training/` beside the pretraining and fine-tuning loops: it is a training loop run under
`accelerate launch`, needs the `train` extra (accelerate, datasets, tqdm), and is not part of the model API.

Usage: `accelerate launch scripts/transfer_attention.py --teacher DIR_OR_HUB_NAME --student CONVERTED_DIR ...`
(or `python -m linformer_hf.training.transfer`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import time
from typing import Literal

import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer, HfArgumentParser

from ..loading import load_model, pad_as_the_model_takes
from ..models.lengths import max_input_length
from ..models.modeling_linformer import LinformerForMaskedLM, LinformerPreTrainedModel
from ..models.modeling_performer import PerformerForMaskedLM, PerformerPreTrainedModel
from ..outputs import finite_or_null, write_json_atomic, write_text_atomic
from .checkpointing import LOCK_FILE, TMP_PREFIX, RunLock, publish_dir, temporary_name
from .errors import LOCAL_MODEL, Preempted, hub_unreachable, hub_unreachable_error
from .guards import DivergenceGuard, StopSignal, check_weights_finite, gradients_finite, resume_hint
from .validation import check_model_source

# The student families (converted with scripts/convert_to_linformer.py [--family performer]), by model_type.
STUDENT_FAMILIES = {"linformer": LinformerPreTrainedModel, "performer": PerformerPreTrainedModel}
STUDENT_MASKED_LM = (LinformerForMaskedLM, PerformerForMaskedLM)

TEACHER_MODEL_TYPES = ("bert", "roberta")
# Whether a source checkpoint carries an MLM head that stage 2 can match.
MLM_ARCHITECTURE_SUFFIXES = ("ForMaskedLM", "ForPreTraining")


@dataclasses.dataclass
class TransferArguments:
    """Everything a transfer run needs. Field names are the script's flags (`--teacher`, `--layer_steps`, ...)."""

    teacher: str = dataclasses.field(metadata={"help": "the original model: a local folder or a Hub name"})
    student: str = dataclasses.field(
        metadata={"help": "the converted Linformer folder (scripts/convert_to_linformer.py)"}
    )
    output_dir: str = dataclasses.field(metadata={"help": "where the transferred model, log and checkpoints go"})
    text_files: list[str] | None = dataclasses.field(
        default=None, metadata={"help": "plain-text files, one document per line"}
    )
    dataset: str | None = dataclasses.field(
        default=None, metadata={"help": "a datasets name (Hub) or builder ('csv', 'json', 'text') with --data_files"}
    )
    dataset_config: str | None = None
    data_files: list[str] | None = None
    dataset_split: str = "train"
    text_column: str = "text"
    lengths: list[int] | None = dataclasses.field(
        default=None, metadata={"help": "window lengths in tokens, used in turn (default: 32 and n)"}
    )
    batch_size: int = 8
    layer_steps: int = dataclasses.field(default=200, metadata={"help": "stage 1 (layer-local) steps"})
    end_to_end_steps: int = dataclasses.field(default=0, metadata={"help": "stage 2 (end-to-end) steps; 0: none"})
    train_attention_weights: bool = dataclasses.field(
        default=False, metadata={"help": "stage 1 also trains each layer's W^Q, W^K, W^V"}
    )
    layer_loss: Literal["attention_output", "attention_weights", "hidden_states"] = dataclasses.field(
        default="attention_output",
        metadata={
            "help": "stage 1 matches each layer's attention output (default), its attention weights through E "
            "(Hedgehog; a Linformer with linear E), or its whole output (CALD); see the module docstring"
        },
    )
    loss: Literal["relative", "mse"] = dataclasses.field(
        default="relative", metadata={"help": "relative: ||S - T||^2 / ||T||^2 per layer; mse: mean squared error"}
    )
    projection_learning_rate: float | None = dataclasses.field(
        default=None,
        metadata={"help": "learning rate of E, F (default: 1e-3 x 512 / n, see default_projection_learning_rate)"},
    )
    attention_learning_rate: float = 1e-4
    end_to_end_learning_rate: float = 2e-5
    warmup_steps: int = 10
    mlm_weight: float = dataclasses.field(
        default=1.0, metadata={"help": "stage 2: weight of KL(teacher || student) on MLM logits, if both have a head"}
    )
    eval_fraction: float = dataclasses.field(
        default=0.1, metadata={"help": "share of documents held out for the fidelity evaluation"}
    )
    eval_windows: int = dataclasses.field(default=8, metadata={"help": "held-out windows per length"})
    eval_documents: int = dataclasses.field(
        default=64, metadata={"help": "held-out documents embedded whole (truncated to n) for the cosine figure"}
    )
    evaluate_only: bool = dataclasses.field(
        default=False, metadata={"help": "measure the student's fidelity on all the given text, train nothing"}
    )
    log_every: int = 10
    checkpoint_every: int = 100
    checkpoints_to_keep: int = 2
    resume: str | None = dataclasses.field(
        default=None, metadata={"help": "'latest' or a checkpoint folder to resume from"}
    )
    stop_after_steps: int | None = dataclasses.field(
        default=None, metadata={"help": "stop this process at this step, with a checkpoint, to resume later"}
    )
    nonfinite_patience: int = dataclasses.field(
        default=10,
        metadata={"help": "stop after this many updates in a row with a non-finite loss or gradients (each skipped)"},
    )
    overwrite_output_dir: bool = dataclasses.field(
        default=False,
        metadata={
            "help": "start over in a non-empty output_dir: deletes the earlier transfer's checkpoints, log, reports "
            "and model (without it such a folder is refused, unless --resume)"
        },
    )
    torch_compile: Literal["no", "layers"] = dataclasses.field(
        default="no",
        metadata={
            "help": "torch.compile each student layer and its self-attention, in place (what both stages call; one "
            "graph serves all layers); the first step's time and the graphs compiled go in the report"
        },
    )
    torch_compile_mode: str | None = dataclasses.field(
        default=None, metadata={"help": "inductor's mode with --torch_compile (default, max-autotune, ...)"}
    )
    torch_compile_backend: str | None = dataclasses.field(
        default=None, metadata={"help": "the torch.compile backend with --torch_compile (default: inductor)"}
    )
    seed: int = 0
    show_progress: bool = True

    def __post_init__(self):
        if (self.text_files is None) == (self.dataset is None):
            raise ValueError(
                "Give the text either as --text_files or as --dataset (with --data_files for a local "
                "csv/json/text builder), not both and not neither."
            )
        if (
            self.layer_steps < 0
            or self.end_to_end_steps < 0
            or (self.layer_steps + self.end_to_end_steps == 0 and not self.evaluate_only)
        ):
            raise ValueError("Nothing to train: set --layer_steps and/or --end_to_end_steps to a positive number.")
        if self.batch_size <= 0 or self.eval_windows <= 0 or self.nonfinite_patience <= 0:
            raise ValueError("--batch_size, --eval_windows and --nonfinite_patience must be positive.")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"--eval_fraction must be in (0, 1), got {self.eval_fraction}.")
        from .compiling import ConfigError, check_compile_options

        try:
            check_compile_options(
                self.torch_compile, self.torch_compile_mode, self.torch_compile_backend, "--torch_compile"
            )
        except ConfigError as error:
            raise ValueError(str(error)) from None
        if self.torch_compile not in ("no", "layers"):  # stage 1 runs the layers one by one: no whole-model graph
            raise ValueError(f"--torch_compile must be no or layers for a transfer, got {self.torch_compile!r}.")
        if self.resume is not None and self.overwrite_output_dir:
            raise ValueError(
                "--overwrite_output_dir deletes the checkpoints that --resume would continue from: give one of them."
            )

    @property
    def total_steps(self) -> int:
        return self.layer_steps + self.end_to_end_steps

    def stage_of(self, step: int) -> str:
        """'layer' for the first `layer_steps` steps (0-based), then 'end_to_end'."""
        return "layer" if step < self.layer_steps else "end_to_end"


# ---- models ----


def load_teacher(name_or_path: str):
    """The teacher in eval mode: with its MLM head where the checkpoint has one (stage 2 matches its logits), else
    the bare encoder."""
    try:
        config = AutoConfig.from_pretrained(name_or_path)
    except OSError as err:
        if hub_unreachable(err):  # transformers' message names neither the model nor the way out
            raise hub_unreachable_error("--teacher", name_or_path, err, LOCAL_MODEL) from None
        raise
    if config.model_type not in TEACHER_MODEL_TYPES:
        raise ValueError(
            f"The teacher {name_or_path} is a {config.model_type!r} model; transfer reads the attention "
            f"of {TEACHER_MODEL_TYPES} encoders (the layouts conversion accepts)."
        )
    has_mlm = any(name.endswith(MLM_ARCHITECTURE_SUFFIXES) for name in (config.architectures or []))
    auto_class = AutoModelForMaskedLM if has_mlm else AutoModel
    teacher = auto_class.from_pretrained(name_or_path)
    return teacher.eval().requires_grad_(False)


def check_pair(teacher, student, lengths: list[int], vocab_in_use: int) -> None:
    """Refuse a teacher and student that do not describe the same network, before any work is done."""
    if not isinstance(student, tuple(STUDENT_FAMILIES.values())):
        raise ValueError(
            f"The student must be a Linformer or a Performer (converted with scripts/convert_to_linformer.py "
            f"[--family performer]), got {type(student).__name__}."
        )
    t, s = teacher.config, student.config
    if bool(t.is_decoder) != bool(s.is_decoder):
        raise ValueError(
            f"The teacher is {'causal' if t.is_decoder else 'bidirectional'} (is_decoder={t.is_decoder}) but the "
            f"student is {'causal' if s.is_decoder else 'bidirectional'}: convert the student from this teacher."
        )
    for field in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"):
        if getattr(t, field) != getattr(s, field):
            raise ValueError(
                f"Teacher and student differ in {field}: teacher {getattr(t, field)}, student {getattr(s, field)}. "
                "The student must be converted from this teacher (scripts/convert_to_linformer.py TEACHER STUDENT)."
            )
    if vocab_in_use > s.vocab_size:
        raise ValueError(
            f"The tokenizer has {vocab_in_use} tokens but the models only {s.vocab_size} embeddings: "
            "use the tokenizer saved with the student."
        )
    teacher_positions = max_input_length(t)
    for length in lengths:
        if length > max_input_length(s):
            raise ValueError(
                f"Window length {length} exceeds the student's n={max_input_length(s)}: drop it from "
                "--lengths or convert with a larger --max_sequence_length."
            )
        if length > teacher_positions:
            raise ValueError(
                f"Window length {length} exceeds the teacher's {teacher_positions} positions, so the "
                "teacher has no output to match there: drop it from --lengths."
            )


def teacher_attention_layers(teacher) -> list[torch.nn.Module]:
    return [layer.attention.self for layer in teacher.base_model.encoder.layer]


@contextlib.contextmanager
def capture_attention(teacher):
    """Record each teacher layer's self-attention input X_l and output (before W^O) during a forward.

    Yields a list, filled per forward with one (X_l, output) pair per layer, both (batch, L, d).
    """
    records: list[tuple[torch.Tensor, torch.Tensor]] = []

    def hook(module, args, kwargs, output):
        hidden_states = args[0] if args else kwargs["hidden_states"]
        records.append((hidden_states.detach(), output[0].detach()))

    layers = teacher_attention_layers(teacher)
    handles = [module.register_forward_hook(hook, with_kwargs=True) for module in layers]
    try:
        yield records
        if records and len(records) != len(layers):
            raise RuntimeError(
                f"Captured {len(records)} attention outputs from a {len(layers)}-layer teacher: its "
                "self-attention modules were not each called once per forward."
            )
    finally:
        for handle in handles:
            handle.remove()


def student_attention(student, layer_idx: int, hidden_states, mask):
    """Layer `layer_idx`'s self-attention output (before W^O) on the given layer input: (batch, L, d).

    Linformer's layers take the layerwise-shared projection beside the padding mask; Performer's the mask alone (its
    random features stay as they are: the encoder, not run here, owns the redraw schedule)."""
    encoder = student.base_model.encoder
    attention = encoder.layer[layer_idx].attention.self
    if isinstance(student, LinformerPreTrainedModel):
        output, _ = attention(hidden_states, mask, encoder.shared_projection)
    else:
        output, _ = attention(hidden_states, mask)
    return output


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


# ---- data ----


def load_texts(args: TransferArguments) -> list[str]:
    """The documents: lines of text files, or a column of a datasets dataset (Hub name or a local builder)."""
    from datasets import load_dataset

    if args.text_files:
        missing = [path for path in args.text_files if not os.path.exists(path)]
        if missing:
            raise FileNotFoundError(f"--text_files not found: {missing}")
        dataset, column = load_dataset("text", data_files=args.text_files, split="train"), "text"
    else:
        extra = {}
        if args.dataset == "csv" and args.data_files and all(path.endswith(".tsv") for path in args.data_files):
            extra = {"delimiter": "\t", "quoting": 3}  # GLUE's TSV files have no quoting
        try:
            dataset = load_dataset(
                args.dataset, args.dataset_config, data_files=args.data_files, split=args.dataset_split, **extra
            )
        except ConnectionError as err:  # offline, or no network, and not cached
            raise hub_unreachable_error(
                "--dataset",
                args.dataset,
                err,
                "give local text instead: --text_files F, or --dataset csv/json with --data_files F",
            ) from None
        column = args.text_column
        if column not in dataset.column_names:
            raise ValueError(
                f"{args.dataset} has no column {column!r} (columns: {dataset.column_names}); pass --text_column."
            )
    texts = [text for text in dataset[column] if text and text.strip()]
    if not texts:
        raise ValueError("The text source holds no non-empty document.")
    return texts


@dataclasses.dataclass
class TokenStreams:
    """Training and held-out token streams (documents concatenated, no special tokens), split by document."""

    train: torch.Tensor
    held_out: torch.Tensor
    held_out_documents: list[str]


def tokenize_streams(texts: list[str], tokenizer, eval_fraction: float, seed: int) -> TokenStreams:
    """Shuffle the documents (seeded), hold out the first `eval_fraction` of them, concatenate each part's tokens.

    `eval_fraction=1` holds out everything (evaluation only)."""
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
    held_out_count = max(1, round(len(texts) * eval_fraction))
    if held_out_count >= len(texts) and eval_fraction < 1:
        raise ValueError(f"{len(texts)} document(s) cannot be split into training and held-out text; give more.")
    ids = tokenizer([texts[i] for i in order], add_special_tokens=False, verbose=False)["input_ids"]

    def stream(documents):
        return torch.tensor([token for document in documents for token in document], dtype=torch.long)

    return TokenStreams(
        train=stream(ids[held_out_count:]),
        held_out=stream(ids[:held_out_count]),
        held_out_documents=[texts[i] for i in order[:held_out_count]],
    )


def num_special_tokens(tokenizer) -> int:
    prefix, suffix = special_token_framing(tokenizer)
    return len(prefix) + len(suffix)


def special_token_framing(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a single text ([CLS] .. [SEP] for BERT, <s> .. </s> for RoBERTa)."""
    bare = tokenizer("hello", add_special_tokens=False)["input_ids"]
    framed = tokenizer("hello")["input_ids"]
    for start in range(len(framed) - len(bare) + 1):
        if framed[start : start + len(bare)] == bare:
            return framed[:start], framed[start + len(bare) :]
    raise ValueError(f"Cannot tell where {type(tokenizer).__name__} puts its special tokens around a text.")


def with_special_tokens(content: torch.Tensor, tokenizer) -> torch.Tensor:
    """(batch, L - specials) -> (batch, L): the tokenizer's own framing around every window."""
    prefix, suffix = special_token_framing(tokenizer)
    batch = content.shape[0]
    return torch.cat(
        [
            torch.tensor(prefix, dtype=torch.long).expand(batch, -1),
            content,
            torch.tensor(suffix, dtype=torch.long).expand(batch, -1),
        ],
        dim=1,
    )


def training_batch(
    streams: TokenStreams,
    tokenizer,
    args: TransferArguments,
    lengths: list[int],
    step: int,
    process_index: int = 0,
    num_processes: int = 1,
) -> torch.Tensor:
    """The windows of step `step`: a pure function of (seed, step), so a resumed run sees the same batches.

    Length lengths[step % len(lengths)]; each process takes its own rows of the global batch.
    """
    length = lengths[step % len(lengths)]
    content = length - num_special_tokens(tokenizer)
    generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    starts = torch.randint(0, len(streams.train) - content + 1, (args.batch_size * num_processes,), generator=generator)
    starts = starts[process_index::num_processes]
    windows = torch.stack([streams.train[start : start + content] for start in starts.tolist()])
    return with_special_tokens(windows, tokenizer)


def held_out_batches(streams: TokenStreams, tokenizer, lengths: list[int], windows: int) -> dict[int, torch.Tensor]:
    """`windows` consecutive held-out windows per length (the same for every evaluation)."""
    batches = {}
    for length in lengths:
        content = length - num_special_tokens(tokenizer)
        if len(streams.held_out) < content * windows:
            raise ValueError(
                f"The held-out text has {len(streams.held_out)} tokens, fewer than {windows} windows of "
                f"{length}: raise --eval_fraction or lower --eval_windows."
            )
        chunk = streams.held_out[: content * windows].view(windows, content)
        batches[length] = with_special_tokens(chunk, tokenizer)
    return batches


# ---- evaluation ----


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
    document tokenized with the tokenizer's framing, truncated to the student's n, batches padded."""
    device = next(student.parameters()).device
    n = max_input_length(student.config)
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
        "embedding_cosine_mean": round(cosines.mean().item(), 5),
        "embedding_cosine_min": round(cosines.min().item(), 5),
    }


def evaluate(teacher, student, tokenizer, batches, documents, batch_size) -> dict:
    return {
        "windows": evaluate_fidelity(teacher, student, batches, batch_size),
        "documents": evaluate_documents(teacher, student, tokenizer, documents, batch_size),
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


# ---- training ----


class Progress:
    """The step counter, saved and restored with the checkpoint (accelerate's register_for_checkpointing)."""

    def __init__(self):
        self.step = 0
        self.seconds = 0.0

    def state_dict(self):
        return {"step": self.step, "seconds": self.seconds}

    def load_state_dict(self, state):
        self.step, self.seconds = int(state["step"]), float(state["seconds"])


def parameter_groups(student, args: TransferArguments) -> dict[str, list[torch.nn.Parameter]]:
    """Student parameters by role: the projections E, F; each layer's W^Q, W^K, W^V; everything else."""
    groups = {"projections": [], "attention": [], "rest": []}
    for name, parameter in student.named_parameters():
        if "projection" in name:
            groups["projections"].append(parameter)
        elif ".attention.self." in name:
            groups["attention"].append(parameter)
        else:
            groups["rest"].append(parameter)
    if args.layer_steps and isinstance(student, PerformerPreTrainedModel) and not args.train_attention_weights:
        raise ValueError(
            "Stage 1 has nothing to train for a Performer student: FAVOR+ has no parameters of its own (its random "
            "features are a fixed buffer, redrawn, never trained), and with the softmax kernel it already estimates "
            "the teacher's attention from the teacher's W^Q, W^K, W^V. Pass --train_attention_weights to adapt "
            "W^Q, W^K, W^V to the features, or --layer_steps 0 to train end to end only."
        )
    if args.layer_steps and not groups["projections"] and not args.train_attention_weights:
        raise ValueError(
            "Stage 1 has nothing to train: the student's projections are frozen or parameter-free (mean/max pooling). "
            "Pass --train_attention_weights, or convert without --freeze_projections."
        )
    return groups


def trained_groups(args: TransferArguments, step: int) -> set[str]:
    """The parameter groups that train at `step`: E, F (and optionally W^Q, W^K, W^V) in stage 1, all in stage 2."""
    if args.stage_of(step) == "end_to_end":
        return {"projections", "attention", "rest"}
    return {"projections", "attention"} if args.train_attention_weights else {"projections"}


def default_projection_learning_rate(n: int) -> float:
    """1e-3 at n = 512, scaled by 512 / n.

    Adam moves every entry of E (k x n) by about the learning rate per step, whatever its gradient, so a compressed key,
    a sum over n positions, drifts more per step the longer n is. Measured on all-MiniLM-L6-v2 at n = 2048, k = 512
    (docs/results/long-inputs-minilm.md): 1e-3 raised the stage-1 loss at L = 2048 from 0.27 to 0.47-0.65 within 30
    steps; 2e-4 lowered it to 0.20 in 15.
    """
    return 1e-3 * 512 / n


def learning_rates(args: TransferArguments, step: int) -> dict[str, float]:
    """Each group's learning rate at `step` (0 freezes it): linear warm-up at the start of each stage."""
    if args.stage_of(step) == "layer":
        warmup = min(1.0, (step + 1) / max(1, args.warmup_steps))
        return {
            "projections": args.projection_learning_rate * warmup,
            "attention": args.attention_learning_rate * warmup if args.train_attention_weights else 0.0,
            "rest": 0.0,
        }
    warmup = min(1.0, (step - args.layer_steps + 1) / max(1, args.warmup_steps))
    rate = args.end_to_end_learning_rate * warmup
    return {"projections": rate, "attention": rate, "rest": rate}


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
    """The `attention_weights` stage-1 loss of one layer (module docstring): sum_t P_it (log P_it - log A_it), the
    cross-entropy less the teacher's entropy, the mean over heads and real queries, with A = Pbar Ehat the student's
    slot weights mapped back to positions through E."""
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


def check_layer_loss(student, layer_loss: str) -> None:
    """`attention_weights` needs slot weights to map back through a learned E: a Linformer with linear projections."""
    if layer_loss == "attention_weights" and not (
        isinstance(student, LinformerPreTrainedModel) and student.config.projection == "linear"
    ):
        raise ValueError(
            "--layer_loss attention_weights maps the student's attention over its k slots back to positions through "
            "a learned E: it needs a Linformer student with projection 'linear' (this one is "
            f"{student.config.model_type}, projection {getattr(student.config, 'projection', None)!r}). Use "
            "--layer_loss attention_output or hidden_states."
        )


def layer_local_loss(teacher, student, ids, mask, kind: str, layer_loss: str = "attention_output"):
    """Stage 1: the mean over layers of each layer's loss (``layer_loss``, module docstring) on the teacher's own
    layer inputs; also each layer's figure for the log (relative error, MSE or cross-entropy)."""
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


def checkpoint_dir(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, "checkpoints", f"step_{step:07d}")


def resolve_resume(spec: str | None, output_dir: str) -> str | None:
    if spec is None:
        return None
    if spec != "latest":
        if not os.path.isdir(spec):
            raise FileNotFoundError(f"--resume {spec}: no such checkpoint folder.")
        return spec
    root = os.path.join(output_dir, "checkpoints")
    # A checkpoint is written under a temporary name and renamed when whole: one a kill cut short is not taken.
    found = sorted(name for name in os.listdir(root) if not name.startswith(TMP_PREFIX)) if os.path.isdir(root) else []
    if not found:
        raise FileNotFoundError(f"--resume latest: no checkpoint under {root}.")
    return os.path.join(root, found[-1])


# What a transfer writes in its output_dir (the model's own files aside); --overwrite_output_dir deletes these and
# the model's weights and config, so that nothing of the earlier run is taken as this one's.
TRANSFER_OUTPUTS = (
    "checkpoints",
    "transfer_log.jsonl",
    "fidelity_before.json",
    "fidelity.json",
    "transfer_report.json",
    "model.safetensors",
    "config.json",
)


def claim_output_dir(args: TransferArguments, take: bool = True) -> RunLock | None:
    """The output folder is this run's. A non-empty one belongs to an earlier run and is refused unless the run
    resumes it (--resume) or starts over there (--overwrite_output_dir). With `take` (before the first write), a
    training run locks the folder (as pretraining does) until it ends, so a second run there is refused while the
    first is alive, and an overwrite deletes the earlier run's outputs; without it, the checks only (before any work,
    creating nothing)."""
    out = args.output_dir
    for role in ("teacher", "student"):
        check_model_source(getattr(args, role), f"--{role}")
    if os.path.exists(out) and not os.path.isdir(out):
        raise NotADirectoryError(f"--output_dir {out} is a file, not a folder.")
    if args.evaluate_only:  # writes fidelity.json only, e.g. beside a transferred model
        if os.path.exists(os.path.join(out, "fidelity.json")) and not args.overwrite_output_dir:
            raise FileExistsError(
                f"{os.path.join(out, 'fidelity.json')} exists (an earlier evaluation): give another --output_dir, "
                "or pass --overwrite_output_dir to replace it."
            )
        return None
    for role in ("teacher", "student"):  # --overwrite_output_dir would delete that model's weights first
        if os.path.abspath(getattr(args, role)) == os.path.abspath(out):
            raise ValueError(f"--output_dir must differ from --{role} {out}: the transfer would replace that model.")
    lock = None
    if take:
        os.makedirs(out, exist_ok=True)
        lock = RunLock.acquire(out)
    earlier = sorted(name for name in os.listdir(out) if name != LOCK_FILE) if os.path.isdir(out) else []
    if earlier and args.resume is None and not args.overwrite_output_dir:
        if lock is not None:
            lock.release()
        shown = ", ".join(earlier[:6]) + (", ..." if len(earlier) > 6 else "")
        raise FileExistsError(
            f"--output_dir {out} is not empty (it holds {shown}): it belongs to an earlier run. Resume that run "
            "with --resume latest, start over there with --overwrite_output_dir (deletes its checkpoints, log, "
            "reports and model), or give another --output_dir."
        )
    if take and args.overwrite_output_dir:
        for name in TRANSFER_OUTPUTS:
            path = os.path.join(out, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)
    return lock


def _truncate_log(path: str, after_step: int) -> None:
    """Drop log records past a resumed step, so the log reads as one uninterrupted run."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path) as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:  # a last line cut short by a kill: that step is logged again after the resume
                continue
            if record.get("step", 0) <= after_step:
                kept.append(line)
    write_text_atomic(path, "".join(kept))


def run_transfer(args: TransferArguments) -> dict:
    """Transfer the teacher's attention into the student; save the result to `args.output_dir`; return the report."""
    from accelerate import Accelerator

    accelerator = Accelerator()
    if accelerator.is_main_process:
        claim_output_dir(args, take=False)  # a used folder is refused before any work
    locks = []  # the folder's lock, taken before the first write
    stop = StopSignal()  # SIGTERM / SIGINT: a checkpoint after the current step, then `Preempted`
    if not args.evaluate_only:
        stop.install()
    try:
        return _transfer(args, accelerator, locks, stop)
    finally:
        stop.restore()
        for lock in locks:
            lock.release()


def compile_student_layers(student, args: TransferArguments, device) -> None:
    """``--torch_compile layers``: each student layer and its self-attention module compiled in place. Stage 1 calls
    the self-attention modules (or the layers) one by one, stage 2 the whole student, which runs the layers; a graph
    made for one layer serves the others."""
    from .compiling import ConfigError, check_compile_device, compile_kwargs, encoder_layers

    try:
        check_compile_device(
            args.torch_compile, args.torch_compile_mode, args.torch_compile_backend, device, "--torch_compile"
        )
    except ConfigError as error:
        raise ValueError(str(error)) from None
    for layer in encoder_layers(student):
        layer.attention.self.compile(**compile_kwargs(args.torch_compile_mode, args.torch_compile_backend))
        layer.compile(**compile_kwargs(args.torch_compile_mode, args.torch_compile_backend))


def transfer_guard(args: TransferArguments, resume_from: str | None) -> DivergenceGuard:
    return DivergenceGuard(
        args.nonfinite_patience,
        advice=(
            f"lower learning rates (--projection_learning_rate, now {args.projection_learning_rate:g}; "
            f"--attention_learning_rate, now {args.attention_learning_rate:g}; --end_to_end_learning_rate, now "
            f"{args.end_to_end_learning_rate:g}) or more --warmup_steps (now {args.warmup_steps})"
        ),
        resume_hint=resume_hint("--resume", "start over after changing one of these (--checkpoint_every keeps one)"),
        last_good_checkpoint=resume_from,
    )


def _transfer(args: TransferArguments, accelerator, locks: list, stop: StopSignal) -> dict:
    from accelerate.utils import set_seed
    from tqdm.auto import tqdm

    resume_from = resolve_resume(args.resume, args.output_dir)  # a missing checkpoint: said before any work
    set_seed(args.seed)
    # Linformer or Performer, as the head its config names; a folder of another model type is refused before its
    # weights are read
    student = load_model(args.student)
    tokenizer = AutoTokenizer.from_pretrained(args.student)
    pad_as_the_model_takes(tokenizer, student.config)  # the held-out documents' batches, and the saved tokenizer
    n = max_input_length(student.config)
    lengths = args.lengths or sorted({min(32, n), n})
    if args.projection_learning_rate is None:
        args = dataclasses.replace(args, projection_learning_rate=default_projection_learning_rate(n))
    teacher = load_teacher(args.teacher)
    check_pair(teacher, student, lengths, len(tokenizer))
    check_layer_loss(student, args.layer_loss)
    too_short = [length for length in lengths if length <= num_special_tokens(tokenizer)]
    if too_short:
        raise ValueError(f"Window lengths {too_short} leave no room for text beside the special tokens.")
    if accelerator.is_main_process:
        locks += [lock for lock in [claim_output_dir(args)] if lock is not None]

    streams = tokenize_streams(
        load_texts(args), tokenizer, 1.0 if args.evaluate_only else args.eval_fraction, args.seed
    )
    documents = streams.held_out_documents[: args.eval_documents]
    longest = max(lengths)
    if args.evaluate_only:
        started = time.perf_counter()
        teacher.to(accelerator.device)
        report = {
            "teacher": args.teacher,
            "student": args.student,
            "lengths": lengths,
            "fidelity": evaluate(
                teacher,
                student.to(accelerator.device).eval(),
                tokenizer,
                held_out_batches(streams, tokenizer, lengths, args.eval_windows),
                documents,
                args.batch_size,
            ),
        }
        report["eval_seconds"] = round(time.perf_counter() - started, 1)
        if accelerator.is_main_process:
            os.makedirs(args.output_dir, exist_ok=True)
            write_json_atomic(os.path.join(args.output_dir, "fidelity.json"), report)
            print(json.dumps(report["fidelity"], indent=1))
        return report
    if len(streams.train) < longest:
        raise ValueError(f"The training text has {len(streams.train)} tokens, fewer than one window of {longest}.")
    eval_batches = held_out_batches(streams, tokenizer, lengths, args.eval_windows)

    device = accelerator.device
    teacher.to(device)
    student.to(device).eval()  # dropout off: match the teacher's deterministic output
    if args.torch_compile == "layers":
        compile_student_layers(student, args, device)
    groups = parameter_groups(student, args)
    optimizer = torch.optim.AdamW(
        [{"params": params, "name": name} for name, params in groups.items() if params], lr=0.0, weight_decay=0.0
    )
    progress = Progress()
    # Neither model goes through accelerator.prepare: stage 1 calls the student's layers one by one, which a DDP
    # wrapper would not see; gradients are averaged across processes by hand below.
    accelerator.register_for_checkpointing(student, optimizer, progress)

    os.makedirs(args.output_dir, exist_ok=True)
    log_path = os.path.join(args.output_dir, "transfer_log.jsonl")
    report = {
        "teacher": args.teacher,
        "student": args.student,
        "lengths": lengths,
        "arguments": dataclasses.asdict(args),
    }
    if resume_from:
        accelerator.load_state(resume_from)
        if accelerator.is_main_process:
            _truncate_log(log_path, progress.step)
        accelerator.print(f"Resumed from {resume_from} at step {progress.step}")
    else:
        report["before"] = evaluate(teacher, student, tokenizer, eval_batches, documents, args.batch_size)
        if accelerator.is_main_process:
            _truncate_log(log_path, -1)
            write_json_atomic(os.path.join(args.output_dir, "fidelity_before.json"), report["before"])

    bar = tqdm(
        total=args.total_steps,
        initial=progress.step,
        disable=not (args.show_progress and accelerator.is_local_main_process),
    )
    stop_at = args.total_steps if args.stop_after_steps is None else min(args.stop_after_steps, args.total_steps)
    guard = transfer_guard(args, resume_from)

    def save_checkpoint() -> str:
        # Written under a temporary name, renamed when whole: a kill during the save leaves no checkpoint that
        # --resume latest would take. Never from non-finite weights.
        check_weights_finite(student, f"the checkpoint of step {progress.step}", guard)
        final = checkpoint_dir(args.output_dir, progress.step)
        accelerator.save_state(temporary_name(final))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            publish_dir(temporary_name(final), final)
            _prune_checkpoints(args.output_dir, args.checkpoints_to_keep)
        guard.last_good_checkpoint = final
        return final

    # Compiled: this process' first step's seconds (the compile time with it), and the graphs compiled by each step
    # that compiled any: the first of each stage, and the first at each other length; any other is a recompilation.
    compiled = args.torch_compile != "no"
    if compiled:
        from .compiling import compiled_graphs

        report["compile"] = {"graphs_by_step": {}}
    while progress.step < stop_at:
        started = time.perf_counter()
        graphs = compiled_graphs() if compiled else 0
        step, stage = progress.step, args.stage_of(progress.step)
        rates, trained = learning_rates(args, step), trained_groups(args, step)
        for group in optimizer.param_groups:
            group["lr"] = rates[group["name"]]
            for parameter in group["params"]:
                parameter.requires_grad_(group["name"] in trained)
        ids = training_batch(
            streams, tokenizer, args, lengths, step, accelerator.process_index, accelerator.num_processes
        ).to(device)
        mask = torch.ones(ids.shape, dtype=torch.float32, device=device)
        if stage == "layer":
            loss, per_layer = layer_local_loss(teacher, student, ids, mask, args.loss, args.layer_loss)
        else:
            loss, per_layer = end_to_end_loss(teacher, student, ids, mask, args)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if accelerator.num_processes > 1:
            for parameter in student.parameters():
                if parameter.grad is not None:
                    parameter.grad = accelerator.reduce(parameter.grad, reduction="mean")
        # Non-finite gradients (the same on every process, once averaged): the step is skipped, weights and Adam's
        # moments unchanged; `nonfinite_patience` in a row stop the run.
        finite = gradients_finite(student.parameters())
        if finite:
            optimizer.step()
        progress.step += 1
        progress.seconds += time.perf_counter() - started
        if compiled:
            if "first_step_seconds" not in report["compile"]:
                report["compile"]["first_step_seconds"] = seconds = time.perf_counter() - started
                accelerator.print(f"compiled: the first step took {seconds:.1f} s")
            if compiled_graphs() > graphs:
                report["compile"]["graphs_by_step"][progress.step] = compiled_graphs() - graphs
        bar.update(1)
        bar.set_postfix(stage=stage, loss=f"{loss.item():.4f}")

        if accelerator.is_main_process and (progress.step % args.log_every == 0 or progress.step == args.total_steps):
            record = {
                "step": progress.step,
                "stage": stage,
                "length": int(ids.shape[1]),
                "loss": loss.item(),
                layer_log_key(args, stage): per_layer,
                "learning_rates": rates,
                "train_seconds": round(progress.seconds, 2),
                **({} if finite else {"skipped": True}),
            }
            with open(log_path, "a") as handle:  # NaN / inf as null plus a "nonfinite" list: valid JSON
                handle.write(json.dumps(finite_or_null(record), allow_nan=False) + "\n")
        guard.after_update(progress.step, loss.item(), finite)
        saved = progress.step < args.total_steps and (
            progress.step % args.checkpoint_every == 0 or progress.step == stop_at
        )
        if saved and not guard.streak:  # while updates are non-finite, the last good checkpoint stays the newest
            save_checkpoint()
        if stop.requested(accelerator):  # agreed by every process: all stop after this step
            path = guard.last_good_checkpoint if saved and not guard.streak else save_checkpoint()
            bar.close()
            accelerator.end_training()
            raise Preempted(
                f"{stop.name} received: stopped after step {progress.step} of {args.total_steps} with checkpoint "
                f"{path}. Resume with --resume latest."
            )
    bar.close()
    if progress.step < args.total_steps:
        accelerator.print(f"Stopped at step {progress.step} of {args.total_steps}; resume with --resume latest")
        accelerator.end_training()
        return {"stopped_at": progress.step, **report}

    for parameter in student.parameters():
        parameter.requires_grad_(True)
    report["after"] = evaluate(teacher, student, tokenizer, eval_batches, documents, args.batch_size)
    report["train_seconds"] = round(progress.seconds, 1)
    # A run that ended diverging (inside a streak of skipped steps, or evaluating to NaN / inf) publishes nothing.
    guard.check_finished(progress.step, f"the transferred model in {args.output_dir}", fidelity_values(report["after"]))
    check_weights_finite(student, f"the transferred model in {args.output_dir}", guard)
    if accelerator.is_main_process:
        _save_result(student, tokenizer, args, report)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return report


def _prune_checkpoints(output_dir: str, keep: int) -> None:
    root = os.path.join(output_dir, "checkpoints")
    found = sorted(os.listdir(root))  # a temporary one a kill left (".tmp-...") sorts first: deleted first
    for name in found[:-keep] if keep > 0 else []:
        shutil.rmtree(os.path.join(root, name))


def _save_result(student, tokenizer, args: TransferArguments, report: dict) -> None:
    from ..conversion import copy_sentence_transformers_modules

    student.save_pretrained(args.output_dir)
    tokenizer.save_pretrained(args.output_dir)
    copy_sentence_transformers_modules(args.student, args.output_dir)
    # The student's own provenance travels with the result: the transferred folder then describes the whole chain
    # (conversion, then transfer), which linformer_hf.hub renders into the model card.
    if os.path.exists(os.path.join(args.student, "conversion_report.json")):
        shutil.copy(os.path.join(args.student, "conversion_report.json"), args.output_dir)
    # Last, and whole or absent: its presence says the transfer finished (experiments/pretrained_evidence.sh reads it).
    write_json_atomic(os.path.join(args.output_dir, "transfer_report.json"), report)
    for length, result in report["after"]["windows"].items():
        before = report.get("before", {}).get("windows", {}).get(length)
        was = f" (before: {before['embedding_cosine_mean']:.4f})" if before else ""
        print(
            f"L={length}: embedding cosine {result['embedding_cosine_mean']:.4f}{was}; attention relative error "
            f"per layer {result['attention_relative_error_per_layer']}"
        )
    print(f"held-out documents: embedding cosine {report['after']['documents']['embedding_cosine_mean']:.4f}")


def main(argv: list[str] | None = None) -> dict:
    from .errors import USER_ERRORS, report, report_preempted

    try:
        (args,) = HfArgumentParser(TransferArguments).parse_args_into_dataclasses(args=argv)
        return run_transfer(args)
    except (*USER_ERRORS, OSError, ValueError) as err:  # bad input: one `error:` line, not a traceback
        raise SystemExit(report(err)) from None
    except Preempted as err:  # SIGTERM / SIGINT: a checkpoint was written, the status says "resume me"
        raise SystemExit(report_preempted(err)) from None


if __name__ == "__main__":
    main()
