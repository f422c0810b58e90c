"""Efficiency benchmark: Linformer against RoBERTa (eager and SDPA attention) of the same width, depth and heads.

What is measured, per sequence length n (and projected length k for the Linformer):

- inference time of one forward pass (batch of `batch` sequences of n tokens, no padding, `torch.inference_mode`);
- training throughput: tokens/s of forward + backward (no optimizer step; dropout 0 in every model);
- activation memory of one inference forward, above the memory the process holds once the model and its input
  exist (so the weights' own footprint is not counted; it is reported separately);
- FLOPs counted analytically (`forward_flops`), and achieved FLOP/s against the machine's measured dense matmul
  throughput (`measure_matmul_peak`), so every point shows how close it is to what the hardware allows.

Isolation: each memory point runs in a fresh process, so one point's allocations cannot pollute the next. Timing
runs one process per n in which all models of that n alternate repetition by repetition (so that load from
elsewhere on the machine hits every model alike); the median is reported. Processes come from a `forkserver`
that has imported torch and transformers once, so a fresh process costs a fork rather than an import.

CPU memory: the process's peak resident set (VmHWM in /proc/self/status) is reset to the current resident set
(writing "5" to /proc/self/clear_refs) once the model, its input and a short warm-up exist; activation memory is
VmHWM after the measured forward minus that resident set. glibc's malloc is told to serve every block of 64 KiB or
more by mmap, so freed tensors leave the resident set at once and the warm-up leaves no reusable cache behind.
Where clear_refs cannot be written, the fallback is ru_maxrss (peak since the process started) minus the same
baseline, marked in the `memory_method` column. CUDA: `torch.cuda.max_memory_allocated` after
`reset_peak_memory_stats`, minus the memory allocated before the forward.
"""

from __future__ import annotations

import csv
import ctypes
import dataclasses
import gc
import multiprocessing
import os
import platform
import resource
import statistics
import time
from dataclasses import dataclass, field

MODELS = ("roberta-eager", "roberta-sdpa", "linformer")
DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}

CSV_COLUMNS = [
    "mode",
    "model",
    "n",
    "k",
    "status",
    "time_s",
    "time_s_min",
    "reps",
    "tokens_per_s",
    "gflop",
    "achieved_gflops",
    "matmul_peak_gflops",
    "fraction_of_peak",
    "activation_mb",
    "weights_mb",
    "estimated_activation_mb",
    "memory_method",
    "device",
    "dtype",
    "layers",
    "batch",
    "hidden_size",
    "heads",
    "sharing",
    "projection",
]


@dataclass
class BenchmarkConfig:
    """One benchmark run. The models share everything but their attention."""

    ns: list[int] = field(default_factory=lambda: [512, 1024, 2048, 4096])
    ks: list[int] = field(default_factory=lambda: [128, 256])
    train_ns: list[int] = field(default_factory=lambda: [512, 2048])
    models: list[str] = field(default_factory=lambda: list(MODELS))
    device: str = "cpu"
    dtype: str = "fp32"
    layers: int = 2
    batch: int = 1
    hidden_size: int = 768
    heads: int = 12
    intermediate_size: int = 3072
    vocab_size: int = 50265
    sharing: str = "headwise"
    projection: str = "linear"
    reps: int = 3
    warmup: int = 1
    threads: int | None = None
    memory_budget_gb: float | None = None  # None: 60% of the machine's (or GPU's) memory
    measure_memory: bool = True
    peer: bool = False
    peer_points: list[tuple[int, int]] = field(default_factory=lambda: [(4096, 256)])
    scaling_ns: list[int] = field(default_factory=list)  # Linformer timed at these n in one process (linear cost)
    timeout_s: float = 1800.0

    def validate(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if self.device == "cpu" and self.dtype != "fp32":
            raise ValueError("On CPU the benchmark runs in fp32 only (half-precision matmuls are emulated there).")
        unknown = set(self.models) - set(MODELS)
        if unknown:
            raise ValueError(f"unknown models {sorted(unknown)}; choose from {MODELS}")
        for k in self.ks:
            if self.projection != "linear" and any(n % k for n in self.ns if k <= n):
                raise ValueError(f"projection={self.projection!r} needs every n to be a multiple of k={k}")
        if self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")


PRESETS = {
    # < 2 minutes on 2 CPU cores: a smoke test of every part of the pipeline.
    "quick": dict(
        ns=[256, 1024], ks=[64, 128], train_ns=[256], scaling_ns=[256, 1024], layers=1, reps=2, vocab_size=1000
    ),
    # The default: Table 3's k = 128, 256 up to n = 16384 (about 15 minutes on 2 CPU cores, see docs/efficiency.md).
    "default": dict(
        ns=[512, 1024, 2048, 4096, 8192, 16384], ks=[128, 256], train_ns=[512, 2048, 4096], scaling_ns=[4096, 16384],
        layers=2,
    ),
    # Only the points of the targets (n = 512, 4096, 16384), with the linear-cost check; about 10 minutes.
    "targets": dict(ns=[512, 4096, 16384], ks=[128, 256], train_ns=[], scaling_ns=[4096, 16384], layers=2),
    # Table 3's whole grid (hours on a CPU; meant for a GPU).
    "paper": dict(
        ns=[512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
        ks=[128, 256, 512, 1024, 2048],
        train_ns=[512, 2048, 4096, 16384],
        scaling_ns=[4096, 16384, 65536],
        layers=2,
    ),
}


# ---------------------------------------------------------------------------------------------------------------
# Models, FLOPs, memory estimates
# ---------------------------------------------------------------------------------------------------------------


def build_model(model: str, n: int, k: int | None, cfg: BenchmarkConfig):
    """A RobertaModel (eager or SDPA attention) or a LinformerModel of the same width, depth and heads, dropout 0."""
    from transformers import RobertaConfig, RobertaModel

    from ..models.linformer.configuration_linformer import LinformerConfig
    from ..models.linformer.modeling_linformer import LinformerModel

    common = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=n + 2,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    if model == "linformer":
        config = LinformerConfig(
            **common,
            max_sequence_length=n,
            projected_length=k,
            sharing=cfg.sharing,
            projection=cfg.projection,
            attn_implementation="sdpa",
        )
        return LinformerModel(config)
    if model in ("roberta-eager", "roberta-sdpa"):
        return RobertaModel(RobertaConfig(**common, attn_implementation=model.split("-")[1]))
    raise ValueError(f"unknown model {model!r}; choose from {MODELS}")


def forward_flops(
    model: str,
    n: int,
    k: int | None,
    *,
    hidden_size: int = 768,
    intermediate_size: int = 3072,
    layers: int = 12,
    batch: int = 1,
    sharing: str = "headwise",
    projection: str = "linear",
) -> int:
    """FLOPs (2 per multiply-add) of the matrix products of one forward pass; elementwise work is not counted.

    Per layer, with d = hidden_size and d_ff = intermediate_size:
    - both models: Q and output maps 2 n d^2, feed-forward 2 n d d_ff;
    - RoBERTa: K and V maps 2 n d^2, Q K^T and P V 2 n^2 d;
    - Linformer fast path: E X (and F X unless E = F) k n d each, K and V maps on k rows 2 k d^2, attention 2 n k d;
    - Linformer plain path (sharing "none" or max pooling): K and V maps 2 n d^2, E K and F V 2 k n d, attention
      2 n k d.
    Pooling projections ("mean", "max", "conv") compress with one add per element (n d) instead of k n d.
    Plus the pooler (d^2 per sequence).
    """
    d, d_ff = hidden_size, intermediate_size
    common = 2 * n * d * d + 2 * n * d * d_ff
    if model.startswith("roberta"):
        per_layer = common + 2 * n * d * d + 2 * n * n * d
    elif model == "linformer":
        compress_one = k * n * d if projection == "linear" else n * d
        from ..models.linformer.configuration_linformer import LinformerConfig

        if LinformerConfig(sharing=sharing, projection=projection).compresses_input_first:
            compressions = 1 if sharing in ("key_value", "layerwise") else 2
            per_layer = common + compressions * compress_one + 2 * k * d * d + 2 * n * k * d
        else:
            per_layer = common + 2 * n * d * d + 2 * compress_one + 2 * n * k * d
    else:
        raise ValueError(f"unknown model {model!r}")
    return 2 * batch * (layers * per_layer + d * d)


def estimate_activation_bytes(model: str, n: int, k: int | None, cfg: BenchmarkConfig, mode: str) -> int:
    """A deliberately generous estimate of the activation memory of one point, to skip those that cannot fit.

    Linear terms: a few (n, d) and (n, d_ff) tensors alive at once in inference; every layer's in training.
    Quadratic terms (eager attention only): scores and probabilities (batch, heads, n, n) alive together.
    """
    b, d, d_ff, h, L = cfg.batch, cfg.hidden_size, cfg.intermediate_size, cfg.heads, cfg.layers
    elem = BYTES_PER_ELEMENT[cfg.dtype]
    if mode == "inference":
        linear = b * n * (8 * d + 3 * d_ff)
        quadratic = 2 * b * h * n * n if model == "roberta-eager" else 0
        compressed = b * h * n * k * 2 if model == "linformer" else 0  # generous: a full (n, k) score block
    else:
        linear = L * b * n * (16 * d + 4 * d_ff)
        quadratic = (L + 2) * b * h * n * n if model == "roberta-eager" else 0
        compressed = L * b * h * n * k * 2 if model == "linformer" else 0
    return (linear + quadratic + compressed) * elem


# ---------------------------------------------------------------------------------------------------------------
# Workers: each runs in a fresh process
# ---------------------------------------------------------------------------------------------------------------


def _setup_worker(task):
    import torch

    if task.get("threads"):
        torch.set_num_threads(task["threads"])
    torch.manual_seed(0)
    return torch


def _synchronize(device):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _make_inputs(cfg: BenchmarkConfig, n: int, device):
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (cfg.batch, n), generator=generator).to(device)
    return ids, torch.ones_like(ids)


def _inference_step(model, ids, mask):
    return model(input_ids=ids, attention_mask=mask).last_hidden_state


def _training_step(model, ids, mask):
    out = model(input_ids=ids, attention_mask=mask).last_hidden_state
    out.float().square().mean().backward()
    for p in model.parameters():
        p.grad = None
    return out


def _prepare(model, cfg: BenchmarkConfig, mode: str):
    import torch

    model = model.to(device=cfg.device, dtype=getattr(torch, DTYPES[cfg.dtype]))
    return model.train() if mode == "train" else model.eval()


def _run_step(step, model, ids, mask, mode):
    import torch

    if mode == "inference":
        with torch.inference_mode():
            return step(model, ids, mask)
    return step(model, ids, mask)


REFERENCE_MATMUL = "dense matmul"


def timing_worker(task: dict) -> dict:
    """Time every point (label, model, n, k) of the task, alternating them repetition by repetition.

    A dense matmul of the feed-forward's shape, (4096, d) @ (d, d_ff), is timed in every round too, so each point's
    achieved FLOP/s can be set against the matmul throughput the machine gave at the same time.
    Returns per-label time lists and that matmul's GFLOP/s (median).
    """
    torch = _setup_worker(task)
    cfg = BenchmarkConfig(**task["config"])
    mode = task["mode"]
    step = _inference_step if mode == "inference" else _training_step
    inputs = {n: _make_inputs(cfg, n, cfg.device) for n in sorted({point[2] for point in task["points"]})}
    runs = {}
    for label, model_name, n, k in task["points"]:
        model = _prepare(build_model(model_name, n, k, cfg), cfg, mode)
        runs[label] = (lambda model=model, n=n: _run_step(step, model, *inputs[n], mode))
    dtype = getattr(torch, DTYPES[cfg.dtype])
    a = torch.randn(4096, cfg.hidden_size, device=cfg.device, dtype=dtype)
    b = torch.randn(cfg.hidden_size, cfg.intermediate_size, device=cfg.device, dtype=dtype)
    runs[REFERENCE_MATMUL] = lambda: a @ b
    for run in runs.values():
        for _ in range(cfg.warmup):
            run()
    times = {label: [] for label in runs}
    labels = list(runs)
    for rep in range(cfg.reps):
        order = labels[rep % len(labels) :] + labels[: rep % len(labels)]  # rotate, so none always goes first
        for label in order:
            _synchronize(cfg.device)
            start = time.perf_counter()
            runs[label]()
            _synchronize(cfg.device)
            times[label].append(time.perf_counter() - start)
    matmul_flops = 2 * 4096 * cfg.hidden_size * cfg.intermediate_size
    return {"times": times, "matmul_gflops": matmul_flops / statistics.median(times.pop(REFERENCE_MATMUL)) / 1e9}


def _read_status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field_name} not in /proc/self/status")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_returns_large_blocks():
    """Serve blocks >= 64 KiB by mmap (fixed threshold, no dynamic growth), so freed tensors leave the RSS."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD
    except OSError:
        pass


def memory_worker(task: dict) -> dict:
    """Activation memory of one step of one model, above the footprint of the model and its input."""
    if task["config"]["device"] == "cpu":
        _malloc_returns_large_blocks()
    torch = _setup_worker(task)
    cfg = BenchmarkConfig(**task["config"])
    n, k, mode = task["n"], task["k"], task["mode"]
    step = _inference_step if mode == "inference" else _training_step
    model = _prepare(build_model(task["model"], n, k, cfg), cfg, mode)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    warm_ids, warm_mask = _make_inputs(cfg, min(n, 64), cfg.device)
    _run_step(step, model, warm_ids, warm_mask, mode)  # lazy initialisation (kernels, thread pools) off the books
    ids, mask = _make_inputs(cfg, n, cfg.device)
    del warm_ids, warm_mask
    gc.collect()
    if cfg.device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline = torch.cuda.memory_allocated()
        _run_step(step, model, ids, mask, mode)
        torch.cuda.synchronize()
        return {"activation_bytes": torch.cuda.max_memory_allocated() - baseline, "weights_bytes": weights,
                "method": "cuda_max_memory_allocated"}
    baseline_kb = _read_status_kb("VmRSS")
    method = "vmhwm" if _reset_peak_rss() else "ru_maxrss"
    _run_step(step, model, ids, mask, mode)
    if method == "vmhwm":
        peak_kb = _read_status_kb("VmHWM")
    else:
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"activation_bytes": max(0, peak_kb - baseline_kb) * 1024, "weights_bytes": weights, "method": method}


def matmul_peak_worker(task: dict) -> dict:
    """Dense matmul throughput (GFLOP/s): the best of a few square and model-shaped products, median of reps."""
    torch = _setup_worker(task)
    cfg = BenchmarkConfig(**task["config"])
    dtype = getattr(torch, DTYPES[cfg.dtype])
    d, d_ff = cfg.hidden_size, cfg.intermediate_size
    shapes = [(2048, 2048, 2048), (4096, d, d_ff), (4096, d_ff, d), (4096, d, d)]
    if cfg.device.startswith("cuda"):
        shapes.append((8192, 8192, 8192))
    best = 0.0
    for m, kk, nn in shapes:
        a = torch.randn(m, kk, device=cfg.device, dtype=dtype)
        b = torch.randn(kk, nn, device=cfg.device, dtype=dtype)
        for _ in range(2):
            a @ b
        times = []
        for _ in range(max(3, cfg.reps)):
            _synchronize(cfg.device)
            start = time.perf_counter()
            a @ b
            _synchronize(cfg.device)
            times.append(time.perf_counter() - start)
        best = max(best, 2 * m * kk * nn / statistics.median(times) / 1e9)
    info = {"gflops": best}
    if cfg.device.startswith("cuda"):
        info["device_name"] = torch.cuda.get_device_name()
        info["total_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
    return info


def peer_worker(task: dict) -> dict:
    """Attention-module level: this package's layer (fast and plain path) against the `linformer` package's.

    Both: width d, H heads, n tokens, k compressed rows, one E and one F shared by the heads, output map included
    (the `linformer` layer ends with it). No mask (that layer has none): ours gets a mask of ones.
    """
    torch = _setup_worker(task)
    try:
        from linformer import LinformerSelfAttention as PeerSelfAttention
    except ImportError as error:
        raise ImportError("--peer needs the `linformer` package: pip install linformer --no-deps") from error

    from ..models.linformer.configuration_linformer import LinformerConfig
    from ..models.linformer.modeling_linformer import LinformerSelfAttention

    cfg = BenchmarkConfig(**task["config"])
    n, k, d, h = task["n"], task["k"], cfg.hidden_size, cfg.heads
    dtype = getattr(torch, DTYPES[cfg.dtype])
    config = LinformerConfig(
        hidden_size=d, num_attention_heads=h, max_sequence_length=n, projected_length=k, sharing="headwise",
        attention_probs_dropout_prob=0.0, attn_implementation="sdpa",
    )
    ours = LinformerSelfAttention(config, layer_idx=0)
    for projection in (ours.key_projection, ours.value_projection):
        torch.nn.init.normal_(projection.weight, std=n**-0.5)
    ours_out = torch.nn.Linear(d, d)
    peer = PeerSelfAttention(dim=d, seq_len=n, k=k, heads=h, dim_head=d // h, one_kv_head=False, share_kv=False)
    for module in (ours, ours_out, peer):
        module.to(device=cfg.device, dtype=dtype).eval()
    x = torch.randn(cfg.batch, n, d, device=cfg.device, dtype=dtype)
    mask = torch.ones(cfg.batch, n, device=cfg.device, dtype=dtype)
    runs = {
        "linformer_hf (fast path)": lambda: ours_out(ours(x, mask, use_fast_path=True)[0]),
        "linformer_hf (plain path)": lambda: ours_out(ours(x, mask, use_fast_path=False)[0]),
        "linformer (PyPI)": lambda: peer(x),
    }
    times = {name: [] for name in runs}
    with torch.inference_mode():
        for run in runs.values():
            for _ in range(max(1, cfg.warmup)):
                run()
        names = list(runs)
        for rep in range(max(3, cfg.reps)):
            for name in names[rep % 3 :] + names[: rep % 3]:
                _synchronize(cfg.device)
                start = time.perf_counter()
                runs[name]()
                _synchronize(cfg.device)
                times[name].append(time.perf_counter() - start)
    return {"times": times}


WORKERS = {
    "timing": timing_worker,
    "memory": memory_worker,
    "matmul_peak": matmul_peak_worker,
    "peer": peer_worker,
}


def _worker_entry(task: dict, connection) -> None:
    try:
        result = WORKERS[task["kind"]](task)
    except Exception as error:  # reported to the parent as the point's status
        import traceback

        result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    connection.send(result)
    connection.close()


_CONTEXT = None


def _context():
    """A forkserver that imports torch and transformers once; every task forks a fresh process from it."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["linformer_hf.research.benchmarking", "linformer_hf", "torch", "transformers"])
    return _CONTEXT


def run_in_fresh_process(task: dict, timeout_s: float) -> dict:
    """Run one worker task in a new process; an out-of-memory kill or a timeout becomes an `error` entry."""
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_worker_entry, args=(task, sender))
    process.start()
    sender.close()
    result = None
    if receiver.poll(timeout_s):
        try:
            result = receiver.recv()
        except EOFError:
            result = None
    process.join(timeout=10 if result is not None else 0)
    if process.is_alive():
        process.kill()
        process.join()
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if result is None:
        code = process.exitcode
        reason = " (killed: out of memory?)" if code in (-9, 137) else ""
        return {"error": f"process exited with code {code}{reason}"}
    return result


# ---------------------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------------------


def _label(model: str, k: int | None) -> str:
    return f"{model} k={k}" if model == "linformer" else model


def _memory_budget_bytes(cfg: BenchmarkConfig, device_total: int | None) -> int:
    if cfg.memory_budget_gb is not None:
        return int(cfg.memory_budget_gb * 2**30)
    if device_total is not None:
        return int(0.6 * device_total)
    import psutil

    return int(0.6 * psutil.virtual_memory().total)


def _points_of(cfg: BenchmarkConfig, n: int):
    """(model, k) pairs measured at length n."""
    points = []
    for model in cfg.models:
        if model == "linformer":
            points.extend(("linformer", k) for k in cfg.ks if k <= n)
        else:
            points.append((model, None))
    return points


def _significant(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def _base_row(cfg: BenchmarkConfig, mode: str, model: str, n: int, k: int | None, peak: float) -> dict:
    row = {column: "" for column in CSV_COLUMNS}
    flops = forward_flops(
        model, n, k, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size, layers=cfg.layers,
        batch=cfg.batch, sharing=cfg.sharing, projection=cfg.projection,
    )
    if mode == "train":
        flops *= 3  # backward costs about twice the forward
    row.update(
        mode=mode, model=model, n=n, k="" if k is None else k, status="ok", gflop=_significant(flops / 1e9),
        matmul_peak_gflops=round(peak, 1), device=cfg.device, dtype=cfg.dtype, layers=cfg.layers, batch=cfg.batch,
        hidden_size=cfg.hidden_size, heads=cfg.heads,
        sharing=cfg.sharing if model == "linformer" else "", projection=cfg.projection if model == "linformer" else "",
    )
    return row


def run_benchmark(cfg: BenchmarkConfig, log=print) -> tuple[list[dict], dict]:
    """Measure every point of `cfg`. Returns the CSV rows and run information (matmul peak, peer comparison)."""
    cfg.validate()
    config = dataclasses.asdict(cfg)
    started = time.time()

    def task(kind, **fields):
        return dict(kind=kind, config=config, threads=cfg.threads, **fields)

    peak_info = run_in_fresh_process(task("matmul_peak"), cfg.timeout_s)
    if "error" in peak_info:
        raise RuntimeError(f"measuring the matmul peak failed: {peak_info['error']}")
    peak = peak_info["gflops"]
    budget = _memory_budget_bytes(cfg, peak_info.get("total_memory_bytes"))
    log(f"dense matmul peak: {peak:.1f} GFLOP/s; memory budget {budget / 2**30:.1f} GiB")

    rows = []

    def fill_times(timing, measured, point_rows):
        for label, model, n, k in measured:
            row = point_rows[label]
            if "error" in timing:
                row["status"] = f"failed: {timing['error']}"
                continue
            times = timing["times"][label]
            median = statistics.median(times)
            row.update(
                time_s=round(median, 5), time_s_min=round(min(times), 5), reps=len(times),
                tokens_per_s=round(cfg.batch * n / median, 1),
                achieved_gflops=_significant(row["gflop"] / median),
                matmul_peak_gflops=_significant(timing["matmul_gflops"]),
                fraction_of_peak=_significant(row["gflop"] / median / timing["matmul_gflops"], 3),
            )

    for mode, ns in (("inference", cfg.ns), ("train", cfg.train_ns)):
        for n in ns:
            measured, point_rows = [], {}
            for model, k in _points_of(cfg, n):
                row = _base_row(cfg, mode, model, n, k, peak)
                estimate = estimate_activation_bytes(model, n, k, cfg, mode)
                row["estimated_activation_mb"] = round(estimate / 2**20, 1)
                if estimate > budget:
                    row["status"] = f"skipped: would not fit (est. {estimate / 2**30:.3g} GiB > {budget / 2**30:.3g})"
                else:
                    measured.append([_label(model, k), model, n, k])
                point_rows[_label(model, k)] = row
                rows.append(row)
            if not measured:
                continue
            log(f"[{time.time() - started:6.0f} s] {mode} n={n}: timing {', '.join(p[0] for p in measured)}")
            timing = run_in_fresh_process(task("timing", mode=mode, points=measured), cfg.timeout_s)
            fill_times(timing, measured, point_rows)
            if mode != "inference" or not cfg.measure_memory:
                continue
            for label, model, _, k in measured:
                row = point_rows[label]
                memory = run_in_fresh_process(task("memory", n=n, k=k, model=model, mode=mode), cfg.timeout_s)
                if "error" in memory:
                    row["memory_method"] = f"failed: {memory['error']}"
                    continue
                row.update(
                    activation_mb=round(memory["activation_bytes"] / 2**20, 1),
                    weights_mb=round(memory["weights_bytes"] / 2**20, 1),
                    memory_method=memory["method"],
                )
            log(f"[{time.time() - started:6.0f} s] {mode} n={n}: memory done")

    if cfg.scaling_ns and "linformer" in cfg.models:
        # Linear cost: the Linformer at several n in one process, side by side, so load drift cannot fake a trend.
        measured, point_rows = [], {}
        for n in cfg.scaling_ns:
            for k in (k for k in cfg.ks if k <= n):
                label = f"linformer n={n} k={k}"
                row = _base_row(cfg, "scaling", "linformer", n, k, peak)
                measured.append([label, "linformer", n, k])
                point_rows[label] = row
                rows.append(row)
        log(f"[{time.time() - started:6.0f} s] linear-cost check: {', '.join(p[0] for p in measured)}")
        fill_times(run_in_fresh_process(task("timing", mode="inference", points=measured), cfg.timeout_s),
                   measured, point_rows)

    info = {"matmul_peak_gflops": peak, "memory_budget_gib": budget / 2**30, "peer": []}
    if cfg.peer:
        for n, k in cfg.peer_points:
            log(f"[{time.time() - started:6.0f} s] peer comparison n={n} k={k}")
            result = run_in_fresh_process(task("peer", n=n, k=k), cfg.timeout_s)
            if "error" in result:
                info["peer"].append({"n": n, "k": k, "error": result["error"]})
                continue
            medians = {name: statistics.median(times) for name, times in result["times"].items()}
            info["peer"].append({"n": n, "k": k, "median_s": medians})
    log(f"[{time.time() - started:6.0f} s] done")
    info["runtime_s"] = time.time() - started
    return rows, info


# ---------------------------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------------------------


def write_csv(rows: list[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _value(row, column):
    value = row.get(column, "") if row else ""
    return float(value) if value not in ("", None) else None


def _find(rows, mode, model, n, k=None):
    for row in rows:
        if row["mode"] == mode and row["model"] == model and row["n"] == n and (k is None or row["k"] == k):
            return row
    return None


def _cell(baseline, linformer, column):
    """baseline / linformer of `column`, or why there is no ratio."""
    if linformer is None or baseline is None:
        return "-"
    if baseline["status"].startswith("skipped"):
        return "baseline OOM"
    if linformer["status"].startswith("skipped"):
        return "OOM"
    a, b = _value(baseline, column), _value(linformer, column)
    if a is None or b is None or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def ratio_tables(rows: list[dict], cfg: BenchmarkConfig) -> str:
    """Markdown: Linformer's speed-up and memory saving over each baseline (Table 3's layout: n down, k across)."""
    out = []
    baselines = [m for m in ("roberta-eager", "roberta-sdpa") if m in cfg.models]
    sections = [("inference", "time_s", "Inference speed-up", cfg.ns)]
    if cfg.measure_memory:
        sections.append(("inference", "activation_mb", "Inference activation-memory saving", cfg.ns))
    sections.append(("train", "time_s", "Training (forward + backward) speed-up", cfg.train_ns))
    for mode, column, title, ns in sections:
        if not ns:
            continue
        for baseline in baselines:
            out.append(f"**{title} of Linformer over {baseline}** (baseline / Linformer)\n")
            out.append("| n \\ k | " + " | ".join(str(k) for k in cfg.ks) + " |")
            out.append("| --- |" + " --- |" * len(cfg.ks))
            for n in ns:
                cells = []
                for k in cfg.ks:
                    lin = _find(rows, mode, "linformer", n, k) if k <= n else None
                    cells.append(_cell(_find(rows, mode, baseline, n), lin, column))
                out.append(f"| {n} | " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def absolute_table(rows: list[dict]) -> str:
    """Markdown: every point's time, throughput, achieved FLOP/s and memory."""
    out = [
        "| mode | model | n | k | status | time (s) | tokens/s | GFLOP | GFLOP/s | of matmul peak | activation MB "
        "| weights MB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        fraction = f"{float(r['fraction_of_peak']):.0%}" if r["fraction_of_peak"] != "" else ""
        out.append(
            f"| {r['mode']} | {r['model']} | {r['n']} | {r['k']} | {r['status']} | {r['time_s']} | "
            f"{r['tokens_per_s']} | {r['gflop']} | {r['achieved_gflops']} | {fraction} | {r['activation_mb']} | "
            f"{r['weights_mb']} |"
        )
    return "\n".join(out)


def scaling_table(rows: list[dict]) -> str:
    """Markdown: Linformer time at each n against the smallest n, with the FLOP ratio (measured in one process)."""
    scaling = [r for r in rows if r["mode"] == "scaling" and r["status"] == "ok"]
    if not scaling:
        return ""
    out = ["| k | n | time (s) | time / time at smallest n | FLOP ratio | of matmul peak |",
           "| --- | --- | --- | --- | --- | --- |"]
    for k in sorted({r["k"] for r in scaling}):
        points = sorted((r for r in scaling if r["k"] == k), key=lambda r: r["n"])
        first = points[0]
        for r in points:
            out.append(
                f"| {k} | {r['n']} | {r['time_s']} | {r['time_s'] / first['time_s']:.2f} | "
                f"{r['gflop'] / first['gflop']:.2f} | {float(r['fraction_of_peak']):.0%} |"
            )
    return "\n".join(out)


def peer_table(info: dict) -> str:
    if not info.get("peer"):
        return ""
    out = ["| n | k | module | median time (s) | linformer (PyPI) / this |", "| --- | --- | --- | --- | --- |"]
    for entry in info["peer"]:
        if "error" in entry:
            out.append(f"| {entry['n']} | {entry['k']} | failed: {entry['error']} | | |")
            continue
        peer_time = entry["median_s"]["linformer (PyPI)"]
        for name, seconds in entry["median_s"].items():
            out.append(f"| {entry['n']} | {entry['k']} | {name} | {seconds:.4f} | {peer_time / seconds:.2f}x |")
    return "\n".join(out)


def plot(rows: list[dict], cfg: BenchmarkConfig, out_dir: str) -> list[str]:
    """Log-log PNGs against n, one line per model: inference time, inference memory, training throughput."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = [
        ("inference", "time_s", "inference time (s)", "inference_time.png"),
        ("inference", "activation_mb", "activation memory above weights (MB)", "inference_memory.png"),
        ("train", "tokens_per_s", "training tokens/s (forward + backward)", "training_throughput.png"),
    ]
    labels = sorted({_label(r["model"], r["k"] or None) for r in rows}, key=lambda s: (s.startswith("lin"), s))
    written = []
    for mode, column, ylabel, filename in figures:
        fig, ax = plt.subplots(figsize=(6, 4.2), dpi=90)
        drawn = False
        for label in labels:
            points = [
                (r["n"], _value(r, column))
                for r in rows
                if r["mode"] == mode and _label(r["model"], r["k"] or None) == label and _value(r, column)
            ]
            if points:
                ax.plot(*zip(*points), marker="o", label=label, linestyle="--" if "roberta" in label else "-")
                drawn = True
        if not drawn:
            plt.close(fig)
            continue
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{mode}, {cfg.device} {cfg.dtype}, {cfg.layers} layers, d={cfg.hidden_size}, H={cfg.heads}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out_dir, filename)
        fig.savefig(path)
        plt.close(fig)
        written.append(path)
    return written


def machine_description(cfg: BenchmarkConfig) -> str:
    import torch

    threads = cfg.threads or torch.get_num_threads()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, torch {torch.__version__} with {threads} threads, "
        f"load average (1, 5, 15 min) {load}"
    )


def report_markdown(rows: list[dict], info: dict, cfg: BenchmarkConfig, command: str, machine: str) -> str:
    parts = [
        "# Benchmark results\n",
        f"Command: `{command}`  ",
        f"Machine: {machine}  ",
        f"Dense matmul peak measured in this run: {info['matmul_peak_gflops']:.1f} GFLOP/s ({cfg.dtype})  ",
        f"Runtime: {info['runtime_s'] / 60:.1f} min  ",
        f"Models: width {cfg.hidden_size}, {cfg.heads} heads, d_ff {cfg.intermediate_size}, {cfg.layers} layers, "
        f"batch {cfg.batch}; Linformer sharing={cfg.sharing}, projection={cfg.projection}\n",
        ratio_tables(rows, cfg),
        "## All points\n",
        absolute_table(rows),
        "",
    ]
    scaling = scaling_table(rows)
    if scaling:
        parts += ["## Linear cost (Linformer at several n, timed side by side in one process)\n", scaling, ""]
    peer = peer_table(info)
    if peer:
        parts += ["## Attention module against the `linformer` package (no mask)\n", peer, ""]
    return "\n".join(parts)
