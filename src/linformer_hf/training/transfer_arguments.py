"""The options of an attention transfer run (`python -m linformer_hf.training.transfer`), checked when parsed."""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Literal

# The options of training alone, which --evaluate_only refuses (`TransferArguments.check_evaluate_only`): what trains
# and how, what is held out of training (--evaluate_only holds out everything), its log and checkpoints, their
# resumption and the stops. It keeps the text, --lengths, --batch_size, --eval_windows, --eval_documents, --seed (which
# held-out documents are embedded whole), --overwrite_output_dir (replaces fidelity.json) and --show_progress.
TRAINING_ONLY = (
    "layer_steps",
    "end_to_end_steps",
    "train_attention_weights",
    "layer_loss",
    "loss",
    "projection_learning_rate",
    "attention_learning_rate",
    "end_to_end_learning_rate",
    "warmup_steps",
    "mlm_weight",
    "eval_fraction",
    "log_every",
    "checkpoint_every",
    "checkpoints_to_keep",
    "resume",
    "stop_after_steps",
    "nonfinite_patience",
    "torch_compile",
    "torch_compile_mode",
    "torch_compile_backend",
)


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
        default=None,
        metadata={
            "help": "window lengths in tokens, used in turn (default: 32 and n, or the teacher's positions if fewer)"
        },
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
            "(Hedgehog; a Linformer with linear E), or its whole output (CALD); see training/transfer.py's docstring"
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
        default=64,
        metadata={
            "help": "held-out documents embedded whole (truncated to n, or to the teacher's positions if fewer) for "
            "the cosine figure"
        },
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
    # The options given on the command line (`parse_command_line`), which --evaluate_only refuses whatever their
    # value; None (the Python API, which cannot tell): those set away from their defaults. Not an option itself.
    given: dataclasses.InitVar[tuple[str, ...] | None] = None

    def __post_init__(self, given: tuple[str, ...] | None = None):
        if (self.text_files is None) == (self.dataset is None):
            raise ValueError(
                "Give the text either as --text_files or as --dataset (with --data_files for a local "
                "csv/json/text builder), not both and not neither."
            )
        self.check_evaluate_only(given)
        if (
            self.layer_steps < 0
            or self.end_to_end_steps < 0
            or (self.layer_steps + self.end_to_end_steps == 0 and not self.evaluate_only)
        ):
            raise ValueError("Nothing to train: set --layer_steps and/or --end_to_end_steps to a positive number.")
        if self.batch_size <= 0 or self.eval_windows <= 0 or self.nonfinite_patience <= 0:
            raise ValueError("--batch_size, --eval_windows and --nonfinite_patience must be positive.")
        for name in ("log_every", "checkpoint_every", "checkpoints_to_keep", "eval_documents"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1, got {getattr(self, name)}.")
        # Each ran: 0 or a negative stop stopped after one step, a negative warm-up was none, a negative learning
        # rate or MLM weight climbed the loss, a NaN one diverged after the teacher was measured.
        if self.stop_after_steps is not None and self.stop_after_steps < 1:
            raise ValueError(
                f"--stop_after_steps must be at least 1 (or left out: run to the end), got {self.stop_after_steps}."
            )
        if self.warmup_steps < 0:
            raise ValueError(f"--warmup_steps must be 0 or more, got {self.warmup_steps}.")
        for name in ("projection_learning_rate", "attention_learning_rate", "end_to_end_learning_rate", "mlm_weight"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"--{name} must be a finite number, 0 or more, got {value}.")
        if not 0 <= self.seed < 2**32:  # numpy's range: accelerate's set_seed said so without naming the option
            raise ValueError(f"--seed must be in [0, 2**32 - 1], got {self.seed}.")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"--eval_fraction must be in (0, 1), got {self.eval_fraction}.")
        from .compiling import ConfigError, check_compile_options

        try:
            # stage 1 runs the layers one by one: no whole-model graph
            check_compile_options(
                self.torch_compile, self.torch_compile_mode, self.torch_compile_backend, "--torch_compile", ("layers",)
            )
        except ConfigError as error:
            raise ValueError(str(error)) from None
        if self.resume is not None and self.overwrite_output_dir:
            raise ValueError(
                "--overwrite_output_dir deletes the checkpoints that --resume would continue from: give one of them."
            )

    def check_evaluate_only(self, given: tuple[str, ...] | None = None) -> None:
        """--evaluate_only trains nothing: a training-only option given with it is refused, naming each, rather than
        ignored (a --resume or --stop_after_steps was taken without a word). ``given``: the options typed on the
        command line, refused whatever their value (`--layer_steps 200` at its default too); None: those set away
        from their defaults."""
        if not self.evaluate_only:
            return
        if given is None:
            defaults = {field.name: field.default for field in dataclasses.fields(self)}
            given = [name for name in TRAINING_ONLY if getattr(self, name) != defaults[name]]
        given = [name for name in TRAINING_ONLY if name in given]
        if given:
            raise ValueError(
                f"--evaluate_only trains nothing, so {', '.join(f'--{name}' for name in given)} "
                f"{'does' if len(given) == 1 else 'do'} nothing with it: leave {'it' if len(given) == 1 else 'them'} "
                "out (it measures the student as it is, on all the text given), or drop --evaluate_only to train."
            )

    @property
    def total_steps(self) -> int:
        return self.layer_steps + self.end_to_end_steps

    def stage_of(self, step: int) -> str:
        """'layer' for the first `layer_steps` steps (0-based), then 'end_to_end'."""
        return "layer" if step < self.layer_steps else "end_to_end"


def parse_command_line(argv: list[str] | None = None) -> TransferArguments:
    """The options of the command line (``argv``; None: ``sys.argv``'s), with the names of those given passed on (for
    `TransferArguments.check_evaluate_only`). Each starts as a marker in the namespace parsed into, which argparse then
    leaves where the option is left out (it sets a default only where there is none): an option given at its default
    is told from one left out, which takes the dataclass's default."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(TransferArguments)
    left_out = object()
    namespace = argparse.Namespace(**{action.dest: left_out for action in parser._actions if action.dest != "help"})
    namespace, unknown = parser.parse_known_args(argv, namespace)
    if unknown:  # as HfArgumentParser.parse_args_into_dataclasses says it
        raise ValueError(f"Some specified arguments are not used by the HfArgumentParser: {unknown}")
    given = {name: value for name, value in vars(namespace).items() if value is not left_out}
    return TransferArguments(**given, given=tuple(given))
