#!/usr/bin/env python
"""Thin wrapper: `python scripts/pretrain.py ...` is `python -m linformer_hf.training.pretrain ...` (see its --help)."""

import sys

from linformer_hf.training.pretrain import main

if __name__ == "__main__":
    sys.exit(main())
