"""Knowledge distillation for fine-tuning: a converted student learns from the frozen classifier it was converted from.

The recipe (issue 26): convert a fine-tuned BERT / RoBERTa / MiniLM classifier to Linformer or Performer
(``model.convert_from_roberta``), then fine-tune the student with the original classifier as its teacher
(``distillation.teacher``). Each training batch goes through both models; the student's loss is

    (1 - kd_weight) * CE(student logits, labels)
    + kd_weight * T^2 * KL(softmax(teacher logits / T) || softmax(student logits / T))       (Hinton et al. 2015)
    + hidden_weight * mean over l in hidden_layers of ||H_l^S - H_l^T||^2 / ||H_l^T||^2     (over real tokens)

where H_l is the output of layer l (0: the embeddings' output) and T the temperature; T^2 keeps the KL term's
gradients on the scale of the cross-entropy's as T grows. The teacher is frozen, in eval mode, and never saved in
the student's checkpoints: `teacher_record` (its path and a SHA-256 of its config and weight files) is written to
``<output_dir>/distillation.json`` when the run starts, and a resumed run refuses another teacher. Evaluation scores
the student alone (its own cross-entropy and accuracy), as it will be used.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import torch
from transformers import AutoConfig, Trainer

from ..loading import files_sha256, model_sha256, tokenizer_vocabulary
from .errors import LOCAL_MODEL, ConfigError, hub_unreachable, hub_unreachable_error
from .validation import model_source

RECORD_FILE = "distillation.json"


def _load_config(path: str, role: str):
    try:
        return AutoConfig.from_pretrained(path)
    except (OSError, ValueError) as err:
        if hub_unreachable(err):  # transformers' message names neither the model nor the way out
            raise hub_unreachable_error(role, path, err, LOCAL_MODEL) from None
        raise ConfigError(f"{role}={path}: no model config could be read ({' '.join(str(err).split())}).") from None


def check_teacher(section, model, task_labels: int | None, class_names: list[str] | None = None) -> None:
    """Refuse, before any work, a teacher the student cannot learn from: not a sequence classifier, another label
    count than the task's, the task's classes in another order (``class_names``, the names of classes 0, 1, ...),
    another vocabulary than the student's tokenizer, and (for the hidden-state loss) another depth or width than the
    student's."""
    from .validation import check_model_files, check_model_source

    check_model_source(section.teacher, "distillation.teacher")
    teacher = _load_config(section.teacher, "distillation.teacher")
    architectures = teacher.architectures or []
    if not any(name.endswith("ForSequenceClassification") for name in architectures):
        raise ConfigError(
            f"distillation.teacher={section.teacher} is a {architectures or teacher.model_type} checkpoint, not a "
            "sequence classifier: give a fine-tuned *ForSequenceClassification folder (its logits are the targets)."
        )
    if task_labels is not None and teacher.num_labels != task_labels:  # None: the data's classes, known later
        raise ConfigError(
            f"distillation.teacher has {teacher.num_labels} labels but the task's student has {task_labels}: give a "
            "teacher fine-tuned on this task."
        )
    check_teacher_classes(section.teacher, teacher, class_names)
    check_model_files(section.teacher, "distillation.teacher", holds_weights=True)  # before distillation.json
    model_source(section.teacher, "distillation.teacher")  # a Hub name's weights too (`teacher_record` hashes them)
    student = _load_config(model.pretrained, "model.pretrained")
    if teacher.vocab_size != student.vocab_size:
        raise ConfigError(
            f"distillation.teacher's vocabulary has {teacher.vocab_size} tokens but the student's "
            f"{student.vocab_size}: the two must read the same token ids; convert the student from this teacher."
        )
    teacher_vocab = tokenizer_vocabulary(section.teacher)
    student_vocab = tokenizer_vocabulary(model.tokenizer or model.pretrained)
    if teacher_vocab is not None and student_vocab is not None and teacher_vocab != student_vocab:
        raise ConfigError(
            f"distillation.teacher's tokenizer ({section.teacher}) differs from the student's "
            f"({model.tokenizer or model.pretrained}): both models must see the same token ids; use the teacher's "
            "tokenizer (model.tokenizer) or a student converted from this teacher."
        )
    if section.hidden_weight > 0:
        for field in ("num_hidden_layers", "hidden_size"):
            if getattr(teacher, field) != getattr(student, field):
                raise ConfigError(
                    f"distillation.hidden_weight needs a teacher as deep and wide as the student, but they differ in "
                    f"{field}: teacher {getattr(teacher, field)}, student {getattr(student, field)}. Set "
                    "distillation.hidden_weight 0, or use the teacher the student was converted from."
                )
        bad = [layer for layer in section.hidden_layers or [] if not 0 <= layer <= student.num_hidden_layers]
        if bad:
            raise ConfigError(
                f"distillation.hidden_layers {bad} out of range: 0 (embeddings) to {student.num_hidden_layers}."
            )


def check_teacher_classes(path: str, teacher, class_names: list[str] | None) -> None:
    """The teacher's classes (its ``id2label``) are the task's in the task's order, where both name the same classes:
    a teacher saved with negative as 1 and positive as 0 taught the student the opposite of the labels, without a
    word. Names that differ (another data set's, or transformers' LABEL_0 ...) say nothing of the order: not refused."""
    if not class_names:
        return
    names = [str(teacher.id2label.get(i, teacher.id2label.get(str(i), ""))) for i in range(len(class_names))]
    same = sorted(name.lower() for name in names) == sorted(name.lower() for name in class_names)
    if same and [name.lower() for name in names] != [name.lower() for name in class_names]:
        raise ConfigError(
            f"distillation.teacher={path} numbers the task's classes otherwise: its classes 0, 1, ... are {names}, the "
            f"task's {list(class_names)}, so it would teach the opposite of the labels. Give a teacher fine-tuned with "
            "this task's label indices (or relabel the data to the teacher's)."
        )


def check_teacher_length(teacher_path: str, max_length: int) -> None:
    """The teacher reads every input the student does (inputs are cut to data.max_seq_length)."""
    from ..models import max_input_length

    longest = max_input_length(_load_config(teacher_path, "distillation.teacher"))
    if max_length > longest:
        raise ConfigError(
            f"data.max_seq_length={max_length} is longer than distillation.teacher's {longest} positions: set "
            f"data.max_seq_length <= {longest}."
        )


def teacher_record(section) -> dict:
    """Which teacher a run learns from, and with which settings: its path (or Hub name), a SHA-256 of its config and
    weights (`loading.model_files_sha256`: not of the Trainer's training_args.bin beside them, nothing of its outputs;
    a Hub name's, of the files its download holds: `validation.model_source`) and the names of the files hashed."""
    folder, names = model_source(section.teacher, "distillation.teacher")
    return {
        "teacher": os.path.abspath(section.teacher) if os.path.isdir(section.teacher) else section.teacher,
        "teacher_sha256": files_sha256(folder, names),
        "teacher_sha256_files": names,
        "kd_weight": section.kd_weight,
        "temperature": section.temperature,
        "hidden_weight": section.hidden_weight,
        "hidden_layers": section.hidden_layers,
    }


def check_resumed_teacher(output_dir: str, record: dict | None) -> None:
    """A resumed run learns from the teacher, and with the settings, it started with (``record`` None: none)."""
    path = os.path.join(output_dir, RECORD_FILE)
    if not os.path.exists(path):
        if record is None:
            return
        raise ConfigError(
            f"The run in {output_dir} was started without a teacher ({RECORD_FILE} is missing): resume it without "
            "distillation.teacher, or start a distillation run in another training.output_dir."
        )
    with open(path, encoding="utf-8") as handle:
        earlier = json.load(handle)
    if record is None:
        raise ConfigError(
            f"The run in {output_dir} was distilled from {earlier['teacher']} (see {path}): resume it with "
            f"--distillation.teacher {earlier['teacher']} and the same distillation settings."
        )
    # The teacher is the one whose config and weights hash alike, wherever it is now (a relative path given from
    # another directory, a folder copied); its path is recorded to be named.
    if "teacher_sha256_files" not in earlier:  # recorded with the earlier hash (or set to this one by hand, as told)
        if earlier.get("teacher_sha256") != record["teacher_sha256"]:
            check_teacher_by_earlier_hash(output_dir, earlier, record)
        record = {key: value for key, value in record.items() if key not in ("teacher_sha256", "teacher_sha256_files")}
    changed = [key for key in record if key != "teacher" and earlier.get(key) != record[key]]
    if changed:
        key = changed[0]
        raise ConfigError(
            f"The run in {output_dir} was distilled with {key}={earlier.get(key)!r}, this command gives "
            f"{record[key]!r}: resume with the run's teacher and distillation settings (see {path})."
        )


def check_teacher_by_earlier_hash(output_dir: str, earlier: dict, record: dict) -> None:
    """A run recorded before the teacher was hashed by its config and weights alone (`teacher_record`): its hash,
    `loading.model_sha256`, took in every .safetensors / .bin file of the folder. The teacher is the run's where that
    hash still matches; where it does not, the weights or config changed or only such another file did (the Trainer's
    training_args.bin), which that hash cannot tell apart: refused, saying how to go on with a teacher known the
    same."""
    if model_sha256(model_source(record["teacher"], "distillation.teacher")[0]) == earlier.get("teacher_sha256"):
        return
    path = os.path.join(output_dir, RECORD_FILE)
    raise ConfigError(
        f"The run in {output_dir} recorded its teacher by an earlier SHA-256 ({path}), which took in config.json "
        f"and every .safetensors / .bin file of its folder, training_args.bin among them, and {record['teacher']} "
        "hashes otherwise by it: its weights or config changed, or only such a file did. Resume with the run's "
        "teacher; if this one has the config and weights the run started with, set teacher_sha256 in that file to "
        f"{record['teacher_sha256']} (this teacher's, now of its config and weights: "
        f"{', '.join(record['teacher_sha256_files'])}) and resume."
    )


def load_teacher(path: str):
    from transformers import AutoModelForSequenceClassification

    return AutoModelForSequenceClassification.from_pretrained(path).eval().requires_grad_(False)


def hidden_state_loss(student_states, teacher_states, mask, layers: list[int] | None) -> torch.Tensor:
    """Mean over the chosen layers of ||S - T||^2 / ||T||^2 over real tokens (the transfer's relative error)."""
    from .transfer_losses import matching_loss

    chosen = layers if layers is not None else range(1, len(teacher_states))
    losses = [matching_loss(student_states[l], teacher_states[l], mask, "relative") for l in chosen]  # noqa: E741
    return torch.stack(losses).mean()


def logit_kl(student_logits, teacher_logits, temperature: float) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)), the mean over the batch."""
    teacher_log_probs = torch.log_softmax(teacher_logits / temperature, dim=-1)
    student_log_probs = torch.log_softmax(student_logits / temperature, dim=-1)
    kl = (teacher_log_probs.exp() * (teacher_log_probs - student_log_probs)).sum(-1).mean()
    return kl * temperature**2


class DistillationTrainer(Trainer):
    """`Trainer` whose training loss adds the teacher's terms (module docstring); the training log gets each term's
    mean since the last log: ``task_loss`` (CE with the labels), ``kd_kl`` (the KL at T = 1, the distance to the
    teacher whatever T), and ``hidden_loss`` where it is on."""

    def __init__(self, *args, teacher, distillation, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher.to(self.args.device)
        self.distillation = distillation
        # compute_loss returns a per-batch mean: the Trainer divides it over gradient accumulation as for any model.
        self.model_accepts_loss_kwargs = False
        self.loss_is_scaled_for_ga = False
        # Each term's value per update, kept on the device until the next log: reading it every update would wait
        # for the device (a host sync) at every step.
        self._terms: dict[str, list[torch.Tensor]] = defaultdict(list)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if not model.training:  # evaluation scores the student alone
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        cfg = self.distillation
        with_hidden = cfg.hidden_weight > 0
        labels = inputs["labels"]
        features = {key: value for key, value in inputs.items() if key != "labels"}
        outputs = model(**features, output_hidden_states=with_hidden)
        with torch.no_grad():
            teacher_out = self.teacher(**features, output_hidden_states=with_hidden)
        logits, teacher_logits = outputs.logits.float(), teacher_out.logits.float()
        task_loss = torch.nn.functional.cross_entropy(logits, labels)
        loss = (1 - cfg.kd_weight) * task_loss
        if cfg.kd_weight > 0:
            loss = loss + cfg.kd_weight * logit_kl(logits, teacher_logits, cfg.temperature)
        self._terms["task_loss"].append(task_loss.detach())
        self._terms["kd_kl"].append(logit_kl(logits.detach(), teacher_logits, 1.0))
        if with_hidden:
            mask = features["attention_mask"].to(logits.dtype)
            hidden = hidden_state_loss(outputs.hidden_states, teacher_out.hidden_states, mask, cfg.hidden_layers)
            loss = loss + cfg.hidden_weight * hidden
            self._terms["hidden_loss"].append(hidden.detach())
        return (loss, outputs) if return_outputs else loss

    def log(self, logs, start_time=None):
        if "loss" in logs and self._terms:
            for name, values in self._terms.items():
                logs[name] = torch.stack(values).mean().item()
            self._terms.clear()
        super().log(logs, start_time)
