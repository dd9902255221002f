#!/usr/bin/env bash
# On the real driver: the shim's OOM report (GMEM_OOM_REPORT) and `gmem oom` when leak_sites
# runs under a 48 MiB limit; `gmem leaks --growth` and `gmem diff` on steady_service (leaks
# 64 KiB every 100 ms, holds 8 MiB); and, when gmem-exporter can run here (prometheus-cpp's
# libraries installed), its scrape. Uses the programs `make` builds (no nvcc needed).
# Exit 0 pass, 1 fail, 77 when the rest passed but gmem-exporter cannot run here.
source "$(dirname "$0")/lib.sh"
export GMEM_TRACE=1
GMEM=$build/bin/gmem
LEAK=$build/tests/tools/leak_sites
SVC=$build/tests/exporter/steady_service
for f in "$GMEM" "$LEAK" "$SVC"; do [ -x "$f" ] || { echo "missing $f (make builds it)"; exit 1; }; done
W=$(mktemp -d)
PIDS=() JOBS=()
cleanup() {
  touch "$W/stop"
  for j in "${JOBS[@]}"; do kill "$j" 2>/dev/null; wait "$j" 2>/dev/null; done
  for p in "${PIDS[@]}"; do "$GMEM" clean --force "$p" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap cleanup EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

echo "== OOM under --limit 48M (leak_sites holds 10 MiB, then asks for 40 MiB)"
"$GMEM" run --limit 48M -- "$LEAK" >"$W/oom.out" 2>"$W/oom.err"
cat "$W/oom.err"
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/oom.err")
[ -n "$PID" ] && PIDS+=("$PID")
grep -q "gmem: OUT OF MEMORY" "$W/oom.err" || bad "no OOM report on stderr"
grep -Eq "device free [0-9.]+ [KMG]i?B of [0-9.]+ GiB, pool limit 48.0 MiB" "$W/oom.err" ||
  bad "OOM report: device free/total from the real driver"
[ -n "$PID" ] && { "$GMEM" oom "$PID"; [ $? = 1 ] || bad "gmem oom exit status"; }

echo "== growth and diff on a leaking service"
"$GMEM" run -- "$SVC" leak "$W/stop" >"$W/svc.out" 2>"$W/svc.err" &
JOBS+=($!)
for _ in $(seq 100); do grep -q '^ready' "$W/svc.out" 2>/dev/null && break; sleep 0.1; done
SP=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/svc.out")
[ -n "$SP" ] || { bad "service did not start: $(cat "$W/svc.err")"; exit 1; }
PIDS+=("$SP")
sleep 1
"$GMEM" save "$SP" "$W/a.gmem" && sleep 2 && "$GMEM" save "$SP" "$W/b.gmem" || bad "save"
"$GMEM" leaks --growth=1s "$SP" --frames 2 | tee "$W/growth.txt"
# The first site (from its "#1 +" line to the blank line after its frames) grew and is leak_slowly.
sed -n '/^#1 +/,/^$/p' "$W/growth.txt" | grep -q "leak_slowly" || bad "growth: leak_slowly not ranked first"
"$GMEM" diff "$W/a.gmem" "$W/b.gmem" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
s = [x for x in d["sites"] if "leak_slowly" in x["caller"]][0]
assert d["same_process"] and s["freed_count"] == 0 and s["added_count"] >= 10, s
print("diff: +%d leaked allocations, none freed" % s["added_count"])' || bad "diff"

echo "== exporter (if prometheus-cpp is installed here)"
if [ -x "$build/bin/gmem-exporter" ] && "$build/bin/gmem-exporter" --help >/dev/null 2>&1; then
  "$GMEM" exporter --listen 127.0.0.1:0 --growth-window 2s 2>"$W/exp.err" &
  JOBS+=($!)
  P=
  for _ in $(seq 100); do # the exporter says where it serves once it listens
    P=$(sed -n 's|.*127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$W/exp.err")
    [ -n "$P" ] && break
    sleep 0.1
  done
  if [ -z "$P" ]; then
    bad "the exporter did not start: $(cat "$W/exp.err")"
  else
    curl -sf "http://127.0.0.1:$P/metrics" >"$W/m.txt" || bad "scrape"
    grep "pid=\"$SP\"" "$W/m.txt" | grep -E "gmem_site_growth_bytes.*leak_slowly.*\} [1-9]" ||
      bad "exporter: leak growth"
  fi
else
  [ $fail = 0 ] || exit 1
  echo "skipped part: gmem-exporter cannot run on this machine (no prometheus-cpp runtime)"
  exit 77
fi
exit $fail
