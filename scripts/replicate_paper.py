#!/usr/bin/env python
"""Thin wrapper: `python scripts/replicate_paper.py ...` is `python -m linformer_hf.research.replication ...`."""

import sys

from linformer_hf.research.replication import main

if __name__ == "__main__":
    sys.exit(main())
