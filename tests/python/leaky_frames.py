"""A Python program with GPU leaks at known lines, for gmem's Python-frame tests (no GPU: it
reaches the fake driver through ctypes, under the shim). Line numbers are part of the golden
files: edit with care (tests/python/python_frames_test.sh).

Leaks: 3 x 1 MiB from load_weights (line marked LEAK-A), 2 x 2 MiB from Cache.grow (LEAK-B,
one line reached from two callers: two call sites, a site being its whole Python stack),
1 x 512 KiB from a Python thread whose ctypes call
releases the GIL (LEAK-C: PyTorch and CuPy allocate so; its frames are read all the same), and
1 x 256 KiB from a thread the fake driver starts, which runs no Python code (its native stack
only, and a note saying why).
Everything else is freed. With "--stress", threads keep allocating and freeing while the
interpreter shuts down (the shutdown-safety test)."""

import ctypes
import sys
import threading

cuda = ctypes.CDLL("libcuda.so.1")
# PyDLL keeps the GIL held during the call: the allocation sees its Python caller.
cuda_gil = ctypes.PyDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        sys.exit(f"leaky_frames: {what} failed: CUresult {rc}")


def setup():
    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


def alloc(nbytes, lib=cuda_gil):
    p = ctypes.c_uint64()
    check(lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes)), "cuMemAlloc_v2")
    return p.value


def free(p):
    check(cuda_gil.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")


def load_weights(kept):
    for _ in range(3):
        kept.append(alloc(1 << 20))  # LEAK-A
    scratch = alloc(1 << 20)
    free(scratch)


class Cache:
    def __init__(self):
        self.blocks = []

    def grow(self):
        self.blocks.append(alloc(2 << 20))  # LEAK-B


def warm(cache):
    cache.grow()


def refill(cache):
    cache.grow()


def released_gil_worker(ctx, kept):
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    kept.append(alloc(512 << 10, lib=cuda))  # LEAK-C: the call releases the GIL


def native_thread_alloc(ctx, kept):
    p = ctypes.c_uint64()
    check(cuda.fake_cuda_alloc_on_native_thread(ctx, ctypes.c_size_t(256 << 10), ctypes.byref(p)),
          "fake_cuda_alloc_on_native_thread")
    kept.append(p.value)


def stress(ctx):
    def churn():
        cuda.cuCtxSetCurrent(ctx)
        while True:
            p = ctypes.c_uint64()
            lib = cuda_gil if threading.get_ident() % 2 else cuda
            if lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4096)) == 0:
                lib.cuMemFree_v2(ctypes.c_uint64(p.value))

    for _ in range(4):
        threading.Thread(target=churn, daemon=True).start()
    # The main thread returns while the daemon threads allocate: the interpreter finalizes
    # under them.


def main():
    ctx = setup()
    if "--stress" in sys.argv:
        stress(ctx)
        print("leaky_frames: stress started", flush=True)
        return
    kept = []
    load_weights(kept)
    cache = Cache()
    warm(cache)
    refill(cache)
    t = threading.Thread(target=released_gil_worker, args=(ctx, kept))
    t.start()
    t.join()
    native_thread_alloc(ctx, kept)
    if "--wait" in sys.argv:
        print("leaky_frames: ready", flush=True)
        sys.stdin.readline()
    print("leaky_frames: done", flush=True)


main()
