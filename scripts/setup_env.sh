#!/usr/bin/env bash
# Create .venv with PyTorch 2.13.0 and linformer-hf installed (editable) with its extras. torch comes from pip's
# index: on Linux that is the CUDA build; for the CPU-only one, install it into .venv first (README, Install).
# Usage: bash scripts/setup_env.sh            (idempotent; re-running only installs what is missing)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, pinned to the release the tests run on; a torch 2.13.0 already in .venv (e.g. +cpu) is kept.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev]"
.venv/bin/python -c "import torch, transformers, linformer_hf; print('torch', torch.__version__, '| transformers', transformers.__version__, '| linformer_hf', linformer_hf.__version__)"
