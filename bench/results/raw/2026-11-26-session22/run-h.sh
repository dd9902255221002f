#!/usr/bin/env bash
# Ran on an experimental build: EXP_FENCE_COVER=1 switched on the rule main now has (pool_impl.h
# fence_first_locked), and the barrier counters printed "hub_ns" (time of the hub record).
# Neither switch exists in main.
# Session 22, GPU call H: the fast-step convnet (and the GPT loop) under no caching + gmem,
# trace off, with the current fence rule and with EXP_FENCE_COVER=1 (fence before a large
# allocation whenever pending large blocks could cover it); GMEM_VERBOSE=1 for fences and
# the barrier's counters; NVML peaks through run_workloads.py.
set -u
B=$PWD/.device/build
export PYTHONUNBUFFERED=1
start=$SECONDS
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for r in 1 2; do
  for cfg in "EXP_NONE=1" "EXP_FENCE_COVER=1"; do
    out=$(env LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE=0 GMEM_VERBOSE=1 PYTORCH_NO_CUDA_MEMORY_CACHING=1 $cfg \
      python3 bench/workloads/torch_train.py --model smallconv --steps 300 2>&1)
    sps=$(echo "$out" | grep -o '"steps_per_s": [0-9.]*' | head -1)
    echo "round $r $cfg: $sps"
    echo "$out" | grep -E "^gmem: (pool device=0 kind=device|host_time|barriers|EXP)" | grep -oE "(peak_reserved_bytes|fences|barriers|fence_ns|made|streams_checked|busy|ns|hub_ns)=[0-9]+" | tr '\n' ' '; echo
  done
done
echo "elapsed $((SECONDS - start)) s"
for cfg in "EXP_NONE=1" "EXP_FENCE_COVER=1"; do
  env $cfg python3 bench/run_workloads.py --out $OUT/wl-${cfg%%=*} --gmem-lib $B/lib/libgmem.so --reps 2 \
    --only 'torch-smallconv/c$,torch-smallconv/a-expandable$,torch-gpt/c$' 2>&1 | tail -3
  python3 - "$OUT/wl-${cfg%%=*}/workloads.jsonl" "$cfg" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(sys.argv[2], d.get("workload"), d.get("mode"), round(d.get("steps_per_s", 0), 2),
          round(d.get("nvml_peak_delta", 0) / 2**30, 3), "GiB nvml", d.get("torch_max_reserved"))
PY
  echo "elapsed $((SECONDS - start)) s"
done
} > $OUT/h.log 2>&1
