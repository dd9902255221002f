#!/usr/bin/env bash
# The leak benchmark's framework programs (bench/leaks/programs/) and its native ones on the GPU:
# every LEAK line named as a leak, nothing else, and the 1 MiB-per-request service flagged within
# 60 s of attaching. PyTorch programs run observed (the default) and with --frameworks pool
# (torch.compile's CUDA graphs need PyTorch's cache: observed only). A framework that is not
# installed leaves its programs out.
source "$(dirname "$0")/python_lib.sh"
export GMEM_TRACE=1 # lib.sh turns the trace off for the GPU tests; the verdicts read it
GMEM=$build/bin/gmem
[ -x "$GMEM" ] || { echo "no $GMEM: run make first"; exit 1; }
mkdir -p "$bin"
P=$root/bench/leaks/programs  # root: lib.sh
specs=()
for n in step_outputs growing_cache early_return weights_and_steps bounded_cache per_step_buffers; do
  specs+=("native:$build/bench/leaks/native_programs:$n")
done
specs+=("$P/ctypes_service_leak.py" "$P/ctypes_train_clean.py")
if "$PY" -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  for p in torch_step_outputs torch_forward_hook torch_dict_cache torch_val_no_grad \
    torch_train_clean; do
    specs+=("$P/$p.py" "pool=$P/$p.py")
  done
  specs+=("$P/torch_compile_clean.py" "$P/torch_service_leak.py")
  "$PY" -c "import transformers" 2>/dev/null && specs+=("$P/hf_gpt2_clean.py")
else
  echo "note: no PyTorch with CUDA: its programs are left out"
fi
"$PY" -c "import jax" 2>/dev/null && specs+=("$P/jax_leak.py" "$P/jax_clean.py")
"$PY" -c "import cupy" 2>/dev/null && specs+=("$P/cupy_leak.py" "$P/cupy_clean.py")
"$PY" "$root/bench/leaks/run_leaks.py" --gmem "$GMEM" --attach-timeout 60 \
  --json "$bin/leak_bench.json" "${specs[@]}"
