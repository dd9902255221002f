#!/usr/bin/env bash
# Runs the GPU test scripts given as arguments when a CUDA GPU is present; otherwise says so
# and exits 0, so `make test-gpu` is safe on CI machines without one.
set -u
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
  echo "test-gpu: skipped: no NVIDIA GPU found (nvidia-smi -L lists none)"
  exit 0
fi
nvidia-smi -L
GMEM_TEST_LOG=${GMEM_TEST_LOG:-build/test-logs/gpu} exec "$(dirname "$0")/run-tests.sh" "$@"
