#!/usr/bin/env bash
# gmem exporter's own process hygiene, on the fake driver:
#   symbolizer  the child that symbolizes a process's call sites outlives the scrape that
#               started it: call sites that appear after the first scrape are still named
#               (leak_slowly, not steady_service+0x...), and no child is left a zombie; each
#               child holds one socket and the module files it opened, none of the
#               exporter's sockets; NoNewPrivs
#   idle        128 idle TCP connections held open (by nobody when run as root): a scrape
#               still answers within 2 s
# Runs on a /dev/shm of its own (tests/private_shm.sh). Skips (77) without gmem-exporter.
# Servers bind 127.0.0.1 only; everything started is stopped.
set -u
source "$(dirname "$0")/serving_port.sh"
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
SVC=$B/tests/exporter/steady_service
for f in "$GMEM" "$SVC" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
if [ ! -x "$B/bin/gmem-exporter" ]; then
  echo "skip: gmem-exporter was not built (prometheus-cpp-dev missing; scripts/install-deps.sh)"
  exit 77
fi
# A scrape's time is what the idle connections cost, not what other traces /dev/shm holds.
source "$(dirname "$0")/../private_shm.sh"
private_shm 512m "$0" "$@"
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
JOBS=()
before_cleanup() {
  touch "$W/stop"
  for p in "${JOBS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${JOBS[@]}"; do wait "$p" 2>/dev/null; done
}
source "$(dirname "$0")/../traced_runs.sh"

"$GMEM" run -- "$SVC" later "$W/stop" >"$W/svc.out" 2>"$W/svc.err" &
JOBS+=($!)
for _ in $(seq 100); do
  grep -q '^ready' "$W/svc.out" 2>/dev/null && break
  sleep 0.1
done
SVC_PID=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/svc.out")
[ -n "$SVC_PID" ] || { fail "service did not start"; cat "$W/svc.err"; exit 1; }
PIDS+=("$SVC_PID")

"$GMEM" exporter --listen 127.0.0.1:0 --growth-window 1m 2>"$W/exporter.err" &
EXPORTER=$!
JOBS+=("$EXPORTER")
EPORT=$(serving_port "$W/exporter.err")
[ -n "$EPORT" ] || { fail "exporter did not start"; cat "$W/exporter.err"; exit 1; }
scrape() { curl -sf --max-time 20 "http://127.0.0.1:$EPORT/metrics" >"$W/$1.txt"; }

echo "== symbolizer: call sites new to a later scrape are named"
scrape first || fail "first scrape"
grep -q 'hold_model' "$W/first.txt" || fail "first scrape: hold_model not named"
sleep 1
touch "$W/stop.go"
sleep 1.5
scrape second || fail "second scrape"
grep -q "gmem_site_live_bytes{pid=\"$SVC_PID\".*leak_slowly" "$W/second.txt" ||
  fail "second scrape: leak_slowly not named: $(grep -m2 "gmem_site_live_bytes{pid=\"$SVC_PID\"" "$W/second.txt")"
children=$(ps -o pid=,stat= --ppid "$EXPORTER")
echo "exporter's children: $(echo $children)"
echo "$children" | awk '$2 ~ /^Z/' | grep -q . && fail "a zombie child: $children"
[ -n "$children" ] || fail "no symbolizer child alive after two scrapes"
for c in $(echo "$children" | awk '{print $1}'); do
  # Beyond the module files it opens itself: one socket, nothing of the exporter's.
  held=$(for fd in /proc/$c/fd/*; do readlink "$fd"; done 2>/dev/null | grep -v '^/')
  [ "$(echo "$held" | grep -c .)" = 1 ] && echo "$held" | grep -q '^socket:' ||
    fail "child $c holds more than its socket: $(echo $held)"
  grep -q '^NoNewPrivs:[[:space:]]*1' /proc/$c/status || fail "child $c may gain privileges"
done

echo "== idle: 128 idle connections (of another user when root)"
ATTACKER=()
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  ATTACKER=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
"${ATTACKER[@]}" /usr/bin/python3 - "$EPORT" <<'PY' >"$W/held" &
import socket, sys, time
held = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(128)]
print("held", flush=True)
time.sleep(30)
PY
JOBS+=($!)
for _ in $(seq 100); do grep -q held "$W/held" 2>/dev/null && break; sleep 0.1; done
grep -q held "$W/held" || fail "could not open 128 connections"
sleep 0.2
took=$(curl -sf -o "$W/idle.txt" -w '%{time_total}' --max-time 20 "http://127.0.0.1:$EPORT/metrics") ||
  fail "scrape with 128 idle connections"
echo "scrape with 128 idle connections: ${took} s"
awk -v t="$took" 'BEGIN { exit !(t < 2) }' || fail "a scrape took ${took} s with 128 idle connections"
kill -0 "$EXPORTER" 2>/dev/null || fail "exporter died"

[ $failures -eq 0 ] || exit 1
echo "exporter_hardening_test: all passed"
