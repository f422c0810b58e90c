"""One row per measured point (`BenchmarkRow`), and its CSV form: the columns are the dataclass's fields."""

from __future__ import annotations

import csv
import dataclasses
import enum
import typing
from dataclasses import dataclass

from linformer_hf.outputs import write_csv_atomic


class Status(str, enum.Enum):
    OK = "ok"
    SKIPPED = "skipped"  # estimated above the memory budget, never run; `reason` gives the estimate
    FAILED = "failed"  # the worker raised, timed out or was killed; `reason` says which


class Mode(str, enum.Enum):
    INFERENCE = "inference"  # one forward pass under torch.inference_mode
    TRAIN = "train"  # a training step: forward + backward + AdamW step (rows before issue 14: no optimizer step)
    SCALING = "scaling"  # inference of one model at several n, timed side by side in one process


@dataclass
class BenchmarkRow:
    """One point: a model at length n (and projected length k), in one mode. None: not measured."""

    mode: Mode
    model: str
    n: int
    k: int | None
    status: Status = Status.OK
    reason: str | None = None
    time_s: float | None = None  # median of the repetitions
    time_s_min: float | None = None
    reps: int | None = None
    tokens_per_s: float | None = None  # positions (padding included) per second
    real_tokens_per_s: float | None = None  # positions the attention mask keeps (padding excluded) per second
    padding_fraction: float | None = None  # of the batch's positions, as drawn (0: no padding)
    gflop: float | None = None  # from the cost model (costs.step_flops) or counted, see flop_source
    flop_source: str | None = None  # "cost model", or "FlopCounterMode" (counted on the run: the peers)
    achieved_gflops: float | None = None
    matmul_peak_gflops: float | None = None  # the dense matmul timed in the same process (or the run's peak)
    fraction_of_peak: float | None = None
    activation_mb: float | None = None  # peak memory of the step above the model and its input
    weights_mb: float | None = None
    estimated_activation_mb: float | None = None  # costs.estimate_activation_bytes
    peak_mb: float | None = None  # the step's peak: CUDA max_memory_allocated (every model of the process), CPU VmHWM
    memory_method: str | None = None  # vmhwm, ru_maxrss or cuda_max_memory_allocated
    memory_error: str | None = None  # the memory process failed (the timing may still be fine)
    device: str | None = None
    dtype: str | None = None
    autocast: bool | None = None  # fp32 weights, the step under torch.autocast(dtype); else weights cast to dtype
    layers: int | None = None
    batch: int | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    heads: int | None = None
    sharing: str | None = None  # Linformer only
    projection: str | None = None  # Linformer only
    attention: str | None = None  # what the peers' attention actually ran (models.realised_attention)
    kernels: str | None = None  # the fused attention ops that ran (SDPA's backend, flash_attn), `workers.attention_ops`
    compile: str | None = None  # what torch.compile compiled: no, model or layers (`--compile`)
    compile_s: float | None = None  # compiled: the first call's seconds (compiling and one step)
    graphs_first_call: int | None = None  # compiled: graphs dynamo compiled in the model's first call (1: no break)
    # compiled: graphs compiled by the model's second step, run alone right after its first (what a run of this
    # model alone recompiles after its first step; the "nothing recompiles" is 0 here)
    graphs_second_step: int | None = None
    # compiled: graphs compiled by the model's later calls (warm-ups after the other models of its process were built,
    # the memory step, the timed repetitions); > 0 from the timed ones puts compile time in the figures
    graphs_later: int | None = None

    @property
    def label(self) -> str:
        return self.model if self.k is None else f"{self.model} k={self.k}"


CSV_COLUMNS = [f.name for f in dataclasses.fields(BenchmarkRow)]


def _to_text(value) -> str:
    if value is None:
        return ""
    return value.value if isinstance(value, enum.Enum) else str(value)


def _from_text(text: str, hint):
    """Parse one CSV cell back into the field's type (`X | None`: empty means None)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args:  # Optional
        if text == "":
            return None
        hint = args[0]
    if hint is bool:
        return text == "True"
    return hint(text)


def write_csv(rows: list[BenchmarkRow], path: str) -> None:
    """Write the rows through a temporary file: a run stopped while writing keeps the previous whole file."""
    write_csv_atomic(path, CSV_COLUMNS, ([_to_text(getattr(row, column)) for column in CSV_COLUMNS] for row in rows))


# Columns added after runs were published: absent from an older CSV, they read as not measured (None).
LATER_COLUMNS = (
    "flop_source", "attention", "real_tokens_per_s", "padding_fraction", "peak_mb", "autocast", "kernels",
    "compile", "compile_s", "graphs_first_call", "graphs_second_step", "graphs_later",
)  # fmt: skip


def read_csv(path: str) -> list[BenchmarkRow]:
    """The rows `write_csv` wrote, typed again (to redraw tables and plots from a saved run)."""
    hints = typing.get_type_hints(BenchmarkRow)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        present = set(reader.fieldnames or [])
        missing = set(CSV_COLUMNS) - present - set(LATER_COLUMNS)
        if missing:
            raise ValueError(f"{path} lacks the columns {sorted(missing)}; was it written by this version?")
        columns = [c for c in CSV_COLUMNS if c in present]
        return [BenchmarkRow(**{c: _from_text(record[c], hints[c]) for c in columns}) for record in reader]
