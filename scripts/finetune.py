#!/usr/bin/env python
"""Thin wrapper: `python scripts/finetune.py ...` is `python -m linformer_hf.training.finetune ...` (see its --help)."""

import sys

from linformer_hf.training.finetune import main

if __name__ == "__main__":
    sys.exit(main())
