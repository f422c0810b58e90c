#!/usr/bin/env python
"""The earlier name of scripts/convert_to_linformer.py (which converts RoBERTa and BERT checkpoints): same arguments."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_to_linformer import main  # noqa: E402

if __name__ == "__main__":
    main()
