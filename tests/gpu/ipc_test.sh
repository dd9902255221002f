#!/usr/bin/env bash
# CUDA IPC between two processes (issue 16): natively every block opens in the child; under
# gmem with the default options the three 256 KiB blocks of one pooled segment (one at its
# start, two inside) open at the right address in an importer under gmem, and the two inside
# fail (never a wrong pointer) in an importer without gmem. The 64 MiB buffer comes from the
# arena by default, whose virtual-memory pages have no legacy handle: refused with a warning;
# with GMEM_ARENA=0 it is a segment of its own and exports.
source "$(dirname "$0")/lib.sh"
build_cu ipc_pair ipc_pair.cu
fail=0
"$bin/ipc_pair" export native || { echo "FAIL: ipc_pair without gmem"; fail=1; }
for arena in 1 0; do
  GMEM_ARENA=$arena with_shim "$bin/ipc_pair" export gmem >"$bin/ipc.log" 2>&1
  rc=$?
  grep -E '^(ipc_pair|FAIL|gmem: (warning|error))' "$bin/ipc.log"
  [ $rc -eq 0 ] || { echo "FAIL: importer under gmem, GMEM_ARENA=$arena (exit $rc)"; fail=1; }
  if [ $arena = 0 ]; then
    grep -q "ipc_pair import block=3 rc=0" "$bin/ipc.log" || { echo "FAIL: GMEM_ARENA=0: the 64 MiB block did not open"; fail=1; }
  fi
done
with_shim "$bin/ipc_pair" export plain >"$bin/ipc.log" 2>&1
rc=$?
grep -E '^(ipc_pair|FAIL)' "$bin/ipc.log"
[ $rc -eq 0 ] || { echo "FAIL: importer without gmem (exit $rc)"; fail=1; }
exit $fail
