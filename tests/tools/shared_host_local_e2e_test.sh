#!/usr/bin/env bash
# Shared host: what another local user (nobody, through setpriv) can do to root's gmem through
# files, names and /dev/shm, end to end on the fake driver.
#   library   a checkout under a shared directory (/tmp/X/gmem): their /tmp/lib/libgmem.so
#             must not be preloaded by `pytest --gmem`; `gmem run` must not preload a library
#             of theirs beside an install tree or named by GMEM_LIB
#   retention objects of theirs (three large files under four names each, mtimes in 2030): root's
#             `gmem clean --expired -n` (and `--all-users`) must keep root's fresh traces
#   save      an object planted under the pid of a process that has exited: `gmem save PID`
#             refuses it and names its owner
#   flood     300,000 empty files named like traces: a traced job's run time and root's
#             `gmem ps` stay bounded
#   name      a file named like a trace object in a shared working directory: `gmem leaks NAME`
#             reads /dev/shm/NAME, never that file
#   secure    a setgid program that loads gmem ignores the GMEM_* variables of its caller
# Their programs and libraries are copies in a directory they can reach, so a checkout in a
# 0700 directory passes as root too. Exit 0 pass, 77 skip (not root, no compiler), 1 fail.
set -u
R=$PWD # the repository (python/ for the pytest plugin)
B=$(realpath "${GMEM_BUILD:-build}")
for f in "$B/bin/gmem" "$B/tests/tools/leak_sites" "$B/lib/libgmem.so" \
  "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
if [ "$(id -u)" != 0 ]; then
  echo "shared_host_local_e2e_test: skipped: the attacker must be a second uid (needs root)"
  exit 77
fi
PY3=/usr/bin/python3
[ -x "$PY3" ] || PY3=$(command -v python3)
for tool in cc setpriv "$PY3"; do
  command -v "$tool" >/dev/null || { echo "shared_host_local_e2e_test: skipped: no $tool"; exit 77; }
done
NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
W=$(mktemp -d /tmp/gmem_local_XXXXXX)
source "$(dirname "$0")/../second_uid.sh"
# Copies everyone can run: gmem with its libraries (bin/../lib), the fake driver, leak_sites.
I=$(reachable_build "$B" "$W" tests/tools/leak_sites) || { rm -rf "$W"; exit 1; }
GMEM=$I/bin/gmem
LEAK=$I/tests/tools/leak_sites
export LD_LIBRARY_PATH=$I/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
FLOOD=3000000000 # pids of the flood's names: above any pid_max
CLEAN=()
cleanup() {
  for p in "${CLEAN[@]}"; do "$GMEM" clean --force --all-users "$p" >/dev/null 2>&1; done
  rm -f /dev/shm/gmem.9999990.* /dev/shm/gmem.9999991.* /dev/shm/gmem.9999992.*
  "$PY3" - "$FLOOD" <<'PY'
import os, sys
base = int(sys.argv[1])
for name in os.listdir("/dev/shm"):
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "gmem" and parts[2] == "7" and parts[1].isdigit() \
            and base <= int(parts[1]) < base + 1000000:
        os.unlink("/dev/shm/" + name)
PY
  rm -rf "$W"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pid_of() { sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$1" | head -1; }

# The other user's library: its constructor leaves a file in the working directory.
cat >"$W/preload.c" <<'C'
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void pwn(void) {
  int fd = open("pwned-by-preload", O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) close(fd);
}
C
cc -shared -fPIC -o "$W/libpreload.so" "$W/preload.c" ||
  { echo "shared_host_local_e2e_test: skipped: cannot compile the attacker's library"; exit 77; }
chmod 755 "$W/libpreload.so"

echo "== library: only a libgmem.so nobody else can change is preloaded"
T=$W/tmp # stands for /tmp: sticky, anybody's
mkdir -m 1777 "$T"
"${NOBODY[@]}" mkdir "$T/lib" && "${NOBODY[@]}" cp "$W/libpreload.so" "$T/lib/libgmem.so" ||
  fail "could not plant $T/lib/libgmem.so"
mkdir -p "$T/X/gmem" "$W/work" # the victim's checkout (python/ only: no build of its own)
cp -r "$R/python" "$T/X/gmem/"
cat >"$W/work/test_lib.py" <<'PY'
def test_nothing():
    pass
PY
PYTEST=(env -u LD_PRELOAD -u GMEM_SHIM -u GMEM_TOOL PYTHONDONTWRITEBYTECODE=1 GMEM_TRACE_KEEP=none
  PYTHONPATH="$T/X/gmem/python" timeout 60 "$PY3" -m pytest -p gmem.pytest_plugin
  -p no:cacheprovider -q --gmem test_lib.py)
unset GMEM_BUILD
if "$PY3" -m pytest --version >/dev/null 2>&1; then
  (cd "$W/work" && "${PYTEST[@]}" >"$W/lib1.out" 2>&1)
  [ -e "$W/work/pwned-by-preload" ] && fail "pytest --gmem preloaded the other user's $T/lib/libgmem.so"
  grep -q "re-running pytest with LD_PRELOAD=$T/lib" "$W/lib1.out" &&
    fail "pytest --gmem chose $T/lib/libgmem.so: $(cat "$W/lib1.out")"
  grep -q "CANNOT TRACK.*no libgmem.so found" "$W/lib1.out" ||
    fail "pytest --gmem: expected 'no libgmem.so found': $(cat "$W/lib1.out")"
  rm -f "$W/work/pwned-by-preload"
  # The checkout's own build is used; a GMEM_BUILD of the other user's is not.
  mkdir -p "$T/X/gmem/build/lib" && cp "$B/lib/libgmem.so" "$T/X/gmem/build/lib/"
  (cd "$W/work" && "${PYTEST[@]}" >"$W/lib2.out" 2>&1)
  grep -q "re-running pytest with LD_PRELOAD=$T/X/gmem/build/lib/libgmem.so" "$W/lib2.out" ||
    fail "pytest --gmem did not use the checkout's own build: $(cat "$W/lib2.out")"
  "${NOBODY[@]}" mkdir -p "$T/build/lib" && "${NOBODY[@]}" cp "$W/libpreload.so" "$T/build/lib/libgmem.so"
  (cd "$W/work" && env GMEM_BUILD="$T/build" "${PYTEST[@]}" >"$W/lib3.out" 2>&1)
  [ -e "$W/work/pwned-by-preload" ] && fail "pytest --gmem preloaded the other user's GMEM_BUILD"
  grep -q "CANNOT TRACK.*$T/build/lib/libgmem.so not used: $T/build is owned by another user (uid 65534)" "$W/lib3.out" ||
    fail "pytest --gmem: no refusal naming the other user's directory: $(cat "$W/lib3.out")"
  rm -f "$W/work/pwned-by-preload"
else
  echo "(library, pytest: skipped, no pytest)"
fi
# gmem run: an install tree whose lib/ is the other user's; GMEM_LIB naming their library.
J=$W/inst2
mkdir -p "$J/bin" && cp "$GMEM" "$J/bin/" && "${NOBODY[@]}" mkdir -p "$T/inst2lib" &&
  "${NOBODY[@]}" cp "$W/libpreload.so" "$T/inst2lib/libgmem.so" && ln -s "$T/inst2lib" "$J/lib" ||
  fail "could not set up the install tree"
(cd "$W/work" && timeout 30 "$J/bin/gmem" run -- /bin/true >"$W/run1.out" 2>&1)
rc=$?
[ -e "$W/work/pwned-by-preload" ] && fail "gmem run preloaded the other user's lib/libgmem.so"
[ $rc = 0 ] && fail "gmem run ran the program with the other user's library"
grep -q "is owned by another user (uid 65534)" "$W/run1.out" || fail "gmem run: no clear refusal: $(cat "$W/run1.out")"
rm -f "$W/work/pwned-by-preload"
(cd "$W/work" && GMEM_LIB=$T/lib/libgmem.so timeout 30 "$GMEM" run -- /bin/true >"$W/run2.out" 2>&1)
rc=$?
[ -e "$W/work/pwned-by-preload" ] && fail "gmem run preloaded the other user's GMEM_LIB"
[ $rc = 0 ] && fail "gmem run ran the program with GMEM_LIB of the other user's"
grep -q "GMEM_LIB=$T/lib/libgmem.so is not used: $T/lib is owned by another user" "$W/run2.out" ||
  fail "gmem run: no clear refusal of GMEM_LIB: $(cat "$W/run2.out")"
rm -f "$W/work/pwned-by-preload"

echo "== retention: forged objects never expire root's fresh traces"
OWN=()
for _ in 1 2 3; do
  GMEM_TRACE_KEEP=all timeout 60 "$GMEM" run -- "$LEAK" >"$W/own.out" 2>&1
  p=$(pid_of "$W/own.out")
  [ -n "$p" ] && { OWN+=("$p"); CLEAN+=("$p"); }
done
[ ${#OWN[@]} = 3 ] || fail "could not make root's traces: $(cat "$W/own.out")"
# Three objects of theirs of 100 MiB, each linked under three more names, every name "from
# 2030"; root's budget is set to 200 MiB.
"${NOBODY[@]}" "$PY3" - <<'PY' || fail "could not plant the forged objects"
import os
for pid in (9999990, 9999991, 9999992):
    first = f"/dev/shm/gmem.{pid}.5"
    with open(first, "wb") as f:
        f.write(b"\1" * (100 << 20))
    for i in range(6, 9):
        os.link(first, f"/dev/shm/gmem.{pid}.{i}")
for name in os.listdir("/dev/shm"):
    if name.startswith(("gmem.9999990.", "gmem.9999991.", "gmem.9999992.")):
        os.utime("/dev/shm/" + name, (1893456000, 1893456000))  # 2030-01-01
PY
export GMEM_TRACE_KEEP_MAX=200M
timeout 60 "$GMEM" clean --all-users --expired -n >"$W/ret_all.out" 2>&1
timeout 60 "$GMEM" clean --expired -n >"$W/ret.out" 2>&1 # -n: root's other traces on a shared test host stay
unset GMEM_TRACE_KEEP_MAX
for p in "${OWN[@]}"; do
  grep -q "gmem\.$p\." "$W/ret_all.out" && fail "root's --all-users --expired -n would remove pid $p's fresh trace: $(cat "$W/ret_all.out")"
  grep -q "gmem\.$p\." "$W/ret.out" && fail "root's clean --expired -n would remove pid $p's fresh trace: $(cat "$W/ret.out")"
  ls /dev/shm | grep -q "^gmem\.$p\." || fail "root's trace of pid $p is gone"
done
grep -q "would remove gmem.999999" "$W/ret_all.out" ||
  fail "the forged objects are not over their owner's own budget: $(cat "$W/ret_all.out")"
rm -f /dev/shm/gmem.9999990.* /dev/shm/gmem.9999991.* /dev/shm/gmem.9999992.*

echo "== save: an object planted under an exited pid is not saved as its trace"
SPID=$(sh -c 'echo $$') # a process that has exited
"${NOBODY[@]}" sh -c "head -c 8192 /dev/zero >/dev/shm/gmem.$SPID.100" || fail "could not plant gmem.$SPID.100"
timeout 30 "$GMEM" save "$SPID" "$W/saved.gmem" >"$W/save.out" 2>&1
rc=$?
[ $rc = 0 ] && fail "gmem save PID saved the other user's object: $(cat "$W/save.out")"
[ -e "$W/saved.gmem" ] && fail "gmem save PID wrote $W/saved.gmem"
grep -q "gmem.$SPID.100 was left under its pid by uid 65534 (nobody)" "$W/save.out" ||
  fail "gmem save PID does not name the owner: $(cat "$W/save.out")"
grep -q "gmem save gmem.$SPID.100 FILE" "$W/save.out" || fail "gmem save PID does not say how to save it anyway"
rm -f "/dev/shm/gmem.$SPID.100"

echo "== name: an object name is looked up in /dev/shm, not in the working directory"
S=$W/shared
mkdir -m 1777 "$S"
NAME=gmem.9999990.5.0123456789abcdef
"${NOBODY[@]}" sh -c "printf 'GMEMTRC' >'$S/$NAME'" || fail "could not plant $S/$NAME"
(cd "$S" && timeout 30 "$GMEM" leaks "$NAME" >"$W/name.out" 2>&1)
rc=$?
[ $rc = 0 ] && fail "gmem leaks NAME succeeded: $(cat "$W/name.out")"
grep -q "/dev/shm/$NAME" "$W/name.out" || fail "the error does not name /dev/shm/$NAME: $(cat "$W/name.out")"
grep -q "read only as ./$NAME" "$W/name.out" || fail "the error does not say how to read the file: $(cat "$W/name.out")"
(cd "$S" && timeout 30 "$GMEM" leaks "./$NAME" >"$W/name2.out" 2>&1)
grep -q "./$NAME: trace is 7 bytes" "$W/name2.out" || fail "gmem leaks ./NAME does not read the file: $(cat "$W/name2.out")"

echo "== flood: 300,000 empty files named like traces"
job_s() { # seconds of one traced leak_sites run
  local t0 t1
  t0=$(date +%s%N)
  GMEM_TRACE_KEEP=none timeout 120 "$GMEM" run -q -- "$LEAK" >/dev/null 2>&1
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000000))
}
before=$(job_s)
"${NOBODY[@]}" "$PY3" - "$FLOOD" <<'PY' || fail "could not plant the flood"
import os, sys
base = int(sys.argv[1])
for i in range(300000):
    os.close(os.open(f"/dev/shm/gmem.{base + i}.7", os.O_CREAT | os.O_WRONLY, 0o644))
PY
after=$(job_s)
echo "a traced job: ${before} ms, then ${after} ms with the flood"
[ $((after - before)) -le 600 ] || fail "the flood costs a traced job $((after - before)) ms (over 600)"
t0=$(date +%s%N)
timeout 60 "$GMEM" ps >"$W/ps.out" 2>&1
rc=$?
ps_ms=$((($(date +%s%N) - t0) / 1000000))
echo "root's gmem ps: ${ps_ms} ms"
[ $rc = 0 ] || fail "gmem ps: exit $rc"
[ "$ps_ms" -le 3000 ] || fail "root's gmem ps took ${ps_ms} ms with the flood (over 3000)"
grep -q "more objects named like traces were not read" "$W/ps.out" ||
  fail "gmem ps does not say what it left out: $(tail -3 "$W/ps.out")"
[ "$(wc -l <"$W/ps.out")" -le 10000 ] || fail "gmem ps printed $(wc -l <"$W/ps.out") lines"

echo "== secure: a setgid program ignores its caller's GMEM_* variables"
# gmem loaded by a setgid program (the loader ignores LD_PRELOAD there: /etc/ld.so.preload or a
# dependency does it; a dependency with an absolute run path stands in for them), run by the
# other user.
cat >"$W/probe.c" <<'C'
#include <stdio.h>
int main(void) {
  puts("probe: loaded");
  return 0;
}
C
if cc -o "$W/probe" "$W/probe.c" -Wl,--no-as-needed -L"$I/lib" -lgmem -Wl,-rpath,"$I/lib"; then
  chgrp 0 "$W/probe" && chmod 2755 "$W/probe"
  (cd "$W/work" && "${NOBODY[@]}" env GMEM_LIMIT=12X GMEM_TRACE_SAVE=/tmp/x-%p "$W/probe" >"$W/secure.out" 2>&1)
  grep -q "probe: loaded" "$W/secure.out" || fail "the setgid probe did not load libgmem.so: $(cat "$W/secure.out")"
  grep -q "GMEM_LIMIT, GMEM_TRACE_SAVE ignored: this process runs with privileges its caller lacks" "$W/secure.out" ||
    fail "a setgid process does not say it ignores GMEM_*: $(cat "$W/secure.out")"
  grep -q "GMEM_LIMIT='12X'" "$W/secure.out" && fail "a setgid process parsed its caller's GMEM_LIMIT"
  # The same program without the setgid bit reads them.
  chmod 0755 "$W/probe"
  (cd "$W/work" && "${NOBODY[@]}" env GMEM_LIMIT=12X "$W/probe" >"$W/plain.out" 2>&1)
  grep -q "GMEM_LIMIT='12X' is not a size" "$W/plain.out" || fail "a plain process ignored GMEM_LIMIT: $(cat "$W/plain.out")"
else
  fail "cannot compile the probe"
fi

[ $failures = 0 ] && echo "shared host (local attacks) e2e: all checks passed"
exit $((failures != 0))
