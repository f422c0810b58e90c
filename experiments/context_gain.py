"""Does reading more pay? The same masked tokens of held-out documents, scored by masked LMs that read different
amounts of context (the measurement of Longformer's Table 5).

Blocks of ``--block_size`` tokens (default: the longest n among the models) are cut from the held-out documents of a
pretraining recipe (its data.validation_datasets or validation_files, packed as pretraining packs them) and masked
once, with pretraining's seeded evaluation masking. Each model reads every block in consecutive windows of its own
n: a RoBERTa with n = 512 predicts each masked token from its 512-token window, a Linformer with n = 4,096 from the
whole block. Every model scores exactly the same masked tokens. Written: perplexity over all of them and over those
whose input is ``<mask>`` (the ones only the other tokens can tell), overall and by position in the block (buckets of
``--bucket`` tokens), per model, as CSV and JSON, with the time each model took. ``--windows 16 128`` also scores
each model reading shorter windows: how much it uses its context at all.

    python -m experiments.context_gain --recipe configs/pretrain/books.yaml \\
        --models outputs/pretrain/books-roberta/final outputs/pretrain/books-n4096/final \\
        --max_blocks 32 --output_dir outputs/context_gain/books

Any other ``--section.key value`` overrides the recipe (e.g. ``--data.validation_datasets ...``). The models must
share the tokenizer (the first model's folder holds it, or ``--tokenizer``).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from linformer_hf.cli import ArgumentParser
from linformer_hf.models.lengths import max_input_length
from linformer_hf.outputs import (
    check_output_dir,
    discard_staging,
    publish_folder,
    publish_new_folder,
    sigterm_unwinds,
    unique_staging_folder,
    write_json_atomic,
)


def masked_lm_head(model):
    """The module that turns hidden states into vocabulary logits: RoBERTa's and this package's ``lm_head``, BERT's
    ``cls``."""
    head = getattr(model, "lm_head", None) or getattr(model, "cls", None)
    if head is None:
        raise ValueError(f"{type(model).__name__} has no masked-LM head (lm_head or cls): give masked-LM folders.")
    return head


@torch.no_grad()
def score_blocks(
    model, batches, window: int, bucket: int, block_size: int, mask_token_id: int | None = None
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Summed cross-entropy and count of the masked tokens of ``batches`` (input_ids, attention_mask, labels of
    blocks), by position bucket in the block, with ``model`` reading each block in consecutive windows of
    ``window`` tokens. Returns {"all": (sums, counts)}, each (number of buckets,), and with ``mask_token_id`` also
    "mask_input": the same over the scored tokens whose input is ``<mask>`` (those a model can predict only from the
    other tokens)."""
    model.eval()
    head, encoder = masked_lm_head(model), model.base_model
    buckets = math.ceil(block_size / bucket)
    kinds = ["all"] + (["mask_input"] if mask_token_id is not None else [])
    totals = {
        kind: (torch.zeros(buckets, dtype=torch.float64), torch.zeros(buckets, dtype=torch.long)) for kind in kinds
    }
    for batch in batches:
        length = batch["input_ids"].shape[1]
        for start in range(0, length, window):
            piece = {key: batch[key][:, start : start + window] for key in ("input_ids", "attention_mask")}
            labels = batch["labels"][:, start : start + window]  # (batch, w)
            scored = labels.ne(-100)
            if not scored.any():
                continue
            hidden = encoder(**piece).last_hidden_state[scored]  # (scored tokens, hidden)
            losses = F.cross_entropy(head(hidden).float(), labels[scored], reduction="none")
            buckets_of = ((start + torch.arange(labels.shape[1])).expand_as(labels)[scored]) // bucket
            for kind in kinds:
                keep = torch.ones_like(losses, dtype=torch.bool)
                if kind == "mask_input":
                    keep = piece["input_ids"][scored].eq(mask_token_id)
                sums, counts = totals[kind]
                sums.index_add_(0, buckets_of[keep], losses[keep].double())
                counts.index_add_(0, buckets_of[keep], torch.ones_like(buckets_of[keep]))
    return totals


def check_same_tokenizer(tokenizer, model_dirs: list[str]) -> None:
    """Every model folder that carries a tokenizer carries this one: the same ids mean the same tokens."""
    from transformers import AutoTokenizer

    vocabulary = tokenizer.get_vocab()
    for folder in model_dirs:
        try:
            other = AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError):
            continue
        if other.get_vocab() != vocabulary:
            raise ValueError(
                f"{folder} carries another tokenizer than the scoring one: its token ids mean other tokens."
            )


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

    import linformer_hf  # noqa: F401  (registers the model families)
    from linformer_hf.training.config import PretrainRecipe, load_recipe
    from linformer_hf.training.data import build_mlm_collator, prepare_held_out_blocks
    from linformer_hf.training.errors import USER_ERRORS, positive_int, report
    from linformer_hf.training.validation import check_model_source

    from .long_input import naming_the_hub_model

    parser = ArgumentParser(
        prog="python -m experiments.context_gain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--recipe", default="configs/pretrain/books.yaml", help="its data section names the documents")
    parser.add_argument("--models", nargs="+", required=True, help="masked-LM folders (RoBERTa, BERT, this package's)")
    parser.add_argument("--tokenizer", help="default: the first model's folder")
    parser.add_argument("--block_size", type=positive_int, help="default: the longest n among the models")
    parser.add_argument("--max_blocks", type=positive_int, default=16, help="held-out blocks scored (the first ones)")
    parser.add_argument("--bucket", type=positive_int, default=512, help="positions in the block per reported bucket")
    parser.add_argument(
        "--windows",
        type=positive_int,
        nargs="+",
        help="also score each model reading windows of these sizes (up to its n): how much a model uses context "
        "(a model whose perplexity does not fall as its window grows reads its context no better than none)",
    )
    parser.add_argument("--batch_size", type=positive_int, default=1)
    parser.add_argument("--seed", type=int, default=1, help="the recipe's training.seed: masked as its evaluation")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite", action="store_true")
    args, overrides = parser.parse_known_args(argv)
    try:
        # before the output folder is made: a missing folder is named as one, not as transformers' malformed repo id
        for folder in args.models:
            check_model_source(folder, "--models")
            if not os.path.isfile(os.path.join(folder, "config.json")):
                raise FileNotFoundError(f"{folder} is not a saved model folder (no config.json).")
        if args.tokenizer:
            check_model_source(args.tokenizer, "--tokenizer")
        check_output_dir(args.output_dir, args.overwrite, create=False)  # made when the results are whole
        option, name = ("--tokenizer", args.tokenizer) if args.tokenizer else ("--models", args.models[0])
        with naming_the_hub_model(option, name):  # a Hub name offline: one line naming it
            tokenizer = AutoTokenizer.from_pretrained(name)
        check_same_tokenizer(tokenizer, args.models)
        lengths = [max_input_length(AutoConfig.from_pretrained(folder)) for folder in args.models]
        block_size = args.block_size or max(lengths)
        longest = min(max(lengths), block_size)  # the longest window any model reads
        too_long = [window for window in args.windows or [] if window > longest]
        if too_long:
            raise ValueError(
                f"--windows {too_long}: no model reads windows that long (the longest is {longest}, the smaller of the "
                f"models' n and the block size); give windows up to {longest}."
            )
        models = [AutoModelForMaskedLM.from_pretrained(folder) for folder in args.models]
        recipe = load_recipe(
            PretrainRecipe,
            args.recipe,
            overrides,
            extra={"data.block_size": block_size, "data.max_eval_blocks": args.max_blocks, "data.streaming": False},
        )
        blocks = prepare_held_out_blocks(recipe.data, tokenizer)
        if len(blocks) < args.max_blocks:
            print(f"scoring {len(blocks)} blocks: the held-out text holds no more (--max_blocks {args.max_blocks}).")
        collator = build_mlm_collator(tokenizer, recipe.data, seed=args.seed + 1)  # pretraining's evaluation masking
        batches = [
            collator([blocks[i] for i in range(start, min(start + args.batch_size, len(blocks)))])
            for start in range(0, len(blocks), args.batch_size)
        ]
    except (*USER_ERRORS, OSError, ValueError) as err:
        return report(err)

    rows, summary = [], {"block_size": block_size, "blocks": len(blocks), "bucket": args.bucket, "models": []}
    for folder, model, n in zip(args.models, models, lengths):
        windows = sorted({min(n, block_size), *(w for w in args.windows or [] if w < min(n, block_size))})
        for window in windows:
            started = time.perf_counter()
            scores = score_blocks(model, batches, window, args.bucket, block_size, tokenizer.mask_token_id)
            seconds = time.perf_counter() - started
            (sums, counts), (mask_sums, mask_counts) = scores["all"], scores["mask_input"]
            loss = (sums.sum() / counts.sum().clamp(min=1)).item()
            mask_loss = (mask_sums.sum() / mask_counts.sum().clamp(min=1)).item()
            summary["models"].append(
                {
                    "model": folder,
                    "n": n,
                    "window": window,
                    "masked_tokens": int(counts.sum()),
                    "loss": loss,
                    "perplexity": math.exp(loss),
                    "mask_input_tokens": int(mask_counts.sum()),
                    "mask_input_perplexity": math.exp(mask_loss),
                    "seconds": seconds,
                    "tokens_per_second": len(blocks) * block_size / seconds,
                }
            )
            for index in range(len(sums)):
                bucket_loss = sums[index].item() / max(counts[index].item(), 1)
                mask_bucket_loss = mask_sums[index].item() / max(mask_counts[index].item(), 1)
                rows.append(
                    {
                        "model": folder,
                        "window": window,
                        "bucket_start": index * args.bucket,
                        "bucket_end": min((index + 1) * args.bucket, block_size),
                        "masked_tokens": counts[index].item(),
                        "loss": bucket_loss,
                        "perplexity": math.exp(bucket_loss),
                        "mask_input_tokens": mask_counts[index].item(),
                        "mask_input_perplexity": math.exp(mask_bucket_loss),
                    }
                )
            print(
                f"{folder}: window {window}, perplexity {math.exp(loss):.3f}, at <mask> inputs "
                f"{math.exp(mask_loss):.3f} ({seconds:.1f} s)"
            )
    # Written whole in a folder of this run's own, then moved in: another run into the same --output_dir at once (both
    # found it empty) never has its results replaced by, or mixed with, these.
    with sigterm_unwinds():
        staging = unique_staging_folder(args.output_dir)
        try:
            with open(os.path.join(staging, "scores_by_position.csv"), "w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
            write_json_atomic(os.path.join(staging, "summary.json"), summary)
            if args.overwrite:
                publish_folder(staging, args.output_dir)  # the earlier run's two files replaced, others kept
            else:
                publish_new_folder(staging, args.output_dir)  # refused if another run filled it meanwhile
        except FileExistsError as err:
            return report(err)
        finally:
            discard_staging(staging)
    return 0


if __name__ == "__main__":
    sys.exit(main())
