#!/usr/bin/env bash
# A driver-API program that creates, uses and destroys its own context: same result
# with gmem; the destroyed context's pool prints its line at exit (GMEM_VERBOSE) and its
# counters are in the saved trace (gmem stats), with no leaks (the context took its blocks).
source "$(dirname "$0")/lib.sh"
build_cu private_context private_context.cu -lcuda
gmem=$build/bin/gmem
fail=0
"$bin/private_context" || { echo "FAIL: private_context without gmem"; fail=1; }
trace=$bin/private_context.gmem
rm -f "$trace"
GMEM_TRACE=1 GMEM_TRACE_KEEP=none GMEM_TRACE_SAVE=$trace with_shim "$bin/private_context" \
  >"$bin/private_context.log" 2>&1
rc=$?
grep -E '^(private_context|FAIL|gmem: pool)' "$bin/private_context.log" | cut -c1-240
[ $rc -eq 0 ] || { echo "FAIL: private_context under gmem (exit $rc)"; fail=1; }
grep -q "^gmem: pool device=0 kind=device context=destroyed .* total_allocs=32 total_frees=16 " \
  "$bin/private_context.log" || { echo "FAIL: no exit line for the destroyed context's pool"; fail=1; }
"$gmem" stats "$trace" --json >"$bin/private_context.json" || { echo "FAIL: gmem stats"; fail=1; }
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); d=[x for x in s['devices'] if x['device']==0][0]['counters']; \
assert d['total_allocs']==32 and d['total_frees']==16 and d['live_bytes']==0, d" "$bin/private_context.json" ||
  { echo "FAIL: gmem stats: the destroyed context's counters"; fail=1; }
"$gmem" leaks "$trace" >/dev/null || { echo "FAIL: gmem leaks reports the blocks the context released"; fail=1; }
exit $fail
