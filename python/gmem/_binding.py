"""ctypes binding of include/gmem/gmem.h.

The library is found in this order:
  1. $GMEM_CLIENT_LIB (a path to libgmem_client.so or libgmem.so);
  2. the process itself, when libgmem.so is preloaded (its gmem_* symbols are global);
  3. libgmem_client.so shipped with this package: inside it (the wheel: gmem/_native/lib/)
     or in the tree it was installed into (`make install`, the tarball:
     PREFIX/share/gmem/python/gmem -> PREFIX/lib/);
  4. libgmem_client.so in a gmem checkout (build/lib/), then the dynamic linker's search path.
A file named by path is loaded only when it and every directory above it are owned by root or
the user and writable by nobody else (gmem/_trust.py).
Nothing is loaded until the first call. Without any library every call raises GmemError,
except available() (False) and the chunking helpers given explicit available_bytes.
"""

import ctypes
import os
import threading

from . import _trust

# Same names and order as GMEM_STATS_FIELDS in include/gmem/gmem.h (checked by the tests).
STATS_FIELDS = (
    "live_bytes", "live_requested_bytes", "live_blocks", "reserved_bytes", "peak_live_bytes",
    "peak_reserved_bytes", "total_allocs", "total_frees", "total_alloc_bytes", "cache_hits",
    "upstream_allocs", "segments", "segment_maps", "segment_unmaps", "pending_bytes",
    "pending_blocks", "fences", "ooms", "free_bytes", "largest_free_block", "trims",
    "trimmed_bytes", "limit_bytes", "stream_free_bytes", "invalid_frees", "barriers",
    "stitches", "stitched_ranges", "stitched_bytes", "kept_ranges", "kept_range_bytes",
    "kept_reuses", "stitch_ns", "stitch_budget_grows",
)
STATS_VERSION = 4
FROM_POOL = 1
FROM_DRIVER = 2

# gmem_status values.
OK = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_NO_DRIVER = 2
ERROR_NO_SHIM = 3
ERROR_DRIVER = 4
ERROR_TRUNCATED = 5
ERROR_INTERNAL = 6


class _StatsStruct(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("version", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("device_total_bytes", ctypes.c_uint64),
        ("device_free_bytes", ctypes.c_uint64),
        ("allocatable_bytes", ctypes.c_uint64),
    ] + [(name, ctypes.c_uint64) for name in STATS_FIELDS]


class GmemError(RuntimeError):
    """A gmem_* call failed. .status is the gmem_status value, .name its name."""

    def __init__(self, call, status, name):
        super().__init__(f"gmem: {call} failed with {name}")
        self.call = call
        self.status = status
        self.name = name


_lock = threading.Lock()
_lib = None
_lib_error = None


def _candidates():
    env = os.environ.get("GMEM_CLIENT_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    shipped = [os.path.join(here, "_native", "lib", "libgmem_client.so")]
    if here.endswith(os.path.join("share", "gmem", "python", "gmem")):  # PREFIX/share/gmem/...
        shipped.append(os.path.join(here, "..", "..", "..", "..", "lib", "libgmem_client.so"))
    shipped = [p for p in shipped if os.path.exists(p)]
    repo = os.path.dirname(os.path.dirname(here))
    build = os.environ.get("GMEM_BUILD", os.path.join(repo, "build"))
    return ([None] + [os.path.normpath(p) for p in shipped[:1]] +
            [os.path.join(build, "lib", "libgmem_client.so"), "libgmem_client.so"])


def _declare(lib):
    u64, i32, p = ctypes.c_uint64, ctypes.c_int, ctypes.POINTER
    sigs = {
        "gmem_status_name": (ctypes.c_char_p, [i32]),
        "gmem_available": (i32, []),
        "gmem_stats": (i32, [i32, p(_StatsStruct)]),
        "gmem_reset_peak": (i32, []),
        "gmem_empty_cache": (i32, []),
        "gmem_set_limit": (i32, [u64, i32]),
        "gmem_allocatable_bytes": (i32, [i32, p(u64)]),
        "gmem_can_allocate": (i32, [u64, i32]),
        "gmem_mark": (i32, [ctypes.c_char_p]),
        "gmem_memory_report": (i32, [ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def lib():
    """The loaded library (ctypes.CDLL); raises GmemError when none can be found."""
    global _lib, _lib_error
    with _lock:
        if _lib is None and _lib_error is None:
            tried = []
            for path in _candidates():
                # A file by path runs as the user: only one nobody else can change (the
                # process itself and the linker's search path are the system's choice).
                why = (_trust.untrusted_problem(os.path.realpath(path))
                       if path and os.sep in path and os.path.exists(path) else None)
                if why:
                    tried.append(f"{path}: not used: {why}")
                    continue
                try:
                    candidate = ctypes.CDLL(path)
                    candidate.gmem_available  # noqa: B018 - raises AttributeError if absent
                except (OSError, AttributeError) as e:
                    tried.append(f"{path or 'the process'}: {e}")
                    continue
                _declare(candidate)
                _lib = candidate
                break
            if _lib is None:
                _lib_error = "no gmem library found (" + "; ".join(tried) + ")"
        if _lib is None:
            raise GmemError("loading libgmem_client.so", -1, _lib_error)
        return _lib


def status_name(status):
    return lib().gmem_status_name(status).decode()


def check(call, status):
    if status != OK:
        raise GmemError(call, status, status_name(status))
