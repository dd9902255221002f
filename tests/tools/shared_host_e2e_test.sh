#!/usr/bin/env bash
# Cases R1, R3, R5 and R12 of docs/security.md, the readers and the launcher, end to end on the
# fake driver:
# another local user (nobody, through setpriv) attacks root's gmem.
#   case R1   a library of theirs, stripped, whose .gnu_debuglink names a FIFO beside it, loaded
#           from a path written /usr/../../../..DIR/libevil.so: root's `gmem leaks PID` must
#           not hang (elfutils used to open /usr/lib/debug/usr/../../../..DIR/fifo blocking)
#   case R3   objects gmem.<pid>.1 planted for a process of root's (copies of their own trace,
#           header patched): `gmem run`'s summary and `gmem leaks PID` of a running process
#           must not show them
#   case R5   gmem installed under a path with a space, and their space/lib/libgmem.so in a
#           shared working directory: `gmem run` and `pytest --gmem` must not load it
#   case R12  a symlink planted at the name GMEM_TRACE_SAVE expands to: the summary must not say
#           "trace saved to"; a FIFO there is not replaced
# Exit 0 pass, 77 skip (not root, or no compiler), 1 fail.
set -u
R=$PWD # the repository (python/ for the pytest plugin)
B=$(realpath "${GMEM_BUILD:-build}")
GMEM=$B/bin/gmem
LEAK=$B/tests/tools/leak_sites
for f in "$GMEM" "$LEAK" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
if [ "$(id -u)" != 0 ]; then
  echo "shared_host_e2e_test: skipped: the attacker must be a second uid (needs root for setpriv)"
  exit 77
fi
# A python3 the other user can run too (not one under root's home).
PY3=/usr/bin/python3
[ -x "$PY3" ] || PY3=$(command -v python3)
for tool in cc objcopy strip setpriv "$PY3"; do
  command -v "$tool" >/dev/null ||
    { echo "shared_host_e2e_test: skipped: no $tool"; exit 77; }
done
NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
W=$(mktemp -d /tmp/gmem_shared_host_XXXXXX)
# nobody runs gmem and leak_sites: copies it can reach, whatever directory holds the checkout.
source "$R/tests/second_uid.sh"
B=$(reachable_build "$B" "$W" tests/tools/leak_sites) || { rm -rf "$W"; exit 1; }
GMEM=$B/bin/gmem
LEAK=$B/tests/tools/leak_sites
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
A=$W/home # the other user's directory
mkdir -p "$A/x" && chown -R nobody:nogroup "$A"
S=$W/shared # a shared working directory
mkdir "$S" && chmod 1777 "$S"
PIDS=()
CLEAN=()
PLANTED=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PLANTED[@]}"; do rm -f "/dev/shm/gmem.$p.1"; done
  for p in "${CLEAN[@]}"; do "$GMEM" clean --force --all-users "$p" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap cleanup EXIT
HOSTILE=$(cd "$(dirname "$0")/../tools" && pwd) # hostile_lib.c, hostile_loader.c
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The other user's library (hostile_lib.c: 1 MiB never freed, so root's leak report symbolizes
# a frame in it) and its loader (hostile_loader.c: reports its pid).
cat >"$W/preload.c" <<'C'
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void pwn(void) {
  int fd = open("pwned-by-preload", O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) close(fd);
}
C
cc -shared -fPIC -O1 -g -fno-omit-frame-pointer -Wl,--build-id -o "$W/libevil.so" "$HOSTILE/hostile_lib.c" -ldl &&
  cc -O1 -o "$W/loader" "$HOSTILE/hostile_loader.c" -ldl &&
  cc -shared -fPIC -o "$W/libpreload.so" "$W/preload.c" ||
  { echo "shared_host_e2e_test: skipped: cannot compile the attacker's programs"; exit 77; }
chmod 755 "$W"/libevil.so "$W"/loader "$W"/libpreload.so

echo "== case R1: a debuglink to a FIFO behind a '..' module path hangs no reader"
# Stripped (no symbols, no DWARF: elfutils goes looking for separate debug info), with a
# .gnu_debuglink naming "fifo" (objcopy reads a regular file of that name for the CRC, then
# the other user puts a FIFO in its place).
(cd "$A/x" && cp "$W/libevil.so" libevil.so && strip -s libevil.so && echo x >fifo &&
  objcopy --add-gnu-debuglink=fifo libevil.so && rm fifo && mkfifo fifo &&
  chown -R nobody:nogroup "$A/x") || fail "could not build the stripped library"
DOTTED=/usr/../../../..$A/x/libevil.so
(cd "$A" && timeout 60 "${NOBODY[@]}" env GMEM_TRACE_KEEP=all "$GMEM" run -q -- "$W/loader" \
  "$DOTTED" >"$W/row1.out" 2>"$W/row1.err") || fail "the other user's run failed: $(cat "$W/row1.err")"
EPID=$(sed -n 's/^pid //p' "$W/row1.out")
if [ -z "$EPID" ]; then
  fail "no pid from the loader: $(cat "$W/row1.out" "$W/row1.err")"
else
  CLEAN+=("$EPID")
  start=$(date +%s)
  timeout 30 "$GMEM" leaks "$EPID" >"$W/row1.leaks" 2>&1
  rc=$?
  [ $rc = 124 ] && fail "root's gmem leaks hung on the FIFO named by the debuglink"
  [ $(($(date +%s) - start)) -le 15 ] || fail "gmem leaks took over 15 s"
  [ $rc = 1 ] || fail "gmem leaks: exit $rc, expected 1 (leaks): $(cat "$W/row1.leaks")"
  grep -q "libevil.so+0x" "$W/row1.leaks" || fail "the library's frame is not module+offset"
  grep -q "'\.\.'" "$W/row1.leaks" || fail "no note about the '..' path: $(cat "$W/row1.leaks")"
  timeout 30 "$GMEM" report "$EPID" -o "$W/row1.html" >/dev/null 2>&1
  [ $? = 124 ] && fail "root's gmem report hung"
fi

echo "== case R3: objects planted under root's pids are not root's traces"
# The other user's own trace, to copy.
(cd "$A" && timeout 60 "${NOBODY[@]}" env GMEM_TRACE_KEEP=all "$GMEM" run -- "$LEAK" \
  >/dev/null 2>"$W/src.err") || fail "the other user's leak_sites run failed"
SRC_PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/src.err")
SRC=$(ls /dev/shm | grep "^gmem\.$SRC_PID\." | head -1)
[ -n "$SRC" ] || fail "no trace of the other user's to copy: $(cat "$W/src.err")"
CLEAN+=("$SRC_PID")
# plant PID: /dev/shm/gmem.PID.1, a copy of that trace with the header's pid and start time
# patched to match the name, written by the other user.
plant() {
  PLANTED+=("$1")
  "${NOBODY[@]}" "$PY3" - "/dev/shm/$SRC" "$1" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
pid = int(sys.argv[2])
struct.pack_into("<I", data, 24, pid)
struct.pack_into("<Q", data, 32, 1)
with open(f"/dev/shm/gmem.{pid}.1", "wb") as f:
    f.write(data)
PY
}
# gmem run: the other user plants an object for the child while it runs.
coproc HOLD { timeout 60 "$GMEM" run -- sh -c 'echo $$; read -r _' 2>&1; }
HOLD_WAIT=$HOLD_PID
read -r RPID <&"${HOLD[0]}"
if [ -n "$RPID" ]; then
  plant "$RPID" || fail "could not plant for pid $RPID"
  echo go >&"${HOLD[1]}"
  exec {HOLD[1]}>&-
  SUMMARY=$(timeout 30 cat <&"${HOLD[0]}")
  echo "$SUMMARY" | grep -q "LEAKS" && fail "gmem run's summary shows the planted trace: $SUMMARY"
  echo "$SUMMARY" | grep -q "gmem: no trace" || fail "gmem run's summary: expected 'no trace': $SUMMARY"
else
  fail "no pid from gmem run -- sh"
fi
wait "$HOLD_WAIT" 2>/dev/null
# gmem leaks PID of a running process that is not traced.
sleep 60 &
SPID=$!
PIDS+=("$SPID")
plant "$SPID" || fail "could not plant for pid $SPID"
timeout 30 "$GMEM" leaks "$SPID" >"$W/row3.leaks" 2>&1
rc=$?
grep -q "exited\|MiB" "$W/row3.leaks" && fail "gmem leaks PID shows the planted trace: $(cat "$W/row3.leaks")"
[ $rc = 3 ] || fail "gmem leaks of an untraced running process: exit $rc, expected 3 (not found): $(cat "$W/row3.leaks")"
grep -q "no gmem trace of its own" "$W/row3.leaks" || fail "no word that it has no trace: $(cat "$W/row3.leaks")"
kill "$SPID" 2>/dev/null
wait "$SPID" 2>/dev/null
# Once it is gone, the planted object is the only trace left under that pid: it may be read,
# but the answer says whose it is.
timeout 30 "$GMEM" leaks "$SPID" >"$W/row3.dead" 2>&1
grep -q "left under its pid by uid 65534" "$W/row3.dead" || fail "a dead pid's foreign trace does not say whose it is: $(head -3 "$W/row3.dead")"
rm -f "/dev/shm/gmem.$RPID.1" "/dev/shm/gmem.$SPID.1"

echo "== case R5: a libgmem.so path with a space is refused, not split"
I="$W/gm space"
mkdir -p "$I/bin" "$I/lib"
cp "$GMEM" "$I/bin/" && cp "$B/lib/libgmem.so" "$B"/lib/libdw.so.1 "$B"/lib/libelf.so.1 \
  "$B"/lib/libbz2.so.1.0 "$I/lib/" 2>/dev/null
"${NOBODY[@]}" mkdir -p "$S/space/lib" && "${NOBODY[@]}" cp "$W/libpreload.so" "$S/space/lib/libgmem.so" ||
  fail "could not plant space/lib/libgmem.so"
(cd "$S" && timeout 30 "$I/bin/gmem" run -- /bin/true >"$W/row5.out" 2>&1)
rc=$?
[ -e "$S/pwned-by-preload" ] && fail "gmem run loaded the other user's space/lib/libgmem.so"
[ $rc = 0 ] && fail "gmem run ran the program with a path the loader splits"
grep -q "space or a colon" "$W/row5.out" || fail "no clear message: $(cat "$W/row5.out")"
rm -f "$S/pwned-by-preload"
PY= skipped=
for p in python3 "$PY3"; do
  "$p" -m pytest --version >/dev/null 2>&1 && { PY=$p; break; }
done
if [ -n "$PY" ]; then
  cat >"$S/test_row5.py" <<'PY'
def test_nothing():
    pass
PY
  (cd "$S" && env -u LD_PRELOAD GMEM_SHIM="$I/lib/libgmem.so" PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH="$R/python${PYTHONPATH:+:$PYTHONPATH}" timeout 60 $PY -m pytest -p gmem.pytest_plugin \
    -p no:cacheprovider -q --gmem test_row5.py >"$W/row5.pytest" 2>&1)
  [ -e "$S/pwned-by-preload" ] && fail "pytest --gmem loaded the other user's space/lib/libgmem.so"
  grep -q "CANNOT TRACK.*space or a colon" "$W/row5.pytest" ||
    fail "pytest --gmem: no clear refusal: $(cat "$W/row5.pytest")"
  rm -f "$S/pwned-by-preload"
elif command -v apt-get >/dev/null; then
  fail "case R5, pytest: no pytest (scripts/install-deps.sh test installs python3-pytest)"
else
  skipped="case R5's pytest part (no pytest and no apt-get to install it)"
fi

echo "== case R12: a symlink at the GMEM_TRACE_SAVE name; the summary tells the truth"
echo "keep me" >"$W/precious"
coproc SAVE { timeout 60 "$GMEM" run -e "GMEM_TRACE_SAVE=$S/x-%p.gmem" -- "$LEAK" --hold 2>&1; }
SAVE_WAIT=$SAVE_PID
read -r ready LPID <&"${SAVE[0]}"
if [ "$ready" = ready ] && [ -n "$LPID" ]; then
  CLEAN+=("$LPID")
  "${NOBODY[@]}" ln -s "$W/precious" "$S/x-$LPID.gmem" || fail "could not plant the symlink"
  exec {SAVE[1]}>&-
  OUT=$(timeout 30 cat <&"${SAVE[0]}")
  echo "$OUT" | grep -q "trace saved to" && fail "the summary says the trace was saved: $OUT"
  echo "$OUT" | grep -q "GMEM_TRACE_SAVE: .*x-$LPID.gmem: a symbolic link" ||
    fail "the summary does not say why it was not saved: $OUT"
  [ "$(cat "$W/precious")" = "keep me" ] || fail "the file behind the symlink changed"
  [ -L "$S/x-$LPID.gmem" ] || fail "the symlink was replaced"
else
  fail "leak_sites --hold did not start: $ready $LPID"
fi
wait "$SAVE_WAIT" 2>/dev/null
# A save that fails (no such directory): the summary says so instead of "trace saved to".
timeout 60 "$GMEM" run -e "GMEM_TRACE_SAVE=$W/no-such-dir/t-%p.gmem" -- "$LEAK" >"$W/row12a.out" 2>&1
grep -q "trace saved to" "$W/row12a.out" && fail "the summary says a failed save was saved: $(cat "$W/row12a.out")"
grep -q "GMEM_TRACE_SAVE: .*no-such-dir/t-[0-9]*.gmem: not written" "$W/row12a.out" ||
  fail "the summary does not say the save failed: $(cat "$W/row12a.out")"
RPID1=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/row12a.out")
[ -n "$RPID1" ] && CLEAN+=("$RPID1")
# A FIFO of the other user's in a shared directory that is not sticky: left as it is.
N=$W/open
mkdir "$N" && chmod 777 "$N"
"${NOBODY[@]}" mkfifo "$N/t.gmem" || fail "mkfifo"
timeout 60 "$GMEM" run -e "GMEM_TRACE_SAVE=$N/t.gmem" -- "$LEAK" >"$W/row12.out" 2>&1
[ -p "$N/t.gmem" ] || fail "the save replaced the other user's FIFO: $(ls -l "$N")"
grep -q "trace saved to" "$W/row12.out" && fail "the summary says the trace was saved over a FIFO"
RPID2=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/row12.out")
[ -n "$RPID2" ] && CLEAN+=("$RPID2")

[ $failures = 0 ] || exit 1
[ -z "$skipped" ] && echo "shared host e2e: all checks passed" && exit 0
echo "shared host e2e: all that ran passed; skipped: $skipped"
exit 77
