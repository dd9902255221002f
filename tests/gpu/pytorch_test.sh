#!/usr/bin/env bash
# PyTorch with its caching allocator off (every tensor a cudaMalloc): a small training loop
# gives bit-identical losses with and without libgmem.so, and the pool served the tensors.
source "$(dirname "$0")/python_lib.sh"
need_module torch
export PYTORCH_NO_CUDA_MEMORY_CACHING=1 CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1
"$PY" "$here/pytorch_train.py" >"$bin/torch_plain.log" 2>&1 || { cat "$bin/torch_plain.log"; echo "FAIL: plain run"; exit 1; }
with_shim "$PY" "$here/pytorch_train.py" >"$bin/torch_shim.log" 2>&1 || { cat "$bin/torch_shim.log"; echo "FAIL: run under the shim"; exit 1; }
grep -v "^loss" "$bin/torch_shim.log" | cut -c1-300
grep "^time" "$bin/torch_plain.log" | sed 's/^/plain: /'
if ! diff <(grep "^loss" "$bin/torch_plain.log") <(grep "^loss" "$bin/torch_shim.log"); then
  echo "FAIL: losses differ"; exit 1
fi
echo "losses identical: $(grep -c '^loss' "$bin/torch_shim.log") steps"
pooled "$bin/torch_shim.log" 1000
