"""Fine-tune a pretrained Linformer on SST-2, QNLI, QQP or IMDB (Hub names, or local csv/tsv/json files).

    accelerate launch --config_file configs/accelerate/cpu.yaml -m linformer_hf.training.finetune \\
        --config configs/finetune/sst2.yaml --model.pretrained outputs/demo/pretrain/final \\
        --data.train_file ../shared/data/sst2/train.tsv --data.validation_file ../shared/data/sst2/dev.tsv

(`python -m linformer_hf.training.finetune` runs it in one process; `scripts/finetune.py` is the same command.)
Any recipe key can be overridden as --section.key value. Reports accuracy (and F1 for QQP), keeps the best model in
<output_dir>/best, writes predictions_validation.tsv (and predictions_test.tsv for data.test_file) and results.json.
--resume_from_checkpoint takes a checkpoint-N dir of the run or `latest` (the newest; one is written at every
evaluation); `latest` onto a run that finished with the same recipe says it is complete and exits 0. SIGTERM /
SIGINT: the run finishes its update, writes a checkpoint and exits with the resumable status
(`errors.RESUMABLE_EXIT_CODE`; resume with `latest`).
"""

from __future__ import annotations

import argparse
import sys

from ..cli import ArgumentParser
from .config import FinetuneRecipe, load_recipe
from .errors import USER_ERRORS, Preempted, report, report_preempted


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m linformer_hf.training.finetune",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="fine-tuning recipe YAML (configs/finetune/*.yaml)")
    parser.add_argument(
        "--resume_from_checkpoint", default=None, help="a checkpoint-N dir of the run, or 'latest' (as pretraining)"
    )
    parser.add_argument("--no_progress", action="store_true", help="no progress bar")
    args, rest = parser.parse_known_args(argv)
    extra = {}
    if args.resume_from_checkpoint:
        extra["training.resume_from_checkpoint"] = args.resume_from_checkpoint
    try:
        recipe = load_recipe(FinetuneRecipe, args.config, rest, extra)
        from .finetuning import run_finetuning

        run_finetuning(recipe, show_progress=not args.no_progress)
    except USER_ERRORS as err:
        return report(err)
    except Preempted as err:  # SIGTERM / SIGINT: a checkpoint was written, the exit status says "resume me"
        return report_preempted(err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
