"""Loading a saved model folder of this package's families for the tools that take one (Hub packaging, ONNX export),
checked first."""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import re

from transformers import PretrainedConfig, PreTrainedModel
from transformers.dynamic_module_utils import get_relative_import_files

from .models.configuration_linformer import LinformerConfig
from .registration import AUTO_CLASSES, FAMILIES, TOKENIZER_FILES

logger = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin")  # the files of a model folder that hold its weights
# What from_pretrained builds a model from in a local folder: its config and its weights, one file or the shards and
# their index (transformers' model.safetensors, pytorch_model.bin and their sharded names). Not what is saved beside
# them and never read into the model: a Trainer's training_args.bin, a checkpoint's optimizer and RNG states, a
# tokenizer's files (which make its inputs, not its outputs).
MODEL_FILES = re.compile(r"config\.json|(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?")

# Each family's heads table (Auto class name -> class), by model_type; derived from registration's table of families.
HEADS_BY_MODEL_TYPE: dict[str, dict[str, type[PreTrainedModel]]] = {
    config_class.model_type: heads for config_class, heads in FAMILIES.items()
}
# Each family's every Auto class (its heads, and AutoModelForPreTraining giving the masked LM), by model_type.
AUTO_CLASSES_BY_MODEL_TYPE: dict[str, dict[str, type[PreTrainedModel]]] = {
    config_class.model_type: classes for config_class, classes in AUTO_CLASSES.items()
}
# Every Auto class name a tool's --head takes (a folder's own family decides which class it gives).
HEAD_CHOICES = sorted({name for classes in AUTO_CLASSES_BY_MODEL_TYPE.values() for name in classes})


def remote_code_files(model_type: str) -> list[str]:
    """The code files a folder of this family needs for `trust_remote_code` loading: the modules of its config and
    heads (the `auto_map` entries) and every sibling they import, found as transformers finds them when it copies
    them beside the weights."""
    config_class = next(config_class for config_class in FAMILIES if config_class.model_type == model_type)
    modules = {inspect.getfile(cls) for cls in (config_class, *HEADS_BY_MODEL_TYPE[model_type].values())}
    files = set(modules)
    for module in modules:
        files.update(get_relative_import_files(module))
    return sorted(os.path.basename(path) for path in files)


def family_name(model_type: str) -> str:
    """How messages and cards name a family: its config class without "Config" ("Linformer", "Performer")."""
    return next(
        config_class for config_class in FAMILIES if config_class.model_type == model_type
    ).__name__.removesuffix("Config")


def heads_by_name(model_type: str = LinformerConfig.model_type) -> dict[str, type[PreTrainedModel]]:
    """Both spellings of a family's head: the Auto class name ("AutoModelForSequenceClassification", and
    "AutoModelForPreTraining" for the masked LM) and the class name ("LinformerForSequenceClassification")."""
    names = dict(AUTO_CLASSES_BY_MODEL_TYPE[model_type])
    names.update({cls.__name__: cls for cls in HEADS_BY_MODEL_TYPE[model_type].values()})
    return names


def load_model(
    model_dir: str, head: str | None = None, model_types: tuple[str, ...] | None = None, dtype=None
) -> PreTrainedModel:
    """A saved model of one of this package's families, in eval mode, after checking that the folder holds one.

    Args:
        model_dir: a folder written by `save_pretrained`.
        head: an Auto class name or a class name of the folder's family; default: the head the folder was saved as
            (its config's `architectures`), or the family's bare model when it names none.
        model_types: the families accepted (default: every family, `HEADS_BY_MODEL_TYPE`).
        dtype: the weights' dtype once loaded (default: the dtype the folder was saved in, as transformers 5 loads).
    Raises:
        ValueError (before any weights are read): no config.json, a config of another model type (read as written,
        before any class of this package touches it), an unknown head; (after) a head whose weights the folder lacks.
    """
    model_types = tuple(model_types or HEADS_BY_MODEL_TYPE)
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise ValueError(
            f"{model_dir} is not a saved model folder (no config.json): give the directory written by "
            "save_pretrained, e.g. the output of scripts/convert_to_linformer.py or of fine-tuning."
        )
    config_dict, _ = PretrainedConfig.get_config_dict(model_dir)
    model_type = config_dict.get("model_type")
    if model_type not in model_types:
        names = " or a ".join(family_name(accepted) for accepted in model_types)
        types = " or ".join(repr(accepted) for accepted in model_types)
        families = f" [--family {'|'.join(model_types)}]" if len(model_types) > 1 else ""
        raise ValueError(
            f"{model_dir} holds a {model_type!r} model, not a {names} (model_type {types}): convert a RoBERTa or "
            f"BERT checkpoint first with scripts/convert_to_linformer.py{families}."
        )
    heads = heads_by_name(model_type)
    bare = HEADS_BY_MODEL_TYPE[model_type]["AutoModel"].__name__
    if head is None:
        head = (config_dict.get("architectures") or [bare])[0]
    if head not in heads:
        choices = ", ".join(AUTO_CLASSES_BY_MODEL_TYPE[model_type])
        raise ValueError(
            f"Unknown head {head!r} for {model_dir}; choose one of {choices} (or the {family_name(model_type)} class "
            "names)."
        )
    check_holds_weights(model_dir)
    check_weight_files(model_dir)
    options = {} if dtype is None else {"dtype": dtype}
    model, loading = heads[head].from_pretrained(model_dir, output_loading_info=True, **options)
    # The bare model's pooler is the one head a folder saved with another may lack and still be used without: its
    # token outputs are the encoder's own (as a RoBERTa masked LM loaded as RobertaModel).
    missing = [key for key in loading.get("missing_keys") or [] if not key.startswith("pooler.")]
    if len(missing) < len(loading.get("missing_keys") or []):
        logger.warning(
            "%s has no trained pooler: %s's pooler_output is random; use last_hidden_state.", model_dir, head
        )
    if missing:  # the folder was saved as another head: these tensors would be random, and its outputs with them
        saved = (config_dict.get("architectures") or [bare])[0]
        raise ValueError(
            f"{model_dir} holds no weights for {len(missing)} tensor(s) of {head} (e.g. {sorted(missing)[0]}): it was "
            f"saved as {saved}, so they would be random. Give that head, or one whose weights the folder holds (the "
            f"bare model, {bare}, drops a head); fine-tune the model to make a new head."
        )
    return model.eval()


def check_holds_weights(model_dir: str) -> None:
    """Refuse a folder with a config but no weights file (an ONNX export folder, a config saved alone) before
    transformers reads it: its "no file named model.safetensors" names no way out."""
    if not os.path.isdir(model_dir):  # a Hub name: the download finds its files
        return
    # training_args.bin: the Trainer's settings, which it saves beside a model (a fine-tuned classifier's best/)
    if not any(name.endswith(WEIGHT_SUFFIXES) and name != "training_args.bin" for name in os.listdir(model_dir)):
        raise ValueError(
            f"{model_dir} holds no weights (no .safetensors or .bin file, only a config: e.g. an ONNX export folder): "
            "give the folder the model was saved to with save_pretrained."
        )


def check_weight_files(model_dir: str) -> None:
    """Refuse a folder whose safetensors files are truncated or corrupt, naming the file, before transformers reads
    them (it reports "incomplete metadata, file not fully covered", without the file). Reads the headers only."""
    from safetensors import SafetensorError, safe_open

    if not os.path.isdir(model_dir):  # a Hub name: the download checks its files
        return
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            path = os.path.join(model_dir, name)
            try:
                with safe_open(path, framework="pt"):
                    pass
            except (SafetensorError, OSError) as err:
                raise ValueError(
                    f"{path} is truncated or corrupt ({err}): the folder was not written or copied whole. Copy or "
                    "download it again, or save the model again."
                ) from None


def load_linformer(model_dir: str, head: str | None = None) -> PreTrainedModel:
    """`load_model` for Linformer folders only (the ONNX export handles Linformer alone)."""
    return load_model(model_dir, head, model_types=(LinformerConfig.model_type,))


def pad_as_the_model_takes(tokenizer, config: PretrainedConfig) -> None:
    """Make `tokenizer` pad on the side the model takes, in memory and in the tokenizer_config.json it saves.

    A Linformer takes right padding only (`LinformerModel.check_padding_side`: E and F are indexed by position, so
    left padding would change every output): its tokenizer pads on the right, and a tokenizer saved beside it says so,
    whatever the source tokenizer said. Other families take either side: their tokenizers are left as they are.
    """
    if config.model_type != LinformerConfig.model_type:
        return
    tokenizer.padding_side = "right"
    # save_pretrained writes the keys of init_kwargs (with the current values): recorded, not left to the class default
    tokenizer.init_kwargs["padding_side"] = "right"


def model_sha256(folder: str) -> str:
    """The SHA-256 of a model folder's config.json and every .safetensors / .bin file (names and bytes), a Trainer's
    training_args.bin among them; `model_files_sha256` hashes only what the model is built from."""
    names = [name for name in os.listdir(folder) if name == "config.json" or name.endswith(WEIGHT_SUFFIXES)]
    return files_sha256(folder, names)


def model_files(folder: str) -> list[str]:
    """The files of a model folder that its model is built from (`MODEL_FILES`), sorted."""
    return sorted(name for name in os.listdir(folder) if MODEL_FILES.fullmatch(name))


def model_files_sha256(folder: str) -> str:
    """The SHA-256 of the files a model folder's model is built from (`model_files`: config and weights, names and
    bytes): the model, wherever the folder is and whatever else it holds."""
    return files_sha256(folder, model_files(folder))


# The weight files from_pretrained looks for in a Hub repository, in its order (transformers 5's
# _get_resolved_checkpoint_files): the first that the repository has is the one it loads.
HUB_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


class NoHubWeights(ValueError):
    """A Hub repository holds none of `HUB_WEIGHT_FILES`."""


def model_source_files(name_or_path: str) -> tuple[str, list[str]]:
    """The folder and the names of the files a model is built from: a local folder's `model_files`; for a Hub name,
    its config and the weights from_pretrained loads (`HUB_WEIGHT_FILES`, the shards an index names), in the Hub cache's
    snapshot of it, downloaded first where the Hub can be reached. The same files hash alike wherever they are
    (`files_sha256`). A Hub name that cannot be fetched and is not in the cache raises huggingface_hub's
    LocalEntryNotFoundError (offline mode, no network; `training.errors.hub_unreachable` tells it), one without
    those weights `NoHubWeights`."""
    if os.path.isdir(name_or_path):
        return name_or_path, model_files(name_or_path)
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    config = hf_hub_download(name_or_path, "config.json")
    folder, names, unreachable = os.path.dirname(config), ["config.json"], None
    commit = os.path.basename(folder)  # the weights of the same download (snapshots/<commit>/)
    for weights in HUB_WEIGHT_FILES:
        try:
            path = hf_hub_download(name_or_path, weights, revision=commit)
        except LocalEntryNotFoundError as err:  # not cached, and not fetched: maybe a later one is cached
            unreachable = unreachable or err
            continue
        except EntryNotFoundError:  # the repository has no such file
            continue
        names.append(weights)
        if weights.endswith(".index.json"):
            with open(path, encoding="utf-8") as handle:
                shards = sorted(set(json.load(handle)["weight_map"].values()))
            for shard in shards:
                hf_hub_download(name_or_path, shard, revision=commit)
            names += shards
        return folder, names
    if unreachable is not None:
        raise unreachable
    raise NoHubWeights(
        f"{name_or_path} on the Hub holds no weights ({', '.join(HUB_WEIGHT_FILES)}): give another model."
    )


def files_sha256(folder: str, names: list[str]) -> str:
    """The SHA-256 of the files ``names`` of ``folder``, in sorted order: each name, then its bytes."""
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(name.encode())
        with open(os.path.join(folder, name), "rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def saved_model_length(folder: str) -> int:
    """The longest input of the model saved in ``folder`` (its n), from its config alone."""
    from transformers import AutoConfig

    from .models import max_input_length

    return max_input_length(AutoConfig.from_pretrained(folder))


def vocabulary_sha256(vocabulary: dict) -> str:
    """The SHA-256 of a tokenizer's vocabulary (``get_vocab()``, its tokens and ids): which tokenizer a length in
    tokens was measured with. An author-attribution data set's manifest records its tokenizer's (`tasks.Task.manifest`),
    and fine-tuning on it checks the model's against it."""
    return hashlib.sha256(json.dumps(sorted(vocabulary.items())).encode()).hexdigest()


def token_id_conflict(model_vocabulary: dict, vocabulary: dict) -> str | None:
    """Where ``vocabulary`` (a tokenizer's ``get_vocab()``) gives an id another meaning than ``model_vocabulary`` (the
    tokenizer a model was trained with): the first such id, in words, or None. A tokenizer that only adds tokens at
    new ids agrees with the model's."""
    token_of_id = {index: token for token, index in model_vocabulary.items()}
    for token, index in sorted(vocabulary.items(), key=lambda item: item[1]):
        if index in token_of_id and token_of_id[index] != token:
            return f"id {index} is {token!r} to it and {token_of_id[index]!r} to the model"
        if token in model_vocabulary and model_vocabulary[token] != index:
            return f"{token!r} is id {index} to it and id {model_vocabulary[token]} to the model"
    return None


def tokenizer_vocabulary(path: str):
    """The tokenizer's vocabulary in ``path``, or None where the folder holds no tokenizer."""
    from transformers import AutoTokenizer

    if os.path.isdir(path) and not any(os.path.exists(os.path.join(path, name)) for name in TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(path).get_vocab()
    except (OSError, ValueError, TypeError):
        return None
