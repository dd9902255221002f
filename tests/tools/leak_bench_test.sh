#!/usr/bin/env bash
# The leak benchmark's native programs (bench/leaks/native_programs.cpp) on the fake driver: each
# judged while it runs; every LEAK line must be named as a leak and nothing else (the weights,
# a bounded cache and per-step buffers are held).
set -u
B=${GMEM_BUILD:-build}
for f in "$B/bin/gmem" "$B/bench/leaks/native_programs" "$B/lib/libgmem.so" \
  "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
specs=()
for p in step_outputs growing_cache early_return weights_and_steps bounded_cache per_step_buffers; do
  specs+=("native:$B/bench/leaks/native_programs:$p")
done
python3 bench/leaks/run_leaks.py --gmem "$B/bin/gmem" --attach-timeout 10 "${specs[@]}"
