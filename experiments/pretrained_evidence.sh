#!/usr/bin/env bash
# The evidence of docs/results/pretrained-minilm.md in one go: convert a pretrained BERT/RoBERTa-layout encoder to Linformer
# (k = 64, 128, 256) and Performer (m = 256), transfer the teacher's attention, measure fidelity, probe frozen
# embeddings, fine-tune on SST-2 (3 seeds) and IMDB, and measure how fast a converted classifier recovers.
#
#   TEACHER=/tmp/minilm/all-MiniLM-L6-v2 bash experiments/pretrained_evidence.sh all
#   TEACHER=sentence-transformers/all-MiniLM-L6-v2 ...     # online; roberta-base / bert-base-uncased likewise
#
# Phases: `transfer` (conversions, transfers, fidelity, probes), `finetune` (fine-tuning and recovery), `all`
# (both), `variants`: stage-1 transfer with each --layer_loss in $LAYER_LOSSES at each k in $VARIANT_KS (stage 1
# only, $LAYER_STEPS steps), each then scored for fidelity on SST-2 dev and fine-tuned on $VARIANT_TASK ($VARIANT_SEEDS),
# beside the converted model without transfer and the teacher (docs/results/distillation.md, sixth run); and `long`:
# a Linformer at n = $LONG_N from the same teacher against the teacher truncated to its own n, on the IMDB reviews
# longer than that (docs/results/long-inputs-minilm.md).
# Every step writes into its own folder under $WORK and is skipped when that folder already holds its result, so a
# stopped run continues where it stopped; a new $WORK starts over. Per-step wall times go to $WORK/times.tsv.
# Meant for a GPU (about 15 minutes on an H100); on 2 CPU cores it takes hours: lower the knobs below to try it.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TEACHER=${TEACHER:?set TEACHER to the teacher folder or Hub name}
DATA=${DATA:-../shared/data}
WORK=${WORK:-outputs/pretrained_evidence}
N=${N:-512}
KS=${KS:-64 128 256}
FEATURES=${FEATURES:-256}
LAYER_STEPS=${LAYER_STEPS:-400}
E2E_STEPS=${E2E_STEPS:-400}
TRANSFER_BATCH=${TRANSFER_BATCH:-16}
LENGTHS=${LENGTHS:-32 128 512}
SEEDS=${SEEDS:-1 2 3}
SST2_TRAIN=${SST2_TRAIN:-20000}
EPOCHS_SST2=${EPOCHS_SST2:-1}
EPOCHS_IMDB=${EPOCHS_IMDB:-3}
EPOCHS_QNLI=${EPOCHS_QNLI:-5}   # 3,570 training pairs: 560 updates of 32
LR=${LR:-5e-5}
PRECISION=${PRECISION:-no}
RECOVERY_STEPS=${RECOVERY_STEPS:-200}
EVAL_DOCS=${EVAL_DOCS:-256}
LONG_N=${LONG_N:-2048}
LONG_K=${LONG_K:-512}
LONG_LENGTHS=${LONG_LENGTHS:-$LONG_N}   # mixing 128 and 512 in damaged L = 2048 (docs/results/long-inputs-minilm.md)
LONG_STEPS=${LONG_STEPS:-150}
LONG_PROJECTION_LR=${LONG_PROJECTION_LR:-2e-4}
LONG_BATCH=${LONG_BATCH:-4}
EPOCHS_LONG=${EPOCHS_LONG:-1}
VARIANT_KS=${VARIANT_KS:-128 256}
# E's initialisation in every conversion of the pretrained encoder (scripts/convert_to_linformer.py --projection_init);
# another than neighbour_average is named in the folders: linformer-k128-strided, ...
PROJECTION_INIT=${PROJECTION_INIT:-neighbour_average}
case "$PROJECTION_INIT" in
  neighbour_average | strided | random) ;;
  *) echo "error: PROJECTION_INIT must be neighbour_average, strided or random, got '$PROJECTION_INIT'" >&2; exit 2 ;;
esac
LAYER_LOSSES=${LAYER_LOSSES:-attention_output attention_weights hidden_states}
VARIANT_SEEDS=${VARIANT_SEEDS:-1}
VARIANT_TASK=${VARIANT_TASK:-sst2}  # sst2 (SST-2 dev), qnli (20% of the shared pairs held out, split seed 1) or imdb
VARIANT_RUNS=${VARIANT_RUNS:-}   # e.g. "k128-attention_output k256-converted teacher": only these, in this order
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1} TOKENIZERS_PARALLELISM=false
mkdir -p "$WORK"
phase=${1:-all}

timed() {  # timed NAME DONE_FILE command...: run unless DONE_FILE exists; log the wall time
  local name=$1 done_file=$2
  shift 2
  if [ -e "$done_file" ]; then echo "== $name: done before ($done_file)"; return; fi
  echo "== $name"
  local start=$SECONDS
  "$@"
  printf '%s\t%s\n' "$name" $((SECONDS - start)) >>"$WORK/times.tsv"
}

continue_finetune() {  # the flags for a fine-tune into folder $1 that a kill stopped: resume it, or start it over
  if compgen -G "$1/checkpoint-*" >/dev/null; then echo --training.resume_from_checkpoint latest
  elif [ -n "$(ls -A "$1" 2>/dev/null)" ]; then echo --training.overwrite_output_dir true; fi
}

continue_transfer() {  # the flags for a transfer into folder $1 that a kill stopped: resume it, or start it over
  # checkpoint-N: the Trainer's; checkpoints/: the loop transfer ran on before it (still resumable)
  if compgen -G "$1/checkpoint-*" >/dev/null || [ -n "$(ls -A "$1/checkpoints" 2>/dev/null)" ]; then
    echo --resume latest
  elif [ -n "$(ls -A "$1" 2>/dev/null)" ]; then echo --overwrite_output_dir; fi
}

linformer() {  # linformer K: the folder of the teacher converted at k = K
  if [ "$PROJECTION_INIT" = neighbour_average ]; then echo "$WORK/linformer-k$1"
  else echo "$WORK/linformer-k$1-$PROJECTION_INIT"; fi
}

convert_linformer() {  # convert_linformer K: the teacher as a Linformer at n = $N, k = K, E = F per layer
  timed "convert k=$1 $PROJECTION_INIT" "$(linformer "$1")/config.json" "$PY" scripts/convert_to_linformer.py \
    "$TEACHER" "$(linformer "$1")" --max_sequence_length "$N" --projected_length "$1" --sharing key_value \
    --projection_init "$PROJECTION_INIT"
}

fidelity() {  # fidelity MODEL TASK LENGTH...: MODEL against the teacher on TASK's held-out text (never transferred on)
  local model=$1 task=$2 src
  shift 2
  if [ "$task" = sst2 ]; then src=(--dataset csv --data_files "$DATA/sst2/dev.tsv" --text_column sentence)
  else src=(--dataset csv --data_files "$DATA/imdb/train.csv" --text_column text); fi
  timed "fidelity $(basename "$model") $task" "$WORK/fidelity/$(basename "$model")-$task/fidelity.json" \
    "$PY" -m linformer_hf.training.transfer --teacher "$TEACHER" --student "$model" \
    --output_dir "$WORK/fidelity/$(basename "$model")-$task" "${src[@]}" --lengths "$@" \
    --evaluate_only --eval_documents "$EVAL_DOCS" --show_progress false
}

sst2=(--data.train_file "$DATA/sst2/train.tsv" --data.validation_file "$DATA/sst2/dev.tsv"
  --data.max_train_samples "$SST2_TRAIN")
imdb=(--data.train_file "$DATA/imdb/train.csv" --data.max_seq_length "$N")
qnli=(--data.train_file "$DATA/qnli/train.tsv" --data.validation_split_percentage 20 --data.split_seed 1)
finetune() {  # finetune TASK MODEL_DIR OUT SEED [extra overrides]
  local task=$1 model=$2 out=$3 seed=$4
  shift 4
  local data epochs
  case $task in
    sst2) data=("${sst2[@]}") epochs=$EPOCHS_SST2 ;;
    qnli) data=("${qnli[@]}") epochs=$EPOCHS_QNLI ;;
    imdb) data=("${imdb[@]}") epochs=$EPOCHS_IMDB ;;
  esac
  timed "finetune $task $(basename "$model") seed $seed" "$out/results.json" \
    "$PY" -m linformer_hf.training.finetune --no_progress --config "configs/finetune/$task.yaml" \
    --model.pretrained "$model" "${data[@]}" --training.output_dir "$out" --training.seed "$seed" \
    --training.num_train_epochs "$epochs" --training.learning_rate "$LR" \
    --training.mixed_precision "$PRECISION" $(continue_finetune "$out") "$@"
}

students() {  # the model folders: converted and transferred
  for k in $KS; do echo "$(linformer "$k")" "$(linformer "$k")-transferred"; done
  echo "$WORK/performer-m$FEATURES" "$WORK/performer-m$FEATURES-transferred"
}

if [ "$phase" = transfer ] || [ "$phase" = all ]; then
  for k in $KS; do
    convert_linformer "$k"
  done
  timed "convert performer m=$FEATURES" "$WORK/performer-m$FEATURES/config.json" \
    "$PY" scripts/convert_to_linformer.py "$TEACHER" "$WORK/performer-m$FEATURES" --family performer \
    --max_sequence_length "$N" --num_random_features "$FEATURES"
  # Transfer on WikiText-2 (held out from both downstream tasks); stage 1 trains E, F and W^Q, W^K, W^V.
  for student in $(students | tr ' ' '\n' | grep -v transferred); do
    timed "transfer $(basename "$student")" "$student-transferred/transfer_report.json" \
      "$PY" -m linformer_hf.training.transfer --teacher "$TEACHER" --student "$student" \
      --output_dir "$student-transferred" --text_files "$DATA/wikitext-2/valid.txt" --lengths $LENGTHS \
      --batch_size "$TRANSFER_BATCH" --layer_steps "$LAYER_STEPS" --end_to_end_steps "$E2E_STEPS" \
      --train_attention_weights --eval_documents "$EVAL_DOCS" --checkpoint_every 200 --log_every 20 \
      --show_progress false $(continue_transfer "$student-transferred")
  done
  # Fidelity on the downstream texts (never seen in transfer).
  for student in $(students); do
    for task in sst2 imdb; do fidelity "$student" "$task" 32 "$N"; done
  done
  for task in sst2 imdb; do
    if [ $task = sst2 ]; then data=("${sst2[@]}"); else data=("${imdb[@]}"); fi
    timed "probe $task" "$WORK/probe-$task.json" "$PY" -m experiments.embedding_probe \
      --config "configs/finetune/$task.yaml" "${data[@]}" --output "$WORK/probe-$task.json" \
      --models "$TEACHER" $(students)
  done
fi

if [ "$phase" = finetune ] || [ "$phase" = all ]; then
  for seed in $SEEDS; do
    for model in "$TEACHER" "$(linformer 128)" "$(linformer 128)-transferred"; do
      finetune sst2 "$model" "$WORK/finetune/sst2-$(basename "$model")-seed$seed" "$seed"
    done
  done
  first_seed=${SEEDS%% *}
  finetune sst2 "$WORK/performer-m$FEATURES-transferred" \
    "$WORK/finetune/sst2-performer-m$FEATURES-transferred-seed$first_seed" "$first_seed"
  for model in "$TEACHER" "$(linformer 128)" "$(linformer 128)-transferred" \
    "$WORK/performer-m$FEATURES-transferred"; do
    finetune imdb "$model" "$WORK/finetune/imdb-$(basename "$model")" 42
  done
  # Recovery: the teacher's fine-tuned SST-2 classifier, converted (its weights all carry over), then fine-tuned on.
  classifier="$WORK/finetune/sst2-$(basename "$TEACHER")-seed$first_seed/best"
  timed "convert classifier k=128" "$WORK/classifier-k128/config.json" "$PY" scripts/convert_to_linformer.py \
    "$classifier" "$WORK/classifier-k128" --max_sequence_length "$N" --projected_length 128 --sharing key_value
  timed "convert classifier performer" "$WORK/classifier-performer/config.json" \
    "$PY" scripts/convert_to_linformer.py "$classifier" "$WORK/classifier-performer" --family performer \
    --max_sequence_length "$N" --num_random_features "$FEATURES"
  for model in "$WORK/classifier-k128" "$WORK/classifier-performer"; do
    finetune sst2 "$model" "$WORK/finetune/recovery-$(basename "$model")" "$first_seed" \
      --training.max_steps "$RECOVERY_STEPS" --training.eval_steps 25 --training.eval_on_start true
  done
fi
if [ "$phase" = variants ]; then
  # Each run is named k<K>-<layer_loss>, k<K>-converted (no transfer) or teacher; all of them by default.
  runs=$VARIANT_RUNS
  if [ -z "$runs" ]; then
    for k in $VARIANT_KS; do
      runs="$runs k$k-converted"
      for loss in $LAYER_LOSSES; do runs="$runs k$k-$loss"; done
    done
    runs="teacher $runs"
  fi
  case "$VARIANT_TASK" in
    sst2 | qnli | imdb) ;;
    *) echo "error: VARIANT_TASK must be sst2, qnli or imdb, got '$VARIANT_TASK'" >&2; exit 2 ;;
  esac
  for run in $runs; do  # every name checked before any work
    case "$run" in
      teacher | k[0-9]*-converted | k[0-9]*-attention_output | k[0-9]*-attention_weights | k[0-9]*-hidden_states) ;;
      *) echo "error: VARIANT_RUNS: '$run' is not teacher, k<K>-converted or k<K>-<layer_loss>" \
           "(attention_output, attention_weights, hidden_states)" >&2; exit 2 ;;
    esac
  done
  for run in $runs; do
    if [ "$run" = teacher ]; then model=$TEACHER
    else
      k=${run%%-*}; k=${k#k}; loss=${run#*-}
      convert_linformer "$k"
      model=$(linformer "$k")
      if [ "$loss" != converted ]; then
        model="$WORK/variants/$(basename "$(linformer "$k")")-$loss"
        timed "transfer k=$k $loss" "$model/transfer_report.json" \
          "$PY" -m linformer_hf.training.transfer --teacher "$TEACHER" --student "$(linformer "$k")" \
          --output_dir "$model" --text_files "$DATA/wikitext-2/valid.txt" --lengths $LENGTHS \
          --batch_size "$TRANSFER_BATCH" --layer_steps "$LAYER_STEPS" --layer_loss "$loss" \
          --train_attention_weights --eval_documents 64 --eval_windows 4 --checkpoint_every 50 --log_every 10 \
          --show_progress false $(continue_transfer "$model")
      fi
      fidelity "$model" sst2 32
    fi
    for seed in $VARIANT_SEEDS; do
      finetune "$VARIANT_TASK" "$model" "$WORK/finetune/$VARIANT_TASK-$(basename "$model")-seed$seed" "$seed"
    done
  done
fi
if [ "$phase" = long ]; then
  teacher_long="$WORK/teacher-n$LONG_N"
  long="$WORK/long-n$LONG_N-k$LONG_K"
  # The teacher with its positions copied out to LONG_N: full attention at that length, the transfer's teacher.
  timed "extend teacher n=$LONG_N" "$teacher_long/config.json" \
    "$PY" -m experiments.long_input extend "$TEACHER" "$teacher_long" --n "$LONG_N"
  timed "convert n=$LONG_N k=$LONG_K" "$long/config.json" "$PY" scripts/convert_to_linformer.py "$TEACHER" "$long" \
    --max_sequence_length "$LONG_N" --projected_length "$LONG_K" --sharing key_value
  timed "transfer n=$LONG_N k=$LONG_K" "$long-transferred/transfer_report.json" \
    "$PY" -m linformer_hf.training.transfer --teacher "$teacher_long" --student "$long" \
    --output_dir "$long-transferred" --text_files "$DATA/wikitext-2/valid.txt" --lengths $LONG_LENGTHS \
    --batch_size "$LONG_BATCH" --layer_steps "$LONG_STEPS" --projection_learning_rate "$LONG_PROJECTION_LR" \
    --train_attention_weights --eval_documents 64 \
    --eval_windows 4 --checkpoint_every 50 --log_every 10 --show_progress false $(continue_transfer "$long-transferred")
  # Reviews the teacher reads whole (fit / train on them) and longer ones (scored on them).
  timed "split imdb by length" "$WORK/imdb-by-length/long.csv" \
    "$PY" -m experiments.long_input split --data "$DATA/imdb/train.csv" --tokenizer "$TEACHER" \
    "$WORK/imdb-by-length"
  timed "probe long reviews" "$WORK/probe-long.json" "$PY" -m experiments.long_input probe \
    --data "$DATA/imdb/train.csv" --models "$TEACHER" "$teacher_long" "$long" "$long-transferred" \
    --reference "$teacher_long" --output "$WORK/probe-long.json"
  for model in "$TEACHER" "$long-transferred"; do
    timed "finetune long reviews $(basename "$model")" "$WORK/finetune/long-$(basename "$model")/results.json" \
      "$PY" -m linformer_hf.training.finetune --no_progress --config configs/finetune/imdb.yaml \
      --model.pretrained "$model" --data.train_file "$WORK/imdb-by-length/short.csv" \
      --data.validation_file "$WORK/imdb-by-length/long.csv" --training.output_dir "$WORK/finetune/long-$(basename "$model")" \
      --training.seed 42 --training.num_train_epochs "$EPOCHS_LONG" --training.learning_rate "$LR" \
      --training.mixed_precision "$PRECISION"
  done
fi
echo "== times"; cat "$WORK/times.tsv"
