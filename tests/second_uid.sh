# Sourced by the tests that run the build's programs as a second uid (nobody, through setpriv).
# The checkout may lie under a directory that uid cannot enter (root's 0700 home, a mktemp -d),
# so that uid runs copies.
#
# reachable_build FROM DIR [FILE...]: copies build FROM's bin/, the shared libraries and the
# Python bootstrap of lib/, the fake driver and FILEs (paths under FROM) into DIR/build, readable
# by all, and prints DIR/build. DIR is made 0755 and must be under /tmp (or another directory
# every user can enter). Returns 1, saying why, when nobody still cannot run the copy's gmem.
reachable_build() {
  local from=$1 dir=$2 to=$2/build f
  shift 2
  chmod 755 "$dir" || return 1
  mkdir -p "$to/bin" "$to/lib" "$to/tests/fake_cuda" || return 1
  cp -a "$from"/bin/. "$to/bin/" &&
    cp -a "$from"/lib/*.so* "$from/lib/gmem" "$to/lib/" &&
    cp -a "$from"/tests/fake_cuda/*.so* "$to/tests/fake_cuda/" || return 1
  for f in "$@"; do
    mkdir -p "$to/$(dirname "$f")" && cp -a "$from/$f" "$to/$f" || return 1
  done
  chmod -R a+rX "$to"
  setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$to/bin/gmem" ||
    { echo "reachable_build: nobody cannot run $to/bin/gmem (is $dir under a private directory?)" >&2; return 1; }
  echo "$to"
}

# For the tests that act as nobody with the build's programs:
# nobody_python: NOBODY (the setpriv prefix) and PY3, a python3 nobody can run; calls the
# caller's `skip WHY` when there is none (root's python may live under /root).
nobody_python() {
  NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  PY3=$(command -v /usr/bin/python3 || command -v python3)
  "${NOBODY[@]}" "$PY3" -c pass 2>/dev/null || skip "nobody cannot run $PY3"
}
# nobody_build DIR: a copy of build B that nobody can run (reachable_build, with the leak_sites
# and steady_service programs) under DIR; sets B, GMEM, LEAK, SVC to it and puts its fake
# driver first in LD_LIBRARY_PATH. Returns 1 when it cannot be made.
nobody_build() {
  B=$(reachable_build "$B" "$1" tests/tools/leak_sites tests/exporter/steady_service) || return 1
  GMEM=$B/bin/gmem
  LEAK=$B/tests/tools/leak_sites
  SVC=$B/tests/exporter/steady_service
  export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
