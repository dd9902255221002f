"""gmem: ask gmem's pool (or the CUDA driver) how much GPU memory is usable, empty its cache,
set a limit, label the trace, and process work in OOM-safe chunks.

    import gmem
    print(gmem.memory_report())
    result = gmem.chunked(len(batch), bytes_per_item, lambda b, e: model(batch[b:e]))

ctypes over libgmem_client.so (or the preloaded libgmem.so); no build step. See docs/api.md.
"""

from ._binding import GmemError, STATS_FIELDS
from .api import (Stats, available, stats, reset_peak, empty_cache, set_limit,
                  allocatable_bytes, can_allocate, mark, memory_report)
from .chunking import (ChunkPlan, ChunkResult, ChunkError, MEASURED, plan_chunks, chunked,
                       chunked_iter, is_out_of_memory)

__all__ = [
    "GmemError", "STATS_FIELDS", "Stats", "available", "stats", "reset_peak", "empty_cache",
    "set_limit", "allocatable_bytes", "can_allocate", "mark", "memory_report", "ChunkPlan",
    "ChunkResult", "ChunkError", "MEASURED", "plan_chunks", "chunked", "chunked_iter",
    "is_out_of_memory",
]
