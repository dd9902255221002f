#!/usr/bin/env bash
# Case R27 of docs/security.md: another local user (nobody, through setpriv) plants 20 trace
# objects whose headers are fully consistent (magic, the pid and start time of a process nobody
# really runs, total_bytes equal to the object's size) and whose sections are as large as the
# objects: two of 320 MiB of written module map, two with 2^19 written counter samples, sixteen
# of 1 GiB with a written page every MiB (THP makes a copy of those cost the whole GiB), and
# ten hard links. Root's `gmem ps`, `gmem leaks` (no target, and a target of root's) and one
# scrape of root's exporter must each stay under 256 MB of peak RSS and 2 s, and the scrape
# must still export root's own running job; with --max-bytes 200M no object is over budget (the
# budget is charged with the bytes read, not the objects' sizes), and with --max-bytes 1M root's
# job is still exported.
# Exit 0 pass, 77 skip (not root, no setpriv or python3, little /dev/shm), 1 fail.
set -u
source "$(dirname "$0")/serving_port.sh"
B=$(realpath "${GMEM_BUILD:-build}")
GMEM=$B/bin/gmem
LEAK=$B/tests/tools/leak_sites
SVC=$B/tests/exporter/steady_service
skip() { echo "forged_objects_bound_test: skipped: $*"; exit 77; }
for f in "$GMEM" "$LEAK" "$SVC" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
[ "$(id -u)" = 0 ] || skip "needs root to run the attacker as a second uid (setpriv)"
command -v setpriv >/dev/null || skip "setpriv is not installed"
[ -x /usr/bin/time ] || skip "no /usr/bin/time"
source "$(dirname "$0")/../second_uid.sh"
nobody_python
# On a /dev/shm of its own (a tmpfs in a private mount namespace): what other traces the host
# holds neither costs the readers nor is counted, and nothing planted outlives the test. The
# objects hold about 1.1 GiB of written pages.
if [ -z "${GMEM_PRIVATE_SHM:-}" ]; then
  avail_kb=$(awk '/^MemAvailable/ {print $2}' /proc/meminfo)
  [ "$avail_kb" -gt $((4 * 1024 * 1024)) ] || skip "${avail_kb} KiB of memory available, 4 GiB needed"
fi
source "$(dirname "$0")/../private_shm.sh"
private_shm 2g "$0" "$@"
W=$(mktemp -d /tmp/gmem_forged_bound_XXXXXX)
nobody_build "$W" || { rm -rf "$W"; exit 1; }
JOBS=()
S1= SLEEPER=
cleanup() {
  touch "$W/stop"
  for p in "${JOBS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${JOBS[@]}"; do wait "$p" 2>/dev/null; done
  [ -n "$SLEEPER" ] && rm -f /dev/shm/gmem."$SLEEPER".*
  "$GMEM" clean --force --user nobody >/dev/null 2>&1
  [ -n "$S1" ] && "$GMEM" clean --force "$S1" >/dev/null 2>&1
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

echo "== root's running job, nobody's own trace and running sleeper"
"$GMEM" run -- "$SVC" stable "$W/stop" >"$W/svc.out" 2>"$W/svc.err" &
JOBS+=($!)
for _ in $(seq 100); do grep -q '^ready' "$W/svc.out" 2>/dev/null && break; sleep 0.1; done
S1=$(sed -n 's/^ready \([0-9]*\)/\1/p' "$W/svc.out")
[ -n "$S1" ] || { fail "root's service did not start"; cat "$W/svc.err"; exit 1; }
"${NOBODY[@]}" env LD_PRELOAD="$B/lib/libgmem.so" "$LEAK" same-args >/dev/null 2>&1
NJ=$(ls -t /dev/shm | grep '^gmem\.' | while read -r n; do
  [ "$(stat -c %U "/dev/shm/$n")" = nobody ] && { echo "$n"; break; }; done)
[ -n "$NJ" ] || { fail "nobody's job left no trace"; exit 1; }
"${NOBODY[@]}" sleep 300 &
SLEEPER=$!
JOBS+=($SLEEPER)
sleep 0.2
TICKS=$(awk '{print $22}' "/proc/$SLEEPER/stat")

echo "== nobody plants 20 consistent objects of the worst shapes, and 10 hard links"
t0=$(date +%s%N)
"${NOBODY[@]}" "$PY3" - "$NJ" "$SLEEPER" "$TICKS" <<'PY' || fail "forging"
import os, struct, sys
from array import array
src, pid, ticks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = bytearray(open("/dev/shm/" + src, "rb").read())
MiB = 1 << 20
SECTIONS, EXTENTS, MAX_EXTENTS = 128, 4096, 24  # trace_layout.h
MODULES, SAMPLES = 9, 4
struct.pack_into("<I", base, 24, pid)
struct.pack_into("<Q", base, 32, ticks)
struct.pack_into("<Q", base, 1480, 0)  # no exit: running while the sleeper runs
struct.pack_into("<Q", base, 1488, 0)

def section(img, i, at, records):  # one extent of `records` records at `at`
    struct.pack_into("<Q", img, SECTIONS + 32 * i, records)
    struct.pack_into("<I", img, SECTIONS + 32 * i + 12, 1)
    struct.pack_into("<QQ", img, EXTENTS + 16 * MAX_EXTENTS * i, at, records)

def plant(n, img, total, fill):
    struct.pack_into("<Q", img, 16, total)  # total_bytes: the object's size
    name = f"/dev/shm/gmem.{pid}.{ticks}.{n:016x}"
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, img)
    fill(fd)
    os.ftruncate(fd, total)
    os.close(fd)
    return name

start = (len(base) + MiB - 1) // MiB * MiB
chunk = b"x" * MiB
for n in range(20):
    img = bytearray(base)
    if n < 2:  # 320 MiB of written module map
        total = 320 * MiB
        section(img, MODULES, start, (total - start) // 64)
        struct.pack_into("<Q", img, 1344, 65536)
        fill = lambda fd: [os.pwrite(fd, chunk, at) for at in range(start, total, MiB)]
    elif n < 4:  # 2^19 written counter samples
        record = struct.unpack_from("<I", img, SECTIONS + 32 * SAMPLES + 8)[0]
        count = 1 << 19
        total = start + count * record
        section(img, SAMPLES, start, count)
        struct.pack_into("<Q", img, 1408, count)  # sample_head
        ring = array("Q", bytes(count * record))
        ring[0::record // 8] = array("Q", range(2, 2 * count + 1, 2))  # complete, seq 1..count
        fill = lambda fd, ring=ring: os.pwrite(fd, ring.tobytes(), start)
    else:  # 1 GiB, a written page every MiB of its module map
        total = 1 << 30
        section(img, MODULES, start, (total - start) // 64)
        struct.pack_into("<Q", img, 1344, 65536)
        fill = lambda fd: [os.pwrite(fd, chunk[:4096], at) for at in range(start, total, MiB)]
    name = plant(n, img, total, fill)
    if n == 0:
        for k in range(10):
            os.link(name, f"/dev/shm/gmem.{pid}.{ticks}.{100 + k:016x}")
PY
t1=$(date +%s%N)
echo "planted in $(( (t1 - t0) / 1000000 )) ms: $(ls /dev/shm | grep -c "^gmem\.$SLEEPER\.") names, $(du -cm /dev/shm/gmem."$SLEEPER".* | tail -1 | cut -f1) MiB written"

# measure NAME CMD...: runs CMD as root under /usr/bin/time; fails over 256 MB or 2 s.
measure() {
  local name=$1
  shift
  /usr/bin/time -f '%M %e' -o "$W/$name.time" "$@" >"$W/$name.out" 2>"$W/$name.err"
  local kb s
  # The last line: a command that fails gets a "Command exited with non-zero status" line first.
  read -r kb s < <(tail -1 "$W/$name.time") || { fail "$name: no measurement"; return; }
  echo "$name: peak RSS $((kb / 1024)) MiB, $s s"
  [ "$kb" -lt $((256 * 1024)) ] || fail "$name: peak RSS ${kb} KiB, over 256 MB"
  awk -v s="$s" 'BEGIN { exit !(s < 2.0) }' || fail "$name: $s s, over 2 s"
}

echo "== root's readers"
measure ps "$GMEM" ps
grep -q "$S1" "$W/ps.out" || fail "gmem ps does not list root's job $S1"
measure leaks_no_target "$GMEM" leaks
measure leaks_victim "$GMEM" leaks "$S1"
grep -q "$S1" "$W/leaks_victim.out" || fail "gmem leaks $S1 printed no report: $(head -3 "$W/leaks_victim.err")"

if [ -x "$B/bin/gmem-exporter" ] && command -v curl >/dev/null; then
  echo "== root's exporter: one scrape"
  "$GMEM" exporter --listen 127.0.0.1:0 --keep-exited 10m 2>"$W/exporter.err" &
  EXP=$!
  JOBS+=($EXP)
  EPORT=$(serving_port "$W/exporter.err")
  if [ -z "$EPORT" ]; then
    fail "exporter did not start: $(head -3 "$W/exporter.err")"
  else
    t0=$(date +%s%N)
    curl -sf --max-time 30 "http://127.0.0.1:$EPORT/metrics" >"$W/scrape.txt" || fail "scrape"
    t1=$(date +%s%N)
    ms=$(( (t1 - t0) / 1000000 ))
    hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$EXP/status")
    echo "scrape: $ms ms, exporter peak RSS $((hwm / 1024)) MiB"
    grep '^gmem_exporter_traces' "$W/scrape.txt" | tr '\n' ' '
    echo
    [ "$ms" -lt 2000 ] || fail "scrape took $ms ms, over 2 s"
    [ "$hwm" -lt $((256 * 1024)) ] || fail "exporter peak RSS ${hwm} KiB, over 256 MB"
    grep -q "^gmem_process_running{pid=\"$S1\"," "$W/scrape.txt" ||
      fail "root's running job $S1 is missing from the scrape"
  fi
  # --max-bytes is charged with what a scrape reads (at most 4 MiB of each object to choose,
  # then --max-object-bytes of each exported one), not with the objects' sizes: 200 MiB reads
  # all 22 objects, where their 1 GiB of pages used to leave most of them over budget.
  "$GMEM" exporter --listen 127.0.0.1:0 --keep-exited 10m --max-bytes 200M \
    2>"$W/exporter2.err" &
  JOBS+=($!)
  EPORT=
  EPORT=$(serving_port "$W/exporter2.err")
  if curl -sf --max-time 30 "http://127.0.0.1:$EPORT/metrics" >"$W/scrape2.txt"; then
    grep -q '^gmem_exporter_traces{outcome="over_budget"} 0$' "$W/scrape2.txt" ||
      fail "--max-bytes 200M: $(grep '^gmem_exporter_traces{outcome="over_budget"}' "$W/scrape2.txt")"
    grep -q "^gmem_process_running{pid=\"$S1\"," "$W/scrape2.txt" ||
      fail "--max-bytes 200M: root's running job $S1 is missing from the scrape"
  else
    fail "scrape of the exporter with --max-bytes 200M"
  fi
  # However little --max-bytes leaves after the light reads of nobody's objects, root's own
  # running job (ranked first) is still exported.
  "$GMEM" exporter --listen 127.0.0.1:0 --keep-exited 10m --max-bytes 1M \
    2>"$W/exporter3.err" &
  JOBS+=($!)
  EPORT=
  EPORT=$(serving_port "$W/exporter3.err")
  curl -sf --max-time 30 "http://127.0.0.1:$EPORT/metrics" >"$W/scrape3.txt" ||
    fail "scrape of the exporter with --max-bytes 1M"
  grep -q "^gmem_process_running{pid=\"$S1\"," "$W/scrape3.txt" ||
    fail "--max-bytes 1M: root's running job $S1 is missing: $(grep '^gmem_exporter_traces' "$W/scrape3.txt" | tr '\n' ' ')"
else
  echo "(gmem-exporter or curl missing: the exporter's part skipped)"
fi

[ "$failures" = 0 ] && echo "forged_objects_bound_test: ok" && exit 0
echo "forged_objects_bound_test: $failures failure(s)"
exit 1
