#!/usr/bin/env bash
# Issue 37 on a GPU in one device call, the third session: what the H100 (docs/results/compiled-gpu-h100.md) and the
# H200 (docs/results/compiled-gpu-h200.md) sessions of 2026-11-26 left unmeasured, most wanted first, each beside
# RoBERTa-SDPA measured in the same process. 12 base layers, 32,768 tokens a batch, bf16 autocast unless named,
# training steps (forward, backward, AdamW); tokens/s, peak memory, the fraction of the measured matmul peak, each
# model's compile time and the graphs compiled after the first step:
#   1. n = 512, RoBERTa-SDPA and Linformer (k = 256): eager (`bf16`), compiled per layer (`bf16-compiled-layers`),
#      then the whole model compiled (`bf16-compiled`): the target of 1.0x RoBERTa-SDPA at n = 512, where both
#      per layer gave 0.91x on the H200 and the whole-model compile gave the Linformer 1.21x its per-layer speed at
#      4096. Set the Linformer whole against RoBERTa-SDPA's fastest mode (per layer: its whole-model compile runs
#      slower than its eager);
#   2. n = 4096, RoBERTa-SDPA, Performer with bf16 feature maps (`performer-bf16`) and the same recomputing its
#      feature maps in backward (`performer-bf16-recompute`): eager and compiled per layer. The Performer's 1.0x
#      target at 4096 with its memory at most 1.5x RoBERTa-SDPA's (the H200 measured both only at 16384);
#   3. a kernel profile (torch.profiler, one training step of one layer at n = 4096, batch 8) of the Linformer, then
#      RoBERTa-SDPA, each eager and compiled per layer, in bf16 and in fp16 with loss scaling: why the Linformer
#      compiled per layer ran 1.12x faster in fp16 than in bf16 on the H200 (RoBERTa-SDPA 1.00x).
# Each model's compile has a limit of its own (GPU_SESSION_COMPILE_S, default a quarter of the total: 125 s): one
# over it fails alone, with its time, and the others are timed; a stage killed at its end still keeps every compile
# that ended. Ends by itself within GPU_SESSION_TOTAL_S (default 500 s).
#
# The device tool's call (nothing to carry; the image has torch and transformers; kind left out: an H100, or an H200,
# which the report names):
#
#   run(command="bash experiments/gpu_session.sh", timeout_s=580)
#
# The tool sends the checkout the session started in: this script must be committed there. 500 s of work leaves room
# in a 10-minute command for the machine's start and the files' way back. Call give_back at once after the call
# unless a second, prepared call follows at once.
#
# Files it returns (read-only, under the reply's files_at; five, named with letters, dots and underscores):
#   report.md    the compiled-against-eager table (a failed point with its reason and, where its compile ended, its
#                compile time), then each gpu_checks report (environment, grids, profile)
#   results.csv  every point, the benchmark's columns with the run's name first (benchmarks.read_csv reads it)
#   profile.txt, profile.csv  torch.profiler's kernels of each profiled step (profile_<model>[_fp16][_compiled])
#   log.txt      everything the command printed, each model's compile time as it ended included
# What to do with them: copy results.csv to docs/results/data/<h100|h200>_compiled_bf16_3.csv and profile.txt to
# docs/results/data/<h100|h200>_compiled_profile_fp16.txt; record the figures, the device, the software versions
# (report.md's environment) and this command as a dated section of docs/results/compiled-gpu-<h100|h200>.md (each
# ratio within one card: the cards differ in memory bandwidth), add the CSV to that card's files in
# docs/results/make_figures.py (COMPILED) and to its page test in tests/test_docs_figures.py, and update
# docs/performance.md's "Compiled execution"; answer issue 37's GPU items with it. A point `failed` with "compile
# timed out after ... s" ran past its compile's limit (the reason says which); with "timed out" alone it ran past its
# stage's end; a run `not run (time budget)` was never started; a profile missing from profile.txt was not reached.
#
# Budget (seconds from the start at the default 500; each grid stage is one process, ~20 s to start and end and ~12 s
# for its matmul peak; every stage writes as it goes, and the files under $OUT are refreshed every 20 s). The
# expected times are the H200's of 2026-11-26:
#   0-~5      nvidia-smi, the versions
#   ~5-150    stage 1: environment, the peak; n = 512 training eager (~15 s), per layer (~25 s), the whole model
#             (~35 s a compile, each within 125 s and within what the stage has left); hard end 220 s
#   ~150-230  stage 2: the peak; n = 4096 training eager (~20 s), per layer (~45 s); hard end 340 s
#   ~230-310  stage 3: the profiles, ~40 s a model (two compiles of one layer); stopped at 480 s by `timeout`
#   480-495   the last gathering of the files; `timeout` stops a stage that overruns
#
# CPU dry run (what tests/test_gpu_session.py runs; tiny models, fp32, the `eager` compile backend; about 2-3 minutes
# on 2 busy cores):
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
    # the smallest whole session: each stage's models at an n of its own, the `eager` compile backend, one fp32
    # profile a model (a CPU profiles fp32 only)
    COMMON=(--device cpu --tiny --realistic_ks 16 --realistic_compile_backend eager)
    NS_1=(128)
    NS_2=(64)
else
    COMMON=(--device cuda --realistic_ks 256)
    NS_1=(512)
    NS_2=(4096)
fi
MODELS_1=(roberta-sdpa linformer)
MODELS_2=(roberta-sdpa performer-bf16 performer-bf16-recompute)
PROFILED=(linformer roberta-sdpa)
COMMON+=(--realistic_compile_timeout_s "$COMPILE_S")
at() { echo $((START + TOTAL * $1 / 1000)); }  # the Unix time at $1 thousandths of TOTAL
left() { local s=$(($1 - $(date +%s))); echo $((s > 1 ? s : 1)); }  # seconds until the Unix time $1

echo "gpu session: $(date -u +%FT%TZ), total ${TOTAL} s, compiles within ${COMPILE_S} s, work in $WORK, files to $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
"$PY" -c 'import torch, transformers; print("torch", torch.__version__, "cuda", torch.version.cuda,
"transformers", transformers.__version__, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu")'

( while sleep 20; do "$PY" -m experiments.gpu_session "$OUT" "$WORK/a" "$WORK/b" "$WORK/c"; done ) >/dev/null 2>&1 &
GATHER=$!

# Each run's budget is the whole session: only the stage's hard end (--realistic_stop_at) stops a run from starting.
# Stage 1 (most wanted): n = 512 training, eager, per layer, then the whole model; hard end at 220 s (0.440 of 500).
timeout -k 10 "$(left "$(at 460)")" "$PY" -m experiments.gpu_checks --output_dir "$WORK/a" \
    --parts environment realistic_grid --realistic_runs bf16 bf16-compiled-layers bf16-compiled "${COMMON[@]}" \
    --realistic_ns "${NS_1[@]}" --realistic_modes train --realistic_models "${MODELS_1[@]}" \
    --realistic_run_budgets_s "$TOTAL" "$TOTAL" "$TOTAL" --realistic_stop_at "$(at 440)"
echo "stage 1 exit $? at $(($(date +%s) - START)) s"

# Stage 2: n = 4096 training of the Performer (bf16 feature maps, kept and recomputed) beside RoBERTa-SDPA, eager and
# per layer; hard end at 340 s.
timeout -k 10 "$(left "$(at 700)")" "$PY" -m experiments.gpu_checks --output_dir "$WORK/b" \
    --parts realistic_grid --realistic_runs bf16 bf16-compiled-layers "${COMMON[@]}" --realistic_ns "${NS_2[@]}" \
    --realistic_modes train --realistic_models "${MODELS_2[@]}" --realistic_run_budgets_s "$TOTAL" "$TOTAL" \
    --realistic_stop_at "$(at 680)"
echo "stage 2 exit $? at $(($(date +%s) - START)) s"

# Stage 3: the one-layer profiles at n = 4096, Linformer then RoBERTa-SDPA, eager and per layer, bf16 then fp16;
# stopped at 480 s (each profile is written as it ends).
timeout -k 10 "$(left "$(at 960)")" "$PY" -m experiments.gpu_checks --output_dir "$WORK/c" \
    --parts profile --profile_models "${PROFILED[@]}" --profile_compile layers --profile_dtypes bf16 fp16 \
    "${COMMON[@]}"
echo "stage 3 exit $? at $(($(date +%s) - START)) s"

kill "$GATHER" 2>/dev/null
wait "$GATHER" 2>/dev/null
"$PY" -m experiments.gpu_session "$OUT" "$WORK/a" "$WORK/b" "$WORK/c"
echo "gpu session done in $(($(date +%s) - START)) s; files in $OUT:"
ls -l "$OUT"
exit 0
