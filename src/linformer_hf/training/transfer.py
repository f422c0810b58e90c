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
function of (seed, step), so a run resumed from a checkpoint (the Trainer's ``checkpoint-N``) continues exactly as it
would have gone on.

The student may also be a Performer (`scripts/convert_to_linformer.py --family performer`). FAVOR+ has no
parameters of its own (its random features are a fixed buffer), so stage 1 trains W^Q, W^K, W^V only, and only with
`--train_attention_weights`; with the softmax kernel a converted Performer already estimates the teacher's attention,
and what is left to learn is to adapt W^Q, W^K, W^V to the m features drawn.

This module is the run: its output directory, its checkpoints' recipe fingerprint, its outputs and the command line.
The run reads top-down in `_transfer`: the text read and checked (`load_texts`: unreadable text is said before the
models load), `load_models` (the pair, checked), `load_text` (the text tokenised), then `evaluate_only`, or
`check_training` (the last refusals, before the folder is claimed), `build_trainer`, `start_or_resume`, `train` and
`evaluate_and_save`; the steps share one `TransferRun`. The Trainer does what it does for pretraining and fine-tuning:
the loop, the ``checkpoint-N`` it saves and resumes from (student, optimizer, schedule, RNG, step), the progress bar,
the processes; `AttentionTransferTrainer` (`transfer_trainer`) adds what a transfer needs. The run directory, its
lock, the checkpoints' completion marker, their pruning, the divergence guard and the stop on SIGTERM / SIGINT are the
other training runs' (training/checkpointing.py, training/guards.py). What it runs is split by concern: the options
(`transfer_arguments`), the teacher and student and their attention (`transfer_models`), the text and its windows
(`transfer_data`), the losses (`transfer_losses`), what trains when (`transfer_schedule`), the Trainer
(`transfer_trainer`) and the fidelity figures (`transfer_evaluation`). It lives in `training/` beside pretraining and
fine-tuning: it is a training run under `accelerate launch`, needs the `train` extra (accelerate, datasets, tqdm), and
is not part of the model API.

Usage: `accelerate launch scripts/transfer_attention.py --teacher DIR_OR_HUB_NAME --student CONVERTED_DIR ...`
(or `python -m linformer_hf.training.transfer`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from typing import Any

from transformers import AutoTokenizer, PrinterCallback, TrainingArguments

from ..loading import NoHubWeights, files_sha256, load_model, pad_as_the_model_takes, vocabulary_sha256
from ..models.lengths import max_input_length
from ..outputs import write_json_atomic, write_text_atomic
from . import checkpointing
from .checkpointing import TEACHER_FILES_KEY, RunLock, RunOptions
from .errors import ConfigError, Preempted
from .guards import DivergenceGuard, StopSignal, check_weights_finite, resume_hint, stop_signal_callback
from .transfer_arguments import TransferArguments, parse_command_line
from .transfer_data import held_out_batches, load_texts, num_special_tokens, tokenize_streams
from .transfer_evaluation import evaluate_documents, evaluate_fidelity, fidelity_values
from .transfer_models import (
    check_layer_loss,
    check_pair,
    check_same_vocabulary,
    check_student_tokenizer,
    compared_length,
    load_teacher,
)
from .transfer_schedule import default_projection_learning_rate, learning_rates, parameter_groups
from .transfer_trainer import PROGRESS_FILE, TRANSFER, AttentionTransferTrainer, training_arguments
from .validation import check_model_source, model_source

# Until transfer ran on the Trainer, its own loop wrote <output_dir>/checkpoints/step_000000N (accelerate's save_state).
LOOP_CHECKPOINTS = RunOptions(checkpoint_folder="checkpoints", checkpoint_prefix="step_", checkpoint_digits=7)
LOOP_COMMIT = "bb52f8c"  # a commit of this repository that transfers on that loop: the last before the Trainer


REPORT_FILE = "transfer_report.json"  # written last: its presence says the transfer finished
# In the report: the SHA-256 of the teacher's config and weights (`teacher_identity`), as the checkpoints record it
REPORT_TEACHER_KEY = "teacher_model_files_sha256"
# Options that change how a run goes (its stops, resumption, log, checkpoints, compiling, progress), not what it
# makes: a finished transfer run again with others is still the same transfer (`finished_transfer`).
RUN_CONTROL = (
    "resume",
    "stop_after_steps",
    "overwrite_output_dir",
    "show_progress",
    "log_every",
    "checkpoint_every",
    "checkpoints_to_keep",
    "nonfinite_patience",
    "torch_compile",
    "torch_compile_mode",
    "torch_compile_backend",
)


def checkpoint_dir(output_dir: str, step: int) -> str:
    return TRANSFER.checkpoint_path(output_dir, step)


def finished_transfer(args: TransferArguments) -> dict | None:
    """The report of the transfer that finished in --output_dir with these options (`REPORT_FILE`, its arguments
    those of this run, `RUN_CONTROL` apart), or None. The same command run again (--resume latest, as a requeued job
    has it) resumed the newest earlier checkpoint (the last step kept none then), trained its last steps again and
    replaced the model, report and log; without --resume it was refused as an earlier run's folder, the advice being
    that resume. (The last step's checkpoint is kept now: a run with more steps goes on from it.) None with
    --overwrite_output_dir (start over) or --evaluate_only (fidelity.json beside a transferred model), and when a
    checkpoint was written after the report (a later run in the folder, e.g. one resumed with more steps). A teacher
    of other config and weights than the finished run's is refused (`check_finished_teacher`)."""
    path = os.path.join(args.output_dir, REPORT_FILE)
    if args.evaluate_only or args.overwrite_output_dir or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
        recorded = dict(report["arguments"])
        given = json.loads(json.dumps(dataclasses.asdict(args)))
        if given["projection_learning_rate"] is None:  # the default the finished run recorded, by the student's n
            from ..loading import saved_model_length

            given["projection_learning_rate"] = default_projection_learning_rate(saved_model_length(args.student))
    except (OSError, ValueError, KeyError, TypeError):  # not a report of this command, or no student to read
        return None
    if any(recorded.get(name) != value for name, value in given.items() if name not in RUN_CONTROL):
        return None
    written = os.path.getmtime(path)
    if any(os.path.getmtime(c) > written for c in checkpointing.list_checkpoints(args.output_dir, TRANSFER)):
        return None
    check_finished_teacher(args, report)
    return report


def check_finished_teacher(args: TransferArguments, report: dict) -> None:
    """The finished run's teacher is --teacher as it is now: the SHA-256 of its config and weights, which the report
    records (and, of an earlier version's report, the checkpoint of its last step), is that of --teacher's now. A
    teacher retrained since (the same path or Hub name, the same config) is refused: the run is not complete for
    it. Nothing recorded (a run of a version before the hash): not compared."""
    recorded = report.get(REPORT_TEACHER_KEY)
    for checkpoint in reversed(checkpointing.list_checkpoints(args.output_dir, TRANSFER)):
        if recorded is not None:
            break
        try:
            with open(os.path.join(checkpoint, checkpointing.RECIPE_FILE), encoding="utf-8") as handle:
                recorded = json.load(handle)["must_match"].get(TEACHER_FILES_KEY)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # torn, or not of this command
            continue
    if recorded is None:
        return
    check_model_source(args.teacher, "--teacher")  # a folder gone, or a path from elsewhere: no teacher to compare
    now = teacher_identity(args.teacher).get(TEACHER_FILES_KEY)
    if now is not None and now != recorded:
        raise ConfigError(
            f"--teacher {args.teacher} has other config and weights than the teacher the transfer in "
            f"{args.output_dir} was run with (their SHA-256 {recorded} when the run started, {now} now): the run is "
            "not complete for this teacher, and its model is no transfer from it. To transfer from this teacher, give "
            "another --output_dir, or add --overwrite_output_dir (deletes that run's checkpoints, log, reports and "
            "model)."
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
    check_student_tokenizer(args.student)
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
    resuming = args.resume is not None
    if args.overwrite_output_dir:
        refuse_foreign_entries(out)
    if not take:
        checkpointing.check_not_running(out, TRANSFER)  # a live run's folder: said as such, not as an earlier run's
        checkpointing.check_output_dir_unused(out, resuming, args.overwrite_output_dir, TRANSFER)
        return None
    # What the run reads to its end (the student's modules and conversion report are copied beside the result) is
    # never inside what --overwrite_output_dir deletes, e.g. --student <output_dir>/checkpoint-N.
    inputs = {"--teacher": args.teacher, "--student": args.student, "--text_files": args.text_files}
    inputs["--data_files"] = args.data_files
    return checkpointing.claim_output_dir(out, resuming, args.overwrite_output_dir, inputs=inputs, options=TRANSFER)


def refuse_foreign_entries(output_dir: str) -> None:
    """--overwrite_output_dir deletes an earlier transfer's outputs (`TRANSFER_OUTPUTS`) and nothing else: a folder
    that also holds what no transfer writes is refused, as that would stay beside the new model (and is not this
    command's to delete)."""
    if not os.path.isdir(output_dir):
        return
    foreign = sorted(
        name
        for name in os.listdir(output_dir)
        if name != checkpointing.LOCK_FILE
        and not name.startswith((checkpointing.TMP_PREFIX, checkpointing.TRASH_PREFIX))
        and not checkpointing.is_run_output(name, TRANSFER)
    )
    if foreign:
        shown = ", ".join(foreign[:6]) + (", ..." if len(foreign) > 6 else "")
        raise FileExistsError(
            f"--output_dir {output_dir} holds {shown}, which no transfer writes: --overwrite_output_dir deletes only "
            "an earlier transfer's outputs, and these would stay beside the new model. Move them out of it, or give "
            "another --output_dir."
        )


def refuse_loop_checkpoint(spec: str | None, output_dir: str) -> None:
    """Refuse to resume (``spec``: a checkpoint folder, or ``latest`` in ``output_dir``) a checkpoint of the loop
    transfer ran on before the Trainer, which the Trainer cannot read, saying how to finish that run or start afresh."""
    if spec == "latest":
        found = checkpointing.list_checkpoints(output_dir, LOOP_CHECKPOINTS)
        if checkpointing.list_checkpoints(output_dir, TRANSFER) or not found:
            return
        checkpoint = found[-1]
    elif spec and (
        os.path.isfile(os.path.join(spec, "random_states_0.pkl"))  # accelerate's save_state, not the Trainer's
        or re.fullmatch(r"step_\d+", os.path.basename(os.path.normpath(spec)))
    ):
        checkpoint = spec
    else:
        return
    raise ConfigError(
        f"{checkpoint} is a checkpoint of the hand-written loop attention transfer ran on before it moved to "
        f"transformers' Trainer, which cannot resume it. Finish that run with the code it started with (this "
        f"repository at commit {LOOP_COMMIT} or earlier), or start afresh: --overwrite_output_dir (deletes its "
        f"checkpoints, log, reports and model) or another --output_dir."
    )


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
    from accelerate import PartialState

    # Made first, the Trainer's settings set up accelerate's process state as the Trainer uses it: how many processes
    # there are and which is the main one (a PartialState made before them sees one process on CPU).
    training = training_arguments(args)
    check_compile_device(training.device, args)  # before any work: the folder, the models, the text
    finished = finished_transfer(args)
    if finished is not None:  # the same transfer, run to its end: said, nothing redone or replaced
        if PartialState().is_main_process:
            print(
                f"The transfer in {args.output_dir} is complete ({REPORT_FILE}: {args.total_steps} of "
                f"{args.total_steps} steps, the same options): nothing to do. To run it again, add "
                "--overwrite_output_dir (deletes its checkpoints, log, reports and model), or give another "
                "--output_dir."
            )
        return finished
    if PartialState().is_main_process:
        claim_output_dir(args, take=False)  # a used folder is refused before any work
    locks = []  # the folder's lock, taken before the first write
    stop = StopSignal()  # SIGTERM / SIGINT: a checkpoint after the current step, then `Preempted`
    if not args.evaluate_only:
        stop.install()
    run = None
    try:
        run = TransferRun(args, training)
        return _transfer(run, locks, stop)
    finally:
        stop.restore()
        if run is not None and run.trainer is not None:
            from .loop import finish_trainer

            finish_trainer(run.trainer)
        for lock in locks:
            lock.release()


def check_compile_device(device, args: TransferArguments) -> None:
    """The --torch_compile options against the device the run uses (compiling.check_compile_device)."""
    from .compiling import ConfigError, check_compile_device

    try:
        check_compile_device(
            args.torch_compile, args.torch_compile_mode, args.torch_compile_backend, device, "--torch_compile"
        )
    except ConfigError as error:
        raise ValueError(str(error)) from None


def compile_student_layers(student, args: TransferArguments) -> None:
    """``--torch_compile layers``: each student layer and its self-attention module compiled in place (the options
    checked against the device when the run starts: `check_compile_device`). Stage 1 calls the self-attention modules
    (or the layers) one by one, stage 2 the whole student, which runs the layers; a graph made for one layer serves
    the others."""
    from .compiling import compile_kwargs, encoder_layers

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


def teacher_identity(teacher: str) -> dict:
    """{`TEACHER_FILES_KEY`: the SHA-256 of the config and weights the teacher is built from} (a folder's, or a Hub
    name's download: `validation.model_source`), or {} where a Hub name's weights are not among the files
    from_pretrained looks for (`loading.HUB_WEIGHT_FILES`)."""
    try:
        return {TEACHER_FILES_KEY: files_sha256(*model_source(teacher, "--teacher"))}
    except NoHubWeights:
        return {}


def transfer_fingerprint(run: TransferRun, num_processes: int) -> dict:
    """What a checkpoint must agree with to be resumed (checkpointing.check_resume_compatible): the pair (the
    student's config, the teacher's config and weights), the text and the batches ("must_match"), and the schedule (a
    change only warns)."""
    args = run.args

    def config(model) -> dict:
        settings = json.loads(model.config.to_json_string(use_diff=False))
        return {k: v for k, v in settings.items() if k not in ("transformers_version", "_name_or_path")}

    files = list(args.text_files or []) + list(args.data_files or [])
    text = ("text_files", "dataset", "dataset_config", "data_files", "dataset_split", "text_column", "eval_fraction")
    batches = ("batch_size", "seed", "layer_loss", "loss", "train_attention_weights")
    must_match = {
        **{f"student.{k}": v for k, v in config(run.student).items()},
        **{f"teacher.{k}": v for k, v in config(run.teacher).items()},
        # its weights too (a Hub name's, of its download): another teacher of the same shape is another target
        **teacher_identity(args.teacher),
        "tokenizer.vocabulary_sha256": vocabulary_sha256(run.tokenizer.get_vocab()),
        **{f"--{name}": getattr(args, name) for name in text},
        **{f"size_of {path}": os.path.getsize(path) for path in files if os.path.isfile(path)},
        **{f"--{name}": getattr(args, name) for name in batches},
        "--lengths": run.lengths,
        "processes": num_processes,
    }
    schedule = ("layer_steps", "end_to_end_steps", "projection_learning_rate", "attention_learning_rate")
    schedule += ("end_to_end_learning_rate", "warmup_steps", "mlm_weight")
    fingerprint = {"must_match": must_match, "schedule": {f"--{name}": getattr(args, name) for name in schedule}}
    return json.loads(json.dumps(fingerprint))  # tuples -> lists, as saved


def evaluate(teacher, student, tokenizer, batches, documents, batch_size) -> dict:
    """The fidelity figures on held-out windows and on whole held-out documents."""
    return {
        "windows": evaluate_fidelity(teacher, student, batches, batch_size),
        "documents": evaluate_documents(teacher, student, tokenizer, documents, batch_size),
    }


@dataclasses.dataclass
class TransferRun:
    """What the steps of one transfer share: its options, the two models, the text and, once training is set up, the
    Trainer, the divergence guard and the report being written."""

    args: TransferArguments
    training: TrainingArguments  # the Trainer's (`training_arguments`)
    resume_from: str | None = None
    student: Any = None
    teacher: Any = None
    tokenizer: Any = None
    lengths: list[int] = dataclasses.field(default_factory=list)
    streams: Any = None
    documents: list = dataclasses.field(default_factory=list)
    eval_batches: Any = None
    fingerprint: dict = dataclasses.field(default_factory=dict)  # what a checkpoint must agree with to be resumed
    trainer: AttentionTransferTrainer | None = None
    guard: DivergenceGuard | None = None
    report: dict = dataclasses.field(default_factory=dict)

    @property
    def log_path(self) -> str:
        return os.path.join(self.args.output_dir, "transfer_log.jsonl")


def _transfer(run: TransferRun, locks: list, stop: StopSignal) -> dict:
    from accelerate import PartialState
    from accelerate.utils import set_seed

    # a loop's, a missing or a torn checkpoint: said before any work
    refuse_loop_checkpoint(run.args.resume, run.args.output_dir)
    run.resume_from = checkpointing.resolve_checkpoint(run.args.resume, run.args.output_dir, TRANSFER)
    set_seed(run.args.seed)
    # Read and checked before the models load (minutes for real ones): an empty or binary file, a CSV read as JSON or
    # a column that is not text is said at once. Reading needs no tokenizer.
    texts = load_texts(run.args)
    load_models(run)
    load_text(run, texts)
    del texts  # from here the token streams hold the text (and the held-out documents theirs)
    if run.args.evaluate_only:
        return evaluate_only(run)
    check_training(run)
    # The pair, the text and the checkpoint are sound: the folder is taken (with --overwrite_output_dir, the earlier
    # run's outputs deleted) only now, before the first write, so that no refusal comes after that deletion.
    if PartialState().is_main_process:
        locks += [lock for lock in [claim_output_dir(run.args)] if lock is not None]
    build_trainer(run, stop)
    start_or_resume(run)
    train(run, stop)
    step = run.trainer.state.global_step
    if step < run.args.total_steps:  # --stop_after_steps: a checkpoint to resume from is written
        run.trainer.accelerator.print(f"Stopped at step {step} of {run.args.total_steps}; resume with --resume latest")
        return {"stopped_at": step, **run.report}
    return evaluate_and_save(run)


def load_models(run: TransferRun) -> None:
    """The student, its tokenizer and the teacher, checked as a pair, and the window lengths to train at."""
    args = run.args
    # Linformer or Performer, as the head its config names; a folder of another model type is refused before its
    # weights are read
    run.student = load_model(args.student)
    run.tokenizer = AutoTokenizer.from_pretrained(args.student)
    pad_as_the_model_takes(run.tokenizer, run.student.config)  # the held-out documents' batches, the saved tokenizer
    n = max_input_length(run.student.config)
    if args.projection_learning_rate is None and not args.evaluate_only:  # (a rate set is refused with it)
        run.args = args = dataclasses.replace(args, projection_learning_rate=default_projection_learning_rate(n))
    run.teacher = load_teacher(args.teacher)
    # by default 32 and the longest window both models read (a student converted longer than its teacher's positions
    # is matched where the teacher has an output)
    longest = compared_length(run.teacher, run.student)
    run.lengths = args.lengths or sorted({min(32, longest), longest})
    check_pair(run.teacher, run.student, run.lengths, len(run.tokenizer))
    check_same_vocabulary(args.teacher, run.tokenizer, args.student)
    check_layer_loss(run.student, args.layer_loss)
    too_short = [length for length in run.lengths if length <= num_special_tokens(run.tokenizer)]
    if too_short:
        raise ValueError(f"Window lengths {too_short} leave no room for text beside the special tokens.")


def load_text(run: TransferRun, texts: list[str]) -> None:
    """The text (`load_texts`'s documents), tokenised into a training stream and held-out documents (all held out
    with --evaluate_only)."""
    args = run.args
    run.streams = tokenize_streams(texts, run.tokenizer, 1.0 if args.evaluate_only else args.eval_fraction, args.seed)
    run.documents = run.streams.held_out_documents[: args.eval_documents]


def evaluate_only(run: TransferRun) -> dict:
    """--evaluate_only: the student's fidelity to the teacher as it is, in fidelity.json; nothing trains."""
    from accelerate import PartialState

    args, processes = run.args, PartialState()
    started = time.perf_counter()
    run.teacher.to(processes.device)
    report = {
        "teacher": args.teacher,
        "student": args.student,
        "lengths": run.lengths,
        "fidelity": evaluate(
            run.teacher,
            run.student.to(processes.device).eval(),
            run.tokenizer,
            held_out_batches(run.streams, run.tokenizer, run.lengths, args.eval_windows),
            run.documents,
            args.batch_size,
        ),
    }
    report["eval_seconds"] = round(time.perf_counter() - started, 1)
    if processes.is_main_process:
        os.makedirs(args.output_dir, exist_ok=True)
        write_json_atomic(os.path.join(args.output_dir, "fidelity.json"), report)
        print(json.dumps(report["fidelity"], indent=1))
    return report


def check_training(run: TransferRun) -> None:
    """What training needs and the folder is not yet claimed for (nothing is written): a window of training text, the
    held-out windows, a resumed checkpoint of this run's recipe (its fingerprint), something to train in stage 1."""
    from accelerate import PartialState

    args = run.args
    longest = max(run.lengths)
    if len(run.streams.train) < longest:
        raise ValueError(f"The training text has {len(run.streams.train)} tokens, fewer than one window of {longest}.")
    run.eval_batches = held_out_batches(run.streams, run.tokenizer, run.lengths, args.eval_windows)
    run.fingerprint = transfer_fingerprint(run, PartialState().num_processes)
    if run.resume_from:
        latest = args.resume == "latest"
        compared = fingerprint_to_resume(run.resume_from, args, run.fingerprint)
        checkpointing.check_resume_compatible(run.resume_from, compared, args.total_steps, latest, TRANSFER)
    parameter_groups(run.student, args)  # nothing to train in stage 1: refused


def fingerprint_to_resume(checkpoint: str, args: TransferArguments, fingerprint: dict) -> dict:
    """What ``checkpoint`` is compared with when resumed: this run's fingerprint, with the checkpoint's own schedule
    where the steps it made are those this run makes (the same stage, learning rates and MLM weight at each). More
    steps (a finished run extended) or other settings of steps not made yet still give an uninterrupted run of this
    command, which the warning of another schedule would deny."""
    path = os.path.join(checkpoint, checkpointing.RECIPE_FILE)
    if not os.path.isfile(path):
        return fingerprint  # check_resume_compatible refuses it
    try:
        with open(path, encoding="utf-8") as handle:
            saved = json.load(handle)["schedule"]
        earlier = dataclasses.replace(args, **{name.removeprefix("--"): value for name, value in saved.items()})
        made = checkpointing.read_checkpoint_state(checkpoint)["global_step"]
    except (OSError, ValueError, KeyError, TypeError):  # a schedule of other options: compared as it is
        return fingerprint

    def step(options: TransferArguments, index: int) -> tuple:
        stage = options.stage_of(index)
        return stage, learning_rates(options, index), options.mlm_weight if stage == "end_to_end" else None

    if all(step(earlier, index) == step(args, index) for index in range(made)):
        return {**fingerprint, "schedule": saved}
    return fingerprint


def build_trainer(run: TransferRun, stop: StopSignal) -> None:
    """The teacher on the device, the student compiled (--torch_compile layers), and the `AttentionTransferTrainer`
    that trains it (`check_training` has checked what it needs)."""
    args, training = run.args, run.training
    run.teacher.to(training.device)
    run.student.to(training.device).eval()  # dropout off: match the teacher's deterministic output
    if args.torch_compile == "layers":
        compile_student_layers(run.student, args)
    run.guard = transfer_guard(args, run.resume_from)
    run.trainer = AttentionTransferTrainer(
        model=run.student,
        args=training,
        train_dataset=range(args.total_steps),  # the steps (`get_train_dataloader`)
        run=run,
        stopping=stop_signal_callback(stop),
        fingerprint=run.fingerprint,
    )
    if not args.show_progress:  # with the progress bar off, the Trainer would print its logs instead
        run.trainer.remove_callback(PrinterCallback)


def start_or_resume(run: TransferRun) -> None:
    """A resumed run drops the log past its checkpoint and takes its training seconds; a new one measures the student
    before training (fidelity_before.json) and starts its log afresh."""
    args, trainer = run.args, run.trainer
    os.makedirs(args.output_dir, exist_ok=True)
    run.report.update(
        teacher=args.teacher, student=args.student, lengths=run.lengths, arguments=dataclasses.asdict(args)
    )
    if TEACHER_FILES_KEY in run.fingerprint["must_match"]:  # which teacher, to know it again (`finished_transfer`)
        run.report[REPORT_TEACHER_KEY] = run.fingerprint["must_match"][TEACHER_FILES_KEY]
    if run.resume_from:
        step = checkpointing.read_checkpoint_state(run.resume_from)["global_step"]
        again = steps_made_again(run, step)  # read before a finished run's report is set aside
        set_aside_abandoned_path(run, step)
        with open(os.path.join(run.resume_from, PROGRESS_FILE), encoding="utf-8") as handle:
            trainer.train_seconds = json.load(handle)["train_seconds"]
        if trainer.is_world_process_zero():
            _truncate_log(run.log_path, step)
        # measured when the run started (in this folder, or in the one of the checkpoint resumed): the report compares
        # the result with it
        for folder in (args.output_dir, os.path.dirname(os.path.abspath(run.resume_from))):
            before = os.path.join(folder, "fidelity_before.json")
            if os.path.isfile(before):
                with open(before, encoding="utf-8") as handle:
                    run.report["before"] = json.load(handle)
                break
        trainer.accelerator.print(f"Resumed from {run.resume_from} at step {step}{again}")
    else:
        run.report["before"] = evaluate(
            run.teacher, run.student, run.tokenizer, run.eval_batches, run.documents, args.batch_size
        )
        if trainer.is_world_process_zero():
            _truncate_log(run.log_path, -1)
            write_json_atomic(os.path.join(args.output_dir, "fidelity_before.json"), run.report["before"])


def finished_step(output_dir: str) -> int | None:
    """The step the transfer finished in ``output_dir`` ended at (its `REPORT_FILE`), or None."""
    try:
        with open(os.path.join(output_dir, REPORT_FILE), encoding="utf-8") as handle:
            arguments = json.load(handle)["arguments"]
        return int(arguments["layer_steps"]) + int(arguments["end_to_end_steps"])
    except (OSError, ValueError, KeyError, TypeError):  # no finished run here
        return None


# What a resumed path shares with the one it branches from (the log is cut at the step resumed: `_truncate_log`)
SHARED_OUTPUTS = ("transfer_log.jsonl", "fidelity_before.json", "checkpoints")


def later_outputs(output_dir: str, step: int) -> list[str]:
    """The names of the result of a transfer that finished in ``output_dir`` after ``step`` (its model, tokenizer and
    reports, `_save_result`, and --evaluate_only's fidelity.json beside them); [] where none did. Not its checkpoints
    (`checkpointing.set_aside_later_work` takes the later ones) nor what the resumed path shares with it."""
    finished = finished_step(output_dir)
    if finished is None or finished <= step:
        return []
    return sorted(
        name
        for name in os.listdir(output_dir)
        if checkpointing.is_run_output(name, TRANSFER)
        and name not in SHARED_OUTPUTS
        and not re.fullmatch(rf"{re.escape(TRANSFER.checkpoint_prefix)}\d+|{checkpointing.SUPERSEDED_PATTERN}", name)
    )


def set_aside_abandoned_path(run: TransferRun, step: int) -> None:
    """A resume of an earlier checkpoint of this folder (by name, or ``latest`` past a torn newer one) branches off
    what the folder holds from after ``step``: its later checkpoints and a run's result that ended later
    (`later_outputs`) are moved into ``superseded-after-step<N>-<time>/`` (`checkpointing.set_aside_later_work`, as
    pretraining and fine-tuning do), with a copy of the log, and named. Left in place, ``--resume latest`` went on from
    the abandoned path's newest checkpoint, the new path's were written over its own, and the folder's model was the
    abandoned path's. Once every process has found its checkpoint."""
    args, trainer = run.args, run.trainer
    trainer.accelerator.wait_for_everyone()
    if trainer.is_world_process_zero():
        later = lambda after: later_outputs(args.output_dir, after)  # noqa: E731
        aside = checkpointing.set_aside_later_work(args.output_dir, run.resume_from, later, TRANSFER)
        if aside:
            if os.path.isfile(run.log_path):  # the abandoned path's losses, which the log here no longer holds
                shutil.copy2(run.log_path, aside)
            print(
                f"Resuming {run.resume_from}: this folder's work from after step {step} is moved to {aside}: "
                f"{', '.join(sorted(os.listdir(aside)))} (the log a copy: the log here goes on from step {step}).",
                flush=True,
            )
    trainer.accelerator.wait_for_everyone()


def steps_made_again(run: TransferRun, step: int) -> str:
    """Where the run resumed (at ``step``) in its own folder before the step a finished run there ended at, the steps
    trained again, said: a checkpoint given by name, or ``latest`` in the folder of a run finished before the last
    step kept its checkpoint. "" otherwise."""
    if os.path.realpath(os.path.dirname(run.resume_from)) != os.path.realpath(run.args.output_dir):
        return ""
    finished = finished_step(run.args.output_dir)
    if finished is None or finished <= step:
        return ""
    kept = os.path.isdir(checkpoint_dir(run.args.output_dir, finished))
    return (
        f": the run finished here at step {finished} ({REPORT_FILE}), so steps {step + 1} to {finished} are trained "
        "again" + ("" if kept else " (it kept no checkpoint of its last step: an earlier version made it)")
    )


def train(run: TransferRun, stop: StopSignal) -> None:
    """The Trainer's run until --total_steps (or --stop_after_steps); a SIGTERM / SIGINT ends it after the current
    step with a checkpoint (`Preempted`), and the divergence guard with `TrainingDiverged`."""
    from transformers import TrainerState

    trainer, args = run.trainer, run.args
    if run.resume_from and checkpointing.read_checkpoint_state(run.resume_from)["global_step"] >= args.total_steps:
        # A checkpoint at the last step (--end_to_end_steps lowered to it): the Trainer would make one more update
        # when it resumes there (transformers 5.24), so it is only loaded.
        trainer._load_from_checkpoint(run.resume_from)
        trainer.state = TrainerState.load_from_json(os.path.join(run.resume_from, checkpointing.STATE_FILE))
    else:
        trainer.train(resume_from_checkpoint=run.resume_from)
    step = trainer.state.global_step
    if trainer.stopping.stopped_at is not None:  # SIGTERM / SIGINT: the Trainer saved checkpoint-<step> on the way out
        raise Preempted(
            f"{stop.name} received: stopped after step {step} of {args.total_steps} with checkpoint "
            f"{checkpoint_dir(args.output_dir, step)}. Resume with --resume latest."
        )


def evaluate_and_save(run: TransferRun) -> dict:
    """The fidelity after training; the transferred model saved unless the run ended diverging."""
    args, trainer, report = run.args, run.trainer, run.report
    for parameter in run.student.parameters():
        parameter.requires_grad_(True)
    run.student.eval()
    report["after"] = evaluate(
        run.teacher, run.student, run.tokenizer, run.eval_batches, run.documents, args.batch_size
    )
    report["train_seconds"] = round(trainer.train_seconds, 1)
    # A run that ended diverging (inside a streak of skipped steps, or evaluating to NaN / inf) publishes nothing.
    run.guard.check_finished(
        trainer.state.global_step, f"the transferred model in {args.output_dir}", fidelity_values(report["after"])
    )
    check_weights_finite(run.student, f"the transferred model in {args.output_dir}", run.guard)
    if trainer.is_world_process_zero():
        _save_result(run.student, run.tokenizer, args, report)
    trainer.accelerator.wait_for_everyone()
    return report


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
    write_json_atomic(os.path.join(args.output_dir, REPORT_FILE), report)
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
        args = parse_command_line(argv)
        return run_transfer(args)
    except (*USER_ERRORS, OSError, ValueError) as err:  # bad input: one `error:` line, not a traceback
        raise SystemExit(report(err)) from None
    except Preempted as err:  # SIGTERM / SIGINT: a checkpoint was written, the status says "resume me"
        raise SystemExit(report_preempted(err)) from None


if __name__ == "__main__":
    main()
