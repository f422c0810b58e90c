#!/usr/bin/env python
"""Prepare a Linformer or Performer model folder exactly as it would be pushed to the Hub, check it loads, and push it.

The folder gets safetensors weights, the config with the full auto_map, the family's modeling files, the tokenizer
and a README.md model card rendered from the package's template with the model's config and the result files given
(see linformer_hf.hub for the --card_info format). Before pushing, the folder is loaded in a fresh process with
trust_remote_code=True and without the package, and the card's "How to load" code is run there as written (skip both
with --skip_remote_check).

Examples:
    python scripts/push_to_hub.py outputs/linformer-sst2 my-user/linformer-sst2 --dry_run \
        --output_dir hub/linformer-sst2
    python scripts/push_to_hub.py outputs/linformer-sst2 my-user/linformer-sst2 --card_info card.json
"""

import os
import sys
import tempfile

from huggingface_hub.utils import validate_repo_id

from linformer_hf.cli import ArgumentParser
from linformer_hf.hub import check_can_push, check_remote_loading, prepare_model_folder, push_folder
from linformer_hf.outputs import sigterm_unwinds
from linformer_hf.training.errors import USER_ERRORS, report


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument(
        "model_dir", help="a saved Linformer or Performer (save_pretrained output, e.g. from the conversion)"
    )
    parser.add_argument("repo_id", help="Hub repository, e.g. user/linformer-base-n1024-k256")
    parser.add_argument(
        "--output_dir", help="where to write the folder, kept (default: a temporary folder, deleted after the push)"
    )
    parser.add_argument("--dry_run", action="store_true", help="write and check the folder, do not push")
    parser.add_argument("--card_info", help="JSON with license, datasets, training text and eval_results")
    parser.add_argument("--efficiency", help="efficiency figures: CSV or JSON list of rows")
    parser.add_argument("--recipe", help="training recipe (YAML or JSON), shown in the card")
    parser.add_argument("--tokenizer", help="tokenizer directory, if not beside the model")
    parser.add_argument("--template", help="model card template (Jinja2; default: the one shipped with the package)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier folder of this command in --output_dir (a folder of other things is refused)",
    )
    parser.add_argument("--skip_remote_check", action="store_true")
    parser.add_argument("--private", action="store_true")
    parser.add_argument("--token", help="Hub token (default: the saved login or HF_TOKEN)")
    args = parser.parse_args(argv)

    if args.dry_run and not args.output_dir:
        parser.error("--dry_run needs --output_dir (the folder is the dry run's result)")
    try:
        with sigterm_unwinds():  # a `kill` removes the staging folder, as Ctrl-C does
            run(args)
    except (*USER_ERRORS, OSError, ValueError, RuntimeError) as err:
        # OSError: missing folders or files; ValueError: not a Linformer or Performer (hub.load_model says so before
        # any work),
        # bad card inputs; USER_ERRORS: an invalid config.json (the strict dataclass); RuntimeError: the clean-process
        # load check or the credentials.
        return report(err)
    return 0


def run(args):
    # Before the folder is built and checked (minutes for a base model); a dry run's card names the repo too.
    if args.dry_run:
        validate_repo_id(args.repo_id)
    else:
        args.token = check_can_push(args.repo_id, args.token)
    if args.output_dir:
        build_check_and_push(args, args.output_dir)
        return
    # Without --output_dir the folder is only the push's copy of the model: deleted once pushed (or failed)
    with tempfile.TemporaryDirectory(prefix="hub-folder-") as scratch:
        build_check_and_push(args, os.path.join(scratch, args.repo_id.split("/")[-1]))


def build_check_and_push(args, output_dir: str):
    prepare_model_folder(
        args.model_dir,
        output_dir,
        args.repo_id,
        card_info_path=args.card_info,
        efficiency_path=args.efficiency,
        recipe_path=args.recipe,
        tokenizer_path=args.tokenizer,
        overwrite=args.overwrite,
        template_path=args.template,
    )
    print(f"wrote {output_dir}: {', '.join(sorted(os.listdir(output_dir)))}")
    if not args.skip_remote_check:
        result = check_remote_loading(output_dir, ["It attends in linear time.", "A second, longer input."])[0]
        if result["linformer_hf_imported"]:
            raise RuntimeError("The fresh process imported linformer_hf: the folder is not self-contained.")
        print(
            f"loads in a fresh process without linformer_hf as {result['model_class']}, "
            f"tokenizer {result['tokenizer_class']}; the card's loading code runs as written"
        )
    if args.dry_run:
        print("dry run: nothing pushed")
        return
    print(f"pushed: {push_folder(output_dir, args.repo_id, token=args.token, private=args.private)}")


if __name__ == "__main__":
    sys.exit(main())
