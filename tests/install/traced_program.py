"""Run by tests/install/install_test.sh under the wheel's `gmem run`, on the fake driver:
allocates eight 1 MiB buffers through the CUDA driver API (ctypes, libcuda.so.1), frees six,
keeps two (the leaks the test expects), labels the trace, and checks that the wheel's gmem
package answers from the preloaded shim and that nothing is loaded from a gmem build tree."""

import ctypes
import sys

import gmem


def check(rc, what):
    if rc != 0:
        sys.exit(f"traced_program: {what} failed: CUresult {rc}")


cuda = ctypes.CDLL("libcuda.so.1")
check(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ptrs = []
for _ in range(8):
    p = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)), "cuMemAlloc_v2")
    ptrs.append(p.value)
for p in ptrs[2:]:
    check(cuda.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")
gmem.mark("traced_program: done")
print(f"traced_program: gmem.available()={gmem.available()}")
print(f"traced_program: package at {gmem.__file__}")
bad = sys.argv[1] if len(sys.argv) > 1 else None
with open("/proc/self/maps", encoding="utf-8") as maps:
    mapped = sorted({line.split()[-1] for line in maps if "/" in line.split()[-1]})
shim = [m for m in mapped if m.endswith("/libgmem.so")]
print(f"traced_program: libgmem.so mapped from {shim}")
if bad and any(m.startswith(bad) for m in mapped):
    sys.exit(f"traced_program: files mapped from {bad}: "
             f"{[m for m in mapped if m.startswith(bad)]}")
