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
# skip_part WHY: a part of the test cannot run here (a framework or tool that is optional on a
# GPU machine is missing). end_test NAME: exit 1 after a failure (counted in `failures`), 77
# when a part was skipped (the last line names them), else 0.
SKIPPED_PARTS=()
skip_part() { echo "skipped part: $*"; SKIPPED_PARTS+=("$*"); }
end_test() {
  if [ "${failures:-0}" != 0 ]; then echo "$1: $failures failures"; exit 1; fi
  if [ ${#SKIPPED_PARTS[@]} != 0 ]; then
    echo "$1: all that ran passed; skipped: $(IFS=';'; echo "${SKIPPED_PARTS[*]}")"
    exit 77
  fi
  echo "$1: PASS"
  exit 0
}
