# Sourced by the Python GPU tests: PY (python3 with the framework), skip when it is missing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=${PYTHON:-python3}
need_module() {
  "$PY" -c "import $1" 2>/dev/null || { echo "skipped: python module $1 is not installed"; exit 77; }
}
# traced_runs: the setup of the tests that run programs under `gmem run`: GMEM, a work folder W
# removed at exit with the traces of the processes listed in PIDS, and `failures` for fail.
traced_runs() {
  GMEM=$build/bin/gmem
  [ -x "$GMEM" ] || { echo "no $GMEM: run make first"; exit 1; }
  W=$(mktemp -d)
  PIDS=()
  failures=0
  trap traced_runs_cleanup EXIT
}
traced_runs_cleanup() {
  local p
  for p in "${PIDS[@]}"; do [ -n "$p" ] && "$GMEM" clean --force "$p" >/dev/null 2>&1; done
  rm -rf "$W"
}
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# pid_of FILE: the pid in the summary `gmem run` wrote to FILE.
pid_of() { sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$1" | head -1; }
