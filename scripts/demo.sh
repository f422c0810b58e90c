#!/usr/bin/env bash
# The one-command demo: on an offline machine with 2 CPU cores, in a few minutes,
#   1. gather the offline default corpus (English docs of the installed Python packages; cached),
#   2. train a byte-level BPE tokenizer on it,
#   3. pretrain a small Linformer with masked LM (accelerate launch, CPU config),
#   4. report its validation perplexity, reload it with AutoModelForMaskedLM and show fill-mask predictions.
# Assumes the environment from scripts/setup_env.sh (.venv). Extra arguments go to the pretraining module, e.g.
#   scripts/demo.sh --training.max_steps 1000
#   scripts/demo.sh --data.train_files '[my.txt]' --data.validation_files '[my_valid.txt]'
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
ACCELERATE=${ACCELERATE:-.venv/bin/accelerate}
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1} TOKENIZERS_PARALLELISM=false
# Idle OpenMP threads sleep instead of spinning: on a busy machine spinning makes 2 threads 3-5x slower than 1.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
start=$(date +%s)

echo "== 1/4 corpus: English documentation of the installed Python packages"
"$PY" scripts/build_corpus.py --output outputs/corpus/docs.txt

echo "== 2/4 tokenizer: byte-level BPE, 4096 tokens"
if [ -f outputs/demo/tokenizer/tokenizer_config.json ]; then
  echo "tokenizer cached in outputs/demo/tokenizer"
else
  "$PY" -m linformer_hf.training.train_tokenizer --files outputs/corpus/docs.train.txt --vocab_size 4096 \
    --model_max_length 32 --output_dir outputs/demo/tokenizer
fi

echo "== 3/4 pretraining a small Linformer (configs/model/demo_small.yaml) with masked LM"
# A rerun replaces the previous demo's outputs through the run-directory policy (never while another run holds them).
"$ACCELERATE" launch --quiet --config_file configs/accelerate/cpu.yaml --num_cpu_threads_per_process "$(nproc)" \
  -m linformer_hf.training.pretrain \
  --config configs/pretrain/demo.yaml --training.overwrite_output_dir true "$@"

echo "== 4/4 reload with AutoModelForMaskedLM and fill-mask"
"$PY" scripts/show_model.py outputs/demo/pretrain/final
echo "demo finished in $(( $(date +%s) - start )) s"
