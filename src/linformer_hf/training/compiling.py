"""`torch.compile` for the training commands: the options, the checks made before any work, what is compiled, and
the count of compiled graphs that says whether anything recompiled.

Two things can be compiled (``torch_compile``):

- ``model``: the whole model, one graph for forward and backward (pretraining: through Accelerate's
  `TorchDynamoPlugin`, which compiles the prepared model, DDP included; fine-tuning: through `Trainer`'s own
  ``torch_compile``). Inductor fuses across layers and into the head; the compile time grows with the depth.
- ``layers``: each encoder layer in place (`nn.Module.compile`, PyTorch's regional compilation). Every layer runs the
  same code on the same shapes, and dynamo passes a module's parameters to its graph as inputs, so one graph serves
  all layers: the compile time does not grow with the depth. Embeddings and heads stay eager. Accelerate's
  ``compile_regions`` is not used: it also compiles the embeddings and the LM head apart, and the LM head of
  pretraining sees a different number of masked positions at every step (measured: a recompilation at the second
  step); it also returns shallow copies of the modules where this compiles them in place.

Either way, the steps of one shape compile once: a graph is made by the first step and reused (tests/test_compile.py
counts them). A second input length compiles once more, after which dynamo treats the length as dynamic.
"""

from __future__ import annotations

import time

from .errors import ConfigError

COMPILE_TARGETS = ("model", "layers")
# inductor's modes; reduce-overhead and max-autotune capture CUDA graphs, which need a CUDA device
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
# backends that capture CUDA graphs: off CUDA, torch skips the capture with one log line and runs the traced graph
# uncompiled (measured with torch 2.13: the cudagraphs backend on a CPU tensor), so a run would be eager without a word
CUDA_GRAPH_BACKENDS = ("cudagraphs",)


def compile_target(value) -> str:
    """``torch_compile`` as one word: YAML's bare ``false`` / ``no`` and null are ``"no"``."""
    return "no" if value in (None, False, "no") else value


def check_compile_options(
    target, mode, backend, flag: str = "training.torch_compile", targets: tuple[str, ...] = COMPILE_TARGETS
) -> None:
    """Refuse option values that cannot work, naming the option and the fix (no model or device needed). ``targets``:
    what the command compiles (attention transfer: layers only)."""
    import torch._dynamo

    target = compile_target(target)
    choices = " or ".join(targets)
    if target not in ("no", *targets):
        raise ConfigError(f"{flag} must be {', '.join(('no', *targets[:-1]))} or {targets[-1]}, got {target!r}.")
    if target == "no":
        for name, value in ((f"{flag}_mode", mode), (f"{flag}_backend", backend)):
            if value is not None:
                raise ConfigError(f"{name}={value!r} is set but {flag} is no: set {flag} to {choices}.")
        return
    backends = torch._dynamo.list_backends(exclude_tags=())
    if backend is not None and backend not in backends:
        raise ConfigError(f"{flag}_backend={backend!r} is not a torch.compile backend; choose from {backends}.")
    if mode is not None:
        if mode not in COMPILE_MODES:
            raise ConfigError(f"{flag}_mode must be one of {', '.join(COMPILE_MODES)}, got {mode!r}.")
        if (backend or "inductor") != "inductor":
            raise ConfigError(
                f"{flag}_mode={mode!r} is an option of the inductor backend, which {flag}_backend={backend!r} would "
                "ignore: drop the mode or the backend."
            )


def cpp_compiler_missing() -> str | None:
    """Why inductor's CPU backend cannot compile here (no working C++ compiler), or None when it can."""
    from torch._inductor import cpp_builder, exc

    try:
        cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler as error:
        return f"torch.compile's CPU backend needs a C++ compiler: {error} (install g++, or set CXX)."
    return None


def check_compile_device(target, mode, backend, device, flag: str = "training.torch_compile") -> None:
    """Refuse what cannot work on ``device``: inductor on a CPU without a C++ compiler, CUDA graphs off CUDA (inductor's
    modes that capture them, and the cudagraphs backend)."""
    import torch

    if compile_target(target) == "no":
        return
    device_type = torch.device(device).type
    if backend in CUDA_GRAPH_BACKENDS and device_type != "cuda":
        raise ConfigError(
            f"{flag}_backend={backend!r} captures CUDA graphs, which need a CUDA device (this run is on {device_type}, "
            f"where it would run the model uncompiled): use inductor or aot_eager there."
        )
    if mode in CUDA_GRAPH_MODES and device_type != "cuda":
        raise ConfigError(
            f"{flag}_mode={mode!r} captures CUDA graphs, which need a CUDA device (this run is on {device_type}): "
            "use default or max-autotune-no-cudagraphs."
        )
    if (backend or "inductor") == "inductor" and device_type == "cpu":
        reason = cpp_compiler_missing()
        if reason:
            raise ConfigError(f"{flag}: {reason} Or set {flag} no.")


def compile_kwargs(mode, backend) -> dict:
    """The arguments of `torch.compile` for the options (unset ones left to torch's defaults)."""
    return {"backend": backend or "inductor", **({"mode": mode} if mode is not None else {})}


def check_accelerator_compiles(accelerator, backend: str, mode=None, flag: str = "training.torch_compile") -> None:
    """Refuse a run whose Accelerator will not compile as asked (``backend`` "no": not at all).

    Accelerate keeps the first Accelerator's compile settings for the whole process, as it keeps its precision: a
    later run in the same process that asks for others would silently not get them.
    """
    used = accelerator.state.dynamo_plugin
    got = (used.backend.value.lower(), used.mode if backend != "no" else None)
    if got != (backend, (mode or "default") if backend != "no" else None):
        raise ConfigError(
            f"{flag}: this process already set up Accelerate with the compile backend {got[0]} (mode {used.mode}), "
            "which it keeps for the whole process. Start the run in a fresh process (or call "
            "accelerate.state.AcceleratorState._reset_state() between runs in one process)."
        )


def encoder_layers(model) -> list:
    """The repeated blocks of a model (any head): ``base_model.encoder.layer`` (Linformer, Performer, BERT, RoBERTa,
    Longformer, BigBird) or ``base_model.layers`` (ModernBERT)."""
    base = model.base_model
    layers = getattr(getattr(base, "encoder", None), "layer", None)
    layers = getattr(base, "layers", None) if layers is None else layers
    if layers is None:
        raise ValueError(f"{type(model).__name__} has no encoder layers to compile one by one: compile the model.")
    return list(layers)


def compile_layers(model, mode=None, backend=None, **options) -> None:
    """Compile each encoder layer of ``model`` in place (`nn.Module.compile`): parameters, state-dict keys and hooks
    stay as they are, so saving, loading and DDP see the same model. ``options``: more `torch.compile` arguments."""
    for layer in encoder_layers(model):
        layer.compile(**compile_kwargs(mode, backend), **options)


def allow_dynamic_output_shapes() -> None:
    """Let dynamo trace operators whose output size depends on the data, within the graph.

    Pretraining runs the LM head at the masked positions only (``logits_for_labels_only``: a boolean index), whose
    number changes at every step. Traced in, the whole model stays one graph with that number symbolic, compiled once;
    otherwise the graph breaks there and the head's graph recompiles at the second step.
    """
    import torch._dynamo

    torch._dynamo.config.capture_dynamic_output_shape_ops = True


def compiled_graphs() -> int:
    """How many graphs dynamo has compiled in this process so far (every compilation and recompilation)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_record_callback():
    """A `TrainerCallback` for ``training.torch_compile``: its ``record`` gets the first update's seconds (the compile
    time with it) and the graphs compiled during that update and during later ones (evaluations, which compile their
    own, not counted: a later update that compiles is a recompilation)."""
    from transformers import TrainerCallback

    class CompileRecord(TrainerCallback):
        def __init__(self):
            self.record: dict = {}

        def on_step_begin(self, args, state, control, **kwargs):
            if not self.record:  # the first update: timed from here, not from an evaluation before it
                self.started = time.perf_counter()
            self.graphs = compiled_graphs()

        def on_step_end(self, args, state, control, **kwargs):
            graphs = compiled_graphs() - self.graphs
            if "first_update_seconds" not in self.record:
                seconds = time.perf_counter() - self.started
                self.record.update(first_update_seconds=seconds, first_update_graphs=graphs, later_update_graphs=0)
                if state.is_world_process_zero:
                    print(f"compiled: the first update took {seconds:.1f} s ({graphs} graph(s) compiled)")
            else:
                self.record["later_update_graphs"] += graphs

    return CompileRecord()
