"""The gmem C API (include/gmem/gmem.h) in Python. See docs/api.md."""

import ctypes

from . import _binding
from ._binding import GmemError


class Stats:
    """gmem_stats_t as attributes: device, flags, device_total_bytes, device_free_bytes,
    allocatable_bytes and every pool counter (live_bytes, reserved_bytes, ...)."""

    def __init__(self, struct):
        self._values = {name: getattr(struct, name) for name, _ in struct._fields_}

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def from_pool(self):
        return bool(self.flags & _binding.FROM_POOL)

    @property
    def fragmentation(self):
        """1 - largest_free_block / free_bytes; 0 when nothing is free."""
        if self.free_bytes == 0:
            return 0.0
        return 1.0 - self.largest_free_block / self.free_bytes

    def as_dict(self):
        return dict(self._values)

    def __repr__(self):
        return f"Stats({self._values!r})"


def available():
    """True when libgmem.so is preloaded and its pool answers; False otherwise (also when no
    gmem library can be loaded at all)."""
    try:
        return _binding.lib().gmem_available() == 1
    except GmemError:
        return False


def stats(device=-1):
    s = _binding._StatsStruct()
    s.struct_size = ctypes.sizeof(s)
    _binding.check("gmem_stats", _binding.lib().gmem_stats(device, ctypes.byref(s)))
    return Stats(s)


def reset_peak():
    """Resets the pools' peaks. Returns False without the shim (nothing to reset)."""
    status = _binding.lib().gmem_reset_peak()
    if status == _binding.ERROR_NO_SHIM:
        return False
    _binding.check("gmem_reset_peak", status)
    return True


def empty_cache():
    """Returns cached segments to the driver (after one device synchronization)."""
    _binding.check("gmem_empty_cache", _binding.lib().gmem_empty_cache())


def set_limit(limit_bytes, device=-1):
    """Limits the pool (advisory without the shim); 0 removes the limit."""
    _binding.check("gmem_set_limit", _binding.lib().gmem_set_limit(int(limit_bytes), device))


def allocatable_bytes(device=-1):
    out = ctypes.c_uint64(0)
    _binding.check("gmem_allocatable_bytes",
               _binding.lib().gmem_allocatable_bytes(device, ctypes.byref(out)))
    return out.value


def can_allocate(nbytes, device=-1):
    return _binding.lib().gmem_can_allocate(int(nbytes), device) == 1


def mark(label):
    """Records a labelled marker in the trace. Returns False without the shim."""
    status = _binding.lib().gmem_mark(str(label).encode())
    if status == _binding.ERROR_NO_SHIM:
        return False
    _binding.check("gmem_mark", status)
    return True


def memory_report():
    """The human-readable memory report (str)."""
    size = 8192
    while True:
        buf = ctypes.create_string_buffer(size)
        status = _binding.lib().gmem_memory_report(buf, size)
        if status == _binding.ERROR_TRUNCATED and size < (1 << 24):
            size *= 4
            continue
        if status not in (_binding.OK, _binding.ERROR_NO_DRIVER):
            _binding.check("gmem_memory_report", status)
        return buf.value.decode(errors="replace")
