#!/usr/bin/env bash
# Issue 26's recovery evidence on SST-2 (docs/results/distillation.md): fine-tune a teacher classifier from a BERT-
# layout encoder, then, from that teacher and on the same training data, for $STEPS updates each:
#   control      the teacher itself, trained on with the students' recipe (the ratio's reference is the better of
#                teacher and control);
#   plain        the teacher converted to Linformer (n = $N, k = $K), fine-tuned on the labels alone;
#   distilled    the same conversion, fine-tuned with the teacher (distillation.kd_weight $KD_WEIGHT, temperature
#                $TEMPERATURE, hidden_weight $HIDDEN_WEIGHT);
# each scored on SST-2 dev (872) before the first update and every $EVAL_EVERY updates.
#
#   MINILM=/tmp/minilm/all-MiniLM-L6-v2 bash experiments/distillation_evidence.sh
#
# Every run writes its own folder under $WORK and is skipped when that folder already holds its results.json, so a
# stopped script continues where it stopped; wall times go to $WORK/times.tsv, the table to $WORK/summary.md.
# FAMILY=performer converts to a Performer (m = $FEATURES) instead. ONLY="control plain" runs only those runs (after
# the teacher exists), e.g. to run them as separate processes side by side; the summary is written once all are done.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MINILM=${MINILM:?set MINILM to the encoder folder (python -c "import all_minilm_l6_v2; all_minilm_l6_v2.extract_model(DIR)")}
DATA=${DATA:-../shared/data}
WORK=${WORK:-outputs/distillation_evidence}
TEACHER_STEPS=${TEACHER_STEPS:-2105}   # one epoch of SST-2 train (67,349 sentences) at batch 32
STEPS=${STEPS:-300}
EVAL_EVERY=${EVAL_EVERY:-100}
LR=${LR:-5e-5}   # the control's and the students' learning rate
TEACHER_LR=${TEACHER_LR:-$LR}
SEED=${SEED:-1}
N=${N:-512}
K=${K:-128}
FAMILY=${FAMILY:-linformer}
FEATURES=${FEATURES:-256}
KD_WEIGHT=${KD_WEIGHT:-0.5}
TEMPERATURE=${TEMPERATURE:-2.0}
HIDDEN_WEIGHT=${HIDDEN_WEIGHT:-0.0}
MAX_LENGTH=${MAX_LENGTH:-64}
ONLY=${ONLY:-}
mkdir -p "$WORK"
TIMES="$WORK/times.tsv"
[ -f "$TIMES" ] || printf 'run\tseconds\tload_before\tload_after\n' >"$TIMES"

COMMON=(--config configs/finetune/sst2.yaml --no_progress
  --data.train_file "$DATA/sst2/train.tsv" --data.validation_file "$DATA/sst2/dev.tsv"
  --data.max_seq_length "$MAX_LENGTH" --training.seed "$SEED"
  --training.per_device_train_batch_size 32 --training.logging_steps 10)

run() {  # run NAME ARGS...: one fine-tuning into $WORK/NAME, timed, skipped when done
  local name=$1
  shift
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" ${name#"$TAG"-} "* ]]; then
    return
  fi
  if [ -f "$WORK/$name/results.json" ]; then
    echo "skip $name (done)"
    return
  fi
  local load_before start
  load_before=$(cut -d' ' -f1 /proc/loadavg)
  start=$(date +%s)
  echo "== $name: $PY -m linformer_hf.training.finetune ${COMMON[*]} --training.output_dir $WORK/$name $*"
  "$PY" -m linformer_hf.training.finetune "${COMMON[@]}" --training.output_dir "$WORK/$name" \
    --training.overwrite_output_dir true "$@"
  printf '%s\t%s\t%s\t%s\n' "$name" "$(($(date +%s) - start))" "$load_before" "$(cut -d' ' -f1 /proc/loadavg)" >>"$TIMES"
}

if [ "$FAMILY" = performer ]; then
  CONVERSION="{target: performer, num_random_features: $FEATURES, max_sequence_length: $N}"
  TAG="performer-m$FEATURES"
else
  CONVERSION="{projected_length: $K, max_sequence_length: $N, sharing: key_value}"
  TAG="linformer-k$K"
fi
RECOVERY=(--training.max_steps "$STEPS" --training.eval_steps "$EVAL_EVERY" --training.eval_on_start true
  --training.learning_rate "$LR")

run teacher --model.pretrained "$MINILM" --training.max_steps "$TEACHER_STEPS" --training.eval_steps "$TEACHER_STEPS" \
  --training.learning_rate "$TEACHER_LR"
TEACHER="$WORK/teacher/best"
run control --model.pretrained "$TEACHER" "${RECOVERY[@]}"
run "$TAG-plain" --model.pretrained "$TEACHER" --model.convert_from_roberta "$CONVERSION" "${RECOVERY[@]}"
run "$TAG-distilled" --model.pretrained "$TEACHER" --model.convert_from_roberta "$CONVERSION" "${RECOVERY[@]}" \
  --distillation.teacher "$TEACHER" --distillation.kd_weight "$KD_WEIGHT" \
  --distillation.temperature "$TEMPERATURE" --distillation.hidden_weight "$HIDDEN_WEIGHT"

for name in teacher control "$TAG-plain" "$TAG-distilled"; do
  [ -f "$WORK/$name/results.json" ] || exit 0  # another process is still running it
done
"$PY" - "$WORK" "$TAG" <<'EOF' | tee "$WORK/summary.md"
import json, os, sys

work, tag = sys.argv[1:]
def history(name):
    with open(os.path.join(work, name, "results.json")) as fh:
        return {h["step"]: 100 * h["accuracy"] for h in json.load(fh)["history"]}
teacher = max(history("teacher").values())
runs = {name: history(name) for name in ("control", f"{tag}-plain", f"{tag}-distilled")}
reference = max(teacher, max(runs["control"].values()))
steps = sorted(set().union(*runs.values()))
print(f"teacher (SST-2 dev): {teacher:.2f}; reference (better of teacher and control at its best): {reference:.2f}\n")
print("| run | " + " | ".join(f"{s} updates" for s in steps) + " | last / reference |")
print("| --- |" + " --- |" * (len(steps) + 1))
for name, h in runs.items():
    cells = " | ".join(f"{h[s]:.2f}" if s in h else "" for s in steps)
    print(f"| {name} | {cells} | {100 * h[max(h)] / reference:.1f}% |")
EOF
