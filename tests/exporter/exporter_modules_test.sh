#!/usr/bin/env bash
# gmem exporter run as root (started with setsid, as a service is) on a shared host, against module
# files that a second local user (nobody, through setpriv) controls (cases R1 and R2 of
# docs/security.md at the exporter's level), on the fake driver. Root's job loads two libraries from
# nobody's directories and leaks from each, so the exporter symbolizes frames in them:
#   case R1  libevil.so, stripped, whose .gnu_debuglink names a FIFO beside it, loaded from a path
#          written /usr/../../../..DIR/libevil.so: every scrape answers within 4 s (elfutils
#          used to open /usr/lib/debug/usr/../../../..DIR/fifo blocking, and every later scrape
#          timed out; the symbolizer's own budget is 5 s, so the bound is below it)
#   case R2  libvictim.so, replaced after the run by a symlink to nobody's pseudo-terminal: the
#          exporter never acquires it as its controlling terminal (tty_nr in /proc/PID/stat
#          stays 0), and ^\ ^C ^Z typed on that terminal leave it running and answering
# Skips (77) without root, setpriv, a C compiler, objcopy or gmem-exporter. The exporter binds
# 127.0.0.1 only; everything started is stopped.
set -u
source "$(dirname "$0")/serving_port.sh"
B=$(realpath "${GMEM_BUILD:-build}")
GMEM=$B/bin/gmem
EXPORTER=$B/bin/gmem-exporter
skip() { echo "exporter_modules_test: skipped: $*"; exit 77; }
for f in "$GMEM" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
[ -x "$EXPORTER" ] || skip "gmem-exporter was not built (prometheus-cpp-dev missing)"
[ "$(id -u)" = 0 ] || skip "needs root to run the attacker as a second uid (setpriv)"
for tool in cc objcopy strip setpriv setsid curl; do
  command -v "$tool" >/dev/null || skip "no $tool"
done
NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
# The attacker's python: one nobody can run (root's may live under /root).
PY3=$(command -v /usr/bin/python3 || command -v python3)
"${NOBODY[@]}" "$PY3" -c pass 2>/dev/null || skip "nobody cannot run $PY3"
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$(mktemp -d /tmp/gmem_modules_XXXXXX)
chmod 755 "$W"
A=$W/home # nobody's directory
mkdir -p "$A/x" "$A/y" && chown -R nobody:nogroup "$A"
JOBS=()
CLEAN=()
cleanup() {
  touch "$W/stop"
  for p in "${JOBS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${JOBS[@]}"; do wait "$p" 2>/dev/null; done
  for p in "${CLEAN[@]}"; do "$GMEM" clean --force "$p" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap cleanup EXIT
HOSTILE=$(cd "$(dirname "$0")/../tools" && pwd) # hostile_lib.c, hostile_loader.c
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# tests/tools/hostile_lib.c (a leak site whose frame is in the library) and its loader, which
# dlopens each path it is given.
cc -shared -fPIC -O1 -g -fno-omit-frame-pointer -Wl,--build-id -o "$W/libevil.so" "$HOSTILE/hostile_lib.c" -ldl &&
  cc -O1 -o "$W/loader" "$HOSTILE/hostile_loader.c" -ldl ||
  skip "cannot compile the test's library and loader"
# Case R1's library: stripped, so elfutils looks for separate debug info, with a debuglink to
# "fifo" (objcopy reads a regular file of that name for the CRC; then a FIFO takes its place).
(cd "$A/x" && cp "$W/libevil.so" libevil.so && strip -s libevil.so && echo x >fifo &&
  objcopy --add-gnu-debuglink=fifo libevil.so && rm fifo && mkfifo fifo &&
  chown -R nobody:nogroup "$A/x") || { fail "could not build the stripped library"; exit 1; }
# Case R2's library: an unstripped copy under its own name (a distinct module).
cp "$W/libevil.so" "$A/y/libvictim.so" && chown -R nobody:nogroup "$A/y"
chmod 755 "$W/loader" "$A/x/libevil.so" "$A/y/libvictim.so"

echo "== root's job loads both libraries from nobody's directories"
DOTTED=/usr/../../../..$A/x/libevil.so
timeout 60 env GMEM_TRACE_KEEP=all "$GMEM" run -q -- "$W/loader" "$DOTTED" "$A/y/libvictim.so" \
  >"$W/job.out" 2>"$W/job.err" || fail "root's job failed: $(cat "$W/job.out" "$W/job.err")"
JPID=$(sed -n 's/^pid //p' "$W/job.out")
[ -n "$JPID" ] || { fail "no pid from the loader: $(cat "$W/job.out" "$W/job.err")"; exit 1; }
CLEAN+=("$JPID")

echo "== case R2 setup: nobody swaps libvictim.so for a symlink to their own terminal"
# nobody's terminal: the master stays with this process, which prints the slave's name, then
# types ^\ ^C ^Z on it when $W/type exists and keeps it open until $W/stop exists (60 s at most).
# It says "typed" once the terminal echoed a line typed after the three keys: the terminal has
# read them, so whatever signals they raise were sent.
"${NOBODY[@]}" "$PY3" - "$W" <<'PY' >"$W/pty.out" 2>"$W/pty.err" &
import os, select, sys, time
w = sys.argv[1]
master, slave = os.openpty()
print(os.ttyname(slave), flush=True)
typed = False
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists(w + "/stop"):
    if not typed and os.path.exists(w + "/type"):
        os.write(master, b"\x1c\x03\x1a" + b"after-the-keys\n")
        echo, until = b"", time.time() + 10
        while b"after-the-keys" not in echo and time.time() < until:
            if select.select([master], [], [], 0.5)[0]:
                echo += os.read(master, 4096)
        typed = True
        print("typed" if b"after-the-keys" in echo else "no echo: %r" % echo, flush=True)
    time.sleep(0.05)
PY
JOBS+=($!)
for _ in $(seq 50); do
  PTS=$(head -1 "$W/pty.out" 2>/dev/null)
  [ -n "$PTS" ] && break
  sleep 0.1
done
[ -n "$PTS" ] && [ -c "$PTS" ] || { fail "no terminal for nobody: $(cat "$W/pty.err")"; exit 1; }
"${NOBODY[@]}" sh -c 'rm -f "$1" && ln -s "$2" "$1"' _ "$A/y/libvictim.so" "$PTS" ||
  fail "nobody could not replace libvictim.so by a symlink to $PTS"

echo "== gmem exporter (root, its own session, no terminal)"
setsid "$EXPORTER" --listen 127.0.0.1:0 --keep-exited 10m </dev/null >/dev/null \
  2>"$W/exporter.err" &
EXP=$!
JOBS+=($EXP)
EPORT=$(serving_port "$W/exporter.err" 10)
[ -n "$EPORT" ] || { fail "exporter did not start: $(cat "$W/exporter.err")"; exit 1; }
# The fields of /proc/PID/stat after the command name: state ppid pgrp session tty_nr ...
stat_field() { sed 's/.*) //' "/proc/$EXP/stat" | cut -d' ' -f"$1"; }
[ "$(stat_field 4)" = "$EXP" ] || fail "the exporter is not a session leader (setsid forked?)"
[ "$(stat_field 5)" = 0 ] || fail "the exporter has a controlling terminal before any scrape"

echo "== case R1: every scrape answers within 4 s"
# Scraped three times: the first one symbolizes the job's frames, the later ones must not be
# held by whatever the first one left behind.
scrape() { # NAME: scrapes into $W/NAME.txt, fails unless it answers within 4 s
  local t0 t1 ms
  t0=$(date +%s%N)
  curl -sf --max-time 20 "http://127.0.0.1:$EPORT/metrics" >"$W/$1.txt" ||
    fail "scrape $1 did not answer"
  t1=$(date +%s%N)
  ms=$(((t1 - t0) / 1000000))
  echo "scrape $1: $ms ms"
  [ "$ms" -lt 4000 ] || fail "scrape $1 took $ms ms (bound 4000)"
}
for n in 1 2 3; do scrape "s$n"; done
grep -q "pid=\"$JPID\"" "$W/s1.txt" || fail "root's job is not exported"
grep -q 'libevil\.so+0x' "$W/s1.txt" ||
  fail "no site frame in libevil.so (was the library's frame symbolized at all?): $(grep "pid=\"$JPID\"" "$W/s1.txt" | grep frame= | head -3)"

echo "== case R2: the terminal is never acquired, and typing on it kills nothing"
grep -q 'libvictim\.so+0x' "$W/s1.txt" ||
  fail "no site frame in libvictim.so: $(grep "pid=\"$JPID\"" "$W/s1.txt" | grep frame= | head -3)"
[ "$(stat_field 5)" = 0 ] ||
  fail "the exporter acquired a controlling terminal (tty_nr $(stat_field 5)) from the module map"
touch "$W/type"
for _ in $(seq 150); do
  grep -Eq '^(typed|no echo)' "$W/pty.out" && break
  sleep 0.1
done
grep -q '^typed' "$W/pty.out" || fail "nobody could not type on the terminal: $(tail -1 "$W/pty.out")"
# The signals were sent. A scrape answered now proves the exporter neither died (a fatal signal
# kills the process as it is sent) nor stopped (the answering thread ran after it was sent).
scrape after_typing
state=$(stat_field 1 2>/dev/null)
case "$state" in
  R | S | D) ;;
  *) fail "the exporter is ${state:-gone} after ^\\ ^C ^Z on nobody's terminal" ;;
esac

[ $failures -eq 0 ] && echo "exporter_modules_test: all passed"
[ $failures -eq 0 ]
