#!/usr/bin/env python
"""How far is FAVOR+ from the softmax attention of a pretrained encoder? The relative error, measured.

For every layer of MODEL (BERT, RoBERTa, Linformer, Performer: a local directory), the queries and keys it computes
on the first texts of TEXT, and the relative Frobenius error of the FAVOR+ attention matrix against the exact one
for every m, orthogonal and i.i.d. features, softmax and relu kernels. Writes OUTPUT (JSON) and prints the means
over layers. See experiments.approximation.

Example:
    python -m experiments.measure_favor_error outputs/roberta-base ../shared/data/wikitext-2/valid.txt \\
        outputs/favor-error.json --seq_len 128 --max_inputs 4
"""

import os
import sys

from experiments.approximation import measure_model
from linformer_hf.cli import ArgumentParser
from linformer_hf.outputs import check_output_file, write_json_atomic
from linformer_hf.training.errors import USER_ERRORS, positive_int, report
from linformer_hf.training.validation import check_model_source


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("model", help="a local model directory (with its tokenizer)")
    parser.add_argument("text", help="a .txt file (one text per line) or a .tsv/.csv file")
    parser.add_argument("output", help="the JSON file to write")
    parser.add_argument("--seq_len", type=positive_int, default=128)
    parser.add_argument("--max_inputs", type=positive_int, default=4)
    parser.add_argument("--ms", type=positive_int, nargs="+", default=[32, 64, 128, 256, 512, 1024], help="values of m")
    parser.add_argument("--seeds", type=positive_int, default=3, help="draws of the random features per setting")
    parser.add_argument("--trust_remote_code", action="store_true")
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier run's OUTPUT")
    args = parser.parse_args(argv)
    try:  # what can be checked before the model is loaded
        check_model_source(args.model, "model")
        if not os.path.isfile(args.text):
            raise FileNotFoundError(f"text={args.text}: no such file; give a .txt, .tsv or .csv file.")
        check_output_file(args.output, args.overwrite)
        result = measure_model(
            args.model, args.text, args.seq_len, args.max_inputs, tuple(args.ms), args.seeds, args.trust_remote_code
        )
    except (*USER_ERRORS, OSError, ValueError) as err:
        return report(err)
    write_json_atomic(args.output, result)
    for row in result["mean_over_layers"]:
        kind = "orthogonal" if row["orthogonal"] else "i.i.d."
        print(f"{row['kernel']:8s} {kind:10s} m={row['num_random_features']:5d}  error {row['mean']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
