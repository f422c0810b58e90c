#!/usr/bin/env bash
# Issue 37 on a GPU in one device call, the second session: what the first (2026-11-26, an H100,
# docs/results/compiled-gpu-h100.md) left unmeasured, most wanted first, each beside its baselines (RoBERTa-SDPA and
# eager) measured in the same call. 12 base layers, 32,768 tokens a batch, bf16 autocast unless named; tokens/s, peak
# memory, the fraction of the measured matmul peak, each model's compile time and the graphs compiled after the
# first step:
#   1. n = 512: bf16 eager and compiled per layer (`bf16`, `bf16-compiled-layers`), inference and training, of
#      RoBERTa-SDPA, Linformer (k = 256), Performer (m = 256; fp32 FAVOR+) and Performer with bf16 feature maps
#      (`performer-bf16`); n = 16384: the same two runs of plain Performer (fp32 FAVOR+), Performer bf16 and Performer
#      bf16 with its feature maps recomputed in backward (`performer-bf16-recompute`: the memory target) beside
#      RoBERTa-SDPA;
#   2. n = 4096, training only, RoBERTa-SDPA and Linformer: bf16 eager, then the whole model compiled
#      (`bf16-compiled`; the first session's compiles of it ran past its time and left no figure, not even their
#      compile times), then, as far as the time goes, fp16 compiled per layer against bf16 compiled per layer, the
#      V100's recipe (`bf16-compiled-layers`, `fp16-compiled-layers`, then `fp16` eager).
# Each model's compile has a limit of its own (GPU_SESSION_COMPILE_S, default a quarter of the total: 125 s): one
# over it fails alone, with its time, and the others are timed; a stage killed at its end still keeps every compile
# that ended. Ends by itself within GPU_SESSION_TOTAL_S (default 500 s).
#
# The device tool's call (nothing to carry; the image has torch and transformers; kind left out: an H100, or an H200,
# which the report names):
#
#   run(command="bash experiments/gpu_session.sh", timeout_s=580)
#
# The tool sends the checkout the session started in: this script must be committed there. The session has about 10
# device minutes, the machine's start (1-2 minutes) included: 500 s of work leaves room for it, and for the files'
# way back. Call give_back at once after the call: no second one fits.
#
# Files it returns (read-only, under the reply's files_at):
#   report.md    the compiled-against-eager table (a failed point with its reason and, where its compile ended, its
#                compile time), then each gpu_checks report (environment, grids)
#   results.csv  every point, the benchmark's columns with the run's name first (benchmarks.read_csv reads it)
#   log.txt      everything the command printed, each model's compile time as it ended included
# What to do with them: copy results.csv to docs/results/data/<h100|h200>_compiled_bf16_2.csv; record the figures,
# the device, the software versions (report.md's environment) and this command beside the first session's on
# docs/results/compiled-gpu-<h100|h200>.md, and in docs/performance.md's "Compiled execution"; answer issue 37's GPU
# items with it. A point `failed` with "compile timed out after ... s" ran past its compile's limit (the reason says
# which); with "timed out" alone it ran past its stage's end; a run `not run (time budget)` was never started.
#
# Budget (seconds from the start at the default 500; each stage is one process, ~20 s to start and end and ~12 s
# for its matmul peak; every stage writes as it goes, and the files under $OUT are refreshed every 20 s):
#   0-~5      nvidia-smi, the versions
#   ~5-200    stage 1: environment, the bf16 matmul peak; eager n = 512 (~26 s) and 16384 (~20 s); compiled per layer
#             n = 512 (~60 s) and 16384 (~50 s); hard end 250 s
#   ~200-480  stage 2: the peak, n = 4096 training eager (~12 s), the whole model compiled (60-120 s a model, each
#             within 125 s, and within what the stage has left less the time kept to time the models), then per
#             layer bf16 and fp16 (~20 s each) and fp16 eager (~10 s), as far as the time goes; hard end 480 s
#   480-495   the last gathering of the files; `timeout` stops a stage that overruns
#
# CPU dry run (what tests/test_gpu_session.py runs; tiny models, fp32, the `eager` compile backend; about 2 minutes on 2
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
TOTAL=${GPU_SESSION_TOTAL_S:-500}
COMPILE_S=${GPU_SESSION_COMPILE_S:-$((TOTAL / 4))}
WORK=${GPU_SESSION_WORK:-/tmp/gpu_session_$$}
START=$(date +%s)
exec > >(tee -a "$OUT/log.txt") 2>&1

if [ "${GPU_SESSION_TINY:-0}" = 1 ]; then
    # the smallest whole session: Linformer and its baseline, each stage at n of its own, the `eager` compile backend
    COMMON=(--device cpu --tiny --realistic_ks 16 --realistic_compile_backend eager)
    NS_1=(128 256)
    MODELS_1=(roberta-sdpa linformer)
    BY_N_1=(256=roberta-sdpa)
    NS_2=(64)
    MODELS_2=(roberta-sdpa linformer)
else
    COMMON=(--device cuda --realistic_ks 256)
    NS_1=(512 16384)
    MODELS_1=(roberta-sdpa linformer performer performer-bf16)
    BY_N_1=(16384=roberta-sdpa,performer,performer-bf16,performer-bf16-recompute)
    NS_2=(4096)
    MODELS_2=(roberta-sdpa linformer)
fi
COMMON+=(--realistic_compile_timeout_s "$COMPILE_S")
at() { echo $((START + TOTAL * $1 / 1000)); }  # the Unix time at $1 thousandths of TOTAL
left() { local s=$(($1 - $(date +%s))); echo $((s > 1 ? s : 1)); }  # seconds until the Unix time $1

echo "gpu session: $(date -u +%FT%TZ), total ${TOTAL} s, compiles within ${COMPILE_S} s, work in $WORK, files to $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"transformers", transformers.__version__, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")'

( while sleep 20; do "$PY" -m experiments.gpu_session "$OUT" "$WORK/a" "$WORK/b"; done ) >/dev/null 2>&1 &
GATHER=$!

# Each run's budget is the whole session: only the stage's hard end (--realistic_stop_at) stops a run from starting.
# Stage 1 (most wanted): eager and compiled per layer at n = 512 (the four models) and 16384 (plain Performer and its
# baseline); hard end at 250 s (0.500 of 500).
timeout -k 10 "$(left "$(at 520)")" "$PY" -m experiments.gpu_checks --output_dir "$WORK/a" \
    --parts environment realistic_grid --realistic_runs bf16 bf16-compiled-layers "${COMMON[@]}" \
    --realistic_ns "${NS_1[@]}" --realistic_models "${MODELS_1[@]}" --realistic_models_by_n "${BY_N_1[@]}" \
    --realistic_run_budgets_s "$TOTAL" "$TOTAL" --realistic_stop_at "$(at 500)"
echo "stage 1 exit $? at $(($(date +%s) - START)) s"

# Stage 2: n = 4096, training: eager, the whole model compiled, then per layer bf16 and fp16, fp16 eager; hard end
# at 480 s.
timeout -k 10 "$(left "$(at 975)")" "$PY" -m experiments.gpu_checks --output_dir "$WORK/b" \
    --parts realistic_grid --realistic_runs bf16 bf16-compiled bf16-compiled-layers fp16-compiled-layers fp16 \
    "${COMMON[@]}" --realistic_ns "${NS_2[@]}" --realistic_modes train --realistic_models "${MODELS_2[@]}" \
    --realistic_run_budgets_s "$TOTAL" "$TOTAL" "$TOTAL" "$TOTAL" "$TOTAL" --realistic_stop_at "$(at 960)"
echo "stage 2 exit $? at $(($(date +%s) - START)) s"

kill "$GATHER" 2>/dev/null
wait "$GATHER" 2>/dev/null
"$PY" -m experiments.gpu_session "$OUT" "$WORK/a" "$WORK/b"
echo "gpu session done in $(($(date +%s) - START)) s; files in $OUT:"
ls -l "$OUT"
exit 0
