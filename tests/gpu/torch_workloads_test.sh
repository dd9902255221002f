#!/usr/bin/env bash
# PyTorch's benchmark workloads (bench/workloads/torch_train.py: a GPT training loop with
# varying lengths, a fast-step convnet, a KV-cache decoding loop) under `gmem run` with nothing
# set: each frees what it allocates, so the exit summary has no LEAKS line and `gmem leaks`
# exits 0 (cuBLAS's and cuDNN's workspaces suppressed, PyTorch's cache reported as reserved);
# one line says PyTorch's caching allocator is observed.
source "$(dirname "$0")/python_lib.sh"
need_module torch
traced_runs
"$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || { echo "skipped: no GPU for PyTorch"; exit 77; }
export GMEM_TRACE=1 PYTHONUNBUFFERED=1
unset GMEM_FRAMEWORKS PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF
for w in "gpt --steps 12" "smallconv --steps 60" "decode --steps 300"; do
  name=${w%% *}
  # shellcheck disable=SC2086 # w carries the workload's arguments
  timeout 300 "$GMEM" run -- "$PY" "$root/bench/workloads/torch_train.py" --model $w \
    >"$W/$name.out" 2>"$W/$name.err" || { fail "$name failed: $(tail -5 "$W/$name.err")"; continue; }
  grep "^gmem: " "$W/$name.err"
  pid=$(pid_of "$W/$name.err")
  [ -n "$pid" ] || { fail "$name: no pid in the summary"; continue; }
  PIDS+=("$pid")
  grep -q "LEAKS" "$W/$name.err" && fail "$name: the exit summary reports leaks"
  "$GMEM" leaks "$pid" >"$W/$name.leaks" || fail "$name: gmem leaks exits $?: $(head -20 "$W/$name.leaks")"
  grep -Eq "^gmem: PyTorch [0-9.]+: caching allocator kept" "$W/$name.err" ||
    { fail "$name: no line saying PyTorch's caching allocator is observed"; continue; }
  echo "ok: $name: no leaks, observed"
done
[ $failures = 0 ]
