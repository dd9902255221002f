#!/usr/bin/env bash
# Stitching on the GPU, in paired rounds (bench/paired_rounds.py), CPUs pinned: steps/s against
# gmem without stitching, NVML peak above idle against each framework's own pool, and whether
# every run printed the same losses or checksums.
#   bench/stitch_gpu.sh [OUT_DIR]      (default build/bench/stitch; needs a GPU)
# Environment: BUILD (build; a bundle's .device/build with GMEM_PREBUILT=1), GMEM_LIB
# ($BUILD/lib/libgmem.so), ROUNDS (6), CPUS (0-7: taskset's list), WORKLOADS (smallconv gpt cupy
# jax), STEPS_SMALLCONV (300), STEPS_GPT (40), STEPS_CUPY (200), STEPS_JAX (120).
# Per workload: smallconv (the fast-step convnet) and gpt pooled by gmem (gmem, gmem-stitch,
# gmem-stitch-keep0, and PyTorch's expandable segments as the memory peer); cupy (gmem with
# CuPy's pool off, against CuPy's pool); jax (XLA's platform allocator under gmem, against
# XLA's BFC grown on demand). Writes OUT_DIR/WORKLOAD/rounds.jsonl and prints each workload's
# summary (paired_rounds.py's: steps/s ratio to gmem, median and range; NVML peak; losses).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${1:-$BUILD/bench/stitch}
GMEM_LIB=${GMEM_LIB:-$BUILD/lib/libgmem.so}
ROUNDS=${ROUNDS:-6}
CPUS=${CPUS:-0-7}
WORKLOADS=${WORKLOADS:-smallconv gpt cupy jax}
if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "stitch_gpu: skipped: no NVIDIA GPU found"
  exit 0
fi
if [ "${GMEM_PREBUILT:-0}" != 1 ]; then
  make --no-print-directory "$GMEM_LIB" >/dev/null || { echo "stitch_gpu: build failed"; exit 1; }
fi
rc=0
for w in $WORKLOADS; do
  case $w in
  smallconv) only=gmem,gmem-stitch,gmem-stitch-keep0,expandable steps=${STEPS_SMALLCONV:-300} ;;
  gpt) only=gmem,gmem-stitch,gmem-stitch-keep0,expandable steps=${STEPS_GPT:-40} ;;
  cupy) only=gmem,gmem-stitch,gmem-stitch-keep0,cupy-pool steps=${STEPS_CUPY:-200} ;;
  jax) only=gmem,gmem-stitch,gmem-stitch-keep0,jax-ondemand steps=${STEPS_JAX:-120} ;;
  *)
    echo "stitch_gpu: unknown workload '$w' (smallconv, gpt, cupy, jax)"
    exit 2
    ;;
  esac
  mkdir -p "$OUT/$w"
  : >"$OUT/$w/rounds.jsonl"
  cmd=(taskset -c "$CPUS" python3 bench/paired_rounds.py --out "$OUT/$w" --gmem-lib "$GMEM_LIB"
    --rounds "$ROUNDS" --only "$only" "$w" --steps "$steps")
  echo "${cmd[*]}" | tee -a "$OUT/commands.txt"
  "${cmd[@]}" 2>&1 | tee "$OUT/$w/summary.txt" | grep -v '^{"round"' || rc=1
done
exit $rc
