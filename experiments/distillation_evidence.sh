#!/usr/bin/env bash
# Issue 26's recovery evidence (docs/results/distillation.md): fine-tune a teacher classifier from a BERT-layout
# encoder on a task, then, from that teacher and on the same training data, for $STEPS updates each:
#   control      the teacher itself, trained on with the students' recipe (the ratio's reference is the better of
#                teacher and control);
#   plain        the teacher converted to Linformer (n = $N, k = $K, projection_init $INIT), fine-tuned on the labels
#                alone;
#   distilled    the same conversion, fine-tuned with the teacher (distillation.kd_weight $KD_WEIGHT, temperature
#                $TEMPERATURE, hidden_weight $HIDDEN_WEIGHT);
# each scored on data that neither saw before the first update and every $EVAL_EVERY updates: SST-2 dev (872) for
# TASK=sst2; for TASK=qnli and TASK=imdb, $HOLDOUT% of the shared file, held out with the same seed ($SPLIT_SEED) in
# every run, so that no student is scored on rows its teacher trained on.
#
#   MINILM=/tmp/minilm/all-MiniLM-L6-v2 bash experiments/distillation_evidence.sh
#
# Every run writes its own folder under $WORK and is skipped when that folder already holds its results.json (a run
# killed after a checkpoint resumes from it), so a stopped script continues where it stopped; wall times go to $WORK/times.tsv, the table of every finished run to
# $WORK/summary.md. The teacher is trained once (seed $TEACHER_SEED); SEED=2 runs the control and the students again
# with another seed (runs are named ...-s$SEED). FAMILY=performer converts to a Performer (m = $FEATURES) instead.
# ONLY="control plain" runs only those runs (after the teacher exists), e.g. to run them side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
MINILM=${MINILM:?set MINILM to the encoder folder (python -c "import all_minilm_l6_v2; all_minilm_l6_v2.extract_model(DIR)")}
DATA=${DATA:-../shared/data}
TASK=${TASK:-sst2}
HOLDOUT=${HOLDOUT:-20}
SPLIT_SEED=${SPLIT_SEED:-1}
case "$TASK" in
  sst2)  # 67,349 sentences: one epoch is 2,105 updates of 32
    DATA_ARGS=(--data.train_file "$DATA/sst2/train.tsv" --data.validation_file "$DATA/sst2/dev.tsv")
    TEACHER_STEPS=${TEACHER_STEPS:-2105} MAX_LENGTH=${MAX_LENGTH:-64} ;;
  qnli)  # 4,463 pairs, 80% trained on: 112 updates of 32 an epoch
    DATA_ARGS=(--data.train_file "$DATA/qnli/train.tsv")
    TEACHER_STEPS=${TEACHER_STEPS:-560} MAX_LENGTH=${MAX_LENGTH:-128} ;;
  imdb)  # 2,000 reviews, 80% trained on: 50 updates of 32 an epoch; read to 256 tokens (an update at 512 cost about
    # 5x as much on a 2-core CPU: docs/results/distillation.md, fourth run)
    DATA_ARGS=(--data.train_file "$DATA/imdb/train.csv")
    TEACHER_STEPS=${TEACHER_STEPS:-100} MAX_LENGTH=${MAX_LENGTH:-256} ;;
  *) echo "error: TASK must be sst2, qnli or imdb, got '$TASK'" >&2; exit 2 ;;
esac
[ "$TASK" = sst2 ] || DATA_ARGS+=(--data.validation_split_percentage "$HOLDOUT" --data.split_seed "$SPLIT_SEED")
WORK=${WORK:-outputs/distillation_evidence_$TASK}
STEPS=${STEPS:-300}
EVAL_EVERY=${EVAL_EVERY:-100}
LR=${LR:-5e-5}   # the control's and the students' learning rate
TEACHER_LR=${TEACHER_LR:-$LR}
TEACHER_EVAL_EVERY=${TEACHER_EVAL_EVERY:-$TEACHER_STEPS}  # fewer: a validation curve; the teacher kept is its best point
TEACHER_SEED=${TEACHER_SEED:-1}
SEED=${SEED:-$TEACHER_SEED}
N=${N:-512}
K=${K:-128}
INIT=${INIT:-neighbour_average}  # the Linformer's projection_init
FAMILY=${FAMILY:-linformer}
FEATURES=${FEATURES:-256}
KD_WEIGHT=${KD_WEIGHT:-0.5}
TEMPERATURE=${TEMPERATURE:-2.0}
HIDDEN_WEIGHT=${HIDDEN_WEIGHT:-0.0}
HIDDEN_LAYERS=${HIDDEN_LAYERS:-}  # e.g. "4,5,6": the hidden states matched (0 = embeddings); empty: every layer
ONLY=${ONLY:-}
source experiments/finetune_run.sh
COMMON=(--config "configs/finetune/$TASK.yaml" --no_progress "${DATA_ARGS[@]}" --data.max_seq_length "$MAX_LENGTH"
  --training.per_device_train_batch_size 32 --training.logging_steps 10)

run() {  # run ROLE NAME ARGS...: finetune_run NAME with the task's arguments, unless ROLE is not in $ONLY
  local role=$1 name=$2
  shift 2
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $role "* ]]; then
    return
  fi
  finetune_run "$name" "${COMMON[@]}" "$@"
}

if [ "$FAMILY" = performer ]; then
  CONVERSION="{target: performer, num_random_features: $FEATURES, max_sequence_length: $N}"
  TAG="performer-m$FEATURES"
else
  CONVERSION="{projected_length: $K, max_sequence_length: $N, sharing: key_value, projection_init: $INIT}"
  TAG="linformer-k$K"
  [ "$INIT" = neighbour_average ] || TAG="$TAG-$INIT"
fi
[ "$N" = 512 ] || TAG="$TAG-n$N"
RECOVERY=(--training.seed "$SEED" --training.max_steps "$STEPS" --training.eval_steps "$EVAL_EVERY"
  --training.eval_on_start true --training.learning_rate "$LR")

run teacher teacher --model.pretrained "$MINILM" --training.seed "$TEACHER_SEED" \
  --training.max_steps "$TEACHER_STEPS" --training.eval_steps "$TEACHER_EVAL_EVERY" --training.learning_rate "$TEACHER_LR"
TEACHER="$WORK/teacher/best"
run control "control-s$SEED" --model.pretrained "$TEACHER" "${RECOVERY[@]}"
run plain "$TAG-plain-s$SEED" --model.pretrained "$TEACHER" --model.convert_from_roberta "$CONVERSION" "${RECOVERY[@]}"
HIDDEN_TAG=""
HIDDEN_ARGS=(--distillation.hidden_weight "$HIDDEN_WEIGHT")
[ "$HIDDEN_WEIGHT" = 0.0 ] || HIDDEN_TAG="-hidden$HIDDEN_WEIGHT"
if [ -n "$HIDDEN_LAYERS" ]; then
  HIDDEN_TAG="$HIDDEN_TAG-layers${HIDDEN_LAYERS//,/-}"
  HIDDEN_ARGS+=(--distillation.hidden_layers "[$HIDDEN_LAYERS]")
fi
run distilled "$TAG-distilled$HIDDEN_TAG-s$SEED" --model.pretrained "$TEACHER" --model.convert_from_roberta "$CONVERSION" \
  "${RECOVERY[@]}" --distillation.teacher "$TEACHER" --distillation.kd_weight "$KD_WEIGHT" \
  --distillation.temperature "$TEMPERATURE" "${HIDDEN_ARGS[@]}"

"$PY" - "$WORK" "$TASK" <<'PYTHON' | tee "$WORK/summary.md"
# Every finished run in $WORK: validation accuracy at each evaluation, and its last against the reference, the better
# of the teacher and every control at its best (so that extra training cannot pass for recovery). The same points go
# to $WORK/recovery.csv (docs/results/make_figures.py draws them).
import csv, json, os, sys

work, task = sys.argv[1:]
def history(name):
    with open(os.path.join(work, name, "results.json")) as fh:
        return {h["step"]: 100 * h["accuracy"] for h in json.load(fh)["history"]}
runs = {n: history(n) for n in sorted(os.listdir(work)) if os.path.isfile(os.path.join(work, n, "results.json"))}
with open(os.path.join(work, "recovery.csv"), "w", newline="") as fh:
    points = csv.writer(fh)
    points.writerow(["task", "run", "step", "accuracy"])
    for name, h in runs.items():
        points.writerows([task, name, step, f"{accuracy:.2f}"] for step, accuracy in sorted(h.items()))
teacher = runs.pop("teacher", None)
if teacher is None:
    sys.exit(0)
reference = max([max(teacher.values())] + [max(h.values()) for n, h in runs.items() if n.startswith("control")])
print("teacher validation accuracy at each evaluation: " + ", ".join(f"{s}: {a:.2f}" for s, a in sorted(teacher.items())))
print(f"reference (better of teacher and control at its best): {reference:.2f}\n")
if not runs:
    sys.exit(0)
steps = sorted(set().union(*runs.values()))
print("| run | " + " | ".join(f"{s} updates" for s in steps) + " | last / reference |")
print("| --- |" + " --- |" * (len(steps) + 1))
for name, h in runs.items():
    cells = " | ".join(f"{h[s]:.2f}" if s in h else "" for s in steps)
    print(f"| {name} | {cells} | {100 * h[max(h)] / reference:.1f}% |")
PYTHON
