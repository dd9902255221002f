#!/usr/bin/env bash
# The leak benchmark's programs that need no framework, on the fake driver: the native ones
# (bench/leaks/native_programs.cpp) judged while they run, two Python ones through ctypes. Every
# LEAK line must be named as a leak and nothing else (weights, a bounded cache and per-step
# buffers are held).
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
# Python through ctypes (no framework): a service leaking 1 MiB per request (5 a second here),
# judged while it runs, and a clean loop judged at exit.
specs+=(bench/leaks/programs/ctypes_service_leak.py bench/leaks/programs/ctypes_train_clean.py)
REQUEST_S=0.2 python3 bench/leaks/run_leaks.py --gmem "$B/bin/gmem" --attach-timeout 10 "${specs[@]}"
