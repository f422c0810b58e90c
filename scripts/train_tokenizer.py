#!/usr/bin/env python
"""Thin wrapper: `python scripts/train_tokenizer.py ...` is `python -m linformer_hf.training.train_tokenizer ...`
(see its --help)."""

import sys

from linformer_hf.training.train_tokenizer import main

if __name__ == "__main__":
    sys.exit(main())
