#!/usr/bin/env python
"""The paper's Figure 1 for any encoder: normalised cumulative singular values of every head's attention matrix P.

Writes spectrum_curves.csv, spectrum_at_index.csv, spectrum_summary.json, spectrum_curves.png and
spectrum_heatmap.png to OUTPUT_DIR. See linformer_hf.research.spectrum.

Example:
    python scripts/analyze_spectrum.py roberta-base ../shared/data/wikitext-2/valid.txt outputs/spectrum-roberta \
        --seq_len 512 --index 128 --max_inputs 32
"""

import argparse

from linformer_hf.research.spectrum import analyze


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="RoBERTa or Linformer: a local directory or a Hub name")
    parser.add_argument("text", help="a .txt file (one text per line) or a .tsv/.csv file (see --text_column)")
    parser.add_argument("output_dir")
    parser.add_argument("--seq_len", type=int, help="tokens per input (default: the model's maximum, e.g. 512)")
    parser.add_argument("--max_inputs", type=int, default=32, help="number of packed inputs to average over")
    parser.add_argument(
        "--index", type=int, help="singular value index of the heatmap, from 1 (default: r / 4; the paper uses 128)"
    )
    parser.add_argument("--text_column", help="column of a .tsv/.csv (default: sentence, text or review)")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--title", help="plot title (default: the model name)")
    parser.add_argument("--trust_remote_code", action="store_true", help="for a Linformer folder without the package")
    args = parser.parse_args(argv)

    spectrum, paths = analyze(
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
    )
    index = args.index or max(1, spectrum.rank // 4)
    values = spectrum.at_index(index)
    print(f"{spectrum.model_name}: {spectrum.num_inputs} inputs of {spectrum.seq_len} tokens, r = {spectrum.rank}")
    for layer, value in enumerate(values.mean(-1).tolist()):
        print(f"  layer {layer + 1}: mean over heads of cumulative singular value at {index} = {value:.3f}")
    for path in paths.values():
        print(f"  wrote {path}")


if __name__ == "__main__":
    main()
