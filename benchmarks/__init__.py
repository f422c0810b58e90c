"""Efficiency benchmark: Linformer against RoBERTa (eager and SDPA attention) of the same width, depth and heads, and
against the peers a user with long documents would pick instead (transformers' Longformer and BigBird, opt-in).

What is measured, per sequence length n (and projected length k for the Linformer):

- inference time of one forward pass (batch of `batch` sequences of n tokens, no padding, `torch.inference_mode`);
- a training step: forward + backward + AdamW's step (tokens/s; dropout 0 in every model);
- activation memory of one inference forward, above the memory the process holds once the model and its input
  exist (so the weights' own footprint is not counted; it is reported separately);
- FLOPs from the cost model (torch's FlopCounterMode on the run itself for the peers), and achieved FLOP/s against
  the machine's dense matmul throughput measured in the same process, so every point shows how close it is to what
  the hardware allows;
- for the peers, the attention that actually ran (BigBird falls back to full attention on short inputs).

The parts: `models` (what is compared, by name), `costs` (FLOPs and memory estimates, pure functions of a model
config), `workers` (the measurements, each in a fresh process), `run` (the run, producing `BenchmarkRow`s),
`results` (the row and its CSV), `report` (tables, plots), `resume` (a run's checkpoint, read back by `--resume`),
`cli` (the command line, derived from `BenchmarkConfig`).
"""

from .config import PRESETS, BenchmarkConfig
from .costs import estimate_activation_bytes, forward_flops, step_flops
from .models import MODELS, build_model, model_config
from .report import plot, ratio_tables, report_markdown
from .results import CSV_COLUMNS, BenchmarkRow, Mode, Status, read_csv, write_csv
from .run import RunInfo, run_benchmark

__all__ = [
    "CSV_COLUMNS",
    "MODELS",
    "PRESETS",
    "BenchmarkConfig",
    "BenchmarkRow",
    "Mode",
    "RunInfo",
    "Status",
    "build_model",
    "estimate_activation_bytes",
    "forward_flops",
    "model_config",
    "plot",
    "ratio_tables",
    "read_csv",
    "report_markdown",
    "run_benchmark",
    "step_flops",
    "write_csv",
]
