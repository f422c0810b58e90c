#!/usr/bin/env python
"""Warm-start a Linformer (or, with --family performer, a Performer) from a RoBERTa or BERT checkpoint (local dir
or Hub name); see linformer_hf.conversion.

Examples:
    python scripts/convert_to_linformer.py roberta-base outputs/linformer-base-n1024-k256 \
        --max_sequence_length 1024 --projected_length 256 --sharing key_value
    python scripts/convert_to_linformer.py sentence-transformers/all-MiniLM-L6-v2 outputs/minilm-linformer-k128 \
        --projected_length 128 --sharing key_value
    python scripts/convert_to_linformer.py roberta-base outputs/performer-base-m256 --family performer \
        --num_random_features 256 --kernel softmax

Options are grouped by family; an option of the other family is an error, not silently ignored. A non-empty
output_dir (an earlier model) is refused unless --overwrite.
"""

import os
import sys

from linformer_hf import PROJECTION_KINDS, SHARING_MODES
from linformer_hf.cli import ArgumentParser
from linformer_hf.conversion import PROJECTION_INITS, TARGET_FAMILIES, check_projection_init, convert_checkpoint
from linformer_hf.models.configuration_performer import KERNELS, ROW_NORMS
from linformer_hf.outputs import sigterm_unwinds
from linformer_hf.training.config import ConfigError
from linformer_hf.training.errors import (
    LOCAL_MODEL,
    USER_ERRORS,
    hub_unreachable,
    hub_unreachable_error,
    report,
)
from linformer_hf.training.validation import check_model_source


def parse_projected_length(text: str):
    """'128' -> 128; '256,256,128,128' -> one k per layer."""
    values = [int(part) for part in text.split(",")]
    return values[0] if len(values) == 1 else values


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "source", help="RoBERTa or BERT checkpoint: a local directory or a Hub name such as roberta-base"
    )
    parser.add_argument("output_dir", help="where to save the model (weights, config, modeling files, tokenizer)")
    parser.add_argument("--family", choices=sorted(TARGET_FAMILIES), default="linformer", help="the target family")
    parser.add_argument(
        "--architecture",
        choices=sorted({name for family in TARGET_FAMILIES.values() for name in family.architecture_map}),
        help="head to load (default: the first of the checkpoint's config.architectures)",
    )
    parser.add_argument(
        "--max_sequence_length",
        type=int,
        help="n (default: the source's own number of positions, 512 for roberta-base); for Performer, the length "
        "the position table and tokenizer are set up for",
    )
    linformer = parser.add_argument_group("Linformer (--family linformer)")
    linformer.add_argument(
        "--projected_length",
        type=parse_projected_length,
        help="k, or a comma-separated k per layer (default: n / 4, fairseq's default)",
    )
    linformer.add_argument("--sharing", choices=SHARING_MODES, default="headwise")
    linformer.add_argument("--projection", choices=PROJECTION_KINDS, default="linear")
    linformer.add_argument(
        "--projection_init",
        default="neighbour_average",
        help=f"one of {PROJECTION_INITS}. neighbour_average: E averages contiguous bins of n/k "
        "positions (the identity when k = n); strided: E sums positions k apart (exact full attention on inputs "
        "of at most k tokens); random: Linformer's own N(0, 1/n)",
    )
    linformer.add_argument(
        "--projection_noise_std",
        type=float,
        default=0.0,
        help="add N(0, std^2) noise to the initialised E/F (default: none)",
    )
    linformer.add_argument("--freeze_projections", action="store_true")
    performer = parser.add_argument_group("Performer (--family performer)")
    performer.add_argument("--num_random_features", type=int, help="m, random features per head (default 256)")
    performer.add_argument("--kernel", choices=KERNELS, help="softmax (default): estimates the source's attention")
    performer.add_argument("--iid_features", action="store_true", help="i.i.d. instead of orthogonal features")
    performer.add_argument("--orthogonal_row_norms", choices=ROW_NORMS)
    performer.add_argument("--feature_redraw_interval", type=int, help="redraw every N training calls (default 1000)")
    performer.add_argument("--freeze_features", action="store_true", help="never redraw the features")
    performer.add_argument("--kernel_epsilon", type=float, help="default: the kernel's (1e-6 softmax, 1e-3 relu)")
    parser.add_argument("--no_tokenizer", action="store_true", help="do not copy the tokenizer")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier conversion in output_dir (the whole folder; another model's folder is refused; "
        "into a folder without a model, add it)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random projection init and of the projection noise (Linformer) or of the features",
    )
    args = parser.parse_args(argv)
    try:
        check_projection_init(args.projection_init)
        family_settings(args, parser)
    except ValueError as error:
        parser.error(str(error))
    try:
        check_model_source(args.source, "source")
        if os.path.isdir(args.source) and not os.path.isfile(os.path.join(args.source, "config.json")):
            raise ConfigError(f"source={args.source} has no config.json: not a saved checkpoint directory.")
        with sigterm_unwinds():  # a `kill` removes the staging folder, as Ctrl-C does
            convert(args, parser)
    except (*USER_ERRORS, OSError, ValueError) as err:  # conversion reports bad input as ValueError / OSError
        if hub_unreachable(err):  # transformers' message names neither the model nor the way out
            err = hub_unreachable_error("source", args.source, err, LOCAL_MODEL)
        return report(err)
    return 0


# Each family's flags (argparse dests). A Performer flag is named as the PerformerConfig field it sets, except
# --iid_features (orthogonal_features = not iid).
FAMILY_FLAGS = {
    "linformer": (
        "projected_length",
        "sharing",
        "projection",
        "projection_init",
        "projection_noise_std",
        "freeze_projections",
    ),
    "performer": (
        "num_random_features",
        "kernel",
        "iid_features",
        "orthogonal_row_norms",
        "feature_redraw_interval",
        "freeze_features",
        "kernel_epsilon",
    ),
}


def family_settings(args, parser) -> dict:
    """The chosen family's settings from the flags; a flag of the other family given a value is an error."""
    given = {
        family: [dest for dest in dests if getattr(args, dest) != parser.get_default(dest)]
        for family, dests in FAMILY_FLAGS.items()
    }
    foreign = sorted(f"--{dest}" for family, dests in given.items() if family != args.family for dest in dests)
    if foreign:
        raise ValueError(f"{foreign} do not apply to --family {args.family}.")
    if args.family == "linformer":  # every Linformer setting, defaults included (the script's defaults)
        return {dest: getattr(args, dest) for dest in FAMILY_FLAGS["linformer"]}
    settings = {dest: getattr(args, dest) for dest in given["performer"]}  # the rest: PerformerConfig's defaults
    if settings.pop("iid_features", False):
        settings["orthogonal_features"] = False
    return settings


def convert(args, parser):
    convert_checkpoint(
        args.source,
        args.output_dir,
        architecture=args.architecture,
        copy_tokenizer=not args.no_tokenizer,
        target=args.family,
        overwrite=args.overwrite,
        max_sequence_length=args.max_sequence_length,
        seed=args.seed,
        **family_settings(args, parser),
    )


if __name__ == "__main__":
    sys.exit(main())
