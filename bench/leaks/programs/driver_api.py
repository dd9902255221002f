# The CUDA driver API through ctypes, for the benchmark's Python programs that need no framework
# (they run on a GPU and on the fake driver alike).
import ctypes
import sys

cuda = ctypes.CDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: CUresult {rc}")


def setup():
    check(cuda.cuInit(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


def alloc(nbytes):
    p = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes)), "cuMemAlloc_v2")
    return p.value


def free(p):
    check(cuda.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")
