#!/usr/bin/env bash
# gmem exporter run as root on a shared host, with a second local user (nobody, through setpriv)
# as the attacker (cases R6-R9 and the bidirectional-override item of docs/security.md), on the
# fake driver:
#   case R6  another user's job with a secret on its command line: the scrape names it by pid,
#          uid, user and exe only: no command line, no call-site frames
#   case R7  300 forged "running" objects with a start time a year ahead (copies of the
#          attacker's own trace under the name of its own running process): root's services
#          are still exported; with --scrape-budget 1ms a scrape still answers
#   case R8  a forged object for root's exited pid (same pid, ticks, start second, command): no
#          two samples carry the same labels
#   case R9  idle TCP connections held open (4, then 24: more than the exporter's workers): a
#          scrape still answers within seconds
#   bidi   an argv[0] holding U+202E reaches no label raw
# and the whole exposition passes `promtool check metrics`. Skips (77) without root, setpriv,
# promtool or gmem-exporter. Servers bind 127.0.0.1 only; everything started is stopped.
set -u
source "$(dirname "$0")/serving_port.sh"
B=${GMEM_BUILD:-build}
B=$(realpath "$B")
GMEM=$B/bin/gmem
LEAK=$B/tests/tools/leak_sites
SVC=$B/tests/exporter/steady_service
skip() { echo "exporter_security_test: skipped: $*"; exit 77; }
for f in "$GMEM" "$LEAK" "$SVC" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
[ -x "$B/bin/gmem-exporter" ] || skip "gmem-exporter was not built (prometheus-cpp-dev missing)"
command -v promtool >/dev/null || skip "promtool is not installed (scripts/install-deps.sh test)"
[ "$(id -u)" = 0 ] || skip "needs root to run the attacker as a second uid (setpriv)"
command -v setpriv >/dev/null || skip "setpriv is not installed"
source "$(dirname "$0")/../second_uid.sh"
nobody_python # the attacker's python
W=$(mktemp -d /tmp/gmem_exporter_security_XXXXXX)
# nobody runs leak_sites under libgmem.so: copies it can reach, whatever directory holds the
# checkout.
nobody_build "$W" || { rm -rf "$W"; exit 1; }
JOBS=()
cleanup() {
  touch "$W/stop"
  for p in "${JOBS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${JOBS[@]}"; do wait "$p" 2>/dev/null; done
  "$GMEM" clean --force --user nobody >/dev/null 2>&1
  for p in $S1 $S2 $RJ; do "$GMEM" clean --force "$p" >/dev/null 2>&1; done
  for n in "${CLEAN[@]}"; do rm -f "/dev/shm/$n"; done
  rm -rf "$W"
}
CLEAN=() S1= S2= RJ=
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
objects_of() { ls /dev/shm | grep "^gmem\.$1\." ; }

# Copies trace object SRC (the attacker's own) to /dev/shm/DST as nobody, with the header's pid,
# start ticks, start time (ns) and, when given, flags set (trace_layout.h: bytes 24, 32, 40,
# 1488; exit time at 1480 cleared with the flags).
forge() { # SRC DST PID TICKS START_NS [FLAGS]
  "${NOBODY[@]}" "$PY3" - "$@" <<'PY'
import os, struct, sys
src, dst, pid, ticks, start = sys.argv[1:6]
data = bytearray(open("/dev/shm/" + src, "rb").read())
struct.pack_into("<I", data, 24, int(pid))
struct.pack_into("<Q", data, 32, int(ticks))
struct.pack_into("<Q", data, 40, int(start))
if len(sys.argv) > 6:
    struct.pack_into("<Q", data, 1488, int(sys.argv[6]))
    struct.pack_into("<Q", data, 1480, 0)
fd = os.open("/dev/shm/" + dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
os.write(fd, data)
os.close(fd)
PY
}

echo "== root's services and jobs, nobody's job with a secret"
"$GMEM" run -- "$SVC" stable "$W/stop" >"$W/svc1.out" 2>"$W/svc1.err" &
JOBS+=($!)
"$GMEM" run -- "$SVC" leak "$W/stop" >"$W/svc2.out" 2>"$W/svc2.err" &
JOBS+=($!)
for _ in $(seq 100); do
  grep -q '^ready' "$W/svc1.out" 2>/dev/null && grep -q '^ready' "$W/svc2.out" 2>/dev/null && break
  sleep 0.1
done
S1=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/svc1.out")
S2=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/svc2.out")
[ -n "$S1" ] && [ -n "$S2" ] || { fail "services did not start"; cat "$W"/svc*.err; exit 1; }
# root's exited job (case R8's victim) and nobody's, same program and arguments.
"$GMEM" run -- "$LEAK" same-args >/dev/null 2>"$W/rootjob.err"
RJ=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/rootjob.err")
"${NOBODY[@]}" env LD_PRELOAD="$B/lib/libgmem.so" "$LEAK" same-args >/dev/null 2>&1 &
wait $!
NJ=$(ls -t /dev/shm | grep '^gmem\.' | while read -r n; do
  [ "$(stat -c %U "/dev/shm/$n")" = nobody ] && { echo "$n"; break; }; done)
# nobody's job whose command line holds a token, started through an argv[0] with U+202E.
"${NOBODY[@]}" env LD_PRELOAD="$B/lib/libgmem.so" bash -c \
  'exec -a "/home/nobody/$(printf "\u202e")gnp.exe" "$1" --api-token=hunter2' _ "$LEAK" \
  >/dev/null 2>&1 &
wait $!
[ -n "$RJ" ] && [ -n "$NJ" ] || { fail "jobs did not leave traces: $RJ / $NJ"; exit 1; }
RJ_OBJ=$(objects_of "$RJ" | head -1)
echo "services $S1 $S2, root's job $RJ, nobody's trace $NJ"

echo "== gmem exporter (root)"
"$GMEM" exporter --listen 127.0.0.1:0 --keep-exited 10m 2>"$W/exporter.err" &
JOBS+=($!)
EPORT=$(serving_port "$W/exporter.err")
[ -n "$EPORT" ] || { fail "exporter did not start"; cat "$W/exporter.err"; exit 1; }
scrape() { curl -sf --max-time "${2:-20}" "http://127.0.0.1:$EPORT/metrics" >"$W/$1.txt"; }
scrape first || fail "scrape"

echo "== case R6: another user's command line and frames are not served"
grep -q hunter2 "$W/first.txt" && fail "the secret on nobody's command line is served"
grep 'uid="65534"' "$W/first.txt" | grep -Eq 'command=|frame=|caller=' &&
  fail "nobody's process has command or frame labels: $(grep 'uid="65534"' "$W/first.txt" | grep -E 'command=|frame=' | head -2)"
grep -q "gmem_live_bytes{pid=\"$RJ\",uid=\"0\",user=\"root\",exe=\"leak_sites\"" "$W/first.txt" ||
  fail "root's job is not named by pid, uid, user, exe: $(grep "pid=\"$RJ\"" "$W/first.txt" | head -1)"
grep -q 'uid="65534",user="nobody",exe="leak_sites"' "$W/first.txt" ||
  fail "nobody's job is not named by uid, user and exe"
grep -q "gmem_site_live_bytes{pid=\"$RJ\"" "$W/first.txt" ||
  fail "the exporter's own user's call sites are missing"

echo "== exe is the executable, not argv[0] (which holds U+202E); nothing raw"
grep -q $'\u202e' "$W/first.txt" && fail "U+202E served raw"
grep -q 'gnp.exe' "$W/first.txt" && fail "exe taken from argv[0]: $(grep -m1 'gnp.exe' "$W/first.txt")"
[ "$(grep -c '^gmem_process_info{.*uid="65534",user="nobody",exe="leak_sites"' "$W/first.txt")" -ge 2 ] ||
  fail "nobody's jobs (one started as argv[0] gnp.exe) are not both named exe=leak_sites"

echo "== promtool check metrics"
promtool check metrics <"$W/first.txt" >"$W/promtool.txt" 2>&1 ||
  fail "promtool check metrics: $(head -5 "$W/promtool.txt")"

echo "== case R8: a forged object for root's exited pid"
RJ_TICKS=$(echo "$RJ_OBJ" | cut -d. -f3)
RJ_START=$(sed -n "s/^gmem_process_info{pid=\"$RJ\".*start_time=\"\([0-9]*\)\".*/\1/p" "$W/first.txt" | head -1)
[ -n "$RJ_START" ] || fail "no start_time for root's job"
F8="gmem.$RJ.$RJ_TICKS.00000000000000f8"
CLEAN+=("$F8")
forge "$NJ" "$F8" "$RJ" "$RJ_TICKS" "${RJ_START}000000000" || fail "forging case R8"
scrape row8 || fail "scrape after case R8's forgery"
python3 - "$W/row8.txt" <<'PY' || fail "duplicate label sets"
import sys
seen, dups = set(), []
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip(): continue
    key = line.rsplit(" ", 1)[0]
    if key in seen: dups.append(key)
    seen.add(key)
if dups:
    print(f"{len(dups)} samples repeat a label set, e.g. {dups[0]}"); sys.exit(1)
PY
[ "$(grep -c "^gmem_process_info{pid=\"$RJ\"" "$W/row8.txt")" = 2 ] ||
  fail "root's job and the forgery should be two series told apart by uid"
promtool check metrics <"$W/row8.txt" >/dev/null 2>&1 || fail "promtool after case R8"

echo "== case R7: 300 forged running objects with a start time a year ahead"
"${NOBODY[@]}" sleep 120 &
SLEEPER=$!
JOBS+=($SLEEPER)
sleep 0.2
TICKS=$(awk '{print $22}' "/proc/$SLEEPER/stat")
YEAR=$(( ($(date +%s) + 365 * 86400) * 1000000000 ))
"${NOBODY[@]}" "$PY3" - "$NJ" "$SLEEPER" "$TICKS" "$YEAR" <<'PY' || fail "forging case R7"
import os, struct, sys
src, pid, ticks, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
data = bytearray(open("/dev/shm/" + src, "rb").read())
struct.pack_into("<I", data, 24, pid)
struct.pack_into("<Q", data, 32, ticks)
struct.pack_into("<Q", data, 1480, 0)
struct.pack_into("<Q", data, 1488, 0)  # not shut down: running while the sleeper runs
for i in range(300):
    struct.pack_into("<Q", data, 40, start + i * 1000000000)
    fd = os.open(f"/dev/shm/gmem.{pid}.{ticks}.{i:016x}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    os.close(fd)
PY
for i in $(seq 0 299); do CLEAN+=("$(printf 'gmem.%s.%s.%016x' "$SLEEPER" "$TICKS" "$i")"); done
t0=$(date +%s%N)
scrape row7 60 || fail "scrape with 300 forgeries"
t1=$(date +%s%N)
echo "scrape with 300 forgeries: $(( (t1 - t0) / 1000000 )) ms"
for p in "$S1" "$S2" "$RJ"; do
  grep -q "^gmem_process_running{pid=\"$p\"," "$W/row7.txt" ||
    fail "root's process $p crowded out by forgeries: $(grep '^gmem_exporter_traces' "$W/row7.txt" | tr '\n' ' ')"
done
n=$(grep -c "^gmem_process_info{pid=\"$SLEEPER\"" "$W/row7.txt")
[ "$n" -le 1 ] || fail "one running process exported $n times"
# With a tiny --scrape-budget a second exporter still answers, reads the first trace in rank
# order and counts the rest as over_budget.
"$B/bin/gmem-exporter" --listen 127.0.0.1:0 --keep-exited 10m --scrape-budget 1ms \
  2>"$W/budget.err" &
JOBS+=($!)
BPORT=$(serving_port "$W/budget.err")
curl -sf --max-time 20 "http://127.0.0.1:$BPORT/metrics" >"$W/budget.txt" || fail "scrape with a 1 ms budget"
grep -Eq '^gmem_exporter_traces\{outcome="over_budget"\} [1-9]' "$W/budget.txt" ||
  fail "a 1 ms budget left nothing over: $(grep '^gmem_exporter_traces' "$W/budget.txt" | tr '\n' ' ')"
grep -Eq '^gmem_exporter_traces\{outcome="exported"\} [1-9]' "$W/budget.txt" ||
  fail "a 1 ms budget exported nothing"
kill "$SLEEPER" 2>/dev/null

echo "== case R9: idle connections do not delay a scrape"
# N connections that send nothing, held until $W/stop.idle.N exists (at most 40 s); returns once
# all N are connected (the program says so), so the scrape queues behind them.
idle_connections() {
  "${NOBODY[@]}" "$PY3" - "$EPORT" "$W/stop.idle.$1" "$1" <<'PY' >"$W/idle.$1.out" &
import os, socket, sys, time
port, stop, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
print("connected", len(conns), flush=True)
deadline = time.time() + 40
while time.time() < deadline and not os.path.exists(stop):
    time.sleep(0.1)
PY
  IDLE=$!
  JOBS+=($IDLE)
  for _ in $(seq 100); do
    grep -q "^connected $1$" "$W/idle.$1.out" && return 0
    kill -0 "$IDLE" 2>/dev/null || break
    sleep 0.1
  done
  fail "the $1 idle connections were not made: $(cat "$W/idle.$1.out")"
}
for n in 4 24; do
  idle_connections $n
  t0=$(date +%s%N)
  scrape "idle$n" 10 || fail "a scrape behind $n idle connections did not answer within 10 s"
  t1=$(date +%s%N)
  echo "scrape behind $n idle connections (nobody's): $(( (t1 - t0) / 1000000 )) ms"
  touch "$W/stop.idle.$n"
  wait "$IDLE" 2>/dev/null
done

[ $failures -eq 0 ] && echo "exporter_security_test: all passed"
[ $failures -eq 0 ]
