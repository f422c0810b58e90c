# Sourced by the evidence scripts (distillation_evidence.sh, long_input_cv.sh): one fine-tuning run, timed.
#
#   finetune_run NAME ARGS...   runs `$PY -m linformer_hf.training.finetune ARGS...` into $WORK/NAME, appends its wall
#                               time and load to $WORK/times.tsv, and is skipped when $WORK/NAME/results.json exists;
#                               a run killed after a checkpoint resumes from the latest one.
mkdir -p "$WORK"
[ -f "$WORK/times.tsv" ] || printf 'run\tseconds\tload_before\tload_after\n' >"$WORK/times.tsv"

finetune_run() {
  local name=$1
  shift
  if [ -f "$WORK/$name/results.json" ]; then
    echo "skip $name (done)"
    return
  fi
  local load_before start
  load_before=$(cut -d' ' -f1 /proc/loadavg)
  start=$(date +%s)
  local start_args=(--training.overwrite_output_dir true)  # a run that never reached a checkpoint starts again
  if compgen -G "$WORK/$name/checkpoint-*" >/dev/null; then  # killed after one: continue from the latest
    start_args=(--training.resume_from_checkpoint latest)
  fi
  echo "== $name: $PY -m linformer_hf.training.finetune $* --training.output_dir $WORK/$name ${start_args[*]}"
  "$PY" -m linformer_hf.training.finetune "$@" --training.output_dir "$WORK/$name" "${start_args[@]}"
  printf '%s\t%s\t%s\t%s\n' "$name" "$(($(date +%s) - start))" "$load_before" "$(cut -d' ' -f1 /proc/loadavg)" \
    >>"$WORK/times.tsv"
}
