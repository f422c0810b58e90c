"""Hub packaging: a model folder exactly as it would be pushed, its model card, a clean-process load check, the push.

Every model family of the package is packaged the same way (Linformer, Performer: `loading.HEADS_BY_MODEL_TYPE`).
The folder holds the config with the full `auto_map`, the family's code (`configuration_<family>.py`,
`modeling_<family>.py` and the skeleton they import, `remote_code_files`), safetensors weights, the tokenizer, a
sentence-transformers folder's modules (`modules.json`, `1_Pooling/`, ...), the provenance files found beside the
model (`conversion_report.json`, `transfer_report.json`, `transfer_log.jsonl`, `fidelity_before.json`,
`eval_results.json`) and a `README.md` model card rendered from the template shipped with the package
(`linformer_hf/templates/linformer_template.md`, read with importlib.resources). Everything in the card comes from the
model's config, its tokenizer and those files, except the card inputs below:

- the config gives the family's settings: the Architecture table's rows and the wording that differs per family come
  from `CARD_FAMILIES` (by model_type) and the template's family sections (paper, cost, limitations, citation);
- the conversion report gives the source checkpoint and its family (BERT, RoBERTa), what was carried over, and how
  the family's own tensors were initialised (Linformer's E, F; Performer's random features);
- the transfer report (`linformer_hf.training.transfer`) gives the teacher, the stages and their steps, the window
  lengths, the data, the training seconds and the fidelity to the teacher before and after (embedding cosine and
  per-layer attention-output error);
- the tokenizer gives its kind (WordPiece, byte-level BPE, ...) and class;
- the sentence-transformers modules give how a sentence embedding is pooled (the usage section appears only then).

A transferred folder that lacks `conversion_report.json` (made before transfer copied it) takes the one beside the
student named in its transfer report, when that folder still exists.

Card inputs (`card_info`, a JSON object, every key optional; an unknown key or a value of another type is an error,
not ignored):

    {"model_name": "...", "license": "apache-2.0", "language": "en", "datasets": ["wikitext"], "tags": ["..."],
     "base_model": "owner/name", "base_model_license": "apache-2.0",
     "training_data": "one line on the data", "training_description": "free text",
     "evaluation_notes": "free text, shown under the evaluation table",
     "eval_results": [{"task_type": "text-classification", "dataset_type": "glue", "dataset_name": "SST-2",
                       "dataset_config": "sst2", "dataset_split": "validation", "metric_type": "accuracy",
                       "metric_value": 0.91, "task_name": "Sentiment"}]}

`base_model` is the Hub name of the source checkpoint (and teacher) where it was read from a local folder (a local
path means nothing on the Hub); where the reports already name it on the Hub, it must agree. `base_model_license` is
that model's license, stated in the card; a local source folder's own model card (README.md), where it has one, gives
it instead. `license` is the weights' license: by default, for a model made from a source's weights, the source's
(found or given), or `unknown` where neither is known; for a model trained from scratch, apache-2.0.
`eval_results` entries take the fields of `huggingface_hub.EvalResult` (its required ones, no others) and become the
card's `model-index`. The tokenizer must be the model's: no more tokens than `vocab_size`, the config's pad id.
Efficiency figures come from a CSV or a JSON list of rows (rendered as a table as given); a training recipe from a
YAML or JSON file (rendered verbatim).
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.resources
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import types
import typing
from collections.abc import Callable

import torch
import transformers
import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData
from transformers import PreTrainedModel

from .conversion import ConversionReport, copy_sentence_transformers_modules, is_model_file, model_type_mismatch
from .loading import (
    HEADS_BY_MODEL_TYPE,
    family_name,
    load_linformer,
    load_model,
    pad_as_the_model_takes,
    remote_code_files,
)
from .models import compat
from .models.lengths import max_input_length
from .outputs import (
    FolderKind,
    check_output_dir,
    check_replaceable,
    staged_output,
    write_json_atomic,
)
from .registration import TOKENIZER_FILES

# The model card template, package data (so an installed package renders cards without the repository).
TEMPLATE = importlib.resources.files(__package__).joinpath("templates", "linformer_template.md")

# Auto class name for each class of every family, from the families' heads tables.
AUTO_CLASS_OF = {cls.__name__: auto for heads in HEADS_BY_MODEL_TYPE.values() for auto, cls in heads.items()}


def _pipeline_tag(auto_name: str) -> str | None:
    """The text pipeline transformers runs with `auto_name` models; None where it has none (question answering
    and multiple choice in transformers 5), and the Hub then infers the task from the card's `architectures`."""
    from transformers.pipelines import SUPPORTED_TASKS

    auto_class = getattr(transformers, auto_name)
    for task, entry in SUPPORTED_TASKS.items():
        if entry.get("type") == "text" and auto_class in entry.get("pt", ()):
            return task
    return None


# Pipeline tag of each class of every family, derived from the heads tables and transformers' pipeline registry.
PIPELINE_TAGS = {cls_name: _pipeline_tag(auto) for cls_name, auto in AUTO_CLASS_OF.items()}


SHARING_MEANING = {
    "none": "own E_i, F_i per head",
    "headwise": "one E and one F per layer, shared by its heads",
    "key_value": "one E = F per layer",
    "layerwise": "one E for all layers, keys and values",
}

KERNEL_MEANING = {
    "softmax": "positive random features: an unbiased estimate of softmax attention",
    "relu": "ReLU features: the paper's generalised attention, a different attention from softmax",
}

ROW_NORM_MEANING = {"chi": "Gaussian row lengths, unbiased", "sqrt_d": "every row of length sqrt(d), regularised"}


def _state_numel(model: PreTrainedModel, name_part: str) -> int:
    # from the state dict: buffers (frozen projections, random features) are part of the model all the same
    return sum(t.numel() for name, t in model.state_dict().items() if name_part in name)


def _linformer_rows(model: PreTrainedModel) -> list[tuple[str, str]]:
    config = model.config
    k = config.projected_length
    return [
        ("maximum sequence length n", str(config.max_sequence_length)),
        ("projected length k", str(k) if isinstance(k, int) else f"{k} (per layer)"),
        ("projection sharing", f"`{config.sharing}` ({SHARING_MEANING[config.sharing]})"),
        ("projection kind", f"`{config.projection}`"),
        ("projections frozen", str(config.freeze_projections)),
    ]


def _performer_rows(model: PreTrainedModel) -> list[tuple[str, str]]:
    config = model.config
    if config.orthogonal_features:
        features = (
            f"orthogonal blocks, `{config.orthogonal_row_norms}` ({ROW_NORM_MEANING[config.orthogonal_row_norms]})"
        )
    else:
        features = "i.i.d. Gaussian rows"
    calls = int(next(t for name, t in model.state_dict().items() if name.endswith("encoder.training_calls")))
    if config.freeze_features:
        redraw = "never: frozen (`freeze_features`)"
    elif config.feature_redraw_interval is None:
        redraw = "never (`feature_redraw_interval` is null)"
    else:
        redraw = (
            f"every {config.feature_redraw_interval} training forward calls, never in eval; {calls} calls counted "
            "so far (a saved buffer)"
        )
    return [
        (
            "maximum input length",
            f"{max_input_length(config)} tokens (the position table: {config.max_position_embeddings} rows, counted "
            f"from pad_token_id + 1 = {config.pad_token_id + 1})",
        ),
        ("attention", "FAVOR+, causal (prefix sums)" if config.is_decoder else "FAVOR+, bidirectional"),
        ("random features m per head", str(config.num_random_features)),
        ("kernel", f"`{config.kernel}` ({KERNEL_MEANING[config.kernel]})"),
        ("features", features),
        ("feature redraw", redraw),
        ("kernel epsilon", f"{config.kernel_epsilon:g}"),
    ]


@dataclasses.dataclass(frozen=True)
class CardFamily:
    """What the model card says about one model family; the rest of the card (and the template's shared sections) is
    the same for every family. The family's prose (its paper, cost, limitations) is the template's `family` section.
    """

    # The family's rows of the Architecture table (the shared rows follow: sizes, vocabulary, parameters).
    architecture_rows: Callable[[PreTrainedModel], list[tuple[str, str]]]
    # What the family adds to RoBERTa's tensors, for the parameters row.
    own_tensors: Callable[[PreTrainedModel], str]
    # How the card introduces the tensors the conversion initialised (`conversion_report.json`'s "initialised").
    initialised_label: str
    # Stage 1 of attention transfer trains the family's own weights: (what, in words; their short name), or None
    # where the model has none (Performer's features are a fixed buffer; frozen or parameter-free projections).
    transfer_trainable: Callable[[PreTrainedModel], tuple[str, str] | None]


# The one table of what the card says per family, by model_type (the keys of loading.HEADS_BY_MODEL_TYPE).
CARD_FAMILIES: dict[str, CardFamily] = {
    "linformer": CardFamily(
        architecture_rows=_linformer_rows,
        own_tensors=lambda model: f"{_state_numel(model, 'projection'):,} in the projections E/F",
        initialised_label="Projections initialised as",
        # frozen projections are buffers, and mean / max pooling has none: then only W^Q, W^K, W^V can train
        transfer_trainable=lambda model: (
            ("the projections E, F", "E, F")
            if any("projection" in name for name, _ in model.named_parameters())
            else None
        ),
    ),
    "performer": CardFamily(
        architecture_rows=_performer_rows,
        own_tensors=lambda model: (
            f"plus {_state_numel(model, 'random_features'):,} random-feature values in buffers, "
            "saved with the weights, not trained"
        ),
        initialised_label="Drawn by the conversion",
        transfer_trainable=lambda model: None,
    ),
}

# How the card names each source family (the keys are conversion.SOURCE_CONFIGS').
SOURCE_FAMILY_NAMES = {"bert": "BERT", "roberta": "RoBERTa"}

# sentence-transformers pooling modes (1_Pooling/config.json: pooling_mode_<mode>), in words.
POOLING_MODES = {
    "cls_token": "the first token's vector",
    "mean_tokens": "the mean of the token vectors over real tokens (the attention mask)",
    "max_tokens": "the element-wise maximum of the token vectors over real tokens",
    "mean_sqrt_len_tokens": "the sum of the token vectors over real tokens divided by the square root of their count",
    "weightedmean_tokens": "a position-weighted mean of the token vectors",
    "lasttoken": "the last real token's vector",
}

# card_info's keys and the JSON type of each value: a string given for a list would be read letter by letter.
CARD_INFO_KEYS = {
    "model_name": str,
    "license": str,
    "language": str | list,
    "datasets": list,
    "tags": list,
    "base_model": str,
    "base_model_license": str,
    "training_data": str,
    "training_description": str,
    "evaluation_notes": str,
    "eval_results": list,
}
# The fields of an eval_results entry: huggingface_hub.EvalResult's arguments, those without a default required.
EVAL_RESULT_FIELDS = typing.get_type_hints(EvalResult.__init__)
EVAL_RESULT_FIELDS.pop("return", None)
EVAL_RESULT_REQUIRED = [
    name
    for name, parameter in inspect.signature(EvalResult).parameters.items()
    if parameter.default is inspect.Parameter.empty
]
JSON_TYPE_NAMES = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}


def _json_type(value) -> str:
    return "null" if value is None else JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _types_of(hint) -> tuple[type, ...] | None:
    """The Python types a JSON value of an annotated field may take (None: any), e.g. `str | None` -> (str,)."""
    if hint is typing.Any:
        return None
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    return tuple(typing.get_origin(option) or option for option in options if option is not type(None))


def check_card_info(card_info, source: str = "card_info") -> dict:
    """`card_info` with its shape checked, before any work: a JSON object of `CARD_INFO_KEYS`, each value of its type
    (null: not given), and `eval_results` a list of objects with huggingface_hub.EvalResult's fields (the required
    ones, no others). Raises ValueError naming the key, or the entry and its field; `source` names the input."""
    if not isinstance(card_info, dict):
        raise ValueError(
            f"{source} is a JSON {_json_type(card_info)}, not an object of card inputs: give "
            '{"license": ..., "eval_results": [...], ...} (the format: linformer_hf.hub).'
        )
    unknown = set(card_info) - set(CARD_INFO_KEYS)
    if unknown:
        raise ValueError(f"Unknown card_info key(s) {sorted(unknown)} in {source}; allowed: {sorted(CARD_INFO_KEYS)}.")
    for key, value in card_info.items():
        if value is None:
            continue
        if not isinstance(value, CARD_INFO_KEYS[key]):
            expected = " or ".join(JSON_TYPE_NAMES[t] for t in _types_of(CARD_INFO_KEYS[key]))
            raise ValueError(f"{source} {key} is a JSON {_json_type(value)}: give a {expected}.")
        if isinstance(value, list) and key != "eval_results" and not all(isinstance(item, str) for item in value):
            raise ValueError(f"{source} {key} must be a list of strings, got {value!r}.")
    for index, entry in enumerate(card_info.get("eval_results") or []):
        where = f"{source} eval_results[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} is a JSON {_json_type(entry)}: each entry is an object of EvalResult fields.")
        missing = [name for name in EVAL_RESULT_REQUIRED if name not in entry]
        if missing:
            raise ValueError(
                f"{where} lacks {', '.join(missing)}: each entry needs {', '.join(EVAL_RESULT_REQUIRED)} "
                "(huggingface_hub.EvalResult)."
            )
        unknown = sorted(set(entry) - set(EVAL_RESULT_FIELDS))
        if unknown:
            raise ValueError(
                f"{where} has unknown field(s) {unknown}; EvalResult's fields are {sorted(EVAL_RESULT_FIELDS)}."
            )
        for name, value in entry.items():
            allowed = _types_of(EVAL_RESULT_FIELDS[name])
            if allowed and value is not None and not isinstance(value, allowed):
                raise ValueError(
                    f"{where} {name} is a JSON {_json_type(value)}: give a "
                    f"{' or '.join(JSON_TYPE_NAMES.get(t, t.__name__) for t in allowed)}."
                )
        try:
            EvalResult(**entry)  # its own checks of how fields combine (e.g. source_name needs source_url)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
    return card_info


PROVENANCE_FILES = (
    "conversion_report.json",
    "transfer_report.json",
    "transfer_log.jsonl",
    "fidelity_before.json",
    "eval_results.json",
)

# What `prepare_model_folder` writes (a model folder, the provenance files found beside it, its card): what its
# overwrite replaces whole, and nothing else.
PUSHED_MODEL = FolderKind(
    what="a model folder written by push_to_hub",
    required=("config.json", "README.md"),
    holds=lambda folder, name: name == "README.md" or name in PROVENANCE_FILES or is_model_file(folder, name),
    mismatch=model_type_mismatch,
)


def _read_json(path: str):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _read_rows(path: str) -> list[dict]:
    """Efficiency rows from a CSV, or a JSON list of objects (or an object holding one under "rows")."""
    if path.endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
    else:
        data = _read_json(path)
        rows = data.get("rows") if isinstance(data, dict) else data
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise ValueError(f"{path}: efficiency figures must be a CSV, a JSON list of objects, or {{'rows': [...]}}.")
    if not rows:  # the card would say that no measurements were supplied, though a file was
        raise ValueError(f"{path} holds no efficiency figures (no rows): give a file with at least one row.")
    return rows


def _read_recipe(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle) if path.endswith(".json") else yaml.safe_load(handle)
    return yaml.safe_dump(data, sort_keys=False)


def _is_local(path: str) -> bool:
    """A local folder: one here, or a path that cannot be a Hub repo id (a folder of the machine the model was made
    on, which a card must not present as a Hub name)."""
    if os.path.exists(path):
        return True
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(path)
    except HFValidationError:
        return True
    return False


def _display_name(path: str, hub_name: str | None) -> tuple[str, bool]:
    """How a card names a source or teacher: its Hub name, else only its local folder's name (a full path means
    nothing to a reader and may say more about the machine than its owner wants); and whether it is the latter."""
    if hub_name:
        return hub_name, False
    return os.path.basename(os.path.normpath(path)) or path, True


def find_provenance(model_dir: str | None) -> dict[str, tuple[str, object]]:
    """The provenance files describing the model in `model_dir`: name -> (path, parsed content).

    `conversion_report.json` is looked for beside the model, then beside the student named in `transfer_report.json`
    (a transferred folder made before transfer copied its student's report).
    """
    if not model_dir:
        return {}
    found = {}
    for name in PROVENANCE_FILES:
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            if name.endswith(".jsonl"):
                found[name] = (path, None)  # copied, not rendered
            else:
                found[name] = (path, _read_json(path))
    if "transfer_report.json" in found and "conversion_report.json" not in found:
        student = found["transfer_report.json"][1].get("student") or ""
        path = os.path.join(student, "conversion_report.json")
        if _is_local(student) and os.path.exists(path):
            found["conversion_report.json"] = (path, _read_json(path))
    return found


def describe_tokenizer(tokenizer) -> str:
    """The tokenizer's kind and class, read from the tokenizer itself: e.g. "lowercased WordPiece, `BertTokenizer`",
    "byte-level BPE, `RobertaTokenizer`"."""
    name = type(tokenizer).__name__
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a pure-Python tokenizer: its class is all there is to say
        return f"`{name}`"
    spec = json.loads(backend.to_str())

    def components(node):  # every {"type": ...} dict of a normalizer / pre-tokenizer, Sequences opened
        if isinstance(node, dict):
            if "type" in node:
                yield node
            for value in node.values():
                yield from components(value)
        elif isinstance(node, list):
            for value in node:
                yield from components(value)

    kind = spec["model"]["type"]  # WordPiece, BPE, Unigram, WordLevel
    if kind == "BPE" and any(part["type"] == "ByteLevel" for part in components(spec.get("pre_tokenizer"))):
        kind = "byte-level BPE"
    lowercase = any(
        part["type"] == "Lowercase" or (part["type"] == "BertNormalizer" and part.get("lowercase"))
        for part in components(spec.get("normalizer"))
    )
    return f"{'lowercased ' if lowercase else ''}{kind}, `{name}`"


def sentence_encoder_usage(model_dir: str | None) -> dict | None:
    """How the folder's sentence-transformers modules turn token vectors into a sentence embedding; None where the
    folder has no `modules.json`."""
    if not model_dir or not os.path.exists(os.path.join(model_dir, "modules.json")):
        return None
    modules = _read_json(os.path.join(model_dir, "modules.json"))
    kinds = [module["type"].rsplit(".", 1)[-1] for module in modules]
    usage = {"modules": kinds, "pooling_modes": [], "normalize": "Normalize" in kinds, "max_seq_length": None}
    for module in modules:
        if module["type"].endswith(".Pooling"):
            config_path = os.path.join(model_dir, module.get("path", ""), "config.json")
            if not os.path.exists(config_path):
                raise FileNotFoundError(f"modules.json names a Pooling module but {config_path} is missing.")
            pooling = _read_json(config_path)
            prefix = "pooling_mode_"
            modes = {key.removeprefix(prefix): on for key, on in pooling.items() if key.startswith(prefix)}
            usage["pooling_modes"] = [mode for mode, on in modes.items() if on]
    usage["pooling_words"] = " and ".join(POOLING_MODES.get(mode, f"`{mode}`") for mode in usage["pooling_modes"])
    if os.path.exists(os.path.join(model_dir, "sentence_bert_config.json")):
        usage["max_seq_length"] = _read_json(os.path.join(model_dir, "sentence_bert_config.json")).get("max_seq_length")
    return usage


def _source_license(path: str) -> str | None:
    """The license in a local model folder's own model card (README.md metadata), where it has one."""
    readme = os.path.join(path, "README.md")
    if not (_is_local(path) and os.path.exists(readme)):
        return None
    return ModelCard.load(readme).data.license


def _hub_name(path: str, local_source: str | None, base_model: str | None) -> str | None:
    """The Hub name of a source or teacher recorded as `path`: the path itself when it is not a local folder, else
    card_info's `base_model` when `path` is the folder the conversion read; None for any other local folder."""
    if not _is_local(path):
        return path
    if base_model and local_source and os.path.abspath(path) == os.path.abspath(local_source):
        return base_model
    return None


def describe_transfer(transfer: dict, before_fallback: dict | None, own_trainable: tuple[str, str] | None) -> dict:
    """The card's view of a transfer report: stages, data, and the before / after fidelity rows, values verbatim.

    `own_trainable` is what stage 1 trains of the student family's own weights (`CardFamily.transfer_trainable`).
    """
    args = transfer["arguments"]
    trained, rates = [], []
    if own_trainable:
        trained.append(own_trainable[0])
        rates.append(f"{args['projection_learning_rate']} for {own_trainable[1]}")
    if args["train_attention_weights"]:
        trained.append("W^Q, W^K, W^V")
        rates.append(f"{args['attention_learning_rate']} for W^Q, W^K, W^V")

    def short(path):  # the file and its folder, e.g. imdb/train.csv: enough to say what it is, no local layout
        return "/".join(os.path.normpath(path).split(os.sep)[-2:])

    if args.get("text_files"):
        data = "text files " + ", ".join(f"`{short(f)}`" for f in args["text_files"])
    else:
        data = f"`datasets` `{args['dataset']}`"
        if args.get("dataset_config"):
            data += f" (`{args['dataset_config']}`)"
        if args.get("data_files"):
            data += " on " + ", ".join(f"`{short(f)}`" for f in args["data_files"])
        data += f", split `{args['dataset_split']}`, column `{args['text_column']}`"
    before, after = transfer.get("before") or before_fallback, transfer["after"]

    def cosine(result):
        return f"{result['embedding_cosine_mean']} ({result['embedding_cosine_min']})" if result else "not measured"

    def errors(result):
        return ", ".join(str(e) for e in result["attention_relative_error_per_layer"]) if result else "not measured"

    rows = []
    for length, result in after["windows"].items():
        earlier = (before or {}).get("windows", {}).get(length)
        rows.append(
            {
                "input": f"{result['windows']} windows of {length} tokens",
                "cosine": f"{cosine(earlier)} → {cosine(result)}",
                "error": f"{errors(earlier)} → {errors(result)}",
            }
        )
    documents = after.get("documents")
    if documents:
        rows.append(
            {
                "input": f"{documents['documents']} whole documents (median {documents['tokens_median']} tokens, "
                "truncated to n)",
                "cosine": f"{cosine((before or {}).get('documents'))} → {cosine(documents)}",
                "error": "",
            }
        )
    return {
        "args": args,
        "lengths": ", ".join(str(length) for length in transfer["lengths"]),
        "stage1_trained": ", and ".join(trained) or "nothing",
        "stage1_rates": ", ".join(rates),
        "data": data,
        "held_out_percent": f"{100 * args['eval_fraction']:g}",
        "train_seconds": transfer.get("train_seconds"),
        "fidelity_rows": rows,
        "documents_cosine": documents["embedding_cosine_mean"] if documents else None,
        "documents_count": documents["documents"] if documents else None,
        "arguments_yaml": yaml.safe_dump(args, sort_keys=False),
    }


def render_model_card(
    model,
    repo_id: str,
    model_dir: str | None = None,
    card_info: dict | None = None,
    efficiency_path: str | None = None,
    recipe_path: str | None = None,
    template_path: str | None = None,
    tokenizer=None,
) -> str:
    """The model card (YAML metadata + markdown) for `model`, validated before it is returned.

    `model_dir` is the folder the model was read from: its provenance files, tokenizer (unless `tokenizer` is given)
    and sentence-transformers modules fill the card. `template_path` replaces the packaged template with a Jinja2
    file of one's own.
    """
    from . import __version__

    if template_path is None:
        template_text = TEMPLATE.read_text(encoding="utf-8")
    elif not os.path.isfile(template_path):
        raise FileNotFoundError(f"Model card template {template_path} not found.")
    else:
        with open(template_path, encoding="utf-8") as handle:
            template_text = handle.read()
    card_info = dict(check_card_info(card_info or {}))
    config = model.config
    family = CARD_FAMILIES[config.model_type]
    architecture = type(model).__name__
    model_name = card_info.get("model_name") or repo_id.split("/")[-1]
    if tokenizer is None and model_dir and any(os.path.exists(os.path.join(model_dir, f)) for f in TOKENIZER_FILES):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)

    provenance = find_provenance(model_dir)
    conversion = provenance.get("conversion_report.json", (None, None))[1]
    transfer = provenance.get("transfer_report.json", (None, None))[1]
    mlm_eval = provenance.get("eval_results.json", (None, None))[1]

    # Where the weights came from: the conversion's source (and the transfer's teacher), by its Hub name if known.
    local_source = None
    source_family = source_model_type = source_display = None
    if conversion:
        source_model_type = getattr(transformers, conversion["source_architecture"]).config_class.model_type
        source_family = SOURCE_FAMILY_NAMES.get(source_model_type, source_model_type)
        local_source = conversion["source"] if _is_local(conversion["source"]) else None
    elif transfer:
        local_source = transfer["teacher"] if _is_local(transfer["teacher"]) else None
    recorded_source = source_of(provenance)
    base_model = card_info.get("base_model")
    if recorded_source and not _is_local(recorded_source) and base_model and base_model != recorded_source:
        raise ValueError(
            f"card_info base_model {base_model!r} contradicts the reports, which name {recorded_source!r} on the Hub."
        )
    if base_model and not recorded_source:
        raise ValueError("card_info base_model is given but the folder has no conversion or transfer report.")
    source_is_local = teacher_is_local = False
    if conversion:
        source_display, source_is_local = _display_name(
            conversion["source"], _hub_name(conversion["source"], local_source, base_model)
        )
    teacher_display = None
    if transfer:
        teacher_display, teacher_is_local = _display_name(
            transfer["teacher"], _hub_name(transfer["teacher"], local_source, base_model)
        )
    hub_base_model = _hub_name(recorded_source, local_source, base_model) if recorded_source else None

    base_model_license = source_license = None
    if recorded_source:
        found = _source_license(recorded_source) if local_source else None
        given = card_info.get("base_model_license")
        if found and given and found != given:
            raise ValueError(
                f"card_info base_model_license {given!r} contradicts the license {found!r} in "
                f"{os.path.join(recorded_source, 'README.md')}."
            )
        if found:
            base_model_license = f"{found} (from its model card)"
        else:
            base_model_license = given
        source_license = found or given

    eval_results = [EvalResult(**entry) for entry in card_info.get("eval_results", [])]
    eval_rows = [
        {
            "task": r.task_name or r.task_type,
            "dataset": r.dataset_name + (f" ({r.dataset_config})" if r.dataset_config else ""),
            "split": r.dataset_split or "",
            "metric": r.metric_name or r.metric_type,
            "value": r.metric_value,
        }
        for r in eval_results
    ]
    sentence_encoder = sentence_encoder_usage(model_dir)
    tags = [config.model_type, "roberta", "efficient-attention", "custom_code"]  # the family's tag is its model_type
    if source_model_type and source_model_type not in tags:
        tags.append(source_model_type)
    if sentence_encoder:
        tags.append("sentence-transformers")
    tags += [tag for tag in card_info.get("tags", []) if tag not in tags]

    card_data = ModelCardData(
        model_name=model_name,
        # A model made from another's weights is under that one's license unless its owner says otherwise: where
        # neither is known, the card claims none ("unknown"), rather than this package's own.
        license=card_info.get("license") or (source_license or "unknown" if recorded_source else "apache-2.0"),
        language=card_info.get("language"),
        library_name="transformers",
        pipeline_tag=PIPELINE_TAGS[architecture],
        tags=tags,
        datasets=card_info.get("datasets"),
        metrics=sorted({r.metric_type for r in eval_results}) or None,
        base_model=hub_base_model,
        eval_results=eval_results or None,
    )

    efficiency_rows = _read_rows(efficiency_path) if efficiency_path else []
    before_fallback = provenance.get("fidelity_before.json", (None, None))[1]
    tokenizer_text = describe_tokenizer(tokenizer) if tokenizer is not None else "tokenizer not supplied"
    architecture_rows = family.architecture_rows(model) + [
        (
            "layers / hidden size / heads",
            f"{config.num_hidden_layers} / {config.hidden_size} / {config.num_attention_heads}",
        ),
        ("feed-forward size", str(config.intermediate_size)),
        ("vocabulary", f"{config.vocab_size} ({tokenizer_text})"),
        ("parameters", f"{model.num_parameters():,} ({family.own_tensors(model)})"),
    ]

    card = ModelCard.from_template(
        card_data,
        template_str=template_text,
        model_name=model_name,
        repo_id=repo_id,
        package_version=__version__,
        # what the folder's code runs on (models/compat.py states it)
        transformers_requirement=f"transformers>={compat.REMOTE_CODE_MINIMUM},<{compat.BELOW}",
        family=config.model_type,
        family_name=family_name(config.model_type),
        config=config,
        causal=bool(config.is_decoder),
        architecture=architecture,
        auto_class=AUTO_CLASS_OF[architecture],
        n=max_input_length(config),
        architecture_rows=architecture_rows,
        conversion=conversion,
        source_family=source_family,
        source_display=source_display,
        source_is_local=source_is_local,
        conversion_inits="; ".join(sorted(set(conversion["initialised"].values()))) or "none (parameter-free pooling)"
        if conversion
        else None,
        initialised_label=family.initialised_label,
        conversion_problems=ConversionReport(**conversion).problems() if conversion else [],
        # grown past the source's learned positions (not merely re-laid out, as a BERT table is)
        positions_extended=bool(
            conversion
            and conversion.get("source_positions")
            and conversion["max_sequence_length"] > conversion["source_positions"]
        ),
        transfer=describe_transfer(transfer, before_fallback, family.transfer_trainable(model)) if transfer else None,
        teacher_display=teacher_display,
        teacher_is_local=teacher_is_local,
        base_model_license=base_model_license,
        sentence_encoder=sentence_encoder,
        provenance_files=sorted(provenance),
        training_data=card_info.get("training_data"),
        training_description=card_info.get("training_description"),
        recipe_yaml=_read_recipe(recipe_path) if recipe_path else None,
        recipe_source=os.path.basename(recipe_path) if recipe_path else None,
        eval_rows=eval_rows,
        evaluation_notes=card_info.get("evaluation_notes"),
        mlm_eval=mlm_eval,
        efficiency_rows=efficiency_rows,
        efficiency_columns=list(efficiency_rows[0]) if efficiency_rows else [],
        efficiency_source=os.path.basename(efficiency_path) if efficiency_path else None,
    )
    content = str(card)
    validate_model_card(content)
    return content


def validate_model_card(content: str) -> dict:
    """The card's metadata as a dict; raises ValueError when the YAML front matter is missing or invalid."""
    if not content.startswith("---\n"):
        raise ValueError("A model card must start with YAML metadata between '---' lines.")
    front_matter = content.split("---\n", 2)[1]
    metadata = yaml.safe_load(front_matter)
    if not isinstance(metadata, dict):
        raise ValueError(f"The model card's metadata is not a YAML mapping: {front_matter!r}")
    for required in ("license", "library_name", "tags"):
        if required not in metadata:
            raise ValueError(f"The model card's metadata lacks {required!r}.")
    ModelCard(content, ignore_metadata_errors=False).data  # noqa: B018  (huggingface_hub's own parse, incl. model-index)
    return metadata


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


# What transformers 5 writes into a saved tokenizer_config.json about the machine that loaded it (a local folder, an
# offline run), not about the tokenizer; a repository on the Hub is neither.
MACHINE_TOKENIZER_SETTINGS = ("is_local", "local_files_only")


def drop_machine_settings(tokenizer_config: str) -> None:
    """Remove `MACHINE_TOKENIZER_SETTINGS` from a tokenizer_config.json that is about to be published."""
    if not os.path.isfile(tokenizer_config):
        return
    settings = _read_json(tokenizer_config)
    if any(key in settings for key in MACHINE_TOKENIZER_SETTINGS):
        write_json_atomic(tokenizer_config, {k: v for k, v in settings.items() if k not in MACHINE_TOKENIZER_SETTINGS})


# An absolute path in a record's text: a "/" that does not follow a word, a scheme ("https:") or another "/".
ABSOLUTE_PATH = re.compile(r"(?<![\w/:.~])/(?:[^\s/()\[\]'\"`,;]+/)*[^\s/()\[\]'\"`,;]+")


def without_local_layout(value):
    """A provenance record as it is published: an absolute local path, alone or within a sentence, keeps its folder
    and name only, as the card shows it (a reader cannot open it, and the rest may say more about the machine than
    its owner wants)."""
    if isinstance(value, dict):
        return {key: without_local_layout(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_local_layout(item) for item in value]
    if isinstance(value, str):
        return ABSOLUTE_PATH.sub(lambda path: "/".join(path.group(0).split("/")[-2:]).lstrip("/"), value)
    return value


def source_of(provenance: dict) -> str | None:
    """What the reports of `find_provenance` say a model's weights came from: the conversion's source, else the
    transfer's teacher; None for a model trained from scratch."""
    conversion = provenance.get("conversion_report.json", (None, None))[1]
    transfer = provenance.get("transfer_report.json", (None, None))[1]
    return conversion["source"] if conversion else transfer["teacher"] if transfer else None


def unnamed_local_source(model_dir: str, card_info: dict | None) -> str | None:
    """The local folder a model was converted or transferred from, where card_info gives no Hub name for it."""
    source = source_of(find_provenance(model_dir))
    if source and _is_local(source) and not (card_info or {}).get("base_model"):
        return source
    return None


def check_tokenizer_fits(tokenizer, config, source: str) -> None:
    """Refuse a tokenizer the model cannot take: more tokens than its embedding table has rows (`vocab_size`: those
    ids fail, or index past the table), or padding with another id than the model's `pad_token_id` (which its
    embeddings and position numbering treat as padding). The card states both, so a mismatch would be published."""
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"The tokenizer {source} has {len(tokenizer)} tokens but the model's vocabulary (config.json vocab_size) "
            f"is {config.vocab_size}: ids from {config.vocab_size} on have no embedding. Give the tokenizer the model "
            "was made with (tokenizer_path, --tokenizer; or save it beside the model)."
        )
    if tokenizer.pad_token_id != config.pad_token_id:
        pads = "has no pad token" if tokenizer.pad_token_id is None else f"pads with id {tokenizer.pad_token_id}"
        raise ValueError(
            f"The tokenizer {source} {pads} but the model's pad_token_id (config.json) is {config.pad_token_id}: it "
            "is not the model's tokenizer. Give the tokenizer the model was made with (tokenizer_path, --tokenizer; "
            "or save it beside the model)."
        )


def prepare_model_folder(
    model_dir: str,
    output_dir: str,
    repo_id: str,
    card_info_path: str | None = None,
    efficiency_path: str | None = None,
    recipe_path: str | None = None,
    tokenizer_path: str | None = None,
    overwrite: bool = False,
    template_path: str | None = None,
) -> str:
    """Write the folder that would be pushed to `repo_id` and return its path.

    Every input (model, tokenizer, card) is read and checked before `output_dir` is touched.
    """
    if os.path.abspath(model_dir) == os.path.abspath(output_dir):
        raise ValueError("output_dir must differ from model_dir: the folder is written fresh.")
    # An overwrite deletes output_dir whole: never with one of the inputs inside it (e.g. --output_dir outputs/run
    # for the model outputs/run/final).
    for what, path in (
        ("model_dir", model_dir),
        ("tokenizer", tokenizer_path),
        ("card_info", card_info_path),
        ("efficiency", efficiency_path),
        ("recipe", recipe_path),
        ("template", template_path),
    ):
        if path and _inside(path, output_dir):
            raise ValueError(
                f"{what} {path} is inside output_dir {output_dir}, which is written fresh (deleted first): give an "
                "output_dir of its own."
            )
    # Deleted whole by an overwrite: only an earlier folder of this command, never a folder of other things (refused
    # with or without --overwrite, so that the refusal never advises a flag that would be refused in turn).
    check_replaceable(output_dir, PUSHED_MODEL, flag="overwrite=True (--overwrite)")
    check_output_dir(output_dir, overwrite, flag="overwrite=True (--overwrite)", create=False)

    # The inputs' paths before the model is read (minutes for a base model): a mistyped one was reported after it, and
    # a tokenizer file or missing folder as a malformed Hub repo id.
    for what, path in (
        ("card_info", card_info_path),
        ("efficiency", efficiency_path),
        ("recipe", recipe_path),
        ("template", template_path),
    ):
        if path and not os.path.isfile(path):
            found = "is a folder" if os.path.isdir(path) else "does not exist"
            raise FileNotFoundError(f"{what} {path} {found}: give the path of the {what} file (--{what}).")
    if tokenizer_path and not os.path.isdir(tokenizer_path) and _is_local(tokenizer_path):  # not a Hub name either
        found = "is a file" if os.path.exists(tokenizer_path) else "does not exist"
        raise FileNotFoundError(
            f"tokenizer {tokenizer_path} {found}: give the folder the tokenizer was saved to "
            "(tokenizer.save_pretrained), or its Hub name (--tokenizer)."
        )

    if efficiency_path:
        _read_rows(efficiency_path)  # its rows are checked here too, before the model is read
    from transformers import AutoTokenizer

    card_info = None
    if card_info_path:
        try:
            card_info = check_card_info(_read_json(card_info_path), f"card_info {card_info_path}")
        except json.JSONDecodeError as err:
            raise ValueError(f"card_info {card_info_path} is not valid JSON: {err}.") from None
    model = load_model(model_dir)  # any family: HEADS_BY_MODEL_TYPE
    tokenizer_source = tokenizer_path or model_dir
    if os.path.isdir(tokenizer_source) and not any(
        os.path.exists(os.path.join(tokenizer_source, name)) for name in TOKENIZER_FILES
    ):
        raise FileNotFoundError(
            f"No tokenizer in {tokenizer_source} (none of {TOKENIZER_FILES}); a pushed model must carry one: "
            "pass tokenizer_path (--tokenizer)."
        )
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    check_tokenizer_fits(tokenizer, model.config, tokenizer_source)
    pad_as_the_model_takes(tokenizer, model.config)
    card = render_model_card(
        model, repo_id, model_dir, card_info, efficiency_path, recipe_path, template_path, tokenizer=tokenizer
    )
    unnamed = unnamed_local_source(model_dir, card_info)
    if unnamed:
        print(
            f"note: the card names the source {unnamed} by its folder name only: give its Hub name as card_info "
            f"base_model (owner/name) to name and link it (the card's base_model).",
            file=sys.stderr,
        )

    # Written beside output_dir under a temporary name and moved into place when whole: a run stopped part-way leaves
    # no folder without its card or tokenizer that reads as ready to push, and an overwritten folder stays as it was.
    # An overwrite replaces the earlier folder whole (none of its files stays); without one, a new folder that another
    # run filled meanwhile is refused, never replaced.
    with staged_output(output_dir, PUSHED_MODEL, overwrite, flag="overwrite=True (--overwrite)") as staging:
        _write_model_folder(model, tokenizer, card, model_dir, staging)
    return output_dir


def _write_model_folder(model, tokenizer, card: str, model_dir: str, folder: str) -> None:
    """`prepare_model_folder`'s files, in `folder`."""
    model.save_pretrained(folder)  # safetensors + config with the full auto_map + the modeling files
    tokenizer.save_pretrained(folder)
    drop_machine_settings(os.path.join(folder, "tokenizer_config.json"))
    copy_sentence_transformers_modules(model_dir, folder)  # what the card's sentence-encoder section uses
    for name, (path, content) in find_provenance(model_dir).items():
        if content is None:  # a log of figures, copied as it is
            shutil.copy(path, os.path.join(folder, name))
        else:
            write_json_atomic(os.path.join(folder, name), without_local_layout(content))
    with open(os.path.join(folder, "README.md"), "w", encoding="utf-8") as handle:
        handle.write(card)

    expected = ["config.json", "model.safetensors", "README.md", *remote_code_files(model.config.model_type)]
    absent = [name for name in expected if not os.path.exists(os.path.join(folder, name))]
    if absent:
        raise RuntimeError(f"The prepared folder lacks {absent}.")


# Where a model card shows how to load the model: the first Python block of this section.
CARD_LOADING_SECTION = "## How to load"


def card_loading_code(card: str, folder: str) -> str | None:
    """The Python code of a model card's "How to load" section, its repo id (every `from_pretrained("...")`) replaced
    by `folder`, as a user would run it on the folder; None where the card has no such code."""
    section = card.split(CARD_LOADING_SECTION, 1)[1].split("\n## ", 1)[0] if CARD_LOADING_SECTION in card else ""
    block = re.search(r"```python\n(.*?)```", section, re.S)
    if not block:
        return None
    return re.sub(r'from_pretrained\("[^"]*"', lambda _: f"from_pretrained({folder!r}", block.group(1))


# Runs in a fresh interpreter: first each folder's model card loading code as written (a user's first session), then
# loads each (folder, Auto class) job through transformers' remote-code path only.
_REMOTE_LOAD_SCRIPT = r"""
import json, sys, traceback
import torch
import transformers
jobs, texts, result_path = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
card_errors = {}
for folder, code in json.loads(sys.argv[4]):
    try:
        exec(compile(code, folder + "/README.md (How to load)", "exec"), {"__name__": "__main__"})
    except BaseException as err:  # reported by folder, with the line of the card's code that failed
        card_errors[folder] = traceback.format_exception_only(err)[-1].strip()
if card_errors:
    json.dump(card_errors, open(result_path + ".card.json", "w"))
    sys.exit(3)
results = []
for folder, auto_name, max_length in jobs:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
    inputs = dict(tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt"))
    if auto_name == "AutoModelForMultipleChoice":
        inputs = {key: value[None] for key, value in inputs.items()}
    with torch.no_grad():
        outputs = model(**inputs)
    output = outputs.logits if getattr(outputs, "logits", None) is not None else outputs[0]
    results.append({"folder": folder, "auto_class": auto_name, "output": output, "inputs": inputs,
                    "model_class": type(model).__module__ + "." + type(model).__name__,
                    "tokenizer_class": type(tokenizer).__name__})
imported = any(name == "linformer_hf" or name.startswith("linformer_hf.") for name in sys.modules)
for result in results:
    result["linformer_hf_imported"] = imported
torch.save(results, result_path)
"""


def check_remote_loading(
    folders, texts: list[str], auto_classes: list[str] | None = None, timeout: int = 600
) -> list[dict]:
    """Load folders in one fresh Python process as a user without the package would, and run them on `texts`.

    `folders` is one path or a list; `auto_classes` the Auto class to use for each (default: the one matching the
    saved architecture). The child has no PYTHONPATH, runs outside the repository, is offline, has no input to answer
    a prompt with and uses an empty modules cache, so the only model code it can use is the folders' own. It first
    runs each folder's model card loading code (`card_loading_code`) exactly as the card shows it, so the card cannot
    show code that fails; a failure raises RuntimeError naming the folder and the error. Texts are truncated to each
    model's longest input (`max_input_length`, computed here: the child cannot import the package). Returns, per job,
    the output, the inputs, the model and tokenizer classes built, the card code run for its folder (None: the folder
    has no card) and whether `linformer_hf` ended up imported (it must not).
    """
    folders = [folders] if isinstance(folders, (str, os.PathLike)) else list(folders)
    folders = [os.path.abspath(folder) for folder in folders]
    configs = [transformers.AutoConfig.from_pretrained(folder) for folder in folders]  # the package's own classes
    if auto_classes is None:
        auto_classes = [AUTO_CLASS_OF[config.architectures[0]] for config in configs]
    if len(auto_classes) != len(folders):
        raise ValueError(f"{len(folders)} folder(s) but {len(auto_classes)} Auto class(es): give one per folder.")
    max_lengths = [max_input_length(config) for config in configs]
    card_code = {}
    for folder in dict.fromkeys(folders):
        readme = os.path.join(folder, "README.md")
        if os.path.isfile(readme):
            with open(readme, encoding="utf-8") as handle:
                card_code[folder] = card_loading_code(handle.read(), folder)
    snippets = json.dumps([[folder, code] for folder, code in card_code.items() if code])
    with tempfile.TemporaryDirectory() as scratch:
        env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSTARTUP")}
        env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=os.path.join(scratch, "modules"), PYTHONNOUSERSITE="1")
        result_path = os.path.join(scratch, "result.pt")
        jobs = json.dumps([list(job) for job in zip(folders, auto_classes, max_lengths, strict=True)])
        completed = subprocess.run(
            [sys.executable, "-c", _REMOTE_LOAD_SCRIPT, jobs, json.dumps(texts), result_path, snippets],
            cwd=scratch,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if os.path.exists(result_path + ".card.json"):
            errors = _read_json(result_path + ".card.json")
            raise RuntimeError(
                "The model card's loading code (README.md, How to load) fails when run as written, in a fresh "
                "process: " + "; ".join(f"{folder}: {error}" for folder, error in errors.items())
            )
        if completed.returncode != 0:
            raise RuntimeError(
                f"Loading {jobs} with trust_remote_code=True in a fresh process failed:\n{completed.stderr[-4000:]}"
            )
        results = torch.load(result_path, weights_only=False)
    for result in results:
        result["card_code"] = card_code.get(result["folder"])
    return results


def check_can_push(repo_id: str, token: str | None = None) -> str:
    """Before a folder is built for the Hub: a well-formed `repo_id`, the Hub not switched off (HF_HUB_OFFLINE), and
    credentials; returns the token. (Whether the token may write to the repo only the Hub can say, at the push.)"""
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import validate_repo_id

    validate_repo_id(repo_id)  # HFValidationError, a ValueError, naming what is wrong
    if constants.HF_HUB_OFFLINE:
        raise RuntimeError(
            "HF_HUB_OFFLINE is set: the Hub cannot be reached to push. Unset it, or use --dry_run to only write and "
            "check the folder."
        )
    token = token or get_token()
    if not token:
        raise RuntimeError(
            "No Hugging Face credentials: run `hf auth login`, set HF_TOKEN, or pass --token. "
            "Use --dry_run to only write the folder."
        )
    return token


def push_folder(
    folder: str,
    repo_id: str,
    token: str | None = None,
    private: bool = False,
    commit_message: str = "Upload model",
) -> str:
    """Create `repo_id` if needed and upload `folder`; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=check_can_push(repo_id, token))
    api.create_repo(repo_id, private=private, exist_ok=True)
    commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message)
    return commit.commit_url


__all__ = [
    "AUTO_CLASS_OF",
    "CARD_FAMILIES",
    "PIPELINE_TAGS",
    "TEMPLATE",
    "card_loading_code",
    "check_can_push",
    "check_card_info",
    "check_remote_loading",
    "check_tokenizer_fits",
    "describe_tokenizer",
    "find_provenance",
    "load_linformer",
    "load_model",
    "prepare_model_folder",
    "push_folder",
    "remote_code_files",
    "render_model_card",
    "sentence_encoder_usage",
    "validate_model_card",
]
