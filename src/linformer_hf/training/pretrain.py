"""Masked-LM pretraining of a Linformer (or the RoBERTa baseline) on transformers' `Trainer`.

    accelerate launch --config_file configs/accelerate/cpu.yaml -m linformer_hf.training.pretrain \\
        --config configs/pretrain/demo.yaml
    accelerate launch --config_file configs/accelerate/v100x8_fp16.yaml -m linformer_hf.training.pretrain \\
        --config configs/pretrain/paper_bookwiki.yaml --training.output_dir outputs/linformer_k128

(`python -m linformer_hf.training.pretrain` runs it in one process; `scripts/pretrain.py` is the same command.)
Any recipe key can be overridden as --section.key value (e.g. --training.max_steps 1000, --data.block_size 256).
--resume_from_checkpoint takes a checkpoint dir or `latest` (the newest complete <output_dir>/checkpoint-N).
SIGTERM / SIGINT: the run finishes its update, writes a checkpoint and exits with the resumable status
(`errors.RESUMABLE_EXIT_CODE`; resume with `latest`);
a diverged run (non-finite losses, training.nonfinite_patience in a row, or a run that ends inside a streak of them or
with a non-finite final evaluation) stops with an `error:` line, status 2, and writes no final/.
"""

from __future__ import annotations

import argparse
import sys

from ..cli import ArgumentParser
from .config import PretrainRecipe, load_recipe
from .errors import USER_ERRORS, Preempted, report, report_preempted


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m linformer_hf.training.pretrain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="pretraining recipe YAML (configs/pretrain/*.yaml)")
    parser.add_argument("--resume_from_checkpoint", default=None, help="checkpoint dir, or 'latest'")
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")
    args, rest = parser.parse_known_args(argv)
    extra = {}
    if args.resume_from_checkpoint:
        extra["training.resume_from_checkpoint"] = args.resume_from_checkpoint
    try:
        recipe = load_recipe(PretrainRecipe, args.config, rest, extra)
        from .pretraining import run_pretraining

        run_pretraining(recipe, show_progress=not args.no_progress)
    except USER_ERRORS as err:
        return report(err)
    except Preempted as err:  # SIGTERM / SIGINT: a checkpoint was written, the exit status says "resume me"
        return report_preempted(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
