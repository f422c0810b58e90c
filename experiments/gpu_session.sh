#!/usr/bin/env bash
# Issue 37 on a GPU in one device call: eager and torch.compile'd training and inference of RoBERTa-SDPA, Linformer
# (k = 256) and Performer (m = 256; fp32 FAVOR+, and with bf16 feature maps: feature_map_dtype) at realistic load (12 base layers, 32,768 tokens a batch) at n = 4096, 512 and
# 16384, bf16, with tokens/s, peak memory, the fraction of the measured matmul peak, the compile time and the graphs
# compiled after the first step; then a kernel profile of one layer eager and compiled, per-layer compilation, and
# fp16 compiled, as far as the time goes. Ends by itself within GPU_SESSION_TOTAL_S (default 520 s).
#
# The device tool's call (nothing to carry; the image has torch and transformers; kind left out: an H100, or an H200,
# which the report names):
#
#   run(command="bash experiments/gpu_session.sh", timeout_s=580)
#
# The tool sends the checkout the session started in: this script must be committed there. With a machine start of
# 1-2 minutes the call takes 10-11 of the session's 15 device minutes, too few left for a second one: call give_back
# at once after it.
#
# Files it returns (read-only, under the reply's files_at):
#   report.md    the compiled-against-eager table, then each gpu_checks report (environment, profile, grids)
#   results.csv  every point, the benchmark's columns with the run's name first (benchmarks.read_csv reads it)
#   profile.txt, profile.csv  torch.profiler's top kernels of one layer's training step at n = 4096, eager and compiled
#   log.txt      everything the command printed
# What to do with them: copy results.csv to docs/results/data/<h100|h200>_compiled_bf16.csv and profile.txt beside
# it (<h100|h200>_compiled_profile.txt); record the figures, the device, the software versions (report.md's
# environment) and this command on a new page docs/results/compiled-gpu-<h100|h200>.md, linked from
# docs/results/README.md and docs/performance.md's "Compiled execution"; answer issue 37's GPU items with it. A point
# `failed` with "timed out" ran past the session's end; a run `not run (time budget)` was never started.
#
# Budget (seconds from the start; every stage writes as it goes, and the files under $OUT are refreshed every 20 s):
#   0-~15     python, torch and the benchmark's forkserver start; environment; the bf16 matmul peak
#   ~15-85    bf16 eager, the three models at each n, inference and training (the baseline, interleaved)
#   ~85-305   bf16 compiled (the whole model), the same points; no n starts after 305 s, none runs past 340 s
#   ~340-420  kernel profile, one layer at n = 4096, eager and compiled (second process); its compiled layer is the
#             graph of the per-layer run at n = 4096, which then comes from inductor's cache
#   ~420-495  bf16 compiled layer by layer, then fp16 compiled (the whole model): what is left; none past 495 s
#   505-520   the last gathering of the files; `timeout` stops a stage that overruns
#
# GPU_SESSION_NS="16384 512" (say) measures other n, in that order, the same way.
# CPU dry run (what tests/test_gpu_session.py runs; tiny models, fp32, the `eager` compile backend; 1-2 minutes on 2
# busy cores):
#   OUT=/tmp/out GPU_SESSION_TINY=1 bash experiments/gpu_session.sh
set -u
: "${OUT:?set OUT to the folder the files go to}"
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
PY=${PYTHON:-python3}
TOTAL=${GPU_SESSION_TOTAL_S:-520}
WORK=${GPU_SESSION_WORK:-/tmp/gpu_session_$$}
START=$(date +%s)
END=$((START + TOTAL))
exec > >(tee -a "$OUT/log.txt") 2>&1

if [ "${GPU_SESSION_TINY:-0}" = 1 ]; then
    # the smallest whole session: one model, one n, the profile of one model
    COMMON=(--device cpu --tiny --realistic_ns 128 --realistic_ks 16 --realistic_compile_backend eager)
    MODELS=(linformer)
    PROFILED=(linformer)
else
    read -r -a NS <<< "${GPU_SESSION_NS:-4096 512 16384}"  # a later session: the n an earlier one left out
    COMMON=(--device cuda --realistic_ns "${NS[@]}" --realistic_ks 256)
    MODELS=(roberta-sdpa linformer performer performer-bf16)
    PROFILED=(linformer roberta-sdpa performer performer-bf16)
fi
at() { echo $((START + TOTAL * $1 / 1000)); }  # the Unix time at $1 thousandths of TOTAL
left() { local s=$(($1 - $(date +%s))); echo $((s > 1 ? s : 1)); }  # seconds until the Unix time $1

echo "gpu session: $(date -u +%FT%TZ), total ${TOTAL} s, work folder $WORK, files to $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"transformers", transformers.__version__, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")'

( while sleep 20; do "$PY" -m experiments.gpu_session "$OUT" "$WORK/a" "$WORK/b"; done ) >/dev/null 2>&1 &
GATHER=$!

# Stage 1: environment, bf16 eager (70 s), bf16 compiled whole model (220 s); hard end at 340 s (0.654 of 520).
timeout -k 10 "$(left "$(at 680)")" "$PY" -m experiments.gpu_checks --output_dir "$WORK/a" \
    --parts environment realistic_grid --realistic_runs bf16 bf16-compiled "${COMMON[@]}" \
    --realistic_models "${MODELS[@]}" --realistic_run_budgets_s "$((TOTAL * 135 / 1000))" \
    "$((TOTAL * 423 / 1000))" --realistic_stop_at "$(at 654)"
echo "stage 1 exit $? at $(($(date +%s) - START)) s"

# Stage 2: the kernel profile (eager and compiled), bf16 compiled per layer, fp16 compiled; hard end at 495 s.
timeout -k 10 "$(left "$(at 960)")" "$PY" -m experiments.gpu_checks --output_dir "$WORK/b" \
    --parts profile realistic_grid --profile_compile layers --profile_models "${PROFILED[@]}" \
    --realistic_runs bf16-compiled-layers fp16-compiled "${COMMON[@]}" --realistic_models "${MODELS[@]}" \
    --realistic_run_budgets_s "$((TOTAL * 150 / 1000))" "$((TOTAL * 100 / 1000))" --realistic_stop_at "$(at 952)"
echo "stage 2 exit $? at $(($(date +%s) - START)) s"

kill "$GATHER" 2>/dev/null
wait "$GATHER" 2>/dev/null
"$PY" -m experiments.gpu_session "$OUT" "$WORK/a" "$WORK/b"
echo "gpu session done in $(($(date +%s) - START)) s; files in $OUT:"
ls -l "$OUT"
exit 0
