"""Observes a framework's allocations the way gmem's bootstrap does for CuPy (gmem_observe_alloc
and gmem_observe_free through ctypes) on the fake driver, for the observation-cost test
(tests/python/observe_cost_test.sh): 1000 allocations and 600 frees, each of a Python line."""

import ctypes

cuda = ctypes.CDLL("libcuda.so.1")
gmem = ctypes.CDLL(None)  # libgmem.so is preloaded
assert cuda.cuInit(0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
assert gmem.gmem_observe_enable(1) == 1  # CuPy's memory pool, observed
alloc, free = gmem.gmem_observe_alloc, gmem.gmem_observe_free
alloc.argtypes = [ctypes.c_size_t] * 3 + [ctypes.c_int, ctypes.c_size_t]
free.argtypes = [ctypes.c_size_t, ctypes.c_int]
for i in range(1000):
    alloc(0x7f0000000000 + i * 4096, 4096, 4096, 0, 0)
for i in range(600):
    free(0x7f0000000000 + i * 4096, 0)
