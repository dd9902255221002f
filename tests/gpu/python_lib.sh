# Sourced by the Python GPU tests: PY (python3 with the framework), skip when it is missing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=${PYTHON:-python3}
need_module() {
  "$PY" -c "import $1" 2>/dev/null || { echo "skipped: python module $1 is not installed"; exit 77; }
}
