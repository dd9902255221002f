#!/usr/bin/env bash
# Runs tests/api/test_gmem_python.py (unittest) with no driver, over the fake driver, and
# with libgmem.so preloaded over it (found in the process, and through libgmem_client.so).
# Exit 0 pass, 1 fail (make test provides python3 and builds every part: a missing one fails).
set -u
command -v python3 >/dev/null || { echo "python_test: python3 not found (scripts/install-deps.sh installs it)"; exit 1; }
build=$(realpath "${GMEM_BUILD:-build}")
fake_dir=$build/tests/fake_cuda
shim=${GMEM_SHIM:-$build/lib/libgmem.so}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" GMEM_BUILD="$build" PYTHONDONTWRITEBYTECODE=1
for f in "$build/lib/libgmem_client.so" "$fake_dir/libcuda.so.1" "$shim"; do
  [ -e "$f" ] || { echo "python_test: $f not built (make test builds it)"; exit 1; }
done
rc=0
run() { # mode, then env assignments
  local mode=$1; shift
  echo "== python tests, mode $mode"
  env -u LD_PRELOAD "$@" GMEM_TEST_MODE="$mode" python3 -m unittest -v tests/api/test_gmem_python.py 2>&1 || rc=1
}
run nolib LD_LIBRARY_PATH=/nonexistent
run fake LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M
run shim LD_PRELOAD="$(realpath "$shim")" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M GMEM_TRACE=0
# ctypes opens libgmem_client.so itself: its functions must forward to the preloaded shim.
run shim_client LD_PRELOAD="$(realpath "$shim")" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M \
    GMEM_TRACE=0 GMEM_CLIENT_LIB="$build/lib/libgmem_client.so"
exit $rc
