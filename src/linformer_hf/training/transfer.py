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

This module is the run: the loop, its checkpoints and outputs, and the command line. The run reads top-down in
`_transfer`: `load_models` (the pair, checked), `load_text`, then `evaluate_only`, or `set_up_training`,
`start_or_resume`, `train` (one `train_step` per step, checkpoints, the stop) and `evaluate_and_save`; the steps share
one `TransferRun`. What it runs is split by concern: the options (`transfer_arguments`), the teacher and student and
their attention (`transfer_models`), the text and its windows (`transfer_data`), the losses (`transfer_losses`), what
trains when (`transfer_schedule`) and the fidelity figures (`transfer_evaluation`). The output directory, its lock and
the checkpoints are the training loops' (training/checkpointing.py). It lives in `training/` beside the pretraining
and fine-tuning loops: it is a training loop run under `accelerate launch`, needs the `train` extra (accelerate,
datasets, tqdm), and is not part of the model API.

Usage: `accelerate launch scripts/transfer_attention.py --teacher DIR_OR_HUB_NAME --student CONVERTED_DIR ...`
(or `python -m linformer_hf.training.transfer`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from typing import Any

import torch
from transformers import AutoTokenizer, HfArgumentParser

from ..loading import load_model, pad_as_the_model_takes
from ..models.lengths import max_input_length
from ..outputs import finite_or_null, write_json_atomic, write_text_atomic
from . import checkpointing
from .checkpointing import RunLock, RunOptions
from .errors import Preempted
from .guards import DivergenceGuard, StopSignal, check_weights_finite, gradients_finite, resume_hint
from .transfer_arguments import TransferArguments
from .transfer_data import held_out_batches, load_texts, num_special_tokens, tokenize_streams, training_batch
from .transfer_evaluation import evaluate_documents, evaluate_fidelity, fidelity_values
from .transfer_losses import end_to_end_loss, layer_local_loss, layer_log_key
from .transfer_models import check_layer_loss, check_pair, load_teacher
from .transfer_schedule import default_projection_learning_rate, learning_rates, parameter_groups, trained_groups
from .validation import check_model_source

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
# The run directory as the pretraining and fine-tuning loops have it (training/checkpointing.py), with this command's
# flags, outputs and checkpoint names (checkpoints/step_000000N).
TRANSFER = RunOptions(
    output_dir="--output_dir",
    assign=" ",
    resume="--resume",
    overwrite="--overwrite_output_dir",
    refusal_advice=(
        "Resume that run with --resume latest, start over there with --overwrite_output_dir (deletes its checkpoints, "
        "log, reports and model), or give another --output_dir."
    ),
    no_checkpoint_advice="Checkpoints are written every --checkpoint_every steps; start the run without --resume.",
    outputs=TRANSFER_OUTPUTS,
    output_patterns=(),
    checkpoint_folder="checkpoints",
    checkpoint_prefix="step_",
    checkpoint_digits=7,
    state_file=None,  # accelerate's files only: the completion marker says a folder is a whole checkpoint
)


def checkpoint_dir(output_dir: str, step: int) -> str:
    return TRANSFER.checkpoint_path(output_dir, step)


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
    resuming = args.resume is not None
    if not take:
        checkpointing.check_output_dir_unused(out, resuming, args.overwrite_output_dir, TRANSFER)
        return None
    return checkpointing.claim_output_dir(out, resuming, args.overwrite_output_dir, options=TRANSFER)


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


def evaluate(teacher, student, tokenizer, batches, documents, batch_size) -> dict:
    """The fidelity figures on held-out windows and on whole held-out documents."""
    return {
        "windows": evaluate_fidelity(teacher, student, batches, batch_size),
        "documents": evaluate_documents(teacher, student, tokenizer, documents, batch_size),
    }


class Progress:
    """The step counter, saved and restored with the checkpoint (accelerate's register_for_checkpointing)."""

    def __init__(self):
        self.step = 0
        self.seconds = 0.0

    def state_dict(self):
        return {"step": self.step, "seconds": self.seconds}

    def load_state_dict(self, state):
        self.step, self.seconds = int(state["step"]), float(state["seconds"])


@dataclasses.dataclass
class TransferRun:
    """What the steps of one transfer share: its options, the two models, the text and, once training is set up, the
    optimizer, the step counter, the divergence guard and the report being written."""

    args: TransferArguments
    accelerator: Any
    resume_from: str | None
    student: Any
    teacher: Any
    tokenizer: Any
    lengths: list[int]
    streams: Any = None
    documents: list = dataclasses.field(default_factory=list)
    eval_batches: Any = None
    optimizer: torch.optim.Optimizer | None = None
    progress: Progress = dataclasses.field(default_factory=Progress)
    guard: DivergenceGuard | None = None
    report: dict = dataclasses.field(default_factory=dict)

    @property
    def log_path(self) -> str:
        return os.path.join(self.args.output_dir, "transfer_log.jsonl")


def _transfer(args: TransferArguments, accelerator, locks: list, stop: StopSignal) -> dict:
    from accelerate.utils import set_seed

    # a missing or torn checkpoint: said before any work
    resume_from = checkpointing.resolve_checkpoint(args.resume, args.output_dir, TRANSFER)
    set_seed(args.seed)
    run = load_models(args, accelerator, resume_from)
    if accelerator.is_main_process:  # the pair is sound: the folder is taken before the first write
        locks += [lock for lock in [claim_output_dir(run.args)] if lock is not None]
    load_text(run)
    if run.args.evaluate_only:
        return evaluate_only(run)
    set_up_training(run)
    start_or_resume(run)
    train(run, stop)
    if run.progress.step < run.args.total_steps:  # --stop_after_steps: a checkpoint to resume from is written
        accelerator.print(f"Stopped at step {run.progress.step} of {run.args.total_steps}; resume with --resume latest")
        accelerator.end_training()
        return {"stopped_at": run.progress.step, **run.report}
    return evaluate_and_save(run)


def load_models(args: TransferArguments, accelerator, resume_from: str | None) -> TransferRun:
    """The student, its tokenizer and the teacher, checked as a pair, and the window lengths to train at."""
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
    return TransferRun(args, accelerator, resume_from, student, teacher, tokenizer, lengths)


def load_text(run: TransferRun) -> None:
    """The text, tokenised into a training stream and held-out documents (all held out with --evaluate_only)."""
    args = run.args
    run.streams = tokenize_streams(
        load_texts(args), run.tokenizer, 1.0 if args.evaluate_only else args.eval_fraction, args.seed
    )
    run.documents = run.streams.held_out_documents[: args.eval_documents]


def evaluate_only(run: TransferRun) -> dict:
    """--evaluate_only: the student's fidelity to the teacher as it is, in fidelity.json; nothing trains."""
    args, accelerator = run.args, run.accelerator
    started = time.perf_counter()
    run.teacher.to(accelerator.device)
    report = {
        "teacher": args.teacher,
        "student": args.student,
        "lengths": run.lengths,
        "fidelity": evaluate(
            run.teacher,
            run.student.to(accelerator.device).eval(),
            run.tokenizer,
            held_out_batches(run.streams, run.tokenizer, run.lengths, args.eval_windows),
            run.documents,
            args.batch_size,
        ),
    }
    report["eval_seconds"] = round(time.perf_counter() - started, 1)
    if accelerator.is_main_process:
        os.makedirs(args.output_dir, exist_ok=True)
        write_json_atomic(os.path.join(args.output_dir, "fidelity.json"), report)
        print(json.dumps(report["fidelity"], indent=1))
    return report


def set_up_training(run: TransferRun) -> None:
    """The held-out windows, both models on the device, the optimizer over the groups that train, and what the
    checkpoints hold."""
    args, accelerator = run.args, run.accelerator
    longest = max(run.lengths)
    if len(run.streams.train) < longest:
        raise ValueError(f"The training text has {len(run.streams.train)} tokens, fewer than one window of {longest}.")
    run.eval_batches = held_out_batches(run.streams, run.tokenizer, run.lengths, args.eval_windows)

    device = accelerator.device
    run.teacher.to(device)
    run.student.to(device).eval()  # dropout off: match the teacher's deterministic output
    if args.torch_compile == "layers":
        compile_student_layers(run.student, args, device)
    groups = parameter_groups(run.student, args)
    run.optimizer = torch.optim.AdamW(
        [{"params": params, "name": name} for name, params in groups.items() if params], lr=0.0, weight_decay=0.0
    )
    # Neither model goes through accelerator.prepare: stage 1 calls the student's layers one by one, which a DDP
    # wrapper would not see; gradients are averaged across processes by hand (train_step).
    accelerator.register_for_checkpointing(run.student, run.optimizer, run.progress)
    run.guard = transfer_guard(args, run.resume_from)


def start_or_resume(run: TransferRun) -> None:
    """A resumed run takes its checkpoint's state and drops the log past it; a new one measures the student before
    training (fidelity_before.json) and starts its log afresh."""
    args, accelerator = run.args, run.accelerator
    os.makedirs(args.output_dir, exist_ok=True)
    run.report = {
        "teacher": args.teacher,
        "student": args.student,
        "lengths": run.lengths,
        "arguments": dataclasses.asdict(args),
    }
    if run.resume_from:
        accelerator.load_state(run.resume_from)
        if accelerator.is_main_process:
            _truncate_log(run.log_path, run.progress.step)
        accelerator.print(f"Resumed from {run.resume_from} at step {run.progress.step}")
    else:
        run.report["before"] = evaluate(
            run.teacher, run.student, run.tokenizer, run.eval_batches, run.documents, args.batch_size
        )
        if accelerator.is_main_process:
            _truncate_log(run.log_path, -1)
            write_json_atomic(os.path.join(args.output_dir, "fidelity_before.json"), run.report["before"])


def save_checkpoint(run: TransferRun) -> str:
    # Written atomically with its completion marker (training/checkpointing.py): a kill during the save leaves no
    # checkpoint that --resume latest would take. Never from non-finite weights.
    check_weights_finite(run.student, f"the checkpoint of step {run.progress.step}", run.guard)
    path = checkpointing.save_checkpoint(
        run.accelerator, run.args.output_dir, run.progress.step, limit=run.args.checkpoints_to_keep, options=TRANSFER
    )
    run.guard.last_good_checkpoint = path
    return path


def train(run: TransferRun, stop: StopSignal) -> None:
    """Steps until --total_steps (or --stop_after_steps), logging, checkpointing and watching for divergence; a
    SIGTERM / SIGINT ends it after the current step with a checkpoint (`Preempted`)."""
    from tqdm.auto import tqdm

    args, accelerator, progress, guard = run.args, run.accelerator, run.progress, run.guard
    bar = tqdm(
        total=args.total_steps,
        initial=progress.step,
        disable=not (args.show_progress and accelerator.is_local_main_process),
    )
    stop_at = args.total_steps if args.stop_after_steps is None else min(args.stop_after_steps, args.total_steps)
    # Compiled: this process' first step's seconds (the compile time with it), and the graphs compiled by each step
    # that compiled any: the first of each stage, and the first at each other length; any other is a recompilation.
    compiled = args.torch_compile != "no"
    if compiled:
        from .compiling import compiled_graphs

        run.report["compile"] = {"graphs_by_step": {}}
    while progress.step < stop_at:
        started = time.perf_counter()
        graphs = compiled_graphs() if compiled else 0
        stage = args.stage_of(progress.step)
        loss, finite, record = train_step(run, stage)
        progress.step += 1
        progress.seconds += time.perf_counter() - started
        if compiled:
            if "first_step_seconds" not in run.report["compile"]:
                run.report["compile"]["first_step_seconds"] = seconds = time.perf_counter() - started
                accelerator.print(f"compiled: the first step took {seconds:.1f} s")
            if compiled_graphs() > graphs:
                run.report["compile"]["graphs_by_step"][progress.step] = compiled_graphs() - graphs
        bar.update(1)
        bar.set_postfix(stage=stage, loss=f"{loss.item():.4f}")

        if accelerator.is_main_process and (progress.step % args.log_every == 0 or progress.step == args.total_steps):
            record = {
                "step": progress.step,
                **record,
                "train_seconds": round(progress.seconds, 2),
                **({} if finite else {"skipped": True}),
            }
            with open(run.log_path, "a") as handle:  # NaN / inf as null plus a "nonfinite" list: valid JSON
                handle.write(json.dumps(finite_or_null(record), allow_nan=False) + "\n")
        guard.after_update(progress.step, loss.item(), finite)
        saved = progress.step < args.total_steps and (
            progress.step % args.checkpoint_every == 0 or progress.step == stop_at
        )
        if saved and not guard.streak:  # while updates are non-finite, the last good checkpoint stays the newest
            save_checkpoint(run)
        if stop.requested(accelerator):  # agreed by every process: all stop after this step
            path = guard.last_good_checkpoint if saved and not guard.streak else save_checkpoint(run)
            bar.close()
            accelerator.end_training()
            raise Preempted(
                f"{stop.name} received: stopped after step {progress.step} of {args.total_steps} with checkpoint "
                f"{path}. Resume with --resume latest."
            )
    bar.close()


def train_step(run: TransferRun, stage: str) -> tuple[torch.Tensor, bool, dict]:
    """One update at the current step: the stage's learning rates and trained groups, the step's batch, its loss and
    gradients (averaged over processes). Returns the loss, whether the update was taken (finite gradients) and the
    step's log fields."""
    args, accelerator, student, optimizer = run.args, run.accelerator, run.student, run.optimizer
    step, device = run.progress.step, accelerator.device
    rates, trained = learning_rates(args, step), trained_groups(args, step)
    for group in optimizer.param_groups:
        group["lr"] = rates[group["name"]]
        for parameter in group["params"]:
            parameter.requires_grad_(group["name"] in trained)
    ids = training_batch(
        run.streams, run.tokenizer, args, run.lengths, step, accelerator.process_index, accelerator.num_processes
    ).to(device)
    mask = torch.ones(ids.shape, dtype=torch.float32, device=device)
    if stage == "layer":
        loss, per_layer = layer_local_loss(run.teacher, student, ids, mask, args.loss, args.layer_loss)
    else:
        loss, per_layer = end_to_end_loss(run.teacher, student, ids, mask, args)
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
    record = {
        "stage": stage,
        "length": int(ids.shape[1]),
        "loss": loss.item(),
        layer_log_key(args, stage): per_layer,
        "learning_rates": rates,
    }
    return loss, finite, record


def evaluate_and_save(run: TransferRun) -> dict:
    """The fidelity after training; the transferred model saved unless the run ended diverging."""
    args, accelerator, report = run.args, run.accelerator, run.report
    for parameter in run.student.parameters():
        parameter.requires_grad_(True)
    report["after"] = evaluate(
        run.teacher, run.student, run.tokenizer, run.eval_batches, run.documents, args.batch_size
    )
    report["train_seconds"] = round(run.progress.seconds, 1)
    # A run that ended diverging (inside a streak of skipped steps, or evaluating to NaN / inf) publishes nothing.
    run.guard.check_finished(
        run.progress.step, f"the transferred model in {args.output_dir}", fidelity_values(report["after"])
    )
    check_weights_finite(run.student, f"the transferred model in {args.output_dir}", run.guard)
    if accelerator.is_main_process:
        _save_result(run.student, run.tokenizer, args, report)
    accelerator.wait_for_everyone()
    accelerator.end_training()
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
