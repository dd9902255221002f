"""OOM-safe chunking, the Python twin of include/gmem/chunking.hpp (same plans, same retries).

    plan = gmem.plan_chunks(n, bytes_per_item)
    gmem.chunked(n, bytes_per_item, lambda begin, end: work(begin, end))
    gmem.chunked_iter(generator, item_bytes, lambda items, first_index: work(items))

fn is called on consecutive ranges covering everything exactly once; a range that ran out of
memory is retried, so fn must leave no partial effect when it raises.
"""

import itertools
import sys
from dataclasses import dataclass

from . import api
from ._binding import GmemError

CUDA_OUT_OF_MEMORY = 2  # CUDA_ERROR_OUT_OF_MEMORY == cudaErrorMemoryAllocation


@dataclass
class ChunkPlan:
    total_items: int = 0
    chunk_items: int = 0
    chunk_count: int = 0
    last_chunk_items: int = 0
    min_chunk_items: int = 1
    bytes_per_item: int = 0
    bytes_per_chunk: int = 0
    available_bytes: int = 0
    budget_bytes: int = 0
    fits: bool = True
    error: str = ""  # why availability is unknown, when it is


@dataclass
class ChunkResult:
    items_done: int = 0
    chunks_run: int = 0
    ooms: int = 0
    halvings: int = 0
    growths: int = 0
    bytes_per_item: int = 0  # chunked_iter: the last per-item cost estimate


class ChunkError(RuntimeError):
    """Chunked processing gave up. .begin/.end: the failing range; .result: counts so far;
    .reason: 'out_of_memory_at_minimum', 'too_many_halvings' or 'failed' (fn returned False or
    an error code other than 2)."""

    def __init__(self, message, reason, begin, end, result):
        super().__init__(message)
        self.reason, self.begin, self.end, self.result = reason, begin, end, result


def is_out_of_memory(exc):
    """Default OOM test: torch.cuda.OutOfMemoryError, cupy's OutOfMemoryError, MemoryError,
    and any exception whose message says "out of memory" (CUDA runtime errors, JAX) or
    "ALLOC_FAILED" (a CUDA library that could not get its workspace, e.g.
    CUBLAS_STATUS_ALLOC_FAILED)."""
    if isinstance(exc, MemoryError):
        return True
    if "OutOfMemory" in type(exc).__name__:
        return True
    text = str(exc).lower()
    # cuBLAS, cuDNN and cuFFT report a failed workspace allocation as their own status.
    return "out of memory" in text or "alloc_failed" in text


def _default_empty_cache():
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "cuda", None) is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001 - best effort
            pass
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.get_default_memory_pool().free_all_blocks()
        except Exception:  # noqa: BLE001
            pass
    try:
        api.empty_cache()
    except GmemError:
        pass


def plan_chunks(total_items, bytes_per_item, safety_fraction=0.7, min_chunk_items=1,
                max_chunk_items=0, fixed_bytes=0, device=-1, available_bytes=None):
    """Chunks of at most safety_fraction of the allocatable memory (see chunking.hpp)."""
    p = ChunkPlan(total_items=total_items, bytes_per_item=bytes_per_item,
                  min_chunk_items=max(min_chunk_items, 1))
    known = True
    if available_bytes:
        p.available_bytes = int(available_bytes)
    else:
        try:
            p.available_bytes = api.allocatable_bytes(device)
        except GmemError as e:
            known, p.error = False, str(e)
    fraction = min(max(safety_fraction, 0.0), 1.0)
    p.budget_bytes = int(p.available_bytes * fraction)
    chunk = total_items
    if not known:
        p.fits = False
    elif p.budget_bytes < fixed_bytes + p.min_chunk_items * bytes_per_item:
        p.fits = False
        chunk = p.min_chunk_items
    elif bytes_per_item:
        chunk = min((p.budget_bytes - fixed_bytes) // bytes_per_item, total_items)
    if max_chunk_items:
        chunk = min(chunk, max(max_chunk_items, p.min_chunk_items))
    chunk = max(chunk, p.min_chunk_items)
    if total_items == 0:
        return p
    chunk = min(chunk, total_items)
    count = -(-total_items // chunk)
    p.chunk_items = min(max(-(-total_items // count), p.min_chunk_items), total_items)
    p.chunk_count = -(-total_items // p.chunk_items)
    p.last_chunk_items = total_items - (p.chunk_count - 1) * p.chunk_items
    p.bytes_per_chunk = fixed_bytes + p.chunk_items * bytes_per_item
    return p


class _Runner:
    """Adaptive chunk size and retry state (detail::adaptive_runner in chunking.hpp).
    Invariant: min_items <= size <= target."""

    def __init__(self, target, min_items, total, is_oom, empty_cache, on_progress,
                 max_halvings, grow_after, retries_at_minimum, result):
        self.min = max(min_items, 1)
        self.target = max(target, self.min)
        self.size = self.target
        self.total, self.is_oom, self.empty_cache = total, is_oom, empty_cache
        self.on_progress, self.max_halvings = on_progress, max_halvings
        self.grow_after, self.retries_at_minimum = grow_after, retries_at_minimum
        self.r = result
        self.successes = self.halvings_in_row = self.min_retries = 0

    def set_target(self, target):
        self.target = max(target, self.min)
        self.size = min(self.size, self.target)

    def run(self, begin, end, call):
        b = begin
        while b < end:
            e = b + min(self.size, end - b)
            try:
                rc = call(b, e)
            except Exception as exc:  # noqa: BLE001 - classified here
                if not self.is_oom(exc):
                    raise
                rc = CUDA_OUT_OF_MEMORY
            if rc is False or (isinstance(rc, int) and not isinstance(rc, bool)
                               and rc not in (0, CUDA_OUT_OF_MEMORY)):
                raise ChunkError(f"gmem: chunk [{b}, {e}) failed with {rc!r}; stopped after "
                                 f"{self.r.items_done} items", "failed", b, e, self.r)
            oom = isinstance(rc, int) and not isinstance(rc, bool) and rc == CUDA_OUT_OF_MEMORY
            if not oom:
                r = self.r
                r.items_done += e - b
                r.chunks_run += 1
                self.successes += 1
                self.halvings_in_row = self.min_retries = 0
                if self.size < self.target and self.successes >= self.grow_after:
                    self.size = min(self.size * 2, self.target)
                    self.successes = 0
                    r.growths += 1
                if self.on_progress:
                    self.on_progress(r.items_done, self.total, b, e, self.size)
                b = e
                continue
            self.r.ooms += 1
            self.successes = 0
            if e - b <= self.min and self.min_retries < self.retries_at_minimum:
                self.min_retries += 1
                self.empty_cache()
                continue
            if e - b <= self.min:
                raise ChunkError(
                    f"gmem: chunk [{b}, {e}) ran out of memory at the minimum chunk size "
                    f"{self.min} after emptying the cache and {self.min_retries} retries; "
                    f"stopped after {self.r.items_done} items",
                    "out_of_memory_at_minimum", b, e, self.r)
            if self.halvings_in_row >= self.max_halvings:
                raise ChunkError(
                    f"gmem: chunk [{b}, {e}) still ran out of memory after "
                    f"{self.halvings_in_row} halvings in a row (max_halvings); stopped after "
                    f"{self.r.items_done} items", "too_many_halvings", b, e, self.r)
            self.empty_cache()
            self.size = max(self.min, (e - b) // 2)
            self.halvings_in_row += 1
            self.r.halvings += 1


def chunked(total_items, bytes_per_item, fn, plan=None, is_oom=is_out_of_memory,
            empty_cache=_default_empty_cache, on_progress=None, max_halvings=24, grow_after=4,
            retries_at_minimum=1, **plan_options):
    """Calls fn(begin, end) over [0, total_items) in planned chunks; on out of memory (an
    exception is_oom accepts, or a return value of 2) empties the caches (gmem, PyTorch,
    CuPy), halves the chunk and retries the range; grows back after grow_after successes.
    on_progress(items_done, total_items, begin, end, chunk_items). Returns a ChunkResult;
    raises ChunkError when it gives up; other exceptions pass through."""
    if plan is None:
        plan = plan_chunks(total_items, bytes_per_item, **plan_options)
    result = ChunkResult()
    if total_items == 0:
        return result
    runner = _Runner(plan.chunk_items or total_items, plan.min_chunk_items, total_items, is_oom,
                     empty_cache, on_progress, max_halvings, grow_after, retries_at_minimum,
                     result)
    runner.run(0, total_items, fn)
    return result


MEASURED = "measured"  # item_bytes for chunked_iter: measure the cost from the sample


def _measure_usage(device):
    try:
        s = api.stats(device)
    except GmemError:
        return None
    return (s.live_bytes, s.peak_live_bytes) if s.from_pool else None


def chunked_iter(iterable, item_bytes, fn, sample_items=32, is_oom=is_out_of_memory,
                 empty_cache=_default_empty_cache, on_progress=None, max_halvings=24,
                 grow_after=4, retries_at_minimum=1, safety_fraction=0.7, min_chunk_items=1,
                 max_chunk_items=0, fixed_bytes=0, device=-1, available_bytes=None,
                 max_batch_items=1 << 16, read_usage=None, reset_peak=None):
    """Streaming: fn(items, first_index) over batches of an iterable of unknown length.
    item_bytes is a number or a function of an item; the per-item estimate is the largest
    cost seen (first over a sample of sample_items items). Holds at most one batch, and
    never more than max_batch_items items (0 = no cap).

    item_bytes=gmem.MEASURED measures instead (like gmem::measured in C++): resets the
    pool's peaks, runs the sample as one batch, and takes the peak live bytes it added per
    item of its widest successful chunk. read_usage() -> (live, peak) or None and
    reset_peak() -> bool replace gmem.stats()/gmem.reset_peak() (tests); without the shim
    the cost stays 0 and batches stay sample-sized."""
    it = iter(iterable)
    result = ChunkResult()
    per_item, base, buf = 0, 0, []
    retry = (is_oom, empty_cache, on_progress, max_halvings, grow_after, retries_at_minimum)
    if item_bytes == MEASURED:
        sample = list(itertools.islice(it, max(sample_items, 1)))
        if not sample:
            return result
        read = read_usage or (lambda: _measure_usage(device))
        reset = reset_peak or api.reset_peak
        before = read() if reset() else None
        widest = [0]

        def run_sample(b, e):
            rc = fn(sample[b:e], b)
            failed = rc is False or (isinstance(rc, int) and not isinstance(rc, bool) and rc != 0)
            if not failed:
                widest[0] = max(widest[0], e - b)
            return rc

        _Runner(len(sample), min_chunk_items, 0, *retry, result).run(0, len(sample), run_sample)
        after = read() if before is not None else None
        if after is not None and widest[0] and after[1] > before[0]:
            per_item = -(-(after[1] - before[0]) // widest[0])
        base = len(sample)
        measured_cost = per_item
        cost = lambda _item: measured_cost  # noqa: E731
    else:
        cost = item_bytes if callable(item_bytes) else (lambda _item: item_bytes)

    def take(want):
        nonlocal per_item
        for item in itertools.islice(it, max(want - len(buf), 0)):
            buf.append(item)
            per_item = max(per_item, int(cost(item)))

    def target():
        result.bytes_per_item = per_item
        p = plan_chunks(max(len(buf), 1), per_item, safety_fraction, min_chunk_items,
                        max_chunk_items, fixed_bytes, device, available_bytes)
        if p.error:
            return max_chunk_items or len(buf)
        t = len(buf) if per_item == 0 else max(p.budget_bytes - fixed_bytes, 0) // per_item
        if max_chunk_items:
            t = min(t, max_chunk_items)
        if max_batch_items:
            t = min(t, max_batch_items)
        return max(t, p.min_chunk_items)

    take(max(sample_items, 1))
    if not buf:
        return result
    runner = _Runner(target(), min_chunk_items, 0, *retry, result)
    while True:
        take(max(runner.size, len(buf)))
        if not buf:
            break
        runner.set_target(target())
        n = min(len(buf), runner.size)
        runner.run(base, base + n, lambda b, e: fn(buf[b - base:e - base], b))
        del buf[:n]
        base += n
    return result
