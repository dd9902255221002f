#!/usr/bin/env bash
# Ran on the build of this commit plus an experimental switch, EXP_STREAM_TRACE=1 (a backtrace
# at each non-blocking stream registration), which is not in main.
# Session 22, GPU call I: the new build (fence first when pending blocks could cover a large
# request; barriers skip the query of streams behind an incomplete hub). The fast-step convnet's
# counters (GMEM_VERBOSE=1, trace off), who creates the non-blocking streams, and the workloads
# with NVML peaks: PyTorch caching, expandable segments, gmem trace off and defaults.
set -u
B=$PWD/.device/build
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  out=$(env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE=0 GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
  echo "round $r: $(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)"
  echo "$out" | grep -E "^gmem: (pool device=0 kind=device|host_time|barriers)" | grep -oE "(peak_reserved_bytes|fences|barriers|fence_ns|made|streams_checked|busy|ns)=[0-9]+" | tr '\n' ' '; echo
done
env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE=0 EXP_STREAM_TRACE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
    python3 bench/workloads/torch_train.py --model smallconv --steps 5 2>&1 | grep -A14 "EXP stream" | head -40
echo "elapsed $((SECONDS - start)) s"
python3 bench/run_workloads.py --out $OUT/wl --gmem-lib $B/lib/libgmem.so --reps 2 \
  --only 'torch-smallconv/a$,torch-smallconv/a-expandable$,torch-smallconv/c$,torch-smallconv/c-trace-stacks$,torch-gpt/c$,torch-gpt/a-expandable$' 2>&1 | tail -12
env GMEM_ARENA_PAGE_MB=8 python3 bench/run_workloads.py --out $OUT/wl-page8 --gmem-lib $B/lib/libgmem.so --reps 2 \
  --only 'torch-smallconv/c$,torch-gpt/c$' 2>&1 | tail -4
for f in wl wl-page8; do
python3 - "$OUT/$f/workloads.jsonl" "$f" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(sys.argv[2], d.get("workload"), d.get("mode"), round(d.get("steps_per_s", 0), 2),
          round(d.get("nvml_peak_delta", 0) / 2**30, 3), "GiB nvml", d.get("torch_max_reserved"))
PY
done
echo "elapsed $((SECONDS - start)) s"
} > $OUT/i.log 2>&1
