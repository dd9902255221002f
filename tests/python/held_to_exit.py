"""A Python program for tests/python/held_to_exit_test.sh (no GPU: the fake driver through
ctypes, under the shim). Four 1 MiB buffers, each freed by its owner's __del__:
- KEPT: held by a module global until the end: the interpreter's shutdown frees it, so the
  program still held it when its code ended (reported as a leak, "held to exit");
- DROPPED: released by the program (del) before its end: not a leak;
- AT_EXIT: freed by an atexit handler, which is the program's own code: not a leak;
- CYCLE: owned by an object in a reference cycle that the program dropped: garbage the program
  no longer holds, which only a collection frees (none runs before the end here): not a leak.
With --only-kept, KEPT alone: the program frees nothing before the interpreter's shutdown."""

import atexit
import ctypes
import gc
import sys

cuda = ctypes.CDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        sys.exit(f"held_to_exit: {what} failed: CUresult {rc}")


check(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
free = cuda.cuMemFree_v2  # looked up now: module globals are gone when __del__ runs late


class Buffer:
    def __init__(self, nbytes):
        self.ptr = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(self.ptr), ctypes.c_size_t(nbytes)), "cuMemAlloc_v2")

    def __del__(self, free=free):
        free(self.ptr)


kept = Buffer(1 << 20)  # KEPT
if sys.argv[1:] == ["--only-kept"]:  # nothing freed before the interpreter's shutdown
    print("done", flush=True)
    sys.exit(0)
dropped = Buffer(1 << 20)  # DROPPED
at_exit = Buffer(1 << 20)  # AT_EXIT
del dropped


class Node:
    def __init__(self):
        self.buffer = Buffer(1 << 20)  # CYCLE
        self.me = self


gc.disable()  # no collection before the end, whatever the allocation counts
cycle = Node()
del cycle
gc.enable()


def release():
    global at_exit
    at_exit = None


atexit.register(release)
print("done", flush=True)
