"""Tests run by tests/python/pytest_plugin_test.sh under `pytest --gmem` on the fake driver
(ctypes, GIL held): one passes within its limit, one exceeds its limit, one leaks. The plugin
must fail the last two naming the lines marked OVER and LEAK. A fourth grows a stand-in of
PyTorch's caching allocator (libc10_cuda.so of tests/tools/fake_framework_libs.cpp): its cached
segment is not the test's leak, so it passes with a note."""

import ctypes
import os

import pytest

cuda = ctypes.PyDLL("libcuda.so.1")
kept = []


def setup_module():
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int()
    assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
    ctx = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0


def alloc(nbytes):
    p = ctypes.c_uint64()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes)) == 0
    return p.value


def free(p):
    assert cuda.cuMemFree_v2(ctypes.c_uint64(p)) == 0


@pytest.mark.gmem_limit("2 MiB")
@pytest.mark.gmem_no_leaks
def test_within_limit():
    free(alloc(1 << 20))


def grow_activations():
    return [alloc(4 << 20) for _ in range(2)]  # OVER


@pytest.mark.gmem_limit("4 MiB")
def test_over_limit():
    for p in grow_activations():
        free(p)


def remember(step):
    kept.append(alloc(1 << 20))  # LEAK
    return step


@pytest.mark.gmem_no_leaks(warmups=1)
def test_leaks_every_call():
    remember(1)


@pytest.mark.gmem_no_leaks
def test_grows_the_framework_cache():
    c10 = ctypes.PyDLL(os.environ["GMEM_TEST_C10"])
    c10.fake_c10_cuda_segment.restype = ctypes.c_uint64
    assert c10.fake_c10_cuda_segment(ctypes.c_size_t(2 << 20)) != 0
