#!/usr/bin/env bash
# Create .venv with the CPU build of PyTorch and linformer-hf installed (editable) with its extras.
# Usage: bash scripts/setup_env.sh            (idempotent; re-running only installs what is missing)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned: on a machine without torch, a bare `torch` requirement would pull a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev]"
.venv/bin/python -c "import torch, transformers, linformer_hf; print('torch', torch.__version__, '| transformers', transformers.__version__, '| linformer_hf', linformer_hf.__version__)"
