"""The teacher and the student of an attention transfer: loading the teacher, checking that the two describe the same
network, and reading each layer's attention input and output (the teacher's by hooks, the student's by calling its
self-attention on the teacher's layer input)."""

from __future__ import annotations

import contextlib
import os

import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

from ..loading import tokenizer_vocabulary
from ..models.lengths import max_input_length
from ..models.modeling_linformer import LinformerForMaskedLM, LinformerPreTrainedModel
from ..models.modeling_performer import PerformerForMaskedLM, PerformerPreTrainedModel
from ..registration import TOKENIZER_FILES
from .errors import LOCAL_MODEL, hub_unreachable, hub_unreachable_error

# The student families (converted with scripts/convert_to_linformer.py [--family performer]), by model_type.
STUDENT_FAMILIES = {"linformer": LinformerPreTrainedModel, "performer": PerformerPreTrainedModel}
STUDENT_MASKED_LM = (LinformerForMaskedLM, PerformerForMaskedLM)

TEACHER_MODEL_TYPES = ("bert", "roberta")
# Whether a source checkpoint carries an MLM head that stage 2 can match.
MLM_ARCHITECTURE_SUFFIXES = ("ForMaskedLM", "ForPreTraining")


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


def check_student_tokenizer(student: str) -> None:
    """The student's folder holds a tokenizer (the run tokenises its text with it and saves it with the result):
    without one, transformers builds an empty tokenizer rather than fail, and the run would train on empty text."""
    if os.path.isdir(student) and not any(os.path.exists(os.path.join(student, name)) for name in TOKENIZER_FILES):
        raise ValueError(
            f"--student {student} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}): save the teacher's "
            "tokenizer into it (AutoTokenizer.from_pretrained(TEACHER).save_pretrained(STUDENT)), or convert again "
            "without --no_tokenizer."
        )


def check_same_vocabulary(teacher_path: str, tokenizer, student_path: str) -> None:
    """Both models read the student's token ids: a teacher whose tokenizer has another vocabulary (even of the same
    size) would be matched on ids that mean other tokens to it. A teacher folder without a tokenizer is not checked."""
    teacher_vocab = tokenizer_vocabulary(teacher_path)
    if teacher_vocab is not None and teacher_vocab != tokenizer.get_vocab():
        raise ValueError(
            f"The teacher's tokenizer ({teacher_path}) has another vocabulary than the student's ({student_path}): "
            "both models must read the same token ids. The student must be converted from this teacher "
            "(scripts/convert_to_linformer.py TEACHER STUDENT)."
        )


def compared_length(teacher, student) -> int:
    """The longest input both models read: the student's n, or the teacher's positions where those are fewer."""
    return min(max_input_length(student.config), max_input_length(teacher.config))


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
