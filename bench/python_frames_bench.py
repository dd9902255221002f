"""Cost of recording Python frames per allocation (docs/trace-format.md, "Python frames").

Allocates and frees one 4 KiB block N times through the CUDA driver API with the GIL held
(ctypes.PyDLL; with --released through ctypes.CDLL, which releases the GIL around the call as
PyTorch and CuPy do), from a Python stack DEPTH frames deep, and prints ns per alloc+free pair (best
of ROUNDS). Run it under the shim with GMEM_PYTHON_DEPTH=0 and =16 (and GMEM_STACK_DEPTH=0 for
no stacks at all): the difference is the Python frames' price. `import torch` first with
--torch (on the GPU machine: the interpreter then holds torch's modules, as in real use).

  LD_PRELOAD=build/lib/libgmem.so LD_LIBRARY_PATH=build/tests/fake_cuda \\
      GMEM_PYTHON_DEPTH=16 python3 bench/python_frames_bench.py [--torch] [--released] [N] [DEPTH]
"""

import ctypes
import sys
import time

args = [a for a in sys.argv[1:] if not a.startswith("--")]
N = int(args[0]) if args else 200000
DEPTH = int(args[1]) if len(args) > 1 else 20
ROUNDS = 5
if "--torch" in sys.argv:
    import torch  # noqa: F401  (the interpreter as a PyTorch program has it)

    torch.cuda.init()
cuda = (ctypes.CDLL if "--released" in sys.argv else ctypes.PyDLL)("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0


def loop():
    alloc, free = cuda.cuMemAlloc_v2, cuda.cuMemFree_v2
    p = ctypes.c_uint64()
    ref = ctypes.byref(p)
    size = ctypes.c_size_t(4096)
    best = None
    for _ in range(ROUNDS):
        t0 = time.perf_counter_ns()
        for _ in range(N):
            alloc(ref, size)
            free(p)
        dt = (time.perf_counter_ns() - t0) / N
        best = dt if best is None else min(best, dt)
    return best


def nest(n):
    return nest(n - 1) if n > 0 else loop()


print(f"{nest(DEPTH - 2):.0f} ns per alloc+free pair (best of {ROUNDS} x {N}, "
      f"Python depth {DEPTH}, GIL {'released' if '--released' in sys.argv else 'held'})")
