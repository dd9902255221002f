#!/usr/bin/env bash
# CUDA IPC between two processes: natively every block opens in the child; under
# gmem, with the default options, GMEM_ARENA=0 and GMEM_VMM=1, all six blocks (three 256 KiB
# blocks of one pooled segment, one at its start; a 64 MiB buffer, from the arena by default;
# two 3 MiB blocks of one arena page) export and open at the right address in an importer
# under gmem. Arena and GMEM_VMM=1 blocks travel as file descriptors of their pages
# (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; docs/interpose.md, "CUDA IPC"). An importer
# without gmem opens the driver's handles (blocks at the start of a cuMemAlloc segment) and
# gets an error, never a wrong pointer, for gmem handles.
source "$(dirname "$0")/lib.sh"
build_cu ipc_pair ipc_pair.cu
fail=0
"$bin/ipc_pair" export native || { echo "FAIL: ipc_pair without gmem"; fail=1; }
for opts in "" "GMEM_ARENA=0" "GMEM_VMM=1"; do
  env $opts LD_PRELOAD="$shim" GMEM_VERBOSE=1 "$bin/ipc_pair" export gmem >"$bin/ipc.log" 2>&1
  rc=$?
  grep -E '^(ipc_pair|FAIL|gmem: (warning|error))' "$bin/ipc.log"
  [ $rc -eq 0 ] || { echo "FAIL: importer under gmem, options '${opts:-defaults}' (exit $rc)"; fail=1; }
  grep -q "ipc_pair import block=3 rc=0" "$bin/ipc.log" ||
    { echo "FAIL: options '${opts:-defaults}': the 64 MiB block did not open"; fail=1; }
  if grep -q "gmem: warning: cuIpcGetMemHandle" "$bin/ipc.log"; then
    echo "FAIL: options '${opts:-defaults}': an export was refused"; fail=1
  fi
done
with_shim "$bin/ipc_pair" export plain >"$bin/ipc.log" 2>&1
rc=$?
grep -E '^(ipc_pair|FAIL)' "$bin/ipc.log"
[ $rc -eq 0 ] || { echo "FAIL: importer without gmem (exit $rc)"; fail=1; }
exit $fail
