#!/usr/bin/env bash
# Runs the GPU benchmark suite and writes raw results to OUT_DIR (default build/bench/out):
#   env.json        GPU, driver, CUDA, torch, commit, date, host
#   alloc.jsonl     part 1, allocation cost (one line per allocator x test x size x threads)
#   workloads.jsonl parts 2 and 4, real workloads (one line per run)
#   trace-*.txt     allocation traces recorded from part 2, for part 3 (bench/replay)
#   replay.jsonl    part 3 on the GPU: the traces replayed through cudaMallocAsync and CUB
#   logs/           every program's output
# then bench/report.py turns them into bench/results/<date>-<gpu>.{md,csv,json}.
#
# Environment: BUILD (build), GMEM_LIB ($BUILD/lib/libgmem.so; gmem rows are skipped when it
# is missing), PARTS (alloc,torchalloc,workloads,replay), REPS (workload repetitions, 1),
# SECONDS_PER_CELL (0.25), GMEM_COMMIT (git rev-parse when unset), ONLY (workload runs whose
# "workload/mode" contains one of these comma-separated texts), REPS_ONLY (the same, for
# repetitions after the first), RECORD (1; empty: no traces), WL_TIMEOUT (240 s per run).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT_DIR=${1:-$BUILD/bench/out}
GMEM_LIB=${GMEM_LIB:-$BUILD/lib/libgmem.so}
PARTS=${PARTS:-alloc,torchalloc,workloads,replay}
REPS=${REPS:-1}
RECORD=${RECORD-1} # empty: do not record allocation traces (part 3 input)
SECONDS_PER_CELL=${SECONDS_PER_CELL:-0.25}
PY=${PYTHON:-python3}
mkdir -p "$OUT_DIR/logs"
have_part() { [[ ",$PARTS," == *",$1,"* ]]; }
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "bench-gpu: skipped: no NVIDIA GPU found (nvidia-smi -L lists none)"
  exit 0
fi
if [ ! -f "$GMEM_LIB" ]; then
  log "no $GMEM_LIB: gmem rows are skipped (build it with: make $BUILD/lib/libgmem.so)"
  GMEM_LIB=
fi
commit=${GMEM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
$PY - "$OUT_DIR/env.json" "$commit" "$GMEM_LIB" "$PARTS" "$REPS" "$SECONDS_PER_CELL" <<'EOF'
import json, platform, subprocess, sys, datetime
def sh(c):
    try: return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception: return ""
env = {"gpu": sh("nvidia-smi --query-gpu=name --format=csv,noheader | head -1"),
       "gpu_memory": sh("nvidia-smi --query-gpu=memory.total --format=csv,noheader | head -1"),
       "driver": sh("nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1"),
       "cuda_driver": sh("nvidia-smi | sed -n 's/.*CUDA Version: *\\([0-9.]*\\).*/\\1/p'"),
       "nvcc": sh("nvcc --version 2>/dev/null | tail -2 | head -1") or
               sh("/usr/local/cuda/bin/nvcc --version | tail -2 | head -1"),
       "torch": sh("python3 -c 'import torch;print(torch.__version__, torch.version.cuda)'"),
       "cupy": sh("python3 -c 'import cupy;print(cupy.__version__)' 2>/dev/null"),
       "jax": sh("python3 -c 'import jax;print(jax.__version__)' 2>/dev/null"),
       "cpu": sh("nproc") + " cores, " + platform.machine(),
       "kernel": platform.release(), "commit": sys.argv[2], "gmem_lib": sys.argv[3],
       "parts": sys.argv[4], "reps": int(sys.argv[5]), "seconds_per_cell": float(sys.argv[6]),
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
json.dump(env, open(sys.argv[1], "w"), indent=1)
print(env)
EOF

AB=$BUILD/bench/alloc_bench
# One alloc_bench configuration: ab LABEL [VAR=value...] -- ARGS...; the exact command goes to
# commands.txt, which the report prints under part 1.
ab() {
  local label=$1 envs=()
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "$label: ${envs[*]} $AB $* --label $label --seconds $SECONDS_PER_CELL" >>"$OUT_DIR/commands.txt"
  env "${envs[@]}" "$AB" "$@" --label "$label" --seconds "$SECONDS_PER_CELL" \
    --json "$OUT_DIR/alloc.jsonl" >"$OUT_DIR/logs/alloc-$label.log" 2>&1 ||
    log "alloc_bench $label failed (see $OUT_DIR/logs/alloc-$label.log)"
}
if have_part alloc; then
  log "part 1: allocation cost ($AB)"
  for m in cudaMalloc cuMemAlloc cudaMallocAsync cub; do ab $m -- --method $m; done
  if [ -n "$GMEM_LIB" ]; then
    P=LD_PRELOAD=$GMEM_LIB
    ab gmem-runtime $P GMEM_TRACE=0 -- --method cudaMalloc
    ab gmem-driver $P GMEM_TRACE=0 -- --method cuMemAlloc
    # Diagnosis: stream-ordered calls through gmem (no fences needed), and reuse safety off
    # (never fences; unsafe, only to measure what the fences cost).
    ab gmem-async $P GMEM_TRACE=0 -- --method cudaMallocAsync
    ab gmem-runtime-nosafety $P GMEM_TRACE=0 GMEM_REUSE_SAFETY=0 -- --method cudaMalloc --threads 1,16
    # Part 4 at the call level: the same calls with the trace on (1 thread).
    ab gmem-runtime+trace $P GMEM_TRACE=1 GMEM_STACK_DEPTH=0 -- --method cudaMalloc --threads 1
    ab gmem-runtime+trace+stacks $P GMEM_TRACE=1 -- --method cudaMalloc --threads 1
  fi
fi
if have_part torchalloc; then
  log "part 1: PyTorch caching allocator"
  echo "torch-caching: $PY bench/torch_alloc_bench.py --build-dir $BUILD/bench --seconds $SECONDS_PER_CELL" >>"$OUT_DIR/commands.txt"
  $PY bench/torch_alloc_bench.py --build-dir "$BUILD/bench" --seconds "$SECONDS_PER_CELL" \
    --json "$OUT_DIR/alloc.jsonl" >"$OUT_DIR/logs/alloc-torch.log" 2>&1 ||
    log "torch_alloc_bench failed (see logs)"
fi
if have_part workloads; then
  log "parts 2 and 4: real workloads"
  $PY bench/run_workloads.py --out "$OUT_DIR" --reps "$REPS" ${RECORD:+--record-traces} \
    --timeout "${WL_TIMEOUT:-240}" ${GMEM_LIB:+--gmem-lib "$GMEM_LIB"} ${ONLY:+--only "$ONLY"} ${REPS_ONLY:+--reps-only "$REPS_ONLY"} 2>&1 |
    tee "$OUT_DIR/logs/workloads.log"
fi
for t in "$OUT_DIR"/gmemtrace-*.bin; do # gmem's saved traces: sparse, compress to a few MB
  [ -f "$t" ] && gzip -1 -f "$t"
done
if have_part replay && [ -x "$BUILD/bench/replay_gpu" ]; then
  log "part 3: traces replayed through cudaMallocAsync and CUB on the GPU"
  for t in "$OUT_DIR"/trace-*.txt; do
    [ -f "$t" ] || continue
    "$BUILD/bench/replay_gpu" "$t" >>"$OUT_DIR/replay.jsonl" 2>>"$OUT_DIR/logs/replay_gpu.log"
  done
fi
log "done: raw results in $OUT_DIR"
