# Sourced by the Python GPU tests: PY (python3 with the framework), skip when it is missing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=${PYTHON:-python3}
need_module() {
  "$PY" -c "import $1" 2>/dev/null || { echo "skipped: python module $1 is not installed"; exit 77; }
}
# traced_runs: the setup of the tests that run programs under `gmem run` (tests/traced_runs.sh:
# W, PIDS, fail, pid_of), with GMEM the build's tool.
traced_runs() {
  GMEM=$build/bin/gmem
  [ -x "$GMEM" ] || { echo "no $GMEM: run make first"; exit 1; }
  source "$here/../traced_runs.sh"
}
