"""Reads gmem's pool counters from inside a benchmarked process (ctypes, gmem_stats()).

PyTorch's own counters do not see memory that gmem reserves under
PYTORCH_NO_CUDA_MEMORY_CACHING=1, so the workloads ask the shim directly. Returns None when
libgmem.so is not preloaded or does not export gmem_stats.
"""
import ctypes
import json
import os
import re

def _fields():
    """The counter names, in order, from include/gmem/gmem.h's GMEM_STATS_FIELDS."""
    header = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "include",
                          "gmem", "gmem.h")
    try:
        text = open(header).read()
        body = text[text.index("#define GMEM_STATS_FIELDS"):]
        body = body[:body.index("\n\n")]
        names = re.findall(r"X\((\w+)\)", body)
        if names:
            return names
    except (OSError, ValueError):
        pass
    return ("live_bytes live_requested_bytes live_blocks reserved_bytes peak_live_bytes "
            "peak_reserved_bytes total_allocs total_frees total_alloc_bytes cache_hits "
            "upstream_allocs segments segment_maps segment_unmaps pending_bytes pending_blocks "
            "fences ooms free_bytes largest_free_block trims trimmed_bytes limit_bytes").split()


FIELDS = _fields()


class GmemStats(ctypes.Structure):
    _fields_ = ([("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32),
                 ("device", ctypes.c_int32), ("flags", ctypes.c_uint32),
                 ("device_total_bytes", ctypes.c_uint64), ("device_free_bytes", ctypes.c_uint64),
                 ("allocatable_bytes", ctypes.c_uint64)] +
                [(f, ctypes.c_uint64) for f in FIELDS])


def _lib():
    if "libgmem" not in os.environ.get("LD_PRELOAD", ""):
        return None
    for name in (os.environ.get("BENCH_GMEM_LIB"), None):
        try:
            lib = ctypes.CDLL(name)
            fn = lib.gmem_stats
            fn.argtypes = [ctypes.c_int, ctypes.POINTER(GmemStats)]
            fn.restype = ctypes.c_int
            return lib
        except (OSError, AttributeError):
            continue
    return None


def gmem_stats(device=0):
    """The pool's counters as a dict, or None without the shim."""
    lib = _lib()
    if lib is None:
        return None
    s = GmemStats()
    s.struct_size = ctypes.sizeof(GmemStats)
    if lib.gmem_stats(device, ctypes.byref(s)) != 0:
        return None
    if not (s.flags & 1):  # GMEM_STATS_FROM_POOL
        return None
    return {f: int(getattr(s, f)) for f, _ in GmemStats._fields_ if f != "struct_size"}


def emit(rec, json_path):
    """Adds the pool's counters (when the shim is preloaded) to a workload record, prints the
    record without its losses, and appends it whole to json_path (one JSON object per line)."""
    gs = gmem_stats()
    if gs is not None:
        rec["gmem"] = gs
    print(json.dumps({k: v for k, v in rec.items() if k != "losses"}))
    if json_path:
        with open(json_path, "a") as f:
            f.write(json.dumps(rec) + "\n")
