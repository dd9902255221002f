# Sourced by the tests that run Python programs against the stand-in `torch`
# (tests/tools/fake_torch, its libc10_cuda.so built as tests/tools/fw/): sets B (the build,
# absolute), GMEM and SRC (tests/tools), checks that what they run was built (exit 1 when not),
# exits 77 without python3, and clears the variables that would change what the bootstrap and
# the stand-in do. The caller then sources tests/traced_runs.sh.
B=$(cd "${GMEM_BUILD:-build}" && pwd)
GMEM=$B/bin/gmem
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for f in "$GMEM" "$B/lib/libgmem.so" "$B/lib/gmem/bootstrap/sitecustomize.py" \
  "$B/tests/tools/fw/libc10_cuda.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
command -v python3 >/dev/null || { echo "$(basename "$0"): skipped: no python3"; exit 77; }
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset GMEM_FRAMEWORKS PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF \
  FAKE_TORCH_VERSION FAKE_TORCH_BACKEND PYTHONPATH PYTHONSTARTUP LD_PRELOAD
