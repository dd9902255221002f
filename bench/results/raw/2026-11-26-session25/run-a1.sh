#!/bin/bash
# Session 25, call 1 (H200): where trace_bench's stacks-off cost goes on the H200 (ablation builds).
cd "$(dirname "$0")/abl"
nproc; lscpu | grep -E "Model name|L2|L3|NUMA node0"
for r in 1 2 3; do
  echo "== round $r"
  ./tb-BASE --runs 2 --only off | tail -1
  for v in BASE NOCAS NOLIVE NOTICK NOAPPEND ALL PF16w PF64w; do
    echo -n "$v "; ./tb-$v --runs 2 --only nostacks | tail -1
  done
  for ev in 4096 65536; do
    echo -n "BASE-ev$ev "; GMEM_TRACE_EVENTS=$ev ./tb-BASE --runs 2 --only nostacks | tail -1
  done
done 2>&1 | tee $OUT/a1.log
