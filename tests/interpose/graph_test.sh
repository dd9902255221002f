#!/usr/bin/env bash
# Graph memory is traced with its own kind (fake driver, no GPU): graph_probe adds three
# allocation nodes (cuGraphAddMemAllocNode x2, cuGraphAddNode) and a free node for the first,
# leaving 2 MiB + 512 KiB outstanding. The exit counters, gmem leaks (kind "graph"), frag (the
# graph memory line), report and the Chrome export must all count them.
# Exit 0 pass, 1 fail.
set -u
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
PROBE=$B/tests/interpose/graph_probe
for f in "$GMEM" "$PROBE" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "graph_test: missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$GMEM" run -e GMEM_VERBOSE=1 -e GMEM_TRACE_SAVE="$W/t.gmem" -e GMEM_TRACE_KEEP=none -- \
  "$PROBE" >"$W/out" 2>"$W/err"
rc=$?
cat "$W/out" "$W/err"
[ "$rc" = 0 ] || fail "gmem run graph_probe: exit status $rc"
grep -q "^gmem: passthrough .* graph=3 " "$W/err" || fail "GMEM_VERBOSE does not count 3 graph allocations"

"$GMEM" leaks "$W/t.gmem" >"$W/leaks" 2>&1
rc=$?
cat "$W/leaks"
[ "$rc" = 1 ] || fail "gmem leaks: exit status $rc, expected 1 (graph memory outstanding)"
grep -q "2.50 MiB in 2 allocations" "$W/leaks" || fail "gmem leaks: the two graph allocations"
grep -q "graph" "$W/leaks" || fail "gmem leaks does not name the kind"
"$GMEM" leaks "$W/t.gmem" --json >"$W/leaks.json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); \
k=[x for s in r['sites'] for x in s.get('kinds',[])]; assert 'graph' in k, r" "$W/leaks.json" ||
  fail "gmem leaks --json: no kind graph"

"$GMEM" frag "$W/t.gmem" >"$W/frag" 2>&1 || fail "gmem frag"
cat "$W/frag"
grep -q "graph memory .*: 2.50 MiB in 2 allocations" "$W/frag" || fail "gmem frag: no graph memory line"
"$GMEM" frag "$W/t.gmem" --json >"$W/frag.json" || fail "gmem frag --json"
python3 -c "import json,sys; r=json.load(open(sys.argv[1])); d=[x for x in r['devices'] if x['device']==0][0]; \
assert d['graph_allocations']==2 and d['graph_bytes']==2621440, d" "$W/frag.json" ||
  fail "gmem frag --json: graph figures"

"$GMEM" report "$W/t.gmem" -o "$W/r.html" || fail "gmem report"
grep -q "peak graph memory" "$W/r.html" || fail "report: no graph memory"
"$GMEM" export "$W/t.gmem" --format chrome -o "$W/t.json" || fail "export chrome"
python3 -c "import json,sys; t=json.load(open(sys.argv[1])); ev=t['traceEvents'] if isinstance(t,dict) else t; \
assert max(e.get('args',{}).get('graph',0) for e in ev if e.get('ph')=='C') == 3670016, 'graph peak'" "$W/t.json" ||
  fail "chrome export: the graph memory counter does not reach 3.5 MiB"
echo "graph_test: $failures failures"
[ "$failures" -eq 0 ]
