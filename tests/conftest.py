import os

# Nothing in the tests may wait on a network that is not there.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The commands the tests start compute beside the other xdist worker: OpenMP threads that spin while they wait (the
# default) slow them severalfold (docs/training.md, "A CPU shared with other work"); idle ones sleep.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Output as it is written (a command cut by its timeout still shows what it printed), and what torchrun's `python -u`
# workers get anyway: with it they fork from the pre-imported interpreters too (tests/prefork.py).
os.environ.setdefault("PYTHONUNBUFFERED", "1")

import gc  # noqa: E402
import inspect  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402
import weakref  # noqa: E402

import prefork  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import linformer_hf  # noqa: E402,F401  (registers the Auto classes)
from linformer_hf import LinformerConfig  # noqa: E402

# The tests' subprocesses fork from pre-imported interpreters (tests/prefork.py; LINFORMER_TEST_PREFORK=0: real ones).
_PREFORK_DIR = prefork.start_session()

# The ~400k objects of the imports above live as long as the worker: kept out of the collector's full passes, which
# otherwise walk them again at each one (half of the full passes' time in the model tests).
gc.collect()
gc.freeze()


@pytest.fixture
def forked_subprocesses(monkeypatch):
    """What the code under test starts with `sys.executable` forks from a pre-imported interpreter."""
    monkeypatch.setattr(sys, "executable", prefork.python_executable())


def pytest_terminal_summary(terminalreporter):
    if _PREFORK_DIR:
        terminalreporter.write_line(prefork.summary(_PREFORK_DIR))


def pytest_unconfigure(config):
    if _PREFORK_DIR:
        prefork.end_session(_PREFORK_DIR)


# Under pytest-xdist (`-n 2`, one worker a core) each worker computes on one thread: two workers of two threads each
# on 2 cores would oversubscribe them. Subprocesses a test starts keep their own defaults.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


def tiny_config(**overrides) -> LinformerConfig:
    """A Linformer small enough to run every property test in well under a second."""
    settings = dict(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=37,
        max_sequence_length=16,
        projected_length=8,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-5,
    )
    settings.update(overrides)
    return LinformerConfig(**settings)


def randomize_projections(model, seed: int = 0) -> None:
    """Give E/F (and conv kernels) dense random values, so no test passes by a lucky structured init."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "projection" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


def random_batch(batch_size: int, seq_len: int, vocab_size: int = 99, seed: int = 0):
    """Token ids avoiding the special ids 0-2 (bos, pad, eos)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab_size, (batch_size, seq_len), generator=generator)


class SigtermNotUnwound(Exception):
    """SIGTERM reached the test's stand-in for its default action (the process would have ended, its staging folder
    left behind)."""


@pytest.fixture
def send_sigterm():
    """A function that sends this process SIGTERM. Its default action would end pytest: while the fixture is active it
    raises `SigtermNotUnwound` instead, unless the code under test handles SIGTERM itself."""
    import signal

    def stand_in(signum, frame):
        raise SigtermNotUnwound("SIGTERM was not turned into KeyboardInterrupt")

    previous = signal.signal(signal.SIGTERM, stand_in)
    try:
        yield lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# The two names of turning gradient checkpointing on: `gradient_checkpointing_enable` (every 5.x; a deprecated alias
# in newer releases) and `activation_checkpointing_enable` (newer releases only).
CHECKPOINTING_METHODS = ["gradient_checkpointing_enable", "activation_checkpointing_enable"]


def enable_checkpointing(model, method: str, use_reentrant: bool | None = None, every_n_layers: int = 1) -> list:
    """Turn gradient checkpointing on by `method`, reentrant or not (None: the release's default), for every
    `every_n_layers`-th layer; the list returned gains one entry per checkpointed layer call.

    Reentrant checkpointing (`torch.utils.checkpoint` with `use_reentrant=True`, as DeepSpeed's activation
    checkpointing) sees only the tensors passed to a layer as positional arguments: anything else a layer reads that
    was computed outside it must not carry a graph into the layer's recomputation."""
    if not hasattr(model, method):
        pytest.skip(f"transformers {transformers.__version__} has no {method}")
    # gradient_checkpointing_kwargs=, activation_checkpointing_kwargs=
    kwargs = {} if use_reentrant is None else {method.replace("_enable", "_kwargs"): {"use_reentrant": use_reentrant}}
    if every_n_layers != 1:
        every_n = getattr(model, "activation_checkpointing_enable", None)  # the newer releases' name only
        if every_n is None or "every_n_layers" not in inspect.signature(every_n).parameters:
            pytest.skip(f"transformers {transformers.__version__} checkpoints every layer or none")
        kwargs["every_n_layers"] = every_n_layers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the deprecated alias works all the same
        getattr(model, method)(**kwargs)
    calls = []
    for layer in model.modules():
        if getattr(layer, "gradient_checkpointing", False):
            checkpoint = layer._gradient_checkpointing_func

            def counted(*args, _checkpoint=checkpoint, **kwargs):
                calls.append(1)
                return _checkpoint(*args, **kwargs)

            layer._gradient_checkpointing_func = counted
    return calls


class _Kept:
    """What autograd holds in place of a saved tensor while `kept_for_backward` counts."""

    def __init__(self, tensor):
        self.tensor = tensor


def kept_for_backward(module, run, *inputs, **kwargs) -> list[torch.Tensor]:
    """The tensors autograd keeps for the backward of `run(*inputs, **kwargs)` (`module` itself or its compiled form)
    when the forward returns: one per storage (several saved views of one tensor are one allocation), `module`'s
    parameters and buffers left out, and nothing that a node saved and the forward then dropped (the input of an amax
    whose result is detached is freed with the amax). Forward only: the saved tensors are held detached (a node's own
    output would otherwise keep the node alive), so the graph cannot be run backward."""
    holders = []

    def pack(tensor):
        holder = _Kept(tensor.detach())
        holders.append(weakref.ref(holder))
        return holder

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda holder: holder.tensor):
        output = run(*inputs, **kwargs)
    own = {t.untyped_storage().data_ptr() for t in [*module.parameters(), *module.buffers()]}
    kept = {}
    for ref in holders:
        holder = ref()
        if holder is not None and holder.tensor.untyped_storage().data_ptr() not in own:
            kept[holder.tensor.untyped_storage().data_ptr()] = holder.tensor
    del output
    return list(kept.values())
