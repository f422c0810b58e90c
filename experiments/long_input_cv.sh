#!/usr/bin/env bash
# Issue 26 item 3: does a Linformer that reads a whole long review, fine-tuned on long reviews, beat the teacher
# that reads its first 512 tokens? Measured by cross-validation over the long reviews of ../shared/data/imdb/train.csv
# (282 of 2,000 have more than the teacher's 512 tokens), paired on the same held-out reviews
# (docs/results/long-inputs-minilm.md):
#   1. the reviews split by the teacher's length: short.csv (read whole) and long.csv;
#   2. the teacher: all-MiniLM-L6-v2 fine-tuned on the short reviews only ($TEACHER_STEPS updates, 10% held out to
#      keep its best point), so that no long review is ever trained on outside the folds;
#   3. long.csv in $FOLDS label-stratified folds; for each fold, from the teacher and on the other folds' reviews,
#      $STEPS updates each of
#        control     the teacher itself, reading the first 512 tokens (the truncated teacher, trained on as long);
#        linformer   the teacher converted to a Linformer at n = $N, k = $K (projection_init $INIT), reading all;
#      each scored once, after its last update, on the fold's reviews (no checkpoint is picked on them);
#   4. every review's held-out prediction, paired: accuracy and the difference against the control with its
#      standard error ($WORK/crossval.json).
#
#   MINILM=/tmp/minilm/all-MiniLM-L6-v2 bash experiments/long_input_cv.sh
#
# Each step is skipped when its output exists, and a run killed after a checkpoint resumes from it, so a stopped
# script continues where it stopped. Wall times go to $WORK/times.tsv. ARMS="control" runs only those recipes;
# the Linformer's run names carry its projection_init unless it is neighbour_average.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MINILM=${MINILM:?set MINILM to the encoder folder (python -c "import all_minilm_l6_v2; all_minilm_l6_v2.extract_model(DIR)")}
DATA=${DATA:-../shared/data/imdb/train.csv}
WORK=${WORK:-outputs/long_input_cv}
TEACHER_STEPS=${TEACHER_STEPS:-96}  # two epochs of the 1,547 short reviews left after the 10% hold-out, 32 a batch
TEACHER_LR=${TEACHER_LR:-1e-4}
FOLDS=${FOLDS:-3}  # 3 folds of 282: each recipe trains on 188 reviews and is scored on 94
STEPS=${STEPS:-24}  # two epochs of a fold's 188 training reviews, 16 an update (2-core CPU: ~1 hour for all runs)
BATCH=${BATCH:-8}  # reviews a forward pass, ACCUMULATE passes an update: 8 x 2,048 tokens keeps a CPU under 24 GiB
ACCUMULATE=${ACCUMULATE:-2}
LR=${LR:-5e-5}
SEED=${SEED:-1}
N=${N:-2048}
K=${K:-512}
INIT=${INIT:-strided}  # starts 14 points above neighbour_average on these reviews (docs/results/long-inputs-minilm.md)
ARMS=${ARMS:-control linformer}
source experiments/finetune_run.sh

finetune() {  # finetune NAME ARGS...: finetune_run NAME on IMDB's recipe
  local name=$1
  shift
  finetune_run "$name" --config configs/finetune/imdb.yaml --no_progress --training.logging_steps 6 "$@"
}

[ -f "$WORK/imdb-by-length/long.csv" ] || "$PY" -m experiments.long_input split --data "$DATA" --tokenizer "$MINILM" \
  "$WORK/imdb-by-length"
finetune teacher --model.pretrained "$MINILM" --data.train_file "$WORK/imdb-by-length/short.csv" \
  --data.validation_split_percentage 10 --data.split_seed 1 --data.max_seq_length 512 \
  --training.per_device_train_batch_size 32 --training.max_steps "$TEACHER_STEPS" \
  --training.eval_steps $((TEACHER_STEPS / 4)) --training.learning_rate "$TEACHER_LR" --training.seed 1
TEACHER="$WORK/teacher/best"
[ -d "$WORK/folds/fold-0" ] || "$PY" -m experiments.long_input folds --data "$WORK/imdb-by-length/long.csv" \
  --folds "$FOLDS" --seed 0 "$WORK/folds"

LINFORMER="linformer-k$K-n$N"
[ "$INIT" = neighbour_average ] || LINFORMER="$LINFORMER-$INIT"  # run names as measured
RECIPE=(--training.per_device_train_batch_size "$BATCH" --training.gradient_accumulation_steps "$ACCUMULATE"
  --training.per_device_eval_batch_size "$BATCH" --training.max_steps "$STEPS" --training.eval_steps "$STEPS"
  --training.learning_rate "$LR" --training.seed "$SEED")
for ((i = 0; i < FOLDS; i++)); do
  FOLD=(--data.train_file "$WORK/folds/fold-$i/train.csv" --data.validation_file "$WORK/folds/fold-$i/test.csv")
  if [[ " $ARMS " == *" control "* ]]; then
    finetune "control-s$SEED-fold$i" --model.pretrained "$TEACHER" "${FOLD[@]}" --data.max_seq_length 512 "${RECIPE[@]}"
  fi
  if [[ " $ARMS " == *" linformer "* ]]; then
    finetune "$LINFORMER-s$SEED-fold$i" --model.pretrained "$TEACHER" "${FOLD[@]}" --data.max_seq_length "$N" \
      --model.convert_from_roberta "{projected_length: $K, max_sequence_length: $N, sharing: key_value, projection_init: $INIT}" \
      "${RECIPE[@]}"
  fi
done

# The paired report over every recipe whose folds have all finished.
RUNS=()
for arm in "control-s$SEED" "$LINFORMER-s$SEED"; do
  dirs=()
  for ((i = 0; i < FOLDS; i++)); do dirs+=("$WORK/$arm-fold$i"); done
  if [ -f "$WORK/$arm-fold$((FOLDS - 1))/results.json" ]; then RUNS+=(--run "$arm" "${dirs[@]}"); fi
done
REPORT="$WORK/crossval-$LINFORMER-s$SEED.json"
[ -f "$REPORT" ] || "$PY" -m experiments.long_input crossval --folds_dir "$WORK/folds" "${RUNS[@]}" \
  --baseline "control-s$SEED" --output "$REPORT"
