#!/usr/bin/env bash
# The readers and PyTorch's allocators end to end, without a GPU: framework_sites
# allocates through stand-ins of libc10_cuda.so (DeviceCachingAllocator::malloc: four cache
# segments, 42 MiB), libtorch_cuda.so (CUDACachingHostAllocatorImpl::allocate_host_memory_
# slowpath: 64 KiB pinned) and libcublas.so.13 (a 4 MiB workspace), and leaks two 3 MiB
# buffers of its own. Under `gmem run` on the fake driver, the exit summary, `gmem leaks` (text
# and JSON), `gmem report` and `gmem export` must report only the program's buffers as leaks,
# name PyTorch's cache with the way to trace each tensor, and list the pinned host cache and the
# workspace as suppressed; `--no-framework-caches` counts the cache again.
set -u
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
PROG=$B/tests/tools/framework_sites
for f in "$GMEM" "$PROG" "$B/tests/tools/fw/libc10_cuda.so" "$B/tests/tools/fw/libtorch_cuda.so" \
  "$B/tests/tools/fw/libcublas.so.13" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset GMEM_FRAMEWORKS PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF
W=$(mktemp -d)
PID=
cleanup() {
  [ -n "$PID" ] && "$GMEM" clean --force "$PID" >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { grep -qF -- "$2" "$1" || fail "$3: no '$2' in $1: $(cat "$1")"; }

echo "== gmem run: the exit summary"
"$GMEM" run -- "$PROG" >"$W/run.out" 2>"$W/run.err"
rc=$?
cat "$W/run.err"
[ $rc -eq 0 ] || fail "gmem run exited $rc"
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/run.err")
[ -n "$PID" ] || { fail "no pid in the run summary"; exit 1; }
has "$W/run.err" "gmem: LEAKS: 6.00 MiB in 2 allocations from 1 call site were never freed" "summary"
has "$W/run.err" "gmem: PyTorch's caching allocator holds 42.0 MiB in 4 allocations at exit: its cached segments, not your tensors" "summary"
has "$W/run.err" "start with gmem run --frameworks pool (PYTORCH_NO_CUDA_MEMORY_CACHING=1" "summary"
has "$W/run.err" "gmem: suppressed: 4.06 MiB in 2 allocations from 2 call sites" "summary"

echo "== gmem leaks $PID"
"$GMEM" leaks "$PID" >"$W/leaks.txt"
rc=$?
cat "$W/leaks.txt"
[ $rc -eq 1 ] || fail "gmem leaks: exit $rc, expected 1 (the program's own leak)"
sed -n '/^#1 /,/^$/p' "$W/leaks.txt" >"$W/first.txt"
has "$W/first.txt" "6.00 MiB in 2 allocations" "leaks #1"
has "$W/first.txt" "leak_user_buffers()" "leaks #1"
grep -q "^#2 " "$W/leaks.txt" && fail "gmem leaks: more than the program's own site"
has "$W/leaks.txt" "PyTorch's caching allocator: 42.0 MiB in 4 allocations from 1 call site are its cached segments, not your tensors" "leaks"
has "$W/leaks.txt" "leak:CachingHostAllocator (default:" "leaks: the pinned host cache suppressed"
has "$W/leaks.txt" "leak:libcublas (default:2)" "leaks: the cuBLAS workspace suppressed"
has "$W/leaks.txt" "SUMMARY: 6.00 MiB in 2 allocations from 1 call site; 4.06 MiB in 2 allocations suppressed; 42.0 MiB in 4 allocations held by PyTorch's caching allocator." "leaks"

"$GMEM" leaks "$PID" --json >"$W/leaks.json"
python3 - "$W/leaks.json" <<'PY' || fail "gmem leaks --json"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["total_count"] == 2 and d["total_bytes"] == 6 << 20, d["total_bytes"]
assert d["cached_count"] == 4 and d["cached_bytes"] == 42 << 20, d["cached_bytes"]
assert [c["framework"] for c in d["framework_caches"]] == ["PyTorch"], d["framework_caches"]
assert all(s["held_by"] == "PyTorch's caching allocator" for s in d["cached"])
names = [f["function"] for s in d["cached"] for f in s["frames"]]
# The allocator's own frames are folded; the caller that grew the cache is shown.
assert not any("CUDACachingAllocator" in n for n in names), names
assert "fake_c10_cuda_segment" in names, names
assert d["suppressed_count"] == 2
print("leaks --json: 2 leaked, 4 cached by PyTorch, 2 suppressed")
PY

echo "== the way to see everything"
"$GMEM" leaks "$PID" --no-framework-caches >"$W/counted.txt"
has "$W/counted.txt" "SUMMARY: 48.0 MiB in 6 allocations from 2 call sites; 4.06 MiB in 2 allocations suppressed." "--no-framework-caches"
"$GMEM" leaks "$PID" --no-framework-caches --no-default-suppressions >"$W/all.txt"
has "$W/all.txt" "SUMMARY: 52.1 MiB in 8 allocations from 4 call sites." "--no-default-suppressions"

echo "== gmem report, gmem export"
"$GMEM" report "$PID" -o "$W/report.html" 2>/dev/null || fail "gmem report"
has "$W/report.html" "PyTorch's caching allocator holds 42.0 MiB in 4 allocations, not counted above" "report"
"$GMEM" export "$PID" --all-frames -o "$W/all.json" 2>/dev/null || fail "gmem export --all-frames"
"$GMEM" export "$PID" -o "$W/mixed.json" 2>/dev/null || fail "gmem export"
has "$W/all.json" "DeviceCachingAllocator::malloc" "export --all-frames"

[ $failures -eq 0 ] && echo "frameworks_e2e_test: all passed"
exit $((failures > 0))
