#!/bin/bash
# Builds the trace_bench ablation variants of run-a1.sh / run-a2.sh into .device/abl: main at
# b0c022d with ablation.patch applied in a worktree, one trace_bench per variant (diagnostic
# builds only: each removes one part of the recording path to measure what it costs).
set -eu
root=$(git rev-parse --show-toplevel)
git worktree add -f /tmp/abl b0c022d
cd /tmp/abl && git apply "$root/bench/results/raw/2026-11-26-session25/ablation.patch"
mkdir -p "$root/.device/abl"
for v in BASE NOCAS NOLIVE NOTICK NOAPPEND ALL; do
  rm -f build/abl/profiler/trace_writer.o build/abl/bench/trace_bench
  f="-DABL_$v"; [ $v = ALL ] && f="-DABL_NOLIVE -DABL_NOTICK -DABL_NOAPPEND"
  make -j2 BUILD=build/abl CXXFLAGS="$f" build/abl/bench/trace_bench >/dev/null
  strip -o "$root/.device/abl/tb-$v" build/abl/bench/trace_bench
done
