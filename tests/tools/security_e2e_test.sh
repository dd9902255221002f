#!/usr/bin/env bash
# The shared-host cases of docs/security.md through the gmem command, without a GPU (fake driver): a
# program whose command line holds terminal escapes and invalid UTF-8 (case 7), report/export files
# planted as symlinks or already there (case 9), objects of another user in ps and clean (cases "not
# readable", clean), and a FIFO in /dev/shm that must not hang ps or the run summary (case 4). Parts
# that need a second uid run as nobody when we are root and are skipped otherwise.
set -u
B=${GMEM_BUILD:-build}
GMEM=$(realpath "$B/bin/gmem")
LEAK=$B/tests/tools/leak_sites
for f in "$GMEM" "$LEAK" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$(mktemp -d)
NB= # the copy of the build nobody runs (tests/second_uid.sh)
PID=
FIFO=
cleanup() {
  [ -n "$PID" ] && "$GMEM" clean --force "$PID" >/dev/null 2>&1
  [ -n "$FIFO" ] && rm -f "$FIFO"
  rm -f /dev/shm/gmem.4000000001.1
  rm -rf "$W" ${NB:+"$NB"}
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
raw_escape() { LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$@"; } # any control byte but \t \n

echo "== a FIFO named like a trace hangs neither ps nor the run summary (case 4)"
FIFO=/dev/shm/gmem.4000000000.7
rm -f "$FIFO" && mkfifo "$FIFO" || fail "mkfifo"
timeout 20 "$GMEM" ps >"$W/ps_fifo.txt" 2>&1
rc=$?
[ $rc = 124 ] && fail "gmem ps hung on a FIFO"
grep -q "not readable.*gmem.4000000000.7.*FIFO" "$W/ps_fifo.txt" || fail "ps: FIFO not reported: $(cat "$W/ps_fifo.txt")"

echo "== escapes and invalid UTF-8 in the command line (case 7)"
ARG=$'\e]0;owned\a\e[2J\xff'
timeout 60 "$GMEM" run -- "$LEAK" "$ARG" >"$W/run.out" 2>"$W/run.err"
rc=$?
[ $rc = 124 ] && fail "gmem run hung (the FIFO in /dev/shm?)"
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/run.err")
[ -n "$PID" ] || { fail "no pid in the run summary: $(cat "$W/run.err")"; exit 1; }
raw_escape "$W/run.err" && fail "run summary printed raw control bytes"
rm -f "$FIFO"
FIFO=
"$GMEM" ps >"$W/ps.txt" || fail "gmem ps"
"$GMEM" leaks "$PID" >"$W/leaks.txt"
[ $? = 1 ] || fail "gmem leaks exit status"
"$GMEM" stats "$PID" >"$W/stats.txt" || fail "gmem stats"
"$GMEM" frag "$PID" >"$W/frag.txt" || fail "gmem frag"
"$GMEM" top --once "$PID" >"$W/top.txt" || fail "gmem top --once"
"$GMEM" leaks --growth "$PID" >"$W/growth.txt"
[ $? = 1 ] || fail "gmem leaks --growth exit status"
"$GMEM" oom "$PID" >"$W/oom.txt" || fail "gmem oom"
"$GMEM" diff "$PID" "$PID" >"$W/diff.txt" || fail "gmem diff"
for f in ps leaks stats frag top growth oom diff; do
  raw_escape "$W/$f.txt" && fail "gmem $f printed raw control bytes"
done
grep -qF '\x1b]0;owned\x07\x1b[2J\xff' "$W/leaks.txt" || fail "leaks: command line not shown escaped"
grep -qF '\x1b]0;owned' "$W/ps.txt" || fail "ps: command line not shown escaped"
"$GMEM" leaks "$PID" --json >"$W/leaks.json"
"$GMEM" ps --json >"$W/ps.json" || fail "ps --json"
python3 - "$W/leaks.json" "$W/ps.json" <<'PY' || fail "JSON with a non-UTF-8 command line"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
assert d["trace"]["command"].endswith("\x1b]0;owned\x07\x1b[2J\ufffd"), repr(d["trace"]["command"])
json.load(open(sys.argv[2], encoding="utf-8"))
print("json: valid, escapes kept as JSON escapes")
PY
"$GMEM" export "$PID" --format pytorch -o "$W/snapshot.pickle" || fail "export pytorch"
python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb")); print("pickle loads")' \
  "$W/snapshot.pickle" || fail "the pickle does not load with a non-UTF-8 command line"
"$GMEM" export "$PID" --format chrome -o "$W/trace.json" || fail "export chrome"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$W/trace.json" || fail "chrome JSON invalid"

echo "== report and export files: 0600, never through a symlink, never replaced without --force (case 9)"
mkdir "$W/cwd" && echo "keep me" >"$W/precious"
ln -s "$W/precious" "$W/cwd/gmem-report.html"
(cd "$W/cwd" && "$GMEM" report "$PID" 2>"$W/report.err")
[ $? = 6 ] || fail "report through a planted symlink: exit status, expected 6"
grep -q "exists; --force replaces it" "$W/report.err" || fail "report: no clear message: $(cat "$W/report.err")"
[ "$(cat "$W/precious")" = "keep me" ] || fail "report overwrote the symlink's target"
(umask 022 && cd "$W/cwd" && "$GMEM" report "$PID" --force 2>/dev/null) || fail "report --force"
[ -L "$W/cwd/gmem-report.html" ] && fail "--force followed or kept the symlink"
[ "$(cat "$W/precious")" = "keep me" ] || fail "report --force overwrote the symlink's target"
[ "$(stat -c %a "$W/cwd/gmem-report.html")" = 600 ] || fail "report mode $(stat -c %a "$W/cwd/gmem-report.html"), expected 600"
"$GMEM" export "$PID" --format chrome -o "$W/trace.json" 2>/dev/null
[ $? = 6 ] || fail "export over an existing file without --force"
(umask 022 && "$GMEM" export "$PID" --format chrome -o "$W/trace.json" --force) || fail "export --force"
[ "$(stat -c %a "$W/trace.json")" = 600 ] || fail "export mode, expected 600"
[ -z "$(find "$W/cwd" -name '.*' -type f)" ] || fail "a temporary file was left behind"

echo "== options: each bad value warned once, values that cannot work refused, every %p expanded"
LD_PRELOAD=$B/lib/libgmem.so GMEM_TRACE_LIVE=abc GMEM_LIMIT=1 GMEM_WARMUP=1T \
  GMEM_TRACE_SAVE="$W/t-%p-%p.gmem" "$LEAK" >/dev/null 2>"$W/opts.err"
[ $? = 0 ] || fail "leak_sites with bad options: $(cat "$W/opts.err")"
[ "$(grep -c "GMEM_TRACE_LIVE='abc' is not a whole number" "$W/opts.err")" = 1 ] ||
  fail "GMEM_TRACE_LIVE warned $(grep -c GMEM_TRACE_LIVE "$W/opts.err") times, expected once"
grep -q "GMEM_LIMIT='1' is below 1 MiB" "$W/opts.err" || fail "GMEM_LIMIT=1 accepted silently"
grep -q "GMEM_WARMUP=1.00 TiB is more than device 0" "$W/opts.err" || fail "GMEM_WARMUP=1T accepted silently"
OPID=$(ls "$W" | sed -n 's/^t-\([0-9]*\)-\1\.gmem$/\1/p')
[ -n "$OPID" ] || fail "GMEM_TRACE_SAVE: not every %p expanded: $(ls "$W")"
[ -n "$OPID" ] && "$GMEM" clean "$OPID" >/dev/null 2>&1

skipped=""
if [ "$(id -u)" != 0 ]; then
  skipped="the second-user checks need root (setpriv to nobody)"
  echo "skip: $skipped"
else
  echo "== another user's objects: 'not readable' in their ps, left alone by root's clean"
  NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  NB=$(mktemp -d /tmp/gmem_nobody_XXXXXX)
  source "$(dirname "$0")/../second_uid.sh"
  NGMEM=$(reachable_build "$B" "$NB")/bin/gmem || { fail "no copy of gmem that nobody can run"; exit 1; }
  "${NOBODY[@]}" "$NGMEM" ps >"$W/ps_nobody.txt" 2>&1 || fail "ps as nobody"
  grep -q "not readable.*gmem\.$PID\..*Permission denied" "$W/ps_nobody.txt" ||
    fail "ps as nobody: root's trace not shown as not readable: $(grep "$PID" "$W/ps_nobody.txt")"
  grep "gmem\.$PID\." "$W/ps_nobody.txt" | grep -q crashed && fail "ps as nobody says crashed"
  # nobody leaves an object of a dead process (pid 4000000001 never exists).
  "${NOBODY[@]}" bash -c 'head -c 4096 /dev/zero >/dev/shm/gmem.4000000001.1' || fail "plant"
  grep -q nobody <("$GMEM" ps) || fail "ps: owner not shown"
  "$GMEM" clean 4000000001 >"$W/clean.txt" 2>&1
  [ -e /dev/shm/gmem.4000000001.1 ] || fail "root's plain clean removed another user's object"
  grep -q "other users left alone" "$W/clean.txt" || fail "clean: no word about other users: $(cat "$W/clean.txt")"
  "${NOBODY[@]}" "$NGMEM" clean --user root 4000000001 >/dev/null 2>&1
  [ $? = 5 ] || fail "clean --user root as nobody: expected permission error (5)"
  "$GMEM" clean --user nobody 4000000001 >"$W/clean2.txt" 2>&1 || fail "clean --user nobody"
  [ -e /dev/shm/gmem.4000000001.1 ] && fail "clean --user nobody kept the object"
fi

[ $failures = 0 ] || exit 1
# A check that could not run makes the whole test a skip (77), not a pass.
[ -z "$skipped" ] || { echo "skipped: $skipped"; exit 77; }
echo "security e2e: all checks passed"
