#!/usr/bin/env bash
# libgmem.so exports exactly: every hook listed in interpose/cuda_api.h (GMEM_HOOKS), dlsym,
# and gmem_* client API names; nothing else (no C++ symbols, no libstdc++).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
lib=${GMEM_BUILD:-$root/build}/lib/libgmem.so
[ -f "$lib" ] || { echo "no $lib (make build/lib/libgmem.so)"; exit 1; }
expected=$(sed -n 's/^ *X(\(cu[A-Za-z0-9_]*\), ".*/\1/p' "$root/interpose/cuda_api.h" | sort)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort)
fail=0
missing=$(comm -23 <(echo "$expected") <(echo "$exported"))
[ -n "$missing" ] && { echo "hooks not exported:"; echo "$missing"; fail=1; }
extra=$(comm -13 <(echo "$expected"; echo dlsym) <(echo "$exported") | grep -v '^gmem_')
[ -n "$extra" ] && { echo "unexpected exports:"; echo "$extra"; fail=1; }
echo "$exported" | grep -qx dlsym || { echo "dlsym is not exported"; fail=1; }
# Self-contained: no libstdc++/libgcc_s needed at run time.
if readelf -d "$lib" | grep -E 'NEEDED.*(libstdc\+\+|libgcc_s|libcuda)'; then
  echo "libgmem.so needs one of the libraries above; it must not"; fail=1
fi
[ $fail -eq 0 ] && echo "exports ok: $(echo "$exported" | wc -l) symbols"
exit $fail
