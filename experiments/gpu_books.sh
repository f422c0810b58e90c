#!/usr/bin/env bash
# Issue 35 item 6 on a GPU in one device call: items 2 (Figure 3) and 4 (uptraining) at base width (12 layers, 768,
# 12 heads), on books carried as files. Every run is the package's pretraining CLI (`python -m
# linformer_hf.training.pretrain --config RECIPE --key value ...`, through experiments/books_pretraining.py's plans),
# bf16 autocast, each encoder layer compiled (`training.torch_compile: layers`), fused AdamW (`training.optim`):
#   1. configs/books/gpu_base.yaml: RoBERTa-SDPA at n = 512 and a Linformer at n = 4,096, k = 256, on the same
#      4,096-token blocks in the same order with the same masks (RoBERTa reads each block as 8 inputs of 512), 32,768
#      tokens an update for 576 updates (18.9 M tokens each), validation masked-LM perplexity (all scored tokens and at
#      <mask> inputs, against the unigram baseline) every 64 updates on the same 131,072 held-out tokens as the CPU
#      plan configs/books/figure3.yaml;
#   2. if time remains, configs/books/gpu_uptrain.yaml: that RoBERTa converted to a Linformer at n = 4,096, k = 256
#      (positions copied out) and trained on for 128 updates (4.2 M tokens: the teacher's first ones again, seed 1),
#      evaluated before and after on the same masked held-out tokens as the teacher (its last evaluation is the teacher
#      reading 512); then, as far as the time goes, the control: the teacher trained on at 512 for the same tokens.
# Checkpoints and models stay on the GPU machine; the curves, the tables and the log come back.
#
# Prepare here, once, in the checkout the session started in (the tool sends that checkout, also from a helper's
# worktree: this script must be committed there), with the books tokenizer in outputs/tokenizer-books:
#
#   python -m experiments.gpu_books prepare
#
# It copies train shards 0 and 1 of ../shared/data/gutenberg (renamed train-0000{0,1}-of-00002.parquet: 320 books,
# 122 M characters, about 30 M tokens), validation.parquet and the README (the Hub layout), the tokenizer and the
# wheels of `datasets` 5.2.0 and the needs the image lacks (dill, multiprocess, fsspec; from PyPI, for Python 3.12) into
# .gpu_books/ (ignored: .gitignore lists /.gpu_books/; elsewhere `echo /.gpu_books/ >> .git/info/exclude`), and checks
# that it and the working tree fit the call's 64 MiB (45 MiB carried, 49 MiB with this checkout's tree). Then the device tool's call (kind left
# out: an H100, or an H200, which report.md names):
#
#   run(command="bash experiments/gpu_books.sh", carry=[".gpu_books"], timeout_s=300)
#
# The machine's start (a minute or more) comes on top of the 280 s of work, unless the call follows another at once on
# the same warm machine (after experiments/gpu_session.sh's, say: only this call need carry .gpu_books, 45 MiB more
# to send). Call give_back at once after the call: no rerun fits.
# Options: KEY=VALUE arguments replace keys of gpu_base.yaml's shared overrides (`bash experiments/gpu_books.sh
# training.learning_rate=2e-4`); GPU_BOOKS_TOTAL_S (280), GPU_BOOKS_TRAIN_MIN (each base run's time budget in
# minutes from its loop's start, the first evaluation and the compile included: 1.1), GPU_BOOKS_DIR (.gpu_books),
# GPU_BOOKS_WORK (/tmp/gpu_books_<pid>), GPU_BOOKS_GATHER_S (30; 0: gather only at the end).
#
# Files it returns (read-only, under the reply's files_at; at most 4 of the 8 allowed):
#   report.md     the environment (device, versions, the carried shards), each stage's exit and seconds, per plan
#                 the table of runs (updates, tokens, perplexity, at <mask>, x unigram, at <mask> against the
#                 baseline at the last update both evaluated, training tokens/s, the first update's seconds (the
#                 compile), whether the time budget cut it) and every evaluation side by side; the uptraining table (teacher at 512, uptrained before and
#                 after, control after); the exact commands
#   curves.csv    one row per evaluation: plan, run, model_type, n, k, sharing, step, tokens, perplexity,
#                 mask_input_perplexity, mask_input_over_unigram, eval_loss (books_pretraining's columns), then
#                 train_tokens_per_s (median over the updates since the previous evaluation) and elapsed_s
#   results.json  the same per run, with every evaluation's full record (unigram baselines included)
#   log.txt       everything the command printed
# What to do with them: copy curves.csv to docs/results/data/books_gpu_base_<h100|h200>.csv; record the tables, the
# device, the versions and this command in docs/results/books-pretraining.md (a section "Base width on a GPU", beside
# the CPU plan's small models; the same validation tokens as figure3.yaml, not the same training books: 2 of the 6
# shards); answer issue 35 items 2, 4 and 6 with it, saying how far short of the paper's scale (RoBERTa-base on 125 k
# updates of 1 M tokens) 19 M tokens are. A stage with exit 124 or 137 ran past its hard end (its evaluations so far
# are in the curves); `not run` never started; "time budget hit: yes" ended early with its final evaluation.
#
# Budget (seconds from the start at the default 280; each stage is one process, some 10-20 s of it starting (imports,
# CUDA) and, for a run, loading the cached blocks, counting the unigram baseline and building the model; the files
# under $OUT are refreshed every 30 s and at the end):
#   0-~5       nvidia-smi; the carried wheels installed (only those the image lacks or holds in an unfit version)
#   ~5-~40     tokenise: the device and versions (`datasets` imported, or one clear error and the files returned at
#              once), then the carried books tokenised and packed once by 16 workers (about 390 CPU s for all 374 M
#              characters on the development machine, docs/results/books-data.md; here 152 M: ~10-25 s), cached for
#              every run; hard end 84 s
#   ~40-~115   RoBERTa n = 512: step-0 evaluation and the compiles (~15-20 s), 576 updates (~31 s at the ~600 k
#              tokens/s measured on an H200; ~45 s if the loop's own work per update adds half), 8 evaluations and
#              the final one, the model saved (the teacher); hard end 168 s
#   ~115-~190  Linformer n = 4,096, k = 256, the same; hard end 246 s (the time budget of 1.1 min from the loop's
#              start ends either run early, with its final evaluation, if the GPU is slower)
#   ~190-269   uptraining (128 updates, ~8 s of them; started with 35 s left at least), then the control (with 25 s
#              left at least); hard end 269 s
#   269-~280   the last gathering of the files
#
# CPU dry run (what tests/test_gpu_books.py runs: tiny models (2 layers, width 64), a few updates, fp32 compiled with
# the `eager` backend, the same plans, commands and files; DIR a small folder in the same layout):
#   OUT=/tmp/out GPU_BOOKS_TINY=1 GPU_BOOKS_DIR=/tmp/small-books bash experiments/gpu_books.sh
set -u
: "${OUT:?set OUT to the folder the files go to}"
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
PY=${PYTHON:-python3}
TOTAL=${GPU_BOOKS_TOTAL_S:-280}
DIR=${GPU_BOOKS_DIR:-.gpu_books}
WORK=${GPU_BOOKS_WORK:-/tmp/gpu_books_$$}
TRAIN_MIN=${GPU_BOOKS_TRAIN_MIN:-1.1}
TINY=${GPU_BOOKS_TINY:-0}
START=$(date +%s)
mkdir -p "$WORK" && WORK=$(cd "$WORK" && pwd)
exec > >(tee -a "$OUT/log.txt") 2>&1

# What every run reads: the carried books and tokenizer, one cache of tokenised blocks.
DATA=(--set "data.datasets=[{path: $DIR/gutenberg, split: train}]"
      --set "data.validation_datasets=[{path: $DIR/gutenberg, split: validation}]"
      --set "tokenizer.name_or_path=$DIR/tokenizer-books" --set "data.cache_dir=$WORK/cache")
BASE=(--set "training.max_train_minutes=$TRAIN_MIN")
UP=(--set "model.pretrained=$WORK/base/roberta_n512/final")
if [ "$TINY" = 1 ]; then
    GATHER_S=${GPU_BOOKS_GATHER_S:-0}
    # 2 layers of width 64 at the plans' n (512; 4,096, k = 256); fp32, compiled with the `eager` backend
    SMALL=(--set training.mixed_precision=no --set training.torch_compile_backend=eager
           --set training.per_device_train_batch_size=2 --set training.per_device_eval_batch_size=2
           --set data.max_eval_blocks=2 --set data.preprocessing_num_workers=2 --set training.logging_steps=1)
    DATA+=("${SMALL[@]}")
    BASE+=(--set model.config.hidden_size=64 --set model.config.num_hidden_layers=2
           --set model.config.num_attention_heads=2 --set model.config.intermediate_size=128
           --set training.max_steps=4 --set training.warmup_steps=1 --set training.eval_steps=2)
    UP+=(--set training.max_steps=2 --set training.warmup_steps=1 --set training.eval_steps=1)
else
    GATHER_S=${GPU_BOOKS_GATHER_S:-30}
fi
for kv in "$@"; do BASE+=(--set "$kv"); done  # KEY=VALUE arguments: gpu_base.yaml's shared keys

at() { echo $((START + TOTAL * $1 / 1000)); }  # the Unix time at $1 thousandths of TOTAL
# gather: the files under $OUT from what the runs logged so far; one at a time (the last one waits for a periodic one)
gather() {
    local lock=()
    command -v flock >/dev/null && lock=(flock "$WORK/.gather.lock")
    "${lock[@]}" timeout 60 "$PY" -m experiments.gpu_books gather "$OUT" "$WORK" || echo "gather exit $?"
}
# too_late NAME END MIN: true, with the stage's line in $WORK/stages.tsv (report.md's stage table), when fewer than MIN
# seconds are left before the Unix time END
too_late() {
    local name=$1 end=$2 min=$3 now
    now=$(date +%s)
    [ $((end - now)) -ge "$min" ] && return 1
    printf '%s\tnot run\t%s\t\t%s\n' "$name" $((now - START)) "$((end - now)) s left, $min needed" >>"$WORK/stages.tsv"
    echo "stage $name: not run ($((end - now)) s left before its end at $((end - START)) s, $min s needed)"
}
# until_end NAME END CMD...: CMD until the Unix time END (then SIGTERM, and SIGKILL 10 s later); its line in stages.tsv
until_end() {
    local name=$1 end=$2 now code
    shift 2
    now=$(date +%s)
    echo "stage $name: from $((now - START)) s, hard end at $((end - START)) s"
    timeout -k 10 $((end - now)) "$@"
    code=$?
    printf '%s\t%s\t%s\t%s\t\n' "$name" "$code" $((now - START)) $(($(date +%s) - now)) >>"$WORK/stages.tsv"
    echo "stage $name exit $code at $(($(date +%s) - START)) s"
    return $code
}
# stage NAME END MIN CMD...: CMD until END, unless fewer than MIN seconds are left
stage() {
    too_late "$1" "$2" "$3" && return 125
    until_end "$1" "$2" "${@:4}"
}
# run_stage NAME END MIN DIR RUN [ARG ...]: run RUN of the plan in DIR as stage NAME: its pretraining command as the
# plan wrote it (DIR/RUN.args), ARG ... appended, started here, with no Python process between; the exact line is
# printed and added to DIR/commands.txt (report.md's commands). A stage's end signals the run's process group: the run
# stops after its update (its own SIGTERM handling), with its checkpoint.
run_stage() {
    local name=$1 end=$2 min=$3 dir=$4 run=$5 args line
    shift 5
    too_late "$name" "$end" "$min" && return 125
    mapfile -d '' -t args <"$dir/$run.args" || return 1
    line="$(<"$dir/$run.line")${*:+ $*}"
    echo "$line" >>"$dir/commands.txt"
    echo "\$ $line"
    until_end "$name" "$end" "$PY" "${args[@]}" "$@"
}
finish() {
    [ -n "${GATHERER:-}" ] && kill "$GATHERER" 2>/dev/null && wait "$GATHERER" 2>/dev/null
    gather
    echo "gpu books done in $(($(date +%s) - START)) s; files in $OUT:"
    ls -l "$OUT"
    exit 0
}

echo "gpu books: $(date -u +%FT%TZ), total ${TOTAL} s, data $DIR, work in $WORK, files to $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv

# `datasets` (not on the GPU image) from the carried wheels, only those this Python lacks.
if ! "$PY" -c 'import datasets' >/dev/null 2>&1; then
    mapfile -t WHEELS < <("$PY" -m experiments.gpu_books wheels "$DIR/whl")
    if [ ${#WHEELS[@]} -gt 0 ] && "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" "${WHEELS[@]}"; then
        export PYTHONPATH="$WORK/site:$PYTHONPATH"
        echo "installed from $DIR/whl: ${WHEELS[*]##*/}"
    else
        echo "error: could not install the carried wheels (${WHEELS[*]:-none found in $DIR/whl})"
    fi
fi
( [ "$GATHER_S" -gt 0 ] && while sleep "$GATHER_S"; do gather >/dev/null 2>&1; done ) &
GATHERER=$!
# Stage 1, one process: the versions and the device ($WORK/environment.md; exit 3 if `datasets` cannot be imported
# or the carried data is not there), then the blocks tokenised once (the runs find them in the cache).
stage tokenise "$(at 300)" 1 "$PY" -m experiments.gpu_books tokenise --environment "$WORK" "$DIR" \
    --plan configs/books/gpu_base.yaml --output_dir "$WORK/base" "${DATA[@]}" "${BASE[@]}"
if [ $? -eq 3 ] || [ ! -f "$WORK/environment.md" ]; then
    echo "error: stopping before any run (see the error above; report.md says it too)"
    finish
fi
# Stages 2-3: Figure 3 at base width, the baseline first (the commands written by the tokenise stage).
for name in roberta_n512 linformer_n4096_k256; do
    [ $name = roberta_n512 ] && end=$(at 600) || end=$(at 880)
    run_stage "$name" "$end" 30 "$WORK/base" $name
done
# Stages 4-5: uptraining from the RoBERTa just trained, then its control, as far as the time goes.
if [ -f "$WORK/base/roberta_n512/final/config.json" ] && timeout 60 "$PY" -m experiments.gpu_books commands \
    --plan configs/books/gpu_uptrain.yaml --output_dir "$WORK/uptrain" "${DATA[@]}" "${UP[@]}"; then
    for name in linformer_n4096_k256 roberta_n512_control; do
        [ $name = linformer_n4096_k256 ] && min=35 || min=25
        left=$(($(at 960) - $(date +%s) - 20))  # the uptraining run's own budget: what is left, less setup and saving
        run_stage "uptrain_$name" "$(at 960)" $min "$WORK/uptrain" $name \
            --training.max_train_minutes "$(awk "BEGIN {print ($left > 6 ? $left : 6) / 60}")"
    done
else
    echo "no teacher ($WORK/base/roberta_n512/final), or its commands not written: no uptraining"
    printf 'uptraining\tnot run\t%s\t\tno teacher saved, or no commands\n' $(($(date +%s) - START)) >>"$WORK/stages.tsv"
fi
finish
