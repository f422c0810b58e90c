#!/usr/bin/env python
"""Load a pretrained model dir with AutoModelForMaskedLM, print its validation perplexity and fill-mask predictions.

python scripts/show_model.py outputs/demo/pretrain/final --text "Returns a <mask> of the values."
"""

import json
import os
import sys

from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

import linformer_hf  # noqa: F401  (registers Linformer with the Auto classes)
from linformer_hf.cli import ArgumentParser
from linformer_hf.training.config import ConfigError
from linformer_hf.training.errors import USER_ERRORS, positive_int, report


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("model_dir")
    parser.add_argument(
        "--text",
        action="append",
        default=None,
        help="text with <mask> (repeatable); default: two sentences in the style of the docs corpus",
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
    model = AutoModelForMaskedLM.from_pretrained(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    no_mask = [text for text in args.text or [] if "<mask>" not in text and tokenizer.mask_token not in text]
    if no_mask:
        raise ConfigError(f"--text {no_mask[0]!r} has no <mask>: put <mask> where the model should fill in a word.")
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"loaded {type(model).__name__} from {args.model_dir}: {n_params / 1e6:.2f} M parameters, "
        f"n = {getattr(model.config, 'max_sequence_length', None)}, "
        f"k = {getattr(model.config, 'projected_length', None)}"
    )
    results = os.path.join(args.model_dir, "eval_results.json")
    if os.path.isfile(results):
        with open(results) as fh:
            r = json.load(fh)
        print(f"validation MLM loss {r['eval_loss']:.4f}, perplexity {r['perplexity']:.2f} (step {r['step']})")
        if "unigram_mask_input_perplexity" in r:  # written by pretraining runs on map-style data
            print(
                f"at the scored tokens whose input is <mask> (80% of them; the other 20% show a random or the true "
                f"token): perplexity {r['mask_input_perplexity']:.2f}, unigram baseline (the training set's token "
                f"frequencies) {r['unigram_mask_input_perplexity']:.2f}, model / unigram = "
                f"{r['perplexity_over_unigram']:.3f}"
            )
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


if __name__ == "__main__":
    sys.exit(main())
