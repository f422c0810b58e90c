"""What one benchmark run measures: `BenchmarkConfig` (also the command line, see `cli.py`) and its presets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from huggingface_hub.errors import StrictDataclassError

from .models import DEFAULT_MODELS, MODELS, model_config

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}


@dataclass
class BenchmarkConfig:
    """One benchmark run. The models share everything but their attention.

    The fields are the command line of `python -m benchmarks` (`--ns 512 4096 --reps 5 ...`); each
    field's `help` is its flag's help.
    """

    ns: list[int] = field(
        default_factory=lambda: [512, 1024, 2048, 4096], metadata={"help": "sequence lengths n of inference"}
    )
    ks: list[int] = field(default_factory=lambda: [128, 256], metadata={"help": "Linformer projected lengths k"})
    train_ns: list[int] = field(
        default_factory=lambda: [512, 2048], metadata={"help": "n of the training (forward + backward) timing"}
    )
    scaling_ns: list[int] = field(
        default_factory=list,
        metadata={"help": "n at which the linear-cost models are timed side by side in one process"},
    )
    models: list[str] = field(
        default_factory=lambda: list(DEFAULT_MODELS),
        metadata={"help": f"a subset of {tuple(MODELS)} (default: {', '.join(DEFAULT_MODELS)})"},
    )
    device: str = field(default="cpu", metadata={"help": "cpu or cuda[:i]"})
    dtype: Literal["fp32", "fp16", "bf16"] | None = field(
        default=None, metadata={"help": "default: fp32 on CPU (the only choice there), bf16 on CUDA"}
    )
    layers: int = field(default=2, metadata={"help": "encoder depth, the same for every model"})
    batch: int | None = field(default=None, metadata={"help": "sequences per batch (default 1); or tokens_per_batch"})
    tokens_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "a fixed number of positions per batch: batch = tokens_per_batch / n at each n (not with batch)"
        },
    )
    padding_fraction: float = field(
        default=0.0,
        metadata={
            "help": "this fraction of the positions is padding (attention_mask 0): sequence lengths spread evenly "
            "between (1 - 2 f) n and n in a seeded order, the same batch for every model; real_tokens_per_s counts "
            "the other positions"
        },
    )
    autocast: bool = field(
        default=False,
        metadata={
            "help": "mixed precision as in training: fp32 weights, each step under torch.autocast(dtype), fp16 "
            "training with loss scaling (GradScaler); without it the weights are cast to dtype"
        },
    )
    train_memory: bool = field(
        default=False, metadata={"help": "also measure the training step's memory (CPU: one process a point)"}
    )
    hidden_size: int = 768
    heads: int = 12
    intermediate_size: int = 3072
    vocab_size: int = 50265
    sharing: Literal["none", "headwise", "key_value", "layerwise"] = "headwise"
    num_random_features: int = field(default=256, metadata={"help": "Performer's m, random features per head"})
    projection: Literal["linear", "mean", "max", "conv"] = "linear"
    longformer_window: int = field(
        default=512, metadata={"help": "Longformer's attention_window (the whole window, both sides)"}
    )
    bigbird_block_size: int = field(default=64, metadata={"help": "BigBird's block_size (block-sparse attention)"})
    bigbird_random_blocks: int = field(default=3, metadata={"help": "BigBird's num_random_blocks per query block"})
    compile: Literal["no", "model", "layers"] = field(
        default="no",
        metadata={
            "help": "torch.compile every model (inductor, static shapes) for its inference and training steps: the "
            "whole model, or each encoder layer; the first call's time (compiling included) is compile_s"
        },
    )
    compile_mode: str | None = field(
        default=None, metadata={"help": "inductor's mode with --compile (default, reduce-overhead, max-autotune, ...)"}
    )
    compile_backend: str | None = field(
        default=None, metadata={"help": "the torch.compile backend with --compile (default: inductor)"}
    )
    compile_timeout_s: float | None = field(
        default=None,
        metadata={
            "help": "with --compile: seconds one model's compile (its first call and second step) may take in the "
            "timing process; a model over it fails alone and the others of its n are timed (default: no limit "
            "but timeout_s; a compile is also stopped where it would leave the models compiled before it no time "
            "to be timed before timeout_s)"
        },
    )
    reps: int = field(default=3, metadata={"help": "timed repetitions per point (the median is reported)"})
    warmup: int = field(default=1, metadata={"help": "untimed repetitions per model before timing"})
    threads: int | None = field(default=None, metadata={"help": "torch intra-op threads (default: torch's)"})
    memory_budget_gb: float | None = field(
        default=None, metadata={"help": "skip points estimated above this (default: 60%% of RAM or GPU memory)"}
    )
    measure_memory: bool = field(default=True, metadata={"help": "measure activation memory, one process a point"})
    peer: bool = field(default=False, metadata={"help": "also time the attention module against `linformer` (PyPI)"})
    peer_ns: list[int] = field(default_factory=lambda: [4096], metadata={"help": "n of the peer comparison"})
    peer_k: int = field(default=256, metadata={"help": "k of the peer comparison"})
    timeout_s: float = field(default=1800.0, metadata={"help": "seconds before a worker process is killed"})

    def __post_init__(self):
        if self.dtype is None:
            self.dtype = "fp32" if self.device == "cpu" else "bf16"

    @property
    def bytes_per_element(self) -> int:
        return BYTES_PER_ELEMENT[self.dtype]

    def batch_at(self, n: int) -> int:
        """Sequences per batch at length n: tokens_per_batch / n, else `batch` (default 1)."""
        if self.tokens_per_batch is not None:
            return self.tokens_per_batch // n
        return 1 if self.batch is None else self.batch

    def length_fields(self) -> dict[str, list[int]]:
        """Every field that lists sequence lengths, by name."""
        return {"ns": self.ns, "train_ns": self.train_ns, "scaling_ns": self.scaling_ns}

    def lengths(self) -> list[int]:
        return sorted({n for lengths in self.length_fields().values() for n in lengths})

    def points(self, n: int) -> list[tuple[str, int | None]]:
        """(model, k) pairs measured at length n: one per k <= n for models with a projected length."""
        points = []
        for model in self.models:
            if MODELS[model].takes_k:
                points.extend((model, k) for k in self.ks if k <= n)
            else:
                points.append((model, None))
        return points

    def planned_points(self) -> list[tuple[str, str, int, int | None]]:
        """Every (length list, model, n, k) the run measures: `points` at each n of ns and train_ns, the linear-cost
        models' at each n of scaling_ns (no peer)."""
        return [
            (name, model, n, k)
            for name, lengths in self.length_fields().items()
            for n in lengths
            for model, k in self.points(n)
            if name != "scaling_ns" or MODELS[model].linear
        ]

    def unmeasured_ks(self) -> list[str]:
        """The (length list, n, ks) where a k is longer than n: the models with a k are not measured there."""
        if not any(MODELS[model].takes_k for model in self.models):
            return []
        return [
            f"{name} n={n}: k {[k for k in self.ks if k > n]} > n"
            for name, lengths in self.length_fields().items()
            for n in lengths
            if any(k > n for k in self.ks)
        ]

    def validate(self):
        """Reject a run that would fail part-way, naming the setting; every point's model config is built here."""
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.device == "cpu" and self.dtype != "fp32":
            raise ValueError("On CPU the benchmark runs in fp32 only (half-precision matmuls are emulated there).")
        for name in ("ns", "train_ns", "scaling_ns", "peer_ns", "ks"):
            bad = [value for value in getattr(self, name) if value < 1]
            if bad:
                raise ValueError(f"{name} must hold positive lengths, got {bad}")
        for name, least in (
            ("layers", 1), ("heads", 1), ("hidden_size", 1), ("intermediate_size", 1), ("vocab_size", 4),
            ("reps", 1), ("warmup", 0), ("threads", 1), ("peer_k", 1),
        ):  # fmt: skip
            value = getattr(self, name)
            if value is not None and value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")
        for name in ("timeout_s", "memory_budget_gb"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda[:i], got {self.device!r}")
        # A list flag given with no value is an empty list (so that `--train_ns` alone means no training points); an
        # empty `models`, or `ks` with a Linformer, would measure nothing and report success.
        if not self.models:
            raise ValueError(
                f"models is empty: name at least one of {tuple(MODELS)}, or leave --models out for the default "
                f"({', '.join(DEFAULT_MODELS)})"
            )
        unknown = set(self.models) - set(MODELS)
        if unknown:
            raise ValueError(f"unknown models {sorted(unknown)}; choose from {tuple(MODELS)}")
        with_k = [model for model in self.models if MODELS[model].takes_k]
        if with_k and not self.ks:
            raise ValueError(
                f"ks is empty, but {', '.join(with_k)} needs a projected length k: give ks (e.g. --ks 128 256), or "
                f"drop {', '.join(with_k)} from models"
            )
        if self.num_random_features <= 0:
            raise ValueError(f"num_random_features must be positive, got {self.num_random_features}")
        if self.longformer_window <= 0 or self.longformer_window % 2:
            raise ValueError(
                f"longformer_window must be even and positive (Longformer's rule), got {self.longformer_window}"
            )
        if self.bigbird_block_size <= 0 or self.bigbird_random_blocks < 0:
            raise ValueError(
                f"bigbird_block_size must be positive and bigbird_random_blocks >= 0, got {self.bigbird_block_size}, "
                f"{self.bigbird_random_blocks}"
            )
        if self.batch is not None and self.tokens_per_batch is not None:
            raise ValueError(
                f"batch={self.batch} and tokens_per_batch={self.tokens_per_batch} both set; give one of them "
                "(tokens_per_batch sets batch = tokens_per_batch / n at each n)"
            )
        if self.batch is not None and self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.tokens_per_batch is not None:
            batched = self.length_fields() | ({"peer_ns": self.peer_ns} if self.peer else {})  # the peer's batch too
            uneven = {
                name: bad
                for name, lengths in batched.items()
                if (bad := [n for n in lengths if n > self.tokens_per_batch or self.tokens_per_batch % n])
            }
            if uneven:
                where = ", ".join(f"{name} {bad}" for name, bad in uneven.items())
                raise ValueError(
                    f"tokens_per_batch={self.tokens_per_batch} is not a multiple of every n: {where} (batch = "
                    "tokens_per_batch / n must be a whole number >= 1); change tokens_per_batch or those lengths "
                    "(the preset sets them unless given: --scaling_ns with no value gives none)"
                )
        if not 0.0 <= self.padding_fraction <= 0.5:
            raise ValueError(
                f"padding_fraction must be in [0, 0.5] (sequence lengths are drawn between (1 - 2 f) n and n), "
                f"got {self.padding_fraction}"
            )
        from linformer_hf.training.compiling import ConfigError, check_compile_device, check_compile_options

        try:  # values, then what the device cannot do (CUDA graphs off CUDA; inductor on a CPU without a C++ compiler)
            check_compile_options(self.compile, self.compile_mode, self.compile_backend, flag="compile")
            device = self.device.split(":")[0]
            check_compile_device(self.compile, self.compile_mode, self.compile_backend, device, flag="compile")
        except ConfigError as error:
            raise ValueError(str(error)) from None
        if self.compile_timeout_s is not None:
            if self.compile == "no":
                raise ValueError(
                    f"compile_timeout_s={self.compile_timeout_s} is set but compile is no: set compile to model or "
                    "layers, or drop compile_timeout_s"
                )
            if self.compile_timeout_s <= 0:
                raise ValueError(f"compile_timeout_s must be positive, got {self.compile_timeout_s}")
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")
        if not self.peer and not self.planned_points():
            unmeasured = "; ".join(self.unmeasured_ks())
            raise ValueError(
                f"nothing to measure: models {self.models} have no point at ns={self.ns}, train_ns={self.train_ns}, "
                f"scaling_ns={self.scaling_ns} (scaling_ns times the linear-cost models only"
                f"{'; ' + unmeasured if unmeasured else ''}); give lengths the models run at (a Linformer's k at most "
                "n), or --peer"
            )
        if self.peer and not self.peer_ns:
            raise ValueError("peer is set but peer_ns is empty: give peer_ns (e.g. --peer_ns 4096), or drop peer")
        if self.peer and self.peer_k > min(self.peer_ns):
            raise ValueError(f"peer_k={self.peer_k} is larger than the smallest of peer_ns={self.peer_ns}")
        # Every length list, not only `ns`: a bad (n, k) in `train_ns` would otherwise fail minutes into the run.
        for name in ("ns", "train_ns", "scaling_ns", "peer_ns"):
            for n in getattr(self, name):
                points = [("linformer", self.peer_k)] if name == "peer_ns" else self.points(n)
                for model, k in points:
                    try:
                        model_config(model, n, k, self)
                    except (ValueError, StrictDataclassError) as error:  # the config's own validation
                        # Its last line is the reason; the lines above name the validator.
                        reason = str(error).strip().splitlines()[-1].strip().removeprefix("ValueError: ")
                        raise ValueError(
                            f"{name} has n={n}, which makes an invalid {model} (k={k}, sharing={self.sharing!r}, "
                            f"projection={self.projection!r}): {reason} Change {name} or "
                            f"{'peer_k' if name == 'peer_ns' else 'ks'}."
                        ) from error


REALISTIC_NS = [512, 1024, 2048, 4096, 8192, 16384]
REALISTIC = dict(
    ns=REALISTIC_NS,
    ks=[128, 256],
    train_ns=REALISTIC_NS,
    scaling_ns=[],
    layers=12,
    tokens_per_batch=32768,
    device="cuda",
    dtype="bf16",
    autocast=True,
    train_memory=True,
    reps=5,
    warmup=2,
    timeout_s=600.0,
    models=[
        "roberta-sdpa", "roberta-eager", "linformer", "performer", "modernbert-sdpa", "modernbert-base-sdpa",
        "modernbert-fa2", "modernbert-base-fa2", "longformer", "bigbird",
    ],
)  # fmt: skip

PRESETS = {
    # < 2 minutes on 2 CPU cores: a smoke test of every part of the pipeline.
    "quick": dict(
        ns=[256, 1024], ks=[64, 128], train_ns=[256], scaling_ns=[256, 1024], layers=1, reps=2, vocab_size=1000
    ),
    # The default: Table 3's k = 128, 256 up to n = 16384 (about 15 minutes on 2 CPU cores,
    # see docs/results/efficiency-cpu.md).
    "default": dict(
        ns=[512, 1024, 2048, 4096, 8192, 16384],
        ks=[128, 256],
        train_ns=[512, 2048, 4096],
        scaling_ns=[4096, 16384],
        layers=2,
    ),
    # Only the points of the targets (n = 512, 4096, 16384), with the linear-cost check; about 10 minutes.
    "targets": dict(ns=[512, 4096, 16384], ks=[128, 256], train_ns=[], scaling_ns=[4096, 16384], layers=2),
    # Linformer against the peers a user would pick instead (Longformer, BigBird) and RoBERTa-SDPA, k = 256 (issue
    # 14); about 40 minutes on 2 CPU cores. `--ns 4096 --train_ns 4096` for the headline points alone.
    "peers": dict(
        ns=[1024, 2048, 4096, 8192, 16384],
        ks=[256],
        train_ns=[1024, 4096],
        scaling_ns=[],
        layers=2,
        models=[
            "roberta-sdpa",
            "linformer",
            "performer",
            "modernbert-sdpa",
            "longformer",
            "longformer-global",
            "bigbird",
        ],
    ),
    # Issue 20's realistic load, for a CUDA machine: base width, 12 layers, 32,768 positions per batch (batch =
    # 32768 / n), bf16 autocast (`--dtype fp16` for a V100: loss scaling, no bf16), inference and training at every
    # n, memory of both (torch.cuda.max_memory_allocated). ModernBERT as released (22 layers) and at equal depth.
    # `gpu-realistic-padded`: the same with 25% padding. The whole grid: experiments/gpu_checks.py, part realistic_grid.
    "gpu-realistic": REALISTIC,
    "gpu-realistic-padded": dict(REALISTIC, padding_fraction=0.25),
    # Table 3's whole grid (hours on a CPU; meant for a GPU).
    "paper": dict(
        ns=[512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
        ks=[128, 256, 512, 1024, 2048],
        train_ns=[512, 2048, 4096, 16384],
        scaling_ns=[4096, 16384, 65536],
        layers=2,
    ),
}
