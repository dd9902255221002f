#!/usr/bin/env bash
# Third-party-style programs (tests/gpu/thirdparty_mix.cu: pitched memory, mapped pinned
# memory, host callbacks with stream-ordered buffers, four host threads, managed memory,
# cross-stream events): each self-check passes natively, under gmem's defaults, with
# GMEM_STRICT=1 and with GMEM_ARENA=0, static and shared runtime; each run under gmem has its
# own log, and each log shows the pool serving the program.
source "$(dirname "$0")/lib.sh"
build_cu thirdparty_mix thirdparty_mix.cu
build_cu thirdparty_mix_shared thirdparty_mix.cu -cudart shared
fail=0
for prog in thirdparty_mix thirdparty_mix_shared; do
  "$bin/$prog" all >"$bin/$prog.log" 2>&1 || { cat "$bin/$prog.log"; echo "FAIL: $prog without gmem"; fail=1; }
  for opts in "" "GMEM_STRICT=1" "GMEM_ARENA=0"; do
    log=$bin/$prog.${opts:-defaults}.log
    env $opts LD_PRELOAD="$shim" GMEM_VERBOSE=1 "$bin/$prog" all >"$log" 2>&1
    rc=$?
    echo "$prog ${opts:-defaults}: $(grep -cE ': OK$' "$log") OK, exit $rc"
    grep -E '^FAIL' "$log"
    [ $rc -eq 0 ] || { echo "FAIL: $prog under gmem ${opts:-defaults}"; fail=1; }
    pooled "$log" 100 || fail=1
  done
done
exit $fail
