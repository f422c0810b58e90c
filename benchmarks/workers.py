"""The measurements, each run in a fresh process: timing, activation memory, the dense matmul peak, the peer.

Isolation: on CPU each memory point runs in a fresh process, so one point's allocations cannot pollute the next. Timing
runs one process per n in which all models of that n alternate repetition by repetition (so that load from
elsewhere on the machine hits every model alike). Processes come from a `forkserver` that has imported torch and
transformers once, so a fresh process costs a fork rather than an import.

Compiled (`--compile`), the timing process first compiles the models one by one, each within its own time limit
(`compile_timeout_s`, and never so late that the models compiled before it could not be timed before the process's
timeout): a model over it fails alone and the others are timed. It reports each compile to the parent as it goes
(`TimingProgress`), so that a process killed at its timeout still tells each model's compile time and which model
was compiling, and for how long.

CPU memory: the process's peak resident set (VmHWM in /proc/self/status) is reset to the current resident set
(writing "5" to /proc/self/clear_refs) once the model, its input and a short warm-up exist; activation memory is
VmHWM after the measured step minus that resident set. glibc's malloc is told to serve every block of 64 KiB or
more by mmap, so freed tensors leave the resident set at once and the warm-up leaves no reusable cache behind.
Where clear_refs cannot be written, the fallback is ru_maxrss (peak since the process started) minus the same
baseline, named in the row's `memory_method`. CUDA: `torch.cuda.max_memory_allocated` after
`reset_peak_memory_stats`, minus the memory allocated before the step, in the timing process (exact per step there).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import multiprocessing
import random
import resource
import signal
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .config import DTYPES, BenchmarkConfig
from .models import MODELS, build_model, model_config, model_inputs, realised_attention
from .results import Mode

REFERENCE_MATMUL = "dense matmul"


class WorkerFailed(RuntimeError):
    """A worker process raised, timed out or was killed; the message says which."""


class WorkerTimedOut(WorkerFailed):
    """A worker process ran past its timeout and was killed."""


class CompileTimedOut(BaseException):
    """Raised by `_time_limit`'s alarm in the middle of a compile. A BaseException, as KeyboardInterrupt is: dynamo and
    inductor catch Exceptions in places (to wrap them, or to fall back to another kernel), not this."""


class PointFailed(RuntimeError):
    """One point of a timing process failed for a reason of its own (its message), not from an error of torch's."""


# ---------------------------------------------------------------------------------------------------------------
# Helpers shared by the workers
# ---------------------------------------------------------------------------------------------------------------


def _setup(cfg: BenchmarkConfig):
    import torch

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    return torch


def _synchronize(device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


PAD_ID = 1  # RoBERTa's <pad>; every model's config of `models.py` uses it


def padded_lengths(batch: int, n: int, padding_fraction: float) -> list[int]:
    """Sequence lengths with `padding_fraction` of the batch's n-position rows padding: lengths spread evenly between
    (1 - 2 f) n and n (the i-th at the middle of the i-th of `batch` equal slices, so the fraction holds for any batch,
    one sequence included), in a seeded random order."""
    lengths = [max(1, round(n * (1 - 2 * padding_fraction * (i + 0.5) / batch))) for i in range(batch)]
    random.Random(0).shuffle(lengths)
    return lengths


def _make_inputs(cfg: BenchmarkConfig, n: int, batch: int | None = None):
    """Token ids and attention mask of the batch at length n: the same for every model (seeded), padded at the end
    (id `PAD_ID`, mask 0) to `cfg.padding_fraction`."""
    import torch

    batch = cfg.batch_at(n) if batch is None else batch
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (batch, n), generator=generator)
    lengths = torch.tensor(padded_lengths(batch, n, cfg.padding_fraction))
    mask = (torch.arange(n)[None, :] < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, PAD_ID)
    return ids.to(cfg.device), mask.to(cfg.device)


def _prepared_model(cfg: BenchmarkConfig, model: str, n: int, k: int | None, mode: Mode):
    import torch

    net = build_model(model_config(model, n, k, cfg))
    # Under autocast the weights stay fp32 (mixed precision); otherwise they are cast to the run's dtype.
    net = net.to(device=cfg.device, dtype=torch.float32 if cfg.autocast else getattr(torch, DTYPES[cfg.dtype]))
    net = net.train() if mode == Mode.TRAIN else net.eval()
    _compile(cfg, net)
    return net


def _compile(cfg: BenchmarkConfig, net) -> None:
    """`--compile`: the model, or each encoder layer, compiled in place (its first call compiles), with static shapes:
    each point gets a graph of its own shapes, as a user at one shape gets, not one made dynamic by the models and
    lengths compiled before it in the process (which may hold many: the limit of graphs per function is raised)."""
    if cfg.compile == "no":
        return
    import torch._dynamo

    from linformer_hf.training.compiling import compile_kwargs, compile_layers

    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    if cfg.compile == "model":
        net.compile(**compile_kwargs(cfg.compile_mode, cfg.compile_backend), dynamic=False)
    else:
        compile_layers(net, cfg.compile_mode, cfg.compile_backend, dynamic=False)


def _compiled_graphs() -> int:
    from linformer_hf.training.compiling import compiled_graphs

    return compiled_graphs()


@dataclass
class _Alarm:
    fired: bool = False


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Raise `CompileTimedOut` in this thread once `seconds` have passed (SIGALRM; None, or a thread other than the
    main one, where no signal arrives: no limit). Yields an `_Alarm` whose `fired` says whether it went off, should
    what it interrupted turn its exception into another."""
    alarm = _Alarm()
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield alarm
        return

    def ring(signum, frame):
        alarm.fired = True
        raise CompileTimedOut

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))  # 0 would disarm it
    try:
        yield alarm
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timing_reserve_s(cfg: BenchmarkConfig, step_s: list[float]) -> float:
    """Seconds a compiled timing process keeps, before its end, to warm up and time the models it compiled: each
    one's calls after its second step (the warm-ups, the profiled and the memory step, the timed repetitions) at twice
    its second step's time, the model about to compile counted as the slowest so far, and 10 s more."""
    calls = cfg.warmup + cfg.reps + 3
    return 10.0 + 2 * calls * (sum(step_s) + max(step_s, default=0.0))


def _autocast(cfg: BenchmarkConfig):
    """A context factory: torch.autocast in the run's dtype where `cfg.autocast`, else nothing."""
    import torch

    if not cfg.autocast:
        return contextlib.nullcontext
    device_type, dtype = cfg.device.split(":")[0], getattr(torch, DTYPES[cfg.dtype])
    return lambda: torch.autocast(device_type, dtype=dtype)


def _scaler(cfg: BenchmarkConfig, mode: Mode):
    """The loss scaler of fp16 mixed-precision training (what a V100 user runs), None otherwise."""
    import torch

    if mode == Mode.TRAIN and cfg.autocast and cfg.dtype == "fp16":
        return torch.amp.GradScaler(cfg.device.split(":")[0])
    return None


def _optimizer(model, mode: Mode):
    """The training step's AdamW, None in inference. The fused implementation: torch's default on CPU is a loop over
    the parameters that took 3-6 s a step for a 2-layer base model on the loaded 2-core machine, against 0.2-0.7 s
    fused (docs/results/efficiency-cpu.md), a cost the same for every model that would drown the attention's. A tiny
    learning rate, so that the weights barely move between repetitions."""
    import torch

    return torch.optim.AdamW(model.parameters(), lr=1e-7, fused=True) if mode == Mode.TRAIN else None


def _step(model, inputs: dict, mode: Mode, optimizer=None, autocast=contextlib.nullcontext, scaler=None):
    """One measured step: a forward pass (inference), or a training step: forward, backward, the optimizer's step
    (through the loss scaler in fp16 mixed precision), the gradients dropped. `autocast`: a context factory."""
    import torch

    if mode == Mode.TRAIN:
        with autocast():
            out = model(**inputs).last_hidden_state
            loss = out.float().square().mean()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return out
    with torch.inference_mode(), autocast():
        return model(**inputs).last_hidden_state


@dataclass
class PreparedStep:
    """One model ready to step: `run()` is one measured step (`_step`) of `net` on `inputs`."""

    net: object
    inputs: dict
    optimizer: object
    run: Callable[[], object]


def prepare_step(
    cfg: BenchmarkConfig, model: str, n: int, k: int | None, mode: Mode, tokens=None, autocast=None
) -> PreparedStep:
    """Build `model` at length n (and k) as the run builds it, with its batch (`tokens`: ids and mask, else the
    run's batch at n), optimizer and loss scaler."""
    net = _prepared_model(cfg, model, n, k, mode)
    inputs = model_inputs(model, *(tokens if tokens is not None else _make_inputs(cfg, n)))
    optimizer, scaler = _optimizer(net, mode), _scaler(cfg, mode)
    autocast = autocast or _autocast(cfg)
    return PreparedStep(net, inputs, optimizer, lambda: _step(net, inputs, mode, optimizer, autocast, scaler))


def _attention_op(name: str) -> bool:
    """A fused attention kernel's op: SDPA's backends (`aten::_scaled_dot_product_flash_attention`, `_efficient_`,
    `_cudnn_`, `_flash_attention_for_cpu`) and flash_attn's, not SDPA's dispatching op itself nor a backward."""
    fused = "_scaled_dot_product_" in name or "flash_attn" in name
    return fused and "backward" not in name and "_math" not in name


def attention_ops(run) -> str | None:
    """The fused attention kernels one call of `run` ran (SDPA's backend, flash_attn's ops), comma-separated, as
    the profiler records the operators (SDPA's choice is made below the op the model calls); None where there were
    none (eager products, or SDPA's math fallback)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    return ", ".join(sorted({event.name for event in profiler.events() if _attention_op(event.name)})) or None


def _counted_flops(run) -> int:
    """FLOPs of one call of `run` as torch's FlopCounterMode counts them (matrix products, SDPA included)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def _drop_failed(label: str, error: Exception, runs: dict, errors: dict, cfg: BenchmarkConfig) -> None:
    """A run that failed after its first call (CUDA out of memory beside the other models, say) leaves the timing:
    its error is recorded and the others go on."""
    import torch

    errors[label] = f"{type(error).__name__}: {error}"
    runs.pop(label)
    gc.collect()
    if cfg.device.startswith("cuda"):
        torch.cuda.empty_cache()


def _interleaved_times(
    runs: dict, cfg: BenchmarkConfig, reps: int, errors: dict | None = None, graphs: dict | None = None
) -> dict[str, list[float]]:
    """Time every run `reps` times, one round at a time, rotating which goes first in each round. With `errors`, a
    run that raises is dropped (`_drop_failed`) instead of ending the timing of all. With `graphs` (compiled runs),
    the graphs dynamo compiled during each call are added to `graphs[label]`, counted outside the timed interval."""
    times = {label: [] for label in runs}
    for rep in range(reps):
        labels = list(runs)
        for label in labels[rep % len(labels) :] + labels[: rep % len(labels)]:
            before = _compiled_graphs() if graphs is not None else 0
            _synchronize(cfg.device)
            start = time.perf_counter()
            try:
                runs[label]()
            except Exception as error:
                if errors is None:
                    raise
                _drop_failed(label, error, runs, errors, cfg)
                times.pop(label)
                continue
            _synchronize(cfg.device)
            times[label].append(time.perf_counter() - start)
            if graphs is not None and label in graphs:
                graphs[label] += _compiled_graphs() - before
    return times


# ---------------------------------------------------------------------------------------------------------------
# Tasks: what the parent sends to a fresh process
# ---------------------------------------------------------------------------------------------------------------


def _cuda_step_memory(run) -> tuple[int, int]:
    """(bytes above what was allocated before, peak bytes allocated) of one call of `run` on CUDA."""
    import torch

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    baseline = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    return peak - baseline, peak


def _persistent_bytes(model, optimizer) -> int:
    """The model's weights and its optimizer's state (AdamW: two moments a weight), in bytes."""
    import torch

    tensors = list(model.parameters())
    if optimizer is not None:
        tensors += [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class TimingTask:
    """Time every point (label, model, n, k), alternating them repetition by repetition.

    A dense matmul of the feed-forward's shape, (4096, d) @ (d, d_ff), is timed in every round too, so each point's
    achieved FLOP/s can be set against the matmul throughput the machine gave at the same time. The first warm-up
    of every model records the fused attention ops it dispatched (`attention_ops`) and, for a model with
    `counted_flops`, runs under torch's FlopCounterMode too (recording is what makes it a warm-up: every operation
    runs). A point whose model cannot be built or fails its first run (CUDA out of memory, say) is dropped with its
    error; the others are still timed. On CUDA with `memory` the step's memory is measured here too (the caching
    allocator's peak is exact per step; no process isolation needed, unlike the resident set on CPU).
    Returns {"times": {label: [seconds]}, "matmul_gflops": that matmul's GFLOP/s (median), "flops": {label: counted
    FLOPs}, "attention": {label: `realised_attention` after the timed runs}, "kernels": {label: `attention_ops`},
    "errors": {label: error}, "memory": {label: {"activation_bytes", "peak_bytes", "weights_bytes"}}, "compile_s":
    {label: the first call's seconds}, "graphs_while_timed": graphs compiled by the timed calls of all models,
    "graphs": {label: {"first_call", "second_step", "later"}}}.

    Compiled (`--compile`), every model is built first; then each one's first call is timed apart and followed at once
    by a second step, before the next model's: the graphs compiled by each are counted per model, and so are those of
    its later calls. The two calls run within the model's compile limit (`compile_limit`): past it the model fails
    alone ("compile timed out after ... s"), and a model whose limit is spent before it starts is not compiled; the
    others are timed.
    `progress(event)`, where given (in a fresh process: to the parent's `TimingProgress`), hears each compile as it
    goes: {"event": "compiling", "label"}, {"event": "compiled", "label", "compile_s", "first_call", "second_step"},
    {"event": "failed", "label", "error"} (a point failed before the timing), then {"event": "timing"} once every
    model has compiled (or failed) and the warm-ups begin.
    """

    config: BenchmarkConfig
    mode: Mode
    points: list[tuple[str, str, int, int | None]]
    memory: bool = False
    ends_at: float | None = None  # the Unix time at which the parent kills this process (its timeout), if known

    def compile_limit(self, step_s: list[float]) -> tuple[float | None, str]:
        """Seconds the next model's compile may take (None: no limit) and what set them: `compile_timeout_s`, or the
        time left before `ends_at` less what warming up and timing the models needs (`timing_reserve_s`, from
        `step_s`: the second steps' seconds of the models compiled so far), whichever is shorter."""
        cfg = self.config
        limit = cfg.compile_timeout_s
        why = None if limit is None else f"compile_timeout_s = {limit:g} s"
        if self.ends_at is not None:
            left, reserve = self.ends_at - time.time(), timing_reserve_s(cfg, step_s)
            if limit is None or left - reserve < limit:
                limit = left - reserve
                why = f"the timing process's end was {left:.0f} s away, {reserve:.0f} s of them kept to time the models"
        return limit, why

    def _first_calls(
        self, label: str, step: PreparedStep, limit_s: float | None, why: str | None
    ) -> tuple[float, int, int, float]:
        """A compiled model's (`label`) first call (which compiles), timed, then its second step, both within `limit_s`.
        Returns the first call's seconds, the graphs compiled by each of the two calls and the second step's seconds
        (what the model's timing will take); raises `PointFailed` past the limit, also where the alarm went off but
        its exception never came up (caught and dropped inside the compile, which then went on)."""
        device = self.config.device
        alarm = None
        graphs = _compiled_graphs()
        _synchronize(device)
        started = time.perf_counter()

        def timed_out() -> PointFailed:
            return PointFailed(f"compile timed out after {time.perf_counter() - started:.0f} s ({why})")

        try:
            with _time_limit(limit_s) as alarm:
                step.run()
                _synchronize(device)
                compile_s = time.perf_counter() - started
                first_graphs = _compiled_graphs() - graphs
                graphs = _compiled_graphs()
                step.run()  # the second step: what a run of this model alone recompiles after its first
                _synchronize(device)
                second_s = time.perf_counter() - started - compile_s
        except (Exception, CompileTimedOut) as error:
            if alarm is not None and alarm.fired:  # whatever the alarm's exception became on its way up
                raise timed_out() from error
            raise
        if alarm.fired:  # its exception was caught below and swallowed, and the compile went on past the limit
            raise timed_out()
        return compile_s, first_graphs, _compiled_graphs() - graphs, second_s

    def run(self, progress: Callable[[dict], None] | None = None) -> dict:
        cfg = self.config
        torch = _setup(cfg)
        report = progress or (lambda event: None)
        tokens = {n: _make_inputs(cfg, n) for n in sorted({n for _, _, n, _ in self.points})}
        autocast = _autocast(cfg)
        steps, runs, errors, counted, kernels, compile_s = {}, {}, {}, {}, {}, {}
        compiled = cfg.compile != "no"
        # Compiled: graphs dynamo compiled in each model's first call, in its second step (run alone, right after the
        # first: what a run of that model alone recompiles), and in its later calls (`later`); the second step's
        # seconds, what the time kept for the timing is reckoned from.
        first_graphs, second_graphs, later, step_s = {}, {}, {}, {}

        def fail(label: str, error: Exception) -> None:  # this point fails; the others still run
            errors[label] = str(error) if isinstance(error, PointFailed) else f"{type(error).__name__}: {error}"
            report({"event": "failed", "label": label, "error": errors[label]})
            steps.pop(label, None)
            runs.pop(label, None)
            gc.collect()
            if cfg.device.startswith("cuda"):
                torch.cuda.empty_cache()

        # Every model is built before any compiles: building one registers its class with transformers (its
        # `_CAN_RECORD_REGISTRY`), which the graphs compiled before guard on; built one by one, a model built after
        # another's compile made that one recompile in its warm-up (`later`: a whole compile over again).
        for label, model_name, n, k in self.points:
            try:
                steps[label] = prepare_step(cfg, model_name, n, k, self.mode, tokens[n], autocast)
                runs[label] = steps[label].run
            except Exception as error:
                fail(label, error)
        for label, model_name, _, _ in self.points:
            if label not in steps:
                continue
            try:
                if compiled:  # the first call compiles: timed on its own, before the warm-ups
                    limit, why = self.compile_limit(list(step_s.values()))
                    if limit is not None and limit <= 0:
                        raise PointFailed(f"compile not started: {why}")
                    report({"event": "compiling", "label": label})
                    compile_s[label], first_graphs[label], second_graphs[label], step_s[label] = self._first_calls(
                        label, steps[label], limit, why
                    )
                    later[label] = 0
                    report({"event": "compiled", "label": label, "compile_s": compile_s[label],
                            "first_call": first_graphs[label], "second_step": second_graphs[label]})  # fmt: skip
                # The first warm-up (an extra untimed run with --warmup 0).
                first = runs[label]
                if MODELS[model_name].counted_flops:

                    def first(run=runs[label], label=label):
                        counted[label] = _counted_flops(run)

                kernels[label] = attention_ops(first)
            except Exception as error:
                first = None  # no reference left to the failed model
                fail(label, error)
        report({"event": "timing"})
        dtype = getattr(torch, DTYPES[cfg.dtype])
        a = torch.randn(4096, cfg.hidden_size, device=cfg.device, dtype=dtype)
        b = torch.randn(cfg.hidden_size, cfg.intermediate_size, device=cfg.device, dtype=dtype)
        for label in list(runs):
            try:
                # Compiled: one more call after every model's first, should a model's first call change what the
                # graphs of those before it guard on: they recompile here, not while timed.
                graphs = _compiled_graphs()
                for _ in range(cfg.warmup - 1 + compiled):
                    runs[label]()
                if compiled:
                    later[label] += _compiled_graphs() - graphs
            except Exception as error:
                _drop_failed(label, error, runs, errors, cfg)
                del steps[label]
        memory = {}
        if self.memory and cfg.device.startswith("cuda"):
            for label, step in list(steps.items()):
                try:
                    graphs = _compiled_graphs()
                    activation, _ = _cuda_step_memory(step.run)
                    if compiled:
                        later[label] += _compiled_graphs() - graphs
                except Exception as error:
                    _drop_failed(label, error, runs, errors, cfg)
                    del steps[label]
                    continue
                weights = sum(p.numel() * p.element_size() for p in step.net.parameters())
                own = _persistent_bytes(step.net, step.optimizer)
                memory[label] = {
                    "activation_bytes": activation,
                    "peak_bytes": own + activation,
                    "weights_bytes": weights,
                }
        runs[REFERENCE_MATMUL] = lambda: a @ b
        for _ in range(cfg.warmup):
            runs[REFERENCE_MATMUL]()
        graphs = _compiled_graphs()
        times = _interleaved_times(runs, cfg, cfg.reps, errors, graphs=later if compiled else None)
        graphs_while_timed = _compiled_graphs() - graphs  # > 0: something recompiled, its time is in the figures
        for label in errors:
            steps.pop(label, None)
        matmul_flops = 2 * 4096 * cfg.hidden_size * cfg.intermediate_size
        return {
            "times": times,
            "matmul_gflops": matmul_flops / statistics.median(times.pop(REFERENCE_MATMUL)) / 1e9,
            "flops": counted,
            "attention": {label: realised_attention(step.net, step.inputs) for label, step in steps.items()},
            "kernels": kernels,
            "errors": errors,
            "memory": memory,
            "compile_s": compile_s,
            "graphs_while_timed": graphs_while_timed,
            "graphs": {
                label: {"first_call": first_graphs[label], "second_step": second_graphs[label], "later": later[label]}
                for label in compile_s
                if label in later
            },
        }


@dataclass
class TimingProgress:
    """What a timing process told its parent as it went (`TimingTask`'s events), kept in the parent: should the
    process be killed at its timeout, or die, each model's compile time and graphs (`compiled`) and where the process
    was (`reason`) survive it."""

    compiled: dict[str, dict] = field(default_factory=dict)  # label -> its "compiled" event
    failed: dict[str, str] = field(default_factory=dict)  # label -> the error it failed with, before the timing
    compiling: str | None = None  # the model whose compile began and has not ended
    compiling_since: float = 0.0  # time.monotonic() when the parent heard that it began
    timing: bool = False  # every model built: the warm-ups and the timing began

    def add(self, event: dict) -> None:
        kind, label = event["event"], event.get("label")
        if kind == "compiling":
            self.compiling, self.compiling_since = label, time.monotonic()
            return
        if label is not None and label == self.compiling:
            self.compiling = None
        if kind == "compiled":
            self.compiled[label] = event
        elif kind == "failed":
            self.failed[label] = event["error"]
        elif kind == "timing":
            self.timing = True

    def where(self) -> str:
        """Where the process was when it ended ("" where it said nothing: an eager point)."""
        if self.compiling is not None:
            return f"while {self.compiling} was compiling ({time.monotonic() - self.compiling_since:.0f} s in)"
        if not self.timing:
            return ""
        return "in the warm-ups or the timing" + (", after every compile" if self.compiled else "")

    def reason(self, label: str, error) -> str:
        """The reason of the point `label` when its timing process failed with `error` (`WorkerFailed`); a point that
        had failed on its own before keeps its own reason (`failed`)."""
        if label in self.failed:
            return point_reason(self.failed[label])
        if label == self.compiling:
            return f"timing: {error} while compiling this model ({time.monotonic() - self.compiling_since:.0f} s in)"
        where = self.where()
        if label not in self.compiled and self.compiling is not None:
            return f"timing: {error} before this model's compile began, {where}"
        reason = f"timing: {error} {where}".rstrip()
        if label in self.compiled:
            reason += f"; this model compiled in {self.compiled[label]['compile_s']:.1f} s"
        return reason


def point_reason(error: str) -> str:
    """A point's reason from its timing process's error: a compile's own failure as it is, else "timing: ..."."""
    return error if error.startswith("compile ") else f"timing: {error}"


def read_status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field_name} not in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset the kernel's high-water mark of this process's RSS (Linux: writing 5 to /proc/self/clear_refs)."""
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


@dataclass
class MemoryTask:
    """Activation memory of one step of one model, above the footprint of the model and its input.

    The warm-up (a short input, to initialise kernels and thread pools off the books) runs on a second copy of the
    model: BigBird switches itself to full attention for good on a short input.
    Returns {"activation_bytes", "peak_bytes" (CPU: the process's peak resident set, VmHWM), "weights_bytes",
    "method", "attention"}. (On CUDA the run measures memory in the timing process, `TimingTask`.)
    """

    config: BenchmarkConfig
    mode: Mode
    model: str
    n: int
    k: int | None

    def run(self) -> dict:
        cfg = self.config
        if cfg.device == "cpu":
            _malloc_returns_large_blocks()
        _setup(cfg)
        autocast = _autocast(cfg)
        warm_model = _prepared_model(cfg, self.model, self.n, self.k, self.mode)
        warm_inputs = model_inputs(self.model, *_make_inputs(cfg, min(self.n, 64), batch=1))
        _step(warm_model, warm_inputs, self.mode, _optimizer(warm_model, self.mode), autocast, _scaler(cfg, self.mode))
        del warm_model, warm_inputs
        model = _prepared_model(cfg, self.model, self.n, self.k, self.mode)
        optimizer, scaler = _optimizer(model, self.mode), _scaler(cfg, self.mode)
        weights = sum(p.numel() * p.element_size() for p in model.parameters())
        inputs = model_inputs(self.model, *_make_inputs(cfg, self.n))
        if cfg.compile != "no":  # compiled at this shape off the books; a fresh optimizer, as eager's first step has
            _step(model, inputs, self.mode, optimizer, autocast, scaler)
            optimizer, scaler = _optimizer(model, self.mode), _scaler(cfg, self.mode)
        gc.collect()
        if cfg.device.startswith("cuda"):
            activation, peak = _cuda_step_memory(lambda: _step(model, inputs, self.mode, optimizer, autocast, scaler))
            method = "cuda_max_memory_allocated"
        else:
            baseline_kb = read_status_kb("VmRSS")
            method = "vmhwm" if reset_peak_rss() else "ru_maxrss"
            _step(model, inputs, self.mode, optimizer, autocast, scaler)
            if method == "vmhwm":
                peak_kb = read_status_kb("VmHWM")
            else:
                peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            activation, peak = max(0, peak_kb - baseline_kb) * 1024, peak_kb * 1024
        return {
            "activation_bytes": activation,
            "peak_bytes": peak,
            "weights_bytes": weights,
            "method": method,
            "attention": realised_attention(model, inputs),
        }


@dataclass
class MatmulPeakTask:
    """Dense matmul throughput (GFLOP/s): the best of a few square and model-shaped products, median of reps.

    Returns {"gflops"} and, on CUDA, the device's name and total memory.
    """

    config: BenchmarkConfig

    def run(self) -> dict:
        cfg = self.config
        torch = _setup(cfg)
        dtype = getattr(torch, DTYPES[cfg.dtype])
        d, d_ff = cfg.hidden_size, cfg.intermediate_size
        shapes = [(2048, 2048, 2048), (4096, d, d_ff), (4096, d_ff, d), (4096, d, d)]
        if cfg.device.startswith("cuda"):
            shapes.append((8192, 8192, 8192))
        best = 0.0
        for m, inner, cols in shapes:
            a = torch.randn(m, inner, device=cfg.device, dtype=dtype)
            b = torch.randn(inner, cols, device=cfg.device, dtype=dtype)
            for _ in range(2):
                a @ b
            times = _interleaved_times({"matmul": lambda a=a, b=b: a @ b}, cfg, max(3, cfg.reps))["matmul"]
            best = max(best, 2 * m * inner * cols / statistics.median(times) / 1e9)
        info = {"gflops": best}
        if cfg.device.startswith("cuda"):
            info["device_name"] = torch.cuda.get_device_name()
            info["total_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
        return info


@dataclass
class PeerTask:
    """Attention-module level: this package's layer (fast and plain path) against the `linformer` package's.

    Both: width d, H heads, the run's batch at n (`batch_at`) of n tokens, k compressed rows, one E and one F shared
    by the heads, output map included (the `linformer` layer ends with it). No mask (that layer has none): ours gets a
    mask of ones.
    Returns {"times": {module: [seconds]}}.
    """

    config: BenchmarkConfig
    n: int
    k: int

    def run(self) -> dict:
        cfg = self.config
        torch = _setup(cfg)
        try:
            from linformer import LinformerSelfAttention as PeerSelfAttention
        except ImportError as error:
            raise ImportError("--peer needs the `linformer` package: pip install linformer --no-deps") from error

        from linformer_hf.models.configuration_linformer import LinformerConfig
        from linformer_hf.models.modeling_linformer import LinformerSelfAttention

        n, k, d, h = self.n, self.k, cfg.hidden_size, cfg.heads
        dtype = getattr(torch, DTYPES[cfg.dtype])
        config = LinformerConfig(
            hidden_size=d, num_attention_heads=h, max_sequence_length=n, projected_length=k, sharing="headwise",
            attention_probs_dropout_prob=0.0, attn_implementation="sdpa",
        )  # fmt: skip
        ours = LinformerSelfAttention(config, layer_idx=0)
        for projection in (ours.key_projection, ours.value_projection):
            torch.nn.init.normal_(projection.weight, std=n**-0.5)
        ours_out = torch.nn.Linear(d, d)
        peer = PeerSelfAttention(dim=d, seq_len=n, k=k, heads=h, dim_head=d // h, one_kv_head=False, share_kv=False)
        for module in (ours, ours_out, peer):
            module.to(device=cfg.device, dtype=dtype).eval()
        batch = cfg.batch_at(n)  # the run's batch at n (`batch` is None by default and with tokens_per_batch)
        x = torch.randn(batch, n, d, device=cfg.device, dtype=dtype)
        mask = torch.ones(batch, n, device=cfg.device, dtype=dtype)
        runs = {
            "linformer_hf (fast path)": lambda: ours_out(ours(x, mask, use_fast_path=True)[0]),
            "linformer_hf (plain path)": lambda: ours_out(ours(x, mask, use_fast_path=False)[0]),
            "linformer (PyPI)": lambda: peer(x),
        }
        with torch.inference_mode():
            for run in runs.values():
                for _ in range(max(1, cfg.warmup)):
                    run()
            return {"times": _interleaved_times(runs, cfg, max(3, cfg.reps))}


# ---------------------------------------------------------------------------------------------------------------
# Fresh processes
# ---------------------------------------------------------------------------------------------------------------


def _worker_entry(task, connection) -> None:
    def progress(event: dict) -> None:  # heard by the parent as it happens (`run_in_fresh_process`'s on_progress)
        connection.send({"progress": event})

    try:
        result = {"result": task.run(progress) if isinstance(task, TimingTask) else task.run()}
    except Exception as error:  # reported to the parent, which records it on the point
        result = {"error": f"{type(error).__name__}: {error}"}
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent says it, in one line; no traceback
        raise SystemExit(INTERRUPTED_EXIT_CODE) from None
    connection.send(result)
    connection.close()


INTERRUPTED_EXIT_CODE = 130  # a worker stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
INTERRUPTED = "interrupted: SIGINT, Ctrl-C"  # how a point's reason names it: not a measurement (--resume retakes it)

_CONTEXT = None


def _context():
    """A forkserver that imports torch and transformers once; every task forks a fresh process from it."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload([__name__, "torch", "transformers"])
    return _CONTEXT


@contextlib.contextmanager
def _stops_held():
    """SIGINT / SIGTERM noted, not acted on, while the block runs, then taken as they came. Blocking them with a signal
    mask is not enough: another thread (pytest-xdist's, a progress bar's) takes the signal and Python runs the handler
    in the main thread all the same. Outside the main thread, or with a handler Python did not set, nothing is held."""
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {stop: signal.getsignal(stop) for stop in stops}
    if threading.current_thread() is not threading.main_thread() or None in previous.values():
        yield
        return
    pending = []
    for stop in stops:
        signal.signal(stop, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for stop, handler in previous.items():
            signal.signal(stop, handler)
        for stop in pending:
            signal.raise_signal(stop)


def run_in_fresh_process(task, timeout_s: float, on_progress: Callable[[dict], None] | None = None) -> dict:
    """Run `task.run()` in a new process and return its result; raise `WorkerFailed` on an error, an
    out-of-memory kill or a timeout. `on_progress(event)`: called with each event a `TimingTask` reports, as it
    arrives (so that what it heard survives a timeout)."""
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_worker_entry, args=(task, sender))
    try:
        # A stop (Ctrl-C, SIGTERM) that lands inside start() leaves the process object without its pid, and the worker
        # running on unseen: held until the worker has started, then taken here, where the finally below kills it.
        with _stops_held():
            process.start()
        ends = time.monotonic() + timeout_s  # counted from the process start, not through the forkserver's own start
        sender.close()
        while True:
            if not receiver.poll(max(0.0, ends - time.monotonic())):
                process.kill()
                process.join()
                raise WorkerTimedOut(f"timed out after {timeout_s:g} s")
            try:
                message = receiver.recv()
            except EOFError:  # the process died before sending its result
                message = None
            if message is None or "progress" not in message:
                break
            if on_progress is not None:
                on_progress(message["progress"])
        process.join(timeout=10)
    finally:  # also when this process is stopped (SIGTERM reaches it alone): no worker goes on measuring behind it
        if process.is_alive():
            process.kill()
            process.join()
    if message is None:
        code = process.exitcode
        reason = " (killed: out of memory?)" if code in (-9, 137) else ""
        if code == INTERRUPTED_EXIT_CODE:
            reason = f" ({INTERRUPTED})"
        raise WorkerFailed(f"process exited with code {code}{reason}")
    if "error" in message:
        raise WorkerFailed(message["error"])
    return message["result"]
