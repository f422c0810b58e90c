#!/usr/bin/env bash
# Issue 26's runs that take hours on 2 CPU cores, side by side on one GPU (docs/results/distillation.md, seventh run):
#   recovery-sst2, recovery-qnli, recovery-imdb   distillation_evidence.sh with the recipes of its CPU runs (IMDB read
#                                                 to 512 tokens), control and students with seeds 1 and 2;
#   variants                                      pretrained_evidence.sh variants (the sixth run's recipe), each
#                                                 transfer fine-tuned on SST-2 with seeds 1 and 2.
# The teachers train first, side by side; then every other run is a job, $PARALLEL at a time, in the order below (the
# most wanted first), each writing its log to $WORK/logs/<job>.log. A small model leaves a GPU mostly idle, so
# several processes share it; their wall times are measured side by side, not alone. A stopped script continues
# where it stopped (every run skips what it finished). Last, each task's recovery table is printed.
#
#   MINILM=/tmp/minilm/all-MiniLM-L6-v2 bash experiments/gpu_evidence.sh
#   OVERRIDES="TEACHER_STEPS=2 STEPS=2 EVAL_EVERY=1 TEACHER_EVAL_EVERY=1 SST2_TRAIN=64 LAYER_STEPS=2" ...  # a quick try
set -euo pipefail
cd "$(dirname "$0")/.."
MINILM=${MINILM:?set MINILM to the encoder folder (python -c "import all_minilm_l6_v2; all_minilm_l6_v2.extract_model(DIR)")}
WORK=${WORK:-outputs/gpu_evidence}
PARALLEL=${PARALLEL:-8}
if ! [[ $PARALLEL =~ ^[1-9][0-9]*$ ]]; then
  echo "error: PARALLEL must be the number of runs at once, 1 or more, got '$PARALLEL'" >&2
  exit 2
fi
OVERRIDES=${OVERRIDES:-}  # VAR=value settings given to every run after its recipe, so they win
export DATA=${DATA:-../shared/data} PYTHON=${PYTHON:-python3} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
mkdir -p "$WORK/logs"

recovery() {  # recovery TASK VAR=value...: distillation_evidence.sh on TASK with its CPU runs' recipe
  local task=$1 recipe
  shift
  case $task in
    sst2) recipe=(TEACHER_LR=1e-4 TEACHER_EVAL_EVERY=421 STEPS=1000 EVAL_EVERY=250) ;;
    qnli) recipe=(TEACHER_LR=1e-4 TEACHER_EVAL_EVERY=112 STEPS=300 EVAL_EVERY=100) ;;
    imdb) recipe=(MAX_LENGTH=512 TEACHER_LR=1e-4 TEACHER_EVAL_EVERY=50 STEPS=100 EVAL_EVERY=50) ;;
  esac
  # shellcheck disable=SC2086  # OVERRIDES is a list of words
  env TASK="$task" MINILM="$MINILM" WORK="$WORK/recovery-$task" "${recipe[@]}" "$@" $OVERRIDES \
    bash experiments/distillation_evidence.sh
}

variants() {  # variants VAR=value...: pretrained_evidence.sh variants with the sixth run's recipe
  # shellcheck disable=SC2086
  env TEACHER="$MINILM" WORK="$WORK/variants" LAYER_STEPS=150 TRANSFER_BATCH=4 LENGTHS="32 128" EVAL_DOCS=256 \
    VARIANT_SEEDS="1 2" "$@" $OVERRIDES bash experiments/pretrained_evidence.sh variants
}

job() {  # job NAME COMMAND...: in the background, at most $PARALLEL at once
  while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
  echo "$(date +%T) start $1"
  (
    status=0
    "${@:2}" >"$WORK/logs/$1.log" 2>&1 || status=$?
    if [ $status = 0 ]; then echo "$(date +%T) done $1"
    else echo "$(date +%T) FAILED $1 (exit $status): $WORK/logs/$1.log"; fi
  ) &
}

# The teachers, and the conversions that the variant jobs share.
for task in sst2 qnli imdb; do job "$task-teacher" recovery "$task" ONLY=teacher; done
job variants-converted variants VARIANT_RUNS="k128-converted k256-converted" VARIANT_SEEDS=""
wait

for seed in 1 2; do
  job "sst2-control-s$seed" recovery sst2 ONLY=control SEED=$seed
  job "sst2-linformer-k128-s$seed" recovery sst2 ONLY=distilled SEED=$seed
  job "sst2-performer-s$seed" recovery sst2 ONLY=distilled SEED=$seed FAMILY=performer
done
for seed in 1 2; do
  job "imdb-control-s$seed" recovery imdb ONLY=control SEED=$seed
  job "imdb-linformer-k128-s$seed" recovery imdb ONLY=distilled SEED=$seed
  job "imdb-performer-s$seed" recovery imdb ONLY=distilled SEED=$seed FAMILY=performer
  job "imdb-linformer-k256-s$seed" recovery imdb ONLY=distilled SEED=$seed K=256
done
for seed in 1 2; do
  job "qnli-control-s$seed" recovery qnli ONLY=control SEED=$seed
  job "qnli-linformer-k128-strided-s$seed" recovery qnli ONLY=distilled SEED=$seed INIT=strided
  job "qnli-performer-s$seed" recovery qnli ONLY=distilled SEED=$seed FAMILY=performer
  job "sst2-linformer-k256-s$seed" recovery sst2 ONLY=distilled SEED=$seed K=256
done
for run in teacher k128-converted k128-attention_output k128-attention_weights k128-hidden_states k256-converted \
  k256-attention_output; do
  job "variants-$run" variants VARIANT_RUNS="$run"
done
wait

for task in sst2 qnli imdb; do recovery "$task" ONLY=summary 2>&1 | grep -v '^skip' || true; done
echo "== wall times (side by side, $PARALLEL at once)"
cat "$WORK"/recovery-*/times.tsv "$WORK/variants/times.tsv" 2>/dev/null || true
