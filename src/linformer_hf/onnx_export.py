"""Deployment: export a saved Linformer or Performer to ONNX, and quantise it to int8 for ONNX Runtime.

The export goes through `torch.onnx.export(..., dynamo=True)` (torch.export, then ONNX). optimum is not used: its
ONNX exporter now lives in `optimum-onnx`, whose releases require transformers < 4.58, and this package needs
transformers 5 (setup.cfg); `optimum-cli export onnx` therefore cannot run beside it.

Every head of both families exports except a causal Performer (`is_decoder`, `PerformerForCausalLM`): its prefix sums
take a running maximum (`torch.cummax`), which has no ONNX operator, so it is refused before any work.

The exported graph takes every input the model reads (`input_names`): `input_ids` and `attention_mask` (int64, (batch,
L), 1 = token, 0 = padding; for the multiple-choice head (batch, choices, L)), and `token_type_ids` (same shape) for a
model with two segments (`type_vocab_size` > 1: a conversion from BERT, and the config default of 2; roberta-base has
1), with batch and L dynamic for any L up to the model's longest input (n for Linformer): one file serves every batch
shape. The mask is a real graph input and is applied as in PyTorch (Linformer: padding is zeroed before E, F compress
the sequence and compressed slots that no token reaches are masked out; Performer: padded keys take no part in the
feature sums). Outputs are the head's ModelOutput fields (`last_hidden_state` and `pooler_output` for LinformerModel,
`logits` for the classification heads, ...).

The forward's checks that read values (the mask holds only 0 and 1, a Linformer's padding is on the right, ids are
within the vocabulary) are data-dependent, so they are skipped inside the exported graph (see `check_padding_mask`);
`run_onnx` runs them before the graph, from what the export writes into its metadata (`record_model_facts`). Callers
of ONNX Runtime directly must pass the 0/1 mask tokenizers return. L <= n is the upper bound of the dynamic sequence
axis.

Graphs are fp32: `export_folder` loads a folder saved in bf16 or fp16 (or a Performer with half-precision feature maps)
in fp32, and `export_onnx` refuses a model object that is not (ONNX Runtime has no CPU kernel for a bf16 Add or
MatMul, and its int8 quantiser writes an invalid graph from an fp16 one).

int8: `onnxruntime.quantization.quantize_dynamic` stores the weights of every MatMul/Gemm in int8 and quantises
activations on the fly (per tensor, at run time), so no calibration data is needed.

Weights always go to an external data file beside the graph (`model.onnx` + `model.onnx.data`, `model_int8.onnx` +
`model_int8.onnx.data`), whatever the model's size. A protobuf file cannot exceed 2 GB, and a base Linformer for long
documents passes that (n = 65,536, 12 layers: 577 M parameters, 2.3 GB in fp32, 403 M of them E and F). torch's
exporter switches to external data by itself above 1.5 GB of weights (even when told `external_data=False`);
ONNX Runtime's quantiser does not (it writes one file unless told otherwise, which fails once its int8 output passes
2 GB, i.e. for fp32 models beyond about 8 GB). Rather than a size rule of our own for the second, every file uses
the external-data format: one folder layout for every model, and the path large models take is the one every
export (and every test) runs. ONNX Runtime loads both layouts alike from a path. The data files are named by a path
relative to the graph, so a folder stays valid when moved or copied whole; `onnx_session` names a data file that
did not come along.

Needs the `onnx` extra: `pip install "linformer-hf[onnx]"` (onnx, onnxscript; onnxruntime for int8 and inference),
checked before any work (`check_onnx_extra`).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
import types

import torch
from transformers import PretrainedConfig
from transformers.dynamic_module_utils import get_relative_import_files

from .loading import WEIGHT_SUFFIXES, load_model, pad_as_the_model_takes
from .models.configuration_linformer import LinformerConfig
from .models.lengths import max_input_length
from .models.modeling_linformer import (
    LinformerForMultipleChoice,
    LinformerModel,
    LinformerPreTrainedModel,
    check_padding_mask,
    check_token_ids,
)
from .models.modeling_performer import PerformerForMultipleChoice, PerformerPreTrainedModel
from .outputs import check_output_dir, discard_staging, publish_folder, publish_new_folder, unique_staging_folder
from .registration import FAMILIES, TOKENIZER_FILES, TOKENIZER_SAVED_FILES
from .training.errors import MissingExtra

logger = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
INT8_FILE = "model_int8.onnx"
CONFIG_FILE = "config.json"
# ModelOutput fields that are not inference outputs: the loss needs labels, the captured states are optional.
NOT_EXPORTED = ("loss", "hidden_states", "attentions")
# What the export itself imports (torch's exporter: onnx and onnxscript), and the int8 quantiser and the sessions.
EXPORT_MODULES = ("onnx", "onnxscript")
RUNTIME_MODULES = ("onnxruntime",)


def check_onnx_extra(modules: tuple[str, ...] = EXPORT_MODULES + RUNTIME_MODULES) -> None:
    """Refuse, before any work, an install without the `onnx` extra, naming the command that adds it (torch's exporter
    would fail half-way with "No module named 'onnxscript'")."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise MissingExtra(
                f"ONNX export and inference need the onnx extra ({', '.join(EXPORT_MODULES + RUNTIME_MODULES)}), "
                f'but {module} cannot be imported ({err}): pip install "linformer-hf[onnx]" (from a checkout: '
                'pip install -e ".[onnx]").'
            ) from None


def input_names(config) -> list[str]:
    """The graph's inputs: every input the model reads. `token_type_ids` only for two or more segments (BERT's
    type_vocab_size 2): with one segment every id is 0, the forward's default, so the graph needs no input for it."""
    return ["input_ids", "attention_mask"] + (["token_type_ids"] if config.type_vocab_size > 1 else [])


def example_inputs(
    model: LinformerPreTrainedModel | PerformerPreTrainedModel, batch_size: int = 2, seq_len: int | None = None
) -> dict[str, torch.Tensor]:
    """The inputs to trace with, by name (`input_names`): the second row right-padded, so the traced path sees
    padding, and with two segments a second text from the middle on (token type 1, padding 0, as BERT tokenizers give).

    Any sizes work (the exported axes are dynamic); a length below the longest keeps the traced example general.
    """
    longest = max_input_length(model.config)
    seq_len = seq_len or max(2, min(longest, 8))
    multiple_choice = isinstance(model, (LinformerForMultipleChoice, PerformerForMultipleChoice))
    shape = (batch_size, 2, seq_len) if multiple_choice else (batch_size, seq_len)
    input_ids = torch.randint(3, model.config.vocab_size, shape)  # ids 0-2 are special (bos, pad, eos)
    attention_mask = torch.ones(shape, dtype=torch.long)
    attention_mask[1, ..., seq_len // 2 :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, model.config.pad_token_id)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "token_type_ids" in input_names(model.config):
        second_text = (torch.arange(seq_len) >= seq_len // 4).long().expand(shape)
        inputs["token_type_ids"] = second_text * attention_mask
    return inputs


class _OnnxWrapper(torch.nn.Module):
    """The head called with the inputs of `input_names` (token_type_ids None: the one-segment forward's default) and
    returning its output fields as a tuple."""

    def __init__(self, model: LinformerPreTrainedModel | PerformerPreTrainedModel, output_names: list[str]):
        super().__init__()
        self.model = model
        self.output_names = output_names

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        outputs = self.model(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        return tuple(outputs[name] for name in self.output_names)


def check_exportable(model) -> None:
    """Refuse, before any work, a model this export cannot write."""
    if not isinstance(model, (LinformerPreTrainedModel, PerformerPreTrainedModel)):
        raise TypeError(f"Expected a Linformer or Performer model, got {type(model).__name__}.")
    if model.config.is_decoder:
        raise ValueError(
            f"{type(model).__name__} is causal (is_decoder=True): its attention takes a running maximum "
            "(torch.cummax), which has no ONNX operator. Export a bidirectional head (is_decoder=False) instead."
        )
    other = sorted(str(dtype) for dtype in {p.dtype for p in model.parameters()} if dtype != torch.float32)
    feature_maps = getattr(model.config, "feature_map_dtype", "float32")  # a Performer's
    if other or feature_maps != "float32":
        # ONNX Runtime has no CPU kernel for a bf16 Add or MatMul, and its int8 quantiser writes an invalid graph from
        # an fp16 one: the graph would be written and then fail where it is run.
        what = f"weights in {other[0]}" if other else f"feature_map_dtype={feature_maps!r}"
        raise ValueError(
            f"{type(model).__name__} does not compute in float32 ({what}), but the export writes float32 graphs (what "
            "ONNX Runtime's CPU kernels and its int8 quantiser take): call model.float() and set "
            'config.feature_map_dtype = "float32" first, or export its saved folder with export_folder (fp32 itself).'
        )


def export_onnx(
    model: LinformerPreTrainedModel | PerformerPreTrainedModel, path: str, opset_version: int | None = None
) -> list[str]:
    """Write `model` (any Linformer head, any bidirectional Performer head) as an ONNX graph with dynamic batch and
    sequence axes; return its output names."""
    check_exportable(model)
    check_onnx_extra(EXPORT_MODULES)
    model = model.eval()
    inputs = example_inputs(model)
    # Unchunked here too: the short example length need not be a multiple of the model's feed-forward chunk.
    with torch.no_grad(), feed_forward_unchunked(model):
        outputs = model(**inputs, return_dict=True)
    output_names = [name for name in outputs.keys() if name not in NOT_EXPORTED]

    batch = torch.export.Dim("batch")
    # L <= the longest input (n for Linformer): the bound keeps the traced length check (and the slice of E's first L
    # columns) valid for every L.
    sequence = torch.export.Dim("sequence", max=max_input_length(model.config))
    input_ids = inputs["input_ids"]
    axes = {0: batch, input_ids.dim() - 1: sequence}
    if input_ids.dim() == 3:
        axes[1] = torch.export.Dim("num_choices")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with feed_forward_unchunked(model):
        torch.onnx.export(
            _OnnxWrapper(model, output_names).eval(),
            tuple(inputs.values()),
            path,
            input_names=list(inputs),
            output_names=output_names,
            dynamic_shapes={name: axes for name in inputs},  # every input has the shape of input_ids
            opset_version=opset_version,
            dynamo=True,
            external_data=True,  # weights in `<file>.data` beside the graph, for every size: see the module docstring
            verbose=False,
        )
    record_model_facts(path, model.config)
    return output_names


# In a graph's metadata, what `run_onnx` checks inputs against as the model would: the longest input (n for
# Linformer), the family (a Linformer takes right padding only) and the embedding tables' sizes.
INPUT_LENGTH_KEY = "max_input_length"
MODEL_TYPE_KEY = "model_type"
VOCAB_SIZE_KEY = "vocab_size"
TYPE_VOCAB_SIZE_KEY = "type_vocab_size"


def record_model_facts(path: str, config) -> None:
    """Write what `run_onnx` checks into the graph's metadata (its weights stay in their data file), so that it refuses
    the inputs the model refuses, not with a wrong result or ONNX Runtime's index error deep in the graph."""
    import onnx

    facts = {
        INPUT_LENGTH_KEY: max_input_length(config),
        MODEL_TYPE_KEY: config.model_type,
        VOCAB_SIZE_KEY: config.vocab_size,
        TYPE_VOCAB_SIZE_KEY: config.type_vocab_size,
    }
    graph = onnx.load(path, load_external_data=False)
    props = {p.key: p.value for p in graph.metadata_props}
    onnx.helper.set_model_props(graph, {**props, **{key: str(value) for key, value in facts.items()}})
    onnx.save(graph, path)


@contextlib.contextmanager
def feed_forward_unchunked(model: torch.nn.Module):
    """Trace the feed-forward in one piece (`chunk_size_feed_forward` = 0 in every layer), restored afterwards.

    Chunking only bounds PyTorch's peak memory and gives the same outputs, but its chunk count L / chunk_size would be
    fixed at the traced L, and it needs L to be a multiple of the chunk size: neither fits a dynamic L.
    """
    layers = [module for module in model.modules() if hasattr(module, "chunk_size_feed_forward")]
    saved = [layer.chunk_size_feed_forward for layer in layers]
    try:
        for layer in layers:
            layer.chunk_size_feed_forward = 0
        yield
    finally:
        for layer, chunk_size in zip(layers, saved):
            layer.chunk_size_feed_forward = chunk_size


def quantize_int8(onnx_path: str, int8_path: str) -> str:
    """Dynamic int8 quantisation with ONNX Runtime: int8 weights, activations quantised at run time.

    The input may hold its weights in external data (it is read from its path, data files beside it); the output
    writes its weights to `<int8_path>.data` (see the module docstring).
    """
    check_onnx_extra(("onnx", *RUNTIME_MODULES))
    from onnxruntime.quantization import QuantType, quantize_dynamic

    check_data_files(onnx_path)
    # onnx appends external data to an existing file: a data file left by an earlier int8_path would only grow.
    stale = data_file_path(int8_path)
    if os.path.isfile(stale):
        os.remove(stale)
    with one_line_per_kind_of_skip() as skipped:
        quantize_dynamic(onnx_path, int8_path, weight_type=QuantType.QInt8, use_external_data_format=True)
    # onnx creates the data file readable by its owner only (0600): a server running as another user could not load
    # the int8 graph. It gets the permissions of every other file written here (the umask's).
    umask = os.umask(0)
    os.umask(umask)
    for path in check_data_files(int8_path):
        os.chmod(path, 0o666 & ~umask)
    if skipped:
        logger.warning("int8: %d tensors that are not float (masks, indices) were left as they are.", len(skipped))
    return int8_path


@contextlib.contextmanager
def one_line_per_kind_of_skip():
    """Collect the quantiser's warning for each tensor it leaves alone (a mask, an index: not float), which it writes
    to the root logger with the tensor's whole protobuf type, pages of them for a model; yields their list."""
    skipped = []

    class Collect(logging.Filter):
        def filter(self, record):
            if str(record.msg).startswith("Inference failed or unsupported type to quantize for tensor"):
                skipped.append(record)
                return False
            return True

    root, collect = logging.getLogger(), Collect()
    root.addFilter(collect)
    try:
        yield skipped
    finally:
        root.removeFilter(collect)


def data_file_path(onnx_path: str) -> str:
    """Where the writers used here put a graph's weights: `<file>.data` beside it (torch's exporter through
    onnxscript, ONNX Runtime's quantiser through onnx). Readers use `data_files`, which asks the graph itself."""
    return onnx_path + ".data"


def data_files(onnx_path: str) -> list[str]:
    """The external data files an ONNX graph names, as written in it (relative to the graph's folder when movable).

    Read from the graph itself (without loading the data), so the answer holds for whichever writer made the file.
    """
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data

    graph = onnx.load(onnx_path, load_external_data=False)
    # _get_all_tensors: onnx's own walk over initializers and attribute tensors, subgraphs included.
    locations = {ExternalDataInfo(t).location for t in _get_all_tensors(graph) if uses_external_data(t)}
    return sorted(locations)


def check_data_files(onnx_path: str) -> list[str]:
    """The paths of `onnx_path`'s data files; a clear error if one is missing or is not inside the graph's folder
    (then the folder could not be moved on its own)."""
    folder = os.path.dirname(os.path.abspath(onnx_path))
    paths = []
    for location in data_files(onnx_path):
        path = os.path.normpath(os.path.join(folder, location))
        if os.path.isabs(location) or os.path.dirname(os.path.relpath(path, folder)):
            raise ValueError(
                f"{onnx_path} names its weights at {location!r}, not a file beside it: the folder cannot be moved. "
                "Export it again with linformer_hf.onnx_export."
            )
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"{onnx_path} keeps its weights in {location}, which is not beside it ({path}): copy or move the "
                "export folder whole (each .onnx with its .data file)."
            )
        paths.append(path)
    return paths


def export_folder(
    model_dir: str, output_dir: str, head: str | None = None, int8: bool = True, overwrite: bool = False
) -> dict[str, str]:
    """Export a saved Linformer or Performer folder to `output_dir`: `model.onnx` (and `model_int8.onnx`), each with
    its weights in a `.data` file beside it, the config (`config.json`, `configuration_<family>.py` and what it
    imports) and the folder's tokenizer (padding on the side the model takes). Return the graphs' paths by precision.

    The folder is self-contained and movable. A non-empty `output_dir` holds an earlier export and is refused unless
    `overwrite` (then that export's files, its tokenizer included, are replaced or deleted; other files there are
    kept); one that holds a saved model is refused either way. A folder saved in half precision is exported in fp32.
    The export is written beside `output_dir` under a temporary name and moved into place when whole.
    """
    if os.path.abspath(model_dir) == os.path.abspath(output_dir):
        raise ValueError("output_dir must differ from model_dir: the export writes its own config.json.")
    check_not_a_model_folder(output_dir)  # with or without overwrite: --overwrite would replace its config
    check_output_dir(output_dir, overwrite, flag="overwrite=True (--overwrite)", create=False)
    check_onnx_extra(EXPORT_MODULES + (RUNTIME_MODULES if int8 else ()))
    # fp32 whatever the folder was saved in (transformers 5 keeps the saved dtype): see `check_exportable`.
    model = load_model(model_dir, head, dtype=torch.float32)  # checks model_dir before output_dir is touched
    half = half_precision(PretrainedConfig.get_config_dict(model_dir)[0])
    if hasattr(model.config, "feature_map_dtype"):
        model.config.feature_map_dtype = "float32"  # the graph and the config saved beside it
    if half:
        logger.warning("%s was saved with %s: exported in float32 (what ONNX Runtime on CPU runs).", model_dir, half)
    check_exportable(model)
    # Written in a folder of its own beside output_dir and moved into place when whole: an export stopped part-way
    # leaves no graph without its config, int8 graph or tokenizer that reads as an export (nor the quantiser's
    # scratch graph), and an overwritten export stays whole until the new one is.
    target = os.path.realpath(output_dir)  # a link's folder: a rename onto the link would replace it
    staging = unique_staging_folder(target)
    try:
        written = _write_export(model, model_dir, staging, int8)
        if overwrite and os.path.isdir(target) and os.listdir(target):
            earlier, new = export_files(target), set(os.listdir(staging))
            publish_folder(staging, target)  # each file replaces the earlier one of its name; others are kept
            for name in earlier - new:  # the earlier export's files the new one did not replace (its int8 graph, ...)
                os.remove(os.path.join(target, name))
        else:
            publish_new_folder(staging, target, flag="overwrite=True (--overwrite)")
    finally:
        discard_staging(staging)  # left only by a failure
    paths = {precision: os.path.join(output_dir, name) for precision, name in written.items()}
    for path in paths.values():
        check_data_files(path)  # every data file landed beside its graph: the folder moves as a whole
    return paths


def half_precision(config_dict: dict) -> str:
    """What of a saved config is in half precision ("bfloat16 weights", "float16 feature maps"), or ""."""
    half = ("bfloat16", "float16")
    found = []
    dtype = str(config_dict.get("dtype") or config_dict.get("torch_dtype"))  # the older name of the key
    if dtype in half:
        found.append(f"{dtype} weights")
    if config_dict.get("feature_map_dtype") in half:
        found.append(f"{config_dict['feature_map_dtype']} feature maps")
    return " and ".join(found)


def check_not_a_model_folder(output_dir: str) -> None:
    """Refuse an output_dir that holds a saved model: the export writes its own config.json there (and --overwrite
    deletes the one there), which would leave that model's weights beside another config."""
    if not os.path.isdir(output_dir):
        return
    weights = sorted(
        name for name in os.listdir(output_dir) if name.endswith(WEIGHT_SUFFIXES) or name.startswith("pytorch_model")
    )
    if weights:
        raise ValueError(
            f"{output_dir} holds a saved model ({', '.join(weights[:3])}): the export would replace its config.json. "
            "Give another folder for the export, e.g. an onnx/ folder beside it."
        )


def _write_export(model, model_dir: str, folder: str, int8: bool) -> dict[str, str]:
    """`export_folder`'s files, in `folder`: the graphs (their names by precision), the config, the tokenizer."""
    written = {"fp32": ONNX_FILE}
    export_onnx(model, os.path.join(folder, ONNX_FILE))
    if int8:
        quantize_int8(os.path.join(folder, ONNX_FILE), os.path.join(folder, INT8_FILE))
        written["int8"] = INT8_FILE
    # The config and the tokenizer beside the graph: a reader knows n, k and the head, and encodes its inputs.
    model.config.save_pretrained(folder)
    if any(os.path.isfile(os.path.join(model_dir, name)) for name in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        pad_as_the_model_takes(tokenizer, model.config)
        tokenizer.save_pretrained(folder)
    else:
        logger.warning(
            "%s holds no tokenizer: put the model's tokenizer beside the graph to encode its inputs.", model_dir
        )
    for name in written.values():
        check_data_files(os.path.join(folder, name))
    return written


def export_files(output_dir: str) -> set[str]:
    """The names of what `export_folder` writes that are in `output_dir` (graphs, their data files, the config, the
    tokenizer), nothing else."""
    found = set()
    for name in (ONNX_FILE, INT8_FILE):
        path = os.path.join(output_dir, name)
        named = {os.path.basename(data_file_path(path))}  # also when a killed export left the data file but no graph
        if os.path.isfile(path):
            with contextlib.suppress(Exception):  # a truncated graph names nothing; its conventional file is enough
                named.update(location for location in data_files(path) if os.path.dirname(location) == "")
            named.add(name)
        found.update(name for name in named if os.path.isfile(os.path.join(output_dir, name)))
    for name in {name for config_class in FAMILIES for name in config_files(config_class)} | set(TOKENIZER_SAVED_FILES):
        if os.path.isfile(os.path.join(output_dir, name)):
            found.add(name)
    return found


def remove_export(output_dir: str) -> None:
    """Delete what `export_folder` writes in `output_dir` (graphs, their data files, the config, the tokenizer),
    nothing else."""
    for name in export_files(output_dir):
        os.remove(os.path.join(output_dir, name))


def config_files(config_class: type = LinformerConfig) -> list[str]:
    """What `config.save_pretrained` writes: config.json, and for `trust_remote_code` the config's module with the
    siblings it imports (transformers copies them beside it)."""
    module = inspect.getfile(config_class)
    return [CONFIG_FILE, *sorted({os.path.basename(path) for path in [module, *get_relative_import_files(module)]})]


def onnx_session(path: str):
    """An ONNX Runtime CPU session for an exported file; its data files are read from beside it."""
    check_onnx_extra(("onnx", *RUNTIME_MODULES))
    import onnxruntime

    check_data_files(path)  # a clear error for a graph moved without its weights (ONNX Runtime's is not)
    return onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])


def run_onnx(
    session, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Run an exported graph on int64 inputs (e.g. `run_onnx(session, **tokenizer(..., return_tensors="pt"))`);
    outputs by name, as tensors.

    `token_type_ids` as the PyTorch model takes them: a graph of a two-segment model reads them (zeros when not given,
    the forward's default); a one-segment graph has no such input, and only all-zero types may be given to it.

    Inputs are checked first, as the PyTorch forward checks them (the traced graph skips its data-dependent checks):
    shapes, a mask of 0 and 1 only, and from the graph's metadata the length (<= n), right padding for a Linformer and
    ids within the embedding tables. A graph exported before the metadata held these gets the checks it can.
    """
    facts = session.get_modelmeta().custom_metadata_map  # a graph exported before has only some keys, or none
    n = facts.get(INPUT_LENGTH_KEY)
    if n is not None and input_ids.shape[-1] > int(n):
        raise ValueError(
            f"Input length {input_ids.shape[-1]} exceeds the model's longest input n={n}: truncate the inputs to n "
            "(the tokenizer saved with the model does, with truncation=True)."
        )
    # The forward's checks, which the traced graph skips (data-dependent): without them a wrong mask gives wrong
    # outputs silently, or an error deep in the graph.
    check_padding_mask(attention_mask, input_ids.shape)
    if token_type_ids is not None and token_type_ids.shape != input_ids.shape:
        raise ValueError(
            f"token_type_ids must have the shape of input_ids, {tuple(input_ids.shape)}, got "
            f"{tuple(token_type_ids.shape)}: give the inputs of the tokenizer saved with the model."
        )
    if facts.get(MODEL_TYPE_KEY) == LinformerConfig.model_type:
        LinformerModel.check_padding_side(attention_mask.reshape(-1, input_ids.shape[-1]))
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
    takes = [graph_input.name for graph_input in session.get_inputs()]
    if "token_type_ids" in takes:
        feeds["token_type_ids"] = torch.zeros_like(input_ids) if token_type_ids is None else token_type_ids
    elif token_type_ids is not None and token_type_ids.any():
        raise ValueError(
            "token_type_ids holds 1 or more, but this graph's model has one segment (type_vocab_size 1) and takes "
            "no token_type_ids: give the inputs of the tokenizer saved with the model."
        )
    if VOCAB_SIZE_KEY in facts:
        sizes = types.SimpleNamespace(
            vocab_size=int(facts[VOCAB_SIZE_KEY]), type_vocab_size=int(facts[TYPE_VOCAB_SIZE_KEY])
        )
        check_token_ids(sizes, input_ids, feeds.get("token_type_ids"))
    feeds = {name: value.long().numpy() for name, value in feeds.items()}
    names = [output.name for output in session.get_outputs()]
    return {name: torch.from_numpy(value) for name, value in zip(names, session.run(names, feeds))}
