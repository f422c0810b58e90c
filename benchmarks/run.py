"""The run: validate, measure the matmul peak, then every point in fresh processes, collecting typed rows."""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field

from .config import BenchmarkConfig
from .costs import estimate_activation_bytes, step_flops
from .models import MODELS, model_config
from .results import BenchmarkRow, Mode, Status
from .workers import (
    INTERRUPTED,
    MatmulPeakTask,
    MemoryTask,
    PeerTask,
    TimingProgress,
    TimingTask,
    WorkerFailed,
    WorkerTimedOut,
    padded_lengths,
    point_reason,
    run_in_fresh_process,
)


@dataclass
class PeerResult:
    n: int
    k: int
    median_s: dict[str, float] = field(default_factory=dict)  # module -> median seconds
    error: str | None = None


@dataclass
class RunInfo:
    matmul_peak_gflops: float
    memory_budget_gib: float
    peer: list[PeerResult] = field(default_factory=list)
    runtime_s: float = 0.0
    peak_info: dict = field(default_factory=dict)  # MatmulPeakTask's result (GFLOP/s; CUDA: device name, memory)


@dataclass
class Measured:
    """What earlier sittings of a run measured (`--resume`): the rows of its first lengths and its first peer
    comparisons (`kept_groups`, `kept_peers`), kept as they are and not measured again."""

    rows: list[BenchmarkRow] = field(default_factory=list)
    peer: list[PeerResult] = field(default_factory=list)


Point = tuple[Mode, str, int, "int | None"]


def planned_groups(cfg: BenchmarkConfig) -> list[list[Point]]:
    """Every (mode, model, n, k) of the run in the order it measures them, by the groups it saves at once
    (`on_measured`): each n of ns (inference), then of train_ns (training), then the linear-cost check (every n of
    scaling_ns, one process)."""
    groups = [
        [(mode, model, n, k) for model, k in cfg.points(n)]
        for mode, ns in ((Mode.INFERENCE, cfg.ns), (Mode.TRAIN, cfg.train_ns))
        for n in ns
    ]
    scaling = [(Mode.SCALING, m, n, k) for n in cfg.scaling_ns for m, k in cfg.points(n) if MODELS[m].linear]
    return groups + ([scaling] if scaling else [])


def _interrupted(text: str | None) -> bool:
    """Whether a failure's text is a worker stopped by Ctrl-C: not a measurement of the point."""
    return text is not None and INTERRUPTED in text


def kept_groups(cfg: BenchmarkConfig, rows: list[BenchmarkRow]) -> list[list[BenchmarkRow]]:
    """`rows` (an earlier sitting's, `--resume`) as the whole groups of `planned_groups` they hold from its start, up
    to the first that a Ctrl-C stopped (it and the rest are measured again). ValueError where they are not this run's
    points in its order, or end part-way through a group (never so written)."""
    kept, position = [], 0
    for group in planned_groups(cfg):
        if position == len(rows) and group:
            break
        chunk = rows[position : position + len(group)]
        for offset, (row, point) in enumerate(zip(chunk, group, strict=False)):
            if (row.mode, row.model, row.n, row.k) != point:
                mode, model, n, k = point
                raise ValueError(
                    f"row {position + offset + 1} ({row.mode.value} {row.label} n={row.n}) is not the point this run "
                    f"measures there ({mode.value} {model}{'' if k is None else f' k={k}'} n={n})"
                )
        if len(chunk) < len(group):
            raise ValueError(f"rows end part-way through a length (at row {len(rows)})")
        if any(_interrupted(row.reason) or _interrupted(row.memory_error) for row in chunk):
            return kept
        kept.append(chunk)
        position += len(group)
    if position < len(rows):
        raise ValueError(f"row {position + 1} is past the last point of this run")
    return kept


def kept_peers(cfg: BenchmarkConfig, peer: list[PeerResult]) -> list[PeerResult]:
    """The earlier sitting's peer comparisons (`--resume`) that are this run's first ones (`peer_ns` in order,
    `peer_k`), up to the first that a Ctrl-C stopped."""
    kept = []
    for n, result in zip(cfg.peer_ns if cfg.peer else [], peer, strict=False):
        if (result.n, result.k) != (n, cfg.peer_k) or _interrupted(result.error):
            break
        kept.append(result)
    return kept


def memory_budget_bytes(cfg: BenchmarkConfig, device_total: int | None) -> int:
    """`memory_budget_gb`, else 60% of the GPU's memory (`device_total`) or of the machine's physical memory."""
    if cfg.memory_budget_gb is not None:
        return int(cfg.memory_budget_gb * 2**30)
    if device_total is None:
        device_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(0.6 * device_total)


def _significant(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def _new_row(cfg: BenchmarkConfig, mode: Mode, model: str, n: int, k: int | None, peak: float) -> BenchmarkRow:
    config = model_config(model, n, k, cfg)
    is_linformer = MODELS[model].takes_k
    counted = MODELS[model].counted_flops  # filled in from the timing process
    batch = cfg.batch_at(n)
    lengths = padded_lengths(batch, n, cfg.padding_fraction)
    return BenchmarkRow(
        mode=mode, model=model, n=n, k=k,
        gflop=None if counted else _significant(step_flops(config, n, batch, training=mode == Mode.TRAIN) / 1e9),
        flop_source="FlopCounterMode" if counted else "cost model",
        matmul_peak_gflops=round(peak, 1),
        padding_fraction=round(1 - sum(lengths) / (batch * n), 4),
        estimated_activation_mb=round(_estimate(cfg, mode, model, n, k) / 2**20, 1),
        device=cfg.device, dtype=cfg.dtype, autocast=cfg.autocast, compile=cfg.compile,
        # the model's own shape: ModernBERT-base keeps its released depth and width whatever the run's
        layers=config.num_hidden_layers, batch=batch, hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size, heads=config.num_attention_heads,
        sharing=cfg.sharing if is_linformer else None, projection=cfg.projection if is_linformer else None,
    )  # fmt: skip


def _estimate(cfg: BenchmarkConfig, mode: Mode, model: str, n: int, k: int | None) -> int:
    config = model_config(model, n, k, cfg)
    return estimate_activation_bytes(config, n, cfg.batch_at(n), cfg.bytes_per_element, training=mode == Mode.TRAIN)


def _measures_memory(cfg: BenchmarkConfig, mode: Mode) -> bool:
    return cfg.measure_memory if mode == Mode.INFERENCE else mode == Mode.TRAIN and cfg.train_memory


def _timeout(cfg: BenchmarkConfig, deadline: float | None) -> float:
    """A worker's timeout: `timeout_s`, cut to what is left before `deadline` (a Unix time), if given."""
    if deadline is None:
        return cfg.timeout_s
    return max(1.0, min(cfg.timeout_s, deadline - time.time()))


def _time_points(
    cfg: BenchmarkConfig, mode: Mode, rows: dict[str, BenchmarkRow], log, deadline: float | None = None
) -> None:
    """Time the rows (by label) in one process and fill in their times (and, on CUDA, their memory), or mark them
    failed. Compiled, each model's compile time is kept even where its timing fails or the process is killed (it is
    logged as the process reports it), and a killed process's reasons say which model was compiling, for how long."""
    points = [(label, row.model, row.n, row.k) for label, row in rows.items()]
    memory = _measures_memory(cfg, mode) and cfg.device.startswith("cuda")
    progress = TimingProgress()

    def heard(event: dict) -> None:
        progress.add(event)
        if event["event"] == "compiled":
            log(f"    {event['label']} compiled in {event['compile_s']:.1f} s")

    timeout_s = _timeout(cfg, deadline)
    task = TimingTask(cfg, mode, points, memory=memory, ends_at=time.time() + timeout_s)
    try:
        timing = run_in_fresh_process(task, timeout_s, on_progress=heard)
    except WorkerFailed as error:
        where = progress.where()
        log(f"  timing failed: {error}{' ' + where if where else ''}")
        for label, row in rows.items():
            row.status, row.reason = Status.FAILED, progress.reason(label, error)
            if label in progress.compiled:
                event = progress.compiled[label]
                row.compile_s = round(event["compile_s"], 2)
                row.graphs_first_call, row.graphs_second_step = event["first_call"], event["second_step"]
        return
    if timing["graphs_while_timed"]:
        log(f"  {timing['graphs_while_timed']} graph(s) compiled while timing: their compile time is in the figures")
    for label, row in rows.items():
        if label in timing["compile_s"]:  # failed or not: a model whose compile ended has its time
            row.compile_s = round(timing["compile_s"][label], 2)
        graphs = timing.get("graphs", {}).get(label)
        if graphs is not None:
            row.graphs_first_call, row.graphs_second_step = graphs["first_call"], graphs["second_step"]
            row.graphs_later = graphs["later"]
        if label in timing["errors"]:
            log(f"  {label} failed: {timing['errors'][label]}")
            row.status, row.reason = Status.FAILED, point_reason(timing["errors"][label])
            continue
        times = timing["times"][label]
        median = statistics.median(times)
        if label in timing["flops"]:
            row.gflop = _significant(timing["flops"][label] / 1e9)
        row.attention, row.kernels = timing["attention"][label], timing["kernels"][label]
        # Six significant digits, not a fixed number of decimals: a GPU step of a tiny model takes well under a
        # millisecond, and tokens/s (from the unrounded median) must agree with time_s.
        row.time_s, row.time_s_min, row.reps = float(f"{median:.6g}"), float(f"{min(times):.6g}"), len(times)
        row.tokens_per_s = round(row.batch * row.n / median, 1)
        row.real_tokens_per_s = round(sum(padded_lengths(row.batch, row.n, cfg.padding_fraction)) / median, 1)
        if not cfg.device.startswith("cuda"):
            # On the CPU the matmul timed beside the points follows the machine's load. On a GPU one synchronised
            # (4096, d) @ (d, d_ff) a call times the launch and the sync, not the throughput (57 of 770 TFLOP/s on
            # an H100): the run's peak (`MatmulPeakTask`, set by `_new_row`) stays.
            row.matmul_peak_gflops = _significant(timing["matmul_gflops"])
        if row.gflop is not None:
            achieved = row.gflop / median
            row.achieved_gflops = _significant(achieved)
            row.fraction_of_peak = _significant(achieved / row.matmul_peak_gflops, 3)
        if label in timing["memory"]:
            _fill_memory(row, timing["memory"][label], "cuda_max_memory_allocated")


def _fill_memory(row: BenchmarkRow, memory: dict, method: str) -> None:
    row.activation_mb = round(memory["activation_bytes"] / 2**20, 1)
    row.peak_mb = round(memory["peak_bytes"] / 2**20, 1)
    row.weights_mb = round(memory["weights_bytes"] / 2**20, 1)
    row.memory_method = method


def _measure_memory(cfg: BenchmarkConfig, row: BenchmarkRow, deadline: float | None = None) -> None:
    try:
        memory = run_in_fresh_process(MemoryTask(cfg, row.mode, row.model, row.n, row.k), _timeout(cfg, deadline))
    except WorkerFailed as error:
        row.memory_error = str(error)
        return
    _fill_memory(row, memory, memory["method"])
    if row.attention is None:  # timing failed; the memory process ran the same model at the same n
        row.attention = memory["attention"]


def run_benchmark(
    cfg: BenchmarkConfig,
    log=print,
    on_measured=None,
    peak_info: dict | None = None,
    deadline: float | None = None,
    earlier: Measured | None = None,
    on_peer=None,
    on_peak=None,
) -> tuple[list[BenchmarkRow], RunInfo]:
    """Measure every point of `cfg`. Returns one row per point and the run's information (matmul peak, peer).

    `on_measured(rows)`, if given, is called with the rows so far after each length (and the linear-cost check) is
    measured or skipped (so that a long run can save what it has); `on_peer(results)` with the peer comparisons so
    far after each; `on_peak(peak_info)` once the matmul peak is measured, before any point (it may raise to stop the
    run). `peak_info`: the `MatmulPeakTask` result of an earlier run on the same device and dtype
    (`RunInfo.peak_info`), so that a grid run one n at a time measures it once. `deadline`: a Unix time that no
    worker process outlives (its timeout is cut to what is left; a point still running then is `failed`).
    `earlier`: what earlier sittings of this run measured (`--resume`): its whole lengths from the start
    (`kept_groups`) and peer comparisons (`kept_peers`) are kept as they are, the rest measured."""
    cfg.validate()
    started = time.time()
    kept = iter(kept_groups(cfg, earlier.rows) if earlier is not None else [])
    kept_peer = kept_peers(cfg, earlier.peer) if earlier is not None else []

    def stamp(message):
        log(f"[{time.time() - started:6.0f} s] {message}")

    if peak_info is None:
        timeout_s = _timeout(cfg, deadline)
        try:
            peak_info = run_in_fresh_process(MatmulPeakTask(cfg), timeout_s)
        except WorkerFailed as error:
            fix = ""
            if isinstance(error, WorkerTimedOut) and timeout_s == cfg.timeout_s:  # not cut by `deadline`
                fix = f"; raise --timeout_s ({cfg.timeout_s:g} s now), the time limit of each worker process"
            raise RuntimeError(f"measuring the matmul peak failed: {error}{fix}") from error
    if on_peak is not None:
        on_peak(peak_info)
    peak = peak_info["gflops"]
    budget = memory_budget_bytes(cfg, peak_info.get("total_memory_bytes"))
    log(f"dense matmul peak: {peak:.1f} GFLOP/s; memory budget {budget / 2**30:.1f} GiB")
    info = RunInfo(matmul_peak_gflops=peak, memory_budget_gib=budget / 2**30, peak_info=peak_info)

    rows: list[BenchmarkRow] = []
    for mode, ns in ((Mode.INFERENCE, cfg.ns), (Mode.TRAIN, cfg.train_ns)):
        for n in ns:
            group = next(kept, None)  # the same order as planned_groups
            if group is not None:
                rows.extend(group)
                if group:
                    stamp(f"{mode.value} n={n}: measured in an earlier sitting, kept")
                continue
            measured: dict[str, BenchmarkRow] = {}
            before = len(rows)
            for model, k in cfg.points(n):
                row = _new_row(cfg, mode, model, n, k, peak)
                rows.append(row)
                estimate = _estimate(cfg, mode, model, n, k)
                unavailable = MODELS[model].unavailable and MODELS[model].unavailable(cfg)
                if unavailable:
                    row.status, row.reason = Status.SKIPPED, unavailable
                elif estimate > budget:
                    row.status = Status.SKIPPED
                    row.reason = f"would not fit (est. {estimate / 2**30:.3g} GiB > {budget / 2**30:.3g} GiB)"
                else:
                    measured[row.label] = row
            if not measured:
                if on_measured is not None and len(rows) > before:  # every point skipped: saved too
                    on_measured(rows)
                continue
            stamp(f"{mode.value} n={n}: timing {', '.join(measured)}")
            _time_points(cfg, mode, measured, log, deadline)
            if _measures_memory(cfg, mode) and not cfg.device.startswith("cuda"):  # CUDA: in the timing process
                for row in measured.values():
                    _measure_memory(cfg, row, deadline)
                stamp(f"{mode.value} n={n}: memory done")
            if on_measured is not None:
                on_measured(rows)

    # Linear cost: each linear-cost model at several n in one process, side by side, so load drift cannot fake a trend.
    scaling = {}
    group = next(kept, None)  # the linear-cost check, where the plan has one and an earlier sitting measured it
    if group:
        rows.extend(group)
        stamp("linear-cost check: measured in an earlier sitting, kept")
    else:
        for n in cfg.scaling_ns:
            for model, k in cfg.points(n):
                if MODELS[model].linear:
                    row = _new_row(cfg, Mode.SCALING, model, n, k, peak)
                    rows.append(row)
                    scaling[f"{row.label} n={n}"] = row
    if scaling:
        stamp(f"linear-cost check: {', '.join(scaling)}")
        _time_points(cfg, Mode.INFERENCE, scaling, log, deadline)
        if on_measured is not None:
            on_measured(rows)

    info.peer.extend(kept_peer)
    if kept_peer:
        stamp(f"peer comparison n={', '.join(str(result.n) for result in kept_peer)}: measured earlier, kept")
    if cfg.peer:
        for n in cfg.peer_ns[len(kept_peer) :]:
            stamp(f"peer comparison n={n} k={cfg.peer_k}")
            result = PeerResult(n=n, k=cfg.peer_k)
            try:
                times = run_in_fresh_process(PeerTask(cfg, n, cfg.peer_k), _timeout(cfg, deadline))["times"]
                result.median_s = {name: statistics.median(t) for name, t in times.items()}
            except WorkerFailed as error:
                result.error = str(error)
            info.peer.append(result)
            if on_peer is not None:
                on_peer(info.peer)
    stamp("done")
    info.runtime_s = time.time() - started
    return rows, info
