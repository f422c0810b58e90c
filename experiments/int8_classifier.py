"""Does int8 dynamic quantisation change a fine-tuned Linformer classifier's accuracy? A small, honest measurement.

Trains a byte-level BPE tokenizer and a small Linformer classifier from scratch on SST-2 (local GLUE files, no
pretraining), for a few hundred steps, then scores the SST-2 dev set with the fp32 model and with the same model
after `torch.ao.quantization.quantize_dynamic` (every `nn.Linear` in int8, as `experiments.long_document` does). It
reports both accuracies, how many dev predictions flip, and the cosine of the logits. A few minutes on 2 CPU cores:

    python -m experiments.int8_classifier --data_dir ../shared/data/sst2
"""

from __future__ import annotations

import csv
import os
import tempfile
import time

import torch

from linformer_hf.cli import ArgumentParser
from linformer_hf.models.configuration_linformer import LinformerConfig
from linformer_hf.models.modeling_linformer import LinformerForSequenceClassification

from .long_document import quantize_int8


def read_sst2(path: str) -> tuple[list[str], list[int]]:
    """(sentences, labels) of a GLUE SST-2 TSV (header `sentence<TAB>label`, no quoting)."""
    with open(path, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [row["sentence"] for row in rows], [int(row["label"]) for row in rows]


@torch.no_grad()
def predict(model, tokenizer, sentences: list[str], max_length: int, batch_size: int = 128) -> torch.Tensor:
    """Logits (N, labels) of `sentences`, in batches."""
    logits = []
    for start in range(0, len(sentences), batch_size):
        batch = tokenizer(
            sentences[start : start + batch_size],
            truncation=True,
            max_length=max_length,
            padding="max_length",
            return_tensors="pt",
        )
        logits.append(model(**batch).logits)
    return torch.cat(logits)


def run(data_dir: str, steps: int = 400, batch_size: int = 32, max_length: int = 64, seed: int = 0, log=print) -> dict:
    from linformer_hf.training.tokenizer import train_bpe_tokenizer

    torch.manual_seed(seed)
    train_sentences, train_labels = read_sst2(os.path.join(data_dir, "train.tsv"))
    dev_sentences, dev_labels = read_sst2(os.path.join(data_dir, "dev.tsv"))
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = train_bpe_tokenizer(train_sentences, tmp, vocab_size=4096, model_max_length=max_length)
    log(f"tokenizer: {len(tokenizer)} tokens, {type(tokenizer).__name__}")
    config = LinformerConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        max_sequence_length=max_length,
        projected_length=max_length // 4,
        num_labels=2,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LinformerForSequenceClassification(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 40))
    order = torch.randperm(len(train_sentences))
    start = time.perf_counter()
    model.train()
    for step in range(steps):
        rows = order[(step * batch_size) % len(order) :][:batch_size].tolist()
        sentences = [train_sentences[i] for i in rows]
        batch = tokenizer(sentences, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        loss = model(**batch, labels=torch.tensor([train_labels[i] for i in rows])).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if (step + 1) % 50 == 0:
            log(f"step {step + 1}: loss {loss.item():.3f} ({time.perf_counter() - start:.0f} s)")
    model.eval()
    labels = torch.tensor(dev_labels)
    fp32_logits = predict(model, tokenizer, dev_sentences, max_length)
    int8_logits = predict(quantize_int8(model), tokenizer, dev_sentences, max_length)
    fp32_pred, int8_pred = fp32_logits.argmax(-1), int8_logits.argmax(-1)
    result = {
        "steps": steps,
        "dev_examples": len(dev_labels),
        "fp32_accuracy": (fp32_pred == labels).float().mean().item(),
        "int8_accuracy": (int8_pred == labels).float().mean().item(),
        "flipped_predictions": int((fp32_pred != int8_pred).sum()),
        "logits_cosine": torch.nn.functional.cosine_similarity(
            fp32_logits.flatten().double(), int8_logits.flatten().double(), dim=0
        ).item(),
    }
    log(
        f"SST-2 dev ({result['dev_examples']} sentences) after {steps} steps: fp32 accuracy "
        f"{result['fp32_accuracy']:.4f}, int8 {result['int8_accuracy']:.4f} "
        f"({result['int8_accuracy'] - result['fp32_accuracy']:+.4f}); {result['flipped_predictions']} predictions "
        f"flip; logits cosine {result['logits_cosine']:.5f}"
    )
    return result


def main(argv: list[str] | None = None) -> dict:
    from linformer_hf.training.errors import positive_int

    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--data_dir", default="../shared/data/sst2", help="folder with train.tsv and dev.tsv")
    parser.add_argument("--steps", type=positive_int, default=400)
    parser.add_argument("--batch_size", type=positive_int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=1,
        help="intra-op threads (1: a tiny model gains nothing from more, and on "
        "shared cores a second thread mostly waits at every op's barrier)",
    )
    args = parser.parse_args(argv)
    missing = [name for name in ("train.tsv", "dev.tsv") if not os.path.isfile(os.path.join(args.data_dir, name))]
    if missing:  # before the tokenizer and the training
        parser.error(f"--data_dir {args.data_dir} has no {' or '.join(missing)}: give the SST-2 folder.")
    torch.set_num_threads(args.threads)
    return run(args.data_dir, args.steps, args.batch_size, seed=args.seed)


if __name__ == "__main__":
    main()
