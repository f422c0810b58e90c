#!/usr/bin/env python
"""Show what a saved model folder does: for a masked-LM (a pretraining output) its validation perplexity and fill-mask
predictions; for a sequence classifier (a fine-tuning output) its predicted labels.

The head is the one the folder was saved as (config.json's `architectures`). Guesses from a head the folder has no
trained weights for are refused (a classifier or a bare encoder loaded as a masked LM would fill masks from random
weights), as is a truncated or corrupt weights file: one `error:` line, naming the folder's head or the file.

python scripts/show_model.py outputs/demo/pretrain/final --text "Returns a <mask> of the values."
python scripts/show_model.py outputs/sst2/best --text "a gripping , funny film"
"""

import json
import os
import sys

from transformers import AutoConfig, AutoModelForMaskedLM, AutoModelForSequenceClassification, AutoTokenizer, pipeline

import linformer_hf  # noqa: F401  (registers Linformer with the Auto classes)
from linformer_hf import LinformerConfig, PerformerConfig
from linformer_hf.cli import ArgumentParser
from linformer_hf.loading import check_holds_weights, check_weight_files
from linformer_hf.models.lengths import max_input_length
from linformer_hf.registration import TOKENIZER_FILES
from linformer_hf.training.config import ConfigError
from linformer_hf.training.errors import USER_ERRORS, positive_int, report

# How the heads shown here end their class names (BertForPreTraining's MLM head loads into BertForMaskedLM).
MASKED_LM_HEADS = ("ForMaskedLM", "ForPreTraining")
CLASSIFIER_HEADS = ("ForSequenceClassification",)
CLASSIFIER_TEXTS = ["a gripping , funny and moving film", "the plot is thin and the acting is flat"]


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument(
        "--text",
        action="append",
        default=None,
        help="text with <mask> for a masked LM, any text for a classifier (repeatable); default: two sentences",
    )
    parser.add_argument("--top_k", type=positive_int, default=5)
    args = parser.parse_args(argv)
    try:
        show(args)
    except (*USER_ERRORS, OSError, ValueError) as err:  # e.g. a text longer than the model's n
        return report(err)
    return 0


def show(args):
    if not os.path.isfile(os.path.join(args.model_dir, "config.json")):
        raise ConfigError(
            f"{args.model_dir} is not a saved model folder (no config.json): give the directory written by "
            "pretraining, e.g. outputs/demo/pretrain/final."
        )
    check_holds_weights(args.model_dir)  # e.g. an ONNX export folder: config.json and no weights
    check_weight_files(args.model_dir)  # a truncated or corrupt safetensors file, named, before transformers reads it
    if not any(os.path.exists(os.path.join(args.model_dir, name)) for name in TOKENIZER_FILES):
        # AutoTokenizer would build an empty tokenizer from the config alone: every guess and label would be noise
        raise ConfigError(
            f"{args.model_dir} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}): save the tokenizer the model "
            f"was trained with beside it (tokenizer.save_pretrained({args.model_dir!r}))."
        )
    head = (AutoConfig.from_pretrained(args.model_dir).architectures or [None])[0]
    if head is not None and head.endswith(CLASSIFIER_HEADS):
        return show_classifier(args, head)
    if head is not None and not head.endswith(MASKED_LM_HEADS):
        raise ConfigError(
            f"{args.model_dir} holds a {head} (config.json's architectures), which has no trained masked-LM head: "
            "fill-mask guesses would come from random weights. Give a pretrained masked-LM folder (e.g. "
            "outputs/demo/pretrain/final) or a fine-tuned classifier."
        )
    model, loading = AutoModelForMaskedLM.from_pretrained(args.model_dir, output_loading_info=True)
    untrained = sorted(key for key in loading["missing_keys"] if not key.startswith(model.base_model_prefix + "."))
    if untrained:  # e.g. a folder whose config names no head: the weights say whether an LM head was saved
        raise ConfigError(
            f"{args.model_dir} has no trained masked-LM head (no weights for {', '.join(untrained[:3])}"
            f"{', ...' if len(untrained) > 3 else ''}): fill-mask guesses would come from random weights. Give a "
            "pretrained masked-LM folder (e.g. outputs/demo/pretrain/final)."
        )
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    no_mask = [text for text in args.text or [] if "<mask>" not in text and tokenizer.mask_token not in text]
    if no_mask:
        raise ConfigError(f"--text {no_mask[0]!r} has no <mask>: put <mask> where the model should fill in a word.")
    describe(model, args.model_dir, head)
    results = os.path.join(args.model_dir, "eval_results.json")
    if os.path.isfile(results):
        with open(results) as fh:
            r = json.load(fh)
        print(describe_results(r))
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=args.top_k)
    mask = tokenizer.mask_token
    texts = args.text or [
        f"Return a copy of the array with the given {mask}.",
        f"This function is deprecated and will be {mask} in a future version.",
    ]
    for text in texts:
        text = text.replace("<mask>", mask)
        preds = fill(text)
        print(f"fill-mask: {text}")
        for p in preds:
            print(f"    {p['score']:.3f}  {p['token_str'].strip()!r}")


def describe_results(r: dict) -> str:
    """eval_results.json in words: pretraining's figures, or every key of another writer's file (transformers'
    `Trainer.save_metrics` writes one without a step) or of one with a non-finite figure (null)."""
    unigram = ("mask_input_perplexity", "unigram_mask_input_perplexity", "perplexity_over_unigram")
    required = ("eval_loss", "perplexity", "step") + (unigram if "unigram_mask_input_perplexity" in r else ())
    if not all(isinstance(r.get(key), (int, float)) for key in required):
        return f"validation (eval_results.json): {', '.join(f'{key} = {value}' for key, value in r.items())}"
    text = f"validation MLM loss {r['eval_loss']:.4f}, perplexity {r['perplexity']:.2f} (step {r['step']})"
    if "unigram_mask_input_perplexity" in r:  # written by pretraining runs on map-style data
        text += (
            f"\nat the scored tokens whose input is <mask> (80% of them; the other 20% show a random or the true "
            f"token): perplexity {r['mask_input_perplexity']:.2f}, unigram baseline (the training set's token "
            f"frequencies) {r['unigram_mask_input_perplexity']:.2f}, model / unigram = "
            f"{r['perplexity_over_unigram']:.3f}"
        )
    return text


def show_classifier(args, head: str):
    """A classifier's label scores for each text (a classifier has no LM head: no fill-mask guesses)."""
    model = AutoModelForSequenceClassification.from_pretrained(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    describe(model, args.model_dir, head)
    print("a classifier has no masked-LM head, so no fill-mask guesses: its predicted labels instead")
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer, top_k=None)
    for text in args.text or CLASSIFIER_TEXTS:
        scores = classify([text])[0]
        print(f"classify: {text}")
        for score in scores:
            print(f"    {score['score']:.3f}  {score['label']}")


def describe(model, model_dir: str, head: str | None):
    n_params = sum(p.numel() for p in model.parameters())
    saved_as = f"saved as {head}" if head else "config.json names no head"
    config = model.config
    if config.model_type == LinformerConfig.model_type:
        shape = f"n = {config.max_sequence_length}, k = {config.projected_length}"
    elif config.model_type == PerformerConfig.model_type:  # no n or k: FAVOR+ has m features, the positions a limit
        features = config.num_random_features
        shape = f"m = {features} random features per head, maximum input length {max_input_length(config)}"
    else:
        shape = f"maximum input length {max_input_length(config)}"
    print(f"loaded {type(model).__name__} from {model_dir} ({saved_as}): {n_params / 1e6:.2f} M parameters, {shape}")


if __name__ == "__main__":
    sys.exit(main())
