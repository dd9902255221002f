"""GPU program for tests/gpu/python_frames_gpu_test.sh: keeps five 4 MiB device arrays alive from
one known line (marked KEEP) of a Python function, after a matrix product (which makes the
library create its cuBLAS handle and workspace: library-lifetime allocations that gmem
suppresses by default). Usage: python_frames_check.py torch|cupy [--wait]
PyTorch runs with PYTORCH_NO_CUDA_MEMORY_CACHING=1, CuPy with its memory pool off, so every
array is one cudaMalloc that gmem sees."""

import sys

framework = sys.argv[1]
if framework == "torch":
    import torch

    def empty(nbytes):
        return torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")

    def matmul():
        a = torch.ones(256, 256, device="cuda")
        return float((a @ a).sum())

    def sync():
        torch.cuda.synchronize()
elif framework == "cupy":
    import cupy

    cupy.cuda.set_allocator(None)  # no pool: one cudaMalloc per array
    cupy.cuda.set_pinned_memory_allocator(None)

    def empty(nbytes):
        return cupy.empty(nbytes // 4, dtype=cupy.float32)

    def matmul():
        a = cupy.ones((256, 256), dtype=cupy.float32)
        return float((a @ a).sum())

    def sync():
        cupy.cuda.runtime.deviceSynchronize()
else:
    sys.exit("usage: python_frames_check.py torch|cupy [--wait]")


def keep_tensors(kept):
    for _ in range(5):
        kept.append(empty(4 << 20))  # KEEP


def main():
    print(f"matmul: {matmul()}", flush=True)
    kept = []
    keep_tensors(kept)
    sync()
    if "--wait" in sys.argv:
        print("ready", flush=True)
        sys.stdin.readline()
    print(f"kept {len(kept)} arrays", flush=True)


main()
