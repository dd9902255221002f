#!/usr/bin/env python3
"""The per-operation targets from bench/trace_cost_gpu.sh's output, as paired-round medians.

  python3 bench/trace_cost_summary.py TRACE_COST_JSONL [TRACE_BENCH_TXT]

TRACE_COST_JSONL holds trace_cost's JSON lines, each with the "rep" (round) it ran in. Per row
(label): the median over the rounds of the mean and of the p99, with their min-max. Then the
targets, each taken within a round and given as the median (min-max) over the rounds:
  - cudaMalloc/cudaFree pairs under gmem with the trace off: mean <= 150 ns;
  - the pairs that fenced (trace_cost ... split): p99 <= 1,000 ns;
  - recording without stacks (GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0 against GMEM_TRACE=0):
    at most the two time stamps + 60 ns per pair. The stamps are trace_bench's "two stamps"
    row from TRACE_BENCH_TXT (the same run) when given, else trace_cost's own clock pair
    (the "timer" row).
"""
import collections
import json
import re
import statistics
import sys


def spread(values):
    if not values:
        return "-"
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = collections.defaultdict(dict)  # label -> rep -> record
    for line in open(sys.argv[1]):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("kind") == "trace_cost":
            rows[r["label"]][r.get("rep", 1)] = r
    stamps_bench = None
    if len(sys.argv) > 2:
        for line in open(sys.argv[2]):
            if line.startswith("off, two stamps"):
                numbers = re.findall(r"[-\d.]+", line[len("off, two stamps"):])
                if len(numbers) >= 6:
                    stamps_bench = float(numbers[5])  # the "added ns" column
    reps = sorted({rep for per in rows.values() for rep in per})
    print(f"{len(reps)} rounds; per row: median (min-max) over the rounds, ns per pair")
    print(f"{'row':44s} {'mean':>24s} {'p99':>26s}")
    for label in rows:
        per = rows[label]
        means = [per[r]["mean_ns"] for r in reps if r in per]
        p99s = [per[r]["p99_ns"] for r in reps if r in per]
        print(f"{label:44s} {spread(means):>24s} {spread(p99s):>26s}")

    def per_rep(label, key):
        return {r: rows[label][r][key] for r in rows.get(label, {})}

    off = per_rep("gmem-trace-off", "mean_ns")
    fenced = per_rep("gmem-trace-off, pairs that fenced", "p99_ns")
    fenced_driver = per_rep("gmem-trace-off-driver, pairs that fenced", "p99_ns")
    nostacks = per_rep("gmem-stacks-off", "mean_ns")
    timer = per_rep("timer", "mean_ns")
    added = [nostacks[r] - off[r] for r in reps if r in nostacks and r in off]
    print("\ntargets (median (min-max) over the rounds)")
    print(f"  cudaMalloc pairs, trace off, mean:        {spread(list(off.values()))} ns"
          "   target <= 150")
    print(f"  pairs that fenced, p99 (runtime route):   {spread(list(fenced.values()))} ns"
          "   target <= 1,000")
    print(f"  pairs that fenced, p99 (driver route):    {spread(list(fenced_driver.values()))} ns")
    if stamps_bench is not None:
        stamps = f"{stamps_bench:.0f} ns (trace_bench's two stamps row)"
        limit = stamps_bench + 60
    else:
        stamps = f"{spread(list(timer.values()))} ns (trace_cost's clock pair)"
        limit = statistics.median(timer.values()) + 60 if timer else float("nan")
    print(f"  recording without stacks, added per pair: {spread(added)} ns"
          f"   target <= stamps + 60 = {limit:.0f}; stamps {stamps}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
