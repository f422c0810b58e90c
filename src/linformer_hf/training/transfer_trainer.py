"""The `Trainer` of an attention transfer (training/transfer.py runs it): `AttentionTransferTrainer` takes the step's
windows as its batch, computes the stage's loss, builds the parameter groups and their schedule, averages gradients
over processes by hand (stage 1 calls the student's layers one by one, which DistributedDataParallel's forward does
not see) and keeps the run's records: ``transfer_log.jsonl``, the compile record, the training seconds and, in each
``checkpoint-N``, the recipe fingerprint and the completion marker (training/checkpointing.py)."""

from __future__ import annotations

import json
import math
import time

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from ..conversion import SENTENCE_TRANSFORMERS_FILES
from ..outputs import finite_or_null
from ..registration import TOKENIZER_SAVED_FILES
from . import checkpointing
from .checkpointing import RECIPE_FILE, SUPERSEDED_PATTERN, RunOptions
from .guards import divergence_callback, stop_after_steps_callback
from .loop import optimizer_settings_callback
from .transfer_arguments import TransferArguments
from .transfer_data import training_batch
from .transfer_losses import end_to_end_loss, layer_local_loss, layer_log_key
from .transfer_schedule import TransferSchedule, learning_rates, parameter_groups, trained_groups
from .validation import runs_on_cpu

# What a transfer writes in its output_dir; --overwrite_output_dir deletes these (and the names of
# TRANSFER_OUTPUT_PATTERNS), so that nothing of the earlier run is taken as this one's: its log and reports, and the
# transferred model's every file (weights, config, modeling code, tokenizer, the sentence-transformers pooling and the
# conversion report copied from the student). ("checkpoints": those of the loop transfer ran on before the Trainer.)
TRANSFER_OUTPUTS = (
    "checkpoints",
    "transfer_log.jsonl",
    "fidelity_before.json",
    "fidelity.json",
    "transfer_report.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "compat.py",
    *TOKENIZER_SAVED_FILES,
    *SENTENCE_TRANSFORMERS_FILES,
    "conversion_report.json",
)
# the Trainer's checkpoints, weight shards, the families' modeling code, sentence-transformers' module folders
# (1_Pooling, 2_Normalize), and what a resume of an earlier checkpoint set aside (`transfer.set_aside_later_work`)
TRANSFER_OUTPUT_PATTERNS = (
    r"checkpoint-\d+",
    SUPERSEDED_PATTERN,
    r"model-\d+-of-\d+\.safetensors",
    r"(configuration|modeling)_[a-z]+\.py",
    r"\d+_[A-Za-z]+",
)
# The run directory as pretraining and fine-tuning have it (training/checkpointing.py): the Trainer's checkpoint-N in
# the output directory, with this command's flags and outputs.
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
    output_patterns=TRANSFER_OUTPUT_PATTERNS,
    start_over="start over with --overwrite_output_dir, or give another --output_dir",
    max_steps="--layer_steps + --end_to_end_steps",
)
PROGRESS_FILE = "transfer_progress.json"  # in each checkpoint: the training seconds so far


def training_arguments(args: TransferArguments) -> TrainingArguments:
    """What the Trainer takes from the transfer's options: one step's index per batch (`AttentionTransferTrainer`
    turns it into that step's windows), the steps, checkpoints every --checkpoint_every steps; no clipping, no mixed
    precision (the loop it replaced had neither), and no logging of the Trainer's own (the transfer log is ours)."""

    training = TrainingArguments(
        output_dir=args.output_dir,  # checkpoint-N
        seed=args.seed,
        per_device_train_batch_size=1,
        max_steps=args.total_steps,
        max_grad_norm=0.0,
        save_strategy="steps",
        save_steps=args.checkpoint_every,
        # No save_total_limit: the Trainer's rotation deletes the older checkpoints before the new one is marked
        # complete; they are pruned after the marker (`AttentionTransferTrainer.record_checkpoint`).
        logging_strategy="no",
        report_to="none",
        disable_tqdm=not args.show_progress,
        remove_unused_columns=False,
        use_cpu=runs_on_cpu(),
    )
    training.mixed_precision = "no"  # not the Accelerate config's: the losses are float32, as the loop's were
    return training


class AttentionTransferTrainer(Trainer):
    """`Trainer` for attention transfer (the module docstring): the step's windows as its batch, the stage's loss,
    the parameter groups and their schedule, and the run's records. Built by `transfer.build_trainer`, with ``run`` the
    `transfer.TransferRun` whose steps it trains."""

    def __init__(self, *args, run, stopping, fingerprint: dict, **kwargs):
        self.run = run
        self.events = TransferEvents(self)
        options = run.args
        callbacks = [self.events, stopping]  # before the guard's, which checks the weights of the saves they ask for
        if options.stop_after_steps is not None and options.stop_after_steps < options.total_steps:
            callbacks.append(stop_after_steps_callback(options.stop_after_steps))
        callbacks.append(divergence_callback(run.guard, update_loss=lambda: self.update_loss))
        callbacks.append(optimizer_settings_callback())
        super().__init__(*args, callbacks=callbacks, **kwargs)
        self.stopping, self.fingerprint = stopping, fingerprint
        stopping.accelerator = self.accelerator  # its processes agree on the stop
        self.update_loss = math.nan  # the last update's loss
        self.update_record: dict = {}  # its log fields
        self.train_seconds = 0.0  # in updates (checkpoints and evaluation left out), over the whole run
        self._update_started = 0.0
        self._graphs = 0
        self.compiled = options.torch_compile != "no"
        if self.compiled:
            run.report["compile"] = {"graphs_by_step": {}}

    def _build_accelerator_args(self, **kwargs):
        from accelerate.utils import TorchDynamoPlugin

        # The Accelerate config does not compile the student: --torch_compile layers compiles it in place.
        return {**super()._build_accelerator_args(**kwargs), "dynamo_plugin": TorchDynamoPlugin(backend="no")}

    # -- data ---------------------------------------------------------------------------------------------------

    def get_train_dataloader(self):
        from torch.utils.data import DataLoader

        # The steps' indices in order, each its own batch, not sharded over the processes: every process turns the
        # index into its own rows of that step's windows (`step_batch`). A resume skips the steps done.
        return DataLoader(range(self.args.max_steps), batch_size=1, collate_fn=self.step_batch)

    def step_batch(self, steps: list[int]) -> dict:
        (step,) = steps
        run, processes = self.run, self.accelerator
        ids = training_batch(
            run.streams, run.tokenizer, run.args, run.lengths, step, processes.process_index, processes.num_processes
        )
        return {"input_ids": ids, "step": step}

    # -- what trains, and how fast --------------------------------------------------------------------------------

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            groups = parameter_groups(self.model, self.run.args)
            self.optimizer = torch.optim.AdamW(
                [{"params": params, "name": name} for name, params in groups.items() if params],
                lr=0.0,
                weight_decay=0.0,
            )
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        if self.lr_scheduler is None:
            self.lr_scheduler = TransferSchedule(optimizer or self.optimizer, self.run.args)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def start_update(self, step: int) -> None:
        """Before update ``step`` (0-based): its groups train, at its learning rates."""
        trained = trained_groups(self.run.args, step)
        for group in self.optimizer.param_groups:
            for parameter in group["params"]:
                parameter.requires_grad_(group["name"] in trained)
        self.lr_scheduler.at(step)
        if self.compiled:
            from .compiling import compiled_graphs

            self._graphs = compiled_graphs()
        self._update_started = time.perf_counter()

    # -- one update -----------------------------------------------------------------------------------------------

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        run, student, step = self.run, self.model, inputs["step"]
        if step != self.state.global_step:
            raise RuntimeError(f"The batch of step {step} came at update {self.state.global_step}.")
        # Dropout off (the Trainer's training_step put the student in train mode): the teacher's output, the target,
        # is deterministic. The student itself, not the DistributedDataParallel wrapper: stage 1 calls its layers.
        student.eval()
        ids = inputs["input_ids"]
        mask = torch.ones(ids.shape, dtype=torch.float32, device=ids.device)
        stage = run.args.stage_of(step)
        if stage == "layer":
            loss, per_layer = layer_local_loss(run.teacher, student, ids, mask, run.args.loss, run.args.layer_loss)
        else:
            loss, per_layer = end_to_end_loss(run.teacher, student, ids, mask, run.args)
        self.update_loss = loss.item()
        self.update_record = {
            "stage": stage,
            "length": int(ids.shape[1]),
            "loss": self.update_loss,
            layer_log_key(run.args, stage): per_layer,
            "learning_rates": learning_rates(run.args, step),
        }
        return (loss, None) if return_outputs else loss

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.accelerator.num_processes > 1:  # DistributedDataParallel saw no forward: averaged here
            for parameter in self.model.parameters():
                if parameter.grad is not None:
                    parameter.grad = self.accelerator.reduce(parameter.grad, reduction="mean")
        return loss

    def record_update(self, control) -> None:
        """After update ``state.global_step``: its time, its line in the transfer log, the compile record, and no
        checkpoint while it is non-finite. The last update keeps the Trainer's checkpoint (its optimizer state beside
        the transferred model that follows), which a run with more steps goes on from. Its loss goes to the divergence
        guard next (`divergence_callback`)."""
        args, report, step = self.run.args, self.run.report, self.state.global_step
        seconds = time.perf_counter() - self._update_started
        self.train_seconds += seconds
        if self.compiled:
            from .compiling import compiled_graphs

            if "first_step_seconds" not in report["compile"]:
                report["compile"]["first_step_seconds"] = seconds
                self.accelerator.print(f"compiled: the first step took {seconds:.1f} s")
            if compiled_graphs() > self._graphs:
                report["compile"]["graphs_by_step"][step] = compiled_graphs() - self._graphs
        skipped = self.accelerator.optimizer_step_was_skipped  # non-finite gradients (divergence_callback)
        if self.accelerator.is_main_process and (step % args.log_every == 0 or step == args.total_steps):
            record = {
                "step": step,
                **self.update_record,
                "train_seconds": round(self.train_seconds, 2),
                **({"skipped": True} if skipped else {}),
            }
            with open(self.run.log_path, "a") as handle:  # NaN / inf as null plus a "nonfinite" list: valid JSON
                handle.write(json.dumps(finite_or_null(record), allow_nan=False) + "\n")
        if skipped or not math.isfinite(self.update_loss):
            control.should_save = False  # while updates are non-finite, the last good checkpoint stays the newest

    def record_checkpoint(self) -> str:
        """After the Trainer saved ``checkpoint-N``: the fingerprint, the training seconds and the completion marker
        written into it, the older ones pruned (checkpointing.py)."""
        path = checkpointing.mark_checkpoint_complete(
            self.accelerator,
            self.args.output_dir,
            self.state.global_step,
            self.run.args.checkpoints_to_keep,
            records={RECIPE_FILE: self.fingerprint, PROGRESS_FILE: {"train_seconds": self.train_seconds}},
            options=TRANSFER,
        )
        self.run.guard.last_good_checkpoint = path
        return path


class TransferEvents(TrainerCallback):
    """The Trainer's events that `AttentionTransferTrainer` acts on."""

    def __init__(self, trainer: AttentionTransferTrainer):
        self.trainer = trainer

    def on_step_begin(self, args, state, control, **kwargs):
        self.trainer.start_update(state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.record_update(control)

    def on_save(self, args, state, control, **kwargs):
        self.trainer.record_checkpoint()
