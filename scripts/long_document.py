#!/usr/bin/env python
"""A 65,536-token document through a 12-layer base Linformer (k = 256): time, peak memory and GFLOP/s of one forward
pass in fp32 and int8 (dynamic quantisation), with a progress bar per layer; see linformer_hf.research.long_document
and docs/efficiency.md.

    python scripts/long_document.py --mode both                  # issue 14's moonshot, a few minutes on 2 cores
    python scripts/long_document.py --layers 2 --n 8192          # a quick look
"""

import os

# Transparent huge pages for PyTorch's large CPU tensors (read once, at torch's first allocation, so set before the
# import): a 65,536-token layer allocates gigabytes of fresh activations, and faulting them in 4 KiB at a time costs
# seconds of system time per pass.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from linformer_hf.research.long_document import main  # noqa: E402

if __name__ == "__main__":
    main()
