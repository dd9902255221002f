#!/usr/bin/env bash
# The pytest plugin with real pytest on the fake driver: tests/python/plugin_cases.py has a
# test within its gmem_limit, one over it and one that leaks. `pytest --gmem` must fail the last
# two naming the lines marked OVER and LEAK, pass the first, and print the per-test table:
# started without the shim (the plugin re-executes pytest under libgmem.so), started under
# `gmem run`, and with no libgmem.so to be found (it must say it cannot track, and enforce
# nothing). A fourth test grows a stand-in of PyTorch's caching allocator: noted, not failed.
# Exit 0 pass, 77 skip (no pytest), 1 fail.
set -u
B=$(realpath "${GMEM_BUILD:-build}")
PY=
for p in python3 /usr/bin/python3; do
  command -v "$p" >/dev/null && "$p" -m pytest --version >/dev/null 2>&1 && { PY=$p; break; }
done
[ -n "$PY" ] || { echo "pytest_plugin_test: skipped: no python3 with pytest (scripts/install-deps.sh test)"; exit 77; }
for f in "$B/bin/gmem" "$B/lib/libgmem.so" "$B/lib/libgmem_client.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FAKE_CUDA_TOTAL_BYTES=512M PYTHONDONTWRITEBYTECODE=1 GMEM_TRACE_KEEP=none
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} GMEM_BUILD=$B
export GMEM_TEST_C10=$B/tests/tools/fw/libc10_cuda.so # PyTorch's cache, stood in for
[ -e "$GMEM_TEST_C10" ] || { echo "missing $GMEM_TEST_C10 (make builds it)"; exit 1; }
CASES=tests/python/plugin_cases.py
OVER=$(grep -n "# OVER" "$CASES" | cut -d: -f1)
LEAK=$(grep -n "# LEAK" "$CASES" | cut -d: -f1)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
PYTEST=("$PY" -m pytest -p gmem.pytest_plugin -p no:cacheprovider -q)

check_tracked() { # LOG WHAT
  grep -q "2 failed, 2 passed" "$1" || fail "$2: expected 2 failed, 2 passed"
  grep -q "gmem: $CASES::test_grows_the_framework_cache: 2.00 MiB outstanding is held by PyTorch's caching allocator" "$1" ||
    fail "$2: the framework cache's growth is not noted apart"
  grep -q "FAILED $CASES::test_over_limit" "$1" || fail "$2: the test over its limit passed"
  grep -q "FAILED $CASES::test_leaks_every_call" "$1" || fail "$2: the leaking test passed"
  grep -q "exceeds gmem_limit 4.00 MiB" "$1" || fail "$2: no limit message"
  grep -q "grow_activations at plugin_cases.py:$OVER (python)" "$1" ||
    fail "$2: the limit failure does not name plugin_cases.py:$OVER"
  grep -q "remember at plugin_cases.py:$LEAK (python)" "$1" ||
    fail "$2: the leak failure does not name plugin_cases.py:$LEAK"
  grep -q "still live after it (gmem_no_leaks, 1 warm-up runs)" "$1" || fail "$2: no leak message"
  grep -Eq "^ +1.00 MiB +0 B +$CASES::test_within_limit" "$1" || fail "$2: per-test table"
  grep -Eq "^ +8.00 MiB +0 B +$CASES::test_over_limit" "$1" || fail "$2: per-test peak"
  grep -Eq "^ +1.00 MiB +1.00 MiB +$CASES::test_leaks_every_call" "$1" || fail "$2: outstanding"
}

echo "== pytest --gmem, started without the shim (re-executed under LD_PRELOAD)"
env -u LD_PRELOAD "${PYTEST[@]}" --gmem "$CASES" >"$W/reexec.log" 2>&1
cat "$W/reexec.log"
grep -q "gmem: re-running pytest with LD_PRELOAD=" "$W/reexec.log" || fail "no re-exec"
check_tracked "$W/reexec.log" "re-exec"

echo "== gmem run -- pytest --gmem (already preloaded)"
"$B/bin/gmem" run -- "${PYTEST[@]}" --gmem "$CASES" >"$W/run.log" 2>&1
grep -q "re-running pytest" "$W/run.log" && fail "re-executed although preloaded"
check_tracked "$W/run.log" "gmem run"

echo "== without --gmem: markers registered, nothing enforced"
env -u LD_PRELOAD "${PYTEST[@]}" --strict-markers "$CASES" >"$W/off.log" 2>&1
grep -q "4 passed" "$W/off.log" || { cat "$W/off.log"; fail "without --gmem: expected 4 passed"; }

echo "== pytest --gmem with no libgmem.so to preload: says it cannot track"
env -u LD_PRELOAD GMEM_SHIM= GMEM_BUILD=/nonexistent GMEM_CLIENT_LIB="$B/lib/libgmem_client.so" \
  "${PYTEST[@]}" --gmem "$CASES" >"$W/none.log" 2>&1
cat "$W/none.log"
grep -q "CANNOT TRACK GPU allocations: no libgmem.so found" "$W/none.log" || fail "no 'cannot track' notice"
grep -q "4 passed" "$W/none.log" || fail "cannot track: markers must not fail tests"
grep -q "gmem markers not enforced" "$W/none.log" || fail "cannot track: no warning on marked tests"

[ $failures = 0 ] && echo "pytest_plugin_test: PASS" && exit 0
echo "pytest_plugin_test: $failures failures"
exit 1
