#!/usr/bin/env bash
# What observing costs a PyTorch program: paired interleaved rounds (bench/paired_rounds.py) of
# PyTorch's caching allocator alone, gmem observing with its defaults (trace, native and Python
# stacks) and PyTorch's own recorder (_record_memory_history(stacks="python")), over four
# workloads: the fast-step convnet, the decoding loop, the GPT loop and a Hugging Face-style
# generate loop with a KV cache (bench/workloads/torch_train.py). Every process runs pinned
# with taskset; the order of the configurations flips every round.
#
#   bench/observe_cost_gpu.sh [OUT_DIR]     (default $OUT, else build/bench/observe)
#
# Environment:
#   GMEM_LIB   the shim ($BUILD/lib/libgmem.so, BUILD=build)
#   ROUNDS     rounds per workload (8); each round runs every configuration once
#   BUDGET_S   seconds for all workloads together (420): each workload gets its share, and
#              starts no new round once it is spent (fewer rounds are then reported as such)
#   CPUS       the CPUs every process is pinned to (2-11; the first 12 when fewer exist)
#   WORKLOADS  which, with their steps (smallconv:200,decode:300,gpt:8,generate:200)
# Every run starts Python, PyTorch and CUDA (about 4 s), so 8 rounds of 3 configurations take
# about 2-3 minutes per workload: within a 10-minute call, run two workloads per call, e.g.
#   WORKLOADS=smallconv:200,decode:300 bench/observe_cost_gpu.sh OUT/a
#   WORKLOADS=gpt:8,generate:200 bench/observe_cost_gpu.sh OUT/b
#   CONFIGS    caching,gmem-observe,torch-history (the first is the peer)
# Writes OUT_DIR/<workload>/{rounds.jsonl,summary.json} and OUT_DIR/observe_cost.json (one
# object per workload and configuration), and prints per configuration the median ratio of
# steps/s to the peer with its spread, the mean and p99 step period, gmem's own host time per
# observed event and its share of the wall time, what each observer costs next to the other,
# which steps were each round's two slowest (the five slowest, by the device's timing events
# and by the host's clock, are in OUT_DIR/<workload>/rounds.jsonl), and the hooks' longest wait
# for the trace's growth and its longest page population (GMEM_VERBOSE's trace_growth line).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT_DIR=${1:-${OUT:-$BUILD/bench/observe}}
GMEM_LIB=${GMEM_LIB:-$BUILD/lib/libgmem.so}
ROUNDS=${ROUNDS:-8}
BUDGET_S=${BUDGET_S:-420}
WORKLOADS=${WORKLOADS:-smallconv:200,decode:300,gpt:8,generate:200}
CONFIGS=${CONFIGS:-caching,gmem-observe,torch-history}
PY=${PYTHON:-python3}

if ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "observe_cost: skipped: no NVIDIA GPU found (nvidia-smi -L lists none)"
  exit 0
fi
[ -f "$GMEM_LIB" ] || { echo "observe_cost: no $GMEM_LIB (make $BUILD/lib/libgmem.so)" >&2; exit 2; }
if [ -z "${CPUS:-}" ]; then
  n=$(nproc)
  if [ "$n" -ge 12 ]; then CPUS=2-11; else CPUS=0-$((n - 1)); fi
fi
mkdir -p "$OUT_DIR"
IFS=, read -r -a wl <<<"$WORKLOADS"
share=$((BUDGET_S / ${#wl[@]}))
rc=0
for w in "${wl[@]}"; do
  name=${w%%:*}
  steps=${w#*:}
  [ "$steps" = "$w" ] && steps=300
  echo "[$(date -u +%H:%M:%S)] $name: $ROUNDS rounds of $CONFIGS, $steps steps, CPUs $CPUS, ${share} s"
  mkdir -p "$OUT_DIR/$name" && rm -f "$OUT_DIR/$name/summary.json"
  $PY bench/paired_rounds.py --out "$OUT_DIR/$name" --gmem-lib "$GMEM_LIB" --rounds "$ROUNDS" \
    --only "$CONFIGS" --taskset "$CPUS" --budget-s "$share" "$name" --steps "$steps" \
    >"$OUT_DIR/$name/log.txt" 2>&1 || rc=1
  grep -E '^\{"summary"' "$OUT_DIR/$name/log.txt" || { tail -5 "$OUT_DIR/$name/log.txt"; rc=1; }
done
$PY - "$OUT_DIR" "${wl[@]}" <<'EOF'
import json, os, sys
out, rows = sys.argv[1], []
for w in sys.argv[2:]:
    path = os.path.join(out, w.split(":")[0], "summary.json")
    if os.path.exists(path):
        rows += [json.loads(line) for line in open(path) if line.strip()]
json.dump(rows, open(os.path.join(out, "observe_cost.json"), "w"), indent=1)
def f(v, d=3):
    return "-" if v is None else f"{v:.{d}f}"
print("\n| workload | configuration | rounds | steps/s ratio, median (min-max) | step mean / p99 ms "
      "| p99 ratio | gmem ns per alloc / free | gmem share of wall |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    own = r.get("gmem_own") or {}
    a, fr, sh = (own.get(k, {}).get("median") for k in ("alloc_ns", "free_ns", "share_pct"))
    p99 = r.get("step_p99_ratio") or {}
    print(f"| {r['summary']} | {r['config']} | {r['runs']} | {f(r['ratio_median'])} "
          f"({f(r['ratio_min'])}-{f(r['ratio_max'])}) | {f(r['step_ms_mean'], 2)} / "
          f"{f(r['step_ms_p99_median'], 2)} | {f(p99.get('median'))} | "
          f"{f(a, 0)} / {f(fr, 0)} | {'-' if sh is None else f'{sh:.2f}%'} |")
# Cost = 1 - ratio; gmem's against PyTorch's recorder, from the medians of the same rounds.
by = {(r["summary"], r["config"]): r for r in rows}
for w in sorted({r["summary"] for r in rows}):
    g, t = by.get((w, "gmem-observe")), by.get((w, "torch-history"))
    if g and t and g.get("ratio_median") and t.get("ratio_median"):
        cg, ct = 1 - g["ratio_median"], 1 - t["ratio_median"]
        own = ((g.get("gmem_own") or {}).get("share_pct") or {}).get("median")
        print(f"{w}: cost gmem {100 * cg:+.2f}% (own share {f(own, 2)}%), PyTorch's recorder "
              f"{100 * ct:+.2f}%" + (f", {ct / cg:.1f}x gmem's" if cg > 0 else ""))
# Where the p99 comes from: each round's two slowest steps (counted from the warm-up's end).
# The trace's growth as a cause: the hooks' longest wait for it and the longest page population,
# median (max) of the rounds, in ms.
for r in rows:
    if r.get("slowest_steps"):
        print(f"{r['summary']} {r['config']}: slowest steps {r['slowest_steps']}")
    g = r.get("gmem_growth")
    if g:
        print(f"{r['summary']} {r['config']}: trace growth stalls {f(g['stalls']['median'], 0)}, "
              f"longest stall {f(g['stall_max_ms']['median'])} ({f(g['stall_max_ms']['max'])}) ms, "
              f"longest populate {f(g['populate_max_ms']['median'])} "
              f"({f(g['populate_max_ms']['max'])}) ms")
EOF
exit $rc
