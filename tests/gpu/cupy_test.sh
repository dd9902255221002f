#!/usr/bin/env bash
# CuPy with its memory pools off: results match NumPy under libgmem.so, allocations pooled.
source "$(dirname "$0")/python_lib.sh"
need_module cupy
export PYTHONUNBUFFERED=1
with_shim "$PY" "$here/cupy_check.py" >"$bin/cupy.log" 2>&1
rc=$?
cut -c1-300 "$bin/cupy.log"
[ $rc -eq 0 ] && grep -q "cupy: OK" "$bin/cupy.log" || { echo "FAIL: cupy (exit $rc)"; exit 1; }
pooled "$bin/cupy.log" 100
