#!/usr/bin/env bash
# JAX with the platform allocator (every buffer a driver allocation): results match NumPy
# under libgmem.so, and the shim saw the allocations. JAX 0.11's platform allocator maps
# most buffers with the VMM API (cuMemCreate/cuMemMap), which gmem passes through and traces
# (kind vmm); only its few cuMemAlloc calls are pooled.
source "$(dirname "$0")/python_lib.sh"
need_module jax
export XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
with_shim "$PY" "$here/jax_check.py" >"$bin/jax.log" 2>&1
rc=$?
grep -v "^\s*$" "$bin/jax.log" | cut -c1-300 | tail -20
[ $rc -eq 0 ] && grep -q "jax: OK" "$bin/jax.log" || { echo "FAIL: jax (exit $rc)"; exit 1; }
pooled "$bin/jax.log" 1 || exit 1
seen=$(sed -n 's/^gmem: passthrough .* vmm=\([0-9]*\) .*/\1/p' "$bin/jax.log")
[ "${seen:-0}" -ge 50 ] || { echo "FAIL: expected >= 50 traced VMM mappings, saw '${seen:-none}'"; exit 1; }
echo "shim traced $seen VMM mappings"
