#!/usr/bin/env python
"""Export a saved Linformer or Performer to ONNX (dynamic batch and sequence length, up to the model's longest input:
n for Linformer) and quantise it to int8 for ONNX Runtime; see linformer_hf.onnx_export (a causal Performer is
refused: no ONNX operator for its running maximum). Needs the `onnx` extra: pip install "linformer-hf[onnx]" (from a
checkout: pip install -e ".[onnx]").

The output folder holds model.onnx and model_int8.onnx, each with its weights in a .data file beside it, config.json
and the model folder's tokenizer; move or copy it whole. A non-empty output folder (an earlier export) is refused
unless --overwrite; a folder holding a saved model is refused either way. A model saved in bf16 or fp16 is exported in
fp32.

Examples:
    python scripts/export_onnx.py outputs/sst2/final outputs/sst2/onnx
    python scripts/export_onnx.py outputs/demo/pretrain/final outputs/demo/onnx --head AutoModel --no_int8
"""

import sys

from linformer_hf.cli import ArgumentParser
from linformer_hf.loading import HEAD_CHOICES
from linformer_hf.onnx_export import export_folder
from linformer_hf.outputs import sigterm_unwinds
from linformer_hf.training.errors import USER_ERRORS, report


def main(argv=None):
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("model_dir", help="a saved Linformer or Performer folder (save_pretrained output)")
    parser.add_argument(
        "output_dir",
        help="where to write model.onnx, model_int8.onnx (each with its .data file), config.json and the tokenizer",
    )
    parser.add_argument(
        "--head",
        choices=HEAD_CHOICES,
        help="head to export, as the Auto class that loads it (AutoModelForPreTraining: the masked LM; default: the "
        "one the folder was saved as, config.architectures)",
    )
    parser.add_argument("--no_int8", action="store_true", help="skip the int8 dynamic quantisation")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier export in a non-empty output_dir (its graphs, data files, config.json and "
        "tokenizer; other files there are kept)",
    )
    args = parser.parse_args(argv)
    try:
        with sigterm_unwinds():  # a `kill` removes the staging folder, as Ctrl-C does
            paths = export_folder(
                args.model_dir, args.output_dir, head=args.head, int8=not args.no_int8, overwrite=args.overwrite
            )
    except (*USER_ERRORS, OSError, ValueError) as err:  # a missing onnx extra included
        return report(err)
    for precision, path in paths.items():
        print(f"{precision}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
