"""One long document through a deep Linformer: time, peak memory and throughput of one forward pass, fp32 and int8.

Issue 14's moonshot: a 65,536-token document through a 12-layer base Linformer (d = 768, 12 heads, k = 256, default
settings otherwise) in a minute on two CPU cores. This module builds the model (or loads one from a folder), runs one
forward pass over a random document of n tokens with a progress bar advanced by a forward hook on every encoder layer,
and reports the time, the peak resident memory (RSS) and the throughput against a dense matmul reference measured in
the same process. int8 is PyTorch dynamic quantisation (`torch.ao.quantization.quantize_dynamic`) of every
`nn.Linear`: weights stored in int8, activations quantised per tensor at run time; E and F stay fp32 (they are
products of the layer input, not `nn.Linear` modules).

With `--compile`, each encoder layer's attention block and feed-forward chunk run as `torch.compile` graphs
(inductor's C++ backend), which fuse the elementwise work around the matrix products (bias adds, GELU, residual adds,
LayerNorm, the masking of E); see `compile_layers`.

The FLOP count is the benchmark's cost model (`benchmarks.costs.forward_flops`): the matrix products only.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from contextlib import contextmanager
from dataclasses import dataclass

# Transparent huge pages for PyTorch's large CPU tensors, read once at torch's first allocation, so set before the
# import when run as `python -m experiments.long_document`: a 65,536-token layer allocates gigabytes of fresh
# activations, and faulting them in 4 KiB at a time costs seconds of system time per pass. Only when run as the
# command: a process that imports this module (a test, a notebook) keeps its own allocator settings.
if __name__ == "__main__":
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

import torch  # noqa: E402
from torch import nn
from transformers import PretrainedConfig

from benchmarks.costs import forward_flops
from benchmarks.workers import read_status_kb, reset_peak_rss
from linformer_hf.cli import ArgumentParser
from linformer_hf.loading import HEADS_BY_MODEL_TYPE, family_name, load_linformer
from linformer_hf.models.configuration_linformer import LinformerConfig
from linformer_hf.models.modeling_linformer import LinformerModel
from linformer_hf.training.compiling import cpp_compiler_missing
from linformer_hf.training.errors import non_negative_int, positive_int
from linformer_hf.training.errors import report as report_error

# Issue 14's targets.
FP32_TARGET_SECONDS = 80.0
INT8_TARGET_SECONDS = 60.0
MATMUL_EFFICIENCY_TARGET = 0.85
COSINE_TARGET = 0.99
# Feed-forward chunk (positions): bounds the (L, d_ff) activation of a layer at C d_ff instead of L d_ff.
DEFAULT_FEED_FORWARD_CHUNK = 4096


def base_config(
    num_layers: int = 12,
    n: int = 65536,
    k: int = 256,
    hidden_size: int = 768,
    num_heads: int = 12,
    intermediate_size: int | None = None,
    chunk_size_feed_forward: int = DEFAULT_FEED_FORWARD_CHUNK,
) -> LinformerConfig:
    """A base-width Linformer for one n-token document: Linformer's defaults (headwise E, F, linear projections) and
    RoBERTa's vocabulary; the feed-forward runs in chunks of `chunk_size_feed_forward` positions (0: all at once;
    at most n)."""
    chunk_size_feed_forward = min(chunk_size_feed_forward, n)
    if chunk_size_feed_forward and n % chunk_size_feed_forward:
        raise ValueError(
            f"chunk_size_feed_forward={chunk_size_feed_forward} must divide n={n} (transformers chunks the sequence "
            "into equal pieces): pick a divisor of n, or 0 for no chunking."
        )
    return LinformerConfig(
        num_hidden_layers=num_layers,
        hidden_size=hidden_size,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size or 4 * hidden_size,
        max_sequence_length=n,
        projected_length=k,
        chunk_size_feed_forward=chunk_size_feed_forward,
    )


def keep_freed_memory() -> str | None:
    """Make glibc keep freed memory in the process for reuse: no `mmap` per large block, no trimming of the heap.

    By default glibc serves each allocation above 32 MB with its own `mmap` and unmaps it when freed, so every fresh
    (L, d) or (L, d_ff) activation of every layer is faulted in and zeroed by the kernel again, page by page: at
    n = 65,536 that was ~580,000 page faults and ~25 s of system CPU time in an 80 s pass. Kept memory is reused
    without faults, for a larger peak RSS (fragmentation). Process-wide, so the command calls it, not the library.
    Returns None when applied, else why not (not glibc).
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "the C library has no mallopt (not glibc): freed memory is handled by its defaults"
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's malloc.h
    # M_TRIM_THRESHOLD = -1 turns trimming off (documented in mallopt(3)); M_MMAP_MAX = 0 puts every block on the heap
    if mallopt(m_mmap_max, 0) != 1 or mallopt(m_trim_threshold, -1) != 1:
        return "mallopt refused the settings: freed memory is handled by glibc's defaults"
    return None


def build_model(config: LinformerConfig | None = None, model_dir: str | None = None, seed: int = 0) -> LinformerModel:
    """The bare encoder in eval mode: loaded from `model_dir` (a saved Linformer folder), else built from `config`
    with random weights."""
    if model_dir is not None:
        model_type = None
        if os.path.isfile(os.path.join(model_dir, "config.json")):
            model_type = PretrainedConfig.get_config_dict(model_dir)[0].get("model_type")
        if model_type in HEADS_BY_MODEL_TYPE and model_type != LinformerConfig.model_type:
            # the package's other families have no conversion to a Linformer: load_linformer's hint would mislead
            raise ValueError(
                f"{model_dir} holds a {family_name(model_type)} (model_type {model_type!r}): this experiment times "
                "a Linformer only (its E and F, the int8 path). Give a saved Linformer folder (e.g. from "
                "scripts/convert_to_linformer.py), or leave out --model_dir to build a random base Linformer."
            )
        # a clear error (before any weights are read) for a missing folder or one of another model type
        return load_linformer(model_dir, "AutoModel")
    torch.manual_seed(seed)
    return LinformerModel(config or base_config()).eval()


def quantize_int8(model: nn.Module) -> nn.Module:
    """Dynamic int8 quantisation of every `nn.Linear`, in place (the fp32 Linear modules are replaced, not kept)."""
    return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8, inplace=True)


def random_document(config: LinformerConfig, length: int | None = None, seed: int = 0) -> torch.Tensor:
    """(1, L) token ids, L = n by default, drawn from the ordinary vocabulary (ids 0-2 are bos, pad, eos)."""
    length = length or config.max_sequence_length
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, config.vocab_size, (1, length), generator=generator)


def compile_layers(model: LinformerModel) -> LinformerModel:
    """Run every encoder layer's two blocks through `torch.compile` (inductor), in place.

    The attention block (Q map, E X and F X, the key and value maps, attention, output map, residual, LayerNorm) and
    the feed-forward chunk (dense, GELU, dense, residual, LayerNorm) are compiled, not the layer's whole forward:
    - the layer's own call stays eager, so forward hooks on the layers (the progress bar) still run;
    - the feed-forward graph sees one chunk, so its compile time does not grow with n / chunk (a whole-layer graph
      unrolls every chunk: 16 at n = 65,536 with chunks of 4096, about twice the compile time);
    - every layer has the same code and shapes, and dynamo's default of passing a module's parameters to the graph as
      inputs (`inline_inbuilt_nn_modules`) lets one compiled graph per block serve all layers, so compiling is paid
      once, on the first layer of the first call at a given length. Shapes are static (`dynamic=False`): another
      length compiles again.

    Inductor's `freezing` (weights as constants, MKL-packed Linear) is not used: it compiles a graph per layer and
    measured no faster here (docs/results/long-document.md).
    """
    reason = cpp_compiler_missing()
    if reason:
        raise RuntimeError(reason)
    for layer in model.encoder.layer:
        layer.attention.forward = torch.compile(layer.attention.forward, dynamic=False)
        layer.feed_forward_chunk = torch.compile(layer.feed_forward_chunk, dynamic=False)
    return model


# ---------------------------------------------------------------------------------------------------- measurement


def peak_rss_bytes() -> int:
    """This process's peak RSS since the last reset (VmHWM), else since it started (getrusage)."""
    try:
        return read_status_kb("VmHWM") * 1024
    except (OSError, RuntimeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@contextmanager
def layer_progress(model: LinformerModel, description: str = "layers", enabled: bool = True):
    """A progress bar over the encoder layers, advanced by a forward hook on each as it finishes.

    Yields a list that records (layer index, seconds since the bar started) per finished layer, bar or not.
    """
    from tqdm.auto import tqdm

    layers = model.encoder.layer
    finished: list[tuple[int, float]] = []
    bar = tqdm(total=len(layers), desc=description, unit="layer", disable=not enabled, leave=True)
    start = time.perf_counter()

    def make_hook(index):
        def hook(module, inputs, outputs):
            finished.append((index, time.perf_counter() - start))
            bar.update(1)

        return hook

    handles = [layer.register_forward_hook(make_hook(i)) for i, layer in enumerate(layers)]
    try:
        yield finished
    finally:
        for handle in handles:
            handle.remove()
        bar.close()


@dataclass
class ForwardResult:
    mode: str
    seconds: float
    peak_rss_bytes: int
    flops: int
    layer_seconds: list[float]
    cpu_seconds: float  # user + system time of this process during the pass, all threads
    system_seconds: float  # the system part: page faults of fresh large tensors, thread wake-ups
    page_faults: int  # minor page faults during the pass
    output: torch.Tensor  # last_hidden_state (batch, L, d)
    compiled: bool = False  # layers run as torch.compile graphs (`compile_layers`)
    compile_seconds: float | None = None  # compiling before this pass (warm-up less one layer's time); see below
    graphs_compiled_during_pass: int = 0  # graphs dynamo compiled inside the timed pass: 0 when the warm-up covered it

    @property
    def gflops_per_second(self) -> float:
        return self.flops / self.seconds / 1e9


def timed_forward(
    model: LinformerModel, input_ids: torch.Tensor, mode: str, flops: int, progress: bool = True
) -> ForwardResult:
    """One forward pass (no autograd) with the per-layer progress bar; time and this pass's peak RSS."""
    from torch._dynamo.utils import counters

    graphs_before = counters["stats"]["unique_graphs"]
    gc.collect()
    reset_peak_rss()
    with torch.inference_mode(), layer_progress(model, description=f"{mode} forward", enabled=progress) as done:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        output = model(input_ids=input_ids).last_hidden_state
        seconds = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
    ends = [t for _, t in done]
    layer_seconds = [b - a for a, b in zip([0.0] + ends[:-1], ends, strict=True)]
    system = after.ru_stime - usage.ru_stime
    cpu = after.ru_utime - usage.ru_utime + system
    faults = after.ru_minflt - usage.ru_minflt
    result = ForwardResult(mode, seconds, peak_rss_bytes(), flops, layer_seconds, cpu, system, faults, output)
    result.graphs_compiled_during_pass = counters["stats"]["unique_graphs"] - graphs_before
    return result


def compile_warm_up(model: LinformerModel, input_ids: torch.Tensor) -> float:
    """Compile the layers' graphs for this input's length by running the model with its first layer only; returns
    the seconds taken.

    The first call of a compiled layer at a new length compiles (tens of seconds), a one-off cost per process (less
    when inductor's on-disk cache already holds the graphs). The same call with the encoder cut to layer 0 gives the
    layer exactly the arguments of the real pass (dynamo guards on them: any difference would compile again), and
    compiles every graph the pass uses (all layers share them) for the cost of one layer rather than a second pass.
    """
    layers = model.encoder.layer
    model.encoder.layer = layers[:1]
    try:
        with torch.inference_mode():
            start = time.perf_counter()
            model(input_ids=input_ids)
            return time.perf_counter() - start
    finally:
        model.encoder.layer = layers


def uncompile_layers(model: LinformerModel) -> LinformerModel:
    """Undo `compile_layers`: the layers' blocks run their eager methods again."""
    for layer in model.encoder.layer:
        for module, name in ((layer.attention, "forward"), (layer, "feed_forward_chunk")):
            if name in vars(module):
                delattr(module, name)
    return model


def layer_matmul_shapes(config: LinformerConfig, seq_len: int) -> list[tuple[str, int, int, int]]:
    """The large products of one layer as (name, rows, inner, columns) of an (rows x inner) @ (inner x columns)."""
    d, d_ff, k = config.hidden_size, config.intermediate_size, config.projected_length_of_layer(0)
    return [
        ("X W_Q, attention output (L, d) x (d, d)", seq_len, d, d),
        ("feed-forward in (L, d) x (d, d_ff)", seq_len, d, d_ff),
        ("feed-forward out (L, d_ff) x (d_ff, d)", seq_len, d_ff, d),
        ("E X (k, L) x (L, d)", k, seq_len, d),
    ]


# Rows of the (L, .) reference products: past a few thousand rows a matmul's rate no longer depends on L, and the full
# L = 65,536 would spend a minute on the reference alone.
REFERENCE_MAX_ROWS = 16384


def _cpu_seconds() -> float:
    """User + system time of this process so far, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def matmul_reference(config: LinformerConfig, seq_len: int, repeats: int = 2) -> list[tuple[str, float, float]]:
    """(name, GFLOP/s, GFLOP/s by CPU time) of plain fp32 matmuls of the model's shapes, best of `repeats`, measured
    in this process. The CPU-time rate is FLOPs / (CPU seconds / threads): what the threads reach while they run, so
    it holds up when other processes share the cores. The rows of the (L, .) products are capped at
    `REFERENCE_MAX_ROWS` (E X keeps its full inner length L)."""
    rates = []
    for name, rows, inner, columns in layer_matmul_shapes(config, seq_len):
        rows = min(rows, REFERENCE_MAX_ROWS)
        a, b = torch.randn(rows, inner), torch.randn(inner, columns)
        out = torch.empty(rows, columns)
        torch.mm(a, b, out=out)  # warm-up
        best = best_cpu = float("inf")
        for _ in range(repeats):
            cpu_start, start = _cpu_seconds(), time.perf_counter()
            torch.mm(a, b, out=out)
            best = min(best, time.perf_counter() - start)
            best_cpu = min(best_cpu, _cpu_seconds() - cpu_start)
        flops = 2 * rows * inner * columns
        rates.append((name, flops / best / 1e9, flops / (best_cpu / torch.get_num_threads()) / 1e9))
        del a, b, out
    return rates


def reference_gflops_per_second(
    config: LinformerConfig, rates: list[tuple[str, float, float]], seq_len: int, by_cpu_time: bool = False
) -> float:
    """The rate of one layer's products (Q and output maps twice the (L, d) x (d, d) shape, E X and F X twice the
    (k, L) x (L, d) one) each run at its measured rate: the speed a layer made of these matmuls alone would have."""
    weights = {0: 2, 1: 1, 2: 1, 3: 2}  # how many times a layer runs each shape
    shapes = layer_matmul_shapes(config, seq_len)
    flops = seconds = 0.0
    for index, (_, rows, inner, columns) in enumerate(shapes):
        shape_flops = weights[index] * 2 * rows * inner * columns
        flops += shape_flops
        seconds += shape_flops / (rates[index][2 if by_cpu_time else 1] * 1e9)
    return flops / seconds / 1e9


def cosine(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(cosine similarity of the flattened outputs, the lowest cosine of one token's vector)."""
    a, b = a.double(), b.double()
    whole = torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()
    per_token = torch.nn.functional.cosine_similarity(a.flatten(0, -2), b.flatten(0, -2), dim=-1)
    return whole, per_token.min().item()


# ---------------------------------------------------------------------------------------------------- the command


@dataclass
class LongDocumentReport:
    config: LinformerConfig
    results: list[ForwardResult]
    reference_rates: list[tuple[str, float, float]]  # (shape, GFLOP/s, GFLOP/s by CPU time)
    reference_gflops: float
    reference_gflops_by_cpu_time: float
    cosine_int8: tuple[float, float] | None
    load_average: tuple[float, float, float]
    threads: int


def run_long_document(
    config: LinformerConfig | None = None,
    model_dir: str | None = None,
    modes: tuple[str, ...] = ("fp32", "int8"),
    progress: bool = True,
    reference: bool = True,
    seed: int = 0,
    compile: bool = False,
    log=print,
) -> LongDocumentReport:
    """Build (or load) the model, run one forward pass over an n-token document per mode, in order, and report.

    int8 quantises the same model after the fp32 pass (in place, to keep one copy of the weights in memory) and runs
    the same input; its output is compared with fp32's when both ran.

    `compile=True` runs the fp32 pass through `compile_layers`, after a warm-up that compiles (`compile_warm_up`);
    the pass's time excludes compiling, reported apart. int8 always runs eager.
    """
    unknown = set(modes) - {"fp32", "int8"}
    if unknown or not modes:
        raise ValueError(f"modes must be some of 'fp32', 'int8', got {modes!r}.")
    if compile:
        if "fp32" not in modes:
            raise ValueError("compile applies to the fp32 pass (int8 runs eager): add the fp32 mode or drop compile.")
        reason = cpp_compiler_missing()
        if reason:
            raise RuntimeError(reason)
    start = time.perf_counter()
    model = build_model(config, model_dir, seed=seed)
    config = model.config
    n = config.max_sequence_length
    log(
        f"model: {config.num_hidden_layers} layers, d={config.hidden_size}, {config.num_attention_heads} heads, "
        f"n={n}, k={config.projected_length}, sharing={config.sharing}, projection={config.projection}, "
        f"feed-forward chunk={config.chunk_size_feed_forward}, "
        f"{sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters "
        f"(built in {time.perf_counter() - start:.1f} s); {torch.get_num_threads()} threads"
    )
    input_ids = random_document(config, seed=seed)
    flops = forward_flops(config, n, pooler=model.pooler is not None)

    rates, reference_rate, reference_cpu_rate = [], float("nan"), float("nan")
    if reference:
        rates = matmul_reference(config, n)
        reference_rate = reference_gflops_per_second(config, rates, n)
        reference_cpu_rate = reference_gflops_per_second(config, rates, n, by_cpu_time=True)
        for name, rate, cpu_rate in rates:
            log(f"matmul reference {name}: {rate:.1f} GFLOP/s ({cpu_rate:.1f} by CPU time)")
        log(
            f"matmul reference, weighted as one layer: {reference_rate:.1f} GFLOP/s ({reference_cpu_rate:.1f} by CPU "
            f"time); load average {os.getloadavg()[0]:.2f}"
        )

    results, outputs = [], {}
    for mode in ("fp32", "int8"):
        if mode not in modes:
            continue
        if mode == "int8":
            model = quantize_int8(uncompile_layers(model))
        elif compile:
            compile_layers(model)
            warm_up = compile_warm_up(model, input_ids)
            log(f"compiled the layers at n={n} (warm-up: compile + one layer): {warm_up:.1f} s")
        result = timed_forward(model, input_ids, mode, flops, progress=progress)
        if mode == "fp32" and compile:
            # The warm-up ran one layer besides compiling; take a typical layer of the timed pass off it.
            result.compiled = True
            result.compile_seconds = max(warm_up - sorted(result.layer_seconds)[len(result.layer_seconds) // 2], 0.0)
            log(
                f"compiling: about {result.compile_seconds:.1f} s, once per process and length; the first pass of a "
                f"fresh process costs about {result.compile_seconds + result.seconds:.1f} s; "
                f"{result.graphs_compiled_during_pass} graphs compiled during the timed pass"
            )
        label = f"{mode} (compiled)" if result.compiled else mode
        log(
            f"{label}: {result.seconds:.1f} s, peak RSS {result.peak_rss_bytes / 2**30:.2f} GiB, "
            f"{result.gflops_per_second:.1f} GFLOP/s; CPU time {result.cpu_seconds:.1f} s on {torch.get_num_threads()} "
            f"threads ({result.system_seconds:.1f} s system, {result.page_faults} page faults); load average "
            f"{os.getloadavg()[0]:.2f}"
        )
        outputs[mode] = result.output
        results.append(result)
    similarity = cosine(outputs["int8"], outputs["fp32"]) if len(outputs) == 2 else None
    return LongDocumentReport(
        config,
        results,
        rates,
        reference_rate,
        reference_cpu_rate,
        similarity,
        os.getloadavg(),
        torch.get_num_threads(),
    )


def summary_table(report: LongDocumentReport) -> str:
    """Markdown table of the measured figures against issue 14's targets."""
    flops = report.results[0].flops
    rows = [
        "| mode | time | target | peak RSS | GFLOP/s | of matmul reference | CPU time / threads "
        "| of reference, by CPU time | met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for result in report.results:
        target = FP32_TARGET_SECONDS if result.mode == "fp32" else INT8_TARGET_SECONDS
        efficiency = result.gflops_per_second / report.reference_gflops
        cpu_rate = result.flops / (result.cpu_seconds / report.threads) / 1e9  # GFLOP/s while the threads ran
        met = result.seconds <= target
        if result.mode == "fp32" and report.reference_gflops == report.reference_gflops:  # not NaN
            met = met and efficiency >= MATMUL_EFFICIENCY_TARGET
        rows.append(
            f"| {result.mode}{' (compiled)' if result.compiled else ''} | {result.seconds:.1f} s | <= {target:.0f} s"
            + (f", >= {MATMUL_EFFICIENCY_TARGET:.0%} of reference" if result.mode == "fp32" else "")
            + f" | {result.peak_rss_bytes / 2**30:.2f} GiB | {result.gflops_per_second:.1f} | {efficiency:.0%} | "
            + f"{result.cpu_seconds / report.threads:.1f} s | "
            + f"{cpu_rate / report.reference_gflops_by_cpu_time:.0%} | "
            + ("yes" if met else "no")
            + " |"
        )
    lines = [
        f"FLOPs of one forward pass (cost model): {flops / 1e12:.2f} TFLOP; matmul reference "
        f"{report.reference_gflops:.1f} GFLOP/s ({report.reference_gflops_by_cpu_time:.1f} by CPU time); "
        f"{report.threads} threads; load average " + " ".join(f"{x:.2f}" for x in report.load_average),
        "",
        *rows,
    ]
    for result in report.results:
        if result.compiled:
            lines += [
                "",
                f"{result.mode} compiled: the time excludes compiling, about {result.compile_seconds:.1f} s once per "
                f"process and length (a fresh process's first pass: about {result.compile_seconds + result.seconds:.1f}"
                " s)",
            ]
    if report.cosine_int8 is not None:
        whole, lowest = report.cosine_int8
        lines += [
            "",
            f"int8 vs fp32, same input: cosine {whole:.5f} (target >= {COSINE_TARGET}; "
            f"{'met' if whole >= COSINE_TARGET else 'not met'}), lowest per-token cosine {lowest:.5f}",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> LongDocumentReport:

    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--mode", choices=("fp32", "int8", "both"), default="both", help="fp32 then int8 with both")
    parser.add_argument("--model_dir", help="a saved Linformer folder to load instead of building a random one")
    parser.add_argument("--layers", type=positive_int, default=12)
    parser.add_argument("--n", type=positive_int, default=65536, help="document length, and the model's n")
    parser.add_argument("--k", type=positive_int, default=256, help="projected length, at most n")
    parser.add_argument(
        "--chunk_size_feed_forward",
        type=non_negative_int,
        default=DEFAULT_FEED_FORWARD_CHUNK,
        help="feed-forward chunk in positions (0: the whole sequence at once)",
    )
    parser.add_argument("--no_reference", action="store_true", help="skip the matmul reference")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="run the fp32 pass's layers as torch.compile graphs (needs a C++ compiler); compile time reported apart",
    )
    parser.add_argument(
        "--return_freed_memory",
        action="store_true",
        help="leave glibc's defaults (return large freed blocks to the kernel: fewer GiB at peak, ~25 s more system "
        "time at n = 65,536); by default the command keeps them for reuse (keep_freed_memory)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.compile and args.mode == "int8":
        parser.error("--compile applies to the fp32 pass (int8 runs eager): use --mode fp32 or both.")
    if args.model_dir and (args.layers, args.n, args.k) != (12, 65536, 256):
        parser.error("--layers, --n and --k describe a model to build; with --model_dir the folder's config rules.")
    if args.k > args.n:
        parser.error(f"--k {args.k} exceeds --n {args.n}: E and F project n positions to k <= n slots.")
    config = None
    modes = ("fp32", "int8") if args.mode == "both" else (args.mode,)
    if not args.return_freed_memory:
        why_not = keep_freed_memory()
        print("allocator: freed memory kept for reuse (mallopt)" if why_not is None else f"allocator: {why_not}")
    try:
        if not args.model_dir:
            config = base_config(args.layers, args.n, args.k, chunk_size_feed_forward=args.chunk_size_feed_forward)
        report = run_long_document(
            config,
            args.model_dir,
            modes,
            progress=not args.no_progress,
            reference=not args.no_reference,
            seed=args.seed,
            compile=args.compile,
        )
    except ValueError as err:  # a folder that is not a Linformer, a chunk that does not divide n...
        raise SystemExit(report_error(err)) from None
    print()
    print(summary_table(report))
    return report


if __name__ == "__main__":
    main()
