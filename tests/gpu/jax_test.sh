#!/usr/bin/env bash
# JAX with the platform allocator (every buffer a driver allocation): results match NumPy
# under libgmem.so, allocations pooled.
source "$(dirname "$0")/python_lib.sh"
need_module jax
export XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
with_shim "$PY" "$here/jax_check.py" >"$bin/jax.log" 2>&1
rc=$?
grep -v "^\s*$" "$bin/jax.log" | cut -c1-300 | tail -20
[ $rc -eq 0 ] && grep -q "jax: OK" "$bin/jax.log" || { echo "FAIL: jax (exit $rc)"; exit 1; }
pooled "$bin/jax.log" 50
