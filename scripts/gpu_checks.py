#!/usr/bin/env python
"""Everything a CUDA machine should run, in one go: environment, the fp16/bf16 inference grid, the fp16 AMP training
step (Linformer against RoBERTa at base width, Performer) and the long-sequence fp16 forward. Each part is reported
ok / skipped (with the reason) / failed (with the error) in report.json and report.md; see docs/efficiency.md ("GPU").

    PYTHONPATH=src python scripts/gpu_checks.py --output_dir outputs/gpu_checks/h100   # ~7 min on an H100
    PYTHONPATH=src python scripts/gpu_checks.py --device cpu --tiny                     # parts 3-4 on CPU, seconds
"""

import sys

from linformer_hf.research.gpu_checks import main

if __name__ == "__main__":
    sys.exit(main())
