#!/usr/bin/env bash
# What a release check runs on a GPU machine that has no package registry: a build made on
# another machine and copied here (scripts/gpu-bundle.sh makes it), then
#   gpu-run.sh tests  make test-gpu (shim GPU tests + examples), PyTorch's memory viewer
#                         rendering gmem's --format pytorch export of a real training run
#   gpu-run.sh bench  the GPT and ResNet workloads, PyTorch's allocator vs gmem (modes a, c)
# Environment: BUILD (the copied build folder, default .device/build), OUT (logs; default
# build/gpu-run). Exit status: non-zero when a check failed.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-.device/build}
OUT=${OUT:-build/gpu-run}
mkdir -p "$OUT"
BUILD=$(realpath "$BUILD")
gmem=$BUILD/bin/gmem
fails=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

case "${1:-tests}" in
tests)
  GMEM_TEST_LOG=$OUT/test-logs make --no-print-directory test-gpu GMEM_PREBUILT=1 BUILD="$BUILD" \
    2>&1 | tee "$OUT/test-gpu.log"
  # Accepted only when the summary line is there, nothing failed and at least one test passed:
  # a run in which every test skipped (no GPU visible, a missing toolkit) proves nothing.
  summary=$(grep '^tests: ' "$OUT/test-gpu.log" | tail -1)
  read -r passed failed skipped < <(sed -n \
    's/^tests: \([0-9]*\) passed, \([0-9]*\) failed, \([0-9]*\) skipped$/\1 \2 \3/p' <<<"$summary")
  if [ -z "${passed:-}" ]; then
    echo "gpu-run: no test summary in $OUT/test-gpu.log"; fails=$((fails + 1))
  elif [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ]; then
    echo "gpu-run: $summary: not accepted (a failure, or no test passed)"; fails=$((fails + 1))
  elif [ "$skipped" -ne 0 ]; then
    echo "gpu-run: $summary: $skipped test(s) skipped, listed above as 'skip'"
  fi

  # PyTorch's own viewer on gmem's export of a real run (PyTorch's cache off: gmem serves it).
  viz=$OUT/viz
  mkdir -p "$viz"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 GMEM_TRACE_SAVE="$viz/torch.trace" \
    "$gmem" run -- python3 tests/gpu/pytorch_train.py >"$viz/run.log" 2>&1
  tail -6 "$viz/run.log"
  "$gmem" export "$viz/torch.trace" --format pytorch -o "$viz/snapshot.pickle" &&
    "$gmem" export "$viz/torch.trace" --format chrome -o "$viz/chrome.json" &&
    python3 -m torch.cuda._memory_viz trace_plot "$viz/snapshot.pickle" -o "$viz/trace_plot.html" &&
    python3 -m torch.cuda._memory_viz segment_plot "$viz/snapshot.pickle" -o "$viz/segment_plot.html" &&
    python3 - "$viz" <<'PY' || fails=$((fails + 1))
import json, os, pickle, sys
d = sys.argv[1]
snap = pickle.load(open(f"{d}/snapshot.pickle", "rb"))
segs, traces = snap["segments"], snap["device_traces"]
n_actions = sum(len(t) for t in traces)
for name in ("trace_plot.html", "segment_plot.html"):
    size = os.path.getsize(f"{d}/{name}")
    assert size > 10000, f"{name} is only {size} bytes"
chrome = json.load(open(f"{d}/chrome.json"))
print(f"memory_viz: {len(segs)} segments, {n_actions} trace actions; trace_plot "
      f"{os.path.getsize(d + '/trace_plot.html')} B, segment_plot "
      f"{os.path.getsize(d + '/segment_plot.html')} B; chrome: {len(chrome['traceEvents'])} events")
PY
  ;;
bench)
  GMEM_LIB=$BUILD/lib/libgmem.so PARTS=workloads RECORD= REPS=1 WL_TIMEOUT=150 \
    ONLY='torch-gpt/a$,torch-gpt/c$,torch-convnet/a$,torch-convnet/c$' bench/run_gpu.sh "$OUT/bench" \
    >"$OUT/bench.log" 2>&1
  rc=$?
  tail -40 "$OUT/bench.log"
  [ $rc -eq 0 ] || { echo "gpu-run: bench/run_gpu.sh exit status $rc (log: $OUT/bench.log)"; fails=$((fails + 1)); }
  # run_gpu.sh records a failed workload run and goes on: each of the four must have run and
  # exited 0.
  python3 - "$OUT/bench/workloads.jsonl" <<'PY' || fails=$((fails + 1))
import json, sys
want = {("torch-gpt", "a"), ("torch-gpt", "c"), ("torch-convnet", "a"), ("torch-convnet", "c")}
try:
    runs = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
except OSError as e:
    sys.exit(f"gpu-run: no workload results: {e}")
seen = {(r.get("workload"), r.get("mode")): r.get("returncode") for r in runs}
bad = [f"{w}/{m}: " + ("not run" if (w, m) not in seen else f"exit status {seen[(w, m)]}")
       for w, m in sorted(want) if seen.get((w, m)) != 0]
for b in bad:
    print("gpu-run: workload " + b)
sys.exit(1 if bad else 0)
PY
  ;;
*) echo "usage: gpu-run.sh tests|bench" >&2; exit 2 ;;
esac
echo "gpu-run: $fails failure(s)"
[ "$fails" -eq 0 ]
