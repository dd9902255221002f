#!/bin/bash
# Session 25, call 11 (H200): trace_bench with --between (the program's own memory traffic
# between pairs), base (b0c022d's recorder) against new (2b02da5's), the same bench source.
set -u
T=$PWD/.device/tb
{
for r in 1 2; do for between in 0 256K 1M; do for v in base new; do for row in nostacks shallow; do
  echo -n "$v r$r between=$between "; $T/tb-$v --runs 2 --only $row --between $between | tail -1
done; done; done; done
} > $OUT/a10.log 2>&1
