#!/usr/bin/env python
"""The paper's Figure 1 for any encoder: normalised cumulative singular values of every head's attention matrix P.

Writes spectrum_curves.csv, spectrum_at_index.csv, spectrum_heads.csv, spectrum_summary.json, spectrum_curves.png,
spectrum_heatmap.png, spectrum_curves_per_head.png and (square P) spectrum_structure.png to OUTPUT_DIR. See
experiments.spectrum.

Examples:
    python -m experiments.analyze_spectrum roberta-base ../shared/data/wikitext-2/valid.txt outputs/spectrum-roberta \
        --seq_len 512 --index 128 --max_inputs 32
    python -m experiments.analyze_spectrum /tmp/minilm/all-MiniLM-L6-v2 ../shared/data/imdb/train.csv \
        outputs/spectrum-minilm --text_column text --windows documents --seq_len 512 --max_inputs 32
"""

import os
import sys

import torch

from experiments.spectrum import analyze
from linformer_hf.cli import ArgumentParser
from linformer_hf.outputs import check_output_dir
from linformer_hf.training.errors import USER_ERRORS, non_negative_int, positive_int, report
from linformer_hf.training.validation import check_model_source


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "model", help="an encoder folder or Hub name: RoBERTa, BERT layout (BERT, MiniLM) or a converted Linformer"
    )
    parser.add_argument("text", help="a .txt file (one text per line) or a .tsv/.csv file (see --text_column)")
    parser.add_argument("output_dir")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run's files in output_dir")
    parser.add_argument(
        "--seq_len", type=positive_int, help="tokens per input (default: the model's maximum, e.g. 512)"
    )
    parser.add_argument("--max_inputs", type=positive_int, default=32, help="number of packed inputs to average over")
    parser.add_argument(
        "--index",
        type=positive_int,
        help="singular value index of the heatmap, from 1 (default: r / 4; the paper uses 128)",
    )
    parser.add_argument("--text_column", help="column of a .tsv/.csv (default: sentence, text or review)")
    parser.add_argument(
        "--windows",
        choices=["packed", "documents"],
        default="packed",
        help="packed: texts joined and cut into full windows; documents: the first seq_len tokens of each text that "
        "long (e.g. IMDB reviews), so no window spans two texts",
    )
    parser.add_argument(
        "--report_indices", type=positive_int, nargs="+", help="indices for spectrum_heads.csv (default: r/8 r/4 r/2)"
    )
    parser.add_argument(
        "--locality_width",
        type=non_negative_int,
        default=2,
        help="the band |i - j| <= width counted as local attention",
    )
    parser.add_argument("--batch_size", type=positive_int, default=8)
    parser.add_argument("--title", help="plot title (default: the model name)")
    parser.add_argument("--trust_remote_code", action="store_true", help="for a Linformer folder without the package")
    parser.add_argument(
        "--num_threads",
        type=positive_int,
        default=1,
        help="torch CPU threads (default 1: on a shared CPU, two threads made the eigensolver up to 100x slower here)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.num_threads)
    try:
        spectrum, paths = run(args)
    except (*USER_ERRORS, OSError, ValueError) as err:
        return report(err)
    print_summary(spectrum, args.index or max(1, spectrum.rank // 4), paths)
    return 0


def run(args):
    """Check what can be checked before the model is loaded, then analyse."""
    check_model_source(args.model, "model")
    if not os.path.isfile(args.text):
        what = "a folder" if os.path.isdir(args.text) else "no such file"
        raise FileNotFoundError(f"text={args.text}: {what}; give a .txt, .tsv or .csv file.")
    check_output_dir(args.output_dir, args.overwrite)
    if args.overwrite:  # the earlier run's files only: one this run does not write (a square-P plot) must not stay
        for name in os.listdir(args.output_dir):
            if name.startswith("spectrum_") and name.endswith((".csv", ".json", ".png")):
                os.remove(os.path.join(args.output_dir, name))
    return analyze(
        args.model,
        args.text,
        args.output_dir,
        seq_len=args.seq_len,
        max_inputs=args.max_inputs,
        index=args.index,
        text_column=args.text_column,
        batch_size=args.batch_size,
        trust_remote_code=args.trust_remote_code,
        title=args.title,
        windows=args.windows,
        report_indices=args.report_indices,
        locality_width=args.locality_width,
    )


def print_summary(spectrum, index, paths):
    values = spectrum.at_index(index)
    print(
        f"{spectrum.model_name}: {spectrum.num_inputs} {spectrum.windows} inputs of {spectrum.seq_len} tokens, "
        f"r = {spectrum.rank}"
    )
    for layer, value in enumerate(values.mean(-1).tolist()):
        line = f"  layer {layer + 1}: cumulative singular value at {index}, mean over heads {value:.3f}"
        line += f" (min {values[layer].min():.3f})"
        if spectrum.local_mass is not None:
            line += f"; mass within {spectrum.locality_width} of the diagonal {spectrum.local_mass[layer].mean():.3f}"
            line += f", on special tokens {spectrum.special_mass[layer].mean():.3f}"
        print(line)
    for path in paths.values():
        print(f"  wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
