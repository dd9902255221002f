#!/usr/bin/env bash
# A traced job's own retention and sizing cannot be steered by another user's files in /dev/shm
# (cases R10 and R11 of docs/security.md). Each scenario runs in a private mount namespace on a
# small tmpfs mounted over /dev/shm; the attacker is nobody (setpriv), the victim root.
#   case R10  three readable 200 MiB files named like traces: the victim's traced job never reads
#           them and root's `gmem ps` reads one page of each (peak RSS far below their size)
#   case R11  a 30 MiB junk object named like a trace with an mtime a year ahead, and 24 MiB of
#           other junk, in a 64 MiB /dev/shm: the victim's next traced job keeps the victim's
#           own earlier traces
# Skipped (77) without root, unshare or setpriv.
set -u
B=$(realpath "${GMEM_BUILD:-build}")
skip() { echo "foreign_shm_test: skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to mount a small tmpfs and to run the attacker as nobody"
command -v unshare >/dev/null && unshare -m true 2>/dev/null || skip "cannot make a mount namespace"
command -v setpriv >/dev/null || skip "setpriv is not installed"
for f in lib/libgmem.so tests/fake_cuda/libcuda.so.1 tests/trace_e2e_program bin/gmem; do
  [ -e "$B/$f" ] || skip "$B/$f not built"
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() { echo "foreign_shm_test: FAIL: $*"; failures=$((failures + 1)); }

echo "== case R10: huge readable objects of another user named like traces"
timeout 120 unshare -m bash -c '
  B=$1 out=$2
  mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm || exit 90
  # Prints "exit status, peak RSS in KiB, seconds" of a command.
  measure() {
    python3 -c "
import resource, subprocess, sys, time
t = time.time()
rc = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, round(time.time() - t, 3))
" "$@"
  }
  for i in 4 5 6; do
    setpriv --reuid=nobody --regid=nogroup --clear-groups \
      dd if=/dev/zero of=/dev/shm/gmem.400000000$i.1 bs=1M count=200 status=none || exit 91
    chmod 644 /dev/shm/gmem.400000000$i.1
  done
  measure "$B/bin/gmem" ps >"$out/ps.txt" 2>>"$out/row10.err"
  # One of them now starts like a trace (magic, total_bytes = its size): a reader would copy
  # it; the job must not even open it.
  printf "GMEMTRC\0\3\0\0\0\0\40\0\0\0\0\200\14\0\0\0\0" |
    setpriv --reuid=nobody --regid=nogroup --clear-groups \
      dd of=/dev/shm/gmem.4000000006.1 conv=notrunc status=none || exit 91
  measure env LD_PRELOAD=$B/lib/libgmem.so LD_LIBRARY_PATH=$B/tests/fake_cuda \
    GMEM_TRACE_KEEP=all "$B/tests/trace_e2e_program" exit 100 >"$out/row10.txt" 2>"$out/row10.err"
' _ "$B" "$out"
ns=$?
[ $ns = 90 ] && skip "cannot mount a tmpfs in the namespace"
[ $ns = 91 ] && skip "nobody cannot write the tmpfs"
[ $ns = 0 ] || fail "case R10's namespace script failed ($ns): $(cat "$out/row10.err")"
read -r rc rss secs <"$out/row10.txt" || true
echo "traced job: exit ${rc:-?}, peak RSS ${rss:-?} KiB, ${secs:-?} s"
[ "${rc:-1}" = 0 ] || fail "the traced job failed: $(cat "$out/row10.err")"
[ "${rss:-999999999}" -lt 153600 ] ||
  fail "the traced job's peak RSS is ${rss} KiB: it read another user's 200 MiB objects"
read -r rc rss secs <"$out/ps.txt" || true
echo "root's gmem ps: exit ${rc:-?}, peak RSS ${rss:-?} KiB, ${secs:-?} s"
[ "${rss:-999999999}" -lt 153600 ] ||
  fail "gmem ps's peak RSS is ${rss} KiB: it copied another user's 200 MiB files whole"

echo "== case R11: junk of another user in a 64 MiB /dev/shm"
timeout 120 unshare -m bash -c '
  B=$1 out=$2
  mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm || exit 90
  job() {
    LD_PRELOAD=$B/lib/libgmem.so LD_LIBRARY_PATH=$B/tests/fake_cuda GMEM_TRACE_KEEP=all \
      "$B/tests/trace_e2e_program" exit 100 >/dev/null 2>>"$out/row11.err"
  }
  job && job || exit 92
  ls /dev/shm | grep "^gmem\." | sort >"$out/before.txt"
  nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  "${nobody[@]}" dd if=/dev/zero of=/dev/shm/gmem.4000000003.1 bs=1M count=30 status=none &&
    "${nobody[@]}" touch -d "+1 year" /dev/shm/gmem.4000000003.1 &&
    "${nobody[@]}" dd if=/dev/zero of=/dev/shm/junk bs=1M count=24 status=none || exit 91
  df -k /dev/shm >"$out/df.txt"
  job || exit 93
  ls /dev/shm | grep "^gmem\." | sort >"$out/after.txt"
' _ "$B" "$out"
ns=$?
[ $ns = 90 ] && skip "cannot mount a tmpfs in the namespace"
[ $ns = 91 ] && skip "nobody cannot write the tmpfs"
[ $ns = 0 ] || fail "case R11's namespace script failed ($ns): $(cat "$out/row11.err")"
mine=$(grep -vc '^gmem\.4000000003\.1$' "$out/before.txt")
[ "$mine" = 2 ] || fail "expected 2 traces of the victim before, saw: $(cat "$out/before.txt")"
while read -r n; do
  grep -qx "$n" "$out/after.txt" || fail "the victim's trace $n was removed because of another user's junk"
done <"$out/before.txt"
echo "victim's traces before: $(tr '\n' ' ' <"$out/before.txt"); after: $(tr '\n' ' ' <"$out/after.txt")"

[ $failures -eq 0 ] && echo "foreign_shm_test: all passed"
[ $failures -eq 0 ]
