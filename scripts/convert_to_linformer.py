#!/usr/bin/env python
"""Warm-start a Linformer from a RoBERTa or BERT checkpoint (local dir or Hub name); see linformer_hf.conversion.

Examples:
    python scripts/convert_to_linformer.py roberta-base outputs/linformer-base-n1024-k256 \
        --max_sequence_length 1024 --projected_length 256 --sharing key_value
    python scripts/convert_to_linformer.py sentence-transformers/all-MiniLM-L6-v2 outputs/minilm-linformer-k128 \
        --projected_length 128 --sharing key_value
"""

import argparse
import os
import sys

from linformer_hf import PROJECTION_KINDS, SHARING_MODES
from linformer_hf.conversion import ARCHITECTURE_MAP, PROJECTION_INITS, check_projection_init, convert_checkpoint
from linformer_hf.training.config import ConfigError
from linformer_hf.training.errors import USER_ERRORS, report
from linformer_hf.training.validation import check_model_source


def parse_projected_length(text: str):
    """'128' -> 128; '256,256,128,128' -> one k per layer."""
    values = [int(part) for part in text.split(",")]
    return values[0] if len(values) == 1 else values


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "source", help="RoBERTa or BERT checkpoint: a local directory or a Hub name such as roberta-base"
    )
    parser.add_argument("output_dir", help="where to save the Linformer (weights, config, modeling files, tokenizer)")
    parser.add_argument(
        "--architecture",
        choices=sorted(ARCHITECTURE_MAP),
        help="head to load (default: the first of the checkpoint's config.architectures)",
    )
    parser.add_argument(
        "--max_sequence_length",
        type=int,
        help="n (default: the source's own number of positions, 512 for roberta-base)",
    )
    parser.add_argument(
        "--projected_length",
        type=parse_projected_length,
        help="k, or a comma-separated k per layer (default: n / 4, fairseq's default)",
    )
    parser.add_argument("--sharing", choices=SHARING_MODES, default="headwise")
    parser.add_argument("--projection", choices=PROJECTION_KINDS, default="linear")
    parser.add_argument(
        "--projection_init",
        default="neighbour_average",
        help=f"one of {PROJECTION_INITS}. neighbour_average: E averages contiguous bins of n/k "
        "positions (the identity when k = n); random: Linformer's own N(0, 1/n)",
    )
    parser.add_argument(
        "--projection_noise_std",
        type=float,
        default=0.0,
        help="add N(0, std^2) noise to the initialised E/F (default: none)",
    )
    parser.add_argument("--freeze_projections", action="store_true")
    parser.add_argument("--no_tokenizer", action="store_true", help="do not copy the tokenizer")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random projection init and of the projection noise"
    )
    args = parser.parse_args(argv)
    try:
        check_projection_init(args.projection_init)
    except ValueError as error:
        parser.error(str(error))
    try:
        check_model_source(args.source, "source")
        if os.path.isdir(args.source) and not os.path.isfile(os.path.join(args.source, "config.json")):
            raise ConfigError(f"source={args.source} has no config.json: not a saved checkpoint directory.")
        convert(args)
    except (*USER_ERRORS, OSError, ValueError) as err:  # conversion reports bad input as ValueError / OSError
        return report(err)
    return 0


def convert(args):
    convert_checkpoint(
        args.source,
        args.output_dir,
        architecture=args.architecture,
        copy_tokenizer=not args.no_tokenizer,
        max_sequence_length=args.max_sequence_length,
        projected_length=args.projected_length,
        sharing=args.sharing,
        projection=args.projection,
        projection_init=args.projection_init,
        projection_noise_std=args.projection_noise_std,
        freeze_projections=args.freeze_projections,
        seed=args.seed,
    )


if __name__ == "__main__":
    sys.exit(main())
