# Sourced by the test scripts that run programs under gmem (GMEM, the tool, set before): a work
# folder W, removed at exit with the traces of the processes listed in PIDS; `fail MESSAGE`,
# counted in `failures`; `pid_of FILE`, the pid in the summary `gmem run` wrote to FILE. A
# script with more to stop at exit defines `before_cleanup` first.
W=$(mktemp -d)
PIDS=()
failures=0
traced_runs_cleanup() {
  local p
  if declare -F before_cleanup >/dev/null; then before_cleanup; fi
  for p in "${PIDS[@]}"; do [ -n "$p" ] && "$GMEM" clean --force "$p" >/dev/null 2>&1; done
  rm -rf "$W"
}
trap traced_runs_cleanup EXIT
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pid_of() { sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$1" | head -1; }
