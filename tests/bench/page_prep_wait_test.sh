#!/usr/bin/env bash
# bench/probes/page_prep_wait.cpp: two short rounds print a line per mode and round and a
# summary per mode (populate, touch, reserve) with the other thread's calls counted; a bad
# argument is refused with its range.
set -u
B=${GMEM_BUILD:-build}
P=$B/bench/page_prep_wait
[ -x "$P" ] || { echo "page_prep_wait_test: skipped: $P not built"; exit 77; }
fail() { echo "page_prep_wait_test: FAIL: $*"; echo "$out"; exit 1; }
out=$(timeout 120 "$P" --rounds 2 --chunk-mib 1 --chunks 2 2>&1)
rc=$?
if [ $rc != 0 ] && grep -qF "Linux 5.14 or later" <<<"$out"; then
  echo "page_prep_wait_test: skipped: no MADV_POPULATE_WRITE on this kernel"
  exit 77
fi
[ $rc = 0 ] || fail "rc $rc"
python3 - "$out" <<'PY' || fail "not 2 rounds of 3 modes and 3 summaries"
import json, sys
rows = [json.loads(line) for line in sys.argv[1].splitlines()]
rounds = [r for r in rows if "round" in r]
summaries = {r["summary"]: r for r in rows if "summary" in r}
assert len(rounds) == 6, rounds
for k in (0, 1):
    assert sorted(r["mode"] for r in rounds if r["round"] == k) == ["populate", "reserve", "touch"]
assert all(r["calls"] > 0 and r["helper_ms_per_mib"] > 0 and r["max_us"] >= r["p50_us"]
           for r in rounds), rounds
assert set(summaries) == {"populate", "touch", "reserve"}, summaries
assert all(s["rounds"] == 2 and s["chunk_mib"] == 1 and s["chunks"] == 2
           for s in summaries.values()), summaries
PY
out=$("$P" --rounds 0 2>&1) && fail "--rounds 0 ran"
grep -qF -- "--rounds wants a number from 1 to 1000" <<<"$out" || fail "--rounds 0: no range named"
echo "page_prep_wait_test: ok"
