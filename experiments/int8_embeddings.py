"""How far ONNX Runtime int8 moves a saved model's sentence embeddings from its fp32 graph, on real sentences.

Exports `model_dir` (a Linformer or Performer folder with its tokenizer; a BERT or RoBERTa folder is exported the same
way, for the baseline) to fp32 and int8 ONNX graphs with this package's quantiser, embeds the first `--count`
sentences of an SST-2 TSV by mean pooling over real tokens, and reports the cosine of each sentence's int8 embedding
with its fp32 one: each sentence alone, and all of them in one right-padded batch. int8 quantises activations per
tensor at run time, so a sentence's int8 embedding depends on what else is in its batch: the last figures are each
sentence's int8 embedding alone against the same sentence padded in a batch with the two longest (fp32: the same
comparison, for scale). A minute on 2 CPU cores for a 6-layer, 384-wide model:

    python -m experiments.int8_embeddings MODEL_DIR --sentences ../shared/data/sst2/dev.tsv
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import tempfile

import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer

from linformer_hf.cli import ArgumentParser
from linformer_hf.loading import HEADS_BY_MODEL_TYPE
from linformer_hf.onnx_export import (
    INT8_FILE,
    ONNX_FILE,
    _OnnxWrapper,
    export_folder,
    input_names,
    onnx_session,
    quantize_int8,
    run_onnx,
)


def read_sentences(path: str, count: int) -> list[str]:
    """The first `count` sentences of a GLUE TSV (header with a `sentence` column, no quoting)."""
    with open(path, encoding="utf-8") as handle:
        rows = csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        return [row["sentence"] for _, row in zip(range(count), rows)]


def export_baseline(model_dir: str, folder: str) -> dict[str, str]:
    """A BERT or RoBERTa encoder through the same exporter settings and quantiser as `export_folder`."""
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    inputs = {"input_ids": torch.ones(2, 8, dtype=torch.long), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    inputs["attention_mask"][1, 4:] = 0
    if "token_type_ids" in input_names(model.config):
        inputs["token_type_ids"] = torch.zeros(2, 8, dtype=torch.long)
    axes = {0: torch.export.Dim("batch"), 1: torch.export.Dim("sequence", max=model.config.max_position_embeddings)}
    paths = {"fp32": os.path.join(folder, ONNX_FILE), "int8": os.path.join(folder, INT8_FILE)}
    torch.onnx.export(
        _OnnxWrapper(model, ["last_hidden_state"]).eval(),
        tuple(inputs.values()),
        paths["fp32"],
        input_names=list(inputs),
        output_names=["last_hidden_state"],
        dynamic_shapes={name: axes for name in inputs},
        dynamo=True,
        external_data=True,
        verbose=False,
    )
    quantize_int8(paths["fp32"], paths["int8"])
    return paths


def mean_pooled(session, batch) -> torch.Tensor:
    hidden = run_onnx(session, **batch)["last_hidden_state"]
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(1) / mask.sum(1)


def summary(values: list[float]) -> str:
    return f"min {min(values):.4f}, median {statistics.median(values):.4f}, max {max(values):.4f}"


def run(model_dir: str, sentences: list[str], log=print) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "right"  # a Linformer takes right padding only; the others take either
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as handle:
            ours = json.load(handle).get("model_type") in HEADS_BY_MODEL_TYPE
        paths = export_folder(model_dir, folder, head="AutoModel") if ours else export_baseline(model_dir, folder)
        fp32, int8 = onnx_session(paths["fp32"]), onnx_session(paths["int8"])

        def embed(session, texts):
            return mean_pooled(session, dict(tokenizer(texts, truncation=True, padding=True, return_tensors="pt")))

        alone = {p: torch.cat([embed(s, [text]) for text in sentences]) for p, s in (("fp32", fp32), ("int8", int8))}
        batched = {p: embed(s, sentences) for p, s in (("fp32", fp32), ("int8", int8))}
        longest = sorted(sentences, key=len)[-2:]
        in_three = {
            p: torch.cat([embed(s, [text, *longest])[:1] for text in sentences])
            for p, s in (("fp32", fp32), ("int8", int8))
        }
    result = {
        "model_dir": os.path.basename(os.path.normpath(model_dir)),
        "sentences": len(sentences),
        "int8_vs_fp32_alone": F.cosine_similarity(alone["int8"], alone["fp32"], dim=-1).tolist(),
        "int8_vs_fp32_batched": F.cosine_similarity(batched["int8"], batched["fp32"], dim=-1).tolist(),
        "int8_alone_vs_in_three": F.cosine_similarity(alone["int8"], in_three["int8"], dim=-1).tolist(),
        "fp32_alone_vs_in_three": F.cosine_similarity(alone["fp32"], in_three["fp32"], dim=-1).tolist(),
    }
    log(f"{result['model_dir']}: {len(sentences)} sentences, mean-pooled embeddings, cosines")
    for key in ("int8_vs_fp32_alone", "int8_vs_fp32_batched", "int8_alone_vs_in_three", "fp32_alone_vs_in_three"):
        log(f"  {key}: {summary(result[key])}")
    return result


def main(argv: list[str] | None = None) -> dict:
    from linformer_hf.training.errors import positive_int

    parser = ArgumentParser(description=__doc__)
    parser.add_argument("model_dir", help="a saved Linformer or Performer (or BERT/RoBERTa) folder with its tokenizer")
    parser.add_argument("--sentences", default="../shared/data/sst2/dev.tsv", help="a TSV with a sentence column")
    parser.add_argument("--count", type=positive_int, default=12, help="how many of its first sentences")
    args = parser.parse_args(argv)
    if not os.path.isfile(args.sentences):
        parser.error(f"--sentences {args.sentences} is not a file: give the SST-2 dev.tsv (or another GLUE TSV).")
    if not os.path.isfile(os.path.join(args.model_dir, "config.json")):
        parser.error(f"{args.model_dir} has no config.json: give a folder written by save_pretrained.")
    return run(args.model_dir, read_sentences(args.sentences, args.count))


if __name__ == "__main__":
    main()
